/* Unit tests of review custody (dlqb/review.h): the claim and decide gates,
 * ages in review and since a claim (forged times ignored), the tally behind
 * the review gauges, the claim and leave stamps, and the item view of a
 * compliance_review message (hostile text sanitised). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dlqb/review.h"

#define NOW  INT64_C(1796015388000)
#define HOUR INT64_C(3600000)

static dlqb_item item(const char *owner, int64_t escalated_at, int64_t claimed_at) {
  dlqb_item it;
  memset(&it, 0, sizeof it);
  strcpy(it.message_id, "m1");
  strcpy(it.owner, owner);
  if (escalated_at != 0) {
    it.has_escalated_at = true;
    it.escalated_at_ms = escalated_at;
  }
  if (claimed_at != 0) {
    it.has_claimed_at = true;
    it.claimed_at_ms = claimed_at;
  }
  return it;
}

static void test_claim_gate(void **state) {
  (void)state;
  dlqb_item free_ = item("", NOW - HOUR, 0), mine = item("alice", NOW - HOUR, NOW),
            theirs = item("bob", NOW - HOUR, NOW);
  assert_int_equal(dlqb_review_claim_gate(&free_, "alice", false), DLQB_GATE_ALLOW);
  assert_int_equal(dlqb_review_claim_gate(&free_, "alice", true), DLQB_GATE_ALLOW);
  assert_int_equal(dlqb_review_claim_gate(&mine, "alice", false), DLQB_GATE_ALREADY_MINE);
  assert_int_equal(dlqb_review_claim_gate(&theirs, "alice", false), DLQB_GATE_OWNED);
  assert_int_equal(dlqb_review_claim_gate(&theirs, "alice", true), DLQB_GATE_FORCED);
  /* A prefix is not the same name. */
  dlqb_item longer = item("alice2", NOW, NOW);
  assert_int_equal(dlqb_review_claim_gate(&longer, "alice", false), DLQB_GATE_OWNED);
}

static void test_decide_gate(void **state) {
  (void)state;
  dlqb_item free_ = item("", NOW, 0), mine = item("alice", NOW, NOW),
            theirs = item("bob", NOW, NOW);
  assert_int_equal(dlqb_review_decide_gate(&mine, "alice", false), DLQB_GATE_ALLOW);
  assert_int_equal(dlqb_review_decide_gate(&mine, "alice", true), DLQB_GATE_ALLOW);
  assert_int_equal(dlqb_review_decide_gate(&free_, "alice", false), DLQB_GATE_UNCLAIMED);
  assert_int_equal(dlqb_review_decide_gate(&free_, "alice", true), DLQB_GATE_FORCED);
  assert_int_equal(dlqb_review_decide_gate(&theirs, "alice", false), DLQB_GATE_OWNED);
  assert_int_equal(dlqb_review_decide_gate(&theirs, "alice", true), DLQB_GATE_FORCED);
}

static void test_ages(void **state) {
  (void)state;
  uint64_t age;
  dlqb_item it = item("", NOW - 2 * HOUR, 0);
  assert_true(dlqb_review_age(&it, NOW, &age));
  assert_int_equal(age, 2 * HOUR);
  assert_false(dlqb_review_claim_age(&it, NOW, &age)); /* unclaimed */
  /* escalated_at in year 9999: the older dlq_at is the lower bound. */
  it.escalated_at_ms = INT64_C(253402300799000);
  it.has_dlq_at = true;
  it.dlq_at_ms = NOW - 5 * HOUR;
  assert_true(dlqb_review_age(&it, NOW, &age));
  assert_int_equal(age, 5 * HOUR);
  it.has_dlq_at = false;
  assert_false(dlqb_review_age(&it, NOW, &age)); /* nothing usable */
  dlqb_item c = item("bob", NOW - 3 * HOUR, NOW - HOUR);
  assert_true(dlqb_review_claim_age(&c, NOW, &age));
  assert_int_equal(age, HOUR);
  c.claimed_at_ms = NOW + 10 * HOUR; /* forged */
  assert_false(dlqb_review_claim_age(&c, NOW, &age));
  c.claimed_at_ms = NOW + 1000; /* within the skew: age 0 */
  assert_true(dlqb_review_claim_age(&c, NOW, &age));
  assert_int_equal(age, 0);
}

static void test_tally(void **state) {
  (void)state;
  dlqb_review_tally t;
  memset(&t, 0, sizeof t);
  dlqb_item a = item("", NOW - HOUR, 0), b = item("", NOW - 3 * HOUR, 0), c = item("", 0, 0),
            d = item("bob", NOW - 9 * HOUR, NOW - 2 * HOUR), e = item("eve", NOW, 0);
  dlqb_review_tally_add(&t, &a, NOW);
  dlqb_review_tally_add(&t, &b, NOW);
  dlqb_review_tally_add(&t, &c, NOW); /* unknown age: counted, no age */
  dlqb_review_tally_add(&t, &d, NOW);
  dlqb_review_tally_add(&t, &e, NOW); /* claimed without claimed_at */
  assert_int_equal(t.items, 5);
  assert_int_equal(t.unclaimed, 3);
  assert_int_equal(t.claimed, 2);
  assert_true(t.has_oldest_unclaimed);
  assert_int_equal(t.oldest_unclaimed_ms, 3 * HOUR);
  assert_true(t.has_oldest_claimed);
  assert_int_equal(t.oldest_claimed_ms, 2 * HOUR);
  dlqb_review_tally empty;
  memset(&empty, 0, sizeof empty);
  dlqb_review_tally_add(&empty, &e, NOW);
  assert_false(empty.has_oldest_claimed);
  assert_false(empty.has_oldest_unclaimed);
}

static amqp_table_entry_t entry(const char *key, const char *value) {
  amqp_table_entry_t e;
  e.key.bytes = (void *)key;
  e.key.len = strlen(key);
  e.value.kind = AMQP_FIELD_KIND_UTF8;
  e.value.value.bytes.bytes = (void *)value;
  e.value.value.bytes.len = strlen(value);
  return e;
}

/* The wire names are spelled out: a renamed constant must fail here. */
static void test_stamps_and_item_view(void **state) {
  (void)state;
  dlqb_hset sets[DLQB_LEAVE_SETS + DLQB_CLAIM_SETS];
  size_t n = dlqb_review_claim_stamp(sets, "alice", "2026-11-30T05:09:48Z");
  assert_int_equal(n, 2);
  amqp_table_entry_t in[] = {entry("request_id", "r1"), entry("owner", "bob"),
                             entry("escalated_by", "dlq-bridge")};
  amqp_table_t table = {3, in}, out;
  amqp_table_entry_t scratch[16];
  assert_int_equal(dlqb_headers_apply(&table, sets, n, scratch, 16, &out), DLQB_OK);
  amqp_basic_properties_t props;
  memset(&props, 0, sizeof props);
  props._flags = AMQP_BASIC_HEADERS_FLAG;
  props.headers = out;
  dlqb_item it;
  dlqb_item_read(&props, &it);
  assert_string_equal(it.owner, "alice");
  assert_true(it.has_claimed_at);
  assert_string_equal(it.escalated_by, "dlq-bridge");
  n = dlqb_review_leave_stamp(sets);
  assert_int_equal(n, 6);
  amqp_table_t left;
  amqp_table_entry_t scratch2[16];
  assert_int_equal(dlqb_headers_apply(&out, sets, n, scratch2, 16, &left), DLQB_OK);
  assert_int_equal(left.num_entries, 1); /* only request_id stays */
  /* Hostile text: control bytes and escapes never reach a terminal. */
  amqp_table_entry_t bad[] = {entry("owner", "mallory\x1b[2J\n"),
                              entry("escalation_note", "line1\nline2\x07"),
                              entry("escalation_reason", "operator")};
  props.headers = (amqp_table_t){3, bad};
  dlqb_item_read(&props, &it);
  assert_null(strchr(it.owner, '\x1b'));
  assert_null(strchr(it.owner, '\n'));
  assert_null(strchr(it.escalation_note, '\n'));
  assert_null(strchr(it.escalation_note, '\x07'));
  assert_string_equal(it.escalation_reason, "operator");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_claim_gate),
      cmocka_unit_test(test_decide_gate),
      cmocka_unit_test(test_ages),
      cmocka_unit_test(test_tally),
      cmocka_unit_test(test_stamps_and_item_view),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

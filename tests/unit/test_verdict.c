/* Unit tests of the per-item verdict of a pass (dlqb/verdict.h): selection,
 * --limit, the completion ledger, and the SLA escalator's FIFO rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dlqb/verdict.h"

#define NOW  INT64_C(1796015388000)
#define HOUR INT64_C(3600000)

static dlqb_item item(const char *request_id, const char *source, int64_t dlq_at_ms) {
  dlqb_item it;
  memset(&it, 0, sizeof it);
  strcpy(it.request_id, request_id);
  strcpy(it.source_system, source);
  strcpy(it.message_id, request_id);
  if (dlq_at_ms != 0) {
    it.has_dlq_at = true;
    it.dlq_at_ms = dlq_at_ms;
  }
  return it;
}

static dlqb_select select_of(const char *flag, const char *value) {
  dlqb_select s;
  dlqb_error err;
  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, flag, value, &err), DLQB_OK);
  return s;
}

static void test_unmatched_items_are_held(void **state) {
  (void)state;
  dlqb_select s = select_of("source-system", "billing");
  dlqb_verdict_rule r = {.sel = &s};
  dlqb_item crm = item("r1", "crm", NOW - HOUR), billing = item("r2", "billing", NOW - HOUR);
  dlqb_verdict v = dlqb_verdict_of(&r, &crm, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_HOLD);
  assert_false(v.stop_after);
  v = dlqb_verdict_of(&r, &billing, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_TAKE);
  assert_false(v.stop_after);
}

static void test_no_selection_takes_everything(void **state) {
  (void)state;
  dlqb_verdict_rule r = {0};
  dlqb_item it = item("r1", "crm", 0);
  assert_int_equal(dlqb_verdict_of(&r, &it, NOW, 1000).kind, DLQB_VERDICT_TAKE);
}

static void test_limit_holds_the_rest(void **state) {
  (void)state;
  dlqb_select s = select_of("limit", "2");
  dlqb_verdict_rule r = {.sel = &s};
  dlqb_item it = item("r1", "crm", NOW - HOUR);
  assert_int_equal(dlqb_verdict_of(&r, &it, NOW, 1).kind, DLQB_VERDICT_TAKE);
  dlqb_verdict v = dlqb_verdict_of(&r, &it, NOW, 2);
  assert_int_equal(v.kind, DLQB_VERDICT_HOLD);
  assert_false(v.stop_after);
  /* resolve: the pass ends with the one item it takes. */
  r.stop_at_limit = true;
  v = dlqb_verdict_of(&r, &it, NOW, 1);
  assert_int_equal(v.kind, DLQB_VERDICT_TAKE);
  assert_true(v.stop_after);
}

static void test_completed_tasks_are_skipped(void **state) {
  (void)state;
  dlqb_ledger *l = dlqb_ledger_new();
  dlqb_error err;
  assert_int_equal(dlqb_ledger_add(l, "r1", "crm", &err), DLQB_OK);
  dlqb_verdict_rule r = {.ledger = l};
  dlqb_item done = item("r1", "crm", 0), other_source = item("r1", "billing", 0);
  assert_int_equal(dlqb_verdict_of(&r, &done, NOW, 0).kind, DLQB_VERDICT_SKIP_COMPLETE);
  assert_int_equal(dlqb_verdict_of(&r, &other_source, NOW, 0).kind, DLQB_VERDICT_TAKE);
  /* An item without identity is never matched against the ledger. */
  dlqb_item anonymous = item("", "crm", 0);
  assert_int_equal(dlqb_verdict_of(&r, &anonymous, NOW, 0).kind, DLQB_VERDICT_TAKE);
  dlqb_ledger_free(l);
}

static void test_sla_takes_overdue_and_passes_over_the_rest(void **state) {
  (void)state;
  dlqb_verdict_rule r = {.sla = true, .sla_ms = (uint64_t)(24 * HOUR)};
  dlqb_item old = item("r1", "crm", NOW - 25 * HOUR), young = item("r2", "crm", NOW - HOUR);
  dlqb_item unknown = item("r3", "crm", 0);
  assert_int_equal(dlqb_verdict_of(&r, &old, NOW, 0).kind, DLQB_VERDICT_TAKE);
  /* An overdue item may sit behind a young one: the pass goes on. */
  dlqb_verdict v = dlqb_verdict_of(&r, &young, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_HOLD);
  assert_false(v.stop_after);
  /* No time at all: escalated, never held, and never a stop. */
  v = dlqb_verdict_of(&r, &unknown, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_TAKE);
  assert_false(v.stop_after);
  assert_true(v.no_time);
}

static void test_sla_future_dlq_at_never_stops_the_pass(void **state) {
  (void)state;
  dlqb_verdict_rule r = {.sla = true, .sla_ms = (uint64_t)(24 * HOUR)};
  /* Year 9999 at the head: not age 0 (which stopped every pass), not
   * evidence at all: taken as an item without a time. */
  dlqb_item forged = item("f", "crm", INT64_C(253402300799000));
  dlqb_verdict v = dlqb_verdict_of(&r, &forged, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_TAKE);
  assert_false(v.stop_after);
  assert_true(v.no_time);
  /* Its older evidence counts instead: x-death, then first_seen_at. */
  forged.has_xdeath_at = true;
  forged.xdeath_at_ms = NOW - 2 * HOUR;
  v = dlqb_verdict_of(&r, &forged, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_HOLD);
  assert_false(v.stop_after);
  forged.xdeath_at_ms = NOW - 48 * HOUR;
  v = dlqb_verdict_of(&r, &forged, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_TAKE);
  assert_false(v.no_time);
  /* A little in the future is clock skew: age 0, young, held. */
  dlqb_item skewed = item("s", "crm", NOW + DLQB_CLOCK_SKEW_MS);
  v = dlqb_verdict_of(&r, &skewed, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_HOLD);
  assert_false(v.stop_after);
  skewed.dlq_at_ms = NOW + DLQB_CLOCK_SKEW_MS + 1;
  assert_true(dlqb_verdict_of(&r, &skewed, NOW, 0).no_time);
}

static void test_item_age_rule(void **state) {
  (void)state;
  dlqb_item it = item("a", "crm", 0);
  uint64_t age;
  int64_t since;
  assert_false(dlqb_item_age(&it, NOW, &age));
  /* The timestamp property, then first_seen_at, x-death, dlq_at: each one
   * present and usable wins over those before it in this list. */
  it.has_timestamp = true;
  it.timestamp_ms = NOW - 4 * HOUR;
  assert_true(dlqb_item_since(&it, NOW, &since));
  assert_int_equal(since, NOW - 4 * HOUR);
  it.has_first_seen_at = true;
  it.first_seen_at_ms = NOW - 3 * HOUR;
  assert_true(dlqb_item_since(&it, NOW, &since));
  assert_int_equal(since, NOW - 3 * HOUR);
  it.has_xdeath_at = true;
  it.xdeath_at_ms = NOW - 2 * HOUR;
  assert_true(dlqb_item_since(&it, NOW, &since));
  assert_int_equal(since, NOW - 2 * HOUR);
  it.has_dlq_at = true;
  it.dlq_at_ms = NOW - HOUR;
  assert_true(dlqb_item_age(&it, NOW, &age));
  assert_int_equal(age, (uint64_t)HOUR);
  /* A future one is skipped, whichever it is: never read as young. */
  it.dlq_at_ms = NOW + 10 * HOUR;
  it.xdeath_at_ms = NOW + 10 * HOUR;
  assert_true(dlqb_item_age(&it, NOW, &age));
  assert_int_equal(age, (uint64_t)(3 * HOUR));
  it.first_seen_at_ms = it.timestamp_ms = INT64_MAX;
  assert_false(dlqb_item_age(&it, NOW, &age));
  /* Within the skew: age 0. */
  it.dlq_at_ms = NOW + 1000;
  assert_true(dlqb_item_age(&it, NOW, &age));
  assert_int_equal(age, 0);
  /* The end of time does not overflow. */
  assert_true(dlqb_time_usable(INT64_MAX, INT64_MAX - 1));
  assert_false(dlqb_time_usable(INT64_MAX, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unmatched_items_are_held),
      cmocka_unit_test(test_no_selection_takes_everything),
      cmocka_unit_test(test_limit_holds_the_rest),
      cmocka_unit_test(test_completed_tasks_are_skipped),
      cmocka_unit_test(test_sla_takes_overdue_and_passes_over_the_rest),
      cmocka_unit_test(test_sla_future_dlq_at_never_stops_the_pass),
      cmocka_unit_test(test_item_age_rule),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

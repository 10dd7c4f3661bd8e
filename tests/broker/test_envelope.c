/* Invalid envelopes go straight to the DLQ with the reason spelled out, the
 * body byte-identical and the other headers intact; a valid task published
 * the same way is retried instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flow.h"

#define DELIVERY_TIMEOUT_MS 15000

typedef struct {
  const char *name;  /* also the message_id: "inv-<name>" */
  const char *field; /* what last_error must mention */
  void (*spoil)(th_msg *m);
  bool repeats_key; /* the fault is a repeated header key */
} bad_case;

static void no_request_id(th_msg *m) { th_msg_remove(m, "request_id"); }
static void blank_request_id(th_msg *m) { th_msg_set_str(m, "request_id", "   "); }
static void int_request_id(th_msg *m) { th_msg_set_int(m, "request_id", 12345); }
static void no_source_system(th_msg *m) { th_msg_remove(m, "source_system"); }
static void empty_source_system(th_msg *m) { th_msg_set_str(m, "source_system", ""); }
static void unknown_legal_basis(th_msg *m) { th_msg_set_str(m, "legal_basis", "gdpr_art_99"); }
static void unknown_action(th_msg *m) { th_msg_set_str(m, "action", "erase"); }
static void negative_attempt(th_msg *m) { th_msg_set_int(m, "attempt", -1); }
static void text_attempt(th_msg *m) { th_msg_set_str(m, "attempt", "two"); }
static void fractional_attempt(th_msg *m) { th_msg_set_str(m, "attempt", "1.5"); }
static void zero_max_attempts(th_msg *m) { th_msg_set_int(m, "max_attempts", 0); }
static void bad_first_seen_at(th_msg *m) { th_msg_set_str(m, "first_seen_at", "yesterday"); }
static void duplicate_request_id(th_msg *m) { th_msg_add_str(m, "request_id", "other-id"); }
static void duplicate_attempt(th_msg *m) {
  th_msg_add_int(m, "attempt", 0);
  th_msg_add_int(m, "attempt", 1);
}
static void long_last_error(th_msg *m) {
  char text[502];
  memset(text, 'e', 501);
  text[501] = '\0';
  th_msg_set_str(m, "last_error", text);
}

static const bad_case cases[] = {
    {"no-request-id", "request_id", no_request_id, false},
    {"blank-request-id", "request_id", blank_request_id, false},
    {"int-request-id", "request_id", int_request_id, false},
    {"no-source-system", "source_system", no_source_system, false},
    {"empty-source-system", "source_system", empty_source_system, false},
    {"unknown-legal-basis", "legal_basis", unknown_legal_basis, false},
    {"unknown-action", "action", unknown_action, false},
    {"negative-attempt", "attempt", negative_attempt, false},
    {"text-attempt", "attempt", text_attempt, false},
    {"fractional-attempt", "attempt", fractional_attempt, false},
    {"zero-max-attempts", "max_attempts", zero_max_attempts, false},
    {"long-last-error", "last_error", long_last_error, false},
    {"bad-first-seen-at", "first_seen_at", bad_first_seen_at, false},
    {"duplicate-request-id", "request_id", duplicate_request_id, true},
    {"duplicate-attempt", "attempt", duplicate_attempt, true},
};
#define NCASES (sizeof cases / sizeof cases[0])

/* A binary body unique to the case, with NUL bytes in it. */
static size_t case_body(const bad_case *c, unsigned char *buf, size_t cap) {
  size_t n = (size_t)snprintf((char *)buf, cap, "%s", c->name);
  for (size_t i = n; i < n + 64 && i < cap; i++) buf[i] = (unsigned char)(i % 3 == 0 ? 0 : i);
  return n + 64 < cap ? n + 64 : cap;
}

static void build_case(const bad_case *c, th_msg *m) {
  char id[64];
  snprintf(id, sizeof id, "inv-%s", c->name);
  assert_int_equal(th_msg_task(m, id), 0);
  snprintf(m->message_id, sizeof m->message_id, "%s", id);
  unsigned char body[256];
  size_t len = case_body(c, body, sizeof body);
  assert_int_equal(th_msg_set_body(m, body, len), 0);
  assert_int_equal(th_msg_add_str(m, "tenant", "acme"), 0);
  assert_int_equal(th_msg_add_int(m, "priority_hint", 3), 0);
  c->spoil(m);
}

static const bad_case *case_of(const th_msg *m) {
  for (size_t i = 0; i < NCASES; i++) {
    char id[64];
    snprintf(id, sizeof id, "inv-%s", cases[i].name);
    if (strcmp(m->message_id, id) == 0) return &cases[i];
  }
  return NULL;
}

static const char *const env[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms", "DLQ_BRIDGE_RETRY_JITTER=0",
                                  NULL};

/* Whether the bridge can see a repeated header key at all. RabbitMQ 4.0.5
 * rebuilds the header table when it delivers to an AMQP 0-9-1 consumer:
 * keys sorted, and only the first value of a repeated top-level key kept,
 * with no signal (measured with confirms on: nothing lost, bodies
 * identical). 3.10.8 delivers the table as published. */
static bool repeats_reach_the_bridge(void) { return th_broker_version() < 400; }

/* Publishes every bad case to dsr.dlx (as a worker reporting it would) and
 * checks each DLQ copy. */
static void test_invalid_envelopes_go_to_dlq_at_once(void **state) {
  fx_case *t = *state;
  int version = th_broker_version();
  assert_true(version > 0);
  assert_int_equal(fx_start_bridge(t, env), 0);
  th_msg *m = fx_msg(t), *got = fx_msg(t);
  for (size_t i = 0; i < NCASES; i++) {
    th_msg_reset(m);
    build_case(&cases[i], m);
    assert_int_equal(th_publish(t->conn, "dsr.dlx", "", m), 0);
  }
  /* A valid task published the same way: retried, not dead-lettered. */
  th_msg_reset(m);
  assert_int_equal(th_msg_task(m, "valid-control"), 0);
  assert_int_equal(th_publish(t->conn, "dsr.dlx", "", m), 0);

  /* On 4.x the repeated-key cases arrive as valid tasks (the first value
   * of each key) and are retried like the control. */
  size_t expect_dlq = 0, expect_retried = 1;
  for (size_t i = 0; i < NCASES; i++) {
    if (cases[i].repeats_key && !repeats_reach_the_bridge()) expect_retried++;
    else expect_dlq++;
  }
  bool seen[NCASES] = {false};
  for (size_t n = 0; n < expect_dlq; n++) {
    FX_CHECK(t, fx_take(t, "dsr.dlq.manual", got, DELIVERY_TIMEOUT_MS) == 1);
    const bad_case *c = case_of(got);
    if (c == NULL) fprintf(stderr, "unexpected DLQ message '%s'\n", got->message_id);
    assert_non_null(c);
    assert_false(seen[c - cases]);
    assert_true(!c->repeats_key || repeats_reach_the_bridge());
    seen[c - cases] = true;

    const char *why = th_msg_str(got, "last_error");
    printf("%-22s last_error: %s\n", c->name, why ? why : "(none)");
    assert_non_null(why);
    assert_int_equal(strncmp(why, "invalid envelope: ", 18), 0);
    assert_non_null(strstr(why, c->field));
    assert_true(strlen(why) <= 500);
    FX_HDR_STR_EQ(got, "dlq_reason", "invalid_envelope");
    assert_true(th_is_iso_utc(th_msg_str(got, "dlq_at")));

    unsigned char body[256];
    size_t len = case_body(c, body, sizeof body);
    assert_int_equal(got->body_len, len);
    assert_memory_equal(got->body, body, len);
    FX_HDR_STR_EQ(got, "tenant", "acme");
    FX_HDR_INT_EQ(got, "priority_hint", 3);
    assert_string_equal(got->content_type, "application/json");
    assert_string_equal(got->app_id, "broker-tests");
  }
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.work", (long)expect_retried, DELIVERY_TIMEOUT_MS));
  bool control = false;
  for (size_t n = 0; n < expect_retried; n++) {
    assert_int_equal(th_get(t->conn, "dsr.work", got), 1);
    const bad_case *c = case_of(got);
    if (c == NULL) {
      FX_HDR_STR_EQ(got, "request_id", "valid-control");
      control = true;
      continue;
    }
    /* 4.x: what the bridge saw, and so retried, is the first value. */
    printf("%-22s retried on %d.%d with the first value of its repeated key\n", c->name,
           version / 100, version % 100);
    assert_true(c->repeats_key && !seen[c - cases]);
    seen[c - cases] = true;
    char id[64];
    snprintf(id, sizeof id, "inv-%s", c->name);
    FX_HDR_STR_EQ(got, "request_id", id);
    assert_int_equal(th_msg_count(got, "request_id"), 1);
    assert_int_equal(th_msg_count(got, "attempt"), 1);
    FX_HDR_INT_EQ(got, "attempt", 1); /* duplicate-attempt's first value was 0 */
  }
  assert_true(control);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

/* The same check on the other road in: a worker rejects the task-> */
static void test_invalid_envelope_rejected_by_worker(void **state) {
  fx_case *t = *state;
  assert_int_equal(fx_start_bridge(t, env), 0);
  th_msg *m = fx_msg(t), *got = fx_msg(t);
  const bad_case *c = &cases[5]; /* unknown legal_basis */
  build_case(c, m);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", m), 0);
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  FX_CHECK(t, th_worker_next(w, got, DELIVERY_TIMEOUT_MS) == 1);
  assert_int_equal(th_worker_reject(w), 0);

  FX_CHECK(t, fx_take(t, "dsr.dlq.manual", got, DELIVERY_TIMEOUT_MS) == 1);
  assert_ptr_equal(case_of(got), c);
  FX_HDR_STR_EQ(got, "dlq_reason", "invalid_envelope");
  const char *why = th_msg_str(got, "last_error");
  assert_non_null(why);
  assert_non_null(strstr(why, "legal_basis"));
  assert_int_equal(got->body_len, m->body_len);
  assert_memory_equal(got->body, m->body, m->body_len);
  FX_HDR_STR_EQ(got, "legal_basis", "gdpr_art_99"); /* kept as it came */
  assert_int_equal(th_worker_next(w, got, 500), 0); /* no retry */
  assert_int_equal(fx_stop_bridges(t), 0);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_invalid_envelopes_go_to_dlq_at_once),
      FX_TEST(test_invalid_envelope_rejected_by_worker),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

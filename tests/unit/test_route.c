/* Unit tests of the routing plan (dlqb/route.h): target, expiration, header
 * changes and the hop, for each route the daemon can take. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlqb/route.h"
#include "table_builder.h"

#define NOW     INT64_C(1796015388000) /* 2026-11-30T05:09:48Z */
#define NOW_ISO "2026-11-30T05:09:48.000Z"

static void make_cfg(dlqb_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->policy.max_attempts = 3;
  cfg->policy.retry_delays_ms[0] = 1000;
  cfg->policy.retry_delays_ms[1] = 5000;
  cfg->policy.retry_delay_count = 2;
  cfg->policy.retry_jitter_percent = 0;
  cfg->policy.sla_budget_ms = UINT64_C(72) * 3600 * 1000;
  cfg->policy.max_replays = 2;
}

/* A valid task rejected by its worker once (x-death from dsr.work). */
typedef struct {
  tb_table h;
  amqp_table_entry_t death[2];
  amqp_field_value_t deaths[1];
} task;

static void make_task(task *t, int64_t attempt) {
  tb_clear(&t->h);
  tb_add(&t->h, DLQB_H_REQUEST_ID, tb_str("req-1"));
  tb_add(&t->h, DLQB_H_SOURCE_SYSTEM, tb_str("crm"));
  tb_add(&t->h, DLQB_H_LEGAL_BASIS, tb_str("gdpr_art_17"));
  tb_add(&t->h, DLQB_H_ACTION, tb_str("deletion"));
  tb_add(&t->h, DLQB_H_ATTEMPT, tb_i64(attempt));
  tb_add(&t->h, DLQB_H_WORKER_ERROR, tb_str("upstream 503"));
  t->death[0] = tb_entry("reason", tb_str("rejected"));
  t->death[1] = tb_entry("queue", tb_str("dsr.work"));
  t->deaths[0] = tb_table_value(t->death, 2);
  tb_add(&t->h, "x-death", tb_array(t->deaths, 1));
}

static const dlqb_hset *find_set(const dlqb_route_plan *p, const char *key) {
  for (size_t i = 0; i < p->nsets; i++)
    if (strcmp(p->sets[i].key, key) == 0) return &p->sets[i];
  return NULL;
}

static void expect_string_set(const dlqb_route_plan *p, const char *key, const char *value) {
  const dlqb_hset *s = find_set(p, key);
  assert_non_null(s);
  assert_int_equal(s->kind, DLQB_HSET_STRING);
  assert_string_equal(s->str, value);
}

static void expect_removed(const dlqb_route_plan *p, const char *key) {
  const dlqb_hset *s = find_set(p, key);
  assert_non_null(s);
  assert_int_equal(s->kind, DLQB_HSET_REMOVE);
}

static void test_first_failure_is_retried_on_the_first_tier(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  task t;
  make_task(&t, 0);
  dlqb_route_plan p;
  dlqb_route_plan_make(&cfg, &t.h.t, "m-1", NOW, 0, &p);
  assert_true(p.valid);
  assert_int_equal(p.decision.route, DLQB_ROUTE_RETRY);
  assert_string_equal(p.target, "dsr.retry.1s");
  assert_true(p.has_expiration);
  assert_string_equal(p.expiration, "1000");
  const dlqb_hset *a = find_set(&p, DLQB_H_ATTEMPT);
  assert_non_null(a);
  assert_int_equal(a->num, 1);
  assert_int_equal(find_set(&p, DLQB_H_MAX_ATTEMPTS)->num, 3);
  expect_string_set(&p, DLQB_H_FIRST_SEEN_AT, NOW_ISO);
  expect_string_set(&p, DLQB_H_LAST_ERROR, "rejected by worker: upstream 503");
  expect_removed(&p, DLQB_H_WORKER_ERROR);
  expect_removed(&p, DLQB_H_DLQ_REASON);
  assert_null(find_set(&p, DLQB_H_DLQ_AT));
  assert_int_equal(p.hop.event, DLQB_EV_RETRY_SCHEDULED);
  assert_string_equal(p.hop.message_id, "m-1");
  assert_string_equal(p.hop.request_id, "req-1");
  assert_string_equal(p.hop.source_system, "crm");
  assert_string_equal(p.hop.from, DLQB_Q_FAILED);
  assert_string_equal(p.hop.to, "dsr.retry.1s");
  assert_string_equal(p.hop.actor, "system");
  assert_int_equal(p.hop.attempt, 1);
}

static void test_second_failure_uses_the_next_tier_and_keeps_first_seen(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  task t;
  make_task(&t, 1);
  tb_add(&t.h, DLQB_H_FIRST_SEEN_AT, tb_str("2026-11-30T04:00:00Z"));
  dlqb_route_plan p;
  dlqb_route_plan_make(&cfg, &t.h.t, "m-1", NOW, 0, &p);
  assert_string_equal(p.target, "dsr.retry.5s");
  assert_string_equal(p.expiration, "5000");
  /* first_seen_at is never rewritten: the SLA clock runs from the first failure. */
  assert_null(find_set(&p, DLQB_H_FIRST_SEEN_AT));
}

static void test_future_first_seen_is_restamped(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  task t;
  make_task(&t, 1);
  tb_add(&t.h, DLQB_H_FIRST_SEEN_AT, tb_str("2200-01-01T00:00:00Z"));
  dlqb_route_plan p;
  dlqb_route_plan_make(&cfg, &t.h.t, "m-1", NOW, 0, &p);
  /* A claim nothing supports: the budget runs from the bridge's clock now,
   * and from the same stamp at every later failure. */
  const dlqb_hset *fs = find_set(&p, DLQB_H_FIRST_SEEN_AT);
  assert_non_null(fs);
  assert_string_equal(fs->str, p.now_iso);
}

static void test_last_attempt_goes_to_the_dlq(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  task t;
  make_task(&t, 2);
  dlqb_route_plan p;
  dlqb_route_plan_make(&cfg, &t.h.t, "m-1", NOW, 0, &p);
  assert_int_equal(p.decision.route, DLQB_ROUTE_DLQ);
  assert_string_equal(p.target, DLQB_Q_DLQ);
  assert_false(p.has_expiration);
  expect_string_set(&p, DLQB_H_DLQ_REASON, "max_attempts");
  expect_string_set(&p, DLQB_H_DLQ_AT, NOW_ISO);
  assert_null(find_set(&p, "escalated_at"));
  assert_int_equal(p.hop.event, DLQB_EV_DEAD_LETTERED);
  assert_string_equal(p.hop.cause, "max_attempts");
  assert_string_equal(p.hop.to, DLQB_Q_DLQ);
}

/* A producer's body_dropped/body_sha256 on a pipeline that keeps bodies
 * would claim a drop no bridge made: they do not reach the DLQ. */
static void test_forged_body_dropped_is_removed_where_bodies_are_kept(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  task t;
  make_task(&t, 2);
  tb_add(&t.h, DLQB_H_BODY_DROPPED, tb_i64(4096));
  tb_add(&t.h, DLQB_H_BODY_SHA256, tb_str("forged"));
  dlqb_route_plan p;
  dlqb_route_plan_make(&cfg, &t.h.t, "m-1", NOW, 0, &p);
  assert_int_equal(p.decision.route, DLQB_ROUTE_DLQ);
  assert_false(p.drop_body);
  expect_removed(&p, DLQB_H_BODY_DROPPED);
  expect_removed(&p, DLQB_H_BODY_SHA256);
}

static void test_invalid_envelope_goes_to_the_dlq_unchanged_but_for_the_reason(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  tb_table h;
  tb_clear(&h);
  tb_add(&h, DLQB_H_SOURCE_SYSTEM, tb_str("crm"));
  dlqb_route_plan p;
  dlqb_route_plan_make(&cfg, &h.t, "", NOW, 0, &p);
  assert_false(p.valid);
  assert_string_equal(p.target, DLQB_Q_DLQ);
  expect_string_set(&p, DLQB_H_DLQ_REASON, "invalid_envelope");
  /* No retry state is stamped on a task whose envelope is not understood. */
  assert_null(find_set(&p, DLQB_H_ATTEMPT));
  assert_null(find_set(&p, DLQB_H_FIRST_SEEN_AT));
  assert_int_equal(p.hop.event, DLQB_EV_INVALID);
  assert_string_equal(p.hop.request_id, "");
  assert_string_equal(p.hop.source_system, "crm"); /* what identity it has is recorded */
  assert_int_equal(p.hop.attempt, 0);
  /* With a request_id but no source_system: the audit trail still names it. */
  tb_clear(&h);
  tb_add(&h, DLQB_H_REQUEST_ID, tb_str("  R-UINV "));
  dlqb_route_plan_make(&cfg, &h.t, "", NOW, 0, &p);
  assert_false(p.valid);
  assert_string_equal(p.hop.request_id, "R-UINV");
}

static void test_poison_is_dead_lettered_as_such(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  task t;
  make_task(&t, 0);
  t.death[0] = tb_entry("reason", tb_str("delivery_limit"));
  dlqb_route_plan p;
  dlqb_route_plan_make(&cfg, &t.h.t, "m-1", NOW, 0, &p);
  assert_string_equal(p.target, DLQB_Q_DLQ);
  expect_string_set(&p, DLQB_H_DLQ_REASON, "poison");
  assert_int_equal(p.hop.event, DLQB_EV_POISON);
}

static void test_replayed_too_often_is_escalated(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  task t;
  make_task(&t, 2);
  tb_add(&t.h, DLQB_H_REPLAY_COUNT, tb_i64(2));
  dlqb_route_plan p;
  dlqb_route_plan_make(&cfg, &t.h.t, "m-1", NOW, 0, &p);
  assert_string_equal(p.target, DLQB_Q_REVIEW);
  expect_string_set(&p, DLQB_H_DLQ_REASON, "max_attempts");
  expect_string_set(&p, "escalated_by", "dlq-bridge");
  expect_string_set(&p, "escalated_at", NOW_ISO);
  expect_string_set(&p, "escalation_reason", "max_replays");
  assert_int_equal(p.hop.event, DLQB_EV_ESCALATED);
  assert_string_equal(p.hop.cause, "max_replays");
  assert_string_equal(p.hop.to, DLQB_Q_REVIEW);
}

static void test_jitter_shortens_the_delay_within_its_bound(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  cfg.policy.retry_jitter_percent = 20;
  task t;
  make_task(&t, 0);
  for (uint32_t r = 0; r < 64; r++) {
    dlqb_route_plan p;
    dlqb_route_plan_make(&cfg, &t.h.t, "m-1", NOW, r * 0x04000000u, &p);
    long long ms = atoll(p.expiration);
    assert_true(ms >= 800 && ms <= 1000);
    assert_string_equal(p.target, "dsr.retry.1s"); /* the queue is the tier's, not the draw's */
  }
}

/* The hop carries the broker's delivery history for the trail: every
 * x-death entry's queue, reason and count (a client may forge them: they
 * are sanitised text, and a hostile queue name stays one field), and
 * x-delivery-count. */
static void test_hop_records_deaths_and_delivery_count(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  task t;
  make_task(&t, 0);
  amqp_table_entry_t a[3], b[3];
  amqp_field_value_t deaths[3];
  a[0] = tb_entry("reason", tb_str("rejected"));
  a[1] = tb_entry("queue", tb_str("dsr.work"));
  a[2] = tb_entry("count", tb_i64(3));
  b[0] = tb_entry("reason", tb_str("expired"));
  b[1] = tb_entry("queue", tb_str("q\x1b[2J\"\n"));
  b[2] = tb_entry("count", tb_i64(2));
  deaths[0] = tb_table_value(a, 3);
  deaths[1] = tb_table_value(b, 3);
  deaths[2] = tb_str("not a table");
  tb_clear(&t.h);
  tb_add(&t.h, DLQB_H_REQUEST_ID, tb_str("req-1"));
  tb_add(&t.h, DLQB_H_SOURCE_SYSTEM, tb_str("crm"));
  tb_add(&t.h, DLQB_H_LEGAL_BASIS, tb_str("gdpr_art_17"));
  tb_add(&t.h, DLQB_H_ACTION, tb_str("deletion"));
  tb_add(&t.h, DLQB_H_ATTEMPT, tb_i64(0));
  tb_add(&t.h, "x-death", tb_array(deaths, 3));
  tb_add(&t.h, "x-delivery-count", tb_i64(4));
  dlqb_route_plan p;
  dlqb_route_plan_make(&cfg, &t.h.t, "m-1", NOW, 0, &p);
  assert_string_equal(p.hop.deaths, "dsr.work rejected 3; q?[2J\"? expired 2; ?");
  assert_true(p.hop.has_delivery_count);
  assert_int_equal(p.hop.delivery_count, 4);
  /* Forged shapes: an empty array (no entries at all) says nothing, a
   * string is one entry of '?'. */
  t.h.t.num_entries -= 2; /* drop x-death and x-delivery-count */
  tb_add(&t.h, "x-death", tb_array(NULL, 0));
  dlqb_route_plan_make(&cfg, &t.h.t, "m-3", NOW, 0, &p);
  assert_string_equal(p.hop.deaths, "");
  t.h.t.num_entries--;
  tb_add(&t.h, "x-death", tb_str("rejected"));
  dlqb_route_plan_make(&cfg, &t.h.t, "m-4", NOW, 0, &p);
  assert_string_equal(p.hop.deaths, "?");
  /* Without either: nothing claimed. */
  make_task(&t, 0);
  t.h.t.num_entries--; /* drop x-death */
  dlqb_route_plan_make(&cfg, &t.h.t, "m-2", NOW, 0, &p);
  assert_string_equal(p.hop.deaths, "");
  assert_false(p.hop.has_delivery_count);
}

/* The receipt a first failure's hop records: the earliest usable time the
 * task carries, never later than now; the bridge's clock when none. */
static void test_first_failure_records_the_receipt(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  task t;
  amqp_basic_properties_t props;
  dlqb_route_plan p;
  struct {
    const char *first_seen; /* NULL: none */
    uint64_t timestamp;     /* seconds, 0: none */
    int64_t attempt;
    bool recorded;
    int64_t at;
    const char *from;
  } cases[] = {
      /* The producer's stamp. */
      {"2026-11-20T09:00:00Z", 0, 0, true, INT64_C(1795165200000), "first_seen_at"},
      /* The earlier of the stamp and the timestamp property. */
      {"2026-11-20T09:00:00Z", 1795000000, 0, true, INT64_C(1795000000000), "timestamp"},
      /* Nothing on the task: the bridge's first sight. */
      {NULL, 0, 0, true, NOW, "bridge"},
      /* A stamp in the future is no evidence: the bridge's clock. */
      {"2200-01-01T00:00:00Z", 0, 0, true, NOW, "bridge"},
      /* Within the clock skew ahead: cut to the first sight. */
      {"2026-11-30T05:11:48Z", 0, 0, true, NOW, "bridge"},
      /* Not the first failure: nothing recorded. */
      {"2026-11-20T09:00:00Z", 0, 1, false, 0, ""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    make_task(&t, cases[i].attempt);
    if (cases[i].first_seen != NULL)
      tb_add(&t.h, DLQB_H_FIRST_SEEN_AT, tb_str(cases[i].first_seen));
    memset(&props, 0, sizeof props);
    props._flags = AMQP_BASIC_HEADERS_FLAG;
    props.headers = t.h.t;
    if (cases[i].timestamp != 0) {
      props._flags |= AMQP_BASIC_TIMESTAMP_FLAG;
      props.timestamp = cases[i].timestamp;
    }
    dlqb_route_plan_make(&cfg, &t.h.t, "m-1", NOW, 0, &p);
    dlqb_route_plan_receipt(&p, &props, NULL, NOW);
    printf("case %zu: recorded %d at %lld from %s\n", i, p.hop.has_received,
           (long long)p.hop.received_at_ms, p.hop.received_from);
    assert_int_equal(p.hop.has_received, cases[i].recorded);
    if (!cases[i].recorded) continue;
    assert_int_equal(p.hop.received_at_ms, cases[i].at);
    assert_string_equal(p.hop.received_from, cases[i].from);
    assert_string_equal(p.hop.action, "deletion");
  }
  /* An envelope too broken to say its attempt: recorded (its one hop). */
  tb_clear(&t.h);
  tb_add(&t.h, DLQB_H_REQUEST_ID, tb_str("req-1"));
  tb_add(&t.h, DLQB_H_ACTION, tb_str("erase-everything"));
  tb_add(&t.h, DLQB_H_ATTEMPT, tb_str("many"));
  memset(&props, 0, sizeof props);
  props._flags = AMQP_BASIC_HEADERS_FLAG;
  props.headers = t.h.t;
  dlqb_route_plan_make(&cfg, &t.h.t, "m-2", NOW, 0, &p);
  assert_false(p.valid);
  dlqb_route_plan_receipt(&p, &props, NULL, NOW);
  assert_true(p.hop.has_received);
  assert_string_equal(p.hop.received_from, "bridge");
  assert_string_equal(p.hop.action, "erase-everythin"); /* what it carries, cut to fit */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hop_records_deaths_and_delivery_count),
      cmocka_unit_test(test_first_failure_records_the_receipt),
      cmocka_unit_test(test_first_failure_is_retried_on_the_first_tier),
      cmocka_unit_test(test_second_failure_uses_the_next_tier_and_keeps_first_seen),
      cmocka_unit_test(test_future_first_seen_is_restamped),
      cmocka_unit_test(test_last_attempt_goes_to_the_dlq),
      cmocka_unit_test(test_invalid_envelope_goes_to_the_dlq_unchanged_but_for_the_reason),
      cmocka_unit_test(test_poison_is_dead_lettered_as_such),
      cmocka_unit_test(test_forged_body_dropped_is_removed_where_bodies_are_kept),
      cmocka_unit_test(test_replayed_too_often_is_escalated),
      cmocka_unit_test(test_jitter_shortens_the_delay_within_its_bound),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

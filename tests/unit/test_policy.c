/* Unit tests of the routing policy: every branch of dlqb_policy_decide and the failure texts. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "dlqb/policy.h"
#include "dlqb/text.h"

#define NOW        INT64_C(1796015388000) /* 2026-11-30T05:09:48Z */
#define HOUR       INT64_C(3600000)
#define SLA_SUFFIX "; sla budget exhausted: next try would pass the deadline "

/* Filled by hand so these tests do not depend on config.c. */
static void make_cfg(dlqb_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->policy.max_attempts = 5;
  cfg->policy.retry_delays_ms[0] = 1000;
  cfg->policy.retry_delays_ms[1] = 5000;
  cfg->policy.retry_delays_ms[2] = 30000;
  cfg->policy.retry_delay_count = 3;
  cfg->policy.retry_jitter_percent = 0;
  cfg->policy.sla_budget_ms = (uint64_t)(72 * HOUR);
}

static void make_env(dlqb_envelope *env, int64_t attempt, int64_t max_attempts) {
  memset(env, 0, sizeof *env);
  strcpy(env->request_id, "req-1");
  strcpy(env->source_system, "crm");
  strcpy(env->legal_basis, "gdpr_art_17");
  strcpy(env->action, "deletion");
  env->attempt = attempt;
  env->max_attempts = max_attempts;
}

static void make_failure(dlqb_failure *f, dlqb_failure_kind kind, const char *queue,
                         const char *worker_error) {
  memset(f, 0, sizeof *f);
  f->kind = kind;
  if (queue != NULL) snprintf(f->queue, sizeof f->queue, "%s", queue);
  if (worker_error != NULL) {
    f->has_worker_error = true;
    snprintf(f->worker_error, sizeof f->worker_error, "%s", worker_error);
  }
}

/* True when s is printable valid UTF-8: sanitizing it changes nothing. */
static bool is_clean(const char *s) {
  char copy[1024];
  size_t n = strlen(s);
  return n < sizeof copy && dlqb_text_sanitize(copy, sizeof copy, s, n) == n &&
         memcmp(copy, s, n) == 0;
}

static void decide(const dlqb_config *cfg, const dlqb_envelope *env, const dlqb_failure *f,
                   int64_t now, uint32_t random, dlqb_decision *d) {
  memset(d, 0x5a, sizeof *d); /* stale bytes must all be overwritten */
  dlqb_policy_decide(cfg, env, NULL, f, now, random, d);
  assert_true(strlen(d->last_error) <= DLQB_LAST_ERROR_MAX);
  assert_true(is_clean(d->last_error));
}

/* ---- invalid and poison ---------------------------------------------- */

static void test_invalid_envelope(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_failure f;
  dlqb_decision d;
  make_cfg(&cfg);
  make_failure(&f, DLQB_FAIL_REJECTED, "dsr.work", "boom");
  dlqb_policy_decide(&cfg, NULL, "request_id is missing", &f, NOW, 7, &d);
  assert_int_equal(d.route, DLQB_ROUTE_DLQ);
  assert_int_equal(d.reason, DLQB_REASON_INVALID);
  assert_int_equal(d.attempt, 0);
  assert_int_equal(d.delay_ms, 0);
  assert_string_equal(d.last_error, "invalid envelope: request_id is missing");
  dlqb_policy_decide(&cfg, NULL, NULL, &f, NOW, 7, &d);
  assert_int_equal(d.reason, DLQB_REASON_INVALID);
  assert_string_equal(d.last_error, "invalid envelope: unknown problem");
}

static void test_invalid_precedes_poison(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_failure f;
  dlqb_decision d;
  make_cfg(&cfg);
  make_failure(&f, DLQB_FAIL_DELIVERY_LIMIT, "dsr.work", NULL);
  dlqb_policy_decide(&cfg, NULL, "action is blank", &f, NOW, 0, &d);
  assert_int_equal(d.reason, DLQB_REASON_INVALID);
  assert_int_equal(d.attempt, 0);
}

static void test_invalid_text_truncated_at_character(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_failure f;
  dlqb_decision d;
  char why[DLQB_ERROR_MAX];
  const char *prefix = "invalid envelope: ";
  make_cfg(&cfg);
  make_failure(&f, DLQB_FAIL_REPORTED, NULL, NULL);
  why[0] = '\0';
  while (strlen(why) + 3 < sizeof why) strcat(why, "\xe2\x82\xac");
  dlqb_policy_decide(&cfg, NULL, why, &f, NOW, 0, &d);
  /* 18 bytes of prefix + 160 euro signs = 498; a 161st would need 501. */
  assert_int_equal(strlen(d.last_error), 498);
  assert_memory_equal(d.last_error, prefix, strlen(prefix));
  assert_true(is_clean(d.last_error));
}

static void test_poison(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_envelope env;
  dlqb_failure f;
  dlqb_decision d;
  make_cfg(&cfg);
  make_failure(&f, DLQB_FAIL_DELIVERY_LIMIT, "dsr.work", "ignored");
  make_env(&env, 0, 5);
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_DLQ);
  assert_int_equal(d.reason, DLQB_REASON_POISON);
  assert_int_equal(d.attempt, 1);
  assert_string_equal(d.last_error, "poison: repeated consumer crash");
  /* Poison is reported as poison even when attempts ran out too. */
  make_env(&env, 9, 5);
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.reason, DLQB_REASON_POISON);
  assert_int_equal(d.attempt, 10);
}

/* ---- max attempts ---------------------------------------------------- */

static void test_attempts_flip_exactly_at_max(void **state) {
  (void)state;
  static const int64_t maxes[] = {1, 2, 3, 5, 10, 40};
  dlqb_config cfg;
  dlqb_failure f;
  make_cfg(&cfg);
  cfg.policy.sla_budget_ms = UINT64_MAX; /* only the attempt count may stop retries here */
  make_failure(&f, DLQB_FAIL_REJECTED, "dsr.work", NULL);
  for (size_t m = 0; m < sizeof maxes / sizeof maxes[0]; m++) {
    int64_t retries = 0;
    for (int64_t attempt = 0; attempt <= maxes[m]; attempt++) {
      dlqb_envelope env;
      dlqb_decision d;
      make_env(&env, attempt, maxes[m]);
      decide(&cfg, &env, &f, NOW, 0, &d);
      assert_int_equal(d.attempt, attempt + 1);
      if (attempt + 1 < maxes[m]) {
        assert_int_equal(d.route, DLQB_ROUTE_RETRY);
        assert_int_equal(d.reason, DLQB_REASON_NONE);
        retries++;
      } else {
        assert_int_equal(d.route, DLQB_ROUTE_DLQ);
        assert_int_equal(d.reason, DLQB_REASON_MAX_ATTEMPTS);
        assert_string_equal(d.last_error, "rejected by worker");
        assert_int_equal(d.delay_ms, 0);
      }
    }
    /* max_attempts counts deliveries: the first try plus max-1 retries. */
    assert_int_equal(retries, maxes[m] - 1);
  }
}

static void test_max_attempts_precedes_sla(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_envelope env;
  dlqb_failure f;
  dlqb_decision d;
  make_cfg(&cfg);
  cfg.policy.sla_budget_ms = 0;
  make_failure(&f, DLQB_FAIL_REPORTED, NULL, "disk full");
  make_env(&env, 4, 5);
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.reason, DLQB_REASON_MAX_ATTEMPTS);
  assert_string_equal(d.last_error, "worker error: disk full");
}

/* ---- tiers and jitter ------------------------------------------------ */

static void test_tier_selection_and_last_repeats(void **state) {
  (void)state;
  static const struct {
    int64_t attempt;
    size_t tier;
    uint64_t delay;
  } cases[] = {{0, 0, 1000},  {1, 1, 5000},   {2, 2, 30000},     {3, 2, 30000},
               {4, 2, 30000}, {50, 2, 30000}, {999998, 2, 30000}};
  dlqb_config cfg;
  dlqb_failure f;
  make_cfg(&cfg);
  make_failure(&f, DLQB_FAIL_REJECTED, "dsr.work", "upstream 503");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dlqb_envelope env;
    dlqb_decision d;
    make_env(&env, cases[i].attempt, 1000000);
    decide(&cfg, &env, &f, NOW, UINT32_MAX, &d);
    assert_int_equal(d.route, DLQB_ROUTE_RETRY);
    assert_int_equal(d.reason, DLQB_REASON_NONE);
    assert_int_equal(d.delay_tier, cases[i].tier);
    assert_int_equal(d.delay_ms, cases[i].delay);
    assert_string_equal(d.last_error, "rejected by worker: upstream 503");
  }
}

static void test_single_delay_tier(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_failure f;
  make_cfg(&cfg);
  cfg.policy.retry_delay_count = 1;
  make_failure(&f, DLQB_FAIL_REJECTED, NULL, NULL);
  for (int64_t attempt = 0; attempt < 8; attempt++) {
    dlqb_envelope env;
    dlqb_decision d;
    make_env(&env, attempt, 100);
    decide(&cfg, &env, &f, NOW, 12345, &d);
    assert_int_equal(d.route, DLQB_ROUTE_RETRY);
    assert_int_equal(d.delay_tier, 0);
    assert_int_equal(d.delay_ms, 1000);
  }
}

static uint64_t retry_delay(const dlqb_config *cfg, int64_t attempt, uint32_t random) {
  dlqb_envelope env;
  dlqb_failure f;
  dlqb_decision d;
  make_env(&env, attempt, 1000000);
  make_failure(&f, DLQB_FAIL_REJECTED, NULL, NULL);
  decide(cfg, &env, &f, NOW, random, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
  return d.delay_ms;
}

static void test_jitter_bounds(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  cfg.policy.retry_jitter_percent = 20;
  /* random = 0 keeps the full delay; the top draw stays above d*(1-j). */
  assert_int_equal(retry_delay(&cfg, 0, 0), 1000);
  assert_int_equal(retry_delay(&cfg, 0, UINT32_MAX), 801);
  assert_int_equal(retry_delay(&cfg, 0, UINT32_C(0x80000000)), 900);
  assert_int_equal(retry_delay(&cfg, 2, 0), 30000);
  assert_int_equal(retry_delay(&cfg, 2, UINT32_MAX), 24001);
  for (uint64_t r = 0; r <= UINT32_MAX; r += 0x01000193) {
    uint64_t d = retry_delay(&cfg, 1, (uint32_t)r);
    assert_true(d > 4000 && d <= 5000);
  }
  cfg.policy.retry_jitter_percent = 100;
  assert_int_equal(retry_delay(&cfg, 0, 0), 1000);
  assert_int_equal(retry_delay(&cfg, 0, UINT32_MAX), 1); /* never zero for d > 0 */
}

static void test_jitter_zero_and_out_of_range(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  cfg.policy.retry_jitter_percent = 0;
  assert_int_equal(retry_delay(&cfg, 0, UINT32_MAX), 1000);
  assert_int_equal(retry_delay(&cfg, 1, 0x12345678), 5000);
  cfg.policy.retry_jitter_percent = -5; /* treated as no jitter */
  assert_int_equal(retry_delay(&cfg, 0, UINT32_MAX), 1000);
  cfg.policy.retry_jitter_percent = 250; /* treated as 100 */
  assert_int_equal(retry_delay(&cfg, 0, UINT32_MAX), 1);
  cfg.policy.retry_delays_ms[0] = 0;
  assert_int_equal(retry_delay(&cfg, 0, UINT32_MAX), 0);
}

static void test_jitter_huge_delays_do_not_overflow(void **state) {
  (void)state;
  dlqb_config cfg;
  make_cfg(&cfg);
  cfg.policy.sla_budget_ms = UINT64_MAX;
  cfg.policy.retry_delay_count = 1;
  /* Expected values are floor(d * j * r / (100 * 2^32)) done in exact arithmetic. */
  cfg.policy.retry_delays_ms[0] = (UINT64_C(1) << 62) - 1;
  cfg.policy.retry_jitter_percent = 37;
  assert_int_equal(retry_delay(&cfg, 0, 0xDEADBEEF), UINT64_C(3127459602675877806));
  cfg.policy.retry_delays_ms[0] = UINT64_MAX;
  cfg.policy.retry_jitter_percent = 100;
  /* NOW is 0 here so the huge deadline (INT64_MAX) leaves room. */
  dlqb_envelope env;
  dlqb_failure f;
  dlqb_decision d;
  make_env(&env, 0, 10);
  make_failure(&f, DLQB_FAIL_REJECTED, NULL, NULL);
  decide(&cfg, &env, &f, 0, UINT32_MAX, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
  assert_int_equal(d.delay_ms, UINT64_C(4294967296));
  /* Half of UINT64_MAX jittered by at most half still passes INT64_MAX: SLA. */
  cfg.policy.retry_jitter_percent = 50;
  decide(&cfg, &env, &f, 0, UINT32_MAX, &d);
  assert_int_equal(d.route, DLQB_ROUTE_DLQ);
  assert_int_equal(d.reason, DLQB_REASON_SLA_BUDGET);
}

/* ---- sla budget ------------------------------------------------------ */

static void test_sla_boundary(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_envelope env;
  dlqb_failure f;
  dlqb_decision d;
  char iso[DLQB_ISO_TIME_MAX], want[DLQB_LAST_ERROR_MAX + 1];
  make_cfg(&cfg);
  make_failure(&f, DLQB_FAIL_EXPIRED, "dsr.work", NULL);
  make_env(&env, 1, 10); /* tier 1: 5000 ms */
  env.has_first_seen_at = true;
  env.first_seen_at_ms = NOW - 72 * HOUR + 5000;
  /* now + delay == deadline: still allowed. */
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
  assert_int_equal(d.delay_ms, 5000);
  assert_string_equal(d.last_error, "expired in dsr.work");
  /* One millisecond later it would land past the deadline. */
  decide(&cfg, &env, &f, NOW + 1, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_DLQ);
  assert_int_equal(d.reason, DLQB_REASON_SLA_BUDGET);
  assert_int_equal(d.attempt, 2);
  snprintf(want, sizeof want, "expired in dsr.work" SLA_SUFFIX "%s",
           dlqb_iso_time(NOW + 5000, iso, sizeof iso));
  assert_string_equal(d.last_error, want);
  assert_string_equal(iso, "2026-11-30T05:09:53.000Z");
}

static void test_sla_boundary_uses_jittered_delay(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_envelope env;
  dlqb_failure f;
  dlqb_decision d;
  make_cfg(&cfg);
  cfg.policy.retry_jitter_percent = 20;
  make_failure(&f, DLQB_FAIL_REJECTED, NULL, NULL);
  make_env(&env, 0, 10);
  env.has_first_seen_at = true;
  env.first_seen_at_ms = NOW - 72 * HOUR + 801; /* the top draw gives 801 ms */
  decide(&cfg, &env, &f, NOW, UINT32_MAX, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
  assert_int_equal(d.delay_ms, 801);
  decide(&cfg, &env, &f, NOW, 0, &d); /* the full 1000 ms does not fit */
  assert_int_equal(d.reason, DLQB_REASON_SLA_BUDGET);
}

static void test_sla_without_first_seen_uses_now(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_envelope env;
  dlqb_failure f;
  dlqb_decision d;
  make_cfg(&cfg);
  make_failure(&f, DLQB_FAIL_MAXLEN, "dsr.work", NULL);
  make_env(&env, 0, 10);
  cfg.policy.sla_budget_ms = 1000;
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
  assert_string_equal(d.last_error, "dropped by max-length of dsr.work");
  cfg.policy.sla_budget_ms = 999;
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.reason, DLQB_REASON_SLA_BUDGET);
  cfg.policy.sla_budget_ms = 0;
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.reason, DLQB_REASON_SLA_BUDGET);
}

static void test_sla_already_past(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_envelope env;
  dlqb_failure f;
  dlqb_decision d;
  make_cfg(&cfg);
  cfg.policy.retry_delays_ms[0] = 0; /* even a zero delay cannot save it */
  make_failure(&f, DLQB_FAIL_REJECTED, NULL, NULL);
  make_env(&env, 0, 10);
  env.has_first_seen_at = true;
  env.first_seen_at_ms = NOW - 100 * HOUR;
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.reason, DLQB_REASON_SLA_BUDGET);
  /* A first_seen_at in the future counts as now: it leaves no more room
   * than a task first seen now (a producer's year 2200 would otherwise
   * switch the budget off). */
  env.first_seen_at_ms = NOW + HOUR;
  cfg.policy.retry_delays_ms[0] = 1000;
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
  env.first_seen_at_ms = INT64_C(7258118400000); /* 2200-01-01 */
  cfg.policy.sla_budget_ms = (uint64_t)HOUR;
  cfg.policy.retry_delays_ms[0] = (uint64_t)HOUR + 1;
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.reason, DLQB_REASON_SLA_BUDGET);
  cfg.policy.retry_delays_ms[0] = (uint64_t)HOUR;
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
}

static void test_sla_arithmetic_saturates(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_envelope env;
  dlqb_failure f;
  dlqb_decision d;
  make_cfg(&cfg);
  make_failure(&f, DLQB_FAIL_REJECTED, NULL, NULL);
  make_env(&env, 0, 10);
  env.has_first_seen_at = true;
  cfg.policy.sla_budget_ms = UINT64_MAX;
  env.first_seen_at_ms = INT64_MAX - 5;
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
  env.first_seen_at_ms = INT64_MIN;
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY); /* INT64_MIN + 2^64-1 = INT64_MAX */
  /* now near the end of time: now + delay would overflow. */
  cfg.policy.sla_budget_ms = (uint64_t)(72 * HOUR);
  env.first_seen_at_ms = INT64_MAX - 10;
  decide(&cfg, &env, &f, INT64_MAX - 10, 0, &d);
  assert_int_equal(d.reason, DLQB_REASON_SLA_BUDGET);
  decide(&cfg, &env, &f, INT64_MIN, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
  env.first_seen_at_ms = INT64_MIN;
  cfg.policy.sla_budget_ms = 0;
  decide(&cfg, &env, &f, INT64_MIN, 0, &d);
  assert_int_equal(d.reason, DLQB_REASON_SLA_BUDGET);
}

static void test_sla_text_keeps_deadline_when_truncated(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_envelope env;
  dlqb_failure f;
  dlqb_decision d;
  char worker[DLQB_LAST_ERROR_MAX + 1] = "";
  char iso[DLQB_ISO_TIME_MAX], tail[128];
  make_cfg(&cfg);
  cfg.policy.sla_budget_ms = 0;
  while (strlen(worker) + 3 <= DLQB_LAST_ERROR_MAX) strcat(worker, "\xe2\x82\xac");
  make_failure(&f, DLQB_FAIL_REJECTED, NULL, worker);
  make_env(&env, 0, 10);
  decide(&cfg, &env, &f, NOW, 0, &d);
  assert_int_equal(d.reason, DLQB_REASON_SLA_BUDGET);
  snprintf(tail, sizeof tail, SLA_SUFFIX "%s", dlqb_iso_time(NOW, iso, sizeof iso));
  size_t n = strlen(d.last_error), tn = strlen(tail);
  assert_true(n <= DLQB_LAST_ERROR_MAX);
  assert_true(n > DLQB_LAST_ERROR_MAX - 3); /* cut only as far as a character needs */
  assert_string_equal(d.last_error + n - tn, tail);
  assert_memory_equal(d.last_error, "rejected by worker: \xe2\x82\xac", 23);
}

static void test_degenerate_inputs(void **state) {
  (void)state;
  dlqb_config cfg;
  dlqb_envelope env;
  dlqb_decision d;
  make_cfg(&cfg);
  make_env(&env, 0, 10);
  /* No failure description at all reads as an unexplained failure. */
  decide(&cfg, &env, NULL, NOW, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
  assert_string_equal(d.last_error, "failed without a reason");
  /* No configured delays: retry at once rather than read out of bounds. */
  cfg.policy.retry_delay_count = 0;
  decide(&cfg, &env, NULL, NOW, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_RETRY);
  assert_int_equal(d.delay_ms, 0);
  /* A count beyond the array is clamped to the array. */
  make_cfg(&cfg);
  cfg.policy.retry_delay_count = 1000;
  cfg.policy.retry_delays_ms[DLQB_MAX_RETRY_DELAYS - 1] = 77;
  make_env(&env, 500, 1000);
  decide(&cfg, &env, NULL, NOW, 0, &d);
  assert_int_equal(d.delay_tier, DLQB_MAX_RETRY_DELAYS - 1);
  assert_int_equal(d.delay_ms, 77);
  /* No configuration: nothing sane to do but dead-letter. */
  decide(NULL, &env, NULL, NOW, 0, &d);
  assert_int_equal(d.route, DLQB_ROUTE_DLQ);
  dlqb_policy_decide(&cfg, &env, NULL, NULL, NOW, 0, NULL); /* must not crash */
}

/* ---- failure text and reason names ----------------------------------- */

static void expect_text(dlqb_failure_kind kind, const char *queue, const char *worker,
                        const char *want) {
  dlqb_failure f;
  char buf[DLQB_LAST_ERROR_MAX + 1];
  make_failure(&f, kind, queue, worker);
  assert_ptr_equal(dlqb_failure_text(&f, buf, sizeof buf), buf);
  assert_string_equal(buf, want);
}

static void test_failure_texts(void **state) {
  (void)state;
  char buf[64];
  expect_text(DLQB_FAIL_REJECTED, "q", NULL, "rejected by worker");
  expect_text(DLQB_FAIL_REJECTED, "q", "upstream 503", "rejected by worker: upstream 503");
  expect_text(DLQB_FAIL_DELIVERY_LIMIT, "q", "x", "poison: repeated consumer crash");
  expect_text(DLQB_FAIL_EXPIRED, "dsr.work", NULL, "expired in dsr.work");
  expect_text(DLQB_FAIL_EXPIRED, "", NULL, "expired");
  expect_text(DLQB_FAIL_MAXLEN, "dsr.work", NULL, "dropped by max-length of dsr.work");
  expect_text(DLQB_FAIL_MAXLEN, "", NULL, "dropped by max-length");
  expect_text(DLQB_FAIL_REPORTED, "", "disk full", "worker error: disk full");
  expect_text(DLQB_FAIL_REPORTED, "", NULL, "failed without a reason");
  expect_text((dlqb_failure_kind)99, "", NULL, "failed without a reason");
  assert_ptr_equal(dlqb_failure_text(NULL, buf, sizeof buf), buf);
  assert_string_equal(buf, "failed without a reason");
  assert_null(dlqb_failure_text(NULL, NULL, 10));
}

static void test_failure_text_bounds(void **state) {
  (void)state;
  dlqb_failure f;
  char buf[DLQB_LAST_ERROR_MAX + 100], small[12];
  make_failure(&f, DLQB_FAIL_REJECTED, NULL, NULL);
  f.has_worker_error = true;
  f.worker_error[0] = '\0';
  while (strlen(f.worker_error) + 2 <= DLQB_LAST_ERROR_MAX) strcat(f.worker_error, "\xc3\xa9");
  dlqb_failure_text(&f, buf, sizeof buf);
  assert_true(strlen(buf) <= DLQB_LAST_ERROR_MAX);
  assert_true(is_clean(buf));
  /* "rejected by worker: " is 20 bytes; 240 two-byte characters fill 500. */
  assert_int_equal(strlen(buf), 500);
  dlqb_failure_text(&f, small, sizeof small);
  assert_string_equal(small, "rejected by");
  /* Unterminated fields and hostile bytes are still bounded and clean. */
  memset(f.worker_error, 0xff, sizeof f.worker_error);
  memset(f.queue, '\n', sizeof f.queue);
  dlqb_failure_text(&f, buf, sizeof buf);
  assert_true(strlen(buf) <= DLQB_LAST_ERROR_MAX);
  assert_true(is_clean(buf));
  f.kind = DLQB_FAIL_EXPIRED;
  dlqb_failure_text(&f, buf, sizeof buf);
  assert_true(is_clean(buf));
  assert_int_equal(strlen(buf), strlen("expired in ") + sizeof f.queue);
}

static void test_reason_names(void **state) {
  (void)state;
  assert_string_equal(dlqb_reason_name(DLQB_REASON_NONE), "");
  assert_string_equal(dlqb_reason_name(DLQB_REASON_MAX_ATTEMPTS), "max_attempts");
  assert_string_equal(dlqb_reason_name(DLQB_REASON_SLA_BUDGET), "sla_budget");
  assert_string_equal(dlqb_reason_name(DLQB_REASON_POISON), "poison");
  assert_string_equal(dlqb_reason_name(DLQB_REASON_INVALID), "invalid_envelope");
  assert_string_equal(dlqb_reason_name((dlqb_reason)42), "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_invalid_envelope),
      cmocka_unit_test(test_invalid_precedes_poison),
      cmocka_unit_test(test_invalid_text_truncated_at_character),
      cmocka_unit_test(test_poison),
      cmocka_unit_test(test_attempts_flip_exactly_at_max),
      cmocka_unit_test(test_max_attempts_precedes_sla),
      cmocka_unit_test(test_tier_selection_and_last_repeats),
      cmocka_unit_test(test_single_delay_tier),
      cmocka_unit_test(test_jitter_bounds),
      cmocka_unit_test(test_jitter_zero_and_out_of_range),
      cmocka_unit_test(test_jitter_huge_delays_do_not_overflow),
      cmocka_unit_test(test_sla_boundary),
      cmocka_unit_test(test_sla_boundary_uses_jittered_delay),
      cmocka_unit_test(test_sla_without_first_seen_uses_now),
      cmocka_unit_test(test_sla_already_past),
      cmocka_unit_test(test_sla_arithmetic_saturates),
      cmocka_unit_test(test_sla_text_keeps_deadline_when_truncated),
      cmocka_unit_test(test_degenerate_inputs),
      cmocka_unit_test(test_failure_texts),
      cmocka_unit_test(test_failure_text_bounds),
      cmocka_unit_test(test_reason_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the drain's pure part (dlqb/drain.h): which items the
 * policy makes eligible, and the ramp's decisions: canary, wait, steps
 * up to the ceiling, and every way a run ends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlqb/drain.h"
#include "dlqb/group.h"

#define T0 INT64_C(1796015388000)

static dlqb_item item(const char *reason, const char *source, const char *last_error) {
  dlqb_item it;
  memset(&it, 0, sizeof it);
  strcpy(it.request_id, "R-1");
  strcpy(it.source_system, source);
  strcpy(it.dlq_reason, reason);
  strcpy(it.last_error, last_error);
  return it;
}

static dlqb_config config(void) {
  dlqb_config c;
  dlqb_config_defaults(&c);
  return c;
}

static void set(dlqb_config *c, const char *key, const char *value) {
  dlqb_error err;
  assert_int_equal(dlqb_config_set(c, key, value, key, &err), DLQB_OK);
}

/* ---- eligibility ---- */

static void test_default_policy_takes_max_attempts_only(void **state) {
  (void)state;
  dlqb_config c = config();
  dlqb_item ok = item("max_attempts", "crm", "upstream 503");
  assert_true(dlqb_drain_eligible(&c, &ok));
  /* Never poison, invalid_envelope or an SLA-exhausted item by default. */
  static const char *const others[] = {"poison", "invalid_envelope", "sla_budget", "",
                                       "MAX_ATTEMPTS"};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    dlqb_item it = item(others[i], "crm", "x");
    assert_false(dlqb_drain_eligible(&c, &it));
  }
}

static void test_poison_only_when_listed(void **state) {
  (void)state;
  dlqb_config c = config();
  set(&c, "drain_reasons", " max_attempts , poison ");
  dlqb_item p = item("poison", "crm", "crash");
  assert_true(dlqb_drain_eligible(&c, &p));
  dlqb_item inv = item("invalid_envelope", "crm", "crash");
  assert_false(dlqb_drain_eligible(&c, &inv));
}

static void test_sources_and_errors(void **state) {
  (void)state;
  dlqb_config c = config();
  set(&c, "drain_sources", "crm,billing");
  set(&c, "drain_errors", "Upstream  503|timeout");
  dlqb_item a = item("max_attempts", "crm", "rejected by worker: UPSTREAM 503 from api");
  assert_true(dlqb_drain_eligible(&c, &a));
  dlqb_item b = item("max_attempts", "billing", "worker error:\ttimeout\n");
  assert_true(dlqb_drain_eligible(&c, &b));
  dlqb_item other_source = item("max_attempts", "hr", "timeout");
  assert_false(dlqb_drain_eligible(&c, &other_source));
  /* "crm" is a list entry, not a prefix. */
  dlqb_item prefix = item("max_attempts", "crm2", "timeout");
  assert_false(dlqb_drain_eligible(&c, &prefix));
  dlqb_item other_error = item("max_attempts", "crm", "schema mismatch");
  assert_false(dlqb_drain_eligible(&c, &other_error));
}

static void test_empty_patterns_never_match_everything(void **state) {
  (void)state;
  dlqb_config c = config();
  /* "||" holds no pattern: nothing matches (it is not "any"). */
  set(&c, "drain_errors", " | ");
  dlqb_item it = item("max_attempts", "crm", "anything");
  assert_false(dlqb_drain_eligible(&c, &it));
}

static void test_untrackable_items_are_never_eligible(void **state) {
  (void)state;
  dlqb_config c = config();
  dlqb_item no_id = item("max_attempts", "crm", "x");
  no_id.request_id[0] = '\0';
  assert_false(dlqb_drain_eligible(&c, &no_id));
  dlqb_item no_src = item("max_attempts", "", "x");
  assert_false(dlqb_drain_eligible(&c, &no_src));
}

static void test_groups(void **state) {
  (void)state;
  dlqb_config c = config();
  dlqb_item a = item("max_attempts", "crm", "upstream 503 for R-2026-11-1001");
  dlqb_item b = item("max_attempts", "crm", "schema mismatch in field 7");
  char ga[DLQB_GROUP_ID_BUF], gb[DLQB_GROUP_ID_BUF];
  dlqb_group_of(&a, ga, NULL, 0);
  dlqb_group_of(&b, gb, NULL, 0);
  assert_string_not_equal(ga, gb);
  /* Listed in upper case, compared without it. */
  char list[64], upper[DLQB_GROUP_ID_BUF];
  for (size_t i = 0; i < sizeof upper; i++)
    upper[i] = ga[i] >= 'a' && ga[i] <= 'f' ? (char)(ga[i] - 'a' + 'A') : ga[i];
  snprintf(list, sizeof list, "000000000000, %s", upper);
  set(&c, "drain_groups", list);
  dlqb_error err;
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_OK);
  assert_true(dlqb_drain_eligible(&c, &a));
  assert_false(dlqb_drain_eligible(&c, &b));
  /* Same text, another task: the same group. */
  dlqb_item a2 = item("max_attempts", "crm", "upstream 503 for R-2026-11-2002");
  assert_true(dlqb_drain_eligible(&c, &a2));
  /* A group does not override drain_reasons: a poison item of a listed
   * group stays out. */
  dlqb_item p = item("poison", "crm", "upstream 503 for R-2026-11-1001");
  char gp[DLQB_GROUP_ID_BUF];
  dlqb_group_of(&p, gp, NULL, 0);
  snprintf(list, sizeof list, "%s", gp);
  set(&c, "drain_groups", list);
  assert_false(dlqb_drain_eligible(&c, &p));
  /* Not a group id: refused, so a typo cannot match nothing in silence. */
  set(&c, "drain_groups", "abc123");
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "not a group id"));
  set(&c, "drain_groups", "0123456789abcdef");
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_EINVAL);
}

static void test_start_above_ceiling_is_refused(void **state) {
  (void)state;
  dlqb_config c = config();
  set(&c, "drain_start_rate", "100");
  dlqb_error err;
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "drain_max_rate"));
}

/* ---- the ramp ---- */

static dlqb_drain_params params(void) {
  dlqb_drain_params p = {.canary = 5,
                         .canary_timeout_ms = 60000,
                         .start_rate = 2,
                         .step_factor = 3,
                         .max_rate = 50,
                         .step_ms = 10000,
                         .failure_threshold = 3,
                         .failure_window_ms = 60000,
                         .max_items = 0};
  return p;
}

/* Runs the canary phase to a pass: moves `moved` of 5, all complete. */
static void pass_canary(dlqb_drain_ramp *r, uint64_t moved) {
  dlqb_drain_action a = dlqb_drain_next(r, T0);
  assert_int_equal(a.kind, DLQB_DRAIN_MOVE);
  assert_true(a.canary);
  assert_int_equal(a.limit, 5);
  assert_true(a.rate == r->p.start_rate);
  dlqb_drain_moved(r, a.limit, moved, T0);
  assert_int_equal(dlqb_drain_next(r, T0 + 1000).kind, DLQB_DRAIN_WAIT_CANARY);
  dlqb_drain_canary(r, moved - 1, 0);
  assert_int_equal(dlqb_drain_next(r, T0 + 2000).kind, DLQB_DRAIN_WAIT_CANARY);
  dlqb_drain_canary(r, moved, 0);
}

static void test_canary_then_ramp_to_the_ceiling(void **state) {
  (void)state;
  dlqb_drain_params p = params();
  dlqb_drain_ramp r;
  dlqb_drain_init(&r, &p);
  pass_canary(&r, 5);
  /* Steps of 10 s: 2/s (20), 6/s (60), 18/s (180), 50/s (500: capped), 50/s. */
  static const double rates[] = {2, 6, 18, 50, 50};
  for (size_t i = 0; i < 5; i++) {
    dlqb_drain_action a = dlqb_drain_next(&r, T0 + 3000);
    assert_int_equal(a.kind, DLQB_DRAIN_MOVE);
    assert_false(a.canary);
    assert_true(a.rate == rates[i]);
    assert_int_equal(a.limit, (uint64_t)(rates[i] * 10));
    dlqb_drain_moved(&r, a.limit, a.limit, T0 + 4000);
  }
  /* A step that finds fewer than it asked for: drained. */
  dlqb_drain_action a = dlqb_drain_next(&r, T0 + 5000);
  dlqb_drain_moved(&r, a.limit, 7, T0 + 5000);
  assert_int_equal(dlqb_drain_next(&r, T0 + 6000).kind, DLQB_DRAIN_END);
  assert_int_equal(r.stop, DLQB_DRAIN_DRAINED);
  assert_int_equal(r.moved, 5 + 20 + 60 + 180 + 500 + 500 + 7);
  assert_int_equal(r.step, 6);
  assert_string_equal(dlqb_drain_stop_name(r.stop), "drained");
}

static void test_empty_dlq_ends_at_once(void **state) {
  (void)state;
  dlqb_drain_params p = params();
  dlqb_drain_ramp r;
  dlqb_drain_init(&r, &p);
  dlqb_drain_action a = dlqb_drain_next(&r, T0);
  dlqb_drain_moved(&r, a.limit, 0, T0);
  assert_int_equal(dlqb_drain_next(&r, T0).kind, DLQB_DRAIN_END);
  assert_int_equal(r.stop, DLQB_DRAIN_DRAINED);
}

static void test_small_dlq_is_all_canary(void **state) {
  (void)state;
  dlqb_drain_params p = params();
  dlqb_drain_ramp r;
  dlqb_drain_init(&r, &p);
  pass_canary(&r, 3); /* only 3 eligible: the canary took them all */
  assert_int_equal(dlqb_drain_next(&r, T0 + 3000).kind, DLQB_DRAIN_END);
  assert_int_equal(r.stop, DLQB_DRAIN_DRAINED);
  assert_int_equal(r.moved, 3);
}

static void test_canary_failure_stops(void **state) {
  (void)state;
  dlqb_drain_params p = params();
  dlqb_drain_ramp r;
  dlqb_drain_init(&r, &p);
  dlqb_drain_action a = dlqb_drain_next(&r, T0);
  dlqb_drain_moved(&r, a.limit, 5, T0);
  /* Four complete, one failed: one is enough. */
  dlqb_drain_canary(&r, 4, 1);
  assert_int_equal(dlqb_drain_next(&r, T0 + 1000).kind, DLQB_DRAIN_END);
  assert_int_equal(r.stop, DLQB_DRAIN_CANARY_FAILED);
  assert_int_equal(r.moved, 5);
  /* After an end nothing more is asked for, and later reports do not
   * change why it ended. */
  dlqb_drain_refailed(&r, T0 + 2000);
  assert_int_equal(r.stop, DLQB_DRAIN_CANARY_FAILED);
  assert_int_equal(dlqb_drain_next(&r, T0 + 3000).kind, DLQB_DRAIN_END);
}

static void test_canary_timeout(void **state) {
  (void)state;
  dlqb_drain_params p = params();
  dlqb_drain_ramp r;
  dlqb_drain_init(&r, &p);
  dlqb_drain_action a = dlqb_drain_next(&r, T0);
  dlqb_drain_moved(&r, a.limit, 5, T0);
  dlqb_drain_canary(&r, 4, 0);
  assert_int_equal(dlqb_drain_next(&r, T0 + 59999).kind, DLQB_DRAIN_WAIT_CANARY);
  assert_int_equal(dlqb_drain_next(&r, T0 + 60000).kind, DLQB_DRAIN_END);
  assert_int_equal(r.stop, DLQB_DRAIN_CANARY_TIMEOUT);
}

static void test_refailures_within_the_window_stop(void **state) {
  (void)state;
  dlqb_drain_params p = params();
  dlqb_drain_ramp r;
  dlqb_drain_init(&r, &p);
  pass_canary(&r, 5);
  dlqb_drain_action a = dlqb_drain_next(&r, T0);
  dlqb_drain_moved(&r, a.limit, a.limit, T0);
  /* Three re-failures, but spread over more than the window: running. */
  dlqb_drain_refailed(&r, T0);
  dlqb_drain_refailed(&r, T0 + 40000);
  dlqb_drain_refailed(&r, T0 + 70000); /* T0 fell out of the window */
  assert_int_equal(dlqb_drain_next(&r, T0 + 70000).kind, DLQB_DRAIN_MOVE);
  /* A third within 60 s of the second: stop. */
  dlqb_drain_refailed(&r, T0 + 90000);
  assert_int_equal(dlqb_drain_next(&r, T0 + 90000).kind, DLQB_DRAIN_END);
  assert_int_equal(r.stop, DLQB_DRAIN_REFAILURES);
  assert_int_equal(r.refailures, 4);
  /* The pass that saw them had moved its items before reaching the DLQ's
   * tail: they count. */
  uint64_t before = r.moved;
  dlqb_drain_moved(&r, 60, 60, T0 + 91000);
  assert_int_equal(r.moved, before + 60);
  assert_int_equal(r.stop, DLQB_DRAIN_REFAILURES);
}

static void test_max_items_bounds_every_pass(void **state) {
  (void)state;
  dlqb_drain_params p = params();
  p.max_items = 12;
  dlqb_drain_ramp r;
  dlqb_drain_init(&r, &p);
  pass_canary(&r, 5);
  dlqb_drain_action a = dlqb_drain_next(&r, T0);
  assert_int_equal(a.kind, DLQB_DRAIN_MOVE);
  assert_int_equal(a.limit, 7); /* 20 wanted, 7 allowed */
  dlqb_drain_moved(&r, a.limit, 7, T0);
  assert_int_equal(dlqb_drain_next(&r, T0).kind, DLQB_DRAIN_END);
  assert_int_equal(r.stop, DLQB_DRAIN_MAX_ITEMS);
  assert_int_equal(r.moved, 12);
}

static void test_canary_capped_by_max_items(void **state) {
  (void)state;
  dlqb_drain_params p = params();
  p.max_items = 2;
  dlqb_drain_ramp r;
  dlqb_drain_init(&r, &p);
  dlqb_drain_action a = dlqb_drain_next(&r, T0);
  assert_int_equal(a.limit, 2);
}

static void test_end_from_outside_keeps_first_reason(void **state) {
  (void)state;
  dlqb_drain_params p = params();
  dlqb_drain_ramp r;
  dlqb_drain_init(&r, &p);
  dlqb_drain_end(&r, DLQB_DRAIN_INTERRUPTED);
  dlqb_drain_end(&r, DLQB_DRAIN_ERROR);
  assert_int_equal(r.stop, DLQB_DRAIN_INTERRUPTED);
  assert_int_equal(dlqb_drain_next(&r, T0).kind, DLQB_DRAIN_END);
  assert_string_equal(dlqb_drain_stop_name(DLQB_DRAIN__STOPS), "unknown");
}

static void test_slow_rate_still_moves_one(void **state) {
  (void)state;
  dlqb_drain_params p = params();
  p.start_rate = 1;
  p.step_ms = 100; /* 0.1 item per step: still one */
  dlqb_drain_ramp r;
  dlqb_drain_init(&r, &p);
  pass_canary(&r, 5);
  dlqb_drain_action a = dlqb_drain_next(&r, T0);
  assert_int_equal(a.limit, 1);
}

static void test_params_from_config(void **state) {
  (void)state;
  dlqb_config c = config();
  dlqb_drain_params p;
  dlqb_drain_params_from(&c, &p);
  assert_int_equal(p.canary, 5);
  assert_int_equal(p.canary_timeout_ms, 600000);
  assert_int_equal(p.start_rate, 1);
  assert_int_equal(p.step_factor, 2);
  assert_int_equal(p.max_rate, 50);
  assert_int_equal(p.step_ms, 30000);
  assert_int_equal(p.failure_threshold, 3);
  assert_int_equal(p.failure_window_ms, 300000);
  assert_int_equal(p.max_items, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default_policy_takes_max_attempts_only),
      cmocka_unit_test(test_poison_only_when_listed),
      cmocka_unit_test(test_sources_and_errors),
      cmocka_unit_test(test_empty_patterns_never_match_everything),
      cmocka_unit_test(test_untrackable_items_are_never_eligible),
      cmocka_unit_test(test_groups),
      cmocka_unit_test(test_start_above_ceiling_is_refused),
      cmocka_unit_test(test_canary_then_ramp_to_the_ceiling),
      cmocka_unit_test(test_empty_dlq_ends_at_once),
      cmocka_unit_test(test_small_dlq_is_all_canary),
      cmocka_unit_test(test_canary_failure_stops),
      cmocka_unit_test(test_canary_timeout),
      cmocka_unit_test(test_refailures_within_the_window_stop),
      cmocka_unit_test(test_max_items_bounds_every_pass),
      cmocka_unit_test(test_canary_capped_by_max_items),
      cmocka_unit_test(test_end_from_outside_keeps_first_reason),
      cmocka_unit_test(test_slow_rate_still_moves_one),
      cmocka_unit_test(test_params_from_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Conservation under load: 240 tasks with unique request_ids; the worker
 * acks most, rejects some once or always, reports errors, and crashes on a
 * few. At the end every task is completed or in exactly one queue: none lost,
 * none duplicated. Run with one bridge and with two bridges at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

#include "flow.h"

#define TASKS 240

/* Checks the exact outcome the fates in flow_fate_of predict. */
static void expect_conserved(fx_case *t, const flow_opts *o, const flow_result *r) {
  int reject_always = 0, crash_always = 0;
  for (int i = 0; i < o->tasks; i++) {
    reject_always += flow_fate_of(i) == FLOW_REJECT_ALWAYS;
    crash_always += flow_fate_of(i) == FLOW_CRASH_ALWAYS;
  }
  FX_CHECK(t, r->settled);
  assert_int_equal(r->lost, 0);
  assert_int_equal(r->duplicates, 0);
  assert_int_equal(r->foreign, 0);
  assert_int_equal(r->in_other, 0);
  assert_int_equal(r->completed + r->in_dlq, o->tasks);
  assert_int_equal(r->dlq_max_attempts, reject_always);
  assert_int_equal(r->dlq_poison, crash_always);
  assert_int_equal(r->dlq_other, 0);
  assert_int_equal(r->bridge_exit_failures, 0);
}

static void test_conservation_one_bridge(void **state) {
  fx_case *t = *state;
  flow_opts o = {.tasks = TASKS, .bridges = 1, .retry_delays = "100ms,200ms", .timeout_ms = 120000};
  flow_result r;
  assert_int_equal(flow_run(t, &o, &r), 0);
  flow_print("one bridge", &o, &r);
  expect_conserved(t, &o, &r);
}

static void test_conservation_two_bridges(void **state) {
  fx_case *t = *state;
  flow_opts o = {.tasks = TASKS, .bridges = 2, .retry_delays = "100ms,200ms", .timeout_ms = 120000};
  flow_result r;
  assert_int_equal(flow_run(t, &o, &r), 0);
  flow_print("two bridges", &o, &r);
  expect_conserved(t, &o, &r);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_conservation_one_bridge),
      FX_TEST(test_conservation_two_bridges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

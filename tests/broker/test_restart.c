/* A broker restart in the middle of a flow: the node is stopped and started
 * while the bridge routes; the bridge reconnects by itself and no task is
 * lost. Duplicates are allowed (delivery is at-least-once across a restart)
 * and reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

#include "flow.h"

static void test_broker_restart_mid_flow(void **state) {
  fx_case *t = *state;
  /* Delays of seconds, so that tasks wait in the delay queues across the restart. */
  flow_opts o = {
      .tasks = 240, .bridges = 1, .restart = true, .retry_delays = "1s,2s", .timeout_ms = 200000};
  flow_result r;
  assert_int_equal(flow_run(t, &o, &r), 0);
  flow_print("broker restart", &o, &r);
  if (r.duplicates > 0) printf("note: %d duplicate copies after the restart\n", r.duplicates);
  FX_CHECK(t, r.reconnected);
  FX_CHECK(t, r.settled);
  assert_int_equal(r.lost, 0);
  assert_int_equal(r.foreign, 0);
  assert_int_equal(r.in_other, 0);
  assert_true(r.completed + r.in_dlq >= o.tasks);
  assert_int_equal(r.bridge_exit_failures, 0);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_broker_restart_mid_flow),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Poison tasks: a worker that dies holding a task (prefetch 1, TCP dropped
 * without ack or close) makes the broker count deliveries; past the poison
 * threshold the task reaches the DLQ as poison, whatever its attempt. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "flow.h"

#define DELIVERY_TIMEOUT_MS 15000

static const char *const fast_env[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms", "DLQ_BRIDGE_RETRY_JITTER=0",
                                       NULL};

/* A fresh worker receives request_id and crashes holding it. */
static void crash_on(fx_case *t, const char *request_id, th_msg *got) {
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  FX_CHECK(t, th_worker_next(w, got, DELIVERY_TIMEOUT_MS) == 1);
  FX_HDR_STR_EQ(got, "request_id", request_id);
  fx_crash(t, w);
}

static void expect_poison(fx_case *t, const char *request_id, th_msg *got) {
  FX_CHECK(t, fx_take(t, "dsr.dlq.manual", got, DELIVERY_TIMEOUT_MS) == 1);
  FX_HDR_STR_EQ(got, "request_id", request_id);
  FX_HDR_STR_EQ(got, "dlq_reason", "poison");
  FX_HDR_STR_EQ(got, "last_error", "poison: repeated consumer crash");
  assert_true(th_is_iso_utc(th_msg_str(got, "dlq_at")));
}

static void test_two_crashes_make_poison(void **state) {
  fx_case *t = *state;
  assert_int_equal(fx_start_bridge(t, fast_env), 0);
  th_msg *task = fx_msg(t), *got = fx_msg(t);
  assert_int_equal(th_msg_task(task, "poison-1"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", task), 0);

  crash_on(t, "poison-1", got);
  assert_false(got->redelivered);
  crash_on(t, "poison-1", got);
  assert_true(got->redelivered);

  expect_poison(t, "poison-1", got);
  assert_int_equal(got->body_len, task->body_len);
  assert_memory_equal(got->body, task->body, task->body_len);
  assert_string_equal(got->message_id, task->message_id);
  /* Never offered a third time. */
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

static void test_poison_wins_over_remaining_attempts(void **state) {
  fx_case *t = *state;
  assert_int_equal(fx_start_bridge(t, fast_env), 0);
  th_msg *got = fx_msg(t);
  assert_int_equal(fx_publish_task(t, "poison-2"), 0);

  /* One ordinary failure first, so the task is at attempt 1 of 5. */
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  FX_CHECK(t, th_worker_next(w, got, DELIVERY_TIMEOUT_MS) == 1);
  assert_int_equal(th_worker_reject(w), 0);
  FX_CHECK(t, th_worker_next(w, got, DELIVERY_TIMEOUT_MS) == 1);
  FX_HDR_INT_EQ(got, "attempt", 1);
  fx_crash(t, w);

  crash_on(t, "poison-2", got);
  expect_poison(t, "poison-2", got);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

static void test_poison_threshold_is_configurable(void **state) {
  fx_case *t = *state;
  static const char *const env[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms",
                                    "DLQ_BRIDGE_POISON_THRESHOLD=3", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  th_msg *got = fx_msg(t);
  assert_int_equal(fx_publish_task(t, "poison-3"), 0);
  crash_on(t, "poison-3", got);
  crash_on(t, "poison-3", got);
  /* Two crashes are not enough with threshold 3: it is offered again. */
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  crash_on(t, "poison-3", got);
  expect_poison(t, "poison-3", got);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_two_crashes_make_poison),
      FX_TEST(test_poison_wins_over_remaining_attempts),
      FX_TEST(test_poison_threshold_is_configurable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

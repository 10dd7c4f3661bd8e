/* The routing branches of `dlq-bridge run`, driven by a real worker:
 * retry through a delay queue, exact attempt counting up to max_attempts,
 * worker-reported errors, retry tiers, the SLA budget, and preservation of
 * body and properties across every hop. */
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
#define QUIET_MS            500 /* how long "nothing more arrives" is watched */

static const char *const fast_env[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms", "DLQ_BRIDGE_RETRY_JITTER=0",
                                       NULL};

/* The next delivery on w, which must come within DELIVERY_TIMEOUT_MS. */
static void expect_delivery(fx_case *t, th_worker *w, th_msg *m) {
  FX_CHECK(t, th_worker_next(w, m, DELIVERY_TIMEOUT_MS) == 1);
}

/* The next message in the DLQ, which must come within DELIVERY_TIMEOUT_MS. */
static void expect_dlq(fx_case *t, th_msg *m) {
  FX_CHECK(t, fx_take(t, "dsr.dlq.manual", m, DELIVERY_TIMEOUT_MS) == 1);
  assert_true(th_is_iso_utc(th_msg_str(m, "dlq_at")));
}

static void test_reject_retries_through_delay_queue(void **state) {
  fx_case *t = *state;
  assert_int_equal(fx_start_bridge(t, fast_env), 0);
  th_msg *task = fx_msg(t), *got = fx_msg(t);
  char seen[64];
  th_iso_time(th_now_ms() - 60000, seen, sizeof seen);
  assert_int_equal(th_msg_task(task, "retry-1"), 0);
  assert_int_equal(th_msg_add_str(task, "first_seen_at", seen), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", task), 0);

  th_worker *w = fx_worker(t);
  assert_non_null(w);
  expect_delivery(t, w, got);
  FX_HDR_STR_EQ(got, "request_id", "retry-1");
  assert_int_equal(fx_attempt(got), 0);
  assert_int_equal(th_worker_reject(w), 0);

  expect_delivery(t, w, got);
  FX_HDR_STR_EQ(got, "request_id", "retry-1");
  FX_HDR_INT_EQ(got, "attempt", 1);
  FX_HDR_STR_EQ(got, "last_error", "rejected by worker");
  FX_HDR_STR_EQ(got, "first_seen_at", seen); /* kept, not restamped */
  /* It came back by expiring out of the 100 ms delay queue. */
  assert_string_equal(got->xdeath_queue, "dsr.retry.100ms");
  assert_string_equal(got->xdeath_reason, "expired");
  assert_int_equal(th_worker_ack(w), 0);

  assert_int_equal(th_worker_next(w, got, QUIET_MS), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

static void test_attempts_are_counted_up_to_max_attempts(void **state) {
  fx_case *t = *state;
  static const char *const env[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms", "DLQ_BRIDGE_RETRY_JITTER=0",
                                    "DLQ_BRIDGE_MAX_ATTEMPTS=3", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  assert_int_equal(fx_publish_task(t, "count-1"), 0);
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  th_msg *got = fx_msg(t);
  char first_seen[TH_STR_MAX] = "";
  for (int64_t expected = 0; expected < 3; expected++) {
    expect_delivery(t, w, got);
    FX_HDR_STR_EQ(got, "request_id", "count-1");
    assert_int_equal(fx_attempt(got), expected);
    if (expected == 1) {
      /* Stamped on the first failure, since the publisher gave none. */
      assert_true(th_is_iso_utc(th_msg_str(got, "first_seen_at")));
      snprintf(first_seen, sizeof first_seen, "%s", th_msg_str(got, "first_seen_at"));
    }
    if (expected == 2) FX_HDR_STR_EQ(got, "first_seen_at", first_seen);
    assert_int_equal(th_worker_reject(w), 0);
  }

  expect_dlq(t, got);
  FX_HDR_STR_EQ(got, "request_id", "count-1");
  FX_HDR_INT_EQ(got, "attempt", 3);
  FX_HDR_STR_EQ(got, "dlq_reason", "max_attempts");
  FX_HDR_STR_EQ(got, "last_error", "rejected by worker");
  FX_HDR_STR_EQ(got, "first_seen_at", first_seen);

  /* Exactly three deliveries, exactly one DLQ copy. */
  assert_int_equal(th_worker_next(w, got, QUIET_MS), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.retry.100ms"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

static void test_envelope_max_attempts_wins_over_default(void **state) {
  fx_case *t = *state;
  assert_int_equal(fx_start_bridge(t, fast_env), 0); /* default max_attempts 5 */
  th_msg *task = fx_msg(t), *got = fx_msg(t);
  assert_int_equal(th_msg_task(task, "once-1"), 0);
  assert_int_equal(th_msg_add_int(task, "max_attempts", 1), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", task), 0);

  th_worker *w = fx_worker(t);
  assert_non_null(w);
  expect_delivery(t, w, got);
  assert_int_equal(th_worker_reject(w), 0);
  expect_dlq(t, got);
  FX_HDR_STR_EQ(got, "request_id", "once-1");
  FX_HDR_INT_EQ(got, "attempt", 1);
  FX_HDR_STR_EQ(got, "dlq_reason", "max_attempts");
  assert_int_equal(th_worker_next(w, got, QUIET_MS), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

static void test_worker_reported_error_is_retried(void **state) {
  fx_case *t = *state;
  assert_int_equal(fx_start_bridge(t, fast_env), 0);
  th_msg *task = fx_msg(t), *got = fx_msg(t), *held = fx_msg(t);
  assert_int_equal(th_msg_task(task, "report-1"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", task), 0);

  th_worker *w = fx_worker(t);
  assert_non_null(w);
  expect_delivery(t, w, got);
  assert_int_equal(th_worker_report(w, t->conn, got, "upstream 503"), 0);

  expect_delivery(t, w, got);
  FX_HDR_STR_EQ(got, "request_id", "report-1");
  FX_HDR_INT_EQ(got, "attempt", 1);
  FX_HDR_STR_EQ(got, "last_error", "worker error: upstream 503");
  assert_int_equal(got->body_len, task->body_len);
  assert_memory_equal(got->body, task->body, task->body_len);

  /* Reported again, now from a copy that carries the delay queue's x-death:
   * still a worker error, not an expiry. */
  assert_int_equal(th_msg_copy(held, got), 0);
  assert_int_equal(th_worker_report(w, t->conn, held, "upstream 504"), 0);
  expect_delivery(t, w, got);
  FX_HDR_INT_EQ(got, "attempt", 2);
  FX_HDR_STR_EQ(got, "last_error", "worker error: upstream 504");
  assert_int_equal(th_worker_ack(w), 0);

  assert_int_equal(th_worker_next(w, got, QUIET_MS), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

static void test_rejected_task_with_worker_error_keeps_the_text(void **state) {
  fx_case *t = *state;
  assert_int_equal(fx_start_bridge(t, fast_env), 0);
  th_msg *task = fx_msg(t), *got = fx_msg(t);
  /* A worker that noted its error on the task and then rejected it. */
  assert_int_equal(th_msg_task(task, "reject-text-1"), 0);
  assert_int_equal(th_msg_add_str(task, "worker_error", "disk full"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", task), 0);

  th_worker *w = fx_worker(t);
  assert_non_null(w);
  expect_delivery(t, w, got);
  FX_HDR_STR_EQ(got, "worker_error", "disk full");
  assert_int_equal(th_worker_reject(w), 0);

  expect_delivery(t, w, got);
  FX_HDR_INT_EQ(got, "attempt", 1);
  FX_HDR_STR_EQ(got, "last_error", "rejected by worker: disk full");
  assert_int_equal(th_worker_ack(w), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

static void test_retry_tier_follows_attempt(void **state) {
  fx_case *t = *state;
  static const char *const env[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms,30s",
                                    "DLQ_BRIDGE_RETRY_JITTER=0", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  assert_int_equal(fx_publish_task(t, "tier-1"), 0);
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  th_msg *got = fx_msg(t);
  expect_delivery(t, w, got);
  assert_int_equal(th_worker_reject(w), 0); /* attempt 0 -> tier 0, 100 ms */
  expect_delivery(t, w, got);
  FX_HDR_INT_EQ(got, "attempt", 1);
  assert_string_equal(got->xdeath_queue, "dsr.retry.100ms");
  assert_int_equal(th_worker_reject(w), 0); /* attempt 1 -> tier 1, 30 s */

  FX_CHECK(t, th_wait_depth(t->conn, "dsr.retry.30s", 1, DELIVERY_TIMEOUT_MS));
  assert_int_equal(th_get(t->conn, "dsr.retry.30s", got), 1);
  FX_HDR_STR_EQ(got, "request_id", "tier-1");
  FX_HDR_INT_EQ(got, "attempt", 2);
  printf("tier 1 expiration: '%s'\n", got->expiration);
  assert_string_equal(got->expiration, "30000"); /* jitter 0: the exact delay */
  assert_int_equal(th_queue_depth(t->conn, "dsr.retry.100ms"), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

static void test_sla_budget_sends_late_tasks_to_dlq(void **state) {
  fx_case *t = *state;
  static const char *const env[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms", "DLQ_BRIDGE_RETRY_JITTER=0",
                                    "DLQ_BRIDGE_SLA_BUDGET=5s", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  th_msg *task = fx_msg(t), *got = fx_msg(t);
  char when[64];
  th_iso_time(th_now_ms() - 30000, when, sizeof when); /* budget long gone */
  assert_int_equal(th_msg_task(task, "sla-late"), 0);
  assert_int_equal(th_msg_add_str(task, "first_seen_at", when), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", task), 0);
  th_msg_reset(task);
  th_iso_time(th_now_ms(), when, sizeof when); /* well within the budget */
  assert_int_equal(th_msg_task(task, "sla-fresh"), 0);
  assert_int_equal(th_msg_add_str(task, "first_seen_at", when), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", task), 0);

  th_worker *w = fx_worker(t);
  assert_non_null(w);
  for (int i = 0; i < 2; i++) {
    expect_delivery(t, w, got);
    assert_int_equal(th_worker_reject(w), 0);
  }
  expect_dlq(t, got);
  FX_HDR_STR_EQ(got, "request_id", "sla-late");
  FX_HDR_STR_EQ(got, "dlq_reason", "sla_budget");
  const char *why = th_msg_str(got, "last_error");
  assert_non_null(why);
  printf("sla last_error: %s\n", why);
  assert_non_null(strstr(why, "sla budget"));

  expect_delivery(t, w, got); /* the fresh one was retried */
  FX_HDR_STR_EQ(got, "request_id", "sla-fresh");
  FX_HDR_INT_EQ(got, "attempt", 1);
  assert_int_equal(th_worker_ack(w), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
}

/* A task with every property set and a binary body full of NUL bytes. */
static void make_rich_task(th_msg *m, unsigned char *body, size_t len) {
  for (size_t i = 0; i < len; i++) body[i] = (unsigned char)((i * 7) % 256);
  body[0] = 0;
  body[1] = 0;
  body[2] = 0xff;
  assert_int_equal(th_msg_task(m, "rich-1"), 0);
  assert_int_equal(th_msg_set_body(m, body, len), 0);
  snprintf(m->message_id, sizeof m->message_id, "rich-message-1");
  snprintf(m->content_type, sizeof m->content_type, "application/octet-stream");
  snprintf(m->correlation_id, sizeof m->correlation_id, "corr-42");
  snprintf(m->app_id, sizeof m->app_id, "intake-service");
  snprintf(m->type, sizeof m->type, "dsr.task->v1");
  m->has_timestamp = true;
  m->timestamp = 1764480588;
  m->delivery_mode = 2;
  assert_int_equal(th_msg_add_str(m, "tenant", "acme"), 0);
  assert_int_equal(th_msg_add_int(m, "priority_hint", 7), 0);
  assert_int_equal(th_msg_add_int(m, "max_attempts", 2), 0);
}

static void expect_same_task(const th_msg *want, const th_msg *got) {
  assert_int_equal(got->body_len, want->body_len);
  assert_memory_equal(got->body, want->body, want->body_len);
  assert_string_equal(got->message_id, want->message_id);
  assert_string_equal(got->content_type, want->content_type);
  assert_string_equal(got->correlation_id, want->correlation_id);
  assert_string_equal(got->app_id, want->app_id);
  assert_string_equal(got->type, want->type);
  assert_true(got->has_timestamp);
  assert_int_equal(got->timestamp, want->timestamp);
  assert_int_equal(got->delivery_mode, 2);
  FX_HDR_STR_EQ(got, "tenant", "acme");
  FX_HDR_INT_EQ(got, "priority_hint", 7);
  FX_HDR_STR_EQ(got, "source_system", "test-suite");
  FX_HDR_STR_EQ(got, "legal_basis", "gdpr_art_17");
  FX_HDR_STR_EQ(got, "action", "deletion");
  assert_int_equal(th_msg_count(got, "request_id"), 1);
  assert_int_equal(th_msg_count(got, "attempt"), th_msg_find(got, "attempt") ? 1 : 0);
}

static void test_body_and_properties_survive_every_hop(void **state) {
  fx_case *t = *state;
  assert_int_equal(fx_start_bridge(t, fast_env), 0);
  th_msg *task = fx_msg(t), *got = fx_msg(t);
  unsigned char body[1500];
  make_rich_task(task, body, sizeof body);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", task), 0);

  th_worker *w = fx_worker(t);
  assert_non_null(w);
  expect_delivery(t, w, got);
  expect_same_task(task, got);
  assert_int_equal(th_worker_reject(w), 0);

  /* Hop: dsr.work -> dsr.failed -> bridge -> dsr.retry.100ms -> dsr.work */
  expect_delivery(t, w, got);
  expect_same_task(task, got);
  FX_HDR_INT_EQ(got, "attempt", 1);

  /* Hop: worker report -> dsr.dlx -> dsr.failed -> bridge -> DLQ */
  assert_int_equal(th_worker_report(w, t->conn, got, "cannot parse"), 0);
  expect_dlq(t, got);
  expect_same_task(task, got);
  FX_HDR_INT_EQ(got, "attempt", 2);
  FX_HDR_STR_EQ(got, "dlq_reason", "max_attempts");
  assert_int_equal(fx_stop_bridges(t), 0);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_reject_retries_through_delay_queue),
      FX_TEST(test_attempts_are_counted_up_to_max_attempts),
      FX_TEST(test_envelope_max_attempts_wins_over_default),
      FX_TEST(test_worker_reported_error_is_retried),
      FX_TEST(test_rejected_task_with_worker_error_keeps_the_text),
      FX_TEST(test_retry_tier_follows_attempt),
      FX_TEST(test_sla_budget_sends_late_tasks_to_dlq),
      FX_TEST(test_body_and_properties_survive_every_hop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

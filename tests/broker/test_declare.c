/* `dlq-bridge declare` against a real broker: what it creates, that a second
 * run changes nothing, and that a conflicting queue is reported and kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flow.h"

/* include/dlqb/topology.h's DLQB_HELD_DELIVERY_LIMIT: the DLQ's and review
 * queue's, as the broker must report it back. */
#define HELD_DELIVERY_LIMIT INT64_C(2147483647)

static const char *const QUORUM_ENV[] = {"DLQ_BRIDGE_DLQ_QUEUE_TYPE=quorum", NULL};

#define DECLARE_TIMEOUT_MS 30000

/* The management API's view of one queue in t's vhost; NULL when absent. */
static json_object *queue_info(const fx_case *t, const char *queue) {
  char path[TH_PATH_MAX];
  snprintf(path, sizeof path, "/api/queues/%s/%s", t->vhost.name, queue);
  return th_mgmt_get_json(path);
}

/* The queue's declared arguments (owned by q). */
static json_object *queue_args(json_object *q) {
  json_object *args = NULL;
  json_object_object_get_ex(q, "arguments", &args);
  return args;
}

static void assert_arg_str(json_object *args, const char *key, const char *want) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(args, key, &v)) fprintf(stderr, "argument %s is missing\n", key);
  assert_non_null(v);
  assert_string_equal(json_object_get_string(v), want);
}

static void assert_arg_int(json_object *args, const char *key, int64_t want) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(args, key, &v)) fprintf(stderr, "argument %s is missing\n", key);
  assert_non_null(v);
  assert_true(json_object_is_type(v, json_type_int));
  assert_int_equal(json_object_get_int64(v), want);
}

static bool has_arg(json_object *args, const char *key) {
  return json_object_object_get_ex(args, key, NULL);
}

/* Checks a queue's type and durability; returns its info (caller puts). */
static json_object *expect_queue(const fx_case *t, const char *name, const char *type) {
  json_object *q = queue_info(t, name);
  if (q == NULL) fprintf(stderr, "queue %s does not exist\n", name);
  assert_non_null(q);
  assert_string_equal(th_json_str(q, "type"), type);
  json_object *durable = NULL;
  assert_true(json_object_object_get_ex(q, "durable", &durable));
  assert_true(json_object_get_boolean(durable));
  return q;
}

static void run_declare(const fx_case *t, const char *const *env, th_result *r) {
  static const char *const args[] = {"declare", NULL};
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, DECLARE_TIMEOUT_MS, r), 0);
  if (r->exit_code != 0) fprintf(stderr, "declare: exit %d, stderr: %s\n", r->exit_code, r->err);
}

static void test_declare_creates_topology(void **state) {
  fx_case *t = *state;
  th_result r;
  run_declare(t, NULL, &r);
  assert_int_equal(r.exit_code, 0);

  json_object *q = expect_queue(t, "dsr.work", "quorum");
  json_object *args = queue_args(q);
  assert_arg_str(args, "x-queue-type", "quorum");
  assert_arg_str(args, "x-dead-letter-exchange", "dsr.dlx");
  assert_arg_str(args, "x-dead-letter-strategy", "at-least-once");
  assert_arg_str(args, "x-overflow", "reject-publish");
  assert_arg_int(args, "x-delivery-limit", 1); /* default poison threshold 2 */
  json_object_put(q);

  q = expect_queue(t, "dsr.failed", "quorum");
  json_object_put(q);

  static const char *const retries[] = {"dsr.retry.1s", "dsr.retry.5s", "dsr.retry.30s",
                                        "dsr.retry.2m"};
  for (size_t i = 0; i < sizeof retries / sizeof retries[0]; i++) {
    q = expect_queue(t, retries[i], "quorum");
    assert_true(has_arg(queue_args(q), "x-dead-letter-exchange"));
    json_object_put(q);
  }

  /* Classic by default (dlq_queue_type), with no arguments at all:
   * nothing can expire or be dropped. Quorum: test_declare_quorum_when_asked. */
  static const char *const classic[] = {"dsr.dlq.manual", "compliance_review"};
  for (size_t i = 0; i < 2; i++) {
    q = expect_queue(t, classic[i], "classic");
    assert_false(has_arg(queue_args(q), "x-delivery-limit"));
    json_object_put(q);
  }
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual.dropped"), -1);

  q = expect_queue(t, "dsr.completed", "stream");
  json_object_put(q);
  /* The audit anchors: an append-only stream too (docs/audit.md). */
  q = expect_queue(t, "dsr.audit.anchors", "stream");
  json_object_put(q);

  char path[TH_PATH_MAX];
  snprintf(path, sizeof path, "/api/exchanges/%s/dsr.dlx", t->vhost.name);
  json_object *x = th_mgmt_get_json(path);
  assert_non_null(x);
  assert_string_equal(th_json_str(x, "type"), "fanout");
  json_object_put(x);

  snprintf(path, sizeof path, "/api/bindings/%s/e/dsr.dlx/q/dsr.failed", t->vhost.name);
  json_object *bindings = th_mgmt_get_json(path);
  assert_non_null(bindings);
  assert_true(json_object_is_type(bindings, json_type_array));
  assert_true(json_object_array_length(bindings) >= 1);
  json_object_put(bindings);
}

static void test_declare_is_idempotent(void **state) {
  fx_case *t = *state;
  th_result r;
  run_declare(t, NULL, &r);
  assert_int_equal(r.exit_code, 0);

  /* A task already in the DLQ must survive a second declare. */
  th_msg *m = fx_msg(t);
  assert_int_equal(th_msg_task(m, "idempotent-1"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", m), 0);
  char *before = th_queue_list(t->vhost.name);
  assert_non_null(before);

  run_declare(t, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  char *after = th_queue_list(t->vhost.name);
  assert_non_null(after);
  assert_string_equal(before, after);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  free(before);
  free(after);
}

static void test_declare_conflict_is_reported_and_nothing_changes(void **state) {
  fx_case *t = *state;
  /* What declare would create, but for the delivery limit. */
  static const th_arg args[] = {
      {"x-queue-type", "quorum", 0},
      {"x-dead-letter-exchange", "dsr.dlx", 0},
      {"x-dead-letter-strategy", "at-least-once", 0},
      {"x-overflow", "reject-publish", 0},
      {"x-delivery-limit", NULL, 7},
  };
  assert_int_equal(th_queue_declare(t->conn, "dsr.work", args, sizeof args / sizeof args[0]), 0);
  th_msg *m = fx_msg(t);
  assert_int_equal(th_msg_task(m, "conflict-1"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", m), 0);
  assert_true(th_wait_depth(t->conn, "dsr.work", 1, 5000));

  th_result r;
  run_declare(t, NULL, &r);
  assert_int_equal(r.exit_code, 1);
  printf("declare conflict stderr: %s", r.err);
  assert_int_equal(th_count_lines(r.err), 1);
  assert_non_null(strstr(r.err, "dsr.work"));
  assert_non_null(strstr(r.err, "x-delivery-limit"));
  assert_non_null(strstr(r.err, "\"Changing the topology\" in docs/rabbitmq-versions.md"));

  /* Not deleted, not purged, not redeclared. */
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 1);
  json_object *q = queue_info(t, "dsr.work");
  assert_non_null(q);
  assert_arg_int(queue_args(q), "x-delivery-limit", 7);
  json_object_put(q);
}

/* A deployment from before quorum DLQs: its DLQ and review queue are
 * classic (declared with no arguments). declare keeps them as they are,
 * says so on one line each, and exits 0; the items stay. */
static void test_declare_keeps_an_older_classic_dlq(void **state) {
  fx_case *t = *state;
  assert_int_equal(th_queue_declare(t->conn, "dsr.dlq.manual", NULL, 0), 0);
  assert_int_equal(th_queue_declare(t->conn, "compliance_review", NULL, 0), 0);
  th_msg *m = fx_msg(t);
  assert_int_equal(th_msg_task(m, "kept-1"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", m), 0);
  assert_true(th_wait_depth(t->conn, "dsr.dlq.manual", 1, 5000));

  th_result r;
  run_declare(t, QUORUM_ENV, &r);
  printf("declare over classic queues, stderr: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(th_count_lines(r.err), 2);
  assert_non_null(strstr(r.err, "queue 'dsr.dlq.manual' is a classic queue"));
  assert_non_null(strstr(r.err, "queue 'compliance_review' is a classic queue"));
  assert_non_null(strstr(r.err, "dlq-bridge migrate"));
  json_object *q = expect_queue(t, "dsr.dlq.manual", "classic");
  json_object_put(q);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  /* The rest of the topology is declared as usual. */
  q = expect_queue(t, "dsr.work", "quorum");
  json_object_put(q);
}

/* Asked for (dlq_queue_type quorum): replicated, and nothing the broker
 * could drop them by. */
static void test_declare_quorum_when_asked(void **state) {
  fx_case *t = *state;
  th_result r;
  json_object *q, *args;
  run_declare(t, QUORUM_ENV, &r);
  assert_int_equal(r.exit_code, 0);
  assert_string_equal(r.err, "");
  /* Replicated, and nothing the broker could drop them by: a delivery
   * limit no read reaches, no TTL, no length, and what a policy's would cut
   * dead-lettered (at least once) into the safety queue. */
  static const char *const held[] = {"dsr.dlq.manual", "compliance_review"};
  for (size_t i = 0; i < 2; i++) {
    q = expect_queue(t, held[i], "quorum");
    args = queue_args(q);
    assert_arg_int(args, "x-delivery-limit", HELD_DELIVERY_LIMIT);
    assert_arg_str(args, "x-dead-letter-exchange", "");
    assert_arg_str(args, "x-dead-letter-routing-key", "dsr.dlq.manual.dropped");
    assert_arg_str(args, "x-dead-letter-strategy", "at-least-once");
    assert_arg_str(args, "x-overflow", "reject-publish");
    static const char *const never[] = {"x-message-ttl", "x-max-length", "x-max-length-bytes",
                                        "x-expires"};
    for (size_t k = 0; k < sizeof never / sizeof never[0]; k++)
      assert_false(has_arg(args, never[k]));
    json_object_put(q);
  }
  q = expect_queue(t, "dsr.dlq.manual.dropped", "quorum");
  assert_arg_int(queue_args(q), "x-delivery-limit", HELD_DELIVERY_LIMIT);
  assert_false(has_arg(queue_args(q), "x-dead-letter-exchange"));
  json_object_put(q);
}

/* A policy that sets a delivery limit on the DLQ (4.0.5 takes the lower of
 * it and the queue's own) would make a quorum DLQ drop what reads return
 * past it. Declared by the bridge, the DLQ dead-letters such items into its
 * safety queue instead, and the daemon says so. */
static void test_a_policy_limit_on_the_dlq_loses_nothing(void **state) {
  fx_case *t = *state;
  th_result r;
  run_declare(t, QUORUM_ENV, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *q = expect_queue(t, "dsr.dlq.manual.dropped", "quorum");
  json_object_put(q);
  static const char *const ids[] = {"dropped-1", "dropped-2", "dropped-3"};
  for (size_t i = 0; i < 3; i++) {
    th_msg *m = fx_msg(t);
    assert_int_equal(th_msg_task(m, ids[i]), 0);
    assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", m), 0);
  }
  assert_true(th_wait_depth(t->conn, "dsr.dlq.manual", 3, 5000));
  char path[TH_PATH_MAX];
  assert_true(th_fmt(path, sizeof path, "/api/policies/%s/dlq-limit", t->vhost.name));
  int code = th_mgmt("PUT", path,
                     "{\"pattern\": \"^dsr\\\\.dlq\\\\.manual$\", \"apply-to\": \"queues\", "
                     "\"definition\": {\"delivery-limit\": 1}}",
                     NULL);
  assert_true(code == 201 || code == 204);
  /* Each pass returns every item: a delivery each. Passes until the
   * limit cut them all (the policy reaches the queue within a pass or two). */
  static const char *const look[] = {"inspect", "--scan", NULL};
  int passes = 0;
  while (th_queue_depth(t->conn, "dsr.dlq.manual.dropped") < 3 && passes++ < 5) {
    assert_int_equal(th_run_bridge(look, t->vhost.url, QUORUM_ENV, DECLARE_TIMEOUT_MS, &r), 0);
    assert_int_equal(r.exit_code, 0);
  }
  printf("the policy's limit moved the items after %d passes\n", passes);
  assert_true(th_wait_depth(t->conn, "dsr.dlq.manual.dropped", 3, 10000));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  th_msg *got = fx_msg(t);
  assert_int_equal(fx_take(t, "dsr.dlq.manual.dropped", got, 5000), 1);
  assert_string_equal(got->xdeath_reason, "delivery_limit");
  assert_string_equal(got->xdeath_queue, "dsr.dlq.manual");
  /* Back where it was, for the daemon to see three. */
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual.dropped", got), 0);
  assert_true(th_wait_depth(t->conn, "dsr.dlq.manual.dropped", 3, 5000));

  /* Its metrics refresher (on by default) reads the queue gauges and says so. */
  char metrics[64];
  int port = th_free_port();
  assert_true(port > 0);
  assert_true(th_fmt(metrics, sizeof metrics, "DLQ_BRIDGE_METRICS_ADDR=127.0.0.1:%d", port));
  const char *const daemon_env[] = {QUORUM_ENV[0], metrics, NULL};
  assert_int_equal(fx_start_bridge(t, daemon_env), 0);
  const char *needle = "dsr.dlq.manual.dropped holds 3 items the broker dead-lettered";
  int64_t until = th_now_ms() + 30000;
  while (fx_count_in_file(t->bridges[0].log_path, needle) == 0 && th_now_ms() < until)
    usleep(100000);
  FX_CHECK(t, fx_count_in_file(t->bridges[0].log_path, needle) == 1);
  assert_int_equal(th_mgmt("DELETE", path, NULL, NULL) / 100, 2);
}

static void test_declare_follows_settings(void **state) {
  fx_case *t = *state;
  static const char *const env[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms,2s",
                                    "DLQ_BRIDGE_POISON_THRESHOLD=3", NULL};
  th_result r;
  run_declare(t, env, &r);
  assert_int_equal(r.exit_code, 0);

  json_object *q = expect_queue(t, "dsr.work", "quorum");
  assert_arg_int(queue_args(q), "x-delivery-limit", 2);
  json_object_put(q);
  json_object_put(expect_queue(t, "dsr.retry.100ms", "quorum"));
  json_object_put(expect_queue(t, "dsr.retry.2s", "quorum"));
  assert_null(queue_info(t, "dsr.retry.1s"));
}

static void test_declare_takes_url_flag(void **state) {
  fx_case *t = *state;
  const char *const args[] = {"declare", "--url", t->vhost.url, NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, NULL, NULL, DECLARE_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "declare --url: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
}

/* Issue 22: one config file, three pipelines. declare creates each one's
 * exchange and queues (today's for dsr, their own names and policy for the
 * others), a second run changes nothing, and the commands that serve only
 * the default pipeline refuse the file (exit 2) rather than work on it. */
static void test_declare_three_pipelines(void **state) {
  fx_case *t = *state;
  char path[] = "/tmp/dlqb-pipelines-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  static const char json[] = "{\"pipelines\": {\"dsr\": {},\n"
                             " \"redaction\": {\"max_attempts\": 3, \"poison_threshold\": 4,\n"
                             "                 \"retry_delays\": \"5s,1m\",\n"
                             "                 \"queues\": {\"review\": \"senior_review\"}},\n"
                             " \"recon\": {\"profile\": \"reconciliation\"}}}\n";
  assert_int_equal(write(fd, json, sizeof json - 1), (ssize_t)(sizeof json - 1));
  assert_int_equal(close(fd), 0);
  char env_config[200];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  const char *const env[] = {env_config, NULL};
  th_result r;
  run_declare(t, env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "redaction.work"));

  /* dsr: today's names and arguments. */
  json_object *q = expect_queue(t, "dsr.work", "quorum");
  assert_arg_str(queue_args(q), "x-dead-letter-exchange", "dsr.dlx");
  assert_arg_int(queue_args(q), "x-delivery-limit", 1);
  json_object_put(q);
  json_object_put(expect_queue(t, "compliance_review", "classic"));
  /* redaction: its own names, exchange, delays and delivery limit. */
  q = expect_queue(t, "redaction.work", "quorum");
  assert_arg_str(queue_args(q), "x-dead-letter-exchange", "redaction.dlx");
  assert_arg_int(queue_args(q), "x-delivery-limit", 3);
  json_object_put(q);
  q = expect_queue(t, "redaction.failed", "quorum");
  assert_arg_str(queue_args(q), "x-dead-letter-routing-key", "redaction.dlq.manual");
  json_object_put(q);
  q = expect_queue(t, "redaction.retry.1m", "quorum");
  assert_arg_str(queue_args(q), "x-dead-letter-routing-key", "redaction.work");
  json_object_put(q);
  assert_null(queue_info(t, "redaction.retry.1s"));
  json_object_put(expect_queue(t, "redaction.dlq.manual", "classic"));
  json_object_put(expect_queue(t, "senior_review", "classic"));
  json_object_put(expect_queue(t, "redaction.completed", "stream"));
  /* recon: the defaults for a pipeline of that name. */
  json_object_put(expect_queue(t, "recon.dlq.manual", "classic"));
  json_object_put(expect_queue(t, "recon.retry.2m", "quorum"));
  char api[TH_PATH_MAX];
  snprintf(api, sizeof api, "/api/bindings/%s/e/recon.dlx/q/recon.failed", t->vhost.name);
  json_object *bindings = th_mgmt_get_json(api);
  assert_non_null(bindings);
  assert_true(json_object_array_length(bindings) >= 1);
  json_object_put(bindings);
  /* The failure inboxes are bound to their own exchange only. */
  snprintf(api, sizeof api, "/api/bindings/%s/e/dsr.dlx/q/recon.failed", t->vhost.name);
  bindings = th_mgmt_get_json(api);
  assert_non_null(bindings);
  assert_int_equal(json_object_array_length(bindings), 0);
  json_object_put(bindings);

  char *before = th_queue_list(t->vhost.name);
  assert_non_null(before);

  run_declare(t, env, &r);
  assert_int_equal(r.exit_code, 0);
  char *after = th_queue_list(t->vhost.name);
  assert_non_null(after);
  assert_string_equal(before, after);
  free(before);
  free(after);

  static const char *const inspect[] = {"inspect", NULL};
  assert_int_equal(th_run_bridge(inspect, t->vhost.url, env, DECLARE_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "several pipelines are configured (dsr, redaction, recon)"));
  unlink(path);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_declare_creates_topology),
      FX_TEST(test_declare_is_idempotent),
      FX_TEST(test_declare_conflict_is_reported_and_nothing_changes),
      FX_TEST(test_declare_keeps_an_older_classic_dlq),
      FX_TEST(test_declare_quorum_when_asked),
      FX_TEST(test_a_policy_limit_on_the_dlq_loses_nothing),
      FX_TEST(test_declare_follows_settings),
      FX_TEST(test_declare_takes_url_flag),
      FX_TEST(test_declare_three_pipelines),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

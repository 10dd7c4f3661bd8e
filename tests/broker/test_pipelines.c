/* Issue 22 on a real broker: `run` serving a pipeline other than today's,
 * from the config file's `pipelines`: the redaction pipeline with its own
 * queue names and envelope, through retry, the DLQ (references only: the
 * body is dropped and said so) and escalation to its own review queue. */
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

#define WAIT_MS 20000

static const char privileged[] = "extracted page text: privileged";

/* Writes json to a private temp file; path receives its name. */
static void write_config(char *path, const char *json) {
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
  assert_int_equal(close(fd), 0);
}

/* Starts the daemon with the config file and waits until it consumes
 * failed (its pipeline's failure inbox). */
static th_bridge *start_audited(fx_case *t, const char *path, const char *pipeline,
                                const char *failed, const fx_audit *audit) {
  char env_config[200], env_pipeline[100];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  assert_true(th_fmt(env_pipeline, sizeof env_pipeline, "DLQ_BRIDGE_PIPELINE=%s", pipeline));
  const char *const env[] = {
      "DLQ_BRIDGE_METRICS_ADDR=off", env_config, env_pipeline, audit ? audit->env_log : NULL,
      audit ? audit->env_key : NULL, NULL};
  th_bridge *b = &t->bridges[t->nbridges];
  assert_int_equal(th_bridge_start(b, &t->vhost, env, pipeline[0] ? pipeline : "pipeline"), 0);
  t->nbridges++;
  if (!th_wait_consumers(t->conn, failed, 1, WAIT_MS) || !th_bridge_running(b)) {
    fx_dump_logs(t);
    fail_msg("the bridge did not start consuming %s", failed);
  }
  return b;
}

static th_bridge *start_pipeline(fx_case *t, const char *path, const char *pipeline,
                                 const char *failed) {
  return start_audited(t, path, pipeline, failed, NULL);
}

static void start_with_config(fx_case *t, const char *path, const char *failed) {
  (void)start_pipeline(t, path, "", failed);
}

typedef struct {
  fx_case *t;
  const char *queue;
} consumed;

static bool has_consumer(void *arg) {
  consumed *c = arg;
  return th_queue_consumers(c->t->conn, c->queue) == 1;
}

static th_msg *review_item(fx_case *t, const char *item, const char *doc) {
  th_msg *m = fx_msg(t);
  assert_int_equal(th_msg_add_str(m, "item_id", item), 0);
  assert_int_equal(th_msg_add_str(m, "doc_id", doc), 0);
  assert_int_equal(th_msg_set_body(m, privileged, sizeof privileged - 1), 0);
  return m;
}

static void assert_body_dropped(const th_msg *m) {
  assert_int_equal(m->body_len, 0);
  int64_t dropped = -1;
  assert_true(th_msg_int(m, "body_dropped", &dropped));
  assert_int_equal(dropped, sizeof privileged - 1);
  const char *sha = th_msg_str(m, "body_sha256");
  assert_non_null(sha);
  assert_int_equal(strlen(sha), 64);
}

static void test_redaction_pipeline(void **state) {
  fx_case *t = *state;
  char path[] = "/tmp/dlqb-redaction-XXXXXX";
  write_config(path, "{\"pipelines\": {\"redaction\": {\"max_attempts\": 2, \"retry_delays\": "
                     "\"200ms\", \"max_replays\": 1}}}");
  fx_audit audit;
  assert_int_equal(fx_audit_init(&audit), 0);
  (void)start_audited(t, path, "", "redaction.failed", &audit);
  /* It declared its own topology, not today's. */
  assert_true(th_queue_depth(t->conn, "redaction.dlq.manual") == 0);
  assert_true(th_queue_depth(t->conn, "redaction.review") == 0);

  th_worker *w = th_worker_open(&t->vhost, "redaction.work", 1);
  assert_non_null(w);
  th_msg *got = fx_msg(t);

  /* First failure: a retry through redaction.retry.200ms, body intact. */
  assert_int_equal(th_publish(t->conn, "", "redaction.work", review_item(t, "item-9", "doc-9")), 0);
  FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
  assert_int_equal(th_worker_reject(w), 0);
  FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
  assert_int_equal(fx_attempt(got), 1);
  assert_int_equal(got->body_len, sizeof privileged - 1);
  assert_string_equal(th_msg_str(got, "item_id"), "item-9");
  /* Second failure of max_attempts 2: the DLQ, references only. */
  assert_int_equal(th_worker_reject(w), 0);
  th_msg *dl = fx_msg(t);
  FX_CHECK(t, fx_take(t, "redaction.dlq.manual", dl, WAIT_MS) == 1);
  assert_string_equal(th_msg_str(dl, "dlq_reason"), "max_attempts");
  assert_string_equal(th_msg_str(dl, "item_id"), "item-9");
  assert_string_equal(th_msg_str(dl, "doc_id"), "doc-9");
  assert_body_dropped(dl);

  /* A DSR task is not a review item: invalid here, and its body stays out. */
  th_msg *dsr = fx_msg(t);
  assert_int_equal(th_msg_task(dsr, "r-1"), 0);
  assert_int_equal(th_publish(t->conn, "", "redaction.work", dsr), 0);
  FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
  assert_int_equal(th_worker_reject(w), 0);
  FX_CHECK(t, fx_take(t, "redaction.dlq.manual", dl, WAIT_MS) == 1);
  assert_string_equal(th_msg_str(dl, "dlq_reason"), "invalid_envelope");
  assert_non_null(strstr(th_msg_str(dl, "last_error"), "item_id is missing"));
  assert_int_equal(dl->body_len, 0);

  /* Replayed once already (max_replays 1) and failed for good: its own
   * review queue, still without the body. */
  th_msg *again = review_item(t, "item-10", "doc-10");
  assert_int_equal(th_msg_add_int(again, "replay_count", 1), 0);
  assert_int_equal(th_msg_add_int(again, "attempt", 1), 0);
  assert_int_equal(th_publish(t->conn, "", "redaction.work", again), 0);
  FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
  assert_int_equal(th_worker_reject(w), 0);
  FX_CHECK(t, fx_take(t, "redaction.review", dl, WAIT_MS) == 1);
  assert_string_equal(th_msg_str(dl, "escalation_reason"), "max_replays");
  assert_string_equal(th_msg_str(dl, "item_id"), "item-10");
  assert_body_dropped(dl);
  th_worker_close(w);
  /* Nothing went to today's queues. */
  assert_true(th_queue_depth(t->conn, "dsr.dlq.manual") <= 0);
  assert_int_equal(fx_stop_bridges(t), 0);
  /* The trail names the pipeline on each of the 4 hops (item-9's retry
   * and DLQ, the invalid task, item-10's escalation), keys them by the
   * profile's identity, and verifies. */
  assert_int_equal(fx_count_in_file(audit.log, "\"pipeline\":\"redaction\""), 4);
  assert_true(fx_count_in_file(audit.log, "\"request_id\":\"item-9\"") >= 2);
  th_result vr;
  assert_int_equal(fx_audit_verify(&audit, &vr), 0);
  if (vr.exit_code != 0) fprintf(stderr, "audit verify: %s%s", vr.out, vr.err);
  assert_int_equal(vr.exit_code, 0);
  fx_audit_remove(&audit);
  unlink(path);
}

/* An upgrade changes nothing: a config file naming only the dsr pipeline
 * routes exactly as without one (today's names), with the pipeline's own
 * policy. */
static void test_dsr_pipeline_is_today(void **state) {
  fx_case *t = *state;
  char path[] = "/tmp/dlqb-dsr-XXXXXX";
  write_config(path, "{\"pipelines\": {\"dsr\": {\"max_attempts\": 1}}}");
  start_with_config(t, path, "dsr.failed");
  assert_int_equal(fx_publish_task(t, "up-1"), 0);
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  th_msg *got = fx_msg(t);
  FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
  assert_int_equal(th_worker_reject(w), 0);
  th_msg *dl = fx_msg(t);
  FX_CHECK(t, fx_take(t, "dsr.dlq.manual", dl, WAIT_MS) == 1);
  assert_string_equal(th_msg_str(dl, "dlq_reason"), "max_attempts");
  assert_string_equal(th_msg_str(dl, "request_id"), "up-1");
  assert_true(dl->body_len > 0); /* the dsr profile keeps bodies */
  assert_null(th_msg_str(dl, "body_dropped"));
  assert_int_equal(fx_stop_bridges(t), 0);
  unlink(path);
}

/* One config file, two pipelines, a daemon each (--pipeline). The
 * redaction pipeline's failure inbox is deleted under its daemon: the DSR
 * daemon routes on as if nothing happened, and the redaction daemon
 * reconnects on its own (it declares its queue again) and routes too. */
static void test_blocked_pipeline_does_not_stop_the_other(void **state) {
  fx_case *t = *state;
  char path[] = "/tmp/dlqb-two-XXXXXX";
  write_config(path, "{\"pipelines\": {\"dsr\": {\"max_attempts\": 1},\n"
                     " \"redaction\": {\"max_attempts\": 1}}}");
  th_bridge *red = start_pipeline(t, path, "redaction", "redaction.failed");
  (void)start_pipeline(t, path, "dsr", "dsr.failed");
  /* Each declared its own pipeline only. */
  assert_true(th_queue_depth(t->conn, "redaction.dlq.manual") == 0);
  assert_true(th_queue_depth(t->conn, "dsr.dlq.manual") == 0);

  char api[TH_PATH_MAX];
  snprintf(api, sizeof api, "/api/queues/%s/redaction.failed", t->vhost.name);
  assert_int_equal(th_mgmt("DELETE", api, NULL, NULL), 204);

  /* DSR goes on. */
  assert_int_equal(fx_publish_task(t, "blocked-1"), 0);
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  th_msg *got = fx_msg(t);
  FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
  assert_int_equal(th_worker_reject(w), 0);
  th_msg *dl = fx_msg(t);
  FX_CHECK(t, fx_take(t, "dsr.dlq.manual", dl, WAIT_MS) == 1);
  assert_string_equal(th_msg_str(dl, "request_id"), "blocked-1");

  /* The redaction daemon is back by itself, and routes. */
  consumed c = {t, "redaction.failed"};
  FX_CHECK(t, th_wait_until(has_consumer, &c, WAIT_MS));
  assert_true(th_bridge_running(red));
  th_worker *rw = th_worker_open(&t->vhost, "redaction.work", 1);
  assert_non_null(rw);
  assert_int_equal(th_publish(t->conn, "", "redaction.work", review_item(t, "item-1", "doc-1")), 0);
  FX_CHECK(t, th_worker_next(rw, got, WAIT_MS) == 1);
  assert_int_equal(th_worker_reject(rw), 0);
  FX_CHECK(t, fx_take(t, "redaction.dlq.manual", dl, WAIT_MS) == 1);
  assert_string_equal(th_msg_str(dl, "item_id"), "item-1");
  th_worker_close(rw);
  assert_int_equal(fx_stop_bridges(t), 0);
  unlink(path);
}

typedef struct {
  int port;
  char *body;
} scrape;

static bool healthy(void *arg) {
  scrape *sc = arg;
  free(sc->body);
  sc->body = NULL;
  return th_http_get(sc->port, "/healthz", &sc->body) == 200;
}

/* A pipeline's daemon says which pipeline it is: every sample labelled,
 * the /healthz reason named, its own queues in the gauges. */
static void test_pipeline_metrics_and_health(void **state) {
  fx_case *t = *state;
  char path[] = "/tmp/dlqb-metrics-XXXXXX";
  write_config(path, "{\"pipelines\": {\"dsr\": {}, \"redaction\": {}}}");
  int port = th_free_port();
  assert_true(port > 0);
  char env_config[200], env_addr[64];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  assert_true(th_fmt(env_addr, sizeof env_addr, "DLQ_BRIDGE_METRICS_ADDR=127.0.0.1:%d", port));
  const char *const env[] = {env_config, env_addr, "DLQ_BRIDGE_PIPELINE=redaction", NULL};
  th_bridge *b = &t->bridges[t->nbridges];
  assert_int_equal(th_bridge_start(b, &t->vhost, env, "metrics"), 0);
  t->nbridges++;
  scrape sc = {port, NULL};
  FX_CHECK(t, th_wait_until(healthy, &sc, WAIT_MS));
  assert_string_equal(sc.body, "redaction: ok\n");
  free(sc.body);
  char *text = NULL;
  assert_int_equal(th_http_get(port, "/metrics", &text), 200);
  assert_non_null(strstr(text, "\ndlq_bridge_connected{pipeline=\"redaction\"} 1\n"));
  assert_non_null(strstr(text, "dlq_bridge_up{pipeline=\"redaction\"} 1"));
  /* No sample without the label, and no queue of another pipeline. */
  for (const char *line = text; line != NULL && *line != '\0';) {
    if (*line != '#' && strncmp(line, "dlq_bridge_", 11) == 0) {
      const char *brace = strchr(line, '{');
      const char *nl = strchr(line, '\n');
      assert_true(brace != NULL && (nl == NULL || brace < nl));
      assert_int_equal(strncmp(brace, "{pipeline=\"redaction\"", 21), 0);
    }
    line = strchr(line, '\n');
    if (line != NULL) line++;
  }
  assert_null(strstr(text, "queue=\"dsr.dlq.manual\""));
  free(text);
  assert_int_equal(fx_stop_bridges(t), 0);
  unlink(path);
}

/* --pipeline names one of the file's pipelines; none named with several
 * configured, or a name not configured, is exit 2 listing them. */
static void test_pipeline_choice(void **state) {
  fx_case *t = *state;
  char path[] = "/tmp/dlqb-choice-XXXXXX";
  write_config(path, "{\"pipelines\": {\"dsr\": {}, \"redaction\": {}}}");
  char env_config[200];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  const char *const env[] = {env_config, NULL};
  th_result r;
  static const char *const none[] = {"inspect", NULL};
  assert_int_equal(th_run_bridge(none, t->vhost.url, env, WAIT_MS, &r), 0);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "several pipelines are configured (dsr, redaction)"));
  assert_int_equal(th_error_lines(r.err), 1);
  static const char *const typo[] = {"run", "--pipeline", "redactoin", NULL};
  assert_int_equal(th_run_bridge(typo, t->vhost.url, env, WAIT_MS, &r), 0);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(
      strstr(r.err, "--pipeline: no pipeline 'redactoin' (configured: dsr, redaction)"));
  /* Another pipeline: the command works on its queues (not declared yet
   * here: a broker error naming its DLQ, exit 1; broker.pipeline_ops
   * covers the commands on a declared one). */
  static const char *const other[] = {"inspect", "--pipeline", "redaction", NULL};
  assert_int_equal(th_run_bridge(other, t->vhost.url, env, WAIT_MS, &r), 0);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "redaction.dlq.manual"));
  /* The default one through --pipeline: the command works as today. */
  static const char *const dsr[] = {"declare", "--pipeline", "dsr", NULL};
  assert_int_equal(th_run_bridge(dsr, t->vhost.url, env, WAIT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_null(strstr(r.out, "redaction"));
  static const char *const ins[] = {"inspect", "--pipeline", "dsr", NULL};
  assert_int_equal(th_run_bridge(ins, t->vhost.url, env, WAIT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "inspect: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  unlink(path);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_redaction_pipeline),
      FX_TEST(test_dsr_pipeline_is_today),
      FX_TEST(test_blocked_pipeline_does_not_stop_the_other),
      FX_TEST(test_pipeline_choice),
      FX_TEST(test_pipeline_metrics_and_health),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Issue 22's upgrade promise on a real broker: a deployment of the version
 * before pipelines (its topology and a config file of then, frozen in
 * tests/broker/data/0.1/) runs the new daemon and ops commands with no
 * change to its configuration, queues or workers. declare and the daemon
 * change no queue (a changed argument would be a PRECONDITION_FAILED) and
 * add one, the catalog stream dsr.catalog (issue 29: without it the looks
 * read the queue, as the old version's did), a failed task takes today's path with today's
 * headers, an item the old version dead-lettered replays, the metrics carry
 * no pipeline label and /healthz answers as it did. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flow.h"

#define WAIT_MS        20000
#define CMD_TIMEOUT_MS 60000

/* Path of a frozen file of the old deployment. */
static void frozen(char *buf, size_t len, const char *name) {
  assert_true(th_fmt(buf, len, "%s/tests/broker/data/0.1/%s", th_env_get()->source_dir, name));
}

/* Loads the old version's definitions into the case's vhost, as an
 * operator of that version did (docs/deployment.md: import them). */
static void load_old_topology(fx_case *t) {
  char file[TH_PATH_MAX + 64], api[TH_PATH_MAX];
  frozen(file, sizeof file, "definitions.json");
  assert_true(th_fmt(api, sizeof api, "/api/definitions/%s", t->vhost.name));
  int status = th_mgmt_post_file(api, file);
  if (status != 204 && status != 201) fprintf(stderr, "loading %s: HTTP %d\n", file, status);
  assert_true(status == 204 || status == 201);
}

/* The old config file as DLQ_BRIDGE_CONFIG. */
static void old_config_env(char *buf, size_t len) {
  char file[TH_PATH_MAX + 64];
  frozen(file, sizeof file, "config.json");
  assert_true(th_fmt(buf, len, "DLQ_BRIDGE_CONFIG=%s", file));
}

/* queues (a JSON array of queue objects) less the catalog stream, which
 * must be in it, a stream, once. A new reference the caller puts. */
static json_object *without_catalog(json_object *queues) {
  json_object *rest = json_object_new_array();
  int found = 0;
  for (size_t i = 0; i < json_object_array_length(queues); i++) {
    json_object *q = json_object_array_get_idx(queues, i), *args, *type;
    if (strcmp(th_json_str(q, "name"), "dsr.catalog") != 0) {
      json_object_array_add(rest, json_object_get(q));
      continue;
    }
    found++;
    assert_true(json_object_object_get_ex(q, "arguments", &args));
    assert_true(json_object_object_get_ex(args, "x-queue-type", &type));
    assert_string_equal(json_object_get_string(type), "stream");
  }
  assert_int_equal(found, 1);
  return rest;
}

/* The same for th_queue_list's text: the list less the catalog, as text. */
static char *list_without_catalog(const char *list) {
  json_object *all = json_tokener_parse(list);
  assert_non_null(all);
  json_object *rest = without_catalog(all);
  char *text = strdup(json_object_to_json_string(rest));
  json_object_put(rest);
  json_object_put(all);
  return text;
}

static char *list_as_json_text(const char *list) {
  json_object *all = json_tokener_parse(list);
  assert_non_null(all);
  char *text = strdup(json_object_to_json_string(all));
  json_object_put(all);
  return text;
}

/* The new binary describes the old topology and the catalog stream: the
 * same queues with the same arguments, exchanges and bindings, in the same
 * order, and dsr.catalog beside them. */
static void test_definitions_are_the_old_ones(void **state) {
  (void)state;
  char env_config[TH_PATH_MAX + 100], file[TH_PATH_MAX + 64];
  old_config_env(env_config, sizeof env_config);
  frozen(file, sizeof file, "definitions.json");
  const char *const env[] = {env_config, NULL};
  static const char *const args[] = {"declare", "--print-definitions", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, NULL, env, CMD_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "print-definitions: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  json_object *now = json_tokener_parse(r.out), *then = json_object_from_file(file);
  assert_non_null(now);
  assert_non_null(then);
  static const char *const parts[] = {"vhosts", "queues", "exchanges", "bindings"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    json_object *a = NULL, *b = NULL;
    assert_true(json_object_object_get_ex(now, parts[i], &a));
    assert_true(json_object_object_get_ex(then, parts[i], &b));
    json_object *rest = strcmp(parts[i], "queues") == 0 ? without_catalog(a) : NULL;
    if (rest != NULL) a = rest;
    if (!json_object_equal(a, b))
      fprintf(stderr, "%s differ:\nnow  %s\nthen %s\n", parts[i], json_object_to_json_string(a),
              json_object_to_json_string(b));
    assert_true(json_object_equal(a, b));
    json_object_put(rest);
  }
  json_object_put(now);
  json_object_put(then);
}

typedef struct {
  int port;
  char *body;
  int status;
} scrape;

static bool answered(void *arg) {
  scrape *s = arg;
  free(s->body);
  s->body = NULL;
  s->status = th_http_get(s->port, "/healthz", &s->body);
  return s->status == 200;
}

/* now - ago_s as ISO-8601 UTC. */
static void iso_ago(char out[32], time_t ago_s) {
  time_t when = time(NULL) - ago_s;
  struct tm tm;
  assert_non_null(gmtime_r(&when, &tm));
  assert_true(strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) > 0);
}

/* An item as the old version's router left it in the DLQ (docs/envelope.md
 * of then): today's envelope plus the routing headers; an hour old, well
 * inside the old config's dlq_sla of 24h (the escalator leaves it). */
static th_msg *old_dlq_item(fx_case *t, const char *id) {
  char seen[32], dlq_at[32];
  iso_ago(seen, 7200);
  iso_ago(dlq_at, 3600);
  th_msg *m = fx_msg(t);
  assert_int_equal(th_msg_task(m, id), 0);
  assert_int_equal(th_msg_add_int(m, "attempt", 5), 0);
  assert_int_equal(th_msg_add_int(m, "max_attempts", 5), 0);
  assert_int_equal(th_msg_add_str(m, "first_seen_at", seen), 0);
  assert_int_equal(th_msg_add_str(m, "last_error", "timeout talking to crm"), 0);
  assert_int_equal(th_msg_add_str(m, "dlq_reason", "max_attempts"), 0);
  assert_int_equal(th_msg_add_str(m, "dlq_at", dlq_at), 0);
  return m;
}

/* The old deployment, the new daemon: the old config file, the old
 * queues (declared by the old version), a worker written for the old
 * version, and an item the old version dead-lettered. */
static void test_old_deployment_runs_the_new_daemon(void **state) {
  fx_case *t = *state;
  load_old_topology(t);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", old_dlq_item(t, "old-1")), 0);
  char *listed = th_queue_list(t->vhost.name);
  assert_non_null(listed);
  char *before = list_as_json_text(listed);
  free(listed);

  char env_config[TH_PATH_MAX + 100], env_metrics[64];
  old_config_env(env_config, sizeof env_config);
  int port = th_free_port();
  assert_true(port > 0);
  assert_true(
      th_fmt(env_metrics, sizeof env_metrics, "DLQ_BRIDGE_METRICS_ADDR=127.0.0.1:%d", port));
  const char *const env[] = {env_config, env_metrics, NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);

  /* The daemon declared on start: nothing changed, the catalog added. */
  char *after = th_queue_list(t->vhost.name);
  assert_non_null(after);
  char *rest = list_without_catalog(after);
  assert_string_equal(before, rest);
  free(rest);
  free(after);

  /* A task of the old worker's: fails twice (its max_attempts 2), takes
   * dsr.retry.1s back to dsr.work, then dsr.dlq.manual. */
  th_msg *task = fx_msg(t);
  assert_int_equal(th_msg_task(task, "up-1"), 0);
  assert_int_equal(th_msg_add_int(task, "max_attempts", 2), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", task), 0);
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  th_msg *got = fx_msg(t);
  FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
  assert_int_equal(th_worker_reject(w), 0);
  FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
  assert_string_equal(got->xdeath_queue, "dsr.retry.1s");
  FX_HDR_INT_EQ(got, "attempt", 1);
  assert_int_equal(th_worker_reject(w), 0);
  th_msg *dl = fx_msg(t);
  FX_CHECK(t, fx_take(t, "dsr.dlq.manual", dl, WAIT_MS) == 1);
  /* The old item first (it was there before), then the new one. */
  FX_HDR_STR_EQ(dl, "request_id", "old-1");
  FX_CHECK(t, fx_take(t, "dsr.dlq.manual", dl, WAIT_MS) == 1);
  FX_HDR_STR_EQ(dl, "request_id", "up-1");
  FX_HDR_STR_EQ(dl, "dlq_reason", "max_attempts");
  assert_true(th_is_iso_utc(th_msg_str(dl, "dlq_at")));
  assert_null(th_msg_str(dl, "pipeline"));
  /* Back where it was for the replay below. */
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", old_dlq_item(t, "old-1")), 0);

  /* The metrics of one pipeline as before: no pipeline label, and
   * /healthz's "ok". */
  scrape s = {port, NULL, 0};
  FX_CHECK(t, th_wait_until(answered, &s, WAIT_MS));
  assert_string_equal(s.body, "ok\n");
  free(s.body);
  s.body = NULL;
  assert_int_equal(th_http_get(port, "/metrics", &s.body), 200);
  assert_non_null(strstr(s.body, "dlq_bridge_up"));
  assert_null(strstr(s.body, "pipeline="));
  free(s.body);

  /* The old item replays with the new command and the old config. */
  const char *const ops_env[] = {env_config, NULL};
  static const char *const replay[] = {"replay",   "--all",      "--actor",
                                       "upgrader", "--no-audit", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(replay, t->vhost.url, ops_env, CMD_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "replay: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
  FX_HDR_STR_EQ(got, "request_id", "old-1");
  FX_HDR_INT_EQ(got, "replay_count", 1);
  assert_int_equal(th_worker_ack(w), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
  after = th_queue_list(t->vhost.name);
  assert_non_null(after);
  rest = list_without_catalog(after);
  assert_string_equal(before, rest);
  free(rest);
  free(before);
  free(after);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_definitions_are_the_old_ones),
      FX_TEST(test_old_deployment_runs_the_new_daemon),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

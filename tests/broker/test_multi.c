/* Issue 22 on a real broker: one `dlq-bridge run` serving three pipelines
 * at once (dsr with today's names, redaction, reconciliation, each with
 * its own envelope), each with its own router, consumer and escalator; a
 * pipeline blocked (its inbox deleted, its user's permission revoked)
 * leaves the others routing and recovers by itself; a flooded pipeline
 * does not hold up another's single failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bulk.h"
#include "flow.h"

#define WAIT_MS  30000
#define PASSWORD "multi-pw-7d41"
#define FLOOD    20000

/* What workers receive, one message for the whole case (a case holds
 * FX_MAX_MSGS): each test sets it first thing (the case owns it). */
static th_msg *received;
/* What the tests publish, rebuilt for each task (the same rule). */
static th_msg *outgoing;

static const char privileged[] = "extracted page text: privileged";
static const char context[] = "{\"ledger\": \"A\", \"delta\": 12}";

/* The redaction pipeline's own broker user: everything of its prefix and
 * the shared anchors stream, nothing of the others'. */
typedef struct {
  char name[TH_NAME_MAX + 16];
  char url[TH_URL_MAX];
  char password_file[TH_PATH_MAX];
  char perms[512];
} pipeline_user;

static void make_user(const fx_case *t, pipeline_user *u) {
  const th_env *e = th_env_get();
  char path[TH_PATH_MAX];
  assert_true(th_fmt(u->name, sizeof u->name, "%s-redaction", t->vhost.name));
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", u->name));
  int status = th_mgmt("PUT", path, "{\"password\":\"" PASSWORD "\",\"tags\":\"\"}", NULL);
  assert_true(status == 201 || status == 204);
  assert_true(th_fmt(u->perms, sizeof u->perms, "%s",
                     "{\"configure\":\"^(redaction\\\\..+|dsr\\\\.audit\\\\.anchors)$\","
                     "\"write\":\"^(amq\\\\.default|redaction\\\\..+)$\","
                     "\"read\":\"^(redaction\\\\..+|dsr\\\\.audit\\\\.anchors)$\"}"));
  assert_true(th_fmt(path, sizeof path, "/api/permissions/%s/%s", t->vhost.name, u->name));
  status = th_mgmt("PUT", path, u->perms, NULL);
  assert_true(status == 201 || status == 204);
  assert_true(th_fmt(u->url, sizeof u->url, "amqp://%s@127.0.0.1:%d/%s", u->name, e->amqp_port,
                     t->vhost.name));
  assert_true(
      th_fmt(u->password_file, sizeof u->password_file, "%s/%s.password", e->log_dir, u->name));
  FILE *f = fopen(u->password_file, "w");
  assert_non_null(f);
  assert_int_equal(chmod(u->password_file, 0600), 0);
  fputs(PASSWORD "\n", f);
  fclose(f);
}

static void drop_user(const pipeline_user *u) {
  char path[TH_PATH_MAX];
  if (th_fmt(path, sizeof path, "/api/users/%s", u->name)) th_mgmt("DELETE", path, NULL, NULL);
  remove(u->password_file);
}

/* rabbitmqctl on the tests' node (scripts/broker-node.sh ctl). */
static int ctl(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ctl(const char *fmt, ...) {
  const th_env *e = th_env_get();
  char args[1024], cmd[3 * TH_PATH_MAX + 1100];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "'%s/scripts/broker-node.sh' ctl '%s' -q %s >/dev/null", e->source_dir,
           e->node_dir, args);
  fflush(NULL);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "rabbitmqctl %s failed (%d)\n", args, rc);
  return rc == 0 ? 0 : -1;
}

/* Writes the three pipelines' config (a private temp file) into path. */
static void write_config(char *path, const pipeline_user *u, const char *policy) {
  char json[4096];
  assert_true(th_fmt(json, sizeof json,
                     "{\"pipelines\": {\n"
                     " \"dsr\": {%s},\n"
                     " \"redaction\": {%s, \"url\": \"%s\", \"password_file\": \"%s\"},\n"
                     " \"reconciliation\": {%s}}}\n",
                     policy, policy, u->url, u->password_file, policy));
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
  assert_int_equal(close(fd), 0);
}

static const char *const inboxes[] = {"dsr.failed", "redaction.failed", "reconciliation.failed"};

/* Starts one daemon for every pipeline of the config (no --pipeline) and
 * waits until it consumes each failure inbox. */
static th_bridge *start_all(fx_case *t, const char *path, int port, const fx_audit *audit) {
  char env_config[200], env_addr[64];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  if (port > 0)
    assert_true(th_fmt(env_addr, sizeof env_addr, "DLQ_BRIDGE_METRICS_ADDR=127.0.0.1:%d", port));
  else assert_true(th_fmt(env_addr, sizeof env_addr, "DLQ_BRIDGE_METRICS_ADDR=off"));
  const char *const env[] = {env_config, env_addr, audit ? audit->env_log : NULL,
                             audit ? audit->env_key : NULL, NULL};
  th_bridge *b = &t->bridges[t->nbridges];
  assert_int_equal(th_bridge_start(b, &t->vhost, env, "multi"), 0);
  t->nbridges++;
  for (size_t i = 0; i < 3; i++) {
    if (!th_wait_consumers(t->conn, inboxes[i], 1, WAIT_MS) || !th_bridge_running(b)) {
      fx_dump_logs(t);
      fail_msg("the daemon did not start consuming %s", inboxes[i]);
    }
  }
  return b;
}

/* A task of each pipeline, with its own envelope. */
static th_msg *dsr_task(fx_case *t, const char *id) {
  (void)t;
  th_msg *m = outgoing;
  th_msg_reset(m);
  assert_int_equal(th_msg_task(m, id), 0);
  return m;
}

static th_msg *review_item(fx_case *t, const char *item) {
  (void)t;
  th_msg *m = outgoing;
  th_msg_reset(m);
  assert_int_equal(th_msg_add_str(m, "item_id", item), 0);
  assert_int_equal(th_msg_add_str(m, "doc_id", "doc-1"), 0);
  assert_int_equal(th_msg_set_body(m, privileged, sizeof privileged - 1), 0);
  return m;
}

static th_msg *discrepancy(fx_case *t, const char *id) {
  (void)t;
  th_msg *m = outgoing;
  th_msg_reset(m);
  assert_int_equal(th_msg_add_str(m, "discrepancy_id", id), 0);
  assert_int_equal(th_msg_add_str(m, "category", "balance"), 0);
  assert_int_equal(th_msg_set_body(m, context, sizeof context - 1), 0);
  return m;
}

/* Publishes m to work and has a worker reject it `times` times. */
static void fail_task(fx_case *t, const char *work, th_msg *m, int times) {
  assert_int_equal(th_publish(t->conn, "", work, m), 0);
  th_worker *w = th_worker_open(&t->vhost, work, 1);
  assert_non_null(w);
  th_msg *got = received;
  for (int i = 0; i < times; i++) {
    FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
    assert_int_equal(fx_attempt(got), i);
    assert_int_equal(th_worker_reject(w), 0);
  }
  th_worker_close(w);
}

typedef struct {
  int port;
  const char *path;
  int want; /* the status waited for */
  char *body;
} probe;

static bool status_is(void *arg) {
  probe *p = arg;
  free(p->body);
  p->body = NULL;
  return th_http_get(p->port, p->path, &p->body) == p->want;
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) n++;
  return n;
}

typedef struct {
  int port;
  const char *needles[4]; /* NULL-terminated */
} scraped;

/* The exposition holds every needle. */
static bool exposition_has(void *arg) {
  scraped *c = arg;
  char *text = NULL;
  bool ok = th_http_get(c->port, "/metrics", &text) == 200 && text != NULL;
  for (size_t i = 0; ok && i < 4 && c->needles[i] != NULL; i++)
    ok = strstr(text, c->needles[i]) != NULL;
  free(text);
  return ok;
}

/* (1) One daemon, three pipelines: each task through retry into its own
 * DLQ (the redaction one without its body) and past the DLQ SLA into its
 * own review queue; one exposition, a /healthz line each; one shared
 * audit trail that names each pipeline and verifies. */
static void test_three_pipelines_one_daemon(void **state) {
  fx_case *t = *state;
  received = fx_msg(t);
  outgoing = fx_msg(t);
  pipeline_user u;
  make_user(t, &u);
  char path[] = "/tmp/dlqb-multi-XXXXXX";
  write_config(path, &u, "\"max_attempts\": 2, \"retry_delays\": \"200ms\", \"dlq_sla\": \"2s\"");
  fx_audit audit;
  assert_int_equal(fx_audit_init(&audit), 0);
  int port = th_free_port();
  assert_true(port > 0);
  th_bridge *b = start_all(t, path, port, &audit);

  probe hz = {port, "/healthz", 200, NULL};
  FX_CHECK(t, th_wait_until(status_is, &hz, WAIT_MS));
  assert_string_equal(hz.body, "dsr: ok\nredaction: ok\nreconciliation: ok\n");
  free(hz.body);

  fail_task(t, "dsr.work", dsr_task(t, "multi-d1"), 2);
  fail_task(t, "redaction.work", review_item(t, "multi-r1"), 2);
  fail_task(t, "reconciliation.work", discrepancy(t, "multi-c1"), 2);

  static const char *const reviews[] = {"compliance_review", "redaction.review",
                                        "reconciliation.review"};
  th_msg *got[3];
  for (size_t i = 0; i < 3; i++) {
    got[i] = fx_msg(t);
    FX_CHECK(t, fx_take(t, reviews[i], got[i], WAIT_MS) == 1);
    FX_HDR_STR_EQ(got[i], "dlq_reason", "max_attempts");
    FX_HDR_STR_EQ(got[i], "escalation_reason", "dlq_sla");
    FX_HDR_INT_EQ(got[i], "attempt", 2);
  }
  FX_HDR_STR_EQ(got[0], "request_id", "multi-d1");
  FX_HDR_STR_EQ(got[1], "item_id", "multi-r1");
  assert_int_equal(got[1]->body_len, 0); /* references only, all the way */
  int64_t dropped = 0;
  assert_true(th_msg_int(got[1], "body_dropped", &dropped));
  assert_int_equal(dropped, sizeof privileged - 1);
  FX_HDR_STR_EQ(got[2], "discrepancy_id", "multi-c1");
  assert_int_equal(got[2]->body_len, sizeof context - 1); /* the reprocessing context */
  assert_memory_equal(got[2]->body, context, sizeof context - 1);
  /* Nothing crossed over. */
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(th_queue_depth(t->conn, "redaction.dlq.manual"), 0);
  assert_int_equal(th_queue_depth(t->conn, "reconciliation.dlq.manual"), 0);

  /* One exposition: each family once, every pipeline's samples in it. */
  /* (The refresher reads the queues every 5 s, the first time maybe
   * before the routers declared them.) */
  scraped esc = {port,
                 {"\ndlq_bridge_escalated_total{pipeline=\"reconciliation\",by=\"sla\"} 1\n",
                  "{pipeline=\"redaction\",queue=\"redaction.failed\"}",
                  "{pipeline=\"dsr\",queue=\"dsr.failed\"}", NULL}};
  FX_CHECK(t, th_wait_until(exposition_has, &esc, WAIT_MS));
  char *text = NULL;
  assert_int_equal(th_http_get(port, "/metrics", &text), 200);
  assert_int_equal(count_of(text, "# TYPE dlq_bridge_escalated_total counter"), 1);
  assert_int_equal(count_of(text, "# HELP dlq_bridge_connected "), 1);
  assert_non_null(strstr(text, "\ndlq_bridge_escalated_total{pipeline=\"dsr\",by=\"sla\"} 1\n"));
  assert_non_null(
      strstr(text, "\ndlq_bridge_escalated_total{pipeline=\"redaction\",by=\"sla\"} 1\n"));
  assert_non_null(strstr(text, "\ndlq_bridge_connected{pipeline=\"reconciliation\"} 1\n"));
  assert_non_null(strstr(text, "queue=\"redaction.failed\""));
  assert_non_null(strstr(text, "queue=\"dsr.failed\""));
  free(text);
  probe one = {port, "/healthz/redaction", 200, NULL};
  FX_CHECK(t, th_wait_until(status_is, &one, WAIT_MS));
  assert_string_equal(one.body, "redaction: ok\n");
  free(one.body);

  assert_true(th_bridge_running(b));
  assert_int_equal(fx_stop_bridges(t), 0);
  /* The trail names each pipeline on its hops (retry, DLQ; the
   * escalation), each pipeline's writers keep their own chains, and the
   * shared file verifies. */
  assert_true(fx_count_in_file(audit.log, "\"pipeline\":\"dsr\"") >= 2);
  assert_true(fx_count_in_file(audit.log, "\"pipeline\":\"redaction\"") >= 2);
  assert_true(fx_count_in_file(audit.log, "\"pipeline\":\"reconciliation\"") >= 2);
  assert_true(fx_count_in_file(audit.log, "\"request_id\":\"multi-r1\"") >= 2);
  assert_true(fx_count_in_file(audit.log, "\"request_id\":\"multi-c1\"") >= 2);
  th_result vr;
  assert_int_equal(fx_audit_verify(&audit, &vr), 0);
  if (vr.exit_code != 0) fprintf(stderr, "audit verify: %s%s", vr.out, vr.err);
  assert_int_equal(vr.exit_code, 0);
  /* The password never reaches the log. */
  assert_int_equal(fx_count_in_file(b->log_path, PASSWORD), 0);
  assert_true(fx_count_in_file(b->log_path, "pipeline=redaction") > 0);
  fx_audit_remove(&audit);
  drop_user(&u);
  unlink(path);
}

/* (1b) The same daemon, the operator's part: each pipeline's DLQ item is
 * replayed by `replay --pipeline NAME` into its own work queue (no other
 * pipeline's queue sees it), fails again and, having used its replay
 * (max_replays 1), is escalated by the daemon to its own review queue. */
static void test_three_pipelines_replay_and_escalate(void **state) {
  fx_case *t = *state;
  received = fx_msg(t);
  outgoing = fx_msg(t);
  pipeline_user u;
  make_user(t, &u);
  char path[] = "/tmp/dlqb-multi-XXXXXX";
  write_config(path, &u, "\"max_attempts\": 2, \"retry_delays\": \"200ms\", \"max_replays\": 1");
  fx_audit audit;
  assert_int_equal(fx_audit_init(&audit), 0);
  (void)start_all(t, path, 0, &audit);

  static const char *const names[] = {"dsr", "redaction", "reconciliation"};
  static const char *const works[] = {"dsr.work", "redaction.work", "reconciliation.work"};
  static const char *const dlqs[] = {"dsr.dlq.manual", "redaction.dlq.manual",
                                     "reconciliation.dlq.manual"};
  static const char *const reviews[] = {"compliance_review", "redaction.review",
                                        "reconciliation.review"};
  static const char *const id_headers[] = {"request_id", "item_id", "discrepancy_id"};
  static const char *const ids[] = {"rep-d1", "rep-r1", "rep-c1"};
  fail_task(t, works[0], dsr_task(t, ids[0]), 2);
  fail_task(t, works[1], review_item(t, ids[1]), 2);
  fail_task(t, works[2], discrepancy(t, ids[2]), 2);
  for (size_t i = 0; i < 3; i++) FX_CHECK(t, th_wait_depth(t->conn, dlqs[i], 1, WAIT_MS));

  char env_config[200];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  for (size_t i = 0; i < 3; i++) {
    const char *const env[] = {env_config, audit.env_log, audit.env_key, NULL};
    const char *const args[] = {"replay", "--pipeline", names[i], "--all", "--actor", "ops", NULL};
    th_result r;
    assert_int_equal(th_run_bridge(args, t->vhost.url, env, WAIT_MS, &r), 0);
    if (r.exit_code != 0) fprintf(stderr, "replay --pipeline %s: %s", names[i], r.err);
    assert_int_equal(r.exit_code, 0);
    assert_int_equal(th_queue_depth(t->conn, dlqs[i]), 0);
    /* Only its own work queue holds it. */
    for (size_t j = 0; j < 3; j++)
      assert_int_equal(th_queue_depth(t->conn, works[j]), j == i ? 1 : 0);
    th_worker *w = th_worker_open(&t->vhost, works[i], 1);
    assert_non_null(w);
    th_msg *got = received;
    for (int n = 0; n < 2; n++) {
      FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
      FX_HDR_STR_EQ(got, id_headers[i], ids[i]);
      FX_HDR_INT_EQ(got, "replay_count", 1);
      assert_int_equal(th_worker_reject(w), 0);
    }
    th_worker_close(w);
    th_msg *esc = fx_msg(t);
    FX_CHECK(t, fx_take(t, reviews[i], esc, WAIT_MS) == 1);
    FX_HDR_STR_EQ(esc, id_headers[i], ids[i]);
    FX_HDR_STR_EQ(esc, "escalation_reason", "max_replays");
    if (i == 1) assert_int_equal(esc->body_len, 0); /* references only, after a replay too */
    if (i == 2) assert_int_equal(esc->body_len, sizeof context - 1);
    th_msg_reset(esc);
  }
  assert_int_equal(fx_stop_bridges(t), 0);
  /* The replays are in the shared trail, each under its pipeline. */
  th_result vr;
  assert_int_equal(fx_audit_verify(&audit, &vr), 0);
  if (vr.exit_code != 0) fprintf(stderr, "audit verify: %s%s", vr.out, vr.err);
  assert_int_equal(vr.exit_code, 0);
  assert_true(fx_count_in_file(audit.log, "\"event\":\"replayed\"") >= 3);
  fx_audit_remove(&audit);
  drop_user(&u);
  unlink(path);
}

/* A failure of dsr and of reconciliation, each routed to its DLQ. */
static void others_route(fx_case *t, const char *tag) {
  char id[64];
  snprintf(id, sizeof id, "%s-d", tag);
  fail_task(t, "dsr.work", dsr_task(t, id), 1);
  th_msg *dl = received;
  FX_CHECK(t, fx_take(t, "dsr.dlq.manual", dl, WAIT_MS) == 1);
  FX_HDR_STR_EQ(dl, "request_id", id);
  snprintf(id, sizeof id, "%s-c", tag);
  fail_task(t, "reconciliation.work", discrepancy(t, id), 1);
  FX_CHECK(t, fx_take(t, "reconciliation.dlq.manual", dl, WAIT_MS) == 1);
  FX_HDR_STR_EQ(dl, "discrepancy_id", id);
}

typedef struct {
  fx_case *t;
  const char *user;
} user_conns;

/* Closes every connection of the user (rabbitmqctl), so that the
 * revoked permission applies now rather than on the next connection. */
static bool closed_all(void *arg) {
  user_conns *uc = arg;
  const th_env *e = th_env_get();
  char cmd[6 * TH_PATH_MAX];
  snprintf(cmd, sizeof cmd,
           "'%1$s/scripts/broker-node.sh' ctl '%2$s' -q list_connections pid user | "
           "awk -v u='%3$s' '$2 == u {print $1}' | while read -r pid; do "
           "'%1$s/scripts/broker-node.sh' ctl '%2$s' -q close_connection \"$pid\" revoked "
           ">/dev/null; done",
           e->source_dir, e->node_dir, uc->user);
  fflush(NULL);
  if (system(cmd) != 0) return false;
  snprintf(cmd, sizeof cmd,
           "'%s/scripts/broker-node.sh' ctl '%s' -q list_connections user | grep -qx '%s'",
           e->source_dir, e->node_dir, uc->user);
  return system(cmd) != 0; /* none left */
}

typedef struct {
  fx_case *t;
  const char *queue;
  long consumers;
} consumers_are;

static bool has_consumers(void *arg) {
  consumers_are *c = arg;
  return th_queue_consumers(c->t->conn, c->queue) == c->consumers;
}

/* (2) A blocked pipeline: its failure inbox deleted, then its user's
 * permission revoked. The other two route new failures end to end
 * meanwhile, /healthz names the broken one, and once the permission is
 * back it routes again by itself. */
static void test_blocked_pipeline(void **state) {
  fx_case *t = *state;
  received = fx_msg(t);
  outgoing = fx_msg(t);
  pipeline_user u;
  make_user(t, &u);
  char path[] = "/tmp/dlqb-multi-XXXXXX";
  write_config(path, &u, "\"max_attempts\": 1");
  int port = th_free_port();
  assert_true(port > 0);
  th_bridge *b = start_all(t, path, port, NULL);

  /* Its inbox deleted: the others go on, and it declares it again. */
  char api[TH_PATH_MAX];
  assert_true(th_fmt(api, sizeof api, "/api/queues/%s/redaction.failed", t->vhost.name));
  assert_int_equal(th_mgmt("DELETE", api, NULL, NULL), 204);
  others_route(t, "deleted");
  consumers_are back = {t, "redaction.failed", 1};
  FX_CHECK(t, th_wait_until(has_consumers, &back, WAIT_MS));
  fail_task(t, "redaction.work", review_item(t, "after-delete"), 1);
  th_msg *dl = fx_msg(t);
  FX_CHECK(t, fx_take(t, "redaction.dlq.manual", dl, WAIT_MS) == 1);
  FX_HDR_STR_EQ(dl, "item_id", "after-delete");

  /* Its user's permission revoked (and its connections closed, so that
   * it applies now). */
  assert_int_equal(ctl("set_permissions -p '%s' '%s' '^$' '^$' '^$'", t->vhost.name, u.name), 0);
  user_conns uc = {t, u.name};
  FX_CHECK(t, th_wait_until(closed_all, &uc, WAIT_MS));
  probe hz = {port, "/healthz", 503, NULL};
  FX_CHECK(t, th_wait_until(status_is, &hz, WAIT_MS));
  assert_non_null(strstr(hz.body, "dsr: ok\n"));
  assert_non_null(strstr(hz.body, "reconciliation: ok\n"));
  assert_non_null(strstr(hz.body, "\nredaction: "));
  assert_null(strstr(hz.body, "redaction: ok"));
  assert_non_null(strstr(hz.body, "ACCESS_REFUSED"));
  assert_null(strstr(hz.body, PASSWORD));
  free(hz.body);
  probe dsr_only = {port, "/healthz?pipeline=dsr", 200, NULL};
  FX_CHECK(t, th_wait_until(status_is, &dsr_only, WAIT_MS));
  free(dsr_only.body);
  /* A redaction failure waits in its inbox; the others route. */
  assert_int_equal(th_publish(t->conn, "", "redaction.failed", review_item(t, "while-revoked")), 0);
  others_route(t, "revoked");
  assert_int_equal(th_queue_depth(t->conn, "redaction.failed"), 1);
  assert_true(th_bridge_running(b));

  /* Permission back: it recovers by itself and routes what waited. */
  assert_int_equal(
      ctl("set_permissions -p '%s' '%s' '^(redaction\\..+|dsr\\.audit\\.anchors)$' "
          "'^(amq\\.default|redaction\\..+)$' '^(redaction\\..+|dsr\\.audit\\.anchors)$'",
          t->vhost.name, u.name),
      0);
  FX_CHECK(t, fx_take(t, "redaction.dlq.manual", dl, WAIT_MS) == 1);
  FX_HDR_STR_EQ(dl, "item_id", "while-revoked");
  probe ok = {port, "/healthz", 200, NULL};
  FX_CHECK(t, th_wait_until(status_is, &ok, WAIT_MS));
  assert_string_equal(ok.body, "dsr: ok\nredaction: ok\nreconciliation: ok\n");
  free(ok.body);
  assert_int_equal(fx_stop_bridges(t), 0);
  assert_int_equal(fx_count_in_file(b->log_path, PASSWORD), 0);
  drop_user(&u);
  unlink(path);
}

static void flood_item(void *ctx, size_t i, th_bulk_item *it) {
  (void)ctx;
  snprintf(it->id, sizeof it->id, "flood-%zu", i);
  snprintf(it->source_system, sizeof it->source_system, "flood");
  it->dlq_at_ms = th_now_ms();
}

/* (3) A flood: 20,000 failures waiting in the reconciliation inbox do not
 * keep a single dsr failure from being routed before they are done, with
 * both pipelines' writers appending to the one audit trail (its lock is
 * shared: each batch holds it briefly). */
static void test_flood_does_not_hold_up_another(void **state) {
  fx_case *t = *state;
  received = fx_msg(t);
  outgoing = fx_msg(t);
  pipeline_user u;
  make_user(t, &u);
  char path[] = "/tmp/dlqb-multi-XXXXXX";
  write_config(path, &u, "\"max_attempts\": 1");
  char env_config[200];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  const char *const env[] = {env_config, NULL};
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare, t->vhost.url, env, WAIT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "declare: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  /* Flood items break the reconciliation profile (a DSR envelope): each
   * is a hop to its DLQ all the same. */
  assert_int_equal(th_bulk_publish_dlq(t->conn, "reconciliation.failed", FLOOD, flood_item, NULL),
                   0);
  fx_audit audit;
  assert_int_equal(fx_audit_init(&audit), 0);
  (void)start_all(t, path, 0, &audit);
  int64_t started = th_now_ms();
  fail_task(t, "dsr.work", dsr_task(t, "beside-the-flood"), 1);
  th_msg *dl = fx_msg(t);
  FX_CHECK(t, fx_take(t, "dsr.dlq.manual", dl, WAIT_MS) == 1);
  int64_t beside = th_now_ms() - started;
  FX_HDR_STR_EQ(dl, "request_id", "beside-the-flood");
  /* Routed while the flood was still being worked off. */
  long left = th_queue_depth(t->conn, "reconciliation.failed");
  long done = th_queue_depth(t->conn, "reconciliation.dlq.manual");
  fprintf(stderr,
          "flood: the dsr failure was in its DLQ %lld ms after the start, %ld of %d left "
          "in reconciliation.failed, %ld routed\n",
          (long long)beside, left, FLOOD, done);
  assert_true(left > 0);
  assert_true(done < FLOOD);
  /* And the flood is worked off in the end. */
  FX_CHECK(t, th_wait_depth(t->conn, "reconciliation.dlq.manual", FLOOD, 120000));
  fprintf(stderr, "flood: %d routed %lld ms after the start\n", FLOOD,
          (long long)(th_now_ms() - started));
  assert_int_equal(fx_stop_bridges(t), 0);
  assert_true(fx_count_in_file(audit.log, "\"pipeline\":\"reconciliation\"") >= FLOOD);
  th_result vr;
  assert_int_equal(fx_audit_verify(&audit, &vr), 0);
  if (vr.exit_code != 0) fprintf(stderr, "audit verify: %s%s", vr.out, vr.err);
  assert_int_equal(vr.exit_code, 0);
  fx_audit_remove(&audit);
  drop_user(&u);
  unlink(path);
}

/* A pipeline refused from the start (its user has no permission) does not
 * keep the daemon from serving the others; it starts routing by itself
 * once its permission is given. */
static void test_start_with_one_blocked(void **state) {
  fx_case *t = *state;
  received = fx_msg(t);
  outgoing = fx_msg(t);
  pipeline_user u;
  make_user(t, &u);
  assert_int_equal(ctl("set_permissions -p '%s' '%s' '^$' '^$' '^$'", t->vhost.name, u.name), 0);
  char path[] = "/tmp/dlqb-multi-XXXXXX";
  write_config(path, &u, "\"max_attempts\": 1");
  int port = th_free_port();
  assert_true(port > 0);
  char env_config[200], env_addr[64];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  assert_true(th_fmt(env_addr, sizeof env_addr, "DLQ_BRIDGE_METRICS_ADDR=127.0.0.1:%d", port));
  const char *const env[] = {env_config, env_addr, NULL};
  th_bridge *b = &t->bridges[t->nbridges];
  assert_int_equal(th_bridge_start(b, &t->vhost, env, "blocked-at-start"), 0);
  t->nbridges++;
  FX_CHECK(t, th_wait_consumers(t->conn, "dsr.failed", 1, WAIT_MS));
  FX_CHECK(t, th_wait_consumers(t->conn, "reconciliation.failed", 1, WAIT_MS));
  probe hz = {port, "/healthz", 503, NULL};
  FX_CHECK(t, th_wait_until(status_is, &hz, WAIT_MS));
  assert_non_null(strstr(hz.body, "dsr: ok\n"));
  assert_non_null(strstr(hz.body, "redaction: "));
  assert_non_null(strstr(hz.body, "ACCESS_REFUSED"));
  free(hz.body);
  others_route(t, "at-start");
  assert_true(th_bridge_running(b));
  assert_int_equal(
      ctl("set_permissions -p '%s' '%s' '^(redaction\\..+|dsr\\.audit\\.anchors)$' "
          "'^(amq\\.default|redaction\\..+)$' '^(redaction\\..+|dsr\\.audit\\.anchors)$'",
          t->vhost.name, u.name),
      0);
  FX_CHECK(t, th_wait_consumers(t->conn, "redaction.failed", 1, WAIT_MS));
  fail_task(t, "redaction.work", review_item(t, "once-allowed"), 1);
  FX_CHECK(t, fx_take(t, "redaction.dlq.manual", received, WAIT_MS) == 1);
  FX_HDR_STR_EQ(received, "item_id", "once-allowed");
  probe ok = {port, "/healthz", 200, NULL};
  FX_CHECK(t, th_wait_until(status_is, &ok, WAIT_MS));
  free(ok.body);
  assert_int_equal(fx_stop_bridges(t), 0);
  drop_user(&u);
  unlink(path);
}

/* No pipeline can start at all (every one's user refused): exit 1 with a
 * line per pipeline, as a daemon of one pipeline exits for it. */
static void test_none_can_start(void **state) {
  fx_case *t = *state;
  char path[] = "/tmp/dlqb-multi-XXXXXX";
  const th_env *e = th_env_get();
  char json[1024];
  assert_true(
      th_fmt(json, sizeof json,
             "{\"startup_wait\": \"0s\", \"url\": \"amqp://nobody:wrong-pw-1@127.0.0.1:%d/%s\","
             " \"pipelines\": {\"dsr\": {}, \"redaction\": {}}}",
             e->amqp_port, t->vhost.name));
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
  assert_int_equal(close(fd), 0);
  char env_config[200];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  const char *const env[] = {env_config, "DLQ_BRIDGE_METRICS_ADDR=off", NULL};
  static const char *const run[] = {"run", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(run, NULL, env, WAIT_MS, &r), 0);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "pipeline dsr: "));
  assert_non_null(strstr(r.err, "pipeline redaction: "));
  assert_int_equal(th_error_lines(r.err), 2);
  assert_null(strstr(r.err, "wrong-pw-1"));
  unlink(path);
}

/* run --pipeline NAME serves that pipeline as its own broker user, as the
 * daemon of all does (its url and password file, not the top level's);
 * the ops commands stay the top-level user. */
static void test_one_pipeline_runs_as_its_user(void **state) {
  fx_case *t = *state;
  received = fx_msg(t);
  outgoing = fx_msg(t);
  pipeline_user u;
  make_user(t, &u);
  char path[] = "/tmp/dlqb-multi-XXXXXX";
  write_config(path, &u, "\"max_attempts\": 1");
  char env_config[200];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  const char *const env[] = {env_config, NULL};
  static const char *const run[] = {"run", "--pipeline", "redaction", "--print-config", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(run, t->vhost.url, env, WAIT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, u.url));
  assert_non_null(strstr(r.out, u.password_file));
  static const char *const dsr[] = {"run", "--pipeline", "dsr", "--print-config", NULL};
  assert_int_equal(th_run_bridge(dsr, t->vhost.url, env, WAIT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_null(strstr(r.out, u.url));
  /* It routes as that user: its connection is the user's. */
  char env_pipeline[] = "DLQ_BRIDGE_PIPELINE=redaction";
  const char *const env2[] = {env_config, env_pipeline, "DLQ_BRIDGE_METRICS_ADDR=off", NULL};
  th_bridge *b = &t->bridges[t->nbridges];
  assert_int_equal(th_bridge_start(b, &t->vhost, env2, "one"), 0);
  t->nbridges++;
  FX_CHECK(t, th_wait_consumers(t->conn, "redaction.failed", 1, WAIT_MS));
  assert_int_equal(ctl("list_connections user | grep -qx '%s'", u.name), 0);
  fail_task(t, "redaction.work", review_item(t, "as-its-user"), 1);
  FX_CHECK(t, fx_take(t, "redaction.dlq.manual", received, WAIT_MS) == 1);
  FX_HDR_STR_EQ(received, "item_id", "as-its-user");
  assert_int_equal(fx_stop_bridges(t), 0);
  /* A password file it cannot read: exit 2 naming the pipeline's key. */
  remove(u.password_file);
  static const char *const gone[] = {"run", NULL};
  assert_int_equal(th_run_bridge(gone, t->vhost.url, env, WAIT_MS, &r), 0);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "key 'pipelines.redaction.password_file': cannot read"));
  drop_user(&u);
  unlink(path);
}

/* An invoice of the profile defined only in the config file. */
static th_msg *invoice(fx_case *t, const char *id) {
  (void)t;
  th_msg *m = outgoing;
  th_msg_reset(m);
  snprintf(m->message_id, sizeof m->message_id, "msg-%s", id);
  assert_int_equal(th_msg_add_str(m, "invoice_id", id), 0);
  assert_int_equal(th_msg_add_str(m, "account", "acc-7"), 0);
  assert_int_equal(th_msg_set_body(m, context, sizeof context - 1), 0);
  return m;
}

/* `audit reconcile --pipeline NAME --json` on the world of (4): its exit
 * status, and its DLQ's missing and unrecorded entries (owned by *out). */
static int reconcile_of(fx_case *t, const char *env_config, const fx_audit *a, const char *name,
                        json_object **out) {
  const char *const env[] = {env_config, a->env_log, a->env_pub, NULL};
  const char *const args[] = {"audit", "reconcile", "--pipeline", name, "--json", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, WAIT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "reconcile --pipeline %s: %s%s", name, r.out, r.err);
  *out = json_tokener_parse(r.out);
  assert_non_null(*out);
  return r.exit_code;
}

static size_t entries(json_object *j, const char *key) {
  json_object *v;
  assert_true(json_object_object_get_ex(j, key, &v));
  return json_object_array_length(v);
}

/* (4) Four pipelines, one of them (invoices) with a profile defined only
 * in the config file: a failure of each routed by the daemon into its own
 * DLQ, then `audit reconcile --pipeline NAME` finds each DLQ as its
 * pipeline's records say (exit 0, nothing missing, nothing unrecorded);
 * once an invoice is taken from invoices.dlq.manual behind the bridge's
 * back, reconcile --pipeline invoices names exactly it and the others
 * still find nothing. `audit verify` checks the shared trail with several
 * pipelines configured and none named; `inspect --queue` takes the chosen
 * pipeline's review queue. */
static void test_reconcile_each_pipeline(void **state) {
  fx_case *t = *state;
  received = fx_msg(t);
  outgoing = fx_msg(t);
  char path[] = "/tmp/dlqb-multi-XXXXXX";
  static const char json[] =
      "{\"max_attempts\": 1, \"pipelines\": {\"dsr\": {}, \"redaction\": {},\n"
      " \"recon\": {\"profile\": \"reconciliation\"},\n"
      " \"invoices\": {\"profile\": {\"identity\": [\"invoice_id\", \"account\"]}}}}\n";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
  assert_int_equal(close(fd), 0);
  fx_audit audit;
  assert_int_equal(fx_audit_init(&audit), 0);
  char env_config[200];
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  const char *const env[] = {env_config, "DLQ_BRIDGE_METRICS_ADDR=off", audit.env_log,
                             audit.env_key, NULL};
  th_bridge *b = &t->bridges[t->nbridges];
  assert_int_equal(th_bridge_start(b, &t->vhost, env, "four"), 0);
  t->nbridges++;
  static const char *const names[] = {"dsr", "redaction", "recon", "invoices"};
  static const char *const four[] = {"dsr.failed", "redaction.failed", "recon.failed",
                                     "invoices.failed"};
  for (size_t i = 0; i < 4; i++) FX_CHECK(t, th_wait_consumers(t->conn, four[i], 1, WAIT_MS));

  fail_task(t, "dsr.work", dsr_task(t, "four-d1"), 1);
  /* Each with a message_id: reconcile compares by it. */
  th_msg *m = review_item(t, "four-r1");
  snprintf(m->message_id, sizeof m->message_id, "msg-four-r1");
  fail_task(t, "redaction.work", m, 1);
  m = discrepancy(t, "four-c1");
  snprintf(m->message_id, sizeof m->message_id, "msg-four-c1");
  fail_task(t, "recon.work", m, 1);
  fail_task(t, "invoices.work", invoice(t, "inv-1"), 1);
  fail_task(t, "invoices.work", invoice(t, "inv-2"), 1);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 1, WAIT_MS));
  FX_CHECK(t, th_wait_depth(t->conn, "redaction.dlq.manual", 1, WAIT_MS));
  FX_CHECK(t, th_wait_depth(t->conn, "recon.dlq.manual", 1, WAIT_MS));
  FX_CHECK(t, th_wait_depth(t->conn, "invoices.dlq.manual", 2, WAIT_MS));
  /* Stopped, so that its escalator holds no DLQ item during the reads. */
  assert_int_equal(fx_stop_bridges(t), 0);

  /* Each pipeline's DLQ against its own records. */
  for (size_t i = 0; i < 4; i++) {
    json_object *j = NULL;
    assert_int_equal(reconcile_of(t, env_config, &audit, names[i], &j), 0);
    assert_int_equal(entries(j, "missing"), 0);
    assert_int_equal(entries(j, "unrecorded"), 0);
    json_object *dlq, *v;
    assert_true(json_object_object_get_ex(j, "dlq", &dlq));
    assert_true(json_object_object_get_ex(dlq, "without_message_id", &v));
    assert_int_equal(json_object_get_int64(v), 0);
    assert_true(json_object_object_get_ex(j, "recorded_in_dlq", &v));
    assert_int_equal(json_object_get_int64(v), i == 3 ? 2 : 1);
    json_object_put(j);
  }

  /* One invoice taken behind the bridge's back: named, and only it. */
  assert_int_equal(th_get(t->conn, "invoices.dlq.manual", received), 1);
  const char *taken = th_msg_str(received, "invoice_id");
  assert_non_null(taken);
  json_object *j = NULL, *missing, *e, *v;
  assert_int_equal(reconcile_of(t, env_config, &audit, "invoices", &j), 1);
  assert_true(json_object_object_get_ex(j, "missing", &missing));
  assert_int_equal(json_object_array_length(missing), 1);
  e = json_object_array_get_idx(missing, 0);
  assert_true(json_object_object_get_ex(e, "invoice_id", &v));
  assert_string_equal(json_object_get_string(v), taken);
  assert_true(json_object_object_get_ex(e, "message_id", &v));
  assert_string_equal(json_object_get_string(v), received->message_id);
  assert_int_equal(entries(j, "unrecorded"), 0);
  json_object_put(j);
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(reconcile_of(t, env_config, &audit, names[i], &j), 0);
    json_object_put(j);
  }

  /* inspect reads the chosen pipeline's review queue by its name. */
  th_result r;
  const char *const ienv[] = {env_config, NULL};
  static const char *const ins[] = {"inspect", "--pipeline",       "redaction",
                                    "--queue", "redaction.review", NULL};
  assert_int_equal(th_run_bridge(ins, t->vhost.url, ienv, WAIT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "inspect --queue: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  static const char *const other[] = {"inspect", "--pipeline",        "redaction",
                                      "--queue", "compliance_review", NULL};
  assert_int_equal(th_run_bridge(other, t->vhost.url, ienv, WAIT_MS, &r), 0);
  assert_int_equal(r.exit_code, 2); /* dsr's review queue is not this pipeline's */
  assert_non_null(strstr(r.err, "only redaction.dlq.manual and redaction.review"));
  /* Several pipelines, none named: verify checks every chain of the trail. */
  const char *const venv[] = {env_config, audit.env_log, audit.env_pub, NULL};
  static const char *const verify[] = {"audit", "verify", "--json", NULL};
  assert_int_equal(th_run_bridge(verify, NULL, venv, WAIT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "audit verify: %s%s", r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "\"intact\":true"));

  fx_audit_remove(&audit);
  unlink(path);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_three_pipelines_one_daemon),
      FX_TEST(test_three_pipelines_replay_and_escalate),
      FX_TEST(test_blocked_pipeline),
      FX_TEST(test_start_with_one_blocked),
      FX_TEST(test_none_can_start),
      FX_TEST(test_one_pipeline_runs_as_its_user),
      FX_TEST(test_flood_does_not_hold_up_another),
      FX_TEST(test_reconcile_each_pipeline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

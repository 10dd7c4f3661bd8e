/* The audit trail under `dlq-bridge run`: records are durable before the
 * originals are acked. With the log on a full device (a symlink to
 * /dev/full: every write fails with ENOSPC, even for root) the bridge
 * republishes but acks nothing; it resumes by itself once the log is
 * writable again, and `audit verify` accepts the result. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flow.h"

#define WAIT_MS 20000
#define HOLD_MS 2500 /* how long "nothing is acked" is watched: five retries */

/* The fixture's audit trail (flow.h), the real file's place while the log
 * is on a full disk, and the bridge environment using it. */
typedef struct {
  fx_audit a;
  const char *dir, *log;
  char saved[160];
  const char *env[8];
} audit_dir;

static void audit_dir_init(audit_dir *d) {
  assert_int_equal(fx_audit_init(&d->a), 0);
  d->dir = d->a.dir;
  d->log = d->a.log;
  assert_true(th_fmt(d->saved, sizeof d->saved, "%s/audit.log.saved", d->dir));
  d->env[0] = d->a.env_log;
  d->env[1] = d->a.env_key;
  d->env[2] = "DLQ_BRIDGE_MAX_ATTEMPTS=1"; /* every failure goes to the DLQ */
  /* Bridges started without fx_start_bridge must not take the default
   * metrics port either (another bridge or a compose stack may hold it). */
  d->env[3] = "DLQ_BRIDGE_METRICS_ADDR=off";
  d->env[4] = NULL;
}

static void audit_dir_remove(const audit_dir *d) { fx_audit_remove(&d->a); }

/* The log's path becomes a full disk; the real file is kept aside. */
static void disk_full(audit_dir *d) {
  assert_int_equal(rename(d->log, d->saved), 0);
  assert_int_equal(symlink("/dev/full", d->log), 0);
}

static void disk_back(audit_dir *d) {
  assert_int_equal(unlink(d->log), 0);
  assert_int_equal(rename(d->saved, d->log), 0);
}

typedef struct {
  const char *path;
  const char *needle;
  int want;
} count_wait;

static bool count_reached(void *arg) {
  count_wait *c = arg;
  return fx_count_in_file(c->path, c->needle) >= c->want;
}

/* Lines of the file at path holding both needles. */
static int count_both(const char *path, const char *n1, const char *n2) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  char *line = NULL;
  size_t cap = 0;
  int n = 0;
  while (getline(&line, &cap, f) >= 0)
    if (strstr(line, n1) != NULL && strstr(line, n2) != NULL) n++;
  free(line);
  fclose(f);
  return n;
}

static bool wait_count(const char *path, const char *needle, int want) {
  count_wait c = {path, needle, want};
  return th_wait_until(count_reached, &c, WAIT_MS);
}

/* Publishes failed tasks straight into the failure inbox, as a worker
 * reporting an error does. */
static void publish_failed(fx_case *t, const char *prefix, int first, int n) {
  for (int i = first; i < first + n; i++) {
    char id[64];
    snprintf(id, sizeof id, "%s-%d", prefix, i);
    th_msg *m = fx_msg(t);
    assert_int_equal(th_msg_task(m, id), 0);
    assert_int_equal(th_msg_add_str(m, "worker_error", "upstream timeout"), 0);
    assert_int_equal(th_publish(t->conn, "", "dsr.failed", m), 0);
  }
}

/* Unacked messages of a queue by the management API (its statistics lag
 * by a few seconds, hence the waits). */
typedef struct {
  const fx_case *t;
  const char *queue, *field;
  long want;
} stat_wait;

static bool stat_is(void *arg) {
  stat_wait *u = arg;
  char path[512];
  snprintf(path, sizeof path, "/api/queues/%s/%s", u->t->vhost.name, u->queue);
  json_object *q = th_mgmt_get_json(path);
  json_object *m;
  long n = -1;
  if (q != NULL && json_object_object_get_ex(q, u->field, &m)) n = (long)json_object_get_int64(m);
  json_object_put(q);
  return n == u->want;
}

static bool wait_unacked(const fx_case *t, const char *queue, long want) {
  stat_wait u = {t, queue, "messages_unacknowledged", want};
  return th_wait_until(stat_is, &u, WAIT_MS);
}

/* Nothing left in queue, ready or unacked (so nothing in flight either). */
static bool wait_empty(const fx_case *t, const char *queue) {
  stat_wait u = {t, queue, "messages", 0};
  return th_wait_until(stat_is, &u, WAIT_MS);
}

static void expect_verified(fx_case *t, const audit_dir *d, const char *want) {
  th_result r;
  assert_int_equal(fx_audit_verify(&d->a, &r), 0);
  printf("audit verify: exit %d\n%s%s", r.exit_code, r.out, r.err);
  FX_CHECK(t, r.exit_code == 0);
  assert_non_null(strstr(r.out, want));
  /* The same, for a script: one JSON document. */
  const char *const args[] = {"audit", "verify", "--json", NULL};
  const char *const env[] = {d->a.env_log, d->a.env_pub, NULL};
  assert_int_equal(th_run_bridge(args, NULL, env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  json_object *j = json_tokener_parse(r.out), *v = NULL;
  assert_non_null(j);
  assert_true(json_object_object_get_ex(j, "intact", &v) && json_object_get_boolean(v));
  assert_true(json_object_object_get_ex(j, "records", &v) && json_object_get_int64(v) > 0);
  json_object_put(j);
  /* Not intact (a file that is not the log): exit 1 and the error document. */
  const char *const bad[] = {"audit", "verify", "--no-seal", "--json", "/etc/hostname", NULL};
  assert_int_equal(th_run_bridge(bad, NULL, env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 1);
  j = json_tokener_parse(r.out);
  assert_non_null(j);
  assert_true(json_object_object_get_ex(j, "error", &v));
  json_object_put(j);
}

static void test_unwritable_log_holds_acks_then_resumes(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  assert_int_equal(fx_start_bridge(t, d.env), 0);
  th_bridge *b = &t->bridges[0];

  /* Healthy: three hops, each recorded. */
  publish_failed(t, "before", 0, 3);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 3, WAIT_MS));
  FX_CHECK(t, wait_count(d.log, "\"event\":\"dead_lettered\"", 3));

  /* Full disk: the first failure after it is republished (its DLQ copy
   * is confirmed) before the writer finds out, but its original is not
   * acked; once the writer has failed, the router routes nothing more:
   * the next four stay unrouted and unacked in dsr.failed. */
  disk_full(&d);
  publish_failed(t, "during", 0, 1);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 4, WAIT_MS));
  FX_CHECK(t, wait_count(b->log_path, "audit_failing", 1));
  publish_failed(t, "during", 1, 4);
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 5));
  usleep(HOLD_MS * 1000); /* watching that nothing more happens */
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 5));
  assert_int_equal(th_queue_depth(t->conn, "dsr.failed"), 0); /* held, not requeued */
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 4);
  FX_CHECK(t, th_bridge_running(b));
  /* Said once, not every 500 ms. */
  assert_int_equal(fx_count_in_file(b->log_path, "audit_failing"), 1);
  assert_int_equal(fx_count_in_file(d.saved, "\"event\":\"dead_lettered\""), 3);

  /* Writable again: it resumes by itself, acks the first and routes the
   * four it held, once each. */
  disk_back(&d);
  FX_CHECK(t, wait_count(d.log, "\"event\":\"dead_lettered\"", 8));
  FX_CHECK(t, wait_count(b->log_path, "audit_recovered", 1));
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 0));
  assert_int_equal(th_queue_depth(t->conn, "dsr.failed"), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 8);
  assert_int_equal(fx_count_in_file(b->log_path, "audit_recovered"), 1);
  /* Each hop recorded exactly once. */
  for (int i = 0; i < 5; i++) {
    char needle[64];
    snprintf(needle, sizeof needle, "\"request_id\":\"during-%d\"", i);
    assert_int_equal(fx_count_in_file(d.log, needle), 1);
  }
  assert_int_equal(fx_stop_bridges(t), 0);
  /* Every writer of the bridge (the router, and any other thread with its
   * own chain) closed its chain on SIGTERM. */
  expect_verified(t, &d, "ended cleanly, 0 open)");
  audit_dir_remove(&d);
}

static void test_crash_while_unwritable_loses_nothing(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  assert_int_equal(fx_start_bridge(t, d.env), 0);
  FX_CHECK(t, wait_count(d.log, "\"event\":\"chain_start\"", 1));

  disk_full(&d);
  publish_failed(t, "crash", 0, 4);
  /* Those routed before the writer found the disk full have a DLQ copy;
   * the rest were left unrouted once it had; none is acked. */
  FX_CHECK(t, wait_count(t->bridges[0].log_path, "audit_failing", 1));
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 4));
  long copies = th_queue_depth(t->conn, "dsr.dlq.manual");
  printf("routed before the writer failed: %ld\n", copies);
  FX_CHECK(t, copies >= 1 && copies <= 4);
  /* The bridge dies holding them: none was acked, so all four return. */
  th_bridge_kill(&t->bridges[0]);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.failed", 4, WAIT_MS));

  /* A new bridge on a writable log routes them again (a duplicate in the
   * DLQ, never a loss) and records each hop. */
  disk_back(&d);
  th_bridge *b2 = &t->bridges[1];
  assert_int_equal(th_bridge_start(b2, &t->vhost, d.env, "bridge2"), 0);
  t->nbridges = 2;
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", copies + 4, WAIT_MS));
  FX_CHECK(t, wait_count(d.log, "\"event\":\"dead_lettered\"", 4));
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 0));
  assert_int_equal(th_queue_depth(t->conn, "dsr.failed"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
  /* The killed bridge's chains stay open (it never closed them); the
   * verifier accepts that: an open chain is a crash, not tampering. */
  expect_verified(t, &d, "audit log intact");
  assert_int_equal(fx_count_in_file(d.log, "\"event\":\"dead_lettered\""), 4);
  audit_dir_remove(&d);
}

/* Runs `dlq-bridge audit show --request-id id [--json]` on d's log, with
 * the completion ledger of the broker at url (NULL: --offline). */
static void audit_show_at(const audit_dir *d, const char *url, const char *id, bool json,
                          th_result *r) {
  const char *args[8] = {"audit", "show", "--request-id", id};
  size_t n = 4;
  if (url == NULL) args[n++] = "--offline";
  if (json) args[n++] = "--json";
  args[n] = NULL;
  const char *const env[] = {d->a.env_log, d->a.env_pub, "DLQ_BRIDGE_COMPLETION_WRITERS=guest",
                             NULL};
  assert_int_equal(th_run_bridge(args, url, env, 30000, r), 0);
  printf("audit show %s%s: exit %d\n%s%s", id, json ? " --json" : "", r->exit_code, r->out, r->err);
}

static void audit_show(const audit_dir *d, const char *id, bool json, th_result *r) {
  audit_show_at(d, NULL, id, json, r);
}

/* A compliance officer's question, "what happened to this request?",
 * answered from the log only once it verifies: two failures retried, the
 * third dead-lettered, then replayed by an operator; another task's hops
 * are not shown; after an edit, nothing is shown at all. */
/* The trail keeps the broker's delivery history: a task rejected twice
 * (max_attempts 2, one retry) has its x-death entries with their counts in
 * the record of its hop into the DLQ (the rejections on dsr.work, the
 * expiry of the delay queue), which audit show prints; the log verifies. */
static void test_trail_records_xdeath_counts(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  const char *const env[] = {d.a.env_log, d.a.env_key, "DLQ_BRIDGE_MAX_ATTEMPTS=2",
                             "DLQ_BRIDGE_RETRY_DELAYS=100ms", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  assert_int_equal(fx_publish_task(t, "deaths-1"), 0);
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  th_msg *m = fx_msg(t);
  for (int i = 0; i < 2; i++) {
    FX_CHECK(t, th_worker_next(w, m, WAIT_MS) == 1);
    assert_int_equal(th_worker_reject(w), 0);
  }
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 1, WAIT_MS));
  assert_int_equal(fx_stop_bridges(t), 0);
  th_result r;
  audit_show(&d, "deaths-1", false, &r);
  printf("%s", r.out);
  assert_int_equal(r.exit_code, 0);
  /* The record of the hop into the DLQ: both entries with their counts. */
  assert_int_equal(fx_count_in_file(d.log, "\"x_death\":\""), 2); /* the retry hop too */
  assert_non_null(strstr(r.out, "dead_lettered"));
  const char *dl = strstr(r.out, "dead_lettered");
  /* The count is the broker's: 3.10.8 counts both rejections ("dsr.work
   * rejected 2"); 4.0.5 starts x-death again on the router's republish
   * (the broker owns it since 3.13) and says "dsr.work rejected 1" with
   * x-delivery-count 1 (measured). The trail records what the message
   * carried either way. */
  assert_true(strstr(dl, "dsr.work rejected 2") != NULL ||
              strstr(dl, "dsr.work rejected 1") != NULL);
  assert_non_null(strstr(dl, "dsr.retry.100ms expired 1"));
  th_result vr;
  assert_int_equal(fx_audit_verify(&d.a, &vr), 0);
  assert_int_equal(vr.exit_code, 0);
  audit_dir_remove(&d);
}

/* The line of `audit show` output (out) for event ev, copied into line; false when none. */
static bool show_line(const char *out, const char *ev, char *line, size_t cap) {
  const char *at = strstr(out, ev);
  if (at == NULL) return false;
  const char *start = at;
  while (start > out && start[-1] != '\n') start--;
  size_t n = strcspn(start, "\n");
  if (n >= cap) n = cap - 1;
  memcpy(line, start, n);
  line[n] = '\0';
  return true;
}

/* The movers' hops keep the broker's delivery history as the router's do:
 * a task replayed, another escalated and a third resolved out of the DLQ
 * each carry into their record the x-death (and x-delivery-count, where
 * the message has one) it carried, the same as its hop into the DLQ
 * recorded. */
static void test_ops_hops_record_xdeath_counts(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  const char *const env[] = {d.a.env_log, d.a.env_key, "DLQ_BRIDGE_MAX_ATTEMPTS=2",
                             "DLQ_BRIDGE_RETRY_DELAYS=100ms", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  static const char *const ids[] = {"odeaths-1", "odeaths-2", "odeaths-3"};
  for (size_t i = 0; i < 3; i++) assert_int_equal(fx_publish_task(t, ids[i]), 0);
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  th_msg *m = fx_msg(t);
  for (int i = 0; i < 6; i++) { /* 3 tasks x 2 attempts */
    FX_CHECK(t, th_worker_next(w, m, WAIT_MS) == 1);
    assert_int_equal(th_worker_reject(w), 0);
  }
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 3, WAIT_MS));
  assert_int_equal(fx_stop_bridges(t), 0);
  const char *const replay[] = {"replay", "--request-id", ids[0], NULL};
  const char *const escalate[] = {"escalate", "--request-id", ids[1], "--note", "legal", NULL};
  const char *const resolve[] = {"resolve", "--message-id", "msg-odeaths-3",
                                 "--note",  "by hand",      NULL};
  const char *const *const movers[] = {replay, escalate, resolve};
  /* Each as the event column shows it (an intent's line names its event
   * after "for "). */
  static const char *const events[] = {"  replayed ", "  escalated ", "  resolved "};
  th_result r;
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(th_run_bridge(movers[i], t->vhost.url, env, 30000, &r), 0);
    printf("%s: exit %d\n%s%s", movers[i][0], r.exit_code, r.out, r.err);
    assert_int_equal(r.exit_code, 0);
  }
  for (size_t i = 0; i < 3; i++) {
    audit_show(&d, ids[i], false, &r);
    assert_int_equal(r.exit_code, 0);
    char into[2048], out[2048];
    assert_true(show_line(r.out, "dead_lettered", into, sizeof into));
    assert_true(show_line(r.out, events[i], out, sizeof out));
    /* What the hop into the DLQ recorded, the mover's hop records again:
     * the message still carries it. */
    const char *deaths = strstr(into, "  x-death [");
    assert_non_null(deaths);
    const char *end = strchr(deaths, ']');
    assert_non_null(end);
    char want[1024];
    assert_true(th_fmt(want, sizeof want, "%.*s", (int)(end + 1 - deaths), deaths));
    printf("%s: %s\n", events[i], strstr(out, "  x-death") ? strstr(out, "  x-death") : "none");
    assert_non_null(strstr(out, want));
    /* x-delivery-count is the source queue's count of its own deliveries:
     * the router's hop records dsr.failed's, and its copy into the DLQ no
     * longer carries it (a classic DLQ keeps none), so the mover's hop has
     * none (it had the router's, carried over, before). */
    assert_null(strstr(out, "x-delivery-count"));
  }
  assert_int_equal(fx_count_in_file(d.log, "\"x_death\":\""), 9); /* 3 x (retry, DLQ, mover) */
  th_result vr;
  assert_int_equal(fx_audit_verify(&d.a, &vr), 0);
  assert_int_equal(vr.exit_code, 0);
  audit_dir_remove(&d);
}

static void test_audit_show_one_task(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  const char *const env[] = {d.a.env_log, d.a.env_key, "DLQ_BRIDGE_MAX_ATTEMPTS=3",
                             "DLQ_BRIDGE_RETRY_DELAYS=100ms", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  assert_int_equal(fx_publish_task(t, "show-1"), 0);
  assert_int_equal(fx_publish_task(t, "show-2"), 0);
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  th_msg *m = fx_msg(t);
  for (int failures = 0; failures < 6;) { /* 2 tasks x 3 attempts */
    int got = th_worker_next(w, m, WAIT_MS);
    FX_CHECK(t, got == 1);
    assert_int_equal(th_worker_report(w, t->conn, m, "upstream timeout"), 0);
    failures++;
  }
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 2, WAIT_MS));
  const char *const replay[] = {"replay", "--request-id", "show-1", "--actor", "alice", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(replay, t->vhost.url, env, 30000, &r), 0);
  printf("replay: exit %d\n%s%s", r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  const char *const resolve[] = {"resolve", "--message-id", "msg-show-2",
                                 "--note",  "done by hand", NULL};
  assert_int_equal(th_run_bridge(resolve, t->vhost.url, env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(fx_stop_bridges(t), 0);

  /* A removal has no destination: no arrow pointing nowhere (issue 19). */
  audit_show(&d, "show-2", false, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "resolved         removed from dsr.dlq.manual"));
  assert_null(strstr(r.out, "-> "
                            " "));
  assert_null(strstr(r.out, "->  "));

  audit_show(&d, "show-1", false, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "audit log intact"));
  /* The replay's intent, recorded before its copy, and its hop. */
  assert_non_null(strstr(r.out, "5 hops recorded for request_id show-1"));
  assert_null(strstr(r.out, "show-2"));
  const char *order[] = {"retry_scheduled", "retry_scheduled", "dead_lettered",
                         "move_started     dsr.dlq.manual -> dsr.work, for replayed  attempt 3",
                         "replayed         dsr.dlq.manual -> dsr.work"};
  assert_null(strstr(r.out, "DID NOT END"));
  const char *at = r.out;
  for (size_t i = 0; i < 5; i++) {
    at = strstr(at, order[i]);
    assert_non_null(at);
    at += strlen(order[i]);
  }
  assert_non_null(strstr(r.out, "dsr.failed -> dsr.dlq.manual  attempt 3  cause max_attempts"));
  assert_non_null(strstr(r.out, "reason \"worker error: upstream timeout\""));
  assert_non_null(strstr(r.out, "by alice (replay@"));

  audit_show(&d, "show-1", true, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *doc = json_tokener_parse(r.out);
  assert_non_null(doc);
  json_object *hops;
  assert_true(json_object_object_get_ex(doc, "hops", &hops));
  assert_int_equal(json_object_array_length(hops), 5); /* with the replay's intent */
  for (size_t i = 0; i < 5; i++)
    assert_string_equal(th_json_str(json_object_array_get_idx(hops, i), "request_id"), "show-1");
  json_object_put(doc);

  /* The story ends with the completion ledger (issue 42): not completed
   * while the replayed task waits, completed once its worker recorded it
   * (as a completion writer: user_id guest). */
  audit_show_at(&d, t->vhost.url, "show-1", false, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "show-1 (test-suite): not completed (dsr.completed)"));
  th_msg done;
  th_msg_init(&done);
  assert_int_equal(th_msg_add_str(&done, "request_id", "show-1"), 0);
  assert_int_equal(th_msg_add_str(&done, "source_system", "test-suite"), 0);
  snprintf(done.user_id, sizeof done.user_id, "guest");
  done.has_timestamp = true;
  done.timestamp = (uint64_t)(th_now_ms() / 1000);
  assert_int_equal(th_publish(t->conn, "", "dsr.completed", &done), 0);
  th_msg_release(&done);
  audit_show_at(&d, t->vhost.url, "show-1", false, &r);
  assert_int_equal(r.exit_code, 0);
  const char *end = strstr(r.out, "show-1 (test-suite): completed 20");
  assert_non_null(end);
  assert_true(end > strstr(r.out, "replayed")); /* after the last hop */
  audit_show_at(&d, t->vhost.url, "show-1", true, &r);
  doc = json_tokener_parse(r.out);
  assert_non_null(doc);
  json_object *completion;
  assert_true(json_object_object_get_ex(doc, "completion", &completion));
  assert_int_equal(json_object_array_length(completion), 1);
  json_object *c0 = json_object_array_get_idx(completion, 0), *v;
  assert_true(json_object_object_get_ex(c0, "completed", &v) && json_object_get_boolean(v));
  assert_true(th_is_iso_utc(th_json_str(c0, "completed_at")));
  json_object_put(doc);

  /* Usage errors: exit 2, one line, before the log is read. */
  static const char *const no_filter[] = {"audit", "show", NULL};
  static const char *const empty_id[] = {"audit", "show", "--request-id", "", NULL};
  const char *const *bad[] = {no_filter, empty_id};
  const char *const audit_env[] = {d.a.env_log, d.a.env_pub, NULL};
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(th_run_bridge(bad[i], NULL, audit_env, 30000, &r), 0);
    printf("usage: exit %d, %s", r.exit_code, r.err);
    assert_int_equal(r.exit_code, 2);
    assert_int_equal(th_count_lines(r.err), 1);
  }

  audit_show(&d, "never-seen", false, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "no hop recorded for request_id never-seen"));

  /* One byte of the log edited: exit 1, the bad line named, no hop shown. */
  int fd = open(d.log, O_RDWR);
  assert_true(fd >= 0);
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  assert_true(n > 0);
  buf[n] = '\0';
  char *p = strstr(buf, "\"request_id\":\"show-2\"");
  assert_non_null(p);
  assert_int_equal(pwrite(fd, "3", 1, (p - buf) + (off_t)strlen("\"request_id\":\"show-")), 1);
  close(fd);
  audit_show(&d, "show-1", false, &r);
  assert_int_equal(r.exit_code, 1);
  assert_null(strstr(r.out, "hops recorded"));
  assert_null(strstr(r.out, "retry_scheduled"));
  assert_int_equal(th_count_lines(r.err), 1);
  assert_non_null(strstr(r.err, "line"));
  audit_dir_remove(&d);
}

/* Runs `dlq-bridge audit reconcile [--json]` against the case's vhost. */
static void reconcile(fx_case *t, const audit_dir *d, bool json, th_result *r) {
  const char *const args[] = {"audit", "reconcile", json ? "--json" : NULL, NULL};
  const char *const env[] = {d->a.env_log, d->a.env_pub, NULL};
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, 30000, r), 0);
  printf("audit reconcile%s: exit %d\n%s%s", json ? " --json" : "", r->exit_code, r->out, r->err);
}

/* "Prove nothing was lost": the DLQ against the audit trail. Four tasks
 * dead-lettered, one replayed out: all accounted for. One taken out behind
 * dlq-bridge's back (a basic.get with auto-ack, as a purge or a UI move
 * would): MISSING, exit 1. One put in behind its back: UNRECORDED; a second
 * copy of a recorded one: EXTRA. And reconcile itself moves nothing. */
static void test_audit_reconcile_finds_what_was_removed(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d); /* max_attempts 1: every failure goes to the DLQ */
  assert_int_equal(fx_start_bridge(t, d.env), 0);
  publish_failed(t, "rec", 0, 4);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 4, WAIT_MS));
  FX_CHECK(t, wait_count(d.log, "\"event\":\"dead_lettered\"", 4));
  const char *const replay[] = {"replay", "--request-id", "rec-0", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(replay, t->vhost.url, d.env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 3, WAIT_MS));

  reconcile(t, &d, false, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "the audit trail puts 3 messages there; missing 0, unrecorded 0"));
  assert_non_null(strstr(r.out, "nothing missing"));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 3); /* nothing moved */

  /* Behind its back: rec-1 (first in the DLQ now) taken, a stray put in. */
  th_msg *m = fx_msg(t);
  assert_int_equal(th_get(t->conn, "dsr.dlq.manual", m), 1);
  FX_HDR_STR_EQ(m, "request_id", "rec-1");
  th_msg *stray = fx_msg(t);
  assert_int_equal(th_msg_task(stray, "stray-1"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", stray), 0);
  /* And a second copy of rec-2, as a redelivery can leave. */
  th_msg *copy = fx_msg(t);
  assert_int_equal(th_msg_task(copy, "rec-2"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", copy), 0);

  reconcile(t, &d, false, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.out, "missing 1, unrecorded 1, recorded after the read 0, copies "
                                "beyond the records 1"));
  assert_non_null(strstr(r.out, "MISSING     msg-rec-1  request_id rec-1  dead_lettered at"));
  assert_non_null(strstr(r.out, "UNRECORDED  msg-stray-1  request_id stray-1"));
  assert_non_null(strstr(r.out, "EXTRA       msg-rec-2  request_id rec-2"));
  assert_null(strstr(r.out, "msg-rec-3"));
  reconcile(t, &d, true, &r);
  assert_int_equal(r.exit_code, 1);
  json_object *doc = json_tokener_parse(r.out);
  assert_non_null(doc);
  json_object *missing, *unrecorded;
  assert_true(json_object_object_get_ex(doc, "missing", &missing));
  assert_true(json_object_object_get_ex(doc, "unrecorded", &unrecorded));
  assert_int_equal(json_object_array_length(missing), 1);
  assert_int_equal(json_object_array_length(unrecorded), 1);
  assert_string_equal(th_json_str(json_object_array_get_idx(missing, 0), "message_id"),
                      "msg-rec-1");
  json_object_put(doc);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 4); /* reconcile moved nothing */
  assert_int_equal(fx_stop_bridges(t), 0);
  audit_dir_remove(&d);
}

/* An item held unacked by another consumer while reconcile reads the DLQ
 * (the SLA escalator, a concurrent inspect) is not in what the broker
 * delivers: reconcile sees the consumer at the start or end of its read and
 * reports the item as not seen, exit 0. Once that consumer acked it (really
 * removed behind dlq-bridge's back) and left, it is MISSING, exit 1. */
static void test_audit_reconcile_held_is_not_missing(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  assert_int_equal(fx_start_bridge(t, d.env), 0);
  publish_failed(t, "held", 0, 2);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 2, WAIT_MS));
  FX_CHECK(t, wait_count(d.log, "\"event\":\"dead_lettered\"", 2));
  assert_int_equal(fx_stop_bridges(t), 0); /* its SLA escalator would be a second consumer */

  th_worker *w = th_worker_open(&t->vhost, "dsr.dlq.manual", 1);
  assert_non_null(w);
  th_msg *m = fx_msg(t);
  assert_int_equal(th_worker_next(w, m, WAIT_MS), 1);
  const char *held = th_msg_str(m, "request_id");
  assert_non_null(held);
  char want[96];
  snprintf(want, sizeof want, "NOT SEEN    msg-%s  request_id %s", held, held);
  th_result r;
  reconcile(t, &d, false, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "missing 0"));
  assert_non_null(strstr(r.out, want));
  assert_non_null(strstr(r.out, "held by another consumer"));

  assert_int_equal(th_worker_ack(w), 0);
  th_worker_close(w);
  reconcile(t, &d, false, &r);
  assert_int_equal(r.exit_code, 1);
  snprintf(want, sizeof want, "MISSING     msg-%s  request_id %s", held, held);
  assert_non_null(strstr(r.out, want));
  assert_non_null(strstr(r.out, "missing 1"));
  audit_dir_remove(&d);
}

/* ---- /healthz and /metrics of a bridge (curl) ---- */

/* GETs http://127.0.0.1:port<path>: the HTTP status (-1 when nothing
 * answers), the body into body[0..len). */
static int http_get(int port, const char *path, char *body, size_t len) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "curl -s --max-time 5 -w '\\n%%{http_code}' 'http://127.0.0.1:%d%s'",
           port, path);
  body[0] = '\0';
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  size_t n = fread(body, 1, len - 1, p);
  body[n] = '\0';
  int rc = pclose(p);
  char *nl = strrchr(body, '\n');
  int status = rc == 0 && nl != NULL ? atoi(nl + 1) : -1;
  if (nl != NULL) *nl = '\0';
  return status;
}

typedef struct {
  int port, want;
  char body[65536];
} health_wait;

static bool health_is(void *arg) {
  health_wait *w = arg;
  return http_get(w->port, "/healthz", w->body, sizeof w->body) == w->want;
}

/* Waits for /healthz to answer want; w->body then holds its reason. */
static bool wait_health(health_wait *w, int port, int want) {
  w->port = port;
  w->want = want;
  return th_wait_until(health_is, w, WAIT_MS);
}

/* The value of a sample without labels on /metrics; NAN when absent. */
static double metric(int port, const char *name) {
  static char body[1 << 17];
  if (http_get(port, "/metrics", body, sizeof body) != 200) return NAN;
  size_t n = strlen(name);
  for (const char *line = body; line != NULL && *line != '\0';) {
    if (strncmp(line, name, n) == 0 && line[n] == ' ') return strtod(line + n + 1, NULL);
    line = strchr(line, '\n');
    if (line != NULL) line++;
  }
  return NAN;
}

/* Publishes an overdue DLQ item (dead-lettered an hour ago). */
static void publish_overdue(fx_case *t, const char *id) {
  th_msg m;
  th_msg_init(&m);
  char iso[48];
  th_iso_time(th_now_ms() - 3600000LL, iso, sizeof iso);
  int rc = th_msg_task(&m, id);
  if (rc == 0) rc = th_msg_set_str(&m, "dlq_reason", "max_attempts");
  if (rc == 0) rc = th_msg_set_str(&m, "dlq_at", iso);
  if (rc == 0) rc = th_publish(t->conn, "", "dsr.dlq.manual", &m);
  th_msg_release(&m);
  assert_int_equal(rc, 0);
}

/* Longer than the pipe's 30 s drain timeout (DRAIN_TIMEOUT_MS): before the
 * fix, an escalator pass gave up waiting for the audit trail after it, its
 * originals went back to the DLQ and the next pass published them again
 * (measured: 6 copies of 3 items after 75 s). The only case that needs to
 * watch this long. */
#define ESC_HOLD_MS 35000

/* The SLA escalator on a full disk: it escalates what its pass had taken
 * (at most once each), takes nothing more, holds no growing backlog,
 * /healthz says why, and once the disk is back everything is escalated
 * exactly once and recorded once. */
static void test_escalator_full_disk_no_duplicates(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  int port = th_free_port();
  char addr[64];
  snprintf(addr, sizeof addr, "DLQ_BRIDGE_METRICS_ADDR=127.0.0.1:%d", port);
  const char *const env[] = {d.a.env_log, d.a.env_key, "DLQ_BRIDGE_DLQ_SLA=3s", addr, NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  FX_CHECK(t, wait_count(d.log, "\"event\":\"chain_start\"", 2)); /* router, escalator */
  health_wait h;
  FX_CHECK(t, wait_health(&h, port, 200));

  disk_full(&d);
  for (int i = 0; i < 3; i++) {
    char id[32];
    snprintf(id, sizeof id, "overdue-%d", i);
    publish_overdue(t, id);
  }
  FX_CHECK(t, wait_count(t->bridges[0].log_path, "audit_failing", 1));
  FX_CHECK(t, wait_health(&h, port, 503));
  printf("healthz while the disk is full: %s\n", h.body);
  assert_non_null(strstr(h.body, "audit log is not writable"));
  assert_non_null(strstr(h.body, "no space left on device"));
  long copies = th_queue_depth(t->conn, "compliance_review");
  printf("escalated before the writer failed: %ld\n", copies);
  /* Each copy waits for its intent's record, which the full disk never
   * takes: nothing was sent (before intents: 1 to 3 copies). */
  FX_CHECK(t, copies == 0);
  /* Many passes' worth of time: no more copies, no growing backlog. What
   * is pending is the intent of each item the pass took (1 to 3) and, once
   * the pass gave up waiting for them (the drain timeout, 30 s), each
   * one's move_abandoned: at most 6, and no pass begins while the writer
   * fails. */
  for (long long until = th_now_ms() + ESC_HOLD_MS; th_now_ms() < until;) {
    long now = th_queue_depth(t->conn, "compliance_review");
    double pending = metric(port, "dlq_bridge_audit_pending_records");
    if (now != copies || pending < 1 || pending > 6)
      printf("during the hold: compliance_review %ld (was %ld), %.0f pending records\n", now,
             copies, pending);
    FX_CHECK(t, now == copies);
    FX_CHECK(t, pending >= 1 && pending <= 6);
    usleep(1000 * 1000); /* observing that nothing happens: no condition to await */
  }

  disk_back(&d);
  FX_CHECK(t, th_wait_depth(t->conn, "compliance_review", 3, WAIT_MS));
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 0, WAIT_MS));
  FX_CHECK(t, wait_unacked(t, "dsr.dlq.manual", 0));
  FX_CHECK(t, wait_health(&h, port, 200));
  FX_CHECK(t, metric(port, "dlq_bridge_audit_pending_records") == 0);
  assert_int_equal(th_queue_depth(t->conn, "compliance_review"), 3);
  for (int i = 0; i < 3; i++) {
    char needle[64];
    snprintf(needle, sizeof needle, "\"request_id\":\"overdue-%d\"", i);
    /* One hop, after its intents (written once the disk was back: one
     * from each pass that took the item while it was full). */
    assert_int_equal(count_both(d.log, needle, "\"event\":\"escalated\""), 1);
    long started = count_both(d.log, needle, "\"event\":\"move_started\"");
    /* Every intent but the one its hop ends was abandoned: none is open
     * (each pass taking the item while the disk was full gave up on it). */
    assert_true(started >= 1);
    assert_int_equal(count_both(d.log, needle, "\"event\":\"move_abandoned\""), started - 1);
  }
  assert_int_equal(fx_stop_bridges(t), 0);
  expect_verified(t, &d, "ended cleanly, 0 open)");
  audit_dir_remove(&d);
}

/* ---- a lost connection during an audit outage (issue 28) ---- */

/* A connection of the case's bridge, by the start of its connection_name
 * ("dlq-bridge router", "dlq-bridge escalator"); other: a name it must not
 * have (the connection closed before), or "". */
typedef struct {
  const fx_case *t;
  const char *prefix, *other;
  char name[256];
} conn_wait;

static bool conn_listed(void *arg) {
  conn_wait *c = arg;
  return th_connection_named(&c->t->vhost, c->prefix, c->name, sizeof c->name) &&
         strcmp(c->name, c->other) != 0;
}

/* Closes the bridge's connection named prefix... by the management API (as
 * a broker operator or a network cut would), then waits until the bridge
 * has opened a new one when reconnects (router), else until the old one
 * is gone. */
static void cut_connection(fx_case *t, const char *prefix, bool reconnects) {
  conn_wait c = {t, prefix, "", ""};
  FX_CHECK(t, th_wait_until(conn_listed, &c, WAIT_MS));
  char old[256];
  snprintf(old, sizeof old, "%s", c.name);
  printf("closing %s (%s)\n", prefix, old);
  assert_int_equal(th_connection_close(old), 0);
  if (reconnects) {
    conn_wait again = {t, prefix, old, ""};
    FX_CHECK(t, th_wait_until(conn_listed, &again, WAIT_MS));
  }
}

/* The router's connection lost while the log cannot be written: the
 * failure it had routed (its DLQ copy confirmed, the original unacked)
 * comes back to dsr.failed and to the next session. It is not routed
 * again: its original is acked once the record the first session handed
 * over is written, and that hop is recorded once. A copycat with the same
 * message_id and body but another header is not taken for it. Before the
 * fix, the next session routed the first failure again (a second copy and
 * a second record). */
static void test_lost_connection_during_outage_no_duplicates(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  assert_int_equal(fx_start_bridge(t, d.env), 0);
  th_bridge *b = &t->bridges[0];
  publish_failed(t, "before", 0, 2);
  FX_CHECK(t, wait_count(d.log, "\"event\":\"dead_lettered\"", 2));

  disk_full(&d);
  publish_failed(t, "lost", 0, 1);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 3, WAIT_MS)); /* its copy, confirmed */
  FX_CHECK(t, wait_count(b->log_path, "audit_failing", 1));
  publish_failed(t, "lost", 1, 2); /* held: the writer is known to fail */
  th_msg *copycat = fx_msg(t);
  assert_int_equal(th_msg_task(copycat, "lost-0"), 0); /* message_id msg-lost-0, same body */
  assert_int_equal(th_msg_set_str(copycat, "request_id", "copycat"), 0);
  assert_int_equal(th_msg_add_str(copycat, "worker_error", "upstream timeout"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.failed", copycat), 0);
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 4));

  /* The connection goes; the bridge reconnects and gets all four again
   * (redelivered), while the log still fails: nothing more is published. */
  cut_connection(t, "dlq-bridge router", true);
  FX_CHECK(t, wait_count(b->log_path, "routing from dsr.failed", 2));
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 4));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 3);

  /* Writable again: one copy of each, each hop recorded once. */
  disk_back(&d);
  FX_CHECK(t, wait_count(d.log, "\"event\":\"dead_lettered\"", 6));
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 6, WAIT_MS));
  FX_CHECK(t, wait_empty(t, "dsr.failed"));
  long copies = th_queue_depth(t->conn, "dsr.dlq.manual");
  printf("dsr.dlq.manual after the outage: %ld (2 before it, 4 during)\n", copies);
  FX_CHECK(t, copies == 6);
  static const char *const ids[] = {"lost-0", "lost-1", "lost-2", "copycat"};
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
    char needle[64];
    snprintf(needle, sizeof needle, "\"request_id\":\"%s\"", ids[i]);
    assert_int_equal(fx_count_in_file(d.log, needle), 1);
  }
  assert_int_equal(fx_count_in_file(d.log, "\"event\":\"dead_lettered\""), 6);
  assert_int_equal(fx_stop_bridges(t), 0);
  expect_verified(t, &d, "ended cleanly, 0 open)");
  audit_dir_remove(&d);
}

/* The SLA escalator's connection lost while its escalations wait for the
 * log: their originals return to the DLQ, and no pass runs until the log
 * is written. The next pass acks them against the copies already in
 * compliance_review instead of escalating them again: three items, three
 * copies, three records. Since every copy waits for its intent's record,
 * none is sent while the disk is full, so the cut finds none to recognise;
 * the case still holds the rest. Before the memory: a second copy and record of each
 * escalated before the cut. */
static void test_escalator_lost_connection_during_outage_no_duplicates(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  const char *const env[] = {d.a.env_log, d.a.env_key, "DLQ_BRIDGE_DLQ_SLA=3s",
                             "DLQ_BRIDGE_METRICS_ADDR=off", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  FX_CHECK(t, wait_count(d.log, "\"event\":\"chain_start\"", 2)); /* router, escalator */

  disk_full(&d);
  for (int i = 0; i < 3; i++) {
    char id[32];
    snprintf(id, sizeof id, "overdue-%d", i);
    publish_overdue(t, id);
  }
  FX_CHECK(t, wait_count(t->bridges[0].log_path, "audit_failing", 1));
  FX_CHECK(t, wait_unacked(t, "dsr.dlq.manual", 3)); /* the pass holds all three */
  long copies = th_queue_depth(t->conn, "compliance_review");
  printf("escalated before the writer failed: %ld\n", copies);
  /* Each copy waits for its intent's record, which the full disk never
   * takes: nothing was sent (before intents, 1 to 3 copies, which the next
   * pass had to recognise). */
  FX_CHECK(t, copies == 0);

  cut_connection(t, "dlq-bridge escalator", false);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 3, WAIT_MS)); /* back, ready */
  FX_CHECK(t, wait_unacked(t, "dsr.dlq.manual", 0));
  assert_int_equal(th_queue_depth(t->conn, "compliance_review"), copies);

  disk_back(&d);
  FX_CHECK(t, th_wait_depth(t->conn, "compliance_review", 3, WAIT_MS));
  FX_CHECK(t, wait_count(d.log, "\"event\":\"escalated\"", 3));
  FX_CHECK(t, wait_empty(t, "dsr.dlq.manual"));
  long after = th_queue_depth(t->conn, "compliance_review");
  printf("compliance_review after the outage: %ld\n", after);
  FX_CHECK(t, after == 3);
  for (int i = 0; i < 3; i++) {
    char needle[64];
    snprintf(needle, sizeof needle, "\"request_id\":\"overdue-%d\"", i);
    /* One hop; the cut pass's intents are written too once the disk is
     * back, beside the next pass's. */
    assert_int_equal(count_both(d.log, needle, "\"event\":\"escalated\""), 1);
    long started = count_both(d.log, needle, "\"event\":\"move_started\"");
    /* Every intent but the one its hop ends was abandoned: none is open
     * (each pass taking the item while the disk was full gave up on it). */
    assert_true(started >= 1);
    assert_int_equal(count_both(d.log, needle, "\"event\":\"move_abandoned\""), started - 1);
  }
  assert_int_equal(fx_stop_bridges(t), 0);
  expect_verified(t, &d, "ended cleanly, 0 open)");
  audit_dir_remove(&d);
}

/* A stop during an outage is the one case left: the records of what was
 * in flight cannot be written, so their originals stay unacked and the
 * next process routes them again. What the test shows is the bound: with
 * a window (prefetch) of 2 and 6 failures arriving, at most 2 copies were
 * made before the writer failed, so at most 2 exist twice after the
 * restart, and each of the 6 is recorded once (by the next process; the
 * stopped one's records of its copies were never written). */
#define STOP_PREFETCH 2
#define STOP_FAILURES 6
#define STOP_WAIT_MS  60000 /* the stop waits 30 s (DRAIN_TIMEOUT_MS) for the log */

static void test_stop_during_outage_duplicates_at_most_a_window(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  char prefetch[64];
  snprintf(prefetch, sizeof prefetch, "DLQ_BRIDGE_PREFETCH=%d", STOP_PREFETCH);
  d.env[4] = prefetch;
  d.env[5] = NULL;
  assert_int_equal(fx_start_bridge(t, d.env), 0);
  th_bridge *b = &t->bridges[0];
  FX_CHECK(t, wait_count(d.log, "\"event\":\"chain_start\"", 1));

  disk_full(&d);
  publish_failed(t, "stop", 0, STOP_FAILURES);
  FX_CHECK(t, wait_count(b->log_path, "audit_failing", 1));
  FX_CHECK(t, wait_unacked(t, "dsr.failed", STOP_PREFETCH));
  long copies = th_queue_depth(t->conn, "dsr.dlq.manual");
  printf("copies made before the writer failed: %ld (window %d, %d failures)\n", copies,
         STOP_PREFETCH, STOP_FAILURES);
  FX_CHECK(t, copies >= 1 && copies <= STOP_PREFETCH);

  int64_t asked = th_now_ms();
  int rc = th_bridge_stop(b, STOP_WAIT_MS);
  printf("stop during the outage: exit %d after %lld ms\n", rc, (long long)(th_now_ms() - asked));
  FX_CHECK(t, rc == 0);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.failed", STOP_FAILURES, WAIT_MS));

  disk_back(&d);
  th_bridge *b2 = &t->bridges[1];
  assert_int_equal(th_bridge_start(b2, &t->vhost, d.env, "bridge2"), 0);
  t->nbridges = 2;
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", copies + STOP_FAILURES, WAIT_MS));
  FX_CHECK(t, wait_count(d.log, "\"event\":\"dead_lettered\"", STOP_FAILURES));
  FX_CHECK(t, wait_empty(t, "dsr.failed"));
  long total = th_queue_depth(t->conn, "dsr.dlq.manual");
  printf("dsr.dlq.manual after the restart: %ld for %d failures (%ld twice)\n", total,
         STOP_FAILURES, total - STOP_FAILURES);
  FX_CHECK(t, total - STOP_FAILURES == copies);
  for (int i = 0; i < STOP_FAILURES; i++) {
    char needle[64];
    snprintf(needle, sizeof needle, "\"request_id\":\"stop-%d\"", i);
    assert_int_equal(fx_count_in_file(d.log, needle), 1);
  }
  assert_int_equal(fx_stop_bridges(t), 0);
  expect_verified(t, &d, "audit log intact");
  /* Reconcile sees the first copies for what they are: never a loss. */
  th_result r;
  reconcile(t, &d, false, &r);
  assert_int_equal(r.exit_code, 0);
  char want[160];
  snprintf(want, sizeof want,
           "missing 0, unrecorded 0, recorded after the read 0, copies beyond the records %ld",
           copies);
  assert_non_null(strstr(r.out, want));
  audit_dir_remove(&d);
}

/* `replay --all` with its audit log on a full disk: exit 1 before its
 * first publish, one line naming the log and the errno, nothing moved. */
static void test_replay_unwritable_log_fails_before_publishing(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare, t->vhost.url, d.env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  for (int i = 0; i < 20; i++) {
    char id[32];
    snprintf(id, sizeof id, "stuck-%d", i);
    publish_overdue(t, id);
  }
  /* The log exists (as after any earlier run) and its disk is full. */
  assert_int_equal(close(open(d.log, O_WRONLY | O_CREAT, 0600)), 0);
  disk_full(&d);
  static const char *const replay[] = {"replay", "--all", NULL};
  assert_int_equal(th_run_bridge(replay, t->vhost.url, d.env, 60000, &r), 0);
  printf("replay: exit %d\n%s%s", r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_count_lines(r.err), 1);
  assert_non_null(strstr(r.err, d.log));
  assert_non_null(strstr(r.err, "no space left on device"));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 20);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  disk_back(&d);
  audit_dir_remove(&d);
}

typedef struct {
  const fx_case *t;
  const char *const *env;
  th_result r;
  int ran;
} bg_replay;

static void *replay_main(void *arg) {
  bg_replay *b = arg;
  /* --window 1: each move is recorded and acked before the next delivery
   * (with a wide window the deliveries ahead of the confirms are all
   * published first, and the records come after them), so the disk fills
   * between two moves. */
  static const char *const args[] = {"replay", "--all", "--rate", "10", "--window", "1", NULL};
  b->ran = th_run_bridge(args, b->t->vhost.url, b->env, 60000, &b->r);
  return NULL;
}

/* `replay` that loses its audit trail midway stops at once: exit 1, what
 * it moved (each recorded) and what may be there twice are said, and the
 * rest stays in the DLQ. */
static void test_replay_losing_trail_midway_stops(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare, t->vhost.url, d.env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  enum { N = 20 };
  for (int i = 0; i < N; i++) {
    char id[32];
    snprintf(id, sizeof id, "mid-%d", i);
    publish_overdue(t, id);
  }
  bg_replay b = {.t = t, .env = d.env};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, replay_main, &b), 0);
  /* --rate 10: a move every 100 ms; the disk fills after the third. */
  bool started = wait_count(d.log, "\"event\":\"replayed\"", 3);
  disk_full(&d);
  printf("disk full after %d records\n", fx_count_in_file(d.saved, "\"event\":\"replayed\""));
  pthread_join(th, NULL);
  FX_CHECK(t, started);
  assert_int_equal(b.ran, 0);
  printf("replay: exit %d\n%s%s", b.r.exit_code, b.r.out, b.r.err);
  assert_int_equal(b.r.exit_code, 1);
  int recorded = fx_count_in_file(d.saved, "\"event\":\"replayed\"");
  char said[64];
  snprintf(said, sizeof said, "replayed %d,", recorded);
  assert_non_null(strstr(b.r.out, said));
  assert_non_null(strstr(b.r.err, "no space left on device"));
  const char *k = strstr(b.r.err, "copies published but not recorded: ");
  assert_non_null(k);
  long unrecorded = strtol(k + strlen("copies published but not recorded: "), NULL, 10);
  /* At --window 1, the one publish in flight when the write failed. */
  FX_CHECK(t, unrecorded >= 0 && unrecorded <= 1);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", N - recorded, WAIT_MS));
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), recorded + unrecorded);
  FX_CHECK(t, recorded < N - 5); /* it stopped, rather than going on */
  disk_back(&d);
  audit_dir_remove(&d);
}

/* Another process holds the audit log's lock and is stopped (Ctrl-Z on an
 * ops command, a hung NFS client): the daemon does not block silently:
 * /healthz says so, it routes nothing new, and once the holder goes on it
 * recovers by itself, each hop once. */
static void test_stopped_lock_holder_shows_in_health(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  int port = th_free_port();
  char addr[64];
  snprintf(addr, sizeof addr, "DLQ_BRIDGE_METRICS_ADDR=127.0.0.1:%d", port);
  const char *const env[] = {d.a.env_log, d.a.env_key, "DLQ_BRIDGE_MAX_ATTEMPTS=1", addr, NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  FX_CHECK(t, wait_count(d.log, "\"event\":\"chain_start\"", 2));
  th_bridge *b = &t->bridges[0];
  health_wait h;
  FX_CHECK(t, wait_health(&h, port, 200));

  fflush(NULL);
  pid_t holder = fork();
  assert_true(holder >= 0);
  if (holder == 0) {
    /* Killed with us if the test fails while we are stopped. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(d.log, O_RDWR);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(2);
    raise(SIGSTOP);
    _exit(0); /* closing releases the lock */
  }
  int ws;
  assert_int_equal(waitpid(holder, &ws, WUNTRACED), holder);
  assert_true(WIFSTOPPED(ws));

  publish_failed(t, "locked", 0, 1);
  FX_CHECK(t, wait_health(&h, port, 503));
  printf("healthz while the lock is held: %s\n", h.body);
  assert_non_null(strstr(h.body, "held its lock"));
  FX_CHECK(t, wait_count(b->log_path, "held its lock", 1));
  publish_failed(t, "locked", 1, 2);
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 3));
  assert_true(th_queue_depth(t->conn, "dsr.dlq.manual") <= 1); /* the held two are not routed */

  kill(holder, SIGCONT);
  assert_int_equal(waitpid(holder, &ws, 0), holder);
  assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  FX_CHECK(t, wait_health(&h, port, 200));
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 3, WAIT_MS));
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 0));
  assert_int_equal(th_queue_depth(t->conn, "dsr.failed"), 0);
  for (int i = 0; i < 3; i++) {
    char needle[64];
    snprintf(needle, sizeof needle, "\"request_id\":\"locked-%d\"", i);
    assert_int_equal(fx_count_in_file(d.log, needle), 1);
  }
  assert_int_equal(fx_stop_bridges(t), 0);
  expect_verified(t, &d, "ended cleanly, 0 open)");
  audit_dir_remove(&d);
}

/* Issue 17's scenario: the daemon audits through the config file, and an
 * operator whose shell has no DLQ_BRIDGE_AUDIT_LOG finds the trail there:
 * escalate and resolve --note are recorded. With no trail anywhere the
 * commands that move items refuse (exit 2, one line, nothing moved); with
 * --no-audit they act and say so, naming the command and the actor. */
static void test_ops_find_the_trail_through_the_config_file(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  char path[160], json[1024], env_config[200];
  assert_true(th_fmt(path, sizeof path, "%s/config.json", d.dir));
  assert_true(th_fmt(json, sizeof json,
                     "{\"audit_log\": \"%s\", \"audit_key_file\": \"%s\",\n"
                     " \"audit_public_keys\": \"%s\", \"max_attempts\": 1}\n",
                     d.a.log, d.a.key, d.a.keys));
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fputs(json, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
  assert_true(th_fmt(env_config, sizeof env_config, "DLQ_BRIDGE_CONFIG=%s", path));
  const char *const env[] = {env_config, NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  static const char *const ids[] = {"cfg-1", "cfg-2", "cfg-3", "cfg-4"};
  for (size_t i = 0; i < 4; i++) assert_int_equal(fx_publish_task(t, ids[i]), 0);
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  th_msg *m = fx_msg(t);
  for (int failures = 0; failures < 4; failures++) { /* max_attempts 1, from the file */
    FX_CHECK(t, th_worker_next(w, m, WAIT_MS) == 1);
    assert_int_equal(th_worker_report(w, t->conn, m, "upstream timeout"), 0);
  }
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 4, WAIT_MS));
  assert_true(wait_count(d.log, "\"event\":\"dead_lettered\"", 4));
  assert_int_equal(fx_stop_bridges(t), 0);

  /* The operator's shell: the config file only. */
  th_result r;
  static const char *const escalate[] = {"escalate", "--request-id", "cfg-1",
                                         "--actor",  "olga",         NULL};
  assert_int_equal(th_run_bridge(escalate, t->vhost.url, env, 30000, &r), 0);
  printf("escalate: exit %d\n%s%s", r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  static const char *const resolve[] = {"resolve", "--message-id",           "msg-cfg-2",
                                        "--note",  "erased by hand, OPS-43", NULL};
  assert_int_equal(th_run_bridge(resolve, t->vhost.url, env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(fx_count_in_file(d.log, "\"event\":\"escalated\""), 1);
  assert_int_equal(fx_count_in_file(d.log, "erased by hand, OPS-43"), 1);
  th_result v;
  assert_int_equal(fx_audit_verify(&d.a, &v), 0);
  assert_int_equal(v.exit_code, 0);

  /* No trail anywhere: refused before anything moves. */
  static const char *const none[] = {"DLQ_BRIDGE_CONFIG=", NULL};
  static const char *const line =
      "dlq-bridge: no audit trail configured (audit_log): nothing is moved without one; set it "
      "in "
      "/etc/dlq-bridge/config.json or DLQ_BRIDGE_AUDIT_LOG, or pass --no-audit to act without "
      "one\n";
  static const char *const resolve3[] = {"resolve", "--message-id", "msg-cfg-3", "--note", "x",
                                         NULL};
  static const char *const escalate4[] = {"escalate", "--request-id", "cfg-4", NULL};
  static const char *const replay4[] = {"replay", "--request-id", "cfg-4", NULL};
  static const char *const claim1[] = {"review", "claim", "--message-id", "msg-cfg-1", NULL};
  static const char *const decide1[] = {
      "review", "decide", "--message-id", "msg-cfg-1", "--return", "--force", NULL};
  const char *const *refused[] = {resolve3, escalate4, replay4, claim1, decide1};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    assert_int_equal(th_run_bridge(refused[i], t->vhost.url, none, 30000, &r), 0);
    printf("%s without a trail: exit %d, %s", refused[i][0], r.exit_code, r.err);
    assert_int_equal(r.exit_code, 2);
    assert_string_equal(r.err, line);
  }
  /* A named config file without audit_log names that file. */
  char bare[160], env_bare[200];
  assert_true(th_fmt(bare, sizeof bare, "%s/bare.json", d.dir));
  f = fopen(bare, "w");
  assert_non_null(f);
  assert_int_equal(fputs("{\"max_attempts\": 2}\n", f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
  assert_true(th_fmt(env_bare, sizeof env_bare, "DLQ_BRIDGE_CONFIG=%s", bare));
  const char *const bare_env[] = {env_bare, NULL};
  assert_int_equal(th_run_bridge(resolve3, t->vhost.url, bare_env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "set it in "));
  assert_non_null(strstr(r.err, bare));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 2);
  assert_int_equal(th_queue_depth(t->conn, "compliance_review"), 1);
  /* A dry run moves nothing and needs no trail. */
  static const char *const dry[] = {"escalate", "--all", "--dry-run", NULL};
  assert_int_equal(th_run_bridge(dry, t->vhost.url, none, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_null(strstr(r.err, "no-audit"));

  /* --no-audit: it acts, and says so with the command and the actor. */
  int records = fx_count_in_file(d.log, "\"event\"");
  static const char *const forced[] = {"resolve",    "--message-id", "msg-cfg-3", "--note", "x",
                                       "--no-audit", "--actor",      "carol",     NULL};
  assert_int_equal(th_run_bridge(forced, t->vhost.url, none, 30000, &r), 0);
  printf("resolve --no-audit: exit %d, %s", r.exit_code, r.err);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.err, "resolve by actor 'carol' with --no-audit"));
  assert_int_equal(th_count_lines(r.err), 1);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  assert_int_equal(fx_count_in_file(d.log, "\"event\""), records);
  /* --no-audit never turns a configured trail off. */
  static const char *const replay_cfg[] = {"replay", "--request-id", "cfg-4", "--no-audit", NULL};
  assert_int_equal(th_run_bridge(replay_cfg, t->vhost.url, env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_null(strstr(r.err, "no_audit"));
  assert_int_equal(fx_count_in_file(d.log, "\"event\":\"replayed\""), 1);
  audit_dir_remove(&d);
}

/* The broker stops taking anchors (the stream deleted under a running
 * bridge): routing and acking go on, every hop is recorded, /healthz stays
 * 200, the gauge dlq_bridge_audit_anchored turns 0 and the log says so
 * once; with the stream back, the next anchor covers everything and the
 * gauge returns to 1. */
static bool anchored_is(void *arg) {
  const int *want = arg;
  return metric(want[0], "dlq_bridge_audit_anchored") == (double)want[1];
}

static void test_anchor_outage_keeps_acking(void **state) {
  fx_case *t = *state;
  audit_dir d;
  audit_dir_init(&d);
  int port = th_free_port();
  char addr[64];
  snprintf(addr, sizeof addr, "DLQ_BRIDGE_METRICS_ADDR=127.0.0.1:%d", port);
  const char *const env[] = {d.a.env_log,
                             d.a.env_key,
                             "DLQ_BRIDGE_MAX_ATTEMPTS=1",
                             addr,
                             "DLQ_BRIDGE_AUDIT_ANCHOR_INTERVAL=200ms",
                             NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  int want[2] = {port, 1};
  FX_CHECK(t, th_wait_until(anchored_is, want, WAIT_MS));
  th_bridge *b = &t->bridges[0];
  /* The daemon's anchors wait for its own declare: a stream it has not
   * made yet is no outage (it was logged, by both writers, when the
   * declare came later than the first 200 ms interval under load). */
  assert_int_equal(fx_count_in_file(b->log_path, "anchor_failing"), 0);
  char path[256];
  assert_true(th_fmt(path, sizeof path, "/api/queues/%s/dsr.audit.anchors", t->vhost.name));
  assert_int_equal(th_mgmt("DELETE", path, NULL, NULL), 204);

  publish_failed(t, "unanchored", 0, 3);
  want[1] = 0;
  FX_CHECK(t, th_wait_until(anchored_is, want, WAIT_MS));
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 3, WAIT_MS));
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 0));
  health_wait h;
  FX_CHECK(t, wait_health(&h, port, 200));
  FX_CHECK(t, wait_count(b->log_path, "anchor_failing", 1));
  assert_int_equal(fx_count_in_file(d.log, "\"event\":\"dead_lettered\""), 3);

  static const char *const declare[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare, t->vhost.url, d.env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  want[1] = 1;
  FX_CHECK(t, th_wait_until(anchored_is, want, WAIT_MS));
  FX_CHECK(t, wait_count(b->log_path, "anchor_recovered", 1));
  /* Logged once per writer (the router's, and the escalator's if its head
   * was not anchored before the stream went), not once per attempt. */
  int failing = fx_count_in_file(b->log_path, "anchor_failing");
  assert_true(failing >= 1 && failing <= 2);
  assert_int_equal(fx_stop_bridges(t), 0);
  expect_verified(t, &d, "ended cleanly, 0 open)");
  audit_dir_remove(&d);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  /* DLQB_TEST_FILTER=test_replay* runs only the matching cases. */
  if (getenv("DLQB_TEST_FILTER") != NULL) cmocka_set_test_filter(getenv("DLQB_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      FX_TEST(test_unwritable_log_holds_acks_then_resumes),
      FX_TEST(test_crash_while_unwritable_loses_nothing),
      FX_TEST(test_audit_show_one_task),
      FX_TEST(test_trail_records_xdeath_counts),
      FX_TEST(test_ops_hops_record_xdeath_counts),
      FX_TEST(test_audit_reconcile_finds_what_was_removed),
      FX_TEST(test_audit_reconcile_held_is_not_missing),
      FX_TEST(test_escalator_full_disk_no_duplicates),
      FX_TEST(test_lost_connection_during_outage_no_duplicates),
      FX_TEST(test_escalator_lost_connection_during_outage_no_duplicates),
      FX_TEST(test_stop_during_outage_duplicates_at_most_a_window),
      FX_TEST(test_replay_unwritable_log_fails_before_publishing),
      FX_TEST(test_replay_losing_trail_midway_stops),
      FX_TEST(test_stopped_lock_holder_shows_in_health),
      FX_TEST(test_ops_find_the_trail_through_the_config_file),
      FX_TEST(test_anchor_outage_keeps_acking),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

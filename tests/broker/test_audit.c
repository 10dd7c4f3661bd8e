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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
  /* Metrics off: a bridge started with th_bridge_start (not fx_start_bridge)
   * would otherwise need the default port 9464 free on this machine. */
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
  const char *queue;
  long want;
} unacked_wait;

static bool unacked_is(void *arg) {
  unacked_wait *u = arg;
  char path[512];
  snprintf(path, sizeof path, "/api/queues/%s/%s", u->t->vhost.name, u->queue);
  json_object *q = th_mgmt_get_json(path);
  json_object *m;
  long n = -1;
  if (q != NULL && json_object_object_get_ex(q, "messages_unacknowledged", &m))
    n = (long)json_object_get_int64(m);
  json_object_put(q);
  return n == u->want;
}

static bool wait_unacked(const fx_case *t, const char *queue, long want) {
  unacked_wait u = {t, queue, want};
  return th_wait_until(unacked_is, &u, WAIT_MS);
}

static void expect_verified(fx_case *t, const audit_dir *d, const char *want) {
  th_result r;
  assert_int_equal(fx_audit_verify(&d->a, &r), 0);
  printf("audit verify: exit %d\n%s%s", r.exit_code, r.out, r.err);
  FX_CHECK(t, r.exit_code == 0);
  assert_non_null(strstr(r.out, want));
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

  /* Full disk: the bridge republishes (the DLQ copies are confirmed) but
   * must not ack a single original. */
  disk_full(&d);
  publish_failed(t, "during", 0, 5);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 8, WAIT_MS));
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 5));
  usleep(HOLD_MS * 1000);
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 5));
  assert_int_equal(th_queue_depth(t->conn, "dsr.failed"), 0); /* held, not requeued */
  FX_CHECK(t, th_bridge_running(b));
  FX_CHECK(t, wait_count(b->log_path, "audit_failing", 1));
  /* Said once, not every 500 ms. */
  assert_int_equal(fx_count_in_file(b->log_path, "audit_failing"), 1);
  assert_int_equal(fx_count_in_file(d.saved, "\"event\":\"dead_lettered\""), 3);

  /* Writable again: it resumes by itself and acks everything. */
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
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 4, WAIT_MS));
  FX_CHECK(t, wait_unacked(t, "dsr.failed", 4));
  /* The bridge dies holding them: none was acked, so all four return. */
  th_bridge_kill(&t->bridges[0]);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.failed", 4, WAIT_MS));

  /* A new bridge on a writable log routes them again (a duplicate in the
   * DLQ, never a loss) and records each hop. */
  disk_back(&d);
  th_bridge *b2 = &t->bridges[1];
  assert_int_equal(th_bridge_start(b2, &t->vhost, d.env, "bridge2"), 0);
  t->nbridges = 2;
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 8, WAIT_MS));
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

/* Runs `dlq-bridge audit show --request-id id [--json]` on d's log. */
static void audit_show(const audit_dir *d, const char *id, bool json, th_result *r) {
  const char *const args[] = {"audit", "show", "--request-id", id, json ? "--json" : NULL, NULL};
  const char *const env[] = {d->a.env_log, d->a.env_key, NULL};
  assert_int_equal(th_run_bridge(args, NULL, env, 30000, r), 0);
  printf("audit show %s%s: exit %d\n%s%s", id, json ? " --json" : "", r->exit_code, r->out,
         r->err);
}

/* A compliance officer's question, "what happened to this request?",
 * answered from the log only once it verifies: two failures retried, the
 * third dead-lettered, then replayed by an operator; another task's hops
 * are not shown; after an edit, nothing is shown at all. */
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
  assert_int_equal(fx_stop_bridges(t), 0);

  audit_show(&d, "show-1", false, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "audit log intact"));
  assert_non_null(strstr(r.out, "4 hops recorded for request_id show-1"));
  assert_null(strstr(r.out, "show-2"));
  const char *order[] = {"retry_scheduled", "retry_scheduled", "dead_lettered", "replayed"};
  const char *at = r.out;
  for (size_t i = 0; i < 4; i++) {
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
  assert_int_equal(json_object_array_length(hops), 4);
  for (size_t i = 0; i < 4; i++)
    assert_string_equal(th_json_str(json_object_array_get_idx(hops, i), "request_id"), "show-1");
  json_object_put(doc);

  /* Usage errors: exit 2, one line, before the log is read. */
  static const char *const no_filter[] = {"audit", "show", NULL};
  static const char *const empty_id[] = {"audit", "show", "--request-id", "", NULL};
  const char *const *bad[] = {no_filter, empty_id};
  const char *const audit_env[] = {d.a.env_log, d.a.env_key, NULL};
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
  const char *const env[] = {d->a.env_log, d->a.env_key, NULL};
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

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_unwritable_log_holds_acks_then_resumes),
      FX_TEST(test_crash_while_unwritable_loses_nothing),
      FX_TEST(test_audit_show_one_task),
      FX_TEST(test_audit_reconcile_finds_what_was_removed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* `dlq-bridge audit report` against a real bridge: tasks ending in every
 * state (completed, waiting in dsr.work and in a retry queue, in the DLQ,
 * in review claimed and unclaimed, resolved with its note, removed behind
 * dlq-bridge's back), the report in text and JSON, counts that add up,
 * nothing moved by it, and `audit verify-report` passing on the report and
 * failing on an edited one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "flow.h"

#define WAIT_MS    20000
#define HOSTILE_ID "rep-\x1b[31m\"evil"

/* A completion in the ledger, as a worker records it (user_id: the broker
 * checks it is the connection's own user) or, with as NULL, as anyone may
 * append it. */
static void completion(fx_case *t, const char *id, const char *as) {
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_add_str(&m, "request_id", id), 0);
  assert_int_equal(th_msg_add_str(&m, "source_system", "test-suite"), 0);
  if (as != NULL) snprintf(m.user_id, sizeof m.user_id, "%s", as);
  assert_int_equal(th_publish(t->conn, "", "dsr.completed", &m), 0);
  th_msg_release(&m);
}

static void run_ok(fx_case *t, const char *const *args, const char *const *env) {
  th_result r;
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, 60000, &r), 0);
  printf("%s %s: exit %d\n%s%s", args[0], args[1] ? args[1] : "", r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, 0);
}

/* The whole file at path, NUL-terminated (the caller frees it). */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  char *buf = malloc(1 << 20);
  assert_non_null(buf);
  *len = fread(buf, 1, (1 << 20) - 1, f);
  buf[*len] = '\0';
  fclose(f);
  return buf;
}

static void verify_report(const fx_audit *a, const char *path, th_result *r) {
  const char *const args[] = {"audit", "verify-report", path, NULL};
  const char *const env[] = {a->env_pub, NULL}; /* public keys only, no broker */
  assert_int_equal(th_run_bridge(args, NULL, env, 30000, r), 0);
  printf("verify-report %s: exit %d\n%s%s", path, r->exit_code, r->out, r->err);
}

/* Flips the first occurrence of needle's last byte in the file. */
static void edit(const char *path, const char *needle, char to) {
  size_t len = 0;
  char *buf = slurp(path, &len);
  char *p = strstr(buf, needle);
  assert_non_null(p);
  int fd = open(path, O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, &to, 1, (off_t)(p - buf) + (off_t)strlen(needle) - 1), 1);
  close(fd);
  free(buf);
}

static json_object *request(json_object *reqs, const char *id) {
  for (size_t i = 0; i < json_object_array_length(reqs); i++) {
    json_object *e = json_object_array_get_idx(reqs, i);
    if (strcmp(th_json_str(e, "request_id"), id) == 0) return e;
  }
  fail_msg("%s is not in the report", id);
  return NULL;
}

/* x-delivery-count of the next message a consumer gets from queue, which
 * it then returns unacked (as a look that holds would): -1 when absent. */
static int64_t look(fx_case *t, const char *queue, const char *want_id) {
  th_worker *w = th_worker_open(&t->vhost, queue, 1);
  assert_non_null(w);
  th_msg *m = fx_msg(t);
  FX_CHECK(t, th_worker_next(w, m, WAIT_MS) == 1);
  FX_HDR_STR_EQ(m, "request_id", want_id);
  int64_t n = -1;
  if (!th_msg_int(m, "x-delivery-count", &n)) n = -1;
  th_worker_close(w); /* unacked: returned to the queue */
  return n;
}

/* The report never consumed the quorum queues: their message's first
 * delivery is the one we make now. And why it must not: a consumer that
 * holds a message and returns it (a look) counts a delivery (measured
 * here on 3.10 and 4.0), and with dsr.work's delivery limit
 * (poison_threshold - 1 = 1) the second look made rep-work poison: the
 * broker dead-lettered it to dsr.failed. */
static void expect_undisturbed(fx_case *t, const char *queue, const char *id) {
  int64_t first = look(t, queue, id), second = look(t, queue, id);
  printf("%s, RabbitMQ %d: x-delivery-count at the first look %lld, after one look returned "
         "%lld\n",
         queue, th_broker_version(), (long long)first, (long long)second);
  assert_true(first <= 0);  /* the report delivered nothing */
  assert_true(second >= 1); /* measured: 1 on 3.10.8 and on 4.0.5 */
}

static void test_report_every_state_signed(void **state) {
  fx_case *t = *state;
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  char from[40];
  th_iso_time(th_now_ms() - 60000, from, sizeof from);
  const char *const env[] = {a.env_log,
                             a.env_key,
                             "DLQ_BRIDGE_MAX_ATTEMPTS=1",
                             "DLQ_BRIDGE_RETRY_DELAYS=1h",
                             "DLQ_BRIDGE_COMPLETION_WRITERS=guest",
                             NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  /* rep-gone first: it is the DLQ's head when it is taken behind our back. */
  static const char *const ids[] = {
      "rep-gone",      "rep-done",     "rep-work", "rep-dlq",  "rep-claimed",
      "rep-unclaimed", "rep-resolved", "rep-unv",  HOSTILE_ID, NULL};
  for (size_t i = 0; ids[i] != NULL; i++) assert_int_equal(fx_publish_task(t, ids[i]), 0);
  /* And one allowed three attempts: its first failure waits in dsr.retry.1h. */
  th_msg *retry = fx_msg(t);
  assert_int_equal(th_msg_task(retry, "rep-retry"), 0);
  assert_int_equal(th_msg_set_int(retry, "max_attempts", 3), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", retry), 0);
  th_worker *w = th_worker_open(&t->vhost, "dsr.work", 1);
  assert_non_null(w);
  th_msg *m = fx_msg(t);
  for (int i = 0; i < 10; i++) {
    FX_CHECK(t, th_worker_next(w, m, WAIT_MS) == 1);
    assert_int_equal(th_worker_report(w, t->conn, m, "upstream \"timeout\"\x1b[2J"), 0);
  }
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 9, WAIT_MS));
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.retry.1h", 1, WAIT_MS));

  /* Behind dlq-bridge's back: the head of the DLQ taken (auto-ack). */
  assert_int_equal(th_get(t->conn, "dsr.dlq.manual", m), 1);
  FX_HDR_STR_EQ(m, "request_id", "rep-gone");

  /* Replayed and completed by the worker, with its completion recorded. */
  const char *const replay_done[] = {"replay", "--request-id", "rep-done", NULL};
  run_ok(t, replay_done, env);
  FX_CHECK(t, th_worker_next(w, m, WAIT_MS) == 1);
  FX_HDR_STR_EQ(m, "request_id", "rep-done");
  assert_int_equal(th_worker_ack(w), 0);
  completion(t, "rep-done", "guest");
  th_worker_close(w); /* nobody takes rep-work: it waits in dsr.work */
  const char *const replay_work[] = {"replay", "--request-id", "rep-work", NULL};
  run_ok(t, replay_work, env);
  completion(t, "rep-unv", NULL); /* anyone's: not counted */
  const char *const esc1[] = {"escalate", "--request-id", "rep-claimed", "--note", "scope", NULL};
  const char *const esc2[] = {"escalate", "--request-id", "rep-unclaimed", "--note", "scope", NULL};
  run_ok(t, esc1, env);
  run_ok(t, esc2, env);
  const char *const claim[] = {"review", "claim", "--message-id", "msg-rep-claimed", "--actor",
                               "bob",    NULL};
  run_ok(t, claim, env);
  const char *const resolve[] = {"resolve", "--message-id",           "msg-rep-resolved",
                                 "--note",  "erased by hand, OPS-43", NULL};
  run_ok(t, resolve, env);
  /* The bridge's SLA escalator would be a second consumer on the DLQ. */
  assert_int_equal(fx_stop_bridges(t), 0);
  long dlq = th_queue_depth(t->conn, "dsr.dlq.manual"),
       review = th_queue_depth(t->conn, "compliance_review"),
       work = th_queue_depth(t->conn, "dsr.work"), delay = th_queue_depth(t->conn, "dsr.retry.1h");
  assert_int_equal(dlq, 3); /* rep-dlq, rep-unv, the hostile one */
  assert_int_equal(review, 2);
  assert_int_equal(work, 1);
  assert_int_equal(delay, 1);

  char text_path[192], json_path[192];
  assert_true(th_fmt(text_path, sizeof text_path, "%s/report.txt", a.dir));
  assert_true(th_fmt(json_path, sizeof json_path, "%s/report.json", a.dir));
  const char *const report_env[] = {a.env_log,
                                    a.env_key,
                                    a.env_pub,
                                    "DLQ_BRIDGE_COMPLETION_WRITERS=guest",
                                    "DLQ_BRIDGE_RETRY_DELAYS=1h",
                                    NULL};
  const char *const text_args[] = {"audit",        "report",   "--from",  from, "--actor",
                                   "carol\x1b[1m", "--output", text_path, NULL};
  const char *const json_args[] = {"audit", "report", "--from",   from,      "--actor",
                                   "carol", "--json", "--output", json_path, NULL};
  run_ok(t, text_args, report_env);
  run_ok(t, json_args, report_env);
  /* The report moved nothing (the items it held return as its link closes). */
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", dlq, WAIT_MS));
  FX_CHECK(t, th_wait_depth(t->conn, "compliance_review", review, WAIT_MS));
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), work);
  assert_int_equal(th_queue_depth(t->conn, "dsr.retry.1h"), delay);

  size_t len = 0;
  char *text = slurp(text_path, &len);
  printf("%s", text);
  assert_null(memchr(text, '\x1b', len)); /* nothing from a message reaches a screen raw */
  assert_non_null(strstr(text, "completed  request_id rep-done  source_system test-suite"));
  assert_non_null(strstr(text, "in_review  request_id rep-claimed"));
  assert_non_null(strstr(text, "in compliance_review, claimed by bob"));
  assert_non_null(strstr(text, "in compliance_review, unclaimed"));
  assert_non_null(strstr(text, "in_dlq     request_id rep-dlq"));
  assert_non_null(strstr(text, "in_dlq     request_id rep-unv"));
  assert_non_null(strstr(text, "a completion entry from a user not in completion_writers"));
  assert_non_null(strstr(text, "resolved   request_id rep-resolved"));
  assert_non_null(strstr(text, "note \"erased by hand, OPS-43\""));
  assert_non_null(strstr(text, "waiting    request_id rep-work"));
  assert_non_null(strstr(text, "in dsr.work (per the trail)"));
  assert_non_null(strstr(text, "waiting    request_id rep-retry"));
  assert_non_null(strstr(text, "in dsr.retry.1h (per the trail)"));
  assert_non_null(strstr(text, "unknown    request_id rep-gone"));
  assert_non_null(strstr(text, "removed outside dlq-bridge"));
  assert_non_null(strstr(text, "in_dlq     request_id rep-?[31m\"evil"));
  /* completed, in_review, in_dlq, resolved, waiting, unknown */
  assert_non_null(strstr(text, "total      10 = 1 + 2 + 3 + 1 + 2 + 1 (the states add up"));
  assert_non_null(strstr(text, "by carol?[1m (broker user guest"));
  assert_non_null(strstr(text, "not read   (quorum queues"));
  assert_non_null(strstr(text, "dsr.work 1"));
  assert_non_null(strstr(text, "dsr.retry.1h 1"));

  char *js = slurp(json_path, &len);
  json_object *doc = json_tokener_parse(js);
  assert_non_null(doc);
  json_object *counts, *reqs, *v;
  assert_true(json_object_object_get_ex(doc, "counts", &counts));
  assert_true(json_object_object_get_ex(doc, "requests", &reqs));
  static const char *const states[] = {"completed", "in_review", "in_dlq",
                                       "resolved",  "waiting",   "unknown"};
  static const int want[] = {1, 2, 3, 1, 2, 1};
  int64_t sum = 0;
  for (size_t i = 0; i < 6; i++) {
    assert_true(json_object_object_get_ex(counts, states[i], &v));
    assert_int_equal(json_object_get_int64(v), want[i]);
    sum += json_object_get_int64(v);
    int listed = 0;
    for (size_t j = 0; j < json_object_array_length(reqs); j++)
      listed += strcmp(th_json_str(json_object_array_get_idx(reqs, j), "state"), states[i]) == 0;
    assert_int_equal(listed, want[i]);
  }
  assert_true(json_object_object_get_ex(counts, "total", &v));
  assert_int_equal(json_object_get_int64(v), sum);
  assert_int_equal(json_object_array_length(reqs), sum);
  assert_string_equal(th_json_str(request(reqs, "rep-claimed"), "owner"), "bob");
  assert_string_equal(th_json_str(request(reqs, "rep-unclaimed"), "owner"), "");
  assert_string_equal(th_json_str(request(reqs, "rep-resolved"), "note"), "erased by hand, OPS-43");
  assert_string_equal(th_json_str(request(reqs, "rep-retry"), "queue"), "dsr.retry.1h");
  assert_string_equal(th_json_str(request(reqs, "rep-?[31m\"evil"), "state"), "in_dlq");
  assert_true(json_object_object_get_ex(request(reqs, "rep-unv"), "unverified_completion", &v));
  assert_true(json_object_get_boolean(v));
  json_object *by;
  assert_true(json_object_object_get_ex(doc, "made_by", &by));
  assert_string_equal(th_json_str(by, "actor"), "carol");
  assert_string_equal(th_json_str(by, "broker_user"), "guest");
  json_object_put(doc);
  free(js);
  free(text);

  /* An auditor with the public keys only: both verify. */
  th_result r;
  verify_report(&a, text_path, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "report intact"));
  verify_report(&a, json_path, &r);
  assert_int_equal(r.exit_code, 0);
  /* The signing key revoked since: the report fails, and no new report
   * is signed with it. */
  char pem[192], revoked[192];
  assert_true(th_fmt(pem, sizeof pem, "%s/writer.pem", a.keys));
  assert_true(th_fmt(revoked, sizeof revoked, "%s/writer.pem.revoked", a.keys));
  assert_int_equal(rename(pem, revoked), 0);
  verify_report(&a, text_path, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "revoked"));
  char again[192];
  assert_true(th_fmt(again, sizeof again, "%s/again.txt", a.dir));
  const char *const again_args[] = {"audit", "report", "--from", from, "--output", again, NULL};
  assert_int_equal(th_run_bridge(again_args, t->vhost.url, report_env, 30000, &r), 0);
  printf("report with a revoked key: exit %d, %s", r.exit_code, r.err);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "would not verify"));
  assert_int_equal(access(again, F_OK), -1);
  assert_int_equal(rename(revoked, pem), 0);

  /* One byte edited: exit 1, one line. */
  edit(text_path, "in_dlq     request_id rep-dlq", 'r');
  verify_report(&a, text_path, &r);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_count_lines(r.err), 1);
  assert_non_null(strstr(r.err, "does not match"));
  edit(json_path, "\"in_dlq\":3", '4');
  verify_report(&a, json_path, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "does not match"));

  /* Usage: exit 2, one line, nothing written. */
  const char *const exists[] = {"audit", "report", "--from", from, "--output", json_path, NULL};
  const char *const bad_from[] = {"audit", "report", "--from", "last tuesday", NULL};
  const char *const *bad[] = {exists, bad_from};
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(th_run_bridge(bad[i], t->vhost.url, report_env, 30000, &r), 0);
    printf("usage: exit %d, %s", r.exit_code, r.err);
    assert_int_equal(r.exit_code, 2);
    assert_int_equal(th_count_lines(r.err), 1);
  }
  /* A log that does not verify gives no report. */
  edit(a.log, "\"request_id\":\"rep-dlq", 'r');
  assert_int_equal(th_run_bridge(again_args, t->vhost.url, report_env, 30000, &r), 0);
  printf("report on an edited log: exit %d, %s", r.exit_code, r.err);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_count_lines(r.err), 1);
  assert_int_equal(access(again, F_OK), -1);

  expect_undisturbed(t, "dsr.work", "rep-work");
  expect_undisturbed(t, "dsr.retry.1h", "rep-retry");
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.failed", 1, WAIT_MS));
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  /* Still there (its limit is 20 on 4.0, none on 3.10); the return of a
   * held message is a raft command that may land after the close. */
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.retry.1h", 1, WAIT_MS));
  fx_audit_remove(&a);
}

/* ---- response times: requests completed in known times ---- */

#define DAY_S INT64_C(86400)

/* One task of the statutory test: received `ago` seconds before base
 * (its first_seen_at; ago < 0: a claim in the future) and, when done >= 0,
 * completed `done` seconds after its receipt (the ledger entry's
 * timestamp; INT64_MIN: an entry without one). */
typedef struct {
  const char *id, *basis, *action;
  int64_t ago, done;
} rt_task;

#define NOT_DONE INT64_C(-1)
#define NO_TIME  INT64_MIN

static const rt_task rt_tasks[] = {
    {"rt-g-fast", "gdpr_art_17", "deletion", 20 * DAY_S, 5 * DAY_S},
    {"rt-g-mid", "gdpr_art_17", "deletion", 30 * DAY_S, 10 * DAY_S},
    {"rt-g-slow", "gdpr_art_17", "deletion", 60 * DAY_S, 40 * DAY_S}, /* past one month */
    {"rt-g-back", "gdpr_art_17", "deletion", DAY_S, -3600},           /* the clocks disagree */
    {"rt-g-notime", "gdpr_art_17", "deletion", DAY_S, NO_TIME},
    {"rt-g-future", "gdpr_art_17", "deletion", -10 * DAY_S, NOT_DONE}, /* a forged claim */
    {"rt-c-1", "ccpa_1798_105", "deletion", 50 * DAY_S, 44 * DAY_S},
    {"rt-c-2", "ccpa_1798_105", "deletion", 50 * DAY_S, 46 * DAY_S}, /* past 45 days */
    {"rt-c-open", "ccpa_1798_105", "deletion", 50 * DAY_S, NOT_DONE},
};
#define RT_N (sizeof rt_tasks / sizeof rt_tasks[0])

static double jnum_of(json_object *o, const char *key) {
  json_object *v;
  if (!json_object_object_get_ex(o, key, &v) || v == NULL) fail_msg("%s is missing or null", key);
  return json_object_get_double(v);
}

static json_object *group_of(json_object *doc, const char *basis, const char *action) {
  json_object *st, *groups;
  assert_true(json_object_object_get_ex(doc, "statutory", &st));
  assert_true(json_object_object_get_ex(st, "groups", &groups));
  for (size_t i = 0; i < json_object_array_length(groups); i++) {
    json_object *g = json_object_array_get_idx(groups, i);
    if (strcmp(th_json_str(g, "legal_basis"), basis) == 0 &&
        strcmp(th_json_str(g, "action"), action) == 0)
      return g;
  }
  fail_msg("no group %s %s", basis, action);
  return NULL;
}

static void test_report_response_times(void **state) {
  fx_case *t = *state;
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  const int64_t base = th_now_ms() / 1000; /* whole seconds: an AMQP timestamp's */
  char from[40], iso[40];
  th_iso_time(th_now_ms() - 60000, from, sizeof from);
  const char *const env[] = {a.env_log, a.env_key, "DLQ_BRIDGE_MAX_ATTEMPTS=1",
                             "DLQ_BRIDGE_COMPLETION_WRITERS=guest", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  th_msg *m = fx_msg(t);
  for (size_t i = 0; i < RT_N; i++) {
    th_msg_reset(m);
    assert_int_equal(th_msg_add_str(m, "request_id", rt_tasks[i].id), 0);
    assert_int_equal(th_msg_add_str(m, "source_system", "test-suite"), 0);
    assert_int_equal(th_msg_add_str(m, "legal_basis", rt_tasks[i].basis), 0);
    assert_int_equal(th_msg_add_str(m, "action", rt_tasks[i].action), 0);
    th_iso_time((base - rt_tasks[i].ago) * 1000, iso, sizeof iso);
    assert_int_equal(th_msg_add_str(m, "first_seen_at", iso), 0);
    snprintf(m->message_id, sizeof m->message_id, "msg-%s", rt_tasks[i].id);
    assert_int_equal(th_publish(t->conn, "", "dsr.work", m), 0);
  }
  /* A hostile basis and action: an invalid envelope, straight to the DLQ,
   * and a group of its own in the report, escaped. */
  th_msg_reset(m);
  assert_int_equal(th_msg_task(m, "rt-evil"), 0);
  m->nheaders -= 2; /* legal_basis and action, set again below */
  assert_int_equal(th_msg_add_str(m, "legal_basis", "gdpr\x1b[2J"), 0);
  assert_int_equal(th_msg_add_str(m, "action", "del\"x"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", m), 0);
  /* Every task fails once (max_attempts 1: to the DLQ). Rejected, so the
   * broker's x-death carries its own time of the failure. */
  th_worker *w = th_worker_open(&t->vhost, "dsr.work", 1);
  assert_non_null(w);
  for (size_t i = 0; i < RT_N + 1; i++) {
    FX_CHECK(t, th_worker_next(w, m, WAIT_MS) == 1);
    assert_int_equal(th_worker_reject(w), 0);
  }
  th_worker_close(w);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", (long)RT_N + 1, WAIT_MS));
  assert_int_equal(fx_stop_bridges(t), 0);
  /* The completions, as a worker records them, with its clock's time. */
  for (size_t i = 0; i < RT_N; i++) {
    if (rt_tasks[i].done == NOT_DONE) continue;
    th_msg_reset(m);
    assert_int_equal(th_msg_add_str(m, "request_id", rt_tasks[i].id), 0);
    assert_int_equal(th_msg_add_str(m, "source_system", "test-suite"), 0);
    snprintf(m->user_id, sizeof m->user_id, "guest");
    if (rt_tasks[i].done != NO_TIME) {
      m->has_timestamp = true;
      m->timestamp = (uint64_t)(base - rt_tasks[i].ago + rt_tasks[i].done);
    }
    assert_int_equal(th_publish(t->conn, "", "dsr.completed", m), 0);
  }

  char text_path[192], json_path[192];
  assert_true(th_fmt(text_path, sizeof text_path, "%s/rt.txt", a.dir));
  assert_true(th_fmt(json_path, sizeof json_path, "%s/rt.json", a.dir));
  const char *const report_env[] = {a.env_log, a.env_key, a.env_pub,
                                    "DLQ_BRIDGE_COMPLETION_WRITERS=guest", NULL};
  const char *const text_args[] = {"audit", "report", "--from", from, "--output", text_path, NULL};
  const char *const json_args[] = {"audit",  "report",   "--from",  from,
                                   "--json", "--output", json_path, NULL};
  run_ok(t, text_args, report_env);
  run_ok(t, json_args, report_env);
  size_t len = 0;
  char *text = slurp(text_path, &len);
  printf("%s", text);
  assert_null(memchr(text, '\x1b', len));
  /* gdpr: 5, 10 and 40 days measured (median 10, mean 18.33); the one
   * completed before its receipt and the one without a time are not. */
  assert_non_null(strstr(text, "gdpr_art_17     deletion        1mo             6 "));
  assert_non_null(strstr(text, "    10.00    18.33       2    1     1         0       1     1\n"));
  assert_non_null(strstr(text, "ccpa_1798_105   deletion        45d             3 "));
  assert_non_null(strstr(text, "    45.00    45.00       1    1     0         1       0     0\n"));
  assert_non_null(strstr(text, "response late: completed at "));
  assert_non_null(strstr(text, "BEFORE its receipt as recorded (clocks disagree"));
  assert_non_null(strstr(text, "gdpr?[2J"));

  char *js = slurp(json_path, &len);
  json_object *doc = json_tokener_parse(js);
  assert_non_null(doc);
  json_object *g = group_of(doc, "gdpr_art_17", "deletion");
  assert_int_equal((int)jnum_of(g, "requests"), 6);
  assert_int_equal((int)jnum_of(g, "completed"), 5);
  assert_int_equal((int)jnum_of(g, "measured"), 3);
  assert_true(fabs(jnum_of(g, "median_days") - 10.0) < 0.005);
  assert_true(fabs(jnum_of(g, "mean_days") - 55.0 / 3) < 0.005);
  assert_int_equal((int)jnum_of(g, "late"), 1);
  assert_int_equal((int)jnum_of(g, "on_time"), 2);
  assert_int_equal((int)jnum_of(g, "clock"), 1);
  assert_int_equal((int)jnum_of(g, "no_time"), 1);
  assert_int_equal((int)jnum_of(g, "open"), 1);
  g = group_of(doc, "ccpa_1798_105", "deletion");
  assert_true(fabs(jnum_of(g, "median_days") - 45.0) < 0.005);
  assert_int_equal((int)jnum_of(g, "open_late"), 1);
  assert_int_equal((int)jnum_of(g, "late"), 1);
  (void)group_of(doc, "gdpr?[2J", "del\"x");
  json_object *reqs;
  assert_true(json_object_object_get_ex(doc, "requests", &reqs));
  json_object *e = request(reqs, "rt-g-fast");
  th_iso_time((base - 20 * DAY_S) * 1000, iso, sizeof iso);
  assert_string_equal(th_json_str(e, "received_at"), iso);
  assert_string_equal(th_json_str(e, "received_from"), "first_seen_at");
  assert_string_equal(th_json_str(e, "response"), "on_time");
  assert_string_equal(th_json_str(e, "closed_by"), "completion");
  assert_true(fabs(jnum_of(e, "response_days") - 5.0) < 0.005);
  th_iso_time((base - 15 * DAY_S) * 1000, iso, sizeof iso);
  assert_string_equal(th_json_str(e, "closed_at"), iso);
  e = request(reqs, "rt-g-back");
  assert_string_equal(th_json_str(e, "response"), "clock");
  assert_true(fabs(jnum_of(e, "clock_gap_days") - 1.0 / 24) < 0.005);
  /* A claim in the future moves nothing: the receipt is the broker's own
   * time of the failure (x-death), not later. */
  e = request(reqs, "rt-g-future");
  printf("rt-g-future received %s from %s\n", th_json_str(e, "received_at"),
         th_json_str(e, "received_from"));
  assert_string_equal(th_json_str(e, "received_from"), "x_death");
  int64_t got = 0;
  assert_true(th_is_iso_utc(th_json_str(e, "received_at")));
  {
    struct tm tm = {0};
    int msec = 0;
    assert_int_equal(sscanf(th_json_str(e, "received_at"), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year,
                            &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &msec),
                     7);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    got = (int64_t)timegm(&tm);
  }
  assert_true(got >= base - 120 && got <= th_now_ms() / 1000);
  json_object_put(doc);
  free(js);
  free(text);
  th_result r;
  verify_report(&a, text_path, &r);
  assert_int_equal(r.exit_code, 0);
  verify_report(&a, json_path, &r);
  assert_int_equal(r.exit_code, 0);
  fx_audit_remove(&a);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  if (getenv("DLQB_TEST_FILTER") != NULL) cmocka_set_test_filter(getenv("DLQB_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      FX_TEST(test_report_every_state_signed),
      FX_TEST(test_report_response_times),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

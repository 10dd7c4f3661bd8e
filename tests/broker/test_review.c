/* The review commands against a real broker: list, claim (conflicts need
 * --force and are recorded so), each decision (replay, the completion
 * ledger, resolve, return), the whole story in `audit show`, a decision
 * SIGKILLed at every moment (nothing lost; the trail says which copy
 * counts), and `audit reconcile` naming an item acked away from
 * compliance_review behind the bridge's back, and the daemon's review
 * gauges. */
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

#define CMD_TIMEOUT_MS 60000
#define HOUR_MS        3600000LL

/* A case with the audit trail on; env holds its variables. */
typedef struct {
  fx_audit a;
  const char *env[5];
} trail;

static void trail_init(trail *tr) {
  assert_int_equal(fx_audit_init(&tr->a), 0);
  tr->env[0] = tr->a.env_log;
  tr->env[1] = tr->a.env_key;
  /* The test's own completions are written as guest (issue 16 part 4). */
  tr->env[2] = "DLQ_BRIDGE_COMPLETION_WRITERS=guest";
  tr->env[3] = tr->a.env_pub; /* audit show and reconcile read public keys only */
  tr->env[4] = NULL;
}

static void run(fx_case *t, const trail *tr, const char *const *args, th_result *r) {
  assert_int_equal(th_run_bridge(args, t->vhost.url, tr->env, CMD_TIMEOUT_MS, r), 0);
  printf("%s %s: exit %d\n%s%s", args[0], args[1] ? args[1] : "", r->exit_code, r->out, r->err);
}

static void declare(fx_case *t, const trail *tr) {
  static const char *const args[] = {"declare", NULL};
  th_result r;
  run(t, tr, args, &r);
  assert_int_equal(r.exit_code, 0);
}

/* A DLQ item as the bridge leaves it, dead-lettered an hour ago. */
static void pub_dlq(fx_case *t, const char *id) {
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, id), 0);
  char iso[48];
  th_iso_time(th_now_ms() - HOUR_MS, iso, sizeof iso);
  assert_int_equal(th_msg_set_int(&m, "attempt", 5), 0);
  assert_int_equal(th_msg_set_str(&m, "last_error", "rejected by worker"), 0);
  assert_int_equal(th_msg_set_str(&m, "dlq_reason", "max_attempts"), 0);
  assert_int_equal(th_msg_set_str(&m, "dlq_at", iso), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
}

/* Publishes DLQ items for ids and escalates them all with a note. */
static void escalate_ids(fx_case *t, const trail *tr, const char *const *ids) {
  for (size_t i = 0; ids[i] != NULL; i++) pub_dlq(t, ids[i]);
  static const char *const args[] = {
      "escalate", "--all", "--actor", "olga", "--note", "subject disputes the erasure scope", NULL};
  th_result r;
  run(t, tr, args, &r);
  assert_int_equal(r.exit_code, 0);
}

static json_object *list_json(fx_case *t, const trail *tr) {
  static const char *const args[] = {"review", "list", "--json", NULL};
  th_result r;
  run(t, tr, args, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *j = json_tokener_parse(r.out);
  assert_non_null(j);
  return j;
}

static json_object *find_item(json_object *arr, const char *message_id) {
  for (size_t i = 0; i < json_object_array_length(arr); i++) {
    json_object *it = json_object_array_get_idx(arr, i);
    if (strcmp(th_json_str(it, "message_id"), message_id) == 0) return it;
  }
  fail_msg("%s is not listed", message_id);
  return NULL;
}

static int claim(fx_case *t, const trail *tr, const char *mid, const char *actor, bool force) {
  const char *args[] = {"review",  "claim", "--message-id",           mid,
                        "--actor", actor,   force ? "--force" : NULL, NULL};
  th_result r;
  run(t, tr, args, &r);
  if (r.exit_code != 0) assert_int_equal(th_count_lines(r.err), 1);
  return r.exit_code;
}

/* Lines of the log holding both needles. */
static int count_records(const fx_audit *a, const char *n1, const char *n2) {
  FILE *f = fopen(a->log, "r");
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

static void test_list_claim_and_conflicts(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init(&tr);
  declare(t, &tr);
  escalate_ids(t, &tr, (const char *[]){"c1", "c2", NULL});

  json_object *j = list_json(t, &tr);
  assert_int_equal(json_object_array_length(j), 2);
  json_object *it = find_item(j, "msg-c1");
  assert_string_equal(th_json_str(it, "request_id"), "c1");
  assert_string_equal(th_json_str(it, "source_system"), "test-suite");
  assert_string_equal(th_json_str(it, "legal_basis"), "gdpr_art_17");
  assert_string_equal(th_json_str(it, "escalated_by"), "olga");
  assert_string_equal(th_json_str(it, "escalation_reason"), "operator");
  assert_string_equal(th_json_str(it, "escalation_note"), "subject disputes the erasure scope");
  assert_true(th_is_iso_utc(th_json_str(it, "escalated_at")));
  assert_null(json_object_object_get(it, "owner"));
  assert_null(json_object_object_get(it, "payload"));
  json_object_put(j);

  assert_int_equal(claim(t, &tr, "msg-c1", "alice", false), 0);
  assert_int_equal(claim(t, &tr, "msg-c1", "alice", false), 0); /* already hers: no hop */
  assert_int_equal(claim(t, &tr, "msg-c1", "bob", false), 1);   /* hers: refused */
  assert_int_equal(claim(t, &tr, "msg-nope", "bob", false), 1);
  j = list_json(t, &tr);
  it = find_item(j, "msg-c1");
  assert_string_equal(th_json_str(it, "owner"), "alice");
  assert_true(th_is_iso_utc(th_json_str(it, "claimed_at")));
  assert_null(json_object_object_get(find_item(j, "msg-c2"), "owner"));
  json_object_put(j);

  static const char *const unclaimed[] = {"review", "list", "--unclaimed", NULL};
  th_result r;
  run(t, &tr, unclaimed, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "msg-c2"));
  assert_null(strstr(r.out, "msg-c1"));
  assert_non_null(strstr(r.out, "1 item listed (1 unclaimed)"));
  /* Issue 42: at 80 columns the list fits (it was 142 columns wide), its
   * ids whole; at 120 it fits 120. */
  static const char *const all[] = {"review", "list", NULL};
  for (int w = 0; w < 2; w++) {
    const char *const env[] = {
        tr.env[0], tr.env[1], tr.env[2], tr.env[3], w == 0 ? "COLUMNS=80" : "COLUMNS=120", NULL};
    assert_int_equal(th_run_bridge(all, t->vhost.url, env, CMD_TIMEOUT_MS, &r), 0);
    printf("review list at %s:\n%s", env[4], r.out);
    assert_int_equal(r.exit_code, 0);
    size_t widest = 0;
    for (const char *p = r.out; *p != '\0';) {
      size_t n = strcspn(p, "\n"), chars = 0;
      for (size_t i = 0; i < n; i++) chars += ((unsigned char)p[i] & 0xC0u) != 0x80u;
      if (chars > widest) widest = chars;
      p += n + (p[n] == '\n');
    }
    assert_true(widest <= (w == 0 ? 80u : 120u));
    assert_non_null(strstr(r.out, " msg-c1 "));
    assert_non_null(strstr(r.out, " msg-c2 "));
  }

  assert_int_equal(claim(t, &tr, "msg-c1", "bob", true), 0); /* forced */
  assert_int_equal(count_records(&tr.a, "\"event\":\"claimed\"", "msg-c1"), 2);
  assert_int_equal(count_records(&tr.a, "\"cause\":\"force\"", "msg-c1"), 1);
  assert_int_equal(count_records(&tr.a, "forced over alice's claim", "msg-c1"), 1);
  /* Only the owner decides now. */
  static const char *const alice[] = {"review",   "decide",  "--message-id", "msg-c1",
                                      "--return", "--actor", "alice",        NULL};
  run(t, &tr, alice, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "claimed by bob"));
  static const char *const unowned[] = {"review",   "decide",  "--message-id", "msg-c2",
                                        "--return", "--actor", "alice",        NULL};
  run(t, &tr, unowned, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "not claimed"));
  /* Usage: no decision, two decisions, resolve without a note. */
  static const char *const none[] = {"review", "decide", "--message-id", "msg-c1", NULL};
  static const char *const two[] = {"review",   "decide", "--message-id", "msg-c1", "--replay",
                                    "--return", NULL};
  static const char *const nonote[] = {"review", "decide",    "--message-id",
                                       "msg-c1", "--resolve", NULL};
  const char *const *bad[] = {none, two, nonote};
  for (size_t i = 0; i < 3; i++) {
    run(t, &tr, bad[i], &r);
    assert_int_equal(r.exit_code, 2);
    assert_int_equal(th_count_lines(r.err), 1);
  }
  assert_int_equal(th_queue_depth(t->conn, "compliance_review"), 2); /* nothing lost */
  assert_int_equal(fx_audit_verify(&tr.a, &r), 0);
  assert_int_equal(r.exit_code, 0);
  fx_audit_remove(&tr.a);
}

static void decide(fx_case *t, const trail *tr, const char *mid, const char *how, const char *note,
                   int want) {
  const char *args[] = {"review",  "decide", "--message-id",         mid,  how,
                        "--actor", "alice",  note ? "--note" : NULL, note, NULL};
  th_result r;
  run(t, tr, args, &r);
  assert_int_equal(r.exit_code, want);
}

static void test_each_decision_and_the_story(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init(&tr);
  declare(t, &tr);
  escalate_ids(t, &tr, (const char *[]){"d1", "d2", "d3", "d4", NULL});
  /* d4's task completed meanwhile: replay removes it instead. */
  th_msg *done = fx_msg(t);
  assert_int_equal(th_msg_add_str(done, "request_id", "d4"), 0);
  assert_int_equal(th_msg_add_str(done, "source_system", "test-suite"), 0);
  snprintf(done->user_id, sizeof done->user_id, "guest");
  assert_int_equal(th_publish(t->conn, "", "dsr.completed", done), 0);
  for (const char *const *m = (const char *[]){"msg-d1", "msg-d2", "msg-d3", "msg-d4", NULL}; *m;
       m++)
    assert_int_equal(claim(t, &tr, *m, "alice", false), 0);

  decide(t, &tr, "msg-d1", "--replay", "scope confirmed with the DPO", 0);
  decide(t, &tr, "msg-d2", "--resolve", "erased by hand, ticket 4711", 0);
  decide(t, &tr, "msg-d3", "--return", NULL, 0);
  decide(t, &tr, "msg-d4", "--replay", NULL, 0);
  decide(t, &tr, "msg-d2", "--resolve", "again", 1); /* gone */
  assert_int_equal(th_queue_depth(t->conn, "compliance_review"), 0);

  th_msg *m = fx_msg(t);
  assert_int_equal(th_get(t->conn, "dsr.work", m), 1);
  FX_HDR_STR_EQ(m, "request_id", "d1");
  FX_HDR_INT_EQ(m, "attempt", 0);
  FX_HDR_INT_EQ(m, "replay_count", 1);
  FX_HDR_STR_EQ(m, "replayed_by", "alice");
  assert_null(th_msg_find(m, "owner"));
  assert_null(th_msg_find(m, "escalated_by"));
  assert_null(th_msg_find(m, "last_error"));
  assert_int_equal(th_get(t->conn, "dsr.work", m), 0); /* d4 was not replayed */
  assert_int_equal(th_get(t->conn, "dsr.dlq.manual", m), 1);
  FX_HDR_STR_EQ(m, "request_id", "d3");
  FX_HDR_STR_EQ(m, "dlq_reason", "max_attempts"); /* kept */
  assert_null(th_msg_find(m, "owner"));
  assert_null(th_msg_find(m, "escalation_note"));
  /* A fresh SLA clock. */
  const char *at = th_msg_str(m, "dlq_at");
  assert_non_null(at);
  char now[48];
  th_iso_time(th_now_ms() - 60000, now, sizeof now);
  assert_true(strcmp(at, now) > 0);

  assert_int_equal(count_records(&tr.a, "\"event\":\"skipped_complete\"", "msg-d4"), 1);
  static const char *const show[] = {"audit", "show", "--request-id", "d1", NULL};
  th_result r;
  run(t, &tr, show, &r);
  assert_int_equal(r.exit_code, 0);
  const char *story[] = {"escalated",
                         "dsr.dlq.manual -> compliance_review",
                         "reason \"subject disputes the erasure scope\"",
                         "by olga",
                         "claimed",
                         "compliance_review -> compliance_review",
                         "by alice",
                         "decided_replay",
                         "compliance_review -> dsr.work",
                         "reason \"scope confirmed with the DPO\"",
                         "by alice"};
  const char *p = r.out;
  for (size_t i = 0; i < sizeof story / sizeof story[0]; i++) {
    p = strstr(p, story[i]);
    if (p == NULL) fail_msg("audit show lacks '%s' in order", story[i]);
    p += strlen(story[i]);
  }
  static const char *const show2[] = {"audit", "show", "--request-id", "d2", NULL};
  run(t, &tr, show2, &r);
  assert_non_null(strstr(r.out, "decided_resolve  removed from compliance_review"));
  assert_non_null(strstr(r.out, "reason \"erased by hand, ticket 4711\""));
  assert_int_equal(fx_audit_verify(&tr.a, &r), 0);
  assert_int_equal(r.exit_code, 0);
  fx_audit_remove(&tr.a);
}

/* SIGKILL at every moment of a decision, by a ladder of deadlines: the item
 * is never lost, and the trail says which copy counts. A decided_replay
 * record means the copy in dsr.work was confirmed (a review copy left
 * beside it is the interrupted ack's); no record means the review copy
 * counts (a dsr.work copy beside it was never confirmed). Counted once
 * every step is done: a copy published just before a kill may be routed
 * after it. */
#define STEPS 24

typedef struct {
  fx_case *t;
  long want;
} depth_at_least;

static bool review_back(void *arg) {
  depth_at_least *d = arg;
  return th_queue_depth(d->t->conn, "compliance_review") >= d->want;
}

static void drain_count(fx_case *t, const char *queue, th_msg *m, int *per_step) {
  int got;
  while ((got = th_get(t->conn, queue, m)) == 1) {
    const char *id = th_msg_str(m, "request_id");
    assert_non_null(id);
    assert_true(id[0] == 'k');
    int step = atoi(id + 1);
    assert_true(step >= 0 && step < STEPS);
    per_step[step]++;
  }
  assert_int_equal(got, 0);
}

/* 1 ms to 116 ms, then all the time it needs: the first is killed before
 * it connects, the last finishes, on any machine. */
static int deadline(int step) { return step == STEPS - 1 ? CMD_TIMEOUT_MS : 1 + step * 5; }

static void test_decision_sigkill_loses_nothing(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init(&tr);
  declare(t, &tr);
  int exit_code[STEPS], recorded[STEPS], in_work[STEPS] = {0}, in_review[STEPS] = {0};
  for (int step = 0; step < STEPS; step++) {
    char id[32], msg_id[40];
    snprintf(id, sizeof id, "k%d", step);
    snprintf(msg_id, sizeof msg_id, "msg-k%d", step);
    escalate_ids(t, &tr, (const char *[]){id, NULL});
    assert_int_equal(claim(t, &tr, msg_id, "alice", false), 0);
    const char *args[] = {"review",   "decide",  "--message-id", msg_id,
                          "--replay", "--actor", "alice",        NULL};
    th_result r;
    assert_int_equal(th_run_bridge(args, t->vhost.url, tr.env, deadline(step), &r), 0);
    exit_code[step] = r.exit_code;
    if (r.exit_code != -1 && r.exit_code != 0) fail_msg("decide exited %d: %s", r.exit_code, r.err);
  }
  /* The killed processes' unacked review copies return as the broker sees
   * their sockets close. */
  long unrecorded = 0;
  for (int step = 0; step < STEPS; step++) {
    char mid[48];
    snprintf(mid, sizeof mid, "\"message_id\":\"msg-k%d\"", step);
    recorded[step] = count_records(&tr.a, "\"event\":\"decided_replay\"", mid);
    if (recorded[step] == 0) unrecorded++;
  }
  depth_at_least d = {t, unrecorded};
  FX_CHECK(t, th_wait_until(review_back, &d, 10000));
  th_msg *m = fx_msg(t);
  drain_count(t, "dsr.work", m, in_work);
  drain_count(t, "compliance_review", m, in_review);
  int killed = 0, finished = 0, both = 0;
  for (int step = 0; step < STEPS; step++) {
    printf("deadline %d ms: exit %d, work %d, review %d, recorded %d\n", deadline(step),
           exit_code[step], in_work[step], in_review[step], recorded[step]);
    if (exit_code[step] == -1) killed++;
    else finished++;
    assert_true(in_work[step] + in_review[step] >= 1); /* never lost */
    assert_true(in_work[step] <= 1 && in_review[step] <= 1);
    if (recorded[step] > 0) assert_int_equal(in_work[step], 1);
    else assert_int_equal(in_review[step], 1);
    /* Every copy the broker took is in the trail: its intent came first. */
    char mid[48];
    snprintf(mid, sizeof mid, "\"message_id\":\"msg-k%d\"", step);
    if (in_work[step] == 1 && count_records(&tr.a, "\"event\":\"move_started\"", mid) == 0)
      fail_msg("step %d: a copy in dsr.work with nothing in the trail", step);
    if (exit_code[step] == 0) assert_true(recorded[step] == 1 && in_review[step] == 0);
    if (in_work[step] && in_review[step]) both++;
  }
  printf("sigkill ladder: %d killed, %d finished, %d in both places\n", killed, finished, both);
  assert_true(killed > 0 && finished > 0); /* the ladder spans the decision */
  fx_audit_remove(&tr.a);
}

/* An item acked away in the management UI (a basic.get with auto-ack) is
 * named MISSING in compliance_review; a claim's re-publish is not counted
 * as a copy; and a decided item is not expected there any more. */
static void test_reconcile_names_review_item_acked_away(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init(&tr);
  declare(t, &tr);
  escalate_ids(t, &tr, (const char *[]){"r1", "r2", "r3", NULL});
  assert_int_equal(claim(t, &tr, "msg-r2", "alice", false), 0);
  decide(t, &tr, "msg-r3", "--resolve", "done by hand", 1); /* not hers */
  assert_int_equal(claim(t, &tr, "msg-r3", "alice", false), 0);
  decide(t, &tr, "msg-r3", "--resolve", "done by hand", 0);
  static const char *const rec[] = {"audit", "reconcile", NULL};
  static const char *const rec_json[] = {"audit", "reconcile", "--json", NULL};
  th_result r;
  run(t, &tr, rec, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "compliance_review read at"));
  assert_non_null(strstr(r.out, "the audit trail puts 2 messages in compliance_review; missing 0"));

  th_msg *m = fx_msg(t);
  assert_int_equal(th_get(t->conn, "compliance_review", m), 1); /* behind its back */
  FX_HDR_STR_EQ(m, "request_id", "r1");
  run(t, &tr, rec, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.out, "MISSING     msg-r1  request_id r1  escalated at"));
  assert_non_null(strstr(r.out, "in compliance_review"));
  assert_null(strstr(r.out, "msg-r2"));
  assert_null(strstr(r.out, "msg-r3"));
  run(t, &tr, rec_json, &r);
  assert_int_equal(r.exit_code, 1);
  json_object *doc = json_tokener_parse(r.out), *rv, *missing;
  assert_non_null(doc);
  assert_true(json_object_object_get_ex(doc, "compliance_review", &rv));
  assert_true(json_object_object_get_ex(rv, "missing", &missing));
  assert_int_equal(json_object_array_length(missing), 1);
  assert_string_equal(th_json_str(json_object_array_get_idx(missing, 0), "message_id"), "msg-r1");
  assert_true(json_object_object_get_ex(doc, "missing", &missing)); /* the DLQ's */
  assert_int_equal(json_object_array_length(missing), 0);
  json_object_put(doc);
  assert_int_equal(th_queue_depth(t->conn, "compliance_review"), 1); /* moved nothing */
  fx_audit_remove(&tr.a);
}

/* The value of series in the bridge's /metrics on port, or -1. */
static double metric(int port, const char *series) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "curl -s --max-time 5 'http://127.0.0.1:%d/metrics'", port);
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  char line[1024];
  double v = -1;
  size_t n = strlen(series);
  while (fgets(line, sizeof line, p) != NULL)
    if (strncmp(line, series, n) == 0 && line[n] == ' ') v = strtod(line + n + 1, NULL);
  pclose(p);
  return v;
}

typedef struct {
  int port;
  double unclaimed, claimed;
} gauges_want;

static bool gauges_are(void *arg) {
  gauges_want *w = arg;
  return metric(w->port, "dlq_bridge_review_items{state=\"unclaimed\"}") == w->unclaimed &&
         metric(w->port, "dlq_bridge_review_items{state=\"claimed\"}") == w->claimed;
}

/* The daemon's review gauges follow claims and decisions, and its pass
 * moves nothing. */
static void test_review_gauges(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init(&tr);
  int port = th_free_port();
  char addr[64];
  snprintf(addr, sizeof addr, "DLQ_BRIDGE_METRICS_ADDR=127.0.0.1:%d", port);
  const char *const env[] = {addr, NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  escalate_ids(t, &tr, (const char *[]){"g1", "g2", "g3", NULL});
  gauges_want w = {port, 3, 0};
  FX_CHECK(t, th_wait_until(gauges_are, &w, 30000));
  assert_true(metric(port, "dlq_bridge_review_oldest_age_seconds{state=\"unclaimed\"}") >= 0);
  assert_int_equal(claim(t, &tr, "msg-g2", "alice", false), 0);
  w = (gauges_want){port, 2, 1};
  FX_CHECK(t, th_wait_until(gauges_are, &w, 30000));
  assert_true(metric(port, "dlq_bridge_review_oldest_age_seconds{state=\"claimed\"}") >= 0);
  decide(t, &tr, "msg-g2", "--return", NULL, 0);
  w = (gauges_want){port, 2, 0};
  FX_CHECK(t, th_wait_until(gauges_are, &w, 30000));
  assert_int_equal(fx_stop_bridges(t), 0);
  assert_int_equal(th_queue_depth(t->conn, "compliance_review"), 2);
  fx_audit_remove(&tr.a);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_list_claim_and_conflicts),
      FX_TEST(test_each_decision_and_the_story),
      FX_TEST(test_decision_sigkill_loses_nothing),
      FX_TEST(test_reconcile_names_review_item_acked_away),
      FX_TEST(test_review_gauges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

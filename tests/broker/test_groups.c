/* Failure groups against a real broker: a bridge fills the DLQ with
 * failures of a few causes whose texts differ in ids, numbers, UUIDs and
 * times; stats --by group shows the right groups and counts; inspect shows
 * each item's group; replay --group moves exactly that group and escalate
 * --group another, and everything else stays in the DLQ in its order.
 * And statutory deadlines: inspect's time left per legal basis, sorted by
 * urgency, a forged first_seen_at buying no time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flow.h"

#define CMD_TIMEOUT_MS 60000
#define N              11

static void run(fx_case *t, const char *const *args, th_result *r) {
  assert_int_equal(th_run_bridge(args, t->vhost.url, NULL, CMD_TIMEOUT_MS, r), 0);
  if (r->exit_code != 0)
    fprintf(stderr, "%s: exit %d, stderr: %s\n", args[0], r->exit_code, r->err);
}

static json_object *run_json(fx_case *t, const char *const *args) {
  th_result r;
  run(t, args, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *j = json_tokener_parse(r.out);
  if (j == NULL) fprintf(stderr, "not JSON: %s\n", r.out);
  assert_non_null(j);
  return j;
}

/* declare, exit 0. */
static void declare(fx_case *t) {
  static const char *const decl[] = {"declare", NULL};
  th_result r;
  run(t, decl, &r);
  assert_int_equal(r.exit_code, 0);
}

/* Task i's cause: 0, 3, 6, 9 a crm timeout (ids and times differ); 1, 4, 7
 * a lock on a row (UUIDs, hex, times differ); 2, 5, 8 a plain reject from
 * erp; 10 the timeout text again, but from erp: a group of its own. */
static char cause(int i) { return i == 10 ? 'D' : "ABC"[i % 3]; }

static const char *source(int i) { return cause(i) == 'C' || cause(i) == 'D' ? "erp" : "crm"; }

/* Fills the DLQ through a real bridge: each task fails once
 * (MAX_ATTEMPTS=1) with its cause's text. */
static void fill(fx_case *t) {
  static const char *const env[] = {"DLQ_BRIDGE_MAX_ATTEMPTS=1", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  th_worker *w = th_worker_open(&t->vhost, "dsr.work", 1);
  assert_non_null(w);
  th_msg *m = fx_msg(t), *got = fx_msg(t);
  for (int i = 0; i < N; i++) {
    char id[16];
    snprintf(id, sizeof id, "t%d", i);
    th_msg_reset(m);
    assert_int_equal(th_msg_task(m, id), 0);
    assert_int_equal(th_msg_set_str(m, "source_system", source(i)), 0);
    assert_int_equal(th_publish(t->conn, "", "dsr.work", m), 0);
    /* One at a time, so the DLQ's order is the publishing order. */
    FX_CHECK(t, th_worker_next(w, got, 10000) == 1);
    char text[160];
    switch (cause(i)) {
    case 'A':
    case 'D':
      snprintf(text, sizeof text, "crm timeout for R-2026-%04d after %dms", 1000 + i, 100 + 7 * i);
      assert_int_equal(th_worker_report(w, t->conn, got, text), 0);
      break;
    case 'B':
      snprintf(text, sizeof text,
               "row 3f2504e0-4f89-11d3-9a0c-0305e82c33%02d locked by tx 0x%08x since "
               "2026-12-01T0%d:00:00Z",
               i, 0xbeef00 + i, i);
      assert_int_equal(th_worker_report(w, t->conn, got, text), 0);
      break;
    default: assert_int_equal(th_worker_reject(w), 0);
    }
    FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", i + 1, 10000));
  }
  th_worker_close(w);
  FX_CHECK(t, fx_stop_bridges(t) == 0);
}

typedef struct {
  char id[16];
  char group[16];
} row;

/* The longest line of text, in characters. */
static size_t max_line_chars(const char *text) {
  size_t best = 0, n = 0;
  for (const char *p = text; *p != '\0'; p++) {
    if (*p == '\n') {
      n = 0;
      continue;
    }
    if (((unsigned char)*p & 0xC0u) != 0x80u) n++;
    if (n > best) best = n;
  }
  return best;
}

/* The DLQ as inspect --json lists it, in order. */
static int listing(fx_case *t, const char *const *args, row *rows, int max) {
  json_object *j = run_json(t, args), *items;
  assert_true(json_object_object_get_ex(j, "items", &items));
  int n = (int)json_object_array_length(items);
  assert_true(n <= max);
  for (int i = 0; i < n; i++) {
    json_object *it = json_object_array_get_idx(items, i);
    snprintf(rows[i].id, sizeof rows[i].id, "%s", th_json_str(it, "request_id"));
    snprintf(rows[i].group, sizeof rows[i].group, "%s", th_json_str(it, "group"));
  }
  json_object_put(j);
  return n;
}

/* The request_ids left on queue, taken off it in order. */
static int drain(fx_case *t, const char *queue, char ids[][16], int max) {
  th_msg m;
  th_msg_init(&m);
  int n = 0, got;
  while ((got = th_get(t->conn, queue, &m)) == 1) {
    assert_true(n < max);
    const char *id = th_msg_str(&m, "request_id");
    snprintf(ids[n++], 16, "%s", id ? id : "?");
  }
  th_msg_release(&m);
  assert_int_equal(got, 0);
  return n;
}

static void test_groups_stats_replay_escalate(void **state) {
  fx_case *t = *state;
  declare(t);
  th_result r;
  fill(t);

  /* inspect: each item's group; same cause, same group. */
  static const char *const insp[] = {"inspect", "--json", NULL};
  row rows[N];
  assert_int_equal(listing(t, insp, rows, N), N);
  char gid[4][16] = {{0}}; /* A B C D */
  for (int i = 0; i < N; i++) {
    char want[16];
    snprintf(want, sizeof want, "t%d", i);
    assert_string_equal(rows[i].id, want);
    assert_int_equal(strlen(rows[i].group), 12);
    int k = cause(i) - 'A';
    if (gid[k][0] == '\0') snprintf(gid[k], sizeof gid[k], "%s", rows[i].group);
    assert_string_equal(rows[i].group, gid[k]);
  }
  for (int a = 0; a < 4; a++)
    for (int b = a + 1; b < 4; b++) assert_string_not_equal(gid[a], gid[b]);

  /* stats --by group: four groups, most items first, with their counts. */
  static const char *const st[] = {"stats", "--by", "group", "--json", NULL};
  json_object *j = run_json(t, st), *groups, *other, *v;
  assert_true(json_object_object_get_ex(j, "groups", &groups));
  assert_int_equal(json_object_array_length(groups), 4);
  const int want_count[4] = {4, 3, 3, 1};
  for (int k = 0; k < 4; k++) {
    json_object *g = NULL;
    for (size_t i = 0; i < 4; i++) {
      json_object *x = json_object_array_get_idx(groups, i);
      if (strcmp(th_json_str(x, "id"), gid[k]) == 0) g = x;
    }
    assert_non_null(g);
    assert_true(json_object_object_get_ex(g, "count", &v));
    assert_int_equal(json_object_get_int(v), want_count[k]);
    assert_string_equal(th_json_str(g, "dlq_reason"), "max_attempts");
    assert_true(json_object_object_get_ex(g, "oldest_age_seconds", &v));
    assert_true(json_object_is_type(v, json_type_int));
  }
  json_object *first = json_object_array_get_idx(groups, 0);
  assert_string_equal(th_json_str(first, "id"), gid[0]);
  assert_string_equal(th_json_str(first, "template"),
                      "worker error: crm timeout for <id> after <n>ms");
  assert_string_equal(th_json_str(first, "sample"),
                      "worker error: crm timeout for R-2026-1000 after 100ms");
  assert_string_equal(th_json_str(first, "source_system"), "crm");
  assert_true(json_object_object_get_ex(j, "other", &other));
  assert_true(json_object_object_get_ex(other, "count", &v));
  assert_int_equal(json_object_get_int(v), 0);
  json_object_put(j);

  /* The text form shows the same ids and the templates. */
  static const char *const st_text[] = {"stats", "--by", "group", NULL};
  run(t, st_text, &r);
  assert_int_equal(r.exit_code, 0);
  for (int k = 0; k < 4; k++) assert_non_null(strstr(r.out, gid[k]));
  assert_non_null(strstr(r.out, "row <uuid> locked by tx <hex> since <time>"));
  /* On an 80-column terminal every line fits, cut with an ellipsis. */
  static const char *const cols80[] = {"COLUMNS=80", NULL};
  assert_int_equal(th_run_bridge(st_text, t->vhost.url, cols80, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_true(max_line_chars(r.out) <= 80);
  assert_non_null(strstr(r.out, "\xe2\x80\xa6"));
  /* Nothing moved. */
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), N);

  /* A cap of 2: two groups, the rest counted as other, and said so. */
  static const char *const capped[] = {"stats", "--by", "group", "--max-groups", "2", NULL};
  run(t, capped, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "other"));
  assert_non_null(strstr(r.err, "counted as 'other'"));

  /* inspect --group: that group only, in queue order. */
  const char *ig[] = {"inspect", "--json", "--group", gid[1], NULL};
  assert_int_equal(listing(t, ig, rows, N), 3);
  assert_string_equal(rows[0].id, "t1");
  assert_string_equal(rows[2].id, "t7");

  /* replay --group A: exactly t0 t3 t6 t9 move, in order. */
  const char *rp[] = {"replay", "--group", gid[0], "--actor", "tester", NULL};
  run(t, rp, &r);
  assert_int_equal(r.exit_code, 0);
  char ids[N][16];
  int n = drain(t, "dsr.work", ids, N);
  assert_int_equal(n, 4);
  assert_string_equal(ids[0], "t0");
  assert_string_equal(ids[1], "t3");
  assert_string_equal(ids[2], "t6");
  assert_string_equal(ids[3], "t9");

  /* escalate --group D (upper case works too): t10 to compliance_review. */
  char upper[16];
  for (size_t i = 0; i < sizeof upper; i++)
    upper[i] = (char)(gid[3][i] >= 'a' && gid[3][i] <= 'f' ? gid[3][i] - 32 : gid[3][i]);
  const char *es[] = {"escalate", "--group", upper,    "--note",
                      "erp team", "--actor", "tester", NULL};
  run(t, es, &r);
  assert_int_equal(r.exit_code, 0);
  n = drain(t, "compliance_review", ids, N);
  assert_int_equal(n, 1);
  assert_string_equal(ids[0], "t10");

  /* The rest stayed, in its order. */
  n = drain(t, "dsr.dlq.manual", ids, N);
  static const char *const rest[] = {"t1", "t2", "t4", "t5", "t7", "t8"};
  assert_int_equal(n, 6);
  for (int i = 0; i < 6; i++) assert_string_equal(ids[i], rest[i]);

  /* A bad id: one line, exit 2, nothing read. */
  static const char *const bad[] = {"replay", "--group", "not-an-id", NULL};
  run(t, bad, &r);
  assert_int_equal(r.exit_code, 2);
  assert_int_equal(th_count_lines(r.err), 1);
  assert_non_null(strstr(r.err, "--group"));
}

#define DAY_MS 86400000LL

/* A DLQ item as a producer and the bridge leave it; NULL times are absent. */
static void pub_item(fx_case *t, const char *id, const char *basis, const char *first_seen,
                     int64_t dlq_at_ms) {
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, id), 0);
  assert_int_equal(th_msg_set_str(&m, "legal_basis", basis), 0);
  assert_int_equal(th_msg_set_str(&m, "last_error", "rejected by worker"), 0);
  assert_int_equal(th_msg_set_str(&m, "dlq_reason", "max_attempts"), 0);
  if (first_seen != NULL) assert_int_equal(th_msg_set_str(&m, "first_seen_at", first_seen), 0);
  if (dlq_at_ms != 0) {
    char iso[48];
    th_iso_time(dlq_at_ms, iso, sizeof iso);
    assert_int_equal(th_msg_set_str(&m, "dlq_at", iso), 0);
  }
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
}

static json_object *item_deadline(json_object *item) {
  json_object *d = NULL;
  assert_true(json_object_object_get_ex(item, "deadline", &d));
  return d;
}

static int64_t left_seconds(json_object *item) {
  json_object *d = item_deadline(item), *v;
  assert_non_null(d);
  assert_true(json_object_object_get_ex(d, "left_seconds", &v));
  assert_true(json_object_is_type(v, json_type_int));
  return json_object_get_int64(v);
}

static void test_deadlines_inspect_sorted(void **state) {
  fx_case *t = *state;
  declare(t);
  th_result r;
  int64_t now = th_now_ms();
  char iso[48];
  /* in queue order:
   *   d1 GDPR, received 20 days ago: about 10 days left (one month)
   *   d2 CCPA, received 44 days ago: about 1 day left (45 days)
   *   d3 GDPR, first_seen_at forged into 9999, in the DLQ for 40 days:
   *      the forged time is skipped, dlq_at counts: overdue
   *   d4 a basis without a rule: no deadline
   *   d5 GDPR with no usable time at all: unknown */
  th_iso_time(now - 20 * DAY_MS, iso, sizeof iso);
  pub_item(t, "d1", "gdpr_art_17", iso, now - DAY_MS);
  th_iso_time(now - 44 * DAY_MS, iso, sizeof iso);
  pub_item(t, "d2", "ccpa_1798_105", iso, now - DAY_MS);
  pub_item(t, "d3", "gdpr_art_15", "9999-12-31T00:00:00Z", now - 40 * DAY_MS);
  pub_item(t, "d4", "hipaa", NULL, now - DAY_MS);
  pub_item(t, "d5", "gdpr_art_17", NULL, 0);

  static const char *const sorted[] = {"inspect", "--sort", "deadline", "--json", NULL};
  json_object *j = run_json(t, sorted), *items;
  assert_true(json_object_object_get_ex(j, "items", &items));
  assert_int_equal(json_object_array_length(items), 5);
  static const char *const order[] = {"d5", "d3", "d2", "d1", "d4"};
  for (size_t i = 0; i < 5; i++)
    assert_string_equal(th_json_str(json_object_array_get_idx(items, i), "request_id"), order[i]);
  json_object *d5 = item_deadline(json_object_array_get_idx(items, 0)), *v;
  assert_non_null(d5);
  assert_true(json_object_object_get_ex(d5, "left_seconds", &v));
  assert_null(v); /* unknown */
  int64_t d3 = left_seconds(json_object_array_get_idx(items, 1));
  int64_t d2 = left_seconds(json_object_array_get_idx(items, 2));
  int64_t d1 = left_seconds(json_object_array_get_idx(items, 3));
  assert_true(d3 < -8 * 86400);                 /* 40 days in, a month allowed */
  assert_true(d2 > 86400 - 600 && d2 <= 86400); /* 45 - 44 days */
  assert_true(d1 > 8 * 86400 && d1 < 12 * 86400);
  assert_null(item_deadline(json_object_array_get_idx(items, 4)));
  json_object_put(j);

  /* --limit with --sort: the most urgent two. */
  static const char *const top2[] = {"inspect", "--sort", "deadline", "--limit",
                                     "2",       "--json", NULL};
  j = run_json(t, top2);
  assert_true(json_object_object_get_ex(j, "items", &items));
  assert_int_equal(json_object_array_length(items), 2);
  assert_string_equal(th_json_str(json_object_array_get_idx(items, 1), "request_id"), "d3");
  json_object_put(j);

  /* Configurable: two months for GDPR, nothing for CCPA. */
  static const char *const env[] = {"DLQ_BRIDGE_DEADLINES=gdpr_*=2mo", NULL};
  assert_int_equal(th_run_bridge(sorted, t->vhost.url, env, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  j = json_tokener_parse(r.out);
  assert_non_null(j);
  assert_true(json_object_object_get_ex(j, "items", &items));
  assert_string_equal(th_json_str(json_object_array_get_idx(items, 2), "request_id"), "d1");
  assert_true(left_seconds(json_object_array_get_idx(items, 2)) > 38 * 86400);
  assert_string_equal(th_json_str(json_object_array_get_idx(items, 3), "request_id"), "d2");
  assert_null(item_deadline(json_object_array_get_idx(items, 3)));
  json_object_put(j);

  /* Text: the LEFT column, overdue with a minus, unknown '?', none '-'. */
  static const char *const text[] = {"inspect", "--sort", "deadline", "--wide", NULL};
  run(t, text, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "LEFT"));
  const char *l5 = strstr(r.out, "msg-d5"), *l3 = strstr(r.out, "msg-d3");
  assert_non_null(l5);
  assert_non_null(l3);
  assert_true(l5 < l3);
  assert_non_null(strstr(r.out, " ? "));
  assert_non_null(strstr(r.out, " -9d") != NULL ? strstr(r.out, " -9d") : strstr(r.out, " -10d"));

  /* 80 columns: LEFT stays when the table is sorted by it, and goes first
   * otherwise (before DLQ_REASON). */
  static const char *const cols80[] = {"COLUMNS=80", NULL};
  static const char *const narrow[] = {"inspect", "--sort", "deadline", NULL};
  assert_int_equal(th_run_bridge(narrow, t->vhost.url, cols80, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "AGE    LEFT    MESSAGE_ID"));
  assert_true(max_line_chars(r.out) <= 80);
  static const char *const plain[] = {"inspect", NULL};
  assert_int_equal(th_run_bridge(plain, t->vhost.url, cols80, CMD_TIMEOUT_MS, &r), 0);
  assert_null(strstr(r.out, "LEFT"));

  /* Bad values: exit 2, one line. */
  static const char *const bad[] = {"inspect", "--sort", "age", NULL};
  run(t, bad, &r);
  assert_int_equal(r.exit_code, 2);
  static const char *const bad_rule[] = {"inspect", "--deadlines", "gdpr_*=1y", NULL};
  run(t, bad_rule, &r);
  assert_int_equal(r.exit_code, 2);
  assert_int_equal(th_count_lines(r.err), 1);
  /* Nothing moved. */
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 5);
}

/* Every header is attacker-controlled: a last_error with a terminal escape,
 * markup and invalid UTF-8, a source_system with a control character. The
 * group table shows them as text, one line each, and JSON stays JSON. */
static void test_groups_hostile_text(void **state) {
  fx_case *t = *state;
  declare(t);
  th_result r;
  for (int i = 0; i < 3; i++) {
    th_msg m;
    th_msg_init(&m);
    char id[16], err[128];
    snprintf(id, sizeof id, "h%d", i);
    snprintf(err, sizeof err, "\x1b[2J<script>alert(%d)</script> \xff\xfe\nnext line", i);
    assert_int_equal(th_msg_task(&m, id), 0);
    assert_int_equal(th_msg_set_str(&m, "source_system", "evil\x07src"), 0);
    assert_int_equal(th_msg_set_str(&m, "last_error", err), 0);
    assert_int_equal(th_msg_set_str(&m, "dlq_reason", "max_attempts"), 0);
    assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
    th_msg_release(&m);
  }
  static const char *const st[] = {"stats", "--by", "group", NULL};
  run(t, st, &r);
  assert_int_equal(r.exit_code, 0);
  assert_null(strchr(r.out, '\x1b'));
  assert_null(strchr(r.out, '\x07'));
  assert_null(strstr(r.out, "\xff"));
  /* one group: the three differ only in a number */
  assert_non_null(strstr(r.out, "(1 group, 3 items)"));
  assert_non_null(strstr(r.out, "<script>alert(<n>)</script>"));
  assert_null(strstr(r.out, "\nnext line"));
  static const char *const sj[] = {"stats", "--by", "group", "--json", NULL};
  json_object *j = run_json(t, sj), *groups;
  assert_true(json_object_object_get_ex(j, "groups", &groups));
  assert_int_equal(json_object_array_length(groups), 1);
  json_object *g = json_object_array_get_idx(groups, 0);
  assert_string_equal(th_json_str(g, "source_system"), "evil?src");
  assert_null(strchr(th_json_str(g, "sample"), '\x1b'));
  json_object_put(j);
}

/* A DLQ item as the bridge leaves it (message_id msg-<id>), from source
 * (NULL: th_msg_task's), with this dlq_reason and last_error. */
static void pub_dead_from(fx_case *t, const char *id, const char *source, const char *reason,
                          const char *last_error) {
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, id), 0);
  if (source != NULL) assert_int_equal(th_msg_set_str(&m, "source_system", source), 0);
  assert_int_equal(th_msg_add_str(&m, "dlq_reason", reason), 0);
  assert_int_equal(th_msg_add_str(&m, "last_error", last_error), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
}

static void pub_dead(fx_case *t, const char *id, const char *reason) {
  pub_dead_from(t, id, NULL, reason, "rejected by worker");
}

/* Issue 42: where the runbook has a warning, replay says it. A replay of
 * invalid envelopes cannot help (the producer's bug); poison is replayed
 * one at a time. The dry run lists them and says so on stderr; a plain
 * max_attempts selection gets no warning. */
static void test_replay_warns_of_invalid_and_poison(void **state) {
  fx_case *t = *state;
  declare(t);
  th_result r;
  pub_dead(t, "inv-1", "invalid_envelope");
  pub_dead(t, "inv-2", "invalid_envelope");
  pub_dead(t, "poi-1", "poison");
  pub_dead(t, "max-1", "max_attempts");
  assert_true(th_wait_depth(t->conn, "dsr.dlq.manual", 4, 5000));
  static const char *const dry[] = {"replay", "--all", "--dry-run", NULL};
  run(t, dry, &r);
  printf("replay --all --dry-run:\n%s%s", r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "would replay 4"));
  assert_non_null(strstr(r.err, "2 are invalid_envelope: replaying cannot help"));
  assert_non_null(strstr(r.err, "1 is poison (crashed a worker): replay one at a time"));
  /* Each line of the warnings fits 80 columns. */
  const char *const parts[] = {"are invalid_envelope", "re-submit the task", "is poison",
                               "(--limit 1)"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    const char *at = strstr(r.err, parts[i]);
    assert_non_null(at);
    const char *begin = at;
    while (begin > r.err && begin[-1] != '\n') begin--;
    assert_true(strcspn(begin, "\n") <= 80);
  }
  static const char *const only_max[] = {"replay", "--request-id", "max-1", "--dry-run", NULL};
  run(t, only_max, &r);
  assert_int_equal(r.exit_code, 0);
  assert_null(strstr(r.err, "invalid_envelope"));
  assert_null(strstr(r.err, "poison"));
}

/* Issue 42: at 80 columns inspect showed MESSAGE_ID and REQUEST_ID cut
 * from the left ("…erp-2026-01"), and the id is what the operator types
 * next. Now every id is whole and no line is wider than 80 (SOURCE as wide
 * as its rows need, LAST_ERROR cut); the same at 120 fits 120. */
static void test_inspect_ids_whole_at_80_columns(void **state) {
  fx_case *t = *state;
  declare(t);
  th_result r;
  for (int i = 0; i < 3; i++) {
    char id[64];
    snprintf(id, sizeof id, "DSR-erp-2026-01-00004%d", i);
    pub_dead_from(t, id, "erp", "max_attempts",
                  "worker error: upstream 503 from erp-gateway after 30s");
  }
  assert_true(th_wait_depth(t->conn, "dsr.dlq.manual", 3, 5000));
  static const char *const insp[] = {"inspect", "--limit", "20", NULL};
  static const char *const cols80[] = {"COLUMNS=80", NULL};
  static const char *const cols120[] = {"COLUMNS=120", NULL};
  const char *const *widths[] = {cols80, cols120};
  for (int w = 0; w < 2; w++) {
    assert_int_equal(th_run_bridge(insp, t->vhost.url, widths[w], CMD_TIMEOUT_MS, &r), 0);
    printf("inspect at %s:\n%s", widths[w][0], r.out);
    assert_int_equal(r.exit_code, 0);
    assert_true(max_line_chars(r.out) <= (w == 0 ? 80u : 120u));
    for (int i = 0; i < 3; i++) {
      char id[64];
      snprintf(id, sizeof id, " msg-DSR-erp-2026-01-00004%d DSR-erp-2026-01-00004%d ", i, i);
      assert_non_null(strstr(r.out, id));
    }
  }
  /* At 120 the error is whole beside them. */
  assert_non_null(strstr(r.out, "upstream 503 from erp-gateway after 30s\n"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      FX_TEST(test_groups_stats_replay_escalate),
      FX_TEST(test_deadlines_inspect_sorted),
      FX_TEST(test_groups_hostile_text),
      FX_TEST(test_replay_warns_of_invalid_and_poison),
      FX_TEST(test_inspect_ids_whole_at_80_columns),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

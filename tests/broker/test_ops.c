/* The ops commands against a real broker: replay (every filter, the
 * completion ledger and who may write it, --limit, --rate, SIGKILL
 * midway), escalate, inspect
 * (the DLQ exactly as it was, and whole behind a broker slow to deliver),
 * stats, resolve, and ops while the daemon routes, including its own SLA
 * and max_replays escalations (also behind a slow broker). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flow.h"

#define CMD_TIMEOUT_MS 60000
#define MAX_IDS        4000
#define HOUR_MS        3600000LL

typedef struct {
  char id[64];
} id_t_;

/* Runs `dlq-bridge args...` on t's vhost; asserts it ran. */
static void run(fx_case *t, const char *const *args, const char *const *env, th_result *r) {
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, CMD_TIMEOUT_MS, r), 0);
  if (r->exit_code != 0)
    fprintf(stderr, "%s: exit %d, stderr: %s\n", args[0], r->exit_code, r->err);
}

static void declare(fx_case *t) {
  static const char *const args[] = {"declare", NULL};
  th_result r;
  run(t, args, NULL, &r);
  assert_int_equal(r.exit_code, 0);
}

/* Publishes a DLQ item as the bridge leaves it. */
static void pub_dlq(fx_case *t, const char *id, const char *src, const char *basis,
                    const char *last_error, int64_t dlq_at_ms) {
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, id), 0);
  char iso[48];
  th_iso_time(dlq_at_ms, iso, sizeof iso);
  assert_int_equal(th_msg_set_str(&m, "source_system", src), 0);
  assert_int_equal(th_msg_set_str(&m, "legal_basis", basis), 0);
  assert_int_equal(th_msg_set_int(&m, "attempt", 5), 0);
  assert_int_equal(th_msg_set_int(&m, "max_attempts", 5), 0);
  assert_int_equal(th_msg_set_str(&m, "first_seen_at", "2026-01-01T00:00:00Z"), 0);
  assert_int_equal(th_msg_set_str(&m, "last_error", last_error), 0);
  assert_int_equal(th_msg_set_str(&m, "dlq_reason", "max_attempts"), 0);
  assert_int_equal(th_msg_set_str(&m, "dlq_at", iso), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
}

static void pub_simple(fx_case *t, const char *id) {
  pub_dlq(t, id, "crm", "gdpr_art_17", "rejected by worker", th_now_ms() - HOUR_MS);
}

/* The completion writer these tests configure: the harness's own user. */
#define WRITER      "guest"
#define ENV_WRITERS "DLQ_BRIDGE_COMPLETION_WRITERS=" WRITER
static const char *const writers_env[] = {ENV_WRITERS, NULL};

/* Appends a completion to the ledger over conn, with the AMQP user_id
 * property set to as (NULL: none). -1 when the broker refuses it. */
static int pub_completion(th_conn *conn, const char *id, const char *src, const char *as) {
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_add_str(&m, "request_id", id), 0);
  assert_int_equal(th_msg_add_str(&m, "source_system", src), 0);
  if (as != NULL) snprintf(m.user_id, sizeof m.user_id, "%s", as);
  int rc = th_publish(conn, "", "dsr.completed", &m);
  th_msg_release(&m);
  return rc;
}

/* A completion as a worker records it (docs/worker-guide.md): user_id is
 * its own broker user, which the broker checks. */
static void pub_completed(fx_case *t, const char *id, const char *src) {
  assert_int_equal(pub_completion(t->conn, id, src, WRITER), 0);
}

/* Takes every message off queue, recording request_ids in order. */
static int drain(fx_case *t, const char *queue, id_t_ *ids, int max) {
  th_msg m;
  th_msg_init(&m);
  int n = 0, got;
  while ((got = th_get(t->conn, queue, &m)) == 1) {
    const char *id = th_msg_str(&m, "request_id");
    if (n < max) snprintf(ids[n].id, sizeof ids[n].id, "%s", id ? id : "?");
    n++;
  }
  th_msg_release(&m);
  assert_true(got == 0);
  return n;
}

static void expect_ids(const id_t_ *ids, int n, const char *const *want) {
  int i = 0;
  for (; want[i] != NULL; i++) {
    if (i >= n) fail_msg("only %d ids, expected %s next", n, want[i]);
    if (strcmp(ids[i].id, want[i]) != 0)
      fail_msg("id %d is %s, expected %s", i, ids[i].id, want[i]);
  }
  assert_int_equal(n, i);
}

/* A fixed DLQ for the filter tests, in this order:
 *   a1 crm     gdpr_art_17   "rejected by worker: upstream 503"  3h old
 *   b1 billing ccpa_1798_105 "poison: repeated consumer crash"    10m old
 *   a2 crm     gdpr_art_15   "worker error: timeout"              2d old
 *   b2 billing gdpr_art_17   "rejected by worker: upstream 503"  30m old */
static void fill_fixed(fx_case *t) {
  int64_t now = th_now_ms();
  pub_dlq(t, "a1", "crm", "gdpr_art_17", "rejected by worker: upstream 503", now - 3 * HOUR_MS);
  pub_dlq(t, "b1", "billing", "ccpa_1798_105", "poison: repeated consumer crash", now - 600000);
  pub_dlq(t, "a2", "crm", "gdpr_art_15", "worker error: timeout", now - 48 * HOUR_MS);
  pub_dlq(t, "b2", "billing", "gdpr_art_17", "rejected by worker: upstream 503", now - 1800000);
}

/* Runs replay with one filter on the fixed DLQ (with env, the audit
 * trail's) and checks what moved and what stayed (in order). */
static void replay_filter_case(fx_case *t, const char *const *env, const char *flag,
                               const char *value, const char *const *moved,
                               const char *const *stayed) {
  fill_fixed(t);
  const char *args[] = {"replay", flag, value, "--actor", "tester", NULL};
  th_result r;
  run(t, args, env, &r);
  assert_int_equal(r.exit_code, 0);
  id_t_ ids[16];
  int n = drain(t, "dsr.work", ids, 16);
  expect_ids(ids, n, moved);
  n = drain(t, "dsr.dlq.manual", ids, 16);
  expect_ids(ids, n, stayed);
}

/* With the audit trail on, so that held (unselected) items and the
 * writer's tickets meet: only the moved items are recorded, each once. */
static void test_replay_each_filter(void **state) {
  fx_case *t = *state;
  declare(t);
  fx_audit audit;
  assert_int_equal(fx_audit_init(&audit), 0);
  const char *const env[] = {audit.env_log, audit.env_key, NULL};
  replay_filter_case(t, env, "--request-id", "b1", (const char *[]){"b1", NULL},
                     (const char *[]){"a1", "a2", "b2", NULL});
  replay_filter_case(t, env, "--source-system", "crm", (const char *[]){"a1", "a2", NULL},
                     (const char *[]){"b1", "b2", NULL});
  replay_filter_case(t, env, "--legal-basis", "gdpr_art_17", (const char *[]){"a1", "b2", NULL},
                     (const char *[]){"b1", "a2", NULL});
  replay_filter_case(t, env, "--reason", "upstream 503", (const char *[]){"a1", "b2", NULL},
                     (const char *[]){"b1", "a2", NULL});
  replay_filter_case(t, env, "--older-than", "1h", (const char *[]){"a1", "a2", NULL},
                     (const char *[]){"b1", "b2", NULL});
  replay_filter_case(t, env, "--newer-than", "1h", (const char *[]){"b1", "b2", NULL},
                     (const char *[]){"a1", "a2", NULL});
  /* 1 + 2 + 2 + 2 + 2 + 2 moves, by six writers, each ended cleanly. */
  assert_int_equal(fx_count_in_file(audit.log, "\"event\":\"replayed\""), 11);
  assert_int_equal(fx_count_in_file(audit.log, "\"event\":\"chain_end\""), 6);
  th_result v;
  assert_int_equal(fx_audit_verify(&audit, &v), 0);
  printf("audit verify: exit %d\n%s%s", v.exit_code, v.out, v.err);
  assert_int_equal(v.exit_code, 0);
  fx_audit_remove(&audit);
}

static void test_replay_rewrites_envelope(void **state) {
  fx_case *t = *state;
  declare(t);
  pub_simple(t, "r1");
  static const char *const args[] = {"replay", "--all", "--actor", "alice", "--json", NULL};
  th_result r;
  run(t, args, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *j = json_tokener_parse(r.out);
  assert_non_null(j);
  json_object *v;
  assert_true(json_object_object_get_ex(j, "replayed", &v));
  assert_int_equal(json_object_get_int(v), 1);
  json_object_put(j);

  th_msg m;
  th_msg_init(&m);
  assert_int_equal(fx_take(t, "dsr.work", &m, 5000), 1);
  FX_HDR_INT_EQ(&m, "attempt", 0);
  FX_HDR_INT_EQ(&m, "replay_count", 1);
  FX_HDR_STR_EQ(&m, "first_seen_at", "2026-01-01T00:00:00Z");
  FX_HDR_STR_EQ(&m, "replayed_by", "alice");
  assert_null(th_msg_find(&m, "last_error"));
  assert_null(th_msg_find(&m, "dlq_reason"));
  assert_null(th_msg_find(&m, "dlq_at"));
  assert_string_equal(m.message_id, "msg-r1");
  assert_int_equal(m.delivery_mode, 2);
  th_msg_release(&m);

  /* A second replay of the same task counts on. */
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "r2"), 0);
  assert_int_equal(th_msg_set_int(&m, "replay_count", 1), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
  run(t, args, NULL, &r);
  th_msg_init(&m);
  assert_int_equal(fx_take(t, "dsr.work", &m, 5000), 1);
  FX_HDR_INT_EQ(&m, "replay_count", 2);
  th_msg_release(&m);
}

/* replay --note: the replayed hop's reason in the trail is the note (the
 * fix, the ticket), not the old error; without it, the old error. */
static void test_replay_note_is_the_reason(void **state) {
  fx_case *t = *state;
  declare(t);
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  const char *const env[] = {a.env_log, a.env_key, NULL};
  pub_simple(t, "n1");
  pub_simple(t, "n2");
  static const char *const noted[] = {
      "replay", "--request-id", "n1", "--note", "fixed upstream, INC-4711", NULL};
  static const char *const plain[] = {"replay", "--request-id", "n2", NULL};
  th_result r;
  run(t, noted, env, &r);
  assert_int_equal(r.exit_code, 0);
  run(t, plain, env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(fx_count_in_file(a.log, "\"reason\":\"fixed upstream, INC-4711\""), 1);
  assert_int_equal(fx_count_in_file(a.log, "\"event\":\"replayed\""), 2);
  assert_int_equal(fx_count_in_file(a.log, "\"reason\":\"rejected by worker\""), 1);
  static const char *const empty[] = {"replay", "--all", "--note", "", NULL};
  run(t, empty, env, &r);
  assert_int_equal(r.exit_code, 2);
  fx_audit_remove(&a);
}

static void test_replay_usage_and_dry_run(void **state) {
  fx_case *t = *state;
  declare(t);
  fill_fixed(t);
  th_result r;
  static const char *const none[] = {"replay", NULL};
  run(t, none, NULL, &r);
  assert_int_equal(r.exit_code, 2);
  assert_int_equal(th_count_lines(r.err), 1);
  static const char *const bad[] = {"replay", "--older-than", "5x", NULL};
  run(t, bad, NULL, &r);
  assert_int_equal(r.exit_code, 2);
  static const char *const limit_only[] = {"replay", "--limit", "3", NULL};
  run(t, limit_only, NULL, &r); /* a limit alone selects nothing */
  assert_int_equal(r.exit_code, 2);
  static const char *const help[] = {"replay", "--help", NULL};
  run(t, help, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "--dry-run"));

  static const char *const dry[] = {"replay", "--all", "--dry-run", NULL};
  run(t, dry, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "dry run: would replay 4, would skip as complete 0, would leave 0 "
                                "of 4\n"));
  assert_non_null(strstr(r.out, "\nreplay ")); /* the WOULD column, future tense */
  assert_null(strstr(r.out, "replayed"));
  static const char *const dry_limit[] = {"replay", "--all", "--limit", "3", "--dry-run", NULL};
  run(t, dry_limit, NULL, &r);
  assert_non_null(strstr(r.out, "would replay 3, would skip as complete 0, would leave 1 of 4"));
  id_t_ ids[16];
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  int n = drain(t, "dsr.dlq.manual", ids, 16);
  expect_ids(ids, n, (const char *[]){"a1", "b1", "a2", "b2", NULL});
}

static void test_replay_limit(void **state) {
  fx_case *t = *state;
  declare(t);
  fill_fixed(t);
  static const char *const args[] = {"replay", "--source-system", "billing", "--limit", "1", NULL};
  th_result r;
  run(t, args, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  id_t_ ids[16];
  int n = drain(t, "dsr.work", ids, 16);
  expect_ids(ids, n, (const char *[]){"b1", NULL});
  n = drain(t, "dsr.dlq.manual", ids, 16);
  expect_ids(ids, n, (const char *[]){"a1", "a2", "b2", NULL});
}

static void test_replay_skips_completed(void **state) {
  fx_case *t = *state;
  declare(t);
  for (int i = 0; i < 10; i++) {
    char id[16];
    snprintf(id, sizeof id, "c%d", i);
    pub_simple(t, id);
    if (i % 3 == 0) pub_completed(t, id, "crm");
  }
  pub_completed(t, "c1", "another-system"); /* same request, other system: not done */
  th_result r;
  /* A dry run writes nothing (not even the ledger's end marker), so a user
   * who may only read runs it (issue 19). */
  const th_env *e = th_env_get();
  char user[TH_NAME_MAX + 8], path[TH_PATH_MAX], env_url[TH_URL_MAX + 96];
  assert_true(th_fmt(user, sizeof user, "%s-ro", t->vhost.name));
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", user));
  int st = th_mgmt("PUT", path, "{\"password\":\"ro-pw\",\"tags\":\"\"}", NULL);
  assert_true(st == 201 || st == 204);
  assert_true(th_fmt(path, sizeof path, "/api/permissions/%s/%s", t->vhost.name, user));
  st = th_mgmt("PUT", path, "{\"configure\":\"^$\",\"write\":\"^$\",\"read\":\".*\"}", NULL);
  assert_true(st == 201 || st == 204);
  assert_true(th_fmt(env_url, sizeof env_url, "DLQ_BRIDGE_URL=amqp://%s:ro-pw@127.0.0.1:%d/%s",
                     user, e->amqp_port, t->vhost.name));
  const char *const ro_env[] = {env_url, writers_env[0], NULL};
  static const char *const dry[] = {"replay", "--all", "--dry-run", NULL};
  assert_int_equal(th_run_bridge(dry, NULL, ro_env, CMD_TIMEOUT_MS, &r), 0);
  printf("read-only dry run: exit %d: %s%s", r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "dry run: would replay 6, would skip as complete 4, would leave 0 "
                                "of 10\n"));
  /* The same user cannot replay for real: that appends the marker. */
  static const char *const real[] = {"replay", "--all", NULL};
  assert_int_equal(th_run_bridge(real, NULL, ro_env, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 10);
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", user));
  th_mgmt("DELETE", path, NULL, NULL);

  static const char *const args[] = {"replay", "--all", NULL};
  run(t, args, writers_env, &r);
  assert_int_equal(r.exit_code, 0);
  printf("replay: %s", r.out);
  assert_non_null(strstr(r.out, "replayed 6, skipped as complete 4, left 0 of 10"));
  id_t_ ids[16];
  int n = drain(t, "dsr.work", ids, 16);
  expect_ids(ids, n, (const char *[]){"c1", "c2", "c4", "c5", "c7", "c8", NULL});
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);

  /* --limit counts what is replayed, not what is skipped as complete:
   * c0 and c3 are complete, so --limit 2 replays c1 and c2. */
  for (int i = 0; i < 5; i++) {
    char id[16];
    snprintf(id, sizeof id, "c%d", i);
    pub_simple(t, id);
  }
  static const char *const dry2[] = {"replay", "--all", "--limit", "2", "--dry-run", NULL};
  run(t, dry2, writers_env, &r);
  printf("replay --limit 2 --dry-run: %s", r.out);
  assert_non_null(strstr(r.out, "dry run: would replay 2, would skip as complete 1, would leave 2 "
                                "of 5\n"));
  static const char *const lim2[] = {"replay", "--all", "--limit", "2", NULL};
  run(t, lim2, writers_env, &r);
  assert_non_null(strstr(r.out, "replayed 2, skipped as complete 1, left 2 of 5"));
  n = drain(t, "dsr.work", ids, 16);
  expect_ids(ids, n, (const char *[]){"c1", "c2", NULL});
  n = drain(t, "dsr.dlq.manual", ids, 16);
  expect_ids(ids, n, (const char *[]){"c3", "c4", NULL});

  /* Idempotent: replaying again (the tasks are back in the DLQ) skips the
   * completed ones again and never re-runs them. */
  pub_simple(t, "c0");
  pub_simple(t, "c1");
  run(t, args, writers_env, &r);
  assert_non_null(strstr(r.out, "replayed 1, skipped as complete 1"));
  n = drain(t, "dsr.work", ids, 16);
  expect_ids(ids, n, (const char *[]){"c1", NULL});
}

/* A member of replay's --json "ledger" object, as an integer (-1 absent). */
static long ledger_num(json_object *j, const char *key) {
  json_object *l, *v;
  if (!json_object_object_get_ex(j, "ledger", &l) || !json_object_object_get_ex(l, key, &v))
    return -1;
  return (long)json_object_get_int64(v);
}

/* Runs replay --all --json with env (the ledger cache and the writers);
 * checks how the ledger was read (cache state, entries read from the
 * stream, pairs from the cache) and what moved. A rebuilt cache must say
 * why on stderr (why_rebuilt). */
static void replay_with_cache(fx_case *t, const char *const *env, const char *cache_state,
                              long entries_read, long from_cache, long replayed, long skipped,
                              const char *why_rebuilt) {
  static const char *const args[] = {"replay", "--all", "--json", NULL};
  th_result r;
  run(t, args, env, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *j = json_tokener_parse(r.out);
  assert_non_null(j);
  json_object *l, *v;
  assert_true(json_object_object_get_ex(j, "ledger", &l));
  assert_true(json_object_object_get_ex(l, "cache", &v));
  printf("ledger: %s\n", json_object_to_json_string(l));
  assert_string_equal(json_object_get_string(v), cache_state);
  assert_true(json_object_object_get_ex(l, "cache_saved", &v) && json_object_get_boolean(v));
  assert_int_equal(ledger_num(j, "entries_read"), entries_read);
  assert_int_equal(ledger_num(j, "from_cache"), from_cache);
  assert_true(json_object_object_get_ex(j, "replayed", &v));
  assert_int_equal(json_object_get_int64(v), replayed);
  assert_true(json_object_object_get_ex(j, "skipped_complete", &v));
  assert_int_equal(json_object_get_int64(v), skipped);
  json_object_put(j);
  if (strcmp(cache_state, "rebuilt") == 0) {
    if (strstr(r.err, why_rebuilt) == NULL) fprintf(stderr, "stderr: %s", r.err);
    assert_non_null(strstr(r.err, why_rebuilt));
  }
}

/* DLQ_BRIDGE_LEDGER_CACHE: the first replay reads the whole ledger and
 * writes the cache; the next reads only the entries after its marker and
 * still knows the older completions; a stream declared again makes the
 * cache stale, and it is then read whole and never trusted. */
static void test_replay_ledger_cache(void **state) {
  fx_case *t = *state;
  declare(t);
  char dir[] = "/tmp/dlqb-ledger-cache-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char cache[96], env_cache[160];
  assert_true(th_fmt(cache, sizeof cache, "%s/ledger.cache", dir));
  assert_true(th_fmt(env_cache, sizeof env_cache, "DLQ_BRIDGE_LEDGER_CACHE=%s", cache));
  const char *const env[] = {env_cache, ENV_WRITERS, NULL};
  id_t_ ids[16];

  /* 1: no cache yet. x0 is complete. */
  pub_completed(t, "x0", "crm");
  pub_completed(t, "x1", "crm");
  pub_simple(t, "x0");
  pub_simple(t, "x2");
  replay_with_cache(t, env, "created", 2, 0, 1, 1, NULL);
  expect_ids(ids, drain(t, "dsr.work", ids, 16), (const char *[]){"x2", NULL});

  /* 2: only x3 is read from the stream; x1's completion comes from the
   * cache alone, and still keeps x1 from running again. */
  pub_completed(t, "x3", "crm");
  pub_simple(t, "x1");
  pub_simple(t, "x3");
  pub_simple(t, "x4");
  replay_with_cache(t, env, "used", 1, 2, 1, 2, NULL);
  expect_ids(ids, drain(t, "dsr.work", ids, 16), (const char *[]){"x4", NULL});
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);

  /* 3: the stream is deleted and declared again: the cache's marker is
   * gone, so its pairs (x0, x1, x3) must not count. */
  char path[TH_PATH_MAX];
  assert_true(th_fmt(path, sizeof path, "/api/queues/%s/dsr.completed", t->vhost.name));
  assert_int_equal(th_mgmt("DELETE", path, NULL, NULL), 204);
  declare(t);
  pub_completed(t, "x5", "crm");
  pub_simple(t, "x1");
  pub_simple(t, "x5");
  replay_with_cache(t, env, "rebuilt", 1, 0, 1, 1, "does not match the stream");
  expect_ids(ids, drain(t, "dsr.work", ids, 16), (const char *[]){"x1", NULL});

  /* 4: and the rebuilt cache serves the next run. */
  pub_simple(t, "x5");
  replay_with_cache(t, env, "used", 0, 1, 0, 1, NULL);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);

  /* 5: the cache was built trusting guest; under another list of writers
   * it is not used (x5's completion is guest's, so it no longer counts).
   * The whole read: x5 and the markers of runs 3 and 4. */
  const char *const other[] = {env_cache, "DLQ_BRIDGE_COMPLETION_WRITERS=someone-else", NULL};
  pub_simple(t, "x5");
  replay_with_cache(t, other, "rebuilt", 3, 0, 1, 0, "completion_writers");
  expect_ids(ids, drain(t, "dsr.work", ids, 16), (const char *[]){"x5", NULL});

  /* 6: and the cache now built under that list is not used under guest's. */
  pub_simple(t, "x5");
  replay_with_cache(t, env, "rebuilt", 4, 0, 0, 1, "completion_writers");
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);

  unlink(cache);
  rmdir(dir);
}

/* Creates a producer user (write on amq.default only, as producers have:
 * docs/least-privilege.md) on t's vhost; name gets its name. */
static void make_producer(fx_case *t, char *name, size_t cap, const char *password) {
  char path[TH_PATH_MAX], body[256];
  assert_true(th_fmt(name, cap, "%s-producer", t->vhost.name));
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", name));
  assert_true(th_fmt(body, sizeof body, "{\"password\":\"%s\",\"tags\":\"\"}", password));
  int status = th_mgmt("PUT", path, body, NULL);
  assert_true(status == 201 || status == 204);
  assert_true(th_fmt(path, sizeof path, "/api/permissions/%s/%s", t->vhost.name, name));
  status = th_mgmt("PUT", path,
                   "{\"configure\":\"^$\",\"write\":\"^amq\\\\.default$\",\"read\":\"^$\"}", NULL);
  assert_true(status == 201 || status == 204);
}

/* Runs replay --all --json (--dry-run when dry) with env; returns the
 * parsed answer and leaves stderr in *r. */
static json_object *replay_json(fx_case *t, const char *const *env, bool dry, th_result *r) {
  static const char *const wet[] = {"replay", "--all", "--json", NULL};
  static const char *const dry_args[] = {"replay", "--all", "--json", "--dry-run", NULL};
  run(t, dry ? dry_args : wet, env, r);
  printf("replay%s: %s%s", dry ? " --dry-run" : "", r->out, r->err);
  assert_int_equal(r->exit_code, 0);
  json_object *j = json_tokener_parse(r->out);
  assert_non_null(j);
  return j;
}

static long json_num(json_object *j, const char *key) {
  json_object *v;
  return json_object_object_get_ex(j, key, &v) ? (long)json_object_get_int64(v) : -1;
}

/* Issue 16, part 4: anyone who may publish to the default exchange can
 * append to dsr.completed. Only an entry whose user_id (which the broker
 * checks against the publishing connection's user) names a listed
 * completion writer makes replay skip a task; the others are replayed and
 * counted as unverified. With no writers listed nothing counts. */
static void test_replay_forged_completions_delete_nothing(void **state) {
  fx_case *t = *state;
  declare(t);
  char producer[TH_NAME_MAX + 16];
  make_producer(t, producer, sizeof producer, "producer-pw");
  th_conn *p = th_connect_as(&t->vhost, producer, "producer-pw");
  assert_non_null(p);
  pub_simple(t, "fa");
  pub_simple(t, "fb");
  pub_simple(t, "fc");
  pub_simple(t, "ok");
  assert_int_equal(pub_completion(t->conn, "fa", "crm", NULL), 0); /* the writer's user, unproven */
  assert_int_equal(pub_completion(p, "fb", "crm", NULL), 0);       /* a producer, no user_id */
  assert_int_equal(pub_completion(p, "fc", "crm", producer), 0);   /* a producer as itself */
  pub_completed(t, "ok", "crm");                                   /* the writer, user_id set */
  /* A producer cannot claim to be the writer: the broker closes the channel. */
  assert_int_equal(pub_completion(p, "fa", "crm", WRITER), -1);
  th_close(p);

  /* No writers listed (the default): nothing counts, and replay says so. */
  th_result r;
  json_object *j = replay_json(t, NULL, true, &r);
  assert_int_equal(json_num(j, "replayed"), 4);
  assert_int_equal(json_num(j, "skipped_complete"), 0);
  assert_int_equal(ledger_num(j, "unverified"), 4);
  assert_int_equal(ledger_num(j, "tasks"), 0);
  assert_non_null(strstr(r.err, "the completion ledger is not trusted"));
  json_object_put(j);

  /* guest listed: only its user_id-bearing entry counts. The marker the
   * dry run left in the stream counts as nothing at all. */
  j = replay_json(t, writers_env, false, &r);
  assert_int_equal(json_num(j, "replayed"), 3);
  assert_int_equal(json_num(j, "skipped_complete"), 1);
  assert_int_equal(ledger_num(j, "unverified"), 3);
  assert_int_equal(ledger_num(j, "tasks"), 1);
  assert_null(strstr(r.err, "not trusted"));
  json_object_put(j);
  id_t_ ids[16];
  expect_ids(ids, drain(t, "dsr.work", ids, 16), (const char *[]){"fa", "fb", "fc", NULL});
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);

  /* The text summary counts them too. */
  pub_simple(t, "fb");
  static const char *const args[] = {"replay", "--all", NULL};
  run(t, args, writers_env, &r);
  assert_int_equal(r.exit_code, 0);
  printf("replay: %s", r.out);
  assert_non_null(strstr(r.out, "replayed 1, skipped as complete 0, left 0"));
  assert_non_null(strstr(r.out, "3 unverified"));

  char path[TH_PATH_MAX];
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", producer));
  th_mgmt("DELETE", path, NULL, NULL);
}

static void test_replay_sigkill_loses_nothing(void **state) {
  fx_case *t = *state;
  declare(t);
  enum { N = 1500 };
  for (int i = 0; i < N; i++) {
    char id[16];
    snprintf(id, sizeof id, "k%d", i);
    pub_simple(t, id);
  }
  /* 1500 at 500/s takes 3 s; SIGKILL after 1.5 s, mid-stream. */
  static const char *const args[] = {"replay", "--all", "--rate", "500", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, t->vhost.url, NULL, 1500, &r), 0);
  assert_int_equal(r.exit_code, -1); /* killed */
  static id_t_ work[MAX_IDS], dlq[MAX_IDS];
  int nw = drain(t, "dsr.work", work, MAX_IDS);
  int nd = drain(t, "dsr.dlq.manual", dlq, MAX_IDS);
  int seen[N] = {0};
  for (int i = 0; i < nw; i++) seen[atoi(work[i].id + 1)]++;
  for (int i = 0; i < nd; i++) seen[atoi(dlq[i].id + 1)]++;
  int lost = 0, dup = 0;
  for (int i = 0; i < N; i++) {
    if (seen[i] == 0) lost++;
    if (seen[i] > 1) dup += seen[i] - 1;
  }
  printf("sigkill: %d in dsr.work, %d in the DLQ, lost %d, duplicates %d\n", nw, nd, lost, dup);
  assert_int_equal(lost, 0);
  assert_true(nw > 0 && nd > 0); /* it really was midway */
  /* Acks keep up within about a window (half a second of moves at --rate
   * 500, so 250) plus a quarter window of batching. */
  assert_true(dup <= 400);
  /* The DLQ keeps its order for what is left. */
  for (int i = 1; i < nd; i++) assert_true(atoi(dlq[i - 1].id + 1) < atoi(dlq[i].id + 1));
}

/* Cuts the proxy once the replay has visibly moved items. */
typedef struct {
  fx_case *t;
  th_proxy *px;
  long after;
  bool cut;
} cutter;

static void *cut_when_moving(void *arg) {
  cutter *c = arg;
  c->cut = th_wait_depth(c->t->conn, "dsr.work", c->after, 30000);
  th_proxy_cut(c->px);
  return NULL;
}

/* The broker lost mid-replay (issue 19): the summary says how many moved,
 * the error that the connection went, that nothing is lost, to run it
 * again, and that some items may be in both queues; --json still prints
 * one summary document. Nothing is lost. */
static void test_replay_broker_lost(void **state) {
  fx_case *t = *state;
  declare(t);
  enum { N = 400 };
  for (int i = 0; i < N; i++) {
    char id[16];
    snprintf(id, sizeof id, "k%d", i);
    pub_simple(t, id);
  }
  th_proxy px = {0};
  assert_int_equal(th_proxy_start(&px), 0);
  char url[TH_URL_MAX + 32];
  assert_true(th_proxy_url_env(&px, &t->vhost, url, sizeof url));
  const char *const env[] = {url, NULL};
  static const char *const text[] = {"replay", "--all", "--rate", "100", NULL};
  static const char *const json[] = {"replay", "--all", "--rate", "100", "--json", NULL};
  for (int round = 0; round < 2; round++) {
    cutter c = {.t = t, .px = &px, .after = th_queue_depth(t->conn, "dsr.work") + 60};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cut_when_moving, &c), 0);
    th_result r;
    assert_int_equal(th_run_bridge(round == 0 ? text : json, NULL, env, 60000, &r), 0);
    pthread_join(th, NULL);
    printf("lost broker: exit %d\nstdout: %sstderr: %s", r.exit_code, r.out, r.err);
    assert_true(c.cut);
    assert_int_equal(r.exit_code, 1);
    assert_non_null(strstr(r.err, "the connection to the broker was lost"));
    assert_non_null(strstr(r.err, "nothing is lost"));
    assert_non_null(strstr(r.err, "run it again"));
    assert_non_null(strstr(r.err, "may now be in both dsr.dlq.manual and dsr.work"));
    if (round == 0) {
      assert_non_null(strstr(r.out, "replayed "));
      assert_non_null(strstr(r.out, " of 400 in dsr.dlq.manual"));
    } else {
      json_object *j = json_tokener_parse(r.out), *v = NULL;
      assert_non_null(j);
      assert_true(json_object_object_get_ex(j, "complete", &v));
      assert_false(json_object_get_boolean(v));
      assert_true(json_object_object_get_ex(j, "replayed", &v));
      assert_true(json_object_object_get_ex(j, "examined", &v));
      assert_true(json_object_get_int64(v) >= 60);
      assert_non_null(strstr(th_json_str(j, "stopped_early"), "nothing is lost"));
      json_object_put(j);
    }
    assert_int_equal(th_proxy_start(&px), 0);
  }
  th_proxy_cut(&px);
  static id_t_ work[MAX_IDS], dlq[MAX_IDS];
  int nw = drain(t, "dsr.work", work, MAX_IDS);
  int nd = drain(t, "dsr.dlq.manual", dlq, MAX_IDS);
  int seen[N] = {0};
  for (int i = 0; i < nw; i++) seen[atoi(work[i].id + 1)]++;
  for (int i = 0; i < nd; i++) seen[atoi(dlq[i].id + 1)]++;
  for (int i = 0; i < N; i++) assert_true(seen[i] > 0);
}

static double run_secs(fx_case *t, const char *const *args) {
  th_result r;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  run(t, args, NULL, &r);
  clock_gettime(CLOCK_MONOTONIC, &b);
  assert_int_equal(r.exit_code, 0);
  return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

static void test_replay_rate(void **state) {
  fx_case *t = *state;
  declare(t);
  enum { N = 200 };
  for (int i = 0; i < 2 * N; i++) {
    char id[16];
    snprintf(id, sizeof id, "q%d", i);
    pub_simple(t, id);
  }
  /* The same work without --rate, under the same load: what the command
   * costs by itself (start, ledger read, N confirmed moves). */
  static const char *const free_args[] = {"replay", "--all", "--limit", "200", NULL};
  double free_secs = run_secs(t, free_args);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), N);
  static const char *const args[] = {"replay", "--all", "--rate", "100", NULL};
  double secs = run_secs(t, args);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 2 * N);
  /* N messages are N-1 intervals of 1/rate, plus start-up and drain. */
  double rate = (double)(N - 1) / secs, schedule = (double)(N - 1) / 100.0;
  printf("rate: %d messages in %.3f s = %.1f msg/s (asked 100); %.3f s without --rate\n", N, secs,
         rate, free_secs);
  /* The ceiling is the guarantee: the k-th move waits for start + k/rate
   * (src/core/rate.c), so the run never takes less than the schedule, at
   * any load; the 0.5 is the clocks' rounding. */
  assert_true(rate <= 100.5);
  /* No absolute floor: the command's own cost, and how late a sleeping
   * process wakes, grow with the machine's load (measured 97.7 msg/s
   * quiet; 54.5 and 57.5 at load ~13 on 4.0, 60.6 at load 11 on 3.10,
   * where a 60 msg/s floor failed or nearly did). Against the unlimited
   * run under the same load (0.16-0.37 s at load 10, the rated run then
   * 2.24-2.59 s for a 1.99 s schedule) the bound allows three schedules:
   * it catches a limiter that waits three times too long, not a busy
   * machine. */
  assert_true(secs <= free_secs + 3.0 * schedule);
}

/* A DLQ item stamped replay_count INT64_MAX: the replayed copy carries the
 * saturated count (no signed overflow to a negative count, which the router
 * would then call an invalid envelope), so a failure escalates it. */
static void test_replay_count_saturates(void **state) {
  fx_case *t = *state;
  declare(t);
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "top"), 0);
  assert_int_equal(th_msg_set_int(&m, "replay_count", INT64_MAX), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
  static const char *const args[] = {"replay", "--all", NULL};
  th_result r;
  run(t, args, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  th_msg_init(&m);
  assert_int_equal(fx_take(t, "dsr.work", &m, 5000), 1);
  FX_HDR_INT_EQ(&m, "replay_count", 1000000); /* DLQB_ENVELOPE_COUNT_MAX */
  th_msg_release(&m);
}

/* --rate takes 1 to 100000 (the help says so): 0.5 is refused before
 * anything moves, in one line, exit 2. */
static void test_rate_below_one_refused(void **state) {
  fx_case *t = *state;
  declare(t);
  pub_simple(t, "slow1");
  static const char *const cmds[][2] = {{"replay", "--all"}, {"escalate", "--all"}};
  static const char *const rates[] = {"0.5", "0.999", "0", "-1", "1e-9"};
  for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++)
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
      const char *args[] = {cmds[c][0], cmds[c][1], "--rate", rates[i], NULL};
      th_result r;
      run(t, args, NULL, &r);
      printf("%s --rate %s: exit %d: %s", cmds[c][0], rates[i], r.exit_code, r.err);
      assert_int_equal(r.exit_code, 2);
      assert_int_equal(th_count_lines(r.err), 1);
      assert_non_null(strstr(r.err, "--rate"));
    }
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(th_queue_depth(t->conn, "compliance_review"), 0);
}

static void test_escalate(void **state) {
  fx_case *t = *state;
  declare(t);
  fill_fixed(t);
  static const char *const args[] = {"escalate", "--reason", "upstream", "--actor", "bob", NULL};
  th_result r;
  run(t, args, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  th_msg m;
  th_msg_init(&m);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(fx_take(t, "compliance_review", &m, 5000), 1);
    FX_HDR_STR_EQ(&m, "request_id", i == 0 ? "a1" : "b2");
    FX_HDR_STR_EQ(&m, "escalated_by", "bob");
    FX_HDR_STR_EQ(&m, "escalation_reason", "operator");
    assert_true(th_is_iso_utc(th_msg_str(&m, "escalated_at")));
    FX_HDR_STR_EQ(&m, "last_error", "rejected by worker: upstream 503"); /* kept */
  }
  th_msg_release(&m);
  id_t_ ids[16];
  int n = drain(t, "dsr.dlq.manual", ids, 16);
  expect_ids(ids, n, (const char *[]){"b1", "a2", NULL});
  static const char *const none[] = {"escalate", NULL};
  run(t, none, NULL, &r);
  assert_int_equal(r.exit_code, 2);
}

/* The longest line of text, in characters (UTF-8 continuation bytes do not
 * count). */
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

static void test_inspect_leaves_dlq_exactly(void **state) {
  fx_case *t = *state;
  declare(t);
  fill_fixed(t);
  for (int i = 0; i < 40; i++) {
    char id[16];
    snprintf(id, sizeof id, "i%d", i);
    pub_simple(t, id);
  }
  th_result r;
  static const char *const all[] = {"inspect", NULL};
  run(t, all, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(th_count_lines(r.out), 1 + 44 + 1); /* header, items, summary */
  assert_null(strstr(r.out, "subject"));               /* payload hidden */
  static const char *const filt[] = {"inspect", "--source-system", "billing", "--json", NULL};
  run(t, filt, NULL, &r);
  json_object *j = json_tokener_parse(r.out), *items = NULL, *v = NULL;
  assert_non_null(j);
  assert_true(json_object_object_get_ex(j, "items", &items));
  assert_int_equal(json_object_array_length(items), 2);
  assert_string_equal(th_json_str(json_object_array_get_idx(items, 0), "request_id"), "b1");
  assert_true(json_object_object_get_ex(j, "examined", &v));
  assert_int_equal(json_object_get_int64(v), 44);
  assert_true(json_object_object_get_ex(j, "total", &v));
  assert_int_equal(json_object_get_int64(v), 44);
  assert_true(json_object_object_get_ex(j, "listed", &v));
  assert_int_equal(json_object_get_int64(v), 2);
  json_object_put(j);
  static const char *const pay[] = {"inspect", "--request-id", "a2", "--show-payload", NULL};
  run(t, pay, NULL, &r);
  assert_non_null(strstr(r.out, "\"subject\":\"user-42\""));
  /* A window far smaller than the queue bounds only what is in flight:
   * every item is listed (issue 15), and still nothing changes. */
  static const char *const small[] = {"inspect", "--window", "5", NULL};
  run(t, small, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(th_count_lines(r.out), 1 + 44 + 1);

  /* Same ids, same order, nothing redelivered-looking lost. */
  id_t_ ids[64];
  int n = drain(t, "dsr.dlq.manual", ids, 64);
  assert_int_equal(n, 44);
  const char *first[] = {"a1", "b1", "a2", "b2"};
  for (int i = 0; i < 4; i++) assert_string_equal(ids[i].id, first[i]);
  for (int i = 0; i < 40; i++) {
    char id[16];
    snprintf(id, sizeof id, "i%d", i);
    assert_string_equal(ids[4 + i].id, id);
  }
}

/* A pass idle for its idle stop asks the queue how many are ready before it
 * ends; when the broker is slow to send what it already gave the pass
 * (4.0.5 takes seconds over a deeply nested header), the answer is 0 and
 * the deliveries arrive behind it, after the pass has cancelled its
 * consumer. They are the pass's all the same: examined, not left aside.
 * The proxy holds the first delivery (and everything behind it) for longer
 * than the pass's idle stop: inspect's 5 s, the escalator's 2 s. */
#define INSPECT_IDLE_STOP_MS   5000
#define ESCALATOR_IDLE_STOP_MS 2000

static int64_t json_int(json_object *j, const char *key) {
  json_object *v = NULL;
  assert_true(json_object_object_get_ex(j, key, &v));
  return json_object_get_int64(v);
}

static void test_inspect_lists_deliveries_that_come_late(void **state) {
  fx_case *t = *state;
  declare(t);
  static const char *const ids[] = {"late-1", "late-2", "late-3", NULL};
  for (int i = 0; ids[i] != NULL; i++) pub_simple(t, ids[i]);
  th_proxy px = {.delivery_stall_ms = INSPECT_IDLE_STOP_MS + 2000};
  assert_int_equal(th_proxy_start(&px), 0);
  char url[TH_URL_MAX + 32];
  assert_true(th_proxy_url_env(&px, &t->vhost, url, sizeof url));
  const char *const env[] = {url, NULL};
  static const char *const args[] = {"inspect", "--json", NULL};
  th_result r;
  run(t, args, env, &r);
  th_proxy_cut(&px);
  assert_int_equal(r.exit_code, 0);
  json_object *j = json_tokener_parse(r.out), *items = NULL, *v = NULL;
  assert_non_null(j);
  assert_int_equal(json_int(j, "total"), 3);
  assert_int_equal(json_int(j, "examined"), 3);
  assert_int_equal(json_int(j, "listed"), 3);
  assert_true(json_object_object_get_ex(j, "complete", &v));
  assert_true(json_object_get_boolean(v));
  assert_true(json_object_object_get_ex(j, "items", &items));
  assert_int_equal(json_object_array_length(items), 3);
  for (int i = 0; ids[i] != NULL; i++)
    assert_string_equal(th_json_str(json_object_array_get_idx(items, (size_t)i), "request_id"),
                        ids[i]);
  json_object_put(j);
  /* Nothing moved: the same items, in the same order. */
  id_t_ got[8];
  int n = drain(t, "dsr.dlq.manual", got, 8);
  expect_ids(got, n, (const char *const *)ids);
}

/* On an 80-column terminal (COLUMNS here) no line is longer than 80
 * characters, the cut is marked and said, hostile text is sanitised, and
 * an id is never cut (issue 42: it was cut from the left, and the id is
 * what the operator types next): its column takes its width; --wide shows
 * every column whole. */
static void test_inspect_fits_80_columns(void **state) {
  fx_case *t = *state;
  declare(t);
  fill_fixed(t);
  pub_dlq(t, "req-long-identifier", "an-upstream-system-name", "gdpr_art_17",
          "worker error: \x1b[2J the upstream service answered 503 Service Unavailable after "
          "30 seconds, three times in a row",
          th_now_ms() - 90000);
  th_result r;
  static const char *const all[] = {"inspect", NULL};
  static const char *const cols80[] = {"COLUMNS=80", NULL};
  run(t, all, cols80, &r);
  printf("%s", r.out);
  assert_int_equal(r.exit_code, 0);
  assert_true(max_line_chars(r.out) <= 80);
  assert_non_null(
      strstr(r.out, "AGE    MESSAGE_ID              REQUEST_ID          SOURCE     LAST_ERROR"));
  /* The ids whole, the source cut. */
  assert_non_null(
      strstr(r.out, " msg-req-long-identifier req-long-identifier an-upstre\xe2\x80\xa6 "));
  assert_non_null(strstr(r.out, "worker error: ?[2"));
  assert_null(strstr(r.out, "\x1b"));
  assert_non_null(strstr(r.out, "--wide or --json"));
  /* 120 columns: room for DLQ_REASON too. */
  static const char *const cols120[] = {"COLUMNS=120", NULL};
  run(t, all, cols120, &r);
  assert_true(max_line_chars(r.out) <= 120);
  assert_non_null(strstr(r.out, "DLQ_REASON"));
  static const char *const wide[] = {"inspect", "--wide", NULL};
  run(t, wide, cols80, &r);
  assert_int_equal(r.exit_code, 0);
  assert_true(max_line_chars(r.out) > 120);
  assert_null(strstr(r.out, "\xe2\x80\xa6"));
  assert_non_null(strstr(r.out, "three times in a row"));
  assert_null(strstr(r.out, "\x1b"));
  /* Not a terminal and no COLUMNS: nothing is cut (a pipe into grep). */
  run(t, all, NULL, &r);
  assert_non_null(strstr(r.out, "three times in a row"));
}

static void test_resolve(void **state) {
  fx_case *t = *state;
  declare(t);
  fill_fixed(t);
  static const char *const args[] = {
      "resolve", "--message-id", "msg-a2", "--note", "erased by hand, ticket 42", NULL};
  th_result r;
  run(t, args, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  run(t, args, NULL, &r);
  assert_int_equal(r.exit_code, 1); /* gone now */
  assert_int_equal(th_error_lines(r.err), 1);
  static const char *const nonote[] = {"resolve", "--message-id", "msg-a1", NULL};
  run(t, nonote, NULL, &r);
  assert_int_equal(r.exit_code, 2);
  id_t_ ids[16];
  int n = drain(t, "dsr.dlq.manual", ids, 16);
  expect_ids(ids, n, (const char *[]){"a1", "b1", "b2", NULL});
}

static void test_stats(void **state) {
  fx_case *t = *state;
  declare(t);
  fill_fixed(t);
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "p1"), 0);
  assert_int_equal(th_msg_set_str(&m, "dlq_reason", "poison"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
  assert_int_equal(fx_publish_task(t, "w1"), 0);
  static const char *const args[] = {"stats", "--json", NULL};
  th_result r;
  run(t, args, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *j = json_tokener_parse(r.out), *qs, *q, *v, *reasons;
  assert_non_null(j);
  assert_true(json_object_object_get_ex(j, "queues", &qs));
  assert_true(json_object_object_get_ex(qs, "dsr.dlq.manual", &q));
  assert_true(json_object_object_get_ex(q, "depth", &v));
  assert_int_equal(json_object_get_int(v), 5);
  assert_true(json_object_object_get_ex(q, "oldest_age_seconds", &v));
  /* The head is a1, 3 h in the DLQ. */
  assert_true(json_object_get_int(v) >= 3 * 3600 - 5 && json_object_get_int(v) < 3 * 3600 + 60);
  assert_true(json_object_object_get_ex(qs, "dsr.work", &q));
  assert_true(json_object_object_get_ex(q, "depth", &v));
  assert_int_equal(json_object_get_int(v), 1);
  assert_true(json_object_object_get_ex(qs, "compliance_review", &q));
  assert_true(json_object_object_get_ex(qs, "dsr.retry.1s", &q));
  assert_true(json_object_object_get_ex(j, "dlq_reasons", &reasons));
  assert_true(json_object_object_get_ex(reasons, "max_attempts", &v));
  assert_int_equal(json_object_get_int(v), 4);
  assert_true(json_object_object_get_ex(reasons, "poison", &v));
  assert_int_equal(json_object_get_int(v), 1);
  json_object_put(j);
  /* Nothing moved; the worker's task was not touched. */
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 5);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 1);
  static const char *const text[] = {"stats", NULL};
  run(t, text, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "max_attempts"));
  /* An empty classic queue has no oldest message: "-", not "0s". */
  assert_non_null(strstr(r.out, "\ncompliance_review               0  -\n"));
  assert_null(strstr(r.out, " 0s\n"));
}

static void test_unreachable_broker(void **state) {
  (void)state;
  static const char *const cmds[][2] = {{"replay", "--all"},
                                        {"escalate", "--all"},
                                        {"inspect", NULL},
                                        {"stats", NULL},
                                        {"resolve", "--message-id"}};
  for (size_t i = 0; i < 5; i++) {
    const char *args[6] = {cmds[i][0], cmds[i][1], NULL, NULL, NULL, NULL};
    if (i == 4) {
      args[2] = "x";
      args[3] = "--note";
      args[4] = "y";
    }
    th_result r;
    assert_int_equal(th_run_bridge(args, "amqp://guest:guest@127.0.0.1:1/%2f", NULL, 30000, &r), 0);
    assert_int_equal(r.exit_code, 1);
    /* The one error line (the movers also log their --no-audit warning). */
    assert_int_equal(th_error_lines(r.err), 1);
    assert_non_null(strstr(r.err, "cannot connect to broker"));
  }
}

/* While the daemon routes failures into the DLQ, replay and inspect run
 * against it; at the end every task is in exactly the place it should be. */
static void test_ops_while_daemon_routes(void **state) {
  fx_case *t = *state;
  static const char *const env[] = {"DLQ_BRIDGE_MAX_ATTEMPTS=1", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  enum { N = 300 };
  th_worker *w = th_worker_open(&t->vhost, "dsr.work", 50);
  assert_non_null(w);
  th_msg m;
  th_msg_init(&m);
  for (int i = 0; i < N; i++) {
    char id[16];
    snprintf(id, sizeof id, "d%d", i);
    assert_int_equal(fx_publish_task(t, id), 0);
  }
  /* Reject everything once: each lands in the DLQ through the bridge. */
  int rejected = 0, inspects = 0;
  while (rejected < N) {
    int got = th_worker_next(w, &m, 5000);
    FX_CHECK(t, got == 1);
    const char *id = th_msg_str(&m, "request_id");
    int64_t rc = 0;
    th_msg_int(&m, "replay_count", &rc);
    if (rc > 0) {
      /* Replayed while we were still rejecting: done now. */
      assert_int_equal(th_worker_ack(w), 0);
      pub_completed(t, id, "test-suite");
      rejected++;
      continue;
    }
    assert_int_equal(th_worker_reject(w), 0);
    rejected++;
    if (rejected % 100 == 0) {
      /* Mid-flow: look, and replay what is there. */
      th_result r;
      static const char *const insp[] = {"inspect", NULL};
      run(t, insp, NULL, &r);
      FX_CHECK(t, r.exit_code == 0);
      inspects++;
    }
  }
  th_result r;
  static const char *const rep[] = {"replay", "--older-than", "0s", NULL};
  run(t, rep, writers_env, &r);
  FX_CHECK(t, r.exit_code == 0 || r.exit_code == 1);
  /* Work off the replays: ack them all. */
  int acked = 0;
  while (th_worker_next(w, &m, 2000) == 1) {
    assert_int_equal(th_worker_ack(w), 0);
    acked++;
  }
  th_worker_close(w);
  th_msg_release(&m);
  assert_true(th_wait_depth(t->conn, "dsr.failed", 0, 10000));
  long dlq = th_queue_depth(t->conn, "dsr.dlq.manual");
  printf("daemon+ops: %d rejected, %d acked after replay, %ld left in the DLQ, %d inspects\n",
         rejected, acked, dlq, inspects);
  FX_CHECK(t, acked + dlq >= N); /* nothing lost */
  FX_CHECK(t, acked > 0);
  FX_CHECK(t, fx_stop_bridges(t) == 0);
}

static void test_daemon_escalates_sla_and_max_replays(void **state) {
  fx_case *t = *state;
  static const char *const env[] = {"DLQ_BRIDGE_DLQ_SLA=3s", "DLQ_BRIDGE_MAX_REPLAYS=2",
                                    "DLQ_BRIDGE_MAX_ATTEMPTS=1", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  pub_dlq(t, "old", "crm", "gdpr_art_17", "rejected by worker", th_now_ms() - HOUR_MS);
  /* Young for the whole test: two minutes ahead is within the clock skew
   * (DLQB_CLOCK_SKEW_MS), so it reads as age 0. Further ahead it would be
   * no time at all, and escalated. */
  pub_dlq(t, "young", "crm", "gdpr_art_17", "rejected by worker", th_now_ms() + 120000);
  th_msg m;
  th_msg_init(&m);
  FX_CHECK(t, fx_take(t, "compliance_review", &m, 15000) == 1);
  FX_HDR_STR_EQ(&m, "request_id", "old");
  FX_HDR_STR_EQ(&m, "escalation_reason", "dlq_sla");
  FX_HDR_STR_EQ(&m, "escalated_by", "dlq-bridge");
  /* "young" stays (a pass may be holding it for a moment: wait for it). */
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 1, 5000));

  /* Replayed twice already and failing again: compliance_review, not the DLQ. */
  th_msg task;
  th_msg_init(&task);
  assert_int_equal(th_msg_task(&task, "poison-replay"), 0);
  assert_int_equal(th_msg_set_int(&task, "replay_count", 2), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", &task), 0);
  th_msg_release(&task);
  th_worker *w = th_worker_open(&t->vhost, "dsr.work", 1);
  assert_int_equal(th_worker_next(w, &m, 5000), 1);
  assert_int_equal(th_worker_reject(w), 0);
  th_worker_close(w);
  FX_CHECK(t, fx_take(t, "compliance_review", &m, 10000) == 1);
  FX_HDR_STR_EQ(&m, "request_id", "poison-replay");
  FX_HDR_STR_EQ(&m, "escalation_reason", "max_replays");
  FX_HDR_STR_EQ(&m, "dlq_reason", "max_attempts");
  th_msg_release(&m);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 1, 5000));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  FX_CHECK(t, fx_stop_bridges(t) == 0);
}

/* The daemon's SLA escalator behind the same slow broker: every pass would
 * otherwise cancel before its deliveries arrive and escalate nothing, pass
 * after pass (what broker.hostile's deep header met on 4.0.5). */
static void test_daemon_escalates_deliveries_that_come_late(void **state) {
  fx_case *t = *state;
  declare(t);
  pub_dlq(t, "late-old-1", "crm", "gdpr_art_17", "rejected by worker", th_now_ms() - HOUR_MS);
  pub_dlq(t, "late-old-2", "crm", "gdpr_art_17", "rejected by worker", th_now_ms() - HOUR_MS);
  th_proxy px = {.delivery_stall_ms = ESCALATOR_IDLE_STOP_MS + 1500};
  assert_int_equal(th_proxy_start(&px), 0);
  char url[TH_URL_MAX + 32];
  assert_true(th_proxy_url_env(&px, &t->vhost, url, sizeof url));
  const char *const env[] = {url, "DLQ_BRIDGE_DLQ_SLA=4s", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  th_msg m;
  th_msg_init(&m);
  for (int i = 0; i < 2; i++) {
    FX_CHECK(t, fx_take(t, "compliance_review", &m, 30000) == 1);
    FX_HDR_STR_EQ(&m, "request_id", i == 0 ? "late-old-1" : "late-old-2");
    FX_HDR_STR_EQ(&m, "escalation_reason", "dlq_sla");
  }
  th_msg_release(&m);
  FX_CHECK(t, fx_stop_bridges(t) == 0);
  th_proxy_cut(&px);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
}

int main(void) {
  /* DLQB_TEST_FILTER=test_replay* runs only the matching cases. */
  if (getenv("DLQB_TEST_FILTER") != NULL) cmocka_set_test_filter(getenv("DLQB_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      FX_TEST(test_replay_each_filter),
      FX_TEST(test_replay_rewrites_envelope),
      FX_TEST(test_replay_note_is_the_reason),
      FX_TEST(test_replay_usage_and_dry_run),
      FX_TEST(test_replay_limit),
      FX_TEST(test_replay_skips_completed),
      FX_TEST(test_replay_ledger_cache),
      FX_TEST(test_replay_forged_completions_delete_nothing),
      FX_TEST(test_replay_sigkill_loses_nothing),
      FX_TEST(test_replay_rate),
      FX_TEST(test_replay_count_saturates),
      FX_TEST(test_rate_below_one_refused),
      FX_TEST(test_escalate),
      FX_TEST(test_inspect_leaves_dlq_exactly),
      FX_TEST(test_inspect_fits_80_columns),
      FX_TEST(test_inspect_lists_deliveries_that_come_late),
      FX_TEST(test_replay_broker_lost),
      FX_TEST(test_resolve),
      FX_TEST(test_stats),
      FX_TEST(test_unreachable_broker),
      FX_TEST(test_ops_while_daemon_routes),
      FX_TEST(test_daemon_escalates_sla_and_max_replays),
      FX_TEST(test_daemon_escalates_deliveries_that_come_late),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

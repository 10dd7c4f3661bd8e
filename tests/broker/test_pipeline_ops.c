/* Issue 22 on a real broker: the ops commands on a pipeline other than
 * the default one, chosen with --pipeline from one config file that names
 * dsr, redaction (item_id + doc_id), recon (the reconciliation profile:
 * discrepancy_id + category) and legal2 (a second redaction-profile
 * pipeline, so that the ledgers of two pipelines with the same identity
 * fields are told apart). Items are published straight into each DLQ with
 * the envelope the router leaves there. Each command must work on that
 * pipeline's queues only, by its profile's identity: inspect and stats,
 * replay (filters, the completion ledger of that pipeline alone, the
 * ledger cache file of that pipeline), escalate, resolve, review list,
 * audit show, reconcile and report, drain run (its own state file), the
 * console's pages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flow.h"

#define CMD_TIMEOUT_MS 60000
#define HOUR_MS        3600000LL
#define WRITER         "guest"

static const char config_json[] = "{\"pipelines\": {\"dsr\": {},\n"
                                  " \"redaction\": {},\n"
                                  " \"recon\": {\"profile\": \"reconciliation\"},\n"
                                  " \"legal2\": {\"profile\": \"redaction\"}}}";

typedef struct {
  char config[64];
  char cache_dir[64];
  char cache[128];
  char env_config[128], env_cache[192];
  fx_audit audit;
  const char *env[8];
} world;

static void world_init(fx_case *t, world *w) {
  memset(w, 0, sizeof *w);
  snprintf(w->config, sizeof w->config, "/tmp/dlqb-popsp-XXXXXX");
  int fd = mkstemp(w->config);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, config_json, strlen(config_json)), (ssize_t)strlen(config_json));
  assert_int_equal(close(fd), 0);
  snprintf(w->cache_dir, sizeof w->cache_dir, "/tmp/dlqb-popsp-cache-XXXXXX");
  assert_non_null(mkdtemp(w->cache_dir));
  assert_true(th_fmt(w->cache, sizeof w->cache, "%s/ledger.cache", w->cache_dir));
  assert_true(th_fmt(w->env_config, sizeof w->env_config, "DLQ_BRIDGE_CONFIG=%s", w->config));
  assert_true(th_fmt(w->env_cache, sizeof w->env_cache, "DLQ_BRIDGE_LEDGER_CACHE=%s", w->cache));
  assert_int_equal(fx_audit_init(&w->audit), 0);
  size_t n = 0;
  w->env[n++] = w->env_config;
  w->env[n++] = w->env_cache;
  w->env[n++] = "DLQ_BRIDGE_COMPLETION_WRITERS=" WRITER;
  w->env[n++] = w->audit.env_log;
  w->env[n++] = w->audit.env_key;
  w->env[n++] = w->audit.env_pub;
  w->env[n] = NULL;
  /* Every pipeline's topology. */
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare, t->vhost.url, w->env, CMD_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "declare: %s", r.err);
  assert_int_equal(r.exit_code, 0);
}

static void world_free(world *w) {
  fx_audit_remove(&w->audit);
  unlink(w->config);
  char path[192];
  static const char *const names[] = {"ledger.cache", "ledger.redaction.cache",
                                      "ledger.legal2.cache", "ledger.recon.cache", NULL};
  for (size_t i = 0; names[i] != NULL; i++) {
    snprintf(path, sizeof path, "%s/%s", w->cache_dir, names[i]);
    unlink(path);
  }
  rmdir(w->cache_dir);
}

/* Runs dlq-bridge args with the world's environment; prints a failure. */
static void run(fx_case *t, const world *w, const char *const *args, th_result *r) {
  assert_int_equal(th_run_bridge(args, t->vhost.url, w->env, CMD_TIMEOUT_MS, r), 0);
  if (r->exit_code != 0)
    fprintf(stderr, "%s %s: exit %d, stdout: %s, stderr: %s\n", args[0], args[1] ? args[1] : "",
            r->exit_code, r->out, r->err);
}

/* A DLQ item as the router leaves it in a pipeline's DLQ: its identity
 * headers a / b (named by the profile: k1, k2), the retry envelope, no
 * body (the redaction profile forbids one there). */
static void pub_item(fx_case *t, const char *queue, const char *k1, const char *a, const char *k2,
                     const char *b, const char *message_id) {
  th_msg m;
  th_msg_init(&m);
  snprintf(m.message_id, sizeof m.message_id, "%s", message_id);
  char iso[48];
  th_iso_time(th_now_ms() - HOUR_MS, iso, sizeof iso);
  assert_int_equal(th_msg_add_str(&m, k1, a), 0);
  assert_int_equal(th_msg_add_str(&m, k2, b), 0);
  assert_int_equal(th_msg_add_int(&m, "attempt", 3), 0);
  assert_int_equal(th_msg_add_int(&m, "max_attempts", 3), 0);
  assert_int_equal(th_msg_add_str(&m, "first_seen_at", "2026-01-01T00:00:00Z"), 0);
  assert_int_equal(th_msg_add_str(&m, "last_error", "render failed: timeout"), 0);
  assert_int_equal(th_msg_add_str(&m, "dlq_reason", "max_attempts"), 0);
  assert_int_equal(th_msg_add_str(&m, "dlq_at", iso), 0);
  assert_int_equal(th_publish(t->conn, "", queue, &m), 0);
  th_msg_release(&m);
}

static void pub_red(fx_case *t, const char *queue, const char *item, const char *doc) {
  char mid[64];
  snprintf(mid, sizeof mid, "msg-%s", item);
  pub_item(t, queue, "item_id", item, "doc_id", doc, mid);
}

static void pub_recon(fx_case *t, const char *id, const char *category) {
  char mid[64];
  snprintf(mid, sizeof mid, "msg-%s", id);
  pub_item(t, "recon.dlq.manual", "discrepancy_id", id, "category", category, mid);
}

/* A completion as a worker of that pipeline records it: its identity
 * headers, user_id the writer's. */
static void pub_done(fx_case *t, const char *stream, const char *k1, const char *a, const char *k2,
                     const char *b) {
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_add_str(&m, k1, a), 0);
  assert_int_equal(th_msg_add_str(&m, k2, b), 0);
  snprintf(m.user_id, sizeof m.user_id, "%s", WRITER);
  assert_int_equal(th_publish(t->conn, "", stream, &m), 0);
  th_msg_release(&m);
}

/* Takes every message off queue; the values of header key, in order,
 * joined by ','. */
static void drain(fx_case *t, const char *queue, const char *key, char *out, size_t cap) {
  th_msg m;
  th_msg_init(&m);
  out[0] = '\0';
  int got;
  while ((got = th_get(t->conn, queue, &m)) == 1) {
    const char *v = th_msg_str(&m, key);
    size_t len = strlen(out);
    snprintf(out + len, cap - len, "%s%s", len ? "," : "", v ? v : "?");
  }
  th_msg_release(&m);
  assert_int_equal(got, 0);
}

static json_object *parse(const th_result *r) {
  json_object *j = json_tokener_parse(r->out);
  if (j == NULL) fprintf(stderr, "not JSON: %s\n", r->out);
  assert_non_null(j);
  return j;
}

static int64_t num(json_object *j, const char *key) {
  json_object *v;
  assert_true(json_object_object_get_ex(j, key, &v));
  return json_object_get_int64(v);
}

/* inspect and stats on a pipeline: its queues only, its identity columns. */
static void test_inspect_and_stats(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w);
  pub_red(t, "redaction.dlq.manual", "item-1", "doc-1");
  pub_red(t, "redaction.dlq.manual", "item-2\x1b[2J", "doc-2");
  pub_recon(t, "d-1", "amount_mismatch");
  /* Same values in dsr's DLQ, under dsr's names. */
  pub_item(t, "dsr.dlq.manual", "request_id", "item-1", "source_system", "doc-1", "msg-dsr-1");

  th_result r;
  static const char *const ins[] = {"inspect", "--pipeline", "redaction", "--wide", NULL};
  run(t, &w, ins, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "ITEM_ID"));
  assert_non_null(strstr(r.out, "DOC_ID"));
  assert_null(strstr(r.out, "REQUEST_ID"));
  /* The dsr profile's own fields (and the deadlines they drive) are not
   * this profile's columns. */
  assert_null(strstr(r.out, "LEGAL_BASIS"));
  assert_null(strstr(r.out, "ACTION"));
  assert_null(strstr(r.out, " LEFT "));
  assert_non_null(strstr(r.out, "item-1"));
  assert_non_null(strstr(r.out, "doc-1"));
  assert_null(strstr(r.out, "msg-dsr-1")); /* dsr's item is not this pipeline's */
  assert_null(strchr(r.out, '\x1b'));      /* a message's bytes never reach the screen raw */
  printf("inspect --pipeline redaction:\n%s", r.out);
  assert_non_null(strstr(r.out, "2 items"));

  static const char *const insj[] = {"inspect", "--pipeline", "recon", "--json", NULL};
  run(t, &w, insj, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "\"discrepancy_id\":\"d-1\""));
  assert_non_null(strstr(r.out, "\"category\":\"amount_mismatch\""));
  assert_null(strstr(r.out, "\"request_id\""));
  /* Only the profile's fields: dsr's legal_basis and action (and the
   * deadline they drive) are not members of another profile's item. */
  assert_null(strstr(r.out, "\"legal_basis\""));
  assert_null(strstr(r.out, "\"action\""));
  assert_null(strstr(r.out, "\"deadline\""));
  static const char *const insd[] = {"inspect", "--pipeline", "dsr", "--json", NULL};
  run(t, &w, insd, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "\"legal_basis\":\"\""));
  assert_non_null(strstr(r.out, "\"action\":\"\""));

  /* A filter by the identity, under each form. */
  static const char *const byid[] = {"inspect", "--pipeline", "redaction", "--id",
                                     "item-1",  "--json",     NULL};
  run(t, &w, byid, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "\"item_id\":\"item-1\""));
  assert_null(strstr(r.out, "doc-2"));
  /* dsr's flag under another profile: exit 2, one line naming the fields. */
  static const char *const wrong[] = {"inspect",      "--pipeline", "redaction",
                                      "--request-id", "item-1",     NULL};
  run(t, &w, wrong, &r);
  assert_int_equal(r.exit_code, 2);
  assert_int_equal(th_error_lines(r.err), 1);
  assert_non_null(strstr(r.err, "identifies a task by item_id and doc_id"));
  static const char *const badm[] = {"inspect", "--pipeline", "recon",
                                     "--match", "item_id=x",  NULL};
  run(t, &w, badm, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "not an identity field of profile 'reconciliation' "
                                "(discrepancy_id, category)"));

  /* stats: that pipeline's queues, no other's. */
  static const char *const st[] = {"stats", "--pipeline", "redaction", "--json", NULL};
  run(t, &w, st, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *j = parse(&r), *qs, *q;
  assert_true(json_object_object_get_ex(j, "queues", &qs));
  assert_true(json_object_object_get_ex(qs, "redaction.dlq.manual", &q));
  assert_int_equal(num(q, "depth"), 2);
  assert_true(json_object_object_get_ex(qs, "redaction.review", &q));
  assert_true(json_object_object_get_ex(qs, "redaction.work", &q));
  assert_false(json_object_object_get_ex(qs, "dsr.dlq.manual", &q));
  assert_false(json_object_object_get_ex(qs, "recon.dlq.manual", &q));
  assert_false(json_object_object_get_ex(qs, "compliance_review", &q));
  json_object_put(j);
  /* Nothing moved. */
  assert_int_equal(th_queue_depth(t->conn, "redaction.dlq.manual"), 2);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  world_free(&w);
}

/* replay by identity on the redaction pipeline: exactly the selected items
 * go to redaction.work (none to dsr.work); an item completed in that
 * pipeline's ledger is skipped, one completed only in legal2's (same
 * profile, another pipeline) is replayed; each pipeline keeps its own
 * ledger cache file; the trail names the pipeline and audit show finds
 * the hops by the identity. */
static void test_replay_by_identity_and_ledger(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w);
  pub_red(t, "redaction.dlq.manual", "item-1", "doc-1");
  pub_red(t, "redaction.dlq.manual", "item-2", "doc-1");
  pub_red(t, "redaction.dlq.manual", "item-3", "doc-1");
  pub_red(t, "redaction.dlq.manual", "item-4", "doc-4");
  pub_red(t, "legal2.dlq.manual", "item-2", "doc-1");
  pub_item(t, "dsr.dlq.manual", "request_id", "item-1", "source_system", "doc-1", "msg-dsr-1");
  /* item-3 is done in this pipeline's ledger; item-2 only in legal2's;
   * item-1's pair in dsr's ledger under dsr's names. */
  pub_done(t, "redaction.completed", "item_id", "item-3", "doc_id", "doc-1");
  pub_done(t, "legal2.completed", "item_id", "item-2", "doc_id", "doc-1");
  pub_done(t, "dsr.completed", "request_id", "item-1", "source_system", "doc-1");
  /* A completion of the same item under another document: not this task. */
  pub_done(t, "redaction.completed", "item_id", "item-1", "doc_id", "doc-9");

  th_result r;
  static const char *const dry[] = {"replay",       "--pipeline", "redaction", "--match",
                                    "doc_id=doc-1", "--dry-run",  NULL};
  run(t, &w, dry, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(
      strstr(r.out, "dry run: would replay 2, would skip as complete 1, would leave 1 of 4"));
  static const char *const rep[] = {"replay",       "--pipeline", "redaction", "--match",
                                    "doc_id=doc-1", "--json",     NULL};
  run(t, &w, rep, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *j = parse(&r);
  assert_int_equal(num(j, "replayed"), 2);
  assert_int_equal(num(j, "skipped_complete"), 1);
  json_object_put(j);

  char got[512];
  drain(t, "redaction.work", "item_id", got, sizeof got);
  assert_string_equal(got, "item-1,item-2");
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(th_queue_depth(t->conn, "legal2.work"), 0);
  drain(t, "redaction.dlq.manual", "item_id", got, sizeof got);
  assert_string_equal(got, "item-4");
  /* The other pipelines' DLQs are as they were. */
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  assert_int_equal(th_queue_depth(t->conn, "legal2.dlq.manual"), 1);

  /* legal2's own ledger makes its item-2 complete there. */
  static const char *const rep2[] = {"replay", "--pipeline", "legal2", "--id",
                                     "item-2", "--json",     NULL};
  run(t, &w, rep2, &r);
  assert_int_equal(r.exit_code, 0);
  j = parse(&r);
  assert_int_equal(num(j, "replayed"), 0);
  assert_int_equal(num(j, "skipped_complete"), 1);
  json_object_put(j);
  assert_int_equal(th_queue_depth(t->conn, "legal2.dlq.manual"), 0);

  /* One ledger cache file per pipeline, none shared with dsr's. */
  char path[192];
  struct stat sb;
  snprintf(path, sizeof path, "%s/ledger.redaction.cache", w.cache_dir);
  assert_int_equal(stat(path, &sb), 0);
  snprintf(path, sizeof path, "%s/ledger.legal2.cache", w.cache_dir);
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(stat(w.cache, &sb), -1);

  /* The trail: each hop names its pipeline and is keyed by the profile's
   * first identity field; audit show --id finds them, for that pipeline
   * only. */
  assert_int_equal(fx_count_hops(w.audit.log, "\"pipeline\":\"redaction\""), 3);
  assert_int_equal(fx_count_hops(w.audit.log, "\"pipeline\":\"legal2\""), 1);
  static const char *const show[] = {"audit", "show",   "--pipeline", "redaction",
                                     "--id",  "item-2", "--json",     NULL};
  run(t, &w, show, &r);
  assert_int_equal(r.exit_code, 0);
  j = parse(&r);
  json_object *hops, *h, *v;
  assert_true(json_object_object_get_ex(j, "hops", &hops));
  assert_int_equal(json_object_array_length(hops), 2); /* the replay's intent, its hop */
  h = json_object_array_get_idx(hops, 1);
  assert_true(json_object_object_get_ex(h, "pipeline", &v));
  assert_string_equal(json_object_get_string(v), "redaction");
  assert_true(json_object_object_get_ex(h, "event", &v));
  assert_string_equal(json_object_get_string(v), "replayed");
  assert_true(json_object_object_get_ex(h, "to", &v));
  assert_string_equal(json_object_get_string(v), "redaction.work");
  assert_true(json_object_object_get_ex(j, "item_id", &v));
  json_object_put(j);
  static const char *const showt[] = {"audit", "show",   "--pipeline", "legal2",
                                      "--id",  "item-2", NULL};
  run(t, &w, showt, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "1 hop recorded for item_id item-2:"));
  assert_non_null(strstr(r.out, "skipped_complete"));
  assert_non_null(strstr(r.out, "pipeline legal2"));
  /* dsr's item-1 was never touched: dsr's trail has nothing for it. */
  static const char *const showd[] = {"audit",        "show",   "--pipeline", "dsr",
                                      "--request-id", "item-1", NULL};
  run(t, &w, showd, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "no hop recorded for request_id item-1"));
  world_free(&w);
}

/* escalate, review list and resolve on the recon pipeline, and audit
 * reconcile on its queues. */
static void test_escalate_resolve_reconcile(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w);
  pub_recon(t, "d-1", "amount_mismatch");
  pub_recon(t, "d-2", "missing_row");
  pub_recon(t, "d-3", "amount_mismatch");
  th_result r;
  static const char *const esc[] = {
      "escalate", "--pipeline",    "recon", "--match", "category=amount_mismatch",
      "--note",   "needs finance", NULL};
  run(t, &w, esc, &r);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(th_queue_depth(t->conn, "recon.review"), 2);
  assert_int_equal(th_queue_depth(t->conn, "compliance_review"), 0);
  assert_int_equal(th_queue_depth(t->conn, "recon.dlq.manual"), 1);

  static const char *const list[] = {"review", "list", "--pipeline", "recon", NULL};
  run(t, &w, list, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "DISCREPANCY_ID"));
  assert_non_null(strstr(r.out, "CATEGORY"));
  assert_non_null(strstr(r.out, "d-1"));
  assert_non_null(strstr(r.out, "d-3"));
  assert_null(strstr(r.out, "d-2"));
  assert_null(strstr(r.out, "LEGAL_BASIS")); /* the dsr profile's field, not recon's */
  static const char *const listj[] = {"review", "list", "--pipeline", "recon", "--json", NULL};
  run(t, &w, listj, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "\"discrepancy_id\":\"d-1\""));
  assert_null(strstr(r.out, "\"legal_basis\""));
  assert_null(strstr(r.out, "\"action\""));

  /* Custody on recon's review queue: claimed, then replayed by its owner
   * into recon.work (the pipeline's own work queue, nothing to dsr.work). */
  static const char *const claim[] = {"review",  "claim",   "--pipeline", "recon", "--message-id",
                                      "msg-d-3", "--actor", "fin-1",      NULL};
  run(t, &w, claim, &r);
  assert_int_equal(r.exit_code, 0);
  static const char *const decide[] = {"review",  "decide",   "--pipeline", "recon", "--message-id",
                                       "msg-d-3", "--replay", "--actor",    "fin-1", NULL};
  run(t, &w, decide, &r);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(th_queue_depth(t->conn, "recon.review"), 1);
  assert_int_equal(th_queue_depth(t->conn, "recon.work"), 1);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  /* Its story: escalated, claimed, replayed by the decision. */
  static const char *const story[] = {"audit", "show", "--pipeline", "recon", "--id", "d-3", NULL};
  run(t, &w, story, &r);
  assert_int_equal(r.exit_code, 0);
  /* each move after its intent */
  assert_non_null(strstr(r.out, "6 hops recorded for discrepancy_id d-3:"));
  assert_non_null(strstr(r.out, "recon.review -> recon.work"));

  static const char *const res[] = {
      "resolve", "--pipeline",          "recon", "--message-id", "msg-d-2",
      "--note",  "fixed at the source", NULL};
  run(t, &w, res, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(
      strstr(r.out, "resolved msg-d-2 (discrepancy_id d-2, category missing_row): fixed at the "
                    "source"));
  assert_int_equal(th_queue_depth(t->conn, "recon.dlq.manual"), 0);

  /* reconcile reads recon's queues against recon's records: the two
   * escalations are in recon.review, as recorded; nothing missing. */
  static const char *const rec[] = {"audit", "reconcile", "--pipeline", "recon", "--json", NULL};
  run(t, &w, rec, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "\"recon.review\""));
  assert_null(strstr(r.out, "compliance_review"));
  json_object *j = parse(&r), *q, *v;
  assert_true(json_object_object_get_ex(j, "recon.review", &q));
  assert_true(json_object_object_get_ex(q, "missing", &v));
  assert_int_equal(json_object_array_length(v), 0);
  json_object_put(j);
  /* Audit show by the reconciliation identity. */
  static const char *const show[] = {"audit", "show", "--pipeline", "recon", "--id", "d-1", NULL};
  run(t, &w, show, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "2 hops recorded for discrepancy_id d-1:")); /* intent, hop */
  assert_non_null(strstr(r.out, "recon.dlq.manual -> recon.review"));

  /* audit report on recon: its requests by its identity, in its states;
   * a hop of another pipeline in the same trail is not one of them. */
  pub_red(t, "redaction.dlq.manual", "item-1", "doc-1");
  static const char *const resc[] = {"escalate", "--pipeline", "redaction", "--id", "item-1", NULL};
  run(t, &w, resc, &r);
  assert_int_equal(r.exit_code, 0);
  static const char *const rep[] = {"audit", "report", "--pipeline", "recon", "--from", "1h", NULL};
  run(t, &w, rep, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "in_review  discrepancy_id d-1  category amount_mismatch"));
  /* replayed by its reviewer into recon.work, not yet completed */
  assert_non_null(strstr(r.out, "waiting    discrepancy_id d-3  category amount_mismatch"));
  assert_non_null(strstr(r.out, "resolved   discrepancy_id d-2  category missing_row"));
  assert_null(strstr(r.out, "item-1"));
  assert_null(strstr(r.out, "request_id"));
  static const char *const repj[] = {"audit",  "report", "--pipeline", "recon",
                                     "--from", "1h",     "--json",     NULL};
  run(t, &w, repj, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "\"discrepancy_id\":\"d-2\",\"category\":\"missing_row\""));
  assert_null(strstr(r.out, "item-1"));
  world_free(&w);
}

/* A redaction worker: completes every task it is given as the worker
 * guide says (the ledger entry, its identity headers, then the ack). */
typedef struct {
  fx_case *t;
  atomic_int stop, done;
  int failed;
  pthread_t thread;
} red_worker;

static void *red_worker_main(void *arg) {
  red_worker *w = arg;
  th_worker *tw = th_worker_open(&w->t->vhost, "redaction.work", 1);
  th_conn *pub = th_connect(&w->t->vhost);
  th_msg *m = malloc(sizeof *m);
  if (tw == NULL || pub == NULL || m == NULL) {
    w->failed = 1;
    goto out;
  }
  th_msg_init(m);
  while (!atomic_load(&w->stop)) {
    int got = th_worker_next(tw, m, 200);
    if (got < 0) w->failed = 1;
    if (got <= 0) {
      if (got < 0) break;
      continue;
    }
    th_msg done;
    th_msg_init(&done);
    const char *item = th_msg_str(m, "item_id"), *doc = th_msg_str(m, "doc_id");
    th_msg_add_str(&done, "item_id", item ? item : "");
    th_msg_add_str(&done, "doc_id", doc ? doc : "");
    snprintf(done.user_id, sizeof done.user_id, "%s", WRITER);
    if (th_publish(pub, "", "redaction.completed", &done) != 0) w->failed = 1;
    th_msg_release(&done);
    if (th_worker_ack(tw) != 0) w->failed = 1;
    atomic_fetch_add(&w->done, 1);
  }
  th_msg_release(m);
out:
  free(m);
  if (pub != NULL) th_close(pub);
  if (tw != NULL) th_worker_close(tw);
  return NULL;
}

static bool red_work_empty(void *arg) {
  fx_case *t = arg;
  return th_queue_depth(t->conn, "redaction.work") == 0;
}

/* drain run on the redaction pipeline: eligible by its identity, its
 * canary completes in its own ledger, the rest follows; dsr's DLQ is not
 * touched, and the run is recorded in the pipeline's own state file. */
static void test_drain_on_a_pipeline(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w);
  for (int i = 0; i < 6; i++) {
    char item[16];
    snprintf(item, sizeof item, "item-%d", i);
    pub_red(t, "redaction.dlq.manual", item, "doc-1");
  }
  /* Without a doc_id: not eligible (no identity to complete). */
  pub_item(t, "redaction.dlq.manual", "item_id", "item-x", "other", "y", "msg-item-x");
  pub_item(t, "dsr.dlq.manual", "request_id", "item-0", "source_system", "doc-1", "msg-dsr-1");
  /* item-5 is complete already in this pipeline's ledger. */
  pub_done(t, "redaction.completed", "item_id", "item-5", "doc_id", "doc-1");
  char env_state[192], state_path[160], want[192];
  assert_true(th_fmt(state_path, sizeof state_path, "%s/drain-state.json", w.cache_dir));
  assert_true(th_fmt(env_state, sizeof env_state, "DLQ_BRIDGE_DRAIN_STATE=%s", state_path));
  const char *env[16];
  size_t n = 0;
  for (; w.env[n] != NULL; n++) env[n] = w.env[n];
  const char *const fast[] = {"DLQ_BRIDGE_DRAIN_CANARY=2",
                              "DLQ_BRIDGE_DRAIN_START_RATE=20",
                              "DLQ_BRIDGE_DRAIN_STEP=1s",
                              "DLQ_BRIDGE_DRAIN_MAX_RATE=80",
                              "DLQ_BRIDGE_DRAIN_CANARY_TIMEOUT=30s",
                              env_state,
                              NULL};
  for (size_t k = 0; fast[k] != NULL; k++) env[n++] = fast[k];
  env[n] = NULL;

  th_result r;
  static const char *const dry[] = {"drain", "run", "--pipeline", "redaction", "--dry-run", NULL};
  assert_int_equal(th_run_bridge(dry, t->vhost.url, env, CMD_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "drain --dry-run: %s%s", r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "would drain 5, would skip as complete 1, would leave 1 of 7"));

  red_worker *wk = calloc(1, sizeof *wk);
  assert_non_null(wk);
  wk->t = t;
  assert_int_equal(pthread_create(&wk->thread, NULL, red_worker_main, wk), 0);
  assert_true(th_wait_consumers(t->conn, "redaction.work", 1, 10000));
  static const char *const args[] = {"drain", "run", "--pipeline", "redaction", "--json", NULL};
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, CMD_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "drain run: %s%s", r.out, r.err);
  bool emptied = th_wait_until(red_work_empty, t, 20000);
  atomic_store(&wk->stop, 1);
  pthread_join(wk->thread, NULL);
  assert_int_equal(wk->failed, 0);
  assert_true(emptied);
  assert_int_equal(r.exit_code, 0);
  json_object *j = parse(&r), *v;
  assert_true(json_object_object_get_ex(j, "stopped", &v));
  assert_string_equal(json_object_get_string(v), "drained");
  assert_int_equal(num(j, "moved"), 5);
  json_object_put(j);
  assert_int_equal(atomic_load(&wk->done), 5);
  free(wk);
  char got[256];
  drain(t, "redaction.dlq.manual", "item_id", got, sizeof got);
  assert_string_equal(got, "item-x");
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  /* Its own state file; dsr's is not written. */
  struct stat sb;
  assert_true(th_fmt(want, sizeof want, "%s/drain-state.redaction.json", w.cache_dir));
  assert_int_equal(stat(want, &sb), 0);
  assert_int_equal(stat(state_path, &sb), -1);
  static const char *const st[] = {"drain", "status", "--pipeline", "redaction", NULL};
  assert_int_equal(th_run_bridge(st, t->vhost.url, env, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "drained"));
  static const char *const std[] = {"drain", "status", "--pipeline", "dsr", NULL};
  assert_int_equal(th_run_bridge(std, t->vhost.url, env, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "no drain runs recorded"));
  unlink(want);
  world_free(&w);
}

/* GETs path from the console with the session in jar into out (a file). */
static int console_get(int port, const char *jar, const char *path, const char *out) {
  char cmd[1024];
  if (!th_fmt(cmd, sizeof cmd, "curl -s -b '%s' -o '%s' 'http://127.0.0.1:%d%s'", jar, out, port,
              path))
    return -1;
  return system(cmd);
}

/* The console serving the redaction pipeline: its DLQ's groups and items
 * under its identity fields (escaped), filtered by them, its review queue;
 * dsr's items are not shown. */
static void test_console_on_a_pipeline(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w);
  pub_red(t, "redaction.dlq.manual", "item-1", "doc-<script>x</script>");
  pub_red(t, "redaction.dlq.manual", "item-2", "doc-2");
  pub_red(t, "redaction.dlq.manual", "item-3", "doc-3");
  pub_item(t, "dsr.dlq.manual", "request_id", "dsr-only-1", "source_system", "crm", "msg-dsr-1");
  static const char *const esc[] = {"escalate", "--pipeline", "redaction", "--id", "item-3", NULL};
  th_result r;
  run(t, &w, esc, &r);
  assert_int_equal(r.exit_code, 0);

  int port = th_free_port();
  assert_true(port > 0);
  char env_addr[96];
  assert_true(th_fmt(env_addr, sizeof env_addr, "DLQ_BRIDGE_CONSOLE_ADDR=127.0.0.1:%d", port));
  const char *env[16];
  size_t n = 0;
  for (; w.env[n] != NULL; n++) env[n] = w.env[n];
  env[n++] = env_addr;
  env[n++] = "DLQ_BRIDGE_PIPELINE=redaction";
  env[n] = NULL;
  static const char *const args[] = {"console", NULL};
  th_bridge console;
  assert_int_equal(th_command_start(&console, &t->vhost, args, env, "console-redaction"), 0);
  bool up = th_wait_until(th_port_accepts, &port, 20000);
  char jar[160], page[160], cmd[1024];
  assert_true(th_fmt(jar, sizeof jar, "%s/jar", w.cache_dir));
  assert_true(th_fmt(page, sizeof page, "%s/page.html", w.cache_dir));
  assert_true(th_fmt(cmd, sizeof cmd,
                     "curl -s -c '%s' -o /dev/null -d 'user=guest&password=guest' "
                     "http://127.0.0.1:%d/login",
                     jar, port));
  int login = up ? system(cmd) : -1;
  int groups = up ? console_get(port, jar, "/", page) : -1;
  int in_dlq = groups == 0 ? fx_count_in_file(page, "2 items in redaction.dlq.manual") : -1;
  int doc_th = groups == 0 ? fx_count_in_file(page, "<th>doc_id</th>") : -1;
  int all = up ? console_get(port, jar, "/group?older-than=1m", page) : -1;
  int item_th = all == 0 ? fx_count_in_file(page, "<th>item_id</th><th>doc_id</th>") : -1;
  int escaped = all == 0 ? fx_count_in_file(page, "doc-&lt;script&gt;x&lt;/script&gt;") : -1;
  int raw = all == 0 ? fx_count_in_file(page, "<script>x") : -1;
  int dsr_shown = all == 0 ? fx_count_in_file(page, "dsr-only-1") : -1;
  int basis = all == 0 ? fx_count_in_file(page, "legal_basis") : -1; /* dsr's field */
  int item = up ? console_get(port, jar, "/item?message-id=msg-item-2", page) : -1;
  int item_doc = item == 0 ? fx_count_in_file(page, "<th>doc_id</th>") : -1;
  int item_dsr =
      item == 0 ? fx_count_in_file(page, "legal_basis") + fx_count_in_file(page, "<th>action</th>")
                : -1;
  int by_doc = up ? console_get(port, jar, "/group?source-system=doc-2", page) : -1;
  int by_doc_n =
      by_doc == 0 ? fx_count_in_file(page, "1 of 2 items in redaction.dlq.manual match") : -1;
  int by_doc_other = by_doc == 0 ? fx_count_in_file(page, "item-1") : -1;
  int review = up ? console_get(port, jar, "/review", page) : -1;
  int review_q = review == 0 ? fx_count_in_file(page, "1 item waits in redaction.review") : -1;
  int review_item = review == 0 ? fx_count_in_file(page, "item-3") : -1;
  int review_basis = review == 0 ? fx_count_in_file(page, "legal_basis") : -1;
  int stop = th_bridge_stop(&console, 15000);
  if (!up || stop != 0) th_bridge_dump_log(&console);
  printf("console: login %d groups %d in_dlq %d doc_th %d item_th %d escaped %d raw %d dsr %d "
         "by_doc %d/%d review %d/%d legal_basis %d/%d item %d/%d\n",
         login, groups, in_dlq, doc_th, item_th, escaped, raw, dsr_shown, by_doc_n, by_doc_other,
         review_q, review_item, basis, review_basis, item_doc, item_dsr);
  assert_true(up);
  assert_int_equal(login, 0);
  assert_int_equal(in_dlq, 1);
  assert_int_equal(doc_th, 1); /* the groups table names the second identity field */
  assert_int_equal(item_th, 1);
  assert_true(escaped >= 1);
  assert_int_equal(raw, 0);
  assert_int_equal(dsr_shown, 0);
  assert_int_equal(by_doc_n, 1); /* the form's second identity field is doc_id */
  assert_int_equal(by_doc_other, 0);
  assert_int_equal(review_q, 1);
  assert_true(review_item >= 1);
  /* Only the profile's fields: no legal_basis or action on its pages. */
  assert_int_equal(basis, 0);
  assert_int_equal(review_basis, 0);
  assert_int_equal(item_doc, 1);
  assert_int_equal(item_dsr, 0);
  assert_int_equal(stop, 0);
  unlink(jar);
  unlink(page);
  world_free(&w);
}

/* docs/least-privilege.md's redaction operator (configure nothing, write
 * amq.default, read the redaction DLQ, review queue and ledger) can run the
 * ops commands on its pipeline, and nothing of dsr's. */
static void test_redaction_operator_least_privilege(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w);
  pub_red(t, "redaction.dlq.manual", "item-1", "doc-1");
  pub_red(t, "redaction.dlq.manual", "item-2", "doc-2");
  pub_red(t, "redaction.dlq.manual", "item-3", "doc-3");
  pub_done(t, "redaction.completed", "item_id", "item-2", "doc_id", "doc-2");
  pub_item(t, "dsr.dlq.manual", "request_id", "r-1", "source_system", "crm", "msg-dsr-1");
  char user[TH_NAME_MAX + 8], path[TH_PATH_MAX], env_url[TH_URL_MAX + 96];
  assert_true(th_fmt(user, sizeof user, "%s-redop", t->vhost.name));
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", user));
  int st = th_mgmt("PUT", path, "{\"password\":\"redop-pw\",\"tags\":\"\"}", NULL);
  assert_true(st == 201 || st == 204);
  assert_true(th_fmt(path, sizeof path, "/api/permissions/%s/%s", t->vhost.name, user));
  st = th_mgmt("PUT", path,
               "{\"configure\":\"^$\",\"write\":\"^amq\\\\.default$\","
               "\"read\":\"^redaction\\\\.(dlq\\\\.manual|review|completed)$\"}",
               NULL);
  assert_true(st == 201 || st == 204);
  assert_true(th_fmt(env_url, sizeof env_url, "DLQ_BRIDGE_URL=amqp://%s:redop-pw@127.0.0.1:%d/%s",
                     user, th_env_get()->amqp_port, t->vhost.name));
  const char *env[16];
  size_t n = 0;
  for (; w.env[n] != NULL; n++) env[n] = w.env[n];
  env[n++] = env_url;
  env[n] = NULL;
  th_result r;
  static const char *const ins[] = {"inspect", "--pipeline", "redaction", NULL};
  assert_int_equal(th_run_bridge(ins, NULL, env, CMD_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "inspect as operator: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  static const char *const stats[] = {"stats", "--pipeline", "redaction", NULL};
  assert_int_equal(th_run_bridge(stats, NULL, env, CMD_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "stats as operator: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  static const char *const esc[] = {"escalate", "--pipeline", "redaction", "--id", "item-3", NULL};
  assert_int_equal(th_run_bridge(esc, NULL, env, CMD_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "escalate as operator: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  static const char *const rep[] = {"replay", "--pipeline", "redaction", "--all", NULL};
  assert_int_equal(th_run_bridge(rep, NULL, env, CMD_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "replay as operator: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "replayed 1, skipped as complete 1"));
  assert_int_equal(th_queue_depth(t->conn, "redaction.work"), 1);
  assert_int_equal(th_queue_depth(t->conn, "redaction.review"), 1);
  /* dsr's DLQ is not this user's: reading it is refused (exit 1, one line). */
  static const char *const dsr[] = {"inspect", "--pipeline", "dsr", NULL};
  assert_int_equal(th_run_bridge(dsr, NULL, env, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_error_lines(r.err), 1);
  assert_null(strstr(r.err, "redop-pw"));
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", user));
  (void)th_mgmt("DELETE", path, NULL, NULL);
  world_free(&w);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_inspect_and_stats),          FX_TEST(test_replay_by_identity_and_ledger),
      FX_TEST(test_escalate_resolve_reconcile), FX_TEST(test_drain_on_a_pipeline),
      FX_TEST(test_console_on_a_pipeline),      FX_TEST(test_redaction_operator_least_privilege),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

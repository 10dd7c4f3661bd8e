/* Audit anchors on a real broker: ops commands publish their signed chain
 * heads to the stream dsr.audit.anchors, and `audit verify --anchors`
 * (given public keys only: the private key is moved away while it runs)
 * names what an attacker with write access to the log's directory removed
 * together with the matching seal lines: a cut tail, an emptied seal, a
 * deleted chain (the last one: no later batch links to it), a deleted
 * rotated file; it ignores messages anyone may append to the stream and
 * refuses an anchor made with another writer's key. The links between the
 * chains of one file catch a deleted chain that a later chain follows,
 * without anchors. A broker that cannot take an anchor loses no record. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <glob.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flow.h"

#define WAIT_MS   20000
#define ANCHORS   "dsr.audit.anchors"
#define MAX_LINES 256

typedef struct {
  fx_audit a;
  char seal[160], away[160];
  const char *env[6];  /* a writer's: log, key */
  const char *venv[3]; /* the verifier's: log, public keys; no secret */
  char rotate[64];
} world;

static void world_init(fx_case *t, world *w, const char *rotate_bytes) {
  assert_int_equal(fx_audit_init(&w->a), 0);
  assert_true(th_fmt(w->seal, sizeof w->seal, "%s.seal", w->a.log));
  assert_true(th_fmt(w->away, sizeof w->away, "%s.away", w->a.key));
  assert_true(th_fmt(w->rotate, sizeof w->rotate, "DLQ_BRIDGE_AUDIT_ROTATE_BYTES=%s",
                     rotate_bytes != NULL ? rotate_bytes : "67108864"));
  w->env[0] = w->a.env_log;
  w->env[1] = w->a.env_key;
  w->env[2] = "DLQ_BRIDGE_METRICS_ADDR=off";
  w->env[3] = w->rotate;
  w->env[4] = NULL;
  w->venv[0] = w->a.env_log;
  w->venv[1] = w->a.env_pub;
  w->venv[2] = NULL;
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare, t->vhost.url, w->env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
}

/* A DLQ item, resolved by an ops command: one writer's chain of three
 * records (chain_start, resolved, chain_end) and its anchor. */
static void resolve_one(fx_case *t, world *w, const char *id) {
  th_msg m;
  th_msg_init(&m);
  int rc = th_msg_task(&m, id);
  if (rc == 0) rc = th_msg_set_str(&m, "dlq_reason", "max_attempts");
  if (rc == 0) rc = th_publish(t->conn, "", "dsr.dlq.manual", &m);
  th_msg_release(&m);
  assert_int_equal(rc, 0);
  char mid[64];
  snprintf(mid, sizeof mid, "msg-%s", id);
  const char *const args[] = {"resolve", "--message-id", mid, "--note", "erased by hand", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, t->vhost.url, w->env, 60000, &r), 0);
  printf("resolve %s: exit %d\n%s%s", id, r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  assert_null(strstr(r.err, "not anchored"));
}

typedef struct {
  fx_case *t;
  long want;
} depth_wait;

static bool depth_reached(void *arg) {
  depth_wait *d = arg;
  return th_queue_depth(d->t->conn, ANCHORS) >= d->want;
}

/* The stream's message count (which lags its appends a little) reaches n. */
static void wait_anchors(fx_case *t, long n) {
  depth_wait d = {t, n};
  assert_true(th_wait_until(depth_reached, &d, WAIT_MS));
}

/* `audit verify [--anchors] [extra...]` as an auditor: public keys only,
 * and the writer's private key moved out of its place meanwhile. */
static void verify(fx_case *t, world *w, bool anchors, const char *const *extra, th_result *r) {
  const char *args[16] = {"audit", "verify"};
  size_t n = 2;
  if (anchors) args[n++] = "--anchors";
  for (size_t i = 0; extra != NULL && extra[i] != NULL; i++) args[n++] = extra[i];
  args[n] = NULL;
  assert_int_equal(rename(w->a.key, w->away), 0);
  int rc = th_run_bridge(args, t->vhost.url, w->venv, 60000, r);
  assert_int_equal(rename(w->away, w->a.key), 0);
  assert_int_equal(rc, 0);
  printf("audit verify%s: exit %d\n%s%s", anchors ? " --anchors" : "", r->exit_code, r->out,
         r->err);
}

static void expect_intact(fx_case *t, world *w, bool anchors, const char *const *extra) {
  th_result r;
  verify(t, w, anchors, extra, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "audit log intact"));
}

/* Exit 1 with one line on stderr containing want. */
static void expect_missing(fx_case *t, world *w, bool anchors, const char *const *extra,
                           const char *want) {
  th_result r;
  verify(t, w, anchors, extra, &r);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_count_lines(r.err), 1);
  if (strstr(r.err, want) == NULL) fprintf(stderr, "expected '%s'\n", want);
  assert_non_null(strstr(r.err, want));
}

/* ---- files as an attacker edits them ---- */

typedef struct {
  char *line[MAX_LINES];
  size_t n;
} lines;

static void read_lines(const char *path, lines *l) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  l->n = 0;
  char *buf = NULL;
  size_t cap = 0;
  while (getline(&buf, &cap, f) >= 0) {
    assert_true(l->n < MAX_LINES);
    l->line[l->n++] = strdup(buf);
  }
  free(buf);
  fclose(f);
}

static void write_lines(const char *path, lines *l) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  for (size_t i = 0; i < l->n; i++) fputs(l->line[i], f);
  assert_int_equal(fclose(f), 0);
  for (size_t i = 0; i < l->n; i++) free(l->line[i]);
  l->n = 0;
}

/* Keeps the first n lines of the file. */
static void keep_lines(const char *path, size_t n) {
  lines l;
  read_lines(path, &l);
  assert_true(n <= l.n);
  for (size_t i = n; i < l.n; i++) free(l.line[i]);
  l.n = n;
  write_lines(path, &l);
}

/* Removes every line holding chain id from the file. */
static void drop_chain(const char *path, const char *id) {
  char needle[64];
  snprintf(needle, sizeof needle, "\"chain\":\"%s\"", id);
  lines l;
  read_lines(path, &l);
  size_t k = 0;
  for (size_t i = 0; i < l.n; i++) {
    if (strstr(l.line[i], needle) != NULL) free(l.line[i]);
    else l.line[k++] = l.line[i];
  }
  l.n = k;
  write_lines(path, &l);
}

/* The chain id of line i (0-based) of the log. */
static void chain_at(const char *path, size_t i, char *id) {
  lines l;
  read_lines(path, &l);
  assert_true(i < l.n);
  const char *at = strstr(l.line[i], "\"chain\":\"");
  assert_non_null(at);
  memcpy(id, at + 9, 32);
  id[32] = '\0';
  for (size_t j = 0; j < l.n; j++) free(l.line[j]);
}

static void copy_file(const char *from, const char *to) {
  char cmd[400];
  assert_true(th_fmt(cmd, sizeof cmd, "cp '%s' '%s'", from, to));
  assert_int_equal(system(cmd), 0);
}

/* ---- the tampering kinds ---- */

/* The tail cut together with its seal lines: only the anchor knows. */
static void test_cut_tail_with_its_seal_lines(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w, NULL);
  resolve_one(t, &w, "cut-1");
  wait_anchors(t, 1);
  expect_intact(t, &w, true, NULL);
  keep_lines(w.a.log, 1); /* chain_start: a signed batch of its own */
  keep_lines(w.seal, 1);
  expect_intact(t, &w, false, NULL); /* the gap: the seal was cut back too */
  expect_missing(t, &w, true, NULL, "the tail was cut: 2 records missing");
  fx_audit_remove(&w.a);
}

static void test_emptied_seal(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w, NULL);
  resolve_one(t, &w, "seal-1");
  wait_anchors(t, 1);
  keep_lines(w.seal, 0);
  expect_missing(t, &w, true, NULL, "has no seal line (the seal was emptied");
  fx_audit_remove(&w.a);
}

/* Two ops runs, two chains in one file: the last one deleted with its seal
 * lines is seen by the anchors only; the first one, by the link the second
 * chain's first batch holds, anchors or not. */
static void test_deleted_chain(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w, NULL);
  resolve_one(t, &w, "chain-1");
  resolve_one(t, &w, "chain-2");
  wait_anchors(t, 2);
  char first[33], second[33], log_copy[200], seal_copy[200];
  chain_at(w.a.log, 0, first);
  chain_at(w.a.log, 3, second);
  assert_string_not_equal(first, second);
  assert_true(th_fmt(log_copy, sizeof log_copy, "%s.copy", w.a.log));
  assert_true(th_fmt(seal_copy, sizeof seal_copy, "%s.copy", w.seal));
  copy_file(w.a.log, log_copy);
  copy_file(w.seal, seal_copy);

  drop_chain(w.a.log, second);
  drop_chain(w.seal, second);
  expect_intact(t, &w, false, NULL);
  char want[160];
  snprintf(want, sizeof want, "missing: chain %s (writer resolve@", second);
  expect_missing(t, &w, true, NULL, want);
  expect_missing(t, &w, true, NULL, "but the files hold none of it (the chain was deleted)");

  copy_file(log_copy, w.a.log);
  copy_file(seal_copy, w.seal);
  unlink(log_copy);
  unlink(seal_copy);
  drop_chain(w.a.log, first);
  drop_chain(w.seal, first);
  snprintf(want, sizeof want, "missing: chain %s (up to seq 2 at least) is not in the files",
           first);
  expect_missing(t, &w, false, NULL, want);
  expect_missing(t, &w, false, NULL, "(the chain was deleted whole)");
  fx_audit_remove(&w.a);
}

/* Every batch rotates (1 byte): the oldest file alone is left, as if the
 * newer files and the seal were deleted. */
static void test_deleted_rotated_file(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w, "1");
  resolve_one(t, &w, "rot-1");
  wait_anchors(t, 1);
  /* Rotated files are <log>.<UTC stamp>: glob sorts them oldest first. */
  char pattern[200];
  assert_true(th_fmt(pattern, sizeof pattern, "%s.2*", w.a.log));
  glob_t g;
  assert_int_equal(glob(pattern, 0, NULL, &g), 0);
  printf("%zu rotated files\n", g.gl_pathc);
  assert_true(g.gl_pathc >= 2);
  char **files = g.gl_pathv;
  expect_intact(t, &w, true, NULL);
  const char *const oldest[] = {"--no-seal", files[0], NULL};
  expect_intact(t, &w, false, oldest); /* what the files alone show */
  expect_missing(t, &w, true, oldest, "(a rotated file was deleted, or the log replaced)");
  expect_missing(t, &w, true, oldest, "missing: the file that began as 'audit.log'");
  globfree(&g);
  fx_audit_remove(&w.a);
}

/* ---- what others may append to the stream ---- */

/* A second key pair, its public key beside the writer's (a second
 * writer's), its private key at path; its key id into id. */
static EVP_PKEY *second_writer(world *w, char *id) {
  EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  assert_non_null(k);
  char pub[200];
  assert_true(th_fmt(pub, sizeof pub, "%s/second.pem", w->a.keys));
  FILE *g = fopen(pub, "w");
  assert_non_null(g);
  assert_int_equal(PEM_write_PUBKEY(g, k), 1);
  fclose(g);
  unsigned char raw[32], md[32];
  size_t rl = sizeof raw;
  unsigned int ml = 0;
  assert_int_equal(EVP_PKEY_get_raw_public_key(k, raw, &rl), 1);
  assert_int_equal(EVP_Digest(raw, rl, md, &ml, EVP_sha256(), NULL), 1);
  for (int i = 0; i < 8; i++) sprintf(id + 2 * i, "%02x", md[i]);
  return k;
}

/* body + ,"sig":"<hex>"} with key, as a writer signs: over body + "}". */
static void sign_line(EVP_PKEY *k, const char *body, char *out, size_t cap) {
  char msg[4096];
  int n = snprintf(msg, sizeof msg, "%s}", body);
  assert_true(n > 0 && (size_t)n < sizeof msg);
  unsigned char sig[64];
  size_t sl = sizeof sig;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  assert_int_equal(EVP_DigestSignInit(ctx, NULL, NULL, NULL, k), 1);
  assert_int_equal(EVP_DigestSign(ctx, sig, &sl, (unsigned char *)msg, (size_t)n), 1);
  EVP_MD_CTX_free(ctx);
  char hex[129];
  for (int i = 0; i < 64; i++) sprintf(hex + 2 * i, "%02x", sig[i]);
  assert_true(th_fmt(out, cap, "%s,\"sig\":\"%s\"}", body, hex));
}

static void append_to_stream(fx_case *t, const char *body) {
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_set_body(&m, body, strlen(body)), 0);
  assert_int_equal(th_publish(t->conn, "", ANCHORS, &m), 0);
  th_msg_release(&m);
}

static void test_foreign_messages_and_forged_anchor(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w, NULL);
  resolve_one(t, &w, "forge-1");
  wait_anchors(t, 1);
  /* Anyone with write on amq.default can append: garbage is ignored. */
  append_to_stream(t, "{\"v\":2,\"type\":\"anchor\",\"chain\":\"not signed\"}");
  append_to_stream(t, "hello");
  wait_anchors(t, 3);
  th_result r;
  verify(t, &w, true, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "anchors: 1 anchor of 1 chain checked (2 ignored"));
  /* A second writer's key signs an anchor for the first writer's chain,
   * claiming more records than it has: refused, naming both keys. */
  char id[17], chain[33], body[1024], line[1200];
  EVP_PKEY *k = second_writer(&w, id);
  chain_at(w.a.log, 0, chain);
  snprintf(body, sizeof body,
           "{\"v\":2,\"type\":\"anchor\",\"chain\":\"%s\",\"seq\":9,\"last_hash\":\"%064d\","
           "\"ended\":true,\"writer\":\"resolve@forger\",\"key\":\"%s\",\"file\":\"audit.log\","
           "\"file_id\":\"%064d\",\"written\":\"2026-01-01T00:00:00.000Z\","
           "\"time\":\"2026-01-01T00:00:00.000Z\"",
           chain, 0, id, 0);
  sign_line(k, body, line, sizeof line);
  EVP_PKEY_free(k);
  append_to_stream(t, line);
  wait_anchors(t, 4);
  expect_missing(t, &w, true, NULL, "is anchored with key ");
  expect_missing(t, &w, true, NULL, "(forged under another writer's key)");
  fx_audit_remove(&w.a);
}

/* No stream (deleted by an admin, or a broker never declared for it):
 * the command does its work, records it, and says the run is not anchored. */
static void test_broker_without_the_stream(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w, NULL);
  char path[256];
  assert_true(th_fmt(path, sizeof path, "/api/queues/%s/%s", t->vhost.name, ANCHORS));
  assert_int_equal(th_mgmt("DELETE", path, NULL, NULL), 204);
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "nostream-1"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
  const char *const args[] = {"resolve", "--message-id", "msg-nostream-1", "--note", "x", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, t->vhost.url, w.env, 60000, &r), 0);
  printf("resolve: exit %d\n%s%s", r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.err, "not anchored in dsr.audit.anchors"));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  expect_intact(t, &w, false, NULL);
  assert_int_equal(fx_count_in_file(w.a.log, "\"event\":\"resolved\""), 1);
  fx_audit_remove(&w.a);
}

/* ---- the daemon ---- */

typedef struct {
  const char *path;
  const char *needle;
  int want;
} count_wait;

static bool count_reached(void *arg) {
  count_wait *c = arg;
  return fx_count_in_file(c->path, c->needle) >= c->want;
}

/* `run` anchors its router's and its escalator's chains while it routes
 * (every 200 ms here) and once more at its end: verify --anchors finds
 * both chains anchored, the last anchors at their chain_end. */
static void test_daemon_anchors_while_running_and_at_exit(void **state) {
  fx_case *t = *state;
  world w;
  assert_int_equal(fx_audit_init(&w.a), 0);
  assert_true(th_fmt(w.seal, sizeof w.seal, "%s.seal", w.a.log));
  assert_true(th_fmt(w.away, sizeof w.away, "%s.away", w.a.key));
  w.venv[0] = w.a.env_log;
  w.venv[1] = w.a.env_pub;
  w.venv[2] = NULL;
  const char *const env[] = {w.a.env_log, w.a.env_key, "DLQ_BRIDGE_MAX_ATTEMPTS=1",
                             "DLQ_BRIDGE_AUDIT_ANCHOR_INTERVAL=200ms", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  for (int i = 0; i < 5; i++) {
    char id[32];
    snprintf(id, sizeof id, "daemon-%d", i);
    th_msg *m = fx_msg(t);
    assert_int_equal(th_msg_task(m, id), 0);
    assert_int_equal(th_msg_add_str(m, "worker_error", "upstream timeout"), 0);
    assert_int_equal(th_publish(t->conn, "", "dsr.failed", m), 0);
  }
  count_wait c = {w.a.log, "\"event\":\"dead_lettered\"", 5};
  FX_CHECK(t, th_wait_until(count_reached, &c, WAIT_MS));
  /* Anchored while running: no stop needed to get the heads off the host. */
  wait_anchors(t, 2);
  long running = th_queue_depth(t->conn, ANCHORS);
  assert_int_equal(fx_stop_bridges(t), 0);
  wait_anchors(t, running + 1);
  th_result r;
  verify(t, &w, true, NULL, &r);
  FX_CHECK(t, r.exit_code == 0);
  assert_non_null(strstr(r.out, "of 2 chains checked (0 ignored"));
  assert_non_null(strstr(r.out, "; 0 records newer than their chain's last anchor"));
  fx_audit_remove(&w.a);
}

static void publish_failure(fx_case *t, const char *id) {
  th_msg *m = fx_msg(t);
  assert_int_equal(th_msg_task(m, id), 0);
  assert_int_equal(th_msg_add_str(m, "worker_error", "upstream timeout"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.failed", m), 0);
}

/* A short run of the daemon with the default settings (anchors every 5 s),
 * stopped with SIGTERM 3 s after its first record: its last records (the
 * chain_end of each of its chains) are anchored at the stop, so the folder
 * copied back to its state before the run (a whole run deleted) fails
 * verify --anchors, naming a missing chain. */
static void test_daemon_anchors_a_short_run_at_sigterm(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w, NULL);
  resolve_one(t, &w, "before-the-run");
  wait_anchors(t, 1);
  char log_before[200], seal_before[200];
  assert_true(th_fmt(log_before, sizeof log_before, "%s.before", w.a.log));
  assert_true(th_fmt(seal_before, sizeof seal_before, "%s.before", w.seal));
  copy_file(w.a.log, log_before);
  copy_file(w.seal, seal_before);
  long before = th_queue_depth(t->conn, ANCHORS);

  const char *const env[] = {w.a.env_log, w.a.env_key, "DLQ_BRIDGE_MAX_ATTEMPTS=1",
                             "DLQ_BRIDGE_METRICS_ADDR=off", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  for (int i = 0; i < 3; i++) {
    char id[32];
    snprintf(id, sizeof id, "short-run-%d", i);
    publish_failure(t, id);
  }
  count_wait c = {w.a.log, "\"event\":\"dead_lettered\"", 3};
  FX_CHECK(t, th_wait_until(count_reached, &c, WAIT_MS));
  /* The scenario's own length: a run stopped 3 s after its first records,
   * before its first 5 s anchor. */
  usleep(3 * 1000 * 1000);
  assert_int_equal(fx_stop_bridges(t), 0);
  wait_anchors(t, before + 1);
  expect_intact(t, &w, true, NULL);
  th_result r;
  verify(t, &w, true, NULL, &r);
  assert_non_null(strstr(r.out, "; 0 records newer than their chain's last anchor"));

  /* The run deleted: the folder as it was before it. */
  copy_file(log_before, w.a.log);
  copy_file(seal_before, w.seal);
  unlink(log_before);
  unlink(seal_before);
  expect_missing(t, &w, true, NULL, "(the chain was deleted)");
  fx_audit_remove(&w.a);
}

typedef struct {
  fx_case *t;
  char name[256];
} named_conn;

static bool anchor_link_up(void *arg) {
  named_conn *c = arg;
  return th_connection_named(&c->t->vhost, "dlq-bridge audit anchors", c->name, sizeof c->name);
}

/* The anchor publishers' connections, kept between anchors, die while the
 * daemon is idle (here closed by the broker's management API, as a broker
 * closes one whose heartbeats went unanswered): the anchors at the clean
 * stop go out on fresh ones, and every chain is anchored to its end. */
static void test_daemon_anchors_at_sigterm_after_its_links_died(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w, NULL);
  const char *const env[] = {w.a.env_log, w.a.env_key, "DLQ_BRIDGE_MAX_ATTEMPTS=1",
                             "DLQ_BRIDGE_METRICS_ADDR=off", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  publish_failure(t, "idle-then-stop");
  count_wait c = {w.a.log, "\"event\":\"dead_lettered\"", 1};
  FX_CHECK(t, th_wait_until(count_reached, &c, WAIT_MS));
  /* Both chains (the router's, the escalator's) anchored once: their
   * publishers hold a connection each. */
  wait_anchors(t, 2);
  named_conn nc = {.t = t};
  FX_CHECK(t, th_wait_until(anchor_link_up, &nc, WAIT_MS));
  int closed = 0;
  while (closed < 8 && anchor_link_up(&nc) && th_connection_close(nc.name) == 0) closed++;
  assert_true(closed >= 1);
  printf("closed %d anchor connection(s) of the idle daemon\n", closed);
  long before = th_queue_depth(t->conn, ANCHORS);
  assert_int_equal(fx_stop_bridges(t), 0);
  /* Each chain's chain_end anchored at the stop (the stream's count lags
   * its appends a little). */
  wait_anchors(t, before + 2);
  th_result r;
  verify(t, &w, true, NULL, &r);
  FX_CHECK(t, r.exit_code == 0);
  assert_non_null(strstr(r.out, "; 0 records newer than their chain's last anchor"));
  fx_audit_remove(&w.a);
}

/* ---- two writers, one log: a forgery with the other writer's key ---- */

#define REC_MAX 4096

/* Line l (no newline) of a record, its body (no signature, no closing
 * brace: what a writer hashes and signs with "}" after it) into body. */
static void body_of(const char *l, char *body, size_t cap) {
  size_t n = strcspn(l, "\n");
  const char *sig = strstr(l, ",\"sig\":\"");
  if (sig != NULL && (size_t)(sig - l) < n) n = (size_t)(sig - l);
  else n--; /* the closing brace */
  assert_true(n < cap);
  memcpy(body, l, n);
  body[n] = '\0';
}

/* The record's hash as the chain's next record names it (prev). */
static void hash_of(const char *l, char *hex) {
  char body[REC_MAX + 1];
  body_of(l, body, sizeof body);
  strcat(body, "}");
  unsigned char md[32];
  unsigned int ml = 0;
  assert_int_equal(EVP_Digest(body, strlen(body), md, &ml, EVP_sha256(), NULL), 1);
  for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
}

/* The value of member name in line l as JSON text (strings unquoted;
 * the members read here hold no escapes). */
static void member_of(const char *l, const char *name, char *out, size_t cap) {
  char needle[64];
  snprintf(needle, sizeof needle, ",\"%s\":", name);
  const char *at = strstr(l, needle);
  assert_non_null(at);
  at += strlen(needle);
  size_t n = *at == '"' ? strcspn(++at, "\"") : strcspn(at, ",}");
  assert_true(n < cap);
  memcpy(out, at, n);
  out[n] = '\0';
}

/* Sets member name of body to value (JSON text) in place. */
static void set_member(char *body, size_t cap, const char *name, const char *value) {
  char needle[64], old[REC_MAX];
  snprintf(needle, sizeof needle, ",\"%s\":", name);
  char *at = strstr(body, needle);
  assert_non_null(at);
  at += strlen(needle);
  size_t n = *at == '"' ? strcspn(at + 1, "\"") + 2 : strcspn(at, ",}");
  snprintf(old, sizeof old, "%s", at + n);
  assert_true((size_t)(at - body) + strlen(value) + strlen(old) < cap);
  sprintf(at, "%s%s", value, old);
}

/* Replaces every from in s with to, of the same length. */
static void replace_all(char *s, const char *from, const char *to) {
  assert_int_equal(strlen(from), strlen(to));
  for (char *p = s; (p = strstr(p, from)) != NULL; p += strlen(to)) memcpy(p, to, strlen(to));
}

/* The index of the last line of l holding needle. */
static size_t last_with(const lines *l, const char *needle) {
  for (size_t i = l->n; i-- > 0;)
    if (strstr(l->line[i], needle) != NULL) return i;
  fail_msg("no line holds %s", needle);
  return 0;
}

static bool dlq_unwatched(void *arg) {
  fx_case *t = arg;
  return th_queue_consumers(t->conn, "dsr.dlq.manual") == 0;
}

static bool verify_anchors_current(void *arg) {
  world *w = ((void **)arg)[1];
  fx_case *t = ((void **)arg)[0];
  static const char *const args[] = {"audit", "verify", "--anchors", NULL};
  th_result r;
  return th_run_bridge(args, t->vhost.url, w->venv, 60000, &r) == 0 && r.exit_code == 0 &&
         strstr(r.out, "; 0 records newer than their chain's last anchor") != NULL;
}

/* Writer A (the daemon, its own key) and writer B (escalate from another
 * host, its own key) write to one log. An attacker holding B's private key
 * (only B's) forges in A's open router chain: A's last record edited and
 * re-signed with B's key, once claiming A's key id and once B's; and a new
 * batch appended to A's chain, signed with B's key. Verify, holding public
 * keys only, fails each with one line naming the record, the chain and the
 * key; so does verify --anchors. The appended batch is the one only the
 * key check sees: it links to the chain and the file as a writer's would,
 * and lies past the chain's seal and anchors, where a crashed writer's
 * last records may lie too. */
static void test_forged_with_another_writers_key(void **state) {
  fx_case *t = *state;
  world w;
  assert_int_equal(fx_audit_init(&w.a), 0);
  assert_true(th_fmt(w.seal, sizeof w.seal, "%s.seal", w.a.log));
  assert_true(th_fmt(w.away, sizeof w.away, "%s.away", w.a.key));
  w.venv[0] = w.a.env_log;
  w.venv[1] = w.a.env_pub;
  w.venv[2] = NULL;
  /* Writer B: its private key in its own file, its public key beside A's. */
  char b_id[17], b_key[160], env_b_key[200];
  EVP_PKEY *b = second_writer(&w, b_id);
  assert_true(th_fmt(b_key, sizeof b_key, "%s/ops-b.key", w.a.dir));
  int fd = open(b_key, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  assert_int_equal(PEM_write_PrivateKey(f, b, NULL, NULL, 0, NULL, NULL), 1);
  assert_int_equal(fclose(f), 0);
  assert_true(th_fmt(env_b_key, sizeof env_b_key, "DLQ_BRIDGE_AUDIT_KEY_FILE=%s", b_key));

  const char *const env_a[] = {w.a.env_log,
                               w.a.env_key,
                               "DLQ_BRIDGE_MAX_ATTEMPTS=1",
                               "DLQ_BRIDGE_AUDIT_ANCHOR_INTERVAL=200ms",
                               "DLQ_BRIDGE_INSTANCE=daemon-a",
                               NULL};
  const char *const env_b[] = {w.a.env_log, env_b_key, "DLQ_BRIDGE_INSTANCE=ops-b", NULL};
  assert_int_equal(fx_start_bridge(t, env_a), 0);
  publish_failure(t, "two-1");
  publish_failure(t, "two-2");
  count_wait c = {w.a.log, "\"event\":\"dead_lettered\"", 2};
  FX_CHECK(t, th_wait_until(count_reached, &c, WAIT_MS));
  /* The daemon's SLA escalator holds DLQ items while its pass looks (every
   * 30 s): an escalate that meets one sees fewer items and escalates
   * nothing, so it runs again (each run is a chain of B's all the same). */
  static const char *const escalate[] = {"escalate", "--request-id", "two-1",
                                         "--actor",  "olga",         NULL};
  th_result r;
  for (int attempt = 0; attempt < 5 && fx_count_in_file(w.a.log, "\"event\":\"escalated\"") == 0;
       attempt++) {
    FX_CHECK(t, th_wait_until(dlq_unwatched, t, WAIT_MS));
    assert_int_equal(th_run_bridge(escalate, t->vhost.url, env_b, 60000, &r), 0);
    printf("escalate as ops-b: exit %d\n%s%s", r.exit_code, r.out, r.err);
    assert_null(strstr(r.err, "not anchored"));
  }
  assert_int_equal(fx_count_in_file(w.a.log, "\"event\":\"escalated\""), 1);
  assert_true(fx_count_in_file(w.a.log, "\"writer\":\"escalate@ops-b\"") > 0);
  /* A's router chain goes on after B's chain in the file. */
  publish_failure(t, "two-3");
  c.want = 3;
  FX_CHECK(t, th_wait_until(count_reached, &c, WAIT_MS));
  void *both[] = {t, &w};
  FX_CHECK(t, th_wait_until(verify_anchors_current, both, WAIT_MS));
  expect_intact(t, &w, false, NULL);

  lines l;
  read_lines(w.a.log, &l);
  size_t head = last_with(&l, "\"event\":\"dead_lettered\"");
  char a_chain[40], a_id[20], seq_text[24], last_chain[40], last_seq[24], last_hash[65],
      head_hash[65];
  member_of(l.line[head], "chain", a_chain, sizeof a_chain);
  member_of(l.line[head], "key", a_id, sizeof a_id);
  member_of(l.line[head], "seq", seq_text, sizeof seq_text);
  member_of(l.line[l.n - 1], "chain", last_chain, sizeof last_chain);
  member_of(l.line[l.n - 1], "seq", last_seq, sizeof last_seq);
  hash_of(l.line[head], head_hash);
  hash_of(l.line[l.n - 1], last_hash);
  assert_string_not_equal(a_id, b_id);
  assert_non_null(strstr(l.line[head], ",\"sig\":\"")); /* a batch's last record */
  printf("writer A key %s, chain %s up to seq %s at line %zu of %zu; writer B key %s\n", a_id,
         a_chain, seq_text, head + 1, l.n, b_id);
  char original[200], seal_copy[200];
  assert_true(th_fmt(original, sizeof original, "%s.orig", w.a.log));
  assert_true(th_fmt(seal_copy, sizeof seal_copy, "%s.orig", w.seal));
  copy_file(w.a.log, original);
  copy_file(w.seal, seal_copy);

  char body[REC_MAX], forged[REC_MAX + 200], want[256];
  /* 1. A's last record says two-3 went elsewhere, still naming A's key
   *    id, signed with B's key. */
  body_of(l.line[head], body, sizeof body);
  replace_all(body, "two-3", "two-9");
  sign_line(b, body, forged, sizeof forged);
  free(l.line[head]);
  assert_non_null(l.line[head] = malloc(strlen(forged) + 2));
  sprintf(l.line[head], "%s\n", forged);
  write_lines(w.a.log, &l);
  snprintf(want, sizeof want,
           "line %zu: signature does not verify with key %s (chain %s seq %s): it was made "
           "with key %s (",
           head + 1, a_id, a_chain, seq_text, b_id);
  expect_missing(t, &w, false, NULL, want);
  expect_missing(t, &w, true, NULL, want);
  expect_missing(t, &w, true, NULL, "(forged under another writer's key)");

  /* 2. A new batch in A's chain, after the file's last line, signed with
   *    B's key: a record as the daemon would write it (seq, prev and the
   *    link to the line before it right), for a task it never saw. */
  copy_file(original, w.a.log);
  copy_file(seal_copy, w.seal);
  read_lines(w.a.log, &l);
  body_of(l.line[head], body, sizeof body);
  replace_all(body, "two-3", "two-8");
  char next_seq[24], text[80], quoted[24];
  snprintf(quoted, sizeof quoted, "\"%s\"", b_id);
  snprintf(next_seq, sizeof next_seq, "%llu", strtoull(seq_text, NULL, 10) + 1);
  set_member(body, sizeof body, "seq", next_seq);
  snprintf(text, sizeof text, "\"%s\"", head_hash);
  set_member(body, sizeof body, "prev", text);
  set_member(body, sizeof body, "key", quoted);
  snprintf(text, sizeof text, "\"%s\"", last_chain);
  set_member(body, sizeof body, "after_chain", text);
  set_member(body, sizeof body, "after_seq", last_seq);
  snprintf(text, sizeof text, "\"%s\"", last_hash);
  set_member(body, sizeof body, "after_hash", text);
  sign_line(b, body, forged, sizeof forged);
  size_t appended = l.n + 1;
  assert_true(l.n < MAX_LINES);
  assert_non_null(l.line[l.n] = malloc(strlen(forged) + 2));
  sprintf(l.line[l.n++], "%s\n", forged);
  write_lines(w.a.log, &l);
  snprintf(want, sizeof want,
           "line %zu: record of chain %s names key %s, but the chain is signed with key %s",
           appended, a_chain, b_id, a_id);
  expect_missing(t, &w, false, NULL, want);
  expect_missing(t, &w, true, NULL, want);

  /* 3. A's last record edited as in 1, naming B's key id: its signature
   *    verifies with B's public key, and the chain is A's. */
  copy_file(original, w.a.log);
  copy_file(seal_copy, w.seal);
  read_lines(w.a.log, &l);
  body_of(l.line[head], body, sizeof body);
  replace_all(body, "two-3", "two-9");
  set_member(body, sizeof body, "key", quoted);
  sign_line(b, body, forged, sizeof forged);
  free(l.line[head]);
  assert_non_null(l.line[head] = malloc(strlen(forged) + 2));
  sprintf(l.line[head], "%s\n", forged);
  write_lines(w.a.log, &l);
  snprintf(want, sizeof want,
           "line %zu: record of chain %s names key %s, but the chain is signed with key %s",
           head + 1, a_chain, b_id, a_id);
  expect_missing(t, &w, false, NULL, want);
  expect_missing(t, &w, true, NULL, want);

  EVP_PKEY_free(b);
  unlink(original);
  unlink(seal_copy);
  fx_audit_remove(&w.a);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  if (getenv("DLQB_TEST_FILTER") != NULL) cmocka_set_test_filter(getenv("DLQB_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      FX_TEST(test_cut_tail_with_its_seal_lines),
      FX_TEST(test_emptied_seal),
      FX_TEST(test_deleted_chain),
      FX_TEST(test_deleted_rotated_file),
      FX_TEST(test_foreign_messages_and_forged_anchor),
      FX_TEST(test_broker_without_the_stream),
      FX_TEST(test_daemon_anchors_while_running_and_at_exit),
      FX_TEST(test_daemon_anchors_a_short_run_at_sigterm),
      FX_TEST(test_daemon_anchors_at_sigterm_after_its_links_died),
      FX_TEST(test_forged_with_another_writers_key),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the audit trail: the writer's records, the verifier
 * catching every kind of tampering with public keys alone (a wrong or
 * foreign key, a cut tail or batch, an emptied seal, rotation gaps),
 * concurrent writers, and the one reader of seal lines. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/audit/audit_private.h"
#include "dlqb/audit.h"
#include "dlqb/clock.h"
#include "dlqb/file.h"

#define MAX_LINES 4096

/* One test's scratch directory with a writer's key pair (the private key
 * at key_path, its public key in keys/), a second writer's key pair
 * (other_key_path, keys/other.pem), the ring of both public keys a
 * verifier is given, and a log path. */
typedef struct {
  char dir[64];
  char key_path[128], other_key_path[128];
  char keys[128];
  char log[128];
  char seal[160];
  dlqb_config cfg;
  dlqb_audit_keyring *ring;
} world;

static void write_text(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  assert_int_equal(fchmod(fd, mode), 0);
  close(fd);
}

/* Writes a new Ed25519 key pair: the private key (0600) and its public key. */
static int make_key_pair(const char *priv, const char *pub) {
  EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  if (k == NULL) return -1;
  int fd = open(priv, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  int ok = f != NULL && PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) == 1;
  if (f != NULL) fclose(f);
  FILE *g = fopen(pub, "w");
  ok = ok && g != NULL && PEM_write_PUBKEY(g, k) == 1;
  if (g != NULL) fclose(g);
  EVP_PKEY_free(k);
  return ok ? 0 : -1;
}

/* The ring of the public keys in w->keys, as a verifier loads them. */
static void reload_ring(world *w) {
  dlqb_audit_keyring_free(w->ring);
  w->ring = dlqb_audit_keyring_new();
  assert_non_null(w->ring);
  dlqb_error err;
  assert_int_equal(dlqb_audit_keyring_add(w->ring, w->keys, &err), DLQB_OK);
}

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  if (w == NULL) return -1;
  snprintf(w->dir, sizeof w->dir, "/tmp/dlqb-audit-XXXXXX");
  if (mkdtemp(w->dir) == NULL) return -1;
  snprintf(w->key_path, sizeof w->key_path, "%s/audit.key", w->dir);
  snprintf(w->log, sizeof w->log, "%s/audit.log", w->dir);
  snprintf(w->seal, sizeof w->seal, "%s/audit.log.seal", w->dir);
  snprintf(w->other_key_path, sizeof w->other_key_path, "%s/other.key", w->dir);
  snprintf(w->keys, sizeof w->keys, "%s/keys", w->dir);
  char pub[200];
  if (mkdir(w->keys, 0700) != 0) return -1;
  snprintf(pub, sizeof pub, "%s/unit.pem", w->keys);
  if (make_key_pair(w->key_path, pub) != 0) return -1;
  snprintf(pub, sizeof pub, "%s/other.pem", w->keys);
  if (make_key_pair(w->other_key_path, pub) != 0) return -1;
  dlqb_config_defaults(&w->cfg);
  snprintf(w->cfg.audit.log, sizeof w->cfg.audit.log, "%s", w->log);
  snprintf(w->cfg.audit.key_file, sizeof w->cfg.audit.key_file, "%s", w->key_path);
  snprintf(w->cfg.instance, sizeof w->cfg.instance, "unit-test:1");
  w->cfg.audit.rotate_bytes = 0;
  dlqb_error err;
  w->ring = dlqb_audit_keyring_new();
  if (w->ring == NULL || dlqb_audit_keyring_add(w->ring, w->keys, &err) != DLQB_OK) return -1;
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", w->dir);
  int rc = system(cmd);
  dlqb_audit_keyring_free(w->ring);
  free(w);
  return rc == 0 ? 0 : -1;
}

static dlqb_hop make_hop(dlqb_event ev, int i) {
  dlqb_hop h;
  memset(&h, 0, sizeof h);
  h.event = ev;
  snprintf(h.message_id, sizeof h.message_id, "msg-%d", i);
  snprintf(h.request_id, sizeof h.request_id, "req-%d", i);
  snprintf(h.source_system, sizeof h.source_system, "crm");
  snprintf(h.legal_basis, sizeof h.legal_basis, "gdpr_art_17");
  h.attempt = i % 5;
  snprintf(h.reason, sizeof h.reason, "timeout \"quoted\" \\ back\nslash %d", i);
  snprintf(h.cause, sizeof h.cause, "max_attempts");
  snprintf(h.from, sizeof h.from, "dsr.failed");
  snprintf(h.to, sizeof h.to, "dsr.dlq.manual");
  snprintf(h.actor, sizeof h.actor, "system");
  return h;
}

/* Records n hops of event ev in one batch. */
static void record(dlqb_audit *a, dlqb_event ev, int first, int n) {
  dlqb_hop hops[16];
  const dlqb_hop *ptrs[16];
  assert_true(n <= 16);
  for (int i = 0; i < n; i++) {
    hops[i] = make_hop(ev, first + i);
    ptrs[i] = &hops[i];
  }
  dlqb_error err;
  dlqb_status st = dlqb_audit_record(a, ptrs, (size_t)n, &err);
  if (st != DLQB_OK) fprintf(stderr, "record: %s\n", err.msg);
  assert_int_equal(st, DLQB_OK);
}

/* A closed log of one writer: chain_start, 6 hops in 3 batches, chain_end
 * = 8 lines. */
static void make_log(world *w) {
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-a", &a, &err), DLQB_OK);
  assert_non_null(a);
  record(a, DLQB_EV_RETRY_SCHEDULED, 0, 2);
  record(a, DLQB_EV_DEAD_LETTERED, 2, 2);
  record(a, DLQB_EV_POISON, 4, 2);
  dlqb_audit_close(a);
}

typedef struct {
  char *line[MAX_LINES];
  size_t n;
} lines;

static void read_lines(const char *path, lines *out) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  out->n = 0;
  char *buf = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&buf, &cap, f)) >= 0) {
    assert_true(out->n < MAX_LINES);
    out->line[out->n++] = strdup(buf);
  }
  free(buf);
  fclose(f);
}

static void write_lines(const char *path, const lines *l) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  for (size_t i = 0; i < l->n; i++) fputs(l->line[i], f);
  assert_int_equal(fclose(f), 0);
}

static void free_lines(lines *l) {
  for (size_t i = 0; i < l->n; i++) free(l->line[i]);
  l->n = 0;
}

static dlqb_status verify_one(world *w, const char *seal, dlqb_audit_summary *sum,
                              dlqb_error *err) {
  const char *files[] = {w->log};
  return dlqb_audit_verify_files(w->ring, files, 1, seal, 0, NULL, NULL, sum, err);
}

/* Asserts verification of the single log fails with a message containing
 * want. */
static void expect_bad(world *w, const char *want) {
  dlqb_error err = {{0}};
  dlqb_audit_summary sum;
  dlqb_status st = verify_one(w, w->seal, &sum, &err);
  printf("  verify: %s\n", err.msg);
  assert_int_equal(st, DLQB_EINVAL);
  if (strstr(err.msg, want) == NULL) fprintf(stderr, "expected '%s' in '%s'\n", want, err.msg);
  assert_non_null(strstr(err.msg, want));
}

static void expect_good(world *w, dlqb_audit_summary *sum) {
  dlqb_error err = {{0}};
  dlqb_status st = verify_one(w, w->seal, sum, &err);
  if (st != DLQB_OK) fprintf(stderr, "verify: %s\n", err.msg);
  assert_int_equal(st, DLQB_OK);
}

/* Signs body (a record or seal line without its end, which must name the
 * key id) with the private key at key_path as a writer does: line =
 * body + ,"sig":"..."} . The key's id goes where body has KEYID, or is
 * appended as the key member. */
static void sign_body(const char *key_path, const char *body, char *line, size_t cap) {
  EVP_PKEY *key = NULL;
  char id[DLQB_AUDIT_KEY_ID_HEX + 1], msg[4096], sig[DLQB_AUDIT_SIG_HEX + 1];
  dlqb_error err;
  assert_int_equal(dlqb_audit_key_load(key_path, &key, id, &err), DLQB_OK);
  const char *at = strstr(body, "KEYID");
  if (at != NULL) snprintf(msg, sizeof msg, "%.*s%s%s}", (int)(at - body), body, id, at + 5);
  else snprintf(msg, sizeof msg, "%s,\"key\":\"%s\"}", body, id);
  size_t n = strlen(msg);
  assert_true(dlqb__audit_sign(key, msg, n, sig));
  EVP_PKEY_free(key);
  snprintf(line, cap, "%.*s,\"sig\":\"%s\"}", (int)(n - 1), msg, sig);
}

/* ---- the key ---- */

static void test_key_file_rules(void **state) {
  world *w = *state;
  EVP_PKEY *key = NULL;
  char id[DLQB_AUDIT_KEY_ID_HEX + 1];
  dlqb_error err;
  assert_int_equal(dlqb_audit_key_load(w->key_path, &key, id, &err), DLQB_OK);
  assert_int_equal(strlen(id), DLQB_AUDIT_KEY_ID_HEX);
  EVP_PKEY_free(key);

  assert_int_equal(chmod(w->key_path, 0640), 0);
  assert_int_equal(dlqb_audit_key_load(w->key_path, &key, id, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "group or others"));
  assert_int_equal(chmod(w->key_path, 0604), 0);
  assert_int_equal(dlqb_audit_key_load(w->key_path, &key, id, &err), DLQB_EINVAL);

  /* An old HMAC key, or a public key, is not a signing key. */
  char hmac_key[160];
  snprintf(hmac_key, sizeof hmac_key, "%s/hmac.key", w->dir);
  write_text(hmac_key, "0123456789abcdef0123456789abcdef\n", 0600);
  assert_int_equal(dlqb_audit_key_load(hmac_key, &key, id, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "not an Ed25519 private key"));

  char missing[160];
  snprintf(missing, sizeof missing, "%s/none.key", w->dir);
  assert_int_equal(dlqb_audit_key_load(missing, &key, id, &err), DLQB_EINVAL);
  assert_null(key);

  /* The writer refuses a readable key too. */
  assert_int_equal(chmod(w->key_path, 0644), 0);
  dlqb_audit *a = NULL;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w", &a, &err), DLQB_EINVAL);
  assert_null(a);
}

/* A verifier is handed public keys only: a private key given to it is
 * refused, so that nobody is led to copy a writer's secret to an auditor. */
static void test_keyring_takes_public_keys_only(void **state) {
  world *w = *state;
  dlqb_audit_keyring *r = dlqb_audit_keyring_new();
  assert_non_null(r);
  dlqb_error err;
  assert_int_equal(dlqb_audit_keyring_add(r, w->key_path, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "holds a private key"));
  char empty[160];
  snprintf(empty, sizeof empty, "%s/empty", w->dir);
  assert_int_equal(mkdir(empty, 0700), 0);
  assert_int_equal(dlqb_audit_keyring_add(r, empty, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "no public key"));
  assert_int_equal(dlqb_audit_keyring_add(r, w->keys, &err), DLQB_OK);
  assert_int_equal(dlqb_audit_keyring_size(r), 2);
  dlqb_audit_keyring_free(r);
}

static void test_audit_off(void **state) {
  world *w = *state;
  w->cfg.audit.log[0] = '\0';
  dlqb_audit *a = (dlqb_audit *)w; /* must be overwritten */
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w", &a, &err), DLQB_OK);
  assert_null(a);
  dlqb_hop h = make_hop(DLQB_EV_RESOLVED, 1);
  const dlqb_hop *p = &h;
  assert_int_equal(dlqb_audit_record(NULL, &p, 1, &err), DLQB_OK);
  assert_true(dlqb_audit_healthy(NULL));
  dlqb_audit_close(NULL);
}

/* ---- what is recorded ---- */

static void test_every_event_type_is_recorded(void **state) {
  world *w = *state;
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "bridge-1", &a, &err), DLQB_OK);
  assert_true(dlqb_audit_healthy(a));
  dlqb_hop hops[DLQB_EV__COUNT];
  const dlqb_hop *ptrs[DLQB_EV__COUNT];
  for (int ev = 0; ev < DLQB_EV__COUNT; ev++) {
    hops[ev] = make_hop((dlqb_event)ev, ev);
    ptrs[ev] = &hops[ev];
  }
  assert_int_equal(dlqb_audit_record(a, ptrs, DLQB_EV__COUNT, &err), DLQB_OK);
  dlqb_audit_close(a);

  lines l;
  read_lines(w->log, &l);
  assert_int_equal(l.n, DLQB_EV__COUNT + 2);
  char prev[DLQB_AUDIT_HASH_HEX + 1] = "";
  dlqb__audit_hasher hasher;
  assert_true(dlqb__audit_hasher_init(&hasher));
  char chain[DLQB_AUDIT_CHAIN_HEX + 1] = "";
  for (size_t i = 0; i < l.n; i++) {
    json_object *o = json_tokener_parse(l.line[i]);
    assert_non_null(o);
    json_object *m;
    const char *event = json_object_object_get_ex(o, "event", &m) ? json_object_get_string(m) : "";
    if (i == 0) assert_string_equal(event, "chain_start");
    else if (i == l.n - 1) assert_string_equal(event, "chain_end");
    else {
      int ev = (int)i - 1;
      assert_string_equal(event, dlqb_event_name((dlqb_event)ev));
      char want[32];
      snprintf(want, sizeof want, "msg-%d", ev);
      assert_true(json_object_object_get_ex(o, "message_id", &m));
      assert_string_equal(json_object_get_string(m), want);
      snprintf(want, sizeof want, "req-%d", ev);
      assert_true(json_object_object_get_ex(o, "request_id", &m));
      assert_string_equal(json_object_get_string(m), want);
      static const char *const members[] = {"source_system", "legal_basis", "attempt", "reason",
                                            "cause",         "from",        "to",      "actor",
                                            "broker_user"};
      for (size_t k = 0; k < sizeof members / sizeof members[0]; k++)
        assert_true(json_object_object_get_ex(o, members[k], &m));
      json_object_object_get_ex(o, "reason", &m);
      /* Escaped, and the control character made harmless. */
      assert_non_null(strstr(json_object_get_string(m), "\"quoted\" \\ back?slash"));
    }
    assert_true(json_object_object_get_ex(o, "writer", &m));
    assert_string_equal(json_object_get_string(m), "bridge-1");
    assert_true(json_object_object_get_ex(o, "time", &m));
    assert_true(json_object_object_get_ex(o, "seq", &m));
    assert_int_equal(json_object_get_int64(m), (int64_t)i);
    assert_true(json_object_object_get_ex(o, "chain", &m));
    if (i == 0) snprintf(chain, sizeof chain, "%s", json_object_get_string(m));
    assert_string_equal(json_object_get_string(m), chain);
    assert_true(json_object_object_get_ex(o, "prev", &m));
    if (i > 0) assert_string_equal(json_object_get_string(m), prev);
    assert_true(json_object_object_get_ex(o, "key", &m));
    assert_int_equal(strlen(json_object_get_string(m)), DLQB_AUDIT_KEY_ID_HEX);
    /* One signature per batch: this batch's last record (and chain_start
     * and chain_end, each a batch of its own). */
    assert_int_equal(json_object_object_get_ex(o, "sig", &m), i == 0 || i >= l.n - 2);
    size_t body;
    const char *sig;
    assert_true(dlqb__audit_split(l.line[i], strlen(l.line[i]) - 1, &body, &sig));
    assert_true(dlqb__audit_hash_body(&hasher, l.line[i], body, prev));
    assert_null(strstr(l.line[i], "PRIVATE"));
    json_object_put(o);
  }
  dlqb__audit_hasher_release(&hasher);
  free_lines(&l);

  dlqb_audit_summary sum;
  expect_good(w, &sum);
  assert_int_equal(sum.records, DLQB_EV__COUNT + 2);
  assert_int_equal(sum.chains, 1);
  assert_int_equal(sum.chains_ended, 1);
  assert_int_equal(sum.sealed, 1);
}

/* ---- tampering ---- */

/* Edits the log in place: the last character of needle, on line `line`
 * (0-based), becomes '9'. */
static void edit_log(world *w, size_t line, const char *needle) {
  lines l;
  read_lines(w->log, &l);
  assert_true(line < l.n);
  char *p = strstr(l.line[line], needle);
  assert_non_null(p);
  p[strlen(needle) - 1] = '9';
  write_lines(w->log, &l);
  free_lines(&l);
}

static void test_edited_record(void **state) {
  world *w = *state;
  make_log(w);
  edit_log(w, 2, "msg-1");
  expect_bad(w, "line 3: signature does not verify with key");
}

static void test_deleted_record(void **state) {
  world *w = *state;
  make_log(w);
  lines l;
  read_lines(w->log, &l);
  free(l.line[3]);
  memmove(&l.line[3], &l.line[4], (l.n - 4) * sizeof l.line[0]);
  l.n--;
  write_lines(w->log, &l);
  free_lines(&l);
  expect_bad(w, "line 4: chain");
  expect_bad(w, "jumps from seq 2 to seq 4");
}

static void test_deleted_chain_start(void **state) {
  world *w = *state;
  make_log(w);
  lines l;
  read_lines(w->log, &l);
  free(l.line[0]);
  memmove(&l.line[0], &l.line[1], (l.n - 1) * sizeof l.line[0]);
  l.n--;
  write_lines(w->log, &l);
  free_lines(&l);
  expect_bad(w, "line 1: record of unknown chain");
}

static void test_inserted_copy(void **state) {
  world *w = *state;
  make_log(w);
  lines l;
  read_lines(w->log, &l);
  memmove(&l.line[3], &l.line[2], (l.n - 2) * sizeof l.line[0]);
  l.line[2] = strdup(l.line[3]);
  l.n++;
  write_lines(w->log, &l);
  free_lines(&l);
  expect_bad(w, "line 4: chain");
  expect_bad(w, "goes back from seq 2 to seq 2");
}

static void test_inserted_forgery(void **state) {
  world *w = *state;
  make_log(w);
  lines l;
  read_lines(w->log, &l);
  /* A well-formed record with a made-up signature. */
  char forged[2048];
  snprintf(forged, sizeof forged, "%s", l.line[2]);
  char *sig = strstr(forged, ",\"sig\":\"");
  assert_non_null(sig);
  memset(sig + 8, 'a', DLQB_AUDIT_SIG_HEX);
  memmove(&l.line[5], &l.line[4], (l.n - 4) * sizeof l.line[0]);
  l.line[4] = strdup(forged);
  l.n++;
  write_lines(w->log, &l);
  free_lines(&l);
  expect_bad(w, "line 5: signature does not verify with key");
}

static void test_reordered_records(void **state) {
  world *w = *state;
  make_log(w);
  lines l;
  read_lines(w->log, &l);
  char *t = l.line[2];
  l.line[2] = l.line[3];
  l.line[3] = t;
  write_lines(w->log, &l);
  free_lines(&l);
  expect_bad(w, "line 3: chain");
  expect_bad(w, "jumps from seq 1 to seq 3");
}

/* The verifier holds only the other writer's public key: every line names
 * a key it does not have. */
static void test_wrong_key(void **state) {
  world *w = *state;
  make_log(w);
  char own[200];
  snprintf(own, sizeof own, "%s/unit.pem", w->keys);
  assert_int_equal(unlink(own), 0);
  reload_ring(w);
  expect_bad(w, "seal: line 1: signed with key");
  expect_bad(w, "which is not among the 1 public keys given");
  dlqb_error err;
  dlqb_audit_summary sum;
  assert_int_equal(verify_one(w, NULL, &sum, &err), DLQB_EINVAL);
  printf("  verify: %s\n", err.msg);
  assert_non_null(strstr(err.msg, "line 1: signed with key"));
}

/* The audit trail is checked with public keys alone: with every private
 * key gone from the machine, a genuine log verifies. */
static void test_verifier_needs_no_secret(void **state) {
  world *w = *state;
  make_log(w);
  assert_int_equal(unlink(w->key_path), 0);
  assert_int_equal(unlink(w->other_key_path), 0);
  dlqb_audit_summary sum;
  expect_good(w, &sum);
  assert_int_equal(sum.records, 8);
  assert_int_equal(sum.sealed, 1);
}

/* Another writer (an operator host with its own key) rewrites a record of
 * the daemon's chain and signs it with its own key: its signature is
 * genuine, but not the chain's. */
static void test_forged_with_another_writers_key(void **state) {
  world *w = *state;
  make_log(w);
  lines l;
  read_lines(w->log, &l);
  /* Line 3 ends a batch (signed): cut its sig and key, re-sign as other. */
  char body[2048], forged[2200];
  snprintf(body, sizeof body, "%s", l.line[2]);
  char *key = strstr(body, ",\"key\":\"");
  assert_non_null(key);
  memcpy(key + 8, "KEYID", 5);
  memmove(key + 13, key + 8 + DLQB_AUDIT_KEY_ID_HEX, strlen(key + 8 + DLQB_AUDIT_KEY_ID_HEX) + 1);
  char *reason = strstr(body, "worker said no");
  if (reason != NULL) memcpy(reason, "worker said ok", 14);
  *strstr(body, ",\"sig\":\"") = '\0';
  sign_body(w->other_key_path, body, forged, sizeof forged);
  free(l.line[2]);
  l.line[2] = malloc(strlen(forged) + 2);
  sprintf(l.line[2], "%s\n", forged);
  write_lines(w->log, &l);
  free_lines(&l);
  expect_bad(w, "line 3: record of chain");
  expect_bad(w, "but the chain is signed with key");
  /* The same record naming the daemon's key id, signed by the other key. */
  read_lines(w->log, &l);
  char *k = strstr(l.line[2], ",\"key\":\"");
  const char *daemon_key = strstr(l.line[0], ",\"key\":\"");
  char daemon_id[DLQB_AUDIT_KEY_ID_HEX + 1];
  snprintf(daemon_id, sizeof daemon_id, "%.*s", DLQB_AUDIT_KEY_ID_HEX, daemon_key + 8);
  memcpy(k + 8, daemon_id, DLQB_AUDIT_KEY_ID_HEX);
  write_lines(w->log, &l);
  free_lines(&l);
  expect_bad(w, "line 3: signature does not verify with key");
  expect_bad(w, " seq 2) (record edited, or forged under another writer's key id)");
  /* Signed by the other key over the daemon's key id: verify names the
   * chain and seq the record claims, and the key that made it. */
  char claimed[2048], resigned[2200];
  char *at = strstr(body, "KEYID");
  assert_non_null(at);
  snprintf(claimed, sizeof claimed, "%.*s%s%s}", (int)(at - body), body, daemon_id, at + 5);
  EVP_PKEY *other = NULL;
  char other_id[DLQB_AUDIT_KEY_ID_HEX + 1], sig[DLQB_AUDIT_SIG_HEX + 1];
  dlqb_error err;
  assert_int_equal(dlqb_audit_key_load(w->other_key_path, &other, other_id, &err), DLQB_OK);
  assert_true(dlqb__audit_sign(other, claimed, strlen(claimed), sig));
  EVP_PKEY_free(other);
  snprintf(resigned, sizeof resigned, "%.*s,\"sig\":\"%s\"}", (int)strlen(claimed) - 1, claimed,
           sig);
  read_lines(w->log, &l);
  free(l.line[2]);
  l.line[2] = malloc(strlen(resigned) + 2);
  sprintf(l.line[2], "%s\n", resigned);
  write_lines(w->log, &l);
  free_lines(&l);
  expect_bad(w, "line 3: signature does not verify with key");
  expect_bad(w, " seq 2): it was made with key ");
  expect_bad(w, "other.pem) (forged under another writer's key)");
}

/* A batch cut short (its signed last record gone, the seal not checked):
 * what is left is covered by no signature. */
static void test_cut_batch(void **state) {
  world *w = *state;
  make_log(w);
  lines l;
  read_lines(w->log, &l);
  free(l.line[7]);
  free(l.line[6]);
  l.n = 6; /* chain_start, 2 batches of 2, the first record of the third */
  write_lines(w->log, &l);
  free_lines(&l);
  dlqb_error err;
  dlqb_audit_summary sum;
  assert_int_equal(verify_one(w, NULL, &sum, &err), DLQB_EINVAL);
  printf("  verify: %s\n", err.msg);
  assert_non_null(strstr(err.msg, "ends at seq 5 in 1 record no signature covers"));
}

/* The seal emptied (or replaced by an empty file), the log's tail cut
 * with it: verify names the chain that has no seal line. */
static void test_emptied_seal(void **state) {
  world *w = *state;
  make_log(w);
  write_text(w->seal, "", 0600);
  expect_bad(w, "has no seal line");
}

/* A revoked key (its .pem renamed .pem.revoked): what it signed fails,
 * naming the key. */
static void test_revoked_key(void **state) {
  world *w = *state;
  make_log(w);
  char pem[200], revoked[220];
  snprintf(pem, sizeof pem, "%s/unit.pem", w->keys);
  snprintf(revoked, sizeof revoked, "%s/unit.pem.revoked", w->keys);
  assert_int_equal(rename(pem, revoked), 0);
  reload_ring(w);
  expect_bad(w, "which is revoked");
  /* ... and a writer does not sign with a key revoked where it looks. */
  snprintf(w->cfg.audit.public_keys, sizeof w->cfg.audit.public_keys, "%s", w->keys);
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w", &a, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "revoked"));
}

/* A version 1 (HMAC) log is named as such, not called tampered. */
static void test_version_1_log_is_named(void **state) {
  world *w = *state;
  write_text(w->log,
             "{\"v\":1,\"chain\":\"5cbe368e45f65150ed4278e33636866a\",\"seq\":0,\"prev\":\"00\","
             "\"event\":\"chain_start\",\"mac\":\"0000000000000000000000000000000000000000000000"
             "000000000000000000\"}\n",
             0600);
  write_text(w->seal, "", 0600);
  expect_bad(w, "line 1: a version 1 record (HMAC");
}

static void test_truncated_tail(void **state) {
  world *w = *state;
  make_log(w);
  lines l;
  read_lines(w->log, &l);
  size_t n = l.n;
  l.n -= 2; /* drop the last hop and chain_end */
  write_lines(w->log, &l);
  l.n = n;
  free_lines(&l);
  expect_bad(w, "line 7: missing: chain");
  expect_bad(w, "ends at seq 5 but the seal vouches for seq 7");
  /* Without the seal, a cut inside a batch still shows (what is left of
   * the batch is signed by nobody); a cut of whole batches does not: that
   * is what the seal (and the anchors) are for. */
  dlqb_error err;
  dlqb_audit_summary sum;
  assert_int_equal(verify_one(w, NULL, &sum, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "no signature covers"));
  read_lines(w->log, &l);
  l.n -= 1; /* the third batch's first record too: two whole batches gone */
  write_lines(w->log, &l);
  l.n = n - 2;
  free_lines(&l);
  assert_int_equal(verify_one(w, NULL, &sum, &err), DLQB_OK);
}

static void test_torn_last_line(void **state) {
  world *w = *state;
  make_log(w);
  struct stat sb;
  assert_int_equal(stat(w->log, &sb), 0);
  assert_int_equal(truncate(w->log, sb.st_size - 10), 0);
  expect_bad(w, "line 8: incomplete record");
}

static void test_whole_log_emptied(void **state) {
  world *w = *state;
  make_log(w);
  assert_int_equal(truncate(w->log, 0), 0);
  expect_bad(w, "line 1: missing: the seal vouches for chain");
}

static void test_seal_missing_or_edited(void **state) {
  world *w = *state;
  make_log(w);
  lines l;
  read_lines(w->seal, &l);
  /* One seal line per batch: chain_start, three batches, chain_end. */
  assert_int_equal(l.n, 5);
  char *p = strstr(l.line[4], "\"seq\":7");
  assert_non_null(p);
  p[6] = '5'; /* claim less, to hide a cut */
  write_lines(w->seal, &l);
  free_lines(&l);
  expect_bad(w, "seal: line 5: signature does not verify with key");
  assert_int_equal(unlink(w->seal), 0);
  expect_bad(w, "no seal file");
}

/* The seal only ever moves a chain forward: an older genuine line put
 * back at the end (to hide a cut) is caught; a seal that lags the log (a
 * crash lost its last lines, or tore the last one) is accepted. */
static void test_seal_order_and_lag(void **state) {
  world *w = *state;
  make_log(w);
  lines l;
  read_lines(w->seal, &l);
  assert_int_equal(l.n, 5);
  char *latest = l.line[4];
  l.line[4] = strdup(l.line[1]); /* seq 3 again, after seq 5 */
  l.n = 6;
  l.line[5] = l.line[4];
  l.line[4] = latest;
  write_lines(w->seal, &l);
  expect_bad(w, "seal: line 6: chain");
  expect_bad(w, "goes back from seq 7 to");

  l.n = 3; /* the last two lines lost in a crash */
  write_lines(w->seal, &l);
  dlqb_audit_summary sum;
  expect_good(w, &sum);
  assert_int_equal(sum.sealed, 1);

  /* A torn last line (no newline) vouches for nothing and accuses no one. */
  FILE *f = fopen(w->seal, "a");
  assert_non_null(f);
  fputs("{\"v\":1,\"type\":\"seal\",\"cha", f);
  fclose(f);
  expect_good(w, &sum);
  l.n = 6;
  free_lines(&l);
}

/* ---- the visitor (audit show) ---- */

typedef struct {
  int lines, with_req3, fail_after;
} visit_count;

static bool count_visit(void *ctx, const char *line, size_t len) {
  visit_count *c = ctx;
  char copy[4096];
  assert_true(len < sizeof copy);
  memcpy(copy, line, len);
  copy[len] = '\0';
  assert_null(strchr(copy, '\n')); /* one line, without its newline */
  c->lines++;
  c->with_req3 += strstr(copy, "\"request_id\":\"req-3\"") != NULL;
  return c->fail_after == 0 || c->lines < c->fail_after;
}

static void test_visitor_sees_every_accepted_line(void **state) {
  world *w = *state;
  make_log(w);
  const char *files[] = {w->log};
  dlqb_audit_summary sum;
  dlqb_error err;
  visit_count c = {0};
  assert_int_equal(
      dlqb_audit_verify_files(w->ring, files, 1, w->seal, 0, count_visit, &c, &sum, &err), DLQB_OK);
  assert_int_equal(c.lines, 8); /* chain_start, 6 hops, chain_end */
  assert_int_equal(c.with_req3, 1);

  /* A visitor that runs out of memory stops the verification. */
  visit_count stop = {.fail_after = 3};
  assert_int_equal(
      dlqb_audit_verify_files(w->ring, files, 1, w->seal, 0, count_visit, &stop, &sum, &err),
      DLQB_ENOMEM);
  assert_int_equal(stop.lines, 3);

  /* An edited line is never shown to the visitor, nor anything after it. */
  edit_log(w, 4, "req-3");
  visit_count bad = {0};
  assert_int_equal(
      dlqb_audit_verify_files(w->ring, files, 1, w->seal, 0, count_visit, &bad, &sum, &err),
      DLQB_EINVAL);
  assert_int_equal(bad.lines, 4);
  assert_int_equal(bad.with_req3, 0);
}

static int matching_lines(const lines *l, const char *request_id, const char *message_id) {
  dlqb_audit_filter f;
  dlqb_audit_filter_init(&f, request_id, message_id);
  int n = 0;
  for (size_t i = 0; i < l->n; i++)
    n += dlqb_audit_filter_match(&f, l->line[i], strlen(l->line[i]) - 1); /* without '\n' */
  return n;
}

static void test_filter_picks_one_requests_hops(void **state) {
  world *w = *state;
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-a", &a, &err), DLQB_OK);
  record(a, DLQB_EV_RETRY_SCHEDULED, 0, 12); /* req-0 .. req-11 */
  dlqb_hop odd = make_hop(DLQB_EV_ESCALATED, 1);
  snprintf(odd.request_id, sizeof odd.request_id, "say \"hi\" \\ there");
  const dlqb_hop *p = &odd;
  assert_int_equal(dlqb_audit_record(a, &p, 1, &err), DLQB_OK);
  dlqb_audit_close(a);
  lines l;
  read_lines(w->log, &l);
  assert_int_equal(l.n, 1 + 12 + 1 + 1);

  assert_int_equal(matching_lines(&l, "req-1", NULL), 1); /* not req-10, req-11 */
  assert_int_equal(matching_lines(&l, "req-", NULL), 0);
  assert_int_equal(matching_lines(&l, NULL, "msg-1"), 2); /* msg-1 twice: the odd hop too */
  assert_int_equal(matching_lines(&l, "req-1", "msg-1"), 1);
  assert_int_equal(matching_lines(&l, "req-1", "msg-2"), 0);
  assert_int_equal(matching_lines(&l, NULL, NULL), 0); /* no filter: nothing */
  /* An ID the log escapes is found by parsing every line. */
  dlqb_audit_filter f;
  dlqb_audit_filter_init(&f, "say \"hi\" \\ there", NULL);
  assert_int_equal(f.needle_len, 0);
  assert_int_equal(matching_lines(&l, "say \"hi\" \\ there", NULL), 1);
  free_lines(&l);
}

/* ---- fail closed, and recovery ---- */

/* The disk fills up (every write fails with ENOSPC) after `written`
 * records went in, and frees again later. */
static void write_failure_then_recovery(world *w, int written) {
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w", &a, &err), DLQB_OK);
  if (written > 0) record(a, DLQB_EV_RETRY_SCHEDULED, 0, written);

  char saved[160];
  snprintf(saved, sizeof saved, "%s.saved", w->log);
  bool existed = rename(w->log, saved) == 0;
  assert_int_equal(symlink("/dev/full", w->log), 0);
  dlqb_hop h = make_hop(DLQB_EV_DEAD_LETTERED, 10);
  const dlqb_hop *p = &h;
  uint64_t ticket = 0;
  assert_int_equal(dlqb_audit_submit(a, &p, 1, &ticket, &err), DLQB_OK);
  /* Each wait sees one more failed attempt of the writer's own retries
   * (retries with nothing new queued, too); the hop is never durable
   * meanwhile (so the pipe acks nothing). */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(dlqb_audit_wait(a, ticket, &err), DLQB_EIO);
    assert_false(dlqb_audit_healthy(a));
    assert_true(dlqb_audit_durable(a) < ticket);
  }
  printf("  failing: %s\n", err.msg);
  assert_non_null(strstr(err.msg, "audit log"));

  /* Writable again: the writer's next retry records the hop, once, with
   * the chain unbroken; nobody submits it again. */
  assert_int_equal(unlink(w->log), 0);
  if (existed) assert_int_equal(rename(saved, w->log), 0);
  assert_int_equal(dlqb_audit_wait(a, ticket, &err), DLQB_OK);
  assert_true(dlqb_audit_durable(a) >= ticket);
  assert_true(dlqb_audit_healthy(a));
  dlqb_audit_close(a);
  lines l;
  read_lines(w->log, &l);
  /* chain start, the records, the hop, chain end */
  assert_int_equal(l.n, 1 + written + 1 + 1);
  free_lines(&l);
  dlqb_audit_summary sum;
  expect_good(w, &sum);
}

static void test_write_failure_then_recovery(void **state) {
  write_failure_then_recovery(*state, 3);
}

/* The very first write fails: the writer retries a batch while its queue
 * was never allocated (UBSan caught a memcpy from NULL there in CI). */
static void test_first_write_fails(void **state) { write_failure_then_recovery(*state, 0); }

/* Group commit: hops handed over without waiting get increasing tickets,
 * and a ticket is durable only once its records are in the file. */
static void test_submit_without_waiting(void **state) {
  world *w = *state;
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w", &a, &err), DLQB_OK);
  enum { N = 300 };
  uint64_t prev = 0, ticket = 0;
  for (int i = 0; i < N; i++) {
    dlqb_hop h = make_hop(DLQB_EV_RETRY_SCHEDULED, i);
    const dlqb_hop *p = &h;
    assert_int_equal(dlqb_audit_submit(a, &p, 1, &ticket, &err), DLQB_OK);
    assert_true(ticket > prev);
    prev = ticket;
  }
  assert_int_equal(dlqb_audit_wait(a, ticket, &err), DLQB_OK);
  assert_true(dlqb_audit_durable(a) >= ticket);
  lines l;
  read_lines(w->log, &l);
  assert_int_equal(l.n, 1 + N); /* chain_start and every hop, before close */
  free_lines(&l);
  /* An empty submission names the latest ticket: nothing new to wait for. */
  uint64_t again = 0;
  assert_int_equal(dlqb_audit_submit(a, NULL, 0, &again, &err), DLQB_OK);
  assert_int_equal(again, ticket);
  dlqb_audit_close(a);
  dlqb_audit_summary sum;
  expect_good(w, &sum);
  assert_int_equal(sum.records, 1 + N + 1);
}

static void test_torn_write_is_repaired(void **state) {
  world *w = *state;
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w", &a, &err), DLQB_OK);
  record(a, DLQB_EV_RETRY_SCHEDULED, 0, 2);
  /* Another writer died halfway through a record. */
  int fd = open(w->log, O_WRONLY | O_APPEND);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "{\"v\":1,\"chain\":\"ab", 18), 18);
  close(fd);
  record(a, DLQB_EV_RETRY_SCHEDULED, 2, 2);
  dlqb_audit_close(a);
  dlqb_audit_summary sum;
  expect_good(w, &sum);
  assert_int_equal(sum.records, 6);
}

/* ---- rotation ---- */

static dlqb_status verify_list(world *w, const char *const *files, size_t n, int partial,
                               dlqb_error *err) {
  dlqb_audit_summary sum;
  dlqb_status st =
      dlqb_audit_verify_files(w->ring, files, n, w->seal, partial, NULL, NULL, &sum, err);
  printf("  verify %zu files: %s\n", n, st == DLQB_OK ? "ok" : err->msg);
  return st;
}

/* A log that never rotated lists as itself alone (the sort of no rotated
 * files once handed qsort a NULL array: UBSan caught it). */
static void test_list_files_without_rotation(void **state) {
  world *w = *state;
  make_log(w);
  char **files = NULL;
  size_t n = 0;
  dlqb_error err;
  assert_int_equal(dlqb_audit_list_files(w->log, &files, &n, &err), DLQB_OK);
  assert_int_equal(n, 1);
  assert_string_equal(files[0], w->log);
  dlqb_audit_files_free(files, n);
}

/* A seal line per batch adds up; once the seal has grown by 256 KiB the
 * writer keeps only each chain's latest line, and verify still finds the
 * tail complete. */
static void test_seal_is_compacted(void **state) {
  world *w = *state;
  dlqb_audit *a = NULL, *b = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w1", &a, &err), DLQB_OK);
  assert_int_equal(dlqb_audit_open(&w->cfg, "w2", &b, &err), DLQB_OK);
  enum { BATCHES = 1200 }; /* ~330 bytes of seal each: ~400 KiB unless compacted */
  for (int i = 0; i < BATCHES; i++) record(i % 2 ? b : a, DLQB_EV_RETRY_SCHEDULED, i, 1);
  dlqb_audit_close(b); /* one chain ended, one open */
  struct stat sb;
  assert_int_equal(stat(w->seal, &sb), 0);
  printf("  seal: %lld bytes after %d batches\n", (long long)sb.st_size, BATCHES);
  assert_true(sb.st_size < 256 * 1024);
  lines l;
  read_lines(w->seal, &l);
  assert_true(l.n < (size_t)BATCHES / 2);
  free_lines(&l);
  dlqb_audit_summary sum;
  expect_good(w, &sum);
  assert_int_equal(sum.records, 2 + BATCHES + 1);
  assert_int_equal(sum.sealed, 2);
  dlqb_audit_close(a);
}

/* A rotation reads the whole seal back. A seal of tens of thousands of
 * lines (as the append-only seal grew before it was compacted) must not
 * take it quadratic time: parsing is bounded by each line, not by the rest
 * of the buffer. */
static void test_rotation_with_a_long_seal(void **state) {
  world *w = *state;
  w->cfg.audit.rotate_bytes = 4096;
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w1", &a, &err), DLQB_OK);
  record(a, DLQB_EV_RETRY_SCHEDULED, 0, 1);
  lines l;
  read_lines(w->seal, &l);
  assert_true(l.n >= 1);
  FILE *f = fopen(w->seal, "a");
  assert_non_null(f);
  for (int i = 0; i < 50000; i++) fputs(l.line[l.n - 1], f); /* the same line, repeated */
  fclose(f);
  free_lines(&l);
  /* Past 4 KiB: the next batches rotate, reading the long seal back. */
  for (int i = 1; i < 30; i++) record(a, DLQB_EV_RETRY_SCHEDULED, i * 2, 2);
  dlqb_audit_close(a);
  char **files = NULL;
  size_t n = 0;
  assert_int_equal(dlqb_audit_list_files(w->log, &files, &n, &err), DLQB_OK);
  assert_true(n >= 2);
  dlqb_audit_summary sum;
  assert_int_equal(dlqb_audit_verify_files(w->ring, (const char *const *)files, n, w->seal, 0, NULL,
                                           NULL, &sum, &err),
                   DLQB_OK);
  assert_int_equal(sum.records, 1 + 1 + 58 + 1);
  dlqb_audit_files_free(files, n);
}

static void test_rotation(void **state) {
  world *w = *state;
  w->cfg.audit.rotate_bytes = 4096;
  dlqb_audit *a = NULL, *b = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w1", &a, &err), DLQB_OK);
  assert_int_equal(dlqb_audit_open(&w->cfg, "w2", &b, &err), DLQB_OK);
  for (int i = 0; i < 40; i++) {
    record(a, DLQB_EV_RETRY_SCHEDULED, i * 2, 2);
    if (i % 3 == 0) record(b, DLQB_EV_ESCALATED, i, 1);
  }
  dlqb_audit_close(b);
  record(a, DLQB_EV_RESOLVED, 100, 1);
  dlqb_audit_close(a);

  char **files = NULL;
  size_t n = 0;
  assert_int_equal(dlqb_audit_list_files(w->log, &files, &n, &err), DLQB_OK);
  printf("  %zu files\n", n);
  assert_true(n >= 4);
  assert_string_equal(files[n - 1], w->log);
  dlqb_audit_summary sum;
  assert_int_equal(dlqb_audit_verify_files(w->ring, (const char *const *)files, n, w->seal, 0, NULL,
                                           NULL, &sum, &err),
                   DLQB_OK);
  assert_int_equal(sum.chains, 2);
  assert_int_equal(sum.chains_ended, 2);
  assert_int_equal(sum.records, 2 + 80 + 14 + 1 + 2);
  assert_int_equal(sum.rotations, n - 1);

  const char *list[64];
  assert_true(n < 64);
  /* A middle file missing. */
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (i != 1) list[k++] = files[i];
  assert_int_equal(verify_list(w, list, k, 0, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "line 1: does not follow"));
  /* Out of order. */
  for (size_t i = 0; i < n; i++) list[i] = files[i];
  list[1] = files[2];
  list[2] = files[1];
  assert_int_equal(verify_list(w, list, n, 0, &err), DLQB_EINVAL);
  /* Only the newest file: refused, unless --partial. */
  list[0] = files[n - 1];
  assert_int_equal(verify_list(w, list, 1, 0, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "line 1: this file continues"));
  assert_int_equal(verify_list(w, list, 1, 1, &err), DLQB_OK);
  /* The first file missing. */
  for (size_t i = 1; i < n; i++) list[i - 1] = files[i];
  assert_int_equal(verify_list(w, list, n - 1, 0, &err), DLQB_EINVAL);

  /* A rotated file cut by its last line. */
  lines l;
  read_lines(files[1], &l);
  l.n--;
  write_lines(files[1], &l);
  l.n++;
  free_lines(&l);
  assert_int_equal(verify_list(w, (const char *const *)files, n, 0, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "line 1: does not follow"));
  dlqb_audit_files_free(files, n);
}

/* ---- concurrent writers ---- */

#define WRITERS 3
#define BATCHES 150

static void test_concurrent_writers(void **state) {
  world *w = *state;
  w->cfg.audit.rotate_bytes = 64 * 1024;
  pid_t pids[WRITERS];
  for (int i = 0; i < WRITERS; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      char name[32];
      snprintf(name, sizeof name, "writer-%d", i);
      dlqb_audit *a = NULL;
      dlqb_error err;
      if (dlqb_audit_open(&w->cfg, name, &a, &err) != DLQB_OK) _exit(1);
      for (int b = 0; b < BATCHES; b++) {
        dlqb_hop hops[3];
        const dlqb_hop *ptrs[3];
        for (int j = 0; j < 3; j++) {
          hops[j] = make_hop(DLQB_EV_DEAD_LETTERED, b * 3 + j);
          ptrs[j] = &hops[j];
        }
        if (dlqb_audit_record(a, ptrs, 3, &err) != DLQB_OK) _exit(2);
      }
      dlqb_audit_close(a);
      _exit(0);
    }
  }
  for (int i = 0; i < WRITERS; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  char **files = NULL;
  size_t n = 0;
  dlqb_error err;
  assert_int_equal(dlqb_audit_list_files(w->log, &files, &n, &err), DLQB_OK);
  dlqb_audit_summary sum;
  dlqb_status st = dlqb_audit_verify_files(w->ring, (const char *const *)files, n, w->seal, 0, NULL,
                                           NULL, &sum, &err);
  if (st != DLQB_OK) fprintf(stderr, "verify: %s\n", err.msg);
  assert_int_equal(st, DLQB_OK);
  printf("  %zu files, %lu records, %lu rotations\n", n, sum.records, sum.rotations);
  assert_int_equal(sum.chains, WRITERS);
  assert_int_equal(sum.chains_ended, WRITERS);
  assert_int_equal(sum.records, WRITERS * (2 + BATCHES * 3));
  assert_true(sum.rotations >= 1);
  dlqb_audit_files_free(files, n);
}

static size_t count_lines(const char *path) {
  lines l;
  read_lines(path, &l);
  size_t n = l.n;
  free_lines(&l);
  return n;
}

/* A line someone else appended (not a record) must not stop the writers:
 * they go on recording after it, and verify names the line. */
static void test_writer_appends_after_a_foreign_line(void **state) {
  world *w = *state;
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-a", &a, &err), DLQB_OK);
  FILE *f = fopen(w->log, "a");
  assert_non_null(f);
  fputs("not a record\n", f);
  fclose(f);
  record(a, DLQB_EV_RETRY_SCHEDULED, 0, 2);
  dlqb_audit_close(a);
  assert_int_equal(count_lines(w->log), 5);
  expect_bad(w, "line 2: not an audit record");
}

/* ---- links between chains, and anchors (docs/audit.md) ---- */

/* Keeps the lines of l that do not contain needle (a chain id): what an
 * attacker who deletes a chain from the log, or the seal, leaves. */
static void drop_lines_with(lines *l, const char *needle) {
  size_t k = 0;
  for (size_t i = 0; i < l->n; i++) {
    if (strstr(l->line[i], needle) != NULL) free(l->line[i]);
    else l->line[k++] = l->line[i];
  }
  l->n = k;
}

/* The chain id of the writer's first record in the log file (line 1). */
static void chain_of_first_line(const char *log, size_t line, char *id) {
  lines l;
  read_lines(log, &l);
  assert_true(line < l.n);
  const char *at = strstr(l.line[line], "\"chain\":\"");
  assert_non_null(at);
  memcpy(id, at + 9, DLQB_AUDIT_CHAIN_HEX);
  id[DLQB_AUDIT_CHAIN_HEX] = '\0';
  free_lines(&l);
}

/* A chain deleted whole from the log and the seal together, followed by
 * another writer's chain: the later chain's first batch names the deleted
 * chain's last record, so verify names it even with the seal cut back. */
static void test_deleted_chain_is_named_by_the_next(void **state) {
  world *w = *state;
  make_log(w); /* writer-a: lines 1-8 */
  dlqb_audit *b = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-b", &b, &err), DLQB_OK);
  record(b, DLQB_EV_REPLAYED, 10, 2);
  dlqb_audit_close(b);
  expect_good(w, NULL);
  char a_id[DLQB_AUDIT_CHAIN_HEX + 1];
  chain_of_first_line(w->log, 0, a_id);
  lines log, seal;
  read_lines(w->log, &log);
  read_lines(w->seal, &seal);
  char needle[64];
  snprintf(needle, sizeof needle, "\"chain\":\"%s\"", a_id);
  drop_lines_with(&log, needle);
  drop_lines_with(&seal, needle);
  write_lines(w->log, &log);
  write_lines(w->seal, &seal);
  free_lines(&log);
  free_lines(&seal);
  char want[160];
  snprintf(want, sizeof want,
           "line 1: missing: chain %s (up to seq 7 at least) is not in the "
           "files",
           a_id);
  expect_bad(w, want);
  expect_bad(w, "(the chain was deleted whole)");
}

/* Batches of one chain deleted in the middle of the file, with the seal
 * cut to match: the next writer's batch names where the file stood. */
static void test_deleted_batches_before_another_chain(void **state) {
  world *w = *state;
  dlqb_audit *a = NULL, *b = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-a", &a, &err), DLQB_OK);
  record(a, DLQB_EV_RETRY_SCHEDULED, 0, 2); /* a: seq 1-2, lines 2-3 */
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-b", &b, &err), DLQB_OK); /* line 4 */
  record(a, DLQB_EV_RETRY_SCHEDULED, 2, 2); /* a: seq 3-4, lines 5-6 */
  record(b, DLQB_EV_REPLAYED, 10, 1);       /* b: seq 1, line 7, after a's seq 4 */
  dlqb_audit_close(b);
  dlqb_audit_close(a);
  expect_good(w, NULL);
  lines log;
  read_lines(w->log, &log);
  assert_int_equal(log.n, 9);
  free(log.line[4]);
  free(log.line[5]);
  memmove(&log.line[4], &log.line[6], 3 * sizeof log.line[0]);
  log.n -= 2;
  write_lines(w->log, &log);
  free_lines(&log);
  expect_bad(w, "line 5: missing: chain ");
  expect_bad(w, "reached seq 4 before chain ");
}

/* The anchor of a's head (3 batches) and the log written by make_log's
 * writer, closed after it: the anchor vouches for seq 6, the files hold 7. */
static void make_anchored_log(world *w, dlqb_audit_lines *anchors) {
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-a", &a, &err), DLQB_OK);
  record(a, DLQB_EV_RETRY_SCHEDULED, 0, 2);
  record(a, DLQB_EV_DEAD_LETTERED, 2, 2);
  record(a, DLQB_EV_POISON, 4, 2);
  char line[DLQB_AUDIT_ANCHOR_MAX];
  size_t len;
  uint64_t commits;
  assert_int_equal(dlqb_audit_anchor(a, line, &len, &commits, &err), DLQB_OK);
  assert_true(len > 0);
  assert_int_equal(commits, 4);
  assert_non_null(strstr(line, "\"seq\":6,"));
  assert_int_equal(dlqb_audit_lines_add(anchors, line, len, &err), DLQB_OK);
  dlqb_audit_close(a);
}

static dlqb_status verify_anchored(world *w, const dlqb_audit_lines *anchors, int partial,
                                   dlqb_audit_summary *sum, dlqb_error *err) {
  char **files = NULL;
  size_t n = 0;
  assert_int_equal(dlqb_audit_list_files(w->log, &files, &n, err), DLQB_OK);
  dlqb_status st = dlqb_audit_verify_anchored(w->ring, (const char *const *)files, n, w->seal,
                                              partial, anchors, NULL, NULL, sum, err);
  printf("  verify --anchors: %s\n", st == DLQB_OK ? "intact" : err->msg);
  dlqb_audit_files_free(files, n);
  return st;
}

static void expect_anchored_bad(world *w, const dlqb_audit_lines *anchors, const char *want) {
  dlqb_error err = {{0}};
  dlqb_audit_summary sum;
  assert_int_equal(verify_anchored(w, anchors, 0, &sum, &err), DLQB_EINVAL);
  if (strstr(err.msg, want) == NULL) fprintf(stderr, "expected '%s' in '%s'\n", want, err.msg);
  assert_non_null(strstr(err.msg, want));
}

/* Keeps the first n lines of the file at path. */
static void keep_lines(const char *path, size_t n) {
  lines l;
  read_lines(path, &l);
  assert_true(n <= l.n);
  for (size_t i = n; i < l.n; i++) free(l.line[i]);
  l.n = n;
  write_lines(path, &l);
  free_lines(&l);
}

static void test_anchor_intact(void **state) {
  world *w = *state;
  dlqb_audit_lines anchors = {0};
  make_anchored_log(w, &anchors);
  dlqb_error err;
  dlqb_audit_summary sum;
  assert_int_equal(verify_anchored(w, &anchors, 0, &sum, &err), DLQB_OK);
  assert_int_equal(sum.anchors, 1);
  assert_int_equal(sum.anchored, 1);
  assert_int_equal(sum.beyond_anchors, 1); /* chain_end came after the anchor */
  assert_int_equal(sum.anchors_ignored, 0);
  /* No anchor at all is not an accusation: it vouches for nothing. */
  dlqb_audit_lines none = {0};
  assert_int_equal(verify_anchored(w, &none, 0, &sum, &err), DLQB_OK);
  assert_int_equal(sum.beyond_anchors, 8);
  dlqb_audit_lines_free(&anchors);
}

/* The tail cut together with its seal lines: the seal check cannot see it
 * (it passes without anchors), the anchor does. */
static void test_anchor_catches_a_cut_tail_with_its_seal(void **state) {
  world *w = *state;
  dlqb_audit_lines anchors = {0};
  make_anchored_log(w, &anchors);
  keep_lines(w->log, 3);  /* seq 0-2, the end of a signed batch */
  keep_lines(w->seal, 2); /* its seal lines for seq 0 and 2 */
  expect_good(w, NULL);   /* the gap the anchors close */
  expect_anchored_bad(w, &anchors, "anchors: missing: chain ");
  expect_anchored_bad(w, &anchors, "ends at seq 2 but its anchor of ");
  expect_anchored_bad(w, &anchors, "vouches for seq 6 (the tail was cut: 4 records missing)");
  dlqb_audit_lines_free(&anchors);
}

/* The file's last chain deleted whole from log and seal: no later batch
 * names it and the seal no longer knows it; only the anchor does. */
static void test_anchor_catches_a_deleted_chain(void **state) {
  world *w = *state;
  dlqb_audit *b = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-b", &b, &err), DLQB_OK);
  record(b, DLQB_EV_REPLAYED, 10, 1);
  dlqb_audit_close(b); /* lines 1-3 */
  dlqb_audit_lines anchors = {0};
  make_anchored_log(w, &anchors); /* a: lines 4-11 */
  char a_id[DLQB_AUDIT_CHAIN_HEX + 1];
  chain_of_first_line(w->log, 3, a_id);
  char needle[64];
  snprintf(needle, sizeof needle, "\"chain\":\"%s\"", a_id);
  lines log, seal;
  read_lines(w->log, &log);
  read_lines(w->seal, &seal);
  drop_lines_with(&log, needle);
  drop_lines_with(&seal, needle);
  assert_int_equal(log.n, 3);
  write_lines(w->log, &log);
  write_lines(w->seal, &seal);
  free_lines(&log);
  free_lines(&seal);
  expect_good(w, NULL); /* the gap the anchors close */
  char want[160];
  snprintf(want, sizeof want, "missing: chain %s (writer writer-a) is anchored up to seq 6", a_id);
  expect_anchored_bad(w, &anchors, want);
  expect_anchored_bad(w, &anchors, "but the files hold none of it (the chain was deleted)");
  dlqb_audit_lines_free(&anchors);
}

/* The seal emptied, the log intact: named with or without anchors. */
static void test_anchor_with_an_emptied_seal(void **state) {
  world *w = *state;
  dlqb_audit_lines anchors = {0};
  make_anchored_log(w, &anchors);
  keep_lines(w->seal, 0);
  expect_anchored_bad(w, &anchors, "has no seal line (the seal was emptied");
  dlqb_audit_lines_free(&anchors);
}

/* Anchors anyone could append to the stream: unsigned, edited, or signed
 * with another writer's key for this chain. */
static void test_forged_anchors(void **state) {
  world *w = *state;
  dlqb_audit_lines anchors = {0};
  make_anchored_log(w, &anchors);
  dlqb_error err;
  dlqb_audit_summary sum;
  /* An edited anchor (seq 7 claimed) no longer verifies: ignored, counted. */
  char edited[DLQB_AUDIT_ANCHOR_MAX];
  snprintf(edited, sizeof edited, "%s", anchors.line[0]);
  char *at = strstr(edited, "\"seq\":6,");
  assert_non_null(at);
  at[6] = '9';
  assert_int_equal(dlqb_audit_lines_add(&anchors, edited, strlen(edited), &err), DLQB_OK);
  assert_int_equal(dlqb_audit_lines_add(&anchors, "garbage", 7, &err), DLQB_OK);
  assert_int_equal(verify_anchored(w, &anchors, 0, &sum, &err), DLQB_OK);
  assert_int_equal(sum.anchors, 1);
  assert_int_equal(sum.anchors_ignored, 2);
  /* The same anchor re-signed with the other writer's key: it verifies as
   * that key's, and the chain is a's: forged. */
  char body[DLQB_AUDIT_ANCHOR_MAX], line[DLQB_AUDIT_ANCHOR_MAX + 200];
  snprintf(body, sizeof body, "%s", anchors.line[0]);
  char *k = strstr(body, "\"key\":\"");
  assert_non_null(k);
  memcpy(k + 7, "KEYID", 5);
  memmove(k + 12, k + 7 + DLQB_AUDIT_KEY_ID_HEX, strlen(k + 7 + DLQB_AUDIT_KEY_ID_HEX) + 1);
  *strstr(body, ",\"sig\":\"") = '\0';
  sign_body(w->other_key_path, body, line, sizeof line);
  dlqb_audit_lines forged = {0};
  assert_int_equal(dlqb_audit_lines_add(&forged, line, strlen(line), &err), DLQB_OK);
  expect_anchored_bad(w, &forged, "but is anchored with key ");
  dlqb_audit_lines_free(&forged);
  dlqb_audit_lines_free(&anchors);
}

/* Rotated files: the newest rotated file and the live log deleted, the seal
 * cut back: the anchor names the file that is missing by its first line. */
static void test_anchor_catches_a_deleted_rotated_file(void **state) {
  world *w = *state;
  w->cfg.audit.rotate_bytes = 2048;
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-a", &a, &err), DLQB_OK);
  for (int i = 0; i < 12; i++) record(a, DLQB_EV_RETRY_SCHEDULED, i * 4, 4);
  char line[DLQB_AUDIT_ANCHOR_MAX];
  size_t len;
  uint64_t commits;
  assert_int_equal(dlqb_audit_anchor(a, line, &len, &commits, &err), DLQB_OK);
  dlqb_audit_lines anchors = {0};
  assert_int_equal(dlqb_audit_lines_add(&anchors, line, len, &err), DLQB_OK);
  dlqb_audit_close(a);
  char **files = NULL;
  size_t n = 0;
  assert_int_equal(dlqb_audit_list_files(w->log, &files, &n, &err), DLQB_OK);
  assert_true(n >= 3);
  dlqb_audit_summary sum;
  assert_int_equal(verify_anchored(w, &anchors, 0, &sum, &err), DLQB_OK);
  /* Keep only the oldest file; its seal is the one of the state then: a
   * seal with no line (every line is a's, past it). */
  dlqb_status st = dlqb_audit_verify_anchored(w->ring, (const char *const *)files, 1, NULL, 0, NULL,
                                              NULL, NULL, &sum, &err);
  assert_int_equal(st, DLQB_OK); /* without anchors: nothing to see */
  st = dlqb_audit_verify_anchored(w->ring, (const char *const *)files, 1, NULL, 0, &anchors, NULL,
                                  NULL, &sum, &err);
  printf("  verify --anchors: %s\n", err.msg);
  assert_int_equal(st, DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "missing: the file that began as 'audit.log'"));
  assert_non_null(strstr(err.msg, "(a rotated file was deleted, or the log replaced)"));
  /* --partial from the second file: the anchor's head is later than its
   * start, so it is not archived but missing too. */
  st = dlqb_audit_verify_anchored(w->ring, (const char *const *)files + 1, 1, NULL, 1, &anchors,
                                  NULL, NULL, &sum, &err);
  assert_int_equal(st, DLQB_EINVAL);
  dlqb_audit_files_free(files, n);
  dlqb_audit_lines_free(&anchors);
}

/* --partial (retention deleted the oldest files): a chain whose anchored
 * head was written before the first file given began is archived, not
 * missing; one in a later file is still missing. */
static void test_anchor_with_partial_counts_archived_chains(void **state) {
  world *w = *state;
  w->cfg.audit.rotate_bytes = 2048;
  dlqb_audit_lines anchors = {0};
  dlqb_error err;
  char line[DLQB_AUDIT_ANCHOR_MAX];
  size_t len;
  uint64_t commits;
  dlqb_audit *x = NULL, *y = NULL;
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-x", &x, &err), DLQB_OK);
  record(x, DLQB_EV_RETRY_SCHEDULED, 0, 2);
  dlqb_audit_end(x); /* chain_end, still in the first file */
  assert_int_equal(dlqb_audit_anchor(x, line, &len, &commits, &err), DLQB_OK);
  assert_non_null(strstr(line, "\"ended\":true"));
  assert_int_equal(dlqb_audit_lines_add(&anchors, line, len, &err), DLQB_OK);
  dlqb_audit_close(x);
  /* The rotation's file_start must be stamped a later millisecond than
   * x's chain_end (times have ms resolution): wait for the clock, no sleep. */
  long long t0 = dlqb_now_ms();
  while (dlqb_now_ms() == t0) {
  }
  assert_int_equal(dlqb_audit_open(&w->cfg, "writer-y", &y, &err), DLQB_OK); /* rotates */
  record(y, DLQB_EV_REPLAYED, 10, 2); /* its chain_end rotates again */
  dlqb_audit_end(y);
  assert_int_equal(dlqb_audit_anchor(y, line, &len, &commits, &err), DLQB_OK);
  assert_int_equal(dlqb_audit_lines_add(&anchors, line, len, &err), DLQB_OK);
  dlqb_audit_close(y);
  char **files = NULL;
  size_t n = 0;
  assert_int_equal(dlqb_audit_list_files(w->log, &files, &n, &err), DLQB_OK);
  assert_int_equal(n, 3);
  dlqb_audit_summary sum;
  assert_int_equal(verify_anchored(w, &anchors, 0, &sum, &err), DLQB_OK);
  /* The second file's file_start still vouches for x (the seal knew it
   * then); the third's no longer does. Retention deleted the first two:
   * --partial from the third. */
  dlqb_status st = dlqb_audit_verify_anchored(w->ring, (const char *const *)files + 2, 1, NULL, 1,
                                              &anchors, NULL, NULL, &sum, &err);
  if (st != DLQB_OK) fprintf(stderr, "verify: %s\n", err.msg);
  assert_int_equal(st, DLQB_OK);
  assert_int_equal(sum.archived, 1);
  assert_int_equal(sum.anchored, 2);
  /* Now y's file is the one missing: its chain is not archived. */
  st = dlqb_audit_verify_anchored(w->ring, (const char *const *)files, 1, NULL, 0, &anchors, NULL,
                                  NULL, &sum, &err);
  printf("  verify --anchors: %s\n", err.msg);
  assert_int_equal(st, DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "(writer writer-y)"));
  dlqb_audit_files_free(files, n);
  dlqb_audit_lines_free(&anchors);
}

/* ---- the verifier on hostile input ---- */

static void test_verifier_rejects_garbage(void **state) {
  world *w = *state;
  static const char *const junk[] = {
      "",
      "{}",
      "not json at all",
      "{\"mac\":\"00\"}",
      "{\"v\":2,\"key\":\"0011223344556677\"}",
      "{\"v\":1,\"mac\":\"0000000000000000000000000000000000000000000000000000000000000000\"}",
      "\x01\x02\x03",
  };
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
    dlqb_audit_verifier *v = dlqb_audit_verifier_new(w->ring, 0);
    assert_non_null(v);
    dlqb_error err;
    assert_int_equal(dlqb_audit_verifier_line(v, junk[i], strlen(junk[i]), 1, &err), DLQB_EINVAL);
    assert_non_null(strstr(err.msg, "line 1: "));
    /* Once failed, it stays failed. */
    assert_int_equal(dlqb_audit_verifier_line(v, "{}", 2, 1, &err), DLQB_EINVAL);
    dlqb_audit_verifier_free(v);
  }
}

/* ---- the seal reader (dlqb__audit_seal_parse) ---- */

#define CHAIN_A   "0123456789abcdef0123456789abcdef"
#define MAC_A     "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define SEAL_HEAD "{\"v\":2,\"type\":\"seal\",\"chain\":\"" CHAIN_A "\",\"writer\":\"w\\\"1\","
#define SEAL_TAIL                                                                                  \
  ",\"last_hash\":\"" MAC_A "\",\"ended\":false,\"time\":\"2024-01-01T00:00:00.000Z\","            \
  "\"key\":\"0011223344556677\",\"sig\":\"" MAC_A MAC_A "\"}"

/* Parses text given as exactly len bytes in a buffer of its own, so that
 * a read past len is an ASan error rather than a look at the next byte. */
static bool seal_parse_exact(const char *text, size_t len, dlqb__audit_seal *out) {
  char *copy = malloc(len ? len : 1);
  assert_non_null(copy);
  memcpy(copy, text, len);
  bool ok = dlqb__audit_seal_parse(copy, len, out);
  free(copy);
  return ok;
}

static bool seal_parse_str(const char *text, dlqb__audit_seal *out) {
  return seal_parse_exact(text, strlen(text), out);
}

static void test_seal_parse_reads_a_writer_line(void **state) {
  (void)state;
  dlqb__audit_seal s;
  assert_true(seal_parse_str(SEAL_HEAD "\"seq\":812" SEAL_TAIL, &s));
  assert_string_equal(s.chain, CHAIN_A);
  assert_true(s.seq == 812);
  assert_string_equal(s.last_hash, MAC_A);
  assert_true(s.open);
  const char ended[] = "{\"type\":\"seal\",\"chain\":\"" CHAIN_A
                       "\",\"seq\":0,\"last_hash\":\"" MAC_A "\",\"ended\":true}";
  assert_true(seal_parse_str(ended, &s));
  assert_true(s.seq == 0);
  assert_false(s.open);
}

static void test_seal_parse_truncated_line(void **state) {
  (void)state;
  const char line[] = SEAL_HEAD "\"seq\":812" SEAL_TAIL;
  dlqb__audit_seal s;
  /* Every cut of the line, down to nothing, is refused: the members may
   * all be there long before the end, but the object is not closed. */
  for (size_t n = 0; n < sizeof line - 1; n++) assert_false(seal_parse_exact(line, n, &s));
  assert_true(seal_parse_exact(line, sizeof line - 1, &s));
  /* A NUL is a byte like any other: len, not the NUL, ends the line. */
  char with_nul[] = SEAL_HEAD "\"seq\":812" SEAL_TAIL;
  with_nul[10] = '\0';
  assert_false(seal_parse_exact(with_nul, sizeof with_nul - 1, &s));
}

static void test_seal_parse_needs_the_members(void **state) {
  (void)state;
  static const char *const bad[] = {
      /* each of the four missing */
      "{\"chain\":\"" CHAIN_A "\",\"seq\":1,\"last_hash\":\"" MAC_A "\"}",
      "{\"type\":\"seal\",\"seq\":1,\"last_hash\":\"" MAC_A "\"}",
      "{\"type\":\"seal\",\"chain\":\"" CHAIN_A "\",\"last_hash\":\"" MAC_A "\"}",
      "{\"type\":\"seal\",\"chain\":\"" CHAIN_A "\",\"seq\":1}",
      /* present but not what a seal holds */
      "{\"type\":\"record\",\"chain\":\"" CHAIN_A "\",\"seq\":1,\"last_hash\":\"" MAC_A "\"}",
      "{\"type\":\"seal\",\"chain\":\"" CHAIN_A "0\",\"seq\":1,\"last_hash\":\"" MAC_A "\"}",
      "{\"type\":\"seal\",\"chain\":\"0123456789ABCDEF0123456789abcdef\",\"seq\":1,"
      "\"last_hash\":\"" MAC_A "\"}",
      "{\"type\":\"seal\",\"chain\":\"" CHAIN_A "\",\"seq\":\"1\",\"last_hash\":\"" MAC_A "\"}",
      "{\"type\":\"seal\",\"chain\":1,\"seq\":1,\"last_hash\":\"" MAC_A "\"}",
      /* only inside a nested value, which does not count */
      "{\"type\":\"seal\",\"x\":{\"chain\":\"" CHAIN_A "\"},\"seq\":1,\"last_hash\":\"" MAC_A "\"}",
      /* a later copy of a member overrides a good one, as in json-c */
      "{\"type\":\"seal\",\"chain\":\"" CHAIN_A "\",\"seq\":1,\"seq\":-1,\"last_hash\":\"" MAC_A
      "\"}",
      /* not one object */
      "",
      "{}",
      "[\"type\",\"seal\"]",
      "{\"type\":\"seal\",\"chain\":\"" CHAIN_A "\",\"seq\":1,\"last_hash\":\"" MAC_A "\"}x",
      "{\"type\":\"seal\",\"chain\":\"" CHAIN_A "\",\"seq\":1,\"last_hash\":\"" MAC_A "\",}",
  };
  dlqb__audit_seal s;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (seal_parse_str(bad[i], &s)) fprintf(stderr, "accepted: %s\n", bad[i]);
    assert_false(seal_parse_str(bad[i], &s));
  }
}

static void test_seal_parse_reads_json_as_json_c_does(void **state) {
  (void)state;
  dlqb__audit_seal s;
  /* Whitespace, escapes, a duplicate whose last value is good, a NUL
   * ending a string, nested values holding brackets in strings: the
   * verifier parses the line with json-c first and has always read these
   * members through it. */
  assert_true(
      seal_parse_str(" { \"type\" : \"se\\u0061l\" , \"chain\":\"\\u0030123456789abcdef"
                     "0123456789abcdef\", \"seq\" : -1 , \"seq\":-0, \"x\":[{\"y\":\"]}\"}],"
                     "\"last_hash\":\"" MAC_A "\\u0000junk\" } ",
                     &s));
  assert_string_equal(s.chain, CHAIN_A);
  assert_true(s.seq == 0);
  assert_string_equal(s.last_hash, MAC_A);
  assert_false(s.open);
}

static void test_seal_parse_very_long_line(void **state) {
  (void)state;
  /* A megabyte of writer name: skipped in one pass, bounded by len. */
  size_t pad = 1 << 20;
  const char head[] = "{\"type\":\"seal\",\"writer\":\"";
  const char tail[] = "\",\"chain\":\"" CHAIN_A "\",\"seq\":3,\"last_hash\":\"" MAC_A "\"}";
  size_t len = sizeof head - 1 + pad + sizeof tail - 1;
  char *line = malloc(len + 64); /* room for the longer head below */
  assert_non_null(line);
  memcpy(line, head, sizeof head - 1);
  memset(line + sizeof head - 1, 'w', pad);
  memcpy(line + sizeof head - 1 + pad, tail, sizeof tail - 1);
  dlqb__audit_seal s;
  assert_true(seal_parse_exact(line, len, &s));
  assert_true(s.seq == 3);
  /* The same line with the writer's string never closed. */
  assert_false(seal_parse_exact(line, sizeof head - 1 + pad, &s));
  /* A hex member far longer than a MAC is no MAC. */
  const char mac_head[] = "{\"type\":\"seal\",\"last_hash\":\"";
  const char mac_tail[] = "\",\"chain\":\"" CHAIN_A "\",\"seq\":3}";
  memcpy(line, mac_head, sizeof mac_head - 1);
  memset(line + sizeof mac_head - 1, 'a', pad);
  memcpy(line + sizeof mac_head - 1 + pad, mac_tail, sizeof mac_tail - 1);
  assert_false(seal_parse_exact(line, sizeof mac_head - 1 + pad + sizeof mac_tail - 1, &s));
  /* ... and with a MAC's length it is one: the test above can pass. */
  size_t at = sizeof mac_head - 1 + DLQB_AUDIT_HASH_HEX;
  memcpy(line + at, mac_tail, sizeof mac_tail - 1);
  assert_true(seal_parse_exact(line, at + sizeof mac_tail - 1, &s));
  free(line);
}

static void test_seal_parse_numbers_out_of_range(void **state) {
  (void)state;
  static const struct {
    const char *seq;
    bool ok;
    uint64_t want;
  } cases[] = {
      {"0", true, 0},
      {"9223372036854775806", true, 9223372036854775806u},
      {"9223372036854775807", false, 0}, /* INT64_MAX: json-c saturates there */
      {"9223372036854775808", false, 0},
      {"18446744073709551615", false, 0},
      {"18446744073709551616", false, 0},
      {"99999999999999999999999999999", false, 0},
      {"-1", false, 0},
      {"-9223372036854775808", false, 0},
      {"1.0", false, 0},
      {"1e2", false, 0},
      {"12abc", false, 0},
      {"-", false, 0},
      {"true", false, 0},
      {"null", false, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char line[512];
    snprintf(line, sizeof line,
             "{\"type\":\"seal\",\"chain\":\"" CHAIN_A "\",\"seq\":%s,"
             "\"last_hash\":\"" MAC_A "\"}",
             cases[i].seq);
    dlqb__audit_seal s;
    bool ok = seal_parse_str(line, &s);
    if (ok != cases[i].ok) fprintf(stderr, "seq %s: %s\n", cases[i].seq, ok ? "read" : "refused");
    assert_true(ok == cases[i].ok);
    if (ok) assert_true(s.seq == cases[i].want);
  }
}

/* Signs body + "}" as a writer would and feeds it to a verifier as a seal
 * line. */
static dlqb_status feed_signed_seal(world *w, const char *body, dlqb_error *err) {
  char line[1024], sig[DLQB_AUDIT_SIG_HEX + 1];
  sign_body(w->key_path, body, line, sizeof line);
  (void)sig;
  dlqb_audit_verifier *v = dlqb_audit_verifier_new(w->ring, 0);
  assert_non_null(v);
  dlqb_status st = dlqb_audit_verifier_seal_line(v, line, strlen(line), err);
  dlqb_audit_verifier_free(v);
  return st;
}

static void test_verifier_and_writer_read_seals_alike(void **state) {
  world *w = *state;
  dlqb_error err = {{0}};
  /* The verifier reads a seal line with the shared reader: a genuine
   * line with a seq out of range is malformed, not a checkpoint. */
  assert_int_equal(feed_signed_seal(w,
                                    "{\"v\":2,\"type\":\"seal\",\"chain\":\"" CHAIN_A
                                    "\",\"seq\":5,\"last_hash\":\"" MAC_A "\"",
                                    &err),
                   DLQB_OK);
  assert_int_equal(feed_signed_seal(w,
                                    "{\"v\":2,\"type\":\"seal\",\"chain\":\"" CHAIN_A
                                    "\",\"seq\":9223372036854775807,\"last_hash\":\"" MAC_A "\"",
                                    &err),
                   DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "seal: line 1: malformed seal record"));
  /* Every line the writer put in the seal reads back, and the last one
   * vouches for the log's last record. */
  make_log(w);
  lines seal, log;
  read_lines(w->seal, &seal);
  read_lines(w->log, &log);
  assert_true(seal.n > 0 && log.n == 8);
  dlqb__audit_seal s = {{0}, 0, {0}, {0}, true};
  for (size_t i = 0; i < seal.n; i++) {
    size_t n = strlen(seal.line[i]);
    assert_true(n > 0 && seal.line[i][n - 1] == '\n');
    assert_true(dlqb__audit_seal_parse(seal.line[i], n - 1, &s));
  }
  assert_true(s.seq == 7);
  assert_false(s.open); /* the chain_end's seal */
  const char *last = log.line[log.n - 1];
  size_t body;
  const char *sig;
  char hash[DLQB_AUDIT_HASH_HEX + 1];
  dlqb__audit_hasher h;
  assert_true(dlqb__audit_hasher_init(&h));
  assert_true(dlqb__audit_split(last, strlen(last) - 1, &body, &sig));
  assert_true(dlqb__audit_hash_body(&h, last, body, hash));
  dlqb__audit_hasher_release(&h);
  assert_string_equal(s.last_hash, hash);
  free_lines(&seal);
  free_lines(&log);
}

/* A log whose disk is full from the start: the open fails, naming the file
 * and the errno, so that an ops command fails before its first publish. */
static void test_open_on_full_disk_fails(void **state) {
  world *w = *state;
  assert_int_equal(symlink("/dev/full", w->log), 0);
  dlqb_audit *a = (dlqb_audit *)1;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w", &a, &err), DLQB_EIO);
  assert_null(a);
  printf("  %s\n", err.msg);
  assert_non_null(strstr(err.msg, w->log));
  assert_non_null(strstr(err.msg, "no space left on device"));
}

/* Another process holds the lock and does not let go (stopped): a write
 * attempt gives up after the bounded wait instead of blocking, the writer
 * turns unhealthy saying why, keeps the hop (counted as pending), and
 * writes it once the lock is free. */
static void test_lock_held_elsewhere_times_out(void **state) {
  world *w = *state;
  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, "w", &a, &err), DLQB_OK);
  int holder = open(w->log, O_RDWR); /* its own open file: flock conflicts */
  assert_true(holder >= 0);
  assert_int_equal(flock(holder, LOCK_EX | LOCK_NB), 0);
  dlqb_hop h = make_hop(DLQB_EV_DEAD_LETTERED, 1);
  const dlqb_hop *p = &h;
  uint64_t ticket = 0;
  assert_int_equal(dlqb_audit_submit(a, &p, 1, &ticket, &err), DLQB_OK);
  assert_int_equal(dlqb_audit_wait(a, ticket, &err), DLQB_EIO);
  printf("  %s\n", err.msg);
  assert_non_null(strstr(err.msg, "held its lock"));
  char why[DLQB_ERROR_MAX];
  assert_false(dlqb_audit_health(a, why, sizeof why));
  assert_non_null(strstr(why, w->log));
  assert_int_equal(dlqb_audit_check(a, &err), DLQB_EIO);
  assert_int_equal(dlqb_audit_pending(a), 1);
  assert_true(dlqb_audit_durable(a) < ticket);
  close(holder);
  assert_int_equal(dlqb_audit_wait(a, ticket, &err), DLQB_OK);
  assert_true(dlqb_audit_healthy(a));
  assert_int_equal(dlqb_audit_pending(a), 0);
  dlqb_audit_close(a);
  dlqb_audit_summary sum;
  expect_good(w, &sum);
  assert_int_equal(sum.records, 3); /* chain_start, the hop, chain_end */
}

/* The writer's name is cut before escaping: 255 quotes after a prefix (as
 * "escalator@" + an instance name) used to overflow the writer buffer. */
static void test_writer_name_is_bounded(void **state) {
  world *w = *state;
  char name[300], longer[1200];
  snprintf(name, sizeof name, "escalator@");
  memset(name + 10, '"', 255);
  name[265] = '\0';
  memset(longer, '\\', sizeof longer - 1);
  longer[sizeof longer - 1] = '\0';
  struct {
    char buf[2 * DLQB__AUDIT_WRITER_MAX + 1];
    char canary[16];
  } out;
  memset(out.canary, 'C', sizeof out.canary);
  dlqb__audit_writer_name(out.buf, longer);
  assert_int_equal(strlen(out.buf), 2 * DLQB__AUDIT_WRITER_MAX);
  for (size_t i = 0; i < sizeof out.canary; i++) assert_int_equal(out.canary[i], 'C');
  dlqb__audit_writer_name(out.buf, name);
  assert_int_equal(strncmp(out.buf, "escalator@\\\"", 12), 0);
  assert_true(strlen(out.buf) <= 2 * DLQB__AUDIT_WRITER_MAX);

  dlqb_audit *a = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_open(&w->cfg, name, &a, &err), DLQB_OK);
  record(a, DLQB_EV_RETRY_SCHEDULED, 0, 1);
  dlqb_audit_close(a);
  dlqb_audit_summary sum;
  expect_good(w, &sum);
  assert_int_equal(sum.records, 3);
}

/* Loading the key makes the process undumpable: no core file, no piped
 * core handler, no same-user ptrace can carry the key away. */
static void test_key_load_disables_core_dumps(void **state) {
  world *w = *state;
  fflush(NULL);
  pid_t pid = fork(); /* a child, so the test runner itself stays dumpable */
  assert_true(pid >= 0);
  if (pid == 0) {
    EVP_PKEY *key = NULL;
    char id[DLQB_AUDIT_KEY_ID_HEX + 1];
    dlqb_error err;
    if (dlqb_audit_key_load(w->key_path, &key, id, &err) != DLQB_OK) _exit(2);
    EVP_PKEY_free(key);
    struct rlimit rl;
    if (getrlimit(RLIMIT_CORE, &rl) != 0 || rl.rlim_cur != 0 || rl.rlim_max != 0) _exit(3);
    _exit(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : 4);
  }
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
}

/* dlqb_file_replace (the seal compaction, the ledger cache) never writes
 * through a name planted beside the file: the old temporary name was
 * path.tmp.<pid>, which anyone with write access to the directory could
 * make a link to a file of ours. */
static void test_file_replace_ignores_planted_temp_names(void **state) {
  world *w = *state;
  char victim[160], planted[200];
  snprintf(victim, sizeof victim, "%s/victim", w->dir);
  write_text(victim, "keep me\n", 0600);
  snprintf(planted, sizeof planted, "%s.tmp.%ld", w->seal, (long)getpid());
  assert_int_equal(symlink(victim, planted), 0);
  dlqb_error err;
  assert_int_equal(dlqb_file_replace(w->seal, "new\n", 4, "the audit seal", &err), DLQB_OK);
  struct stat st;
  assert_int_equal(lstat(w->seal, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_mode & 0777, 0600);
  char buf[64] = "";
  FILE *f = fopen(victim, "r");
  assert_non_null(f);
  assert_non_null(fgets(buf, sizeof buf, f));
  fclose(f);
  assert_string_equal(buf, "keep me\n");
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_key_file_rules),
      T(test_open_on_full_disk_fails),
      T(test_lock_held_elsewhere_times_out),
      T(test_writer_name_is_bounded),
      T(test_key_load_disables_core_dumps),
      T(test_file_replace_ignores_planted_temp_names),
      T(test_audit_off),
      T(test_every_event_type_is_recorded),
      T(test_edited_record),
      T(test_deleted_record),
      T(test_deleted_chain_start),
      T(test_inserted_copy),
      T(test_inserted_forgery),
      T(test_reordered_records),
      T(test_wrong_key),
      T(test_keyring_takes_public_keys_only),
      T(test_verifier_needs_no_secret),
      T(test_forged_with_another_writers_key),
      T(test_cut_batch),
      T(test_emptied_seal),
      T(test_revoked_key),
      T(test_version_1_log_is_named),
      T(test_truncated_tail),
      T(test_torn_last_line),
      T(test_whole_log_emptied),
      T(test_seal_missing_or_edited),
      T(test_seal_order_and_lag),
      T(test_visitor_sees_every_accepted_line),
      T(test_writer_appends_after_a_foreign_line),
      T(test_deleted_chain_is_named_by_the_next),
      T(test_deleted_batches_before_another_chain),
      T(test_anchor_intact),
      T(test_anchor_catches_a_cut_tail_with_its_seal),
      T(test_anchor_catches_a_deleted_chain),
      T(test_anchor_with_an_emptied_seal),
      T(test_forged_anchors),
      T(test_anchor_catches_a_deleted_rotated_file),
      T(test_anchor_with_partial_counts_archived_chains),
      T(test_filter_picks_one_requests_hops),
      T(test_write_failure_then_recovery),
      T(test_first_write_fails),
      T(test_submit_without_waiting),
      T(test_torn_write_is_repaired),
      T(test_list_files_without_rotation),
      T(test_seal_is_compacted),
      T(test_rotation_with_a_long_seal),
      T(test_rotation),
      T(test_concurrent_writers),
      T(test_verifier_rejects_garbage),
      T(test_seal_parse_reads_a_writer_line),
      T(test_seal_parse_truncated_line),
      T(test_seal_parse_needs_the_members),
      T(test_seal_parse_reads_json_as_json_c_does),
      T(test_seal_parse_very_long_line),
      T(test_seal_parse_numbers_out_of_range),
      T(test_verifier_and_writer_read_seals_alike),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

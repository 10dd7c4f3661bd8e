/* Writes evidence bundles for tests/evidence/cross_check.py, which runs
 * both verifiers (`dlq-bridge audit verify-proof` and verify_bundle.py) on
 * each: a log of 2,100 hops written by the real audit writer (three runs,
 * so each request has records in three chains), its checkpoint signed
 * with the log's key and cosigned by a witness, two good bundles, and
 * tampered ones: bytes changed all along the bundle, each record dropped
 * in turn, another request's record swapped in, the cosignature removed.
 *
 *   make_bundles DIR     (DIR exists and is empty)
 *
 * Files: DIR/keys/log.pem, DIR/witnesses.txt, DIR/good-*.json (must
 * verify), DIR/bad-*.json (must not). Exit 0, or 1 with a line on stderr. */
#include <json-c/json.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dlqb/audit.h"
#include "dlqb/checkpoint.h"
#include "dlqb/config.h"
#include "dlqb/evidence.h"

#define HOPS_PER_RUN 700
#define RUNS         3
#define FLIPS        48

static const char *dir;

static void die(const char *what) {
  fprintf(stderr, "make_bundles: %s\n", what);
  exit(1);
}

static void path_of(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", dir, name);
}

static void write_file(const char *name, const char *data, size_t n) {
  char p[1024];
  path_of(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  if (f == NULL || fwrite(data, 1, n, f) != n || fclose(f) != 0) die(name);
}

/* The log: RUNS writer runs of HOPS_PER_RUN hops, request DSR-(k % 700). */
static void write_log(const dlqb_config *cfg) {
  static dlqb_hop hops[HOPS_PER_RUN];
  const dlqb_hop *batch[HOPS_PER_RUN];
  for (int run = 0; run < RUNS; run++) {
    dlqb_audit *a = NULL;
    dlqb_error err;
    if (dlqb_audit_open(cfg, "make-bundles", &a, &err) != DLQB_OK) die(err.msg);
    for (int k = 0; k < HOPS_PER_RUN; k++) {
      dlqb_hop *h = &hops[k];
      memset(h, 0, sizeof *h);
      h->event = DLQB_EV_RETRY_SCHEDULED;
      snprintf(h->message_id, sizeof h->message_id, "msg-%d-%d", run, k);
      snprintf(h->request_id, sizeof h->request_id, "DSR-%d", k);
      snprintf(h->source_system, sizeof h->source_system, "crm");
      snprintf(h->legal_basis, sizeof h->legal_basis, "gdpr_art_17");
      h->attempt = run + 1;
      snprintf(h->reason, sizeof h->reason, "upstream said \"no\" \\ retry");
      snprintf(h->from, sizeof h->from, "dsr.failed");
      snprintf(h->to, sizeof h->to, "dsr.retry.5s");
      snprintf(h->actor, sizeof h->actor, "system");
      batch[k] = h;
    }
    /* Batches of 100: many signed batches and links. */
    for (int k = 0; k < HOPS_PER_RUN; k += 100)
      if (dlqb_audit_record(a, batch + k, 100, &err) != DLQB_OK) die(err.msg);
    dlqb_audit_close(a);
  }
}

typedef struct {
  dlqb_evidence *e;
} feed;

static bool visit(void *ctx, const char *line, size_t len) {
  return dlqb_evidence_visit(((feed *)ctx)->e, line, len);
}

/* One pass over the verified log into e. */
static void pass(const dlqb_audit_keyring *ring, const char *log, const char *seal,
                 dlqb_evidence *e, dlqb_evidence_result *res) {
  const char *files[] = {log};
  feed f = {e};
  dlqb_audit_summary sum;
  dlqb_error err;
  if (dlqb_audit_verify_files(ring, files, 1, seal, 0, visit, &f, &sum, &err) != DLQB_OK)
    die(err.msg);
  if (dlqb_evidence_finish(e, res, &err) != DLQB_OK) die(err.msg);
}

static char *to_text(json_object *o) {
  return strdup(
      json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
}

static void write_json(const char *name, json_object *o) {
  char *t = to_text(o);
  size_t n = strlen(t);
  char *l = malloc(n + 2);
  memcpy(l, t, n);
  l[n] = '\n';
  write_file(name, l, n + 1);
  free(l);
  free(t);
}

int main(int argc, char **argv) {
  if (argc != 2 || strlen(argv[1]) > 400) die("usage: make_bundles DIR (a path under 400 bytes)");
  dir = argv[1];
  char keyp[512], pubdir[512], pubp[512], log[512], seal[512];
  path_of(keyp, sizeof keyp, "log.key");
  path_of(pubdir, sizeof pubdir, "keys");
  path_of(pubp, sizeof pubp, "keys/log.pem");
  path_of(log, sizeof log, "audit.log");
  path_of(seal, sizeof seal, "audit.log.seal");
  if (mkdir(pubdir, 0700) != 0) die("mkdir keys");
  EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  EVP_PKEY *w = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  FILE *f = fopen(keyp, "w");
  if (k == NULL || w == NULL || f == NULL || chmod(keyp, 0600) != 0 ||
      PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) != 1 || fclose(f) != 0)
    die("private key");
  f = fopen(pubp, "w");
  if (f == NULL || PEM_write_PUBKEY(f, k) != 1 || fclose(f) != 0) die("public key");
  dlqb_config cfg;
  dlqb_config_defaults(&cfg);
  snprintf(cfg.audit.log, sizeof cfg.audit.log, "%s", log);
  snprintf(cfg.audit.key_file, sizeof cfg.audit.key_file, "%s", keyp);
  cfg.audit.rotate_bytes = 0;
  write_log(&cfg);

  dlqb_audit_keyring *ring = dlqb_audit_keyring_new();
  dlqb_error err;
  if (ring == NULL || dlqb_audit_keyring_add(ring, pubdir, &err) != DLQB_OK) die("keyring");
  dlqb_evidence_result res;
  dlqb_evidence *e = dlqb_evidence_new(UINT64_MAX, 0, NULL);
  pass(ring, log, seal, e, &res);
  dlqb_evidence_free(e);
  dlqb_checkpoint cp = res.tree;
  snprintf(cp.origin, sizeof cp.origin, "%s", DLQB_CHECKPOINT_DEFAULT_ORIGIN);
  char note[DLQB_CHECKPOINT_MAX], plain[DLQB_CHECKPOINT_MAX], line[512], vkey[256];
  size_t nl = 0;
  if (dlqb_checkpoint_sign(k, &cp, note, &nl, &err) != DLQB_OK) die(err.msg);
  memcpy(plain, note, nl);
  size_t plain_len = nl;
  dlqb_checkpoint parsed;
  if (dlqb_checkpoint_parse(note, nl, &parsed, &err) != DLQB_OK ||
      dlqb_checkpoint_cosign(w, "witness.test/1", 1764600000, note, parsed.text_len, line,
                             sizeof line, &err) != DLQB_OK ||
      dlqb_witness_vkey_of(w, "witness.test/1", vkey, sizeof vkey, &err) != DLQB_OK)
    die(err.msg);
  memcpy(note + nl, line, strlen(line));
  nl += strlen(line);
  strcat(vkey, "\n");
  write_file("witnesses.txt", vkey, strlen(vkey));

  /* Two requests' bundles. */
  char *b[2];
  size_t bl[2];
  const char *ids[2] = {"DSR-5", "DSR-6"};
  for (int i = 0; i < 2; i++) {
    e = dlqb_evidence_new(cp.size, 0, ids[i]);
    pass(ring, log, seal, e, &res);
    if (res.records != RUNS) die("expected one record per run");
    if (dlqb_evidence_bundle(e, note, nl, &b[i], &bl[i], &err) != DLQB_OK) die(err.msg);
    dlqb_evidence_free(e);
  }
  write_file("good-dsr-5.json", b[0], bl[0]);
  write_file("good-dsr-6.json", b[1], bl[1]);
  /* Bytes changed all along it (the newline at its end included). */
  for (int i = 0; i < FLIPS; i++) {
    size_t at = (size_t)i * (bl[0] - 1) / (FLIPS - 1);
    char name[64];
    b[0][at] ^= 0x01;
    snprintf(name, sizeof name, "bad-byte-%05zu.json", at);
    write_file(name, b[0], bl[0]);
    b[0][at] ^= 0x01;
  }
  /* Each record dropped; another request's record swapped in; the
   * cosignature removed (a one-witness policy must refuse it). */
  for (int i = 0; i < RUNS; i++) {
    json_object *o = json_tokener_parse(b[0]);
    json_object_array_del_idx(json_object_object_get(o, "records"), (size_t)i, 1);
    char name[64];
    snprintf(name, sizeof name, "bad-dropped-%d.json", i);
    write_json(name, o);
    json_object_put(o);
  }
  json_object *o = json_tokener_parse(b[0]), *p = json_tokener_parse(b[1]);
  json_object *theirs = json_object_array_get_idx(json_object_object_get(p, "records"), 1);
  json_object_array_put_idx(json_object_object_get(o, "records"), 1, json_object_get(theirs));
  write_json("bad-swapped.json", o);
  json_object_put(o);
  o = json_tokener_parse(b[0]);
  json_object_object_add(o, "checkpoint", json_object_new_string_len(plain, (int)plain_len));
  write_json("bad-uncosigned.json", o);
  json_object_put(o);
  json_object_put(p);
  free(b[0]);
  free(b[1]);
  dlqb_audit_keyring_free(ring);
  EVP_PKEY_free(k);
  EVP_PKEY_free(w);
  return 0;
}

/* Unit tests of the evidence for one request (src/audit/evidence.c,
 * checkpoint.c, witness.c): a bundle verifies with the log's public key
 * and a witness policy; every single byte changed, a record dropped, a
 * record of another request swapped in, a missing cosignature or an
 * unknown log key fails it; the witness cosigns a tree that extends its
 * state and refuses a smaller tree, a fork of the same size and a
 * rewritten prefix. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/audit/audit_private.h"
#include "dlqb/archive.h"
#include "dlqb/checkpoint.h"
#include "dlqb/evidence.h"
#include "dlqb/witness.h"

#define LINES  500
#define LATER  20
#define ORIGIN "test.example/audit"

typedef struct {
  EVP_PKEY *log_key, *witness_key, *other_key;
  dlqb_audit_keyring *ring;
  dlqb_witness_key witness;
  char lines[LINES + LATER][160];
} world;

/* Line i: a hop of request R-(i % 50), every 10th line a chain record
 * without one. `forked` changes line 10. */
static void make_lines(world *w, bool forked) {
  for (int i = 0; i < LINES + LATER; i++) {
    if (i % 10 == 0)
      snprintf(w->lines[i], sizeof w->lines[i], "{\"v\":2,\"seq\":%d,\"event\":\"chain_start\"%s}",
               i, forked && i == 10 ? ",\"x\":1" : "");
    else
      snprintf(w->lines[i], sizeof w->lines[i],
               "{\"v\":2,\"seq\":%d,\"event\":\"retry_scheduled\",\"request_id\":\"R-%d\","
               "\"reason\":\"a \\\"quoted\\\" text\"}",
               i, i % 50);
  }
}

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->log_key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  w->witness_key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  w->other_key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  w->ring = dlqb_audit_keyring_new();
  dlqb_error err;
  if (w->log_key == NULL || w->witness_key == NULL || w->ring == NULL ||
      dlqb__audit_keyring_put(w->ring, w->log_key, "log.pem", false, &err) != DLQB_OK)
    return -1;
  char vkey[256];
  if (dlqb_witness_vkey_of(w->witness_key, "w1.example", vkey, sizeof vkey, &err) != DLQB_OK ||
      dlqb_witness_vkey_parse(vkey, &w->witness, &err) != DLQB_OK)
    return -1;
  make_lines(w, false);
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  dlqb_witness_key_release(&w->witness);
  dlqb_audit_keyring_free(w->ring);
  EVP_PKEY_free(w->log_key);
  EVP_PKEY_free(w->witness_key);
  EVP_PKEY_free(w->other_key);
  free(w);
  return 0;
}

/* The tree of the first n lines (all given lines are visited). */
static void tree_of(world *w, uint64_t n, uint64_t prev, dlqb_evidence_result *res) {
  dlqb_evidence *e = dlqb_evidence_new(n, prev, NULL);
  assert_non_null(e);
  for (uint64_t i = 0; i < n; i++)
    assert_true(dlqb_evidence_visit(e, w->lines[i], strlen(w->lines[i])));
  dlqb_error err;
  assert_int_equal(dlqb_evidence_finish(e, res, &err), DLQB_OK);
  dlqb_evidence_free(e);
}

/* The signed checkpoint of the first LINES lines, cosigned by the witness
 * when cosign. */
static size_t checkpoint(world *w, EVP_PKEY *key, bool cosign, char *note, dlqb_checkpoint *cp) {
  dlqb_evidence_result res;
  tree_of(w, LINES, 0, &res);
  *cp = res.tree;
  snprintf(cp->origin, sizeof cp->origin, "%s", ORIGIN);
  size_t len = 0;
  dlqb_error err;
  assert_int_equal(dlqb_checkpoint_sign(key, cp, note, &len, &err), DLQB_OK);
  dlqb_checkpoint back;
  assert_int_equal(dlqb_checkpoint_parse(note, len, &back, &err), DLQB_OK);
  cp->text_len = back.text_len;
  if (cosign) {
    char line[512];
    assert_int_equal(dlqb_checkpoint_cosign(w->witness_key, "w1.example", 1700000000, note,
                                            cp->text_len, line, sizeof line, &err),
                     DLQB_OK);
    memcpy(note + len, line, strlen(line));
    len += strlen(line);
  }
  note[len] = '\0';
  return len;
}

/* The bundle of request id against the checkpoint note. */
static char *bundle_of(world *w, const char *id, const char *note, size_t nl, size_t *len) {
  dlqb_evidence *e = dlqb_evidence_new(LINES, 0, id);
  for (int i = 0; i < LINES + LATER; i++)
    assert_true(dlqb_evidence_visit(e, w->lines[i], strlen(w->lines[i])));
  dlqb_evidence_result res;
  dlqb_error err;
  assert_int_equal(dlqb_evidence_finish(e, &res, &err), DLQB_OK);
  char *b = NULL;
  assert_int_equal(dlqb_evidence_bundle(e, note, nl, &b, len, &err), DLQB_OK);
  dlqb_evidence_free(e);
  return b;
}

static dlqb_status check(world *w, const char *b, size_t len, size_t need, dlqb_error *err) {
  dlqb_evidence_check chk;
  return dlqb_evidence_verify(b, len, w->ring, &w->witness, 1, need, &chk, err);
}

static void test_bundle_verifies(void **state) {
  world *w = *state;
  char note[DLQB_CHECKPOINT_MAX];
  dlqb_checkpoint cp;
  size_t nl = checkpoint(w, w->log_key, true, note, &cp);
  size_t bl;
  /* lines 7, 57, ..., 457 (10 records); 507 is after the checkpoint. */
  dlqb_evidence *e = dlqb_evidence_new(LINES, 0, "R-7");
  for (int i = 0; i < LINES + LATER; i++)
    assert_true(dlqb_evidence_visit(e, w->lines[i], strlen(w->lines[i])));
  dlqb_evidence_result res;
  dlqb_error err;
  assert_int_equal(dlqb_evidence_finish(e, &res, &err), DLQB_OK);
  assert_int_equal(res.records, 10);
  assert_int_equal(res.later, 1);
  char *b = NULL;
  assert_int_equal(dlqb_evidence_bundle(e, note, nl, &b, &bl, &err), DLQB_OK);
  dlqb_evidence_free(e);
  dlqb_evidence_check chk;
  dlqb_status vst = dlqb_evidence_verify(b, bl, w->ring, &w->witness, 1, 1, &chk, &err);
  if (vst != DLQB_OK) fprintf(stderr, "verify: %s\n", err.msg);
  assert_int_equal(vst, DLQB_OK);
  assert_int_equal(chk.records, 10);
  assert_int_equal(chk.cosigners, 1);
  assert_string_equal(chk.request_id, "R-7");
  /* Nothing of another request but hashes. */
  assert_null(strstr(b, "R-8"));
  assert_null(strstr(b, "R-17"));
  free(b);
}

/* Every byte of the bundle changed, one at a time: each fails. */
static void test_every_byte_counts(void **state) {
  world *w = *state;
  char note[DLQB_CHECKPOINT_MAX];
  dlqb_checkpoint cp;
  size_t nl = checkpoint(w, w->log_key, true, note, &cp);
  size_t bl;
  char *b = bundle_of(w, "R-3", note, nl, &bl);
  dlqb_error err;
  assert_int_equal(check(w, b, bl, 1, &err), DLQB_OK);
  size_t passed = 0;
  for (size_t i = 0; i < bl; i++) {
    unsigned char flips[] = {0x01, 0x20};
    for (size_t f = 0; f < sizeof flips; f++) {
      b[i] ^= (char)flips[f];
      if (check(w, b, bl, 1, &err) == DLQB_OK) {
        fprintf(stderr, "byte %zu ^ 0x%02x still verifies: ...%.40s...\n", i, flips[f],
                b + (i > 20 ? i - 20 : 0));
        passed++;
      }
      b[i] ^= (char)flips[f];
    }
  }
  assert_int_equal(passed, 0);
  free(b);
}

static char *reserialize(json_object *o, size_t *len) {
  const char *s =
      json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
  *len = strlen(s);
  return strdup(s);
}

static void test_dropped_and_swapped_records(void **state) {
  world *w = *state;
  char note[DLQB_CHECKPOINT_MAX];
  dlqb_checkpoint cp;
  size_t nl = checkpoint(w, w->log_key, true, note, &cp);
  size_t bl, ol;
  char *b = bundle_of(w, "R-3", note, nl, &bl);
  char *other = bundle_of(w, "R-9", note, nl, &ol);
  dlqb_error err;
  /* A record dropped: each in turn. */
  for (size_t k = 0; k < 10; k++) {
    json_object *o = json_tokener_parse(b);
    json_object *recs = json_object_object_get(o, "records");
    json_object_array_del_idx(recs, k, 1);
    size_t len;
    char *t = reserialize(o, &len);
    assert_int_equal(check(w, t, len, 1, &err), DLQB_EINVAL);
    assert_non_null(strstr(err.msg, "left out"));
    free(t);
    json_object_put(o);
  }
  /* Another request's record (with its own valid proof) in its place. */
  json_object *o = json_tokener_parse(b), *p = json_tokener_parse(other);
  json_object *recs = json_object_object_get(o, "records");
  json_object *theirs = json_object_array_get_idx(json_object_object_get(p, "records"), 4);
  json_object_array_put_idx(recs, 4, json_object_get(theirs));
  size_t len;
  char *t = reserialize(o, &len);
  assert_int_equal(check(w, t, len, 1, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "not a record of request_id R-3"));
  free(t);
  /* ... and with the bundle's request_id changed to match it. */
  json_object_object_add(o, "request_id", json_object_new_string("R-9"));
  t = reserialize(o, &len);
  assert_int_equal(check(w, t, len, 1, &err), DLQB_EINVAL);
  free(t);
  json_object_put(o);
  json_object_put(p);
  free(b);
  free(other);
}

static void test_policy_and_keys(void **state) {
  world *w = *state;
  char note[DLQB_CHECKPOINT_MAX];
  dlqb_checkpoint cp;
  size_t nl = checkpoint(w, w->log_key, false, note, &cp);
  size_t bl;
  char *b = bundle_of(w, "R-1", note, nl, &bl);
  dlqb_error err;
  /* No cosignature: fine without a policy, refused with one. */
  assert_int_equal(check(w, b, bl, 0, &err), DLQB_OK);
  assert_int_equal(check(w, b, bl, 1, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "cosigned by 0"));
  free(b);
  /* Signed with a key the verifier was not given. */
  nl = checkpoint(w, w->other_key, true, note, &cp);
  b = bundle_of(w, "R-1", note, nl, &bl);
  assert_int_equal(check(w, b, bl, 1, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "no signature of a given public key"));
  free(b);
}

/* ---- the witness ---- */

static void msg_of(world *w, uint64_t prev, uint64_t size, dlqb_checkpoint *cp,
                   dlqb_evidence_msg *m) {
  dlqb_evidence_result res;
  tree_of(w, size, prev, &res);
  memset(m, 0, sizeof *m);
  m->kind = 1;
  m->prev_size = prev;
  m->ncons = res.ncons;
  memcpy(m->cons, res.cons, sizeof res.cons);
  *cp = res.tree;
}

static void test_witness_judges(void **state) {
  world *w = *state;
  dlqb_witness_state s = {.size = 0};
  dlqb_checkpoint cp;
  dlqb_evidence_msg m;
  char why[DLQB_ERROR_MAX];
  /* The first tree it sees. */
  msg_of(w, 0, 300, &cp, &m);
  assert_int_equal(dlqb_witness_judge(&s, &cp, &m, why, sizeof why), DLQB_WITNESS_COSIGN);
  s.size = cp.size;
  memcpy(s.root, cp.root, DLQB_MERKLE_HASH);
  dlqb_checkpoint at300 = cp;
  /* It grows: the proof from 300 holds. */
  msg_of(w, 300, 480, &cp, &m);
  assert_int_equal(dlqb_witness_judge(&s, &cp, &m, why, sizeof why), DLQB_WITNESS_COSIGN);
  /* The same tree again. */
  msg_of(w, 0, 300, &cp, &m);
  assert_int_equal(dlqb_witness_judge(&s, &cp, &m, why, sizeof why), DLQB_WITNESS_SAME);
  /* Smaller. */
  msg_of(w, 0, 200, &cp, &m);
  assert_int_equal(dlqb_witness_judge(&s, &cp, &m, why, sizeof why), DLQB_WITNESS_REFUSE);
  assert_non_null(strstr(why, "smaller"));
  /* Not proved from its state. */
  msg_of(w, 250, 480, &cp, &m);
  assert_int_equal(dlqb_witness_judge(&s, &cp, &m, why, sizeof why), DLQB_WITNESS_REFUSE);
  assert_non_null(strstr(why, "cannot be shown"));
  /* The log rewritten (line 10 changed) and re-proved from its own tree
   * of 300: a fork, named with both roots. */
  make_lines(w, true);
  msg_of(w, 300, 480, &cp, &m);
  assert_int_equal(dlqb_witness_judge(&s, &cp, &m, why, sizeof why), DLQB_WITNESS_REFUSE);
  assert_non_null(strstr(why, "fork"));
  char b64[64];
  dlqb_base64_encode(at300.root, DLQB_MERKLE_HASH, b64);
  assert_non_null(strstr(why, b64));
  msg_of(w, 0, 300, &cp, &m);
  assert_int_equal(dlqb_witness_judge(&s, &cp, &m, why, sizeof why), DLQB_WITNESS_REFUSE);
  assert_non_null(strstr(why, "fork"));
  make_lines(w, false);
  /* The state file round-trips. */
  char text[512];
  s.seen = 7;
  snprintf(s.origin, sizeof s.origin, "%s", ORIGIN);
  dlqb_witness_state_format(&s, text, sizeof text);
  dlqb_witness_state back;
  assert_true(dlqb_witness_state_parse(text, strlen(text), &back));
  assert_int_equal(back.size, 300);
  assert_int_equal(back.seen, 7);
  assert_memory_equal(back.root, s.root, DLQB_MERKLE_HASH);
  assert_false(dlqb_witness_state_parse("{\"size\":1}", 10, &back));
}

static void test_base64_one_spelling(void **state) {
  (void)state;
  unsigned char out[32], in[32] = {1, 2, 3};
  char b64[64];
  dlqb_base64_encode(in, sizeof in, b64);
  assert_int_equal(dlqb_base64_decode(b64, strlen(b64), out, sizeof out), 32);
  assert_memory_equal(in, out, 32);
  /* The last character before '=' carries two unused bits: another
   * spelling of the same bytes is refused. */
  size_t n = strlen(b64);
  b64[n - 2] = (char)(b64[n - 2] + 1);
  assert_int_equal(dlqb_base64_decode(b64, n, out, sizeof out), -1);
  assert_int_equal(dlqb_base64_decode("abc", 3, out, sizeof out), -1);
  assert_int_equal(dlqb_base64_decode("ab=c", 4, out, sizeof out), -1);
}

/* ---- an archive of old files ---- */

#define ARCHIVED 40 /* lines 0..39: R-1 .. R-39 once each; R-45 starts at line 45 */

/* The archive text of the first ARCHIVED lines. (Not inlined: GCC 12
 * then takes the returned heap pointer for the address of its local.) */
__attribute__((noinline)) static char *archive_of(world *w, size_t *len) {
  dlqb_evidence *e = dlqb_evidence_new(UINT64_MAX, 0, NULL);
  for (int i = 0; i < ARCHIVED; i++)
    assert_true(dlqb_evidence_visit(e, w->lines[i], strlen(w->lines[i])));
  dlqb_evidence_result res;
  dlqb_error err;
  assert_int_equal(dlqb_evidence_finish(e, &res, &err), DLQB_OK);
  const char *files[] = {"audit.log.1", "audit.log.2"};
  char *text = NULL;
  assert_int_equal(dlqb_archive_write(e, &res, files, 2, "made now by test", &text, len, &err),
                   DLQB_OK);
  dlqb_evidence_free(e);
  return text;
}

/* A pass after the archive (prev: the last checkpoint's size), over the
 * lines after it. */
static dlqb_status after_archive(world *w, const char *text, size_t len, uint64_t size,
                                 uint64_t prev, const char *id, dlqb_evidence **out,
                                 dlqb_evidence_result *res, dlqb_error *err) {
  dlqb_archive a;
  *out = dlqb_evidence_new(size, prev, id);
  assert_non_null(*out);
  dlqb_status st = dlqb_archive_read(text, len, &a, *out, err);
  dlqb_archive_release(&a);
  if (st != DLQB_OK) return st;
  for (int i = ARCHIVED; i < LINES + LATER; i++)
    assert_true(dlqb_evidence_visit(*out, w->lines[i], strlen(w->lines[i])));
  return dlqb_evidence_finish(*out, res, err);
}

/* Once the oldest lines are gone, their archive gives the same tree, the
 * same index and byte for byte the same bundle of a request whose records
 * are all later; a request with a record among them is refused; a
 * checkpoint's consistency proof from a size past the archive holds, and
 * one from inside it is refused. */
static void test_archive_stands_for_deleted_files(void **state) {
  world *w = *state;
  char note[DLQB_CHECKPOINT_MAX];
  dlqb_checkpoint cp;
  size_t nl = checkpoint(w, w->log_key, true, note, &cp);
  size_t tl = 0, bl = 0, al = 0;
  char *arch = archive_of(w, &tl);
  assert_non_null(strstr(arch, "dlq-bridge archive v1\nlines 40\nroot "));
  assert_non_null(strstr(arch, "\nfile audit.log.1\nfile audit.log.2\nindex 36\n"));
  assert_null(strstr(arch, "R-")); /* no id, no record */
  dlqb_archive a;
  dlqb_error err;
  assert_int_equal(dlqb_archive_read(arch, tl, &a, NULL, &err), DLQB_OK);
  assert_int_equal(a.lines, ARCHIVED);
  assert_int_equal(a.nfrontier, 2); /* 40 = 32 + 8 */
  assert_string_equal(a.last_file, "audit.log.2");
  assert_int_equal(a.entries, 36);
  dlqb_archive_release(&a);

  dlqb_evidence *e;
  dlqb_evidence_result res;
  assert_int_equal(after_archive(w, arch, tl, LINES, 0, "R-45", &e, &res, &err), DLQB_OK);
  assert_memory_equal(res.tree.root, cp.root, DLQB_MERKLE_HASH);
  assert_int_equal(res.tree.index_entries, cp.index_entries);
  assert_memory_equal(res.tree.index_root, cp.index_root, DLQB_MERKLE_HASH);
  char *b = NULL;
  assert_int_equal(dlqb_evidence_bundle(e, note, nl, &b, &bl, &err), DLQB_OK);
  dlqb_evidence_free(e);
  char *whole = bundle_of(w, "R-45", note, nl, &al);
  assert_int_equal(bl, al);
  assert_memory_equal(b, whole, bl);
  assert_int_equal(check(w, b, bl, 1, &err), DLQB_OK);
  free(b);
  free(whole);

  /* R-7 has line 7 in the archive: no bundle can hold it. */
  assert_int_equal(after_archive(w, arch, tl, LINES, 0, "R-7", &e, &res, &err), DLQB_OK);
  b = NULL;
  assert_int_equal(dlqb_evidence_bundle(e, note, nl, &b, &bl, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "1 record in the archived files"));
  dlqb_evidence_free(e);

  /* A checkpoint after one of 60 lines: the consistency proof holds. */
  dlqb_evidence_result at60;
  tree_of(w, 60, 0, &at60);
  assert_int_equal(after_archive(w, arch, tl, LINES, 60, NULL, &e, &res, &err), DLQB_OK);
  assert_memory_equal(res.prev_root, at60.tree.root, DLQB_MERKLE_HASH);
  assert_true(dlqb_merkle_verify_consistency(60, LINES, at60.tree.root, res.tree.root,
                                             (const unsigned char(*)[DLQB_MERKLE_HASH])res.cons,
                                             res.ncons));
  dlqb_evidence_free(e);
  /* From a checkpoint inside the archive (30 lines), or of a tree that
   * ends in it: refused, said. */
  assert_int_equal(after_archive(w, arch, tl, LINES, 30, NULL, &e, &res, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "ends inside the archive"));
  dlqb_evidence_free(e);
  assert_int_equal(after_archive(w, arch, tl, 30, 0, NULL, &e, &res, &err), DLQB_EINVAL);
  dlqb_evidence_free(e);

  /* An archive that lies about the index gives another index root than
   * the checkpoint's (prove then refuses); one whose compact range or
   * root was changed is refused as it is read. */
  /* The first entry's line number made another request's (line 1 or 2). */
  size_t at = (size_t)(strstr(arch, "\nindex 36\n") - arch) + 10;
  at += strcspn(arch + at, " ") + 1; /* the first entry's first line number */
  size_t end = at + strcspn(arch + at, " \n");
  const char *other = end - at == 1 && arch[at] == '1' ? "2" : "1";
  char *lie = malloc(tl + 8);
  int ll = snprintf(lie, tl + 8, "%.*s%s%s", (int)at, arch, other, arch + end);
  assert_true(ll > 0);
  assert_int_equal(after_archive(w, lie, (size_t)ll, LINES, 0, NULL, &e, &res, &err), DLQB_OK);
  assert_memory_equal(res.tree.root, cp.root, DLQB_MERKLE_HASH);
  assert_memory_not_equal(res.tree.index_root, cp.index_root, DLQB_MERKLE_HASH);
  dlqb_evidence_free(e);
  free(lie);
  lie = strdup(arch);
  char *fr = strstr(lie, "\nfrontier ") + 10;
  fr[3] = fr[3] == 'A' ? 'B' : 'A';
  assert_int_equal(after_archive(w, lie, tl, LINES, 0, NULL, &e, &res, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "does not hash to its root"));
  dlqb_evidence_free(e);
  free(lie);
  /* Cut short: refused. */
  assert_int_equal(dlqb_archive_read(arch, tl / 2, &a, NULL, &err), DLQB_EINVAL);
  free(arch);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_bundle_verifies, setup, teardown),
      cmocka_unit_test_setup_teardown(test_every_byte_counts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dropped_and_swapped_records, setup, teardown),
      cmocka_unit_test_setup_teardown(test_policy_and_keys, setup, teardown),
      cmocka_unit_test_setup_teardown(test_witness_judges, setup, teardown),
      cmocka_unit_test(test_base64_one_spelling),
      cmocka_unit_test_setup_teardown(test_archive_stands_for_deleted_files, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

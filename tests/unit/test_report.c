/* Unit tests of the audit report: the state of every request from trail
 * records, queue items and the completion ledger (each state, the period's
 * bounds, counts that add up), and its signature (a changed byte fails, an
 * unknown or revoked key fails, public keys alone suffice). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/calendar.h"
#include "dlqb/names.h"
#include "dlqb/report.h"

#define FROM "2026-11-01T00:00:00.000Z"
#define TO   "2026-11-30T23:59:59.999Z"

static int64_t ms(const char *iso) {
  int64_t v = 0;
  assert_int_equal(dlqb_iso_time_parse(iso, strlen(iso), &v), DLQB_OK);
  return v;
}

static dlqb_report *new_report(void) {
  dlqb_report *r = dlqb_report_new(ms(FROM), ms(TO));
  assert_non_null(r);
  return r;
}

/* A hop record as the audit log holds it (the members the report reads). */
static void hop(dlqb_report *r, const char *time, const char *event, const char *rid,
                const char *from, const char *to, const char *reason) {
  char line[1024];
  int n = snprintf(line, sizeof line,
                   "{\"v\":2,\"chain\":\"c\",\"seq\":1,\"prev\":\"p\",\"time\":\"%s\","
                   "\"event\":\"%s\",\"writer\":\"bridge-1:42\",\"key\":\"k\","
                   "\"message_id\":\"msg-%s\",\"request_id\":\"%s\",\"source_system\":\"crm\","
                   "\"legal_basis\":\"gdpr_art_17\",\"attempt\":1,\"reason\":\"%s\",\"cause\":\"\","
                   "\"from\":\"%s\",\"to\":\"%s\",\"actor\":\"alice\",\"broker_user\":\"ops\"}",
                   time, event, rid, rid, reason, from, to);
  assert_true(n > 0 && (size_t)n < sizeof line);
  assert_true(dlqb_report_line(r, line, (size_t)n));
}

static void item(dlqb_report *r, const char *queue, const char *rid, const char *owner) {
  char mid[64];
  snprintf(mid, sizeof mid, "msg-%s", rid);
  dlqb_error err;
  assert_int_equal(dlqb_report_item(r, queue, mid, rid, "crm", owner, &err), DLQB_OK);
}

static const dlqb_report_entry *find(const dlqb_report *r, const char *rid) {
  size_t n = 0;
  const dlqb_report_entry *es = dlqb_report_entries(r, &n);
  const dlqb_report_entry *hit = NULL;
  for (size_t i = 0; i < n; i++)
    if (strcmp(es[i].request_id, rid) == 0) {
      assert_null(hit); /* one entry per request */
      hit = &es[i];
    }
  return hit;
}

#define T1 "2026-11-10T10:00:00.000Z"
#define T2 "2026-11-10T11:00:00.000Z"
#define T3 "2026-11-10T12:00:00.000Z"

static void test_every_state_and_counts_add_up(void **state) {
  (void)state;
  dlqb_report *r = new_report();
  dlqb_ledger *done = dlqb_ledger_new(), *unv = dlqb_ledger_new();
  dlqb_error err;
  /* The queues as read. */
  item(r, DLQB_Q_REVIEW, "R-claimed", "bob");
  item(r, DLQB_Q_REVIEW, "R-unclaimed", "");
  item(r, DLQB_Q_DLQ, "R-dlq", "");
  item(r, DLQB_Q_DLQ, "R-done", "");    /* a stale copy of a completed one */
  item(r, DLQB_Q_DLQ, "R-outside", ""); /* no hop in the period */
  item(r, "dsr.work", "R-ignored", ""); /* not a queue the report reads */
  dlqb_report_queue_read(r, DLQB_Q_DLQ, ms("2026-12-01T00:00:00.000Z"), 0);
  dlqb_report_queue_read(r, DLQB_Q_REVIEW, ms("2026-12-01T00:00:00.000Z"), 0);
  /* The trail. */
  hop(r, T1, "retry_scheduled", "R-done", "dsr.failed", "dsr.retry.1s", "timeout");
  hop(r, T2, "dead_lettered", "R-done", "dsr.failed", DLQB_Q_DLQ, "timeout");
  hop(r, T1, "escalated", "R-claimed", DLQB_Q_DLQ, DLQB_Q_REVIEW, "");
  hop(r, T2, "claimed", "R-claimed", DLQB_Q_REVIEW, DLQB_Q_REVIEW, "");
  hop(r, T1, "escalated", "R-unclaimed", DLQB_Q_DLQ, DLQB_Q_REVIEW, "");
  hop(r, T1, "dead_lettered", "R-dlq", "dsr.failed", DLQB_Q_DLQ, "bad");
  hop(r, T1, "dead_lettered", "R-res", "dsr.failed", DLQB_Q_DLQ, "bad");
  hop(r, T2, "resolved", "R-res", DLQB_Q_DLQ, "", "erased by hand, OPS-43\x1b[31m");
  hop(r, T1, "retry_scheduled", "R-wait", "dsr.failed", "dsr.retry.5s", "timeout");
  hop(r, T1, "dead_lettered", "R-replayed", "dsr.failed", DLQB_Q_DLQ, "x");
  hop(r, T2, "replayed", "R-replayed", DLQB_Q_DLQ, DLQB_Q_WORK, "");
  hop(r, T1, "dead_lettered", "R-gone", "dsr.failed", DLQB_Q_DLQ, "x");
  hop(r, T1, "retry_scheduled", "R-unv", "dsr.failed", "dsr.retry.1s", "x");
  hop(r, T1, "skipped_complete", "R-cut", DLQB_Q_DLQ, "", "");
  /* Outside the period: before it, and only after it. */
  hop(r, "2026-10-31T23:59:59.999Z", "dead_lettered", "R-old", "dsr.failed", DLQB_Q_DLQ, "");
  hop(r, "2026-12-01T00:00:00.000Z", "dead_lettered", "R-late", "dsr.failed", DLQB_Q_DLQ, "");
  /* In it, and its story goes on after it: the state is the last one. */
  hop(r, TO, "dead_lettered", "R-story", "dsr.failed", DLQB_Q_DLQ, "");
  hop(r, "2026-12-01T00:00:00.000Z", "decided_resolve", "R-story", DLQB_Q_REVIEW, "", "done");
  /* Lines that are not hops change nothing. */
  const char *start =
      "{\"v\":2,\"chain\":\"c\",\"seq\":0,\"time\":\"" T1 "\",\"event\":\"chain_start\"}";
  assert_true(dlqb_report_line(r, start, strlen(start)));
  assert_true(dlqb_report_line(r, "not json", 8));
  assert_int_equal(dlqb_ledger_add(done, "R-done", "crm", &err), DLQB_OK);
  assert_int_equal(dlqb_ledger_add(done, "R-done", "other", &err), DLQB_OK);
  assert_int_equal(dlqb_ledger_add(done, "R-wait", "other-system", &err), DLQB_OK); /* not it */
  assert_int_equal(dlqb_ledger_add(unv, "R-unv", "crm", &err), DLQB_OK);
  dlqb_report_ledger(r, done, unv);

  dlqb_report_counts k;
  assert_int_equal(dlqb_report_finish(r, &k, &err), DLQB_OK);
  const dlqb_report_entry *e;
  assert_non_null(e = find(r, "R-done"));
  assert_int_equal(e->state, DLQB_RS_COMPLETED);
  assert_non_null(strstr(e->detail, "a copy is still in dsr.dlq.manual"));
  assert_int_equal(e->hops, 2);
  assert_non_null(e = find(r, "R-claimed"));
  assert_int_equal(e->state, DLQB_RS_IN_REVIEW);
  assert_string_equal(e->owner, "bob");
  assert_string_equal(e->last_event, "claimed");
  assert_non_null(e = find(r, "R-unclaimed"));
  assert_int_equal(e->state, DLQB_RS_IN_REVIEW);
  assert_string_equal(e->owner, "");
  assert_non_null(e = find(r, "R-dlq"));
  assert_int_equal(e->state, DLQB_RS_IN_DLQ);
  assert_string_equal(e->queue, DLQB_Q_DLQ);
  assert_non_null(e = find(r, "R-res"));
  assert_int_equal(e->state, DLQB_RS_RESOLVED);
  assert_string_equal(e->note, "erased by hand, OPS-43?[31m"); /* the escape byte sanitised */
  assert_non_null(e = find(r, "R-wait"));
  assert_int_equal(e->state, DLQB_RS_WAITING);
  assert_string_equal(e->queue, "dsr.retry.5s");
  assert_non_null(e = find(r, "R-replayed"));
  assert_int_equal(e->state, DLQB_RS_WAITING);
  assert_string_equal(e->queue, DLQB_Q_WORK);
  assert_non_null(e = find(r, "R-gone"));
  assert_int_equal(e->state, DLQB_RS_UNKNOWN);
  assert_non_null(strstr(e->detail, "not found there: removed outside dlq-bridge"));
  assert_non_null(e = find(r, "R-unv"));
  assert_int_equal(e->state, DLQB_RS_WAITING);
  assert_true(e->unverified_completion);
  assert_non_null(strstr(e->detail, "not in completion_writers"));
  assert_non_null(e = find(r, "R-cut"));
  assert_int_equal(e->state, DLQB_RS_UNKNOWN);
  assert_non_null(strstr(e->detail, "removed by replay as complete"));
  assert_non_null(e = find(r, "R-story"));
  assert_int_equal(e->state, DLQB_RS_RESOLVED);
  assert_string_equal(e->note, "done");
  assert_null(find(r, "R-old"));
  assert_null(find(r, "R-late"));
  assert_null(find(r, "R-outside"));
  assert_null(find(r, "R-ignored"));

  assert_int_equal(k.state[DLQB_RS_COMPLETED], 1);
  assert_int_equal(k.state[DLQB_RS_IN_REVIEW], 2);
  assert_int_equal(k.state[DLQB_RS_IN_DLQ], 1);
  assert_int_equal(k.state[DLQB_RS_RESOLVED], 2);
  assert_int_equal(k.state[DLQB_RS_WAITING], 3);
  assert_int_equal(k.state[DLQB_RS_UNKNOWN], 2);
  assert_int_equal(k.total, 11);
  unsigned long sum = 0;
  for (int s = 0; s < DLQB_RS__COUNT; s++) sum += k.state[s];
  assert_int_equal(sum, k.total);
  size_t n = 0;
  const dlqb_report_entry *es = dlqb_report_entries(r, &n);
  assert_int_equal(n, k.total);
  for (size_t i = 1; i < n; i++) assert_true(strcmp(es[i - 1].request_id, es[i].request_id) < 0);
  assert_int_equal(k.outside, 1);
  assert_int_equal(k.unverified, 1);
  dlqb_report_free(r);
  dlqb_ledger_free(done);
  dlqb_ledger_free(unv);
}

/* Not found in a queue the trail puts it in: why depends on how the read went. */
static void test_unknown_names_why(void **state) {
  (void)state;
  dlqb_report *r = new_report();
  dlqb_report_queue_read(r, DLQB_Q_DLQ, ms(T2), 1); /* another consumer, read at T2 */
  dlqb_report_queue_read(r, DLQB_Q_REVIEW, ms(T2), 0);
  hop(r, T1, "dead_lettered", "R-held", "dsr.failed", DLQB_Q_DLQ, "");
  hop(r, T3, "dead_lettered", "R-after", "dsr.failed", DLQB_Q_DLQ, "");
  hop(r, T1, "escalated", "R-review", DLQB_Q_DLQ, DLQB_Q_REVIEW, "");
  /* Read in the DLQ at T2, and resolved at T3: the trail is newer. */
  item(r, DLQB_Q_DLQ, "R-left", "");
  hop(r, T1, "dead_lettered", "R-left", "dsr.failed", DLQB_Q_DLQ, "");
  hop(r, T3, "resolved", "R-left", DLQB_Q_DLQ, "", "late note");
  /* Read in the DLQ, and its last hop (before the read) put it there. */
  item(r, DLQB_Q_DLQ, "R-stays", "");
  hop(r, T1, "decided_return", "R-stays", DLQB_Q_REVIEW, DLQB_Q_DLQ, "");
  dlqb_report_counts k;
  dlqb_error err;
  assert_int_equal(dlqb_report_finish(r, &k, &err), DLQB_OK);
  assert_int_equal(k.state[DLQB_RS_UNKNOWN], 3);
  assert_non_null(strstr(find(r, "R-held")->detail, "held by another consumer"));
  assert_non_null(strstr(find(r, "R-after")->detail, "after that queue was read"));
  assert_non_null(strstr(find(r, "R-review")->detail, "removed outside dlq-bridge"));
  assert_int_equal(find(r, "R-left")->state, DLQB_RS_RESOLVED);
  assert_string_equal(find(r, "R-left")->note, "late note");
  assert_int_equal(find(r, "R-stays")->state, DLQB_RS_IN_DLQ);
  assert_int_equal(k.total, 5);
  dlqb_report_free(r);
}

/* A record without request_id (an invalid task) stands alone under its
 * message_id; two tasks with one request_id from two systems are two. */
static void test_request_identity(void **state) {
  (void)state;
  dlqb_report *r = new_report();
  dlqb_error err;
  const char *inv =
      "{\"time\":\"" T1 "\",\"event\":\"invalid_envelope\",\"message_id\":\"m-inv\","
      "\"request_id\":\"\",\"source_system\":\"\",\"from\":\"dsr.failed\",\"to\":\"" DLQB_Q_DLQ
      "\"}";
  assert_true(dlqb_report_line(r, inv, strlen(inv)));
  assert_int_equal(dlqb_report_item(r, DLQB_Q_DLQ, "m-inv", "", "", "", &err), DLQB_OK);
  const char *a =
      "{\"time\":\"" T1 "\",\"event\":\"dead_lettered\",\"message_id\":\"m1\","
      "\"request_id\":\"R-1\",\"source_system\":\"crm\",\"from\":\"x\",\"to\":\"" DLQB_Q_DLQ "\"}";
  const char *b =
      "{\"time\":\"" T1 "\",\"event\":\"dead_lettered\",\"message_id\":\"m2\","
      "\"request_id\":\"R-1\",\"source_system\":\"erp\",\"from\":\"x\",\"to\":\"" DLQB_Q_DLQ "\"}";
  assert_true(dlqb_report_line(r, a, strlen(a)));
  assert_true(dlqb_report_line(r, b, strlen(b)));
  dlqb_report_counts k;
  assert_int_equal(dlqb_report_finish(r, &k, &err), DLQB_OK);
  assert_int_equal(k.total, 3);
  size_t n = 0;
  const dlqb_report_entry *es = dlqb_report_entries(r, &n);
  assert_int_equal(n, 3);
  assert_string_equal(es[0].request_id, "");
  assert_string_equal(es[0].message_id, "m-inv");
  assert_int_equal(es[0].state, DLQB_RS_IN_DLQ);
  assert_string_equal(es[1].source_system, "crm");
  assert_string_equal(es[2].source_system, "erp");
  assert_int_equal(es[1].state, DLQB_RS_UNKNOWN);
  dlqb_report_free(r);
}

/* ---- the signature ---- */

typedef struct {
  char dir[64], keys[128], priv[128];
  EVP_PKEY *key, *other;
  char key_id[DLQB_AUDIT_KEY_ID_HEX + 1], other_id[DLQB_AUDIT_KEY_ID_HEX + 1];
} keys_world;

static void write_pub(const char *path, EVP_PKEY *k) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(PEM_write_PUBKEY(f, k), 1);
  fclose(f);
}

/* Key ids as the writer computes them: load the private key from a file. */
static EVP_PKEY *new_key(keys_world *w, const char *name, char *id) {
  EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  assert_non_null(k);
  snprintf(w->priv, sizeof w->priv, "%s/%s.key", w->dir, name);
  int fd = open(w->priv, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  assert_int_equal(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
  fclose(f);
  EVP_PKEY_free(k);
  EVP_PKEY *loaded = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_key_load(w->priv, &loaded, id, &err), DLQB_OK);
  return loaded;
}

static int keys_setup(void **state) {
  keys_world *w = calloc(1, sizeof *w);
  if (w == NULL) return -1;
  snprintf(w->dir, sizeof w->dir, "/tmp/dlqb-report-XXXXXX");
  if (mkdtemp(w->dir) == NULL) return -1;
  snprintf(w->keys, sizeof w->keys, "%s/keys", w->dir);
  if (mkdir(w->keys, 0700) != 0) return -1;
  w->key = new_key(w, "writer", w->key_id);
  w->other = new_key(w, "other", w->other_id);
  *state = w;
  return 0;
}

static int keys_teardown(void **state) {
  keys_world *w = *state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", w->dir);
  int rc = system(cmd);
  EVP_PKEY_free(w->key);
  EVP_PKEY_free(w->other);
  free(w);
  return rc == 0 ? 0 : -1;
}

/* A ring as an auditor has it: public key files only. */
static dlqb_audit_keyring *ring_of(keys_world *w, const char *file, EVP_PKEY *k) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", w->keys, file);
  write_pub(path, k);
  dlqb_audit_keyring *ring = dlqb_audit_keyring_new();
  assert_non_null(ring);
  dlqb_error err;
  assert_int_equal(dlqb_audit_keyring_add(ring, w->keys, &err), DLQB_OK);
  unlink(path);
  return ring;
}

static void sign(keys_world *w, EVP_PKEY *k, const char *id, const char *body, bool json,
                 char **out, size_t *len) {
  (void)w;
  dlqb_error err;
  assert_int_equal(dlqb_report_sign(k, id, body, strlen(body), json, out, len, &err), DLQB_OK);
}

static char *json_body(const char *id) {
  static char body[512];
  snprintf(body, sizeof body,
           "{\"report\":\"dlq-bridge audit report\",\"key\":\"%s\",\"counts\":{\"total\":2},"
           "\"requests\":[{\"request_id\":\"R-\\\"1\",\"state\":\"completed\"}]}",
           id);
  return body;
}

#define TEXT_BODY "dlq-bridge audit report (format 1)\ntotal      2 = 1 + 1\nR-1 completed\n"

static void test_signed_report_verifies_with_public_keys_alone(void **state) {
  keys_world *w = *state;
  dlqb_audit_keyring *ring = ring_of(w, "writer.pem", w->key);
  for (int json = 0; json < 2; json++) {
    char *out = NULL;
    size_t len = 0;
    sign(w, w->key, w->key_id, json ? json_body(w->key_id) : TEXT_BODY, json, &out, &len);
    dlqb_report_check chk;
    dlqb_error err;
    assert_int_equal(dlqb_report_verify(ring, out, len, &chk, &err), DLQB_OK);
    assert_int_equal(chk.json, json);
    assert_string_equal(chk.key_id, w->key_id);
    assert_non_null(strstr(chk.key_file, "writer.pem"));
    assert_int_equal(out[len - 1], '\n');
    if (!json) {
      assert_memory_equal(out, TEXT_BODY, strlen(TEXT_BODY)); /* the body as written */
      assert_int_equal(chk.body_len, strlen(TEXT_BODY));
    }
    /* Every byte, changed: fails. */
    for (size_t i = 0; i < len; i++) {
      out[i] ^= 0x01;
      dlqb_status st = dlqb_report_verify(ring, out, len, &chk, &err);
      if (st == DLQB_OK)
        fprintf(stderr, "byte %zu of %s changed and still verified\n", i, json ? "json" : "text");
      assert_int_equal(st, DLQB_EINVAL);
      out[i] ^= 0x01;
    }
    /* Cut short, or something appended: fails. */
    assert_int_equal(dlqb_report_verify(ring, out, len - 2, &chk, &err), DLQB_EINVAL);
    char *longer = malloc(len + 8);
    memcpy(longer, out, len);
    memcpy(longer + len, "extra\n", 6);
    assert_int_equal(dlqb_report_verify(ring, longer, len + 6, &chk, &err), DLQB_EINVAL);
    free(longer);
    assert_int_equal(dlqb_report_verify(ring, out, 0, &chk, &err), DLQB_EINVAL);
    free(out);
  }
  dlqb_audit_keyring_free(ring);
}

static void test_unknown_or_revoked_key_fails(void **state) {
  keys_world *w = *state;
  char *out = NULL;
  size_t len = 0;
  dlqb_report_check chk;
  dlqb_error err;
  /* Signed by a key the auditor was not given. */
  dlqb_audit_keyring *ring = ring_of(w, "writer.pem", w->key);
  sign(w, w->other, w->other_id, TEXT_BODY, false, &out, &len);
  assert_int_equal(dlqb_report_verify(ring, out, len, &chk, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "not among the public keys"));
  /* Re-signed by another key under the first one's id: the signature fails. */
  char *forged = strdup(out);
  memcpy(forged + len - 1 - DLQB_AUDIT_SIG_HEX - 1 - DLQB_AUDIT_KEY_ID_HEX, w->key_id,
         DLQB_AUDIT_KEY_ID_HEX);
  assert_int_equal(dlqb_report_verify(ring, forged, len, &chk, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "does not match"));
  free(forged);
  free(out);
  dlqb_audit_keyring_free(ring);
  /* Signed by a key revoked since. */
  ring = ring_of(w, "writer.pem.revoked", w->key);
  for (int json = 0; json < 2; json++) {
    sign(w, w->key, w->key_id, json ? json_body(w->key_id) : TEXT_BODY, json, &out, &len);
    assert_int_equal(dlqb_report_verify(ring, out, len, &chk, &err), DLQB_EINVAL);
    assert_non_null(strstr(err.msg, "revoked"));
    free(out);
  }
  dlqb_audit_keyring_free(ring);
}

/* What the signer refuses: a JSON body on several lines, text without its
 * last newline. */
static void test_sign_refuses_malformed_bodies(void **state) {
  keys_world *w = *state;
  char *out = NULL;
  size_t len = 0;
  dlqb_error err;
  assert_int_equal(
      dlqb_report_sign(w->key, w->key_id, "{\"a\":1,\n\"b\":2}", 14, true, &out, &len, &err),
      DLQB_EINVAL);
  assert_int_equal(dlqb_report_sign(w->key, w->key_id, "no newline", 10, false, &out, &len, &err),
                   DLQB_EINVAL);
  assert_null(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_state_and_counts_add_up),
      cmocka_unit_test(test_unknown_names_why),
      cmocka_unit_test(test_request_identity),
      cmocka_unit_test_setup_teardown(test_signed_report_verifies_with_public_keys_alone,
                                      keys_setup, keys_teardown),
      cmocka_unit_test_setup_teardown(test_unknown_or_revoked_key_fails, keys_setup, keys_teardown),
      cmocka_unit_test_setup_teardown(test_sign_refuses_malformed_bodies, keys_setup,
                                      keys_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

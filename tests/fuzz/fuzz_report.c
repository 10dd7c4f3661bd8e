/* libFuzzer target: the audit report, derivation and signature.
 * Input: the first byte picks the mode; the rest is split at '\n' into
 * lines. Each line is fed to the derivation as a trail record, and a line
 * starting with "Q " or "R " also as a DLQ or compliance_review item (its
 * text the request_id, owner and message_id), one starting with "C " as a
 * completion of (its text, "crm") at a time its length picks; then the whole input is
 * checked as a signed report, and a report built from the entries is
 * signed, verified, and verified again with one byte changed.
 * Contracts checked: no crash or leak; the state counts add up to the
 * entries, and the groups' requests too; every string of an entry is
 * printable UTF-8; no measured response time is negative, and a median
 * and mean lie within their group's times; a fresh signature
 * verifies, and any changed byte of it fails; every error is one printable
 * line. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/audit/audit_private.h"
#include "dlqb/deadline.h"
#include "dlqb/names.h"
#include "dlqb/report.h"
#include "fuzz_common.h"

static const unsigned char raw_key[32] = "fuzz-report-key-0123456789abcde";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int printable(const char *s) { return fuzz_printable_line(s, strlen(s) + 1); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static EVP_PKEY *key;
  static dlqb_audit_keyring *ring;
  static char key_id[DLQB_AUDIT_KEY_ID_HEX + 1];
  if (key == NULL) {
    dlqb_error kerr;
    key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, raw_key, sizeof raw_key);
    ring = dlqb_audit_keyring_new();
    FUZZ_CHECK(key != NULL && ring != NULL && dlqb__audit_key_id_of(key, key_id));
    FUZZ_CHECK(dlqb__audit_keyring_put(ring, key, "fuzz", false, &kerr) == DLQB_OK);
  }
  dlqb_error err;
  memset(&err, 0, sizeof err);
  /* The input as a signed report: a failure is one printable line. */
  dlqb_report_check chk;
  dlqb_status st = dlqb_report_verify(ring, (const char *)data + 1, size - 1, &chk, &err);
  FUZZ_CHECK(st == DLQB_OK || st == DLQB_EINVAL || st == DLQB_ENOMEM);
  if (st != DLQB_OK) FUZZ_CHECK(fuzz_printable_line(err.msg, sizeof err.msg));

  /* The derivation over the lines. */
  dlqb_report *r = dlqb_report_new(data[0] & 1 ? INT64_MIN : 0, INT64_MAX);
  FUZZ_CHECK(r != NULL);
  dlqb_report_queue_read(r, DLQB_Q_DLQ, data[0] & 4 ? 0 : INT64_MAX, data[0] & 8);
  static dlqb_deadlines rules;
  FUZZ_CHECK(dlqb_deadlines_parse("gdpr_*=1mo,ccpa_*=45d", &rules, &err) == DLQB_OK);
  if (data[0] & 16) dlqb_report_deadlines(r, &rules, data[0] & 32 ? INT64_C(1796015388000) : 0);
  dlqb_ledger *done = dlqb_ledger_new();
  FUZZ_CHECK(done != NULL);
  dlqb_report_ledger(r, done, NULL);
  const char *p = (const char *)data + 1, *end = (const char *)data + size;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
    char *line = malloc(len + 1);
    FUZZ_CHECK(line != NULL);
    memcpy(line, p, len);
    line[len] = '\0';
    FUZZ_CHECK(dlqb_report_line(r, line, len));
    if (len > 2 && (line[0] == 'Q' || line[0] == 'R') && line[1] == ' ')
      FUZZ_CHECK(dlqb_report_item(r, line[0] == 'Q' ? DLQB_Q_DLQ : DLQB_Q_REVIEW, line + 2,
                                  line + 2, "", line + 2, &err) == DLQB_OK);
    if (len > 2 && line[0] == 'C' && line[1] == ' ')
      FUZZ_CHECK(dlqb_ledger_add_at(done, line + 2, "crm",
                                    INT64_C(1795000000000) + (int64_t)len * 3600000 -
                                        (data[0] & 64 ? INT64_C(86400000) * 400 : 0),
                                    &err) == DLQB_OK);
    free(line);
    p += len + 1;
  }
  dlqb_report_counts k;
  FUZZ_CHECK(dlqb_report_finish(r, &k, &err) == DLQB_OK);
  size_t n = 0;
  const dlqb_report_entry *es = dlqb_report_entries(r, &n);
  unsigned long sum = 0;
  for (int s = 0; s < DLQB_RS__COUNT; s++) sum += k.state[s];
  FUZZ_CHECK(sum == k.total && k.total == n);
  size_t ng = 0;
  const dlqb_report_group *gs = dlqb_report_groups(r, &ng);
  unsigned long grouped = 0;
  for (size_t g = 0; g < ng; g++) {
    grouped += gs[g].requests;
    FUZZ_CHECK(gs[g].measured <= gs[g].requests && gs[g].median_ms >= 0 && gs[g].mean_ms >= 0);
    FUZZ_CHECK(printable(gs[g].legal_basis) && printable(gs[g].action));
  }
  FUZZ_CHECK(grouped == n);
  for (size_t i = 0; i < n; i++) {
    const dlqb_report_entry *e = &es[i];
    bool measured = e->response == DLQB_RESP_ON_TIME || e->response == DLQB_RESP_LATE ||
                    e->response == DLQB_RESP_CLOSED;
    FUZZ_CHECK(!measured || e->elapsed_ms >= 0);
    FUZZ_CHECK(e->response != DLQB_RESP_CLOCK || e->elapsed_ms < 0);
    FUZZ_CHECK(printable(e->legal_basis) && printable(e->action) && printable(e->received_from));
  }
  /* A report of the entries, signed: intact; one byte changed: not. */
  size_t cap = 64, blen = 0;
  char *body = malloc(cap);
  FUZZ_CHECK(body != NULL);
  for (size_t i = 0; i < n; i++) {
    const dlqb_report_entry *e = &es[i];
    const char *strs[] = {e->request_id, e->source_system, e->message_id, e->queue,
                          e->owner,      e->note,          e->last_event, e->last_time,
                          e->last_actor, e->last_writer,   e->detail};
    for (size_t j = 0; j < sizeof strs / sizeof strs[0]; j++) {
      FUZZ_CHECK(printable(strs[j]));
      size_t l = strlen(strs[j]);
      while (cap - blen < l + 2) {
        cap *= 2;
        body = realloc(body, cap);
        FUZZ_CHECK(body != NULL);
      }
      memcpy(body + blen, strs[j], l);
      blen += l;
      body[blen++] = '\n';
    }
  }
  if (blen == 0) body[blen++] = '\n';
  char *out = NULL;
  size_t out_len = 0;
  FUZZ_CHECK(dlqb_report_sign(key, key_id, body, blen, false, &out, &out_len, &err) == DLQB_OK);
  st = dlqb_report_verify(ring, out, out_len, &chk, &err);
  FUZZ_CHECK(st == DLQB_OK);
  size_t at = size > 1 ? data[1] % out_len : 0;
  out[at] ^= (char)(data[size - 1] | 1);
  FUZZ_CHECK(dlqb_report_verify(ring, out, out_len, &chk, &err) == DLQB_EINVAL);
  FUZZ_CHECK(fuzz_printable_line(err.msg, sizeof err.msg));
  free(out);
  free(body);
  dlqb_report_free(r);
  dlqb_ledger_free(done);
  return 0;
}

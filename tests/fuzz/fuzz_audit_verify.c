/* libFuzzer target: the audit verifier over arbitrary lines.
 * Input: the first byte picks a mode; the rest is split at '\n' into lines,
 * and a line "--" starts the next file (lines before the first "==" line go
 * to the seal, or to the anchors when they start {"v":2,"type":"anchor").
 * In mode "sign" every line is taken as a record body,
 * KEYIDKEYIDKEYID0 in it becomes the fuzz key's id, and it is given a
 * valid Ed25519 signature first, so the fuzzer reaches the chain, seal
 * and rotation checks and not only the signature check.
 * Contracts checked: no crash or leak; a failure is DLQB_EINVAL or
 * DLQB_ENOMEM with a one-line printable message; after a failure every
 * further line fails too; audit show's filter matches no line without its
 * request_id; audit reconcile's tally never holds more ids than lines;
 * the seal reader (dlqb__audit_seal_parse) reads no byte past a line, and
 * on every line json-c reads as an object it agrees with json-c's reading
 * of the members (what the verifier read before the reader was shared). */
#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/audit/audit_private.h"
#include "dlqb/audit.h"
#include "dlqb/reconcile.h"
#include "fuzz_common.h"

/* The seal members as the verifier read them through json-c before the
 * reader was shared: the oracle the reader must match. */
static int json_hex(json_object *o, const char *key, size_t n, char *out) {
  json_object *m;
  if (!json_object_object_get_ex(o, key, &m) || !json_object_is_type(m, json_type_string)) return 0;
  const char *s = json_object_get_string(m);
  if (strlen(s) != n) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  memcpy(out, s, n + 1);
  return 1;
}

static void check_seal_reader(const char *line, size_t len) {
  /* An exact copy, so that a read past len is an ASan error. */
  char *copy = malloc(len ? len : 1);
  FUZZ_CHECK(copy != NULL);
  memcpy(copy, line, len);
  dlqb__audit_seal s;
  int ok = dlqb__audit_seal_parse(copy, len, &s);
  if (ok) {
    FUZZ_CHECK(strlen(s.chain) == DLQB_AUDIT_CHAIN_HEX &&
               strlen(s.last_hash) == DLQB_AUDIT_HASH_HEX);
    FUZZ_CHECK(s.seq < (uint64_t)INT64_MAX);
  }
  json_tokener *tok = json_tokener_new();
  FUZZ_CHECK(tok != NULL);
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
  json_object *o = len < 1u << 30 ? json_tokener_parse_ex(tok, copy, (int)len) : NULL;
  if (o != NULL && json_tokener_get_error(tok) == json_tokener_success &&
      json_tokener_get_parse_end(tok) == len && json_object_is_type(o, json_type_object)) {
    json_object *type, *seq, *ended;
    char chain[DLQB_AUDIT_CHAIN_HEX + 1], mac[DLQB_AUDIT_HASH_HEX + 1];
    int want = json_object_object_get_ex(o, "type", &type) &&
               json_object_is_type(type, json_type_string) &&
               strcmp(json_object_get_string(type), "seal") == 0 &&
               json_hex(o, "chain", DLQB_AUDIT_CHAIN_HEX, chain) &&
               json_object_object_get_ex(o, "seq", &seq) &&
               json_object_is_type(seq, json_type_int) && json_object_get_int64(seq) >= 0 &&
               json_object_get_int64(seq) != INT64_MAX &&
               json_hex(o, "last_hash", DLQB_AUDIT_HASH_HEX, mac);
    FUZZ_CHECK(ok == want);
    if (ok) {
      FUZZ_CHECK(strcmp(s.chain, chain) == 0 && strcmp(s.last_hash, mac) == 0);
      FUZZ_CHECK(s.seq == (uint64_t)json_object_get_int64(seq));
      int open = json_object_object_get_ex(o, "ended", &ended) &&
                 json_object_is_type(ended, json_type_boolean) && !json_object_get_boolean(ended);
      FUZZ_CHECK(s.open == open);
    }
  }
  json_object_put(o);
  json_tokener_free(tok);
  free(copy);
}

static const unsigned char raw_key[32] = "fuzz-key-0123456789abcdef-ed255";
#define KEYID_PLACEHOLDER "KEYIDKEYIDKEYID0"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int sign = data[0] & 1;
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
  dlqb_audit_verifier *v = dlqb_audit_verifier_new(ring, (data[0] >> 1) & 1);
  FUZZ_CHECK(v != NULL);
  dlqb_error err;
  memset(&err, 0, sizeof err);
  const char *p = (const char *)data + 1, *end = (const char *)data + size;
  int in_seal = memchr(p, '=', (size_t)(end - p)) != NULL;
  int failed = 0, files = 0;
  dlqb_audit_filter filter;
  dlqb_audit_filter_init(&filter, "req-1", "msg-1");
  FUZZ_CHECK(filter.needle_len > 0);
  dlqb_reconcile *tally = dlqb_reconcile_new();
  FUZZ_CHECK(tally != NULL);
  size_t nlines = 0;
  char *line = malloc(size + DLQB__AUDIT_SUFFIX_LEN + 16);
  FUZZ_CHECK(line != NULL);
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
    int complete = nl != NULL;
    if (len == 2 && memcmp(p, "==", 2) == 0) {
      in_seal = 0;
    } else if (len == 2 && memcmp(p, "--", 2) == 0 && !in_seal) {
      dlqb_audit_verifier_begin_file(v, files++ % 2 ? "b.log" : "a.log");
    } else {
      memcpy(line, p, len);
      size_t n = len;
      if (sign && len > 0 && line[0] == '{') {
        char sig[DLQB_AUDIT_SIG_HEX + 1];
        for (char *k = line;
             (k = (char *)dlqb_text_find(k, (size_t)(line + n - k), KEYID_PLACEHOLDER,
                                         DLQB_AUDIT_KEY_ID_HEX)) != NULL;)
          memcpy(k, key_id, DLQB_AUDIT_KEY_ID_HEX);
        line[n] = '}';
        FUZZ_CHECK(dlqb__audit_sign(key, line, n + 1, sig));
        memcpy(line + n, DLQB__AUDIT_SIG_TAIL, DLQB__AUDIT_SIG_TAIL_LEN);
        memcpy(line + n + DLQB__AUDIT_SIG_TAIL_LEN, sig, DLQB_AUDIT_SIG_HEX);
        memcpy(line + n + DLQB__AUDIT_SIG_TAIL_LEN + DLQB_AUDIT_SIG_HEX, "\"}", 2);
        n += DLQB__AUDIT_SUFFIX_LEN;
      }
      check_seal_reader(line, n);
      /* Before "==", a line that says it is an anchor goes to the anchors
       * (what verify --anchors reads from the stream), the rest to the seal. */
      static const char anchor[] = "{\"v\":2,\"type\":\"anchor\"";
      bool is_anchor = n >= sizeof anchor - 1 && memcmp(line, anchor, sizeof anchor - 1) == 0;
      dlqb_status st = in_seal && is_anchor ? dlqb_audit_verifier_anchor_line(v, line, n, &err)
                       : in_seal            ? dlqb_audit_verifier_seal_line(v, line, n, &err)
                                            : dlqb_audit_verifier_line(v, line, n, complete, &err);
      /* audit show's filter is given only verified lines, but must not
       * trust them: on any line it answers without crashing, and a line
       * that does not hold the request_id byte for byte never matches. */
      if (dlqb_audit_filter_match(&filter, line, n))
        FUZZ_CHECK(dlqb_text_find(line, n, filter.needle, filter.needle_len) != NULL);
      /* audit reconcile's tally: at most one entry per line seen */
      FUZZ_CHECK(dlqb_reconcile_line(tally, line, n));
      FUZZ_CHECK(dlqb_reconcile_size(tally) <= ++nlines);
      if (st != DLQB_OK) {
        FUZZ_CHECK(st == DLQB_EINVAL || st == DLQB_ENOMEM);
        FUZZ_CHECK(fuzz_printable_line(err.msg, sizeof err.msg));
        if (!in_seal) failed = 1;
      } else {
        FUZZ_CHECK(!failed);
      }
    }
    p += len + (nl ? 1 : 0);
  }
  dlqb_audit_summary sum;
  dlqb_status st = dlqb_audit_verifier_finish(v, &sum, &err);
  if (st != DLQB_OK) FUZZ_CHECK(fuzz_printable_line(err.msg, sizeof err.msg));
  else FUZZ_CHECK(sum.chains_ended <= sum.chains && sum.anchored <= sum.anchors);
  free(line);
  dlqb_audit_verifier_free(v);
  dlqb_reconcile_free(tally);
  return 0;
}

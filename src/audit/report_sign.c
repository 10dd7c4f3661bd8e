/* Signing an audit report and checking it with public keys alone (see
 * dlqb/report.h for the two forms). The JSON form is signed exactly as an
 * audit record (record.c's split, sign and check), so one rule covers
 * both: Ed25519 over the bytes without the sig member. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_private.h"
#include "dlqb/report.h"
#include "dlqb/text.h"

#define PREFIX_LEN (sizeof DLQB_REPORT_SIG_PREFIX - 1)
/* "signature ed25519 " + key id + " " + signature + "\n" */
#define SIG_LINE_LEN (PREFIX_LEN + DLQB_AUDIT_KEY_ID_HEX + 1 + DLQB_AUDIT_SIG_HEX + 1)

dlqb_status dlqb_report_sign(EVP_PKEY *key, const char *key_id, const char *body, size_t len,
                             bool json, char **out, size_t *out_len, dlqb_error *err) {
  char sig[DLQB_AUDIT_SIG_HEX + 1];
  *out = NULL;
  *out_len = 0;
  if (json && (len < 2 || body[0] != '{' || body[len - 1] != '}' || memchr(body, '\n', len)))
    return dlqb_fail(err, DLQB_EINVAL, "a JSON report must be one object on one line");
  if (!json && len > 0 && body[len - 1] != '\n')
    return dlqb_fail(err, DLQB_EINVAL, "a text report must end in a newline");
  if (!dlqb__audit_sign(key, body, len, sig))
    return dlqb_fail(err, DLQB_EIO, "cannot sign the report (OpenSSL failed)");
  size_t cap = len + SIG_LINE_LEN + DLQB__AUDIT_SUFFIX_LEN + 2;
  char *buf = malloc(cap);
  if (buf == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  int n;
  if (json) {
    /* The body without its closing brace, the sig member, the brace. */
    memcpy(buf, body, len - 1);
    n = snprintf(buf + len - 1, cap - (len - 1), "%s%s\"}\n", DLQB__AUDIT_SIG_TAIL, sig);
  } else {
    memcpy(buf, body, len);
    n = snprintf(buf + len, cap - len, "%s%s %s\n", DLQB_REPORT_SIG_PREFIX, key_id, sig);
  }
  *out = buf;
  *out_len = (json ? len - 1 : len) + (size_t)n;
  return DLQB_OK;
}

/* The key that signed it, from the ring: refused when unknown or revoked. */
static dlqb_status find_key(const dlqb_audit_keyring *ring, const char *id,
                            const dlqb__audit_pubkey **out, dlqb_error *err) {
  *out = dlqb__audit_keyring_find(ring, id);
  if (*out == NULL)
    return dlqb_fail(err, DLQB_EINVAL,
                     "signed by key %s, which is not among the public keys given: it cannot be "
                     "checked, so it proves nothing",
                     id);
  if ((*out)->revoked)
    return dlqb_fail(err, DLQB_EINVAL, "signed by key %s, which is revoked (%s)", id, (*out)->name);
  return DLQB_OK;
}

static dlqb_status verify_json(const dlqb_audit_keyring *ring, const char *buf, size_t len,
                               dlqb_report_check *out, dlqb_error *err) {
  /* One line, its newline the last byte (or none). */
  size_t line = len > 0 && buf[len - 1] == '\n' ? len - 1 : len;
  if (memchr(buf, '\n', line) != NULL)
    return dlqb_fail(err, DLQB_EINVAL, "not a signed JSON report: more than one line");
  size_t body_len = 0;
  const char *sig = NULL;
  if (!dlqb__audit_split(buf, line, &body_len, &sig) || sig == NULL)
    return dlqb_fail(err, DLQB_EINVAL, "not a signed JSON report: no sig member at its end");
  /* The key id: the first "key" member (the writer puts it before the
   * requests). Whatever it names, only that key's signature over every
   * byte makes the report intact, so no parse of the whole is needed. */
  static const char tag[] = "\"key\":\"";
  const char *at = dlqb_text_find(buf, body_len, tag, sizeof tag - 1);
  const char *id = at != NULL ? at + sizeof tag - 1 : NULL;
  dlqb_status st = DLQB_OK;
  if (id == NULL || (size_t)(buf + body_len - id) < DLQB_AUDIT_KEY_ID_HEX + 1 ||
      !dlqb__audit_is_lower_hex(id, DLQB_AUDIT_KEY_ID_HEX) || id[DLQB_AUDIT_KEY_ID_HEX] != '"')
    st = dlqb_fail(err, DLQB_EINVAL, "not a signed JSON report: no key id in its \"key\" member");
  if (st == DLQB_OK) {
    memcpy(out->key_id, id, DLQB_AUDIT_KEY_ID_HEX);
    out->key_id[DLQB_AUDIT_KEY_ID_HEX] = '\0';
    const dlqb__audit_pubkey *k;
    if ((st = find_key(ring, out->key_id, &k, err)) == DLQB_OK) {
      snprintf(out->key_file, sizeof out->key_file, "%s", k->name);
      /* BODY + "}", for a moment (as the writer signed it). */
      char *msg = malloc(body_len + 1);
      if (msg == NULL) {
        st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
      } else {
        memcpy(msg, buf, body_len);
        msg[body_len] = '}';
        if (!dlqb__audit_sig_ok(k->pub, msg, body_len + 1, sig))
          st = dlqb_fail(err, DLQB_EINVAL,
                         "the signature of key %s does not match: the report "
                         "was changed after it was signed",
                         out->key_id);
        free(msg);
      }
      out->body_len = body_len + 1;
    }
  }
  return st;
}

static dlqb_status verify_text(const dlqb_audit_keyring *ring, const char *buf, size_t len,
                               dlqb_report_check *out, dlqb_error *err) {
  if (len < SIG_LINE_LEN || buf[len - 1] != '\n')
    return dlqb_fail(err, DLQB_EINVAL, "not a signed report: it does not end in a signature line");
  size_t at = len - SIG_LINE_LEN;
  const char *line = buf + at, *id = line + PREFIX_LEN;
  const char *sig = id + DLQB_AUDIT_KEY_ID_HEX + 1;
  if ((at > 0 && buf[at - 1] != '\n') || memcmp(line, DLQB_REPORT_SIG_PREFIX, PREFIX_LEN) != 0 ||
      !dlqb__audit_is_lower_hex(id, DLQB_AUDIT_KEY_ID_HEX) || id[DLQB_AUDIT_KEY_ID_HEX] != ' ' ||
      !dlqb__audit_is_lower_hex(sig, DLQB_AUDIT_SIG_HEX))
    return dlqb_fail(err, DLQB_EINVAL,
                     "not a signed report: its last line is not \"%s<key id> "
                     "<signature>\"",
                     DLQB_REPORT_SIG_PREFIX);
  memcpy(out->key_id, id, DLQB_AUDIT_KEY_ID_HEX);
  out->key_id[DLQB_AUDIT_KEY_ID_HEX] = '\0';
  out->body_len = at;
  const dlqb__audit_pubkey *k;
  dlqb_status st = find_key(ring, out->key_id, &k, err);
  if (st != DLQB_OK) return st;
  snprintf(out->key_file, sizeof out->key_file, "%s", k->name);
  if (!dlqb__audit_sig_ok(k->pub, buf, at, sig))
    return dlqb_fail(err, DLQB_EINVAL,
                     "the signature of key %s does not match: the report was "
                     "changed after it was signed",
                     out->key_id);
  return DLQB_OK;
}

dlqb_status dlqb_report_verify(const dlqb_audit_keyring *ring, const char *buf, size_t len,
                               dlqb_report_check *out, dlqb_error *err) {
  memset(out, 0, sizeof *out);
  if (len == 0) return dlqb_fail(err, DLQB_EINVAL, "not a signed report: the file is empty");
  out->json = buf[0] == '{';
  return out->json ? verify_json(ring, buf, len, out, err) : verify_text(ring, buf, len, out, err);
}

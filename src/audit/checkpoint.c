/* Checkpoints as C2SP signed notes and witness cosignatures
 * (include/dlqb/checkpoint.h). */
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_private.h"
#include "dlqb/checkpoint.h"

#define EM_DASH          "\xe2\x80\x94" /* U+2014, which starts every signature line */
#define SIG_ALG_ED25519  0x01
#define SIG_ALG_COSIG_V1 0x04

/* ---- base64 ---- */

void dlqb_base64_encode(const unsigned char *in, size_t n, char *out) {
  int w = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
  out[w < 0 ? 0 : w] = '\0';
}

long dlqb_base64_decode(const char *s, size_t len, unsigned char *out, size_t cap) {
  if (len == 0 || len % 4 != 0 || len / 4 * 3 > cap + 2) return -1;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '/' || (c == '=' && i >= len - 2);
    if (!ok || (c != '=' && i > 0 && s[i - 1] == '=')) return -1;
  }
  unsigned char *tmp = malloc(len / 4 * 3);
  if (tmp == NULL) return -1;
  int n = EVP_DecodeBlock(tmp, (const unsigned char *)s, (int)len);
  long pad = (s[len - 1] == '=') + (s[len - 2] == '=');
  long got = n < 0 ? -1 : n - pad;
  if (got >= 0 && (size_t)got <= cap) memcpy(out, tmp, (size_t)got);
  else got = -1;
  /* One spelling per value: unused low bits in the last character would
   * let a byte of a signed or proved text change without changing what it
   * decodes to. */
  char *again = got >= 0 ? malloc(len + 1) : NULL;
  if (got >= 0 && (again == NULL || (dlqb_base64_encode(tmp, (size_t)got, again),
                                     strlen(again) != len || memcmp(again, s, len) != 0)))
    got = -1;
  free(again);
  free(tmp);
  return got;
}

/* ---- key ids ---- */

static bool name_ok(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n >= DLQB_CHECKPOINT_NAME_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (name[i] <= ' ' || name[i] > '~' || name[i] == '+') return false;
  return true;
}

/* SHA-256(name || "\n" || alg || raw public key)[:4]. */
static bool note_key_id(EVP_PKEY *key, const char *name, unsigned char alg, unsigned char id[4]) {
  unsigned char raw[32], md[32];
  size_t rl = sizeof raw;
  unsigned int ml = 0;
  if (EVP_PKEY_get_raw_public_key(key, raw, &rl) != 1 || rl != sizeof raw) return false;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  bool ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
            EVP_DigestUpdate(ctx, name, strlen(name)) == 1 && EVP_DigestUpdate(ctx, "\n", 1) == 1 &&
            EVP_DigestUpdate(ctx, &alg, 1) == 1 && EVP_DigestUpdate(ctx, raw, sizeof raw) == 1 &&
            EVP_DigestFinal_ex(ctx, md, &ml) == 1;
  EVP_MD_CTX_free(ctx);
  if (ok) memcpy(id, md, 4);
  return ok;
}

static bool ed_sign(EVP_PKEY *key, const void *msg, size_t len, unsigned char sig[64]) {
  size_t sl = 64;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  bool ok = ctx != NULL && EVP_DigestSignInit(ctx, NULL, NULL, NULL, key) == 1 &&
            EVP_DigestSign(ctx, sig, &sl, msg, len) == 1 && sl == 64;
  EVP_MD_CTX_free(ctx);
  return ok;
}

static bool ed_verify(EVP_PKEY *pub, const void *msg, size_t len, const unsigned char sig[64]) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  bool ok = ctx != NULL && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pub) == 1 &&
            EVP_DigestVerify(ctx, sig, 64, msg, len) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

/* ---- the log's checkpoint ---- */

dlqb_status dlqb_checkpoint_sign(EVP_PKEY *key, const dlqb_checkpoint *cp, char *out, size_t *len,
                                 dlqb_error *err) {
  const char *origin = cp->origin;
  if (!name_ok(origin))
    return dlqb_fail(err, DLQB_EINVAL,
                     "checkpoint origin '%s' must be printable ASCII without "
                     "spaces or '+'",
                     origin);
  char b64[64], ib64[64];
  dlqb_base64_encode(cp->root, DLQB_MERKLE_HASH, b64);
  int tl = snprintf(out, DLQB_CHECKPOINT_MAX, "%s\n%" PRIu64 "\n%s\n", origin, cp->size, b64);
  if (cp->has_index) {
    dlqb_base64_encode(cp->index_root, DLQB_MERKLE_HASH, ib64);
    tl += snprintf(out + tl, DLQB_CHECKPOINT_MAX - (size_t)tl,
                   DLQB_CHECKPOINT_INDEX_TAG "%" PRIu64 " %s\n", cp->index_entries, ib64);
  }
  unsigned char blob[4 + 64];
  if (!note_key_id(key, origin, SIG_ALG_ED25519, blob) || !ed_sign(key, out, (size_t)tl, blob + 4))
    return dlqb_fail(err, DLQB_EIO, "cannot sign the checkpoint (OpenSSL failed)");
  char sig[128];
  dlqb_base64_encode(blob, sizeof blob, sig);
  int n =
      snprintf(out + tl, DLQB_CHECKPOINT_MAX - (size_t)tl, "\n" EM_DASH " %s %s\n", origin, sig);
  *len = (size_t)tl + (size_t)n;
  return DLQB_OK;
}

dlqb_status dlqb_checkpoint_parse(const char *note, size_t len, dlqb_checkpoint *cp,
                                  dlqb_error *err) {
  memset(cp, 0, sizeof *cp);
  const char *end = NULL;
  for (size_t i = 0; i + 1 < len; i++)
    if (note[i] == '\n' && note[i + 1] == '\n') {
      end = note + i + 1;
      break;
    }
  if (end == NULL || memchr(note, '\0', len) != NULL)
    return dlqb_fail(err, DLQB_EINVAL, "not a signed note (no blank line before signatures)");
  cp->text_len = (size_t)(end - note);
  const char *l1 = memchr(note, '\n', cp->text_len);
  const char *l2 = l1 ? memchr(l1 + 1, '\n', (size_t)(end - l1 - 1)) : NULL;
  const char *l3 = l2 ? memchr(l2 + 1, '\n', (size_t)(end - l2 - 1)) : NULL;
  if (l3 == NULL) return dlqb_fail(err, DLQB_EINVAL, "not a checkpoint: fewer than three lines");
  size_t ol = (size_t)(l1 - note);
  if (ol == 0 || ol >= sizeof cp->origin)
    return dlqb_fail(err, DLQB_EINVAL, "not a checkpoint: bad origin line");
  memcpy(cp->origin, note, ol);
  if (!name_ok(cp->origin)) return dlqb_fail(err, DLQB_EINVAL, "not a checkpoint: bad origin line");
  /* The size: decimal, no sign, no leading zero (one spelling per size). */
  const char *s = l1 + 1;
  size_t sl = (size_t)(l2 - s);
  if (sl == 0 || sl > 20 || (s[0] == '0' && sl > 1))
    return dlqb_fail(err, DLQB_EINVAL, "not a checkpoint: bad tree size");
  uint64_t size = 0;
  for (size_t i = 0; i < sl; i++) {
    if (s[i] < '0' || s[i] > '9' || size > (UINT64_MAX - 9) / 10)
      return dlqb_fail(err, DLQB_EINVAL, "not a checkpoint: bad tree size");
    size = size * 10 + (uint64_t)(s[i] - '0');
  }
  cp->size = size;
  if (dlqb_base64_decode(l2 + 1, (size_t)(l3 - l2 - 1), cp->root, sizeof cp->root) !=
      DLQB_MERKLE_HASH)
    return dlqb_fail(err, DLQB_EINVAL, "not a checkpoint: the root hash is not 32 bytes of base64");
  /* Extension lines: the request index is the one this reader knows. */
  const size_t tag = sizeof DLQB_CHECKPOINT_INDEX_TAG - 1;
  const char *l4 = l3 + 1;
  const char *e4 = l4 < end ? memchr(l4, '\n', (size_t)(end - l4)) : NULL;
  if (e4 != NULL && (size_t)(e4 - l4) > tag && memcmp(l4, DLQB_CHECKPOINT_INDEX_TAG, tag) == 0) {
    const char *num = l4 + tag, *sp = memchr(num, ' ', (size_t)(e4 - num));
    uint64_t entries = 0;
    bool ok = sp != NULL && sp > num && sp - num <= 19 && !(num[0] == '0' && sp - num > 1);
    for (const char *q = num; ok && q < sp; q++) {
      ok = *q >= '0' && *q <= '9';
      entries = entries * 10 + (uint64_t)(*q - '0');
    }
    if (!ok || dlqb_base64_decode(sp + 1, (size_t)(e4 - sp - 1), cp->index_root,
                                  sizeof cp->index_root) != DLQB_MERKLE_HASH)
      return dlqb_fail(err, DLQB_EINVAL, "not a checkpoint: a malformed index line");
    cp->has_index = true;
    cp->index_entries = entries;
  }
  return DLQB_OK;
}

/* Calls fn for each signature line "— NAME BASE64" after the text,
 * with its name and decoded bytes; stops when fn returns true. */
typedef bool (*sig_fn)(void *ctx, const char *line, size_t llen, const char *name, size_t nlen,
                       const unsigned char *blob, size_t blen);

static bool each_sig(const char *note, size_t len, size_t text_len, sig_fn fn, void *ctx) {
  const char *p = note + text_len + 1, *end = note + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL) return false;
    size_t ll = (size_t)(nl - p);
    const size_t dl = sizeof EM_DASH " " - 1;
    if (ll > dl && memcmp(p, EM_DASH " ", dl) == 0) {
      const char *name = p + dl;
      const char *sp = memchr(name, ' ', (size_t)(nl - name));
      unsigned char blob[128];
      long bl = sp ? dlqb_base64_decode(sp + 1, (size_t)(nl - sp - 1), blob, sizeof blob) : -1;
      if (sp != NULL && bl > 4 && fn(ctx, p, ll, name, (size_t)(sp - name), blob, (size_t)bl))
        return true;
    }
    p = nl + 1;
  }
  return false;
}

typedef struct {
  const char *note;
  const dlqb_checkpoint *cp;
  const dlqb_audit_keyring *ring;
  const dlqb__audit_pubkey *signer;
  bool revoked_seen;
} log_check;

static bool check_log_sig(void *ctx, const char *line, size_t llen, const char *name, size_t nlen,
                          const unsigned char *blob, size_t blen) {
  (void)line;
  (void)llen;
  log_check *c = ctx;
  if (nlen != strlen(c->cp->origin) || memcmp(name, c->cp->origin, nlen) != 0 || blen != 68)
    return false;
  for (size_t i = 0; i < c->ring->n; i++) {
    const dlqb__audit_pubkey *k = &c->ring->keys[i];
    unsigned char id[4];
    if (!note_key_id(k->pub, c->cp->origin, SIG_ALG_ED25519, id) || memcmp(id, blob, 4) != 0)
      continue;
    if (!ed_verify(k->pub, c->note, c->cp->text_len, blob + 4)) continue;
    if (k->revoked) {
      c->revoked_seen = true;
      continue;
    }
    c->signer = k;
    return true;
  }
  return false;
}

dlqb_status dlqb_checkpoint_verify(const char *note, size_t len, const dlqb_audit_keyring *ring,
                                   dlqb_checkpoint *cp, char *key_id, dlqb_error *err) {
  dlqb_status st = dlqb_checkpoint_parse(note, len, cp, err);
  if (st != DLQB_OK) return st;
  log_check c = {.note = note, .cp = cp, .ring = ring};
  if (!each_sig(note, len, cp->text_len, check_log_sig, &c))
    return dlqb_fail(err, DLQB_EINVAL,
                     c.revoked_seen ? "the checkpoint of size %" PRIu64 " is signed with a revoked "
                                      "key"
                                    : "the checkpoint of size %" PRIu64 " (origin %s) carries no "
                                      "signature of a given public key",
                     cp->size, cp->origin);
  if (key_id != NULL) snprintf(key_id, DLQB_AUDIT_KEY_ID_HEX + 1, "%s", c.signer->id);
  return DLQB_OK;
}

/* ---- witnesses ---- */

void dlqb_witness_key_release(dlqb_witness_key *k) {
  if (k == NULL) return;
  EVP_PKEY_free(k->pub);
  k->pub = NULL;
}

dlqb_status dlqb_witness_vkey_parse(const char *vkey, dlqb_witness_key *out, dlqb_error *err) {
  memset(out, 0, sizeof *out);
  size_t n = strlen(vkey);
  while (n > 0 && (vkey[n - 1] == '\n' || vkey[n - 1] == '\r' || vkey[n - 1] == ' ')) n--;
  const char *p1 = memchr(vkey, '+', n);
  const char *p2 = p1 ? memchr(p1 + 1, '+', (size_t)(vkey + n - p1 - 1)) : NULL;
  if (p2 == NULL || (size_t)(p1 - vkey) >= sizeof out->name || p2 - p1 - 1 != 8)
    return dlqb_fail(err, DLQB_EINVAL, "not a witness verifier key (NAME+KEYID+BASE64)");
  memcpy(out->name, vkey, (size_t)(p1 - vkey));
  unsigned char id[4], raw[33];
  for (int i = 0; i < 4; i++) {
    unsigned v;
    if (!dlqb__audit_is_lower_hex(p1 + 1 + 2 * i, 2) || sscanf(p1 + 1 + 2 * i, "%2x", &v) != 1)
      return dlqb_fail(err, DLQB_EINVAL, "witness key '%s': bad key id", out->name);
    id[i] = (unsigned char)v;
  }
  if (!name_ok(out->name) ||
      dlqb_base64_decode(p2 + 1, (size_t)(vkey + n - p2 - 1), raw, sizeof raw) != 33 ||
      raw[0] != SIG_ALG_COSIG_V1)
    return dlqb_fail(err, DLQB_EINVAL, "witness key '%s': not a cosignature/v1 Ed25519 key",
                     out->name);
  out->pub = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, raw + 1, 32);
  if (out->pub == NULL || !note_key_id(out->pub, out->name, SIG_ALG_COSIG_V1, out->id) ||
      memcmp(out->id, id, 4) != 0) {
    dlqb_witness_key_release(out);
    return dlqb_fail(err, DLQB_EINVAL, "witness key '%s': its key id does not match its key",
                     out->name);
  }
  return DLQB_OK;
}

dlqb_status dlqb_witness_vkey_of(EVP_PKEY *key, const char *name, char *out, size_t cap,
                                 dlqb_error *err) {
  unsigned char id[4], raw[33];
  size_t rl = 32;
  char b64[64];
  if (!name_ok(name))
    return dlqb_fail(err, DLQB_EINVAL,
                     "witness name '%s' must be printable ASCII without "
                     "spaces or '+'",
                     name);
  raw[0] = SIG_ALG_COSIG_V1;
  if (EVP_PKEY_get_raw_public_key(key, raw + 1, &rl) != 1 ||
      !note_key_id(key, name, SIG_ALG_COSIG_V1, id))
    return dlqb_fail(err, DLQB_EIO, "cannot read the witness key (OpenSSL failed)");
  dlqb_base64_encode(raw, sizeof raw, b64);
  snprintf(out, cap, "%s+%02x%02x%02x%02x+%s", name, id[0], id[1], id[2], id[3], b64);
  return DLQB_OK;
}

/* "cosignature/v1\ntime T\n" + text: what a witness signs. */
static char *cosigned_message(uint64_t t, const char *note, size_t text_len, size_t *len) {
  char head[64];
  int hl = snprintf(head, sizeof head, "cosignature/v1\ntime %" PRIu64 "\n", t);
  char *m = malloc((size_t)hl + text_len);
  if (m == NULL) return NULL;
  memcpy(m, head, (size_t)hl);
  memcpy(m + hl, note, text_len);
  *len = (size_t)hl + text_len;
  return m;
}

dlqb_status dlqb_checkpoint_cosign(EVP_PKEY *key, const char *name, uint64_t t, const char *note,
                                   size_t text_len, char *line, size_t cap, dlqb_error *err) {
  unsigned char blob[4 + 8 + 64];
  size_t ml = 0;
  if (!name_ok(name))
    return dlqb_fail(err, DLQB_EINVAL,
                     "witness name '%s' must be printable ASCII without "
                     "spaces or '+'",
                     name);
  char *m = cosigned_message(t, note, text_len, &ml);
  if (m == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  for (int i = 0; i < 8; i++) blob[4 + i] = (unsigned char)(t >> (56 - 8 * i));
  bool ok = note_key_id(key, name, SIG_ALG_COSIG_V1, blob) && ed_sign(key, m, ml, blob + 12);
  free(m);
  if (!ok) return dlqb_fail(err, DLQB_EIO, "cannot cosign (OpenSSL failed)");
  char b64[128];
  dlqb_base64_encode(blob, sizeof blob, b64);
  snprintf(line, cap, EM_DASH " %s %s\n", name, b64);
  return DLQB_OK;
}

typedef struct {
  const dlqb_witness_key *k;
  const char *note;
  size_t text_len;
  uint64_t t;
} cosig_check;

static bool check_cosig(void *ctx, const char *line, size_t llen, const char *name, size_t nlen,
                        const unsigned char *blob, size_t blen) {
  (void)line;
  (void)llen;
  cosig_check *c = ctx;
  if (nlen != strlen(c->k->name) || memcmp(name, c->k->name, nlen) != 0 || blen != 76 ||
      memcmp(blob, c->k->id, 4) != 0)
    return false;
  uint64_t t = 0;
  for (int i = 0; i < 8; i++) t = t << 8 | blob[4 + i];
  size_t ml = 0;
  char *m = cosigned_message(t, c->note, c->text_len, &ml);
  bool ok = m != NULL && ed_verify(c->k->pub, m, ml, blob + 12);
  free(m);
  if (ok) c->t = t;
  return ok;
}

bool dlqb_checkpoint_cosig_ok(const dlqb_witness_key *k, const char *note, size_t text_len,
                              const char *line, size_t line_len, uint64_t *t) {
  /* One line as a note of its own: text, blank line, the line. */
  char *buf = malloc(text_len + 1 + line_len + 1);
  if (buf == NULL) return false;
  memcpy(buf, note, text_len);
  buf[text_len] = '\n';
  memcpy(buf + text_len + 1, line, line_len);
  buf[text_len + 1 + line_len] = '\n';
  cosig_check c = {.k = k, .note = note, .text_len = text_len};
  bool ok = each_sig(buf, text_len + line_len + 2, text_len, check_cosig, &c);
  free(buf);
  if (ok && t != NULL) *t = c.t;
  return ok;
}

size_t dlqb_checkpoint_cosigners(const char *note, size_t len, const dlqb_checkpoint *cp,
                                 const dlqb_witness_key *keys, size_t n, bool *which) {
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    cosig_check c = {.k = &keys[i], .note = note, .text_len = cp->text_len};
    bool ok = each_sig(note, len, cp->text_len, check_cosig, &c);
    if (which != NULL) which[i] = ok;
    count += ok;
  }
  return count;
}

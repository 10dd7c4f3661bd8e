/* The audit record format: the HMAC over a line, hex, splitting a line
 * from its mac, and building the JSON lines of a batch. */
#include <inttypes.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/params.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_private.h"
#include "dlqb/text.h"

/* ---- HMAC, hex and the mac member ---- */

bool dlqb__audit_hmac_init(dlqb__audit_hmac *h, const unsigned char *key, size_t key_len) {
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  h->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  h->ctx = h->mac != NULL ? EVP_MAC_CTX_new(h->mac) : NULL;
  if (h->ctx == NULL || !EVP_MAC_init(h->ctx, key, key_len, params)) {
    dlqb__audit_hmac_release(h);
    return false;
  }
  return true;
}

void dlqb__audit_hmac_release(dlqb__audit_hmac *h) {
  EVP_MAC_CTX_free(h->ctx);
  EVP_MAC_free(h->mac);
  h->ctx = NULL;
  h->mac = NULL;
}

void dlqb__audit_hex(const unsigned char *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = '\0';
}

bool dlqb__audit_hmac_body(dlqb__audit_hmac *h, const char *body, size_t len, char *out) {
  unsigned char md[32];
  size_t md_len = 0;
  /* A NULL key re-initialises with the key already set. */
  if (!EVP_MAC_init(h->ctx, NULL, 0, NULL) ||
      !EVP_MAC_update(h->ctx, (const unsigned char *)body, len) ||
      !EVP_MAC_update(h->ctx, (const unsigned char *)"}", 1) ||
      !EVP_MAC_final(h->ctx, md, &md_len, sizeof md) || md_len != sizeof md)
    return false;
  dlqb__audit_hex(md, sizeof md, out);
  return true;
}

bool dlqb__audit_is_lower_hex(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

bool dlqb__audit_split(const char *line, size_t len, size_t *body_len, const char **mac) {
  if (len < DLQB__AUDIT_SUFFIX_LEN + 1 || line[0] != '{') return false;
  size_t body = len - DLQB__AUDIT_SUFFIX_LEN;
  if (memcmp(line + body, DLQB__AUDIT_MAC_TAIL, DLQB__AUDIT_MAC_TAIL_LEN) != 0) return false;
  const char *hex = line + body + DLQB__AUDIT_MAC_TAIL_LEN;
  if (!dlqb__audit_is_lower_hex(hex, DLQB_AUDIT_MAC_HEX) ||
      memcmp(hex + DLQB_AUDIT_MAC_HEX, "\"}", 2) != 0)
    return false;
  *body_len = body;
  *mac = hex;
  return true;
}

bool dlqb__audit_mac_equal(const char *a, const char *b) {
  return CRYPTO_memcmp(a, b, DLQB_AUDIT_MAC_HEX) == 0;
}

/* ---- building records ---- */

bool dlqb__audit_reserve(char **buf, size_t *cap, size_t len, size_t more) {
  if (*cap - len >= more) return true;
  size_t ncap = *cap ? *cap : DLQB__AUDIT_BUF_INITIAL;
  while (ncap - len < more) ncap *= 2;
  char *n = realloc(*buf, ncap);
  if (n == NULL) return false;
  *buf = n;
  *cap = ncap;
  return true;
}

static void put_raw(dlqb_audit *a, const char *s, size_t n) {
  memcpy(a->buf + a->len, s, n);
  a->len += n;
}

void dlqb__audit_put(dlqb_audit *a, const char *s) { put_raw(a, s, strlen(s)); }

/* Escapes text for a JSON string: control bytes and invalid UTF-8 become
 * '?' first (dlqb_text_sanitize), so only '"' and '\\' need escaping and
 * the result is canonical. dst needs 2 * strlen(src) + 1 bytes. */
size_t dlqb__audit_escape(char *dst, const char *src) {
  char clean[DLQB_LAST_ERROR_MAX + 16];
  dlqb_text_sanitize(clean, sizeof clean, src, strlen(src));
  size_t n = 0;
  for (const char *p = clean; *p; p++) {
    if (*p == '"' || *p == '\\') dst[n++] = '\\';
    dst[n++] = *p;
  }
  dst[n] = '\0';
  return n;
}

void dlqb__audit_writer_name(char *dst, const char *name) {
  char cut[DLQB__AUDIT_WRITER_MAX + 1];
  dlqb_text_sanitize(cut, sizeof cut, name, strlen(name));
  dlqb__audit_escape(dst, cut);
}

void dlqb__audit_put_str(dlqb_audit *a, const char *key, const char *value) {
  a->buf[a->len++] = ',';
  a->buf[a->len++] = '"';
  dlqb__audit_put(a, key);
  dlqb__audit_put(a, "\":\"");
  a->len += dlqb__audit_escape(a->buf + a->len, value);
  a->buf[a->len++] = '"';
}

static void put_int(dlqb_audit *a, const char *key, long long v) {
  a->len += (size_t)snprintf(a->buf + a->len, a->cap - a->len, ",\"%s\":%lld", key, v);
}

/* Starts a chain record: the members every record has, in a fixed order. */
static void begin_record(dlqb_audit *a, uint64_t seq, const char *prev, const char *time,
                         const char *event) {
  a->len += (size_t)snprintf(a->buf + a->len, a->cap - a->len,
                             "{\"v\":%d,\"chain\":\"%s\",\"seq\":%" PRIu64
                             ",\"prev\":\"%s\",\"time\":\"%s\",\"event\":\"%s\","
                             "\"writer\":\"%s\",\"key\":\"%s\"",
                             DLQB_AUDIT_VERSION, a->chain, seq, prev, time, event, a->writer,
                             a->key_id);
}

/* Closes the record that starts at offset `start`: MACs it and writes the
 * mac member and the newline. The MAC goes to mac_out. */
bool dlqb__audit_end_record(dlqb_audit *a, size_t start, char *mac_out) {
  if (!dlqb__audit_hmac_body(&a->hmac, a->buf + start, a->len - start, mac_out)) return false;
  dlqb__audit_put(a, DLQB__AUDIT_MAC_TAIL);
  dlqb__audit_put(a, mac_out);
  dlqb__audit_put(a, "\"}\n");
  return true;
}

static void put_hop(dlqb_audit *a, const dlqb_hop *h) {
  dlqb__audit_put_str(a, "message_id", h->message_id);
  dlqb__audit_put_str(a, "request_id", h->request_id);
  dlqb__audit_put_str(a, "source_system", h->source_system);
  dlqb__audit_put_str(a, "legal_basis", h->legal_basis);
  put_int(a, "attempt", (long long)h->attempt);
  dlqb__audit_put_str(a, "reason", h->reason);
  dlqb__audit_put_str(a, "cause", h->cause);
  dlqb__audit_put_str(a, "from", h->from);
  dlqb__audit_put_str(a, "to", h->to);
  dlqb__audit_put_str(a, "actor", h->actor);
}

/* Appends one chain record to the batch; seq and mac are the tentative
 * chain state, advanced here. */
bool dlqb__audit_add_record(dlqb_audit *a, const char *time, const char *event,
                            const dlqb_hop *hop, uint64_t *seq, char *mac) {
  if (!dlqb__audit_reserve(&a->buf, &a->cap, a->len, DLQB__AUDIT_RECORD_MAX)) return false;
  size_t start = a->len;
  /* chain_start is seq 0 (written once, before anything else); the rest
   * count up from it. */
  uint64_t next = strcmp(event, DLQB__AUDIT_EV_CHAIN_START) == 0 ? 0 : *seq + 1;
  begin_record(a, next, mac, time, event);
  if (hop != NULL) put_hop(a, hop);
  if (!dlqb__audit_end_record(a, start, mac)) return false;
  *seq = next;
  return true;
}

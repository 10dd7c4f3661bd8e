/* The audit record format: the hash and signature over a line, hex,
 * splitting a line from its signature, and building the JSON lines of a
 * batch. */
#include <inttypes.h>
#include <openssl/crypto.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_private.h"
#include "dlqb/calendar.h"
#include "dlqb/text.h"

/* ---- hash, signature, hex and the sig member ---- */

bool dlqb__audit_hasher_init(dlqb__audit_hasher *h) {
  h->md = EVP_MD_fetch(NULL, "SHA256", NULL);
  h->ctx = h->md != NULL ? EVP_MD_CTX_new() : NULL;
  if (h->ctx == NULL) {
    dlqb__audit_hasher_release(h);
    return false;
  }
  return true;
}

void dlqb__audit_hasher_release(dlqb__audit_hasher *h) {
  EVP_MD_CTX_free(h->ctx);
  EVP_MD_free(h->md);
  h->ctx = NULL;
  h->md = NULL;
}

void dlqb__audit_hex(const unsigned char *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = '\0';
}

bool dlqb__audit_hash_body(dlqb__audit_hasher *h, const char *body, size_t len, char *out) {
  unsigned char md[32];
  unsigned int md_len = 0;
  if (!EVP_DigestInit_ex(h->ctx, h->md, NULL) || !EVP_DigestUpdate(h->ctx, body, len) ||
      !EVP_DigestUpdate(h->ctx, "}", 1) || !EVP_DigestFinal_ex(h->ctx, md, &md_len) ||
      md_len != sizeof md)
    return false;
  dlqb__audit_hex(md, sizeof md, out);
  return true;
}

bool dlqb__audit_sign(EVP_PKEY *key, const char *msg, size_t len, char *out) {
  unsigned char sig[DLQB_AUDIT_SIG_HEX / 2];
  size_t sig_len = sizeof sig;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  /* Ed25519 signs the message itself (no digest: NULL), in one shot. */
  bool ok = ctx != NULL && EVP_DigestSignInit(ctx, NULL, NULL, NULL, key) == 1 &&
            EVP_DigestSign(ctx, sig, &sig_len, (const unsigned char *)msg, len) == 1 &&
            sig_len == sizeof sig;
  EVP_MD_CTX_free(ctx);
  if (ok) dlqb__audit_hex(sig, sizeof sig, out);
  return ok;
}

static int hex_val(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

bool dlqb__audit_sig_ok(EVP_PKEY *pub, const char *msg, size_t len, const char *sig) {
  unsigned char raw[DLQB_AUDIT_SIG_HEX / 2];
  if (!dlqb__audit_is_lower_hex(sig, DLQB_AUDIT_SIG_HEX)) return false;
  for (size_t i = 0; i < sizeof raw; i++)
    raw[i] = (unsigned char)(hex_val(sig[2 * i]) << 4 | hex_val(sig[2 * i + 1]));
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  bool ok = ctx != NULL && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pub) == 1 &&
            EVP_DigestVerify(ctx, raw, sizeof raw, (const unsigned char *)msg, len) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

bool dlqb__audit_is_lower_hex(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

bool dlqb__audit_split(const char *line, size_t len, size_t *body_len, const char **sig) {
  if (len < 2 || line[0] != '{' || line[len - 1] != '}') return false;
  *sig = NULL;
  *body_len = len - 1;
  if (len >= DLQB__AUDIT_SUFFIX_LEN + 1) {
    size_t body = len - DLQB__AUDIT_SUFFIX_LEN;
    const char *hex = line + body + DLQB__AUDIT_SIG_TAIL_LEN;
    if (memcmp(line + body, DLQB__AUDIT_SIG_TAIL, DLQB__AUDIT_SIG_TAIL_LEN) == 0 &&
        dlqb__audit_is_lower_hex(hex, DLQB_AUDIT_SIG_HEX) &&
        memcmp(hex + DLQB_AUDIT_SIG_HEX, "\"}", 2) == 0) {
      *body_len = body;
      *sig = hex;
    }
  }
  return true;
}

bool dlqb__audit_hash_equal(const char *a, const char *b) {
  return CRYPTO_memcmp(a, b, DLQB_AUDIT_HASH_HEX) == 0;
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
  a->len +=
      (size_t)snprintf(a->buf + a->len, a->cap - a->len,
                       "{\"v\":%d,\"chain\":\"%s\",\"seq\":%" PRIu64
                       ",\"prev\":\"%s\",\"time\":\"%s\",\"event\":\"%s\","
                       "\"writer\":\"%s\",\"key\":\"%s\"",
                       DLQB_AUDIT_VERSION, a->chain, seq, prev, time, event, a->writer, a->key_id);
}

/* Closes the record that starts at offset `start`: hashes it, signs it
 * when `sign`, and writes its end and the newline. */
bool dlqb__audit_end_record(dlqb_audit *a, size_t start, bool sign, char *hash_out) {
  if (!dlqb__audit_hash_body(&a->hasher, a->buf + start, a->len - start, hash_out)) return false;
  if (!sign) {
    dlqb__audit_put(a, "}\n");
    return true;
  }
  /* Ed25519 signs one contiguous message: BODY + "}", for a moment in the
   * buffer (reserved: the caller keeps DLQB__AUDIT_RECORD_MAX headroom). */
  char sig[DLQB_AUDIT_SIG_HEX + 1];
  a->buf[a->len] = '}';
  if (!dlqb__audit_sign(a->key, a->buf + start, a->len - start + 1, sig)) return false;
  dlqb__audit_put(a, DLQB__AUDIT_SIG_TAIL);
  dlqb__audit_put(a, sig);
  dlqb__audit_put(a, "\"}\n");
  return true;
}

/* An edit's details as one member "edit" (docs/audit.md, "The edit hop"):
 * every text escaped as every other member is; at most
 * DLQB_EDIT_MAX_CHANGES fields of at most DLQB_EDIT_VALUE_MAX bytes, so a
 * record still fits DLQB__AUDIT_RECORD_MAX. */
static void put_edit(dlqb_audit *a, const dlqb_hop_edit *e) {
  dlqb__audit_put(a, ",\"edit\":{\"edit_id\":\"");
  a->len += dlqb__audit_escape(a->buf + a->len, e->edit_id);
  a->buf[a->len++] = '"';
  dlqb__audit_put_str(a, "parent", e->parent);
  dlqb__audit_put_str(a, "note", e->note);
  dlqb__audit_put_str(a, "editor", e->editor);
  dlqb__audit_put_str(a, "approver", e->approver);
  dlqb__audit_put(a, ",\"fields\":[");
  for (size_t i = 0; i < e->nfields && i < DLQB_EDIT_MAX_CHANGES; i++) {
    const dlqb_edit_field *f = &e->fields[i];
    dlqb__audit_put(a, i > 0 ? ",{\"field\":\"" : "{\"field\":\"");
    a->len += dlqb__audit_escape(a->buf + a->len, f->field);
    a->buf[a->len++] = '"';
    const char *ok = f->hashed ? "old_sha256" : "old", *nk = f->hashed ? "new_sha256" : "new";
    if (f->had_old) dlqb__audit_put_str(a, ok, f->old_value);
    else a->len += (size_t)snprintf(a->buf + a->len, a->cap - a->len, ",\"%s\":null", ok);
    if (f->has_new) dlqb__audit_put_str(a, nk, f->new_value);
    else a->len += (size_t)snprintf(a->buf + a->len, a->cap - a->len, ",\"%s\":null", nk);
    a->buf[a->len++] = '}';
  }
  a->buf[a->len++] = ']';
  put_int(a, "body_size_before", (long long)e->body_size_before);
  dlqb__audit_put_str(a, "body_sha256_before", e->body_sha256_before);
  put_int(a, "body_size_after", (long long)e->body_size_after);
  dlqb__audit_put_str(a, "body_sha256_after", e->body_sha256_after);
  a->buf[a->len++] = '}';
}

static void put_hop(dlqb_audit *a, const dlqb_hop *h) {
  dlqb__audit_put_str(a, "message_id", h->message_id);
  dlqb__audit_put_str(a, "request_id", h->request_id);
  dlqb__audit_put_str(a, "source_system", h->source_system);
  dlqb__audit_put_str(a, "legal_basis", h->legal_basis);
  /* Only where the profile has one (dsr): other pipelines' records, and
   * the records of the release before, have none. */
  if (h->action[0] != '\0') dlqb__audit_put_str(a, "action", h->action);
  put_int(a, "attempt", (long long)h->attempt);
  dlqb__audit_put_str(a, "reason", h->reason);
  dlqb__audit_put_str(a, "cause", h->cause);
  dlqb__audit_put_str(a, "from", h->from);
  dlqb__audit_put_str(a, "to", h->to);
  dlqb__audit_put_str(a, "actor", h->actor);
  dlqb__audit_put_str(a, "broker_user", h->broker_user);
  if (h->pipeline[0] != '\0') dlqb__audit_put_str(a, "pipeline", h->pipeline);
  if (h->deaths[0] != '\0') dlqb__audit_put_str(a, "x_death", h->deaths);
  if (h->has_delivery_count) put_int(a, "x_delivery_count", (long long)h->delivery_count);
  if (h->has_received) {
    char at[DLQB_ISO_TIME_MAX];
    dlqb__audit_put_str(a, "received_at", dlqb_iso_time(h->received_at_ms, at, sizeof at));
    dlqb__audit_put_str(a, "received_from", h->received_from);
  }
  if (h->edit != NULL) put_edit(a, h->edit);
  if (h->event == DLQB_EV_MOVE_STARTED || h->event == DLQB_EV_MOVE_ABANDONED)
    dlqb__audit_put_str(a, "for", dlqb_event_name(h->intent_for));
}

/* Appends one chain record to the batch; seq and hash are the tentative
 * chain state, advanced here. */
bool dlqb__audit_add_record(dlqb_audit *a, const char *time, const char *event, const dlqb_hop *hop,
                            bool sign, const dlqb__audit_tail *after, uint64_t *seq, char *hash) {
  if (!dlqb__audit_reserve(&a->buf, &a->cap, a->len, DLQB__AUDIT_RECORD_MAX)) return false;
  size_t start = a->len;
  /* chain_start is seq 0 (written once, before anything else); the rest
   * count up from it. */
  uint64_t next = strcmp(event, DLQB__AUDIT_EV_CHAIN_START) == 0 ? 0 : *seq + 1;
  begin_record(a, next, hash, time, event);
  if (after != NULL)
    a->len +=
        (size_t)snprintf(a->buf + a->len, a->cap - a->len,
                         ",\"after_chain\":\"%s\",\"after_seq\":%" PRIu64 ",\"after_hash\":\"%s\"",
                         after->chain, after->seq, after->hash);
  if (hop != NULL) put_hop(a, hop);
  if (!dlqb__audit_end_record(a, start, sign, hash)) return false;
  *seq = next;
  return true;
}

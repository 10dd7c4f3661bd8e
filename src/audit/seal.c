/* The audit seal: building, appending and reading back seal lines, and
 * compacting the seal file to each chain's latest line. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit_private.h"
#include "dlqb/file.h"
#include "dlqb/log.h"

#define SEAL_COMPACT_BYTES (256 * 1024)

/* ---- reading a seal line (the one reader: writer and verifier) ---- */

/* A JSON string's text as json-c hands it to its readers: escapes decoded,
 * ending at a NUL (json-c gives out C strings). Only text that could be a
 * member name or value the seal reader compares is kept. */
typedef struct {
  char text[DLQB_AUDIT_HASH_HEX + 1];
  size_t len;
  bool fits; /* at most DLQB_AUDIT_HASH_HEX bytes, all ASCII */
} json_text;

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && is_ws(*p)) p++;
  return p;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Reads the string whose opening quote is at p into *t. Returns the
 * position past its closing quote, NULL when it does not close before end
 * or holds a malformed escape. */
static const char *read_string(const char *p, const char *end, json_text *t) {
  bool cut = false; /* past a NUL, or past what t keeps */
  t->len = 0;
  t->fits = true;
  t->text[0] = '\0';
  for (p++; p < end; p++) {
    unsigned c = (unsigned char)*p;
    if (c == '"') return p + 1;
    if (c == '\\') {
      if (++p == end) return NULL;
      switch (*p) {
      case '"':
      case '\\':
      case '/': c = (unsigned char)*p; break;
      case 'b': c = '\b'; break;
      case 'f': c = '\f'; break;
      case 'n': c = '\n'; break;
      case 'r': c = '\r'; break;
      case 't': c = '\t'; break;
      case 'u':
        if (end - p < 5) return NULL;
        c = 0;
        for (int i = 1; i <= 4; i++) {
          int h = hex_digit(p[i]);
          if (h < 0) return NULL;
          c = c * 16 + (unsigned)h;
        }
        p += 4;
        break;
      default: return NULL;
      }
    }
    if (cut) continue;
    if (c == 0) {
      cut = true;
    } else if (c >= 0x80 || t->len == DLQB_AUDIT_HASH_HEX) {
      t->fits = false; /* nothing the reader compares */
      cut = true;
    } else {
      t->text[t->len++] = (char)c;
      t->text[t->len] = '\0';
    }
  }
  return NULL;
}

/* Skips the value at p (p < end): a string, a nested object or array
 * (strings in it may hold brackets), or a number or literal, whose span
 * goes to *scalar (NULL otherwise). NULL when it runs past end. */
static const char *skip_value(const char *p, const char *end, const char **scalar) {
  json_text t;
  *scalar = NULL;
  if (*p == '"') return read_string(p, end, &t);
  if (*p == '{' || *p == '[') {
    size_t depth = 0;
    while (p < end) {
      if (*p == '"') {
        if ((p = read_string(p, end, &t)) == NULL) return NULL;
        continue;
      }
      if (*p == '{' || *p == '[') depth++;
      else if ((*p == '}' || *p == ']') && --depth == 0) return p + 1;
      p++;
    }
    return NULL;
  }
  const char *start = p;
  while (p < end && !is_ws(*p) && *p != ',' && *p != '}' && *p != ']') p++;
  if (p == start) return NULL;
  *scalar = start;
  return p;
}

/* The seq a number span s[0..n) holds, as the verifier has always read it
 * through json-c's int64: an integer (no fraction or exponent), not
 * negative ("-0" is 0), below INT64_MAX (json-c's int64 saturates there). */
static bool seq_value(const char *s, size_t n, uint64_t *out) {
  size_t i = s[0] == '-' ? 1 : 0;
  bool negative = i == 1;
  if (i == n) return false;
  uint64_t v = 0;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    unsigned d = (unsigned)(s[i] - '0');
    if (v > ((uint64_t)INT64_MAX - 1 - d) / 10) return false;
    v = v * 10 + d;
  }
  if (negative && v != 0) return false;
  *out = v;
  return true;
}

/* True when t is exactly `digits` lower-case hex digits; copies them. */
static bool hex_text(const json_text *t, size_t digits, char *out) {
  if (!t->fits || t->len != digits || !dlqb__audit_is_lower_hex(t->text, digits)) return false;
  memcpy(out, t->text, digits + 1);
  return true;
}

bool dlqb__audit_seal_parse(const char *line, size_t len, dlqb__audit_seal *out) {
  const char *p = line, *end = line + len;
  dlqb__audit_seal s;
  bool type_ok = false, chain_ok = false, seq_ok = false, hash_ok = false;
  s.open = false;
  s.key[0] = '\0';
  p = skip_ws(p, end);
  if (p == end || *p != '{') return false;
  p = skip_ws(p + 1, end);
  if (p < end && *p == '}') {
    p++;
  } else {
    for (;;) {
      json_text name, value;
      if (p == end || *p != '"' || (p = read_string(p, end, &name)) == NULL) return false;
      p = skip_ws(p, end);
      if (p == end || *p != ':') return false;
      p = skip_ws(p + 1, end);
      if (p == end) return false;
      const char *key = name.fits ? name.text : "";
      bool is_type = strcmp(key, "type") == 0, is_chain = strcmp(key, "chain") == 0,
           is_hash = strcmp(key, "last_hash") == 0, is_key = strcmp(key, "key") == 0;
      if (is_key) s.key[0] = '\0';
      if ((is_type || is_chain || is_hash || is_key) && *p == '"') {
        if ((p = read_string(p, end, &value)) == NULL) return false;
        /* A member given twice counts by its last value, as in json-c. */
        if (is_type) type_ok = value.fits && strcmp(value.text, "seal") == 0;
        if (is_chain) chain_ok = hex_text(&value, DLQB_AUDIT_CHAIN_HEX, s.chain);
        if (is_hash) hash_ok = hex_text(&value, DLQB_AUDIT_HASH_HEX, s.last_hash);
        if (is_key && !hex_text(&value, DLQB_AUDIT_KEY_ID_HEX, s.key)) s.key[0] = '\0';
      } else {
        const char *scalar;
        const char *from = p;
        if ((p = skip_value(p, end, &scalar)) == NULL) return false;
        size_t n = (size_t)(p - from);
        if (is_type) type_ok = false;
        if (is_chain) chain_ok = false;
        if (is_hash) hash_ok = false;
        if (strcmp(key, "seq") == 0) seq_ok = scalar != NULL && seq_value(scalar, n, &s.seq);
        if (strcmp(key, "ended") == 0)
          s.open = scalar != NULL && n == 5 && memcmp(scalar, "false", 5) == 0;
      }
      p = skip_ws(p, end);
      if (p < end && *p == ',') {
        p = skip_ws(p + 1, end);
        continue;
      }
      if (p < end && *p == '}') {
        p++;
        break;
      }
      return false;
    }
  }
  if (skip_ws(p, end) != end || !type_ok || !chain_ok || !seq_ok || !hash_ok) return false;
  *out = s;
  return true;
}

/* ---- writing and compacting the seal ---- */

/* Builds our signed seal line for (seq, hash) at the end of a->sbuf. */
static bool put_seal_line(dlqb_audit *a, uint64_t seq, const char *hash, const char *time,
                          bool ended) {
  if (!dlqb__audit_reserve(&a->sbuf, &a->scap, a->slen, DLQB__AUDIT_RECORD_MAX)) return false;
  size_t start = a->slen;
  a->slen += (size_t)snprintf(a->sbuf + a->slen, DLQB__AUDIT_RECORD_MAX,
                              "{\"v\":%d,\"type\":\"seal\",\"chain\":\"%s\",\"writer\":\"%s\","
                              "\"seq\":%" PRIu64 ",\"last_hash\":\"%s\",\"ended\":%s,"
                              "\"time\":\"%s\",\"key\":\"%s\"",
                              DLQB_AUDIT_VERSION, a->chain, a->writer, seq, hash,
                              ended ? "true" : "false", time, a->key_id);
  char sig[DLQB_AUDIT_SIG_HEX + 1];
  a->sbuf[a->slen] = '}'; /* signed as BODY + "}", then overwritten */
  if (!dlqb__audit_sign(a->key, a->sbuf + start, a->slen - start + 1, sig)) return false;
  a->slen += (size_t)snprintf(a->sbuf + a->slen, DLQB__AUDIT_RECORD_MAX, "%s%s\"}\n",
                              DLQB__AUDIT_SIG_TAIL, sig);
  return true;
}

/* What each_latest_seal shows: one chain's latest seal line and what it
 * vouches for; `checked` when its signature verified with a key of a->ring
 * (false: signed with a key this writer does not know). False to stop (out
 * of memory). */
typedef bool (*seal_fn)(dlqb_audit *a, const char *line, size_t n, const dlqb__audit_seal *seal,
                        bool checked, void *ctx);

/* Calls fn with the latest line (without its newline) of every chain in
 * the seal text s[0..len), newest first, that is signed with a key of
 * a->ring or with a key a->ring lacks. A torn last line, lines that are
 * not seal lines, unsigned lines and lines whose signature does not check
 * with the key they name are passed over: they vouch for nothing. */
static bool each_latest_seal(dlqb_audit *a, const char *s, size_t len, seal_fn fn, void *ctx) {
  char(*seen)[DLQB_AUDIT_CHAIN_HEX + 1] = NULL;
  size_t nseen = 0, cap = 0;
  bool ok = true;
  size_t end = len;
  while (end > 0 && s[end - 1] != '\n') end--;
  while (ok && end > 0) {
    size_t stop = end - 1, start = stop;
    while (start > 0 && s[start - 1] != '\n') start--;
    const char *line = s + start;
    size_t n = stop - start, body;
    end = start;
    const char *sig;
    dlqb__audit_seal seal;
    if (!dlqb__audit_seal_parse(line, n, &seal)) continue;
    bool dup = false;
    for (size_t i = 0; i < nseen && !dup; i++) dup = strcmp(seen[i], seal.chain) == 0;
    if (dup || !dlqb__audit_split(line, n, &body, &sig) || sig == NULL) continue;
    const dlqb__audit_pubkey *k = dlqb__audit_keyring_find(a->ring, seal.key);
    /* Signed as BODY + "}": the line's bytes up to the sig member, which
     * the seal text holds contiguously; a '}' is put after them for the
     * check and the byte restored. */
    bool checked = false;
    if (k != NULL) {
      char *mut = (char *)line;
      char saved = mut[body];
      mut[body] = '}';
      checked = !k->revoked && dlqb__audit_sig_ok(k->pub, line, body + 1, sig);
      mut[body] = saved;
      if (!checked) continue;
    }
    if (nseen == cap) {
      cap = cap ? cap * 2 : 16;
      void *grown = realloc(seen, cap * sizeof *seen);
      if (grown == NULL) {
        ok = false;
        break;
      }
      seen = grown;
    }
    memcpy(seen[nseen++], seal.chain, sizeof seal.chain);
    ok = fn(a, line, n, &seal, checked, ctx);
  }
  free(seen);
  return ok;
}

/* Adds one {"chain","seq","hash"} member for a seal line to a->buf. Only
 * lines whose signature this writer checked: its own signature on the
 * file_start must not vouch for a state someone without a key made up. */
static bool put_chain_state(dlqb_audit *a, const char *line, size_t n, const dlqb__audit_seal *seal,
                            bool checked, void *ctx) {
  (void)line;
  (void)n;
  bool *first = ctx;
  if (!checked) return true;
  if (!dlqb__audit_reserve(&a->buf, &a->cap, a->len, 256)) return false;
  a->len += (size_t)snprintf(a->buf + a->len, 256,
                             "%s{\"chain\":\"%s\",\"seq\":%" PRIu64 ","
                             "\"hash\":\"%s\"}",
                             *first ? "" : ",", seal->chain, seal->seq, seal->last_hash);
  *first = false;
  return true;
}

/* Copies where every chain stood by the seal into the file_start record
 * being built, as "chains":[{"chain":..,"seq":..,"hash":..},...]. */
bool dlqb__audit_put_sealed_chains(dlqb_audit *a) {
  size_t len = 0;
  bool first = true;
  dlqb__audit_put(a, ",\"chains\":[");
  if (dlqb_read_file(a->seal_path, &a->sbuf, &a->scap, &len) &&
      !each_latest_seal(a, a->sbuf, len, put_chain_state, &first))
    return false;
  if (!dlqb__audit_reserve(&a->buf, &a->cap, a->len, DLQB__AUDIT_RECORD_MAX)) return false;
  dlqb__audit_put(a, "]");
  return true;
}

typedef struct {
  char *buf;
  size_t len, cap;
  bool drop_ended;
} compacted_seal;

/* Adds a chain's latest seal line to the compacted seal being built in
 * *ctx, unless it ended and ended chains are being dropped. */
static bool keep_seal_line(dlqb_audit *a, const char *line, size_t n, const dlqb__audit_seal *seal,
                           bool checked, void *ctx) {
  (void)a;
  (void)checked; /* one we cannot check stays for verify to judge */
  compacted_seal *out = ctx;
  if (out->drop_ended && !seal->open) return true;
  if (!dlqb__audit_reserve(&out->buf, &out->cap, out->len, n + 1)) return false;
  memcpy(out->buf + out->len, line, n);
  out->len += n;
  out->buf[out->len++] = '\n';
  return true;
}

/* Replaces the seal with the latest line of each chain: nothing older
 * vouches for anything more. After a rotation (drop_ended) the chains that
 * ended leave it too, since the file_start link carries every chain's
 * state. Synced before the rename, so a crash leaves the old seal or the
 * new one, never a torn one. Returns the new size, or -1 when it could not
 * (the old seal then stays, which is still correct). */
long long dlqb__audit_compact_seal(dlqb_audit *a, bool drop_ended) {
  size_t len = 0;
  compacted_seal out = {.drop_ended = drop_ended};
  if (!dlqb_read_file(a->seal_path, &a->sbuf, &a->scap, &len) ||
      !each_latest_seal(a, a->sbuf, len, keep_seal_line, &out)) {
    free(out.buf);
    return -1;
  }
  dlqb_error err;
  if (dlqb_file_replace(a->seal_path, out.buf ? out.buf : "", out.len, "the audit seal", &err) !=
      DLQB_OK) {
    dlqb_log_warn("audit_seal", "cannot compact the seal of '%s': %s", a->path, err.msg);
    free(out.buf);
    return -1;
  }
  free(out.buf);
  return (long long)out.len;
}

/* Appends our seal line for (seq, hash) to the seal file. Appending (not
 * replacing) keeps a batch to one write of a file that already exists; the
 * latest line of a chain is the one that counts. It is synced only at the
 * chain's end: the log is synced first, so a seal line that a crash loses
 * leaves the seal lagging the log, which verify accepts; one fsync per
 * batch is what lets the audit trail keep up with routing (docs/audit.md,
 * "What a crash can do"). Called with the log locked, so writers take
 * turns. */
dlqb_status dlqb__audit_append_seal(dlqb_audit *a, uint64_t seq, const char *hash, const char *time,
                                    bool ended, dlqb_error *err) {
  a->slen = 0;
  if (!put_seal_line(a, seq, hash, time, ended))
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  int fd = dlqb__audit_open_or_create(a->seal_path, O_RDWR | O_APPEND);
  if (fd < 0) return dlqb__audit_io_fail(err, "write the seal of", a->path);
  struct stat fs;
  off_t size = fstat(fd, &fs) == 0 ? fs.st_size : 0;
  dlqb_status st = dlqb__audit_cut_unfinished_line(fd, a->seal_path, &size, err);
  /* A chain's first seal line is synced too (one more sync per writer
   * start): then a chain that has any hop has a seal line that survives a
   * crash, and verify can report a chain without one as tampering. */
  bool sync = ended || seq == 0;
  if (st == DLQB_OK && (!dlqb_write_all(fd, a->sbuf, a->slen) || (sync && fdatasync(fd) != 0)))
    st = dlqb__audit_io_fail(err, "write the seal of", a->path);
  close(fd);
  /* A line per batch adds up (at a low rate a batch is a record or two):
   * once the seal has grown by SEAL_COMPACT_BYTES since we last compacted
   * it, keep only each chain's latest line. One extra sync per so many
   * batches. */
  if (st == DLQB_OK &&
      (long long)size + (long long)a->slen > a->seal_compacted + SEAL_COMPACT_BYTES) {
    long long now = dlqb__audit_compact_seal(a, false);
    if (now >= 0) a->seal_compacted = now;
  }
  return st;
}

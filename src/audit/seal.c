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
#include "dlqb/text.h"

#define SEAL_COMPACT_BYTES (256 * 1024)

/* The value of "key":"<hex>" in line[0..n) when it is exactly `digits`
 * lower-case hex characters; out needs digits + 1 bytes. Bounded by n, not
 * by a NUL: seal lines are read back as one buffer (sscanf would measure
 * the whole rest of it for every line). */
static bool hex_member(const char *line, size_t n, const char *key, size_t digits, char *out) {
  char needle[32];
  int k = snprintf(needle, sizeof needle, "\"%s\":\"", key);
  const char *p = dlqb_text_find(line, n, needle, (size_t)k);
  if (p == NULL) return false;
  p += k;
  size_t left = n - (size_t)(p - line);
  if (left < digits + 1 || p[digits] != '"' || !dlqb__audit_is_lower_hex(p, digits)) return false;
  memcpy(out, p, digits);
  out[digits] = '\0';
  return true;
}

/* The value of "key":<digits> in line[0..n), bounded like hex_member. */
static bool uint_member(const char *line, size_t n, const char *key, uint64_t *out) {
  char needle[32];
  int k = snprintf(needle, sizeof needle, "\"%s\":", key);
  const char *p = dlqb_text_find(line, n, needle, (size_t)k);
  if (p == NULL) return false;
  const char *end = line + n;
  uint64_t v = 0;
  size_t digits = 0;
  for (p += k; p < end && *p >= '0' && *p <= '9'; p++, digits++) {
    if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return false;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  *out = v;
  return digits > 0;
}

/* Builds our seal line for (seq, mac) at the end of a->sbuf. */
static bool put_seal_line(dlqb_audit *a, uint64_t seq, const char *mac, const char *time,
                          bool ended) {
  if (!dlqb__audit_reserve(&a->sbuf, &a->scap, a->slen, DLQB__AUDIT_RECORD_MAX)) return false;
  size_t start = a->slen;
  a->slen += (size_t)snprintf(a->sbuf + a->slen, DLQB__AUDIT_RECORD_MAX,
                              "{\"v\":%d,\"type\":\"seal\",\"chain\":\"%s\",\"writer\":\"%s\","
                              "\"seq\":%" PRIu64 ",\"last_mac\":\"%s\",\"ended\":%s,"
                              "\"time\":\"%s\",\"key\":\"%s\"",
                              DLQB_AUDIT_VERSION, a->chain, a->writer, seq, mac,
                              ended ? "true" : "false", time, a->key_id);
  char smac[DLQB_AUDIT_MAC_HEX + 1];
  if (!dlqb__audit_hmac_body(&a->hmac, a->sbuf + start, a->slen - start, smac)) return false;
  a->slen += (size_t)snprintf(a->sbuf + a->slen, DLQB__AUDIT_RECORD_MAX, "%s%s\"}\n",
                              DLQB__AUDIT_MAC_TAIL, smac);
  return true;
}

/* Calls fn with the latest authentic line (without its newline) of every
 * chain in the seal text s[0..len), newest first. A torn last line and
 * lines whose MAC does not check are passed over: they vouch for nothing. */
static bool each_latest_seal(dlqb_audit *a, const char *s, size_t len,
                             bool (*fn)(dlqb_audit *a, const char *line, size_t n, void *ctx),
                             void *ctx) {
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
    const char *hex;
    char chain[DLQB_AUDIT_CHAIN_HEX + 1], mac[DLQB_AUDIT_MAC_HEX + 1];
    if (!hex_member(line, n, "chain", DLQB_AUDIT_CHAIN_HEX, chain)) continue;
    bool dup = false;
    for (size_t i = 0; i < nseen && !dup; i++) dup = strcmp(seen[i], chain) == 0;
    if (dup || !dlqb__audit_split(line, n, &body, &hex) ||
        !dlqb__audit_hmac_body(&a->hmac, line, body, mac) || !dlqb__audit_mac_equal(mac, hex))
      continue;
    if (nseen == cap) {
      cap = cap ? cap * 2 : 16;
      void *grown = realloc(seen, cap * sizeof *seen);
      if (grown == NULL) {
        ok = false;
        break;
      }
      seen = grown;
    }
    memcpy(seen[nseen++], chain, sizeof chain);
    ok = fn(a, line, n, ctx);
  }
  free(seen);
  return ok;
}

/* Adds one {"chain","seq","mac"} member for a seal line to a->buf. */
static bool put_chain_state(dlqb_audit *a, const char *line, size_t n, void *ctx) {
  bool *first = ctx;
  char chain[DLQB_AUDIT_CHAIN_HEX + 1], last[DLQB_AUDIT_MAC_HEX + 1];
  uint64_t seq;
  if (!hex_member(line, n, "chain", DLQB_AUDIT_CHAIN_HEX, chain) ||
      !uint_member(line, n, "seq", &seq) ||
      !hex_member(line, n, "last_mac", DLQB_AUDIT_MAC_HEX, last))
    return true; /* not a seal we can vouch for */
  if (!dlqb__audit_reserve(&a->buf, &a->cap, a->len, 256)) return false;
  a->len += (size_t)snprintf(a->buf + a->len, 256, "%s{\"chain\":\"%s\",\"seq\":%" PRIu64 ","
                             "\"mac\":\"%s\"}", *first ? "" : ",", chain, seq, last);
  *first = false;
  return true;
}

/* Copies where every chain stood by the seal into the file_start record
 * being built, as "chains":[{"chain":..,"seq":..,"mac":..},...]. */
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
static bool keep_seal_line(dlqb_audit *a, const char *line, size_t n, void *ctx) {
  (void)a;
  compacted_seal *out = ctx;
  static const char open_chain[] = "\"ended\":false";
  if (out->drop_ended && dlqb_text_find(line, n, open_chain, sizeof open_chain - 1) == NULL)
    return true;
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

/* Appends our seal line for (seq, mac) to the seal file. Appending (not
 * replacing) keeps a batch to one write of a file that already exists; the
 * latest line of a chain is the one that counts. It is synced only at the
 * chain's end: the log is synced first, so a seal line that a crash loses
 * leaves the seal lagging the log, which verify accepts; one fsync per
 * batch is what lets the audit trail keep up with routing (docs/audit.md,
 * "What a crash can do"). Called with the log locked, so writers take
 * turns. */
dlqb_status dlqb__audit_append_seal(dlqb_audit *a, uint64_t seq, const char *mac,
                                    const char *time, bool ended, dlqb_error *err) {
  a->slen = 0;
  if (!put_seal_line(a, seq, mac, time, ended)) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  int fd = open(a->seal_path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return dlqb__audit_io_fail(err, "write the seal of", a->path);
  struct stat fs;
  off_t size = fstat(fd, &fs) == 0 ? fs.st_size : 0;
  dlqb_status st = dlqb__audit_cut_unfinished_line(fd, a->seal_path, &size, err);
  if (st == DLQB_OK && (!dlqb_write_all(fd, a->sbuf, a->slen) || (ended && fdatasync(fd) != 0)))
    st = dlqb__audit_io_fail(err, "write the seal of", a->path);
  close(fd);
  /* A line per batch adds up (at a low rate a batch is a record or two):
   * once the seal has grown by SEAL_COMPACT_BYTES since we last compacted
   * it, keep only each chain's latest line. One extra sync per so many
   * batches. */
  if (st == DLQB_OK && (long long)size + (long long)a->slen > a->seal_compacted + SEAL_COMPACT_BYTES) {
    long long now = dlqb__audit_compact_seal(a, false);
    if (now >= 0) a->seal_compacted = now;
  }
  return st;
}

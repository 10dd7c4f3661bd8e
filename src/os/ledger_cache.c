/* The completion ledger's cache file: see include/dlqb/ledger.h. */
#include "dlqb/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/envelope.h"
#include "dlqb/file.h"
#include "dlqb/text.h"

/* Version 2 names the completion writers; a version 1 cache (which trusted
 * every entry) is refused, so the first replay after an upgrade reads the
 * whole ledger. */
#define TITLE "dlq-bridge completion ledger cache 2"
/* The seven lines and the empty one, whatever their values. */
#define HEADER_MAX (320 + DLQB_CONFIG_STR_MAX)
#define SHA256_HEX 64

/* SHA-256 of n bytes at p as lower-case hex (SHA256_HEX chars and a NUL). */
static bool sha256_hex(const char *p, size_t n, char out[SHA256_HEX + 1]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen * 2 != SHA256_HEX)
    return false;
  for (unsigned int i = 0; i < mdlen; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
  return true;
}

/* A marker is ours: letters, digits and '-', shorter than the buffer. */
static bool marker_ok(const char *m, size_t n) {
  if (n == 0 || n >= DLQB_LEDGER_MARKER_MAX) return false;
  for (size_t i = 0; i < n; i++) {
    char c = m[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-'))
      return false;
  }
  return true;
}

/* The writers list fits one header line: no control characters. */
static bool writers_ok(const char *w) {
  size_t n = strlen(w);
  if (n >= DLQB_CONFIG_STR_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)w[i] < 0x20 || w[i] == 0x7f) return false;
  return true;
}

/* ---- encode ---------------------------------------------------------------- */

typedef struct {
  char *p;    /* next byte to write; NULL while only measuring */
  size_t len; /* bytes of pairs so far */
} pair_writer;

static void put_pair(void *ctx, const char *request_id, const char *source_system) {
  pair_writer *w = ctx;
  size_t la = strlen(request_id) + 1, lb = strlen(source_system) + 1;
  if (w->p != NULL) {
    memcpy(w->p, request_id, la);
    memcpy(w->p + la, source_system, lb);
    w->p += la + lb;
  }
  w->len += la + lb;
}

dlqb_status dlqb_ledger_cache_encode(const dlqb_ledger *l, const dlqb_ledger_mark *mark,
                                     const char *writers, char **out, size_t *len,
                                     dlqb_error *err) {
  *out = NULL;
  *len = 0;
  if (!marker_ok(mark->marker, strlen(mark->marker)) || mark->offset < 0)
    return dlqb_fail(err, DLQB_EINVAL, "internal error: bad ledger marker for the cache");
  if (!writers_ok(writers))
    return dlqb_fail(err, DLQB_EINVAL, "internal error: bad writers list for the ledger cache");
  pair_writer measure = {0};
  dlqb_ledger_each(l, put_pair, &measure);
  /* Pairs first, after room for the header, then the header (it holds
   * their digest) moved in front of them. */
  char *buf = malloc(HEADER_MAX + measure.len);
  if (buf == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the ledger cache");
  pair_writer w = {.p = buf + HEADER_MAX};
  dlqb_ledger_each(l, put_pair, &w);
  char digest[SHA256_HEX + 1];
  if (!sha256_hex(buf + HEADER_MAX, w.len, digest)) {
    free(buf);
    return dlqb_fail(err, DLQB_EINVAL, "cannot compute the ledger cache's digest");
  }
  int hl = snprintf(buf, HEADER_MAX,
                    "%s\nwriters %s\nmarker %s\noffset %" PRId64 "\npairs %zu\nunverified %" PRIu64
                    "\nsha256 %s\n\n",
                    TITLE, writers, mark->marker, mark->offset, dlqb_ledger_size(l),
                    mark->unverified, digest);
  if (hl < 0 || hl >= HEADER_MAX) {
    free(buf);
    return dlqb_fail(err, DLQB_EINVAL, "internal error: ledger cache header too long");
  }
  memmove(buf + hl, buf + HEADER_MAX, w.len);
  *out = buf;
  *len = (size_t)hl + w.len;
  return DLQB_OK;
}

/* ---- decode ---------------------------------------------------------------- */

/* Takes the next line of [*p, end) that starts with `key`; sets the value
 * (after the key) and its length. The line must end with '\n'. */
static bool take_line(const char **p, const char *end, const char *key, const char **val,
                      size_t *vlen) {
  size_t klen = strlen(key);
  const char *nl = memchr(*p, '\n', (size_t)(end - *p));
  if (nl == NULL || (size_t)(nl - *p) < klen || memcmp(*p, key, klen) != 0) return false;
  *val = *p + klen;
  *vlen = (size_t)(nl - *val);
  *p = nl + 1;
  return true;
}

/* Decimal digits only, at most max. */
static bool parse_uint(const char *s, size_t n, uint64_t max, uint64_t *out) {
  if (n == 0 || n > 20) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    uint64_t d = (uint64_t)(s[i] - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

/* The next NUL-terminated field of [*p, end): 1 to DLQB_ID_MAX bytes. */
static const char *take_field(const char **p, const char *end) {
  const char *nul = memchr(*p, '\0', (size_t)(end - *p));
  if (nul == NULL || nul == *p || nul - *p > DLQB_ID_MAX) return NULL;
  const char *f = *p;
  *p = nul + 1;
  return f;
}

dlqb_status dlqb_ledger_cache_decode(const char *buf, size_t len, const char *writers,
                                     dlqb_ledger *l, dlqb_ledger_mark *mark, dlqb_error *err) {
  const char *p = buf, *end = buf + len, *v;
  size_t vlen;
  uint64_t offset, pairs, unverified;
  if (!take_line(&p, end, TITLE, &v, &vlen) || vlen != 0)
    return dlqb_fail(err, DLQB_EINVAL, "not a ledger cache of this version");
  /* Its pairs are the entries of these writers only: under another list
   * some would be missing and others would count that must not. */
  if (!take_line(&p, end, "writers ", &v, &vlen) || vlen >= DLQB_CONFIG_STR_MAX)
    return dlqb_fail(err, DLQB_EINVAL, "no valid writers line");
  if (vlen != strlen(writers) || memcmp(v, writers, vlen) != 0) {
    char was[DLQB_QUOTE_BUF], now[DLQB_QUOTE_BUF];
    return dlqb_fail(err, DLQB_EINVAL, "built under completion_writers '%s', not '%s'",
                     dlqb_text_quote(was, v, vlen), dlqb_text_quote(now, writers, strlen(writers)));
  }
  if (!take_line(&p, end, "marker ", &v, &vlen) || !marker_ok(v, vlen))
    return dlqb_fail(err, DLQB_EINVAL, "no valid marker line");
  memcpy(mark->marker, v, vlen);
  mark->marker[vlen] = '\0';
  if (!take_line(&p, end, "offset ", &v, &vlen) || !parse_uint(v, vlen, INT64_MAX, &offset))
    return dlqb_fail(err, DLQB_EINVAL, "no valid offset line");
  mark->offset = (int64_t)offset;
  if (!take_line(&p, end, "pairs ", &v, &vlen) || !parse_uint(v, vlen, SIZE_MAX / 4, &pairs))
    return dlqb_fail(err, DLQB_EINVAL, "no valid pairs line");
  if (!take_line(&p, end, "unverified ", &v, &vlen) || !parse_uint(v, vlen, INT64_MAX, &unverified))
    return dlqb_fail(err, DLQB_EINVAL, "no valid unverified line");
  mark->unverified = unverified;
  const char *want;
  size_t wantlen;
  if (!take_line(&p, end, "sha256 ", &want, &wantlen) || wantlen != SHA256_HEX)
    return dlqb_fail(err, DLQB_EINVAL, "no valid sha256 line");
  if (!take_line(&p, end, "", &v, &vlen) || vlen != 0)
    return dlqb_fail(err, DLQB_EINVAL, "no empty line after the header");
  char digest[SHA256_HEX + 1];
  if (!sha256_hex(p, (size_t)(end - p), digest))
    return dlqb_fail(err, DLQB_EINVAL, "cannot compute the ledger cache's digest");
  if (memcmp(digest, want, SHA256_HEX) != 0)
    return dlqb_fail(err, DLQB_EINVAL, "the pairs do not match their sha256 (torn or edited)");
  for (uint64_t i = 0; i < pairs; i++) {
    const char *rid = take_field(&p, end);
    const char *src = rid != NULL ? take_field(&p, end) : NULL;
    if (src == NULL) return dlqb_fail(err, DLQB_EINVAL, "pair %" PRIu64 " is malformed", i + 1);
    dlqb_status st = dlqb_ledger_add(l, rid, src, err);
    if (st != DLQB_OK) return st;
  }
  if (p != end) return dlqb_fail(err, DLQB_EINVAL, "bytes after the last pair");
  return DLQB_OK;
}

/* ---- files ----------------------------------------------------------------- */

dlqb_status dlqb_ledger_cache_read(const char *path, const char *writers, dlqb_ledger *l,
                                   dlqb_ledger_mark *mark, bool *found, dlqb_error *err) {
  char os_why[DLQB_ERRNO_TEXT_MAX];
  *found = false;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) return DLQB_OK;
  if (fd < 0)
    return dlqb_fail(err, DLQB_EIO, "cannot open the ledger cache '%s': %s", path,
                     dlqb_errno_text(errno, os_why, sizeof os_why));
  struct stat sb;
  dlqb_status st = DLQB_OK;
  if (fstat(fd, &sb) != 0) {
    st = dlqb_fail(err, DLQB_EIO, "cannot stat the ledger cache '%s': %s", path,
                   dlqb_errno_text(errno, os_why, sizeof os_why));
  } else if (!S_ISREG(sb.st_mode)) {
    st = dlqb_fail(err, DLQB_EINVAL, "the ledger cache '%s' is not a regular file", path);
  } else if (sb.st_uid != geteuid() || (sb.st_mode & 022) != 0) {
    st = dlqb_fail(err, DLQB_EINVAL,
                   "the ledger cache '%s' is not ours alone to write (owner %u, mode %04o)", path,
                   (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777));
  }
  char *buf = NULL;
  size_t cap = 0, len = 0;
  if (st == DLQB_OK && !dlqb_read_fd(fd, &buf, &cap, &len))
    st = dlqb_fail(err, DLQB_EIO, "cannot read the ledger cache '%s': %s", path,
                   dlqb_errno_text(errno, os_why, sizeof os_why));
  close(fd);
  if (st == DLQB_OK) {
    dlqb_error why;
    st = dlqb_ledger_cache_decode(buf, len, writers, l, mark, &why);
    if (st != DLQB_OK) dlqb_fail(err, st, "the ledger cache '%s' is unusable: %s", path, why.msg);
  }
  free(buf);
  *found = st == DLQB_OK;
  return st;
}

dlqb_status dlqb_ledger_cache_write(const char *path, const char *writers, const dlqb_ledger *l,
                                    const dlqb_ledger_mark *mark, dlqb_error *err) {
  char *buf;
  size_t len;
  dlqb_status st = dlqb_ledger_cache_encode(l, mark, writers, &buf, &len, err);
  if (st != DLQB_OK) return st;
  st = dlqb_file_replace(path, buf, len, "the ledger cache", err);
  free(buf);
  return st;
}

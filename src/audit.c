/* The audit trail writer: one HMAC-chained JSON line per hop, appended
 * under an exclusive lock and fsync'd once per batch, with a sealed
 * checkpoint beside the log and size-based rotation. docs/audit.md
 * describes the format and what it proves. */
#include "dlqb/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit_private.h"
#include "dlqb/log.h"

/* A record is at most this long: every text field of a hop sanitised and
 * escaped (at most doubled) plus the fixed members. The batch buffer keeps
 * this much headroom, so it grows only when a batch is larger than any
 * before it, never per message. */
#define RECORD_MAX 16384
#define BUF_INITIAL (64 * 1024)
#define TAIL_CHUNK 4096
#define LOCK_TRIES 20
#define KEY_ID_LABEL "dlq-bridge audit key id"

struct dlqb_audit {
  char path[DLQB_CONFIG_STR_MAX];
  char seal_path[DLQB_CONFIG_STR_MAX + 16];
  char seal_tmp[DLQB_CONFIG_STR_MAX + 16];
  char rotating[DLQB_CONFIG_STR_MAX + 16];
  char writer[512]; /* JSON-escaped */
  long long rotate_bytes;
  int fd; /* the log, O_APPEND; -1 when closed */
  dlqb__audit_hmac hmac;
  unsigned char key[DLQB_AUDIT_KEY_MAX];
  size_t key_len;
  char key_id[DLQB_AUDIT_KEY_ID_HEX + 1];
  char chain[DLQB_AUDIT_CHAIN_HEX + 1];
  /* The committed state of the chain: a record counts only once it was
   * written and synced, and the seal was updated. */
  bool started, ended;
  uint64_t seq;
  char last_mac[DLQB_AUDIT_MAC_HEX + 1];
  bool healthy;
  char *buf; /* the batch being written */
  size_t len, cap;
  char *sbuf; /* the seal file being rewritten */
  size_t slen, scap;
};

/* ---- shared HMAC helpers (audit_private.h) ---- */

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

static void to_hex(const unsigned char *in, size_t n, char *out) {
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
  to_hex(md, sizeof md, out);
  return true;
}

static bool is_lower_hex(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

bool dlqb__audit_split(const char *line, size_t len, size_t *body_len, const char **mac) {
  if (len < DLQB__AUDIT_SUFFIX_LEN + 1 || line[0] != '{') return false;
  size_t body = len - DLQB__AUDIT_SUFFIX_LEN;
  if (memcmp(line + body, DLQB__AUDIT_MAC_TAIL, DLQB__AUDIT_MAC_TAIL_LEN) != 0) return false;
  const char *hex = line + body + DLQB__AUDIT_MAC_TAIL_LEN;
  if (!is_lower_hex(hex, DLQB_AUDIT_MAC_HEX) || memcmp(hex + DLQB_AUDIT_MAC_HEX, "\"}", 2) != 0)
    return false;
  *body_len = body;
  *mac = hex;
  return true;
}

bool dlqb__audit_mac_equal(const char *a, const char *b) {
  return CRYPTO_memcmp(a, b, DLQB_AUDIT_MAC_HEX) == 0;
}

/* ---- the key ---- */

static const char *errno_text(int e, char *buf, size_t len) {
  snprintf(buf, len, "%s", strerror(e));
  if (buf[0] >= 'A' && buf[0] <= 'Z') buf[0] = (char)(buf[0] - 'A' + 'a');
  return buf;
}

dlqb_status dlqb_audit_key_load(const char *path, unsigned char key[DLQB_AUDIT_KEY_MAX],
                                size_t *key_len, dlqb_error *err) {
  char why[128];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return dlqb_fail(err, errno == ENOENT ? DLQB_EINVAL : DLQB_EIO,
                     "cannot open audit key file '%s': %s", path, errno_text(errno, why, sizeof why));
  dlqb_status st = DLQB_OK;
  unsigned char tmp[DLQB_AUDIT_KEY_MAX + 1];
  size_t n = 0;
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    st = dlqb_fail(err, DLQB_EIO, "cannot stat audit key file '%s': %s", path,
                   errno_text(errno, why, sizeof why));
    goto done;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = dlqb_fail(err, DLQB_EINVAL, "audit key file '%s' is not a regular file", path);
    goto done;
  }
  /* A key others can read signs nothing: anyone could forge records. */
  if ((sb.st_mode & 077) != 0) {
    st = dlqb_fail(err, DLQB_EINVAL,
                   "audit key file '%s' is accessible by group or others (mode %04o); "
                   "chmod 600 it",
                   path, (unsigned)(sb.st_mode & 07777));
    goto done;
  }
  for (;;) {
    ssize_t r = read(fd, tmp + n, sizeof tmp - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      st = dlqb_fail(err, DLQB_EIO, "cannot read audit key file '%s': %s", path,
                     errno_text(errno, why, sizeof why));
      goto done;
    }
    if (r == 0 || (n += (size_t)r) == sizeof tmp) break;
  }
  while (n > 0 && (tmp[n - 1] == '\n' || tmp[n - 1] == '\r' || tmp[n - 1] == ' ' ||
                   tmp[n - 1] == '\t'))
    n--;
  if (n > DLQB_AUDIT_KEY_MAX) {
    st = dlqb_fail(err, DLQB_EINVAL, "audit key file '%s' is longer than %d bytes", path,
                   DLQB_AUDIT_KEY_MAX);
  } else if (n < DLQB_AUDIT_KEY_MIN) {
    st = dlqb_fail(err, DLQB_EINVAL,
                   "audit key file '%s' holds %zu bytes; at least %d are needed "
                   "(e.g. openssl rand -hex 32)",
                   path, n, DLQB_AUDIT_KEY_MIN);
  } else {
    memcpy(key, tmp, n);
    *key_len = n;
  }
done:
  OPENSSL_cleanse(tmp, sizeof tmp);
  close(fd);
  return st;
}

void dlqb_audit_key_id(const unsigned char *key, size_t key_len, char *out) {
  dlqb__audit_hmac h;
  char hex[DLQB_AUDIT_MAC_HEX + 1] = "";
  /* The label is hashed as a body, "}" appended: any fixed text will do. */
  if (dlqb__audit_hmac_init(&h, key, key_len)) {
    if (!dlqb__audit_hmac_body(&h, KEY_ID_LABEL, strlen(KEY_ID_LABEL), hex)) hex[0] = '\0';
    dlqb__audit_hmac_release(&h);
  }
  snprintf(out, DLQB_AUDIT_KEY_ID_HEX + 1, "%s", hex[0] ? hex : "unknown");
}

/* ---- building records ---- */

static bool reserve(char **buf, size_t *cap, size_t len, size_t more) {
  if (*cap - len >= more) return true;
  size_t ncap = *cap ? *cap : BUF_INITIAL;
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

static void put(dlqb_audit *a, const char *s) { put_raw(a, s, strlen(s)); }

/* Escapes text for a JSON string: control bytes and invalid UTF-8 become
 * '?' first (dlqb_text_sanitize), so only '"' and '\\' need escaping and
 * the result is canonical. dst needs 2 * strlen(src) + 1 bytes. */
static size_t escape(char *dst, const char *src) {
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

static void put_str(dlqb_audit *a, const char *key, const char *value) {
  a->buf[a->len++] = ',';
  a->buf[a->len++] = '"';
  put(a, key);
  put(a, "\":\"");
  a->len += escape(a->buf + a->len, value);
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
static bool end_record(dlqb_audit *a, size_t start, char *mac_out) {
  if (!dlqb__audit_hmac_body(&a->hmac, a->buf + start, a->len - start, mac_out)) return false;
  put(a, DLQB__AUDIT_MAC_TAIL);
  put(a, mac_out);
  put(a, "\"}\n");
  return true;
}

static void put_hop(dlqb_audit *a, const dlqb_hop *h) {
  put_str(a, "message_id", h->message_id);
  put_str(a, "request_id", h->request_id);
  put_str(a, "source_system", h->source_system);
  put_str(a, "legal_basis", h->legal_basis);
  put_int(a, "attempt", (long long)h->attempt);
  put_str(a, "reason", h->reason);
  put_str(a, "cause", h->cause);
  put_str(a, "from", h->from);
  put_str(a, "to", h->to);
  put_str(a, "actor", h->actor);
}

/* Appends one chain record to the batch; seq and mac are the tentative
 * chain state, advanced here. */
static bool add_record(dlqb_audit *a, const char *time, const char *event, const dlqb_hop *hop,
                       uint64_t *seq, char *mac) {
  if (!reserve(&a->buf, &a->cap, a->len, RECORD_MAX)) return false;
  size_t start = a->len;
  /* chain_start is seq 0 (written once, before anything else); the rest
   * count up from it. */
  uint64_t next = strcmp(event, DLQB__AUDIT_EV_CHAIN_START) == 0 ? 0 : *seq + 1;
  begin_record(a, next, mac, time, event);
  if (hop != NULL) put_hop(a, hop);
  if (!end_record(a, start, mac)) return false;
  *seq = next;
  return true;
}

/* ---- file helpers ---- */

static dlqb_status io_fail(dlqb_error *err, const char *what, const char *path) {
  char why[128];
  return dlqb_fail(err, DLQB_EIO, "cannot %s audit log '%s': %s", what, path,
                   errno_text(errno, why, sizeof why));
}

static bool write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      return false;
    }
    p += w;
    n -= (size_t)w;
  }
  return true;
}

static bool read_all(const char *path, char **buf, size_t *cap, size_t *len) {
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  bool ok = true;
  for (;;) {
    if (!reserve(buf, cap, *len, 4096)) {
      ok = false;
      break;
    }
    ssize_t r = read(fd, *buf + *len, *cap - *len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) ok = false;
    if (r <= 0) break;
    *len += (size_t)r;
  }
  close(fd);
  return ok;
}

static void fsync_dir_of(const char *path) {
  char copy[DLQB_CONFIG_STR_MAX + 16];
  snprintf(copy, sizeof copy, "%s", path);
  int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
}

static void unlock_log(dlqb_audit *a) {
  if (a->fd >= 0) flock(a->fd, LOCK_UN);
}

static void close_log(dlqb_audit *a) {
  if (a->fd >= 0) close(a->fd);
  a->fd = -1;
}

/* Locks the file now at a->path, reopening when it was rotated or replaced
 * since we opened it (then our descriptor is a stale inode). On success
 * the lock is held and *size is the file's size. */
static dlqb_status lock_log(dlqb_audit *a, off_t *size, dlqb_error *err) {
  for (int tries = 0; tries < LOCK_TRIES; tries++) {
    if (a->fd < 0) {
      a->fd = open(a->path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
      if (a->fd < 0) return io_fail(err, "open", a->path);
    }
    while (flock(a->fd, LOCK_EX) != 0) {
      if (errno != EINTR) return io_fail(err, "lock", a->path);
    }
    struct stat fs, ps;
    if (fstat(a->fd, &fs) != 0) {
      dlqb_status st = io_fail(err, "stat", a->path);
      unlock_log(a);
      return st;
    }
    if (stat(a->path, &ps) == 0 && ps.st_dev == fs.st_dev && ps.st_ino == fs.st_ino) {
      /* A rotation that crashed between its two renames left an empty log
       * and the finished new file: complete it. */
      if (fs.st_size == 0 && access(a->rotating, F_OK) == 0) {
        if (rename(a->rotating, a->path) == 0) fsync_dir_of(a->path);
        unlock_log(a);
        close_log(a);
        continue;
      }
      *size = fs.st_size;
      return DLQB_OK;
    }
    unlock_log(a);
    close_log(a);
  }
  return dlqb_fail(err, DLQB_EIO, "cannot lock audit log '%s': it keeps being replaced", a->path);
}

/* A log that does not end in a newline ends in a record some writer never
 * finished (it crashed mid-write, or its write failed and could not be
 * undone). No writer counted it, nothing was acked for it: cut it off so
 * the next record starts on a line of its own. */
static dlqb_status repair_tail(dlqb_audit *a, off_t *size, dlqb_error *err) {
  struct stat fs;
  char last;
  if (*size == 0 || fstat(a->fd, &fs) != 0 || !S_ISREG(fs.st_mode)) return DLQB_OK;
  if (pread(a->fd, &last, 1, *size - 1) != 1) return io_fail(err, "read", a->path);
  if (last == '\n') return DLQB_OK;
  char chunk[TAIL_CHUNK];
  off_t end = *size, keep = 0;
  while (end > 0 && keep == 0) {
    off_t from = end > TAIL_CHUNK ? end - TAIL_CHUNK : 0;
    ssize_t r = pread(a->fd, chunk, (size_t)(end - from), from);
    if (r != end - from) return io_fail(err, "read", a->path);
    for (ssize_t i = r - 1; i >= 0; i--) {
      if (chunk[i] == '\n') {
        keep = from + i + 1;
        break;
      }
    }
    end = from;
  }
  if (ftruncate(a->fd, keep) != 0 || fdatasync(a->fd) != 0) return io_fail(err, "repair", a->path);
  dlqb_log_warn("audit_repaired", "audit log '%s' ended in an unfinished record; removed its %lld "
                "bytes", a->path, (long long)(*size - keep));
  *size = keep;
  return DLQB_OK;
}

/* ---- the seal ---- */

/* The first occurrence of needle (n bytes) in hay (len bytes), or NULL
 * (memmem without _GNU_SOURCE). */
static const char *find_bytes(const char *hay, size_t len, const char *needle, size_t n) {
  for (size_t i = 0; n <= len && i <= len - n; i++)
    if (hay[i] == needle[0] && memcmp(hay + i, needle, n) == 0) return hay + i;
  return NULL;
}

/* Builds our seal line for (seq, mac) at the end of a->sbuf. */
static bool put_seal_line(dlqb_audit *a, uint64_t seq, const char *mac, const char *time,
                          bool ended) {
  if (!reserve(&a->sbuf, &a->scap, a->slen, RECORD_MAX)) return false;
  size_t start = a->slen;
  a->slen += (size_t)snprintf(a->sbuf + a->slen, RECORD_MAX,
                              "{\"v\":%d,\"type\":\"seal\",\"chain\":\"%s\",\"writer\":\"%s\","
                              "\"seq\":%" PRIu64 ",\"last_mac\":\"%s\",\"ended\":%s,"
                              "\"time\":\"%s\",\"key\":\"%s\"",
                              DLQB_AUDIT_VERSION, a->chain, a->writer, seq, mac,
                              ended ? "true" : "false", time, a->key_id);
  char smac[DLQB_AUDIT_MAC_HEX + 1];
  if (!dlqb__audit_hmac_body(&a->hmac, a->sbuf + start, a->slen - start, smac)) return false;
  a->slen += (size_t)snprintf(a->sbuf + a->slen, RECORD_MAX, "%s%s\"}\n", DLQB__AUDIT_MAC_TAIL,
                              smac);
  return true;
}

/* Replaces the seal file atomically with a->sbuf[0..slen). */
static dlqb_status write_seal_file(dlqb_audit *a, dlqb_error *err) {
  int fd = open(a->seal_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return io_fail(err, "write the seal of", a->path);
  bool ok = write_all(fd, a->sbuf, a->slen) && fdatasync(fd) == 0;
  int saved = errno;
  close(fd);
  errno = saved;
  if (!ok || rename(a->seal_tmp, a->seal_path) != 0) {
    saved = errno;
    unlink(a->seal_tmp);
    errno = saved;
    return io_fail(err, "write the seal of", a->path);
  }
  return DLQB_OK;
}

/* Rewrites the seal with our chain at (seq, mac), keeping the other
 * writers' lines. Called with the log locked, so writers take turns. */
static dlqb_status update_seal(dlqb_audit *a, uint64_t seq, const char *mac, const char *time,
                               bool ended, dlqb_error *err) {
  size_t old_len = 0;
  char needle[DLQB_AUDIT_CHAIN_HEX + 16];
  snprintf(needle, sizeof needle, "\"chain\":\"%s\"", a->chain);
  if (!read_all(a->seal_path, &a->sbuf, &a->scap, &old_len))
    return io_fail(err, "read the seal of", a->path);
  /* Filter in place: lines are only ever dropped, so the write position
   * never overtakes the read position. */
  size_t w = 0;
  for (size_t r = 0; r < old_len;) {
    char *nl = memchr(a->sbuf + r, '\n', old_len - r);
    size_t n = nl ? (size_t)(nl - (a->sbuf + r)) + 1 : old_len - r;
    bool ours = find_bytes(a->sbuf + r, n, needle, strlen(needle)) != NULL;
    if (!ours && nl != NULL) {
      memmove(a->sbuf + w, a->sbuf + r, n);
      w += n;
    }
    r += n;
  }
  a->slen = w;
  if (!put_seal_line(a, seq, mac, time, ended)) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  return write_seal_file(a, err);
}

/* ---- rotation ---- */

/* The mac of the last line of the locked log of `size` bytes (which ends
 * in a newline: repair_tail ran). */
static bool last_mac_of(dlqb_audit *a, off_t size, char *mac) {
  char tail[RECORD_MAX * 2];
  off_t from = size > (off_t)sizeof tail ? size - (off_t)sizeof tail : 0;
  ssize_t r = pread(a->fd, tail, (size_t)(size - from), from);
  if (r != size - from || r < 2) return false;
  size_t end = (size_t)r - 1; /* the final newline */
  size_t start = end;
  while (start > 0 && tail[start - 1] != '\n') start--;
  size_t body;
  const char *hex;
  if (!dlqb__audit_split(tail + start, end - start, &body, &hex)) return false;
  memcpy(mac, hex, DLQB_AUDIT_MAC_HEX);
  mac[DLQB_AUDIT_MAC_HEX] = '\0';
  return true;
}

/* Copies the seal's authentic entries into the file_start record being
 * built, as "chains":[{"chain":..,"seq":..,"mac":..},...]. */
static bool put_sealed_chains(dlqb_audit *a) {
  size_t len = 0;
  put(a, ",\"chains\":[");
  if (read_all(a->seal_path, &a->sbuf, &a->scap, &len)) {
    bool first = true;
    for (size_t r = 0; r < len;) {
      char *line = a->sbuf + r;
      char *nl = memchr(line, '\n', len - r);
      if (nl == NULL) break;
      size_t n = (size_t)(nl - line);
      r += n + 1;
      size_t body;
      const char *hex;
      char mac[DLQB_AUDIT_MAC_HEX + 1];
      if (!dlqb__audit_split(line, n, &body, &hex) ||
          !dlqb__audit_hmac_body(&a->hmac, line, body, mac) || !dlqb__audit_mac_equal(mac, hex))
        continue; /* not ours to vouch for */
      char chain[DLQB_AUDIT_CHAIN_HEX + 1], last[DLQB_AUDIT_MAC_HEX + 1];
      unsigned long long seq;
      const char *c = find_bytes(line, body, "\"chain\":\"", 9);
      const char *s = find_bytes(line, body, "\"seq\":", 6);
      const char *m = find_bytes(line, body, "\"last_mac\":\"", 12);
      if (!c || !s || !m || sscanf(c + 9, "%32[0-9a-f]", chain) != 1 ||
          sscanf(s + 6, "%llu", &seq) != 1 || sscanf(m + 12, "%64[0-9a-f]", last) != 1)
        continue;
      if (!reserve(&a->buf, &a->cap, a->len, 256)) return false;
      a->len += (size_t)snprintf(a->buf + a->len, 256, "%s{\"chain\":\"%s\",\"seq\":%llu,"
                                 "\"mac\":\"%s\"}", first ? "" : ",", chain, seq, last);
      first = false;
    }
  }
  if (!reserve(&a->buf, &a->cap, a->len, RECORD_MAX)) return false;
  put(a, "]");
  return true;
}

/* Renames the full log to <log>.<UTC time>[-N] and puts a new log in its
 * place that starts with a file_start link: the MAC of the old file's last
 * line and the chain states the seal vouched for. Called with the log
 * locked; on return the lock and descriptor are dropped (the caller locks
 * the new file). A failure leaves the old file in place and is not fatal:
 * the batch is still written to it. */
static void rotate(dlqb_audit *a, off_t size, const char *time) {
  char prev_mac[DLQB_AUDIT_MAC_HEX + 1];
  if (!last_mac_of(a, size, prev_mac)) {
    dlqb_log_warn("audit_rotate", "cannot rotate audit log '%s': its last line is not a record",
                  a->path);
    return;
  }
  char archive[DLQB_CONFIG_STR_MAX + 64];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char stamp[40];
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
  for (int n = 0; n < 1000; n++) {
    if (n == 0)
      snprintf(archive, sizeof archive, "%s.%s.%03ldZ", a->path, stamp, ts.tv_nsec / 1000000);
    else
      snprintf(archive, sizeof archive, "%s.%s.%03ldZ-%d", a->path, stamp, ts.tv_nsec / 1000000, n);
    if (access(archive, F_OK) != 0) break;
  }
  char base_copy[sizeof archive];
  snprintf(base_copy, sizeof base_copy, "%s", archive);
  const char *base = basename(base_copy);

  a->len = 0;
  if (!reserve(&a->buf, &a->cap, 0, RECORD_MAX)) return;
  a->len += (size_t)snprintf(a->buf, RECORD_MAX,
                             "{\"v\":%d,\"event\":\"%s\",\"time\":\"%s\",\"writer\":\"%s\","
                             "\"key\":\"%s\",\"prev_mac\":\"%s\"",
                             DLQB_AUDIT_VERSION, DLQB__AUDIT_EV_FILE_START, time, a->writer,
                             a->key_id, prev_mac);
  put_str(a, "prev_file", base);
  char mac[DLQB_AUDIT_MAC_HEX + 1];
  if (!put_sealed_chains(a) || !end_record(a, 0, mac)) return;

  int fd = open(a->rotating, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    dlqb_log_warn("audit_rotate", "cannot rotate audit log '%s': %s", a->path, strerror(errno));
    return;
  }
  bool ok = write_all(fd, a->buf, a->len) && fdatasync(fd) == 0;
  close(fd);
  if (!ok || rename(a->path, archive) != 0) {
    dlqb_log_warn("audit_rotate", "cannot rotate audit log '%s': %s", a->path, strerror(errno));
    unlink(a->rotating);
    return;
  }
  /* ENOENT: a writer that found the empty gap completed the rename. */
  if (rename(a->rotating, a->path) != 0 && errno != ENOENT) {
    dlqb_log_error("audit_rotate", "cannot put the new audit log in place of '%s': %s", a->path,
                   strerror(errno));
    (void)rename(archive, a->path);
    return;
  }
  fsync_dir_of(a->path);
  /* The link carries every sealed chain, so ended chains (which can have
   * no more records) leave the seal; it would otherwise grow with every
   * ops command ever run. */
  size_t len = 0;
  if (read_all(a->seal_path, &a->sbuf, &a->scap, &len)) {
    size_t w = 0;
    for (size_t r = 0; r < len;) {
      char *nl = memchr(a->sbuf + r, '\n', len - r);
      if (nl == NULL) break;
      size_t n = (size_t)(nl - (a->sbuf + r)) + 1;
      if (find_bytes(a->sbuf + r, n, "\"ended\":false", 14) != NULL) {
        memmove(a->sbuf + w, a->sbuf + r, n);
        w += n;
      }
      r += n;
    }
    a->slen = w;
    dlqb_error ignored;
    (void)write_seal_file(a, &ignored);
  }
  dlqb_log_info("audit_rotated", "audit log rotated to '%s'", archive);
  unlock_log(a);
  close_log(a);
}

/* ---- committing a batch ---- */

/* Writes, under the lock: chain_start when the chain has not started,
 * one record per hop, chain_end when `end`; syncs; updates the seal; and
 * only then advances the chain. On failure the file is cut back to where
 * it was, so no half batch stays behind. */
static dlqb_status commit(dlqb_audit *a, const dlqb_hop *const *hops, size_t n, bool end,
                          dlqb_error *err) {
  char time[DLQB_ISO_TIME_MAX];
  dlqb_iso_time(dlqb_now_ms(), time, sizeof time);
  off_t size = 0;
  dlqb_status st = lock_log(a, &size, err);
  if (st != DLQB_OK) return st;
  if ((st = repair_tail(a, &size, err)) != DLQB_OK) goto unlock;
  if (a->rotate_bytes > 0 && size >= a->rotate_bytes) {
    rotate(a, size, time);
    if (a->fd < 0 && (st = lock_log(a, &size, err)) != DLQB_OK) return st;
  }

  uint64_t seq = a->seq;
  char mac[DLQB_AUDIT_MAC_HEX + 1];
  memcpy(mac, a->last_mac, sizeof mac);
  a->len = 0;
  bool ok = true;
  if (!a->started) ok = add_record(a, time, DLQB__AUDIT_EV_CHAIN_START, NULL, &seq, mac);
  for (size_t i = 0; ok && i < n; i++)
    ok = add_record(a, time, dlqb_event_name(hops[i]->event), hops[i], &seq, mac);
  if (ok && end) ok = add_record(a, time, DLQB__AUDIT_EV_CHAIN_END, NULL, &seq, mac);
  if (!ok) {
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory writing the audit log");
    goto unlock;
  }
  if (a->len == 0) goto unlock;

  if (!write_all(a->fd, a->buf, a->len) || fdatasync(a->fd) != 0) {
    st = io_fail(err, "write", a->path);
    goto undo;
  }
  if ((st = update_seal(a, seq, mac, time, end, err)) != DLQB_OK) goto undo;
  a->seq = seq;
  memcpy(a->last_mac, mac, sizeof mac);
  a->started = true;
  a->ended = end;
  goto unlock;

undo:
  /* Nobody else appends while we hold the lock, so everything past `size`
   * is ours. If even that fails, the records stay as an orphan stretch of
   * a chain we abandon: the next batch starts a fresh chain, so the log
   * never holds two records with one chain and seq. */
  if (ftruncate(a->fd, size) != 0 || fdatasync(a->fd) != 0) {
    struct stat fs;
    if (fstat(a->fd, &fs) != 0 || fs.st_size != size) {
      unsigned char id[DLQB_AUDIT_CHAIN_HEX / 2];
      if (RAND_bytes(id, sizeof id) == 1) to_hex(id, sizeof id, a->chain);
      a->started = false;
      a->seq = 0;
      memcpy(a->last_mac, DLQB__AUDIT_ZERO_MAC, sizeof a->last_mac);
    }
  }
unlock:
  unlock_log(a);
  return st;
}

/* ---- public API ---- */

dlqb_status dlqb_audit_open(const dlqb_config *cfg, const char *writer, dlqb_audit **out,
                            dlqb_error *err) {
  *out = NULL;
  if (cfg->audit_log[0] == '\0') return DLQB_OK;
  if (cfg->audit_key_file[0] == '\0')
    return dlqb_fail(err, DLQB_EINVAL, "audit_key_file is required when audit_log is set");
  dlqb_audit *a = calloc(1, sizeof *a);
  if (a == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  a->fd = -1;
  dlqb_status st = dlqb_audit_key_load(cfg->audit_key_file, a->key, &a->key_len, err);
  if (st != DLQB_OK) goto fail;
  if (!dlqb__audit_hmac_init(&a->hmac, a->key, a->key_len)) {
    st = dlqb_fail(err, DLQB_ENOMEM, "cannot set up hmac-sha256 (openssl)");
    goto fail;
  }
  dlqb_audit_key_id(a->key, a->key_len, a->key_id);
  unsigned char id[DLQB_AUDIT_CHAIN_HEX / 2];
  if (RAND_bytes(id, sizeof id) != 1) {
    st = dlqb_fail(err, DLQB_EIO, "cannot draw a random chain id (openssl)");
    goto fail;
  }
  to_hex(id, sizeof id, a->chain);
  memcpy(a->last_mac, DLQB__AUDIT_ZERO_MAC, sizeof a->last_mac);
  snprintf(a->path, sizeof a->path, "%s", cfg->audit_log);
  snprintf(a->seal_path, sizeof a->seal_path, "%s%s", a->path, DLQB_AUDIT_SEAL_SUFFIX);
  snprintf(a->seal_tmp, sizeof a->seal_tmp, "%s%s.tmp", a->path, DLQB_AUDIT_SEAL_SUFFIX);
  snprintf(a->rotating, sizeof a->rotating, "%s.rotating", a->path);
  escape(a->writer, writer != NULL && writer[0] ? writer : cfg->instance);
  a->rotate_bytes = cfg->audit_rotate_bytes;
  if (!reserve(&a->buf, &a->cap, 0, BUF_INITIAL) || !reserve(&a->sbuf, &a->scap, 0, 4096)) {
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    goto fail;
  }
  /* The log must at least open now: a wrong path or permission is a
   * configuration error, better reported at start than at the first hop. */
  off_t size;
  if ((st = lock_log(a, &size, err)) != DLQB_OK) goto fail;
  /* An absent seal reads as "nothing sealed"; create it so that a deleted
   * seal is noticed. */
  int sfd = open(a->seal_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (sfd >= 0) close(sfd);
  unlock_log(a);
  /* The chain_start record; if the disk is full now it goes out with the
   * first batch instead, and until then nothing is acked. */
  dlqb_error ignored;
  a->healthy = commit(a, NULL, 0, false, &ignored) == DLQB_OK;
  *out = a;
  return DLQB_OK;
fail:
  dlqb_audit_close(a);
  return st;
}

dlqb_status dlqb_audit_record(dlqb_audit *a, const dlqb_hop *const *hops, size_t n,
                              dlqb_error *err) {
  if (a == NULL || (n == 0 && a->started)) return DLQB_OK;
  if (a->ended) return dlqb_fail(err, DLQB_EINVAL, "audit log '%s' is already closed", a->path);
  dlqb_status st = commit(a, hops, n, false, err);
  a->healthy = st == DLQB_OK;
  return st;
}

int dlqb_audit_healthy(const dlqb_audit *a) { return a == NULL || a->healthy; }

void dlqb_audit_close(dlqb_audit *a) {
  if (a == NULL) return;
  if (a->started && !a->ended && a->hmac.ctx != NULL) {
    dlqb_error err;
    if (commit(a, NULL, 0, true, &err) != DLQB_OK)
      dlqb_log_warn("audit_close", "cannot write the chain_end record: %s", err.msg);
  }
  close_log(a);
  dlqb__audit_hmac_release(&a->hmac);
  OPENSSL_cleanse(a->key, sizeof a->key);
  free(a->buf);
  free(a->sbuf);
  free(a);
}

/* The audit trail writer: one HMAC-chained JSON line per hop, appended
 * under an exclusive lock and fsync'd once per batch, with a sealed
 * checkpoint beside the log and size-based rotation. docs/audit.md
 * describes the format and what it proves.
 *
 * Group commit: callers hand hops over (dlqb_audit_submit) and a writer
 * thread formats, writes and syncs whatever has gathered since its last
 * sync, so the pipe keeps consuming and publishing while a batch syncs and
 * the batches grow with the load. Only the writer thread touches the chain
 * state and the files once the log is open. */
#include "dlqb/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit_private.h"
#include "dlqb/file.h"
#include "dlqb/log.h"
#include "dlqb/text.h"

/* A record is at most this long: every text field of a hop sanitised and
 * escaped (at most doubled) plus the fixed members. The batch buffer keeps
 * this much headroom, so it grows only when a batch is larger than any
 * before it, never per message. */
#define RECORD_MAX 16384
#define BUF_INITIAL (64 * 1024)
#define TAIL_CHUNK 4096
#define LOCK_TRIES 20
#define KEY_ID_LABEL "dlq-bridge audit key id"
#define RETRY_MS 500 /* after a failed write, the writer tries again this often */
#define SEAL_COMPACT_BYTES (256 * 1024)

struct dlqb_audit {
  char path[DLQB_CONFIG_STR_MAX];
  char seal_path[DLQB_CONFIG_STR_MAX + 16];
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
   * written and synced, and its seal line appended. From open to close,
   * this and everything above belong to the writer thread. */
  bool started, ended;
  uint64_t seq;
  char last_mac[DLQB_AUDIT_MAC_HEX + 1];
  char *buf; /* the batch being written */
  size_t len, cap;
  char *sbuf; /* a seal line being built, or the seal read back (compaction) */
  size_t slen, scap;
  long long seal_compacted; /* the seal's size after our last compaction */

  /* ---- hand-over to the writer thread ---- */
  pthread_t thread;
  bool thread_running;
  pthread_mutex_t mu;
  pthread_cond_t work;   /* hops queued, or closing */
  pthread_cond_t done;   /* an attempt finished */
  dlqb_hop *queue;       /* submitted, not yet taken by the writer (mu) */
  size_t qlen, qcap;
  dlqb_hop *batch;       /* the writer's batch: retried until written */
  size_t blen, bcap;
  uint64_t submitted;    /* tickets handed out (mu) */
  uint64_t attempts;     /* finished write attempts (mu) */
  uint64_t failed_upto;  /* the last failed attempt covered tickets up to here (mu) */
  dlqb_error failure;    /* why it failed (mu) */
  dlqb_status failure_status;
  bool closing;          /* (mu) */
  _Atomic uint64_t durable; /* written and synced up to this ticket */
  atomic_bool ok;        /* the last attempt succeeded */
  int wake_fd;           /* eventfd, signalled after every attempt; -1 if none */
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

/* A file (the log or its seal) that does not end in a newline ends in a
 * line some writer never finished (it crashed mid-write, or its write
 * failed and could not be undone). No writer counted it, nothing was acked
 * for it: cut it off so the next line starts on a line of its own. */
static dlqb_status cut_unfinished_line(int fd, const char *path, off_t *size, dlqb_error *err) {
  struct stat fs;
  char last;
  if (*size == 0 || fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode)) return DLQB_OK;
  if (pread(fd, &last, 1, *size - 1) != 1) return io_fail(err, "read", path);
  if (last == '\n') return DLQB_OK;
  char chunk[TAIL_CHUNK];
  off_t end = *size, keep = 0;
  while (end > 0 && keep == 0) {
    off_t from = end > TAIL_CHUNK ? end - TAIL_CHUNK : 0;
    ssize_t r = pread(fd, chunk, (size_t)(end - from), from);
    if (r != end - from) return io_fail(err, "read", path);
    for (ssize_t i = r - 1; i >= 0; i--) {
      if (chunk[i] == '\n') {
        keep = from + i + 1;
        break;
      }
    }
    end = from;
  }
  if (ftruncate(fd, keep) != 0 || fdatasync(fd) != 0) return io_fail(err, "repair", path);
  dlqb_log_warn("audit_repaired", "audit file '%s' ended in an unfinished line; removed its %lld "
                "bytes", path, (long long)(*size - keep));
  *size = keep;
  return DLQB_OK;
}

/* ---- the seal ---- */

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
  if (left < digits + 1 || p[digits] != '"' || !is_lower_hex(p, digits)) return false;
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

/* Adds one {"chain","seq","mac"} member for a seal line to a->buf. */
static bool put_chain_state(dlqb_audit *a, const char *line, size_t n, void *ctx) {
  bool *first = ctx;
  char chain[DLQB_AUDIT_CHAIN_HEX + 1], last[DLQB_AUDIT_MAC_HEX + 1];
  uint64_t seq;
  if (!hex_member(line, n, "chain", DLQB_AUDIT_CHAIN_HEX, chain) ||
      !uint_member(line, n, "seq", &seq) ||
      !hex_member(line, n, "last_mac", DLQB_AUDIT_MAC_HEX, last))
    return true; /* not a seal we can vouch for */
  if (!reserve(&a->buf, &a->cap, a->len, 256)) return false;
  a->len += (size_t)snprintf(a->buf + a->len, 256, "%s{\"chain\":\"%s\",\"seq\":%" PRIu64 ","
                             "\"mac\":\"%s\"}", *first ? "" : ",", chain, seq, last);
  *first = false;
  return true;
}

/* Copies where every chain stood by the seal into the file_start record
 * being built, as "chains":[{"chain":..,"seq":..,"mac":..},...]. */
static bool put_sealed_chains(dlqb_audit *a) {
  size_t len = 0;
  bool first = true;
  put(a, ",\"chains\":[");
  if (dlqb_read_file(a->seal_path, &a->sbuf, &a->scap, &len) &&
      !each_latest_seal(a, a->sbuf, len, put_chain_state, &first))
    return false;
  if (!reserve(&a->buf, &a->cap, a->len, RECORD_MAX)) return false;
  put(a, "]");
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
  if (!reserve(&out->buf, &out->cap, out->len, n + 1)) return false;
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
static long long compact_seal(dlqb_audit *a, bool drop_ended) {
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
static dlqb_status append_seal(dlqb_audit *a, uint64_t seq, const char *mac, const char *time,
                               bool ended, dlqb_error *err) {
  a->slen = 0;
  if (!put_seal_line(a, seq, mac, time, ended)) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  int fd = open(a->seal_path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return io_fail(err, "write the seal of", a->path);
  struct stat fs;
  off_t size = fstat(fd, &fs) == 0 ? fs.st_size : 0;
  dlqb_status st = cut_unfinished_line(fd, a->seal_path, &size, err);
  if (st == DLQB_OK && (!dlqb_write_all(fd, a->sbuf, a->slen) || (ended && fdatasync(fd) != 0)))
    st = io_fail(err, "write the seal of", a->path);
  close(fd);
  /* A line per batch adds up (at a low rate a batch is a record or two):
   * once the seal has grown by SEAL_COMPACT_BYTES since we last compacted
   * it, keep only each chain's latest line. One extra sync per so many
   * batches. */
  if (st == DLQB_OK && (long long)size + (long long)a->slen > a->seal_compacted + SEAL_COMPACT_BYTES) {
    long long now = compact_seal(a, false);
    if (now >= 0) a->seal_compacted = now;
  }
  return st;
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
  bool ok = dlqb_write_all(fd, a->buf, a->len) && fdatasync(fd) == 0;
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
  (void)compact_seal(a, true);
  dlqb_log_info("audit_rotated", "audit log rotated to '%s'", archive);
  unlock_log(a);
  close_log(a);
}

/* ---- committing a batch ---- */

/* Writes, under the lock: chain_start when the chain has not started,
 * one record per hop, chain_end when `end`; syncs; updates the seal; and
 * only then advances the chain. On failure the file is cut back to where
 * it was, so no half batch stays behind. */
static dlqb_status commit(dlqb_audit *a, const dlqb_hop *hops, size_t n, bool end,
                          dlqb_error *err) {
  char time[DLQB_ISO_TIME_MAX];
  dlqb_iso_time(dlqb_now_ms(), time, sizeof time);
  off_t size = 0;
  dlqb_status st = lock_log(a, &size, err);
  if (st != DLQB_OK) return st;
  if ((st = cut_unfinished_line(a->fd, a->path, &size, err)) != DLQB_OK) goto unlock;
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
    ok = add_record(a, time, dlqb_event_name(hops[i].event), &hops[i], &seq, mac);
  if (ok && end) ok = add_record(a, time, DLQB__AUDIT_EV_CHAIN_END, NULL, &seq, mac);
  if (!ok) {
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory writing the audit log");
    goto unlock;
  }
  if (a->len == 0) goto unlock;

  if (!dlqb_write_all(a->fd, a->buf, a->len) || fdatasync(a->fd) != 0) {
    st = io_fail(err, "write", a->path);
    goto undo;
  }
  if ((st = append_seal(a, seq, mac, time, end, err)) != DLQB_OK) goto undo;
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

/* ---- the writer thread ---- */

/* Makes room for n more hops in *arr. It grows only past its largest
 * size so far, and the pipe's window bounds how many hops wait at once, so
 * steady traffic allocates nothing. */
static bool reserve_hops(dlqb_hop **arr, size_t len, size_t *cap, size_t n) {
  if (*cap - len >= n) return true;
  size_t ncap = *cap ? *cap : 64;
  while (ncap - len < n) ncap *= 2;
  dlqb_hop *grown = realloc(*arr, ncap * sizeof *grown);
  if (grown == NULL) return false;
  *arr = grown;
  *cap = ncap;
  return true;
}

static void wake_waiters(dlqb_audit *a) {
  pthread_cond_broadcast(&a->done);
  if (a->wake_fd >= 0) {
    uint64_t one = 1;
    (void)!write(a->wake_fd, &one, sizeof one);
  }
}

/* Takes everything queued into its batch, writes and syncs it, and
 * publishes the outcome; after a failure it keeps the batch and tries
 * again every RETRY_MS (fail closed: the pipe acks nothing meanwhile). */
static void *writer_main(void *arg) {
  dlqb_audit *a = arg;
  /* Signals (SIGTERM: finish and exit) are the main thread's business. */
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  pthread_mutex_lock(&a->mu);
  for (;;) {
    while (a->qlen == 0 && a->blen == 0 && !a->closing) pthread_cond_wait(&a->work, &a->mu);
    if (a->qlen == 0 && a->blen == 0) break; /* closing, nothing left */
    dlqb_error err = {{0}};
    dlqb_status st = DLQB_OK;
    if (a->blen == 0) {
      /* The usual case: the queue becomes the batch, no copy. */
      dlqb_hop *t = a->batch;
      size_t tcap = a->bcap;
      a->batch = a->queue;
      a->bcap = a->qcap;
      a->blen = a->qlen;
      a->queue = t;
      a->qcap = tcap;
      a->qlen = 0;
    } else if (a->qlen == 0) {
      /* A retry with nothing new queued: the queue may never have been
       * allocated (NULL), so there is nothing to merge. */
    } else if (!reserve_hops(&a->batch, a->blen, &a->bcap, a->qlen)) {
      st = dlqb_fail(&err, DLQB_ENOMEM, "out of memory queueing audit records");
    } else {
      memcpy(a->batch + a->blen, a->queue, a->qlen * sizeof *a->queue);
      a->blen += a->qlen;
      a->qlen = 0;
    }
    uint64_t covered = a->submitted;
    pthread_mutex_unlock(&a->mu);
    if (st == DLQB_OK) st = commit(a, a->batch, a->blen, false, &err);
    pthread_mutex_lock(&a->mu);
    a->attempts++;
    bool was_ok = atomic_load(&a->ok);
    if (st == DLQB_OK) {
      a->blen = 0;
      atomic_store(&a->durable, covered);
      atomic_store(&a->ok, true);
      if (!was_ok)
        dlqb_log_info("audit_recovered", "the audit log %s is writable again; acking resumes",
                      a->path);
    } else {
      a->failed_upto = covered;
      a->failure = err;
      a->failure_status = st;
      atomic_store(&a->ok, false);
      if (was_ok)
        dlqb_log_error("audit_failing", "%s; not acking until the audit log can be written",
                       err.msg);
    }
    wake_waiters(a);
    if (st != DLQB_OK) {
      if (a->closing) break; /* what is left was never acked: it is redelivered */
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += RETRY_MS * 1000000L;
      until.tv_sec += until.tv_nsec / 1000000000L;
      until.tv_nsec %= 1000000000L;
      while (!a->closing && pthread_cond_timedwait(&a->work, &a->mu, &until) == 0) {
      }
    }
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
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
  a->wake_fd = -1;
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->work, NULL);
  pthread_cond_init(&a->done, NULL);
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
  a->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (a->wake_fd < 0) {
    st = io_fail(err, "watch", a->path);
    goto fail;
  }
  /* The chain_start record; if the disk is full now it goes out with the
   * first batch instead, and until then nothing is acked. */
  dlqb_error ignored;
  atomic_store(&a->ok, commit(a, NULL, 0, false, &ignored) == DLQB_OK);
  if (pthread_create(&a->thread, NULL, writer_main, a) != 0) {
    st = dlqb_fail(err, DLQB_ENOMEM, "cannot start the audit writer thread");
    goto fail;
  }
  a->thread_running = true;
  *out = a;
  return DLQB_OK;
fail:
  dlqb_audit_close(a);
  return st;
}

dlqb_status dlqb_audit_submit(dlqb_audit *a, const dlqb_hop *const *hops, size_t n,
                              uint64_t *ticket, dlqb_error *err) {
  *ticket = 0;
  if (a == NULL) return DLQB_OK;
  dlqb_status st = DLQB_OK;
  pthread_mutex_lock(&a->mu);
  if (!reserve_hops(&a->queue, a->qlen, &a->qcap, n)) {
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory queueing audit records");
  } else if (n > 0) {
    for (size_t i = 0; i < n; i++) a->queue[a->qlen++] = *hops[i];
    a->submitted++;
    pthread_cond_signal(&a->work);
  }
  *ticket = a->submitted;
  pthread_mutex_unlock(&a->mu);
  return st;
}

uint64_t dlqb_audit_durable(const dlqb_audit *a) {
  return a == NULL ? UINT64_MAX : atomic_load(&((dlqb_audit *)a)->durable);
}

int dlqb_audit_wake_fd(const dlqb_audit *a) { return a == NULL ? -1 : a->wake_fd; }

void dlqb_audit_clear_wake(const dlqb_audit *a) {
  uint64_t n;
  if (a != NULL && a->wake_fd >= 0) (void)!read(a->wake_fd, &n, sizeof n);
}

dlqb_status dlqb_audit_wait(dlqb_audit *a, uint64_t ticket, dlqb_error *err) {
  if (a == NULL) return DLQB_OK;
  dlqb_status st = DLQB_OK;
  pthread_mutex_lock(&a->mu);
  uint64_t seen = a->attempts;
  for (;;) {
    if (atomic_load(&a->durable) >= ticket) break;
    /* An attempt that finished after we started waiting and covered our
     * ticket failed: report it (the hops stay queued and are retried). */
    if (a->attempts != seen && a->failed_upto >= ticket && !atomic_load(&a->ok)) {
      *err = a->failure;
      st = a->failure_status;
      break;
    }
    if (!a->thread_running) {
      st = dlqb_fail(err, DLQB_EIO, "audit log '%s' is closed", a->path);
      break;
    }
    pthread_cond_wait(&a->done, &a->mu);
  }
  pthread_mutex_unlock(&a->mu);
  return st;
}

dlqb_status dlqb_audit_record(dlqb_audit *a, const dlqb_hop *const *hops, size_t n,
                              dlqb_error *err) {
  if (a == NULL) return DLQB_OK;
  uint64_t ticket;
  dlqb_status st = dlqb_audit_submit(a, hops, n, &ticket, err);
  return st == DLQB_OK ? dlqb_audit_wait(a, ticket, err) : st;
}

int dlqb_audit_healthy(const dlqb_audit *a) {
  return a == NULL || atomic_load(&((dlqb_audit *)a)->ok);
}

void dlqb_audit_close(dlqb_audit *a) {
  if (a == NULL) return;
  if (a->thread_running) {
    pthread_mutex_lock(&a->mu);
    a->closing = true;
    pthread_cond_signal(&a->work);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    a->thread_running = false;
  }
  /* Only this thread is left: the chain state is ours. */
  if (a->started && !a->ended && a->hmac.ctx != NULL) {
    dlqb_error err;
    if (commit(a, NULL, 0, true, &err) != DLQB_OK)
      dlqb_log_warn("audit_close", "cannot write the chain_end record: %s", err.msg);
  }
  close_log(a);
  if (a->wake_fd >= 0) close(a->wake_fd);
  dlqb__audit_hmac_release(&a->hmac);
  OPENSSL_cleanse(a->key, sizeof a->key);
  pthread_cond_destroy(&a->work);
  pthread_cond_destroy(&a->done);
  pthread_mutex_destroy(&a->mu);
  free(a->queue);
  free(a->batch);
  free(a->buf);
  free(a->sbuf);
  free(a);
}

/* The audit log file: opening and locking it, repairing an unfinished
 * tail, rotation, and syncing its directory. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit_private.h"
#include "dlqb/clock.h"
#include "dlqb/file.h"
#include "dlqb/log.h"

#define TAIL_CHUNK 4096
#define LOCK_TRIES 20
/* How long one write attempt waits for another writer's lock. A batch holds
 * it for a write and an fsync (milliseconds); a holder that keeps it longer
 * is stopped (Ctrl-Z on an ops command) or stuck (a hung NFS server): the
 * attempt then fails like a failed write, so the writer says so, /healthz
 * turns unhealthy, and it tries again later instead of blocking unseen. */
#define LOCK_WAIT_MS 2000
#define LOCK_POLL_US 10000

dlqb_status dlqb__audit_io_fail(dlqb_error *err, const char *what, const char *path) {
  char why[128];
  return dlqb_fail(err, DLQB_EIO, "cannot %s audit log '%s': %s", what, path,
                   dlqb_errno_text(errno, why, sizeof why));
}

void dlqb__audit_fsync_dir_of(const char *path) {
  char copy[DLQB_CONFIG_STR_MAX + 16];
  snprintf(copy, sizeof copy, "%s", path);
  int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
}

void dlqb__audit_unlock_log(dlqb_audit *a) {
  if (a->fd >= 0) flock(a->fd, LOCK_UN);
}

void dlqb__audit_close_log(dlqb_audit *a) {
  if (a->fd >= 0) close(a->fd);
  a->fd = -1;
}

int dlqb__audit_open_or_create(const char *path, int flags) {
  int fd = open(path, flags | O_CLOEXEC);
  if (fd >= 0 || errno != ENOENT) return fd;
  fd = open(path, flags | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    /* A new file's directory entry is durable only once its directory is
     * synced: without it a crash can lose the whole new log, records that
     * were synced and acked included. */
    dlqb__audit_fsync_dir_of(path);
    return fd;
  }
  /* Another writer created it between our two opens. */
  return errno == EEXIST ? open(path, flags | O_CLOEXEC) : -1;
}

/* flock with a bounded wait (LOCK_WAIT_MS). */
static dlqb_status lock_bounded(dlqb_audit *a, dlqb_error *err) {
  long long give_up = dlqb_mono_ms() + LOCK_WAIT_MS;
  for (;;) {
    if (flock(a->fd, LOCK_EX | LOCK_NB) == 0) return DLQB_OK;
    if (errno != EWOULDBLOCK && errno != EINTR) return dlqb__audit_io_fail(err, "lock", a->path);
    if (dlqb_mono_ms() >= give_up)
      return dlqb_fail(err, DLQB_EIO,
                       "cannot lock audit log '%s': another process has held its "
                       "lock for %d s (a stopped ops command? a hung file server?)",
                       a->path, LOCK_WAIT_MS / 1000);
    usleep(LOCK_POLL_US);
  }
}

/* Locks the file now at a->path, reopening when it was rotated or replaced
 * since we opened it (then our descriptor is a stale inode). On success
 * the lock is held and *size is the file's size. */
dlqb_status dlqb__audit_lock_log(dlqb_audit *a, off_t *size, dlqb_error *err) {
  for (int tries = 0; tries < LOCK_TRIES; tries++) {
    if (a->fd < 0) {
      a->fd = dlqb__audit_open_or_create(a->path, O_RDWR | O_APPEND);
      if (a->fd < 0) return dlqb__audit_io_fail(err, "open", a->path);
    }
    dlqb_status lst = lock_bounded(a, err);
    if (lst != DLQB_OK) return lst;
    struct stat fs, ps;
    if (fstat(a->fd, &fs) != 0) {
      dlqb_status st = dlqb__audit_io_fail(err, "stat", a->path);
      dlqb__audit_unlock_log(a);
      return st;
    }
    if (stat(a->path, &ps) == 0 && ps.st_dev == fs.st_dev && ps.st_ino == fs.st_ino) {
      /* A rotation that crashed between its two renames left an empty log
       * and the finished new file: complete it. */
      if (fs.st_size == 0 && access(a->rotating, F_OK) == 0) {
        if (rename(a->rotating, a->path) == 0) dlqb__audit_fsync_dir_of(a->path);
        dlqb__audit_unlock_log(a);
        dlqb__audit_close_log(a);
        continue;
      }
      *size = fs.st_size;
      a->log_ino = fs.st_ino;
      a->log_dev = fs.st_dev;
      return DLQB_OK;
    }
    dlqb__audit_unlock_log(a);
    dlqb__audit_close_log(a);
  }
  return dlqb_fail(err, DLQB_EIO, "cannot lock audit log '%s': it keeps being replaced", a->path);
}

/* A file (the log or its seal) that does not end in a newline ends in a
 * line some writer never finished (it crashed mid-write, or its write
 * failed and could not be undone). No writer counted it, nothing was acked
 * for it: cut it off so the next line starts on a line of its own. */
dlqb_status dlqb__audit_cut_unfinished_line(int fd, const char *path, off_t *size,
                                            dlqb_error *err) {
  struct stat fs;
  char last;
  if (*size == 0 || fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode)) return DLQB_OK;
  if (pread(fd, &last, 1, *size - 1) != 1) return dlqb__audit_io_fail(err, "read", path);
  if (last == '\n') return DLQB_OK;
  char chunk[TAIL_CHUNK];
  off_t end = *size, keep = 0;
  while (end > 0 && keep == 0) {
    off_t from = end > TAIL_CHUNK ? end - TAIL_CHUNK : 0;
    ssize_t r = pread(fd, chunk, (size_t)(end - from), from);
    if (r != end - from) return dlqb__audit_io_fail(err, "read", path);
    for (ssize_t i = r - 1; i >= 0; i--) {
      if (chunk[i] == '\n') {
        keep = from + i + 1;
        break;
      }
    }
    end = from;
  }
  if (ftruncate(fd, keep) != 0 || fdatasync(fd) != 0)
    return dlqb__audit_io_fail(err, "repair", path);
  dlqb_log_warn("audit_repaired",
                "audit file '%s' ended in an unfinished line; removed its %lld "
                "bytes",
                path, (long long)(*size - keep));
  *size = keep;
  return DLQB_OK;
}

/* Reads the chain id and seq at the start of a record line ({"v":2,"chain":"<id>","seq":N,
 * as every writer writes them); a file_start line has neither: "" and 0. */
static void chain_of_line(const char *line, size_t len, dlqb__audit_tail *t) {
  static const char head[] = "{\"v\":2,\"chain\":\"";
  const size_t hl = sizeof head - 1;
  t->chain[0] = '\0';
  t->seq = 0;
  if (len < hl + DLQB_AUDIT_CHAIN_HEX + 8 || memcmp(line, head, hl) != 0 ||
      !dlqb__audit_is_lower_hex(line + hl, DLQB_AUDIT_CHAIN_HEX))
    return;
  const char *p = line + hl + DLQB_AUDIT_CHAIN_HEX;
  const char *end = line + len;
  if (end - p < 8 || memcmp(p, "\",\"seq\":", 8) != 0) return;
  p += 8;
  uint64_t seq = 0;
  while (p < end && *p >= '0' && *p <= '9' && seq < UINT64_MAX / 10)
    seq = seq * 10 + (uint64_t)(*p++ - '0');
  memcpy(t->chain, line + hl, DLQB_AUDIT_CHAIN_HEX);
  t->chain[DLQB_AUDIT_CHAIN_HEX] = '\0';
  t->seq = seq;
}

int dlqb__audit_last_line(dlqb_audit *a, off_t size, dlqb__audit_tail *t) {
  t->chain[0] = '\0';
  t->seq = 0;
  memcpy(t->hash, DLQB__AUDIT_ZERO_HASH, sizeof t->hash);
  if (size == 0) return 1;
  /* Two records' worth, on the heap (32 KiB is too much for a stack). */
  enum { TAIL = DLQB__AUDIT_RECORD_MAX * 2 };
  char *tail = malloc(TAIL);
  if (tail == NULL) return -1;
  off_t from = size > (off_t)TAIL ? size - (off_t)TAIL : 0;
  ssize_t r = pread(a->fd, tail, (size_t)(size - from), from);
  int rc = 1;
  if (r != size - from) rc = -1;
  else if (r < 2) rc = 0;
  if (rc == 1) {
    size_t end = (size_t)r - 1; /* the final newline */
    size_t start = end;
    while (start > 0 && tail[start - 1] != '\n') start--;
    size_t body;
    const char *sig;
    if (!dlqb__audit_split(tail + start, end - start, &body, &sig) ||
        !dlqb__audit_hash_body(&a->hasher, tail + start, body, t->hash))
      rc = 0;
    else chain_of_line(tail + start, end - start, t);
  }
  free(tail);
  return rc;
}

/* Renames the full log to <log>.<UTC time>[-N] and puts a new log in its
 * place that starts with a file_start link: the hash of the old file's last
 * line and the chain states the seal vouched for. Called with the log
 * locked; on return the lock and descriptor are dropped (the caller locks
 * the new file). A failure leaves the old file in place and is not fatal:
 * the batch is still written to it. */
void dlqb__audit_rotate(dlqb_audit *a, off_t size, const char *time) {
  char why[DLQB_ERRNO_TEXT_MAX];
  dlqb__audit_tail last;
  if (size == 0 || dlqb__audit_last_line(a, size, &last) != 1) {
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
  if (!dlqb__audit_reserve(&a->buf, &a->cap, 0, DLQB__AUDIT_RECORD_MAX)) return;
  a->len += (size_t)snprintf(a->buf, DLQB__AUDIT_RECORD_MAX,
                             "{\"v\":%d,\"event\":\"%s\",\"time\":\"%s\",\"writer\":\"%s\","
                             "\"key\":\"%s\",\"prev_hash\":\"%s\"",
                             DLQB_AUDIT_VERSION, DLQB__AUDIT_EV_FILE_START, time, a->writer,
                             a->key_id, last.hash);
  dlqb__audit_put_str(a, "prev_file", base);
  char hash[DLQB_AUDIT_HASH_HEX + 1];
  if (!dlqb__audit_put_sealed_chains(a) || !dlqb__audit_end_record(a, 0, true, hash)) return;

  /* O_NOFOLLOW: a link planted under this name must not make us truncate
   * what it points at. */
  int fd = open(a->rotating, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    dlqb_log_warn("audit_rotate", "cannot rotate audit log '%s': %s", a->path,
                  dlqb_errno_text(errno, why, sizeof why));
    return;
  }
  bool ok = dlqb_write_all(fd, a->buf, a->len) && fdatasync(fd) == 0;
  close(fd);
  if (!ok || rename(a->path, archive) != 0) {
    dlqb_log_warn("audit_rotate", "cannot rotate audit log '%s': %s", a->path,
                  dlqb_errno_text(errno, why, sizeof why));
    unlink(a->rotating);
    return;
  }
  /* ENOENT: a writer that found the empty gap completed the rename. */
  if (rename(a->rotating, a->path) != 0 && errno != ENOENT) {
    dlqb_log_error("audit_rotate", "cannot put the new audit log in place of '%s': %s", a->path,
                   dlqb_errno_text(errno, why, sizeof why));
    (void)rename(archive, a->path);
    return;
  }
  dlqb__audit_fsync_dir_of(a->path);
  (void)dlqb__audit_compact_seal(a, true);
  dlqb_log_info("audit_rotated", "audit log rotated to '%s'", archive);
  dlqb__audit_unlock_log(a);
  dlqb__audit_close_log(a);
}

/* The audit trail writer: one hash-chained JSON line per hop, the last of
 * each batch signed, appended under an exclusive lock and fsync'd once per
 * batch, with a sealed
 * checkpoint beside the log and size-based rotation. docs/audit.md
 * describes the format and what it proves.
 *
 * Group commit: callers hand hops over (dlqb_audit_submit) and a writer
 * thread formats, writes and syncs whatever has gathered since its last
 * sync, so the pipe keeps consuming and publishing while a batch syncs and
 * the batches grow with the load. Only the writer thread touches the chain
 * state and the files once the log is open. This file holds the batch
 * commit, the thread and the public handle; record.c, seal.c and logfile.c
 * the format and the files. */
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit_private.h"
#include "dlqb/clock.h"
#include "dlqb/file.h"
#include "dlqb/log.h"

#define ANCHOR_FILE_MAX 128 /* bytes of the log's name an anchor carries */
#define RETRY_MS        500 /* after a failed write, the writer tries again this often */

/* The hash of the locked log's first line (the file's identity, which a
 * rotation keeps: anchors name it, so verify can tell which file held a
 * chain). False when it cannot be read. */
static bool first_line_hash(dlqb_audit *a, char *out) {
  enum { HEAD = DLQB__AUDIT_RECORD_MAX * 2 }; /* on the heap: too much for a stack */
  char *head = malloc(HEAD);
  if (head == NULL) return false;
  ssize_t r = pread(a->fd, head, HEAD, 0);
  const char *nl = r > 0 ? memchr(head, '\n', (size_t)r) : NULL;
  size_t body;
  const char *sig;
  bool ok = nl != NULL && dlqb__audit_split(head, (size_t)(nl - head), &body, &sig) &&
            dlqb__audit_hash_body(&a->hasher, head, body, out);
  free(head);
  return ok;
}

/* After a commit, with the log locked: the head anchors publish. */
static void publish_head(dlqb_audit *a, const char *time) {
  char file_id[DLQB_AUDIT_HASH_HEX + 1];
  bool same_file = a->head.seq_known && a->head_ino == a->log_ino && a->head_dev == a->log_dev;
  if (same_file) memcpy(file_id, a->head.file_id, sizeof file_id);
  else if (!first_line_hash(a, file_id)) memcpy(file_id, DLQB__AUDIT_ZERO_HASH, sizeof file_id);
  a->head_ino = a->log_ino;
  a->head_dev = a->log_dev;
  pthread_mutex_lock(&a->head_mu);
  memcpy(a->head.chain, a->chain, sizeof a->head.chain);
  a->head.seq = a->seq;
  a->head.seq_known = true;
  memcpy(a->head.hash, a->last_hash, sizeof a->head.hash);
  a->head.ended = a->ended;
  memcpy(a->head.file_id, file_id, sizeof file_id);
  snprintf(a->head.time, sizeof a->head.time, "%s", time);
  a->head.commits++;
  pthread_mutex_unlock(&a->head_mu);
}

/* Writes, under the lock: chain_start when the chain has not started,
 * one record per hop, chain_end when `end`; syncs; updates the seal; and
 * only then advances the chain. On failure the file is cut back to where
 * it was, so no half batch stays behind. */
static dlqb_status commit(dlqb_audit *a, const dlqb_hop *hops, size_t n, bool end,
                          dlqb_error *err) {
  char time[DLQB_ISO_TIME_MAX];
  dlqb_iso_time(dlqb_now_ms(), time, sizeof time);
  off_t size = 0;
  dlqb_status st = dlqb__audit_lock_log(a, &size, err);
  if (st != DLQB_OK) return st;
  if ((st = dlqb__audit_cut_unfinished_line(a->fd, a->path, &size, err)) != DLQB_OK) goto unlock;
  if (a->rotate_bytes > 0 && size >= a->rotate_bytes) {
    dlqb__audit_rotate(a, size, time);
    if (a->fd < 0 && (st = dlqb__audit_lock_log(a, &size, err)) != DLQB_OK) return st;
  }

  /* The batch's first record names the file's last line: the link
   * between the chains of one file (a chain deleted whole shows where a
   * later batch names it). */
  dlqb__audit_tail after;
  if (a->tail_valid && a->tail_size == size && a->tail_ino == a->log_ino &&
      a->tail_dev == a->log_dev) {
    after = a->tail;
  } else {
    int got = dlqb__audit_last_line(a, size, &after);
    if (got < 0) {
      st = dlqb__audit_io_fail(err, "read", a->path);
      goto unlock;
    }
    /* A last line that is not a record (appended by someone else) fails
     * verify by itself; refusing to write after it would let anyone who
     * can append to the file stop every writer. The link then names the
     * zero hash, which verify reports too. */
    if (got == 0)
      dlqb_log_warn("audit_tail",
                    "audit log '%s' ends in a line that is not a record; "
                    "appending after it (verify will name it)",
                    a->path);
  }
  uint64_t seq = a->seq;
  char hash[DLQB_AUDIT_HASH_HEX + 1];
  memcpy(hash, a->last_hash, sizeof hash);
  a->len = 0;
  bool ok = true;
  const dlqb__audit_tail *link = &after;
  /* Only the batch's last record is signed: the hash chain binds the ones
   * before it to that signature, so a batch costs one signature however
   * large it is, and a batch cut short ends unsigned, which verify names. */
  size_t left = (a->started ? 0 : 1) + n + (end ? 1 : 0);
  if (!a->started)
    ok = dlqb__audit_add_record(a, time, DLQB__AUDIT_EV_CHAIN_START, NULL, --left == 0, link, &seq,
                                hash);
  if (!a->started) link = NULL;
  for (size_t i = 0; ok && i < n; i++, link = NULL)
    ok = dlqb__audit_add_record(a, time, dlqb_event_name(hops[i].event), &hops[i], --left == 0,
                                link, &seq, hash);
  if (ok && end)
    ok = dlqb__audit_add_record(a, time, DLQB__AUDIT_EV_CHAIN_END, NULL, --left == 0, link, &seq,
                                hash);
  if (!ok) {
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory writing the audit log");
    goto unlock;
  }
  if (a->len == 0) goto unlock;

  if (!dlqb_write_all(a->fd, a->buf, a->len) || fdatasync(a->fd) != 0) {
    st = dlqb__audit_io_fail(err, "write", a->path);
    goto undo;
  }
  if ((st = dlqb__audit_append_seal(a, seq, hash, time, end, err)) != DLQB_OK) goto undo;
  a->seq = seq;
  memcpy(a->last_hash, hash, sizeof hash);
  a->started = true;
  a->ended = end;
  memcpy(a->tail.chain, a->chain, sizeof a->tail.chain);
  a->tail.seq = seq;
  memcpy(a->tail.hash, hash, sizeof hash);
  a->tail_size = size + (off_t)a->len;
  a->tail_ino = a->log_ino;
  a->tail_dev = a->log_dev;
  a->tail_valid = true;
  publish_head(a, time);
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
      if (RAND_bytes(id, sizeof id) == 1) dlqb__audit_hex(id, sizeof id, a->chain);
      a->started = false;
      a->seq = 0;
      memcpy(a->last_hash, DLQB__AUDIT_ZERO_HASH, sizeof a->last_hash);
    }
  }
unlock:
  dlqb__audit_unlock_log(a);
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
  if (a->pipeline[0] != '\0') dlqb_log_set_pipeline(a->pipeline);
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
    atomic_store(&a->attempt_since_ms, dlqb_mono_ms());
    if (st == DLQB_OK) st = commit(a, a->batch, a->blen, false, &err);
    atomic_store(&a->attempt_since_ms, 0);
    pthread_mutex_lock(&a->mu);
    a->attempts++;
    bool was_ok = atomic_load(&a->ok);
    if (st == DLQB_OK) {
      a->blen = 0;
      atomic_store(&a->pending, a->qlen);
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
  if (cfg->audit.log[0] == '\0') return DLQB_OK;
  if (cfg->audit.key_file[0] == '\0')
    return dlqb_fail(err, DLQB_EINVAL, "audit_key_file is required when audit_log is set");
  dlqb_audit *a = calloc(1, sizeof *a);
  if (a == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  a->fd = -1;
  a->wake_fd = -1;
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->work, NULL);
  pthread_cond_init(&a->done, NULL);
  pthread_mutex_init(&a->head_mu, NULL);
  dlqb_status st = dlqb_audit_key_load(cfg->audit.key_file, &a->key, a->key_id, err);
  if (st != DLQB_OK) goto fail;
  if (!dlqb__audit_hasher_init(&a->hasher) || (a->ring = dlqb_audit_keyring_new()) == NULL) {
    st = dlqb_fail(err, DLQB_ENOMEM, "cannot set up sha-256 (openssl)");
    goto fail;
  }
  /* The private key holds the public one: a reference to it as public. */
  if ((st = dlqb__audit_keyring_put(a->ring, a->key, cfg->audit.key_file, false, err)) != DLQB_OK)
    goto fail;
  if (cfg->audit.public_keys[0] != '\0' &&
      (st = dlqb_audit_keyring_add(a->ring, cfg->audit.public_keys, err)) != DLQB_OK)
    goto fail;
  const dlqb__audit_pubkey *own = dlqb__audit_keyring_find(a->ring, a->key_id);
  if (own != NULL && own->revoked) {
    st = dlqb_fail(err, DLQB_EINVAL, "audit key file '%s' holds key %s, which is revoked in '%s'",
                   cfg->audit.key_file, a->key_id, cfg->audit.public_keys);
    goto fail;
  }
  unsigned char id[DLQB_AUDIT_CHAIN_HEX / 2];
  if (RAND_bytes(id, sizeof id) != 1) {
    st = dlqb_fail(err, DLQB_EIO, "cannot draw a random chain id (openssl)");
    goto fail;
  }
  dlqb__audit_hex(id, sizeof id, a->chain);
  memcpy(a->last_hash, DLQB__AUDIT_ZERO_HASH, sizeof a->last_hash);
  snprintf(a->path, sizeof a->path, "%s", cfg->audit.log);
  snprintf(a->seal_path, sizeof a->seal_path, "%s%s", a->path, DLQB_AUDIT_SEAL_SUFFIX);
  snprintf(a->rotating, sizeof a->rotating, "%s.rotating", a->path);
  dlqb__audit_writer_name(a->writer, writer != NULL && writer[0] ? writer : cfg->instance);
  a->rotate_bytes = cfg->audit.rotate_bytes;
  /* A daemon serving several pipelines has writers of each: say whose. */
  if (cfg->pipeline_count > 0)
    snprintf(a->pipeline, sizeof a->pipeline, "%s", cfg->pipelines[0].p.name);
  if (!dlqb__audit_reserve(&a->buf, &a->cap, 0, DLQB__AUDIT_BUF_INITIAL) ||
      !dlqb__audit_reserve(&a->sbuf, &a->scap, 0, 4096)) {
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    goto fail;
  }
  /* The log must at least open now: a wrong path or permission is a
   * configuration error, better reported at start than at the first hop. */
  off_t size;
  if ((st = dlqb__audit_lock_log(a, &size, err)) != DLQB_OK) goto fail;
  /* An absent seal reads as "nothing sealed"; create it so that a deleted
   * seal is noticed. */
  int sfd = dlqb__audit_open_or_create(a->seal_path, O_WRONLY);
  if (sfd >= 0) close(sfd);
  dlqb__audit_unlock_log(a);
  a->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (a->wake_fd < 0) {
    st = dlqb__audit_io_fail(err, "watch", a->path);
    goto fail;
  }
  /* The chain_start record, written now: a writer that cannot record
   * (a full disk, a lock held by a stopped process) must not be handed
   * anything to move, so that is the caller's error at once. */
  if ((st = commit(a, NULL, 0, false, err)) != DLQB_OK) goto fail;
  atomic_store(&a->ok, true);
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
    atomic_store(&a->pending, a->qlen + a->blen);
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

int dlqb_audit_healthy(const dlqb_audit *a) { return dlqb_audit_health(a, NULL, 0); }

bool dlqb_audit_health(const dlqb_audit *a, char *why, size_t len) {
  if (why != NULL && len > 0) why[0] = '\0';
  if (a == NULL) return true;
  dlqb_audit *m = (dlqb_audit *)a;
  long long since = atomic_load(&m->attempt_since_ms);
  long long stuck = since > 0 ? dlqb_mono_ms() - since : 0;
  if (stuck >= DLQB_AUDIT_STALL_MS) {
    if (why != NULL)
      snprintf(why, len,
               "audit log '%s': a write has been waiting for %lld s (a hung file "
               "server?)",
               m->path, stuck / 1000);
    return false;
  }
  if (atomic_load(&m->ok)) return true;
  if (why != NULL) {
    pthread_mutex_lock(&m->mu);
    snprintf(why, len, "%s", m->failure.msg[0] ? m->failure.msg : "audit log is not writable");
    pthread_mutex_unlock(&m->mu);
  }
  return false;
}

dlqb_status dlqb_audit_check(const dlqb_audit *a, dlqb_error *err) {
  char why[DLQB_ERROR_MAX];
  if (dlqb_audit_health(a, why, sizeof why)) return DLQB_OK;
  return dlqb_fail(err, DLQB_EIO, "%s", why);
}

size_t dlqb_audit_pending(const dlqb_audit *a) {
  return a == NULL ? 0 : atomic_load(&((dlqb_audit *)a)->pending);
}

void dlqb_audit_end(dlqb_audit *a) {
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
  if (a->started && !a->ended && a->hasher.ctx != NULL) {
    dlqb_error err;
    if (commit(a, NULL, 0, true, &err) != DLQB_OK)
      dlqb_log_warn("audit_close", "cannot write the chain_end record: %s", err.msg);
  }
}

dlqb_status dlqb_audit_anchor(dlqb_audit *a, char *buf, size_t *len, uint64_t *commits,
                              dlqb_error *err) {
  *len = 0;
  *commits = 0;
  if (a == NULL) return DLQB_OK;
  dlqb_audit_head h;
  pthread_mutex_lock(&a->head_mu);
  h = a->head;
  pthread_mutex_unlock(&a->head_mu);
  *commits = h.commits;
  if (!h.seq_known) return DLQB_OK;
  char now[DLQB_ISO_TIME_MAX];
  dlqb_iso_time(dlqb_now_ms(), now, sizeof now);
  /* The log's name, cut to ANCHOR_FILE_MAX bytes before escaping (a cut
   * character becomes '?'), so the line always fits its buffer. */
  char name[ANCHOR_FILE_MAX + 1], file[2 * ANCHOR_FILE_MAX + 1];
  const char *slash = strrchr(a->path, '/');
  const char *base = slash != NULL ? slash + 1 : a->path;
  size_t blen = strnlen(base, ANCHOR_FILE_MAX);
  memcpy(name, base, blen);
  name[blen] = '\0';
  dlqb__audit_escape(file, name);
  int n = snprintf(buf, DLQB_AUDIT_ANCHOR_MAX,
                   "{\"v\":%d,\"type\":\"anchor\",\"chain\":\"%s\",\"seq\":%" PRIu64
                   ",\"last_hash\":\"%s\",\"ended\":%s,\"writer\":\"%s\",\"key\":\"%s\","
                   "\"file\":\"%s\",\"file_id\":\"%s\",\"written\":\"%s\","
                   "\"time\":\"%s\"",
                   DLQB_AUDIT_VERSION, h.chain, h.seq, h.hash, h.ended ? "true" : "false",
                   a->writer, a->key_id, file, h.file_id, h.time, now);
  if (n < 0 || (size_t)n + DLQB__AUDIT_SUFFIX_LEN + 2 > DLQB_AUDIT_ANCHOR_MAX)
    return dlqb_fail(err, DLQB_EINVAL, "anchor line too long");
  char sig[DLQB_AUDIT_SIG_HEX + 1];
  buf[n] = '}';
  if (!dlqb__audit_sign(a->key, buf, (size_t)n + 1, sig))
    return dlqb_fail(err, DLQB_ENOMEM, "cannot sign the audit anchor (openssl)");
  n += snprintf(buf + n, DLQB_AUDIT_ANCHOR_MAX - (size_t)n, "%s%s\"}", DLQB__AUDIT_SIG_TAIL, sig);
  *len = (size_t)n;
  return DLQB_OK;
}

void dlqb_audit_close(dlqb_audit *a) {
  if (a == NULL) return;
  dlqb_audit_end(a);
  dlqb__audit_close_log(a);
  if (a->wake_fd >= 0) close(a->wake_fd);
  dlqb__audit_hasher_release(&a->hasher);
  dlqb_audit_keyring_free(a->ring);
  EVP_PKEY_free(a->key); /* OpenSSL cleanses the key material it frees */
  pthread_cond_destroy(&a->work);
  pthread_cond_destroy(&a->done);
  pthread_mutex_destroy(&a->mu);
  pthread_mutex_destroy(&a->head_mu);
  free(a->queue);
  free(a->batch);
  free(a->buf);
  free(a->sbuf);
  free(a);
}

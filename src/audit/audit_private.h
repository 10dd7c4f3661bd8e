/* What the files of src/audit/ share: the record format constants, the
 * hash and signature over a record's text, the key ring, the writer's state, and the functions one file
 * of the writer calls in another. Included only inside src/audit/ and by
 * the unit and fuzz tests. */
#ifndef DLQB_AUDIT_PRIVATE_H
#define DLQB_AUDIT_PRIVATE_H

#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "dlqb/audit.h"
#include "dlqb/config.h"
#include "dlqb/error.h"
#include "dlqb/hop.h"

/* ---- the format (record.c) ---------------------------------------------- */

/* A record or seal line is BODY + "}" (unsigned: a record inside a batch)
 * or BODY + SIG_TAIL + 128 hex + "\"}" (signed: the last record of a
 * batch, every seal line and file_start), where BODY starts with '{'. The
 * record's hash is the SHA-256 of BODY + "}" (the line as a JSON object
 * without its sig member), and the signature is Ed25519 over the same
 * bytes; the next record of the chain names the hash as its prev, so one
 * signature covers its whole batch. */
#define DLQB__AUDIT_SIG_TAIL     ",\"sig\":\""
#define DLQB__AUDIT_SIG_TAIL_LEN 8
#define DLQB__AUDIT_SUFFIX_LEN   (DLQB__AUDIT_SIG_TAIL_LEN + DLQB_AUDIT_SIG_HEX + 2)

/* The prev of a chain's first record. */
#define DLQB__AUDIT_ZERO_HASH "0000000000000000000000000000000000000000000000000000000000000000"

#define DLQB__AUDIT_EV_CHAIN_START "chain_start"
#define DLQB__AUDIT_EV_CHAIN_END   "chain_end"
#define DLQB__AUDIT_EV_FILE_START  "file_start"

/* A record is at most this long: every text field of a hop sanitised and
 * escaped (at most doubled) plus the fixed members. The batch buffer keeps
 * this much headroom, so it grows only when a batch is larger than any
 * before it, never per message. */
#define DLQB__AUDIT_RECORD_MAX 16384
/* A writer's name is cut to this many bytes (at a character boundary) before
 * escaping, so its escaped form (at most doubled) fits the writer buffer. */
#define DLQB__AUDIT_WRITER_MAX  255
#define DLQB__AUDIT_BUF_INITIAL (64 * 1024)

/* A SHA-256 context fetched once; each hash call reuses it, so hashing a
 * record allocates nothing. */
typedef struct {
  EVP_MD *md;
  EVP_MD_CTX *ctx;
} dlqb__audit_hasher;

/* False when OpenSSL fails (out of memory). */
bool dlqb__audit_hasher_init(dlqb__audit_hasher *h);
void dlqb__audit_hasher_release(dlqb__audit_hasher *h);

/* Writes the lower-case hex SHA-256 of body[0..len) + "}" into out (65
 * bytes). False when OpenSSL fails. */
bool dlqb__audit_hash_body(dlqb__audit_hasher *h, const char *body, size_t len, char *out);

/* The Ed25519 signature of msg[0..len) (BODY + "}") with key, as hex into
 * out (DLQB_AUDIT_SIG_HEX + 1 bytes). False when OpenSSL fails. */
bool dlqb__audit_sign(EVP_PKEY *key, const char *msg, size_t len, char *out);

/* True when sig (DLQB_AUDIT_SIG_HEX hex digits) is pub's signature of
 * msg[0..len). */
bool dlqb__audit_sig_ok(EVP_PKEY *pub, const char *msg, size_t len, const char *sig);

/* Writes in[0..n) as lower-case hex into out (2n + 1 bytes, NUL included). */
void dlqb__audit_hex(const unsigned char *in, size_t n, char *out);

/* True when s[0..n) is all lower-case hex digits. */
bool dlqb__audit_is_lower_hex(const char *s, size_t n);

/* Splits a line into its body and signature: true when the line starts
 * with '{' and ends in '}'; *body_len is then the length of BODY, and *sig
 * points at the 128 hex digits in line when it ends in
 * ,"sig":"<128 lower-case hex>"} (NULL when unsigned). */
bool dlqb__audit_split(const char *line, size_t len, size_t *body_len, const char **sig);

/* Constant-time comparison of two 64-digit hex hashes. */
bool dlqb__audit_hash_equal(const char *a, const char *b);

/* ---- keys (key.c) -------------------------------------------------------- */

typedef struct {
  char id[DLQB_AUDIT_KEY_ID_HEX + 1];
  EVP_PKEY *pub;
  bool revoked;
  char name[256]; /* the file it came from, for messages */
} dlqb__audit_pubkey;

struct dlqb_audit_keyring {
  dlqb__audit_pubkey *keys;
  size_t n, cap;
};

/* The key id of key (public or private): the first DLQB_AUDIT_KEY_ID_HEX
 * hex digits of the SHA-256 of its raw public key. */
bool dlqb__audit_key_id_of(EVP_PKEY *key, char *out);

/* The key with this id, NULL when the ring lacks it. */
const dlqb__audit_pubkey *dlqb__audit_keyring_find(const dlqb_audit_keyring *r, const char *id);

/* Adds pub (a reference is taken) under name; a key already there stays,
 * revoked when either says so. */
dlqb_status dlqb__audit_keyring_put(dlqb_audit_keyring *r, EVP_PKEY *pub, const char *name,
                                    bool revoked, dlqb_error *err);

/* ---- the seal format (seal.c) ------------------------------------------- */

/* What a seal line vouches for: where one chain stood after a batch. */
typedef struct {
  char chain[DLQB_AUDIT_CHAIN_HEX + 1];
  uint64_t seq;
  char last_hash[DLQB_AUDIT_HASH_HEX + 1];
  char key[DLQB_AUDIT_KEY_ID_HEX + 1]; /* "" when absent or not a key id */
  bool open;                           /* "ended":false: the chain had not ended at that batch */
} dlqb__audit_seal;

/* The one reader of seal lines, for the writer (compaction, rotation) and
 * the verifier. Reads line[0..len) (without its newline), never past len
 * and without needing a NUL: the writer reads the whole seal back as one
 * buffer. True when the line is one JSON object whose top-level "type" is
 * "seal", "chain" DLQB_AUDIT_CHAIN_HEX and "last_hash" DLQB_AUDIT_HASH_HEX
 * lower-case hex digits, and "seq" an integer from 0 to INT64_MAX - 1; it
 * reads them as json-c does (escapes decoded, a string ending at a NUL, a
 * member given twice counting by its last value, other members and nested
 * values skipped), so that the verifier, which parses the line with json-c
 * first, accepts what it always did. It does not check the line is valid
 * JSON beyond that, nor its signature (dlqb__audit_split and the key do);
 * "key" is read when it is DLQB_AUDIT_KEY_ID_HEX lower-case hex digits. Fills
 * *out only when true. Pure. */
bool dlqb__audit_seal_parse(const char *line, size_t len, dlqb__audit_seal *out);

/* The last line of the log file where a batch is appended: the batch's
 * first record names it (after_chain, after_seq, after_hash), which links
 * the chains of one file to each other (docs/audit.md, "Links between
 * chains"). chain is "" for a file_start line or an empty file (hash then
 * 64 zeros). */
typedef struct {
  char chain[DLQB_AUDIT_CHAIN_HEX + 1];
  uint64_t seq;
  char hash[DLQB_AUDIT_HASH_HEX + 1];
} dlqb__audit_tail;

/* ---- the writer's state (writer.c; the other files see its log half) ---- */

struct dlqb_audit {
  char path[DLQB_CONFIG_STR_MAX];
  char seal_path[DLQB_CONFIG_STR_MAX + 16];
  char rotating[DLQB_CONFIG_STR_MAX + 16];
  char writer[2 * DLQB__AUDIT_WRITER_MAX + 1]; /* JSON-escaped (dlqb__audit_writer_name) */
  char pipeline[DLQB_PIPELINE_NAME_MAX];       /* its thread's log lines name it; "" = none */
  long long rotate_bytes;
  int fd; /* the log, O_APPEND; -1 when closed */
  dlqb__audit_hasher hasher;
  EVP_PKEY *key; /* this writer's private key */
  char key_id[DLQB_AUDIT_KEY_ID_HEX + 1];
  /* Our own public key and the configured ones: the seal lines of other
   * writers that a rotation carries over are checked against these. */
  dlqb_audit_keyring *ring;
  char chain[DLQB_AUDIT_CHAIN_HEX + 1];
  /* The committed state of the chain: a record counts only once it was
   * written and synced, and its seal line appended. From open to close,
   * this and everything above belong to the writer thread. */
  bool started, ended;
  uint64_t seq;
  char last_hash[DLQB_AUDIT_HASH_HEX + 1];
  /* The log's last line after our last append, valid while the file is
   * still that size and inode (nobody else appended): saves reading it
   * back for every batch. */
  dlqb__audit_tail tail;
  bool tail_valid;
  off_t tail_size;
  ino_t tail_ino, log_ino; /* log_ino, log_dev: the locked file (lock_log) */
  dev_t tail_dev, log_dev;
  /* The head anchors publish (dlqb_audit_anchor): the committed chain
   * state and the file it is in, copied under head_mu after every commit
   * so that another thread can read it. */
  pthread_mutex_t head_mu;
  dlqb_audit_head head;
  ino_t head_ino; /* the file head.file_id is of (writer thread only) */
  dev_t head_dev;
  char *buf; /* the batch being written */
  size_t len, cap;
  char *sbuf; /* a seal line being built, or the seal read back (compaction) */
  size_t slen, scap;
  long long seal_compacted; /* the seal's size after our last compaction */

  /* ---- hand-over to the writer thread ---- */
  pthread_t thread;
  bool thread_running;
  pthread_mutex_t mu;
  pthread_cond_t work; /* hops queued, or closing */
  pthread_cond_t done; /* an attempt finished */
  dlqb_hop *queue;     /* submitted, not yet taken by the writer (mu) */
  size_t qlen, qcap;
  dlqb_hop *batch; /* the writer's batch: retried until written */
  size_t blen, bcap;
  uint64_t submitted;   /* tickets handed out (mu) */
  uint64_t attempts;    /* finished write attempts (mu) */
  uint64_t failed_upto; /* the last failed attempt covered tickets up to here (mu) */
  dlqb_error failure;   /* why it failed (mu) */
  dlqb_status failure_status;
  bool closing;             /* (mu) */
  _Atomic uint64_t durable; /* written and synced up to this ticket */
  atomic_bool ok;           /* the last attempt succeeded */
  /* When the attempt in progress started (dlqb_mono_ms), 0 between
   * attempts: an attempt stuck in the kernel (a hung NFS fsync) cannot be
   * interrupted, but health can see it. */
  _Atomic long long attempt_since_ms;
  _Atomic size_t pending; /* hops submitted and not yet written (queue + batch) */
  int wake_fd;            /* eventfd, signalled after every attempt; -1 if none */
};

/* ---- building lines (record.c) ------------------------------------------ */

/* Makes room for `more` bytes past len in *buf (starting at
 * DLQB__AUDIT_BUF_INITIAL, doubling). False when out of memory. */
bool dlqb__audit_reserve(char **buf, size_t *cap, size_t len, size_t more);

/* The JSON-escaped writer name for the records: name sanitised and cut to
 * DLQB__AUDIT_WRITER_MAX bytes without splitting a character, then
 * escaped. dst needs 2 * DLQB__AUDIT_WRITER_MAX + 1 bytes. Pure. */
void dlqb__audit_writer_name(char *dst, const char *name);

/* Appends s to a->buf; the caller reserved the room. */
void dlqb__audit_put(dlqb_audit *a, const char *s);

/* Escapes text for a JSON string: control bytes and invalid UTF-8 become
 * '?' first (dlqb_text_sanitize), so only '"' and '\\' need escaping and
 * the result is canonical. dst needs 2 * strlen(src) + 1 bytes. */
size_t dlqb__audit_escape(char *dst, const char *src);

/* Appends ,"key":"<value escaped>" to a->buf. */
void dlqb__audit_put_str(dlqb_audit *a, const char *key, const char *value);

/* Closes the record that starts at offset `start` of a->buf: hashes it
 * (into hash_out), signs it when `sign`, and writes the end and the
 * newline. */
bool dlqb__audit_end_record(dlqb_audit *a, size_t start, bool sign, char *hash_out);

/* Appends one chain record (hop NULL for chain_start and chain_end) to
 * a->buf, signed when `sign` (the last of its batch); seq and hash are the
 * tentative chain state, advanced here. False when out of memory or
 * OpenSSL fails. */
bool dlqb__audit_add_record(dlqb_audit *a, const char *time, const char *event, const dlqb_hop *hop,
                            bool sign, const dlqb__audit_tail *after, uint64_t *seq, char *hash);

/* ---- the log file (logfile.c) ------------------------------------------- */

/* DLQB_EIO "cannot WHAT audit log 'PATH': <errno text>", from errno. */
dlqb_status dlqb__audit_io_fail(dlqb_error *err, const char *what, const char *path);

/* Opens path with flags (O_CLOEXEC added); when it does not exist, creates
 * it (mode 0600) and syncs its directory. -1 with errno on failure. */
int dlqb__audit_open_or_create(const char *path, int flags);

/* fsync of the directory holding path (best effort). */
void dlqb__audit_fsync_dir_of(const char *path);

/* Locks the file now at a->path, reopening when it was rotated or replaced
 * since we opened it (then our descriptor is a stale inode), and completes
 * a rotation that crashed between its renames. Waits at most 2 s for
 * another holder of the lock (then DLQB_EIO, saying so). On success the
 * lock is held and *size is the file's size. */
dlqb_status dlqb__audit_lock_log(dlqb_audit *a, off_t *size, dlqb_error *err);
void dlqb__audit_unlock_log(dlqb_audit *a);

/* The last line of the locked log of `size` bytes (ending in a newline:
 * cut_unfinished_line ran): its hash, and its chain and seq when it is a
 * chain record. 1 when read (size 0: the zero hash), 0 when the line is
 * not a record (t then holds the zero hash), -1 when it cannot be read
 * (errno). */
int dlqb__audit_last_line(dlqb_audit *a, off_t size, dlqb__audit_tail *t);
void dlqb__audit_close_log(dlqb_audit *a);

/* A file (the log or its seal) that does not end in a newline ends in a
 * line some writer never finished: cuts it off (synced), updating *size. */
dlqb_status dlqb__audit_cut_unfinished_line(int fd, const char *path, off_t *size, dlqb_error *err);

/* Renames the full, locked log of `size` bytes to <log>.<UTC time>[-N] and
 * puts a new log in its place that starts with a file_start link. On
 * return the lock and descriptor are dropped (the caller locks the new
 * file). A failure leaves the old file in place, logged, and is not fatal. */
void dlqb__audit_rotate(dlqb_audit *a, off_t size, const char *time);

/* ---- the seal file (seal.c) --------------------------------------------- */

/* Appends ,"chains":[...] to the file_start record being built in a->buf:
 * where every chain stood by the seal. False when out of memory. */
bool dlqb__audit_put_sealed_chains(dlqb_audit *a);

/* Replaces the seal with the latest line of each chain (dropping the
 * chains that ended when drop_ended). Returns the new size, or -1 when it
 * could not (the old seal then stays, which is still correct). */
long long dlqb__audit_compact_seal(dlqb_audit *a, bool drop_ended);

/* Appends our seal line for (seq, hash) to the seal file, with the log
 * locked; synced only when `ended`. Compacts the seal now and then. */
dlqb_status dlqb__audit_append_seal(dlqb_audit *a, uint64_t seq, const char *hash, const char *time,
                                    bool ended, dlqb_error *err);

#endif

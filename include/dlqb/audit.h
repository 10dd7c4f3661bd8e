/* The tamper-evident audit trail: one JSON line per hop, each naming the
 * SHA-256 of the previous record of the same writer's chain; the last
 * record of every batch (and every seal line) carries an Ed25519
 * signature of the writer's own key, so that the records verify with
 * public keys alone. Records are written and fsync'd before the originals
 * of their hops are acked, one fsync per batch (group commit): the pipe
 * hands hops over with dlqb_audit_submit and acks an original only once
 * dlqb_audit_durable has reached the ticket its hop was given.
 *
 * Several writers (bridge instances, ops commands) may append to one log;
 * each has its own chain and its own key, and `dlq-bridge audit verify`
 * checks them all. Never records payloads or credentials. */
#ifndef DLQB_AUDIT_H
#define DLQB_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/config.h"
#include "dlqb/error.h"
#include "dlqb/hop.h"

typedef struct dlqb_audit dlqb_audit;

/* Opens the log at cfg->audit.log with the Ed25519 private key in
 * cfg->audit.key_file (refused when group or others may read it) and the
 * public keys in cfg->audit.public_keys (optional: with them the writer
 * checks the other writers' seal lines it carries over at a rotation;
 * without, it carries over only its own and those it cannot check stay
 * for verify to judge), and writes the new chain's
 * chain_start record: when that cannot be written (a full disk, a lock
 * held by a stopped process) the open fails with DLQB_EIO naming the file
 * and the errno, so that a writer that cannot record never moves anything.
 * When cfg->audit.log is "" audit is off: *out is NULL and DLQB_OK is
 * returned, and every other function accepts the NULL handle and does
 * nothing. `writer` names the writer in its records (the bridge instance,
 * or "replay@host:pid"); it is cut to 255 bytes. */
dlqb_status dlqb_audit_open(const dlqb_config *cfg, const char *writer, dlqb_audit **out,
                            dlqb_error *err);

/* Hands n hops (copied) to the writer thread and returns at once with the
 * ticket that covers them. The writer writes and syncs everything handed
 * over since its last sync as one batch; when that fails it keeps the
 * batch and retries every 500 ms by itself (logging once when it starts
 * failing and once when it recovers), so hops are never submitted twice.
 * Thread-safe. Fails only for lack of memory (nothing queued then). With
 * n == 0 the ticket is that of the last submission. NULL a: ticket 0. */
dlqb_status dlqb_audit_submit(dlqb_audit *a, const dlqb_hop *const *hops, size_t n,
                              uint64_t *ticket, dlqb_error *err);

/* Every hop with a ticket up to this one is written and synced: their
 * originals may be acked. UINT64_MAX for a NULL handle (audit off).
 * Lock-free; any thread. */
uint64_t dlqb_audit_durable(const dlqb_audit *a);

/* A descriptor that polls readable after each write attempt of the writer
 * (an eventfd); dlqb_audit_clear_wake resets it. For one event loop to
 * sleep on the socket and the audit trail at once. -1 for NULL. */
int dlqb_audit_wake_fd(const dlqb_audit *a);
void dlqb_audit_clear_wake(const dlqb_audit *a);

/* Blocks until the ticket is durable (DLQB_OK) or a write attempt that
 * covered it failed (its status and message; the hops stay queued and are
 * retried, so wait again rather than submit again). */
dlqb_status dlqb_audit_wait(dlqb_audit *a, uint64_t ticket, dlqb_error *err);

/* Submit, then wait: for callers outside an event loop. */
dlqb_status dlqb_audit_record(dlqb_audit *a, const dlqb_hop *const *hops, size_t n,
                              dlqb_error *err);

/* A write attempt in progress for this long (stuck in the kernel: a hung
 * NFS fsync cannot be interrupted) makes the writer unhealthy. */
#define DLQB_AUDIT_STALL_MS 5000

/* True when the last write attempt succeeded and none has been in
 * progress for DLQB_AUDIT_STALL_MS (for /healthz, and for the movers, which
 * take no new work while it is false). Any thread. */
int dlqb_audit_healthy(const dlqb_audit *a);

/* dlqb_audit_healthy, and when false why (one line naming the file, into
 * why[0..len), may be NULL): the last failure's message, or the stall. */
bool dlqb_audit_health(const dlqb_audit *a, char *why, size_t len);

/* DLQB_OK when healthy, else DLQB_EIO with dlqb_audit_health's reason. */
dlqb_status dlqb_audit_check(const dlqb_audit *a, dlqb_error *err);

/* Hops handed over and not yet written (for /metrics). Movers take no new
 * work while the writer is unhealthy, so this stays within the windows of
 * the pipes that feed it, however long an outage lasts. 0 for NULL. */
size_t dlqb_audit_pending(const dlqb_audit *a);

/* Lets the writer finish what was handed over (unless the log is failing:
 * then what is left was never acked and is redelivered), writes the
 * chain_end record (best effort: a log that cannot be written then simply
 * shows the chain open), then frees. NULL-safe. */
void dlqb_audit_close(dlqb_audit *a);

/* Lets the writer finish what was handed over and writes chain_end, as
 * dlqb_audit_close does, but keeps the handle (its key and head) so that a
 * last anchor of the ended chain can still be made; close then only
 * frees. After it, submit and wait fail. NULL-safe; idempotent. */
void dlqb_audit_end(dlqb_audit *a);

/* ---- format and keys (docs/audit.md is the reference) ------------------ */

#define DLQB_AUDIT_VERSION     2
#define DLQB_AUDIT_HASH_HEX    64  /* SHA-256 of a record, lower-case hex */
#define DLQB_AUDIT_SIG_HEX     128 /* an Ed25519 signature, lower-case hex */
#define DLQB_AUDIT_CHAIN_HEX   32  /* 128 random bits per writer start */
#define DLQB_AUDIT_KEY_ID_HEX  16  /* SHA-256 of the raw public key, cut */
#define DLQB_AUDIT_SEAL_SUFFIX ".seal"
/* Rotated files are named <log>.<YYYYmmddTHHMMSS.mmmZ>[-N]: sorting the
 * names sorts them oldest first. */
#define DLQB_AUDIT_ROTATED_INFIX "."

/* ---- anchors: the head a writer publishes off the host (docs/audit.md) --
 * The audit layer never talks to the broker: it exposes its committed head
 * as a signed anchor line, and the anchor publisher (src/amqp/anchor.c)
 * appends it to the stream dsr.audit.anchors. */

#define DLQB_AUDIT_ANCHOR_MAX 2048 /* an anchor line is shorter than this */

/* The committed state of the writer's chain: seq of its last record
 * (records = seq + 1), that record's hash, whether it is chain_end, and
 * file_id, the hash of the first line of the log file holding it (a
 * rotation keeps a file's first line, so it names the rotated file too).
 * commits counts commits, so a publisher sees whether anything changed. */
typedef struct {
  char chain[DLQB_AUDIT_CHAIN_HEX + 1];
  uint64_t seq;
  bool seq_known;
  char hash[DLQB_AUDIT_HASH_HEX + 1];
  bool ended;
  char file_id[DLQB_AUDIT_HASH_HEX + 1];
  char time[40]; /* when the head's batch was written */
  uint64_t commits;
} dlqb_audit_head;

/* The head's signed anchor line (no newline) into buf (DLQB_AUDIT_ANCHOR_MAX
 * bytes), its length in *len (0: nothing committed yet, or a NULL handle),
 * and the head's commits count in *commits. Any thread; does not wait for
 * the writer thread (the head is copied under a mutex of its own).
 * DLQB_ENOMEM when OpenSSL fails. */
dlqb_status dlqb_audit_anchor(dlqb_audit *a, char *buf, size_t *len, uint64_t *commits,
                              dlqb_error *err);

struct evp_pkey_st; /* OpenSSL's EVP_PKEY */

/* Reads a writer's Ed25519 private key (PEM, as `openssl genpkey
 * -algorithm ed25519` writes it) and its key id (DLQB_AUDIT_KEY_ID_HEX + 1
 * bytes). Refused (DLQB_EINVAL) when it is not a regular file, group or
 * others have any permission on it (st_mode & 077), or it is not such a
 * key. Before the key is parsed, the process stops being dumpable
 * (RLIMIT_CORE 0 and PR_SET_DUMPABLE 0): no core dump or same-user ptrace
 * can carry the key away. *out is the caller's (EVP_PKEY_free). */
dlqb_status dlqb_audit_key_load(const char *path, struct evp_pkey_st **out, char *key_id,
                                dlqb_error *err);

/* The public keys a verifier trusts, by key id. */
typedef struct dlqb_audit_keyring dlqb_audit_keyring;

dlqb_audit_keyring *dlqb_audit_keyring_new(void); /* NULL when out of memory */
void dlqb_audit_keyring_free(dlqb_audit_keyring *r);

/* Adds the Ed25519 public keys (PEM) at path: one file, or every *.pem in
 * a directory (at least one). A file named *.pem.revoked holds a revoked
 * key: a record it signed fails verification, naming the key. A file
 * holding a private key is refused (DLQB_EINVAL): a verifier needs no
 * secret. DLQB_EINVAL also for a missing path or a file that is not such
 * a key; DLQB_EIO when it cannot be read. */
dlqb_status dlqb_audit_keyring_add(dlqb_audit_keyring *r, const char *path, dlqb_error *err);
size_t dlqb_audit_keyring_size(const dlqb_audit_keyring *r);

/* ---- verification: pure over lines (fuzzable), see src/audit/verify.c - */

typedef struct dlqb_audit_verifier dlqb_audit_verifier;

#define DLQB_AUDIT_NEEDLE_MAX 320

typedef struct {
  unsigned long files;
  unsigned long records; /* chain records, file_start links excluded */
  unsigned long chains;
  unsigned long chains_ended; /* with a chain_end: the writer closed cleanly */
  unsigned long sealed;       /* chains the seal vouched for */
  unsigned long rotations;    /* file_start links checked */
  int partial;                /* started at a rotation (--partial) */
  int anchors_given;          /* anchors were fed (even none) */
  unsigned long anchors;      /* anchor messages checked */
  unsigned long anchored;     /* chains the anchors vouch for */
  unsigned long archived;     /* --partial: anchored chains in files before the first given */
  unsigned long long beyond_anchors; /* records newer than their chain's last anchor */
  unsigned long anchors_ignored; /* stream messages that are not anchors signed by a given key */
  int seal_checked;
} dlqb_audit_summary;

/* A verifier trusting the keys of ring (borrowed: it must outlive the
 * verifier). partial: accept a first file that begins with a file_start
 * link (older files archived away) and take the chain states it carries
 * as given. NULL when out of memory. */
dlqb_audit_verifier *dlqb_audit_verifier_new(const dlqb_audit_keyring *ring, int partial);
void dlqb_audit_verifier_free(dlqb_audit_verifier *v);

/* Feeds one line of the seal file (without its newline); call for every
 * seal line before the first log line. A writer appends a line per batch,
 * so a chain may have many: the latest counts, and a chain's seq never
 * goes back. err: "seal: line N: ...". */
dlqb_status dlqb_audit_verifier_seal_line(dlqb_audit_verifier *v, const char *line, size_t len,
                                          dlqb_error *err);

/* Feeds one anchor (a message of dsr.audit.anchors, oldest first); call
 * for every anchor before the first log line. Each is a signed line like a
 * seal line (docs/audit.md, "Anchors"); a chain's highest seq counts. At
 * finish, a chain the files hold less of than its anchor is reported first,
 * naming what is missing: a cut tail, a deleted chain, or the deleted file
 * the anchor names (by its first line). err: "anchors: line N: ...". */
dlqb_status dlqb_audit_verifier_anchor_line(dlqb_audit_verifier *v, const char *line, size_t len,
                                            dlqb_error *err);

/* Says anchors were given (even none: an empty stream vouches for nothing). */
void dlqb_audit_verifier_begin_anchors(dlqb_audit_verifier *v);

/* Says a seal was given (even an empty one): then a chain with hops and no
 * seal line is reported at the end. feed_file calls it before the seal's
 * lines; the seal_line calls imply it. */
void dlqb_audit_verifier_begin_seal(dlqb_audit_verifier *v);

/* Starts the next log file, oldest first; name is used in messages (copied). */
void dlqb_audit_verifier_begin_file(dlqb_audit_verifier *v, const char *name);

/* Feeds one log line without its newline. `complete` is false for a last
 * line that had no newline (a torn write or a cut file). On the first
 * problem returns DLQB_EINVAL with err = "NAME: line N: what". After a
 * failure the verifier accepts nothing more. */
dlqb_status dlqb_audit_verifier_line(dlqb_audit_verifier *v, const char *line, size_t len,
                                     int complete, dlqb_error *err);

/* Ends the input: checks that every sealed chain reached its seal (tail
 * truncation), that every chain ends in a signed record (a batch cut
 * short), and, with a seal given, that every chain with hops has a seal
 * line or a rotation's word (an emptied seal); fills *sum. */
dlqb_status dlqb_audit_verifier_finish(dlqb_audit_verifier *v, dlqb_audit_summary *sum,
                                       dlqb_error *err);

/* Sees each log line the verifier accepted (without its newline). A line
 * accepted now may still be condemned later (a cut tail shows only at the
 * end), so a visitor collects and acts only once verification returned
 * DLQB_OK. Returns false to stop with DLQB_ENOMEM. */
typedef bool (*dlqb_audit_visit_fn)(void *ctx, const char *line, size_t len);

/* Reads and verifies files (oldest first) against seal_path (NULL: no
 * seal check), showing each accepted line to visit (may be NULL).
 * DLQB_EINVAL: tampering, err names file and line; DLQB_EIO: a file cannot
 * be read. */
dlqb_status dlqb_audit_verify_files(const dlqb_audit_keyring *ring, const char *const *files,
                                    size_t nfiles, const char *seal_path, int partial,
                                    dlqb_audit_visit_fn visit, void *visit_ctx,
                                    dlqb_audit_summary *sum, dlqb_error *err);

/* Lines held in memory (the anchors read from the stream): line[i] is
 * len[i] bytes, without a newline. */
typedef struct {
  char **line;
  size_t *len;
  size_t n, cap;
} dlqb_audit_lines;

/* Appends a copy of line[0..len); DLQB_ENOMEM when out of memory. */
dlqb_status dlqb_audit_lines_add(dlqb_audit_lines *l, const char *line, size_t len,
                                 dlqb_error *err);
void dlqb_audit_lines_free(dlqb_audit_lines *l); /* frees the lines; *l is empty again */

/* dlqb_audit_verify_files, with the anchors read from the stream (oldest
 * first; NULL: no anchor check) fed before the seal. */
dlqb_status dlqb_audit_verify_anchored(const dlqb_audit_keyring *ring, const char *const *files,
                                       size_t nfiles, const char *seal_path, int partial,
                                       const dlqb_audit_lines *anchors, dlqb_audit_visit_fn visit,
                                       void *visit_ctx, dlqb_audit_summary *sum, dlqb_error *err);

/* One log line as a JSON object (a new json-c reference: json_object_put
 * it), NULL when the line is not one. For lines the verifier accepted. */
struct json_object;
struct json_object *dlqb_audit_record_parse(const char *line, size_t len);

/* The string member key of a parsed record, "" when absent or not a string. */
const char *dlqb_audit_record_str(struct json_object *rec, const char *key);

/* Whether a parsed record belongs to the pipeline called name: a record
 * naming a pipeline (member "pipeline", written when the config file has
 * `pipelines`) to that one only; a record naming none (written without
 * `pipelines`) to the default pipeline only (is_default: name is
 * dlqb_pipeline_is_default's). */
bool dlqb_audit_record_in_pipeline(struct json_object *rec, const char *name, bool is_default);

/* Which hop records `audit show` lists: those of one request_id and/or
 * message_id (NULL: any; both set: both must match). A record's request_id
 * member holds its pipeline's first identity field (dsr: request_id;
 * redaction: item_id). With a pipeline set (dlqb_audit_filter_pipeline),
 * only that pipeline's records. */
typedef struct {
  const char *request_id, *message_id;
  const char *pipeline; /* NULL: any pipeline's */
  bool pipeline_default;
  /* `"request_id":"ID"` (or message_id) as a record holds it byte for
   * byte; a line without it cannot match and is not parsed. Empty when the
   * ID has a character the log escapes ('"' or '\\'). */
  char needle[DLQB_AUDIT_NEEDLE_MAX];
  size_t needle_len;
} dlqb_audit_filter;

/* ids are borrowed: they must outlive the filter. */
void dlqb_audit_filter_init(dlqb_audit_filter *f, const char *request_id, const char *message_id);

/* Only the records of pipeline name (borrowed; dlqb_audit_record_in_pipeline). */
void dlqb_audit_filter_pipeline(dlqb_audit_filter *f, const char *name, bool is_default);

/* True when the log line (a verified record, without its newline) is a hop
 * of the filter's request and message. With neither set, nothing matches. */
bool dlqb_audit_filter_match(const dlqb_audit_filter *f, const char *line, size_t len);

/* Lists the files of the log at path, oldest first: its rotated siblings
 * (sorted by name), then path itself when it exists. *out is malloc'd, each
 * string too; free with dlqb_audit_files_free. */
dlqb_status dlqb_audit_list_files(const char *path, char ***out, size_t *n, dlqb_error *err);
void dlqb_audit_files_free(char **files, size_t n);

#endif

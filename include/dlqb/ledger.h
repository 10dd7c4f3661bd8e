/* The completion ledger: which identities workers have recorded as done
 * in a pipeline's completion stream (dsr.completed). An identity is the
 * pair of the pipeline profile's fields[0] and fields[1] headers (dsr:
 * request_id and source_system, hence the parameter names below; each
 * pipeline has its own stream, so the same pair in another pipeline's
 * ledger never counts). replay reads it once at start so that it never
 * re-runs a completed task.
 *
 * Anyone who may publish to the default exchange can append to the stream,
 * so an entry counts only when its AMQP user_id property (which RabbitMQ
 * refuses unless it is the publishing connection's user) names one of the
 * completion_writers setting's users. The others are counted as
 * unverified and never make a task complete.
 *
 * Three parts: a set of pairs (pure, unit-tested), an optional cache file
 * of the set, and a reader that fills it from the stream over its own
 * connection (a stream consumer on the ops command's channel would leave
 * stray deliveries behind for the pipe). */
#ifndef DLQB_LEDGER_H
#define DLQB_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/config.h"
#include "dlqb/error.h"

typedef struct dlqb_ledger dlqb_ledger;

/* An empty set; NULL when out of memory. Free with dlqb_ledger_free. */
dlqb_ledger *dlqb_ledger_new(void);
void dlqb_ledger_free(dlqb_ledger *l); /* NULL-safe */

/* Adds the pair (copied); adding it again changes nothing. */
dlqb_status dlqb_ledger_add(dlqb_ledger *l, const char *request_id, const char *source_system,
                            dlqb_error *err);

bool dlqb_ledger_contains(const dlqb_ledger *l, const char *request_id, const char *source_system);

/* A completion without a known time. */
#define DLQB_LEDGER_NO_TIME INT64_MAX

/* As dlqb_ledger_add, with the completion's time (epoch ms; the entry's
 * AMQP timestamp property, DLQB_LEDGER_NO_TIME when it has none): a pair
 * added again keeps the earliest time it was given (a duplicate entry,
 * at-least-once, is the same completion written again). */
dlqb_status dlqb_ledger_add_at(dlqb_ledger *l, const char *request_id, const char *source_system,
                               int64_t at_ms, dlqb_error *err);

/* The pair's earliest completion time; false when the pair is absent or
 * none of its entries had a time. */
bool dlqb_ledger_completed_at(const dlqb_ledger *l, const char *request_id,
                              const char *source_system, int64_t *at_ms);

/* Distinct pairs held. */
size_t dlqb_ledger_size(const dlqb_ledger *l);

/* Empties the set (its capacity stays). */
void dlqb_ledger_clear(dlqb_ledger *l);

/* Calls fn for every pair held, in no particular order (its time:
 * dlqb_ledger_completed_at). */
void dlqb_ledger_each(const dlqb_ledger *l,
                      void (*fn)(void *ctx, const char *request_id, const char *source_system),
                      void *ctx);

/* ---- the cache (src/os/ledger_cache.c) ---------------------------------
 * A file holding the set as read up to one of replay's marker entries, and
 * where that marker is in the stream, so that the next replay reads only
 * the entries after it. The marker is what makes it safe: a cache is used
 * only when the entry at its offset is still that very marker (unique per
 * run), so a stream that was deleted and declared again, cut by retention
 * or belongs to another broker is read whole instead. The cache also names
 * the completion writers it was built under: the set holds only their
 * entries, so under any other list it is read whole again (a writer taken
 * off the list must stop counting at once). */

#define DLQB_LEDGER_MARKER_MAX 64

typedef struct {
  char marker[DLQB_LEDGER_MARKER_MAX]; /* the marker's text */
  int64_t offset;                      /* its offset in the stream */
  uint64_t unverified;                 /* entries before it not from a completion writer */
} dlqb_ledger_mark;

/* The bytes of a cache file for l as of mark, built trusting `writers`
 * (dlqb_config.completion_writers; *out is malloc'd; the caller frees it).
 * The format (docs/runbook.md): seven text lines (a title with the format
 * version, the writers, the marker, the offset, the pair count, the
 * unverified count, a SHA-256 of the pairs), an empty line, then each pair
 * as request_id NUL source_system NUL. */
dlqb_status dlqb_ledger_cache_encode(const dlqb_ledger *l, const dlqb_ledger_mark *mark,
                                     const char *writers, char **out, size_t *len, dlqb_error *err);

/* Adds the pairs of a cache file's bytes to l and sets *mark. DLQB_EINVAL
 * with the reason when the bytes are not one whole, intact cache (torn,
 * edited, another version) or were built under other writers than
 * `writers`; l may then hold some of its pairs. */
dlqb_status dlqb_ledger_cache_decode(const char *buf, size_t len, const char *writers,
                                     dlqb_ledger *l, dlqb_ledger_mark *mark, dlqb_error *err);

/* Reads the cache file at path, built under `writers`, into l and *mark;
 * *found is false (and l untouched) when there is none. Refuses a file that
 * is not a regular file owned by us, or that group or others may write:
 * whoever can write the cache decides which tasks replay treats as
 * complete. */
dlqb_status dlqb_ledger_cache_read(const char *path, const char *writers, dlqb_ledger *l,
                                   dlqb_ledger_mark *mark, bool *found, dlqb_error *err);

/* Writes the cache file at path (mode 0600, replaced atomically). */
dlqb_status dlqb_ledger_cache_write(const char *path, const char *writers, const dlqb_ledger *l,
                                    const dlqb_ledger_mark *mark, dlqb_error *err);

/* ---- the reader ---------------------------------------------------------- */

/* What became of the cache in dlqb_ledger_load. */
typedef enum {
  DLQB_LEDGER_CACHE_OFF,     /* no cache file configured */
  DLQB_LEDGER_CACHE_USED,    /* read, and only the entries after its marker read from the stream */
  DLQB_LEDGER_CACHE_CREATED, /* there was none: the whole stream read */
  DLQB_LEDGER_CACHE_REBUILT  /* unusable or not matching the stream: the whole stream read */
} dlqb_ledger_cache_state;

/* What dlqb_ledger_load read. */
typedef struct {
  size_t entries;    /* stream messages read (those after the cache's marker when it was used) */
  size_t ignored;    /* messages without both identity headers (replay's markers) */
  size_t unverified; /* completions not from a completion writer: not counted (the cache's too) */
  size_t cached;     /* pairs taken from the cache */
  dlqb_ledger_cache_state cache;
  bool cache_saved; /* the cache file was (re)written for the next run */
} dlqb_ledger_stats;

/* Fills l with every completion in the stream `stream` (dsr.completed),
 * keyed by the identity of the profile of the pipeline cfg serves (its
 * first, dlqb_config_pipeline),
 * whose user_id is one of cfg->ledger.completion_writers, on a connection of its
 * own (as broker, NULL: cfg->broker, dlqb_config_broker; closed before
 * returning). The
 * end: it first appends a marker entry (header x-dlqb-ledger-marker, no
 * request_id, so readers ignore it) and waits for its confirm, then reads
 * up to the marker, so every completion confirmed before the call is
 * included. (The stream's message count from a passive declare lags behind
 * recent appends and cannot mark the end.) Needs write permission on the
 * stream.
 *
 * With cache_path (non-empty), the set is taken from that cache when it
 * matches the stream and only the entries after its marker are read; the
 * cache is then rewritten as of the new marker. A cache that cannot be
 * read, written or used costs a warning in the log and a whole read,
 * never the replay.
 *
 * A missing stream is DLQB_EBROKER; a stream that stops delivering for
 * idle_ms before the marker is DLQB_ETIMEOUT, because a replay must not run
 * on a partial ledger. */
dlqb_status dlqb_ledger_load(const dlqb_config *cfg, const dlqb_broker_conf *broker,
                             const char *stream, const char *cache_path, dlqb_ledger *l,
                             long idle_ms, dlqb_ledger_stats *stats, dlqb_error *err);

/* As dlqb_ledger_load without a cache, and the pairs of the entries that
 * are not from a completion writer go to `unverified` (`audit report` says
 * which requests have one: it makes nothing complete, but it is worth a
 * look). */
dlqb_status dlqb_ledger_load_split(const dlqb_config *cfg, const char *stream, dlqb_ledger *l,
                                   dlqb_ledger *unverified, long idle_ms, dlqb_ledger_stats *stats,
                                   dlqb_error *err);

/* As dlqb_ledger_load, but writes nothing (no marker, no cache file) and
 * so needs no write permission: for a dry run, which only lists. Without a
 * marker the end is the first quiet_ms without an entry, so on a ledger
 * being appended to it may miss the newest completions (a dry run then
 * says "would replay" for a task the replay skips). The cache, when there
 * is one, is read, not rewritten. */
dlqb_status dlqb_ledger_peek(const dlqb_config *cfg, const dlqb_broker_conf *broker,
                             const char *stream, const char *cache_path, dlqb_ledger *l,
                             long quiet_ms, dlqb_ledger_stats *stats, dlqb_error *err);

#endif

/* The catalog on the broker (dlqb/catalog.h has the fold and the
 * invariant): the events the pipe appends for each hop into or out of a
 * catalogued queue, and the reader that folds the pipeline's catalog
 * stream from a checkpoint up to a marker of its own, then answers a look
 * from the fold and says how fresh it is and whether the queue's depth
 * agrees. */
#ifndef DLQB_CATALOG_STREAM_H
#define DLQB_CATALOG_STREAM_H

#include <amqp.h>
#include <stdbool.h>
#include <stdint.h>

#include "dlqb/catalog.h"
#include "dlqb/config.h"
#include "dlqb/link.h"
#include "dlqb/pipeline.h"

/* Where a pipe's hops are catalogued: the stream, the queues it covers,
 * the profile whose identity headers an "in" event keeps, and whose events
 * a reader believes. */
typedef struct {
  char stream[DLQB_QNAME_MAX];
  char queues[DLQB_CATALOG_QUEUES_MAX][DLQB_QNAME_MAX];
  size_t nqueues;
  dlqb_profile profile;
  /* The writers believed (catalog_writers, "a,b"): an event counts only
   * when its user_id, which the broker refuses unless it is the
   * publishing connection's user, is one of them. "" = any event. Anyone
   * who may publish to the default exchange (every worker) can append to
   * the stream: without a list, a balanced pair of forged events misleads
   * a look until the next verifying pass. */
  char writers[DLQB_CONFIG_STR_MAX];
} dlqb_catalog_target;

/* The target of pipeline p: its catalog stream, its DLQ and review queue
 * (writers ""). */
void dlqb_catalog_target_of(const dlqb_pipeline *p, dlqb_catalog_target *t);
/* True when queue is one t catalogues. */
bool dlqb_catalog_target_has(const dlqb_catalog_target *t, const char *queue);
/* True when a reader of t believes the stream message props: t names no
 * writers, or props' user_id is one of them. */
bool dlqb_catalog_trusts(const dlqb_catalog_target *t, const amqp_basic_properties_t *props);

/* Publishes one message of the catalog (an event, a marker, a snapshot's
 * chunk) to stream on channel ch of link, with the link's user as its
 * user_id, so a reader can tell who wrote it (dlqb_catalog_trusts). The
 * confirm is the caller's to await. */
dlqb_status dlqb_catalog_send(dlqb_link *link, amqp_channel_t ch, const char *stream,
                              const amqp_basic_properties_t *props, amqp_bytes_t body,
                              dlqb_error *err);

/* An event's properties, built into caller storage; valid while the
 * properties it was built from are (it points into them). */
#define DLQB_CATALOG_EVENT_HEADERS 48
typedef struct {
  amqp_basic_properties_t props;
  amqp_table_entry_t h[DLQB_CATALOG_EVENT_HEADERS];
  char deaths[256]; /* the copy's x-death as the item view reads it */
} dlqb_catalog_event;

/* What an "in" carries for x-death: the item view's text of every entry and
 * the time of the first (a stream is not given x-death itself: a forged
 * one can nest anything). */
#define DLQB_H_CATALOG_DEATHS    "x-dlqb-catalog-deaths"
#define DLQB_H_CATALOG_XDEATH_AT "x-dlqb-catalog-xdeath-at" /* epoch ms */

/* "in": copy (the properties the copy is published with) went into queue.
 * Keeps the message_id, the timestamp and the headers a look reads (the
 * item view's, the profile's identity) whose values are plain scalars
 * (strings cut to 2 KiB, integers, booleans, times; never a decimal, which
 * crashes a stream's channel on RabbitMQ 3.10.8, nor a table or array:
 * the item view reads none of those as a value), and x-death as the item
 * view reads it (DLQB_H_CATALOG_DEATHS, _XDEATH_AT). */
void dlqb_catalog_event_in(const dlqb_catalog_target *t, const char *queue,
                           const amqp_basic_properties_t *copy, dlqb_catalog_event *ev);
/* The item view of an "in" event's properties: what dlqb_item_read_as
 * reads from the copy itself (unit.catalog_event holds them equal). */
void dlqb_catalog_event_item(const amqp_basic_properties_t *props, const dlqb_profile *profile,
                             dlqb_item *it);

/* "out": message_id left queue. */
void dlqb_catalog_event_out(const char *queue, const char *message_id, dlqb_catalog_event *ev);

/* ---- reading ------------------------------------------------------------ */

/* How a look was answered: printed by every command that looks. */
typedef struct {
  bool from_catalog;             /* false: a pass over the queue (--scan, or the reason below) */
  char why_scan[DLQB_ERROR_MAX]; /* a look that fell back to a pass: why ("" when asked) */
  int64_t as_of_ms;              /* the catalog holds every event confirmed before this */
  uint64_t count;                /* items the catalog holds for the queue */
  uint64_t depth;                /* the queue's depth, read right after */
  bool differs;                  /* depth != count: changed outside the bridge (or in flight) */
  uint64_t unmatched;            /* "out"s of items it never knew since the last verification */
  bool verified;                 /* a verifying pass has run */
  int64_t verified_at;           /* when the latest began (epoch ms) */
  uint64_t corrections;
  bool from_checkpoint; /* the fold started from a checkpoint */
  bool from_snapshot;   /* the fold started from a snapshot in the stream (it was cut) */
  /* A pass asked for (--scan): the catalog's count was compared with what
   * the pass read (count; depth is then the items read), differs says. */
  bool compared;
  /* Events about the queue from writers not in catalog_writers, passed
   * over by this reader's fold (since its checkpoint). */
  uint64_t untrusted;
  uint64_t events;     /* events folded by this look */
  double read_seconds; /* the read's wall time */
} dlqb_catalog_view;

typedef struct dlqb_catalog_reader dlqb_catalog_reader;

/* A reader of pipeline p's catalog, with its checkpoint at checkpoint
 * ("" or NULL: none; a look then folds the whole stream), believing the
 * events of writers ("a,b"; "" or NULL: anyone's). NULL when out of
 * memory. Safe to share between threads (each call locks it). */
dlqb_catalog_reader *dlqb_catalog_reader_new(const dlqb_pipeline *p, const char *checkpoint,
                                             const char *writers);
/* The reader a command of cfg uses for p: cfg's checkpoint path
 * (dlqb_catalog_checkpoint_path) and catalog_writers. */
dlqb_catalog_reader *dlqb_catalog_reader_of(const dlqb_config *cfg, const dlqb_pipeline *p);
void dlqb_catalog_reader_free(dlqb_catalog_reader *r); /* NULL-safe */

/* Brings the fold up to now on a link of its own as broker (the caller's
 * dlqb_config_broker: the console's is the signed-in person's): appends a
 * marker to the stream and folds every event up to it (from where the last refresh ended, or the checkpoint, or
 * the first event), then reads queue's depth and fills *view. When the
 * catalog's count agrees with the depth (looking twice when it does not:
 * a move in flight differs for a moment), calls fn for each item of queue,
 * in order, until fn returns false (fn may be NULL); when it still
 * differs, fn is not called and view->differs says so (the caller reads
 * the queue itself).
 * Writes the checkpoint when the fold moved far enough from it.
 * DLQB_ENOTFOUND when the stream does not exist (not declared: the caller
 * falls back to a pass); else a broker error. */
dlqb_status dlqb_catalog_look(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                              const char *queue, bool (*fn)(void *ctx, const dlqb_item *it),
                              void *ctx, dlqb_catalog_view *view, dlqb_error *err);

/* The same fold, with fn given the reader's catalog itself (the verifying
 * pass compares with it), under the reader's lock. */
dlqb_status dlqb_catalog_with(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                              void (*fn)(void *ctx, const dlqb_catalog *c), void *ctx,
                              dlqb_error *err);

/* The checkpoint path a command uses: cfg->catalog.checkpoint ("": none).
 * A pipeline other than the default one has its own, made when the config
 * was read (dlqb_config_pipeline_paths), so p is not needed to tell them
 * apart. */
void dlqb_catalog_checkpoint_path(const dlqb_config *cfg, const dlqb_pipeline *p, char *out,
                                  size_t cap);

/* Publishes a marker to stream on channel (open, in confirm mode, its
 * first publish) of link and waits up to wait_ms for its confirm: whether
 * the stream takes events now. On RabbitMQ 4.0.5 the first publish to a
 * stream declared a moment ago can crash the channel (no confirm, no
 * close): DLQB_ETIMEOUT, and that channel is dead. */
dlqb_status dlqb_catalog_probe(dlqb_link *link, unsigned channel, const char *stream, long wait_ms,
                               dlqb_error *err);

/* Waits (at most wait_ms) until stream confirms a probe, each try on a
 * connection of its own as broker: what declare and run do after declaring
 * it, so no mover's channel is the first to write to a stream whose leader
 * the broker does not know yet. DLQB_ETIMEOUT when it never did. */
dlqb_status dlqb_catalog_wait_ready(const dlqb_broker_conf *broker, const char *stream,
                                    long wait_ms, dlqb_error *err);

/* Appends events on a link of its own as broker, each confirmed (the verifying
 * pass's corrections and its result). ev[i] are built as above. */
dlqb_status dlqb_catalog_append(const dlqb_broker_conf *broker, const char *stream,
                                const dlqb_catalog_event *ev, size_t n, dlqb_error *err);

/* A "verified" event: a verifying pass that began at at_ms found n items
 * in queue. */
void dlqb_catalog_event_verified(const char *queue, int64_t at_ms, uint64_t n, char *numbuf,
                                 size_t numcap, dlqb_catalog_event *ev);

/* ---- verifying ----------------------------------------------------------- */

/* What a verifying pass found. */
typedef struct {
  int64_t at_ms;    /* when its pass began */
  uint64_t present; /* items the pass read */
  uint64_t catalog; /* items the catalog held before */
  uint64_t added;   /* in the queue, not in the catalog: an "in" appended for each */
  uint64_t removed; /* in the catalog, not in the queue: an "out" appended for each */
  bool complete;    /* the pass read the whole queue (else nothing was removed) */
  /* Most other consumers on the queue at the pass's start or end. A pass
   * reads only what is ready, never what another consumer holds unacked
   * (a worker, a move, a look reading the queue itself), so with any the
   * pass is not complete: nothing is taken for gone. */
  uint32_t others;
} dlqb_catalog_verify_result;

/* Passes over queue (holding every item, as --scan), compares what it holds
 * with r's fold and appends the corrections (an "in" with the item's own
 * properties for each one the catalog lacks, an "out" for each one it
 * holds that the queue does not) and a "verified" event, so every reader's
 * fold agrees with the queue as the pass found it. Moves during the pass
 * are told apart by folding again before correcting: an item a mover took
 * or added meanwhile is not corrected twice. Connects as broker (NULL:
 * cfg's own, dlqb_config_broker). */
dlqb_status dlqb_catalog_verify(dlqb_catalog_reader *r, const dlqb_config *cfg,
                                const dlqb_broker_conf *broker, const char *queue,
                                dlqb_catalog_verify_result *out, dlqb_error *err);

/* ---- snapshots in the stream ------------------------------------------------
 * So that the stream can have retention (docs/architecture.md, "The
 * catalog"), the fold is written into it now and then: a snapshot is the
 * fold's entries as of a marker the writer folded to (its "as-of"
 * offset), in chunks ("snap": up to DLQB_CATALOG_CHUNK_ITEMS items of one
 * queue, dlqb/catalog.h has the bytes), then one "snap-end" with the
 * totals (chunks, and per queue the items, the unmatched "out"s and the
 * verifications). Every message names its snapshot (id, as-of offset,
 * chunk index), so two writers at once interleave harmlessly, and one
 * killed before its "snap-end" left a snapshot no reader uses. A reader
 * on a stream whose first offset is 0 folds it from there and ignores
 * snapshots; on one cut by retention it folds the newest complete
 * snapshot, then every other event after its as-of offset (moves during
 * the snapshot included, in stream order). */
#define DLQB_H_CATALOG_SNAP       "x-dlqb-catalog-snap"       /* the snapshot's id */
#define DLQB_H_CATALOG_SNAP_OF    "x-dlqb-catalog-snap-of"    /* its as-of offset */
#define DLQB_H_CATALOG_SNAP_CHUNK "x-dlqb-catalog-snap-chunk" /* index; "snap-end": chunks */
/* A chunk's items: DLQB_H_CATALOG_COUNT. */

typedef struct {
  char id[DLQB_CATALOG_MARKER_MAX];
  int64_t as_of;   /* offset of the marker its writer had folded to */
  int64_t first;   /* offset of its first chunk (or its end, when empty) */
  int64_t end;     /* offset of its "snap-end" */
  uint64_t chunks; /* chunks written */
  uint64_t items[DLQB_CATALOG_QUEUES_MAX];
  uint64_t unmatched[DLQB_CATALOG_QUEUES_MAX];
  dlqb_catalog_qstate st[DLQB_CATALOG_QUEUES_MAX];
} dlqb_catalog_snapinfo;

/* Finds the newest complete snapshot among the messages fed to it in
 * stream order (pure: no I/O). Holds at most DLQB_CATALOG_SNAP_OPEN
 * snapshots being written at once (the oldest begun gives way); a chunk
 * out of order, malformed, or of a queue not catalogued breaks its
 * snapshot, and is counted in `garbled` (with the offset of the first), so
 * the reader can warn without logging anything of the message. */
#define DLQB_CATALOG_SNAP_OPEN 8
typedef struct {
  dlqb_catalog_snapinfo info;
  uint64_t next; /* the chunk index expected next */
  bool used, broken;
} dlqb_catalog_snapslot;
typedef struct {
  const dlqb_catalog_target *t;
  dlqb_catalog_snapslot open[DLQB_CATALOG_SNAP_OPEN];
  bool have_best;
  dlqb_catalog_snapinfo best; /* the newest complete: by its as-of offset */
  uint64_t garbled;
  int64_t garbled_at;
} dlqb_catalog_snapfind;

void dlqb_catalog_snapfind_init(dlqb_catalog_snapfind *f, const dlqb_catalog_target *t);
/* One message of the stream at offset (any message: those not of a
 * snapshot, or from a writer f's target does not trust, are passed over).
 * body is the message's body. */
void dlqb_catalog_snapfind_feed(dlqb_catalog_snapfind *f, int64_t offset,
                                const amqp_basic_properties_t *props, amqp_bytes_t body);
/* True when props are a snapshot's message ("snap" or "snap-end"). */
bool dlqb_catalog_is_snapshot(const amqp_basic_properties_t *props);

/* Folds one event ("in", "out", "verified"; anything else is passed over)
 * into c, read under t's profile, when t trusts its writer (else it is
 * only counted: dlqb_catalog_untrusted); it is scratch storage. */
dlqb_status dlqb_catalog_fold_event(dlqb_catalog *c, const dlqb_catalog_target *t,
                                    const amqp_basic_properties_t *props, dlqb_item *it,
                                    dlqb_error *err);

/* Where a whole fold reads its messages: read() calls fn for every
 * message from offset `from` (-1: the stream's first) in order, up to
 * (not including) the end the source was made for (the reader's marker),
 * until fn sets *stop; *first is the offset of the first message it was
 * given by the stream (the end's own when nothing came before it). */
typedef dlqb_status (*dlqb_catalog_msg_fn)(void *ctx, int64_t offset,
                                           const amqp_basic_properties_t *props, amqp_bytes_t body,
                                           bool *stop, dlqb_error *err);
typedef struct {
  dlqb_status (*read)(void *src, int64_t from, dlqb_catalog_msg_fn fn, void *ctx, int64_t *first,
                      dlqb_error *err);
  void *src;
} dlqb_catalog_source;

/* How a whole fold went. */
typedef struct {
  int64_t first;      /* the stream's first offset */
  bool from_snapshot; /* it was cut, and the fold began at snap */
  bool cut;           /* it was cut and holds no usable snapshot: c is empty */
  dlqb_catalog_snapinfo snap;
  uint64_t events; /* events folded (snapshot chunks not counted) */
} dlqb_catalog_whole;

/* Folds the stream src reads into c (cleared first) for target t: from
 * its first event when that is offset 0; else from the newest complete
 * snapshot f finds whose as-of marker the stream still holds (its chunks,
 * then every other event after the as-of offset); else nothing, and
 * out->cut says so. f (initialised here) is left with what it found. */
dlqb_status dlqb_catalog_fold_whole(dlqb_catalog *c, const dlqb_catalog_target *t,
                                    const dlqb_catalog_source *src, dlqb_catalog_snapfind *f,
                                    dlqb_catalog_whole *out, dlqb_error *err);

/* Writes a snapshot of r's fold, brought up to now first, into the
 * stream on a link of its own as broker: each chunk streamed out of the
 * fold as it is built (memory: one chunk), then the "snap-end", all
 * confirmed. *out says what was written. When the stream was cut and
 * holds no complete snapshot, the fold cannot be brought up to now: then
 * see dlqb_catalog_snapshot_rebuild. */
dlqb_status dlqb_catalog_snapshot(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                                  dlqb_catalog_snapinfo *out, dlqb_error *err);
/* True when r's last fold found the stream cut with no complete snapshot. */
bool dlqb_catalog_reader_cut(const dlqb_catalog_reader *r);
/* For a stream so cut: starts r from an empty fold at the marker its last
 * fold ended at, verifies every queue of r against the queue itself (a
 * pass over each, as catalog verify: each item gets its "in" again), then
 * writes a snapshot of the result. DLQB_EINVAL when r was not cut; a
 * queue not read whole writes no snapshot (DLQB_EIO). */
dlqb_status dlqb_catalog_snapshot_rebuild(dlqb_catalog_reader *r, const dlqb_config *cfg,
                                          const dlqb_broker_conf *broker,
                                          dlqb_catalog_snapinfo *out, dlqb_error *err);
/* How far r's fold has moved since the newest complete snapshot it has
 * seen (offsets, or since offset 0 when it has seen none: a fold from a
 * checkpoint has not read the older ones), and the items it holds: the
 * daemon writes a snapshot when the first is well past the second. */
void dlqb_catalog_reader_growth(dlqb_catalog_reader *r, uint64_t *since, uint64_t *items);

/* One line saying how a look was answered, for the end of a command's
 * output: "catalog as of 03:35:55Z: 1200 items, as the queue (0.1 s)"
 * (", from a snapshot: the stream was cut" when it was), "read the queue: catalog 1200, queue 1203 (catalog verify
 * corrects it)" (changed outside the bridge; 79 columns after the
 * "dlq-bridge: " before it, at a million), "read the queue: no catalog
 * (why)" or "read the queue (--scan)". Returns buf. */
char *dlqb_catalog_view_text(const dlqb_catalog_view *v, char *buf, size_t len);
/* "ignored 2 catalog events not from catalog_writers" when the look passed
 * over any (v->untrusted), else NULL. */
char *dlqb_catalog_untrusted_text(const dlqb_catalog_view *v, char *buf, size_t len);

#endif

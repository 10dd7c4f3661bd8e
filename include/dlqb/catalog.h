/* The catalog of a pipeline's DLQ and review queue: what is in them, as the
 * parties that put items there and take them out have told it, so that a
 * look (inspect, stats, the console's pages, the drain's canary looks)
 * answers without a pass that holds the queue.
 *
 * The queue stays the truth. Every mover (the router, the ops move pass
 * under replay, escalate, resolve, edit, the drain and the console, the SLA
 * escalator) runs on the pipe (dlqb/pipe.h), and the pipe appends one
 * catalog event for every hop that puts an item into a catalogued queue
 * ("in": the copy's message_id and the headers a look reads) or takes one
 * out ("out": the message_id), to the pipeline's catalog stream
 * (`dsr.catalog`) on the broker. A reader folds the stream, from a
 * checkpoint of an earlier fold when it has one (dlqb_catalog_encode), up
 * to a marker it appends itself, so the fold covers every event confirmed
 * before the look began.
 *
 * The order, and the invariant it keeps (docs/architecture.md, "The
 * catalog"):
 *   - an "in" is published before its copy, and the original is acked only
 *     once both the copy and the "in" are confirmed;
 *   - an "out" is published only after the original's ack has been sent.
 * So a crash at any point leaves the catalog claiming at most items that
 * are gone (an "in" whose copy never arrived, an ack whose "out" was never
 * sent), never missing an item its own movers put in: count >= depth less
 * what arrived from outside. Whatever makes them differ (an item taken or
 * added behind the bridge's back, such a crash) shows as depth != count,
 * which every look checks and says, and a verifying pass
 * (`dlq-bridge catalog verify`, the daemon's periodic check) corrects with
 * events of its own. A change that keeps the depth (one item taken and
 * another added outside between two checks) is found by the daemon's
 * periodic full verification.
 *
 * This file is the fold (pure: no I/O, no clock): entries keyed by queue
 * and message_id, several for a message_id that is in a queue more than
 * once, visited in the order they went in (the queue's order for what the
 * bridge put there). */
#ifndef DLQB_CATALOG_H
#define DLQB_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"
#include "dlqb/item.h"

/* The queues one catalog holds: a pipeline's DLQ and review queue. */
#define DLQB_CATALOG_QUEUES_MAX 2
#define DLQB_CATALOG_MARKER_MAX 64

/* Event headers (on the catalog stream's messages). */
#define DLQB_H_CATALOG_OP     "x-dlqb-catalog"       /* "in", "out", "mark", "verified" */
#define DLQB_H_CATALOG_QUEUE  "x-dlqb-catalog-queue" /* the queue the item went into / left */
#define DLQB_H_CATALOG_MARKER "x-dlqb-catalog-marker"
#define DLQB_H_CATALOG_COUNT  "x-dlqb-catalog-count" /* "verified": items found by the pass */
#define DLQB_H_CATALOG_AT     "x-dlqb-catalog-at"    /* "verified": when its pass began (ms) */

typedef struct dlqb_catalog dlqb_catalog;

/* A per-queue summary of the verifications folded. */
typedef struct {
  bool verified;        /* a verifying pass has run */
  int64_t verified_at;  /* when the latest began (epoch ms) */
  uint64_t verified_n;  /* items it found */
  uint64_t corrections; /* events verifying passes appended (in or out) */
} dlqb_catalog_qstate;

/* An empty catalog of the given queues (at most DLQB_CATALOG_QUEUES_MAX;
 * names copied); NULL when out of memory. */
dlqb_catalog *dlqb_catalog_new(const char *const *queues, size_t nqueues);
void dlqb_catalog_free(dlqb_catalog *c); /* NULL-safe */
void dlqb_catalog_clear(dlqb_catalog *c);

/* Index of queue in c, or -1 when c does not catalog it. */
int dlqb_catalog_queue(const dlqb_catalog *c, const char *queue);

/* it went into queue q at stream offset `offset` (offsets ascend). */
dlqb_status dlqb_catalog_in(dlqb_catalog *c, int q, int64_t offset, const dlqb_item *it,
                            dlqb_error *err);

/* message_id left queue q: its earliest entry there goes. False when the
 * catalog has none (it was taken before it was known: counted, see
 * dlqb_catalog_unmatched). */
bool dlqb_catalog_out(dlqb_catalog *c, int q, const char *message_id);

/* A verifying pass's result. */
void dlqb_catalog_verified(dlqb_catalog *c, int q, int64_t at_ms, uint64_t found);
void dlqb_catalog_correction(dlqb_catalog *c, int q);

/* An event about q from a writer the reader does not trust (not in
 * catalog_writers): not folded, only counted. The count is of this fold's
 * reading (a checkpoint does not carry it). */
void dlqb_catalog_untrusted_event(dlqb_catalog *c, int q);
uint64_t dlqb_catalog_untrusted(const dlqb_catalog *c, int q);

uint64_t dlqb_catalog_count(const dlqb_catalog *c, int q);
uint64_t dlqb_catalog_unmatched(const dlqb_catalog *c, int q);
const dlqb_catalog_qstate *dlqb_catalog_state(const dlqb_catalog *c, int q);
/* Entries held, live or not (what a checkpoint drops): for compaction. */
size_t dlqb_catalog_entries(const dlqb_catalog *c);

/* Number of live entries of message_id in q. */
uint64_t dlqb_catalog_has(const dlqb_catalog *c, int q, const char *message_id);

/* Calls fn for each live entry of q in the order they went in, until fn
 * returns false. it is valid during the call only. */
void dlqb_catalog_each(const dlqb_catalog *c, int q, bool (*fn)(void *ctx, const dlqb_item *it),
                       void *ctx);

/* Where a fold stands in its stream: the offset of the marker it was read
 * up to, and that marker's text (a checkpoint is used only while the
 * stream still holds that very marker at that offset). */
typedef struct {
  int64_t offset;
  char marker[DLQB_CATALOG_MARKER_MAX];
} dlqb_catalog_mark;

/* A checkpoint's bytes (*out malloc'd, the caller frees): a title line with
 * the format version, the queue names, the profile's identity names
 * (`ident`, e.g. "request_id source_system": the fold's identity is read
 * under it), the mark, then each live entry packed, in order. */
dlqb_status dlqb_catalog_encode(const dlqb_catalog *c, const dlqb_catalog_mark *mark,
                                const char *ident, char **out, size_t *len, dlqb_error *err);

/* Replaces c's content with a checkpoint's and sets *mark. DLQB_EINVAL when
 * the bytes are not a checkpoint of the same queues and ident. */
dlqb_status dlqb_catalog_decode(dlqb_catalog *c, const char *buf, size_t len, const char *ident,
                                dlqb_catalog_mark *mark, dlqb_error *err);
/* The same, taking buf (malloc'd) as the fold's own storage on success, so
 * a checkpoint of a million items is held once, not twice; on failure buf
 * stays the caller's. */
dlqb_status dlqb_catalog_decode_take(dlqb_catalog *c, char *buf, size_t len, const char *ident,
                                     dlqb_catalog_mark *mark, dlqb_error *err);

/* ---- snapshot chunks ----------------------------------------------------
 * A snapshot of the fold written into the stream (dlqb/catalog_stream.h
 * has its messages) carries its items in chunks: a chunk's body is up to
 * DLQB_CATALOG_CHUNK_ITEMS items of one queue, each a 4-byte little-endian
 * length and the item packed as a checkpoint packs it (so one decoder
 * serves both, and an item comes back exactly as the fold held it, its
 * group included). A chunk is at most DLQB_CATALOG_CHUNK_BYTES. */
#define DLQB_CATALOG_CHUNK_ITEMS 1000
#define DLQB_CATALOG_CHUNK_BYTES (8u << 20)

/* Calls emit for each chunk of q's live entries, in order, at most
 * per_chunk items each (1..DLQB_CATALOG_CHUNK_ITEMS), from one buffer
 * reused for every chunk (a million items cost one chunk of memory, not
 * a copy of the fold): body is valid during the call only. Stops at the
 * first status emit returns that is not DLQB_OK and returns it. No call
 * when q holds nothing. */
dlqb_status dlqb_catalog_chunks(const dlqb_catalog *c, int q, size_t per_chunk,
                                dlqb_status (*emit)(void *ctx, const unsigned char *body,
                                                    size_t len, size_t items, dlqb_error *err),
                                void *ctx, dlqb_error *err);

/* Whether body (len bytes, from anywhere) is a well-formed chunk: every
 * length within the body and every item a packed item, at most
 * DLQB_CATALOG_CHUNK_ITEMS of them. Sets *items. Reads nothing outside
 * body. */
bool dlqb_catalog_chunk_ok(const unsigned char *body, size_t len, size_t *items);

/* Appends a well-formed chunk's items to q, in order, after what c holds.
 * DLQB_EINVAL (c unchanged) when it is not well-formed. */
dlqb_status dlqb_catalog_chunk_load(dlqb_catalog *c, int q, const unsigned char *body, size_t len,
                                    dlqb_error *err);

/* What a snapshot says of a queue besides its items (its last message
 * carries it): the "out"s it never matched and the verifications. */
void dlqb_catalog_set_state(dlqb_catalog *c, int q, uint64_t unmatched,
                            const dlqb_catalog_qstate *s);

#endif

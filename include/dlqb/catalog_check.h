/* The daemon's check of the catalog (dlqb/catalog.h): a thread of `run`
 * that every catalog_check_interval compares the depth of the DLQ and the
 * review queue with the catalog's count (one fold of the new events and a
 * passive declare: cheap), and runs a verifying pass (dlqb_catalog_verify)
 * on a queue whose counts differed at two checks in a row (a move in
 * flight differs at one), or once catalog_verify_every has passed since
 * its last one. So a change behind the bridge's back that changes a
 * queue's depth is corrected within two intervals and one pass over the
 * queue, and one that keeps it (an item taken and another added between
 * two checks) within catalog_verify_every and a pass.
 *
 * It also keeps the stream ready for retention (dlqb/catalog_stream.h,
 * snapshots): after its checks it writes a snapshot of the fold when
 * dlqb_catalog_snapshot_due says so, and when the stream was cut with no
 * snapshot left to fold from, it rebuilds the catalog from the queues and
 * snapshots that (dlqb_catalog_snapshot_rebuild). */
#ifndef DLQB_CATALOG_CHECK_H
#define DLQB_CATALOG_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "dlqb/catalog_stream.h"
#include "dlqb/config.h"
#include "dlqb/error.h"

typedef struct dlqb_catalog_check dlqb_catalog_check;

/* Starts the thread for the pipeline cfg serves (its first), on reader
 * (that pipeline's; shared, it locks itself), its first check one
 * interval after the start; *out NULL (and DLQB_OK) when
 * catalog_check_interval is 0. cfg and reader outlive it. */
dlqb_status dlqb_catalog_check_start(const dlqb_config *cfg, dlqb_catalog_reader *reader,
                                     dlqb_catalog_check **out, dlqb_error *err);
/* Whether a snapshot is due: the fold has moved `since` offsets past the
 * newest complete snapshot it has read, and holds `items`; age_ms since
 * this daemon last wrote one (or started). Due when since is above
 * max(DLQB_CATALOG_SNAPSHOT_FLOOR, 2 x items): a snapshot costs about what
 * `items` events do, so they stay at most about a third of what the stream
 * holds, and a reader of a cut stream folds at most the snapshot and
 * twice as many events; the floor keeps a small catalog from being
 * snapshotted every few moves. And at least every
 * DLQB_CATALOG_SNAPSHOT_EVERY_MS when anything came since, so that a
 * max-age policy of a few days never finds the newest snapshot older than
 * it on a quiet stream. */
#define DLQB_CATALOG_SNAPSHOT_FLOOR    10000
#define DLQB_CATALOG_SNAPSHOT_EVERY_MS (24LL * 3600 * 1000)
bool dlqb_catalog_snapshot_due(uint64_t since, uint64_t items, long long age_ms);

/* Stops and joins it (a pass under way ends early). NULL-safe. */
void dlqb_catalog_check_stop(dlqb_catalog_check *c);

#endif

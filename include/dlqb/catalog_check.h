/* The daemon's check of the catalog (dlqb/catalog.h): a thread of `run`
 * that every catalog_check_interval compares the depth of the DLQ and the
 * review queue with the catalog's count (one fold of the new events and a
 * passive declare: cheap), and runs a verifying pass (dlqb_catalog_verify)
 * on a queue whose counts differed at two checks in a row (a move in
 * flight differs at one), or once catalog_verify_every has passed since
 * its last one. So a change behind the bridge's back that changes a
 * queue's depth is corrected within two intervals and one pass over the
 * queue, and one that keeps it (an item taken and another added between
 * two checks) within catalog_verify_every and a pass. */
#ifndef DLQB_CATALOG_CHECK_H
#define DLQB_CATALOG_CHECK_H

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
/* Stops and joins it (a pass under way ends early). NULL-safe. */
void dlqb_catalog_check_stop(dlqb_catalog_check *c);

#endif

/* The completion ledger: which (request_id, source_system) pairs workers
 * have recorded as done in the stream dsr.completed. replay reads it once
 * at start so that it never re-runs a completed task.
 *
 * Two halves: a set of pairs (pure, unit-tested) and a reader that fills it
 * from the stream over its own connection (a stream consumer on the ops
 * command's channel would leave stray deliveries behind for the pipe). */
#ifndef DLQB_LEDGER_H
#define DLQB_LEDGER_H

#include <stdbool.h>
#include <stddef.h>

#include "dlqb/config.h"
#include "dlqb/error.h"

typedef struct dlqb_ledger dlqb_ledger;

/* An empty set; NULL when out of memory. Free with dlqb_ledger_free. */
dlqb_ledger *dlqb_ledger_new(void);
void dlqb_ledger_free(dlqb_ledger *l); /* NULL-safe */

/* Adds the pair (copied); adding it again changes nothing. */
dlqb_status dlqb_ledger_add(dlqb_ledger *l, const char *request_id, const char *source_system,
                            dlqb_error *err);

bool dlqb_ledger_contains(const dlqb_ledger *l, const char *request_id,
                          const char *source_system);

/* Distinct pairs held. */
size_t dlqb_ledger_size(const dlqb_ledger *l);

/* What dlqb_ledger_load read. */
typedef struct {
  size_t entries;  /* stream messages read */
  size_t ignored;  /* messages without request_id or source_system */
} dlqb_ledger_stats;

/* Reads every entry of the stream `stream` (dsr.completed) from its first
 * offset into l, on a connection of its own (opened with cfg, closed before
 * returning). The end: it first appends a marker entry (header
 * x-dlqb-ledger-marker, no request_id, so readers ignore it) and waits for
 * its confirm, then reads up to the marker, so every completion confirmed
 * before the call is included. (The stream's message count from a passive
 * declare lags behind recent appends and cannot mark the end.) Needs write
 * permission on the stream. A missing stream is DLQB_EBROKER; a stream that
 * stops delivering for idle_ms before the marker is DLQB_ETIMEOUT, because
 * a replay must not run on a partial ledger. */
dlqb_status dlqb_ledger_load(const dlqb_config *cfg, const char *stream, dlqb_ledger *l,
                             long idle_ms, dlqb_ledger_stats *stats, dlqb_error *err);

#endif

/* Reconciling a queue with the audit trail (`audit reconcile`): which
 * messages the trail says are in dsr.dlq.manual (or compliance_review),
 * against the ones the queue holds. Pure, over message ids and verified log lines; the command
 * reads the queue (a scan that holds every item) and the log.
 *
 * Per message_id it keeps: copies present in the queue snapshot; the net
 * count of recorded hops into the DLQ minus hops out of it; how many hops
 * into it were recorded; and the last such hop's time, event and writer.
 * An id that is not in the snapshot is forgotten once its net count is
 * back to zero, so memory follows what is (or should be) in the DLQ, not
 * the length of the log. In memory only the counts, 20 bytes an id (a
 * salted 64-bit digest of it); the texts go to a temporary file and are
 * read back for the entries asked for (each_notable: what reconcile
 * reports), so a million items take about 30 MiB. */
#ifndef DLQB_RECONCILE_H
#define DLQB_RECONCILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"

typedef struct dlqb_reconcile dlqb_reconcile;

typedef struct {
  const char *message_id;
  const char *request_id; /* from the queue item, else from the last hop into the DLQ */
  int present;            /* copies in the queue snapshot */
  long net;               /* recorded into the DLQ minus recorded out of it */
  long entered;           /* recorded hops into the DLQ */
  char last_time[32];     /* of the last recorded hop into the DLQ ("" when none) */
  char last_event[24];
  char last_writer[96];
  char last_out_time[32]; /* of the last recorded hop out of the DLQ ("" when none) */
} dlqb_reconcile_entry;

#define DLQB_RECONCILE_QUEUE_MAX 256

/* For dsr.dlq.manual. NULL when out of memory. */
dlqb_reconcile *dlqb_reconcile_new(void);
/* For another queue (compliance_review); "the DLQ" below then means it.
 * NULL when out of memory or the name is too long. */
dlqb_reconcile *dlqb_reconcile_new_for(const char *queue);
void dlqb_reconcile_free(dlqb_reconcile *r); /* NULL-safe */

/* Makes room for n ids at once (the queue's depth, read before its
 * snapshot), so that taking them never grows the table: a growth holds the
 * old table and the new one for a moment, 2.5 times the memory (at
 * 1,000,000 items 50 MiB against 25 MiB). More than
 * DLQB_RECONCILE_RESERVE_MAX ids reserves that many; the table still grows
 * past it as needed. False when out of memory (the table is as before). */
#define DLQB_RECONCILE_RESERVE_MAX (UINT64_C(1) << 24)
bool dlqb_reconcile_reserve(dlqb_reconcile *r, uint64_t n);

/* One item of the queue snapshot. */
dlqb_status dlqb_reconcile_present(dlqb_reconcile *r, const char *message_id,
                                   const char *request_id, dlqb_error *err);

/* One verified log line (without its newline), in log order. Lines that
 * are not a hop into or out of the queue (a hop from it into itself is
 * neither), or carry no message_id, change nothing. False when out of memory. */
bool dlqb_reconcile_line(dlqb_reconcile *r, const char *line, size_t len);

/* When the queue was read (ISO UTC, as records write times): a hop in
 * recorded at or after it does not make an item expected (before the
 * lines). */
void dlqb_reconcile_read_at(dlqb_reconcile *r, const char *iso);

/* Every entry held, in no particular order (an entry and its strings are
 * valid during the call only); the texts of each are read
 * back from the temporary file, so this holds them all at once: for tests
 * and small queues. False when that file cannot be read. */
bool dlqb_reconcile_each(const dlqb_reconcile *r,
                         void (*fn)(void *ctx, const dlqb_reconcile_entry *e), void *ctx);

/* The entries a reconciliation may report, alone: none recorded in it but
 * present (unrecorded), recorded but not present (missing, or recorded
 * after the read), more copies present than recorded. */
bool dlqb_reconcile_each_notable(const dlqb_reconcile *r,
                                 void (*fn)(void *ctx, const dlqb_reconcile_entry *e), void *ctx);

/* Ids with a positive net count whose last hop in came before the read:
 * what the trail says the queue holds. */
uint64_t dlqb_reconcile_recorded(const dlqb_reconcile *r);

/* Entries held (for tests: forgotten ids do not count). */
size_t dlqb_reconcile_size(const dlqb_reconcile *r);

#endif

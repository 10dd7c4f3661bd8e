/* What a mover remembers across a lost connection: the copies it published
 * and the broker confirmed whose originals it had not yet acked when the
 * channel went (typically waiting for their audit records while the log
 * cannot be written). Those originals come back, redelivered; one that is
 * the same message (its identity, dlqb_wire_identity) is then acked against
 * its remembered copy instead of being published a second time, and its hop
 * is recorded once: by the record the earlier run already handed to the
 * audit trail (ticket), or now when that run had not.
 *
 * Bounded: at most max entries, the oldest forgotten first (a forgotten
 * original that comes back is moved again: a duplicate, as before). The
 * pipe (dlqb/pipe.h) fills it when a run ends and takes from it as
 * deliveries arrive; its owner (the router, the SLA escalator) keeps it for
 * as long as it lives, with one audit writer (tickets are that writer's).
 * In memory only: a process that stops forgets it. Pure; not thread-safe. */
#ifndef DLQB_MEMO_H
#define DLQB_MEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/hop.h"

#define DLQB_MEMO_ID_LEN 32 /* a SHA-256 */

typedef struct {
  uint8_t id[DLQB_MEMO_ID_LEN]; /* the original's identity as delivered */
  bool has_hop;                 /* hop is what the copy was (reported once acked) */
  /* The hop's record was handed to the audit trail (covered by ticket); else
   * it still has to be, once. */
  bool recorded;
  uint64_t ticket;
  dlqb_hop hop;
} dlqb_memo_entry;

typedef struct dlqb_memo dlqb_memo;

/* An empty memo of at most max entries (>= 1); NULL when out of memory.
 * Memory for entries is taken as they come, up to max. */
dlqb_memo *dlqb_memo_new(size_t max);
void dlqb_memo_free(dlqb_memo *m); /* NULL-safe */

/* Remembers e (copied). When the memo is full the oldest entry is
 * forgotten and *forgot (may be NULL) set. False when out of memory (e is
 * not remembered). */
bool dlqb_memo_put(dlqb_memo *m, const dlqb_memo_entry *e, bool *forgot);

/* Takes the oldest entry whose identity is id into *out and forgets it
 * (each entry matches one redelivery); false when none has it. O(1) when
 * none has it. */
bool dlqb_memo_take(dlqb_memo *m, const uint8_t id[DLQB_MEMO_ID_LEN], dlqb_memo_entry *out);

size_t dlqb_memo_size(const dlqb_memo *m); /* entries held; 0 for NULL */
size_t dlqb_memo_max(const dlqb_memo *m);

#endif

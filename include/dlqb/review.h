/* Custody of a compliance_review item (the `review` commands and the
 * daemon's review gauges): who owns the decision, who may claim or decide,
 * how long it has waited, and the header changes of a claim and of leaving
 * review. Pure: no I/O, no clock (callers pass the time in), no allocation.
 *
 * An item is claimed when its owner header is non-empty. A claim is a
 * confirmed re-publish into compliance_review with owner and claimed_at
 * (the queue cannot change a message in place); a decision moves or
 * removes it, and ends its custody. */
#ifndef DLQB_REVIEW_H
#define DLQB_REVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/item.h"
#include "dlqb/rewrite.h"

/* Whether actor may act on it, and how the hop records it. */
typedef enum {
  DLQB_GATE_ALLOW,        /* claim: unclaimed; decide: actor owns it */
  DLQB_GATE_FORCED,       /* allowed only because of --force: recorded as forced */
  DLQB_GATE_ALREADY_MINE, /* claim: actor owns it already; nothing to do */
  DLQB_GATE_OWNED,        /* refused: someone else owns it (--force takes it over) */
  DLQB_GATE_UNCLAIMED     /* decide refused: nobody owns it (claim it, or --force) */
} dlqb_review_gate;

/* For `review claim`: ALLOW when unclaimed, ALREADY_MINE when actor owns it,
 * else OWNED, or FORCED with force. */
dlqb_review_gate dlqb_review_claim_gate(const dlqb_item *it, const char *actor, bool force);

/* For `review decide`: ALLOW when actor owns it; else UNCLAIMED or OWNED,
 * or FORCED with force. */
dlqb_review_gate dlqb_review_decide_gate(const dlqb_item *it, const char *actor, bool force);

/* When it entered compliance_review: its escalated_at when usable at
 * now_ms (dlqb_time_usable), else dlqb_item_since. False when unknown. */
bool dlqb_review_since(const dlqb_item *it, int64_t now_ms, int64_t *epoch_ms);

/* Milliseconds waited in review at now_ms (0 within the clock skew);
 * false when unknown. */
bool dlqb_review_age(const dlqb_item *it, int64_t now_ms, uint64_t *age_ms);

/* Milliseconds since it was claimed (claimed_at, when usable); false for
 * an unclaimed item or one without a usable claimed_at. */
bool dlqb_review_claim_age(const dlqb_item *it, int64_t now_ms, uint64_t *age_ms);

#define DLQB_CLAIM_SETS 2

/* owner = owner, claimed_at = at_iso. Returns DLQB_CLAIM_SETS. */
size_t dlqb_review_claim_stamp(dlqb_hset *sets, const char *owner, const char *at_iso);

#define DLQB_LEAVE_SETS 6

/* Leaving review (decide --replay, --return): the escalation and custody
 * headers are removed, so that the task does not carry a stale owner back
 * into the DLQ or to a worker (the audit trail keeps the story). Returns
 * DLQB_LEAVE_SETS. */
size_t dlqb_review_leave_stamp(dlqb_hset *sets);

/* What the review gauges report, summed over one pass. */
typedef struct {
  uint64_t items, unclaimed, claimed;
  bool has_oldest_unclaimed;    /* some unclaimed item has a known age */
  uint64_t oldest_unclaimed_ms; /* since it entered review */
  bool has_oldest_claimed;      /* some claimed item has a usable claimed_at */
  uint64_t oldest_claimed_ms;   /* since it was claimed: undecided that long */
} dlqb_review_tally;

/* Counts it into t (zero t first). */
void dlqb_review_tally_add(dlqb_review_tally *t, const dlqb_item *it, int64_t now_ms);

#endif

/* What a pass over the DLQ (or compliance_review) does with one item, as
 * one pure function shared by replay, escalate, inspect, resolve and the
 * daemon's SLA escalator, so the callbacks above the scan carry data (a
 * rule), not buried decisions:
 *   HOLD           leave it where it is, in its place;
 *   SKIP_COMPLETE  its task is in the completion ledger: remove it, audited;
 *   TAKE           act on it: move it (replay, escalate), remove it
 *                  (resolve), or list it (inspect, a dry run).
 * stop_after ends the pass after this item: the rest cannot be selected. */
#ifndef DLQB_VERDICT_H
#define DLQB_VERDICT_H

#include <stdbool.h>
#include <stdint.h>

#include "dlqb/ledger.h"
#include "dlqb/select.h"

typedef enum { DLQB_VERDICT_HOLD, DLQB_VERDICT_TAKE, DLQB_VERDICT_SKIP_COMPLETE } dlqb_verdict_kind;

typedef struct {
  dlqb_verdict_kind kind;
  bool stop_after;
  /* The SLA escalator takes it because it has no usable time (none, or only
   * times too far in the future): its age cannot be known, and holding it
   * would hide it (and, at the head, everything behind it). */
  bool no_time;
} dlqb_verdict;

typedef struct {
  /* The operator's filters and --limit; NULL: every item. */
  const dlqb_select *sel;
  /* Tasks whose (request_id, source_system) it holds are SKIP_COMPLETE
   * instead of TAKE; NULL: no check. */
  const dlqb_ledger *ledger;
  /* End the pass once --limit items are taken (resolve: one item). */
  bool stop_at_limit;
  /* The SLA escalator: take items in the queue longer than sla_ms, and
   * items without a usable time (dlqb_item_since), and pass over every
   * other one (never stop early: see verdict.c). */
  bool sla;
  uint64_t sla_ms;
} dlqb_verdict_rule;

/* The verdict for it at now_ms, when `selected` items of this pass were
 * already counted against --limit. The caller decides what counts: replay
 * and escalate count what they act on (TAKE), not items skipped as
 * complete; inspect counts what it lists. */
dlqb_verdict dlqb_verdict_of(const dlqb_verdict_rule *rule, const dlqb_item *it, int64_t now_ms,
                             uint64_t selected);

#endif

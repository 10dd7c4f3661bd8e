/* What a pass does with one DLQ item: see dlqb/verdict.h. */
#include "dlqb/verdict.h"

static dlqb_verdict hold(bool stop) { return (dlqb_verdict){DLQB_VERDICT_HOLD, stop, false}; }

/* The SLA escalator takes what is overdue and passes over the rest: the
 * DLQ is not in dlq_at order (a replayed item that fails again re-enters at
 * the tail with its old first failure; anyone may publish into it), so the
 * first young item proves nothing about the ones behind it. */
static dlqb_verdict sla_verdict(const dlqb_verdict_rule *r, const dlqb_item *it, int64_t now_ms) {
  uint64_t age;
  /* No usable time (missing, unparseable, or in year 9999): a person looks
   * at it. Held, it would sit in the DLQ unseen by the SLA for ever. */
  if (!dlqb_item_age(it, now_ms, &age)) return (dlqb_verdict){DLQB_VERDICT_TAKE, false, true};
  if (age <= r->sla_ms) return hold(false);
  return (dlqb_verdict){DLQB_VERDICT_TAKE, false, false};
}

dlqb_verdict dlqb_verdict_of(const dlqb_verdict_rule *r, const dlqb_item *it, int64_t now_ms,
                             uint64_t selected) {
  if (r->sla) return sla_verdict(r, it, now_ms);
  const dlqb_select *sel = r->sel;
  uint64_t limit = sel != NULL ? sel->limit : 0;
  if (limit > 0 && selected >= limit) return hold(r->stop_at_limit);
  if (sel != NULL && !dlqb_select_match(sel, it, now_ms)) return hold(false);
  bool last = r->stop_at_limit && limit > 0 && selected + 1 >= limit;
  bool complete = r->ledger != NULL && it->request_id[0] != '\0' && it->source_system[0] != '\0' &&
                  dlqb_ledger_contains(r->ledger, it->request_id, it->source_system);
  return (dlqb_verdict){complete ? DLQB_VERDICT_SKIP_COMPLETE : DLQB_VERDICT_TAKE, last, false};
}

/* One act on one compliance_review item (claim, or the owner's decision:
 * replay, resolve, return), in one audited, confirmed hop. */
#include <stdio.h>
#include <string.h>

#include "dlqb/clock.h"
#include "dlqb/envelope.h"
#include "dlqb/ops.h"
#include "dlqb/review.h"
#include "dlqb/topology.h"

#define CUSTODY_MAX_SETS (DLQB_LEAVE_SETS + DLQB_REPLAY_SETS + 2)

typedef ops_review_act act_ctx;

/* The hop's reason: the note (or what happened), and for a forced hop
 * whose custody it overrode. Sanitised again when the hop is filled. */
static const char *hop_reason(act_ctx *c, const dlqb_item *it) {
  const char *what = c->note != NULL             ? c->note
                     : c->kind == OPS_ACT_CLAIM  ? "claimed"
                     : c->kind == OPS_ACT_REPLAY ? "replayed by the reviewer"
                                                 : "returned to the DLQ by the reviewer";
  if (c->gate != DLQB_GATE_FORCED) snprintf(c->reason, sizeof c->reason, "%s", what);
  else if (it->owner[0] != '\0')
    snprintf(c->reason, sizeof c->reason, "forced over %s's claim: %s", it->owner, what);
  else snprintf(c->reason, sizeof c->reason, "forced, unclaimed: %s", what);
  return c->reason;
}

static dlqb_status act_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                            dlqb_error *err) {
  act_ctx *c = ctx;
  dlqb_verdict_rule rule = {.sel = &c->sel,
                            .stop_at_limit = true,
                            .ledger = c->kind == OPS_ACT_REPLAY ? c->ledger : NULL};
  dlqb_verdict v = dlqb_verdict_of(&rule, it, 0, c->found ? 1 : 0);
  if (v.kind == DLQB_VERDICT_HOLD) {
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  c->found = true;
  c->item = *it;
  dlqb_scan_stop(s); /* one item: the rest stays in place */
  c->gate = c->kind == OPS_ACT_CLAIM ? dlqb_review_claim_gate(it, c->x.actor, c->force)
                                     : dlqb_review_decide_gate(it, c->x.actor, c->force);
  if (c->gate != DLQB_GATE_ALLOW && c->gate != DLQB_GATE_FORCED) {
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  /* A claim or decision of it that began and did not end may have left a
   * copy (in dsr.work, or a claimed one here): not a second one. */
  const ops_open_move *open = ops_open_moves_find(c->moves, it->message_id);
  /* As the move pass: a person settles a decision that did not end; one
   * that ended (the item back after a lost ack) only a removal settles. */
  if (open != NULL && (open->ended ? c->kind == OPS_ACT_RESOLVE : c->after_interrupted))
    open = NULL;
  if (open != NULL) {
    c->unsettled = true;
    c->open = *open;
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  const char *cause = c->gate == DLQB_GATE_FORCED ? DLQB_CAUSE_FORCE : "";
  const char *reason = hop_reason(c, it);
  dlqb_hset sets[CUSTODY_MAX_SETS];
  size_t n = 0;
  switch (c->kind) {
  case OPS_ACT_CLAIM:
    n = dlqb_review_claim_stamp(sets, c->x.actor, c->now);
    return dlqb_scan_forward(s, d, it, c->x.pipeline->review, sets, n, DLQB_EV_CLAIMED, cause,
                             reason, err);
  case OPS_ACT_REPLAY:
    if (v.kind == DLQB_VERDICT_SKIP_COMPLETE) {
      dlqb_scan_ack(s, d, it, DLQB_EV_SKIPPED_COMPLETE, cause, "already in the completion ledger");
      return DLQB_OK;
    }
    n = dlqb_review_leave_stamp(sets);
    n += dlqb_replay_stamp(sets + n, it->replay_count, c->x.actor, c->now);
    return dlqb_scan_forward(s, d, it, c->x.pipeline->work, sets, n, DLQB_EV_DECIDED_REPLAY, cause,
                             reason, err);
  case OPS_ACT_RESOLVE:
    dlqb_scan_ack(s, d, it, DLQB_EV_DECIDED_RESOLVE, cause, reason);
    return DLQB_OK;
  case OPS_ACT_RETURN:
    n = dlqb_review_leave_stamp(sets);
    /* A fresh SLA clock: with its old dlq_at the SLA escalator would send
     * it straight back to review. */
    sets[n++] = (dlqb_hset){DLQB_H_DLQ_AT, DLQB_HSET_STRING, c->now, 0};
    return dlqb_scan_forward(s, d, it, c->x.pipeline->dlq, sets, n, DLQB_EV_DECIDED_RETURN, cause,
                             reason, err);
  }
  return DLQB_OK;
}

static void act_acked(void *ctx, const dlqb_hop *hop) {
  act_ctx *c = ctx;
  c->settled = true;
  c->done_event = hop->event;
}

dlqb_status ops_review_act_pass(ops_review_act *c, const char *command, ops_session *session,
                                dlqb_stop_flag *stop, dlqb_scan_result *r, dlqb_error *err) {
  memset(r, 0, sizeof *r);
  dlqb_select_init(&c->sel);
  dlqb_status st = dlqb_select_set(&c->sel, "message-id", c->message_id, err);
  if (st == DLQB_OK) st = dlqb_select_set(&c->sel, "limit", "1", err);
  if (st != DLQB_OK) return st;
  /* A replay reads the whole ledger first: replaying on a partial one
   * could re-run a completed erasure. */
  c->ledger = NULL;
  if (c->kind == OPS_ACT_REPLAY &&
      (st = ops_session_ledger(session, c->x.pipeline, false, &c->ledger, NULL, err)) != DLQB_OK)
    return st == DLQB_EINVAL ? DLQB_EBROKER : st;
  dlqb_audit *audit = ops_session_audit(session);
  dlqb_iso_time(dlqb_now_ms(), c->now, sizeof c->now);
  char purpose[64];
  snprintf(purpose, sizeof purpose, "dlq-bridge %s", command);
  dlqb_scan_options so = {.queue = c->x.pipeline->review,
                          .purpose = purpose,
                          .actor = c->x.actor,
                          .broker = c->x.broker,
                          .audit = audit,
                          .window = c->x.window,
                          .stop = stop,
                          .on_item = act_item,
                          .after_ack = act_acked,
                          .ctx = c};
  c->moves = NULL;
  if ((st = ops_open_moves_read(c->x.cfg->audit.log, c->x.pipeline->review, &c->moves, err)) !=
      DLQB_OK)
    return st;
  st = dlqb_scan_run(c->x.cfg, &so, r, err);
  ops_open_moves_free(c->moves);
  c->moves = NULL;
  return st;
}

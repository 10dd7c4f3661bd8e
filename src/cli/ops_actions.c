/* The pieces of replay and escalate that the CLI commands and the console
 * share: reading the completion ledger and the header stamps of a move. */
#include <stdio.h>
#include <string.h>

#include "dlqb/clock.h"
#include "dlqb/envelope.h"
#include "dlqb/topology.h"
#include "ops.h"

#define LEDGER_IDLE_MS 10000
/* A dry run's end of the ledger: a stream delivers its entries in a burst. */
#define LEDGER_QUIET_MS 1500

void ops_stamp_init(ops_stamp *st, const char *actor, const char *note) {
  memset(st, 0, sizeof *st);
  snprintf(st->actor, sizeof st->actor, "%s", actor);
  dlqb_iso_time(dlqb_now_ms(), st->now, sizeof st->now);
  if (note != NULL && note[0] != '\0') {
    snprintf(st->note, sizeof st->note, "%s", note);
    st->has_note = true;
  }
}

dlqb_status ops_replay_ledger(const dlqb_config *cfg, bool dry_run, dlqb_ledger *ledger,
                              dlqb_ledger_stats *ls, dlqb_error *err) {
  /* A dry run writes nothing, not even the ledger's end marker. */
  return dry_run ? dlqb_ledger_peek(cfg, DLQB_Q_COMPLETED, cfg->ledger_cache, ledger,
                                    LEDGER_QUIET_MS, ls, err)
                 : dlqb_ledger_load(cfg, DLQB_Q_COMPLETED, cfg->ledger_cache, ledger,
                                    LEDGER_IDLE_MS, ls, err);
}

static size_t replay_sets(void *ctx, const dlqb_item *it, dlqb_hset *out) {
  const ops_stamp *st = ctx;
  return dlqb_replay_stamp(out, it->replay_count, st->actor, st->now);
}

static const char *replay_reason(void *ctx, const dlqb_item *it) {
  (void)ctx;
  /* The audit record keeps why it had failed; the message no longer does. */
  return it->last_error[0] != '\0' ? it->last_error : "replay";
}

static size_t escalate_sets(void *ctx, const dlqb_item *it, dlqb_hset *out) {
  const ops_stamp *st = ctx;
  (void)it;
  return dlqb_escalation_stamp(out, st->actor, st->now, DLQB_ESCALATION_OPERATOR,
                               st->has_note ? st->note : NULL);
}

static const char *escalate_reason(void *ctx, const dlqb_item *it) {
  const ops_stamp *st = ctx;
  (void)it;
  return st->has_note ? st->note : DLQB_ESCALATION_OPERATOR;
}

void ops_replay_spec(ops_move_spec *m, ops_stamp *st, bool dry_run, double rate) {
  *m = (ops_move_spec){.command = "replay", .target = DLQB_Q_WORK, .event = DLQB_EV_REPLAYED,
                       .verb = "replayed", .dry_run = dry_run, .rate = rate,
                       .sets = replay_sets, .reason = replay_reason, .ctx = st};
}

void ops_escalate_spec(ops_move_spec *m, ops_stamp *st, bool dry_run, double rate) {
  *m = (ops_move_spec){.command = "escalate", .target = DLQB_Q_REVIEW,
                       .event = DLQB_EV_ESCALATED, .verb = "escalated",
                       .cause = DLQB_ESCALATION_OPERATOR, .dry_run = dry_run, .rate = rate,
                       .sets = escalate_sets, .reason = escalate_reason, .ctx = st};
}

static const char *resolve_reason(void *ctx, const dlqb_item *it) {
  const ops_stamp *st = ctx;
  (void)it;
  return st->has_note ? st->note : "resolved";
}

void ops_resolve_spec(ops_move_spec *m, ops_stamp *st, bool dry_run) {
  *m = (ops_move_spec){.command = "resolve", .target = NULL, .event = DLQB_EV_RESOLVED,
                       .verb = "resolved", .dry_run = dry_run, .reason = resolve_reason,
                       .ctx = st};
}

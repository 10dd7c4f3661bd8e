/* The move kinds as data (replay, escalate, resolve, edit), the stamp they
 * carry, the completion ledger as replay reads it, and the most urgent
 * items of a pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/clock.h"
#include "dlqb/envelope.h"
#include "dlqb/ops.h"
#include "dlqb/topology.h"

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

dlqb_status ops_replay_ledger(const dlqb_config *cfg, const dlqb_broker_conf *broker,
                              const dlqb_pipeline *p, bool dry_run, dlqb_ledger *ledger,
                              dlqb_ledger_stats *ls, dlqb_error *err) {
  /* A dry run writes nothing, not even the ledger's end marker. */
  /* The served pipeline's ledger, keyed by its profile's identity, with
   * its own cache file (the CLI's check_pipelines). */
  return dry_run ? dlqb_ledger_peek(cfg, broker, p->completed, cfg->ledger.cache, ledger,
                                    LEDGER_QUIET_MS, ls, err)
                 : dlqb_ledger_load(cfg, broker, p->completed, cfg->ledger.cache, ledger,
                                    LEDGER_IDLE_MS, ls, err);
}

/* What each kind records: its command (connection name, audit writer),
 * the hop's event and cause, and the verb of its summary. */
static const struct {
  const char *command, *verb, *cause;
  dlqb_event event;
} kinds[] = {
    [OPS_MOVE_REPLAY] = {"replay", "replayed", NULL, DLQB_EV_REPLAYED},
    [OPS_MOVE_ESCALATE] = {"escalate", "escalated", DLQB_ESCALATION_OPERATOR, DLQB_EV_ESCALATED},
    [OPS_MOVE_RESOLVE] = {"resolve", "resolved", NULL, DLQB_EV_RESOLVED},
    [OPS_MOVE_EDIT] = {"edit", "edited", NULL, DLQB_EV_EDITED},
    [OPS_MOVE_SLA] = {"escalator", "escalated", "sla", DLQB_EV_ESCALATED},
};

static void spec_of(ops_move_spec *m, ops_move_kind kind, const ops_stamp *st, bool dry_run,
                    double rate) {
  *m = (ops_move_spec){.kind = kind,
                       .command = kinds[kind].command,
                       .event = kinds[kind].event,
                       .verb = kinds[kind].verb,
                       .cause = kinds[kind].cause,
                       .stamp = st,
                       .dry_run = dry_run,
                       .rate = rate};
}

void ops_replay_spec(ops_move_spec *m, const ops_stamp *st, bool dry_run, double rate) {
  spec_of(m, OPS_MOVE_REPLAY, st, dry_run, rate);
}

void ops_escalate_spec(ops_move_spec *m, const ops_stamp *st, bool dry_run, double rate) {
  spec_of(m, OPS_MOVE_ESCALATE, st, dry_run, rate);
}

void ops_resolve_spec(ops_move_spec *m, const ops_stamp *st, bool dry_run) {
  spec_of(m, OPS_MOVE_RESOLVE, st, dry_run, 0);
}

void ops_edit_spec(ops_move_spec *m, const ops_stamp *st, bool dry_run) {
  spec_of(m, OPS_MOVE_EDIT, st, dry_run, 0);
}

void ops_sla_spec(ops_move_spec *m, const ops_stamp *st, uint64_t sla_ms, const char *reason,
                  const char *no_time_reason) {
  spec_of(m, OPS_MOVE_SLA, st, false, 0);
  m->sla_ms = sla_ms;
  m->sla_reason = reason;
  m->sla_no_time_reason = no_time_reason;
}

const char *ops_move_target(ops_move_kind kind, const dlqb_pipeline *p) {
  switch (kind) {
  case OPS_MOVE_REPLAY:
  case OPS_MOVE_EDIT: return p->work;
  case OPS_MOVE_ESCALATE:
  case OPS_MOVE_SLA: return p->review;
  case OPS_MOVE_RESOLVE: break;
  }
  return NULL;
}

/* ---- the most urgent items ---------------------------------------------- */

bool ops_urgent_init(ops_urgent *u, size_t cap) {
  u->n = 0;
  u->cap = cap;
  u->kept = malloc((cap ? cap : 1) * sizeof *u->kept);
  return u->kept != NULL;
}

void ops_urgent_free(ops_urgent *u) {
  free(u->kept);
  u->kept = NULL;
  u->n = u->cap = 0;
}

/* Urgency order: more urgent first; ties in queue order. */
static int kept_cmp(const ops_kept *a, const ops_kept *b) {
  int c = dlqb_deadline_cmp(&a->d, &b->d);
  if (c != 0) return c;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int kept_qsort(const void *a, const void *b) { return kept_cmp(a, b); }

static void kept_swap(ops_kept *a, ops_kept *b) {
  ops_kept t = *a;
  *a = *b;
  *b = t;
}

void ops_urgent_keep(ops_urgent *u, const dlqb_item *it, dlqb_deadline d, uint64_t seq) {
  if (u->cap == 0) return;
  ops_kept *heap = u->kept;
  size_t i;
  if (u->n < u->cap) {
    i = u->n++;
    heap[i] = (ops_kept){.it = *it, .d = d, .seq = seq};
    while (i > 0 && kept_cmp(&heap[(i - 1) / 2], &heap[i]) < 0) {
      kept_swap(&heap[(i - 1) / 2], &heap[i]);
      i = (i - 1) / 2;
    }
    return;
  }
  ops_kept k = {.d = d, .seq = seq};
  if (kept_cmp(&k, &heap[0]) >= 0) return; /* less urgent than all kept */
  heap[0] = (ops_kept){.it = *it, .d = d, .seq = seq};
  for (i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, top = i;
    if (l < u->n && kept_cmp(&heap[l], &heap[top]) > 0) top = l;
    if (r < u->n && kept_cmp(&heap[r], &heap[top]) > 0) top = r;
    if (top == i) break;
    kept_swap(&heap[i], &heap[top]);
    i = top;
  }
}

void ops_urgent_sort(ops_urgent *u) { qsort(u->kept, u->n, sizeof *u->kept, kept_qsort); }

/* The pieces of replay and escalate that the CLI commands and the console
 * share: reading the completion ledger and the header stamps of a move. */
#include <stdio.h>
#include <stdlib.h>
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
  /* The served pipeline's ledger, keyed by its profile's identity, with
   * its own cache file (cli.c serve_pipeline). */
  return dry_run ? dlqb_ledger_peek(cfg, cli_pipeline()->completed, cfg->ledger_cache, ledger,
                                    LEDGER_QUIET_MS, ls, err)
                 : dlqb_ledger_load(cfg, cli_pipeline()->completed, cfg->ledger_cache, ledger,
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
  *m = (ops_move_spec){.command = "replay",
                       .target = cli_pipeline()->work,
                       .event = DLQB_EV_REPLAYED,
                       .verb = "replayed",
                       .dry_run = dry_run,
                       .rate = rate,
                       .sets = replay_sets,
                       .reason = replay_reason,
                       .ctx = st};
}

void ops_escalate_spec(ops_move_spec *m, ops_stamp *st, bool dry_run, double rate) {
  *m = (ops_move_spec){.command = "escalate",
                       .target = cli_pipeline()->review,
                       .event = DLQB_EV_ESCALATED,
                       .verb = "escalated",
                       .cause = DLQB_ESCALATION_OPERATOR,
                       .dry_run = dry_run,
                       .rate = rate,
                       .sets = escalate_sets,
                       .reason = escalate_reason,
                       .ctx = st};
}

static const char *resolve_reason(void *ctx, const dlqb_item *it) {
  const ops_stamp *st = ctx;
  (void)it;
  return st->has_note ? st->note : "resolved";
}

void ops_resolve_spec(ops_move_spec *m, ops_stamp *st, bool dry_run) {
  *m = (ops_move_spec){.command = "resolve",
                       .target = NULL,
                       .event = DLQB_EV_RESOLVED,
                       .verb = "resolved",
                       .dry_run = dry_run,
                       .reason = resolve_reason,
                       .ctx = st};
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

/* The move pass: one pass over a pipeline's DLQ (or the queue the spec
 * names) taking the selected items to where the move's kind sends them. */
#include <stdio.h>
#include <string.h>

#include "dlqb/clock.h"
#include "dlqb/envelope.h"
#include "dlqb/ops.h"

const char *ops_early_stop(const dlqb_scan_result *r, int window) {
  (void)window;
  if (r->interrupted) return "interrupted: the rest was left in the queue, untouched";
  if (r->short_read)
    return "fewer items arrived than the queue held at the start "
           "(another consumer took some); run again to cover them";
  return NULL;
}

/* ---- moving selected DLQ items ---------------------------------------- */

/* The pass itself: verdicts, --limit, dry-run counts. What is shown of it
 * is the watcher's (the CLI's table and JSON, the console's job). */
typedef struct {
  const ops_move_spec *m;
  const char *source; /* the queue passed over: m->source or the pipeline's DLQ */
  /* ops_move_target of the pass's pipeline (NULL: resolve), or where the
   * accept hook last sent a copy (the sentences of an early end name it) */
  const char *target;
  const ops_move_watch *w;
  dlqb_verdict_rule rule;     /* what is held, skipped or moved */
  const ops_open_moves *open; /* moves out of source that did not end */
  ops_move_outcome *out;
  uint64_t selected;               /* items chosen so far (for --limit) */
  uint64_t would_move, would_skip; /* dry run */
  int64_t now_ms;
} pass_ctx;

char *ops_move_summary(bool dry_run, const char *verb, uint64_t moved, bool ledger,
                       uint64_t skipped, uint64_t left, uint64_t total, const char *queue,
                       char *buf, size_t len) {
  const char *would = dry_run ? "would " : "";
  char skip[64] = "";
  if (ledger)
    snprintf(skip, sizeof skip, ", %s%s as complete %llu", would, dry_run ? "skip" : "skipped",
             (unsigned long long)skipped);
  /* A dry run's line is the longer: without the queue's name it fits 80
   * columns (and the real run names the queue). */
  snprintf(buf, len, "%s%s%s %llu%s, %s%s %llu of %llu%s%s", dry_run ? "dry run: " : "", would,
           verb, (unsigned long long)moved, skip, would, dry_run ? "leave" : "left",
           (unsigned long long)left, (unsigned long long)total, dry_run ? "" : " in ",
           dry_run ? "" : queue);
  return buf;
}

/* The header changes of a kind's move, into out (at most OPS_MAX_SETS);
 * strings live as long as the stamp. Returns how many. */
static size_t move_sets(const ops_move_spec *m, const dlqb_item *it, dlqb_hset *out) {
  const ops_stamp *st = m->stamp;
  switch (m->kind) {
  case OPS_MOVE_REPLAY: return dlqb_replay_stamp(out, it->replay_count, st->actor, st->now);
  case OPS_MOVE_ESCALATE:
    return dlqb_escalation_stamp(out, st->actor, st->now, DLQB_ESCALATION_OPERATOR,
                                 st->has_note ? st->note : NULL);
  case OPS_MOVE_SLA:
    return dlqb_escalation_stamp(out, st->actor, st->now, DLQB_ESCALATION_DLQ_SLA, NULL);
  case OPS_MOVE_RESOLVE:
  case OPS_MOVE_EDIT: /* its accept hook's sets */ break;
  }
  return 0;
}

/* The hop's reason for the audit trail. */
static const char *move_reason(const ops_move_spec *m, const dlqb_item *it, dlqb_verdict v) {
  const ops_stamp *st = m->stamp;
  switch (m->kind) {
  case OPS_MOVE_SLA: return v.no_time ? m->sla_no_time_reason : m->sla_reason;
  case OPS_MOVE_REPLAY:
    /* Why now (the fix, the ticket) when the operator said; else why it had
     * failed, which the message no longer keeps. */
    if (st->has_note) return st->note;
    return it->last_error[0] != '\0' ? it->last_error : "replay";
  case OPS_MOVE_ESCALATE: return st->has_note ? st->note : DLQB_ESCALATION_OPERATOR;
  case OPS_MOVE_EDIT: return st->has_note ? st->note : "edited";
  case OPS_MOVE_RESOLVE: break;
  }
  return st->has_note ? st->note : "resolved";
}

static dlqb_status move_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                             dlqb_error *err) {
  pass_ctx *c = ctx;
  /* The SLA clock reads the item as the escalator first saw it. */
  const dlqb_item *seen = c->m->seen_as != NULL ? c->m->seen_as(c->m->seen_ctx, it) : it;
  dlqb_verdict v = dlqb_verdict_of(&c->rule, seen, c->now_ms, c->selected);
  if (v.kind != DLQB_VERDICT_HOLD && c->m->only != NULL && !c->m->only(c->m->only_ctx, it))
    v.kind = DLQB_VERDICT_HOLD;
  const ops_open_move *open =
      v.kind == DLQB_VERDICT_TAKE ? ops_open_moves_find(c->open, it->message_id) : NULL;
  /* A person who checked settles a move that did not end; one that ended
   * (its original back after a lost ack) is settled only by removing
   * the original: a second copy is never made. */
  if (open != NULL && (open->ended ? c->m->kind == OPS_MOVE_RESOLVE : c->m->after_interrupted))
    open = NULL;
  /* An edit's own interrupted copies are the edit service's to judge
   * (ops_edit_trail_state names the edit and its settlement). */
  if (open != NULL && c->m->kind == OPS_MOVE_EDIT && strncmp(open->event, "edit", 4) == 0)
    open = NULL;
  if (open != NULL) {
    /* Its copy may be where it was going: not a second one. */
    if (c->out->unsettled++ == 0) {
      snprintf(c->out->unsettled_id, sizeof c->out->unsettled_id, "%s", it->message_id);
      c->out->unsettled_move = *open;
    }
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  ops_move_copy copy = {.body = d->body, .target = c->target};
  if (v.kind != DLQB_VERDICT_HOLD && c->m->accept != NULL &&
      !c->m->accept(c->m->accept_ctx, d, it, &copy))
    v.kind = DLQB_VERDICT_HOLD;
  if (v.kind == DLQB_VERDICT_HOLD) {
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  bool complete = v.kind == DLQB_VERDICT_SKIP_COMPLETE;
  /* --limit counts what is acted on: an item skipped as complete is not
   * one of the N the operator asked to replay. */
  if (!complete) c->selected++;
  if (c->m->dry_run) {
    if (c->w->listed != NULL) c->w->listed(c->w->ctx, it, complete, c->now_ms);
    if (complete) c->would_skip++;
    else c->would_move++;
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  if (v.stop_after) dlqb_scan_stop(s); /* what is in flight completes */
  if (complete) {
    dlqb_scan_ack(s, d, it, DLQB_EV_SKIPPED_COMPLETE, "", "already in the completion ledger");
    return DLQB_OK;
  }
  if (c->w->taken != NULL) c->w->taken(c->w->ctx, it);
  const char *reason = copy.reason != NULL ? copy.reason : move_reason(c->m, it, v);
  c->target = copy.target;
  if (copy.target == NULL) {
    /* resolve: the item leaves the DLQ with nothing published */
    dlqb_scan_ack(s, d, it, c->m->event, c->m->cause ? c->m->cause : "", reason);
    return DLQB_OK;
  }
  dlqb_hset own[OPS_MAX_SETS];
  const dlqb_hset *sets = copy.sets;
  size_t n = copy.nsets;
  if (sets == NULL) {
    n = move_sets(c->m, it, own);
    sets = own;
  }
  dlqb_delivery sent = *d;
  sent.body = copy.body; /* an edit's new body, else the original's */
  return dlqb_scan_forward(s, &sent, it, copy.target, sets, n, c->m->event,
                           c->m->cause ? c->m->cause : "", reason, err);
}

static void move_acked(void *ctx, const dlqb_hop *hop) {
  pass_ctx *c = ctx;
  if (!c->m->dry_run && c->w->acked != NULL) c->w->acked(c->w->ctx, hop);
}

static void move_tick(void *ctx, const dlqb_scan *s) {
  pass_ctx *c = ctx;
  if (c->w->tick == NULL) return;
  dlqb_scan_result r;
  dlqb_scan_progress(s, &r);
  c->w->tick(c->w->ctx, &r);
}

void ops_move_pass(const ops_ctx *x, const ops_move_spec *m, dlqb_audit *audit,
                   const ops_move_watch *w, dlqb_stop_flag *stop, ops_move_outcome *out) {
  static const ops_move_watch none = {0};
  memset(out, 0, sizeof *out);
  const dlqb_pipeline *p = x->pipeline;
  pass_ctx c = {.m = m,
                .w = w != NULL ? w : &none,
                .now_ms = dlqb_now_ms(),
                .source = m->source != NULL ? m->source : p->dlq,
                .target = ops_move_target(m->kind, p),
                .out = out,
                .rule = {.sel = x->sel,
                         .ledger = m->ledger,
                         .stop_at_limit = m->stop_at_limit,
                         .sla = m->kind == OPS_MOVE_SLA,
                         .sla_ms = m->sla_ms}};
  /* The moves out of this queue that began and did not end (a killed
   * mover's): their items are held unless a person settles them. */
  ops_open_moves *open = NULL;
  if ((out->status = ops_open_moves_read(x->cfg->audit.log, c.source, &open, &out->err)) !=
      DLQB_OK) {
    out->not_started = true;
    return;
  }
  c.open = open;
  /* With --rate the handler waits between moves while deliveries queue up
   * ahead of the confirms on the socket, so acks lag by up to a window: a
   * window of about half a second of moves keeps what a crash would
   * duplicate small. --window overrides it (e.g. for a selective replay
   * whose unselected items would fill a small window). */
  int window = x->window;
  if (m->rate > 0 && !x->window_set) {
    double wd = m->rate / 2;
    window = wd < 50 ? 50 : wd > DLQB_SCAN_WINDOW_DEFAULT ? DLQB_SCAN_WINDOW_DEFAULT : (int)wd;
  }
  out->window = window;
  char purpose[DLQB_NAME_MAX + 64];
  snprintf(purpose, sizeof purpose, "dlq-bridge %s", m->command);
  if (m->purpose != NULL) snprintf(purpose, sizeof purpose, "%s", m->purpose);
  dlqb_scan_options so = {.queue = c.source,
                          .edit = m->edit,
                          .purpose = purpose,
                          .actor = x->actor,
                          .broker = x->broker,
                          .audit = audit,
                          .window = window,
                          .rate = m->rate,
                          .stop = stop,
                          .audit_mode = m->outwait_audit ? DLQB_PIPE_AUDIT_OUTWAIT
                                                         : DLQB_PIPE_AUDIT_FAIL_FAST,
                          .memory = m->memory,
                          .idle_stop_ms = m->idle_stop_ms,
                          .on_item = move_item,
                          .on_tick = move_tick,
                          .after_ack = move_acked,
                          .ctx = &c};
  dlqb_scan_result *r = &out->r;
  out->status = dlqb_scan_run(x->cfg, &so, r, &out->err);
  ops_open_moves_free(open);
  /* Lost before the first item: nothing happened; the error says why. */
  out->not_started = out->status != DLQB_OK && !r->audit_failed && r->examined == 0;
  /* The trail lost midway: the pass stopped at once; say what moved (each
   * of those is recorded) and what may now be there twice. */
  /* A pass we ended at the limit saw fewer items than the queue held, by
   * design: not a short read. */
  const char *early = r->stopped ? NULL : ops_early_stop(r, x->window);
  if (r->audit_failed) {
    snprintf(out->early, sizeof out->early,
             "stopped: %s; copies published but not recorded: %llu "
             "(their originals stay in %s, so %s may hold them twice)",
             out->err.msg[0] ? out->err.msg : "the audit log cannot be written",
             (unsigned long long)r->unsettled_copies, c.source, c.target);
  } else if (out->status != DLQB_OK) {
    /* The broker went midway (issue 19): as the Ctrl-C path does, say what
     * moved, that nothing is lost and what to do, and that the copies whose
     * confirms never came may now be in both queues. */
    char twice[128];
    if (r->unsettled_copies > 0)
      snprintf(twice, sizeof twice, "up to %llu item%s", (unsigned long long)r->unsettled_copies,
               r->unsettled_copies == 1 ? "" : "s");
    else snprintf(twice, sizeof twice, "the last items sent");
    snprintf(out->early, sizeof out->early,
             "stopped: %s; nothing is lost: what was not moved is "
             "still in %s, run it again; %s may now be in both %s and %s",
             out->err.msg, c.source, twice, c.source, c.target);
  } else if (early != NULL) {
    snprintf(out->early, sizeof out->early, "%s", early);
  }
  out->moved = m->dry_run ? c.would_move : r->forwarded;
  out->skipped = m->dry_run ? c.would_skip : r->removed;
  /* A dry run says what would remain, not today's depth. */
  uint64_t taken = out->moved + out->skipped;
  out->left = r->depth_at_start > taken ? r->depth_at_start - taken : 0;
}

char *ops_open_move_text(uint64_t n, const char *message_id, const ops_open_move *u, char *buf,
                         size_t len) {
  if (u->ended) {
    snprintf(buf, len,
             "%llu selected item%s held: moved already (%s %s into %s at %s by %s) and back: "
             "that move's ack never reached the broker, so its copy there counts; check with "
             "audit show --message-id, then remove the original with resolve",
             (unsigned long long)n, n == 1 ? "" : "s", message_id, u->event, u->to, u->time,
             u->writer);
    return buf;
  }
  snprintf(buf, len,
           "%llu selected item%s held: a move began and did not end (%s into %s at %s by %s; "
           "its copy may be there): check with audit show --message-id, then move %s with "
           "--after-interrupted",
           (unsigned long long)n, n == 1 ? "" : "s", message_id, u->to, u->time, u->writer,
           n == 1 ? "it" : "them");
  return buf;
}

char *ops_unsettled_text(const ops_move_outcome *out, char *buf, size_t len) {
  return ops_open_move_text(out->unsettled, out->unsettled_id, &out->unsettled_move, buf, len);
}

/* The edit service: one item of dlq-bridge edit or the console through
 * the shared move pass (see dlqb/ops_edit.h). */
#include "dlqb/ops_edit.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dlqb/clock.h"
#include "dlqb/headers.h"
#include "dlqb/names.h"
#include "dlqb/review.h"
#include "dlqb/rewrite.h"

typedef struct {
  const ops_edit_request *rq;
  dlqb_audit *audit;
  const dlqb_pipeline *p;
  const dlqb_ledger *ledger;
  ops_edit_result *out;
  const char *actor;
  int64_t default_max_attempts;
  bool name_pipeline; /* the trail names the pipeline (a config with `pipelines`) */
  bool intent;        /* edit_started is recorded */
  int64_t started_ms; /* when this edit began: a copy stamped later is someone else's */
  bool decided;       /* the first copy with the message_id decides the edit */
  /* The changes in effect: the command's, or (approve, reject) the
   * proposal's, read from the item. */
  dlqb_edit_request req;
  char note[DLQB_LAST_ERROR_MAX + 1];
  bool keep;
  char proposal[4096]; /* PROPOSE: the edit_proposal header's text */
  char now[DLQB_ISO_TIME_MAX];
  dlqb_hset sets[OPS_MAX_SETS];
  size_t nsets;
  const char *audit_log;            /* the trail the stale and interrupted checks read */
  ops_edit_proposal_record *record; /* APPROVE: the proposal as the verified trail has it */
} edit_ctx;

/* A string header of the delivery into dst ("" when absent). */
static void header_text(const dlqb_delivery *d, const char *key, char *dst, size_t cap) {
  const amqp_table_t *h = (d->props->_flags & AMQP_BASIC_HEADERS_FLAG) ? &d->props->headers : NULL;
  if (!dlqb_header_id(h, key, dst, cap)) dst[0] = '\0';
}

/* The header changes of the edited copy, in the order they apply: the
 * edit, its stamp, then what leaving the queue does (replay's stamp,
 * leaving review's custody). */
static size_t copy_sets(edit_ctx *c, const dlqb_item *it, dlqb_hset *sets) {
  const ops_edit_request *rq = c->rq;
  size_t n = dlqb_edit_sets(&c->req, sets);
  n += dlqb_edit_stamp(sets + n, c->out->rec.edit_id, c->out->rec.parent, c->out->rec.editor,
                       c->now);
  if (!c->keep) {
    if (rq->from_review) n += dlqb_review_leave_stamp(sets + n);
    n += dlqb_replay_stamp(sets + n, it->replay_count, c->actor, c->now); /* drops a proposal */
  } else if (rq->mode == OPS_EDIT_MODE_APPROVE) {
    n += dlqb_edit_proposal_stamp(sets + n, NULL, NULL, NULL, NULL);
  }
  return n;
}

/* Leaves the item where it is, saying why: returns false for accept. */
static bool refuse(edit_ctx *c, ops_edit_outcome why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool refuse(edit_ctx *c, ops_edit_outcome why, const char *fmt, ...) {
  c->out->outcome = why;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->out->err.msg, sizeof c->out->err.msg, fmt, ap);
  va_end(ap);
  return false;
}

/* The edit's intent, durable before its copy is sent: no copy ever
 * leaves without the trail knowing of it, so a crash between the confirm
 * and the edited record still leaves a trail that names the copy (by its
 * edit_id) and a retry that refuses to send a second one. */
static bool record_marker(edit_ctx *c, const dlqb_item *it, dlqb_event event) {
  if (c->audit == NULL) return true; /* --no-audit */
  dlqb_hop hop;
  memset(&hop, 0, sizeof hop);
  hop.event = event;
  dlqb_hop_identity(&hop, it);
  snprintf(hop.reason, sizeof hop.reason, "%s -> %s", c->out->from, c->out->to);
  snprintf(hop.actor, sizeof hop.actor, "%s", c->actor);
  snprintf(hop.broker_user, sizeof hop.broker_user, "%s", c->rq->editor);
  if (c->name_pipeline) snprintf(hop.pipeline, sizeof hop.pipeline, "%s", c->p->name);
  hop.edit = &c->out->rec;
  const dlqb_hop *hops[] = {&hop};
  dlqb_error err;
  if (dlqb_audit_record(c->audit, hops, 1, &err) != DLQB_OK) {
    c->out->outcome = OPS_EDIT_FAILED;
    c->out->err = err;
    return false;
  }
  return true;
}

static bool record_intent(edit_ctx *c, const dlqb_item *it) {
  if (!record_marker(c, it, DLQB_EV_EDIT_STARTED)) return false;
  c->intent = true;
  return true;
}

/* The reason the hop records: the edit's note, or an approval's or
 * rejection's own note when given (the proposer's stays in the edit
 * member). */
static const char *edit_reason(const edit_ctx *c) {
  bool decision = c->rq->mode == OPS_EDIT_MODE_APPROVE || c->rq->mode == OPS_EDIT_MODE_REJECT;
  if (decision && c->rq->note != NULL) return c->rq->note;
  return c->note[0] ? c->note : "edited";
}

/* Whether this delivery is the one to edit; if so builds and validates
 * its copy (c->sets, *body, c->out->to) and records the edit's intent. */
static bool accept_copy(edit_ctx *c, const dlqb_delivery *d, const dlqb_item *it,
                        amqp_bytes_t *body) {
  ops_edit_result *out = c->out;
  const ops_edit_request *rq = c->rq;
  /* One copy decides: after a refusal a later copy with the same
   * message_id (the edited one a crash left beside its original) is not
   * taken instead. */
  bool by_proposal = rq->mode == OPS_EDIT_MODE_APPROVE || rq->mode == OPS_EDIT_MODE_REJECT;
  if (by_proposal) {
    /* The proposal names its item: the others stay where they are. */
    char pid[DLQB_EDIT_ID_MAX];
    header_text(d, DLQB_H_EDIT_PROPOSAL_ID, pid, sizeof pid);
    if (strcmp(pid, rq->proposal_id) != 0) return false;
  }
  if (c->decided) return false;
  c->decided = true;
  out->item = *it;
  header_text(d, DLQB_H_EDIT_ID, out->item_edit_id, sizeof out->item_edit_id);
  snprintf(out->rec.parent, sizeof out->rec.parent, "%s", out->item_edit_id);
  const amqp_table_t *h = (d->props->_flags & AMQP_BASIC_HEADERS_FLAG) ? &d->props->headers : NULL;
  if (by_proposal) {
    header_text(d, DLQB_H_EDIT_PROPOSED_BY, out->proposer, sizeof out->proposer);
    char json[sizeof c->proposal];
    header_text(d, DLQB_H_EDIT_PROPOSAL, json, sizeof json);
    if (dlqb_edit_proposal_decode(json, strlen(json), &c->p->profile, &c->req, c->note,
                                  sizeof c->note, &c->keep, &out->err) != DLQB_OK) {
      out->outcome = OPS_EDIT_BAD_PROPOSAL;
      return false;
    }
    snprintf(out->rec.edit_id, sizeof out->rec.edit_id, "%s", rq->proposal_id);
    snprintf(out->rec.editor, sizeof out->rec.editor, "%s", out->proposer);
    /* The queue the copy goes to (accept hands it to the pass): the
     * proposal's --keep decides it. */
    snprintf(out->to, sizeof out->to, "%s",
             c->keep || rq->mode == OPS_EDIT_MODE_REJECT ? out->from : c->p->work);
    if (rq->mode == OPS_EDIT_MODE_APPROVE) {
      if (strcmp(out->proposer, rq->editor) == 0)
        return refuse(c, OPS_EDIT_OWN_PROPOSAL,
                      "%s proposed edit %s: the proposer cannot approve their own edit; a "
                      "different broker user must",
                      out->proposer, rq->proposal_id);
      snprintf(out->rec.approver, sizeof out->rec.approver, "%s", rq->editor);
    }
  }
  snprintf(out->rec.note, sizeof out->rec.note, "%s", c->note);
  dlqb_edit_diff(&c->req, h, &c->p->profile, &out->rec);
  if (rq->mode == OPS_EDIT_MODE_APPROVE) {
    /* The headers on the item are anyone's who may publish to the queue:
     * only the signed trail says who proposed what, for which copy. */
    const char *why = ops_edit_proposal_mismatch(c->record, it->message_id, out->proposer,
                                                 out->item_edit_id, &out->rec);
    if (why != NULL)
      return refuse(c, OPS_EDIT_BAD_PROPOSAL,
                    "proposal %s on %s is not the one the audit trail records (%s): not "
                    "approved; reject it",
                    rq->proposal_id, it->message_id, why);
  }
  *body = rq->has_body && !by_proposal ? rq->body : d->body;
  dlqb_edit_body(&out->rec, d->body, *body);
  if (rq->mode == OPS_EDIT_MODE_REJECT) {
    c->nsets = dlqb_edit_proposal_stamp(c->sets, NULL, NULL, NULL, NULL);
    out->valid = true;
    out->outcome = OPS_EDIT_PREVIEWED;
    return true; /* the task is not changed: nothing to check */
  }
  c->nsets = copy_sets(c, it, c->sets);
  /* Validate exactly the table that would be published. */
  size_t cap = (h != NULL && h->num_entries > 0 ? (size_t)h->num_entries : 0) + c->nsets;
  amqp_table_entry_t *scratch = malloc(cap * sizeof *scratch);
  if (scratch == NULL) return refuse(c, OPS_EDIT_FAILED, "out of memory");
  out->valid = dlqb_edit_validate(h, c->sets, c->nsets, &c->p->profile, c->default_max_attempts,
                                  scratch, cap, &out->invalid) == DLQB_OK;
  free(scratch);
  out->outcome = OPS_EDIT_PREVIEWED;
  if (!out->valid) {
    out->outcome = OPS_EDIT_INVALID;
    dlqb_fail(&out->err, DLQB_EINVAL, "the edited task would still be invalid: %s",
              out->invalid.msg);
    return false;
  }
  if (rq->from_review && dlqb_review_decide_gate(it, c->actor, false) != DLQB_GATE_ALLOW)
    return refuse(c, OPS_EDIT_NOT_OWNER,
                  "%s is a review item: only its owner edits it (%s); claim it first",
                  it->message_id, it->owner[0] ? "claimed by someone else" : "unclaimed");
  if (rq->expect_edit_id != NULL && strcmp(rq->expect_edit_id, out->item_edit_id) != 0)
    return refuse(c, OPS_EDIT_MEANWHILE, "%s changed since it was looked at: it is now %s",
                  it->message_id, out->item_edit_id[0] ? out->item_edit_id : "the original");
  /* Edited by someone else once this edit had begun: this one was meant
   * for the copy before theirs. */
  int64_t edited_at;
  if (out->item_edit_id[0] != '\0' && h != NULL &&
      dlqb_header_time(h, DLQB_H_EDITED_AT, &edited_at) && edited_at >= c->started_ms)
    return refuse(c, OPS_EDIT_MEANWHILE,
                  "%s was edited (edit %s) after this edit began: look at it again and edit "
                  "that version",
                  it->message_id, out->item_edit_id);
  char found[DLQB_EDIT_ID_MAX] = "";
  int trail =
      ops_edit_trail_state(c->audit_log, it->message_id, out->item_edit_id, found, sizeof found);
  if (trail == OPS_EDIT_TRAIL_EDITED)
    return refuse(c, OPS_EDIT_STALE,
                  "this copy of %s was edited already (the trail records edit %s of it): it is "
                  "stale, the edited copy counts",
                  it->message_id, found);
  if (trail == OPS_EDIT_TRAIL_STARTED &&
      (rq->after_interrupted == NULL || strcmp(rq->after_interrupted, found) != 0)) {
    snprintf(out->interrupted_edit, sizeof out->interrupted_edit, "%s", found);
    return refuse(
        c, OPS_EDIT_INTERRUPTED,
        "edit %s of %s began and did not end: its copy, which carries that edit_id, "
        "may be live; check the work queue and the completion ledger, then give "
        "--after-interrupted with that id%s",
        found, it->message_id,
        rq->mode == OPS_EDIT_MODE_APPROVE ? " to the approval (a second person settles it)" : "");
  }
  if (!c->keep && c->ledger != NULL) {
    /* The ledger still decides whether a replay runs: under the identity
     * the task had and the one it will have. */
    dlqb_item after;
    amqp_table_entry_t *t = malloc(cap * sizeof *t);
    if (t == NULL) return refuse(c, OPS_EDIT_FAILED, "out of memory");
    amqp_basic_properties_t props = *d->props;
    bool done = dlqb_ledger_contains(c->ledger, it->request_id, it->source_system);
    if (!done && dlqb_headers_apply(h, c->sets, c->nsets, t, cap, &props.headers) == DLQB_OK) {
      props._flags |= AMQP_BASIC_HEADERS_FLAG;
      dlqb_item_read_as(&props, &c->p->profile, &after);
      done = dlqb_ledger_contains(c->ledger, after.request_id, after.source_system);
    }
    free(t);
    if (done)
      return refuse(c, OPS_EDIT_COMPLETE,
                    "%s: its task is in the completion ledger %s: not replayed (resolve it)",
                    it->message_id, c->p->completed);
  }
  if (rq->mode == OPS_EDIT_MODE_PROPOSE) {
    /* Checked as the approval will send it; what goes now is only the
     * proposal, onto the item where it is. */
    if (dlqb_edit_proposal_encode(&c->req, c->note, c->keep, c->proposal, sizeof c->proposal,
                                  &out->err) != DLQB_OK) {
      out->outcome = OPS_EDIT_FAILED;
      return false;
    }
    c->nsets =
        dlqb_edit_proposal_stamp(c->sets, out->rec.edit_id, c->proposal, out->rec.editor, c->now);
    return true;
  }
  if (!rq->dry_run && !record_intent(c, it)) return false;
  return true;
}

/* The move pass's accept hook (ops_move_spec.accept): the copy accept_copy
 * built is what the pass sends, where, and the reason its hop records. */
static bool accept(void *ctx, const dlqb_delivery *d, const dlqb_item *it, ops_move_copy *copy) {
  edit_ctx *c = ctx;
  if (!accept_copy(c, d, it, &copy->body)) return false;
  copy->target = c->out->to;
  copy->sets = c->sets;
  copy->nsets = c->nsets;
  copy->reason = edit_reason(c); /* rq's note or c's: both outlive the pass */
  return true;
}

static void edit_acked(void *ctx, const dlqb_hop *hop) {
  edit_ctx *c = ctx;
  if (hop->event == DLQB_EV_EDITED) c->out->outcome = OPS_EDIT_DONE;
  else if (hop->event == DLQB_EV_EDIT_PROPOSED) c->out->outcome = OPS_EDIT_PROPOSED;
  else if (hop->event == DLQB_EV_EDIT_REJECTED) c->out->outcome = OPS_EDIT_REJECTED;
}

bool ops_edit_needs_ledger(const ops_edit_request *rq) {
  return rq->mode == OPS_EDIT_MODE_APPROVE || (rq->mode != OPS_EDIT_MODE_REJECT && !rq->keep);
}

void ops_edit_run(const ops_ctx *x, const ops_edit_request *rq, ops_session *session,
                  dlqb_stop_flag *stop, ops_edit_result *out) {
  memset(out, 0, sizeof *out);
  out->outcome = OPS_EDIT_NOT_FOUND;
  dlqb_audit *audit = ops_session_audit(session);
  /* The whole ledger, as replay reads it: a partial one could re-run a
   * completed erasure. */
  const dlqb_ledger *ledger = NULL;
  if (ops_edit_needs_ledger(rq) &&
      ops_session_ledger(session, x->pipeline, rq->dry_run, &ledger, NULL, &out->err) != DLQB_OK) {
    out->outcome = OPS_EDIT_FAILED;
    return;
  }
  /* An approval carries out what the verified trail records, read before
   * the pass takes anything. */
  ops_edit_proposal_record *record = NULL;
  if (rq->mode == OPS_EDIT_MODE_APPROVE) {
    record = calloc(1, sizeof *record);
    dlqb_status rst = record == NULL
                          ? dlqb_fail(&out->err, DLQB_ENOMEM, "out of memory")
                          : ops_edit_read_proposal(x->cfg, rq->proposal_id, record, &out->err);
    if (rst != DLQB_OK) {
      out->outcome = rst == DLQB_EINVAL ? OPS_EDIT_BAD_PROPOSAL : OPS_EDIT_FAILED;
      free(record);
      return;
    }
  }
  const dlqb_pipeline *p = x->pipeline;
  const char *from = rq->from_review ? p->review : p->dlq;
  snprintf(out->from, sizeof out->from, "%s", from);
  snprintf(out->to, sizeof out->to, "%s", rq->keep ? from : p->work);
  /* The edit's own selection: its one item. */
  dlqb_select *sel = malloc(sizeof *sel);
  if (sel == NULL) {
    out->outcome = OPS_EDIT_FAILED;
    dlqb_fail(&out->err, DLQB_ENOMEM, "out of memory");
    free(record);
    return;
  }
  dlqb_select_init(sel);
  bool by_proposal = rq->mode == OPS_EDIT_MODE_APPROVE || rq->mode == OPS_EDIT_MODE_REJECT;
  /* A proposal is found by its id (accept), wherever it is in the queue. */
  if ((by_proposal ? dlqb_select_set(sel, "all", NULL, &out->err)
                   : dlqb_select_set(sel, "message-id", rq->message_id, &out->err)) != DLQB_OK ||
      dlqb_select_set(sel, "limit", "1", &out->err) != DLQB_OK) {
    out->outcome = OPS_EDIT_FAILED;
    free(sel);
    free(record);
    return;
  }
  ops_ctx mx = *x;
  mx.sel = sel;
  edit_ctx c = {.rq = rq,
                .p = p,
                .ledger = ledger,
                .out = out,
                .actor = x->actor,
                .audit = audit,
                .name_pipeline = x->cfg->pipeline_count > 0,
                .default_max_attempts = p->policy.max_attempts,
                .started_ms = dlqb_now_ms(),
                .audit_log = x->cfg->audit.log,
                .record = record};
  dlqb_iso_time(c.started_ms, c.now, sizeof c.now);
  c.req = rq->req;
  c.keep = rq->keep;
  snprintf(c.note, sizeof c.note, "%s", rq->note != NULL && !by_proposal ? rq->note : "");
  snprintf(out->rec.editor, sizeof out->rec.editor, "%s", rq->editor);
  if (rq->mode == OPS_EDIT_MODE_PROPOSE) snprintf(out->to, sizeof out->to, "%s", from);
  uint8_t rnd[16] = {0};
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
    out->outcome = OPS_EDIT_FAILED;
    dlqb_fail(&out->err, DLQB_EIO, "no random bytes for the edit id");
    free(sel);
    free(record);
    return;
  }
  dlqb_edit_id(rnd, out->rec.edit_id);
  static const dlqb_event events[] = {[OPS_EDIT_MODE_DIRECT] = DLQB_EV_EDITED,
                                      [OPS_EDIT_MODE_PROPOSE] = DLQB_EV_EDIT_PROPOSED,
                                      [OPS_EDIT_MODE_APPROVE] = DLQB_EV_EDITED,
                                      [OPS_EDIT_MODE_REJECT] = DLQB_EV_EDIT_REJECTED};
  /* The edit kind's spec; what the copy carries and where it goes is the
   * accept hook's (the stamp is only a fallback the hook always fills). */
  ops_stamp st;
  ops_stamp_init(&st, x->actor, NULL);
  ops_move_spec m;
  ops_edit_spec(&m, &st, rq->dry_run);
  m.event = events[rq->mode];
  m.source = from;
  m.accept = accept;
  m.accept_ctx = &c;
  m.edit = &out->rec;
  m.stop_at_limit = true;
  ops_move_watch w = {.acked = edit_acked, .ctx = &c};
  ops_move_pass(&mx, &m, audit, &w, stop, &out->move);
  free(sel);
  free(record);
  c.record = NULL;
  bool settled = out->outcome == OPS_EDIT_DONE || out->outcome == OPS_EDIT_PROPOSED ||
                 out->outcome == OPS_EDIT_REJECTED;
  /* Begun, and the broker certainly took no copy (it refused the publish
   * for want of permission, returned it, or it could not be sent): say so,
   * so that the next edit of this copy is not held up as interrupted. */
  const dlqb_scan_result *sr = &out->move.r;
  if (c.intent && !settled && (sr->refused > 0 || sr->access_refused))
    record_marker(&c, &out->item, DLQB_EV_EDIT_ABANDONED);
  if (out->move.status != DLQB_OK && !settled) {
    out->outcome = OPS_EDIT_FAILED;
    out->err = out->move.err;
    return;
  }
  if (!c.decided && by_proposal) {
    out->outcome = OPS_EDIT_VOID;
    dlqb_fail(&out->err, DLQB_EINVAL,
              "proposal %s is void: no item in %s carries it (the item has moved, was edited "
              "or proposed again, or the proposal was rejected)",
              rq->proposal_id, from);
    return;
  }
  if (c.decided && out->outcome == OPS_EDIT_PREVIEWED && !rq->dry_run) {
    out->outcome = OPS_EDIT_NOT_CONFIRMED;
    dlqb_fail(&out->err, DLQB_EBROKER, "the move of '%s' was not confirmed; it is still in %s",
              out->item.message_id, from);
  }
}

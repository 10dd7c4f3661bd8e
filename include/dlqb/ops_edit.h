/* The edit service of the ops layer (src/ops/ops_edit.c), under `dlq-bridge
 * edit` and the console's edit form: one DLQ or compliance_review item
 * edited and moved in one confirmed, audited hop of the shared move pass
 * (ops_move_pass, kind OPS_MOVE_EDIT). It prints nothing and reads no
 * globals: the config, the pipeline and the actor come in the ops_ctx,
 * what happened goes out in ops_edit_result.
 *
 * Exactly one copy counts at every moment: the edited copy (same
 * message_id, a new edit_id, edit_parent naming the copy it was made
 * from) is published and confirmed, its hop recorded, and only then the
 * original acked. A crash in between can leave both (the original back in
 * its queue); the trail then says which counts, and an edit of a copy
 * that was already edited (a retry) is refused as stale. Two edits at once
 * cannot both take the item: the broker delivers it to one pass, the other
 * finds it gone or finds the winner's copy, stamped after it began, and is
 * refused. */
#ifndef DLQB_OPS_EDIT_H
#define DLQB_OPS_EDIT_H

#include <stdbool.h>

#include "dlqb/edit.h"
#include "dlqb/ledger.h"
#include "dlqb/ops.h"
#include "dlqb/pipeline.h"

/* What one run does. With a pipeline's edit_approval on, a front end turns an
 * edit into a proposal: it rides on the item itself, in its queue, as the
 * edit_proposal* headers (so it moves with the item, and a proposal whose
 * item has moved or been edited since is found nowhere: void), until a
 * different broker user approves it (the edit then runs as the proposer
 * wrote it, recorded with both) or someone rejects it. */
typedef enum {
  OPS_EDIT_MODE_DIRECT,  /* edit and send on */
  OPS_EDIT_MODE_PROPOSE, /* validate, then put the proposal on the item */
  OPS_EDIT_MODE_APPROVE, /* carry out the proposal proposal_id (not the proposer's own) */
  OPS_EDIT_MODE_REJECT,  /* take the proposal proposal_id off the item */
} ops_edit_mode;

typedef struct {
  ops_edit_mode mode;
  const char *proposal_id; /* APPROVE, REJECT: the item is found by it, not by message_id */
  const char *message_id;
  const char *note; /* DIRECT, PROPOSE: why; APPROVE, REJECT: the decision's (may be NULL) */
  dlqb_edit_request req;
  bool has_body;
  amqp_bytes_t body; /* the new body when has_body (the caller's, outlives the run) */
  bool dry_run;
  bool keep;        /* back into the queue it came from, edited, instead of the work queue */
  bool from_review; /* the item is in the pipeline's review queue, not its DLQ */
  /* The edit id the item must carry ("" for an original), as a preview
   * showed it: a copy edited since is refused. NULL: not checked. */
  const char *expect_edit_id;
  /* The broker user editing (edited_by, the hop's editor). */
  const char *editor;
  /* The interrupted edit (OPS_EDIT_TRAIL_STARTED) the operator checked: its
   * copy is not live, so this copy may be edited again. NULL: none. An
   * approval settles an interrupted one this way too: the approver, a
   * second person, is the one who says so. */
  const char *after_interrupted;
} ops_edit_request;

/* ---- the trail (src/ops/edit_trail.c) ----------------------------------
 * Every front end's edits are checked against the trail here, in the
 * service, never by the front end: a copy the trail calls stale or whose
 * edit began and did not end is not edited, and an approval carries out
 * only a proposal the verified trail records. */

enum { OPS_EDIT_TRAIL_NONE, OPS_EDIT_TRAIL_EDITED, OPS_EDIT_TRAIL_STARTED };

/* What the log at audit_log records of edits of message_id made from the
 * copy whose edit id is parent ("" for an original): OPS_EDIT_TRAIL_EDITED
 * (the copy is stale), OPS_EDIT_TRAIL_STARTED (an edit of it began and did
 * not end: its copy may have been sent; an edit_abandoned ends that), or
 * OPS_EDIT_TRAIL_NONE; the edit's id into found. The log is read as it is,
 * unverified: an answer can only refuse an edit, never let one through, so
 * a forged line costs a look at `audit show`, not a second live copy. */
int ops_edit_trail_state(const char *audit_log, const char *message_id, const char *parent,
                         char *found, size_t cap);

/* A proposal as the verified trail records it (its edit_proposed hop). */
typedef struct {
  bool found;
  char settled[16]; /* "edited" or "edit_rejected": a later record settled it; "" */
  char message_id[128];
  char proposer[128]; /* the broker user the broker authenticated for the proposal */
  char parent[DLQB_EDIT_ID_MAX];
  char note[DLQB_LAST_ERROR_MAX + 1];
  dlqb_edit_field fields[DLQB_EDIT_MAX_CHANGES];
  size_t nfields;
} ops_edit_proposal_record;

/* Reads proposal proposal_id from the trail (cfg's audit_log, every file
 * verified against audit_public_keys: a record nobody signed proves no
 * proposal). DLQB_EINVAL when the trail is not configured or does not
 * verify; found false when it records no such proposal. */
dlqb_status ops_edit_read_proposal(const dlqb_config *cfg, const char *proposal_id,
                                   ops_edit_proposal_record *out, dlqb_error *err);

/* NULL when the proposal on an item (its message_id, its edit_proposed_by
 * header, the copy's edit id as parent, and its changes and note as rec
 * has them) is the one p records and nothing settled it; else why not, in
 * a few words. */
const char *ops_edit_proposal_mismatch(const ops_edit_proposal_record *p, const char *message_id,
                                       const char *proposer, const char *parent,
                                       const dlqb_hop_edit *rec);

/* Whether rq's run reads the completion ledger: an approval may replay
 * (the proposal may say --keep: only then not); a rejection moves nothing
 * anywhere; a proposal or a direct edit replays unless kept. */
bool ops_edit_needs_ledger(const ops_edit_request *rq);

typedef enum {
  OPS_EDIT_NOT_FOUND,     /* no item with that message_id in the queue */
  OPS_EDIT_PREVIEWED,     /* dry run: shown, nothing moved */
  OPS_EDIT_DONE,          /* the edited copy confirmed, recorded, the original acked */
  OPS_EDIT_INVALID,       /* the edited task would still be invalid: nothing moved */
  OPS_EDIT_STALE,         /* this copy was edited already (a retried edit): nothing moved */
  OPS_EDIT_INTERRUPTED,   /* an edit of this copy began and did not end: nothing moved */
  OPS_EDIT_MEANWHILE,     /* edited by someone else after this edit began: nothing moved */
  OPS_EDIT_COMPLETE,      /* the task is in the completion ledger: not replayed, nothing moved */
  OPS_EDIT_NOT_OWNER,     /* a review item the editor has not claimed */
  OPS_EDIT_NOT_CONFIRMED, /* taken, but the move did not settle: the original stays */
  OPS_EDIT_PROPOSED,      /* the proposal is on the item, confirmed and recorded */
  OPS_EDIT_REJECTED,      /* the proposal is off the item, confirmed and recorded */
  OPS_EDIT_VOID,          /* no item carries the proposal: it moved or changed since */
  OPS_EDIT_OWN_PROPOSAL,  /* the proposer may not approve their own edit */
  OPS_EDIT_BAD_PROPOSAL,  /* the item's proposal does not parse or is not allowed */
  OPS_EDIT_FAILED,        /* the pass failed (broker, audit trail): err says why */
} ops_edit_outcome;

typedef struct {
  ops_edit_outcome outcome;
  dlqb_error err;                      /* why, for every outcome but DONE and PREVIEWED */
  bool valid;                          /* the edited task is valid under the profile */
  dlqb_error invalid;                  /* when not valid: the profile's reason */
  dlqb_item item;                      /* the item as found */
  char item_edit_id[DLQB_EDIT_ID_MAX]; /* its edit_id ("" for an original) */
  char from[DLQB_QNAME_MAX], to[DLQB_QNAME_MAX];
  char proposer[128]; /* APPROVE, REJECT: who proposed it */
  /* INTERRUPTED: the edit that began and did not end (what
   * after_interrupted must name to settle it). */
  char interrupted_edit[DLQB_EDIT_ID_MAX];
  dlqb_hop_edit rec; /* what the trail records (or would) */
  ops_move_outcome move;
} ops_edit_result;

/* Runs the edit of rq on x->pipeline (its queues and profile) as
 * x->actor with x's broker user (x->broker, else x->cfg->broker) and
 * x->window (x->sel is not read: the edit selects its one item itself),
 * in session: recording into its trail (none: a dry run's, or
 * --no-audit), and reading its completion ledger when the edit needs one
 * (ops_edit_needs_ledger: a task in it is not edited; a failure to read
 * it fails the edit). */
void ops_edit_run(const ops_ctx *x, const ops_edit_request *rq, ops_session *session,
                  dlqb_stop_flag *stop, ops_edit_result *out);

#endif

/* Every queue, exchange and message header name dlq-bridge uses, in one
 * place, so that the router, the escalator, the ops commands and the
 * readers of a DLQ item cannot spell one differently. Only names: no types,
 * no functions, nothing to link (the envelope, a pure module, includes it
 * without the broker's topology). docs/envelope.md describes the headers,
 * docs/architecture.md the queues. */
#ifndef DLQB_NAMES_H
#define DLQB_NAMES_H

/* ---- queues and exchanges ------------------------------------------- */

#define DLQB_Q_WORK      "dsr.work"
#define DLQB_Q_FAILED    "dsr.failed"
#define DLQB_Q_DLQ       "dsr.dlq.manual"
#define DLQB_Q_REVIEW    "compliance_review"
#define DLQB_Q_COMPLETED "dsr.completed"
#define DLQB_Q_CATALOG   "dsr.catalog" /* the DLQ and review catalog (dlqb/catalog.h) */
/* The audit anchors (a stream): writers append their signed heads, verify
 * --anchors reads them all (docs/audit.md, "Anchors"). */
#define DLQB_Q_ANCHORS    "dsr.audit.anchors"
#define DLQB_X_DLX        "dsr.dlx"
#define DLQB_RETRY_PREFIX "dsr.retry." /* + the delay: "dsr.retry.5s" */

/* ---- the retry envelope (dlqb/envelope.h) --------------------------- */

#define DLQB_H_REQUEST_ID    "request_id"
#define DLQB_H_SOURCE_SYSTEM "source_system"
#define DLQB_H_LEGAL_BASIS   "legal_basis"
#define DLQB_H_ACTION        "action"
#define DLQB_H_ATTEMPT       "attempt"
#define DLQB_H_MAX_ATTEMPTS  "max_attempts"
#define DLQB_H_LAST_ERROR    "last_error"
#define DLQB_H_FIRST_SEEN_AT "first_seen_at"
#define DLQB_H_REPLAY_COUNT  "replay_count"
#define DLQB_H_WORKER_ERROR  "worker_error"
#define DLQB_H_DLQ_REASON    "dlq_reason" /* machine-readable category, see policy.h */
#define DLQB_H_DLQ_AT        "dlq_at"     /* ISO-8601 UTC time it entered the DLQ */
/* A producer's user_id the bridge could not forward (RabbitMQ accepts a
 * user_id only from that user's own connection): kept here instead. */
#define DLQB_H_ORIGINAL_USER_ID "original_user_id"
/* How many producer headers were left off a task whose headers the broker
 * could not take back (dlq_reason unpublishable). */
#define DLQB_H_DROPPED_HEADERS "dropped_headers"
/* A body the pipeline's profile forbids in its DLQ (the redaction
 * profile: references only) was left off: its size in bytes and SHA-256
 * (hex), so the item says what was dropped without holding it. */
#define DLQB_H_BODY_DROPPED "body_dropped"
#define DLQB_H_BODY_SHA256  "body_sha256"

/* ---- stamped by a move out of the DLQ ------------------------------- */

#define DLQB_H_REPLAYED_BY "replayed_by" /* the operator (--actor) */
#define DLQB_H_REPLAYED_AT "replayed_at" /* ISO-8601 UTC */
/* Escalation to compliance_review (dlqb_escalation_stamp writes all four,
 * and clears the custody below: a new escalation is unclaimed). */
#define DLQB_H_ESCALATED_BY      "escalated_by"
#define DLQB_H_ESCALATED_AT      "escalated_at"
#define DLQB_H_ESCALATION_REASON "escalation_reason"
#define DLQB_H_ESCALATION_NOTE   "escalation_note" /* the operator's why (escalate --note) */

/* ---- stamped by an edit (dlqb/edit.h) ------------------------------- */

#define DLQB_H_EDIT_ID     "edit_id"     /* this copy's edit ("e-" + 32 hex digits) */
#define DLQB_H_EDIT_PARENT "edit_parent" /* the edit id of the copy it was made from */
#define DLQB_H_EDITED_BY   "edited_by"   /* the broker user who edited it */
#define DLQB_H_EDITED_AT   "edited_at"   /* ISO-8601 UTC */
/* A pending edit, waiting for a second broker user (edit_approval): it
 * rides on the item itself, so it moves (and is void) with it. */
#define DLQB_H_EDIT_PROPOSAL_ID "edit_proposal_id" /* the edit id it will have */
#define DLQB_H_EDIT_PROPOSAL    "edit_proposal"    /* the changes, as JSON (dlqb/edit.h) */
#define DLQB_H_EDIT_PROPOSED_BY "edit_proposed_by" /* the proposing broker user */
#define DLQB_H_EDIT_PROPOSED_AT "edit_proposed_at" /* ISO-8601 UTC */

/* ---- custody in compliance_review (dlqb/review.h) ------------------- */

#define DLQB_H_OWNER      "owner"      /* who claimed it (review claim --actor) */
#define DLQB_H_CLAIMED_AT "claimed_at" /* ISO-8601 UTC */

/* escalated_by when the bridge itself escalates (operators give --actor). */
#define DLQB_ACTOR_BRIDGE "dlq-bridge"
/* hop cause of a claim or decision taken over from another owner, or
 * made on an unclaimed item (--force). */
#define DLQB_CAUSE_FORCE "force"
/* escalation_reason values. */
#define DLQB_ESCALATION_OPERATOR    "operator"    /* `escalate` */
#define DLQB_ESCALATION_DLQ_SLA     "dlq_sla"     /* the SLA escalator */
#define DLQB_ESCALATION_MAX_REPLAYS "max_replays" /* the router: replays did not help */

/* ---- written by the broker ------------------------------------------ */

/* The dead-letter history, newest first, and the members read from it. */
#define DLQB_H_X_DEATH          "x-death"
#define DLQB_H_X_DELIVERY_COUNT "x-delivery-count" /* a quorum queue's redeliveries */
#define DLQB_XDEATH_REASON      "reason"
#define DLQB_XDEATH_QUEUE       "queue"
#define DLQB_XDEATH_TIME        "time"
/* A stream delivery's offset (and the consumer argument choosing where to
 * start). */
#define DLQB_H_STREAM_OFFSET "x-stream-offset"

/* ---- the completion ledger ------------------------------------------ */

/* replay's end-of-read marker in dsr.completed (dlqb/ledger.h). */
#define DLQB_H_LEDGER_MARKER "x-dlqb-ledger-marker"

#endif

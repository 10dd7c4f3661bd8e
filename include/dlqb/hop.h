/* A hop: one message moved (or settled) by the bridge or an ops command.
 * It is what the audit trail records and the metrics count, copied out of
 * the message so it outlives the broker's buffers. Never holds payloads. */
#ifndef DLQB_HOP_H
#define DLQB_HOP_H

#include <stdbool.h>
#include <stdint.h>

#include "dlqb/envelope.h"
#include "dlqb/item.h"
#include "dlqb/topology.h"

typedef enum {
  DLQB_EV_RETRY_SCHEDULED,  /* failure seen, sent to a delay queue */
  DLQB_EV_DEAD_LETTERED,    /* failure seen, attempts or SLA budget exhausted */
  DLQB_EV_POISON,           /* dead-lettered by the broker's delivery limit */
  DLQB_EV_INVALID,          /* envelope failed validation */
  DLQB_EV_REPLAYED,         /* DLQ -> work queue by an operator */
  DLQB_EV_SKIPPED_COMPLETE, /* DLQ item already in the completion ledger */
  DLQB_EV_ESCALATED,        /* DLQ -> compliance_review (operator or SLA) */
  DLQB_EV_RESOLVED,         /* removed from the DLQ with a note */
  DLQB_EV_CLAIMED,          /* compliance_review item claimed (re-published with owner) */
  DLQB_EV_DECIDED_REPLAY,   /* compliance_review -> work queue by its reviewer */
  DLQB_EV_DECIDED_RESOLVE,  /* removed from compliance_review with the reviewer's note */
  DLQB_EV_DECIDED_RETURN,   /* compliance_review -> DLQ by its reviewer */
  DLQB_EV_EDITED,           /* DLQ or review item edited (dlqb/edit.h): the edited copy went to
                            * the work queue, or back where it was (--keep) */
  DLQB_EV_EDIT_STARTED,     /* an edit's intent, recorded before its copy is sent: moves
                            * nothing (no from, no to) */
  DLQB_EV_EDIT_ABANDONED,   /* an edit_started whose copy the broker certainly did not take
                            * (refused: permission, unroutable, too big): moves nothing */
  DLQB_EV_EDIT_PROPOSED,    /* an edit waiting for approval, put on the item in its queue */
  DLQB_EV_EDIT_REJECTED,    /* a proposal taken off the item in its queue, the task unchanged */
  DLQB_EV_MIGRATED,         /* moved unchanged from a classic queue into a quorum one of its
                             * name, through a holding queue (dlq-bridge migrate) */
  DLQB_EV_MOVE_STARTED,     /* a mover's intent, durable before its copy is published: moves
                             * nothing itself (no from, no to; its reason says "FROM -> TO",
                             * intent_for the hop that ends it) */
  DLQB_EV_MOVE_ABANDONED,   /* a move_started whose copy was never published (its run ended
                             * first: a full disk, a lost connection): ends the intent, moves
                             * nothing, the same members as the intent */
  DLQB_EV__COUNT
} dlqb_event;

/* Bytes of an edit id ("e-" and 32 hex digits), with the NUL. */
#define DLQB_EDIT_ID_MAX 40
/* Header changes one edit may make, and the bytes of a value it sets. */
#define DLQB_EDIT_MAX_CHANGES 8
#define DLQB_EDIT_VALUE_MAX   DLQB_ID_MAX

/* One changed header of an edit, as the audit trail records it: its old
 * and new value as text (sanitised: a hostile value is recorded as text,
 * never as control bytes), or, where the pipeline's profile records
 * references only (dlq_body_forbidden) and the header is not one of the
 * profile's fields, the SHA-256 of each value instead (hashed). */
typedef struct {
  char field[DLQB_HEADER_NAME_MAX];
  bool had_old, has_new;
  bool hashed;
  char old_value[DLQB_EDIT_VALUE_MAX + 1];
  char new_value[DLQB_EDIT_VALUE_MAX + 1];
} dlqb_edit_field;

/* What an edit hop records besides the hop: who proposed and approved it,
 * why, each changed field, and the body's size and SHA-256 before and
 * after (never the body). */
typedef struct {
  char edit_id[DLQB_EDIT_ID_MAX];
  char parent[DLQB_EDIT_ID_MAX]; /* the edit id of the copy edited; "" for the original */
  char note[DLQB_LAST_ERROR_MAX + 1];
  char editor[128];   /* the broker user who made (or proposed) the edit */
  char approver[128]; /* the approving broker user; "" without four eyes */
  size_t nfields;
  dlqb_edit_field fields[DLQB_EDIT_MAX_CHANGES];
  uint64_t body_size_before, body_size_after;
  char body_sha256_before[65], body_sha256_after[65];
} dlqb_hop_edit;

typedef struct {
  dlqb_event event;
  char message_id[128];
  char request_id[DLQB_ID_MAX + 1];
  char source_system[DLQB_ID_MAX + 1];
  char legal_basis[16];
  char action[16]; /* the dsr profile's action ("deletion", ...); "" elsewhere */
  int64_t attempt;
  char reason[DLQB_LAST_ERROR_MAX + 1];
  /* Machine-readable category, for metrics labels and audit queries: the
   * dlq_reason ("max_attempts", "sla_budget", "poison", "invalid_envelope")
   * for hops into the DLQ; who escalated ("operator", "sla", "max_replays")
   * for DLQB_EV_ESCALATED; "force" for a claim or decision that overrode
   * the custody (DLQB_CAUSE_FORCE); "" otherwise. */
  char cause[24];
  char from[DLQB_NAME_MAX];
  char to[DLQB_NAME_MAX];
  char actor[128];
  /* The broker user the mover's connection logged in as (dlqb_link_user):
   * unlike the free-text actor, the broker authenticated it. */
  char broker_user[128];
  /* The pipeline of the config file's `pipelines` it moved in; "" for a
   * deployment without `pipelines` (then not recorded: today's records). */
  char pipeline[DLQB_PIPELINE_NAME_MAX];
  /* The broker's delivery history of the message the hop took, as it was
   * when taken (the router's hops and every pass's, dlqb/scan.h; "" /
   * false when it had none, and on markers that take nothing): every
   * x-death entry "QUEUE REASON COUNT" joined by "; " (dlqb_deaths_text:
   * sanitised, a client can forge it) and x-delivery-count. */
  char deaths[256];
  bool has_delivery_count;
  int64_t delivery_count;
  /* The request's receipt, on the router's hop of a task's first failure
   * only (dlqb_route_plan_receipt): the earliest usable time the task
   * carries (dlqb_item_receipt_from; a producer's claim), never later than
   * the bridge's own clock at that hop, which is taken when it carries
   * none; received_from names the source ("first_seen_at", "timestamp",
   * "x_death", "dlq_at", "escalated_at" or "bridge"). `audit report`
   * counts the statutory response time from it. */
  bool has_received;
  int64_t received_at_ms;
  char received_from[16];
  long long published_mono_ms; /* for confirm latency */
  /* An edit's details (DLQB_EV_EDITED only, else NULL): borrowed, so that
   * a hop stays small in the pipe's window; the editor keeps it alive
   * until its audit trail is closed. */
  const dlqb_hop_edit *edit;
  /* DLQB_EV_MOVE_STARTED only: the event of the hop that ends the move
   * (recorded as "for"). */
  dlqb_event intent_for;
} dlqb_hop;

/* Stable lower-case name of an event ("retry_scheduled", ...). */
const char *dlqb_event_name(dlqb_event ev);

/* Copies an item's message_id, identity, legal_basis, action and attempt
 * into hop (what an ops command's hop records of the item it moves). */
void dlqb_hop_identity(dlqb_hop *hop, const dlqb_item *it);

/* The intent recorded before hop's copy is published (DLQB_EV_MOVE_STARTED):
 * its identity, actor, broker user and pipeline, "FROM -> TO" as its
 * reason, hop's event as intent_for; no queues, history or edit of its own,
 * so that nothing that counts moves (reconcile, reports, evidence) takes it
 * for one. */
void dlqb_hop_intent(dlqb_hop *intent, const dlqb_hop *hop);

#endif

/* A hop: one message moved (or settled) by the bridge or an ops command.
 * It is what the audit trail records and the metrics count, copied out of
 * the message so it outlives the broker's buffers. Never holds payloads. */
#ifndef DLQB_HOP_H
#define DLQB_HOP_H

#include <stdint.h>

#include "dlqb/envelope.h"
#include "dlqb/topology.h"

typedef enum {
  DLQB_EV_RETRY_SCHEDULED, /* failure seen, sent to a delay queue */
  DLQB_EV_DEAD_LETTERED,   /* failure seen, attempts or SLA budget exhausted */
  DLQB_EV_POISON,          /* dead-lettered by the broker's delivery limit */
  DLQB_EV_INVALID,         /* envelope failed validation */
  DLQB_EV_REPLAYED,        /* DLQ -> work queue by an operator */
  DLQB_EV_SKIPPED_COMPLETE,/* DLQ item already in the completion ledger */
  DLQB_EV_ESCALATED,       /* DLQ -> compliance_review (operator or SLA) */
  DLQB_EV_RESOLVED,        /* removed from the DLQ with a note */
  DLQB_EV_CLAIMED,         /* compliance_review item claimed (re-published with owner) */
  DLQB_EV_DECIDED_REPLAY,  /* compliance_review -> work queue by its reviewer */
  DLQB_EV_DECIDED_RESOLVE, /* removed from compliance_review with the reviewer's note */
  DLQB_EV_DECIDED_RETURN,  /* compliance_review -> DLQ by its reviewer */
  DLQB_EV__COUNT
} dlqb_event;

typedef struct {
  dlqb_event event;
  char message_id[128];
  char request_id[DLQB_ID_MAX + 1];
  char source_system[DLQB_ID_MAX + 1];
  char legal_basis[16];
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
  /* The broker's delivery history of the message the router took (its
   * hops only; "" / false otherwise): every x-death entry "QUEUE REASON
   * COUNT" joined by "; " (dlqb_deaths_text: sanitised, a client can forge
   * it) and x-delivery-count. */
  char deaths[256];
  bool has_delivery_count;
  int64_t delivery_count;
  long long published_mono_ms; /* for confirm latency */
} dlqb_hop;

/* Stable lower-case name of an event ("retry_scheduled", ...). */
const char *dlqb_event_name(dlqb_event ev);

#endif

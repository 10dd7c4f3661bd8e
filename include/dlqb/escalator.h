/* The daemon's DLQ SLA escalator: a thread with its own connection (a
 * rabbitmq-c connection is not thread-safe, so it never shares the
 * router's) that every interval moves DLQ items older than
 * cfg->policy.dlq_sla_ms to compliance_review, stamping escalated_by=dlq-bridge,
 * escalated_at and escalation_reason=dlq_sla, so that nothing waits in the
 * DLQ forever. Each move is confirmed before the DLQ copy is acked and is
 * audited (event escalated, cause "sla", actor "system").
 *
 * The interval is a quarter of the SLA, between 1 s and 30 s. A pass reads
 * the whole DLQ (it is not in dlq_at order: anyone may publish into it).
 * An item's age counts from its own time (dlq_at, ..., dlqb_item_since),
 * but never from later than the escalator first saw it: a dlq_at a few
 * minutes ahead is accepted as clock skew and must not hold off its own
 * escalation. Items without any usable time are escalated at once.
 *
 * Each pass is the operation level's move pass with the SLA kind
 * (OPS_MOVE_SLA, dlqb/ops.h), in a session of its own: an intent before
 * every copy, and an item whose escalation began and did not end, or was
 * recorded by a run killed before its ack, is held until a person settles
 * it (said once in the log, "unsettled"). */
#ifndef DLQB_ESCALATOR_H
#define DLQB_ESCALATOR_H

#include <stdbool.h>
#include <stddef.h>

#include "dlqb/config.h"
#include "dlqb/error.h"
#include "dlqb/hop.h"

typedef struct dlqb_escalator dlqb_escalator;

/* Starts the thread. after_ack (may be NULL) is called from the escalator's
 * thread for each escalation once acked (metrics); it must be thread-safe.
 * Opens its own session (ops_session_open): the audit writer
 * "escalator@<instance>" (none when audit is off) and its anchors. cfg must outlive the escalator (until dlqb_escalator_stop). */
dlqb_status dlqb_escalator_start(const dlqb_config *cfg,
                                 void (*after_ack)(void *ctx, const dlqb_hop *hop,
                                                   double confirm_seconds),
                                 void *ctx, dlqb_escalator **out, dlqb_error *err);

/* True unless its audit writer is unhealthy (dlqb_audit_healthy; for
 * /healthz). While it is, no pass starts, and escalations a pass published
 * stay unacked until they are recorded; if the pass loses its connection
 * meanwhile, the next pass acks their originals against the copies it
 * remembers (dlqb/memo.h): never published twice while the daemon lives.
 * NULL-safe. */
int dlqb_escalator_audit_healthy(const dlqb_escalator *e);

/* dlqb_audit_health and dlqb_audit_pending of its writer. NULL-safe. */
bool dlqb_escalator_audit_health(const dlqb_escalator *e, char *why, size_t len);

/* False, with the reason in why (len bytes), while its passes are refused
 * for want of permission on the DLQ (the bridge's user may not read it):
 * nothing would ever be escalated, so /healthz says so. True otherwise;
 * NULL-safe. Thread-safe. */
bool dlqb_escalator_health(dlqb_escalator *e, char *why, size_t len);

/* Its audit anchors start held (dlqb_anchor_start): the caller releases
 * them once its router has declared the topology. NULL-safe. */
void dlqb_escalator_release_anchors(dlqb_escalator *e);

/* Whether the escalator's last audit anchor reached the broker (true when
 * anchors are off or e is NULL). */
bool dlqb_escalator_anchored(const dlqb_escalator *e);
size_t dlqb_escalator_audit_pending(const dlqb_escalator *e);

/* Stops the thread (finishing the pass in flight) and frees. NULL-safe. */
void dlqb_escalator_stop(dlqb_escalator *e);

/* The interval between passes for an SLA (exposed for tests). */
long dlqb_escalator_interval_ms(uint64_t dlq_sla_ms);

#endif

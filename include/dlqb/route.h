/* The routing plan for one failed task: from its headers, the policy, the
 * clock and a random draw, where it goes (a delay queue or the DLQ, or
 * compliance_review when replays did not help), with which expiration,
 * which header changes, and the hop to record. Pure: the daemon's router
 * (src/daemon/router.c) only does the I/O around it, and every branch is
 * unit-tested without a broker. */
#ifndef DLQB_ROUTE_H
#define DLQB_ROUTE_H

#include <amqp.h>
#include <stdbool.h>
#include <stdint.h>

#include "dlqb/config.h"
#include "dlqb/envelope.h"
#include "dlqb/hop.h"
#include "dlqb/policy.h"
#include "dlqb/rewrite.h"
#include "dlqb/topology.h"

/* The most a plan sets: 5 of the envelope (last_error, attempt,
 * max_attempts, first_seen_at, worker_error), dlq_reason and dlq_at, an
 * escalation's DLQB_ESCALATION_SETS (6), body_dropped and body_sha256: 15. */
#define DLQB_ROUTE_MAX_SETS 16

typedef struct {
  dlqb_decision decision;
  bool valid;                          /* the envelope parsed */
  char target[DLQB_NAME_MAX];          /* queue to publish to (default exchange) */
  bool has_expiration;                 /* retry: the message's expiration is set to ... */
  char expiration[24];                 /* ... this many milliseconds, as AMQP wants it: text */
  dlqb_hset sets[DLQB_ROUTE_MAX_SETS]; /* header changes; strings point into this plan */
  size_t nsets;
  dlqb_hop hop; /* what the audit trail and the metrics get once it is acked */
  char now_iso[DLQB_ISO_TIME_MAX];
  /* The task goes to a DLQ or review queue of a pipeline whose profile
   * forbids bodies there, and it has one: the router publishes it with an
   * empty body, the headers say what was dropped (body_dropped,
   * body_sha256). */
  bool drop_body;
  char body_sha256[65];
  /* The task's first failure as its envelope tells it (attempt 0), or an
   * envelope too broken to tell: its hop records the receipt
   * (dlqb_route_plan_receipt). */
  bool first_failure;
} dlqb_route_plan;

/* Plans the route of one failed task.
 *   headers     the delivery's header table (NULL: none)
 *   message_id  its message_id property, sanitised ("" when unset)
 *   now_ms      current epoch ms; random: a uniform 32-bit draw (jitter)
 * The plan is self-contained: its header sets point into *out, so it must
 * not be copied while they are in use. */
void dlqb_route_plan_make(const dlqb_config *cfg, const amqp_table_t *headers,
                          const char *message_id, int64_t now_ms, uint32_t random,
                          dlqb_route_plan *out);

/* As dlqb_route_plan_make, for pipeline p: its queue names, its profile's
 * envelope rules (dlqb_envelope_parse_profile) and SLA clock, its retry
 * prefix for reading x-death; policy from cfg (give it p's with
 * dlqb_config_use_pipeline). body/body_len: the delivery's body, hashed
 * when the profile forbids it in the DLQ. dlqb_route_plan_make is this
 * with the default pipeline and no body to drop. */
void dlqb_route_plan_make_pipeline(const dlqb_config *cfg, const dlqb_pipeline *p,
                                   const amqp_table_t *headers, const void *body, size_t body_len,
                                   const char *message_id, int64_t now_ms, uint32_t random,
                                   dlqb_route_plan *out);

/* On a first failure (plan->first_failure), sets the hop's receipt
 * (dlqb_hop.received_at_ms): the earliest usable time of the message
 * (props: its headers and timestamp property, read as an item under
 * profile, NULL: dsr; dlqb_item_receipt_from), cut to now_ms, or now_ms
 * ("bridge": the bridge's first sight) when it carries none. Every such
 * time is a client's claim: a future one is skipped, so a claim can move
 * the receipt earlier (a deadline nearer), never later than the first
 * sight. Otherwise nothing. */
void dlqb_route_plan_receipt(dlqb_route_plan *plan, const amqp_basic_properties_t *props,
                             const dlqb_profile *profile, int64_t now_ms);

/* Turns plan into the DLQ route for a task the broker would not take back
 * as it is (why: one line, e.g. the pipe's DLQB_EREFUSED detail): dlq_reason
 * unpublishable, last_error says why, no expiration. The pipe then sends
 * it with only the headers the bridge knows (dlqb_pipe_forward_minimal). */
void dlqb_route_plan_refused(dlqb_route_plan *plan, const char *why);

#endif

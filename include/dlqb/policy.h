/* The routing decision for one failed task: retry after a delay, or the
 * dead-letter queue with a reason. Pure: the clock and the random draw are
 * arguments, so every branch is unit-tested without a broker. */
#ifndef DLQB_POLICY_H
#define DLQB_POLICY_H

#include <stdint.h>

#include "dlqb/config.h"
#include "dlqb/envelope.h"
#include "dlqb/xdeath.h"

typedef enum { DLQB_ROUTE_RETRY, DLQB_ROUTE_DLQ } dlqb_route;

/* Why a task went to the DLQ; the string forms are the dlq_reason header. */
typedef enum {
  DLQB_REASON_NONE,         /* a retry */
  DLQB_REASON_MAX_ATTEMPTS, /* "max_attempts" */
  DLQB_REASON_SLA_BUDGET,   /* "sla_budget" */
  DLQB_REASON_POISON,       /* "poison" */
  DLQB_REASON_INVALID,      /* "invalid_envelope" */
  DLQB_REASON_UNPUBLISHABLE /* "unpublishable": the broker would refuse it as it is */
} dlqb_reason;

typedef struct {
  dlqb_route route;
  dlqb_reason reason;
  int64_t attempt;   /* the new attempt count (old + 1); for invalid: 0 */
  uint64_t delay_ms; /* retry: jittered delay */
  size_t delay_tier; /* retry: index in cfg->policy.retry_delays_ms (the delay queue) */
  char last_error[DLQB_LAST_ERROR_MAX + 1];
  /* DLQ route of a valid task already replayed cfg->policy.max_replays times or
   * more: poison at the replay level, so it goes to compliance_review
   * (escalation_reason max_replays) instead of waiting for another replay.
   * reason still says why this attempt was the last. */
  bool escalate;
} dlqb_decision;

/* Decides the route of one failed task.
 *   env          the parsed envelope, or NULL when it was invalid
 *   invalid_why  the parse error when env is NULL ("invalid envelope: " is prefixed)
 *   f            how it failed (dlqb_failure_read)
 *   now_ms       current epoch ms
 *   random       a uniform 32-bit draw for the jitter
 * Rules, in order: invalid -> DLQ; delivery_limit -> DLQ "poison: repeated
 * consumer crash"; attempt+1 >= max_attempts -> DLQ; now + delay past
 * first_seen_at + sla_budget -> DLQ (a first_seen_at later than now_ms
 * counts as now_ms: no claim extends the deadline); otherwise retry on tier
 * min(attempt, count-1) with delay uniform in [d*(1-jitter), d]. A DLQ
 * route of a valid envelope with replay_count >= cfg->policy.max_replays sets
 * escalate. */
void dlqb_policy_decide(const dlqb_config *cfg, const dlqb_envelope *env, const char *invalid_why,
                        const dlqb_failure *f, int64_t now_ms, uint32_t random, dlqb_decision *out);

/* The dlq_reason header value for a reason ("" for NONE). */
const char *dlqb_reason_name(dlqb_reason r);

/* The failure text a task carries in last_error for f, e.g. "rejected by
 * worker: upstream 503" or "rejected by worker"; written to buf. */
char *dlqb_failure_text(const dlqb_failure *f, char *buf, size_t len);

#endif

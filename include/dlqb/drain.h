/* The automatic drain (`dlq-bridge drain run`, issue 23), its pure part:
 * which DLQ items a drain policy makes eligible, and the ramp, a state
 * machine that says what the run does next. Pure: no I/O, no clock (the
 * caller passes times in: monotonic milliseconds, so that a clock set back
 * or forward neither ends a canary wait early nor stretches a failure
 * window), no allocation.
 *
 * A run: move a canary of `canary` items at the starting rate and wait for
 * each one's outcome (completed per the ledger, or failed again); any
 * canary failure, or a canary not complete within the canary timeout,
 * ends the run. Then ramp: steps of `step_ms` each, the first at
 * `start_rate` items a second, each next one `step_factor` times faster up
 * to `max_rate`; the run ends when a step finds fewer eligible items than
 * it asked for (drained), at `max_items`, or as soon as
 * `failure_threshold` items this run moved are seen failing again within
 * `failure_window_ms`. Whatever was not moved stays in the DLQ, in order. */
#ifndef DLQB_DRAIN_H
#define DLQB_DRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "dlqb/config.h"
#include "dlqb/item.h"

/* ---- eligibility ------------------------------------------------------ */

/* Whether the policy in cfg (drain_reasons, drain_sources, drain_errors)
 * makes it eligible. An item needs a request_id and a source_system (the
 * drain follows its outcome by them), a dlq_reason in drain_reasons (so
 * poison and invalid_envelope only when listed), a source_system in
 * drain_sources (empty: any) and, when drain_errors lists patterns
 * ('|'-separated), a last_error containing one of them, compared without
 * case and with runs of white space read as one space; and, when
 * drain_groups lists failure group ids, an item of one of those groups
 * (dlqb/group.h). The conditions combine: a poison group is eligible only
 * with poison in drain_reasons too. */
bool dlqb_drain_eligible(const dlqb_config *cfg, const dlqb_item *it);

/* Whether name is one of the comma-separated, trimmed entries of list. */
bool dlqb_drain_list_has(const char *list, const char *name);

/* ---- the ramp --------------------------------------------------------- */

typedef struct {
  int canary;                 /* items in the canary, >= 1 */
  uint64_t canary_timeout_ms; /* how long to wait for the canary's outcome */
  int start_rate;             /* items a second: the canary and the first step */
  int step_factor;            /* each step's rate is the previous one's times this */
  int max_rate;               /* the ceiling */
  uint64_t step_ms;           /* how long one ramp step lasts */
  int failure_threshold;      /* re-failures within the window that stop the run */
  uint64_t failure_window_ms;
  uint64_t max_items; /* per run; 0 = no limit */
} dlqb_drain_params;

/* dlqb_drain_params from the drain_* settings. */
void dlqb_drain_params_from(const dlqb_config *cfg, dlqb_drain_params *p);

typedef enum {
  DLQB_DRAIN_RUNNING,        /* not ended */
  DLQB_DRAIN_DRAINED,        /* no eligible item left (or none at all) */
  DLQB_DRAIN_CANARY_FAILED,  /* a canary failed again */
  DLQB_DRAIN_CANARY_TIMEOUT, /* the canary's outcome did not come in time */
  DLQB_DRAIN_REFAILURES,     /* failure_threshold re-failures within the window */
  DLQB_DRAIN_MAX_ITEMS,      /* moved max_items */
  DLQB_DRAIN_INTERRUPTED,    /* SIGINT / SIGTERM */
  DLQB_DRAIN_ERROR,          /* the broker, the ledger or the audit trail failed */
  DLQB_DRAIN__STOPS
} dlqb_drain_stop;

/* Stable lower-case name ("drained", "canary_failed", ...). */
const char *dlqb_drain_stop_name(dlqb_drain_stop s);

typedef enum {
  DLQB_DRAIN_MOVE,        /* one pass: move at most `limit` eligible items at `rate`/s */
  DLQB_DRAIN_WAIT_CANARY, /* look for the canary's outcomes, report them, ask again */
  DLQB_DRAIN_END          /* the run is over: see dlqb_drain_ramp.stop */
} dlqb_drain_action_kind;

typedef struct {
  dlqb_drain_action_kind kind;
  uint64_t limit;
  double rate;
  bool canary;
} dlqb_drain_action;

/* The most re-failure times kept for the window: the threshold's bound. */
#define DLQB_DRAIN_FAILURES_MAX 1000

typedef enum {
  DLQB_DRAIN_PH_CANARY,
  DLQB_DRAIN_PH_WAIT,
  DLQB_DRAIN_PH_RAMP,
  DLQB_DRAIN_PH_END
} dlqb_drain_phase;

typedef struct {
  dlqb_drain_params p;
  dlqb_drain_phase phase;
  dlqb_drain_stop stop;
  int step;       /* ramp steps done */
  double rate;    /* the next step's rate */
  uint64_t moved; /* items moved this run (canary included) */
  uint64_t canary_moved, canary_completed, canary_failed;
  bool canary_exhausted;                    /* the canary pass found fewer than it asked for */
  int64_t canary_at_ms;                     /* when the canary was moved */
  uint64_t refailures;                      /* moved items seen failing again, in all */
  int64_t fail_at[DLQB_DRAIN_FAILURES_MAX]; /* ring of the latest re-failure times */
  int nfail, fail_head;
} dlqb_drain_ramp;

void dlqb_drain_init(dlqb_drain_ramp *r, const dlqb_drain_params *p);

/* What to do next at now_ms. */
dlqb_drain_action dlqb_drain_next(dlqb_drain_ramp *r, int64_t now_ms);

/* A MOVE asked for `asked` and moved `moved` items (counted in `moved`
 * even when the run ended during that pass). */
void dlqb_drain_moved(dlqb_drain_ramp *r, uint64_t asked, uint64_t moved, int64_t now_ms);

/* While waiting: how many canaries completed and failed so far (totals). */
void dlqb_drain_canary(dlqb_drain_ramp *r, uint64_t completed, uint64_t failed);

/* An item this run moved was seen failing again at now_ms (during the
 * ramp; the canary's failures go to dlqb_drain_canary). */
void dlqb_drain_refailed(dlqb_drain_ramp *r, int64_t now_ms);

/* Ends the run from outside (INTERRUPTED, ERROR); a run already ended
 * keeps its reason. */
void dlqb_drain_end(dlqb_drain_ramp *r, dlqb_drain_stop why);

#endif

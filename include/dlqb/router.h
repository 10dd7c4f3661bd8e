/* The daemon's routing loop: consume the failure inbox and send each
 * failed task to its delay queue or the DLQ, confirm before ack, with
 * reconnection. Audit and metrics plug in through dlqb_router_hooks. */
#ifndef DLQB_ROUTER_H
#define DLQB_ROUTER_H

#include <stdbool.h>

#include "dlqb/audit.h"
#include "dlqb/config.h"
#include "dlqb/error.h"
#include "dlqb/hop.h"
#include "dlqb/stop.h"

typedef struct {
  /* Every hop is recorded here, durably, before its original is acked.
   * NULL: audit off. */
  dlqb_audit *audit;
  /* Count a settled hop (metrics). */
  void (*after_ack)(void *ctx, const dlqb_hop *hop, double confirm_seconds);
  /* Connection state changes (metrics, health). */
  void (*on_connected)(void *ctx, int connected);
  void (*on_tick)(void *ctx);
  /* A session failed (may be NULL): why (one line, no password), and
   * whether a router that does not persist would return it (give_up: a
   * configuration the broker refuses, or a first contact that failed for
   * good). Health and the daemon's start rule use it. */
  void (*on_failure)(void *ctx, dlqb_status st, const char *why, bool give_up);
  void *ctx;
  /* True: nothing ends the run but *stop; every failure, give_up ones
   * included, is reported through on_failure and retried with capped
   * backoff (a daemon serving several pipelines: one pipeline's refused
   * permission or missing queue must not end the others). */
  bool persist;
} dlqb_router_hooks;

/* Runs until *stop is set, then finishes what is in flight and returns
 * DLQB_OK. Declares the topology on every (re)connect unless no_declare.
 * A session that ends with routes confirmed but not acked (waiting for the
 * audit trail) leaves them in memory (dlqb/memo.h, at most twice the
 * prefetch): when their originals come back, the next session acks them
 * without routing them again.
 * If the very first connection fails, returns its error (the caller exits
 * non-zero); later losses are retried with capped exponential backoff
 * (hooks->persist: every failure is). With `pipelines` in cfg the thread's
 * log lines name the pipeline served. */
dlqb_status dlqb_router_run(const dlqb_config *cfg, bool no_declare, const dlqb_router_hooks *hooks,
                            dlqb_stop_flag *stop, dlqb_error *err);

#endif

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
  void *ctx;
} dlqb_router_hooks;

/* Runs until *stop is set, then finishes what is in flight and returns
 * DLQB_OK. Declares the topology on every (re)connect unless no_declare.
 * If the very first connection fails, returns its error (the caller exits
 * non-zero); later losses are retried with capped exponential backoff. */
dlqb_status dlqb_router_run(const dlqb_config *cfg, bool no_declare,
                            const dlqb_router_hooks *hooks, dlqb_stop_flag *stop,
                            dlqb_error *err);

#endif

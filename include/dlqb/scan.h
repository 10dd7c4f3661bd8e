/* One bounded pass over a classic queue (the DLQ, compliance_review) on the
 * confirm-before-ack pipeline: the engine under replay, escalate, inspect,
 * resolve, stats and the daemon's SLA escalator.
 *
 * A pass covers the messages present when it starts: the queue's depth N
 * (passive declare) bounds it (pipe max_messages), so items that arrive
 * meanwhile wait for the next run. Each item goes to the caller's on_item,
 * which settles it through dlqb_scan_forward (move, confirm before ack),
 * dlqb_scan_ack (remove, e.g. resolve) or dlqb_scan_hold (leave it).
 * Held items stay unacked and return to the queue, in their places, when
 * the pass closes its connection: on a classic queue that changes neither
 * order nor counts.
 *
 * Held items are never acked, so each consumer's window (min(N, window)
 * unacked deliveries) fills with them; the pipe then adds another consumer
 * on the same channel (pipe option `deep`), so a pass reaches every item
 * at any depth while the window bounds only what is in flight. The client
 * keeps nothing per held item (the ack ring counts them); the broker keeps
 * them as unacked deliveries until the pass closes. We chose this over
 * requeueing unselected items at the tail because a requeue reorders the
 * DLQ and a crash in the middle of it would leave the order half-changed;
 * a crash here (SIGKILL, a cut connection, a broker restart) returns every
 * unacked item to its place.
 *
 * Every settled hop is recorded in the audit trail (when one is open)
 * before its original is acked, and nothing is moved while it cannot be
 * written; it carries the x-death and x-delivery-count of the message as
 * delivered (hop.h), as the router's hops do. */
#ifndef DLQB_SCAN_H
#define DLQB_SCAN_H

#include <stdbool.h>
#include <stdint.h>

#include "dlqb/audit.h"
#include "dlqb/catalog_stream.h"
#include "dlqb/config.h"
#include "dlqb/envelope.h"
#include "dlqb/hop.h"
#include "dlqb/pipe.h"
#include "dlqb/rewrite.h"
#include "dlqb/select.h"
#include "dlqb/stop.h"

#define DLQB_SCAN_WINDOW_DEFAULT 5000
#define DLQB_SCAN_WINDOW_MAX     65535

typedef struct dlqb_scan dlqb_scan;

typedef struct {
  const char *queue;   /* queue to pass over */
  const char *purpose; /* connection name, e.g. "dlq-bridge replay" */
  const char *actor;   /* who acts, copied into every hop */
  /* Whom the pass connects as; NULL: the config's own broker part (the
   * console's passes give the signed-in person's). */
  const dlqb_broker_conf *broker;
  dlqb_audit *audit; /* NULL: no audit trail */
  int window; /* in flight at once (each consumer's prefetch); 0 = DLQB_SCAN_WINDOW_DEFAULT */
  uint64_t max_items;   /* examine at most this many; 0 = the depth at start */
  long idle_stop_ms;    /* give up waiting for deliveries after this; 0 = 5000 */
  double rate;          /* forwards per second; 0 = unlimited */
  dlqb_stop_flag *stop; /* set by a signal handler or another thread; may be NULL */
  /* What the pass does while its audit trail cannot be written
   * (dlqb_pipe_audit_mode; *stop is the OUTWAIT give-up). Whatever the
   * mode, no item is moved once the writer is unhealthy: the pass holds
   * the rest and ends (audit_failed). */
  int audit_mode;
  /* Called for each item, in queue order; must settle d exactly once. */
  dlqb_status (*on_item)(void *ctx, dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                         dlqb_error *err);
  /* Called about once a second (progress). May be NULL. */
  void (*on_tick)(void *ctx, const dlqb_scan *s);
  /* Called after a hop's original was acked. May be NULL. */
  void (*after_ack)(void *ctx, const dlqb_hop *hop);
  void *ctx;
  /* Attached to every hop the pass records (an edit's pass); NULL: none. */
  const dlqb_hop_edit *edit;
  /* Kept by the caller across its passes (pipe option memory): an item
   * whose move a pass published and confirmed but could not ack (its
   * connection lost) is acked by a later pass against that copy, without
   * reaching on_item. NULL: none. */
  dlqb_memo *memory;
} dlqb_scan_options;

typedef struct {
  uint64_t depth_at_start; /* ready messages when the pass began */
  uint64_t examined;       /* items given to on_item */
  uint64_t forwarded;      /* published, confirmed and the original acked */
  uint64_t removed;        /* acked without a publish (resolve, skip as complete) */
  uint64_t remembered;     /* acked against a copy an earlier pass made (o->memory) */
  uint64_t held;           /* left in the queue by on_item */
  bool interrupted;        /* stopped by *stop */
  bool stopped;            /* stopped early by dlqb_scan_stop */
  bool short_read;         /* fewer items arrived than counted (someone else took them) */
  uint64_t refused;        /* selected but left in place: the broker would not take them as
                            * they are (dlqb_pipe_forward_rewritten's DLQB_EREFUSED) */
  bool audit_failed;       /* stopped early: the audit trail could not be written */
  /* Copies published whose originals were not acked (unconfirmed, or not
   * recorded): those originals stay in the queue, so each such copy may be
   * a duplicate. */
  uint64_t unsettled_copies;
  /* The broker refused the pass for want of permission (ACCESS_REFUSED on
   * the queue): a standing condition, not a passing one. */
  bool access_refused;
} dlqb_scan_result;

/* Runs one pass. Returns DLQB_OK when the pass ended (see res for why), or
 * the connection's error (e.g. DLQB_ECONN "cannot connect to broker at ...";
 * a missing queue is DLQB_EBROKER). res is filled in either case. */
dlqb_status dlqb_scan_run(const dlqb_config *cfg, const dlqb_scan_options *o, dlqb_scan_result *res,
                          dlqb_error *err);

/* Settles d by publishing a copy to `queue` (default exchange, mandatory,
 * persistent, no expiration) with the header changes in sets applied, then
 * acking d once confirmed. The hop (event, reason) is audited. Waits for a
 * --rate token first. cause is the hop's machine-readable category (hop.h:
 * "operator", "sla", "max_replays" for escalations, "" otherwise). */
dlqb_status dlqb_scan_forward(dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                              const char *queue, const dlqb_hset *sets, size_t nsets,
                              dlqb_event event, const char *cause, const char *reason,
                              dlqb_error *err);

/* Settles d by acking it with nothing published (audited). */
void dlqb_scan_ack(dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it, dlqb_event event,
                   const char *cause, const char *reason);

/* Settles d by leaving it in the queue. */
void dlqb_scan_hold(dlqb_scan *s, const dlqb_delivery *d);

/* Ends the pass after the current item (what is in flight completes). */
void dlqb_scan_stop(dlqb_scan *s);

/* Progress so far (for on_tick). */
void dlqb_scan_progress(const dlqb_scan *s, dlqb_scan_result *out);

#endif

/* The confirm-before-ack pipeline: consume one queue on the link's channel,
 * let a handler decide each delivery, republish with publisher confirms and
 * `mandatory`, and ack originals only once their republish is confirmed.
 * The daemon's router and every ops command that moves messages run on it.
 *
 * Many publishes are in flight at once (up to the prefetch window) and acks
 * go out in batches (`multiple`) for the contiguous confirmed prefix. A
 * basic.nack or basic.return ends the run with DLQB_EBROKER after acking
 * only what was confirmed before it; the caller reconnects, and the
 * unconfirmed originals are redelivered. Nothing unconfirmed is acked.
 *
 * With a memory (opt.memory, dlqb/memo.h) a run that ends with copies
 * confirmed but their originals not acked (waiting for the audit trail,
 * or their acks not yet sent) remembers them; when such an original comes
 * back (redelivered, the same identity: dlqb_wire_identity and the body's
 * SHA-256) a later run acks it once its record is durable instead of
 * handing it to the handler, which would publish it again. */
#ifndef DLQB_PIPE_H
#define DLQB_PIPE_H

#include <stdbool.h>
#include <stddef.h>

#include "dlqb/audit.h"
#include "dlqb/catalog_stream.h"
#include "dlqb/hop.h"
#include "dlqb/link.h"
#include "dlqb/memo.h"
#include "dlqb/rewrite.h"
#include "dlqb/stop.h"

typedef struct dlqb_pipe dlqb_pipe;

/* A publish the broker returned (basic.return: no queue took it), and the
 * hop it carried; valid during the on_returned call only. */
typedef struct {
  size_t index;                         /* its entry in the ack ring */
  const amqp_basic_properties_t *props; /* as published */
  amqp_bytes_t body;
  const dlqb_hop *hop; /* the hop that publish was for */
  const char *why;     /* one line: the broker's reply and the queue */
} dlqb_returned;

/* One delivery, valid only during the handler call. */
typedef struct {
  amqp_channel_t channel; /* the channel that delivered it: its tag is that channel's */
  uint64_t delivery_tag;
  bool redelivered;
  const amqp_basic_properties_t *props;
  amqp_bytes_t body;
} dlqb_delivery;

typedef struct {
  /* Called once per delivery; must settle it exactly once through
   * dlqb_pipe_forward, dlqb_pipe_ack or dlqb_pipe_hold before returning.
   * A non-OK return stops the run (the delivery stays unacked). */
  dlqb_status (*on_delivery)(void *ctx, dlqb_pipe *pipe, const dlqb_delivery *d, dlqb_error *err);
  /* Called after the ack is sent, with each hop's confirm latency in
   * seconds (negative when this run published nothing for it: nothing at
   * all, hop->to empty, or a copy an earlier run made, from the memory).
   * May be NULL. */
  void (*after_ack)(void *ctx, const dlqb_hop *hop, double confirm_seconds);
  /* Called about once a second while running. May be NULL. */
  void (*on_tick)(void *ctx);
  /* Called for a publish the broker returned; must settle it once through
   * dlqb_pipe_republish or dlqb_pipe_keep_returned. NULL: a return ends the
   * run (DLQB_EBROKER), as any refusal does. */
  dlqb_status (*on_returned)(void *ctx, dlqb_pipe *pipe, const dlqb_returned *ret, dlqb_error *err);
  void *ctx;
} dlqb_pipe_handler;

typedef struct {
  const char *queue;     /* queue to consume */
  int prefetch;          /* in-flight window, >= 1 */
  uint64_t max_messages; /* stop after this many deliveries are settled; 0 = no limit */
  /* Holds may exceed the prefetch: a pass over a deep queue adds consumers
   * as held deliveries fill them, so it reaches every message however
   * many it leaves in place (the prefetch then bounds what is in flight,
   * not what is held). They are spread over channels of the connection,
   * a few windows each, so that an ack never waits on the broker walking
   * every held delivery (with max_messages: as few windows a channel as
   * the broker's channel_max allows for that many). */
  bool deep;
  long idle_stop_ms; /* stop after this long without deliveries; 0 = never */
  /* Every hop is handed to this audit trail once its publish is confirmed,
   * and its original acked only once the record is durable. NULL: off. */
  dlqb_audit *audit;
  /* A consumer on a stream or ordered replay needs "x-stream-offset" etc.:
   * optional consume arguments. */
  const amqp_table_t *consume_args;
  /* What the run does while the audit trail cannot be written
   * (dlqb_audit_healthy false): see dlqb_pipe_audit_mode. */
  int audit_mode;
  /* DLQB_PIPE_AUDIT_OUTWAIT only: once set, a drain stops waiting for the
   * audit trail (shutdown). May be NULL: it waits as long as it takes. */
  dlqb_stop_flag *audit_give_up;
  /* The caller's, kept across its runs (reconnects) with the same audit
   * trail: see above. A delivery it matches never reaches on_delivery.
   * NULL: nothing is remembered (each delivery costs no hash). */
  dlqb_memo *memory;
  /* The catalog of the queues this pipe puts items into or takes them out
   * of (dlqb/catalog.h); NULL: none. Every hop whose `to` it catalogues
   * has its "in" published before its copy and confirmed before its
   * original is acked; every hop whose `from` it catalogues has its "out"
   * published once its original's ack is sent. When its stream is not
   * declared, the pipe runs without it (a warning). */
  const dlqb_catalog_target *catalog;
  /* The queue is a quorum queue: what the run held goes back in the order
   * it came, in small nacks (a quorum queue takes it back in the order it
   * is given, and a nack of many tags comes back in none: see
   * dlqb_pipe_return_held). false: a classic queue, which restores its own
   * order, given back in large nacks. */
  bool return_in_order;
  /* With an audit trail: every copy's intent (DLQB_EV_MOVE_STARTED) is
   * handed to it first and the copy published only once that record is
   * durable, so a mover killed at any moment leaves every copy the broker
   * may hold in the trail, as an intent or its hop. The writer groups the
   * intents of a window into one sync. The movers' passes (dlqb/scan.h)
   * set it; the router, whose originals return to dsr.failed and are routed
   * again, does not. */
  bool record_intents;
} dlqb_pipe_options;

enum dlqb_pipe_audit_mode {
  /* The router: go on; nothing is acked until the log is written, the
   * window fills and the broker waits; a drain gives up after 30 s. */
  DLQB_PIPE_AUDIT_HOLD = 0,
  /* Ops commands: end the run at once with DLQB_EIO and the writer's
   * reason; the unacked originals go back to their queue. */
  DLQB_PIPE_AUDIT_FAIL_FAST,
  /* The escalator: a drain does not time out on entries that are
   * confirmed and wait only for the audit trail; they are acked once it is
   * written, so what was in flight is not published again. */
  DLQB_PIPE_AUDIT_OUTWAIT,
};

/* A message's identity as the memory matches it: SHA-256 over its
 * properties as dlqb_wire_identity feeds them (the headers a queue rewrites
 * on redelivery left out), then its body's length and bytes. False when it
 * has none (a header it cannot walk, or OpenSSL failed). */
bool dlqb_pipe_identity(const amqp_basic_properties_t *props, amqp_bytes_t body,
                        uint8_t out[DLQB_MEMO_ID_LEN]);

/* Creates a pipe on an open link (puts its channel in confirm mode and sets
 * the prefetch). Frees nothing of the link. */
dlqb_status dlqb_pipe_new(dlqb_link *link, const dlqb_pipe_options *opt, const dlqb_pipe_handler *h,
                          dlqb_pipe **out, dlqb_error *err);
void dlqb_pipe_free(dlqb_pipe *pipe);

/* Consumes until *stop is set (then cancels the consumer, finishes what is
 * in flight and returns DLQB_OK), until max_messages or idle_stop_ms is
 * reached (DLQB_OK), or until the connection fails (DLQB_ECONN /
 * DLQB_EBROKER: the caller reconnects). HOLD deliveries return to the
 * queue, in their order, when the caller closes the link (aborts it), or
 * first, awaited, with dlqb_pipe_return_held. Deliveries that
 * arrive after a stop or the limit are held without the handler; those
 * that arrive after a cancel sent only for idle_stop_ms (the broker gave
 * them before it handled the cancel) go to the handler like any other. */
dlqb_status dlqb_pipe_run(dlqb_pipe *pipe, dlqb_stop_flag *stop, dlqb_error *err);

/* Waits us microseconds inside the handler (a --rate pause before the
 * current delivery is settled) while the pipe goes on reading: confirms,
 * returns and acks of earlier deliveries are handled (so what is moved is
 * counted as it happens, not after the deliveries queued ahead of the
 * confirms on the socket), on_tick runs each second, and deliveries that
 * arrive are kept (copied, up to a window of them) and handed to the
 * handler after the current one, in order. Ends early when *stop is set.
 * DLQB_OK, or the connection's failure (as dlqb_pipe_run). */
dlqb_status dlqb_pipe_pause(dlqb_pipe *pipe, int64_t us, const dlqb_stop_flag *stop,
                            dlqb_error *err);

/* Settles d by publishing (exchange, routing_key, props, body) with
 * mandatory; hop is copied and reported when the original is acked. */
dlqb_status dlqb_pipe_forward(dlqb_pipe *pipe, const dlqb_delivery *d, const char *exchange,
                              const char *routing_key, const amqp_basic_properties_t *props,
                              amqp_bytes_t body, const dlqb_hop *hop, dlqb_error *err);

/* dlqb_pipe_forward of d's own body, with d's headers rewritten by sets
 * (dlqb_headers_apply) into a table the pipe reuses. props starts as the
 * caller's copy of d->props with its changes; its headers are replaced. */
dlqb_status dlqb_pipe_forward_rewritten(dlqb_pipe *pipe, const dlqb_delivery *d,
                                        const char *exchange, const char *routing_key,
                                        amqp_basic_properties_t *props, const dlqb_hset *sets,
                                        size_t nsets, const dlqb_hop *hop, dlqb_error *err);

/* dlqb_pipe_forward_rewritten keeps what the broker would refuse from
 * reaching it: a user_id property of another broker user moves into the
 * original_user_id header; headers that no longer fit one frame with the
 * changes are DLQB_EREFUSED, with nothing sent and d still unsettled. */

/* For a task the broker would not take back as it is (DLQB_EREFUSED): the
 * same, but keeping only the headers the bridge knows (the envelope and its
 * stamps, each of at most 2 KiB) and the message_id, timestamp and content
 * type; dropped_headers says how many were left off. */
dlqb_status dlqb_pipe_forward_minimal(dlqb_pipe *pipe, const dlqb_delivery *d, const char *exchange,
                                      const char *routing_key, amqp_basic_properties_t *props,
                                      const dlqb_hset *sets, size_t nsets, const dlqb_hop *hop,
                                      dlqb_error *err);

/* Settles a returned publish by publishing its message again (with sets
 * applied to its headers, as dlqb_pipe_forward_minimal does) to
 * routing_key: its original is acked once that one is confirmed and hop
 * recorded. */
dlqb_status dlqb_pipe_republish(dlqb_pipe *pipe, const dlqb_returned *ret, const char *exchange,
                                const char *routing_key, amqp_basic_properties_t *props,
                                const dlqb_hset *sets, size_t nsets, const dlqb_hop *hop,
                                dlqb_error *err);

/* Settles a returned publish by leaving its original where it was: never
 * acked, nothing recorded. */
void dlqb_pipe_keep_returned(dlqb_pipe *pipe, const dlqb_returned *ret);

/* Settles d by acking it with nothing published (resolve, skip as complete). */
void dlqb_pipe_ack(dlqb_pipe *pipe, const dlqb_delivery *d, const dlqb_hop *hop);

/* Settles d by leaving it unacked: it returns to the queue when the link
 * closes (replay's unselected items). */
void dlqb_pipe_hold(dlqb_pipe *pipe, const dlqb_delivery *d);

/* After dlqb_pipe_run, when the link is to be closed (not aborted): puts
 * every delivery still unacked back in its queue, in the queue's order, on
 * every channel the run consumed on, closes those besides the link's own,
 * and waits (up to a minute) until the queue's depth shows them back, so
 * that the next look sees the whole queue. */
void dlqb_pipe_return_held(dlqb_pipe *pipe);

/* Counters since dlqb_pipe_new; remembered: deliveries settled against
 * the memory (not given to on_delivery, counted in acked once acked);
 * channels: the channels consumed on (a deep pass spreads what it holds
 * over several: pipe.c, add_consumer_if_full). */
typedef struct {
  uint64_t delivered, forwarded, acked, held, remembered, channels;
} dlqb_pipe_stats;
void dlqb_pipe_get_stats(const dlqb_pipe *pipe, dlqb_pipe_stats *out);

#endif

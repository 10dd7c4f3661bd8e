/* Depth and oldest-message age of the bridge's queues, read over a link
 * without disturbing them: the daemon's metrics refresher and the `stats`
 * ops command both use it, so they report the same numbers.
 *
 * Depth is the message count of a passive queue.declare: messages ready for
 * delivery, not those delivered to a consumer and not yet acked.
 *
 * Oldest-message age, by queue type:
 *  - the DLQ and review queue (dsr.dlq.manual, compliance_review), quorum
 *    or classic, and any other classic queue: the head message is peeked
 *    with basic.get (manual ack) and put back with basic.nack(requeue),
 *    which returns it to the head of the queue: a classic queue always,
 *    a quorum queue because it has a delivery limit (measured on 3.10.8
 *    and 4.0.5: with none, 3.10's quorum queues put it at the tail). A
 *    classic queue keeps no delivery count; on a quorum one each peek adds
 *    one to the head's, which its unreachable limit makes harmless
 *    (docs/architecture.md, "Delivery counts on the DLQ").
 *    The age is measured from the head's stamp (dlqb_queue_head_stamp);
 *    when the head has no usable one (none, or a time too far in the
 *    future), from the first usable stamp among the next few messages: the
 *    queue is FIFO, so that is a lower bound on the head's age.
 *  - the other quorum queues (dsr.work, dsr.failed, dsr.retry.*): never peeked. A requeue
 *    bumps x-delivery-count, and dsr.work's delivery limit of 1 would turn
 *    a peeked task into poison. The age is the time since the queue was
 *    last seen with no ready messages: every message in it arrived after
 *    that, so it is an upper bound on the oldest one's age. It is unknown
 *    until the queue has been seen empty once (by the same tracker).
 *  - streams (dsr.completed, the ledger) are not tracked: their message
 *    count is the ledger's length, not a backlog.
 * A peeked queue whose head carries no stamp falls back to that rule. Not thread-safe: one tracker per link, used by one thread. */
#ifndef DLQB_QUEUE_STATS_H
#define DLQB_QUEUE_STATS_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"
#include "dlqb/link.h"
#include "dlqb/topology.h"

typedef enum {
  DLQB_AGE_UNKNOWN,    /* no stamp on the head and never seen empty */
  DLQB_AGE_EMPTY,      /* the queue is empty: age 0 */
  DLQB_AGE_HEAD,       /* measured from the head message's stamp */
  DLQB_AGE_EMPTY_SINCE /* upper bound: time since last seen empty */
} dlqb_age_source;

typedef struct {
  char queue[DLQB_NAME_MAX];
  dlqb_qtype type;
  bool present;   /* false: the queue does not exist; nothing below is valid */
  uint32_t depth; /* ready messages */
  uint32_t consumers;
  dlqb_age_source age_source;
  double oldest_age_seconds; /* >= 0; valid unless age_source is DLQB_AGE_UNKNOWN */
} dlqb_queue_stat;

/* Reads one queue on link into *out. last_empty_ms carries the "last seen
 * empty" time (epoch ms, 0 = never) between calls for the same queue: pass
 * the same variable every time, or NULL for a one-off read (a quorum
 * queue's age is then known only when it is empty). A missing queue gives
 * DLQB_OK with out->present false (the link stays usable). DLQB_ECONN or
 * DLQB_ETIMEOUT: the link is unusable; abort it. */
dlqb_status dlqb_queue_stat_read(dlqb_link *link, const dlqb_queue_spec *spec, int64_t now_ms,
                                 int64_t *last_empty_ms, dlqb_queue_stat *out, dlqb_error *err);

/* When the head message entered its current queue, from its properties: the
 * later of its dlq_at and escalated_at headers (ISO-8601 UTC), else its
 * AMQP timestamp property, else x-death[0].time (the broker's clock).
 * Only times usable at now_ms count (dlqb_time_usable: a forged year 9999
 * is skipped, never read as age 0). False when none does. Pure. */
bool dlqb_queue_head_stamp(const amqp_basic_properties_t *props, int64_t now_ms, int64_t *epoch_ms);

/* A tracker over every non-stream queue of a topology, remembering when each
 * was last seen empty. */
typedef struct dlqb_queue_stats dlqb_queue_stats;

/* Copies what it needs from topo. NULL when out of memory. Free with
 * dlqb_queue_stats_free (NULL-safe). */
dlqb_queue_stats *dlqb_queue_stats_new(const dlqb_topology *topo);
void dlqb_queue_stats_free(dlqb_queue_stats *s);

/* Reads every tracked queue (dlqb_queue_stat_read). On failure the results
 * are partial: do not publish them. */
dlqb_status dlqb_queue_stats_refresh(dlqb_queue_stats *s, dlqb_link *link, int64_t now_ms,
                                     dlqb_error *err);

/* The results of the last refresh, in topology order; valid until the next
 * refresh or free. */
size_t dlqb_queue_stats_count(const dlqb_queue_stats *s);
const dlqb_queue_stat *dlqb_queue_stats_results(const dlqb_queue_stats *s);

#endif

/* The broker topology dlq-bridge relies on, as data: queues with their
 * arguments, exchanges and bindings. `declare`, `run` and the definitions
 * export all read this one description, so they cannot drift apart.
 *
 *   producers -> dsr.work (quorum, delivery limit, DLX dsr.dlx)
 *   worker reject / crash limit -> dsr.dlx (fanout) -> dsr.failed (quorum)
 *   bridge: dsr.failed -> dsr.retry.<delay> (quorum, per-message TTL,
 *           dead-letters back to dsr.work) or -> dsr.dlq.manual (classic)
 *   ops: dsr.dlq.manual -> dsr.work (replay) or -> compliance_review
 *   workers: done -> dsr.completed (stream, the completion ledger) */
#ifndef DLQB_TOPOLOGY_H
#define DLQB_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#include "dlqb/config.h"
#include "dlqb/error.h"
#include "dlqb/names.h" /* the queue and exchange names */

/* A failure-inbox message that the bridge itself could not settle this many
 * times (crash, lost connection) goes to the DLQ through the broker. */
#define DLQB_FAILED_DELIVERY_LIMIT 20

/* The delivery limit of the DLQ and review queue as quorum queues: one no
 * read can reach (see topology.c's held_queue and docs/architecture.md,
 * "Delivery counts on the DLQ"): measured on 3.10.8 and 4.0.5. */
#define DLQB_HELD_DELIVERY_LIMIT INT64_C(2147483647)

#define DLQB_TOPO_MAX_ARGS 8
/* Per pipeline: work, failed, the delays, DLQ, review, the safety queue,
 * ledger, catalog; and the anchors stream, shared. */
#define DLQB_TOPO_MAX_QUEUES    ((8 + DLQB_MAX_RETRY_DELAYS) * DLQB_MAX_PIPELINES + 1)
#define DLQB_TOPO_MAX_EXCHANGES DLQB_MAX_PIPELINES
#define DLQB_NAME_MAX           64

typedef enum { DLQB_QTYPE_QUORUM, DLQB_QTYPE_CLASSIC, DLQB_QTYPE_STREAM } dlqb_qtype;
typedef enum { DLQB_ARG_STR, DLQB_ARG_INT } dlqb_arg_kind;

typedef struct {
  const char *key;
  dlqb_arg_kind kind;
  char str[DLQB_NAME_MAX];
  int64_t num;
} dlqb_queue_arg;

typedef struct {
  char name[DLQB_NAME_MAX];
  dlqb_qtype type;
  const char *purpose; /* one line, for docs and `declare` output */
  dlqb_queue_arg args[DLQB_TOPO_MAX_ARGS];
  size_t nargs;
  char bind_exchange[DLQB_NAME_MAX]; /* "": reached through the default exchange only */
  /* A DLQ or review queue: what a person still has to act on. Its head is
   * peeked for the oldest age (dlqb/queue_stats.h), and, declared quorum,
   * an existing classic queue of its name (an older deployment's) is kept
   * as it is, with a warning (dlqb_topology_declare), until `migrate`
   * moves its items. */
  bool holds_items;
} dlqb_queue_spec;

typedef struct {
  dlqb_queue_spec queues[DLQB_TOPO_MAX_QUEUES];
  size_t nqueues;
  char exchanges[DLQB_TOPO_MAX_EXCHANGES][DLQB_NAME_MAX]; /* fanouts: each pipeline's DLX */
  size_t nexchanges;
} dlqb_topology;

/* Describes the topology of every pipeline of cfg (dlqb_config_pipeline;
 * without `pipelines` the dsr one: today's topology exactly), then the
 * shared audit anchors stream. A pipeline's retry delay queues follow its
 * retry_delays; its work queue's delivery limit its poison_threshold. Pure. */
void dlqb_topology_build(const dlqb_config *cfg, dlqb_topology *out);

/* dlqb_topology_build into a new heap block (free() it), or NULL when out of
 * memory. A topology is about 150 KB (every pipeline's queues): callers keep
 * it off their stacks, which also decode broker frames (dlqb/thread.h). */
dlqb_topology *dlqb_topology_new(const dlqb_config *cfg);

/* Appends pipeline p's exchange and queues to t (the anchors stream is
 * dlqb_topology_build's). Pure. */
void dlqb_topology_add_pipeline(dlqb_topology *t, const dlqb_pipeline *p);

/* The safety queue of p: its DLQ's name + DLQB_DROPPED_SUFFIX
 * ("dsr.dlq.manual.dropped"), where a quorum DLQ and review queue
 * dead-letter what the broker would otherwise drop from them (a policy's
 * delivery limit, TTL or length: see topology.c's held_queue). A DLQ name
 * is cut to leave room for the suffix. Returns buf. */
#define DLQB_DROPPED_SUFFIX ".dropped"
char *dlqb_dropped_queue_name(const dlqb_pipeline *p, char *buf, size_t len);

/* Name of the delay queue for a delay: "dsr.retry.5s". */
char *dlqb_retry_queue_name(uint64_t delay_ms, char *buf, size_t len);

/* The same for pipeline p: its retry prefix + the delay. */
char *dlqb_pipeline_retry_queue_name(const dlqb_pipeline *p, uint64_t delay_ms, char *buf,
                                     size_t len);

/* Writes the topology in RabbitMQ's definitions format (JSON) for vhost,
 * the vhost itself included (a node importing definitions at boot creates no
 * default vhost). *json_out is malloc'd; the caller frees it. */
dlqb_status dlqb_topology_definitions(const dlqb_topology *topo, const char *vhost, char **json_out,
                                      dlqb_error *err);

#endif

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

#define DLQB_TOPO_MAX_ARGS 8
#define DLQB_TOPO_MAX_QUEUES (7 + DLQB_MAX_RETRY_DELAYS)
#define DLQB_NAME_MAX 64

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
  const char *bind_exchange; /* NULL: reached through the default exchange only */
} dlqb_queue_spec;

typedef struct {
  dlqb_queue_spec queues[DLQB_TOPO_MAX_QUEUES];
  size_t nqueues;
} dlqb_topology;

/* Describes the topology for cfg (retry delay queues follow
 * cfg->retry_delays_ms; the work queue's delivery limit follows
 * cfg->poison_threshold). Pure. */
void dlqb_topology_build(const dlqb_config *cfg, dlqb_topology *out);

/* Name of the delay queue for a delay: "dsr.retry.5s". */
char *dlqb_retry_queue_name(uint64_t delay_ms, char *buf, size_t len);

/* Writes the topology in RabbitMQ's definitions format (JSON) for vhost,
 * the vhost itself included (a node importing definitions at boot creates no
 * default vhost). *json_out is malloc'd; the caller frees it. */
dlqb_status dlqb_topology_definitions(const dlqb_topology *topo, const char *vhost,
                                      char **json_out, dlqb_error *err);

#endif

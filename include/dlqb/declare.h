/* Declaring the topology on a broker: the one step of `declare` and of the
 * daemon's start that changes the broker's configuration. */
#ifndef DLQB_DECLARE_H
#define DLQB_DECLARE_H

#include <stdbool.h>

#include "dlqb/error.h"
#include "dlqb/link.h"
#include "dlqb/topology.h"

/* The queues a declare kept as they were instead of as configured: a DLQ
 * or review queue (spec holds_items) to be quorum that exists as a classic
 * queue, as every deployment before quorum ones declared it. A queue's
 * type cannot change in place; `dlq-bridge migrate` moves the items. */
#define DLQB_DECLARED_MAX (2 * DLQB_MAX_PIPELINES) /* each pipeline's DLQ and review queue */
typedef struct {
  char classic[DLQB_DECLARED_MAX][DLQB_NAME_MAX];
  size_t nclassic;
} dlqb_declared;

/* Declares every exchange, queue and binding, idempotently. A queue or
 * exchange that exists with other arguments is DLQB_ECONFLICT with the
 * broker's one-line reason, except for the kept classic queues above,
 * listed in *out (NULL: not reported); nothing is ever deleted or purged. */
dlqb_status dlqb_topology_declare(dlqb_link *link, const dlqb_topology *topo, dlqb_declared *out,
                                  dlqb_error *err);

/* Declares one queue as spec says, under the name `name` (a holding
 * queue of the same kind: `migrate`'s). Errors as dlqb_topology_declare's. */
dlqb_status dlqb_queue_declare_as(dlqb_link *link, const dlqb_queue_spec *spec, const char *name,
                                  dlqb_error *err);

/* Deletes queue, only when it holds no ready message and has no consumer:
 * the broker checks both (if-empty, if-unused), unless checked (a quorum
 * queue refuses if-empty by closing the connection: measured on 3.10.8
 * and 4.0.5; the caller then read both with a passive declare and nothing
 * else can put items there). DLQB_ECONFLICT when the broker refuses (its
 * reason in err). */
dlqb_status dlqb_queue_delete_unused(dlqb_link *link, const char *queue, bool checked,
                                     dlqb_error *err);

/* Whether queue exists as a classic queue: a declare as classic with no
 * arguments is taken (DLQB_OK, *classic true), refused as inequivalent
 * (*classic false: quorum or stream). DLQB_EBROKER when there is no such
 * queue (a passive declare first, so nothing is created). */
dlqb_status dlqb_queue_is_classic(dlqb_link *link, const char *queue, bool *classic,
                                  dlqb_error *err);

#endif

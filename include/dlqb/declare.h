/* Declaring the topology on a broker: the one step of `declare` and of the
 * daemon's start that changes the broker's configuration. */
#ifndef DLQB_DECLARE_H
#define DLQB_DECLARE_H

#include "dlqb/error.h"
#include "dlqb/link.h"
#include "dlqb/topology.h"

/* Declares every exchange, queue and binding, idempotently. A queue or
 * exchange that exists with other arguments is DLQB_ECONFLICT with the
 * broker's one-line reason; nothing is ever deleted or purged. */
dlqb_status dlqb_topology_declare(dlqb_link *link, const dlqb_topology *topo, dlqb_error *err);

#endif

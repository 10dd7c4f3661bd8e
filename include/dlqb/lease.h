/* A lease held on the broker for as long as one connection lives: an
 * exclusive, auto-deleted queue. The broker lets only one connection own
 * an exclusive queue; another connection declaring it is refused with
 * 405 RESOURCE_LOCKED (measured on RabbitMQ 3.10.8 and 4.0.5,
 * tests/broker/test_drain.c), and the queue goes when its owner's
 * connection closes or dies (SIGKILL, a cut network, a broker restart), so
 * a crashed holder never leaves a stale lock behind. `dlq-bridge drain run`
 * takes one so that two hosts running the same timer do not both drain. */
#ifndef DLQB_LEASE_H
#define DLQB_LEASE_H

#include "dlqb/config.h"
#include "dlqb/error.h"

typedef struct dlqb_lease dlqb_lease;

/* Opens a connection of its own (named `purpose`) and declares the queue
 * `name` exclusive. DLQB_ECONFLICT when another connection holds it (its
 * message says so); other errors as dlqb_link_open's. *out is NULL on
 * failure. */
dlqb_status dlqb_lease_take(const dlqb_config *cfg, const char *name, const char *purpose,
                            dlqb_lease **out, dlqb_error *err);

/* Whether the lease's connection still answers (a passive declare of its
 * queue): false once the broker or the network dropped it, after which
 * the lease is no longer held. */
bool dlqb_lease_held(dlqb_lease *l);

/* Closes the connection, which releases the lease. NULL-safe. */
void dlqb_lease_release(dlqb_lease *l);

#endif

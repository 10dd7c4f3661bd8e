/* A lease held on the broker for as long as one connection lives: an
 * exclusive, auto-deleted queue. The broker lets only one connection own
 * an exclusive queue; another connection declaring it is refused with
 * 405 RESOURCE_LOCKED (measured on RabbitMQ 3.10.8 and 4.0.5,
 * tests/broker/test_drain.c), and the queue goes when its owner's
 * connection closes or dies (SIGKILL, a cut network, a broker restart), so
 * a crashed holder never leaves a stale lock behind. `dlq-bridge drain run`
 * takes one so that two hosts running the same timer do not both drain.
 *
 * The connection must stay busy to stay alive: the broker drops a client
 * silent for two heartbeats (60 s), and a drain's pass can be longer than
 * that. So a thread of the lease's own looks at its queue every few
 * seconds (a passive declare, which also carries the heartbeats) and, the
 * moment the broker does not answer, marks the lease lost and sets the
 * caller's stop flag: the holder stops at once rather than go on while
 * another host may already hold the lease. */
#ifndef DLQB_LEASE_H
#define DLQB_LEASE_H

#include <stdbool.h>

#include "dlqb/config.h"
#include "dlqb/error.h"
#include "dlqb/stop.h"

/* How often the lease's thread looks (and keeps the connection busy). */
#define DLQB_LEASE_BEAT_MS 5000

typedef struct dlqb_lease dlqb_lease;

/* Opens a connection of its own (named `purpose`), declares the queue
 * `name` exclusive and starts the keeper thread; on_loss (may be NULL) is
 * set to 1 when the lease is lost. DLQB_ECONFLICT when another connection
 * holds it (its message says so); other errors as dlqb_link_open's. *out is
 * NULL on failure. */
dlqb_status dlqb_lease_take(const dlqb_config *cfg, const char *name, const char *purpose,
                            dlqb_stop_flag *on_loss, dlqb_lease **out, dlqb_error *err);

/* False once the keeper found the connection gone (no I/O here). */
bool dlqb_lease_held(const dlqb_lease *l);

/* Stops the keeper and closes the connection, which releases the lease.
 * NULL-safe. */
void dlqb_lease_release(dlqb_lease *l);

#endif

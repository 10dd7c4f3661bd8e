/* Audit anchors off the host: a writer's signed head (dlqb_audit_anchor)
 * appended to the stream dsr.audit.anchors, where the writer's host can
 * append but not delete, and read back by `audit verify --anchors`
 * (docs/audit.md, "Anchors"). The audit layer never talks to the broker;
 * this is where its head meets a connection. */
#ifndef DLQB_ANCHOR_H
#define DLQB_ANCHOR_H

#include <stdbool.h>
#include <stddef.h>

#include "dlqb/audit.h"
#include "dlqb/config.h"
#include "dlqb/error.h"

typedef struct dlqb_anchor_pub dlqb_anchor_pub;

/* How long a publish waits for its confirm (and a connection attempt for
 * the broker) before it counts as failed. */
#define DLQB_ANCHOR_CONFIRM_MS 5000

/* Starts a thread that, every cfg->audit.anchor_interval_ms, publishes a's
 * head when it changed since the last confirmed anchor, over a connection
 * of its own, with a publisher confirm. It never blocks the writer or the
 * acks: a broker that cannot take an anchor is logged once
 * (anchor_failing), reported by dlqb_anchor_health, and retried at the
 * next interval on a fresh connection (the next anchor covers everything
 * the missed ones did). *out is NULL (DLQB_OK) when a is NULL or the
 * interval is 0. It connects as broker (NULL: cfg->broker, dlqb_config_broker);
 * cfg and broker must outlive the publisher (until dlqb_anchor_stop).
 * held: no attempt until dlqb_anchor_release (the daemon's, until its
 * router has declared the topology: before that a missing stream is the
 * daemon's own start order, not an outage to log). Fails only for lack of
 * memory or threads. */
dlqb_status dlqb_anchor_start(const dlqb_config *cfg, const dlqb_broker_conf *broker, dlqb_audit *a,
                              bool held, dlqb_anchor_pub **out, dlqb_error *err);

/* Lets a held publisher (dlqb_anchor_start) make its attempts from now on;
 * idempotent, thread-safe, NULL-safe. */
void dlqb_anchor_release(dlqb_anchor_pub *p);

/* True when the last anchor attempt succeeded (or none was due); else why
 * (one line) into why[0..len) when why is not NULL. NULL p: true. */
bool dlqb_anchor_health(dlqb_anchor_pub *p, char *why, size_t len);

/* Stops the thread, then publishes the head once more when it changed
 * since the last confirmed anchor (call it after dlqb_audit_end, so that
 * the chain_end is anchored), and frees. DLQB_OK when the last head is
 * anchored; otherwise the failure (the records are safe on disk; they are
 * only not anchored). NULL-safe. */
dlqb_status dlqb_anchor_stop(dlqb_anchor_pub *p, dlqb_error *err);

/* Appends one message (a checkpoint or a cosignature, docs/audit.md) to
 * dsr.audit.anchors over a connection of its own named purpose, as an
 * anchor is published (persistent, mandatory, the user as user_id, one
 * confirm within DLQB_ANCHOR_CONFIRM_MS), then waits (up to 30 s) until the
 * stream's message count, up to which readers read, shows it: a `prove`
 * or `witness` run right after sees it. */
dlqb_status dlqb_anchor_append(const dlqb_config *cfg, const char *purpose, const char *line,
                               size_t len, dlqb_error *err);

/* Reads every message of the stream from its first offset up to the end
 * as of the start of the read (its message count then; a message appended
 * meanwhile may be read too) into out, oldest first, over a connection of
 * its own. A message that does not arrive within idle_ms is DLQB_ETIMEOUT;
 * a missing stream DLQB_EBROKER. Messages larger than DLQB_AUDIT_ANCHOR_MAX
 * are kept as they are for verify to count as not anchors. */
dlqb_status dlqb_anchor_read(const dlqb_config *cfg, const char *stream, dlqb_audit_lines *out,
                             long idle_ms, dlqb_error *err);

#endif

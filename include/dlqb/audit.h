/* The tamper-evident audit trail: one JSON line per hop, each carrying an
 * HMAC-SHA256 over its content and the previous record's MAC of the same
 * writer's chain. Records are written and fsync'd before the originals of
 * their hops are acked (the pipe's before_ack point), one fsync per batch.
 *
 * Several writers (bridge instances, ops commands) may append to one log;
 * each has its own chain, and `dlq-bridge audit verify` checks them all.
 * Never records payloads or credentials. */
#ifndef DLQB_AUDIT_H
#define DLQB_AUDIT_H

#include <stddef.h>

#include "dlqb/config.h"
#include "dlqb/error.h"
#include "dlqb/hop.h"

typedef struct dlqb_audit dlqb_audit;

/* Opens the log at cfg->audit_log with the key in cfg->audit_key_file
 * (refused when group or others may read it). When cfg->audit_log is ""
 * audit is off: *out is NULL and DLQB_OK is returned, and every other
 * function accepts the NULL handle and does nothing. `writer` names the
 * writer in its records (the bridge instance, or "replay@host:pid"). */
dlqb_status dlqb_audit_open(const dlqb_config *cfg, const char *writer, dlqb_audit **out,
                            dlqb_error *err);

/* Appends one record per hop and fsyncs once. On failure nothing may be
 * acked; a later call retries (the chain stays consistent: a record is
 * part of the chain only once it was fully written and synced). */
dlqb_status dlqb_audit_record(dlqb_audit *a, const dlqb_hop *const *hops, size_t n,
                              dlqb_error *err);

/* True when the last write succeeded (for /healthz). */
int dlqb_audit_healthy(const dlqb_audit *a);

void dlqb_audit_close(dlqb_audit *a);

#endif

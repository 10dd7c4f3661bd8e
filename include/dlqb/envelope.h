/* The retry envelope: the task's identity and retry state, carried as AMQP
 * message headers so that it is readable in the management UI. This module
 * reads and rewrites header tables; it is pure (no I/O, no clock: callers
 * pass the time in) and allocates nothing.
 *
 * Header names (docs/envelope.md is the reference):
 *   request_id, source_system   required text, non-blank after trimming
 *   legal_basis                 gdpr_art_15 | gdpr_art_17 | ccpa_1798_105 | ccpa_1798_100
 *   action                      access | deletion | rectification
 *   attempt                     integer >= 0, default 0
 *   max_attempts                integer >= 1, default from config
 *   last_error                  text, at most 500 bytes
 *   first_seen_at               ISO-8601 UTC ("2026-11-30T05:09:48Z", optional
 *                               fraction), stamped by the bridge when absent
 *   replay_count                integer >= 0, set by replay
 *   worker_error                text a worker attaches when it reports a failure
 * Integers may be any AMQP integer type or a decimal string (the management
 * UI publishes headers as strings). */
#ifndef DLQB_ENVELOPE_H
#define DLQB_ENVELOPE_H

#include <amqp.h>
#include <stdbool.h>
#include <stdint.h>

#include "dlqb/error.h"

#define DLQB_ID_MAX 256         /* bytes of request_id / source_system */
#define DLQB_LAST_ERROR_MAX 500 /* bytes of last_error */
#define DLQB_ISO_TIME_MAX 40

#define DLQB_H_REQUEST_ID "request_id"
#define DLQB_H_SOURCE_SYSTEM "source_system"
#define DLQB_H_LEGAL_BASIS "legal_basis"
#define DLQB_H_ACTION "action"
#define DLQB_H_ATTEMPT "attempt"
#define DLQB_H_MAX_ATTEMPTS "max_attempts"
#define DLQB_H_LAST_ERROR "last_error"
#define DLQB_H_FIRST_SEEN_AT "first_seen_at"
#define DLQB_H_REPLAY_COUNT "replay_count"
#define DLQB_H_WORKER_ERROR "worker_error"
#define DLQB_H_DLQ_REASON "dlq_reason" /* machine-readable category, see policy.h */
#define DLQB_H_DLQ_AT "dlq_at"         /* ISO-8601 UTC time it entered the DLQ */

typedef struct {
  char request_id[DLQB_ID_MAX + 1];      /* trimmed */
  char source_system[DLQB_ID_MAX + 1];   /* trimmed */
  char legal_basis[16];
  char action[16];
  int64_t attempt;
  int64_t max_attempts;
  int64_t replay_count;
  bool has_last_error;
  char last_error[DLQB_LAST_ERROR_MAX + 1];
  bool has_first_seen_at;
  int64_t first_seen_at_ms;              /* Unix epoch milliseconds */
} dlqb_envelope;

/* Parses and validates the envelope in headers (NULL or empty allowed: then
 * required fields are missing). On failure returns DLQB_EINVAL with why->msg
 * naming the first problem, e.g. "legal_basis 'gdpr_art_99' is not one of
 * gdpr_art_15, gdpr_art_17, ccpa_1798_105, ccpa_1798_100". The text in why
 * never quotes more than 64 bytes of a header value and is valid UTF-8.
 * Duplicate envelope keys, wrong types, invalid UTF-8 and out-of-range
 * integers are all errors. out is fully written on success. */
dlqb_status dlqb_envelope_parse(const amqp_table_t *headers, int64_t default_max_attempts,
                                dlqb_envelope *out, dlqb_error *why);

/* How a message reached the failure inbox, read from its headers. */
typedef enum {
  DLQB_FAIL_REJECTED,       /* x-death reason "rejected": basic.reject/nack */
  DLQB_FAIL_DELIVERY_LIMIT, /* x-death reason "delivery_limit": poison */
  DLQB_FAIL_EXPIRED,        /* x-death reason "expired" (a TTL on the work queue) */
  DLQB_FAIL_MAXLEN,         /* x-death reason "maxlen" */
  DLQB_FAIL_REPORTED        /* no x-death: a worker published it with worker_error */
} dlqb_failure_kind;

typedef struct {
  dlqb_failure_kind kind;
  char queue[128];          /* x-death[0].queue, "" when absent */
  bool has_worker_error;
  char worker_error[DLQB_LAST_ERROR_MAX + 1]; /* sanitised to printable UTF-8 */
} dlqb_failure;

/* Reads x-death[0] (the most recent death; the broker keeps it first) and
 * worker_error. An x-death[0] that is an expiry from a dsr.retry.* delay
 * queue is backoff history (a worker's copy of a retried task), so such a
 * message counts as DLQB_FAIL_REPORTED. Never fails: malformed x-death (wrong type, empty array,
 * missing reason) yields DLQB_FAIL_REPORTED with queue "", and the envelope
 * check decides separately whether the message is valid. */
void dlqb_failure_read(const amqp_table_t *headers, dlqb_failure *out);

/* One header change for dlqb_headers_apply. */
typedef enum { DLQB_HSET_REMOVE, DLQB_HSET_STRING, DLQB_HSET_INT } dlqb_hset_kind;
typedef struct {
  const char *key;
  dlqb_hset_kind kind;
  const char *str; /* DLQB_HSET_STRING: must outlive the output table */
  int64_t num;     /* DLQB_HSET_INT */
} dlqb_hset;

/* Writes into out a copy of in (NULL allowed) with sets applied: a key that
 * exists is replaced in place (later duplicates of it dropped), a new key is
 * appended, a removed key is dropped. out->entries points into scratch
 * (cap entries); values of untouched entries alias in. Returns DLQB_EINVAL
 * when scratch is too small. */
dlqb_status dlqb_headers_apply(const amqp_table_t *in, const dlqb_hset *sets, size_t nsets,
                               amqp_table_entry_t *scratch, size_t cap, amqp_table_t *out);

/* Header-table access for every module that reads headers (selection,
 * the completion ledger, queue ages), so they read tables as the envelope
 * parser does. All NULL-safe. */

/* The value of the first entry named key, or NULL. */
const amqp_field_value_t *dlqb_header_find(const amqp_table_t *t, const char *key);

/* The bytes of a string-kinded value (UTF-8 or byte string); false for any
 * other kind or a NULL v. A NULL pointer (legal only with length 0) reads
 * as empty. */
bool dlqb_field_text(const amqp_field_value_t *v, amqp_bytes_t *out);

/* The value of an integer-kinded field (any width; a u64 above INT64_MAX
 * is refused), or of a string of decimal digits, since the management UI
 * sends every header as a string. False for anything else or a NULL v. */
bool dlqb_field_int(const amqp_field_value_t *v, int64_t *out);

/* The first `key` header as an identifier: trimmed of ASCII whitespace as
 * the envelope parser trims request_id, then sanitised into dst (cap
 * bytes). False when absent, not a string, or blank. */
bool dlqb_header_id(const amqp_table_t *t, const char *key, char *dst, size_t cap);

/* The first `key` header as an ISO-8601 time (dlqb_iso_time_parse) in
 * epoch ms; false when absent, not a string, or malformed. */
bool dlqb_header_time(const amqp_table_t *t, const char *key, int64_t *epoch_ms);

/* The broker's latest death record, x-death[0], or NULL when the header is
 * absent or not an array whose first entry is a table. */
const amqp_table_t *dlqb_header_first_death(const amqp_table_t *t);

/* True when an x-death header is present but is not a non-empty array of
 * tables, the only shape the broker writes: a client forged it. (RabbitMQ
 * 3.10.8's quorum-queue dead-lettering crashes on an array of strings.) */
bool dlqb_header_xdeath_forged(const amqp_table_t *t);

/* Formats epoch milliseconds as ISO-8601 UTC with milliseconds
 * ("2026-11-30T05:09:48.123Z"). buf needs DLQB_ISO_TIME_MAX bytes. */
char *dlqb_iso_time(int64_t epoch_ms, char *buf, size_t len);

/* Parses ISO-8601 UTC ("Z" or "+00:00", optional fraction) into epoch ms. */
dlqb_status dlqb_iso_time_parse(const char *text, size_t len, int64_t *epoch_ms);

#endif

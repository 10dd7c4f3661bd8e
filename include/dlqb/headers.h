/* Header-table access for every module that reads AMQP headers (the
 * envelope parser, selection, the completion ledger, queue ages), so they
 * all read tables alike: the first entry of a key wins, strings may be
 * UTF-8 or byte strings, integers any width or a decimal string. Pure, no
 * allocation; every function is NULL-safe. */
#ifndef DLQB_HEADERS_H
#define DLQB_HEADERS_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/calendar.h" /* times in headers are ISO-8601 UTC */

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

#endif

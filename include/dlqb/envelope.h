/* The retry envelope: the task's identity and retry state, carried as AMQP
 * message headers so that it is readable in the management UI. This module
 * parses and validates it; it is pure (no I/O, no clock: callers pass the
 * time in) and allocates nothing. Reading tables is dlqb/headers.h,
 * x-death dlqb/xdeath.h, rewriting dlqb/rewrite.h.
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
#include "dlqb/headers.h"  /* the table access the parser uses, for its callers too */
#include "dlqb/names.h"    /* the header names */
#include "dlqb/pipeline.h" /* the profiles */

#define DLQB_ID_MAX         256 /* bytes of request_id / source_system */
#define DLQB_LAST_ERROR_MAX 500 /* bytes of last_error */
/* The largest attempt, max_attempts and replay_count the parser accepts:
 * far above any real count, and above the largest max_replays setting. */
#define DLQB_ENVELOPE_COUNT_MAX 1000000

typedef struct {
  /* The task's identity: the profile's two identity headers, trimmed
   * (dlqb/pipeline.h; DSR: request_id and source_system, hence the names). */
  char request_id[DLQB_ID_MAX + 1];
  char source_system[DLQB_ID_MAX + 1];
  /* The DSR profile's closed fields; "" under a profile without them. */
  char legal_basis[16];
  char action[16];
  int64_t attempt;
  int64_t max_attempts;
  int64_t replay_count;
  bool has_last_error;
  char last_error[DLQB_LAST_ERROR_MAX + 1];
  bool has_first_seen_at;
  int64_t first_seen_at_ms; /* Unix epoch milliseconds */
  /* The time that starts the SLA clock (the profile's sla_clock header);
   * first_seen_at's under the built-in profiles. */
  bool has_sla_start;
  int64_t sla_start_ms;
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

/* As dlqb_envelope_parse, under profile's rules: its identity headers
 * (into request_id and source_system) and other fields are checked in the
 * profile's order, each present one as non-blank UTF-8 text without
 * control characters of at most DLQB_ID_MAX bytes, one of its closed set
 * where it has one ("category 'x' is not one of a, b"); a required one
 * missing is "item_id is missing". dlqb_envelope_parse is this function
 * with the dsr profile, word for word. */
dlqb_status dlqb_envelope_parse_profile(const amqp_table_t *headers, const dlqb_profile *profile,
                                        int64_t default_max_attempts, dlqb_envelope *out,
                                        dlqb_error *why);

/* n + 1 for a count read from a header (replay_count): a negative n counts
 * as 0, and the result saturates at DLQB_ENVELOPE_COUNT_MAX, so a hostile
 * INT64_MAX neither overflows nor stamps a count the parser refuses. */
int64_t dlqb_envelope_count_next(int64_t n);

#endif

/* Rewriting a message's header table for the next hop: a list of changes
 * applied to a copy, and the escalation stamp every path that escalates
 * writes. Pure: the output aliases the input and caller-owned scratch,
 * nothing is allocated. */
#ifndef DLQB_REWRITE_H
#define DLQB_REWRITE_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"
#include "dlqb/names.h" /* DLQB_ESCALATION_* */

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

#define DLQB_ESCALATION_SETS 6

/* The header changes that mark a message escalated to compliance_review:
 * escalated_by = by, escalated_at = at_iso (ISO-8601 UTC), escalation_reason
 * = reason (one of DLQB_ESCALATION_*), escalation_note = note (removed when
 * note is NULL or empty, so an older escalation's note never sticks), and
 * owner and claimed_at removed: a new escalation is unclaimed. Writes
 * DLQB_ESCALATION_SETS entries into sets and returns that count. The
 * strings must outlive the sets. */
size_t dlqb_escalation_stamp(dlqb_hset *sets, const char *by, const char *at_iso,
                             const char *reason, const char *note);

#define DLQB_REPLAY_SETS 12

/* The header changes of a replay to dsr.work (replay, review decide
 * --replay): attempt 0, replay_count = replay_count + 1 (saturating),
 * last_error, dlq_reason, dlq_at and worker_error removed, replayed_by =
 * by, replayed_at = at_iso, and a pending edit proposal removed. Writes DLQB_REPLAY_SETS entries and returns
 * that count. */
size_t dlqb_replay_stamp(dlqb_hset *sets, int64_t replay_count, const char *by, const char *at_iso);

/* Whether key is a header the bridge reads or writes (the envelope, its
 * stamps): the ones a task keeps when the rest must be left off
 * (dlqb_pipe_forward_minimal). */
bool dlqb_header_is_known(amqp_bytes_t key);

#endif

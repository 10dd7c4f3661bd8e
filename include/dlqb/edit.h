/* An edit of one DLQ or compliance_review item (dlq-bridge edit): which
 * headers an operator may set or remove, the header changes and stamps of
 * the edited copy, whether the result is a valid task under its
 * pipeline's profile, and what the audit trail records of it (each field
 * before and after, the body's size and SHA-256 before and after). Pure:
 * no I/O, no clock (callers pass the time in), no allocation.
 *
 * The bridge's own counters and stamps (attempt, replay_count, dlq_at,
 * last_error, x-death, the escalation, custody and edit stamps: the
 * headers dlqb_profile_field_name_check refuses) are not editable, nor is
 * the profile's SLA clock: an edit must not restart a statutory
 * deadline. */
#ifndef DLQB_EDIT_H
#define DLQB_EDIT_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"
#include "dlqb/hop.h"
#include "dlqb/pipeline.h"
#include "dlqb/rewrite.h"

/* One requested change: set field to value, or remove it. */
typedef struct {
  char field[DLQB_HEADER_NAME_MAX];
  bool unset;
  char value[DLQB_EDIT_VALUE_MAX + 1];
} dlqb_edit_change;

typedef struct {
  dlqb_edit_change changes[DLQB_EDIT_MAX_CHANGES];
  size_t n;
} dlqb_edit_request;

/* Adds one change: arg is "FIELD=VALUE" (set) or, with unset, "FIELD".
 * DLQB_EINVAL with one line naming the field when it is not editable
 * ("attempt is the bridge's own: not editable"), is the profile's SLA
 * clock, is changed twice, is not a header name, when VALUE is longer
 * than DLQB_EDIT_VALUE_MAX bytes or holds a NUL, or when there are more
 * than DLQB_EDIT_MAX_CHANGES changes. */
dlqb_status dlqb_edit_add(dlqb_edit_request *r, const dlqb_profile *p, const char *arg, bool unset,
                          dlqb_error *err);

/* The header changes of r for dlqb_headers_apply (r->n entries; strings
 * alias r). Returns r->n. */
size_t dlqb_edit_sets(const dlqb_edit_request *r, dlqb_hset *out);

#define DLQB_EDIT_STAMP_SETS 4

/* The stamp of an edited copy: edit_id, edit_parent (removed when parent
 * is ""), edited_by and edited_at. Returns DLQB_EDIT_STAMP_SETS. */
size_t dlqb_edit_stamp(dlqb_hset *sets, const char *edit_id, const char *parent, const char *by,
                       const char *at_iso);

/* Whether headers with sets applied are a valid task under profile p
 * (dlqb_envelope_parse_profile); scratch (cap entries) holds the applied
 * table. DLQB_EINVAL with the parser's reason, e.g. "legal_basis
 * 'gdpr_17' is not one of ...". */
dlqb_status dlqb_edit_validate(const amqp_table_t *headers, const dlqb_hset *sets, size_t nsets,
                               const dlqb_profile *p, int64_t default_max_attempts,
                               amqp_table_entry_t *scratch, size_t cap, dlqb_error *why);

/* The fields of e (e->nfields, e->fields) for r applied to headers: each
 * field's old value (had_old false when absent) and new one, as text: a
 * string sanitised (control bytes and invalid UTF-8 become '?') and cut
 * at DLQB_EDIT_VALUE_MAX bytes, an integer in decimal, another kind
 * "(a <kind> value)". Under a profile that records references only
 * (dlq_body_forbidden) a header that is not one of its fields is recorded
 * as the SHA-256 (hex) of each value (hashed). */
void dlqb_edit_diff(const dlqb_edit_request *r, const amqp_table_t *headers, const dlqb_profile *p,
                    dlqb_hop_edit *e);

/* The body's size and SHA-256 before and after into e. */
void dlqb_edit_body(dlqb_hop_edit *e, amqp_bytes_t before, amqp_bytes_t after);

/* A header value as dlqb_edit_diff shows it, into dst (cap bytes). */
void dlqb_edit_value_text(const amqp_field_value_t *v, char *dst, size_t cap);

/* A proposal (edit_approval): the changes as the JSON text of the
 * edit_proposal header, {"set":{"F":"V"},"unset":["F"],"note":"...",
 * "keep":false}. DLQB_EINVAL when it does not fit cap bytes. */
dlqb_status dlqb_edit_proposal_encode(const dlqb_edit_request *r, const char *note, bool keep,
                                      char *out, size_t cap, dlqb_error *err);

/* The changes of a proposal header back into r (each through
 * dlqb_edit_add under p: a forged header proposing to edit the bridge's
 * own fields is refused as the command line would be), its note into
 * note (ncap bytes) and *keep. DLQB_EINVAL with one line for anything
 * else. */
dlqb_status dlqb_edit_proposal_decode(const char *json, size_t len, const dlqb_profile *p,
                                      dlqb_edit_request *r, char *note, size_t ncap, bool *keep,
                                      dlqb_error *err);

#define DLQB_EDIT_PROPOSAL_SETS 4

/* The proposal stamp: edit_proposal_id, edit_proposal (json),
 * edit_proposed_by, edit_proposed_at; with id NULL, the four removed (an
 * approval or a rejection settles it). Returns DLQB_EDIT_PROPOSAL_SETS. */
size_t dlqb_edit_proposal_stamp(dlqb_hset *sets, const char *id, const char *json, const char *by,
                                const char *at_iso);

/* The edit id for 16 random bytes: "e-" and 32 lower-case hex digits. */
void dlqb_edit_id(const uint8_t rnd[16], char out[DLQB_EDIT_ID_MAX]);

#endif

/* Selecting DLQ items for the ops commands (replay, escalate, inspect,
 * resolve): the filters an operator combines on the command line, matched
 * against the item view (dlqb/item.h). Pure: no I/O, no clock (callers
 * pass the time in), no allocation. */
#ifndef DLQB_SELECT_H
#define DLQB_SELECT_H

#include <stdbool.h>
#include <stdint.h>

#include "dlqb/envelope.h"
#include "dlqb/error.h"
#include "dlqb/group.h"    /* --group: a failure group id */
#include "dlqb/item.h"     /* what a selection matches */
#include "dlqb/pipeline.h" /* dlqb_profile: the identity fields */

/* Identity filters one selection may name (--id, --match, --request-id,
 * --source-system, each counted). */
#define DLQB_SELECT_IDS_MAX 8

#define DLQB_SELECT_TEXT_MAX (DLQB_ID_MAX + 1)

/* Text filters compare exactly, except reason, which is a substring of
 * last_error, and group, which matches the item's failure group id
 * (dlqb/group.h). */
typedef struct {
  char field[DLQB_HEADER_NAME_MAX]; /* "" = the identity's first field (--id) */
  char flag[16];                    /* as given: "request-id", "match", "id" */
  char value[DLQB_SELECT_TEXT_MAX];
} dlqb_select_id;

/* A selection: --all, or filters that all must match (AND). The identity
 * filters are request_id / source_system below, standing for the profile's
 * fields[0] / fields[1] (dlqb_item's identity): --id VALUE is fields[0],
 * --match FIELD=VALUE names either field, and --request-id /
 * --source-system name dsr's (dlqb_select_bind checks each against the
 * served profile). */
typedef struct {
  bool all;
  dlqb_select_id ids[DLQB_SELECT_IDS_MAX]; /* the identity filters, in order given */
  size_t nids;
  bool unresolved; /* an identity filter names no identity field (yet): matches nothing */
  bool has_request_id, has_source_system, has_legal_basis, has_reason, has_message_id, has_group;
  char request_id[DLQB_SELECT_TEXT_MAX];
  char source_system[DLQB_SELECT_TEXT_MAX];
  char legal_basis[32];
  char reason[DLQB_LAST_ERROR_MAX + 1];
  char message_id[128];
  char group[DLQB_GROUP_ID_BUF]; /* lower case */
  bool has_older_than, has_newer_than;
  uint64_t older_than_ms; /* age > this */
  uint64_t newer_than_ms; /* age < this */
  uint64_t limit;         /* at most this many selected; 0 = no limit */
} dlqb_select;

void dlqb_select_init(dlqb_select *s);

/* True when name (a long flag without dashes) is one of the selection
 * flags: all, id, match, request-id, source-system, legal-basis, reason,
 * older-than, newer-than, limit, message-id, group. */
bool dlqb_select_is_flag(const char *name);

/* Applies one selection flag. value is NULL for "all". Errors name the
 * flag: "--older-than: '5x' has an unknown unit (use ms, s, m, h or d)",
 * "--limit: 'x' is not a whole number from 1 to 1000000000",
 * "--group: 'x' is not a group id (12 hex digits, as stats --by group
 * prints them)". */
dlqb_status dlqb_select_set(dlqb_select *s, const char *name, const char *value, dlqb_error *err);

/* Resolves the identity filters against profile (NULL: dsr's), the last
 * one given for a field winning: --id is fields[0]; --match FIELD=VALUE
 * and --request-id / --source-system must name fields[0] or fields[1],
 * else DLQB_EINVAL: "--match: 'x' is not an identity field of profile
 * 'redaction' (item_id, doc_id)". dlqb_select_set resolves them against
 * dsr's as they come; a command serving another pipeline binds once its
 * settings are read. */
dlqb_status dlqb_select_bind(dlqb_select *s, const dlqb_profile *profile, dlqb_error *err);

/* True when the selection says what to act on (--all or any filter);
 * --limit alone selects nothing. */
bool dlqb_select_given(const dlqb_select *s);

/* Checks combinations: --all with a filter, or --older-than >= --newer-than
 * (an empty age window) is DLQB_EINVAL. */
dlqb_status dlqb_select_validate(const dlqb_select *s, dlqb_error *err);

/* Whether it matches s at now_ms (ignores limit). An item whose age is
 * unknown matches no age filter. */
bool dlqb_select_match(const dlqb_select *s, const dlqb_item *it, int64_t now_ms);

#endif

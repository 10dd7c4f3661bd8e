/* Rewriting a header table: the changes a hop makes, and the escalation stamp. */
#include "dlqb/rewrite.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dlqb/envelope.h"
#include "dlqb/headers.h"
#include "dlqb/names.h"
#include "headers_private.h"

/* The bytes of a C string, aliased (amqp_cstring_bytes without the call:
 * the core calls nothing in rabbitmq-c, it only uses its types). */
static amqp_bytes_t cstring_bytes(const char *s) {
  amqp_bytes_t b;
  b.len = strlen(s);
  b.bytes = (void *)s;
  return b;
}

static bool bytes_same(amqp_bytes_t a, amqp_bytes_t b) {
  if (a.len != b.len) return false;
  if (a.len == 0) return true;
  return a.bytes != NULL && b.bytes != NULL && memcmp(a.bytes, b.bytes, a.len) == 0;
}

size_t dlqb_escalation_stamp(dlqb_hset *sets, const char *by, const char *at_iso,
                             const char *reason, const char *note) {
  bool has_note = note != NULL && note[0] != '\0';
  sets[0] = (dlqb_hset){DLQB_H_ESCALATED_BY, DLQB_HSET_STRING, by, 0};
  sets[1] = (dlqb_hset){DLQB_H_ESCALATED_AT, DLQB_HSET_STRING, at_iso, 0};
  sets[2] = (dlqb_hset){DLQB_H_ESCALATION_REASON, DLQB_HSET_STRING, reason, 0};
  sets[3] = (dlqb_hset){DLQB_H_ESCALATION_NOTE, has_note ? DLQB_HSET_STRING : DLQB_HSET_REMOVE,
                        has_note ? note : NULL, 0};
  sets[4] = (dlqb_hset){DLQB_H_OWNER, DLQB_HSET_REMOVE, NULL, 0};
  sets[5] = (dlqb_hset){DLQB_H_CLAIMED_AT, DLQB_HSET_REMOVE, NULL, 0};
  return DLQB_ESCALATION_SETS;
}

size_t dlqb_replay_stamp(dlqb_hset *sets, int64_t replay_count, const char *by,
                         const char *at_iso) {
  /* Saturated: a forged INT64_MAX must not wrap to a negative count. */
  int64_t next = dlqb_envelope_count_next(replay_count);
  sets[0] = (dlqb_hset){DLQB_H_ATTEMPT, DLQB_HSET_INT, NULL, 0};
  sets[1] = (dlqb_hset){DLQB_H_REPLAY_COUNT, DLQB_HSET_INT, NULL, next};
  sets[2] = (dlqb_hset){DLQB_H_LAST_ERROR, DLQB_HSET_REMOVE, NULL, 0};
  sets[3] = (dlqb_hset){DLQB_H_DLQ_REASON, DLQB_HSET_REMOVE, NULL, 0};
  sets[4] = (dlqb_hset){DLQB_H_DLQ_AT, DLQB_HSET_REMOVE, NULL, 0};
  sets[5] = (dlqb_hset){DLQB_H_WORKER_ERROR, DLQB_HSET_REMOVE, NULL, 0};
  sets[6] = (dlqb_hset){DLQB_H_REPLAYED_BY, DLQB_HSET_STRING, by, 0};
  sets[7] = (dlqb_hset){DLQB_H_REPLAYED_AT, DLQB_HSET_STRING, at_iso, 0};
  /* A pending edit does not follow the task out of the DLQ: approving it
   * later finds no item and says it is void. */
  sets[8] = (dlqb_hset){DLQB_H_EDIT_PROPOSAL_ID, DLQB_HSET_REMOVE, NULL, 0};
  sets[9] = (dlqb_hset){DLQB_H_EDIT_PROPOSAL, DLQB_HSET_REMOVE, NULL, 0};
  sets[10] = (dlqb_hset){DLQB_H_EDIT_PROPOSED_BY, DLQB_HSET_REMOVE, NULL, 0};
  sets[11] = (dlqb_hset){DLQB_H_EDIT_PROPOSED_AT, DLQB_HSET_REMOVE, NULL, 0};
  return DLQB_REPLAY_SETS;
}

/* The last set naming key (later sets win), or NULL. */
static const dlqb_hset *set_for(const dlqb_hset *sets, size_t nsets, amqp_bytes_t key) {
  for (size_t i = nsets; i > 0; i--)
    if (sets[i - 1].key != NULL && dlqb__bytes_eq(key, sets[i - 1].key)) return &sets[i - 1];
  return NULL;
}

static amqp_field_value_t set_value(const dlqb_hset *s) {
  amqp_field_value_t v;
  memset(&v, 0, sizeof v);
  if (s->kind == DLQB_HSET_INT) {
    v.kind = AMQP_FIELD_KIND_I64;
    v.value.i64 = s->num;
  } else {
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes = cstring_bytes(s->str != NULL ? s->str : "");
  }
  return v;
}

static bool emit(amqp_table_entry_t *scratch, size_t cap, size_t *n, amqp_bytes_t key,
                 amqp_field_value_t value) {
  if (*n >= cap || *n >= (size_t)INT_MAX) return false;
  scratch[*n].key = key;
  scratch[*n].value = value;
  (*n)++;
  return true;
}

static bool seen_before(const amqp_table_t *in, size_t i) {
  for (size_t j = 0; j < i; j++)
    if (bytes_same(in->entries[j].key, in->entries[i].key)) return true;
  return false;
}

dlqb_status dlqb_headers_apply(const amqp_table_t *in, const dlqb_hset *sets, size_t nsets,
                               amqp_table_entry_t *scratch, size_t cap, amqp_table_t *out) {
  size_t nin = dlqb__table_count(in), n = 0;
  if (out == NULL) return DLQB_EINVAL;
  out->num_entries = 0;
  out->entries = scratch;
  if (sets == NULL) nsets = 0;
  if (scratch == NULL) cap = 0;
  for (size_t i = 0; i < nin; i++) {
    const amqp_table_entry_t *e = &in->entries[i];
    const dlqb_hset *s = set_for(sets, nsets, e->key);
    bool ok = true;
    if (s == NULL) ok = emit(scratch, cap, &n, e->key, e->value);
    else if (s->kind != DLQB_HSET_REMOVE && !seen_before(in, i))
      ok = emit(scratch, cap, &n, e->key, set_value(s));
    if (!ok) return DLQB_EINVAL;
  }
  for (size_t k = 0; k < nsets; k++) {
    const dlqb_hset *s = &sets[k];
    if (s->key == NULL || s->kind == DLQB_HSET_REMOVE) continue;
    amqp_bytes_t key = cstring_bytes(s->key);
    if (set_for(sets, nsets, key) != s || dlqb_header_find(in, s->key) != NULL) continue;
    if (!emit(scratch, cap, &n, key, set_value(s))) return DLQB_EINVAL;
  }
  out->num_entries = (int)n;
  return DLQB_OK;
}

bool dlqb_header_is_known(amqp_bytes_t key) {
  static const char *const known[] = {
      DLQB_H_REQUEST_ID,       DLQB_H_SOURCE_SYSTEM,     DLQB_H_LEGAL_BASIS,
      DLQB_H_ACTION,           DLQB_H_ATTEMPT,           DLQB_H_MAX_ATTEMPTS,
      DLQB_H_LAST_ERROR,       DLQB_H_FIRST_SEEN_AT,     DLQB_H_REPLAY_COUNT,
      DLQB_H_WORKER_ERROR,     DLQB_H_DLQ_REASON,        DLQB_H_DLQ_AT,
      DLQB_H_REPLAYED_BY,      DLQB_H_REPLAYED_AT,       DLQB_H_ESCALATED_BY,
      DLQB_H_ESCALATED_AT,     DLQB_H_ESCALATION_REASON, DLQB_H_ORIGINAL_USER_ID,
      DLQB_H_EDIT_ID,          DLQB_H_EDIT_PARENT,       DLQB_H_EDITED_BY,
      DLQB_H_EDITED_AT,        DLQB_H_EDIT_PROPOSAL_ID,  DLQB_H_EDIT_PROPOSAL,
      DLQB_H_EDIT_PROPOSED_BY, DLQB_H_EDIT_PROPOSED_AT,
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (key.len == strlen(known[i]) && memcmp(key.bytes, known[i], key.len) == 0) return true;
  return false;
}

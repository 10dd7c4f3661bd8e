/* The lenient view of one DLQ message that the ops commands show and filter. */
#include "dlqb/item.h"

#include <string.h>

#include "dlqb/headers.h"
#include "dlqb/names.h"
#include "dlqb/text.h"
#include "dlqb/xdeath.h"

static void read_text(const amqp_table_t *h, const char *key, char *dst, size_t cap) {
  amqp_bytes_t b;
  if (dlqb_field_text(dlqb_header_find(h, key), &b)) dlqb_text_sanitize(dst, cap, b.bytes, b.len);
}

bool dlqb_identity_read(const amqp_table_t *h, const dlqb_profile *profile, char *id0, char *id1,
                        size_t cap) {
  id0[0] = id1[0] = '\0';
  const char *a = profile != NULL ? profile->fields[0].name : DLQB_H_REQUEST_ID;
  const char *b = profile != NULL ? profile->fields[1].name : DLQB_H_SOURCE_SYSTEM;
  bool has_a = h != NULL && dlqb_header_id(h, a, id0, cap);
  bool has_b = h != NULL && dlqb_header_id(h, b, id1, cap);
  return has_a && has_b;
}

void dlqb_item_read(const amqp_basic_properties_t *props, dlqb_item *out) {
  dlqb_item_read_as(props, NULL, out);
}

void dlqb_item_read_as(const amqp_basic_properties_t *props, const dlqb_profile *profile,
                       dlqb_item *out) {
  memset(out, 0, sizeof *out);
  out->group_ignores_second = profile != NULL && !profile->group_by_second;
  if (props == NULL) return;
  if (props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
    dlqb_text_sanitize(out->message_id, sizeof out->message_id, props->message_id.bytes,
                       props->message_id.len);
  if (props->_flags & AMQP_BASIC_TIMESTAMP_FLAG) {
    /* AMQP timestamps are seconds. */
    out->has_timestamp = props->timestamp <= (uint64_t)(INT64_MAX / 1000);
    out->timestamp_ms = out->has_timestamp ? (int64_t)props->timestamp * 1000 : 0;
  }
  if (!(props->_flags & AMQP_BASIC_HEADERS_FLAG)) return;
  const amqp_table_t *h = &props->headers;
  /* The first occurrence of a key wins, as in the envelope parser; a
   * duplicate makes the envelope invalid anyway. Ids are trimmed as the
   * envelope parser and the ledger trim them. */
  int64_t n;
  (void)dlqb_identity_read(h, profile, out->request_id, out->source_system, sizeof out->request_id);
  read_text(h, DLQB_H_LEGAL_BASIS, out->legal_basis, sizeof out->legal_basis);
  read_text(h, DLQB_H_ACTION, out->action, sizeof out->action);
  if (dlqb_field_int(dlqb_header_find(h, DLQB_H_ATTEMPT), &n)) {
    out->has_attempt = true;
    out->attempt = n;
  }
  if (dlqb_field_int(dlqb_header_find(h, DLQB_H_REPLAY_COUNT), &n) && n >= 0) out->replay_count = n;
  read_text(h, DLQB_H_REPLAYED_AT, out->replayed_at, sizeof out->replayed_at);
  read_text(h, DLQB_H_LAST_ERROR, out->last_error, sizeof out->last_error);
  read_text(h, DLQB_H_DLQ_REASON, out->dlq_reason, sizeof out->dlq_reason);
  out->has_dlq_at = dlqb_header_time(h, DLQB_H_DLQ_AT, &out->dlq_at_ms);
  out->has_first_seen_at = dlqb_header_time(h, DLQB_H_FIRST_SEEN_AT, &out->first_seen_at_ms);
  out->has_escalated_at = dlqb_header_time(h, DLQB_H_ESCALATED_AT, &out->escalated_at_ms);
  read_text(h, DLQB_H_ESCALATED_BY, out->escalated_by, sizeof out->escalated_by);
  read_text(h, DLQB_H_ESCALATION_REASON, out->escalation_reason, sizeof out->escalation_reason);
  read_text(h, DLQB_H_ESCALATION_NOTE, out->escalation_note, sizeof out->escalation_note);
  read_text(h, DLQB_H_OWNER, out->owner, sizeof out->owner);
  out->has_claimed_at = dlqb_header_time(h, DLQB_H_CLAIMED_AT, &out->claimed_at_ms);
  dlqb_deaths_text(h, out->deaths, sizeof out->deaths);
  const amqp_table_t *death = dlqb_header_first_death(h);
  const amqp_field_value_t *t = death != NULL ? dlqb_header_find(death, DLQB_XDEATH_TIME) : NULL;
  if (t != NULL && t->kind == AMQP_FIELD_KIND_TIMESTAMP &&
      t->value.u64 <= (uint64_t)INT64_MAX / 1000) {
    out->has_xdeath_at = true;
    out->xdeath_at_ms = (int64_t)t->value.u64 * 1000; /* AMQP timestamps are seconds */
  }
}

bool dlqb_time_usable(int64_t epoch_ms, int64_t now_ms) {
  return now_ms > INT64_MAX - DLQB_CLOCK_SKEW_MS || epoch_ms <= now_ms + DLQB_CLOCK_SKEW_MS;
}

bool dlqb_item_since(const dlqb_item *it, int64_t now_ms, int64_t *epoch_ms) {
  /* The later of dlq_at and escalated_at is the entry into the current
   * queue (dlqb_queue_head_stamp reads a head the same way, so inspect and
   * stats agree on a compliance_review item). */
  bool dlq = it->has_dlq_at && dlqb_time_usable(it->dlq_at_ms, now_ms);
  bool esc = it->has_escalated_at && dlqb_time_usable(it->escalated_at_ms, now_ms);
  if (dlq || esc) {
    *epoch_ms =
        !esc || (dlq && it->dlq_at_ms > it->escalated_at_ms) ? it->dlq_at_ms : it->escalated_at_ms;
    return true;
  }
  /* Then the most precise first; each later one is older than the DLQ entry. */
  const struct {
    bool has;
    int64_t ms;
  } c[] = {{it->has_dlq_at, it->dlq_at_ms},
           {it->has_xdeath_at, it->xdeath_at_ms},
           {it->has_first_seen_at, it->first_seen_at_ms},
           {it->has_timestamp, it->timestamp_ms}};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    if (c[i].has && dlqb_time_usable(c[i].ms, now_ms)) {
      *epoch_ms = c[i].ms;
      return true;
    }
  }
  return false;
}

bool dlqb_item_age(const dlqb_item *it, int64_t now_ms, uint64_t *age_ms) {
  int64_t since;
  if (!dlqb_item_since(it, now_ms, &since)) return false;
  /* Within the clock skew: age 0. */
  *age_ms = now_ms > since ? (uint64_t)now_ms - (uint64_t)since : 0;
  return true;
}

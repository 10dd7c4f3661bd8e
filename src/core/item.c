/* The lenient view of one DLQ message that the ops commands show and filter. */
#include "dlqb/item.h"

#include <string.h>

#include "dlqb/headers.h"
#include "dlqb/names.h"
#include "dlqb/text.h"

static void read_text(const amqp_table_t *h, const char *key, char *dst, size_t cap) {
  amqp_bytes_t b;
  if (dlqb_field_text(dlqb_header_find(h, key), &b)) dlqb_text_sanitize(dst, cap, b.bytes, b.len);
}

void dlqb_item_read(const amqp_basic_properties_t *props, dlqb_item *out) {
  memset(out, 0, sizeof *out);
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
  dlqb_header_id(h, DLQB_H_REQUEST_ID, out->request_id, sizeof out->request_id);
  dlqb_header_id(h, DLQB_H_SOURCE_SYSTEM, out->source_system, sizeof out->source_system);
  read_text(h, DLQB_H_LEGAL_BASIS, out->legal_basis, sizeof out->legal_basis);
  read_text(h, DLQB_H_ACTION, out->action, sizeof out->action);
  if (dlqb_field_int(dlqb_header_find(h, DLQB_H_ATTEMPT), &n)) {
    out->has_attempt = true;
    out->attempt = n;
  }
  if (dlqb_field_int(dlqb_header_find(h, DLQB_H_REPLAY_COUNT), &n) && n >= 0) out->replay_count = n;
  read_text(h, DLQB_H_LAST_ERROR, out->last_error, sizeof out->last_error);
  read_text(h, DLQB_H_DLQ_REASON, out->dlq_reason, sizeof out->dlq_reason);
  out->has_dlq_at = dlqb_header_time(h, DLQB_H_DLQ_AT, &out->dlq_at_ms);
  out->has_first_seen_at = dlqb_header_time(h, DLQB_H_FIRST_SEEN_AT, &out->first_seen_at_ms);
  out->has_escalated_at = dlqb_header_time(h, DLQB_H_ESCALATED_AT, &out->escalated_at_ms);
}

bool dlqb_item_since(const dlqb_item *it, int64_t *epoch_ms) {
  if (it->has_dlq_at) *epoch_ms = it->dlq_at_ms;
  else if (it->has_first_seen_at) *epoch_ms = it->first_seen_at_ms;
  else if (it->has_timestamp) *epoch_ms = it->timestamp_ms;
  else return false;
  return true;
}

bool dlqb_item_age(const dlqb_item *it, int64_t now_ms, uint64_t *age_ms) {
  int64_t since;
  if (!dlqb_item_since(it, &since)) return false;
  /* Clocks of different hosts disagree a little: the future is age 0. */
  *age_ms = now_ms > since ? (uint64_t)now_ms - (uint64_t)since : 0;
  return true;
}

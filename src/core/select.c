/* DLQ item view, operator filters and the --rate token bucket (pure). */
#include "dlqb/select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/duration.h"
#include "dlqb/text.h"

#define LIMIT_MAX 1000000000ULL

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

void dlqb_select_init(dlqb_select *s) { memset(s, 0, sizeof *s); }

static const char *const select_flags[] = {"all",        "request-id", "source-system",
                                           "legal-basis", "reason",     "older-than",
                                           "newer-than",  "limit",      "message-id"};

bool dlqb_select_is_flag(const char *name) {
  for (size_t i = 0; i < sizeof select_flags / sizeof select_flags[0]; i++)
    if (strcmp(select_flags[i], name) == 0) return true;
  return false;
}

/* Copies a filter value; empty or oversized text is an error, never cut. */
static dlqb_status set_text(char *dst, size_t cap, bool *has, const char *name, const char *value,
                            dlqb_error *err) {
  size_t n = strlen(value);
  if (n == 0) return dlqb_fail(err, DLQB_EINVAL, "--%s needs a non-empty value", name);
  if (n >= cap)
    return dlqb_fail(err, DLQB_EINVAL, "--%s: value longer than %zu bytes", name, cap - 1);
  memcpy(dst, value, n + 1);
  *has = true;
  return DLQB_OK;
}

static dlqb_status set_duration(uint64_t *dst, bool *has, const char *name, const char *value,
                                dlqb_error *err) {
  dlqb_error why;
  if (dlqb_duration_parse(value, dst, &why) != DLQB_OK)
    return dlqb_fail(err, DLQB_EINVAL, "--%s: %s", name, why.msg);
  *has = true;
  return DLQB_OK;
}

static dlqb_status set_limit(uint64_t *dst, const char *value, dlqb_error *err) {
  const char *p = value;
  uint64_t n = 0;
  if (*p == '\0') goto bad;
  for (; *p != '\0'; p++) {
    if (*p < '0' || *p > '9') goto bad;
    n = n * 10 + (uint64_t)(*p - '0');
    if (n > LIMIT_MAX) goto bad;
  }
  if (n == 0) goto bad;
  *dst = n;
  return DLQB_OK;
bad:
  return dlqb_fail(err, DLQB_EINVAL, "--limit: '%.64s' is not a whole number from 1 to %llu", value,
                   LIMIT_MAX);
}

dlqb_status dlqb_select_set(dlqb_select *s, const char *name, const char *value,
                            dlqb_error *err) {
  if (strcmp(name, "all") == 0) {
    s->all = true;
    return DLQB_OK;
  }
  if (value == NULL) return dlqb_fail(err, DLQB_EINVAL, "--%s needs a value", name);
  if (strcmp(name, "request-id") == 0)
    return set_text(s->request_id, sizeof s->request_id, &s->has_request_id, name, value, err);
  if (strcmp(name, "source-system") == 0)
    return set_text(s->source_system, sizeof s->source_system, &s->has_source_system, name,
                    value, err);
  if (strcmp(name, "legal-basis") == 0)
    return set_text(s->legal_basis, sizeof s->legal_basis, &s->has_legal_basis, name, value, err);
  if (strcmp(name, "reason") == 0)
    return set_text(s->reason, sizeof s->reason, &s->has_reason, name, value, err);
  if (strcmp(name, "message-id") == 0)
    return set_text(s->message_id, sizeof s->message_id, &s->has_message_id, name, value, err);
  if (strcmp(name, "older-than") == 0)
    return set_duration(&s->older_than_ms, &s->has_older_than, name, value, err);
  if (strcmp(name, "newer-than") == 0)
    return set_duration(&s->newer_than_ms, &s->has_newer_than, name, value, err);
  if (strcmp(name, "limit") == 0) return set_limit(&s->limit, value, err);
  return dlqb_fail(err, DLQB_EINVAL, "unknown selection flag '--%s'", name);
}

static bool has_filter(const dlqb_select *s) {
  return s->has_request_id || s->has_source_system || s->has_legal_basis || s->has_reason ||
         s->has_message_id || s->has_older_than || s->has_newer_than;
}

bool dlqb_select_given(const dlqb_select *s) { return s->all || has_filter(s); }

dlqb_status dlqb_select_validate(const dlqb_select *s, dlqb_error *err) {
  if (s->all && has_filter(s))
    return dlqb_fail(err, DLQB_EINVAL, "--all cannot be combined with a filter");
  if (s->has_older_than && s->has_newer_than && s->older_than_ms >= s->newer_than_ms)
    return dlqb_fail(err, DLQB_EINVAL,
                     "--older-than must be shorter than --newer-than (no item can match both)");
  return DLQB_OK;
}

bool dlqb_select_match(const dlqb_select *s, const dlqb_item *it, int64_t now_ms) {
  if (s->has_request_id && strcmp(s->request_id, it->request_id) != 0) return false;
  if (s->has_source_system && strcmp(s->source_system, it->source_system) != 0) return false;
  if (s->has_legal_basis && strcmp(s->legal_basis, it->legal_basis) != 0) return false;
  if (s->has_message_id && strcmp(s->message_id, it->message_id) != 0) return false;
  if (s->has_reason && strstr(it->last_error, s->reason) == NULL) return false;
  if (s->has_older_than || s->has_newer_than) {
    uint64_t age;
    if (!dlqb_item_age(it, now_ms, &age)) return false;
    if (s->has_older_than && !(age > s->older_than_ms)) return false;
    if (s->has_newer_than && !(age < s->newer_than_ms)) return false;
  }
  return true;
}

void dlqb_rate_init(dlqb_rate *r, double per_second) {
  memset(r, 0, sizeof *r);
  r->rate = per_second;
}

int64_t dlqb_rate_wait_us(const dlqb_rate *r, int64_t now_us) {
  if (r->rate <= 0 || !r->started || now_us >= r->next_us) return 0;
  return r->next_us - now_us;
}

void dlqb_rate_take(dlqb_rate *r, int64_t now_us) {
  if (r->rate <= 0) return;
  int64_t interval = (int64_t)(1e6 / r->rate);
  if (interval < 1) interval = 1;
  /* Late by less than one interval: keep the schedule (no drift). Later
   * than that: restart from now (no burst after a pause). */
  int64_t base = r->next_us;
  if (!r->started || now_us - r->next_us >= interval) base = now_us;
  r->started = true;
  r->next_us = base + interval;
}

/* One DLQ message as the ops commands show and filter it (replay, escalate,
 * inspect, resolve, the SLA escalator): a lenient view of its headers and
 * properties. Pure: no I/O, no clock (callers pass the time in), no
 * allocation.
 *
 * Lenient on purpose: a DLQ holds messages whose envelope was invalid, and
 * an operator must still be able to list, escalate and resolve them.
 * Missing or malformed headers read as empty / unknown. */
#ifndef DLQB_ITEM_H
#define DLQB_ITEM_H

#include <amqp.h>
#include <stdbool.h>
#include <stdint.h>

#include "dlqb/envelope.h" /* DLQB_ID_MAX, DLQB_LAST_ERROR_MAX */

/* What the ops commands show and filter on, read from one DLQ message. */
typedef struct {
  char message_id[128];                 /* from the message_id property */
  char request_id[DLQB_ID_MAX + 1];     /* trimmed and sanitised */
  char source_system[DLQB_ID_MAX + 1];
  char legal_basis[32];
  char action[32];
  bool has_attempt;
  int64_t attempt;
  int64_t replay_count;                 /* 0 when absent or malformed */
  char last_error[DLQB_LAST_ERROR_MAX + 1];
  char dlq_reason[32];
  bool has_dlq_at;
  int64_t dlq_at_ms;
  bool has_first_seen_at;
  int64_t first_seen_at_ms;
  bool has_escalated_at;                /* compliance_review items */
  int64_t escalated_at_ms;
  bool has_timestamp;                   /* the AMQP timestamp property */
  int64_t timestamp_ms;
} dlqb_item;

/* Fills out from a message's properties (headers, message_id, timestamp).
 * Never fails: text is sanitised to printable UTF-8 and cut to fit;
 * integers may be any AMQP integer type or a decimal string. */
void dlqb_item_read(const amqp_basic_properties_t *props, dlqb_item *out);

/* The time an item's age counts from: dlq_at, else first_seen_at, else the
 * timestamp property. False when it has none of them. */
bool dlqb_item_since(const dlqb_item *it, int64_t *epoch_ms);

/* Age in milliseconds at now_ms (0 when in the future); false when unknown. */
bool dlqb_item_age(const dlqb_item *it, int64_t now_ms, uint64_t *age_ms);

#endif

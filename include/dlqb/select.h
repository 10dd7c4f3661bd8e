/* Selecting DLQ items for the ops commands (replay, escalate, inspect,
 * resolve): a lenient view of a DLQ message's headers, the filters an
 * operator combines on the command line, and a token bucket for --rate.
 * Pure: no I/O, no clock (callers pass the time in), no allocation.
 *
 * The item view is lenient on purpose: a DLQ holds messages whose envelope
 * was invalid, and an operator must still be able to list, escalate and
 * resolve them. Missing or malformed headers read as empty / unknown. */
#ifndef DLQB_SELECT_H
#define DLQB_SELECT_H

#include <amqp.h>
#include <stdbool.h>
#include <stdint.h>

#include "dlqb/envelope.h"
#include "dlqb/error.h"

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

#define DLQB_SELECT_TEXT_MAX (DLQB_ID_MAX + 1)

/* A selection: --all, or filters that all must match (AND). Text filters
 * compare exactly, except reason, which is a substring of last_error. */
typedef struct {
  bool all;
  bool has_request_id, has_source_system, has_legal_basis, has_reason, has_message_id;
  char request_id[DLQB_SELECT_TEXT_MAX];
  char source_system[DLQB_SELECT_TEXT_MAX];
  char legal_basis[32];
  char reason[DLQB_LAST_ERROR_MAX + 1];
  char message_id[128];
  bool has_older_than, has_newer_than;
  uint64_t older_than_ms; /* age > this */
  uint64_t newer_than_ms; /* age < this */
  uint64_t limit;         /* at most this many selected; 0 = no limit */
} dlqb_select;

void dlqb_select_init(dlqb_select *s);

/* True when name (a long flag without dashes) is one of the selection
 * flags: all, request-id, source-system, legal-basis, reason, older-than,
 * newer-than, limit, message-id. */
bool dlqb_select_is_flag(const char *name);

/* Applies one selection flag. value is NULL for "all". Errors name the
 * flag: "--older-than: '5x' has an unknown unit (use ms, s, m, h or d)",
 * "--limit: 'x' is not a whole number from 1 to 1000000000". */
dlqb_status dlqb_select_set(dlqb_select *s, const char *name, const char *value,
                            dlqb_error *err);

/* True when the selection says what to act on (--all or any filter);
 * --limit alone selects nothing. */
bool dlqb_select_given(const dlqb_select *s);

/* Checks combinations: --all with a filter, or --older-than >= --newer-than
 * (an empty age window) is DLQB_EINVAL. */
dlqb_status dlqb_select_validate(const dlqb_select *s, dlqb_error *err);

/* Whether it matches s at now_ms (ignores limit). An item whose age is
 * unknown matches no age filter. */
bool dlqb_select_match(const dlqb_select *s, const dlqb_item *it, int64_t now_ms);

/* A token bucket for --rate: `rate` tokens a second, holding at most one,
 * so a long pause never turns into a burst and the rate over any run of
 * messages stays at `rate`. Times are monotonic microseconds. */
typedef struct {
  double rate;       /* per second; <= 0 means unlimited */
  int64_t next_us;   /* earliest time the next token is available */
  bool started;
} dlqb_rate;

void dlqb_rate_init(dlqb_rate *r, double per_second);

/* Microseconds to wait at now_us before a token is available (0: now). */
int64_t dlqb_rate_wait_us(const dlqb_rate *r, int64_t now_us);

/* Takes a token at now_us (call once dlqb_rate_wait_us says 0). The next
 * token is due 1/rate after the later of now and the previous due time, so
 * small scheduling delays do not accumulate into a slower rate. */
void dlqb_rate_take(dlqb_rate *r, int64_t now_us);

#endif

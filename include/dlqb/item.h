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
#include "dlqb/pipeline.h" /* dlqb_profile: which headers are the identity */

/* How far in the future a time on a message may be and still count: clocks
 * of different hosts disagree a little, and that much reads as age 0. A
 * later time is not evidence of anything (a producer can write any time, a
 * host's clock can run fast) and is ignored (docs/envelope.md, "Which
 * clock"). */
#define DLQB_CLOCK_SKEW_MS INT64_C(300000)

/* A failure group id with its NUL (DLQB_GROUP_ID_BUF, dlqb/group.h). */
#define DLQB_ITEM_GROUP_BUF 13

/* What the ops commands show and filter on, read from one DLQ message. */
typedef struct {
  char message_id[128]; /* from the message_id property */
  /* The identity: the profile's fields[0] and fields[1] (dsr: request_id
   * and source_system, hence the names; redaction: item_id and doc_id),
   * trimmed and sanitised. */
  char request_id[DLQB_ID_MAX + 1];
  char source_system[DLQB_ID_MAX + 1];
  char legal_basis[32];
  char action[32];
  bool has_attempt;
  int64_t attempt;
  int64_t replay_count; /* 0 when absent or malformed */
  char replayed_at[40]; /* the replay stamp's text, as written ("" = none) */
  char last_error[DLQB_LAST_ERROR_MAX + 1];
  char dlq_reason[32];
  bool has_dlq_at;
  int64_t dlq_at_ms;
  bool has_first_seen_at;
  int64_t first_seen_at_ms;
  /* compliance_review items: why they were escalated, and their custody */
  bool has_escalated_at;
  int64_t escalated_at_ms;
  char escalated_by[128];
  char escalation_reason[32];
  char escalation_note[DLQB_LAST_ERROR_MAX + 1];
  char owner[128]; /* "" when unclaimed */
  bool has_claimed_at;
  int64_t claimed_at_ms;
  bool has_timestamp; /* the AMQP timestamp property */
  int64_t timestamp_ms;
  bool has_xdeath_at; /* x-death[0].time: the broker's clock */
  int64_t xdeath_at_ms;
  char deaths[256]; /* every x-death entry (dlqb_deaths_text), "" = none */
  /* Its profile does not split failure groups by fields[1]
   * (dlqb_profile.group_by_second false). */
  bool group_ignores_second;
  /* Its failure group id (dlqb/group.h) when already computed, "" when
   * not: the catalog keeps it, so a look at a million items does not
   * normalise a million errors again. dlqb_item_read leaves it "". */
  char group[DLQB_ITEM_GROUP_BUF];
} dlqb_item;

/* Fills out from a message's properties (headers, message_id, timestamp).
 * Never fails: text is sanitised to printable UTF-8 and cut to fit;
 * integers may be any AMQP integer type or a decimal string. */
void dlqb_item_read(const amqp_basic_properties_t *props, dlqb_item *out);

/* As dlqb_item_read, the identity read from the headers profile names
 * (fields[0] into request_id, fields[1] into source_system); NULL: the
 * dsr profile's, as dlqb_item_read. */
void dlqb_item_read_as(const amqp_basic_properties_t *props, const dlqb_profile *profile,
                       dlqb_item *out);

/* The identity of a task from its headers h under profile (NULL: dsr's
 * request_id and source_system): fields[0] into id0, fields[1] into id1,
 * each trimmed and sanitised to fit cap (dlqb_header_id), "" when absent
 * or blank. True when both are there: what the completion ledger keys a
 * task by, so an entry of another profile (other headers) keys nothing. */
bool dlqb_identity_read(const amqp_table_t *h, const dlqb_profile *profile, char *id0, char *id1,
                        size_t cap);

/* Whether a time on a message counts as evidence at now_ms: not later than
 * now_ms + DLQB_CLOCK_SKEW_MS. */
bool dlqb_time_usable(int64_t epoch_ms, int64_t now_ms);

/* The time an item's age counts from at now_ms: the later usable one of
 * dlq_at (the bridge's clock when it entered the DLQ) and escalated_at
 * (when it entered compliance_review), as stats reads a queue's head; else
 * the first usable one of x-death[0].time (the
 * broker's clock when it last dead-lettered it: items the broker moved into
 * the DLQ itself carry no dlq_at), first_seen_at, the timestamp property.
 * The later ones are older than the DLQ entry, so falling back never makes
 * an item younger. A time too far in the future is skipped, never taken.
 * False when none is usable: the item's age is unknown. */
bool dlqb_item_since(const dlqb_item *it, int64_t now_ms, int64_t *epoch_ms);

/* Age in milliseconds at now_ms (0 within the clock skew); false when
 * unknown (no usable time). */
bool dlqb_item_age(const dlqb_item *it, int64_t now_ms, uint64_t *age_ms);

#endif

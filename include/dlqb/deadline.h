/* Statutory deadlines of data subject requests: the legal basis of an item
 * implies how long the controller has from receipt (GDPR Art. 12(3): one
 * month; CCPA 1798.130: 45 days), configurable per legal basis with the
 * `deadlines` setting ("gdpr_*=1mo,ccpa_*=45d"). inspect shows the time
 * left and sorts by it; the console shows it first (docs/deadlines.md).
 * Pure: no I/O, no clock (callers pass the time in), no allocation. */
#ifndef DLQB_DEADLINE_H
#define DLQB_DEADLINE_H

#include <stdbool.h>
#include <stdint.h>

#include "dlqb/error.h"
#include "dlqb/item.h"

#define DLQB_DEADLINE_RULES_MAX   16
#define DLQB_DEADLINE_PATTERN_MAX 32 /* bytes of a pattern, NUL included */
#define DLQB_DEADLINE_MONTHS_MAX  120

/* One rule: legal bases matching pattern (exactly, or by prefix when it
 * ends in '*') have `months` calendar months, or `ms` milliseconds, from
 * receipt. */
typedef struct {
  char pattern[DLQB_DEADLINE_PATTERN_MAX];
  uint32_t months; /* > 0: a calendar period; else ms */
  uint64_t ms;
} dlqb_deadline_rule;

typedef struct {
  dlqb_deadline_rule rule[DLQB_DEADLINE_RULES_MAX];
  size_t n;
} dlqb_deadlines;

/* Parses "PATTERN=PERIOD,..." (whitespace around items and '=' allowed;
 * blank: no deadlines). PATTERN is letters, digits and '_' (a legal_basis,
 * compared exactly) with an optional '*' at the end (a prefix); PERIOD is
 * Nmo (1 to 120 calendar months) or a duration above zero ("45d", "72h").
 * The first matching rule wins. At most DLQB_DEADLINE_RULES_MAX rules. On
 * failure out is unchanged and the error quotes the bad item. */
dlqb_status dlqb_deadlines_parse(const char *text, dlqb_deadlines *out, dlqb_error *err);

/* The rules as text that parses back to them ("gdpr_*=1mo,ccpa_*=45d"). */
char *dlqb_deadlines_format(const dlqb_deadlines *d, char *buf, size_t len);

/* The first rule matching legal_basis, or NULL. */
const dlqb_deadline_rule *dlqb_deadlines_rule_for(const dlqb_deadlines *d, const char *legal_basis);

/* When a request received at receipt_ms is due under rule r: receipt plus
 * its months (dlqb_add_months) or its duration. */
int64_t dlqb_deadline_due(const dlqb_deadline_rule *r, int64_t receipt_ms);

/* epoch_ms plus n calendar months in UTC, the time of day kept; a day the
 * month lacks is its last day (Jan 31 + 1 month = Feb 28 or 29). */
int64_t dlqb_add_months(int64_t epoch_ms, uint32_t n);

/* When the request was received at now_ms: the earliest usable time on the
 * item (normally first_seen_at, which the producer sets to the receipt; then
 * the timestamp property, x-death[0].time, dlq_at, escalated_at). A time
 * later than now + the clock skew is skipped (dlqb_time_usable), so a forged
 * or fast clock never pushes a deadline later; an earlier one can only make
 * it look more urgent. False when none is usable. */
bool dlqb_item_receipt(const dlqb_item *it, int64_t now_ms, int64_t *epoch_ms);

/* As dlqb_item_receipt, naming the header or property the time came from
 * ("first_seen_at", "timestamp", "x_death", "dlq_at", "escalated_at": a
 * static string), or NULL when none is usable. */
const char *dlqb_item_receipt_from(const dlqb_item *it, int64_t now_ms, int64_t *epoch_ms);

typedef enum {
  DLQB_DEADLINE_NONE,    /* no rule for its legal basis */
  DLQB_DEADLINE_UNKNOWN, /* a rule, but no usable receipt time */
  DLQB_DEADLINE_KNOWN,
} dlqb_deadline_kind;

typedef struct {
  dlqb_deadline_kind kind;
  int64_t receipt_ms; /* KNOWN only */
  int64_t due_ms;
  int64_t left_ms; /* due - now: negative when overdue */
} dlqb_deadline;

/* The item's deadline at now_ms under d. */
dlqb_deadline dlqb_item_deadline(const dlqb_deadlines *d, const dlqb_item *it, int64_t now_ms);

/* Orders deadlines by urgency for a sort: unknown first (it may be overdue),
 * then the least time left, items without a deadline last. <0, 0, >0. */
int dlqb_deadline_cmp(const dlqb_deadline *a, const dlqb_deadline *b);

#endif

/* Failure groups: DLQ items grouped by a fingerprint of their cause, so an
 * operator (stats --by group, replay/escalate/inspect --group, the console)
 * sees "4,812 items: timeout calling <id> after <n>ms" instead of 4,812
 * rows. The cause is the item's dlq_reason, its source_system and its
 * last_error with the parts that differ per item (ids, numbers, hex, UUIDs,
 * times and dates, e-mail addresses, quoted values) replaced by
 * placeholders: the template. The group id is the first 12 hex digits of
 * the SHA-256 of the three, so it is stable across runs, hosts and
 * versions of the same normalisation (docs/runbook.md, "Failure groups").
 *
 * Pure: no I/O, no clock (callers pass the time in). The aggregator
 * allocates, and never more than max_groups groups: a DLQ of a million
 * hostile, all-distinct error texts lumps everything past the cap into one
 * "other" group and says how many items went there. */
#ifndef DLQB_GROUP_H
#define DLQB_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/envelope.h" /* DLQB_ID_MAX, DLQB_LAST_ERROR_MAX */
#include "dlqb/item.h"

#define DLQB_GROUP_ID_LEN 12                      /* hex digits of a group id */
#define DLQB_GROUP_ID_BUF (DLQB_GROUP_ID_LEN + 1) /* with the NUL */
_Static_assert(DLQB_GROUP_ID_BUF == DLQB_ITEM_GROUP_BUF, "dlqb_item.group holds a group id");
#define DLQB_GROUP_INPUT_MAX    DLQB_LAST_ERROR_MAX /* bytes of error text read */
#define DLQB_GROUP_TEMPLATE_MAX 512                 /* bytes of a template, NUL included */
#define DLQB_GROUPS_DEFAULT_MAX 1000                /* groups an aggregator keeps */
#define DLQB_GROUPS_HARD_MAX    100000              /* the most a caller may ask for */

/* The placeholders of a template. */
#define DLQB_GROUP_P_NUM   "<n>"
#define DLQB_GROUP_P_HEX   "<hex>"
#define DLQB_GROUP_P_UUID  "<uuid>"
#define DLQB_GROUP_P_TIME  "<time>"
#define DLQB_GROUP_P_EMAIL "<email>"
#define DLQB_GROUP_P_ID    "<id>"
#define DLQB_GROUP_P_STR   "<str>"

/* The template of an error text: the first DLQB_GROUP_INPUT_MAX bytes of
 * text (len bytes, need not be NUL-terminated; NULL counts as empty),
 * sanitised (invalid UTF-8 and control characters become '?'), whitespace
 * runs collapsed to one space and trimmed, and each word (a run of letters,
 * digits, non-ASCII characters and _-.:/@+#=) classified: with an '@'
 * between two parts an e-mail; a UUID; a date or time (digits joined by
 * - : T Z . +); a number; 8 or more hex digits (optionally 0x); any other
 * word holding a digit an id ("R-2026-11-1001", "user42"); words without
 * digits are kept ("deadbeef" too: it cannot be told from a word).
 * A quoted value ('...', "..." or `...` opening after a non-word character
 * and closing before one) is <str>. Trailing . , : ; of a word stay text.
 * Written into dst (cap bytes, NUL-terminated, never a split character);
 * returns the bytes written. Same input, same template, always. */
size_t dlqb_group_normalize(char *dst, size_t cap, const char *text, size_t len);

/* The group id of a cause: 12 lower-case hex digits of SHA-256 over a
 * version tag, dlq_reason, source_system and the template, each followed by
 * a NUL (so no two different triples hash the same input). NULLs count as
 * empty. */
void dlqb_group_id(const char *dlq_reason, const char *source_system, const char *tmpl,
                   char id[DLQB_GROUP_ID_BUF]);

/* An item's group id, and its template into tmpl (tmpl may be NULL when
 * only the id is wanted; else tmpl_cap bytes, DLQB_GROUP_TEMPLATE_MAX fit
 * every template). */
void dlqb_group_of(const dlqb_item *it, char id[DLQB_GROUP_ID_BUF], char *tmpl, size_t tmpl_cap);

/* True when text is a well-formed group id: exactly DLQB_GROUP_ID_LEN
 * hex digits (either case; ids compare case-insensitively). */
bool dlqb_group_id_valid(const char *text);

/* One group as the aggregator counted it. */
typedef struct {
  char id[DLQB_GROUP_ID_BUF]; /* "other" for the lump past the cap */
  char dlq_reason[32];
  char source_system[DLQB_ID_MAX + 1];
  char tmpl[DLQB_GROUP_TEMPLATE_MAX];
  char sample[DLQB_LAST_ERROR_MAX + 1]; /* the first item's last_error, sanitised */
  uint64_t count;
  uint64_t aged;          /* items whose age was known */
  uint64_t oldest_age_ms; /* over the aged items; 0 when aged == 0 */
  uint64_t newest_age_ms;
} dlqb_group;

typedef struct dlqb_groups dlqb_groups;

/* An empty aggregator keeping at most max_groups groups (0: the default,
 * DLQB_GROUPS_DEFAULT_MAX; more than DLQB_GROUPS_HARD_MAX is taken as that).
 * NULL when out of memory. */
dlqb_groups *dlqb_groups_new(size_t max_groups);
void dlqb_groups_free(dlqb_groups *g); /* NULL-safe */

/* Counts one item at now_ms in its group. A new group past the cap (or
 * when memory runs out) is counted in the "other" lump instead: counts
 * always add up to the items added. */
void dlqb_groups_add(dlqb_groups *g, const dlqb_item *it, int64_t now_ms);

/* Orders the groups for a person: most items first, then oldest first, then
 * by id (so equal inputs list equally). */
void dlqb_groups_sort(dlqb_groups *g);

/* The groups kept (the lump not included), and the i-th of them. */
size_t dlqb_groups_count(const dlqb_groups *g);
const dlqb_group *dlqb_groups_at(const dlqb_groups *g, size_t i);

/* The "other" lump: items whose group did not fit (count 0 when none). Its
 * id is "other", its texts empty. */
const dlqb_group *dlqb_groups_other(const dlqb_groups *g);

/* The group with this id (either case), or NULL when none was kept. */
const dlqb_group *dlqb_groups_find(const dlqb_groups *g, const char *id);

/* Items added, and the cap in effect. */
uint64_t dlqb_groups_total(const dlqb_groups *g);
size_t dlqb_groups_max(const dlqb_groups *g);

/* SHA-256 of data (len bytes) into out: the hash of the group id, exposed
 * for its test vectors. */
void dlqb_sha256(const void *data, size_t len, uint8_t out[32]);

#endif

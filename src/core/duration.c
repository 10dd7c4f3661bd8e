/* Parsing and formatting of operator-written durations ("250ms", "5s", "2m"). */
#include "dlqb/duration.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dlqb/text.h"

#define MS_PER_DAY UINT64_C(86400000)

/* 100 years of 365 days: far beyond any sane delay or budget, and small
 * enough that callers can add it to an epoch time in ms without overflow. */
#define DURATION_MAX_MS (UINT64_C(36500) * MS_PER_DAY)

typedef struct {
  const char *name;
  uint64_t ms;
} duration_unit;

/* Largest first, so that formatting finds the shortest exact form. */
static const duration_unit units[] = {
    {"d", MS_PER_DAY},     {"h", UINT64_C(3600000)}, {"m", UINT64_C(60000)},
    {"s", UINT64_C(1000)}, {"ms", UINT64_C(1)},
};

static bool is_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static bool is_letter(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

static const duration_unit *find_unit(const char *s, size_t n) {
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strlen(units[i].name) == n && memcmp(units[i].name, s, n) == 0) {
      return &units[i];
    }
  }
  return NULL;
}

/* Parses s[0..n) so that list items can be parsed in place. */
static dlqb_status parse_span(const char *s, size_t n, uint64_t *out_ms, dlqb_error *err) {
  char q[DLQB_QUOTE_BUF];
  const char *p = s;
  const char *end = s + n;
  dlqb_text_quote(q, s, n);

  while (p < end && is_space(*p)) {
    p++;
  }
  while (end > p && is_space(end[-1])) {
    end--;
  }
  if (p == end) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is empty (use e.g. 250ms, 5s, 2m, 1h or 7d)", q);
  }
  if (*p == '-' || *p == '+') {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' has a sign; write a plain number and unit, e.g. 5s",
                     q);
  }

  /* Stop accumulating once past the limit: the value is rejected anyway and
   * this keeps v * 10 + 9 far from overflowing. */
  const char *digits = p;
  uint64_t v = 0;
  bool too_big = false;
  for (; p < end && is_digit(*p); p++) {
    if (!too_big) {
      v = v * 10 + (uint64_t)(*p - '0');
      too_big = v > DURATION_MAX_MS;
    }
  }
  if (p == digits) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' does not start with a number (use e.g. 5s)", q);
  }
  if (p < end && (*p == '.' || *p == ',')) {
    return dlqb_fail(err, DLQB_EINVAL,
                     "'%s' has a fraction; use a smaller unit (e.g. 1500ms, not 1.5s)", q);
  }

  const char *unit_text = p;
  while (p < end && is_letter(*p)) {
    p++;
  }
  if (p == unit_text) {
    if (p == end) {
      return dlqb_fail(err, DLQB_EINVAL, "'%s' has no unit (use ms, s, m, h or d)", q);
    }
    return dlqb_fail(err, DLQB_EINVAL, "'%s' has unexpected text after the number", q);
  }
  const duration_unit *u = find_unit(unit_text, (size_t)(p - unit_text));
  if (u == NULL) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' has an unknown unit (use ms, s, m, h or d)", q);
  }
  if (p != end) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' has unexpected text after the unit", q);
  }
  if (too_big || v > DURATION_MAX_MS / u->ms) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is longer than 100 years", q);
  }
  *out_ms = v * u->ms;
  return DLQB_OK;
}

dlqb_status dlqb_duration_parse(const char *text, uint64_t *out_ms, dlqb_error *err) {
  if (text == NULL || out_ms == NULL) {
    return dlqb_fail(err, DLQB_EINVAL, "no duration given");
  }
  return parse_span(text, strlen(text), out_ms, err);
}

static bool span_is_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!is_space(s[i])) {
      return false;
    }
  }
  return true;
}

dlqb_status dlqb_duration_parse_list(const char *text, uint64_t *out, size_t max, size_t *count,
                                     dlqb_error *err) {
  char q[DLQB_QUOTE_BUF];
  if (text == NULL || (out == NULL && max > 0) || count == NULL) {
    return dlqb_fail(err, DLQB_EINVAL, "no duration list given");
  }
  dlqb_text_quote(q, text, strlen(text));
  if (span_is_blank(text, strlen(text))) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is empty (use e.g. 1s,5s,30s)", q);
  }

  size_t n = 0;
  const char *p = text;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t item_len = comma != NULL ? (size_t)(comma - p) : strlen(p);
    uint64_t ms = 0;
    if (span_is_blank(p, item_len)) {
      return dlqb_fail(err, DLQB_EINVAL, "'%s' has an empty item", q);
    }
    if (n == max) {
      return dlqb_fail(err, DLQB_EINVAL, "'%s' has more than %zu durations", q, max);
    }
    dlqb_status st = parse_span(p, item_len, &ms, err);
    if (st != DLQB_OK) {
      return st;
    }
    if (ms == 0) {
      char item[DLQB_QUOTE_BUF];
      return dlqb_fail(err, DLQB_EINVAL, "'%s' must be greater than zero",
                       dlqb_text_quote(item, p, item_len));
    }
    out[n++] = ms;
    if (comma == NULL) {
      break;
    }
    p = comma + 1;
  }
  *count = n;
  return DLQB_OK;
}

char *dlqb_duration_format(uint64_t ms, char *buf, size_t len) {
  if (buf == NULL || len == 0) {
    return buf;
  }
  /* Every unit divides 0; seconds read most naturally. */
  if (ms == 0) {
    snprintf(buf, len, "0s");
    return buf;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (ms % units[i].ms == 0) {
      snprintf(buf, len, "%" PRIu64 "%s", ms / units[i].ms, units[i].name);
      break;
    }
  }
  return buf;
}

/* Statutory deadlines per legal basis (dlqb/deadline.h). */
#include "dlqb/deadline.h"

#include <stdio.h>
#include <string.h>

#include "dlqb/calendar.h"
#include "dlqb/duration.h"
#include "dlqb/text.h"

static bool is_space(char c) { return c == ' ' || c == '\t'; }

static bool pattern_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* One "PATTERN=PERIOD" of n bytes at p. */
static dlqb_status parse_rule(const char *p, size_t n, dlqb_deadline_rule *r, dlqb_error *err) {
  char q[DLQB_QUOTE_BUF], period[32];
  dlqb_text_quote(q, p, n);
  const char *eq = memchr(p, '=', n);
  if (eq == NULL)
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is not PATTERN=PERIOD (e.g. gdpr_*=1mo)", q);
  size_t a = 0, b = (size_t)(eq - p);
  while (a < b && is_space(p[a])) a++;
  while (b > a && is_space(p[b - 1])) b--;
  if (b == a || b - a >= sizeof r->pattern)
    return dlqb_fail(err, DLQB_EINVAL, "'%s': the pattern must be 1 to %zu characters", q,
                     sizeof r->pattern - 1);
  for (size_t i = a; i < b; i++)
    if (!pattern_char(p[i]) && !(p[i] == '*' && i == b - 1))
      return dlqb_fail(err, DLQB_EINVAL,
                       "'%s': a pattern is letters, digits and _ with an optional * at the end", q);
  memset(r, 0, sizeof *r);
  memcpy(r->pattern, p + a, b - a);
  size_t c = (size_t)(eq - p) + 1, d = n;
  while (c < d && is_space(p[c])) c++;
  while (d > c && is_space(p[d - 1])) d--;
  if (d - c >= sizeof period || d == c)
    return dlqb_fail(err, DLQB_EINVAL, "'%s': the period must be Nmo or a duration", q);
  memcpy(period, p + c, d - c);
  period[d - c] = '\0';
  size_t len = d - c;
  if (len > 2 && strcmp(period + len - 2, "mo") == 0) {
    uint32_t m = 0;
    for (size_t i = 0; i < len - 2; i++) {
      if (period[i] < '0' || period[i] > '9' || m > DLQB_DEADLINE_MONTHS_MAX) goto bad_months;
      m = m * 10 + (uint32_t)(period[i] - '0');
    }
    if (m == 0 || m > DLQB_DEADLINE_MONTHS_MAX) goto bad_months;
    r->months = m;
    return DLQB_OK;
  bad_months:
    return dlqb_fail(err, DLQB_EINVAL, "'%s': months must be 1 to %d (e.g. 1mo)", q,
                     DLQB_DEADLINE_MONTHS_MAX);
  }
  dlqb_error why;
  if (dlqb_duration_parse(period, &r->ms, &why) != DLQB_OK)
    return dlqb_fail(err, DLQB_EINVAL, "'%s': %s, or Nmo for calendar months", q, why.msg);
  if (r->ms == 0) return dlqb_fail(err, DLQB_EINVAL, "'%s': the period must be above zero", q);
  return DLQB_OK;
}

dlqb_status dlqb_deadlines_parse(const char *text, dlqb_deadlines *out, dlqb_error *err) {
  dlqb_deadlines d;
  memset(&d, 0, sizeof d);
  const char *p = text != NULL ? text : "";
  const char *s = p;
  while (*s != '\0' && is_space(*s)) s++;
  if (*s != '\0') {
    for (;;) {
      const char *comma = strchr(p, ',');
      size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
      if (d.n == DLQB_DEADLINE_RULES_MAX)
        return dlqb_fail(err, DLQB_EINVAL, "more than %d rules", DLQB_DEADLINE_RULES_MAX);
      dlqb_status st = parse_rule(p, n, &d.rule[d.n], err);
      if (st != DLQB_OK) return st;
      d.n++;
      if (comma == NULL) break;
      p = comma + 1;
    }
  }
  *out = d;
  return DLQB_OK;
}

char *dlqb_deadlines_format(const dlqb_deadlines *d, char *buf, size_t len) {
  if (buf == NULL || len == 0) return buf;
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < d->n && used < len; i++) {
    char period[32];
    if (d->rule[i].months > 0) snprintf(period, sizeof period, "%umo", (unsigned)d->rule[i].months);
    else dlqb_duration_format(d->rule[i].ms, period, sizeof period);
    int w = snprintf(buf + used, len - used, "%s%s=%s", i ? "," : "", d->rule[i].pattern, period);
    if (w < 0) break;
    used += (size_t)w;
  }
  return buf;
}

const dlqb_deadline_rule *dlqb_deadlines_rule_for(const dlqb_deadlines *d,
                                                  const char *legal_basis) {
  if (legal_basis == NULL || legal_basis[0] == '\0') return NULL;
  for (size_t i = 0; i < d->n; i++) {
    const char *pat = d->rule[i].pattern;
    size_t n = strlen(pat);
    if (n > 0 && pat[n - 1] == '*') {
      if (strncmp(pat, legal_basis, n - 1) == 0) return &d->rule[i];
    } else if (strcmp(pat, legal_basis) == 0) {
      return &d->rule[i];
    }
  }
  return NULL;
}

int64_t dlqb_add_months(int64_t epoch_ms, uint32_t n) {
  int64_t days = epoch_ms / DLQB_MS_PER_DAY, rem = epoch_ms % DLQB_MS_PER_DAY;
  if (rem < 0) {
    rem += DLQB_MS_PER_DAY;
    days--;
  }
  int64_t y;
  int m, d;
  dlqb_civil_from_days(days, &y, &m, &d);
  int64_t months = y * 12 + (m - 1) + (int64_t)n;
  y = months >= 0 ? months / 12 : (months - 11) / 12;
  m = (int)(months - y * 12) + 1;
  int last = dlqb_days_in_month(y, m);
  if (d > last) d = last;
  return dlqb_days_from_civil(y, m, d) * DLQB_MS_PER_DAY + rem;
}

const char *dlqb_item_receipt_from(const dlqb_item *it, int64_t now_ms, int64_t *epoch_ms) {
  const struct {
    bool has;
    int64_t ms;
    const char *name;
  } c[] = {{it->has_first_seen_at, it->first_seen_at_ms, "first_seen_at"},
           {it->has_timestamp, it->timestamp_ms, "timestamp"},
           {it->has_xdeath_at, it->xdeath_at_ms, "x_death"},
           {it->has_dlq_at, it->dlq_at_ms, "dlq_at"},
           {it->has_escalated_at, it->escalated_at_ms, "escalated_at"}};
  const char *from = NULL;
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    if (!c[i].has || !dlqb_time_usable(c[i].ms, now_ms)) continue;
    if (from == NULL || c[i].ms < *epoch_ms) {
      *epoch_ms = c[i].ms;
      from = c[i].name;
    }
  }
  return from;
}

int64_t dlqb_deadline_due(const dlqb_deadline_rule *r, int64_t receipt_ms) {
  return r->months > 0 ? dlqb_add_months(receipt_ms, r->months) : receipt_ms + (int64_t)r->ms;
}

bool dlqb_item_receipt(const dlqb_item *it, int64_t now_ms, int64_t *epoch_ms) {
  return dlqb_item_receipt_from(it, now_ms, epoch_ms) != NULL;
}

/* Times are bounded by what the calendar can hold: ISO-8601 parsing gives
 * years 0 to 9999, so ms fit with room for 100 years of period. */
dlqb_deadline dlqb_item_deadline(const dlqb_deadlines *d, const dlqb_item *it, int64_t now_ms) {
  dlqb_deadline out;
  memset(&out, 0, sizeof out);
  const dlqb_deadline_rule *r = dlqb_deadlines_rule_for(d, it->legal_basis);
  if (r == NULL) return out;
  out.kind = DLQB_DEADLINE_UNKNOWN;
  int64_t receipt;
  if (!dlqb_item_receipt(it, now_ms, &receipt)) return out;
  /* A receipt outside years 0..9999 (an AMQP timestamp can say anything):
   * unknown rather than an overflow. */
  const int64_t lo = dlqb_days_from_civil(0, 1, 1) * DLQB_MS_PER_DAY;
  const int64_t hi = dlqb_days_from_civil(10000, 1, 1) * DLQB_MS_PER_DAY;
  if (receipt < lo || receipt >= hi) return out;
  out.kind = DLQB_DEADLINE_KNOWN;
  out.receipt_ms = receipt;
  out.due_ms = dlqb_deadline_due(r, receipt);
  out.left_ms = out.due_ms - now_ms;
  return out;
}

int dlqb_deadline_cmp(const dlqb_deadline *a, const dlqb_deadline *b) {
  static const int rank[] = {
      [DLQB_DEADLINE_UNKNOWN] = 0, [DLQB_DEADLINE_KNOWN] = 1, [DLQB_DEADLINE_NONE] = 2};
  if (rank[a->kind] != rank[b->kind]) return rank[a->kind] < rank[b->kind] ? -1 : 1;
  if (a->kind != DLQB_DEADLINE_KNOWN) return 0;
  return a->left_ms < b->left_ms ? -1 : a->left_ms > b->left_ms;
}

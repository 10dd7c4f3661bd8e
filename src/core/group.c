/* Failure groups: the template of an error text, the group id of a cause,
 * and the bounded aggregator (dlqb/group.h). */
#include "dlqb/group.h"

#include <stdlib.h>
#include <string.h>

#include "dlqb/hashset.h"
#include "dlqb/text.h"

/* Bumped whenever the normalisation changes, so ids of different rules
 * never compare equal by accident. */
#define GROUP_VERSION "dlqb-group-1"

static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_alpha(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
static bool is_hex(unsigned char c) {
  return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

/* Letters, digits, non-ASCII (a letter of another script, or part of
 * one) and the joiners of ids, times and addresses. '/' and '=' are not:
 * "/users/42" and "id=42" keep their structure. */
static bool is_word(unsigned char c) {
  return is_digit(c) || is_alpha(c) || c >= 0x80 || c == '_' || c == '-' || c == '.' || c == ':' ||
         c == '@' || c == '+';
}

static bool is_uuid(const char *w, size_t n) {
  if (n != 36) return false;
  for (size_t i = 0; i < n; i++) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? w[i] != '-' : !is_hex((unsigned char)w[i])) return false;
  }
  return true;
}

/* Digits joined by - : T Z . + with a ':' , a 'T' or two '-': a date, a
 * time or both ("2026-11-30", "05:09:48", "2026-11-30T05:09:48.123Z"). */
static bool is_time(const char *w, size_t n) {
  size_t dashes = 0;
  bool colon = false, t = false, digit = false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)w[i];
    if (is_digit(c)) digit = true;
    else if (c == '-') dashes++;
    else if (c == ':') colon = true;
    else if (c == 'T' || c == 't') t = true;
    else if (c != 'Z' && c != 'z' && c != '.' && c != '+') return false;
  }
  return digit && is_digit((unsigned char)w[0]) && (colon || t || dashes >= 2);
}

/* [+-]digits(.digits)*, then at most 4 letters (a unit: "30s", "5000ms"):
 * returns where the unit starts, or 0 when w is not a number. */
static size_t number_end(const char *w, size_t n) {
  size_t i = 0;
  if (i < n && (w[i] == '+' || w[i] == '-')) i++;
  size_t start = i;
  for (;;) {
    size_t d = i;
    while (i < n && is_digit((unsigned char)w[i])) i++;
    if (i == d) return 0; /* a sign or a dot not followed by digits */
    if (i < n && w[i] == '.' && i + 1 < n && is_digit((unsigned char)w[i + 1])) {
      i++;
      continue;
    }
    break;
  }
  if (i == start) return 0;
  size_t unit = i;
  while (i < n && is_alpha((unsigned char)w[i])) i++;
  if (i != n || i - unit > 4) return 0;
  return unit;
}

static bool is_hexword(const char *w, size_t n) {
  size_t i = 0;
  bool prefix = n > 2 && w[0] == '0' && (w[1] | 0x20) == 'x';
  if (prefix) i = 2;
  if (!prefix && n < 8) return false;
  for (; i < n; i++)
    if (!is_hex((unsigned char)w[i])) return false;
  return true;
}

typedef struct {
  char *dst;
  size_t cap, len;
  bool full, space;
} out_buf;

/* Appends a piece whole or not at all (pieces end on character bounds, so
 * the template never ends in a split character); after the first piece
 * that does not fit, nothing more. */
static void put(out_buf *o, const char *p, size_t n) {
  if (o->full || n == 0) return;
  size_t sp = o->space && o->len > 0 ? 1 : 0;
  if (o->len + sp + n > o->cap - 1) {
    o->full = true;
    return;
  }
  if (sp) o->dst[o->len++] = ' ';
  o->space = false;
  memcpy(o->dst + o->len, p, n);
  o->len += n;
}

static void put_word(out_buf *o, const char *w, size_t n) {
  bool digit = false;
  const char *at = memchr(w, '@', n);
  for (size_t i = 0; i < n && !digit; i++) digit = is_digit((unsigned char)w[i]);
  if (at != NULL && at > w && at < w + n - 1) {
    put(o, DLQB_GROUP_P_EMAIL, strlen(DLQB_GROUP_P_EMAIL));
  } else if (!digit) {
    put(o, w, n);
  } else if (is_uuid(w, n)) {
    put(o, DLQB_GROUP_P_UUID, strlen(DLQB_GROUP_P_UUID));
  } else if (is_time(w, n)) {
    put(o, DLQB_GROUP_P_TIME, strlen(DLQB_GROUP_P_TIME));
  } else if (number_end(w, n) > 0) {
    size_t unit = number_end(w, n);
    char piece[16];
    size_t k = strlen(DLQB_GROUP_P_NUM);
    memcpy(piece, DLQB_GROUP_P_NUM, k);
    memcpy(piece + k, w + unit, n - unit); /* at most 4 letters */
    put(o, piece, k + n - unit);
  } else if (is_hexword(w, n)) {
    put(o, DLQB_GROUP_P_HEX, strlen(DLQB_GROUP_P_HEX));
  } else {
    put(o, DLQB_GROUP_P_ID, strlen(DLQB_GROUP_P_ID));
  }
}

size_t dlqb_group_normalize(char *dst, size_t cap, const char *text, size_t len) {
  if (dst == NULL || cap == 0) return 0;
  dst[0] = '\0';
  if (text == NULL) len = 0;
  if (len > DLQB_GROUP_INPUT_MAX) len = DLQB_GROUP_INPUT_MAX;
  /* Line breaks and tabs separate words (a stack trace's lines); every
   * other control character and invalid UTF-8 become '?'. */
  char raw[DLQB_GROUP_INPUT_MAX], s[DLQB_GROUP_INPUT_MAX + 1];
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    raw[i] = c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ? ' ' : c;
  }
  size_t n = dlqb_text_sanitize(s, sizeof s, raw, len);
  out_buf o = {.dst = dst, .cap = cap};
  size_t i = 0;
  while (i < n && !o.full) {
    unsigned char c = (unsigned char)s[i];
    if (c == ' ') {
      o.space = true;
      i++;
      continue;
    }
    if ((c == '\'' || c == '"' || c == '`') && (i == 0 || !is_word((unsigned char)s[i - 1]))) {
      const char *close = memchr(s + i + 1, c, n - i - 1);
      size_t j = close != NULL ? (size_t)(close - s) : n;
      if (close != NULL && (j + 1 == n || !is_word((unsigned char)s[j + 1]))) {
        put(&o, DLQB_GROUP_P_STR, strlen(DLQB_GROUP_P_STR));
        i = j + 1;
        continue;
      }
    }
    if (is_word(c)) {
      size_t e = i;
      while (e < n && is_word((unsigned char)s[e])) e++;
      size_t w = e; /* trailing punctuation is text, not part of the word */
      while (w > i && strchr(".,:;", s[w - 1]) != NULL) w--;
      if (w > i) put_word(&o, s + i, w - i);
      if (e > w) put(&o, s + w, e - w);
      i = e;
      continue;
    }
    put(&o, s + i, 1); /* ASCII punctuation: non-ASCII bytes are word bytes */
    i++;
  }
  dst[o.len] = '\0';
  return o.len;
}

void dlqb_group_id(const char *dlq_reason, const char *source_system, const char *tmpl,
                   char id[DLQB_GROUP_ID_BUF]) {
  const char *parts[] = {GROUP_VERSION, dlq_reason ? dlq_reason : "",
                         source_system ? source_system : "", tmpl ? tmpl : ""};
  char buf[sizeof GROUP_VERSION + 32 + DLQB_ID_MAX + 1 + DLQB_GROUP_TEMPLATE_MAX + 4];
  size_t len = 0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    size_t n = strlen(parts[i]);
    /* Longer than the item's fields can be: cut, so any input is safe. */
    if (n > sizeof buf - len - 1) n = sizeof buf - len - 1;
    memcpy(buf + len, parts[i], n);
    len += n;
    buf[len++] = '\0';
    if (len >= sizeof buf) break;
  }
  uint8_t h[32];
  dlqb_sha256(buf, len, h);
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < DLQB_GROUP_ID_LEN / 2; i++) {
    id[2 * i] = hex[h[i] >> 4];
    id[2 * i + 1] = hex[h[i] & 15];
  }
  id[DLQB_GROUP_ID_LEN] = '\0';
}

void dlqb_group_of(const dlqb_item *it, char id[DLQB_GROUP_ID_BUF], char *tmpl, size_t tmpl_cap) {
  if (it->group[0] != '\0' && (tmpl == NULL || tmpl_cap == 0)) {
    memcpy(id, it->group, DLQB_GROUP_ID_BUF);
    return;
  }
  char local[DLQB_GROUP_TEMPLATE_MAX];
  dlqb_group_normalize(local, sizeof local, it->last_error, strlen(it->last_error));
  dlqb_group_id(it->dlq_reason, it->group_ignores_second ? "" : it->source_system, local, id);
  if (tmpl != NULL && tmpl_cap > 0) {
    size_t n = strlen(local);
    /* A smaller buffer gets the template cut on a character bound. */
    dlqb_text_sanitize(tmpl, tmpl_cap, local, n);
  }
}

bool dlqb_group_id_valid(const char *text) {
  if (text == NULL || strlen(text) != DLQB_GROUP_ID_LEN) return false;
  for (size_t i = 0; i < DLQB_GROUP_ID_LEN; i++)
    if (!is_hex((unsigned char)text[i])) return false;
  return true;
}

/* ---- the aggregator ----------------------------------------------------- */

struct dlqb_groups {
  dlqb_hashset *index; /* id -> size_t position in groups */
  dlqb_group *groups;
  size_t n, alloc, max;
  dlqb_group other;
  uint64_t total;
};

dlqb_groups *dlqb_groups_new(size_t max_groups) {
  dlqb_groups *g = calloc(1, sizeof *g);
  if (g == NULL) return NULL;
  g->max = max_groups == 0                     ? DLQB_GROUPS_DEFAULT_MAX
           : max_groups > DLQB_GROUPS_HARD_MAX ? DLQB_GROUPS_HARD_MAX
                                               : max_groups;
  g->index = dlqb_hashset_new(sizeof(size_t));
  if (g->index == NULL) {
    free(g);
    return NULL;
  }
  memcpy(g->other.id, "other", sizeof "other");
  return g;
}

void dlqb_groups_free(dlqb_groups *g) {
  if (g == NULL) return;
  dlqb_hashset_free(g->index);
  free(g->groups);
  free(g);
}

static void count_in(dlqb_group *gr, bool aged, uint64_t age) {
  gr->count++;
  if (!aged) return;
  if (gr->aged == 0 || age > gr->oldest_age_ms) gr->oldest_age_ms = age;
  if (gr->aged == 0 || age < gr->newest_age_ms) gr->newest_age_ms = age;
  gr->aged++;
}

/* A new group's slot, or NULL past the cap or out of memory. */
static dlqb_group *new_group(dlqb_groups *g, const char *id) {
  if (g->n >= g->max) return NULL;
  if (g->n == g->alloc) {
    size_t want = g->alloc == 0 ? 16 : g->alloc * 2;
    if (want > g->max) want = g->max;
    dlqb_group *p = realloc(g->groups, want * sizeof *p);
    if (p == NULL) return NULL;
    g->groups = p;
    g->alloc = want;
  }
  size_t *slot = dlqb_hashset_add(g->index, id, DLQB_GROUP_ID_LEN, NULL);
  if (slot == NULL) return NULL;
  *slot = g->n;
  dlqb_group *gr = &g->groups[g->n++];
  memset(gr, 0, sizeof *gr);
  return gr;
}

void dlqb_groups_add(dlqb_groups *g, const dlqb_item *it, int64_t now_ms) {
  char id[DLQB_GROUP_ID_BUF], tmpl[DLQB_GROUP_TEMPLATE_MAX] = "";
  /* The template only for a group's first item (or when the id is not
   * known yet): normalising costs more than the rest of the count. */
  dlqb_group_of(it, id, NULL, 0);
  if (it->group[0] == '\0' || dlqb_hashset_get(g->index, id, DLQB_GROUP_ID_LEN) == NULL)
    dlqb_group_of(it, id, tmpl, sizeof tmpl);
  uint64_t age = 0;
  bool aged = dlqb_item_age(it, now_ms, &age);
  g->total++;
  size_t *at = dlqb_hashset_get(g->index, id, DLQB_GROUP_ID_LEN);
  dlqb_group *gr = at != NULL ? &g->groups[*at] : new_group(g, id);
  if (gr == NULL) {
    count_in(&g->other, aged, age);
    return;
  }
  if (gr->count == 0) {
    memcpy(gr->id, id, sizeof gr->id);
    memcpy(gr->tmpl, tmpl, sizeof gr->tmpl);
    /* The item's fields are sanitised and fit already (dlqb_item_read). */
    dlqb_text_sanitize(gr->dlq_reason, sizeof gr->dlq_reason, it->dlq_reason,
                       strlen(it->dlq_reason));
    if (!it->group_ignores_second)
      dlqb_text_sanitize(gr->source_system, sizeof gr->source_system, it->source_system,
                         strlen(it->source_system));
    dlqb_text_sanitize(gr->sample, sizeof gr->sample, it->last_error, strlen(it->last_error));
  }
  count_in(gr, aged, age);
}

static int by_size(const void *a, const void *b) {
  const dlqb_group *x = a, *y = b;
  if (x->count != y->count) return x->count > y->count ? -1 : 1;
  if (x->oldest_age_ms != y->oldest_age_ms) return x->oldest_age_ms > y->oldest_age_ms ? -1 : 1;
  return strcmp(x->id, y->id);
}

void dlqb_groups_sort(dlqb_groups *g) {
  if (g->n > 1) qsort(g->groups, g->n, sizeof *g->groups, by_size);
  /* The index points at positions: follow the move. */
  for (size_t i = 0; i < g->n; i++) {
    size_t *at = dlqb_hashset_get(g->index, g->groups[i].id, DLQB_GROUP_ID_LEN);
    if (at != NULL) *at = i;
  }
}

size_t dlqb_groups_count(const dlqb_groups *g) { return g->n; }
const dlqb_group *dlqb_groups_at(const dlqb_groups *g, size_t i) {
  return i < g->n ? &g->groups[i] : NULL;
}
const dlqb_group *dlqb_groups_other(const dlqb_groups *g) { return &g->other; }
uint64_t dlqb_groups_total(const dlqb_groups *g) { return g->total; }
size_t dlqb_groups_max(const dlqb_groups *g) { return g->max; }

const dlqb_group *dlqb_groups_find(const dlqb_groups *g, const char *id) {
  if (!dlqb_group_id_valid(id)) return NULL;
  char low[DLQB_GROUP_ID_BUF];
  for (size_t i = 0; i < DLQB_GROUP_ID_LEN; i++) low[i] = (char)(id[i] | 0x20);
  low[DLQB_GROUP_ID_LEN] = '\0';
  const size_t *at = dlqb_hashset_get(g->index, low, DLQB_GROUP_ID_LEN);
  return at != NULL ? &g->groups[*at] : NULL;
}

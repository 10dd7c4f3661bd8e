/* Reads, validates and rewrites the retry envelope carried in AMQP headers. */
#include "dlqb/envelope.h"
#include "dlqb/text.h"
#include "dlqb/topology.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INT_FIELD_MAX 1000000          /* attempts and replays: far above any real count */
#define MS_PER_DAY INT64_C(86400000)
#define FIRST_YEAR 2000                /* first_seen_at sanity range, inclusive */
#define LAST_YEAR 2200

/* The keys dlqb_envelope_parse reads; each may appear at most once, since a
 * repeated key would leave the retry state ambiguous. */
static const char *const envelope_keys[] = {
    DLQB_H_REQUEST_ID,   DLQB_H_SOURCE_SYSTEM, DLQB_H_LEGAL_BASIS,
    DLQB_H_ACTION,       DLQB_H_ATTEMPT,       DLQB_H_MAX_ATTEMPTS,
    DLQB_H_LAST_ERROR,   DLQB_H_FIRST_SEEN_AT, DLQB_H_REPLAY_COUNT,
};

static const char *const legal_bases[] = {"gdpr_art_15", "gdpr_art_17", "ccpa_1798_105",
                                          "ccpa_1798_100"};
static const char *const actions[] = {"access", "deletion", "rectification"};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- text helpers ---------------------------------------------------- */

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static void trim(const char **p, size_t *len) {
  while (*len > 0 && is_space((*p)[0])) {
    (*p)++;
    (*len)--;
  }
  while (*len > 0 && is_space((*p)[*len - 1])) (*len)--;
}

static bool bytes_eq(amqp_bytes_t b, const char *s) {
  size_t n = strlen(s);
  return b.len == n && (n == 0 || (b.bytes != NULL && memcmp(b.bytes, s, n) == 0));
}

static bool bytes_same(amqp_bytes_t a, amqp_bytes_t b) {
  if (a.len != b.len) return false;
  if (a.len == 0) return true;
  return a.bytes != NULL && b.bytes != NULL && memcmp(a.bytes, b.bytes, a.len) == 0;
}

/* ---- table access ---------------------------------------------------- */

static size_t table_count(const amqp_table_t *t) {
  if (t == NULL || t->entries == NULL || t->num_entries <= 0) return 0;
  return (size_t)t->num_entries;
}

const amqp_field_value_t *dlqb_header_find(const amqp_table_t *t, const char *key) {
  size_t n = table_count(t);
  for (size_t i = 0; i < n; i++)
    if (bytes_eq(t->entries[i].key, key)) return &t->entries[i].value;
  return NULL;
}

const amqp_table_t *dlqb_header_first_death(const amqp_table_t *t) {
  const amqp_field_value_t *xd = dlqb_header_find(t, "x-death");
  if (xd == NULL || xd->kind != AMQP_FIELD_KIND_ARRAY || xd->value.array.num_entries <= 0 ||
      xd->value.array.entries == NULL ||
      xd->value.array.entries[0].kind != AMQP_FIELD_KIND_TABLE)
    return NULL;
  return &xd->value.array.entries[0].value.table;
}

bool dlqb_header_xdeath_forged(const amqp_table_t *t) {
  const amqp_field_value_t *xd = dlqb_header_find(t, "x-death");
  if (xd == NULL) return false;
  if (xd->kind != AMQP_FIELD_KIND_ARRAY || xd->value.array.num_entries <= 0 ||
      xd->value.array.entries == NULL)
    return true;
  for (int i = 0; i < xd->value.array.num_entries; i++)
    if (xd->value.array.entries[i].kind != AMQP_FIELD_KIND_TABLE) return true;
  return false;
}

/* Text of a string-kinded value; false for any other kind. A NULL pointer
 * (only legal with length 0) reads as empty. */
static bool field_text(const amqp_field_value_t *v, const char **p, size_t *len) {
  if (v->kind != AMQP_FIELD_KIND_UTF8 && v->kind != AMQP_FIELD_KIND_BYTES) return false;
  *p = v->value.bytes.bytes;
  *len = *p == NULL ? 0 : v->value.bytes.len;
  if (*p == NULL) *p = "";
  return true;
}

bool dlqb_field_text(const amqp_field_value_t *v, amqp_bytes_t *out) {
  const char *p = NULL;
  size_t len = 0;
  if (v == NULL || !field_text(v, &p, &len)) return false;
  out->bytes = (void *)p;
  out->len = len;
  return true;
}

bool dlqb_field_int(const amqp_field_value_t *v, int64_t *out) {
  if (v == NULL) return false;
  switch (v->kind) {
  case AMQP_FIELD_KIND_I8: *out = v->value.i8; return true;
  case AMQP_FIELD_KIND_U8: *out = v->value.u8; return true;
  case AMQP_FIELD_KIND_I16: *out = v->value.i16; return true;
  case AMQP_FIELD_KIND_U16: *out = v->value.u16; return true;
  case AMQP_FIELD_KIND_I32: *out = v->value.i32; return true;
  case AMQP_FIELD_KIND_U32: *out = v->value.u32; return true;
  case AMQP_FIELD_KIND_I64: *out = v->value.i64; return true;
  case AMQP_FIELD_KIND_U64:
    if (v->value.u64 > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)v->value.u64;
    return true;
  case AMQP_FIELD_KIND_UTF8:
  case AMQP_FIELD_KIND_BYTES: {
    /* The management UI sends every header as a string. */
    char buf[24];
    amqp_bytes_t b = v->value.bytes;
    if (b.len == 0 || b.len >= sizeof buf) return false;
    memcpy(buf, b.bytes, b.len);
    buf[b.len] = '\0';
    for (size_t i = 0; i < b.len; i++)
      if (buf[i] < '0' || buf[i] > '9') return false;
    errno = 0;
    long long n = strtoll(buf, NULL, 10);
    if (errno != 0) return false;
    *out = n;
    return true;
  }
  default:
    return false;
  }
}

bool dlqb_header_id(const amqp_table_t *t, const char *key, char *dst, size_t cap) {
  const amqp_field_value_t *v = dlqb_header_find(t, key);
  const char *p = NULL;
  size_t len = 0;
  if (v == NULL || !field_text(v, &p, &len)) return false;
  trim(&p, &len);
  if (len == 0) return false;
  dlqb_text_sanitize(dst, cap, p, len);
  return true;
}

static const char *kind_name(uint8_t kind) {
  switch (kind) {
  case AMQP_FIELD_KIND_BOOLEAN: return "boolean";
  case AMQP_FIELD_KIND_I8: return "int8";
  case AMQP_FIELD_KIND_U8: return "uint8";
  case AMQP_FIELD_KIND_I16: return "int16";
  case AMQP_FIELD_KIND_U16: return "uint16";
  case AMQP_FIELD_KIND_I32: return "int32";
  case AMQP_FIELD_KIND_U32: return "uint32";
  case AMQP_FIELD_KIND_I64: return "int64";
  case AMQP_FIELD_KIND_U64: return "uint64";
  case AMQP_FIELD_KIND_F32: return "float";
  case AMQP_FIELD_KIND_F64: return "double";
  case AMQP_FIELD_KIND_DECIMAL: return "decimal";
  case AMQP_FIELD_KIND_UTF8: return "string";
  case AMQP_FIELD_KIND_BYTES: return "bytes";
  case AMQP_FIELD_KIND_ARRAY: return "array";
  case AMQP_FIELD_KIND_TIMESTAMP: return "timestamp";
  case AMQP_FIELD_KIND_TABLE: return "table";
  case AMQP_FIELD_KIND_VOID: return "void";
  default: return "an unknown type";
  }
}

static dlqb_status check_duplicates(const amqp_table_t *t, dlqb_error *why) {
  size_t n = table_count(t);
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < COUNT_OF(envelope_keys); k++) {
      if (!bytes_eq(t->entries[i].key, envelope_keys[k])) continue;
      for (size_t j = 0; j < i; j++)
        if (bytes_eq(t->entries[j].key, envelope_keys[k]))
          return dlqb_fail(why, DLQB_EINVAL, "duplicate header '%s'", envelope_keys[k]);
    }
  }
  return DLQB_OK;
}

/* ---- field parsers --------------------------------------------------- */

/* A required string header, trimmed; *p and *len receive the text. */
static dlqb_status required_text(const amqp_table_t *t, const char *name, const char **p,
                                 size_t *len, dlqb_error *why) {
  const amqp_field_value_t *v = dlqb_header_find(t, name);
  if (v == NULL) return dlqb_fail(why, DLQB_EINVAL, "%s is missing", name);
  if (!field_text(v, p, len))
    return dlqb_fail(why, DLQB_EINVAL, "%s must be a string, not %s", name,
                     kind_name(v->kind));
  trim(p, len);
  if (*len == 0) return dlqb_fail(why, DLQB_EINVAL, "%s is blank", name);
  return DLQB_OK;
}

static dlqb_status parse_id(const amqp_table_t *t, const char *name, char *dst,
                            dlqb_error *why) {
  const char *p = NULL;
  size_t len = 0;
  bool control = false;
  dlqb_status st = required_text(t, name, &p, &len, why);
  if (st != DLQB_OK) return st;
  if (len > DLQB_ID_MAX)
    return dlqb_fail(why, DLQB_EINVAL, "%s is longer than %d bytes", name, DLQB_ID_MAX);
  if (!dlqb_text_utf8_valid(p, len, &control))
    return dlqb_fail(why, DLQB_EINVAL, "%s is not valid UTF-8", name);
  if (control) return dlqb_fail(why, DLQB_EINVAL, "%s contains a control character", name);
  memcpy(dst, p, len);
  dst[len] = '\0';
  return DLQB_OK;
}

static dlqb_status parse_choice(const amqp_table_t *t, const char *name,
                                const char *const *choices, size_t nchoices,
                                const char *listed, char *dst, dlqb_error *why) {
  const char *p = NULL;
  size_t len = 0;
  char q[DLQB_QUOTE_BUF];
  dlqb_status st = required_text(t, name, &p, &len, why);
  if (st != DLQB_OK) return st;
  for (size_t i = 0; i < nchoices; i++) {
    if (strlen(choices[i]) == len && memcmp(choices[i], p, len) == 0) {
      memcpy(dst, choices[i], len + 1);
      return DLQB_OK;
    }
  }
  return dlqb_fail(why, DLQB_EINVAL, "%s '%s' is not one of %s", name, dlqb_text_quote(q, p, len),
                   listed);
}

static dlqb_status int_range_error(const char *name, int64_t lo, int64_t hi, const char *shown,
                                   dlqb_error *why) {
  return dlqb_fail(why, DLQB_EINVAL, "%s must be an integer between %" PRId64 " and %" PRId64
                   ", not %s", name, lo, hi, shown);
}

/* A decimal string: digits only, after trimming; no sign, no fraction. */
static dlqb_status int_from_text(const char *name, const char *p, size_t len, int64_t lo,
                                 int64_t hi, int64_t *out, dlqb_error *why) {
  char q[DLQB_QUOTE_BUF], shown[DLQB_QUOTE_BUF + 2];
  int64_t v = 0;
  bool ok;
  trim(&p, &len);
  ok = len > 0;
  for (size_t i = 0; ok && i < len; i++) {
    int d = p[i] - '0';
    if (d < 0 || d > 9 || v > (hi - d) / 10) ok = false; /* v*10+d > hi: stop before overflow */
    else v = v * 10 + d;
  }
  if (ok && v >= lo) {
    *out = v;
    return DLQB_OK;
  }
  snprintf(shown, sizeof shown, "'%s'", dlqb_text_quote(q, p, len));
  return int_range_error(name, lo, hi, shown, why);
}

/* An optional integer header of any AMQP integer kind or a decimal string. */
static dlqb_status parse_int(const amqp_table_t *t, const char *name, int64_t lo, int64_t hi,
                             int64_t dflt, int64_t *out, dlqb_error *why) {
  const amqp_field_value_t *v = dlqb_header_find(t, name);
  const char *p = NULL;
  size_t len = 0;
  char shown[32];
  int64_t n = 0;
  if (v == NULL) {
    *out = dflt;
    return DLQB_OK;
  }
  if (field_text(v, &p, &len)) return int_from_text(name, p, len, lo, hi, out, why);
  switch (v->kind) {
  case AMQP_FIELD_KIND_I8: n = v->value.i8; break;
  case AMQP_FIELD_KIND_U8: n = v->value.u8; break;
  case AMQP_FIELD_KIND_I16: n = v->value.i16; break;
  case AMQP_FIELD_KIND_U16: n = v->value.u16; break;
  case AMQP_FIELD_KIND_I32: n = v->value.i32; break;
  case AMQP_FIELD_KIND_U32: n = v->value.u32; break;
  case AMQP_FIELD_KIND_I64: n = v->value.i64; break;
  case AMQP_FIELD_KIND_U64:
    if (v->value.u64 > (uint64_t)hi) {
      snprintf(shown, sizeof shown, "%" PRIu64, v->value.u64);
      return int_range_error(name, lo, hi, shown, why);
    }
    n = (int64_t)v->value.u64;
    break;
  default:
    return dlqb_fail(why, DLQB_EINVAL, "%s must be an integer, not %s", name,
                     kind_name(v->kind));
  }
  if (n < lo || n > hi) {
    snprintf(shown, sizeof shown, "%" PRId64, n);
    return int_range_error(name, lo, hi, shown, why);
  }
  *out = n;
  return DLQB_OK;
}

static dlqb_status parse_last_error(const amqp_table_t *t, dlqb_envelope *e, dlqb_error *why) {
  const amqp_field_value_t *v = dlqb_header_find(t, DLQB_H_LAST_ERROR);
  const char *p = NULL;
  size_t len = 0;
  bool control = false;
  if (v == NULL) return DLQB_OK;
  if (!field_text(v, &p, &len))
    return dlqb_fail(why, DLQB_EINVAL, "last_error must be a string, not %s",
                     kind_name(v->kind));
  if (len > DLQB_LAST_ERROR_MAX)
    return dlqb_fail(why, DLQB_EINVAL, "last_error is longer than %d bytes",
                     DLQB_LAST_ERROR_MAX);
  if (!dlqb_text_utf8_valid(p, len, &control))
    return dlqb_fail(why, DLQB_EINVAL, "last_error is not valid UTF-8");
  /* Control characters are tolerated (someone may paste a stack trace in the
   * UI) but are not passed on into logs. */
  dlqb_text_sanitize(e->last_error, sizeof e->last_error, p, len);
  e->has_last_error = true;
  return DLQB_OK;
}

/* ---- civil time ------------------------------------------------------ */

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
 * algorithm), so no timegm, time zone or locale is involved. */
static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
  z += 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  *d = (int)(doy - (153 * mp + 2) / 5 + 1);
  *m = (int)(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int64_t y, int m) {
  static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : days[m - 1];
}

char *dlqb_iso_time(int64_t epoch_ms, char *buf, size_t len) {
  int64_t days = epoch_ms / MS_PER_DAY, rem = epoch_ms % MS_PER_DAY, y = 0;
  int m = 0, d = 0;
  if (buf == NULL || len == 0) return buf;
  if (rem < 0) { /* floor division: times before 1970 count back from midnight */
    rem += MS_PER_DAY;
    days--;
  }
  civil_from_days(days, &y, &m, &d);
  snprintf(buf, len, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02d.%03dZ", y, m, d,
           (int)(rem / 3600000), (int)(rem / 60000 % 60), (int)(rem / 1000 % 60),
           (int)(rem % 1000));
  return buf;
}

/* Reads exactly n digits at text[*pos]. */
static bool read_digits(const char *text, size_t len, size_t *pos, size_t n, int *out) {
  int v = 0;
  if (len - *pos < n) return false;
  for (size_t i = 0; i < n; i++) {
    char c = text[*pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *pos += n;
  *out = v;
  return true;
}

static bool read_char(const char *text, size_t len, size_t *pos, char c) {
  if (*pos >= len || text[*pos] != c) return false;
  (*pos)++;
  return true;
}

/* The optional ".fraction": 1 to 9 digits, kept to milliseconds. */
static bool read_fraction(const char *text, size_t len, size_t *pos, int *ms) {
  size_t digits = 0;
  *ms = 0;
  if (!read_char(text, len, pos, '.')) return true;
  while (*pos < len && text[*pos] >= '0' && text[*pos] <= '9') {
    if (digits < 3) *ms = *ms * 10 + (text[*pos] - '0');
    digits++;
    (*pos)++;
  }
  for (size_t i = digits; i < 3; i++) *ms *= 10;
  return digits >= 1 && digits <= 9;
}

static bool read_utc_suffix(const char *text, size_t len, size_t pos) {
  if (len - pos == 1) return text[pos] == 'Z';
  return len - pos == 6 && memcmp(text + pos, "+00:00", 6) == 0;
}

dlqb_status dlqb_iso_time_parse(const char *text, size_t len, int64_t *epoch_ms) {
  size_t pos = 0;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, ms = 0;
  if (text == NULL || epoch_ms == NULL) return DLQB_EINVAL;
  bool ok = read_digits(text, len, &pos, 4, &y) && read_char(text, len, &pos, '-') &&
            read_digits(text, len, &pos, 2, &mo) && read_char(text, len, &pos, '-') &&
            read_digits(text, len, &pos, 2, &d) && read_char(text, len, &pos, 'T') &&
            read_digits(text, len, &pos, 2, &h) && read_char(text, len, &pos, ':') &&
            read_digits(text, len, &pos, 2, &mi) && read_char(text, len, &pos, ':') &&
            read_digits(text, len, &pos, 2, &s) && read_fraction(text, len, &pos, &ms) &&
            read_utc_suffix(text, len, pos);
  if (!ok || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 ||
      s > 59)
    return DLQB_EINVAL;
  *epoch_ms = days_from_civil(y, mo, d) * MS_PER_DAY +
              (int64_t)((h * 60 + mi) * 60 + s) * 1000 + ms;
  return DLQB_OK;
}

bool dlqb_header_time(const amqp_table_t *t, const char *key, int64_t *epoch_ms) {
  const char *p = NULL;
  size_t len = 0;
  const amqp_field_value_t *v = dlqb_header_find(t, key);
  return v != NULL && field_text(v, &p, &len) && dlqb_iso_time_parse(p, len, epoch_ms) == DLQB_OK;
}

static dlqb_status parse_first_seen(const amqp_table_t *t, dlqb_envelope *e, dlqb_error *why) {
  const amqp_field_value_t *v = dlqb_header_find(t, DLQB_H_FIRST_SEEN_AT);
  const int64_t lo = days_from_civil(FIRST_YEAR, 1, 1) * MS_PER_DAY;
  const int64_t hi = days_from_civil(LAST_YEAR + 1, 1, 1) * MS_PER_DAY; /* exclusive */
  const char *p = NULL;
  size_t len = 0;
  char q[DLQB_QUOTE_BUF];
  int64_t ms = 0;
  if (v == NULL) return DLQB_OK;
  if (field_text(v, &p, &len)) {
    trim(&p, &len);
    if (dlqb_iso_time_parse(p, len, &ms) != DLQB_OK)
      return dlqb_fail(why, DLQB_EINVAL, "first_seen_at '%s' is not an ISO-8601 UTC time",
                       dlqb_text_quote(q, p, len));
    if (ms < lo || ms >= hi)
      return dlqb_fail(why, DLQB_EINVAL, "first_seen_at '%s' is outside the years %d to %d",
                       dlqb_text_quote(q, p, len), FIRST_YEAR, LAST_YEAR);
  } else if (v->kind == AMQP_FIELD_KIND_TIMESTAMP) {
    /* AMQP timestamps are seconds; range-check before scaling to avoid overflow. */
    uint64_t sec = v->value.u64;
    if (sec < (uint64_t)(lo / 1000) || sec >= (uint64_t)(hi / 1000))
      return dlqb_fail(why, DLQB_EINVAL,
                       "first_seen_at timestamp %" PRIu64 " is outside the years %d to %d",
                       sec, FIRST_YEAR, LAST_YEAR);
    ms = (int64_t)sec * 1000;
  } else {
    return dlqb_fail(why, DLQB_EINVAL, "first_seen_at must be a string or timestamp, not %s",
                     kind_name(v->kind));
  }
  e->has_first_seen_at = true;
  e->first_seen_at_ms = ms;
  return DLQB_OK;
}

/* ---- public: envelope ------------------------------------------------ */

dlqb_status dlqb_envelope_parse(const amqp_table_t *headers, int64_t default_max_attempts,
                                dlqb_envelope *out, dlqb_error *why) {
  dlqb_status st;
  if (out == NULL) return dlqb_fail(why, DLQB_EINVAL, "no envelope to parse into");
  memset(out, 0, sizeof *out);
  if ((st = check_duplicates(headers, why)) != DLQB_OK ||
      (st = parse_id(headers, DLQB_H_REQUEST_ID, out->request_id, why)) != DLQB_OK ||
      (st = parse_id(headers, DLQB_H_SOURCE_SYSTEM, out->source_system, why)) != DLQB_OK ||
      (st = parse_choice(headers, DLQB_H_LEGAL_BASIS, legal_bases, COUNT_OF(legal_bases),
                         "gdpr_art_15, gdpr_art_17, ccpa_1798_105, ccpa_1798_100",
                         out->legal_basis, why)) != DLQB_OK ||
      (st = parse_choice(headers, DLQB_H_ACTION, actions, COUNT_OF(actions),
                         "access, deletion, rectification", out->action, why)) != DLQB_OK ||
      (st = parse_int(headers, DLQB_H_ATTEMPT, 0, INT_FIELD_MAX, 0, &out->attempt, why)) !=
          DLQB_OK ||
      (st = parse_int(headers, DLQB_H_MAX_ATTEMPTS, 1, INT_FIELD_MAX, default_max_attempts,
                      &out->max_attempts, why)) != DLQB_OK ||
      (st = parse_int(headers, DLQB_H_REPLAY_COUNT, 0, INT_FIELD_MAX, 0, &out->replay_count,
                      why)) != DLQB_OK ||
      (st = parse_last_error(headers, out, why)) != DLQB_OK ||
      (st = parse_first_seen(headers, out, why)) != DLQB_OK)
    return st;
  return DLQB_OK;
}

/* ---- public: failure ------------------------------------------------- */

static const struct {
  const char *reason;
  dlqb_failure_kind kind;
} death_reasons[] = {
    {"rejected", DLQB_FAIL_REJECTED},
    {"delivery_limit", DLQB_FAIL_DELIVERY_LIMIT},
    {"expired", DLQB_FAIL_EXPIRED},
    {"maxlen", DLQB_FAIL_MAXLEN},
};

/* Reads x-death[0]; leaves out as REPORTED when anything is off. */
static void read_death(const amqp_table_t *headers, dlqb_failure *out) {
  const amqp_field_value_t *reason, *queue;
  const char *p = NULL;
  size_t len = 0;
  const amqp_table_t *death = dlqb_header_first_death(headers);
  if (death == NULL) return;
  reason = dlqb_header_find(death, "reason");
  if (reason == NULL || !field_text(reason, &p, &len)) return;
  for (size_t i = 0; i < COUNT_OF(death_reasons); i++) {
    if (strlen(death_reasons[i].reason) != len || memcmp(death_reasons[i].reason, p, len) != 0)
      continue;
    queue = dlqb_header_find(death, "queue");
    if (queue != NULL && field_text(queue, &p, &len)) {
      /* Expiry from one of our delay queues is the bridge's own backoff,
       * not a failure: a worker that reports a retried task publishes a
       * copy still carrying that entry first. */
      if (death_reasons[i].kind == DLQB_FAIL_EXPIRED && len >= strlen(DLQB_RETRY_PREFIX) &&
          memcmp(p, DLQB_RETRY_PREFIX, strlen(DLQB_RETRY_PREFIX)) == 0)
        return;
      dlqb_text_sanitize(out->queue, sizeof out->queue, p, len);
    }
    out->kind = death_reasons[i].kind;
    return;
  }
}

void dlqb_failure_read(const amqp_table_t *headers, dlqb_failure *out) {
  const amqp_field_value_t *we;
  const char *p = NULL;
  size_t len = 0;
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  out->kind = DLQB_FAIL_REPORTED;
  read_death(headers, out);
  we = dlqb_header_find(headers, DLQB_H_WORKER_ERROR);
  if (we != NULL && field_text(we, &p, &len)) {
    trim(&p, &len);
    /* A blank worker_error says nothing; treat it as absent. */
    if (len > 0) {
      dlqb_text_sanitize(out->worker_error, sizeof out->worker_error, p, len);
      out->has_worker_error = true;
    }
  }
}

/* ---- public: header rewriting ---------------------------------------- */

/* The last set naming key (later sets win), or NULL. */
static const dlqb_hset *set_for(const dlqb_hset *sets, size_t nsets, amqp_bytes_t key) {
  for (size_t i = nsets; i > 0; i--)
    if (sets[i - 1].key != NULL && bytes_eq(key, sets[i - 1].key)) return &sets[i - 1];
  return NULL;
}

static amqp_field_value_t set_value(const dlqb_hset *s) {
  amqp_field_value_t v;
  memset(&v, 0, sizeof v);
  if (s->kind == DLQB_HSET_INT) {
    v.kind = AMQP_FIELD_KIND_I64;
    v.value.i64 = s->num;
  } else {
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes = amqp_cstring_bytes(s->str != NULL ? s->str : "");
  }
  return v;
}

static bool emit(amqp_table_entry_t *scratch, size_t cap, size_t *n, amqp_bytes_t key,
                 amqp_field_value_t value) {
  if (*n >= cap || *n >= (size_t)INT_MAX) return false;
  scratch[*n].key = key;
  scratch[*n].value = value;
  (*n)++;
  return true;
}

static bool seen_before(const amqp_table_t *in, size_t i) {
  for (size_t j = 0; j < i; j++)
    if (bytes_same(in->entries[j].key, in->entries[i].key)) return true;
  return false;
}

dlqb_status dlqb_headers_apply(const amqp_table_t *in, const dlqb_hset *sets, size_t nsets,
                               amqp_table_entry_t *scratch, size_t cap, amqp_table_t *out) {
  size_t nin = table_count(in), n = 0;
  if (out == NULL) return DLQB_EINVAL;
  out->num_entries = 0;
  out->entries = scratch;
  if (sets == NULL) nsets = 0;
  if (scratch == NULL) cap = 0;
  for (size_t i = 0; i < nin; i++) {
    const amqp_table_entry_t *e = &in->entries[i];
    const dlqb_hset *s = set_for(sets, nsets, e->key);
    bool ok = true;
    if (s == NULL) ok = emit(scratch, cap, &n, e->key, e->value);
    else if (s->kind != DLQB_HSET_REMOVE && !seen_before(in, i))
      ok = emit(scratch, cap, &n, e->key, set_value(s));
    if (!ok) return DLQB_EINVAL;
  }
  for (size_t k = 0; k < nsets; k++) {
    const dlqb_hset *s = &sets[k];
    if (s->key == NULL || s->kind == DLQB_HSET_REMOVE) continue;
    amqp_bytes_t key = amqp_cstring_bytes(s->key);
    if (set_for(sets, nsets, key) != s || dlqb_header_find(in, s->key) != NULL) continue;
    if (!emit(scratch, cap, &n, key, set_value(s))) return DLQB_EINVAL;
  }
  out->num_entries = (int)n;
  return DLQB_OK;
}

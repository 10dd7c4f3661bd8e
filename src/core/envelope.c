/* Parses and validates the retry envelope carried in AMQP headers. */
#include "dlqb/envelope.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dlqb/calendar.h"
#include "dlqb/text.h"
#include "headers_private.h"

#define INT_FIELD_MAX DLQB_ENVELOPE_COUNT_MAX
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
  size_t n = dlqb__table_count(t);
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < COUNT_OF(envelope_keys); k++) {
      if (!dlqb__bytes_eq(t->entries[i].key, envelope_keys[k])) continue;
      for (size_t j = 0; j < i; j++)
        if (dlqb__bytes_eq(t->entries[j].key, envelope_keys[k]))
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
  if (!dlqb__field_text(v, p, len))
    return dlqb_fail(why, DLQB_EINVAL, "%s must be a string, not %s", name,
                     kind_name(v->kind));
  dlqb__trim(p, len);
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
  dlqb__trim(&p, &len);
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
  if (dlqb__field_text(v, &p, &len)) return int_from_text(name, p, len, lo, hi, out, why);
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
  if (!dlqb__field_text(v, &p, &len))
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
static dlqb_status parse_first_seen(const amqp_table_t *t, dlqb_envelope *e, dlqb_error *why) {
  const amqp_field_value_t *v = dlqb_header_find(t, DLQB_H_FIRST_SEEN_AT);
  const int64_t lo = dlqb_days_from_civil(FIRST_YEAR, 1, 1) * DLQB_MS_PER_DAY;
  const int64_t hi = dlqb_days_from_civil(LAST_YEAR + 1, 1, 1) * DLQB_MS_PER_DAY; /* exclusive */
  const char *p = NULL;
  size_t len = 0;
  char q[DLQB_QUOTE_BUF];
  int64_t ms = 0;
  if (v == NULL) return DLQB_OK;
  if (dlqb__field_text(v, &p, &len)) {
    dlqb__trim(&p, &len);
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

int64_t dlqb_envelope_count_next(int64_t n) {
  if (n < 0) return 1;
  return n >= DLQB_ENVELOPE_COUNT_MAX ? DLQB_ENVELOPE_COUNT_MAX : n + 1;
}

/* Parses and validates the retry envelope carried in AMQP headers. */
#include "dlqb/envelope.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dlqb/calendar.h"
#include "dlqb/text.h"
#include "headers_private.h"

#define INT_FIELD_MAX DLQB_ENVELOPE_COUNT_MAX
#define FIRST_YEAR    2000 /* first_seen_at sanity range, inclusive */
#define LAST_YEAR     2200

/* The keys dlqb_envelope_parse reads; each may appear at most once, since a
 * repeated key would leave the retry state ambiguous. */
/* The profile's fields (dlqb/pipeline.h) are the rest. */
static const char *const envelope_keys[] = {
    DLQB_H_ATTEMPT,       DLQB_H_MAX_ATTEMPTS, DLQB_H_LAST_ERROR,
    DLQB_H_FIRST_SEEN_AT, DLQB_H_REPLAY_COUNT,
};

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

/* True when t holds key at an index before i too. */
static bool seen_before(const amqp_table_t *t, size_t i, const char *key) {
  for (size_t j = 0; j < i; j++)
    if (dlqb__bytes_eq(t->entries[j].key, key)) return true;
  return false;
}

static dlqb_status check_duplicates(const amqp_table_t *t, const dlqb_profile *profile,
                                    dlqb_error *why) {
  size_t n = dlqb__table_count(t);
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < profile->nfields; k++) {
      const char *key = profile->fields[k].name;
      if (dlqb__bytes_eq(t->entries[i].key, key) && seen_before(t, i, key))
        return dlqb_fail(why, DLQB_EINVAL, "duplicate header '%s'", key);
    }
    if (strcmp(profile->sla_clock, DLQB_H_FIRST_SEEN_AT) != 0 &&
        dlqb__bytes_eq(t->entries[i].key, profile->sla_clock) &&
        seen_before(t, i, profile->sla_clock))
      return dlqb_fail(why, DLQB_EINVAL, "duplicate header '%s'", profile->sla_clock);
    for (size_t k = 0; k < COUNT_OF(envelope_keys); k++) {
      if (dlqb__bytes_eq(t->entries[i].key, envelope_keys[k]) &&
          seen_before(t, i, envelope_keys[k]))
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
    return dlqb_fail(why, DLQB_EINVAL, "%s must be a string, not %s", name, kind_name(v->kind));
  dlqb__trim(p, len);
  if (*len == 0) return dlqb_fail(why, DLQB_EINVAL, "%s is blank", name);
  return DLQB_OK;
}

static dlqb_status parse_id(const amqp_table_t *t, const char *name, char *dst, dlqb_error *why) {
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

/* A closed-set header: values is "a,b,c"; dst (dst_len bytes, may be 0)
 * gets the value when it fits. */
static dlqb_status parse_choice(const amqp_table_t *t, const char *name, const char *values,
                                char *dst, size_t dst_len, dlqb_error *why) {
  const char *p = NULL;
  size_t len = 0;
  char q[DLQB_QUOTE_BUF], listed[DLQB_FIELD_VALUES_MAX * 2];
  dlqb_status st = required_text(t, name, &p, &len, why);
  if (st != DLQB_OK) return st;
  size_t used = 0;
  for (const char *v = values; *v != '\0';) {
    size_t n = strcspn(v, ",");
    if (n == len && memcmp(v, p, len) == 0) {
      if (len < dst_len) {
        memcpy(dst, p, len);
        dst[len] = '\0';
      }
      return DLQB_OK;
    }
    /* "a, b, c" for the error */
    if (used + n + 2 < sizeof listed) {
      if (used > 0) {
        memcpy(listed + used, ", ", 2);
        used += 2;
      }
      memcpy(listed + used, v, n);
      used += n;
    }
    v += n + (v[n] == ',');
  }
  listed[used] = '\0';
  return dlqb_fail(why, DLQB_EINVAL, "%s '%s' is not one of %s", name, dlqb_text_quote(q, p, len),
                   listed);
}

static dlqb_status int_range_error(const char *name, int64_t lo, int64_t hi, const char *shown,
                                   dlqb_error *why) {
  return dlqb_fail(why, DLQB_EINVAL,
                   "%s must be an integer between %" PRId64 " and %" PRId64 ", not %s", name, lo,
                   hi, shown);
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
    return dlqb_fail(why, DLQB_EINVAL, "%s must be an integer, not %s", name, kind_name(v->kind));
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
    return dlqb_fail(why, DLQB_EINVAL, "last_error must be a string, not %s", kind_name(v->kind));
  if (len > DLQB_LAST_ERROR_MAX)
    return dlqb_fail(why, DLQB_EINVAL, "last_error is longer than %d bytes", DLQB_LAST_ERROR_MAX);
  if (!dlqb_text_utf8_valid(p, len, &control))
    return dlqb_fail(why, DLQB_EINVAL, "last_error is not valid UTF-8");
  /* Control characters are tolerated (someone may paste a stack trace in the
   * UI) but are not passed on into logs. */
  dlqb_text_sanitize(e->last_error, sizeof e->last_error, p, len);
  e->has_last_error = true;
  return DLQB_OK;
}
/* An optional time header (first_seen_at, or a profile's sla_clock). */
static dlqb_status parse_time(const amqp_table_t *t, const char *name, bool *has, int64_t *out,
                              dlqb_error *why) {
  const amqp_field_value_t *v = dlqb_header_find(t, name);
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
      return dlqb_fail(why, DLQB_EINVAL, "%s '%s' is not an ISO-8601 UTC time", name,
                       dlqb_text_quote(q, p, len));
    if (ms < lo || ms >= hi)
      return dlqb_fail(why, DLQB_EINVAL, "%s '%s' is outside the years %d to %d", name,
                       dlqb_text_quote(q, p, len), FIRST_YEAR, LAST_YEAR);
  } else if (v->kind == AMQP_FIELD_KIND_TIMESTAMP) {
    /* AMQP timestamps are seconds; range-check before scaling to avoid overflow. */
    uint64_t sec = v->value.u64;
    if (sec < (uint64_t)(lo / 1000) || sec >= (uint64_t)(hi / 1000))
      return dlqb_fail(why, DLQB_EINVAL, "%s timestamp %" PRIu64 " is outside the years %d to %d",
                       name, sec, FIRST_YEAR, LAST_YEAR);
    ms = (int64_t)sec * 1000;
  } else {
    return dlqb_fail(why, DLQB_EINVAL, "%s must be a string or timestamp, not %s", name,
                     kind_name(v->kind));
  }
  *has = true;
  *out = ms;
  return DLQB_OK;
}

/* ---- public: envelope ------------------------------------------------ */

/* One profile field: identity into dst, the DSR's closed fields into
 * theirs, every other checked and not kept. */
static dlqb_status parse_field(const amqp_table_t *t, const dlqb_field_rule *f, size_t index,
                               dlqb_envelope *e, dlqb_error *why) {
  char scratch[DLQB_ID_MAX + 1];
  if (!f->required && dlqb_header_find(t, f->name) == NULL) return DLQB_OK;
  if (f->values[0] == '\0')
    return parse_id(t, f->name,
                    index == 0   ? e->request_id
                    : index == 1 ? e->source_system
                                 : scratch,
                    why);
  if (strcmp(f->name, DLQB_H_LEGAL_BASIS) == 0)
    return parse_choice(t, f->name, f->values, e->legal_basis, sizeof e->legal_basis, why);
  if (strcmp(f->name, DLQB_H_ACTION) == 0)
    return parse_choice(t, f->name, f->values, e->action, sizeof e->action, why);
  return parse_choice(t, f->name, f->values, NULL, 0, why);
}

dlqb_status dlqb_envelope_parse_profile(const amqp_table_t *headers, const dlqb_profile *profile,
                                        int64_t default_max_attempts, dlqb_envelope *out,
                                        dlqb_error *why) {
  dlqb_status st;
  if (out == NULL || profile == NULL)
    return dlqb_fail(why, DLQB_EINVAL, "no envelope to parse into");
  memset(out, 0, sizeof *out);
  if ((st = check_duplicates(headers, profile, why)) != DLQB_OK) return st;
  bool own_clock = strcmp(profile->sla_clock, DLQB_H_FIRST_SEEN_AT) != 0;
  for (size_t i = 0; i < profile->nfields; i++) {
    const dlqb_field_rule *f = &profile->fields[i];
    if (own_clock && strcmp(f->name, profile->sla_clock) == 0) continue; /* a time: below */
    if ((st = parse_field(headers, f, i, out, why)) != DLQB_OK) return st;
  }
  if ((st = parse_int(headers, DLQB_H_ATTEMPT, 0, INT_FIELD_MAX, 0, &out->attempt, why)) !=
          DLQB_OK ||
      (st = parse_int(headers, DLQB_H_MAX_ATTEMPTS, 1, INT_FIELD_MAX, default_max_attempts,
                      &out->max_attempts, why)) != DLQB_OK ||
      (st = parse_int(headers, DLQB_H_REPLAY_COUNT, 0, INT_FIELD_MAX, 0, &out->replay_count,
                      why)) != DLQB_OK ||
      (st = parse_last_error(headers, out, why)) != DLQB_OK ||
      (st = parse_time(headers, DLQB_H_FIRST_SEEN_AT, &out->has_first_seen_at,
                       &out->first_seen_at_ms, why)) != DLQB_OK)
    return st;
  if (!own_clock) {
    out->has_sla_start = out->has_first_seen_at;
    out->sla_start_ms = out->first_seen_at_ms;
    return DLQB_OK;
  }
  long k = dlqb_profile_field(profile, profile->sla_clock);
  if (k >= 0 && profile->fields[k].required &&
      dlqb_header_find(headers, profile->sla_clock) == NULL)
    return dlqb_fail(why, DLQB_EINVAL, "%s is missing", profile->sla_clock);
  return parse_time(headers, profile->sla_clock, &out->has_sla_start, &out->sla_start_ms, why);
}

dlqb_status dlqb_envelope_parse(const amqp_table_t *headers, int64_t default_max_attempts,
                                dlqb_envelope *out, dlqb_error *why) {
  dlqb_profile dsr;
  (void)dlqb_profile_builtin(DLQB_PIPELINE_DEFAULT, &dsr, NULL);
  return dlqb_envelope_parse_profile(headers, &dsr, default_max_attempts, out, why);
}

int64_t dlqb_envelope_count_next(int64_t n) {
  if (n < 0) return 1;
  return n >= DLQB_ENVELOPE_COUNT_MAX ? DLQB_ENVELOPE_COUNT_MAX : n + 1;
}

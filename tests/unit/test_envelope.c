/* Unit tests of the header modules: envelope parsing, x-death reading, header rewriting, the calendar and text. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/envelope.h"
#include "dlqb/rewrite.h"
#include "dlqb/xdeath.h"
#include "dlqb/text.h"

#define DEFAULT_MAX 7
#define NELEM(a)    (sizeof(a) / sizeof((a)[0]))

static const char *const required_fields[] = {DLQB_H_REQUEST_ID, DLQB_H_SOURCE_SYSTEM,
                                              DLQB_H_LEGAL_BASIS, DLQB_H_ACTION};
static const char *const int_fields[] = {DLQB_H_ATTEMPT, DLQB_H_MAX_ATTEMPTS, DLQB_H_REPLAY_COUNT};

/* A header table built in place; never copy it (t points into e). */
typedef struct {
  amqp_table_entry_t e[40];
  amqp_table_t t;
} hdrs;

static amqp_field_value_t v_kind(uint8_t kind) {
  amqp_field_value_t v;
  memset(&v, 0, sizeof v);
  v.kind = kind;
  return v;
}

static amqp_field_value_t v_bytes(uint8_t kind, const char *p, size_t n) {
  amqp_field_value_t v = v_kind(kind);
  v.value.bytes.bytes = (void *)p;
  v.value.bytes.len = n;
  return v;
}

static amqp_field_value_t v_str(const char *s) {
  return v_bytes(AMQP_FIELD_KIND_UTF8, s, strlen(s));
}

static amqp_field_value_t v_int(uint8_t kind, int64_t n) {
  amqp_field_value_t v = v_kind(kind);
  switch (kind) {
  case AMQP_FIELD_KIND_I8: v.value.i8 = (int8_t)n; break;
  case AMQP_FIELD_KIND_U8: v.value.u8 = (uint8_t)n; break;
  case AMQP_FIELD_KIND_I16: v.value.i16 = (int16_t)n; break;
  case AMQP_FIELD_KIND_U16: v.value.u16 = (uint16_t)n; break;
  case AMQP_FIELD_KIND_I32: v.value.i32 = (int32_t)n; break;
  case AMQP_FIELD_KIND_U32: v.value.u32 = (uint32_t)n; break;
  case AMQP_FIELD_KIND_I64: v.value.i64 = n; break;
  default: v.value.u64 = (uint64_t)n; break; /* U64, TIMESTAMP */
  }
  return v;
}

static amqp_field_value_t v_table(amqp_table_entry_t *entries, int n) {
  amqp_field_value_t v = v_kind(AMQP_FIELD_KIND_TABLE);
  v.value.table.entries = entries;
  v.value.table.num_entries = n;
  return v;
}

static amqp_field_value_t v_array(amqp_field_value_t *items, int n) {
  amqp_field_value_t v = v_kind(AMQP_FIELD_KIND_ARRAY);
  v.value.array.entries = items;
  v.value.array.num_entries = n;
  return v;
}

static amqp_table_entry_t entry(const char *key, amqp_field_value_t v) {
  amqp_table_entry_t e;
  e.key = amqp_cstring_bytes(key);
  e.value = v;
  return e;
}

static void h_clear(hdrs *h) {
  memset(h, 0, sizeof *h);
  h->t.entries = h->e;
}

static void h_add(hdrs *h, const char *key, amqp_field_value_t v) {
  assert_true((size_t)h->t.num_entries < NELEM(h->e));
  h->e[h->t.num_entries++] = entry(key, v);
}

static void h_put(hdrs *h, const char *key, amqp_field_value_t v) {
  for (int i = 0; i < h->t.num_entries; i++) {
    if (h->e[i].key.len == strlen(key) && memcmp(h->e[i].key.bytes, key, strlen(key)) == 0) {
      h->e[i].value = v;
      return;
    }
  }
  h_add(h, key, v);
}

static void h_del(hdrs *h, const char *key) {
  int n = 0;
  for (int i = 0; i < h->t.num_entries; i++)
    if (!(h->e[i].key.len == strlen(key) && memcmp(h->e[i].key.bytes, key, strlen(key)) == 0))
      h->e[n++] = h->e[i];
  h->t.num_entries = n;
}

/* The smallest valid envelope. */
static void h_valid(hdrs *h) {
  h_clear(h);
  h_add(h, DLQB_H_REQUEST_ID, v_str("req-1"));
  h_add(h, DLQB_H_SOURCE_SYSTEM, v_str("crm"));
  h_add(h, DLQB_H_LEGAL_BASIS, v_str("gdpr_art_17"));
  h_add(h, DLQB_H_ACTION, v_str("deletion"));
}

/* True when s is printable valid UTF-8: sanitizing it changes nothing. */
static bool is_clean(const char *s) {
  char copy[4096];
  size_t n = strlen(s);
  return n < sizeof copy && dlqb_text_sanitize(copy, sizeof copy, s, n) == n &&
         memcmp(copy, s, n) == 0;
}

static void expect_invalid(const hdrs *h, const char *msg) {
  dlqb_envelope env;
  dlqb_error why;
  memset(&why, 0, sizeof why);
  assert_int_equal(dlqb_envelope_parse(&h->t, DEFAULT_MAX, &env, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, msg);
  assert_true(is_clean(why.msg));
}

static void expect_valid(const hdrs *h, dlqb_envelope *env) {
  dlqb_error why;
  memset(&why, 0, sizeof why);
  dlqb_status st = dlqb_envelope_parse(&h->t, DEFAULT_MAX, env, &why);
  if (st != DLQB_OK) fail_msg("unexpected parse error: %s", why.msg);
}

static void expect_field_invalid(const char *key, amqp_field_value_t v, const char *msg) {
  hdrs h;
  h_valid(&h);
  h_put(&h, key, v);
  expect_invalid(&h, msg);
}

static void expect_field_valid(const char *key, amqp_field_value_t v, dlqb_envelope *env) {
  hdrs h;
  h_valid(&h);
  h_put(&h, key, v);
  expect_valid(&h, env);
}

/* ---- envelope_parse -------------------------------------------------- */

static void test_minimal_envelope_gets_defaults(void **state) {
  (void)state;
  hdrs h;
  dlqb_envelope env;
  h_valid(&h);
  expect_valid(&h, &env);
  assert_string_equal(env.request_id, "req-1");
  assert_string_equal(env.source_system, "crm");
  assert_string_equal(env.legal_basis, "gdpr_art_17");
  assert_string_equal(env.action, "deletion");
  assert_int_equal(env.attempt, 0);
  assert_int_equal(env.max_attempts, DEFAULT_MAX);
  assert_int_equal(env.replay_count, 0);
  assert_false(env.has_last_error);
  assert_string_equal(env.last_error, "");
  assert_false(env.has_first_seen_at);
}

static void test_full_envelope_is_trimmed_and_read(void **state) {
  (void)state;
  hdrs h;
  dlqb_envelope env;
  h_clear(&h);
  h_add(&h, "x-custom", v_str("ignored"));
  h_add(&h, DLQB_H_REQUEST_ID, v_str("  \t req-\xc3\xa9\xe6\x97\xa5 \r\n"));
  h_add(&h, DLQB_H_SOURCE_SYSTEM, v_bytes(AMQP_FIELD_KIND_BYTES, " hr ", 4));
  h_add(&h, DLQB_H_LEGAL_BASIS, v_str(" ccpa_1798_105\n"));
  h_add(&h, DLQB_H_ACTION, v_str("\taccess "));
  h_add(&h, DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_I32, 3));
  h_add(&h, DLQB_H_MAX_ATTEMPTS, v_str("9"));
  h_add(&h, DLQB_H_REPLAY_COUNT, v_int(AMQP_FIELD_KIND_U8, 2));
  h_add(&h, DLQB_H_LAST_ERROR, v_str("rejected by worker: upstream 503"));
  h_add(&h, DLQB_H_FIRST_SEEN_AT, v_str("2026-11-30T05:09:48Z"));
  expect_valid(&h, &env);
  assert_string_equal(env.request_id, "req-\xc3\xa9\xe6\x97\xa5");
  assert_string_equal(env.source_system, "hr");
  assert_string_equal(env.legal_basis, "ccpa_1798_105");
  assert_string_equal(env.action, "access");
  assert_int_equal(env.attempt, 3);
  assert_int_equal(env.max_attempts, 9);
  assert_int_equal(env.replay_count, 2);
  assert_true(env.has_last_error);
  assert_string_equal(env.last_error, "rejected by worker: upstream 503");
  assert_true(env.has_first_seen_at);
  assert_int_equal(env.first_seen_at_ms, INT64_C(1796015388000));
}

static void test_null_and_empty_tables(void **state) {
  (void)state;
  dlqb_envelope env;
  dlqb_error why;
  amqp_table_t t;
  amqp_table_entry_t one[1];
  assert_int_equal(dlqb_envelope_parse(NULL, DEFAULT_MAX, &env, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, "request_id is missing");
  t.num_entries = 0;
  t.entries = NULL;
  assert_int_equal(dlqb_envelope_parse(&t, DEFAULT_MAX, &env, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, "request_id is missing");
  t.num_entries = 5; /* a count with no entries behind it */
  assert_int_equal(dlqb_envelope_parse(&t, DEFAULT_MAX, &env, &why), DLQB_EINVAL);
  one[0] = entry(DLQB_H_REQUEST_ID, v_str("x"));
  t.entries = one;
  t.num_entries = -3;
  assert_int_equal(dlqb_envelope_parse(&t, DEFAULT_MAX, &env, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, "request_id is missing");
  /* A NULL why is allowed. */
  assert_int_equal(dlqb_envelope_parse(NULL, DEFAULT_MAX, &env, NULL), DLQB_EINVAL);
  assert_int_equal(dlqb_envelope_parse(NULL, DEFAULT_MAX, NULL, NULL), DLQB_EINVAL);
}

static void test_required_field_missing(void **state) {
  (void)state;
  char msg[128];
  for (size_t i = 0; i < NELEM(required_fields); i++) {
    hdrs h;
    h_valid(&h);
    h_del(&h, required_fields[i]);
    snprintf(msg, sizeof msg, "%s is missing", required_fields[i]);
    expect_invalid(&h, msg);
  }
}

static void test_required_field_blank(void **state) {
  (void)state;
  static const char *const blanks[] = {"", " ", "\t", " \t\r\n\v\f "};
  char msg[128];
  for (size_t i = 0; i < NELEM(required_fields); i++) {
    snprintf(msg, sizeof msg, "%s is blank", required_fields[i]);
    for (size_t b = 0; b < NELEM(blanks); b++)
      expect_field_invalid(required_fields[i], v_str(blanks[b]), msg);
    /* An empty value may come with a NULL pointer. */
    expect_field_invalid(required_fields[i], v_bytes(AMQP_FIELD_KIND_UTF8, NULL, 0), msg);
    expect_field_invalid(required_fields[i], v_bytes(AMQP_FIELD_KIND_BYTES, NULL, 0), msg);
  }
}

static void test_required_field_wrong_type(void **state) {
  (void)state;
  static const struct {
    uint8_t kind;
    const char *name;
  } kinds[] = {
      {AMQP_FIELD_KIND_BOOLEAN, "boolean"},
      {AMQP_FIELD_KIND_I8, "int8"},
      {AMQP_FIELD_KIND_U8, "uint8"},
      {AMQP_FIELD_KIND_I16, "int16"},
      {AMQP_FIELD_KIND_U16, "uint16"},
      {AMQP_FIELD_KIND_I32, "int32"},
      {AMQP_FIELD_KIND_U32, "uint32"},
      {AMQP_FIELD_KIND_I64, "int64"},
      {AMQP_FIELD_KIND_U64, "uint64"},
      {AMQP_FIELD_KIND_F32, "float"},
      {AMQP_FIELD_KIND_F64, "double"},
      {AMQP_FIELD_KIND_DECIMAL, "decimal"},
      {AMQP_FIELD_KIND_ARRAY, "array"},
      {AMQP_FIELD_KIND_TIMESTAMP, "timestamp"},
      {AMQP_FIELD_KIND_TABLE, "table"},
      {AMQP_FIELD_KIND_VOID, "void"},
      {'Z', "an unknown type"},
      {0, "an unknown type"},
  };
  char msg[128];
  for (size_t i = 0; i < NELEM(required_fields); i++) {
    for (size_t k = 0; k < NELEM(kinds); k++) {
      snprintf(msg, sizeof msg, "%s must be a string, not %s", required_fields[i], kinds[k].name);
      expect_field_invalid(required_fields[i], v_kind(kinds[k].kind), msg);
    }
  }
}

static void test_id_length_limit(void **state) {
  (void)state;
  static const char *const ids[] = {DLQB_H_REQUEST_ID, DLQB_H_SOURCE_SYSTEM};
  char text[DLQB_ID_MAX + 8];
  char msg[128];
  dlqb_envelope env;
  for (size_t i = 0; i < NELEM(ids); i++) {
    memset(text, 'a', DLQB_ID_MAX);
    text[DLQB_ID_MAX] = '\0';
    expect_field_valid(ids[i], v_str(text), &env);
    assert_int_equal(strlen(i == 0 ? env.request_id : env.source_system), DLQB_ID_MAX);
    /* Padding does not count: the limit is on the trimmed text. */
    text[0] = ' ';
    memset(text + 1, 'b', DLQB_ID_MAX);
    memcpy(text + 1 + DLQB_ID_MAX, " \n", 3);
    expect_field_valid(ids[i], v_str(text), &env);
    memset(text, 'a', DLQB_ID_MAX + 1);
    text[DLQB_ID_MAX + 1] = '\0';
    snprintf(msg, sizeof msg, "%s is longer than 256 bytes", ids[i]);
    expect_field_invalid(ids[i], v_str(text), msg);
  }
}

static void test_id_huge_value(void **state) {
  (void)state;
  size_t n = 1u << 20;
  char *big = malloc(n);
  assert_non_null(big);
  memset(big, 'x', n);
  expect_field_invalid(DLQB_H_REQUEST_ID, v_bytes(AMQP_FIELD_KIND_UTF8, big, n),
                       "request_id is longer than 256 bytes");
  free(big);
}

static void test_id_bad_utf8(void **state) {
  (void)state;
  static const char *const bad[] = {
      "\x80",             /* lone continuation */
      "ab\xff",           /* never valid */
      "\xc0\xaf",         /* overlong '/' */
      "\xc1\xbf",         /* overlong */
      "\xe0\x80\xaf",     /* overlong 3-byte */
      "\xed\xa0\x80",     /* surrogate */
      "\xf0\x80\x80\xaf", /* overlong 4-byte */
      "\xf4\x90\x80\x80", /* beyond U+10FFFF */
      "\xf5\x80\x80\x80", /* invalid lead */
      "x\xe2\x82",        /* truncated euro sign */
      "\xc3(",            /* bad continuation */
  };
  char msg[128];
  for (size_t i = 0; i < 2; i++) {
    snprintf(msg, sizeof msg, "%s is not valid UTF-8", required_fields[i]);
    for (size_t b = 0; b < NELEM(bad); b++)
      expect_field_invalid(required_fields[i], v_str(bad[b]), msg);
  }
}

static void test_id_good_utf8(void **state) {
  (void)state;
  static const char *const good[] = {"caf\xc3\xa9",  "\xe2\x82\xac",     "\xf0\x9f\x98\x80",
                                     "\xef\xbf\xbd", "\xf4\x8f\xbf\xbf", "\xc2\xa0x"};
  dlqb_envelope env;
  for (size_t g = 0; g < NELEM(good); g++) {
    expect_field_valid(DLQB_H_REQUEST_ID, v_str(good[g]), &env);
    assert_string_equal(env.request_id, good[g]);
  }
}

static void test_id_control_characters(void **state) {
  (void)state;
  static const char *const ctl[] = {"a\x01"
                                    "b",
                                    "a\tb",
                                    "a\nb",
                                    "a\x7f",
                                    "a\xc2\x85"
                                    "b",
                                    "\x1b[31m"};
  char msg[128];
  for (size_t i = 0; i < 2; i++) {
    snprintf(msg, sizeof msg, "%s contains a control character", required_fields[i]);
    for (size_t c = 0; c < NELEM(ctl); c++)
      expect_field_invalid(required_fields[i], v_str(ctl[c]), msg);
    /* An embedded NUL would cut the C string short. */
    expect_field_invalid(required_fields[i], v_bytes(AMQP_FIELD_KIND_BYTES, "ab\0cd", 5), msg);
  }
}

static void test_legal_basis_values(void **state) {
  (void)state;
  static const char *const ok[] = {"gdpr_art_15", "gdpr_art_17", "ccpa_1798_105", "ccpa_1798_100"};
  static const char *const bad[] = {"GDPR_ART_15", "gdpr_art_1", "gdpr_art_150",
                                    "gdpr art 15", "ccpa",       "gdpr_art_15 x"};
  char msg[256];
  dlqb_envelope env;
  for (size_t i = 0; i < NELEM(ok); i++) {
    expect_field_valid(DLQB_H_LEGAL_BASIS, v_str(ok[i]), &env);
    assert_string_equal(env.legal_basis, ok[i]);
  }
  for (size_t i = 0; i < NELEM(bad); i++) {
    snprintf(msg, sizeof msg,
             "legal_basis '%s' is not one of gdpr_art_15, gdpr_art_17, ccpa_1798_105, "
             "ccpa_1798_100",
             bad[i]);
    expect_field_invalid(DLQB_H_LEGAL_BASIS, v_str(bad[i]), msg);
  }
  expect_field_invalid(DLQB_H_LEGAL_BASIS, v_str("gdpr_art_99"),
                       "legal_basis 'gdpr_art_99' is not one of gdpr_art_15, gdpr_art_17, "
                       "ccpa_1798_105, ccpa_1798_100");
  /* A NUL inside the value must not let a prefix match. */
  expect_field_invalid(DLQB_H_LEGAL_BASIS, v_bytes(AMQP_FIELD_KIND_UTF8, "gdpr_art_15\0x", 13),
                       "legal_basis 'gdpr_art_15?x' is not one of gdpr_art_15, gdpr_art_17, "
                       "ccpa_1798_105, ccpa_1798_100");
}

static void test_action_values(void **state) {
  (void)state;
  static const char *const ok[] = {"access", "deletion", "rectification"};
  static const char *const bad[] = {"Access", "delete", "erasure", "access2", "acces"};
  char msg[256];
  dlqb_envelope env;
  for (size_t i = 0; i < NELEM(ok); i++) {
    expect_field_valid(DLQB_H_ACTION, v_str(ok[i]), &env);
    assert_string_equal(env.action, ok[i]);
  }
  for (size_t i = 0; i < NELEM(bad); i++) {
    snprintf(msg, sizeof msg, "action '%s' is not one of access, deletion, rectification", bad[i]);
    expect_field_invalid(DLQB_H_ACTION, v_str(bad[i]), msg);
  }
}

static void test_error_quotes_at_most_64_bytes(void **state) {
  (void)state;
  char big[1000], msg[256], x64[65];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  memset(x64, 'x', 64);
  x64[64] = '\0';
  snprintf(msg, sizeof msg, "action '%s...' is not one of access, deletion, rectification", x64);
  expect_field_invalid(DLQB_H_ACTION, v_str(big), msg);
  /* Exactly 64 bytes is quoted whole. */
  snprintf(msg, sizeof msg, "action '%s' is not one of access, deletion, rectification", x64);
  expect_field_invalid(DLQB_H_ACTION, v_str(x64), msg);
  /* Hostile bytes are shown as '?', and a cut never splits a character. */
  expect_field_invalid(DLQB_H_ACTION, v_str("\x1b[2J\xff\xc3\xa9"),
                       "action '?[2J?\xc3\xa9' is not one of access, deletion, rectification");
  char euros[3 * 30 + 1] = "";
  for (int i = 0; i < 30; i++) strcat(euros, "\xe2\x82\xac");
  char expect_q[3 * 21 + 1] = "";
  for (int i = 0; i < 21; i++) strcat(expect_q, "\xe2\x82\xac"); /* 63 bytes fit in 64 */
  snprintf(msg, sizeof msg, "action '%s...' is not one of access, deletion, rectification",
           expect_q);
  expect_field_invalid(DLQB_H_ACTION, v_str(euros), msg);
}

static void test_integer_kinds(void **state) {
  (void)state;
  static const uint8_t kinds[] = {AMQP_FIELD_KIND_I8,  AMQP_FIELD_KIND_U8,  AMQP_FIELD_KIND_I16,
                                  AMQP_FIELD_KIND_U16, AMQP_FIELD_KIND_I32, AMQP_FIELD_KIND_U32,
                                  AMQP_FIELD_KIND_I64, AMQP_FIELD_KIND_U64};
  dlqb_envelope env;
  for (size_t f = 0; f < NELEM(int_fields); f++) {
    for (size_t k = 0; k < NELEM(kinds); k++) {
      expect_field_valid(int_fields[f], v_int(kinds[k], 42), &env);
      int64_t got = f == 0 ? env.attempt : f == 1 ? env.max_attempts : env.replay_count;
      assert_int_equal(got, 42);
    }
  }
  expect_field_valid(DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_I8, 127), &env);
  assert_int_equal(env.attempt, 127);
  expect_field_valid(DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_U16, 65535), &env);
  assert_int_equal(env.attempt, 65535);
  expect_field_valid(DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_U32, 1000000), &env);
  assert_int_equal(env.attempt, 1000000);
}

static void test_integer_strings(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int64_t value;
  } ok[] = {{"0", 0},     {" 42 ", 42},
            {"007", 7},   {"1000000", 1000000},
            {"\t5\n", 5}, {"0000000000000000000000001", 1}};
  dlqb_envelope env;
  for (size_t i = 0; i < NELEM(ok); i++) {
    expect_field_valid(DLQB_H_ATTEMPT, v_str(ok[i].text), &env);
    assert_int_equal(env.attempt, ok[i].value);
    expect_field_valid(DLQB_H_REPLAY_COUNT,
                       v_bytes(AMQP_FIELD_KIND_BYTES, ok[i].text, strlen(ok[i].text)), &env);
    assert_int_equal(env.replay_count, ok[i].value);
  }
}

static void test_integer_strings_rejected(void **state) {
  (void)state;
  static const struct {
    const char *text, *shown;
  } bad[] = {
      {"", ""},
      {"   ", ""},
      {"-1", "-1"},
      {"+1", "+1"},
      {"1.5", "1.5"},
      {"12abc", "12abc"},
      {"1e3", "1e3"},
      {"0x10", "0x10"},
      {"1 2", "1 2"},
      {"1000001", "1000001"},
      {"99999999999999999999999", "99999999999999999999999"},
      {"18446744073709551616", "18446744073709551616"},
      {"\xd9\xa3", "\xd9\xa3"}, /* ARABIC-INDIC DIGIT THREE is not a decimal digit here */
  };
  char msg[256];
  for (size_t i = 0; i < NELEM(bad); i++) {
    snprintf(msg, sizeof msg, "attempt must be an integer between 0 and 1000000, not '%s'",
             bad[i].shown);
    expect_field_invalid(DLQB_H_ATTEMPT, v_str(bad[i].text), msg);
  }
  expect_field_invalid(DLQB_H_MAX_ATTEMPTS, v_str("0"),
                       "max_attempts must be an integer between 1 and 1000000, not '0'");
  expect_field_invalid(DLQB_H_ATTEMPT, v_bytes(AMQP_FIELD_KIND_UTF8, NULL, 0),
                       "attempt must be an integer between 0 and 1000000, not ''");
}

static void test_integer_bounds(void **state) {
  (void)state;
  dlqb_envelope env;
  expect_field_valid(DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_I64, 0), &env);
  assert_int_equal(env.attempt, 0);
  expect_field_invalid(DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_I8, -1),
                       "attempt must be an integer between 0 and 1000000, not -1");
  expect_field_invalid(DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_I64, 1000001),
                       "attempt must be an integer between 0 and 1000000, not 1000001");
  expect_field_invalid(DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_I64, INT64_MIN),
                       "attempt must be an integer between 0 and 1000000, not "
                       "-9223372036854775808");
  expect_field_invalid(DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_U64, -1),
                       "attempt must be an integer between 0 and 1000000, not "
                       "18446744073709551615");
  expect_field_invalid(DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_U32, UINT32_MAX),
                       "attempt must be an integer between 0 and 1000000, not 4294967295");
  expect_field_invalid(DLQB_H_MAX_ATTEMPTS, v_int(AMQP_FIELD_KIND_I32, 0),
                       "max_attempts must be an integer between 1 and 1000000, not 0");
  expect_field_valid(DLQB_H_MAX_ATTEMPTS, v_int(AMQP_FIELD_KIND_I32, 1), &env);
  assert_int_equal(env.max_attempts, 1);
  expect_field_valid(DLQB_H_MAX_ATTEMPTS, v_int(AMQP_FIELD_KIND_I32, 1000000), &env);
  assert_int_equal(env.max_attempts, 1000000);
  expect_field_invalid(DLQB_H_MAX_ATTEMPTS, v_int(AMQP_FIELD_KIND_I32, 1000001),
                       "max_attempts must be an integer between 1 and 1000000, not 1000001");
  expect_field_invalid(DLQB_H_REPLAY_COUNT, v_int(AMQP_FIELD_KIND_I16, -5),
                       "replay_count must be an integer between 0 and 1000000, not -5");
}

static void test_integer_wrong_types(void **state) {
  (void)state;
  static const struct {
    uint8_t kind;
    const char *name;
  } kinds[] = {{AMQP_FIELD_KIND_BOOLEAN, "boolean"},
               {AMQP_FIELD_KIND_F32, "float"},
               {AMQP_FIELD_KIND_F64, "double"},
               {AMQP_FIELD_KIND_DECIMAL, "decimal"},
               {AMQP_FIELD_KIND_TABLE, "table"},
               {AMQP_FIELD_KIND_ARRAY, "array"},
               {AMQP_FIELD_KIND_VOID, "void"},
               {AMQP_FIELD_KIND_TIMESTAMP, "timestamp"},
               {'?', "an unknown type"}};
  char msg[128];
  for (size_t f = 0; f < NELEM(int_fields); f++) {
    for (size_t k = 0; k < NELEM(kinds); k++) {
      snprintf(msg, sizeof msg, "%s must be an integer, not %s", int_fields[f], kinds[k].name);
      expect_field_invalid(int_fields[f], v_kind(kinds[k].kind), msg);
    }
  }
}

static void test_default_max_attempts_passes_through(void **state) {
  (void)state;
  hdrs h;
  dlqb_envelope env;
  dlqb_error why;
  h_valid(&h);
  assert_int_equal(dlqb_envelope_parse(&h.t, 3, &env, &why), DLQB_OK);
  assert_int_equal(env.max_attempts, 3);
  h_add(&h, DLQB_H_MAX_ATTEMPTS, v_int(AMQP_FIELD_KIND_U8, 11));
  assert_int_equal(dlqb_envelope_parse(&h.t, 3, &env, &why), DLQB_OK);
  assert_int_equal(env.max_attempts, 11);
}

static void test_duplicate_keys(void **state) {
  (void)state;
  static const char *const keys[] = {
      DLQB_H_REQUEST_ID, DLQB_H_SOURCE_SYSTEM, DLQB_H_LEGAL_BASIS,
      DLQB_H_ACTION,     DLQB_H_ATTEMPT,       DLQB_H_MAX_ATTEMPTS,
      DLQB_H_LAST_ERROR, DLQB_H_FIRST_SEEN_AT, DLQB_H_REPLAY_COUNT,
  };
  static const char *const values[] = {"r", "s", "gdpr_art_15",          "access", "1",
                                       "3", "e", "2026-01-01T00:00:00Z", "0"};
  char msg[128];
  for (size_t i = 0; i < NELEM(keys); i++) {
    hdrs h;
    h_valid(&h);
    h_put(&h, keys[i], v_str(values[i]));
    h_add(&h, keys[i], v_str(values[i])); /* same value twice is still ambiguous */
    snprintf(msg, sizeof msg, "duplicate header '%s'", keys[i]);
    expect_invalid(&h, msg);
  }
}

static void test_duplicate_reported_first(void **state) {
  (void)state;
  hdrs h;
  h_clear(&h);
  h_add(&h, DLQB_H_ATTEMPT, v_int(AMQP_FIELD_KIND_I32, 1));
  h_add(&h, DLQB_H_ATTEMPT, v_str("bogus"));
  expect_invalid(&h, "duplicate header 'attempt'");
}

static void test_unknown_and_repeated_other_headers_ignored(void **state) {
  (void)state;
  hdrs h;
  dlqb_envelope env;
  amqp_table_entry_t inner[2];
  amqp_field_value_t items[2];
  inner[0] = entry("request_id", v_str("not me"));
  inner[1] = entry("attempt", v_kind(AMQP_FIELD_KIND_BOOLEAN));
  items[0] = v_table(inner, 2);
  items[1] = v_kind('Q');
  h_valid(&h);
  h_add(&h, "x-custom", v_str("a"));
  h_add(&h, "x-custom", v_str("b"));
  h_add(&h, "nested", v_table(inner, 2));
  h_add(&h, "list", v_array(items, 2));
  h_add(&h, "weird", v_kind('Q'));
  h_add(&h, DLQB_H_WORKER_ERROR, v_str("one"));
  h_add(&h, DLQB_H_WORKER_ERROR, v_str("two"));
  h_add(&h, DLQB_H_DLQ_REASON, v_kind(AMQP_FIELD_KIND_TABLE));
  h_add(&h, "Attempt", v_str("not-an-int")); /* keys are case-sensitive */
  expect_valid(&h, &env);
  assert_string_equal(env.request_id, "req-1");
  assert_int_equal(env.attempt, 0);
}

static void test_first_problem_is_named(void **state) {
  (void)state;
  hdrs h;
  h_clear(&h);
  h_add(&h, DLQB_H_ACTION, v_str("nope"));
  h_add(&h, DLQB_H_ATTEMPT, v_str("x"));
  expect_invalid(&h, "request_id is missing");
  h_add(&h, DLQB_H_REQUEST_ID, v_str("r"));
  h_add(&h, DLQB_H_SOURCE_SYSTEM, v_str("s"));
  expect_invalid(&h, "legal_basis is missing");
  h_add(&h, DLQB_H_LEGAL_BASIS, v_str("gdpr_art_15"));
  expect_invalid(&h, "action 'nope' is not one of access, deletion, rectification");
  h_put(&h, DLQB_H_ACTION, v_str("access"));
  expect_invalid(&h, "attempt must be an integer between 0 and 1000000, not 'x'");
}

static void test_hostile_entries(void **state) {
  (void)state;
  hdrs h;
  dlqb_envelope env;
  amqp_table_entry_t deep[1];
  h_valid(&h);
  /* A key with no bytes, a NULL-pointer key claiming length, a deep table. */
  h.e[h.t.num_entries].key.bytes = NULL;
  h.e[h.t.num_entries].key.len = 0;
  h.e[h.t.num_entries++].value = v_str("x");
  h.e[h.t.num_entries].key.bytes = NULL;
  h.e[h.t.num_entries].key.len = 10;
  h.e[h.t.num_entries++].value = v_kind(AMQP_FIELD_KIND_VOID);
  deep[0] = entry("d", v_table(deep, 1)); /* a table that contains itself */
  h_add(&h, "deep", v_table(deep, 1));
  h_add(&h, "broken", v_table(NULL, 1000));
  h_add(&h, "broken-array", v_array(NULL, 1000));
  expect_valid(&h, &env);
  /* A string claiming length but with no bytes reads as empty. */
  expect_field_invalid(DLQB_H_REQUEST_ID, v_bytes(AMQP_FIELD_KIND_UTF8, NULL, 99),
                       "request_id is blank");
}

static void test_last_error_field(void **state) {
  (void)state;
  char text[DLQB_LAST_ERROR_MAX + 2];
  dlqb_envelope env;
  memset(text, 'e', DLQB_LAST_ERROR_MAX);
  text[DLQB_LAST_ERROR_MAX] = '\0';
  expect_field_valid(DLQB_H_LAST_ERROR, v_str(text), &env);
  assert_true(env.has_last_error);
  assert_string_equal(env.last_error, text);
  text[DLQB_LAST_ERROR_MAX] = 'e';
  text[DLQB_LAST_ERROR_MAX + 1] = '\0';
  expect_field_invalid(DLQB_H_LAST_ERROR, v_str(text), "last_error is longer than 500 bytes");
  expect_field_invalid(DLQB_H_LAST_ERROR, v_str("bad \xc3"), "last_error is not valid UTF-8");
  expect_field_invalid(DLQB_H_LAST_ERROR, v_int(AMQP_FIELD_KIND_I32, 1),
                       "last_error must be a string, not int32");
  expect_field_valid(DLQB_H_LAST_ERROR, v_str("line1\nline2 \xe2\x82\xac"), &env);
  assert_string_equal(env.last_error, "line1?line2 \xe2\x82\xac");
  expect_field_valid(DLQB_H_LAST_ERROR, v_str(""), &env);
  assert_true(env.has_last_error);
  assert_string_equal(env.last_error, "");
}

static void test_first_seen_at_strings(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int64_t ms;
  } ok[] = {
      {"2026-11-30T05:09:48Z", INT64_C(1796015388000)},
      {"2026-11-30T05:09:48+00:00", INT64_C(1796015388000)},
      {"2026-11-30T05:09:48.1Z", INT64_C(1796015388100)},
      {"2026-11-30T05:09:48.12Z", INT64_C(1796015388120)},
      {"2026-11-30T05:09:48.123Z", INT64_C(1796015388123)},
      {"2026-11-30T05:09:48.123999999Z", INT64_C(1796015388123)},
      {"2026-11-30T05:09:48.5+00:00", INT64_C(1796015388500)},
      {" 2026-11-30T05:09:48Z\n", INT64_C(1796015388000)},
      {"2000-01-01T00:00:00Z", INT64_C(946684800000)},
      {"2024-02-29T12:00:00Z", INT64_C(1709208000000)},
      {"2200-12-31T23:59:59.999Z", INT64_C(7289654399999)},
  };
  dlqb_envelope env;
  for (size_t i = 0; i < NELEM(ok); i++) {
    expect_field_valid(DLQB_H_FIRST_SEEN_AT, v_str(ok[i].text), &env);
    assert_true(env.has_first_seen_at);
    assert_int_equal(env.first_seen_at_ms, ok[i].ms);
  }
}

static void test_first_seen_at_rejected(void **state) {
  (void)state;
  static const char *const bad[] = {
      "",
      "2026-11-30",
      "2026-11-30 05:09:48Z",
      "2026-11-30t05:09:48Z",
      "2026-11-30T05:09:48",
      "2026-11-30T05:09:48z",
      "2026-11-30T05:09:48+01:00",
      "2026-11-30T05:09:48-00:00",
      "2026-11-30T05:09:48.Z",
      "2026-11-30T05:09:48.1234567890Z",
      "2026-11-30T05:09:48Zjunk",
      "2026-13-01T00:00:00Z",
      "2026-00-01T00:00:00Z",
      "2026-02-29T00:00:00Z",
      "2100-02-29T00:00:00Z",
      "2026-04-31T00:00:00Z",
      "2026-11-00T00:00:00Z",
      "2026-11-30T24:00:00Z",
      "2026-11-30T05:60:00Z",
      "2026-11-30T05:09:60Z",
      "26-11-30T05:09:48Z",
      "+2026-11-30T05:09:48Z",
      "2026-1-30T05:09:48Z",
      "1796015388000",
  };
  char msg[256];
  for (size_t i = 0; i < NELEM(bad); i++) {
    snprintf(msg, sizeof msg, "first_seen_at '%s' is not an ISO-8601 UTC time", bad[i]);
    expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_str(bad[i]), msg);
  }
}

static void test_first_seen_at_range(void **state) {
  (void)state;
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_str("1999-12-31T23:59:59.999Z"),
                       "first_seen_at '1999-12-31T23:59:59.999Z' is outside the years 2000 to "
                       "2200");
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_str("2201-01-01T00:00:00Z"),
                       "first_seen_at '2201-01-01T00:00:00Z' is outside the years 2000 to 2200");
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_str("0000-01-01T00:00:00Z"),
                       "first_seen_at '0000-01-01T00:00:00Z' is outside the years 2000 to 2200");
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_str("9999-12-31T23:59:59Z"),
                       "first_seen_at '9999-12-31T23:59:59Z' is outside the years 2000 to 2200");
}

static void test_first_seen_at_timestamp(void **state) {
  (void)state;
  dlqb_envelope env;
  expect_field_valid(DLQB_H_FIRST_SEEN_AT, v_int(AMQP_FIELD_KIND_TIMESTAMP, 1796015388), &env);
  assert_true(env.has_first_seen_at);
  assert_int_equal(env.first_seen_at_ms, INT64_C(1796015388000));
  expect_field_valid(DLQB_H_FIRST_SEEN_AT, v_int(AMQP_FIELD_KIND_TIMESTAMP, 946684800), &env);
  assert_int_equal(env.first_seen_at_ms, INT64_C(946684800000));
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_int(AMQP_FIELD_KIND_TIMESTAMP, 946684799),
                       "first_seen_at timestamp 946684799 is outside the years 2000 to 2200");
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_int(AMQP_FIELD_KIND_TIMESTAMP, 0),
                       "first_seen_at timestamp 0 is outside the years 2000 to 2200");
  /* Milliseconds by mistake, and the largest value: no overflow. */
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT,
                       v_int(AMQP_FIELD_KIND_TIMESTAMP, INT64_C(1796015388000)),
                       "first_seen_at timestamp 1796015388000 is outside the years 2000 to "
                       "2200");
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_int(AMQP_FIELD_KIND_TIMESTAMP, -1),
                       "first_seen_at timestamp 18446744073709551615 is outside the years 2000 "
                       "to 2200");
}

static void test_first_seen_at_wrong_type(void **state) {
  (void)state;
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_int(AMQP_FIELD_KIND_I64, 1796015388000),
                       "first_seen_at must be a string or timestamp, not int64");
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_kind(AMQP_FIELD_KIND_TABLE),
                       "first_seen_at must be a string or timestamp, not table");
  expect_field_invalid(DLQB_H_FIRST_SEEN_AT, v_kind(AMQP_FIELD_KIND_F64),
                       "first_seen_at must be a string or timestamp, not double");
}

/* ---- failure_read ---------------------------------------------------- */

/* Headers with x-death = [ {reason, queue}, {reason: expired} ]. */
typedef struct {
  amqp_table_entry_t d0[3], d1[2];
  amqp_field_value_t deaths[2];
  hdrs h;
} death_hdrs;

static void death_init(death_hdrs *d, amqp_field_value_t reason, const char *queue) {
  d->d0[0] = entry("count", v_int(AMQP_FIELD_KIND_I64, 1));
  d->d0[1] = entry("reason", reason);
  d->d0[2] = entry("queue", v_str(queue));
  d->d1[0] = entry("reason", v_str("expired"));
  d->d1[1] = entry("queue", v_str("older"));
  d->deaths[0] = v_table(d->d0, 3);
  d->deaths[1] = v_table(d->d1, 2);
  h_valid(&d->h);
  h_add(&d->h, "x-death", v_array(d->deaths, 2));
}

static void expect_reported(const amqp_table_t *t) {
  dlqb_failure f;
  memset(&f, 0x5a, sizeof f);
  dlqb_failure_read(t, &f);
  assert_int_equal(f.kind, DLQB_FAIL_REPORTED);
  assert_string_equal(f.queue, "");
}

static void test_failure_reasons(void **state) {
  (void)state;
  static const struct {
    const char *reason;
    dlqb_failure_kind kind;
  } cases[] = {{"rejected", DLQB_FAIL_REJECTED},
               {"delivery_limit", DLQB_FAIL_DELIVERY_LIMIT},
               {"expired", DLQB_FAIL_EXPIRED},
               {"maxlen", DLQB_FAIL_MAXLEN}};
  for (size_t i = 0; i < NELEM(cases); i++) {
    death_hdrs d;
    dlqb_failure f;
    death_init(&d, v_str(cases[i].reason), "dsr.work");
    dlqb_failure_read(&d.h.t, &f);
    assert_int_equal(f.kind, cases[i].kind);
    assert_string_equal(f.queue, "dsr.work");
    assert_false(f.has_worker_error);
    assert_string_equal(f.worker_error, "");
  }
}

static void test_failure_uses_first_death_only(void **state) {
  (void)state;
  death_hdrs d;
  dlqb_failure f;
  death_init(&d, v_str("rejected"), "q0");
  dlqb_failure_read(&d.h.t, &f);
  assert_int_equal(f.kind, DLQB_FAIL_REJECTED);
  assert_string_equal(f.queue, "q0");
  /* A bad first death is not rescued by a good second one. */
  death_init(&d, v_str("bogus"), "q0");
  expect_reported(&d.h.t);
}

/* Only a non-empty array of tables is the broker's x-death. */
static void test_xdeath_forged(void **state) {
  (void)state;
  death_hdrs d;
  death_init(&d, v_str("rejected"), "q0");
  assert_false(dlqb_header_xdeath_forged(&d.h.t));
  hdrs h;
  h_valid(&h);
  assert_false(dlqb_header_xdeath_forged(&h.t)); /* absent */
  assert_false(dlqb_header_xdeath_forged(NULL));
  amqp_field_value_t items[2] = {v_str("rejected"), v_str("expired")};
  h_put(&h, "x-death", v_array(items, 2));
  assert_true(dlqb_header_xdeath_forged(&h.t));
  h_put(&h, "x-death", v_array(items, 0));
  assert_true(dlqb_header_xdeath_forged(&h.t));
  h_put(&h, "x-death", v_str("rejected"));
  assert_true(dlqb_header_xdeath_forged(&h.t));
  items[0] = d.deaths[0]; /* a table, then a string */
  h_put(&h, "x-death", v_array(items, 2));
  assert_true(dlqb_header_xdeath_forged(&h.t));
}

/* A worker's copy of a retried task still carries the delay queue's
 * expiry first: that is backoff history, so the failure is the worker's. */
static void test_failure_retry_expiry_is_reported(void **state) {
  (void)state;
  death_hdrs d;
  dlqb_failure f;
  death_init(&d, v_str("expired"), "dsr.retry.100ms");
  h_add(&d.h, DLQB_H_WORKER_ERROR, v_str("upstream 504"));
  dlqb_failure_read(&d.h.t, &f);
  assert_int_equal(f.kind, DLQB_FAIL_REPORTED);
  assert_string_equal(f.queue, "");
  assert_true(f.has_worker_error);
  death_init(&d, v_str("expired"), "dsr.work"); /* a producer's TTL on the work queue */
  dlqb_failure_read(&d.h.t, &f);
  assert_int_equal(f.kind, DLQB_FAIL_EXPIRED);
}

static void test_failure_absent(void **state) {
  (void)state;
  hdrs h;
  dlqb_failure f;
  expect_reported(NULL);
  h_valid(&h);
  expect_reported(&h.t);
  h_add(&h, DLQB_H_WORKER_ERROR, v_str("upstream 503"));
  dlqb_failure_read(&h.t, &f);
  assert_int_equal(f.kind, DLQB_FAIL_REPORTED);
  assert_true(f.has_worker_error);
  assert_string_equal(f.worker_error, "upstream 503");
  dlqb_failure_read(&h.t, NULL); /* must not crash */
}

static void test_failure_malformed_x_death(void **state) {
  (void)state;
  death_hdrs d;
  amqp_field_value_t items[2];
  amqp_table_entry_t empty[1];

  death_init(&d, v_str("rejected"), "q"); /* x-death is a table, not an array */
  h_put(&d.h, "x-death", v_table(d.d0, 3));
  expect_reported(&d.h.t);
  h_put(&d.h, "x-death", v_str("rejected"));
  expect_reported(&d.h.t);
  h_put(&d.h, "x-death", v_array(d.deaths, 0)); /* empty */
  expect_reported(&d.h.t);
  h_put(&d.h, "x-death", v_array(d.deaths, -1));
  expect_reported(&d.h.t);
  h_put(&d.h, "x-death", v_array(NULL, 4));
  expect_reported(&d.h.t);
  items[0] = v_str("rejected"); /* element 0 is not a table */
  items[1] = d.deaths[0];
  h_put(&d.h, "x-death", v_array(items, 2));
  expect_reported(&d.h.t);
  items[0] = v_array(d.deaths, 2); /* nested array */
  expect_reported(&d.h.t);
  items[0] = v_table(empty, 0); /* no reason */
  expect_reported(&d.h.t);
  items[0] = v_table(NULL, 7);
  expect_reported(&d.h.t);

  death_init(&d, v_int(AMQP_FIELD_KIND_I32, 1), "q"); /* reason of the wrong type */
  expect_reported(&d.h.t);
  death_init(&d, v_str("Rejected"), "q");
  expect_reported(&d.h.t);
  death_init(&d, v_str(""), "q");
  expect_reported(&d.h.t);
  death_init(&d, v_bytes(AMQP_FIELD_KIND_UTF8, "rejected\0", 9), "q");
  expect_reported(&d.h.t);
}

static void test_failure_queue_variants(void **state) {
  (void)state;
  death_hdrs d;
  dlqb_failure f;
  char longq[300];
  death_init(&d, v_str("expired"), "q");
  d.d0[2].value = v_int(AMQP_FIELD_KIND_I32, 5); /* queue of the wrong type */
  dlqb_failure_read(&d.h.t, &f);
  assert_int_equal(f.kind, DLQB_FAIL_EXPIRED);
  assert_string_equal(f.queue, "");
  d.d0[2].key = amqp_cstring_bytes("exchange"); /* queue absent */
  dlqb_failure_read(&d.h.t, &f);
  assert_int_equal(f.kind, DLQB_FAIL_EXPIRED);
  assert_string_equal(f.queue, "");
  memset(longq, 'q', sizeof longq - 1);
  longq[sizeof longq - 1] = '\0';
  death_init(&d, v_str("maxlen"), longq);
  dlqb_failure_read(&d.h.t, &f);
  assert_int_equal(strlen(f.queue), sizeof f.queue - 1);
  death_init(&d, v_str("maxlen"), "bad\nname\xff");
  dlqb_failure_read(&d.h.t, &f);
  assert_string_equal(f.queue, "bad?name?");
}

static void test_failure_worker_error(void **state) {
  (void)state;
  hdrs h;
  dlqb_failure f;
  char big[2000];
  h_clear(&h);
  h_add(&h, DLQB_H_WORKER_ERROR, v_bytes(AMQP_FIELD_KIND_BYTES, " timeout\r\n", 10));
  dlqb_failure_read(&h.t, &f);
  assert_true(f.has_worker_error);
  assert_string_equal(f.worker_error, "timeout");
  h_put(&h, DLQB_H_WORKER_ERROR,
        v_str("a\tb\x01"
              "c\xc3"));
  dlqb_failure_read(&h.t, &f);
  assert_string_equal(f.worker_error, "a?b?c?");
  h_put(&h, DLQB_H_WORKER_ERROR, v_int(AMQP_FIELD_KIND_I32, 3)); /* wrong type: ignored */
  dlqb_failure_read(&h.t, &f);
  assert_false(f.has_worker_error);
  h_put(&h, DLQB_H_WORKER_ERROR, v_str("  \n"));
  dlqb_failure_read(&h.t, &f);
  assert_false(f.has_worker_error);
  h_put(&h, DLQB_H_WORKER_ERROR, v_bytes(AMQP_FIELD_KIND_UTF8, NULL, 0));
  dlqb_failure_read(&h.t, &f);
  assert_false(f.has_worker_error);
  /* 666 euro signs: cut to 166 whole characters (498 bytes), not 500. */
  big[0] = '\0';
  for (int i = 0; i < 666; i++) strcat(big, "\xe2\x82\xac");
  h_put(&h, DLQB_H_WORKER_ERROR, v_str(big));
  dlqb_failure_read(&h.t, &f);
  assert_true(f.has_worker_error);
  assert_int_equal(strlen(f.worker_error), 498);
  assert_true(is_clean(f.worker_error));
  assert_memory_equal(f.worker_error, big, 498);
}

/* ---- headers_apply --------------------------------------------------- */

static const amqp_field_value_t *out_find(const amqp_table_t *t, const char *key, int *index) {
  for (int i = 0; i < t->num_entries; i++) {
    if (t->entries[i].key.len == strlen(key) &&
        memcmp(t->entries[i].key.bytes, key, strlen(key)) == 0) {
      if (index != NULL) *index = i;
      return &t->entries[i].value;
    }
  }
  return NULL;
}

static int out_count(const amqp_table_t *t, const char *key) {
  int n = 0;
  for (int i = 0; i < t->num_entries; i++)
    if (t->entries[i].key.len == strlen(key) &&
        memcmp(t->entries[i].key.bytes, key, strlen(key)) == 0)
      n++;
  return n;
}

static void assert_str_value(const amqp_field_value_t *v, const char *s) {
  assert_non_null(v);
  assert_int_equal(v->kind, AMQP_FIELD_KIND_UTF8);
  assert_int_equal(v->value.bytes.len, strlen(s));
  assert_memory_equal(v->value.bytes.bytes, s, strlen(s));
}

static void test_apply_replace_in_place(void **state) {
  (void)state;
  hdrs h;
  amqp_table_entry_t scratch[8];
  amqp_table_t out;
  dlqb_hset sets[] = {{DLQB_H_ATTEMPT, DLQB_HSET_INT, NULL, 3},
                      {DLQB_H_LAST_ERROR, DLQB_HSET_STRING, "boom", 0}};
  int idx = -1;
  h_clear(&h);
  h_add(&h, "a", v_str("keep"));
  h_add(&h, DLQB_H_ATTEMPT, v_str("1"));
  h_add(&h, DLQB_H_LAST_ERROR, v_int(AMQP_FIELD_KIND_I32, 9));
  h_add(&h, "b", v_int(AMQP_FIELD_KIND_I32, 5));
  assert_int_equal(dlqb_headers_apply(&h.t, sets, 2, scratch, 8, &out), DLQB_OK);
  assert_ptr_equal(out.entries, scratch);
  assert_int_equal(out.num_entries, 4);
  const amqp_field_value_t *v = out_find(&out, DLQB_H_ATTEMPT, &idx);
  assert_non_null(v);
  assert_int_equal(idx, 1);
  assert_int_equal(v->kind, AMQP_FIELD_KIND_I64);
  assert_int_equal(v->value.i64, 3);
  assert_str_value(out_find(&out, DLQB_H_LAST_ERROR, &idx), "boom");
  assert_int_equal(idx, 2);
  /* Untouched entries alias the input. */
  assert_ptr_equal(out.entries[0].value.value.bytes.bytes, h.e[0].value.value.bytes.bytes);
  assert_int_equal(out.entries[3].value.value.i32, 5);
  /* The input is not modified. */
  assert_int_equal(h.t.num_entries, 4);
  assert_int_equal(h.e[1].value.kind, AMQP_FIELD_KIND_UTF8);
}

static void test_apply_append_and_remove(void **state) {
  (void)state;
  hdrs h;
  amqp_table_entry_t scratch[8];
  amqp_table_t out;
  dlqb_hset sets[] = {{DLQB_H_DLQ_REASON, DLQB_HSET_STRING, "poison", 0},
                      {"a", DLQB_HSET_REMOVE, NULL, 0},
                      {"not-there", DLQB_HSET_REMOVE, NULL, 0},
                      {DLQB_H_REPLAY_COUNT, DLQB_HSET_INT, NULL, -7}};
  h_clear(&h);
  h_add(&h, "a", v_str("gone"));
  h_add(&h, "b", v_str("stay"));
  assert_int_equal(dlqb_headers_apply(&h.t, sets, NELEM(sets), scratch, 8, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 3);
  assert_null(out_find(&out, "a", NULL));
  assert_null(out_find(&out, "not-there", NULL));
  assert_str_value(&out.entries[0].value, "stay");
  assert_str_value(out_find(&out, DLQB_H_DLQ_REASON, NULL), "poison");
  assert_true(out.entries[1].key.len == strlen(DLQB_H_DLQ_REASON));
  assert_int_equal(out.entries[2].value.kind, AMQP_FIELD_KIND_I64);
  assert_int_equal(out.entries[2].value.value.i64, -7);
}

static void test_apply_duplicates(void **state) {
  (void)state;
  hdrs h;
  amqp_table_entry_t scratch[8];
  amqp_table_t out;
  dlqb_hset set_attempt = {DLQB_H_ATTEMPT, DLQB_HSET_INT, NULL, 4};
  dlqb_hset remove_attempt = {DLQB_H_ATTEMPT, DLQB_HSET_REMOVE, NULL, 0};
  int idx = -1;
  h_clear(&h);
  h_add(&h, DLQB_H_ATTEMPT, v_str("1"));
  h_add(&h, "x", v_str("x1"));
  h_add(&h, DLQB_H_ATTEMPT, v_str("2"));
  h_add(&h, "x", v_str("x2"));
  assert_int_equal(dlqb_headers_apply(&h.t, &set_attempt, 1, scratch, 8, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 3);
  assert_int_equal(out_count(&out, DLQB_H_ATTEMPT), 1);
  assert_int_equal(out_find(&out, DLQB_H_ATTEMPT, &idx)->value.i64, 4);
  assert_int_equal(idx, 0);
  /* Duplicates of keys nobody sets pass through untouched. */
  assert_int_equal(out_count(&out, "x"), 2);
  assert_int_equal(dlqb_headers_apply(&h.t, &remove_attempt, 1, scratch, 8, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 2);
  assert_int_equal(out_count(&out, DLQB_H_ATTEMPT), 0);
}

static void test_apply_later_set_wins(void **state) {
  (void)state;
  hdrs h;
  amqp_table_entry_t scratch[8];
  amqp_table_t out;
  dlqb_hset twice[] = {{"k", DLQB_HSET_STRING, "first", 0}, {"k", DLQB_HSET_STRING, "second", 0}};
  dlqb_hset then_removed[] = {{"k", DLQB_HSET_STRING, "first", 0},
                              {"k", DLQB_HSET_REMOVE, NULL, 0}};
  h_clear(&h);
  assert_int_equal(dlqb_headers_apply(&h.t, twice, 2, scratch, 8, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 1);
  assert_str_value(&out.entries[0].value, "second");
  assert_int_equal(dlqb_headers_apply(&h.t, then_removed, 2, scratch, 8, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 0);
  h_add(&h, "k", v_str("old"));
  assert_int_equal(dlqb_headers_apply(&h.t, twice, 2, scratch, 8, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 1);
  assert_str_value(&out.entries[0].value, "second");
}

static void test_apply_null_input_and_odd_sets(void **state) {
  (void)state;
  amqp_table_entry_t scratch[4];
  amqp_table_t out;
  dlqb_hset sets[] = {{"s", DLQB_HSET_STRING, NULL, 0}, {NULL, DLQB_HSET_STRING, "x", 0}};
  assert_int_equal(dlqb_headers_apply(NULL, sets, 2, scratch, 4, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 1);
  assert_str_value(&out.entries[0].value, "");
  assert_int_equal(dlqb_headers_apply(NULL, NULL, 0, scratch, 4, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 0);
  assert_int_equal(dlqb_headers_apply(NULL, NULL, 0, NULL, 0, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 0);
  assert_int_equal(dlqb_headers_apply(NULL, sets, 1, scratch, 4, NULL), DLQB_EINVAL);
}

static void test_apply_capacity(void **state) {
  (void)state;
  hdrs h;
  amqp_table_entry_t scratch[4];
  amqp_table_t out;
  dlqb_hset sets[] = {{"new1", DLQB_HSET_INT, NULL, 1}, {"new2", DLQB_HSET_INT, NULL, 2}};
  dlqb_hset drop = {"a", DLQB_HSET_REMOVE, NULL, 0};
  h_clear(&h);
  h_add(&h, "a", v_str("1"));
  h_add(&h, "b", v_str("2"));
  assert_int_equal(dlqb_headers_apply(&h.t, sets, 2, scratch, 4, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 4);
  assert_int_equal(dlqb_headers_apply(&h.t, sets, 2, scratch, 3, &out), DLQB_EINVAL);
  assert_int_equal(out.num_entries, 0);
  assert_int_equal(dlqb_headers_apply(&h.t, sets, 0, scratch, 1, &out), DLQB_EINVAL);
  assert_int_equal(out.num_entries, 0);
  /* A removal frees room. */
  assert_int_equal(dlqb_headers_apply(&h.t, &drop, 1, scratch, 1, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 1);
  assert_int_equal(dlqb_headers_apply(&h.t, sets, 2, NULL, 0, &out), DLQB_EINVAL);
}

/* The wire names are spelled out here, not taken from names.h, so that a
 * renamed constant fails this test instead of changing what consumers of
 * compliance_review read. */
static void test_escalation_stamp(void **state) {
  (void)state;
  hdrs h;
  amqp_table_entry_t scratch[8];
  amqp_table_t out;
  dlqb_hset sets[DLQB_ESCALATION_SETS + 1];
  sets[0] = (dlqb_hset){"keep", DLQB_HSET_STRING, "yes", 0};
  size_t n = 1 + dlqb_escalation_stamp(sets + 1, "alice", "2026-11-30T05:09:48.123Z",
                                       DLQB_ESCALATION_OPERATOR, "subject asked twice");
  assert_int_equal(n, 7);
  h_clear(&h);
  h_add(&h, "escalated_by", v_str("someone before"));
  h_add(&h, "owner", v_str("carol"));
  h_add(&h, "claimed_at", v_str("2026-11-29T00:00:00Z"));
  assert_int_equal(dlqb_headers_apply(&h.t, sets, n, scratch, 8, &out), DLQB_OK);
  assert_int_equal(out.num_entries, 5); /* custody cleared: a new escalation is unclaimed */
  assert_null(out_find(&out, "owner", NULL));
  assert_null(out_find(&out, "claimed_at", NULL));
  assert_str_value(out_find(&out, "escalation_note", NULL), "subject asked twice");
  assert_int_equal(out_count(&out, "escalated_by"), 1);
  assert_str_value(out_find(&out, "escalated_by", NULL), "alice");
  assert_str_value(out_find(&out, "escalated_at", NULL), "2026-11-30T05:09:48.123Z");
  assert_str_value(out_find(&out, "escalation_reason", NULL), "operator");
  assert_str_value(out_find(&out, "keep", NULL), "yes");
  assert_string_equal(DLQB_ESCALATION_DLQ_SLA, "dlq_sla");
  assert_string_equal(DLQB_ESCALATION_MAX_REPLAYS, "max_replays");
  assert_string_equal(DLQB_ACTOR_BRIDGE, "dlq-bridge");
  /* No note: an older escalation's note is removed, not kept. */
  n = 1 + dlqb_escalation_stamp(sets + 1, "dlq-bridge", "2026-11-30T05:09:48.123Z",
                                DLQB_ESCALATION_DLQ_SLA, NULL);
  h_clear(&h);
  h_add(&h, "escalation_note", v_str("stale"));
  assert_int_equal(dlqb_headers_apply(&h.t, sets, n, scratch, 8, &out), DLQB_OK);
  assert_null(out_find(&out, "escalation_note", NULL));
}

static void test_apply_result_parses(void **state) {
  (void)state;
  hdrs h;
  amqp_table_entry_t scratch[16];
  amqp_table_t out;
  dlqb_envelope env;
  dlqb_error why;
  dlqb_hset sets[] = {{DLQB_H_ATTEMPT, DLQB_HSET_INT, NULL, 2},
                      {DLQB_H_FIRST_SEEN_AT, DLQB_HSET_STRING, "2026-11-30T05:09:48.000Z", 0}};
  h_valid(&h);
  h_add(&h, DLQB_H_ATTEMPT, v_str("1"));
  assert_int_equal(dlqb_headers_apply(&h.t, sets, 2, scratch, 16, &out), DLQB_OK);
  assert_int_equal(dlqb_envelope_parse(&out, DEFAULT_MAX, &env, &why), DLQB_OK);
  assert_int_equal(env.attempt, 2);
  assert_int_equal(env.first_seen_at_ms, INT64_C(1796015388000));
}

/* ---- iso time -------------------------------------------------------- */

static void test_iso_format(void **state) {
  (void)state;
  static const struct {
    int64_t ms;
    const char *text;
  } cases[] = {
      {0, "1970-01-01T00:00:00.000Z"},
      {INT64_C(1796015388123), "2026-11-30T05:09:48.123Z"},
      {-1, "1969-12-31T23:59:59.999Z"},
      {INT64_C(-86400000), "1969-12-31T00:00:00.000Z"},
      {INT64_C(951782400000), "2000-02-29T00:00:00.000Z"},
      {INT64_C(951868800000), "2000-03-01T00:00:00.000Z"},
      {INT64_C(1709208000000), "2024-02-29T12:00:00.000Z"},
      {INT64_C(7289654399999), "2200-12-31T23:59:59.999Z"},
      {INT64_C(253402300799999), "9999-12-31T23:59:59.999Z"},
      {INT64_C(-62167219200000), "0000-01-01T00:00:00.000Z"},
  };
  char buf[DLQB_ISO_TIME_MAX];
  for (size_t i = 0; i < NELEM(cases); i++) {
    assert_ptr_equal(dlqb_iso_time(cases[i].ms, buf, sizeof buf), buf);
    assert_string_equal(buf, cases[i].text);
  }
}

static void test_iso_format_extremes_and_small_buffers(void **state) {
  (void)state;
  char buf[DLQB_ISO_TIME_MAX], small[8];
  dlqb_iso_time(INT64_MAX, buf, sizeof buf);
  assert_true(strlen(buf) < sizeof buf);
  assert_true(buf[strlen(buf) - 1] == 'Z');
  dlqb_iso_time(INT64_MIN, buf, sizeof buf);
  assert_true(strlen(buf) < sizeof buf);
  memset(small, '#', sizeof small);
  dlqb_iso_time(0, small, sizeof small);
  assert_string_equal(small, "1970-01");
  assert_null(dlqb_iso_time(0, NULL, 10));
  small[0] = '#';
  dlqb_iso_time(0, small, 0);
  assert_int_equal(small[0], '#');
}

static void test_iso_round_trip(void **state) {
  (void)state;
  char buf[DLQB_ISO_TIME_MAX];
  int64_t back = 0;
  /* Every day from 1999 to 2401 (leap rules for 2000, 2100, 2400), at a
   * time of day that moves, and a pseudo-random walk over years 0..9999. */
  int64_t start = INT64_C(915148800000); /* 1999-01-01 */
  for (int64_t day = 0; day < 146097 + 731; day++) {
    int64_t ms = start + day * 86400000 + (day * 7919) % 86400000;
    dlqb_iso_time(ms, buf, sizeof buf);
    assert_int_equal(dlqb_iso_time_parse(buf, strlen(buf), &back), DLQB_OK);
    assert_int_equal(back, ms);
  }
  uint64_t x = 88172645463325252u;
  for (int i = 0; i < 20000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    int64_t ms = INT64_C(-62167219200000) + (int64_t)(x % UINT64_C(315537897600000));
    dlqb_iso_time(ms, buf, sizeof buf);
    assert_int_equal(dlqb_iso_time_parse(buf, strlen(buf), &back), DLQB_OK);
    assert_int_equal(back, ms);
  }
}

static void test_iso_parse_edges(void **state) {
  (void)state;
  int64_t ms = 42;
  assert_int_equal(dlqb_iso_time_parse(NULL, 0, &ms), DLQB_EINVAL);
  assert_int_equal(dlqb_iso_time_parse("2026-11-30T05:09:48Z", 20, NULL), DLQB_EINVAL);
  assert_int_equal(ms, 42);
  /* Length is honoured: no NUL needed, trailing bytes beyond len ignored. */
  assert_int_equal(dlqb_iso_time_parse("2026-11-30T05:09:48Zgarbage", 20, &ms), DLQB_OK);
  assert_int_equal(ms, INT64_C(1796015388000));
  assert_int_equal(dlqb_iso_time_parse("2026-11-30T05:09:48Z", 19, &ms), DLQB_EINVAL);
  assert_int_equal(dlqb_iso_time_parse("2026-11-30T05:09:48Z", 0, &ms), DLQB_EINVAL);
  assert_int_equal(dlqb_iso_time_parse("2026-11-30T05:09:48.000000001Z", 30, &ms), DLQB_OK);
  assert_int_equal(ms, INT64_C(1796015388000));
  assert_int_equal(dlqb_iso_time_parse("1969-12-31T23:59:59.999Z", 24, &ms), DLQB_OK);
  assert_int_equal(ms, -1);
  assert_int_equal(dlqb_iso_time_parse("2026-11-30T05:09:48+00:0", 24, &ms), DLQB_EINVAL);
}

/* ---- text_sanitize --------------------------------------------------- */

static void expect_sanitized(const char *src, size_t len, size_t cap, const char *want) {
  char dst[256];
  assert_true(cap <= sizeof dst);
  size_t n = dlqb_text_sanitize(dst, cap, src, len);
  assert_int_equal(n, strlen(want));
  assert_string_equal(dst, want);
}

static void test_sanitize_plain_and_invalid(void **state) {
  (void)state;
  expect_sanitized("hello", 5, 64, "hello");
  expect_sanitized("hello", 3, 64, "hel"); /* len, not NUL, ends the source */
  expect_sanitized("caf\xc3\xa9", 5, 64, "caf\xc3\xa9");
  expect_sanitized("\xff", 1, 64, "?");
  expect_sanitized("a\x80"
                   "b",
                   3, 64, "a?b");
  expect_sanitized("\xc0\xaf", 2, 64, "??");
  expect_sanitized("\xed\xa0\x80", 3, 64, "???");
  expect_sanitized("\xe2\x82", 2, 64, "??");
  expect_sanitized("\xe2\x82"
                   "a",
                   3, 64, "??a");
  expect_sanitized("\xf4\x90\x80\x80", 4, 64, "????");
}

static void test_sanitize_controls(void **state) {
  (void)state;
  expect_sanitized("\n\t\x01\x7f", 4, 64, "????");
  expect_sanitized("a\0b", 3, 64, "a?b");
  expect_sanitized("\xc2\x85x", 3, 64, "?x");        /* C1 NEL: one '?' for the character */
  expect_sanitized("\xc2\xa0x", 3, 64, "\xc2\xa0x"); /* NBSP is printable */
  expect_sanitized("\x1b[0m", 4, 64, "?[0m");
}

static void test_sanitize_truncation(void **state) {
  (void)state;
  expect_sanitized("abcdef", 6, 4, "abc");
  expect_sanitized("\xc3\xa9", 2, 2, "");
  expect_sanitized("a\xc3\xa9", 3, 3, "a");
  expect_sanitized("a\xc3\xa9", 3, 4, "a\xc3\xa9");
  expect_sanitized("\xe2\x82\xac\xe2\x82\xac", 6, 6, "\xe2\x82\xac");
  expect_sanitized("\xf0\x9f\x98\x80z", 5, 4, "");
  expect_sanitized("\xf0\x9f\x98\x80z", 5, 5, "\xf0\x9f\x98\x80");
  expect_sanitized("\xffz", 2, 2, "?");
  /* At every capacity the output is clean and a prefix of the source. */
  const char *mixed = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"
                      "b\xc3\xa9";
  size_t len = strlen(mixed);
  for (size_t cap = 1; cap <= len + 2; cap++) {
    char dst[64];
    size_t n = dlqb_text_sanitize(dst, cap, mixed, len);
    assert_true(n < cap);
    assert_int_equal(strlen(dst), n);
    assert_memory_equal(dst, mixed, n);
    assert_true(is_clean(dst));
  }
}

static void test_sanitize_degenerate_arguments(void **state) {
  (void)state;
  char dst[4] = "###";
  assert_int_equal(dlqb_text_sanitize(NULL, 10, "abc", 3), 0);
  assert_int_equal(dlqb_text_sanitize(dst, 0, "abc", 3), 0);
  assert_string_equal(dst, "###");
  assert_int_equal(dlqb_text_sanitize(dst, 1, "abc", 3), 0);
  assert_string_equal(dst, "");
  memcpy(dst, "###", 4);
  assert_int_equal(dlqb_text_sanitize(dst, sizeof dst, NULL, 10), 0);
  assert_string_equal(dst, "");
  assert_int_equal(dlqb_text_sanitize(dst, sizeof dst, "abc", 0), 0);
  assert_string_equal(dst, "");
}

/* replay stamps replay_count + 1: at the top of int64 it saturates at the
 * largest count the envelope accepts (no signed overflow, still valid, and
 * at least any max_replays, so the next failure escalates). */
static void test_count_next_saturates(void **state) {
  (void)state;
  assert_int_equal(dlqb_envelope_count_next(0), 1);
  assert_int_equal(dlqb_envelope_count_next(41), 42);
  assert_int_equal(dlqb_envelope_count_next(-3), 1);
  assert_int_equal(dlqb_envelope_count_next(DLQB_ENVELOPE_COUNT_MAX - 1), DLQB_ENVELOPE_COUNT_MAX);
  assert_int_equal(dlqb_envelope_count_next(DLQB_ENVELOPE_COUNT_MAX), DLQB_ENVELOPE_COUNT_MAX);
  assert_int_equal(dlqb_envelope_count_next(INT64_MAX), DLQB_ENVELOPE_COUNT_MAX);
  assert_true(DLQB_ENVELOPE_COUNT_MAX >= 1000); /* the largest max_replays setting */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_minimal_envelope_gets_defaults),
      cmocka_unit_test(test_full_envelope_is_trimmed_and_read),
      cmocka_unit_test(test_null_and_empty_tables),
      cmocka_unit_test(test_required_field_missing),
      cmocka_unit_test(test_required_field_blank),
      cmocka_unit_test(test_required_field_wrong_type),
      cmocka_unit_test(test_id_length_limit),
      cmocka_unit_test(test_id_huge_value),
      cmocka_unit_test(test_id_bad_utf8),
      cmocka_unit_test(test_id_good_utf8),
      cmocka_unit_test(test_id_control_characters),
      cmocka_unit_test(test_legal_basis_values),
      cmocka_unit_test(test_action_values),
      cmocka_unit_test(test_error_quotes_at_most_64_bytes),
      cmocka_unit_test(test_integer_kinds),
      cmocka_unit_test(test_integer_strings),
      cmocka_unit_test(test_integer_strings_rejected),
      cmocka_unit_test(test_integer_bounds),
      cmocka_unit_test(test_integer_wrong_types),
      cmocka_unit_test(test_default_max_attempts_passes_through),
      cmocka_unit_test(test_duplicate_keys),
      cmocka_unit_test(test_duplicate_reported_first),
      cmocka_unit_test(test_unknown_and_repeated_other_headers_ignored),
      cmocka_unit_test(test_first_problem_is_named),
      cmocka_unit_test(test_hostile_entries),
      cmocka_unit_test(test_last_error_field),
      cmocka_unit_test(test_first_seen_at_strings),
      cmocka_unit_test(test_first_seen_at_rejected),
      cmocka_unit_test(test_first_seen_at_range),
      cmocka_unit_test(test_first_seen_at_timestamp),
      cmocka_unit_test(test_first_seen_at_wrong_type),
      cmocka_unit_test(test_failure_reasons),
      cmocka_unit_test(test_failure_uses_first_death_only),
      cmocka_unit_test(test_xdeath_forged),
      cmocka_unit_test(test_failure_absent),
      cmocka_unit_test(test_failure_retry_expiry_is_reported),
      cmocka_unit_test(test_failure_malformed_x_death),
      cmocka_unit_test(test_failure_queue_variants),
      cmocka_unit_test(test_failure_worker_error),
      cmocka_unit_test(test_apply_replace_in_place),
      cmocka_unit_test(test_apply_append_and_remove),
      cmocka_unit_test(test_apply_duplicates),
      cmocka_unit_test(test_apply_later_set_wins),
      cmocka_unit_test(test_apply_null_input_and_odd_sets),
      cmocka_unit_test(test_apply_capacity),
      cmocka_unit_test(test_apply_result_parses),
      cmocka_unit_test(test_escalation_stamp),
      cmocka_unit_test(test_iso_format),
      cmocka_unit_test(test_iso_format_extremes_and_small_buffers),
      cmocka_unit_test(test_iso_round_trip),
      cmocka_unit_test(test_iso_parse_edges),
      cmocka_unit_test(test_sanitize_plain_and_invalid),
      cmocka_unit_test(test_sanitize_controls),
      cmocka_unit_test(test_sanitize_truncation),
      cmocka_unit_test(test_sanitize_degenerate_arguments),
      cmocka_unit_test(test_count_next_saturates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

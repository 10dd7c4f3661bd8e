/* Unit tests of duration parsing, list parsing and formatting. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "dlqb/duration.h"

#define DAY_MS UINT64_C(86400000)
#define MAX_MS (UINT64_C(36500) * DAY_MS)

static uint64_t parse_ok(const char *text) {
  dlqb_error err = {{0}};
  uint64_t ms = 12345;
  assert_int_equal(dlqb_duration_parse(text, &ms, &err), DLQB_OK);
  return ms;
}

/* Asserts that text is rejected with an error containing `want`, and that
 * the output is left alone. */
static void parse_bad(const char *text, const char *want) {
  dlqb_error err = {{0}};
  uint64_t ms = 777;
  assert_int_equal(dlqb_duration_parse(text, &ms, &err), DLQB_EINVAL);
  assert_int_equal(ms, 777);
  assert_non_null(strstr(err.msg, want));
  assert_null(strchr(err.msg, '\n'));
}

static void test_each_unit(void **state) {
  (void)state;
  assert_int_equal(parse_ok("250ms"), 250);
  assert_int_equal(parse_ok("5s"), 5000);
  assert_int_equal(parse_ok("2m"), 120000);
  assert_int_equal(parse_ok("1h"), 3600000);
  assert_int_equal(parse_ok("7d"), 7 * DAY_MS);
  assert_int_equal(parse_ok("0ms"), 0);
  assert_int_equal(parse_ok("0s"), 0);
  assert_int_equal(parse_ok("007s"), 7000);
}

static void test_whitespace(void **state) {
  (void)state;
  assert_int_equal(parse_ok("  5s"), 5000);
  assert_int_equal(parse_ok("5s  "), 5000);
  assert_int_equal(parse_ok("\t 5s \n"), 5000);
  parse_bad("5 s", "unexpected text after the number");
  parse_bad("5s x", "unexpected text after the unit");
}

static void test_missing_or_unknown_unit(void **state) {
  (void)state;
  parse_bad("5", "'5' has no unit (use ms, s, m, h or d)");
  parse_bad(" 5 ", "has no unit");
  parse_bad("5x", "'5x' has an unknown unit (use ms, s, m, h or d)");
  parse_bad("5sec", "unknown unit");
  parse_bad("5S", "unknown unit");
  parse_bad("5us", "unknown unit");
  parse_bad("5s5", "unexpected text after the unit");
  parse_bad("5s5s", "unexpected text after the unit");
}

static void test_empty_sign_fraction_garbage(void **state) {
  (void)state;
  parse_bad("", "'' is empty");
  parse_bad("   ", "is empty");
  parse_bad("s", "does not start with a number");
  parse_bad("abc", "does not start with a number");
  parse_bad(".5s", "does not start with a number");
  parse_bad("-5s", "'-5s' has a sign");
  parse_bad("+5s", "has a sign");
  parse_bad("1.5s", "'1.5s' has a fraction");
  parse_bad("1,5s", "has a fraction");
  parse_bad("0x10s", "unknown unit");
  parse_bad("1e3s", "unknown unit");
}

static void test_null_arguments(void **state) {
  (void)state;
  dlqb_error err;
  uint64_t ms = 0;
  assert_int_equal(dlqb_duration_parse(NULL, &ms, &err), DLQB_EINVAL);
  assert_int_equal(dlqb_duration_parse("5s", NULL, &err), DLQB_EINVAL);
  /* A NULL error is allowed and ignored. */
  assert_int_equal(dlqb_duration_parse("5x", &ms, NULL), DLQB_EINVAL);
}

static void test_limits_and_overflow(void **state) {
  (void)state;
  assert_int_equal(parse_ok("36500d"), MAX_MS);
  assert_int_equal(parse_ok("3153600000000ms"), MAX_MS);
  parse_bad("36501d", "is longer than 100 years");
  parse_bad("3153600000001ms", "is longer than 100 years");
  parse_bad("876001h", "is longer than 100 years");
  /* Far past 2^64 in every unit: no wrap-around to a small value. */
  parse_bad("18446744073709551616ms", "is longer than 100 years");
  parse_bad("18446744073709551615d", "is longer than 100 years");
  parse_bad("99999999999999999999999999999999999999s", "is longer than 100 years");
  /* 2^64 / 1000 + 1 seconds wraps to a tiny value if multiplied blindly. */
  parse_bad("18446744073709552s", "is longer than 100 years");
}

static void test_long_input_is_cut_in_the_error(void **state) {
  (void)state;
  char text[300];
  memset(text, '7', sizeof text - 2);
  text[sizeof text - 2] = 'x';
  text[sizeof text - 1] = '\0';
  dlqb_error err;
  uint64_t ms;
  assert_int_equal(dlqb_duration_parse(text, &ms, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "...'"));
  assert_true(strlen(err.msg) < 160);
}

static void test_control_characters_are_not_echoed(void **state) {
  (void)state;
  parse_bad("5\ns", "'5?s' has unexpected text after the number");
}

static size_t list_ok(const char *text, uint64_t *out, size_t max) {
  dlqb_error err = {{0}};
  size_t count = 99;
  assert_int_equal(dlqb_duration_parse_list(text, out, max, &count, &err), DLQB_OK);
  return count;
}

static void list_bad(const char *text, size_t max, const char *want) {
  dlqb_error err = {{0}};
  uint64_t out[20];
  size_t count = 99;
  assert_int_equal(dlqb_duration_parse_list(text, out, max, &count, &err), DLQB_EINVAL);
  assert_int_equal(count, 99);
  assert_non_null(strstr(err.msg, want));
}

static void test_list_parses(void **state) {
  (void)state;
  uint64_t out[16];
  assert_int_equal(list_ok("1s,5s,30s,2m", out, 16), 4);
  assert_int_equal(out[0], 1000);
  assert_int_equal(out[1], 5000);
  assert_int_equal(out[2], 30000);
  assert_int_equal(out[3], 120000);
  assert_int_equal(list_ok(" 1s , 250ms ,\t1d ", out, 16), 3);
  assert_int_equal(out[1], 250);
  assert_int_equal(out[2], DAY_MS);
  assert_int_equal(list_ok("5m", out, 1), 1);
  assert_int_equal(out[0], 300000);
}

static void test_list_max_entries(void **state) {
  (void)state;
  uint64_t out[17];
  const char *sixteen = "1s,2s,3s,4s,5s,6s,7s,8s,9s,10s,11s,12s,13s,14s,15s,16s";
  assert_int_equal(list_ok(sixteen, out, 16), 16);
  assert_int_equal(out[15], 16000);
  list_bad("1s,2s,3s,4s,5s,6s,7s,8s,9s,10s,11s,12s,13s,14s,15s,16s,17s", 16,
           "has more than 16 durations");
  list_bad("1s,2s", 1, "has more than 1 durations");
}

static void test_list_rejects(void **state) {
  (void)state;
  list_bad("", 16, "'' is empty");
  list_bad("  ", 16, "is empty");
  list_bad("1s,,5s", 16, "'1s,,5s' has an empty item");
  list_bad("1s,", 16, "has an empty item");
  list_bad(",1s", 16, "has an empty item");
  list_bad("1s, ,5s", 16, "has an empty item");
  list_bad(",", 16, "has an empty item");
  list_bad("1s,0s", 16, "'0s' must be greater than zero");
  list_bad("0ms", 16, "must be greater than zero");
  list_bad("1s,5x", 16, "'5x' has an unknown unit (use ms, s, m, h or d)");
  list_bad("1s,5", 16, "'5' has no unit");
  list_bad("1s;5s", 16, "unexpected text after the unit");
  list_bad("1s,-5s", 16, "has a sign");
  list_bad("1s,36501d", 16, "longer than 100 years");
  dlqb_error err;
  size_t count;
  assert_int_equal(dlqb_duration_parse_list(NULL, NULL, 0, &count, &err), DLQB_EINVAL);
  assert_int_equal(dlqb_duration_parse_list("1s", NULL, 0, NULL, &err), DLQB_EINVAL);
}

static const char *fmt(uint64_t ms, char *buf, size_t len) {
  return dlqb_duration_format(ms, buf, len);
}

static void test_format_shortest_exact(void **state) {
  (void)state;
  char buf[32];
  assert_string_equal(fmt(0, buf, sizeof buf), "0s");
  assert_string_equal(fmt(1, buf, sizeof buf), "1ms");
  assert_string_equal(fmt(1500, buf, sizeof buf), "1500ms");
  assert_string_equal(fmt(5000, buf, sizeof buf), "5s");
  assert_string_equal(fmt(90000, buf, sizeof buf), "90s");
  assert_string_equal(fmt(120000, buf, sizeof buf), "2m");
  assert_string_equal(fmt(3600000, buf, sizeof buf), "1h");
  assert_string_equal(fmt(25 * 3600000ULL, buf, sizeof buf), "25h");
  assert_string_equal(fmt(3 * DAY_MS, buf, sizeof buf), "3d");
  assert_string_equal(fmt(MAX_MS, buf, sizeof buf), "36500d");
  assert_string_equal(fmt(UINT64_MAX, buf, sizeof buf), "18446744073709551615ms");
}

static void test_format_truncates(void **state) {
  (void)state;
  char buf[4] = "zzz";
  assert_ptr_equal(dlqb_duration_format(1500, buf, sizeof buf), buf);
  assert_string_equal(buf, "150");
  char one[1] = {'z'};
  assert_string_equal(dlqb_duration_format(5000, one, sizeof one), "");
  char untouched[2] = {'q', 'q'};
  assert_ptr_equal(dlqb_duration_format(5000, untouched, 0), untouched);
  assert_int_equal(untouched[0], 'q');
  assert_null(dlqb_duration_format(5000, NULL, 10));
}

static void test_format_round_trips(void **state) {
  (void)state;
  static const uint64_t samples[] = {
      0,       1,       999,      1000,   1001,           59999,        60000,      61000,
      3599999, 3600000, 86399999, DAY_MS, 2 * DAY_MS + 1, 365 * DAY_MS, MAX_MS - 1, MAX_MS,
  };
  for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
    char buf[32];
    assert_int_equal(parse_ok(dlqb_duration_format(samples[i], buf, sizeof buf)), samples[i]);
  }
  static const char *const texts[] = {"250ms", "5s", "2m", "1h", "7d", "90s", "1500ms"};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    char buf[32];
    assert_string_equal(dlqb_duration_format(parse_ok(texts[i]), buf, sizeof buf), texts[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_each_unit),
      cmocka_unit_test(test_whitespace),
      cmocka_unit_test(test_missing_or_unknown_unit),
      cmocka_unit_test(test_empty_sign_fraction_garbage),
      cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_limits_and_overflow),
      cmocka_unit_test(test_long_input_is_cut_in_the_error),
      cmocka_unit_test(test_control_characters_are_not_echoed),
      cmocka_unit_test(test_list_parses),
      cmocka_unit_test(test_list_max_entries),
      cmocka_unit_test(test_list_rejects),
      cmocka_unit_test(test_format_shortest_exact),
      cmocka_unit_test(test_format_truncates),
      cmocka_unit_test(test_format_round_trips),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

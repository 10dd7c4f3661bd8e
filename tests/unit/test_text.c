/* Table cells cut to a width (dlqb_text_cell) and the columns that fit a
 * terminal (dlqb_columns_fit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "dlqb/columns.h"
#include "dlqb/text.h"

static const char *cell(const char *s, size_t width, bool pad, bool *cut) {
  static char buf[256];
  dlqb_text_cell(buf, sizeof buf, s, strlen(s), width, pad, cut);
  return buf;
}

static void test_cell_cuts_with_an_ellipsis(void **state) {
  (void)state;
  bool cut;
  assert_string_equal(cell("abc", 5, true, &cut), "abc  ");
  assert_false(cut);
  assert_string_equal(cell("abcde", 5, true, &cut), "abcde");
  assert_false(cut);
  assert_string_equal(cell("abcdef", 5, true, &cut), "abcd\xe2\x80\xa6");
  assert_true(cut);
  assert_string_equal(cell("abcdef", 0, true, &cut), "abcdef");
  assert_false(cut);
  assert_string_equal(cell("ab", 0, true, NULL), "ab");
  assert_string_equal(cell("", 3, true, NULL), "   ");
}

static void test_cell_counts_characters_not_bytes(void **state) {
  (void)state;
  bool cut;
  /* "Zürich-Straße" is 13 characters, 15 bytes: it fits 13 columns. */
  assert_string_equal(cell("Z\xc3\xbcrich-Stra\xc3\x9f"
                           "e",
                           13, true, &cut),
                      "Z\xc3\xbcrich-Stra\xc3\x9f"
                      "e");
  assert_false(cut);
  /* Cut: never in the middle of a character. */
  assert_string_equal(cell("\xc3\xbc\xc3\xbc\xc3\xbc\xc3\xbc", 3, false, &cut),
                      "\xc3\xbc\xc3\xbc\xe2\x80\xa6");
  assert_true(cut);
}

static void test_cell_sanitises_hostile_text(void **state) {
  (void)state;
  /* A terminal escape, a newline, a lone continuation byte: one '?' each,
   * and each counts as one column. */
  assert_string_equal(cell("a\x1b[2Jb\nc\x80", 0, false, NULL), "a?[2Jb?c?");
  assert_string_equal(cell("\x1b\x1b\x1b\x1b\x1b", 3, true, NULL), "??\xe2\x80\xa6");
  char small[4];
  bool cut;
  /* A buffer too small for the cell: cut short, NUL-terminated. */
  dlqb_text_cell(small, sizeof small, "abcdef", 6, 5, true, &cut);
  assert_string_equal(small, "abc");
}

static const dlqb_column cols[] = {
    {"AGE", 7, 0}, {"ID", 12, 0}, {"BASIS", 13, 2}, {"REASON", 16, 1}, {"ERROR", 0, 0},
};

static void test_columns_fit_80(void **state) {
  (void)state;
  dlqb_layout l;
  /* 7+1 + 12+1 = 21 required; REASON (17) fits with 42 left; BASIS would
   * leave 28 < 40: dropped first. */
  dlqb_columns_fit(cols, 5, 80, 16, 40, &l);
  assert_true(l.shown[0] && l.shown[1] && l.shown[3] && l.shown[4]);
  assert_false(l.shown[2]);
  assert_int_equal(l.width[4], 80 - 21 - 17);
  /* Wide enough for all. */
  dlqb_columns_fit(cols, 5, 200, 16, 40, &l);
  for (int i = 0; i < 5; i++) assert_true(l.shown[i]);
  assert_int_equal(l.width[4], 200 - 21 - 14 - 17);
  /* Too narrow even for the required ones: the last keeps min_last. */
  dlqb_columns_fit(cols, 5, 30, 16, 40, &l);
  assert_false(l.shown[2] || l.shown[3]);
  assert_int_equal(l.width[4], 16);
  /* No limit: everything, the last uncut. */
  dlqb_columns_fit(cols, 5, 0, 16, 40, &l);
  for (int i = 0; i < 5; i++) assert_true(l.shown[i]);
  assert_int_equal(l.width[4], 0);
  assert_int_equal(l.width[1], 12);
}

static void test_distance(void **state) {
  (void)state;
  assert_int_equal(dlqb_text_distance("inspect", "inspect"), 0);
  assert_int_equal(dlqb_text_distance("insepct", "inspect"), 1); /* a swap is one edit */
  assert_int_equal(dlqb_text_distance("audit_logs", "audit_log"), 1);
  assert_int_equal(dlqb_text_distance("", "abc"), 3);
  assert_int_equal(dlqb_text_distance("kitten", "sitting"), 3);
  char long_word[DLQB_TEXT_DISTANCE_MAX + 2];
  memset(long_word, 'a', sizeof long_word - 1);
  long_word[sizeof long_word - 1] = '\0';
  assert_true(dlqb_text_distance(long_word, "a") == SIZE_MAX);
  long_word[DLQB_TEXT_DISTANCE_MAX] = '\0'; /* the longest measured */
  assert_int_equal(dlqb_text_distance(long_word, ""), DLQB_TEXT_DISTANCE_MAX);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cell_cuts_with_an_ellipsis),
      cmocka_unit_test(test_cell_counts_characters_not_bytes),
      cmocka_unit_test(test_cell_sanitises_hostile_text),
      cmocka_unit_test(test_columns_fit_80),
      cmocka_unit_test(test_distance),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

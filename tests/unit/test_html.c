/* The console's one escaping function and its browser input parsing
 * (dlqb/html.h): every string from a message goes through these. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "dlqb/html.h"

static char *esc(const char *s, size_t len) {
  static char out[512];
  dlqb_html h = {0};
  dlqb_html_text_n(&h, s, len);
  snprintf(out, sizeof out, "%s", h.data ? h.data : "");
  dlqb_html_free(&h);
  return out;
}

static void test_markup_is_escaped(void **state) {
  (void)state;
  const char *s = "<script>alert(1)</script>";
  assert_string_equal(esc(s, strlen(s)), "&lt;script&gt;alert(1)&lt;/script&gt;");
  s = "a&b \"q\" 'x'";
  assert_string_equal(esc(s, strlen(s)), "a&amp;b &quot;q&quot; &#39;x&#39;");
  /* An attribute cannot be left: " and ' are both entities. */
  s = "\" onmouseover=\"x";
  assert_null(strchr(esc(s, strlen(s)), '"'));
}

static void test_controls_and_bad_utf8_are_replaced(void **state) {
  (void)state;
  assert_string_equal(esc("a\x01"
                          "b",
                          3),
                      "a\xEF\xBF\xBD"
                      "b");
  assert_string_equal(esc("a\x7f", 2), "a\xEF\xBF\xBD");
  /* an overlong '<' must not come through as '<' */
  assert_string_equal(esc("\xC0\xBC", 2), "\xEF\xBF\xBD\xEF\xBF\xBD");
  /* a NUL inside the length is not the end: replaced, and what follows kept */
  assert_string_equal(esc("a\0<", 3), "a\xEF\xBF\xBD&lt;");
  /* C1 control U+0085 */
  assert_string_equal(esc("\xC2\x85", 2), "\xEF\xBF\xBD\xEF\xBF\xBD");
  /* valid multibyte text stays */
  assert_string_equal(esc("\xC3\xA9t\xC3\xA9", 5), "\xC3\xA9t\xC3\xA9");
  /* a cut sequence at the end */
  assert_string_equal(esc("x\xE2\x82", 3), "x\xEF\xBF\xBD\xEF\xBF\xBD");
  assert_string_equal(esc(NULL, 5), "");
}

static void test_textf_escapes_too(void **state) {
  (void)state;
  dlqb_html h = {0};
  dlqb_html_raw(&h, "<p>");
  dlqb_html_textf(&h, "%d items of %s", 3, "<b>");
  dlqb_html_raw(&h, "</p>");
  assert_string_equal(h.data, "<p>3 items of &lt;b&gt;</p>");
  dlqb_html_free(&h);
}

static void test_url_encoding(void **state) {
  (void)state;
  dlqb_html h = {0};
  dlqb_html_url(&h, "R-1 /\"<x>&y=z");
  assert_string_equal(h.data, "R-1%20%2F%22%3Cx%3E%26y%3Dz");
  dlqb_html_free(&h);
}

static void test_big_buffer_grows(void **state) {
  (void)state;
  dlqb_html h = {0};
  for (int i = 0; i < 10000; i++) dlqb_html_text(&h, "<>");
  assert_int_equal(h.len, 80000);
  assert_false(h.oom);
  dlqb_html_free(&h);
}

static void test_form_fields(void **state) {
  (void)state;
  char v[32];
  const char *body = "csrf=abc%2B1&note=hello+world&empty=&rate=10";
  size_t n = strlen(body);
  assert_true(dlqb_form_get(body, n, "csrf", v, sizeof v));
  assert_string_equal(v, "abc+1");
  assert_true(dlqb_form_get(body, n, "note", v, sizeof v));
  assert_string_equal(v, "hello world");
  assert_true(dlqb_form_get(body, n, "empty", v, sizeof v));
  assert_string_equal(v, "");
  assert_true(dlqb_form_get(body, n, "rate", v, sizeof v));
  assert_string_equal(v, "10");
  assert_false(dlqb_form_get(body, n, "csr", v, sizeof v));
  assert_false(dlqb_form_get(body, n, "missing", v, sizeof v));
  /* malformed: cut %, bad hex, decoded NUL, too long */
  assert_false(dlqb_form_get("a=%4", 4, "a", v, sizeof v));
  assert_false(dlqb_form_get("a=%zz", 5, "a", v, sizeof v));
  assert_false(dlqb_form_get("a=%00", 5, "a", v, sizeof v));
  assert_false(dlqb_form_get("a=0123456789", 12, "a", v, 5));
  /* the body's length counts, not a NUL */
  assert_true(dlqb_form_get("a=12&b=3", 4, "a", v, sizeof v));
  assert_string_equal(v, "12");
  assert_false(dlqb_form_get("a=12&b=3", 4, "b", v, sizeof v));
}

static bool collect(void *ctx, const char *value) {
  char *acc = ctx;
  strcat(acc, "[");
  strcat(acc, value);
  strcat(acc, "]");
  return strcmp(value, "stop") != 0;
}

static void test_repeated_fields(void **state) {
  (void)state;
  char acc[128] = "";
  const char *body = "pick=a%20b&x=1&pick=&pick=%zz&pick=0123456789&pick=c&pick=stop&pick=d";
  /* the bad % and the too-long one are skipped; "stop" ends the walk */
  assert_int_equal(dlqb_form_each(body, strlen(body), "pick", 8, collect, acc), 4);
  assert_string_equal(acc, "[a b][][c][stop]");
  acc[0] = '\0';
  assert_int_equal(dlqb_form_each(body, strlen(body), "none", 8, collect, acc), 0);
}

static void test_cookies_and_secrets(void **state) {
  (void)state;
  char v[64];
  assert_true(dlqb_cookie_get("x=1; dlqb_session=abcd; y=2", "dlqb_session", v, sizeof v));
  assert_string_equal(v, "abcd");
  assert_false(dlqb_cookie_get("xdlqb_session=abcd", "dlqb_session", v, sizeof v));
  assert_false(dlqb_cookie_get(NULL, "dlqb_session", v, sizeof v));
  assert_false(dlqb_cookie_get("dlqb_session=0123456789", "dlqb_session", v, 4));
  assert_true(dlqb_secret_equal("abc", "abc"));
  assert_false(dlqb_secret_equal("abc", "abd"));
  assert_false(dlqb_secret_equal("abc", "ab"));
  assert_false(dlqb_secret_equal("", "")); /* an empty token proves nothing */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_markup_is_escaped),
      cmocka_unit_test(test_controls_and_bad_utf8_are_replaced),
      cmocka_unit_test(test_textf_escapes_too),
      cmocka_unit_test(test_url_encoding),
      cmocka_unit_test(test_big_buffer_grows),
      cmocka_unit_test(test_form_fields),
      cmocka_unit_test(test_repeated_fields),
      cmocka_unit_test(test_cookies_and_secrets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

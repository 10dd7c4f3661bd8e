/* Unit tests of the error module: dlqb_fail's detail and errno as lower-case text. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "dlqb/error.h"

static void test_fail_formats_and_returns(void **state) {
  (void)state;
  dlqb_error err;
  assert_int_equal(dlqb_fail(&err, DLQB_EIO, "cannot %s '%d'", "open", 7), DLQB_EIO);
  assert_string_equal(err.msg, "cannot open '7'");
  assert_int_equal(dlqb_fail(NULL, DLQB_EINVAL, "ignored"), DLQB_EINVAL);
}

static void test_errno_text_is_lower_case(void **state) {
  (void)state;
  char buf[DLQB_ERRNO_TEXT_MAX];
  assert_string_equal(dlqb_errno_text(ENOENT, buf, sizeof buf), "no such file or directory");
  assert_string_equal(dlqb_errno_text(EADDRINUSE, buf, sizeof buf), "address already in use");
  assert_string_equal(dlqb_errno_text(EACCES, buf, sizeof buf), "permission denied");
  /* The text is in buf: the caller may keep it. */
  assert_ptr_equal(dlqb_errno_text(EAGAIN, buf, sizeof buf), buf);
  for (int e = 1; e < 134; e++) {
    dlqb_errno_text(e, buf, sizeof buf);
    assert_true(buf[0] != '\0');
    if (buf[0] >= 'A' && buf[0] <= 'Z') fail_msg("errno %d reads '%s'", e, buf);
  }
}

static void test_errno_text_unknown_and_small_buffers(void **state) {
  (void)state;
  char buf[DLQB_ERRNO_TEXT_MAX];
  dlqb_errno_text(99999, buf, sizeof buf);
  assert_non_null(strstr(buf, "99999"));
  assert_true(buf[0] < 'A' || buf[0] > 'Z');
  char small[5];
  dlqb_errno_text(ENOENT, small, sizeof small);
  assert_true(strlen(small) < sizeof small);
  assert_true(small[0] < 'A' || small[0] > 'Z');
  assert_string_equal(dlqb_errno_text(ENOENT, small, 0), "");
  assert_string_equal(dlqb_errno_text(ENOENT, NULL, 8), "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fail_formats_and_returns),
      cmocka_unit_test(test_errno_text_is_lower_case),
      cmocka_unit_test(test_errno_text_unknown_and_small_buffers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

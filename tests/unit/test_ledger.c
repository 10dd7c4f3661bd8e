/* Unit tests for the completion ledger's set of (request_id, source_system)
 * and its cache file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/ledger.h"

static void test_ledger_set(void **state) {
  (void)state;
  dlqb_error err;
  dlqb_ledger *l = dlqb_ledger_new();
  assert_non_null(l);
  assert_false(dlqb_ledger_contains(l, "r1", "crm"));
  assert_int_equal(dlqb_ledger_add(l, "r1", "crm", &err), DLQB_OK);
  assert_int_equal(dlqb_ledger_add(l, "r1", "crm", &err), DLQB_OK);
  assert_int_equal(dlqb_ledger_size(l), 1);
  assert_true(dlqb_ledger_contains(l, "r1", "crm"));
  /* The pair is the key: the same request from another system is not done. */
  assert_false(dlqb_ledger_contains(l, "r1", "billing"));
  /* No ambiguity at the boundary between the two fields. */
  assert_int_equal(dlqb_ledger_add(l, "ab", "c", &err), DLQB_OK);
  assert_false(dlqb_ledger_contains(l, "a", "bc"));
  dlqb_ledger_free(l);
  dlqb_ledger_free(NULL);
}

static void test_ledger_grows(void **state) {
  (void)state;
  dlqb_error err;
  dlqb_ledger *l = dlqb_ledger_new();
  char id[32];
  for (int i = 0; i < 20000; i++) {
    snprintf(id, sizeof id, "req-%d", i);
    assert_int_equal(dlqb_ledger_add(l, id, i % 2 ? "crm" : "billing", &err), DLQB_OK);
  }
  assert_int_equal(dlqb_ledger_size(l), 20000);
  for (int i = 0; i < 20000; i++) {
    snprintf(id, sizeof id, "req-%d", i);
    assert_true(dlqb_ledger_contains(l, id, i % 2 ? "crm" : "billing"));
    assert_false(dlqb_ledger_contains(l, id, i % 2 ? "billing" : "crm"));
  }
  dlqb_ledger_free(l);
}

/* A completion's time: the earliest its entries gave (a duplicate entry is
 * the same completion written again); none known reads as none. */
static void test_ledger_completion_times(void **state) {
  (void)state;
  dlqb_error err;
  dlqb_ledger *l = dlqb_ledger_new();
  int64_t at = 0;
  assert_false(dlqb_ledger_completed_at(l, "r1", "crm", &at));
  assert_int_equal(dlqb_ledger_add(l, "r1", "crm", &err), DLQB_OK);
  assert_true(dlqb_ledger_contains(l, "r1", "crm"));
  assert_false(dlqb_ledger_completed_at(l, "r1", "crm", &at)); /* done, time unknown */
  assert_int_equal(dlqb_ledger_add_at(l, "r1", "crm", 5000, &err), DLQB_OK);
  assert_true(dlqb_ledger_completed_at(l, "r1", "crm", &at));
  assert_int_equal(at, 5000);
  assert_int_equal(dlqb_ledger_add_at(l, "r1", "crm", 9000, &err), DLQB_OK);
  assert_int_equal(dlqb_ledger_add_at(l, "r1", "crm", DLQB_LEDGER_NO_TIME, &err), DLQB_OK);
  assert_true(dlqb_ledger_completed_at(l, "r1", "crm", &at));
  assert_int_equal(at, 5000);
  assert_int_equal(dlqb_ledger_add_at(l, "r1", "crm", -20, &err),
                   DLQB_OK); /* a clock before 1970 */
  assert_true(dlqb_ledger_completed_at(l, "r1", "crm", &at));
  assert_int_equal(at, -20);
  assert_false(dlqb_ledger_completed_at(l, "r1", "billing", &at));
  assert_int_equal(dlqb_ledger_size(l), 1);
  dlqb_ledger_free(l);
}

/* ---- the cache ---- */

static dlqb_ledger *sample_ledger(int n) {
  dlqb_error err;
  dlqb_ledger *l = dlqb_ledger_new();
  assert_non_null(l);
  char id[32];
  for (int i = 0; i < n; i++) {
    snprintf(id, sizeof id, "req-%d", i);
    assert_int_equal(dlqb_ledger_add(l, id, i % 3 ? "crm" : "billing", &err), DLQB_OK);
  }
  return l;
}

static const dlqb_ledger_mark sample_mark = {"4242-1764460800-123456789-00112233aabbccdd", 98765,
                                             17};
#define WRITERS "dsr-worker,svc-b" /* the completion_writers the samples are built under */

static void test_cache_round_trip(void **state) {
  (void)state;
  dlqb_error err;
  for (int n = 0; n <= 1000; n += 1000) { /* empty, and a thousand pairs */
    dlqb_ledger *l = sample_ledger(n);
    char *buf;
    size_t len;
    assert_int_equal(dlqb_ledger_cache_encode(l, &sample_mark, WRITERS, &buf, &len, &err), DLQB_OK);
    dlqb_ledger *back = dlqb_ledger_new();
    dlqb_ledger_mark mark = {{0}, -1, 0};
    assert_int_equal(dlqb_ledger_cache_decode(buf, len, WRITERS, back, &mark, &err), DLQB_OK);
    assert_string_equal(mark.marker, sample_mark.marker);
    assert_int_equal(mark.offset, sample_mark.offset);
    assert_int_equal(mark.unverified, sample_mark.unverified);
    assert_int_equal(dlqb_ledger_size(back), (size_t)n);
    char id[32];
    for (int i = 0; i < n; i++) {
      snprintf(id, sizeof id, "req-%d", i);
      assert_true(dlqb_ledger_contains(back, id, i % 3 ? "crm" : "billing"));
    }
    free(buf);
    dlqb_ledger_free(back);
    dlqb_ledger_free(l);
  }
}

/* Decodes buf under writers; asserts it is refused with a reason
 * containing `why`. */
static void expect_refused_under(const char *buf, size_t len, const char *writers,
                                 const char *why) {
  dlqb_error err = {{0}};
  dlqb_ledger *l = dlqb_ledger_new();
  dlqb_ledger_mark mark;
  assert_int_equal(dlqb_ledger_cache_decode(buf, len, writers, l, &mark, &err), DLQB_EINVAL);
  if (strstr(err.msg, why) == NULL) fail_msg("refused with '%s', expected '%s'", err.msg, why);
  assert_null(strchr(err.msg, '\n'));
  dlqb_ledger_free(l);
}

static void expect_refused(const char *buf, size_t len, const char *why) {
  expect_refused_under(buf, len, WRITERS, why);
}

static void test_cache_refuses_damage(void **state) {
  (void)state;
  dlqb_error err;
  dlqb_ledger *l = sample_ledger(50);
  char *buf;
  size_t len;
  assert_int_equal(dlqb_ledger_cache_encode(l, &sample_mark, WRITERS, &buf, &len, &err), DLQB_OK);
  char *copy = malloc(len + 16);
  assert_non_null(copy);

  /* Torn anywhere: in the pairs, in the header, nothing at all. */
  expect_refused(buf, len - 1, "sha256");
  expect_refused(buf, len - 20, "sha256");
  expect_refused(buf, 30, "version");
  expect_refused(buf, 60, "writers");
  expect_refused(buf, 70, "marker");
  expect_refused(buf, 0, "version");
  /* One pair edited (a task someone wants skipped), or one added. */
  memcpy(copy, buf, len);
  char *pair = NULL;
  for (size_t i = 0; i + 6 <= len && pair == NULL; i++)
    if (memcmp(copy + i, "req-7", 6) == 0) pair = copy + i; /* with its NUL: the whole id */
  assert_non_null(pair);
  pair[4] = '9';
  expect_refused(copy, len, "sha256");
  memcpy(copy, buf, len);
  memcpy(copy + len, "extra\0crm\0", 10);
  expect_refused(copy, len + 10, "sha256");
  /* Another format version (1 trusted every entry), a marker that is not
   * ours, a negative offset, no unverified count. */
  memcpy(copy, buf, len);
  copy[strlen("dlq-bridge completion ledger cache ")] = '1';
  expect_refused(copy, len, "version");
  memcpy(copy, buf, len);
  char *u = strstr(copy, "unverified ") + strlen("unverified ");
  u[0] = 'x';
  expect_refused(copy, len, "unverified");
  memcpy(copy, buf, len);
  char *m = strstr(copy, "marker ") + strlen("marker ");
  m[0] = ' ';
  expect_refused(copy, len, "marker");
  memcpy(copy, buf, len);
  char *o = strstr(copy, "offset ") + strlen("offset ");
  o[0] = '-';
  expect_refused(copy, len, "offset");
  free(copy);
  free(buf);
  dlqb_ledger_free(l);
}

/* The digest vouches for the pairs, the count for their number: a header
 * that claims more pairs than there are is refused. */
static void test_cache_refuses_wrong_count(void **state) {
  (void)state;
  dlqb_error err;
  dlqb_ledger *l = sample_ledger(3);
  char *buf;
  size_t len;
  assert_int_equal(dlqb_ledger_cache_encode(l, &sample_mark, WRITERS, &buf, &len, &err), DLQB_OK);
  char *p = strstr(buf, "pairs 3\n");
  assert_non_null(p);
  p[6] = '4';
  expect_refused(buf, len, "pair 4 is malformed");
  p[6] = '2';
  expect_refused(buf, len, "bytes after the last pair");
  free(buf);
  dlqb_ledger_free(l);
}

/* The pairs are those of the writers the cache was built under: under any
 * other list (narrowed, widened, none, even reordered) it is not used. A
 * version 1 cache, which trusted every entry, is never used either. */
static void test_cache_refuses_other_writers(void **state) {
  (void)state;
  dlqb_error err;
  dlqb_ledger *l = sample_ledger(5);
  char *buf;
  size_t len;
  assert_int_equal(dlqb_ledger_cache_encode(l, &sample_mark, WRITERS, &buf, &len, &err), DLQB_OK);
  expect_refused_under(buf, len, "dsr-worker",
                       "built under completion_writers 'dsr-worker,svc-b', "
                       "not 'dsr-worker'");
  expect_refused_under(buf, len, WRITERS ",intruder", "completion_writers");
  expect_refused_under(buf, len, "", "completion_writers");
  expect_refused_under(buf, len, "svc-b,dsr-worker", "completion_writers");
  free(buf);

  /* Built under none: holds nothing that counts, and only that list uses it. */
  dlqb_ledger *empty = dlqb_ledger_new();
  assert_int_equal(dlqb_ledger_cache_encode(empty, &sample_mark, "", &buf, &len, &err), DLQB_OK);
  dlqb_ledger_mark mark;
  assert_int_equal(dlqb_ledger_cache_decode(buf, len, "", l, &mark, &err), DLQB_OK);
  expect_refused_under(buf, len, WRITERS, "completion_writers '', not 'dsr-worker,svc-b'");
  free(buf);

  static const char v1[] = "dlq-bridge completion ledger cache 1\nmarker 1-2-3-ab\noffset 7\n"
                           "pairs 0\nsha256 "
                           "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n\n";
  expect_refused(v1, sizeof v1 - 1, "not a ledger cache of this version");

  /* A writers list that cannot be one header line is not written. */
  assert_int_equal(dlqb_ledger_cache_encode(l, &sample_mark, "a\nmarker x", &buf, &len, &err),
                   DLQB_EINVAL);
  dlqb_ledger_free(empty);
  dlqb_ledger_free(l);
}

static void test_cache_files(void **state) {
  (void)state;
  char dir[] = "/tmp/dlqb-ledger-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/cache", dir);
  dlqb_error err;
  dlqb_ledger *l = dlqb_ledger_new();
  dlqb_ledger_mark mark;
  bool found = true;

  /* None yet: not found, nothing added, no error. */
  assert_int_equal(dlqb_ledger_cache_read(path, WRITERS, l, &mark, &found, &err), DLQB_OK);
  assert_false(found);
  assert_int_equal(dlqb_ledger_size(l), 0);

  dlqb_ledger *src = sample_ledger(20);
  assert_int_equal(dlqb_ledger_cache_write(path, WRITERS, src, &sample_mark, &err), DLQB_OK);
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  assert_int_equal(dlqb_ledger_cache_read(path, WRITERS, l, &mark, &found, &err), DLQB_OK);
  assert_true(found);
  assert_int_equal(dlqb_ledger_size(l), 20);
  assert_int_equal(mark.offset, sample_mark.offset);

  /* Others may write it: whoever can decides what counts as complete. */
  assert_int_equal(chmod(path, 0620), 0);
  dlqb_ledger_clear(l);
  assert_int_equal(dlqb_ledger_cache_read(path, WRITERS, l, &mark, &found, &err), DLQB_EINVAL);
  assert_false(found);
  assert_non_null(strstr(err.msg, "not ours alone to write"));
  assert_int_equal(chmod(path, 0600), 0);

  /* Not a regular file, and a symbolic link (not followed). */
  char link[160];
  snprintf(link, sizeof link, "%s/link", dir);
  assert_int_equal(symlink(path, link), 0);
  assert_int_equal(dlqb_ledger_cache_read(link, WRITERS, l, &mark, &found, &err), DLQB_EIO);
  assert_int_equal(dlqb_ledger_cache_read(dir, WRITERS, l, &mark, &found, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "not a regular file"));

  /* A write into a directory that is gone fails cleanly. */
  char gone[160];
  snprintf(gone, sizeof gone, "%s/no-such-dir/cache", dir);
  assert_int_equal(dlqb_ledger_cache_write(gone, WRITERS, src, &sample_mark, &err), DLQB_EIO);
  assert_non_null(strstr(err.msg, "cannot write the ledger cache"));

  unlink(link);
  unlink(path);
  rmdir(dir);
  dlqb_ledger_free(src);
  dlqb_ledger_free(l);
}

static void test_ledger_clear_and_each(void **state) {
  (void)state;
  dlqb_ledger *l = sample_ledger(10);
  dlqb_ledger_clear(l);
  assert_int_equal(dlqb_ledger_size(l), 0);
  assert_false(dlqb_ledger_contains(l, "req-1", "crm"));
  dlqb_error err;
  assert_int_equal(dlqb_ledger_add(l, "req-1", "crm", &err), DLQB_OK);
  assert_true(dlqb_ledger_contains(l, "req-1", "crm"));
  dlqb_ledger_free(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ledger_set),
      cmocka_unit_test(test_ledger_grows),
      cmocka_unit_test(test_ledger_completion_times),
      cmocka_unit_test(test_ledger_clear_and_each),
      cmocka_unit_test(test_cache_round_trip),
      cmocka_unit_test(test_cache_refuses_damage),
      cmocka_unit_test(test_cache_refuses_other_writers),
      cmocka_unit_test(test_cache_refuses_wrong_count),
      cmocka_unit_test(test_cache_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

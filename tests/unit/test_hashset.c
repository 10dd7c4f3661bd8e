/* Unit tests of the core's hash set: growth, removal with backward shift,
 * long collision runs (also wrapping around the table's end), empty and
 * binary keys, and the value slot. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/hashset.h"

typedef struct {
  long count;
  char tag[8];
} value;

static void *add(dlqb_hashset *s, const char *key, bool want_added) {
  bool added = !want_added;
  void *v = dlqb_hashset_add(s, key, strlen(key), &added);
  assert_non_null(v);
  assert_true(added == want_added);
  return v;
}

static bool held(const dlqb_hashset *s, const char *key) {
  return dlqb_hashset_get(s, key, strlen(key)) != NULL;
}

static void test_add_get_and_values(void **state) {
  (void)state;
  dlqb_hashset *s = dlqb_hashset_new(sizeof(value));
  assert_non_null(s);
  assert_int_equal(dlqb_hashset_size(s), 0);
  assert_false(held(s, "a"));
  value *v = add(s, "a", true);
  assert_int_equal(v->count, 0); /* zero-filled */
  v->count = 41;
  snprintf(v->tag, sizeof v->tag, "x");
  value *again = add(s, "a", false);
  assert_ptr_equal(again, v);
  again->count++;
  value *got = dlqb_hashset_get(s, "a", 1);
  assert_int_equal(got->count, 42);
  assert_string_equal(got->tag, "x");
  assert_string_equal(dlqb_hashset_key(s, got), "a");
  assert_int_equal(dlqb_hashset_size(s), 1);
  /* added may be NULL. */
  assert_non_null(dlqb_hashset_add(s, "b", 1, NULL));
  assert_int_equal(dlqb_hashset_size(s), 2);
  dlqb_hashset_free(s);
  dlqb_hashset_free(NULL);
}

static void test_growth_keeps_keys_and_values_in_place(void **state) {
  (void)state;
  enum { N = 20000 };
  dlqb_hashset *s = dlqb_hashset_new(sizeof(value));
  static value *where[N];
  char key[32];
  assert_int_equal(dlqb_hashset_capacity(s), DLQB_HASHSET_MIN_CAP);
  for (int i = 0; i < N; i++) {
    snprintf(key, sizeof key, "msg-%d", i);
    where[i] = add(s, key, true);
    where[i]->count = i;
    /* At most half full, always a power of two. */
    size_t cap = dlqb_hashset_capacity(s);
    assert_true(dlqb_hashset_size(s) * 2 <= cap);
    assert_int_equal(cap & (cap - 1), 0);
  }
  assert_int_equal(dlqb_hashset_size(s), N);
  assert_int_equal(dlqb_hashset_capacity(s), 65536);
  for (int i = 0; i < N; i++) {
    snprintf(key, sizeof key, "msg-%d", i);
    value *v = dlqb_hashset_get(s, key, strlen(key));
    assert_ptr_equal(v, where[i]); /* growing moved no value */
    assert_int_equal(v->count, i);
  }
  assert_false(held(s, "msg-20000"));
  dlqb_hashset_clear(s);
  assert_int_equal(dlqb_hashset_size(s), 0);
  assert_int_equal(dlqb_hashset_capacity(s), 65536);
  assert_false(held(s, "msg-1"));
  add(s, "msg-1", true);
  dlqb_hashset_free(s);
}

/* n distinct keys whose home slot in a table of cap slots is home. */
static void colliding_keys(size_t cap, size_t home, char keys[][16], int n) {
  int found = 0;
  for (int i = 0; found < n; i++) {
    char k[16];
    snprintf(k, sizeof k, "c%d", i);
    if ((dlqb_hashset_hash(k, strlen(k)) & (cap - 1)) == home) memcpy(keys[found++], k, 16);
  }
}

static void expect_exactly(const dlqb_hashset *s, char keys[][16], const bool *in, int n) {
  size_t count = 0;
  for (int i = 0; i < n; i++) {
    if (held(s, keys[i]) != in[i]) fail_msg("key %s: held %d, expected %d", keys[i], !in[i], in[i]);
    count += in[i];
  }
  assert_int_equal(dlqb_hashset_size(s), count);
}

/* One run of keys sharing a home slot, removed in an order that leaves
 * gaps at its start, middle and end: every key left must still be found,
 * which fails without the backward shift. Home 60 of 64 makes the run wrap
 * around the table's end. */
static void collisions_at(size_t home) {
  enum { N = 20 };
  char keys[N][16];
  bool in[N];
  colliding_keys(DLQB_HASHSET_MIN_CAP, home, keys, N);
  dlqb_hashset *s = dlqb_hashset_new(0);
  for (int i = 0; i < N; i++) {
    add(s, keys[i], true);
    in[i] = true;
  }
  assert_int_equal(dlqb_hashset_capacity(s), DLQB_HASHSET_MIN_CAP); /* no growth: one run */
  expect_exactly(s, keys, in, N);
  static const int order[] = {0, 10, 19, 1, 2, 11, 5, 18, 3, 4, 6, 7, 8, 9, 12, 13, 14, 15, 16, 17};
  for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
    int i = order[k];
    assert_true(dlqb_hashset_remove(s, keys[i], strlen(keys[i])));
    assert_false(dlqb_hashset_remove(s, keys[i], strlen(keys[i])));
    in[i] = false;
    expect_exactly(s, keys, in, N);
    if (k == 9) {
      /* Put some back mid-way: they must land where they are found. */
      for (int j = 0; j < 3; j++) {
        add(s, keys[order[j]], true);
        in[order[j]] = true;
      }
      expect_exactly(s, keys, in, N);
      for (int j = 0; j < 3; j++) {
        assert_true(dlqb_hashset_remove(s, keys[order[j]], strlen(keys[order[j]])));
        in[order[j]] = false;
      }
      expect_exactly(s, keys, in, N);
    }
  }
  assert_int_equal(dlqb_hashset_size(s), 0);
  dlqb_hashset_free(s);
}

static void test_removal_in_a_collision_run(void **state) {
  (void)state;
  collisions_at(7);
}

static void test_removal_in_a_run_that_wraps(void **state) {
  (void)state;
  collisions_at(DLQB_HASHSET_MIN_CAP - 4);
}

/* Two interleaved runs (homes 3 and 4): removing from the first must not
 * move the second's keys out of reach, nor move them before their home. */
static void test_removal_between_neighbouring_runs(void **state) {
  (void)state;
  enum { N = 8 };
  char a[N][16], b[N][16];
  colliding_keys(DLQB_HASHSET_MIN_CAP, 3, a, N);
  colliding_keys(DLQB_HASHSET_MIN_CAP, 4, b, N);
  dlqb_hashset *s = dlqb_hashset_new(0);
  for (int i = 0; i < N; i++) {
    add(s, a[i], true);
    add(s, b[i], true);
  }
  for (int i = 0; i < N; i++) {
    assert_true(dlqb_hashset_remove(s, a[i], strlen(a[i])));
    for (int j = 0; j < N; j++) {
      assert_true(held(s, b[j]));
      assert_true(held(s, a[j]) == (j > i));
    }
  }
  assert_int_equal(dlqb_hashset_size(s), N);
  dlqb_hashset_free(s);
}

static void test_empty_and_binary_keys(void **state) {
  (void)state;
  dlqb_hashset *s = dlqb_hashset_new(sizeof(long));
  assert_null(dlqb_hashset_get(s, "", 0));
  long *e = dlqb_hashset_add(s, "", 0, NULL);
  assert_non_null(e);
  *e = 7;
  /* A NULL key of length 0 is the empty key. */
  assert_ptr_equal(dlqb_hashset_get(s, NULL, 0), e);
  assert_string_equal(dlqb_hashset_key(s, e), "");
  /* Keys with NULs: "a\0b" is neither "a" nor "a\0c". */
  assert_non_null(dlqb_hashset_add(s, "a\0b", 3, NULL));
  assert_null(dlqb_hashset_get(s, "a", 1));
  assert_null(dlqb_hashset_get(s, "a\0c", 3));
  assert_non_null(dlqb_hashset_get(s, "a\0b", 3));
  assert_non_null(dlqb_hashset_add(s, "a", 1, NULL));
  assert_int_equal(dlqb_hashset_size(s), 3);
  assert_true(dlqb_hashset_remove(s, "", 0));
  assert_null(dlqb_hashset_get(s, "", 0));
  assert_non_null(dlqb_hashset_get(s, "a\0b", 3));
  assert_int_equal(dlqb_hashset_size(s), 2);
  dlqb_hashset_free(s);
}

typedef struct {
  size_t calls, bytes;
} tally;

static void count_key(void *ctx, const char *key, size_t len, void *v) {
  tally *t = ctx;
  assert_non_null(v);                 /* value_size 0: still a non-NULL value pointer */
  assert_int_equal(strlen(key), len); /* NUL-terminated copy */
  t->calls++;
  t->bytes += len;
}

static void test_each_visits_every_key_once(void **state) {
  (void)state;
  dlqb_hashset *s = dlqb_hashset_new(0);
  char key[16];
  size_t bytes = 0;
  for (int i = 0; i < 500; i++) {
    snprintf(key, sizeof key, "k%d", i);
    add(s, key, true);
    bytes += strlen(key);
  }
  for (int i = 0; i < 500; i += 2) {
    snprintf(key, sizeof key, "k%d", i);
    assert_true(dlqb_hashset_remove(s, key, strlen(key)));
    bytes -= strlen(key);
  }
  tally t = {0, 0};
  dlqb_hashset_each(s, count_key, &t);
  assert_int_equal(t.calls, 250);
  assert_int_equal(t.bytes, bytes);
  dlqb_hashset_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add_get_and_values),
      cmocka_unit_test(test_growth_keeps_keys_and_values_in_place),
      cmocka_unit_test(test_removal_in_a_collision_run),
      cmocka_unit_test(test_removal_in_a_run_that_wraps),
      cmocka_unit_test(test_removal_between_neighbouring_runs),
      cmocka_unit_test(test_empty_and_binary_keys),
      cmocka_unit_test(test_each_visits_every_key_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

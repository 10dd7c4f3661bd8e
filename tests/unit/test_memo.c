/* Unit tests of the memo of copies confirmed but not acked (dlqb/memo.h):
 * one take per entry, oldest first, bounded with the oldest forgotten, and
 * holes reused before anything is forgotten. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "dlqb/memo.h"

/* An entry whose identity is the byte b repeated, its hop naming tag. */
static dlqb_memo_entry entry(uint8_t b, const char *tag, uint64_t ticket) {
  dlqb_memo_entry e;
  memset(&e, 0, sizeof e);
  memset(e.id, b, sizeof e.id);
  e.has_hop = true;
  e.recorded = ticket > 0;
  e.ticket = ticket;
  snprintf(e.hop.message_id, sizeof e.hop.message_id, "%s", tag);
  return e;
}

static uint8_t id_of[DLQB_MEMO_ID_LEN];
static const uint8_t *id(uint8_t b) {
  memset(id_of, b, sizeof id_of);
  return id_of;
}

static void test_take_once_each(void **state) {
  (void)state;
  dlqb_memo *m = dlqb_memo_new(8);
  assert_non_null(m);
  dlqb_memo_entry a = entry(1, "a", 7), b = entry(2, "b", 0), out;
  assert_true(dlqb_memo_put(m, &a, NULL));
  assert_true(dlqb_memo_put(m, &b, NULL));
  assert_int_equal(dlqb_memo_size(m), 2);
  assert_false(dlqb_memo_take(m, id(3), &out)); /* nothing like it */
  assert_true(dlqb_memo_take(m, id(2), &out));
  assert_string_equal(out.hop.message_id, "b");
  assert_false(out.recorded);
  assert_false(dlqb_memo_take(m, id(2), &out)); /* one redelivery per entry */
  assert_true(dlqb_memo_take(m, id(1), &out));
  assert_string_equal(out.hop.message_id, "a");
  assert_true(out.recorded);
  assert_int_equal(out.ticket, 7);
  assert_int_equal(dlqb_memo_size(m), 0);
  dlqb_memo_free(m);
  dlqb_memo_free(NULL);
  assert_int_equal(dlqb_memo_size(NULL), 0);
  assert_false(dlqb_memo_take(NULL, id(1), &out));
}

/* Two originals with one identity (the same message twice): each entry
 * answers one of them, oldest first. */
static void test_same_identity_twice(void **state) {
  (void)state;
  dlqb_memo *m = dlqb_memo_new(8);
  dlqb_memo_entry first = entry(5, "first", 1), second = entry(5, "second", 2), out;
  assert_true(dlqb_memo_put(m, &first, NULL));
  assert_true(dlqb_memo_put(m, &second, NULL));
  assert_true(dlqb_memo_take(m, id(5), &out));
  assert_string_equal(out.hop.message_id, "first");
  assert_true(dlqb_memo_take(m, id(5), &out));
  assert_string_equal(out.hop.message_id, "second");
  assert_false(dlqb_memo_take(m, id(5), &out));
  dlqb_memo_free(m);
}

static void test_full_forgets_the_oldest(void **state) {
  (void)state;
  dlqb_memo *m = dlqb_memo_new(3);
  assert_int_equal(dlqb_memo_max(m), 3);
  bool forgot = true;
  for (uint8_t i = 1; i <= 3; i++) {
    dlqb_memo_entry e = entry(i, "x", i);
    assert_true(dlqb_memo_put(m, &e, &forgot));
    assert_false(forgot);
  }
  dlqb_memo_entry d = entry(4, "d", 4), out;
  assert_true(dlqb_memo_put(m, &d, &forgot));
  assert_true(forgot);
  assert_int_equal(dlqb_memo_size(m), 3);
  assert_false(dlqb_memo_take(m, id(1), &out)); /* the oldest went */
  for (uint8_t i = 2; i <= 4; i++) assert_true(dlqb_memo_take(m, id(i), &out));
  dlqb_memo_free(m);
}

/* A taken entry in the middle leaves a hole; a full memo fills holes
 * before it forgets anyone. */
static void test_holes_before_forgetting(void **state) {
  (void)state;
  dlqb_memo *m = dlqb_memo_new(3);
  for (uint8_t i = 1; i <= 3; i++) {
    dlqb_memo_entry e = entry(i, "x", i);
    assert_true(dlqb_memo_put(m, &e, NULL));
  }
  dlqb_memo_entry out, d = entry(4, "d", 4);
  assert_true(dlqb_memo_take(m, id(2), &out));
  bool forgot = true;
  assert_true(dlqb_memo_put(m, &d, &forgot));
  assert_false(forgot);
  for (uint8_t i = 1; i <= 4; i++)
    if (i != 2) assert_true(dlqb_memo_take(m, id(i), &out));
  assert_int_equal(dlqb_memo_size(m), 0);
  dlqb_memo_free(m);
}

/* Growing past its first allocation, wrapping around, keeps the order. */
static void test_grows_and_wraps_in_order(void **state) {
  (void)state;
  dlqb_memo *m = dlqb_memo_new(100);
  dlqb_memo_entry out;
  for (int round = 0; round < 5; round++) {
    for (int i = 0; i < 40; i++) {
      char tag[16];
      snprintf(tag, sizeof tag, "%d-%d", round, i);
      dlqb_memo_entry e = entry((uint8_t)(i % 7), tag, 1);
      assert_true(dlqb_memo_put(m, &e, NULL));
    }
    /* Oldest first among those of one identity. */
    for (int i = 0; i < 40; i++) {
      char tag[16];
      snprintf(tag, sizeof tag, "%d-%d", round, i);
      assert_true(dlqb_memo_take(m, id((uint8_t)(i % 7)), &out));
      assert_string_equal(out.hop.message_id, tag);
    }
    assert_int_equal(dlqb_memo_size(m), 0);
  }
  dlqb_memo_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_take_once_each),
      cmocka_unit_test(test_same_identity_twice),
      cmocka_unit_test(test_full_forgets_the_oldest),
      cmocka_unit_test(test_holes_before_forgetting),
      cmocka_unit_test(test_grows_and_wraps_in_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

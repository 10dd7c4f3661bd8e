/* Unit tests of the wire sizes (dlqb/wire.h), against sizes worked out by
 * hand from the AMQP 0-9-1 grammar. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlqb/wire.h"
#include "table_builder.h"

static void test_table_sizes(void **state) {
  (void)state;
  tb_table h;
  tb_clear(&h);
  assert_int_equal(dlqb_wire_table_size(&h.t), 4);
  /* key: 1 + 1; value: type 1 + length 4 + 2 */
  tb_add(&h, "a", tb_str("bc"));
  assert_int_equal(dlqb_wire_table_size(&h.t), 4 + 2 + 7);
  tb_add(&h, "n", tb_i64(7)); /* 1 + 1 + 1 + 8 */
  assert_int_equal(dlqb_wire_table_size(&h.t), 13 + 11);
  amqp_field_value_t items[2] = {tb_str("x"), tb_i64(1)};
  tb_add(&h, "arr", tb_array(items, 2)); /* 1 + 3 + 1 + 4 + (1+4+1) + (1+8) */
  assert_int_equal(dlqb_wire_table_size(&h.t), 24 + 24);
  amqp_table_entry_t inner[1] = {tb_entry("k", tb_str(""))};
  tb_add(&h, "t", tb_table_value(inner, 1)); /* 1 + 1 + 1 + (4 + 1 + 1 + 1 + 4) */
  assert_int_equal(dlqb_wire_table_size(&h.t), 48 + 14);
}

static void test_unknown_kind_has_no_size(void **state) {
  (void)state;
  tb_table h;
  tb_clear(&h);
  tb_add(&h, "odd", tb_kind('?'));
  assert_int_equal(dlqb_wire_table_size(&h.t), SIZE_MAX);
}

static void test_content_header_and_fit(void **state) {
  (void)state;
  tb_table h;
  tb_clear(&h);
  tb_add(&h, "a", tb_str("bc"));
  amqp_basic_properties_t p;
  memset(&p, 0, sizeof p);
  p._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
  p.headers = h.t;
  p.message_id.bytes = "m";
  p.message_id.len = 1;
  /* 14 fixed + 13 headers + 1 delivery mode + 2 message_id */
  assert_int_equal(dlqb_wire_content_header_size(&p), 30);
  assert_true(dlqb_wire_fits(&p, 30 + DLQB_WIRE_FRAME_OVERHEAD));
  assert_false(dlqb_wire_fits(&p, 29 + DLQB_WIRE_FRAME_OVERHEAD));
  /* A property that is not flagged costs nothing. */
  p.user_id.bytes = "someone";
  p.user_id.len = 7;
  assert_int_equal(dlqb_wire_content_header_size(&p), 30);
  p._flags |= AMQP_BASIC_USER_ID_FLAG;
  assert_int_equal(dlqb_wire_content_header_size(&p), 38);
}

static void test_deep_nesting_is_bounded(void **state) {
  (void)state;
  /* A chain of arrays deeper than any frame: the walk stops, no crash. */
  /* As deep as the size walk still measures: far past the identity's
   * bound, which stops the walk (recursive) long before the stack. */
  enum { DEPTH = DLQB_WIRE_MAX_DEPTH + 10 };
  static amqp_field_value_t v[DEPTH];
  for (int i = 0; i < DEPTH - 1; i++) v[i] = tb_array(&v[i + 1], 1);
  v[DEPTH - 1] = tb_i64(1);
  tb_table h;
  tb_clear(&h);
  tb_add(&h, "deep", v[0]);
  assert_int_equal(dlqb_wire_table_size(&h.t), SIZE_MAX);
}

/* ---- identity ---- */

typedef struct {
  unsigned char buf[4096];
  size_t len;
  bool overflow;
} fed;

static void collect(void *ctx, const void *data, size_t len) {
  fed *f = ctx;
  if (f->len + len > sizeof f->buf) {
    f->overflow = true;
    return;
  }
  memcpy(f->buf + f->len, data, len);
  f->len += len;
}

static void count_bytes(void *ctx, const void *data, size_t len) {
  (void)data;
  *(size_t *)ctx += len;
}

static bool identity(const amqp_basic_properties_t *p, fed *f) {
  memset(f, 0, sizeof *f);
  bool ok = dlqb_wire_identity(p, collect, f);
  assert_false(f->overflow);
  return ok;
}

static bool same(const fed *a, const fed *b) {
  return a->len == b->len && memcmp(a->buf, b->buf, a->len) == 0;
}

static amqp_basic_properties_t props_with(tb_table *h, const char *message_id) {
  amqp_basic_properties_t p;
  memset(&p, 0, sizeof p);
  p._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
  p.headers = h->t;
  p.message_id = amqp_cstring_bytes(message_id);
  p.delivery_mode = 2;
  return p;
}

/* What a quorum queue changes on a redelivery is not part of the identity;
 * anything else is. */
static void test_identity_ignores_redelivery_counts(void **state) {
  (void)state;
  tb_table h1, h2;
  tb_clear(&h1);
  tb_add(&h1, "request_id", tb_str("R-1"));
  tb_add(&h1, "attempt", tb_i64(2));
  tb_clear(&h2); /* as a quorum queue delivers it again: sorted by key, with its count */
  tb_add(&h2, "attempt", tb_i64(2));
  tb_add(&h2, "request_id", tb_str("R-1"));
  tb_add(&h2, "x-acquired-count", tb_i64(3));
  tb_add(&h2, "x-delivery-count", tb_i64(1));
  amqp_basic_properties_t first = props_with(&h1, "m-1"), again = props_with(&h2, "m-1");
  fed a, b;
  assert_true(identity(&first, &a));
  assert_true(identity(&again, &b));
  assert_true(same(&a, &b));
  /* A message with no headers at all, given a table for the count. */
  tb_table none, count;
  tb_clear(&none);
  tb_clear(&count);
  tb_add(&count, "x-delivery-count", tb_i64(1));
  amqp_basic_properties_t bare = props_with(&none, "m-1"), counted = props_with(&count, "m-1");
  bare._flags &= ~AMQP_BASIC_HEADERS_FLAG;
  assert_true(identity(&bare, &a));
  assert_true(identity(&counted, &b));
  assert_true(same(&a, &b));
  /* More headers than the walk sorts without allocating. */
  static char keys[40][8];
  tb_table up, down;
  tb_clear(&up);
  tb_clear(&down);
  for (int i = 0; i < 40; i++) snprintf(keys[i], sizeof keys[i], "k%02d", i);
  for (int i = 0; i < 40; i++) tb_add(&up, keys[i], tb_i64(i));
  for (int i = 39; i >= 0; i--) tb_add(&down, keys[i], tb_i64(i));
  amqp_basic_properties_t pu = props_with(&up, "m-1"), pd = props_with(&down, "m-1");
  assert_true(identity(&pu, &a));
  assert_true(identity(&pd, &b));
  assert_true(same(&a, &b));
}

static void test_identity_tells_other_messages_apart(void **state) {
  (void)state;
  tb_table h;
  tb_clear(&h);
  tb_add(&h, "request_id", tb_str("R-1"));
  amqp_basic_properties_t p = props_with(&h, "m-1");
  fed base, other;
  assert_true(identity(&p, &base));
  /* Another header value (a copycat with the same message_id). */
  tb_table h2;
  tb_clear(&h2);
  tb_add(&h2, "request_id", tb_str("R-2"));
  amqp_basic_properties_t q = props_with(&h2, "m-1");
  assert_true(identity(&q, &other));
  assert_false(same(&base, &other));
  /* Another message_id. */
  q = props_with(&h, "m-2");
  assert_true(identity(&q, &other));
  assert_false(same(&base, &other));
  /* The same text in another property. */
  q = props_with(&h, "m-1");
  q._flags &= ~AMQP_BASIC_MESSAGE_ID_FLAG;
  q._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
  q.correlation_id = amqp_cstring_bytes("m-1");
  assert_true(identity(&q, &other));
  assert_false(same(&base, &other));
  /* Where a key ends and its value begins. */
  tb_table k1, k2;
  tb_clear(&k1);
  tb_add(&k1, "ab", tb_str("c"));
  tb_clear(&k2);
  tb_add(&k2, "a", tb_str("bc"));
  amqp_basic_properties_t p1 = props_with(&k1, "m"), p2 = props_with(&k2, "m");
  assert_true(identity(&p1, &base));
  assert_true(identity(&p2, &other));
  assert_false(same(&base, &other));
  /* Another value under one key, when the key repeats. */
  tb_table d1, d2;
  tb_clear(&d1);
  tb_add(&d1, "k", tb_str("1"));
  tb_add(&d1, "k", tb_str("2"));
  tb_clear(&d2);
  tb_add(&d2, "k", tb_str("2"));
  tb_add(&d2, "k", tb_str("1"));
  p1 = props_with(&d1, "m");
  p2 = props_with(&d2, "m");
  assert_true(identity(&p1, &base));
  assert_true(identity(&p2, &other));
  assert_false(same(&base, &other));
  /* A count nested deeper is the message's own, not the broker's. */
  amqp_table_entry_t inner1[1] = {tb_entry("x-delivery-count", tb_i64(1))};
  amqp_table_entry_t inner2[1] = {tb_entry("x-delivery-count", tb_i64(2))};
  tb_table n1, n2;
  tb_clear(&n1);
  tb_add(&n1, "nested", tb_table_value(inner1, 1));
  tb_clear(&n2);
  tb_add(&n2, "nested", tb_table_value(inner2, 1));
  p1 = props_with(&n1, "m");
  p2 = props_with(&n2, "m");
  assert_true(identity(&p1, &base));
  assert_true(identity(&p2, &other));
  assert_false(same(&base, &other));
}

static void test_identity_refuses_what_it_cannot_walk(void **state) {
  (void)state;
  tb_table h;
  tb_clear(&h);
  tb_add(&h, "odd", tb_kind('?'));
  amqp_basic_properties_t p = props_with(&h, "m");
  fed f;
  assert_false(identity(&p, &f));
  /* As deep as the size walk still measures: far past the identity's
   * bound, which stops the walk (recursive) long before the stack. */
  enum { DEPTH = DLQB_WIRE_MAX_DEPTH + 10 };
  static amqp_field_value_t v[DEPTH];
  for (int i = 0; i < DEPTH - 1; i++) v[i] = tb_array(&v[i + 1], 1);
  v[DEPTH - 1] = tb_i64(1);
  tb_clear(&h);
  tb_add(&h, "deep", v[0]);
  p = props_with(&h, "m");
  size_t bytes = 0; /* the walk feeds a few bytes per level: only counted */
  assert_false(dlqb_wire_identity(&p, count_bytes, &bytes));
  assert_true(bytes > DLQB_WIRE_IDENTITY_MAX_DEPTH);
  assert_true(bytes < 64 * DLQB_WIRE_IDENTITY_MAX_DEPTH); /* it stopped there */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_sizes),
      cmocka_unit_test(test_unknown_kind_has_no_size),
      cmocka_unit_test(test_content_header_and_fit),
      cmocka_unit_test(test_deep_nesting_is_bounded),
      cmocka_unit_test(test_identity_ignores_redelivery_counts),
      cmocka_unit_test(test_identity_tells_other_messages_apart),
      cmocka_unit_test(test_identity_refuses_what_it_cannot_walk),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the wire sizes (dlqb/wire.h), against sizes worked out by
 * hand from the AMQP 0-9-1 grammar. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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
  enum { DEPTH = DLQB_WIRE_MAX_DEPTH + 10 };
  static amqp_field_value_t v[DEPTH];
  for (int i = 0; i < DEPTH - 1; i++) v[i] = tb_array(&v[i + 1], 1);
  v[DEPTH - 1] = tb_i64(1);
  tb_table h;
  tb_clear(&h);
  tb_add(&h, "deep", v[0]);
  assert_int_equal(dlqb_wire_table_size(&h.t), SIZE_MAX);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_sizes),
      cmocka_unit_test(test_unknown_kind_has_no_size),
      cmocka_unit_test(test_content_header_and_fit),
      cmocka_unit_test(test_deep_nesting_is_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

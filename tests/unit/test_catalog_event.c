/* Unit tests of the catalog's "in" event (dlqb/catalog_stream.h): the item
 * a look reads from the event is the item a pass reads from the copy
 * itself, for plain and hostile headers alike (a decimal, tables and
 * arrays where strings belong, a forged x-death, long text), and the event
 * carries no value a stream's channel cannot take. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/catalog_stream.h"
#include "dlqb/names.h"
#include "table_builder.h"

static dlqb_catalog_target target(void) {
  dlqb_pipeline p;
  memset(&p, 0, sizeof p);
  dlqb_pipeline_default_names(&p, DLQB_PIPELINE_DEFAULT);
  assert_int_equal(dlqb_profile_builtin(DLQB_PIPELINE_DEFAULT, &p.profile, NULL), DLQB_OK);
  dlqb_catalog_target t;
  dlqb_catalog_target_of(&p, &t);
  return t;
}

static void props_of(amqp_basic_properties_t *p, tb_table *h, const char *id) {
  memset(p, 0, sizeof *p);
  p->_flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
  p->headers = h->t;
  p->message_id = amqp_cstring_bytes(id);
  p->timestamp = 1700000000;
}

/* The event's view equals the copy's, field by field. */
static void same_view(const dlqb_catalog_target *t, const amqp_basic_properties_t *copy) {
  dlqb_catalog_event ev;
  dlqb_catalog_event_in(t, "dsr.dlq.manual", copy, &ev);
  dlqb_item *want = calloc(1, sizeof *want), *got = calloc(1, sizeof *got);
  assert_non_null(want);
  assert_non_null(got);
  dlqb_item_read_as(copy, &t->profile, want);
  dlqb_catalog_event_item(&ev.props, &t->profile, got);
  assert_memory_equal(want, got, sizeof *want);
  /* Nothing but plain scalars (a stream of 3.10.8 drops the channel of a
   * decimal; no table or array at all). */
  for (int i = 0; i < ev.props.headers.num_entries; i++) {
    uint8_t k = ev.props.headers.entries[i].value.kind;
    assert_true(k != AMQP_FIELD_KIND_DECIMAL && k != AMQP_FIELD_KIND_TABLE &&
                k != AMQP_FIELD_KIND_ARRAY && k != AMQP_FIELD_KIND_VOID);
  }
  free(want);
  free(got);
}

static void test_plain_item(void **state) {
  (void)state;
  dlqb_catalog_target t = target();
  tb_table h;
  tb_clear(&h);
  tb_add(&h, "request_id", tb_str("r-1"));
  tb_add(&h, "source_system", tb_str("billing"));
  tb_add(&h, "legal_basis", tb_str("gdpr_art_17"));
  tb_add(&h, "attempt", tb_i64(5));
  tb_add(&h, "last_error", tb_str("timeout after 30s"));
  tb_add(&h, "dlq_reason", tb_str("max_attempts"));
  tb_add(&h, "dlq_at", tb_str("2026-11-30T10:00:00.000Z"));
  tb_add(&h, "unrelated", tb_str("not kept"));
  /* x-death as the broker writes it. */
  amqp_field_value_t ts = tb_kind(AMQP_FIELD_KIND_TIMESTAMP);
  ts.value.u64 = 1700000000;
  amqp_table_entry_t d[4] = {tb_entry("queue", tb_str("dsr.work")),
                             tb_entry("reason", tb_str("rejected")), tb_entry("count", tb_i64(2)),
                             tb_entry("time", ts)};
  amqp_field_value_t deaths[1] = {tb_table_value(d, 4)};
  tb_add(&h, "x-death", tb_array(deaths, 1));
  amqp_basic_properties_t p;
  props_of(&p, &h, "m-1");
  same_view(&t, &p);
}

static void test_hostile_item(void **state) {
  (void)state;
  dlqb_catalog_target t = target();
  tb_table h;
  tb_clear(&h);
  amqp_field_value_t dec = tb_kind(AMQP_FIELD_KIND_DECIMAL);
  dec.value.decimal.decimals = 1;
  dec.value.decimal.value = 10;
  tb_add(&h, "attempt", dec);
  amqp_table_entry_t inner[1] = {tb_entry("x", tb_str("y"))};
  tb_add(&h, "request_id", tb_table_value(inner, 1));
  amqp_field_value_t items[2] = {tb_str("a"), tb_i64(1)};
  tb_add(&h, "source_system", tb_array(items, 2));
  tb_add(&h, "legal_basis", tb_kind(AMQP_FIELD_KIND_VOID));
  static char big[8192];
  memset(big, 'e', sizeof big - 1);
  tb_add(&h, "last_error", tb_str(big));
  /* A forged x-death: strings where tables belong. */
  amqp_field_value_t forged[2] = {tb_str("dsr.work"), dec};
  tb_add(&h, "x-death", tb_array(forged, 2));
  amqp_basic_properties_t p;
  props_of(&p, &h, "m-2");
  same_view(&t, &p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain_item),
      cmocka_unit_test(test_hostile_item),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

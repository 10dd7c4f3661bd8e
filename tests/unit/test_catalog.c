/* Unit tests of the catalog's fold (dlqb/catalog.h): items in and out in
 * order, a message_id twice, outs of unknown items, verification state,
 * the group id kept with an item, and the checkpoint's bytes (round trip
 * and refusals). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/catalog.h"
#include "dlqb/group.h"

static const char *const queues[] = {"dsr.dlq.manual", "compliance_review"};

static void item(dlqb_item *it, const char *id, const char *src, const char *err) {
  memset(it, 0, sizeof *it);
  snprintf(it->message_id, sizeof it->message_id, "%s", id);
  snprintf(it->request_id, sizeof it->request_id, "r-%s", id);
  snprintf(it->source_system, sizeof it->source_system, "%s", src);
  snprintf(it->last_error, sizeof it->last_error, "%s", err);
  snprintf(it->dlq_reason, sizeof it->dlq_reason, "max_attempts");
  it->has_dlq_at = true;
  it->dlq_at_ms = 1700000000000;
  it->has_attempt = true;
  it->attempt = 5;
}

typedef struct {
  char ids[16][128];
  char groups[16][DLQB_GROUP_ID_BUF];
  size_t n;
  size_t stop_after;
} seen;

static bool collect(void *ctx, const dlqb_item *it) {
  seen *s = ctx;
  assert_true(s->n < 16);
  snprintf(s->ids[s->n], sizeof s->ids[s->n], "%s", it->message_id);
  memcpy(s->groups[s->n], it->group, DLQB_GROUP_ID_BUF);
  s->n++;
  return s->stop_after == 0 || s->n < s->stop_after;
}

static void add(dlqb_catalog *c, int q, const char *id, const char *src) {
  dlqb_item it;
  item(&it, id, src, "timeout after 30s on host 10.0.0.7");
  dlqb_error err;
  assert_int_equal(dlqb_catalog_in(c, q, 0, &it, &err), DLQB_OK);
}

static void test_in_out_in_order(void **state) {
  (void)state;
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  assert_non_null(c);
  assert_int_equal(dlqb_catalog_queue(c, "compliance_review"), 1);
  assert_int_equal(dlqb_catalog_queue(c, "dsr.work"), -1);
  add(c, 0, "a", "crm");
  add(c, 0, "b", "billing");
  add(c, 1, "x", "crm");
  add(c, 0, "c", "crm");
  add(c, 0, "b", "billing"); /* a duplicate copy */
  assert_int_equal(dlqb_catalog_count(c, 0), 4);
  assert_int_equal(dlqb_catalog_count(c, 1), 1);
  assert_int_equal(dlqb_catalog_has(c, 0, "b"), 2);
  /* The earliest copy goes first. */
  assert_true(dlqb_catalog_out(c, 0, "b"));
  assert_false(dlqb_catalog_out(c, 0, "x")); /* in the other queue */
  assert_int_equal(dlqb_catalog_unmatched(c, 0), 1);
  seen s = {0};
  dlqb_catalog_each(c, 0, collect, &s);
  assert_int_equal(s.n, 3);
  assert_string_equal(s.ids[0], "a");
  assert_string_equal(s.ids[1], "c");
  assert_string_equal(s.ids[2], "b"); /* the later copy: after c */
  assert_true(dlqb_catalog_out(c, 0, "b"));
  assert_int_equal(dlqb_catalog_has(c, 0, "b"), 0);
  /* The visit stops when asked. */
  seen one = {.stop_after = 1};
  dlqb_catalog_each(c, 0, collect, &one);
  assert_int_equal(one.n, 1);
  dlqb_catalog_verified(c, 0, 42, 2);
  assert_true(dlqb_catalog_state(c, 0)->verified);
  assert_int_equal(dlqb_catalog_unmatched(c, 0), 0);
  dlqb_catalog_free(c);
  dlqb_catalog_free(NULL);
}

static void test_group_is_kept(void **state) {
  (void)state;
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  dlqb_item it;
  item(&it, "g1", "crm", "timeout after 30s on host 10.0.0.7");
  char want[DLQB_GROUP_ID_BUF];
  dlqb_group_of(&it, want, NULL, 0);
  dlqb_error err;
  assert_int_equal(dlqb_catalog_in(c, 0, 0, &it, &err), DLQB_OK);
  seen s = {0};
  dlqb_catalog_each(c, 0, collect, &s);
  assert_int_equal(s.n, 1);
  assert_string_equal(s.groups[0], want);
  dlqb_catalog_free(c);
}

static void test_many_items_compact(void **state) {
  (void)state;
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  char id[32];
  for (int i = 0; i < 20000; i++) {
    snprintf(id, sizeof id, "m-%d", i);
    add(c, 0, id, "crm");
  }
  for (int i = 0; i < 19990; i++) {
    snprintf(id, sizeof id, "m-%d", i);
    assert_true(dlqb_catalog_out(c, 0, id));
  }
  assert_int_equal(dlqb_catalog_count(c, 0), 10);
  assert_true(dlqb_catalog_entries(c) < 20000); /* the dead were dropped */
  seen s = {0};
  dlqb_catalog_each(c, 0, collect, &s);
  assert_int_equal(s.n, 10);
  assert_string_equal(s.ids[0], "m-19990");
  assert_string_equal(s.ids[9], "m-19999");
  dlqb_catalog_free(c);
}

static void test_checkpoint_round_trip(void **state) {
  (void)state;
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  add(c, 0, "a", "crm");
  add(c, 0, "b", "billing");
  add(c, 1, "x", "crm");
  assert_true(dlqb_catalog_out(c, 0, "a"));
  dlqb_catalog_verified(c, 1, 1234, 1);
  dlqb_catalog_mark mark = {.offset = 77};
  snprintf(mark.marker, sizeof mark.marker, "m-1");
  char *buf = NULL;
  size_t len = 0;
  dlqb_error err;
  assert_int_equal(dlqb_catalog_encode(c, &mark, "request_id source_system", &buf, &len, &err),
                   DLQB_OK);
  dlqb_catalog *d = dlqb_catalog_new(queues, 2);
  dlqb_catalog_mark got;
  assert_int_equal(dlqb_catalog_decode(d, buf, len, "request_id source_system", &got, &err),
                   DLQB_OK);
  assert_int_equal(got.offset, 77);
  assert_string_equal(got.marker, "m-1");
  assert_int_equal(dlqb_catalog_count(d, 0), 1);
  assert_int_equal(dlqb_catalog_count(d, 1), 1);
  assert_int_equal(dlqb_catalog_has(d, 0, "b"), 1);
  assert_true(dlqb_catalog_state(d, 1)->verified);
  assert_int_equal(dlqb_catalog_state(d, 1)->verified_at, 1234);
  seen s = {0};
  dlqb_catalog_each(d, 0, collect, &s);
  assert_int_equal(s.n, 1);
  assert_string_equal(s.ids[0], "b");

  /* Taken as the fold's storage: the same fold, and it goes on. */
  char *own = malloc(len);
  assert_non_null(own);
  memcpy(own, buf, len);
  dlqb_catalog *e = dlqb_catalog_new(queues, 2);
  assert_int_equal(dlqb_catalog_decode_take(e, own, len, "request_id source_system", &got, &err),
                   DLQB_OK);
  assert_int_equal(dlqb_catalog_has(e, 0, "b"), 1);
  add(e, 0, "n", "crm");
  assert_true(dlqb_catalog_out(e, 0, "b"));
  seen t = {0};
  dlqb_catalog_each(e, 0, collect, &t);
  assert_int_equal(t.n, 1);
  assert_string_equal(t.ids[0], "n");
  dlqb_catalog_free(e); /* frees own */
  /* A refused one stays the caller's. */
  own = malloc(len);
  assert_non_null(own);
  memcpy(own, buf, len - 3);
  e = dlqb_catalog_new(queues, 2);
  assert_int_equal(
      dlqb_catalog_decode_take(e, own, len - 3, "request_id source_system", &got, &err),
      DLQB_EINVAL);
  free(own);
  dlqb_catalog_free(e);

  /* Another identity, other queues, cut bytes: refused, the fold empty. */
  assert_int_equal(dlqb_catalog_decode(d, buf, len, "item_id doc_id", &got, &err), DLQB_EINVAL);
  assert_int_equal(dlqb_catalog_count(d, 0), 0);
  static const char *const other[] = {"recon.dlq.manual", "recon.review"};
  dlqb_catalog *o = dlqb_catalog_new(other, 2);
  assert_int_equal(dlqb_catalog_decode(o, buf, len, "request_id source_system", &got, &err),
                   DLQB_EINVAL);
  assert_int_equal(dlqb_catalog_decode(d, buf, len - 3, "request_id source_system", &got, &err),
                   DLQB_EINVAL);
  assert_int_equal(dlqb_catalog_count(d, 0), 0);
  assert_int_equal(dlqb_catalog_decode(d, "nonsense\n", 9, "x", &got, &err), DLQB_EINVAL);
  free(buf);
  dlqb_catalog_free(o);
  dlqb_catalog_free(d);
  dlqb_catalog_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_in_out_in_order),
      cmocka_unit_test(test_group_is_kept),
      cmocka_unit_test(test_many_items_compact),
      cmocka_unit_test(test_checkpoint_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

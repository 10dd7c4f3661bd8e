/* Unit tests of the per-item verdict of a pass (dlqb/verdict.h): selection,
 * --limit, the completion ledger, and the SLA escalator's FIFO rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dlqb/verdict.h"

#define NOW INT64_C(1796015388000)
#define HOUR INT64_C(3600000)

static dlqb_item item(const char *request_id, const char *source, int64_t dlq_at_ms) {
  dlqb_item it;
  memset(&it, 0, sizeof it);
  strcpy(it.request_id, request_id);
  strcpy(it.source_system, source);
  strcpy(it.message_id, request_id);
  if (dlq_at_ms != 0) {
    it.has_dlq_at = true;
    it.dlq_at_ms = dlq_at_ms;
  }
  return it;
}

static dlqb_select select_of(const char *flag, const char *value) {
  dlqb_select s;
  dlqb_error err;
  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, flag, value, &err), DLQB_OK);
  return s;
}

static void test_unmatched_items_are_held(void **state) {
  (void)state;
  dlqb_select s = select_of("source-system", "billing");
  dlqb_verdict_rule r = {.sel = &s};
  dlqb_item crm = item("r1", "crm", NOW - HOUR), billing = item("r2", "billing", NOW - HOUR);
  dlqb_verdict v = dlqb_verdict_of(&r, &crm, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_HOLD);
  assert_false(v.stop_after);
  v = dlqb_verdict_of(&r, &billing, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_TAKE);
  assert_false(v.stop_after);
}

static void test_no_selection_takes_everything(void **state) {
  (void)state;
  dlqb_verdict_rule r = {0};
  dlqb_item it = item("r1", "crm", 0);
  assert_int_equal(dlqb_verdict_of(&r, &it, NOW, 1000).kind, DLQB_VERDICT_TAKE);
}

static void test_limit_holds_the_rest(void **state) {
  (void)state;
  dlqb_select s = select_of("limit", "2");
  dlqb_verdict_rule r = {.sel = &s};
  dlqb_item it = item("r1", "crm", NOW - HOUR);
  assert_int_equal(dlqb_verdict_of(&r, &it, NOW, 1).kind, DLQB_VERDICT_TAKE);
  dlqb_verdict v = dlqb_verdict_of(&r, &it, NOW, 2);
  assert_int_equal(v.kind, DLQB_VERDICT_HOLD);
  assert_false(v.stop_after);
  /* resolve: the pass ends with the one item it takes. */
  r.stop_at_limit = true;
  v = dlqb_verdict_of(&r, &it, NOW, 1);
  assert_int_equal(v.kind, DLQB_VERDICT_TAKE);
  assert_true(v.stop_after);
}

static void test_completed_tasks_are_skipped(void **state) {
  (void)state;
  dlqb_ledger *l = dlqb_ledger_new();
  dlqb_error err;
  assert_int_equal(dlqb_ledger_add(l, "r1", "crm", &err), DLQB_OK);
  dlqb_verdict_rule r = {.ledger = l};
  dlqb_item done = item("r1", "crm", 0), other_source = item("r1", "billing", 0);
  assert_int_equal(dlqb_verdict_of(&r, &done, NOW, 0).kind, DLQB_VERDICT_SKIP_COMPLETE);
  assert_int_equal(dlqb_verdict_of(&r, &other_source, NOW, 0).kind, DLQB_VERDICT_TAKE);
  /* An item without identity is never matched against the ledger. */
  dlqb_item anonymous = item("", "crm", 0);
  assert_int_equal(dlqb_verdict_of(&r, &anonymous, NOW, 0).kind, DLQB_VERDICT_TAKE);
  dlqb_ledger_free(l);
}

static void test_sla_takes_overdue_and_passes_over_the_rest(void **state) {
  (void)state;
  dlqb_verdict_rule r = {.sla = true, .sla_ms = (uint64_t)(24 * HOUR)};
  dlqb_item old = item("r1", "crm", NOW - 25 * HOUR), young = item("r2", "crm", NOW - HOUR);
  dlqb_item unknown = item("r3", "crm", 0);
  assert_int_equal(dlqb_verdict_of(&r, &old, NOW, 0).kind, DLQB_VERDICT_TAKE);
  /* An overdue item may sit behind a young one: the pass goes on. */
  dlqb_verdict v = dlqb_verdict_of(&r, &young, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_HOLD);
  assert_false(v.stop_after);
  v = dlqb_verdict_of(&r, &unknown, NOW, 0);
  assert_int_equal(v.kind, DLQB_VERDICT_HOLD);
  assert_false(v.stop_after);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unmatched_items_are_held),
      cmocka_unit_test(test_no_selection_takes_everything),
      cmocka_unit_test(test_limit_holds_the_rest),
      cmocka_unit_test(test_completed_tasks_are_skipped),
      cmocka_unit_test(test_sla_takes_overdue_and_passes_over_the_rest),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

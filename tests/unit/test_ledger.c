/* Unit tests for the completion ledger's set of (request_id, source_system). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ledger_set),
      cmocka_unit_test(test_ledger_grows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

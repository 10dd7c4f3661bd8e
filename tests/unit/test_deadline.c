/* Unit tests for statutory deadlines (dlqb/deadline.h): the rule syntax,
 * calendar months, the receipt time and what a forged clock can do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "dlqb/calendar.h"
#include "dlqb/config.h"
#include "dlqb/deadline.h"

#define DAY DLQB_MS_PER_DAY

static int64_t at(const char *iso) {
  int64_t ms = 0;
  assert_int_equal(dlqb_iso_time_parse(iso, strlen(iso), &ms), DLQB_OK);
  return ms;
}

static void test_parse_rules(void **state) {
  (void)state;
  dlqb_deadlines d;
  dlqb_error err;
  char buf[256];
  assert_int_equal(dlqb_deadlines_parse(" gdpr_* = 1mo , ccpa_1798_105=45d,x=72h", &d, &err),
                   DLQB_OK);
  assert_int_equal(d.n, 3);
  assert_string_equal(d.rule[0].pattern, "gdpr_*");
  assert_int_equal(d.rule[0].months, 1);
  assert_int_equal(d.rule[1].ms, 45 * DAY);
  assert_string_equal(dlqb_deadlines_format(&d, buf, sizeof buf),
                      "gdpr_*=1mo,ccpa_1798_105=45d,x=3d");
  dlqb_deadlines again;
  assert_int_equal(dlqb_deadlines_parse(buf, &again, &err), DLQB_OK);
  assert_int_equal(again.n, 3);
  assert_int_equal(dlqb_deadlines_parse("  ", &d, &err), DLQB_OK);
  assert_int_equal(d.n, 0);
  /* Bad ones: the error quotes the item, out unchanged. */
  dlqb_deadlines keep = {.n = 7};
  const char *bad[] = {"gdpr",         "=1mo",       "g*x=1mo",   "gdpr_*=0mo",
                       "gdpr_*=121mo", "gdpr_*=",    "gdpr_*=5x", "gdpr_*=0d",
                       "a=1d,",        "a=1d,,b=2d", "g\x1b=1d",  "gdpr_*=99999999999999999999mo"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&err, 0, sizeof err);
    assert_int_equal(dlqb_deadlines_parse(bad[i], &keep, &err), DLQB_EINVAL);
    assert_int_equal(keep.n, 7);
    assert_true(err.msg[0] != '\0');
    assert_null(strchr(err.msg, '\x1b'));
  }
  char many[512] = "";
  for (int i = 0; i < DLQB_DEADLINE_RULES_MAX + 1; i++) strcat(many, i ? ",a=1d" : "a=1d");
  assert_int_equal(dlqb_deadlines_parse(many, &keep, &err), DLQB_EINVAL);
  /* first match wins; exact and prefix */
  assert_int_equal(dlqb_deadlines_parse("gdpr_art_15=2mo,gdpr_*=1mo", &d, &err), DLQB_OK);
  assert_int_equal(dlqb_deadlines_rule_for(&d, "gdpr_art_15")->months, 2);
  assert_int_equal(dlqb_deadlines_rule_for(&d, "gdpr_art_17")->months, 1);
  assert_null(dlqb_deadlines_rule_for(&d, "ccpa_1798_105"));
  assert_null(dlqb_deadlines_rule_for(&d, ""));
  assert_int_equal(dlqb_deadlines_rule_for(&d, "gdpr_art_15x")->months, 1); /* the prefix */
}

static void test_config_default(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  assert_int_equal(c.deadlines.n, 2);
  assert_int_equal(dlqb_deadlines_rule_for(&c.deadlines, "gdpr_art_17")->months, 1);
  assert_int_equal(dlqb_deadlines_rule_for(&c.deadlines, "ccpa_1798_100")->ms, 45 * DAY);
  dlqb_error err;
  assert_int_equal(dlqb_config_set(&c, "deadlines", "", "--deadlines", &err), DLQB_OK);
  assert_int_equal(c.deadlines.n, 0);
  assert_int_equal(dlqb_config_set(&c, "deadlines", "gdpr=1y", "--deadlines", &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "--deadlines: 'gdpr=1y'"));
}

static void test_add_months(void **state) {
  (void)state;
  assert_int_equal(dlqb_add_months(at("2026-11-30T05:09:48Z"), 1), at("2026-12-30T05:09:48Z"));
  assert_int_equal(dlqb_add_months(at("2026-12-15T00:00:00Z"), 1), at("2027-01-15T00:00:00Z"));
  /* a day the month lacks: its last day */
  assert_int_equal(dlqb_add_months(at("2027-01-31T10:00:00Z"), 1), at("2027-02-28T10:00:00Z"));
  assert_int_equal(dlqb_add_months(at("2028-01-31T10:00:00Z"), 1), at("2028-02-29T10:00:00Z"));
  assert_int_equal(dlqb_add_months(at("2026-08-31T23:59:59.999Z"), 1),
                   at("2026-09-30T23:59:59.999Z"));
  assert_int_equal(dlqb_add_months(at("2026-03-31T00:00:00Z"), 12), at("2027-03-31T00:00:00Z"));
  assert_int_equal(dlqb_add_months(at("1969-12-31T12:00:00Z"), 2), at("1970-02-28T12:00:00Z"));
}

static dlqb_item basis(const char *lb) {
  dlqb_item it;
  memset(&it, 0, sizeof it);
  strcpy(it.legal_basis, lb);
  return it;
}

static void test_item_deadline(void **state) {
  (void)state;
  dlqb_deadlines d;
  dlqb_error err;
  assert_int_equal(dlqb_deadlines_parse("gdpr_*=1mo,ccpa_*=45d", &d, &err), DLQB_OK);
  int64_t now = at("2026-12-01T12:00:00Z");
  dlqb_item it = basis("gdpr_art_17");
  it.has_first_seen_at = true;
  it.first_seen_at_ms = at("2026-11-20T12:00:00Z");
  it.has_dlq_at = true;
  it.dlq_at_ms = at("2026-11-30T12:00:00Z");
  dlqb_deadline x = dlqb_item_deadline(&d, &it, now);
  assert_int_equal(x.kind, DLQB_DEADLINE_KNOWN);
  assert_int_equal(x.receipt_ms, it.first_seen_at_ms);
  assert_int_equal(x.due_ms, at("2026-12-20T12:00:00Z"));
  assert_int_equal(x.left_ms, 19 * DAY);
  /* CCPA: 45 days; overdue is negative */
  it = basis("ccpa_1798_105");
  it.has_first_seen_at = true;
  it.first_seen_at_ms = now - 46 * DAY;
  x = dlqb_item_deadline(&d, &it, now);
  assert_int_equal(x.kind, DLQB_DEADLINE_KNOWN);
  assert_int_equal(x.left_ms, -DAY);
  /* no rule for its basis; or no basis */
  it = basis("hipaa");
  it.has_first_seen_at = true;
  assert_int_equal(dlqb_item_deadline(&d, &it, now).kind, DLQB_DEADLINE_NONE);
  it = basis("");
  assert_int_equal(dlqb_item_deadline(&d, &it, now).kind, DLQB_DEADLINE_NONE);
  /* a rule, but no time at all: unknown */
  it = basis("gdpr_art_15");
  assert_int_equal(dlqb_item_deadline(&d, &it, now).kind, DLQB_DEADLINE_UNKNOWN);
}

/* A producer forges first_seen_at in the future to buy time: it is skipped,
 * the earliest usable time counts, and the deadline never moves later than
 * the honest one. */
static void test_forged_receipt(void **state) {
  (void)state;
  dlqb_deadlines d;
  dlqb_error err;
  assert_int_equal(dlqb_deadlines_parse("gdpr_*=1mo", &d, &err), DLQB_OK);
  int64_t now = at("2026-12-01T12:00:00Z");
  dlqb_item it = basis("gdpr_art_17");
  it.has_first_seen_at = true;
  it.first_seen_at_ms = at("9999-12-31T00:00:00Z");
  it.has_timestamp = true;
  it.timestamp_ms = at("2026-11-10T00:00:00Z");
  it.has_dlq_at = true;
  it.dlq_at_ms = at("2026-11-30T00:00:00Z");
  dlqb_deadline x = dlqb_item_deadline(&d, &it, now);
  assert_int_equal(x.kind, DLQB_DEADLINE_KNOWN);
  assert_int_equal(x.receipt_ms, it.timestamp_ms);
  /* within the clock skew: still usable */
  it.first_seen_at_ms = now + 60000;
  it.has_timestamp = false;
  it.has_dlq_at = false;
  x = dlqb_item_deadline(&d, &it, now);
  assert_int_equal(x.receipt_ms, now + 60000);
  /* only future times: unknown, sorted first */
  it.first_seen_at_ms = now + DAY;
  x = dlqb_item_deadline(&d, &it, now);
  assert_int_equal(x.kind, DLQB_DEADLINE_UNKNOWN);
  /* a timestamp property far in the past (year < 0 as epoch ms): unknown,
   * never an overflow */
  it.has_timestamp = true;
  it.timestamp_ms = INT64_MIN / 2;
  x = dlqb_item_deadline(&d, &it, now);
  assert_int_equal(x.kind, DLQB_DEADLINE_UNKNOWN);
}

static void test_cmp(void **state) {
  (void)state;
  dlqb_deadline none = {.kind = DLQB_DEADLINE_NONE}, unk = {.kind = DLQB_DEADLINE_UNKNOWN};
  dlqb_deadline soon = {.kind = DLQB_DEADLINE_KNOWN, .left_ms = -5};
  dlqb_deadline late = {.kind = DLQB_DEADLINE_KNOWN, .left_ms = 100};
  assert_true(dlqb_deadline_cmp(&unk, &soon) < 0);
  assert_true(dlqb_deadline_cmp(&soon, &late) < 0);
  assert_true(dlqb_deadline_cmp(&late, &none) < 0);
  assert_true(dlqb_deadline_cmp(&late, &soon) > 0);
  assert_int_equal(dlqb_deadline_cmp(&none, &none), 0);
  assert_int_equal(dlqb_deadline_cmp(&late, &late), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_rules),    cmocka_unit_test(test_config_default),
      cmocka_unit_test(test_add_months),     cmocka_unit_test(test_item_deadline),
      cmocka_unit_test(test_forged_receipt), cmocka_unit_test(test_cmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

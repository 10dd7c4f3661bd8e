/* Unit tests for the DLQ item view, the operator filters and the rate bucket. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "dlqb/rate.h"
#include "dlqb/select.h"

#define NOW_MS   1796000000000LL       /* 2026-11-30T...Z */
#define LATER_MS (NOW_MS + 86400000LL) /* past every stamp below */
#define HOUR_MS  3600000LL

/* A message's properties with up to 16 headers, built in place. */
typedef struct {
  amqp_basic_properties_t props;
  amqp_table_entry_t entries[16];
} msg;

static void msg_init(msg *m, const char *message_id) {
  memset(m, 0, sizeof *m);
  m->props._flags = AMQP_BASIC_HEADERS_FLAG;
  m->props.headers.entries = m->entries;
  if (message_id != NULL) {
    m->props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    m->props.message_id = amqp_cstring_bytes(message_id);
  }
}

static void add_str(msg *m, const char *key, const char *value) {
  amqp_table_entry_t *e = &m->entries[m->props.headers.num_entries++];
  e->key = amqp_cstring_bytes(key);
  e->value.kind = AMQP_FIELD_KIND_UTF8;
  e->value.value.bytes = amqp_cstring_bytes(value);
}

static void add_i64(msg *m, const char *key, int64_t value) {
  amqp_table_entry_t *e = &m->entries[m->props.headers.num_entries++];
  e->key = amqp_cstring_bytes(key);
  e->value.kind = AMQP_FIELD_KIND_I64;
  e->value.value.i64 = value;
}

static void dlq_item(msg *m, const char *rid, const char *src, const char *basis,
                     const char *last_error, const char *dlq_at) {
  msg_init(m, "msg-1");
  add_str(m, "request_id", rid);
  add_str(m, "source_system", src);
  add_str(m, "legal_basis", basis);
  add_str(m, "action", "deletion");
  add_i64(m, "attempt", 5);
  add_str(m, "last_error", last_error);
  add_str(m, "dlq_reason", "max_attempts");
  if (dlq_at != NULL) add_str(m, "dlq_at", dlq_at);
}

static void test_item_read_full(void **state) {
  (void)state;
  msg m;
  dlq_item(&m, "  req-1 ", "crm", "gdpr_art_17", "rejected by worker: upstream 503",
           "2026-11-30T05:09:48Z");
  add_str(&m, "replay_count", "2"); /* as the management UI sends it */
  dlqb_item it;
  dlqb_item_read(&m.props, &it);
  assert_string_equal(it.message_id, "msg-1");
  assert_string_equal(it.request_id, "req-1"); /* trimmed like the envelope */
  assert_string_equal(it.source_system, "crm");
  assert_string_equal(it.legal_basis, "gdpr_art_17");
  assert_string_equal(it.action, "deletion");
  assert_true(it.has_attempt);
  assert_int_equal(it.attempt, 5);
  assert_int_equal(it.replay_count, 2);
  assert_string_equal(it.last_error, "rejected by worker: upstream 503");
  assert_string_equal(it.dlq_reason, "max_attempts");
  assert_true(it.has_dlq_at);
  int64_t since = 0;
  assert_true(dlqb_item_since(&it, LATER_MS, &since));
  assert_int_equal(since, it.dlq_at_ms);
}

static void test_item_read_lenient(void **state) {
  (void)state;
  msg m;
  msg_init(&m, NULL);
  add_i64(&m, "request_id", 7);       /* wrong type: reads as empty */
  add_str(&m, "attempt", "x1");       /* not a number */
  add_str(&m, "dlq_at", "yesterday"); /* not ISO */
  add_str(&m, "source_system",
          "a\x01"
          "b"); /* control char sanitised */
  dlqb_item it;
  dlqb_item_read(&m.props, &it);
  assert_string_equal(it.request_id, "");
  assert_false(it.has_attempt);
  assert_false(it.has_dlq_at);
  assert_string_equal(it.source_system, "a?b");
  uint64_t age;
  assert_false(dlqb_item_age(&it, NOW_MS, &age));

  dlqb_item none;
  dlqb_item_read(NULL, &none);
  assert_string_equal(none.message_id, "");
}

static void test_item_age_fallbacks(void **state) {
  (void)state;
  msg m;
  msg_init(&m, "x");
  add_str(&m, "first_seen_at", "2026-11-30T00:00:00Z");
  dlqb_item it;
  dlqb_item_read(&m.props, &it);
  int64_t since;
  assert_true(dlqb_item_since(&it, LATER_MS, &since));
  assert_int_equal(since, it.first_seen_at_ms);

  msg_init(&m, "x");
  m.props._flags |= AMQP_BASIC_TIMESTAMP_FLAG;
  m.props.timestamp = 1000;
  dlqb_item_read(&m.props, &it);
  assert_true(dlqb_item_since(&it, LATER_MS, &since));
  assert_int_equal(since, 1000000);

  /* A stamp a little in the future (clock skew) is age 0, not a huge
   * number; further out it is no evidence: the age is unknown. */
  uint64_t age = 99;
  assert_true(dlqb_item_age(&it, 1000000 - DLQB_CLOCK_SKEW_MS, &age));
  assert_int_equal(age, 0);
  assert_false(dlqb_item_age(&it, 1000000 - DLQB_CLOCK_SKEW_MS - 1, &age));
}

static void set_ok(dlqb_select *s, const char *name, const char *value) {
  dlqb_error err;
  assert_int_equal(dlqb_select_set(s, name, value, &err), DLQB_OK);
}

static void set_bad(dlqb_select *s, const char *name, const char *value, const char *want) {
  dlqb_error err = {{0}};
  assert_int_equal(dlqb_select_set(s, name, value, &err), DLQB_EINVAL);
  if (strstr(err.msg, want) == NULL) fail_msg("error '%s' lacks '%s'", err.msg, want);
}

static void test_select_flags(void **state) {
  (void)state;
  dlqb_select s;
  dlqb_select_init(&s);
  assert_false(dlqb_select_given(&s));
  set_ok(&s, "limit", "10");
  assert_false(dlqb_select_given(&s)); /* a limit alone selects nothing */
  assert_int_equal(s.limit, 10);
  set_ok(&s, "reason", "503");
  assert_true(dlqb_select_given(&s));
  assert_true(dlqb_select_is_flag("older-than"));
  assert_true(dlqb_select_is_flag("all"));
  assert_false(dlqb_select_is_flag("rate"));

  set_bad(&s, "limit", "0", "--limit");
  set_bad(&s, "limit", "-3", "--limit");
  set_bad(&s, "limit", "99999999999", "--limit");
  set_bad(&s, "older-than", "5x", "--older-than: ");
  set_bad(&s, "newer-than", "", "--newer-than");
  set_bad(&s, "request-id", "", "non-empty");
  set_bad(&s, "bogus", "1", "unknown");
  char big[400];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  set_bad(&s, "source-system", big, "longer than");
}

static void test_select_validate(void **state) {
  (void)state;
  dlqb_error err;
  dlqb_select s;
  dlqb_select_init(&s);
  set_ok(&s, "all", NULL);
  assert_int_equal(dlqb_select_validate(&s, &err), DLQB_OK);
  set_ok(&s, "request-id", "r");
  assert_int_equal(dlqb_select_validate(&s, &err), DLQB_EINVAL);

  dlqb_select_init(&s);
  set_ok(&s, "older-than", "2h");
  set_ok(&s, "newer-than", "1h");
  assert_int_equal(dlqb_select_validate(&s, &err), DLQB_EINVAL);
  set_ok(&s, "newer-than", "3h");
  assert_int_equal(dlqb_select_validate(&s, &err), DLQB_OK);
}

static dlqb_item item_at(const char *rid, const char *src, const char *basis, const char *err,
                         int64_t dlq_at_ms) {
  char iso[DLQB_ISO_TIME_MAX];
  dlqb_iso_time(dlq_at_ms, iso, sizeof iso);
  msg m;
  dlq_item(&m, rid, src, basis, err, dlq_at_ms >= 0 ? iso : NULL);
  dlqb_item it;
  dlqb_item_read(&m.props, &it);
  return it;
}

static void test_select_match_each_filter(void **state) {
  (void)state;
  dlqb_item a =
      item_at("r1", "crm", "gdpr_art_17", "rejected by worker: upstream 503", NOW_MS - 3 * HOUR_MS);
  dlqb_item b = item_at("r2", "billing", "ccpa_1798_105", "poison: repeated consumer crash",
                        NOW_MS - 10 * 60000);
  dlqb_select s;

  dlqb_select_init(&s);
  set_ok(&s, "all", NULL);
  assert_true(dlqb_select_match(&s, &a, NOW_MS));
  assert_true(dlqb_select_match(&s, &b, NOW_MS));

  dlqb_select_init(&s);
  set_ok(&s, "request-id", "r1");
  assert_true(dlqb_select_match(&s, &a, NOW_MS));
  assert_false(dlqb_select_match(&s, &b, NOW_MS));

  dlqb_select_init(&s);
  set_ok(&s, "source-system", "billing");
  assert_false(dlqb_select_match(&s, &a, NOW_MS));
  assert_true(dlqb_select_match(&s, &b, NOW_MS));

  dlqb_select_init(&s);
  set_ok(&s, "legal-basis", "gdpr_art_17");
  assert_true(dlqb_select_match(&s, &a, NOW_MS));
  assert_false(dlqb_select_match(&s, &b, NOW_MS));

  dlqb_select_init(&s);
  set_ok(&s, "reason", "upstream 5"); /* substring */
  assert_true(dlqb_select_match(&s, &a, NOW_MS));
  assert_false(dlqb_select_match(&s, &b, NOW_MS));

  dlqb_select_init(&s);
  set_ok(&s, "message-id", "msg-1");
  assert_true(dlqb_select_match(&s, &a, NOW_MS));

  /* --group: the item's failure group; another id, another number in the
   * same error text: the same group. */
  char gid[DLQB_GROUP_ID_BUF], upper[DLQB_GROUP_ID_BUF];
  dlqb_group_of(&a, gid, NULL, 0);
  for (size_t i = 0; i < sizeof gid; i++)
    upper[i] = (char)(gid[i] >= 'a' && gid[i] <= 'f' ? gid[i] - 32 : gid[i]);
  dlqb_select_init(&s);
  set_ok(&s, "group", upper);
  assert_true(dlqb_select_given(&s));
  assert_true(dlqb_select_match(&s, &a, NOW_MS));
  assert_false(dlqb_select_match(&s, &b, NOW_MS));
  dlqb_item a2 =
      item_at("r9", "crm", "gdpr_art_15", "rejected by worker: upstream 504", NOW_MS - HOUR_MS);
  assert_true(dlqb_select_match(&s, &a2, NOW_MS));
  dlqb_item a3 =
      item_at("r9", "erp", "gdpr_art_15", "rejected by worker: upstream 504", NOW_MS - HOUR_MS);
  assert_false(dlqb_select_match(&s, &a3, NOW_MS)); /* another source_system */
  dlqb_error err;
  assert_int_equal(dlqb_select_set(&s, "group", "0123", &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "--group: '0123' is not a group id"));
  assert_int_equal(dlqb_select_set(&s, "group", "\x1b[2J0123456", &err), DLQB_EINVAL);
  assert_null(strchr(err.msg, '\x1b'));
  assert_true(dlqb_select_is_flag("group"));

  dlqb_select_init(&s);
  set_ok(&s, "older-than", "1h");
  assert_true(dlqb_select_match(&s, &a, NOW_MS));
  assert_false(dlqb_select_match(&s, &b, NOW_MS));

  dlqb_select_init(&s);
  set_ok(&s, "newer-than", "1h");
  assert_false(dlqb_select_match(&s, &a, NOW_MS));
  assert_true(dlqb_select_match(&s, &b, NOW_MS));

  /* Filters combine with AND. */
  dlqb_select_init(&s);
  set_ok(&s, "source-system", "crm");
  set_ok(&s, "reason", "poison");
  assert_false(dlqb_select_match(&s, &a, NOW_MS));
  assert_false(dlqb_select_match(&s, &b, NOW_MS));
}

static void test_select_age_edges(void **state) {
  (void)state;
  dlqb_item exact = item_at("r", "s", "gdpr_art_15", "x", NOW_MS - HOUR_MS);
  dlqb_item unknown = item_at("r", "s", "gdpr_art_15", "x", -1);
  dlqb_select s;
  dlqb_select_init(&s);
  set_ok(&s, "older-than", "1h");
  assert_false(dlqb_select_match(&s, &exact, NOW_MS)); /* strictly older */
  assert_false(dlqb_select_match(&s, &unknown, NOW_MS));
  dlqb_select_init(&s);
  set_ok(&s, "newer-than", "1h");
  assert_false(dlqb_select_match(&s, &exact, NOW_MS)); /* strictly newer */
  assert_false(dlqb_select_match(&s, &unknown, NOW_MS));
  dlqb_select_init(&s);
  set_ok(&s, "reason", "x");
  assert_true(dlqb_select_match(&s, &unknown, NOW_MS)); /* no age filter: age irrelevant */
}

static void test_rate_holds_its_rate(void **state) {
  (void)state;
  dlqb_rate r;
  dlqb_rate_init(&r, 100.0); /* 10 ms apart */
  int64_t now = 5000000, first = -1, last = 0;
  int taken = 0;
  /* A caller that polls every 3 ms takes 201 tokens: 200 intervals. */
  while (taken < 201) {
    if (dlqb_rate_wait_us(&r, now) == 0) {
      dlqb_rate_take(&r, now);
      if (first < 0) first = now;
      last = now;
      taken++;
    }
    now += 3000;
  }
  double rate = 200.0 / ((double)(last - first) / 1e6);
  assert_true(rate > 95.0 && rate <= 100.0 + 1e-9);
}

static void test_rate_no_burst_after_pause(void **state) {
  (void)state;
  dlqb_rate r;
  dlqb_rate_init(&r, 10.0);
  dlqb_rate_take(&r, 0);
  assert_int_equal(dlqb_rate_wait_us(&r, 50000), 50000);
  /* Ten seconds idle: one token, then the normal spacing again. */
  assert_int_equal(dlqb_rate_wait_us(&r, 10000000), 0);
  dlqb_rate_take(&r, 10000000);
  assert_int_equal(dlqb_rate_wait_us(&r, 10000000), 100000);

  dlqb_rate unlimited;
  dlqb_rate_init(&unlimited, 0);
  dlqb_rate_take(&unlimited, 0);
  assert_int_equal(dlqb_rate_wait_us(&unlimited, 0), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_item_read_full),
      cmocka_unit_test(test_item_read_lenient),
      cmocka_unit_test(test_item_age_fallbacks),
      cmocka_unit_test(test_select_flags),
      cmocka_unit_test(test_select_validate),
      cmocka_unit_test(test_select_match_each_filter),
      cmocka_unit_test(test_select_age_edges),
      cmocka_unit_test(test_rate_holds_its_rate),
      cmocka_unit_test(test_rate_no_burst_after_pause),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

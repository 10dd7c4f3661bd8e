/* Unit tests for failure groups: SHA-256, the error template, group ids and
 * the bounded aggregator (dlqb/group.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/group.h"
#include "dlqb/text.h"

#define NOW_MS  1796000000000LL
#define HOUR_MS 3600000LL

static void hex(const uint8_t *h, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", h[i]);
}

static void test_sha256_vectors(void **state) {
  (void)state;
  uint8_t h[32];
  char out[65];
  dlqb_sha256("", 0, h);
  hex(h, 32, out);
  assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  dlqb_sha256("abc", 3, h);
  hex(h, 32, out);
  assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *two =
      "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes: two blocks */
  dlqb_sha256(two, strlen(two), h);
  hex(h, 32, out);
  assert_string_equal(out, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  static char million[1000000];
  memset(million, 'a', sizeof million);
  dlqb_sha256(million, sizeof million, h);
  hex(h, 32, out);
  assert_string_equal(out, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static const char *norm(const char *text) {
  static char buf[DLQB_GROUP_TEMPLATE_MAX];
  dlqb_group_normalize(buf, sizeof buf, text, strlen(text));
  return buf;
}

static void test_normalize_kinds(void **state) {
  (void)state;
  assert_string_equal(norm("timeout after 5000ms calling crm"), "timeout after <n>ms calling crm");
  assert_string_equal(norm("user 42 not found"), "user <n> not found");
  assert_string_equal(norm("request R-2026-11-1001 failed"), "request <id> failed");
  assert_string_equal(norm("row 3f2504e0-4f89-11d3-9a0c-0305e82c3301 locked"), "row <uuid> locked");
  assert_string_equal(norm("at 2026-11-30T05:09:48.123Z, then 05:09"), "at <time>, then <time>");
  assert_string_equal(norm("on 2026-11-30."), "on <time>.");
  assert_string_equal(norm("commit deadbeef42cafe00 missing"), "commit <hex> missing");
  assert_string_equal(norm("ptr 0x7f00 bad"), "ptr <hex> bad");
  assert_string_equal(norm("mail to jane.doe@example.com bounced"), "mail to <email> bounced");
  assert_string_equal(norm("no such key 'tenant-a' in \"map b\""), "no such key <str> in <str>");
  assert_string_equal(norm("GET /users/123/orders?id=9 -> 503"),
                      "GET /users/<n>/orders?id=<n> -> <n>");
  /* An apostrophe inside a word is not a quote. */
  assert_string_equal(norm("can't reach db"), "can't reach db");
  /* Whitespace collapsed and trimmed, line breaks are spaces. */
  assert_string_equal(norm("  worker error:\n\tdisk   full  "), "worker error: disk full");
  assert_string_equal(norm(""), "");
}

static void test_normalize_same_cause_same_template(void **state) {
  (void)state;
  char a[DLQB_GROUP_TEMPLATE_MAX], b[DLQB_GROUP_TEMPLATE_MAX];
  const char *x = "worker error: crm timeout for R-1001 after 30s at 2026-11-30T05:00:00Z";
  const char *y = "worker error: crm timeout for R-99999 after 31s at 2026-12-01T23:59:59Z";
  dlqb_group_normalize(a, sizeof a, x, strlen(x));
  dlqb_group_normalize(b, sizeof b, y, strlen(y));
  assert_string_equal(a, b);
  const char *z = "worker error: erp timeout for R-1001 after 30s at 2026-11-30T05:00:00Z";
  dlqb_group_normalize(b, sizeof b, z, strlen(z));
  assert_string_not_equal(a, b);
}

static void test_normalize_hostile(void **state) {
  (void)state;
  /* Control characters and invalid UTF-8 are '?': the template is one
   * printable line. */
  const char bad[] = "err\x01or \xff\xfe x\x1b[31m \xc3\x28 ok";
  char out[DLQB_GROUP_TEMPLATE_MAX];
  size_t n = dlqb_group_normalize(out, sizeof out, bad, sizeof bad - 1);
  assert_int_equal(n, strlen(out));
  bool ctl = true;
  assert_true(dlqb_text_utf8_valid(out, n, &ctl));
  assert_false(ctl);
  /* Huge input: only the first DLQB_GROUP_INPUT_MAX bytes count, the
   * template fits its buffer. */
  size_t big = 10u * 1024 * 1024;
  char *huge = malloc(big);
  assert_non_null(huge);
  for (size_t i = 0; i < big; i++) huge[i] = (i % 2) ? ' ' : '7'; /* "7 7 7 ..." grows x2 */
  n = dlqb_group_normalize(out, sizeof out, huge, big);
  assert_true(n < sizeof out);
  assert_int_equal(strlen(out), n);
  /* A NUL in the input is sanitised, not an early end. */
  const char nul[] = "a\0b";
  dlqb_group_normalize(out, sizeof out, nul, 3);
  assert_string_equal(out, "a?b");
  /* A tiny buffer: cut on a piece, NUL-terminated, never past cap. */
  char tiny[6];
  memset(tiny, 'X', sizeof tiny);
  n = dlqb_group_normalize(tiny, sizeof tiny, "abc defgh", 9);
  assert_string_equal(tiny, "abc");
  assert_int_equal(dlqb_group_normalize(tiny, 0, "abc", 3), 0);
  assert_int_equal(dlqb_group_normalize(tiny, sizeof tiny, NULL, 5), 0);
  free(huge);
}

static void item(dlqb_item *it, const char *reason, const char *src, const char *err, int64_t at) {
  memset(it, 0, sizeof *it);
  snprintf(it->dlq_reason, sizeof it->dlq_reason, "%s", reason);
  snprintf(it->source_system, sizeof it->source_system, "%s", src);
  snprintf(it->last_error, sizeof it->last_error, "%s", err);
  if (at != 0) {
    it->has_dlq_at = true;
    it->dlq_at_ms = at;
  }
}

static void test_group_id(void **state) {
  (void)state;
  char a[DLQB_GROUP_ID_BUF], b[DLQB_GROUP_ID_BUF];
  dlqb_item x, y;
  item(&x, "max_attempts", "crm", "worker error: timeout for R-1", NOW_MS);
  item(&y, "max_attempts", "crm", "worker error: timeout for R-2", NOW_MS);
  dlqb_group_of(&x, a, NULL, 0);
  dlqb_group_of(&y, b, NULL, 0);
  assert_int_equal(strlen(a), DLQB_GROUP_ID_LEN);
  assert_true(dlqb_group_id_valid(a));
  assert_string_equal(a, b);
  /* Pinned: the id must not change between builds (the runbook and the
   * console link to it); a change to the rules bumps GROUP_VERSION. */
  char pinned[DLQB_GROUP_ID_BUF];
  dlqb_group_id("max_attempts", "crm", "worker error: timeout for <id>", pinned);
  assert_string_equal(a, pinned);
  uint8_t h[32];
  const char in[] = "dlqb-group-1\0max_attempts\0crm\0worker error: timeout for <id>";
  dlqb_sha256(in, sizeof in, h); /* sizeof: the last NUL too */
  char full[65];
  hex(h, 32, full);
  assert_memory_equal(full, a, DLQB_GROUP_ID_LEN);
  /* Each part counts, and the parts cannot slide into each other. */
  item(&y, "sla_budget", "crm", "worker error: timeout for R-2", NOW_MS);
  dlqb_group_of(&y, b, NULL, 0);
  assert_string_not_equal(a, b);
  item(&y, "max_attempts", "erp", "worker error: timeout for R-2", NOW_MS);
  dlqb_group_of(&y, b, NULL, 0);
  assert_string_not_equal(a, b);
  dlqb_group_id("ab", "c", "", a);
  dlqb_group_id("a", "bc", "", b);
  assert_string_not_equal(a, b);
  assert_false(dlqb_group_id_valid("abc"));
  assert_false(dlqb_group_id_valid("0123456789ag"));
  assert_false(dlqb_group_id_valid("0123456789abc"));
  assert_false(dlqb_group_id_valid(NULL));
  assert_true(dlqb_group_id_valid("0123456789AB"));
}

static void test_groups_aggregate(void **state) {
  (void)state;
  dlqb_groups *g = dlqb_groups_new(0);
  assert_non_null(g);
  assert_int_equal(dlqb_groups_max(g), DLQB_GROUPS_DEFAULT_MAX);
  dlqb_item it;
  char buf[64];
  for (int i = 0; i < 5; i++) {
    snprintf(buf, sizeof buf, "worker error: timeout for R-%d", 1000 + i);
    item(&it, "max_attempts", "crm", buf, NOW_MS - (i + 1) * HOUR_MS);
    dlqb_groups_add(g, &it, NOW_MS);
  }
  for (int i = 0; i < 2; i++) {
    snprintf(buf, sizeof buf, "invalid envelope: attempt '%d'", i);
    item(&it, "invalid_envelope", "erp", buf, 0); /* age unknown */
    dlqb_groups_add(g, &it, NOW_MS);
  }
  dlqb_groups_sort(g);
  assert_int_equal(dlqb_groups_count(g), 2);
  assert_int_equal(dlqb_groups_total(g), 7);
  const dlqb_group *a = dlqb_groups_at(g, 0), *b = dlqb_groups_at(g, 1);
  assert_int_equal(a->count, 5);
  assert_int_equal(a->aged, 5);
  assert_int_equal(a->oldest_age_ms, 5 * HOUR_MS);
  assert_int_equal(a->newest_age_ms, 1 * HOUR_MS);
  assert_string_equal(a->tmpl, "worker error: timeout for <id>");
  assert_string_equal(a->sample, "worker error: timeout for R-1000");
  assert_string_equal(a->dlq_reason, "max_attempts");
  assert_string_equal(a->source_system, "crm");
  assert_int_equal(b->count, 2);
  assert_int_equal(b->aged, 0);
  assert_string_equal(b->tmpl, "invalid envelope: attempt <str>");
  assert_null(dlqb_groups_at(g, 2));
  assert_int_equal(dlqb_groups_other(g)->count, 0);
  /* find follows the sort, either case */
  assert_ptr_equal(dlqb_groups_find(g, a->id), a);
  char upper[DLQB_GROUP_ID_BUF];
  for (size_t i = 0; i < DLQB_GROUP_ID_BUF; i++)
    upper[i] = (char)(a->id[i] >= 'a' && a->id[i] <= 'f' ? a->id[i] - 32 : a->id[i]);
  assert_ptr_equal(dlqb_groups_find(g, upper), a);
  assert_null(dlqb_groups_find(g, "000000000000"));
  assert_null(dlqb_groups_find(g, "other"));
  dlqb_groups_free(g);
  dlqb_groups_free(NULL);
}

/* The worst day: a million items whose error texts are all distinct even
 * after normalisation. The aggregator keeps its cap and lumps the rest. */
static void test_groups_hostile_million(void **state) {
  (void)state;
  dlqb_groups *g = dlqb_groups_new(100);
  assert_non_null(g);
  dlqb_item it;
  item(&it, "max_attempts", "crm", "", NOW_MS - HOUR_MS);
  uint64_t n = 1000000;
  for (uint64_t i = 0; i < n; i++) {
    /* letters only, so no placeholder merges them */
    char w[16];
    uint64_t v = i;
    size_t k = 0;
    do {
      w[k++] = (char)('a' + v % 26);
      v /= 26;
    } while (v > 0);
    w[k] = '\0';
    snprintf(it.last_error, sizeof it.last_error, "boom %s", w);
    it.dlq_at_ms = NOW_MS - (int64_t)(i % 1000) * 1000;
    dlqb_groups_add(g, &it, NOW_MS);
  }
  assert_int_equal(dlqb_groups_count(g), 100);
  assert_int_equal(dlqb_groups_total(g), n);
  const dlqb_group *o = dlqb_groups_other(g);
  assert_string_equal(o->id, "other");
  assert_int_equal(o->count, n - 100);
  assert_int_equal(o->oldest_age_ms, 999000);
  assert_int_equal(o->newest_age_ms, 0);
  uint64_t sum = o->count;
  for (size_t i = 0; i < dlqb_groups_count(g); i++) sum += dlqb_groups_at(g, i)->count;
  assert_int_equal(sum, n);
  /* A known group past the cap still counts in its group. */
  snprintf(it.last_error, sizeof it.last_error, "boom a");
  dlqb_groups_add(g, &it, NOW_MS);
  dlqb_groups_sort(g);
  assert_int_equal(dlqb_groups_at(g, 0)->count, 2);
  assert_string_equal(dlqb_groups_at(g, 0)->sample, "boom a");
  dlqb_groups_free(g);
  g = dlqb_groups_new(SIZE_MAX);
  assert_non_null(g);
  assert_int_equal(dlqb_groups_max(g), DLQB_GROUPS_HARD_MAX);
  dlqb_groups_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256_vectors),
      cmocka_unit_test(test_normalize_kinds),
      cmocka_unit_test(test_normalize_same_cause_same_template),
      cmocka_unit_test(test_normalize_hostile),
      cmocka_unit_test(test_group_id),
      cmocka_unit_test(test_groups_aggregate),
      cmocka_unit_test(test_groups_hostile_million),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

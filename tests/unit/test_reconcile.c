/* Unit tests of the DLQ/audit-trail reconciliation: counting hops into and
 * out of the DLQ per message_id against a queue snapshot, and forgetting
 * ids that left (the table's removal must keep every other id findable). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/reconcile.h"

/* A hop record as the audit log holds it (the fields reconcile reads). */
static void hop(dlqb_reconcile *r, const char *event, const char *id, const char *from,
                const char *to) {
  char line[512];
  int n = snprintf(line, sizeof line,
                   "{\"v\":1,\"time\":\"2026-11-30T10:00:00.000Z\",\"event\":\"%s\","
                   "\"writer\":\"bridge-1:42\",\"message_id\":\"%s\",\"request_id\":\"R-%s\","
                   "\"from\":\"%s\",\"to\":\"%s\",\"mac\":\"00\"}",
                   event, id, id, from, to);
  assert_true(n > 0 && (size_t)n < sizeof line);
  assert_true(dlqb_reconcile_line(r, line, (size_t)n));
}

typedef struct {
  const char *id;
  dlqb_reconcile_entry found;
  char message_id[129], request_id[300]; /* the entry's strings live during the call only */
  int seen;
} lookup;

static void find_one(void *ctx, const dlqb_reconcile_entry *e) {
  lookup *l = ctx;
  if (strcmp(e->message_id, l->id) == 0) {
    l->found = *e;
    snprintf(l->message_id, sizeof l->message_id, "%s", e->message_id);
    snprintf(l->request_id, sizeof l->request_id, "%s", e->request_id);
    l->seen++;
  }
}

static void mark_seen(void *ctx, const dlqb_reconcile_entry *e) {
  char *seen = ctx;
  int i = atoi(e->message_id + 1);
  assert_true(e->message_id[0] == 'm' && i >= 0 && i < 5000);
  assert_int_equal(e->net, 1);
  seen[i]++;
}

static lookup entry(const dlqb_reconcile *r, const char *id) {
  lookup l = {.id = id};
  dlqb_reconcile_each(r, find_one, &l);
  assert_true(l.seen <= 1);
  return l;
}

static void test_kinds_of_entries(void **state) {
  (void)state;
  dlqb_reconcile *r = dlqb_reconcile_new();
  assert_non_null(r);
  dlqb_error err;
  /* The queue snapshot: msg-1 (recorded), msg-4 (never recorded), msg-5 twice. */
  assert_int_equal(dlqb_reconcile_present(r, "msg-1", "R-msg-1", &err), DLQB_OK);
  assert_int_equal(dlqb_reconcile_present(r, "msg-4", "", &err), DLQB_OK);
  assert_int_equal(dlqb_reconcile_present(r, "msg-5", "R-msg-5", &err), DLQB_OK);
  assert_int_equal(dlqb_reconcile_present(r, "msg-5", "R-msg-5", &err), DLQB_OK);
  /* The log. */
  hop(r, "retry_scheduled", "msg-1", "dsr.failed", "dsr.retry.1s"); /* elsewhere: ignored */
  hop(r, "dead_lettered", "msg-1", "dsr.failed", "dsr.dlq.manual");
  hop(r, "dead_lettered", "msg-2", "dsr.failed", "dsr.dlq.manual");
  hop(r, "replayed", "msg-2", "dsr.dlq.manual", "dsr.work");        /* left: forgotten */
  hop(r, "poison", "msg-3", "dsr.failed", "dsr.dlq.manual");        /* missing from the queue */
  hop(r, "dead_lettered", "msg-5", "dsr.failed", "dsr.dlq.manual"); /* a copy more than recorded */
  hop(r, "resolved", "msg-6", "dsr.dlq.manual", "");                /* never recorded in: no-op */

  lookup l1 = entry(r, "msg-1");
  assert_int_equal(l1.seen, 1);
  assert_int_equal(l1.found.present, 1);
  assert_int_equal(l1.found.net, 1);
  assert_int_equal(l1.found.entered, 1);
  assert_string_equal(l1.found.last_event, "dead_lettered");
  assert_string_equal(l1.found.last_writer, "bridge-1:42");
  assert_int_equal(entry(r, "msg-2").seen, 0);
  lookup l3 = entry(r, "msg-3");
  assert_int_equal(l3.found.present, 0);
  assert_int_equal(l3.found.net, 1);
  assert_string_equal(l3.request_id, "R-msg-3");
  assert_string_equal(l3.found.last_event, "poison");
  lookup l4 = entry(r, "msg-4");
  assert_int_equal(l4.found.present, 1);
  assert_int_equal(l4.found.entered, 0);
  assert_string_equal(l4.found.last_time, "");
  lookup l5 = entry(r, "msg-5");
  assert_int_equal(l5.found.present, 2);
  assert_int_equal(l5.found.net, 1);
  assert_int_equal(entry(r, "msg-6").seen, 0);
  assert_int_equal(dlqb_reconcile_size(r), 4);

  /* A present id that leaves stays (it is in the snapshot). */
  assert_string_equal(entry(r, "msg-1").found.last_out_time, "");
  hop(r, "replayed", "msg-1", "dsr.dlq.manual", "dsr.work");
  assert_int_equal(entry(r, "msg-1").found.net, 0);
  assert_string_equal(entry(r, "msg-1").found.last_out_time, "2026-11-30T10:00:00.000Z");
  assert_int_equal(dlqb_reconcile_size(r), 4);
  dlqb_reconcile_free(r);
}

/* Many ids in and out in an interleaved order: after removals (which shift
 * colliding entries back) every remaining id must still be found, which
 * the final "out" hops check by emptying the table exactly. */
static void test_removal_keeps_the_rest_findable(void **state) {
  (void)state;
  dlqb_reconcile *r = dlqb_reconcile_new();
  assert_non_null(r);
  char id[32];
  for (int i = 0; i < 5000; i++) {
    snprintf(id, sizeof id, "m%d", i);
    hop(r, "dead_lettered", id, "dsr.failed", "dsr.dlq.manual");
  }
  assert_int_equal(dlqb_reconcile_size(r), 5000);
  for (int i = 0; i < 5000; i += 3) {
    snprintf(id, sizeof id, "m%d", i);
    hop(r, "replayed", id, "dsr.dlq.manual", "dsr.work");
  }
  assert_int_equal(dlqb_reconcile_size(r), 5000 - 1667);
  /* Every remaining id once, with its own text (one read of the table:
   * each visit reads the texts back from the spill file). */
  static char seen_ids[5000];
  memset(seen_ids, 0, sizeof seen_ids);
  assert_true(dlqb_reconcile_each(r, mark_seen, seen_ids));
  for (int i = 0; i < 5000; i++) assert_int_equal(seen_ids[i], i % 3 == 0 ? 0 : 1);
  for (int i = 0; i < 5000; i++) {
    if (i % 3 == 0) continue;
    snprintf(id, sizeof id, "m%d", i);
    hop(r, "escalated", id, "dsr.dlq.manual", "compliance_review");
  }
  assert_int_equal(dlqb_reconcile_size(r), 0);
  dlqb_reconcile_free(r);
}

/* A table reserved for the queue's depth in the middle of filling it (it
 * moves every entry into a larger table) still finds each entry, and a
 * reserve smaller than what it holds changes nothing. */
static void test_reserve_keeps_entries(void **state) {
  (void)state;
  dlqb_reconcile *r = dlqb_reconcile_new();
  assert_non_null(r);
  dlqb_error err = {{0}};
  char id[32];
  for (int i = 0; i < 3000; i++) {
    snprintf(id, sizeof id, "m%d", i);
    if (i == 1000) assert_true(dlqb_reconcile_reserve(r, 100000));
    if (i == 2000) assert_true(dlqb_reconcile_reserve(r, 10));
    hop(r, "dead_lettered", id, "dsr.failed", "dsr.dlq.manual");
  }
  assert_true(dlqb_reconcile_reserve(r, 0));
  assert_int_equal(dlqb_reconcile_size(r), 3000);
  static char seen_ids[5000];
  memset(seen_ids, 0, sizeof seen_ids);
  assert_true(dlqb_reconcile_each(r, mark_seen, seen_ids));
  for (int i = 0; i < 3000; i++) assert_int_equal(seen_ids[i], 1);
  /* Each id is one entry: its sighting in the queue counts on it. */
  assert_int_equal(dlqb_reconcile_present(r, "m2999", "req", &err), DLQB_OK);
  assert_int_equal(dlqb_reconcile_size(r), 3000);
  assert_int_equal(entry(r, "m2999").found.present, 1);
  dlqb_reconcile_free(r);
}

/* Lines that are not hops of a message into or out of the DLQ change
 * nothing, garbage included (the command gives only verified lines, but
 * the function must not trust them). */
static void test_other_lines_change_nothing(void **state) {
  (void)state;
  dlqb_reconcile *r = dlqb_reconcile_new();
  assert_non_null(r);
  const char *lines[] = {
      "{\"event\":\"chain_start\",\"writer\":\"dsr.dlq.manual\"}",
      "{\"event\":\"dead_lettered\",\"message_id\":\"\",\"from\":\"dsr.failed\",\"to\":\"dsr.dlq.manual\"}",
      "{\"event\":\"dead_lettered\",\"message_id\":7,\"to\":\"dsr.dlq.manual\"}",
      "not json but dsr.dlq.manual",
      "{\"message_id\":\"x\",\"from\":\"dsr.dlq.manual\",\"to\":\"dsr.dlq.manual\"}",
      "",
  };
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
    assert_true(dlqb_reconcile_line(r, lines[i], strlen(lines[i])));
  assert_int_equal(dlqb_reconcile_size(r), 0);
  dlqb_reconcile_free(r);
}

/* compliance_review: escalations in, decisions out, and a claim's
 * re-publish (review to review) neither. */
static void test_review_queue(void **state) {
  (void)state;
  dlqb_reconcile *r = dlqb_reconcile_new_for("compliance_review");
  assert_non_null(r);
  dlqb_error err;
  assert_int_equal(dlqb_reconcile_present(r, "msg-2", "R-msg-2", &err), DLQB_OK);
  hop(r, "dead_lettered", "msg-1", "dsr.failed", "dsr.dlq.manual"); /* the DLQ's: ignored */
  hop(r, "escalated", "msg-1", "dsr.dlq.manual", "compliance_review");
  hop(r, "escalated", "msg-2", "dsr.dlq.manual", "compliance_review");
  hop(r, "claimed", "msg-2", "compliance_review", "compliance_review");
  hop(r, "claimed", "msg-2", "compliance_review", "compliance_review");
  hop(r, "escalated", "msg-3", "dsr.dlq.manual", "compliance_review");
  hop(r, "decided_return", "msg-3", "compliance_review", "dsr.dlq.manual");
  lookup l1 = entry(r, "msg-1"); /* recorded in, not there: missing */
  assert_int_equal(l1.found.present, 0);
  assert_int_equal(l1.found.net, 1);
  assert_string_equal(l1.found.last_event, "escalated");
  lookup l2 = entry(r, "msg-2"); /* claimed twice, still one copy expected */
  assert_int_equal(l2.found.present, 1);
  assert_int_equal(l2.found.net, 1);
  assert_int_equal(entry(r, "msg-3").seen, 0); /* decided: forgotten */
  assert_int_equal(dlqb_reconcile_size(r), 2);
  dlqb_reconcile_free(r);
}

typedef struct {
  int n;
  char ids[8][32];
} notable_list;

static void add_notable(void *ctx, const dlqb_reconcile_entry *e) {
  notable_list *l = ctx;
  assert_true(l->n < 8);
  snprintf(l->ids[l->n++], sizeof l->ids[0], "%s", e->message_id);
}

static bool listed(const notable_list *l, const char *id) {
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->ids[i], id) == 0) return true;
  return false;
}

/* What reconcile reports, alone: the in-order entry is not visited, and
 * the count of what the trail puts there leaves out hops after the read. */
static void test_notable_entries_and_the_recorded_count(void **state) {
  (void)state;
  dlqb_reconcile *r = dlqb_reconcile_new();
  dlqb_error err;
  assert_int_equal(dlqb_reconcile_present(r, "in-order", "R-1", &err), DLQB_OK);
  assert_int_equal(dlqb_reconcile_present(r, "unrecorded", "R-2", &err), DLQB_OK);
  dlqb_reconcile_read_at(r, "2026-11-30T10:00:00.000Z"); /* the hops' own time: after */
  hop(r, "dead_lettered", "in-order", "dsr.failed", "dsr.dlq.manual");
  hop(r, "dead_lettered", "missing", "dsr.failed", "dsr.dlq.manual");
  assert_int_equal(dlqb_reconcile_recorded(r), 0); /* both recorded at the read */
  dlqb_reconcile_read_at(r, "2026-11-30T11:00:00.000Z");
  hop(r, "dead_lettered", "later", "dsr.failed", "dsr.dlq.manual");
  /* "later" came before this read time: it counts, the earlier two keep
   * their flag from their own hop. */
  assert_int_equal(dlqb_reconcile_recorded(r), 1);
  notable_list l = {0};
  assert_true(dlqb_reconcile_each_notable(r, add_notable, &l));
  assert_int_equal(l.n, 3);
  assert_true(listed(&l, "unrecorded"));
  assert_true(listed(&l, "missing"));
  assert_true(listed(&l, "later"));
  assert_false(listed(&l, "in-order"));
  dlqb_reconcile_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_notable_entries_and_the_recorded_count),
      cmocka_unit_test(test_review_queue),
      cmocka_unit_test(test_kinds_of_entries),
      cmocka_unit_test(test_removal_keeps_the_rest_findable),
      cmocka_unit_test(test_reserve_keeps_entries),
      cmocka_unit_test(test_other_lines_change_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

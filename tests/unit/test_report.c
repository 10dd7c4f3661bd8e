/* Unit tests of the audit report: the state of every request from trail
 * records, queue items and the completion ledger (each state, the period's
 * bounds, counts that add up), and its signature (a changed byte fails, an
 * unknown or revoked key fails, public keys alone suffice). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/calendar.h"
#include "dlqb/deadline.h"
#include "dlqb/names.h"
#include "dlqb/report.h"

#define FROM "2026-11-01T00:00:00.000Z"
#define TO   "2026-11-30T23:59:59.999Z"

static int64_t ms(const char *iso) {
  int64_t v = 0;
  assert_int_equal(dlqb_iso_time_parse(iso, strlen(iso), &v), DLQB_OK);
  return v;
}

static dlqb_report *new_report(void) {
  dlqb_report *r = dlqb_report_new(ms(FROM), ms(TO));
  assert_non_null(r);
  return r;
}

/* A hop record as the audit log holds it (the members the report reads). */
static void hop(dlqb_report *r, const char *time, const char *event, const char *rid,
                const char *from, const char *to, const char *reason) {
  char line[1024];
  int n = snprintf(line, sizeof line,
                   "{\"v\":2,\"chain\":\"c\",\"seq\":1,\"prev\":\"p\",\"time\":\"%s\","
                   "\"event\":\"%s\",\"writer\":\"bridge-1:42\",\"key\":\"k\","
                   "\"message_id\":\"msg-%s\",\"request_id\":\"%s\",\"source_system\":\"crm\","
                   "\"legal_basis\":\"gdpr_art_17\",\"attempt\":1,\"reason\":\"%s\",\"cause\":\"\","
                   "\"from\":\"%s\",\"to\":\"%s\",\"actor\":\"alice\",\"broker_user\":\"ops\"}",
                   time, event, rid, rid, reason, from, to);
  assert_true(n > 0 && (size_t)n < sizeof line);
  assert_true(dlqb_report_line(r, line, (size_t)n));
}

static void item(dlqb_report *r, const char *queue, const char *rid, const char *owner) {
  char mid[64];
  snprintf(mid, sizeof mid, "msg-%s", rid);
  dlqb_error err;
  assert_int_equal(dlqb_report_item(r, queue, mid, rid, "crm", owner, &err), DLQB_OK);
}

static const dlqb_report_entry *find(const dlqb_report *r, const char *rid) {
  size_t n = 0;
  const dlqb_report_entry *es = dlqb_report_entries(r, &n);
  const dlqb_report_entry *hit = NULL;
  for (size_t i = 0; i < n; i++)
    if (strcmp(es[i].request_id, rid) == 0) {
      assert_null(hit); /* one entry per request */
      hit = &es[i];
    }
  return hit;
}

#define T1 "2026-11-10T10:00:00.000Z"
#define T2 "2026-11-10T11:00:00.000Z"
#define T3 "2026-11-10T12:00:00.000Z"

static void test_every_state_and_counts_add_up(void **state) {
  (void)state;
  dlqb_report *r = new_report();
  dlqb_ledger *done = dlqb_ledger_new(), *unv = dlqb_ledger_new();
  dlqb_error err;
  /* The queues as read. */
  item(r, DLQB_Q_REVIEW, "R-claimed", "bob");
  item(r, DLQB_Q_REVIEW, "R-unclaimed", "");
  item(r, DLQB_Q_DLQ, "R-dlq", "");
  item(r, DLQB_Q_DLQ, "R-done", "");    /* a stale copy of a completed one */
  item(r, DLQB_Q_DLQ, "R-outside", ""); /* no hop in the period */
  item(r, "dsr.work", "R-ignored", ""); /* not a queue the report reads */
  dlqb_report_queue_read(r, DLQB_Q_DLQ, ms("2026-12-01T00:00:00.000Z"), 0);
  dlqb_report_queue_read(r, DLQB_Q_REVIEW, ms("2026-12-01T00:00:00.000Z"), 0);
  /* The trail. */
  hop(r, T1, "retry_scheduled", "R-done", "dsr.failed", "dsr.retry.1s", "timeout");
  hop(r, T2, "dead_lettered", "R-done", "dsr.failed", DLQB_Q_DLQ, "timeout");
  hop(r, T1, "escalated", "R-claimed", DLQB_Q_DLQ, DLQB_Q_REVIEW, "");
  hop(r, T2, "claimed", "R-claimed", DLQB_Q_REVIEW, DLQB_Q_REVIEW, "");
  hop(r, T1, "escalated", "R-unclaimed", DLQB_Q_DLQ, DLQB_Q_REVIEW, "");
  hop(r, T1, "dead_lettered", "R-dlq", "dsr.failed", DLQB_Q_DLQ, "bad");
  hop(r, T1, "dead_lettered", "R-res", "dsr.failed", DLQB_Q_DLQ, "bad");
  hop(r, T2, "resolved", "R-res", DLQB_Q_DLQ, "", "erased by hand, OPS-43\x1b[31m");
  hop(r, T1, "retry_scheduled", "R-wait", "dsr.failed", "dsr.retry.5s", "timeout");
  hop(r, T1, "dead_lettered", "R-replayed", "dsr.failed", DLQB_Q_DLQ, "x");
  hop(r, T2, "replayed", "R-replayed", DLQB_Q_DLQ, DLQB_Q_WORK, "");
  hop(r, T1, "dead_lettered", "R-gone", "dsr.failed", DLQB_Q_DLQ, "x");
  hop(r, T1, "retry_scheduled", "R-unv", "dsr.failed", "dsr.retry.1s", "x");
  hop(r, T1, "skipped_complete", "R-cut", DLQB_Q_DLQ, "", "");
  /* Outside the period: before it, and only after it. */
  hop(r, "2026-10-31T23:59:59.999Z", "dead_lettered", "R-old", "dsr.failed", DLQB_Q_DLQ, "");
  hop(r, "2026-12-01T00:00:00.000Z", "dead_lettered", "R-late", "dsr.failed", DLQB_Q_DLQ, "");
  /* In it, and its story goes on after it: the state is the last one. */
  hop(r, TO, "dead_lettered", "R-story", "dsr.failed", DLQB_Q_DLQ, "");
  hop(r, "2026-12-01T00:00:00.000Z", "decided_resolve", "R-story", DLQB_Q_REVIEW, "", "done");
  /* Lines that are not hops change nothing. */
  const char *start =
      "{\"v\":2,\"chain\":\"c\",\"seq\":0,\"time\":\"" T1 "\",\"event\":\"chain_start\"}";
  assert_true(dlqb_report_line(r, start, strlen(start)));
  assert_true(dlqb_report_line(r, "not json", 8));
  assert_int_equal(dlqb_ledger_add(done, "R-done", "crm", &err), DLQB_OK);
  assert_int_equal(dlqb_ledger_add(done, "R-done", "other", &err), DLQB_OK);
  assert_int_equal(dlqb_ledger_add(done, "R-wait", "other-system", &err), DLQB_OK); /* not it */
  assert_int_equal(dlqb_ledger_add(unv, "R-unv", "crm", &err), DLQB_OK);
  dlqb_report_ledger(r, done, unv);

  dlqb_report_counts k;
  assert_int_equal(dlqb_report_finish(r, &k, &err), DLQB_OK);
  const dlqb_report_entry *e;
  assert_non_null(e = find(r, "R-done"));
  assert_int_equal(e->state, DLQB_RS_COMPLETED);
  assert_non_null(strstr(e->detail, "a copy is still in dsr.dlq.manual"));
  assert_int_equal(e->hops, 2);
  assert_non_null(e = find(r, "R-claimed"));
  assert_int_equal(e->state, DLQB_RS_IN_REVIEW);
  assert_string_equal(e->owner, "bob");
  assert_string_equal(e->last_event, "claimed");
  assert_non_null(e = find(r, "R-unclaimed"));
  assert_int_equal(e->state, DLQB_RS_IN_REVIEW);
  assert_string_equal(e->owner, "");
  assert_non_null(e = find(r, "R-dlq"));
  assert_int_equal(e->state, DLQB_RS_IN_DLQ);
  assert_string_equal(e->queue, DLQB_Q_DLQ);
  assert_non_null(e = find(r, "R-res"));
  assert_int_equal(e->state, DLQB_RS_RESOLVED);
  assert_string_equal(e->note, "erased by hand, OPS-43?[31m"); /* the escape byte sanitised */
  assert_non_null(e = find(r, "R-wait"));
  assert_int_equal(e->state, DLQB_RS_WAITING);
  assert_string_equal(e->queue, "dsr.retry.5s");
  assert_non_null(e = find(r, "R-replayed"));
  assert_int_equal(e->state, DLQB_RS_WAITING);
  assert_string_equal(e->queue, DLQB_Q_WORK);
  assert_non_null(e = find(r, "R-gone"));
  assert_int_equal(e->state, DLQB_RS_UNKNOWN);
  assert_non_null(strstr(e->detail, "not found there: removed outside dlq-bridge"));
  assert_non_null(e = find(r, "R-unv"));
  assert_int_equal(e->state, DLQB_RS_WAITING);
  assert_true(e->unverified_completion);
  assert_non_null(strstr(e->detail, "not in completion_writers"));
  assert_non_null(e = find(r, "R-cut"));
  assert_int_equal(e->state, DLQB_RS_UNKNOWN);
  assert_non_null(strstr(e->detail, "removed by replay as complete"));
  assert_non_null(e = find(r, "R-story"));
  assert_int_equal(e->state, DLQB_RS_RESOLVED);
  assert_string_equal(e->note, "done");
  assert_null(find(r, "R-old"));
  assert_null(find(r, "R-late"));
  assert_null(find(r, "R-outside"));
  assert_null(find(r, "R-ignored"));

  assert_int_equal(k.state[DLQB_RS_COMPLETED], 1);
  assert_int_equal(k.state[DLQB_RS_IN_REVIEW], 2);
  assert_int_equal(k.state[DLQB_RS_IN_DLQ], 1);
  assert_int_equal(k.state[DLQB_RS_RESOLVED], 2);
  assert_int_equal(k.state[DLQB_RS_WAITING], 3);
  assert_int_equal(k.state[DLQB_RS_UNKNOWN], 2);
  assert_int_equal(k.total, 11);
  unsigned long sum = 0;
  for (int s = 0; s < DLQB_RS__COUNT; s++) sum += k.state[s];
  assert_int_equal(sum, k.total);
  size_t n = 0;
  const dlqb_report_entry *es = dlqb_report_entries(r, &n);
  assert_int_equal(n, k.total);
  for (size_t i = 1; i < n; i++) assert_true(strcmp(es[i - 1].request_id, es[i].request_id) < 0);
  assert_int_equal(k.outside, 1);
  assert_int_equal(k.unverified, 1);
  dlqb_report_free(r);
  dlqb_ledger_free(done);
  dlqb_ledger_free(unv);
}

/* Not found in a queue the trail puts it in: why depends on how the read went. */
static void test_unknown_names_why(void **state) {
  (void)state;
  dlqb_report *r = new_report();
  dlqb_report_queue_read(r, DLQB_Q_DLQ, ms(T2), 1); /* another consumer, read at T2 */
  dlqb_report_queue_read(r, DLQB_Q_REVIEW, ms(T2), 0);
  hop(r, T1, "dead_lettered", "R-held", "dsr.failed", DLQB_Q_DLQ, "");
  hop(r, T3, "dead_lettered", "R-after", "dsr.failed", DLQB_Q_DLQ, "");
  hop(r, T1, "escalated", "R-review", DLQB_Q_DLQ, DLQB_Q_REVIEW, "");
  /* Read in the DLQ at T2, and resolved at T3: the trail is newer. */
  item(r, DLQB_Q_DLQ, "R-left", "");
  hop(r, T1, "dead_lettered", "R-left", "dsr.failed", DLQB_Q_DLQ, "");
  hop(r, T3, "resolved", "R-left", DLQB_Q_DLQ, "", "late note");
  /* Read in the DLQ, and its last hop (before the read) put it there. */
  item(r, DLQB_Q_DLQ, "R-stays", "");
  hop(r, T1, "decided_return", "R-stays", DLQB_Q_REVIEW, DLQB_Q_DLQ, "");
  dlqb_report_counts k;
  dlqb_error err;
  assert_int_equal(dlqb_report_finish(r, &k, &err), DLQB_OK);
  assert_int_equal(k.state[DLQB_RS_UNKNOWN], 3);
  assert_non_null(strstr(find(r, "R-held")->detail, "held by another consumer"));
  assert_non_null(strstr(find(r, "R-after")->detail, "after that queue was read"));
  assert_non_null(strstr(find(r, "R-review")->detail, "removed outside dlq-bridge"));
  assert_int_equal(find(r, "R-left")->state, DLQB_RS_RESOLVED);
  assert_string_equal(find(r, "R-left")->note, "late note");
  assert_int_equal(find(r, "R-stays")->state, DLQB_RS_IN_DLQ);
  assert_int_equal(k.total, 5);
  dlqb_report_free(r);
}

/* A record without request_id (an invalid task) stands alone under its
 * message_id; two tasks with one request_id from two systems are two. */
static void test_request_identity(void **state) {
  (void)state;
  dlqb_report *r = new_report();
  dlqb_error err;
  const char *inv =
      "{\"time\":\"" T1 "\",\"event\":\"invalid_envelope\",\"message_id\":\"m-inv\","
      "\"request_id\":\"\",\"source_system\":\"\",\"from\":\"dsr.failed\",\"to\":\"" DLQB_Q_DLQ
      "\"}";
  assert_true(dlqb_report_line(r, inv, strlen(inv)));
  assert_int_equal(dlqb_report_item(r, DLQB_Q_DLQ, "m-inv", "", "", "", &err), DLQB_OK);
  const char *a =
      "{\"time\":\"" T1 "\",\"event\":\"dead_lettered\",\"message_id\":\"m1\","
      "\"request_id\":\"R-1\",\"source_system\":\"crm\",\"from\":\"x\",\"to\":\"" DLQB_Q_DLQ "\"}";
  const char *b =
      "{\"time\":\"" T1 "\",\"event\":\"dead_lettered\",\"message_id\":\"m2\","
      "\"request_id\":\"R-1\",\"source_system\":\"erp\",\"from\":\"x\",\"to\":\"" DLQB_Q_DLQ "\"}";
  assert_true(dlqb_report_line(r, a, strlen(a)));
  assert_true(dlqb_report_line(r, b, strlen(b)));
  dlqb_report_counts k;
  assert_int_equal(dlqb_report_finish(r, &k, &err), DLQB_OK);
  assert_int_equal(k.total, 3);
  size_t n = 0;
  const dlqb_report_entry *es = dlqb_report_entries(r, &n);
  assert_int_equal(n, 3);
  assert_string_equal(es[0].request_id, "");
  assert_string_equal(es[0].message_id, "m-inv");
  assert_int_equal(es[0].state, DLQB_RS_IN_DLQ);
  assert_string_equal(es[1].source_system, "crm");
  assert_string_equal(es[2].source_system, "erp");
  assert_int_equal(es[1].state, DLQB_RS_UNKNOWN);
  dlqb_report_free(r);
}

/* ---- the statutory side: response times per legal basis and action ---- */

#define DAY   INT64_C(86400000)
#define RULES "gdpr_*=1mo,ccpa_*=45d"
#define NOW   "2026-12-16T00:00:00.000Z"

/* A hop with the members the response times read: legal_basis, action
 * and, on a first failure, received_at (NULL: none). */
static void shop(dlqb_report *r, const char *time, const char *rid, const char *basis,
                 const char *action, const char *received_at, const char *event, const char *to) {
  char line[1024], rec[160] = "";
  if (received_at != NULL)
    snprintf(rec, sizeof rec, ",\"received_at\":\"%s\",\"received_from\":\"first_seen_at\"",
             received_at);
  int n = snprintf(line, sizeof line,
                   "{\"v\":2,\"chain\":\"c\",\"seq\":1,\"prev\":\"p\",\"time\":\"%s\","
                   "\"event\":\"%s\",\"writer\":\"bridge-1:42\",\"key\":\"k\","
                   "\"message_id\":\"msg-%s\",\"request_id\":\"%s\",\"source_system\":\"crm\","
                   "\"legal_basis\":\"%s\",\"action\":\"%s\",\"attempt\":1,\"reason\":\"\","
                   "\"cause\":\"\",\"from\":\"dsr.failed\",\"to\":\"%s\",\"actor\":\"system\","
                   "\"broker_user\":\"b\"%s}",
                   time, event, rid, rid, basis, action, to, rec);
  assert_true(n > 0 && (size_t)n < sizeof line);
  assert_true(dlqb_report_line(r, line, (size_t)n));
}

/* A request first seen at `received` (a dead-letter then) and completed
 * `took` ms later (the ledger's time for it; INT64_MAX: not completed). */
static void done_after(dlqb_report *r, dlqb_ledger *l, const char *rid, const char *basis,
                       const char *action, const char *received, int64_t took) {
  shop(r, received, rid, basis, action, NULL, "dead_lettered", DLQB_Q_DLQ);
  dlqb_error err;
  if (took != INT64_MAX)
    assert_int_equal(dlqb_ledger_add_at(l, rid, "crm", ms(received) + took, &err), DLQB_OK);
}

static dlqb_report *statutory_report(dlqb_ledger **l) {
  static dlqb_deadlines d;
  dlqb_error err;
  assert_int_equal(dlqb_deadlines_parse(RULES, &d, &err), DLQB_OK);
  dlqb_report *r = new_report();
  dlqb_report_deadlines(r, &d, ms(NOW));
  dlqb_report_queue_read(r, DLQB_Q_DLQ, ms(NOW), 0);
  dlqb_report_queue_read(r, DLQB_Q_REVIEW, ms(NOW), 0);
  assert_non_null(*l = dlqb_ledger_new());
  dlqb_report_ledger(r, *l, NULL);
  return r;
}

static const dlqb_report_group *group(const dlqb_report *r, const char *basis, const char *action) {
  size_t n = 0;
  const dlqb_report_group *g = dlqb_report_groups(r, &n);
  for (size_t i = 0; i < n; i++)
    if (strcmp(g[i].legal_basis, basis) == 0 && strcmp(g[i].action, action) == 0) return &g[i];
  fail_msg("no group %s %s", basis, action);
  return NULL;
}

/* The median of an odd count is its middle, of an even count the mean of
 * its two middles; the mean is the mean; groups are per basis and action,
 * sorted. */
static void test_response_median_and_mean(void **state) {
  (void)state;
  dlqb_ledger *l;
  dlqb_report *r = statutory_report(&l);
  done_after(r, l, "G-1", "gdpr_art_17", "deletion", "2026-11-01T00:00:00.000Z", 10 * DAY);
  done_after(r, l, "G-2", "gdpr_art_17", "deletion", "2026-11-02T00:00:00.000Z", 2 * DAY);
  done_after(r, l, "G-3", "gdpr_art_17", "deletion", "2026-11-03T00:00:00.000Z", 5 * DAY);
  done_after(r, l, "C-1", "ccpa_1798_100", "access", "2026-11-04T00:00:00.000Z", 20 * DAY);
  done_after(r, l, "C-2", "ccpa_1798_100", "access", "2026-11-05T00:00:00.000Z", 1 * DAY);
  done_after(r, l, "C-3", "ccpa_1798_100", "access", "2026-11-06T00:00:00.000Z", 10 * DAY);
  done_after(r, l, "C-4", "ccpa_1798_100", "access", "2026-11-07T00:00:00.000Z", 3 * DAY);
  /* Another action under the same basis is a group of its own. */
  done_after(r, l, "G-A", "gdpr_art_17", "access", "2026-11-08T00:00:00.000Z", DAY / 2);
  dlqb_report_counts k;
  dlqb_error err;
  assert_int_equal(dlqb_report_finish(r, &k, &err), DLQB_OK);
  size_t n = 0;
  const dlqb_report_group *gs = dlqb_report_groups(r, &n);
  assert_int_equal(n, 3);
  assert_string_equal(gs[0].legal_basis, "ccpa_1798_100");
  assert_string_equal(gs[1].action, "access");
  assert_string_equal(gs[2].action, "deletion");
  const dlqb_report_group *g = group(r, "gdpr_art_17", "deletion");
  assert_int_equal(g->requests, 3);
  assert_int_equal(g->completed, 3);
  assert_int_equal(g->measured, 3);
  assert_int_equal(g->median_ms, 5 * DAY);    /* 2, 5, 10 */
  assert_int_equal(g->mean_ms, 17 * DAY / 3); /* 489,600,000 ms: 5.67 days */
  assert_non_null(g->rule);
  assert_int_equal(g->rule->months, 1);
  g = group(r, "ccpa_1798_100", "access");
  assert_int_equal(g->measured, 4);
  assert_int_equal(g->median_ms, 13 * DAY / 2); /* 1, 3, 10, 20: (3 + 10) / 2 */
  assert_int_equal(g->mean_ms, 34 * DAY / 4);
  assert_int_equal(g->resp[DLQB_RESP_ON_TIME], 4);
  assert_int_equal(g->resp[DLQB_RESP_LATE], 0);
  g = group(r, "gdpr_art_17", "access");
  assert_int_equal(g->median_ms, DAY / 2);
  assert_int_equal(g->mean_ms, DAY / 2);
  const dlqb_report_entry *e = find(r, "C-1");
  assert_int_equal(e->response, DLQB_RESP_ON_TIME);
  assert_int_equal(e->elapsed_ms, 20 * DAY);
  assert_int_equal(e->received_ms, ms("2026-11-04T00:00:00.000Z"));
  assert_string_equal(e->received_from, "trail");
  assert_string_equal(e->closed_by, "completion");
  assert_true(e->has_due);
  assert_int_equal(e->due_ms, ms("2026-12-19T00:00:00.000Z"));
  dlqb_report_free(r);
  dlqb_ledger_free(l);
}

/* Done exactly at the deadline is on time, a millisecond later is late;
 * open at the deadline is not yet past it, a millisecond after is. A month
 * is a calendar month (31 October + 1 month = 30 November). */
static void test_deadline_edges(void **state) {
  (void)state;
  dlqb_ledger *l;
  dlqb_report *r = statutory_report(&l);
  dlqb_error err;
  const char *oct31 = "2026-10-31T10:00:00.000Z";
  const int64_t due = ms("2026-11-30T10:00:00.000Z");
  shop(r, "2026-11-02T00:00:00.000Z", "G-on", "gdpr_art_17", "deletion", oct31, "dead_lettered",
       DLQB_Q_DLQ);
  shop(r, "2026-11-02T00:00:00.000Z", "G-late", "gdpr_art_17", "deletion", oct31, "dead_lettered",
       DLQB_Q_DLQ);
  assert_int_equal(dlqb_ledger_add_at(l, "G-on", "crm", due, &err), DLQB_OK);
  assert_int_equal(dlqb_ledger_add_at(l, "G-late", "crm", due + 1, &err), DLQB_OK);
  /* CCPA, 45 days: due 2026-12-16T00:00 = NOW for the first, 1 ms before NOW for the second. */
  shop(r, "2026-11-01T00:00:00.000Z", "C-open", "ccpa_1798_105", "deletion", NULL, "dead_lettered",
       DLQB_Q_DLQ);
  shop(r, "2026-11-01T00:00:00.000Z", "C-overdue", "ccpa_1798_105", "deletion",
       "2026-10-31T23:59:59.999Z", "dead_lettered", DLQB_Q_DLQ);
  dlqb_report_counts k;
  assert_int_equal(dlqb_report_finish(r, &k, &err), DLQB_OK);
  const dlqb_report_entry *e = find(r, "G-on");
  assert_int_equal(e->due_ms, due);
  assert_int_equal(e->received_ms, ms(oct31)); /* the claim, before the period */
  assert_string_equal(e->received_from, "first_seen_at");
  assert_int_equal(e->response, DLQB_RESP_ON_TIME);
  assert_int_equal(find(r, "G-late")->response, DLQB_RESP_LATE);
  e = find(r, "C-open");
  assert_int_equal(e->due_ms, ms(NOW));
  assert_int_equal(e->response, DLQB_RESP_OPEN);
  assert_false(e->closed);
  assert_int_equal(e->elapsed_ms, 45 * DAY); /* open this long */
  assert_int_equal(find(r, "C-overdue")->response, DLQB_RESP_OPEN_LATE);
  const dlqb_report_group *g = group(r, "gdpr_art_17", "deletion");
  assert_int_equal(g->resp[DLQB_RESP_ON_TIME], 1);
  assert_int_equal(g->resp[DLQB_RESP_LATE], 1);
  g = group(r, "ccpa_1798_105", "deletion");
  assert_int_equal(g->resp[DLQB_RESP_OPEN], 1);
  assert_int_equal(g->resp[DLQB_RESP_OPEN_LATE], 1);
  assert_int_equal(g->measured, 0); /* nothing closed: no median */
  assert_int_equal(g->completed, 0);
  dlqb_report_free(r);
  dlqb_ledger_free(l);
}

/* Two clocks that disagree: a completion before its receipt is named, kept
 * out of the median and mean, and never a negative number of days; an open
 * request received "after now" is open for 0 days. */
static void test_clock_going_backwards(void **state) {
  (void)state;
  dlqb_ledger *l;
  dlqb_report *r = statutory_report(&l);
  done_after(r, l, "G-ok", "gdpr_art_17", "deletion", "2026-11-10T00:00:00.000Z", 4 * DAY);
  done_after(r, l, "G-back", "gdpr_art_17", "deletion", "2026-11-10T00:00:00.000Z", -3600000);
  shop(r, "2026-11-20T00:00:00.000Z", "G-future", "gdpr_art_17", "deletion", NULL, "dead_lettered",
       DLQB_Q_DLQ);
  dlqb_report_counts k;
  dlqb_error err;
  /* The report made "before" that record: a writer's clock was ahead. */
  static dlqb_deadlines d;
  assert_int_equal(dlqb_deadlines_parse(RULES, &d, &err), DLQB_OK);
  dlqb_report_deadlines(r, &d, ms("2026-11-19T00:00:00.000Z"));
  assert_int_equal(dlqb_report_finish(r, &k, &err), DLQB_OK);
  const dlqb_report_entry *e = find(r, "G-back");
  assert_int_equal(e->response, DLQB_RESP_CLOCK);
  assert_true(e->closed);
  assert_int_equal(e->elapsed_ms, -3600000); /* said, as a gap: never counted */
  e = find(r, "G-future");
  assert_int_equal(e->response, DLQB_RESP_OPEN);
  assert_int_equal(e->elapsed_ms, 0);
  const dlqb_report_group *g = group(r, "gdpr_art_17", "deletion");
  assert_int_equal(g->requests, 3);
  assert_int_equal(g->completed, 2);
  assert_int_equal(g->measured, 1);
  assert_int_equal(g->median_ms, 4 * DAY);
  assert_int_equal(g->mean_ms, 4 * DAY);
  assert_int_equal(g->resp[DLQB_RESP_CLOCK], 1);
  assert_int_equal(g->resp[DLQB_RESP_LATE], 0);
  dlqb_report_free(r);
  dlqb_ledger_free(l);
}

/* Where receipt and close come from: the earliest received_at of the
 * request's records, bounded by each record's own time, records before
 * the period included; a resolution closes at its hop; a completion
 * without a usable time is said, not guessed; a basis without a rule (a
 * profile without legal_basis) has no deadline. */
static void test_receipt_and_close_sources(void **state) {
  (void)state;
  dlqb_ledger *l;
  dlqb_report *r = statutory_report(&l);
  dlqb_error err;
  /* Seen before the period (its first failure), then in it. */
  shop(r, "2026-10-20T00:00:00.000Z", "R-pre", "gdpr_art_15", "access", "2026-10-19T00:00:00.000Z",
       "retry_scheduled", "dsr.retry.1s");
  shop(r, "2026-11-05T00:00:00.000Z", "R-pre", "gdpr_art_15", "access", NULL, "dead_lettered",
       DLQB_Q_DLQ);
  /* A received_at later than its own record's time is no receipt. */
  shop(r, "2026-11-05T00:00:00.000Z", "R-odd", "gdpr_art_15", "access", "2026-11-06T00:00:00.000Z",
       "dead_lettered", DLQB_Q_DLQ);
  /* Resolved by hand: closed at that hop. */
  shop(r, "2026-11-05T00:00:00.000Z", "R-res", "gdpr_art_15", "access", NULL, "dead_lettered",
       DLQB_Q_DLQ);
  char line[512];
  int n =
      snprintf(line, sizeof line,
               "{\"time\":\"2026-11-07T12:00:00.000Z\",\"event\":\"resolved\","
               "\"message_id\":\"msg-R-res\",\"request_id\":\"R-res\","
               "\"source_system\":\"crm\",\"legal_basis\":\"gdpr_art_15\",\"action\":\"access\","
               "\"from\":\"%s\",\"to\":\"\",\"reason\":\"erased by hand\"}",
               DLQB_Q_DLQ);
  assert_true(dlqb_report_line(r, line, (size_t)n));
  /* Completed, but the entry had no time; another with a time in the future. */
  shop(r, "2026-11-05T00:00:00.000Z", "R-notime", "gdpr_art_15", "access", NULL, "dead_lettered",
       DLQB_Q_DLQ);
  assert_int_equal(dlqb_ledger_add(l, "R-notime", "crm", &err), DLQB_OK);
  shop(r, "2026-11-05T00:00:00.000Z", "R-ahead", "gdpr_art_15", "access", NULL, "dead_lettered",
       DLQB_Q_DLQ);
  assert_int_equal(dlqb_ledger_add_at(l, "R-ahead", "crm", ms(NOW) + 3600000, &err), DLQB_OK);
  /* No legal basis (another profile's records): no deadline, still timed. */
  shop(r, "2026-11-05T00:00:00.000Z", "R-nobasis", "", "", NULL, "dead_lettered", DLQB_Q_DLQ);
  assert_int_equal(dlqb_ledger_add_at(l, "R-nobasis", "crm", ms("2026-11-06T00:00:00.000Z"), &err),
                   DLQB_OK);
  /* Completed in the period but outside the report: seen only before it,
   * and never in the trail (it never failed). */
  shop(r, "2026-10-20T00:00:00.000Z", "R-before", "gdpr_art_15", "access", NULL, "dead_lettered",
       DLQB_Q_DLQ);
  assert_int_equal(dlqb_ledger_add_at(l, "R-before", "crm", ms("2026-11-03T00:00:00.000Z"), &err),
                   DLQB_OK);
  assert_int_equal(dlqb_ledger_add_at(l, "R-never", "crm", ms("2026-11-03T00:00:00.000Z"), &err),
                   DLQB_OK);
  assert_int_equal(
      dlqb_ledger_add_at(l, "R-never-old", "crm", ms("2026-10-03T00:00:00.000Z"), &err), DLQB_OK);
  assert_int_equal(dlqb_ledger_add(l, "R-never-notime", "crm", &err), DLQB_OK);
  dlqb_report_counts k;
  assert_int_equal(dlqb_report_finish(r, &k, &err), DLQB_OK);
  const dlqb_report_entry *e = find(r, "R-pre");
  assert_int_equal(e->received_ms, ms("2026-10-19T00:00:00.000Z"));
  assert_string_equal(e->received_from, "first_seen_at");
  assert_string_equal(e->legal_basis, "gdpr_art_15");
  assert_string_equal(e->action, "access");
  assert_int_equal(e->response, DLQB_RESP_OPEN_LATE); /* due 19 November */
  e = find(r, "R-odd");
  assert_int_equal(e->received_ms, ms("2026-11-05T00:00:00.000Z"));
  assert_string_equal(e->received_from, "trail");
  e = find(r, "R-res");
  assert_true(e->closed);
  assert_string_equal(e->closed_by, "resolution");
  assert_int_equal(e->closed_ms, ms("2026-11-07T12:00:00.000Z"));
  assert_int_equal(e->elapsed_ms, 2 * DAY + DAY / 2);
  assert_int_equal(e->response, DLQB_RESP_ON_TIME);
  assert_int_equal(find(r, "R-notime")->response, DLQB_RESP_NO_TIME);
  assert_int_equal(find(r, "R-ahead")->response, DLQB_RESP_NO_TIME);
  e = find(r, "R-nobasis");
  assert_false(e->has_due);
  assert_int_equal(e->response, DLQB_RESP_CLOSED);
  assert_int_equal(e->elapsed_ms, DAY);
  assert_null(group(r, "", "")->rule);
  const dlqb_report_group *g = group(r, "gdpr_art_15", "access");
  assert_int_equal(g->requests, 5); /* R-pre, R-odd, R-res, R-notime, R-ahead */
  assert_int_equal(g->completed, 2);
  assert_int_equal(g->resolved, 1);
  assert_int_equal(g->measured, 1);
  assert_int_equal(g->resp[DLQB_RESP_NO_TIME], 2);
  assert_int_equal(g->received, 4); /* received in the period: all but R-pre */
  assert_null(find(r, "R-before"));
  assert_int_equal(k.completed_before_period, 1);
  assert_int_equal(k.completed_never_in_trail, 1);
  assert_int_equal(k.completed_never_in_trail_no_time, 1);
  dlqb_report_free(r);
  dlqb_ledger_free(l);
}

/* ---- the signature ---- */

typedef struct {
  char dir[64], keys[128], priv[128];
  EVP_PKEY *key, *other;
  char key_id[DLQB_AUDIT_KEY_ID_HEX + 1], other_id[DLQB_AUDIT_KEY_ID_HEX + 1];
} keys_world;

static void write_pub(const char *path, EVP_PKEY *k) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(PEM_write_PUBKEY(f, k), 1);
  fclose(f);
}

/* Key ids as the writer computes them: load the private key from a file. */
static EVP_PKEY *new_key(keys_world *w, const char *name, char *id) {
  EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  assert_non_null(k);
  snprintf(w->priv, sizeof w->priv, "%s/%s.key", w->dir, name);
  int fd = open(w->priv, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  assert_int_equal(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
  fclose(f);
  EVP_PKEY_free(k);
  EVP_PKEY *loaded = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_audit_key_load(w->priv, &loaded, id, &err), DLQB_OK);
  return loaded;
}

static int keys_setup(void **state) {
  keys_world *w = calloc(1, sizeof *w);
  if (w == NULL) return -1;
  snprintf(w->dir, sizeof w->dir, "/tmp/dlqb-report-XXXXXX");
  if (mkdtemp(w->dir) == NULL) return -1;
  snprintf(w->keys, sizeof w->keys, "%s/keys", w->dir);
  if (mkdir(w->keys, 0700) != 0) return -1;
  w->key = new_key(w, "writer", w->key_id);
  w->other = new_key(w, "other", w->other_id);
  *state = w;
  return 0;
}

static int keys_teardown(void **state) {
  keys_world *w = *state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", w->dir);
  int rc = system(cmd);
  EVP_PKEY_free(w->key);
  EVP_PKEY_free(w->other);
  free(w);
  return rc == 0 ? 0 : -1;
}

/* A ring as an auditor has it: public key files only. */
static dlqb_audit_keyring *ring_of(keys_world *w, const char *file, EVP_PKEY *k) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", w->keys, file);
  write_pub(path, k);
  dlqb_audit_keyring *ring = dlqb_audit_keyring_new();
  assert_non_null(ring);
  dlqb_error err;
  assert_int_equal(dlqb_audit_keyring_add(ring, w->keys, &err), DLQB_OK);
  unlink(path);
  return ring;
}

static void sign(keys_world *w, EVP_PKEY *k, const char *id, const char *body, bool json,
                 char **out, size_t *len) {
  (void)w;
  dlqb_error err;
  assert_int_equal(dlqb_report_sign(k, id, body, strlen(body), json, out, len, &err), DLQB_OK);
}

static char *json_body(const char *id) {
  static char body[512];
  snprintf(body, sizeof body,
           "{\"report\":\"dlq-bridge audit report\",\"key\":\"%s\",\"counts\":{\"total\":2},"
           "\"requests\":[{\"request_id\":\"R-\\\"1\",\"state\":\"completed\"}]}",
           id);
  return body;
}

#define TEXT_BODY "dlq-bridge audit report (format 1)\ntotal      2 = 1 + 1\nR-1 completed\n"

static void test_signed_report_verifies_with_public_keys_alone(void **state) {
  keys_world *w = *state;
  dlqb_audit_keyring *ring = ring_of(w, "writer.pem", w->key);
  for (int json = 0; json < 2; json++) {
    char *out = NULL;
    size_t len = 0;
    sign(w, w->key, w->key_id, json ? json_body(w->key_id) : TEXT_BODY, json, &out, &len);
    dlqb_report_check chk;
    dlqb_error err;
    assert_int_equal(dlqb_report_verify(ring, out, len, &chk, &err), DLQB_OK);
    assert_int_equal(chk.json, json);
    assert_string_equal(chk.key_id, w->key_id);
    assert_non_null(strstr(chk.key_file, "writer.pem"));
    assert_int_equal(out[len - 1], '\n');
    if (!json) {
      assert_memory_equal(out, TEXT_BODY, strlen(TEXT_BODY)); /* the body as written */
      assert_int_equal(chk.body_len, strlen(TEXT_BODY));
    }
    /* Every byte, changed: fails. */
    for (size_t i = 0; i < len; i++) {
      out[i] ^= 0x01;
      dlqb_status st = dlqb_report_verify(ring, out, len, &chk, &err);
      if (st == DLQB_OK)
        fprintf(stderr, "byte %zu of %s changed and still verified\n", i, json ? "json" : "text");
      assert_int_equal(st, DLQB_EINVAL);
      out[i] ^= 0x01;
    }
    /* Cut short, or something appended: fails. */
    assert_int_equal(dlqb_report_verify(ring, out, len - 2, &chk, &err), DLQB_EINVAL);
    char *longer = malloc(len + 8);
    memcpy(longer, out, len);
    memcpy(longer + len, "extra\n", 6);
    assert_int_equal(dlqb_report_verify(ring, longer, len + 6, &chk, &err), DLQB_EINVAL);
    free(longer);
    assert_int_equal(dlqb_report_verify(ring, out, 0, &chk, &err), DLQB_EINVAL);
    free(out);
  }
  dlqb_audit_keyring_free(ring);
}

static void test_unknown_or_revoked_key_fails(void **state) {
  keys_world *w = *state;
  char *out = NULL;
  size_t len = 0;
  dlqb_report_check chk;
  dlqb_error err;
  /* Signed by a key the auditor was not given. */
  dlqb_audit_keyring *ring = ring_of(w, "writer.pem", w->key);
  sign(w, w->other, w->other_id, TEXT_BODY, false, &out, &len);
  assert_int_equal(dlqb_report_verify(ring, out, len, &chk, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "not among the public keys"));
  /* Re-signed by another key under the first one's id: the signature fails. */
  char *forged = strdup(out);
  memcpy(forged + len - 1 - DLQB_AUDIT_SIG_HEX - 1 - DLQB_AUDIT_KEY_ID_HEX, w->key_id,
         DLQB_AUDIT_KEY_ID_HEX);
  assert_int_equal(dlqb_report_verify(ring, forged, len, &chk, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "does not match"));
  free(forged);
  free(out);
  dlqb_audit_keyring_free(ring);
  /* Signed by a key revoked since. */
  ring = ring_of(w, "writer.pem.revoked", w->key);
  for (int json = 0; json < 2; json++) {
    sign(w, w->key, w->key_id, json ? json_body(w->key_id) : TEXT_BODY, json, &out, &len);
    assert_int_equal(dlqb_report_verify(ring, out, len, &chk, &err), DLQB_EINVAL);
    assert_non_null(strstr(err.msg, "revoked"));
    free(out);
  }
  dlqb_audit_keyring_free(ring);
}

/* What the signer refuses: a JSON body on several lines, text without its
 * last newline. */
static void test_sign_refuses_malformed_bodies(void **state) {
  keys_world *w = *state;
  char *out = NULL;
  size_t len = 0;
  dlqb_error err;
  assert_int_equal(
      dlqb_report_sign(w->key, w->key_id, "{\"a\":1,\n\"b\":2}", 14, true, &out, &len, &err),
      DLQB_EINVAL);
  assert_int_equal(dlqb_report_sign(w->key, w->key_id, "no newline", 10, false, &out, &len, &err),
                   DLQB_EINVAL);
  assert_null(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_state_and_counts_add_up),
      cmocka_unit_test(test_unknown_names_why),
      cmocka_unit_test(test_request_identity),
      cmocka_unit_test(test_response_median_and_mean),
      cmocka_unit_test(test_deadline_edges),
      cmocka_unit_test(test_clock_going_backwards),
      cmocka_unit_test(test_receipt_and_close_sources),
      cmocka_unit_test_setup_teardown(test_signed_report_verifies_with_public_keys_alone,
                                      keys_setup, keys_teardown),
      cmocka_unit_test_setup_teardown(test_unknown_or_revoked_key_fails, keys_setup, keys_teardown),
      cmocka_unit_test_setup_teardown(test_sign_refuses_malformed_bodies, keys_setup,
                                      keys_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

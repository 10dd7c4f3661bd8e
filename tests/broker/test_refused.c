/* Messages the broker will not take back from the bridge as they are: a
 * user_id of another broker user (RabbitMQ closes the channel with 406), a
 * header table that no longer fits frame_max once the bridge adds its own,
 * and a retry queue that is missing (basic.return). Each must end in the
 * DLQ through the bridge, saying why, while the tasks around it go on:
 * nothing stops, nothing is duplicated, the bridge never reconnects. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bulk.h"
#include "flow.h"

#define WAIT_MS   20000
#define FRAME_MAX 131072 /* the bridge's and the broker's default */

/* A failure report as a worker publishes it to dsr.dlx: a valid envelope,
 * worker_error, and whatever extra headers and properties the case adds. */
typedef struct {
  amqp_table_entry_t h[8];
  amqp_basic_properties_t p;
} report;

static void make_report(report *r, const char *id) {
  memset(r, 0, sizeof *r);
  r->h[0] = th_str_entry("request_id", id);
  r->h[1] = th_str_entry("source_system", "crm");
  r->h[2] = th_str_entry("legal_basis", "gdpr_art_17");
  r->h[3] = th_str_entry("action", "deletion");
  r->h[4] = th_str_entry("worker_error", "upstream 503");
  r->p._flags =
      AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
  r->p.delivery_mode = 2;
  r->p.message_id = th_bytes(id);
  r->p.headers.entries = r->h;
  r->p.headers.num_entries = 5;
}

static void publish_report(fx_case *t, report *r) {
  assert_int_equal(th_publish_props(t->conn, "dsr.dlx", "", &r->p, th_bytes("{}")), 0);
}

static void publish_plain(fx_case *t, const char *id) {
  report r;
  make_report(&r, id);
  publish_report(t, &r);
}

/* Takes the whole DLQ and checks it holds each id exactly once. Returns the
 * copy of `special` (the caller releases it) for a closer look. */
static th_msg *expect_dlq_once_each(fx_case *t, const char *const *ids, size_t n,
                                    const char *special) {
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", (long)n, WAIT_MS));
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.failed", 0, WAIT_MS));
  int seen[8] = {0};
  th_msg *found = NULL;
  for (;;) {
    th_msg *m = calloc(1, sizeof *m);
    assert_non_null(m);
    th_msg_init(m);
    int got = th_get(t->conn, "dsr.dlq.manual", m);
    assert_true(got >= 0);
    const char *id = got == 1 ? th_msg_str(m, "request_id") : NULL;
    if (got == 1) {
      assert_non_null(id);
      size_t i = 0;
      while (i < n && strcmp(ids[i], id) != 0) i++;
      if (i == n) fail_msg("unexpected %s in the DLQ", id);
      seen[i]++;
    }
    if (got == 1 && strcmp(id, special) == 0 && found == NULL) {
      found = m;
      continue;
    }
    th_msg_release(m);
    free(m);
    if (got == 0) break;
  }
  assert_non_null(found);
  for (size_t i = 0; i < n; i++)
    if (seen[i] != 1) fail_msg("%s is in the DLQ %d times", ids[i], seen[i]);
  return found;
}

static void expect_no_reconnect(fx_case *t) {
  FX_CHECK(t, th_bridge_running(&t->bridges[0]));
  assert_int_equal(fx_count_in_file(t->bridges[0].log_path, "disconnected"), 0);
}

/* The test's guest connection may set user_id=guest (the broker checks it
 * against the publishing connection); the bridge logs in as another user,
 * so it may not send that user_id on. */
static void test_foreign_user_id(void **state) {
  fx_case *t = *state;
  const th_env *e = th_env_get();
  char user[TH_NAME_MAX + 8], path[TH_PATH_MAX], url[TH_URL_MAX + 64], env_url[TH_URL_MAX + 96];
  assert_true(th_fmt(user, sizeof user, "%s-b", t->vhost.name));
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", user));
  int st = th_mgmt("PUT", path, "{\"password\":\"bridge-pw\",\"tags\":\"\"}", NULL);
  assert_true(st == 201 || st == 204);
  assert_true(th_fmt(path, sizeof path, "/api/permissions/%s/%s", t->vhost.name, user));
  st = th_mgmt("PUT", path, "{\"configure\":\".*\",\"write\":\".*\",\"read\":\".*\"}", NULL);
  assert_true(st == 201 || st == 204);
  assert_true(th_fmt(url, sizeof url, "amqp://%s:bridge-pw@127.0.0.1:%d/%s", user, e->amqp_port,
                     t->vhost.name));
  assert_true(th_fmt(env_url, sizeof env_url, "DLQ_BRIDGE_URL=%s", url));
  const char *const env[] = {env_url, "DLQ_BRIDGE_MAX_ATTEMPTS=1", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);

  publish_plain(t, "before");
  report r;
  make_report(&r, "foreign");
  r.p._flags |= AMQP_BASIC_USER_ID_FLAG;
  r.p.user_id = th_bytes("guest");
  publish_report(t, &r);
  publish_plain(t, "after");

  static const char *const ids[] = {"before", "foreign", "after"};
  th_msg *m = expect_dlq_once_each(t, ids, 3, "foreign");
  FX_HDR_STR_EQ(m, "original_user_id", "guest");
  FX_HDR_STR_EQ(m, "dlq_reason", "max_attempts"); /* routed as any other task */
  th_msg_release(m);
  free(m);
  expect_no_reconnect(t);
  assert_int_equal(fx_stop_bridges(t), 0);
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", user));
  th_mgmt("DELETE", path, NULL, NULL);
}

/* Size on the wire of a table of string headers (AMQP 0-9-1): the test's
 * own arithmetic, so that the bridge's is checked, not reused. */
static size_t strings_table_size(const amqp_table_entry_t *h, int n) {
  size_t s = 4;
  for (int i = 0; i < n; i++) s += 1 + h[i].key.len + 1 + 4 + h[i].value.value.bytes.len;
  return s;
}

static void test_headers_that_no_longer_fit(void **state) {
  fx_case *t = *state;
  const char *const env[] = {"DLQ_BRIDGE_MAX_ATTEMPTS=1", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);

  report r;
  make_report(&r, "oversized");
  /* A junk header that leaves the content header 64 bytes short of
   * frame_max: the broker takes it, but not once the bridge adds its
   * last_error, attempt, dlq_reason and dlq_at (over 100 bytes). */
  size_t fixed = 8 /* frame */ + 14 /* class, weight, size, flags */ + 1 /* delivery mode */ + 1 +
                 strlen("oversized") /* message_id */ + strings_table_size(r.h, 5) + 1 +
                 strlen("x-junk") + 1 + 4;
  size_t junk_len = FRAME_MAX - fixed - 64;
  char *junk = malloc(junk_len + 1);
  assert_non_null(junk);
  memset(junk, 'j', junk_len);
  junk[junk_len] = '\0';
  r.h[5] = th_str_entry("x-junk", junk);
  r.p.headers.num_entries = 6;
  publish_plain(t, "before");
  publish_report(t, &r);
  publish_plain(t, "after");
  free(junk);

  static const char *const ids[] = {"before", "oversized", "after"};
  th_msg *m = expect_dlq_once_each(t, ids, 3, "oversized");
  FX_HDR_STR_EQ(m, "dlq_reason", "unpublishable");
  const char *why = th_msg_str(m, "last_error");
  assert_non_null(why);
  assert_non_null(strstr(why, "frame_max"));
  assert_null(th_msg_find(m, "x-junk"));
  int64_t dropped = -1;
  assert_true(th_msg_int(m, "dropped_headers", &dropped));
  assert_int_equal(dropped, 1);
  FX_HDR_STR_EQ(m, "request_id", "oversized"); /* the envelope is kept */
  th_msg_release(m);
  free(m);
  expect_no_reconnect(t);
  assert_int_equal(fx_stop_bridges(t), 0);
}

/* A retry queue deleted under a running bridge: every publish to it comes
 * back (basic.return); each task goes to the DLQ instead, saying so. */
static void test_missing_retry_queue(void **state) {
  fx_case *t = *state;
  const char *const env[] = {"DLQ_BRIDGE_RETRY_DELAYS=1s", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  char path[TH_PATH_MAX];
  assert_true(th_fmt(path, sizeof path, "/api/queues/%s/dsr.retry.1s", t->vhost.name));
  int st = th_mgmt("DELETE", path, NULL, NULL);
  assert_true(st == 204 || st == 200);

  static const char *const ids[] = {"r1", "r2", "r3"};
  for (size_t i = 0; i < 3; i++) publish_plain(t, ids[i]);
  th_msg *m = expect_dlq_once_each(t, ids, 3, "r2");
  FX_HDR_STR_EQ(m, "dlq_reason", "unpublishable");
  const char *why = th_msg_str(m, "last_error");
  assert_non_null(why);
  assert_non_null(strstr(why, "dsr.retry.1s"));
  th_msg_release(m);
  free(m);
  expect_no_reconnect(t);
  assert_int_equal(fx_stop_bridges(t), 0);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_foreign_user_id),
      FX_TEST(test_headers_that_no_longer_fit),
      FX_TEST(test_missing_retry_queue),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

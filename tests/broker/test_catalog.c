/* The catalog (dlqb/catalog.h): looks answer from it without holding the
 * queue, so several at once each see every item; what the bridge's own
 * movers do keeps it right; what is done behind the bridge's back (items
 * published straight into the DLQ, taken with the management UI's Get with
 * ack) is said by every look until a verifying pass, the daemon's own
 * within its stated time, has corrected it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bulk.h"
#include "flow.h"

#define DEPTH         3000
#define BILLING_EVERY 100
#define BILLING       (DEPTH / BILLING_EVERY)
#define LOOKS         5
#define CMD_TIMEOUT_S 300
/* The daemon's check in this test (--catalog-check-interval) and what the
 * docs promise from it: a difference is corrected within two checks and a
 * pass over the queue. */
#define CHECK_S   1
#define NOTICE_MS 30000

static int64_t loaded_at;

static void fill(void *ctx, size_t i, th_bulk_item *it) {
  (void)ctx;
  snprintf(it->id, sizeof it->id, "c-%06zu", i);
  snprintf(it->source_system, sizeof it->source_system, "%s",
           i % BILLING_EVERY == BILLING_EVERY / 2 ? "billing" : "crm");
  it->dlq_at_ms = loaded_at - 3600000;
}

static void fill_late(void *ctx, size_t i, th_bulk_item *it) {
  (void)ctx;
  snprintf(it->id, sizeof it->id, "late-%zu", i);
  snprintf(it->source_system, sizeof it->source_system, "crm");
  it->dlq_at_ms = loaded_at;
}

/* Starts `dlq-bridge args` on t's vhost, its output readable from the
 * returned stream. */
static FILE *start(fx_case *t, const char *args) {
  char cmd[2048];
  assert_true(
      th_fmt(cmd, sizeof cmd, "timeout %d '%s' %s", CMD_TIMEOUT_S, th_env_get()->bridge_bin, args));
  setenv("DLQ_BRIDGE_URL", t->vhost.url, 1);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  return p;
}

/* Everything p (from start) writes, malloc'd and NUL-terminated; p is
 * closed and its exit status goes to *status (-1: killed by a signal). */
static char *read_all(FILE *p, int *status) {
  size_t cap = 1 << 20, len = 0, got;
  char *buf = malloc(cap);
  assert_non_null(buf);
  while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (cap - len < 4096) {
      cap *= 2;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
  }
  buf[len] = '\0';
  int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return buf;
}

/* The JSON p writes; p must exit 0. */
static json_object *finish_json(FILE *p, const char *args) {
  int status;
  char *buf = read_all(p, &status);
  if (status != 0) fprintf(stderr, "dlq-bridge %s: status %d\n%.2000s\n", args, status, buf);
  assert_int_equal(status, 0);
  json_object *j = json_tokener_parse(buf);
  free(buf);
  assert_non_null(j);
  return j;
}

static json_object *run_json(fx_case *t, const char *args) {
  return finish_json(start(t, args), args);
}

static int64_t member_int(json_object *j, const char *key) {
  json_object *v;
  if (!json_object_object_get_ex(j, key, &v)) fail_msg("no member '%s'", key);
  return json_object_get_int64(v);
}

static json_object *member(json_object *j, const char *key) {
  json_object *v;
  if (!json_object_object_get_ex(j, key, &v)) fail_msg("no member '%s'", key);
  return v;
}

static bool from_catalog(json_object *j) {
  return strcmp(th_json_str(member(j, "catalog"), "source"), "catalog") == 0;
}

static void test_many_looks_at_once_each_see_every_item(void **state) {
  fx_case *t = *state;
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  loaded_at = th_now_ms();
  /* Published straight into the DLQ: outside the bridge. */
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", DEPTH, fill, NULL), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), DEPTH);

  /* The catalog knows none of them: the look says so and reads the queue. */
  json_object *j = run_json(t, "inspect --source-system billing --json");
  assert_false(from_catalog(j));
  assert_false(json_object_get_boolean(member(member(j, "catalog"), "agrees")));
  assert_non_null(strstr(th_json_str(member(j, "catalog"), "why_scan"), "outside the bridge"));
  assert_int_equal(member_int(j, "listed"), BILLING);
  json_object_put(j);

  /* A verifying pass catalogues them. */
  j = run_json(t, "catalog verify --json");
  json_object *q0 = json_object_array_get_idx(member(j, "queues"), 0);
  assert_int_equal(member_int(q0, "present"), DEPTH);
  assert_int_equal(member_int(q0, "added"), DEPTH);
  assert_int_equal(member_int(q0, "removed"), 0);
  json_object_put(j);

  /* --scan reads the queue, and says the catalog agrees with it. */
  j = run_json(t, "inspect --scan --source-system billing --json");
  assert_false(from_catalog(j));
  assert_true(json_object_get_boolean(member(member(j, "catalog"), "compared")));
  assert_true(json_object_get_boolean(member(member(j, "catalog"), "agrees")));
  assert_int_equal(member_int(member(j, "catalog"), "count"), DEPTH);
  assert_int_equal(member_int(j, "listed"), BILLING);
  json_object_put(j);

  /* Six looks at once (four filtered inspects, a stats by group, the
   * console's failure groups page), with the daemon running beside them
   * (its escalator and its catalog check look too): each sees every item,
   * from the catalog. */
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  const char *const env[] = {a.env_log, a.env_key, a.env_pub, NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  fx_console console;
  int console_up = fx_console_start(t, &console, NULL, "console");
  char page[TH_PATH_MAX], get[2 * TH_PATH_MAX + 256];
  th_unique(page, sizeof page, "/tmp/dlqb-catalog-groups-page");
  assert_true(fx_console_get_cmd(&console, "/", page, get, sizeof get));
  const char *args[LOOKS] = {"inspect --source-system billing --json",
                             "inspect --source-system billing --json",
                             "inspect --source-system billing --json",
                             "inspect --source-system billing --json", "stats --by group --json"};
  FILE *p[LOOKS];
  for (int i = 0; i < LOOKS; i++) p[i] = start(t, args[i]);
  FILE *groups_page = console_up == 0 ? popen(get, "r") : NULL;
  for (int i = 0; i < LOOKS; i++) {
    j = finish_json(p[i], args[i]);
    assert_true(from_catalog(j));
    assert_true(json_object_get_boolean(member(member(j, "catalog"), "agrees")));
    if (i < LOOKS - 1) {
      assert_int_equal(member_int(j, "listed"), BILLING);
      assert_int_equal(member_int(j, "total"), DEPTH);
    } else {
      json_object *groups = member(j, "groups");
      int64_t sum = 0;
      for (size_t g = 0; g < json_object_array_length(groups); g++)
        sum += member_int(json_object_array_get_idx(groups, g), "count");
      assert_int_equal(sum, DEPTH);
    }
    json_object_put(j);
  }
  int got = groups_page != NULL ? pclose(groups_page) : -1;
  char line[64];
  snprintf(line, sizeof line, "%d items in dsr.dlq.manual", DEPTH);
  int whole = got == 0 ? fx_count_in_file(page, line) : -1;
  int catalogued =
      got == 0 ? fx_count_in_file(page, "<p class=\"catalog\" id=\"catalog\">catalog as of") : -1;
  if (whole != 1 || catalogued != 1) th_bridge_dump_log(&console.proc);
  int console_stop = fx_console_stop(&console);
  unlink(page);
  assert_int_equal(console_up, 0);
  assert_int_equal(got, 0);
  assert_int_equal(whole, 1);
  assert_int_equal(catalogued, 1);
  assert_int_equal(console_stop, 0);
  FX_CHECK(t, fx_stop_bridges(t) == 0);
  fx_audit_remove(&a);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), DEPTH);

  /* The bridge's own moves keep it right: replay the billing items and
   * the catalog still agrees, without them. */
  j = run_json(t, "replay --source-system billing --no-audit --json");
  json_object_put(j);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", DEPTH - BILLING, 30000));
  j = run_json(t, "inspect --json");
  assert_true(from_catalog(j));
  assert_int_equal(member_int(j, "listed"), DEPTH - BILLING);
  json_object_put(j);
  j = run_json(t, "inspect --source-system billing --json");
  assert_true(from_catalog(j));
  assert_int_equal(member_int(j, "listed"), 0);
  json_object_put(j);
}

typedef struct {
  fx_case *t;
} look_arg;

/* A look answered from the catalog. One that reads the queue meanwhile
 * may find the daemon's verifying pass holding part of it and say so
 * (exit 1: "fewer items arrived"): not yet, then. */
static bool looks_agree(void *arg) {
  look_arg *a = arg;
  const char *args = "inspect --json";
  int status;
  char *buf = read_all(start(a->t, args), &status);
  json_object *j = status == 0 ? json_tokener_parse(buf) : NULL;
  free(buf);
  bool ok = j != NULL && from_catalog(j);
  json_object_put(j);
  return ok;
}

static void test_outside_changes_are_said_then_corrected(void **state) {
  fx_case *t = *state;
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", DEPTH, fill, NULL), 0);
  json_object *j = run_json(t, "catalog verify --json");
  json_object_put(j);
  j = run_json(t, "inspect --json");
  assert_true(from_catalog(j));
  json_object_put(j);

  /* Behind the bridge's back: three items taken (the UI's Get with ack),
   * two published straight into the DLQ. */
  th_msg m;
  th_msg_init(&m);
  for (int i = 0; i < 3; i++) assert_int_equal(th_get(t->conn, "dsr.dlq.manual", &m), 1);
  th_msg_release(&m);
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", 2, fill_late, NULL), 0);

  /* Every look says so (and reads the queue) until it is corrected. */
  j = run_json(t, "inspect --json");
  assert_false(from_catalog(j));
  assert_int_equal(member_int(member(j, "catalog"), "count"), DEPTH);
  assert_int_equal(member_int(member(j, "catalog"), "depth"), DEPTH - 1);
  assert_int_equal(member_int(j, "listed"), DEPTH - 1);
  json_object_put(j);
  j = run_json(t, "stats --json");
  assert_false(from_catalog(j));
  json_object_put(j);

  /* The daemon's check notices and corrects it within the stated time. */
  const char *const env[] = {a.env_log, a.env_key, a.env_pub,
                             "DLQ_BRIDGE_CATALOG_CHECK_INTERVAL="
                             "1s",
                             NULL};
  int64_t t0 = th_now_ms();
  assert_int_equal(fx_start_bridge(t, env), 0);
  look_arg la = {t};
  FX_CHECK(t, th_wait_until(looks_agree, &la, NOTICE_MS));
  printf("outside changes corrected by the daemon in %.1f s (check every %d s)\n",
         (double)(th_now_ms() - t0) / 1000, CHECK_S);
  FX_CHECK(t, fx_stop_bridges(t) == 0);
  j = run_json(t, "inspect --json");
  assert_true(from_catalog(j));
  assert_int_equal(member_int(j, "listed"), DEPTH - 1);
  json_object *items = member(j, "items");
  int late = 0;
  for (size_t i = 0; i < json_object_array_length(items); i++)
    late +=
        strncmp(th_json_str(json_object_array_get_idx(items, i), "request_id"), "late-", 5) == 0;
  assert_int_equal(late, 2);
  json_object_put(j);
  fx_audit_remove(&a);
}

typedef struct {
  fx_case *t;
  long at_least;
} depth_arg;

/* The management API says nothing is unacked in the DLQ and nobody
 * consumes it: every delivery of the killed mover is back. (Its figures
 * are sampled, so they only ever lag: a stale one still shows the mover.) */
static bool dlq_settled(void *arg) {
  depth_arg *a = arg;
  char path[512];
  snprintf(path, sizeof path, "/api/queues/%s/dsr.dlq.manual", a->t->vhost.name);
  json_object *q = th_mgmt_get_json(path), *u, *c;
  bool ok = q != NULL && json_object_object_get_ex(q, "messages_unacknowledged", &u) &&
            json_object_object_get_ex(q, "consumers", &c) && json_object_get_int64(u) == 0 &&
            json_object_get_int64(c) == 0;
  json_object_put(q);
  return ok;
}

static bool work_reached(void *arg) {
  depth_arg *a = arg;
  return th_queue_depth(a->t->conn, "dsr.work") >= a->at_least;
}

/* A mover killed in the middle of a move (SIGKILL: nothing of it runs on):
 * whatever it left, a look is never wrong about the queue (it answers from
 * the catalog only when the counts agree, else it reads the queue), and a
 * verifying pass brings the catalog back to the queue. By the order of the
 * events (dlqb/catalog.h) the catalog can only claim items that are gone
 * (acked, their "out" not sent), never miss one still there. */
static void test_a_killed_move_leaves_looks_truthful(void **state) {
  fx_case *t = *state;
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", DEPTH, fill, NULL), 0);
  json_object *j = run_json(t, "catalog verify --json");
  json_object_put(j);

  static const char *const replay[] = {"replay", "--all", "--no-audit", "--rate", "500", NULL};
  th_bridge b;
  assert_int_equal(th_command_start(&b, &t->vhost, replay, NULL, "replay"), 0);
  depth_arg da = {t, 300};
  FX_CHECK(t, th_wait_until(work_reached, &da, 60000));
  th_bridge_kill(&b);
  /* Its unacked deliveries are back once its connection is gone. */
  FX_CHECK(t, th_wait_until(dlq_settled, &da, 60000));
  long depth = th_queue_depth(t->conn, "dsr.dlq.manual");
  assert_true(depth > 0 && depth < DEPTH);

  j = run_json(t, "inspect --json");
  int64_t count = member_int(member(j, "catalog"), "count");
  printf("killed replay: %ld items left in the DLQ, the catalog holds %lld\n", depth,
         (long long)count);
  /* Whatever it says, what it lists is the queue. */
  assert_int_equal(member_int(j, "listed"), depth);
  if (count != depth) assert_false(from_catalog(j));
  json_object_put(j);

  j = run_json(t, "catalog verify --json");
  json_object_put(j);
  j = run_json(t, "inspect --json");
  assert_true(from_catalog(j));
  assert_int_equal(member_int(j, "listed"), depth);
  json_object_put(j);
}

/* Runs `dlq-bridge args`; its JSON whatever its exit status, which goes
 * to *status. */
static json_object *run_json_status(fx_case *t, const char *args, int *status) {
  char *buf = read_all(start(t, args), status);
  json_object *j = json_tokener_parse(buf);
  if (j == NULL) fprintf(stderr, "dlq-bridge %s: status %d\n%.2000s\n", args, *status, buf);
  free(buf);
  assert_non_null(j);
  return j;
}

/* A verifying pass reads only what is ready: items another consumer holds
 * unacked (a worker, a move, a look reading the queue itself) never reach
 * it. It must not take them for gone: with a consumer on the queue it
 * removes nothing and says the queue was not read whole (exit 1); once the
 * consumer is gone it verifies as before. Before, it found 0 of the 3,000
 * held items and removed every one from the catalog. */
static void test_verify_removes_nothing_another_consumer_holds(void **state) {
  fx_case *t = *state;
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", DEPTH, fill, NULL), 0);
  json_object *j = run_json(t, "catalog verify --json");
  json_object_put(j);

  /* A consumer that takes every item and acks none. */
  th_worker *w = th_worker_open(&t->vhost, "dsr.dlq.manual", DEPTH);
  assert_non_null(w);
  th_msg *m = fx_msg(t);
  int taken = 0;
  while (taken < DEPTH && th_worker_next(w, m, 10000) == 1) taken++;
  assert_int_equal(taken, DEPTH);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);

  int status = -1;
  j = run_json_status(t, "catalog verify --queue dsr.dlq.manual --json", &status);
  json_object *q0 = json_object_array_get_idx(member(j, "queues"), 0);
  int64_t removed = member_int(q0, "removed");
  bool complete = json_object_get_boolean(member(q0, "complete"));
  json_object_put(j);
  th_worker_close(w); /* its deliveries go back to the queue */
  assert_int_equal(removed, 0);
  assert_false(complete);
  assert_int_equal(status, 1);

  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", DEPTH, 30000));
  j = run_json(t, "catalog verify --json");
  q0 = json_object_array_get_idx(member(j, "queues"), 0);
  assert_int_equal(member_int(q0, "present"), DEPTH);
  assert_int_equal(member_int(q0, "added"), 0);
  assert_int_equal(member_int(q0, "removed"), 0);
  json_object_put(j);
  j = run_json(t, "inspect --json");
  assert_true(from_catalog(j));
  assert_int_equal(member_int(j, "listed"), DEPTH);
  json_object_put(j);
}

/* A look with a checkpoint (--catalog-checkpoint FILE in args), as
 * run_json, through url (a proxy's) when not NULL. */
static json_object *look_via(fx_case *t, const char *url, const char *ckpt, const char *args) {
  char cmd[2048];
  assert_true(th_fmt(cmd, sizeof cmd, "timeout %d '%s' %s --catalog-checkpoint '%s'", CMD_TIMEOUT_S,
                     th_env_get()->bridge_bin, args, ckpt));
  setenv("DLQ_BRIDGE_URL", url != NULL ? url : t->vhost.url, 1);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  return finish_json(p, args);
}

static void checkpoint_path(fx_case *t, char *out, size_t len) {
  assert_true(th_fmt(out, len, "%s/catalog-%s.ckpt", th_env_get()->node_dir, t->vhost.name));
  unlink(out);
}

/* A broker slow to deliver (its first delivery seconds late, as 4.0.5
 * over deep header tables, or a busy node) does not make a look throw its
 * checkpoint away: the look resumes from it and reads only what came
 * since. Before, a resume that saw nothing for 3 s took the stream for
 * another and folded it whole, every look (and the daemon's escalator,
 * looking first, escalated late: broker.ops
 * test_daemon_escalates_deliveries_that_come_late, about one run in two). */
static void test_a_slow_broker_resumes_from_the_checkpoint(void **state) {
  fx_case *t = *state;
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", DEPTH, fill, NULL), 0);
  json_object *j = run_json(t, "catalog verify --json");
  json_object_put(j);
  char ckpt[TH_PATH_MAX];
  checkpoint_path(t, ckpt, sizeof ckpt);
  j = look_via(t, NULL, ckpt, "inspect --json");
  assert_true(from_catalog(j));
  assert_false(json_object_get_boolean(member(member(j, "catalog"), "from_checkpoint")));
  json_object_put(j);

  th_proxy px = {.delivery_stall_ms = 4000};
  assert_int_equal(th_proxy_start(&px), 0);
  char env[TH_URL_MAX + 32];
  assert_true(th_proxy_url_env(&px, &t->vhost, env, sizeof env));
  const char *url = strchr(env, '=') + 1;
  j = look_via(t, url, ckpt, "inspect --source-system billing --json");
  th_proxy_cut(&px);
  json_object *cat = member(j, "catalog");
  printf("a look through a broker 4 s slow to deliver: %lld events read in %.1f s, from the "
         "checkpoint: %s\n",
         (long long)member_int(cat, "events_read"),
         json_object_get_double(member(cat, "read_seconds")),
         json_object_get_boolean(member(cat, "from_checkpoint")) ? "yes" : "no");
  assert_true(from_catalog(j));
  assert_true(json_object_get_boolean(member(cat, "from_checkpoint")));
  assert_true(member_int(cat, "events_read") < DEPTH);
  assert_int_equal(member_int(j, "listed"), BILLING);
  json_object_put(j);
  unlink(ckpt);
}

/* A checkpoint of a stream deleted and declared again (shorter than the
 * offset the checkpoint ends at) is dropped at once, and the look folds
 * the new stream whole: the consumer of an offset past a stream's end
 * waits at its tail, so the look must not wait for its marker there. */
static void test_a_stream_declared_again_is_folded_whole(void **state) {
  fx_case *t = *state;
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", DEPTH, fill, NULL), 0);
  json_object *j = run_json(t, "catalog verify --json");
  json_object_put(j);
  char ckpt[TH_PATH_MAX];
  checkpoint_path(t, ckpt, sizeof ckpt);
  j = look_via(t, NULL, ckpt, "inspect --json");
  assert_true(from_catalog(j));
  json_object_put(j);

  char path[512];
  assert_true(th_fmt(path, sizeof path, "/api/queues/%s/dsr.catalog", t->vhost.name));
  assert_int_equal(th_mgmt("DELETE", path, NULL, NULL), 204);
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  int64_t t0 = th_now_ms();
  j = look_via(t, NULL, ckpt, "inspect --json");
  int64_t took = th_now_ms() - t0;
  printf("a look whose checkpoint is of a stream declared again: %.1f s\n", (double)took / 1000);
  json_object *cat = member(j, "catalog");
  assert_false(json_object_get_boolean(member(cat, "from_checkpoint")));
  /* The new stream knows none of the items: the look says so. */
  assert_false(from_catalog(j));
  assert_int_equal(member_int(cat, "count"), 0);
  assert_int_equal(member_int(j, "listed"), DEPTH);
  assert_true(took < 20000); /* not the 30 s a read waits for what never comes */
  json_object_put(j);
  unlink(ckpt);
}

/* ---- retention and snapshots ------------------------------------------------ */

/* The test's retention policy on its catalog stream: segments of
 * SEGMENT_BYTES, at most RETAIN_BYTES kept (the oldest segments go once a
 * new one starts and the total is above it). Put before `declare`, so the
 * stream starts with it. */
#define SEGMENT_BYTES (64 * 1024)
#define RETAIN_BYTES  (640 * 1024)
#define FILLER_BYTES  (16 * 1024)
#define SNAP_DEPTH    1000
#define SNAP_BILLING  (SNAP_DEPTH / BILLING_EVERY)

static void put_retention(fx_case *t, int retain_bytes) {
  char path[512], body[512];
  assert_true(th_fmt(path, sizeof path, "/api/policies/%s/catalog-retention", t->vhost.name));
  assert_true(th_fmt(body, sizeof body,
                     "{\"pattern\": \"^dsr\\\\.catalog$\", \"apply-to\": \"queues\", "
                     "\"definition\": {\"max-length-bytes\": %d, "
                     "\"stream-max-segment-size-bytes\": %d}}",
                     retain_bytes, SEGMENT_BYTES));
  int code = th_mgmt("PUT", path, body, NULL);
  assert_true(code == 201 || code == 204);
}

/* The catalog stream's first offset now (a consumer from "first" on a
 * connection of its own), -1 when it cannot be read. */
static int64_t stream_first(fx_case *t) {
  th_conn *c = th_connect(&t->vhost);
  assert_non_null(c);
  amqp_connection_state_t conn = th_conn_amqp(c);
  amqp_channel_t ch = 5;
  int64_t first = -1;
  amqp_channel_open(conn, ch);
  if (amqp_get_rpc_reply(conn).reply_type != AMQP_RESPONSE_NORMAL) goto out;
  amqp_basic_qos(conn, ch, 0, 1, 0);
  amqp_table_entry_t arg = {
      .key = amqp_cstring_bytes("x-stream-offset"),
      .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("first")}};
  amqp_basic_consume(conn, ch, amqp_cstring_bytes("dsr.catalog"), amqp_empty_bytes, 0, 0, 0,
                     (amqp_table_t){1, &arg});
  if (amqp_get_rpc_reply(conn).reply_type != AMQP_RESPONSE_NORMAL) goto out;
  amqp_envelope_t env;
  struct timeval tv = {10, 0};
  amqp_rpc_reply_t rr = amqp_consume_message(conn, &env, &tv, 0);
  if (rr.reply_type != AMQP_RESPONSE_NORMAL) goto out;
  const amqp_table_t *h = &env.message.properties.headers;
  for (int i = 0; i < h->num_entries; i++)
    if (h->entries[i].key.len == 15 && memcmp(h->entries[i].key.bytes, "x-stream-offset", 15) == 0)
      first = h->entries[i].value.value.i64;
  amqp_destroy_envelope(&env);
out:
  th_close(c);
  return first;
}

/* Messages on the catalog stream that are not the bridge's (nothing a
 * reader folds): they fill segments so retention cuts the stream. */
static void filler(fx_case *t, int n) {
  static char body[FILLER_BYTES];
  memset(body, 'f', sizeof body);
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_set_body(&m, body, sizeof body), 0);
  assert_int_equal(th_msg_add_str(&m, "x-not-the-bridge", "filler"), 0);
  for (int i = 0; i < n; i++) assert_int_equal(th_publish(t->conn, "", "dsr.catalog", &m), 0);
  th_msg_release(&m);
}

typedef struct {
  fx_case *t;
  int64_t past; /* cut once the first offset is above this */
  int written;
} cut_arg;

/* One more filler message, then whether the stream was cut past a->past
 * (retention runs when a segment is rolled: the writes cause it). */
static bool cut_past(void *arg) {
  cut_arg *a = arg;
  filler(a->t, 1);
  a->written++;
  return stream_first(a->t) > a->past;
}

static int64_t cut_stream(fx_case *t, int64_t past) {
  cut_arg a = {t, past, 0};
  FX_CHECK(t, th_wait_until(cut_past, &a, 120000));
  int64_t first = stream_first(t);
  printf("retention cut the catalog stream at offset %lld after %d filler messages of %d KiB\n",
         (long long)first, a.written, FILLER_BYTES / 1024);
  return first;
}

static bool from_snapshot(json_object *j) {
  return json_object_get_boolean(member(member(j, "catalog"), "from_snapshot"));
}

/* With retention on the catalog stream: once it is cut, a look with no
 * checkpoint refuses the catalog and says why (folding what is left would
 * be wrong), until `catalog snapshot` (rebuilding from the queues) has
 * written one; after more moves and a second snapshot, a cut past the
 * first leaves looks answering from the second, with exact counts. */
static void test_retention_and_snapshots(void **state) {
  fx_case *t = *state;
  /* Fresh readers, each look its own fold: no checkpoint (the default
   * keeps one, and a checkpoint past the cut is still good). */
  setenv("DLQ_BRIDGE_CATALOG_CHECKPOINT", "none", 1);
  put_retention(t, RETAIN_BYTES);
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", SNAP_DEPTH, fill, NULL), 0);
  json_object *j = run_json(t, "catalog verify --json");
  json_object_put(j);
  j = run_json(t, "inspect --json");
  assert_true(from_catalog(j));
  assert_false(from_snapshot(j));
  json_object_put(j);

  /* No snapshot, and the stream cut: the look reads the queue, says why. */
  assert_int_equal(stream_first(t), 0);
  cut_stream(t, 0);
  j = run_json(t, "inspect --source-system billing --json");
  assert_false(from_catalog(j));
  const char *why = th_json_str(member(j, "catalog"), "why_scan");
  assert_non_null(strstr(why, "cut by retention"));
  assert_non_null(strstr(why, "no complete snapshot"));
  assert_non_null(strstr(why, "catalog snapshot"));
  assert_int_equal(member_int(j, "listed"), SNAP_BILLING);
  json_object_put(j);

  /* catalog snapshot rebuilds it from the queues: looks answer again. */
  j = run_json(t, "catalog snapshot --json");
  assert_true(json_object_get_boolean(member(j, "rebuilt")));
  assert_int_equal(member_int(json_object_array_get_idx(member(j, "queues"), 0), "items"),
                   SNAP_DEPTH);
  json_object_put(j);
  j = run_json(t, "inspect --source-system billing --json");
  assert_true(from_catalog(j));
  assert_true(from_snapshot(j));
  assert_int_equal(member_int(j, "listed"), SNAP_BILLING);
  assert_int_equal(member_int(j, "total"), SNAP_DEPTH);
  json_object_put(j);

  /* Moves after it (the billing items escalated), then a second snapshot
   * in a later segment, then a cut past everything before it. */
  j = run_json(t, "escalate --source-system billing --no-audit --json");
  json_object_put(j);
  FX_CHECK(t, th_wait_depth(t->conn, "compliance_review", SNAP_BILLING, 30000));
  int64_t before = stream_first(t);
  j = run_json(t, "inspect --json"); /* the end of the first snapshot is behind this marker */
  assert_true(from_catalog(j));
  assert_int_equal(member_int(j, "listed"), SNAP_DEPTH - SNAP_BILLING);
  json_object_put(j);
  /* A look that leaves a checkpoint here (its marker is cut below). */
  char ckpt[TH_PATH_MAX];
  checkpoint_path(t, ckpt, sizeof ckpt);
  j = look_via(t, NULL, ckpt, "inspect --json");
  assert_true(from_catalog(j));
  json_object_put(j);
  filler(t, 2 * SEGMENT_BYTES / FILLER_BYTES);
  j = run_json(t, "catalog snapshot --json");
  assert_false(json_object_get_boolean(member(j, "rebuilt")));
  int64_t as_of = member_int(j, "as_of_offset");
  assert_int_equal(member_int(json_object_array_get_idx(member(j, "queues"), 0), "items"),
                   SNAP_DEPTH - SNAP_BILLING);
  assert_int_equal(member_int(json_object_array_get_idx(member(j, "queues"), 1), "items"),
                   SNAP_BILLING);
  json_object_put(j);
  printf("second snapshot as of offset %lld; stream begins at %lld\n", (long long)as_of,
         (long long)before);
  /* A forged chunk (its body garbage) and an end of a snapshot that never
   * was: passed over, with a warning. */
  th_msg m;
  th_msg_init(&m);
  static const char junk[] = "\xff\xff\xff\x7f not a chunk \x01\x02";
  assert_int_equal(th_msg_set_body(&m, junk, sizeof junk), 0);
  assert_int_equal(th_msg_add_str(&m, "x-dlqb-catalog", "snap"), 0);
  assert_int_equal(th_msg_add_str(&m, "x-dlqb-catalog-snap", "forged"), 0);
  assert_int_equal(th_msg_add_int(&m, "x-dlqb-catalog-snap-of", as_of), 0);
  assert_int_equal(th_msg_add_int(&m, "x-dlqb-catalog-snap-chunk", 0), 0);
  assert_int_equal(th_msg_add_str(&m, "x-dlqb-catalog-queue", "dsr.dlq.manual"), 0);
  assert_int_equal(th_msg_add_int(&m, "x-dlqb-catalog-count", 1), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.catalog", &m), 0);
  th_msg_reset(&m);
  static const char totals[] = "1 0 0 0 0 0 dsr.dlq.manual\n0 0 0 0 0 0 compliance_review\n";
  assert_int_equal(th_msg_set_body(&m, totals, sizeof totals - 1), 0);
  assert_int_equal(th_msg_add_str(&m, "x-dlqb-catalog", "snap-end"), 0);
  assert_int_equal(th_msg_add_str(&m, "x-dlqb-catalog-snap", "forged"), 0);
  assert_int_equal(th_msg_add_int(&m, "x-dlqb-catalog-snap-of", as_of), 0);
  assert_int_equal(th_msg_add_int(&m, "x-dlqb-catalog-snap-chunk", 1), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.catalog", &m), 0);
  th_msg_release(&m);
  /* And moves after it: folded on top of it, in order. */
  j = run_json(t, "escalate --all --limit 5 --no-audit --json");
  json_object_put(j);
  FX_CHECK(t, th_wait_depth(t->conn, "compliance_review", SNAP_BILLING + 5, 30000));
  /* Everything up to the escalations gone, the second snapshot's marker
   * still there. */
  int64_t first = cut_stream(t, as_of - 2 * SEGMENT_BYTES / FILLER_BYTES - 1);
  assert_true(first <= as_of);
  int64_t t0 = th_now_ms();
  j = run_json(t, "inspect --json");
  printf("a look with no checkpoint on the cut stream: %.1f s, %lld events folded after the "
         "snapshot\n",
         (double)(th_now_ms() - t0) / 1000,
         (long long)member_int(member(j, "catalog"), "events_read"));
  assert_true(from_catalog(j));
  assert_true(from_snapshot(j));
  assert_int_equal(member_int(j, "listed"), SNAP_DEPTH - SNAP_BILLING - 5);
  assert_int_equal(member_int(member(j, "catalog"), "events_read"), 10); /* 5 outs, 5 ins */
  json_object_put(j);
  /* The checkpoint's marker is gone: dropped, and the look folds from the
   * snapshot. */
  j = look_via(t, NULL, ckpt, "inspect --json");
  assert_true(from_catalog(j));
  assert_false(json_object_get_boolean(member(member(j, "catalog"), "from_checkpoint")));
  assert_true(from_snapshot(j));
  assert_int_equal(member_int(j, "listed"), SNAP_DEPTH - SNAP_BILLING - 5);
  json_object_put(j);
  unlink(ckpt);
  j = run_json(t, "inspect --queue compliance_review --json");
  assert_true(from_catalog(j));
  assert_true(from_snapshot(j));
  assert_int_equal(member_int(j, "listed"), SNAP_BILLING + 5);
  json_object_put(j);
}

/* The daemon, finding the stream cut with no snapshot, rebuilds the
 * catalog from the queues and snapshots it on its own. */
static void test_the_daemon_rebuilds_a_cut_catalog(void **state) {
  fx_case *t = *state;
  /* Fresh readers, each look its own fold: no checkpoint (the default
   * keeps one, and a checkpoint past the cut is still good). */
  setenv("DLQ_BRIDGE_CATALOG_CHECKPOINT", "none", 1);
  put_retention(t, RETAIN_BYTES);
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", SNAP_DEPTH, fill, NULL), 0);
  json_object *j = run_json(t, "catalog verify --json");
  json_object_put(j);
  cut_stream(t, 0);
  j = run_json(t, "inspect --json");
  assert_false(from_catalog(j));
  json_object_put(j);
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  const char *const env[] = {a.env_log, a.env_key, a.env_pub,
                             "DLQ_BRIDGE_CATALOG_CHECK_INTERVAL=1s", NULL};
  int64_t t0 = th_now_ms();
  assert_int_equal(fx_start_bridge(t, env), 0);
  look_arg la = {t};
  FX_CHECK(t, th_wait_until(looks_agree, &la, NOTICE_MS));
  printf("a cut catalog rebuilt and snapshotted by the daemon in %.1f s\n",
         (double)(th_now_ms() - t0) / 1000);
  FX_CHECK(t, fx_stop_bridges(t) == 0);
  fx_audit_remove(&a);
  j = run_json(t, "inspect --source-system billing --json");
  assert_true(from_catalog(j));
  assert_true(from_snapshot(j));
  assert_int_equal(member_int(j, "listed"), SNAP_BILLING);
  assert_int_equal(member_int(j, "total"), SNAP_DEPTH);
  json_object_put(j);
}

static bool not_running(void *arg) { return !th_bridge_running(arg); }

/* Moves while a snapshot is written (a replay at 20 a second beside
 * `catalog snapshot`): their events, before, between and after its chunks,
 * are folded after it, so once retention cut the stream a fresh look from
 * the snapshot agrees with the queue to the item. */
static void test_moves_during_a_snapshot(void **state) {
  fx_case *t = *state;
  /* Fresh readers, each look its own fold: no checkpoint (the default
   * keeps one, and a checkpoint past the cut is still good). */
  setenv("DLQ_BRIDGE_CATALOG_CHECKPOINT", "none", 1);
  put_retention(t, 4 * RETAIN_BYTES); /* the 3,000 "in"s and the snapshot fit */
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", DEPTH, fill, NULL), 0);
  json_object *j = run_json(t, "catalog verify --json");
  json_object_put(j);
  assert_int_equal(stream_first(t), 0);

  static const char *const replay[] = {
      "replay", "--source-system", "billing", "--no-audit", "--rate", "20", NULL};
  th_bridge b;
  assert_int_equal(th_command_start(&b, &t->vhost, replay, NULL, "replay"), 0);
  depth_arg da = {t, 3};
  FX_CHECK(t, th_wait_until(work_reached, &da, 60000));
  j = run_json(t, "catalog snapshot --json");
  assert_false(json_object_get_boolean(member(j, "rebuilt")));
  int64_t as_of = member_int(j, "as_of_offset");
  int64_t held = member_int(json_object_array_get_idx(member(j, "queues"), 0), "items");
  json_object_put(j);
  long moved = th_queue_depth(t->conn, "dsr.work");
  FX_CHECK(t, th_wait_until(not_running, &b, 60000));
  th_bridge_kill(&b); /* reaps it: it has exited (status 0, the harness says) */
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), BILLING);
  printf("a snapshot of %lld items as of offset %lld written while a replay moved (%ld of %d "
         "moved when it ended)\n",
         (long long)held, (long long)as_of, moved, BILLING);
  assert_true(held > DEPTH - BILLING && held < DEPTH); /* some moved before it, some after */

  int64_t first = cut_stream(t, 0);
  assert_true(first <= as_of);
  j = run_json(t, "inspect --json");
  assert_true(from_catalog(j));
  assert_true(from_snapshot(j));
  assert_int_equal(member_int(j, "listed"), DEPTH - BILLING);
  assert_int_equal(member_int(member(j, "catalog"), "count"), DEPTH - BILLING);
  json_object_put(j);
  j = run_json(t, "inspect --source-system billing --json");
  assert_true(from_snapshot(j));
  assert_int_equal(member_int(j, "listed"), 0);
  json_object_put(j);
}

static void fill_overdue(void *ctx, size_t i, th_bulk_item *it) {
  (void)ctx;
  snprintf(it->id, sizeof it->id, "overdue-%zu", i);
  snprintf(it->source_system, sizeof it->source_system, "crm");
  it->dlq_at_ms = loaded_at - 2 * 3600000; /* two hours in the DLQ */
}

/* Declares the topology and loads n items (as each describes them)
 * straight into the DLQ; with verify ("catalog verify ..." arguments),
 * catalogues them. */
static void declare_and_load(fx_case *t, size_t n, void (*each)(void *, size_t, th_bulk_item *),
                             const char *verify) {
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", n, each, NULL), 0);
  if (verify != NULL) json_object_put(run_json(t, verify));
}

/* A worker's forged event: op "in" or "out" of message_id in the DLQ,
 * with user_id the worker's own name when as_self (the broker refuses any
 * other), else none. */
static void forge(th_conn *c, const char *op, const char *id, const char *user) {
  th_msg m;
  th_msg_init(&m);
  assert_true(th_fmt(m.message_id, sizeof m.message_id, "%s", id));
  if (user != NULL) assert_true(th_fmt(m.user_id, sizeof m.user_id, "%s", user));
  assert_int_equal(th_msg_add_str(&m, "x-dlqb-catalog", op), 0);
  assert_int_equal(th_msg_add_str(&m, "x-dlqb-catalog-queue", "dsr.dlq.manual"), 0);
  if (strcmp(op, "in") == 0) {
    char now[48];
    th_iso_time(th_now_ms(), now, sizeof now);
    assert_int_equal(th_msg_add_str(&m, "request_id", id), 0);
    assert_int_equal(th_msg_add_str(&m, "source_system", "crm"), 0);
    assert_int_equal(th_msg_add_str(&m, "dlq_reason", "max_attempts"), 0);
    assert_int_equal(th_msg_add_str(&m, "dlq_at", now), 0);
  }
  assert_int_equal(th_publish(c, "", "dsr.catalog", &m), 0);
  th_msg_release(&m);
}

static int listed_with_prefix(json_object *j, const char *prefix) {
  json_object *items = member(j, "items");
  int n = 0;
  for (size_t i = 0; i < json_object_array_length(items); i++)
    n += strncmp(th_json_str(json_object_array_get_idx(items, i), "request_id"), prefix,
                 strlen(prefix)) == 0;
  return n;
}

/* Issue 39: anyone who may publish to the default exchange (every worker)
 * can append to dsr.catalog. Balanced pairs of forged events (an "out" for
 * a real item, an "in" for a decoy) keep the catalog's count equal to the
 * queue's depth, so without catalog_writers a look lists the decoys, and
 * an escalator that asked the catalog whether anything is due would hold
 * back the overdue items they hide. With catalog_writers listing the
 * bridge's users (here guest: the harness's bridge and operator) no look
 * believes them, and the items are escalated on time. */
static void test_forged_events_from_a_worker_mislead_nobody(void **state) {
  fx_case *t = *state;
  setenv("DLQ_BRIDGE_CATALOG_WRITERS", "guest", 1);
  declare_and_load(t, 2, fill_overdue, "catalog verify --json");

  char worker[TH_NAME_MAX + 16];
  assert_true(th_fmt(worker, sizeof worker, "%s-worker", t->vhost.name));
  assert_int_equal(th_user_put(&t->vhost, worker, "worker-pw",
                               "{\"configure\":\"^$\",\"write\":\"^amq\\\\.default$\","
                               "\"read\":\"^$\"}"),
                   0);
  th_conn *wc = th_connect_as(&t->vhost, worker, "worker-pw");
  assert_non_null(wc);
  forge(wc, "out", "overdue-0", NULL); /* no user_id */
  forge(wc, "in", "decoy-0", NULL);
  forge(wc, "out", "overdue-1", worker); /* the worker as itself */
  forge(wc, "in", "decoy-1", worker);
  th_close(wc);

  /* No look believes them: the catalog still agrees, and says what it
   * passed over. */
  json_object *j = run_json(t, "inspect --json");
  assert_true(from_catalog(j));
  assert_int_equal(member_int(j, "listed"), 2);
  assert_int_equal(listed_with_prefix(j, "overdue-"), 2);
  assert_int_equal(member_int(member(j, "catalog"), "untrusted_events"), 4);
  json_object_put(j);
  int status;
  /* A fold of its own (the count is of what a fold read: the first look's
   * checkpoint starts the next one after the forged events). */
  char *text = read_all(start(t, "inspect --catalog-checkpoint none 2>&1"), &status);
  assert_int_equal(status, 0);
  assert_non_null(strstr(text, "ignored 4 catalog events not from catalog_writers"));
  free(text);

  /* Without the list the same look is misled (the shipped configs list
   * the bridge's users for this). */
  unsetenv("DLQ_BRIDGE_CATALOG_WRITERS");
  j = run_json(t, "inspect --json");
  assert_true(from_catalog(j));
  assert_int_equal(listed_with_prefix(j, "decoy-"), 2);
  json_object_put(j);

  /* The SLA escalator escalates both on time, with or without the list:
   * it takes the catalog's "nothing due" only from listed writers. */
  for (int listed = 0; listed < 2; listed++) {
    const char *const env[] = {
        "DLQ_BRIDGE_DLQ_SLA=1h",
        listed ? "DLQ_BRIDGE_CATALOG_WRITERS=guest" : "DLQ_BRIDGE_CATALOG_WRITERS=", NULL};
    if (listed) {
      /* The escalated items back into the DLQ, hidden again. */
      th_msg m;
      th_msg_init(&m);
      while (th_get(t->conn, "compliance_review", &m) == 1) continue;
      th_msg_release(&m);
      assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", 2, fill_overdue, NULL), 0);
      setenv("DLQ_BRIDGE_CATALOG_WRITERS", "guest", 1);
      json_object_put(run_json(t, "catalog verify --json"));
      wc = th_connect_as(&t->vhost, worker, "worker-pw");
      assert_non_null(wc);
      for (int i = 0; i < 2; i++) {
        char id[32];
        snprintf(id, sizeof id, "overdue-%d", i);
        forge(wc, "out", id, worker);
        snprintf(id, sizeof id, "decoy-late-%d", i);
        forge(wc, "in", id, worker);
      }
      th_close(wc);
    }
    assert_int_equal(fx_start_bridge(t, env), 0);
    FX_CHECK(t, th_wait_depth(t->conn, "compliance_review", 2, 15000));
    FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 0, 5000));
    FX_CHECK(t, fx_stop_bridges(t) == 0);
  }
  unsetenv("DLQ_BRIDGE_CATALOG_WRITERS");
  th_user_delete(worker);
}

/* `dlq-bridge args` through url, stderr into the file err (so a test can
 * read what the look said), stdout readable from the stream returned. */
static FILE *start_via(const char *url, const char *args, const char *err) {
  char cmd[2048];
  assert_true(th_fmt(cmd, sizeof cmd, "timeout %d '%s' %s 2>'%s'", CMD_TIMEOUT_S,
                     th_env_get()->bridge_bin, args, err));
  setenv("DLQ_BRIDGE_URL", url, 1);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  return p;
}

static char *slurp_file(const char *path) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char *buf = malloc(1 << 16);
  assert_non_null(buf);
  size_t n = fread(buf, 1, (1 << 16) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Issue 40: four looks at once, and the connection of one of them is cut
 * (the proxy cuts the first connection that writes to the catalog stream:
 * a look's marker). That look tries again and is answered from the
 * catalog like the others: none reads the queue, so none holds it. Before,
 * a look whose catalog read failed read the queue itself (a pass over
 * every item, the broker's memory up by the queue's size). With no broker
 * to read the catalog from, a look fails with the reason (exit 1) after
 * its tries, and says nothing about reading the queue. */
static void test_a_look_that_loses_its_connection_tries_again(void **state) {
  fx_case *t = *state;
  declare_and_load(t, DEPTH, fill, "catalog verify --json");

  th_proxy px = {0};
  snprintf(px.drop_publish_to, sizeof px.drop_publish_to, "dsr.catalog");
  assert_int_equal(th_proxy_start(&px), 0);
  char env[TH_URL_MAX + 32];
  assert_true(th_proxy_url_env(&px, &t->vhost, env, sizeof env));
  const char *url = strchr(env, '=') + 1;
  enum { N = 4 };
  FILE *p[N];
  char err[N][TH_PATH_MAX];
  for (int i = 0; i < N; i++) {
    assert_true(
        th_fmt(err[i], sizeof err[i], "%s/%s-look%d.err", th_env_get()->log_dir, t->vhost.name, i));
    p[i] = start_via(url, "inspect --catalog-checkpoint none --json", err[i]);
  }
  int retried = 0;
  for (int i = 0; i < N; i++) {
    json_object *j = finish_json(p[i], "inspect");
    assert_true(from_catalog(j));
    assert_int_equal(member_int(j, "listed"), DEPTH);
    json_object_put(j);
    char *text = slurp_file(err[i]);
    retried += strstr(text, "trying again (2 of 3)") != NULL;
    assert_null(strstr(text, "reading the queue"));
    free(text);
    unlink(err[i]);
  }
  assert_int_equal(retried, 1);

  th_proxy_cut(&px);
  int status;
  char *out = read_all(start_via(url, "inspect --catalog-checkpoint none", err[0]), &status);
  free(out);
  assert_int_equal(status, 1);
  char *text = slurp_file(err[0]);
  printf("a look with no broker behind its proxy: %s", text);
  assert_non_null(strstr(text, "(the catalog, 3 tries; --scan reads the queue itself)"));
  assert_null(strstr(text, "reading the queue"));
  free(text);
  unlink(err[0]);
}

/* Issue 40: with nothing set (catalog_checkpoint auto), a look keeps its
 * checkpoint in the user's state directory (the harness points
 * XDG_STATE_HOME into the run's log folder), and the next look, another
 * process, starts from it and reads only what came since. */
static void test_looks_keep_a_checkpoint_by_default(void **state) {
  fx_case *t = *state;
  declare_and_load(t, DEPTH, fill, "catalog verify --catalog-checkpoint none --json");
  json_object *j = run_json(t, "inspect --json");
  assert_true(from_catalog(j));
  assert_false(json_object_get_boolean(member(member(j, "catalog"), "from_checkpoint")));
  assert_true(member_int(member(j, "catalog"), "events_read") >= DEPTH);
  json_object_put(j);
  j = run_json(t, "stats --json");
  json_object *cat = member(j, "catalog");
  printf("the second look: from the checkpoint %s, %lld events read\n",
         json_object_get_boolean(member(cat, "from_checkpoint")) ? "yes" : "no",
         (long long)member_int(cat, "events_read"));
  assert_true(from_catalog(j));
  assert_true(json_object_get_boolean(member(cat, "from_checkpoint")));
  assert_true(member_int(cat, "events_read") < 10);
  json_object_put(j);
  /* At a terminal (a pty from script(1)) inspect lists a screenful and
   * says how to see more (issue 42: it printed every item); --all lists
   * every one. */
  for (int all = 0; all < 2; all++) {
    char tty[TH_PATH_MAX + 256];
    assert_true(th_fmt(tty, sizeof tty, "script -qec \"'%s' inspect%s\" /dev/null",
                       th_env_get()->bridge_bin, all ? " --all" : ""));
    setenv("DLQ_BRIDGE_URL", t->vhost.url, 1);
    FILE *p = popen(tty, "r");
    assert_non_null(p);
    int status;
    char *out = read_all(p, &status);
    assert_int_equal(status, 0);
    char want[64];
    snprintf(want, sizeof want, "%d items listed", all ? DEPTH : 50);
    if (strstr(out, want) == NULL) fprintf(stderr, "%.3000s\n", out);
    assert_non_null(strstr(out, want));
    assert_true((strstr(out, "(the first 50: --limit N lists more, --all every one)") != NULL) ==
                !all);
    free(out);
  }
  /* It is in the state directory, private, and named without the password. */
  char cmd[TH_PATH_MAX + 128];
  assert_true(th_fmt(cmd, sizeof cmd,
                     "test \"$(stat -c %%a '%s/state/dlq-bridge')\" = 700 && "
                     "ls '%s/state/dlq-bridge' | grep -q '^catalog-dsr.catalog-[0-9a-f]*.ckpt$'",
                     th_env_get()->log_dir, th_env_get()->log_dir));
  assert_int_equal(system(cmd), 0);
}

/* Issue 42: a DLQ filling through the bridge while an operator looks in a
 * loop is no change outside the bridge: every look agrees with the queue
 * (the count lies between the depths read before and after its fold) and
 * is answered from the catalog. Before, a look read the depth after the
 * fold, when copies whose "in" came after its marker were already there,
 * and said "changed outside the bridge" on the very first stats. An item
 * taken behind the bridge's back (the management UI's Get) is still said. */
static void test_a_filling_dlq_is_no_change_outside(void **state) {
  fx_case *t = *state;
  enum { TASKS = 240, ROUND = 12 };
  static const char *const env[] = {"DLQ_BRIDGE_MAX_ATTEMPTS=1", NULL};
  assert_int_equal(fx_start_bridge(t, env), 0);
  th_msg m;
  th_msg_init(&m);
  for (int i = 0; i < TASKS; i++) {
    char id[32];
    snprintf(id, sizeof id, "fill-%03d", i);
    th_msg_reset(&m);
    assert_int_equal(th_msg_task(&m, id), 0);
    assert_int_equal(th_publish(t->conn, "", "dsr.work", &m), 0);
  }
  th_worker *w = th_worker_open(&t->vhost, "dsr.work", 20);
  assert_non_null(w);
  int rejected = 0, looks = 0, agreed = 0;
  while (rejected < TASKS) {
    /* A look runs while the next round of failures is routed. */
    FILE *p = start(t, looks % 2 ? "inspect --json" : "stats --json");
    for (int k = 0; k < ROUND && rejected < TASKS; k++, rejected++) {
      FX_CHECK(t, th_worker_next(w, &m, 10000) == 1);
      assert_int_equal(th_worker_reject(w), 0);
    }
    json_object *j = finish_json(p, "look");
    looks++;
    json_object *cat = member(j, "catalog");
    agreed += json_object_get_boolean(member(cat, "agrees")) && from_catalog(j);
    if (!from_catalog(j)) fprintf(stderr, "look %d: %s\n", looks, json_object_to_json_string(cat));
    json_object_put(j);
  }
  th_worker_close(w);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", TASKS, 20000));
  printf("%d looks while %d failures were routed: %d agreed\n", looks, TASKS, agreed);
  assert_int_equal(agreed, looks);
  FX_CHECK(t, fx_stop_bridges(t) == 0);

  assert_int_equal(th_get(t->conn, "dsr.dlq.manual", &m), 1);
  th_msg_release(&m);
  int status;
  char *text = read_all(start(t, "stats 2>&1"), &status);
  assert_int_equal(status, 0);
  assert_non_null(
      strstr(text, "read the queue: catalog 240, queue 239 (catalog verify corrects it)"));
  free(text);
}

/* Issue 42: replay's progress line at a terminal (a pty from script(1))
 * is redrawn in place with \r; each drawing must fit 80 columns, or the
 * terminal wraps it and every redraw leaves a line behind (it was 95). */
static void test_replay_progress_fits_80_columns(void **state) {
  fx_case *t = *state;
  declare_and_load(t, DEPTH, fill, NULL);
  char cmd[TH_PATH_MAX + 256];
  assert_true(th_fmt(cmd, sizeof cmd,
                     "script -qec \"'%s' replay --all --no-audit --rate 2000\" /dev/null",
                     th_env_get()->bridge_bin));
  setenv("DLQ_BRIDGE_URL", t->vhost.url, 1);
  int status;
  char *out = read_all(popen(cmd, "r"), &status);
  assert_int_equal(status, 0);
  int drawings = 0;
  size_t widest = 0;
  for (char *p = out; *p != '\0';) {
    size_t n = strcspn(p, "\r\n");
    /* Columns: the line less its "erase to the end" (ESC [ K). */
    size_t cols = 0;
    for (size_t i = 0; i < n; i++) {
      if (p[i] == '\033' && i + 2 < n && p[i + 1] == '[' && p[i + 2] == 'K') {
        i += 2;
        continue;
      }
      cols += ((unsigned char)p[i] & 0xC0u) != 0x80u;
    }
    if (strncmp(p, "replay: ", 8) == 0 && strstr(p, " read, ") != NULL &&
        strstr(p, " read, ") < p + n) {
      drawings++;
      if (cols > widest) widest = cols;
    }
    p += n;
    while (*p == '\r' || *p == '\n') p++;
  }
  free(out);
  printf("replay's progress: %d drawings, the widest %zu columns\n", drawings, widest);
  assert_true(drawings > 0);
  assert_true(widest <= 80);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      FX_TEST(test_many_looks_at_once_each_see_every_item),
      FX_TEST(test_outside_changes_are_said_then_corrected),
      FX_TEST(test_a_killed_move_leaves_looks_truthful),
      FX_TEST(test_verify_removes_nothing_another_consumer_holds),
      FX_TEST(test_a_slow_broker_resumes_from_the_checkpoint),
      FX_TEST(test_a_stream_declared_again_is_folded_whole),
      FX_TEST(test_retention_and_snapshots),
      FX_TEST(test_the_daemon_rebuilds_a_cut_catalog),
      FX_TEST(test_moves_during_a_snapshot),
      FX_TEST(test_forged_events_from_a_worker_mislead_nobody),
      FX_TEST(test_a_look_that_loses_its_connection_tries_again),
      FX_TEST(test_looks_keep_a_checkpoint_by_default),
      FX_TEST(test_a_filling_dlq_is_no_change_outside),
      FX_TEST(test_replay_progress_fits_80_columns),
  };
  /* DLQB_TEST_FILTER=test_a_s* runs only the matching cases. */
  if (getenv("DLQB_TEST_FILTER") != NULL) cmocka_set_test_filter(getenv("DLQB_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}

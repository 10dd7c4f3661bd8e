/* A DLQ deeper than one consumer's window can ever be (the AMQP prefetch
 * is 16 bits: 65,535): 70,000 items, one in a thousand from source_system
 * billing, and one overdue item behind all of them. Filtered inspect,
 * stats, reconcile and replay must cover every item without the operator
 * tuning anything, leave the rest in its order, and the daemon's SLA
 * escalator must reach the overdue item at the tail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bulk.h"
#include "flow.h"

#define DEPTH         70000
#define BILLING_EVERY 1000
#define BILLING       (DEPTH / BILLING_EVERY)
#define HOUR_MS       3600000LL
#define CMD_TIMEOUT_S 300

static int64_t loaded_at;

static void fill(void *ctx, size_t i, th_bulk_item *it) {
  (void)ctx;
  snprintf(it->id, sizeof it->id, "d-%06zu", i);
  snprintf(it->source_system, sizeof it->source_system, "%s",
           i % BILLING_EVERY == BILLING_EVERY / 2 ? "billing" : "crm");
  it->dlq_at_ms = loaded_at - HOUR_MS; /* an hour in the DLQ: not overdue */
}

static void fill_overdue(void *ctx, size_t i, th_bulk_item *it) {
  (void)ctx;
  (void)i;
  snprintf(it->id, sizeof it->id, "overdue");
  snprintf(it->source_system, sizeof it->source_system, "crm");
  it->dlq_at_ms = loaded_at - 48 * HOUR_MS;
}

/* Runs `dlq-bridge args` on t's vhost with env (NULL-terminated), its whole
 * standard output in *out (malloc'd): th_run_bridge keeps only 8 KiB, and a
 * listing of this DLQ is megabytes. Returns the exit status, -1 when it
 * could not run. */
static int run_all(fx_case *t, const char *args, const char *const *env, char **out) {
  const th_env *e = th_env_get();
  char cmd[2048];
  assert_true(th_fmt(cmd, sizeof cmd, "timeout %d '%s' %s", CMD_TIMEOUT_S, e->bridge_bin, args));
  /* The URL (with the test node's guest password) goes through the
   * environment, never a command line. */
  setenv("DLQ_BRIDGE_URL", t->vhost.url, 1);
  for (size_t i = 0; env != NULL && env[i] != NULL; i++)
    assert_int_equal(putenv((char *)env[i]), 0);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  size_t got;
  while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (cap - len < 4096) {
      cap *= 2;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
  }
  buf[len] = '\0';
  int status = pclose(p);
  for (size_t i = 0; env != NULL && env[i] != NULL; i++) {
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(strchr(env[i], '=') - env[i]), env[i]);
    unsetenv(name);
  }
  *out = buf;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static json_object *run_json(fx_case *t, const char *args, const char *const *env) {
  char *out = NULL;
  int rc = run_all(t, args, env, &out);
  if (rc != 0) fprintf(stderr, "dlq-bridge %s: exit %d\n", args, rc);
  assert_int_equal(rc, 0);
  json_object *j = json_tokener_parse(out);
  free(out);
  assert_non_null(j);
  return j;
}

static int64_t member_int(json_object *j, const char *key) {
  json_object *v;
  if (!json_object_object_get_ex(j, key, &v)) fail_msg("no member '%s'", key);
  return json_object_get_int64(v);
}

/* The DLQ in order after the replay: every id but billing's, ascending. */
typedef struct {
  long seen;
  size_t next; /* the index the next crm item must have */
  long out_of_order;
} order_check;

static void check_order(void *ctx, const char *id) {
  order_check *c = ctx;
  c->seen++;
  while (c->next < DEPTH && c->next % BILLING_EVERY == BILLING_EVERY / 2) c->next++;
  char want[32];
  snprintf(want, sizeof want, "d-%06zu", c->next);
  if (strcmp(id, want) != 0) c->out_of_order++;
  c->next++;
}

static void test_every_command_covers_a_deep_dlq(void **state) {
  fx_case *t = *state;
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  const char *const audit_env[] = {a.env_log, a.env_key, a.env_pub, NULL};
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", DEPTH, fill, NULL), 0);
  printf("loaded %d items in %.1f s\n", DEPTH, (double)(th_now_ms() - loaded_at) / 1000);
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", 1, fill_overdue, NULL), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), DEPTH + 1);

  /* The SLA escalator reaches the overdue item behind 70,000 fresh ones. */
  const char *const daemon_env[] = {a.env_log, a.env_key, a.env_pub, "DLQ_BRIDGE_DLQ_SLA=1d", NULL};
  assert_int_equal(fx_start_bridge(t, daemon_env), 0);
  FX_CHECK(t, th_wait_depth(t->conn, "compliance_review", 1, 120000));
  FX_CHECK(t, fx_stop_bridges(t) == 0);
  /* Looked at, not taken: a taken item would be MISSING for reconcile. */
  json_object *review = run_json(t, "review list --json", NULL);
  assert_int_equal(json_object_array_length(review), 1);
  assert_string_equal(th_json_str(json_object_array_get_idx(review, 0), "request_id"), "overdue");
  json_object_put(review);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", DEPTH, 30000));

  /* inspect lists all 70 billing items, wherever they sit. */
  json_object *j = run_json(t, "inspect --source-system billing --json", NULL);
  json_object *items;
  assert_true(json_object_object_get_ex(j, "items", &items));
  assert_int_equal(json_object_array_length(items), BILLING);
  assert_int_equal(member_int(j, "listed"), BILLING);
  assert_int_equal(member_int(j, "total"), DEPTH);
  json_object_put(j);

  /* stats: the breakdown covers the whole DLQ. */
  j = run_json(t, "stats --json", NULL);
  json_object *reasons;
  assert_true(json_object_object_get_ex(j, "dlq_reasons", &reasons));
  assert_int_equal(member_int(reasons, "max_attempts"), DEPTH);
  json_object_put(j);

  /* audit reconcile reads every item. */
  j = run_json(t, "audit reconcile --json", audit_env);
  json_object *dlq;
  assert_true(json_object_object_get_ex(j, "dlq", &dlq));
  assert_int_equal(member_int(dlq, "items"), DEPTH);
  json_object_put(j);

  /* A filtered replay moves exactly the billing items. */
  j = run_json(t, "replay --source-system billing --json", audit_env);
  assert_int_equal(member_int(j, "replayed"), BILLING);
  assert_true(json_object_get_boolean(json_object_object_get(j, "complete")));
  json_object_put(j);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), BILLING);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", DEPTH - BILLING, 30000));

  /* The rest is exactly where it was, in its order. */
  order_check oc = {0};
  assert_int_equal(th_bulk_drain(t->conn, "dsr.dlq.manual", 2000, check_order, &oc),
                   DEPTH - BILLING);
  assert_int_equal(oc.out_of_order, 0);
  fx_audit_remove(&a);
}

/* A broker that stops delivering for longer than a pass's idle limit (5 s)
 * while the rest of the queue is ready: a broker holding a million items
 * does (bench/deep.sh saw a pass stop after 462,730 of 1,000,000). Here
 * the DLQ's queue process is suspended for 8 s as soon as the pass has
 * its consumer; the pass must wait for it and still cover every item. */
#define STALL_DEPTH 20000
#define STALL_MS    8000

static void fill_stall(void *ctx, size_t i, th_bulk_item *it) {
  (void)ctx;
  snprintf(it->id, sizeof it->id, "s-%06zu", i);
  snprintf(it->source_system, sizeof it->source_system, "%s",
           i % BILLING_EVERY == BILLING_EVERY / 2 ? "billing" : "crm");
  it->dlq_at_ms = loaded_at - HOUR_MS;
}

/* In a child: inside the node, writes the file `ready` (the parent starts
 * its pass once it exists: rabbitmqctl takes a second to start), waits for
 * a consumer on the DLQ, then suspends the queue's process for STALL_MS and
 * resumes it. Exits 0 when the stall happened while the consumer was there. */
static void stall_dlq_when_consumed(const fx_case *t, const char *ready) {
  const th_env *e = th_env_get();
  char expr[1536], cmd[2560];
  assert_true(th_fmt(expr, sizeof expr,
                     "{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<\"%s\">>, queue, "
                     "<<\"dsr.dlq.manual\">>)), Pid = amqqueue:get_pid(Q), "
                     "ok = file:write_file(\"%s\", <<\"ready\">>), "
                     "W = fun F(0) -> no_consumer; F(N) -> case rabbit_amqqueue:consumers(Q) of "
                     "[] -> timer:sleep(5), F(N - 1); _ -> sys:suspend(Pid), timer:sleep(%d), "
                     "sys:resume(Pid), stalled end end, W(6000).",
                     t->vhost.name, ready, STALL_MS));
  assert_true(th_fmt(cmd, sizeof cmd,
                     "bash '%s/scripts/broker-node.sh' ctl '%s' eval '%s' | grep -qx stalled",
                     e->source_dir, e->node_dir, expr));
  _exit(system(cmd) == 0 ? 0 : 1);
}

static bool file_exists(void *path) { return access(path, F_OK) == 0; }

static void test_a_stalled_broker_does_not_cut_a_pass_short(void **state) {
  fx_case *t = *state;
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", STALL_DEPTH, fill_stall, NULL),
                   0);
  /* In the node's directory: a 4.0 node runs in a chroot that sees it at
   * the same path. */
  char ready[TH_PATH_MAX];
  assert_true(
      th_fmt(ready, sizeof ready, "%s/stall-%s.ready", th_env_get()->node_dir, t->vhost.name));
  unlink(ready);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) stall_dlq_when_consumed(t, ready);
  FX_CHECK(t, th_wait_until(file_exists, ready, 60000));
  unlink(ready);
  int64_t t0 = th_now_ms();
  json_object *j = run_json(t, "inspect --source-system billing --json", NULL);
  int64_t took = th_now_ms() - t0;
  int status;
  assert_int_equal(waitpid(child, &status, 0), child);
  printf("inspect over a stalled DLQ of %d: %.1f s\n", STALL_DEPTH, (double)took / 1000);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* the stall did happen */
  assert_true(took >= STALL_MS);                              /* and the pass sat through it */
  assert_int_equal(member_int(j, "listed"), STALL_DEPTH / BILLING_EVERY);
  assert_int_equal(member_int(j, "total"), STALL_DEPTH);
  json_object_put(j);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", STALL_DEPTH, 30000));
}

/* A queue busy for longer than one request may wait (30 s): the broker
 * still taking back a deep pass's items (at 200,000 the next look's depth
 * read timed out; at 1,000,000 on 4.0.5 the return takes minutes). The
 * DLQ's queue process is suspended for BUSY_MS, and two looks started
 * meanwhile must wait for it, not fail. The broker itself answers all the
 * while (heartbeats, other queues), as it does when one queue is busy. */
#define BUSY_DEPTH 2000
#define BUSY_MS    36000

/* In a child: inside the node, suspends the DLQ's queue process, writes
 * the file `ready`, resumes the process after BUSY_MS. Exits 0 when it did. */
static void busy_dlq(const fx_case *t, const char *ready) {
  const th_env *e = th_env_get();
  char expr[1024], cmd[2048];
  assert_true(th_fmt(expr, sizeof expr,
                     "{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<\"%s\">>, queue, "
                     "<<\"dsr.dlq.manual\">>)), Pid = amqqueue:get_pid(Q), sys:suspend(Pid), "
                     "ok = file:write_file(\"%s\", <<\"ready\">>), timer:sleep(%d), "
                     "sys:resume(Pid), busy.",
                     t->vhost.name, ready, BUSY_MS));
  assert_true(th_fmt(cmd, sizeof cmd,
                     "bash '%s/scripts/broker-node.sh' ctl '%s' eval '%s' | grep -qx busy",
                     e->source_dir, e->node_dir, expr));
  _exit(system(cmd) == 0 ? 0 : 1);
}

static void test_looks_wait_for_a_busy_queue(void **state) {
  fx_case *t = *state;
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", BUSY_DEPTH, fill_stall, NULL), 0);
  char ready[TH_PATH_MAX];
  assert_true(
      th_fmt(ready, sizeof ready, "%s/busy-%s.ready", th_env_get()->node_dir, t->vhost.name));
  unlink(ready);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) busy_dlq(t, ready);
  FX_CHECK(t, th_wait_until(file_exists, ready, 60000));
  unlink(ready);
  int64_t t0 = th_now_ms();
  json_object *stats = run_json(t, "stats --json", NULL);
  json_object *look = run_json(t, "inspect --source-system billing --json", NULL);
  int64_t took = th_now_ms() - t0;
  int status;
  assert_int_equal(waitpid(child, &status, 0), child);
  printf("stats and inspect over a queue busy for %d s: %.1f s\n", BUSY_MS / 1000,
         (double)took / 1000);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* the queue was busy */
  assert_true(took >= BUSY_MS - 4000); /* past the 30 s a request used to wait */
  json_object *reasons;
  assert_true(json_object_object_get_ex(stats, "dlq_reasons", &reasons));
  assert_int_equal(member_int(reasons, "max_attempts"), BUSY_DEPTH);
  assert_int_equal(member_int(look, "listed"), BUSY_DEPTH / BILLING_EVERY);
  assert_int_equal(member_int(look, "total"), BUSY_DEPTH);
  json_object_put(stats);
  json_object_put(look);
}

/* A filtered move whose held items fill many channels: with --window 50
 * each channel of the pass holds about a window before the next one
 * consumes (src/amqp/pipe.c, add_consumer_if_full), so 6,000 items take
 * over a hundred channels, and one in seven matching means matches are
 * acked on channels whose consumer is already cancelled. Exactly the
 * matching items move, in their order, and the rest stays in its order. */
#define SPREAD_DEPTH 6000
#define SPREAD_EVERY 7
#define SPREAD_MOVED (SPREAD_DEPTH / SPREAD_EVERY + (SPREAD_DEPTH % SPREAD_EVERY > 3))

static bool spread_match(size_t i) { return i % SPREAD_EVERY == 3; }

static void fill_spread(void *ctx, size_t i, th_bulk_item *it) {
  (void)ctx;
  snprintf(it->id, sizeof it->id, "m-%06zu", i);
  snprintf(it->source_system, sizeof it->source_system, "%s", spread_match(i) ? "billing" : "crm");
  it->dlq_at_ms = loaded_at - HOUR_MS;
}

/* Checks a queue holds the items of one kind (matching or not), ascending. */
typedef struct {
  bool matching;
  size_t next;
  long seen, out_of_order;
} spread_check;

static void check_spread(void *ctx, const char *id) {
  spread_check *c = ctx;
  c->seen++;
  while (c->next < SPREAD_DEPTH && spread_match(c->next) != c->matching) c->next++;
  char want[32];
  snprintf(want, sizeof want, "m-%06zu", c->next);
  if (strcmp(id, want) != 0) c->out_of_order++;
  c->next++;
}

static void test_a_filtered_move_over_many_channels_keeps_order(void **state) {
  fx_case *t = *state;
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  const char *const audit_env[] = {a.env_log, a.env_key, a.env_pub, NULL};
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", SPREAD_DEPTH, fill_spread, NULL),
                   0);
  json_object *j = run_json(t, "replay --source-system billing --window 50 --json", audit_env);
  assert_int_equal(member_int(j, "replayed"), SPREAD_MOVED);
  assert_true(json_object_get_boolean(json_object_object_get(j, "complete")));
  json_object_put(j);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", SPREAD_DEPTH - SPREAD_MOVED, 30000));
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), SPREAD_MOVED);
  spread_check moved = {.matching = true}, left = {.matching = false};
  assert_int_equal(th_bulk_drain(t->conn, "dsr.work", 2000, check_spread, &moved), SPREAD_MOVED);
  assert_int_equal(moved.out_of_order, 0);
  assert_int_equal(th_bulk_drain(t->conn, "dsr.dlq.manual", 2000, check_spread, &left),
                   SPREAD_DEPTH - SPREAD_MOVED);
  assert_int_equal(left.out_of_order, 0);
  fx_audit_remove(&a);
}

/* A pass that moves on to a new channel a few hundred times (--window 50:
 * about 25 held items a channel) costs each move a few round trips, not a
 * timeout: the requests that open the next channel must not wait on a
 * corked socket (pipe.c, next_channel; measured before: 0.2 s a request,
 * 37.6 s for these 20,000 on RabbitMQ 3.10, 2.9 s after). Timed against
 * the same pass with the default window (a handful of channels) in the
 * same run, so that a slow machine or a sanitizer slows both: at most 4
 * times it and 5 s more, where a request stuck on the cork made it 10 to
 * 20 times. */
#define SWITCH_DEPTH 20000

static void fill_switch(void *ctx, size_t i, th_bulk_item *it) {
  (void)ctx;
  snprintf(it->id, sizeof it->id, "s-%06zu", i);
  snprintf(it->source_system, sizeof it->source_system, "%s", i % 1000 == 0 ? "billing" : "crm");
  it->dlq_at_ms = loaded_at - HOUR_MS;
}

static void test_moving_on_to_the_next_channel_is_quick(void **state) {
  fx_case *t = *state;
  static const char *const declare_args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare_args, t->vhost.url, NULL, 60000, &r), 0);
  assert_int_equal(r.exit_code, 0);
  loaded_at = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", SWITCH_DEPTH, fill_switch, NULL),
                   0);
  int64_t took[2];
  static const char *const looks[2] = {"inspect --source-system billing --json",
                                       "inspect --source-system billing --window 50 --json"};
  for (int i = 0; i < 2; i++) {
    int64_t t0 = th_now_ms();
    json_object *j = run_json(t, looks[i], NULL);
    took[i] = th_now_ms() - t0;
    printf("%s over %d items: %.1f s\n", looks[i], SWITCH_DEPTH, took[i] / 1000.0);
    assert_int_equal(json_object_array_length(json_object_object_get(j, "items")),
                     SWITCH_DEPTH / 1000);
    json_object_put(j);
    /* The pass returns only once the queue shows every item again. */
    assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), SWITCH_DEPTH);
  }
  if (took[1] > 4 * took[0] + 5000)
    fail_msg("the pass over many channels took %lld ms, the same over a few %lld ms",
             (long long)took[1], (long long)took[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      FX_TEST(test_every_command_covers_a_deep_dlq),
      FX_TEST(test_a_filtered_move_over_many_channels_keeps_order),
      FX_TEST(test_moving_on_to_the_next_channel_is_quick),
      FX_TEST(test_a_stalled_broker_does_not_cut_a_pass_short),
      FX_TEST(test_looks_wait_for_a_busy_queue),
  };
  if (getenv("DLQB_TEST_FILTER") != NULL) cmocka_set_test_filter(getenv("DLQB_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}

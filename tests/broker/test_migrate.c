/* `dlq-bridge migrate` on a real broker (issue 41): an older deployment's
 * classic DLQ of ITEMS items made a quorum queue, the command SIGKILLed
 * twice mid-way (once while items go into the holding queue, once while
 * they come back) and run again until it is done. Then: the DLQ is a
 * quorum queue, the holding queue is gone, every item is in the DLQ once
 * (its order is measured and printed), each has its migrated hop into the DLQ in the audit
 * trail (which verifies), and a look answers from the catalog and agrees.
 * A second run and a dry run find nothing to do; the review queue (empty,
 * classic) is made quorum too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bulk.h"
#include "flow.h"

/* 100,000 as the issue asks, in the plain builds on both versions; the
 * sanitizer builds (several times slower) move fewer. */
#ifdef DLQB_TEST_SANITIZED
#define ITEMS 20000
#else
#define ITEMS 100000
#endif
#define HOLDING     "dsr.dlq.manual.migrating"
#define CMD_TIMEOUT 300000

static void fill(void *ctx, size_t i, th_bulk_item *it) {
  (void)ctx;
  snprintf(it->id, sizeof it->id, "m-%06zu", i);
  snprintf(it->source_system, sizeof it->source_system, "crm");
  it->dlq_at_ms = th_now_ms() - 3600000;
}

static json_object *queue_info(const fx_case *t, const char *queue) {
  char path[TH_PATH_MAX];
  snprintf(path, sizeof path, "/api/queues/%s/%s", t->vhost.name, queue);
  return th_mgmt_get_json(path);
}

static const char *queue_type(const fx_case *t, const char *queue, char *buf, size_t len) {
  json_object *q = queue_info(t, queue);
  snprintf(buf, len, "%s", q != NULL ? th_json_str(q, "type") : "(none)");
  json_object_put(q);
  return buf;
}

/* Whether queue is a quorum queue holding at least n ready items. */
static bool quorum_with(const fx_case *t, const char *queue, long n) {
  char type[32];
  return strcmp(queue_type(t, queue, type, sizeof type), "quorum") == 0 &&
         th_queue_depth(t->conn, queue) >= n;
}

/* Starts migrate and SIGKILLs it once `queue` is a quorum queue holding at
 * least n items (polled every 20 ms: a condition of the broker, awaited). */
static void migrate_killed_when(fx_case *t, const char *const *env, const char *queue, long n,
                                const char *tag) {
  static const char *const args[] = {"migrate", "--actor", "ops", NULL};
  th_bridge b;
  assert_int_equal(th_command_start(&b, &t->vhost, args, env, tag), 0);
  int64_t until = th_now_ms() + CMD_TIMEOUT;
  bool reached = false;
  while (!reached && th_bridge_running(&b) && th_now_ms() < until) {
    reached = quorum_with(t, queue, n);
    if (!reached) usleep(20000);
  }
  bool was_running = th_bridge_running(&b);
  th_bridge_kill(&b);
  if (!reached || !was_running) th_bridge_dump_log(&b);
  assert_true(reached);
  assert_true(was_running); /* killed mid-way, not after it finished */
  printf("migrate killed with %ld+ items in %s\n", n, queue);
}

/* Marks in seen[] each item (m-NNNNNN) that has a migrated hop into the
 * DLQ in the log at path; returns how many records it read. */
static long hops_into_dlq(const char *path, bool *seen) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char *line = NULL;
  size_t cap = 0;
  long n = 0;
  while (getline(&line, &cap, f) > 0) {
    n++;
    if (strstr(line, "\"event\":\"migrated\"") == NULL ||
        strstr(line, "\"to\":\"dsr.dlq.manual\"") == NULL)
      continue;
    const char *m = strstr(line, "\"message_id\":\"m-");
    if (m == NULL) continue;
    long i = strtol(m + strlen("\"message_id\":\"m-"), NULL, 10);
    if (i >= 0 && i < ITEMS) seen[i] = true;
  }
  free(line);
  fclose(f);
  return n;
}

/* Where the drained order breaks: an item that does not follow the one
 * before it (m-N after m-(N-1)). Counted, and each item seen once. */
typedef struct {
  long prev;
  size_t breaks, seen, twice;
  bool *got;
} order_ctx;

static void in_order(void *ctx, const char *id) {
  order_ctx *c = ctx;
  long n = strncmp(id, "m-", 2) == 0 ? strtol(id + 2, NULL, 10) : -1;
  if (n != c->prev + 1 && c->breaks++ < 5) fprintf(stderr, "after m-%06ld comes %s\n", c->prev, id);
  if (n >= 0 && n < ITEMS) {
    if (c->got[n]) c->twice++;
    c->got[n] = true;
  }
  c->prev = n;
  c->seen++;
}

static void test_migrate_killed_twice_moves_every_item_once(void **state) {
  fx_case *t = *state;
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  /* One log file, never rotated, so that the check below reads it all. */
  const char *const env[] = {a.env_log,
                             a.env_key,
                             a.env_pub,
                             "DLQ_BRIDGE_CATALOG_WRITERS=guest",
                             "DLQ_BRIDGE_AUDIT_ROTATE_BYTES=0",
                             "DLQ_BRIDGE_DLQ_QUEUE_TYPE=quorum",
                             NULL};
  /* An older deployment: its DLQ and review queue classic, declared with
   * no arguments; declare keeps them so and adds the rest. */
  assert_int_equal(th_queue_declare(t->conn, "dsr.dlq.manual", NULL, 0), 0);
  assert_int_equal(th_queue_declare(t->conn, "compliance_review", NULL, 0), 0);
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare, t->vhost.url, env, CMD_TIMEOUT, &r), 0);
  assert_int_equal(r.exit_code, 0);
  int64_t t0 = th_now_ms();
  assert_int_equal(th_bulk_publish_dlq(t->conn, "dsr.dlq.manual", ITEMS, fill, NULL), 0);
  printf("loaded %d items in %.1f s\n", ITEMS, (double)(th_now_ms() - t0) / 1000);
  char type[32];
  assert_string_equal(queue_type(t, "dsr.dlq.manual", type, sizeof type), "classic");

  static const char *const dry[] = {"migrate", "--dry-run", "--json", NULL};
  assert_int_equal(th_run_bridge(dry, t->vhost.url, env, CMD_TIMEOUT, &r), 0);
  assert_int_equal(r.exit_code, 0);
  json_object *j = json_tokener_parse(r.out), *qs = NULL;
  assert_non_null(j);
  assert_true(json_object_object_get_ex(j, "queues", &qs));
  assert_int_equal(
      json_object_get_int64(json_object_object_get(json_object_array_get_idx(qs, 0), "pending")),
      ITEMS);
  json_object_put(j);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), ITEMS); /* moved nothing */

  /* Killed while the items go into the holding queue, then while they
   * come back into the quorum DLQ. */
  t0 = th_now_ms();
  migrate_killed_when(t, env, HOLDING, ITEMS / 3, "migrate-1");
  migrate_killed_when(t, env, "dsr.dlq.manual", ITEMS / 3, "migrate-2");
  assert_string_equal(queue_type(t, "dsr.dlq.manual", type, sizeof type), "quorum");

  static const char *const run[] = {"migrate", "--actor", "ops", NULL};
  assert_int_equal(th_run_bridge(run, t->vhost.url, env, CMD_TIMEOUT, &r), 0);
  printf("migrate, third run: exit %d\n%s%s", r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  printf("migrated %d items in %.1f s with two kills\n", ITEMS, (double)(th_now_ms() - t0) / 1000);
  assert_string_equal(queue_type(t, "dsr.dlq.manual", type, sizeof type), "quorum");
  assert_string_equal(queue_type(t, "compliance_review", type, sizeof type), "quorum");
  assert_int_equal(th_queue_depth(t->conn, HOLDING), -1);
  json_object *q = queue_info(t, "dsr.dlq.manual"), *args = NULL, *limit = NULL;
  assert_non_null(q);
  assert_true(json_object_object_get_ex(q, "arguments", &args));
  assert_true(json_object_object_get_ex(args, "x-delivery-limit", &limit));
  assert_int_equal(json_object_get_int64(limit), 2147483647);
  json_object_put(q);

  /* Again: nothing to do, and it says so. */
  assert_int_equal(th_run_bridge(run, t->vhost.url, env, CMD_TIMEOUT, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "dsr.dlq.manual: a quorum queue already"));

  /* A look answers from the catalog, and it agrees with the queue. */
  static const char *const look[] = {"inspect", "--json", "--limit", "1", NULL};
  assert_int_equal(th_run_bridge(look, t->vhost.url, env, CMD_TIMEOUT, &r), 0);
  assert_int_equal(r.exit_code, 0);
  j = json_tokener_parse(r.out);
  json_object *cat = NULL;
  assert_non_null(j);
  assert_true(json_object_object_get_ex(j, "catalog", &cat));
  assert_string_equal(th_json_str(cat, "source"), "catalog");
  assert_int_equal(json_object_get_int64(json_object_object_get(j, "total")), ITEMS);
  json_object_put(j);

  /* The trail verifies, and every item has its hop into the DLQ. */
  assert_int_equal(fx_audit_verify(&a, &r), 0);
  assert_int_equal(r.exit_code, 0);
  bool *seen = calloc(ITEMS, sizeof *seen);
  assert_non_null(seen);
  assert_true(hops_into_dlq(a.log, seen) > 0);
  int missing = 0;
  for (size_t i = 0; i < ITEMS; i++) missing += !seen[i];
  free(seen);
  assert_int_equal(missing, 0);

  /* Every item once. Their order is printed, not asserted: measured on
   * 3.10.8, the run with two kills left 3 of 100,000 items out of place,
   * at the first kill's boundary (the cause is not found yet; issue 41
   * stays open for it). */
  order_ctx oc = {.prev = -1, .got = calloc(ITEMS, sizeof(bool))};
  assert_non_null(oc.got);
  long drained = th_bulk_drain(t->conn, "dsr.dlq.manual", 2000, in_order, &oc);
  assert_int_equal(drained, ITEMS);
  assert_int_equal(oc.twice, 0);
  for (size_t i = 0; i < ITEMS; i++) assert_true(oc.got[i]);
  printf("order after the migration: %zu breaks in %zu items\n", oc.breaks, oc.seen);
  free(oc.got);
  fx_audit_remove(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      FX_TEST(test_migrate_killed_twice_moves_every_item_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

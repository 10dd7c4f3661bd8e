/* A three-node RabbitMQ cluster on this machine, quorum queues replicated
 * on all three, two bridges (one connected to node 1, one to node 2), and
 * node 1 killed (SIGKILL of the whole node) mid-flow, then started again.
 * The flow's conservation check must find nothing lost. Long test (label
 * "long", `scripts/test.sh --long`): it starts its own three nodes on
 * DLQB_TEST_CLUSTER_PORT, +5 and +10, and needs no fixture node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flow.h"

#define DELAYS "100ms,200ms"

static char g_dir[3][TH_PATH_MAX];
static char g_name[3][128];
static int g_port[3];
static const char *g_script;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[4 * TH_PATH_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  fflush(NULL);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "cluster: '%s' failed (%d)\n", cmd, rc);
  return rc == 0 ? 0 : -1;
}

static int start_node(int i) {
  return sh("'%s' start '%s' %d '%s' >/dev/null", g_script, g_dir[i], g_port[i],
            g_name[i]);
}

/* Fresh directories, one cookie, nodes 2 and 3 joined to node 1. */
static int cluster_up(void) {
  for (int i = 0; i < 3; i++) {
    if (sh("rm -rf '%s' && mkdir -p '%s/home'", g_dir[i], g_dir[i]) != 0) return -1;
    if (i > 0 && sh("cp '%s/home/.erlang.cookie' '%s/home/' && chmod 400 '%s/home/.erlang.cookie'",
                    g_dir[0], g_dir[i], g_dir[i]) != 0)
      return -1;
    if (start_node(i) != 0) return -1;
    if (i > 0 && sh("'%s' join '%s' '%s@localhost' >/dev/null", g_script, g_dir[i], g_name[0]) != 0)
      return -1;
  }
  return 0;
}

static void cluster_down(void) {
  for (int i = 0; i < 3; i++) sh("'%s' stop '%s' >/dev/null 2>&1 || true", g_script, g_dir[i]);
}

typedef struct {
  bool second_started, killed, restarted;
  int64_t killed_at;
  int kill_at_acks;
} cluster_state;

static int cluster_fault(fx_case *t, void *arg, const flow_result *r) {
  cluster_state *c = arg;
  if (!c->second_started) {
    char url[TH_URL_MAX + 32];
    snprintf(url, sizeof url, "DLQ_BRIDGE_URL=amqp://guest:guest@127.0.0.1:%d/%s", g_port[1],
             t->vhost.name);
    const char *env[] = {"DLQ_BRIDGE_METRICS_ADDR=off", "DLQ_BRIDGE_RETRY_DELAYS=" DELAYS,
                         "DLQ_BRIDGE_RETRY_JITTER=0", "DLQ_BRIDGE_MAX_ATTEMPTS=3", url, NULL};
    if (th_bridge_start(&t->bridges[1], &t->vhost, env, "bridge2-node2") != 0) return -1;
    t->nbridges = 2;
    c->second_started = true;
  }
  if (!c->killed && r->acks >= c->kill_at_acks) {
    printf("cluster: killing node 1 with %d acks done\n", r->acks);
    fflush(stdout);
    if (sh("'%s' kill '%s'", g_script, g_dir[0]) != 0) return -1;
    c->killed = true;
    c->killed_at = th_now_ms();
  } else if (c->killed && !c->restarted && th_now_ms() - c->killed_at > 8000) {
    printf("cluster: starting node 1 again with %d acks done\n", r->acks);
    fflush(stdout);
    if (start_node(0) != 0) return -1;
    c->restarted = true;
  }
  return 0;
}

static void test_cluster_node_killed_mid_flow(void **state) {
  fx_case *t = *state;
  char url[TH_URL_MAX + 32];
  snprintf(url, sizeof url, "DLQ_BRIDGE_URL=amqp://guest:guest@127.0.0.1:%d/%s", g_port[0],
           t->vhost.name);
  const char *extra[] = {url, NULL};
  cluster_state c = {.kill_at_acks = 60};
  flow_opts o = {.tasks = 480, .bridges = 1, .retry_delays = DELAYS, .timeout_ms = 300000,
                 .bridge_env = extra, .fault = cluster_fault, .fault_arg = &c};
  flow_result r;
  int rc = flow_run(t, &o, &r);
  if (c.killed && !c.restarted) start_node(0);
  assert_int_equal(rc, 0);
  assert_true(c.killed && c.restarted);
  flow_print("cluster node kill", &o, &r);
  if (!r.settled || r.lost > 0) {
    /* Where the missing tasks are: at-least-once dead-lettering holds them
     * inside the source queue (messages_dlx) until the target confirms. */
    sh(". '%s/node.env' && HOME='%s/home' /usr/lib/rabbitmq/bin/rabbitmqctl -q -n "
       "\"$RABBITMQ_NODENAME\" list_queues -p '%s' name type messages messages_ready "
       "messages_unacknowledged leader members online >&2",
       g_dir[2], g_dir[2], t->vhost.name);
    for (int q = 0; q < 2; q++)
      sh("curl -s -u guest:guest 'http://127.0.0.1:%d/api/queues/%s/%s' | python3 -c "
         "'import json,sys; d=json.load(sys.stdin); print({k: v for k, v in d.items() "
         "if \"dlx\" in k or k in (\"messages\", \"leader\", \"online\", \"state\")})' >&2",
         g_port[2] + 1, t->vhost.name, q == 0 ? "dsr.work" : "dsr.failed");
  }
  FX_CHECK(t, r.settled);
  assert_int_equal(r.lost, 0);
  assert_int_equal(r.foreign, 0);
  assert_int_equal(r.in_other, 0);
  assert_true(r.completed + r.in_dlq >= o.tasks);
  assert_int_equal(r.bridge_exit_failures, 0);
}

int main(void) {
  const char *src = getenv("DLQB_SOURCE_DIR"), *dir = getenv("DLQB_TEST_CLUSTER_DIR"),
             *port = getenv("DLQB_TEST_CLUSTER_PORT");
  if (src == NULL || dir == NULL || port == NULL) {
    fprintf(stderr, "cluster: DLQB_SOURCE_DIR, DLQB_TEST_CLUSTER_DIR and DLQB_TEST_CLUSTER_PORT are required\n");
    return 1;
  }
  static char script[TH_PATH_MAX];
  snprintf(script, sizeof script, "%s/scripts/broker-node.sh", src);
  g_script = script;
  for (int i = 0; i < 3; i++) {
    g_port[i] = atoi(port) + 5 * i;
    snprintf(g_dir[i], sizeof g_dir[i], "%s/n%d", dir, i + 1);
    snprintf(g_name[i], sizeof g_name[i], "dlqb-c%d-%d", i + 1, g_port[0]);
  }
  if (cluster_up() != 0) {
    cluster_down();
    return 1;
  }
  /* The harness (vhosts, the test's own connections) talks to node 3,
   * which stays up throughout. */
  setenv("DLQB_TEST_NODE_DIR", g_dir[2], 1);
  int rc = 1;
  if (th_env_get() != NULL) {
    const struct CMUnitTest tests[] = {
        FX_TEST(test_cluster_node_killed_mid_flow),
    };
    rc = cmocka_run_group_tests(tests, NULL, NULL);
  }
  cluster_down();
  return rc;
}

/* A three-node RabbitMQ cluster on this machine, quorum queues replicated
 * on all three, two bridges (one connected to node 1, one to node 2), and
 * node 1 killed (SIGKILL of the whole node) mid-flow, then started again
 * 12 s later, as an operator would. The flow gets 120 s after that to
 * settle, and its conservation check must find nothing lost. The nodes run
 * with a 5 s dead-letter worker confirm timeout; see docs/reliability.md.
 * Knobs: DLQB_TEST_CLUSTER_KILL (1 or 2), DLQB_TEST_CLUSTER_DOWN_MS,
 * DLQB_TEST_CLUSTER_DRAIN_MS, DLQB_TEST_CLUSTER_DLX_TIMEOUT_MS. Long test
 * (label "long", `scripts/test.sh --long`): it starts its own three nodes
 * on DLQB_TEST_CLUSTER_PORT, +5 and +10, and needs no fixture node. */
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
  return sh("'%s' start '%s' %d '%s' >/dev/null", g_script, g_dir[i], g_port[i], g_name[i]);
}

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

/* Fresh directories, one cookie, nodes 2 and 3 joined to node 1. */
static int cluster_up(void) {
  for (int i = 0; i < 3; i++) {
    if (sh("rm -rf '%s' && mkdir -p '%s/home'", g_dir[i], g_dir[i]) != 0) return -1;
    if (i > 0 && sh("cp '%s/home/.erlang.cookie' '%s/home/' && chmod 400 '%s/home/.erlang.cookie'",
                    g_dir[0], g_dir[i], g_dir[i]) != 0)
      return -1;
    /* RabbitMQ 3.10's at-least-once dead-letter worker resends a message
     * that its target queue rejected (as happens while that queue's leader
     * is on the killed node) only when its publisher confirm timeout has
     * passed, on a timer with the same period: 180 s by default, so such
     * messages sit invisible for 180 to 360 s. 5 s here, as
     * docs/reliability.md recommends for clusters.
     * DLQB_TEST_CLUSTER_DLX_TIMEOUT_MS=180000 reproduces the default. */
    if (sh("echo '[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, %d}]}].' "
           "> '%s/advanced.config'",
           env_int("DLQB_TEST_CLUSTER_DLX_TIMEOUT_MS", 5000), g_dir[i]) != 0)
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
  int64_t started_at, killed_at, restarted_at;
  int kill_at_acks, acks_at_kill, acks_at_restart;
  int victim;        /* index of the node killed (0 = node 1, the queues' leader) */
  int restart_after; /* ms the node stays down */
} cluster_state;

static int cluster_fault(fx_case *t, void *arg, const flow_result *r) {
  cluster_state *c = arg;
  if (!c->second_started) {
    char url[TH_URL_MAX + 32];
    snprintf(url, sizeof url, "DLQ_BRIDGE_URL=amqp://guest:guest@127.0.0.1:%d/%s", g_port[1],
             t->vhost.name);
    const char *env[] = {"DLQ_BRIDGE_METRICS_ADDR=off",
                         "DLQ_BRIDGE_RETRY_DELAYS=" DELAYS,
                         "DLQ_BRIDGE_RETRY_JITTER=0",
                         "DLQ_BRIDGE_MAX_ATTEMPTS=3",
                         url,
                         NULL};
    if (th_bridge_start(&t->bridges[1], &t->vhost, env, "bridge2-node2") != 0) return -1;
    t->nbridges = 2;
    c->second_started = true;
  }
  if (!c->killed && r->acks >= c->kill_at_acks) {
    c->killed_at = th_now_ms();
    c->acks_at_kill = r->acks;
    printf("cluster: killing node %d with %d acks done at %lld (flow +%.1f s)\n", c->victim + 1,
           r->acks, (long long)c->killed_at, (c->killed_at - c->started_at) / 1000.0);
    fflush(stdout);
    if (sh("'%s' kill '%s'", g_script, g_dir[c->victim]) != 0) return -1;
    c->killed = true;
  } else if (c->killed && !c->restarted && th_now_ms() - c->killed_at > c->restart_after) {
    c->acks_at_restart = r->acks;
    printf("cluster: starting node %d again with %d acks done (%d while it was down)\n",
           c->victim + 1, r->acks, r->acks - c->acks_at_kill);
    fflush(stdout);
    if (start_node(c->victim) != 0) return -1;
    c->restarted = true;
    c->restarted_at = th_now_ms();
    printf("cluster: node %d answers again at %lld (down %.1f s)\n", c->victim + 1,
           (long long)c->restarted_at, (c->restarted_at - c->killed_at) / 1000.0);
    fflush(stdout);
  }
  return 0;
}

/* Polls node 3's management API every 2 s in the background and logs, per
 * flow queue, messages / ready / unacked and the leader, with epoch ms, to
 * DIR/queues.log, so a stall can be timed against the kill and restart. */
static void monitor_start(const char *vhost) {
  char py[TH_PATH_MAX + 32];
  snprintf(py, sizeof py, "%s/queues.py", g_dir[2]);
  FILE *f = fopen(py, "w");
  if (f == NULL) return;
  fputs("import json, sys, time\n"
        "t = int(time.time() * 1000)\n"
        "try:\n"
        "    qs = json.load(sys.stdin)\n"
        "except Exception as e:\n"
        "    print(t, 'no answer', e); sys.exit(0)\n"
        "out = []\n"
        "for q in sorted(qs, key=lambda q: q['name']):\n"
        "    m, r, u = (q.get(k, '?') for k in ('messages', 'messages_ready', "
        "'messages_unacknowledged'))\n"
        "    ld = str(q.get('leader', '?')).split('@')[0].replace('dlqb-', '')\n"
        "    out.append('%s m=%s r=%s u=%s L=%s on=%d' % (q['name'], m, r, u, ld, "
        "len(q.get('online', []))))\n"
        "print(t, ' | '.join(out), flush=True)\n",
        f);
  fclose(f);
  sh("( while :; do curl -s -m 3 -u guest:guest "
     "'http://127.0.0.1:%d/api/queues/%s?columns=name,messages,messages_ready,"
     "messages_unacknowledged,leader,online' | python3 '%s'; sleep 2; done ) "
     ">'%s/queues.log' 2>&1 & echo $! >'%s/monitor.pid'",
     g_port[2] + 1, vhost, py, g_dir[2], g_dir[2]);
}

static void monitor_stop(void) {
  sh("[ -f '%s/monitor.pid' ] && kill \"$(cat '%s/monitor.pid')\" && rm -f '%s/monitor.pid'; "
     "echo 'cluster: queue states (epoch ms) in %s/queues.log'",
     g_dir[2], g_dir[2], g_dir[2], g_dir[2]);
}

static void test_cluster_node_killed_mid_flow(void **state) {
  fx_case *t = *state;
  char url[TH_URL_MAX + 32];
  snprintf(url, sizeof url, "DLQ_BRIDGE_URL=amqp://guest:guest@127.0.0.1:%d/%s", g_port[0],
           t->vhost.name);
  const char *extra[] = {url, NULL};
  /* DLQB_TEST_CLUSTER_KILL: which node to kill, 1 (default: bridge 1's
   * node, where the bridge declared the queues, so it leads them all) or 2
   * (a follower of every queue, bridge 2's node). DLQB_TEST_CLUSTER_DOWN_MS:
   * how long it stays down (default 12 s). */
  cluster_state c = {.kill_at_acks = 60,
                     .victim = env_int("DLQB_TEST_CLUSTER_KILL", 1) == 2 ? 1 : 0,
                     .restart_after = env_int("DLQB_TEST_CLUSTER_DOWN_MS", 12000),
                     .started_at = th_now_ms()};
  /* The kill comes a few seconds in; after the restart, the flow gets
   * DLQB_TEST_CLUSTER_DRAIN_MS (default 120 s) to drain, and ends as soon as
   * everything is accounted for. */
  int drain_ms = env_int("DLQB_TEST_CLUSTER_DRAIN_MS", 120000);
  flow_opts o = {.tasks = 480,
                 .bridges = 1,
                 .retry_delays = DELAYS,
                 .timeout_ms = 20000 + c.restart_after + drain_ms,
                 .bridge_env = extra,
                 .fault = cluster_fault,
                 .fault_arg = &c};
  flow_result r;
  monitor_start(t->vhost.name);
  int rc = flow_run(t, &o, &r);
  int64_t end = th_now_ms();
  monitor_stop();
  /* A flow that settles while the node is down (as when a follower is
   * killed) is fine; the node is still started again before the end. */
  if (c.killed && !c.restarted) start_node(c.victim);
  assert_int_equal(rc, 0);
  assert_true(c.killed);
  flow_print("cluster node kill", &o, &r);
  if (c.restarted)
    printf("cluster: node %d killed at flow +%.1f s, down %.1f s; flow %s %.1f s after it "
           "answered again (%.1f s in all)\n",
           c.victim + 1, (c.killed_at - c.started_at) / 1000.0,
           (c.restarted_at - c.killed_at) / 1000.0, r.settled ? "settled" : "gave up",
           (end - c.restarted_at) / 1000.0, (end - c.started_at) / 1000.0);
  else
    printf("cluster: node %d killed at flow +%.1f s; flow %s %.1f s later, while it was down\n",
           c.victim + 1, (c.killed_at - c.started_at) / 1000.0, r.settled ? "settled" : "gave up",
           (end - c.killed_at) / 1000.0);
  if (!r.settled || r.lost > 0) {
    /* Where the missing tasks are: at-least-once dead-lettering holds them
     * inside the source queue (messages_dlx) until the target confirms. */
    sh("'%s' ctl '%s' -q list_queues -p '%s' name type messages messages_ready "
       "messages_unacknowledged leader members online >&2",
       g_script, g_dir[2], t->vhost.name);
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
    fprintf(stderr, "cluster: DLQB_SOURCE_DIR, DLQB_TEST_CLUSTER_DIR and DLQB_TEST_CLUSTER_PORT "
                    "are required\n");
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

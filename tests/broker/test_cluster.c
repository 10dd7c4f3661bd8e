/* A three-node RabbitMQ cluster on this machine, quorum queues replicated
 * on all three, two bridges (one connected to node 1, one to node 2), and
 * node 1 killed (SIGKILL of the whole node) mid-flow, then started again
 * 12 s later, as an operator would. The flow gets 120 s after that to
 * settle, and its conservation check must find nothing lost. The nodes run
 * with a 5 s dead-letter worker confirm timeout; see docs/reliability.md.
 * Knobs: DLQB_TEST_CLUSTER_KILL (1 or 2), DLQB_TEST_CLUSTER_DOWN_MS,
 * DLQB_TEST_CLUSTER_DRAIN_MS, DLQB_TEST_CLUSTER_DLX_TIMEOUT_MS. Long test
 * (label "long", `scripts/test.sh --long`): it starts its own three nodes
 * on DLQB_TEST_CLUSTER_PORT, +5 and +10, and needs no fixture node.
 * Issue 41 adds two cases (below): the DLQ's leader killed with its disk
 * lost and a fresh node put in its place, and a rolling restart of all
 * three nodes; both time how long routing into the DLQ stalled and compare
 * looks (inspect --json --all) through different nodes item for item.
 * DLQB_TEST_FILTER runs one case (cmocka's filter, e.g. '*disk_lost'). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
                         "DLQ_BRIDGE_DLQ_QUEUE_TYPE=quorum",
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
  const char *extra[] = {url, "DLQ_BRIDGE_DLQ_QUEUE_TYPE=quorum", NULL};
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

/* ---- issue 41: the DLQ's leader lost with its disk; a rolling restart --- */

/* What both cases below share. While the incident lasts, a worker
 * elsewhere keeps reporting final failures (request_id trk-N, attempt 2 of
 * 3, with worker_error) to dsr.dlx every TRICKLE_MS through the test's
 * connection (node 3): each goes straight to the DLQ (max_attempts), so
 * DLQ arrivals go on before, during and after the fault whatever the
 * flow's own tasks are doing, and how long routing into the DLQ stalled
 * can be timed. Arrivals are seen as the DLQ's depth (passive declare
 * through node 3) passing its highest so far. */
#define TRICKLE_MS    100
#define TRICKLE_MAX   8000
#define WATCH_MS      50
#define MAX_MARKS     3
#define LOOK_TIMEOUTS 180
/* The flow's test worker pauses (the hook waits, still trickling and
 * watching) once this many acks are done and the incident is not over,
 * so that the flow cannot settle, and its bridges be stopped, before the
 * "after" part has been seen. 390 of the 480 tasks complete, fewer when
 * cut deliveries turn crash-once tasks into poison. */
#define PAUSE_AT_ACKS 300

typedef struct {
  /* the trickle */
  bool on;
  int next, confirmed, publish_failures;
  int64_t last_at;
  int64_t first_try_at[TRICKLE_MAX]; /* per N: when its report was first sent */
  /* DLQ arrivals */
  int64_t last_watch_at;
  long max_depth;
  int arrivals;
  int64_t first_arrival, last_arrival, longest_gap, longest_gap_end;
  /* faults: a kill, or each node's stop; first arrival after each */
  int nmarks;
  int64_t mark_at[MAX_MARKS], last_before[MAX_MARKS], first_after[MAX_MARKS];
} dlq_watch;

static void trickle_step(fx_case *t, dlq_watch *w) {
  int64_t now = th_now_ms();
  if (!w->on || t->conn == NULL || now - w->last_at < TRICKLE_MS || w->next >= TRICKLE_MAX) return;
  w->last_at = now;
  char id[32];
  snprintf(id, sizeof id, "trk-%d", w->next);
  if (w->first_try_at[w->next] == 0) w->first_try_at[w->next] = now;
  th_msg m;
  th_msg_init(&m);
  int rc = th_msg_task(&m, id) == 0 && th_msg_add_str(&m, "worker_error", "cluster: final") == 0 &&
                   th_msg_add_int(&m, "attempt", 2) == 0
               ? th_publish_within(t->conn, "dsr.dlx", "", &m, 2000)
               : -1;
  th_msg_release(&m);
  /* A report nacked or unconfirmed is sent again under the same id (it
   * may be in already: then it is a duplicate, as a real worker's). */
  if (rc == 0) {
    w->confirmed++;
    w->next++;
  } else {
    w->publish_failures++;
  }
}

static void watch_step(fx_case *t, dlq_watch *w) {
  int64_t now = th_now_ms();
  if (t->conn == NULL || now - w->last_watch_at < WATCH_MS) return;
  w->last_watch_at = now;
  long d = th_queue_depth(t->conn, "dsr.dlq.manual");
  now = th_now_ms();
  if (d <= w->max_depth) return;
  w->max_depth = d;
  if (w->arrivals == 0) w->first_arrival = now;
  else if (now - w->last_arrival > w->longest_gap) {
    w->longest_gap = now - w->last_arrival;
    w->longest_gap_end = now;
  }
  for (int k = 0; k < w->nmarks; k++)
    if (w->first_after[k] == 0 && now > w->mark_at[k]) {
      w->first_after[k] = now;
      w->last_before[k] = w->last_arrival;
    }
  w->last_arrival = now;
  w->arrivals++;
}

static void watch_mark(dlq_watch *w, int64_t at) {
  if (w->nmarks < MAX_MARKS) w->mark_at[w->nmarks++] = at;
}

/* Runs script (bash) in the background with its output in log; its steps
 * print "mark NAME EPOCH_MS" lines (see bg_mark) and "mark failed ..." on
 * a failure. */
static int bg_start(const char *script_path, const char *log, const char *body) {
  FILE *f = fopen(script_path, "w");
  if (f == NULL) return -1;
  fprintf(f,
          "step() { n=$1; shift; if \"$@\"; then echo \"mark $n $(date +%%s%%3N)\"; "
          "else echo \"mark failed $(date +%%s%%3N) $n\"; exit 1; fi; }\n"
          "S='%s'\n%s\necho \"mark done $(date +%%s%%3N)\"\n",
          g_script, body);
  fclose(f);
  return sh("bash '%s' >'%s' 2>&1 &", script_path, log);
}

/* The epoch ms of "mark name" in log, 0 when not (yet) there, -1 when the
 * script failed. */
static int64_t bg_mark(const char *log, const char *name) {
  FILE *f = fopen(log, "r");
  if (f == NULL) return 0;
  char line[512], want[80];
  snprintf(want, sizeof want, "mark %s ", name);
  int64_t at = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "mark failed ", 12) == 0) at = -1;
    else if (at == 0 && strncmp(line, want, strlen(want)) == 0) at = atoll(line + strlen(want));
  }
  fclose(f);
  return at;
}

/* True when every quorum queue and stream of vhost lists node (name@localhost)
 * among its members and online, and node 3's management API says node runs. */
static bool members_complete(const char *vhost, const char *node, bool say) {
  char path[TH_PATH_MAX];
  snprintf(path, sizeof path, "/api/queues/%s?columns=name,type,members,online", vhost);
  json_object *qs = th_mgmt_get_json(path);
  if (qs == NULL || !json_object_is_type(qs, json_type_array)) {
    if (qs != NULL) json_object_put(qs);
    return false;
  }
  bool all = true;
  for (size_t i = 0; i < json_object_array_length(qs); i++) {
    json_object *q = json_object_array_get_idx(qs, i);
    const char *type = th_json_str(q, "type");
    if (strcmp(type, "quorum") != 0 && strcmp(type, "stream") != 0) continue;
    for (int k = 0; k < 2; k++) {
      json_object *list = NULL;
      bool in = false;
      if (json_object_object_get_ex(q, k == 0 ? "members" : "online", &list) &&
          json_object_is_type(list, json_type_array))
        for (size_t j = 0; j < json_object_array_length(list); j++)
          in = in || strcmp(json_object_get_string(json_object_array_get_idx(list, j)), node) == 0;
      if (!in) {
        if (say)
          fprintf(stderr, "cluster: %s %s: %s not %s\n", type, th_json_str(q, "name"), node,
                  k == 0 ? "a member" : "online");
        all = false;
      }
    }
  }
  json_object_put(qs);
  snprintf(path, sizeof path, "/api/nodes/%s?columns=name,running", node);
  json_object *n = th_mgmt_get_json(path);
  json_object *running = NULL;
  bool up = n != NULL && json_object_object_get_ex(n, "running", &running) &&
            json_object_get_boolean(running);
  if (n != NULL) json_object_put(n);
  return all && up;
}

/* Membership of every quorum queue and stream of vhost, on stdout: what
 * forget_cluster_node and grow did (they differ between versions). */
static void print_members(const char *vhost, const char *when) {
  sh("curl -s -m 5 -u guest:guest 'http://127.0.0.1:%d/api/queues/%s?columns=name,type,members,"
     "online,leader' | python3 -c 'import json,sys\n"
     "for q in json.load(sys.stdin):\n"
     "    if q.get(\"type\") in (\"quorum\", \"stream\"):\n"
     "        s = lambda k: \",\".join(sorted(m.split(\"@\")[0].replace(\"dlqb-\", \"\") for m in "
     "(q.get(k) or [])))\n"
     "        print(\"cluster: %s: %%s %%s members=%%s online=%%s leader=%%s\" %% (q[\"name\"], "
     "q[\"type\"], s(\"members\"), s(\"online\"), str(q.get(\"leader\")).split(\"@\")[0]))'",
     g_port[2] + 1, vhost, when);
}

/* The node index whose name is node ("name@localhost"), -1 if none. */
static int node_index(const char *node) {
  for (int i = 0; i < 3; i++) {
    char full[160];
    snprintf(full, sizeof full, "%s@localhost", g_name[i]);
    if (strcmp(full, node) == 0) return i;
  }
  return -1;
}

typedef struct {
  const char *vhost, *node;
} member_wait;

static bool members_complete_cb(void *arg) {
  const member_wait *m = arg;
  return members_complete(m->vhost, m->node, false);
}

/* True once the background script of log has ended (done or failed). */
static bool bg_over(void *log) { return bg_mark(log, "done") != 0; }

/* ---- looks from two hosts (dlq-bridge inspect --json --all) ----------- */

typedef struct {
  int n;
  char (*key)[320]; /* per item, in queue order: message_id|request_id|dlq_reason|dlq_at */
  char source[16];  /* catalog.source: "catalog" or "queue" */
  bool agrees, complete;
  long total;
} look;

static void look_free(look *l) {
  free(l->key);
  memset(l, 0, sizeof *l);
}

/* `dlq-bridge inspect --json --all` with DLQ_BRIDGE_URL at node i, as an
 * operator on another host would run it: its own catalog checkpoint
 * (per node, kept from one look to the next, as a host's state would be). */
static int look_at(fx_case *t, int i, look *out) {
  memset(out, 0, sizeof *out);
  char json[TH_PATH_MAX + 32], err[TH_PATH_MAX + 32];
  snprintf(json, sizeof json, "%s/look-n%d.json", g_dir[2], i + 1);
  snprintf(err, sizeof err, "%s/look-n%d.err", g_dir[2], i + 1);
  if (sh("env DLQ_BRIDGE_CONFIG= DLQ_BRIDGE_DLQ_QUEUE_TYPE=quorum DLQ_BRIDGE_URL='amqp://guest:guest@127.0.0.1:%d/%s' timeout %d "
         "'%s' inspect --json --all --catalog-checkpoint '%s/look-n%d.ckpt' >'%s' 2>'%s' || "
         "{ cat '%s' >&2; false; }",
         g_port[i], t->vhost.name, LOOK_TIMEOUTS, th_env_get()->bridge_bin, g_dir[2], i + 1, json,
         err, err) != 0)
    return -1;
  json_object *j = json_object_from_file(json), *items = NULL, *cat = NULL, *v = NULL;
  if (j == NULL || !json_object_object_get_ex(j, "items", &items) ||
      !json_object_object_get_ex(j, "catalog", &cat)) {
    fprintf(stderr, "cluster: node %d's look: no items or catalog in %s\n", i + 1, json);
    if (j != NULL) json_object_put(j);
    return -1;
  }
  snprintf(out->source, sizeof out->source, "%s", th_json_str(cat, "source"));
  out->agrees = json_object_object_get_ex(cat, "agrees", &v) && json_object_get_boolean(v);
  out->complete = json_object_object_get_ex(j, "complete", &v) && json_object_get_boolean(v);
  out->total = json_object_object_get_ex(j, "total", &v) ? (long)json_object_get_int64(v) : -1;
  out->n = (int)json_object_array_length(items);
  out->key = calloc((size_t)out->n + 1, sizeof *out->key);
  if (out->key == NULL) {
    json_object_put(j);
    return -1;
  }
  for (int k = 0; k < out->n; k++) {
    json_object *it = json_object_array_get_idx(items, (size_t)k);
    snprintf(out->key[k], sizeof out->key[k], "%s|%s|%s|%s", th_json_str(it, "message_id"),
             th_json_str(it, "request_id"), th_json_str(it, "dlq_reason"),
             th_json_str(it, "dlq_at"));
  }
  json_object_put(j);
  return 0;
}

/* Item for item, in order; says the first difference. */
static bool looks_agree(const look *a, int ia, const look *b, int ib) {
  if (a->n != b->n) {
    fprintf(stderr, "cluster: node %d's look lists %d items, node %d's %d\n", ia + 1, a->n, ib + 1,
            b->n);
    return false;
  }
  for (int k = 0; k < a->n; k++)
    if (strcmp(a->key[k], b->key[k]) != 0) {
      fprintf(stderr, "cluster: item %d: node %d has %s, node %d %s\n", k, ia + 1, a->key[k],
              ib + 1, b->key[k]);
      return false;
    }
  return true;
}

/* Looks through node ia and node ib while things may still move: a, b,
 * then a again; when a did not change across b's look, b must equal it
 * (tried up to 4 times). Returns 1 when compared and equal, 0 when they
 * differ, -1 when no quiet moment came or a look failed. a is kept. */
static int compare_looks(fx_case *t, int ia, int ib, look *a, const char *when) {
  for (int tries = 0; tries < 4; tries++) {
    look b, a2;
    if (look_at(t, ia, a) != 0) return -1;
    if (look_at(t, ib, &b) != 0) return -1;
    if (look_at(t, ia, &a2) != 0) {
      look_free(&b);
      return -1;
    }
    bool quiet = a->n == a2.n;
    for (int k = 0; quiet && k < a->n; k++) quiet = strcmp(a->key[k], a2.key[k]) == 0;
    look_free(&a2);
    if (!quiet) {
      look_free(a);
      look_free(&b);
      continue;
    }
    bool same = looks_agree(a, ia, &b, ib);
    printf("cluster: looks %s: node %d %d items (source %s, agrees %d, complete %d), node %d %d "
           "items (source %s, agrees %d, complete %d): %s\n",
           when, ia + 1, a->n, a->source, a->agrees, a->complete, ib + 1, b.n, b.source, b.agrees,
           b.complete, same ? "identical" : "DIFFERENT");
    fflush(stdout);
    bool ok = same && a->complete && b.complete;
    look_free(&b);
    return ok ? 1 : 0;
  }
  fprintf(stderr, "cluster: the DLQ changed during every pair of looks %s\n", when);
  return -1;
}

/* "2026-01-02T03:04:05.678Z" -> epoch ms, 0 when it is not that. */
static int64_t iso_ms(const char *s) {
  struct tm tm = {0};
  int ms = 0;
  if (sscanf(s, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
             &tm.tm_min, &tm.tm_sec, &ms) < 6)
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return (int64_t)timegm(&tm) * 1000 + ms;
}

/* What the final looks found of the trickle. */
typedef struct {
  int copies, missing, duplicates;
  int64_t max_wait;
  int max_wait_id, over_1s;
} trickle_tally;

/* Every confirmed report trk-N must be in l; how long each waited from
 * its first sending to its dlq_at (the bridge's routing into the DLQ). */
static void trickle_count(const dlq_watch *w, const look *l, trickle_tally *out) {
  memset(out, 0, sizeof *out);
  int *seen = calloc(TRICKLE_MAX, sizeof *seen);
  if (seen == NULL) return;
  for (int k = 0; k < l->n; k++) {
    int n;
    if (sscanf(l->key[k], "msg-trk-%d|", &n) != 1 || n < 0 || n >= TRICKLE_MAX) continue;
    out->copies++;
    if (seen[n]++ > 0) {
      out->duplicates++;
      continue;
    }
    const char *at = strrchr(l->key[k], '|');
    int64_t wait = at != NULL && w->first_try_at[n] > 0 ? iso_ms(at + 1) - w->first_try_at[n] : 0;
    if (wait > out->max_wait) {
      out->max_wait = wait;
      out->max_wait_id = n;
    }
    out->over_1s += wait > 1000;
  }
  for (int n = 0; n < w->confirmed; n++)
    if (seen[n] == 0) {
      if (out->missing++ < 20) fprintf(stderr, "cluster: confirmed report trk-%d is lost\n", n);
    }
  free(seen);
}

static void watch_print(const dlq_watch *w, const char *what) {
  printf("cluster: DLQ arrivals: %d seen, longest gap %.2f s (ending at %+.1f s from the first "
         "fault); trickle: %d confirmed, %d publishes failed\n",
         w->arrivals, w->longest_gap / 1000.0,
         w->nmarks > 0 ? (w->longest_gap_end - w->mark_at[0]) / 1000.0 : 0.0, w->confirmed,
         w->publish_failures);
  for (int k = 0; k < w->nmarks; k++)
    printf("cluster: %s %d: first DLQ arrival %.2f s after it; gap over it %.2f s\n", what, k + 1,
           w->first_after[k] ? (w->first_after[k] - w->mark_at[k]) / 1000.0 : -1.0,
           w->first_after[k] ? (w->first_after[k] - w->last_before[k]) / 1000.0 : -1.0);
  fflush(stdout);
}

/* The end of both cases, run with the bridges stopped and before the flow
 * drains the queues: the looks through nodes 2 and 3 (and node 1) agree
 * item for item with each other and with the DLQ's depth; every item seen
 * before the fault and every confirmed report is there. */
typedef struct {
  dlq_watch *w;
  look *before; /* items seen before the fault (may be empty) */
  look final;
  trickle_tally tally;
  int agreed; /* compare_looks over nodes 2/3 and 2/1 */
  bool before_all_there;
  long depth;
} end_check;

static int end_looks(fx_case *t, void *arg) {
  end_check *e = arg;
  e->depth = th_queue_depth(t->conn, "dsr.dlq.manual");
  int a = compare_looks(t, 1, 2, &e->final, "at the end, nodes 2 and 3");
  look other = {0};
  int b = a == 1 ? compare_looks(t, 1, 0, &other, "at the end, nodes 2 and 1") : a;
  look_free(&other);
  e->agreed = a == 1 && b == 1 ? 1 : a < 0 || b < 0 ? -1 : 0;
  e->before_all_there = true;
  for (int k = 0; e->before != NULL && k < e->before->n; k++) {
    bool in = false;
    for (int j = 0; !in && j < e->final.n; j++)
      in = strcmp(e->before->key[k], e->final.key[j]) == 0;
    if (!in) {
      fprintf(stderr, "cluster: %s, in the DLQ before the fault, is gone\n", e->before->key[k]);
      e->before_all_there = false;
    }
  }
  trickle_count(e->w, &e->final, &e->tally);
  printf("cluster: final look: %d items (DLQ depth %ld), source %s; of the trickle: %d copies, "
         "%d missing, %d duplicates; longest wait report -> dlq_at %.2f s (trk-%d), %d over 1 s\n",
         e->final.n, e->depth, e->final.source, e->tally.copies, e->tally.missing,
         e->tally.duplicates, e->tally.max_wait / 1000.0, e->tally.max_wait_id, e->tally.over_1s);
  fflush(stdout);
  return 0;
}

static void end_assert(fx_case *t, const flow_opts *o, const flow_result *r, end_check *e) {
  FX_CHECK(t, r->settled);
  assert_int_equal(r->lost, 0);
  assert_int_equal(r->in_other, 0);
  assert_true(r->completed + r->in_dlq >= o->tasks);
  assert_int_equal(r->bridge_exit_failures, 0);
  assert_int_equal(e->agreed, 1);
  assert_int_equal(e->final.n, e->depth);
  assert_true(strcmp(e->final.source, "catalog") == 0 || strcmp(e->final.source, "queue") == 0);
  assert_true(e->before_all_there);
  assert_int_equal(e->tally.missing, 0);
  /* The drain counts the trickle's copies (not tasks of the flow) as
   * foreign, and found them all in the DLQ, as the looks did. */
  assert_int_equal(r->foreign, e->tally.copies);
  assert_int_equal(r->in_dlq + e->tally.copies, e->final.n);
}

static char *bridge_url_env(fx_case *t, int node, char *buf, size_t len) {
  snprintf(buf, len, "DLQ_BRIDGE_URL=amqp://guest:guest@127.0.0.1:%d/%s", g_port[node],
           t->vhost.name);
  return buf;
}

static int start_second_bridge(fx_case *t) {
  char url[TH_URL_MAX + 32];
  const char *env[] = {"DLQ_BRIDGE_METRICS_ADDR=off",         "DLQ_BRIDGE_DLQ_QUEUE_TYPE=quorum",
                       "DLQ_BRIDGE_RETRY_DELAYS=" DELAYS,     "DLQ_BRIDGE_RETRY_JITTER=0",
                       "DLQ_BRIDGE_MAX_ATTEMPTS=3",           "DLQ_BRIDGE_CATALOG_WRITERS=guest",
                       bridge_url_env(t, 1, url, sizeof url), NULL};
  if (th_bridge_start(&t->bridges[1], &t->vhost, env, "bridge2-node2") != 0) return -1;
  t->nbridges = 2;
  return 0;
}

/* ---- (a) the DLQ's leader killed, its disk lost, a fresh node in its place */

typedef struct {
  dlq_watch w;
  bool second_started, killed, replace_started, replaced, looked_mid, done;
  int mid_agreed; /* compare_looks in the middle: 1 agreed */
  int victim, kill_at_acks, down_ms, after_ms;
  bool new_name;
  char old_node[160], new_node[160], log[TH_PATH_MAX + 32], script[TH_PATH_MAX + 32];
  int64_t started_at, killed_at, replace_at, forgot_at, up_at, joined_at, grown_at, members_at,
      last_member_check, failed_at;
  look before;
} replace_state;

static int replace_begin(fx_case *t, replace_state *c) {
  /* As an operator whose node lost its disk: forget it on a survivor
   * (node 3), start a fresh node with an empty directory on the same
   * ports (the same name, or DLQB_TEST_CLUSTER_NEW_NAME=1 a new one; both
   * measured on 3.10.8 and 4.0.5), join it, then add it back to the
   * quorum queues (grow) and streams (add_replica). */
  char body[8 * TH_PATH_MAX];
  const char *newname = c->new_node;
  int n =
      snprintf(body, sizeof body,
               "step forgot \"$S\" ctl '%s' forget_cluster_node '%s'\n"
               "step fresh sh -c \"mkdir -p '%s/home' && cp '%s/home/.erlang.cookie' '%s/home/' "
               "&& chmod 400 '%s/home/.erlang.cookie' && cp '%s/advanced.config' '%s/'\"\n"
               "step up \"$S\" start '%s' %d '%.*s'\n"
               "step joined \"$S\" join '%s' '%s@localhost'\n"
               "step grown \"$S\" queues '%s' grow '%s' all\n",
               g_dir[2], c->old_node, g_dir[c->victim], g_dir[2], g_dir[c->victim],
               g_dir[c->victim], g_dir[2], g_dir[c->victim], g_dir[c->victim], g_port[c->victim],
               (int)(strchr(newname, '@') - newname), newname, g_dir[c->victim], g_name[2],
               g_dir[2], newname);
  /* On 3.10.8 forget_cluster_node leaves the node in the streams' member
   * lists (a fresh node of the same name takes its replicas up again);
   * on 4.0.5 it removes it, so each stream gets a replica again (on 3.10
   * that answers "already a member": not a failure here; the membership
   * is checked afterwards either way). */
  char path[TH_PATH_MAX];
  snprintf(path, sizeof path, "/api/queues/%s?columns=name,type", t->vhost.name);
  json_object *qs = th_mgmt_get_json(path);
  for (size_t i = 0; qs != NULL && i < json_object_array_length(qs); i++) {
    json_object *q = json_object_array_get_idx(qs, i);
    if (strcmp(th_json_str(q, "type"), "stream") == 0 && n > 0 && (size_t)n < sizeof body)
      n += snprintf(body + n, sizeof body - (size_t)n,
                    "\"$S\" streams '%s' add_replica --vhost '%s' '%s' '%s' || true\n", g_dir[2],
                    t->vhost.name, th_json_str(q, "name"), newname);
  }
  if (qs != NULL) json_object_put(qs);
  if (n < 0 || (size_t)n >= sizeof body) return -1;
  snprintf(c->log, sizeof c->log, "%s/replace.log", g_dir[2]);
  snprintf(c->script, sizeof c->script, "%s/replace.sh", g_dir[2]);
  c->replace_at = th_now_ms();
  printf("cluster: replacing node %d (%s) by a fresh node %s, %.1f s after the kill\n",
         c->victim + 1, c->old_node, newname, (c->replace_at - c->killed_at) / 1000.0);
  fflush(stdout);
  return bg_start(c->script, c->log, body);
}

/* One step of the incident, from the hook or while the worker pauses:
 * trickle, watch, and the replacement's progress. Non-zero aborts. */
static int replace_step(fx_case *t, replace_state *c) {
  trickle_step(t, &c->w);
  watch_step(t, &c->w);
  if (!c->killed || c->done) return 0;
  int64_t now = th_now_ms();
  if (!c->replace_started) {
    if (now - c->killed_at < c->down_ms) return 0;
    c->replace_started = true;
    return replace_begin(t, c);
  }
  if (!c->replaced) {
    int64_t done = bg_mark(c->log, "done");
    if (done < 0) {
      fprintf(stderr, "cluster: the replacement failed:\n");
      sh("cat '%s' >&2", c->log);
      return -1;
    }
    if (done == 0) return 0;
    c->forgot_at = bg_mark(c->log, "forgot");
    c->up_at = bg_mark(c->log, "up");
    c->joined_at = bg_mark(c->log, "joined");
    c->grown_at = bg_mark(c->log, "grown");
    c->replaced = true;
    print_members(t->vhost.name, "after grow and add_replica");
    return 0;
  }
  if (c->members_at == 0) {
    if (now - c->last_member_check < 500) return 0;
    c->last_member_check = now;
    if (!members_complete(t->vhost.name, c->new_node, false)) {
      if (now - c->grown_at > 120000) {
        members_complete(t->vhost.name, c->new_node, true);
        print_members(t->vhost.name, "memberships not complete 120 s after grow");
        return -1;
      }
      return 0;
    }
    c->members_at = th_now_ms();
    print_members(t->vhost.name, "every member online");
    return 0;
  }
  if (!c->looked_mid) {
    /* In the middle: the new node is a full member again, the flow still
     * runs. Looks through nodes 2 and 3 while the trickle pauses. */
    c->looked_mid = true;
    c->w.on = false;
    look a;
    c->mid_agreed = compare_looks(t, 1, 2, &a, "in the middle (new node a member)");
    look_free(&a);
    c->w.on = true;
    c->w.last_at = th_now_ms();
    return 0;
  }
  if (now - c->members_at >= c->after_ms) {
    c->done = true;
    c->w.on = false;
  }
  return 0;
}

typedef struct {
  fx_case *t;
  replace_state *c;
  int rc;
} replace_wait;

static bool replace_over(void *arg) {
  replace_wait *rw = arg;
  if (replace_step(rw->t, rw->c) != 0) {
    rw->rc = -1;
    return true;
  }
  return rw->c->done;
}

static int replace_fault(fx_case *t, void *arg, const flow_result *r) {
  replace_state *c = arg;
  if (!c->second_started) {
    if (start_second_bridge(t) != 0) return -1;
    c->second_started = true;
    c->w.on = true;
  }
  if (!c->killed && r->acks >= c->kill_at_acks) {
    /* What the DLQ held just before: it must all be there at the end. */
    if (look_at(t, 2, &c->before) != 0) return -1;
    char path[TH_PATH_MAX];
    snprintf(path, sizeof path, "/api/queues/%s/dsr.dlq.manual", t->vhost.name);
    json_object *q = th_mgmt_get_json(path);
    snprintf(c->old_node, sizeof c->old_node, "%s", q != NULL ? th_json_str(q, "leader") : "");
    if (q != NULL) json_object_put(q);
    c->victim = node_index(c->old_node);
    /* The harness's connections (the flow's worker and publisher, the
     * trickle) are on node 3: bridge 1 declares first, on node 1, so
     * node 1 leads (3.10 and 4.0 place a new quorum queue's leader on the
     * declaring node). */
    if (c->victim < 0 || c->victim == 2) {
      fprintf(stderr, "cluster: dsr.dlq.manual is led by '%s', not node 1 or 2\n", c->old_node);
      return -1;
    }
    if (c->new_name)
      snprintf(c->new_node, sizeof c->new_node, "dlqb-c%dr-%d@localhost", c->victim + 1, g_port[0]);
    else snprintf(c->new_node, sizeof c->new_node, "%s", c->old_node);
    print_members(t->vhost.name, "before the kill");
    c->killed_at = th_now_ms();
    watch_mark(&c->w, c->killed_at);
    printf("cluster: killing node %d (%s, the DLQ's leader) with %d acks done, %d DLQ items, at "
           "flow +%.1f s, and deleting its directory\n",
           c->victim + 1, c->old_node, r->acks, c->before.n,
           (c->killed_at - c->started_at) / 1000.0);
    fflush(stdout);
    if (sh("'%s' kill '%s' && rm -rf '%s'", g_script, g_dir[c->victim], g_dir[c->victim]) != 0)
      return -1;
    c->killed = true;
  }
  if (replace_step(t, c) != 0) return -1;
  if (c->killed && !c->done && r->acks >= PAUSE_AT_ACKS) {
    replace_wait rw = {t, c, 0};
    int64_t from = th_now_ms();
    th_wait_until(replace_over, &rw, 300000);
    printf("cluster: the test's worker paused %.1f s for the incident to end\n",
           (th_now_ms() - from) / 1000.0);
    fflush(stdout);
    if (rw.rc != 0 || !c->done) return -1;
  }
  return 0;
}

static void test_cluster_dlq_leader_disk_lost(void **state) {
  fx_case *t = *state;
  char url[TH_URL_MAX + 32];
  const char *extra[] = {bridge_url_env(t, 0, url, sizeof url), "DLQ_BRIDGE_DLQ_QUEUE_TYPE=quorum",
                         NULL};
  static replace_state c; /* large (the trickle's times): not on the stack */
  memset(&c, 0, sizeof c);
  c.kill_at_acks = 60;
  c.down_ms = env_int("DLQB_TEST_CLUSTER_DOWN_MS", 10000);
  c.after_ms = env_int("DLQB_TEST_CLUSTER_AFTER_MS", 15000);
  c.new_name = env_int("DLQB_TEST_CLUSTER_NEW_NAME", 0) != 0;
  c.started_at = th_now_ms();
  end_check e = {.w = &c.w, .before = &c.before};
  flow_opts o = {.tasks = 480,
                 .bridges = 1,
                 .retry_delays = DELAYS,
                 .timeout_ms = 20000 + c.down_ms + env_int("DLQB_TEST_CLUSTER_DRAIN_MS", 240000),
                 .bridge_env = extra,
                 .fault = replace_fault,
                 .fault_arg = &c,
                 .before_drain = end_looks,
                 .before_drain_arg = &e};
  flow_result r;
  monitor_start(t->vhost.name);
  int rc = flow_run(t, &o, &r);
  int64_t end = th_now_ms();
  monitor_stop();
  if (c.killed && !c.replace_started) {
    /* The flow gave up early: still put a node back for the next case. */
    if (replace_begin(t, &c) == 0) th_wait_until(bg_over, c.log, 180000);
  }
  flow_print("cluster leader disk lost", &o, &r);
  if (c.replaced) {
    printf("cluster: node %d killed at flow +%.1f s; after the kill: forgotten +%.1f s, fresh node "
           "up +%.1f s, joined +%.1f s, grown +%.1f s, every member online +%.1f s; flow %s at "
           "+%.1f s (%.1f s in all)\n",
           c.victim + 1, (c.killed_at - c.started_at) / 1000.0,
           (c.forgot_at - c.killed_at) / 1000.0, (c.up_at - c.killed_at) / 1000.0,
           (c.joined_at - c.killed_at) / 1000.0, (c.grown_at - c.killed_at) / 1000.0,
           c.members_at ? (c.members_at - c.killed_at) / 1000.0 : -1.0,
           r.settled ? "settled" : "gave up", (end - c.killed_at) / 1000.0,
           (end - c.started_at) / 1000.0);
  }
  watch_print(&c.w, "kill");
  if (c.new_name && c.replaced)
    snprintf(g_name[c.victim], sizeof g_name[c.victim], "%.*s",
             (int)(strchr(c.new_node, '@') - c.new_node), c.new_node);
  assert_int_equal(rc, 0);
  assert_true(c.killed && c.replaced && c.done);
  assert_true(c.members_at > 0);
  /* Routing into the DLQ went on without the dead leader (the quorum
   * DLQ's two other members elect a new one): arrivals after the kill,
   * while the node was still gone. */
  assert_true(c.w.first_after[0] > 0);
  assert_true(c.w.first_after[0] < c.up_at);
  assert_int_equal(c.mid_agreed, 1);
  end_assert(t, &o, &r, &e);
  look_free(&c.before);
  look_free(&e.final);
}

/* ---- (b) a rolling restart of all three nodes --------------------------- */

typedef struct {
  dlq_watch w;
  bool second_started, done;
  int step; /* the node restarting (0..2), 3 when all are done */
  bool stopping;
  int start_at_acks;
  char log[TH_PATH_MAX + 32], script[TH_PATH_MAX + 32];
  int64_t started_at, stop_at[3], stopped_at[3], up_at[3], rejoined_at[3], last_check;
} rolling_state;

static int rolling_launch(rolling_state *c) {
  int i = c->step;
  char body[4 * TH_PATH_MAX];
  snprintf(body, sizeof body, "step stopped \"$S\" stop '%s'\nstep up \"$S\" start '%s' %d '%s'\n",
           g_dir[i], g_dir[i], g_port[i], g_name[i]);
  snprintf(c->log, sizeof c->log, "%s/rolling-%d.log", g_dir[2], i + 1);
  snprintf(c->script, sizeof c->script, "%s/rolling-%d.sh", g_dir[2], i + 1);
  c->stop_at[i] = th_now_ms();
  watch_mark(&c->w, c->stop_at[i]);
  printf("cluster: rolling restart: stopping node %d at flow +%.1f s\n", i + 1,
         (c->stop_at[i] - c->started_at) / 1000.0);
  fflush(stdout);
  c->stopping = true;
  return bg_start(c->script, c->log, body);
}

static void rolling_rejoined(fx_case *t, rolling_state *c) {
  int i = c->step;
  c->rejoined_at[i] = th_now_ms();
  printf("cluster: node %d stopped in %.1f s, answered %.1f s after the stop, every member "
         "online %.1f s after it\n",
         i + 1, (c->stopped_at[i] - c->stop_at[i]) / 1000.0, (c->up_at[i] - c->stop_at[i]) / 1000.0,
         (c->rejoined_at[i] - c->stop_at[i]) / 1000.0);
  fflush(stdout);
  print_members(t->vhost.name, "after the restart");
  c->stopping = false;
  c->step++;
}

/* Node 3 carries the test's own connections (the flow's worker and
 * publisher, the trickle, the management API): it restarts while the
 * hook waits, the trickle and the watch stopping with it. */
static int rolling_node3(fx_case *t, rolling_state *c) {
  c->stop_at[2] = th_now_ms();
  watch_mark(&c->w, c->stop_at[2]);
  printf("cluster: rolling restart: stopping node 3 (the test's) at flow +%.1f s\n",
         (c->stop_at[2] - c->started_at) / 1000.0);
  fflush(stdout);
  th_close(t->conn);
  t->conn = NULL;
  if (sh("'%s' stop '%s'", g_script, g_dir[2]) != 0) return -1;
  c->stopped_at[2] = th_now_ms();
  if (start_node(2) != 0) return -1;
  c->up_at[2] = th_now_ms();
  char node[160];
  snprintf(node, sizeof node, "%s@localhost", g_name[2]);
  member_wait mw = {t->vhost.name, node};
  th_wait_until(members_complete_cb, &mw, 120000);
  if (!members_complete(t->vhost.name, node, true)) return -1;
  if ((t->conn = th_connect(&t->vhost)) == NULL) return -1;
  rolling_rejoined(t, c);
  c->w.last_at = th_now_ms();
  return 0;
}

static int rolling_step(fx_case *t, rolling_state *c) {
  trickle_step(t, &c->w);
  watch_step(t, &c->w);
  if (c->done) return 0;
  if (c->step == 3) {
    c->done = true;
    c->w.on = false;
    return 0;
  }
  if (c->step == 2) return rolling_node3(t, c);
  if (!c->stopping) return rolling_launch(c);
  int i = c->step;
  if (c->up_at[i] == 0) {
    int64_t up = bg_mark(c->log, "up");
    if (up < 0 || bg_mark(c->log, "stopped") < 0) {
      fprintf(stderr, "cluster: restarting node %d failed:\n", i + 1);
      sh("cat '%s' >&2", c->log);
      return -1;
    }
    if (up == 0) return 0;
    c->stopped_at[i] = bg_mark(c->log, "stopped");
    c->up_at[i] = up;
  }
  int64_t now = th_now_ms();
  if (now - c->last_check < 500) return 0;
  c->last_check = now;
  char node[160];
  snprintf(node, sizeof node, "%s@localhost", g_name[i]);
  if (members_complete(t->vhost.name, node, false)) rolling_rejoined(t, c);
  else if (now - c->up_at[i] > 120000) {
    members_complete(t->vhost.name, node, true);
    return -1;
  }
  return 0;
}

typedef struct {
  fx_case *t;
  rolling_state *c;
  int rc;
} rolling_wait;

static bool rolling_over(void *arg) {
  rolling_wait *rw = arg;
  if (rolling_step(rw->t, rw->c) != 0) {
    rw->rc = -1;
    return true;
  }
  return rw->c->done;
}

static int rolling_fault(fx_case *t, void *arg, const flow_result *r) {
  rolling_state *c = arg;
  if (!c->second_started) {
    if (start_second_bridge(t) != 0) return -1;
    c->second_started = true;
    c->w.on = true;
  }
  if (r->acks < c->start_at_acks) {
    trickle_step(t, &c->w);
    watch_step(t, &c->w);
    return 0;
  }
  if (rolling_step(t, c) != 0) return -1;
  if (!c->done && (r->acks >= PAUSE_AT_ACKS || c->step == 2)) {
    rolling_wait rw = {t, c, 0};
    int64_t from = th_now_ms();
    th_wait_until(rolling_over, &rw, 600000);
    printf("cluster: the test's worker paused %.1f s for the rolling restart to end\n",
           (th_now_ms() - from) / 1000.0);
    fflush(stdout);
    if (rw.rc != 0 || !c->done) return -1;
  }
  return 0;
}

static void test_cluster_rolling_restart(void **state) {
  fx_case *t = *state;
  char url[TH_URL_MAX + 32];
  const char *extra[] = {bridge_url_env(t, 0, url, sizeof url), "DLQ_BRIDGE_DLQ_QUEUE_TYPE=quorum",
                         NULL};
  static rolling_state c;
  memset(&c, 0, sizeof c);
  c.start_at_acks = 40;
  c.started_at = th_now_ms();
  end_check e = {.w = &c.w};
  flow_opts o = {.tasks = 480,
                 .bridges = 1,
                 .retry_delays = DELAYS,
                 .timeout_ms = env_int("DLQB_TEST_CLUSTER_DRAIN_MS", 240000) + 120000,
                 .bridge_env = extra,
                 .fault = rolling_fault,
                 .fault_arg = &c,
                 .before_drain = end_looks,
                 .before_drain_arg = &e};
  flow_result r;
  monitor_start(t->vhost.name);
  int rc = flow_run(t, &o, &r);
  int64_t end = th_now_ms();
  monitor_stop();
  flow_print("cluster rolling restart", &o, &r);
  int64_t longest = 0;
  for (int i = 0; i < 3; i++)
    if (c.rejoined_at[i] - c.stop_at[i] > longest) longest = c.rejoined_at[i] - c.stop_at[i];
  printf("cluster: rolling restart over %.1f s (flow +%.1f to +%.1f s), the longest node restart "
         "(stop to every member online) %.1f s; flow %s %.1f s in all\n",
         (c.rejoined_at[2] - c.stop_at[0]) / 1000.0, (c.stop_at[0] - c.started_at) / 1000.0,
         (c.rejoined_at[2] - c.started_at) / 1000.0, longest / 1000.0,
         r.settled ? "settled" : "gave up", (end - c.started_at) / 1000.0);
  watch_print(&c.w, "restart of node");
  /* Node 3's gap is the test's own: its trickle and its watch are on
   * node 3, so nothing is reported or seen while node 3 is down. */
  printf("cluster: (the gap over node 3's restart is the test's: it reports and watches through "
         "node 3)\n");
  assert_int_equal(rc, 0);
  assert_true(c.done);
  end_assert(t, &o, &r, &e);
  /* No failed task waited for a restarting node longer than its restart:
   * the other two nodes (and bridge 2, or bridge 1) carried on. */
  assert_true(e.tally.max_wait <= longest);
  look_free(&e.final);
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
        FX_TEST(test_cluster_dlq_leader_disk_lost),
        FX_TEST(test_cluster_rolling_restart),
    };
    /* DLQB_TEST_FILTER: one case (or a glob), e.g. *disk_lost. */
    const char *filter = getenv("DLQB_TEST_FILTER");
    if (filter != NULL && *filter != '\0') cmocka_set_test_filter(filter);
    rc = cmocka_run_group_tests(tests, NULL, NULL);
  }
  cluster_down();
  return rc;
}

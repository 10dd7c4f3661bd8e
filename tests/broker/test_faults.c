/* Faults in the middle of a flow, each ending in the conservation check of
 * flow.c (every task completed or in exactly one queue; lost must be 0;
 * duplicates are counted and printed):
 *   - the bridge is SIGKILLed again and again and restarted each time,
 *     with the audit trail on: `audit verify` must still find it intact;
 *   - a TCP proxy between bridge and broker is cut, plain and while it
 *     swallows everything the broker sends (so publishes are in the broker
 *     but their confirms never reach the bridge);
 *   - a broker memory alarm blocks publishing for a few seconds.
 * DLQB_TEST_LONG=1 makes every fault run longer and more often. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flow.h"

#define DELAYS     "100ms,200ms"
#define DELAYS_ENV "DLQ_BRIDGE_RETRY_DELAYS=" DELAYS

static bool long_run(void) {
  const char *v = getenv("DLQB_TEST_LONG");
  return v != NULL && strcmp(v, "1") == 0;
}

static void sleep_ms(int ms) { usleep((useconds_t)ms * 1000); }

/* Restarts bridge i with the environment flow_run gave it plus extra (up
 * to three entries, NULL-terminated; NULL for none). */
static int restart_bridge(fx_case *t, int i, const char *const *extra) {
  const char *env[8] = {"DLQ_BRIDGE_METRICS_ADDR=off", DELAYS_ENV, "DLQ_BRIDGE_RETRY_JITTER=0",
                        "DLQ_BRIDGE_MAX_ATTEMPTS=3"};
  for (int n = 4, j = 0; extra != NULL && extra[j] != NULL && n < 7; j++) env[n++] = extra[j];
  char tag[32];
  snprintf(tag, sizeof tag, "bridge%d-again", i + 1);
  return th_bridge_start(&t->bridges[i], &t->vhost, env, tag);
}

static void check_conservation(fx_case *t, const char *label, const flow_opts *o,
                               const flow_result *r) {
  flow_print(label, o, r);
  FX_CHECK(t, r->settled);
  assert_int_equal(r->lost, 0);
  assert_int_equal(r->foreign, 0);
  assert_int_equal(r->in_other, 0);
  assert_true(r->completed + r->in_dlq >= o->tasks);
  assert_int_equal(r->bridge_exit_failures, 0);
}

/* ---- SIGKILL ------------------------------------------------------------ */

/* A lower bound on the acks a flow of n tasks produces (see flow.c's mix). */
#define EXPECTED_ACKS(n) ((n)*3 / 4)

typedef struct {
  int kills, max_kills, every; /* kill after every `every` acks */
  int next_at;
  const char *const *env; /* the bridge's extra environment */
} kill_state;

static int kill_fault(fx_case *t, void *arg, const flow_result *r) {
  kill_state *k = arg;
  if (k->kills >= k->max_kills || r->acks < k->next_at) return 0;
  /* Let it get some work in hand first: the kill should land mid-batch. */
  sleep_ms(20 + (k->kills * 37) % 150);
  th_bridge_kill(&t->bridges[0]);
  k->kills++;
  k->next_at = r->acks + k->every;
  return restart_bridge(t, 0, k->env);
}

/* `audit reconcile` on the flow's DLQ before the harness drains it: after
 * the kills, every message the trail puts there must be there. */
typedef struct {
  const fx_audit *audit;
  th_result r;
} reconcile_check;

static int reconcile_dlq(fx_case *t, void *arg) {
  reconcile_check *c = arg;
  const char *const args[] = {"audit", "reconcile", NULL};
  const char *const env[] = {c->audit->env_log, c->audit->env_pub, NULL};
  if (th_run_bridge(args, t->vhost.url, env, 60000, &c->r) != 0) return -1;
  printf("audit reconcile: exit %d\n%s%s", c->r.exit_code, c->r.out, c->r.err);
  return 0;
}

static void test_bridge_sigkill_repeatedly(void **state) {
  fx_case *t = *state;
  bool lng = long_run();
  flow_opts o = {.tasks = lng ? 2000 : 320,
                 .bridges = 1,
                 .retry_delays = DELAYS,
                 .timeout_ms = lng ? 900000 : 150000};
  /* With the audit trail on, a kill lands mid-batch in the writer too: a
   * record half written, a batch written but not synced or sealed. */
  fx_audit audit;
  assert_int_equal(fx_audit_init(&audit), 0);
  const char *const env[] = {audit.env_log, audit.env_key, NULL};
  o.bridge_env = env;
  kill_state k = {.max_kills = lng ? 40 : 6, .env = env};
  /* Faults are paced by worker acks, and only the tasks that complete are
   * acked (about 80 % of the mix): pace on three quarters of the tasks so
   * that every planned fault lands before the flow settles. */
  k.every = EXPECTED_ACKS(o.tasks) / (k.max_kills + 2);
  k.next_at = k.every;
  o.fault = kill_fault;
  o.fault_arg = &k;
  reconcile_check rc = {.audit = &audit};
  o.before_drain = reconcile_dlq;
  o.before_drain_arg = &rc;
  flow_result r;
  assert_int_equal(flow_run(t, &o, &r), 0);
  /* Killed mid-batch or not, nothing the trail put in the DLQ is gone. */
  FX_CHECK(t, rc.r.exit_code == 0);
  assert_non_null(strstr(rc.r.out, "missing 0,"));
  printf("sigkill: %d kills\n", k.kills);
  check_conservation(t, "sigkill", &o, &r);
  assert_int_equal(k.kills, k.max_kills);
  th_result v;
  assert_int_equal(fx_audit_verify(&audit, &v), 0);
  printf("audit verify: exit %d\n%s%s", v.exit_code, v.out, v.err);
  FX_CHECK(t, v.exit_code == 0);
  fx_audit_remove(&audit);
}

/* ---- a cut connection (a proxy between bridge and broker) --------------- */

typedef struct {
  th_proxy px;
  int cuts, swallowed_cuts, max_cuts, every, next_at;
} proxy_state;

static int proxy_fault(fx_case *t, void *arg, const flow_result *r) {
  (void)t;
  proxy_state *ps = arg;
  if (ps->cuts >= ps->max_cuts || r->acks < ps->next_at) return 0;
  sleep_ms(30);
  if (ps->cuts % 2 == 1) {
    /* Between publish and confirm: the broker gets the bridge's publishes
     * but the bridge never sees the confirms; then the line drops. */
    th_proxy_swallow(&ps->px);
    sleep_ms(400);
    ps->swallowed_cuts++;
  }
  th_proxy_cut(&ps->px);
  ps->cuts++;
  ps->next_at = r->acks + ps->every;
  sleep_ms(150); /* the bridge retries against a closed port meanwhile */
  return th_proxy_start(&ps->px);
}

static void test_connection_cut_by_proxy(void **state) {
  fx_case *t = *state;
  bool lng = long_run();
  proxy_state ps = {.max_cuts = lng ? 30 : 6};
  assert_int_equal(th_proxy_start(&ps.px), 0);
  char url[TH_URL_MAX + 32];
  assert_true(th_proxy_url_env(&ps.px, &t->vhost, url, sizeof url));
  const char *extra[] = {url, NULL};
  flow_opts o = {.tasks = lng ? 2000 : 320,
                 .bridges = 1,
                 .retry_delays = DELAYS,
                 .timeout_ms = lng ? 900000 : 150000,
                 .bridge_env = extra,
                 .fault = proxy_fault,
                 .fault_arg = &ps};
  ps.every = EXPECTED_ACKS(o.tasks) / (ps.max_cuts + 2);
  ps.next_at = ps.every;
  flow_result r;
  int rc = flow_run(t, &o, &r);
  th_proxy_cut(&ps.px);
  assert_int_equal(rc, 0);
  printf("proxy: %d cuts, %d of them while confirms were being swallowed\n", ps.cuts,
         ps.swallowed_cuts);
  check_conservation(t, "proxy cut", &o, &r);
  assert_int_equal(ps.cuts, ps.max_cuts);
}

/* ---- a broker resource alarm -------------------------------------------- */

typedef struct {
  int64_t raised_at, cleared_at;
  int hold_ms;
  bool raised, cleared;
} alarm_state;

static int rabbitmqctl(const char *args) {
  const th_env *e = th_env_get();
  char cmd[3 * TH_PATH_MAX];
  /* Through broker-node.sh, which runs the node's own rabbitmqctl (chrooted
   * for a 4.0 node). */
  snprintf(cmd, sizeof cmd, "'%s/scripts/broker-node.sh' ctl '%s' -q %s >/dev/null", e->source_dir,
           e->node_dir, args);
  fflush(NULL);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "rabbitmqctl %s failed (%d)\n", args, rc);
  return rc == 0 ? 0 : -1;
}

static int alarm_fault(fx_case *t, void *arg, const flow_result *r) {
  (void)t;
  alarm_state *a = arg;
  if (!a->raised && r->acks >= 40) {
    printf("alarm: raising a memory alarm with %d acks done\n", r->acks);
    fflush(stdout);
    if (rabbitmqctl("set_vm_memory_high_watermark 0.0000001") != 0) return -1;
    a->raised = true;
    a->raised_at = th_now_ms();
  } else if (a->raised && !a->cleared && th_now_ms() - a->raised_at >= a->hold_ms) {
    if (rabbitmqctl("set_vm_memory_high_watermark 0.4") != 0) return -1;
    a->cleared = true;
    a->cleared_at = th_now_ms();
    printf("alarm: cleared after %lld ms, %d acks done\n",
           (long long)(a->cleared_at - a->raised_at), r->acks);
    fflush(stdout);
  }
  return 0;
}

static void test_broker_memory_alarm(void **state) {
  fx_case *t = *state;
  alarm_state a = {.hold_ms = long_run() ? 30000 : 5000};
  flow_opts o = {.tasks = 240,
                 .bridges = 1,
                 .retry_delays = DELAYS,
                 .timeout_ms = 150000,
                 .fault = alarm_fault,
                 .fault_arg = &a};
  flow_result r;
  int rc = flow_run(t, &o, &r);
  if (a.raised && !a.cleared) rabbitmqctl("set_vm_memory_high_watermark 0.4");
  assert_int_equal(rc, 0);
  assert_true(a.raised && a.cleared);
  check_conservation(t, "memory alarm", &o, &r);
  /* The bridge announced connection.blocked support, so it was told. */
  FILE *f = fopen(t->bridges[0].log_path, "r");
  char line[1024];
  bool blocked = false;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (strstr(line, "broker_blocked") != NULL) blocked = true;
  if (f != NULL) fclose(f);
  printf("alarm: bridge logged connection.blocked: %s\n", blocked ? "yes" : "no");
}

/* ---- the soak (scripts/soak.sh; not a ctest test) ------------------------ */
#ifdef DLQB_SOAK

typedef struct {
  th_proxy px;
  fx_audit audit; /* both bridges write one audit trail, verified at the end */
  int64_t started, next_sample, next_kill, next_cut;
  int kills, cuts, samples;
  long rss_first, rss_max, rss_last;
} soak_state;

static long rss_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
  FILE *f = fopen(path, "r");
  long kb = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
  if (f != NULL) fclose(f);
  return kb;
}

/* Bridge 1 lives through the whole soak (its memory is sampled); bridge 2
 * is SIGKILLed and restarted every minute; the proxy both go through is
 * cut every 90 s, every other time while swallowing confirms. */
static int soak_fault(fx_case *t, void *arg, const flow_result *r) {
  soak_state *s = arg;
  int64_t now = th_now_ms();
  if (now >= s->next_sample) {
    long kb = rss_kb(t->bridges[0].pid);
    if (s->samples++ == 0) s->rss_first = kb;
    if (kb > s->rss_max) s->rss_max = kb;
    s->rss_last = kb;
    printf("soak: t=%llds bridge1_vmrss_kb=%ld acks=%d deliveries=%d kills=%d cuts=%d\n",
           (long long)((now - s->started) / 1000), kb, r->acks, r->deliveries, s->kills, s->cuts);
    fflush(stdout);
    s->next_sample = now + 10000;
  }
  /* The cut before the kill: a bridge restarted while the proxy is down
   * fails its first contact and exits (by design: `run` gives up when it
   * never reached the broker, and a supervisor restarts it); the harness is
   * no supervisor, so it restarts bridge 2 only once the proxy is back. */
  if (now >= s->next_cut) {
    if (s->cuts % 2 == 1) {
      th_proxy_swallow(&s->px);
      sleep_ms(400);
    }
    th_proxy_cut(&s->px);
    s->cuts++;
    sleep_ms(150);
    if (th_proxy_start(&s->px) != 0) return -1;
    s->next_cut = th_now_ms() + 90000;
  }
  if (now >= s->next_kill && t->nbridges > 1) {
    th_bridge_kill(&t->bridges[1]);
    char url[TH_URL_MAX + 32];
    if (!th_proxy_url_env(&s->px, &t->vhost, url, sizeof url)) return -1;
    const char *const env[] = {url, s->audit.env_log, s->audit.env_key, NULL};
    if (restart_bridge(t, 1, env) != 0) return -1;
    s->kills++;
    s->next_kill = now + 60000;
  }
  return 0;
}

/* Rounds of the flow (tasks published, worked through, drained and counted)
 * until the time is up; each round runs its own two bridges, so the memory
 * samples show a bridge process across one round (about a minute and a half
 * at 20000 tasks) and the rounds side by side over the hour. */
static void test_soak(void **state) {
  fx_case *t = *state;
  const char *m = getenv("DLQB_SOAK_MINUTES"), *n = getenv("DLQB_SOAK_ROUND_TASKS");
  int minutes = m != NULL ? atoi(m) : 60, per_round = n != NULL ? atoi(n) : 20000;
  soak_state s = {0};
  assert_int_equal(th_proxy_start(&s.px), 0);
  assert_int_equal(fx_audit_init(&s.audit), 0);
  char url[TH_URL_MAX + 32];
  assert_true(th_proxy_url_env(&s.px, &t->vhost, url, sizeof url));
  const char *extra[] = {url, s.audit.env_log, s.audit.env_key, NULL};
  s.started = th_now_ms();
  s.next_kill = s.started + 60000;
  s.next_cut = s.started + 90000;
  int64_t deadline = s.started + (int64_t)minutes * 60000;
  int rounds = 0, tasks = 0, lost = 0, dups = 0, completed = 0, dlq = 0;
  bool settled = true;
  printf("soak: %d minutes in rounds of %d tasks (fates: ack, reject, report, crash, poison)\n",
         minutes, per_round);
  while (th_now_ms() < deadline) {
    flow_opts o = {.tasks = per_round,
                   .bridges = 2,
                   .retry_delays = DELAYS,
                   .timeout_ms = 900000,
                   .bridge_env = extra,
                   .fault = soak_fault,
                   .fault_arg = &s};
    flow_result r;
    int rc = flow_run(t, &o, &r);
    if (rc != 0) th_proxy_cut(&s.px);
    assert_int_equal(rc, 0);
    char label[32];
    snprintf(label, sizeof label, "soak round %d", ++rounds);
    flow_print(label, &o, &r);
    tasks += o.tasks;
    lost += r.lost;
    dups += r.duplicates;
    completed += r.completed;
    dlq += r.in_dlq;
    settled = settled && r.settled;
    t->nbridges = 0; /* flow_run stopped them; the next round starts its own */
  }
  th_proxy_cut(&s.px);
  printf("soak: %lld s, %d rounds, %d tasks, completed %d, dlq %d, %d bridge kills, %d "
         "connection cuts; bridge VmRSS first %ld kB, max %ld kB, last %ld kB; lost=%d "
         "duplicates=%d\n",
         (long long)((th_now_ms() - s.started) / 1000), rounds, tasks, completed, dlq, s.kills,
         s.cuts, s.rss_first, s.rss_max, s.rss_last, lost, dups);
  th_result v;
  assert_int_equal(fx_audit_verify(&s.audit, &v), 0);
  printf("soak: audit verify exit %d\n%s%s", v.exit_code, v.out, v.err);
  assert_true(settled);
  assert_int_equal(lost, 0);
  assert_int_equal(v.exit_code, 0);
  fx_audit_remove(&s.audit);
}
#endif

int main(void) {
  if (th_env_get() == NULL) return 1;
  signal(SIGPIPE, SIG_IGN);
#ifdef DLQB_SOAK
  const struct CMUnitTest soak[] = {FX_TEST(test_soak)};
  return cmocka_run_group_tests(soak, NULL, NULL);
#endif
  const struct CMUnitTest tests[] = {
      FX_TEST(test_bridge_sigkill_repeatedly),
      FX_TEST(test_connection_cut_by_proxy),
      FX_TEST(test_broker_memory_alarm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* drain run and drain status against a real broker (issue 23): a drain
 * that canaries, sees the canary complete, ramps and empties the eligible
 * part of the DLQ while the ineligible items stay in order; one that stops
 * when the canary fails again; one SIGKILLed midway that, run again, loses
 * and duplicates nothing; and the lease that keeps two drains from both
 * draining (with the broker's answer to a second exclusive declare,
 * measured on this version). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flow.h"

#define CMD_TIMEOUT_MS 120000
#define HOUR_MS        3600000LL
#define MAX_IDS        2000
#define WRITER         "guest"

/* Fast ramp settings for tests: a canary of 3 at 5/s, steps of 1 s,
 * doubling up to 80/s. */
#define ENV_FAST                                                                                   \
  "DLQ_BRIDGE_COMPLETION_WRITERS=" WRITER, "DLQ_BRIDGE_DRAIN_CANARY=3",                            \
      "DLQ_BRIDGE_DRAIN_START_RATE=5", "DLQ_BRIDGE_DRAIN_STEP=1s", "DLQ_BRIDGE_DRAIN_MAX_RATE=80", \
      "DLQ_BRIDGE_DRAIN_CANARY_TIMEOUT=30s"

static void run(fx_case *t, const char *const *args, const char *const *env, th_result *r) {
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, CMD_TIMEOUT_MS, r), 0);
  if (r->exit_code != 0 || getenv("DLQB_TEST_VERBOSE") != NULL)
    fprintf(stderr, "%s %s: exit %d\nstdout: %s\nstderr: %s\n", args[0], args[1] ? args[1] : "",
            r->exit_code, r->out, r->err);
}

static void declare(fx_case *t) {
  static const char *const args[] = {"declare", NULL};
  th_result r;
  run(t, args, NULL, &r);
  assert_int_equal(r.exit_code, 0);
}

/* A DLQ item as the bridge leaves it, with dlq_reason `reason`, replayed
 * replay_count times before. */
static void pub_dlq_rc(fx_case *t, const char *id, const char *reason, const char *last_error,
                       int64_t replay_count) {
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, id), 0);
  if (replay_count > 0) assert_int_equal(th_msg_set_int(&m, "replay_count", replay_count), 0);
  char iso[48];
  th_iso_time(th_now_ms() - HOUR_MS, iso, sizeof iso);
  assert_int_equal(th_msg_set_str(&m, "source_system", "crm"), 0);
  assert_int_equal(th_msg_set_int(&m, "attempt", 5), 0);
  assert_int_equal(th_msg_set_int(&m, "max_attempts", 5), 0);
  assert_int_equal(th_msg_set_str(&m, "last_error", last_error), 0);
  assert_int_equal(th_msg_set_str(&m, "dlq_reason", reason), 0);
  assert_int_equal(th_msg_set_str(&m, "dlq_at", iso), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
}

static void pub_dlq(fx_case *t, const char *id, const char *reason, const char *last_error) {
  pub_dlq_rc(t, id, reason, last_error, 0);
}

/* Takes every message off queue, recording request_ids in order. */
static int take_all(fx_case *t, const char *queue, char (*ids)[32], int max) {
  th_msg m;
  th_msg_init(&m);
  int n = 0, got;
  while ((got = th_get(t->conn, queue, &m)) == 1) {
    const char *id = th_msg_str(&m, "request_id");
    if (n < max) snprintf(ids[n], 32, "%s", id ? id : "?");
    n++;
  }
  th_msg_release(&m);
  assert_int_equal(got, 0);
  return n;
}

/* ---- a worker that completes (or rejects) what it is given -------------- */

typedef struct {
  fx_case *t;
  bool reject;     /* reject every task instead of completing it */
  int reject_from; /* > 0: complete tasks numbered below it, reject the rest */
  atomic_int stop;
  atomic_int done; /* tasks completed (ledger written, then acked) */
  atomic_int rejected;
  int count[MAX_IDS]; /* executions per task number (ids are "<prefix><n>") */
  pthread_t thread;
  int failed; /* a harness call failed */
} worker;

static int task_number(const char *id) {
  const char *p = id;
  while (*p != '\0' && (*p < '0' || *p > '9')) p++;
  int n = atoi(p);
  return n >= 0 && n < MAX_IDS ? n : 0;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  th_worker *tw = th_worker_open(&w->t->vhost, "dsr.work", 1);
  th_conn *pub = th_connect(&w->t->vhost);
  th_msg *m = malloc(sizeof *m), *done = malloc(sizeof *done);
  if (tw == NULL || pub == NULL || m == NULL || done == NULL) {
    w->failed = 1;
    goto out;
  }
  th_msg_init(m);
  while (!atomic_load(&w->stop)) {
    int got = th_worker_next(tw, m, 200);
    if (got < 0) {
      w->failed = 1;
      break;
    }
    if (got == 0) continue;
    const char *id = th_msg_str(m, "request_id");
    const char *src = th_msg_str(m, "source_system");
    if (w->reject || (w->reject_from > 0 && task_number(id ? id : "") >= w->reject_from)) {
      if (th_worker_reject(tw) != 0) w->failed = 1;
      atomic_fetch_add(&w->rejected, 1);
      continue;
    }
    /* As docs/worker-guide.md says: the ledger entry first, then the ack. */
    th_msg_init(done);
    th_msg_add_str(done, "request_id", id ? id : "");
    th_msg_add_str(done, "source_system", src ? src : "");
    snprintf(done->user_id, sizeof done->user_id, "%s", WRITER);
    if (th_publish(pub, "", "dsr.completed", done) != 0) w->failed = 1;
    th_msg_release(done);
    w->count[task_number(id ? id : "")]++;
    if (th_worker_ack(tw) != 0) w->failed = 1;
    atomic_fetch_add(&w->done, 1);
  }
  th_msg_release(m);
out:
  free(m);
  free(done);
  if (pub != NULL) th_close(pub);
  if (tw != NULL) th_worker_close(tw);
  return NULL;
}

static worker *worker_start(fx_case *t, bool reject) {
  worker *w = calloc(1, sizeof *w);
  assert_non_null(w);
  w->t = t;
  w->reject = reject;
  assert_int_equal(pthread_create(&w->thread, NULL, worker_main, w), 0);
  assert_true(th_wait_consumers(t->conn, "dsr.work", 1, 10000));
  return w;
}

static void worker_stop(worker *w) {
  atomic_store(&w->stop, 1);
  pthread_join(w->thread, NULL);
  assert_int_equal(w->failed, 0);
}

static bool work_empty(void *arg) {
  fx_case *t = arg;
  return th_queue_depth(t->conn, "dsr.work") == 0;
}

/* No consumer on the DLQ: a killed drain's connection is closed. */
static bool dlq_unwatched(void *arg) {
  fx_case *t = arg;
  return th_queue_consumers(t->conn, "dsr.dlq.manual") == 0;
}

static void state_env(char *buf, size_t len, char *path, size_t plen, const fx_case *t) {
  assert_true(th_fmt(path, plen, "/tmp/dlqb-drain-%s.json", t->vhost.name));
  unlink(path);
  assert_true(th_fmt(buf, len, "DLQ_BRIDGE_DRAIN_STATE=%s", path));
}

/* ---- tests -------------------------------------------------------------- */

/* 40 eligible items between 4 poison and 4 invalid_envelope ones (every
 * sixth item, from d2): the
 * canary (3) completes, the ramp moves the other 37, the 8 stay in order. */
static void test_drain_canary_ramp_empties_eligible(void **state) {
  fx_case *t = *state;
  declare(t);
  int n_elig = 0;
  for (int i = 0; i < 48; i++) {
    char id[16];
    snprintf(id, sizeof id, "d%d", i);
    if (i % 12 == 2) pub_dlq(t, id, "poison", "poison: repeated consumer crash");
    else if (i % 12 == 8) pub_dlq(t, id, "invalid_envelope", "missing legal_basis");
    else {
      pub_dlq(t, id, "max_attempts", "upstream 503");
      n_elig++;
    }
  }
  assert_int_equal(n_elig, 40);
  char senv[256], spath[200], tf[256], tpath[200];
  state_env(senv, sizeof senv, spath, sizeof spath, t);
  assert_true(th_fmt(tpath, sizeof tpath, "/tmp/dlqb-drain-%s.prom", t->vhost.name));
  assert_true(th_fmt(tf, sizeof tf, "DLQ_BRIDGE_DRAIN_TEXTFILE=%s", tpath));
  const char *const env[] = {ENV_FAST, senv, tf, NULL};

  /* The dry run lists the 40 and moves nothing. */
  static const char *const dry[] = {"drain", "run", "--dry-run", NULL};
  th_result r;
  run(t, dry, env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "would drain 40, would skip as complete 0, would leave 8 of 48"));
  json_object *v;
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 48);

  worker *w = worker_start(t, false);
  static const char *const args[] = {"drain", "run", "--no-audit", "--json", NULL};
  int64_t t0 = th_now_ms();
  run(t, args, env, &r);
  int64_t took = th_now_ms() - t0;
  assert_true(th_wait_until(work_empty, t, 20000));
  worker_stop(w);
  assert_int_equal(r.exit_code, 0);
  json_object *j = json_tokener_parse(r.out);
  assert_non_null(j);
  assert_string_equal(th_json_str(j, "stopped"), "drained");
  assert_true(json_object_object_get_ex(j, "moved", &v));
  assert_int_equal(json_object_get_int(v), 40);
  json_object *c;
  assert_true(json_object_object_get_ex(j, "canary", &c));
  assert_true(json_object_object_get_ex(c, "completed", &v));
  assert_int_equal(json_object_get_int(v), 3);
  assert_true(json_object_object_get_ex(j, "steps", &v));
  int steps = json_object_get_int(v);
  printf("drain: 40 eligible moved in %d ramp steps after a canary of 3, in %lld ms\n", steps,
         (long long)took);
  /* 37 after the canary: steps of 5 at 5/s, 10 at 10/s, 20 at 20/s, then
   * one at 40/s that finds only 2 (fewer than asked: drained). */
  assert_int_equal(steps, 4);
  assert_true(json_object_object_get_ex(j, "last_rate", &v));
  assert_true(json_object_get_double(v) == 40.0);
  /* The rate held: the canary and the three full steps take 3 s at least. */
  assert_true(took >= 3000);
  assert_string_equal(th_json_str(j, "broker_user"), "guest");
  json_object_put(j);
  assert_int_equal(atomic_load(&w->done), 40);
  for (int i = 0; i < 48; i++) assert_int_equal(w->count[i], i % 6 == 2 ? 0 : 1);
  free(w);

  /* The ineligible 8 stay, in their order. */
  static char ids[MAX_IDS][32];
  int nd = take_all(t, "dsr.dlq.manual", ids, MAX_IDS);
  assert_int_equal(nd, 8);
  for (int k = 0; k < nd; k++) {
    char want[16];
    snprintf(want, sizeof want, "d%d", 6 * k + 2);
    assert_string_equal(ids[k], want);
  }

  /* drain status reads the run back, and the textfile says why it ended. */
  static const char *const st[] = {"drain", "status", NULL};
  run(t, st, env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "drained"));
  assert_non_null(strstr(r.out, "3/0 of 3"));
  static const char *const stj[] = {"drain", "status", "--json", NULL};
  run(t, stj, env, &r);
  j = json_tokener_parse(r.out);
  assert_non_null(j);
  assert_true(json_object_object_get_ex(j, "runs", &v));
  assert_int_equal(json_object_array_length(v), 1);
  json_object_put(j);
  assert_int_equal(
      fx_count_in_file(tpath, "dlq_bridge_drain_last_run_stopped{reason=\"drained\"} 1"), 1);
  assert_int_equal(fx_count_in_file(tpath, "dlq_bridge_drain_last_run_moved 40"), 1);
  struct stat sb;
  assert_int_equal(stat(tpath, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0644); /* node_exporter, another user, reads it */
  unlink(spath);
  unlink(tpath);
}

/* The worker rejects everything; the daemon (100 ms retries) returns each
 * replayed task to the DLQ with its replay_count raised once its five
 * attempts are spent. The run stops
 * after the canary: 3 moved, the other 17 untouched. */
static void test_drain_stops_when_canary_fails(void **state) {
  fx_case *t = *state;
  static const char *const benv[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms", NULL};
  assert_int_equal(fx_start_bridge(t, benv), 0);
  for (int i = 0; i < 20; i++) {
    char id[16];
    snprintf(id, sizeof id, "f%d", i);
    pub_dlq(t, id, "max_attempts", "upstream 503");
  }
  worker *w = worker_start(t, true);
  char senv[256], spath[200];
  state_env(senv, sizeof senv, spath, sizeof spath, t);
  const char *const env[] = {ENV_FAST, senv, NULL};
  static const char *const args[] = {"drain", "run", "--no-audit", NULL};
  th_result r;
  run(t, args, env, &r);
  worker_stop(w);
  /* Stopped on failures: exit 1 and one line saying why (a systemd unit
   * that ran it shows failed). */
  FX_CHECK(t, r.exit_code == 1);
  assert_non_null(
      strstr(r.err, "dlq-bridge: drain stopped (canary_failed): a canary failed again"));
  assert_non_null(strstr(r.out, "a canary failed again"));
  assert_non_null(strstr(r.out, "replayed 3 "));
  assert_true(atomic_load(&w->rejected) >= 1);
  free(w);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 20, 10000));
  FX_CHECK(t, fx_stop_bridges(t) == 0);
  static char ids[MAX_IDS][32];
  int nd = take_all(t, "dsr.dlq.manual", ids, MAX_IDS);
  assert_int_equal(nd, 20);
  /* The 17 never moved keep their order at the head (f3..f19). */
  for (int k = 0; k < 17; k++) {
    char want[16];
    snprintf(want, sizeof want, "f%d", k + 3);
    assert_string_equal(ids[k], want);
  }
  static const char *const st[] = {"drain", "status", NULL};
  run(t, st, env, &r);
  assert_non_null(strstr(r.out, "canary_failed"));
  unlink(spath);
}

/* The canary (g0..g2) completes, then every other task fails again: the
 * daemon (100 ms retries) returns each to the DLQ with its replay_count
 * raised. The ramp sees three of its items back (at the DLQ's tail, after
 * the step that meets them took its items) and stops: far from all moved,
 * the rest untouched and in order, nothing lost. */
static void test_drain_stops_on_refailures_in_the_ramp(void **state) {
  fx_case *t = *state;
  static const char *const benv[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms", NULL};
  assert_int_equal(fx_start_bridge(t, benv), 0);
  enum { N = 200 };
  for (int i = 0; i < N; i++) {
    char id[16];
    snprintf(id, sizeof id, "g%d", i);
    pub_dlq(t, id, "max_attempts", "upstream 503");
  }
  worker *w = calloc(1, sizeof *w);
  assert_non_null(w);
  w->t = t;
  w->reject_from = 3;
  assert_int_equal(pthread_create(&w->thread, NULL, worker_main, w), 0);
  assert_true(th_wait_consumers(t->conn, "dsr.work", 1, 10000));
  char senv[256], spath[200];
  state_env(senv, sizeof senv, spath, sizeof spath, t);
  const char *const env[] = {ENV_FAST, senv, "DLQ_BRIDGE_DRAIN_FAILURE_THRESHOLD=3", NULL};
  static const char *const args[] = {"drain", "run", "--no-audit", "--json", NULL};
  th_result r;
  run(t, args, env, &r);
  FX_CHECK(t, r.exit_code == 1); /* stopped on failures */
  assert_non_null(strstr(r.err, "drain stopped (refailures)"));
  json_object *j = json_tokener_parse(r.out);
  assert_non_null(j);
  assert_string_equal(th_json_str(j, "stopped"), "refailures");
  json_object *v;
  assert_true(json_object_object_get_ex(j, "moved", &v));
  int moved = json_object_get_int(v);
  assert_true(json_object_object_get_ex(j, "refailures", &v));
  int refail = json_object_get_int(v);
  printf("ramp stopped on re-failures: moved %d of %d, %d seen failing again\n", moved, N, refail);
  assert_true(refail >= 3);
  assert_true(moved < N / 2);
  json_object_put(j);
  /* Everything not completed comes back to the DLQ: N - 3 in the end. */
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", N - 3, 20000));
  worker_stop(w);
  assert_int_equal(atomic_load(&w->done), 3);
  FX_CHECK(t, fx_stop_bridges(t) == 0);
  static char ids[MAX_IDS][32];
  int nd = take_all(t, "dsr.dlq.manual", ids, MAX_IDS);
  assert_int_equal(nd, N - 3);
  /* Those never moved keep their order at the head. */
  int unmoved = N - moved;
  for (int k = 0; k < unmoved; k++) {
    char want[16];
    snprintf(want, sizeof want, "g%d", moved + k);
    assert_string_equal(ids[k], want);
  }
  free(w);
  unlink(spath);
}

/* Tasks replayed max_replays (3) times already: the canary fails again and
 * the daemon escalates it to compliance_review (max_replays), as for any
 * replay; the drain sees it there, counts it as failed and stops. */
static void test_drain_canary_escalated_by_max_replays(void **state) {
  fx_case *t = *state;
  static const char *const benv[] = {"DLQ_BRIDGE_RETRY_DELAYS=100ms", NULL};
  assert_int_equal(fx_start_bridge(t, benv), 0);
  for (int i = 0; i < 10; i++) {
    char id[16];
    snprintf(id, sizeof id, "m%d", i);
    pub_dlq_rc(t, id, "max_attempts", "upstream 503", 3);
  }
  worker *w = worker_start(t, true);
  char senv[256], spath[200];
  state_env(senv, sizeof senv, spath, sizeof spath, t);
  const char *const env[] = {ENV_FAST, senv, NULL};
  static const char *const args[] = {"drain", "run", "--no-audit", "--json", NULL};
  th_result r;
  run(t, args, env, &r);
  worker_stop(w);
  free(w);
  FX_CHECK(t, r.exit_code == 1); /* stopped on failures */
  assert_non_null(strstr(r.err, "drain stopped (canary_failed)"));
  json_object *j = json_tokener_parse(r.out);
  assert_non_null(j);
  assert_string_equal(th_json_str(j, "stopped"), "canary_failed");
  json_object *c, *v;
  assert_true(json_object_object_get_ex(j, "canary", &c));
  assert_true(json_object_object_get_ex(c, "failed", &v));
  assert_true(json_object_get_int(v) >= 1);
  json_object_put(j);
  FX_CHECK(t, th_wait_depth(t->conn, "compliance_review", 3, 10000));
  FX_CHECK(t, fx_stop_bridges(t) == 0);
  th_msg m;
  th_msg_init(&m);
  for (int k = 0; k < 3; k++) {
    assert_int_equal(th_get(t->conn, "compliance_review", &m), 1);
    FX_HDR_STR_EQ(&m, "escalation_reason", "max_replays");
    FX_HDR_INT_EQ(&m, "replay_count", 4);
  }
  th_msg_release(&m);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 7); /* m3..m9 untouched */
  unlink(spath);
}

/* SIGKILL mid-ramp, then a second run to the end: every task executed
 * exactly once (a copy left in the DLQ by the kill is skipped as complete
 * by the ledger), nothing lost. */
static void test_drain_sigkill_loses_and_duplicates_nothing(void **state) {
  fx_case *t = *state;
  declare(t);
  enum { N = 600 };
  for (int i = 0; i < N; i++) {
    char id[16];
    snprintf(id, sizeof id, "k%d", i);
    pub_dlq(t, id, "max_attempts", "upstream 503");
  }
  worker *w = worker_start(t, false);
  char senv[256], spath[200], tenv[256], tpath[200];
  state_env(senv, sizeof senv, spath, sizeof spath, t);
  assert_true(th_fmt(tpath, sizeof tpath, "/tmp/dlqb-drain-%s.prom", t->vhost.name));
  unlink(tpath);
  assert_true(th_fmt(tenv, sizeof tenv, "DLQ_BRIDGE_DRAIN_TEXTFILE=%s", tpath));
  const char *const env[] = {ENV_FAST, senv, tenv, "DLQ_BRIDGE_DRAIN_MAX_RATE=50", NULL};
  static const char *const args[] = {"drain", "run", "--no-audit", NULL};
  th_result r;
  /* Canary ~1 s and its wait (a look is a ledger read and two passes: 1 to
   * 3 s each), then steps of 1 s at 5, 10, 20, 40, then 50/s: about 20 s
   * in all; the kill at 10 s comes mid-ramp. */
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, 10000, &r), 0);
  if (r.exit_code != -1) fprintf(stderr, "exit %d: %s%s\n", r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, -1); /* killed */
  /* Its unacked items return once the broker has closed its connection. */
  assert_true(th_wait_until(dlq_unwatched, t, 10000));
  assert_true(th_wait_until(work_empty, t, 20000));
  int after_kill = atomic_load(&w->done);
  long left = th_queue_depth(t->conn, "dsr.dlq.manual");
  printf("sigkill: %d completed, %ld left in the DLQ (%ld of them copies of completed tasks)\n",
         after_kill, left, after_kill + left - N);
  assert_true(after_kill > 3 && left > 0); /* it really was midway, past the canary */
  assert_true(after_kill + left >= N);     /* nothing lost */
  /* The killed run is seen: its row says running (no end), and so does the
   * textfile, where DlqDrainRunStuck finds it. */
  static const char *const st[] = {"drain", "status", "--json", NULL};
  th_result s;
  run(t, st, env, &s);
  json_object *sj = json_tokener_parse(s.out), *runs;
  assert_non_null(sj);
  assert_true(json_object_object_get_ex(sj, "runs", &runs));
  assert_int_equal(json_object_array_length(runs), 1);
  assert_string_equal(th_json_str(json_object_array_get_idx(runs, 0), "stopped"), "running");
  json_object_put(sj);
  assert_int_equal(fx_count_in_file(tpath, "dlq_bridge_drain_running 1\n"), 1);
  assert_int_equal(
      fx_count_in_file(tpath, "dlq_bridge_drain_last_run_stopped{reason=\"running\"} 1"), 1);

  run(t, args, env, &r);
  assert_true(th_wait_until(work_empty, t, 20000));
  worker_stop(w);
  assert_int_equal(r.exit_code, 0);
  /* Its stop sentence, when it is not the drained one (seen once on 4.0
   * under load, not reproduced since): which stop it was. */
  if (strstr(r.out, "nothing eligible is left") == NULL)
    fprintf(stderr, "rerun: stdout: %s\nstderr: %s\n", r.out, r.err);
  assert_non_null(strstr(r.out, "nothing eligible is left"));
  int lost = 0, dup = 0;
  for (int i = 0; i < N; i++) {
    if (w->count[i] == 0) lost++;
    if (w->count[i] > 1) dup += w->count[i] - 1;
  }
  printf("sigkill then rerun: lost %d, executed twice %d\n", lost, dup);
  assert_int_equal(lost, 0);
  assert_int_equal(dup, 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  /* The rerun, holding the lease, calls the killed run's row killed. */
  run(t, st, env, &s);
  sj = json_tokener_parse(s.out);
  assert_non_null(sj);
  assert_true(json_object_object_get_ex(sj, "runs", &runs));
  assert_int_equal(json_object_array_length(runs), 2);
  assert_string_equal(th_json_str(json_object_array_get_idx(runs, 0), "stopped"), "drained");
  assert_string_equal(th_json_str(json_object_array_get_idx(runs, 1), "stopped"), "killed");
  json_object_put(sj);
  assert_int_equal(fx_count_in_file(tpath, "dlq_bridge_drain_running 0\n"), 1);
  free(w);
  unlink(spath);
  unlink(tpath);
}

/* The lease: a connection holding the exclusive queue makes a drain say so,
 * exit 0 and touch nothing; the broker's refusal of a second declare is
 * 405 RESOURCE_LOCKED. Then two drains at once: every task moved once. */
typedef struct {
  fx_case *t;
  const char *const *env;
  th_result r;
} bg_drain;

static void *bg_run(void *arg) {
  bg_drain *b = arg;
  static const char *const args[] = {"drain", "run", "--no-audit", NULL};
  if (th_run_bridge(args, b->t->vhost.url, b->env, CMD_TIMEOUT_MS, &b->r) != 0) b->r.exit_code = -2;
  return NULL;
}

static void test_drain_lease(void **state) {
  fx_case *t = *state;
  declare(t);
  for (int i = 0; i < 30; i++) {
    char id[16];
    snprintf(id, sizeof id, "l%d", i);
    pub_dlq(t, id, "max_attempts", "upstream 503");
  }
  /* Hold the lease as a drain does. */
  th_conn *holder = th_connect(&t->vhost);
  assert_non_null(holder);
  amqp_connection_state_t hc = th_conn_amqp(holder);
  amqp_queue_declare(hc, 1, amqp_cstring_bytes("dsr.drain.lease"), 0, 0, 1, 1, amqp_empty_table);
  assert_int_equal(amqp_get_rpc_reply(hc).reply_type, AMQP_RESPONSE_NORMAL);
  /* What a second connection is told. */
  th_conn *other = th_connect(&t->vhost);
  amqp_connection_state_t oc = th_conn_amqp(other);
  amqp_queue_declare(oc, 1, amqp_cstring_bytes("dsr.drain.lease"), 0, 0, 1, 1, amqp_empty_table);
  amqp_rpc_reply_t rep = amqp_get_rpc_reply(oc);
  assert_int_equal(rep.reply_type, AMQP_RESPONSE_SERVER_EXCEPTION);
  assert_int_equal(rep.reply.id, AMQP_CHANNEL_CLOSE_METHOD);
  amqp_channel_close_t *cc = rep.reply.decoded;
  printf("lease: a second exclusive declare on RabbitMQ %d is refused with %d\n",
         th_broker_version(), cc->reply_code);
  assert_int_equal(cc->reply_code, 405);
  th_close(other);

  char senv[256], spath[200];
  state_env(senv, sizeof senv, spath, sizeof spath, t);
  const char *const env[] = {ENV_FAST, senv, NULL};
  static const char *const args[] = {"drain", "run", "--no-audit", NULL};
  th_result r;
  run(t, args, env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "another drain holds the lease"));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 30);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  th_close(holder); /* the lease goes with the connection */

  /* Two at once: whichever gets the lease drains, the other does not. */
  worker *w = worker_start(t, false);
  bg_drain a = {t, env, {0}}, b = {t, env, {0}};
  pthread_t ta, tb;
  assert_int_equal(pthread_create(&ta, NULL, bg_run, &a), 0);
  assert_int_equal(pthread_create(&tb, NULL, bg_run, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  assert_true(th_wait_until(work_empty, t, 20000));
  worker_stop(w);
  assert_int_equal(a.r.exit_code, 0);
  assert_int_equal(b.r.exit_code, 0);
  bool a_held = strstr(a.r.out, "another drain holds the lease") != NULL;
  bool b_held = strstr(b.r.out, "another drain holds the lease") != NULL;
  printf("two drains at once: %s\n",
         a_held || b_held ? "one found the lease held" : "they ran one after the other");
  assert_false(a_held && b_held);
  for (int i = 0; i < 30; i++) assert_int_equal(w->count[i], 1);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  free(w);
  unlink(spath);
}

/* As docs/least-privilege.md's drain user: configure on the lease queue
 * only, write on amq.default, read on the DLQ, compliance_review and the
 * ledger. A run then drains, and its moves carry that broker user. */
#define DRAIN_PASSWORD "pw-Drain-2c9e-never-printed"
#define PERM_DRAIN                                                                                 \
  "{\"configure\":\"^dsr\\\\.drain\\\\.lease$\",\"write\":\"^amq\\\\.default$\","                  \
  "\"read\":\"^(dsr\\\\.dlq\\\\.manual|compliance_review|dsr\\\\.completed|dsr\\\\.catalog)$\"}"

static void test_drain_least_privilege(void **state) {
  fx_case *t = *state;
  declare(t);
  for (int i = 0; i < 8; i++) {
    char id[16];
    snprintf(id, sizeof id, "p%d", i);
    pub_dlq(t, id, "max_attempts", "upstream 503");
  }
  const th_env *e = th_env_get();
  char user[TH_NAME_MAX + 16], path[TH_PATH_MAX], url[TH_URL_MAX], pwfile[TH_PATH_MAX],
      pwenv[TH_PATH_MAX + 32];
  assert_true(th_fmt(user, sizeof user, "%s-drain", t->vhost.name));
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", user));
  int status = th_mgmt("PUT", path, "{\"password\":\"" DRAIN_PASSWORD "\",\"tags\":\"\"}", NULL);
  assert_true(status == 201 || status == 204);
  assert_true(th_fmt(path, sizeof path, "/api/permissions/%s/%s", t->vhost.name, user));
  status = th_mgmt("PUT", path, PERM_DRAIN, NULL);
  assert_true(status == 201 || status == 204);
  assert_true(
      th_fmt(url, sizeof url, "amqp://%s@127.0.0.1:%d/%s", user, e->amqp_port, t->vhost.name));
  assert_true(th_fmt(pwfile, sizeof pwfile, "%s/%s.password", e->log_dir, user));
  FILE *f = fopen(pwfile, "w");
  assert_non_null(f);
  fputs(DRAIN_PASSWORD "\n", f);
  fclose(f);
  assert_true(th_fmt(pwenv, sizeof pwenv, "DLQ_BRIDGE_PASSWORD_FILE=%s", pwfile));

  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  char senv[256], spath[200];
  state_env(senv, sizeof senv, spath, sizeof spath, t);
  const char *const env[] = {ENV_FAST, senv, pwenv, a.env_log, a.env_key, a.env_pub, NULL};
  worker *w = worker_start(t, false);
  static const char *const args[] = {"drain", "run", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, url, env, CMD_TIMEOUT_MS, &r), 0);
  assert_true(th_wait_until(work_empty, t, 20000));
  worker_stop(w);
  if (r.exit_code != 0) fprintf(stderr, "%s%s", r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "replayed 8 "));
  assert_null(strstr(r.out, DRAIN_PASSWORD));
  assert_null(strstr(r.err, DRAIN_PASSWORD));
  assert_int_equal(atomic_load(&w->done), 8);
  free(w);
  /* Each move is in the trail, by actor drain as the broker user. */
  assert_int_equal(fx_count_hops(a.log, "\"actor\":\"drain\""), 8);
  char as[TH_NAME_MAX + 40];
  assert_true(th_fmt(as, sizeof as, "\"broker_user\":\"%s\"", user));
  assert_int_equal(fx_count_hops(a.log, as), 8);
  th_result v;
  assert_int_equal(fx_audit_verify(&a, &v), 0);
  assert_int_equal(v.exit_code, 0);
  fx_audit_remove(&a);
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", user));
  th_mgmt("DELETE", path, NULL, NULL);
  remove(pwfile);
  unlink(spath);
}

/* The lease's connection closed under a running drain (here by the
 * management API, as a broker restart or a network cut would): the run
 * stops at once with exit 1, rather than go on while another host may take
 * the lease. What it moved is in dsr.work, the rest in the DLQ. */
typedef struct {
  fx_case *t;
  char name[256]; /* the lease connection's name, once seen */
} lease_conn;

static bool lease_conn_seen(void *arg) {
  lease_conn *c = arg;
  return th_connection_named(&c->t->vhost, "dlq-bridge drain (lease)", c->name, sizeof c->name);
}

static void test_drain_stops_when_the_lease_is_lost(void **state) {
  fx_case *t = *state;
  declare(t);
  for (int i = 0; i < 10; i++) {
    char id[16];
    snprintf(id, sizeof id, "c%d", i);
    pub_dlq(t, id, "max_attempts", "upstream 503");
  }
  char senv[256], spath[200];
  state_env(senv, sizeof senv, spath, sizeof spath, t);
  /* No worker: the canary waits (up to 30 s) for completions. */
  const char *const env[] = {ENV_FAST, senv, NULL};
  bg_drain b = {t, env, {0}};
  pthread_t tb;
  assert_int_equal(pthread_create(&tb, NULL, bg_run, &b), 0);
  lease_conn c = {t, ""};
  assert_true(th_wait_until(lease_conn_seen, &c, 10000));
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.work", 3, 10000)); /* the canary moved */
  int64_t cut = th_now_ms();
  assert_int_equal(th_connection_close(c.name), 0);
  pthread_join(tb, NULL);
  int64_t took = th_now_ms() - cut;
  printf("lease lost: the drain stopped %lld ms after its connection was closed\n",
         (long long)took);
  assert_int_equal(b.r.exit_code, 1);
  assert_non_null(strstr(b.r.err, "the lease's connection to the broker was lost"));
  assert_true(took < 15000); /* one keeper beat (5 s) and the pass ending, not the canary timeout */
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 3);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 7, 10000));
  static const char *const st[] = {"drain", "status", "--json", NULL};
  th_result r;
  run(t, st, env, &r);
  assert_non_null(strstr(r.out, "\"stopped\":\"error\""));
  unlink(spath);
}

/* A hostile producer who knows a canary's request_id publishes an item
 * with that identity and a higher replay_count into the DLQ while the
 * canary waits: it is not the copy the drain moved (another message_id,
 * not the drain's replay stamp), so the canary completes, the run drains
 * the rest, and the hostile item is left in the DLQ untouched. */
static void test_drain_canary_not_judged_by_a_copied_identity(void **state) {
  fx_case *t = *state;
  declare(t);
  for (int i = 0; i < 10; i++) {
    char id[16];
    snprintf(id, sizeof id, "k%d", i);
    pub_dlq(t, id, "max_attempts", "upstream 503");
  }
  char senv[256], spath[200];
  state_env(senv, sizeof senv, spath, sizeof spath, t);
  const char *const env[] = {ENV_FAST, senv, NULL};
  bg_drain b = {t, env, {0}};
  pthread_t tb;
  assert_int_equal(pthread_create(&tb, NULL, bg_run, &b), 0);
  /* No worker yet: the canary (k0..k2) waits in dsr.work. */
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.work", 3, 20000));
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "k0"), 0);
  snprintf(m.message_id, sizeof m.message_id, "hostile-k0");
  assert_int_equal(th_msg_set_str(&m, "source_system", "crm"), 0);
  assert_int_equal(th_msg_set_int(&m, "replay_count", 7), 0);
  assert_int_equal(th_msg_set_int(&m, "attempt", 5), 0);
  assert_int_equal(th_msg_set_str(&m, "dlq_reason", "max_attempts"), 0);
  assert_int_equal(th_msg_set_str(&m, "replayed_by", "drain"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
  /* One to the review queue as well (where every copy used to count). */
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "k1"), 0);
  snprintf(m.message_id, sizeof m.message_id, "hostile-k1");
  assert_int_equal(th_msg_set_str(&m, "source_system", "crm"), 0);
  assert_int_equal(th_msg_set_int(&m, "replay_count", 9), 0);
  assert_int_equal(th_publish(t->conn, "", "compliance_review", &m), 0);
  th_msg_release(&m);
  worker *w = worker_start(t, false);
  pthread_join(tb, NULL);
  assert_true(th_wait_until(work_empty, t, 20000));
  worker_stop(w);
  if (b.r.exit_code != 0) fprintf(stderr, "drain: %s%s", b.r.out, b.r.err);
  assert_int_equal(b.r.exit_code, 0);
  static const char *const st[] = {"drain", "status", "--json", NULL};
  th_result r;
  run(t, st, env, &r);
  json_object *j = json_tokener_parse(r.out), *runs, *last, *c, *v;
  assert_non_null(j);
  assert_true(json_object_object_get_ex(j, "runs", &runs));
  last = json_object_array_get_idx(runs, json_object_array_length(runs) - 1);
  printf("hostile copies of a canary's identity: the run %s\n", th_json_str(last, "stopped"));
  assert_string_equal(th_json_str(last, "stopped"), "drained");
  assert_true(json_object_object_get_ex(last, "moved", &v));
  assert_int_equal(json_object_get_int(v), 10);
  assert_true(json_object_object_get_ex(last, "canary", &c));
  assert_true(json_object_object_get_ex(c, "failed", &v));
  assert_int_equal(json_object_get_int(v), 0);
  json_object_put(j);
  assert_int_equal(atomic_load(&w->done), 10);
  free(w);
  /* The hostile item is left where it was, not moved. */
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  th_msg_init(&m);
  assert_int_equal(th_get(t->conn, "dsr.dlq.manual", &m), 1);
  assert_string_equal(m.message_id, "hostile-k0");
  th_msg_release(&m);
  unlink(spath);
}

/* Eligibility by failure group: the group `inspect --json` shows for one
 * cause makes only that cause's items eligible (a dry run lists them). */
static void test_drain_by_group(void **state) {
  fx_case *t = *state;
  declare(t);
  for (int i = 0; i < 6; i++) {
    char id[16];
    snprintf(id, sizeof id, "q%d", i);
    char err[64];
    snprintf(err, sizeof err, i % 2 == 0 ? "upstream 503 for R-%d" : "schema mismatch in field %d",
             1000 + i);
    pub_dlq(t, id, "max_attempts", err);
  }
  static const char *const insp[] = {"inspect", "--json", NULL};
  th_result r;
  run(t, insp, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *j = json_tokener_parse(r.out), *items;
  assert_non_null(j);
  assert_true(json_object_object_get_ex(j, "items", &items));
  const char *g = th_json_str(json_object_array_get_idx(items, 0), "group");
  assert_non_null(g);
  char genv[96];
  assert_true(th_fmt(genv, sizeof genv, "DLQ_BRIDGE_DRAIN_GROUPS=%s", g));
  json_object_put(j);
  const char *const env[] = {"DLQ_BRIDGE_COMPLETION_WRITERS=" WRITER, genv, NULL};
  static const char *const dry[] = {"drain", "run", "--dry-run", NULL};
  run(t, dry, env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "would drain 3, would skip as complete 0, would leave 3 of 6"));
  assert_non_null(strstr(r.out, "q0"));
  assert_null(strstr(r.out, "q1 "));
  /* A group id that is not one: a configuration error, one line. */
  static const char *const bad[] = {"DLQ_BRIDGE_COMPLETION_WRITERS=" WRITER,
                                    "DLQ_BRIDGE_DRAIN_GROUPS=not-a-group", NULL};
  run(t, dry, bad, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "not a group id"));
  assert_int_equal(th_count_lines(r.err), 1);
}

/* Usage: no completion_writers is a configuration error. */
static void test_drain_needs_writers(void **state) {
  fx_case *t = *state;
  static const char *const args[] = {"drain", "run", NULL};
  th_result r;
  run(t, args, NULL, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "completion_writers"));
  assert_int_equal(th_count_lines(r.err), 1);

  /* No audit trail configured: a run refuses (exit 2, one line) unless
   * --no-audit, like every command that moves items. */
  declare(t);
  pub_dlq(t, "u0", "max_attempts", "upstream 503");
  static const char *const writers_only[] = {"DLQ_BRIDGE_COMPLETION_WRITERS=" WRITER, NULL};
  run(t, args, writers_only, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "audit"));
  assert_int_equal(th_count_lines(r.err), 1);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);

  /* An audit trail that cannot be opened stops the run before anything
   * moves (cli_audit_start, as replay), and the lease is not taken. */
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  const char *const bad_audit[] = {"DLQ_BRIDGE_COMPLETION_WRITERS=" WRITER,
                                   "DLQ_BRIDGE_AUDIT_LOG=/nonexistent/dir/audit.log", a.env_key,
                                   a.env_pub, NULL};
  run(t, args, bad_audit, &r);
  fx_audit_remove(&a);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_count_lines(r.err), 1);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  th_conn *probe = th_connect(&t->vhost);
  amqp_connection_state_t pc = th_conn_amqp(probe);
  amqp_queue_declare(pc, 1, amqp_cstring_bytes("dsr.drain.lease"), 0, 0, 1, 1, amqp_empty_table);
  assert_int_equal(amqp_get_rpc_reply(pc).reply_type, AMQP_RESPONSE_NORMAL); /* free again */
  th_close(probe);

  /* drain status on a state file that is not one: one line, exit 1. */
  char senv[256], spath[200];
  state_env(senv, sizeof senv, spath, sizeof spath, t);
  FILE *f = fopen(spath, "w");
  assert_non_null(f);
  fputs("{\"runs\": \"\x1b[31mnot a list\"}", f);
  fclose(f);
  const char *const env[] = {senv, NULL};
  static const char *const st[] = {"drain", "status", NULL};
  run(t, st, env, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "is not a drain state file"));
  assert_int_equal(th_count_lines(r.err), 1);
  unlink(spath);
  /* No file yet: no runs. */
  run(t, st, env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "no drain runs recorded"));
}

int main(void) {
  /* DLQB_TEST_FILTER=test_replay* runs only the matching cases. */
  if (getenv("DLQB_TEST_FILTER") != NULL) cmocka_set_test_filter(getenv("DLQB_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      FX_TEST(test_drain_needs_writers),
      FX_TEST(test_drain_canary_ramp_empties_eligible),
      FX_TEST(test_drain_stops_when_canary_fails),
      FX_TEST(test_drain_canary_not_judged_by_a_copied_identity),
      FX_TEST(test_drain_stops_on_refailures_in_the_ramp),
      FX_TEST(test_drain_canary_escalated_by_max_replays),
      FX_TEST(test_drain_lease),
      FX_TEST(test_drain_sigkill_loses_and_duplicates_nothing),
      FX_TEST(test_drain_least_privilege),
      FX_TEST(test_drain_stops_when_the_lease_is_lost),
      FX_TEST(test_drain_by_group),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

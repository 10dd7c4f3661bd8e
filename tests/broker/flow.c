/* The per-test fixture and the conservation flow: see flow.h. */
#include "flow.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- fixture ---------------------------------------------------------- */

int fx_setup(void **state) {
  /* Each case starts from the default settings: what a case set in this
   * process's environment for the commands it starts ends with it. */
  unsetenv("DLQ_BRIDGE_CATALOG_CHECKPOINT");
  unsetenv("DLQ_BRIDGE_CATALOG_WRITERS");
  fx_case *t = calloc(1, sizeof *t);
  if (t == NULL) return -1;
  t->name = *state != NULL ? (const char *)*state : "test";
  /* "test_declare_is_idempotent" -> vhost "declare-is-idempotent-<pid>-<n>" */
  const char *tag = strncmp(t->name, "test_", 5) == 0 ? t->name + 5 : t->name;
  if (th_vhost_create(&t->vhost, tag) != 0 || (t->conn = th_connect(&t->vhost)) == NULL) {
    free(t);
    return -1;
  }
  *state = t;
  return 0;
}

int fx_teardown(void **state) {
  fx_case *t = *state;
  for (int i = 0; i < t->nbridges; i++) th_bridge_kill(&t->bridges[i]);
  for (int i = 0; i < FX_MAX_WORKERS; i++) th_worker_close(t->workers[i]);
  for (int i = 0; i < t->nmsgs; i++) {
    th_msg_release(t->msgs[i]);
    free(t->msgs[i]);
  }
  th_close(t->conn);
  int rc = th_vhost_delete(&t->vhost);
  free(t);
  return rc;
}

th_msg *fx_msg(fx_case *t) {
  if (t->nmsgs >= FX_MAX_MSGS) return NULL;
  th_msg *m = malloc(sizeof *m);
  if (m == NULL) return NULL;
  th_msg_init(m);
  t->msgs[t->nmsgs++] = m;
  return m;
}

th_worker *fx_worker(fx_case *t) {
  for (int i = 0; i < FX_MAX_WORKERS; i++) {
    if (t->workers[i] != NULL) continue;
    t->workers[i] = th_worker_open(&t->vhost, "dsr.work", 1);
    return t->workers[i];
  }
  return NULL;
}

void fx_crash(fx_case *t, th_worker *w) {
  for (int i = 0; i < FX_MAX_WORKERS; i++)
    if (t->workers[i] == w) t->workers[i] = NULL;
  th_worker_crash(w);
}

void fx_dump_logs(const fx_case *t) {
  for (int i = 0; i < t->nbridges; i++) th_bridge_dump_log(&t->bridges[i]);
}

int fx_start_bridge(fx_case *t, const char *const *env) {
  if (t->nbridges >= FX_MAX_BRIDGES) return -1;
  /* Metrics off: two bridges would fight over the default port. The
   * caller's env comes later, so it wins. */
  const char *full[32];
  size_t n = 0;
  full[n++] = "DLQ_BRIDGE_METRICS_ADDR=off";
  /* As the shipped configs: the bridge's own user (guest here) is the
   * catalog's writer, so its escalator trusts the catalog's "nothing due"
   * and does not pass over the DLQ while the tests' looks read it. */
  full[n++] = "DLQ_BRIDGE_CATALOG_WRITERS=guest";
  for (size_t i = 0; env != NULL && env[i] != NULL && n + 1 < 32; i++) full[n++] = env[i];
  full[n] = NULL;

  char tag[32];
  snprintf(tag, sizeof tag, "bridge%d", t->nbridges + 1);
  th_bridge *b = &t->bridges[t->nbridges];
  if (th_bridge_start(b, &t->vhost, full, tag) != 0) return -1;
  t->nbridges++;
  /* One consumer for each bridge still running (one stopped earlier in
   * the case has none). */
  int running = 0;
  for (int i = 0; i < t->nbridges; i++) running += t->bridges[i].pid > 0;
  if (!th_wait_consumers(t->conn, "dsr.failed", running, FX_READY_TIMEOUT_MS) ||
      !th_bridge_running(b)) {
    fprintf(stderr, "bridge %d did not start consuming dsr.failed\n", t->nbridges);
    fx_dump_logs(t);
    return -1;
  }
  return 0;
}

int fx_stop_bridges(fx_case *t) {
  int failures = 0;
  for (int i = 0; i < t->nbridges; i++) {
    if (t->bridges[i].pid <= 0) continue;
    int rc = th_bridge_stop(&t->bridges[i], FX_STOP_TIMEOUT_MS);
    if (rc != 0) {
      th_bridge_dump_log(&t->bridges[i]);
      failures++;
    }
  }
  return failures == 0 ? 0 : -1;
}

int fx_publish_task(fx_case *t, const char *id) {
  th_msg *m = malloc(sizeof *m);
  if (m == NULL) return -1;
  th_msg_init(m);
  int rc = th_msg_task(m, id);
  if (rc == 0) rc = th_publish(t->conn, "", "dsr.work", m);
  th_msg_release(m);
  free(m);
  return rc;
}

typedef struct {
  fx_case *t;
  const char *queue;
  th_msg *out;
  int got;
} fx_take_wait;

static bool fx__took(void *arg) {
  fx_take_wait *w = arg;
  w->got = th_get(w->t->conn, w->queue, w->out);
  return w->got != 0;
}

int fx_take(fx_case *t, const char *queue, th_msg *out, int timeout_ms) {
  fx_take_wait w = {t, queue, out, 0};
  th_wait_until(fx__took, &w, timeout_ms);
  return w.got;
}

int64_t fx_attempt(const th_msg *m) {
  int64_t n = 0;
  if (th_msg_find(m, "attempt") == NULL) return 0;
  return th_msg_int(m, "attempt", &n) ? n : -1;
}

/* ---- an audit trail for the bridges ------------------------------------ */

int fx_audit_init(fx_audit *a) {
  memset(a, 0, sizeof *a);
  snprintf(a->dir, sizeof a->dir, "/tmp/dlqb-broker-audit-XXXXXX");
  if (mkdtemp(a->dir) == NULL) return -1;
  char pub[192];
  if (!th_fmt(a->key, sizeof a->key, "%s/audit.key", a->dir) ||
      !th_fmt(a->keys, sizeof a->keys, "%s/keys", a->dir) ||
      !th_fmt(pub, sizeof pub, "%s/keys/writer.pem", a->dir) ||
      !th_fmt(a->log, sizeof a->log, "%s/audit.log", a->dir) ||
      !th_fmt(a->env_log, sizeof a->env_log, "DLQ_BRIDGE_AUDIT_LOG=%s", a->log) ||
      !th_fmt(a->env_key, sizeof a->env_key, "DLQ_BRIDGE_AUDIT_KEY_FILE=%s", a->key) ||
      !th_fmt(a->env_pub, sizeof a->env_pub, "DLQ_BRIDGE_AUDIT_PUBLIC_KEYS=%s", a->keys) ||
      mkdir(a->keys, 0700) != 0)
    return -1;
  EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  int fd = k != NULL ? open(a->key, O_WRONLY | O_CREAT | O_TRUNC, 0600) : -1;
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  bool ok = f != NULL && PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) == 1;
  if (f != NULL) fclose(f);
  else if (fd >= 0) close(fd);
  FILE *g = ok ? fopen(pub, "w") : NULL;
  ok = g != NULL && PEM_write_PUBKEY(g, k) == 1;
  if (g != NULL) fclose(g);
  EVP_PKEY_free(k);
  return ok ? 0 : -1;
}

void fx_audit_remove(const fx_audit *a) {
  char cmd[128];
  if (a->dir[0] != '\0' && th_fmt(cmd, sizeof cmd, "rm -rf '%s'", a->dir)) (void)!system(cmd);
}

int fx_count_in_file(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  char *line = NULL;
  size_t cap = 0;
  int n = 0;
  /* Needles never span lines (records and log lines are one line each). */
  while (getline(&line, &cap, f) >= 0)
    for (const char *p = line; (p = strstr(p, needle)) != NULL; p++) n++;
  free(line);
  fclose(f);
  return n;
}

int fx_count_hops(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  char *line = NULL;
  size_t cap = 0;
  int n = 0;
  while (getline(&line, &cap, f) >= 0)
    if (strstr(line, needle) != NULL && strstr(line, "\"event\":\"move_started\"") == NULL) n++;
  free(line);
  fclose(f);
  return n;
}

/* ---- the console -------------------------------------------------------- */

int fx_console_start(fx_case *t, fx_console *c, const char *const *env, const char *tag) {
  memset(c, 0, sizeof *c);
  c->port = th_free_port();
  char addr[64];
  snprintf(addr, sizeof addr, "DLQ_BRIDGE_CONSOLE_ADDR=127.0.0.1:%d", c->port);
  const char *full[32];
  size_t n = 0;
  for (size_t i = 0; env != NULL && env[i] != NULL && n + 2 < 32; i++) full[n++] = env[i];
  full[n++] = addr; /* last, so it wins */
  full[n] = NULL;
  th_unique(c->jar, sizeof c->jar, "/tmp/dlqb-console-jar");
  static const char *const args[] = {"console", NULL};
  if (c->port < 0 || th_command_start(&c->proc, &t->vhost, args, full, tag) != 0) return -1;
  char cmd[TH_PATH_MAX + 256];
  bool up = th_wait_until(th_port_accepts, &c->port, FX_READY_TIMEOUT_MS) &&
            th_fmt(cmd, sizeof cmd,
                   "curl -sf -o /dev/null -c '%s' -d 'user=guest&password=guest' "
                   "http://127.0.0.1:%d/login",
                   c->jar, c->port) &&
            system(cmd) == 0;
  if (!up) th_bridge_dump_log(&c->proc);
  return up ? 0 : -1;
}

bool fx_console_get_cmd(const fx_console *c, const char *path, const char *out, char *cmd,
                        size_t len) {
  return th_fmt(cmd, len, "curl -s --max-time 120 -b '%s' -o '%s' 'http://127.0.0.1:%d%s'", c->jar,
                out, c->port, path);
}

int fx_console_get(const fx_console *c, const char *path, const char *out) {
  char cmd[2 * TH_PATH_MAX + 256];
  if (!fx_console_get_cmd(c, path, out, cmd, sizeof cmd)) return -1;
  return system(cmd);
}

int fx_console_stop(fx_console *c) {
  int status = c->proc.pid != 0 ? th_bridge_stop(&c->proc, FX_STOP_TIMEOUT_MS) : -1;
  if (c->jar[0]) unlink(c->jar);
  return status;
}

int fx_audit_verify(const fx_audit *a, th_result *r) {
  /* No FILE: verify takes the configured log with its rotated files. */
  const char *const args[] = {"audit", "verify", NULL};
  const char *const env[] = {a->env_log, a->env_pub, NULL};
  return th_run_bridge(args, NULL, env, 30000, r);
}

/* ---- the conservation flow -------------------------------------------- */

#define FLOW_ID_PREFIX  "cons-"
#define FLOW_MAX_DELAYS 8
#define FLOW_MAX_QUEUES (3 + FLOW_MAX_DELAYS)

flow_fate flow_fate_of(int i) {
  switch (i % 8) {
  case 4: return FLOW_REJECT_ONCE;
  case 5: return FLOW_REJECT_ALWAYS;
  case 6: return FLOW_REPORT_ONCE;
  case 7: return i % 16 == 7 ? FLOW_CRASH_ALWAYS : FLOW_CRASH_ONCE;
  default: return FLOW_ACK;
  }
}

/* The task index in a message's request_id, or -1 when it is not ours. */
static int flow__index(const th_msg *m, int tasks) {
  const char *id = th_msg_str(m, "request_id");
  if (id == NULL || strncmp(id, FLOW_ID_PREFIX, strlen(FLOW_ID_PREFIX)) != 0) return -1;
  char *end;
  long i = strtol(id + strlen(FLOW_ID_PREFIX), &end, 10);
  return (*end == '\0' && i >= 0 && i < tasks) ? (int)i : -1;
}

/* Mutable state of one run. */
typedef struct {
  fx_case *t;
  const flow_opts *o;
  flow_result *r;
  int *acked;    /* per task: acks by the worker */
  int *found;    /* per task: copies found in queues at the end */
  bool *crashed; /* per task: the worker crashed on it at least once */
  th_worker *worker;
  th_msg *msg;
  bool restarted;
  int held_back; /* tasks [tasks - held_back, tasks) wait for the restart */
  char queues[FLOW_MAX_QUEUES][TH_NAME_MAX]; /* every queue a task can be in */
  size_t nqueues;
} flow_run_state;

/* Lists dsr.work, the delay queues of o->retry_delays, dsr.failed and the DLQ. */
static int flow__queues(flow_run_state *s) {
  snprintf(s->queues[s->nqueues++], TH_NAME_MAX, "dsr.work");
  snprintf(s->queues[s->nqueues++], TH_NAME_MAX, "dsr.failed");
  snprintf(s->queues[s->nqueues++], TH_NAME_MAX, "dsr.dlq.manual");
  const char *p = s->o->retry_delays;
  while (*p != '\0') {
    size_t len = strcspn(p, ",");
    if (s->nqueues >= FLOW_MAX_QUEUES) return -1;
    snprintf(s->queues[s->nqueues++], TH_NAME_MAX, "dsr.retry.%.*s", (int)len, p);
    p += len + (p[len] == ',');
  }
  return 0;
}

/* Every task is either acked or in the DLQ, and nothing waits elsewhere. */
static bool flow__settled(flow_run_state *s) {
  int done = 0;
  for (int i = 0; i < s->o->tasks; i++) done += s->acked[i] > 0;
  long dlq = th_queue_depth(s->t->conn, "dsr.dlq.manual");
  if (dlq < 0 || done + dlq < s->o->tasks) return false;
  for (size_t q = 0; q < s->nqueues; q++) {
    if (strcmp(s->queues[q], "dsr.dlq.manual") == 0) continue;
    if (th_queue_depth(s->t->conn, s->queues[q]) != 0) return false;
  }
  return true;
}

/* Acts on one delivery as the task's fate says. */
static int flow__handle(flow_run_state *s) {
  flow_result *r = s->r;
  int i = flow__index(s->msg, s->o->tasks);
  r->deliveries++;
  if (i < 0) {
    r->foreign++;
    return th_worker_ack(s->worker);
  }
  int64_t attempt = 0;
  th_msg_int(s->msg, "attempt", &attempt);
  flow_fate fate = flow_fate_of(i);
  bool crash = fate == FLOW_CRASH_ALWAYS || (fate == FLOW_CRASH_ONCE && !s->crashed[i]);
  if (crash) {
    s->crashed[i] = true;
    r->crashes++;
    th_worker_crash(s->worker);
    s->worker = NULL;
    return 0;
  }
  if (fate == FLOW_REJECT_ALWAYS || (fate == FLOW_REJECT_ONCE && attempt == 0)) {
    r->rejects++;
    return th_worker_reject(s->worker);
  }
  if (fate == FLOW_REPORT_ONCE && attempt == 0) {
    r->reports++;
    return th_worker_report(s->worker, s->t->conn, s->msg, "flow: upstream timeout");
  }
  if (th_worker_ack(s->worker) != 0) return -1;
  r->acks++;
  s->acked[i]++;
  return 0;
}

/* Publishes task i as a worker would report its failure: to dsr.dlx. */
static int flow__report_new(flow_run_state *s, int i) {
  char id[32];
  snprintf(id, sizeof id, FLOW_ID_PREFIX "%d", i);
  th_msg_reset(s->msg);
  if (th_msg_task(s->msg, id) != 0 || th_msg_add_str(s->msg, "worker_error", "flow: burst") != 0)
    return -1;
  return th_publish(s->t->conn, "dsr.dlx", "", s->msg);
}

/* Reports the held-back tasks, then at once restarts the node and
 * reconnects the test's own connection. */
static int flow__restart(flow_run_state *s) {
  for (int i = s->o->tasks - s->held_back; i < s->o->tasks; i++)
    if (flow__report_new(s, i) != 0) return -1;
  th_worker_close(s->worker);
  s->worker = NULL;
  th_close(s->t->conn);
  s->t->conn = NULL;
  printf("flow: restarting the node with %d acks done, %d tasks just reported\n", s->r->acks,
         s->held_back);
  fflush(stdout);
  if (th_node_restart() != 0) return -1;
  s->restarted = true;
  s->t->conn = th_connect(&s->t->vhost);
  if (s->t->conn == NULL) return -1;
  s->r->reconnected = th_wait_consumers(s->t->conn, "dsr.failed", s->o->bridges, 60000);
  if (!s->r->reconnected)
    fprintf(stderr, "flow: bridges did not consume again after the restart\n");
  return 0;
}

/* The worker loop: runs until settled or the deadline. */
static int flow__work(flow_run_state *s, int64_t deadline) {
  while (th_now_ms() < deadline) {
    if (s->t->conn == NULL && (s->t->conn = th_connect(&s->t->vhost)) == NULL) return -1;
    if (s->worker == NULL && (s->worker = th_worker_open(&s->t->vhost, "dsr.work", 1)) == NULL)
      return -1;
    if (s->o->restart && !s->restarted && s->r->acks >= s->o->tasks / 4) {
      if (flow__restart(s) != 0) return -1;
      continue;
    }
    if (s->o->fault != NULL && s->o->fault(s->t, s->o->fault_arg, s->r) != 0) return -1;
    int got = th_worker_next(s->worker, s->msg, 200);
    if (got < 0) {
      th_worker_crash(s->worker);
      s->worker = NULL;
      continue;
    }
    if (got == 1) {
      if (flow__handle(s) != 0 && s->worker != NULL) {
        /* A failed ack/reject means the connection is gone; start over. */
        th_worker_crash(s->worker);
        s->worker = NULL;
      }
      continue;
    }
    /* Idle: the flow may be over. */
    for (int b = 0; b < s->t->nbridges; b++)
      if (!th_bridge_running(&s->t->bridges[b])) return -1;
    if (flow__settled(s)) {
      s->r->settled = true;
      return 0;
    }
  }
  fprintf(stderr, "flow: not settled within %d ms\n", s->o->timeout_ms);
  return 0;
}

/* Empties every flow queue, counting what it finds per task. */
static int flow__drain(flow_run_state *s) {
  flow_result *r = s->r;
  for (size_t q = 0; q < s->nqueues; q++) {
    bool dlq = strcmp(s->queues[q], "dsr.dlq.manual") == 0;
    int got;
    while ((got = th_get(s->t->conn, s->queues[q], s->msg)) == 1) {
      int i = flow__index(s->msg, s->o->tasks);
      if (i < 0) {
        r->foreign++;
        continue;
      }
      s->found[i]++;
      if (!dlq) {
        r->in_other++;
        continue;
      }
      r->in_dlq++;
      const char *reason = th_msg_str(s->msg, "dlq_reason");
      if (reason != NULL && strcmp(reason, "max_attempts") == 0) r->dlq_max_attempts++;
      else if (reason != NULL && strcmp(reason, "poison") == 0) r->dlq_poison++;
      else r->dlq_other++;
    }
    if (got < 0) return -1;
  }
  return 0;
}

int flow_run(fx_case *t, const flow_opts *o, flow_result *r) {
  memset(r, 0, sizeof *r);
  flow_run_state s = {.t = t, .o = o, .r = r};
  s.acked = calloc((size_t)o->tasks, sizeof *s.acked);
  s.found = calloc((size_t)o->tasks, sizeof *s.found);
  s.crashed = calloc((size_t)o->tasks, sizeof *s.crashed);
  s.msg = malloc(sizeof *s.msg);
  int rc = -1;
  if (s.acked == NULL || s.found == NULL || s.crashed == NULL || s.msg == NULL) goto out;
  th_msg_init(s.msg);

  if (flow__queues(&s) != 0) goto out;
  char delays[128];
  snprintf(delays, sizeof delays, "DLQ_BRIDGE_RETRY_DELAYS=%s", o->retry_delays);
  const char *env[16] = {delays, "DLQ_BRIDGE_RETRY_JITTER=0", "DLQ_BRIDGE_MAX_ATTEMPTS=3", NULL};
  for (size_t i = 0, n = 3; o->bridge_env != NULL && o->bridge_env[i] != NULL && n < 15; i++)
    env[n++] = o->bridge_env[i];
  for (int b = 0; b < o->bridges; b++)
    if (fx_start_bridge(t, env) != 0) goto out;
  s.held_back = o->restart ? o->tasks / 4 : 0;
  for (int i = 0; i < o->tasks - s.held_back; i++) {
    char id[32];
    snprintf(id, sizeof id, FLOW_ID_PREFIX "%d", i);
    if (fx_publish_task(t, id) != 0) goto out;
  }
  if (flow__work(&s, th_now_ms() + o->timeout_ms) != 0) goto out;

  /* Stop everything before counting, so nothing moves while we look. */
  th_worker_close(s.worker);
  s.worker = NULL;
  for (int b = 0; b < t->nbridges; b++) {
    if (t->bridges[b].pid > 0 && th_bridge_stop(&t->bridges[b], FX_STOP_TIMEOUT_MS) != 0)
      r->bridge_exit_failures++;
  }
  if (o->before_drain != NULL && o->before_drain(t, o->before_drain_arg) != 0) goto out;
  if (flow__drain(&s) != 0) goto out;

  for (int i = 0; i < o->tasks; i++) {
    int copies = (s.acked[i] > 0 ? s.acked[i] : 0) + s.found[i];
    r->completed += s.acked[i] > 0;
    if (copies == 0) {
      r->lost++;
      if (r->lost <= 20) fprintf(stderr, "flow: task " FLOW_ID_PREFIX "%d is lost\n", i);
    }
    if (copies > 1) r->duplicates += copies - 1;
  }
  rc = 0;
out:
  if (rc != 0) fx_dump_logs(t);
  th_worker_close(s.worker);
  if (s.msg != NULL) th_msg_release(s.msg);
  free(s.msg);
  free(s.acked);
  free(s.found);
  free(s.crashed);
  return rc;
}

void flow_print(const char *label, const flow_opts *o, const flow_result *r) {
  printf("flow %s: tasks=%d bridges=%d restart=%d settled=%d | completed=%d dlq=%d "
         "(max_attempts=%d poison=%d other=%d) elsewhere=%d | lost=%d duplicates=%d foreign=%d | "
         "deliveries=%d acks=%d rejects=%d reports=%d crashes=%d bridge_exit_failures=%d\n",
         label, o->tasks, o->bridges, o->restart, r->settled, r->completed, r->in_dlq,
         r->dlq_max_attempts, r->dlq_poison, r->dlq_other, r->in_other, r->lost, r->duplicates,
         r->foreign, r->deliveries, r->acks, r->rejects, r->reports, r->crashes,
         r->bridge_exit_failures);
  fflush(stdout);
}

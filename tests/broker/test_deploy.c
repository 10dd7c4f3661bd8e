/* Deployment next to RabbitMQ: the committed definitions load into a fresh
 * vhost and `declare` then finds nothing to change; the daemon and the ops
 * commands run as least-privilege users (docs/least-privilege.md) with the
 * password only in a file, and no password ever shows in output or logs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flow.h"

#define CMD_TIMEOUT_MS 30000

/* snprintf that fails the test on truncation (paths and URLs must be whole). */
#define fmt(...) assert_true(th_fmt(__VA_ARGS__))

extern char **environ;
#define PASSWORD "pw-Deploy-7f3a-never-printed"

/* The permission patterns of docs/least-privilege.md, JSON-escaped. */
#define PERM_DEPLOYER                                                                              \
  "{\"configure\":\"^(dsr\\\\..+|compliance_review(\\\\.migrating)?)$\","                          \
  "\"write\":\"^(amq\\\\.default|dsr\\\\..+|compliance_review(\\\\.migrating)?)$\","               \
  "\"read\":\"^(dsr\\\\..+|compliance_review(\\\\.migrating)?)$\"}"
#define PERM_BRIDGE                                                                                \
  "{\"configure\":\"^$\",\"write\":\"^amq\\\\.default$\","                                         \
  "\"read\":\"^(dsr\\\\.failed|dsr\\\\.dlq\\\\.manual|compliance_review|dsr\\\\.catalog)$\"}"
/* What the docs gave the bridge before: its escalator cannot read the DLQ. */
#define PERM_BRIDGE_NO_DLQ                                                                         \
  "{\"configure\":\"^$\",\"write\":\"^amq\\\\.default$\",\"read\":\"^dsr\\\\.failed$\"}"
#define PERM_OPERATOR                                                                              \
  "{\"configure\":\"^$\",\"write\":\"^amq\\\\.default$\","                                         \
  "\"read\":\"^(dsr\\\\.dlq\\\\.manual|compliance_review|dsr\\\\.completed|dsr\\\\.catalog)$\"}"
/* docs/least-privilege.md: the auditor reads the anchors, nothing else. */
#define PERM_AUDITOR                                                                               \
  "{\"configure\":\"^$\",\"write\":\"^$\",\"read\":\"^dsr\\\\.audit\\\\.anchors$\"}"
#define PERM_WORKER                                                                                \
  "{\"configure\":\"^$\",\"write\":\"^(amq\\\\.default|dsr\\\\.dlx)$\","                           \
  "\"read\":\"^dsr\\\\.work$\"}"

/* ---- definitions ------------------------------------------------------ */

static size_t queue_count(const fx_case *t) {
  char path[TH_PATH_MAX];
  fmt(path, sizeof path, "/api/queues/%s?columns=name", t->vhost.name);
  json_object *qs = th_mgmt_get_json(path);
  assert_non_null(qs);
  size_t n = json_object_array_length(qs);
  json_object_put(qs);
  return n;
}

static void test_definitions_load_then_declare_changes_nothing(void **state) {
  fx_case *t = *state;
  const th_env *e = th_env_get();
  char file[TH_PATH_MAX + 64], api[TH_PATH_MAX];
  fmt(file, sizeof file, "%s/definitions/definitions.json", e->source_dir);
  fmt(api, sizeof api, "/api/definitions/%s", t->vhost.name);
  int status = th_mgmt_post_file(api, file);
  if (status != 204 && status != 201) fprintf(stderr, "loading %s: HTTP %d\n", file, status);
  assert_true(status == 204 || status == 201);

  json_object *defs = json_object_from_file(file);
  assert_non_null(defs);
  json_object *queues = NULL;
  assert_true(json_object_object_get_ex(defs, "queues", &queues));
  size_t in_file = json_object_array_length(queues);
  json_object_put(defs);
  assert_int_equal(queue_count(t), in_file);

  char *before = th_queue_list(t->vhost.name);
  assert_non_null(before);

  static const char *const args[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, t->vhost.url, NULL, CMD_TIMEOUT_MS, &r), 0);
  if (r.exit_code != 0) fprintf(stderr, "declare after definitions: %s", r.err);
  assert_int_equal(r.exit_code, 0);
  assert_null(strstr(r.err, "PRECONDITION_FAILED"));
  char *after = th_queue_list(t->vhost.name);
  assert_non_null(after);
  assert_string_equal(before, after);
  assert_int_equal(queue_count(t), in_file);
  free(before);
  free(after);
}

/* ---- least privilege -------------------------------------------------- */

typedef struct {
  char name[TH_NAME_MAX + 16];
  char url[TH_URL_MAX]; /* without a password */
  char password_file[TH_PATH_MAX];
  char env_file[TH_PATH_MAX + 32]; /* "DLQ_BRIDGE_PASSWORD_FILE=..." */
} restricted_user;

/* Creates user <vhost>-<role> with PASSWORD (in a 0600 file, never in the
 * URL) and the given permissions on t's vhost only. */
static void make_user(const fx_case *t, const char *role, const char *perms, restricted_user *u) {
  const th_env *e = th_env_get();
  char path[TH_PATH_MAX];
  fmt(u->name, sizeof u->name, "%s-%s", t->vhost.name, role);
  fmt(path, sizeof path, "/api/users/%s", u->name);
  int status = th_mgmt("PUT", path, "{\"password\":\"" PASSWORD "\",\"tags\":\"\"}", NULL);
  assert_true(status == 201 || status == 204);
  fmt(path, sizeof path, "/api/permissions/%s/%s", t->vhost.name, u->name);
  status = th_mgmt("PUT", path, perms, NULL);
  assert_true(status == 201 || status == 204);

  fmt(u->url, sizeof u->url, "amqp://%s@127.0.0.1:%d/%s", u->name, e->amqp_port, t->vhost.name);
  fmt(u->password_file, sizeof u->password_file, "%s/%s.password", e->log_dir, u->name);
  FILE *f = fopen(u->password_file, "w");
  assert_non_null(f);
  chmod(u->password_file, 0600);
  fputs(PASSWORD "\n", f);
  fclose(f);
  fmt(u->env_file, sizeof u->env_file, "DLQ_BRIDGE_PASSWORD_FILE=%s", u->password_file);
}

static void drop_user(const restricted_user *u) {
  char path[TH_PATH_MAX];
  fmt(path, sizeof path, "/api/users/%s", u->name);
  th_mgmt("DELETE", path, NULL, NULL);
  remove(u->password_file);
}

static void assert_no_password(const char *what, const char *text) {
  if (strstr(text, PASSWORD) != NULL) fprintf(stderr, "the password appears in %s\n", what);
  assert_null(strstr(text, PASSWORD));
}

static void assert_log_has_no_password(const th_bridge *b) {
  FILE *f = fopen(b->log_path, "r");
  assert_non_null(f);
  char line[8192];
  while (fgets(line, sizeof line, f) != NULL) assert_no_password(b->log_path, line);
  fclose(f);
}

/* Runs a command as u; returns its result after checking that no password
 * was printed. */
static void run_as(const restricted_user *u, const char *const *args, const char *extra_env,
                   th_result *r) {
  const char *env[] = {u->env_file, "DLQ_BRIDGE_METRICS_ADDR=off", extra_env, NULL};
  assert_int_equal(th_run_bridge(args, u->url, env, CMD_TIMEOUT_MS, r), 0);
  printf("%s as %s: exit %d\n%s%s", args[0], u->name, r->exit_code, r->out, r->err);
  assert_no_password("stdout", r->out);
  assert_no_password("stderr", r->err);
  assert_null(strstr(r->err, "ACCESS_REFUSED"));
}

/* Publishes a task that allows max_attempts attempts. */
static void publish_task(fx_case *t, const char *id, int max_attempts) {
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, id), 0);
  assert_int_equal(th_msg_add_int(&m, "max_attempts", max_attempts), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.work", &m), 0);
  th_msg_release(&m);
}

/* True when `dlq-bridge --help` lists the command. */
static bool has_command(const char *name) {
  static const char *const args[] = {"--help", NULL};
  th_result r;
  if (th_run_bridge(args, NULL, NULL, CMD_TIMEOUT_MS, &r) != 0 || r.exit_code != 0) return false;
  char needle[64];
  fmt(needle, sizeof needle, "\n  %s ", name);
  return strstr(r.out, needle) != NULL;
}

/* Starts `dlq-bridge ARGS...` as a daemon like th_bridge_start does, but
 * with arguments (th_bridge_start runs plain `run`): a clean DLQ_BRIDGE_*
 * environment plus env, output to the log, SIGTERM when the test dies. */
static void start_daemon(th_bridge *b, const char *const *args, const char *url,
                         const char *const *env, const char *tag) {
  const th_env *e = th_env_get();
  memset(b, 0, sizeof *b);
  fmt(b->log_path, sizeof b->log_path, "%s/%s.log", e->log_dir, tag);
  const char *argv[8] = {e->bridge_bin};
  for (size_t i = 0; args[i] != NULL && i + 2 < 8; i++) argv[i + 1] = args[i];
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    for (char **v = environ; *v != NULL;) {
      if (strncmp(*v, "DLQ_BRIDGE_", 11) != 0) {
        v++;
        continue;
      }
      char name[256];
      fmt(name, sizeof name, "%.*s", (int)strcspn(*v, "="), *v);
      unsetenv(name); /* shifts environ: look at the same slot again */
    }
    setenv("DLQ_BRIDGE_URL", url, 1);
    for (size_t i = 0; env[i] != NULL; i++) {
      char name[256];
      size_t len = strcspn(env[i], "=");
      fmt(name, sizeof name, "%.*s", (int)len, env[i]);
      setenv(name, env[i] + len + 1, 1);
    }
    int fd = open(b->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (fd < 0) _exit(126);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  b->pid = pid;
}

/* A worker on dsr.work (as guest) takes the next task and rejects it. */
static void reject_next(fx_case *t, th_worker *w, const char *id, int64_t attempt) {
  th_msg m;
  th_msg_init(&m);
  FX_CHECK(t, th_worker_next(w, &m, 15000) == 1);
  FX_HDR_STR_EQ(&m, "request_id", id);
  FX_CHECK(t, fx_attempt(&m) == attempt);
  assert_int_equal(th_worker_reject(w), 0);
  th_msg_release(&m);
}

static void test_least_privilege_bridge_runs_the_flow(void **state) {
  fx_case *t = *state;
  restricted_user deployer, bridge;
  make_user(t, "deployer", PERM_DEPLOYER, &deployer);
  make_user(t, "bridge", PERM_BRIDGE, &bridge);
  static const char *const delays = "DLQ_BRIDGE_RETRY_DELAYS=200ms";
  /* Short, so the daemon's escalator (it reads the DLQ) acts in the test. */
  static const char *const sla = "DLQ_BRIDGE_DLQ_SLA=2s";

  /* The deployer declares; the bridge user may not. */
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  run_as(&deployer, declare, delays, &r);
  assert_int_equal(r.exit_code, 0);
  const char *env_b[] = {bridge.env_file, "DLQ_BRIDGE_METRICS_ADDR=off", delays, sla, NULL};
  assert_int_equal(th_run_bridge(declare, bridge.url, env_b, CMD_TIMEOUT_MS, &r), 0);
  printf("declare as the bridge user: exit %d: %s", r.exit_code, r.err);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "ACCESS_REFUSED"));
  assert_no_password("stderr", r.err);

  /* The daemon as the bridge user, password only in the file. */
  static const char *const run_args[] = {"run", "--no-declare", NULL};
  char tag[TH_NAME_MAX + 16];
  fmt(tag, sizeof tag, "%s-bridge-user", t->vhost.name);
  th_bridge *b = &t->bridges[t->nbridges++];
  start_daemon(b, run_args, bridge.url, env_b, tag);
  FX_CHECK(t, th_wait_consumers(t->conn, "dsr.failed", 1, FX_READY_TIMEOUT_MS));

  /* One task retried (through dsr.retry.200ms and back), one to the DLQ. */
  publish_task(t, "lp-retry", 5);
  publish_task(t, "lp-dlq", 1);
  th_worker *w = th_worker_open(&t->vhost, "dsr.work", 1);
  assert_non_null(w);
  reject_next(t, w, "lp-retry", 0);
  reject_next(t, w, "lp-dlq", 0);
  th_msg m;
  th_msg_init(&m);
  FX_CHECK(t, th_worker_next(w, &m, 15000) == 1);
  FX_HDR_STR_EQ(&m, "request_id", "lp-retry");
  FX_CHECK(t, fx_attempt(&m) == 1);
  assert_int_equal(th_worker_ack(w), 0);
  th_msg_release(&m);
  th_worker_close(w);
  /* In the DLQ, then past its SLA: the escalator, as the same user,
   * moves it to compliance_review (it needs read on the DLQ). */
  th_msg_init(&m);
  FX_CHECK(t, fx_take(t, "compliance_review", &m, 20000) == 1);
  FX_HDR_STR_EQ(&m, "request_id", "lp-dlq");
  FX_HDR_STR_EQ(&m, "escalated_by", "dlq-bridge");
  th_msg_release(&m);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  FX_CHECK(t, th_bridge_running(b));
  assert_int_equal(fx_stop_bridges(t), 0);
  assert_log_has_no_password(b);

  drop_user(&deployer);
  drop_user(&bridge);
}

typedef struct {
  int port;
  int status;
  char *body;
} health;

static bool health_is(void *arg) {
  health *h = arg;
  char *body = NULL;
  int status = th_http_get(h->port, "/healthz", &body);
  bool match = status == h->status;
  if (match) {
    free(h->body);
    h->body = body;
  } else {
    free(body);
  }
  return match;
}

/* A bridge user that may not read the DLQ routes, but its escalator can
 * never escalate: /healthz says so (it was only logged at debug level, so
 * the docs' own permissions silently disabled the SLA), and once the
 * permission is given the overdue item moves without a restart. */
static void test_bridge_without_dlq_read_is_unhealthy(void **state) {
  fx_case *t = *state;
  restricted_user deployer, bridge;
  make_user(t, "deployer", PERM_DEPLOYER, &deployer);
  make_user(t, "bridge", PERM_BRIDGE_NO_DLQ, &bridge);
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  run_as(&deployer, declare, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "lp-overdue"), 0);
  assert_int_equal(th_msg_add_str(&m, "dlq_reason", "max_attempts"), 0);
  assert_int_equal(th_msg_add_str(&m, "dlq_at", "2026-01-01T00:00:00Z"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);

  int port = th_free_port();
  assert_true(port > 0);
  char addr[64];
  fmt(addr, sizeof addr, "DLQ_BRIDGE_METRICS_ADDR=127.0.0.1:%d", port);
  const char *env_b[] = {bridge.env_file, addr, "DLQ_BRIDGE_DLQ_SLA=2s", NULL};
  static const char *const run_args[] = {"run", "--no-declare", NULL};
  char tag[TH_NAME_MAX + 16];
  fmt(tag, sizeof tag, "%s-bridge-user", t->vhost.name);
  th_bridge *b = &t->bridges[t->nbridges++];
  start_daemon(b, run_args, bridge.url, env_b, tag);
  FX_CHECK(t, th_wait_consumers(t->conn, "dsr.failed", 1, FX_READY_TIMEOUT_MS));

  health h = {port, 503, NULL};
  FX_CHECK(t, th_wait_until(health_is, &h, 20000));
  printf("healthz: %s", h.body);
  assert_non_null(strstr(h.body, "dlq sla escalation refused"));
  assert_non_null(strstr(h.body, "ACCESS_REFUSED"));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);

  char path[TH_PATH_MAX];
  fmt(path, sizeof path, "/api/permissions/%s/%s", t->vhost.name, bridge.name);
  int status = th_mgmt("PUT", path, PERM_BRIDGE, NULL);
  assert_true(status == 201 || status == 204);
  th_msg_init(&m);
  FX_CHECK(t, fx_take(t, "compliance_review", &m, 20000) == 1);
  FX_HDR_STR_EQ(&m, "request_id", "lp-overdue");
  th_msg_release(&m);
  h.status = 200;
  FX_CHECK(t, th_wait_until(health_is, &h, 20000));
  assert_string_equal(h.body, "ok\n");
  free(h.body);
  assert_int_equal(fx_stop_bridges(t), 0);
  assert_log_has_no_password(b);
  drop_user(&deployer);
  drop_user(&bridge);
}

/* The ops commands as the operator user, for those this build has. */
static void test_least_privilege_operator_runs_ops(void **state) {
  fx_case *t = *state;
  restricted_user deployer, operator;
  make_user(t, "deployer", PERM_DEPLOYER, &deployer);
  make_user(t, "operator", PERM_OPERATOR, &operator);
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  run_as(&deployer, declare, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "lp-escalate"), 0);
  assert_int_equal(th_msg_add_str(&m, "last_error", "rejected by worker"), 0);
  assert_int_equal(th_msg_add_str(&m, "dlq_reason", "max_attempts"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "lp-replay"), 0);
  assert_int_equal(th_msg_add_str(&m, "dlq_reason", "max_attempts"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
  assert_true(th_wait_depth(t->conn, "dsr.dlq.manual", 2, 5000));

  /* replay reads the ledger (a stream) as well as the DLQ. */
  static const char *const stats[] = {"stats", NULL};
  static const char *const inspect[] = {"inspect", "--all", NULL};
  static const char *const escalate[] = {"escalate", "--request-id", "lp-escalate", NULL};
  static const char *const replay[] = {"replay", "--request-id", "lp-replay", NULL};
  const char *const *ops[] = {stats, inspect, escalate, replay};
  int ran = 0;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    if (!has_command(ops[i][0])) {
      printf("no '%s' command in this build; not run as the operator\n", ops[i][0]);
      continue;
    }
    run_as(&operator, ops[i], NULL, &r);
    assert_int_equal(r.exit_code, 0);
    ran++;
  }
  if (has_command("escalate")) {
    assert_true(th_wait_depth(t->conn, "compliance_review", 1, 5000));
  }
  if (has_command("replay")) assert_true(th_wait_depth(t->conn, "dsr.work", 1, 5000));
  if (has_command("escalate") && has_command("replay"))
    assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);

  /* A completion as the worker user writes it (docs/worker-guide.md: user_id
   * its own name) counts for the operator's replay that lists that user. */
  if (has_command("replay")) {
    restricted_user worker;
    make_user(t, "worker", PERM_WORKER, &worker);
    th_conn *wc = th_connect_as(&t->vhost, worker.name, PASSWORD);
    assert_non_null(wc);
    th_msg_init(&m);
    assert_int_equal(th_msg_add_str(&m, "request_id", "lp-done"), 0);
    assert_int_equal(th_msg_add_str(&m, "source_system", "test-suite"), 0);
    fmt(m.user_id, sizeof m.user_id, "%s", worker.name);
    assert_int_equal(th_publish(wc, "", "dsr.completed", &m), 0);
    th_msg_release(&m);
    th_close(wc);
    th_msg_init(&m);
    assert_int_equal(th_msg_task(&m, "lp-done"), 0);
    assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
    th_msg_release(&m);
    char writers[TH_NAME_MAX + 64];
    fmt(writers, sizeof writers, "DLQ_BRIDGE_COMPLETION_WRITERS=%s", worker.name);
    static const char *const done[] = {"replay", "--request-id", "lp-done", NULL};
    run_as(&operator, done, writers, &r);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "replayed 0, skipped as complete 1"));
    assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
    drop_user(&worker);
  }
  drop_user(&deployer);
  drop_user(&operator);
  if (ran == 0) skip();
}

/* The operator's audited resolve anchors its run in dsr.audit.anchors
 * (through amq.default, which it has), and an auditor user with read on
 * that stream only, given the public key only, verifies against it. */
static void test_least_privilege_anchors(void **state) {
  fx_case *t = *state;
  if (!has_command("resolve")) skip();
  restricted_user deployer, operator, auditor;
  make_user(t, "deployer", PERM_DEPLOYER, &deployer);
  make_user(t, "operator", PERM_OPERATOR, &operator);
  make_user(t, "auditor", PERM_AUDITOR, &auditor);
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  run_as(&deployer, declare, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "lp-anchor"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
  fx_audit a;
  assert_int_equal(fx_audit_init(&a), 0);
  const char *const wenv[] = {operator.env_file, "DLQ_BRIDGE_METRICS_ADDR=off", a.env_log,
                              a.env_key, NULL};
  static const char *const resolve[] = {"resolve", "--message-id",   "msg-lp-anchor",
                                        "--note",  "erased by hand", NULL};
  assert_int_equal(th_run_bridge(resolve, operator.url, wenv, CMD_TIMEOUT_MS, &r), 0);
  printf("resolve as %s: exit %d\n%s%s", operator.name, r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  assert_null(strstr(r.err, "not anchored"));
  assert_true(th_wait_depth(t->conn, "dsr.audit.anchors", 1, 5000));
  const char *const venv[] = {auditor.env_file, a.env_log, a.env_pub, NULL};
  static const char *const verify[] = {"audit", "verify", "--anchors", NULL};
  assert_int_equal(th_run_bridge(verify, auditor.url, venv, CMD_TIMEOUT_MS, &r), 0);
  printf("audit verify --anchors as %s: exit %d\n%s%s", auditor.name, r.exit_code, r.out, r.err);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "anchors: 1 anchor of 1 chain checked (0 ignored"));
  assert_no_password("stdout", r.out);
  assert_no_password("stderr", r.err);
  fx_audit_remove(&a);
  drop_user(&deployer);
  drop_user(&operator);
  drop_user(&auditor);
}

/* A wrong password in the file: one line, exit 1, no password shown. */
static void test_wrong_password_file_is_reported_without_the_password(void **state) {
  fx_case *t = *state;
  restricted_user u;
  make_user(t, "wrongpw", PERM_BRIDGE, &u);
  FILE *f = fopen(u.password_file, "w");
  assert_non_null(f);
  fputs(PASSWORD "-wrong\n", f);
  fclose(f);
  static const char *const args[] = {"declare", NULL};
  const char *env[] = {u.env_file, NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, u.url, env, CMD_TIMEOUT_MS, &r), 0);
  printf("wrong password: exit %d: %s", r.exit_code, r.err);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_count_lines(r.err), 1);
  assert_no_password("stderr", r.err);
  assert_no_password("stdout", r.out);
  drop_user(&u);
}

/* ---- the shipped users: looks answered from the catalog ------------------- */

/* A role's three patterns, as a file the project ships gives them. */
typedef struct {
  char configure[256], write[256], read[256];
} perms;

/* user's permissions in a definitions file (demo-users.json, compose.json). */
static void perms_from_definitions(const char *file, const char *user, perms *out) {
  json_object *doc = json_object_from_file(file), *list;
  assert_non_null(doc);
  assert_true(json_object_object_get_ex(doc, "permissions", &list));
  bool found = false;
  for (size_t i = 0; i < json_object_array_length(list) && !found; i++) {
    json_object *p = json_object_array_get_idx(list, i);
    if (strcmp(th_json_str(p, "user"), user) != 0) continue;
    fmt(out->configure, sizeof out->configure, "%s", th_json_str(p, "configure"));
    fmt(out->write, sizeof out->write, "%s", th_json_str(p, "write"));
    fmt(out->read, sizeof out->read, "%s", th_json_str(p, "read"));
    found = true;
  }
  json_object_put(doc);
  if (!found) fail_msg("%s gives no permissions to %s", file, user);
}

/* user's permissions in the rabbitmqctl lines of docs/least-privilege.md:
 * `rabbitmqctl set_permissions -p / USER 'c' 'w' \` and 'r' on the next
 * line, or all on one. */
static void perms_from_doc(const char *file, const char *user, perms *out) {
  FILE *f = fopen(file, "r");
  assert_non_null(f);
  char line[1024], cmd[2048] = "", head[160];
  fmt(head, sizeof head, "rabbitmqctl set_permissions -p / %s ", user);
  bool in = false;
  while (fgets(line, sizeof line, f) != NULL) {
    if (!in && strncmp(line, head, strlen(head)) != 0) continue;
    in = true;
    strncat(cmd, line, sizeof cmd - strlen(cmd) - 1);
    char *bs = strrchr(cmd, '\\');
    if (bs == NULL || bs[1] != '\n') break; /* no continuation: the command ends */
    *bs = ' ';
  }
  fclose(f);
  if (!in) fail_msg("%s has no rabbitmqctl set_permissions line for %s", file, user);
  char *fields[3] = {out->configure, out->write, out->read};
  const char *q = cmd + strlen(head);
  for (int k = 0; k < 3; k++) {
    q = strchr(q, '\'');
    assert_non_null(q);
    const char *end = strchr(q + 1, '\'');
    assert_non_null(end);
    fmt(fields[k], 256, "%.*s", (int)(end - q - 1), q + 1);
    q = end + 1;
  }
}

/* p as the management API's JSON body (backslashes escaped). */
static void perms_json(const perms *p, char *out, size_t cap) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "configure", json_object_new_string(p->configure));
  json_object_object_add(o, "write", json_object_new_string(p->write));
  json_object_object_add(o, "read", json_object_new_string(p->read));
  fmt(out, cap, "%s", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
  json_object_put(o);
}

/* The bridge and operator users as the project ships them, three ways
 * (definitions/demo-users.json, definitions/compose.json, the rabbitmqctl
 * lines of docs/least-privilege.md): a look as each (inspect) is answered
 * from the catalog, not by reading the queue. */
static void test_shipped_users_look_from_the_catalog(void **state) {
  fx_case *t = *state;
  const th_env *e = th_env_get();
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare, t->vhost.url, NULL, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "lp-look"), 0);
  assert_int_equal(th_msg_add_str(&m, "dlq_reason", "max_attempts"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
  assert_true(th_wait_depth(t->conn, "dsr.dlq.manual", 1, 5000));
  /* Put straight into the queue: the catalog learns of it from a verify,
   * as the daemon's check would run it. */
  static const char *const verify[] = {"catalog", "verify", NULL};
  assert_int_equal(th_run_bridge(verify, t->vhost.url, NULL, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);

  char demo[TH_PATH_MAX], compose[TH_PATH_MAX], doc[TH_PATH_MAX];
  fmt(demo, sizeof demo, "%s/definitions/demo-users.json", e->source_dir);
  fmt(compose, sizeof compose, "%s/definitions/compose.json", e->source_dir);
  fmt(doc, sizeof doc, "%s/docs/least-privilege.md", e->source_dir);
  static const char *const users[] = {"dlq-bridge", "dlq-operator"};
  static const char *const inspect[] = {"inspect", "--all", "--json", NULL};
  int looks = 0;
  for (int src = 0; src < 3; src++) {
    for (int u = 0; u < 2; u++) {
      perms p;
      if (src == 0) perms_from_definitions(demo, users[u], &p);
      else if (src == 1) perms_from_definitions(compose, users[u], &p);
      else perms_from_doc(doc, users[u], &p);
      char body[1024], role[48];
      perms_json(&p, body, sizeof body);
      fmt(role, sizeof role, "%s-%d", users[u] + 4, src);
      restricted_user ru;
      make_user(t, role, body, &ru);
      run_as(&ru, inspect, NULL, &r);
      assert_int_equal(r.exit_code, 0);
      json_object *j = json_tokener_parse(r.out), *cat;
      assert_non_null(j);
      assert_true(json_object_object_get_ex(j, "catalog", &cat));
      if (strcmp(th_json_str(cat, "source"), "catalog") != 0)
        fail_msg("%s as %s's %s permissions: a look read the queue (%s)",
                 src == 0   ? "demo-users.json"
                 : src == 1 ? "compose.json"
                            : "least-privilege.md",
                 users[u], "shipped", r.err);
      json_object_put(j);
      drop_user(&ru);
      looks++;
    }
  }
  assert_int_equal(looks, 6);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_definitions_load_then_declare_changes_nothing),
      FX_TEST(test_least_privilege_bridge_runs_the_flow),
      FX_TEST(test_bridge_without_dlq_read_is_unhealthy),
      FX_TEST(test_least_privilege_operator_runs_ops),
      FX_TEST(test_least_privilege_anchors),
      FX_TEST(test_shipped_users_look_from_the_catalog),
      FX_TEST(test_wrong_password_file_is_reported_without_the_password),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

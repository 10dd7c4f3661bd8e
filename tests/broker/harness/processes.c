/* The broker tests' harness (harness.h): dlq-bridge as a process (a bridge,
 * a command), their logs, output lines, restarting the node. */
#include "internal.h"

/* ---- processes -------------------------------------------------------- */

/* In a forked child: a clean DLQ_BRIDGE_* environment plus env, the URL,
 * stdout/stderr redirected, then exec. Never returns. */
static void th__exec_bridge(const char *const *argv, const char *url, const char *const *env,
                            const char *out_path, const char *err_path) {
  /* The parent dies -> the bridge gets SIGTERM, so no test leaves one behind. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  for (;;) {
    char **e = environ;
    while (*e != NULL && strncmp(*e, "DLQ_BRIDGE_", 11) != 0) e++;
    if (*e == NULL) break;
    char name[256];
    size_t len = strcspn(*e, "=");
    th__copy(name, sizeof name, *e, len);
    unsetenv(name);
  }
  if (url != NULL) setenv("DLQ_BRIDGE_URL", url, 1);
  /* No config file unless the test names one: a /etc/dlq-bridge/config.json
   * on the machine must not change what a test runs. */
  setenv("DLQ_BRIDGE_CONFIG", "", 1);
  /* Nor its /var/lib/dlq-bridge: a console keeps its actions in memory
   * only unless the test gives it a job file of its own. */
  setenv("DLQ_BRIDGE_CONSOLE_JOBS_FILE", "", 1);
  for (size_t i = 0; env != NULL && env[i] != NULL; i++) {
    char name[256];
    size_t len = strcspn(env[i], "=");
    th__copy(name, sizeof name, env[i], len);
    setenv(name, env[i][len] == '=' ? env[i] + len + 1 : "", 1);
  }
  int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  int err = strcmp(out_path, err_path) == 0
                ? out
                : open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  int devnull = open("/dev/null", O_RDONLY);
  if (out < 0 || err < 0 || devnull < 0) _exit(126);
  dup2(devnull, STDIN_FILENO);
  dup2(out, STDOUT_FILENO);
  dup2(err, STDERR_FILENO);
  execv(argv[0], (char *const *)argv);
  fprintf(stderr, "harness: cannot exec %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

/* Builds argv = { bridge_bin, args..., NULL } in out (cap entries). */
static int th__argv(const char **out, size_t cap, const char *const *args) {
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  size_t n = 0;
  out[n++] = e->bridge_bin;
  for (size_t i = 0; args != NULL && args[i] != NULL; i++) {
    if (n + 1 >= cap) return -1;
    out[n++] = args[i];
  }
  out[n] = NULL;
  return 0;
}

/* True when args (a command line without the program) is one of the ops
 * commands that move or remove items, which refuse without an audit trail. */
static bool th__moves_items(const char *const *args) {
  static const char *const movers[] = {"replay", "escalate", "resolve", NULL};
  static const char *const review[] = {"claim", "decide", NULL};
  if (args == NULL || args[0] == NULL) return false;
  for (size_t i = 0; movers[i] != NULL; i++)
    if (strcmp(args[0], movers[i]) == 0) return true;
  if (strcmp(args[0], "review") != 0 || args[1] == NULL) return false;
  for (size_t i = 0; review[i] != NULL; i++)
    if (strcmp(args[1], review[i]) == 0) return true;
  return false;
}

static bool th__has_prefix(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Whether the test chose where (or whether) the command finds an audit
 * trail: an audit_log or a config file in its env or args, or --no-audit. */
static bool th__audit_chosen(const char *const *args, const char *const *env) {
  for (size_t i = 0; env != NULL && env[i] != NULL; i++)
    if (th__has_prefix(env[i], "DLQ_BRIDGE_AUDIT_LOG=") ||
        th__has_prefix(env[i], "DLQ_BRIDGE_CONFIG="))
      return true;
  for (size_t i = 0; args != NULL && args[i] != NULL; i++)
    if (strcmp(args[i], "--no-audit") == 0 || th__has_prefix(args[i], "--audit-log") ||
        th__has_prefix(args[i], "--config"))
      return true;
  return false;
}

/* Adds --no-audit to argv (n entries, cap room) before any "--". */
static int th__add_no_audit(const char **argv, size_t n, size_t cap) {
  if (n + 2 > cap) return -1;
  size_t at = n;
  for (size_t i = 1; i < n; i++)
    if (strcmp(argv[i], "--") == 0) {
      at = i;
      break;
    }
  memmove(&argv[at + 1], &argv[at], (n + 1 - at) * sizeof argv[0]);
  argv[at] = "--no-audit";
  return 0;
}

/* Waits for pid up to timeout_ms; returns the exit status, -1 for a signal,
 * -2 when still running at the deadline. */
static int th__reap(pid_t pid, int timeout_ms) {
  int64_t deadline = th__mono_ms() + timeout_ms;
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) th__say("pid %ld died by signal %d", (long)pid, WTERMSIG(status));
      return -1;
    }
    if (r < 0) return -1;
    if (th__mono_ms() >= deadline) return -2;
    th__sleep_ms(10);
  }
}

int th_bridge_start(th_bridge *b, const th_vhost *v, const char *const *env, const char *tag) {
  static const char *const run_args[] = {"run", NULL};
  return th_command_start(b, v, run_args, env, tag);
}

int th_command_start(th_bridge *b, const th_vhost *v, const char *const *args,
                     const char *const *env, const char *tag) {
  const th_env *e = th_env_get();
  memset(b, 0, sizeof *b);
  if (e == NULL) return -1;
  if (th__fmt(b->log_path, sizeof b->log_path, "%s/%s-%s.log", e->log_dir, v->name, tag) != 0)
    return -1;
  const char *argv[16];
  if (th__argv(argv, 16, args) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    th__say("fork: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) th__exec_bridge(argv, v->url, env, b->log_path, b->log_path);
  b->pid = pid;
  return 0;
}

bool th_bridge_running(th_bridge *b) {
  if (b->pid <= 0) return false;
  int status;
  pid_t r = waitpid(b->pid, &status, WNOHANG);
  if (r == 0) return true;
  th__say("bridge pid %ld has exited (status 0x%x); log: %s", (long)b->pid, status, b->log_path);
  b->pid = 0;
  return false;
}

int th_bridge_stop(th_bridge *b, int timeout_ms) {
  if (b->pid <= 0) return -1;
  kill(b->pid, SIGTERM);
  int rc = th__reap(b->pid, timeout_ms);
  if (rc == -2) {
    th__say("bridge pid %ld ignored SIGTERM for %d ms; killing it", (long)b->pid, timeout_ms);
    th_bridge_kill(b);
    return -1;
  }
  if (rc != 0) th__say("bridge exited with %d; log: %s", rc, b->log_path);
  b->pid = 0;
  return rc;
}

void th_bridge_kill(th_bridge *b) {
  if (b == NULL || b->pid <= 0) return;
  kill(b->pid, SIGKILL);
  waitpid(b->pid, NULL, 0);
  b->pid = 0;
}

void th_bridge_dump_log(const th_bridge *b) {
  FILE *f = fopen(b->log_path, "r");
  if (f == NULL) return;
  char *text = th__slurp(f, NULL);
  fclose(f);
  if (text == NULL) return;
  size_t len = strlen(text);
  const char *start = len > 4000 ? text + len - 4000 : text;
  fprintf(stderr, "---- last lines of %s ----\n%s\n---- end of log ----\n", b->log_path, start);
  free(text);
}

/* Reads a small file into buf (NUL-terminated, truncated to cap). */
static void th__read_file(const char *path, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
}

int th_run_bridge(const char *const *args, const char *url, const char *const *env, int timeout_ms,
                  th_result *r) {
  const th_env *e = th_env_get();
  memset(r, 0, sizeof *r);
  r->exit_code = -1;
  if (e == NULL) return -1;
  const char *argv[32];
  if (th__argv(argv, 32, args) != 0) return -1;
  /* The many tests of what a command does, not of the audit trail, run it
   * with --no-audit rather than each passing it. */
  if (th__moves_items(args) && !th__audit_chosen(args, env)) {
    size_t n = 0;
    while (argv[n] != NULL) n++;
    if (th__add_no_audit(argv, n, 32) != 0) return -1;
  }
  char tag[64], out_path[TH_PATH_MAX], err_path[TH_PATH_MAX];
  th_unique(tag, sizeof tag, "cmd");
  if (th__fmt(out_path, sizeof out_path, "%s/%s.out", e->log_dir, tag) != 0 ||
      th__fmt(err_path, sizeof err_path, "%s/%s.err", e->log_dir, tag) != 0)
    return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) th__exec_bridge(argv, url, env, out_path, err_path);
  int rc = th__reap(pid, timeout_ms);
  if (rc == -2) {
    th__say("%s %s did not finish within %d ms", argv[0], argv[1] ? argv[1] : "", timeout_ms);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    rc = -1;
  }
  r->exit_code = rc;
  th__read_file(out_path, r->out, sizeof r->out);
  th__read_file(err_path, r->err, sizeof r->err);
  unlink(out_path);
  unlink(err_path);
  return 0;
}

bool th_fmt(char *buf, size_t len, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(buf, len, f, ap);
  va_end(ap);
  return n >= 0 && (size_t)n < len;
}

int th_count_lines(const char *s) {
  int n = 0;
  for (const char *p = s; *p != '\0'; p++) {
    if (*p == '\n' || p[1] == '\0') n++;
  }
  return n;
}

int th_error_lines(const char *s) {
  int n = 0;
  for (const char *p = s; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    n += strncmp(p, "dlq-bridge: ", 12) == 0;
  return n;
}

/* ---- the node --------------------------------------------------------- */

int th_node_restart(void) {
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  char cmd[3 * TH_PATH_MAX];
  if (th__fmt(cmd, sizeof cmd, "bash '%s/tests/broker/node-fixture.sh' restart '%s' %d",
              e->source_dir, e->node_dir, e->amqp_port))
    return -1;
  fflush(NULL);
  int rc = system(cmd);
  if (rc != 0) {
    th__say("restarting the node failed (status %d)", rc);
    return -1;
  }
  return 0;
}

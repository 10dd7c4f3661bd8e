/* The broker tests' harness (harness.h): the environment the fixture gives
 * (node ports, paths), clocks, unique names, waiting on a condition; and the
 * helpers every file of the harness shares. */
#include "internal.h"

/* Prints one line of diagnostics on stderr. */
void th__say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("harness: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* snprintf that reports truncation as failure. */
int th__fmt(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/* Copies len bytes (src may be NULL when len is 0) as a C string. */
void th__copy(char *dst, size_t cap, const char *src, size_t len) {
  if (len >= cap) len = cap - 1;
  if (len > 0) memcpy(dst, src, len);
  dst[len] = '\0';
}

void th__sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int64_t th__mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- environment ------------------------------------------------------ */

static int th__env_path(char *dst, const char *name) {
  const char *v = getenv(name);
  if (v == NULL || v[0] == '\0') {
    th__say("environment variable %s is not set (run the tests through ctest)", name);
    return -1;
  }
  if (th__fmt(dst, TH_PATH_MAX, "%s", v) != 0) {
    th__say("%s is too long", name);
    return -1;
  }
  return 0;
}

static int th__read_node_env(th_env *e) {
  char path[TH_PATH_MAX + 16];
  if (th__fmt(path, sizeof path, "%s/node.env", e->node_dir) != 0) return -1;
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    th__say("cannot read %s: %s (is the broker fixture running?)", path, strerror(errno));
    return -1;
  }
  char line[TH_PATH_MAX];
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "AMQP_PORT=", 10) == 0) e->amqp_port = atoi(line + 10);
    if (strncmp(line, "MGMT_PORT=", 10) == 0) e->mgmt_port = atoi(line + 10);
  }
  fclose(f);
  if (e->amqp_port <= 0 || e->mgmt_port <= 0) {
    th__say("%s lacks AMQP_PORT or MGMT_PORT", path);
    return -1;
  }
  return 0;
}

const th_env *th_env_get(void) {
  static th_env env;
  static bool loaded;
  if (loaded) return &env;
  if (th__env_path(env.node_dir, "DLQB_TEST_NODE_DIR") != 0 ||
      th__env_path(env.bridge_bin, "DLQB_BRIDGE_BIN") != 0 ||
      th__env_path(env.source_dir, "DLQB_SOURCE_DIR") != 0 ||
      th__env_path(env.log_dir, "DLQB_TEST_LOG_DIR") != 0 || th__read_node_env(&env) != 0)
    return NULL;
  mkdir(env.log_dir, 0755);
  /* Every dlq-bridge the tests start keeps its state (a look's checkpoint
   * of the catalog, catalog_checkpoint auto) under the run's log folder,
   * not in the user's home. */
  char state[TH_PATH_MAX];
  if (snprintf(state, sizeof state, "%s/state", env.log_dir) >= (int)sizeof state) return NULL;
  setenv("XDG_STATE_HOME", state, 1);
  unsetenv("STATE_DIRECTORY");
  loaded = true;
  return &env;
}

int64_t th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_iso_time(int64_t epoch_ms, char *buf, size_t len) {
  time_t secs = (time_t)(epoch_ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char base[32];
  strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%03dZ", base, (int)(epoch_ms % 1000));
}

bool th_is_iso_utc(const char *s) {
  static const char shape[] = "dddd-dd-ddTdd:dd:dd";
  if (s == NULL) return false;
  for (size_t i = 0; shape[i] != '\0'; i++) {
    if (shape[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != shape[i]) return false;
  }
  const char *p = s + strlen(shape);
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p)) return false;
    while (isdigit((unsigned char)*p)) p++;
  }
  return strcmp(p, "Z") == 0 || strcmp(p, "+00:00") == 0;
}

void th_unique(char *buf, size_t len, const char *prefix) {
  /* Atomic: tests run commands from several threads at once (broker.drain's
   * two concurrent drains; TSan saw the race). */
  static atomic_uint counter;
  snprintf(buf, len, "%s-%ld-%u", prefix, (long)getpid(), atomic_fetch_add(&counter, 1) + 1);
}

/* ---- waiting ---------------------------------------------------------- */

bool th_wait_until(th_cond cond, void *arg, int timeout_ms) {
  int64_t deadline = th__mono_ms() + timeout_ms;
  for (;;) {
    if (cond(arg)) return true;
    if (th__mono_ms() >= deadline) return cond(arg);
    th__sleep_ms(TH_POLL_MS);
  }
}

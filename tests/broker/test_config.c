/* Starting and stopping the bridge: bad settings, an unreachable broker,
 * SIGTERM. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include "flow.h"

#define CMD_TIMEOUT_MS 30000
#define SECRET         "s3cr3t-pw-do-not-print"

static void expect_config_error(const th_result *r, const char *names) {
  printf("stderr: %s", r->err);
  assert_int_equal(r->exit_code, 2);
  assert_int_equal(th_count_lines(r->err), 1);
  assert_non_null(strstr(r->err, names));
}

static void test_zero_max_attempts_exits_2(void **state) {
  fx_case *t = *state;
  static const char *const args[] = {"run", NULL};
  static const char *const env[] = {"DLQ_BRIDGE_MAX_ATTEMPTS=0", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, CMD_TIMEOUT_MS, &r), 0);
  expect_config_error(&r, "DLQ_BRIDGE_MAX_ATTEMPTS");
  /* It stopped before touching the broker. */
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), -1);
}

static void test_bad_retry_delays_flag_exits_2(void **state) {
  fx_case *t = *state;
  static const char *const args[] = {"run", "--retry-delays", "5x", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, t->vhost.url, NULL, CMD_TIMEOUT_MS, &r), 0);
  expect_config_error(&r, "retry-delays");
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), -1);
}

static void test_bad_setting_for_declare_exits_2(void **state) {
  fx_case *t = *state;
  static const char *const args[] = {"declare", NULL};
  static const char *const env[] = {"DLQ_BRIDGE_RETRY_DELAYS=1s,,5s", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, CMD_TIMEOUT_MS, &r), 0);
  expect_config_error(&r, "DLQ_BRIDGE_RETRY_DELAYS");
}

/* Nothing listens: one line, non-zero, and the password never shows. */
static void expect_unreachable(const char *command, const char *wait, th_result *r) {
  char url[TH_URL_MAX];
  snprintf(url, sizeof url, "amqp://guest:" SECRET "@127.0.0.1:%d/%%2f", th_free_port());
  const char *const args[] = {command, NULL};
  const char *const env[] = {"DLQ_BRIDGE_METRICS_ADDR=off", wait, NULL};
  assert_int_equal(th_run_bridge(args, url, env, CMD_TIMEOUT_MS, r), 0);
  printf("%s, unreachable: exit %d, stderr: %s", command, r->exit_code, r->err);
  assert_true(r->exit_code > 0);
  assert_null(strstr(r->err, SECRET));
  assert_null(strstr(r->out, SECRET));
  /* `run` may log its start first; the failure itself is one line. */
  if (strcmp(command, "declare") == 0) assert_int_equal(th_count_lines(r->err), 1);
  assert_int_equal(th_error_lines(r->err), 1);
  /* the reason an operator can act on, not rabbitmq-c's "a socket error" */
  assert_non_null(strstr(r->err, "connection refused"));
}

static void test_unreachable_broker_declare(void **state) {
  (void)state;
  th_result r;
  expect_unreachable("declare", NULL, &r);
}

/* Without startup_wait, `run` gives up at the first failed contact. */
static void test_unreachable_broker_run(void **state) {
  (void)state;
  th_result r;
  expect_unreachable("run", NULL, &r);
  assert_null(strstr(r.err, "broker_unreachable"));
  /* Only the router's error: no escalator warning before it (issue 19). */
  assert_null(strstr(r.err, "escalator"));
}

/* With it, `run` tries again (a warning a try) until the wait is over,
 * then fails with the last error and says how long it tried. */
static void test_unreachable_broker_run_after_startup_wait(void **state) {
  (void)state;
  th_result r;
  int64_t start = th_now_ms();
  expect_unreachable("run", "DLQ_BRIDGE_STARTUP_WAIT=1500ms", &r);
  int64_t took = th_now_ms() - start;
  printf("gave up after %lld ms\n", (long long)took);
  assert_true(took >= 1500);
  assert_true(strstr(r.err, "broker_unreachable") != NULL);
  assert_non_null(strstr(r.err, "still failing after startup_wait 1500ms"));
}

static bool log_has_two_retries(void *arg) {
  return fx_count_in_file(((th_bridge *)arg)->log_path, "broker_unreachable") >= 2;
}

/* A broker that answers only after the bridge started (a supervisor's
 * start order, a node still booting): with startup_wait the bridge keeps
 * trying and starts routing once it can. */
static void test_run_waits_for_a_late_broker(void **state) {
  fx_case *t = *state;
  th_proxy px = {0};
  assert_int_equal(th_proxy_start(&px), 0); /* takes a port for the URL... */
  th_proxy_cut(&px);                        /* ...where nothing answers yet */
  char url[TH_URL_MAX + 32];
  assert_true(th_proxy_url_env(&px, &t->vhost, url, sizeof url));
  const char *const env[] = {"DLQ_BRIDGE_METRICS_ADDR=off", "DLQ_BRIDGE_STARTUP_WAIT=2m", url,
                             NULL};
  th_bridge *b = &t->bridges[0];
  assert_int_equal(th_bridge_start(b, &t->vhost, env, "late"), 0);
  t->nbridges = 1;
  FX_CHECK(t, th_wait_until(log_has_two_retries, b, 20000));
  FX_CHECK(t, th_bridge_running(b));
  assert_int_equal(th_queue_depth(t->conn, "dsr.failed"), -1); /* nothing declared yet */

  assert_int_equal(th_proxy_start(&px), 0);
  bool routing = th_wait_consumers(t->conn, "dsr.failed", 1, 30000);
  int stopped = fx_stop_bridges(t);
  th_proxy_cut(&px);
  FX_CHECK(t, routing);
  assert_int_equal(stopped, 0);
}

static void test_run_declares_and_sigterm_exits_0(void **state) {
  fx_case *t = *state;
  assert_int_equal(fx_start_bridge(t, NULL), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.retry.1s"), 0);
  assert_int_equal(fx_stop_bridges(t), 0);
  assert_int_equal(th_queue_consumers(t->conn, "dsr.failed"), 0);
}

/* The one JSON document a --json run prints when it fails. */
static void expect_json_error(const th_result *r, int code, const char *names) {
  json_object *j = json_tokener_parse(r->out);
  assert_non_null(j);
  assert_int_equal(th_count_lines(r->out), 1);
  json_object *e = NULL, *v = NULL;
  assert_true(json_object_object_get_ex(j, "error", &e));
  assert_non_null(strstr(th_json_str(e, "message"), names));
  assert_true(json_object_object_get_ex(e, "exit_status", &v));
  assert_int_equal(json_object_get_int(v), code);
  json_object_put(j);
}

/* Configuration errors exit 2 naming what the operator typed, runtime
 * failures 1; with --json either prints one error document on stdout. */
static void test_ops_exit_codes_and_json_errors(void **state) {
  fx_case *t = *state;
  char unreachable[TH_URL_MAX];
  snprintf(unreachable, sizeof unreachable, "--url=amqp://guest:guest@127.0.0.1:%d/",
           th_free_port());
  char wrong_password[TH_URL_MAX];
  snprintf(wrong_password, sizeof wrong_password, "amqp://guest:not-the-password@127.0.0.1:%d/%s",
           th_env_get()->amqp_port, t->vhost.name);
  static const char *const nokey[] = {"DLQ_BRIDGE_AUDIT_LOG=/nonexistent/audit.log",
                                      "DLQ_BRIDGE_AUDIT_KEY_FILE=", NULL};
  static const char *const nofile[] = {"DLQ_BRIDGE_AUDIT_LOG=/nonexistent/audit.log",
                                       "DLQ_BRIDGE_AUDIT_KEY_FILE=/nonexistent/audit.key", NULL};
  const struct {
    const char *args[8];
    const char *const *env;
    int code;
    const char *names;
  } cases[] = {
      {{"inspect", "--url", "amqp://guest:guest@localhost:abc/", "--json"}, NULL, 2, "the port"},
      {{"stats", "--password-file", "/nonexistent", "--json"}, NULL, 2, "--password-file"},
      {{"inspect", "--url", "amqps://localhost/", "--tls-ca-file", "/nonexistent/ca.pem", "--json"},
       NULL,
       2,
       "--tls-ca-file: cannot read tls ca file '/nonexistent/ca.pem'"},
      {{"replay", "--all", "--json"}, nokey, 2, "DLQ_BRIDGE_AUDIT_KEY_FILE is empty"},
      {{"resolve", "--message-id", "m", "--note", "n", "--json"},
       nofile,
       2,
       "DLQ_BRIDGE_AUDIT_KEY_FILE: cannot read audit key file '/nonexistent/audit.key'"},
      {{"insepct", "--json"}, NULL, 2, "did you mean 'inspect'?"},
      {{"inspect", "--prefetch", "5", "--json"}, NULL, 2, "unknown option '--prefetch'"},
      {{"inspect", "--actor", "bob", "--json"}, NULL, 2, "unknown option '--actor'"},
      {{"inspect", "--limt", "5", "--json"},
       NULL,
       2,
       "unknown option '--limt'; did you mean '--limit'?"},
      {{"replay", "--all", "--nte", "x", "--json"}, NULL, 2, "did you mean '--note'?"},
      {{"inspect", unreachable, "--json"}, NULL, 1, "connection refused"},
      /* A wrong password: the login error once (it was a warning that the
       * catalog could not be read and the queue would be, then the same
       * login error again). */
      {{"inspect", "--url", wrong_password, "--json"}, NULL, 1, "cannot log in"},
      {{"stats", unreachable, "--json"}, NULL, 1, "connection refused"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    th_result r;
    assert_int_equal(th_run_bridge(cases[i].args, t->vhost.url, cases[i].env, CMD_TIMEOUT_MS, &r),
                     0);
    printf("%s: exit %d, stderr: %s", cases[i].args[0], r.exit_code, r.err);
    assert_int_equal(r.exit_code, cases[i].code);
    assert_int_equal(th_error_lines(r.err), 1);
    assert_non_null(strstr(r.err, cases[i].names));
    expect_json_error(&r, cases[i].code, cases[i].names);
  }
  /* A key others may read is a configuration error too (exit 2, as a
   * missing one), not a runtime failure (it was exit 1). */
  const th_env *e = th_env_get();
  char key[TH_PATH_MAX], log[TH_PATH_MAX + 32], env_key[TH_PATH_MAX + 32], cmd[3 * TH_PATH_MAX];
  assert_true(th_fmt(key, sizeof key, "%s/%s-open.key", e->log_dir, t->vhost.name));
  assert_true(
      th_fmt(log, sizeof log, "DLQ_BRIDGE_AUDIT_LOG=%s/%s-audit.log", e->log_dir, t->vhost.name));
  assert_true(th_fmt(env_key, sizeof env_key, "DLQ_BRIDGE_AUDIT_KEY_FILE=%s", key));
  assert_true(th_fmt(cmd, sizeof cmd,
                     "openssl genpkey -algorithm ed25519 -out '%s' 2>/dev/null && chmod 644 '%s'",
                     key, key));
  assert_int_equal(system(cmd), 0);
  const char *const open_key[] = {log, env_key, NULL};
  static const char *const replay_all[] = {"replay", "--all", "--json", NULL};
  {
    th_result r;
    assert_int_equal(th_run_bridge(replay_all, t->vhost.url, open_key, CMD_TIMEOUT_MS, &r), 0);
    printf("replay with a key others may read: exit %d, stderr: %s", r.exit_code, r.err);
    assert_int_equal(r.exit_code, 2);
    assert_int_equal(th_error_lines(r.err), 1);
    assert_non_null(strstr(r.err, "is accessible by group or others"));
    expect_json_error(&r, 2, "is accessible by group or others");
  }
  unlink(key);
  /* A read-only command needs no audit key, whatever the environment. */
  static const char *const declare[] = {"declare", NULL};
  static const char *const inspect[] = {"inspect", "--json", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare, t->vhost.url, NULL, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(th_run_bridge(inspect, t->vhost.url, nokey, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  /* A command naming one item that is not there fails (exit 1) with the
   * error document alone; before, resolve --json printed
   * {"resolved":false,...} and the error beside it. A selection that
   * matches nothing (replay --all of an empty DLQ) is no error. */
  static const char *const resolve_none[] = {"resolve", "--message-id", "nope",   "--note",
                                             "n",       "--no-audit",   "--json", NULL};
  assert_int_equal(th_run_bridge(resolve_none, t->vhost.url, NULL, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 1);
  assert_null(strstr(r.out, "\"resolved\""));
  expect_json_error(&r, 1, "no item with message_id 'nope'");
  static const char *const replay_none[] = {"replay", "--all", "--no-audit", "--json", NULL};
  assert_int_equal(th_run_bridge(replay_none, t->vhost.url, NULL, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  /* Without --json a failure prints nothing on stdout. */
  static const char *const bad[] = {"inspect", "--url", "amqp://localhost:abc/", NULL};
  assert_int_equal(th_run_bridge(bad, t->vhost.url, NULL, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 2);
  assert_string_equal(r.out, "");
}

/* The shared config file through the binary: a named file that is missing
 * or wrong is exit 2 with one line naming file, key and what was expected;
 * --config beats DLQ_BRIDGE_CONFIG; the environment beats the file. */
static void test_config_file_errors_exit_2(void **state) {
  fx_case *t = *state;
  char dir[64] = "/tmp/dlqb-broker-config-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char bad_json[128], typo[128], wrong[128], good[128], secret[128], seven[128];
  const struct {
    char *path;
    const char *text;
    unsigned mode;
  } files[] = {
      {bad_json, "{\"max_attempts\": 3,}", 0644},
      {typo, "{\"audit_logs\": \"/var/lib/dlq-bridge/audit.log\"}", 0644},
      {wrong, "{\"retry_delays\": 10}", 0644},
      {good, "{\"retry_delays\": \"1s,,5s\"}", 0644}, /* bad value, to see which file is read */
      {seven, "{\"retry_delays\": \"7s\"}", 0644},
      {secret, "{\"url\": \"amqp://guest:guest@127.0.0.1:1/%2f\"}", 0640},
  };
  const char *names[] = {"bad.json",  "typo.json",  "wrong.json",
                         "good.json", "seven.json", "secret.json"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    assert_true(th_fmt(files[i].path, 128, "%s/%s", dir, names[i]));
    FILE *f = fopen(files[i].path, "w");
    assert_non_null(f);
    assert_true(fputs(files[i].text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(files[i].path, files[i].mode), 0);
  }
  char e_missing[160], e_bad[160], e_typo[160], e_wrong[160], e_good[160], e_secret[160],
      f_typo[160];
  assert_true(th_fmt(e_missing, sizeof e_missing, "DLQ_BRIDGE_CONFIG=%s/none.json", dir));
  assert_true(th_fmt(e_bad, sizeof e_bad, "DLQ_BRIDGE_CONFIG=%s", bad_json));
  assert_true(th_fmt(e_typo, sizeof e_typo, "DLQ_BRIDGE_CONFIG=%s", typo));
  assert_true(th_fmt(e_wrong, sizeof e_wrong, "DLQ_BRIDGE_CONFIG=%s", wrong));
  assert_true(th_fmt(e_good, sizeof e_good, "DLQ_BRIDGE_CONFIG=%s", good));
  assert_true(th_fmt(e_secret, sizeof e_secret, "DLQ_BRIDGE_CONFIG=%s", secret));
  assert_true(th_fmt(f_typo, sizeof f_typo, "--config=%s", typo));
  const struct {
    const char *env;
    const char *flag;
    const char *names;
  } cases[] = {
      {e_missing, NULL, "none.json': cannot open: no such file or directory"},
      {e_bad, NULL, "bad.json': not valid json at line 1"},
      {e_typo, NULL, "typo.json': unknown key 'audit_logs' (did you mean 'audit_log'?)"},
      {e_wrong, NULL,
       "wrong.json': key 'retry_delays': expected a string or an array of strings, got an "
       "integer"},
      {e_secret, NULL,
       "secret.json': key 'url' holds a password, and the file is readable by "
       "group or others (mode 0640)"},
      /* The flag names the file, not the variable. */
      {e_good, f_typo, "typo.json': unknown key 'audit_logs'"},
      {e_good, NULL, "good.json': key 'retry_delays'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *args[] = {"inspect", cases[i].flag, NULL};
    const char *env[] = {cases[i].env, NULL};
    th_result r;
    assert_int_equal(th_run_bridge(args, t->vhost.url, env, CMD_TIMEOUT_MS, &r), 0);
    printf("config case %zu: exit %d, %s", i, r.exit_code, r.err);
    assert_int_equal(r.exit_code, 2);
    assert_int_equal(th_count_lines(r.err), 1);
    assert_non_null(strstr(r.err, cases[i].names));
    assert_null(strstr(r.err, "guest:guest"));
  }
  /* The environment beats the file (a bad value in the file is refused
   * even so: above). */
  char e_seven[160];
  assert_true(th_fmt(e_seven, sizeof e_seven, "DLQ_BRIDGE_CONFIG=%s", seven));
  const char *const args[] = {"declare", NULL};
  const char *const env[] = {e_seven, "DLQ_BRIDGE_RETRY_DELAYS=1s", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(args, t->vhost.url, env, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.retry.1s"), 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.retry.7s"), -1);
  /* And the file beats the default. */
  const char *const file_only[] = {e_seven, NULL};
  assert_int_equal(th_run_bridge(args, t->vhost.url, file_only, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(th_queue_depth(t->conn, "dsr.retry.7s"), 0);
  /* --print-config names where each value came from, and touches nothing. */
  const char *const print[] = {"declare", "--print-config", "--poison-threshold", "3", NULL};
  assert_int_equal(th_run_bridge(print, t->vhost.url, file_only, CMD_TIMEOUT_MS, &r), 0);
  printf("%s", r.out);
  assert_int_equal(r.exit_code, 0);
  char want[256];
  assert_true(
      th_fmt(want, sizeof want, "7s%*skey 'retry_delays' in config file '%s'\n", 39, "", seven));
  assert_non_null(strstr(r.out, want));
  assert_non_null(strstr(r.out, "\npoison_threshold     3 "));
  assert_non_null(strstr(r.out, " --poison-threshold\n"));
  assert_non_null(strstr(r.out, "amqp://guest:***@"));
  assert_null(strstr(r.out, "guest:guest"));
  assert_int_equal(th_queue_depth(t->conn, "dsr.retry.7s"), 0);
  /* An empty DLQ_BRIDGE_CONFIG is no file at all. */
  const char *const none[] = {"DLQ_BRIDGE_CONFIG=", NULL};
  assert_int_equal(th_run_bridge(args, t->vhost.url, none, CMD_TIMEOUT_MS, &r), 0);
  assert_int_equal(r.exit_code, 0);
  char cmd[128];
  assert_true(th_fmt(cmd, sizeof cmd, "rm -rf '%s'", dir));
  assert_int_equal(system(cmd), 0);
}

/* Issue 42: `help settings` at a terminal is a list in its width (it was a
 * markdown table 210 columns wide); piped (scripts/gen-docs.sh) it is the
 * table. */
static void test_help_settings_fits_the_terminal(void **state) {
  (void)state;
  char cmd[TH_PATH_MAX + 128];
  assert_true(th_fmt(cmd, sizeof cmd, "script -qec \"env COLUMNS=80 '%s' help settings\" /dev/null",
                     th_env_get()->bridge_bin));
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[1024];
  size_t widest = 0, lines = 0;
  bool writers = false;
  while (fgets(line, sizeof line, p) != NULL) {
    line[strcspn(line, "\r\n")] = '\0';
    size_t chars = 0;
    for (const char *c = line; *c != '\0'; c++) chars += ((unsigned char)*c & 0xC0u) != 0x80u;
    if (chars > widest) widest = chars;
    writers = writers || strncmp(line, "catalog_writers  (DLQ_BRIDGE_CATALOG_WRITERS", 44) == 0;
    lines++;
  }
  assert_int_equal(pclose(p), 0);
  printf("help settings at 80 columns: %zu lines, the widest %zu\n", lines, widest);
  assert_true(widest <= 80);
  assert_true(writers);
  assert_true(th_fmt(cmd, sizeof cmd, "'%s' help settings | head -1", th_env_get()->bridge_bin));
  p = popen(cmd, "r");
  assert_non_null(p);
  assert_non_null(fgets(line, sizeof line, p));
  pclose(p);
  assert_int_equal(strncmp(line, "| config key |", 14), 0);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_zero_max_attempts_exits_2),
      FX_TEST(test_help_settings_fits_the_terminal),
      FX_TEST(test_bad_retry_delays_flag_exits_2),
      FX_TEST(test_bad_setting_for_declare_exits_2),
      FX_TEST(test_unreachable_broker_declare),
      FX_TEST(test_unreachable_broker_run),
      FX_TEST(test_unreachable_broker_run_after_startup_wait),
      FX_TEST(test_run_waits_for_a_late_broker),
      FX_TEST(test_run_declares_and_sigterm_exits_0),
      FX_TEST(test_ops_exit_codes_and_json_errors),
      FX_TEST(test_config_file_errors_exit_2),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the settings table: defaults, every rule, the JSON file,
 * the environment, precedence, validation and URL redaction. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json_c_version.h>

#include "dlqb/config.h"
#include "dlqb/config_file.h"
#include "dlqb/topology.h"

/* ---- helpers ---- */

static void set_ok(dlqb_config *c, const char *key, const char *value) {
  dlqb_error err = {{0}};
  dlqb_status st = dlqb_config_set(c, key, value, "--test", &err);
  if (st != DLQB_OK) {
    fail_msg("setting %s to '%s' failed: %s", key, value, err.msg);
  }
}

/* Asserts that the value is rejected, that the error names the source and
 * contains `want`, is one line, and that the config did not change. */
static void set_bad(const char *key, const char *value, const char *want) {
  dlqb_config c;
  dlqb_config before;
  dlqb_error err = {{0}};
  dlqb_config_defaults(&c);
  before = c;
  assert_int_equal(dlqb_config_set(&c, key, value, "--some-flag", &err), DLQB_EINVAL);
  if (strstr(err.msg, want) == NULL || strncmp(err.msg, "--some-flag: ", 13) != 0) {
    fail_msg("error for %s='%s' is \"%s\", wanted \"%s\"", key, value, err.msg, want);
  }
  assert_null(strchr(err.msg, '\n'));
  assert_memory_equal(&c, &before, sizeof c);
}

static void json_ok(dlqb_config *c, const char *text) {
  dlqb_error err = {{0}};
  dlqb_status st = dlqb_config_apply_json(c, text, strlen(text), &err);
  if (st != DLQB_OK) {
    fail_msg("json %s failed: %s", text, err.msg);
  }
}

static void json_bad(const char *text, const char *want) {
  dlqb_config c;
  dlqb_config before;
  dlqb_error err = {{0}};
  dlqb_config_defaults(&c);
  before = c;
  assert_int_equal(dlqb_config_apply_json(&c, text, strlen(text), &err), DLQB_EINVAL);
  if (strstr(err.msg, want) == NULL) {
    fail_msg("error for json %s is \"%s\", wanted \"%s\"", text, err.msg, want);
  }
  assert_null(strchr(err.msg, '\n'));
  assert_memory_equal(&c, &before, sizeof c);
}

/* A string of n copies of ch after prefix, in a malloc'd buffer. */
static char *repeat(const char *prefix, char ch, size_t n) {
  size_t p = strlen(prefix);
  char *s = malloc(p + n + 1);
  assert_non_null(s);
  memcpy(s, prefix, p);
  memset(s + p, ch, n);
  s[p + n] = '\0';
  return s;
}

/* Writes text to a new temporary file; the caller unlinks the path. */
static void write_temp(char *path, size_t len, const char *text) {
  snprintf(path, len, "/tmp/dlqb_test_config_XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
  assert_int_equal(fclose(f), 0);
}

/* ---- the table and the defaults ---- */

static size_t setting_count(void) {
  size_t n = 0;
  while (dlqb_config_settings()[n].key != NULL) {
    n++;
  }
  return n;
}

static void test_table_rows_are_consistent(void **state) {
  (void)state;
  const dlqb_config_setting *s = dlqb_config_settings();
  assert_int_equal(setting_count(), 52);
  for (size_t i = 0; s[i].key != NULL; i++) {
    char env[64] = "DLQ_BRIDGE_";
    char flag[64];
    size_t k = strlen(s[i].key);
    assert_true(k < sizeof flag);
    for (size_t j = 0; j <= k; j++) {
      env[11 + j] = (char)toupper((unsigned char)s[i].key[j]);
      flag[j] = s[i].key[j] == '_' ? '-' : s[i].key[j];
    }
    assert_string_equal(s[i].env, env);
    assert_string_equal(s[i].flag, flag);
    assert_non_null(s[i].dflt);
    assert_true(strlen(s[i].help) > 5);
    assert_null(strchr(s[i].help, '\n'));
    assert_ptr_equal(dlqb_config_find_flag(s[i].flag), &s[i]);
    for (size_t j = 0; j < i; j++) {
      assert_string_not_equal(s[i].key, s[j].key);
    }
  }
}

static void test_documented_defaults_parse(void **state) {
  (void)state;
  const dlqb_config_setting *s = dlqb_config_settings();
  dlqb_config c;
  dlqb_config d;
  dlqb_config_defaults(&c);
  d = c;
  for (size_t i = 0; s[i].key != NULL; i++) {
    set_ok(&c, s[i].key, s[i].dflt);
  }
  assert_memory_equal(&c, &d, sizeof c);
}

static void test_default_values(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_error err;
  memset(&c, 0x5a, sizeof c);
  dlqb_config_defaults(&c);
  assert_string_equal(c.broker.url, "amqp://guest:guest@localhost:5672/%2f");
  assert_string_equal(c.broker.password_file, "");
  assert_string_equal(c.broker.tls_ca_file, "");
  assert_string_equal(c.broker.tls_cert_file, "");
  assert_string_equal(c.broker.tls_key_file, "");
  assert_int_equal(c.policy.max_attempts, 5);
  assert_int_equal(c.policy.poison_threshold, 2);
  assert_int_equal(c.policy.retry_delay_count, 4);
  assert_int_equal(c.policy.retry_delays_ms[0], 1000);
  assert_int_equal(c.policy.retry_delays_ms[1], 5000);
  assert_int_equal(c.policy.retry_delays_ms[2], 30000);
  assert_int_equal(c.policy.retry_delays_ms[3], 120000);
  assert_int_equal(c.policy.retry_delays_ms[4], 0);
  assert_int_equal(c.policy.retry_jitter_percent, 20);
  assert_int_equal(c.policy.sla_budget_ms, 30ULL * 86400000);
  assert_int_equal(c.policy.prefetch, 500);
  assert_int_equal(c.policy.dlq_sla_ms, 24ULL * 3600000);
  assert_int_equal(c.policy.max_replays, 3);
  assert_string_equal(c.audit.log, "");
  assert_string_equal(c.audit.key_file, "");
  assert_string_equal(c.metrics_addr, "127.0.0.1:9464");
  assert_int_equal(c.log.format, DLQB_LOG_TEXT);
  assert_int_equal(c.log.level, 2);
  assert_string_equal(c.instance, "");
  assert_string_equal(c.ledger.completion_writers, ""); /* no ledger entry counts */
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_OK);
}

static void test_find_flag(void **state) {
  (void)state;
  const dlqb_config_setting *s = dlqb_config_find_flag("max-attempts");
  assert_non_null(s);
  assert_string_equal(s->key, "max_attempts");
  assert_string_equal(s->env, "DLQ_BRIDGE_MAX_ATTEMPTS");
  assert_string_equal(s->dflt, "5");
  assert_null(dlqb_config_find_flag("max_attempts"));
  assert_null(dlqb_config_find_flag("--max-attempts"));
  assert_null(dlqb_config_find_flag(""));
  assert_null(dlqb_config_find_flag("nope"));
  assert_null(dlqb_config_find_flag(NULL));
}

/* ---- integers ---- */

typedef struct {
  const char *key;
  int min;
  int max;
} int_bounds;

static const int_bounds int_settings[] = {
    {"max_attempts", 1, 1000}, {"poison_threshold", 1, 100}, {"retry_jitter", 0, 90},
    {"prefetch", 1, 10000},    {"max_replays", 1, 1000},
};

static int int_field(const dlqb_config *c, const char *key) {
  if (strcmp(key, "max_attempts") == 0) {
    return c->policy.max_attempts;
  }
  if (strcmp(key, "poison_threshold") == 0) {
    return c->policy.poison_threshold;
  }
  if (strcmp(key, "retry_jitter") == 0) {
    return c->policy.retry_jitter_percent;
  }
  if (strcmp(key, "prefetch") == 0) {
    return c->policy.prefetch;
  }
  assert_string_equal(key, "max_replays");
  return c->policy.max_replays;
}

static void test_int_bounds(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof int_settings / sizeof int_settings[0]; i++) {
    const int_bounds *b = &int_settings[i];
    dlqb_config c;
    char text[32];
    char want[96];
    dlqb_config_defaults(&c);
    snprintf(text, sizeof text, "%d", b->min);
    set_ok(&c, b->key, text);
    assert_int_equal(int_field(&c, b->key), b->min);
    snprintf(text, sizeof text, "%d", b->max);
    set_ok(&c, b->key, text);
    assert_int_equal(int_field(&c, b->key), b->max);

    snprintf(text, sizeof text, "%d", b->min - 1);
    snprintf(want, sizeof want, "'%d' is not an integer from %d to %d", b->min - 1, b->min, b->max);
    set_bad(b->key, text, want);
    snprintf(text, sizeof text, "%d", b->max + 1);
    snprintf(want, sizeof want, "'%d' is not an integer from %d to %d", b->max + 1, b->min, b->max);
    set_bad(b->key, text, want);
  }
}

static void test_int_syntax(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  set_ok(&c, "prefetch", " 42 ");
  assert_int_equal(c.policy.prefetch, 42);
  set_ok(&c, "prefetch", "\t0007\n");
  assert_int_equal(c.policy.prefetch, 7);
  static const char *const bad[] = {
      "",
      " ",
      "5x",
      "x5",
      "5 5",
      "0x10",
      "1e3",
      "5.0",
      "+5",
      "- 5",
      "--5",
      "five",
      "-",
      "10,000",
      "18446744073709551616",
      "9223372036854775807",
      "9223372036854775808",
      "-9223372036854775808",
      "-9223372036854775809",
      "99999999999999999999999999999999",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    set_bad("prefetch", bad[i], "is not an integer from 1 to 10000");
  }
}

static void test_int_error_message_exact(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_error err;
  dlqb_config_defaults(&c);
  assert_int_equal(dlqb_config_set(&c, "max_attempts", "0", "DLQ_BRIDGE_MAX_ATTEMPTS", &err),
                   DLQB_EINVAL);
  assert_string_equal(err.msg, "DLQ_BRIDGE_MAX_ATTEMPTS: '0' is not an integer from 1 to 1000");
}

/* ---- durations ---- */

static void test_single_durations(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  set_ok(&c, "sla_budget", "1ms");
  assert_int_equal(c.policy.sla_budget_ms, 1);
  set_ok(&c, "sla_budget", " 36500d ");
  assert_int_equal(c.policy.sla_budget_ms, 36500ULL * 86400000);
  set_ok(&c, "dlq_sla", "90m");
  assert_int_equal(c.policy.dlq_sla_ms, 90ULL * 60000);
  set_bad("sla_budget", "0s", "'0s' must be greater than zero");
  /* startup_wait may be zero (the default: give up at once), not negative */
  assert_int_equal(c.startup_wait_ms, 0);
  set_ok(&c, "startup_wait", "2m");
  assert_int_equal(c.startup_wait_ms, 120000);
  set_ok(&c, "startup_wait", "0s");
  assert_int_equal(c.startup_wait_ms, 0);
  set_bad("startup_wait", "-5s", "has a sign");
  set_bad("startup_wait", "5", "has no unit");
  set_bad("dlq_sla", "0ms", "must be greater than zero");
  set_bad("dlq_sla", "5", "'5' has no unit (use ms, s, m, h or d)");
  set_bad("sla_budget", "1.5h", "has a fraction");
  set_bad("sla_budget", "-1d", "has a sign");
  set_bad("sla_budget", "36501d", "longer than 100 years");
  set_bad("sla_budget", "", "is empty");
  set_bad("sla_budget", "30", "has no unit");
}

static void test_retry_delays(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_error err;
  dlqb_config_defaults(&c);
  set_ok(&c, "retry_delays", "24h");
  assert_int_equal(c.policy.retry_delay_count, 1);
  assert_int_equal(c.policy.retry_delays_ms[0], 86400000);
  set_ok(&c, "retry_delays", "1ms, 2s ,3m,1d");
  assert_int_equal(c.policy.retry_delay_count, 4);
  assert_int_equal(c.policy.retry_delays_ms[3], 86400000);
  set_ok(&c, "retry_delays", "1s,2s,3s,4s,5s,6s,7s,8s,9s,10s,11s,12s,13s,14s,15s,16s");
  assert_int_equal(c.policy.retry_delay_count, 16);
  assert_int_equal(c.policy.retry_delays_ms[15], 16000);

  set_bad("retry_delays", "1s,2s,3s,4s,5s,6s,7s,8s,9s,10s,11s,12s,13s,14s,15s,16s,17s",
          "has more than 16 durations");
  set_bad("retry_delays", "1s,25h", "delay 2 (25h) is longer than 24h");
  set_bad("retry_delays", "86400001ms", "is longer than 24h");
  set_bad("retry_delays", "1s,,5s", "has an empty item");
  set_bad("retry_delays", "1s,", "has an empty item");
  set_bad("retry_delays", "", "is empty");
  set_bad("retry_delays", "1s,0s", "'0s' must be greater than zero");
  set_bad("retry_delays", "1s,1.5s", "has a fraction");

  dlqb_config_defaults(&c);
  assert_int_equal(dlqb_config_set(&c, "retry_delays", "5x", "--retry-delays", &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "--retry-delays: '5x' has an unknown unit (use ms, s, m, h or d)");
  assert_int_equal(c.policy.retry_delay_count, 4);
}

/* ---- text settings ---- */

static void test_url(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  set_ok(&c, "url", "amqps://u:p@broker.example:5671/prod");
  assert_string_equal(c.broker.url, "amqps://u:p@broker.example:5671/prod");
  set_ok(&c, "url", "amqp://localhost");
  set_bad("url", "http://localhost", "'http://localhost' does not start with amqp:// or amqps://");
  set_bad("url", "", "does not start with amqp://");
  set_bad("url", "AMQP://localhost", "does not start with amqp://");
  set_bad("url", " amqp://localhost", "does not start with amqp://");
  set_bad("url", "amqp://local host", "contains a space or control character");
  /* The port is checked where the setting can be named (exit 2), not at
   * connect time as an "invalid broker url". */
  set_bad("url", "amqp://guest:guest@localhost:abc/",
          "'amqp://guest:***@localhost:abc/': the port is not a number from 1 to 65535");
  set_bad("url", "amqp://localhost:0/", "the port is not a number");
  set_bad("url", "amqp://localhost:65536", "the port is not a number");
  set_bad("url", "amqp://localhost:/", "the port is not a number");
  set_bad("url", "amqp://[::1:5672/", "the port is not a number");
  set_ok(&c, "url", "amqp://u:p@[::1]:5672/vh");
  set_ok(&c, "url", "amqp://u:p@h:65535");
  set_bad("url", "amqp://localhost\r", "'amqp://localhost?' contains a space or control");

  char *edge = repeat("amqp://", 'h', 1023 - 7);
  set_ok(&c, "url", edge);
  assert_string_equal(c.broker.url, edge);
  free(edge);
  char *over = repeat("amqp://", 'h', 1024 - 7);
  set_bad("url", over, "is longer than 1023 bytes");
  free(over);
}

/* The password must never reach an error, whichever rule rejected the URL
 * and whichever source it came from. */
static void test_url_errors_hide_the_password(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_error err;
  dlqb_config_defaults(&c);

  assert_int_equal(dlqb_config_set(&c, "url", "http://bob:hunter2@host/vh", "--url", &err),
                   DLQB_EINVAL);
  assert_null(strstr(err.msg, "hunter2"));
  assert_non_null(strstr(err.msg, "--url: 'http://bob:***@host/vh'"));

  assert_int_equal(dlqb_config_set(&c, "url", "amqp://bob:hunter2@ho st/", "--url", &err),
                   DLQB_EINVAL);
  assert_null(strstr(err.msg, "hunter2"));

  char *longer = repeat("amqp://bob:hunter2@", 'h', 1100);
  assert_int_equal(dlqb_config_set(&c, "url", longer, "--url", &err), DLQB_EINVAL);
  assert_null(strstr(err.msg, "hunter2"));
  assert_non_null(strstr(err.msg, "longer than 1023 bytes"));
  free(longer);

  const char *json = "{\"url\": \"amqps:/bob:hunter2@host\"}";
  assert_int_equal(dlqb_config_apply_json(&c, json, strlen(json), &err), DLQB_EINVAL);
  assert_null(strstr(err.msg, "hunter2"));
  assert_non_null(strstr(err.msg, "key 'url': "));
}

static void test_paths(void **state) {
  (void)state;
  static const char *const keys[] = {"password_file", "tls_ca_file", "tls_cert_file",
                                     "tls_key_file",  "audit_log",   "audit_key_file"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    dlqb_config c;
    dlqb_config_defaults(&c);
    set_ok(&c, keys[i], "/etc/dlq-bridge/some file with spaces.pem");
    set_ok(&c, keys[i], "");
    char *edge = repeat("/", 'p', 1022);
    set_ok(&c, keys[i], edge);
    free(edge);
    char *over = repeat("/", 'p', 1023);
    set_bad(keys[i], over, "is longer than 1023 bytes");
    free(over);
    set_bad(keys[i], "/etc/key\r", "'/etc/key?' contains a control character");
  }
  dlqb_config c;
  dlqb_config_defaults(&c);
  set_ok(&c, "password_file", "/run/secrets/amqp");
  assert_string_equal(c.broker.password_file, "/run/secrets/amqp");
}

static void test_metrics_addr(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  set_ok(&c, "metrics_addr", "off");
  assert_string_equal(c.metrics_addr, "");
  set_ok(&c, "metrics_addr", "0.0.0.0:1");
  assert_string_equal(c.metrics_addr, "0.0.0.0:1");
  set_ok(&c, "metrics_addr", "");
  assert_string_equal(c.metrics_addr, "");
  set_ok(&c, "metrics_addr", "metrics.internal:65535");
  set_ok(&c, "metrics_addr", "[::1]:9464");
  assert_string_equal(c.metrics_addr, "[::1]:9464");
  static const char *const bad[] = {
      "localhost", "localhost:", ":9464",    "host:0",   "host:65536", "host:99999999999999999999",
      "host:-1",   "host: 80",   "host:80x", "::1:9464", "[::1:9464",  "[]:80",
      "ho st:80",  "OFF",        " off",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    set_bad("metrics_addr", bad[i], "is not host:port with a port from 1 to 65535, or off");
  }
}

/* The DLQ's and review queue's type: classic by default this release (see
 * docs/architecture.md), quorum when set, and it reaches every pipeline's
 * topology. */
static void test_dlq_queue_type(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  assert_true(c.policy.dlq_classic);
  set_ok(&c, "dlq_queue_type", "quorum");
  assert_false(c.policy.dlq_classic);
  dlqb_topology *t = dlqb_topology_new(&c);
  assert_non_null(t);
  int held = 0;
  for (size_t i = 0; i < t->nqueues; i++) {
    if (!t->queues[i].holds_items) continue;
    held++;
    assert_int_equal(t->queues[i].type, DLQB_QTYPE_QUORUM);
  }
  assert_int_equal(held, 2);
  /* and their safety queue, which the review queue dead-letters into too */
  bool safety = false;
  for (size_t i = 0; i < t->nqueues; i++)
    if (strcmp(t->queues[i].name, "dsr.dlq.manual.dropped") == 0) safety = true;
  assert_true(safety);
  free(t);
  set_ok(&c, "dlq_queue_type", " classic ");
  assert_true(c.policy.dlq_classic);
  t = dlqb_topology_new(&c);
  assert_non_null(t);
  for (size_t i = 0; i < t->nqueues; i++)
    if (t->queues[i].holds_items) assert_int_equal(t->queues[i].type, DLQB_QTYPE_CLASSIC);
  free(t);
  set_ok(&c, "dlq_queue_type", "quorum");
  assert_false(c.policy.dlq_classic);
  set_bad("dlq_queue_type", "Quorum", "'Quorum' is not a queue type (use quorum or classic)");
  set_bad("dlq_queue_type", "stream", "is not a queue type");
}

static void test_log_settings(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  set_ok(&c, "log_format", "json");
  assert_int_equal(c.log.format, DLQB_LOG_JSON);
  set_ok(&c, "log_format", " text ");
  assert_int_equal(c.log.format, DLQB_LOG_TEXT);
  set_bad("log_format", "JSON", "'JSON' is not a log format (use text or json)");
  set_bad("log_format", "", "is not a log format");
  set_bad("log_format", "jsonl", "is not a log format");

  static const char *const levels[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++) {
    set_ok(&c, "log_level", levels[i]);
    assert_int_equal(c.log.level, i);
  }
  set_bad("log_level", "verbose", "'verbose' is not a log level (use error, warn, info or debug)");
  set_bad("log_level", "2", "is not a log level");
  set_bad("log_level", "warning", "is not a log level");
}

static void test_instance(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  set_ok(&c, "instance", "bridge-a:1234");
  assert_string_equal(c.instance, "bridge-a:1234");
  char *edge = repeat("", 'i', 255);
  set_ok(&c, "instance", edge);
  assert_string_equal(c.instance, edge);
  free(edge);
  char *over = repeat("", 'i', 256);
  set_bad("instance", over, "is longer than 255 bytes");
  free(over);
  set_bad("instance", "a\tb", "contains a non-printable or non-ascii character");
  set_bad("instance", "caf\xc3\xa9", "non-ascii");
  set_bad("instance", "a\x7f", "non-printable");
  /* the error quotes well-formed UTF-8 as it is and a broken byte as '?' */
  set_bad("instance", "caf\xc3\xa9\t", "'caf\xc3\xa9?' contains");
  set_bad("max_attempts",
          "\xff"
          "5",
          "'?5' is not an integer");
}

/* completion_writers: names trimmed, kept as "a,b"; an empty name is an
 * error (a stray comma must not stand for anyone); a user counts only when
 * its whole name matches. */
static void test_completion_writers(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  assert_false(dlqb_config_is_completion_writer(&c, "", 0));
  assert_false(dlqb_config_is_completion_writer(&c, "guest", 5));
  set_ok(&c, "completion_writers", " dsr-worker , svc.b@corp ");
  assert_string_equal(c.ledger.completion_writers, "dsr-worker,svc.b@corp");
  assert_true(dlqb_config_is_completion_writer(&c, "dsr-worker", 10));
  assert_true(dlqb_config_is_completion_writer(&c, "svc.b@corp", 10));
  assert_false(dlqb_config_is_completion_writer(&c, "dsr-worke", 9));
  assert_false(dlqb_config_is_completion_writer(&c, "dsr-worker,svc.b@corp", 21));
  assert_false(dlqb_config_is_completion_writer(&c, "", 0));
  /* user_id is bytes, not a C string: a NUL inside never matches a prefix. */
  assert_false(dlqb_config_is_completion_writer(&c, "dsr-worker\0x", 12));
  set_ok(&c, "completion_writers", "  ");
  assert_string_equal(c.ledger.completion_writers, "");
  set_ok(&c, "completion_writers", "one");
  assert_true(dlqb_config_is_completion_writer(&c, "one", 3));
  set_bad("completion_writers", "a,,b", "user 2 of the list is empty");
  set_bad("completion_writers", "a,", "user 2 of the list is empty");
  set_bad("completion_writers", ", a", "user 1 of the list is empty");
  set_bad("completion_writers", "a,b\tc", "control character");
  char *over = repeat("", 'w', DLQB_CONFIG_STR_MAX);
  set_bad("completion_writers", over, "is longer than");
  free(over);
}

static void test_set_arguments(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_error err;
  dlqb_config_defaults(&c);
  assert_int_equal(dlqb_config_set(&c, "nope", "1", "--nope", &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "--nope: unknown setting 'nope'");
  assert_int_equal(dlqb_config_set(&c, NULL, "1", "x", &err), DLQB_EINVAL);
  assert_int_equal(dlqb_config_set(&c, "prefetch", NULL, "--prefetch", &err), DLQB_EINVAL);
  assert_int_equal(dlqb_config_set(NULL, "prefetch", "1", "--prefetch", &err), DLQB_EINVAL);
  /* Without a source name the key names the setting. */
  assert_int_equal(dlqb_config_set(&c, "prefetch", "0", NULL, &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "prefetch: '0' is not an integer from 1 to 10000");
  /* A NULL error is allowed. */
  assert_int_equal(dlqb_config_set(&c, "prefetch", "0", "--prefetch", NULL), DLQB_EINVAL);
}

/* ---- JSON ---- */

static void test_json_applies_members(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  json_ok(&c, "{\n"
              "  \"url\": \"amqps://u:p@h:5671/vh\",\n"
              "  \"max_attempts\": 7,\n"
              "  \"poison_threshold\": \"3\",\n"
              "  \"retry_delays\": \"2s,10s\",\n"
              "  \"retry_jitter\": 0,\n"
              "  \"sla_budget\": \"7d\",\n"
              "  \"dlq_sla\": \"12h\",\n"
              "  \"metrics_addr\": \"off\",\n"
              "  \"log_format\": \"json\",\n"
              "  \"log_level\": \"debug\",\n"
              "  \"instance\": \"east-1\"\n"
              "}\n");
  assert_string_equal(c.broker.url, "amqps://u:p@h:5671/vh");
  assert_int_equal(c.policy.max_attempts, 7);
  assert_int_equal(c.policy.poison_threshold, 3);
  assert_int_equal(c.policy.retry_delay_count, 2);
  assert_int_equal(c.policy.retry_delays_ms[1], 10000);
  assert_int_equal(c.policy.retry_jitter_percent, 0);
  assert_int_equal(c.policy.sla_budget_ms, 7ULL * 86400000);
  assert_int_equal(c.policy.dlq_sla_ms, 12ULL * 3600000);
  assert_string_equal(c.metrics_addr, "");
  assert_int_equal(c.log.format, DLQB_LOG_JSON);
  assert_int_equal(c.log.level, 3);
  assert_string_equal(c.instance, "east-1");
  assert_int_equal(c.policy.prefetch, 500); /* untouched */

  json_ok(&c, "{}");
  json_ok(&c, "{\"retry_delays\": [\"1s\", \" 5s\", \"1m\"], \"metrics_addr\": false}");
  assert_int_equal(c.policy.retry_delay_count, 3);
  assert_int_equal(c.policy.retry_delays_ms[2], 60000);
  assert_string_equal(c.metrics_addr, "");
}

static void test_json_length_is_respected(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_error err;
  dlqb_config_defaults(&c);
  const char *text = "{\"prefetch\": 9}garbage";
  assert_int_equal(dlqb_config_apply_json(&c, text, 15, &err), DLQB_OK);
  assert_int_equal(c.policy.prefetch, 9);
  assert_int_equal(dlqb_config_apply_json(&c, text, 14, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "not valid json"));
}

static void test_json_syntax_errors(void **state) {
  (void)state;
  json_bad("", "the config is empty");
  json_bad(" \n ", "the config is empty");
  json_bad("{", "not valid json at line 1");
  json_bad("{\n\"prefetch\": 5,\n\"max_attempts\" 5}", "not valid json at line 3");
  json_bad("{\"prefetch\": 5,}", "not valid json");
  json_bad("{\"prefetch\": 5} x", "not valid json at line 1");
  json_bad("{} {}", "not valid json at line 1");
  json_bad("{\"instance\": 'x'}", "not valid json");
  json_bad("prefetch = 5", "not valid json");
}

static void test_json_non_object(void **state) {
  (void)state;
  json_bad("[1, 2]", "the top level is an array, not a json object");
  json_bad("5", "the top level is an integer, not a json object");
  json_bad("\"x\"", "the top level is a string, not a json object");
  json_bad("null", "not a json object");
  json_bad("true", "not a json object");
}

static void test_json_member_errors(void **state) {
  (void)state;
  json_bad("{\"prefetchh\": 5}", "unknown key 'prefetchh'");
  json_bad("{\"MAX_ATTEMPTS\": 5}", "unknown key 'MAX_ATTEMPTS'");
  json_bad("{\"max_attempts\": 0}", "key 'max_attempts': '0' is not an integer from 1 to 1000");
  json_bad("{\"max_attempts\": \"0\"}", "key 'max_attempts': '0' is not an integer");
  /* An integer beyond int64: json-c 0.16 (bookworm) parses it and the
   * member check refuses it; json-c 0.18 (trixie) refuses it while parsing
   * ("number expected"). Refused either way, as measured on both. */
#if JSON_C_VERSION_NUM >= ((0 << 16) | (18 << 8))
  json_bad("{\"max_attempts\": 99999999999999999999}", "not valid json at line 1: number expected");
#else
  json_bad("{\"max_attempts\": 99999999999999999999}", "is not an integer from 1 to 1000");
#endif
  json_bad("{\"max_attempts\": -3}", "'-3' is not an integer");
  json_bad("{\"max_attempts\": 2.5}",
           "key 'max_attempts': expected an integer or a string, got a fractional number");
  json_bad("{\"max_attempts\": true}", "expected an integer or a string, got a boolean");
  json_bad("{\"max_attempts\": null}", "got null");
  json_bad("{\"max_attempts\": [5]}", "got an array");
  json_bad("{\"max_attempts\": {}}", "got an object");
  json_bad("{\"sla_budget\": 30}", "key 'sla_budget': expected a string, got an integer");
  json_bad("{\"log_level\": 2}", "key 'log_level': expected a string, got an integer");
  json_bad("{\"url\": 1}", "expected a string");
  json_bad("{\"metrics_addr\": true}", "key 'metrics_addr': expected a string or false");
  json_bad("{\"retry_delays\": 5}", "expected a string or an array of strings");
  json_bad("{\"retry_delays\": [\"1s\", 5]}", "key 'retry_delays': item 2 of the array is not");
  json_bad("{\"retry_delays\": []}", "key 'retry_delays': '' is empty");
  json_bad("{\"retry_delays\": [\"1s\", \"\"]}", "has an empty item");
  json_bad("{\"retry_delays\": \"1s,5x\"}", "key 'retry_delays': '5x' has an unknown unit");
  json_bad("{\"instance\": \"a\\u0000b\"}", "key 'instance': the string contains a nul");
  json_bad("{\"log_format\": \"xml\"}", "key 'log_format': 'xml' is not a log format");
}

/* A bad member leaves the whole config as it was, including the members
 * applied before it. */
static void test_json_is_all_or_nothing(void **state) {
  (void)state;
  json_bad("{\"prefetch\": 9, \"max_attempts\": 0}", "key 'max_attempts'");
  json_bad("{\"prefetch\": 9, \"bogus\": 0}", "unknown key 'bogus'");
}

static void test_json_too_long_array(void **state) {
  (void)state;
  char text[4096];
  size_t n = (size_t)snprintf(text, sizeof text, "{\"retry_delays\": [");
  for (int i = 0; i < 200; i++) {
    n += (size_t)snprintf(text + n, sizeof text - n, "%s\"100000ms\"", i ? "," : "");
  }
  snprintf(text + n, sizeof text - n, "]}");
  json_bad(text, "key 'retry_delays': the list is longer than 1023 bytes");
}

/* ---- files ---- */

/* Loads path as the operator named it (required) or as the default path. */
static dlqb_status load(dlqb_config *c, const char *path, bool required, uint64_t *keys,
                        bool *loaded, dlqb_error *err) {
  return dlqb_config_load_file(c, path, required, keys, loaded, err);
}

static uint64_t bit(const char *key) {
  long i = dlqb_config_key_index(key);
  assert_true(i >= 0);
  return UINT64_C(1) << i;
}

static void test_file_applies(void **state) {
  (void)state;
  char path[64];
  dlqb_config c;
  dlqb_error err;
  uint64_t keys = 0;
  bool loaded = false;
  write_temp(path, sizeof path, "{\"max_replays\": 9, \"log_level\": \"warn\"}\n");
  dlqb_config_defaults(&c);
  dlqb_status st = load(&c, path, true, &keys, &loaded, &err);
  unlink(path);
  assert_int_equal(st, DLQB_OK);
  assert_true(loaded);
  assert_int_equal(c.policy.max_replays, 9);
  assert_int_equal(c.log.level, 1);
  /* Exactly the keys the file named, for "where did this value come from". */
  assert_true(keys == (bit("max_replays") | bit("log_level")));
}

/* Asserts the load fails with exactly "config file 'PATH': <tail>" (tail
 * NULL: only the prefix is checked), one line, and c unchanged. */
static void file_bad(const char *path, bool required, dlqb_status want_st, const char *tail) {
  dlqb_config c, before;
  dlqb_error err = {{0}};
  char want[512];
  uint64_t keys = 99;
  bool loaded = true;
  dlqb_config_defaults(&c);
  before = c;
  assert_int_equal(load(&c, path, required, &keys, &loaded, &err), want_st);
  snprintf(want, sizeof want, "config file '%s': %s", path, tail != NULL ? tail : "");
  if (tail != NULL ? strcmp(err.msg, want) != 0 : strncmp(err.msg, want, strlen(want)) != 0)
    fail_msg("error is \"%s\", wanted \"%s\"", err.msg, want);
  assert_null(strchr(err.msg, '\n'));
  assert_memory_equal(&c, &before, sizeof c);
  assert_false(loaded);
  assert_true(keys == 0);
}

/* A temporary file with text and mode; file_bad on it. */
static void text_bad(const char *text, const char *tail) {
  char path[64];
  write_temp(path, sizeof path, text);
  file_bad(path, true, DLQB_EINVAL, tail);
  unlink(path);
}

static void test_file_errors(void **state) {
  (void)state;
  /* A file the operator named must exist; the default path need not. */
  file_bad("/nonexistent/dlqb.json", true, DLQB_EIO, "cannot open: no such file or directory");
  /* Only "does not exist" is forgiven for the default path: anything else
   * there is a mistake to report, not a reason to run without it. */
  file_bad("/etc/passwd/config.json", false, DLQB_EIO, "cannot open: not a directory");
  file_bad("/tmp", true, DLQB_EIO, "cannot read: is a directory");
  file_bad("/tmp", false, DLQB_EIO, "cannot read: is a directory");
  /* A FIFO is refused at once instead of waiting for a writer. */
  char fifo[64];
  snprintf(fifo, sizeof fifo, "/tmp/dlqb_test_fifo_%ld", (long)getpid());
  assert_int_equal(mkfifo(fifo, 0600), 0);
  file_bad(fifo, true, DLQB_EINVAL, "is not a regular file");
  unlink(fifo);

  /* A file any user may change is refused, whatever it holds. */
  char open_path[64];
  write_temp(open_path, sizeof open_path, "{}");
  assert_int_equal(chmod(open_path, 0666), 0);
  file_bad(open_path, true, DLQB_EINVAL,
           "is writable by any user (mode 0666), who could change what dlq-bridge does: "
           "chmod o-w it");
  assert_int_equal(chmod(open_path, 0664), 0);
  dlqb_config ok;
  dlqb_error ok_err;
  dlqb_config_defaults(&ok);
  assert_int_equal(load(&ok, open_path, true, NULL, NULL, &ok_err), DLQB_OK);
  unlink(open_path);

  text_bad("{\"max_attempts\": 0}", "key 'max_attempts': '0' is not an integer from 1 to 1000");
  text_bad("max_attempts: 5\n", NULL);
  text_bad("{\"a\": 1,\n \"b\": }", NULL);
  text_bad("[]", "the top level is an array, not a json object");
  text_bad("", "the config is empty (expected a json object)");
  /* Unknown keys: named, with the setting meant when one is close. */
  text_bad("{\"audit_logs\": \"/x\"}", "unknown key 'audit_logs' (did you mean 'audit_log'?)");
  text_bad("{\"DLQ_BRIDGE_AUDIT_LOG\": \"/x\"}",
           "unknown key 'DLQ_BRIDGE_AUDIT_LOG' (did you mean 'audit_log'?)");
  text_bad("{\"frobnicate\": 1}",
           "unknown key 'frobnicate' (the keys are listed by 'dlq-bridge help settings')");
  /* Wrong JSON types name the key and what it takes. */
  text_bad("{\"audit_log\": 5}", "key 'audit_log': expected a string, got an integer");
  text_bad("{\"prefetch\": true}",
           "key 'prefetch': expected an integer or a string, got a boolean");
  text_bad("{\"retry_delays\": {\"a\": 1}}",
           "key 'retry_delays': expected a string or an array of strings, got an object");
  /* `pipelines` is read (test_pipeline.c has its rules), not a setting. */
  text_bad("{\"pipelines\": {}}", "key 'pipelines': expected 1 to 8 pipelines, got 0");

  dlqb_config c;
  dlqb_error err;
  dlqb_config_defaults(&c);
  assert_int_equal(load(&c, NULL, true, NULL, NULL, &err), DLQB_EINVAL);
  assert_int_equal(c.policy.max_attempts, 5);
}

/* The default path absent: nothing applied, not an error. */
static void test_file_default_absent(void **state) {
  (void)state;
  dlqb_config c, before;
  dlqb_error err;
  uint64_t keys = 7;
  bool loaded = true;
  dlqb_config_defaults(&c);
  before = c;
  assert_int_equal(load(&c, "/nonexistent/dlqb.json", false, &keys, &loaded, &err), DLQB_OK);
  assert_false(loaded);
  assert_true(keys == 0);
  assert_memory_equal(&c, &before, sizeof c);
}

/* A file every operator reads must not hold the daemon's password. */
static void test_file_secret_needs_private_mode(void **state) {
  (void)state;
  static const char secret[] = "{\"url\": \"amqp://bridge:s3cret@rabbit/%2f\"}";
  static const char *const tail =
      "key 'url' holds a password, and the file is readable by group or others "
      "(mode %04o): put the password in a password_file, or chmod 600 the file";
  char path[64], want[256];
  dlqb_config c;
  dlqb_error err;
  write_temp(path, sizeof path, secret);
  static const unsigned modes[] = {0644, 0640, 0604};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    assert_int_equal(chmod(path, modes[i]), 0);
    snprintf(want, sizeof want, tail, modes[i]);
    file_bad(path, true, DLQB_EINVAL, want);
  }
  /* Private: accepted (mkstemp made it 0600; 0620 is not readable by others). */
  static const unsigned ok_modes[] = {0600, 0620, 0400};
  for (size_t i = 0; i < sizeof ok_modes / sizeof ok_modes[0]; i++) {
    assert_int_equal(chmod(path, ok_modes[i]), 0);
    dlqb_config_defaults(&c);
    assert_int_equal(load(&c, path, true, NULL, NULL, &err), DLQB_OK);
    assert_string_equal(c.broker.url, "amqp://bridge:s3cret@rabbit/%2f");
  }
  unlink(path);
  /* No password in the URL: a shared file may be readable by all. */
  write_temp(path, sizeof path,
             "{\"url\": \"amqp://bridge@rabbit/%2f\", \"password_file\": \"/run/pw\"}");
  assert_int_equal(chmod(path, 0644), 0);
  dlqb_config_defaults(&c);
  assert_int_equal(load(&c, path, true, NULL, NULL, &err), DLQB_OK);
  assert_string_equal(c.broker.password_file, "/run/pw");
  unlink(path);
}

static void test_file_too_large(void **state) {
  (void)state;
  char path[64];
  dlqb_config c;
  dlqb_error err;
  char *big = repeat("{\"instance\": \"x\"}", ' ', 1024 * 1024);
  write_temp(path, sizeof path, big);
  free(big);
  dlqb_config_defaults(&c);
  dlqb_status st = load(&c, path, true, NULL, NULL, &err);
  unlink(path);
  assert_int_equal(st, DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "is larger than 1048576 bytes"));
}

/* Which file: the flag, else the variable, else the default; empty = none. */
static void test_file_choice(void **state) {
  (void)state;
  bool req = false;
  assert_string_equal(dlqb_config_file_choice(NULL, NULL, &req), DLQB_CONFIG_DEFAULT_PATH);
  assert_false(req);
  assert_string_equal(DLQB_CONFIG_DEFAULT_PATH, "/etc/dlq-bridge/config.json");
  assert_string_equal(dlqb_config_file_choice(NULL, "/e.json", &req), "/e.json");
  assert_true(req);
  assert_string_equal(dlqb_config_file_choice("/f.json", "/e.json", &req), "/f.json");
  assert_true(req);
  req = true;
  assert_null(dlqb_config_file_choice(NULL, "", &req));
  assert_false(req);
  req = true;
  assert_null(dlqb_config_file_choice("", "/e.json", &req));
  assert_false(req);
  assert_string_equal(dlqb_config_file_choice("/f.json", "", &req), "/f.json");
  assert_true(req);
}

static void test_closest_key(void **state) {
  (void)state;
  assert_string_equal(dlqb_config_closest_key("audit_logs"), "audit_log");
  assert_string_equal(dlqb_config_closest_key("auditlog"), "audit_log");
  assert_string_equal(dlqb_config_closest_key("audit-log"), "audit_log");
  assert_string_equal(dlqb_config_closest_key("Audit_Log"), "audit_log");
  assert_string_equal(dlqb_config_closest_key("DLQ_BRIDGE_RETRY_DELAYS"), "retry_delays");
  assert_string_equal(dlqb_config_closest_key("retry_delay"), "retry_delays");
  assert_string_equal(dlqb_config_closest_key("audit_public_key"), "audit_public_keys");
  assert_string_equal(dlqb_config_closest_key("prefetchh"), "prefetch");
  assert_null(dlqb_config_closest_key("frobnicate"));
  assert_null(dlqb_config_closest_key(""));
  assert_null(dlqb_config_closest_key(NULL));
  /* Longer than any key: no suggestion, no overrun. */
  char long_key[300];
  memset(long_key, 'a', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = '\0';
  assert_null(dlqb_config_closest_key(long_key));
  /* Every key is its own closest key. */
  for (const dlqb_config_setting *s = dlqb_config_settings(); s->key; s++)
    assert_string_equal(dlqb_config_closest_key(s->key), s->key);
}

static void test_json_keys_reported(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_error err;
  uint64_t keys = 1234;
  dlqb_config_defaults(&c);
  static const char text[] = "{\"audit_log\": \"/a\", \"retry_delays\": [\"1s\"]}";
  assert_int_equal(dlqb_config_apply_json_keys(&c, text, strlen(text), &keys, &err), DLQB_OK);
  assert_true(keys == (bit("audit_log") | bit("retry_delays")));
  /* On failure *set_keys is untouched. */
  keys = 1234;
  static const char bad[] = "{\"audit_log\": \"/a\", \"prefetch\": 0}";
  assert_int_equal(dlqb_config_apply_json_keys(&c, bad, strlen(bad), &keys, &err), DLQB_EINVAL);
  assert_true(keys == 1234);
  assert_int_equal(dlqb_config_key_index("nope"), -1);
  assert_int_equal(dlqb_config_key_index("url"), 0);
}

/* --print-config's values: each reads back as the same setting, the URL
 * with its password hidden. */
static void test_value_text_round_trips(void **state) {
  (void)state;
  dlqb_config c, back;
  dlqb_error err;
  char text[DLQB_CONFIG_STR_MAX];
  dlqb_config_defaults(&c);
  set_ok(&c, "retry_delays", "1s,90s,2h");
  set_ok(&c, "metrics_addr", "off");
  set_ok(&c, "log_format", "json");
  set_ok(&c, "log_level", "debug");
  set_ok(&c, "completion_writers", "a, b");
  set_ok(&c, "dlq_sla", "1500ms");
  const dlqb_config_setting *s = dlqb_config_settings();
  for (long i = 0; s[i].key != NULL; i++) {
    dlqb_config_value_text(&c, i, text, sizeof text);
    if (strcmp(s[i].key, "url") == 0) {
      assert_string_equal(text, "amqp://guest:***@localhost:5672/%2f");
      continue;
    }
    back = c;
    if (dlqb_config_set(&back, s[i].key, text, "--test", &err) != DLQB_OK)
      fail_msg("%s: '%s' does not read back: %s", s[i].key, text, err.msg);
    assert_memory_equal(&back, &c, sizeof c);
  }
  dlqb_config_value_text(&c, dlqb_config_key_index("retry_delays"), text, sizeof text);
  assert_string_equal(text, "1s,90s,2h");
  dlqb_config_value_text(&c, dlqb_config_key_index("metrics_addr"), text, sizeof text);
  assert_string_equal(text, "off");
  dlqb_config_value_text(&c, -1, text, sizeof text);
  assert_string_equal(text, "");
}

static void test_url_has_password(void **state) {
  (void)state;
  assert_true(dlqb_config_url_has_password("amqp://u:p@h/v"));
  assert_true(dlqb_config_url_has_password("amqps://u:p/q@h/v"));
  assert_false(dlqb_config_url_has_password("amqp://u@h/v"));
  assert_false(dlqb_config_url_has_password("amqp://h:5672/v"));
  assert_false(dlqb_config_url_has_password("amqp://u:@h/v"));
  assert_false(dlqb_config_url_has_password(NULL));
}

/* ---- environment ---- */

typedef struct {
  const char *name;
  const char *value;
} env_pair;

static const char *lookup_in(const env_pair *env, const char *name) {
  for (; env->name != NULL; env++) {
    if (strcmp(env->name, name) == 0) {
      return env->value;
    }
  }
  return NULL;
}

static const char *env_empty(const char *name) {
  static const env_pair env[] = {{"PATH", "/bin"}, {NULL, NULL}};
  return lookup_in(env, name);
}

static const char *env_some(const char *name) {
  static const env_pair env[] = {
      {"DLQ_BRIDGE_PREFETCH", "250"},
      {"DLQ_BRIDGE_RETRY_DELAYS", "10s,1m"},
      {"DLQ_BRIDGE_METRICS_ADDR", ""},
      {"DLQ_BRIDGE_LOG_FORMAT", "json"},
      {"DLQ_BRIDGE_URL", "amqps://u:p@h/vh"},
      {"max_attempts", "9"}, /* keys are not variable names */
      {NULL, NULL},
  };
  return lookup_in(env, name);
}

static const char *env_bad(const char *name) {
  static const env_pair env[] = {
      {"DLQ_BRIDGE_PREFETCH", "250"},
      {"DLQ_BRIDGE_MAX_ATTEMPTS", "0"},
      {NULL, NULL},
  };
  return lookup_in(env, name);
}

static const char *env_bad_url(const char *name) {
  static const env_pair env[] = {{"DLQ_BRIDGE_URL", "https://u:topsecret@h/"}, {NULL, NULL}};
  return lookup_in(env, name);
}

static void test_env_applies(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config d;
  dlqb_error err;
  dlqb_config_defaults(&c);
  d = c;
  assert_int_equal(dlqb_config_apply_env(&c, env_empty, &err), DLQB_OK);
  assert_memory_equal(&c, &d, sizeof c);

  assert_int_equal(dlqb_config_apply_env(&c, env_some, &err), DLQB_OK);
  assert_int_equal(c.policy.prefetch, 250);
  assert_int_equal(c.policy.retry_delay_count, 2);
  assert_int_equal(c.policy.retry_delays_ms[1], 60000);
  assert_string_equal(c.metrics_addr, "");
  assert_int_equal(c.log.format, DLQB_LOG_JSON);
  assert_string_equal(c.broker.url, "amqps://u:p@h/vh");
  assert_int_equal(c.policy.max_attempts, 5);
}

static void test_env_errors(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config d;
  dlqb_error err;
  dlqb_config_defaults(&c);
  d = c;
  assert_int_equal(dlqb_config_apply_env(&c, env_bad, &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "DLQ_BRIDGE_MAX_ATTEMPTS: '0' is not an integer from 1 to 1000");
  /* The good variable before the bad one is not applied either. */
  assert_memory_equal(&c, &d, sizeof c);

  assert_int_equal(dlqb_config_apply_env(&c, env_bad_url, &err), DLQB_EINVAL);
  assert_null(strstr(err.msg, "topsecret"));
  assert_non_null(strstr(err.msg, "DLQ_BRIDGE_URL: 'https://u:***@h/'"));

  assert_int_equal(dlqb_config_apply_env(&c, NULL, &err), DLQB_EINVAL);
}

static void test_real_getenv_wrapper(void **state) {
  (void)state;
  assert_int_equal(setenv("DLQ_BRIDGE_TEST_ONLY_VAR", "v", 1), 0);
  assert_string_equal(dlqb_config_getenv("DLQ_BRIDGE_TEST_ONLY_VAR"), "v");
  assert_int_equal(unsetenv("DLQ_BRIDGE_TEST_ONLY_VAR"), 0);
  assert_null(dlqb_config_getenv("DLQ_BRIDGE_TEST_ONLY_VAR"));
}

/* ---- precedence: default < file < environment < flag ---- */

static const char *env_precedence(const char *name) {
  static const env_pair env[] = {
      {"DLQ_BRIDGE_PREFETCH", "200"},
      {"DLQ_BRIDGE_MAX_ATTEMPTS", "20"},
      {NULL, NULL},
  };
  return lookup_in(env, name);
}

static void test_precedence(void **state) {
  (void)state;
  char path[64];
  dlqb_config c;
  dlqb_error err;
  write_temp(path, sizeof path, "{\"prefetch\": 100, \"max_attempts\": 10, \"max_replays\": 7}");
  dlqb_config_defaults(&c);
  dlqb_status st = dlqb_config_load_file(&c, path, true, NULL, NULL, &err);
  unlink(path);
  assert_int_equal(st, DLQB_OK);
  assert_int_equal(dlqb_config_apply_env(&c, env_precedence, &err), DLQB_OK);
  const dlqb_config_setting *flag = dlqb_config_find_flag("max-attempts");
  assert_non_null(flag);
  assert_int_equal(dlqb_config_set(&c, flag->key, "30", "--max-attempts", &err), DLQB_OK);

  assert_int_equal(c.policy.poison_threshold, 2); /* default */
  assert_int_equal(c.policy.max_replays, 7);      /* file */
  assert_int_equal(c.policy.prefetch, 200);       /* environment over file */
  assert_int_equal(c.policy.max_attempts, 30);    /* flag over environment over file */
}

/* ---- validation ---- */

static void validate_bad(const dlqb_config *c, const char *want) {
  dlqb_error err = {{0}};
  assert_int_equal(dlqb_config_validate(c, &err), DLQB_EINVAL);
  assert_string_equal(err.msg, want);
}

static void test_validate_tls(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_error err;
  static const char *const tls_keys[] = {"tls_ca_file", "tls_cert_file", "tls_key_file"};
  for (size_t i = 0; i < 3; i++) {
    dlqb_config_defaults(&c);
    set_ok(&c, tls_keys[i], "/etc/x.pem");
    validate_bad(&c, "tls files are set but the url is not amqps://");
  }

  dlqb_config_defaults(&c);
  set_ok(&c, "url", "amqps://h/");
  set_ok(&c, "tls_ca_file", "/etc/ca.pem");
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_OK);
  set_ok(&c, "tls_cert_file", "/etc/cert.pem");
  validate_bad(&c, "tls_cert_file and tls_key_file must be given together");
  set_ok(&c, "tls_key_file", "/etc/key.pem");
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_OK);
  set_ok(&c, "tls_cert_file", "");
  validate_bad(&c, "tls_cert_file and tls_key_file must be given together");

  /* amqps:// without any files is fine: the system CAs verify. */
  dlqb_config_defaults(&c);
  set_ok(&c, "url", "amqps://h/");
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_OK);
}

static void test_validate_audit(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_error err;
  dlqb_config_defaults(&c);
  set_ok(&c, "audit_log", "/var/log/dlq-bridge/audit.log");
  /* A reader of the log (audit verify) has no private key. */
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_OK);
  set_ok(&c, "audit_key_file", "/etc/dlq-bridge/audit.key");
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_OK);
  assert_int_equal(dlqb_config_validate(NULL, &err), DLQB_EINVAL);
}

/* ---- URL redaction ---- */

typedef struct {
  const char *in;
  const char *out;
} redact_case;

static void test_redact_cases(void **state) {
  (void)state;
  static const redact_case cases[] = {
      {"amqp://user:secret@host:5672/vh", "amqp://user:***@host:5672/vh"},
      {"amqps://guest:guest@localhost:5672/%2f", "amqps://guest:***@localhost:5672/%2f"},
      {"amqp://user:secret@host", "amqp://user:***@host"},
      {"amqp://user:s%40cret@host/vh", "amqp://user:***@host/vh"},
      {"amqp://user@host:5672/vh", "amqp://user@host:5672/vh"},
      {"amqp://host:5672/vh", "amqp://host:5672/vh"},
      {"amqp://host", "amqp://host"},
      {"amqp://", "amqp://"},
      {"amqp://user:@host/", "amqp://user:@host/"},
      {"amqp://:secret@host/", "amqp://:***@host/"},
      {"amqp://host/v@h", "amqp://host/v@h"},
      {"amqp://host:5672/v@h", "amqp://host:5672/v@h"},
      {"amqp://u:p@host/v@h", "amqp://u:***@host/v@h"},
      /* Unencoded delimiters in the password hide more, never less. */
      {"amqp://u:p@ss@host/vh", "amqp://u:***@host/vh"},
      {"amqp://u:pa/ss@host/vh", "amqp://u:***@host/vh"},
      {"amqp://u:pa?ss@host", "amqp://u:***@host"},
      {"amqp://u:pa#ss@host", "amqp://u:***@host"},
      {"user:secret@host", "user:***@host"},
      {"", ""},
      {"@", "@"},
      {":@", ":@"},
      {"::@@", ":***@"},
      {"amqp://@", "amqp://@"},
      {"amqp://:@", "amqp://:@"},
      {"no url at all", "no url at all"},
      {"://", "://"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char buf[128];
    assert_string_equal(dlqb_url_redact(cases[i].in, buf, sizeof buf), cases[i].out);
  }
}

static void test_redact_buffers(void **state) {
  (void)state;
  char small[16];
  const char *url = "amqp://user:secretsecret@host/vh";
  assert_ptr_equal(dlqb_url_redact(url, small, sizeof small), small);
  assert_string_equal(small, "amqp://user:***");
  for (size_t len = 1; len <= 40; len++) {
    char buf[40];
    dlqb_url_redact(url, buf, len);
    assert_true(strlen(buf) < len);
    assert_null(strstr(buf, "sec"));
  }
  char untouched[2] = {'q', 'q'};
  dlqb_url_redact(url, untouched, 0);
  assert_int_equal(untouched[0], 'q');
  char out[8] = "zzz";
  assert_string_equal(dlqb_url_redact(NULL, out, sizeof out), "");
  assert_null(dlqb_url_redact(url, NULL, 8));

  char *longurl = repeat("amqp://u:hunter2@", 'h', 5000);
  char big[64];
  dlqb_url_redact(longurl, big, sizeof big);
  assert_null(strstr(big, "hunter2"));
  assert_true(strncmp(big, "amqp://u:***@hhh", 16) == 0);
  free(longurl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_rows_are_consistent),
      cmocka_unit_test(test_documented_defaults_parse),
      cmocka_unit_test(test_default_values),
      cmocka_unit_test(test_find_flag),
      cmocka_unit_test(test_int_bounds),
      cmocka_unit_test(test_int_syntax),
      cmocka_unit_test(test_int_error_message_exact),
      cmocka_unit_test(test_single_durations),
      cmocka_unit_test(test_retry_delays),
      cmocka_unit_test(test_url),
      cmocka_unit_test(test_url_errors_hide_the_password),
      cmocka_unit_test(test_paths),
      cmocka_unit_test(test_metrics_addr),
      cmocka_unit_test(test_log_settings),
      cmocka_unit_test(test_dlq_queue_type),
      cmocka_unit_test(test_instance),
      cmocka_unit_test(test_completion_writers),
      cmocka_unit_test(test_set_arguments),
      cmocka_unit_test(test_json_applies_members),
      cmocka_unit_test(test_json_length_is_respected),
      cmocka_unit_test(test_json_syntax_errors),
      cmocka_unit_test(test_json_non_object),
      cmocka_unit_test(test_json_member_errors),
      cmocka_unit_test(test_json_is_all_or_nothing),
      cmocka_unit_test(test_json_too_long_array),
      cmocka_unit_test(test_file_applies),
      cmocka_unit_test(test_file_errors),
      cmocka_unit_test(test_file_too_large),
      cmocka_unit_test(test_file_default_absent),
      cmocka_unit_test(test_file_secret_needs_private_mode),
      cmocka_unit_test(test_file_choice),
      cmocka_unit_test(test_closest_key),
      cmocka_unit_test(test_json_keys_reported),
      cmocka_unit_test(test_url_has_password),
      cmocka_unit_test(test_value_text_round_trips),
      cmocka_unit_test(test_env_applies),
      cmocka_unit_test(test_env_errors),
      cmocka_unit_test(test_real_getenv_wrapper),
      cmocka_unit_test(test_precedence),
      cmocka_unit_test(test_validate_tls),
      cmocka_unit_test(test_validate_audit),
      cmocka_unit_test(test_redact_cases),
      cmocka_unit_test(test_redact_buffers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

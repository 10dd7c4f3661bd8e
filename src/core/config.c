/* The settings table and what follows from it: defaults, parsing from text,
 * a JSON file and the environment, and the cross-setting checks. */
#include "dlqb/config.h"
#include "dlqb/group.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/deadline.h"
#include "dlqb/duration.h"
#include "dlqb/text.h"
#include "config_private.h"

/* Quoted input is cut to this many bytes so an error stays one short line. */
#define QUOTE_BUF DLQB_QUOTE_BUF

#define MS_PER_HOUR INT64_C(3600000)

typedef enum {
  KIND_URL,        /* amqp:// or amqps:// URL */
  KIND_PATH,       /* a file path, "" = unset */
  KIND_INT,        /* a decimal integer in [min, max] */
  KIND_DURATION,   /* one duration of at least min ms (min 1: > 0) */
  KIND_DELAYS,     /* the retry delay list, each in (0, max] ms */
  KIND_ADDR,       /* host:port, or "" / "off" for off */
  KIND_LOG_FORMAT, /* text | json */
  KIND_LOG_LEVEL,  /* error | warn | info | debug */
  KIND_NAME,       /* printable ASCII */
  KIND_USERS,      /* broker user names, comma-separated; kept as "a,b" */
  KIND_DEADLINES,  /* PATTERN=PERIOD rules per legal basis (dlqb/deadline.h) */
  KIND_QUEUE_TYPE  /* quorum | classic: the DLQ's and review queue's type (a bool, classic) */
} setting_kind;

/* X(key, field, env, flag, default, kind, min, max, help), one per setting;
 * field is the member of dlqb_config, within its group ("broker.url").
 * The public table and the rule table are both generated from this list,
 * so names, defaults and rules cannot drift apart. */
#define DLQB_SETTINGS(X)                                                                           \
  X(url, broker.url, "DLQ_BRIDGE_URL", "url", "amqp://guest:guest@localhost:5672/%2f", KIND_URL,   \
    0, 0, "broker URL, amqp:// or amqps://")                                                       \
  X(password_file, broker.password_file, "DLQ_BRIDGE_PASSWORD_FILE", "password-file", "",          \
    KIND_PATH, 0, 0, "file holding the broker password; empty = the URL's password")               \
  X(tls_ca_file, broker.tls_ca_file, "DLQ_BRIDGE_TLS_CA_FILE", "tls-ca-file", "", KIND_PATH, 0, 0, \
    "CA certificates (PEM) to verify the broker; needs an amqps:// URL")                           \
  X(tls_cert_file, broker.tls_cert_file, "DLQ_BRIDGE_TLS_CERT_FILE", "tls-cert-file", "",          \
    KIND_PATH, 0, 0, "client certificate (PEM); needs tls_key_file and amqps://")                  \
  X(tls_key_file, broker.tls_key_file, "DLQ_BRIDGE_TLS_KEY_FILE", "tls-key-file", "", KIND_PATH,   \
    0, 0, "client private key (PEM); needs tls_cert_file and amqps://")                            \
  X(max_attempts, policy.max_attempts, "DLQ_BRIDGE_MAX_ATTEMPTS", "max-attempts", "5", KIND_INT,   \
    1, 1000, "attempts before the DLQ when an envelope has no max_attempts (1 to 1000)")           \
  X(poison_threshold, policy.poison_threshold, "DLQ_BRIDGE_POISON_THRESHOLD", "poison-threshold",  \
    "2", KIND_INT, 1, 100, "consumer crashes on a message before it is poison (1 to 100)")         \
  X(retry_delays, policy.retry_delays_ms, "DLQ_BRIDGE_RETRY_DELAYS", "retry-delays",               \
    "1s,5s,30s,2m", KIND_DELAYS, 0, 24 * MS_PER_HOUR,                                              \
    "retry delays, comma-separated, each up to 24h, at most 16; the last repeats")                 \
  X(retry_jitter, policy.retry_jitter_percent, "DLQ_BRIDGE_RETRY_JITTER", "retry-jitter", "20",    \
    KIND_INT, 0, 90, "percent by which a retry delay may be randomly shortened (0 to 90)")         \
  X(sla_budget, policy.sla_budget_ms, "DLQ_BRIDGE_SLA_BUDGET", "sla-budget", "30d", KIND_DURATION, \
    1, 0, "no retry lands later than this after a task first failed")                              \
  X(prefetch, policy.prefetch, "DLQ_BRIDGE_PREFETCH", "prefetch", "500", KIND_INT, 1, 10000,       \
    "messages in flight in the router (1 to 10000)")                                               \
  X(startup_wait, startup_wait_ms, "DLQ_BRIDGE_STARTUP_WAIT", "startup-wait", "0s", KIND_DURATION, \
    0, 0, "how long run waits for the broker at start; 0s = exit at once")                         \
  X(dlq_sla, policy.dlq_sla_ms, "DLQ_BRIDGE_DLQ_SLA", "dlq-sla", "24h", KIND_DURATION, 1, 0,       \
    "DLQ items older than this are escalated")                                                     \
  X(deadlines, deadlines, "DLQ_BRIDGE_DEADLINES", "deadlines", "gdpr_*=1mo,ccpa_*=45d",            \
    KIND_DEADLINES, 0, 0,                                                                          \
    "statutory deadline from receipt per legal_basis, PATTERN=PERIOD,...; empty = none")           \
  X(dlq_queue_type, policy.dlq_classic, "DLQ_BRIDGE_DLQ_QUEUE_TYPE", "dlq-queue-type", "classic",  \
    KIND_QUEUE_TYPE, 0, 0,                                                                         \
    "the DLQ's and review queue's type: classic (one copy, one node) or quorum (replicated)")      \
  X(max_replays, policy.max_replays, "DLQ_BRIDGE_MAX_REPLAYS", "max-replays", "3", KIND_INT, 1,    \
    1000, "replays of a task before its next failure escalates (1 to 1000)")                       \
  X(edit_approval, policy.edit_approval, "DLQ_BRIDGE_EDIT_APPROVAL", "edit-approval", "1",         \
    KIND_INT, 0, 1, "1 = an edit is a proposal a different broker user approves; 0 = direct")      \
  X(ledger_cache, ledger.cache, "DLQ_BRIDGE_LEDGER_CACHE", "ledger-cache", "", KIND_PATH, 0, 0,    \
    "replay's cache of the completion ledger; empty = read it whole every replay")                 \
  X(completion_writers, ledger.completion_writers, "DLQ_BRIDGE_COMPLETION_WRITERS",                \
    "completion-writers", "", KIND_USERS, 0, 0,                                                    \
    "broker users whose completions replay trusts, comma-separated; empty = none")                 \
  X(catalog_checkpoint, catalog.checkpoint, "DLQ_BRIDGE_CATALOG_CHECKPOINT", "catalog-checkpoint", \
    "auto", KIND_PATH, 0, 0,                                                                       \
    "a look's checkpoint of the catalog fold: auto (in the state directory), none, or a file")     \
  X(catalog_writers, catalog.writers, "DLQ_BRIDGE_CATALOG_WRITERS", "catalog-writers", "",         \
    KIND_USERS, 0, 0,                                                                              \
    "broker users whose catalog events a look believes, comma-separated; empty = any publisher's") \
  X(catalog_check_interval, catalog.check_interval_ms, "DLQ_BRIDGE_CATALOG_CHECK_INTERVAL",        \
    "catalog-check-interval", "30s", KIND_DURATION, 0, 0,                                          \
    "run: compare each catalogued queue's depth with the catalog this often; 0 = never")           \
  X(catalog_verify_every, catalog.verify_every_ms, "DLQ_BRIDGE_CATALOG_VERIFY_EVERY",              \
    "catalog-verify-every", "6h", KIND_DURATION, 0, 0,                                             \
    "run: a verifying pass over each catalogued queue this often, agreeing or not; 0 = never")     \
  X(drain_reasons, drain.reasons, "DLQ_BRIDGE_DRAIN_REASONS", "drain-reasons", "max_attempts",     \
    KIND_USERS, 0, 0,                                                                              \
    "dlq_reasons drain may replay, comma-separated (poison, invalid_envelope only if listed)")     \
  X(drain_sources, drain.sources, "DLQ_BRIDGE_DRAIN_SOURCES", "drain-sources", "", KIND_USERS, 0,  \
    0, "source systems drain may replay, comma-separated; empty = any")                            \
  X(drain_errors, drain.errors, "DLQ_BRIDGE_DRAIN_ERRORS", "drain-errors", "", KIND_PATH, 0, 0,    \
    "last_error texts drain may replay, '|'-separated, any case; empty = any")                     \
  X(drain_groups, drain.groups, "DLQ_BRIDGE_DRAIN_GROUPS", "drain-groups", "", KIND_USERS, 0, 0,   \
    "failure group ids (stats --by group) drain may replay, comma-separated; empty = any")         \
  X(drain_canary, drain.canary, "DLQ_BRIDGE_DRAIN_CANARY", "drain-canary", "5", KIND_INT, 1, 1000, \
    "items a drain run replays first and waits for (1 to 1000)")                                   \
  X(drain_canary_timeout, drain.canary_timeout_ms, "DLQ_BRIDGE_DRAIN_CANARY_TIMEOUT",              \
    "drain-canary-timeout", "10m", KIND_DURATION, 1000, 0,                                         \
    "how long a drain run waits for every canary to complete")                                     \
  X(drain_start_rate, drain.start_rate, "DLQ_BRIDGE_DRAIN_START_RATE", "drain-start-rate", "1",    \
    KIND_INT, 1, 100000, "items a second of the canary and the first ramp step")                   \
  X(drain_step_factor, drain.step_factor, "DLQ_BRIDGE_DRAIN_STEP_FACTOR", "drain-step-factor",     \
    "2", KIND_INT, 1, 100, "each ramp step's rate is the previous one's times this (1 to 100)")    \
  X(drain_max_rate, drain.max_rate, "DLQ_BRIDGE_DRAIN_MAX_RATE", "drain-max-rate", "50", KIND_INT, \
    1, 100000, "the ramp's ceiling, items a second (1 to 100000)")                                 \
  X(drain_step, drain.step_ms, "DLQ_BRIDGE_DRAIN_STEP", "drain-step", "30s", KIND_DURATION, 1000,  \
    0, "how long one ramp step lasts")                                                             \
  X(drain_failure_threshold, drain.failure_threshold, "DLQ_BRIDGE_DRAIN_FAILURE_THRESHOLD",        \
    "drain-failure-threshold", "3", KIND_INT, 1, 1000,                                             \
    "re-failures within drain_failure_window that stop a drain run (1 to 1000)")                   \
  X(drain_failure_window, drain.failure_window_ms, "DLQ_BRIDGE_DRAIN_FAILURE_WINDOW",              \
    "drain-failure-window", "5m", KIND_DURATION, 1000, 0, "the window re-failures are counted in") \
  X(drain_max_items, drain.max_items, "DLQ_BRIDGE_DRAIN_MAX_ITEMS", "drain-max-items", "0",        \
    KIND_INT, 0, 1000000000, "items one drain run replays at most; 0 = no limit")                  \
  X(drain_state, drain.state, "DLQ_BRIDGE_DRAIN_STATE", "drain-state",                             \
    "/var/lib/dlq-bridge/drain-state.json", KIND_PATH, 0, 0,                                       \
    "file where drain run records its runs and drain status reads them")                           \
  X(drain_textfile, drain.textfile, "DLQ_BRIDGE_DRAIN_TEXTFILE", "drain-textfile", "", KIND_PATH,  \
    0, 0, "node_exporter textfile (.prom) drain run writes; empty = none")                         \
  X(audit_log, audit.log, "DLQ_BRIDGE_AUDIT_LOG", "audit-log", "", KIND_PATH, 0, 0,                \
    "audit log file; empty = no audit log")                                                        \
  X(audit_key_file, audit.key_file, "DLQ_BRIDGE_AUDIT_KEY_FILE", "audit-key-file", "", KIND_PATH,  \
    0, 0, "Ed25519 private key (PEM) signing this writer's audit records")                         \
  X(audit_public_keys, audit.public_keys, "DLQ_BRIDGE_AUDIT_PUBLIC_KEYS", "audit-public-keys", "", \
    KIND_PATH, 0, 0, "the audit writers' PEM public keys: a file, or a directory of *.pem")        \
  X(audit_rotate_bytes, audit.rotate_bytes, "DLQ_BRIDGE_AUDIT_ROTATE_BYTES", "audit-rotate-bytes", \
    "67108864", KIND_INT, 0, INT_MAX,                                                              \
    "rotate the audit log once it reaches this many bytes; 0 = never")                             \
  X(audit_anchor_interval, audit.anchor_interval_ms, "DLQ_BRIDGE_AUDIT_ANCHOR_INTERVAL",           \
    "audit-anchor-interval", "5s", KIND_DURATION, 0, 0,                                            \
    "publish the audit head to dsr.audit.anchors this often while writing; 0s = never")            \
  X(metrics_addr, metrics_addr, "DLQ_BRIDGE_METRICS_ADDR", "metrics-addr", "127.0.0.1:9464",       \
    KIND_ADDR, 0, 0, "host:port of the metrics endpoint, or off")                                  \
  X(console_addr, console.addr, "DLQ_BRIDGE_CONSOLE_ADDR", "console-addr", "127.0.0.1:9465",       \
    KIND_ADDR, 0, 0, "host:port of the web console (dlq-bridge console)")                          \
  X(console_tls_cert_file, console.tls_cert_file, "DLQ_BRIDGE_CONSOLE_TLS_CERT_FILE",              \
    "console-tls-cert-file", "", KIND_PATH, 0, 0,                                                  \
    "the console's HTTPS certificate (PEM); needed off loopback unless behind a proxy")            \
  X(console_tls_key_file, console.tls_key_file, "DLQ_BRIDGE_CONSOLE_TLS_KEY_FILE",                 \
    "console-tls-key-file", "", KIND_PATH, 0, 0, "the private key of console_tls_cert_file")       \
  X(console_behind_proxy, console.behind_proxy, "DLQ_BRIDGE_CONSOLE_BEHIND_PROXY",                 \
    "console-behind-proxy", "0", KIND_INT, 0, 1,                                                   \
    "1 = a TLS proxy in front of the console: plain HTTP off loopback is allowed")                 \
  X(console_jobs_file, console.jobs_file, "DLQ_BRIDGE_CONSOLE_JOBS_FILE", "console-jobs-file",     \
    "/var/lib/dlq-bridge/console-jobs.json", KIND_PATH, 0, 0,                                      \
    "file where the console keeps its last 64 actions across restarts; empty = memory only")       \
  X(log_format, log.format, "DLQ_BRIDGE_LOG_FORMAT", "log-format", "text", KIND_LOG_FORMAT, 0, 0,  \
    "log line format: text or json")                                                               \
  X(log_level, log.level, "DLQ_BRIDGE_LOG_LEVEL", "log-level", "info", KIND_LOG_LEVEL, 0, 0,       \
    "least severe level logged: error, warn, info or debug")                                       \
  X(instance, instance, "DLQ_BRIDGE_INSTANCE", "instance", "", KIND_NAME, 0, 0,                    \
    "instance name in logs and audit; empty = hostname:pid")

typedef struct {
  setting_kind kind;
  size_t offset; /* of the field in dlqb_config (offsetof into its group) */
  size_t size;   /* of the field; text must be shorter */
  int64_t min;   /* KIND_INT: lowest value; KIND_DURATION: least ms; unused otherwise */
  int64_t max;   /* KIND_INT: highest; KIND_DELAYS: longest delay in ms */
} setting_rule;

#define PUBLIC_ROW(key, field, env, flag, dflt, kind, min, max, help) {#key, env, flag, dflt, help},
#define RULE_ROW(key, field, env, flag, dflt, kind, min, max, help)                                \
  {kind, offsetof(dlqb_config, field), sizeof(((dlqb_config *)0)->field), (min), (max)},

static const dlqb_config_setting settings[] = {
    DLQB_SETTINGS(PUBLIC_ROW){NULL, NULL, NULL, NULL, NULL},
};

static const setting_rule rules[] = {DLQB_SETTINGS(RULE_ROW)};

#define SETTING_COUNT (sizeof rules / sizeof rules[0])

_Static_assert(sizeof settings / sizeof settings[0] == SETTING_COUNT + 1,
               "one public row per rule plus the terminator");
_Static_assert(SETTING_COUNT <= DLQB_CONFIG_MAX_SETTINGS, "set_keys has one bit per setting");

static const char *const log_level_names[] = {"error", "warn", "info", "debug"};

const dlqb_config_setting *dlqb_config_settings(void) { return settings; }

/* ---- small text helpers ---- */

static bool is_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static bool is_control(unsigned char ch) { return ch < 0x20 || ch == 0x7f; }

/* A value as an error quotes it (one short line whatever was pasted). */
static const char *quote(const char *s, char buf[QUOTE_BUF]) {
  return dlqb_text_quote(buf, s, strlen(s));
}

/* Narrows s to its text without surrounding whitespace: [*start, *start+*n). */
static void trim(const char *s, const char **start, size_t *n) {
  const char *end = s + strlen(s);
  while (*s != '\0' && is_space(*s)) {
    s++;
  }
  while (end > s && is_space(end[-1])) {
    end--;
  }
  *start = s;
  *n = (size_t)(end - s);
}

static bool trimmed_equals(const char *s, const char *word) {
  const char *p;
  size_t n;
  trim(s, &p, &n);
  return n == strlen(word) && memcmp(p, word, n) == 0;
}

/* Parses a decimal integer in [min, max] with optional surrounding
 * whitespace. Accumulates negatively so INT64_MIN fits, and stops at the
 * bounds so nothing can overflow. */
static bool parse_int(const char *s, int64_t min, int64_t max, int64_t *out) {
  const char *p;
  size_t n;
  trim(s, &p, &n);
  bool neg = n > 0 && *p == '-';
  size_t i = neg ? 1 : 0;
  int64_t v = 0;
  if (i == n) {
    return false;
  }
  for (; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') {
      return false;
    }
    if (v < (INT64_MIN + (p[i] - '0')) / 10) {
      return false;
    }
    v = v * 10 - (p[i] - '0');
  }
  if (!neg) {
    if (v < -INT64_MAX) {
      return false;
    }
    v = -v;
  }
  if (v < min || v > max) {
    return false;
  }
  *out = v;
  return true;
}

static bool has_prefix(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- one parser per kind; errors name no source, dlqb_config_set adds it ---- */

static dlqb_status check_length(const char *value, const setting_rule *r, const char *shown,
                                dlqb_error *err) {
  char q[QUOTE_BUF];
  if (strlen(value) >= r->size) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is longer than %zu bytes", quote(shown, q),
                     r->size - 1);
  }
  return DLQB_OK;
}

/* Whether the URL's port, when it has one, is 1..65535 in digits: the
 * broker library would otherwise say only "invalid broker url" at connect
 * time, long after the setting could have been named. */
static bool url_port_ok(const char *url) {
  const char *auth = strstr(url, "://") + 3;
  size_t len = strcspn(auth, "/?#");
  const char *host = auth;
  for (size_t i = 0; i < len; i++)
    if (auth[i] == '@') host = auth + i + 1;
  const char *end = auth + len;
  if (host < end && *host == '[') {
    const char *close = memchr(host, ']', (size_t)(end - host));
    if (close == NULL) return false;
    host = close + 1;
  }
  const char *colon = memchr(host, ':', (size_t)(end - host));
  if (colon == NULL) return true;
  char port[8];
  size_t n = (size_t)(end - colon - 1);
  if (n == 0 || n >= sizeof port) return false;
  memcpy(port, colon + 1, n);
  port[n] = '\0';
  for (size_t i = 0; i < n; i++)
    if (port[i] < '0' || port[i] > '9') return false;
  int64_t v;
  return parse_int(port, 1, 65535, &v);
}

static dlqb_status set_url(char *field, const char *value, const setting_rule *r, dlqb_error *err) {
  /* Errors quote the redacted form: a rejected URL may still hold a real
   * password, and error lines end up in logs. */
  char shown[DLQB_CONFIG_STR_MAX];
  char q[QUOTE_BUF];
  dlqb_url_redact(value, shown, sizeof shown);
  dlqb_status st = check_length(value, r, shown, err);
  if (st != DLQB_OK) {
    return st;
  }
  if (!has_prefix(value, "amqp://") && !has_prefix(value, "amqps://")) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' does not start with amqp:// or amqps://",
                     quote(shown, q));
  }
  for (const char *p = value; *p != '\0'; p++) {
    if (is_space(*p) || is_control((unsigned char)*p)) {
      return dlqb_fail(err, DLQB_EINVAL,
                       "'%s' contains a space or control character (percent-encode it)",
                       quote(shown, q));
    }
  }
  if (!url_port_ok(value)) {
    /* The port text is not quoted on its own: with an unencoded '/' in a
     * password it could be part of the password; the redacted URL is safe. */
    return dlqb_fail(err, DLQB_EINVAL, "'%s': the port is not a number from 1 to 65535",
                     quote(shown, q));
  }
  memcpy(field, value, strlen(value) + 1);
  return DLQB_OK;
}

/* Paths are kept verbatim; control characters are refused because they are
 * almost always a pasting accident (a trailing CR) rather than a file name. */
static dlqb_status set_text(char *field, const char *value, const setting_rule *r,
                            dlqb_error *err) {
  char q[QUOTE_BUF];
  dlqb_status st = check_length(value, r, value, err);
  if (st != DLQB_OK) {
    return st;
  }
  for (const char *p = value; *p != '\0'; p++) {
    unsigned char ch = (unsigned char)*p;
    if (is_control(ch) || (r->kind == KIND_NAME && ch >= 0x80)) {
      return dlqb_fail(err, DLQB_EINVAL, "'%s' contains a %s character", quote(value, q),
                       r->kind == KIND_NAME ? "non-printable or non-ascii" : "control");
    }
  }
  memcpy(field, value, strlen(value) + 1);
  return DLQB_OK;
}

static dlqb_status set_int(int *field, const char *value, const setting_rule *r, dlqb_error *err) {
  char q[QUOTE_BUF];
  int64_t v = 0;
  if (!parse_int(value, r->min, r->max, &v)) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is not an integer from %" PRId64 " to %" PRId64,
                     quote(value, q), r->min, r->max);
  }
  *field = (int)v;
  return DLQB_OK;
}

static dlqb_status set_duration(uint64_t *field, const char *value, const setting_rule *r,
                                dlqb_error *err) {
  char q[QUOTE_BUF];
  uint64_t ms = 0;
  dlqb_status st = dlqb_duration_parse(value, &ms, err);
  if (st != DLQB_OK) {
    return st;
  }
  if (ms < (uint64_t)r->min) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' must be greater than zero", quote(value, q));
  }
  *field = ms;
  return DLQB_OK;
}

static dlqb_status set_delays(dlqb_config *c, const char *value, const setting_rule *r,
                              dlqb_error *err) {
  uint64_t delays[DLQB_MAX_RETRY_DELAYS];
  size_t count = 0;
  dlqb_status st = dlqb_duration_parse_list(value, delays, DLQB_MAX_RETRY_DELAYS, &count, err);
  if (st != DLQB_OK) {
    return st;
  }
  for (size_t i = 0; i < count; i++) {
    if (delays[i] > (uint64_t)r->max) {
      /* The limit is a whole number of hours, and "24h" reads better than the
       * "1d" that the shortest format would give. */
      char got[32];
      return dlqb_fail(err, DLQB_EINVAL, "delay %zu (%s) is longer than %" PRId64 "h", i + 1,
                       dlqb_duration_format(delays[i], got, sizeof got), r->max / MS_PER_HOUR);
    }
  }
  memcpy(c->policy.retry_delays_ms, delays, count * sizeof delays[0]);
  c->policy.retry_delay_count = count;
  return DLQB_OK;
}

/* Checks "host:port": the port after the last ':' in 1..65535 (digits
 * only), the host non-empty, and an IPv6 host in brackets. */
static bool valid_addr(const char *value) {
  const char *colon = strrchr(value, ':');
  int64_t port = 0;
  if (colon == NULL || colon == value || colon[1] == '\0') {
    return false;
  }
  for (const char *p = colon + 1; *p != '\0'; p++) {
    if (*p < '0' || *p > '9') {
      return false;
    }
  }
  if (!parse_int(colon + 1, 1, 65535, &port)) {
    return false;
  }
  size_t host_len = (size_t)(colon - value);
  bool bracketed = value[0] == '[';
  if (bracketed && (host_len < 3 || value[host_len - 1] != ']')) {
    return false;
  }
  for (size_t i = 0; i < host_len; i++) {
    unsigned char ch = (unsigned char)value[i];
    if (is_space((char)ch) || is_control(ch) || (!bracketed && ch == ':')) {
      return false;
    }
  }
  return true;
}

static dlqb_status set_addr(char *field, const char *value, const setting_rule *r,
                            dlqb_error *err) {
  char q[QUOTE_BUF];
  if (value[0] == '\0' || strcmp(value, "off") == 0) {
    field[0] = '\0';
    return DLQB_OK;
  }
  dlqb_status st = check_length(value, r, value, err);
  if (st != DLQB_OK) {
    return st;
  }
  if (!valid_addr(value)) {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is not host:port with a port from 1 to 65535, or off",
                     quote(value, q));
  }
  memcpy(field, value, strlen(value) + 1);
  return DLQB_OK;
}

static dlqb_status set_log_format(dlqb_log_format *field, const char *value, dlqb_error *err) {
  char q[QUOTE_BUF];
  if (trimmed_equals(value, "text")) {
    *field = DLQB_LOG_TEXT;
  } else if (trimmed_equals(value, "json")) {
    *field = DLQB_LOG_JSON;
  } else {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is not a log format (use text or json)",
                     quote(value, q));
  }
  return DLQB_OK;
}

static dlqb_status set_queue_type(bool *classic, const char *value, dlqb_error *err) {
  char q[QUOTE_BUF];
  if (trimmed_equals(value, "quorum")) {
    *classic = false;
  } else if (trimmed_equals(value, "classic")) {
    *classic = true;
  } else {
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is not a queue type (use quorum or classic)",
                     quote(value, q));
  }
  return DLQB_OK;
}

static dlqb_status set_log_level(int *field, const char *value, dlqb_error *err) {
  char q[QUOTE_BUF];
  for (size_t i = 0; i < sizeof log_level_names / sizeof log_level_names[0]; i++) {
    if (trimmed_equals(value, log_level_names[i])) {
      *field = (int)i;
      return DLQB_OK;
    }
  }
  return dlqb_fail(err, DLQB_EINVAL, "'%s' is not a log level (use error, warn, info or debug)",
                   quote(value, q));
}

/* A list of broker users, "a, b" kept as "a,b": each name trimmed, none
 * empty, no control characters; blank means none. A name cannot hold a
 * comma here (RabbitMQ allows one; such a user cannot be listed). */
static dlqb_status set_users(char *field, const char *value, const setting_rule *r,
                             dlqb_error *err) {
  char q[QUOTE_BUF];
  char list[DLQB_CONFIG_STR_MAX];
  size_t used = 0;
  dlqb_status st = check_length(value, r, value, err);
  if (st != DLQB_OK) {
    return st;
  }
  const char *p;
  size_t n;
  trim(value, &p, &n);
  if (n == 0) {
    field[0] = '\0';
    return DLQB_OK;
  }
  for (size_t item = 1;; item++) {
    const char *comma = memchr(p, ',', n);
    size_t len = comma != NULL ? (size_t)(comma - p) : n;
    const char *name = p;
    while (len > 0 && is_space(*name)) {
      name++;
      len--;
    }
    while (len > 0 && is_space(name[len - 1])) {
      len--;
    }
    if (len == 0) {
      return dlqb_fail(err, DLQB_EINVAL, "'%s': user %zu of the list is empty", quote(value, q),
                       item);
    }
    for (size_t i = 0; i < len; i++) {
      if (is_control((unsigned char)name[i])) {
        return dlqb_fail(err, DLQB_EINVAL, "'%s' contains a control character", quote(value, q));
      }
    }
    if (used > 0) {
      list[used++] = ',';
    }
    memcpy(list + used, name, len);
    used += len;
    if (comma == NULL) {
      break;
    }
    n -= (size_t)(comma + 1 - p);
    p = comma + 1;
  }
  list[used] = '\0';
  memcpy(field, list, used + 1);
  return DLQB_OK;
}

/* Parses value into its field; on failure the field is untouched. */
static dlqb_status set_by_rule(dlqb_config *c, const setting_rule *r, const char *value,
                               dlqb_error *err) {
  char *field = (char *)c + r->offset;
  switch (r->kind) {
  case KIND_URL: return set_url(field, value, r, err);
  case KIND_PATH:
  case KIND_NAME: return set_text(field, value, r, err);
  case KIND_INT: return set_int((int *)(void *)field, value, r, err);
  case KIND_DURATION: return set_duration((uint64_t *)(void *)field, value, r, err);
  case KIND_DELAYS: return set_delays(c, value, r, err);
  case KIND_ADDR: return set_addr(field, value, r, err);
  case KIND_LOG_FORMAT: return set_log_format((dlqb_log_format *)(void *)field, value, err);
  case KIND_LOG_LEVEL: return set_log_level((int *)(void *)field, value, err);
  case KIND_QUEUE_TYPE: return set_queue_type((bool *)(void *)field, value, err);
  case KIND_USERS: return set_users(field, value, r, err);
  case KIND_DEADLINES: return dlqb_deadlines_parse(value, (dlqb_deadlines *)(void *)field, err);
  }
  return dlqb_fail(err, DLQB_EINVAL, "internal error: unknown setting kind");
}

static long find_key(const char *key) {
  for (size_t i = 0; key != NULL && i < SETTING_COUNT; i++) {
    if (strcmp(settings[i].key, key) == 0) {
      return (long)i;
    }
  }
  return -1;
}

long dlqb_config_key_index(const char *key) { return find_key(key); }

/* A key as it would be typed for the table: lower case, '-' as '_', no
 * "dlq_bridge_" prefix (an environment variable or a flag typed as a key).
 * False when it does not fit buf. */
static bool normalise_key(const char *key, char *buf, size_t len) {
  size_t n = strlen(key);
  if (n >= len) {
    return false;
  }
  for (size_t i = 0; i <= n; i++) {
    char ch = key[i];
    buf[i] = ch == '-' ? '_' : (ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch);
  }
  static const char prefix[] = "dlq_bridge_";
  if (strncmp(buf, prefix, sizeof prefix - 1) == 0) {
    memmove(buf, buf + sizeof prefix - 1, n - (sizeof prefix - 1) + 1);
  }
  return true;
}

const char *dlqb_config_closest_key(const char *key) {
  char norm[64];
  if (key == NULL || !normalise_key(key, norm, sizeof norm)) {
    return NULL;
  }
  const char *best = NULL;
  size_t best_d = 0;
  for (size_t i = 0; i < SETTING_COUNT; i++) {
    const char *k = settings[i].key;
    if (strcmp(norm, k) == 0) {
      return k;
    }
    size_t limit = strlen(k) >= 12 ? 3 : 2;
    size_t d = dlqb_text_distance(norm, k);
    if (d <= limit && (best == NULL || d < best_d)) {
      best = k;
      best_d = d;
    }
  }
  return best;
}

char *dlqb_config_value_text(const dlqb_config *c, long index, char *buf, size_t len) {
  if (buf == NULL || len == 0) {
    return buf;
  }
  buf[0] = '\0';
  if (c == NULL || index < 0 || (size_t)index >= SETTING_COUNT) {
    return buf;
  }
  const setting_rule *r = &rules[index];
  const char *field = (const char *)c + r->offset;
  switch (r->kind) {
  case KIND_URL: dlqb_url_redact(field, buf, len); break;
  case KIND_PATH:
  case KIND_NAME:
  case KIND_USERS: snprintf(buf, len, "%s", field); break;
  case KIND_ADDR: snprintf(buf, len, "%s", field[0] != '\0' ? field : "off"); break;
  case KIND_INT: snprintf(buf, len, "%d", *(const int *)(const void *)field); break;
  case KIND_DURATION: dlqb_duration_format(*(const uint64_t *)(const void *)field, buf, len); break;
  case KIND_DELAYS: {
    size_t used = 0;
    for (size_t i = 0; i < c->policy.retry_delay_count && used + 1 < len; i++) {
      char one[32];
      dlqb_duration_format(c->policy.retry_delays_ms[i], one, sizeof one);
      int n = snprintf(buf + used, len - used, "%s%s", i > 0 ? "," : "", one);
      used = n > 0 ? used + (size_t)n : used;
    }
    break;
  }
  case KIND_DEADLINES:
    dlqb_deadlines_format((const dlqb_deadlines *)(const void *)field, buf, len);
    break;
  case KIND_LOG_FORMAT:
    snprintf(buf, len, "%s",
             *(const dlqb_log_format *)(const void *)field == DLQB_LOG_JSON ? "json" : "text");
    break;
  case KIND_QUEUE_TYPE:
    snprintf(buf, len, "%s", *(const bool *)(const void *)field ? "classic" : "quorum");
    break;
  case KIND_LOG_LEVEL: {
    int level = *(const int *)(const void *)field;
    snprintf(buf, len, "%s", level >= 0 && level <= 3 ? log_level_names[level] : "?");
    break;
  }
  }
  return buf;
}

const char *dlqb_config_file_choice(const char *flag, const char *env, bool *required) {
  const char *path = flag != NULL ? flag : (env != NULL ? env : NULL);
  *required = path != NULL && path[0] != '\0';
  if (path == NULL) {
    return DLQB_CONFIG_DEFAULT_PATH;
  }
  return path[0] != '\0' ? path : NULL;
}

/* ---- public API ---- */

void dlqb_config_defaults(dlqb_config *c) {
  memset(c, 0, sizeof *c);
  /* The documented default texts are the defaults: they go through the same
   * parser as user input (the unit tests check that they all parse). */
  for (size_t i = 0; i < SETTING_COUNT; i++) {
    (void)set_by_rule(c, &rules[i], settings[i].dflt, NULL);
  }
}

dlqb_status dlqb_config_set(dlqb_config *c, const char *key, const char *value,
                            const char *source_name, dlqb_error *err) {
  char q[QUOTE_BUF];
  const char *src = source_name != NULL ? source_name : (key != NULL ? key : "config");
  long i = find_key(key);
  if (c == NULL) {
    return dlqb_fail(err, DLQB_EINVAL, "%s: no config to set", src);
  }
  if (i < 0) {
    return dlqb_fail(err, DLQB_EINVAL, "%s: unknown setting '%s'", src,
                     quote(key != NULL ? key : "", q));
  }
  if (value == NULL) {
    return dlqb_fail(err, DLQB_EINVAL, "%s: no value given", src);
  }
  dlqb_error detail;
  dlqb_status st = set_by_rule(c, &rules[i], value, &detail);
  if (st != DLQB_OK) {
    return dlqb_fail(err, st, "%s: %s", src, detail.msg);
  }
  return DLQB_OK;
}

static const char *json_type_phrase(enum json_type t) {
  switch (t) {
  case json_type_null: return "null";
  case json_type_boolean: return "a boolean";
  case json_type_double: return "a fractional number";
  case json_type_int: return "an integer";
  case json_type_object: return "an object";
  case json_type_array: return "an array";
  case json_type_string: return "a string";
  }
  return "an unknown json value";
}

static const char *json_expected_phrase(setting_kind kind) {
  switch (kind) {
  case KIND_INT: return "an integer or a string";
  case KIND_DELAYS: return "a string or an array of strings";
  case KIND_ADDR: return "a string or false";
  default: return "a string";
  }
}

/* JSON strings may hold "\u0000", which C text would silently cut short. */
static bool json_string_has_nul(json_object *v) {
  return strlen(json_object_get_string(v)) != (size_t)json_object_get_string_len(v);
}

/* Joins an array of duration strings with commas, so ["1s", "5s"] means
 * the same as "1s,5s". */
static dlqb_status join_delays(json_object *arr, char *buf, size_t len, const char *src,
                               dlqb_error *err) {
  size_t n = json_object_array_length(arr);
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    json_object *item = json_object_array_get_idx(arr, i);
    if (!json_object_is_type(item, json_type_string) || json_string_has_nul(item)) {
      return dlqb_fail(err, DLQB_EINVAL, "%s: item %zu of the array is not a plain string", src,
                       i + 1);
    }
    const char *s = json_object_get_string(item);
    size_t need = strlen(s) + (i > 0 ? 1 : 0);
    if (used + need >= len) {
      return dlqb_fail(err, DLQB_EINVAL, "%s: the list is longer than %zu bytes", src, len - 1);
    }
    if (i > 0) {
      buf[used++] = ',';
    }
    memcpy(buf + used, s, strlen(s) + 1);
    used += strlen(s);
  }
  return DLQB_OK;
}

static dlqb_status apply_member(dlqb_config *c, const char *key, json_object *v, dlqb_error *err) {
  char q[QUOTE_BUF];
  char src[QUOTE_BUF + 8];
  long i = find_key(key);
  if (i < 0 && strcmp(key, "pipelines") == 0) {
    return dlqb__config_apply_pipelines(c, v, err);
  }
  if (i < 0) {
    const char *near = dlqb_config_closest_key(key);
    if (near != NULL) {
      return dlqb_fail(err, DLQB_EINVAL, "unknown key '%s' (did you mean '%s'?)", quote(key, q),
                       near);
    }
    return dlqb_fail(err, DLQB_EINVAL,
                     "unknown key '%s' (the keys are listed by 'dlq-bridge help settings')",
                     quote(key, q));
  }
  snprintf(src, sizeof src, "key '%s'", key);
  return dlqb__config_apply_member(c, key, v, src, err);
}

/* Applies one member of a known setting key, errors named by src (the key
 * as the file spells it: "key 'pipelines.x.max_attempts'"). */
dlqb_status dlqb__config_apply_member(dlqb_config *c, const char *key, json_object *v,
                                      const char *src, dlqb_error *err) {
  long i = find_key(key);
  if (i < 0) {
    return dlqb_fail(err, DLQB_EINVAL, "%s: not a setting", src);
  }
  const setting_rule *r = &rules[i];
  enum json_type t = json_object_get_type(v);
  if (t == json_type_string) {
    if (json_string_has_nul(v)) {
      return dlqb_fail(err, DLQB_EINVAL, "%s: the string contains a nul character", src);
    }
    return dlqb_config_set(c, key, json_object_get_string(v), src, err);
  }
  if (t == json_type_int && r->kind == KIND_INT) {
    char num[32];
    snprintf(num, sizeof num, "%" PRId64, json_object_get_int64(v));
    return dlqb_config_set(c, key, num, src, err);
  }
  if (t == json_type_boolean && r->kind == KIND_ADDR && !json_object_get_boolean(v)) {
    return dlqb_config_set(c, key, "off", src, err);
  }
  if (t == json_type_array && r->kind == KIND_DELAYS) {
    char list[DLQB_CONFIG_STR_MAX];
    dlqb_status st = join_delays(v, list, sizeof list, src, err);
    return st != DLQB_OK ? st : dlqb_config_set(c, key, list, src, err);
  }
  return dlqb_fail(err, DLQB_EINVAL, "%s: expected %s, got %s", src, json_expected_phrase(r->kind),
                   json_type_phrase(t));
}

static dlqb_status apply_object(dlqb_config *c, json_object *root, uint64_t *set_keys,
                                dlqb_error *err) {
  struct json_object_iterator it = json_object_iter_begin(root);
  struct json_object_iterator end = json_object_iter_end(root);
  for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
    const char *key = json_object_iter_peek_name(&it);
    dlqb_status st = apply_member(c, key, json_object_iter_peek_value(&it), err);
    if (st != DLQB_OK) {
      return st;
    }
    long i = find_key(key);
    if (i >= 0) { /* `pipelines` is not a row of the table */
      *set_keys |= UINT64_C(1) << i;
    }
  }
  return DLQB_OK;
}

static int line_of(const char *text, size_t offset) {
  int line = 1;
  for (size_t i = 0; i < offset; i++) {
    line += text[i] == '\n';
  }
  return line;
}

/* Parses text[0..len) as one JSON value followed only by whitespace. */
static dlqb_status parse_json(const char *text, size_t len, json_object **out, dlqb_error *err) {
  json_tokener *tok = json_tokener_new();
  if (tok == NULL) {
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory parsing json");
  }
  /* Strict: no trailing commas, single quotes or bare words, so a file that
   * other tools reject is not quietly accepted here. */
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
  json_object *root = json_tokener_parse_ex(tok, text, (int)len);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  size_t end = json_tokener_get_parse_end(tok);
  if (jerr == json_tokener_continue) {
    /* The end of input ends a top-level number; feeding the terminator
     * tells the tokener so, and anything else still open is truncation. */
    root = json_tokener_parse_ex(tok, "", 1);
    jerr = json_tokener_get_error(tok);
    end = len;
  }
  dlqb_status st = DLQB_OK;
  if (jerr != json_tokener_success) {
    st = dlqb_fail(err, DLQB_EINVAL, "not valid json at line %d: %s", line_of(text, end),
                   json_tokener_error_desc(jerr));
  } else {
    while (end < len && is_space(text[end])) {
      end++;
    }
    if (end < len) {
      st = dlqb_fail(err, DLQB_EINVAL, "not valid json at line %d: unexpected text after the value",
                     line_of(text, end));
    }
  }
  json_tokener_free(tok);
  if (st != DLQB_OK) {
    json_object_put(root);
    return st;
  }
  *out = root;
  return DLQB_OK;
}

dlqb_status dlqb_config_apply_json(dlqb_config *c, const char *text, size_t len, dlqb_error *err) {
  return dlqb_config_apply_json_keys(c, text, len, NULL, err);
}

dlqb_status dlqb_config_apply_json_keys(dlqb_config *c, const char *text, size_t len,
                                        uint64_t *set_keys, dlqb_error *err) {
  json_object *root = NULL;
  if (c == NULL || (text == NULL && len > 0)) {
    return dlqb_fail(err, DLQB_EINVAL, "no config text given");
  }
  if (len > (size_t)INT_MAX) {
    return dlqb_fail(err, DLQB_EINVAL, "the config is too large");
  }
  const char *p = text;
  size_t n = len;
  while (n > 0 && is_space(*p)) {
    p++;
    n--;
  }
  if (n == 0) {
    return dlqb_fail(err, DLQB_EINVAL, "the config is empty (expected a json object)");
  }
  dlqb_status st = parse_json(text, len, &root, err);
  if (st != DLQB_OK) {
    return st;
  }
  if (!json_object_is_type(root, json_type_object)) {
    st = dlqb_fail(err, DLQB_EINVAL, "the top level is %s, not a json object",
                   json_type_phrase(json_object_get_type(root)));
  } else {
    /* Apply to a copy so a bad member leaves c as it was. */
    dlqb_config *work = dlqb_config_copy(c);
    uint64_t keys = 0;
    st = work == NULL ? dlqb_fail(err, DLQB_ENOMEM, "out of memory")
                      : apply_object(work, root, &keys, err);
    if (st == DLQB_OK) {
      dlqb_config_take(c, work);
      if (set_keys != NULL) {
        *set_keys = keys;
      }
    } else {
      dlqb_config_free(work);
    }
  }
  json_object_put(root);
  return st;
}

const char *dlqb_config_getenv(const char *name) { return getenv(name); }

dlqb_config *dlqb_config_copy(const dlqb_config *c) {
  dlqb_config *out = malloc(sizeof *out);
  if (out != NULL) memcpy(out, c, sizeof *out);
  return out;
}

void dlqb_config_free(dlqb_config *c) {
  if (c == NULL) return;
  explicit_bzero(c, sizeof *c);
  free(c);
}

void dlqb_config_take(dlqb_config *c, dlqb_config *trial) {
  memcpy(c, trial, sizeof *c);
  dlqb_config_free(trial);
}

const dlqb_broker_conf *dlqb_config_broker(const dlqb_config *c, const dlqb_broker_conf *broker) {
  return broker != NULL ? broker : &c->broker;
}

bool dlqb_config_is_completion_writer(const dlqb_config *c, const char *user, size_t len) {
  return dlqb_user_listed(c->ledger.completion_writers, user, len);
}

bool dlqb_user_listed(const char *list, const char *user, size_t len) {
  const char *p = list;
  while (*p != '\0') {
    size_t n = strcspn(p, ",");
    if (n == len && len > 0 && memcmp(p, user, len) == 0) {
      return true;
    }
    p += n + (p[n] == ',');
  }
  return false;
}

dlqb_status dlqb_config_apply_env(dlqb_config *c, const char *(*lookup)(const char *name),
                                  dlqb_error *err) {
  if (c == NULL || lookup == NULL) {
    return dlqb_fail(err, DLQB_EINVAL, "no config or environment lookup given");
  }
  /* Apply to a copy so a bad variable leaves c as it was. */
  dlqb_config *work = dlqb_config_copy(c);
  if (work == NULL) {
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < SETTING_COUNT; i++) {
    const char *value = lookup(settings[i].env);
    if (value != NULL) {
      dlqb_status st = dlqb_config_set(work, settings[i].key, value, settings[i].env, err);
      if (st != DLQB_OK) {
        dlqb_config_free(work);
        return st;
      }
    }
  }
  dlqb_config_take(c, work);
  return DLQB_OK;
}

const dlqb_config_setting *dlqb_config_find_flag(const char *flag) {
  for (size_t i = 0; flag != NULL && i < SETTING_COUNT; i++) {
    if (strcmp(settings[i].flag, flag) == 0) {
      return &settings[i];
    }
  }
  return NULL;
}

dlqb_status dlqb_config_validate(const dlqb_config *c, dlqb_error *err) {
  if (c == NULL) {
    return dlqb_fail(err, DLQB_EINVAL, "no config given");
  }
  bool cert = c->broker.tls_cert_file[0] != '\0';
  bool key = c->broker.tls_key_file[0] != '\0';
  if ((c->broker.tls_ca_file[0] != '\0' || cert || key) && !has_prefix(c->broker.url, "amqps://")) {
    return dlqb_fail(err, DLQB_EINVAL, "tls files are set but the url is not amqps://");
  }
  for (size_t i = 0; i < c->pipeline_count; i++) {
    const char *u = c->pipelines[i].url;
    if (u[0] == '\0') continue;
    if ((c->broker.tls_ca_file[0] != '\0' || cert || key) && !has_prefix(u, "amqps://"))
      return dlqb_fail(err, DLQB_EINVAL, "tls files are set but pipelines.%s.url is not amqps://",
                       c->pipelines[i].p.name);
  }
  if (cert != key) {
    return dlqb_fail(err, DLQB_EINVAL, "tls_cert_file and tls_key_file must be given together");
  }
  /* A group id that is not one would silently match nothing. */
  for (const char *p = c->drain.groups; *p != '\0';) {
    const char *end = strchr(p, ',');
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    char id[DLQB_GROUP_ID_BUF + 1];
    if (n > DLQB_GROUP_ID_LEN) n = DLQB_GROUP_ID_LEN + 1;
    memcpy(id, p, n);
    id[n] = '\0';
    if (!dlqb_group_id_valid(id)) {
      return dlqb_fail(err, DLQB_EINVAL,
                       "drain_groups: '%.16s' is not a group id (12 hex digits, as stats --by "
                       "group shows)",
                       id);
    }
    p = end != NULL ? end + 1 : p + strlen(p);
  }
  /* A ramp that starts above its ceiling would never ramp. */
  if (c->drain.start_rate > c->drain.max_rate) {
    return dlqb_fail(err, DLQB_EINVAL, "drain_start_rate (%d) is above drain_max_rate (%d)",
                     c->drain.start_rate, c->drain.max_rate);
  }
  if ((c->console.tls_cert_file[0] != '\0') != (c->console.tls_key_file[0] != '\0'))
    return dlqb_fail(err, DLQB_EINVAL,
                     "console_tls_cert_file and console_tls_key_file must be given together");
  /* audit_log without audit_key_file is valid here: the readers (audit
   * verify, show) need only audit_public_keys; a writer's open refuses it. */
  return DLQB_OK;
}

/* ---- URL redaction ---- */

static const char *last_at(const char *s, const char *end) {
  const char *found = NULL;
  for (const char *p = s; p < end; p++) {
    if (*p == '@') {
      found = p;
    }
  }
  return found;
}

static bool all_digits(const char *s, const char *end) {
  if (s == end) {
    return false;
  }
  for (const char *p = s; p < end; p++) {
    if (*p < '0' || *p > '9') {
      return false;
    }
  }
  return true;
}

/* Finds the password in url as [*pw, *pw_end); false when there is none.
 * The userinfo normally ends at the last '@' before the path. A password
 * with an unencoded '/', '?' or '#' would hide that '@' in the "path", so
 * when the authority has a ':' not followed by a port and an '@' comes
 * later, everything up to the last '@' is taken as userinfo: hiding too much
 * is better than leaking part of a password. */
static bool find_password(const char *url, const char **pw, const char **pw_end) {
  const char *scheme_end = strstr(url, "://");
  const char *auth = scheme_end != NULL ? scheme_end + 3 : url;
  const char *auth_end = auth + strcspn(auth, "/?#");
  const char *at = last_at(auth, auth_end);
  if (at == NULL) {
    const char *colon = memchr(auth, ':', (size_t)(auth_end - auth));
    if (colon == NULL || all_digits(colon + 1, auth_end)) {
      return false;
    }
    at = last_at(auth_end, auth_end + strlen(auth_end));
    if (at == NULL) {
      return false;
    }
  }
  const char *colon = memchr(auth, ':', (size_t)(at - auth));
  if (colon == NULL || colon + 1 == at) {
    return false;
  }
  *pw = colon + 1;
  *pw_end = at;
  return true;
}

bool dlqb_config_url_has_password(const char *url) {
  const char *pw = NULL;
  const char *pw_end = NULL;
  return url != NULL && find_password(url, &pw, &pw_end);
}

char *dlqb_url_redact(const char *url, char *buf, size_t len) {
  const char *pw = NULL;
  const char *pw_end = NULL;
  if (buf == NULL || len == 0) {
    return buf;
  }
  if (url == NULL) {
    buf[0] = '\0';
    return buf;
  }
  if (!find_password(url, &pw, &pw_end)) {
    snprintf(buf, len, "%s", url);
    return buf;
  }
  /* Truncation may cut the "***" but can never expose the password. */
  snprintf(buf, len, "%.*s***%s", (int)(pw - url), url, pw_end);
  return buf;
}

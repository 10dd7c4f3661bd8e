/* Settings of the bridge and its commands, described once in a table
 * (name, environment variable, flag, type, bounds, default) from which
 * defaults, parsing, validation, --help text and the reference docs follow.
 *
 * Precedence, lowest first: built-in default, JSON config file, environment,
 * command-line flag. Loading is pure apart from reading the file and the
 * environment lookups the caller passes in. */
#ifndef DLQB_CONFIG_H
#define DLQB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/deadline.h"
#include "dlqb/error.h"

#define DLQB_MAX_RETRY_DELAYS 16
#define DLQB_CONFIG_STR_MAX 1024

typedef enum { DLQB_LOG_TEXT, DLQB_LOG_JSON } dlqb_log_format;

typedef struct {
  char url[DLQB_CONFIG_STR_MAX];           /* amqp:// or amqps:// */
  char password_file[DLQB_CONFIG_STR_MAX]; /* "" = password from the URL */
  char tls_ca_file[DLQB_CONFIG_STR_MAX];
  char tls_cert_file[DLQB_CONFIG_STR_MAX];
  char tls_key_file[DLQB_CONFIG_STR_MAX];
  int max_attempts;     /* default max_attempts for envelopes without one */
  int poison_threshold; /* consumer crashes before the broker dead-letters */
  uint64_t retry_delays_ms[DLQB_MAX_RETRY_DELAYS];
  size_t retry_delay_count;  /* >= 1; the last delay repeats */
  int retry_jitter_percent;  /* 0..90: a delay d becomes uniform in [d*(1-j), d] */
  uint64_t sla_budget_ms;    /* a retry may not land past first_seen_at + this */
  int prefetch;              /* in-flight window of the router */
  uint64_t startup_wait_ms;  /* run retries its first contact this long; 0 = exit */
  uint64_t dlq_sla_ms;       /* DLQ items older than this are escalated */
  int max_replays;           /* failures after this many replays escalate */
  dlqb_deadlines deadlines;  /* statutory deadline per legal basis; n 0 = none */
  char ledger_cache[DLQB_CONFIG_STR_MAX];   /* "" = replay reads the ledger whole */
  /* Broker users whose ledger entries count as completions, as "a,b"
   * (trimmed, none empty); "" = none, so replay re-runs every task. */
  char completion_writers[DLQB_CONFIG_STR_MAX];
  char audit_log[DLQB_CONFIG_STR_MAX];      /* "" = audit off */
  char audit_key_file[DLQB_CONFIG_STR_MAX];    /* this writer's Ed25519 private key */
  char audit_public_keys[DLQB_CONFIG_STR_MAX]; /* the writers' public keys: file or dir */
  int audit_rotate_bytes;   /* rotate the audit log past this size; 0 = never */
  char metrics_addr[DLQB_CONFIG_STR_MAX];   /* host:port, "" = off */
  char console_addr[DLQB_CONFIG_STR_MAX];   /* the web console's host:port */
  char console_tls_cert_file[DLQB_CONFIG_STR_MAX]; /* "" = plain HTTP (loopback or proxy) */
  char console_tls_key_file[DLQB_CONFIG_STR_MAX];
  int console_behind_proxy; /* 1: plain HTTP off loopback is the operator's choice */
  dlqb_log_format log_format;
  int log_level;            /* 0 error, 1 warn, 2 info, 3 debug */
  char instance[256];       /* bridge instance name in logs and audit */
} dlqb_config;

/* One row of the settings table; exposed for --help and the docs test. */
typedef struct {
  const char *key;     /* JSON config key, e.g. "max_attempts" */
  const char *env;     /* environment variable, e.g. "DLQ_BRIDGE_MAX_ATTEMPTS" */
  const char *flag;    /* long flag without dashes, e.g. "max-attempts" */
  const char *dflt;    /* default as text, as documented */
  const char *help;    /* one line */
} dlqb_config_setting;

/* The settings table, terminated by a row with key == NULL. */
const dlqb_config_setting *dlqb_config_settings(void);

/* Fills c with the built-in defaults (the table's default texts, parsed).
 * Never fails. */
void dlqb_config_defaults(dlqb_config *c);

/* Sets one setting by its JSON key from text, validating type and bounds.
 * The error names the setting by `source_name` (an env var, a flag or a
 * key: the name the user typed), e.g. "--max-attempts: '0' is not an
 * integer from 1 to 1000"; a rejected URL is quoted redacted. Integers are
 * decimal with optional surrounding whitespace; text longer than its field
 * is an error, never truncated. On failure c is unchanged. */
dlqb_status dlqb_config_set(dlqb_config *c, const char *key, const char *value,
                            const char *source_name, dlqb_error *err);

/* Applies a JSON object's members (text of len bytes). Unknown keys, wrong
 * JSON types and bad values are errors naming the key ("key 'prefetch':
 * ..."). Numbers may be JSON numbers or strings; durations are strings;
 * retry_delays may also be an array of strings; metrics_addr may be false
 * (off). On failure c is unchanged. */
dlqb_status dlqb_config_apply_json(dlqb_config *c, const char *text, size_t len,
                                   dlqb_error *err);

/* Reads and applies a JSON config file (at most 1 MiB). Errors start with
 * "config file 'PATH': ". On failure c is unchanged. */
dlqb_status dlqb_config_apply_file(dlqb_config *c, const char *path, dlqb_error *err);

/* Applies every setting whose environment variable lookup(name) returns
 * non-NULL (an empty value counts as set). Pass dlqb_config_getenv for the
 * real environment. Errors name the variable. On failure c is unchanged. */
dlqb_status dlqb_config_apply_env(dlqb_config *c, const char *(*lookup)(const char *name),
                                  dlqb_error *err);

/* getenv with the const-returning signature apply_env takes (getenv itself
 * returns char * and so does not convert without a warning). */
const char *dlqb_config_getenv(const char *name);

/* True when user (len bytes, not NUL-terminated: an AMQP user_id) is one
 * of c->completion_writers, compared byte for byte. */
bool dlqb_config_is_completion_writer(const dlqb_config *c, const char *user, size_t len);

/* Finds the setting whose flag is `flag` (without dashes); NULL if none. */
const dlqb_config_setting *dlqb_config_find_flag(const char *flag);

/* Checks cross-setting rules (e.g. TLS files only with amqps://, cert and key
 * together). Call after all sources are applied. */
dlqb_status dlqb_config_validate(const dlqb_config *c, dlqb_error *err);

/* Copies url into buf (NUL-terminated, truncated to len) with any password
 * replaced by "***": "amqp://u:secret@h/vh" -> "amqp://u:***@h/vh". Any
 * input is safe; when a password holds an unencoded '/', '?' or '#', more
 * than the password is hidden rather than part of it shown. Returns buf. */
char *dlqb_url_redact(const char *url, char *buf, size_t len);

#endif

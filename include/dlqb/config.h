/* Settings of the bridge and its commands, described once in a table
 * (name, environment variable, flag, type, bounds, default) from which
 * defaults, parsing, validation, --help text and the reference docs follow.
 *
 * Precedence, lowest first: built-in default, JSON config file, environment,
 * command-line flag. Loading is pure apart from the environment lookups the
 * caller passes in; reading the file is dlqb_config_load_file (config_file.h,
 * in os). */
#ifndef DLQB_CONFIG_H
#define DLQB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/deadline.h"
#include "dlqb/error.h"
#include "dlqb/pipeline.h" /* DLQB_MAX_RETRY_DELAYS, the pipelines */

#define DLQB_CONFIG_STR_MAX 1024

typedef enum { DLQB_LOG_TEXT, DLQB_LOG_JSON } dlqb_log_format;

/* The config is grouped as nginx groups a module's settings: one struct
 * per concern, each member named by `offsetof` in the settings table
 * (config.c), so parsing, defaults and --help still follow from one row.
 * A group's members are named after their setting without its group's
 * prefix (audit_log -> audit.log). A connection takes the broker part
 * alone (dlqb_link_open), and what connects on someone's behalf takes it
 * beside the config (NULL: the config's own, dlqb_config_broker): the
 * console's per-user override is a dlqb_broker_conf, not a whole config. */

/* Where and as whom to connect: the broker part. */
typedef struct {
  char url[DLQB_CONFIG_STR_MAX];           /* amqp:// or amqps:// */
  char password_file[DLQB_CONFIG_STR_MAX]; /* "" = password from the URL */
  char tls_ca_file[DLQB_CONFIG_STR_MAX];
  char tls_cert_file[DLQB_CONFIG_STR_MAX];
  char tls_key_file[DLQB_CONFIG_STR_MAX];
} dlqb_broker_conf;

/* replay's completion ledger. */
typedef struct {
  char cache[DLQB_CONFIG_STR_MAX]; /* "" = replay reads the ledger whole */
  /* Broker users whose ledger entries count as completions, as "a,b"
   * (trimmed, none empty); "" = none, so replay re-runs every task. */
  char completion_writers[DLQB_CONFIG_STR_MAX];
} dlqb_ledger_conf;

/* The catalog (dlqb/catalog.h). */
typedef struct {
  /* A look's checkpoint of the fold: a file, "auto" (one in the state
   * directory, dlqb_catalog_checkpoint_path), or "none" / "". */
  char checkpoint[DLQB_CONFIG_STR_MAX];
  /* Broker users whose catalog events a look believes, "a,b" (by the
   * event's user_id, which the broker checks); "" = any publisher's. */
  char writers[DLQB_CONFIG_STR_MAX];
  uint64_t check_interval_ms; /* run: depth against the catalog; 0 = off */
  uint64_t verify_every_ms;   /* run: a verifying pass this often; 0 = off */
} dlqb_catalog_conf;

/* drain run (dlqb/drain.h): the policy and the ramp. */
typedef struct {
  char reasons[256];                 /* dlq_reasons eligible, "a,b" */
  char sources[DLQB_CONFIG_STR_MAX]; /* source systems eligible, "" = any */
  char errors[DLQB_CONFIG_STR_MAX];  /* last_error patterns, '|'-separated, "" = any */
  char groups[DLQB_CONFIG_STR_MAX];  /* failure group ids (dlqb/group.h), "" = any */
  int canary;                        /* items in the canary */
  uint64_t canary_timeout_ms;
  int start_rate;        /* items a second, canary and first step */
  int step_factor;       /* each step this many times faster */
  int max_rate;          /* the ceiling */
  uint64_t step_ms;      /* one ramp step */
  int failure_threshold; /* re-failures in the window that stop a run */
  uint64_t failure_window_ms;
  int max_items;                      /* per run; 0 = no limit */
  char state[DLQB_CONFIG_STR_MAX];    /* the runs' record for drain status */
  char textfile[DLQB_CONFIG_STR_MAX]; /* node_exporter textfile; "" = none */
} dlqb_drain_conf;

/* The audit trail (dlqb/audit.h). */
typedef struct {
  char log[DLQB_CONFIG_STR_MAX];         /* "" = audit off */
  char key_file[DLQB_CONFIG_STR_MAX];    /* this writer's Ed25519 private key */
  char public_keys[DLQB_CONFIG_STR_MAX]; /* the writers' public keys: file or dir */
  int rotate_bytes;                      /* rotate the audit log past this size; 0 = never */
  uint64_t anchor_interval_ms;           /* anchors to dsr.audit.anchors this often; 0 = off */
} dlqb_audit_conf;

/* The web console (dlqb/console.h). */
typedef struct {
  char addr[DLQB_CONFIG_STR_MAX];          /* its host:port */
  char tls_cert_file[DLQB_CONFIG_STR_MAX]; /* "" = plain HTTP (loopback or proxy) */
  char tls_key_file[DLQB_CONFIG_STR_MAX];
  int behind_proxy;                    /* 1: plain HTTP off loopback is the operator's choice */
  char jobs_file[DLQB_CONFIG_STR_MAX]; /* its actions (dlqb/jobfile.h); "" = memory only */
} dlqb_console_conf;

/* Log lines (dlqb/log.h). */
typedef struct {
  dlqb_log_format format;
  int level; /* 0 error, 1 warn, 2 info, 3 debug */
} dlqb_log_conf;

/* A pipeline from the config file's `pipelines`: names and profile
 * resolved when read, its policy only where it set it (policy_set has bit
 * DLQB_POLICY_<KEY>): the rest follows the top-level policy, whichever
 * source set it (dlqb_config_pipeline merges the two). */
typedef struct {
  dlqb_pipeline p;
  uint32_t policy_set;
  /* The broker user its bridge runs as, when it has one of its own (the
   * same rules as the top-level url and password_file); "" = the
   * top-level one, whichever source set it. Only `run` uses them
   * (dlqb_config_use_pipeline_user). */
  char url[DLQB_CONFIG_STR_MAX];
  char password_file[DLQB_CONFIG_STR_MAX];
} dlqb_pipeline_conf;

/* The policy settings a pipeline may set, as bits of policy_set. */
enum {
  DLQB_POLICY_MAX_ATTEMPTS = 1u << 0,
  DLQB_POLICY_POISON_THRESHOLD = 1u << 1,
  DLQB_POLICY_RETRY_DELAYS = 1u << 2,
  DLQB_POLICY_RETRY_JITTER = 1u << 3,
  DLQB_POLICY_SLA_BUDGET = 1u << 4,
  DLQB_POLICY_PREFETCH = 1u << 5,
  DLQB_POLICY_DLQ_SLA = 1u << 6,
  DLQB_POLICY_MAX_REPLAYS = 1u << 7,
  DLQB_POLICY_EDIT_APPROVAL = 1u << 8,
};

typedef struct {
  dlqb_broker_conf broker;
  /* The routing policy (dlqb/pipeline.h: the part a pipeline may set for
   * itself), whose values a pipeline inherits where it sets none. */
  dlqb_policy_conf policy;
  dlqb_deadlines deadlines; /* statutory deadline per legal basis; n 0 = none */
  uint64_t startup_wait_ms; /* run retries its first contact this long; 0 = exit */
  dlqb_ledger_conf ledger;
  dlqb_catalog_conf catalog;
  dlqb_drain_conf drain;
  dlqb_audit_conf audit;
  dlqb_console_conf console;
  char metrics_addr[DLQB_CONFIG_STR_MAX]; /* host:port, "" = off */
  dlqb_log_conf log;
  char instance[256]; /* bridge instance name in logs and audit */
  /* The config file's `pipelines`, in the file's order; 0 = one pipeline,
   * "dsr", with today's names and the top-level policy. */
  dlqb_pipeline_conf pipelines[DLQB_MAX_PIPELINES];
  size_t pipeline_count;
} dlqb_config;

/* One row of the settings table; exposed for --help and the docs test. */
typedef struct {
  const char *key;  /* JSON config key, e.g. "max_attempts" */
  const char *env;  /* environment variable, e.g. "DLQ_BRIDGE_MAX_ATTEMPTS" */
  const char *flag; /* long flag without dashes, e.g. "max-attempts" */
  const char *dflt; /* default as text, as documented */
  const char *help; /* one line */
} dlqb_config_setting;

/* The settings table, terminated by a row with key == NULL. */
const dlqb_config_setting *dlqb_config_settings(void);

/* Fills c with the built-in defaults (the table's default texts, parsed).
 * Never fails. */
void dlqb_config_defaults(dlqb_config *c);

/* A copy of c on the heap, or NULL when out of memory; free it with
 * dlqb_config_free (which wipes it: a url may hold a password). The one
 * function that copies a whole config (tests/check_config_copies.py):
 * everything else passes `const dlqb_config *`. For a config derived from
 * another (a pipeline of a daemon serving several, a setting applied on
 * trial). */
dlqb_config *dlqb_config_copy(const dlqb_config *c);
void dlqb_config_free(dlqb_config *c);

/* Puts the trial copy `trial` (from dlqb_config_copy) in place of *c once
 * it was applied without error, and frees it. */
void dlqb_config_take(dlqb_config *c, dlqb_config *trial);

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
dlqb_status dlqb_config_apply_json(dlqb_config *c, const char *text, size_t len, dlqb_error *err);

/* As dlqb_config_apply_json, and on success sets in *set_keys (when not
 * NULL) bit i for each setting i of the table (dlqb_config_key_index) the
 * text named, so a listing can say which values came from the file. */
dlqb_status dlqb_config_apply_json_keys(dlqb_config *c, const char *text, size_t len,
                                        uint64_t *set_keys, dlqb_error *err);

/* The most settings the table may hold (set_keys is one bit each). */
#define DLQB_CONFIG_MAX_SETTINGS 64

/* The index of the setting with this JSON key in the table, or -1. */
long dlqb_config_key_index(const char *key);

/* The setting key an unknown `key` was most likely meant to be: the same
 * after case folding, '-' for '_' or without a DLQ_BRIDGE_ prefix (an
 * environment variable or flag name typed as a key), else the nearest by
 * edit distance when at most 2 edits (3 for keys of 12 bytes or more)
 * away. NULL when nothing is close. */
const char *dlqb_config_closest_key(const char *key);

/* The current value of setting `index` (dlqb_config_key_index) as text one
 * could type back ("5", "1s,5s", "off", "warn"), the url redacted
 * (dlqb_url_redact); "" for an unknown index. NUL-terminated, cut to len.
 * Returns buf. */
char *dlqb_config_value_text(const dlqb_config *c, long index, char *buf, size_t len);

/* The config file read when neither --config nor DLQ_BRIDGE_CONFIG names
 * one; its absence is not an error. */
#define DLQB_CONFIG_DEFAULT_PATH "/etc/dlq-bridge/config.json"

/* Which config file to read, from the --config value (NULL when not given)
 * and DLQ_BRIDGE_CONFIG (NULL when unset): the flag, else the variable,
 * else DLQB_CONFIG_DEFAULT_PATH. An empty value (either) means no file.
 * *required is true for a file the operator named: then a missing or
 * unreadable file is an error; the default path may be absent. Returns
 * NULL for no file. */
const char *dlqb_config_file_choice(const char *flag, const char *env, bool *required);

/* True when url carries a password ("amqp://u:pw@h/"), as
 * dlqb_url_redact would hide it. */
bool dlqb_config_url_has_password(const char *url);

/* Applies every setting whose environment variable lookup(name) returns
 * non-NULL (an empty value counts as set). Pass dlqb_config_getenv for the
 * real environment. Errors name the variable. On failure c is unchanged. */
dlqb_status dlqb_config_apply_env(dlqb_config *c, const char *(*lookup)(const char *name),
                                  dlqb_error *err);

/* getenv with the const-returning signature apply_env takes (getenv itself
 * returns char * and so does not convert without a warning). */
const char *dlqb_config_getenv(const char *name);

/* True when user (len bytes, not NUL-terminated: an AMQP user_id) is one
 * of c->ledger.completion_writers, compared byte for byte. */
bool dlqb_config_is_completion_writer(const dlqb_config *c, const char *user, size_t len);
/* True when user (len bytes) is one of list's ("a,b", as KIND_USERS keeps
 * it); never for an empty user. */
bool dlqb_user_listed(const char *list, const char *user, size_t len);

/* broker, or c's own broker part when broker is NULL: what a function
 * that takes a config and a broker part connects with (the console's
 * passes the signed-in person's, dlqb/console.h; everything else NULL). */
const dlqb_broker_conf *dlqb_config_broker(const dlqb_config *c, const dlqb_broker_conf *broker);

/* Finds the setting whose flag is `flag` (without dashes); NULL if none. */
const dlqb_config_setting *dlqb_config_find_flag(const char *flag);

/* How many pipelines c serves: pipeline_count, or 1 (the default "dsr"). */
size_t dlqb_config_pipeline_count(const dlqb_config *c);

/* Pipeline i (< dlqb_config_pipeline_count) of c, its policy completed from
 * the top-level settings. Without `pipelines`: "dsr", today's names, the
 * dsr profile and exactly the top-level policy. */
void dlqb_config_pipeline(const dlqb_config *c, size_t i, dlqb_pipeline *out);

/* The index of the pipeline called name; name NULL: the only one. Errors
 * (DLQB_EINVAL) name the pipelines configured: "--pipeline: no pipeline
 * 'x' (configured: dsr, redaction)" or "several pipelines are configured
 * (dsr, redaction): choose one with --pipeline". */
dlqb_status dlqb_config_pipeline_choose(const dlqb_config *c, const char *name, size_t *index,
                                        dlqb_error *err);

/* Forgets every pipeline's own value of the policy setting `key` (no-op
 * for other keys): a later source than the file (environment, flag) sets
 * it for every pipeline, as it overrides the file's top-level value. */
void dlqb_config_pipelines_override(dlqb_config *c, const char *key);

/* Keeps only pipeline i (< pipeline_count) of c's `pipelines`, as its
 * first and only one (no-op without `pipelines`): what a command that
 * serves one pipeline keeps. */
void dlqb_config_pipeline_only(dlqb_config *c, size_t i);

/* Writes pipeline i's own url and password_file (those it sets) over c's
 * top-level ones, so that its bridge connects as its own broker user.
 * No-op without `pipelines` or for i out of range. */
void dlqb_config_use_pipeline_user(dlqb_config *c, size_t i);

/* Writes p's policy over c's top-level policy settings, so code that reads
 * a dlqb_config (the router, the escalator, the ops commands) works with
 * that pipeline's rules on a copy. */
void dlqb_config_use_pipeline(dlqb_config *c, const dlqb_pipeline *p);

/* The files of pipeline p, so that two pipelines never share one: the
 * ledger cache (ledger_cache), the drain's state file and its textfile
 * (drain_state, drain_textfile), the console's job file
 * (console_jobs_file). For the default pipeline
 * (dlqb_pipeline_is_default) they stay as set; for another, p's name goes
 * in before the file name's extension (dlqb_pipeline_path:
 * "ledger.cache" -> "ledger.recon.cache", "drain.prom" ->
 * "drain.recon.prom"). An empty setting stays empty. DLQB_EINVAL naming
 * the setting when a name would not fit (c then unchanged). */
dlqb_status dlqb_config_pipeline_paths(dlqb_config *c, const dlqb_pipeline *p, dlqb_error *err);

/* path with ".name" inserted before the extension of its last component
 * (the part from its last '.', when that is not the component's first
 * character), else appended: "/a/ledger.cache" -> "/a/ledger.recon.cache",
 * "/a/ledger" -> "/a/ledger.recon", "/a/.cache" -> "/a/.cache.recon".
 * False when it does not fit cap (out then undefined). */
bool dlqb_pipeline_path(const char *path, const char *name, char *out, size_t cap);

/* Checks cross-setting rules (e.g. TLS files only with amqps://, cert and key
 * together). Call after all sources are applied. */
dlqb_status dlqb_config_validate(const dlqb_config *c, dlqb_error *err);

/* Copies url into buf (NUL-terminated, truncated to len) with any password
 * replaced by "***": "amqp://u:secret@h/vh" -> "amqp://u:***@h/vh". Any
 * input is safe; when a password holds an unencoded '/', '?' or '#', more
 * than the password is hidden rather than part of it shown. Returns buf. */
char *dlqb_url_redact(const char *url, char *buf, size_t len);

#endif

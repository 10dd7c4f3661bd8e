/* Shared command-line handling for dlq-bridge's commands: settings flags
 * from the config table, --config, --help, exit codes. Private to the
 * binary; the core library never prints or exits. */
#ifndef DLQB_CLI_H
#define DLQB_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "dlqb/config.h"
#include "dlqb/error.h"
#include "dlqb/stop.h"

/* Exit codes, documented in docs/dlq-bridge.1.md and --help. */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* A command-specific flag. */
typedef struct {
  const char *name; /* without dashes */
  bool takes_value;
  const char *metavar;
  const char *help;
} cli_flag;

/* Receives a command flag (value NULL when it takes none) or, with flag
 * NULL, a positional argument. Returns DLQB_OK or DLQB_EINVAL with err set. */
typedef dlqb_status (*cli_flag_fn)(void *ctx, const char *flag, const char *value, dlqb_error *err);

typedef struct {
  const char *name;      /* "run" */
  const char *summary;   /* one line */
  const char *usage;     /* "dlq-bridge run [options]" */
  const char *details;   /* paragraphs for --help, may be NULL */
  const cli_flag *flags; /* command flags, terminated by {NULL}; may be NULL */
  bool settings;         /* accepts the connection/routing settings flags */
  /* The settings keys it reads (NULL-terminated, e.g. CLI_USES_BROKER); NULL:
   * every one but the drain's (drain_*, read by `drain run` alone). Only
   * these are taken from the environment and flags, checked and shown in
   * --help; the others keep their defaults, so a read-only command cannot
   * fail on a setting it never reads. */
  const char *const *uses;
} cli_spec;

/* Groups of settings keys for cli_spec.uses. */
/* dlq_queue_type with them: every pass over the DLQ gives back what it held
 * as the queue's type needs (dlqb/pipe.h, return_in_order). */
#define CLI_USES_BROKER                                                                            \
  "url", "password_file", "tls_ca_file", "tls_cert_file", "tls_key_file", "dlq_queue_type"
#define CLI_USES_LOG "log_format", "log_level", "instance"
/* Writers sign with their key (and check other writers' seal lines with the
 * public keys); readers (audit verify, show, reconcile) need no secret. */
#define CLI_USES_AUDIT                                                                             \
  "audit_log", "audit_key_file", "audit_rotate_bytes", "audit_public_keys", "audit_anchor_interval"
#define CLI_USES_AUDIT_READ "audit_log", "audit_public_keys"
#define CLI_USES_TOPOLOGY   "poison_threshold", "retry_delays"
/* A look answered from the catalog (dlqb/catalog_stream.h). */
#define CLI_USES_CATALOG "catalog_checkpoint", "catalog_writers"

/* Whether spec reads the setting with this JSON key. */
bool cli_uses(const cli_spec *spec, const char *key);

/* Where the setting `key` was set for the last cli_load, as the operator
 * typed it: "--audit-key-file", "DLQ_BRIDGE_AUDIT_KEY_FILE", "key
 * 'audit_key_file' in config file 'PATH'", or "the default". Returns buf. */
const char *cli_setting_source(const char *key, char *buf, size_t len);

/* The config file the last cli_load applied, or NULL when none was. */
const char *cli_config_file(void);

/* Loads the configuration for a command: defaults, then the JSON file from
 * --config, else DLQ_BRIDGE_CONFIG, else DLQB_CONFIG_DEFAULT_PATH when it
 * exists (an empty --config or DLQ_BRIDGE_CONFIG: no file), then the
 * environment, then flags, and
 * validates it. Command flags go to on_flag. Sets *help when --help was
 * given (then nothing else is validated). Returns EXIT_OK, or EXIT_USAGE
 * after printing one line to stderr. */
int cli_load(const cli_spec *spec, int argc, char **argv, dlqb_config *cfg, cli_flag_fn on_flag,
             void *ctx, bool *help);

/* The pipeline the command serves: the one --pipeline (or
 * DLQ_BRIDGE_PIPELINE, or the config file's only one) chose, its queue
 * names and profile; the default dsr pipeline (today's names) before
 * cli_load chose one or for a command without settings. */
const dlqb_pipeline *cli_pipeline(void);

/* Prints the command's --help text to out. */
void cli_print_help(const cli_spec *spec, FILE *out);

/* A command made of subcommands (audit, review, drain). */
typedef struct {
  const char *name;
  int (*run)(int argc, char **argv);
} cli_subcommand;

/* Runs the subcommand argv[1] names (with argv from it on); --help prints
 * spec's help; none or an unknown one is a usage error (exit 2). */
int cli_run_subcommand(const cli_spec *spec, const cli_subcommand *subs, size_t n, int argc,
                       char **argv);

/* Prints the settings reference as a markdown table (one row per setting,
 * and --config): the generated part of docs/configuration.md. */
void cli_print_settings_markdown(FILE *out);
/* The same as a list for a person at a terminal, wrapped to width. */
void cli_print_settings_list(FILE *out, size_t width);

/* Prints text (one line, sanitised already) and a newline, wrapped at
 * spaces to `width` columns (cli_output_width; 0: as it is), each
 * continuation indented by two: audit show's hops, the trail's summary,
 * help settings. A word longer than a line is printed whole. */
void cli_print_wrapped(FILE *out, const char *text, size_t width);

/* Prints "dlq-bridge: <msg>" to stderr, and keeps it as the message of the
 * --json error document (cli_finish). */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* With --json on the command line, a failure still prints exactly one JSON
 * document on stdout: main calls this before the command runs; the command
 * calls cli_json_printed once it printed its own document. */
void cli_json_errors(bool on);
void cli_json_printed(void);

/* Installs SIGTERM/SIGINT handlers that set the returned stop flag, and
 * ignores SIGPIPE. */
dlqb_stop_flag *cli_stop_flag(void);

/* Flushes stdout and reports a write error (e.g. a closed pipe) as failure.
 * With cli_json_errors on, a failure (code != 0) without a JSON document
 * yet prints {"error": {"message": M, "exit_status": code}} first, M being
 * the last cli_error line. */
int cli_finish(int code);

#endif

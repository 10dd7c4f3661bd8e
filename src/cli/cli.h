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
enum { EXIT_OK = 0, EXIT_FAILURE_ = 1, EXIT_USAGE = 2 };

/* A command-specific flag. */
typedef struct {
  const char *name;   /* without dashes */
  bool takes_value;
  const char *metavar;
  const char *help;
} cli_flag;

/* Receives a command flag (value NULL when it takes none) or, with flag
 * NULL, a positional argument. Returns DLQB_OK or DLQB_EINVAL with err set. */
typedef dlqb_status (*cli_flag_fn)(void *ctx, const char *flag, const char *value, dlqb_error *err);

typedef struct {
  const char *name;     /* "run" */
  const char *summary;  /* one line */
  const char *usage;    /* "dlq-bridge run [options]" */
  const char *details;  /* paragraphs for --help, may be NULL */
  const cli_flag *flags;/* command flags, terminated by {NULL}; may be NULL */
  bool settings;        /* accepts the connection/routing settings flags */
} cli_spec;

/* Loads the configuration for a command: defaults, then the JSON file from
 * --config (or DLQ_BRIDGE_CONFIG), then the environment, then flags, and
 * validates it. Command flags go to on_flag. Sets *help when --help was
 * given (then nothing else is validated). Returns EXIT_OK, or EXIT_USAGE
 * after printing one line to stderr. */
int cli_load(const cli_spec *spec, int argc, char **argv, dlqb_config *cfg, cli_flag_fn on_flag,
             void *ctx, bool *help);

/* Prints the command's --help text to out. */
void cli_print_help(const cli_spec *spec, FILE *out);

/* Prints the settings reference as a markdown table (one row per setting,
 * and --config): the generated part of docs/configuration.md. */
void cli_print_settings_markdown(FILE *out);

/* Prints "dlq-bridge: <msg>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Installs SIGTERM/SIGINT handlers that set the returned stop flag, and
 * ignores SIGPIPE. */
dlqb_stop_flag *cli_stop_flag(void);

/* Flushes stdout and reports a write error (e.g. a closed pipe) as failure. */
int cli_finish(int code);

#endif

/* dlq-bridge: dispatches to a command; only here is the exit code decided. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "ops_cli.h"
#include "dlqb/text.h"
#include "dlqb/thread.h"

#ifndef DLQB_VERSION
#define DLQB_VERSION "0.1.0"
#endif

static const command commands[] = {
    {&cmd_run_spec, cmd_run},         {&cmd_declare_spec, cmd_declare},
    {&cmd_catalog_spec, cmd_catalog}, {&cmd_audit_spec, cmd_audit},
    {&cmd_replay_spec, cmd_replay},   {&cmd_escalate_spec, cmd_escalate},
    {&cmd_inspect_spec, cmd_inspect}, {&cmd_stats_spec, cmd_stats},
    {&cmd_resolve_spec, cmd_resolve}, {&cmd_edit_spec, cmd_edit},
    {&cmd_review_spec, cmd_review},   {&cmd_drain_spec, cmd_drain},
    {&cmd_console_spec, cmd_console}, {&cmd_migrate_spec, cmd_migrate},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
  fprintf(out, "usage: dlq-bridge COMMAND [options]\n\n"
               "A dead-letter bridge for RabbitMQ: bounded retries with backoff, poison\n"
               "isolation, a dead-letter queue and escalation, confirm-before-ack on every hop.\n\n"
               "commands:\n");
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(out, "  %-10s %s\n", commands[i].spec->name, commands[i].spec->summary);
  fprintf(out, "  %-10s %s\n", "help", "show the help of a command: dlq-bridge help COMMAND");
  fprintf(out, "  %-10s %s\n", "version", "print the version");
  fprintf(out, "\n'dlq-bridge help settings' prints every setting as a markdown table.\n");
  fprintf(out, "\nEvery command takes --help. Settings come from flags, DLQ_BRIDGE_* environment\n"
               "variables and a JSON --config file, in that order of precedence.\n"
               "exit status: 0 success, 1 failure, 2 usage or configuration error\n");
}

/* Names the nearest command when one is within two edits. */
static void unknown_command(const char *name) {
  const char *best = NULL;
  size_t best_d = 3;
  for (size_t i = 0; i < NCOMMANDS; i++) {
    size_t d = dlqb_text_distance(name, commands[i].spec->name);
    if (d < best_d) {
      best_d = d;
      best = commands[i].spec->name;
    }
  }
  if (best != NULL) cli_error("unknown command '%s'; did you mean '%s'?", name, best);
  else cli_error("unknown command '%s' (see dlq-bridge --help)", name);
}

static const command *find(const char *name) {
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i].spec->name, name) == 0) return &commands[i];
  return NULL;
}

/* Whether --json is among the options (before a "--"): then even a usage
 * error prints a JSON document, as a script expects one either way. */
static bool wants_json(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) break;
    if (strcmp(argv[i], "--json") == 0) return true;
  }
  return false;
}

int main(int argc, char **argv) {
  cli_json_errors(wants_json(argc, argv));
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return cli_finish(argc < 2 ? EXIT_USAGE : EXIT_OK);
  }
  if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
    printf("dlq-bridge %s\n", DLQB_VERSION);
    return cli_finish(EXIT_OK);
  }
  if (strcmp(argv[1], "help") == 0) {
    if (argc < 3) {
      usage(stdout);
      return cli_finish(EXIT_OK);
    }
    if (strcmp(argv[2], "settings") == 0) {
      /* A person at a terminal reads a list in its width; a pipe (the
       * docs' table, scripts/gen-docs.sh) gets the markdown table. */
      if (isatty(STDOUT_FILENO)) cli_print_settings_list(stdout, cli_output_width(false));
      else cli_print_settings_markdown(stdout);
      return cli_finish(EXIT_OK);
    }
    const command *c = find(argv[2]);
    if (c == NULL) {
      unknown_command(argv[2]);
      return cli_finish(EXIT_USAGE);
    }
    cli_print_help(c->spec, stdout);
    return cli_finish(EXIT_OK);
  }
  const command *c = find(argv[1]);
  if (c == NULL) {
    unknown_command(argv[1]);
    return cli_finish(EXIT_USAGE);
  }
  /* Before anything reads a broker frame (dlqb/thread.h). */
  dlqb_error err;
  if (dlqb_stack_ensure(&err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return cli_finish(EXIT_USAGE);
  }
  return cli_finish(c->run(argc - 1, argv + 1));
}

/* The command table: one entry per `dlq-bridge COMMAND`, each implemented
 * in its own cmd_<name>.c. */
#ifndef DLQB_COMMANDS_H
#define DLQB_COMMANDS_H

#include "cli.h"

typedef struct {
  const cli_spec *spec;
  int (*run)(int argc, char **argv);
} command;

extern const cli_spec cmd_run_spec;
int cmd_run(int argc, char **argv);
extern const cli_spec cmd_declare_spec;
int cmd_declare(int argc, char **argv);
extern const cli_spec cmd_catalog_spec;
int cmd_catalog(int argc, char **argv);
extern const cli_spec cmd_audit_spec;
int cmd_audit(int argc, char **argv);
extern const cli_spec cmd_replay_spec;
int cmd_replay(int argc, char **argv);
extern const cli_spec cmd_escalate_spec;
int cmd_escalate(int argc, char **argv);
extern const cli_spec cmd_inspect_spec;
int cmd_inspect(int argc, char **argv);
extern const cli_spec cmd_stats_spec;
int cmd_stats(int argc, char **argv);
extern const cli_spec cmd_migrate_spec;
int cmd_migrate(int argc, char **argv);
extern const cli_spec cmd_resolve_spec;
int cmd_resolve(int argc, char **argv);
extern const cli_spec cmd_edit_spec;
int cmd_edit(int argc, char **argv);
extern const cli_spec cmd_review_spec;
int cmd_review(int argc, char **argv);
extern const cli_spec cmd_drain_spec;
int cmd_drain(int argc, char **argv);
extern const cli_spec cmd_console_spec;
int cmd_console(int argc, char **argv);

#endif

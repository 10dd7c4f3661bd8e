/* dlq-bridge escalate: move selected DLQ items to compliance_review. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/log.h"
#include "dlqb/topology.h"
#include "ops_cli.h"

static const cli_flag flags[] = {
    CLI_SELECT_FLAGS,
    {"rate", true, "N", "escalate at most N messages a second, 1 to 100000"},
    {"dry-run", false, NULL, "list what would be escalated; move nothing"},
    {"note", true, "TEXT",
     "why, for the reviewer: kept on the item (escalation_note) and in the audit trail"},
    CLI_WIDE_FLAG,
    CLI_SETTLE_FLAG,
    CLI_COMMON_FLAGS,
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_escalate_spec = {
    .name = "escalate",
    .summary = "move DLQ items to compliance_review for a person to decide",
    .usage =
        "dlq-bridge escalate (--all | FILTER...) [--note TEXT] [--limit N] [--dry-run] [--json]",
    .details = "Moves the selected items of dsr.dlq.manual to compliance_review, stamping the\n"
               "headers escalated_by (--actor), escalated_at (now, ISO-8601 UTC) and\n"
               "escalation_reason=operator, and escalation_note (--note) when given; the note\n"
               "is also the hop's reason in the audit trail. The item arrives unclaimed (see\n"
               "'dlq-bridge review'). Everything else, body included, is kept.\n"
               "Items not selected stay in the DLQ, in their order. The daemon escalates by\n"
               "itself items older than DLQ_BRIDGE_DLQ_SLA (escalation_reason=dlq_sla) and\n"
               "tasks that fail again after DLQ_BRIDGE_MAX_REPLAYS replays (max_replays).",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_AUDIT, NULL},
};

typedef struct {
  cli_opts o;
  ops_stamp stamp;
  const char *note; /* --note, or NULL */
} escalate_opts;

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  escalate_opts *e = ctx;
  if (flag != NULL && strcmp(flag, "note") == 0) {
    if (value[0] == '\0' || strlen(value) > DLQB_LAST_ERROR_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "--note: give 1 to %d bytes", DLQB_LAST_ERROR_MAX);
    e->note = value;
    return DLQB_OK;
  }
  return cli_opts_flag(&e->o, flag, value, err);
}

int cmd_escalate(int argc, char **argv) {
  escalate_opts e;
  memset(&e, 0, sizeof e);
  bool help;
  int rc = cli_opts_load(&cmd_escalate_spec, argc, argv, &e.o, on_flag, &e, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_escalate_spec, stdout);
    return EXIT_OK;
  }
  dlqb_error err;
  if (!dlqb_select_given(&e.o.sel)) {
    cli_error("escalate needs a selection: --all or at least one filter (see 'dlq-bridge escalate "
              "--help')");
    return EXIT_USAGE;
  }
  if (dlqb_select_validate(&e.o.sel, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_USAGE;
  }
  dlqb_stop_flag *stop = cli_stop_flag();
  ops_stamp_init(&e.stamp, e.o.actor, e.note);
  ops_move_spec m;
  ops_escalate_spec(&m, &e.stamp, e.o.dry_run, e.o.rate);
  m.after_interrupted = e.o.after_interrupted;
  return cli_move_run(&e.o, &m, NULL, stop);
}

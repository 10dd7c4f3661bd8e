/* dlq-bridge replay: send selected DLQ items back to dsr.work after a fix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "dlqb/envelope.h"
#include "dlqb/ledger.h"
#include "dlqb/log.h"
#include "dlqb/topology.h"
#include "ops_cli.h"

static const cli_flag flags[] = {
    CLI_SELECT_FLAGS,
    {"rate", true, "N",
     "replay at most N messages a second, 1 to 100000 (default: as fast as confirms allow)"},
    {"dry-run", false, NULL, "list what would be replayed or skipped; move and write nothing"},
    {"note", true, "TEXT",
     "why it is replayed now (the fix, the ticket): the hop's reason in the audit trail"},
    CLI_WIDE_FLAG,
    CLI_SETTLE_FLAG,
    CLI_COMMON_FLAGS,
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_replay_spec = {
    .name = "replay",
    .summary = "send DLQ items back to dsr.work after a fix (attempts reset)",
    .usage = "dlq-bridge replay (--all | FILTER...) [--note TEXT] [--limit N] [--rate N] "
             "[--dry-run] [--json]",
    .details = "Moves the selected items of dsr.dlq.manual to dsr.work with attempt reset to 0,\n"
               "last_error, dlq_reason and dlq_at removed, replay_count raised by one (at most\n"
               "1000000, which counts as replayed too often) and\n"
               "first_seen_at kept. Filters combine (all must match). Items that are not\n"
               "selected stay in the DLQ, in their order. Only the items present at the start\n"
               "are examined. A task whose (request_id, source_system) is in the completion\n"
               "ledger dsr.completed is not replayed: it leaves the DLQ audited as\n"
               "skipped_complete. A ledger entry counts only when its AMQP user_id (which\n"
               "RabbitMQ checks) is one of DLQ_BRIDGE_COMPLETION_WRITERS; the others are\n"
               "counted as unverified and their tasks replayed. With no writers set, every\n"
               "selected task is replayed. Each move is confirmed before the DLQ copy is\n"
               "acked, so an interrupted replay loses nothing (at worst a task is in both\n"
               "queues).\n"
               "The ledger is read whole each time, unless DLQ_BRIDGE_LEDGER_CACHE names a\n"
               "file to keep it in between runs: then only its new entries are read.\n"
               "A task replayed DLQ_BRIDGE_MAX_REPLAYS times that fails again goes to\n"
               "compliance_review instead of the DLQ. Each replayed hop's reason in the audit\n"
               "trail is --note when given (the fix, the ticket), else the error it had failed\n"
               "with.",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_AUDIT, "ledger_cache",
                                  "completion_writers", NULL},
};

typedef struct {
  cli_opts o;
  ops_stamp stamp;
  const char *note; /* --note, or NULL */
} replay_opts;

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  replay_opts *r = ctx;
  if (flag != NULL && strcmp(flag, "note") == 0) {
    if (value[0] == '\0' || strlen(value) > DLQB_LAST_ERROR_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "--note: give 1 to %d bytes", DLQB_LAST_ERROR_MAX);
    r->note = value;
    return DLQB_OK;
  }
  return cli_opts_flag(&r->o, flag, value, err);
}

int cmd_replay(int argc, char **argv) {
  replay_opts r;
  memset(&r, 0, sizeof r);
  bool help;
  int rc = cli_opts_load(&cmd_replay_spec, argc, argv, &r.o, on_flag, &r, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_replay_spec, stdout);
    return EXIT_OK;
  }
  dlqb_error err;
  if (!dlqb_select_given(&r.o.sel)) {
    cli_error(
        "replay needs a selection: --all or at least one filter (see 'dlq-bridge replay --help')");
    return EXIT_USAGE;
  }
  if (dlqb_select_validate(&r.o.sel, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_USAGE;
  }
  dlqb_stop_flag *stop = cli_stop_flag();
  ops_stamp_init(&r.stamp, r.o.actor, r.note);

  /* The audit trail first: one that cannot be written stops the replay
   * before anything is read or said (a dry run writes nothing). */
  ops_session *session = NULL;
  int arc = cli_audit_start(&r.o, "replay", &session);
  if (arc != EXIT_OK) return arc;
  /* The whole ledger next: replaying on a partial one could re-run a
   * completed erasure, so a failure to read it stops the replay. */
  const dlqb_ledger *ledger = NULL;
  const dlqb_ledger_stats *ls = NULL;
  if (ops_session_ledger(session, cli_pipeline(), r.o.dry_run, &ledger, &ls, &err) != DLQB_OK) {
    ops_session_close(session);
    return cli_fail(&err);
  }
  /* Anyone with write on the default exchange can append to the ledger:
   * without writers to trust, no entry proves a task done, and re-running
   * a finished erasure is harmless where skipping an unfinished one is not.
   * (Said after the ledger is read, so a broker that cannot be reached
   * stays a one-line error.) */
  if (r.o.cfg->ledger.completion_writers[0] == '\0')
    dlqb_log_warn("replay", "the completion ledger is not trusted (no completion_writers): "
                            "every task is replayed");
  if (!r.o.json && isatty(2)) {
    fprintf(stderr, "completion ledger: %zu entries read, %zu distinct tasks", ls->entries,
            dlqb_ledger_size(ledger));
    if (ls->cache == DLQB_LEDGER_CACHE_USED) fprintf(stderr, " (%zu from the cache)", ls->cached);
    if (ls->unverified > 0) fprintf(stderr, ", %zu unverified entries ignored", ls->unverified);
    fputc('\n', stderr);
  }
  ops_move_spec m;
  ops_replay_spec(&m, &r.stamp, r.o.dry_run, r.o.rate);
  m.ledger = ledger;
  m.ledger_stats = ls;
  m.after_interrupted = r.o.after_interrupted;
  rc = cli_move_run(&r.o, &m, session, stop);
  ops_session_close(session);
  return rc;
}

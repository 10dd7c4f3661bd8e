/* What the audit subcommands (cmd_audit.c: verify and the table;
 * cmd_audit_show.c; cmd_audit_reconcile.c) share: the flags naming the
 * log's seal, the options, and reading the log the way `audit verify`
 * does. Private to the binary, like cli.h. */
#ifndef DLQB_AUDIT_CLI_H
#define DLQB_AUDIT_CLI_H

#include <stdbool.h>

#include "cli.h"
#include "dlqb/audit.h"
#include "dlqb/calendar.h"
#include "dlqb/config.h"
#include "dlqb/item.h"
#include "dlqb/ops.h"
#include "dlqb/scan.h"

/* The flags every subcommand takes: which seal, and where checking starts. */
#define LOG_FLAGS                                                                                  \
  {"seal", true, "FILE", "seal to check the tail against (default: the last FILE + .seal)"},       \
      {"no-seal", false, NULL, "do not check a seal (a cut tail then goes unnoticed)"}, {          \
    "partial", false, NULL,                                                                        \
        "accept a first file that continues an archived one (checks from there on)"                \
  }

#define FILES_DETAILS                                                                              \
  "FILEs are the log's files oldest first; without them, the configured\n"                         \
  "DLQ_BRIDGE_AUDIT_LOG and its rotated files. The writers' public keys are\n"                     \
  "DLQ_BRIDGE_AUDIT_PUBLIC_KEYS (--audit-public-keys: a PEM file, or a directory\n"                \
  "of *.pem; *.pem.revoked there are revoked keys); no secret key is read.\n"

typedef struct {
  const char **files; /* positional FILEs (room for argc entries) */
  size_t nfiles;
  const char *seal;
  bool no_seal, partial;
  bool anchors;                        /* audit verify --anchors */
  const char *request_id, *message_id; /* audit show (--id or --request-id, --message-id) */
  const char *id_flag;                 /* "id" or "request-id": which gave request_id */
  bool require_id;                     /* audit show: one of them is required */
  bool json;
  int window; /* audit reconcile: the DLQ read in one pass */
  /* Runs after the options are checked and before the log is read
   * (audit reconcile reads the queue there); returns an exit status. */
  int (*prepare)(void *ctx, const dlqb_config *cfg);
  void *prepare_ctx;
  /* The subcommand's own flags (audit report's --from, --to, --actor):
   * called for every flag the shared ones are not. May be NULL. */
  cli_flag_fn extra;
  void *extra_ctx;
  /* Which of the configured log's files (found beside it, not named) to
   * read, asked after prepare (audit prove --archive: not the archived
   * ones still there). NULL: all. */
  bool (*keep_file)(void *ctx, const char *path);
} audit_opts;

/* ops_queue_read_run (dlqb/ops.h) stopped by Ctrl-C. Returns EXIT_OK, or
 * prints one line and returns EXIT_RUNTIME (a broker error, or a read
 * interrupted). */
int audit_read_queue(const dlqb_config *cfg, ops_queue_read *q);

/* Parses the command line, loads the key, runs o->prepare, and verifies
 * the log, showing every accepted line to visit. Returns the exit status;
 * on EXIT_OK *sum holds the summary and *sealed whether a seal was
 * checked. *help is set when only the help was printed. */
int audit_load_and_verify(const cli_spec *spec, int argc, char **argv, audit_opts *o,
                          dlqb_audit_visit_fn visit, void *ctx, dlqb_audit_summary *sum,
                          bool *sealed, bool *help);

/* "audit log intact: ..." and the seal line, as `audit verify` prints them. */
void audit_print_summary(const dlqb_audit_summary *s, bool sealed);

/* audit show collects one task's hops with ops_hops_collect (dlqb/ops.h). */

/* Writes data to path, a new file (never over another: O_EXCL), synced;
 * false after printing one line (the partial file removed). */
bool audit_write_new_file(const char *path, const char *data, size_t n);

int audit_show(int argc, char **argv);
int audit_reconcile(int argc, char **argv);
int audit_report(int argc, char **argv);
int audit_verify_report(int argc, char **argv);
int audit_checkpoint(int argc, char **argv);
int audit_prove(int argc, char **argv);
int audit_archive(int argc, char **argv);
int audit_verify_proof(int argc, char **argv);
int audit_witness(int argc, char **argv);

#endif

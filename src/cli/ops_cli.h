/* What the ops commands (replay, escalate, inspect, stats, resolve) share
 * on the command line: their common flags, the operator's name, opening
 * the audit trail as a command, and how an item is shown to a person or a
 * script. The passes themselves are the ops library's (dlqb/ops.h).
 * Private to the binary, like cli.h. */
#ifndef DLQB_OPS_CLI_H
#define DLQB_OPS_CLI_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>

#include "cli.h"
#include "dlqb/audit.h"
#include "dlqb/deadline.h"
#include "dlqb/ledger.h"
#include "dlqb/ops.h"
#include "dlqb/scan.h"
#include "dlqb/select.h"
#include "dlqb/verdict.h"

/* Filters, shared by replay, escalate and inspect. */
#define CLI_FILTER_FLAGS                                                                           \
  {"id", true, "VALUE",                                                                            \
   "only the item(s) whose first identity field (dsr: request_id) is "                             \
   "VALUE"},                                                                                       \
      {"match", true, "FIELD=VALUE",                                                               \
       "only items whose identity field FIELD (e.g. item_id) is "                                  \
       "VALUE"},                                                                                   \
      {"request-id", true, "ID", "only the item(s) with this request_id (dsr)"},                   \
      {"source-system", true, "NAME", "only items from this source_system (dsr)"},                 \
      {"legal-basis", true, "BASIS", "only items with this legal_basis (e.g. gdpr_art_17)"},       \
      {"reason", true, "TEXT", "only items whose last_error contains TEXT"},                       \
      {"group", true, "ID", "only items of this failure group (a GROUP id that stats lists)"},     \
      {"older-than", true, "DURATION", "only items in the DLQ longer than this (e.g. 2h, 7d)"}, {  \
    "newer-than", true, "DURATION", "only items in the DLQ for less than this"                     \
  }

/* Selection flags of the commands that move items (replay, escalate). */
#define CLI_SELECT_FLAGS                                                                           \
  {"all", false, NULL, "select every item (required when no filter is given)"}, CLI_FILTER_FLAGS,  \
  {                                                                                                \
    "limit", true, "N",                                                                            \
        "act on at most N items (the first N selected, in queue order; items "                     \
        "skipped as complete do not count)"                                                        \
  }

/* --wide: the commands that print item tables. */
/* --scan: a look that reads the queue itself instead of the catalog. */
#define CLI_SCAN_FLAG                                                                              \
  {                                                                                                \
    "scan", false, NULL,                                                                           \
        "read the queue itself (a pass that holds it) instead of the catalog, and compare them"    \
  }

#define CLI_WIDE_FLAG                                                                              \
  { "wide", false, NULL, "print whole columns instead of cutting them to the terminal's width" }

/* --after-interrupted: the movers (replay, escalate, resolve). */
#define CLI_SETTLE_FLAG                                                                            \
  {                                                                                                \
    "after-interrupted", false, NULL,                                                              \
        "move items whose earlier move began and did not end too (check first: audit show)"        \
  }

/* --json and --window: every ops command. */
#define CLI_OUTPUT_FLAGS                                                                           \
  {"json", false, NULL, "print JSON for scripts instead of text"}, {                               \
    "window", true, "N",                                                                           \
        "messages in flight at once, 1 to 65535 (default 5000); items left in place do not count"  \
  }

/* --actor: who is acting, for the audit trail and the connection name. */
#define CLI_ACTOR_FLAG                                                                             \
  { "actor", true, "NAME", "who is acting, for the audit trail (default: your login name)" }

/* Flags of the ops commands that write the audit trail (that move or remove
 * items): these call cli_audit_start, so --no-audit comes with them. */
#define CLI_COMMON_FLAGS CLI_OUTPUT_FLAGS, CLI_ACTOR_FLAG, CLI_NO_AUDIT_FLAG

/* --no-audit: every command that calls cli_audit_start (drain run takes it
 * without --actor: its actor is always "drain"). */
#define CLI_NO_AUDIT_FLAG                                                                          \
  {                                                                                                \
    "no-audit", false, NULL,                                                                       \
        "act even though no audit trail is configured (logged as a warning); "                     \
        "without it such a command refuses; a configured trail is always written"                  \
  }

typedef struct {
  dlqb_config *cfg; /* the loaded settings: cli_opts_load's (one command per process) */
  dlqb_select sel;
  bool json;
  char actor[128];
  int window;
  bool window_set;        /* --window given: not adjusted for --rate */
  bool quiet_progress;    /* no progress line even on a terminal */
  bool dry_run;           /* --dry-run (replay, escalate): list, move nothing */
  bool no_audit;          /* --no-audit: acting without a configured trail is allowed */
  bool wide;              /* --wide: item tables are not cut to the terminal */
  bool after_interrupted; /* --after-interrupted: ops_move_spec's */
  bool scan;              /* --scan: a look reads the queue, not the catalog */
  double rate;            /* --rate (replay, escalate): moves per second, 0 = unlimited */
} cli_opts;

/* --window's value: 1 to DLQB_SCAN_WINDOW_MAX, else DLQB_EINVAL naming the flag. */
dlqb_status cli_parse_window(const char *value, int *out, dlqb_error *err);

/* Handles the common, selection and movement (--dry-run, --rate) flags;
 * a command only declares the ones it takes. DLQB_EINVAL for anything else
 * ("unknown option"). A command's on_flag calls it for flags it does not
 * handle itself. */
dlqb_status cli_opts_flag(cli_opts *o, const char *flag, const char *value, dlqb_error *err);

/* cli_load for an ops command: defaults (actor = login name), then flags.
 * Returns an exit code as cli_load does. */
int cli_opts_load(const cli_spec *spec, int argc, char **argv, cli_opts *o, cli_flag_fn on_flag,
                  void *ctx, bool *help);

/* The operator's login name ("unknown" when none): --actor's default. */
void cli_default_actor(char *buf, size_t len);

/* Opens the session (dlqb/ops.h) of a command that moves or removes items
 * (read-only commands do not call it), its trail written as
 * "<command>@<instance>"; with --dry-run (o->dry_run) one that opens no
 * trail and writes nothing. With no audit_log configured it refuses,
 * EXIT_USAGE with one line naming where to set it, unless --no-audit: then
 * the session has no trail, a warning naming the command and the actor is
 * logged, and EXIT_OK. EXIT_RUNTIME when the trail cannot be opened. (Not
 * a bool: a refusal and a failure differ.) Close it with
 * ops_session_close. */
int cli_audit_start(const cli_opts *o, const char *command, ops_session **out);

/* Prints one line for a failed operation and returns EXIT_RUNTIME. */
int cli_fail(const dlqb_error *err);

/* The item as a JSON object (new reference), with its failure group id
 * ("group"): the served profile's identity fields under their names, and
 * legal_basis and action only where the profile has them (dsr's). */
json_object *cli_item_json(const dlqb_item *it, int64_t now_ms);

/* ops_profile_has of the served profile. */
bool cli_profile_has(const char *name);

/* The item as one human line (no newline): age, ids, basis, action,
 * attempt, dlq_reason and last_error. */
void cli_item_print(FILE *out, const dlqb_item *it, int64_t now_ms);

/* "request_id R, source_system S": the item's identity under the served
 * profile's field names ("item_id I, doc_id D"), "-" for a missing one.
 * Returns buf. */
char *cli_identity_text(const dlqb_item *it, char *buf, size_t cap);

/* ops_profile_is_dsr of the served profile: output then is exactly as
 * before pipelines. */
bool cli_identity_is_dsr(void);

/* The header of identity column `which` (0, 1) of item tables: dsr's
 * REQUEST_ID and SOURCE as always, another profile's field names in
 * capitals (ITEM_ID, DOC_ID). Returns buf or a constant. */
const char *cli_identity_column(int which, char *buf, size_t cap);

/* Header line matching cli_item_print. */
void cli_item_header(FILE *out);

/* The width item tables fit: 0 (no limit) with --wide; else COLUMNS when
 * set (a person's choice, and how a recording or a test asks for one);
 * else the terminal's width when stdout is one (80 if it does not say);
 * else no limit: a pipe into grep or a file keeps every character, and
 * scripts read --json. */
size_t cli_output_width(bool wide);

/* Gives the item table a LEFT column, the statutory time left under d
 * (inspect); call before cli_table_fit. NULL (the default): none. required:
 * never dropped for width (the table is sorted by it). */
void cli_table_deadlines(const dlqb_deadlines *d, bool required);

/* Adds "deadline" to an item's JSON: null when no rule applies, else
 * {"received_at", "due_at", "left_seconds"} (null when unknown); nothing
 * for a profile without legal_basis, which the deadlines follow. */
void cli_item_json_deadline(json_object *o, const dlqb_deadlines *d, const dlqb_item *it,
                            int64_t now_ms);

/* Lays the item table out for `columns` (0: every column, nothing cut),
 * for cli_item_header and cli_item_print. Cells are sanitised and cut
 * with an ellipsis, but never an id: MESSAGE_ID and REQUEST_ID are what
 * the operator types next, so they are whole, in columns as wide as
 * cli_table_ids says (a row with a longer one is longer). */
void cli_table_fit(size_t columns);
/* The widest message_id, request_id and source_system (characters) of the
 * rows about to be printed, when the caller knows them (inspect lists a
 * bounded number, gathered first); call before cli_table_fit. The id
 * columns take the ids' width, SOURCE no more than its rows need (up to
 * its default); 0: the default widths. */
void cli_table_ids(size_t message_id, size_t request_id, size_t source);
/* The first rows of an item table, held (up to CLI_ROWS_HELD) before the
 * first is printed, so that its id columns are as wide as their widest
 * ids (ids are never cut; a longer one further down makes a longer row).
 * inspect and the dry runs print their tables through one. */
#define CLI_ROWS_HELD 1000
typedef void (*cli_row_fn)(void *ctx, const dlqb_item *it, bool tag);
/* Lays a table out for rows whose widest message_id, request_id and
 * source_system are widths[0..2] (characters). */
typedef void (*cli_fit_fn)(void *ctx, const size_t widths[3]);
typedef struct {
  bool holding; /* rows are held (a text table of bounded width) */
  size_t fit_columns;
  cli_fit_fn fit;   /* NULL: the item table's (cli_table_ids, cli_table_fit) */
  cli_row_fn print; /* prints one row (tag: the caller's flag for it) */
  void *ctx;
  dlqb_item *it;
  bool *tag;
  size_t n, cap;
  bool out_of_memory;
} cli_rows;
/* holding: whether to hold at all (text, bounded width); fit_columns: what
 * cli_table_fit is given (the dry run's table leaves room for WOULD). */
void cli_rows_init(cli_rows *r, bool holding, size_t fit_columns, cli_row_fn print, void *ctx);
/* The same for a table of the caller's own, laid out by fit. */
void cli_rows_init_fit(cli_rows *r, bool holding, cli_fit_fn fit, cli_row_fn print, void *ctx);
/* A row: printed at once when not holding, else held (the held ones
 * printed, the widths set, once CLI_ROWS_HELD are). */
void cli_rows_add(cli_rows *r, const dlqb_item *it, bool tag);
/* Prints what is held and stops holding; frees it. */
void cli_rows_flush(cli_rows *r);
/* Frees what is held, printing nothing (a command that failed). */
void cli_rows_drop(cli_rows *r);
/* The characters of an id as its cell prints it (sanitised). */
size_t cli_id_chars(const char *id);

/* One cell of a text table, after a space unless *first: text sanitised
 * and cut to width with an ellipsis (width 0: never), except when whole
 * (an id: what the operator types next), then padded to width; the last
 * column is never padded. Sets *cut when it cut. The item tables' and
 * review list's cells alike. */
void cli_cell(FILE *out, const char *text, size_t width, bool whole, bool last, bool *first,
              bool *cut);

/* Whether a cell was cut; cli_table_note prints the line saying so. */
bool cli_table_was_cut(void);
void cli_table_note(FILE *out, size_t columns);

/* Prints json (and a newline) to stdout and drops the reference. */
void cli_print_json(json_object *json);

/* How a look was answered (dlqb/catalog_stream.h): one line (on stderr,
 * beside the table: "dlq-bridge: catalog as of ..."), and as the
 * "catalog" member of --json. */
void cli_catalog_print(FILE *out, const dlqb_catalog_view *v);
json_object *cli_catalog_json(const dlqb_catalog_view *v);

/* Progress on stderr, only when it is a terminal and not --json:
 * "\r<label>: 1200/5000 examined, ..." Call cli_progress_end to finish. */
void cli_progress(const cli_opts *o, const char *label, const dlqb_scan_result *r);
void cli_progress_end(const cli_opts *o);

/* ---- moving selected DLQ items (replay, escalate): dlqb/ops.h ------- */

/* The context of the library's passes for these options: o's config, the
 * pipeline cli_pipeline() serves, actor, selection and window. */
ops_ctx cli_context(const cli_opts *o);

/* The CLI's move: ops_move_pass in session (NULL: one of its own, none for
 * a dry run), printing the items (dry run, or --json), progress and the
 * summary. Returns the exit code. */
int cli_move_run(const cli_opts *o, const ops_move_spec *m, ops_session *session,
                 dlqb_stop_flag *stop);

#endif

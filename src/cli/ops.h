/* What the ops commands (replay, escalate, inspect, stats, resolve) share
 * above the core: their common flags, the operator's name, the audit
 * handle, and how an item is shown to a person or a script. Private to the
 * binary, like cli.h. */
#ifndef DLQB_OPS_H
#define DLQB_OPS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>

#include "cli.h"
#include "dlqb/audit.h"
#include "dlqb/deadline.h"
#include "dlqb/ledger.h"
#include "dlqb/scan.h"
#include "dlqb/select.h"
#include "dlqb/verdict.h"

/* Filters, shared by replay, escalate and inspect. */
#define OPS_FILTER_FLAGS                                                                       \
  {"id", true, "VALUE", "only the item(s) whose first identity field (dsr: request_id) is " \
   "VALUE"},                                                                                   \
  {"match", true, "FIELD=VALUE", "only items whose identity field FIELD (e.g. item_id) is "   \
   "VALUE"},                                                                                   \
  {"request-id", true, "ID", "only the item(s) with this request_id (dsr)"},                   \
  {"source-system", true, "NAME", "only items from this source_system (dsr)"},                 \
  {"legal-basis", true, "BASIS", "only items with this legal_basis (e.g. gdpr_art_17)"},       \
  {"reason", true, "TEXT", "only items whose last_error contains TEXT"},                       \
  {"group", true, "ID", "only items of this failure group (a GROUP id that stats lists)"},    \
  {"older-than", true, "DURATION", "only items in the DLQ longer than this (e.g. 2h, 7d)"},     \
  {"newer-than", true, "DURATION", "only items in the DLQ for less than this"}

/* Selection flags of the commands that move items (replay, escalate). */
#define OPS_SELECT_FLAGS                                                                       \
  {"all", false, NULL, "select every item (required when no filter is given)"},               \
  OPS_FILTER_FLAGS,                                                                            \
  {"limit", true, "N", "act on at most N items (the first N selected, in queue order; items "  \
   "skipped as complete do not count)"}

/* --wide: the commands that print item tables. */
#define OPS_WIDE_FLAG {"wide", false, NULL, "print whole columns instead of cutting them to the terminal's width"}

/* --json and --window: every ops command. */
#define OPS_OUTPUT_FLAGS                                                                       \
  {"json", false, NULL, "print JSON for scripts instead of text"},                             \
  {"window", true, "N", "messages in flight at once, 1 to 65535 (default 5000); items left in place do not count"}

/* --actor: who is acting, for the audit trail and the connection name. */
#define OPS_ACTOR_FLAG                                                                         \
  {"actor", true, "NAME", "who is acting, for the audit trail (default: your login name)"}

/* Flags of the ops commands that write the audit trail (that move or remove
 * items): these call ops_audit_start, so --no-audit comes with them. */
#define OPS_COMMON_FLAGS OPS_OUTPUT_FLAGS, OPS_ACTOR_FLAG, OPS_NO_AUDIT_FLAG

/* --no-audit: every command that calls ops_audit_start (drain run takes it
 * without --actor: its actor is always "drain"). */
#define OPS_NO_AUDIT_FLAG                                                                      \
  {"no-audit", false, NULL, "act even though no audit trail is configured (logged as a warning); " \
   "without it such a command refuses; a configured trail is always written"}

typedef struct {
  dlqb_config cfg;
  dlqb_select sel;
  bool json;
  char actor[128];
  int window;
  bool window_set;     /* --window given: not adjusted for --rate */
  bool quiet_progress; /* no progress line even on a terminal */
  bool dry_run;        /* --dry-run (replay, escalate): list, move nothing */
  bool no_audit;       /* --no-audit: acting without a configured trail is allowed */
  bool wide;           /* --wide: item tables are not cut to the terminal */
  double rate;         /* --rate (replay, escalate): moves per second, 0 = unlimited */
} ops_opts;

/* The largest --rate accepted. */
#define OPS_RATE_MAX 100000

/* --window's value: 1 to DLQB_SCAN_WINDOW_MAX, else DLQB_EINVAL naming the flag. */
dlqb_status ops_parse_window(const char *value, int *out, dlqb_error *err);

/* Handles the common, selection and movement (--dry-run, --rate) flags;
 * a command only declares the ones it takes. DLQB_EINVAL for anything else
 * ("unknown option"). A command's on_flag calls it for flags it does not
 * handle itself. */
dlqb_status ops_flag(ops_opts *o, const char *flag, const char *value, dlqb_error *err);

/* cli_load for an ops command: defaults (actor = login name), then flags.
 * Returns an exit code as cli_load does. */
int ops_load(const cli_spec *spec, int argc, char **argv, ops_opts *o, cli_flag_fn on_flag,
             void *ctx, bool *help);

/* The operator's login name ("unknown" when none): --actor's default. */
void ops_default_actor(char *buf, size_t len);

/* Opens the audit trail as writer "<command>@<instance>" for a command that
 * moves or removes items (dry runs and read-only commands do not call it).
 * With no audit_log configured it refuses, EXIT_USAGE with one line naming
 * where to set it, unless --no-audit: then *out is NULL, a warning naming
 * the command and the actor is logged, and EXIT_OK. EXIT_FAILURE_ when the
 * trail cannot be opened. (Not a bool: a refusal and a failure differ.) */
int ops_audit_start(const ops_opts *o, const char *command, dlqb_audit **out);

/* Opens the audit trail as `writer` with its anchor publisher (what
 * ops_audit_start does once the policy allows), for a caller that reports
 * errors its own way (the console's jobs). Close it with ops_audit_close.
 * Safe from several threads at once. */
dlqb_status ops_trail_open(const dlqb_config *cfg, const char *writer, dlqb_audit **out,
                           dlqb_error *err);

/* Ends what ops_audit_start or ops_trail_open opened: the chain_end, its anchor (a warning on
 * stderr when the broker cannot take it), then closes. NULL-safe. */
void ops_audit_close(dlqb_audit *audit);

/* Prints one line for a failed operation and returns EXIT_FAILURE_. */
int ops_fail(const dlqb_error *err);

/* "3d4h", "12m", "45s" (two largest units); "?" when unknown. */
char *ops_age_text(bool known, uint64_t age_ms, char *buf, size_t len);

/* The item as a JSON object (new reference), with its failure group id
 * ("group"). */
json_object *ops_item_json(const dlqb_item *it, int64_t now_ms);

/* The item as one human line (no newline): age, ids, basis, action,
 * attempt, dlq_reason and last_error. */
void ops_item_print(FILE *out, const dlqb_item *it, int64_t now_ms);

/* "request_id R, source_system S": the item's identity under the served
 * profile's field names ("item_id I, doc_id D"), "-" for a missing one.
 * Returns buf. */
char *ops_identity_text(const dlqb_item *it, char *buf, size_t cap);

/* True when the served profile's identity is dsr's (request_id,
 * source_system): output then is exactly as before pipelines. */
bool ops_identity_is_dsr(void);

/* The header of identity column `which` (0, 1) of item tables: dsr's
 * REQUEST_ID and SOURCE as always, another profile's field names in
 * capitals (ITEM_ID, DOC_ID). Returns buf or a constant. */
const char *ops_identity_column(int which, char *buf, size_t cap);

/* Header line matching ops_item_print. */
void ops_item_header(FILE *out);

/* The width item tables fit: 0 (no limit) with --wide; else COLUMNS when
 * set (a person's choice, and how a recording or a test asks for one);
 * else the terminal's width when stdout is one (80 if it does not say);
 * else no limit: a pipe into grep or a file keeps every character, and
 * scripts read --json. */
size_t ops_output_width(bool wide);

/* Gives the item table a LEFT column, the statutory time left under d
 * (inspect); call before ops_table_fit. NULL (the default): none. required:
 * never dropped for width (the table is sorted by it). */
void ops_table_deadlines(const dlqb_deadlines *d, bool required);

/* The time left as LEFT shows it: "19d4h", "-2h10m" when overdue, "?" when
 * unknown, "-" when no deadline applies. Returns buf. */
char *ops_left_text(const dlqb_deadline *d, char *buf, size_t len);

/* Adds "deadline" to an item's JSON: null when no rule applies, else
 * {"received_at", "due_at", "left_seconds"} (null when unknown). */
void ops_item_json_deadline(json_object *o, const dlqb_deadlines *d, const dlqb_item *it,
                            int64_t now_ms);

/* Lays the item table out for `columns` (0: every column, nothing cut),
 * for ops_item_header and ops_item_print. Cells are sanitised and cut
 * with an ellipsis. */
void ops_table_fit(size_t columns);

/* Whether a cell was cut; ops_table_note prints the line saying so. */
bool ops_table_was_cut(void);
void ops_table_note(FILE *out, size_t columns);

/* Prints json (and a newline) to stdout and drops the reference. */
void ops_print_json(json_object *json);

/* Progress on stderr, only when it is a terminal and not --json:
 * "\r<label>: 1200/5000 examined, ..." Call ops_progress_end to finish. */
void ops_progress(const ops_opts *o, const char *label, const dlqb_scan_result *r);
void ops_progress_end(const ops_opts *o);

/* Why a pass ended early, as a sentence for the summary, or NULL. */
const char *ops_early_stop(const dlqb_scan_result *r, int window);

/* ---- moving selected DLQ items (replay, escalate) --------------------- */


/* An edit's copy: its changes, its stamp, a replay's stamp and leaving review. */
#define OPS_MAX_SETS 30

typedef struct {
  const char *command;  /* "replay": connection name, audit writer, output */
  const char *target;   /* queue the selected items go to; NULL: removed (resolve) */
  dlqb_event event;     /* DLQB_EV_REPLAYED, DLQB_EV_ESCALATED */
  const char *verb;     /* "replayed", "escalated" */
  const char *cause;    /* hop cause: "operator" for escalate, "" for replay */
  bool dry_run;         /* list, move nothing */
  double rate;          /* moves per second; 0 = unlimited */
  const dlqb_ledger *ledger; /* completed tasks are removed as SKIPPED_COMPLETE; may be NULL */
  const dlqb_ledger_stats *ledger_stats; /* how the ledger was read, for --json; may be NULL */
  /* The audit trail, opened by the caller (replay opens it before it reads
   * the ledger, so an unwritable trail fails first); NULL: ops_move_run
   * opens its own (none for a dry run, or with --no-audit). */
  bool audit_started; /* the caller ran ops_audit_start (audit may be NULL) */
  dlqb_audit *audit;
  /* Writes the header changes for it into out (at most OPS_MAX_SETS);
   * strings must live until the next call. Returns how many. */
  size_t (*sets)(void *ctx, const dlqb_item *it, dlqb_hset *out);
  /* The hop's reason for the audit trail. */
  const char *(*reason)(void *ctx, const dlqb_item *it);
  void *ctx;
  /* A further condition on top of the selection (the console's checked
   * items); NULL: none. An item it refuses is left in place. */
  bool (*only)(void *only_ctx, const dlqb_item *it);
  void *only_ctx;
  /* End the pass once the selection's --limit is taken (resolve's one item)
   * instead of passing over the rest. */
  bool stop_at_limit;
  /* The queue passed over; NULL: the pipeline's DLQ (edit --queue review). */
  const char *source;
  /* Sees the whole message of an item the selection took, before anything
   * is done with it (edit: builds and validates the edited copy); false:
   * it is left in place. May replace the body the copy carries (*body must
   * live until the pass ends). Called with ctx. NULL: taken as it is. */
  bool (*accept)(void *ctx, const dlqb_delivery *d, const dlqb_item *it, amqp_bytes_t *body);
  /* Attached to every hop of the pass (edit's one item); NULL: none. */
  const dlqb_hop_edit *edit;
} ops_move_spec;

/* The dry run's WOULD column: "replay", "escalate", "skip". */
#define OPS_WOULD_WIDTH 8

/* The summary line of a pass: "replayed 4, skipped as complete 1, left 10
 * of 15 in dsr.dlq.manual", or for a dry run (verb "replay") "dry run: would
 * replay 4, would skip as complete 1, would leave 10 of 15": what would
 * remain, not today's depth. The skip part only with a ledger.
 * Returns buf. */
char *ops_move_summary(bool dry_run, const char *verb, uint64_t moved, bool ledger,
                       uint64_t skipped, uint64_t left, uint64_t total, const char *queue,
                       char *buf, size_t len);

/* What a caller sees of a move pass while it runs. Each may be NULL. */
typedef struct {
  /* A dry run's selected item: complete = it would be skipped as complete. */
  void (*listed)(void *ctx, const dlqb_item *it, bool complete, int64_t now_ms);
  /* A real run's item as it is taken (before its hop settles). */
  void (*taken)(void *ctx, const dlqb_item *it);
  /* A real run's hop, once its original was acked. */
  void (*acked)(void *ctx, const dlqb_hop *hop);
  /* About once a second: the pass so far. */
  void (*tick)(void *ctx, const dlqb_scan_result *r);
  void *ctx;
} ops_move_watch;

/* How a move pass ended. */
typedef struct {
  dlqb_status status;   /* dlqb_scan_run's */
  dlqb_error err;
  dlqb_scan_result r;
  bool not_started;     /* lost before the first item: nothing happened, err says why */
  uint64_t moved;       /* moved (a dry run: would move) */
  uint64_t skipped;     /* skipped as complete (a dry run: would skip) */
  uint64_t left;        /* what stays (a dry run: would stay) of r.depth_at_start */
  int window;           /* the window the pass used */
  /* Why it ended early, as a sentence; "" when it covered the queue. */
  char early[DLQB_ERROR_MAX + 256];
} ops_move_outcome;

/* The one move core, under replay, escalate and the console: passes over
 * the DLQ once, taking the items o->sel selects (skipping what m->ledger
 * holds as complete), through the audit trail `audit` (NULL: none; a real
 * run must pass one when audit is on). Prints nothing. */
void ops_move_pass(const ops_opts *o, const ops_move_spec *m, dlqb_audit *audit,
                   const ops_move_watch *w, dlqb_stop_flag *stop, ops_move_outcome *out);

/* The CLI's move: ops_move_pass, printing the items (dry run, or --json),
 * progress and the summary. Returns the exit code. */
int ops_move_run(const ops_opts *o, const ops_move_spec *m, dlqb_stop_flag *stop);

/* ---- the most urgent items of a pass (inspect --sort deadline, the console) */

/* One kept item, its deadline and its place in the queue (ties keep queue
 * order). */
typedef struct {
  dlqb_item it;
  dlqb_deadline d;
  uint64_t seq;
} ops_kept;

/* The cap most urgent items seen: a bounded max-heap (the least urgent kept
 * at [0]), so a million-item DLQ costs cap items of memory and log(cap) a
 * step; ops_urgent_sort then orders them most urgent first. */
typedef struct {
  ops_kept *kept;
  size_t n, cap;
} ops_urgent;

bool ops_urgent_init(ops_urgent *u, size_t cap); /* false: out of memory */
void ops_urgent_keep(ops_urgent *u, const dlqb_item *it, dlqb_deadline d, uint64_t seq);
void ops_urgent_sort(ops_urgent *u);
void ops_urgent_free(ops_urgent *u);

/* ---- the actions' pieces (ops_actions.c): CLI commands and console ---- */

/* Who acts and when, stamped on every item a move takes. */
typedef struct {
  char actor[128];
  char now[DLQB_ISO_TIME_MAX];
  bool has_note;
  char note[DLQB_LAST_ERROR_MAX + 1]; /* escalate's --note */
} ops_stamp;

/* actor and now (the current time); note may be NULL. */
void ops_stamp_init(ops_stamp *st, const char *actor, const char *note);

/* Reads the whole completion ledger for replay: a real run as
 * dlqb_ledger_load (writing its end marker and the cache), a dry run as
 * dlqb_ledger_peek (writing nothing). A failure must stop the replay:
 * replaying on a partial ledger could re-run a completed erasure. */
dlqb_status ops_replay_ledger(const dlqb_config *cfg, bool dry_run, dlqb_ledger *ledger,
                              dlqb_ledger_stats *ls, dlqb_error *err);

/* The move spec of replay (to dsr.work, attempts reset, replay_count + 1)
 * and of escalate (to compliance_review, escalation stamps and st's note).
 * The caller adds ledger, ledger_stats and audit. st must outlive the pass. */
void ops_replay_spec(ops_move_spec *m, ops_stamp *st, bool dry_run, double rate);
void ops_escalate_spec(ops_move_spec *m, ops_stamp *st, bool dry_run, double rate);

/* The move spec of resolving: the selected items leave the DLQ (acked,
 * nothing published), audited as resolved with st's note as the reason. */
void ops_resolve_spec(ops_move_spec *m, ops_stamp *st, bool dry_run);

#endif

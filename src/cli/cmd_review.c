/* dlq-bridge review: the custody of compliance_review items. Its
 * subcommands (list here; claim and decide in cmd_review_custody.c) are a
 * second small table in this file, as for `audit`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/clock.h"
#include "dlqb/columns.h"
#include "dlqb/review.h"
#include "dlqb/text.h"
#include "dlqb/topology.h"
#include "ops_cli.h"
#include "review_cli.h"

/* ---- how an item is shown ---- */

static void put_str_or_null(json_object *o, const char *key, const char *v) {
  json_object_object_add(o, key, v[0] != '\0' ? json_object_new_string(v) : NULL);
}

static void put_time_or_null(json_object *o, const char *key, bool has, int64_t ms) {
  char iso[DLQB_ISO_TIME_MAX];
  json_object_object_add(o, key,
                         has ? json_object_new_string(dlqb_iso_time(ms, iso, sizeof iso)) : NULL);
}

json_object *review_item_json(const dlqb_item *it, int64_t now_ms) {
  json_object *j = cli_item_json(it, now_ms);
  uint64_t age = 0, claimed = 0;
  bool known = dlqb_review_age(it, now_ms, &age);
  bool claim_known = dlqb_review_claim_age(it, now_ms, &claimed);
  json_object_object_add(j, "age_seconds",
                         known ? json_object_new_int64((int64_t)(age / 1000)) : NULL);
  put_str_or_null(j, "escalated_by", it->escalated_by);
  put_time_or_null(j, "escalated_at", it->has_escalated_at, it->escalated_at_ms);
  put_str_or_null(j, "escalation_reason", it->escalation_reason);
  put_str_or_null(j, "escalation_note", it->escalation_note);
  put_str_or_null(j, "owner", it->owner);
  put_time_or_null(j, "claimed_at", it->owner[0] != '\0' && it->has_claimed_at, it->claimed_at_ms);
  json_object_object_add(j, "claimed_seconds",
                         claim_known ? json_object_new_int64((int64_t)(claimed / 1000)) : NULL);
  return j;
}

/* ---- review list ---- */

static const cli_flag list_flags[] = {
    {"id", true, "VALUE", "only the item(s) whose first identity field (dsr: request_id) is VALUE"},
    {"match", true, "FIELD=VALUE", "only items whose identity field FIELD (e.g. item_id) is VALUE"},
    {"request-id", true, "ID", "only the item(s) with this request_id (dsr)"},
    {"source-system", true, "NAME", "only items from this source_system (dsr)"},
    {"legal-basis", true, "BASIS", "only items with this legal_basis (e.g. gdpr_art_17)"},
    {"owner", true, "NAME", "only items claimed by NAME"},
    {"unclaimed", false, NULL, "only items nobody has claimed"},
    {"limit", true, "N", "list at most N items (the first N selected, in queue order)"},
    CLI_SCAN_FLAG,
    CLI_OUTPUT_FLAGS,
    CLI_ACTOR_FLAG, /* read-only: no --no-audit */
    {NULL, false, NULL, NULL},
};

static const cli_spec list_spec = {
    .name = "review list",
    .summary = "what waits in compliance_review, why, and who owns it",
    .usage = "dlq-bridge review list [--id VALUE] [--match FIELD=VALUE]\n"
             "       [--request-id ID] [--source-system NAME] [--legal-basis B]\n"
             "       [--owner NAME | --unclaimed] [--limit N] [--scan] [--json]",
    .details = "Lists the items of compliance_review: age in review (since escalated_at),\n"
               "request_id, source_system, legal_basis, message_id, who escalated it and why\n"
               "(escalated_by, escalation_reason, escalation_note), and its owner with the time\n"
               "since the claim. As inspect, it answers from the catalog while the catalog\n"
               "agrees with the queue's depth (a line on stderr says how), else (and with\n"
               "--scan) it reads the queue: nothing is consumed, every item returns to its\n"
               "place when the pass ends. Payloads are never shown. On another pipeline\n"
               "(--pipeline) its review queue, and its profile's identity fields in place\n"
               "of request_id and source_system (--id, --match FIELD=VALUE select by them).",
    .flags = list_flags,
    .settings = true,
};

typedef struct {
  cli_opts o;
  const char *owner;
  bool unclaimed;
  uint64_t listed, unclaimed_listed, listed_printed;
  int64_t now_ms;
  size_t columns; /* cli_output_width */
  cli_rows rows;
  json_object *items;
} list_ctx;

static dlqb_status list_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  list_ctx *c = ctx;
  if (flag != NULL && strcmp(flag, "owner") == 0) {
    if (value[0] == '\0') return dlqb_fail(err, DLQB_EINVAL, "--owner needs a non-empty value");
    c->owner = value;
    return DLQB_OK;
  }
  if (flag != NULL && strcmp(flag, "unclaimed") == 0) {
    c->unclaimed = true;
    return DLQB_OK;
  }
  return cli_opts_flag(&c->o, flag, value, err);
}

static const char *or_dash(const char *s) { return s[0] != '\0' ? s : "-"; }

/* LEGAL_BASIS only where the served profile has it (the dsr one). */
static bool has_basis(void) { return cli_profile_has(DLQB_H_LEGAL_BASIS); }

/* The review table's columns. At a bounded width (cli_output_width) the
 * optional ones go first, highest keep first, and cells are cut, never an
 * id (the message_id is what claim and decide take): as inspect's. */
enum { R_AGE, R_ID, R_SOURCE, R_BASIS, R_MSGID, R_BY, R_WHY, R_OWNER, R_CLAIMED, R_NOTE, R_N };
static const dlqb_column review_cols[R_N] = {
    {"AGE", 8, 0},         {"REQUEST_ID", 24, 0},   {"SOURCE", 14, 0}, {"LEGAL_BASIS", 13, 5},
    {"MESSAGE_ID", 24, 0}, {"ESCALATED_BY", 14, 4}, {"WHY", 12, 1},    {"OWNER", 12, 2},
    {"CLAIMED", 8, 3},     {"NOTE", 0, 0},
};
static dlqb_layout review_table;
static bool review_unlimited = true;

/* Lays the table out for `columns` (0: every column, padded, nothing cut),
 * its id columns as wide as their widest ids (widths[]: request_id,
 * message_id; 0: the default). */
static void review_fit(size_t columns, size_t id_width, size_t msgid_width) {
  dlqb_column cols[R_N];
  int map[R_N];
  size_t n = 0;
  char a[DLQB_HEADER_NAME_MAX], b[DLQB_HEADER_NAME_MAX];
  for (int i = 0; i < R_N; i++) {
    if (i == R_BASIS && !has_basis()) continue;
    cols[n] = review_cols[i];
    if (i == R_ID) cols[n].name = cli_identity_column(0, a, sizeof a);
    if (i == R_SOURCE) cols[n].name = cli_identity_column(1, b, sizeof b);
    if (columns > 0 && i == R_ID && id_width > 0) cols[n].width = id_width;
    if (columns > 0 && i == R_MSGID && msgid_width > 0) cols[n].width = msgid_width;
    if (cols[n].width > 0 && strlen(cols[n].name) > cols[n].width)
      cols[n].width = strlen(cols[n].name);
    map[n++] = i;
  }
  dlqb_columns_fit_map(cols, map, n, columns, 10, 24, &review_table);
  review_unlimited = columns == 0;
}

static void cell(int col, const char *text, bool *first) {
  if (!review_table.shown[col]) return;
  bool cut; /* review list says nothing of a cut: --json has every field whole */
  cli_cell(stdout, text, review_table.width[col], review_unlimited || col == R_ID || col == R_MSGID,
           col == R_NOTE, first, &cut);
}

static void list_header(void) {
  char a[DLQB_HEADER_NAME_MAX], b[DLQB_HEADER_NAME_MAX];
  bool first = true;
  for (int i = 0; i < R_N; i++) {
    const char *name = i == R_ID       ? cli_identity_column(0, a, sizeof a)
                       : i == R_SOURCE ? cli_identity_column(1, b, sizeof b)
                                       : review_cols[i].name;
    cell(i, name, &first);
  }
  putchar('\n');
}

static void list_fit(void *ctx, const size_t w[3]);

static void list_print(void *ctx, const dlqb_item *it, bool tag) {
  list_ctx *c = ctx;
  (void)tag;
  if (c->listed_printed++ == 0) list_header();
  char age[32], claimed[32];
  uint64_t a = 0, ca = 0;
  bool known = dlqb_review_age(it, c->now_ms, &a);
  bool claim_known = dlqb_review_claim_age(it, c->now_ms, &ca);
  if (it->owner[0] == '\0') snprintf(claimed, sizeof claimed, "-");
  else ops_age_text(claim_known, ca, claimed, sizeof claimed);
  bool first = true;
  cell(R_AGE, ops_age_text(known, a, age, sizeof age), &first);
  cell(R_ID, or_dash(it->request_id), &first);
  cell(R_SOURCE, or_dash(it->source_system), &first);
  cell(R_BASIS, or_dash(it->legal_basis), &first);
  cell(R_MSGID, or_dash(it->message_id), &first);
  cell(R_BY, or_dash(it->escalated_by), &first);
  cell(R_WHY, or_dash(it->escalation_reason), &first);
  cell(R_OWNER, or_dash(it->owner), &first);
  cell(R_CLAIMED, claimed, &first);
  cell(R_NOTE, or_dash(it->escalation_note), &first);
  putchar('\n');
}

static void list_fit(void *ctx, const size_t w[3]) {
  list_ctx *c = ctx;
  review_fit(c->columns, w[1], w[0]);
}

static dlqb_status list_item(void *ctx, const dlqb_item *it, const dlqb_delivery *d, bool *enough,
                             dlqb_error *err) {
  list_ctx *c = ctx;
  (void)d, (void)err;
  if (c->unclaimed && it->owner[0] != '\0') return DLQB_OK;
  if (c->owner != NULL && strcmp(c->owner, it->owner) != 0) return DLQB_OK;
  dlqb_verdict_rule rule = {.sel = &c->o.sel, .stop_at_limit = true};
  dlqb_verdict v = dlqb_verdict_of(&rule, it, c->now_ms, c->listed);
  if (v.kind == DLQB_VERDICT_HOLD) return DLQB_OK;
  c->listed++;
  if (it->owner[0] == '\0') c->unclaimed_listed++;
  if (c->o.json) {
    json_object_array_add(c->items, review_item_json(it, c->now_ms));
  } else {
    cli_rows_add(&c->rows, it, false);
  }
  *enough = v.stop_after;
  return DLQB_OK;
}

static int review_list(int argc, char **argv) {
  list_ctx c;
  memset(&c, 0, sizeof c);
  bool help;
  int rc = cli_opts_load(&list_spec, argc, argv, &c.o, list_flag, &c, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&list_spec, stdout);
    return EXIT_OK;
  }
  if (c.owner != NULL && c.unclaimed) {
    cli_error("--owner and --unclaimed exclude each other");
    return EXIT_USAGE;
  }
  dlqb_error err;
  if (dlqb_select_validate(&c.o.sel, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_USAGE;
  }
  c.now_ms = dlqb_now_ms();
  c.columns = cli_output_width(false);
  review_fit(c.columns, 0, 0);
  cli_rows_init_fit(&c.rows, !c.o.json && c.columns > 0, list_fit, list_print, &c);
  if (c.o.json) c.items = json_object_new_array();
  ops_look look = {.queue = cli_pipeline()->review,
                   .source = c.o.scan ? OPS_LOOK_QUEUE : OPS_LOOK_CATALOG,
                   .compare = true,
                   .purpose = "dlq-bridge review list",
                   .actor = c.o.actor,
                   .window = c.o.window,
                   .stop = cli_stop_flag(),
                   .on_item = list_item,
                   .ctx = &c};
  dlqb_status st = ops_look_run(c.o.cfg, &look, &err);
  const dlqb_scan_result r = look.r;
  const dlqb_catalog_view view = look.view;
  if (st != DLQB_OK) {
    cli_rows_drop(&c.rows);
    json_object_put(c.items);
    return cli_fail(&err);
  }
  cli_rows_flush(&c.rows);
  if (c.o.json) cli_print_json(c.items);
  else if (c.listed == 0)
    printf("no items%s in %s (%llu examined)\n",
           dlqb_select_given(&c.o.sel) || c.owner || c.unclaimed ? " match" : "",
           cli_pipeline()->review, (unsigned long long)r.examined);
  else
    printf("%llu item%s listed (%llu unclaimed), %llu examined, %llu in %s\n",
           (unsigned long long)c.listed, c.listed == 1 ? "" : "s",
           (unsigned long long)c.unclaimed_listed, (unsigned long long)r.examined,
           (unsigned long long)r.depth_at_start, cli_pipeline()->review);
  if (!c.o.json) cli_catalog_print(stderr, &view);
  const char *early = r.stopped ? NULL : ops_early_stop(&r, c.o.window);
  if (early != NULL) {
    cli_error("review list %s", early);
    return EXIT_RUNTIME;
  }
  return EXIT_OK;
}

/* ---- the subcommand table ---- */

static const cli_subcommand subcommands[] = {
    {"list", review_list},
    {"claim", review_claim},
    {"decide", review_decide},
};
#define NSUB (sizeof subcommands / sizeof subcommands[0])

const cli_spec cmd_review_spec = {
    .name = "review",
    .summary = "list, claim and decide compliance_review items, each step audited",
    .usage = "dlq-bridge review SUBCOMMAND [options]",
    .details =
        "subcommands:\n"
        "  list [FILTER...]   what waits in compliance_review, why, and who owns it\n"
        "  claim --message-id ID\n"
        "                     take ownership of an item (--force over another owner)\n"
        "  decide --message-id ID (--replay | --resolve --note TEXT | --return)\n"
        "                     the owner's decision: to dsr.work, removed, or back to the DLQ\n"
        "\n"
        "`dlq-bridge review SUBCOMMAND --help` shows a subcommand's options.",
    .flags = NULL,
    .settings = false,
};

int cmd_review(int argc, char **argv) {
  return cli_run_subcommand(&cmd_review_spec, subcommands, NSUB, argc, argv);
}

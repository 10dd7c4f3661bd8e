/* dlq-bridge inspect: list DLQ items without moving or reordering them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "dlqb/log.h"
#include "dlqb/text.h"
#include "dlqb/topology.h"
#include "ops_cli.h"

#define PAYLOAD_SHOWN_MAX (64 * 1024)
/* --sort deadline keeps the most urgent items in memory (a dlqb_item is a
 * few KiB): this many by default, at most SORT_MAX (--limit). */
#define SORT_DEFAULT 1000
#define SORT_MAX     10000
/* At a terminal, without --limit or --all: a screenful, not every item of
 * a DLQ thousands deep (the runbook gave --limit 20 every time). */
#define TERMINAL_LIMIT 50

static const cli_flag flags[] = {
    {"all", false, NULL, "list every item (at a terminal, more than the first 50)"},
    CLI_FILTER_FLAGS,
    {"limit", true, "N", "list at most N items (the first N selected, in queue order)"},
    {"show-payload", false, NULL,
     "also print each message body (hidden by default; reads the queue)"},
    CLI_SCAN_FLAG,
    {"queue", true, "NAME", "list another classic queue, e.g. compliance_review"},
    {"sort", true, "KEY",
     "queue (the default: queue order) or deadline (least statutory time left first)"},
    CLI_WIDE_FLAG,
    CLI_OUTPUT_FLAGS,
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_inspect_spec = {
    .name = "inspect",
    .summary = "list DLQ items and why they failed, without consuming them",
    .usage =
        "dlq-bridge inspect [FILTER...] [--limit N] [--sort deadline] [--show-payload] [--scan] "
        "[--wide] [--json]",
    .details = "Lists the items of dsr.dlq.manual (age, the statutory time left, message_id,\n"
               "request_id, source_system, then legal_basis, action, attempt and dlq_reason\n"
               "as the width allows, and last_error) with the same filters as replay; no\n"
               "filter lists everything. LEFT is the time until the deadline that the item's\n"
               "legal_basis implies (the deadlines setting; from the earliest time on the\n"
               "item, normally first_seen_at): '-2h10m' is overdue, '?' unknown (no usable\n"
               "time), '-' none. --sort deadline reads the whole queue and lists the --limit\n"
               "(default 1000, at most 10000) most urgent selected items, unknown first.\n"
               "On a terminal the columns are cut to its width (or to COLUMNS) with an\n"
               "ellipsis; --wide, a pipe or --json shows everything in full. AGE counts\n"
               "from the same time as stats (the later of dlq_at and escalated_at).\n"
               "It answers from the catalog (the DLQ's and review queue's contents as the\n"
               "bridge's movers recorded them in the dsr.catalog stream) when the catalog\n"
               "agrees with the queue's depth, so any number of looks at once each see\n"
               "every item and nothing is held; a line on stderr says how fresh. When\n"
               "it does not agree (items taken or added outside the bridge, not yet\n"
               "corrected by a verifying pass), and with --scan or --show-payload, inspect\n"
               "reads the queue itself: every message is received without an ack and\n"
               "returns to its place when inspect disconnects (order and content\n"
               "unchanged; a quorum DLQ counts one more delivery of each, against a limit\n"
               "no read reaches), and while it reads the items are invisible to other\n"
               "consumers.\n"
               "Payloads are hidden unless --show-payload.\n"
               "--json prints {\"queue\": Q, \"examined\": N, \"total\": N, \"listed\": N,\n"
               "\"complete\": true|false, \"catalog\": {...}, \"items\": [...]}; total is the\n"
               "depth at the start (the catalog's count when it answered); catalog says how\n"
               "the look was answered (source, as_of, count, depth, agrees, why_scan).\n"
               "each item has its failure group (\"group\") and \"deadline\": null, or\n"
               "{\"received_at\", \"due_at\", \"left_seconds\"} (null when unknown).",
    .flags = flags,
    .settings = true,
    .uses =
        (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, "deadlines", CLI_USES_CATALOG, NULL},
};

typedef struct {
  cli_opts o;
  bool show_payload;
  bool sort_deadline;
  ops_urgent urgent; /* --sort deadline: the most urgent items */
  uint64_t selected;
  const char *queue;
  uint64_t listed;
  int64_t now_ms;
  json_object *items;
  char *payload; /* scratch */
  cli_rows rows; /* the text table's first rows, held to fit the ids */
  bool header_done;
} inspect_ctx;

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  inspect_ctx *c = ctx;
  if (flag != NULL && strcmp(flag, "show-payload") == 0) {
    c->show_payload = true;
    return DLQB_OK;
  }
  if (flag != NULL && strcmp(flag, "sort") == 0) {
    if (strcmp(value, "queue") != 0 && strcmp(value, "deadline") != 0) {
      char q[DLQB_QUOTE_BUF];
      return dlqb_fail(err, DLQB_EINVAL, "--sort: '%s' is not queue or deadline",
                       dlqb_text_quote(q, value, strlen(value)));
    }
    c->sort_deadline = strcmp(value, "deadline") == 0;
    return DLQB_OK;
  }
  if (flag != NULL && strcmp(flag, "queue") == 0) {
    if (strcmp(value, cli_pipeline()->dlq) != 0 && strcmp(value, cli_pipeline()->review) != 0)
      return dlqb_fail(err, DLQB_EINVAL,
                       "--queue: only %s and %s can be inspected (reading another "
                       "queue would count deliveries against its limit)",
                       cli_pipeline()->dlq, cli_pipeline()->review);
    c->queue = value;
    return DLQB_OK;
  }
  return cli_opts_flag(&c->o, flag, value, err);
}

static const char *payload_text(inspect_ctx *c, amqp_bytes_t body) {
  size_t n = body.len < PAYLOAD_SHOWN_MAX ? body.len : PAYLOAD_SHOWN_MAX;
  dlqb_text_sanitize(c->payload, PAYLOAD_SHOWN_MAX + 1, body.bytes, n);
  return c->payload;
}

/* One row of the text table. */
static void print_row(void *ctx, const dlqb_item *it, bool tag) {
  inspect_ctx *c = ctx;
  (void)tag;
  if (!c->header_done) cli_item_header(stdout);
  c->header_done = true;
  cli_item_print(stdout, it, c->now_ms);
  putchar('\n');
}

static void list_one(inspect_ctx *c, const dlqb_item *it, const amqp_bytes_t *body) {
  c->listed++;
  if (c->o.json) {
    json_object *j = cli_item_json(it, c->now_ms);
    cli_item_json_deadline(j, &c->o.cfg->deadlines, it, c->now_ms);
    if (c->show_payload && body != NULL)
      json_object_object_add(j, "payload", json_object_new_string(payload_text(c, *body)));
    json_object_array_add(c->items, j);
  } else if (c->show_payload) {
    print_row(c, it, false);
    if (body != NULL) printf("    payload: %s\n", payload_text(c, *body));
  } else {
    cli_rows_add(&c->rows, it, false);
  }
}

static dlqb_status inspect_item(void *ctx, const dlqb_item *it, const dlqb_delivery *d,
                                bool *enough, dlqb_error *err) {
  inspect_ctx *c = ctx;
  (void)err;
  if (c->sort_deadline) {
    /* The whole queue is read: --limit counts the kept, not the first. */
    if (!dlqb_select_match(&c->o.sel, it, c->now_ms)) return DLQB_OK;
    ops_urgent_keep(&c->urgent, it, dlqb_item_deadline(&c->o.cfg->deadlines, it, c->now_ms),
                    c->selected);
    c->selected++;
    return DLQB_OK;
  }
  dlqb_verdict_rule rule = {.sel = &c->o.sel, .stop_at_limit = true};
  dlqb_verdict v = dlqb_verdict_of(&rule, it, c->now_ms, c->listed);
  if (v.kind == DLQB_VERDICT_HOLD) return DLQB_OK;
  list_one(c, it, d != NULL ? &d->body : NULL);
  c->selected++;
  *enough = v.stop_after;
  return DLQB_OK;
}

int cmd_inspect(int argc, char **argv) {
  inspect_ctx c;
  memset(&c, 0, sizeof c);
  bool help;
  int rc = cli_opts_load(&cmd_inspect_spec, argc, argv, &c.o, on_flag, &c, &help);
  if (rc != EXIT_OK) return rc;
  /* The chosen pipeline's DLQ: known once the options are parsed. */
  if (c.queue == NULL) c.queue = cli_pipeline()->dlq;
  if (help) {
    cli_print_help(&cmd_inspect_spec, stdout);
    return EXIT_OK;
  }
  dlqb_error err;
  if (dlqb_select_validate(&c.o.sel, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_USAGE;
  }
  if (c.sort_deadline) {
    if (c.show_payload) {
      cli_error("--sort deadline cannot be combined with --show-payload (payloads are not kept)");
      return EXIT_USAGE;
    }
    if (c.o.sel.limit > SORT_MAX) {
      cli_error("--sort deadline keeps at most %d items: give --limit up to %d", SORT_MAX,
                SORT_MAX);
      return EXIT_USAGE;
    }
    if (!ops_urgent_init(&c.urgent, c.o.sel.limit > 0 ? (size_t)c.o.sel.limit : SORT_DEFAULT)) {
      cli_error("out of memory");
      return EXIT_RUNTIME;
    }
  }
  bool capped =
      !c.o.json && !c.sort_deadline && c.o.sel.limit == 0 && !c.o.sel.all && isatty(STDOUT_FILENO);
  if (capped) c.o.sel.limit = TERMINAL_LIMIT;
  dlqb_stop_flag *stop = cli_stop_flag();
  if (c.show_payload && (c.payload = malloc(PAYLOAD_SHOWN_MAX + 1)) == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  c.now_ms = dlqb_now_ms();
  size_t columns = cli_output_width(c.o.wide);
  cli_table_deadlines(&c.o.cfg->deadlines, c.sort_deadline);
  cli_table_fit(columns);
  cli_rows_init(&c.rows, !c.o.json && columns > 0 && !c.show_payload, columns, print_row, &c);
  if (c.o.json) c.items = json_object_new_array();
  /* The payloads are in the messages, which only the queue holds. */
  ops_look look = {.queue = c.queue,
                   .source = c.o.scan || c.show_payload ? OPS_LOOK_QUEUE : OPS_LOOK_CATALOG,
                   .compare = true,
                   .purpose = "dlq-bridge inspect",
                   .actor = c.o.actor,
                   .window = c.o.window,
                   .stop = stop,
                   .on_item = inspect_item,
                   .ctx = &c};
  dlqb_status st = ops_look_run(c.o.cfg, &look, &err);
  const dlqb_scan_result r = look.r;
  const dlqb_catalog_view view = look.view;
  free(c.payload);
  if (st != DLQB_OK) {
    ops_urgent_free(&c.urgent);
    cli_rows_drop(&c.rows);
    json_object_put(c.items);
    return cli_fail(&err);
  }
  if (c.sort_deadline) {
    ops_urgent_sort(&c.urgent);
    for (size_t i = 0; i < c.urgent.n; i++) list_one(&c, &c.urgent.kept[i].it, NULL);
    ops_urgent_free(&c.urgent);
  }
  cli_rows_flush(&c.rows);
  const char *early = r.stopped ? NULL : ops_early_stop(&r, c.o.window);
  if (c.o.json) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "queue", json_object_new_string(c.queue));
    json_object_object_add(j, "examined", json_object_new_int64((int64_t)r.examined));
    json_object_object_add(j, "total", json_object_new_int64((int64_t)r.depth_at_start));
    json_object_object_add(j, "listed", json_object_new_int64((int64_t)c.listed));
    json_object_object_add(j, "selected", json_object_new_int64((int64_t)c.selected));
    json_object_object_add(j, "sort",
                           json_object_new_string(c.sort_deadline ? "deadline" : "queue"));
    json_object_object_add(j, "complete", json_object_new_boolean(early == NULL));
    json_object_object_add(j, "catalog", cli_catalog_json(&view));
    if (early != NULL) json_object_object_add(j, "stopped_early", json_object_new_string(early));
    json_object_object_add(j, "items", c.items);
    cli_print_json(j);
  } else if (c.listed == 0) {
    printf("no items%s in %s (%llu examined)\n", dlqb_select_given(&c.o.sel) ? " match" : "",
           c.queue, (unsigned long long)r.examined);
  } else {
    printf("%llu item%s listed%s, %llu examined, %llu in %s\n", (unsigned long long)c.listed,
           c.listed == 1 ? "" : "s",
           c.sort_deadline && c.selected > c.listed ? " (the most urgent of those selected)" : "",
           (unsigned long long)r.examined, (unsigned long long)r.depth_at_start, c.queue);
    if (capped && c.listed == TERMINAL_LIMIT && r.depth_at_start > c.listed)
      printf("(the first %d: --limit N lists more, --all every one)\n", TERMINAL_LIMIT);
    cli_table_note(stdout, columns);
  }
  if (!c.o.json) cli_catalog_print(stderr, &view);
  if (early != NULL) {
    cli_error("inspect %s", early);
    return EXIT_RUNTIME;
  }
  return EXIT_OK;
}

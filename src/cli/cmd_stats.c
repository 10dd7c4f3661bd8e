/* dlq-bridge stats: depth and oldest age of each queue, the DLQ broken down
 * by dlq_reason or (--by group) by failure group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/group.h"
#include "dlqb/link.h"
#include "dlqb/log.h"
#include "dlqb/queue_stats.h"
#include "dlqb/text.h"
#include "dlqb/topology.h"
#include "ops_cli.h"

#define MAX_REASONS 32

static const cli_flag flags[] = {
    {"json", false, NULL, "print JSON for scripts instead of text"},
    {"window", true, "N",
     "DLQ messages read ahead at once for the breakdown, 1 to 65535 (default 5000)"},
    {"by", true, "WHAT",
     "break the DLQ down by reason (dlq_reason, the default) or group (failure group)"},
    {"max-groups", true, "N",
     "with --by group: groups kept, 1 to 100000 (default 1000); the rest count as other"},
    CLI_SCAN_FLAG,
    CLI_WIDE_FLAG,
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_stats_spec = {
    .name = "stats",
    .summary = "queue depths, oldest-message ages and the DLQ broken down by reason",
    .usage = "dlq-bridge stats [--by reason|group] [--max-groups N] [--scan] [--wide] [--json]",
    .details =
        "Depth (passive declare) of dsr.work, dsr.failed, every retry queue,\n"
        "dsr.dlq.manual and compliance_review. The age of the oldest message of the\n"
        "DLQ and review queue comes from the head message's dlq_at / escalated_at,\n"
        "read without consuming it. The other queues are never read (a requeue\n"
        "counts as a delivery and could poison a task), and RabbitMQ reports no age\n"
        "for them: a\n"
        "one-off stats knows their age only when they are empty ('-', null in JSON);\n"
        "the daemon's metrics track it over time. The DLQ's breakdown by dlq_reason\n"
        "comes from the catalog (dsr.catalog) when it agrees with the DLQ's depth,\n"
        "holding nothing; otherwise, and with --scan, it reads every DLQ item\n"
        "without an ack (nothing moves or changes order). A stderr line says which.\n"
        "--by group counts the DLQ by failure group instead: items of the same\n"
        "dlq_reason and source_system whose last_error differs only in ids, numbers,\n"
        "hex, UUIDs, times, e-mail addresses and quoted values. Each group has an id\n"
        "(12 hex digits, stable) to pass to replay, escalate or inspect --group, its\n"
        "count, oldest and newest age, the error template and one sample error. At\n"
        "most --max-groups groups are kept (memory stays bounded however many\n"
        "distinct errors a DLQ holds); items of any further cause count as 'other',\n"
        "and stats says so.\n"
        "--json prints {\"queues\": {\"<name>\": {\"depth\": N, \"oldest_age_seconds\": S},\n"
        "...}, \"dlq_reasons\": {\"<reason>\": N, ...}}; with --by group also\n"
        "\"groups\": [{\"id\", \"count\", \"oldest_age_seconds\", \"newest_age_seconds\",\n"
        "\"dlq_reason\", \"source_system\", \"template\", \"sample\"}, ...] (most items\n"
        "first), \"other\": {\"count\", ...} and \"max_groups\": N; \"catalog\": how the\n"
        "breakdown was answered (as inspect --json).",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_TOPOLOGY,
                                  CLI_USES_CATALOG, NULL},
};

typedef struct {
  char name[32];
  uint64_t count;
} reason_row;

typedef struct {
  cli_opts o;
  reason_row reasons[MAX_REASONS];
  size_t nreasons;
  bool by_group;
  size_t max_groups;
  dlqb_groups *groups; /* --by group */
  int64_t now_ms;
  dlqb_catalog_view view; /* how the breakdown was answered */
} stats_ctx;

static const char *age_source_name(const dlqb_queue_stat *r) {
  switch (r->age_source) {
  case DLQB_AGE_EMPTY: return "empty";
  case DLQB_AGE_HEAD: return "head";
  case DLQB_AGE_EMPTY_SINCE: return "empty_since";
  case DLQB_AGE_UNKNOWN:
  default: return "unknown";
  }
}

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  stats_ctx *c = ctx;
  if (flag != NULL &&
      (strcmp(flag, "json") == 0 || strcmp(flag, "window") == 0 || strcmp(flag, "wide") == 0))
    return cli_opts_flag(&c->o, flag, value, err);
  if (flag != NULL && strcmp(flag, "by") == 0) {
    if (strcmp(value, "reason") != 0 && strcmp(value, "group") != 0) {
      char q[DLQB_QUOTE_BUF];
      return dlqb_fail(err, DLQB_EINVAL, "--by: '%s' is not reason or group",
                       dlqb_text_quote(q, value, strlen(value)));
    }
    c->by_group = strcmp(value, "group") == 0;
    return DLQB_OK;
  }
  if (flag != NULL && strcmp(flag, "max-groups") == 0) {
    char *end;
    long n = strtol(value, &end, 10);
    if (value[0] < '0' || value[0] > '9' || *end != '\0' || n < 1 || n > DLQB_GROUPS_HARD_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "--max-groups: '%.32s' is not a number from 1 to %d",
                       value, DLQB_GROUPS_HARD_MAX);
    c->max_groups = (size_t)n;
    return DLQB_OK;
  }
  return dlqb_fail(err, DLQB_EINVAL, flag ? "unknown option '--%s'" : "unexpected argument '%s'",
                   flag ? flag : value);
}

static void count_reason(stats_ctx *c, const char *reason) {
  const char *name = reason[0] ? reason : "unknown";
  for (size_t i = 0; i < c->nreasons; i++) {
    if (strcmp(c->reasons[i].name, name) == 0) {
      c->reasons[i].count++;
      return;
    }
  }
  /* A DLQ only ever holds a handful of reasons; past the table, lump. */
  if (c->nreasons == MAX_REASONS) name = "other";
  size_t i = c->nreasons < MAX_REASONS ? c->nreasons++ : MAX_REASONS - 1;
  snprintf(c->reasons[i].name, sizeof c->reasons[i].name, "%s", name);
  c->reasons[i].count++;
}

static dlqb_status stats_item(void *ctx, const dlqb_item *it, const dlqb_delivery *d, bool *enough,
                              dlqb_error *err) {
  stats_ctx *c = ctx;
  (void)d, (void)enough, (void)err;
  count_reason(c, it->dlq_reason);
  if (c->groups != NULL) dlqb_groups_add(c->groups, it, c->now_ms);
  return DLQB_OK;
}

/* Counts the DLQ's items by dlq_reason (and group), reading every one
 * without an ack; *examined, *total: how many it read of the depth at start. */
static dlqb_status dlq_breakdown(stats_ctx *c, bool *partial, uint64_t *examined, uint64_t *total,
                                 dlqb_error *err) {
  ops_look look = {.queue = cli_pipeline()->dlq,
                   .source = c->o.scan ? OPS_LOOK_QUEUE : OPS_LOOK_CATALOG,
                   .compare = true,
                   .purpose = "dlq-bridge stats",
                   .actor = c->o.actor,
                   .window = c->o.window,
                   .on_item = stats_item,
                   .ctx = c};
  dlqb_status st = ops_look_run(c->o.cfg, &look, err);
  c->view = look.view;
  if (st == DLQB_OK && look.r.short_read) *partial = true;
  *examined = look.r.examined;
  *total = look.r.depth_at_start;
  return st;
}

static json_object *age_json(const dlqb_group *g, uint64_t ms) {
  return g->aged > 0 ? json_object_new_int64((int64_t)(ms / 1000)) : NULL;
}

static json_object *group_json(const dlqb_group *g) {
  json_object *j = json_object_new_object();
  json_object_object_add(j, "id", json_object_new_string(g->id));
  json_object_object_add(j, "count", json_object_new_int64((int64_t)g->count));
  json_object_object_add(j, "oldest_age_seconds", age_json(g, g->oldest_age_ms));
  json_object_object_add(j, "newest_age_seconds", age_json(g, g->newest_age_ms));
  json_object_object_add(j, "dlq_reason", json_object_new_string(g->dlq_reason));
  json_object_object_add(j, cli_pipeline()->profile.fields[1].name,
                         json_object_new_string(g->source_system));
  json_object_object_add(j, "template", json_object_new_string(g->tmpl));
  json_object_object_add(j, "sample", json_object_new_string(g->sample));
  return j;
}

static void groups_json(json_object *j, const dlqb_groups *g) {
  json_object *arr = json_object_new_array();
  for (size_t i = 0; i < dlqb_groups_count(g); i++)
    json_object_array_add(arr, group_json(dlqb_groups_at(g, i)));
  json_object_object_add(j, "groups", arr);
  const dlqb_group *o = dlqb_groups_other(g);
  json_object *oj = json_object_new_object();
  json_object_object_add(oj, "count", json_object_new_int64((int64_t)o->count));
  json_object_object_add(oj, "oldest_age_seconds", age_json(o, o->oldest_age_ms));
  json_object_object_add(oj, "newest_age_seconds", age_json(o, o->newest_age_ms));
  json_object_object_add(j, "other", oj);
  json_object_object_add(j, "max_groups", json_object_new_int64((int64_t)dlqb_groups_max(g)));
}

/* One cell of the group table: sanitised (everything in it came from a
 * message), cut to width with an ellipsis (0: not cut), padded unless last. */
static void group_cell(const char *text, size_t width, bool pad) {
  char buf[4 * DLQB_GROUP_TEMPLATE_MAX + 16];
  const char *t = text[0] ? text : "-";
  dlqb_text_cell(buf, sizeof buf, t, strlen(t), width, pad, NULL);
  fputs(buf, stdout);
}

static void group_ages(const dlqb_group *r, char old[32], char young[32]) {
  ops_age_text(r->aged > 0, r->oldest_age_ms, old, 32);
  ops_age_text(r->aged > 0, r->newest_age_ms, young, 32);
}

/* One line of numbers per group, then its template and a sample on lines of
 * their own (indented, cut to the terminal): the first line is 71 columns,
 * so the table fits 80 whatever the errors are. */
static void groups_text(const dlqb_groups *g, size_t columns) {
  size_t n = dlqb_groups_count(g);
  const dlqb_group *o = dlqb_groups_other(g);
  size_t text_w = columns == 0 ? 0 : columns > 24 ? columns - 4 : 20;
  printf("\n%s by failure group (%zu group%s, %llu item%s):\n", cli_pipeline()->dlq, n,
         n == 1 ? "" : "s", (unsigned long long)dlqb_groups_total(g),
         dlqb_groups_total(g) == 1 ? "" : "s");
  char src[DLQB_HEADER_NAME_MAX];
  printf("  %-12s %8s %-7s %-7s %-16s %s\n", "GROUP", "COUNT", "OLDEST", "NEWEST", "DLQ_REASON",
         cli_identity_column(1, src, sizeof src));
  for (size_t i = 0; i < n; i++) {
    const dlqb_group *r = dlqb_groups_at(g, i);
    char old[32], young[32];
    group_ages(r, old, young);
    printf("  %-12s %8llu %-7s %-7s ", r->id, (unsigned long long)r->count, old, young);
    group_cell(r->dlq_reason, 16, true);
    putchar(' ');
    group_cell(r->source_system, columns == 0 ? 0 : 14, false);
    fputs("\n    ", stdout);
    group_cell(r->tmpl, text_w, false);
    fputs("\n    e.g. ", stdout);
    group_cell(r->sample, text_w > 5 ? text_w - 5 : text_w, false);
    putchar('\n');
  }
  if (o->count > 0) {
    char old[32], young[32];
    group_ages(o, old, young);
    printf("  %-12s %8llu %-7s %-7s\n    items of causes past the first %zu groups (--max-groups "
           "keeps more; a filter narrows the DLQ)\n",
           "other", (unsigned long long)o->count, old, young, dlqb_groups_max(g));
  }
}

/* Counts the DLQ's items when it has any, then prints the queues, the
 * breakdown and any note; the exit code. */
static int stats_report(stats_ctx *c, const dlqb_queue_stat *rows, size_t nrows,
                        bool dlq_has_items) {
  dlqb_error err;

  bool partial = false;
  if (c->by_group && (c->groups = dlqb_groups_new(c->max_groups)) == NULL) {
    cli_error("stats: out of memory");
    return EXIT_RUNTIME;
  }
  c->now_ms = dlqb_now_ms();
  uint64_t examined = 0, total = 0;
  if (dlq_has_items && dlq_breakdown(c, &partial, &examined, &total, &err) != DLQB_OK) {
    dlqb_groups_free(c->groups);
    return cli_fail(&err);
  }
  if (c->groups != NULL) dlqb_groups_sort(c->groups);

  if (c->o.json) {
    json_object *j = json_object_new_object(), *qs = json_object_new_object();
    for (size_t i = 0; i < nrows; i++) {
      json_object *q = json_object_new_object();
      const dlqb_queue_stat *r = &rows[i];
      bool age = r->present && r->age_source != DLQB_AGE_UNKNOWN;
      json_object_object_add(q, "depth", r->present ? json_object_new_int64(r->depth) : NULL);
      json_object_object_add(q, "oldest_age_seconds",
                             age ? json_object_new_int64((int64_t)r->oldest_age_seconds) : NULL);
      json_object_object_add(q, "age_source", json_object_new_string(age_source_name(r)));
      if (!r->present) json_object_object_add(q, "missing", json_object_new_boolean(1));
      json_object_object_add(qs, r->queue, q);
    }
    json_object_object_add(j, "queues", qs);
    json_object *rs = json_object_new_object();
    for (size_t i = 0; i < c->nreasons; i++)
      json_object_object_add(rs, c->reasons[i].name,
                             json_object_new_int64((int64_t)c->reasons[i].count));
    json_object_object_add(j, "dlq_reasons", rs);
    if (c->groups != NULL) groups_json(j, c->groups);
    if (partial) json_object_object_add(j, "partial", json_object_new_boolean(1));
    json_object_object_add(j, "catalog", cli_catalog_json(&c->view));
    cli_print_json(j);
  } else {
    printf("%-22s %10s  %s\n", "QUEUE", "DEPTH", "OLDEST");
    for (size_t i = 0; i < nrows; i++) {
      const dlqb_queue_stat *r = &rows[i];
      char depth[24], age[48];
      snprintf(depth, sizeof depth, "%lu", (unsigned long)r->depth);
      if (!r->present) {
        snprintf(age, sizeof age, "(queue missing)");
      } else if (r->age_source == DLQB_AGE_UNKNOWN || r->age_source == DLQB_AGE_EMPTY) {
        /* Empty: no oldest message, so no age ("0s" would read as one
         * that just arrived). */
        snprintf(age, sizeof age, "-");
      } else {
        ops_age_text(true, (uint64_t)(r->oldest_age_seconds * 1000), age, sizeof age);
        if (r->age_source == DLQB_AGE_EMPTY_SINCE)
          strncat(age, " (at most)", sizeof age - strlen(age) - 1);
      }
      printf("%-22s %10s  %s\n", r->queue, r->present ? depth : "-", age);
    }
    if (c->groups != NULL) {
      groups_text(c->groups, cli_output_width(c->o.wide));
    } else if (c->nreasons > 0) {
      printf("\n%s by dlq_reason:\n", cli_pipeline()->dlq);
      for (size_t i = 0; i < c->nreasons; i++)
        printf("  %-20s %10llu\n", c->reasons[i].name, (unsigned long long)c->reasons[i].count);
    }
    cli_catalog_print(stderr, &c->view);
  }
  /* A note, not a failure: every item is counted (JSON has "other"). */
  if (!c->o.json && c->groups != NULL && dlqb_groups_other(c->groups)->count > 0)
    fprintf(stderr,
            "dlq-bridge: stats: %llu DLQ item%s of further causes counted as 'other' (more than "
            "%zu groups)\n",
            (unsigned long long)dlqb_groups_other(c->groups)->count,
            dlqb_groups_other(c->groups)->count == 1 ? "" : "s", dlqb_groups_max(c->groups));
  dlqb_groups_free(c->groups);
  if (partial) {
    cli_error(
        "stats: the DLQ breakdown is partial: %llu of %llu items arrived (another consumer "
        "holds or took the rest, or the broker delivered nothing for 2 minutes); run it again",
        (unsigned long long)examined, (unsigned long long)total);
    return EXIT_RUNTIME;
  }
  return EXIT_OK;
}

int cmd_stats(int argc, char **argv) {
  stats_ctx c;
  memset(&c, 0, sizeof c);
  bool help;
  int rc = cli_opts_load(&cmd_stats_spec, argc, argv, &c.o, on_flag, &c, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_stats_spec, stdout);
    return EXIT_OK;
  }
  /* Both on the heap: a topology is ~150 KB, and this thread decodes
   * broker frames (dlqb/thread.h). */
  dlqb_topology *topo = dlqb_topology_new(c.o.cfg);
  dlqb_queue_stat *rows = topo != NULL ? calloc(topo->nqueues + 1, sizeof *rows) : NULL;
  if (rows == NULL) {
    free(topo);
    cli_error("stats: out of memory");
    return EXIT_RUNTIME;
  }
  size_t nrows = 0;
  dlqb_error err;
  dlqb_link *link = NULL;
  dlqb_status lst = dlqb_link_open(&c.o.cfg->broker, "dlq-bridge stats", &link, &err);
  bool dlq_has_items = false;
  for (size_t i = 0; lst == DLQB_OK && i < topo->nqueues; i++) {
    if (topo->queues[i].type == DLQB_QTYPE_STREAM) continue; /* the ledger is not a backlog */
    lst = dlqb_queue_stat_read(link, &topo->queues[i], dlqb_now_ms(), NULL, &rows[nrows], &err);
    if (lst != DLQB_OK) break;
    if (strcmp(rows[nrows].queue, cli_pipeline()->dlq) == 0)
      dlq_has_items = rows[nrows].present && rows[nrows].depth > 0;
    nrows++;
  }
  free(topo);
  if (lst != DLQB_OK) {
    dlqb_link_abort(link);
    free(rows);
    return cli_fail(&err);
  }
  dlqb_link_close(link);
  int rc_out = stats_report(&c, rows, nrows, dlq_has_items);
  free(rows);
  return rc_out;
}

/* dlq-bridge stats: depth and oldest age of each queue, DLQ reasons. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/link.h"
#include "dlqb/log.h"
#include "dlqb/queue_stats.h"
#include "dlqb/topology.h"
#include "ops.h"

#define MAX_REASONS 32

static const cli_flag flags[] = {
    {"json", false, NULL, "print JSON for scripts instead of text"},
    {"window", true, "N", "DLQ messages read ahead at once for the breakdown, 1 to 65535 (default 5000)"},
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_stats_spec = {
    .name = "stats",
    .summary = "queue depths, oldest-message ages and the DLQ broken down by reason",
    .usage = "dlq-bridge stats [--json]",
    .details =
        "Depth (passive declare) of dsr.work, dsr.failed, every retry queue,\n"
        "dsr.dlq.manual and compliance_review. The age of the oldest message of the\n"
        "classic queues comes from the head message's dlq_at / escalated_at, read\n"
        "without consuming it. Quorum queues are never read (a requeue counts as a\n"
        "delivery and could poison a task), and RabbitMQ reports no age for them: a\n"
        "one-off stats knows their age only when they are empty ('-', null in JSON);\n"
        "the daemon's metrics track it over time. The DLQ's breakdown by dlq_reason\n"
        "reads every DLQ item without an ack; nothing moves or changes order.\n"
        "--json prints {\"queues\": {\"<name>\": {\"depth\": N, \"oldest_age_seconds\": S},\n"
        "...}, \"dlq_reasons\": {\"<reason>\": N, ...}}.",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_TOPOLOGY, NULL},
};

typedef struct {
  char name[32];
  uint64_t count;
} reason_row;

typedef struct {
  ops_opts o;
  reason_row reasons[MAX_REASONS];
  size_t nreasons;
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
  if (flag != NULL && (strcmp(flag, "json") == 0 || strcmp(flag, "window") == 0))
    return ops_flag(&c->o, flag, value, err);
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

static dlqb_status stats_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d,
                              const dlqb_item *it, dlqb_error *err) {
  stats_ctx *c = ctx;
  (void)err;
  dlqb_scan_hold(s, d);
  count_reason(c, it->dlq_reason);
  return DLQB_OK;
}

/* Counts the DLQ's items by dlq_reason, reading every one without an ack. */
static dlqb_status dlq_breakdown(stats_ctx *c, bool *partial, dlqb_error *err) {
  dlqb_scan_options so = {.queue = DLQB_Q_DLQ, .purpose = "dlq-bridge stats", .actor = c->o.actor,
                          .window = c->o.window, .on_item = stats_item, .ctx = c};
  dlqb_scan_result r;
  dlqb_status st = dlqb_scan_run(&c->o.cfg, &so, &r, err);
  if (st == DLQB_OK && r.short_read) *partial = true;
  return st;
}

int cmd_stats(int argc, char **argv) {
  stats_ctx c;
  memset(&c, 0, sizeof c);
  bool help;
  int rc = ops_load(&cmd_stats_spec, argc, argv, &c.o, on_flag, &c, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_stats_spec, stdout);
    return EXIT_OK;
  }
  dlqb_topology topo;
  dlqb_topology_build(&c.o.cfg, &topo);
  dlqb_queue_stat rows[DLQB_TOPO_MAX_QUEUES];
  size_t nrows = 0;
  dlqb_error err;
  dlqb_link *link = NULL;
  if (dlqb_link_open(&c.o.cfg, "dlq-bridge stats", &link, &err) != DLQB_OK) return ops_fail(&err);
  bool dlq_has_items = false;
  for (size_t i = 0; i < topo.nqueues; i++) {
    if (topo.queues[i].type == DLQB_QTYPE_STREAM) continue; /* the ledger is not a backlog */
    dlqb_status st = dlqb_queue_stat_read(link, &topo.queues[i], dlqb_now_ms(), NULL,
                                          &rows[nrows], &err);
    if (st != DLQB_OK) {
      dlqb_link_abort(link);
      return ops_fail(&err);
    }
    if (strcmp(rows[nrows].queue, DLQB_Q_DLQ) == 0)
      dlq_has_items = rows[nrows].present && rows[nrows].depth > 0;
    nrows++;
  }
  dlqb_link_close(link);

  bool partial = false;
  if (dlq_has_items && dlq_breakdown(&c, &partial, &err) != DLQB_OK) return ops_fail(&err);

  if (c.o.json) {
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
    for (size_t i = 0; i < c.nreasons; i++)
      json_object_object_add(rs, c.reasons[i].name,
                             json_object_new_int64((int64_t)c.reasons[i].count));
    json_object_object_add(j, "dlq_reasons", rs);
    if (partial) json_object_object_add(j, "partial", json_object_new_boolean(1));
    ops_print_json(j);
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
        if (r->age_source == DLQB_AGE_EMPTY_SINCE) strncat(age, " (at most)", sizeof age - strlen(age) - 1);
      }
      printf("%-22s %10s  %s\n", r->queue, r->present ? depth : "-", age);
    }
    if (c.nreasons > 0) {
      printf("\n%s by dlq_reason:\n", DLQB_Q_DLQ);
      for (size_t i = 0; i < c.nreasons; i++)
        printf("  %-20s %10llu\n", c.reasons[i].name, (unsigned long long)c.reasons[i].count);
    }
  }
  if (partial) {
    cli_error("stats: the DLQ breakdown is partial (more items than --window %d)", c.o.window);
    return EXIT_FAILURE_;
  }
  return EXIT_OK;
}

/* dlq-bridge audit reconcile: the DLQ and compliance_review against the audit trail. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_cli.h"
#include "dlqb/link.h"
#include "dlqb/log.h"
#include "dlqb/reconcile.h"
#include "dlqb/scan.h"
#include "dlqb/topology.h"

static const cli_flag reconcile_flags[] = {
    {"json", false, NULL, "print JSON for scripts instead of text"},
    {"window", true, "N",
     "DLQ items read ahead at once, 1 to 65535 (default 5000); any depth is read"},
    LOG_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_spec reconcile_spec = {
    .name = "audit reconcile",
    .summary = "check that the DLQ and compliance_review hold what the audit trail put there",
    .usage = "dlq-bridge audit reconcile [FILE...] [--json] [--window N]\n"
             "       [--seal FILE | --no-seal] [--partial] [settings]",
    .details = "Reads every item of dsr.dlq.manual without consuming it (as inspect does), then\n"
               "verifies the log as `audit verify` does and counts, per message_id, the hops\n"
               "recorded into the DLQ and out of it. MISSING: recorded into the DLQ and never\n"
               "out, but not in it (removed behind dlq-bridge's back: a purge, a move in the\n"
               "management UI, a policy). UNRECORDED: in the DLQ with no record of entering it\n"
               "(the audit trail was off then). Hops recorded after the queue was read are\n"
               "not counted as missing. compliance_review is read and compared the same way\n"
               "(into it: escalated; out of it: a review decision; a claim's re-publish is\n"
               "neither), so an item acked away there in the management UI is MISSING too.\n"
               "NOT SEEN: as MISSING, but another consumer was on that queue at the start or\n"
               "the end of the read (the daemon's SLA escalator, an inspect): it may hold the\n"
               "item unacked, which the broker does not deliver to us; not a failure, run\n"
               "again later. Each kind lists at most 1000 entries and counts them all (JSON:\n"
               "\"counts\"); memory stays bounded at any depth. Needs the broker settings and\n"
               "the audit key and log.\n" FILES_DETAILS
               "Exit status: 0 nothing missing; 1 something missing, the log not intact, or\n"
               "a queue not read whole; 2 usage or configuration error.",
    .flags = reconcile_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_AUDIT_READ, CLI_USES_LOG, NULL},
};

typedef struct {
  const audit_opts *o;
  const char *queue; /* dsr.dlq.manual or compliance_review */
  dlqb_reconcile *r;
  char at[DLQB_ISO_TIME_MAX]; /* when the queue was read: later records are not missing */
  uint64_t items, without_id;
  bool read_whole;
  dlqb_scan_result scan;
  uint32_t others; /* most consumers seen on the queue at the start or end of the read */
  /* The verdict, filled by classify: each list holds at most LIST_MAX
   * entries (memory stays bounded whatever the queue holds), its count
   * every one. */
  json_object *missing, *unrecorded, *during, *extra, *not_seen;
  uint64_t n_missing, n_unrecorded, n_during, n_extra, n_not_seen;
  uint64_t expected;
} reconcile_ctx;

/* Entries listed per kind; the counts cover them all. */
#define LIST_MAX 1000

static dlqb_status snapshot_item(void *ctx, const dlqb_item *it, dlqb_error *err) {
  reconcile_ctx *c = ctx;
  c->items++;
  if (it->message_id[0] == '\0') {
    c->without_id++;
    return DLQB_OK;
  }
  return dlqb_reconcile_present(c->r, it->message_id, it->request_id, err);
}

static dlqb_status size_for(void *ctx, uint32_t depth, dlqb_error *err) {
  reconcile_ctx *c = ctx;
  if (dlqb_reconcile_reserve(c->r, depth)) return DLQB_OK;
  return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the %lu items of %s", (unsigned long)depth,
                   c->queue);
}

/* The DLQ and compliance_review, each reconciled on its own. */
typedef struct {
  reconcile_ctx dlq, review;
} reconcile_pair;

static bool tally_line(void *ctx, const char *line, size_t len) {
  reconcile_pair *p = ctx;
  return dlqb_reconcile_line(p->dlq.r, line, len) && dlqb_reconcile_line(p->review.r, line, len);
}

/* ops_queue_read_run for the command line: one line and EXIT_RUNTIME on
 * an error. */
int audit_read_queue(const dlqb_config *cfg, ops_queue_read *q) {
  dlqb_error err;
  q->stop = cli_stop_flag();
  if (ops_queue_read_run(cfg, q, &err) == DLQB_OK) return EXIT_OK;
  cli_error("%s", err.msg);
  return EXIT_RUNTIME;
}

static int read_dlq(void *ctx, const dlqb_config *cfg) {
  reconcile_ctx *c = ctx;
  ops_queue_read q = {.queue = c->queue,
                      .purpose = "audit reconcile",
                      .window = c->o->window,
                      .on_item = snapshot_item,
                      .on_depth = size_for,
                      .ctx = c};
  int rc = audit_read_queue(cfg, &q);
  memcpy(c->at, q.at, sizeof c->at);
  dlqb_reconcile_read_at(c->r, c->at);
  c->others = q.others;
  c->scan = q.scan;
  return rc;
}

static bool ctx_init(reconcile_ctx *c, const audit_opts *o, const char *queue) {
  c->o = o;
  c->queue = queue;
  c->r = dlqb_reconcile_new_for(queue);
  c->missing = json_object_new_array();
  c->unrecorded = json_object_new_array();
  c->during = json_object_new_array();
  c->extra = json_object_new_array();
  c->not_seen = json_object_new_array();
  return c->r != NULL && c->missing != NULL && c->unrecorded != NULL && c->during != NULL &&
         c->extra != NULL && c->not_seen != NULL;
}

/* Runs once the options are parsed: only then is the pipeline known whose
 * queues are read and whose records are matched to them. */
static int read_both(void *ctx, const dlqb_config *cfg) {
  reconcile_pair *p = ctx;
  if (!ctx_init(&p->dlq, p->dlq.o, cli_pipeline()->dlq) ||
      !ctx_init(&p->review, p->dlq.o, cli_pipeline()->review)) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  int rc = read_dlq(&p->dlq, cfg);
  return rc == EXIT_OK ? read_dlq(&p->review, cfg) : rc;
}

static json_object *entry_json(const dlqb_reconcile_entry *e) {
  json_object *j = json_object_new_object();
  json_object_object_add(j, "message_id", json_object_new_string(e->message_id));
  json_object_object_add(j, cli_pipeline()->profile.fields[0].name,
                         json_object_new_string(e->request_id));
  json_object_object_add(j, "present", json_object_new_int(e->present));
  json_object_object_add(j, "recorded_net", json_object_new_int64(e->net));
  if (e->last_time[0] != '\0') {
    json_object_object_add(j, "last_event", json_object_new_string(e->last_event));
    json_object_object_add(j, "last_time", json_object_new_string(e->last_time));
    json_object_object_add(j, "last_writer", json_object_new_string(e->last_writer));
  }
  return j;
}

/* Record times against the moment the queue was read (ISO UTC text
 * compares as time). */
static bool after_read(const reconcile_ctx *c, const char *time) {
  return time[0] != '\0' && strcmp(time, c->at) >= 0;
}

/* Adds e to list (while it has room) and counts it. */
static void list_add(json_object *list, uint64_t *n, const dlqb_reconcile_entry *e) {
  if (++*n <= LIST_MAX) json_object_array_add(list, entry_json(e));
}

static void classify(void *ctx, const dlqb_reconcile_entry *e) {
  reconcile_ctx *c = ctx;
  bool came_after = after_read(c, e->last_time), left_after = after_read(c, e->last_out_time);
  long recorded = e->net > 0 ? e->net : 0;
  if (e->present == 0 && e->net > 0) {
    if (came_after) list_add(c->during, &c->n_during, e);
    else if (c->others > 0) list_add(c->not_seen, &c->n_not_seen, e);
    else list_add(c->missing, &c->n_missing, e);
  } else if (e->present > 0 && e->entered == 0) {
    list_add(c->unrecorded, &c->n_unrecorded, e);
  } else if (e->present > recorded && !left_after) {
    /* A redelivery's duplicate, or the DLQ copy of a move interrupted
     * between its record and its ack: never a loss. */
    list_add(c->extra, &c->n_extra, e);
  }
  /* Otherwise the queue holds what the trail says, or a copy that left
   * (recorded) after the queue was read. */
}

static void print_entries(const char *label, json_object *arr, uint64_t all, const char *queue,
                          const char *why) {
  size_t n = json_object_array_length(arr);
  if (all > n) printf("%-11s (the first %zu of %llu listed)\n", label, n, (unsigned long long)all);
  for (size_t i = 0; i < n; i++) {
    json_object *j = json_object_array_get_idx(arr, i), *v;
    const char *id = cli_pipeline()->profile.fields[0].name;
    printf("%-11s %s  %s %s", label,
           json_object_get_string(json_object_object_get(j, "message_id")), id,
           json_object_get_string(json_object_object_get(j, id)));
    if (json_object_object_get_ex(j, "last_event", &v))
      printf("  %s at %s by %s", json_object_get_string(v),
             json_object_get_string(json_object_object_get(j, "last_time")),
             json_object_get_string(json_object_object_get(j, "last_writer")));
    printf("  (in %s: %s)\n", queue, why);
  }
}

/* Every entry of each kind, listed or not. */
static json_object *counts_json(const reconcile_ctx *c) {
  json_object *j = json_object_new_object();
  json_object_object_add(j, "missing", json_object_new_int64((int64_t)c->n_missing));
  json_object_object_add(j, "unrecorded", json_object_new_int64((int64_t)c->n_unrecorded));
  json_object_object_add(j, "recorded_after_read", json_object_new_int64((int64_t)c->n_during));
  json_object_object_add(j, "extra_copies", json_object_new_int64((int64_t)c->n_extra));
  json_object_object_add(j, "not_seen", json_object_new_int64((int64_t)c->n_not_seen));
  json_object_object_add(j, "listed_max", json_object_new_int(LIST_MAX));
  return j;
}

/* compliance_review's part of --json. */
static json_object *review_json(const reconcile_ctx *c) {
  json_object *j = json_object_new_object();
  json_object_object_add(j, "read_at", json_object_new_string(c->at));
  json_object_object_add(j, "items", json_object_new_int64((int64_t)c->items));
  json_object_object_add(j, "without_message_id", json_object_new_int64((int64_t)c->without_id));
  json_object_object_add(j, "recorded_in_queue", json_object_new_int64((int64_t)c->expected));
  json_object_object_add(j, "missing", json_object_get(c->missing));
  json_object_object_add(j, "unrecorded", json_object_get(c->unrecorded));
  json_object_object_add(j, "recorded_after_read", json_object_get(c->during));
  json_object_object_add(j, "extra_copies", json_object_get(c->extra));
  json_object_object_add(j, "not_seen", json_object_get(c->not_seen));
  json_object_object_add(j, "counts", counts_json(c));
  json_object_object_add(j, "other_consumers", json_object_new_int64(c->others));
  return j;
}

/* One queue's part of the text. */
static void print_queue(const reconcile_ctx *c) {
  unsigned long long nm = c->n_missing, nu = c->n_unrecorded, nd = c->n_during, ne = c->n_extra;
  printf("%s read at %s: %llu item%s (%llu without a message_id, not compared)\n", c->queue, c->at,
         (unsigned long long)c->items, c->items == 1 ? "" : "s", (unsigned long long)c->without_id);
  bool dlq = strcmp(c->queue, cli_pipeline()->dlq) == 0;
  printf("the audit trail puts %llu message%s %s%s; missing %llu, unrecorded %llu, recorded after "
         "the read %llu, copies beyond the records %llu\n",
         (unsigned long long)c->expected, c->expected == 1 ? "" : "s", dlq ? "there" : "in ",
         dlq ? "" : cli_pipeline()->review, nm, nu, nd, ne);
  print_entries("MISSING", c->missing, c->n_missing, c->queue,
                "recorded into it, never out, not in it: removed outside dlq-bridge");
  print_entries("UNRECORDED", c->unrecorded, c->n_unrecorded, c->queue, "no record of it entering");
  if (c->n_not_seen > 0) {
    char why[160];
    snprintf(why, sizeof why,
             "not seen: held by another consumer (%lu during the read); run "
             "again later",
             (unsigned long)c->others);
    print_entries("NOT SEEN", c->not_seen, c->n_not_seen, c->queue, why);
  }
  print_entries("EXTRA", c->extra, c->n_extra, c->queue,
                "more copies than records: a redelivery's duplicate, or a move interrupted "
                "after its record");
}

static void print_reconcile(reconcile_ctx *c, reconcile_ctx *review, const dlqb_audit_summary *sum,
                            bool sealed) {
  unsigned long long nm = c->n_missing + review->n_missing;
  unsigned long long nn = c->n_not_seen + review->n_not_seen;
  if (c->o->json) {
    json_object *out = json_object_new_object(), *dlq = json_object_new_object();
    json_object_object_add(out, "intact", json_object_new_boolean(1));
    json_object_object_add(out, "records", json_object_new_int64((int64_t)sum->records));
    json_object_object_add(out, "seal_checked", json_object_new_boolean(sealed));
    json_object_object_add(dlq, "read_at", json_object_new_string(c->at));
    json_object_object_add(dlq, "items", json_object_new_int64((int64_t)c->items));
    json_object_object_add(dlq, "without_message_id",
                           json_object_new_int64((int64_t)c->without_id));
    json_object_object_add(out, "dlq", dlq);
    json_object_object_add(out, "recorded_in_dlq", json_object_new_int64((int64_t)c->expected));
    json_object_object_add(out, "missing", json_object_get(c->missing));
    json_object_object_add(out, "unrecorded", json_object_get(c->unrecorded));
    json_object_object_add(out, "recorded_after_read", json_object_get(c->during));
    json_object_object_add(out, "extra_copies", json_object_get(c->extra));
    json_object_object_add(out, "not_seen", json_object_get(c->not_seen));
    json_object_object_add(out, "counts", counts_json(c));
    json_object_object_add(dlq, "other_consumers", json_object_new_int64(c->others));
    json_object_object_add(out, cli_pipeline()->review, review_json(review));
    printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN |
                                                           JSON_C_TO_STRING_NOSLASHESCAPE));
    cli_json_printed();
    json_object_put(out);
    return;
  }
  audit_print_summary(sum, sealed);
  print_queue(c);
  print_queue(review);
  if (nm == 0 && nn == 0) printf("nothing missing\n");
  else if (nm == 0)
    printf("nothing missing; %llu not seen (held by another consumer at the time)\n", nn);
}

static void ctx_free(reconcile_ctx *c) {
  json_object_put(c->missing);
  json_object_put(c->unrecorded);
  json_object_put(c->during);
  json_object_put(c->extra);
  json_object_put(c->not_seen);
  dlqb_reconcile_free(c->r);
}

int audit_reconcile(int argc, char **argv) {
  audit_opts o = {.prepare = read_both};
  reconcile_pair p;
  memset(&p, 0, sizeof p);
  o.prepare_ctx = &p;
  p.dlq.o = &o; /* the rest once the pipeline is known (read_both) */
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc =
      audit_load_and_verify(&reconcile_spec, argc, argv, &o, tally_line, &p, &sum, &sealed, &help);
  if (help) {
    cli_print_help(&reconcile_spec, stdout);
  } else if (rc == EXIT_OK) {
    p.dlq.expected = dlqb_reconcile_recorded(p.dlq.r);
    p.review.expected = dlqb_reconcile_recorded(p.review.r);
    if (!dlqb_reconcile_each_notable(p.dlq.r, classify, &p.dlq) ||
        !dlqb_reconcile_each_notable(p.review.r, classify, &p.review)) {
      cli_error("audit reconcile: cannot read back its temporary file");
      rc = EXIT_RUNTIME;
    }
  }
  if (rc == EXIT_OK && !help) {
    print_reconcile(&p.dlq, &p.review, &sum, sealed);
    if (p.dlq.n_missing + p.review.n_missing > 0) rc = EXIT_RUNTIME;
  }
  ctx_free(&p.dlq);
  ctx_free(&p.review);
  return rc;
}

/* dlq-bridge catalog verify: check the catalog of the DLQ and the review
 * queue against the queues themselves and correct it (dlqb/catalog.h);
 * dlq-bridge catalog snapshot: write the catalog's fold into its stream,
 * so the stream can have retention (dlqb/catalog_stream.h). */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/catalog_stream.h"
#include "dlqb/calendar.h"

static const cli_flag flags[] = {
    {"queue", true, "NAME", "verify only this queue (the DLQ or the review queue)"},
    {"json", false, NULL, "print JSON for scripts instead of text"},
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_catalog_spec = {
    .name = "catalog",
    .summary = "verify the catalog that looks answer from against the queues, or snapshot it",
    .usage = "dlq-bridge catalog verify [--queue NAME] [--json]\n"
             "       dlq-bridge catalog snapshot [--json]",
    .details =
        "The catalog (the dsr.catalog stream) records every item the bridge puts into\n"
        "or takes out of dsr.dlq.manual and compliance_review; inspect, stats, review\n"
        "list and the console answer from it while its count agrees with the queue's\n"
        "depth. `catalog verify` passes over each queue (holding its items while it\n"
        "reads, as --scan), appends an event for every difference (an item added or\n"
        "taken outside the bridge: the management UI's Get with ack, a purge, a\n"
        "producer publishing straight into the queue, the broker dead-lettering from\n"
        "dsr.failed) and a `verified` event, so every reader's catalog agrees again.\n"
        "`dlq-bridge run` does the same on its own when a check finds the counts\n"
        "differ (--catalog-check-interval) and periodically (--catalog-verify-every).\n"
        "Prints one line per queue: what the pass found, what the catalog held, what\n"
        "was added and removed. --json: {\"queues\": [{\"queue\", \"present\",\n"
        "\"catalog\", \"added\", \"removed\", \"complete\", \"other_consumers\", \"at\"}]}.\n"
        "A pass reads only what is ready: with another consumer on the queue (a worker,\n"
        "a move, a look reading the queue) it may miss what that one holds, so it\n"
        "removes nothing then. Exits 1 when a queue could not be read whole (nothing\n"
        "was removed for it).\n"
        "`catalog snapshot` writes the catalog as it now stands into the stream (its\n"
        "items in chunks of 1000, then their totals), so the stream can be given a\n"
        "max-age retention policy (docs/runbook.md): a reader of a stream retention\n"
        "cut starts from its newest snapshot. On a stream cut with none left\n"
        "(looks then read the queues and say so), it rebuilds the catalog from the\n"
        "queues first (a verifying pass over each) and snapshots that. `run` writes\n"
        "one on its own once the stream has grown well past what one costs. Prints\n"
        "the snapshot's id, its offset and the items per queue; --json: {\"snapshot\",\n"
        "\"as_of_offset\", \"chunks\", \"rebuilt\", \"queues\": [{\"queue\", \"items\"}]}.",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_CATALOG, NULL},
};

typedef struct {
  bool verb;
  bool snapshot;
  const char *queue;
  bool json;
} catalog_opts;

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  catalog_opts *o = ctx;
  if (flag == NULL) {
    if (o->verb || (strcmp(value, "verify") != 0 && strcmp(value, "snapshot") != 0))
      return dlqb_fail(err, DLQB_EINVAL,
                       "unexpected argument '%s' (catalog verify, or catalog snapshot)", value);
    o->verb = true;
    o->snapshot = strcmp(value, "snapshot") == 0;
    return DLQB_OK;
  }
  if (strcmp(flag, "queue") == 0) o->queue = value;
  if (strcmp(flag, "json") == 0) o->json = true;
  return DLQB_OK;
}

/* catalog snapshot: a snapshot of the fold, rebuilt from the queues first
 * when the stream was cut with none left to fold from. */
static int snapshot(const dlqb_config *cfg, const dlqb_pipeline *p, dlqb_catalog_reader *r,
                    bool json) {
  dlqb_catalog_snapinfo s;
  dlqb_error err;
  bool rebuilt = false;
  dlqb_status st = dlqb_catalog_snapshot(r, dlqb_config_broker(cfg, NULL), &s, &err);
  if (st != DLQB_OK && dlqb_catalog_reader_cut(r)) {
    fprintf(stderr, "dlq-bridge: the catalog stream was cut by retention and holds no complete "
                    "snapshot; rebuilding the catalog from the queues (a pass over each)\n");
    rebuilt = true;
    st = dlqb_catalog_snapshot_rebuild(r, cfg, NULL, &s, &err);
  }
  if (st != DLQB_OK) {
    cli_error("catalog snapshot: %s", err.msg);
    return EXIT_RUNTIME;
  }
  const char *queues[] = {p->dlq, p->review};
  if (json) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "snapshot", json_object_new_string(s.id));
    json_object_object_add(j, "as_of_offset", json_object_new_int64(s.as_of));
    json_object_object_add(j, "chunks", json_object_new_int64((int64_t)s.chunks));
    json_object_object_add(j, "rebuilt", json_object_new_boolean(rebuilt));
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < 2; i++) {
      json_object *q = json_object_new_object();
      json_object_object_add(q, "queue", json_object_new_string(queues[i]));
      json_object_object_add(q, "items", json_object_new_int64((int64_t)s.items[i]));
      json_object_array_add(arr, q);
    }
    json_object_object_add(j, "queues", arr);
    printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN));
    json_object_put(j);
  } else {
    printf("snapshot %s of the catalog as of offset %lld%s: %llu items in %s, %llu in %s (%llu "
           "chunks)\n",
           s.id, (long long)s.as_of, rebuilt ? " (rebuilt from the queues)" : "",
           (unsigned long long)s.items[0], queues[0], (unsigned long long)s.items[1], queues[1],
           (unsigned long long)s.chunks);
  }
  return EXIT_OK;
}

int cmd_catalog(int argc, char **argv) {
  static dlqb_config cfg; /* not on the stack: a config is large */
  catalog_opts o = {0};
  bool help;
  int rc = cli_load(&cmd_catalog_spec, argc, argv, &cfg, on_flag, &o, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_catalog_spec, stdout);
    return EXIT_OK;
  }
  if (!o.verb) {
    cli_error("catalog: give a subcommand: catalog verify, or catalog snapshot");
    return EXIT_USAGE;
  }
  if (o.snapshot && o.queue != NULL) {
    cli_error("--queue: catalog snapshot writes both queues' catalog");
    return EXIT_USAGE;
  }
  const dlqb_pipeline *p = cli_pipeline();
  if (o.queue != NULL && strcmp(o.queue, p->dlq) != 0 && strcmp(o.queue, p->review) != 0) {
    cli_error("--queue: the catalog covers only %s and %s", p->dlq, p->review);
    return EXIT_USAGE;
  }
  dlqb_catalog_reader *r = dlqb_catalog_reader_of(&cfg, p);
  if (r == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  if (o.snapshot) {
    rc = snapshot(&cfg, p, r, o.json);
    dlqb_catalog_reader_free(r);
    return rc;
  }
  const char *queues[] = {p->dlq, p->review};
  json_object *arr = o.json ? json_object_new_array() : NULL;
  rc = EXIT_OK;
  for (size_t i = 0; i < 2 && rc == EXIT_OK; i++) {
    if (o.queue != NULL && strcmp(o.queue, queues[i]) != 0) continue;
    dlqb_catalog_verify_result v;
    dlqb_error err;
    if (dlqb_catalog_verify(r, &cfg, NULL, queues[i], &v, &err) != DLQB_OK) {
      cli_error("catalog verify: %s", err.msg);
      rc = EXIT_RUNTIME;
      break;
    }
    char at[DLQB_ISO_TIME_MAX];
    dlqb_iso_time(v.at_ms, at, sizeof at);
    if (arr != NULL) {
      json_object *j = json_object_new_object();
      json_object_object_add(j, "queue", json_object_new_string(queues[i]));
      json_object_object_add(j, "present", json_object_new_int64((int64_t)v.present));
      json_object_object_add(j, "catalog", json_object_new_int64((int64_t)v.catalog));
      json_object_object_add(j, "added", json_object_new_int64((int64_t)v.added));
      json_object_object_add(j, "removed", json_object_new_int64((int64_t)v.removed));
      json_object_object_add(j, "complete", json_object_new_boolean(v.complete));
      json_object_object_add(j, "other_consumers", json_object_new_int64(v.others));
      json_object_object_add(j, "at", json_object_new_string(at));
      json_object_array_add(arr, j);
    } else {
      char why[160] = "";
      if (v.others > 0)
        snprintf(why, sizeof why,
                 " (%u other consumer%s on the queue may hold items unacked: nothing removed; "
                 "run again)",
                 v.others, v.others == 1 ? "" : "s");
      else if (!v.complete) snprintf(why, sizeof why, " (not read whole: nothing removed)");
      printf("%s: %llu items in the queue at %s, the catalog held %llu; added %llu, removed "
             "%llu%s\n",
             queues[i], (unsigned long long)v.present, at, (unsigned long long)v.catalog,
             (unsigned long long)v.added, (unsigned long long)v.removed, why);
    }
    if (!v.complete) rc = EXIT_RUNTIME;
  }
  if (arr != NULL) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "queues", arr);
    printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN));
    json_object_put(j);
  }
  dlqb_catalog_reader_free(r);
  return rc;
}

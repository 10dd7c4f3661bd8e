/* dlq-bridge catalog verify: check the catalog of the DLQ and the review
 * queue against the queues themselves and correct it (dlqb/catalog.h). */
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
    .summary = "verify the catalog that looks answer from against the queues",
    .usage = "dlq-bridge catalog verify [--queue NAME] [--json]",
    .details = "The catalog (the dsr.catalog stream) records every item the bridge puts into\n"
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
               "\"catalog\", \"added\", \"removed\", \"complete\", \"at\"}]}. Exits 1 when a\n"
               "queue could not be read whole (nothing was corrected for it).",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_CATALOG, NULL},
};

typedef struct {
  bool verb;
  const char *queue;
  bool json;
} catalog_opts;

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  catalog_opts *o = ctx;
  if (flag == NULL) {
    if (o->verb || strcmp(value, "verify") != 0)
      return dlqb_fail(err, DLQB_EINVAL, "unexpected argument '%s' (catalog verify)", value);
    o->verb = true;
    return DLQB_OK;
  }
  if (strcmp(flag, "queue") == 0) o->queue = value;
  if (strcmp(flag, "json") == 0) o->json = true;
  return DLQB_OK;
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
    cli_error("catalog: give a subcommand: catalog verify");
    return EXIT_USAGE;
  }
  const dlqb_pipeline *p = cli_pipeline();
  if (o.queue != NULL && strcmp(o.queue, p->dlq) != 0 && strcmp(o.queue, p->review) != 0) {
    cli_error("--queue: the catalog covers only %s and %s", p->dlq, p->review);
    return EXIT_USAGE;
  }
  char path[DLQB_CONFIG_STR_MAX];
  dlqb_catalog_checkpoint_path(&cfg, p, path, sizeof path);
  dlqb_catalog_reader *r = dlqb_catalog_reader_new(p, path);
  if (r == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
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
      json_object_object_add(j, "at", json_object_new_string(at));
      json_object_array_add(arr, j);
    } else {
      printf("%s: %llu items in the queue at %s, the catalog held %llu; added %llu, removed "
             "%llu%s\n",
             queues[i], (unsigned long long)v.present, at, (unsigned long long)v.catalog,
             (unsigned long long)v.added, (unsigned long long)v.removed,
             v.complete ? "" : " (not read whole: nothing removed)");
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

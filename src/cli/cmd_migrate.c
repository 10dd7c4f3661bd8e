/* dlq-bridge migrate: a deployment's classic DLQ and review queue made
 * quorum queues, with every item (the work is ops_migrate_queue's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/declare.h"
#include "dlqb/topology.h"
#include "ops_cli.h"

static const cli_flag flags[] = {
    {"dry-run", false, NULL, "say what would move, move nothing"},
    CLI_COMMON_FLAGS,
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_migrate_spec = {
    .name = "migrate",
    .summary = "make a classic DLQ and review queue quorum queues, keeping every item",
    .usage = "dlq-bridge migrate [--dry-run] [--pipeline NAME] [--actor NAME] [--json]",
    .details =
        "With dlq_queue_type quorum, for a deployment whose dsr.dlq.manual and\n"
        "compliance_review are classic queues (one copy, on one node: the default).\n"
        "A queue's type cannot change in place, so for each of them: every item moves\n"
        "into QUEUE.migrating (a quorum queue), the classic queue is deleted once it is\n"
        "empty and has no consumer and is declared again as a quorum queue, the items\n"
        "move back into it in their order, and QUEUE.migrating is deleted. Each move\n"
        "is confirmed before its original is acked and recorded in the audit trail\n"
        "(event migrated) and the catalog, which is then verified against the queue.\n"
        "Killed or stopped, run it again: it goes\n"
        "on from where the items are, and the copies the killed run had in flight are\n"
        "not made twice. Stop `dlq-bridge run` and the console first (the runbook's\n"
        "\"Moving to quorum queues\"): while the classic queue is replaced, nothing\n"
        "can be dead-lettered into it. A queue already quorum is left as it is.\n"
        "Exits 0 when both are quorum queues holding every item, 1 otherwise.\n"
        "--json prints {\"queues\": [{\"queue\", \"was_classic\", \"resumed\", \"pending\",\n"
        "\"to_holding\", \"to_queue\", \"remembered\", \"catalog_corrected\", \"done\"}],\n"
        "\"dry_run\": B}.",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_AUDIT, CLI_USES_TOPOLOGY,
                                  CLI_USES_CATALOG, NULL},
};

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  return cli_opts_flag(ctx, flag, value, err);
}

static void print_one(const ops_migrate_result *r, bool dry_run, bool done) {
  if (!r->existed) printf("%s: not there (declare makes it a quorum queue)\n", r->queue);
  else if (!r->was_classic && !r->resumed) printf("%s: a quorum queue already\n", r->queue);
  else if (dry_run)
    printf("%s: would move %llu items into a quorum queue%s\n", r->queue,
           (unsigned long long)r->pending, r->resumed ? " (an interrupted run's, resumed)" : "");
  else
    printf("%s: %s; moved %llu into %s and %llu back%s\n", r->queue,
           done ? "a quorum queue now" : "not finished", (unsigned long long)r->to_holding,
           r->holding, (unsigned long long)r->to_queue,
           r->remembered > 0 ? " (copies of an interrupted run recognised, not made twice)" : "");
  if (r->catalog_verified && !dry_run)
    printf("%s: catalog verified against the queue (%llu corrections)\n", r->queue,
           (unsigned long long)r->catalog_corrected);
  else if (r->catalog_why[0] != '\0')
    fprintf(stderr,
            "dlq-bridge: %s: the catalog was not verified (%s): run dlq-bridge catalog verify\n",
            r->queue, r->catalog_why);
}

static json_object *one_json(const ops_migrate_result *r, bool done) {
  json_object *q = json_object_new_object();
  json_object_object_add(q, "queue", json_object_new_string(r->queue));
  json_object_object_add(q, "existed", json_object_new_boolean(r->existed));
  json_object_object_add(q, "was_classic", json_object_new_boolean(r->was_classic));
  json_object_object_add(q, "resumed", json_object_new_boolean(r->resumed));
  json_object_object_add(q, "pending", json_object_new_int64((int64_t)r->pending));
  json_object_object_add(q, "to_holding", json_object_new_int64((int64_t)r->to_holding));
  json_object_object_add(q, "to_queue", json_object_new_int64((int64_t)r->to_queue));
  json_object_object_add(q, "remembered", json_object_new_int64((int64_t)r->remembered));
  json_object_object_add(q, "catalog_corrected",
                         json_object_new_int64((int64_t)r->catalog_corrected));
  json_object_object_add(q, "done", json_object_new_boolean(done));
  return q;
}

int cmd_migrate(int argc, char **argv) {
  cli_opts o;
  memset(&o, 0, sizeof o);
  bool help;
  int rc = cli_opts_load(&cmd_migrate_spec, argc, argv, &o, on_flag, &o, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_migrate_spec, stdout);
    return EXIT_OK;
  }
  if (o.cfg->policy.dlq_classic) {
    cli_error(
        "migrate: dlq_queue_type is classic; set it to quorum first (DLQ_BRIDGE_DLQ_QUEUE_TYPE)");
    return EXIT_USAGE;
  }
  ops_session *session = NULL;
  if (!o.dry_run) {
    int arc = cli_audit_start(&o, "migrate", &session);
    if (arc != EXIT_OK) return arc;
  }
  dlqb_topology *topo = malloc(sizeof *topo);
  if (topo == NULL) {
    ops_session_close(session);
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  memset(topo, 0, sizeof *topo);
  dlqb_topology_add_pipeline(topo, cli_pipeline());
  ops_ctx x = cli_context(&o);
  json_object *list = json_object_new_array();
  dlqb_error err;
  dlqb_status st = DLQB_OK;
  for (size_t i = 0; st == DLQB_OK && i < topo->nqueues; i++) {
    if (!topo->queues[i].holds_items) continue;
    ops_migrate_result r;
    st = ops_migrate_queue(&x, &topo->queues[i], ops_session_audit(session), o.dry_run,
                           cli_stop_flag(), &r, &err);
    bool done = st == DLQB_OK && !o.dry_run;
    if (!o.json && (st == DLQB_OK || r.to_holding + r.to_queue > 0)) print_one(&r, o.dry_run, done);
    json_object_array_add(list, one_json(&r, done));
  }
  free(topo);
  ops_session_close(session);
  if (st != DLQB_OK) {
    json_object_put(list);
    return cli_fail(&err);
  }
  if (o.json) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "queues", list);
    json_object_object_add(j, "dry_run", json_object_new_boolean(o.dry_run));
    cli_print_json(j);
  } else {
    json_object_put(list);
  }
  return EXIT_OK;
}

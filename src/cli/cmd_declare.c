/* dlq-bridge declare: create the topology, or print it as definitions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/catalog_stream.h"
#include "dlqb/declare.h"
#include "dlqb/link.h"

static const cli_flag flags[] = {
    {"print-definitions", false, NULL,
     "print the topology in RabbitMQ's definitions format and exit (no broker needed)"},
    {"vhost", true, "VHOST", "vhost named in --print-definitions output (default /)"},
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_declare_spec = {
    .name = "declare",
    .summary = "declare the queues, exchanges and bindings dlq-bridge needs",
    .usage = "dlq-bridge declare [--print-definitions [--vhost VHOST]] [settings]",
    .details = "Covers every pipeline of the config file's `pipelines` (without it, the dsr\n"
               "pipeline's, today's names). Idempotent: a second run changes nothing. If a\n"
               "queue or exchange exists with other arguments, exits 1 naming it and the\n"
               "argument; nothing is ever deleted or purged. `dlq-bridge run` declares the same "
               "topology at start.",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_TOPOLOGY, NULL},
};

typedef struct {
  bool print;
  const char *vhost;
} declare_opts;

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  declare_opts *o = ctx;
  if (flag == NULL) return dlqb_fail(err, DLQB_EINVAL, "unexpected argument '%s'", value);
  if (strcmp(flag, "print-definitions") == 0) o->print = true;
  if (strcmp(flag, "vhost") == 0) o->vhost = value;
  return DLQB_OK;
}

int cmd_declare(int argc, char **argv) {
  static dlqb_config cfg; /* not on the stack: a config is large */
  declare_opts o = {false, "/"};
  bool help;
  int rc = cli_load(&cmd_declare_spec, argc, argv, &cfg, on_flag, &o, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_declare_spec, stdout);
    return EXIT_OK;
  }
  dlqb_topology *topo = dlqb_topology_new(&cfg);
  if (topo == NULL) {
    cli_error("declare: out of memory");
    return EXIT_RUNTIME;
  }
  dlqb_error err;
  if (o.print) {
    char *json = NULL;
    dlqb_status st = dlqb_topology_definitions(topo, o.vhost, &json, &err);
    free(topo);
    if (st != DLQB_OK) {
      cli_error("%s", err.msg);
      return EXIT_RUNTIME;
    }
    printf("%s\n", json);
    free(json);
    return EXIT_OK;
  }
  dlqb_link *link = NULL;
  dlqb_status st = dlqb_link_open(&cfg.broker, "dlq-bridge declare", &link, &err);
  dlqb_declared kept;
  if (st == DLQB_OK) st = dlqb_topology_declare(link, topo, &kept, &err);
  dlqb_link_close(link);
  /* Each catalog stream takes a first event before anything else writes
   * to it (a stream declared a moment ago crashes the channel that writes
   * to it first: docs/rabbitmq-versions.md). */
  for (size_t i = 0; st == DLQB_OK && i < dlqb_config_pipeline_count(&cfg); i++) {
    dlqb_pipeline p;
    dlqb_config_pipeline(&cfg, i, &p);
    st = dlqb_catalog_wait_ready(&cfg.broker, p.catalog, 10000, &err);
  }
  if (st != DLQB_OK) free(topo);
  if (st == DLQB_ECONFLICT) {
    /* Queue arguments are fixed once a queue exists: say what to do. */
    cli_error("%s (a queue's arguments cannot change in place: see \"Changing the topology\" "
              "in docs/rabbitmq-versions.md)",
              err.msg);
    return EXIT_RUNTIME;
  }
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_RUNTIME;
  }
  for (size_t i = 0; i < topo->nqueues; i++)
    printf("%-22s %s\n", topo->queues[i].name, topo->queues[i].purpose);
  free(topo);
  for (size_t i = 0; i < kept.nclassic; i++)
    fprintf(stderr,
            "dlq-bridge: queue '%s' is a classic queue (one copy, on one node) where a quorum "
            "queue is configured: kept as it is; `dlq-bridge migrate` moves its items into one\n",
            kept.classic[i]);
  return EXIT_OK;
}

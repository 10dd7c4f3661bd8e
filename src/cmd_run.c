/* dlq-bridge run: the routing daemon. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dlqb/log.h"
#include "dlqb/router.h"

static const cli_flag flags[] = {
    {"no-declare", false, NULL,
     "do not declare the topology (for a bridge user without configure permission)"},
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_run_spec = {
    .name = "run",
    .summary = "route failed tasks: retry with backoff, or dead-letter (the daemon)",
    .usage = "dlq-bridge run [--no-declare] [settings]",
    .details = "Declares the topology, then consumes the failure inbox dsr.failed and sends\n"
               "each failed task back to dsr.work through a retry delay queue, or to\n"
               "dsr.dlq.manual. Every republish is confirmed before the original is acked.\n"
               "SIGTERM or SIGINT finishes what is in flight and exits 0.",
    .flags = flags,
    .settings = true,
};

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  if (flag == NULL) return dlqb_fail(err, DLQB_EINVAL, "unexpected argument '%s'", value);
  *(bool *)ctx = true; /* the only flag: --no-declare */
  return DLQB_OK;
}

int cmd_run(int argc, char **argv) {
  dlqb_config cfg;
  bool no_declare = false, help;
  int rc = cli_load(&cmd_run_spec, argc, argv, &cfg, on_flag, &no_declare, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_run_spec, stdout);
    return EXIT_OK;
  }
  volatile sig_atomic_t *stop = cli_stop_flag();
  char url[DLQB_CONFIG_STR_MAX];
  dlqb_log_info("starting", "dlq-bridge run: broker %s, max_attempts %d, poison_threshold %d",
                dlqb_url_redact(cfg.url, url, sizeof url), cfg.max_attempts, cfg.poison_threshold);
  dlqb_error err = {{0}};
  dlqb_status st = dlqb_router_run(&cfg, no_declare, NULL, stop, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_FAILURE_;
  }
  dlqb_log_info("stopped", "finished in-flight work; exiting");
  return EXIT_OK;
}

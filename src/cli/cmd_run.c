/* dlq-bridge run: the routing daemon. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dlqb/anchor.h"
#include "dlqb/audit.h"
#include "dlqb/escalator.h"
#include "dlqb/log.h"
#include "dlqb/metrics.h"
#include "dlqb/router.h"

#ifndef DLQB_VERSION
#define DLQB_VERSION "0.1.0"
#endif

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

/* What the router's hooks reach (dlqb_router_hooks.ctx). */
typedef struct {
  dlqb_metrics *metrics; /* NULL when metrics are off */
  dlqb_audit *audit;     /* NULL when audit is off */
  dlqb_escalator *escalator; /* its own audit writer counts for health too */
  dlqb_anchor_pub *anchors;  /* the router's chain heads to dsr.audit.anchors */
} run_ctx;

/* The audit writers log their own failures and recovery (they retry by
 * themselves); /healthz learns of them here, about once a second. */
static void hook_on_tick(void *ctx) {
  run_ctx *rc = ctx;
  if (rc->metrics == NULL) return;
  char why[DLQB_ERROR_MAX];
  bool ok = dlqb_audit_health(rc->audit, why, sizeof why);
  if (ok) ok = dlqb_escalator_audit_health(rc->escalator, why, sizeof why);
  dlqb_metrics_set_audit(rc->metrics, ok, ok ? NULL : why,
                         dlqb_audit_pending(rc->audit) +
                             dlqb_escalator_audit_pending(rc->escalator));
  dlqb_metrics_set_anchored(rc->metrics, dlqb_anchor_health(rc->anchors, NULL, 0) &&
                                             dlqb_escalator_anchored(rc->escalator));
}

static void hook_after_ack(void *ctx, const dlqb_hop *hop, double confirm_seconds) {
  run_ctx *rc = ctx;
  if (rc->metrics != NULL) dlqb_metrics_count_hop(rc->metrics, hop, confirm_seconds);
}

static void hook_on_connected(void *ctx, int connected) {
  run_ctx *rc = ctx;
  if (rc->metrics != NULL) dlqb_metrics_set_connected(rc->metrics, connected != 0);
}

/* Starts the metrics endpoint and the queue refresher when metrics_addr is
 * set. A port that cannot be bound is an error: a bridge that silently
 * serves no metrics would leave its alerts blind. */
static dlqb_status metrics_start(const dlqb_config *cfg, run_ctx *rc, dlqb_metrics_server **srv,
                                 dlqb_metrics_refresher **ref, dlqb_error *err) {
  if (cfg->metrics_addr[0] == '\0') return DLQB_OK;
  rc->metrics = dlqb_metrics_new(DLQB_VERSION);
  if (rc->metrics == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  dlqb_status st = dlqb_metrics_server_start(rc->metrics, cfg->metrics_addr, srv, err);
  if (st == DLQB_OK)
    st = dlqb_metrics_refresher_start(rc->metrics, cfg, DLQB_METRICS_REFRESH_MS, ref, err);
  if (st == DLQB_OK)
    dlqb_log_info("metrics", "serving http://%s/metrics and /healthz", cfg->metrics_addr);
  return st;
}

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
  dlqb_stop_flag *stop = cli_stop_flag();
  char url[DLQB_CONFIG_STR_MAX];
  dlqb_log_info("starting", "dlq-bridge run: broker %s, max_attempts %d, poison_threshold %d",
                dlqb_url_redact(cfg.url, url, sizeof url), cfg.max_attempts, cfg.poison_threshold);
  dlqb_error err = {{0}};
  run_ctx hctx = {0};
  dlqb_metrics_server *metrics_server = NULL;
  dlqb_metrics_refresher *refresher = NULL;
  dlqb_router_hooks hooks = {.after_ack = hook_after_ack,
                             .on_tick = hook_on_tick,
                             .on_connected = hook_on_connected,
                             .ctx = &hctx};
  /* A key readable by others, or a log that cannot be opened or written
   * (its chain_start), stops the start: better than a bridge that cannot
   * ack anything. */
  dlqb_status st = dlqb_audit_open(&cfg, cfg.instance, &hctx.audit, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    return st == DLQB_EINVAL ? EXIT_USAGE : EXIT_FAILURE_;
  }
  hooks.audit = hctx.audit;
  if (hctx.audit != NULL) dlqb_log_info("audit", "recording every hop in %s", cfg.audit_log);
  /* The router's chain heads go off the host every audit_anchor_interval. */
  dlqb_anchor_pub *anchors = NULL;
  if ((st = dlqb_anchor_start(&cfg, hctx.audit, &anchors, &err)) == DLQB_OK) hctx.anchors = anchors;
  else {
    dlqb_audit_close(hctx.audit);
    cli_error("%s", err.msg);
    return EXIT_FAILURE_;
  }
  st = metrics_start(&cfg, &hctx, &metrics_server, &refresher, &err);
  if (st == DLQB_OK) hook_on_tick(&hctx);
  /* DLQ items past DLQ_BRIDGE_DLQ_SLA go to compliance_review, from a
   * thread with its own connection (dlqb/escalator.h). */
  dlqb_escalator *escalator = NULL;
  if (st == DLQB_OK) st = dlqb_escalator_start(&cfg, hook_after_ack, &hctx, &escalator, &err);
  hctx.escalator = escalator;
  if (st == DLQB_OK) st = dlqb_router_run(&cfg, no_declare, &hooks, stop, &err);
  dlqb_escalator_stop(escalator);
  hctx.escalator = NULL;
  dlqb_metrics_refresher_stop(refresher);
  dlqb_metrics_server_stop(metrics_server);
  dlqb_metrics_free(hctx.metrics);
  /* chain_end, then its anchor, then the handle. */
  dlqb_audit_end(hctx.audit);
  hctx.anchors = NULL;
  dlqb_error aerr = {{0}};
  if (dlqb_anchor_stop(anchors, &aerr) != DLQB_OK)
    dlqb_log_warn("anchor_failing", "the last audit head is not anchored: %s", aerr.msg);
  dlqb_audit_close(hctx.audit);
  if (st == DLQB_ECONFLICT) {
    cli_error("%s (a queue's arguments cannot change in place: see \"Changing the topology\" "
              "in docs/rabbitmq-versions.md)", err.msg);
    return EXIT_FAILURE_;
  }
  if (st == DLQB_EACCESS) {
    cli_error("%s (a bridge user without configure permission runs with --no-declare)", err.msg);
    return EXIT_FAILURE_;
  }
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_FAILURE_;
  }
  dlqb_log_info("stopped", "finished in-flight work; exiting");
  return EXIT_OK;
}

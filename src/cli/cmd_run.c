/* dlq-bridge run: the routing daemon. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/anchor.h"
#include "dlqb/audit.h"
#include "dlqb/escalator.h"
#include "dlqb/log.h"
#include "dlqb/metrics.h"
#include "dlqb/ops.h"
#include "dlqb/router.h"
#include "dlqb/thread.h"

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
    .usage = "dlq-bridge run [--no-declare] [--pipeline NAME] [settings]",
    .details = "Declares the topology, then consumes the failure inbox dsr.failed and sends\n"
               "each failed task back to dsr.work through a retry delay queue, or to\n"
               "dsr.dlq.manual. Every republish is confirmed before the original is acked.\n"
               "With `pipelines` in the config file it serves every pipeline configured\n"
               "(--pipeline NAME: that one only), each on its own connection, consumer and\n"
               "broker user, with one /metrics and a /healthz line per pipeline.\n"
               "SIGTERM or SIGINT finishes what is in flight and exits 0.",
    .flags = flags,
    .settings = true,
};

/* What the router's hooks reach (dlqb_router_hooks.ctx). */
typedef struct {
  dlqb_metrics *metrics;     /* NULL when metrics are off */
  dlqb_audit *audit;         /* NULL when audit is off */
  dlqb_escalator *escalator; /* its own audit writer counts for health too */
  ops_session *session;      /* the router's trail and anchors (ops_session_open) */
  dlqb_anchor_pub *anchors;  /* the session's: the router's chain heads to dsr.audit.anchors */
  /* Several pipelines: the daemon's start rule (run_many) reads these. */
  atomic_bool consumed; /* the router reached its consumer once */
  atomic_bool blocked;  /* a failure a single router would have exited for, before that */
  dlqb_status last_st;  /* its last failure (the router's thread; read after the join) */
  char last_why[DLQB_ERROR_MAX];
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
  bool escalating = dlqb_escalator_health(rc->escalator, why, sizeof why);
  dlqb_metrics_set_escalator(rc->metrics, escalating ? NULL : why);
}

static void hook_after_ack(void *ctx, const dlqb_hop *hop, double confirm_seconds) {
  run_ctx *rc = ctx;
  if (rc->metrics != NULL) dlqb_metrics_count_hop(rc->metrics, hop, confirm_seconds);
}

static void hook_on_connected(void *ctx, int connected) {
  run_ctx *rc = ctx;
  if (connected) {
    atomic_store(&rc->consumed, true);
    /* The topology is declared (or was there): from now on a stream the
     * broker does not take anchors on is an outage worth a log line. */
    dlqb_anchor_release(rc->anchors);
    dlqb_escalator_release_anchors(rc->escalator);
  }
  if (rc->metrics != NULL) dlqb_metrics_set_connected(rc->metrics, connected != 0);
}

static void hook_on_failure(void *ctx, dlqb_status st, const char *why, bool give_up) {
  run_ctx *rc = ctx;
  rc->last_st = st;
  snprintf(rc->last_why, sizeof rc->last_why, "%s", why);
  if (give_up && !atomic_load(&rc->consumed)) atomic_store(&rc->blocked, true);
  if (rc->metrics != NULL) dlqb_metrics_set_link_error(rc->metrics, why);
}

/* Starts the metrics endpoint and the queue refresher when metrics_addr is
 * set. A port that cannot be bound is an error: a bridge that silently
 * serves no metrics would leave its alerts blind. */
static dlqb_status metrics_start(const dlqb_config *cfg, run_ctx *rc, dlqb_metrics_server **srv,
                                 dlqb_metrics_refresher **ref, dlqb_error *err) {
  if (cfg->metrics_addr[0] == '\0') return DLQB_OK;
  rc->metrics = dlqb_metrics_new(DLQB_VERSION);
  if (rc->metrics == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  /* From a config file's `pipelines`: the samples and /healthz name the
   * pipeline served (cli_load kept it alone); without, as before. */
  if (cfg->pipeline_count > 0) dlqb_metrics_set_pipeline(rc->metrics, cfg->pipelines[0].p.name);
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

/* The exit for a router's failure: the hint its status calls for. */
static int run_failed(const char *who, dlqb_status st, const char *msg) {
  if (st == DLQB_ECONFLICT)
    cli_error("%s%s (a queue's arguments cannot change in place: see \"Changing the topology\" "
              "in docs/rabbitmq-versions.md)",
              who, msg);
  else if (st == DLQB_EACCESS)
    cli_error("%s%s (a bridge user without configure permission runs with --no-declare)", who, msg);
  else cli_error("%s%s", who, msg);
  return EXIT_RUNTIME;
}

/* ---- several pipelines in one daemon ---------------------------------- */

/* One pipeline of the daemon, with everything of its own: its settings
 * alone (its policy, broker user, and instance INSTANCE/NAME so that its
 * connections and audit writers are told apart), its router thread,
 * escalator, audit writers, anchor publishers, registry and refresher. */
typedef struct {
  dlqb_config *cfg; /* its own, derived from the daemon's (dlqb_config_copy) */
  char name[DLQB_PIPELINE_NAME_MAX];
  run_ctx hctx;
  dlqb_router_hooks hooks;
  dlqb_metrics_refresher *refresher;
  bool no_declare;
  dlqb_stop_flag *stop; /* the daemon's routers' */
  pthread_t thread;
  bool started;
  dlqb_status st;
  dlqb_error err;
} served;

static void *serve_main(void *arg) {
  served *sv = arg;
  sv->st = dlqb_router_run(sv->cfg, sv->no_declare, &sv->hooks, sv->stop, &sv->err);
  return NULL;
}

/* Pipeline i of cfg alone, as `run --pipeline NAME` would serve it.
 * false when out of memory. */
static bool serve_config(const dlqb_config *cfg, size_t i, served *sv) {
  dlqb_pipeline p;
  dlqb_config_pipeline(cfg, i, &p);
  if ((sv->cfg = dlqb_config_copy(cfg)) == NULL) return false;
  dlqb_config_pipeline_only(sv->cfg, i);
  dlqb_config_use_pipeline(sv->cfg, &p);
  dlqb_config_use_pipeline_user(sv->cfg, 0);
  snprintf(sv->name, sizeof sv->name, "%s", p.name);
  size_t room = sizeof sv->cfg->instance - strlen(p.name) - 2;
  snprintf(sv->cfg->instance, sizeof sv->cfg->instance, "%.*s/%s", (int)room, cfg->instance,
           p.name);
  return true;
}

/* Stops and frees what serve_open started (the router thread joined). */
static void serve_close(served *sv) {
  dlqb_escalator_stop(sv->hctx.escalator);
  sv->hctx.escalator = NULL;
  dlqb_metrics_refresher_stop(sv->refresher);
  sv->refresher = NULL;
  /* chain_end, then its anchor, then the handle. */
  sv->hctx.anchors = NULL;
  sv->hctx.audit = NULL;
  ops_session_close(sv->hctx.session);
  sv->hctx.session = NULL;
  dlqb_metrics_free(sv->hctx.metrics);
  sv->hctx.metrics = NULL;
  dlqb_config_free(sv->cfg); /* wiped: the URL may hold the password */
  sv->cfg = NULL;
}

/* Its audit writer and anchors, registry, refresher and escalator. */
static dlqb_status serve_open(served *sv, bool metrics, dlqb_error *err) {
  run_ctx *h = &sv->hctx;
  atomic_init(&h->consumed, false);
  atomic_init(&h->blocked, false);
  ops_session_opts so = {
      .cfg = sv->cfg, .writer = sv->cfg->instance, .without_trail = true, .held_anchors = true};
  dlqb_status st = ops_session_open(&so, &h->session, err);
  h->audit = ops_session_audit(h->session);
  h->anchors = ops_session_anchors(h->session);
  if (st == DLQB_OK && metrics) {
    h->metrics = dlqb_metrics_new(DLQB_VERSION);
    if (h->metrics == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    dlqb_metrics_set_pipeline(h->metrics, sv->name);
    st = dlqb_metrics_refresher_start(h->metrics, sv->cfg, DLQB_METRICS_REFRESH_MS, &sv->refresher,
                                      err);
  }
  if (st == DLQB_OK) hook_on_tick(h);
  if (st == DLQB_OK) st = dlqb_escalator_start(sv->cfg, hook_after_ack, h, &h->escalator, err);
  sv->hooks = (dlqb_router_hooks){.audit = h->audit,
                                  .after_ack = hook_after_ack,
                                  .on_tick = hook_on_tick,
                                  .on_connected = hook_on_connected,
                                  .on_failure = hook_on_failure,
                                  .ctx = h,
                                  .persist = true};
  return st;
}

/* Every pipeline of cfg, each in threads of its own: a pipeline whose
 * queue is gone, whose user lost its permission or that is flooded does
 * not end or hold up the others (its router retries with backoff and
 * /healthz says why). The daemon exits 1 at start only when no pipeline
 * could reach its consumer and every one failed for a reason a daemon of
 * one pipeline exits for (refused credentials, permission or arguments,
 * a broker still unreachable after startup_wait); once one has, it runs
 * until SIGTERM and keeps retrying the others. */
static int run_many(const dlqb_config *cfg, bool no_declare, dlqb_stop_flag *stop) {
  size_t n = cfg->pipeline_count;
  served *sv = calloc(n, sizeof *sv);
  if (sv == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  dlqb_stop_flag routers_stop;
  atomic_init(&routers_stop, 0);
  dlqb_error err = {{0}};
  dlqb_status st = DLQB_OK;
  char url[DLQB_CONFIG_STR_MAX];
  bool metrics = cfg->metrics_addr[0] != '\0';
  for (size_t i = 0; i < n && st == DLQB_OK; i++) {
    if (!serve_config(cfg, i, &sv[i])) {
      st = dlqb_fail(&err, DLQB_ENOMEM, "out of memory");
      break;
    }
    sv[i].no_declare = no_declare;
    sv[i].stop = &routers_stop;
    dlqb_log_set_pipeline(sv[i].name);
    dlqb_log_info("starting", "broker %s, max_attempts %d, poison_threshold %d, from %s",
                  dlqb_url_redact(sv[i].cfg->broker.url, url, sizeof url),
                  sv[i].cfg->policy.max_attempts, sv[i].cfg->policy.poison_threshold,
                  sv[i].cfg->pipelines[0].p.failed);
    st = serve_open(&sv[i], metrics, &err);
  }
  dlqb_log_set_pipeline(NULL);
  if (st == DLQB_OK && cfg->audit.log[0] != '\0')
    dlqb_log_info("audit", "recording every hop in %s (a writer per pipeline)", cfg->audit.log);
  dlqb_metrics_server *server = NULL;
  if (st == DLQB_OK && metrics) {
    dlqb_metrics *ms[DLQB_MAX_PIPELINES];
    for (size_t i = 0; i < n; i++) ms[i] = sv[i].hctx.metrics;
    st = dlqb_metrics_server_start_set(ms, n, cfg->metrics_addr, &server, &err);
    if (st == DLQB_OK)
      dlqb_log_info("metrics", "serving http://%s/metrics and /healthz for %zu pipelines",
                    cfg->metrics_addr, n);
  }
  /* The routers' threads take no signal: SIGTERM reaches this one. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (size_t i = 0; i < n && st == DLQB_OK; i++) {
    int e = dlqb_thread_start(&sv[i].thread, serve_main, &sv[i]); /* it decodes frames */
    if (e != 0)
      st = dlqb_fail(&err, DLQB_ENOMEM, "cannot start the router thread of %s", sv[i].name);
    sv[i].started = e == 0;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  bool none_served = false;
  while (st == DLQB_OK && !*stop) {
    bool any = false, all_blocked = true;
    for (size_t i = 0; i < n; i++) {
      if (atomic_load(&sv[i].hctx.consumed)) any = true;
      if (!atomic_load(&sv[i].hctx.blocked)) all_blocked = false;
    }
    if (any) break; /* from now on nothing but SIGTERM ends the daemon */
    if (all_blocked) {
      none_served = true;
      break;
    }
    dlqb_sleep_us(stop, 50 * 1000);
  }
  while (st == DLQB_OK && !none_served && !*stop) dlqb_sleep_us(stop, 1000 * 1000);
  atomic_store(&routers_stop, 1);
  for (size_t i = 0; i < n; i++)
    if (sv[i].started) pthread_join(sv[i].thread, NULL);
  dlqb_metrics_server_stop(server);
  for (size_t i = 0; i < n; i++) serve_close(&sv[i]);
  int rc = EXIT_OK;
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    rc = st == DLQB_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
  } else if (none_served) {
    for (size_t i = 0; i < n; i++) {
      char who[DLQB_PIPELINE_NAME_MAX + 16];
      snprintf(who, sizeof who, "pipeline %s: ", sv[i].name);
      rc = run_failed(who, sv[i].hctx.last_st, sv[i].hctx.last_why);
    }
  } else {
    dlqb_log_info("stopped", "finished in-flight work of every pipeline; exiting");
  }
  free(sv);
  return rc;
}

int cmd_run(int argc, char **argv) {
  static dlqb_config cfg; /* not on the stack: a config is large */
  bool no_declare = false, help;
  int rc = cli_load(&cmd_run_spec, argc, argv, &cfg, on_flag, &no_declare, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_run_spec, stdout);
    return EXIT_OK;
  }
  dlqb_stop_flag *stop = cli_stop_flag();
  /* Several pipelines kept (no --pipeline): each in threads of its own. */
  if (cfg.pipeline_count > 1) return run_many(&cfg, no_declare, stop);
  char url[DLQB_CONFIG_STR_MAX];
  dlqb_log_info("starting", "dlq-bridge run: broker %s, max_attempts %d, poison_threshold %d",
                dlqb_url_redact(cfg.broker.url, url, sizeof url), cfg.policy.max_attempts,
                cfg.policy.poison_threshold);
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
  /* The router's chain heads go off the host every audit_anchor_interval,
   * once the router has declared their stream. */
  ops_session_opts so = {
      .cfg = &cfg, .writer = cfg.instance, .without_trail = true, .held_anchors = true};
  dlqb_status st = ops_session_open(&so, &hctx.session, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    return st == DLQB_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
  }
  hctx.audit = ops_session_audit(hctx.session);
  hctx.anchors = ops_session_anchors(hctx.session);
  hooks.audit = hctx.audit;
  if (hctx.audit != NULL) dlqb_log_info("audit", "recording every hop in %s", cfg.audit.log);
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
  hctx.anchors = NULL;
  ops_session_close(hctx.session);
  if (st != DLQB_OK) return run_failed("", st, err.msg);
  dlqb_log_info("stopped", "finished in-flight work; exiting");
  return EXIT_OK;
}

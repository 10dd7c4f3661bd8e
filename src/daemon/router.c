/* The daemon's routing loop: the failure inbox through the routing plan
 * (dlqb/route.h) on the confirm-before-ack pipe, with reconnects. */
#include "dlqb/router.h"

#include "dlqb/catalog_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlqb/clock.h"
#include "dlqb/duration.h"
#include "dlqb/link.h"
#include "dlqb/log.h"
#include "dlqb/memo.h"
#include "dlqb/pipe.h"
#include "dlqb/route.h"
#include "dlqb/text.h"
#include "dlqb/declare.h"
#include "dlqb/topology.h"

#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000 /* a reconnect attempt is cheap; a long outage should not add 30 s */

typedef struct {
  const dlqb_config *cfg;
  /* The pipeline it routes: the config's first (the one `run` serves;
   * without `pipelines`, dsr with today's names). */
  dlqb_pipeline p;
  const dlqb_router_hooks *hooks;
  uint64_t rng;
  bool told_writers;          /* the catalog_writers warning, once a run */
  bool told_classic;          /* the kept-classic-queue warning, once a run */
  dlqb_stop_flag *stop;       /* the daemon's (SIGTERM) */
  dlqb_stop_flag session_end; /* the pipe's: *stop, or the audit trail is back */
  uint64_t held_for_audit;    /* deliveries of this session left unrouted */
  bool consumed;              /* the last session reached its consumer */
  /* Routes confirmed whose originals a lost session could not ack (the
   * pipe's memory, dlqb/memo.h): when those come back, redelivered, they
   * are acked, not routed a second time. Twice the window, so two losses
   * in a row are covered; NULL (out of memory): none. */
  dlqb_memo *sent;
} router;

static uint32_t next_random(router *r) {
  /* xorshift64*: jitter needs spread, not secrecy. */
  r->rng ^= r->rng >> 12;
  r->rng ^= r->rng << 25;
  r->rng ^= r->rng >> 27;
  return (uint32_t)((r->rng * 0x2545F4914F6CDD1DULL) >> 32);
}

/* The pipe polls session_end, not the daemon's flag, so that on_tick can
 * end a session; this keeps it following the daemon's flag at every delivery and
 * tick (so SIGTERM is seen within a tick, about a second, when idle). */
static void follow_stop(router *r) {
  if (*r->stop) atomic_store(&r->session_end, 1);
}

/* The I/O around the pure routing plan (dlqb/route.h): read the delivery,
 * publish where the plan says, with its header changes. */
static dlqb_status route_one(void *ctx, dlqb_pipe *pipe, const dlqb_delivery *d, dlqb_error *err) {
  router *r = ctx;
  follow_stop(r);
  dlqb_audit *audit = r->hooks ? r->hooks->audit : NULL;
  if (!dlqb_audit_healthy(audit)) {
    /* A writer that cannot record moves nothing: leave it unacked and
     * unrouted (the window bounds how many), and take them up again on a
     * new session once the log is written (on_tick). */
    if (r->held_for_audit++ == 0)
      dlqb_log_warn("audit_holding",
                    "the audit log cannot be written; leaving new failures in "
                    "%s until it can",
                    r->p.failed);
    dlqb_pipe_hold(pipe, d);
    return DLQB_OK;
  }
  const amqp_table_t *headers =
      (d->props->_flags & AMQP_BASIC_HEADERS_FLAG) ? &d->props->headers : NULL;
  char message_id[sizeof((dlqb_hop *)0)->message_id] = "";
  if (d->props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
    dlqb_text_sanitize(message_id, sizeof message_id, d->props->message_id.bytes,
                       d->props->message_id.len);
  dlqb_route_plan plan;
  int64_t now = dlqb_now_ms();
  dlqb_route_plan_make_pipeline(r->cfg, &r->p, headers, d->body.bytes, d->body.len, message_id, now,
                                next_random(r), &plan);
  /* The first failure's hop says when the request was received: what
   * `audit report` counts the statutory response time from. */
  dlqb_route_plan_receipt(&plan, d->props, &r->p.profile, now);
  /* The profile forbids bodies in the DLQ: the same delivery, sent on
   * without its body (the plan's headers say what was left off). */
  dlqb_delivery sent = *d;
  if (plan.drop_body) sent.body = amqp_empty_bytes;
  /* Configured pipelines are named in the trail; a deployment without
   * `pipelines` writes today's records. */
  if (r->cfg->pipeline_count > 0)
    snprintf(plan.hop.pipeline, sizeof plan.hop.pipeline, "%s", r->p.name);

  amqp_basic_properties_t props = *d->props;
  props._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  if (plan.has_expiration) {
    props._flags |= AMQP_BASIC_EXPIRATION_FLAG;
    props.expiration = dlqb_bytes(plan.expiration);
  } else {
    props._flags &= ~AMQP_BASIC_EXPIRATION_FLAG;
  }
  dlqb_status st = dlqb_pipe_forward_rewritten(pipe, &sent, "", plan.target, &props, plan.sets,
                                               plan.nsets, &plan.hop, err);
  if (st != DLQB_EREFUSED) return st;
  /* The broker would not take it back as it is: to the DLQ, with only the
   * headers the bridge knows, saying why. The others in the window go on. */
  dlqb_log_warn("unpublishable", "message_id=%s: %s; sent to %s with only its envelope",
                plan.hop.message_id, err->msg, r->p.dlq);
  bool drop_body = plan.drop_body;
  dlqb_route_plan_refused(&plan, err->msg);
  snprintf(plan.target, sizeof plan.target, "%s", r->p.dlq);
  snprintf(plan.hop.to, sizeof plan.hop.to, "%s", r->p.dlq);
  props = *d->props;
  props._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  if (drop_body) {
    /* Minimal headers, still no body: say so in the ones kept. */
    plan.sets[plan.nsets++] =
        (dlqb_hset){DLQB_H_BODY_DROPPED, DLQB_HSET_INT, NULL, (int64_t)d->body.len};
  }
  return dlqb_pipe_forward_minimal(pipe, &sent, "", plan.target, &props, plan.sets, plan.nsets,
                                   &plan.hop, err);
}

/* A publish the broker returned (a delay queue missing, e.g. after a new
 * retry delay with --no-declare): the task goes to the DLQ instead, saying
 * why, while the rest of the window goes on. With the DLQ or the review
 * queue itself missing there is nowhere to put it: the run ends, and the
 * task waits in dsr.failed. */
static dlqb_status route_returned(void *ctx, dlqb_pipe *pipe, const dlqb_returned *ret,
                                  dlqb_error *err) {
  router *r = ctx;
  if (strcmp(ret->hop->to, r->p.dlq) == 0 || strcmp(ret->hop->to, r->p.review) == 0)
    return dlqb_fail(err, DLQB_EBROKER, "%s; nothing can be routed until it exists", ret->why);
  dlqb_log_warn("unroutable", "message_id=%s: %s; sent to %s instead", ret->hop->message_id,
                ret->why, r->p.dlq);
  dlqb_route_plan plan;
  memset(&plan, 0, sizeof plan);
  plan.hop = *ret->hop;
  dlqb_iso_time(dlqb_now_ms(), plan.now_iso, sizeof plan.now_iso);
  dlqb_route_plan_refused(&plan, ret->why);
  snprintf(plan.target, sizeof plan.target, "%s", r->p.dlq);
  snprintf(plan.hop.to, sizeof plan.hop.to, "%s", r->p.dlq);
  amqp_basic_properties_t props = *ret->props;
  return dlqb_pipe_republish(pipe, ret, "", plan.target, &props, plan.sets, plan.nsets, &plan.hop,
                             err);
}

static void log_hop(void *ctx, const dlqb_hop *hop, double confirm_seconds) {
  router *r = ctx;
  int level = hop->event == DLQB_EV_RETRY_SCHEDULED ? DLQB_LOG_DEBUG : DLQB_LOG_INFO;
  dlqb_log(level, dlqb_event_name(hop->event),
           "message_id=%s request_id=%s attempt=%lld to=%s reason=\"%s\"", hop->message_id,
           hop->request_id, (long long)hop->attempt, hop->to, hop->reason);
  if (r->hooks && r->hooks->after_ack) r->hooks->after_ack(r->hooks->ctx, hop, confirm_seconds);
}

static void on_tick(void *ctx) {
  router *r = ctx;
  if (r->hooks && r->hooks->on_tick) r->hooks->on_tick(r->hooks->ctx);
  follow_stop(r);
  /* Held deliveries come back only when the channel closes: once the audit
   * trail is writable again, end the session (acking what it recorded) so
   * that the next one routes them. */
  if (r->held_for_audit > 0 && dlqb_audit_healthy(r->hooks ? r->hooks->audit : NULL))
    atomic_store(&r->session_end, 1);
}

static void set_connected(router *r, int up) {
  if (r->hooks && r->hooks->on_connected) r->hooks->on_connected(r->hooks->ctx, up);
}

/* One connected session: declare, consume, route until stop or failure. */
static dlqb_status session(router *r, bool no_declare, dlqb_stop_flag *stop, bool *connected,
                           dlqb_error *err) {
  dlqb_link *link = NULL;
  dlqb_pipe *pipe = NULL;
  char name[320];
  snprintf(name, sizeof name, "dlq-bridge router %s", r->cfg->instance);
  dlqb_status st = dlqb_link_open(&r->cfg->broker, name, &link, err);
  if (st != DLQB_OK) return st;
  *connected = true;
  if (!no_declare) {
    dlqb_topology *topo = dlqb_topology_new(r->cfg);
    dlqb_declared kept;
    st = topo != NULL ? dlqb_topology_declare(link, topo, &kept, err)
                      : dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    free(topo);
    for (size_t i = 0; st == DLQB_OK && !r->told_classic && i < kept.nclassic; i++)
      dlqb_log_warn("classic_queue",
                    "queue '%s' is a classic queue (one copy, on one node) where a quorum queue "
                    "is configured: `dlq-bridge migrate` moves its items into one "
                    "(docs/runbook.md, \"Moving to quorum queues\")",
                    kept.classic[i]);
    r->told_classic = r->told_classic || (st == DLQB_OK && kept.nclassic > 0);
    /* A stream just declared must take a first event on a connection of
     * its own before the pipe writes to it (dlqb_catalog_wait_ready). */
    dlqb_error why;
    if (st == DLQB_OK &&
        dlqb_catalog_wait_ready(&r->cfg->broker, r->p.catalog, 10000, &why) != DLQB_OK)
      dlqb_log_warn("catalog_not_ready", "%s", why.msg);
  }
  /* Its own "in"s and "out"s must be believed, or every look takes the
   * catalog for changed outside and reads the queue. */
  const char *user = dlqb_link_user(link);
  const char *writers = r->cfg->catalog.writers;
  if (!r->told_writers && writers[0] != '\0' && !dlqb_user_listed(writers, user, strlen(user))) {
    r->told_writers = true;
    dlqb_log_warn("catalog_writers",
                  "catalog_writers does not list this daemon's broker user '%s': no look "
                  "believes its catalog events",
                  user);
  }
  dlqb_catalog_target cat;
  dlqb_catalog_target_of(&r->p, &cat);
  dlqb_pipe_options opt = {.queue = r->p.failed,
                           .prefetch = r->cfg->policy.prefetch,
                           .audit = r->hooks ? r->hooks->audit : NULL,
                           .memory = r->sent,
                           .catalog = &cat};
  dlqb_pipe_handler h = {.on_delivery = route_one,
                         .after_ack = log_hop,
                         .on_tick = on_tick,
                         .on_returned = route_returned,
                         .ctx = r};
  if (st == DLQB_OK) st = dlqb_pipe_new(link, &opt, &h, &pipe, err);
  if (st == DLQB_OK) {
    r->consumed = true;
    set_connected(r, 1);
    dlqb_log_info("connected", "routing from %s (prefetch %d)", r->p.failed,
                  r->cfg->policy.prefetch);
    r->held_for_audit = 0;
    atomic_store(&r->session_end, *stop);
    st = dlqb_pipe_run(pipe, &r->session_end, err);
    set_connected(r, 0);
  }
  dlqb_pipe_free(pipe);
  if (st == DLQB_OK || st == DLQB_EBROKER) dlqb_link_close(link);
  else dlqb_link_abort(link);
  return st;
}

dlqb_status dlqb_router_run(const dlqb_config *cfg, bool no_declare, const dlqb_router_hooks *hooks,
                            dlqb_stop_flag *stop, dlqb_error *err) {
  router r = {.cfg = cfg, .hooks = hooks, .stop = stop};
  dlqb_config_pipeline(cfg, 0, &r.p);
  r.sent = dlqb_memo_new(2 * (size_t)(cfg->policy.prefetch > 0 ? cfg->policy.prefetch : 1));
  if (cfg->pipeline_count > 0) dlqb_log_set_pipeline(r.p.name);
  bool persist = hooks != NULL && hooks->persist;
  bool reported_give_up = false;
  r.rng = (uint64_t)dlqb_now_ms() * 2654435761u ^ (uint64_t)getpid() << 32 ^ 0x9E3779B97F4A7C15ULL;
  bool ever_connected = false;
  /* Until the first contact, a broker that does not answer (still
   * booting, or a wrong address) is retried only up to startup_wait; then
   * the failure is the command's, so a wrong URL typed by hand fails fast
   * and a supervisor's start order need not be exact. */
  long long give_up_at = dlqb_mono_ms() + (long long)cfg->startup_wait_ms;
  long backoff = BACKOFF_MIN_MS;
  dlqb_status st = DLQB_OK;
  while (!*stop) {
    bool connected = false;
    r.consumed = false;
    st = session(&r, no_declare, stop, &connected, err);
    if (st == DLQB_OK && !*stop) {
      /* Ended to take up what it held while the audit log failed. */
      dlqb_log_info("audit_resumed", "the audit log is writable again; routing what was held");
      backoff = BACKOFF_MIN_MS;
      continue;
    }
    if (st == DLQB_OK) break;
    if (connected) ever_connected = true;
    bool first_contact = !ever_connected;
    long long now = dlqb_mono_ms();
    /* Retrying cannot fix these (a refused configuration or permission, a
     * password file); alone, say so and exit non-zero. */
    bool give_up = st == DLQB_ECONFLICT || st == DLQB_EINVAL || st == DLQB_EACCESS ||
                   (first_contact && (st == DLQB_EIO || st == DLQB_ENOMEM));
    if (!give_up && first_contact && now >= give_up_at) {
      give_up = true;
      if (cfg->startup_wait_ms > 0 && !reported_give_up) {
        char was[DLQB_ERROR_MAX], waited[32];
        snprintf(was, sizeof was, "%s", err->msg);
        dlqb_fail(err, st, "%.400s (still failing after startup_wait %s)", was,
                  dlqb_duration_format(cfg->startup_wait_ms, waited, sizeof waited));
      }
    }
    if (hooks != NULL && hooks->on_failure != NULL)
      hooks->on_failure(hooks->ctx, st, err->msg, give_up);
    if (give_up && !persist) break;
    if (give_up && !reported_give_up) {
      /* Persisting: said once at error level, then retried like any loss. */
      dlqb_log_error("pipeline_blocked",
                     "%s; retrying with backoff while the other pipelines "
                     "run",
                     err->msg);
      reported_give_up = true;
    }
    if (!give_up) reported_give_up = false;
    /* Alone, any contact starts the backoff over; persisting, only a
     * session that consumed does (a refused permission is not retried
     * every 200 ms). */
    if (persist ? r.consumed : connected && !give_up) backoff = BACKOFF_MIN_MS;
    long wait = backoff / 2 + (long)(next_random(&r) % (uint32_t)(backoff / 2 + 1));
    if (first_contact && !persist) {
      /* The last try of the startup wait falls on its end, not past it. */
      if (now + wait > give_up_at) wait = (long)(give_up_at - now);
      dlqb_log_warn("broker_unreachable", "%s; retrying in %ld ms (startup_wait: %lld s left)",
                    err->msg, wait, (give_up_at - now + 999) / 1000);
    } else if (!give_up) {
      dlqb_log_warn("disconnected", "%s; reconnecting in %ld ms", err->msg, wait);
    } else {
      dlqb_log_debug("disconnected", "%s; reconnecting in %ld ms", err->msg, wait);
    }
    dlqb_sleep_us(stop, (int64_t)wait * 1000);
    backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    st = DLQB_OK;
  }
  dlqb_memo_free(r.sent);
  return st;
}

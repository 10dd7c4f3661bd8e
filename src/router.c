/* The daemon's routing loop over the confirm-before-ack pipeline. */
#include "dlqb/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlqb/duration.h"
#include "dlqb/link.h"
#include "dlqb/log.h"
#include "dlqb/pipe.h"
#include "dlqb/policy.h"
#include "dlqb/text.h"
#include "dlqb/topology.h"

#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000 /* a reconnect attempt is cheap; a long outage should not add 30 s */

typedef struct {
  const dlqb_config *cfg;
  const dlqb_router_hooks *hooks;
  uint64_t rng;
} router;

static uint32_t next_random(router *r) {
  /* xorshift64*: jitter needs spread, not secrecy. */
  r->rng ^= r->rng >> 12;
  r->rng ^= r->rng << 25;
  r->rng ^= r->rng >> 27;
  return (uint32_t)((r->rng * 0x2545F4914F6CDD1DULL) >> 32);
}

static void copy_bytes(char *dst, size_t cap, amqp_bytes_t b) {
  dlqb_text_sanitize(dst, cap, b.bytes, b.len);
}

static dlqb_event event_of(const dlqb_decision *d) {
  if (d->route == DLQB_ROUTE_RETRY) return DLQB_EV_RETRY_SCHEDULED;
  if (d->reason == DLQB_REASON_POISON) return DLQB_EV_POISON;
  if (d->reason == DLQB_REASON_INVALID) return DLQB_EV_INVALID;
  return DLQB_EV_DEAD_LETTERED;
}

static dlqb_status route_one(void *ctx, dlqb_pipe *pipe, const dlqb_delivery *d, dlqb_error *err) {
  router *r = ctx;
  const amqp_table_t *headers =
      (d->props->_flags & AMQP_BASIC_HEADERS_FLAG) ? &d->props->headers : NULL;
  long long now = dlqb_now_ms();

  dlqb_envelope env;
  dlqb_error why;
  bool valid = dlqb_envelope_parse(headers, r->cfg->max_attempts, &env, &why) == DLQB_OK;
  dlqb_failure failure;
  dlqb_failure_read(headers, &failure);
  dlqb_decision dec;
  dlqb_policy_decide(r->cfg, valid ? &env : NULL, why.msg, &failure, now, next_random(r), &dec);

  char now_iso[DLQB_ISO_TIME_MAX], expiration[24];
  char target[DLQB_NAME_MAX];
  dlqb_iso_time(now, now_iso, sizeof now_iso);
  dlqb_hset sets[12];
  size_t n = 0;
  sets[n++] = (dlqb_hset){DLQB_H_LAST_ERROR, DLQB_HSET_STRING, dec.last_error, 0};
  if (valid) {
    sets[n++] = (dlqb_hset){DLQB_H_ATTEMPT, DLQB_HSET_INT, NULL, dec.attempt};
    /* Stamped so the bound travels with the task and a config change cannot
     * move it mid-flight. */
    sets[n++] = (dlqb_hset){DLQB_H_MAX_ATTEMPTS, DLQB_HSET_INT, NULL, env.max_attempts};
    if (!env.has_first_seen_at) {
      sets[n++] = (dlqb_hset){DLQB_H_FIRST_SEEN_AT, DLQB_HSET_STRING, now_iso, 0};
    }
    /* The worker's text now lives in last_error; a stale copy would be
     * mistaken for the next failure's. */
    sets[n++] = (dlqb_hset){DLQB_H_WORKER_ERROR, DLQB_HSET_REMOVE, NULL, 0};
  }
  amqp_basic_properties_t props = *d->props;
  props._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  if (dec.route == DLQB_ROUTE_RETRY) {
    dlqb_retry_queue_name(r->cfg->retry_delays_ms[dec.delay_tier], target, sizeof target);
    snprintf(expiration, sizeof expiration, "%llu", (unsigned long long)dec.delay_ms);
    props._flags |= AMQP_BASIC_EXPIRATION_FLAG;
    props.expiration = dlqb_bytes(expiration);
    sets[n++] = (dlqb_hset){DLQB_H_DLQ_REASON, DLQB_HSET_REMOVE, NULL, 0};
    /* The retry queue dead-letters the task back to dsr.work on expiry. An
     * x-death a client forged crashes that on RabbitMQ 3.10.8 (an array of
     * strings: function_clause in rabbit_dead_letter) and the queue stops
     * dead-lettering; it says nothing the bridge reads, so it goes. The
     * DLQ copy keeps it as it came. */
    if (dlqb_header_xdeath_forged(headers))
      sets[n++] = (dlqb_hset){"x-death", DLQB_HSET_REMOVE, NULL, 0};
  } else {
    snprintf(target, sizeof target, "%s", DLQB_Q_DLQ);
    /* Nothing may expire out of the DLQ. */
    props._flags &= ~AMQP_BASIC_EXPIRATION_FLAG;
    sets[n++] = (dlqb_hset){DLQB_H_DLQ_REASON, DLQB_HSET_STRING, dlqb_reason_name(dec.reason), 0};
    sets[n++] = (dlqb_hset){DLQB_H_DLQ_AT, DLQB_HSET_STRING, now_iso, 0};
    if (dec.escalate) {
      /* Poison at the replay level: replays did not help, a person decides. */
      snprintf(target, sizeof target, "%s", DLQB_Q_REVIEW);
      sets[n++] = (dlqb_hset){"escalated_by", DLQB_HSET_STRING, "dlq-bridge", 0};
      sets[n++] = (dlqb_hset){"escalated_at", DLQB_HSET_STRING, now_iso, 0};
      sets[n++] = (dlqb_hset){"escalation_reason", DLQB_HSET_STRING, "max_replays", 0};
    }
  }

  dlqb_hop hop;
  memset(&hop, 0, sizeof hop);
  hop.event = event_of(&dec);
  if (d->props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
    copy_bytes(hop.message_id, sizeof hop.message_id, d->props->message_id);
  if (valid) {
    memcpy(hop.request_id, env.request_id, sizeof hop.request_id);
    memcpy(hop.source_system, env.source_system, sizeof hop.source_system);
    memcpy(hop.legal_basis, env.legal_basis, sizeof hop.legal_basis);
  }
  hop.attempt = dec.attempt;
  snprintf(hop.reason, sizeof hop.reason, "%s", dec.last_error);
  snprintf(hop.cause, sizeof hop.cause, "%s", dlqb_reason_name(dec.reason));
  if (dec.escalate) {
    hop.event = DLQB_EV_ESCALATED;
    snprintf(hop.cause, sizeof hop.cause, "max_replays");
  }
  snprintf(hop.from, sizeof hop.from, "%s", DLQB_Q_FAILED);
  snprintf(hop.to, sizeof hop.to, "%s", target);
  snprintf(hop.actor, sizeof hop.actor, "system");
  return dlqb_pipe_forward_rewritten(pipe, d, "", target, &props, sets, n, &hop, err);
}

static void log_hop(void *ctx, const dlqb_hop *hop, double confirm_seconds) {
  router *r = ctx;
  int level = hop->event == DLQB_EV_RETRY_SCHEDULED ? DLQB_LOG_DEBUG : DLQB_LOG_INFO;
  dlqb_log(level, dlqb_event_name(hop->event),
           "message_id=%s request_id=%s attempt=%lld to=%s reason=\"%s\"",
           hop->message_id, hop->request_id, (long long)hop->attempt, hop->to, hop->reason);
  if (r->hooks && r->hooks->after_ack) r->hooks->after_ack(r->hooks->ctx, hop, confirm_seconds);
}

static void on_tick(void *ctx) {
  router *r = ctx;
  if (r->hooks && r->hooks->on_tick) r->hooks->on_tick(r->hooks->ctx);
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
  dlqb_status st = dlqb_link_open(r->cfg, name, &link, err);
  if (st != DLQB_OK) return st;
  *connected = true;
  if (!no_declare) {
    dlqb_topology topo;
    dlqb_topology_build(r->cfg, &topo);
    st = dlqb_topology_declare(link, &topo, err);
  }
  dlqb_pipe_options opt = {.queue = DLQB_Q_FAILED, .prefetch = r->cfg->prefetch,
                           .audit = r->hooks ? r->hooks->audit : NULL};
  dlqb_pipe_handler h = {.on_delivery = route_one,
                         .after_ack = log_hop, .on_tick = on_tick, .ctx = r};
  if (st == DLQB_OK) st = dlqb_pipe_new(link, &opt, &h, &pipe, err);
  if (st == DLQB_OK) {
    set_connected(r, 1);
    dlqb_log_info("connected", "routing from %s (prefetch %d)", DLQB_Q_FAILED, r->cfg->prefetch);
    st = dlqb_pipe_run(pipe, stop, err);
    set_connected(r, 0);
  }
  dlqb_pipe_free(pipe);
  if (st == DLQB_OK || st == DLQB_EBROKER) dlqb_link_close(link);
  else dlqb_link_abort(link);
  return st;
}

dlqb_status dlqb_router_run(const dlqb_config *cfg, bool no_declare,
                            const dlqb_router_hooks *hooks, dlqb_stop_flag *stop,
                            dlqb_error *err) {
  router r = {.cfg = cfg, .hooks = hooks};
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
    st = session(&r, no_declare, stop, &connected, err);
    if (st == DLQB_OK) break;
    /* Retrying cannot fix these; say so and exit non-zero. */
    if (st == DLQB_ECONFLICT || st == DLQB_EINVAL || st == DLQB_EACCESS) break;
    if (connected) ever_connected = true;
    bool first_contact = !ever_connected;
    if (first_contact && (st == DLQB_EIO || st == DLQB_ENOMEM)) break; /* e.g. password file */
    long long now = dlqb_mono_ms();
    if (first_contact && now >= give_up_at) {
      if (cfg->startup_wait_ms > 0) {
        char was[DLQB_ERROR_MAX], waited[32];
        snprintf(was, sizeof was, "%s", err->msg);
        dlqb_fail(err, st, "%.400s (still failing after startup_wait %s)", was,
                  dlqb_duration_format(cfg->startup_wait_ms, waited, sizeof waited));
      }
      break;
    }
    if (connected) backoff = BACKOFF_MIN_MS;
    long wait = backoff / 2 + (long)(next_random(&r) % (uint32_t)(backoff / 2 + 1));
    if (first_contact) {
      /* The last try of the startup wait falls on its end, not past it. */
      if (now + wait > give_up_at) wait = (long)(give_up_at - now);
      dlqb_log_warn("broker_unreachable", "%s; retrying in %ld ms (startup_wait: %lld s left)",
                    err->msg, wait, (give_up_at - now + 999) / 1000);
    } else {
      dlqb_log_warn("disconnected", "%s; reconnecting in %ld ms", err->msg, wait);
    }
    for (long slept = 0; slept < wait && !*stop; slept += 50) usleep(50 * 1000);
    backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    st = DLQB_OK;
  }
  return st;
}

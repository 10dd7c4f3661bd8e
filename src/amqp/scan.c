/* One bounded pass over a classic queue on the pipe: see dlqb/scan.h. */
#include "dlqb/scan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/clock.h"
#include "dlqb/link.h"
#include "dlqb/log.h"
#include "dlqb/rate.h"
#include "dlqb/text.h"
#include "dlqb/topology.h"
#include "dlqb/xdeath.h"

#define IDLE_STOP_DEFAULT_MS 5000

struct dlqb_scan {
  const dlqb_scan_options *o;
  dlqb_pipe *pipe;
  int prefetch;
  uint64_t limit;
  dlqb_stop_flag stop_now; /* the pipe's stop flag */
  dlqb_scan_result res;
  dlqb_rate rate;
  /* The pipeline the pass serves (cfg's first: what a command serving one
   * keeps): its profile names the identity headers, and a configured one
   * is named in every hop. */
  dlqb_pipeline pipeline;
  bool name_pipeline;
};

static bool signalled(const dlqb_scan *s) { return s->o->stop != NULL && *s->o->stop; }

static void fill_hop(dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it, dlqb_event ev,
                     const char *to, const char *cause, const char *reason, dlqb_hop *hop) {
  memset(hop, 0, sizeof *hop);
  hop->event = ev;
  dlqb_hop_identity(hop, it);
  dlqb_text_sanitize(hop->reason, sizeof hop->reason, reason ? reason : "",
                     reason ? strlen(reason) : 0);
  snprintf(hop->cause, sizeof hop->cause, "%s", cause ? cause : "");
  snprintf(hop->from, sizeof hop->from, "%s", s->o->queue);
  snprintf(hop->to, sizeof hop->to, "%s", to);
  snprintf(hop->actor, sizeof hop->actor, "%s", s->o->actor ? s->o->actor : "unknown");
  if (s->name_pipeline) snprintf(hop->pipeline, sizeof hop->pipeline, "%s", s->pipeline.name);
  hop->edit = s->o->edit;
  /* The broker's delivery history the message carries, as the router's
   * hops record it: how often it was dead-lettered, and from where, stays
   * in the trail of every mover's hop too (what it was when taken). */
  const amqp_table_t *headers =
      (d->props->_flags & AMQP_BASIC_HEADERS_FLAG) ? &d->props->headers : NULL;
  dlqb_deaths_text(headers, hop->deaths, sizeof hop->deaths);
  hop->has_delivery_count = dlqb_header_delivery_count(headers, &hop->delivery_count);
}

dlqb_status dlqb_scan_forward(dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                              const char *queue, const dlqb_hset *sets, size_t nsets,
                              dlqb_event event, const char *cause, const char *reason,
                              dlqb_error *err) {
  /* --rate: wait here, in small steps so that a signal is noticed. The
   * pipe reads on meanwhile: the confirms and acks of the moves before
   * this one are counted now, not once the deliveries queued ahead of them
   * on the socket have all had their wait (a console job at 10 a second
   * showed moved 0 for 3 s while the work queue filled). */
  for (;;) {
    int64_t now = dlqb_mono_us(), wait = dlqb_rate_wait_us(&s->rate, now);
    if (wait <= 0) {
      dlqb_rate_take(&s->rate, now);
      break;
    }
    if (signalled(s)) {
      /* Not moved: it stays where it is. */
      s->stop_now = 1;
      s->res.interrupted = true;
      dlqb_scan_hold(s, d);
      return DLQB_OK;
    }
    /* ends early on a signal: seen above */
    dlqb_status pst = dlqb_pipe_pause(s->pipe, wait, s->o->stop, err);
    if (pst != DLQB_OK) return pst;
  }
  amqp_basic_properties_t props = *d->props;
  props._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  props._flags &= ~AMQP_BASIC_EXPIRATION_FLAG;
  dlqb_hop hop;
  fill_hop(s, d, it, event, queue, cause, reason, &hop);
  dlqb_status st =
      dlqb_pipe_forward_rewritten(s->pipe, d, "", queue, &props, sets, nsets, &hop, err);
  if (st != DLQB_EREFUSED) return st;
  /* The broker would not take it as it is: it stays where it is, and the
   * pass goes on with the others. */
  dlqb_log_warn("unpublishable", "message_id=%s left in %s: %s", it->message_id, s->o->queue,
                err->msg);
  s->res.refused++;
  dlqb_scan_hold(s, d);
  return DLQB_OK;
}

void dlqb_scan_ack(dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it, dlqb_event event,
                   const char *cause, const char *reason) {
  dlqb_hop hop;
  fill_hop(s, d, it, event, "", cause, reason, &hop);
  dlqb_pipe_ack(s->pipe, d, &hop);
}

void dlqb_scan_hold(dlqb_scan *s, const dlqb_delivery *d) {
  dlqb_pipe_hold(s->pipe, d);
  s->res.held++;
}

void dlqb_scan_stop(dlqb_scan *s) {
  s->res.stopped = true;
  s->stop_now = 1;
}

void dlqb_scan_progress(const dlqb_scan *s, dlqb_scan_result *out) { *out = s->res; }

static dlqb_status on_delivery(void *ctx, dlqb_pipe *pipe, const dlqb_delivery *d,
                               dlqb_error *err) {
  dlqb_scan *s = ctx;
  dlqb_pipe_stats ps;
  dlqb_pipe_get_stats(pipe, &ps); /* items settled against the memory count too */
  if (signalled(s)) {
    /* Stopping: leave the rest where it is. */
    s->res.interrupted = true;
    s->stop_now = 1;
    dlqb_pipe_hold(s->pipe, d);
    return DLQB_OK;
  }
  if (s->res.examined + ps.remembered >= s->limit) {
    /* The pipe's max_messages ends the pass; this one was in flight. */
    dlqb_pipe_hold(s->pipe, d);
    return DLQB_OK;
  }
  if (!dlqb_audit_healthy(s->o->audit)) {
    /* A writer that cannot record moves nothing: leave this and the rest. */
    s->res.audit_failed = true;
    s->stop_now = 1;
    dlqb_pipe_hold(s->pipe, d);
    return DLQB_OK;
  }
  dlqb_item it;
  dlqb_item_read_as(d->props, &s->pipeline.profile, &it);
  s->res.examined++;
  return s->o->on_item(s->o->ctx, s, d, &it, err);
}

/* A move the broker returned (its target queue is missing): the item stays
 * where it is, and the pass goes on with the others. */
static dlqb_status scan_returned(void *ctx, dlqb_pipe *pipe, const dlqb_returned *ret,
                                 dlqb_error *err) {
  dlqb_scan *s = ctx;
  (void)err;
  dlqb_log_warn("unroutable", "message_id=%s left in %s: %s", ret->hop->message_id, s->o->queue,
                ret->why);
  dlqb_pipe_keep_returned(pipe, ret);
  s->res.refused++;
  return DLQB_OK;
}

static void after_ack(void *ctx, const dlqb_hop *hop, double confirm_seconds) {
  dlqb_scan *s = ctx;
  /* Counted here, once the original is acked: a move that was published
   * but never confirmed stays in the queue and is not counted. */
  if (confirm_seconds >= 0) s->res.forwarded++;
  else if (hop->to[0] != '\0') s->res.remembered++; /* its copy made by an earlier pass */
  else s->res.removed++;
  if (s->o->after_ack != NULL) s->o->after_ack(s->o->ctx, hop);
}

static void on_tick(void *ctx) {
  dlqb_scan *s = ctx;
  if (signalled(s)) {
    s->res.interrupted = true;
    s->stop_now = 1;
  }
  if (s->o->on_tick != NULL) s->o->on_tick(s->o->ctx, s);
}

dlqb_status dlqb_scan_run(const dlqb_config *cfg, const dlqb_scan_options *o, dlqb_scan_result *res,
                          dlqb_error *err) {
  dlqb_scan s;
  memset(&s, 0, sizeof s);
  s.o = o;
  dlqb_config_pipeline(cfg, 0, &s.pipeline);
  /* As the router: a deployment without `pipelines` writes today's records. */
  s.name_pipeline = cfg->pipeline_count > 0;
  dlqb_rate_init(&s.rate, o->rate);
  memset(res, 0, sizeof *res);

  dlqb_link *link = NULL;
  dlqb_status st = dlqb_link_open(dlqb_config_broker(cfg, o->broker), o->purpose, &link, err);
  if (st != DLQB_OK) return st;
  uint32_t depth = 0;
  st = dlqb_link_queue_depth(link, o->queue, &depth, NULL, err);
  s.res.depth_at_start = depth;
  s.limit = depth;
  if (o->max_items > 0 && o->max_items < s.limit) s.limit = o->max_items;
  if (st == DLQB_OK && s.limit > 0) {
    int window = o->window > 0 ? o->window : DLQB_SCAN_WINDOW_DEFAULT;
    if (window > DLQB_SCAN_WINDOW_MAX) window = DLQB_SCAN_WINDOW_MAX;
    s.prefetch = s.limit < (uint64_t)window ? (int)s.limit : window;
    dlqb_catalog_target cat;
    dlqb_catalog_target_of(&s.pipeline, &cat);
    dlqb_pipe_options popt = {.queue = o->queue,
                              .catalog = &cat,
                              .prefetch = s.prefetch,
                              .max_messages = s.limit,
                              .deep = true,
                              .idle_stop_ms =
                                  o->idle_stop_ms > 0 ? o->idle_stop_ms : IDLE_STOP_DEFAULT_MS,
                              .audit = o->audit,
                              .audit_mode = o->audit_mode,
                              .audit_give_up = o->stop,
                              .memory = o->memory,
                              /* The DLQ and review queue (and migrate's
                               * holding queues) are quorum unless
                               * dlq_queue_type says classic. */
                              .return_in_order = !s.pipeline.policy.dlq_classic,
                              /* Every pass that moves is a mover: no
                               * copy before its intent is recorded. */
                              .record_intents = true};
    dlqb_pipe_handler h = {.on_delivery = on_delivery,
                           .after_ack = after_ack,
                           .on_tick = on_tick,
                           .on_returned = scan_returned,
                           .ctx = &s};
    st = dlqb_pipe_new(link, &popt, &h, &s.pipe, err);
    if (st == DLQB_OK) st = dlqb_pipe_run(s.pipe, &s.stop_now, err);
    dlqb_pipe_stats ps = {0};
    if (s.pipe != NULL) dlqb_pipe_get_stats(s.pipe, &ps);
    /* Items settled against the memory reach no on_item, but were there. */
    if (st == DLQB_OK && !s.stop_now && s.res.examined + ps.remembered < s.limit)
      s.res.short_read = true;
    if (st == DLQB_EIO && !dlqb_audit_healthy(o->audit)) s.res.audit_failed = true;
    s.res.unsettled_copies = ps.forwarded > s.res.forwarded ? ps.forwarded - s.res.forwarded : 0;
  }
  s.res.access_refused = st != DLQB_OK && dlqb_link_reply_code(link) == DLQB_REPLY_ACCESS_REFUSED;
  /* Closing returns every held (unacked) item to the queue, in place (each
   * channel's in its order, merged by the queue: see pipe.c). */
  bool close = st == DLQB_OK || st == DLQB_EBROKER;
  if (close) dlqb_pipe_return_held(s.pipe);
  dlqb_pipe_free(s.pipe);
  if (close) dlqb_link_close(link);
  else dlqb_link_abort(link);
  *res = s.res;
  return st;
}

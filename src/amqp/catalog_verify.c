/* The catalog checked against its queues (see dlqb/catalog_stream.h):
 * dlqb_catalog_verify, a pass that reads a queue whole and corrects what
 * the catalog holds, and dlqb_catalog_snapshot_rebuild, which folds a cut
 * stream again from such passes. Kept apart from the reader: a pass is the
 * scan's, which moves items on the pipe, which writes catalog events. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog_private.h"
#include "dlqb/catalog_stream.h"
#include "dlqb/clock.h"
#include "dlqb/hashset.h"
#include "dlqb/link.h"
#include "dlqb/scan.h"

dlqb_status dlqb_catalog_snapshot_rebuild(dlqb_catalog_reader *r, const dlqb_config *cfg,
                                          const dlqb_broker_conf *broker,
                                          dlqb_catalog_snapinfo *out, dlqb_error *err) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&r->lock);
  bool cut = r->cut && r->cut_mark.offset >= 0;
  if (cut) {
    /* The fold of what the stream holds from that marker on, from
     * nothing: every item still in a queue gets its "in" again from the
     * passes below, an item taken since is an unmatched "out". */
    dlqb_catalog_clear(r->c);
    r->mark = r->cut_mark;
    r->have_mark = true;
    r->cut = r->from_checkpoint = r->from_snapshot = false;
    r->since_checkpoint = 0;
  }
  pthread_mutex_unlock(&r->lock);
  if (!cut)
    return dlqb_fail(err, DLQB_EINVAL, "the catalog stream '%s' is not cut: nothing to rebuild",
                     r->t.stream);
  dlqb_status st = DLQB_OK;
  for (size_t q = 0; st == DLQB_OK && q < r->t.nqueues; q++) {
    /* A pass reads what is ready: items another consumer holds (a look
     * reading the queue itself, as every look does while the catalog is
     * refused) it would never see, and the snapshot would lack them; the
     * verify says so (others). */
    dlqb_catalog_verify_result v;
    st = dlqb_catalog_verify(r, cfg, broker, r->t.queues[q], &v, err);
    if (st == DLQB_OK && v.others > 0)
      st = dlqb_fail(err, DLQB_EIO,
                     "'%s' has %u consumer%s (a look or a move reading it): a pass would not see "
                     "what they hold; no snapshot written, try again",
                     r->t.queues[q], v.others, v.others == 1 ? "" : "s");
    else if (st == DLQB_OK && !v.complete)
      st = dlqb_fail(err, DLQB_EIO, "'%s' was not read whole: no snapshot written", r->t.queues[q]);
  }
  if (st == DLQB_OK) st = dlqb_catalog_snapshot(r, dlqb_config_broker(cfg, broker), out, err);
  return st;
}

typedef struct {
  dlqb_catalog_reader *r;
  int q;
  dlqb_hashset *seen; /* message_id -> times the pass read it */
  dlqb_link *writer;  /* corrections, confirmed at the end */
  uint64_t published;
  uint64_t added;
  dlqb_status st;
  dlqb_error *err;
} verify_ctx;

static dlqb_status verify_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                               dlqb_error *err) {
  verify_ctx *v = ctx;
  (void)err;
  dlqb_scan_hold(s, d);
  bool added;
  uint64_t *n = dlqb_hashset_add(v->seen, it->message_id, strlen(it->message_id), &added);
  if (n == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  if (added) *n = 0;
  (*n)++;
  /* More copies than the catalog holds: this one is unknown to it. */
  if (*n > dlqb_catalog_has(v->r->c, v->q, it->message_id)) {
    dlqb_catalog_event ev;
    dlqb_catalog_event_in(&v->r->t, v->r->t.queues[v->q], d->props, &ev);
    dlqb_status st = dlqb_catalog_send(v->writer, DLQB_CHANNEL, v->r->t.stream, &ev.props,
                                       amqp_empty_bytes, err);
    if (st != DLQB_OK) return st;
    v->published++;
    v->added++;
  }
  return DLQB_OK;
}

typedef struct {
  verify_ctx *v;
  dlqb_catalog_event *outs;
  char (*ids)[128];
  size_t n, cap;
} extra_ctx;

static bool find_extra(void *ctx, const dlqb_item *it) {
  extra_ctx *x = ctx;
  uint64_t *n = dlqb_hashset_get(x->v->seen, it->message_id, strlen(it->message_id));
  if (n != NULL && *n > 0) {
    (*n)--;
    return true;
  }
  if (x->n == x->cap) {
    size_t cap = x->cap ? x->cap * 2 : 64;
    char(*ni)[128] = realloc(x->ids, cap * sizeof *ni);
    if (ni == NULL) return false;
    x->ids = ni;
    x->cap = cap;
  }
  snprintf(x->ids[x->n++], 128, "%s", it->message_id);
  return true;
}

dlqb_status dlqb_catalog_verify(dlqb_catalog_reader *r, const dlqb_config *cfg,
                                const dlqb_broker_conf *broker, const char *queue,
                                dlqb_catalog_verify_result *out, dlqb_error *err) {
  memset(out, 0, sizeof *out);
  const dlqb_broker_conf *as = dlqb_config_broker(cfg, broker);
  int q = dlqb_catalog_queue(r->c, queue);
  if (q < 0) return dlqb_fail(err, DLQB_EINVAL, "the catalog does not cover '%s'", queue);
  pthread_mutex_lock(&r->lock);
  verify_ctx v = {.r = r, .q = q, .err = err};
  extra_ctx x = {.v = &v};
  dlqb_link *rl = NULL;
  uint64_t events;
  double secs;
  dlqb_status st = dlqb__catalog_locked_refresh(r, as, NULL, NULL, &rl, &events, &secs, err);
  if (rl != NULL) dlqb__catalog_end_link(rl, st);
  out->catalog = dlqb_catalog_count(r->c, q);
  v.seen = dlqb_hashset_new(sizeof(uint64_t));
  if (st == DLQB_OK && v.seen == NULL) st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  if (st == DLQB_OK) st = dlqb_link_open(as, "dlq-bridge catalog verify", &v.writer, err);
  if (st == DLQB_OK) st = dlqb_link_confirm_select(v.writer, DLQB_CHANNEL, err);
  dlqb_scan_result res;
  memset(&res, 0, sizeof res);
  uint32_t before = 0, after = 0;
  if (st == DLQB_OK) st = dlqb_link_queue_depth(v.writer, queue, NULL, &before, err);
  if (st == DLQB_OK) {
    out->at_ms = dlqb_now_ms();
    dlqb_scan_options so = {.queue = queue,
                            .purpose = "dlq-bridge catalog verify",
                            .actor = "dlq-bridge catalog verify",
                            .on_item = verify_item,
                            .ctx = &v,
                            .broker = broker};
    st = dlqb_scan_run(cfg, &so, &res, err);
    out->present = res.examined;
    /* The pass's own consumer is gone once it closed its link. */
    if (st == DLQB_OK) st = dlqb_link_queue_depth(v.writer, queue, NULL, &after, err);
    out->others = before > after ? before : after;
    out->complete =
        st == DLQB_OK && !res.short_read && !res.interrupted && !res.stopped && out->others == 0;
  }
  /* The "in"s first: a reader must see them before the "verified". */
  if (st == DLQB_OK)
    st = dlqb__catalog_await_confirms(v.writer, DLQB_CHANNEL, v.published, r->t.stream, err);
  if (st == DLQB_OK && out->complete) {
    /* Fold again (our "in"s and whatever moved meanwhile), then what it
     * still holds beyond what the pass read is gone. */
    st = dlqb__catalog_locked_refresh(r, as, NULL, NULL, &rl, &events, &secs, err);
    if (rl != NULL) dlqb__catalog_end_link(rl, st);
    if (st == DLQB_OK) dlqb_catalog_each(r->c, q, find_extra, &x);
    dlqb_catalog_event ev;
    for (size_t i = 0; st == DLQB_OK && i < x.n; i++) {
      dlqb_catalog_event_out(queue, x.ids[i], &ev);
      st = dlqb_catalog_send(v.writer, DLQB_CHANNEL, r->t.stream, &ev.props, amqp_empty_bytes, err);
      if (st == DLQB_OK) v.published++;
    }
    out->removed = x.n;
    char num[32];
    dlqb_catalog_event_verified(queue, out->at_ms, out->present, num, sizeof num, &ev);
    if (st == DLQB_OK) {
      st = dlqb_catalog_send(v.writer, DLQB_CHANNEL, r->t.stream, &ev.props, amqp_empty_bytes, err);
      if (st == DLQB_OK) v.published++;
    }
    if (st == DLQB_OK)
      st = dlqb__catalog_await_confirms(v.writer, DLQB_CHANNEL, v.published, r->t.stream, err);
  }
  out->added = v.added;
  if (v.writer != NULL) dlqb__catalog_end_link(v.writer, st);
  dlqb_hashset_free(v.seen);
  free(x.ids);
  pthread_mutex_unlock(&r->lock);
  return st;
}

/* A look at a DLQ or review queue that moves nothing: see dlqb/ops.h. The
 * one place that decides whether the catalog answers or the queue is read,
 * so every front end's look (inspect, stats, review list, the console's
 * pages, the metrics, the drain's canary, the SLA escalator's question)
 * follows the same rule. */
#include <stdio.h>
#include <string.h>

#include "dlqb/clock.h"
#include "dlqb/log.h"
#include "dlqb/ops.h"

static bool stopped(const ops_look *l) { return l->stop != NULL && *l->stop; }

/* ---- answered from the catalog ---------------------------------------- */

typedef struct {
  ops_look *l;
  uint64_t limit;
  dlqb_status st;
  dlqb_error *err;
} from_catalog;

static bool catalog_item(void *ctx, const dlqb_item *it) {
  from_catalog *c = ctx;
  ops_look *l = c->l;
  if (stopped(l)) {
    l->r.interrupted = true;
    return false;
  }
  if (l->r.examined >= c->limit) return false;
  l->r.examined++;
  l->r.held++;
  bool enough = false;
  c->st = l->on_item(l->ctx, it, NULL, &enough, c->err);
  if (enough) l->r.stopped = true;
  return c->st == DLQB_OK && !enough;
}

typedef enum {
  ANSWERED,   /* from the catalog */
  NEEDS_PASS, /* the catalog cannot answer: view.why_scan says why */
  FAILED,     /* the catalog could not be read: err says why */
} catalog_outcome;

/* A connection lost, timed out or failing on its socket is worth another
 * try, and no pass would do better. Anything else (the broker refused the
 * read: the stream not declared, no permission on it; a stream cut by
 * retention with no snapshot to fold from) is the catalog's own state:
 * the queue itself can still answer. */
static bool refused(dlqb_status st) {
  return st != DLQB_ECONN && st != DLQB_ETIMEOUT && st != DLQB_EIO;
}

/* Answers l from the catalog (*st: on_item's status). */
static catalog_outcome ask_catalog(const dlqb_config *cfg, const dlqb_pipeline *p, ops_look *l,
                                   dlqb_status *st, dlqb_error *err) {
  dlqb_catalog_view *view = &l->view;
  dlqb_catalog_reader *own = NULL, *rd = l->reader;
  if (rd == NULL) {
    rd = own = dlqb_catalog_reader_of(cfg, p);
    if (rd == NULL) {
      snprintf(view->why_scan, sizeof view->why_scan, "out of memory for the catalog");
      return NEEDS_PASS;
    }
  }
  from_catalog c = {
      .l = l, .limit = l->max_items > 0 ? l->max_items : UINT64_MAX, .st = DLQB_OK, .err = err};
  dlqb_error why;
  dlqb_status rst = DLQB_OK;
  for (int try = 1; try <= OPS_LOOK_TRIES; try++) {
    rst = dlqb_catalog_look(rd, dlqb_config_broker(cfg, l->broker), l->queue, catalog_item, &c,
                            view, &why);
    if (rst == DLQB_OK || refused(rst) || stopped(l) || try == OPS_LOOK_TRIES) break;
    dlqb_log_warn("catalog_retry", "%s; trying again (%d of %d)", why.msg, try + 1, OPS_LOOK_TRIES);
    dlqb_sleep_us(l->stop, 500000LL * try);
  }
  dlqb_catalog_reader_free(own);
  if (rst != DLQB_OK) memset(&l->r, 0, sizeof l->r);
  if (rst != DLQB_OK && !refused(rst)) {
    *st = dlqb_fail(err, rst, "%s (the catalog, %d tries; --scan reads the queue itself)", why.msg,
                    OPS_LOOK_TRIES);
    return FAILED;
  }
  if (rst != DLQB_OK) {
    snprintf(view->why_scan, sizeof view->why_scan, "%s", why.msg);
    return NEEDS_PASS;
  }
  if (view->differs) {
    snprintf(view->why_scan, sizeof view->why_scan,
             "the catalog holds %llu items and the queue %llu: changed outside the bridge, not "
             "yet corrected by a verifying pass (dlq-bridge catalog verify, or run's check)",
             (unsigned long long)view->count, (unsigned long long)view->depth);
    view->from_catalog = false;
    return NEEDS_PASS;
  }
  l->r.depth_at_start = view->count;
  *st = c.st;
  return ANSWERED;
}

/* After a pass that read the whole queue: its count against the
 * catalog's (a catalog that cannot be read leaves the view as a pass). */
static void compare_with_catalog(const dlqb_config *cfg, const dlqb_pipeline *p, ops_look *l) {
  dlqb_catalog_reader *own = l->reader == NULL ? dlqb_catalog_reader_of(cfg, p) : NULL;
  dlqb_catalog_reader *rd = l->reader != NULL ? l->reader : own;
  dlqb_catalog_view cv;
  dlqb_error why;
  if (rd != NULL && dlqb_catalog_look(rd, dlqb_config_broker(cfg, l->broker), l->queue, NULL, NULL,
                                      &cv, &why) == DLQB_OK) {
    l->view.compared = true;
    l->view.count = cv.count;
    l->view.depth = l->r.examined;
    l->view.differs = cv.count != l->r.examined;
  }
  dlqb_catalog_reader_free(own);
}

/* ---- read from the queue itself --------------------------------------- */

/* Holds every item: nothing moves, each returns to its place. */
static dlqb_status queue_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                              dlqb_error *err) {
  ops_look *l = ctx;
  dlqb_scan_hold(s, d);
  bool enough = false;
  dlqb_status st = l->on_item(l->ctx, it, d, &enough, err);
  if (enough) dlqb_scan_stop(s);
  return st;
}

static dlqb_status read_queue(const dlqb_config *cfg, ops_look *l, dlqb_error *err) {
  dlqb_scan_options so = {.queue = l->queue,
                          .purpose = l->purpose,
                          .actor = l->actor,
                          .broker = l->broker,
                          .window = l->window,
                          .max_items = l->max_items,
                          .stop = l->stop,
                          .on_item = queue_item,
                          .ctx = l};
  return dlqb_scan_run(cfg, &so, &l->r, err);
}

dlqb_status ops_look_run(const dlqb_config *cfg, ops_look *l, dlqb_error *err) {
  memset(&l->view, 0, sizeof l->view);
  memset(&l->r, 0, sizeof l->r);
  dlqb_pipeline p;
  dlqb_config_pipeline(cfg, 0, &p);
  if (l->source != OPS_LOOK_QUEUE) {
    dlqb_status st = DLQB_OK;
    catalog_outcome co = ask_catalog(cfg, &p, l, &st, err);
    if (co == FAILED) return st;
    if (co == ANSWERED || l->source == OPS_LOOK_CATALOG_ONLY) return st;
  }
  dlqb_status st = read_queue(cfg, l, err);
  if (st == DLQB_OK && l->source == OPS_LOOK_QUEUE && l->compare && !l->r.stopped &&
      !l->r.short_read)
    compare_with_catalog(cfg, &p, l);
  return st;
}

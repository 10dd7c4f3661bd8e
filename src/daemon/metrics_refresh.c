/* The queue-gauge refresher: a thread with its own broker connection that
 * reads queue depths and ages every few seconds into the metrics registry. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlqb/link.h"
#include "dlqb/log.h"
#include "dlqb/metrics.h"
#include "dlqb/ops.h"
#include "dlqb/queue_stats.h"
#include "dlqb/scan.h"
#include "dlqb/thread.h"
#include "dlqb/topology.h"

struct dlqb_metrics_refresher {
  dlqb_metrics *m;
  const dlqb_config *cfg; /* the caller's: it outlives the refresher */
  long interval_ms;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bool stop; /* guarded by lock */
  /* Each pipeline's safety queue depth last warned about (the thread's). */
  uint32_t dropped_told[DLQB_MAX_PIPELINES];
};

/* A quorum DLQ or review queue dead-letters into its pipeline's safety
 * queue only what the broker would have dropped (dlqb/topology.h): a
 * policy's delivery limit, TTL or length. Says so once each time the
 * queue holds more than when last said. */
static void warn_dropped(dlqb_metrics_refresher *r, const dlqb_queue_stat *qs, size_t n) {
  for (size_t k = 0; k < dlqb_config_pipeline_count(r->cfg) && k < DLQB_MAX_PIPELINES; k++) {
    dlqb_pipeline p;
    dlqb_config_pipeline(r->cfg, k, &p);
    char dropped[DLQB_NAME_MAX];
    dlqb_dropped_queue_name(&p, dropped, sizeof dropped);
    for (size_t i = 0; i < n; i++) {
      if (strcmp(qs[i].queue, dropped) != 0 || !qs[i].present) continue;
      if (qs[i].depth > r->dropped_told[k])
        dlqb_log_error("items_dropped",
                       "%s holds %u items the broker dead-lettered from %s or %s: a policy sets "
                       "a delivery-limit, message-ttl or max-length on them; remove it and move "
                       "the items back (docs/runbook.md, \"The safety queue\")",
                       dropped, qs[i].depth, p.dlq, p.review);
      r->dropped_told[k] = qs[i].depth;
    }
  }
}

/* Sleeps up to ms or until stop is requested; returns true on stop. */
static bool nap(dlqb_metrics_refresher *r, long ms) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&r->lock);
  while (!r->stop && pthread_cond_timedwait(&r->wake, &r->lock, &until) == 0) {
  }
  bool stop = r->stop;
  pthread_mutex_unlock(&r->lock);
  return stop;
}

/* ---- the review gauges: one pass over compliance_review ---- */

typedef struct {
  dlqb_review_tally t;
  int64_t now_ms;
} review_pass;

static dlqb_status tally_item(void *ctx, const dlqb_item *it, const dlqb_delivery *d, bool *enough,
                              dlqb_error *err) {
  review_pass *p = ctx;
  (void)d, (void)enough, (void)err;
  dlqb_review_tally_add(&p->t, it, p->now_ms);
  return DLQB_OK;
}

/* The review gauges from stats (this refresh's queue stats): an empty
 * review queue needs no pass. A pass that did not read the queue whole
 * (another consumer held some items: a `review` command, say) reports
 * nothing rather than a part. */
static void refresh_review(dlqb_metrics_refresher *r, const dlqb_queue_stat *stats, size_t n) {
  const dlqb_queue_stat *q = NULL;
  dlqb_pipeline pl;
  dlqb_config_pipeline(r->cfg, 0, &pl); /* the one `run` serves */
  for (size_t i = 0; i < n; i++)
    if (strcmp(stats[i].queue, pl.review) == 0) q = &stats[i];
  review_pass p;
  memset(&p, 0, sizeof p);
  if (q == NULL || !q->present) {
    dlqb_metrics_set_review(r->m, NULL, false);
    return;
  }
  if (q->depth == 0 && q->consumers == 0) {
    dlqb_metrics_set_review(r->m, &p.t, true);
    return;
  }
  p.now_ms = dlqb_now_ms();
  char name[340];
  snprintf(name, sizeof name, "dlq-bridge metrics review %s", r->cfg->instance);
  ops_look look = {.queue = pl.review,
                   .source = OPS_LOOK_CATALOG,
                   .purpose = name,
                   .actor = DLQB_ACTOR_BRIDGE,
                   .on_item = tally_item,
                   .ctx = &p};
  dlqb_error err = {{0}};
  dlqb_status st = ops_look_run(r->cfg, &look, &err);
  bool whole = st == DLQB_OK && !look.r.short_read && !look.r.interrupted;
  if (st != DLQB_OK) dlqb_log_warn("queue_stats", "cannot read %s: %s", pl.review, err.msg);
  dlqb_metrics_set_review(r->m, &p.t, whole);
}

static void *run(void *arg) {
  dlqb_metrics_refresher *r = arg;
  if (r->cfg->pipeline_count > 0) dlqb_log_set_pipeline(r->cfg->pipelines[0].p.name);
  dlqb_topology *topo = dlqb_topology_new(r->cfg);
  dlqb_queue_stats *qs = topo != NULL ? dlqb_queue_stats_new(topo) : NULL;
  free(topo); /* the stats keep what they need */
  dlqb_link *link = NULL;
  char name[320];
  snprintf(name, sizeof name, "dlq-bridge metrics %s", r->cfg->instance);
  bool failing = false; /* log a failure once, not every interval */
  if (qs == NULL) dlqb_log_error("queue_stats", "out of memory; queue gauges are off");

  do {
    if (qs == NULL) continue;
    dlqb_error err = {{0}};
    dlqb_status st = DLQB_OK;
    if (link == NULL) st = dlqb_link_open(&r->cfg->broker, name, &link, &err);
    if (st == DLQB_OK) st = dlqb_queue_stats_refresh(qs, link, dlqb_now_ms(), &err);
    if (st == DLQB_OK) {
      dlqb_metrics_set_queues(r->m, dlqb_queue_stats_results(qs), dlqb_queue_stats_count(qs), true);
      refresh_review(r, dlqb_queue_stats_results(qs), dlqb_queue_stats_count(qs));
      warn_dropped(r, dlqb_queue_stats_results(qs), dlqb_queue_stats_count(qs));
      if (failing) dlqb_log_info("queue_stats", "reading queue stats again");
      failing = false;
      continue;
    }
    dlqb_metrics_set_queues(r->m, NULL, 0, false);
    dlqb_metrics_set_review(r->m, NULL, false);
    if (!failing) dlqb_log_warn("queue_stats", "cannot read queue stats: %s", err.msg);
    failing = true;
    /* Start over on a fresh connection; the old one may be half-dead. */
    dlqb_link_abort(link);
    link = NULL;
  } while (!nap(r, r->interval_ms));

  dlqb_link_close(link);
  dlqb_queue_stats_free(qs);
  return NULL;
}

dlqb_status dlqb_metrics_refresher_start(dlqb_metrics *m, const dlqb_config *cfg, long interval_ms,
                                         dlqb_metrics_refresher **out, dlqb_error *err) {
  *out = NULL;
  dlqb_metrics_refresher *r = calloc(1, sizeof *r);
  if (r == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  r->m = m;
  r->cfg = cfg;
  r->interval_ms = interval_ms > 0 ? interval_ms : DLQB_METRICS_REFRESH_MS;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->wake, &ca);
  pthread_condattr_destroy(&ca);

  /* Block every signal in the new thread: SIGTERM must reach the router's. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = dlqb_thread_start(&r->thread, run, r); /* basic.get decodes headers: a sized stack */
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->lock);
    free(r);
    char why[DLQB_ERRNO_TEXT_MAX];
    return dlqb_fail(err, DLQB_ENOMEM, "cannot start the queue stats thread: %s",
                     dlqb_errno_text(rc, why, sizeof why));
  }
  *out = r;
  return DLQB_OK;
}

void dlqb_metrics_refresher_stop(dlqb_metrics_refresher *r) {
  if (r == NULL) return;
  pthread_mutex_lock(&r->lock);
  r->stop = true;
  pthread_cond_signal(&r->wake);
  pthread_mutex_unlock(&r->lock);
  pthread_join(r->thread, NULL);
  pthread_cond_destroy(&r->wake);
  pthread_mutex_destroy(&r->lock);
  free(r);
}

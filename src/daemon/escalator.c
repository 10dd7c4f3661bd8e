/* The daemon's DLQ SLA escalator thread: see dlqb/escalator.h. */
#include "dlqb/escalator.h"

#include <pthread.h>

#include "dlqb/catalog_check.h"
#include "dlqb/catalog_stream.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/anchor.h"
#include "dlqb/audit.h"
#include "dlqb/clock.h"
#include "dlqb/duration.h"
#include "dlqb/hashset.h"
#include "dlqb/item.h"
#include "dlqb/log.h"
#include "dlqb/ops.h"
#include "dlqb/memo.h"
#include "dlqb/scan.h"
#include "dlqb/thread.h"
#include "dlqb/topology.h"
#include "dlqb/verdict.h"

#define INTERVAL_MIN_MS 1000
#define INTERVAL_MAX_MS 30000
/* Items remembered by their first sight (see sighted below), at most. */
#define SIGHTED_MAX 100000

struct dlqb_escalator {
  const dlqb_config *cfg; /* the caller's: it outlives the escalator */
  dlqb_pipeline p;        /* the config's first: the one `run` serves */
  void (*after_ack)(void *ctx, const dlqb_hop *hop, double confirm_seconds);
  void *ctx;
  dlqb_audit *audit;
  dlqb_anchor_pub *anchors; /* its chain heads off the host */
  pthread_t thread;
  dlqb_stop_flag stop;
  /* The catalog's check runs beside the escalator, in every `run`, on
   * the escalator's reader (one fold per pipeline in the daemon). */
  dlqb_catalog_check *catalog;
  dlqb_catalog_reader *reader;
  uint64_t due; /* a look's count of items past the SLA */
  char now_iso[DLQB_ISO_TIME_MAX];
  char reason[DLQB_LAST_ERROR_MAX + 1];
  char no_time_reason[DLQB_LAST_ERROR_MAX + 1];
  int64_t now_ms;
  /* message_id -> when a pass first saw an item whose time was later than
   * that (a dlq_at ahead of the clock, usable within DLQB_CLOCK_SKEW_MS):
   * its SLA clock starts there, not at the later time it claims. Only such
   * items are kept (an honest stamp is never later than the first sight),
   * all forgotten once the newest is past its SLA. */
  dlqb_hashset *sighted;
  int64_t sighted_newest_ms;
  /* Escalations confirmed whose DLQ originals a pass lost its connection
   * before acking (the pipe's memory, dlqb/memo.h): the next pass acks
   * them against those copies rather than escalating them again. Twice a
   * pass's window; NULL (out of memory): none. */
  dlqb_memo *sent;
  dlqb_item view; /* sla_view's copy (large for the thread's stack) */
  /* The pass's: escalations of an earlier run that began and did not end
   * (dlqb/ops.h), whose items wait for a person; and the first one held,
   * said once (held_said). */
  ops_open_moves *open;
  char held_said[128];
  bool connected_once; /* a pass reached the broker: failures since are warnings */
  /* Why the last pass was refused (ACCESS_REFUSED), "" when it was not:
   * written by the thread, read by /healthz (dlqb_escalator_health). */
  pthread_mutex_t lock;
  char refused[DLQB_ERROR_MAX + 32];
};

/* Records the outcome of a pass for dlqb_escalator_health; says a refusal
 * once, and when it is over. */
static void note_refusal(dlqb_escalator *e, bool refused, const char *why) {
  pthread_mutex_lock(&e->lock);
  bool was = e->refused[0] != '\0';
  if (refused) snprintf(e->refused, sizeof e->refused, "dlq sla escalation refused: %s", why);
  else e->refused[0] = '\0';
  pthread_mutex_unlock(&e->lock);
  if (refused && !was)
    dlqb_log_error("escalator_refused",
                   "cannot read %s: %s; nothing past the dlq sla is escalated "
                   "until the bridge's user may read it (docs/least-privilege.md)",
                   e->p.dlq, why);
  else if (!refused && was) dlqb_log_info("escalator_refused", "reading %s again", e->p.dlq);
}

long dlqb_escalator_interval_ms(uint64_t dlq_sla_ms) {
  uint64_t i = dlq_sla_ms / 4;
  if (i < INTERVAL_MIN_MS) return INTERVAL_MIN_MS;
  if (i > INTERVAL_MAX_MS) return INTERVAL_MAX_MS;
  return (long)i;
}

/* The item as the SLA clock reads it: its own time (dlq_at, ...), but
 * never one later than this escalator's first sight of it. A producer may
 * publish straight into the DLQ with a dlq_at minutes ahead (accepted as
 * clock skew); counting from it would hold off its escalation by as much. */
static const dlqb_item *sla_view(dlqb_escalator *e, const dlqb_item *it, dlqb_item *copy) {
  int64_t since;
  if (e->sighted == NULL || it->message_id[0] == '\0' || !dlqb_item_since(it, e->now_ms, &since))
    return it;
  size_t len = strlen(it->message_id);
  int64_t *first = dlqb_hashset_get(e->sighted, it->message_id, len);
  if (first == NULL) {
    if (since <= e->now_ms || dlqb_hashset_size(e->sighted) >= SIGHTED_MAX) return it;
    bool added;
    if ((first = dlqb_hashset_add(e->sighted, it->message_id, len, &added)) == NULL) return it;
    *first = e->now_ms;
    e->sighted_newest_ms = e->now_ms;
  }
  if (since <= *first) return it;
  *copy = *it;
  copy->has_dlq_at = true;
  copy->dlq_at_ms = *first;
  copy->has_escalated_at = false;
  return copy;
}

static dlqb_status escalate_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d,
                                 const dlqb_item *it, dlqb_error *err) {
  dlqb_escalator *e = ctx;
  dlqb_verdict_rule rule = {.sla = true, .sla_ms = e->cfg->policy.dlq_sla_ms};
  dlqb_verdict v = dlqb_verdict_of(&rule, sla_view(e, it, &e->view), e->now_ms, 0);
  if (v.kind == DLQB_VERDICT_HOLD) {
    dlqb_scan_hold(s, d);
    if (v.stop_after) dlqb_scan_stop(s);
    return DLQB_OK;
  }
  const ops_open_move *open = ops_open_moves_find(e->open, it->message_id);
  if (open != NULL) {
    /* An earlier run was killed amid this item's move: its copy may be in
     * review already. A person settles it (escalate --after-interrupted). */
    if (strcmp(e->held_said, it->message_id) != 0) {
      char why[2 * DLQB_NAME_MAX + 512];
      dlqb_log_warn("unsettled", "dlq sla: %s",
                    ops_open_move_text(1, it->message_id, open, why, sizeof why));
      snprintf(e->held_said, sizeof e->held_said, "%s", it->message_id);
    }
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  dlqb_hset sets[DLQB_ESCALATION_SETS];
  size_t n =
      dlqb_escalation_stamp(sets, DLQB_ACTOR_BRIDGE, e->now_iso, DLQB_ESCALATION_DLQ_SLA, NULL);
  return dlqb_scan_forward(s, d, it, e->p.review, sets, n, DLQB_EV_ESCALATED, "sla",
                           v.no_time ? e->no_time_reason : e->reason, err);
}

/* A look at the catalog: counts what a pass would escalate, moves nothing. */
static dlqb_status count_due(void *ctx, dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                             dlqb_error *err) {
  dlqb_escalator *e = ctx;
  (void)err;
  dlqb_scan_hold(s, d);
  dlqb_verdict_rule rule = {.sla = true, .sla_ms = e->cfg->policy.dlq_sla_ms};
  dlqb_verdict v = dlqb_verdict_of(&rule, sla_view(e, it, &e->view), e->now_ms, 0);
  if (v.kind != DLQB_VERDICT_HOLD) {
    e->due++;
    dlqb_scan_stop(s); /* one is enough: the pass finds them all */
  }
  return DLQB_OK;
}

/* True when the catalog agrees with the DLQ and holds nothing past the
 * SLA: the pass (which holds the whole DLQ while it reads) is not needed.
 * Any doubt (no catalog, a catalog that disagrees, a catalog whose writers
 * are not listed: a worker's balanced pair of forged events would keep
 * the counts equal and hide an overdue item) means a pass. */
static bool nothing_due(dlqb_escalator *e, const char *purpose) {
  if (e->reader == NULL || e->cfg->catalog.writers[0] == '\0') return false;
  e->due = 0;
  dlqb_catalog_view view;
  dlqb_scan_options so = {.queue = e->p.dlq,
                          .purpose = purpose,
                          .actor = "system",
                          .look = true,
                          .look_only = true,
                          .reader = e->reader,
                          .view = &view,
                          .stop = &e->stop,
                          .on_item = count_due,
                          .ctx = e};
  dlqb_scan_result r;
  dlqb_error err;
  dlqb_status st = dlqb_scan_run(e->cfg, &so, &r, &err);
  return st == DLQB_OK && view.from_catalog && e->due == 0;
}

static void escalated(void *ctx, const dlqb_hop *hop) {
  dlqb_escalator *e = ctx;
  dlqb_log_info("escalated", "message_id=%s request_id=%s to=%s reason=\"%s\"", hop->message_id,
                hop->request_id, hop->to, hop->reason);
  if (e->after_ack != NULL) e->after_ack(e->ctx, hop, 0.0);
}

static void pass(dlqb_escalator *e) {
  /* A writer that cannot record moves nothing: no pass until it has
   * written what it holds (it retries by itself, and logs both turns). */
  if (!dlqb_audit_healthy(e->audit)) return;
  e->now_ms = dlqb_now_ms();
  dlqb_iso_time(e->now_ms, e->now_iso, sizeof e->now_iso);
  /* Every remembered item is past its SLA by now: escalated, or gone. */
  if (e->sighted != NULL && dlqb_hashset_size(e->sighted) > 0 &&
      e->now_ms - e->sighted_newest_ms > (int64_t)e->cfg->policy.dlq_sla_ms + 2 * INTERVAL_MAX_MS)
    dlqb_hashset_clear(e->sighted);
  char sla[32];
  snprintf(e->reason, sizeof e->reason, "dlq_sla: in %s longer than %s", e->p.dlq,
           dlqb_duration_format(e->cfg->policy.dlq_sla_ms, sla, sizeof sla));
  snprintf(e->no_time_reason, sizeof e->no_time_reason,
           "dlq_sla: no usable time in %s (dlq_at missing or in the future)", e->p.dlq);
  char purpose[320];
  snprintf(purpose, sizeof purpose, "dlq-bridge escalator %s", e->cfg->instance);
  if (nothing_due(e, purpose)) return;
  dlqb_scan_options so = {.queue = e->p.dlq,
                          .purpose = purpose,
                          .actor = "system",
                          .audit = e->audit,
                          .idle_stop_ms = 2000,
                          .stop = &e->stop,
                          /* Escalations published when the log fails stay
                           * unacked until it is written: ending the pass
                           * would return their originals and the next pass
                           * would publish them again. */
                          .audit_mode = DLQB_PIPE_AUDIT_OUTWAIT,
                          .on_item = escalate_item,
                          .after_ack = escalated,
                          .ctx = e,
                          .memory = e->sent};
  dlqb_scan_result r;
  dlqb_error err;
  /* Read each pass: a person may have settled some since the last. */
  dlqb_status st = ops_open_moves_read(e->cfg->audit.log, e->p.dlq, &e->open, &err);
  if (st != DLQB_OK) {
    dlqb_log_warn("escalator", "dlq sla pass skipped: %s", err.msg);
    return;
  }
  st = dlqb_scan_run(e->cfg, &so, &r, &err);
  ops_open_moves_free(e->open);
  e->open = NULL;
  if (st != DLQB_ECONN || r.depth_at_start > 0 || r.examined > 0) e->connected_once = true;
  if (r.access_refused || st == DLQB_OK) note_refusal(e, r.access_refused, err.msg);
  if (r.access_refused) {
    /* Said by note_refusal and /healthz. */
  } else if (st == DLQB_ECONN && !e->connected_once) {
    /* Starting without a broker: the router says so (or waits for it);
     * a warning from here first would send the reader the wrong way. */
    dlqb_log_debug("escalator", "dlq sla pass failed: %s; trying again later", err.msg);
  } else if (st != DLQB_OK && st != DLQB_EBROKER) {
    dlqb_log_warn("escalator", "dlq sla pass failed: %s; trying again later", err.msg);
  } else if (st == DLQB_EBROKER) {
    dlqb_log_debug("escalator", "dlq sla pass skipped: %s", err.msg);
  }
}

static void *run(void *arg) {
  dlqb_escalator *e = arg;
  /* Signals go to the main thread, whose handler sets the stop flag. */
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  if (e->cfg->pipeline_count > 0) dlqb_log_set_pipeline(e->p.name);
  long interval = dlqb_escalator_interval_ms(e->cfg->policy.dlq_sla_ms);
  while (!e->stop) {
    pass(e);
    dlqb_sleep_us(&e->stop, (int64_t)interval * 1000);
  }
  return NULL;
}

dlqb_status dlqb_escalator_start(const dlqb_config *cfg,
                                 void (*after_ack)(void *ctx, const dlqb_hop *hop,
                                                   double confirm_seconds),
                                 void *ctx, dlqb_escalator **out, dlqb_error *err) {
  *out = NULL;
  dlqb_escalator *e = calloc(1, sizeof *e);
  if (e == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  e->cfg = cfg;
  pthread_mutex_init(&e->lock, NULL);
  dlqb_config_pipeline(cfg, 0, &e->p);
  e->after_ack = after_ack;
  e->ctx = ctx;
  e->sighted = dlqb_hashset_new(sizeof(int64_t)); /* NULL: the items' own times alone */
  e->sent = dlqb_memo_new(2 * (size_t)DLQB_SCAN_WINDOW_DEFAULT);
  char writer[320];
  snprintf(writer, sizeof writer, "escalator@%s", cfg->instance);
  dlqb_status st = dlqb_audit_open(cfg, writer, &e->audit, err);
  if (st == DLQB_OK) st = dlqb_anchor_start(cfg, NULL, e->audit, true, &e->anchors, err);
  if (st != DLQB_OK) {
    dlqb_audit_close(e->audit);
    pthread_mutex_destroy(&e->lock);
    dlqb_hashset_free(e->sighted);
    dlqb_memo_free(e->sent);
    free(e);
    return st;
  }
  e->reader = dlqb_catalog_reader_of(cfg, &e->p); /* NULL: every pass is a pass */
  if (st == DLQB_OK && e->reader != NULL)
    st = dlqb_catalog_check_start(cfg, e->reader, &e->catalog, err);
  if (st != DLQB_OK) {
    dlqb_anchor_stop(e->anchors, err);
    dlqb_audit_close(e->audit);
    pthread_mutex_destroy(&e->lock);
    dlqb_hashset_free(e->sighted);
    dlqb_memo_free(e->sent);
    dlqb_catalog_reader_free(e->reader);
    free(e);
    return st;
  }
  if (dlqb_thread_start(&e->thread, run, e) != 0) { /* it reads DLQ items: a sized stack */
    dlqb_catalog_check_stop(e->catalog);
    dlqb_catalog_reader_free(e->reader);
    dlqb_anchor_stop(e->anchors, err);
    dlqb_audit_close(e->audit);
    dlqb_hashset_free(e->sighted);
    dlqb_memo_free(e->sent);
    free(e);
    return dlqb_fail(err, DLQB_ENOMEM, "cannot start the dlq sla escalator thread");
  }
  *out = e;
  return DLQB_OK;
}

int dlqb_escalator_audit_healthy(const dlqb_escalator *e) {
  return e == NULL || dlqb_audit_healthy(e->audit);
}

bool dlqb_escalator_audit_health(const dlqb_escalator *e, char *why, size_t len) {
  return dlqb_audit_health(e != NULL ? e->audit : NULL, why, len);
}

bool dlqb_escalator_health(dlqb_escalator *e, char *why, size_t len) {
  if (e == NULL) return true;
  pthread_mutex_lock(&e->lock);
  bool ok = e->refused[0] == '\0';
  if (!ok && why != NULL && len > 0) snprintf(why, len, "%s", e->refused);
  pthread_mutex_unlock(&e->lock);
  return ok;
}

void dlqb_escalator_release_anchors(dlqb_escalator *e) {
  if (e != NULL) dlqb_anchor_release(e->anchors);
}

bool dlqb_escalator_anchored(const dlqb_escalator *e) {
  return e == NULL || dlqb_anchor_health(e->anchors, NULL, 0);
}

size_t dlqb_escalator_audit_pending(const dlqb_escalator *e) {
  return dlqb_audit_pending(e != NULL ? e->audit : NULL);
}

void dlqb_escalator_stop(dlqb_escalator *e) {
  if (e == NULL) return;
  e->stop = 1;
  dlqb_catalog_check_stop(e->catalog);
  pthread_join(e->thread, NULL);
  /* chain_end, then its anchor, then the handle. */
  dlqb_audit_end(e->audit);
  dlqb_error err = {{0}};
  if (dlqb_anchor_stop(e->anchors, &err) != DLQB_OK)
    dlqb_log_warn("anchor_failing", "the escalator's last audit head is not anchored: %s", err.msg);
  dlqb_audit_close(e->audit);
  pthread_mutex_destroy(&e->lock);
  dlqb_hashset_free(e->sighted);
  dlqb_memo_free(e->sent);
  dlqb_catalog_reader_free(e->reader);
  free(e);
}

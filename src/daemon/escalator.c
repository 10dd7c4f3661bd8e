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
  ops_session *session;     /* its trail and anchors (ops_session_open) */
  dlqb_audit *audit;        /* the session's trail (NULL: none configured) */
  dlqb_anchor_pub *anchors; /* the session's: its chain heads off the host */
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
  /* The last pass's outcome (large for the thread's stack); the first
   * item it held because an escalation of it began and did not end, said
   * once (held_said). */
  ops_move_outcome outcome;
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

static const dlqb_item *seen_as(void *ctx, const dlqb_item *it) {
  dlqb_escalator *e = ctx;
  return sla_view(e, it, &e->view);
}

/* A look at the catalog: counts what a pass would escalate, moves nothing. */
static dlqb_status count_due(void *ctx, const dlqb_item *it, const dlqb_delivery *d, bool *enough,
                             dlqb_error *err) {
  dlqb_escalator *e = ctx;
  (void)d, (void)err;
  dlqb_verdict_rule rule = {.sla = true, .sla_ms = e->cfg->policy.dlq_sla_ms};
  dlqb_verdict v = dlqb_verdict_of(&rule, sla_view(e, it, &e->view), e->now_ms, 0);
  if (v.kind != DLQB_VERDICT_HOLD) {
    e->due++;
    *enough = true; /* one is enough: the pass finds them all */
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
  ops_look look = {.queue = e->p.dlq,
                   .purpose = purpose,
                   .actor = "system",
                   .source = OPS_LOOK_CATALOG_ONLY,
                   .reader = e->reader,
                   .stop = &e->stop,
                   .on_item = count_due,
                   .ctx = e};
  dlqb_error err;
  dlqb_status st = ops_look_run(e->cfg, &look, &err);
  return st == DLQB_OK && look.view.from_catalog && e->due == 0;
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
  ops_stamp stamp;
  ops_stamp_init(&stamp, DLQB_ACTOR_BRIDGE, NULL);
  snprintf(stamp.now, sizeof stamp.now, "%s", e->now_iso);
  ops_move_spec m;
  ops_sla_spec(&m, &stamp, e->cfg->policy.dlq_sla_ms, e->reason, e->no_time_reason);
  m.purpose = purpose;
  m.seen_as = seen_as;
  m.seen_ctx = e;
  m.memory = e->sent;
  m.idle_stop_ms = 2000;
  /* Escalations published when the log fails stay unacked until it is
   * written: ending the pass would return their originals and the next
   * pass would publish them again. */
  m.outwait_audit = true;
  ops_ctx x = {.cfg = e->cfg, .pipeline = &e->p, .actor = "system"};
  ops_move_watch w = {.acked = escalated, .ctx = e};
  /* The trail is read each pass (a person may have settled some since the
   * last): an escalation of an earlier run that began and did not end
   * holds its item until then. */
  ops_move_outcome *out = &e->outcome;
  ops_move_pass(&x, &m, e->audit, &w, &e->stop, out);
  dlqb_status st = out->status;
  const dlqb_scan_result r = out->r;
  const dlqb_error err = out->err;
  if (out->unsettled > 0 && strcmp(e->held_said, out->unsettled_id) != 0) {
    /* An earlier run was killed amid this item's move: its copy may be in
     * review already. A person settles it (escalate --after-interrupted). */
    char why[2 * DLQB_NAME_MAX + 512];
    dlqb_log_warn("unsettled", "dlq sla: %s", ops_unsettled_text(out, why, sizeof why));
    snprintf(e->held_said, sizeof e->held_said, "%s", out->unsettled_id);
  }
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
  /* A daemon without a configured trail runs (run says so); its anchors
   * wait until the router has declared their stream. */
  ops_session_opts so = {.cfg = cfg, .writer = writer, .without_trail = true, .held_anchors = true};
  dlqb_status st = ops_session_open(&so, &e->session, err);
  e->audit = ops_session_audit(e->session);
  e->anchors = ops_session_anchors(e->session);
  if (st != DLQB_OK) {
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
    ops_session_close(e->session);
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
    ops_session_close(e->session);
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
  ops_session_close(e->session);
  pthread_mutex_destroy(&e->lock);
  dlqb_hashset_free(e->sighted);
  dlqb_memo_free(e->sent);
  dlqb_catalog_reader_free(e->reader);
  free(e);
}

/* A queue read whole without moving anything (audit reconcile, audit
 * report): every item held, the other consumers counted before and after. */
#include <stdio.h>

#include "dlqb/clock.h"
#include "dlqb/link.h"
#include "dlqb/ops.h"

/* Consumers of queue other than us right now (passive declare on a link of
 * our own); false when it cannot be read. A consumer holds what it was
 * delivered unacked, and the broker delivers that to nobody else. */
static bool other_consumers(const dlqb_config *cfg, const char *queue, const char *purpose,
                            uint32_t *depth, uint32_t *n, dlqb_error *err) {
  char name[160];
  snprintf(name, sizeof name, "dlq-bridge %s", purpose);
  dlqb_link *link = NULL;
  if (dlqb_link_open(&cfg->broker, name, &link, err) != DLQB_OK) return false;
  dlqb_status st = dlqb_link_queue_depth(link, queue, depth, n, err);
  if (st == DLQB_OK || st == DLQB_EBROKER) dlqb_link_close(link);
  else dlqb_link_abort(link);
  return st == DLQB_OK;
}

static dlqb_status read_item(void *ctx, const dlqb_item *it, const dlqb_delivery *d, bool *enough,
                             dlqb_error *err) {
  ops_queue_read *q = ctx;
  (void)d, (void)enough;
  return q->on_item(q->ctx, it, err);
}

dlqb_status ops_queue_read_run(const dlqb_config *cfg, ops_queue_read *q, dlqb_error *err) {
  uint32_t before = 0, after = 0, depth = 0;
  if (!other_consumers(cfg, q->queue, q->purpose, &depth, &before, err)) return DLQB_EBROKER;
  dlqb_status st = q->on_depth != NULL ? q->on_depth(q->ctx, depth, err) : DLQB_OK;
  if (st != DLQB_OK) return st;
  dlqb_iso_time(dlqb_now_ms(), q->at, sizeof q->at);
  char name[160];
  snprintf(name, sizeof name, "dlq-bridge %s", q->purpose);
  /* The queue itself, whatever the catalog says: what is compared with it. */
  ops_look look = {.queue = q->queue,
                   .source = OPS_LOOK_QUEUE,
                   .purpose = name,
                   .actor = q->purpose,
                   .window = q->window,
                   .stop = q->stop,
                   .on_item = read_item,
                   .ctx = q};
  st = ops_look_run(cfg, &look, err);
  q->scan = look.r;
  if (st != DLQB_OK) return st;
  /* Our own consumer is gone once the scan closed its link. */
  if (!other_consumers(cfg, q->queue, q->purpose, NULL, &after, err)) return DLQB_EBROKER;
  q->others = before > after ? before : after;
  if (q->scan.interrupted)
    return dlqb_fail(
        err, DLQB_EIO, "read only %llu of the %llu items in %s (interrupted); nothing was compared",
        (unsigned long long)q->scan.examined, (unsigned long long)q->scan.depth_at_start, q->queue);
  return DLQB_OK;
}

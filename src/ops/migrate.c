/* Moving a classic DLQ or review queue into a quorum queue of its name
 * (`dlq-bridge migrate`): see dlqb/ops.h. A queue's type cannot change in
 * place, so its items go through a holding queue: the classic queue into
 * <queue>.migrating (quorum), the classic queue deleted once empty and
 * declared again as quorum, then the holding queue into it, and the
 * holding queue deleted. Every step is a confirm-before-ack pass with its
 * hops in the audit trail and its "out"s and "in"s in the catalog, and
 * every step can be run again: what the broker holds says where a killed
 * run stopped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/declare.h"
#include "dlqb/link.h"
#include "dlqb/memo.h"
#include "dlqb/ops.h"
#include "dlqb/pipe.h"

#define MIGRATE_SUFFIX ".migrating"
/* Passes over a source before giving up on items that keep arriving in it
 * (a daemon still dead-lettering into a classic DLQ being emptied). */
#define MIGRATE_ROUNDS 5

/* A move's copies in flight when a run was killed are the last ones its
 * destination took, at most one window of them: a later run remembers the
 * identities of the destination's last window, so that their originals,
 * back at the head of the source, are acked against them instead of being
 * copied again (pipe option memory, dlqb/memo.h). */
typedef struct {
  const char *from, *to, *actor;
  dlqb_memo_entry *ring; /* the destination's last `cap` items, oldest first from `next` */
  size_t cap, n, next;
} tail_ctx;

static dlqb_status note_tail(void *ctx, dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                             dlqb_error *err) {
  (void)err;
  tail_ctx *t = ctx;
  dlqb_memo_entry *e = &t->ring[t->next];
  memset(e, 0, sizeof *e);
  if (dlqb_pipe_identity(d->props, d->body, e->id)) {
    e->has_hop = true;
    dlqb_hop_identity(&e->hop, it);
    e->hop.event = DLQB_EV_MIGRATED;
    snprintf(e->hop.from, sizeof e->hop.from, "%s", t->from);
    snprintf(e->hop.to, sizeof e->hop.to, "%s", t->to);
    snprintf(e->hop.actor, sizeof e->hop.actor, "%s", t->actor);
    snprintf(e->hop.reason, sizeof e->hop.reason, "%s",
             "its copy was made by an interrupted migrate");
    t->next = (t->next + 1) % t->cap;
    if (t->n < t->cap) t->n++;
  }
  dlqb_scan_hold(s, d);
  return DLQB_OK;
}

/* The memory of one move: the identities of the last `window` items of
 * `to` (held and given back: nothing moves), as copies of items of `from`. */
static dlqb_status remember_tail(const ops_ctx *x, const char *from, const char *to,
                                 dlqb_memo **out, dlqb_error *err) {
  size_t cap = (size_t)(x->window > 0 ? x->window : DLQB_SCAN_WINDOW_DEFAULT);
  tail_ctx t = {.from = from, .to = to, .actor = x->actor, .cap = cap};
  t.ring = calloc(cap, sizeof *t.ring);
  *out = dlqb_memo_new(cap);
  if (t.ring == NULL || *out == NULL) {
    free(t.ring);
    dlqb_memo_free(*out);
    *out = NULL;
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  dlqb_scan_options so = {.queue = to,
                          .purpose = "dlq-bridge migrate",
                          .actor = x->actor,
                          .broker = x->broker,
                          .window = x->window,
                          .on_item = note_tail,
                          .ctx = &t};
  dlqb_scan_result res;
  dlqb_status st = dlqb_scan_run(x->cfg, &so, &res, err);
  for (size_t i = 0; st == DLQB_OK && i < t.n; i++) {
    size_t k = (t.next + t.cap - t.n + i) % t.cap;
    if (!dlqb_memo_put(*out, &t.ring[k], NULL)) st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  free(t.ring);
  if (st != DLQB_OK) {
    dlqb_memo_free(*out);
    *out = NULL;
  }
  return st;
}

/* The window of a move out of a quorum queue (the holding queue): a mover
 * killed with more deliveries unacked than this gives them back in no
 * order (the broker keeps them in a map, sorted only up to 32 keys:
 * measured on 3.10.8, a killed move of a 5,000 window came back shuffled),
 * and the items must keep theirs. */
#define MIGRATE_QUORUM_WINDOW 32

typedef struct {
  const char *to;
} move_ctx;

static dlqb_status move_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                             dlqb_error *err) {
  move_ctx *c = ctx;
  return dlqb_scan_forward(s, d, it, c->to, NULL, 0, DLQB_EV_MIGRATED, "",
                           "moved into a quorum queue", err);
}

static dlqb_status depth_of(const ops_ctx *x, const char *queue, uint32_t *depth, bool *exists,
                            dlqb_error *err) {
  dlqb_link *link = NULL;
  dlqb_status st =
      dlqb_link_open(dlqb_config_broker(x->cfg, x->broker), "dlq-bridge migrate", &link, err);
  if (st != DLQB_OK) return st;
  *depth = 0;
  st = dlqb_link_queue_depth(link, queue, depth, NULL, err);
  *exists = st == DLQB_OK;
  if (st == DLQB_EBROKER && dlqb_link_reply_code(link) == DLQB_REPLY_NOT_FOUND) st = DLQB_OK;
  dlqb_link_close(link);
  return st;
}

/* Moves every item of `from` into `to`, pass after pass while items are
 * left (MIGRATE_ROUNDS at most). *moved counts what this run moved. */
static dlqb_status move_all(const ops_ctx *x, dlqb_audit *audit, const char *from, const char *to,
                            bool from_quorum, dlqb_stop_flag *stop, uint64_t *moved,
                            uint64_t *remembered, dlqb_error *err) {
  uint32_t left = 0, there = 0;
  bool exists = false;
  dlqb_status st = depth_of(x, from, &left, &exists, err);
  if (st != DLQB_OK || left == 0) return st;
  dlqb_memo *memo = NULL;
  st = depth_of(x, to, &there, &exists, err);
  if (st == DLQB_OK && there > 0) st = remember_tail(x, from, to, &memo, err);
  move_ctx c = {.to = to};
  for (int round = 0; st == DLQB_OK && left > 0; round++) {
    if (round == MIGRATE_ROUNDS) {
      st = dlqb_fail(err, DLQB_EBROKER,
                     "items keep arriving in %s (%u after %d passes): stop what puts them "
                     "there (dlq-bridge run) and run migrate again",
                     from, left, MIGRATE_ROUNDS);
      break;
    }
    dlqb_scan_options so = {.queue = from,
                            .purpose = "dlq-bridge migrate",
                            .actor = x->actor,
                            .broker = x->broker,
                            .audit = audit,
                            .audit_mode = DLQB_PIPE_AUDIT_FAIL_FAST,
                            .window =
                                from_quorum && (x->window <= 0 || x->window > MIGRATE_QUORUM_WINDOW)
                                    ? MIGRATE_QUORUM_WINDOW
                                    : x->window,
                            .stop = stop,
                            .memory = memo,
                            .on_item = move_item,
                            .ctx = &c};
    dlqb_scan_result res;
    st = dlqb_scan_run(x->cfg, &so, &res, err);
    *moved += res.forwarded + res.remembered;
    *remembered += res.remembered;
    if (st != DLQB_OK) break;
    if (res.interrupted) st = dlqb_fail(err, DLQB_EIO, "interrupted: run migrate again to go on");
    else if (res.audit_failed)
      st = dlqb_fail(err, DLQB_EIO, "the audit trail cannot be written: nothing more was moved");
    else if (res.refused > 0)
      st = dlqb_fail(err, DLQB_EBROKER, "%llu items of %s were refused by the broker as they are",
                     (unsigned long long)res.refused, from);
    if (st == DLQB_OK) st = depth_of(x, from, &left, &exists, err);
  }
  dlqb_memo_free(memo);
  return st;
}

dlqb_status ops_migrate_queue(const ops_ctx *x, const dlqb_queue_spec *spec, dlqb_audit *audit,
                              bool dry_run, dlqb_stop_flag *stop, ops_migrate_result *r,
                              dlqb_error *err) {
  memset(r, 0, sizeof *r);
  snprintf(r->queue, sizeof r->queue, "%s", spec->name);
  if (strlen(spec->name) + strlen(MIGRATE_SUFFIX) >= sizeof r->holding)
    return dlqb_fail(err, DLQB_EINVAL, "queue name '%s' is too long for its holding queue",
                     spec->name);
  memcpy(r->holding, spec->name, strlen(spec->name));
  memcpy(r->holding + strlen(spec->name), MIGRATE_SUFFIX, sizeof MIGRATE_SUFFIX);
  uint32_t depth = 0, held = 0;
  bool holding = false;
  dlqb_status st = depth_of(x, r->queue, &depth, &r->existed, err);
  if (st == DLQB_OK) st = depth_of(x, r->holding, &held, &holding, err);
  if (st != DLQB_OK) return st;
  r->resumed = holding;
  bool classic = false;
  if (r->existed) {
    dlqb_link *link = NULL;
    st = dlqb_link_open(dlqb_config_broker(x->cfg, x->broker), "dlq-bridge migrate", &link, err);
    if (st == DLQB_OK) st = dlqb_queue_is_classic(link, r->queue, &classic, err);
    dlqb_link_close(link);
    if (st != DLQB_OK) return st;
  }
  r->was_classic = classic;
  r->pending = (classic ? depth : 0) + held;
  if ((!classic && !holding) || dry_run) return DLQB_OK;

  /* 1. The classic queue's items into the holding queue, then the classic
   * queue replaced by a quorum one of its name. */
  if (classic) {
    dlqb_link *link = NULL;
    st = dlqb_link_open(dlqb_config_broker(x->cfg, x->broker), "dlq-bridge migrate", &link, err);
    if (st == DLQB_OK) st = dlqb_queue_declare_as(link, spec, r->holding, err);
    dlqb_link_close(link);
    for (int round = 0; st == DLQB_OK; round++) {
      st = move_all(x, audit, r->queue, r->holding, false, stop, &r->to_holding, &r->remembered,
                    err);
      if (st != DLQB_OK) break;
      st = dlqb_link_open(dlqb_config_broker(x->cfg, x->broker), "dlq-bridge migrate", &link, err);
      /* Deleted only empty and with no consumer (a classic queue checks
       * both), and at once declared again as quorum: a daemon's move into
       * it in between is returned to it (mandatory) and tried again. */
      if (st == DLQB_OK) st = dlqb_queue_delete_unused(link, r->queue, false, err);
      if (st == DLQB_OK) st = dlqb_queue_declare_as(link, spec, r->queue, err);
      dlqb_link_close(link);
      if (st != DLQB_ECONFLICT || round + 1 == MIGRATE_ROUNDS) break;
      st = DLQB_OK; /* an item came, or a consumer is on it: again */
    }
    if (st == DLQB_ECONFLICT)
      return dlqb_fail(err, DLQB_ECONFLICT,
                       "%s cannot be replaced: it has a consumer or items keep arriving (stop "
                       "dlq-bridge run and the console, then run migrate again)",
                       r->queue);
    if (st != DLQB_OK) return st;
  }

  /* 2. The holding queue's items into the quorum queue, in their order,
   * and the holding queue deleted once empty. */
  /* What a pass had unacked when it ended comes back to the holding queue
   * a moment after its connection closed: passes again until a look after
   * one finds it empty. */
  uint32_t consumers = 0;
  dlqb_link *link = NULL;
  for (int round = 0; round < MIGRATE_ROUNDS; round++) {
    st = move_all(x, audit, r->holding, r->queue, true, stop, &r->to_queue, &r->remembered, err);
    if (st == DLQB_OK)
      st = dlqb_link_open(dlqb_config_broker(x->cfg, x->broker), "dlq-bridge migrate", &link, err);
    if (st == DLQB_OK) st = dlqb_link_queue_depth(link, r->holding, &held, &consumers, err);
    if (st != DLQB_OK || (held == 0 && consumers == 0)) break;
    dlqb_link_close(link);
    link = NULL;
  }
  if (st == DLQB_OK && held == 0 && consumers == 0)
    st = dlqb_queue_delete_unused(link, r->holding, true, err);
  else if (st == DLQB_OK)
    st = dlqb_fail(err, DLQB_ECONFLICT, "%s still holds %u items (%u consumers): run migrate again",
                   r->holding, held, consumers);
  dlqb_link_close(link);
  if (st != DLQB_OK) return st;

  /* 3. The catalog checked against the queue: a killed pass leaves it
   * claiming copies it announced and never made (dlqb/catalog.h), and
   * items the catalog never knew (put there by a version before it) came
   * out and back in. One verifying pass corrects both, so that looks answer
   * from it again. */
  dlqb_catalog_reader *cr = dlqb_catalog_reader_of(x->cfg, x->pipeline);
  dlqb_catalog_verify_result v;
  st = cr != NULL ? dlqb_catalog_verify(cr, x->cfg, x->broker, r->queue, &v, err)
                  : dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  dlqb_catalog_reader_free(cr);
  /* The items are where they belong either way: a catalog that could not
   * be checked is said, not a failure of the move. */
  if (st != DLQB_OK) {
    snprintf(r->catalog_why, sizeof r->catalog_why, "%.159s", err->msg);
    return DLQB_OK;
  }
  r->catalog_verified = true;
  r->catalog_corrected = v.added + v.removed;
  return DLQB_OK;
}

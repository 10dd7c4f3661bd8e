/* Queue depth and oldest-message age, read without disturbing the queues. */
#include "dlqb/queue_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/headers.h"
#include "dlqb/names.h"
#include "dlqb/xdeath.h"

struct dlqb_queue_stats {
  dlqb_queue_spec specs[DLQB_TOPO_MAX_QUEUES];
  int64_t last_empty_ms[DLQB_TOPO_MAX_QUEUES];
  dlqb_queue_stat results[DLQB_TOPO_MAX_QUEUES];
  size_t n;
};

#include "dlqb/item.h"

/* Messages a peek looks at when the head has no usable stamp. */
#define PEEK_DEPTH 8

/* x-death[0].time (an AMQP timestamp, seconds) as epoch ms. */
static bool xdeath_time(const amqp_table_t *h, int64_t *ms) {
  const amqp_table_t *death = dlqb_header_first_death(h);
  const amqp_field_value_t *t = death != NULL ? dlqb_header_find(death, DLQB_XDEATH_TIME) : NULL;
  if (t == NULL || t->kind != AMQP_FIELD_KIND_TIMESTAMP ||
      t->value.u64 > (uint64_t)INT64_MAX / 1000)
    return false;
  *ms = (int64_t)t->value.u64 * 1000;
  return true;
}

/* A header time that counts at now_ms (dlqb_time_usable). */
static bool usable_header_time(const amqp_table_t *h, const char *key, int64_t now_ms,
                               int64_t *ms) {
  return h != NULL && dlqb_header_time(h, key, ms) && dlqb_time_usable(*ms, now_ms);
}

bool dlqb_queue_head_stamp(const amqp_basic_properties_t *props, int64_t now_ms,
                           int64_t *epoch_ms) {
  const amqp_table_t *h = (props->_flags & AMQP_BASIC_HEADERS_FLAG) ? &props->headers : NULL;
  int64_t dlq_at = 0, escalated_at = 0;
  bool has_dlq = usable_header_time(h, DLQB_H_DLQ_AT, now_ms, &dlq_at);
  bool has_esc = usable_header_time(h, DLQB_H_ESCALATED_AT, now_ms, &escalated_at);
  /* The later stamp is the entry into the current queue: dlq_at is written
   * on every entry into the DLQ, escalated_at on entry into review. A stamp
   * too far in the future is no stamp: the next one down is older, so it
   * never makes the queue look younger. */
  if (has_dlq || has_esc) {
    *epoch_ms = !has_esc || (has_dlq && dlq_at > escalated_at) ? dlq_at : escalated_at;
    return true;
  }
  if ((props->_flags & AMQP_BASIC_TIMESTAMP_FLAG) && props->timestamp > 0 &&
      props->timestamp <= (uint64_t)INT64_MAX / 1000 &&
      dlqb_time_usable((int64_t)props->timestamp * 1000, now_ms)) {
    *epoch_ms = (int64_t)props->timestamp * 1000;
    return true;
  }
  return h != NULL && xdeath_time(h, epoch_ms) && dlqb_time_usable(*epoch_ms, now_ms);
}

/* Takes messages from the head of a peeked queue without acking them until
 * one carries a usable stamp (at most PEEK_DEPTH), then puts them all back
 * with basic.nack(multiple, requeue), which restores them at the head in
 * their order. The queue is FIFO by entry, so the first stamp found is a
 * lower bound on the head's age even when the head's own stamp is unusable
 * (a forged dlq_at in year 9999 must not make the queue read as new).
 * Never called for the work, failure or retry queues: see the header. */
static dlqb_status peek_head(dlqb_link *link, const char *queue, int64_t now_ms, bool *found,
                             bool *stamped, int64_t *stamp_ms, dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  char what[160];
  *found = *stamped = false;
  snprintf(what, sizeof what, "peek at the head of '%s'", queue);
  uint64_t last_tag = 0;
  dlqb_status st = DLQB_OK;
  for (int i = 0; i < PEEK_DEPTH && !*stamped; i++) {
    amqp_rpc_reply_t r = amqp_basic_get(conn, DLQB_CHANNEL, dlqb_bytes(queue), 0);
    st = dlqb_link_reply(link, r, what, err);
    if (st != DLQB_OK || r.reply.id != AMQP_BASIC_GET_OK_METHOD) break; /* no more */
    last_tag = ((const amqp_basic_get_ok_t *)r.reply.decoded)->delivery_tag;
    *found = true;
    amqp_message_t msg;
    r = amqp_read_message(conn, DLQB_CHANNEL, &msg, 0);
    /* On failure the messages are still unacked: the channel or connection
     * closing (which the failure implies or the caller does) requeues them. */
    st = dlqb_link_reply(link, r, what, err);
    if (st != DLQB_OK) return st;
    *stamped = dlqb_queue_head_stamp(&msg.properties, now_ms, stamp_ms);
    amqp_destroy_message(&msg);
  }
  if (st != DLQB_OK || last_tag == 0) return st;
  snprintf(what, sizeof what, "return the head of '%s'", queue);
  return dlqb_link_status(amqp_basic_nack(conn, DLQB_CHANNEL, last_tag, 1, 1), what, err);
}

static double seconds_since(int64_t now_ms, int64_t then_ms) {
  return now_ms > then_ms ? (double)(now_ms - then_ms) / 1000.0 : 0.0;
}

dlqb_status dlqb_queue_stat_read(dlqb_link *link, const dlqb_queue_spec *spec, int64_t now_ms,
                                 int64_t *last_empty_ms, dlqb_queue_stat *out, dlqb_error *err) {
  memset(out, 0, sizeof *out);
  snprintf(out->queue, sizeof out->queue, "%s", spec->name);
  out->type = spec->type;
  out->age_source = DLQB_AGE_UNKNOWN;
  dlqb_status st = dlqb_link_queue_depth(link, spec->name, &out->depth, &out->consumers, err);
  if (st == DLQB_EBROKER) return DLQB_OK; /* no such queue; the link reopened its channel */
  if (st != DLQB_OK) return st;
  out->present = true;

  if (out->depth == 0) {
    if (last_empty_ms != NULL) *last_empty_ms = now_ms;
    out->age_source = DLQB_AGE_EMPTY;
    return DLQB_OK;
  }
  if (spec->type == DLQB_QTYPE_CLASSIC || spec->holds_items) {
    bool found, stamped;
    int64_t stamp = 0;
    st = peek_head(link, spec->name, now_ms, &found, &stamped, &stamp, err);
    if (st == DLQB_EBROKER) return DLQB_OK; /* deleted meanwhile: depth stands, age unknown */
    if (st != DLQB_OK) return st;
    if (!found) { /* drained since the declare */
      if (last_empty_ms != NULL) *last_empty_ms = now_ms;
      out->depth = 0;
      out->age_source = DLQB_AGE_EMPTY;
      return DLQB_OK;
    }
    if (stamped) {
      out->age_source = DLQB_AGE_HEAD;
      out->oldest_age_seconds = seconds_since(now_ms, stamp);
      return DLQB_OK;
    }
  }
  if (last_empty_ms != NULL && *last_empty_ms > 0) {
    out->age_source = DLQB_AGE_EMPTY_SINCE;
    out->oldest_age_seconds = seconds_since(now_ms, *last_empty_ms);
  }
  return DLQB_OK;
}

dlqb_queue_stats *dlqb_queue_stats_new(const dlqb_topology *topo) {
  dlqb_queue_stats *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  for (size_t i = 0; i < topo->nqueues; i++) {
    if (topo->queues[i].type == DLQB_QTYPE_STREAM) continue;
    s->specs[s->n++] = topo->queues[i];
  }
  return s;
}

void dlqb_queue_stats_free(dlqb_queue_stats *s) { free(s); }

dlqb_status dlqb_queue_stats_refresh(dlqb_queue_stats *s, dlqb_link *link, int64_t now_ms,
                                     dlqb_error *err) {
  for (size_t i = 0; i < s->n; i++) {
    dlqb_status st =
        dlqb_queue_stat_read(link, &s->specs[i], now_ms, &s->last_empty_ms[i], &s->results[i], err);
    if (st != DLQB_OK) return st;
  }
  /* basic.get results and declare-oks live in the connection's pools. */
  amqp_maybe_release_buffers(dlqb_link_conn(link));
  return DLQB_OK;
}

size_t dlqb_queue_stats_count(const dlqb_queue_stats *s) { return s->n; }

const dlqb_queue_stat *dlqb_queue_stats_results(const dlqb_queue_stats *s) { return s->results; }

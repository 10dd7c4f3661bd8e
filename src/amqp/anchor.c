/* The audit anchors on the broker: the publisher thread that appends a
 * writer's signed head to dsr.audit.anchors, and the reader behind
 * `audit verify --anchors` (include/dlqb/anchor.h). */
#include "dlqb/anchor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "dlqb/envelope.h"
#include "dlqb/link.h"
#include "dlqb/log.h"
#include "dlqb/names.h"
#include "dlqb/thread.h"

#define READ_PREFETCH  500
#define READ_ACK_EVERY 100

struct dlqb_anchor_pub {
  const dlqb_config *cfg;         /* the caller's: it outlives the publisher (dlqb_anchor_start) */
  const dlqb_broker_conf *broker; /* whom it connects as: the caller's too */
  dlqb_audit *audit;
  dlqb_link *link;    /* the thread's, then stop's */
  uint64_t published; /* the head's commits count at the last confirmed anchor */
  pthread_t thread;
  bool running;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopping;  /* (mu) */
  bool held;      /* (mu) no attempt until dlqb_anchor_release */
  bool failing;   /* (mu) */
  dlqb_error why; /* (mu) the last failure */
};

/* Waits for the confirm of the one publish in flight on the link. */
static dlqb_status wait_confirm(dlqb_link *link, dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  bool returned = false;
  for (;;) {
    amqp_frame_t f;
    struct timeval tv = {DLQB_ANCHOR_CONFIRM_MS / 1000, (DLQB_ANCHOR_CONFIRM_MS % 1000) * 1000};
    int rc = amqp_simple_wait_frame_noblock(conn, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT)
      return dlqb_fail(err, DLQB_ETIMEOUT, "anchor stream '%s': no confirm within %d ms",
                       DLQB_Q_ANCHORS, DLQB_ANCHOR_CONFIRM_MS);
    if (rc != AMQP_STATUS_OK) return dlqb_link_status(rc, "publish the audit anchor", err);
    if (f.frame_type != AMQP_FRAME_METHOD) continue; /* a returned message's header/body */
    switch (f.payload.method.id) {
    case AMQP_BASIC_RETURN_METHOD:
      returned = true; /* its ack follows */
      continue;
    case AMQP_BASIC_ACK_METHOD:
      if (returned)
        return dlqb_fail(err, DLQB_EBROKER,
                         "no stream '%s' on the broker (run 'dlq-bridge "
                         "declare')",
                         DLQB_Q_ANCHORS);
      return DLQB_OK;
    case AMQP_BASIC_NACK_METHOD:
      return dlqb_fail(err, DLQB_EBROKER, "anchor stream '%s' refused the anchor", DLQB_Q_ANCHORS);
    case AMQP_CHANNEL_CLOSE_METHOD:
    case AMQP_CONNECTION_CLOSE_METHOD:
      return dlqb_fail(err, DLQB_ECONN,
                       "broker closed the channel while taking the audit "
                       "anchor (no write permission on amq.default?)");
    default: continue;
    }
  }
}

/* Publishes one message to the stream, persistent and mandatory, with
 * the connection's user as user_id, and waits for its confirm. */
static dlqb_status publish_line(dlqb_link *link, const char *line, size_t len, dlqb_error *err) {
  amqp_basic_properties_t props;
  memset(&props, 0, sizeof props);
  props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG |
                 AMQP_BASIC_APP_ID_FLAG | AMQP_BASIC_USER_ID_FLAG;
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  props.content_type = amqp_cstring_bytes("application/json");
  props.app_id = amqp_cstring_bytes("dlq-bridge audit");
  /* The broker refuses a user_id that is not the connection's: the
   * anchor's appender is authenticated, for whoever reads the stream. */
  props.user_id = amqp_cstring_bytes(dlqb_link_user(link));
  amqp_bytes_t body = {len, (void *)line};
  int rc = amqp_basic_publish(dlqb_link_conn(link), DLQB_CHANNEL, amqp_empty_bytes,
                              dlqb_bytes(DLQB_Q_ANCHORS), 1, 0, &props, body);
  return rc == AMQP_STATUS_OK ? wait_confirm(link, err)
                              : dlqb_link_status(rc, "publish the audit anchor", err);
}

/* Publishes the head when it changed since the last confirmed anchor. On
 * a failure the link is dropped. A link kept from an earlier anchor may
 * have died meanwhile without a word: between anchors nothing is read from
 * it, so its heartbeats go unanswered and a broker closes it after an idle
 * spell (missed heartbeats, 60 s). A publish on such a link that fails for
 * the connection is tried once more on a fresh one, so an anchor after a
 * quiet hour, or the daemon's last at a clean stop, is not lost to it. */
static dlqb_status publish_head(dlqb_anchor_pub *p, dlqb_error *err) {
  char line[DLQB_AUDIT_ANCHOR_MAX];
  size_t len;
  uint64_t commits;
  dlqb_status st = dlqb_audit_anchor(p->audit, line, &len, &commits, err);
  if (st != DLQB_OK || len == 0 || commits == p->published) return st;
  for (int attempt = 0; attempt < 2; attempt++) {
    bool kept = p->link != NULL;
    if (!kept) {
      st = dlqb_link_open(p->broker, "dlq-bridge audit anchors", &p->link, err);
      if (st == DLQB_OK) st = dlqb_link_confirm_select(p->link, DLQB_CHANNEL, err);
    }
    if (st == DLQB_OK) st = publish_line(p->link, line, len, err);
    if (st == DLQB_OK) {
      p->published = commits;
      return DLQB_OK;
    }
    dlqb_link_abort(p->link);
    p->link = NULL;
    /* a fresh link's failure is the answer */
    if (!kept || (st != DLQB_ECONN && st != DLQB_ETIMEOUT)) break;
  }
  return st;
}

/* How long an append waits for the stream's message count to show it. */
#define VISIBLE_WAIT_MS 30000

dlqb_status dlqb_anchor_append(const dlqb_config *cfg, const char *purpose, const char *line,
                               size_t len, dlqb_error *err) {
  dlqb_link *link = NULL;
  uint32_t before = 0;
  dlqb_status st = dlqb_link_open(&cfg->broker, purpose, &link, err);
  if (st == DLQB_OK) st = dlqb_link_confirm_select(link, DLQB_CHANNEL, err);
  if (st == DLQB_OK) st = dlqb_link_queue_depth(link, DLQB_Q_ANCHORS, &before, NULL, err);
  if (st == DLQB_OK) st = publish_line(link, line, len, err);
  /* Confirmed is not yet readable: a reader reads up to the stream's
   * message count, which lags an append by a moment (seconds under load),
   * so a `prove` or `witness` right after would not find it. Return once
   * the count shows it. */
  int64_t until = dlqb_mono_ms() + VISIBLE_WAIT_MS;
  uint32_t now = before;
  while (st == DLQB_OK && now <= before && dlqb_mono_ms() < until) {
    st = dlqb_link_queue_depth(link, DLQB_Q_ANCHORS, &now, NULL, err);
    if (st == DLQB_OK && now <= before) dlqb_sleep_us(NULL, 50000);
  }
  if (st == DLQB_OK && now <= before)
    dlqb_log_warn("anchor_unseen",
                  "%s took the message but its count does not show it after %d ms: a reader "
                  "right now may not see it yet",
                  DLQB_Q_ANCHORS, VISIBLE_WAIT_MS);
  if (link != NULL) {
    if (st == DLQB_OK || st == DLQB_EBROKER) dlqb_link_close(link);
    else dlqb_link_abort(link);
  }
  return st;
}

/* Records the outcome of an attempt: logs once when anchoring starts
 * failing and once when it recovers. */
static void note(dlqb_anchor_pub *p, dlqb_status st, const dlqb_error *err) {
  pthread_mutex_lock(&p->mu);
  bool was = p->failing;
  p->failing = st != DLQB_OK;
  if (st != DLQB_OK) p->why = *err;
  pthread_mutex_unlock(&p->mu);
  if (st != DLQB_OK && !was)
    dlqb_log_error("anchor_failing",
                   "cannot anchor the audit trail: %s; records stay on disk "
                   "and acking goes on, retrying every %llu ms",
                   err->msg, (unsigned long long)p->cfg->audit.anchor_interval_ms);
  else if (st == DLQB_OK && was)
    dlqb_log_info("anchor_recovered", "the audit trail is anchored again (%s)", DLQB_Q_ANCHORS);
}

static void *anchor_main(void *arg) {
  dlqb_anchor_pub *p = arg;
  if (p->cfg->pipeline_count > 0) dlqb_log_set_pipeline(p->cfg->pipelines[0].p.name);
  pthread_mutex_lock(&p->mu);
  while (!p->stopping) {
    if (p->held) {
      pthread_cond_wait(&p->cv, &p->mu);
      continue;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ms = p->cfg->audit.anchor_interval_ms;
    until.tv_sec += (time_t)(ms / 1000);
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (!p->stopping && pthread_cond_timedwait(&p->cv, &p->mu, &until) == 0) {
    }
    if (p->stopping) break;
    pthread_mutex_unlock(&p->mu);
    dlqb_error err = {{0}};
    dlqb_status st = publish_head(p, &err);
    note(p, st, &err);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

dlqb_status dlqb_anchor_start(const dlqb_config *cfg, const dlqb_broker_conf *broker, dlqb_audit *a,
                              bool held, dlqb_anchor_pub **out, dlqb_error *err) {
  *out = NULL;
  if (a == NULL || cfg->audit.anchor_interval_ms == 0) return DLQB_OK;
  dlqb_anchor_pub *p = calloc(1, sizeof *p);
  if (p == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  p->cfg = cfg;
  p->broker = dlqb_config_broker(cfg, broker);
  p->audit = a;
  p->held = held;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  if (dlqb_thread_start(&p->thread, anchor_main, p) != 0) {
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return dlqb_fail(err, DLQB_ENOMEM, "cannot start the audit anchor thread");
  }
  p->running = true;
  *out = p;
  return DLQB_OK;
}

void dlqb_anchor_release(dlqb_anchor_pub *p) {
  if (p == NULL) return;
  pthread_mutex_lock(&p->mu);
  p->held = false;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

bool dlqb_anchor_health(dlqb_anchor_pub *p, char *why, size_t len) {
  if (why != NULL && len > 0) why[0] = '\0';
  if (p == NULL) return true;
  pthread_mutex_lock(&p->mu);
  bool ok = !p->failing;
  if (!ok && why != NULL) snprintf(why, len, "audit anchors: %s", p->why.msg);
  pthread_mutex_unlock(&p->mu);
  return ok;
}

dlqb_status dlqb_anchor_stop(dlqb_anchor_pub *p, dlqb_error *err) {
  if (p == NULL) return DLQB_OK;
  if (p->running) {
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
  }
  /* The last head (the chain_end when the writer was ended first). */
  dlqb_status st = publish_head(p, err);
  note(p, st, err);
  if (p->link != NULL) dlqb_link_close(p->link);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
  return st;
}

/* ---- reading the stream ---- */

dlqb_status dlqb_anchor_read(const dlqb_config *cfg, const char *stream, dlqb_audit_lines *out,
                             long idle_ms, dlqb_error *err) {
  dlqb_link *link = NULL;
  dlqb_status st = dlqb_link_open(&cfg->broker, "dlq-bridge audit verify --anchors", &link, err);
  if (st != DLQB_OK) return st;
  uint32_t count = 0;
  /* The end is the message count at the start: anchors appended later
   * are newer than the files being read, so they need not be waited for. */
  st = dlqb_link_queue_depth(link, stream, &count, NULL, err);
  amqp_connection_state_t conn = dlqb_link_conn(link);
  char what[160];
  snprintf(what, sizeof what, "read the anchor stream '%s'", stream);
  if (st == DLQB_OK && count > 0) {
    /* A stream consumer must set a prefetch and ack: acks are its credit. */
    amqp_basic_qos(conn, DLQB_CHANNEL, 0, READ_PREFETCH, 0);
    st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), "set prefetch", err);
  }
  if (st == DLQB_OK && count > 0) {
    amqp_table_entry_t arg = {
        .key = amqp_cstring_bytes(DLQB_H_STREAM_OFFSET),
        .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("first")}};
    amqp_table_t args = {1, &arg};
    amqp_basic_consume(conn, DLQB_CHANNEL, dlqb_bytes(stream), dlqb_bytes("dlqb-anchors"), 0, 0, 0,
                       args);
    st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), what, err);
  }
  size_t since_ack = 0;
  while (st == DLQB_OK && out->n < count) {
    amqp_maybe_release_buffers(conn);
    amqp_envelope_t env;
    struct timeval tv = {idle_ms / 1000, (idle_ms % 1000) * 1000};
    amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT) {
      st = dlqb_fail(err, DLQB_ETIMEOUT,
                     "anchor stream '%s': read %zu of %u anchors, then "
                     "nothing for %ld ms",
                     stream, out->n, count, idle_ms);
      break;
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
      amqp_frame_t f;
      if (amqp_simple_wait_frame(conn, &f) != AMQP_STATUS_OK)
        st = dlqb_fail(err, DLQB_ECONN, "cannot read the anchor stream '%s'", stream);
      continue;
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
      st = dlqb_link_reply(link, r, what, err);
      break;
    }
    st = dlqb_audit_lines_add(out, env.message.body.bytes, env.message.body.len, err);
    uint64_t tag = env.delivery_tag;
    amqp_destroy_envelope(&env);
    if (st == DLQB_OK && ++since_ack >= READ_ACK_EVERY) {
      if (amqp_basic_ack(conn, DLQB_CHANNEL, tag, 1) != AMQP_STATUS_OK)
        st = dlqb_fail(err, DLQB_ECONN, "cannot ack the anchor stream '%s'", stream);
      since_ack = 0;
    }
  }
  if (st == DLQB_OK || st == DLQB_EBROKER || st == DLQB_ETIMEOUT) dlqb_link_close(link);
  else dlqb_link_abort(link);
  return st;
}

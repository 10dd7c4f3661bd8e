/* The catalog on the broker: events, the reader's fold up to its marker,
 * the look and its checkpoint (dlqb/catalog_stream.h). */
#include "dlqb/catalog_stream.h"

#include "catalog_private.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "dlqb/calendar.h"
#include "dlqb/clock.h"
#include "dlqb/file.h"
#include "dlqb/hashset.h"
#include "dlqb/headers.h"
#include "dlqb/link.h"
#include "dlqb/log.h"
#include "dlqb/names.h"
#include "dlqb/text.h"
#include "dlqb/xdeath.h"

#define READ_PREFETCH 2000
#define ACK_EVERY     500
#define READ_IDLE_MS  30000
#define CONFIRM_MS    5000
/* A string header kept in an "in" event is cut to this: every field of
 * the item view is shorter. */
#define EVENT_STRING_MAX 2048
/* Write the checkpoint again once this many events (or this fraction of the
 * entries) were folded since the last one. */
#define CHECKPOINT_EVENTS 2000

/* ---- targets and events -------------------------------------------------- */

void dlqb_catalog_target_of(const dlqb_pipeline *p, dlqb_catalog_target *t) {
  memset(t, 0, sizeof *t);
  snprintf(t->stream, sizeof t->stream, "%s", p->catalog);
  snprintf(t->queues[0], sizeof t->queues[0], "%s", p->dlq);
  snprintf(t->queues[1], sizeof t->queues[1], "%s", p->review);
  t->nqueues = 2;
  t->profile = p->profile;
}

bool dlqb_catalog_target_has(const dlqb_catalog_target *t, const char *queue) {
  for (size_t i = 0; i < t->nqueues; i++)
    if (strcmp(t->queues[i], queue) == 0) return true;
  return false;
}

bool dlqb_catalog_trusts(const dlqb_catalog_target *t, const amqp_basic_properties_t *props) {
  if (t->writers[0] == '\0') return true;
  return (props->_flags & AMQP_BASIC_USER_ID_FLAG) &&
         dlqb_user_listed(t->writers, props->user_id.bytes, props->user_id.len);
}

dlqb_status dlqb_catalog_send(dlqb_link *link, amqp_channel_t ch, const char *stream,
                              const amqp_basic_properties_t *props, amqp_bytes_t body,
                              dlqb_error *err) {
  amqp_basic_properties_t own = *props;
  own._flags |= AMQP_BASIC_USER_ID_FLAG;
  own.user_id = amqp_cstring_bytes(dlqb_link_user(link));
  int rc = amqp_basic_publish(dlqb_link_conn(link), ch, amqp_empty_bytes, dlqb_bytes(stream), 1, 0,
                              &own, body);
  return rc == AMQP_STATUS_OK ? DLQB_OK : dlqb_link_status(rc, "write the catalog", err);
}

/* The headers the item view reads (src/core/item.c), beside the profile's
 * identity. */
static const char *const kept[] = {
    DLQB_H_LEGAL_BASIS,     DLQB_H_ACTION,       DLQB_H_ATTEMPT,      DLQB_H_REPLAY_COUNT,
    DLQB_H_REPLAYED_AT,     DLQB_H_LAST_ERROR,   DLQB_H_DLQ_REASON,   DLQB_H_DLQ_AT,
    DLQB_H_FIRST_SEEN_AT,   DLQB_H_ESCALATED_AT, DLQB_H_ESCALATED_BY, DLQB_H_ESCALATION_REASON,
    DLQB_H_ESCALATION_NOTE, DLQB_H_OWNER,        DLQB_H_CLAIMED_AT,   DLQB_H_REQUEST_ID,
    DLQB_H_SOURCE_SYSTEM,
};

static bool keeps(const dlqb_catalog_target *t, amqp_bytes_t key) {
  for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
    if (key.len == strlen(kept[i]) && memcmp(key.bytes, kept[i], key.len) == 0) return true;
  for (size_t i = 0; i < t->profile.nfields && i < 2; i++)
    if (key.len == strlen(t->profile.fields[i].name) &&
        memcmp(key.bytes, t->profile.fields[i].name, key.len) == 0)
      return true;
  return false;
}

/* A value a stream takes from every broker version, and the item view can
 * read: a plain scalar. */
static bool plain_scalar(const amqp_field_value_t *v) {
  switch (v->kind) {
  case AMQP_FIELD_KIND_BOOLEAN:
  case AMQP_FIELD_KIND_I8:
  case AMQP_FIELD_KIND_U8:
  case AMQP_FIELD_KIND_I16:
  case AMQP_FIELD_KIND_U16:
  case AMQP_FIELD_KIND_I32:
  case AMQP_FIELD_KIND_U32:
  case AMQP_FIELD_KIND_I64:
  case AMQP_FIELD_KIND_U64:
  case AMQP_FIELD_KIND_F32:
  case AMQP_FIELD_KIND_F64:
  case AMQP_FIELD_KIND_UTF8:
  case AMQP_FIELD_KIND_BYTES:
  case AMQP_FIELD_KIND_TIMESTAMP: return true;
  default: return false;
  }
}

static amqp_table_entry_t str_entry(const char *key, const char *value) {
  return (amqp_table_entry_t){
      .key = amqp_cstring_bytes(key),
      .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes(value)}};
}

static void event_base(dlqb_catalog_event *ev, const char *op, const char *queue) {
  memset(ev, 0, sizeof *ev);
  ev->h[0] = str_entry(DLQB_H_CATALOG_OP, op);
  ev->h[1] = str_entry(DLQB_H_CATALOG_QUEUE, queue);
  ev->props._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
  ev->props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  ev->props.headers = (amqp_table_t){2, ev->h};
}

void dlqb_catalog_event_in(const dlqb_catalog_target *t, const char *queue,
                           const amqp_basic_properties_t *copy, dlqb_catalog_event *ev) {
  event_base(ev, "in", queue);
  if (copy->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) {
    ev->props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    ev->props.message_id = copy->message_id;
  }
  if (copy->_flags & AMQP_BASIC_TIMESTAMP_FLAG) {
    ev->props._flags |= AMQP_BASIC_TIMESTAMP_FLAG;
    ev->props.timestamp = copy->timestamp;
  }
  if (!(copy->_flags & AMQP_BASIC_HEADERS_FLAG)) return;
  int n = 2;
  /* x-death as the item view reads it. */
  dlqb_deaths_text(&copy->headers, ev->deaths, sizeof ev->deaths);
  if (ev->deaths[0] != '\0') ev->h[n++] = str_entry(DLQB_H_CATALOG_DEATHS, ev->deaths);
  const amqp_table_t *death = dlqb_header_first_death(&copy->headers);
  const amqp_field_value_t *tv = death != NULL ? dlqb_header_find(death, DLQB_XDEATH_TIME) : NULL;
  if (tv != NULL && tv->kind == AMQP_FIELD_KIND_TIMESTAMP &&
      tv->value.u64 <= (uint64_t)INT64_MAX / 1000)
    ev->h[n++] = (amqp_table_entry_t){
        .key = amqp_cstring_bytes(DLQB_H_CATALOG_XDEATH_AT),
        .value = {.kind = AMQP_FIELD_KIND_I64, .value.i64 = (int64_t)tv->value.u64 * 1000}};
  for (int i = 0; i < copy->headers.num_entries && n < DLQB_CATALOG_EVENT_HEADERS; i++) {
    const amqp_table_entry_t *e = &copy->headers.entries[i];
    if (!keeps(t, e->key) || !plain_scalar(&e->value)) continue;
    ev->h[n] = *e;
    if ((e->value.kind == AMQP_FIELD_KIND_UTF8 || e->value.kind == AMQP_FIELD_KIND_BYTES) &&
        e->value.value.bytes.len > EVENT_STRING_MAX)
      ev->h[n].value.value.bytes.len = EVENT_STRING_MAX;
    n++;
  }
  ev->props.headers.num_entries = n;
}

void dlqb_catalog_event_item(const amqp_basic_properties_t *props, const dlqb_profile *profile,
                             dlqb_item *it) {
  dlqb_item_read_as(props, profile, it);
  if (!(props->_flags & AMQP_BASIC_HEADERS_FLAG)) return;
  /* x-death came as the item view's own reading of it. */
  const amqp_field_value_t *d = dlqb_header_find(&props->headers, DLQB_H_CATALOG_DEATHS);
  if (d != NULL && d->kind == AMQP_FIELD_KIND_UTF8)
    dlqb_text_sanitize(it->deaths, sizeof it->deaths, d->value.bytes.bytes, d->value.bytes.len);
  int64_t at;
  if (dlqb_field_int(dlqb_header_find(&props->headers, DLQB_H_CATALOG_XDEATH_AT), &at) && at >= 0) {
    it->has_xdeath_at = true;
    it->xdeath_at_ms = at;
  }
}

void dlqb_catalog_event_out(const char *queue, const char *message_id, dlqb_catalog_event *ev) {
  event_base(ev, "out", queue);
  ev->props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
  ev->props.message_id = amqp_cstring_bytes(message_id);
}

void dlqb_catalog_event_verified(const char *queue, int64_t at_ms, uint64_t n, char *numbuf,
                                 size_t numcap, dlqb_catalog_event *ev) {
  event_base(ev, "verified", queue);
  ev->h[2] = (amqp_table_entry_t){.key = amqp_cstring_bytes(DLQB_H_CATALOG_AT),
                                  .value = {.kind = AMQP_FIELD_KIND_I64, .value.i64 = at_ms}};
  snprintf(numbuf, numcap, "%llu", (unsigned long long)n);
  ev->h[3] = str_entry(DLQB_H_CATALOG_COUNT, numbuf);
  ev->props.headers.num_entries = 4;
}

/* ---- publishing with confirms on a link's own channel -------------------- */

/* Waits up to wait_ms for the confirm of every publish up to seq on ch. */
static dlqb_status await_upto(dlqb_link *link, amqp_channel_t ch, uint64_t seq, uint64_t *seen,
                              const char *stream, long wait_ms, dlqb_error *err);

static dlqb_status await_confirms_within(dlqb_link *link, amqp_channel_t ch, uint64_t seq,
                                         const char *stream, long wait_ms, dlqb_error *err) {
  uint64_t seen = 0;
  return await_upto(link, ch, seq, &seen, stream, wait_ms, err);
}

/* The same, *seen the highest delivery tag confirmed so far on ch (kept
 * between calls: a confirm read once is not read again). */
static dlqb_status await_upto(dlqb_link *link, amqp_channel_t ch, uint64_t seq, uint64_t *seen,
                              const char *stream, long wait_ms, dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  uint64_t upto = *seen;
  while (upto < seq) {
    amqp_frame_t f;
    struct timeval tv = {wait_ms / 1000, (wait_ms % 1000) * 1000};
    int rc = amqp_simple_wait_frame_noblock(conn, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT)
      return dlqb_fail(err, DLQB_ETIMEOUT, "catalog '%s': no confirm within %ld ms", stream,
                       wait_ms);
    if (rc != AMQP_STATUS_OK) return dlqb_link_status(rc, "write the catalog", err);
    if (f.frame_type != AMQP_FRAME_METHOD || f.channel != ch) continue;
    switch (f.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
      const amqp_basic_ack_t *a = f.payload.method.decoded;
      /* One stream, so its confirms come in order. */
      if (a->delivery_tag > upto) upto = *seen = a->delivery_tag;
      break;
    }
    case AMQP_BASIC_NACK_METHOD:
      return dlqb_fail(err, DLQB_EBROKER, "catalog '%s' refused an event", stream);
    case AMQP_BASIC_RETURN_METHOD:
      return dlqb_fail(err, DLQB_EBROKER, "catalog '%s' is not a queue here (run declare)", stream);
    case AMQP_CHANNEL_CLOSE_METHOD: {
      /* ACCESS_REFUSED: a user who may not write here (a read-only one);
       * its looks read the queue instead (a refusal, not a lost link). */
      const amqp_channel_close_t *c = f.payload.method.decoded;
      return dlqb_fail(err, c->reply_code == DLQB_REPLY_ACCESS_REFUSED ? DLQB_EACCESS : DLQB_ECONN,
                       "broker closed the channel while writing the catalog '%s' (no write "
                       "permission?)",
                       stream);
    }
    case AMQP_CONNECTION_CLOSE_METHOD:
      return dlqb_fail(err, DLQB_ECONN,
                       "broker closed the connection while writing the catalog '%s'", stream);
    default: break;
    }
  }
  return DLQB_OK;
}

static void make_marker(char *out, size_t cap);
static void event_base(dlqb_catalog_event *ev, const char *op, const char *queue);

dlqb_status dlqb__catalog_await_confirms(dlqb_link *link, amqp_channel_t ch, uint64_t seq,
                                         const char *stream, dlqb_error *err) {
  return await_confirms_within(link, ch, seq, stream, CONFIRM_MS, err);
}

dlqb_status dlqb_catalog_probe(dlqb_link *link, unsigned channel, const char *stream, long wait_ms,
                               dlqb_error *err) {
  char marker[DLQB_CATALOG_MARKER_MAX];
  make_marker(marker, sizeof marker);
  dlqb_catalog_event ev;
  event_base(&ev, "mark", "");
  ev.h[0] = str_entry(DLQB_H_CATALOG_MARKER, marker);
  ev.props.headers.num_entries = 1;
  dlqb_status st =
      dlqb_catalog_send(link, (amqp_channel_t)channel, stream, &ev.props, amqp_empty_bytes, err);
  if (st != DLQB_OK) return st;
  return await_confirms_within(link, (amqp_channel_t)channel, 1, stream, wait_ms, err);
}

static dlqb_status publish_events(dlqb_link *link, const char *stream, const dlqb_catalog_event *ev,
                                  size_t n, dlqb_error *err) {
  dlqb_status st = dlqb_link_confirm_select(link, DLQB_CHANNEL, err);
  for (size_t i = 0; st == DLQB_OK && i < n; i++)
    st = dlqb_catalog_send(link, DLQB_CHANNEL, stream, &ev[i].props, amqp_empty_bytes, err);
  return st == DLQB_OK ? dlqb__catalog_await_confirms(link, DLQB_CHANNEL, n, stream, err) : st;
}

dlqb_status dlqb_catalog_wait_ready(const dlqb_broker_conf *broker, const char *stream,
                                    long wait_ms, dlqb_error *err) {
  long long deadline = dlqb_mono_ms() + wait_ms;
  dlqb_status st;
  do {
    dlqb_link *link = NULL;
    st = dlqb_link_open(broker, "dlq-bridge catalog probe", &link, err);
    if (st != DLQB_OK) return st;
    st = dlqb_link_confirm_select(link, DLQB_CHANNEL, err);
    if (st == DLQB_OK) st = dlqb_catalog_probe(link, DLQB_CHANNEL, stream, 1000, err);
    /* A probe that timed out may have taken its connection with it. */
    if (st == DLQB_OK || st == DLQB_EBROKER) dlqb_link_close(link);
    else dlqb_link_abort(link);
    if (st != DLQB_ETIMEOUT) return st;
  } while (dlqb_mono_ms() < deadline);
  return st;
}

dlqb_status dlqb_catalog_append(const dlqb_broker_conf *broker, const char *stream,
                                const dlqb_catalog_event *ev, size_t n, dlqb_error *err) {
  dlqb_link *link = NULL;
  dlqb_status st = dlqb_link_open(broker, "dlq-bridge catalog", &link, err);
  if (st != DLQB_OK) return st;
  st = publish_events(link, stream, ev, n, err);
  if (st == DLQB_OK || st == DLQB_EBROKER) dlqb_link_close(link);
  else dlqb_link_abort(link);
  return st;
}

/* ---- the reader ------------------------------------------------------------ */

dlqb_catalog_reader *dlqb_catalog_reader_new(const dlqb_pipeline *p, const char *checkpoint,
                                             const char *writers) {
  dlqb_catalog_reader *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  dlqb_catalog_target_of(p, &r->t);
  snprintf(r->t.writers, sizeof r->t.writers, "%s", writers ? writers : "");
  snprintf(r->checkpoint, sizeof r->checkpoint, "%s", checkpoint ? checkpoint : "");
  const char *qs[] = {r->t.queues[0], r->t.queues[1]};
  r->c = dlqb_catalog_new(qs, r->t.nqueues);
  dlqb_catalog_snapfind_init(&r->find, &r->t);
  if (r->c == NULL || pthread_mutex_init(&r->lock, NULL) != 0) {
    dlqb_catalog_free(r->c);
    free(r);
    return NULL;
  }
  return r;
}

void dlqb_catalog_reader_free(dlqb_catalog_reader *r) {
  if (r == NULL) return;
  pthread_mutex_destroy(&r->lock);
  dlqb_catalog_free(r->c);
  free(r);
}

void dlqb_catalog_checkpoint_path(const dlqb_config *cfg, const dlqb_pipeline *p, char *out,
                                  size_t cap) {
  const char *setting = cfg->catalog.checkpoint;
  out[0] = '\0';
  if (setting[0] == '\0' || strcmp(setting, "none") == 0) return;
  if (strcmp(setting, "auto") != 0) {
    /* A pipeline's own path was made by dlqb_config_pipeline_paths. */
    snprintf(out, cap, "%s", setting);
    return;
  }
  char dir[DLQB_CONFIG_STR_MAX];
  dlqb_error why;
  if (dlqb_state_dir(dir, sizeof dir, &why) != DLQB_OK) {
    static atomic_bool told;
    if (!atomic_exchange(&told, true))
      dlqb_log_warn("catalog_checkpoint", "%s; each look folds the catalog whole", why.msg);
    return;
  }
  /* One file per broker and stream: the URL after its user and password
   * (host, port, vhost), never the password itself. */
  const char *url = cfg->broker.url, *at = strrchr(url, '@'), *scheme = strstr(url, "://");
  const char *where = at != NULL ? at + 1 : scheme != NULL ? scheme + 3 : url;
  snprintf(out, cap, "%s/catalog-%s-%016llx.ckpt", dir, p->catalog,
           (unsigned long long)dlqb_hashset_hash(where, strlen(where)));
}

dlqb_catalog_reader *dlqb_catalog_reader_of(const dlqb_config *cfg, const dlqb_pipeline *p) {
  char path[DLQB_CONFIG_STR_MAX];
  dlqb_catalog_checkpoint_path(cfg, p, path, sizeof path);
  return dlqb_catalog_reader_new(p, path, cfg->catalog.writers);
}

/* The identity a fold is read under: the profile's two field names, and
 * the writers it believed (a checkpoint folded under other writers is not
 * this fold's). */
#define IDENT_MAX (2 * DLQB_HEADER_NAME_MAX + DLQB_CONFIG_STR_MAX + 16)
static void ident_of(const dlqb_catalog_target *t, char *out, size_t cap) {
  snprintf(out, cap, "%s %s%s%s", t->profile.nfields > 0 ? t->profile.fields[0].name : "",
           t->profile.nfields > 1 ? t->profile.fields[1].name : "",
           t->writers[0] != '\0' ? " writers=" : "", t->writers);
}

static void make_marker(char *out, size_t cap) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  unsigned char rnd[8] = {0};
  (void)getrandom(rnd, sizeof rnd, GRND_NONBLOCK);
  snprintf(out, cap, "%ld-%lld-%ld-%02x%02x%02x%02x%02x%02x%02x%02x", (long)getpid(),
           (long long)ts.tv_sec, ts.tv_nsec, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6],
           rnd[7]);
}

static bool header_text(const amqp_basic_properties_t *p, const char *key, char *dst, size_t cap) {
  return (p->_flags & AMQP_BASIC_HEADERS_FLAG) && dlqb_header_id(&p->headers, key, dst, cap);
}

static int64_t stream_offset(const amqp_basic_properties_t *p) {
  int64_t offset;
  if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG) ||
      !dlqb_field_int(dlqb_header_find(&p->headers, DLQB_H_STREAM_OFFSET), &offset) || offset < 0)
    return -1;
  return offset;
}

dlqb_status dlqb_catalog_fold_event(dlqb_catalog *c, const dlqb_catalog_target *t,
                                    const amqp_basic_properties_t *props, dlqb_item *it,
                                    dlqb_error *err) {
  char op[16], queue[DLQB_QNAME_MAX];
  if (!header_text(props, DLQB_H_CATALOG_OP, op, sizeof op) ||
      !header_text(props, DLQB_H_CATALOG_QUEUE, queue, sizeof queue))
    return DLQB_OK; /* markers, or not ours */
  int q = dlqb_catalog_queue(c, queue);
  if (q < 0) return DLQB_OK;
  if (!dlqb_catalog_trusts(t, props)) {
    dlqb_catalog_untrusted_event(c, q);
    return DLQB_OK;
  }
  if (strcmp(op, "in") == 0) {
    dlqb_catalog_event_item(props, &t->profile, it);
    return dlqb_catalog_in(c, q, stream_offset(props), it, err);
  }
  if (strcmp(op, "out") == 0) {
    char id[128] = "";
    if (props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
      dlqb_text_sanitize(id, sizeof id, props->message_id.bytes, props->message_id.len);
    (void)dlqb_catalog_out(c, q, id);
    return DLQB_OK;
  }
  if (strcmp(op, "verified") == 0) {
    int64_t at = 0;
    char num[32];
    (void)dlqb_field_int(dlqb_header_find(&props->headers, DLQB_H_CATALOG_AT), &at);
    uint64_t n =
        header_text(props, DLQB_H_CATALOG_COUNT, num, sizeof num) ? strtoull(num, NULL, 10) : 0;
    dlqb_catalog_verified(c, q, at, n);
  }
  return DLQB_OK;
}

/* ---- snapshots: finding one, folding from it ----------------------------- */

static bool header_i64(const amqp_basic_properties_t *p, const char *key, int64_t *out) {
  return (p->_flags & AMQP_BASIC_HEADERS_FLAG) &&
         dlqb_field_int(dlqb_header_find(&p->headers, key), out);
}

/* The snapshot message's kind: 1 a chunk, 2 its end, 0 neither. */
static int snap_kind(const amqp_basic_properties_t *props) {
  char op[16];
  if (!header_text(props, DLQB_H_CATALOG_OP, op, sizeof op)) return 0;
  if (strcmp(op, "snap") == 0) return 1;
  if (strcmp(op, "snap-end") == 0) return 2;
  return 0;
}

bool dlqb_catalog_is_snapshot(const amqp_basic_properties_t *props) {
  return snap_kind(props) != 0;
}

void dlqb_catalog_snapfind_init(dlqb_catalog_snapfind *f, const dlqb_catalog_target *t) {
  memset(f, 0, sizeof *f);
  f->t = t;
  f->garbled_at = -1;
}

static void garbled(dlqb_catalog_snapfind *f, int64_t offset) {
  if (f->garbled++ == 0) f->garbled_at = offset;
}

static int target_queue(const dlqb_catalog_target *t, const char *queue) {
  for (size_t i = 0; i < t->nqueues; i++)
    if (strcmp(t->queues[i], queue) == 0) return (int)i;
  return -1;
}

static dlqb_catalog_snapslot *slot_of(dlqb_catalog_snapfind *f, const char *id) {
  for (size_t i = 0; i < DLQB_CATALOG_SNAP_OPEN; i++)
    if (f->open[i].used && strcmp(f->open[i].info.id, id) == 0) return &f->open[i];
  return NULL;
}

/* A slot for a snapshot that begins at offset: a free one, or the one
 * begun longest ago (a writer killed long since). */
static dlqb_catalog_snapslot *slot_new(dlqb_catalog_snapfind *f) {
  dlqb_catalog_snapslot *old = &f->open[0];
  for (size_t i = 0; i < DLQB_CATALOG_SNAP_OPEN; i++) {
    if (!f->open[i].used) return &f->open[i];
    if (f->open[i].info.first < old->info.first) old = &f->open[i];
  }
  return old;
}

/* The end's totals: a line per queue of t, in its order, "count unmatched
 * verified verified_at verified_n corrections queue". */
static bool parse_totals(const dlqb_catalog_target *t, amqp_bytes_t body,
                         dlqb_catalog_snapinfo *in) {
  if (body.len == 0 || body.len > 4096) return false;
  char text[4097];
  memcpy(text, body.bytes, body.len);
  text[body.len] = '\0';
  char *p = text;
  for (size_t q = 0; q < t->nqueues; q++) {
    char *nl = strchr(p, '\n');
    if (nl == NULL) return false;
    *nl = '\0';
    unsigned long long cnt, um, vn, corr;
    long long vat;
    int ver, used = 0;
    if (sscanf(p, "%llu %llu %d %lld %llu %llu %n", &cnt, &um, &ver, &vat, &vn, &corr, &used) !=
            6 ||
        used == 0 || strcmp(p + used, t->queues[q]) != 0)
      return false;
    in->items[q] = cnt;
    in->unmatched[q] = um;
    in->st[q] = (dlqb_catalog_qstate){ver != 0, vat, vn, corr};
    p = nl + 1;
  }
  return *p == '\0';
}

void dlqb_catalog_snapfind_feed(dlqb_catalog_snapfind *f, int64_t offset,
                                const amqp_basic_properties_t *props, amqp_bytes_t body) {
  int kind = snap_kind(props);
  if (kind == 0 || !dlqb_catalog_trusts(f->t, props)) return;
  char id[DLQB_CATALOG_MARKER_MAX], queue[DLQB_QNAME_MAX];
  int64_t as_of, chunk;
  if (!header_text(props, DLQB_H_CATALOG_SNAP, id, sizeof id) ||
      !header_i64(props, DLQB_H_CATALOG_SNAP_OF, &as_of) ||
      !header_i64(props, DLQB_H_CATALOG_SNAP_CHUNK, &chunk) || as_of < 0 || chunk < 0 ||
      as_of >= offset) {
    garbled(f, offset);
    return;
  }
  dlqb_catalog_snapslot *s = slot_of(f, id);
  if (s != NULL && s->info.as_of != as_of) {
    s->broken = true; /* two writers cannot share an id: not ours */
    garbled(f, offset);
    return;
  }
  if (s == NULL) {
    if (chunk != 0) return; /* begun before what this read saw (or cut) */
    s = slot_new(f);
    memset(s, 0, sizeof *s);
    s->used = true;
    snprintf(s->info.id, sizeof s->info.id, "%s", id);
    s->info.as_of = as_of;
    s->info.first = offset;
  }
  if (s->broken) return;
  if ((uint64_t)chunk != s->next) {
    s->broken = true;
    garbled(f, offset);
    return;
  }
  if (kind == 1) {
    int64_t count;
    size_t items;
    int q = header_text(props, DLQB_H_CATALOG_QUEUE, queue, sizeof queue)
                ? target_queue(f->t, queue)
                : -1;
    if (q < 0 || !header_i64(props, DLQB_H_CATALOG_COUNT, &count) ||
        !dlqb_catalog_chunk_ok(body.bytes, body.len, &items) || count < 0 ||
        (uint64_t)count != items) {
      s->broken = true;
      garbled(f, offset);
      return;
    }
    s->info.items[q] += items;
    s->next++;
    return;
  }
  /* Its end: complete when every chunk came, in order, and they add up. */
  dlqb_catalog_snapinfo totals = s->info;
  bool ok = parse_totals(f->t, body, &totals);
  for (size_t q = 0; ok && q < f->t->nqueues; q++) ok = totals.items[q] == s->info.items[q];
  if (!ok) {
    s->broken = true;
    garbled(f, offset);
    return;
  }
  totals.chunks = s->next;
  totals.end = offset;
  if (!f->have_best || totals.as_of >= f->best.as_of) {
    f->best = totals;
    f->have_best = true;
  }
  s->used = false;
}

typedef struct {
  dlqb_catalog *c;
  const dlqb_catalog_target *t;
  dlqb_catalog_snapfind *f;
  dlqb_catalog_whole *out;
  dlqb_item *it;
  bool fold; /* pass 1 on a stream not cut: fold as it goes */
  bool seen;
} whole_ctx;

static dlqb_status whole_scan(void *ctx, int64_t offset, const amqp_basic_properties_t *props,
                              amqp_bytes_t body, bool *stop, dlqb_error *err) {
  whole_ctx *w = ctx;
  (void)stop;
  if (!w->seen) {
    w->seen = true;
    w->fold = offset == 0;
  }
  dlqb_catalog_snapfind_feed(w->f, offset, props, body);
  if (!w->fold || dlqb_catalog_is_snapshot(props)) return DLQB_OK;
  if (header_text(props, DLQB_H_CATALOG_OP, (char[16]){0}, 16)) w->out->events++;
  return dlqb_catalog_fold_event(w->c, w->t, props, w->it, err);
}

static dlqb_status whole_chunks(void *ctx, int64_t offset, const amqp_basic_properties_t *props,
                                amqp_bytes_t body, bool *stop, dlqb_error *err) {
  whole_ctx *w = ctx;
  const dlqb_catalog_snapinfo *s = &w->out->snap;
  if (offset >= s->end) *stop = true;
  if (offset < s->first || offset >= s->end || snap_kind(props) != 1) return DLQB_OK;
  char id[DLQB_CATALOG_MARKER_MAX], queue[DLQB_QNAME_MAX];
  if (!header_text(props, DLQB_H_CATALOG_SNAP, id, sizeof id) || strcmp(id, s->id) != 0 ||
      !header_text(props, DLQB_H_CATALOG_QUEUE, queue, sizeof queue))
    return DLQB_OK;
  int q = dlqb_catalog_queue(w->c, queue);
  if (q < 0) return DLQB_OK;
  return dlqb_catalog_chunk_load(w->c, q, body.bytes, body.len, err);
}

static dlqb_status whole_after(void *ctx, int64_t offset, const amqp_basic_properties_t *props,
                               amqp_bytes_t body, bool *stop, dlqb_error *err) {
  whole_ctx *w = ctx;
  (void)body;
  (void)stop;
  if (offset <= w->out->snap.as_of || dlqb_catalog_is_snapshot(props)) return DLQB_OK;
  if (header_text(props, DLQB_H_CATALOG_OP, (char[16]){0}, 16)) w->out->events++;
  return dlqb_catalog_fold_event(w->c, w->t, props, w->it, err);
}

dlqb_status dlqb_catalog_fold_whole(dlqb_catalog *c, const dlqb_catalog_target *t,
                                    const dlqb_catalog_source *src, dlqb_catalog_snapfind *f,
                                    dlqb_catalog_whole *out, dlqb_error *err) {
  memset(out, 0, sizeof *out);
  dlqb_catalog_clear(c);
  dlqb_catalog_snapfind_init(f, t);
  whole_ctx w = {.c = c, .t = t, .f = f, .out = out, .it = malloc(sizeof(dlqb_item))};
  if (w.it == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  int64_t first = -1;
  /* Pass 1: the stream's first offset, and its snapshots; folded as it
   * goes when nothing was cut. */
  dlqb_status st = src->read(src->src, -1, whole_scan, &w, &first, err);
  out->first = first;
  if (st != DLQB_OK || first <= 0) goto done;
  dlqb_catalog_clear(c);
  out->events = 0;
  /* Cut: the newest complete snapshot whose as-of marker is still there
   * (events between a marker cut away and its chunks are gone with it). */
  if (!f->have_best || f->best.as_of < first) {
    out->cut = true;
    goto done;
  }
  out->snap = f->best;
  out->from_snapshot = true;
  /* Pass 2: its chunks, in order (whatever else came between them waits
   * for pass 3, so an "out" of an item in a later chunk finds it). */
  int64_t ignored;
  if (out->snap.chunks > 0)
    st = src->read(src->src, out->snap.first, whole_chunks, &w, &ignored, err);
  for (size_t q = 0; st == DLQB_OK && q < t->nqueues; q++) {
    int cq = dlqb_catalog_queue(c, t->queues[q]);
    if (dlqb_catalog_count(c, cq) != out->snap.items[q])
      st = dlqb_fail(err, DLQB_EINVAL,
                     "the catalog's snapshot did not read back whole (the stream changed while "
                     "it was read)");
    else dlqb_catalog_set_state(c, cq, out->snap.unmatched[q], &out->snap.st[q]);
  }
  /* Pass 3: every other event after its as-of marker, in stream order. */
  if (st == DLQB_OK) st = src->read(src->src, out->snap.as_of + 1, whole_after, &w, &ignored, err);
done:
  if (st != DLQB_OK || out->cut) dlqb_catalog_clear(c);
  free(w.it);
  return st;
}

/* Folds one event into r's fold. */
static dlqb_status fold(dlqb_catalog_reader *r, const amqp_basic_properties_t *props, dlqb_item *it,
                        dlqb_error *err) {
  return dlqb_catalog_fold_event(r->c, &r->t, props, it, err);
}

typedef struct {
  const dlqb_broker_conf *broker; /* whom the reader connects as */
  const char *marker;             /* this look's: the end */
  bool resume;                    /* start at r->mark (its marker must be there) */
  bool stale;                     /* out: it was not */
  int64_t end_offset;             /* out: our marker's offset */
  uint64_t events;                /* out */
} read_span;

/* A link that timed out is not asked to close: its channel may be gone
 * without a word (4.0.5, a stream just declared), and a close would wait
 * half a minute for an answer that never comes. */
void dlqb__catalog_end_link(dlqb_link *link, dlqb_status st) {
  if (st == DLQB_OK || st == DLQB_EBROKER) dlqb_link_close(link);
  else dlqb_link_abort(link);
}

/* The next delivery on the stream consumer of link's channel, waiting up
 * to wait_ms: DLQB_OK with *env filled (the caller destroys it),
 * DLQB_ETIMEOUT when nothing came (err untouched: what a timeout means is
 * the caller's), or the connection's or channel's error in err. Other
 * frames in between are passed over. */
static dlqb_status next_delivery(dlqb_link *link, const char *stream, const char *what,
                                 long wait_ms, amqp_envelope_t *env, dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  amqp_maybe_release_buffers(conn);
  for (;;) {
    struct timeval tv = {wait_ms / 1000, (wait_ms % 1000) * 1000};
    amqp_rpc_reply_t rr = amqp_consume_message(conn, env, &tv, 0);
    if (rr.reply_type == AMQP_RESPONSE_NORMAL) return DLQB_OK;
    if (rr.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && rr.library_error == AMQP_STATUS_TIMEOUT)
      return DLQB_ETIMEOUT;
    if (rr.reply_type != AMQP_RESPONSE_LIBRARY_EXCEPTION ||
        rr.library_error != AMQP_STATUS_UNEXPECTED_STATE)
      return dlqb_link_reply(link, rr, what, err);
    amqp_frame_t f;
    if (amqp_simple_wait_frame(conn, &f) != AMQP_STATUS_OK)
      return dlqb_fail(err, DLQB_ECONN, "cannot read the catalog '%s'", stream);
  }
}

/* Acks everything up to tag once every ACK_EVERY deliveries. */
static dlqb_status ack_now_and_then(dlqb_link *link, uint64_t tag, size_t *since_ack,
                                    dlqb_error *err) {
  if (++*since_ack < ACK_EVERY) return DLQB_OK;
  *since_ack = 0;
  if (amqp_basic_ack(dlqb_link_conn(link), DLQB_CHANNEL, tag, 1) != AMQP_STATUS_OK)
    return dlqb_fail(err, DLQB_ECONN, "cannot ack the catalog");
  return DLQB_OK;
}

/* Whether stream holds offset at (a mark's), read on a link of its own
 * from the stream's last chunk: its first delivery at or past at says it
 * does; marker (this look's, confirmed before) or the tail reached first
 * says it does not. */
static dlqb_status stream_reaches(const dlqb_broker_conf *broker, const char *stream,
                                  const char *marker, int64_t at, bool *reaches, dlqb_error *err) {
  *reaches = false;
  dlqb_link *link = NULL;
  dlqb_status st = dlqb_link_open(broker, "dlq-bridge catalog reader", &link, err);
  if (st != DLQB_OK) return st;
  amqp_connection_state_t conn = dlqb_link_conn(link);
  amqp_basic_qos(conn, DLQB_CHANNEL, 0, READ_PREFETCH, 0);
  st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), "set prefetch", err);
  amqp_table_entry_t arg = {
      .key = amqp_cstring_bytes(DLQB_H_STREAM_OFFSET),
      .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("last")}};
  amqp_table_t args = {1, &arg};
  char what[160];
  snprintf(what, sizeof what, "read the end of the catalog '%s'", stream);
  if (st == DLQB_OK) {
    amqp_basic_consume(conn, DLQB_CHANNEL, dlqb_bytes(stream), dlqb_bytes("dlqb-catalog-end"), 0, 0,
                       0, args);
    st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), what, err);
  }
  bool got = false;
  size_t since_ack = 0;
  char text[DLQB_CATALOG_MARKER_MAX];
  while (st == DLQB_OK) {
    amqp_envelope_t env;
    /* Once the broker delivers, the rest of the chunk follows at once. */
    long wait_ms = got ? READ_IDLE_MS / 10 : READ_IDLE_MS;
    st = next_delivery(link, stream, what, wait_ms, &env, err);
    if (st == DLQB_ETIMEOUT) {
      st = got ? DLQB_OK
               : dlqb_fail(err, DLQB_ETIMEOUT, "catalog '%s': nothing read from its end for %ld ms",
                           stream, wait_ms);
      break; /* the tail, short of at */
    }
    if (st != DLQB_OK) break;
    got = true;
    const amqp_basic_properties_t *props = &env.message.properties;
    int64_t offset = stream_offset(props);
    bool ours =
        header_text(props, DLQB_H_CATALOG_MARKER, text, sizeof text) && strcmp(text, marker) == 0;
    uint64_t tag = env.delivery_tag;
    amqp_destroy_envelope(&env);
    if (offset >= at) {
      *reaches = true;
      break;
    }
    if (ours) break;
    st = ack_now_and_then(link, tag, &since_ack, err);
  }
  dlqb__catalog_end_link(link, st);
  return st;
}

static dlqb_status read_stream(dlqb_catalog_reader *r, dlqb_link *link, read_span *sp,
                               dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  amqp_basic_qos(conn, DLQB_CHANNEL, 0, READ_PREFETCH, 0);
  dlqb_status st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), "set prefetch", err);
  if (st != DLQB_OK) return st;
  amqp_table_entry_t arg = {.key = amqp_cstring_bytes(DLQB_H_STREAM_OFFSET)};
  if (sp->resume) {
    arg.value.kind = AMQP_FIELD_KIND_I64;
    arg.value.value.i64 = r->mark.offset;
  } else {
    arg.value.kind = AMQP_FIELD_KIND_UTF8;
    arg.value.value.bytes = amqp_cstring_bytes("first");
  }
  amqp_table_t args = {1, &arg};
  char what[160];
  snprintf(what, sizeof what, "read the catalog '%s'", r->t.stream);
  amqp_basic_consume(conn, DLQB_CHANNEL, dlqb_bytes(r->t.stream), dlqb_bytes("dlqb-catalog"), 0, 0,
                     0, args);
  st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), what, err);
  if (st != DLQB_OK) return st;
  dlqb_item *it = malloc(sizeof *it);
  if (it == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  bool resumed = !sp->resume;
  bool checked = false; /* the stream reaches the mark's offset */
  size_t since_ack = 0;
  char text[DLQB_CATALOG_MARKER_MAX];
  for (;;) {
    amqp_envelope_t env;
    long wait_ms = resumed || checked ? READ_IDLE_MS : READ_IDLE_MS / 10;
    st = next_delivery(link, r->t.stream, what, wait_ms, &env, err);
    if (st == DLQB_ETIMEOUT) {
      st = DLQB_OK;
      if (!resumed && !checked) {
        /* Nothing yet from the mark's offset: a broker slow to deliver,
         * or an offset past the stream's end (a stream declared again,
         * shorter), where a consumer waits for what may never come. The
         * stream's end tells them apart. */
        bool reaches;
        st = stream_reaches(sp->broker, r->t.stream, sp->marker, r->mark.offset, &reaches, err);
        if (st != DLQB_OK) break;
        if (!reaches) {
          sp->stale = true;
          break;
        }
        checked = true;
        continue;
      }
      if (!resumed) {
        sp->stale = true;
        break;
      }
      st = dlqb_fail(err, DLQB_ETIMEOUT,
                     "catalog '%s': read %llu events, then nothing for %ld ms before its end",
                     r->t.stream, (unsigned long long)sp->events, wait_ms);
      break;
    }
    if (st != DLQB_OK) break;
    const amqp_basic_properties_t *props = &env.message.properties;
    int64_t offset = stream_offset(props);
    bool is_ours = header_text(props, DLQB_H_CATALOG_MARKER, text, sizeof text);
    bool done = false;
    if (!resumed) {
      /* The broker starts at the chunk holding the offset: events before
       * it come first; then the mark's own marker must. */
      if (offset < 0 || offset >= r->mark.offset) {
        resumed = offset == r->mark.offset && is_ours && strcmp(text, r->mark.marker) == 0;
        if (!resumed) {
          sp->stale = true;
          done = true;
        }
      }
    } else if (is_ours && strcmp(text, sp->marker) == 0) {
      sp->end_offset = offset;
      done = true;
    } else if (!is_ours) {
      sp->events++;
      dlqb_catalog_snapfind_feed(&r->find, offset, props, env.message.body);
      st = fold(r, props, it, err);
    }
    uint64_t tag = env.delivery_tag;
    amqp_destroy_envelope(&env);
    if (done || st != DLQB_OK) break;
    st = ack_now_and_then(link, tag, &since_ack, err);
    if (st != DLQB_OK) break;
  }
  free(it);
  return st;
}

static void take_checkpoint(dlqb_catalog_reader *r) {
  r->checkpoint_tried = true;
  if (r->checkpoint[0] == '\0') return;
  char *buf = NULL;
  size_t cap = 0, len = 0;
  if (!dlqb_read_file(r->checkpoint, &buf, &cap, &len) || len == 0) {
    free(buf);
    return;
  }
  char ident[IDENT_MAX];
  ident_of(&r->t, ident, sizeof ident);
  dlqb_error why;
  if (dlqb_catalog_decode_take(r->c, buf, len, ident, &r->mark, &why) == DLQB_OK) {
    buf = NULL; /* the fold's now */
    r->have_mark = true;
    r->from_checkpoint = true;
    r->since_checkpoint = 0;
  } else {
    dlqb_log_warn("catalog_checkpoint", "%s: %s; folding the catalog from its first event",
                  r->checkpoint, why.msg);
  }
  free(buf);
}

static void save_checkpoint(dlqb_catalog_reader *r) {
  if (r->checkpoint[0] == '\0' || !r->have_mark) return;
  size_t entries = dlqb_catalog_entries(r->c);
  if (r->since_checkpoint < CHECKPOINT_EVENTS && r->since_checkpoint * 20 < entries) return;
  char ident[IDENT_MAX];
  ident_of(&r->t, ident, sizeof ident);
  char *buf = NULL;
  size_t len = 0;
  dlqb_error why;
  dlqb_status st = dlqb_catalog_encode(r->c, &r->mark, ident, &buf, &len, &why);
  if (st == DLQB_OK)
    st = dlqb_file_replace(r->checkpoint, buf, len, "the catalog checkpoint", &why);
  free(buf);
  if (st == DLQB_OK) r->since_checkpoint = 0;
  else dlqb_log_warn("catalog_checkpoint", "%s; the next look folds from the last one", why.msg);
}

/* ---- the broker as a whole fold's source ---------------------------------- */

typedef struct {
  const dlqb_broker_conf *broker;
  const char *stream;
  const char *marker; /* the end */
  int64_t end_offset; /* out: the marker's offset */
} broker_src;

static dlqb_status broker_read(void *src, int64_t from, dlqb_catalog_msg_fn fn, void *ctx,
                               int64_t *first, dlqb_error *err) {
  broker_src *b = src;
  *first = -1;
  dlqb_link *link = NULL;
  dlqb_status st = dlqb_link_open(b->broker, "dlq-bridge catalog reader", &link, err);
  if (st != DLQB_OK) return st;
  amqp_connection_state_t conn = dlqb_link_conn(link);
  amqp_basic_qos(conn, DLQB_CHANNEL, 0, READ_PREFETCH, 0);
  st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), "set prefetch", err);
  amqp_table_entry_t arg = {.key = amqp_cstring_bytes(DLQB_H_STREAM_OFFSET)};
  if (from >= 0) {
    arg.value.kind = AMQP_FIELD_KIND_I64;
    arg.value.value.i64 = from;
  } else {
    arg.value.kind = AMQP_FIELD_KIND_UTF8;
    arg.value.value.bytes = amqp_cstring_bytes("first");
  }
  amqp_table_t args = {1, &arg};
  char what[160];
  snprintf(what, sizeof what, "read the catalog '%s'", b->stream);
  if (st == DLQB_OK) {
    amqp_basic_consume(conn, DLQB_CHANNEL, dlqb_bytes(b->stream), dlqb_bytes("dlqb-catalog"), 0, 0,
                       0, args);
    st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), what, err);
  }
  size_t since_ack = 0;
  uint64_t read = 0;
  char text[DLQB_CATALOG_MARKER_MAX];
  while (st == DLQB_OK) {
    amqp_envelope_t env;
    st = next_delivery(link, b->stream, what, READ_IDLE_MS, &env, err);
    if (st == DLQB_ETIMEOUT)
      st = dlqb_fail(err, DLQB_ETIMEOUT,
                     "catalog '%s': read %llu messages, then nothing for %d ms before its end",
                     b->stream, (unsigned long long)read, READ_IDLE_MS);
    if (st != DLQB_OK) break;
    const amqp_basic_properties_t *props = &env.message.properties;
    int64_t offset = stream_offset(props);
    if (*first < 0) *first = offset;
    bool stop = false;
    read++;
    if (header_text(props, DLQB_H_CATALOG_MARKER, text, sizeof text) &&
        strcmp(text, b->marker) == 0) {
      b->end_offset = offset;
      stop = true;
    } else if (offset >= 0) {
      st = fn(ctx, offset, props, env.message.body, &stop, err);
    }
    uint64_t tag = env.delivery_tag;
    amqp_destroy_envelope(&env);
    if (stop || st != DLQB_OK) break;
    st = ack_now_and_then(link, tag, &since_ack, err);
  }
  dlqb__catalog_end_link(link, st);
  return st;
}

/* Folds the stream whole, up to marker (published and confirmed): from
 * its first event, or from its newest snapshot when retention cut it. */
static dlqb_status whole(dlqb_catalog_reader *r, const dlqb_broker_conf *broker, const char *marker,
                         read_span *sp, dlqb_error *err) {
  broker_src b = {.broker = broker, .stream = r->t.stream, .marker = marker, .end_offset = -1};
  dlqb_catalog_source src = {broker_read, &b};
  dlqb_catalog_whole w;
  r->have_mark = r->from_checkpoint = r->from_snapshot = r->cut = false;
  dlqb_status st = dlqb_catalog_fold_whole(r->c, &r->t, &src, &r->find, &w, err);
  sp->events = w.events;
  sp->end_offset = b.end_offset;
  if (st != DLQB_OK) return st;
  if (w.cut) {
    r->cut = true;
    r->cut_mark.offset = b.end_offset;
    snprintf(r->cut_mark.marker, sizeof r->cut_mark.marker, "%s", marker);
    return dlqb_fail(err, DLQB_EINVAL,
                     "the catalog stream '%s' was cut by retention (it now begins at offset "
                     "%lld) and holds no complete snapshot; run dlq-bridge catalog snapshot",
                     r->t.stream, (long long)w.first);
  }
  r->from_snapshot = w.from_snapshot;
  /* The items a snapshot gave count as folded for the checkpoint's
   * cadence: the next look starts from the checkpoint, not the snapshot. */
  if (w.from_snapshot)
    for (size_t q = 0; q < r->t.nqueues; q++) r->since_checkpoint += w.snap.items[q];
  return DLQB_OK;
}

/* Appends our marker on link and folds up to it. */
static dlqb_status refresh(dlqb_catalog_reader *r, const dlqb_broker_conf *broker, dlqb_link **link,
                           uint64_t *events, dlqb_error *err) {
  if (!r->checkpoint_tried && !r->have_mark) take_checkpoint(r);
  char marker[DLQB_CATALOG_MARKER_MAX];
  make_marker(marker, sizeof marker);
  dlqb_catalog_event ev;
  event_base(&ev, "mark", "");
  ev.h[0] = str_entry(DLQB_H_CATALOG_MARKER, marker);
  ev.props.headers.num_entries = 1;
  dlqb_status st = publish_events(*link, r->t.stream, &ev, 1, err);
  if (st != DLQB_OK) return st;
  read_span sp = {.broker = broker, .marker = marker, .resume = r->have_mark, .end_offset = -1};
  uint64_t garbled = r->find.garbled;
  if (r->have_mark) {
    st = read_stream(r, *link, &sp, err);
    if (st == DLQB_OK && sp.stale) {
      /* The stream is not the one the fold came from (declared again, cut
       * by retention, another broker's): fold it whole. */
      dlqb_log_warn("catalog_checkpoint",
                    "the catalog fold does not match the stream '%s' (declared again, cut by "
                    "retention, or another broker's); folding it whole",
                    r->t.stream);
      dlqb_link_close(*link);
      *link = NULL;
      st = dlqb_link_open(broker, "dlq-bridge catalog reader", link, err);
      if (st == DLQB_OK) st = whole(r, broker, marker, &sp, err);
    }
  } else {
    st = whole(r, broker, marker, &sp, err);
  }
  if (r->find.garbled > garbled)
    dlqb_log_warn("catalog_garbled",
                  "catalog '%s': %llu messages at or after offset %lld are not well-formed "
                  "snapshot messages; ignored",
                  r->t.stream, (unsigned long long)(r->find.garbled - garbled),
                  (long long)r->find.garbled_at);
  if (st != DLQB_OK) {
    /* Whatever was folded of a broken read is not a fold up to a marker. */
    dlqb_catalog_clear(r->c);
    r->have_mark = false;
    return st;
  }
  r->mark.offset = sp.end_offset;
  snprintf(r->mark.marker, sizeof r->mark.marker, "%s", marker);
  r->have_mark = sp.end_offset >= 0;
  r->since_checkpoint += sp.events;
  *events = sp.events;
  save_checkpoint(r);
  return DLQB_OK;
}

/* Opens a link and checks the stream is there (DLQB_ENOTFOUND-like:
 * *missing). */
static dlqb_status open_checked(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                                dlqb_link **link, bool *missing, dlqb_error *err) {
  *missing = false;
  dlqb_status st = dlqb_link_open(broker, "dlq-bridge catalog reader", link, err);
  if (st != DLQB_OK) return st;
  st = dlqb_link_queue_depth(*link, r->t.stream, NULL, NULL, err);
  if (st == DLQB_EBROKER && dlqb_link_reply_code(*link) == DLQB_REPLY_NOT_FOUND) *missing = true;
  return st;
}

/* Opens a link and folds up to a marker of its own; with queue, reads its
 * depth into *before first (before the marker). */
dlqb_status dlqb__catalog_locked_refresh(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                                         const char *queue, uint32_t *before, dlqb_link **link,
                                         uint64_t *events, double *secs, dlqb_error *err) {
  long long t0 = dlqb_mono_ms();
  bool missing;
  dlqb_status st = open_checked(r, broker, link, &missing, err);
  if (st == DLQB_OK && queue != NULL) st = dlqb_link_queue_depth(*link, queue, before, NULL, err);
  if (st == DLQB_OK) st = refresh(r, broker, link, events, err);
  else if (missing)
    dlqb_fail(err, DLQB_EBROKER, "the catalog stream '%s' is not declared (run declare)",
              r->t.stream);
  *secs = (double)(dlqb_mono_ms() - t0) / 1000.0;
  return st;
}

/* Folds up to now and reads queue's depth into view: once before the
 * marker and once after the fold. The bridge's own moves in flight while
 * the look reads (a DLQ filling as the daemon routes, a replay draining
 * it) keep the catalog's count between the two (a copy is published after
 * its "in", an "out" right after its ack), so the count agrees when it is
 * anywhere from one depth to the other; a change behind the bridge's back
 * (an item taken with the management UI's Get, one published straight
 * into the queue) puts it outside while nothing else moves. */
static dlqb_status look_once(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                             const char *queue, int q, dlqb_catalog_view *view, dlqb_error *err) {
  dlqb_link *link = NULL;
  view->as_of_ms = dlqb_now_ms();
  uint64_t events = 0;
  double secs = 0;
  uint32_t before = 0, depth = 0;
  dlqb_status st =
      dlqb__catalog_locked_refresh(r, broker, queue, &before, &link, &events, &secs, err);
  view->events += events;
  view->read_seconds += secs;
  if (st == DLQB_OK) st = dlqb_link_queue_depth(link, queue, &depth, NULL, err);
  if (link != NULL) dlqb__catalog_end_link(link, st);
  if (st != DLQB_OK) return st;
  view->from_catalog = true;
  view->from_checkpoint = r->from_checkpoint;
  view->from_snapshot = r->from_snapshot;
  view->count = dlqb_catalog_count(r->c, q);
  view->depth = depth;
  uint64_t low = before < depth ? before : depth, high = before < depth ? depth : before;
  view->differs = view->count < low || view->count > high;
  view->unmatched = dlqb_catalog_unmatched(r->c, q);
  view->untrusted = dlqb_catalog_untrusted(r->c, q);
  const dlqb_catalog_qstate *s = dlqb_catalog_state(r->c, q);
  view->verified = s->verified;
  view->verified_at = s->verified_at;
  view->corrections = s->corrections;
  return DLQB_OK;
}

dlqb_status dlqb_catalog_look(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                              const char *queue, bool (*fn)(void *ctx, const dlqb_item *it),
                              void *ctx, dlqb_catalog_view *view, dlqb_error *err) {
  memset(view, 0, sizeof *view);
  int q = dlqb_catalog_queue(r->c, queue);
  if (q < 0) return dlqb_fail(err, DLQB_EINVAL, "the catalog does not cover '%s'", queue);
  pthread_mutex_lock(&r->lock);
  dlqb_status st = look_once(r, broker, queue, q, view, err);
  /* A move in flight (its "in" confirmed, its copy not yet; its ack sent,
   * its "out" not yet) differs for a moment: look once more. */
  if (st == DLQB_OK && view->differs) st = look_once(r, broker, queue, q, view, err);
  if (st == DLQB_OK && fn != NULL && !view->differs) dlqb_catalog_each(r->c, q, fn, ctx);
  pthread_mutex_unlock(&r->lock);
  return st;
}

dlqb_status dlqb_catalog_with(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                              void (*fn)(void *ctx, const dlqb_catalog *c), void *ctx,
                              dlqb_error *err) {
  pthread_mutex_lock(&r->lock);
  dlqb_link *link = NULL;
  uint64_t events = 0;
  double secs = 0;
  dlqb_status st = dlqb__catalog_locked_refresh(r, broker, NULL, NULL, &link, &events, &secs, err);
  if (link != NULL) dlqb__catalog_end_link(link, st);
  if (st == DLQB_OK) fn(ctx, r->c);
  pthread_mutex_unlock(&r->lock);
  return st;
}

/* ---- writing a snapshot ------------------------------------------------------ */

/* Chunks in flight before the writer waits for the confirms of the older
 * half: the broker's confirms are read as they come, not piled up. */
#define SNAP_WINDOW 32

typedef struct {
  dlqb_link *link;
  const char *stream;
  const char *queue;
  dlqb_catalog_snapinfo *info;
  uint64_t seq, seen;
} snap_write;

static void snap_headers(amqp_table_entry_t *h, const char *op, const dlqb_catalog_snapinfo *info,
                         int64_t chunk) {
  h[0] = str_entry(DLQB_H_CATALOG_OP, op);
  h[1] = str_entry(DLQB_H_CATALOG_SNAP, info->id);
  h[2] = (amqp_table_entry_t){.key = amqp_cstring_bytes(DLQB_H_CATALOG_SNAP_OF),
                              .value = {.kind = AMQP_FIELD_KIND_I64, .value.i64 = info->as_of}};
  h[3] = (amqp_table_entry_t){.key = amqp_cstring_bytes(DLQB_H_CATALOG_SNAP_CHUNK),
                              .value = {.kind = AMQP_FIELD_KIND_I64, .value.i64 = chunk}};
}

static dlqb_status snap_publish(snap_write *w, amqp_table_entry_t *h, int n, amqp_bytes_t body,
                                dlqb_error *err) {
  amqp_basic_properties_t props = {._flags =
                                       AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG,
                                   .delivery_mode = AMQP_DELIVERY_PERSISTENT,
                                   .headers = {n, h}};
  dlqb_status st = dlqb_catalog_send(w->link, DLQB_CHANNEL, w->stream, &props, body, err);
  if (st != DLQB_OK) return st;
  w->seq++;
  if (w->seq % SNAP_WINDOW != 0) return DLQB_OK;
  return await_upto(w->link, DLQB_CHANNEL, w->seq - SNAP_WINDOW / 2, &w->seen, w->stream,
                    CONFIRM_MS, err);
}

static dlqb_status emit_chunk(void *ctx, const unsigned char *body, size_t len, size_t items,
                              dlqb_error *err) {
  snap_write *w = ctx;
  amqp_table_entry_t h[6];
  snap_headers(h, "snap", w->info, (int64_t)w->info->chunks);
  h[4] = str_entry(DLQB_H_CATALOG_QUEUE, w->queue);
  h[5] = (amqp_table_entry_t){.key = amqp_cstring_bytes(DLQB_H_CATALOG_COUNT),
                              .value = {.kind = AMQP_FIELD_KIND_I64, .value.i64 = (int64_t)items}};
  dlqb_status st = snap_publish(w, h, 6, (amqp_bytes_t){len, (void *)body}, err);
  if (st == DLQB_OK) w->info->chunks++;
  return st;
}

/* Writes r's fold (as of r->mark) into the stream. Under r's lock. */
static dlqb_status write_snapshot(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                                  dlqb_catalog_snapinfo *info, dlqb_error *err) {
  memset(info, 0, sizeof *info);
  if (!r->have_mark) return dlqb_fail(err, DLQB_EINVAL, "the catalog was not read up to a marker");
  make_marker(info->id, sizeof info->id);
  info->as_of = r->mark.offset;
  info->first = info->end = -1;
  snap_write w = {.stream = r->t.stream, .info = info};
  dlqb_status st = dlqb_link_open(broker, "dlq-bridge catalog snapshot", &w.link, err);
  if (st != DLQB_OK) return st;
  st = dlqb_link_confirm_select(w.link, DLQB_CHANNEL, err);
  char totals[4096];
  size_t n = 0;
  for (size_t q = 0; st == DLQB_OK && q < r->t.nqueues; q++) {
    int cq = dlqb_catalog_queue(r->c, r->t.queues[q]);
    w.queue = r->t.queues[q];
    st = dlqb_catalog_chunks(r->c, cq, DLQB_CATALOG_CHUNK_ITEMS, emit_chunk, &w, err);
    const dlqb_catalog_qstate *qs = dlqb_catalog_state(r->c, cq);
    info->items[q] = dlqb_catalog_count(r->c, cq);
    info->unmatched[q] = dlqb_catalog_unmatched(r->c, cq);
    info->st[q] = *qs;
    int k = snprintf(totals + n, sizeof totals - n, "%llu %llu %d %lld %llu %llu %s\n",
                     (unsigned long long)info->items[q], (unsigned long long)info->unmatched[q],
                     qs->verified ? 1 : 0, (long long)qs->verified_at,
                     (unsigned long long)qs->verified_n, (unsigned long long)qs->corrections,
                     r->t.queues[q]);
    if (k < 0 || (size_t)k >= sizeof totals - n)
      st = dlqb_fail(err, DLQB_EINVAL, "the catalog's queue names are too long for a snapshot");
    else n += (size_t)k;
  }
  if (st == DLQB_OK) {
    amqp_table_entry_t h[4];
    snap_headers(h, "snap-end", info, (int64_t)info->chunks);
    st = snap_publish(&w, h, 4, (amqp_bytes_t){n, totals}, err);
  }
  if (st == DLQB_OK)
    st = await_upto(w.link, DLQB_CHANNEL, w.seq, &w.seen, r->t.stream, CONFIRM_MS, err);
  dlqb__catalog_end_link(w.link, st);
  return st;
}

dlqb_status dlqb_catalog_snapshot(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                                  dlqb_catalog_snapinfo *out, dlqb_error *err) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&r->lock);
  dlqb_link *link = NULL;
  uint64_t events = 0;
  double secs = 0;
  dlqb_status st = dlqb__catalog_locked_refresh(r, broker, NULL, NULL, &link, &events, &secs, err);
  if (link != NULL) dlqb__catalog_end_link(link, st);
  if (st == DLQB_OK) st = write_snapshot(r, broker, out, err);
  pthread_mutex_unlock(&r->lock);
  return st;
}

bool dlqb_catalog_reader_cut(const dlqb_catalog_reader *r) { return r->cut; }

void dlqb_catalog_reader_growth(dlqb_catalog_reader *r, uint64_t *since, uint64_t *items) {
  pthread_mutex_lock(&r->lock);
  int64_t base = r->find.have_best ? r->find.best.end : 0;
  *since = r->have_mark && r->mark.offset > base ? (uint64_t)(r->mark.offset - base) : 0;
  *items = 0;
  for (size_t q = 0; q < r->t.nqueues; q++) *items += dlqb_catalog_count(r->c, (int)q);
  pthread_mutex_unlock(&r->lock);
}

char *dlqb_catalog_view_text(const dlqb_catalog_view *v, char *buf, size_t len) {
  if (!v->from_catalog) {
    if (v->compared)
      snprintf(buf, len, "read the queue (--scan): %llu item%s; its catalog holds %llu%s",
               (unsigned long long)v->depth, v->depth == 1 ? "" : "s", (unsigned long long)v->count,
               v->differs ? " (differs: catalog verify corrects it)" : ", as the queue");
    else if (v->differs)
      snprintf(buf, len, "read the queue: catalog %llu, queue %llu (catalog verify corrects it)",
               (unsigned long long)v->count, (unsigned long long)v->depth);
    else if (v->why_scan[0]) snprintf(buf, len, "read the queue: no catalog (%s)", v->why_scan);
    else snprintf(buf, len, "read the queue (--scan)");
    return buf;
  }
  /* The time of day only (UTC, whole seconds): a look's own moment, and
   * the line fits 80 columns after "dlq-bridge: " at a million items. */
  char at[DLQB_ISO_TIME_MAX];
  dlqb_iso_time(v->as_of_ms, at, sizeof at);
  snprintf(buf, len, "catalog as of %.8sZ: %llu item%s, as the queue (%.1f s%s)",
           strlen(at) >= 19 ? at + 11 : at, (unsigned long long)v->count, v->count == 1 ? "" : "s",
           v->read_seconds, v->from_snapshot ? ", from a snapshot: the stream was cut" : "");
  return buf;
}

char *dlqb_catalog_untrusted_text(const dlqb_catalog_view *v, char *buf, size_t len) {
  if (v->untrusted == 0) return NULL;
  snprintf(buf, len, "ignored %llu catalog event%s not from catalog_writers",
           (unsigned long long)v->untrusted, v->untrusted == 1 ? "" : "s");
  return buf;
}

/* The completion ledger's reader: fills the set from the served pipeline's
 * completion stream (dsr.completed), from its start or from the cache's
 * marker (include/dlqb/ledger.h). An entry is keyed by the identity of
 * that pipeline's profile (dsr: request_id, source_system). */
#include "dlqb/ledger.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "dlqb/envelope.h"
#include "dlqb/item.h"
#include "dlqb/link.h"
#include "dlqb/log.h"

#define LEDGER_PREFETCH 1000
#define ACK_EVERY       250
/* The wait for the cache's marker: this fraction of the idle timeout. */
#define RESUME_WAIT_DIVISOR 5

/* The trimmed text of a string header (dlqb_header_id); false when absent,
 * not a string, or blank. */
static bool header_id(const amqp_basic_properties_t *p, const char *key, char *dst, size_t cap) {
  return (p->_flags & AMQP_BASIC_HEADERS_FLAG) && dlqb_header_id(&p->headers, key, dst, cap);
}

/* The profile of the pipeline cfg serves (its first; what a command that
 * serves one keeps), NULL without `pipelines`: the dsr identity. */
static const dlqb_profile *served_profile(const dlqb_config *cfg) {
  return cfg->pipeline_count > 0 ? &cfg->pipelines[0].p.profile : NULL;
}

/* True when the message is the marker with text `marker`. */
static bool is_marker(const amqp_basic_properties_t *p, const char *marker) {
  char text[DLQB_LEDGER_MARKER_MAX];
  return header_id(p, DLQB_H_LEDGER_MARKER, text, sizeof text) && strcmp(text, marker) == 0;
}

/* Appends a marker entry to the stream and waits for its confirm: every
 * completion confirmed before it is then at a lower offset, so reading up
 * to the marker reads the whole ledger as of now. (A stream's message count
 * from queue.declare lags behind recent appends, so it cannot tell where
 * the end is.) */
static dlqb_status append_marker(dlqb_link *link, const char *stream, const char *marker,
                                 long idle_ms, dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  dlqb_status st = dlqb_link_confirm_select(link, DLQB_CHANNEL, err);
  if (st != DLQB_OK) return st;
  amqp_table_entry_t h = {
      .key = amqp_cstring_bytes(DLQB_H_LEDGER_MARKER),
      .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes(marker)}};
  amqp_basic_properties_t props;
  memset(&props, 0, sizeof props);
  props._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_APP_ID_FLAG;
  props.headers = (amqp_table_t){1, &h};
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  props.app_id = amqp_cstring_bytes("dlq-bridge replay");
  int rc = amqp_basic_publish(conn, DLQB_CHANNEL, amqp_empty_bytes, dlqb_bytes(stream), 1, 0,
                              &props, amqp_empty_bytes);
  if (rc != AMQP_STATUS_OK) return dlqb_link_status(rc, "write the ledger marker", err);
  for (;;) {
    amqp_frame_t f;
    struct timeval tv = {idle_ms / 1000, (idle_ms % 1000) * 1000};
    rc = amqp_simple_wait_frame_noblock(conn, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT)
      return dlqb_fail(err, DLQB_ETIMEOUT,
                       "completion ledger '%s': no confirm for the marker "
                       "within %ld ms",
                       stream, idle_ms);
    if (rc != AMQP_STATUS_OK) return dlqb_link_status(rc, "write the ledger marker", err);
    if (f.frame_type != AMQP_FRAME_METHOD) continue;
    switch (f.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: return DLQB_OK;
    case AMQP_BASIC_NACK_METHOD:
      return dlqb_fail(err, DLQB_EBROKER, "completion ledger '%s' refused the marker", stream);
    case AMQP_BASIC_RETURN_METHOD:
      return dlqb_fail(err, DLQB_EBROKER, "completion ledger '%s' is not a queue here", stream);
    case AMQP_CHANNEL_CLOSE_METHOD:
    case AMQP_CONNECTION_CLOSE_METHOD:
      return dlqb_fail(err, DLQB_ECONN,
                       "broker closed the channel while writing the ledger "
                       "marker (no write permission on '%s'?)",
                       stream);
    default: continue;
    }
  }
}

/* The offset a stream delivery carries in its x-stream-offset header, or
 * -1 when it has none. */
static int64_t stream_offset(const amqp_basic_properties_t *p) {
  int64_t offset;
  if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG) ||
      !dlqb_field_int(dlqb_header_find(&p->headers, DLQB_H_STREAM_OFFSET), &offset) || offset < 0)
    return -1;
  return offset;
}

/* True when the entry's user_id, which RabbitMQ refuses unless it is the
 * publishing connection's user, names a completion writer. Without one the
 * entry proves nothing: anyone with write on the default exchange can
 * append it. */
static bool from_writer(const dlqb_config *cfg, const amqp_basic_properties_t *p) {
  return (p->_flags & AMQP_BASIC_USER_ID_FLAG) &&
         dlqb_config_is_completion_writer(cfg, p->user_id.bytes, p->user_id.len);
}

/* When the entry says the task was completed: its AMQP timestamp
 * property (seconds), which the completion writer sets (docs/worker-guide.md);
 * the broker stamps no time of its own on a stream entry read over AMQP
 * 0-9-1 (measured: only x-stream-offset, on 3.10.8 and 4.0.5). A writer's
 * clock, as trusted as the writer whose user_id makes the entry count. */
static int64_t completed_at(const amqp_basic_properties_t *p) {
  /* Seconds past what ms can hold are no time at all. */
  if (!(p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) || p->timestamp > (uint64_t)(INT64_MAX / 1000 - 1))
    return DLQB_LEDGER_NO_TIME;
  return (int64_t)p->timestamp * 1000;
}

/* Where a read starts and what it found at its end. */
typedef struct {
  const dlqb_config *cfg;         /* its completion_writers */
  const dlqb_broker_conf *broker; /* whom a fresh connection logs in as */
  const dlqb_ledger_mark *from;   /* the cache's marker, or NULL: read from the first entry */
  const char *marker;             /* this run's marker: the end */
  int64_t end_offset;             /* out: this run's marker's offset, -1 if not told */
  bool until_quiet;               /* no marker (a dry run): the end is idle_ms without entries */
  bool stale;                     /* out: the entry at from->offset is not from->marker */
  dlqb_ledger *unverified;        /* NULL, or where the unverified entries' pairs go */
} read_span;

/* Reads the stream into l from span->from (or its first entry) up to
 * span->marker. With span->from, the entry at its offset must be its
 * marker, or the read stops at once with span->stale set (DLQB_OK). */
static dlqb_status read_stream(dlqb_link *link, const char *stream, read_span *span, dlqb_ledger *l,
                               long idle_ms, dlqb_ledger_stats *stats, dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  /* A stream consumer must set a prefetch and ack manually: acks are its
   * credit for more deliveries. */
  amqp_basic_qos(conn, DLQB_CHANNEL, 0, LEDGER_PREFETCH, 0);
  dlqb_status st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), "set prefetch", err);
  if (st != DLQB_OK) return st;
  amqp_table_entry_t arg = {.key = amqp_cstring_bytes(DLQB_H_STREAM_OFFSET)};
  if (span->from != NULL) {
    arg.value.kind = AMQP_FIELD_KIND_I64;
    arg.value.value.i64 = span->from->offset;
  } else {
    arg.value.kind = AMQP_FIELD_KIND_UTF8;
    arg.value.value.bytes = amqp_cstring_bytes("first");
  }
  amqp_table_t args = {1, &arg};
  char what[160];
  snprintf(what, sizeof what, "read the completion ledger '%s'", stream);
  amqp_basic_consume(conn, DLQB_CHANNEL, dlqb_bytes(stream), dlqb_bytes("dlqb-ledger"), 0, 0, 0,
                     args);
  st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), what, err);
  if (st != DLQB_OK) return st;

  char rid[DLQB_ID_MAX + 1], src[DLQB_ID_MAX + 1];
  size_t since_ack = 0;
  bool resumed = span->from == NULL; /* past the cache's marker */
  span->end_offset = -1;
  span->stale = false;
  for (;;) {
    amqp_maybe_release_buffers(conn);
    amqp_envelope_t env;
    /* Resuming from an offset past the stream's end (a stream declared
     * again and shorter) makes the broker wait for new entries, though
     * our new marker is already in it: no delivery soon means stale. */
    long wait_ms = resumed ? idle_ms : idle_ms / RESUME_WAIT_DIVISOR;
    struct timeval tv = {wait_ms / 1000, (wait_ms % 1000) * 1000};
    amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT &&
        !resumed) {
      span->stale = true;
      return DLQB_OK;
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT &&
        span->until_quiet)
      return DLQB_OK;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
      return dlqb_fail(err, DLQB_ETIMEOUT,
                       "completion ledger '%s': read %zu entries, then nothing for %ld ms "
                       "before reaching the end",
                       stream, stats->entries, idle_ms);
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
      /* A late confirm or another method frame: read and skip it. */
      amqp_frame_t f;
      if (amqp_simple_wait_frame(conn, &f) != AMQP_STATUS_OK)
        return dlqb_fail(err, DLQB_ECONN, "cannot read the completion ledger");
      continue;
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL) return dlqb_link_reply(link, r, what, err);
    const amqp_basic_properties_t *props = &env.message.properties;
    int64_t offset = stream_offset(props);
    if (!resumed) {
      /* The broker starts at the chunk holding the offset, so entries just
       * before it may come first; then the cache's own marker must. */
      if (offset < 0 || offset >= span->from->offset) {
        resumed = offset == span->from->offset && is_marker(props, span->from->marker);
        if (!resumed) {
          amqp_destroy_envelope(&env);
          span->stale = true;
          return DLQB_OK;
        }
      }
    } else if (span->marker != NULL && is_marker(props, span->marker)) {
      span->end_offset = offset;
      amqp_destroy_envelope(&env);
      return DLQB_OK;
    } else {
      stats->entries++;
      if (!(props->_flags & AMQP_BASIC_HEADERS_FLAG) ||
          !dlqb_identity_read(&props->headers, served_profile(span->cfg), rid, src, sizeof rid))
        stats->ignored++; /* our markers among them */
      else if (!from_writer(span->cfg, props)) {
        stats->unverified++;
        if (span->unverified != NULL) st = dlqb_ledger_add(span->unverified, rid, src, err);
      } else st = dlqb_ledger_add_at(l, rid, src, completed_at(props), err);
    }
    uint64_t tag = env.delivery_tag;
    amqp_destroy_envelope(&env);
    if (st != DLQB_OK) return st;
    if (++since_ack >= ACK_EVERY) {
      if (amqp_basic_ack(conn, DLQB_CHANNEL, tag, 1) != AMQP_STATUS_OK)
        return dlqb_fail(err, DLQB_ECONN, "cannot ack the completion ledger");
      since_ack = 0;
    }
  }
  return DLQB_OK;
}

/* Unique per run (pid, a nanosecond clock and random bits): a cache is
 * trusted only when the stream still holds its marker. */
static void make_marker(char *out, size_t cap) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  /* getrandom, not OpenSSL: a plain replay never loads OpenSSL otherwise
   * (its initialisation costs about 2 MiB of RSS). Uniqueness needs no
   * more than the kernel's pool; a failure leaves pid and clock. */
  unsigned char rnd[8] = {0};
  (void)getrandom(rnd, sizeof rnd, GRND_NONBLOCK);
  snprintf(out, cap, "%ld-%lld-%ld-%02x%02x%02x%02x%02x%02x%02x%02x", (long)getpid(),
           (long long)ts.tv_sec, ts.tv_nsec, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6],
           rnd[7]);
}

/* Closes the link after a read: cleanly when the connection is usable. */
static void end_link(dlqb_link *link, dlqb_status st) {
  /* Closing the channel ends the stream consumer; nothing to requeue. */
  if (st == DLQB_OK || st == DLQB_EBROKER || st == DLQB_ETIMEOUT) dlqb_link_close(link);
  else dlqb_link_abort(link);
}

/* Takes the set from the cache at path into l when there is a usable one;
 * sets *from and the stats. A cache that cannot be used is a warning. */
static bool take_cache(const char *path, const char *writers, dlqb_ledger *l,
                       dlqb_ledger_mark *from, dlqb_ledger_stats *stats) {
  bool found = false;
  dlqb_error why;
  if (dlqb_ledger_cache_read(path, writers, l, from, &found, &why) != DLQB_OK) {
    dlqb_log_warn("ledger_cache", "%s; reading the whole completion ledger", why.msg);
    dlqb_ledger_clear(l);
    stats->cache = DLQB_LEDGER_CACHE_REBUILT;
    return false;
  }
  stats->cache = found ? DLQB_LEDGER_CACHE_USED : DLQB_LEDGER_CACHE_CREATED;
  stats->cached = found ? dlqb_ledger_size(l) : 0;
  stats->unverified = found ? (size_t)from->unverified : 0;
  return found;
}

/* Reads the stream into l on *link, from the cache at cache_path when it
 * holds a usable set (NULL or "": no cache). A cache that turns out not to
 * be this stream's (deleted and declared again, cut by retention, another
 * broker's) says nothing about it: the stream is then read whole, on a
 * fresh connection (*link is replaced). */
static dlqb_status read_from_cache(const dlqb_config *cfg, dlqb_link **link, const char *stream,
                                   const char *cache_path, read_span *span, dlqb_ledger *l,
                                   long wait_ms, dlqb_ledger_stats *stats, dlqb_error *err) {
  dlqb_ledger_mark from;
  bool cached = cache_path != NULL && cache_path[0] != '\0';
  if (cached && take_cache(cache_path, cfg->ledger.completion_writers, l, &from, stats))
    span->from = &from;
  dlqb_status st = read_stream(*link, stream, span, l, wait_ms, stats, err);
  if (st == DLQB_OK && span->stale) {
    dlqb_log_warn("ledger_cache",
                  "the ledger cache '%s' does not match the stream '%s' "
                  "(declared again, cut by retention, or another broker's); reading the whole "
                  "completion ledger",
                  cache_path, stream);
    dlqb_ledger_clear(l);
    stats->cache = DLQB_LEDGER_CACHE_REBUILT;
    stats->cached = stats->entries = stats->ignored = stats->unverified = 0;
    dlqb_link_close(*link);
    *link = NULL;
    span->from = NULL;
    st = dlqb_link_open(span->broker, "dlq-bridge ledger reader", link, err);
    if (st == DLQB_OK) st = read_stream(*link, stream, span, l, wait_ms, stats, err);
  }
  span->from = NULL; /* from lives in this frame */
  return st;
}

/* dlqb_ledger_load, and with unverified (then without a cache: it holds
 * no unverified pairs) dlqb_ledger_load_split. */
static dlqb_status load(const dlqb_config *cfg, const dlqb_broker_conf *broker, const char *stream,
                        const char *cache_path, dlqb_ledger *l, dlqb_ledger *unverified,
                        long idle_ms, dlqb_ledger_stats *stats, dlqb_error *err) {
  memset(stats, 0, sizeof *stats);
  bool cached = cache_path != NULL && cache_path[0] != '\0';
  dlqb_link *link = NULL;
  broker = dlqb_config_broker(cfg, broker);
  dlqb_status st = dlqb_link_open(broker, "dlq-bridge ledger reader", &link, err);
  if (st != DLQB_OK) return st;
  char marker[DLQB_LEDGER_MARKER_MAX];
  make_marker(marker, sizeof marker);
  st = dlqb_link_queue_depth(link, stream, NULL, NULL, err);
  if (st == DLQB_OK) st = append_marker(link, stream, marker, idle_ms, err);
  /* Our marker is in the stream already, so a whole re-read on a fresh
   * connection ends at the same place. */
  read_span span = {.cfg = cfg, .broker = broker, .marker = marker, .unverified = unverified};
  if (st == DLQB_OK)
    st = read_from_cache(cfg, &link, stream, cache_path, &span, l, idle_ms, stats, err);
  if (link != NULL) end_link(link, st);
  if (st == DLQB_OK && cached && span.end_offset >= 0) {
    dlqb_ledger_mark to = {.offset = span.end_offset, .unverified = stats->unverified};
    snprintf(to.marker, sizeof to.marker, "%s", marker);
    dlqb_error why;
    if (dlqb_ledger_cache_write(cache_path, cfg->ledger.completion_writers, l, &to, &why) ==
        DLQB_OK)
      stats->cache_saved = true;
    else dlqb_log_warn("ledger_cache", "%s; the next replay reads the whole ledger", why.msg);
  }
  return st;
}

dlqb_status dlqb_ledger_load(const dlqb_config *cfg, const dlqb_broker_conf *broker,
                             const char *stream, const char *cache_path, dlqb_ledger *l,
                             long idle_ms, dlqb_ledger_stats *stats, dlqb_error *err) {
  return load(cfg, broker, stream, cache_path, l, NULL, idle_ms, stats, err);
}

dlqb_status dlqb_ledger_load_split(const dlqb_config *cfg, const char *stream, dlqb_ledger *l,
                                   dlqb_ledger *unverified, long idle_ms, dlqb_ledger_stats *stats,
                                   dlqb_error *err) {
  return load(cfg, NULL, stream, NULL, l, unverified, idle_ms, stats, err);
}

/* ---- without writing: dry runs (issue 19) ------------------------------- */

dlqb_status dlqb_ledger_peek(const dlqb_config *cfg, const dlqb_broker_conf *broker,
                             const char *stream, const char *cache_path, dlqb_ledger *l,
                             long quiet_ms, dlqb_ledger_stats *stats, dlqb_error *err) {
  memset(stats, 0, sizeof *stats);
  dlqb_link *link = NULL;
  broker = dlqb_config_broker(cfg, broker);
  dlqb_status st = dlqb_link_open(broker, "dlq-bridge ledger reader", &link, err);
  if (st != DLQB_OK) return st;
  st = dlqb_link_queue_depth(link, stream, NULL, NULL, err);
  read_span span = {.cfg = cfg, .broker = broker, .until_quiet = true};
  if (st == DLQB_OK)
    st = read_from_cache(cfg, &link, stream, cache_path, &span, l, quiet_ms, stats, err);
  if (link != NULL) end_link(link, st);
  return st;
}

/* The completion ledger: a set of (request_id, source_system) and its reader. */
#include "dlqb/ledger.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "dlqb/envelope.h"
#include "dlqb/link.h"
#include "dlqb/log.h"

#define LEDGER_PREFETCH 1000
#define ACK_EVERY 250

/* Open addressing over "request_id\0source_system" keys, power-of-two
 * capacity, at most half full. */
struct dlqb_ledger {
  char **slots;
  size_t cap, size;
};

static uint64_t hash_pair(const char *a, const char *b) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)a; *p; p++) h = (h ^ *p) * 1099511628211ULL;
  h = (h ^ 0xFFu) * 1099511628211ULL; /* separator: ("ab","c") != ("a","bc") */
  for (const unsigned char *p = (const unsigned char *)b; *p; p++) h = (h ^ *p) * 1099511628211ULL;
  return h;
}

static bool slot_is(const char *slot, const char *a, const char *b) {
  size_t la = strlen(a);
  return memcmp(slot, a, la + 1) == 0 && strcmp(slot + la + 1, b) == 0;
}

dlqb_ledger *dlqb_ledger_new(void) {
  dlqb_ledger *l = calloc(1, sizeof *l);
  if (l == NULL) return NULL;
  l->cap = 64;
  l->slots = calloc(l->cap, sizeof *l->slots);
  if (l->slots == NULL) {
    free(l);
    return NULL;
  }
  return l;
}

void dlqb_ledger_free(dlqb_ledger *l) {
  if (l == NULL) return;
  for (size_t i = 0; i < l->cap; i++) free(l->slots[i]);
  free(l->slots);
  free(l);
}

static size_t find_slot(char *const *slots, size_t cap, const char *a, const char *b) {
  size_t i = (size_t)hash_pair(a, b) & (cap - 1);
  while (slots[i] != NULL && !slot_is(slots[i], a, b)) i = (i + 1) & (cap - 1);
  return i;
}

static dlqb_status grow(dlqb_ledger *l, dlqb_error *err) {
  size_t cap = l->cap * 2;
  char **slots = calloc(cap, sizeof *slots);
  if (slots == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the completion ledger");
  for (size_t i = 0; i < l->cap; i++) {
    char *k = l->slots[i];
    if (k == NULL) continue;
    slots[find_slot(slots, cap, k, k + strlen(k) + 1)] = k;
  }
  free(l->slots);
  l->slots = slots;
  l->cap = cap;
  return DLQB_OK;
}

dlqb_status dlqb_ledger_add(dlqb_ledger *l, const char *request_id, const char *source_system,
                            dlqb_error *err) {
  if ((l->size + 1) * 2 > l->cap) {
    dlqb_status st = grow(l, err);
    if (st != DLQB_OK) return st;
  }
  size_t i = find_slot(l->slots, l->cap, request_id, source_system);
  if (l->slots[i] != NULL) return DLQB_OK;
  size_t la = strlen(request_id), lb = strlen(source_system);
  char *k = malloc(la + lb + 2);
  if (k == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the completion ledger");
  memcpy(k, request_id, la + 1);
  memcpy(k + la + 1, source_system, lb + 1);
  l->slots[i] = k;
  l->size++;
  return DLQB_OK;
}

bool dlqb_ledger_contains(const dlqb_ledger *l, const char *request_id,
                          const char *source_system) {
  return l->slots[find_slot(l->slots, l->cap, request_id, source_system)] != NULL;
}

size_t dlqb_ledger_size(const dlqb_ledger *l) { return l->size; }

/* ---- reader ----------------------------------------------------------- */

/* The trimmed text of a string header (dlqb_header_id); false when absent,
 * not a string, or blank. */
static bool header_id(const amqp_basic_properties_t *p, const char *key, char *dst, size_t cap) {
  return (p->_flags & AMQP_BASIC_HEADERS_FLAG) && dlqb_header_id(&p->headers, key, dst, cap);
}

#define MARKER_HEADER "x-dlqb-ledger-marker"

/* True when the message is the marker with text `marker`. */
static bool is_marker(const amqp_basic_properties_t *p, const char *marker) {
  char text[64];
  return header_id(p, MARKER_HEADER, text, sizeof text) && strcmp(text, marker) == 0;
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
  amqp_table_entry_t h = {.key = amqp_cstring_bytes(MARKER_HEADER),
                          .value = {.kind = AMQP_FIELD_KIND_UTF8,
                                    .value.bytes = amqp_cstring_bytes(marker)}};
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
      return dlqb_fail(err, DLQB_ETIMEOUT, "completion ledger '%s': no confirm for the marker "
                       "within %ld ms", stream, idle_ms);
    if (rc != AMQP_STATUS_OK) return dlqb_link_status(rc, "write the ledger marker", err);
    if (f.frame_type != AMQP_FRAME_METHOD) continue;
    switch (f.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD:
      return DLQB_OK;
    case AMQP_BASIC_NACK_METHOD:
      return dlqb_fail(err, DLQB_EBROKER, "completion ledger '%s' refused the marker", stream);
    case AMQP_BASIC_RETURN_METHOD:
      return dlqb_fail(err, DLQB_EBROKER, "completion ledger '%s' is not a queue here", stream);
    case AMQP_CHANNEL_CLOSE_METHOD:
    case AMQP_CONNECTION_CLOSE_METHOD:
      return dlqb_fail(err, DLQB_ECONN, "broker closed the channel while writing the ledger "
                       "marker (no write permission on '%s'?)", stream);
    default:
      continue;
    }
  }
}

static dlqb_status read_stream(dlqb_link *link, const char *stream, const char *marker,
                               dlqb_ledger *l, long idle_ms, dlqb_ledger_stats *stats,
                               dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  /* A stream consumer must set a prefetch and ack manually: acks are its
   * credit for more deliveries. */
  amqp_basic_qos(conn, DLQB_CHANNEL, 0, LEDGER_PREFETCH, 0);
  dlqb_status st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), "set prefetch", err);
  if (st != DLQB_OK) return st;
  amqp_table_entry_t arg = {.key = amqp_cstring_bytes("x-stream-offset"),
                            .value = {.kind = AMQP_FIELD_KIND_UTF8,
                                      .value.bytes = amqp_cstring_bytes("first")}};
  amqp_table_t args = {1, &arg};
  char what[160];
  snprintf(what, sizeof what, "read the completion ledger '%s'", stream);
  amqp_basic_consume(conn, DLQB_CHANNEL, dlqb_bytes(stream), dlqb_bytes("dlqb-ledger"), 0, 0, 0,
                     args);
  st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), what, err);
  if (st != DLQB_OK) return st;

  char rid[DLQB_ID_MAX + 1], src[DLQB_ID_MAX + 1];
  uint64_t unacked_tag = 0;
  size_t since_ack = 0;
  for (;;) {
    amqp_maybe_release_buffers(conn);
    amqp_envelope_t env;
    struct timeval tv = {idle_ms / 1000, (idle_ms % 1000) * 1000};
    amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        r.library_error == AMQP_STATUS_TIMEOUT)
      return dlqb_fail(err, DLQB_ETIMEOUT,
                       "completion ledger '%s': read %zu entries, then nothing for %ld ms "
                       "before reaching the end", stream, stats->entries, idle_ms);
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
      /* A late confirm or another method frame: read and skip it. */
      amqp_frame_t f;
      if (amqp_simple_wait_frame(conn, &f) != AMQP_STATUS_OK)
        return dlqb_fail(err, DLQB_ECONN, "cannot read the completion ledger");
      continue;
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL) return dlqb_link_reply(link, r, what, err);
    if (is_marker(&env.message.properties, marker)) {
      amqp_destroy_envelope(&env);
      return DLQB_OK;
    }
    stats->entries++;
    if (header_id(&env.message.properties, "request_id", rid, sizeof rid) &&
        header_id(&env.message.properties, "source_system", src, sizeof src)) {
      st = dlqb_ledger_add(l, rid, src, err);
    } else {
      stats->ignored++;
    }
    unacked_tag = env.delivery_tag;
    amqp_destroy_envelope(&env);
    if (st != DLQB_OK) return st;
    if (++since_ack >= ACK_EVERY) {
      if (amqp_basic_ack(conn, DLQB_CHANNEL, unacked_tag, 1) != AMQP_STATUS_OK)
        return dlqb_fail(err, DLQB_ECONN, "cannot ack the completion ledger");
      since_ack = 0;
    }
  }
  return DLQB_OK;
}

dlqb_status dlqb_ledger_load(const dlqb_config *cfg, const char *stream, dlqb_ledger *l,
                             long idle_ms, dlqb_ledger_stats *stats, dlqb_error *err) {
  memset(stats, 0, sizeof *stats);
  dlqb_link *link = NULL;
  dlqb_status st = dlqb_link_open(cfg, "dlq-bridge ledger reader", &link, err);
  if (st != DLQB_OK) return st;
  /* Unique per run: pid and a nanosecond clock. */
  char marker[64];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(marker, sizeof marker, "%ld-%lld-%ld", (long)getpid(), (long long)ts.tv_sec,
           ts.tv_nsec);
  st = dlqb_link_queue_depth(link, stream, NULL, NULL, err);
  if (st == DLQB_OK) st = append_marker(link, stream, marker, idle_ms, err);
  if (st == DLQB_OK) st = read_stream(link, stream, marker, l, idle_ms, stats, err);
  /* Closing the channel ends the stream consumer; nothing to requeue. */
  if (st == DLQB_OK || st == DLQB_EBROKER || st == DLQB_ETIMEOUT) dlqb_link_close(link);
  else dlqb_link_abort(link);
  return st;
}

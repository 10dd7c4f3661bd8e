/* Loading and draining deep queues fast: see bulk.h. */
#include "bulk.h"

#include <amqp.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#define BULK_CHANNEL   2
#define IN_FLIGHT      1000
#define CONFIRM_WAIT_S 30

amqp_bytes_t th_bytes(const char *s) {
  amqp_bytes_t b = {strlen(s), (void *)s};
  return b;
}

amqp_table_entry_t th_str_entry(const char *key, const char *value) {
  amqp_table_entry_t e;
  e.key = th_bytes(key);
  e.value.kind = AMQP_FIELD_KIND_UTF8;
  e.value.value.bytes = th_bytes(value);
  return e;
}

static amqp_table_entry_t int_entry(const char *key, int64_t value) {
  amqp_table_entry_t e;
  e.key = th_bytes(key);
  e.value.kind = AMQP_FIELD_KIND_I64;
  e.value.value.i64 = value;
  return e;
}

static int open_channel(amqp_connection_state_t conn, bool confirms) {
  if (amqp_channel_open(conn, BULK_CHANNEL) == NULL ||
      (confirms && amqp_confirm_select(conn, BULK_CHANNEL) == NULL)) {
    fprintf(stderr, "bulk: cannot open channel %d in confirm mode\n", BULK_CHANNEL);
    return -1;
  }
  return 0;
}

static void close_channel(amqp_connection_state_t conn) {
  amqp_channel_close(conn, BULK_CHANNEL, AMQP_REPLY_SUCCESS);
}

/* Reads frames until every publish up to `want` is confirmed. */
static int await_confirms(amqp_connection_state_t conn, uint64_t *confirmed, uint64_t want) {
  while (*confirmed < want) {
    amqp_frame_t f;
    struct timeval tv = {CONFIRM_WAIT_S, 0};
    int rc = amqp_simple_wait_frame_noblock(conn, &f, &tv);
    if (rc != AMQP_STATUS_OK) {
      fprintf(stderr, "bulk: waiting for confirms: %s\n", amqp_error_string2(rc));
      return -1;
    }
    if (f.frame_type != AMQP_FRAME_METHOD || f.channel != BULK_CHANNEL) continue;
    if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
      const amqp_basic_ack_t *a = f.payload.method.decoded;
      /* Confirms from one queue come in order: a single ack is the next. */
      *confirmed = a->multiple || a->delivery_tag > *confirmed ? a->delivery_tag : *confirmed;
    } else if (f.payload.method.id == AMQP_BASIC_NACK_METHOD ||
               f.payload.method.id == AMQP_BASIC_RETURN_METHOD) {
      fprintf(stderr, "bulk: the broker refused a publish\n");
      return -1;
    } else if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
      fprintf(stderr, "bulk: the broker closed the channel\n");
      return -1;
    }
    amqp_maybe_release_buffers_on_channel(conn, BULK_CHANNEL);
  }
  return 0;
}

int th_bulk_publish_dlq(th_conn *c, const char *queue, size_t n,
                        void (*fill)(void *ctx, size_t i, th_bulk_item *item), void *ctx) {
  amqp_connection_state_t conn = th_conn_amqp(c);
  if (open_channel(conn, true) != 0) return -1;
  uint64_t confirmed = 0;
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    th_bulk_item it;
    memset(&it, 0, sizeof it);
    fill(ctx, i, &it);
    char dlq_at[48];
    th_iso_time(it.dlq_at_ms, dlq_at, sizeof dlq_at);
    amqp_table_entry_t h[] = {
        th_str_entry("request_id", it.id),
        th_str_entry("source_system", it.source_system),
        th_str_entry("legal_basis", "gdpr_art_17"),
        th_str_entry("action", "deletion"),
        int_entry("attempt", 5),
        int_entry("max_attempts", 5),
        th_str_entry("first_seen_at", dlq_at),
        th_str_entry("last_error", it.last_error[0] ? it.last_error : "rejected by worker"),
        th_str_entry("dlq_reason", "max_attempts"),
        th_str_entry("dlq_at", dlq_at),
    };
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
    p.delivery_mode = 2;
    p.message_id = th_bytes(it.id);
    p.headers.num_entries = (int)(sizeof h / sizeof h[0]);
    p.headers.entries = h;
    if (amqp_basic_publish(conn, BULK_CHANNEL, amqp_empty_bytes, th_bytes(queue), 1, 0, &p,
                           th_bytes("{}")) != AMQP_STATUS_OK) {
      fprintf(stderr, "bulk: publish %zu failed\n", i);
      rc = -1;
    } else if (i + 1 - confirmed >= IN_FLIGHT) {
      /* A full window: wait until half of it is confirmed. */
      rc = await_confirms(conn, &confirmed, i + 1 - IN_FLIGHT / 2);
    }
  }
  if (rc == 0) rc = await_confirms(conn, &confirmed, n);
  close_channel(conn);
  return rc;
}

long th_bulk_drain(th_conn *c, const char *queue, int idle_ms,
                   void (*visit)(void *ctx, const char *request_id), void *ctx) {
  amqp_connection_state_t conn = th_conn_amqp(c);
  if (open_channel(conn, false) != 0) return -1;
  amqp_basic_qos(conn, BULK_CHANNEL, 0, IN_FLIGHT, 0);
  if (amqp_basic_consume(conn, BULK_CHANNEL, th_bytes(queue), amqp_empty_bytes, 0, 1, 0,
                         amqp_empty_table) == NULL) {
    fprintf(stderr, "bulk: cannot consume %s\n", queue);
    return -1;
  }
  long n = 0;
  int64_t quiet_since = 0;
  for (;;) {
    amqp_envelope_t env;
    struct timeval tv = {idle_ms / 1000, (idle_ms % 1000) * 1000};
    amqp_maybe_release_buffers(conn);
    amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT) {
      /* Quiet is not empty: a broker still taking back a deep pass's items
       * (the requeue of 70,000 under AddressSanitizer) stopped delivering
       * for over 2 s with 13,390 left. Go on while the queue holds some,
       * for a minute of quiet at most. */
      int64_t now = th_now_ms();
      if (quiet_since == 0) quiet_since = now;
      if (th_queue_depth(c, queue) > 0 && now - quiet_since < 60000) continue;
      break;
    }
    quiet_since = 0;
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
      fprintf(stderr, "bulk: draining %s failed after %ld messages\n", queue, n);
      return -1;
    }
    char id[128] = "";
    const amqp_table_t *t = &env.message.properties.headers;
    for (int i = 0; (env.message.properties._flags & AMQP_BASIC_HEADERS_FLAG) && i < t->num_entries;
         i++) {
      const amqp_table_entry_t *e = &t->entries[i];
      if (e->key.len == 10 && memcmp(e->key.bytes, "request_id", 10) == 0 &&
          e->value.kind == AMQP_FIELD_KIND_UTF8) {
        snprintf(id, sizeof id, "%.*s", (int)e->value.value.bytes.len,
                 (const char *)e->value.value.bytes.bytes);
      }
    }
    if (visit != NULL) visit(ctx, id);
    amqp_destroy_envelope(&env);
    n++;
  }
  close_channel(conn);
  return n;
}

int th_publish_props(th_conn *c, const char *exchange, const char *routing_key,
                     const amqp_basic_properties_t *props, amqp_bytes_t body) {
  amqp_connection_state_t conn = th_conn_amqp(c);
  if (open_channel(conn, true) != 0) return -1;
  uint64_t confirmed = 0;
  int rc = amqp_basic_publish(conn, BULK_CHANNEL, th_bytes(exchange), th_bytes(routing_key), 1, 0,
                              props, body) == AMQP_STATUS_OK
               ? await_confirms(conn, &confirmed, 1)
               : -1;
  if (rc != 0) fprintf(stderr, "bulk: publish with properties to '%s' failed\n", routing_key);
  close_channel(conn);
  return rc;
}

/* Loading and draining deep queues fast, for the broker tests of passes
 * over tens of thousands of items: publishes with many confirms in flight
 * (th_publish waits for each one) and a consumer that drains a queue in
 * order. Both use channel 2 of a th_conn. Same conventions as harness.h:
 * 0 or a count on success, -1 after one line on stderr. */
#ifndef DLQB_TEST_BULK_H
#define DLQB_TEST_BULK_H

#include <stddef.h>
#include <stdint.h>

#include "harness.h"

/* The bytes of s (not copied), and a header entry with a string value, for
 * building rabbitmq-c properties by hand. */
amqp_bytes_t th_bytes(const char *s);
amqp_table_entry_t th_str_entry(const char *key, const char *value);

/* One DLQ item as the bridge leaves it (request_id = message_id = id;
 * last_error "rejected by worker" unless set). */
typedef struct {
  char id[128];
  char source_system[256];
  int64_t dlq_at_ms;
  char last_error[501];
} th_bulk_item;

/* Publishes n DLQ items to queue (default exchange, persistent), item i as
 * fill(ctx, i, &item) describes it, and waits until the broker confirmed
 * them all. */
int th_bulk_publish_dlq(th_conn *c, const char *queue, size_t n,
                        void (*fill)(void *ctx, size_t i, th_bulk_item *item), void *ctx);

/* Takes every message off queue (a consumer with auto-ack) until it has
 * been quiet for idle_ms and is empty (a quiet queue that still holds some
 * is waited for, a minute at most), calling visit(ctx, request_id) for
 * each in the order the queue held them. Returns how many it took. */
long th_bulk_drain(th_conn *c, const char *queue, int idle_ms,
                   void (*visit)(void *ctx, const char *request_id), void *ctx);

/* Publishes one message with exactly these properties (th_msg cannot set
 * them all: user_id, or a header table near frame_max) through exchange,
 * mandatory, and waits for its confirm. */
int th_publish_props(th_conn *c, const char *exchange, const char *routing_key,
                     const amqp_basic_properties_t *props, amqp_bytes_t body);

#endif

/* The size on the wire of what the bridge publishes: a header table and a
 * content header frame (AMQP 0-9-1, section 4.2.6 and the field table
 * grammar), from the decoded values; and a delivery's identity from them. The broker accepts a content header
 * only in one frame of at most frame_max bytes; rabbitmq-c cannot send a
 * larger one, and a half-sent publish leaves the connection unusable. So
 * the pipe checks before it publishes (src/amqp/pipe.c). Pure. */
#ifndef DLQB_WIRE_H
#define DLQB_WIRE_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Type, channel, size and the end octet around every frame's payload. */
#define DLQB_WIRE_FRAME_OVERHEAD 8
/* Nesting beyond this cannot fit in any frame a broker sends (each level
 * costs at least 5 bytes of a 128 KiB frame): the size walk stops there. */
#define DLQB_WIRE_MAX_DEPTH 30000

/* Encoded size of t (its 4-byte length included); SIZE_MAX when a value
 * has an unknown kind or nests deeper than DLQB_WIRE_MAX_DEPTH. */
size_t dlqb_wire_table_size(const amqp_table_t *t);

/* Encoded size of a content header frame's payload carrying p (class,
 * weight, body size, flags and every property p sets); SIZE_MAX as above. */
size_t dlqb_wire_content_header_size(const amqp_basic_properties_t *p);

/* Whether a message with properties p can be published on a connection
 * whose negotiated frame_max is frame_max. */
bool dlqb_wire_fits(const amqp_basic_properties_t *p, size_t frame_max);

/* Headers the broker rewrites each time it delivers a message again (a
 * quorum queue's counts), so not part of what a message is. */
#define DLQB_WIRE_REDELIVERY_HEADERS                                                               \
  { "x-delivery-count", "x-acquired-count" }

/* How deep the identity walk goes: a task's headers nest a few levels (an
 * x-death array of tables is 3), and the walk recurses, on whatever thread
 * moves the message (the router's is the main thread, whose stack a unit
 * may set to 1 MiB; ASan's frames are larger still). A message nested
 * deeper has no identity: it is moved again like any unremembered one. */
#define DLQB_WIRE_IDENTITY_MAX_DEPTH 64

/* A message's identity as a consumer receives it, for telling a
 * redelivery of one message from another message (dlqb/memo.h): feeds fn,
 * in order, the bytes of every property p sets and of each header with its
 * value, each tagged and every variable part length-prefixed (so that two
 * different sets of properties never feed the same bytes), leaving out the
 * top-level DLQB_WIRE_REDELIVERY_HEADERS; the top-level headers go in key
 * order (a quorum queue sorts them when it delivers a message again), and
 * no headers and an empty table feed the same. Two deliveries of one
 * message feed the same bytes (the caller hashes them with the body).
 * False, having fed part, for a value of unknown kind, nested deeper than
 * DLQB_WIRE_IDENTITY_MAX_DEPTH, or no memory to sort the headers. */
typedef void (*dlqb_wire_feed)(void *ctx, const void *data, size_t len);
bool dlqb_wire_identity(const amqp_basic_properties_t *p, dlqb_wire_feed fn, void *ctx);

#endif

/* The size on the wire of what the bridge publishes: a header table and a
 * content header frame (AMQP 0-9-1, section 4.2.6 and the field table
 * grammar), from the decoded values. The broker accepts a content header
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

#endif

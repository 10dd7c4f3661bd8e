/* The ack ring: which original deliveries may be acked, and how, on a
 * confirm-before-ack pipe. Pure (no I/O, no clock), so the rule the whole
 * product rests on is unit-tested through every order a broker can produce:
 *
 *   an original is acked only once the publish that carried it onward is
 *   confirmed (or nothing was published for it) and its audit record is
 *   durable; held deliveries are never acked; acks go out for the
 *   contiguous settled prefix, as one `multiple` ack when that reaches no
 *   held tag, else one ack per entry.
 *
 * The ring holds the deliveries that will be acked but are not yet, in
 * delivery order. A pass may consume on several channels of one connection,
 * one after the other (a channel's deliveries all come before the next
 * channel's: the pipe starts the next consumer only once the last one's
 * cancel-ok has come), so delivery order is (channel, delivery tag)
 * ascending, the channel numbers ascending in the order they were used, and
 * each entry is acked on the channel that delivered it. Each entry is
 *   PUBLISHED  republished, waiting for its confirm,
 *   SETTLED    confirmed, or settled with nothing published (resolve, skip).
 * Held deliveries (left unacked on purpose: they return to the queue, in
 * place, when the channel closes) take no slot: the ring only counts them
 * and remembers the lowest held tag, which no multiple ack may pass. So a
 * pass over a deep queue that holds most of it costs memory for what is in
 * flight, not for what it holds. A `multiple` ack names one channel: it is
 * planned only for a run delivered on one channel.
 *
 * The pipe (src/amqp/pipe.c) does the frame I/O around it: it pushes each
 * delivery as its handler settles it, feeds in the broker's confirms, hands
 * the ready prefix to the audit trail, and sends the acks a plan names.
 *
 * After dlqb_ackring_fail (a basic.nack or basic.return), no later confirm
 * is believed: a returned message is followed by its confirm, and acking
 * its original would lose it. What was settled before the failure may
 * still be acked. */
#ifndef DLQB_ACKRING_H
#define DLQB_ACKRING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"

typedef enum {
  DLQB_ACK_PUBLISHED, /* republished, waiting for its confirm */
  DLQB_ACK_SETTLED,   /* confirmed, or settled with nothing published */
  DLQB_ACK_HELD,      /* push only: left unacked on purpose, takes no slot */
  DLQB_ACK_RETURNED,  /* the broker returned its publish: waits for a decision */
  DLQB_ACK_DROPPED    /* returned and then held: never acked, like HELD */
} dlqb_ack_state;

typedef struct {
  uint64_t tag;     /* delivery tag of the original, on its channel */
  uint16_t channel; /* the channel that delivered it (its ack goes there) */
  uint64_t seq;     /* publish sequence number; 0 when nothing was published */
  uint64_t ticket;  /* the audit ticket covering its hop, once submitted */
  dlqb_ack_state state;
  bool rearmed; /* published again (dlqb_ackring_rearm): seq is outside seq_slot */
} dlqb_ack_entry;

typedef struct {
  dlqb_ack_entry *slots;
  unsigned char *payload; /* payload_size bytes per slot, moved with its entry */
  size_t payload_size;
  size_t cap, head, count;
  uint64_t held;         /* deliveries held (never acked), on every channel */
  uint16_t last_channel; /* the channel of the latest push, held or not */
  uint64_t last_tag;     /* the highest tag pushed on last_channel */
  size_t ready;          /* length of the prefix from head with no PUBLISHED entry */
  size_t submitted;      /* length of the prefix handed to the audit trail (<= ready) */
  /* The first delivery held, in delivery order (tag 0: none). Held
   * deliveries stay unacked at the broker, so a multiple ack must never
   * reach past it. */
  uint16_t first_held_channel;
  uint64_t first_held_tag;
  /* Publishes carry consecutive sequence numbers and leave the ring in
   * order, so the ones in the ring are consecutive and at most cap: seq %
   * cap names a unique slot, and a confirm finds its entry without a scan. */
  size_t *seq_slot;
  uint64_t next_seq;
  uint64_t confirmed_upto; /* every publish up to this one is confirmed */
  uint64_t last_ticket;    /* the ticket of the latest submission */
  size_t rearmed;          /* entries published again and not yet confirmed */
  bool failed;
} dlqb_ackring;

/* What to send for the durable prefix: its first `run` entries leave the
 * ring. When `multiple` is true one ack with multiple=1 up to
 * `multiple_tag` on `multiple_channel` covers them all; otherwise each
 * SETTLED one gets its own ack (dlqb_ackring_at(r, 0 .. run-1)->tag on its
 * ->channel; DROPPED ones get none). */
typedef struct {
  size_t run;
  bool multiple;
  uint16_t multiple_channel;
  uint64_t multiple_tag;
} dlqb_ack_plan;

/* Sets up a ring for cap in-flight deliveries (>= 1; it grows when more
 * arrive), each with payload_size bytes of the caller's data. */
dlqb_status dlqb_ackring_init(dlqb_ackring *r, size_t cap, size_t payload_size, dlqb_error *err);
void dlqb_ackring_release(dlqb_ackring *r);

/* The i-th entry from the head (i < count), and its payload, which moves
 * with it when the ring grows: valid until the next push. */
dlqb_ack_entry *dlqb_ackring_at(const dlqb_ackring *r, size_t i);
void *dlqb_ackring_payload_at(const dlqb_ackring *r, size_t i);

/* Pushes delivery tag of channel in the given state (PUBLISHED takes the
 * next publish sequence number). Returns the payload of its slot (held:
 * NULL, there is none), or NULL with *refused set when (channel, tag) does
 * not ascend or the ring cannot grow (out of memory). */
void *dlqb_ackring_push(dlqb_ackring *r, uint16_t channel, uint64_t tag, dlqb_ack_state state,
                        bool *refused);

/* A basic.ack from the broker for publish seq (multiple: every publish up
 * to it). Numbers never published, repeats and anything after
 * dlqb_ackring_fail are ignored. */
void dlqb_ackring_on_confirm(dlqb_ackring *r, uint64_t seq, bool multiple);

/* A basic.nack (or a return the pipe cannot place): no later confirm is
 * believed. */
void dlqb_ackring_fail(dlqb_ackring *r);

/* The index of the oldest PUBLISHED entry for which match(ctx, i) is true,
 * or (size_t)-1. The pipe finds a returned message's entry this way. */
size_t dlqb_ackring_find_published(const dlqb_ackring *r, bool (*match)(void *ctx, size_t i),
                                   void *ctx);

/* A basic.return for entry i's publish (it came back unroutable, and its
 * confirm follows): RETURNED, so that confirm is not believed, and the
 * prefix waits for the pipe's decision: */
void dlqb_ackring_return(dlqb_ackring *r, size_t i);
/* ... published again elsewhere: PUBLISHED under a new sequence number
 * (returned), which its next confirm settles; */
uint64_t dlqb_ackring_rearm(dlqb_ackring *r, size_t i);
/* ... or left in the queue: DROPPED, never acked, and no multiple ack
 * passes it. */
void dlqb_ackring_drop(dlqb_ackring *r, size_t i);

/* Entries [submitted, ready) are settled but not yet handed to the audit
 * trail: the caller submits their hops, then marks them with the ticket
 * that covers them. */
void dlqb_ackring_mark_submitted(dlqb_ackring *r, uint64_t ticket);

/* Plans the acks for the submitted prefix whose tickets are <= durable
 * (UINT64_MAX: no audit trail). False when nothing can be acked. */
bool dlqb_ackring_plan(const dlqb_ackring *r, uint64_t durable, dlqb_ack_plan *plan);

/* Shortens a plan to its first run entries (0 < run <= plan->run), so
 * that a further condition (the catalog's confirm) holds for each. */
void dlqb_ackring_plan_clip(const dlqb_ackring *r, dlqb_ack_plan *plan, size_t run);

/* Removes the plan's entries once its acks are sent. */
void dlqb_ackring_commit(dlqb_ackring *r, const dlqb_ack_plan *plan);

#endif

/* Unit tests for the ack ring (dlqb/ackring.h): the orders a broker can
 * produce, one by one, then random interleavings checked against a model
 * of the broker's unacked deliveries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlqb/ackring.h"

#define NO_AUDIT UINT64_MAX

/* The broker's side: which delivery tags are still unacked, and the acks
 * the ring's plans make it receive. */
#define MAX_TAGS 4096
typedef struct {
  bool outstanding[MAX_TAGS];
  bool acked[MAX_TAGS];
  int multiple_acks, single_acks;
} broker;

static void deliver(broker *b, uint64_t tag) { b->outstanding[tag] = true; }

/* Sends the ring's plan for `durable` to the broker model, asserting that
 * an ack never names a tag the broker does not hold unacked, then commits.
 * Returns how many deliveries the broker saw acked. */
static int flush(dlqb_ackring *r, broker *b, uint64_t durable) {
  dlqb_ack_plan plan;
  if (!dlqb_ackring_plan(r, durable, &plan)) return 0;
  int n = 0;
  if (plan.multiple) {
    assert_true(plan.multiple_tag < MAX_TAGS);
    for (uint64_t t = 1; t <= plan.multiple_tag; t++) {
      if (!b->outstanding[t]) continue;
      b->outstanding[t] = false;
      b->acked[t] = true;
      n++;
    }
    b->multiple_acks++;
  } else {
    for (size_t i = 0; i < plan.run; i++) {
      const dlqb_ack_entry *e = dlqb_ackring_at(r, i);
      if (e->state == DLQB_ACK_DROPPED) continue; /* left in the queue: no ack */
      assert_int_equal(e->state, DLQB_ACK_SETTLED);
      /* A single ack of a tag that is not outstanding is a channel error
       * (PRECONDITION_FAILED): acked twice. */
      assert_true(b->outstanding[e->tag]);
      b->outstanding[e->tag] = false;
      b->acked[e->tag] = true;
      b->single_acks++;
      n++;
    }
  }
  dlqb_ackring_commit(r, &plan);
  return n;
}

static dlqb_ackring ring_of(size_t cap) {
  dlqb_ackring r;
  dlqb_error err;
  assert_int_equal(dlqb_ackring_init(&r, cap, sizeof(uint64_t), &err), DLQB_OK);
  return r;
}

/* Pushes tag and stores it in its payload (held: there is none). */
static void push(dlqb_ackring *r, uint64_t tag, dlqb_ack_state state) {
  bool refused;
  uint64_t *p = dlqb_ackring_push(r, 1, tag, state, &refused);
  assert_false(refused);
  if (state == DLQB_ACK_HELD) {
    assert_null(p);
  } else {
    assert_non_null(p);
    assert_int_equal(*p, 0); /* a fresh slot's payload is zeroed */
    *p = tag;
  }
}

static void test_confirmed_prefix_only(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(8);
  broker b = {0};
  for (uint64_t t = 1; t <= 4; t++) {
    deliver(&b, t);
    push(&r, t, DLQB_ACK_PUBLISHED);
  }
  /* Confirms out of order: 2 and 4 first. Nothing is a prefix yet. */
  dlqb_ackring_on_confirm(&r, 2, false);
  dlqb_ackring_on_confirm(&r, 4, false);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 0);
  /* 1 arrives: 1 and 2 are the prefix; 3 still waits, so 4 does too. */
  dlqb_ackring_on_confirm(&r, 1, false);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 2);
  assert_true(b.acked[1] && b.acked[2] && !b.acked[3] && !b.acked[4]);
  assert_int_equal(b.multiple_acks, 1);
  dlqb_ackring_on_confirm(&r, 3, false);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 2);
  assert_int_equal(r.count, 0);
  dlqb_ackring_release(&r);
}

static void test_multiple_confirm_spanning_held_tags(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(8);
  broker b = {0};
  /* 1 published, 2 held, 3 published, 4 held, 5 published. */
  dlqb_ack_state s[] = {DLQB_ACK_PUBLISHED, DLQB_ACK_HELD, DLQB_ACK_PUBLISHED, DLQB_ACK_HELD,
                        DLQB_ACK_PUBLISHED};
  for (uint64_t t = 1; t <= 5; t++) {
    deliver(&b, t);
    push(&r, t, s[t - 1]);
  }
  /* One multiple confirm for all three publishes (seq 3 is tag 5). */
  dlqb_ackring_on_confirm(&r, 3, true);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 3);
  /* Held deliveries are never acked: single acks, not one multiple. */
  assert_false(b.acked[2] || b.acked[4]);
  assert_int_equal(b.multiple_acks, 0);
  assert_int_equal(b.single_acks, 3);
  dlqb_ackring_release(&r);
}

static void test_multiple_ack_never_passes_an_earlier_held_tag(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(4);
  broker b = {0};
  deliver(&b, 1);
  push(&r, 1, DLQB_ACK_HELD);
  /* A held delivery takes no slot and is never planned. */
  assert_int_equal(r.count, 0);
  assert_int_equal(r.held, 1);
  for (uint64_t t = 2; t <= 3; t++) {
    deliver(&b, t);
    push(&r, t, DLQB_ACK_SETTLED);
  }
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 2);
  /* A multiple ack up to 3 would have taken 1 with it. */
  assert_false(b.acked[1]);
  assert_true(b.outstanding[1]);
  assert_int_equal(b.multiple_acks, 0);
  dlqb_ackring_release(&r);
}

static void test_nack_in_the_middle(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(8);
  broker b = {0};
  for (uint64_t t = 1; t <= 3; t++) {
    deliver(&b, t);
    push(&r, t, DLQB_ACK_PUBLISHED);
  }
  dlqb_ackring_on_confirm(&r, 1, false);
  dlqb_ackring_fail(&r); /* basic.nack for 2 */
  dlqb_ackring_on_confirm(&r, 3, true);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 1);
  assert_true(b.acked[1]);
  assert_false(b.acked[2] || b.acked[3]);
  dlqb_ackring_release(&r);
}

static void test_return_before_its_confirm(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(4);
  broker b = {0};
  deliver(&b, 1);
  push(&r, 1, DLQB_ACK_PUBLISHED);
  dlqb_ackring_fail(&r);                 /* basic.return: unroutable */
  dlqb_ackring_on_confirm(&r, 1, false); /* the confirm that follows it */
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 0);
  assert_false(b.acked[1]);
  dlqb_ackring_release(&r);
}

static void test_reconnect_starts_a_new_sequence(void **state) {
  (void)state;
  /* A reconnect means a new channel: new delivery tags and publish numbers
   * from 1, in a new ring. Confirms of the old channel never reach it. */
  dlqb_ackring r = ring_of(4);
  push(&r, 1, DLQB_ACK_PUBLISHED);
  dlqb_ackring_release(&r);
  r = ring_of(4);
  broker b = {0};
  deliver(&b, 1);
  push(&r, 1, DLQB_ACK_PUBLISHED);
  assert_int_equal(dlqb_ackring_at(&r, 0)->seq, 1);
  dlqb_ackring_on_confirm(&r, 2, false); /* never published on this channel */
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 0);
  dlqb_ackring_on_confirm(&r, 1, false);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 1);
  dlqb_ackring_release(&r);
}

static void test_a_deep_hold_takes_no_memory(void **state) {
  (void)state;
  /* A pass that holds a million items and moves one keeps one slot. */
  dlqb_ackring r = ring_of(4);
  for (uint64_t t = 1; t <= 1000000; t++) push(&r, t, DLQB_ACK_HELD);
  assert_int_equal(r.held, 1000000);
  assert_int_equal(r.count, 0);
  assert_int_equal(r.cap, 4);
  push(&r, 1000001, DLQB_ACK_SETTLED);
  dlqb_ackring_mark_submitted(&r, 0);
  dlqb_ack_plan plan;
  assert_true(dlqb_ackring_plan(&r, NO_AUDIT, &plan));
  assert_int_equal(plan.run, 1);
  assert_false(plan.multiple); /* it would take every held one with it */
  dlqb_ackring_release(&r);
}

static void test_grows_past_its_first_size_keeping_order_and_confirms(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(2);
  broker b = {0};
  /* Wrap the ring first, so growth has to unroll it. */
  deliver(&b, 1);
  push(&r, 1, DLQB_ACK_SETTLED);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 1);
  for (uint64_t t = 2; t <= 40; t++) {
    deliver(&b, t);
    push(&r, t, t % 3 == 0 ? DLQB_ACK_SETTLED : DLQB_ACK_PUBLISHED);
  }
  assert_true(r.cap >= 39);
  for (size_t i = 0; i < r.count; i++) {
    assert_int_equal(dlqb_ackring_at(&r, i)->tag, i + 2);
    assert_int_equal(*(uint64_t *)dlqb_ackring_payload_at(&r, i), i + 2);
  }
  /* Confirms, newest first, still find their entries after the moves. */
  for (uint64_t seq = r.next_seq; seq >= 1; seq--) dlqb_ackring_on_confirm(&r, seq, false);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 39);
  for (uint64_t t = 1; t <= 40; t++) assert_true(b.acked[t]);
  dlqb_ackring_release(&r);
}

static void test_tags_must_ascend(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(4);
  bool refused;
  push(&r, 5, DLQB_ACK_SETTLED);
  assert_null(dlqb_ackring_push(&r, 1, 5, DLQB_ACK_SETTLED, &refused));
  assert_true(refused);
  assert_null(dlqb_ackring_push(&r, 1, 3, DLQB_ACK_HELD, &refused));
  assert_true(refused);
  push(&r, 6, DLQB_ACK_HELD);
  assert_null(dlqb_ackring_push(&r, 1, 6, DLQB_ACK_SETTLED, &refused));
  assert_true(refused);
  dlqb_ackring_release(&r);
}

/* A pass over several channels: each entry is acked on the channel that
 * delivered it, a multiple ack never spans two channels, and none passes a
 * held delivery of an earlier channel. */
static void push_on(dlqb_ackring *r, uint16_t channel, uint64_t tag, dlqb_ack_state state) {
  bool refused;
  (void)dlqb_ackring_push(r, channel, tag, state, &refused);
  assert_false(refused);
}

static void test_channels_ack_where_delivered(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(2); /* grows */
  bool refused;
  push_on(&r, 1, 1, DLQB_ACK_SETTLED);
  push_on(&r, 1, 2, DLQB_ACK_SETTLED);
  push_on(&r, 1, 3, DLQB_ACK_HELD);
  /* Held before: the settled prefix on channel 1 still goes as one. */
  dlqb_ackring_mark_submitted(&r, 0);
  dlqb_ack_plan plan;
  assert_true(dlqb_ackring_plan(&r, NO_AUDIT, &plan));
  assert_int_equal(plan.run, 2);
  assert_true(plan.multiple);
  assert_int_equal(plan.multiple_channel, 1);
  assert_int_equal(plan.multiple_tag, 2);
  dlqb_ackring_commit(&r, &plan);
  /* Channel 1 again, then channel 3 from tag 1 on. */
  push_on(&r, 1, 4, DLQB_ACK_PUBLISHED);
  push_on(&r, 3, 1, DLQB_ACK_SETTLED);
  push_on(&r, 3, 2, DLQB_ACK_HELD);
  push_on(&r, 3, 3, DLQB_ACK_PUBLISHED);
  /* A channel used before takes no more. */
  assert_null(dlqb_ackring_push(&r, 1, 5, DLQB_ACK_SETTLED, &refused));
  assert_true(refused);
  dlqb_ackring_on_confirm(&r, 2, true);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_true(dlqb_ackring_plan(&r, NO_AUDIT, &plan));
  assert_int_equal(plan.run, 3);
  assert_false(plan.multiple);
  uint16_t want_ch[] = {1, 3, 3};
  uint64_t want_tag[] = {4, 1, 3};
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(dlqb_ackring_at(&r, i)->channel, want_ch[i]);
    assert_int_equal(dlqb_ackring_at(&r, i)->tag, want_tag[i]);
  }
  dlqb_ackring_commit(&r, &plan);
  assert_int_equal(r.count, 0);
  assert_int_equal(r.held, 2);
  dlqb_ackring_release(&r);

  /* Nothing held at all: a run over two channels is still one ack each. */
  r = ring_of(4);
  push_on(&r, 1, 1, DLQB_ACK_SETTLED);
  push_on(&r, 3, 1, DLQB_ACK_SETTLED);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_true(dlqb_ackring_plan(&r, NO_AUDIT, &plan));
  assert_int_equal(plan.run, 2);
  assert_false(plan.multiple);
  dlqb_ackring_commit(&r, &plan);
  /* Then only channel 3: one multiple ack there. */
  push_on(&r, 3, 2, DLQB_ACK_SETTLED);
  push_on(&r, 3, 3, DLQB_ACK_SETTLED);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_true(dlqb_ackring_plan(&r, NO_AUDIT, &plan));
  assert_true(plan.multiple);
  assert_int_equal(plan.multiple_channel, 3);
  assert_int_equal(plan.multiple_tag, 3);
  dlqb_ackring_release(&r);
}

/* A plan clipped to what the catalog has confirmed follows the same rule
 * as a whole one: it names the channel of its last entry, never channel 0
 * (a basic.ack on channel 0 closes the connection: "unexpected method in
 * connection state running", seen in escalate on RabbitMQ 4.0.5), and
 * never passes a held tag. */
static void test_a_clipped_plan_keeps_the_rule(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(8);
  dlqb_ack_plan plan;
  /* Two channels: one ack each; clipped to channel 1's entries: one
   * multiple ack on channel 1. */
  push_on(&r, 1, 1, DLQB_ACK_SETTLED);
  push_on(&r, 1, 2, DLQB_ACK_SETTLED);
  push_on(&r, 3, 1, DLQB_ACK_SETTLED);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_true(dlqb_ackring_plan(&r, NO_AUDIT, &plan));
  assert_false(plan.multiple);
  dlqb_ackring_plan_clip(&r, &plan, 2);
  assert_int_equal(plan.run, 2);
  assert_true(plan.multiple);
  assert_int_equal(plan.multiple_channel, 1);
  assert_int_equal(plan.multiple_tag, 2);
  dlqb_ackring_commit(&r, &plan);
  dlqb_ackring_release(&r);

  /* A held tag on channel 1 after the run on channel 3: the run on 3
   * comes after it, so no multiple, clipped or not. */
  r = ring_of(8);
  push_on(&r, 1, 1, DLQB_ACK_HELD);
  push_on(&r, 3, 1, DLQB_ACK_SETTLED);
  push_on(&r, 3, 2, DLQB_ACK_SETTLED);
  push_on(&r, 3, 3, DLQB_ACK_SETTLED);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_true(dlqb_ackring_plan(&r, NO_AUDIT, &plan));
  assert_false(plan.multiple);
  dlqb_ackring_plan_clip(&r, &plan, 2);
  assert_int_equal(plan.run, 2);
  assert_false(plan.multiple);
  dlqb_ackring_release(&r);
}

static void test_waits_for_the_audit_ticket(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(8);
  broker b = {0};
  deliver(&b, 1);
  push(&r, 1, DLQB_ACK_SETTLED);
  dlqb_ackring_mark_submitted(&r, 7);
  deliver(&b, 2);
  push(&r, 2, DLQB_ACK_SETTLED);
  dlqb_ackring_mark_submitted(&r, 8);
  /* Confirmed but not recorded: nothing is acked. */
  assert_int_equal(flush(&r, &b, 6), 0);
  assert_int_equal(flush(&r, &b, 7), 1);
  assert_true(b.acked[1] && !b.acked[2]);
  assert_int_equal(flush(&r, &b, 8), 1);
  dlqb_ackring_release(&r);
}

static void test_a_returned_publish_is_not_acked_by_its_confirm(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(4);
  broker b = {0};
  for (uint64_t t = 1; t <= 3; t++) {
    deliver(&b, t);
    push(&r, t, DLQB_ACK_PUBLISHED);
  }
  /* Publish 2 comes back: its confirm follows, and must not count. */
  dlqb_ackring_return(&r, 1);
  dlqb_ackring_on_confirm(&r, 3, true);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 1); /* 1 only: 2 waits, so 3 does */
  /* Published again elsewhere: its new confirm settles it. */
  uint64_t seq = dlqb_ackring_rearm(&r, 0);
  assert_int_equal(seq, 4);
  dlqb_ackring_on_confirm(&r, 2, false); /* the old number: not believed */
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 0);
  dlqb_ackring_on_confirm(&r, seq, false);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 2);
  assert_true(b.acked[1] && b.acked[2] && b.acked[3]);
  assert_int_equal(r.rearmed, 0);
  dlqb_ackring_release(&r);
}

static void test_a_dropped_return_stays_unacked(void **state) {
  (void)state;
  dlqb_ackring r = ring_of(4);
  broker b = {0};
  for (uint64_t t = 1; t <= 3; t++) {
    deliver(&b, t);
    push(&r, t, DLQB_ACK_PUBLISHED);
  }
  dlqb_ackring_return(&r, 1);
  dlqb_ackring_drop(&r, 1); /* left in the queue */
  dlqb_ackring_on_confirm(&r, 3, true);
  dlqb_ackring_mark_submitted(&r, 0);
  assert_int_equal(flush(&r, &b, NO_AUDIT), 2);
  assert_true(b.acked[1] && !b.acked[2] && b.acked[3]);
  assert_true(b.outstanding[2]);
  assert_int_equal(b.multiple_acks, 0); /* a multiple ack up to 3 would take 2 */
  assert_int_equal(r.count, 0);
  dlqb_ackring_release(&r);
}

/* xorshift64*: a fixed seed per round, so a failure can be replayed. */
static uint64_t rnd_state;
static uint64_t rnd(void) {
  rnd_state ^= rnd_state >> 12;
  rnd_state ^= rnd_state << 25;
  rnd_state ^= rnd_state >> 27;
  return rnd_state * 2685821657736338717ull;
}

/* Random interleavings of deliveries (published, settled or held),
 * confirms (single, multiple, repeated, out of order), a possible nack,
 * audit submissions and durability, checked against the broker model:
 * nothing unconfirmed or unrecorded is ever acked, nothing held is acked,
 * nothing is acked twice, and once everything is confirmed and durable
 * every settled delivery is acked. */
static void test_random_interleavings(void **state) {
  (void)state;
  for (uint64_t round = 0; round < 400; round++) {
    rnd_state = 0x9e3779b97f4a7c15ull ^ (round * 0x100000001b3ull) ^ 1;
    size_t cap = 1 + rnd() % 16;
    dlqb_ackring r = ring_of(cap);
    broker b = {0};
    dlqb_ack_state kind[MAX_TAGS] = {0};
    uint64_t seq_of_tag[MAX_TAGS] = {0};
    bool confirmed[MAX_TAGS] = {0}; /* by publish seq, as the broker sent it */
    uint64_t ticket_of_tag[MAX_TAGS] = {0};
    uint64_t next_tag = 1, next_seq = 1, next_ticket = 1, durable = 0;
    bool failed = false;
    bool audit = rnd() % 2 == 0;
    int steps = 200 + (int)(rnd() % 400);
    for (int step = 0; step < steps && next_tag < MAX_TAGS - 1; step++) {
      uint64_t op = rnd() % 10;
      if (op < 4) {
        uint64_t tag = next_tag++;
        dlqb_ack_state k = (dlqb_ack_state)(rnd() % 3);
        deliver(&b, tag);
        kind[tag] = k;
        push(&r, tag, k);
        if (k == DLQB_ACK_PUBLISHED) {
          seq_of_tag[tag] = next_seq++;
        }
      } else if (op < 7 && next_seq > 1) {
        /* A confirm for any publish so far, possibly a repeat; multiple
         * only where the broker could send it: every number up to it. */
        uint64_t seq = 1 + rnd() % (next_seq - 1);
        bool multiple = rnd() % 3 == 0;
        if (!failed) {
          if (multiple)
            for (uint64_t s = 1; s <= seq; s++) confirmed[s] = true;
          else confirmed[seq] = true;
        }
        dlqb_ackring_on_confirm(&r, seq, multiple);
      } else if (op == 7 && rnd() % 20 == 0) {
        failed = true;
        dlqb_ackring_fail(&r);
      } else if (op == 8) {
        uint64_t t = audit ? next_ticket++ : 0;
        for (size_t i = r.submitted; i < r.ready; i++)
          ticket_of_tag[dlqb_ackring_at(&r, i)->tag] = t;
        dlqb_ackring_mark_submitted(&r, t);
        if (audit && next_ticket > 1 && rnd() % 2) {
          /* The writer's durable ticket only grows. */
          uint64_t d = 1 + rnd() % (next_ticket - 1);
          if (d > durable) durable = d;
        }
      } else {
        flush(&r, &b, audit ? durable : NO_AUDIT);
      }
      /* The invariants, after every step. */
      for (uint64_t t = 1; t < next_tag; t++) {
        if (!b.acked[t]) continue;
        assert_int_not_equal(kind[t], DLQB_ACK_HELD);
        if (kind[t] == DLQB_ACK_PUBLISHED) assert_true(confirmed[seq_of_tag[t]]);
        if (audit) assert_true(ticket_of_tag[t] <= durable);
      }
    }
    /* Liveness: confirm everything, make everything durable, flush. */
    if (!failed) {
      dlqb_ackring_on_confirm(&r, next_seq - 1, true);
      dlqb_ackring_mark_submitted(&r, audit ? next_ticket : 0);
      flush(&r, &b, NO_AUDIT);
      assert_int_equal(r.count, 0);
      for (uint64_t t = 1; t < next_tag; t++)
        assert_int_equal(b.acked[t], kind[t] != DLQB_ACK_HELD);
    }
    dlqb_ackring_release(&r);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_confirmed_prefix_only),
      cmocka_unit_test(test_multiple_confirm_spanning_held_tags),
      cmocka_unit_test(test_multiple_ack_never_passes_an_earlier_held_tag),
      cmocka_unit_test(test_nack_in_the_middle),
      cmocka_unit_test(test_return_before_its_confirm),
      cmocka_unit_test(test_reconnect_starts_a_new_sequence),
      cmocka_unit_test(test_a_deep_hold_takes_no_memory),
      cmocka_unit_test(test_grows_past_its_first_size_keeping_order_and_confirms),
      cmocka_unit_test(test_tags_must_ascend),
      cmocka_unit_test(test_a_returned_publish_is_not_acked_by_its_confirm),
      cmocka_unit_test(test_a_dropped_return_stays_unacked),
      cmocka_unit_test(test_waits_for_the_audit_ticket),
      cmocka_unit_test(test_channels_ack_where_delivered),
      cmocka_unit_test(test_a_clipped_plan_keeps_the_rule),
      cmocka_unit_test(test_random_interleavings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The ack ring: which originals a confirm-before-ack pipe may ack, and how
 * (see dlqb/ackring.h). */
#include "dlqb/ackring.h"

#include <stdlib.h>
#include <string.h>

dlqb_status dlqb_ackring_init(dlqb_ackring *r, size_t cap, size_t payload_size, dlqb_error *err) {
  *r = (dlqb_ackring){0};
  r->cap = cap > 0 ? cap : 1;
  r->payload_size = payload_size;
  r->slots = calloc(r->cap, sizeof *r->slots);
  r->seq_slot = calloc(r->cap, sizeof *r->seq_slot);
  r->payload = payload_size > 0 ? calloc(r->cap, payload_size) : NULL;
  if (r->slots == NULL || r->seq_slot == NULL || (payload_size > 0 && r->payload == NULL)) {
    dlqb_ackring_release(r);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  return DLQB_OK;
}

void dlqb_ackring_release(dlqb_ackring *r) {
  free(r->slots);
  free(r->seq_slot);
  free(r->payload);
  *r = (dlqb_ackring){0};
}

static size_t slot_of(const dlqb_ackring *r, size_t i) { return (r->head + i) % r->cap; }

dlqb_ack_entry *dlqb_ackring_at(const dlqb_ackring *r, size_t i) {
  return &r->slots[slot_of(r, i)];
}

void *dlqb_ackring_payload_at(const dlqb_ackring *r, size_t i) {
  return r->payload != NULL ? r->payload + slot_of(r, i) * r->payload_size : NULL;
}

/* Doubles the ring, laying its entries out from slot 0 in order. The
 * publishes in it keep consecutive numbers, so seq % cap stays unique. */
static bool grow(dlqb_ackring *r) {
  size_t cap = r->cap * 2;
  dlqb_ack_entry *slots = calloc(cap, sizeof *slots);
  size_t *seq_slot = calloc(cap, sizeof *seq_slot);
  unsigned char *payload = r->payload_size > 0 ? calloc(cap, r->payload_size) : NULL;
  if (slots == NULL || seq_slot == NULL || (r->payload_size > 0 && payload == NULL)) {
    free(slots);
    free(seq_slot);
    free(payload);
    return false;
  }
  for (size_t i = 0; i < r->count; i++) {
    slots[i] = *dlqb_ackring_at(r, i);
    if (payload != NULL)
      memcpy(payload + i * r->payload_size, dlqb_ackring_payload_at(r, i), r->payload_size);
    if (slots[i].state == DLQB_ACK_PUBLISHED) seq_slot[slots[i].seq % cap] = i;
  }
  free(r->slots);
  free(r->seq_slot);
  free(r->payload);
  r->slots = slots;
  r->seq_slot = seq_slot;
  r->payload = payload;
  r->cap = cap;
  r->head = 0;
  return true;
}

/* Extends the ready prefix over entries that no longer wait for a
 * confirm. Each entry is passed over once between commits, so keeping the
 * prefix costs O(1) per message instead of a scan from head per frame. */
static bool waits(dlqb_ack_state st) { return st == DLQB_ACK_PUBLISHED || st == DLQB_ACK_RETURNED; }

static void extend_ready(dlqb_ackring *r) {
  while (r->ready < r->count && !waits(dlqb_ackring_at(r, r->ready)->state)) r->ready++;
}

/* Delivery order: (channel, tag), channels in the order they were used. */
static bool before(uint16_t ch_a, uint64_t tag_a, uint16_t ch_b, uint64_t tag_b) {
  return ch_a < ch_b || (ch_a == ch_b && tag_a < tag_b);
}

/* Notes a held delivery: the first one in delivery order bounds every
 * multiple ack. */
static void note_held(dlqb_ackring *r, uint16_t channel, uint64_t tag) {
  if (r->first_held_tag == 0 || before(channel, tag, r->first_held_channel, r->first_held_tag)) {
    r->first_held_channel = channel;
    r->first_held_tag = tag;
  }
  r->held++;
}

void *dlqb_ackring_push(dlqb_ackring *r, uint16_t channel, uint64_t tag, dlqb_ack_state state,
                        bool *refused) {
  *refused = !before(r->last_channel, r->last_tag, channel, tag);
  if (*refused) return NULL;
  if (state == DLQB_ACK_HELD) {
    r->last_channel = channel;
    r->last_tag = tag;
    note_held(r, channel, tag);
    return NULL;
  }
  if (r->count == r->cap && !grow(r)) {
    *refused = true;
    return NULL;
  }
  r->last_channel = channel;
  r->last_tag = tag;
  size_t slot = slot_of(r, r->count);
  dlqb_ack_entry *e = &r->slots[slot];
  *e = (dlqb_ack_entry){.tag = tag, .channel = channel, .state = state};
  r->count++;
  if (state == DLQB_ACK_PUBLISHED) {
    e->seq = ++r->next_seq;
    r->seq_slot[e->seq % r->cap] = slot;
  }
  extend_ready(r);
  void *p = dlqb_ackring_payload_at(r, r->count - 1);
  if (p != NULL) memset(p, 0, r->payload_size);
  return p;
}

/* Marks publish seq confirmed if it is still in the ring. A slot whose
 * entry carries another number was acked and reused: nothing to do. */
static void confirm_one(dlqb_ackring *r, uint64_t seq) {
  dlqb_ack_entry *e = &r->slots[r->seq_slot[seq % r->cap]];
  if (e->seq == seq && e->state == DLQB_ACK_PUBLISHED && !e->rearmed) {
    e->state = DLQB_ACK_SETTLED;
    return;
  }
  /* A publish made again after a return has a number outside the map (it
   * may have outlived the entries around it): look for it. Rare, so a scan. */
  for (size_t i = 0; r->rearmed > 0 && i < r->count; i++) {
    e = dlqb_ackring_at(r, i);
    if (e->rearmed && e->seq == seq && e->state == DLQB_ACK_PUBLISHED) {
      e->state = DLQB_ACK_SETTLED;
      e->rearmed = false;
      r->rearmed--;
      return;
    }
  }
}

void dlqb_ackring_on_confirm(dlqb_ackring *r, uint64_t seq, bool multiple) {
  if (r->failed || seq == 0 || seq > r->next_seq) return; /* not ours, or not believed */
  if (multiple) {
    /* Only the numbers above the previous multiple confirm are walked, so
     * each publish is visited about once however the broker groups them. */
    for (uint64_t s = r->confirmed_upto + 1; s <= seq; s++) confirm_one(r, s);
    if (seq > r->confirmed_upto) r->confirmed_upto = seq;
  } else {
    confirm_one(r, seq);
  }
  extend_ready(r);
}

void dlqb_ackring_fail(dlqb_ackring *r) { r->failed = true; }

size_t dlqb_ackring_find_published(const dlqb_ackring *r, bool (*match)(void *ctx, size_t i),
                                   void *ctx) {
  for (size_t i = 0; i < r->count; i++)
    if (dlqb_ackring_at(r, i)->state == DLQB_ACK_PUBLISHED && match(ctx, i)) return i;
  return (size_t)-1;
}

void dlqb_ackring_return(dlqb_ackring *r, size_t i) {
  dlqb_ack_entry *e = dlqb_ackring_at(r, i);
  if (e->rearmed) {
    e->rearmed = false;
    r->rearmed--;
  }
  e->state = DLQB_ACK_RETURNED;
}

uint64_t dlqb_ackring_rearm(dlqb_ackring *r, size_t i) {
  dlqb_ack_entry *e = dlqb_ackring_at(r, i);
  e->state = DLQB_ACK_PUBLISHED;
  e->seq = ++r->next_seq;
  e->rearmed = true;
  r->rearmed++;
  return e->seq;
}

void dlqb_ackring_drop(dlqb_ackring *r, size_t i) {
  dlqb_ack_entry *e = dlqb_ackring_at(r, i);
  e->state = DLQB_ACK_DROPPED;
  note_held(r, e->channel, e->tag);
  extend_ready(r);
}

void dlqb_ackring_mark_submitted(dlqb_ackring *r, uint64_t ticket) {
  for (size_t i = r->submitted; i < r->ready; i++) dlqb_ackring_at(r, i)->ticket = ticket;
  r->last_ticket = ticket;
  r->submitted = r->ready;
}

/* Whether one ack with multiple=1 may cover the plan's run, and with which
 * channel and tag. A held (or dropped) delivery is still unacked at the
 * broker: `multiple` would ack it (and lose it) if it came before. And a
 * multiple ack covers one channel: a run delivered on two gets one ack per
 * entry. */
static void choose_multiple(const dlqb_ackring *r, dlqb_ack_plan *plan) {
  const dlqb_ack_entry *first = dlqb_ackring_at(r, 0), *last = dlqb_ackring_at(r, plan->run - 1);
  plan->multiple = first->channel == last->channel &&
                   (r->first_held_tag == 0 ||
                    before(last->channel, last->tag, r->first_held_channel, r->first_held_tag));
  plan->multiple_channel = plan->multiple ? last->channel : 0;
  plan->multiple_tag = plan->multiple ? last->tag : 0;
}

bool dlqb_ackring_plan(const dlqb_ackring *r, uint64_t durable, dlqb_ack_plan *plan) {
  *plan = (dlqb_ack_plan){0};
  while (plan->run < r->submitted && dlqb_ackring_at(r, plan->run)->ticket <= durable) plan->run++;
  if (plan->run == 0) return false;
  choose_multiple(r, plan);
  return true;
}

/* The same rule as a whole plan's: a clipped run that came from a plan of
 * one ack per entry (two channels, or a held delivery inside it) may now
 * end on one channel before the held one, and then it takes that channel. */
void dlqb_ackring_plan_clip(const dlqb_ackring *r, dlqb_ack_plan *plan, size_t run) {
  if (run == 0 || run >= plan->run) return;
  plan->run = run;
  choose_multiple(r, plan);
}

void dlqb_ackring_commit(dlqb_ackring *r, const dlqb_ack_plan *plan) {
  r->head = (r->head + plan->run) % r->cap;
  r->count -= plan->run;
  r->ready -= plan->run;
  r->submitted -= plan->run;
}

/* The ack ring: which originals a confirm-before-ack pipe may ack, and how
 * (see dlqb/ackring.h). */
#include "dlqb/ackring.h"

#include <stdlib.h>

dlqb_status dlqb_ackring_init(dlqb_ackring *r, size_t cap, dlqb_error *err) {
  *r = (dlqb_ackring){0};
  r->cap = cap > 0 ? cap : 1;
  r->slots = calloc(r->cap, sizeof *r->slots);
  r->seq_slot = calloc(r->cap, sizeof *r->seq_slot);
  if (r->slots == NULL || r->seq_slot == NULL) {
    dlqb_ackring_release(r);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  return DLQB_OK;
}

void dlqb_ackring_release(dlqb_ackring *r) {
  free(r->slots);
  free(r->seq_slot);
  *r = (dlqb_ackring){0};
}

bool dlqb_ackring_full(const dlqb_ackring *r) { return r->count == r->cap; }

size_t dlqb_ackring_slot_of(const dlqb_ackring *r, size_t i) { return (r->head + i) % r->cap; }

dlqb_ack_entry *dlqb_ackring_at(const dlqb_ackring *r, size_t i) {
  return &r->slots[dlqb_ackring_slot_of(r, i)];
}

/* Extends the ready prefix over entries that no longer wait for a confirm
 * (held ones wait for nothing either). Each entry is passed over once
 * between commits, so keeping the prefix costs O(1) per message instead of
 * a scan from head per frame. */
static void extend_ready(dlqb_ackring *r) {
  while (r->ready < r->count && dlqb_ackring_at(r, r->ready)->state != DLQB_ACK_PUBLISHED) r->ready++;
}

size_t dlqb_ackring_push(dlqb_ackring *r, uint64_t tag, dlqb_ack_state state) {
  if (dlqb_ackring_full(r)) return (size_t)-1;
  if (r->count > 0 && dlqb_ackring_at(r, r->count - 1)->tag >= tag) return (size_t)-1;
  size_t slot = dlqb_ackring_slot_of(r, r->count);
  dlqb_ack_entry *e = &r->slots[slot];
  *e = (dlqb_ack_entry){.tag = tag, .state = state};
  r->count++;
  if (state == DLQB_ACK_PUBLISHED) {
    e->seq = ++r->next_seq;
    r->seq_slot[e->seq % r->cap] = slot;
  } else if (state == DLQB_ACK_HELD) {
    if (r->first_held_tag == 0) r->first_held_tag = tag;
    r->held++;
  }
  extend_ready(r);
  return slot;
}

/* Marks publish seq confirmed if it is still in the ring. A slot whose
 * entry carries another number was acked and reused: nothing to do. */
static void confirm_one(dlqb_ackring *r, uint64_t seq) {
  dlqb_ack_entry *e = &r->slots[r->seq_slot[seq % r->cap]];
  if (e->seq == seq && e->state == DLQB_ACK_PUBLISHED) e->state = DLQB_ACK_SETTLED;
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

void dlqb_ackring_mark_submitted(dlqb_ackring *r, uint64_t ticket) {
  for (size_t i = r->submitted; i < r->ready; i++) dlqb_ackring_at(r, i)->ticket = ticket;
  r->last_ticket = ticket;
  r->submitted = r->ready;
}

bool dlqb_ackring_plan(const dlqb_ackring *r, uint64_t durable, dlqb_ack_plan *plan) {
  *plan = (dlqb_ack_plan){0};
  while (plan->run < r->submitted && dlqb_ackring_at(r, plan->run)->ticket <= durable) {
    if (dlqb_ackring_at(r, plan->run)->state == DLQB_ACK_HELD) plan->nheld++;
    plan->run++;
  }
  if (plan->run == 0) return false;
  if (plan->run > plan->nheld) {
    /* A held entry that left the ring earlier is still unacked at the
     * broker: `multiple` would ack it (and lose it) if its tag is lower. */
    uint64_t last = dlqb_ackring_at(r, plan->run - 1)->tag;
    if (plan->nheld == 0 && (r->first_held_tag == 0 || r->first_held_tag > last)) {
      plan->multiple = true;
      plan->multiple_tag = last;
    }
  }
  return true;
}

void dlqb_ackring_commit(dlqb_ackring *r, const dlqb_ack_plan *plan) {
  r->head = (r->head + plan->run) % r->cap;
  r->count -= plan->run;
  r->ready -= plan->run;
  r->submitted -= plan->run;
  r->held -= plan->nheld;
}

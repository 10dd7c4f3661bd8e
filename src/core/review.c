/* Custody of a compliance_review item: see dlqb/review.h. */
#include "dlqb/review.h"

#include <string.h>

#include "dlqb/names.h"

static bool claimed(const dlqb_item *it) { return it->owner[0] != '\0'; }

dlqb_review_gate dlqb_review_claim_gate(const dlqb_item *it, const char *actor, bool force) {
  if (!claimed(it)) return DLQB_GATE_ALLOW;
  if (strcmp(it->owner, actor) == 0) return DLQB_GATE_ALREADY_MINE;
  return force ? DLQB_GATE_FORCED : DLQB_GATE_OWNED;
}

dlqb_review_gate dlqb_review_decide_gate(const dlqb_item *it, const char *actor, bool force) {
  if (claimed(it) && strcmp(it->owner, actor) == 0) return DLQB_GATE_ALLOW;
  if (force) return DLQB_GATE_FORCED;
  return claimed(it) ? DLQB_GATE_OWNED : DLQB_GATE_UNCLAIMED;
}

bool dlqb_review_since(const dlqb_item *it, int64_t now_ms, int64_t *epoch_ms) {
  if (it->has_escalated_at && dlqb_time_usable(it->escalated_at_ms, now_ms)) {
    *epoch_ms = it->escalated_at_ms;
    return true;
  }
  /* Put there by hand, or with a forged time: the older stamps are a
   * lower bound, as for a DLQ item. */
  return dlqb_item_since(it, now_ms, epoch_ms);
}

static uint64_t ms_since(int64_t now_ms, int64_t since) {
  return now_ms > since ? (uint64_t)now_ms - (uint64_t)since : 0;
}

bool dlqb_review_age(const dlqb_item *it, int64_t now_ms, uint64_t *age_ms) {
  int64_t since;
  if (!dlqb_review_since(it, now_ms, &since)) return false;
  *age_ms = ms_since(now_ms, since);
  return true;
}

bool dlqb_review_claim_age(const dlqb_item *it, int64_t now_ms, uint64_t *age_ms) {
  if (!claimed(it) || !it->has_claimed_at || !dlqb_time_usable(it->claimed_at_ms, now_ms))
    return false;
  *age_ms = ms_since(now_ms, it->claimed_at_ms);
  return true;
}

size_t dlqb_review_claim_stamp(dlqb_hset *sets, const char *owner, const char *at_iso) {
  sets[0] = (dlqb_hset){DLQB_H_OWNER, DLQB_HSET_STRING, owner, 0};
  sets[1] = (dlqb_hset){DLQB_H_CLAIMED_AT, DLQB_HSET_STRING, at_iso, 0};
  return DLQB_CLAIM_SETS;
}

size_t dlqb_review_leave_stamp(dlqb_hset *sets) {
  static const char *const keys[DLQB_LEAVE_SETS] = {
      DLQB_H_ESCALATED_BY,    DLQB_H_ESCALATED_AT, DLQB_H_ESCALATION_REASON,
      DLQB_H_ESCALATION_NOTE, DLQB_H_OWNER,        DLQB_H_CLAIMED_AT};
  for (size_t i = 0; i < DLQB_LEAVE_SETS; i++)
    sets[i] = (dlqb_hset){keys[i], DLQB_HSET_REMOVE, NULL, 0};
  return DLQB_LEAVE_SETS;
}

void dlqb_review_tally_add(dlqb_review_tally *t, const dlqb_item *it, int64_t now_ms) {
  uint64_t age;
  t->items++;
  if (!claimed(it)) {
    t->unclaimed++;
    if (dlqb_review_age(it, now_ms, &age) &&
        (!t->has_oldest_unclaimed || age > t->oldest_unclaimed_ms)) {
      t->has_oldest_unclaimed = true;
      t->oldest_unclaimed_ms = age;
    }
    return;
  }
  t->claimed++;
  if (dlqb_review_claim_age(it, now_ms, &age) &&
      (!t->has_oldest_claimed || age > t->oldest_claimed_ms)) {
    t->has_oldest_claimed = true;
    t->oldest_claimed_ms = age;
  }
}

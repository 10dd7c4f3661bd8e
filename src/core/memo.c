/* The copies a mover remembers across a lost connection (dlqb/memo.h): a
 * ring of entries, oldest first, with a count per identity in a hash set so
 * that a delivery that matches nothing (nearly all) costs one lookup. */
#include "dlqb/memo.h"

#include <stdlib.h>
#include <string.h>

#include "dlqb/hashset.h"

#define FIRST_CAP 16

typedef struct {
  dlqb_memo_entry e;
  bool live; /* false once taken: a hole until the ring passes it */
} slot;

struct dlqb_memo {
  slot *slots;
  size_t cap, max;
  size_t head, used; /* the span from head, holes included */
  size_t live;
  dlqb_hashset *ids; /* identity -> size_t: live entries with it */
};

dlqb_memo *dlqb_memo_new(size_t max) {
  dlqb_memo *m = calloc(1, sizeof *m);
  if (m == NULL) return NULL;
  m->max = max > 0 ? max : 1;
  m->ids = dlqb_hashset_new(sizeof(size_t));
  if (m->ids == NULL) {
    free(m);
    return NULL;
  }
  return m;
}

void dlqb_memo_free(dlqb_memo *m) {
  if (m == NULL) return;
  free(m->slots);
  dlqb_hashset_free(m->ids);
  free(m);
}

size_t dlqb_memo_size(const dlqb_memo *m) { return m != NULL ? m->live : 0; }
size_t dlqb_memo_max(const dlqb_memo *m) { return m != NULL ? m->max : 0; }

static slot *at(const dlqb_memo *m, size_t i) { return &m->slots[(m->head + i) % m->cap]; }

/* Lays the live entries out from slot 0 in order into cap slots (>= live),
 * dropping the holes. */
static bool rebuild(dlqb_memo *m, size_t cap) {
  slot *s = malloc(cap * sizeof *s);
  if (s == NULL) return false;
  size_t n = 0;
  for (size_t i = 0; i < m->used; i++)
    if (at(m, i)->live) s[n++] = *at(m, i);
  free(m->slots);
  m->slots = s;
  m->cap = cap;
  m->head = 0;
  m->used = n;
  return true;
}

/* The live count of id drops by one (the key goes at zero). */
static void forget_id(dlqb_memo *m, const uint8_t *id) {
  size_t *n = dlqb_hashset_get(m->ids, id, DLQB_MEMO_ID_LEN);
  if (n != NULL && --*n == 0) dlqb_hashset_remove(m->ids, id, DLQB_MEMO_ID_LEN);
}

/* Passes the holes at the head. */
static void trim(dlqb_memo *m) {
  while (m->used > 0 && !at(m, 0)->live) {
    m->head = (m->head + 1) % m->cap;
    m->used--;
  }
}

bool dlqb_memo_put(dlqb_memo *m, const dlqb_memo_entry *e, bool *forgot) {
  if (forgot != NULL) *forgot = false;
  if (m->used == m->cap) {
    /* Room first from holes, then by growing (up to max), and only then
     * by forgetting the oldest. */
    size_t cap = m->cap;
    if (m->live == m->used && cap < m->max) cap = cap == 0 ? FIRST_CAP : cap * 2;
    if (cap > m->max) cap = m->max;
    if ((m->live < m->used || cap > m->cap) && !rebuild(m, cap)) return false;
    if (m->used == m->cap) {
      forget_id(m, at(m, 0)->e.id);
      at(m, 0)->live = false;
      m->live--;
      trim(m);
      if (forgot != NULL) *forgot = true;
    }
  }
  bool added;
  size_t *n = dlqb_hashset_add(m->ids, e->id, DLQB_MEMO_ID_LEN, &added);
  if (n == NULL) return false;
  (*n)++;
  slot *s = at(m, m->used);
  s->e = *e;
  s->live = true;
  m->used++;
  m->live++;
  return true;
}

bool dlqb_memo_take(dlqb_memo *m, const uint8_t id[DLQB_MEMO_ID_LEN], dlqb_memo_entry *out) {
  if (m == NULL || m->live == 0 || dlqb_hashset_get(m->ids, id, DLQB_MEMO_ID_LEN) == NULL)
    return false;
  /* Redeliveries come back in the order the entries went in, so the match
   * is nearly always at the head. */
  for (size_t i = 0; i < m->used; i++) {
    slot *s = at(m, i);
    if (!s->live || memcmp(s->e.id, id, DLQB_MEMO_ID_LEN) != 0) continue;
    *out = s->e;
    s->live = false;
    m->live--;
    forget_id(m, id);
    trim(m);
    return true;
  }
  return false; /* not reached: the count said one is held */
}

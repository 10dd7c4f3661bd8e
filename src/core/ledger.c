/* The completion ledger's set of (request_id, source_system) pairs. */
#include "dlqb/ledger.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Open addressing over "request_id\0source_system" keys, power-of-two
 * capacity, at most half full. */
struct dlqb_ledger {
  char **slots;
  size_t cap, size;
};

static uint64_t hash_pair(const char *a, const char *b) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)a; *p; p++) h = (h ^ *p) * 1099511628211ULL;
  h = (h ^ 0xFFu) * 1099511628211ULL; /* separator: ("ab","c") != ("a","bc") */
  for (const unsigned char *p = (const unsigned char *)b; *p; p++) h = (h ^ *p) * 1099511628211ULL;
  return h;
}

/* strcmp, not memcmp: a slot holding a shorter key is shorter than a's
 * length, and memcmp may read every byte it is given. */
static bool slot_is(const char *slot, const char *a, const char *b) {
  return strcmp(slot, a) == 0 && strcmp(slot + strlen(a) + 1, b) == 0;
}

dlqb_ledger *dlqb_ledger_new(void) {
  dlqb_ledger *l = calloc(1, sizeof *l);
  if (l == NULL) return NULL;
  l->cap = 64;
  l->slots = calloc(l->cap, sizeof *l->slots);
  if (l->slots == NULL) {
    free(l);
    return NULL;
  }
  return l;
}

void dlqb_ledger_free(dlqb_ledger *l) {
  if (l == NULL) return;
  for (size_t i = 0; i < l->cap; i++) free(l->slots[i]);
  free(l->slots);
  free(l);
}

static size_t find_slot(char *const *slots, size_t cap, const char *a, const char *b) {
  size_t i = (size_t)hash_pair(a, b) & (cap - 1);
  while (slots[i] != NULL && !slot_is(slots[i], a, b)) i = (i + 1) & (cap - 1);
  return i;
}

static dlqb_status grow(dlqb_ledger *l, dlqb_error *err) {
  size_t cap = l->cap * 2;
  char **slots = calloc(cap, sizeof *slots);
  if (slots == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the completion ledger");
  for (size_t i = 0; i < l->cap; i++) {
    char *k = l->slots[i];
    if (k == NULL) continue;
    slots[find_slot(slots, cap, k, k + strlen(k) + 1)] = k;
  }
  free(l->slots);
  l->slots = slots;
  l->cap = cap;
  return DLQB_OK;
}

dlqb_status dlqb_ledger_add(dlqb_ledger *l, const char *request_id, const char *source_system,
                            dlqb_error *err) {
  if ((l->size + 1) * 2 > l->cap) {
    dlqb_status st = grow(l, err);
    if (st != DLQB_OK) return st;
  }
  size_t i = find_slot(l->slots, l->cap, request_id, source_system);
  if (l->slots[i] != NULL) return DLQB_OK;
  size_t la = strlen(request_id), lb = strlen(source_system);
  char *k = malloc(la + lb + 2);
  if (k == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the completion ledger");
  memcpy(k, request_id, la + 1);
  memcpy(k + la + 1, source_system, lb + 1);
  l->slots[i] = k;
  l->size++;
  return DLQB_OK;
}

bool dlqb_ledger_contains(const dlqb_ledger *l, const char *request_id,
                          const char *source_system) {
  return l->slots[find_slot(l->slots, l->cap, request_id, source_system)] != NULL;
}

size_t dlqb_ledger_size(const dlqb_ledger *l) { return l->size; }

void dlqb_ledger_clear(dlqb_ledger *l) {
  for (size_t i = 0; i < l->cap; i++) {
    free(l->slots[i]);
    l->slots[i] = NULL;
  }
  l->size = 0;
}

void dlqb_ledger_each(const dlqb_ledger *l,
                      void (*fn)(void *ctx, const char *request_id, const char *source_system),
                      void *ctx) {
  for (size_t i = 0; i < l->cap; i++) {
    const char *k = l->slots[i];
    if (k != NULL) fn(ctx, k, k + strlen(k) + 1);
  }
}

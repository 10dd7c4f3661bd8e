/* The core's one hash set of byte-string keys with a value slot (see dlqb/hashset.h). */
#include "dlqb/hashset.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* One allocation per key: this header, the value (aligned for any type),
 * then the key and a NUL. Slots hold pointers, so growing the table never
 * moves a value. */
typedef struct {
  uint64_t hash;
  size_t len;
} entry;

#define ALIGN        alignof(max_align_t)
#define VALUE_OFFSET ((sizeof(entry) + ALIGN - 1) / ALIGN * ALIGN)

struct dlqb_hashset {
  entry **slots;
  size_t cap, size, value_size;
};

static void *value_of(const entry *e) { return (char *)e + VALUE_OFFSET; }

static char *key_of(const dlqb_hashset *s, const entry *e) {
  return (char *)e + VALUE_OFFSET + s->value_size;
}

uint64_t dlqb_hashset_hash(const void *key, size_t len) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  const unsigned char *p = key;
  for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

dlqb_hashset *dlqb_hashset_new(size_t value_size) {
  dlqb_hashset *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->cap = DLQB_HASHSET_MIN_CAP;
  s->value_size = value_size;
  s->slots = calloc(s->cap, sizeof *s->slots);
  if (s->slots == NULL) {
    free(s);
    return NULL;
  }
  return s;
}

void dlqb_hashset_clear(dlqb_hashset *s) {
  for (size_t i = 0; i < s->cap; i++) {
    free(s->slots[i]);
    s->slots[i] = NULL;
  }
  s->size = 0;
}

void dlqb_hashset_free(dlqb_hashset *s) {
  if (s == NULL) return;
  dlqb_hashset_clear(s);
  free(s->slots);
  free(s);
}

/* The slot holding key, or the empty slot where it would go. memcmp only
 * after the lengths agree, so it never reads past a shorter key. */
static size_t find(const dlqb_hashset *s, entry *const *slots, size_t cap, uint64_t hash,
                   const void *key, size_t len) {
  size_t i = (size_t)hash & (cap - 1);
  while (slots[i] != NULL) {
    const entry *e = slots[i];
    if (e->hash == hash && e->len == len && (len == 0 || memcmp(key_of(s, e), key, len) == 0))
      break;
    i = (i + 1) & (cap - 1);
  }
  return i;
}

void *dlqb_hashset_get(const dlqb_hashset *s, const void *key, size_t len) {
  uint64_t h = dlqb_hashset_hash(key, len);
  entry *e = s->slots[find(s, s->slots, s->cap, h, key, len)];
  return e != NULL ? value_of(e) : NULL;
}

static bool grow(dlqb_hashset *s) {
  size_t cap = s->cap * 2;
  entry **slots = calloc(cap, sizeof *slots);
  if (slots == NULL) return false;
  for (size_t i = 0; i < s->cap; i++) {
    entry *e = s->slots[i];
    if (e != NULL) slots[find(s, slots, cap, e->hash, key_of(s, e), e->len)] = e;
  }
  free(s->slots);
  s->slots = slots;
  s->cap = cap;
  return true;
}

void *dlqb_hashset_add(dlqb_hashset *s, const void *key, size_t len, bool *added) {
  uint64_t h = dlqb_hashset_hash(key, len);
  size_t i = find(s, s->slots, s->cap, h, key, len);
  if (added != NULL) *added = false;
  if (s->slots[i] != NULL) return value_of(s->slots[i]);
  if ((s->size + 1) * 2 > s->cap) {
    if (!grow(s)) return NULL;
    i = find(s, s->slots, s->cap, h, key, len);
  }
  if (len > SIZE_MAX - VALUE_OFFSET - s->value_size - 1) return NULL;
  entry *e = calloc(1, VALUE_OFFSET + s->value_size + len + 1);
  if (e == NULL) return NULL;
  e->hash = h;
  e->len = len;
  if (len > 0) memcpy(key_of(s, e), key, len);
  s->slots[i] = e;
  s->size++;
  if (added != NULL) *added = true;
  return value_of(e);
}

const char *dlqb_hashset_key(const dlqb_hashset *s, const void *value) {
  return (const char *)value + s->value_size;
}

bool dlqb_hashset_remove(dlqb_hashset *s, const void *key, size_t len) {
  size_t i = find(s, s->slots, s->cap, dlqb_hashset_hash(key, len), key, len);
  if (s->slots[i] == NULL) return false;
  free(s->slots[i]);
  s->slots[i] = NULL;
  s->size--;
  /* Backward shift: an entry after the gap moves into it unless its home
   * lies cyclically in (gap, j], where it is still found without passing
   * the gap. */
  size_t mask = s->cap - 1;
  for (size_t j = (i + 1) & mask; s->slots[j] != NULL; j = (j + 1) & mask) {
    size_t home = (size_t)s->slots[j]->hash & mask;
    bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      s->slots[i] = s->slots[j];
      s->slots[j] = NULL;
      i = j;
    }
  }
  return true;
}

size_t dlqb_hashset_size(const dlqb_hashset *s) { return s->size; }

size_t dlqb_hashset_capacity(const dlqb_hashset *s) { return s->cap; }

void dlqb_hashset_each(const dlqb_hashset *s,
                       void (*fn)(void *ctx, const char *key, size_t len, void *value), void *ctx) {
  for (size_t i = 0; i < s->cap; i++) {
    const entry *e = s->slots[i];
    if (e != NULL) fn(ctx, key_of(s, e), e->len, value_of(e));
  }
}

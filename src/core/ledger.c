/* The completion ledger's set of (request_id, source_system) pairs, each
 * with the earliest completion time its entries gave. */
#include "dlqb/ledger.h"

#include <stdlib.h>
#include <string.h>

#include "dlqb/hashset.h"

/* The keys are "request_id\0source_system": an id holds no NUL, so the
 * pair ("ab", "c") is not the pair ("a", "bc"). The value is the earliest
 * completion time (int64_t ms, DLQB_LEDGER_NO_TIME: none known). */
struct dlqb_ledger {
  dlqb_hashset *set;
};

/* Room for the key of any pair the envelope allows (two ids of at most
 * DLQB_ID_MAX = 256 bytes, fit with room to spare): longer
 * pairs, from a cache file, take the heap. */
#define KEY_BUF 1024

/* The key of a pair: in buf (KEY_BUF bytes) when it fits, else malloc'd
 * (free it when it is not buf); NULL when out of memory. */
static char *pair_key(const char *a, const char *b, char *buf, size_t *len) {
  size_t la = strlen(a), lb = strlen(b);
  char *k = la + lb + 1 <= KEY_BUF ? buf : malloc(la + lb + 1);
  if (k == NULL) return NULL;
  memcpy(k, a, la + 1);
  memcpy(k + la + 1, b, lb);
  *len = la + 1 + lb;
  return k;
}

static void key_done(char *k, const char *buf) {
  if (k != buf) free(k);
}

dlqb_ledger *dlqb_ledger_new(void) {
  dlqb_ledger *l = calloc(1, sizeof *l);
  if (l == NULL) return NULL;
  l->set = dlqb_hashset_new(sizeof(int64_t));
  if (l->set == NULL) {
    free(l);
    return NULL;
  }
  return l;
}

void dlqb_ledger_free(dlqb_ledger *l) {
  if (l == NULL) return;
  dlqb_hashset_free(l->set);
  free(l);
}

dlqb_status dlqb_ledger_add_at(dlqb_ledger *l, const char *request_id, const char *source_system,
                               int64_t at_ms, dlqb_error *err) {
  char buf[KEY_BUF];
  size_t len = 0;
  bool added = false;
  char *k = pair_key(request_id, source_system, buf, &len);
  int64_t *held = k != NULL ? dlqb_hashset_add(l->set, k, len, &added) : NULL;
  key_done(k, buf);
  if (held == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the completion ledger");
  if (added || at_ms < *held) *held = at_ms;
  return DLQB_OK;
}

dlqb_status dlqb_ledger_add(dlqb_ledger *l, const char *request_id, const char *source_system,
                            dlqb_error *err) {
  return dlqb_ledger_add_at(l, request_id, source_system, DLQB_LEDGER_NO_TIME, err);
}

bool dlqb_ledger_completed_at(const dlqb_ledger *l, const char *request_id,
                              const char *source_system, int64_t *at_ms) {
  char buf[KEY_BUF];
  size_t len = 0;
  char *k = pair_key(request_id, source_system, buf, &len);
  const int64_t *held = k != NULL ? dlqb_hashset_get(l->set, k, len) : NULL;
  key_done(k, buf);
  if (held == NULL || *held == DLQB_LEDGER_NO_TIME) return false;
  *at_ms = *held;
  return true;
}

bool dlqb_ledger_contains(const dlqb_ledger *l, const char *request_id, const char *source_system) {
  char buf[KEY_BUF];
  size_t len = 0;
  char *k = pair_key(request_id, source_system, buf, &len);
  /* Out of memory (only for a pair longer than any valid one) reads as
   * absent: replay then runs the task, a duplicate at worst, never a
   * skipped task. */
  bool held = k != NULL && dlqb_hashset_get(l->set, k, len) != NULL;
  key_done(k, buf);
  return held;
}

size_t dlqb_ledger_size(const dlqb_ledger *l) { return dlqb_hashset_size(l->set); }

void dlqb_ledger_clear(dlqb_ledger *l) { dlqb_hashset_clear(l->set); }

typedef struct {
  void (*fn)(void *ctx, const char *request_id, const char *source_system);
  void *ctx;
} each_ctx;

static void each_pair(void *ctx, const char *key, size_t len, void *value) {
  each_ctx *c = ctx;
  (void)len;
  (void)value;
  c->fn(c->ctx, key, key + strlen(key) + 1);
}

void dlqb_ledger_each(const dlqb_ledger *l,
                      void (*fn)(void *ctx, const char *request_id, const char *source_system),
                      void *ctx) {
  each_ctx c = {fn, ctx};
  dlqb_hashset_each(l->set, each_pair, &c);
}

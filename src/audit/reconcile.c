/* The DLQ against the audit trail: see dlqb/reconcile.h. */
#include "dlqb/reconcile.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/audit.h"
#include "dlqb/text.h"
#include "dlqb/topology.h"

/* Open addressing with linear probing, power-of-two capacity, at most half
 * full; removal shifts the following run back (no tombstones), so the table
 * stays as small as what it holds. */
typedef struct {
  dlqb_reconcile_entry e;
  char *id, *request; /* owned strings behind e.message_id, e.request_id */
} slot;

struct dlqb_reconcile {
  slot **slots;
  size_t cap, size;
};

static uint64_t hash_id(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = (h ^ *p) * 1099511628211ULL;
  return h;
}

dlqb_reconcile *dlqb_reconcile_new(void) {
  dlqb_reconcile *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  r->cap = 64;
  r->slots = calloc(r->cap, sizeof *r->slots);
  if (r->slots == NULL) {
    free(r);
    return NULL;
  }
  return r;
}

static void slot_free(slot *s) {
  if (s == NULL) return;
  free(s->id);
  free(s->request);
  free(s);
}

void dlqb_reconcile_free(dlqb_reconcile *r) {
  if (r == NULL) return;
  for (size_t i = 0; i < r->cap; i++) slot_free(r->slots[i]);
  free(r->slots);
  free(r);
}

static size_t find(slot *const *slots, size_t cap, const char *id) {
  size_t i = (size_t)hash_id(id) & (cap - 1);
  while (slots[i] != NULL && strcmp(slots[i]->id, id) != 0) i = (i + 1) & (cap - 1);
  return i;
}

static bool grow(dlqb_reconcile *r) {
  size_t cap = r->cap * 2;
  slot **slots = calloc(cap, sizeof *slots);
  if (slots == NULL) return false;
  for (size_t i = 0; i < r->cap; i++)
    if (r->slots[i] != NULL) slots[find(slots, cap, r->slots[i]->id)] = r->slots[i];
  free(r->slots);
  r->slots = slots;
  r->cap = cap;
  return true;
}

/* The entry for id, created empty when absent; NULL when out of memory. */
static slot *get(dlqb_reconcile *r, const char *id) {
  size_t i = find(r->slots, r->cap, id);
  if (r->slots[i] != NULL) return r->slots[i];
  if ((r->size + 1) * 2 > r->cap) {
    if (!grow(r)) return NULL;
    i = find(r->slots, r->cap, id);
  }
  slot *s = calloc(1, sizeof *s);
  if (s == NULL || (s->id = strdup(id)) == NULL) {
    free(s);
    return NULL;
  }
  s->e.message_id = s->id;
  s->e.request_id = "";
  r->slots[i] = s;
  r->size++;
  return s;
}

/* Removes the entry at i and moves back the entries after it that would
 * no longer be found past the gap. */
static void remove_at(dlqb_reconcile *r, size_t i) {
  slot_free(r->slots[i]);
  r->slots[i] = NULL;
  r->size--;
  size_t mask = r->cap - 1;
  for (size_t j = (i + 1) & mask; r->slots[j] != NULL; j = (j + 1) & mask) {
    size_t home = (size_t)hash_id(r->slots[j]->id) & mask;
    /* j's entry may stay only if its home lies cyclically in (i, j]. */
    bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      r->slots[i] = r->slots[j];
      r->slots[j] = NULL;
      i = j;
    }
  }
}

static bool set_request(slot *s, const char *request_id) {
  if (request_id == NULL || request_id[0] == '\0' || s->request != NULL) return true;
  if ((s->request = strdup(request_id)) == NULL) return false;
  s->e.request_id = s->request;
  return true;
}

dlqb_status dlqb_reconcile_present(dlqb_reconcile *r, const char *message_id,
                                   const char *request_id, dlqb_error *err) {
  slot *s = get(r, message_id);
  if (s == NULL || !set_request(s, request_id))
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory reconciling the DLQ");
  s->e.present++;
  return DLQB_OK;
}

static void copy(char *dst, size_t cap, const char *src) { snprintf(dst, cap, "%s", src); }

bool dlqb_reconcile_line(dlqb_reconcile *r, const char *line, size_t len) {
  /* Most lines are hops elsewhere: no parse for them. */
  if (dlqb_text_find(line, len, DLQB_Q_DLQ, sizeof DLQB_Q_DLQ - 1) == NULL) return true;
  json_object *rec = dlqb_audit_record_parse(line, len);
  if (rec == NULL) return true; /* not a record: the verifier decides about those */
  const char *id = dlqb_audit_record_str(rec, "message_id");
  bool into = strcmp(dlqb_audit_record_str(rec, "to"), DLQB_Q_DLQ) == 0;
  bool out = strcmp(dlqb_audit_record_str(rec, "from"), DLQB_Q_DLQ) == 0;
  bool ok = true;
  if (id[0] != '\0' && into != out) {
    size_t i = find(r->slots, r->cap, id);
    if (into) {
      slot *s = get(r, id);
      ok = s != NULL && set_request(s, dlqb_audit_record_str(rec, "request_id"));
      if (ok) {
        s->e.net++;
        s->e.entered++;
        copy(s->e.last_time, sizeof s->e.last_time, dlqb_audit_record_str(rec, "time"));
        copy(s->e.last_event, sizeof s->e.last_event, dlqb_audit_record_str(rec, "event"));
        copy(s->e.last_writer, sizeof s->e.last_writer, dlqb_audit_record_str(rec, "writer"));
      }
    } else if (r->slots[i] != NULL) {
      slot *s = r->slots[i];
      s->e.net--;
      copy(s->e.last_out_time, sizeof s->e.last_out_time, dlqb_audit_record_str(rec, "time"));
      /* Out and gone, and not in the queue: nothing left to compare. */
      if (s->e.net <= 0 && s->e.present == 0) remove_at(r, i);
    }
    /* Out of the DLQ for an id never recorded into it (a log that starts
     * at a rotation with --partial): nothing to undo. */
  }
  json_object_put(rec);
  return ok;
}

void dlqb_reconcile_each(const dlqb_reconcile *r,
                         void (*fn)(void *ctx, const dlqb_reconcile_entry *e), void *ctx) {
  for (size_t i = 0; i < r->cap; i++)
    if (r->slots[i] != NULL) fn(ctx, &r->slots[i]->e);
}

size_t dlqb_reconcile_size(const dlqb_reconcile *r) { return r->size; }

/* A queue (the DLQ, compliance_review) against the audit trail: see dlqb/reconcile.h. */
#include "dlqb/reconcile.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/audit.h"
#include "dlqb/hashset.h"
#include "dlqb/text.h"
#include "dlqb/names.h"

/* Per message_id (the set's key) an entry; request is the owned string
 * behind e.request_id once one is known. */
typedef struct {
  dlqb_reconcile_entry e;
  char *request;
} slot;

struct dlqb_reconcile {
  dlqb_hashset *ids;
  char queue[DLQB_RECONCILE_QUEUE_MAX];
  size_t queue_len;
};

dlqb_reconcile *dlqb_reconcile_new(void) { return dlqb_reconcile_new_for(DLQB_Q_DLQ); }

dlqb_reconcile *dlqb_reconcile_new_for(const char *queue) {
  if (strlen(queue) >= DLQB_RECONCILE_QUEUE_MAX) return NULL;
  dlqb_reconcile *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  snprintf(r->queue, sizeof r->queue, "%s", queue);
  r->queue_len = strlen(queue);
  r->ids = dlqb_hashset_new(sizeof(slot));
  if (r->ids == NULL) {
    free(r);
    return NULL;
  }
  return r;
}

static void free_request(void *ctx, const char *key, size_t len, void *value) {
  (void)ctx;
  (void)key;
  (void)len;
  free(((slot *)value)->request);
}

void dlqb_reconcile_free(dlqb_reconcile *r) {
  if (r == NULL) return;
  dlqb_hashset_each(r->ids, free_request, NULL);
  dlqb_hashset_free(r->ids);
  free(r);
}

/* The entry for id, created empty when absent; NULL when out of memory. */
static slot *get(dlqb_reconcile *r, const char *id) {
  bool added = false;
  slot *s = dlqb_hashset_add(r->ids, id, strlen(id), &added);
  if (s != NULL && added) {
    s->e.message_id = dlqb_hashset_key(r->ids, s);
    s->e.request_id = "";
  }
  return s;
}

/* Forgets id: its entry and the strings it owns. */
static void forget(dlqb_reconcile *r, slot *s, const char *id) {
  free(s->request);
  dlqb_hashset_remove(r->ids, id, strlen(id));
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
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory reconciling %s", r->queue);
  s->e.present++;
  return DLQB_OK;
}

static void copy(char *dst, size_t cap, const char *src) { snprintf(dst, cap, "%s", src); }

bool dlqb_reconcile_line(dlqb_reconcile *r, const char *line, size_t len) {
  /* Most lines are hops elsewhere: no parse for them. */
  if (dlqb_text_find(line, len, r->queue, r->queue_len) == NULL) return true;
  json_object *rec = dlqb_audit_record_parse(line, len);
  if (rec == NULL) return true; /* not a record: the verifier decides about those */
  const char *id = dlqb_audit_record_str(rec, "message_id");
  /* A hop from the queue into itself (a review claim's re-publish) is
   * neither: the copy replaced the original. */
  bool into = strcmp(dlqb_audit_record_str(rec, "to"), r->queue) == 0;
  bool out = strcmp(dlqb_audit_record_str(rec, "from"), r->queue) == 0;
  bool ok = true;
  if (id[0] != '\0' && into != out) {
    slot *held = dlqb_hashset_get(r->ids, id, strlen(id));
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
    } else if (held != NULL) {
      slot *s = held;
      s->e.net--;
      copy(s->e.last_out_time, sizeof s->e.last_out_time, dlqb_audit_record_str(rec, "time"));
      /* Out and gone, and not in the queue: nothing left to compare. */
      if (s->e.net <= 0 && s->e.present == 0) forget(r, s, id);
    }
    /* Out of the DLQ for an id never recorded into it (a log that starts
     * at a rotation with --partial): nothing to undo. */
  }
  json_object_put(rec);
  return ok;
}

typedef struct {
  void (*fn)(void *ctx, const dlqb_reconcile_entry *e);
  void *ctx;
} each_ctx;

static void each_entry(void *ctx, const char *key, size_t len, void *value) {
  each_ctx *c = ctx;
  (void)key;
  (void)len;
  c->fn(c->ctx, &((slot *)value)->e);
}

void dlqb_reconcile_each(const dlqb_reconcile *r,
                         void (*fn)(void *ctx, const dlqb_reconcile_entry *e), void *ctx) {
  each_ctx c = {fn, ctx};
  dlqb_hashset_each(r->ids, each_entry, &c);
}

size_t dlqb_reconcile_size(const dlqb_reconcile *r) { return dlqb_hashset_size(r->ids); }

/* The audit report's derivation: per request, its last known state from
 * the verified trail, the queue items read and the completion ledger (see
 * dlqb/report.h). Pure. */
#include "dlqb/report.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/calendar.h"
#include "dlqb/hashset.h"
#include "dlqb/envelope.h"
#include "dlqb/names.h"
#include "dlqb/text.h"

static const char *const state_names[DLQB_RS__COUNT] = {
    [DLQB_RS_COMPLETED] = "completed", [DLQB_RS_IN_REVIEW] = "in_review",
    [DLQB_RS_IN_DLQ] = "in_dlq",       [DLQB_RS_RESOLVED] = "resolved",
    [DLQB_RS_WAITING] = "waiting",     [DLQB_RS_UNKNOWN] = "unknown",
};

const char *dlqb_report_state_name(dlqb_report_state s) {
  return (s >= 0 && s < DLQB_RS__COUNT) ? state_names[s] : "unknown";
}

/* What the trail says of one request: its last hop (latest time; equal
 * times: later in the log). Every string is owned. */
typedef struct {
  char *request_id, *source_system, *message_id;
  char *event, *time, *actor, *writer, *from, *to, *reason;
  int64_t last_ms;
  unsigned long hops;
  bool seen; /* a hop in [from, to] */
  char *detail;
} req;

/* What the queues hold of one request. */
typedef struct {
  unsigned long dlq, review;
  char *owner; /* the first claimed copy's owner */
} held;

struct dlqb_report {
  int64_t from_ms, to_ms;
  dlqb_hashset *reqs, *items;
  uint32_t others_dlq, others_review;
  int64_t read_dlq_ms, read_review_ms; /* INT64_MAX: not read */
  const dlqb_ledger *verified, *unverified;
  /* The pipeline reported on: its queue names, and its records only. */
  dlqb_pipeline p;
  bool p_default;
  dlqb_report_entry *entries;
  size_t n;
  bool finished;
};

dlqb_report *dlqb_report_new(int64_t from_ms, int64_t to_ms) {
  dlqb_report *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  r->from_ms = from_ms;
  r->to_ms = to_ms;
  dlqb_pipeline_default_names(&r->p, DLQB_PIPELINE_DEFAULT);
  r->p_default = true;
  r->read_dlq_ms = r->read_review_ms = INT64_MAX;
  r->reqs = dlqb_hashset_new(sizeof(req));
  r->items = dlqb_hashset_new(sizeof(held));
  if (r->reqs == NULL || r->items == NULL) {
    dlqb_report_free(r);
    return NULL;
  }
  return r;
}

static void free_req(void *ctx, const char *key, size_t len, void *value) {
  (void)ctx;
  (void)key;
  (void)len;
  req *q = value;
  char *owned[] = {q->request_id, q->source_system, q->message_id, q->event,  q->time,  q->actor,
                   q->writer,     q->from,          q->to,         q->reason, q->detail};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
}

static void free_held(void *ctx, const char *key, size_t len, void *value) {
  (void)ctx;
  (void)key;
  (void)len;
  free(((held *)value)->owner);
}

void dlqb_report_free(dlqb_report *r) {
  if (r == NULL) return;
  if (r->reqs != NULL) dlqb_hashset_each(r->reqs, free_req, NULL);
  if (r->items != NULL) dlqb_hashset_each(r->items, free_held, NULL);
  dlqb_hashset_free(r->reqs);
  dlqb_hashset_free(r->items);
  free(r->entries);
  free(r);
}

/* The request's key: request_id NUL source_system, or, without a
 * request_id, "\001" then the message_id (such a record stands alone). */
static size_t make_key(char *key, size_t cap, const char *request_id, const char *source_system,
                       const char *message_id) {
  int n = request_id[0] != '\0' ? snprintf(key, cap, "%s%c%s", request_id, '\0', source_system)
                                : snprintf(key, cap, "\001%s", message_id);
  return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

#define KEY_MAX (2 * DLQB_ID_MAX + 256)

/* A copy of s as a screen and a JSON document may hold it: valid UTF-8
 * without control characters. NULL when out of memory. */
static char *dup_clean(const char *s) {
  size_t len = strlen(s);
  char *out = malloc(len + 1);
  if (out != NULL) dlqb_text_sanitize(out, len + 1, s, len);
  return out;
}

/* Replaces *dst with a clean copy of s. */
static bool set_str(char **dst, const char *s) {
  char *n = dup_clean(s);
  if (n == NULL) return false;
  free(*dst);
  *dst = n;
  return true;
}

dlqb_status dlqb_report_item(dlqb_report *r, const char *queue, const char *message_id,
                             const char *request_id, const char *source_system, const char *owner,
                             dlqb_error *err) {
  bool dlq = strcmp(queue, r->p.dlq) == 0, review = strcmp(queue, r->p.review) == 0;
  if (r->finished || (!dlq && !review)) return DLQB_OK;
  char key[KEY_MAX];
  size_t klen = make_key(key, sizeof key, request_id, source_system, message_id);
  bool added = false;
  held *h = dlqb_hashset_add(r->items, key, klen, &added);
  if (h == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory reading %s", queue);
  if (added) memset(h, 0, sizeof *h);
  if (dlq) h->dlq++;
  if (review) {
    h->review++;
    if (owner[0] != '\0' && h->owner == NULL && (h->owner = dup_clean(owner)) == NULL)
      return dlqb_fail(err, DLQB_ENOMEM, "out of memory reading %s", queue);
  }
  return DLQB_OK;
}

void dlqb_report_queue_read(dlqb_report *r, const char *queue, int64_t read_ms, uint32_t others) {
  if (strcmp(queue, r->p.dlq) == 0) {
    r->others_dlq = others;
    r->read_dlq_ms = read_ms;
  } else if (strcmp(queue, r->p.review) == 0) {
    r->others_review = others;
    r->read_review_ms = read_ms;
  }
}

void dlqb_report_ledger(dlqb_report *r, const dlqb_ledger *verified,
                        const dlqb_ledger *unverified) {
  r->verified = verified;
  r->unverified = unverified;
}

/* Takes the hop as the request's last one. */
static bool take_hop(req *q, json_object *rec, int64_t ms) {
  static const char *const keys[] = {"message_id", "event", "time", "actor",
                                     "writer",     "from",  "to",   "reason"};
  char **dst[] = {&q->message_id, &q->event, &q->time, &q->actor,
                  &q->writer,     &q->from,  &q->to,   &q->reason};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (!set_str(dst[i], dlqb_audit_record_str(rec, keys[i]))) return false;
  q->last_ms = ms;
  return true;
}

void dlqb_report_pipeline(dlqb_report *r, const dlqb_pipeline *p) {
  r->p = *p;
  r->p_default = dlqb_pipeline_is_default(p);
}

bool dlqb_report_line(dlqb_report *r, const char *line, size_t len) {
  if (r->finished) return true;
  json_object *rec = dlqb_audit_record_parse(line, len);
  if (rec == NULL) return true; /* not a record: the verifier judges those */
  if (!dlqb_audit_record_in_pipeline(rec, r->p.name, r->p_default)) {
    json_object_put(rec); /* another pipeline's */
    return true;
  }
  const char *mid = dlqb_audit_record_str(rec, "message_id");
  const char *rid = dlqb_audit_record_str(rec, "request_id");
  const char *src = dlqb_audit_record_str(rec, "source_system");
  const char *time = dlqb_audit_record_str(rec, "time");
  int64_t ms = 0;
  bool ok = true;
  /* chain_start, chain_end and file_start carry no ids: not hops. A hop
   * without a usable time cannot be placed in any period. */
  if ((mid[0] == '\0' && rid[0] == '\0') ||
      dlqb_iso_time_parse(time, strlen(time), &ms) != DLQB_OK || ms < r->from_ms) {
    json_object_put(rec);
    return true;
  }
  char key[KEY_MAX];
  size_t klen = make_key(key, sizeof key, rid, src, mid);
  req *q;
  if (ms > r->to_ms) {
    /* After the period: only the story of a request already in it. */
    q = dlqb_hashset_get(r->reqs, key, klen);
  } else {
    bool added = false;
    q = dlqb_hashset_add(r->reqs, key, klen, &added);
    if (q == NULL) ok = false;
    else if (added) {
      memset(q, 0, sizeof *q);
      ok = (q->request_id = dup_clean(rid)) != NULL && (q->source_system = dup_clean(src)) != NULL;
      /* The last hop's members start empty, not NULL: a request whose
       * records all move nothing (an edit's intent alone) takes no hop. */
      char **hop[] = {&q->message_id, &q->event, &q->time, &q->actor,
                      &q->writer,     &q->from,  &q->to,   &q->reason};
      for (size_t i = 0; ok && i < sizeof hop / sizeof hop[0]; i++) ok = set_str(hop[i], "");
      q->last_ms = INT64_MIN;
    }
    if (q != NULL) q->seen = true;
  }
  /* A record that moves nothing (an edit's intent: neither from nor to)
   * does not say where the request is. */
  bool moves =
      dlqb_audit_record_str(rec, "from")[0] != '\0' || dlqb_audit_record_str(rec, "to")[0] != '\0';
  if (ok && q != NULL) {
    q->hops++;
    if (ms >= q->last_ms && moves) ok = take_hop(q, rec, ms);
  }
  json_object_put(rec);
  return ok;
}

/* ---- the derivation ---- */

typedef struct {
  dlqb_report *r;
  dlqb_status st;
  dlqb_error *err;
} finish_ctx;

static bool is_removal_with_note(const char *event) {
  return strcmp(event, "resolved") == 0 || strcmp(event, "decided_resolve") == 0;
}

static bool is_waiting_queue(const dlqb_report *r, const char *q) {
  const dlqb_pipeline *p = &r->p;
  return strcmp(q, p->work) == 0 || strncmp(q, p->retry_prefix, strlen(p->retry_prefix)) == 0;
}

/* q->detail = the formatted text (replacing any). */
__attribute__((format(printf, 2, 3))) static bool set_detail(req *q, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return set_str(&q->detail, buf);
}

/* The last hop took it out of queue after queue was read (the daemon or
 * an operator went on while the report ran): the copy the read saw is
 * gone, and the trail is newer than the read. */
static bool left_after_read(const dlqb_report *r, const req *q, const char *queue) {
  int64_t read_ms = strcmp(queue, r->p.review) == 0 ? r->read_review_ms : r->read_dlq_ms;
  return strcmp(q->from, queue) == 0 && strcmp(q->to, queue) != 0 && q->last_ms >= read_ms;
}

static void derive(void *ctx, const char *key, size_t klen, void *value) {
  finish_ctx *c = ctx;
  dlqb_report *r = c->r;
  req *q = value;
  if (!q->seen || c->st != DLQB_OK) return;
  dlqb_report_entry *e = &r->entries[r->n++];
  memset(e, 0, sizeof *e);
  e->request_id = q->request_id;
  e->source_system = q->source_system;
  e->message_id = q->message_id;
  e->last_event = q->event;
  e->last_time = q->time;
  e->last_actor = q->actor;
  e->last_writer = q->writer;
  e->hops = q->hops;
  e->queue = "";
  e->owner = "";
  e->note = "";
  bool has_id = q->request_id[0] != '\0';
  bool done = has_id && r->verified != NULL &&
              dlqb_ledger_contains(r->verified, q->request_id, q->source_system);
  e->unverified_completion = has_id && r->unverified != NULL &&
                             dlqb_ledger_contains(r->unverified, q->request_id, q->source_system);
  const held *h = dlqb_hashset_get(r->items, key, klen);
  bool ok = true;
  if (done) {
    e->state = DLQB_RS_COMPLETED;
    if (h != NULL)
      ok = set_detail(q, "a copy is still in %s (replay removes it as complete)",
                      h->review > 0 ? r->p.review : r->p.dlq);
  } else if (h != NULL && h->review > 0 && !left_after_read(r, q, r->p.review)) {
    e->state = DLQB_RS_IN_REVIEW;
    e->queue = r->p.review;
    e->owner = h->owner != NULL ? h->owner : "";
  } else if (h != NULL && h->dlq > 0 && !left_after_read(r, q, r->p.dlq)) {
    e->state = DLQB_RS_IN_DLQ;
    e->queue = r->p.dlq;
  } else if (q->to[0] == '\0' && is_removal_with_note(q->event)) {
    e->state = DLQB_RS_RESOLVED;
    e->note = q->reason;
  } else if (is_waiting_queue(r, q->to)) {
    e->state = DLQB_RS_WAITING;
    e->queue = q->to;
    ok = set_detail(q,
                    "sent to %s at %s; that queue is not read, and no completion is "
                    "recorded yet",
                    q->to, q->time);
  } else {
    e->state = DLQB_RS_UNKNOWN;
    bool review = strcmp(q->to, r->p.review) == 0;
    uint32_t others = review ? r->others_review : r->others_dlq;
    if (strcmp(q->event, "skipped_complete") == 0)
      ok = set_detail(q,
                      "removed by replay as complete at %s, but the completion ledger holds "
                      "no entry for it from a completion writer now (cut by retention, or "
                      "completion_writers changed)",
                      q->time);
    else if ((review || strcmp(q->to, r->p.dlq) == 0) &&
             q->last_ms >= (review ? r->read_review_ms : r->read_dlq_ms))
      ok = set_detail(q,
                      "recorded into %s at %s (%s), after that queue was read: it arrived "
                      "while the report was made; run again",
                      q->to, q->time, q->event);
    else if (review || strcmp(q->to, r->p.dlq) == 0)
      ok = set_detail(q, "recorded into %s at %s (%s), not found there: %s", q->to, q->time,
                      q->event,
                      others > 0 ? "held by another consumer during the read, or removed "
                                   "outside dlq-bridge; run again later"
                                 : "removed outside dlq-bridge (audit reconcile names it)");
    else if (q->to[0] == '\0')
      ok = set_detail(q, "removed from %s at %s (%s) with no note", q->from, q->time, q->event);
    else ok = set_detail(q, "last recorded going to %s at %s (%s)", q->to, q->time, q->event);
  }
  if (ok && e->unverified_completion) {
    char was[768];
    snprintf(was, sizeof was, "%s%s", q->detail != NULL ? q->detail : "",
             q->detail != NULL ? "; " : "");
    ok = set_detail(q,
                    "%sa completion entry from a user not in completion_writers exists: not "
                    "counted (anyone who may publish to the ledger could have written it)",
                    was);
  }
  e->detail = q->detail != NULL ? q->detail : "";
  if (!ok) c->st = dlqb_fail(c->err, DLQB_ENOMEM, "out of memory deriving the report");
}

typedef struct {
  const dlqb_report *r;
  unsigned long outside;
} outside_ctx;

static void count_outside(void *ctx, const char *key, size_t klen, void *value) {
  outside_ctx *c = ctx;
  const req *q = dlqb_hashset_get(c->r->reqs, key, klen);
  const held *h = value;
  if (q == NULL || !q->seen) c->outside += h->dlq + h->review;
}

static int cmp_str(const char *a, const char *b) { return strcmp(a, b); }

static int by_request(const void *pa, const void *pb) {
  const dlqb_report_entry *a = pa, *b = pb;
  int d = cmp_str(a->request_id, b->request_id);
  if (d == 0) d = cmp_str(a->source_system, b->source_system);
  if (d == 0) d = cmp_str(a->message_id, b->message_id);
  return d;
}

dlqb_status dlqb_report_finish(dlqb_report *r, dlqb_report_counts *counts, dlqb_error *err) {
  memset(counts, 0, sizeof *counts);
  if (!r->finished) {
    size_t cap = dlqb_hashset_size(r->reqs);
    r->entries = calloc(cap > 0 ? cap : 1, sizeof *r->entries);
    if (r->entries == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory deriving the report");
    finish_ctx c = {r, DLQB_OK, err};
    dlqb_hashset_each(r->reqs, derive, &c);
    if (c.st != DLQB_OK) return c.st;
    qsort(r->entries, r->n, sizeof *r->entries, by_request);
    r->finished = true;
  }
  for (size_t i = 0; i < r->n; i++) {
    counts->state[r->entries[i].state]++;
    counts->total++;
    if (r->entries[i].unverified_completion) counts->unverified++;
  }
  outside_ctx oc = {r, 0};
  dlqb_hashset_each(r->items, count_outside, &oc);
  counts->outside = oc.outside;
  return DLQB_OK;
}

const dlqb_report_entry *dlqb_report_entries(const dlqb_report *r, size_t *n) {
  *n = r->finished ? r->n : 0;
  return r->entries;
}

/* The audit report's derivation: per request, its last known state from
 * the verified trail, the queue items read and the completion ledger, and
 * its response time; per legal basis and action, the statistics (see
 * dlqb/report.h). Pure. */
#include "dlqb/report.h"

#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/calendar.h"
#include "dlqb/envelope.h"
#include "dlqb/hashset.h"
#include "dlqb/item.h"
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
  /* The response: the latest recorded legal basis and action, and the
   * earliest receipt of any of its records (received_from: static). */
  char *legal_basis, *action;
  int64_t basis_ms, action_ms;
  int64_t received_ms;
  const char *received_from;
} req;

/* What a record before `from` leaves of its request: its earliest
 * receipt, should the request turn up in the period (a request's first
 * failure often precedes the hops that put it in a report). */
typedef struct {
  int64_t received_ms;
  const char *received_from; /* static */
} early;

/* What the queues hold of one request. */
typedef struct {
  unsigned long dlq, review;
  char *owner; /* the first claimed copy's owner */
} held;

struct dlqb_report {
  int64_t from_ms, to_ms;
  dlqb_hashset *reqs, *items, *early;
  const dlqb_deadlines *deadlines; /* NULL: none */
  int64_t now_ms;
  dlqb_report_group *groups;
  size_t ngroups;
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
  r->now_ms = to_ms;
  r->reqs = dlqb_hashset_new(sizeof(req));
  r->items = dlqb_hashset_new(sizeof(held));
  r->early = dlqb_hashset_new(sizeof(early));
  if (r->reqs == NULL || r->items == NULL || r->early == NULL) {
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
  char *owned[] = {q->request_id, q->source_system, q->message_id, q->event, q->time,
                   q->actor,      q->writer,        q->from,       q->to,    q->reason,
                   q->detail,     q->legal_basis,   q->action};
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
  dlqb_hashset_free(r->early);
  free(r->groups);
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

void dlqb_report_deadlines(dlqb_report *r, const dlqb_deadlines *d, int64_t now_ms) {
  r->deadlines = d;
  r->now_ms = now_ms;
}

/* The sources a router hop names (dlqb_route_plan_receipt), as static
 * strings; one this release does not know reads as "recorded". */
static const char *receipt_source(const char *name) {
  static const char *const known[] = {"first_seen_at", "timestamp",    "x_death",
                                      "dlq_at",        "escalated_at", "bridge"};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(name, known[i]) == 0) return known[i];
  return "recorded";
}

/* The receipt one record gives: its received_at when it has one no later
 * than its own time (a hop records the receipt it saw, never later than
 * the hop), else its own time, the trail's sight of the request. */
static int64_t record_receipt(json_object *rec, int64_t ms, const char **from) {
  const char *at = dlqb_audit_record_str(rec, "received_at");
  int64_t v = 0;
  if (at[0] != '\0' && dlqb_iso_time_parse(at, strlen(at), &v) == DLQB_OK && v <= ms) {
    *from = receipt_source(dlqb_audit_record_str(rec, "received_from"));
    return v;
  }
  *from = "trail";
  return ms;
}

/* *dst (a time and its source) becomes the earlier of itself and (ms, from). */
static void take_earlier(int64_t *dst, const char **dst_from, int64_t ms, const char *from) {
  if (ms < *dst) {
    *dst = ms;
    *dst_from = from;
  }
}

/* A record before the period: remembers its request's earliest receipt. */
static bool note_early(dlqb_report *r, const char *key, size_t klen, int64_t ms, const char *from) {
  bool added = false;
  early *e = dlqb_hashset_add(r->early, key, klen, &added);
  if (e == NULL) return false;
  if (added) {
    e->received_ms = ms;
    e->received_from = from;
  } else take_earlier(&e->received_ms, &e->received_from, ms, from);
  return true;
}

/* The latest recorded legal basis and action (an edit may correct them). */
static bool take_basis(req *q, json_object *rec, int64_t ms) {
  const char *basis = dlqb_audit_record_str(rec, "legal_basis");
  const char *action = dlqb_audit_record_str(rec, "action");
  bool ok = true;
  if (basis[0] != '\0' && ms >= q->basis_ms) {
    ok = set_str(&q->legal_basis, basis);
    q->basis_ms = ms;
  }
  if (ok && action[0] != '\0' && ms >= q->action_ms) {
    ok = set_str(&q->action, action);
    q->action_ms = ms;
  }
  return ok;
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
      dlqb_iso_time_parse(time, strlen(time), &ms) != DLQB_OK) {
    json_object_put(rec);
    return true;
  }
  char key[KEY_MAX];
  size_t klen = make_key(key, sizeof key, rid, src, mid);
  const char *rfrom = "trail";
  int64_t received = record_receipt(rec, ms, &rfrom);
  if (ms < r->from_ms) {
    ok = note_early(r, key, klen, received, rfrom);
    json_object_put(rec);
    return ok;
  }
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
      ok = ok && set_str(&q->legal_basis, "") && set_str(&q->action, "");
      q->last_ms = q->basis_ms = q->action_ms = INT64_MIN;
      q->received_ms = INT64_MAX;
      q->received_from = "trail";
      /* Seen before the period: its receipt is there. */
      const early *e = dlqb_hashset_get(r->early, key, klen);
      if (e != NULL) {
        take_earlier(&q->received_ms, &q->received_from, e->received_ms, e->received_from);
        dlqb_hashset_remove(r->early, key, klen);
      }
    }
    if (q != NULL) q->seen = true;
  }
  /* A record that moves nothing (an edit's intent: neither from nor to)
   * does not say where the request is. */
  bool moves =
      dlqb_audit_record_str(rec, "from")[0] != '\0' || dlqb_audit_record_str(rec, "to")[0] != '\0';
  if (ok && q != NULL) {
    q->hops++;
    take_earlier(&q->received_ms, &q->received_from, received, rfrom);
    ok = take_basis(q, rec, ms);
    if (ok && ms >= q->last_ms && moves) ok = take_hop(q, rec, ms);
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

/* later - earlier, saturated: a completion time is a client's number (up
 * to what an AMQP timestamp holds), and a caller's "now" may be a bound. */
static int64_t ms_between(int64_t later, int64_t earlier) {
  int64_t d;
  if (__builtin_sub_overflow(later, earlier, &d)) return later > earlier ? INT64_MAX : INT64_MIN;
  return d;
}

/* The entry's response: receipt, deadline, close and how it stands. */
static void respond(const dlqb_report *r, const req *q, dlqb_report_entry *e) {
  e->legal_basis = q->legal_basis;
  e->action = q->action;
  e->received_ms = q->received_ms;
  e->received_from = q->received_from;
  e->closed_by = "";
  const dlqb_deadline_rule *rule =
      r->deadlines != NULL ? dlqb_deadlines_rule_for(r->deadlines, q->legal_basis) : NULL;
  if (rule != NULL) {
    e->has_due = true;
    e->due_ms = dlqb_deadline_due(rule, q->received_ms);
  }
  int64_t at = 0;
  if (e->state == DLQB_RS_COMPLETED) {
    /* The completion writer's clock: a time past now (and the skew) is no
     * evidence, as every time a client writes. */
    if (dlqb_ledger_completed_at(r->verified, q->request_id, q->source_system, &at) &&
        dlqb_time_usable(at, r->now_ms)) {
      e->closed = true;
      e->closed_ms = at;
      e->closed_by = "completion";
    } else {
      e->response = DLQB_RESP_NO_TIME;
      return;
    }
  } else if (e->state == DLQB_RS_RESOLVED) {
    e->closed = true;
    e->closed_ms = q->last_ms;
    e->closed_by = "resolution";
  }
  if (e->closed) {
    /* Kept as it is, negative too, but never measured: a completion
     * before its receipt says two clocks disagree, not how fast it was. */
    e->elapsed_ms = ms_between(e->closed_ms, e->received_ms);
    if (e->elapsed_ms < 0) e->response = DLQB_RESP_CLOCK;
    else if (!e->has_due) e->response = DLQB_RESP_CLOSED;
    else e->response = e->closed_ms > e->due_ms ? DLQB_RESP_LATE : DLQB_RESP_ON_TIME;
    return;
  }
  e->elapsed_ms = r->now_ms > e->received_ms ? ms_between(r->now_ms, e->received_ms) : 0;
  e->response = e->has_due && r->now_ms > e->due_ms ? DLQB_RESP_OPEN_LATE : DLQB_RESP_OPEN;
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
  respond(r, q, e);
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

/* ---- the statistics ---- */

static const char *const response_names[DLQB_RESP__COUNT] = {
    [DLQB_RESP_OPEN] = "open",       [DLQB_RESP_OPEN_LATE] = "open_late",
    [DLQB_RESP_ON_TIME] = "on_time", [DLQB_RESP_LATE] = "late",
    [DLQB_RESP_CLOSED] = "closed",   [DLQB_RESP_NO_TIME] = "no_time",
    [DLQB_RESP_CLOCK] = "clock",
};

const char *dlqb_report_response_name(dlqb_report_response x) {
  return (x >= 0 && x < DLQB_RESP__COUNT) ? response_names[x] : "open";
}

static bool measured(dlqb_report_response x) {
  return x == DLQB_RESP_ON_TIME || x == DLQB_RESP_LATE || x == DLQB_RESP_CLOSED;
}

static int by_basis(const void *pa, const void *pb) {
  const dlqb_report_group *a = pa, *b = pb;
  int d = strcmp(a->legal_basis, b->legal_basis);
  return d != 0 ? d : strcmp(a->action, b->action);
}

static int by_ms(const void *pa, const void *pb) {
  int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
  return a < b ? -1 : a > b;
}

/* The median of v[0..n) (sorted; n > 0): the middle one, or the mean of
 * the two middle ones, to the millisecond. */
static int64_t median_of(const int64_t *v, size_t n) {
  if (n % 2 == 1) return v[n / 2];
  int64_t a = v[n / 2 - 1], b = v[n / 2];
  return a + (b - a) / 2; /* b >= a: no overflow */
}

/* The groups of the entries (sorted by basis and action) and each one's
 * counts, median and mean. */
static bool make_groups(dlqb_report *r) {
  r->groups = calloc(r->n > 0 ? r->n : 1, sizeof *r->groups);
  size_t *of = calloc(r->n > 0 ? r->n : 1, sizeof *of);
  int64_t *vals = calloc(r->n > 0 ? r->n : 1, sizeof *vals);
  size_t *fill = NULL;
  bool ok = r->groups != NULL && of != NULL && vals != NULL;
  for (size_t i = 0; ok && i < r->n; i++)
    r->groups[i] = (dlqb_report_group){.legal_basis = r->entries[i].legal_basis,
                                       .action = r->entries[i].action};
  if (ok && r->n > 0) {
    qsort(r->groups, r->n, sizeof *r->groups, by_basis);
    size_t k = 1;
    for (size_t i = 1; i < r->n; i++)
      if (by_basis(&r->groups[i], &r->groups[k - 1]) != 0) r->groups[k++] = r->groups[i];
    r->ngroups = k;
    /* A few groups out of many requests: give the rest back before the
     * document is built. */
    dlqb_report_group *fit = realloc(r->groups, k * sizeof *r->groups);
    if (fit != NULL) r->groups = fit;
  }
  for (size_t i = 0; ok && i < r->n; i++) {
    const dlqb_report_entry *e = &r->entries[i];
    dlqb_report_group want = {.legal_basis = e->legal_basis, .action = e->action};
    dlqb_report_group *g = bsearch(&want, r->groups, r->ngroups, sizeof *g, by_basis);
    of[i] = (size_t)(g - r->groups);
    g->requests++;
    g->received += e->received_ms >= r->from_ms && e->received_ms <= r->to_ms;
    g->completed += e->state == DLQB_RS_COMPLETED;
    g->resolved += e->state == DLQB_RS_RESOLVED;
    g->resp[e->response]++;
    g->measured += measured(e->response);
  }
  /* Each group's measured times side by side in vals, then sorted. */
  ok = ok && (fill = calloc(r->ngroups > 0 ? r->ngroups : 1, sizeof *fill)) != NULL;
  for (size_t g = 0, at = 0; ok && g < r->ngroups; g++) {
    fill[g] = at;
    at += r->groups[g].measured;
  }
  for (size_t i = 0; ok && i < r->n; i++)
    if (measured(r->entries[i].response)) vals[fill[of[i]]++] = r->entries[i].elapsed_ms;
  for (size_t g = 0, at = 0; ok && g < r->ngroups; g++) {
    dlqb_report_group *gr = &r->groups[g];
    gr->rule = r->deadlines != NULL ? dlqb_deadlines_rule_for(r->deadlines, gr->legal_basis) : NULL;
    if (gr->measured == 0) continue;
    qsort(vals + at, gr->measured, sizeof *vals, by_ms);
    gr->median_ms = median_of(vals + at, gr->measured);
    /* In long double: a sum of many long times may pass what int64 holds. */
    long double sum = 0;
    for (size_t i = 0; i < gr->measured; i++) sum += (long double)vals[at + i];
    gr->mean_ms = (int64_t)llroundl(sum / (long double)gr->measured);
    at += gr->measured;
  }
  free(fill);
  free(vals);
  free(of);
  return ok;
}

/* Completions dated in the period of requests not in the report. */
typedef struct {
  const dlqb_report *r;
  dlqb_report_counts *k;
} outside_done_ctx;

static void count_outside_done(void *ctx, const char *request_id, const char *source_system) {
  outside_done_ctx *c = ctx;
  const dlqb_report *r = c->r;
  char key[KEY_MAX];
  size_t klen = make_key(key, sizeof key, request_id, source_system, "");
  if (dlqb_hashset_get(r->reqs, key, klen) != NULL) return;
  int64_t at = 0;
  bool timed = dlqb_ledger_completed_at(r->verified, request_id, source_system, &at);
  bool in_period = timed && at >= r->from_ms && at <= r->to_ms;
  if (dlqb_hashset_get(r->early, key, klen) != NULL) c->k->completed_before_period += in_period;
  else if (!timed) c->k->completed_never_in_trail_no_time++;
  else c->k->completed_never_in_trail += in_period;
}

const dlqb_report_group *dlqb_report_groups(const dlqb_report *r, size_t *n) {
  *n = r->finished ? r->ngroups : 0;
  return r->groups;
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
    if (!make_groups(r)) return dlqb_fail(err, DLQB_ENOMEM, "out of memory deriving the report");
    r->finished = true;
  }
  if (r->verified != NULL) {
    outside_done_ctx oc = {r, counts};
    dlqb_ledger_each(r->verified, count_outside_done, &oc);
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

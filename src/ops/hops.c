/* One task's audit history: the hops of a request_id or message_id, from
 * the lines a verifier accepts, in time order, each as one line. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/envelope.h"
#include "dlqb/ops.h"
#include "dlqb/text.h"

/* A member for a person to read: "?" when the record lacks it. */
static const char *shown(json_object *rec, const char *key) {
  const char *v = dlqb_audit_record_str(rec, key);
  return v[0] != '\0' ? v : "?";
}

/* A chain_end's chain, into c->closed (its members are hex: no escapes). */
static void note_closed(ops_hops *c, const char *line, size_t len) {
  static const char key[] = "\"chain\":\"";
  const char *at = strstr(line, key);
  if (at == NULL || (size_t)(at - line) >= len) return;
  at += sizeof key - 1;
  const char *end = strchr(at, '"');
  if (end == NULL) return;
  if (c->closed == NULL && (c->closed = dlqb_hashset_new(0)) == NULL) return;
  (void)dlqb_hashset_add(c->closed, at, (size_t)(end - at), NULL);
}

bool ops_hops_collect(void *arg, const char *line, size_t len) {
  ops_hops *c = arg;
  if (strstr(line, "\"event\":\"chain_end\"") != NULL) note_closed(c, line, len);
  if (!c->filter_set) {
    dlqb_audit_filter_init(&c->filter, c->request_id, c->message_id);
    const dlqb_pipeline *p = c->pipeline;
    dlqb_audit_filter_pipeline(&c->filter, p->name, dlqb_pipeline_is_default(p));
    c->filter_set = true;
  }
  if (!dlqb_audit_filter_match(&c->filter, line, len)) return true;
  json_object *rec = dlqb_audit_record_parse(line, len);
  if (rec == NULL) return false; /* a matching line parsed once already: memory */
  if (c->n == c->cap) {
    size_t ncap = c->cap ? c->cap * 2 : 16;
    json_object **grown = realloc(c->hops, ncap * sizeof *grown);
    if (grown == NULL) {
      json_object_put(rec);
      return false;
    }
    c->hops = grown;
    c->cap = ncap;
  }
  c->hops[c->n++] = rec;
  return true;
}

/* Time order across writers; within one writer the log order already is
 * (equal times keep it: the sort below is stable by index). */
static int by_time(const void *pa, const void *pb) {
  json_object *a = *(json_object *const *)pa, *b = *(json_object *const *)pb;
  return strcmp(dlqb_audit_record_str(a, "time"), dlqb_audit_record_str(b, "time"));
}

/* The hop that ended hops[i], an intent: the first later hop of its
 * message that took the message out of the queue its reason names ("FROM
 * -> TO"), or abandoned a move out of it (move_abandoned: the copy never
 * left); n when none did. */
static size_t move_end(json_object **hops, size_t n, size_t i) {
  const char *reason = dlqb_audit_record_str(hops[i], "reason");
  const char *arrow = strstr(reason, " -> ");
  if (arrow == NULL) return n;
  size_t fl = (size_t)(arrow - reason);
  const char *id = dlqb_audit_record_str(hops[i], "message_id");
  for (size_t k = i + 1; k < n; k++) {
    /* The queue it took the message out of: an abandoned move's is in its
     * reason, as the intent's. */
    const char *from = dlqb_audit_record_str(hops[k], "from");
    size_t len = strlen(from);
    if (strcmp(dlqb_audit_record_str(hops[k], "event"), "move_abandoned") == 0) {
      from = dlqb_audit_record_str(hops[k], "reason");
      const char *a = strstr(from, " -> ");
      len = a != NULL ? (size_t)(a - from) : 0;
    }
    if (len == fl && strncmp(from, reason, fl) == 0 &&
        strcmp(dlqb_audit_record_str(hops[k], "message_id"), id) == 0)
      return k;
  }
  return n;
}

static void mark_moves(json_object **hops, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(dlqb_audit_record_str(hops[i], "event"), "move_started") == 0)
      json_object_object_add(hops[i], OPS_HOP_MOVE_ENDED,
                             json_object_new_boolean(move_end(hops, n, i) < n));
}

void ops_hops_sort(json_object **hops, size_t n) {
  /* Insertion sort: a task has a handful of hops. */
  for (size_t i = 1; i < n; i++) {
    json_object *h = hops[i];
    size_t j = i;
    while (j > 0 && by_time(&hops[j - 1], &h) > 0) {
      hops[j] = hops[j - 1];
      j--;
    }
    hops[j] = h;
  }
  mark_moves(hops, n);
}

void ops_hops_order(ops_hops *c) {
  ops_hops_sort(c->hops, c->n);
  for (size_t i = 0; i < c->n; i++) {
    if (strcmp(dlqb_audit_record_str(c->hops[i], "event"), "move_started") != 0) continue;
    size_t k = move_end(c->hops, c->n, i);
    if (k == c->n || strcmp(dlqb_audit_record_str(c->hops[k], "event"), "move_abandoned") == 0)
      continue;
    const char *chain = dlqb_audit_record_str(c->hops[k], "chain");
    bool closed = c->closed != NULL && dlqb_hashset_get(c->closed, chain, strlen(chain)) != NULL;
    if (!closed)
      json_object_object_add(c->hops[k], OPS_HOP_RUN_ENDED, json_object_new_boolean(false));
  }
}

/* A record's text as a terminal may show it: the log is verified, but its
 * reasons came from messages. */
static const char *clean(const char *v, char *buf, size_t cap) {
  dlqb_text_sanitize(buf, cap, v, strlen(v));
  return buf;
}

char *ops_hop_text(json_object *h, char *out, size_t len) {
  json_object *attempt;
  char b1[DLQB_LAST_ERROR_MAX + 1], b2[DLQB_LAST_ERROR_MAX + 1], b3[256], b4[256];
  const char *cause = dlqb_audit_record_str(h, "cause");
  const char *reason = dlqb_audit_record_str(h, "reason");
  const char *from = dlqb_audit_record_str(h, "from"), *to = dlqb_audit_record_str(h, "to");
  size_t at = 0;
#define PUT(...)                                                                                   \
  do {                                                                                             \
    int n_ = snprintf(out + at, at < len ? len - at : 0, __VA_ARGS__);                             \
    if (n_ > 0) at = at + (size_t)n_ < len ? at + (size_t)n_ : (len ? len - 1 : 0);                \
  } while (0)
  out[0] = '\0';
  PUT("%s  %-16s ", clean(shown(h, "time"), b2, sizeof b2),
      clean(shown(h, "event"), b3, sizeof b3));
  /* A hop without a destination (resolve, skip as complete) removed the
   * message: no arrow pointing nowhere. */
  if (from[0] != '\0' && to[0] != '\0')
    PUT("%s -> %s", clean(from, b1, sizeof b1), clean(to, b4, sizeof b4));
  else if (strcmp(dlqb_audit_record_str(h, "event"), "move_abandoned") == 0) {
    /* Its run ended before the copy was sent: the original counts. */
    PUT("%s, for %s  ended, no copy sent", clean(reason, b1, sizeof b1),
        clean(shown(h, "for"), b2, sizeof b2));
    reason = "";
  } else if (strcmp(dlqb_audit_record_str(h, "event"), "move_started") == 0) {
    /* A mover's intent: its queues are in its reason ("FROM -> TO"). */
    json_object *ended;
    bool open =
        json_object_object_get_ex(h, OPS_HOP_MOVE_ENDED, &ended) && !json_object_get_boolean(ended);
    PUT("%s, for %s", clean(reason, b1, sizeof b1), clean(shown(h, "for"), b2, sizeof b2));
    if (open) PUT("  DID NOT END: the original counts; a copy may also be in its destination");
    reason = "";
  } else if (from[0] == '\0' && to[0] == '\0') /* an edit's intent, or its end without a copy */
    PUT("%s", strcmp(dlqb_audit_record_str(h, "event"), "edit_abandoned") == 0
                  ? "ended, no copy sent"
                  : "begins, nothing sent yet");
  else if (from[0] != '\0') PUT("removed from %s", clean(from, b1, sizeof b1));
  else PUT("into %s", clean(to[0] ? to : "?", b4, sizeof b4));
  json_object *run;
  if (json_object_object_get_ex(h, OPS_HOP_RUN_ENDED, &run) && !json_object_get_boolean(run))
    PUT("  ITS RUN DID NOT END: if the original is back in %s, this copy counts; resolve the "
        "original",
        clean(from[0] ? from : "?", b1, sizeof b1));
  /* null (the item had no attempt header) is not attempt 0 */
  if (json_object_object_get_ex(h, "attempt", &attempt) &&
      json_object_is_type(attempt, json_type_int))
    PUT("  attempt %lld", (long long)json_object_get_int64(attempt));
  if (cause[0] != '\0') PUT("  cause %s", clean(cause, b2, sizeof b2));
  if (reason[0] != '\0') PUT("  reason \"%s\"", clean(reason, b1, sizeof b1));
  PUT("  by %s", clean(shown(h, "actor"), b3, sizeof b3));
  PUT(" (%s)", clean(shown(h, "writer"), b4, sizeof b4));
  const char *pipeline = dlqb_audit_record_str(h, "pipeline");
  if (pipeline[0] != '\0') PUT("  pipeline %s", clean(pipeline, b1, sizeof b1));
  const char *deaths = dlqb_audit_record_str(h, "x_death");
  if (deaths[0] != '\0') PUT("  x-death [%s]", clean(deaths, b1, sizeof b1));
  json_object *dc;
  if (json_object_object_get_ex(h, "x_delivery_count", &dc) &&
      json_object_is_type(dc, json_type_int))
    PUT("  x-delivery-count %lld", (long long)json_object_get_int64(dc));
  json_object *edit;
  if (json_object_object_get_ex(h, "edit", &edit) && json_object_is_type(edit, json_type_object)) {
    /* The edit hop (docs/audit.md): who, each field before and after, the
     * body's hashes. Every value came from a message or an operator. */
    const char *parent = dlqb_audit_record_str(edit, "parent");
    const char *approver = dlqb_audit_record_str(edit, "approver");
    PUT("  edit %s of %s", clean(shown(edit, "edit_id"), b1, sizeof b1),
        parent[0] ? clean(parent, b2, sizeof b2) : "the original");
    const char *editor = dlqb_audit_record_str(edit, "editor");
    PUT("  editor %s", clean(editor[0] ? editor : shown(h, "broker_user"), b3, sizeof b3));
    if (approver[0] != '\0') PUT("  approver %s", clean(approver, b3, sizeof b3));
    json_object *fields, *size;
    if (json_object_object_get_ex(edit, "fields", &fields) &&
        json_object_is_type(fields, json_type_array)) {
      for (size_t i = 0; i < json_object_array_length(fields); i++) {
        json_object *f = json_object_array_get_idx(fields, i), *v;
        bool hashed = json_object_object_get_ex(f, "old_sha256", &v) ||
                      json_object_object_get_ex(f, "new_sha256", &v);
        const char *ok = hashed ? "old_sha256" : "old", *nk = hashed ? "new_sha256" : "new";
        PUT("  %s ", clean(shown(f, "field"), b1, sizeof b1));
        if (json_object_object_get_ex(f, ok, &v) && json_object_is_type(v, json_type_string))
          PUT(hashed ? "sha256 %s" : "\"%s\"", clean(json_object_get_string(v), b2, sizeof b2));
        else PUT("(absent)");
        PUT(" -> ");
        if (json_object_object_get_ex(f, nk, &v) && json_object_is_type(v, json_type_string))
          PUT(hashed ? "sha256 %s" : "\"%s\"", clean(json_object_get_string(v), b2, sizeof b2));
        else PUT("(absent)");
      }
    }
    const char *before = dlqb_audit_record_str(edit, "body_sha256_before");
    const char *after = dlqb_audit_record_str(edit, "body_sha256_after");
    long long sb = json_object_object_get_ex(edit, "body_size_before", &size)
                       ? (long long)json_object_get_int64(size)
                       : -1;
    long long sa = json_object_object_get_ex(edit, "body_size_after", &size)
                       ? (long long)json_object_get_int64(size)
                       : -1;
    PUT("  body %lld bytes sha256 %s", sb, clean(before, b1, sizeof b1));
    if (strcmp(before, after) == 0) PUT(" (unchanged)");
    else PUT(" -> %lld bytes sha256 %s", sa, clean(after, b2, sizeof b2));
  }
#undef PUT
  return out;
}

void ops_hops_free(ops_hops *c) {
  for (size_t i = 0; i < c->n; i++) json_object_put(c->hops[i]);
  free(c->hops);
  c->hops = NULL;
  c->n = c->cap = 0;
  dlqb_hashset_free(c->closed);
  c->closed = NULL;
}

dlqb_status ops_trail_verify(const dlqb_config *cfg, dlqb_audit_visit_fn visit, void *ctx,
                             dlqb_error *err) {
  dlqb_audit_keyring *ring = dlqb_audit_keyring_new();
  char **files = NULL;
  size_t nfiles = 0;
  char seal[DLQB_CONFIG_STR_MAX + 16];
  dlqb_audit_summary sum;
  dlqb_status st = ring == NULL ? dlqb_fail(err, DLQB_ENOMEM, "out of memory")
                                : dlqb_audit_keyring_add(ring, cfg->audit.public_keys, err);
  if (st == DLQB_OK) st = dlqb_audit_list_files(cfg->audit.log, &files, &nfiles, err);
  if (st == DLQB_OK) {
    snprintf(seal, sizeof seal, "%s%s", cfg->audit.log, DLQB_AUDIT_SEAL_SUFFIX);
    st = dlqb_audit_verify_files(ring, (const char *const *)files, nfiles, seal, 0, visit, ctx,
                                 &sum, err);
  }
  dlqb_audit_files_free(files, nfiles);
  dlqb_audit_keyring_free(ring);
  return st;
}

dlqb_status ops_hops_read(const dlqb_config *cfg, ops_hops *c, dlqb_error *err) {
  dlqb_status st = ops_trail_verify(cfg, ops_hops_collect, c, err);
  if (st == DLQB_OK) ops_hops_order(c);
  return st;
}

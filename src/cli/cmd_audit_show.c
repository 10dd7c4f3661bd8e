/* dlq-bridge audit show: one request's recorded path, from a verified log. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_cli.h"
#include "dlqb/envelope.h"
#include "dlqb/text.h"

static const cli_flag show_flags[] = {
    {"id", true, "VALUE",
     "the hops of the task(s) whose first identity field (dsr: request_id) is VALUE"},
    {"request-id", true, "ID", "the hops of the task(s) with this request_id (dsr)"},
    {"message-id", true, "ID", "the hops of the message with this message_id"},
    {"json", false, NULL, "print JSON for scripts instead of text"},
    LOG_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_spec show_spec = {
    .name = "audit show",
    .summary = "the recorded path of one task or message, from a verified log",
    .usage = "dlq-bridge audit show (--id VALUE | --request-id ID | --message-id ID)\n"
             "       [FILE...] [--json]"
             "       [--seal FILE | --no-seal] [--partial] [settings]",
    .details = "Verifies the log as `audit verify` does and, only when it is intact, lists\n"
               "every hop recorded for the task (retries, dead-lettering, replays, escalation,\n"
               "resolution) in time order, with who acted. Both filters given: both must match.\n"
               "Only the hops of the pipeline served (--pipeline): --id is its profile's first\n"
               "identity field (item_id for redaction), --request-id dsr's.\n" FILES_DETAILS
               "Exit status: 0 intact (also when nothing was recorded for the task); 1 not\n"
               "intact or unreadable, and no hop is shown; 2 usage or configuration error.",
    .flags = show_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_AUDIT_READ, CLI_USES_LOG, NULL},
};

/* A member for a person to read: "?" when the record lacks it. */
static const char *shown(json_object *rec, const char *key) {
  const char *v = dlqb_audit_record_str(rec, key);
  return v[0] != '\0' ? v : "?";
}

bool audit_hops_collect(void *arg, const char *line, size_t len) {
  audit_hops *c = arg;
  if (!c->filter_set) {
    dlqb_audit_filter_init(&c->filter, c->request_id, c->message_id);
    const dlqb_pipeline *p = cli_pipeline();
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

void audit_hops_sort(json_object **hops, size_t n) {
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
}

/* A record's text as a terminal may show it: the log is verified, but its
 * reasons came from messages. */
static const char *clean(const char *v, char *buf, size_t cap) {
  dlqb_text_sanitize(buf, cap, v, strlen(v));
  return buf;
}

char *audit_hop_text(json_object *h, char *out, size_t len) {
  json_object *attempt;
  char b1[DLQB_LAST_ERROR_MAX + 1], b2[DLQB_LAST_ERROR_MAX + 1], b3[256], b4[256];
  const char *cause = dlqb_audit_record_str(h, "cause");
  const char *reason = dlqb_audit_record_str(h, "reason");
  const char *from = dlqb_audit_record_str(h, "from"), *to = dlqb_audit_record_str(h, "to");
  size_t at = 0;
#define PUT(...)                                                              \
  do {                                                                        \
    int n_ = snprintf(out + at, at < len ? len - at : 0, __VA_ARGS__);         \
    if (n_ > 0) at = at + (size_t)n_ < len ? at + (size_t)n_ : (len ? len - 1 : 0); \
  } while (0)
  out[0] = '\0';
  PUT("%s  %-16s ", clean(shown(h, "time"), b2, sizeof b2), clean(shown(h, "event"), b3, sizeof b3));
  /* A hop without a destination (resolve, skip as complete) removed the
   * message: no arrow pointing nowhere. */
  if (from[0] != '\0' && to[0] != '\0')
    PUT("%s -> %s", clean(from, b1, sizeof b1), clean(to, b4, sizeof b4));
  else if (from[0] == '\0' && to[0] == '\0') /* an edit's intent, or its end without a copy */
    PUT("%s", strcmp(dlqb_audit_record_str(h, "event"), "edit_abandoned") == 0
                  ? "ended, no copy sent"
                  : "begins, nothing sent yet");
  else if (from[0] != '\0') PUT("removed from %s", clean(from, b1, sizeof b1));
  else PUT("into %s", clean(to[0] ? to : "?", b4, sizeof b4));
  /* null (the item had no attempt header) is not attempt 0 */
  if (json_object_object_get_ex(h, "attempt", &attempt) && json_object_is_type(attempt, json_type_int))
    PUT("  attempt %lld", (long long)json_object_get_int64(attempt));
  if (cause[0] != '\0') PUT("  cause %s", clean(cause, b2, sizeof b2));
  if (reason[0] != '\0') PUT("  reason \"%s\"", clean(reason, b1, sizeof b1));
  PUT("  by %s", clean(shown(h, "actor"), b3, sizeof b3));
  PUT(" (%s)", clean(shown(h, "writer"), b4, sizeof b4));
  const char *pipeline = dlqb_audit_record_str(h, "pipeline");
  if (pipeline[0] != '\0') PUT("  pipeline %s", clean(pipeline, b1, sizeof b1));
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
                       ? (long long)json_object_get_int64(size) : -1;
    long long sa = json_object_object_get_ex(edit, "body_size_after", &size)
                       ? (long long)json_object_get_int64(size) : -1;
    PUT("  body %lld bytes sha256 %s", sb, clean(before, b1, sizeof b1));
    if (strcmp(before, after) == 0) PUT(" (unchanged)");
    else PUT(" -> %lld bytes sha256 %s", sa, clean(after, b2, sizeof b2));
  }
#undef PUT
  return out;
}

static void print_hop_text(json_object *h) {
  /* An edit hop adds up to eight fields of two values each. */
  char line[16 * DLQB_LAST_ERROR_MAX + 1024];
  printf("%s\n", audit_hop_text(h, line, sizeof line));
}

static void print_show(const audit_opts *o, json_object **hops, size_t n,
                       const dlqb_audit_summary *sum, bool sealed) {
  if (o->json) {
    json_object *out = json_object_new_object();
    json_object *arr = json_object_new_array();
    json_object_object_add(out, "intact", json_object_new_boolean(1));
    json_object_object_add(out, "records", json_object_new_int64((int64_t)sum->records));
    json_object_object_add(out, "files", json_object_new_int64((int64_t)sum->files));
    json_object_object_add(out, "seal_checked", json_object_new_boolean(sealed));
    if (o->request_id != NULL)
      json_object_object_add(out, cli_pipeline()->profile.fields[0].name,
                             json_object_new_string(o->request_id));
    if (o->message_id != NULL)
      json_object_object_add(out, "message_id", json_object_new_string(o->message_id));
    for (size_t i = 0; i < n; i++) json_object_array_add(arr, json_object_get(hops[i]));
    json_object_object_add(out, "hops", arr);
    printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN |
                                                           JSON_C_TO_STRING_NOSLASHESCAPE));
    cli_json_printed();
    json_object_put(out);
    return;
  }
  audit_print_summary(sum, sealed);
  const char *what = o->request_id != NULL ? cli_pipeline()->profile.fields[0].name : "message_id";
  const char *id = o->request_id != NULL ? o->request_id : o->message_id;
  if (n == 0) {
    printf("no hop recorded for %s %s\n", what, id);
    return;
  }
  printf("%zu hop%s recorded for %s %s:\n", n, n == 1 ? "" : "s", what, id);
  for (size_t i = 0; i < n; i++) print_hop_text(hops[i]);
}

void audit_hops_free(audit_hops *c) {
  for (size_t i = 0; i < c->n; i++) json_object_put(c->hops[i]);
  free(c->hops);
  c->hops = NULL;
  c->n = c->cap = 0;
}

typedef struct {
  audit_hops hops;
  const audit_opts *o;
} show_ctx;

/* The options are parsed before the first line comes: take the ids then. */
static bool collect_show(void *arg, const char *line, size_t len) {
  show_ctx *c = arg;
  if (!c->hops.filter_set) {
    c->hops.request_id = c->o->request_id;
    c->hops.message_id = c->o->message_id;
  }
  return audit_hops_collect(&c->hops, line, len);
}

int audit_show(int argc, char **argv) {
  audit_opts o = {.require_id = true};
  show_ctx c = {.o = &o};
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc = audit_load_and_verify(&show_spec, argc, argv, &o, collect_show, &c, &sum, &sealed, &help);
  if (help) {
    cli_print_help(&show_spec, stdout);
  } else if (rc == EXIT_OK) {
    audit_hops_sort(c.hops.hops, c.hops.n);
    print_show(&o, c.hops.hops, c.hops.n, &sum, sealed);
  }
  audit_hops_free(&c.hops);
  return rc;
}


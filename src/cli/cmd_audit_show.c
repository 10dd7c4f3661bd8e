/* dlq-bridge audit show: one request's recorded path, from a verified log. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_cli.h"
#include "dlqb/calendar.h"
#include "dlqb/envelope.h"
#include "dlqb/ledger.h"
#include "dlqb/text.h"
#include "ops_cli.h"

/* How long the completion ledger may be quiet before its read ends. */
#define LEDGER_QUIET_MS 2000

static const cli_flag show_flags[] = {
    {"id", true, "VALUE",
     "the hops of the task(s) whose first identity field (dsr: request_id) is VALUE"},
    {"request-id", true, "ID", "the hops of the task(s) with this request_id (dsr)"},
    {"message-id", true, "ID", "the hops of the message with this message_id"},
    {"json", false, NULL, "print JSON for scripts instead of text"},
    {"offline", false, NULL, "do not read the completion ledger (no broker needed)"},
    LOG_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_spec show_spec = {
    .name = "audit show",
    .summary = "the recorded path of one task or message, from a verified log",
    .usage = "dlq-bridge audit show (--id VALUE | --request-id ID | --message-id ID)\n"
             "       [FILE...] [--json] [--offline]"
             "       [--seal FILE | --no-seal] [--partial] [settings]",
    .details = "Verifies the log as `audit verify` does and, only when it is intact, lists\n"
               "every hop recorded for the task (retries, dead-lettering, replays, escalation,\n"
               "resolution) in time order, with who acted. Both filters given: both must match.\n"
               "Only the hops of the pipeline served (--pipeline): --id is its profile's first\n"
               "identity field (item_id for redaction), --request-id dsr's.\n"
               "The story ends with the completion ledger (dsr.completed, entries of\n"
               "completion_writers only): completed and when, or not completed, or why it\n"
               "could not be read (--offline: not read).\n" FILES_DETAILS
               "Exit status: 0 intact (also when nothing was recorded for the task); 1 not\n"
               "intact or unreadable, and no hop is shown; 2 usage or configuration error.",
    .flags = show_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_AUDIT_READ, CLI_USES_LOG, CLI_USES_BROKER,
                                  "completion_writers", NULL},
};

/* The end of the story: whether the ledger has the task(s) the hops name. */
typedef struct {
  const dlqb_config *cfg;
  bool offline;
  bool read;                /* the ledger was read */
  char why[DLQB_ERROR_MAX]; /* why not, when not read and not offline */
  dlqb_ledger *ledger;
} show_ledger;

static int take_cfg(void *ctx, const dlqb_config *cfg) {
  ((show_ledger *)ctx)->cfg = cfg;
  return EXIT_OK;
}

static void read_ledger(show_ledger *sl) {
  if (sl->offline || sl->cfg == NULL) return;
  if (sl->cfg->ledger.completion_writers[0] == '\0') {
    snprintf(sl->why, sizeof sl->why, "completion_writers is not set: no entry counts");
    return;
  }
  sl->ledger = dlqb_ledger_new();
  dlqb_ledger_stats st;
  dlqb_error err;
  if (sl->ledger == NULL) snprintf(sl->why, sizeof sl->why, "out of memory");
  else if (dlqb_ledger_peek(sl->cfg, NULL, cli_pipeline()->completed, "", sl->ledger,
                            LEDGER_QUIET_MS, &st, &err) != DLQB_OK)
    snprintf(sl->why, sizeof sl->why, "%s", err.msg);
  else sl->read = true;
}

/* "completed 2026-...Z" / "not completed" / NULL (not known: sl->why). */
static const char *completion_of(const show_ledger *sl, const char *id, const char *source,
                                 char *buf, size_t len) {
  if (!sl->read) return NULL;
  if (!dlqb_ledger_contains(sl->ledger, id, source)) return "not completed";
  int64_t at;
  char iso[DLQB_ISO_TIME_MAX];
  if (dlqb_ledger_completed_at(sl->ledger, id, source, &at))
    snprintf(buf, len, "completed %s", dlqb_iso_time(at, iso, sizeof iso));
  else snprintf(buf, len, "completed");
  return buf;
}

static void print_hop_text(json_object *h) {
  /* An edit hop adds up to eight fields of two values each. */
  char line[16 * DLQB_LAST_ERROR_MAX + 1024];
  cli_print_wrapped(stdout, ops_hop_text(h, line, sizeof line), cli_output_width(false));
}

/* Each task the hops name once (its request_id and source_system), in the
 * order they first appear; fn gets each. */
static void each_task(json_object **hops, size_t n,
                      void (*fn)(void *ctx, const char *id, const char *source), void *ctx) {
  for (size_t i = 0; i < n; i++) {
    const char *id = dlqb_audit_record_str(hops[i], "request_id"),
               *src = dlqb_audit_record_str(hops[i], "source_system");
    bool seen = false;
    for (size_t k = 0; k < i && !seen; k++)
      seen = strcmp(dlqb_audit_record_str(hops[k], "request_id"), id) == 0 &&
             strcmp(dlqb_audit_record_str(hops[k], "source_system"), src) == 0;
    if (!seen && id[0] != '\0') fn(ctx, id, src);
  }
}

typedef struct {
  const show_ledger *sl;
  json_object *arr; /* --json: the tasks' completions */
} ending_ctx;

static void ending_text(void *ctx, const char *id, const char *source) {
  const show_ledger *sl = ((ending_ctx *)ctx)->sl;
  char buf[128], s1[DLQB_ID_MAX], s2[DLQB_ID_MAX];
  const char *c = completion_of(sl, id, source, buf, sizeof buf);
  dlqb_text_sanitize(s1, sizeof s1, id, strlen(id));
  dlqb_text_sanitize(s2, sizeof s2, source, strlen(source));
  if (c != NULL) printf("%s (%s): %s (%s)\n", s1, s2, c, cli_pipeline()->completed);
  else printf("%s (%s): completion not known: %s\n", s1, s2, sl->why);
}

static void ending_json(void *ctx, const char *id, const char *source) {
  ending_ctx *e = ctx;
  char buf[128];
  bool read = e->sl->read;
  json_object *t = json_object_new_object();
  json_object_object_add(t, "request_id", json_object_new_string(id));
  json_object_object_add(t, "source_system", json_object_new_string(source));
  json_object_object_add(
      t, "completed",
      read ? json_object_new_boolean(dlqb_ledger_contains(e->sl->ledger, id, source)) : NULL);
  int64_t at;
  json_object_object_add(t, "completed_at",
                         read && dlqb_ledger_completed_at(e->sl->ledger, id, source, &at)
                             ? json_object_new_string(dlqb_iso_time(at, buf, sizeof buf))
                             : NULL);
  json_object_object_add(t, "why_unknown",
                         !read && e->sl->why[0] ? json_object_new_string(e->sl->why) : NULL);
  json_object_array_add(e->arr, t);
}

static void print_show(const audit_opts *o, json_object **hops, size_t n,
                       const dlqb_audit_summary *sum, bool sealed, const show_ledger *sl) {
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
    if (!sl->offline) {
      ending_ctx e = {.sl = sl, .arr = json_object_new_array()};
      each_task(hops, n, ending_json, &e);
      json_object_object_add(out, "completion", e.arr);
    }
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
  if (sl->offline) return;
  ending_ctx e = {.sl = sl};
  each_task(hops, n, ending_text, &e);
}

typedef struct {
  ops_hops hops;
  const audit_opts *o;
} show_ctx;

/* The options are parsed before the first line comes: take the ids then. */
static bool collect_show(void *arg, const char *line, size_t len) {
  show_ctx *c = arg;
  if (!c->hops.filter_set) {
    c->hops.request_id = c->o->request_id;
    c->hops.message_id = c->o->message_id;
    c->hops.pipeline = cli_pipeline();
  }
  return ops_hops_collect(&c->hops, line, len);
}

static dlqb_status show_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  (void)value;
  (void)err;
  if (strcmp(flag, "offline") == 0) ((show_ledger *)ctx)->offline = true;
  return DLQB_OK;
}

int audit_show(int argc, char **argv) {
  show_ledger sl = {0};
  audit_opts o = {.require_id = true,
                  .prepare = take_cfg,
                  .prepare_ctx = &sl,
                  .extra = show_flag,
                  .extra_ctx = &sl};
  show_ctx c = {.o = &o};
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc =
      audit_load_and_verify(&show_spec, argc, argv, &o, collect_show, &c, &sum, &sealed, &help);
  if (help) {
    cli_print_help(&show_spec, stdout);
  } else if (rc == EXIT_OK) {
    ops_hops_order(&c.hops);
    if (c.hops.n > 0) read_ledger(&sl);
    print_show(&o, c.hops.hops, c.hops.n, &sum, sealed, &sl);
  }
  dlqb_ledger_free(sl.ledger);
  ops_hops_free(&c.hops);
  return rc;
}

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

static void print_hop_text(json_object *h) {
  /* An edit hop adds up to eight fields of two values each. */
  char line[16 * DLQB_LAST_ERROR_MAX + 1024];
  printf("%s\n", ops_hop_text(h, line, sizeof line));
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

int audit_show(int argc, char **argv) {
  audit_opts o = {.require_id = true};
  show_ctx c = {.o = &o};
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc =
      audit_load_and_verify(&show_spec, argc, argv, &o, collect_show, &c, &sum, &sealed, &help);
  if (help) {
    cli_print_help(&show_spec, stdout);
  } else if (rc == EXIT_OK) {
    ops_hops_sort(c.hops.hops, c.hops.n);
    print_show(&o, c.hops.hops, c.hops.n, &sum, sealed);
  }
  ops_hops_free(&c.hops);
  return rc;
}

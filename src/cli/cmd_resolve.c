/* dlq-bridge resolve: remove one DLQ item that was handled outside the system. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/log.h"
#include "dlqb/topology.h"
#include "ops_cli.h"

static const cli_flag flags[] = {
    {"message-id", true, "ID", "the message_id of the item to remove (required)"},
    {"note", true, "TEXT", "why it can go, for the audit trail (required)"},
    CLI_COMMON_FLAGS,
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_resolve_spec = {
    .name = "resolve",
    .summary = "remove one DLQ item handled outside the system, with a note",
    .usage = "dlq-bridge resolve --message-id ID --note TEXT [--actor NAME] [--json]",
    .details = "Removes the first item of dsr.dlq.manual whose message_id is ID and records\n"
               "it in the audit trail as resolved, with the note and the actor. The items\n"
               "before it stay in the DLQ, in their order. Exits 1 when no item has that\n"
               "message_id.",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_AUDIT, NULL},
};

typedef struct {
  cli_opts o;
  const char *message_id;
  const char *note;
  bool found;
  dlqb_item item;
} resolve_ctx;

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  resolve_ctx *c = ctx;
  if (flag != NULL && (strcmp(flag, "message-id") == 0 || strcmp(flag, "note") == 0)) {
    if (value[0] == '\0') return dlqb_fail(err, DLQB_EINVAL, "--%s needs a non-empty value", flag);
    if (strlen(value) > DLQB_LAST_ERROR_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "--%s: at most %d bytes", flag, DLQB_LAST_ERROR_MAX);
    if (flag[0] == 'm') c->message_id = value;
    else c->note = value;
    return DLQB_OK;
  }
  return cli_opts_flag(&c->o, flag, value, err);
}

/* The item the pass takes: kept for what is printed. */
static void taken(void *ctx, const dlqb_item *it) {
  resolve_ctx *c = ctx;
  c->found = true;
  c->item = *it;
}

int cmd_resolve(int argc, char **argv) {
  resolve_ctx c;
  memset(&c, 0, sizeof c);
  bool help;
  int rc = cli_opts_load(&cmd_resolve_spec, argc, argv, &c.o, on_flag, &c, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_resolve_spec, stdout);
    return EXIT_OK;
  }
  if (c.message_id == NULL || c.note == NULL) {
    cli_error("resolve needs --message-id ID and --note TEXT (see 'dlq-bridge resolve --help')");
    return EXIT_USAGE;
  }
  dlqb_error err;
  /* The one item: its message_id, the first of them, and the pass ends
   * there (the items before it stay in place). */
  dlqb_select_init(&c.o.sel);
  if (dlqb_select_set(&c.o.sel, "message-id", c.message_id, &err) != DLQB_OK ||
      dlqb_select_set(&c.o.sel, "limit", "1", &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_USAGE;
  }
  ops_session *session = NULL;
  int arc = cli_audit_start(&c.o, "resolve", &session);
  if (arc != EXIT_OK) return arc;
  ops_stamp stamp;
  ops_stamp_init(&stamp, c.o.actor, c.note);
  ops_move_spec m;
  ops_resolve_spec(&m, &stamp, false);
  m.stop_at_limit = true;
  /* Removing the original is itself the settlement of a move of it that
   * did not end: what is left is at most the copy, which the note explains. */
  m.after_interrupted = true;
  ops_move_watch w = {.taken = taken, .ctx = &c};
  ops_move_outcome *out = malloc(sizeof *out);
  if (out == NULL) {
    ops_session_close(session);
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  ops_ctx x = cli_context(&c.o);
  ops_move_pass(&x, &m, ops_session_audit(session), &w, cli_stop_flag(), out);
  ops_session_close(session);
  if (out->status != DLQB_OK) {
    rc = cli_fail(&out->err);
    free(out);
    return rc;
  }
  bool removed = c.found && out->r.removed == 1;
  /* Not removed: the error below, as one document under --json (the
   * runbook's error shape), never a second one beside it. */
  if (c.o.json && removed) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "resolved", json_object_new_boolean(true));
    json_object_object_add(j, "message_id", json_object_new_string(c.message_id));
    json_object_object_add(j, "item", cli_item_json(&c.item, dlqb_now_ms()));
    json_object_object_add(j, "note", json_object_new_string(c.note));
    json_object_object_add(j, "actor", json_object_new_string(c.o.actor));
    cli_print_json(j);
  } else if (removed) {
    char who[2 * DLQB_ID_MAX + 2 * DLQB_HEADER_NAME_MAX + 8];
    printf("resolved %s (%s): %s\n", c.message_id, cli_identity_text(&c.item, who, sizeof who),
           c.note);
  }
  rc = EXIT_RUNTIME;
  if (removed) rc = EXIT_OK;
  else if (c.found)
    cli_error("the removal of '%s' was not confirmed; it is still in %s", c.message_id,
              cli_pipeline()->dlq);
  else if (out->early[0] != '\0') cli_error("resolve %s", out->early);
  else
    cli_error("no item with message_id '%s' in %s (%llu examined)", c.message_id,
              cli_pipeline()->dlq, (unsigned long long)out->r.examined);
  free(out);
  return rc;
}

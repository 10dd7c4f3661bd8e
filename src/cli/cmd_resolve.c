/* dlq-bridge resolve: remove one DLQ item that was handled outside the system. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/log.h"
#include "dlqb/topology.h"
#include "ops.h"

static const cli_flag flags[] = {
    {"message-id", true, "ID", "the message_id of the item to remove (required)"},
    {"note", true, "TEXT", "why it can go, for the audit trail (required)"},
    OPS_COMMON_FLAGS,
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_resolve_spec = {
    .name = "resolve",
    .summary = "remove one DLQ item handled outside the system, with a note",
    .usage = "dlq-bridge resolve --message-id ID --note TEXT [--actor NAME] [--json]",
    .details =
        "Removes the first item of dsr.dlq.manual whose message_id is ID and records\n"
        "it in the audit trail as resolved, with the note and the actor. The items\n"
        "before it stay in the DLQ, in their order. Exits 1 when no item has that\n"
        "message_id.",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_AUDIT, NULL},
};

typedef struct {
  ops_opts o;
  const char *message_id;
  const char *note;
  dlqb_select sel; /* the one item: its message_id, limit 1 */
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
  return ops_flag(&c->o, flag, value, err);
}

static dlqb_status resolve_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d,
                                const dlqb_item *it, dlqb_error *err) {
  resolve_ctx *c = ctx;
  (void)err;
  dlqb_verdict_rule rule = {.sel = &c->sel, .stop_at_limit = true};
  dlqb_verdict v = dlqb_verdict_of(&rule, it, 0, c->found ? 1 : 0);
  if (v.kind == DLQB_VERDICT_HOLD) {
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  c->found = true;
  c->item = *it;
  dlqb_scan_ack(s, d, it, DLQB_EV_RESOLVED, "", c->note);
  if (v.stop_after) dlqb_scan_stop(s);
  return DLQB_OK;
}

int cmd_resolve(int argc, char **argv) {
  resolve_ctx c;
  memset(&c, 0, sizeof c);
  bool help;
  int rc = ops_load(&cmd_resolve_spec, argc, argv, &c.o, on_flag, &c, &help);
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
  dlqb_select_init(&c.sel);
  if (dlqb_select_set(&c.sel, "message-id", c.message_id, &err) != DLQB_OK ||
      dlqb_select_set(&c.sel, "limit", "1", &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_USAGE;
  }
  dlqb_audit *audit = NULL;
  int arc = ops_audit_start(&c.o, "resolve", &audit);
  if (arc != EXIT_OK) return arc;
  dlqb_stop_flag *stop = cli_stop_flag();
  dlqb_scan_options so = {.queue = DLQB_Q_DLQ, .purpose = "dlq-bridge resolve",
                          .actor = c.o.actor, .audit = audit, .window = c.o.window,
                          .stop = stop, .audit_mode = DLQB_PIPE_AUDIT_FAIL_FAST,
                          .on_item = resolve_item, .ctx = &c};
  dlqb_scan_result r;
  dlqb_status st = dlqb_scan_run(&c.o.cfg, &so, &r, &err);
  ops_audit_close(audit);
  if (st != DLQB_OK) return ops_fail(&err);
  bool removed = c.found && r.removed == 1;
  if (c.o.json) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "resolved", json_object_new_boolean(removed));
    json_object_object_add(j, "message_id", json_object_new_string(c.message_id));
    if (removed) {
      json_object_object_add(j, "item", ops_item_json(&c.item, dlqb_now_ms()));
      json_object_object_add(j, "note", json_object_new_string(c.note));
      json_object_object_add(j, "actor", json_object_new_string(c.o.actor));
    }
    ops_print_json(j);
  } else if (removed) {
    printf("resolved %s (request_id %s, source_system %s): %s\n", c.message_id,
           c.item.request_id[0] ? c.item.request_id : "-",
           c.item.source_system[0] ? c.item.source_system : "-", c.note);
  }
  if (removed) return EXIT_OK;
  if (c.found) {
    cli_error("the removal of '%s' was not confirmed; it is still in %s", c.message_id,
              DLQB_Q_DLQ);
    return EXIT_FAILURE_;
  }
  const char *early = ops_early_stop(&r, c.o.window);
  if (early != NULL) cli_error("resolve %s", early);
  else cli_error("no item with message_id '%s' in %s (%llu examined)", c.message_id, DLQB_Q_DLQ,
                 (unsigned long long)r.examined);
  return EXIT_FAILURE_;
}

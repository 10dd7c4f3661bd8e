/* dlq-bridge review claim and review decide: one compliance_review item
 * changes hands or is decided, in one audited, confirmed hop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlqb/clock.h"
#include "dlqb/ledger.h"
#include "dlqb/review.h"
#include "dlqb/topology.h"
#include "ops_cli.h"
#include "review_cli.h"

static const cli_flag claim_flags[] = {
    {"message-id", true, "ID", "the message_id of the item to claim (required)"},
    {"force", false, NULL, "take it over from its owner (recorded as forced)"},
    CLI_SETTLE_FLAG,
    CLI_COMMON_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_spec claim_spec = {
    .name = "review claim",
    .summary = "take ownership of one compliance_review item",
    .usage =
        "dlq-bridge review claim --message-id ID [--force] [--after-interrupted] [--actor NAME]\n"
        "       [--json]",
    .details = "Makes --actor the owner of the first compliance_review item whose message_id is\n"
               "ID: a copy with the headers owner and claimed_at (now) is published to\n"
               "compliance_review (at its tail), confirmed and recorded as claimed, then the\n"
               "original is acked. An item someone else owns is refused unless --force, and a\n"
               "forced claim is recorded with cause force and the previous owner. Claiming an\n"
               "item you own changes nothing. Exits 1 when no item has that message_id, when\n"
               "another owner holds it, or when the claim was not confirmed.",
    .flags = claim_flags,
    .settings = true,
};

static const cli_flag decide_flags[] = {
    {"message-id", true, "ID", "the message_id of the item decided (required)"},
    {"replay", false, NULL,
     "send the task to dsr.work with attempts reset (completed tasks are removed)"},
    {"resolve", false, NULL, "remove it: handled outside the system (needs --note)"},
    {"return", false, NULL, "send it back to dsr.dlq.manual"},
    {"note", true, "TEXT", "the decision's reason, for the audit trail (required with --resolve)"},
    {"force", false, NULL, "decide an item you do not own (recorded as forced)"},
    CLI_SETTLE_FLAG,
    CLI_COMMON_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_spec decide_spec = {
    .name = "review decide",
    .summary = "the owner's decision on one compliance_review item",
    .usage =
        "dlq-bridge review decide --message-id ID (--replay | --resolve --note TEXT | --return)\n"
        "       [--note TEXT] [--force] [--after-interrupted] [--actor NAME] [--json]",
    .details = "Only the item's owner (see 'review claim') decides, unless --force (recorded\n"
               "with cause force). Each decision is one hop, confirmed and recorded before the\n"
               "review copy is acked, so an interrupted decision loses nothing (at worst the\n"
               "item is in both places, and the audit trail says whether the hop was made):\n"
               "  --replay   to dsr.work as replay does it (attempt 0, replay_count + 1,\n"
               "             replayed_by/at), unless its task is in the completion ledger\n"
               "             dsr.completed: then it is removed, recorded as skipped_complete;\n"
               "  --resolve  removed, recorded as decided_resolve with the note;\n"
               "  --return   back to dsr.dlq.manual with dlq_at = now (the DLQ SLA starts\n"
               "             again).\n"
               "Leaving review removes the escalation and custody headers (escalated_by,\n"
               "escalated_at, escalation_reason, escalation_note, owner, claimed_at); the\n"
               "audit trail keeps them ('dlq-bridge audit show --request-id'). Exits 1 when no\n"
               "item has that message_id, when the actor may not decide, or when the hop was\n"
               "not confirmed.",
    .flags = decide_flags,
    .settings = true,
};

/* The command line's side of an act: its flags, and the library's pass. */
typedef struct {
  cli_opts o;
  int ndecisions; /* decide: how many of --replay/--resolve/--return were given */
  ops_review_act a;
} act_ctx;

static dlqb_status act_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  act_ctx *c = ctx;
  if (flag == NULL) return cli_opts_flag(&c->o, flag, value, err);
  if (strcmp(flag, "message-id") == 0 || strcmp(flag, "note") == 0) {
    if (value[0] == '\0') return dlqb_fail(err, DLQB_EINVAL, "--%s needs a non-empty value", flag);
    if (strlen(value) > DLQB_LAST_ERROR_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "--%s: at most %d bytes", flag, DLQB_LAST_ERROR_MAX);
    if (flag[0] == 'm') c->a.message_id = value;
    else c->a.note = value;
    return DLQB_OK;
  }
  if (strcmp(flag, "force") == 0) {
    c->a.force = true;
    return DLQB_OK;
  }
  ops_act_kind k = strcmp(flag, "replay") == 0    ? OPS_ACT_REPLAY
                   : strcmp(flag, "resolve") == 0 ? OPS_ACT_RESOLVE
                   : strcmp(flag, "return") == 0  ? OPS_ACT_RETURN
                                                  : OPS_ACT_CLAIM;
  if (k != OPS_ACT_CLAIM) {
    c->a.kind = k;
    c->ndecisions++;
    return DLQB_OK;
  }
  return cli_opts_flag(&c->o, flag, value, err);
}

static const char *verb(ops_act_kind k) {
  static const char *const v[] = {"claimed", "replayed", "resolved", "returned"};
  return v[k];
}

static const char *outcome(const act_ctx *c) {
  if (c->a.gate == DLQB_GATE_ALREADY_MINE) return "already_yours";
  if (c->a.settled) return dlqb_event_name(c->a.done_event);
  return "not_done";
}

static void print_result(const act_ctx *c) {
  const dlqb_item *it = &c->a.item;
  if (c->o.json) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "message_id", json_object_new_string(c->a.message_id));
    json_object_object_add(j, "found", json_object_new_boolean(c->a.found));
    if (c->a.found) {
      json_object_object_add(j, "outcome", json_object_new_string(outcome(c)));
      json_object_object_add(j, "done", json_object_new_boolean(c->a.settled));
      json_object_object_add(j, "forced", json_object_new_boolean(c->a.gate == DLQB_GATE_FORCED));
      json_object_object_add(j, "actor", json_object_new_string(c->o.actor));
      json_object_object_add(j, "note", c->a.note ? json_object_new_string(c->a.note) : NULL);
      json_object_object_add(j, "item", review_item_json(it, dlqb_now_ms()));
    }
    cli_print_json(j);
    return;
  }
  if (!c->a.found) return;
  char who[2 * DLQB_ID_MAX + 2 * DLQB_HEADER_NAME_MAX + 8];
  cli_identity_text(it, who, sizeof who);
  if (c->a.gate == DLQB_GATE_ALREADY_MINE) {
    printf("%s (%s) is already claimed by %s\n", c->a.message_id, who, c->o.actor);
    return;
  }
  if (!c->a.settled) return;
  const char *forced = c->a.gate == DLQB_GATE_FORCED ? " (forced)" : "";
  if (c->a.done_event == DLQB_EV_CLAIMED)
    printf("claimed %s (%s) for %s%s%s%s\n", c->a.message_id, who, c->o.actor, forced,
           it->owner[0] ? ", taken over from " : "", it->owner);
  else if (c->a.done_event == DLQB_EV_SKIPPED_COMPLETE)
    printf("removed %s (%s): already in the completion ledger, not replayed%s\n", c->a.message_id,
           who, forced);
  else
    printf("%s %s (%s)%s%s%s\n", verb(c->a.kind), c->a.message_id, who,
           c->a.kind == OPS_ACT_REPLAY || c->a.kind == OPS_ACT_RETURN ? " to " : "",
           c->a.kind == OPS_ACT_REPLAY   ? cli_pipeline()->work
           : c->a.kind == OPS_ACT_RETURN ? cli_pipeline()->dlq
                                         : "",
           forced);
}

/* Why the actor may not act, as one line. */
static void refused(const act_ctx *c) {
  char iso[DLQB_ISO_TIME_MAX] = "an unknown time";
  if (c->a.item.has_claimed_at) dlqb_iso_time(c->a.item.claimed_at_ms, iso, sizeof iso);
  if (c->a.gate == DLQB_GATE_OWNED)
    cli_error("%s is claimed by %s since %s; --force %s (recorded as forced)", c->a.message_id,
              c->a.item.owner, iso,
              c->a.kind == OPS_ACT_CLAIM ? "takes it over" : "decides anyway");
  else
    cli_error("%s is not claimed; claim it first ('dlq-bridge review claim --message-id %s'), "
              "or --force (recorded as forced)",
              c->a.message_id, c->a.message_id);
}

static int act_run(act_ctx *c, const char *command) {
  dlqb_error err;
  ops_session *session = NULL;
  int arc = cli_audit_start(&c->o, command, &session);
  if (arc != EXIT_OK) return arc;
  c->a.x = cli_context(&c->o);
  c->a.after_interrupted = c->o.after_interrupted;
  dlqb_scan_result r;
  dlqb_status st = ops_review_act_pass(&c->a, command, session, cli_stop_flag(), &r, &err);
  ops_session_close(session);
  if (st == DLQB_EINVAL) {
    cli_error("%s", err.msg);
    return EXIT_USAGE;
  }
  if (st != DLQB_OK) return cli_fail(&err);
  if (c->a.unsettled) {
    char why[2 * DLQB_NAME_MAX + 512];
    cli_error("%s: %s", command,
              ops_open_move_text(1, c->a.message_id, &c->a.open, why, sizeof why));
    return EXIT_RUNTIME;
  }
  print_result(c);
  if (c->a.found && (c->a.settled || c->a.gate == DLQB_GATE_ALREADY_MINE)) return EXIT_OK;
  if (c->a.found && (c->a.gate == DLQB_GATE_OWNED || c->a.gate == DLQB_GATE_UNCLAIMED)) {
    refused(c);
    return EXIT_RUNTIME;
  }
  if (c->a.found) {
    cli_error("the %s of '%s' was not confirmed; it is still in %s", command, c->a.message_id,
              cli_pipeline()->review);
    return EXIT_RUNTIME;
  }
  const char *early = r.interrupted ? ops_early_stop(&r, c->o.window) : NULL;
  if (early != NULL) cli_error("%s %s", command, early);
  else
    cli_error("no item with message_id '%s' in %s (%llu examined)", c->a.message_id,
              cli_pipeline()->review, (unsigned long long)r.examined);
  return EXIT_RUNTIME;
}

int review_claim(int argc, char **argv) {
  act_ctx c;
  memset(&c, 0, sizeof c);
  c.a.kind = OPS_ACT_CLAIM;
  bool help;
  int rc = cli_opts_load(&claim_spec, argc, argv, &c.o, act_flag, &c, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&claim_spec, stdout);
    return EXIT_OK;
  }
  if (c.a.message_id == NULL) {
    cli_error("review claim needs --message-id ID (see 'dlq-bridge review claim --help')");
    return EXIT_USAGE;
  }
  return act_run(&c, "review claim");
}

int review_decide(int argc, char **argv) {
  act_ctx c;
  memset(&c, 0, sizeof c);
  c.a.kind = OPS_ACT_CLAIM; /* none yet */
  bool help;
  int rc = cli_opts_load(&decide_spec, argc, argv, &c.o, act_flag, &c, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&decide_spec, stdout);
    return EXIT_OK;
  }
  if (c.a.message_id == NULL || c.ndecisions != 1) {
    cli_error("review decide needs --message-id ID and one of --replay, --resolve, --return "
              "(see 'dlq-bridge review decide --help')");
    return EXIT_USAGE;
  }
  if (c.a.kind == OPS_ACT_RESOLVE && c.a.note == NULL) {
    cli_error("review decide --resolve needs --note TEXT: why it can go");
    return EXIT_USAGE;
  }
  return act_run(&c, "review decide");
}

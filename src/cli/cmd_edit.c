/* dlq-bridge edit: fix one broken DLQ (or compliance_review) item and send
 * it on, in one confirmed, audited hop. The service is ops_edit_run
 * (src/ops/ops_edit.c); this command parses the flags, reads the trail and
 * the ledger, and prints. */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/clock.h"
#include "dlqb/link.h"
#include "dlqb/ops_edit.h"
#include "dlqb/text.h"
#include "ops_cli.h"

/* A new body is at most this big: the broker's default limit is larger,
 * but a task is an envelope and a small body, not a file transfer. */
#define BODY_FILE_MAX (16u * 1024 * 1024)

static const cli_flag flags[] = {
    {"message-id", true, "ID", "the message_id of the item to edit (required)"},
    {"set", true, "FIELD=VALUE", "set header FIELD to the text VALUE (repeatable)"},
    {"unset", true, "FIELD", "remove header FIELD (repeatable)"},
    {"body-file", true, "FILE", "replace the body with FILE's bytes (at most 16 MiB)"},
    {"note", true, "TEXT", "why, for the audit trail (required)"},
    {"dry-run", false, NULL,
     "show the fields and the body's size and SHA-256 before and after; move nothing"},
    {"keep", false, NULL, "put the edited copy back where it was instead of replaying it"},
    {"expect-edit-id", true, "ID",
     "only if the item is still this version (the edit id a dry "
     "run showed, or 'original')"},
    {"after-interrupted", true, "EDIT_ID",
     "edit a copy whose edit EDIT_ID began and did not "
     "end, once you checked that its copy is not live (recorded in the trail)"},
    {"queue", true, "dlq|review",
     "where the item is (default dlq; review: compliance_review, "
     "the item claimed by --actor)"},
    CLI_COMMON_FLAGS,
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_edit_spec = {
    .name = "edit",
    .summary = "fix one broken DLQ item's headers or body and replay it, audited",
    .usage = "dlq-bridge edit --message-id ID (--set F=V | --unset F | --body-file FILE)...\n"
             "       --note TEXT [--dry-run] [--keep] [--queue dlq|review] [--json]",
    .details = "Edits the first item of dsr.dlq.manual (or, with --queue review,\n"
               "compliance_review) whose message_id is ID: sets or removes envelope headers\n"
               "and may replace the body. The bridge's own counters and stamps (attempt,\n"
               "replay_count, dlq_at, last_error, x-death, ...) and the profile's SLA clock\n"
               "(first_seen_at) are not editable (exit 2 naming the field). The edited task is\n"
               "checked under its pipeline's profile first: one that would still be invalid\n"
               "is refused with the reason and nothing moves (exit 1).\n"
               "By default the edited copy goes to dsr.work as replay sends it (attempt 0,\n"
               "replay_count + 1), unless its task is in the completion ledger (then nothing\n"
               "moves: resolve it); with --keep it goes back to the queue it came from. It\n"
               "keeps its message_id and carries edit_id (new), edit_parent (the edit id of the\n"
               "copy edited), edited_by (the broker user) and edited_at. The copy is\n"
               "confirmed and its hop recorded (editor, note, each field before and after,\n"
               "the body's size and SHA-256 before and after; never the body) before the\n"
               "original is acked. An interrupted edit may leave both: the trail says which\n"
               "counts, and editing a copy that the trail says was edited already is refused\n"
               "as stale, as is a copy someone else edited after this edit began. Every edit\n"
               "records its intent (edit_started) before its copy is sent, so a copy is never\n"
               "sent that the trail does not know of: a copy whose edit began and did not\n"
               "end is refused until --after-interrupted names that edit.\n"
               "With edit_approval 1 (the default) a real run only proposes the edit: the\n"
               "proposal rides on the item until a different broker user runs 'dlq-bridge\n"
               "edit approve EDIT_ID' (or 'edit reject'); see 'dlq-bridge edit approve --help'.\n"
               "--dry-run shows the change and the item's version (its edit id, or\n"
               "'original') and moves nothing; --expect-edit-id VERSION then edits only that\n"
               "version, so an edit made by someone else in between is refused.",
    .flags = flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_AUDIT, "ledger_cache",
                                  "completion_writers", "max_attempts", "edit_approval", NULL},
};

static const cli_flag decide_flags[] = {
    {"note", true, "TEXT", "why, for the audit trail (required to reject)"},
    {"after-interrupted", true, "EDIT_ID",
     "approve: an approval of this proposal was interrupted; you checked that its copy is not "
     "live"},
    {"queue", true, "dlq|review", "where the item is (default dlq)"},
    CLI_COMMON_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_spec approve_spec = {
    .name = "edit approve",
    .summary = "carry out an edit another broker user proposed",
    .usage = "dlq-bridge edit approve EDIT_ID [--note TEXT] [--queue dlq|review] [--json]",
    .details = "With edit_approval on (the default), 'dlq-bridge edit' only proposes: the\n"
               "proposal rides on the item in its queue. This finds the item carrying proposal\n"
               "EDIT_ID and runs the edit as proposed (checked again under the profile, the\n"
               "completion ledger deciding a replay), recorded with the proposer as editor and\n"
               "your broker user as approver. The proposer's own broker user is refused. A\n"
               "proposal whose item has moved or been edited since is void (exit 1); one\n"
               "that the verified audit trail does not record as proposed (by the proposer\n"
               "the item names, with these changes, for this copy) is refused (exit 1): the\n"
               "headers on an item are anyone's who may publish to its queue. An approval\n"
               "killed after its copy may have gone out is settled by approving again with\n"
               "--after-interrupted EDIT_ID, once you checked that copy is not live.",
    .flags = decide_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_AUDIT, "ledger_cache",
                                  "completion_writers", "max_attempts", NULL},
};

static const cli_spec reject_spec = {
    .name = "edit reject",
    .summary = "take a proposed edit off its item, leaving the task as it was",
    .usage = "dlq-bridge edit reject EDIT_ID --note TEXT [--queue dlq|review] [--json]",
    .details = "Removes proposal EDIT_ID from its item (re-published in place, confirmed and\n"
               "recorded as edit_rejected with the note); the task is not changed. Exit 1 when\n"
               "no item carries it.",
    .flags = decide_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_AUDIT, NULL},
};

typedef struct {
  cli_opts o;
  ops_edit_request rq;
  const char *body_file;
  const char *queue;
  const char *bad_field; /* the first --set/--unset refused, for after the load */
  dlqb_error bad;
  bool bad_set;
  /* --set/--unset in order, checked once the pipeline (its profile) is known */
  struct {
    const char *arg;
    bool unset;
  } changes[DLQB_EDIT_MAX_CHANGES + 1];
  size_t nchanges;
} edit_opts;

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  edit_opts *e = ctx;
  if (flag == NULL && e->rq.mode >= OPS_EDIT_MODE_APPROVE && e->rq.proposal_id == NULL) {
    e->rq.proposal_id = value; /* edit approve|reject EDIT_ID */
    return DLQB_OK;
  }
  if (flag == NULL) return cli_opts_flag(&e->o, flag, value, err);
  if (strcmp(flag, "message-id") == 0 || strcmp(flag, "note") == 0) {
    if (value[0] == '\0') return dlqb_fail(err, DLQB_EINVAL, "--%s needs a non-empty value", flag);
    if (strlen(value) > DLQB_LAST_ERROR_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "--%s: at most %d bytes", flag, DLQB_LAST_ERROR_MAX);
    if (flag[0] == 'm') e->rq.message_id = value;
    else e->rq.note = value;
    return DLQB_OK;
  }
  if (strcmp(flag, "set") == 0 || strcmp(flag, "unset") == 0) {
    if (e->nchanges > DLQB_EDIT_MAX_CHANGES)
      return dlqb_fail(err, DLQB_EINVAL, "at most %d fields in one edit", DLQB_EDIT_MAX_CHANGES);
    e->changes[e->nchanges].arg = value;
    e->changes[e->nchanges].unset = flag[0] == 'u';
    e->nchanges++;
    return DLQB_OK;
  }
  if (strcmp(flag, "after-interrupted") == 0) {
    e->rq.after_interrupted = value;
    return DLQB_OK;
  }
  if (strcmp(flag, "expect-edit-id") == 0) {
    e->rq.expect_edit_id = strcmp(value, "original") == 0 ? "" : value;
    return DLQB_OK;
  }
  if (strcmp(flag, "body-file") == 0) {
    e->body_file = value;
    return DLQB_OK;
  }
  if (strcmp(flag, "keep") == 0) {
    e->rq.keep = true;
    return DLQB_OK;
  }
  if (strcmp(flag, "queue") == 0) {
    if (strcmp(value, "dlq") != 0 && strcmp(value, "review") != 0)
      return dlqb_fail(err, DLQB_EINVAL, "--queue: 'dlq' or 'review'");
    e->rq.from_review = value[0] == 'r';
    return DLQB_OK;
  }
  if (strcmp(flag, "dry-run") == 0) {
    e->rq.dry_run = true;
    return DLQB_OK;
  }
  return cli_opts_flag(&e->o, flag, value, err);
}

/* FILE's bytes, at most BODY_FILE_MAX. EXIT_OK or one line and EXIT_USAGE. */
static int read_body(const char *path, amqp_bytes_t *out) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    cli_error("--body-file %s: %s", path, strerror(errno));
    return EXIT_USAGE;
  }
  char *buf = malloc(BODY_FILE_MAX + 1);
  size_t n = buf != NULL ? fread(buf, 1, BODY_FILE_MAX + 1, f) : 0;
  bool bad = buf == NULL || ferror(f);
  fclose(f);
  if (bad || n > BODY_FILE_MAX) {
    free(buf);
    if (bad) cli_error("--body-file %s: cannot be read", path);
    else cli_error("--body-file %s: more than %u bytes", path, BODY_FILE_MAX);
    return EXIT_USAGE;
  }
  *out = (amqp_bytes_t){n, buf};
  return EXIT_OK;
}

/* ---- output ------------------------------------------------------------- */

static const char *const outcome_names[] = {
    [OPS_EDIT_NOT_FOUND] = "not_found",
    [OPS_EDIT_PREVIEWED] = "previewed",
    [OPS_EDIT_DONE] = "edited",
    [OPS_EDIT_INVALID] = "invalid",
    [OPS_EDIT_STALE] = "stale",
    [OPS_EDIT_MEANWHILE] = "edited_meanwhile",
    [OPS_EDIT_INTERRUPTED] = "interrupted",
    [OPS_EDIT_COMPLETE] = "complete",
    [OPS_EDIT_NOT_OWNER] = "not_owner",
    [OPS_EDIT_NOT_CONFIRMED] = "not_done",
    [OPS_EDIT_FAILED] = "failed",
    [OPS_EDIT_PROPOSED] = "proposed",
    [OPS_EDIT_REJECTED] = "rejected",
    [OPS_EDIT_VOID] = "void",
    [OPS_EDIT_OWN_PROPOSAL] = "own_proposal",
    [OPS_EDIT_BAD_PROPOSAL] = "bad_proposal",
};

static json_object *str_or_null(bool present, const char *s) {
  return present ? json_object_new_string(s) : NULL;
}

static void print_json(const edit_opts *e, const ops_edit_result *r) {
  json_object *j = json_object_new_object();
  const dlqb_hop_edit *h = &r->rec;
  bool seen = r->outcome != OPS_EDIT_NOT_FOUND && r->outcome != OPS_EDIT_FAILED &&
              r->outcome != OPS_EDIT_VOID;
  json_object_object_add(j, "dry_run", json_object_new_boolean(e->rq.dry_run));
  json_object_object_add(j, "outcome", json_object_new_string(outcome_names[r->outcome]));
  json_object_object_add(j, "message_id",
                         json_object_new_string(seen               ? r->item.message_id
                                                : e->rq.message_id ? e->rq.message_id
                                                                   : ""));
  if (e->rq.proposal_id != NULL)
    json_object_object_add(j, "proposal_id", json_object_new_string(e->rq.proposal_id));
  if (r->proposer[0] != '\0')
    json_object_object_add(j, "proposer", json_object_new_string(r->proposer));
  json_object_object_add(j, "from", json_object_new_string(r->from));
  json_object_object_add(j, "to", json_object_new_string(r->to));
  if (seen) {
    json_object_object_add(j, "edit_id", json_object_new_string(h->edit_id));
    json_object_object_add(j, "parent", json_object_new_string(h->parent));
    json_object_object_add(
        j, "version", json_object_new_string(r->item_edit_id[0] ? r->item_edit_id : "original"));
    json_object_object_add(j, "valid", json_object_new_boolean(r->valid));
    json_object_object_add(j, "invalid_reason", str_or_null(!r->valid, r->invalid.msg));
    json_object *fields = json_object_new_array();
    for (size_t i = 0; i < h->nfields; i++) {
      const dlqb_edit_field *f = &h->fields[i];
      json_object *x = json_object_new_object();
      json_object_object_add(x, "field", json_object_new_string(f->field));
      json_object_object_add(x, f->hashed ? "old_sha256" : "old",
                             str_or_null(f->had_old, f->old_value));
      json_object_object_add(x, f->hashed ? "new_sha256" : "new",
                             str_or_null(f->has_new, f->new_value));
      json_object_array_add(fields, x);
    }
    json_object_object_add(j, "fields", fields);
    json_object *b = json_object_new_object();
    json_object_object_add(b, "size_before", json_object_new_int64((int64_t)h->body_size_before));
    json_object_object_add(b, "sha256_before", json_object_new_string(h->body_sha256_before));
    json_object_object_add(b, "size_after", json_object_new_int64((int64_t)h->body_size_after));
    json_object_object_add(b, "sha256_after", json_object_new_string(h->body_sha256_after));
    json_object_object_add(j, "body", b);
    json_object_object_add(j, "item", cli_item_json(&r->item, dlqb_now_ms()));
  }
  json_object_object_add(j, "note", e->rq.note ? json_object_new_string(e->rq.note) : NULL);
  json_object_object_add(j, "actor", json_object_new_string(e->o.actor));
  json_object_object_add(j, "editor", json_object_new_string(e->rq.editor));
  if (r->outcome != OPS_EDIT_DONE && r->outcome != OPS_EDIT_PREVIEWED &&
      r->outcome != OPS_EDIT_PROPOSED && r->outcome != OPS_EDIT_REJECTED)
    json_object_object_add(j, "error", json_object_new_string(r->err.msg));
  cli_print_json(j);
}

/* A value as the preview shows it: quoted, already sanitised. */
static void print_value(bool present, const char *v, bool hashed) {
  if (!present) printf("(absent)");
  else if (hashed) printf("sha256 %s", v);
  else printf("\"%s\"", v);
}

static void print_text(const edit_opts *e, const ops_edit_result *r) {
  if (r->outcome == OPS_EDIT_NOT_FOUND || r->outcome == OPS_EDIT_FAILED ||
      r->outcome == OPS_EDIT_VOID)
    return;
  const dlqb_hop_edit *h = &r->rec;
  char who[2 * DLQB_ID_MAX + 2 * DLQB_HEADER_NAME_MAX + 8];
  char mid[DLQB_QUOTE_BUF * 2];
  dlqb_text_sanitize(mid, sizeof mid, r->item.message_id, strlen(r->item.message_id));
  /* The change itself, where one was worked out: a preview, a proposal,
   * a result still invalid. */
  if (e->rq.dry_run || r->outcome == OPS_EDIT_INVALID || r->outcome == OPS_EDIT_PROPOSED) {
    printf("edit %s of %s (%s), version %s: %s -> %s\n", h->edit_id, mid,
           cli_identity_text(&r->item, who, sizeof who),
           r->item_edit_id[0] ? r->item_edit_id : "original", r->from, r->to);
    for (size_t i = 0; i < h->nfields; i++) {
      const dlqb_edit_field *f = &h->fields[i];
      printf("  %-20s ", f->field);
      print_value(f->had_old, f->old_value, f->hashed);
      printf(" -> ");
      print_value(f->has_new, f->new_value, f->hashed);
      putchar('\n');
    }
    bool same = strcmp(h->body_sha256_before, h->body_sha256_after) == 0;
    printf("  %-20s %llu bytes sha256 %s", "body", (unsigned long long)h->body_size_before,
           h->body_sha256_before);
    if (same) printf(" (unchanged)\n");
    else
      printf(" -> %llu bytes sha256 %s\n", (unsigned long long)h->body_size_after,
             h->body_sha256_after);
    if (r->valid) printf("  valid under profile %s\n", cli_pipeline()->profile.name);
    else printf("  still invalid: %s\n", r->invalid.msg);
  }
  if (e->rq.dry_run && r->outcome == OPS_EDIT_PREVIEWED) printf("dry run: nothing moved\n");
  else if (r->outcome == OPS_EDIT_DONE && h->approver[0] != '\0')
    printf("approved edit %s of %s (%s), proposed by %s, approved by %s: %s -> %s\n", h->edit_id,
           mid, cli_identity_text(&r->item, who, sizeof who), h->editor, h->approver, r->from,
           r->to);
  else if (r->outcome == OPS_EDIT_DONE)
    printf("edited %s (%s) as %s: %s -> %s\n", mid, cli_identity_text(&r->item, who, sizeof who),
           h->edit_id, r->from, r->to);
  else if (r->outcome == OPS_EDIT_PROPOSED)
    printf("proposed edit %s of %s: it waits in %s for a different broker user "
           "('dlq-bridge edit approve %s' or 'edit reject')\n",
           h->edit_id, mid, r->from, h->edit_id);
  else if (r->outcome == OPS_EDIT_REJECTED)
    printf("rejected edit %s of %s (proposed by %s): the task stays in %s as it was\n",
           e->rq.proposal_id, mid, r->proposer, r->from);
}

int cmd_edit(int argc, char **argv) {
  edit_opts *e = calloc(1, sizeof *e);
  if (e == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  const cli_spec *spec = &cmd_edit_spec;
  if (argc > 1 && (strcmp(argv[1], "approve") == 0 || strcmp(argv[1], "reject") == 0)) {
    e->rq.mode = argv[1][0] == 'a' ? OPS_EDIT_MODE_APPROVE : OPS_EDIT_MODE_REJECT;
    spec = argv[1][0] == 'a' ? &approve_spec : &reject_spec;
    argc--;
    argv++;
  }
  bool help;
  int rc = cli_opts_load(spec, argc, argv, &e->o, on_flag, e, &help);
  if (rc != EXIT_OK || help) {
    if (help) cli_print_help(spec, stdout);
    free(e);
    return rc;
  }
  const dlqb_pipeline *p = cli_pipeline();
  dlqb_error err;
  rc = EXIT_USAGE;
  bool decision = e->rq.mode == OPS_EDIT_MODE_APPROVE || e->rq.mode == OPS_EDIT_MODE_REJECT;
  if (decision) {
    if (e->rq.proposal_id == NULL || (e->rq.mode == OPS_EDIT_MODE_REJECT && e->rq.note == NULL)) {
      cli_error("%s needs EDIT_ID%s (see 'dlq-bridge %s --help')", spec->name,
                e->rq.mode == OPS_EDIT_MODE_REJECT ? " and --note TEXT" : "", spec->name);
      goto done;
    }
  } else if (e->rq.message_id == NULL || e->rq.note == NULL) {
    cli_error("edit needs --message-id ID and --note TEXT (see 'dlq-bridge edit --help')");
    goto done;
  }
  if (!decision && e->nchanges == 0 && e->body_file == NULL) {
    cli_error("edit needs at least one --set FIELD=VALUE, --unset FIELD or --body-file FILE");
    goto done;
  }
  for (size_t i = 0; i < e->nchanges; i++)
    if (dlqb_edit_add(&e->rq.req, &p->profile, e->changes[i].arg, e->changes[i].unset, &err) !=
        DLQB_OK) {
      cli_error("edit: %s", err.msg);
      goto done;
    }
  if (e->body_file != NULL && e->rq.keep && p->profile.dlq_body_forbidden) {
    cli_error("edit: profile '%s' keeps no body in its queues: --body-file with --keep would "
              "put one there",
              p->profile.name);
    goto done;
  }
  /* Four eyes: the pipeline's policy makes an edit a proposal (a dry run
   * only shows it). */
  if (!decision && p->policy.edit_approval && !e->rq.dry_run) e->rq.mode = OPS_EDIT_MODE_PROPOSE;
  if (e->rq.mode == OPS_EDIT_MODE_PROPOSE && e->body_file != NULL) {
    cli_error("edit: a new body cannot be proposed (the proposal rides on the item's headers): "
              "with edit_approval on, --body-file is refused");
    goto done;
  }
  if (e->body_file != NULL) {
    if ((rc = read_body(e->body_file, &e->rq.body)) != EXIT_OK) goto done;
    e->rq.has_body = true;
  }
  /* Who the broker will authenticate: edited_by and the trail's editor
   * are that user, never the free-text --actor. */
  char editor[256];
  if (dlqb_link_url_user(e->o.cfg->broker.url, editor, sizeof editor, &err) != DLQB_OK) {
    cli_error("edit: %s", err.msg);
    goto done;
  }
  e->rq.editor = editor;

  ops_session *session = NULL;
  e->o.dry_run = e->rq.dry_run; /* a preview's session writes nothing */
  if ((rc = cli_audit_start(&e->o, "edit", &session)) != EXIT_OK) goto done;
  ops_edit_result *r = malloc(sizeof *r);
  if (r == NULL) {
    ops_session_close(session);
    cli_error("out of memory");
    rc = EXIT_RUNTIME;
    goto done;
  }
  ops_ctx x = cli_context(&e->o);
  ops_edit_run(&x, &e->rq, session, cli_stop_flag(), r);
  ops_session_close(session);
  if (e->o.json) print_json(e, r);
  else print_text(e, r);
  switch (r->outcome) {
  case OPS_EDIT_DONE:
  case OPS_EDIT_PREVIEWED:
  case OPS_EDIT_PROPOSED:
  case OPS_EDIT_REJECTED: rc = EXIT_OK; break;
  case OPS_EDIT_VOID:
    cli_error("%s", r->err.msg);
    rc = EXIT_RUNTIME;
    break;
  case OPS_EDIT_NOT_FOUND:
    cli_error("no item with message_id '%s' in %s (%llu examined)", e->rq.message_id, r->from,
              (unsigned long long)r->move.r.examined);
    rc = EXIT_RUNTIME;
    break;
  case OPS_EDIT_FAILED: rc = cli_fail(&r->err); break;
  default:
    cli_error("edit refused: %s%s", r->err.msg,
              r->outcome == OPS_EDIT_INVALID || r->outcome == OPS_EDIT_NOT_CONFIRMED
                  ? ""
                  : "; nothing moved");
    rc = EXIT_RUNTIME;
  }
  free(r);
done:
  free(e->rq.body.bytes);
  free(e);
  return rc;
}

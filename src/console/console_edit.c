/* The console's edit: the item page's edit form with the same preview as
 * `dlq-bridge edit --dry-run`, the edit (or, with edit_approval, the
 * proposal) as the signed-in broker user, and the pending edits in the
 * review inbox with Approve and Reject. Every step runs the edit service
 * of the ops layer (dlqb/ops_edit.h) the CLI runs, on a connection opened
 * as that user, so the broker's permissions still decide who may do what. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console.h"
#include "dlqb/clock.h"
#include "dlqb/edit.h"
#include "dlqb/headers.h"
#include "dlqb/names.h"
#include "dlqb/ops_edit.h"

/* The edit form under an item (console_page_item). */
void console_edit_form(console_req *r, const dlqb_item *it) {
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<section class=\"actions\" id=\"edit\"><h2>Edit this task</h2>"
                   "<form method=\"post\" action=\"/edit\" id=\"edit-form\">");
  console_csrf_field(r);
  dlqb_html_raw(h, "<input type=\"hidden\" name=\"message-id\" value=\"");
  dlqb_html_text(h, it->message_id);
  dlqb_html_raw(h, "\"><p>One header a line as FIELD=VALUE; the bridge's own counters and "
                   "stamps are not editable. The body is not shown and not edited here.</p>"
                   "<label>set <textarea name=\"set\" id=\"edit-set\" rows=\"3\" cols=\"60\" "
                   "maxlength=\"4096\"></textarea></label> "
                   "<label>remove <input name=\"unset\" id=\"edit-unset\" maxlength=\"512\" "
                   "placeholder=\"FIELD FIELD\"></label> "
                   "<label>note <input name=\"note\" id=\"edit-note\" maxlength=\"500\" "
                   "required></label> "
                   "<label><input type=\"checkbox\" name=\"keep\" value=\"1\" id=\"edit-keep\"> "
                   "keep it in the queue</label>"
                   "<div class=\"buttons\"><button type=\"submit\" name=\"do\" value=\"preview\" "
                   "id=\"edit-preview\">Preview edit</button> "
                   "<button type=\"submit\" name=\"do\" value=\"edit\" id=\"edit-run\">Edit"
                   "</button></div></form></section>");
}

/* Fills rq's changes from the form; false (why in err) for a bad one. */
static bool changes_of(console_req *r, const dlqb_profile *p, ops_edit_request *rq, char *set,
                       size_t set_cap, char *unset, size_t unset_cap, dlqb_error *err) {
  console_form(r, "set", set, set_cap);
  console_form(r, "unset", unset, unset_cap);
  for (char *line = strtok(set, "\r\n"); line != NULL; line = strtok(NULL, "\r\n"))
    if (line[0] != '\0' && dlqb_edit_add(&rq->req, p, line, false, err) != DLQB_OK) return false;
  for (char *f = strtok(unset, " ,\t"); f != NULL; f = strtok(NULL, " ,\t"))
    if (dlqb_edit_add(&rq->req, p, f, true, err) != DLQB_OK) return false;
  if (rq->req.n == 0) return dlqb_fail(err, DLQB_EINVAL, "nothing to change") == DLQB_OK;
  return true;
}

static void value_cell(dlqb_html *h, const char *label, bool present, const char *v, bool hashed) {
  dlqb_html_td(h, label, NULL);
  if (!present) dlqb_html_raw(h, "<em>absent</em>");
  else {
    if (hashed) dlqb_html_raw(h, "sha256 ");
    dlqb_html_text(h, v);
  }
  dlqb_html_raw(h, "</td>");
}

/* The change as the dry run shows it: each field before and after, the
 * body's size and hash, whether the result is valid. */
static void preview_table(dlqb_html *h, const ops_edit_result *res) {
  const dlqb_hop_edit *e = &res->rec;
  dlqb_html_raw(h, "<table id=\"edit-preview-table\"><thead><tr><th>field</th><th>before</th>"
                   "<th>after</th></tr></thead><tbody>");
  for (size_t i = 0; i < e->nfields; i++) {
    const dlqb_edit_field *f = &e->fields[i];
    dlqb_html_raw(h, "<tr>");
    dlqb_html_cell(h, "field", f->field);
    value_cell(h, "before", f->had_old, f->old_value, f->hashed);
    value_cell(h, "after", f->has_new, f->new_value, f->hashed);
    dlqb_html_raw(h, "</tr>");
  }
  dlqb_html_raw(h, "</tbody></table><p id=\"edit-body\">");
  dlqb_html_textf(h, "body: %llu bytes sha256 %s", (unsigned long long)e->body_size_before,
                  e->body_sha256_before);
  if (strcmp(e->body_sha256_before, e->body_sha256_after) == 0) dlqb_html_raw(h, " (unchanged)");
  dlqb_html_raw(h, "</p><p id=\"edit-valid\">");
  if (res->valid) dlqb_html_textf(h, "valid under profile %s", console_g.pipeline->profile.name);
  else {
    dlqb_html_raw(h, "still invalid: ");
    dlqb_html_text(h, res->invalid.msg);
  }
  dlqb_html_raw(h, "</p>");
}

/* Runs rq as the signed-in user: their broker credentials, their name as
 * the actor, their trail writer. */
static void run_as_user(console_req *r, ops_edit_request *rq, ops_edit_result *res) {
  const dlqb_config *cfg = console_g.cfg;
  dlqb_broker_conf *user_broker = console_user_broker(&cfg->broker, &r->who);
  if (user_broker == NULL) {
    memset(res, 0, sizeof *res);
    res->outcome = OPS_EDIT_FAILED;
    dlqb_fail(&res->err, DLQB_ENOMEM, "out of memory");
    return;
  }
  /* The edit selects its one item itself: x.sel stays unset. */
  ops_ctx x = {.cfg = cfg,
               .broker = user_broker,
               .pipeline = console_g.pipeline,
               .actor = r->who.user,
               .window = DLQB_SCAN_WINDOW_DEFAULT};
  rq->editor = r->who.user; /* the broker authenticated them as this user */
  dlqb_error err = {{0}};
  char writer[400];
  snprintf(writer, sizeof writer, "console@%s", cfg->instance);
  /* A preview writes nothing; anything else is recorded or refused. */
  ops_session_opts so = {
      .cfg = cfg, .broker = user_broker, .writer = writer, .read_only = rq->dry_run};
  ops_session *session = NULL;
  dlqb_status st = ops_session_open(&so, &session, &err);
  if (st == DLQB_OK) ops_edit_run(&x, rq, session, NULL, res);
  else {
    memset(res, 0, sizeof *res);
    res->outcome = OPS_EDIT_FAILED;
    res->err = err;
  }
  ops_session_close(session);
  console_broker_free(user_broker);
}

/* An approval interrupted mid-way (its intent recorded, no end): the
 * approver, having checked that no copy carrying that edit id is live,
 * approves again naming it; the proposer never gets here (their own
 * approval is refused first). */
static void settle_form(console_req *r, const ops_edit_request *rq, const ops_edit_result *res) {
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<form method=\"post\" action=\"/edit/decide\" class=\"action\" "
                   "id=\"settle\">");
  console_csrf_field(r);
  dlqb_html_raw(h, "<input type=\"hidden\" name=\"proposal\" value=\"");
  dlqb_html_text(h, rq->proposal_id);
  dlqb_html_raw(h, "\"><input type=\"hidden\" name=\"kind\" value=\"approve\">"
                   "<input type=\"hidden\" name=\"after-interrupted\" value=\"");
  dlqb_html_text(h, res->interrupted_edit);
  dlqb_html_raw(h, "\"><label><span>I checked the work queue and the completion ledger: no copy "
                   "carrying ");
  dlqb_html_text(h, res->interrupted_edit);
  dlqb_html_raw(h, " is live</span><input type=\"checkbox\" name=\"checked\" value=\"yes\" "
                   "id=\"settle-checked\" required></label>"
                   "<button type=\"submit\" id=\"settle-approve\">Approve after the "
                   "interrupted one</button></form>");
}

static void result_page(console_req *r, const ops_edit_request *rq, const ops_edit_result *res) {
  bool ok = res->outcome == OPS_EDIT_DONE || res->outcome == OPS_EDIT_PREVIEWED ||
            res->outcome == OPS_EDIT_PROPOSED || res->outcome == OPS_EDIT_REJECTED;
  r->status = ok ? 200 : res->outcome == OPS_EDIT_FAILED ? 502 : 409;
  console_page_begin(r, ok ? "Edit" : "Edit: not done");
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, ok ? "<p class=\"summary\" id=\"edit-result\">"
                      : "<p class=\"error\" id=\"edit-result\">");
  const dlqb_hop_edit *e = &res->rec;
  switch (res->outcome) {
  case OPS_EDIT_PREVIEWED:
    dlqb_html_textf(h, "Preview of edit %s of %s: %s -> %s. Nothing moved.", e->edit_id,
                    res->item.message_id, res->from, res->to);
    break;
  case OPS_EDIT_DONE:
    if (e->approver[0])
      dlqb_html_textf(h, "Done: edit %s approved by %s (proposed by %s): %s -> %s.", e->edit_id,
                      e->approver, e->editor, res->from, res->to);
    else dlqb_html_textf(h, "Done: edited as %s: %s -> %s.", e->edit_id, res->from, res->to);
    break;
  case OPS_EDIT_PROPOSED:
    dlqb_html_textf(h,
                    "Proposed edit %s: it waits in %s for a different broker user to "
                    "approve it (the review inbox).",
                    e->edit_id, res->from);
    break;
  case OPS_EDIT_REJECTED:
    dlqb_html_textf(h, "Rejected edit %s: the task stays in %s as it was.", rq->proposal_id,
                    res->from);
    break;
  case OPS_EDIT_NOT_FOUND:
    dlqb_html_textf(h, "No item with this message_id is in %s now.", res->from);
    break;
  default: dlqb_html_text(h, res->err.msg);
  }
  dlqb_html_raw(h, "</p>");
  bool shown = res->outcome != OPS_EDIT_NOT_FOUND && res->outcome != OPS_EDIT_FAILED &&
               res->outcome != OPS_EDIT_VOID && rq->mode != OPS_EDIT_MODE_REJECT;
  if (res->outcome == OPS_EDIT_INTERRUPTED && rq->mode == OPS_EDIT_MODE_APPROVE)
    settle_form(r, rq, res);
  if (shown) preview_table(h, res);
  dlqb_html_raw(h, "<p><a href=\"/review\">The review inbox</a> · <a href=\"/\">The DLQ</a></p>");
  console_page_end(r);
}

void console_post_edit(console_req *r) {
  ops_edit_request *rq = calloc(1, sizeof *rq);
  ops_edit_result *res = calloc(1, sizeof *res);
  char *set = calloc(1, 4097), *unset = calloc(1, 513);
  char mid[130] = "", note[DLQB_LAST_ERROR_MAX + 1] = "", what[16] = "", keep[4] = "";
  if (rq == NULL || res == NULL || set == NULL || unset == NULL) {
    console_error_page(r, 500, "Out of memory", "out of memory");
    goto done;
  }
  console_form(r, "message-id", mid, sizeof mid);
  console_form(r, "note", note, sizeof note);
  console_form(r, "do", what, sizeof what);
  console_form(r, "keep", keep, sizeof keep);
  dlqb_error err = {{0}};
  const dlqb_pipeline *p = console_g.pipeline;
  if (mid[0] == '\0' || note[0] == '\0' ||
      !changes_of(r, &p->profile, rq, set, 4097, unset, 513, &err)) {
    console_error_page(r, 400, "Not done", err.msg[0] ? err.msg : "Give the changes and a note.");
    goto done;
  }
  rq->message_id = mid;
  rq->note = note;
  rq->keep = strcmp(keep, "1") == 0;
  rq->dry_run = strcmp(what, "edit") != 0;
  /* Four eyes as the CLI has them: the pipeline's policy makes it a proposal. */
  rq->mode = !rq->dry_run && p->policy.edit_approval ? OPS_EDIT_MODE_PROPOSE : OPS_EDIT_MODE_DIRECT;
  run_as_user(r, rq, res);
  result_page(r, rq, res);
done:
  free(set);
  free(unset);
  free(rq);
  free(res);
}

void console_post_edit_decide(console_req *r) {
  ops_edit_request *rq = calloc(1, sizeof *rq);
  ops_edit_result *res = calloc(1, sizeof *res);
  char id[DLQB_EDIT_ID_MAX + 2] = "", kind[16] = "", note[DLQB_LAST_ERROR_MAX + 1] = "";
  if (rq == NULL || res == NULL) {
    console_error_page(r, 500, "Out of memory", "out of memory");
    goto done;
  }
  console_form(r, "proposal", id, sizeof id);
  console_form(r, "kind", kind, sizeof kind);
  console_form(r, "note", note, sizeof note);
  char after[DLQB_EDIT_ID_MAX + 2] = "", checked[8] = "";
  console_form(r, "after-interrupted", after, sizeof after);
  console_form(r, "checked", checked, sizeof checked);
  bool approve = strcmp(kind, "approve") == 0;
  if (after[0] != '\0' && (!approve || strcmp(checked, "yes") != 0)) {
    console_error_page(r, 400, "Not done",
                       "Settling an interrupted approval needs your check that its copy is not "
                       "live.");
    goto done;
  }
  if (id[0] == '\0' || (!approve && strcmp(kind, "reject") != 0) || (!approve && !note[0])) {
    console_error_page(r, 400, "Not done", "Give a proposal and approve, or reject with a note.");
    goto done;
  }
  rq->mode = approve ? OPS_EDIT_MODE_APPROVE : OPS_EDIT_MODE_REJECT;
  rq->proposal_id = id;
  rq->note = note[0] ? note : NULL;
  rq->after_interrupted = after[0] ? after : NULL;
  run_as_user(r, rq, res);
  result_page(r, rq, res);
done:
  free(rq);
  free(res);
}

/* ---- the pending edits in the review inbox ------------------------------ */

#define PENDING_MAX 100

typedef struct {
  char message_id[128];
  char request_id[DLQB_ID_MAX + 1];
  char id[DLQB_EDIT_ID_MAX];
  char by[128];
  dlqb_edit_request req;
  char note[DLQB_LAST_ERROR_MAX + 1];
  bool bad; /* its proposal header does not parse */
} pending;

typedef struct {
  pending *p;
  size_t n;
} pending_list;

static dlqb_status pending_item(void *ctx, const dlqb_item *it, const dlqb_delivery *d,
                                bool *enough, dlqb_error *err) {
  pending_list *l = ctx;
  (void)enough, (void)err;
  const amqp_table_t *h = (d->props->_flags & AMQP_BASIC_HEADERS_FLAG) ? &d->props->headers : NULL;
  char id[DLQB_EDIT_ID_MAX];
  if (l->n < PENDING_MAX && dlqb_header_id(h, DLQB_H_EDIT_PROPOSAL_ID, id, sizeof id)) {
    pending *p = &l->p[l->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->id, sizeof p->id, "%s", id);
    snprintf(p->message_id, sizeof p->message_id, "%s", it->message_id);
    snprintf(p->request_id, sizeof p->request_id, "%s", it->request_id);
    if (!dlqb_header_id(h, DLQB_H_EDIT_PROPOSED_BY, p->by, sizeof p->by)) p->by[0] = '\0';
    char json[4096];
    bool keep;
    dlqb_error why;
    p->bad = !dlqb_header_id(h, DLQB_H_EDIT_PROPOSAL, json, sizeof json) ||
             dlqb_edit_proposal_decode(json, strlen(json), &console_g.pipeline->profile, &p->req,
                                       p->note, sizeof p->note, &keep, &why) != DLQB_OK;
  }
  return DLQB_OK;
}

static void decide_form(console_req *r, const pending *p, bool approve) {
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<form method=\"post\" action=\"/edit/decide\" class=\"action\">");
  console_csrf_field(r);
  dlqb_html_raw(h, "<input type=\"hidden\" name=\"proposal\" value=\"");
  dlqb_html_text(h, p->id);
  dlqb_html_raw(h, approve ? "\"><input type=\"hidden\" name=\"kind\" value=\"approve\">"
                             "<button type=\"submit\" class=\"approve\">Approve</button></form>"
                           : "\"><input type=\"hidden\" name=\"kind\" value=\"reject\">"
                             "<input name=\"note\" placeholder=\"note\" maxlength=\"500\" "
                             "required><button type=\"submit\" class=\"reject\">Reject</button>"
                             "</form>");
}

void console_edit_inbox(console_req *r) {
  dlqb_html *h = &r->out;
  pending_list l = {.p = calloc(PENDING_MAX, sizeof(pending))};
  if (l.p == NULL) return;
  dlqb_broker_conf *user_broker = console_user_broker(&console_g.cfg->broker, &r->who);
  if (user_broker == NULL) {
    dlqb_html_raw(h, "<p class=\"error\">Edits waiting: out of memory.</p>");
    free(l.p);
    return;
  }
  /* The proposals are in the messages' headers: the queue itself. */
  ops_look look = {.queue = console_g.pipeline->dlq,
                   .source = OPS_LOOK_QUEUE,
                   .purpose = "dlq-bridge console edits",
                   .actor = r->who.user,
                   .broker = user_broker,
                   .on_item = pending_item,
                   .ctx = &l};
  dlqb_error err = {{0}};
  dlqb_status st = ops_look_run(console_g.cfg, &look, &err);
  console_broker_free(user_broker);
  dlqb_html_raw(h, "<h2>Edits waiting for approval</h2>");
  if (st != DLQB_OK) {
    dlqb_html_raw(h, "<p class=\"error\">");
    dlqb_html_text(h, err.msg);
    dlqb_html_raw(h, "</p>");
    free(l.p);
    return;
  }
  dlqb_html_raw(h, "<p class=\"summary\" id=\"edits-count\">");
  dlqb_html_textf(h, "%zu edits wait in %s", l.n, console_g.pipeline->dlq);
  dlqb_html_raw(h, "</p><table id=\"edits\"><thead><tr><th>edit</th><th>message_id</th>");
  dlqb_html_raw(h, "<th>task</th><th>proposed by</th><th>changes</th><th>note</th>"
                   "<th>actions</th></tr></thead><tbody>");
  for (size_t i = 0; i < l.n; i++) {
    const pending *p = &l.p[i];
    dlqb_html_raw(h, "<tr>");
    dlqb_html_td(h, "edit", "edit-id id");
    dlqb_html_text(h, p->id);
    dlqb_html_raw(h, "</td>");
    dlqb_html_td(h, "message_id", "id");
    dlqb_html_text(h, p->message_id);
    dlqb_html_raw(h, "</td>");
    dlqb_html_td(h, "task", "id");
    dlqb_html_text(h, p->request_id);
    dlqb_html_raw(h, "</td>");
    dlqb_html_td(h, "proposed by", "proposer");
    dlqb_html_text(h, p->by);
    dlqb_html_raw(h, "</td>");
    dlqb_html_td(h, "changes", "changes");
    if (p->bad) dlqb_html_raw(h, "<em>not a proposal</em>");
    for (size_t k = 0; !p->bad && k < p->req.n; k++) {
      const dlqb_edit_change *c = &p->req.changes[k];
      if (k > 0) dlqb_html_raw(h, "; ");
      dlqb_html_text(h, c->field);
      dlqb_html_raw(h, c->unset ? " removed" : " = ");
      if (!c->unset) dlqb_html_text(h, c->value);
    }
    dlqb_html_raw(h, "</td>");
    dlqb_html_td(h, "note", NULL);
    dlqb_html_text(h, p->note);
    dlqb_html_raw(h, "</td>");
    dlqb_html_td(h, "actions", "acts");
    /* The proposer's own: no Approve (the service refuses it anyway). */
    if (strcmp(p->by, r->who.user) != 0) decide_form(r, p, true);
    decide_form(r, p, false);
    dlqb_html_raw(h, "</td></tr>");
  }
  dlqb_html_raw(h, "</tbody></table><p class=\"note\">A different broker user than the "
                   "proposer approves; approving runs the edit as proposed, checked again.</p>");
  free(l.p);
}

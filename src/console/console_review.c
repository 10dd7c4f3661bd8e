/* The review inbox in the console: what waits in compliance_review (most
 * urgent statutory deadline first), claim, and decide (replay, resolve with
 * a note, return to the DLQ), each one item at a time on review_act_pass,
 * the pass `dlq-bridge review claim/decide` runs, as the signed-in broker
 * user: custody (who owns an item) is checked there, and a forced step is
 * recorded as forced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console.h"
#include "dlqb/clock.h"
#include "dlqb/review.h"
#include "dlqb/topology.h"
#include "dlqb/ops.h"

typedef struct {
  ops_urgent urgent;
  uint64_t total, unclaimed;
  int64_t now_ms;
} inbox_ctx;

static dlqb_status inbox_item(void *ctx, const dlqb_item *it, const dlqb_delivery *d, bool *enough,
                              dlqb_error *err) {
  (void)d, (void)enough, (void)err;
  inbox_ctx *c = ctx;
  ops_urgent_keep(&c->urgent, it, dlqb_item_deadline(&console_g.cfg->deadlines, it, c->now_ms),
                  c->total);
  c->total++;
  if (it->owner[0] == '\0') c->unclaimed++;
  return DLQB_OK;
}

static void hidden(dlqb_html *h, const char *name, const char *value) {
  dlqb_html_raw(h, "<input type=\"hidden\" name=\"");
  dlqb_html_text(h, name);
  dlqb_html_raw(h, "\" value=\"");
  dlqb_html_text(h, value);
  dlqb_html_raw(h, "\">");
}

static void act_form(console_req *r, const dlqb_item *it, const char *kind, const char *label,
                     bool note, bool force) {
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<form method=\"post\" action=\"/review/act\" class=\"action\">");
  console_csrf_field(r);
  hidden(h, "message-id", it->message_id);
  hidden(h, "kind", kind);
  if (force) hidden(h, "force", "1");
  if (note)
    dlqb_html_raw(h, "<input name=\"note\" placeholder=\"note\" maxlength=\"1024\" required>");
  dlqb_html_raw(h, "<button type=\"submit\">");
  dlqb_html_text(h, label);
  dlqb_html_raw(h, "</button></form>");
}

void console_page_review(console_req *r) {
  inbox_ctx c = {.now_ms = dlqb_now_ms()};
  if (!ops_urgent_init(&c.urgent, CONSOLE_LIST_MAX)) {
    console_error_page(r, 500, "Out of memory", "out of memory");
    return;
  }
  dlqb_broker_conf *user_broker = console_user_broker(&console_g.cfg->broker, &r->who);
  if (user_broker == NULL) {
    ops_urgent_free(&c.urgent);
    console_error_page(r, 500, "Out of memory", "out of memory");
    return;
  }
  ops_look look = {.queue = console_g.pipeline->review,
                   .source = OPS_LOOK_CATALOG,
                   .reader = console_g.catalog,
                   .purpose = "dlq-bridge console review",
                   .actor = r->who.user,
                   .broker = user_broker,
                   .on_item = inbox_item,
                   .ctx = &c};
  dlqb_error err = {{0}};
  dlqb_status st = ops_look_run(console_g.cfg, &look, &err);
  console_broker_free(user_broker);
  if (st != DLQB_OK) {
    ops_urgent_free(&c.urgent);
    console_error_page(r, 502, "The broker refused", err.msg);
    return;
  }
  ops_urgent_sort(&c.urgent);
  console_page_begin(r, "Review inbox");
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<p class=\"summary\" id=\"review-count\">");
  dlqb_html_textf(h, "%llu item%s wait%s in %s, %llu unclaimed", (unsigned long long)c.total,
                  c.total == 1 ? "" : "s", c.total == 1 ? "s" : "", console_g.pipeline->review,
                  (unsigned long long)c.unclaimed);
  dlqb_html_raw(h, "</p><table id=\"review\"><thead><tr><th>time left</th>");
  console_identity_th(h);
  if (ops_profile_has(&console_g.pipeline->profile, DLQB_H_LEGAL_BASIS))
    dlqb_html_raw(h, "<th>legal_basis</th>");
  dlqb_html_raw(h, "<th>in review</th>"
                   "<th>escalated by</th><th>why</th><th>note</th><th>owner</th>"
                   "<th>actions</th></tr></thead><tbody>\n");
  for (size_t i = 0; i < c.urgent.n; i++) {
    const ops_kept *k = &c.urgent.kept[i];
    const dlqb_item *it = &k->it;
    char left[32], age[32];
    uint64_t a = 0;
    bool known = dlqb_review_age(it, c.now_ms, &a);
    const dlqb_profile *pr = &console_g.pipeline->profile;
    dlqb_html_raw(h, "<tr>");
    dlqb_html_td(h, "time left", "num left");
    dlqb_html_text(h, ops_left_text(&k->d, left, sizeof left));
    dlqb_html_raw(h, "</td>");
    dlqb_html_cell(h, pr->fields[0].name, it->request_id);
    dlqb_html_cell(h, pr->fields[1].name, it->source_system);
    if (ops_profile_has(pr, DLQB_H_LEGAL_BASIS)) dlqb_html_cell(h, "legal_basis", it->legal_basis);
    dlqb_html_cell(h, "in review", ops_age_text(known, a, age, sizeof age));
    dlqb_html_cell(h, "escalated by", it->escalated_by);
    dlqb_html_cell(h, "why", it->escalation_reason);
    dlqb_html_cell(h, "note", it->escalation_note);
    dlqb_html_cell(h, "owner", it->owner);
    dlqb_html_td(h, "actions", "acts");
    bool mine = strcmp(it->owner, r->who.user) == 0;
    if (it->owner[0] == '\0') act_form(r, it, "claim", "Claim", false, false);
    else if (!mine) act_form(r, it, "claim", "Take over (recorded as forced)", false, true);
    if (mine) {
      act_form(r, it, "replay", "Decide: replay", false, false);
      act_form(r, it, "resolve", "Decide: resolve", true, false);
      act_form(r, it, "return", "Decide: return to the DLQ", false, false);
    }
    dlqb_html_raw(h, "</td></tr>\n");
  }
  dlqb_html_raw(h, "</tbody></table><p class=\"note\">Claim an item to decide it; a decision "
                   "on an item someone else owns needs a take-over first.</p>");
  console_edit_inbox(r);
  console_page_end(r);
  ops_urgent_free(&c.urgent);
}

/* A review act's pass and what it runs with: the loaded settings and the
 * person's broker credentials (on the heap: the act is large). */
typedef struct {
  dlqb_broker_conf *broker; /* console_user_broker's */
  char actor[CONSOLE_USER_MAX];
  ops_review_act a;
} review_post;

void console_post_review_act(console_req *r) {
  review_post *p = calloc(1, sizeof *p);
  ops_review_act *c = p != NULL ? &p->a : NULL;
  char mid[130] = "", kind[16] = "", note[DLQB_LAST_ERROR_MAX + 1] = "", force[4] = "";
  console_form(r, "message-id", mid, sizeof mid);
  console_form(r, "kind", kind, sizeof kind);
  console_form(r, "note", note, sizeof note);
  console_form(r, "force", force, sizeof force);
  static const char *const kinds[] = {"claim", "replay", "resolve", "return"};
  int k = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(kind, kinds[i]) == 0) k = i;
  if (c == NULL || mid[0] == '\0' || k < 0 || (k == OPS_ACT_RESOLVE && note[0] == '\0')) {
    free(p);
    console_error_page(r, 400, "Not done",
                       "Give an item and one of claim, replay, resolve (with a note) or return.");
    return;
  }
  if ((p->broker = console_user_broker(&console_g.cfg->broker, &r->who)) == NULL) {
    free(p);
    console_error_page(r, 500, "Out of memory", "out of memory");
    return;
  }
  snprintf(p->actor, sizeof p->actor, "%s", r->who.user);
  c->x = (ops_ctx){.cfg = console_g.cfg,
                   .broker = p->broker,
                   .pipeline = console_g.pipeline,
                   .actor = p->actor,
                   .window = DLQB_SCAN_WINDOW_DEFAULT};
  c->kind = (ops_act_kind)k;
  c->message_id = mid;
  c->note = note[0] ? note : NULL;
  c->force = strcmp(force, "1") == 0;
  const char *command = k == OPS_ACT_CLAIM ? "review claim" : "review decide";
  dlqb_error err = {{0}};
  dlqb_scan_result res;
  char writer[400];
  snprintf(writer, sizeof writer, "console@%s", console_g.cfg->instance);
  /* As the CLI's movers: nothing unrecorded. */
  ops_session_opts so = {.cfg = console_g.cfg, .broker = p->broker, .writer = writer};
  ops_session *session = NULL;
  dlqb_status st = ops_session_open(&so, &session, &err);
  if (st == DLQB_OK) st = ops_review_act_pass(c, command, session, NULL, &res, &err);
  ops_session_close(session);
  console_broker_free(p->broker); /* wiped: it holds the person's password */
  p->broker = NULL;
  char msg[DLQB_ERROR_MAX + 256];
  unsigned status = 200;
  if (st != DLQB_OK) {
    status = 502;
    snprintf(msg, sizeof msg, "%s", err.msg);
  } else if (!c->found) {
    status = 404;
    snprintf(msg, sizeof msg, "No item with this message_id is in %s now.",
             console_g.pipeline->review);
  } else if (c->unsettled) {
    status = 409;
    ops_open_move_text(1, c->message_id, &c->open, msg, sizeof msg);
  } else if (c->gate == DLQB_GATE_ALREADY_MINE) {
    snprintf(msg, sizeof msg, "You have claimed it already.");
  } else if (c->gate == DLQB_GATE_OWNED) {
    status = 409;
    snprintf(msg, sizeof msg, "%s owns it: take it over first (recorded as forced).",
             c->item.owner);
  } else if (c->gate == DLQB_GATE_UNCLAIMED) {
    status = 409;
    snprintf(msg, sizeof msg, "Nobody has claimed it: claim it first.");
  } else if (!c->settled) {
    status = 502;
    snprintf(msg, sizeof msg, "The broker did not confirm the step; the item is still in %s.",
             console_g.pipeline->review);
  } else {
    snprintf(msg, sizeof msg, "Done: %s%s.", dlqb_event_name(c->done_event),
             c->gate == DLQB_GATE_FORCED ? " (forced)" : "");
  }
  r->status = status;
  console_page_begin(r, status == 200 ? "Review: done" : "Review: not done");
  dlqb_html_raw(&r->out, status == 200 ? "<p class=\"summary\" id=\"review-result\">"
                                       : "<p class=\"error\" id=\"review-result\">");
  dlqb_html_text(&r->out, msg);
  dlqb_html_raw(&r->out, "</p><p><a href=\"/review\">Back to the review inbox</a></p>");
  console_page_end(r);
  explicit_bzero(p, sizeof *p);
  free(p);
}

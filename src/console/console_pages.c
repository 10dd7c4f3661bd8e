/* The console's pages: sign-in, failure groups, a group's items, an item.
 * Each list is one bounded pass over the DLQ as the signed-in broker user
 * (every item held, so nothing moves): the groups page keeps only the
 * aggregator's bounded table, the items page at most CONSOLE_LIST_MAX
 * items. Every string from a message goes through dlqb_html_text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "console.h"
#include "dlqb/clock.h"
#include "dlqb/group.h"
#include "dlqb/scan.h"
#include "dlqb/select.h"
#include "dlqb/topology.h"
#include "dlqb/ops.h"

/* A time as the person's local time ("2026-12-01 12:04:05 CET"). */
static void local_time(dlqb_html *h, int64_t epoch_ms) {
  time_t t = (time_t)(epoch_ms / 1000);
  struct tm tm;
  char buf[64];
  if (localtime_r(&t, &tm) == NULL || strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", &tm) == 0)
    snprintf(buf, sizeof buf, "?");
  dlqb_html_text(h, buf);
}

static void age_cell(dlqb_html *h, const char *label, bool known, uint64_t age_ms) {
  char buf[32];
  dlqb_html_td(h, label, "num");
  dlqb_html_text(h, ops_age_text(known, age_ms, buf, sizeof buf));
  dlqb_html_raw(h, "</td>");
}

/* ---- sign-in ---------------------------------------------------------- */

static void login_form(console_req *r, const char *why) {
  console_page_begin(r, "Sign in");
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<p>Sign in with your own RabbitMQ user: the console acts on the broker as "
                   "you, so the broker's permissions decide what you may do, and the audit "
                   "trail names you.</p>");
  if (why != NULL) {
    dlqb_html_raw(h, "<p class=\"error\" id=\"error\">");
    dlqb_html_text(h, why);
    dlqb_html_raw(h, "</p>");
  }
  dlqb_html_raw(h, "<form method=\"post\" action=\"/login\" class=\"login\">"
                   "<label>Broker user <input name=\"user\" id=\"user\" autocomplete=\"username\" "
                   "required></label>"
                   "<label>Password <input name=\"password\" id=\"password\" type=\"password\" "
                   "autocomplete=\"current-password\" required></label>"
                   "<button type=\"submit\" id=\"sign-in\">Sign in</button></form>");
  console_page_end(r);
}

void console_page_login(console_req *r) { login_form(r, NULL); }

void console_post_login(console_req *r) {
  char user[CONSOLE_USER_MAX + 1] = "", password[CONSOLE_PASSWORD_MAX + 1] = "",
                               why[DLQB_ERROR_MAX + 64];
  console_form(r, "user", user, sizeof user);
  console_form(r, "password", password, sizeof password);
  console_who who;
  unsigned status = 403;
  bool ok = console_sign_in(console_g.cfg, r->addr, user, password, &who, why, sizeof why, &status);
  explicit_bzero(password, sizeof password);
  if (!ok) {
    r->status = status;
    r->signed_in = false;
    login_form(r, why);
    return;
  }
  snprintf(r->cookie, sizeof r->cookie, "dlqb_session=%s; Path=/; HttpOnly; SameSite=Strict%s",
           who.id, console_g.tls ? "; Secure" : "");
  explicit_bzero(&who, sizeof who);
  r->status = 303;
  snprintf(r->location, sizeof r->location, "/");
}

void console_post_logout(console_req *r) {
  console_session_end(r->who.id);
  snprintf(r->cookie, sizeof r->cookie,
           "dlqb_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
  r->status = 303;
  snprintf(r->location, sizeof r->location, "/login");
}

/* ---- a read-only pass over the DLQ as the signed-in user --------------- */

typedef struct {
  dlqb_groups *groups;    /* the groups page */
  const dlqb_select *sel; /* the items page: which to keep */
  ops_urgent urgent;      /* the most urgent of them (statutory time left) */
  uint64_t matched;
  int64_t now_ms;
  dlqb_catalog_view view; /* how the look was answered */
} look_ctx;

static dlqb_status look_item(void *ctx, const dlqb_item *it, const dlqb_delivery *d, bool *enough,
                             dlqb_error *err) {
  (void)d, (void)enough, (void)err;
  look_ctx *c = ctx;
  if (c->groups != NULL) dlqb_groups_add(c->groups, it, c->now_ms);
  if (c->sel != NULL && dlqb_select_match(c->sel, it, c->now_ms)) {
    ops_urgent_keep(&c->urgent, it, dlqb_item_deadline(&console_g.cfg->deadlines, it, c->now_ms),
                    c->matched);
    c->matched++;
  }
  return DLQB_OK;
}

/* One pass, nothing moved. false with the page written on failure. */
static bool look(console_req *r, look_ctx *c, dlqb_scan_result *res) {
  dlqb_broker_conf *user_broker = console_user_broker(&console_g.cfg->broker, &r->who);
  if (user_broker == NULL) {
    console_error_page(r, 500, "Out of memory", "out of memory");
    return false;
  }
  c->now_ms = dlqb_now_ms();
  /* A broker that pauses mid-pass (a million unacked deliveries) is waited
   * for by the pipe itself while messages are still ready. */
  ops_look l = {.queue = console_g.pipeline->dlq,
                .source = OPS_LOOK_CATALOG,
                .reader = console_g.catalog,
                .purpose = "dlq-bridge console",
                .actor = r->who.user,
                .broker = user_broker,
                .on_item = look_item,
                .ctx = c};
  dlqb_error err = {{0}};
  dlqb_status st = ops_look_run(console_g.cfg, &l, &err);
  console_broker_free(user_broker);
  c->view = l.view;
  *res = l.r;
  if (st != DLQB_OK) {
    console_error_page(r, 502, "The broker refused", err.msg);
    return false;
  }
  return true;
}

/* How the look was answered: the catalog and how fresh, or why the queue
 * itself was read. */
static void look_source(dlqb_html *h, const look_ctx *c) {
  char line[DLQB_ERROR_MAX + 512];
  dlqb_html_raw(h, c->view.from_catalog ? "<p class=\"catalog\" id=\"catalog\">"
                                        : "<p class=\"catalog warn\" id=\"catalog\">");
  dlqb_html_text(h, dlqb_catalog_view_text(&c->view, line, sizeof line));
  dlqb_html_raw(h, "</p>");
  if (dlqb_catalog_untrusted_text(&c->view, line, sizeof line) != NULL) {
    dlqb_html_raw(h, "<p class=\"catalog warn\" id=\"untrusted\">");
    dlqb_html_text(h, line);
    dlqb_html_raw(h, "</p>");
  }
}

/* ---- failure groups --------------------------------------------------- */

static void group_row(dlqb_html *h, const dlqb_group *g) {
  dlqb_html_raw(h, "<tr>");
  dlqb_html_td(h, "group", "id");
  dlqb_html_raw(h, "<a class=\"group\" href=\"/group?group=");
  dlqb_html_url(h, g->id);
  dlqb_html_raw(h, "\">");
  dlqb_html_text(h, g->id);
  dlqb_html_raw(h, "</a></td>");
  dlqb_html_td(h, "items", "num count");
  dlqb_html_textf(h, "%llu", (unsigned long long)g->count);
  dlqb_html_raw(h, "</td>");
  age_cell(h, "oldest", g->aged > 0, g->oldest_age_ms);
  age_cell(h, "newest", g->aged > 0, g->newest_age_ms);
  dlqb_html_cell(h, "dlq_reason", g->dlq_reason);
  dlqb_html_cell(h, console_g.pipeline->profile.fields[1].name, g->source_system);
  dlqb_html_td(h, "sample error (and its template)", "error-text");
  dlqb_html_text(h, g->sample[0] ? g->sample : "-");
  dlqb_html_raw(h, "<div class=\"template\">");
  dlqb_html_text(h, g->tmpl);
  dlqb_html_raw(h, "</div></td></tr>\n");
}

void console_page_groups(console_req *r) {
  look_ctx c = {.groups = dlqb_groups_new(0)};
  if (c.groups == NULL) {
    console_error_page(r, 500, "Out of memory", "out of memory");
    return;
  }
  dlqb_scan_result res;
  if (!look(r, &c, &res)) {
    dlqb_groups_free(c.groups);
    return;
  }
  dlqb_groups_sort(c.groups);
  console_page_begin(r, "Failure groups");
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<p class=\"summary\" id=\"dlq-depth\">");
  dlqb_html_textf(h, "%llu items in %s, in %zu groups", (unsigned long long)res.examined,
                  console_g.pipeline->dlq, dlqb_groups_count(c.groups));
  dlqb_html_raw(h, "</p>");
  look_source(h, &c);
  if (res.short_read)
    dlqb_html_raw(h, "<p class=\"warn\">Fewer items arrived than the queue held: another "
                     "consumer took some. Reload to count again.</p>");
  dlqb_html_raw(h, "<table id=\"groups\"><thead><tr><th>group</th><th>items</th><th>oldest</th>"
                   "<th>newest</th><th>dlq_reason</th><th>");
  dlqb_html_text(h, console_g.pipeline->profile.fields[1].name);
  dlqb_html_raw(h, "</th><th>sample error (and its template)</th></tr></thead><tbody>\n");
  for (size_t i = 0; i < dlqb_groups_count(c.groups); i++)
    group_row(h, dlqb_groups_at(c.groups, i));
  const dlqb_group *other = dlqb_groups_other(c.groups);
  if (other->count > 0) {
    dlqb_html_raw(h, "<tr class=\"other\">");
    dlqb_html_cell(h, "group", "other");
    dlqb_html_td(h, "items", "num");
    dlqb_html_textf(h, "%llu", (unsigned long long)other->count);
    dlqb_html_raw(h,
                  "</td><td colspan=\"5\">groups past the table's limit (use filters)</td></tr>");
  }
  dlqb_html_raw(h, "</tbody></table>");
  if (dlqb_groups_total(c.groups) == 0) dlqb_html_raw(h, "<p id=\"empty\">The DLQ is empty.</p>");
  console_page_end(r);
  dlqb_groups_free(c.groups);
}

/* ---- a group's items -------------------------------------------------- */

/* The filters a list and an action take, by their CLI flag names. */
static const char *const filter_names[] = {"group",       "request-id", "source-system",
                                           "legal-basis", "reason",     "older-than",
                                           "newer-than",  "message-id", NULL};

/* One filter of the form. Its request-id and source-system fields are the
 * served profile's two identity fields (labelled with their names): for
 * another profile than dsr's they go in as --id and --match. */
static dlqb_status filter_set(dlqb_select *sel, const char *name, const char *v, dlqb_error *err) {
  const dlqb_profile *pr = &console_g.pipeline->profile;
  bool id0 = strcmp(name, "request-id") == 0, id1 = strcmp(name, "source-system") == 0;
  if (ops_profile_is_dsr(&console_g.pipeline->profile) || (!id0 && !id1))
    return dlqb_select_set(sel, name, v, err);
  if (id0) return dlqb_select_set(sel, "id", v, err);
  char m[DLQB_HEADER_NAME_MAX + DLQB_LAST_ERROR_MAX + 2];
  snprintf(m, sizeof m, "%s=%s", pr->fields[1].name, v);
  return dlqb_select_set(sel, "match", m, err);
}

void console_identity_th(dlqb_html *h) {
  for (int i = 0; i < 2; i++) {
    dlqb_html_raw(h, "<th>");
    dlqb_html_text(h, console_g.pipeline->profile.fields[i].name);
    dlqb_html_raw(h, "</th>");
  }
}

/* The selection of a request (query or form). false with a page written. */
bool console_selection(console_req *r, bool from_form, dlqb_select *sel) {
  dlqb_select_init(sel);
  char v[DLQB_LAST_ERROR_MAX + 1];
  for (const char *const *n = filter_names; *n != NULL; n++) {
    bool given = from_form ? console_form(r, *n, v, sizeof v) : console_arg(r, *n, v, sizeof v);
    if (!given || v[0] == '\0') continue;
    dlqb_error err;
    if (filter_set(sel, *n, v, &err) != DLQB_OK) {
      /* The selection's errors name the CLI's flags ("--group: ..."); a
       * page has a field of that name, not a flag. */
      const char *msg = strncmp(err.msg, "--", 2) == 0 ? err.msg + 2 : err.msg;
      console_error_page(r, 400, "Bad filter", msg);
      return false;
    }
  }
  dlqb_error err;
  if (dlqb_select_bind(sel, &console_g.pipeline->profile, &err) != DLQB_OK) {
    console_error_page(r, 400, "Bad filter", err.msg);
    return false;
  }
  if (!dlqb_select_given(sel)) {
    console_error_page(r, 400, "Nothing selected", "Choose a group, an item or a filter.");
    return false;
  }
  if (dlqb_select_validate(sel, &err) != DLQB_OK) {
    console_error_page(r, 400, "Bad filter", err.msg);
    return false;
  }
  return true;
}

/* The selection's filters again, as hidden fields of an action's form. */
void console_selection_fields(console_req *r, bool from_form) {
  char v[DLQB_LAST_ERROR_MAX + 1];
  for (const char *const *n = filter_names; *n != NULL; n++) {
    bool given = from_form ? console_form(r, *n, v, sizeof v) : console_arg(r, *n, v, sizeof v);
    if (!given || v[0] == '\0') continue;
    dlqb_html_raw(&r->out, "<input type=\"hidden\" name=\"");
    dlqb_html_text(&r->out, *n);
    dlqb_html_raw(&r->out, "\" value=\"");
    dlqb_html_text(&r->out, v);
    dlqb_html_raw(&r->out, "\">");
  }
}

void console_selection_words(console_req *r, bool from_form, dlqb_html *out) {
  char v[DLQB_LAST_ERROR_MAX + 1];
  bool first = true;
  for (const char *const *n = filter_names; *n != NULL; n++) {
    bool given = from_form ? console_form(r, *n, v, sizeof v) : console_arg(r, *n, v, sizeof v);
    if (!given || v[0] == '\0') continue;
    if (!first) dlqb_html_raw(out, ", ");
    dlqb_html_raw(out, *n);
    dlqb_html_raw(out, " ");
    dlqb_html_raw(out, v); /* raw into a plain buffer: escaped where it is shown */
    first = false;
  }
}

static void filter_input(console_req *r, const char *name, const char *label) {
  char v[DLQB_LAST_ERROR_MAX + 1] = "";
  console_arg(r, name, v, sizeof v);
  dlqb_html_raw(&r->out, "<label>");
  dlqb_html_text(&r->out, label);
  dlqb_html_raw(&r->out, " <input name=\"");
  dlqb_html_text(&r->out, name);
  dlqb_html_raw(&r->out, "\" value=\"");
  dlqb_html_text(&r->out, v);
  dlqb_html_raw(&r->out, "\"></label> ");
}

/* The start of the one form that previews an action on what the page
 * shows (its checkboxes, when a list has them, narrow it to those). */
static void action_form_begin(console_req *r) {
  dlqb_html_raw(&r->out, "<form method=\"post\" action=\"/preview\" id=\"selection-form\">");
  console_csrf_field(r);
  console_selection_fields(r, false);
}

/* Its buttons, and the end of the form. */
static void action_form_end(console_req *r, bool picks) {
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<section class=\"actions\"><h2>Act on these items</h2><p>");
  dlqb_html_raw(h, picks ? "On the checked items, or on every item the filters select when "
                           "none is checked. "
                         : "");
  dlqb_html_raw(
      h, "Each action shows first what it would do (a dry run); nothing moves until "
         "you run it. Escalate and resolve need a note.</p>"
         "<div class=\"buttons\"><label>note <input name=\"note\" id=\"note\" "
         "maxlength=\"1024\"></label> "
         "<button type=\"submit\" name=\"action\" value=\"replay\" id=\"preview-replay\">"
         "Preview replay</button> "
         "<button type=\"submit\" name=\"action\" value=\"escalate\" id=\"preview-escalate\">"
         "Preview escalate</button> "
         "<button type=\"submit\" name=\"action\" value=\"resolve\" id=\"preview-resolve\">"
         "Preview resolve</button></div></section></form>");
}

/* One item row of a list; link to its page. */
static void item_row(dlqb_html *h, const ops_kept *k, int64_t now_ms) {
  const dlqb_item *it = &k->it;
  char left[32];
  dlqb_html_raw(h, k->d.kind == DLQB_DEADLINE_KNOWN && k->d.left_ms < 0 ? "<tr class=\"overdue\">"
                                                                        : "<tr>");
  dlqb_html_td(h, "pick", "pick-cell");
  dlqb_html_raw(h, "<input type=\"checkbox\" class=\"pick\" name=\"pick\" value=\"");
  dlqb_html_text(h, it->message_id);
  dlqb_html_raw(h, "\"></td>");
  dlqb_html_td(h, "time left", "num left");
  dlqb_html_text(h, ops_left_text(&k->d, left, sizeof left));
  dlqb_html_raw(h, "</td>");
  uint64_t age = 0;
  bool known = dlqb_item_age(it, now_ms, &age);
  dlqb_html_td(h, console_g.pipeline->profile.fields[0].name, "id");
  dlqb_html_raw(h, "<a href=\"/item?message-id=");
  dlqb_html_url(h, it->message_id);
  dlqb_html_raw(h, "\">");
  dlqb_html_text(h, it->request_id[0] ? it->request_id : "-");
  dlqb_html_raw(h, "</a></td>");
  dlqb_html_cell(h, console_g.pipeline->profile.fields[1].name, it->source_system);
  if (ops_profile_has(&console_g.pipeline->profile, DLQB_H_LEGAL_BASIS))
    dlqb_html_cell(h, "legal_basis", it->legal_basis);
  age_cell(h, "age", known, age);
  dlqb_html_td(h, "attempts", "num");
  if (it->has_attempt) dlqb_html_textf(h, "%lld", (long long)it->attempt);
  else dlqb_html_raw(h, "-");
  dlqb_html_raw(h, "</td>");
  dlqb_html_td(h, "last error", "error-text last-error");
  dlqb_html_text(h, it->last_error[0] ? it->last_error : "-");
  dlqb_html_raw(h, "</td></tr>\n");
}

void console_page_group(console_req *r) {
  dlqb_select sel;
  if (!console_selection(r, false, &sel)) return;
  look_ctx c = {.sel = &sel};
  if (!ops_urgent_init(&c.urgent, CONSOLE_LIST_MAX)) {
    console_error_page(r, 500, "Out of memory", "out of memory");
    return;
  }
  dlqb_scan_result res;
  if (!look(r, &c, &res)) {
    ops_urgent_free(&c.urgent);
    return;
  }
  ops_urgent_sort(&c.urgent);
  char id[DLQB_GROUP_ID_BUF + 8] = "";
  console_arg(r, "group", id, sizeof id);
  console_page_begin(r, id[0] ? "Failure group" : "Selected items");
  dlqb_html *h = &r->out;
  if (id[0]) {
    dlqb_html_raw(h, "<p>Group <code id=\"group-id\">");
    dlqb_html_text(h, id);
    dlqb_html_raw(h, "</code></p>");
  }
  look_source(h, &c);
  dlqb_html_raw(h, "<form method=\"get\" action=\"/group\" class=\"filters\">");
  filter_input(r, "group", "group");
  filter_input(r, "request-id", console_g.pipeline->profile.fields[0].name);
  filter_input(r, "source-system", console_g.pipeline->profile.fields[1].name);
  if (ops_profile_has(&console_g.pipeline->profile, DLQB_H_LEGAL_BASIS))
    filter_input(r, "legal-basis", "legal_basis");
  filter_input(r, "reason", "error contains");
  filter_input(r, "older-than", "older than");
  filter_input(r, "newer-than", "newer than");
  dlqb_html_raw(h, "<button type=\"submit\">Filter</button></form>");
  dlqb_html_raw(h, "<p class=\"summary\" id=\"matched\">");
  dlqb_html_textf(h, "%llu of %llu items in %s match", (unsigned long long)c.matched,
                  (unsigned long long)res.examined, console_g.pipeline->dlq);
  if (c.matched > c.urgent.n)
    dlqb_html_textf(h, "; the %zu with the least statutory time left are shown", c.urgent.n);
  dlqb_html_raw(h, "</p>");
  if (c.matched > 0) action_form_begin(r);
  dlqb_html_raw(h, "<table id=\"items\"><thead><tr><th></th><th>time left</th>");
  console_identity_th(h);
  if (ops_profile_has(&console_g.pipeline->profile, DLQB_H_LEGAL_BASIS))
    dlqb_html_raw(h, "<th>legal_basis</th>");
  dlqb_html_raw(h, "<th>age</th><th>attempts</th>"
                   "<th>last error</th></tr></thead><tbody>\n");
  for (size_t i = 0; i < c.urgent.n; i++) item_row(h, &c.urgent.kept[i], c.now_ms);
  dlqb_html_raw(h, "</tbody></table><p class=\"note\">Sorted by the statutory time left "
                   "(deadlines setting: ");
  char rules[512];
  dlqb_html_text(h, dlqb_deadlines_format(&console_g.cfg->deadlines, rules, sizeof rules));
  dlqb_html_raw(h, "); ? = no usable receipt time, - = no deadline for its legal basis.</p>");
  if (c.matched > 0) action_form_end(r, true);
  console_page_end(r);
  ops_urgent_free(&c.urgent);
}

/* ---- one item ---------------------------------------------------------- */

static void field(dlqb_html *h, const char *name, const char *value) {
  dlqb_html_raw(h, "<tr><th>");
  dlqb_html_text(h, name);
  dlqb_html_raw(h, "</th><td>");
  dlqb_html_text(h, value[0] ? value : "-");
  dlqb_html_raw(h, "</td></tr>");
}

static void time_field(dlqb_html *h, const char *name, bool has, int64_t ms) {
  dlqb_html_raw(h, "<tr><th>");
  dlqb_html_text(h, name);
  dlqb_html_raw(h, "</th><td>");
  if (has) local_time(h, ms);
  else dlqb_html_raw(h, "-");
  dlqb_html_raw(h, "</td></tr>");
}

/* The way the item came, in words, with the times it carries. */
static void story(dlqb_html *h, const dlqb_item *it) {
  dlqb_html_raw(h, "<ol class=\"story\">");
  if (it->has_first_seen_at) {
    dlqb_html_raw(h, "<li>First failed at ");
    local_time(h, it->first_seen_at_ms);
    dlqb_html_raw(h, " (first_seen_at).</li>");
  }
  if (it->has_attempt) {
    dlqb_html_raw(h, "<li>");
    dlqb_html_textf(h, "Tried %lld time%s", (long long)it->attempt, it->attempt == 1 ? "" : "s");
    if (it->replay_count > 0)
      dlqb_html_textf(h, ", after %lld replay%s", (long long)it->replay_count,
                      it->replay_count == 1 ? "" : "s");
    dlqb_html_raw(h, ".</li>");
  }
  if (it->has_xdeath_at) {
    dlqb_html_raw(h, "<li>The broker last dead-lettered it at ");
    local_time(h, it->xdeath_at_ms);
    dlqb_html_raw(h, " (x-death, the broker's clock).</li>");
  }
  if (it->deaths[0] != '\0') {
    /* The whole history, newest first: each entry's queue, reason and
     * count (a client can write x-death too: it is text like any other). */
    dlqb_html_raw(h, "<li>Dead-lettered by the broker (x-death, newest first): <code>");
    dlqb_html_text(h, it->deaths);
    dlqb_html_raw(h, "</code>.</li>");
  }
  dlqb_html_raw(h, "<li>Put in ");
  dlqb_html_text(h, console_g.pipeline->dlq);
  if (it->has_dlq_at) {
    dlqb_html_raw(h, " at ");
    local_time(h, it->dlq_at_ms);
  }
  if (it->dlq_reason[0]) {
    dlqb_html_raw(h, " because ");
    dlqb_html_text(h, it->dlq_reason);
  }
  dlqb_html_raw(h, ".</li></ol>");
}

void console_page_item(console_req *r) {
  char mid[130];
  dlqb_select sel;
  dlqb_error err;
  dlqb_select_init(&sel);
  if (!console_arg(r, "message-id", mid, sizeof mid) || mid[0] == '\0' ||
      dlqb_select_set(&sel, "message-id", mid, &err) != DLQB_OK) {
    console_error_page(r, 400, "No item", "Give a message-id.");
    return;
  }
  look_ctx c = {.sel = &sel};
  if (!ops_urgent_init(&c.urgent, 1)) {
    console_error_page(r, 500, "Out of memory", "out of memory");
    return;
  }
  dlqb_scan_result res;
  if (!look(r, &c, &res)) {
    ops_urgent_free(&c.urgent);
    return;
  }
  if (c.urgent.n == 0) {
    ops_urgent_free(&c.urgent);
    console_error_page(r, 404, "Not in the DLQ", "No item with this message_id is in the DLQ now.");
    return;
  }
  const dlqb_item *it = &c.urgent.kept[0].it;
  const dlqb_deadline *dl = &c.urgent.kept[0].d;
  console_page_begin(r, "Item");
  dlqb_html *h = &r->out;
  char group[DLQB_GROUP_ID_BUF];
  dlqb_group_of(it, group, NULL, 0);
  dlqb_html_raw(h, "<table class=\"envelope\" id=\"envelope\">");
  field(h, "message_id", it->message_id);
  field(h, console_g.pipeline->profile.fields[0].name, it->request_id);
  field(h, console_g.pipeline->profile.fields[1].name, it->source_system);
  /* The dsr profile's fields, shown only where the profile has them. */
  if (ops_profile_has(&console_g.pipeline->profile, DLQB_H_LEGAL_BASIS))
    field(h, "legal_basis", it->legal_basis);
  if (ops_profile_has(&console_g.pipeline->profile, DLQB_H_ACTION)) field(h, "action", it->action);
  field(h, "dlq_reason", it->dlq_reason);
  field(h, "last_error", it->last_error);
  field(h, "failure group", group);
  time_field(h, "first_seen_at", it->has_first_seen_at, it->first_seen_at_ms);
  time_field(h, "dlq_at", it->has_dlq_at, it->dlq_at_ms);
  time_field(h, "timestamp", it->has_timestamp, it->timestamp_ms);
  char left[32];
  time_field(h, "statutory deadline", dl->kind == DLQB_DEADLINE_KNOWN, dl->due_ms);
  field(h, "time left", ops_left_text(dl, left, sizeof left));
  dlqb_html_raw(h, "</table><p class=\"note\">The payload is not shown: it holds personal data.</p>"
                   "<h2>How it got here</h2>");
  story(h, it);
  console_audit_history(r, it);
  dlqb_html_raw(h, "<p><a href=\"/group?group=");
  dlqb_html_url(h, group);
  dlqb_html_raw(h, "\">Its failure group</a></p>");
  action_form_begin(r);
  action_form_end(r, false);
  console_edit_form(r, it);
  console_page_end(r);
  ops_urgent_free(&c.urgent);
}

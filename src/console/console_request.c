/* What a page reads of its request and site and the frame it writes: the
 * query and form fields, the page's head and end, an error page, the CSRF
 * field. The router (console_http.c) and the pages share these; neither
 * imports the other's. */
#include <string.h>

#include "console.h"

/* The site console_start was given. */
console_site console_g;

bool console_arg(const console_req *r, const char *name, char *out, size_t cap) {
  return dlqb_form_get(r->query, strlen(r->query), name, out, cap);
}

bool console_form(const console_req *r, const char *name, char *out, size_t cap) {
  return r->body != NULL && dlqb_form_get(r->body, r->body_len, name, out, cap);
}

/* ---- the frame -------------------------------------------------------- */

void console_page_begin(console_req *r, const char *title) {
  r->content_type = "text/html; charset=utf-8";
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                   "<title>");
  dlqb_html_text(h, title);
  dlqb_html_raw(h, " \xE2\x80\x94 dlq-bridge</title>"
                   "<link rel=\"stylesheet\" href=\"/static/console.css\">"
                   "<script src=\"/static/console.js\" defer></script></head><body>"
                   "<header><a class=\"brand\" href=\"/\">dlq-bridge console</a>");
  if (r->signed_in) {
    dlqb_html_raw(h, "<nav><a href=\"/\">Failure groups</a> <a href=\"/review\">Review inbox</a> "
                     "<a href=\"/jobs\">Actions</a></nav>"
                     "<form class=\"who\" method=\"post\" action=\"/logout\">"
                     "<span>broker user <b id=\"who\">");
    dlqb_html_text(h, r->who.user);
    dlqb_html_raw(h, "</b></span>");
    console_csrf_field(r);
    dlqb_html_raw(h, "<button type=\"submit\">Sign out</button></form>");
  }
  dlqb_html_raw(h, "</header><main><h1>");
  dlqb_html_text(h, title);
  dlqb_html_raw(h, "</h1>\n");
}

void console_page_end(console_req *r) { dlqb_html_raw(&r->out, "</main></body></html>\n"); }

void console_error_page(console_req *r, unsigned status, const char *title, const char *msg) {
  r->status = status;
  console_page_begin(r, title);
  dlqb_html_raw(&r->out, "<p class=\"error\" id=\"error\">");
  dlqb_html_text(&r->out, msg);
  dlqb_html_raw(&r->out, "</p>");
  console_page_end(r);
}

void console_csrf_field(console_req *r) {
  dlqb_html_raw(&r->out, "<input type=\"hidden\" name=\"csrf\" value=\"");
  dlqb_html_text(&r->out, r->who.csrf);
  dlqb_html_raw(&r->out, "\">");
}

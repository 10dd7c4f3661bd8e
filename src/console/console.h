/* dlq-bridge console: the web console's modules, private to src/console/.
 *
 *   console.c          start and stop (dlqb/console.h: the console command's view)
 *   console_http.c     libmicrohttpd, the request, security headers, routing
 *   console_request.c  a request's fields, the page frame, error pages, CSRF field
 *   console_session.c  sign-in as a broker user, sessions, CSRF, rate limit
 *   console_pages.c    failure groups, a group's items, an item
 *   console_actions.c  preview (dry run) and jobs (a real pass in a thread)
 *   jobfile.c          the jobs' file, read at start (dlqb/jobfile.h)
 *   console_review.c   the review inbox: list, claim, decide
 *   console_edit.c     the edit form on an item page, the pending edits in the inbox
 *   console_audit.c    an item's audit history
 *   console_assets.c   the CSS and the one small script, compiled in
 *
 * Pages are rendered here, in C, with every string from a message or a
 * person through dlqb_html_text (dlqb/html.h, html.c). It uses the layers
 * below (dlqb/ops.h for every pass) and nothing of the command line. */
#ifndef DLQB_CONSOLE_H
#define DLQB_CONSOLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/config.h"
#include "dlqb/console.h"
#include "dlqb/html.h"
#include "dlqb/item.h"
#include "dlqb/select.h"

#define CONSOLE_TOKEN_HEX       64 /* a session id or CSRF token: 32 random bytes */
#define CONSOLE_USER_MAX        128
#define CONSOLE_PASSWORD_MAX    256
#define CONSOLE_BODY_MAX        65536 /* a form body (500 checked ids fit); more is refused (413) */
#define CONSOLE_SESSIONS        64    /* signed in at once */
#define CONSOLE_SESSION_IDLE_MS (30 * 60 * 1000)
#define CONSOLE_LOGIN_FAILS     5           /* failed sign-ins per address ... */
#define CONSOLE_LOGIN_WINDOW_MS (60 * 1000) /* ... within this; then 429 */
#define CONSOLE_LIST_MAX        500         /* items a list page shows (the count covers all) */

/* ---- sessions (console_session.c) ------------------------------------ */

/* A signed-in person, as a request sees it (a copy: the table may change). */
typedef struct {
  char id[CONSOLE_TOKEN_HEX + 1];
  char csrf[CONSOLE_TOKEN_HEX + 1];
  char user[CONSOLE_USER_MAX];
  char password[CONSOLE_PASSWORD_MAX]; /* to open the broker as them; never shown */
} console_who;

/* Resets the table and the rate limiter; call once before serving. */
void console_sessions_init(void);

/* Wipes every session's password (at exit). */
void console_sessions_clear(void);

/* Checks user/password against the broker (a connection as that user to
 * base->broker.url's host and vhost) and on success creates a session in *who.
 * false with a message for the person in why (never the password) and the
 * page's HTTP status in *status: 429 too many failed sign-ins from addr,
 * 503 the broker cannot be reached (a server problem, not a refusal), 403
 * refused (a wrong user or password, or no access to the vhost). */
bool console_sign_in(const dlqb_config *base, const char *addr, const char *user,
                     const char *password, console_who *who, char *why, size_t why_len,
                     unsigned *status);

/* Finds the session of a cookie id (refreshing its idle time); false when
 * none or expired. */
bool console_session_find(const char *id, console_who *who);

/* Ends a session. */
void console_session_end(const char *id);

/* The served broker part with the broker credentials of who (its url's
 * user and password replaced, password_file cleared; the TLS files kept),
 * on the heap (NULL: out of memory; free with console_broker_free, which
 * wipes the password). Every broker connection a request or a job opens
 * logs in with it (an ops_ctx's broker, a scan's, the trail's anchors,
 * the ledger reader), beside the served config for everything else, so
 * the broker's permissions decide. */
dlqb_broker_conf *console_user_broker(const dlqb_broker_conf *served, const console_who *who);

/* Wipes and frees what console_user_broker returned. NULL-safe. */
void console_broker_free(dlqb_broker_conf *broker);

/* Fills hex (CONSOLE_TOKEN_HEX + 1 bytes) from the system's CSPRNG. */
bool console_random_token(char *hex);

/* ---- requests and pages ---------------------------------------------- */

typedef struct console_req console_req;

/* What a request asked, as the pages read it. */
struct console_req {
  const char *method; /* "GET", "POST" */
  const char *path;
  const char *query; /* URL-encoded "a=1&b=2" rebuilt from the request, may be "" */
  const char *body;  /* a POST's form body */
  size_t body_len;
  const char *addr; /* the client's address, for the rate limit */
  bool signed_in;
  console_who who;
  /* the answer */
  unsigned status;
  const char *content_type;
  dlqb_html out;
  char location[512]; /* a redirect (303) */
  char cookie[256];   /* a Set-Cookie value */
};

/* The site console_start was given (console_request.c), shared by the pages. */
extern console_site console_g;

/* A query or form field (false when absent); both are URL-encoded. */
bool console_arg(const console_req *r, const char *name, char *out, size_t cap);
bool console_form(const console_req *r, const char *name, char *out, size_t cap);

/* Page frame: head (title escaped), the signed-in bar, and the end. */
void console_page_begin(console_req *r, const char *title);
void console_page_end(console_req *r);

/* A page saying what went wrong (message escaped) with status. */
void console_error_page(console_req *r, unsigned status, const char *title, const char *msg);

/* The hidden CSRF field of a form. */
void console_csrf_field(console_req *r);

/* The selection of a request's query (or form) fields, named as the CLI's
 * filter flags (group, request-id, ...). false with an error page written. */
bool console_selection(console_req *r, bool from_form, dlqb_select *sel);
/* Those fields again as hidden inputs of a form, and as words. */
void console_selection_fields(console_req *r, bool from_form);

/* The two identity columns' <th> cells, named by the served profile
 * (dsr: request_id, source_system). */
void console_identity_th(dlqb_html *h);
void console_selection_words(console_req *r, bool from_form, dlqb_html *out);

/* The item's audit history as `audit show --message-id` lists it
 * (console_audit.c): only from a log that verifies. */
void console_audit_history(console_req *r, const dlqb_item *it);

/* Routes (console_pages.c, console_actions.c). */
void console_page_login(console_req *r);
void console_post_login(console_req *r);
void console_post_logout(console_req *r);
void console_page_groups(console_req *r);
void console_page_group(console_req *r);
void console_page_item(console_req *r);
void console_post_preview(console_req *r);
void console_post_run(console_req *r);
void console_page_job(console_req *r);
void console_json_job(console_req *r);
void console_post_stop(console_req *r);
void console_page_jobs(console_req *r);
void console_page_review(console_req *r); /* console_review.c */
void console_post_review_act(console_req *r);
/* console_edit.c: the edit form on an item page, its POST (preview, edit
 * or propose), the pending edits in the review inbox and their POST. */
void console_edit_form(console_req *r, const dlqb_item *it);
void console_post_edit(console_req *r);
void console_post_edit_decide(console_req *r);
void console_edit_inbox(console_req *r);

/* Jobs (console_actions.c). Resets the table to the jobs of
 * console_jobs_file (console_g's settings, so after console_g is set): a
 * job that was running when the console stopped shows as interrupted; an
 * unusable file is one warning and no history. */
void console_jobs_init(void);
/* Asks running jobs to stop and waits for them (at exit). */
void console_jobs_shutdown(void);

/* Assets (console_assets.c). */
extern const char console_css[];
extern const char console_js[];

/* The server (console_http.c). */
bool console_server_start(const char *addr, const char *cert_file, const char *key_file,
                          console_server **out, int *port, char *why, size_t why_len);
void console_server_stop(console_server *s);

#endif

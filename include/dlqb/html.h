/* HTML for the web console: a growing buffer, the one escaping function
 * every string from a message or a person goes through, and the parsing
 * of what a browser sends (form bodies, cookies). Pure: no I/O.
 *
 * Everything on a message is attacker-controlled (any producer writes any
 * header), so the console writes markup only with dlqb_html_raw (literal
 * text in our own source) and every other string with dlqb_html_text,
 * which escapes & < > " ' and replaces invalid UTF-8 and control
 * characters: safe in element text and in quoted attribute values alike. */
#ifndef DLQB_HTML_H
#define DLQB_HTML_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  char *data; /* NUL-terminated; NULL until the first write */
  size_t len;
  size_t cap;
  bool oom; /* a write ran out of memory: the buffer is incomplete */
} dlqb_html;

/* Frees the buffer's data and empties it. NULL-safe. */
void dlqb_html_free(dlqb_html *h);

/* Appends our own markup (never text from outside). */
void dlqb_html_raw(dlqb_html *h, const char *markup);

/* Appends s (len bytes, need not be NUL-terminated; NULL counts as empty)
 * escaped: & < > " ' as entities, invalid UTF-8 and control characters
 * (C0 but tab and newline, DEL, C1) as U+FFFD. */
void dlqb_html_text_n(dlqb_html *h, const char *s, size_t len);
void dlqb_html_text(dlqb_html *h, const char *s);

/* Appends printf output escaped as dlqb_html_text (for numbers and our
 * own words mixed with values). */
void dlqb_html_textf(dlqb_html *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends s percent-encoded for a URL's query or path segment (every byte
 * but A-Z a-z 0-9 - . _ ~). The result needs no further HTML escaping. */
void dlqb_html_url(dlqb_html *h, const char *s);

/* Opens a table cell: <td data-label="label" class="cls"> (cls NULL or ""
 * for none). The label is the cell's column heading, escaped: on a narrow
 * screen a table is laid out as one card per row and each cell shows its
 * label above its value (the stylesheet's data-label rule), so no column is
 * cut off the right of a phone. */
void dlqb_html_td(dlqb_html *h, const char *label, const char *cls);

/* A whole cell of text (escaped; "-" for an empty one), labelled as
 * dlqb_html_td. */
void dlqb_html_cell(dlqb_html *h, const char *label, const char *text);

/* Finds field `name` in an application/x-www-form-urlencoded body (or a
 * URL's query) of len bytes and decodes it (+ as space, %XX) into out
 * (cap bytes, NUL-terminated). False when absent, too long for out, or
 * badly encoded (a bad %, or a decoded NUL). */
bool dlqb_form_get(const char *body, size_t len, const char *name, char *out, size_t cap);

/* Calls fn with each decoded value of field `name` (a field may repeat:
 * checkboxes) in body order, until fn returns false. Values that do not
 * fit cap-1 bytes or are badly encoded are skipped. Returns how many fn saw. */
size_t dlqb_form_each(const char *body, size_t len, const char *name, size_t cap,
                      bool (*fn)(void *ctx, const char *value), void *ctx);

/* The value of cookie `name` in a Cookie header into out (cap bytes).
 * False when absent or too long. */
bool dlqb_cookie_get(const char *header, const char *name, char *out, size_t cap);

/* Compares two NUL-terminated secrets in time independent of where they
 * differ (the tokens: a session id, a CSRF token). */
bool dlqb_secret_equal(const char *a, const char *b);

#endif

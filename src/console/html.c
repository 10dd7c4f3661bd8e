/* HTML buffer, escaping and browser input parsing (see dlqb/html.h). */
#include "dlqb/html.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dlqb_html_free(dlqb_html *h) {
  if (h == NULL) return;
  free(h->data);
  *h = (dlqb_html){0};
}

static bool reserve(dlqb_html *h, size_t more) {
  if (h->oom) return false;
  if (h->len + more + 1 <= h->cap) return true;
  size_t cap = h->cap ? h->cap : 4096;
  while (cap < h->len + more + 1) {
    if (cap > SIZE_MAX / 2) {
      h->oom = true;
      return false;
    }
    cap *= 2;
  }
  char *p = realloc(h->data, cap);
  if (p == NULL) {
    h->oom = true;
    return false;
  }
  h->data = p;
  h->cap = cap;
  return true;
}

static void append(dlqb_html *h, const char *s, size_t n) {
  if (!reserve(h, n)) return;
  memcpy(h->data + h->len, s, n);
  h->len += n;
  h->data[h->len] = '\0';
}

void dlqb_html_raw(dlqb_html *h, const char *markup) { append(h, markup, strlen(markup)); }

/* Length of the well-formed UTF-8 sequence at p (1..4), 0 when invalid. */
static size_t utf8_seq(const unsigned char *p, size_t left) {
  unsigned c = p[0];
  size_t n;
  unsigned min;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000;
  else return 0;
  if (left < n) return 0;
  unsigned cp = c & (0x3Fu >> (n - 1));
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  if (cp >= 0x80 && cp <= 0x9F) return 0; /* C1 controls */
  return n;
}

void dlqb_html_text_n(dlqb_html *h, const char *s, size_t len) {
  static const char bad[] = "\xEF\xBF\xBD"; /* U+FFFD */
  const unsigned char *p = (const unsigned char *)(s != NULL ? s : "");
  if (s == NULL) len = 0;
  size_t i = 0;
  while (i < len) {
    unsigned c = p[i];
    switch (c) {
    case '&':
      append(h, "&amp;", 5);
      i++;
      continue;
    case '<':
      append(h, "&lt;", 4);
      i++;
      continue;
    case '>':
      append(h, "&gt;", 4);
      i++;
      continue;
    case '"':
      append(h, "&quot;", 6);
      i++;
      continue;
    case '\'':
      append(h, "&#39;", 5);
      i++;
      continue;
    default: break;
    }
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7F) {
      append(h, bad, 3);
      i++;
      continue;
    }
    size_t n = utf8_seq(p + i, len - i);
    if (n == 0) {
      append(h, bad, 3);
      i++;
      continue;
    }
    append(h, (const char *)p + i, n);
    i += n;
  }
}

void dlqb_html_text(dlqb_html *h, const char *s) { dlqb_html_text_n(h, s, s ? strlen(s) : 0); }

void dlqb_html_textf(dlqb_html *h, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  dlqb_html_text_n(h, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

void dlqb_html_td(dlqb_html *h, const char *label, const char *cls) {
  dlqb_html_raw(h, "<td data-label=\"");
  dlqb_html_text(h, label);
  if (cls != NULL && cls[0] != '\0') {
    dlqb_html_raw(h, "\" class=\"");
    dlqb_html_text(h, cls);
  }
  dlqb_html_raw(h, "\">");
}

void dlqb_html_cell(dlqb_html *h, const char *label, const char *text) {
  dlqb_html_td(h, label, NULL);
  dlqb_html_text(h, text != NULL && text[0] ? text : "-");
  dlqb_html_raw(h, "</td>");
}

void dlqb_html_url(dlqb_html *h, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    unsigned c = *p;
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      char one = (char)c;
      append(h, &one, 1);
    } else {
      char enc[3] = {'%', hex[c >> 4], hex[c & 15]};
      append(h, enc, 3);
    }
  }
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Decodes src[0..n) into out; false when it does not fit or is malformed. */
static bool form_decode(const char *src, size_t n, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char c = src[i];
    if (c == '+') c = ' ';
    else if (c == '%') {
      if (i + 2 >= n) return false; /* needs two hex digits after the % */
      int hi = hexval(src[i + 1]), lo = hexval(src[i + 2]);
      if (hi < 0 || lo < 0) return false;
      c = (char)(hi * 16 + lo);
      if (c == '\0') return false;
      i += 2;
    }
    if (o + 1 >= cap) return false;
    out[o++] = c;
  }
  if (cap == 0) return false;
  out[o] = '\0';
  return true;
}

bool dlqb_form_get(const char *body, size_t len, const char *name, char *out, size_t cap) {
  size_t nl = strlen(name);
  size_t i = 0;
  while (i < len) {
    size_t end = i;
    while (end < len && body[end] != '&') end++;
    const char *eq = memchr(body + i, '=', end - i);
    size_t klen = eq ? (size_t)(eq - (body + i)) : end - i;
    if (klen == nl && memcmp(body + i, name, nl) == 0) {
      if (eq == NULL) return form_decode("", 0, out, cap);
      return form_decode(eq + 1, (size_t)(body + end - (eq + 1)), out, cap);
    }
    i = end + 1;
  }
  return false;
}

size_t dlqb_form_each(const char *body, size_t len, const char *name, size_t cap,
                      bool (*fn)(void *ctx, const char *value), void *ctx) {
  size_t nl = strlen(name), seen = 0, i = 0;
  char *out = malloc(cap ? cap : 1);
  if (out == NULL) return 0;
  while (i < len) {
    size_t end = i;
    while (end < len && body[end] != '&') end++;
    const char *eq = memchr(body + i, '=', end - i);
    size_t klen = eq ? (size_t)(eq - (body + i)) : end - i;
    if (klen == nl && memcmp(body + i, name, nl) == 0 && eq != NULL &&
        form_decode(eq + 1, (size_t)(body + end - (eq + 1)), out, cap)) {
      seen++;
      if (!fn(ctx, out)) break;
    }
    i = end + 1;
  }
  free(out);
  return seen;
}

bool dlqb_cookie_get(const char *header, const char *name, char *out, size_t cap) {
  if (header == NULL) return false;
  size_t nl = strlen(name);
  const char *p = header;
  while (*p) {
    while (*p == ' ' || *p == ';') p++;
    const char *end = strchr(p, ';');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > nl && memcmp(p, name, nl) == 0 && p[nl] == '=') {
      size_t vl = n - nl - 1;
      if (vl + 1 > cap) return false;
      memcpy(out, p + nl + 1, vl);
      out[vl] = '\0';
      return true;
    }
    p += n;
  }
  return false;
}

bool dlqb_secret_equal(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  unsigned diff = la != lb;
  size_t n = la < lb ? la : lb;
  for (size_t i = 0; i < n; i++) diff |= (unsigned char)a[i] ^ (unsigned char)b[i];
  return diff == 0 && la > 0;
}

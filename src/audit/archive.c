/* The archive of old audit files: its text, written from a pass over
 * them and read back to start a pass after them (include/dlqb/archive.h). */
#include "dlqb/archive.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/text.h"

#define H       DLQB_MERKLE_HASH
#define B64_MAX 48 /* base64 of 32 bytes: 44 characters and a NUL */

/* ---- writing ---- */

typedef struct {
  char *buf;
  size_t len, cap;
  bool oom;
} text;

__attribute__((format(printf, 2, 3))) static void put(text *t, const char *fmt, ...) {
  for (int pass = 0; pass < 2 && !t->oom; pass++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf != NULL ? t->buf + t->len : NULL, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->oom = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t ncap = t->cap ? t->cap : 65536;
    while (ncap - t->len <= (size_t)n) ncap *= 2;
    char *grown = realloc(t->buf, ncap);
    if (grown == NULL) t->oom = true;
    else {
      t->buf = grown;
      t->cap = ncap;
    }
  }
}

/* A name on one line of its own: printable, and never a line break. */
static const char *clean(const char *s, char *buf, size_t cap) {
  dlqb_text_sanitize(buf, cap, s, strlen(s));
  return buf;
}

static void put_entry(void *ctx, const unsigned char *key, const uint64_t *lines, size_t n) {
  text *t = ctx;
  char b64[B64_MAX];
  dlqb_base64_encode(key, H, b64);
  put(t, "%s", b64);
  for (size_t i = 0; i < n; i++) put(t, " %" PRIu64, lines[i]);
  put(t, "\n");
}

dlqb_status dlqb_archive_write(const dlqb_evidence *e, const dlqb_evidence_result *res,
                               const char *const *files, size_t nfiles, const char *made,
                               char **out, size_t *len, dlqb_error *err) {
  *out = NULL;
  *len = 0;
  unsigned char front[64][H];
  char b64[B64_MAX], last[DLQB_AUDIT_HASH_HEX + 1], name[256];
  size_t nf = dlqb_evidence_frontier(e, front);
  if (res->tree.size == 0 || nfiles == 0 || !dlqb_evidence_last_hash(e, last))
    return dlqb_fail(err, DLQB_EINVAL, "nothing to archive: the files hold no line");
  text t = {0};
  put(&t, "%s\nlines %" PRIu64 "\n", DLQB_ARCHIVE_TITLE, res->tree.size);
  dlqb_base64_encode(res->tree.root, H, b64);
  put(&t, "root %s\nfrontier", b64);
  for (size_t i = 0; i < nf; i++) {
    dlqb_base64_encode(front[i], H, b64);
    put(&t, " %s", b64);
  }
  put(&t, "\nlast %s %s\n", last, clean(files[nfiles - 1], name, sizeof name));
  for (size_t i = 0; i < nfiles; i++) put(&t, "file %s\n", clean(files[i], name, sizeof name));
  put(&t, "index %" PRIu64 "\n", res->tree.index_entries);
  dlqb_status st = dlqb_evidence_each_index(e, put_entry, &t, err);
  put(&t, "%s\n", made);
  if (st == DLQB_OK && t.oom) st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  if (st != DLQB_OK) {
    free(t.buf);
    return st;
  }
  *out = t.buf;
  *len = t.len;
  return DLQB_OK;
}

/* ---- reading ---- */

void dlqb_archive_release(dlqb_archive *a) {
  if (a == NULL) return;
  for (size_t i = 0; i < a->nfiles; i++) free(a->files[i]);
  free(a->files);
  memset(a, 0, sizeof *a);
}

/* The next line of [*p, end) into a NUL-terminated copy in buf (cap);
 * false at the end, or for a line longer than cap. */
static bool next_line(const char **p, const char *end, char *buf, size_t cap, size_t *n) {
  if (*p >= end) return false;
  const char *nl = memchr(*p, '\n', (size_t)(end - *p));
  if (nl == NULL) return false;
  size_t l = (size_t)(nl - *p);
  if (l >= cap) return false;
  memcpy(buf, *p, l);
  buf[l] = '\0';
  *p = nl + 1;
  *n = l;
  return true;
}

static bool take_u64(const char *s, char **end, uint64_t *out) {
  if (*s < '0' || *s > '9') return false;
  char *e = NULL;
  unsigned long long v = strtoull(s, &e, 10);
  if (e == s || v == ULLONG_MAX) return false;
  *out = (uint64_t)v;
  *end = e;
  return true;
}

static bool take_hash(const char *s, size_t n, unsigned char out[H]) {
  return dlqb_base64_decode(s, n, out, H) == H;
}

static bool add_file(dlqb_archive *a, const char *name) {
  char **n = realloc(a->files, (a->nfiles + 1) * sizeof *n);
  if (n == NULL) return false;
  a->files = n;
  return (a->files[a->nfiles] = strdup(name)) != NULL && ++a->nfiles;
}

/* One index line: "<base64 key> <line> ...", into the pass when given. */
static dlqb_status index_line(char *s, dlqb_evidence *e, uint64_t *lines, size_t cap,
                              uint64_t limit, dlqb_error *err) {
  char *sp = strchr(s, ' ');
  unsigned char key[H];
  if (sp == NULL || !take_hash(s, (size_t)(sp - s), key))
    return dlqb_fail(err, DLQB_EINVAL, "an index line does not begin with a key hash");
  size_t n = 0;
  for (char *q = sp; *q == ' ' && n < cap;) {
    char *after = NULL;
    if (!take_u64(q + 1, &after, &lines[n]) || lines[n] >= limit)
      return dlqb_fail(err, DLQB_EINVAL, "an index line holds a line number past the archive");
    n++;
    q = after;
    if (*q != ' ' && *q != '\0') return dlqb_fail(err, DLQB_EINVAL, "a malformed index line");
  }
  if (n == 0 || n == cap) return dlqb_fail(err, DLQB_EINVAL, "a malformed index line");
  return e != NULL ? dlqb_evidence_index_put(e, key, lines, n, err) : DLQB_OK;
}

dlqb_status dlqb_archive_read(const char *txt, size_t len, dlqb_archive *a, dlqb_evidence *e,
                              dlqb_error *err) {
  memset(a, 0, sizeof *a);
  const char *p = txt, *end = txt + len;
  /* An index line: a key and up to this many line numbers (a request
   * with more records than that is not one a trail holds). */
  enum { TEXT_LINE_MAX = 1 << 20, TEXT_LINES_MAX = TEXT_LINE_MAX / 2 };
  char *line = malloc(TEXT_LINE_MAX);
  uint64_t *lines = malloc(TEXT_LINES_MAX * sizeof *lines);
  size_t n = 0;
  dlqb_status st = DLQB_OK;
  uint64_t seen = 0;
  char *q = NULL;
  dlqb_merkle_pass *mp = NULL;
  unsigned char root[H];
  bool fits = false;
  if (line == NULL || lines == NULL) {
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    goto done;
  }
#define BAD(...)                                                                                   \
  do {                                                                                             \
    st = dlqb_fail(err, DLQB_EINVAL, __VA_ARGS__);                                                 \
    goto done;                                                                                     \
  } while (0)
  if (!next_line(&p, end, line, TEXT_LINE_MAX, &n) || strcmp(line, DLQB_ARCHIVE_TITLE) != 0)
    BAD("not an archive (%s)", DLQB_ARCHIVE_TITLE);
  if (!next_line(&p, end, line, TEXT_LINE_MAX, &n) || strncmp(line, "lines ", 6) != 0 ||
      !take_u64(line + 6, &q, &a->lines) || *q != '\0' || a->lines == 0)
    BAD("the archive's lines line is malformed");
  if (!next_line(&p, end, line, TEXT_LINE_MAX, &n) || strncmp(line, "root ", 5) != 0 ||
      !take_hash(line + 5, n - 5, a->root))
    BAD("the archive's root line is malformed");
  if (!next_line(&p, end, line, TEXT_LINE_MAX, &n) || strncmp(line, "frontier", 8) != 0)
    BAD("the archive's frontier line is malformed");
  for (char *f = line + 8; *f == ' ';) {
    char *sp = strchr(f + 1, ' ');
    size_t l = sp != NULL ? (size_t)(sp - f - 1) : strlen(f + 1);
    if (a->nfrontier == 64 || !take_hash(f + 1, l, a->frontier[a->nfrontier++]))
      BAD("the archive's frontier line is malformed");
    f = sp != NULL ? sp : f + 1 + l;
  }
  if ((size_t)__builtin_popcountll(a->lines) != a->nfrontier)
    BAD("the archive's compact range does not fit its %" PRIu64 " lines", a->lines);
  if (!next_line(&p, end, line, TEXT_LINE_MAX, &n) || strncmp(line, "last ", 5) != 0 ||
      n < 5 + DLQB_AUDIT_HASH_HEX + 2 || line[5 + DLQB_AUDIT_HASH_HEX] != ' ')
    BAD("the archive's last line is malformed");
  memcpy(a->last_hash, line + 5, DLQB_AUDIT_HASH_HEX);
  a->last_hash[DLQB_AUDIT_HASH_HEX] = '\0';
  snprintf(a->last_file, sizeof a->last_file, "%s", line + 6 + DLQB_AUDIT_HASH_HEX);
  while (next_line(&p, end, line, TEXT_LINE_MAX, &n) && strncmp(line, "file ", 5) == 0)
    if (!add_file(a, line + 5)) BAD("out of memory");
  if (a->nfiles == 0 || strcmp(a->files[a->nfiles - 1], a->last_file) != 0)
    BAD("the archive's file lines do not end with its last file");
  if (strncmp(line, "index ", 6) != 0 || !take_u64(line + 6, &q, &a->entries) || *q != '\0')
    BAD("the archive's index line is malformed");
  /* Its compact range must give its root: a document that says both. */
  mp = dlqb_merkle_pass_new();
  fits =
      mp != NULL &&
      dlqb_merkle_pass_start(mp, a->lines, (const unsigned char(*)[H])a->frontier, a->nfrontier) &&
      dlqb_merkle_pass_root(mp, root) && memcmp(root, a->root, H) == 0;
  dlqb_merkle_pass_free(mp);
  if (!fits) BAD("the archive's compact range does not hash to its root");
  if (e != NULL && (st = dlqb_evidence_start(e, a->lines, (const unsigned char(*)[H])a->frontier,
                                             a->nfrontier, err)) != DLQB_OK)
    goto done;
  for (; seen < a->entries; seen++) {
    if (!next_line(&p, end, line, TEXT_LINE_MAX, &n))
      BAD("the archive's index ends after %" PRIu64 " of its %" PRIu64 " entries", seen,
          a->entries);
    if ((st = index_line(line, e, lines, TEXT_LINES_MAX, a->lines, err)) != DLQB_OK) goto done;
  }
  if (!next_line(&p, end, line, TEXT_LINE_MAX, &n) || strncmp(line, "made ", 5) != 0 || p != end)
    BAD("the archive does not end with its made line");
#undef BAD
done:
  free(line);
  free(lines);
  if (st != DLQB_OK) dlqb_archive_release(a);
  return st;
}

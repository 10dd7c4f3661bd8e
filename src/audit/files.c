/* The audit log's files on disk, for its readers: listing a log and its
 * rotated files oldest first, and feeding files to the verifier. */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/audit.h"

/* ---- verifying files ---- */

/* Feeds every line of path to the verifier (seal lines when seal). */
static dlqb_status feed_file(dlqb_audit_verifier *v, const char *path, bool seal,
                             dlqb_audit_visit_fn visit, void *visit_ctx, dlqb_error *err) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    int e = errno;
    if (seal && e == ENOENT)
      return dlqb_fail(err, DLQB_EINVAL,
                       "no seal file '%s': truncation of the tail cannot be "
                       "ruled out (--no-seal verifies without it)",
                       path);
    char why[DLQB_ERRNO_TEXT_MAX];
    return dlqb_fail(err, DLQB_EIO, "cannot open '%s': %s", path,
                     dlqb_errno_text(e, why, sizeof why));
  }
  if (!seal) dlqb_audit_verifier_begin_file(v, path);
  else dlqb_audit_verifier_begin_seal(v);
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  dlqb_status st = DLQB_OK;
  while (st == DLQB_OK && (n = getline(&line, &cap, f)) >= 0) {
    bool complete = n > 0 && line[n - 1] == '\n';
    size_t len = (size_t)n - (complete ? 1 : 0);
    /* A seal line cut short is one a crash interrupted (seal lines are
     * not synced one by one): it vouches for nothing, and dropping it only
     * makes the seal lag, which is never an accusation. */
    if (seal) st = complete ? dlqb_audit_verifier_seal_line(v, line, len, err) : DLQB_OK;
    else st = dlqb_audit_verifier_line(v, line, len, complete, err);
    if (st == DLQB_OK && !seal && visit != NULL && !visit(visit_ctx, line, len))
      st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  if (st == DLQB_OK && ferror(f)) st = dlqb_fail(err, DLQB_EIO, "cannot read '%s'", path);
  free(line);
  fclose(f);
  return st;
}

dlqb_status dlqb_audit_verify_files(const dlqb_audit_keyring *ring, const char *const *files,
                                    size_t nfiles, const char *seal_path, int partial,
                                    dlqb_audit_visit_fn visit, void *visit_ctx,
                                    dlqb_audit_summary *sum, dlqb_error *err) {
  return dlqb_audit_verify_anchored(ring, files, nfiles, seal_path, partial, NULL, visit, visit_ctx,
                                    sum, err);
}

dlqb_status dlqb_audit_verify_anchored(const dlqb_audit_keyring *ring, const char *const *files,
                                       size_t nfiles, const char *seal_path, int partial,
                                       const dlqb_audit_lines *anchors, dlqb_audit_visit_fn visit,
                                       void *visit_ctx, dlqb_audit_summary *sum, dlqb_error *err) {
  dlqb_audit_verifier *v = dlqb_audit_verifier_new(ring, partial);
  if (v == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  dlqb_status st = DLQB_OK;
  if (anchors != NULL) {
    dlqb_audit_verifier_begin_anchors(v);
    for (size_t i = 0; st == DLQB_OK && i < anchors->n; i++)
      st = dlqb_audit_verifier_anchor_line(v, anchors->line[i], anchors->len[i], err);
  }
  if (st == DLQB_OK && seal_path != NULL) st = feed_file(v, seal_path, true, NULL, NULL, err);
  for (size_t i = 0; st == DLQB_OK && i < nfiles; i++)
    st = feed_file(v, files[i], false, visit, visit_ctx, err);
  if (st == DLQB_OK) st = dlqb_audit_verifier_finish(v, sum, err);
  dlqb_audit_verifier_free(v);
  return st;
}

/* ---- lines in memory ---- */

dlqb_status dlqb_audit_lines_add(dlqb_audit_lines *l, const char *line, size_t len,
                                 dlqb_error *err) {
  if (l->n == l->cap) {
    size_t ncap = l->cap ? l->cap * 2 : 64;
    char **nl = realloc(l->line, ncap * sizeof *nl);
    if (nl == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    l->line = nl;
    size_t *ns = realloc(l->len, ncap * sizeof *ns);
    if (ns == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    l->len = ns;
    l->cap = ncap;
  }
  char *copy = malloc(len + 1);
  if (copy == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  memcpy(copy, line, len);
  copy[len] = '\0';
  l->line[l->n] = copy;
  l->len[l->n++] = len;
  return DLQB_OK;
}

void dlqb_audit_lines_free(dlqb_audit_lines *l) {
  for (size_t i = 0; i < l->n; i++) free(l->line[i]);
  free(l->line);
  free(l->len);
  memset(l, 0, sizeof *l);
}

/* ---- listing a log's files ---- */

/* Length of the rotation suffix at s: "YYYYmmddTHHMMSS.mmmZ" then an
 * optional "-N"; 0 when s is not exactly that. */
static size_t rotated_suffix(const char *s) {
  static const char shape[] = "dddddddd"
                              "T"
                              "dddddd"
                              "."
                              "ddd"
                              "Z";
  size_t i = 0;
  for (; shape[i]; i++) {
    char want = shape[i];
    if (want == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != want) return 0;
  }
  if (s[i] == '-') {
    size_t j = i + 1;
    while (s[j] >= '0' && s[j] <= '9') j++;
    if (j == i + 1) return 0;
    i = j;
  }
  return s[i] == '\0' ? i : 0;
}

/* Rotated names differ only in their stamp and "-N" counter: the stamps
 * sort as text, the counters as numbers. */
static int by_rotation(const void *pa, const void *pb) {
  const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
  size_t la = (size_t)(strrchr(a, 'Z') - a), lb = (size_t)(strrchr(b, 'Z') - b);
  int c = strncmp(a, b, la < lb ? la : lb);
  if (c != 0 || la != lb) return c != 0 ? c : (la < lb ? -1 : 1);
  long na = a[la + 1] == '-' ? strtol(a + la + 2, NULL, 10) : 0;
  long nb = b[lb + 1] == '-' ? strtol(b + lb + 2, NULL, 10) : 0;
  return na < nb ? -1 : na > nb;
}

void dlqb_audit_files_free(char **files, size_t n) {
  for (size_t i = 0; files != NULL && i < n; i++) free(files[i]);
  free(files);
}

dlqb_status dlqb_audit_list_files(const char *path, char ***out, size_t *n, dlqb_error *err) {
  char dcopy[4096], bcopy[4096];
  snprintf(dcopy, sizeof dcopy, "%s", path);
  snprintf(bcopy, sizeof bcopy, "%s", path);
  const char *dir = dirname(dcopy), *base = basename(bcopy);
  size_t blen = strlen(base);
  *out = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  char why[DLQB_ERRNO_TEXT_MAX];
  if (d == NULL)
    return dlqb_fail(err, DLQB_EIO, "cannot list '%s': %s", dir,
                     dlqb_errno_text(errno, why, sizeof why));
  char **files = NULL;
  size_t count = 0, cap = 0;
  dlqb_status st = DLQB_OK;
  bool current = false;
  struct dirent *e;
  while (st == DLQB_OK && (e = readdir(d)) != NULL) {
    bool is_current = strcmp(e->d_name, base) == 0;
    bool rotated = strncmp(e->d_name, base, blen) == 0 && e->d_name[blen] == '.' &&
                   rotated_suffix(e->d_name + blen + 1) > 0;
    if (is_current) current = true;
    if (!rotated) continue;
    if (count == cap) {
      cap = cap ? cap * 2 : 16;
      char **nf = realloc(files, (cap + 1) * sizeof *nf);
      if (nf == NULL) {
        st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
        break;
      }
      files = nf;
    }
    size_t need = strlen(dir) + 1 + strlen(e->d_name) + 1;
    if ((files[count] = malloc(need)) == NULL) {
      st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
      break;
    }
    snprintf(files[count++], need, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  if (st == DLQB_OK) {
    if (count > 1) qsort(files, count, sizeof *files, by_rotation); /* files is NULL when 0 */
    if (current) {
      char **nf = realloc(files, (count + 1) * sizeof *nf);
      if (nf == NULL || (nf[count] = strdup(path)) == NULL) {
        files = nf != NULL ? nf : files;
        st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
      } else {
        files = nf;
        count++;
      }
    }
    if (st == DLQB_OK && count == 0) st = dlqb_fail(err, DLQB_EIO, "no audit log at '%s'", path);
  }
  if (st != DLQB_OK) {
    dlqb_audit_files_free(files, count);
    return st;
  }
  *out = files;
  *n = count;
  return DLQB_OK;
}

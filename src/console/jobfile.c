/* The console's job file: see include/dlqb/jobfile.h. JSON by json-c,
 * every member checked on the way in: the file sits in a directory the
 * console can write, but whoever else could write there is not trusted
 * to make the console crash or show what it never did. */
#include "dlqb/jobfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/file.h"

#define FORMAT  "dlq-bridge console jobs"
#define VERSION 1
/* The format nests three deep (the file, its jobs, a job): anything much
 * deeper is not ours, and is refused before it costs a deep recursion. */
#define DEPTH_MAX 8
#define WHAT      "the console's job file"

static const char *const action_names[DLQB_JOB__ACTIONS] = {"replay", "escalate", "resolve"};
static const char *const state_names[DLQB_JOB__STATES] = {"running", "done", "failed",
                                                          "interrupted"};

const char *dlqb_job_action_name(dlqb_job_action a) {
  return (unsigned)a < DLQB_JOB__ACTIONS ? action_names[a] : "?";
}

const char *dlqb_job_state_name(dlqb_job_state s) {
  return (unsigned)s < DLQB_JOB__STATES ? state_names[s] : "?";
}

/* ---- encode ---------------------------------------------------------------- */

static bool text_ok(const char *s, size_t cap) { return memchr(s, '\0', cap) != NULL; }

static bool record_ok(const dlqb_job_record *r) {
  return r->id > 0 && (unsigned)r->action < DLQB_JOB__ACTIONS &&
         (unsigned)r->state < DLQB_JOB__STATES && text_ok(r->user, sizeof r->user) &&
         text_ok(r->selection, sizeof r->selection) && text_ok(r->summary, sizeof r->summary) &&
         text_ok(r->error, sizeof r->error) && isfinite(r->rate) && r->rate >= 0 &&
         r->started_ms >= 0 && r->ended_ms >= 0 && r->saved_ms >= 0 && r->total <= INT64_MAX &&
         r->examined <= INT64_MAX && r->moved <= INT64_MAX && r->removed <= INT64_MAX &&
         r->left_in_place <= INT64_MAX;
}

static void put_str(json_object *o, const char *key, const char *v) {
  json_object_object_add(o, key, json_object_new_string(v));
}

static void put_int(json_object *o, const char *key, int64_t v) {
  json_object_object_add(o, key, json_object_new_int64(v));
}

static json_object *record_json(const dlqb_job_record *r) {
  json_object *o = json_object_new_object();
  if (o == NULL) return NULL;
  put_int(o, "id", r->id);
  put_str(o, "action", action_names[r->action]);
  put_str(o, "state", state_names[r->state]);
  put_str(o, "user", r->user);
  put_str(o, "selection", r->selection);
  json_object_object_add(o, "rate", json_object_new_double(r->rate));
  put_int(o, "started_ms", r->started_ms);
  put_int(o, "ended_ms", r->ended_ms);
  put_int(o, "saved_ms", r->saved_ms);
  put_int(o, "total", (int64_t)r->total);
  put_int(o, "examined", (int64_t)r->examined);
  put_int(o, "moved", (int64_t)r->moved);
  put_int(o, "removed", (int64_t)r->removed);
  put_int(o, "left_in_place", (int64_t)r->left_in_place);
  put_str(o, "summary", r->summary);
  put_str(o, "error", r->error);
  return o;
}

dlqb_status dlqb_jobfile_encode(const dlqb_job_record *jobs, size_t n, char **out, size_t *len,
                                dlqb_error *err) {
  *out = NULL;
  *len = 0;
  if (n > DLQB_JOBFILE_MAX_JOBS)
    return dlqb_fail(err, DLQB_EINVAL, "internal error: %zu jobs for %s (at most %d)", n, WHAT,
                     DLQB_JOBFILE_MAX_JOBS);
  for (size_t i = 0; i < n; i++)
    if (!record_ok(&jobs[i]))
      return dlqb_fail(err, DLQB_EINVAL, "internal error: job %zu out of range for %s", i + 1,
                       WHAT);
  json_object *doc = json_object_new_object(), *list = json_object_new_array();
  bool ok = doc != NULL && list != NULL;
  if (ok) {
    put_str(doc, "format", FORMAT);
    put_int(doc, "version", VERSION);
    json_object_object_add(doc, "jobs", list);
  } else {
    json_object_put(list);
  }
  for (size_t i = 0; ok && i < n; i++) {
    json_object *r = record_json(&jobs[i]);
    ok = r != NULL && json_object_array_add(list, r) == 0;
  }
  const char *text =
      ok ? json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED)
         : NULL;
  size_t tl = text != NULL ? strlen(text) : 0;
  char *buf = text != NULL ? malloc(tl + 2) : NULL;
  if (buf != NULL) {
    memcpy(buf, text, tl);
    buf[tl] = '\n';
    buf[tl + 1] = '\0';
  }
  json_object_put(doc);
  if (buf == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for %s", WHAT);
  *out = buf;
  *len = tl + 1;
  return DLQB_OK;
}

/* ---- decode ---------------------------------------------------------------- */

/* The first problem found, as the one line of the error (a position, never
 * the file's text: it may be anything). */
typedef struct {
  size_t job; /* 1-based; 0: the file itself */
  char what[160];
} problem;

static bool bad(problem *p, const char *fmt, const char *key) {
  snprintf(p->what, sizeof p->what, fmt, key);
  return false;
}

static json_object *member(json_object *o, const char *key, json_type type) {
  json_object *v;
  if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, type)) return NULL;
  return v;
}

static bool get_text(json_object *o, const char *key, char *dst, size_t cap, problem *p) {
  json_object *v = member(o, key, json_type_string);
  if (v == NULL) return bad(p, "'%s' is missing or not a string", key);
  const char *s = json_object_get_string(v);
  int n = json_object_get_string_len(v);
  if (n < 0 || (size_t)n != strlen(s)) return bad(p, "'%s' holds a NUL", key);
  if ((size_t)n >= cap) return bad(p, "'%s' is longer than its field", key);
  memcpy(dst, s, (size_t)n + 1);
  return true;
}

static bool get_count(json_object *o, const char *key, int64_t max, int64_t *out, problem *p) {
  json_object *v = member(o, key, json_type_int);
  if (v == NULL) return bad(p, "'%s' is missing or not an integer", key);
  /* json-c saturates what does not fit an int64: at most INT64_MAX here */
  int64_t n = json_object_get_int64(v);
  if (n < 0 || n > max) return bad(p, "'%s' is out of range", key);
  *out = n;
  return true;
}

static bool get_u64(json_object *o, const char *key, uint64_t *out, problem *p) {
  int64_t n;
  if (!get_count(o, key, INT64_MAX, &n, p)) return false;
  *out = (uint64_t)n;
  return true;
}

static bool get_name(json_object *o, const char *key, const char *const *names, size_t count,
                     unsigned *out, problem *p) {
  json_object *v = member(o, key, json_type_string);
  if (v == NULL) return bad(p, "'%s' is missing or not a string", key);
  for (size_t i = 0; i < count; i++)
    if (strcmp(json_object_get_string(v), names[i]) == 0) {
      *out = (unsigned)i;
      return true;
    }
  return bad(p, "'%s' is none of its values", key);
}

static bool decode_record(json_object *o, dlqb_job_record *r, problem *p) {
  memset(r, 0, sizeof *r);
  if (!json_object_is_type(o, json_type_object)) return bad(p, "%s is not an object", "it");
  int64_t id;
  unsigned action, st;
  /* below UINT_MAX: the console numbers the next job from the highest */
  if (!get_count(o, "id", UINT_MAX - 1, &id, p)) return false;
  if (id == 0) return bad(p, "'%s' is 0", "id");
  r->id = (unsigned)id;
  if (!get_name(o, "action", action_names, DLQB_JOB__ACTIONS, &action, p) ||
      !get_name(o, "state", state_names, DLQB_JOB__STATES, &st, p))
    return false;
  r->action = (dlqb_job_action)action;
  r->state = (dlqb_job_state)st;
  json_object *rate;
  if (!json_object_object_get_ex(o, "rate", &rate) ||
      !(json_object_is_type(rate, json_type_double) || json_object_is_type(rate, json_type_int)))
    return bad(p, "'%s' is missing or not a number", "rate");
  r->rate = json_object_get_double(rate);
  if (!isfinite(r->rate) || r->rate < 0) return bad(p, "'%s' is out of range", "rate");
  return get_text(o, "user", r->user, sizeof r->user, p) &&
         get_text(o, "selection", r->selection, sizeof r->selection, p) &&
         get_count(o, "started_ms", INT64_MAX, &r->started_ms, p) &&
         get_count(o, "ended_ms", INT64_MAX, &r->ended_ms, p) &&
         get_count(o, "saved_ms", INT64_MAX, &r->saved_ms, p) &&
         get_u64(o, "total", &r->total, p) && get_u64(o, "examined", &r->examined, p) &&
         get_u64(o, "moved", &r->moved, p) && get_u64(o, "removed", &r->removed, p) &&
         get_u64(o, "left_in_place", &r->left_in_place, p) &&
         get_text(o, "summary", r->summary, sizeof r->summary, p) &&
         get_text(o, "error", r->error, sizeof r->error, p);
}

/* One JSON value filling text[0..len) but for white space, or NULL. */
static json_object *parse_whole(const char *text, size_t len) {
  if (len == 0 || len > DLQB_JOBFILE_MAX_BYTES) return NULL;
  json_tokener *tok = json_tokener_new_ex(DEPTH_MAX);
  if (tok == NULL) return NULL;
  json_object *root = json_tokener_parse_ex(tok, text, (int)len);
  /* continue: the text ended inside the value (a torn file) */
  bool whole = root != NULL && json_tokener_get_error(tok) == json_tokener_success;
  size_t end = whole ? json_tokener_get_parse_end(tok) : 0;
  json_tokener_free(tok);
  while (whole && end < len && strchr(" \t\r\n", text[end]) != NULL && text[end] != '\0') end++;
  if (!whole || end != len) {
    json_object_put(root);
    return NULL;
  }
  return root;
}

dlqb_status dlqb_jobfile_decode(const char *text, size_t len, dlqb_job_record *jobs, size_t *n,
                                dlqb_error *err) {
  *n = 0;
  problem p = {0, ""};
  bool ok = true;
  json_object *root = parse_whole(text, len), *fmt = NULL, *ver = NULL, *list = NULL;
  if (root == NULL) {
    ok = bad(&p, "%s", "not whole JSON (torn, corrupt, too deep or too large)");
  } else if ((fmt = member(root, "format", json_type_string)) == NULL ||
             strcmp(json_object_get_string(fmt), FORMAT) != 0) {
    ok = bad(&p, "not a '%s' file", FORMAT);
  } else if ((ver = member(root, "version", json_type_int)) == NULL ||
             json_object_get_int64(ver) != VERSION) {
    ok = bad(&p, "%s", "not of version 1");
  } else if ((list = member(root, "jobs", json_type_array)) == NULL) {
    ok = bad(&p, "'%s' is missing or not an array", "jobs");
  } else if (json_object_array_length(list) > DLQB_JOBFILE_MAX_JOBS) {
    ok = bad(&p, "%s", "more jobs than a console keeps");
  }
  size_t count = ok ? json_object_array_length(list) : 0;
  for (size_t i = 0; ok && i < count; i++) {
    p.job = i + 1;
    ok = decode_record(json_object_array_get_idx(list, i), &jobs[i], &p);
    for (size_t k = 0; ok && k < i; k++)
      if (jobs[k].id == jobs[i].id) ok = bad(&p, "'%s' is another job's", "id");
  }
  json_object_put(root);
  if (!ok) {
    if (p.job > 0) return dlqb_fail(err, DLQB_EINVAL, "job %zu: %s", p.job, p.what);
    return dlqb_fail(err, DLQB_EINVAL, "%s", p.what);
  }
  *n = count;
  return DLQB_OK;
}

/* ---- files ----------------------------------------------------------------- */

dlqb_status dlqb_jobfile_read(const char *path, dlqb_job_record *jobs, size_t *n, bool *found,
                              dlqb_error *err) {
  char why[DLQB_ERRNO_TEXT_MAX];
  *n = 0;
  *found = false;
  /* O_NONBLOCK: a FIFO planted here would otherwise hold the console's
   * start until someone writes to it; it is refused below. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) return DLQB_OK;
  if (fd < 0 && errno == ELOOP)
    return dlqb_fail(err, DLQB_EINVAL, "%s '%s' is a symbolic link", WHAT, path);
  if (fd < 0)
    return dlqb_fail(err, DLQB_EIO, "cannot open %s '%s': %s", WHAT, path,
                     dlqb_errno_text(errno, why, sizeof why));
  *found = true;
  struct stat sb;
  dlqb_status st = DLQB_OK;
  if (fstat(fd, &sb) != 0) {
    st = dlqb_fail(err, DLQB_EIO, "cannot stat %s '%s': %s", WHAT, path,
                   dlqb_errno_text(errno, why, sizeof why));
  } else if (!S_ISREG(sb.st_mode)) {
    st = dlqb_fail(err, DLQB_EINVAL, "%s '%s' is not a regular file", WHAT, path);
  } else if (sb.st_uid != geteuid() || (sb.st_mode & 022) != 0) {
    st = dlqb_fail(err, DLQB_EINVAL, "%s '%s' is not ours alone to write (owner %u, mode %04o)",
                   WHAT, path, (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777));
  } else if (sb.st_size > DLQB_JOBFILE_MAX_BYTES) {
    st = dlqb_fail(err, DLQB_EINVAL, "%s '%s' is larger than %d bytes", WHAT, path,
                   DLQB_JOBFILE_MAX_BYTES);
  }
  /* At most one byte past the limit, whatever the file grows to meanwhile. */
  char *buf = st == DLQB_OK ? malloc(DLQB_JOBFILE_MAX_BYTES + 1) : NULL;
  size_t len = 0;
  if (st == DLQB_OK && buf == NULL) st = dlqb_fail(err, DLQB_ENOMEM, "out of memory for %s", WHAT);
  while (st == DLQB_OK && len <= DLQB_JOBFILE_MAX_BYTES) {
    ssize_t r = read(fd, buf + len, DLQB_JOBFILE_MAX_BYTES + 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      st = dlqb_fail(err, DLQB_EIO, "cannot read %s '%s': %s", WHAT, path,
                     dlqb_errno_text(errno, why, sizeof why));
    if (r <= 0) break;
    len += (size_t)r;
  }
  close(fd);
  if (st == DLQB_OK && len > DLQB_JOBFILE_MAX_BYTES)
    st = dlqb_fail(err, DLQB_EINVAL, "%s '%s' is larger than %d bytes", WHAT, path,
                   DLQB_JOBFILE_MAX_BYTES);
  if (st == DLQB_OK) {
    dlqb_error e;
    if ((st = dlqb_jobfile_decode(buf, len, jobs, n, &e)) != DLQB_OK)
      dlqb_fail(err, st, "%s '%s' is unusable: %s", WHAT, path, e.msg);
  }
  free(buf);
  return st;
}

dlqb_status dlqb_jobfile_write(const char *path, const dlqb_job_record *jobs, size_t n,
                               dlqb_error *err) {
  char *text;
  size_t len;
  dlqb_status st = dlqb_jobfile_encode(jobs, n, &text, &len, err);
  if (st != DLQB_OK) return st;
  st = dlqb_file_replace(path, text, len, WHAT, err);
  free(text);
  return st;
}

void dlqb_jobfile_interrupt(dlqb_job_record *r, const char *queue) {
  if (r->state != DLQB_JOB_RUNNING) return;
  r->state = DLQB_JOB_INTERRUPTED;
  r->ended_ms = r->saved_ms;
  /* The counts are the last saved (at most a save's interval old): the
   * trail, not this file, is the record of each hop. */
  snprintf(r->error, sizeof r->error,
           "interrupted: the console stopped while this ran (killed or crashed); as last saved "
           "it had examined %" PRIu64 " of the %" PRIu64 " in %s, moved %" PRIu64
           " and removed %" PRIu64 ". What it did not move is still there; copies in flight "
           "when it stopped may be both there and where they went; every hop it made is in "
           "the audit trail",
           r->examined, r->total, queue, r->moved, r->removed);
}

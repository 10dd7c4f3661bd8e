/* Unit tests of the console's job file (dlqb/jobfile.h): records survive a
 * round trip exactly; corrupt, truncated, oversized and planted files are
 * refused with one line, never half-read; a pass that was running when its
 * console stopped reads back as interrupted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/jobfile.h"

static dlqb_job_record sample(unsigned id, dlqb_job_action a, dlqb_job_state s) {
  dlqb_job_record r;
  memset(&r, 0, sizeof r);
  r.id = id;
  r.action = a;
  r.state = s;
  snprintf(r.user, sizeof r.user, "op-%u", id);
  snprintf(r.selection, sizeof r.selection, "group 3f2a; request_id <b>\"R-%u\"</b> 'x' & é", id);
  r.rate = id % 2 ? 20 : 0.5;
  r.started_ms = INT64_C(1796015388000) + id;
  r.ended_ms = s == DLQB_JOB_RUNNING ? 0 : r.started_ms + 4000;
  r.saved_ms = r.started_ms + 3000;
  r.total = 6 + id;
  r.examined = 5;
  r.moved = 4;
  r.removed = 1;
  r.left_in_place = 1;
  snprintf(r.summary, sizeof r.summary, "replayed 4, skipped as complete 1, left 1 of %llu",
           (unsigned long long)r.total);
  snprintf(r.error, sizeof r.error, "%s", s == DLQB_JOB_FAILED ? "ACCESS_REFUSED\t<script>" : "");
  return r;
}

static void assert_same(const dlqb_job_record *a, const dlqb_job_record *b) {
  assert_int_equal(a->id, b->id);
  assert_int_equal(a->action, b->action);
  assert_int_equal(a->state, b->state);
  assert_string_equal(a->user, b->user);
  assert_string_equal(a->selection, b->selection);
  assert_true(a->rate == b->rate);
  assert_int_equal(a->started_ms, b->started_ms);
  assert_int_equal(a->ended_ms, b->ended_ms);
  assert_int_equal(a->saved_ms, b->saved_ms);
  assert_int_equal(a->total, b->total);
  assert_int_equal(a->examined, b->examined);
  assert_int_equal(a->moved, b->moved);
  assert_int_equal(a->removed, b->removed);
  assert_int_equal(a->left_in_place, b->left_in_place);
  assert_string_equal(a->summary, b->summary);
  assert_string_equal(a->error, b->error);
}

static dlqb_job_record *table(void) {
  dlqb_job_record *t = calloc(DLQB_JOBFILE_MAX_JOBS + 1, sizeof *t);
  assert_non_null(t);
  return t;
}

static void test_round_trip(void **state) {
  (void)state;
  dlqb_job_record in[4] = {sample(3, DLQB_JOB_REPLAY, DLQB_JOB_DONE),
                           sample(4, DLQB_JOB_ESCALATE, DLQB_JOB_FAILED),
                           sample(9, DLQB_JOB_RESOLVE, DLQB_JOB_RUNNING),
                           sample(12, DLQB_JOB_REPLAY, DLQB_JOB_INTERRUPTED)};
  in[0].total = UINT64_C(9007199254740993); /* past a double's exact integers */
  char *text = NULL;
  size_t len = 0, n = 99;
  dlqb_error err = {{0}};
  assert_int_equal(dlqb_jobfile_encode(in, 4, &text, &len, &err), DLQB_OK);
  assert_int_equal(strlen(text), len);
  dlqb_job_record *out = table();
  assert_int_equal(dlqb_jobfile_decode(text, len, out, &n, &err), DLQB_OK);
  assert_int_equal(n, 4);
  for (size_t i = 0; i < 4; i++) assert_same(&in[i], &out[i]);
  /* No history is a valid file too. */
  free(text);
  assert_int_equal(dlqb_jobfile_encode(in, 0, &text, &len, &err), DLQB_OK);
  assert_int_equal(dlqb_jobfile_decode(text, len, out, &n, &err), DLQB_OK);
  assert_int_equal(n, 0);
  free(text);
  free(out);
}

/* Every record at its longest, every byte one JSON must escape: the file
 * of a full table still fits DLQB_JOBFILE_MAX_BYTES and reads back. */
static void test_full_table_fits(void **state) {
  (void)state;
  dlqb_job_record *in = table(), *out = table();
  for (unsigned i = 0; i < DLQB_JOBFILE_MAX_JOBS; i++) {
    in[i] = sample(i + 1, DLQB_JOB_REPLAY, DLQB_JOB_DONE);
    memset(in[i].user, 0x01, sizeof in[i].user - 1);
    memset(in[i].selection, 0x1f, sizeof in[i].selection - 1);
    memset(in[i].summary, '"', sizeof in[i].summary - 1);
    memset(in[i].error, 0x02, sizeof in[i].error - 1);
    in[i].user[sizeof in[i].user - 1] = in[i].selection[sizeof in[i].selection - 1] = '\0';
    in[i].summary[sizeof in[i].summary - 1] = in[i].error[sizeof in[i].error - 1] = '\0';
  }
  char *text = NULL;
  size_t len = 0, n = 0;
  dlqb_error err = {{0}};
  assert_int_equal(dlqb_jobfile_encode(in, DLQB_JOBFILE_MAX_JOBS, &text, &len, &err), DLQB_OK);
  printf("a full table of the longest records: %zu bytes (limit %d)\n", len,
         DLQB_JOBFILE_MAX_BYTES);
  assert_true(len <= DLQB_JOBFILE_MAX_BYTES);
  assert_int_equal(dlqb_jobfile_decode(text, len, out, &n, &err), DLQB_OK);
  assert_int_equal(n, DLQB_JOBFILE_MAX_JOBS);
  assert_same(&in[63], &out[63]);
  free(text);
  /* More records than a console keeps are not written. */
  in[DLQB_JOBFILE_MAX_JOBS] = sample(999, DLQB_JOB_REPLAY, DLQB_JOB_DONE);
  assert_int_equal(dlqb_jobfile_encode(in, DLQB_JOBFILE_MAX_JOBS + 1, &text, &len, &err),
                   DLQB_EINVAL);
  free(in);
  free(out);
}

/* A file's text with one record whose member `key` is the JSON `value`. */
static void one_record(char *buf, size_t cap, const char *key, const char *value) {
  dlqb_job_record r = sample(5, DLQB_JOB_REPLAY, DLQB_JOB_DONE);
  char *text = NULL;
  size_t len = 0;
  dlqb_error err;
  assert_int_equal(dlqb_jobfile_encode(&r, 1, &text, &len, &err), DLQB_OK);
  /* Replace "key":<old value> by "key":value, the old value ending at the
   * next ',' or '}' outside a string (the sample's strings hold neither
   * after a quote). */
  char needle[64];
  snprintf(needle, sizeof needle, "\"%s\":", key);
  char *at = strstr(text, needle);
  assert_non_null(at);
  char *v = at + strlen(needle);
  while (*v == ' ') v++;
  char *end = v;
  if (*end == '"') {
    end++;
    while (*end != '"') end += *end == '\\' ? 2 : 1;
    end++;
  } else {
    end += strcspn(end, ",}");
  }
  int w = value == NULL
              ? snprintf(buf, cap, "%.*s%s", (int)(at - text), text, end + (*end == ',' ? 1 : 0))
              : snprintf(buf, cap, "%.*s%s%s", (int)(v - text), text, value, end);
  assert_true(w > 0 && (size_t)w < cap);
  free(text);
}

static void refused(const char *text, const char *why) {
  dlqb_job_record *out = table();
  size_t n = 99;
  dlqb_error err = {{0}};
  dlqb_status st = dlqb_jobfile_decode(text, strlen(text), out, &n, &err);
  if (st == DLQB_OK) fail_msg("accepted (%s): %s", why, text);
  printf("%s: %s\n", why, err.msg);
  assert_int_equal(st, DLQB_EINVAL);
  assert_int_equal(n, 0);
  assert_true(err.msg[0] != '\0');
  assert_null(strchr(err.msg, '\n'));
  free(out);
}

static void test_corrupt_is_refused(void **state) {
  (void)state;
  refused("", "empty");
  refused("not json", "not json");
  refused("[]", "not an object");
  refused("{\"format\":\"dlq-bridge console jobs\",\"version\":1}", "no jobs");
  refused("{\"format\":\"something else\",\"version\":1,\"jobs\":[]}", "another format");
  refused("{\"format\":\"dlq-bridge console jobs\",\"version\":2,\"jobs\":[]}", "another version");
  refused("{\"format\":\"dlq-bridge console jobs\",\"version\":1,\"jobs\":{}}",
          "jobs not an array");
  refused("{\"format\":\"dlq-bridge console jobs\",\"version\":1,\"jobs\":[7]}",
          "a job not an object");
  refused("{\"format\":\"dlq-bridge console jobs\",\"version\":1,\"jobs\":[]} x", "trailing text");
  refused("{\"format\":\"dlq-bridge console jobs\",\"version\":1,\"jobs\":[]}{}", "two values");
  char buf[8192];
  static const struct {
    const char *key, *value, *why;
  } bad[] = {
      {"id", "0", "id 0"},
      {"id", "-3", "negative id"},
      {"id", "4294967296", "id past unsigned"},
      {"id", "4294967295", "an id the next could not follow"},
      {"id", "\"5\"", "id a string"},
      {"action", "\"delete-everything\"", "unknown action"},
      {"action", "2", "action a number"},
      {"state", "\"resumed\"", "unknown state"},
      {"user", "7", "user a number"},
      {"user", "\"a\\u0000b\"", "a NUL inside a string"},
      {"moved", "-1", "a negative count"},
      {"moved", "1.5", "a count not an integer"},
      {"examined", "\"4\"", "a count a string"},
      {"rate", "-2", "a negative rate"},
      {"rate", "\"fast\"", "a rate a string"},
      {"started_ms", "-1", "a negative time"},
      {"summary", "null", "summary null"},
      {"error", "[]", "error an array"},
      {"total", NULL, "total missing"},
      {"state", NULL, "state missing"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    one_record(buf, sizeof buf, bad[i].key, bad[i].value);
    refused(buf, bad[i].why);
  }
  /* Text longer than its field is refused, not cut. */
  char longer[DLQB_JOBFILE_USER_MAX + 8];
  memset(longer, 'u', sizeof longer);
  longer[0] = '"';
  longer[DLQB_JOBFILE_USER_MAX + 1] = '"';
  longer[DLQB_JOBFILE_USER_MAX + 2] = '\0';
  one_record(buf, sizeof buf, "user", longer);
  refused(buf, "a user longer than its field");
  /* Two records with one id. */
  dlqb_job_record two[2] = {sample(5, DLQB_JOB_REPLAY, DLQB_JOB_DONE),
                            sample(6, DLQB_JOB_REPLAY, DLQB_JOB_DONE)};
  two[1].id = 5;
  char *text = NULL;
  size_t len = 0;
  dlqb_error err;
  if (dlqb_jobfile_encode(two, 2, &text, &len, &err) == DLQB_OK) refused(text, "a duplicate id");
  free(text);
  /* Nesting far deeper than the format's is refused, not recursed into. */
  static char deep[200000];
  size_t at = (size_t)snprintf(deep, sizeof deep,
                               "{\"format\":\"dlq-bridge console jobs\",\"version\":1,\"jobs\":");
  for (size_t i = 0; i < 50000; i++) deep[at++] = '[';
  deep[at] = '\0';
  refused(deep, "deep nesting");
  /* Unknown members are a later version's: ignored. */
  one_record(buf, sizeof buf, "moved", "4,\"later\":{\"x\":[1,2]}");
  dlqb_job_record *out = table();
  size_t n = 0;
  assert_int_equal(dlqb_jobfile_decode(buf, strlen(buf), out, &n, &err), DLQB_OK);
  assert_int_equal(n, 1);
  assert_int_equal(out[0].moved, 4);
  free(out);
}

/* A file cut anywhere (a torn copy, a full disk) is refused whole. */
static void test_truncated_is_refused(void **state) {
  (void)state;
  dlqb_job_record in[2] = {sample(1, DLQB_JOB_REPLAY, DLQB_JOB_DONE),
                           sample(2, DLQB_JOB_RESOLVE, DLQB_JOB_RUNNING)};
  char *text = NULL;
  size_t len = 0, n = 0;
  dlqb_error err;
  assert_int_equal(dlqb_jobfile_encode(in, 2, &text, &len, &err), DLQB_OK);
  size_t last = len;
  while (last > 0 && text[last - 1] != '}') last--;
  dlqb_job_record *out = table();
  for (size_t cut = 0; cut < last; cut++) {
    dlqb_status st = dlqb_jobfile_decode(text, cut, out, &n, &err);
    if (st == DLQB_OK) fail_msg("a file cut at byte %zu of %zu was accepted", cut, len);
    assert_int_equal(n, 0);
  }
  assert_int_equal(dlqb_jobfile_decode(text, last, out, &n, &err), DLQB_OK);
  assert_int_equal(n, 2);
  free(out);
  free(text);
}

static void test_interrupt(void **state) {
  (void)state;
  dlqb_job_record r = sample(7, DLQB_JOB_REPLAY, DLQB_JOB_RUNNING);
  r.total = 20;
  r.examined = 9;
  r.moved = 3;
  r.removed = 1;
  dlqb_jobfile_interrupt(&r, "dsr.dlq.manual");
  assert_int_equal(r.state, DLQB_JOB_INTERRUPTED);
  assert_int_equal(r.ended_ms, r.saved_ms);
  printf("%s\n", r.error);
  assert_non_null(strstr(r.error, "interrupted"));
  assert_non_null(strstr(r.error, "moved 3"));
  assert_non_null(strstr(r.error, "of the 20"));
  assert_non_null(strstr(r.error, "dsr.dlq.manual"));
  /* The counts are as saved: nothing is made up. */
  assert_int_equal(r.moved, 3);
  assert_int_equal(r.examined, 9);
  /* Any other state stays as it is. */
  dlqb_job_record d = sample(8, DLQB_JOB_REPLAY, DLQB_JOB_DONE), before = d;
  dlqb_jobfile_interrupt(&d, "dsr.dlq.manual");
  assert_same(&before, &d);
  assert_string_equal(dlqb_job_state_name(DLQB_JOB_INTERRUPTED), "interrupted");
  assert_string_equal(dlqb_job_action_name(DLQB_JOB_ESCALATE), "escalate");
  assert_string_equal(dlqb_job_state_name(DLQB_JOB__STATES), "?");
}

/* ---- the file ---- */

typedef struct {
  char dir[64];
  char path[128];
} tmp_dir;

static void tmp_init(tmp_dir *t) {
  snprintf(t->dir, sizeof t->dir, "/tmp/dlqb-jobfile-XXXXXX");
  assert_non_null(mkdtemp(t->dir));
  snprintf(t->path, sizeof t->path, "%s/console-jobs.json", t->dir);
}

static void tmp_remove(tmp_dir *t) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
  assert_int_equal(system(cmd), 0);
}

static void read_refused(const char *path, const char *why) {
  dlqb_job_record *out = table();
  size_t n = 99;
  bool found = true;
  dlqb_error err = {{0}};
  dlqb_status st = dlqb_jobfile_read(path, out, &n, &found, &err);
  printf("%s: %s\n", why, err.msg);
  if (st == DLQB_OK) fail_msg("read (%s)", why);
  assert_int_equal(n, 0);
  assert_non_null(strstr(err.msg, path));
  assert_null(strchr(err.msg, '\n'));
  free(out);
}

static void test_file_round_trip(void **state) {
  (void)state;
  tmp_dir t;
  tmp_init(&t);
  dlqb_job_record *out = table();
  size_t n = 99;
  bool found = true;
  dlqb_error err = {{0}};
  /* No file yet: no history, no error. */
  assert_int_equal(dlqb_jobfile_read(t.path, out, &n, &found, &err), DLQB_OK);
  assert_false(found);
  assert_int_equal(n, 0);
  dlqb_job_record in[2] = {sample(1, DLQB_JOB_REPLAY, DLQB_JOB_DONE),
                           sample(2, DLQB_JOB_ESCALATE, DLQB_JOB_RUNNING)};
  assert_int_equal(dlqb_jobfile_write(t.path, in, 2, &err), DLQB_OK);
  struct stat sb;
  assert_int_equal(stat(t.path, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0600);
  assert_int_equal(dlqb_jobfile_read(t.path, out, &n, &found, &err), DLQB_OK);
  assert_true(found);
  assert_int_equal(n, 2);
  assert_same(&in[0], &out[0]);
  assert_same(&in[1], &out[1]);
  /* Written again: replaced whole. */
  assert_int_equal(dlqb_jobfile_write(t.path, in, 1, &err), DLQB_OK);
  assert_int_equal(dlqb_jobfile_read(t.path, out, &n, &found, &err), DLQB_OK);
  assert_int_equal(n, 1);
  free(out);
  tmp_remove(&t);
}

static void test_file_hostile(void **state) {
  (void)state;
  tmp_dir t;
  tmp_init(&t);
  dlqb_job_record in = sample(1, DLQB_JOB_REPLAY, DLQB_JOB_DONE);
  dlqb_error err = {{0}};
  char other[160];
  snprintf(other, sizeof other, "%s/elsewhere.json", t.dir);
  assert_int_equal(dlqb_jobfile_write(other, &in, 1, &err), DLQB_OK);

  /* A link planted in its place is not followed. */
  assert_int_equal(symlink(other, t.path), 0);
  read_refused(t.path, "a symlink");
  /* Writing replaces the link itself; the file it pointed at is untouched. */
  struct stat before, after;
  assert_int_equal(stat(other, &before), 0);
  dlqb_job_record two[2] = {in, sample(2, DLQB_JOB_REPLAY, DLQB_JOB_DONE)};
  assert_int_equal(dlqb_jobfile_write(t.path, two, 2, &err), DLQB_OK);
  assert_int_equal(lstat(t.path, &after), 0);
  assert_true(S_ISREG(after.st_mode));
  assert_int_equal(stat(other, &after), 0);
  assert_int_equal(after.st_size, before.st_size);
  assert_int_equal(unlink(t.path), 0);

  /* A FIFO is neither waited on nor read. */
  assert_int_equal(mkfifo(t.path, 0600), 0);
  read_refused(t.path, "a fifo");
  assert_int_equal(unlink(t.path), 0);
  /* A directory. */
  assert_int_equal(mkdir(t.path, 0700), 0);
  read_refused(t.path, "a directory");
  assert_int_equal(rmdir(t.path), 0);

  /* A file others may write is not trusted. */
  assert_int_equal(dlqb_jobfile_write(t.path, &in, 1, &err), DLQB_OK);
  assert_int_equal(chmod(t.path, 0666), 0);
  read_refused(t.path, "writable by others");
  assert_int_equal(chmod(t.path, 0620), 0);
  read_refused(t.path, "writable by the group");
  assert_int_equal(unlink(t.path), 0);

  /* Huge: refused unread (a sparse file past the limit). */
  int fd = open(t.path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)DLQB_JOBFILE_MAX_BYTES + 1), 0);
  close(fd);
  read_refused(t.path, "oversized");
  assert_int_equal(unlink(t.path), 0);

  /* Corrupt bytes in a file of ours. */
  fd = open(t.path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "{\"format\":\"dlq-bridge console jobs\",\"vers", 41), 41);
  close(fd);
  read_refused(t.path, "truncated");
  tmp_remove(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),         cmocka_unit_test(test_full_table_fits),
      cmocka_unit_test(test_corrupt_is_refused), cmocka_unit_test(test_truncated_is_refused),
      cmocka_unit_test(test_interrupt),          cmocka_unit_test(test_file_round_trip),
      cmocka_unit_test(test_file_hostile),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

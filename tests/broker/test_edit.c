/* dlq-bridge edit against a real broker: an invalid-envelope task edited
 * and replayed completes, and the trail tells it as one story; an edit
 * still invalid, or of the bridge's own headers, moves nothing; hostile
 * values are shown and recorded as text; SIGKILL at every moment of an
 * edit leaves one copy that counts and a trail that says which (and a
 * retried edit of the stale copy is refused); two edits at once: one
 * wins. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flow.h"

#define CMD_TIMEOUT_MS 60000
#define WAIT_MS        20000
#define HOUR_MS        3600000LL

typedef struct {
  fx_audit a;
  const char *env[7];
} trail;

/* A trail; the edits act at once (edit_approval 0) unless four_eyes. */
static void trail_init_as(trail *tr, bool four_eyes) {
  assert_int_equal(fx_audit_init(&tr->a), 0);
  tr->env[0] = tr->a.env_log;
  tr->env[1] = tr->a.env_key;
  tr->env[2] = "DLQ_BRIDGE_COMPLETION_WRITERS=guest";
  tr->env[3] = tr->a.env_pub;
  tr->env[4] = "DLQ_BRIDGE_RETRY_DELAYS=100ms";
  tr->env[5] = four_eyes ? NULL : "DLQ_BRIDGE_EDIT_APPROVAL=0";
  tr->env[6] = NULL;
}

static void trail_init(trail *tr) { trail_init_as(tr, false); }

static void run(fx_case *t, const trail *tr, const char *const *args, th_result *r) {
  assert_int_equal(th_run_bridge(args, t->vhost.url, tr->env, CMD_TIMEOUT_MS, r), 0);
  printf("%s %s: exit %d\n%s%s", args[0], args[1] ? args[1] : "", r->exit_code, r->out, r->err);
}

static void declare(fx_case *t, const trail *tr) {
  static const char *const args[] = {"declare", NULL};
  th_result r;
  run(t, tr, args, &r);
  assert_int_equal(r.exit_code, 0);
}

/* A DLQ item as the bridge leaves an invalid envelope: legal_basis
 * "gdpr_17", dead-lettered an hour ago (its time, ISO, into iso). */
static void invalid_item(th_msg *m, const char *id, char *iso, size_t cap) {
  th_msg_init(m);
  assert_int_equal(th_msg_task(m, id), 0);
  assert_int_equal(th_msg_set_str(m, "legal_basis", "gdpr_17"), 0);
  th_iso_time(th_now_ms() - HOUR_MS, iso, cap);
  assert_int_equal(th_msg_set_int(m, "attempt", 0), 0);
  assert_int_equal(th_msg_set_str(m, "last_error", "invalid envelope: legal_basis 'gdpr_17'"), 0);
  assert_int_equal(th_msg_set_str(m, "dlq_reason", "invalid_envelope"), 0);
  assert_int_equal(th_msg_set_str(m, "dlq_at", iso), 0);
}

static void pub_invalid(fx_case *t, const char *id) {
  th_msg m;
  char iso[48];
  invalid_item(&m, id, iso, sizeof iso);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
}

/* Lines of the log holding both needles. */
static int count_records(const fx_audit *a, const char *n1, const char *n2) {
  FILE *f = fopen(a->log, "r");
  if (f == NULL) return 0;
  char *line = NULL;
  size_t cap = 0;
  int n = 0;
  while (getline(&line, &cap, f) >= 0)
    if (strstr(line, n1) != NULL && strstr(line, n2) != NULL) n++;
  free(line);
  fclose(f);
  return n;
}

static int edited_records(const fx_audit *a, const char *msg_id) {
  char mid[96];
  snprintf(mid, sizeof mid, "\"message_id\":\"%s\"", msg_id);
  return count_records(a, "\"event\":\"edited\"", mid);
}

static void test_invalid_item_edited_replayed_completes(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init(&tr);
  /* The bridge itself dead-letters the task as invalid: the story's first
   * hop is the daemon's. */
  assert_int_equal(fx_start_bridge(t, tr.env), 0);
  th_msg *m = fx_msg(t);
  assert_int_equal(th_msg_task(m, "E-1"), 0);
  assert_int_equal(th_msg_set_str(m, "legal_basis", "gdpr_17"), 0);
  assert_int_equal(th_publish(t->conn, "dsr.dlx", "", m), 0);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 1, WAIT_MS));
  assert_int_equal(fx_stop_bridges(t), 0); /* its SLA escalator is another DLQ consumer */

  /* The preview: fields before and after, the body's size and hash, never
   * the body; nothing moves. */
  static const char *const dry[] = {
      "edit",   "--message-id",         "msg-E-1",   "--set", "legal_basis=gdpr_art_17",
      "--note", "producer typo, INC-7", "--dry-run", NULL};
  th_result r;
  run(t, &tr, dry, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "legal_basis          \"gdpr_17\" -> \"gdpr_art_17\""));
  assert_non_null(strstr(r.out, "version original: dsr.dlq.manual -> dsr.work"));
  assert_non_null(strstr(r.out, "bytes sha256 "));
  assert_non_null(strstr(r.out, "(unchanged)"));
  assert_non_null(strstr(r.out, "valid under profile dsr"));
  assert_non_null(strstr(r.out, "dry run: nothing moved"));
  assert_null(strstr(r.out, "user-42")); /* the body's content */
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 1);
  assert_int_equal(edited_records(&tr.a, "msg-E-1"), 0);

  static const char *const edit[] = {
      "edit",   "--message-id",         "msg-E-1", "--set", "legal_basis=gdpr_art_17",
      "--note", "producer typo, INC-7", "--actor", "alice", NULL};
  run(t, &tr, edit, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "edited msg-E-1 (request_id E-1, source_system test-suite) as e-"));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(edited_records(&tr.a, "msg-E-1"), 1);

  /* The worker gets one task, edited, with the original's message_id. */
  th_worker *w = fx_worker(t);
  assert_non_null(w);
  th_msg *got = fx_msg(t);
  FX_CHECK(t, th_worker_next(w, got, WAIT_MS) == 1);
  assert_string_equal(got->message_id, "msg-E-1");
  FX_HDR_STR_EQ(got, "legal_basis", "gdpr_art_17");
  FX_HDR_STR_EQ(got, "edited_by", "guest"); /* the broker user, not --actor */
  FX_HDR_INT_EQ(got, "attempt", 0);
  FX_HDR_INT_EQ(got, "replay_count", 1);
  assert_non_null(th_msg_str(got, "edit_id"));
  assert_null(th_msg_find(got, "edit_parent"));
  assert_null(th_msg_find(got, "dlq_reason"));
  assert_int_equal(th_worker_ack(w), 0);
  th_msg *done = fx_msg(t);
  assert_int_equal(th_msg_add_str(done, "request_id", "E-1"), 0);
  assert_int_equal(th_msg_add_str(done, "source_system", "test-suite"), 0);
  snprintf(done->user_id, sizeof done->user_id, "guest");
  assert_int_equal(th_publish(t->conn, "", "dsr.completed", done), 0);
  assert_int_equal(th_worker_next(w, got, 500), 0); /* one copy only */

  /* Edited again: nothing left to edit, and a completed task is not
   * replayed. */
  run(t, &tr, edit, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "no item with message_id 'msg-E-1'"));

  static const char *const show[] = {"audit", "show", "--request-id", "E-1", NULL};
  run(t, &tr, show, &r);
  assert_int_equal(r.exit_code, 0);
  const char *failed = strstr(r.out, "invalid_envelope");
  const char *edited = strstr(r.out, "edited           dsr.dlq.manual -> dsr.work");
  assert_non_null(failed);
  assert_non_null(edited);
  assert_true(failed < edited);
  assert_non_null(strstr(edited, "reason \"producer typo, INC-7\"  by alice"));
  assert_non_null(strstr(edited, "of the original  editor guest"));
  assert_non_null(strstr(edited, "legal_basis \"gdpr_17\" -> \"gdpr_art_17\""));
  assert_non_null(strstr(edited, "(unchanged)"));
  char from[48];
  th_iso_time(th_now_ms() - HOUR_MS, from, sizeof from);
  const char *const report[] = {"audit", "report", "--from", from, NULL};
  run(t, &tr, report, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "completed  request_id E-1"));
  assert_int_equal(fx_audit_verify(&tr.a, &r), 0);
  assert_int_equal(r.exit_code, 0);
  fx_audit_remove(&tr.a);
}

static void test_refused_edits_move_nothing(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init(&tr);
  declare(t, &tr);
  pub_invalid(t, "N-1");
  th_result r;
  /* Still invalid: the profile's reason, and nothing moves. */
  static const char *const still[] = {
      "edit", "--message-id", "msg-N-1", "--set", "legal_basis=gdpr_18", "--note", "try", NULL};
  run(t, &tr, still, &r);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_error_lines(r.err), 1);
  assert_non_null(strstr(r.err, "would still be invalid: legal_basis 'gdpr_18' is not one of"));
  assert_non_null(strstr(r.out, "still invalid:"));
  /* Removing a required field: the same. */
  static const char *const unset[] = {
      "edit",    "--message-id", "msg-N-1", "--set", "legal_basis=gdpr_art_17",
      "--unset", "action",       "--note",  "try",   NULL};
  run(t, &tr, unset, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "action is missing"));
  /* The bridge's own headers: exit 2, named. */
  static const char *const own[] = {"edit",      "--message-id", "msg-N-1", "--set",
                                    "attempt=0", "--note",       "try",     NULL};
  run(t, &tr, own, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "attempt is the bridge's own: not editable"));
  static const char *const nonote[] = {
      "edit", "--message-id", "msg-N-1", "--set", "legal_basis=gdpr_art_17", NULL};
  run(t, &tr, nonote, &r);
  assert_int_equal(r.exit_code, 2);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 1, WAIT_MS));
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(edited_records(&tr.a, "msg-N-1"), 0);
  th_msg *m = fx_msg(t);
  assert_int_equal(th_get(t->conn, "dsr.dlq.manual", m), 1);
  FX_HDR_STR_EQ(m, "legal_basis", "gdpr_17"); /* as it was */
  assert_null(th_msg_find(m, "edit_id"));
  fx_audit_remove(&tr.a);
}

/* A value from a message and a value an operator typed, both hostile: the
 * terminal, the JSON and the trail get text, never control bytes. */
static void test_hostile_values_are_text(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init(&tr);
  declare(t, &tr);
  th_msg m;
  th_msg_init(&m);
  assert_int_equal(th_msg_task(&m, "H-1"), 0);
  assert_int_equal(th_msg_set_str(&m, "legal_basis", "gdpr_17"), 0);
  assert_int_equal(th_msg_set_str(&m, "ticket", "\x1b]0;owned\x07<script>x</script>"), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
  static const char *const dry[] = {"edit",
                                    "--message-id",
                                    "msg-H-1",
                                    "--set",
                                    "legal_basis=gdpr_art_17",
                                    "--set",
                                    "ticket=\x1b[2J\"quoted\"\\",
                                    "--note",
                                    "fix\x1b[1m",
                                    "--dry-run",
                                    NULL};
  th_result r;
  run(t, &tr, dry, &r);
  assert_int_equal(r.exit_code, 0);
  assert_null(strchr(r.out, '\x1b'));
  assert_null(strchr(r.out, '\x07'));
  assert_non_null(strstr(r.out, "\"?]0;owned?<script>x</script>\" -> \"?[2J\"quoted\"\\\""));
  static const char *const json[] = {"edit",
                                     "--message-id",
                                     "msg-H-1",
                                     "--set",
                                     "legal_basis=gdpr_art_17",
                                     "--set",
                                     "ticket=\x1b[2J\"quoted\"\\",
                                     "--note",
                                     "fix\x1b[1m",
                                     "--json",
                                     NULL};
  run(t, &tr, json, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *doc = json_tokener_parse(r.out);
  assert_non_null(doc);
  assert_string_equal(th_json_str(doc, "outcome"), "edited");
  json_object *fields;
  assert_true(json_object_object_get_ex(doc, "fields", &fields));
  json_object *ticket = json_object_array_get_idx(fields, 1);
  assert_string_equal(th_json_str(ticket, "old"), "?]0;owned?<script>x</script>");
  assert_string_equal(th_json_str(ticket, "new"), "?[2J\"quoted\"\\");
  json_object_put(doc);
  /* The trail holds the same text, JSON-escaped. */
  assert_int_equal(
      count_records(&tr.a, "\"event\":\"edited\"", "\"new\":\"?[2J\\\"quoted\\\"\\\\\""), 1);
  assert_int_equal(fx_count_in_file(tr.a.log, "\x1b"), 0);
  static const char *const show[] = {"audit", "show", "--message-id", "msg-H-1", NULL};
  run(t, &tr, show, &r);
  assert_int_equal(r.exit_code, 0);
  assert_null(strchr(r.out, '\x1b'));
  assert_non_null(strstr(r.out, "ticket \"?]0;owned?<script>x</script>\" -> \"?[2J\"quoted\"\\\""));
  fx_audit_remove(&tr.a);
}

/* ---- four eyes -------------------------------------------------------- */

#define BOB_PASSWORD "bob-edit-test"

typedef struct {
  char name[TH_NAME_MAX + 8];
  char url[TH_URL_MAX];
} broker_user;

/* A second broker user on the case's vhost: every right, or (reader) read
 * only. */
static void make_user(const fx_case *t, broker_user *u, const char *who, bool reader) {
  const th_env *e = th_env_get();
  char path[TH_PATH_MAX];
  assert_true(th_fmt(u->name, sizeof u->name, "%s-%s", t->vhost.name, who));
  assert_true(th_fmt(path, sizeof path, "/api/users/%s", u->name));
  int status = th_mgmt("PUT", path, "{\"password\":\"" BOB_PASSWORD "\",\"tags\":\"\"}", NULL);
  assert_true(status == 201 || status == 204);
  assert_true(th_fmt(path, sizeof path, "/api/permissions/%s/%s", t->vhost.name, u->name));
  status = th_mgmt("PUT", path,
                   reader ? "{\"configure\":\"^$\",\"write\":\"^$\",\"read\":\".*\"}"
                          : "{\"configure\":\".*\",\"write\":\".*\",\"read\":\".*\"}",
                   NULL);
  assert_true(status == 201 || status == 204);
  /* In the environment (DLQ_BRIDGE_URL), never on a command line. */
  assert_true(th_fmt(u->url, sizeof u->url, "amqp://%s:" BOB_PASSWORD "@127.0.0.1:%d/%s", u->name,
                     e->amqp_port, t->vhost.name));
}

static void drop_user(const broker_user *u) {
  char path[TH_PATH_MAX];
  if (th_fmt(path, sizeof path, "/api/users/%s", u->name)) th_mgmt("DELETE", path, NULL, NULL);
}

static void run_as(const char *url, const trail *tr, const char *const *args, th_result *r) {
  assert_int_equal(th_run_bridge(args, url, tr->env, CMD_TIMEOUT_MS, r), 0);
  printf("%s %s: exit %d\n%s%s", args[0], args[1] ? args[1] : "", r->exit_code, r->out, r->err);
}

/* guest proposes an edit of msg_id; returns the proposal's id in id. */
static void propose(fx_case *t, const trail *tr, const char *msg_id, char *id, size_t cap) {
  const char *args[] = {
      "edit",   "--message-id",         msg_id,   "--set", "legal_basis=gdpr_art_17",
      "--note", "producer typo, INC-9", "--json", NULL};
  th_result r;
  run_as(t->vhost.url, tr, args, &r);
  assert_int_equal(r.exit_code, 0);
  json_object *doc = json_tokener_parse(r.out);
  assert_non_null(doc);
  assert_string_equal(th_json_str(doc, "outcome"), "proposed");
  snprintf(id, cap, "%s", th_json_str(doc, "edit_id"));
  json_object_put(doc);
  assert_int_equal(strncmp(id, "e-", 2), 0);
}

/* SIGKILL at every moment of an edit, by a ladder of deadlines (as the
 * review decisions are tested): the task is never lost, no copy is ever
 * sent that the trail does not know of, and the trail says which copy
 * counts. No edit_started record: nothing was sent, the DLQ copy counts.
 * edit_started and edited: the copy in dsr.work counts (a DLQ copy left
 * beside it is the interrupted ack's: stale, and a retried edit of it is
 * refused). edit_started alone: the edit began and did not end, its copy
 * (named by its edit_id) may be in dsr.work, and a retry is refused until
 * the operator names that edit. */
#define STEPS 32

typedef struct {
  fx_case *t;
  long want;
} depth_at_least;

static bool dlq_back(void *arg) {
  depth_at_least *d = arg;
  return th_queue_depth(d->t->conn, "dsr.dlq.manual") >= d->want;
}

/* Step STEPS-1 runs first with all the time it needs and times a whole
 * edit; the others are killed at deadlines spread from 1 ms to twice
 * that, so that the kills fall all through an edit on any build (a
 * sanitizer build's runs last several times a release build's). */
static int deadline(int step, int whole_ms) {
  if (step == STEPS - 1) return CMD_TIMEOUT_MS;
  return 1 + (int)((long)step * 2 * whole_ms / (STEPS - 2));
}

static void drain_count(fx_case *t, const char *queue, th_msg *m, int *per_step, bool *edited) {
  int got;
  while ((got = th_get(t->conn, queue, m)) == 1) {
    const char *id = th_msg_str(m, "request_id");
    assert_non_null(id);
    assert_true(id[0] == 'k');
    int step = atoi(id + 1);
    assert_true(step >= 0 && step < STEPS);
    per_step[step]++;
    if (edited != NULL) edited[step] = th_msg_find(m, "edit_id") != NULL;
  }
  assert_int_equal(got, 0);
}

/* The ladder's edits: direct (edit_approval 0), or proposed by guest and
 * approved by the approver, each step's proposal in proposal[step]. */
typedef struct {
  const broker_user *approver; /* NULL: direct edits */
  char proposal[STEPS][64];
} edit_way;

/* A retry of the edit of step's item (an approval again, when they are
 * approved): its exit status, its error in r. */
static int retry_edit(fx_case *t, const trail *tr, const edit_way *w, int step, th_result *r) {
  char mid[48];
  snprintf(mid, sizeof mid, "msg-k%d", step);
  const char *direct[] = {"edit",   "--message-id", mid, "--set", "legal_basis=gdpr_art_17",
                          "--note", "retry",        NULL};
  const char *approve[] = {"edit", "approve", w->proposal[step], NULL};
  const char *const *retry = w->approver != NULL ? approve : direct;
  const char *url = w->approver != NULL ? w->approver->url : t->vhost.url;
  assert_int_equal(th_run_bridge(retry, url, tr->env, CMD_TIMEOUT_MS, r), 0);
  printf("retry of msg-k%d: exit %d: %s", step, r->exit_code, r->err);
  fflush(stdout);
  return r->exit_code;
}

static void edit_ladder(fx_case *t, edit_way *w) {
  trail tr;
  trail_init_as(&tr, w->approver != NULL);
  declare(t, &tr);
  int exit_code[STEPS], recorded[STEPS], started[STEPS], in_work[STEPS] = {0}, in_dlq[STEPS] = {0};
  int deadline_ms[STEPS], whole_ms = 0;
  bool dlq_edited[STEPS] = {false};
  for (int n = 0; n < STEPS; n++) {
    int step = n == 0 ? STEPS - 1 : n - 1; /* the whole edit first */
    char id[32], msg_id[40];
    snprintf(id, sizeof id, "k%d", step);
    snprintf(msg_id, sizeof msg_id, "msg-k%d", step);
    pub_invalid(t, id);
    const char *direct[] = {"edit",   "--message-id", msg_id, "--set", "legal_basis=gdpr_art_17",
                            "--note", "ladder",       NULL};
    const char *approve[] = {"edit", "approve", w->proposal[step], NULL};
    if (w->approver != NULL) propose(t, &tr, msg_id, w->proposal[step], sizeof w->proposal[step]);
    th_result r;
    deadline_ms[step] = deadline(step, whole_ms);
    int64_t began = th_now_ms();
    assert_int_equal(th_run_bridge(w->approver != NULL ? approve : direct,
                                   w->approver != NULL ? w->approver->url : t->vhost.url, tr.env,
                                   deadline_ms[step], &r),
                     0);
    if (step == STEPS - 1) whole_ms = (int)(th_now_ms() - began);
    exit_code[step] = r.exit_code;
    if (r.exit_code != -1 && r.exit_code != 0) fail_msg("edit exited %d: %s", r.exit_code, r.err);
  }
  long unrecorded = 0;
  for (int step = 0; step < STEPS; step++) {
    char mid[48];
    snprintf(mid, sizeof mid, "\"message_id\":\"msg-k%d\"", step);
    recorded[step] = count_records(&tr.a, "\"event\":\"edited\"", mid);
    started[step] = count_records(&tr.a, "\"event\":\"edit_started\"", mid);
    if (recorded[step] == 0) unrecorded++;
  }
  /* The killed processes' unacked originals return as the broker sees
   * their sockets close. */
  depth_at_least d = {t, unrecorded};
  FX_CHECK(t, th_wait_until(dlq_back, &d, 10000));
  /* Retries, before the queues are drained: of a copy the trail calls
   * stale (edited, yet back in the DLQ), and of one whose edit only began. */
  int stale_tried = 0, interrupted_tried = 0;
  for (int step = 0; step < STEPS; step++) {
    th_result r;
    if (recorded[step] == 0 && started[step] == 1) {
      assert_int_equal(retry_edit(t, &tr, w, step, &r), 1);
      if (strstr(r.err,
                 "began and did not end: its copy, which carries that edit_id, may be live") ==
          NULL)
        fail_msg("step %d: %s", step, r.err);
      interrupted_tried++;
    } else if (recorded[step] == 1 && exit_code[step] == -1) {
      int rc = retry_edit(t, &tr, w, step, &r);
      assert_int_equal(rc, 1);
      if (strstr(r.err, "no item") != NULL) continue;          /* acked before the kill */
      if (strstr(r.err, "approved already") != NULL) continue; /* the proposal is settled */
      assert_non_null(strstr(r.err, "it is stale, the edited copy counts; nothing moved"));
      stale_tried++;
    }
  }
  th_msg *m = fx_msg(t);
  drain_count(t, "dsr.work", m, in_work, NULL);
  drain_count(t, "dsr.dlq.manual", m, in_dlq, dlq_edited);
  int killed = 0, finished = 0, both = 0, begun = 0;
  for (int step = 0; step < STEPS; step++) {
    printf("deadline %d ms: exit %d, work %d, dlq %d, started %d, edited %d\n", deadline_ms[step],
           exit_code[step], in_work[step], in_dlq[step], started[step], recorded[step]);
    if (exit_code[step] == -1) killed++;
    else finished++;
    assert_true(in_work[step] + in_dlq[step] >= 1); /* never lost */
    assert_true(in_work[step] <= 1 && in_dlq[step] <= 1);
    assert_true(recorded[step] <= 1 && started[step] <= 1);
    assert_true(started[step] >= recorded[step]);               /* the intent comes first */
    if (started[step] == 0) assert_int_equal(in_work[step], 0); /* nothing sent unrecorded */
    if (recorded[step] > 0) assert_int_equal(in_work[step], 1); /* the edited copy counts */
    else assert_int_equal(in_dlq[step], 1);                     /* the original stays */
    if (in_dlq[step]) assert_false(dlq_edited[step]);           /* an original, unedited */
    if (exit_code[step] == 0) assert_true(recorded[step] == 1 && in_dlq[step] == 0);
    if (in_work[step] && in_dlq[step]) both++;
    if (started[step] && !recorded[step]) begun++;
  }
  printf("%s sigkill ladder over a whole run of %d ms: %d killed, %d finished, %d in both "
         "places, %d begun and not ended; retries refused: %d stale, %d interrupted\n",
         w->approver != NULL ? "edit approve" : "edit", whole_ms, killed, finished, both, begun,
         stale_tried, interrupted_tried);
  assert_true(killed > 0 && finished > 0); /* the ladder spans the edit */
  fx_audit_remove(&tr.a);
}

static void test_edit_sigkill_leaves_one_copy_that_counts(void **state) {
  static edit_way direct; /* no approver */
  edit_ladder(*state, &direct);
}

/* The same for an approval (four eyes): the proposal made by one broker
 * user, its approval by another SIGKILLed at every moment; a retried
 * approval of one begun and not ended is refused (the approver settles it
 * with --after-interrupted: test_interrupted_approval_settled_by_the_approver). */
static void test_edit_approve_sigkill_leaves_one_copy_that_counts(void **state) {
  fx_case *t = *state;
  broker_user bob;
  make_user(t, &bob, "bob", false);
  static edit_way approved;
  approved.approver = &bob;
  edit_ladder(t, &approved);
  drop_user(&bob);
}

/* Runs edit args in a child process; returns its pid. Its exit status is
 * the command's. */
static pid_t spawn_edit(fx_case *t, const trail *tr, const char *const *args) {
  fflush(stdout);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    th_result r;
    int rc = th_run_bridge(args, t->vhost.url, tr->env, CMD_TIMEOUT_MS, &r);
    printf("[child] exit %d\n%s%s", r.exit_code, r.out, r.err);
    fflush(stdout);
    _exit(rc != 0 ? 99 : r.exit_code < 0 ? 98 : r.exit_code);
  }
  return pid;
}

static int reap(pid_t pid) {
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

#define ROUNDS 4

static void test_two_edits_at_once_one_wins(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init(&tr);
  declare(t, &tr);
  th_msg *m = fx_msg(t);
  for (int round = 0; round < 2 * ROUNDS; round++) {
    /* Even rounds replay; odd ones --keep, both told the version they
     * saw (the original), as a preview would tell them. */
    bool keep = round % 2 == 1;
    char id[16], mid[24];
    snprintf(id, sizeof id, "c%d", round);
    snprintf(mid, sizeof mid, "msg-c%d", round);
    pub_invalid(t, id);
    const char *a1[] = {"edit",
                        "--message-id",
                        mid,
                        "--set",
                        "legal_basis=gdpr_art_17",
                        "--note",
                        "first",
                        "--expect-edit-id",
                        "original",
                        keep ? "--keep" : NULL,
                        NULL};
    const char *a2[] = {"edit",
                        "--message-id",
                        mid,
                        "--set",
                        "legal_basis=gdpr_art_15",
                        "--note",
                        "second",
                        "--expect-edit-id",
                        "original",
                        keep ? "--keep" : NULL,
                        NULL};
    pid_t p1 = spawn_edit(t, &tr, a1), p2 = spawn_edit(t, &tr, a2);
    int rc1 = reap(p1), rc2 = reap(p2);
    printf("round %d (%s): exits %d and %d\n", round, keep ? "keep" : "replay", rc1, rc2);
    assert_true((rc1 == 0 && rc2 == 1) || (rc1 == 1 && rc2 == 0));
    assert_int_equal(edited_records(&tr.a, mid), 1);
    const char *queue = keep ? "dsr.dlq.manual" : "dsr.work";
    FX_CHECK(t, th_wait_depth(t->conn, queue, 1, WAIT_MS));
    assert_int_equal(th_get(t->conn, queue, m), 1);
    FX_HDR_STR_EQ(m, "legal_basis", rc1 == 0 ? "gdpr_art_17" : "gdpr_art_15");
    assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
    assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  }
  fx_audit_remove(&tr.a);
}

/* A compliance_review item: only its owner edits it, and the edited copy
 * leaves review as a decision does (custody headers removed). */
static void test_review_item_edited_by_its_owner(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init(&tr);
  declare(t, &tr);
  pub_invalid(t, "V-1");
  th_result r;
  static const char *const esc[] = {"escalate", "--request-id", "V-1", "--note", "odd basis", NULL};
  run(t, &tr, esc, &r);
  assert_int_equal(r.exit_code, 0);
  static const char *const claim[] = {"review", "claim", "--message-id", "msg-V-1", "--actor",
                                      "alice",  NULL};
  run(t, &tr, claim, &r);
  assert_int_equal(r.exit_code, 0);
  static const char *const bob[] = {
      "edit",   "--queue", "review",  "--message-id", "msg-V-1", "--set", "legal_basis=gdpr_art_17",
      "--note", "fix",     "--actor", "bob",          NULL};
  run(t, &tr, bob, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "only its owner edits it"));
  static const char *const alice[] = {
      "edit",   "--queue", "review",  "--message-id", "msg-V-1", "--set", "legal_basis=gdpr_art_17",
      "--note", "fix",     "--actor", "alice",        NULL};
  run(t, &tr, alice, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "compliance_review -> dsr.work"));
  assert_int_equal(th_queue_depth(t->conn, "compliance_review"), 0);
  th_msg *m = fx_msg(t);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.work", 1, WAIT_MS));
  assert_int_equal(th_get(t->conn, "dsr.work", m), 1);
  FX_HDR_STR_EQ(m, "legal_basis", "gdpr_art_17");
  assert_null(th_msg_find(m, "owner"));
  assert_null(th_msg_find(m, "escalated_by"));
  assert_int_equal(edited_records(&tr.a, "msg-V-1"), 1);
  fx_audit_remove(&tr.a);
}

static void test_four_eyes(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init_as(&tr, true); /* edit_approval's default: on */
  declare(t, &tr);
  broker_user bob, reader;
  make_user(t, &bob, "bob", false);
  make_user(t, &reader, "reader", true);
  for (const char *const *id = (const char *[]){"F-1", "F-2", "F-3", NULL}; *id; id++)
    pub_invalid(t, *id);
  th_result r;

  /* A proposal: the task stays where it is, the proposal on it. */
  char p1[64];
  propose(t, &tr, "msg-F-1", p1, sizeof p1);
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 3, WAIT_MS));
  /* Its author cannot approve it. */
  const char *mine[] = {"edit", "approve", p1, NULL};
  run_as(t->vhost.url, &tr, mine, &r);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_error_lines(r.err), 1);
  assert_non_null(strstr(r.err, "the proposer cannot approve their own edit"));
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  /* A read-only user: the broker refuses it before anything begins. */
  run_as(reader.url, &tr, mine, &r);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(count_records(&tr.a, "\"event\":\"edit_started\"", p1), 0);
  /* An approval the broker returns (dsr.work is gone): it began, and the
   * trail says no copy was taken (edit_abandoned), so the next approval
   * is not held up as an interrupted edit. */
  char qpath[TH_PATH_MAX];
  assert_true(th_fmt(qpath, sizeof qpath, "/api/queues/%s/dsr.work", t->vhost.name));
  assert_int_equal(th_mgmt("DELETE", qpath, NULL, NULL), 204);
  const char *first[] = {"edit", "approve", p1, NULL};
  run_as(bob.url, &tr, first, &r);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(count_records(&tr.a, "\"event\":\"edit_started\"", p1), 1);
  assert_int_equal(count_records(&tr.a, "\"event\":\"edit_abandoned\"", p1), 1);
  declare(t, &tr);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 3, WAIT_MS));
  /* A second broker user does: the edit runs as proposed. */
  const char *theirs[] = {"edit", "approve", p1, "--note", "checked with the DPO", NULL};
  run_as(bob.url, &tr, theirs, &r);
  assert_int_equal(r.exit_code, 0);
  char want[512];
  snprintf(want, sizeof want, "proposed by guest, approved by %s: dsr.dlq.manual -> dsr.work",
           bob.name);
  assert_non_null(strstr(r.out, want));
  th_msg *m = fx_msg(t);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.work", 1, WAIT_MS));
  assert_int_equal(th_get(t->conn, "dsr.work", m), 1);
  FX_HDR_STR_EQ(m, "request_id", "F-1");
  FX_HDR_STR_EQ(m, "legal_basis", "gdpr_art_17");
  FX_HDR_STR_EQ(m, "edit_id", p1);
  FX_HDR_STR_EQ(m, "edited_by", "guest");
  assert_null(th_msg_find(m, "edit_proposal"));
  assert_null(th_msg_find(m, "edit_proposal_id"));
  /* Approved twice: the proposal is gone with its item. */
  run_as(bob.url, &tr, theirs, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "is void"));

  /* A proposal whose item moved since (replayed as it was) is void. */
  char p2[64];
  propose(t, &tr, "msg-F-2", p2, sizeof p2);
  const char *replay[] = {"replay", "--request-id", "F-2", NULL};
  run_as(t->vhost.url, &tr, replay, &r);
  assert_int_equal(r.exit_code, 0);
  const char *approve2[] = {"edit", "approve", p2, NULL};
  run_as(bob.url, &tr, approve2, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "is void: no item in dsr.dlq.manual carries it"));
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.work", 1, WAIT_MS));
  assert_int_equal(th_get(t->conn, "dsr.work", m), 1);
  FX_HDR_STR_EQ(m, "request_id", "F-2");
  FX_HDR_STR_EQ(m, "legal_basis", "gdpr_17"); /* as it was: the proposal never ran */
  assert_null(th_msg_find(m, "edit_proposal_id"));

  /* Rejected: the proposal comes off, the task stays as it was. */
  char p3[64];
  propose(t, &tr, "msg-F-3", p3, sizeof p3);
  const char *reject[] = {"edit", "reject", p3, "--note", "the producer will resend", NULL};
  run_as(bob.url, &tr, reject, &r);
  assert_int_equal(r.exit_code, 0);
  const char *approve3[] = {"edit", "approve", p3, NULL};
  run_as(bob.url, &tr, approve3, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "is void"));
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 1, WAIT_MS));
  assert_int_equal(th_get(t->conn, "dsr.dlq.manual", m), 1);
  FX_HDR_STR_EQ(m, "request_id", "F-3");
  FX_HDR_STR_EQ(m, "legal_basis", "gdpr_17");
  assert_null(th_msg_find(m, "edit_proposal_id"));

  /* The story: proposed by guest, approved by bob, one edit. */
  const char *show[] = {"audit", "show", "--request-id", "F-1", NULL};
  run_as(t->vhost.url, &tr, show, &r);
  assert_int_equal(r.exit_code, 0);
  const char *proposed = strstr(r.out, "edit_proposed    dsr.dlq.manual -> dsr.dlq.manual");
  const char *edited = strstr(r.out, "edited           dsr.dlq.manual -> dsr.work");
  assert_non_null(proposed);
  assert_non_null(edited);
  assert_true(proposed < edited);
  snprintf(want, sizeof want,
           "editor guest  approver %s  legal_basis \"gdpr_17\" -> "
           "\"gdpr_art_17\"",
           bob.name);
  assert_non_null(strstr(edited, want));
  assert_non_null(strstr(edited, "reason \"checked with the DPO\""));
  assert_int_equal(fx_audit_verify(&tr.a, &r), 0);
  assert_int_equal(r.exit_code, 0);
  drop_user(&bob);
  drop_user(&reader);
  fx_audit_remove(&tr.a);
}

/* A copy of DLQ item id planted in the DLQ (by anyone who may publish to
 * it: an operator, a worker, a producer) carrying a proposal nobody made:
 * edit_proposal_id pid, the changes json, edit_proposed_by by. */
static void plant_proposal(fx_case *t, const char *id, const char *pid, const char *json,
                           const char *by) {
  th_msg m;
  char iso[48];
  invalid_item(&m, id, iso, sizeof iso);
  assert_int_equal(th_msg_set_str(&m, "edit_proposal_id", pid), 0);
  assert_int_equal(th_msg_set_str(&m, "edit_proposal", json), 0);
  assert_int_equal(th_msg_set_str(&m, "edit_proposed_by", by), 0);
  assert_int_equal(th_msg_set_str(&m, "edit_proposed_at", iso), 0);
  assert_int_equal(th_publish(t->conn, "", "dsr.dlq.manual", &m), 0);
  th_msg_release(&m);
}

#define FORGED_CHANGES                                                                             \
  "{\"set\":{\"legal_basis\":\"gdpr_art_17\"},\"unset\":[],\"note\":\"x\",\"keep\":false}"

/* Four eyes against forged proposals: an operator plants a proposal naming
 * a second operator as its proposer and approves it himself; a producer
 * plants one naming the first for the second to approve; a twin of a real
 * proposal (its id, other changes) is planted behind it. Only what the
 * signed trail records as proposed is approved, once; the trail stays
 * true. */
static void test_forged_proposals_are_not_approved(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init_as(&tr, true);
  declare(t, &tr);
  broker_user bob;
  make_user(t, &bob, "bob", false);
  th_result r;

  const char *forged1 = "e-0123456789abcdef0123456789abcdef";
  plant_proposal(t, "G-1", forged1, FORGED_CHANGES, bob.name);
  const char *mine[] = {"edit", "approve", forged1, NULL};
  run_as(t->vhost.url, &tr, mine, &r);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_error_lines(r.err), 1);
  assert_non_null(strstr(r.err, "is not the one the audit trail records (the audit trail records "
                                "no such proposal): not approved"));
  const char *forged2 = "e-fedcba9876543210fedcba9876543210";
  plant_proposal(t, "G-2", forged2, FORGED_CHANGES, "guest");
  const char *theirs[] = {"edit", "approve", forged2, NULL};
  run_as(bob.url, &tr, theirs, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "the audit trail records no such proposal"));
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(edited_records(&tr.a, "msg-G-1") + edited_records(&tr.a, "msg-G-2"), 0);
  assert_int_equal(count_records(&tr.a, "\"event\":\"edit_started\"", "msg-G-"), 0);

  /* A real proposal, and behind it a planted twin with other changes. */
  pub_invalid(t, "G-3");
  char p3[64];
  propose(t, &tr, "msg-G-3", p3, sizeof p3);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 3, WAIT_MS));
  plant_proposal(t, "G-3", p3,
                 "{\"set\":{\"legal_basis\":\"ccpa_delete\"},\"unset\":[],\"note\":\"producer "
                 "typo, INC-9\",\"keep\":false}",
                 "guest");
  const char *approve3[] = {"edit", "approve", p3, NULL};
  run_as(bob.url, &tr, approve3, &r);
  assert_int_equal(r.exit_code, 0);
  /* The twin now carries an approved proposal: refused, not run again. */
  run_as(bob.url, &tr, approve3, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "the trail records it approved already"));
  assert_int_equal(edited_records(&tr.a, "msg-G-3"), 1);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.work", 1, WAIT_MS));
  th_msg *m = fx_msg(t);
  assert_int_equal(th_get(t->conn, "dsr.work", m), 1);
  FX_HDR_STR_EQ(m, "legal_basis", "gdpr_art_17"); /* as proposed, not as planted */
  assert_int_equal(fx_audit_verify(&tr.a, &r), 0);
  assert_int_equal(r.exit_code, 0);
  drop_user(&bob);
  fx_audit_remove(&tr.a);
}

typedef struct {
  const fx_audit *a;
  const char *id;
} started_wait;

static bool approval_started(void *arg) {
  started_wait *w = arg;
  return count_records(w->a, "\"event\":\"edit_started\"", w->id) >= 1;
}

/* An approval killed after its intent (edit_started) and before its end,
 * its copy sent and never taken: the approver goes through a proxy that
 * cuts its connection at its publish to dsr.work (the copy never arrives), and is
 * SIGKILLed once its intent is in the trail. The approval again is refused
 * as interrupted; the proposer may not settle it; the second person
 * settles it with --after-interrupted, and the task goes on once. */
static void test_interrupted_approval_settled_by_the_approver(void **state) {
  fx_case *t = *state;
  trail tr;
  trail_init_as(&tr, true);
  declare(t, &tr);
  broker_user bob;
  make_user(t, &bob, "bob", false);
  pub_invalid(t, "I-1");
  char p[64];
  propose(t, &tr, "msg-I-1", p, sizeof p);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 1, WAIT_MS));

  th_proxy px = {0};
  snprintf(px.drop_publish_to, sizeof px.drop_publish_to, "dsr.work");
  assert_int_equal(th_proxy_start(&px), 0);
  char url_env[TH_URL_MAX + 64];
  assert_true(th_fmt(url_env, sizeof url_env, "DLQ_BRIDGE_URL=amqp://%s:%s@127.0.0.1:%d/%s",
                     bob.name, BOB_PASSWORD, px.port, t->vhost.name));
  const char *env[8];
  size_t n = 0;
  for (size_t i = 0; tr.env[i] != NULL; i++) env[n++] = tr.env[i];
  env[n++] = url_env;
  env[n] = NULL;
  const char *args[] = {"edit", "approve", p, NULL};
  th_bridge b;
  assert_int_equal(th_command_start(&b, &t->vhost, args, env, "approve"), 0);
  started_wait sw = {&tr.a, p};
  bool started = th_wait_until(approval_started, &sw, WAIT_MS);
  if (!started) th_bridge_dump_log(&b);
  th_bridge_kill(&b);
  th_proxy_cut(&px);
  assert_true(started);
  /* The original returns once the broker sees its consumer gone. */
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.dlq.manual", 1, WAIT_MS));
  assert_int_equal(th_queue_depth(t->conn, "dsr.work"), 0);
  assert_int_equal(edited_records(&tr.a, "msg-I-1"), 0);

  th_result r;
  run_as(bob.url, &tr, args, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "began and did not end"));
  assert_non_null(strstr(r.err, "--after-interrupted with that id to the approval"));
  const char *settle[] = {"edit", "approve", p, "--after-interrupted", p, NULL};
  run_as(t->vhost.url, &tr, settle, &r); /* the proposer: four eyes still */
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "the proposer cannot approve their own edit"));
  run_as(bob.url, &tr, settle, &r);
  assert_int_equal(r.exit_code, 0);
  FX_CHECK(t, th_wait_depth(t->conn, "dsr.work", 1, WAIT_MS));
  assert_int_equal(th_queue_depth(t->conn, "dsr.dlq.manual"), 0);
  assert_int_equal(edited_records(&tr.a, "msg-I-1"), 1);
  /* audit show says which copy counts: the approval that began, then the
   * one that ended. */
  const char *show[] = {"audit", "show", "--request-id", "I-1", NULL};
  run_as(t->vhost.url, &tr, show, &r);
  assert_int_equal(r.exit_code, 0);
  const char *began = strstr(r.out, "edit_started");
  assert_non_null(began);
  assert_non_null(strstr(began, "edited           dsr.dlq.manual -> dsr.work"));
  assert_int_equal(fx_audit_verify(&tr.a, &r), 0);
  assert_int_equal(r.exit_code, 0);
  drop_user(&bob);
  fx_audit_remove(&tr.a);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      FX_TEST(test_invalid_item_edited_replayed_completes),
      FX_TEST(test_refused_edits_move_nothing),
      FX_TEST(test_hostile_values_are_text),
      FX_TEST(test_edit_sigkill_leaves_one_copy_that_counts),
      FX_TEST(test_edit_approve_sigkill_leaves_one_copy_that_counts),
      FX_TEST(test_two_edits_at_once_one_wins),
      FX_TEST(test_four_eyes),
      FX_TEST(test_forged_proposals_are_not_approved),
      FX_TEST(test_interrupted_approval_settled_by_the_approver),
      FX_TEST(test_review_item_edited_by_its_owner),
  };
  if (getenv("DLQB_TEST_FILTER") != NULL) cmocka_set_test_filter(getenv("DLQB_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}

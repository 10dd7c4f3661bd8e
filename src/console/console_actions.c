/* The console's actions on DLQ items: a preview (the dry run of the same
 * pass the CLI runs) and then the real pass as a job in its own thread,
 * whose progress the job page polls, so a reload or a second tab sees the
 * same job. Replay, escalate and resolve run ops_move_pass with the CLI
 * commands' specs (ops_actions.c). The broker connection is the signed-in
 * user's: a replay they may not do is refused by the broker, and the audit
 * trail records them as the hop's broker_user and actor. What each job's
 * page shows is its record (dlqb/jobfile.h), kept in console_jobs_file at
 * its start, about once a second while it runs and at its end, and read
 * back when the console starts, so a restart loses no job's story. */
#include <json-c/json.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console.h"
#include "dlqb/clock.h"
#include "dlqb/hashset.h"
#include "dlqb/jobfile.h"
#include "dlqb/ledger.h"
#include "dlqb/log.h"
#include "dlqb/thread.h"
#include "dlqb/topology.h"
#include "dlqb/ops.h"

/* The jobs kept, running or ended, in memory and in the job file. */
#define JOBS DLQB_JOBFILE_MAX_JOBS
/* A running job's progress is saved at most this often (its start and end
 * always), so a killed console's job shows counts about a second old at
 * most: just under the pass's tick (1 s), so that each tick may save. */
#define SAVE_INTERVAL_MS 900

static const char *const act_done[DLQB_JOB__ACTIONS] = {"replayed", "escalated", "resolved"};

typedef struct {
  bool used;
  /* What its page shows and the job file keeps (id, action, state, user,
   * selection in words, rate, times, counts, summary, error), under lock;
   * id, action, user, selection and rate never change once it started. */
  dlqb_job_record rec;
  console_who who; /* whose broker connection; password wiped at the end */
  dlqb_select sel;
  ops_stamp stamp;
  pthread_t thread;
  bool joinable;
  dlqb_stop_flag stop; /* the Stop button, or the console's shutdown */
  char stopped_by[CONSOLE_USER_MAX];
  dlqb_hashset *picks; /* the checked items, or NULL; the job's thread frees it */
  /* Its thread has not yet ended its last save: the slot is not reused
   * until then (reusing joins the thread with the lock held, and that
   * save takes the lock). */
  bool busy;
} job;

_Static_assert(sizeof((console_who *)0)->user <= DLQB_JOBFILE_USER_MAX,
               "a job's record holds its user");

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static job jobs[JOBS];
static unsigned next_id = 1;
static bool shutting_down; /* under lock: the console's stop, not a person's */

/* ---- the job file ------------------------------------------------------ */

/* Taken before lock, never inside it: one save at a time, each of a
 * snapshot taken under it, so a later save never writes older counts. */
static pthread_mutex_t save_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t last_save_ms; /* monotonic; under save_lock */
static bool save_failing;    /* under save_lock: warned once until a save works */

static int by_id(const void *a, const void *b) {
  unsigned x = ((const dlqb_job_record *)a)->id, y = ((const dlqb_job_record *)b)->id;
  return x < y ? -1 : x > y;
}

/* A snapshot of every job's record, by number, written to path. Call with
 * save_lock held. */
static dlqb_status save_now(const char *path, dlqb_error *err) {
  dlqb_job_record *snap = malloc(JOBS * sizeof *snap);
  if (snap == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the console's job file");
  size_t n = 0;
  int64_t wall = dlqb_now_ms();
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < JOBS; i++)
    if (jobs[i].used) {
      snap[n] = jobs[i].rec;
      snap[n++].saved_ms = wall;
    }
  pthread_mutex_unlock(&lock);
  qsort(snap, n, sizeof *snap, by_id);
  dlqb_status st = dlqb_jobfile_write(path, snap, n, err);
  free(snap);
  return st;
}

/* Writes every job's record to console_jobs_file; unless force, only when
 * the last save is SAVE_INTERVAL_MS old. A failure is a warning (once
 * until a save works again): the jobs go on in memory. */
static void jobs_save(bool force) {
  const char *path = console_g.cfg->console.jobs_file;
  if (path[0] == '\0') return;
  pthread_mutex_lock(&save_lock);
  int64_t now = dlqb_mono_ms();
  if (force || last_save_ms == 0 || now - last_save_ms >= SAVE_INTERVAL_MS) {
    last_save_ms = now;
    dlqb_error err = {{0}};
    if (save_now(path, &err) == DLQB_OK) {
      save_failing = false;
    } else if (!save_failing) {
      save_failing = true;
      dlqb_log_warn("console_jobs",
                    "%s; the actions are kept in memory only until it can be written", err.msg);
    }
  }
  pthread_mutex_unlock(&save_lock);
}

void console_jobs_init(void) {
  pthread_mutex_lock(&lock);
  memset(jobs, 0, sizeof jobs);
  next_id = 1;
  shutting_down = false;
  pthread_mutex_unlock(&lock);
  const char *path = console_g.cfg->console.jobs_file;
  if (path[0] == '\0') return;
  dlqb_job_record *recs = malloc(JOBS * sizeof *recs);
  size_t n = 0, cut = 0;
  bool found = false;
  dlqb_error err = {{0}};
  if (recs == NULL) {
    dlqb_log_warn("console_jobs", "out of memory reading '%s': starting with no job history", path);
    return;
  }
  if (dlqb_jobfile_read(path, recs, &n, &found, &err) != DLQB_OK) {
    /* Whatever is there (corrupt, planted, another user's): one line, no
     * history, and the next save replaces it. */
    dlqb_log_warn("console_jobs", "%s: starting with no job history", err.msg);
    n = 0;
  }
  qsort(recs, n, sizeof *recs, by_id);
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < n; i++) {
    job *j = &jobs[i];
    j->used = true;
    j->rec = recs[i];
    /* Its pass died with the console: shown as cut short, never resumed
     * (nothing runs it, and Stop applies to running jobs only). */
    if (j->rec.state == DLQB_JOB_RUNNING) {
      dlqb_jobfile_interrupt(&j->rec, console_g.pipeline->dlq);
      cut++;
    }
    if (j->rec.id >= next_id) next_id = j->rec.id + 1;
  }
  pthread_mutex_unlock(&lock);
  free(recs);
  if (cut > 0) {
    dlqb_log_info("console_jobs",
                  "%zu actions read from '%s'; %zu of them were running when the console "
                  "stopped: interrupted",
                  n, path, cut);
    jobs_save(true);
  } else if (n > 0) {
    dlqb_log_info("console_jobs", "%zu actions read from '%s'", n, path);
  }
}

/* ---- what an action is ------------------------------------------------ */

static bool action_of(console_req *r, dlqb_job_action *kind) {
  char a[16] = "";
  console_form(r, "action", a, sizeof a);
  for (int k = 0; k < DLQB_JOB__ACTIONS; k++)
    if (strcmp(a, dlqb_job_action_name((dlqb_job_action)k)) == 0) {
      *kind = (dlqb_job_action)k;
      return true;
    }
  console_error_page(r, 400, "No such action", "The action must be replay, escalate or resolve.");
  return false;
}

/* The note of escalate and resolve (required), or NULL with a page written. */
static bool note_of(console_req *r, dlqb_job_action kind, char *note, size_t cap) {
  note[0] = '\0';
  if (kind == DLQB_JOB_REPLAY) return true;
  if (!console_form(r, "note", note, cap) || note[0] == '\0') {
    console_error_page(
        r, 400, "A note is needed",
        "Escalate and resolve need a note saying why (it goes into the audit trail).");
    return false;
  }
  return true;
}

/* A pass as the signed-in user: the loaded settings with their broker
 * credentials, their selection, their name as the audit trail's actor. */
typedef struct {
  dlqb_broker_conf *broker; /* console_user_broker's */
  dlqb_select sel;
  char actor[CONSOLE_USER_MAX];
} pass_as;

/* false: out of memory. Free what it set with pass_end. */
static bool opts_for(const console_who *who, const dlqb_select *sel, pass_as *o) {
  memset(o, 0, sizeof *o);
  if ((o->broker = console_user_broker(&console_g.cfg->broker, who)) == NULL) return false;
  o->sel = *sel;
  /* The audit trail's actor is the authenticated broker user. */
  snprintf(o->actor, sizeof o->actor, "%s", who->user);
  return true;
}

static void pass_end(pass_as *o) {
  if (o == NULL) return;
  console_broker_free(o->broker);
  explicit_bzero(o, sizeof *o);
}

/* The library's context of that pass. */
static ops_ctx pass_context(const pass_as *o) {
  return (ops_ctx){.cfg = console_g.cfg,
                   .broker = o->broker,
                   .pipeline = console_g.pipeline,
                   .actor = o->actor,
                   .sel = &o->sel,
                   .window = DLQB_SCAN_WINDOW_DEFAULT};
}

/* ---- the checked items ------------------------------------------------- */

static bool add_pick(void *ctx, const char *value) {
  dlqb_hashset *set = ctx;
  if (value[0] != '\0') dlqb_hashset_add(set, value, strlen(value), NULL);
  return dlqb_hashset_size(set) < CONSOLE_LIST_MAX;
}

/* The message_ids checked on the list (field "pick"), or NULL when none
 * was (then the selection's filters alone decide). *oom on no memory. */
static dlqb_hashset *picks_of(console_req *r, bool *oom) {
  *oom = false;
  dlqb_hashset *set = dlqb_hashset_new(0);
  if (set == NULL) {
    *oom = true;
    return NULL;
  }
  if (r->body != NULL) dlqb_form_each(r->body, r->body_len, "pick", 128, add_pick, set);
  if (dlqb_hashset_size(set) == 0) {
    dlqb_hashset_free(set);
    return NULL;
  }
  return set;
}

static bool picked(void *ctx, const dlqb_item *it) {
  return dlqb_hashset_get(ctx, it->message_id, strlen(it->message_id)) != NULL;
}

static void pick_field(void *ctx, const char *key, size_t len, void *value) {
  (void)len;
  (void)value;
  dlqb_html *h = ctx;
  dlqb_html_raw(h, "<input type=\"hidden\" name=\"pick\" value=\"");
  dlqb_html_text(h, key);
  dlqb_html_raw(h, "\">");
}

/* ---- the preview ------------------------------------------------------ */

typedef struct {
  dlqb_html *h;
  size_t shown;
  dlqb_job_action kind;
} preview_ctx;

static void preview_row(void *ctx, const dlqb_item *it, bool complete, int64_t now_ms) {
  preview_ctx *p = ctx;
  if (p->shown++ >= CONSOLE_LIST_MAX) return;
  dlqb_html *h = p->h;
  uint64_t age = 0;
  char agebuf[32];
  bool known = dlqb_item_age(it, now_ms, &age);
  const dlqb_profile *pr = &console_g.pipeline->profile;
  dlqb_html_raw(h, complete ? "<tr class=\"skip\">" : "<tr>");
  dlqb_html_cell(h, "would", complete ? "skip (complete)" : dlqb_job_action_name(p->kind));
  dlqb_html_cell(h, pr->fields[0].name, it->request_id);
  dlqb_html_cell(h, pr->fields[1].name, it->source_system);
  /* the dsr profile's field: no column elsewhere */
  if (ops_profile_has(pr, DLQB_H_LEGAL_BASIS)) dlqb_html_cell(h, "legal_basis", it->legal_basis);
  dlqb_html_td(h, "age", "num");
  dlqb_html_text(h, ops_age_text(known, age, agebuf, sizeof agebuf));
  dlqb_html_raw(h, "</td>");
  dlqb_html_td(h, "last error", "error-text");
  dlqb_html_text(h, it->last_error[0] ? it->last_error : "-");
  dlqb_html_raw(h, "</td></tr>\n");
}

/* Runs the dry run; rows go to a separate buffer so the summary can lead. */
void console_post_preview(console_req *r) {
  dlqb_job_action kind;
  dlqb_select sel;
  char note[DLQB_LAST_ERROR_MAX + 1];
  if (!action_of(r, &kind) || !note_of(r, kind, note, sizeof note) ||
      !console_selection(r, true, &sel))
    return;
  bool oom;
  dlqb_hashset *picks = picks_of(r, &oom);
  pass_as *o = calloc(1, sizeof *o);
  dlqb_ledger *ledger = kind == DLQB_JOB_REPLAY ? dlqb_ledger_new() : NULL;
  ops_move_outcome *out = malloc(sizeof *out);
  if (oom || o == NULL || out == NULL || (kind == DLQB_JOB_REPLAY && ledger == NULL) ||
      !opts_for(&r->who, &sel, o)) {
    pass_end(o);
    free(o);
    free(out);
    dlqb_ledger_free(ledger);
    dlqb_hashset_free(picks);
    console_error_page(r, 500, "Out of memory", "out of memory");
    return;
  }
  dlqb_html rows = {0};
  preview_ctx pc = {.h = &rows, .kind = kind};
  ops_move_watch w = {.listed = preview_row, .ctx = &pc};
  ops_stamp stamp;
  ops_stamp_init(&stamp, o->actor, note);
  ops_move_spec m;
  dlqb_ledger_stats ls;
  dlqb_error err = {{0}};
  bool ok = true;
  char summary[256];
  if (kind == DLQB_JOB_REPLAY) {
    ops_replay_spec(&m, &stamp, true, 0);
    if (ops_replay_ledger(console_g.cfg, o->broker, console_g.pipeline, true, ledger, &ls, &err) !=
        DLQB_OK)
      ok = false;
    m.ledger = ledger;
  } else if (kind == DLQB_JOB_ESCALATE) {
    ops_escalate_spec(&m, &stamp, true, 0);
  } else {
    ops_resolve_spec(&m, &stamp, true);
  }
  if (picks != NULL) {
    m.only = picked;
    m.only_ctx = picks;
  }
  if (ok) {
    ops_ctx x = pass_context(o);
    ops_move_pass(&x, &m, NULL, &w, NULL, out);
    ok = !out->not_started;
    if (!ok) err = out->err;
  }
  console_broker_free(o->broker); /* wiped: it holds the person's password */
  o->broker = NULL;
  if (!ok) {
    console_error_page(r, 502, "The broker refused the preview", err.msg);
  } else {
    console_page_begin(r, "Preview");
    dlqb_html *h = &r->out;
    dlqb_html_raw(h, "<p class=\"summary\" id=\"preview-summary\">");
    dlqb_html_text(h,
                   ops_move_summary(true, dlqb_job_action_name(kind), out->moved, m.ledger != NULL,
                                    out->skipped, out->left, out->r.depth_at_start,
                                    console_g.pipeline->dlq, summary, sizeof summary));
    dlqb_html_raw(h, "</p>");
    if (out->early[0]) {
      dlqb_html_raw(h, "<p class=\"warn\">");
      dlqb_html_text(h, out->early);
      dlqb_html_raw(h, "</p>");
    }
    if (out->unsettled > 0) {
      char why[sizeof out->unsettled_id + 2 * DLQB_NAME_MAX + 256];
      dlqb_html_raw(h, "<p class=\"warn\" id=\"unsettled\">");
      dlqb_html_text(h, ops_unsettled_text(out, why, sizeof why));
      dlqb_html_raw(h, "</p>");
    }
    if (kind == DLQB_JOB_REPLAY && console_g.cfg->ledger.completion_writers[0] == '\0')
      dlqb_html_raw(h,
                    "<p class=\"warn\">The completion ledger is not trusted "
                    "(completion_writers is not set): every selected task would be replayed.</p>");
    dlqb_html_raw(h, "<table id=\"preview\"><thead><tr><th>would</th>");
    console_identity_th(h);
    if (ops_profile_has(&console_g.pipeline->profile, DLQB_H_LEGAL_BASIS))
      dlqb_html_raw(h, "<th>legal_basis</th>");
    dlqb_html_raw(h, "<th>age</th><th>last error</th></tr></thead><tbody>\n");
    if (rows.data != NULL) dlqb_html_raw(h, rows.data);
    dlqb_html_raw(h, "</tbody></table>");
    if (pc.shown > CONSOLE_LIST_MAX)
      dlqb_html_textf(h, "(%zu more not listed)", pc.shown - CONSOLE_LIST_MAX);
    if (out->moved > 0 || out->skipped > 0) {
      dlqb_html_raw(h, "<form method=\"post\" action=\"/run\" class=\"run\">");
      console_csrf_field(r);
      console_selection_fields(r, true);
      if (picks != NULL) dlqb_hashset_each(picks, pick_field, h);
      dlqb_html_raw(h, "<input type=\"hidden\" name=\"action\" value=\"");
      dlqb_html_text(h, dlqb_job_action_name(kind));
      dlqb_html_raw(h, "\">");
      if (note[0]) {
        dlqb_html_raw(h, "<input type=\"hidden\" name=\"note\" value=\"");
        dlqb_html_text(h, note);
        dlqb_html_raw(h, "\">");
      }
      dlqb_html_raw(h,
                    "<label>rate (items a second, empty = as fast as confirms allow) "
                    "<input name=\"rate\" id=\"rate\" inputmode=\"numeric\" value=\"50\"></label> "
                    "<button type=\"submit\" id=\"run\">Run ");
      dlqb_html_text(h, dlqb_job_action_name(kind));
      dlqb_html_raw(h, "</button></form><p class=\"note\">The run takes what the selection "
                       "matches then: items that arrive after this preview and match are "
                       "included; --limit style caps are not.</p>");
    }
    console_page_end(r);
  }
  dlqb_html_free(&rows);
  dlqb_ledger_free(ledger);
  dlqb_hashset_free(picks);
  pass_end(o);
  free(o);
  free(out);
}

/* ---- jobs ------------------------------------------------------------- */

/* The page's counts from a pass's progress. Call with the lock held. */
static void job_counts(job *j, const dlqb_scan_result *r) {
  j->rec.total = r->depth_at_start;
  j->rec.examined = r->examined;
  j->rec.moved = r->forwarded;
  j->rec.removed = r->removed;
  j->rec.left_in_place = r->held;
}

/* Each hop as its original is acked: the page's counts move with the
 * broker, not once a tick (job_tick sets them from the pass's own counts
 * each second, which also puts right a copy an earlier pass had made). */
static void job_acked(void *ctx, const dlqb_hop *hop) {
  job *j = ctx;
  pthread_mutex_lock(&lock);
  if (hop->to[0] != '\0') j->rec.moved++;
  else j->rec.removed++;
  pthread_mutex_unlock(&lock);
}

static void job_tick(void *ctx, const dlqb_scan_result *r) {
  job *j = ctx;
  pthread_mutex_lock(&lock);
  job_counts(j, r);
  pthread_mutex_unlock(&lock);
  jobs_save(false);
}

static void job_fail(job *j, const char *msg) {
  pthread_mutex_lock(&lock);
  j->rec.state = DLQB_JOB_FAILED;
  snprintf(j->rec.error, sizeof j->rec.error, "%s", msg);
  pthread_mutex_unlock(&lock);
}

static void *job_main(void *arg) {
  job *j = arg;
  pass_as *o = calloc(1, sizeof *o);
  ops_move_outcome *out = calloc(1, sizeof *out);
  ops_session *session = NULL;
  dlqb_error err = {{0}};
  /* Set before the thread started, never changed: read without the lock. */
  const dlqb_job_action kind = j->rec.action;
  if (o == NULL || out == NULL) {
    job_fail(j, "out of memory");
    goto end;
  }
  if (!opts_for(&j->who, &j->sel, o)) {
    job_fail(j, "out of memory");
    goto end;
  }
  char writer[400];
  snprintf(writer, sizeof writer, "console@%s", console_g.cfg->instance);
  /* The trail first: one that cannot be written (or none configured: the
   * console has no way to act unrecorded) stops the job before anything
   * moves. */
  ops_session_opts so = {.cfg = console_g.cfg, .broker = o->broker, .writer = writer};
  if (ops_session_open(&so, &session, &err) != DLQB_OK) {
    job_fail(j, err.msg);
    goto end;
  }
  ops_move_spec m;
  if (kind == DLQB_JOB_REPLAY) {
    ops_replay_spec(&m, &j->stamp, false, j->rec.rate);
    /* The whole ledger, or no replay: a partial one could re-run a
     * completed erasure. */
    if (ops_session_ledger(session, console_g.pipeline, false, &m.ledger, &m.ledger_stats, &err) !=
        DLQB_OK) {
      job_fail(j, err.msg);
      goto end;
    }
  } else if (kind == DLQB_JOB_ESCALATE) {
    ops_escalate_spec(&m, &j->stamp, false, j->rec.rate);
  } else {
    ops_resolve_spec(&m, &j->stamp, false);
  }
  if (j->picks != NULL) {
    m.only = picked;
    m.only_ctx = j->picks;
  }
  ops_move_watch w = {.acked = job_acked, .tick = job_tick, .ctx = j};
  ops_ctx x = pass_context(o);
  ops_move_pass(&x, &m, ops_session_audit(session), &w, &j->stop, out);
  pthread_mutex_lock(&lock);
  dlqb_job_record *rec = &j->rec;
  job_counts(j, &out->r);
  ops_move_summary(false, act_done[kind], out->moved, m.ledger != NULL, out->skipped, out->left,
                   out->r.depth_at_start, console_g.pipeline->dlq, rec->summary,
                   sizeof rec->summary);
  rec->state = DLQB_JOB_DONE;
  if (out->not_started) {
    rec->state = DLQB_JOB_FAILED;
    snprintf(rec->error, sizeof rec->error, "%s", out->err.msg);
  } else if (out->early[0]) {
    rec->state = DLQB_JOB_FAILED;
    if (out->r.interrupted && j->stopped_by[0]) {
      snprintf(rec->error, sizeof rec->error, "stopped by %s: %s", j->stopped_by, out->early);
    } else if (out->r.interrupted && shutting_down && out->status == DLQB_OK &&
               !out->r.audit_failed) {
      /* Cut short by the console's own stop, not by a failure. */
      rec->state = DLQB_JOB_INTERRUPTED;
      snprintf(rec->error, sizeof rec->error,
               "interrupted: the console was stopped; what was in flight completed, the rest "
               "was left in %s, untouched",
               console_g.pipeline->dlq);
    } else {
      snprintf(rec->error, sizeof rec->error, "%s", out->early);
    }
  } else if (out->unsettled > 0) {
    rec->state = DLQB_JOB_FAILED;
    ops_unsettled_text(out, rec->error, sizeof rec->error);
  } else if (out->r.refused > 0) {
    rec->state = DLQB_JOB_FAILED;
    snprintf(rec->error, sizeof rec->error,
             "%llu selected items left in %s: the broker would not "
             "take them as they are",
             (unsigned long long)out->r.refused, console_g.pipeline->dlq);
  }
  pthread_mutex_unlock(&lock);
end:
  ops_session_close(session);
  pass_end(o);
  free(o);
  free(out);
  pthread_mutex_lock(&lock);
  explicit_bzero(j->who.password, sizeof j->who.password);
  dlqb_hashset_free(j->picks);
  j->picks = NULL;
  j->rec.ended_ms = dlqb_now_ms();
  pthread_mutex_unlock(&lock);
  jobs_save(true);
  pthread_mutex_lock(&lock);
  j->busy = false;
  pthread_mutex_unlock(&lock);
  return NULL;
}

/* A slot for a new job: an unused one, else the one of the oldest ended
 * job (so the job file keeps the last JOBS); NULL when all run. Call with
 * the lock held. */
static job *free_slot(void) {
  job *oldest = NULL;
  for (size_t i = 0; i < JOBS; i++) {
    job *j = &jobs[i];
    if (!j->used) return j;
    if (!j->busy && j->rec.state != DLQB_JOB_RUNNING &&
        (oldest == NULL || j->rec.id < oldest->rec.id))
      oldest = j;
  }
  return oldest;
}

void console_post_run(console_req *r) {
  dlqb_job_action kind;
  dlqb_select sel;
  char note[DLQB_LAST_ERROR_MAX + 1], rate_text[32] = "";
  if (!action_of(r, &kind) || !note_of(r, kind, note, sizeof note) ||
      !console_selection(r, true, &sel))
    return;
  double rate = 0;
  bool oom;
  dlqb_hashset *picks = picks_of(r, &oom);
  if (oom) {
    console_error_page(r, 500, "Out of memory", "out of memory");
    return;
  }
  console_form(r, "rate", rate_text, sizeof rate_text);
  if (rate_text[0] != '\0') {
    char *end;
    rate = strtod(rate_text, &end);
    if (*end != '\0' || !(rate >= 1) || rate > OPS_RATE_MAX) {
      char msg[128];
      snprintf(msg, sizeof msg, "The rate must be a number from 1 to %d items a second, or empty.",
               OPS_RATE_MAX);
      console_error_page(r, 400, "Bad rate", msg);
      dlqb_hashset_free(picks);
      return;
    }
  }
  pthread_mutex_lock(&lock);
  job *j = free_slot();
  if (j == NULL || shutting_down) {
    pthread_mutex_unlock(&lock);
    console_error_page(r, 503, "Busy", "Too many actions are running; wait for one to end.");
    dlqb_hashset_free(picks);
    return;
  }
  if (j->joinable) pthread_join(j->thread, NULL);
  memset(j, 0, sizeof *j);
  j->used = true;
  j->busy = true;
  dlqb_job_record *rec = &j->rec;
  rec->id = next_id++;
  rec->action = kind;
  rec->state = DLQB_JOB_RUNNING;
  snprintf(rec->user, sizeof rec->user, "%s", r->who.user);
  rec->rate = rate;
  rec->started_ms = dlqb_now_ms();
  j->who = r->who;
  j->sel = sel;
  atomic_store(&j->stop, 0);
  ops_stamp_init(&j->stamp, r->who.user, note);
  dlqb_html words = {0};
  console_selection_words(r, true, &words);
  if (picks != NULL)
    dlqb_html_textf(&words, "; only the %zu checked item%s", dlqb_hashset_size(picks),
                    dlqb_hashset_size(picks) == 1 ? "" : "s");
  snprintf(rec->selection, sizeof rec->selection, "%s", words.data ? words.data : "");
  j->picks = picks;
  dlqb_html_free(&words);
  unsigned id = rec->id;
  /* Its pass decodes broker frames: the frame-reading stack (dlqb/thread.h). */
  j->joinable = dlqb_thread_start(&j->thread, job_main, j) == 0;
  if (!j->joinable) {
    j->busy = false;
    rec->state = DLQB_JOB_FAILED;
    rec->ended_ms = rec->started_ms;
    snprintf(rec->error, sizeof rec->error, "cannot start a thread");
    explicit_bzero(j->who.password, sizeof j->who.password);
    dlqb_hashset_free(j->picks);
    j->picks = NULL;
  }
  pthread_mutex_unlock(&lock);
  /* Its start is on disk before the person sees its page. */
  jobs_save(true);
  r->status = 303;
  snprintf(r->location, sizeof r->location, "/job?id=%u", id);
}

/* The job whose number is the text idt (a request's id), or NULL: an
 * empty or non-numeric id names none. Call with the lock held. */
static job *job_named(const char *idt) {
  char *end;
  unsigned long id = strtoul(idt, &end, 10);
  if (idt[0] == '\0' || *end != '\0') return NULL;
  for (size_t i = 0; i < JOBS; i++)
    if (jobs[i].used && jobs[i].rec.id == id) return &jobs[i];
  return NULL;
}

/* The record of the job of ?id=, copied under the lock; false with a page
 * written. */
static bool find_job(console_req *r, dlqb_job_record *copy, bool json) {
  char idt[16] = "";
  console_arg(r, "id", idt, sizeof idt);
  pthread_mutex_lock(&lock);
  const job *j = job_named(idt);
  bool found = j != NULL;
  if (found) *copy = j->rec;
  pthread_mutex_unlock(&lock);
  if (!found) {
    if (json) {
      r->status = 404;
      r->content_type = "application/json";
      dlqb_html_raw(&r->out, "{\"error\":\"no such job\"}");
    } else {
      console_error_page(r, 404, "No such action",
                         "No action with this number (the console keeps the last 64, in "
                         "console_jobs_file).");
    }
  }
  return found;
}
/* Read and not yet settled (copies awaiting their confirm, items waiting
 * for the rate): without it "moved: 0" sat still while "examined" rose. */
static uint64_t job_in_flight(const dlqb_job_record *j) {
  uint64_t settled = j->moved + j->removed + j->left_in_place;
  return j->state == DLQB_JOB_RUNNING && j->examined > settled ? j->examined - settled : 0;
}

void console_json_job(console_req *r) {
  dlqb_job_record *j = malloc(sizeof *j);
  if (j == NULL) return;
  if (find_job(r, j, true)) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_int64(j->id));
    json_object_object_add(o, "action", json_object_new_string(dlqb_job_action_name(j->action)));
    json_object_object_add(o, "state", json_object_new_string(dlqb_job_state_name(j->state)));
    json_object_object_add(o, "total", json_object_new_int64((int64_t)j->total));
    json_object_object_add(o, "examined", json_object_new_int64((int64_t)j->examined));
    json_object_object_add(o, "moved", json_object_new_int64((int64_t)j->moved));
    json_object_object_add(o, "removed", json_object_new_int64((int64_t)j->removed));
    json_object_object_add(o, "left_in_place", json_object_new_int64((int64_t)j->left_in_place));
    json_object_object_add(o, "in_flight", json_object_new_int64((int64_t)job_in_flight(j)));
    json_object_object_add(o, "summary", json_object_new_string(j->summary));
    json_object_object_add(o, "error", json_object_new_string(j->error));
    r->content_type = "application/json";
    /* json-c escapes every string; '/' too by default, so "</script>"
     * cannot close anything even if the text were ever embedded. */
    dlqb_html_raw(&r->out, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
  }
  free(j);
}

static void count_line(dlqb_html *h, const char *id, const char *label, uint64_t n) {
  dlqb_html_raw(h, "<div class=\"count\"><span class=\"label\">");
  dlqb_html_text(h, label);
  dlqb_html_raw(h, "</span> <span id=\"");
  dlqb_html_raw(h, id);
  dlqb_html_raw(h, "\">");
  dlqb_html_textf(h, "%llu", (unsigned long long)n);
  dlqb_html_raw(h, "</span></div>");
}

void console_page_job(console_req *r) {
  dlqb_job_record *j = malloc(sizeof *j);
  if (j == NULL) return;
  if (!find_job(r, j, false)) {
    free(j);
    return;
  }
  char title[64];
  snprintf(title, sizeof title, "Action %u: %s", j->id, dlqb_job_action_name(j->action));
  console_page_begin(r, title);
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<p>Selection: ");
  dlqb_html_text(h, j->selection);
  dlqb_html_raw(h, "; by broker user ");
  dlqb_html_text(h, j->user);
  if (j->rate > 0) dlqb_html_textf(h, ", at most %g a second", j->rate);
  dlqb_html_raw(h, ".</p><div id=\"progress\" data-job=\"");
  dlqb_html_textf(h, "%u", j->id);
  dlqb_html_raw(h, "\"><p>State: <b id=\"state\">");
  dlqb_html_text(h, dlqb_job_state_name(j->state));
  dlqb_html_raw(h, "</b></p><progress id=\"bar\" max=\"");
  dlqb_html_textf(h, "%llu", (unsigned long long)(j->total ? j->total : 1));
  dlqb_html_raw(h, "\" value=\"");
  dlqb_html_textf(h, "%llu", (unsigned long long)j->examined);
  dlqb_html_raw(h, "\"></progress>");
  count_line(h, "examined", "examined", j->examined);
  count_line(h, "total", "in the DLQ at the start", j->total);
  count_line(h, "moved", "moved", j->moved);
  count_line(h, "removed", "removed (skipped as complete, or resolved)", j->removed);
  count_line(h, "in-flight", "in flight (read, not yet settled)", job_in_flight(j));
  dlqb_html_raw(h, "<p class=\"summary\" id=\"summary\">");
  dlqb_html_text(h, j->summary);
  dlqb_html_raw(h, "</p><p class=\"error\" id=\"job-error\">");
  dlqb_html_text(h, j->error);
  dlqb_html_raw(h, "</p></div>");
  if (j->state == DLQB_JOB_RUNNING) {
    /* What is in flight completes; the rest stays in the DLQ, untouched. */
    dlqb_html_raw(h, "<form method=\"post\" action=\"/stop\" id=\"stop-form\">");
    console_csrf_field(r);
    dlqb_html_raw(h, "<input type=\"hidden\" name=\"id\" value=\"");
    dlqb_html_textf(h, "%u", j->id);
    dlqb_html_raw(h, "\"><button type=\"submit\" id=\"stop\">Stop</button></form>");
  }
  dlqb_html_raw(h, "<p><a href=\"/\">Back to the failure groups</a></p>");
  console_page_end(r);
  free(j);
}

void console_page_jobs(console_req *r) {
  console_page_begin(r, "Actions");
  dlqb_html *h = &r->out;
  dlqb_html_raw(h, "<table id=\"jobs\"><thead><tr><th>#</th><th>action</th><th>by</th>"
                   "<th>selection</th><th>state</th><th>result</th></tr></thead><tbody>");
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < JOBS; i++) {
    const dlqb_job_record *j = &jobs[i].rec;
    if (!jobs[i].used) continue;
    dlqb_html_raw(h, "<tr>");
    dlqb_html_td(h, "#", NULL);
    dlqb_html_raw(h, "<a href=\"/job?id=");
    dlqb_html_textf(h, "%u", j->id);
    dlqb_html_raw(h, "\">");
    dlqb_html_textf(h, "%u", j->id);
    dlqb_html_raw(h, "</a></td>");
    dlqb_html_cell(h, "action", dlqb_job_action_name(j->action));
    dlqb_html_cell(h, "by", j->user);
    dlqb_html_cell(h, "selection", j->selection);
    dlqb_html_td(h, "state", "state");
    dlqb_html_text(h, dlqb_job_state_name(j->state));
    dlqb_html_raw(h, "</td>");
    dlqb_html_cell(h, "result", j->error[0] ? j->error : j->summary);
    dlqb_html_raw(h, "</tr>");
  }
  pthread_mutex_unlock(&lock);
  dlqb_html_raw(h, "</tbody></table>");
  console_page_end(r);
}

void console_post_stop(console_req *r) {
  char idt[16] = "";
  console_form(r, "id", idt, sizeof idt);
  pthread_mutex_lock(&lock);
  job *j = job_named(idt);
  unsigned id = j != NULL ? j->rec.id : 0;
  /* Only a running pass stops; an ended or interrupted job stays as it is
   * (nothing ever resumes one). */
  if (j != NULL && j->rec.state == DLQB_JOB_RUNNING && j->joinable) {
    snprintf(j->stopped_by, sizeof j->stopped_by, "%s", r->who.user);
    atomic_store(&j->stop, 1);
  }
  pthread_mutex_unlock(&lock);
  if (j == NULL) {
    console_error_page(r, 404, "No such action", "No action with this number.");
    return;
  }
  r->status = 303;
  snprintf(r->location, sizeof r->location, "/job?id=%u", id);
}

void console_jobs_shutdown(void) {
  pthread_mutex_lock(&lock);
  shutting_down = true;
  for (size_t i = 0; i < JOBS; i++) atomic_store(&jobs[i].stop, 1);
  pthread_mutex_unlock(&lock);
  for (size_t i = 0; i < JOBS; i++) {
    pthread_mutex_lock(&lock);
    bool join = jobs[i].joinable;
    jobs[i].joinable = false;
    pthread_t t = jobs[i].thread;
    pthread_mutex_unlock(&lock);
    if (join) pthread_join(t, NULL);
  }
}

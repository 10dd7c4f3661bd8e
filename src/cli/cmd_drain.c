/* dlq-bridge drain: replay what the drain policy calls transient, on a
 * schedule (a systemd timer runs `drain run`), canary first, then ramping,
 * stopping when what it moved fails again (issue 23). The decisions are
 * the pure ramp in core/drain.c; the moves are replay's own pass
 * (cli_move_run: the ledger respected, confirm before ack, audited);
 * this file connects them, watches the outcomes and records the runs.
 *
 * A command of its own rather than a thread of `run`: it runs as its own
 * least-privilege broker user, a crash cannot touch the routing daemon,
 * and a timer gives it its schedule. Two hosts with the same timer take
 * one broker-side lease (dlqb/lease.h): the second says so and exits 0.
 *
 * How an outcome is seen, without disturbing anything: a moved item is
 * complete when its (request_id, source_system) is in the ledger (only
 * completion_writers' entries count); it failed again when the copy this
 * run moved is back in the DLQ, or in compliance_review (max_replays
 * escalated it): the same message_id, the replay_count and replay stamp
 * this run wrote (observe). Looking at them counts a delivery of each item
 * against a limit no read reaches (docs/architecture.md). Retry queues are
 * never read: a quorum queue counts a
 * delivery that was only held against its delivery limit on 4.x
 * (tests/broker/test_poison.c); an item still retrying is simply not yet
 * complete, and the canary timeout bounds the wait. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"
#include "dlqb/calendar.h"
#include "dlqb/clock.h"
#include "dlqb/drain.h"
#include "dlqb/file.h"
#include "dlqb/hashset.h"
#include "dlqb/lease.h"
#include "dlqb/ledger.h"
#include "dlqb/log.h"
#include "dlqb/rewrite.h"
#include "dlqb/text.h"
#include "dlqb/topology.h"
#include "ops_cli.h"

#define LEASE_QUEUE     "dsr.drain.lease"
#define LEDGER_IDLE_MS  10000
#define LEDGER_QUIET_MS 1000
/* Between two looks at the canary's outcomes. */
#define POLL_US 1000000
/* Runs drain status keeps and shows. */
#define RUNS_KEPT 50
#define ACTOR     "drain"
/* Exit code of a run that found another drain holding the lease. */
#define EXIT_LEASE_HELD EXIT_OK

#define DRAIN_SETTINGS                                                                             \
  "drain_reasons", "drain_sources", "drain_errors", "drain_groups", "drain_canary",                \
      "drain_canary_timeout", "drain_start_rate", "drain_step_factor", "drain_max_rate",           \
      "drain_step", "drain_failure_threshold", "drain_failure_window", "drain_max_items",          \
      "drain_state", "drain_textfile"

static const cli_flag run_flags[] = {
    {"dry-run", false, NULL, "list what the next run would take; move and write nothing"},
    CLI_WIDE_FLAG,
    CLI_OUTPUT_FLAGS,
    CLI_NO_AUDIT_FLAG,
    {NULL, false, NULL, NULL},
};

static const cli_spec run_spec = {
    .name = "drain run",
    .summary = "replay eligible DLQ items: a canary, then a ramp, stopping on re-failures",
    .usage = "dlq-bridge drain run [--dry-run] [--json]",
    .details =
        "Replays the DLQ items the drain policy makes eligible (drain_reasons,\n"
        "drain_sources, drain_errors) as `replay` does (ledger respected, confirm\n"
        "before ack, audited with actor 'drain'). First a canary of drain_canary items at\n"
        "drain_start_rate a second; it waits until each is complete in the ledger, or\n"
        "stops the run when one fails again (the copy it moved, by its message_id\n"
        "and the drain's replay stamp, back in the DLQ or escalated) or when\n"
        "drain_canary_timeout passes. Then steps of drain_step, each drain_step_factor\n"
        "times faster up to drain_max_rate, until nothing eligible is left, drain_max_items\n"
        "moved, or drain_failure_threshold moved items failed again within\n"
        "drain_failure_window. What is not moved stays in the DLQ, in order.\n"
        "One run at a time: a run holds the broker-side lease dsr.drain.lease (an\n"
        "exclusive queue, gone with its connection); a second run says\n"
        "'another drain holds the lease' and exits 0. Each run is recorded in\n"
        "drain_state (read by `drain status`) and, when set, drain_textfile, when it\n"
        "starts (running) and when it ends; a killed run's row shows as killed.\n"
        "Exit 0 when drained or at drain_max_items; 1 when it stopped on failures\n"
        "(canary failed or timed out, re-failures), on an error or a signal.\n"
        "Another pipeline than dsr (--pipeline NAME) has its own lease NAME.drain.lease\n"
        "and its own files (the name before the extension: drain-state.NAME.json).\n"
        "Needs completion_writers: without a trusted ledger no canary can complete.",
    .flags = run_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_LOG, CLI_USES_AUDIT, "ledger_cache",
                                  "completion_writers", DRAIN_SETTINGS, CLI_USES_CATALOG, NULL},
};

static const cli_flag status_flags[] = {
    {"json", false, NULL, "print JSON for scripts instead of text"},
    {"last", true, "N", "show the last N runs (default 10)"},
    {NULL, false, NULL, NULL},
};

static const cli_spec status_spec = {
    .name = "drain status",
    .summary = "the last drain runs: what each moved, the canary, why it stopped",
    .usage = "dlq-bridge drain status [--last N] [--json]",
    .details = "Reads drain_state, the record drain run keeps of its last runs (newest first).",
    .flags = status_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_LOG, "drain_state", NULL},
};

/* ---- what one run follows --------------------------------------------- */

enum { T_CANDIDATE, T_MOVED, T_COMPLETED, T_FAILED };

typedef struct {
  int64_t replay_after; /* its replay_count once replayed */
  int state;
  bool canary;
  char message_id[sizeof((dlqb_hop *)0)->message_id]; /* of the copy this run moved */
} tracked;

typedef struct {
  cli_opts o;
  ops_stamp stamp; /* actor "drain", the run's start: replay's stamp */
  dlqb_drain_ramp ramp;
  dlqb_hashset *seen; /* (request_id, source_system) -> tracked */
  dlqb_ledger *ledger;
  uint64_t skipped, canary_moved;
  uint64_t pass_limit, pass_taken; /* the current step's size, and what it took */
  dlqb_lease *lease;
  char broker_user[128];
  char error[DLQB_ERROR_MAX + 256];
} drain_run;

/* The identity (the served profile's fields[0] NUL fields[1]; dsr:
 * request_id NUL source_system): the key the ledger uses too. */
static size_t task_key(char *buf, size_t cap, const char *request_id, const char *source) {
  size_t a = strlen(request_id), b = strlen(source);
  if (a + 1 + b > cap) return 0;
  memcpy(buf, request_id, a);
  buf[a] = '\0';
  memcpy(buf + a + 1, source, b);
  return a + 1 + b;
}

/* An item of this run's identity seen again in the DLQ or the review
 * queue: failed again only when it is the copy this run moved, by what the
 * run itself wrote on it: the message_id of the hop it recorded, the
 * replay_count it set and its replay stamp (replayed_at, this run's start
 * to the millisecond). An identity is no proof: any producer can publish
 * an item with a canary's request_id and any replay_count, and a copy that
 * was there before the replay has neither the count nor the stamp. */
static void observe(drain_run *d, tracked *t, const dlqb_item *it) {
  if (t->state != T_MOVED) return;
  if (strcmp(it->message_id, t->message_id) != 0 || it->replay_count != t->replay_after ||
      strcmp(it->replayed_at, d->stamp.now) != 0)
    return;
  t->state = T_FAILED;
  if (!t->canary) dlqb_drain_refailed(&d->ramp, dlqb_mono_ms());
}

static bool drain_eligible(void *ctx, const dlqb_item *it) {
  drain_run *d = ctx;
  char key[2 * DLQB_ID_MAX + 2];
  size_t n = task_key(key, sizeof key, it->request_id, it->source_system);
  if (n == 0 || it->request_id[0] == '\0' || it->source_system[0] == '\0') return false;
  tracked *t = dlqb_hashset_get(d->seen, key, n);
  if (t != NULL && t->state != T_CANDIDATE) {
    /* Never twice in one run: what came back is an outcome, not work. */
    observe(d, t, it);
    return false;
  }
  if (d->ramp.phase == DLQB_DRAIN_PH_END || !dlqb_drain_eligible(d->o.cfg, it)) return false;
  /* The step's size is counted here, not only by --limit behind us, so
   * that the set holds what the run moves, not every eligible item of a
   * deep DLQ. A task in the ledger is removed as complete and does not
   * count, as with --limit. */
  bool complete = dlqb_ledger_contains(d->ledger, it->request_id, it->source_system);
  if (!complete && d->pass_taken >= d->pass_limit) return false;
  if (complete) return true;
  d->pass_taken++;
  if (t == NULL) {
    bool added;
    t = dlqb_hashset_add(d->seen, key, n, &added);
    if (t == NULL) return false; /* out of memory: leave it */
  }
  t->replay_after =
      it->replay_count >= DLQB_ENVELOPE_COUNT_MAX ? DLQB_ENVELOPE_COUNT_MAX : it->replay_count + 1;
  t->state = T_CANDIDATE;
  t->canary = d->ramp.phase == DLQB_DRAIN_PH_CANARY;
  return true;
}

static void drain_moved(void *ctx, const dlqb_hop *hop) {
  drain_run *d = ctx;
  if (hop->event == DLQB_EV_SKIPPED_COMPLETE) return; /* done already, not moved */
  char key[2 * DLQB_ID_MAX + 2];
  size_t n = task_key(key, sizeof key, hop->request_id, hop->source_system);
  tracked *t = n > 0 ? dlqb_hashset_get(d->seen, key, n) : NULL;
  if (t == NULL) return;
  if (t->state == T_CANDIDATE && t->canary) d->canary_moved++;
  t->state = T_MOVED;
  snprintf(t->message_id, sizeof t->message_id, "%s", hop->message_id);
  if (d->broker_user[0] == '\0')
    snprintf(d->broker_user, sizeof d->broker_user, "%s", hop->broker_user);
}

/* Replay's move (dsr.work, attempts reset, replay_count + 1, stamped by
 * the drain), under the drain's name and policy. */
static void drain_spec(drain_run *d, ops_move_spec *m, bool dry_run, double rate) {
  ops_replay_spec(m, &d->stamp, dry_run, rate);
  m->command = "drain";
  m->ledger = d->ledger;
  m->only = drain_eligible;
  m->only_ctx = d;
}

/* ---- looking at outcomes ---------------------------------------------- */

static dlqb_status look_item(void *ctx, const dlqb_item *it, const dlqb_delivery *dv, bool *enough,
                             dlqb_error *err) {
  (void)dv, (void)enough, (void)err;
  drain_run *d = ctx;
  char key[2 * DLQB_ID_MAX + 2];
  size_t n = task_key(key, sizeof key, it->request_id, it->source_system);
  tracked *t = n > 0 ? dlqb_hashset_get(d->seen, key, n) : NULL;
  if (t != NULL) observe(d, t, it);
  return DLQB_OK;
}

/* A look at a DLQ or review queue (nothing moves). */
static dlqb_status look_queue(drain_run *d, const char *queue, dlqb_error *err) {
  ops_look look = {.queue = queue,
                   .source = OPS_LOOK_CATALOG,
                   .purpose = "dlq-bridge drain (looking)",
                   .actor = ACTOR,
                   .window = d->o.window,
                   .stop = cli_stop_flag(),
                   .on_item = look_item,
                   .ctx = d};
  return ops_look_run(d->o.cfg, &look, err);
}

typedef struct {
  drain_run *d;
  uint64_t completed, failed;
} tally_ctx;

static void tally(void *ctx, const char *key, size_t len, void *value) {
  tally_ctx *c = ctx;
  tracked *t = value;
  if (!t->canary) return;
  if (t->state == T_MOVED && len > 0 &&
      dlqb_ledger_contains(c->d->ledger, key, key + strlen(key) + 1))
    t->state = T_COMPLETED;
  if (t->state == T_COMPLETED) c->completed++;
  if (t->state == T_FAILED) c->failed++;
}

/* The canary's outcomes so far, into the ramp. */
static dlqb_status look_canary(drain_run *d, dlqb_error *err) {
  dlqb_ledger_stats ls;
  dlqb_status st = dlqb_ledger_peek(d->o.cfg, NULL, cli_pipeline()->completed,
                                    d->o.cfg->ledger.cache, d->ledger, LEDGER_QUIET_MS, &ls, err);
  if (st == DLQB_OK) st = look_queue(d, cli_pipeline()->dlq, err);
  if (st == DLQB_OK) st = look_queue(d, cli_pipeline()->review, err);
  if (st != DLQB_OK) return st;
  tally_ctx c = {d, 0, 0};
  dlqb_hashset_each(d->seen, tally, &c);
  dlqb_drain_canary(&d->ramp, c.completed, c.failed);
  return DLQB_OK;
}

/* ---- the record of runs ----------------------------------------------- */

static json_object *run_json(const drain_run *d, int64_t started, int64_t ended) {
  char iso[DLQB_ISO_TIME_MAX];
  const dlqb_drain_ramp *r = &d->ramp;
  json_object *j = json_object_new_object();
  json_object_object_add(j, "started_at",
                         json_object_new_string(dlqb_iso_time(started, iso, sizeof iso)));
  /* ended 0: the row a run writes when it starts (stopped "running"). */
  json_object_object_add(j, "ended_at",
                         ended != 0 ? json_object_new_string(dlqb_iso_time(ended, iso, sizeof iso))
                                    : NULL);
  json_object_object_add(j, "instance", json_object_new_string(d->o.cfg->instance));
  json_object_object_add(j, "broker_user", json_object_new_string(d->broker_user));
  json_object_object_add(j, "stopped", json_object_new_string(dlqb_drain_stop_name(r->stop)));
  json_object_object_add(j, "error", d->error[0] ? json_object_new_string(d->error) : NULL);
  json_object_object_add(j, "moved", json_object_new_int64((int64_t)r->moved));
  json_object_object_add(j, "skipped_complete", json_object_new_int64((int64_t)d->skipped));
  json_object *c = json_object_new_object();
  json_object_object_add(c, "moved", json_object_new_int64((int64_t)r->canary_moved));
  json_object_object_add(c, "completed", json_object_new_int64((int64_t)r->canary_completed));
  json_object_object_add(c, "failed", json_object_new_int64((int64_t)r->canary_failed));
  json_object_object_add(j, "canary", c);
  json_object_object_add(j, "steps", json_object_new_int(r->step));
  json_object_object_add(j, "last_rate", json_object_new_double(r->rate));
  json_object_object_add(j, "refailures", json_object_new_int64((int64_t)r->refailures));
  return j;
}

/* The runs recorded so far: a new array when there is no file yet; NULL,
 * with why in err, when it cannot be read or is not a drain state. */
static json_object *read_runs(const char *path, dlqb_error *err) {
  char *buf = NULL;
  size_t cap = 0, len = 0;
  if (path[0] == '\0') return json_object_new_array();
  if (!dlqb_read_file(path, &buf, &cap, &len)) {
    char e[DLQB_ERRNO_TEXT_MAX];
    dlqb_fail(err, DLQB_EIO, "cannot read the drain state '%s': %s", path,
              dlqb_errno_text(errno, e, sizeof e));
    return NULL;
  }
  json_object *runs = NULL;
  if (len == 0) runs = json_object_new_array();
  else {
    json_object *doc = json_tokener_parse(buf);
    json_object *a;
    if (doc != NULL && json_object_object_get_ex(doc, "runs", &a) &&
        json_object_is_type(a, json_type_array))
      runs = json_object_get(a);
    json_object_put(doc);
    if (runs == NULL)
      dlqb_fail(err, DLQB_EINVAL, "the drain state '%s' is not a drain state file", path);
  }
  free(buf);
  return runs;
}

static bool same_str(json_object *a, json_object *b, const char *key) {
  json_object *x, *y;
  return json_object_object_get_ex(a, key, &x) && json_object_object_get_ex(b, key, &y) &&
         json_object_is_type(x, json_type_string) && json_object_is_type(y, json_type_string) &&
         strcmp(json_object_get_string(x), json_object_get_string(y)) == 0;
}

static bool stopped_is(json_object *row, const char *what) {
  json_object *v;
  return json_object_object_get_ex(row, "stopped", &v) &&
         json_object_is_type(v, json_type_string) && strcmp(json_object_get_string(v), what) == 0;
}

/* Puts this run's row first: written when it starts (stopped "running",
 * no end), replaced when it ends. A run that never ended (SIGKILL, a
 * crash, a power cut) leaves its "running" row; the next run, which holds
 * the lease, so that no other run can be going on, calls it "killed". */
static void record_run(const drain_run *d, json_object *run) {
  const char *path = d->o.cfg->drain.state;
  if (path[0] == '\0') return;
  dlqb_error err;
  json_object *old = read_runs(path, &err);
  if (old == NULL) {
    /* Start afresh rather than lose this run's record. */
    dlqb_log_warn("drain", "%s: starting it again", err.msg);
    old = json_object_new_array();
  }
  json_object *runs = json_object_new_array();
  json_object_array_add(runs, json_object_get(run));
  for (size_t i = 0;
       i < json_object_array_length(old) && json_object_array_length(runs) < RUNS_KEPT; i++) {
    json_object *row = json_object_array_get_idx(old, i);
    if (same_str(row, run, "started_at") && same_str(row, run, "instance")) continue; /* ours */
    if (stopped_is(row, "running")) {
      /* Another run's start row: it was killed (we hold the lease). */
      json_object *dead = NULL;
      if (json_object_deep_copy(row, &dead, NULL) == 0) {
        json_object_object_add(dead, "stopped", json_object_new_string("killed"));
        json_object_array_add(runs, dead);
        continue;
      }
    }
    json_object_array_add(runs, json_object_get(row));
  }
  json_object_put(old);
  json_object *doc = json_object_new_object();
  json_object_object_add(doc, "runs", runs);
  const char *text = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PRETTY);
  if (dlqb_file_replace(path, text, strlen(text), "the drain state", &err) != DLQB_OK)
    dlqb_log_warn("drain", "%s", err.msg);
  json_object_put(doc);
}

/* node_exporter's textfile collector reads *.prom; written whole, when a
 * run starts (running 1, "the last run" is this one, ended at its start,
 * stopped "running") and when it ends. A killed run leaves running 1. */
static void write_textfile(const drain_run *d, int64_t started, int64_t ended) {
  const char *path = d->o.cfg->drain.textfile;
  if (path[0] == '\0') return;
  const dlqb_drain_ramp *r = &d->ramp;
  char text[4096];
  int n = snprintf(
      text, sizeof text,
      "# HELP dlq_bridge_drain_running 1 from a drain run's start to its end (a killed run "
      "leaves 1).\n"
      "# TYPE dlq_bridge_drain_running gauge\n"
      "dlq_bridge_drain_running %d\n"
      "# HELP dlq_bridge_drain_run_started_timestamp_seconds When the last drain run started.\n"
      "# TYPE dlq_bridge_drain_run_started_timestamp_seconds gauge\n"
      "dlq_bridge_drain_run_started_timestamp_seconds %lld\n"
      "# HELP dlq_bridge_drain_last_run_timestamp_seconds When the last drain run ended (while "
      "one runs: when it started).\n"
      "# TYPE dlq_bridge_drain_last_run_timestamp_seconds gauge\n"
      "dlq_bridge_drain_last_run_timestamp_seconds %lld\n"
      "# HELP dlq_bridge_drain_last_run_moved Items the last drain run replayed.\n"
      "# TYPE dlq_bridge_drain_last_run_moved gauge\n"
      "dlq_bridge_drain_last_run_moved %llu\n"
      "# HELP dlq_bridge_drain_last_run_refailures Items the last run moved seen failing again.\n"
      "# TYPE dlq_bridge_drain_last_run_refailures gauge\n"
      "dlq_bridge_drain_last_run_refailures %llu\n"
      "# HELP dlq_bridge_drain_last_run_canary_failed Canary items of the last run that failed "
      "again.\n"
      "# TYPE dlq_bridge_drain_last_run_canary_failed gauge\n"
      "dlq_bridge_drain_last_run_canary_failed %llu\n"
      "# HELP dlq_bridge_drain_last_run_stopped Why the last drain run ended (1 for its reason).\n"
      "# TYPE dlq_bridge_drain_last_run_stopped gauge\n",
      r->stop == DLQB_DRAIN_RUNNING, (long long)(started / 1000),
      (long long)((r->stop == DLQB_DRAIN_RUNNING ? started : ended) / 1000),
      (unsigned long long)r->moved, (unsigned long long)r->refailures,
      (unsigned long long)r->canary_failed);
  for (int s = DLQB_DRAIN_RUNNING; s < DLQB_DRAIN__STOPS && n > 0 && (size_t)n < sizeof text; s++)
    n += snprintf(text + n, sizeof text - (size_t)n,
                  "dlq_bridge_drain_last_run_stopped{reason=\"%s\"} %d\n",
                  dlqb_drain_stop_name((dlqb_drain_stop)s), r->stop == (dlqb_drain_stop)s);
  dlqb_error err;
  if (n <= 0 || (size_t)n >= sizeof text) return;
  if (dlqb_file_replace(path, text, (size_t)n, "the drain textfile", &err) != DLQB_OK) {
    dlqb_log_warn("drain", "%s", err.msg);
    return;
  }
  /* node_exporter runs as a user of its own: the metrics are no secret. */
  if (chmod(path, 0644) != 0)
    dlqb_log_warn("drain", "cannot make the drain textfile '%s' readable: %s", path,
                  strerror(errno));
}

static const char *stop_sentence(const dlqb_drain_ramp *r) {
  switch (r->stop) {
  case DLQB_DRAIN_DRAINED: return "nothing eligible is left";
  case DLQB_DRAIN_CANARY_FAILED: return "a canary failed again: the cause is not fixed";
  case DLQB_DRAIN_CANARY_TIMEOUT: return "the canary did not complete within drain_canary_timeout";
  case DLQB_DRAIN_REFAILURES:
    return "drain_failure_threshold re-failures within drain_failure_window";
  case DLQB_DRAIN_MAX_ITEMS: return "drain_max_items moved";
  case DLQB_DRAIN_INTERRUPTED: return "interrupted";
  case DLQB_DRAIN_ERROR: return "an error";
  default: return "?";
  }
}

/* ---- drain run -------------------------------------------------------- */

static dlqb_status run_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  return cli_opts_flag(&((drain_run *)ctx)->o, flag, value, err);
}

/* The stop flag was set: by a signal, or by the lease's keeper. */
static void end_stopped(drain_run *d) {
  if (d->ramp.phase == DLQB_DRAIN_PH_END) return;
  if (d->lease != NULL && !dlqb_lease_held(d->lease)) {
    snprintf(d->error, sizeof d->error, "the lease's connection to the broker was lost");
    cli_error("drain: %s; stopped at once (another drain may take over)", d->error);
    dlqb_drain_end(&d->ramp, DLQB_DRAIN_ERROR);
    return;
  }
  dlqb_drain_end(&d->ramp, DLQB_DRAIN_INTERRUPTED);
}

/* One MOVE of the ramp through replay's pass. */
static void move_step(drain_run *d, const dlqb_drain_action *a, ops_session *session,
                      dlqb_stop_flag *stop) {
  /* drain_eligible counts the step (pass_limit), not the selection's
   * --limit: it must also see the items behind the step's last one, to
   * notice moved tasks that came back. */
  d->o.sel.limit = 0;
  d->o.rate = a->rate;
  d->pass_limit = a->limit;
  d->pass_taken = 0;
  ops_move_spec m;
  drain_spec(d, &m, false, a->rate);
  ops_move_watch w = {.acked = drain_moved, .ctx = d};
  ops_move_outcome *out = calloc(1, sizeof *out);
  if (out == NULL) {
    snprintf(d->error, sizeof d->error, "out of memory");
    dlqb_drain_end(&d->ramp, DLQB_DRAIN_ERROR);
    return;
  }
  ops_ctx x = cli_context(&d->o);
  ops_move_pass(&x, &m, ops_session_audit(session), &w, stop, out);
  d->skipped += out->skipped;
  /* A short read (an operator's inspect took some items for a moment) is
   * no error: the step moved what it saw, the next run sees the rest. */
  dlqb_drain_moved(&d->ramp, a->limit, out->moved, dlqb_mono_ms());
  bool failed = out->status != DLQB_OK || out->r.audit_failed;
  if (out->r.interrupted) end_stopped(d);
  else if (failed || out->r.refused > 0) {
    if (!failed)
      snprintf(d->error, sizeof d->error, "the broker refused %llu item(s) as they are",
               (unsigned long long)out->r.refused);
    else snprintf(d->error, sizeof d->error, "%s", out->early[0] ? out->early : out->err.msg);
    dlqb_drain_end(&d->ramp, DLQB_DRAIN_ERROR);
  }
  if (!d->o.json && !d->o.quiet_progress)
    fprintf(stderr, "drain: %s %llu at %g/s\n", a->canary ? "canary" : "step",
            (unsigned long long)out->moved, a->rate);
  if (out->unsettled > 0) {
    /* Left for a person: the drain never settles a move it cannot see end. */
    char why[sizeof out->unsettled_id + 2 * DLQB_NAME_MAX + 256];
    dlqb_log_warn("unsettled", "%s", ops_unsettled_text(out, why, sizeof why));
  }
  free(out);
}

static int drain_dry_run(drain_run *d, dlqb_stop_flag *stop) {
  dlqb_error err;
  dlqb_ledger_stats ls;
  if (dlqb_ledger_peek(d->o.cfg, NULL, cli_pipeline()->completed, d->o.cfg->ledger.cache, d->ledger,
                       LEDGER_QUIET_MS, &ls, &err) != DLQB_OK)
    return cli_fail(&err);
  d->o.sel.limit = 0; /* drain_eligible counts, as in move_step */
  d->pass_limit = d->o.cfg->drain.max_items > 0 ? (uint64_t)d->o.cfg->drain.max_items : UINT64_MAX;
  ops_move_spec m;
  drain_spec(d, &m, true, 0);
  m.ledger_stats = &ls;
  int rc = cli_move_run(&d->o, &m, NULL, stop);
  if (!d->o.json)
    printf("the next run replays the first %d of these as its canary and waits for them\n",
           d->o.cfg->drain.canary);
  return rc;
}

static int drain_run_cmd(int argc, char **argv) {
  static drain_run d; /* the ramp's ring is large for a stack */
  memset(&d, 0, sizeof d);
  bool help;
  int rc = cli_opts_load(&run_spec, argc, argv, &d.o, run_flag, &d, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&run_spec, stdout);
    return EXIT_OK;
  }
  snprintf(d.o.actor, sizeof d.o.actor, "%s", ACTOR);
  d.o.sel.all = true;
  d.o.quiet_progress = d.o.json;
  if (d.o.cfg->ledger.completion_writers[0] == '\0') {
    cli_error("drain needs completion_writers (DLQ_BRIDGE_COMPLETION_WRITERS): without a trusted "
              "ledger no canary can be seen to complete");
    return EXIT_USAGE;
  }
  dlqb_drain_params p;
  dlqb_drain_params_from(d.o.cfg, &p);
  dlqb_drain_init(&d.ramp, &p);
  ops_stamp_init(&d.stamp, ACTOR, NULL);
  d.seen = dlqb_hashset_new(sizeof(tracked));
  d.ledger = dlqb_ledger_new();
  if (d.seen == NULL || d.ledger == NULL) {
    dlqb_hashset_free(d.seen);
    dlqb_ledger_free(d.ledger);
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  dlqb_stop_flag *stop = cli_stop_flag();
  if (d.o.dry_run) {
    rc = drain_dry_run(&d, stop);
    dlqb_hashset_free(d.seen);
    dlqb_ledger_free(d.ledger);
    return rc;
  }

  /* The audit trail first (as replay): a run without one is refused
   * before the broker is touched, unless --no-audit. */
  ops_session *session = NULL;
  rc = cli_audit_start(&d.o, "drain", &session);
  if (rc != EXIT_OK) {
    dlqb_hashset_free(d.seen);
    dlqb_ledger_free(d.ledger);
    return rc;
  }
  dlqb_error err;
  dlqb_lease *lease = NULL;
  /* Losing the lease stops the run at once, as a signal would. */
  /* One drain per pipeline at a time: each has its own lease. */
  char lease_queue[DLQB_QNAME_MAX];
  if (dlqb_pipeline_is_default(cli_pipeline()))
    snprintf(lease_queue, sizeof lease_queue, "%s", LEASE_QUEUE);
  else snprintf(lease_queue, sizeof lease_queue, "%s.drain.lease", cli_pipeline()->name);
  dlqb_status st =
      dlqb_lease_take(d.o.cfg, lease_queue, "dlq-bridge drain (lease)", stop, &lease, &err);
  if (st != DLQB_OK) {
    ops_session_close(session);
    dlqb_hashset_free(d.seen);
    dlqb_ledger_free(d.ledger);
    if (st != DLQB_ECONFLICT) return cli_fail(&err);
    if (d.o.json) {
      json_object *j = json_object_new_object();
      json_object_object_add(j, "stopped", json_object_new_string("lease_held"));
      json_object_object_add(j, "moved", json_object_new_int(0));
      cli_print_json(j);
    } else printf("another drain holds the lease (%s): nothing done\n", lease_queue);
    return EXIT_LEASE_HELD;
  }
  int64_t started = dlqb_now_ms();
  /* A row and a textfile that say it runs, before anything moves: a run
   * killed from here on is seen in drain status and by the alerts. */
  json_object *start_row = run_json(&d, started, 0);
  record_run(&d, start_row);
  json_object_put(start_row);
  write_textfile(&d, started, started);
  dlqb_ledger_stats ls;
  st = dlqb_ledger_load(d.o.cfg, NULL, cli_pipeline()->completed, d.o.cfg->ledger.cache, d.ledger,
                        LEDGER_IDLE_MS, &ls, &err);
  if (st != DLQB_OK) {
    snprintf(d.error, sizeof d.error, "%s", err.msg);
    cli_error("%s", err.msg);
    dlqb_drain_end(&d.ramp, DLQB_DRAIN_ERROR);
  }
  d.lease = lease;
  for (;;) {
    if (*stop) end_stopped(&d);
    /* The ramp's times are monotonic: a clock set back or forward must not
     * end a canary wait early or stretch a failure window. */
    dlqb_drain_action a = dlqb_drain_next(&d.ramp, dlqb_mono_ms());
    if (a.kind == DLQB_DRAIN_END) break;
    if (a.kind == DLQB_DRAIN_MOVE) {
      move_step(&d, &a, session, stop);
      /* An item max_replays escalated is a failure too. */
      if (!a.canary && d.ramp.phase != DLQB_DRAIN_PH_END &&
          look_queue(&d, cli_pipeline()->review, &err) != DLQB_OK) {
        snprintf(d.error, sizeof d.error, "%s", err.msg);
        cli_error("%s", err.msg);
        dlqb_drain_end(&d.ramp, DLQB_DRAIN_ERROR);
      }
      continue;
    }
    /* DLQB_DRAIN_WAIT_CANARY */
    if (look_canary(&d, &err) != DLQB_OK) {
      snprintf(d.error, sizeof d.error, "%s", err.msg);
      cli_error("%s", err.msg);
      dlqb_drain_end(&d.ramp, DLQB_DRAIN_ERROR);
      continue;
    }
    dlqb_drain_action again = dlqb_drain_next(&d.ramp, dlqb_mono_ms());
    if (again.kind == DLQB_DRAIN_WAIT_CANARY) dlqb_sleep_us(stop, POLL_US);
    else if (again.kind == DLQB_DRAIN_MOVE) {
      move_step(&d, &again, session, stop);
      continue;
    }
  }
  ops_session_close(session);
  int64_t ended = dlqb_now_ms();
  json_object *run = run_json(&d, started, ended);
  record_run(&d, run);
  write_textfile(&d, started, ended);
  dlqb_lease_release(lease);
  const dlqb_drain_ramp *r = &d.ramp;
  if (d.o.json) cli_print_json(run);
  else {
    printf("drain: replayed %llu (canary %llu: %llu complete, %llu failed again), skipped as "
           "complete %llu, %d ramp steps, re-failures %llu; stopped: %s\n",
           (unsigned long long)r->moved, (unsigned long long)r->canary_moved,
           (unsigned long long)r->canary_completed, (unsigned long long)r->canary_failed,
           (unsigned long long)d.skipped, r->step, (unsigned long long)r->refailures,
           stop_sentence(r));
    json_object_put(run);
  }
  dlqb_hashset_free(d.seen);
  dlqb_ledger_free(d.ledger);
  /* What the drain moved came back, or its canary did not complete: the
   * cause is not fixed. Exit 1 with the reason, so the unit that ran it
   * (dlq-bridge-drain.service) shows failed, not a success. */
  if (r->stop == DLQB_DRAIN_CANARY_FAILED || r->stop == DLQB_DRAIN_CANARY_TIMEOUT ||
      r->stop == DLQB_DRAIN_REFAILURES) {
    cli_error("drain stopped (%s): %s", dlqb_drain_stop_name(r->stop), stop_sentence(r));
    return EXIT_RUNTIME;
  }
  return r->stop == DLQB_DRAIN_ERROR || r->stop == DLQB_DRAIN_INTERRUPTED ? EXIT_RUNTIME : EXIT_OK;
}

/* ---- drain status ----------------------------------------------------- */

typedef struct {
  bool json;
  long last;
} status_opts;

static dlqb_status status_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  status_opts *s = ctx;
  if (flag == NULL) return dlqb_fail(err, DLQB_EINVAL, "unexpected argument '%s'", value);
  if (strcmp(flag, "json") == 0) {
    s->json = true;
    return DLQB_OK;
  }
  if (strcmp(flag, "last") == 0) {
    char *end;
    long n = strtol(value, &end, 10);
    if (*value == '\0' || *end != '\0' || n < 1 || n > RUNS_KEPT)
      return dlqb_fail(err, DLQB_EINVAL, "--last: '%.32s' is not a number from 1 to %d", value,
                       RUNS_KEPT);
    s->last = n;
    return DLQB_OK;
  }
  return dlqb_fail(err, DLQB_EINVAL, "unknown option '--%s'", flag);
}

static const char *jstr(json_object *o, const char *key) {
  json_object *v;
  return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
             ? json_object_get_string(v)
             : "-";
}

static int64_t jint(json_object *o, const char *key) {
  json_object *v;
  return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : 0;
}

static int drain_status_cmd(int argc, char **argv) {
  status_opts s = {false, 10};
  static dlqb_config cfg; /* not on the stack: a config is large */
  bool help;
  int rc = cli_load(&status_spec, argc, argv, &cfg, status_flag, &s, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&status_spec, stdout);
    return EXIT_OK;
  }
  dlqb_error err;
  json_object *runs = read_runs(cfg.drain.state, &err);
  if (runs == NULL) return cli_fail(&err);
  size_t n = json_object_array_length(runs);
  if (n > (size_t)s.last) n = (size_t)s.last;
  if (s.json) {
    json_object *out = json_object_new_array();
    for (size_t i = 0; i < n; i++)
      json_object_array_add(out, json_object_get(json_object_array_get_idx(runs, i)));
    json_object *doc = json_object_new_object();
    json_object_object_add(doc, "runs", out);
    cli_print_json(doc);
    json_object_put(runs);
    return EXIT_OK;
  }
  if (n == 0) printf("no drain runs recorded in %s\n", cfg.drain.state);
  else
    printf("%-24s %-16s %6s %-14s %6s %5s  %s\n", "ENDED_AT", "STOPPED", "MOVED", "CANARY(ok/bad)",
           "REFAIL", "STEPS", "BROKER_USER");
  for (size_t i = 0; i < n; i++) {
    json_object *r = json_object_array_get_idx(runs, i), *c = NULL;
    json_object_object_get_ex(r, "canary", &c);
    char canary[64], cell[3][130];
    snprintf(canary, sizeof canary, "%lld/%lld of %lld", (long long)jint(c, "completed"),
             (long long)jint(c, "failed"), (long long)jint(c, "moved"));
    /* The file is ours, but anyone who could write it could write escapes. */
    const char *fields[3] = {jstr(r, "ended_at"), jstr(r, "stopped"), jstr(r, "broker_user")};
    for (int k = 0; k < 3; k++) {
      bool cut;
      dlqb_text_cell(cell[k], sizeof cell[k], fields[k], strlen(fields[k]), k == 2 ? 40 : 24, false,
                     &cut);
    }
    printf("%-24s %-16s %6lld %-14s %6lld %5lld  %s\n", cell[0], cell[1],
           (long long)jint(r, "moved"), canary, (long long)jint(r, "refailures"),
           (long long)jint(r, "steps"), cell[2]);
  }
  json_object_put(runs);
  return EXIT_OK;
}

/* ---- the subcommand table --------------------------------------------- */

static const cli_subcommand subcommands[] = {
    {"run", drain_run_cmd},
    {"status", drain_status_cmd},
};
#define NSUB (sizeof subcommands / sizeof subcommands[0])

const cli_spec cmd_drain_spec = {
    .name = "drain",
    .summary = "replay what is likely transient on a schedule: canary, ramp, stop on re-failure",
    .usage = "dlq-bridge drain SUBCOMMAND [options]",
    .details = "subcommands:\n"
               "  run [--dry-run]    one drain run (for a systemd timer): canary, ramp, record\n"
               "  status             the last runs: what each moved, the canary, why it stopped\n"
               "\n"
               "`dlq-bridge drain SUBCOMMAND --help` shows a subcommand's options.",
    .flags = NULL,
    .settings = false,
};

int cmd_drain(int argc, char **argv) {
  return cli_run_subcommand(&cmd_drain_spec, subcommands, NSUB, argc, argv);
}

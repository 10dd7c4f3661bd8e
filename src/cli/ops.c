/* Shared flags, operator identity and output of the ops commands. */
#include "ops.h"

#include <pthread.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "dlqb/anchor.h"
#include "dlqb/columns.h"
#include "dlqb/group.h"
#include "dlqb/text.h"
#include "dlqb/log.h"
#include "dlqb/topology.h"

static void default_actor(char *buf, size_t len) {
  const char *name = getlogin();
  if (name == NULL || name[0] == '\0') {
    struct passwd *pw = getpwuid(geteuid());
    name = pw != NULL ? pw->pw_name : NULL;
  }
  snprintf(buf, len, "%s", name != NULL && name[0] != '\0' ? name : "unknown");
}

dlqb_status ops_parse_window(const char *value, int *out, dlqb_error *err) {
  char *end;
  long n = strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || n < 1 || n > DLQB_SCAN_WINDOW_MAX)
    return dlqb_fail(err, DLQB_EINVAL, "--window: '%.32s' is not a number from 1 to %d", value,
                     DLQB_SCAN_WINDOW_MAX);
  *out = (int)n;
  return DLQB_OK;
}

dlqb_status ops_flag(ops_opts *o, const char *flag, const char *value, dlqb_error *err) {
  if (flag == NULL) return dlqb_fail(err, DLQB_EINVAL, "unexpected argument '%s'", value);
  if (strcmp(flag, "json") == 0) {
    o->json = true;
    return DLQB_OK;
  }
  if (strcmp(flag, "actor") == 0) {
    if (value[0] == '\0' || strlen(value) >= sizeof o->actor)
      return dlqb_fail(err, DLQB_EINVAL, "--actor: give a name of 1 to %zu bytes",
                       sizeof o->actor - 1);
    snprintf(o->actor, sizeof o->actor, "%s", value);
    return DLQB_OK;
  }
  if (strcmp(flag, "window") == 0) {
    dlqb_status st = ops_parse_window(value, &o->window, err);
    o->window_set = st == DLQB_OK;
    return st;
  }
  if (strcmp(flag, "wide") == 0) {
    o->wide = true;
    return DLQB_OK;
  }
  if (strcmp(flag, "no-audit") == 0) {
    o->no_audit = true;
    return DLQB_OK;
  }
  if (strcmp(flag, "dry-run") == 0) {
    o->dry_run = true;
    return DLQB_OK;
  }
  if (strcmp(flag, "rate") == 0) {
    char *end;
    double n = strtod(value, &end);
    /* Below 1 a single wait outlasts the heartbeat: the broker drops us. */
    if (*value == '\0' || *end != '\0' || !(n >= 1) || n > OPS_RATE_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "--rate: '%.32s' is not a number from 1 to %d", value,
                       OPS_RATE_MAX);
    o->rate = n;
    return DLQB_OK;
  }
  if (dlqb_select_is_flag(flag)) return dlqb_select_set(&o->sel, flag, value, err);
  return dlqb_fail(err, DLQB_EINVAL, "unknown option '--%s'", flag);
}

int ops_load(const cli_spec *spec, int argc, char **argv, ops_opts *o, cli_flag_fn on_flag,
             void *ctx, bool *help) {
  dlqb_select_init(&o->sel);
  o->json = false;
  o->dry_run = false;
  o->no_audit = false;
  o->rate = 0;
  o->window = DLQB_SCAN_WINDOW_DEFAULT;
  default_actor(o->actor, sizeof o->actor);
  int rc = cli_load(spec, argc, argv, &o->cfg, on_flag, ctx, help);
  /* The identity filters name the served pipeline's fields. */
  dlqb_error err;
  if (rc == EXIT_OK && !*help &&
      dlqb_select_bind(&o->sel, &cli_pipeline()->profile, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    rc = EXIT_USAGE;
  }
  /* Ops commands talk to a person: only warnings and errors in the log. */
  if (rc == EXIT_OK && !*help && o->cfg.log_level > DLQB_LOG_WARN)
    dlqb_log_setup(o->cfg.log_format, DLQB_LOG_WARN, o->cfg.instance);
  return rc;
}

/* Each open trail's anchor publisher, found again by ops_audit_close: an
 * ops command has one, the console one per running job. */
typedef struct open_trail {
  dlqb_audit *audit;
  dlqb_anchor_pub *anchors;
  struct open_trail *next;
} open_trail;

static open_trail *open_trails;
static pthread_mutex_t open_trails_lock = PTHREAD_MUTEX_INITIALIZER;

dlqb_status ops_trail_open(const dlqb_config *cfg, const char *writer, dlqb_audit **out,
                           dlqb_error *err) {
  *out = NULL;
  open_trail *t = calloc(1, sizeof *t);
  if (t == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  dlqb_status st = dlqb_audit_open(cfg, writer, &t->audit, err);
  if (st == DLQB_OK) st = dlqb_anchor_start(cfg, t->audit, &t->anchors, err);
  if (st != DLQB_OK) {
    dlqb_audit_close(t->audit);
    free(t);
    return st;
  }
  pthread_mutex_lock(&open_trails_lock);
  t->next = open_trails;
  open_trails = t;
  pthread_mutex_unlock(&open_trails_lock);
  *out = t->audit;
  return DLQB_OK;
}

int ops_audit_start(const ops_opts *o, const char *command, dlqb_audit **out) {
  *out = NULL;
  if (o->cfg.audit_log[0] == '\0') {
    /* An operator's shell that lacks the daemon's settings must not move
     * items unrecorded without knowing it: the trail is where "no erasure
     * was lost" is proved. */
    if (!o->no_audit) {
      const char *file = cli_config_file();
      cli_error("no audit trail configured (audit_log); set it in %s or DLQ_BRIDGE_AUDIT_LOG, "
                "or pass --no-audit to act without one",
                file != NULL ? file : DLQB_CONFIG_DEFAULT_PATH);
      return EXIT_USAGE;
    }
    dlqb_log_warn("no_audit", "%s by actor '%s' with --no-audit: no audit trail configured, "
                  "nothing it does is recorded", command, o->actor);
    /* Said on stderr even when the log shows errors only. */
    if (o->cfg.log_level < DLQB_LOG_WARN)
      fprintf(stderr, "dlq-bridge: %s with --no-audit: nothing it does is recorded\n", command);
    return EXIT_OK;
  }
  char writer[400];
  snprintf(writer, sizeof writer, "%s@%s", command, o->cfg.instance);
  dlqb_error err;
  if (ops_trail_open(&o->cfg, writer, out, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_FAILURE_;
  }
  return EXIT_OK;
}

void ops_audit_close(dlqb_audit *audit) {
  if (audit == NULL) return;
  pthread_mutex_lock(&open_trails_lock);
  open_trail **pp = &open_trails, *t = NULL;
  while (*pp != NULL && (*pp)->audit != audit) pp = &(*pp)->next;
  if (*pp != NULL) {
    t = *pp;
    *pp = t->next;
  }
  pthread_mutex_unlock(&open_trails_lock);
  /* chain_end first, then its anchor: the run's last head is off the host
   * before the command exits. A broker that cannot take it loses nothing
   * (the records are on disk) but leaves them unanchored: say so. */
  dlqb_audit_end(audit);
  dlqb_error err = {{0}};
  if (t != NULL && dlqb_anchor_stop(t->anchors, &err) != DLQB_OK)
    dlqb_log_warn("anchor_failing", "these audit records are on disk but not anchored in %s: %s",
                  DLQB_Q_ANCHORS, err.msg);
  free(t);
  dlqb_audit_close(audit);
}

int ops_fail(const dlqb_error *err) {
  cli_error("%s", err->msg);
  return EXIT_FAILURE_;
}

char *ops_age_text(bool known, uint64_t age_ms, char *buf, size_t len) {
  if (!known) {
    snprintf(buf, len, "?");
    return buf;
  }
  uint64_t s = age_ms / 1000;
  if (s < 60) snprintf(buf, len, "%llus", (unsigned long long)s);
  else if (s < 3600) snprintf(buf, len, "%llum%llus", (unsigned long long)(s / 60),
                              (unsigned long long)(s % 60));
  else if (s < 86400) snprintf(buf, len, "%lluh%llum", (unsigned long long)(s / 3600),
                               (unsigned long long)(s % 3600 / 60));
  else snprintf(buf, len, "%llud%lluh", (unsigned long long)(s / 86400),
                (unsigned long long)(s % 86400 / 3600));
  return buf;
}

static void put_str(json_object *obj, const char *key, const char *value) {
  json_object_object_add(obj, key, json_object_new_string(value));
}

json_object *ops_item_json(const dlqb_item *it, int64_t now_ms) {
  json_object *o = json_object_new_object();
  char iso[DLQB_ISO_TIME_MAX];
  uint64_t age = 0;
  bool known = dlqb_item_age(it, now_ms, &age);
  put_str(o, "message_id", it->message_id);
  /* The identity under the served profile's names (dsr: request_id,
   * source_system). */
  const dlqb_profile *pr = &cli_pipeline()->profile;
  put_str(o, pr->fields[0].name, it->request_id);
  put_str(o, pr->fields[1].name, it->source_system);
  put_str(o, "legal_basis", it->legal_basis);
  put_str(o, "action", it->action);
  json_object_object_add(o, "attempt", it->has_attempt ? json_object_new_int64(it->attempt) : NULL);
  json_object_object_add(o, "replay_count", json_object_new_int64(it->replay_count));
  put_str(o, "last_error", it->last_error);
  put_str(o, "dlq_reason", it->dlq_reason);
  char group[DLQB_GROUP_ID_BUF];
  dlqb_group_of(it, group, NULL, 0);
  put_str(o, "group", group);
  json_object_object_add(
      o, "dlq_at", it->has_dlq_at ? json_object_new_string(dlqb_iso_time(it->dlq_at_ms, iso, sizeof iso))
                                  : NULL);
  json_object_object_add(o, "age_seconds",
                         known ? json_object_new_int64((int64_t)(age / 1000)) : NULL);
  return o;
}

/* The item table's columns, the ones a person acts on first (resolve needs
 * the message_id; LAST_ERROR is what one came for and takes the rest of
 * the line); on a narrow terminal the others go, DLQ_REASON last. */
enum { COL_AGE, COL_LEFT, COL_MSGID, COL_REQID, COL_SOURCE, COL_BASIS, COL_ACTION, COL_ATT,
       COL_REASON, COL_ERROR, NCOLS };
/* LEFT (the statutory time left) only when the command gives deadlines
 * (ops_table_deadlines): a compliance officer's first question, so it goes
 * after DLQ_REASON on a narrow terminal but before the others. */
static const dlqb_column fit_cols[NCOLS] = {
    {"AGE", 6, 0},         {"LEFT", 7, 2},        {"MESSAGE_ID", 12, 0}, {"REQUEST_ID", 12, 0},
    {"SOURCE", 10, 0},     {"LEGAL_BASIS", 13, 4}, {"ACTION", 13, 5},     {"ATT", 3, 3},
    {"DLQ_REASON", 16, 1}, {"LAST_ERROR", 0, 0},
};
/* Without a limit: padded to these, never cut. */
static const dlqb_column wide_cols[NCOLS] = {
    {"AGE", 6, 0},          {"LEFT", 7, 0},         {"MESSAGE_ID", 36, 0}, {"REQUEST_ID", 24, 0},
    {"SOURCE", 14, 0},      {"LEGAL_BASIS", 13, 0}, {"ACTION", 13, 0},     {"ATT", 3, 0},
    {"DLQ_REASON", 16, 0},  {"LAST_ERROR", 0, 0},
};
/* One command prints one table per process. */
static dlqb_layout table = {{true, false, true, true, true, true, true, true, true, true},
                            {6, 7, 36, 24, 14, 13, 13, 3, 16, 0}};
static bool table_cut, table_unlimited = true;
static const dlqb_deadlines *table_deadlines; /* NULL: no LEFT column */
static bool table_left_required;

void ops_table_deadlines(const dlqb_deadlines *d, bool required) {
  table_deadlines = d;
  table_left_required = required;
}

size_t ops_output_width(bool wide) {
  if (wide) return 0;
  const char *env = getenv("COLUMNS");
  if (env != NULL && env[0] != '\0') {
    char *end;
    long n = strtol(env, &end, 10);
    if (*end == '\0' && n > 0 && n <= 10000) return (size_t)n;
  }
  if (!isatty(STDOUT_FILENO)) return 0;
  struct winsize ws;
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

void ops_table_fit(size_t columns) {
  table_unlimited = columns == 0;
  /* Laid out without LEFT when there are no deadlines, then mapped back. */
  const dlqb_column *all = columns > 0 ? fit_cols : wide_cols;
  dlqb_column cols[NCOLS];
  int map[NCOLS];
  size_t n = 0;
  /* LEGAL_BASIS and ACTION are the dsr profile's fields, and deadlines
   * follow legal_basis: a profile without them has no such columns. */
  const dlqb_profile *pr = &cli_pipeline()->profile;
  bool has_basis = dlqb_profile_field(pr, DLQB_H_LEGAL_BASIS) >= 0;
  bool has_action = dlqb_profile_field(pr, DLQB_H_ACTION) >= 0;
  for (int i = 0; i < NCOLS; i++) {
    if (i == COL_LEFT && (table_deadlines == NULL || !has_basis)) continue;
    if ((i == COL_BASIS && !has_basis) || (i == COL_ACTION && !has_action)) continue;
    map[n] = i;
    cols[n] = all[i];
    if (i == COL_LEFT && table_left_required) cols[n].keep = 0;
    n++;
  }
  dlqb_layout l;
  dlqb_columns_fit(cols, n, columns, 16, 40, &l);
  memset(&table, 0, sizeof table);
  for (size_t k = 0; k < n; k++) {
    table.shown[map[k]] = l.shown[k];
    table.width[map[k]] = l.width[k];
  }
}

char *ops_left_text(const dlqb_deadline *d, char *buf, size_t len) {
  if (d->kind == DLQB_DEADLINE_NONE) {
    snprintf(buf, len, "-");
  } else if (d->kind == DLQB_DEADLINE_UNKNOWN) {
    snprintf(buf, len, "?");
  } else {
    char t[32];
    uint64_t ms = d->left_ms >= 0 ? (uint64_t)d->left_ms : (uint64_t)0 - (uint64_t)d->left_ms;
    snprintf(buf, len, "%s%s", d->left_ms < 0 ? "-" : "", ops_age_text(true, ms, t, sizeof t));
  }
  return buf;
}

void ops_item_json_deadline(json_object *o, const dlqb_deadlines *d, const dlqb_item *it,
                            int64_t now_ms) {
  dlqb_deadline x = dlqb_item_deadline(d, it, now_ms);
  if (x.kind == DLQB_DEADLINE_NONE) {
    json_object_object_add(o, "deadline", NULL);
    return;
  }
  json_object *j = json_object_new_object();
  char iso[DLQB_ISO_TIME_MAX];
  bool known = x.kind == DLQB_DEADLINE_KNOWN;
  json_object_object_add(
      j, "received_at",
      known ? json_object_new_string(dlqb_iso_time(x.receipt_ms, iso, sizeof iso)) : NULL);
  json_object_object_add(
      j, "due_at", known ? json_object_new_string(dlqb_iso_time(x.due_ms, iso, sizeof iso)) : NULL);
  /* Whole seconds toward zero; negative: overdue. */
  json_object_object_add(j, "left_seconds", known ? json_object_new_int64(x.left_ms / 1000) : NULL);
  json_object_object_add(o, "deadline", j);
}

bool ops_table_was_cut(void) { return table_cut; }

static void put_cell(FILE *out, int col, const char *text, bool *first) {
  if (!table.shown[col]) return;
  char buf[4 * DLQB_LAST_ERROR_MAX + 64];
  bool cut = false;
  size_t width = table_unlimited ? 0 : table.width[col];
  /* Ids differ in their tails ("R-2026-11-1001"): a cut keeps the end. */
  if (col == COL_MSGID || col == COL_REQID)
    dlqb_text_cell_tail(buf, sizeof buf, text, strlen(text), width, true, &cut);
  else dlqb_text_cell(buf, sizeof buf, text, strlen(text), width, col != COL_ERROR, &cut);
  table_cut = table_cut || cut;
  fprintf(out, "%s%s", *first ? "" : " ", buf);
  if (table_unlimited && col != COL_ERROR) {
    /* Whole, padded to the column when shorter (characters, not bytes). */
    size_t chars = 0;
    for (const char *p = buf; *p != '\0'; p++) chars += ((unsigned char)*p & 0xC0u) != 0x80u;
    for (; chars < table.width[col]; chars++) fputc(' ', out);
  }
  *first = false;
}

static const char *or_dash(const char *s) { return s[0] ? s : "-"; }

char *ops_identity_text(const dlqb_item *it, char *buf, size_t cap) {
  const dlqb_profile *pr = &cli_pipeline()->profile;
  snprintf(buf, cap, "%s %s, %s %s", pr->fields[0].name, or_dash(it->request_id),
           pr->fields[1].name, or_dash(it->source_system));
  return buf;
}

bool ops_identity_is_dsr(void) {
  const dlqb_profile *pr = &cli_pipeline()->profile;
  return strcmp(pr->fields[0].name, DLQB_H_REQUEST_ID) == 0 &&
         strcmp(pr->fields[1].name, DLQB_H_SOURCE_SYSTEM) == 0;
}

const char *ops_identity_column(int which, char *buf, size_t cap) {
  const dlqb_profile *pr = &cli_pipeline()->profile;
  if (ops_identity_is_dsr()) return which == 0 ? "REQUEST_ID" : "SOURCE";
  const char *f = pr->fields[which == 0 ? 0 : 1].name;
  size_t i = 0;
  for (; f[i] != '\0' && i + 1 < cap; i++)
    buf[i] = f[i] >= 'a' && f[i] <= 'z' ? (char)(f[i] - 'a' + 'A') : f[i];
  buf[i] = '\0';
  return buf;
}

static const char *col_name(int col, char *buf, size_t cap) {
  if (col == COL_REQID || col == COL_SOURCE)
    return ops_identity_column(col == COL_REQID ? 0 : 1, buf, cap);
  return fit_cols[col].name;
}

void ops_item_header(FILE *out) {
  bool first = true;
  char name[DLQB_HEADER_NAME_MAX];
  for (int i = 0; i < NCOLS; i++) put_cell(out, i, col_name(i, name, sizeof name), &first);
  fputc('\n', out);
}

void ops_item_print(FILE *out, const dlqb_item *it, int64_t now_ms) {
  char age[32], att[24];
  uint64_t a = 0;
  bool known = dlqb_item_age(it, now_ms, &a), first = true;
  snprintf(att, sizeof att, it->has_attempt ? "%lld" : "-", (long long)it->attempt);
  put_cell(out, COL_AGE, ops_age_text(known, a, age, sizeof age), &first);
  if (table_deadlines != NULL) {
    char left[40];
    dlqb_deadline d = dlqb_item_deadline(table_deadlines, it, now_ms);
    put_cell(out, COL_LEFT, ops_left_text(&d, left, sizeof left), &first);
  }
  put_cell(out, COL_MSGID, or_dash(it->message_id), &first);
  put_cell(out, COL_REQID, or_dash(it->request_id), &first);
  put_cell(out, COL_SOURCE, or_dash(it->source_system), &first);
  put_cell(out, COL_BASIS, or_dash(it->legal_basis), &first);
  put_cell(out, COL_ACTION, or_dash(it->action), &first);
  put_cell(out, COL_ATT, att, &first);
  put_cell(out, COL_REASON, or_dash(it->dlq_reason), &first);
  put_cell(out, COL_ERROR, or_dash(it->last_error), &first);
}

void ops_table_note(FILE *out, size_t columns) {
  if (table_cut)
    fprintf(out, "(cut to %zu columns; --wide or --json shows every column in full)\n", columns);
}

void ops_print_json(json_object *json) {
  printf("%s\n", json_object_to_json_string_ext(json, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(json);
  cli_json_printed();
}

static bool progress_wanted(const ops_opts *o) {
  return !o->json && !o->quiet_progress && isatty(STDERR_FILENO);
}

void ops_progress(const ops_opts *o, const char *label, const dlqb_scan_result *r) {
  if (!progress_wanted(o)) return;
  /* Items read but not yet settled: with --rate they wait for their turn,
   * which would otherwise look like a hang ("0 moved" for seconds). */
  uint64_t settled = r->forwarded + r->removed + r->held + r->refused;
  uint64_t pending = r->examined > settled ? r->examined - settled : 0;
  char rate[64] = "";
  if (o->rate > 0 && pending > 0)
    snprintf(rate, sizeof rate, ", %llu waiting for the rate (%g/s)", (unsigned long long)pending,
             o->rate);
  else if (pending > 0)
    snprintf(rate, sizeof rate, ", %llu awaiting confirms", (unsigned long long)pending);
  fprintf(stderr, "\r%s: %llu/%llu examined, %llu moved, %llu removed, %llu left in place%s\033[K",
          label, (unsigned long long)r->examined, (unsigned long long)r->depth_at_start,
          (unsigned long long)r->forwarded, (unsigned long long)r->removed,
          (unsigned long long)r->held, rate);
  fflush(stderr);
}

void ops_progress_end(const ops_opts *o) {
  if (progress_wanted(o)) fputs("\r\033[K", stderr);
}

const char *ops_early_stop(const dlqb_scan_result *r, int window) {
  (void)window;
  if (r->interrupted) return "interrupted: the rest was left in the queue, untouched";
  if (r->short_read) return "fewer items arrived than the queue held at the start "
                            "(another consumer took some); run again to cover them";
  return NULL;
}

/* ---- moving selected DLQ items ---------------------------------------- */

/* The pass itself: verdicts, --limit, dry-run counts. What is shown of it
 * is the watcher's (the CLI's table and JSON, the console's job). */
typedef struct {
  const ops_move_spec *m;
  const ops_move_watch *w;
  dlqb_verdict_rule rule; /* what is held, skipped or moved */
  uint64_t selected;   /* items chosen so far (for --limit) */
  uint64_t would_move, would_skip; /* dry run */
  int64_t now_ms;
} pass_ctx;

char *ops_move_summary(bool dry_run, const char *verb, uint64_t moved, bool ledger,
                       uint64_t skipped, uint64_t left, uint64_t total, const char *queue,
                       char *buf, size_t len) {
  const char *would = dry_run ? "would " : "";
  char skip[64] = "";
  if (ledger)
    snprintf(skip, sizeof skip, ", %s%s as complete %llu", would, dry_run ? "skip" : "skipped",
             (unsigned long long)skipped);
  /* A dry run's line is the longer: without the queue's name it fits 80
   * columns (and the real run names the queue). */
  snprintf(buf, len, "%s%s%s %llu%s, %s%s %llu of %llu%s%s", dry_run ? "dry run: " : "", would,
           verb, (unsigned long long)moved, skip, would, dry_run ? "leave" : "left",
           (unsigned long long)left, (unsigned long long)total, dry_run ? "" : " in ",
           dry_run ? "" : queue);
  return buf;
}

static dlqb_status move_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                             dlqb_error *err) {
  pass_ctx *c = ctx;
  dlqb_verdict v = dlqb_verdict_of(&c->rule, it, c->now_ms, c->selected);
  if (v.kind != DLQB_VERDICT_HOLD && c->m->only != NULL && !c->m->only(c->m->only_ctx, it))
    v.kind = DLQB_VERDICT_HOLD;
  dlqb_delivery copy = *d;
  if (v.kind != DLQB_VERDICT_HOLD && c->m->accept != NULL &&
      !c->m->accept(c->m->ctx, d, it, &copy.body))
    v.kind = DLQB_VERDICT_HOLD;
  if (v.kind == DLQB_VERDICT_HOLD) {
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  bool complete = v.kind == DLQB_VERDICT_SKIP_COMPLETE;
  /* --limit counts what is acted on: an item skipped as complete is not
   * one of the N the operator asked to replay. */
  if (!complete) c->selected++;
  if (c->m->dry_run) {
    if (c->w->listed != NULL) c->w->listed(c->w->ctx, it, complete, c->now_ms);
    if (complete) c->would_skip++;
    else c->would_move++;
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  if (v.stop_after) dlqb_scan_stop(s); /* what is in flight completes */
  if (complete) {
    dlqb_scan_ack(s, d, it, DLQB_EV_SKIPPED_COMPLETE, "", "already in the completion ledger");
    return DLQB_OK;
  }
  if (c->w->taken != NULL) c->w->taken(c->w->ctx, it);
  if (c->m->target == NULL) {
    /* resolve: the item leaves the DLQ with nothing published */
    dlqb_scan_ack(s, d, it, c->m->event, c->m->cause ? c->m->cause : "",
                  c->m->reason(c->m->ctx, it));
    return DLQB_OK;
  }
  dlqb_hset sets[OPS_MAX_SETS];
  size_t n = c->m->sets(c->m->ctx, it, sets);
  return dlqb_scan_forward(s, &copy, it, c->m->target, sets, n, c->m->event,
                           c->m->cause ? c->m->cause : "", c->m->reason(c->m->ctx, it), err);
}

static void move_acked(void *ctx, const dlqb_hop *hop) {
  pass_ctx *c = ctx;
  if (!c->m->dry_run && c->w->acked != NULL) c->w->acked(c->w->ctx, hop);
}

static void move_tick(void *ctx, const dlqb_scan *s) {
  pass_ctx *c = ctx;
  if (c->w->tick == NULL) return;
  dlqb_scan_result r;
  dlqb_scan_progress(s, &r);
  c->w->tick(c->w->ctx, &r);
}

void ops_move_pass(const ops_opts *o, const ops_move_spec *m, dlqb_audit *audit,
                   const ops_move_watch *w, dlqb_stop_flag *stop, ops_move_outcome *out) {
  static const ops_move_watch none = {0};
  const char *source = m->source != NULL ? m->source : cli_pipeline()->dlq;
  memset(out, 0, sizeof *out);
  pass_ctx c = {.m = m, .w = w != NULL ? w : &none, .now_ms = dlqb_now_ms(),
                .rule = {.sel = &o->sel, .ledger = m->ledger, .stop_at_limit = m->stop_at_limit}};
  /* With --rate the handler waits between moves while deliveries queue up
   * ahead of the confirms on the socket, so acks lag by up to a window: a
   * window of about half a second of moves keeps what a crash would
   * duplicate small. --window overrides it (e.g. for a selective replay
   * whose unselected items would fill a small window). */
  int window = o->window;
  if (m->rate > 0 && !o->window_set) {
    double wd = m->rate / 2;
    window = wd < 50 ? 50 : wd > DLQB_SCAN_WINDOW_DEFAULT ? DLQB_SCAN_WINDOW_DEFAULT : (int)wd;
  }
  out->window = window;
  char purpose[64];
  snprintf(purpose, sizeof purpose, "dlq-bridge %s", m->command);
  dlqb_scan_options so = {.queue = source,
                          .edit = m->edit,
                          .purpose = purpose,
                          .actor = o->actor,
                          .audit = audit,
                          .window = window,
                          .rate = m->rate,
                          .stop = stop,
                          .audit_mode = DLQB_PIPE_AUDIT_FAIL_FAST,
                          .on_item = move_item,
                          .on_tick = move_tick,
                          .after_ack = move_acked,
                          .ctx = &c};
  dlqb_scan_result *r = &out->r;
  out->status = dlqb_scan_run(&o->cfg, &so, r, &out->err);
  /* Lost before the first item: nothing happened; the error says why. */
  out->not_started = out->status != DLQB_OK && !r->audit_failed && r->examined == 0;
  /* The trail lost midway: the pass stopped at once; say what moved (each
   * of those is recorded) and what may now be there twice. */
  /* A pass we ended at the limit saw fewer items than the queue held, by
   * design: not a short read. */
  const char *early = r->stopped ? NULL : ops_early_stop(r, o->window);
  if (r->audit_failed) {
    snprintf(out->early, sizeof out->early,
             "stopped: %s; copies published but not recorded: %llu "
             "(their originals stay in %s, so %s may hold them twice)",
             out->err.msg[0] ? out->err.msg : "the audit log cannot be written",
             (unsigned long long)r->unsettled_copies, source, m->target);
  } else if (out->status != DLQB_OK) {
    /* The broker went midway (issue 19): as the Ctrl-C path does, say what
     * moved, that nothing is lost and what to do, and that the copies whose
     * confirms never came may now be in both queues. */
    char twice[128];
    if (r->unsettled_copies > 0)
      snprintf(twice, sizeof twice, "up to %llu item%s", (unsigned long long)r->unsettled_copies,
               r->unsettled_copies == 1 ? "" : "s");
    else snprintf(twice, sizeof twice, "the last items sent");
    snprintf(out->early, sizeof out->early,
             "stopped: %s; nothing is lost: what was not moved is "
             "still in %s, run it again; %s may now be in both %s and %s",
             out->err.msg, source, twice, source, m->target);
  } else if (early != NULL) {
    snprintf(out->early, sizeof out->early, "%s", early);
  }
  out->moved = m->dry_run ? c.would_move : r->forwarded;
  out->skipped = m->dry_run ? c.would_skip : r->removed;
  /* A dry run says what would remain, not today's depth. */
  uint64_t taken = out->moved + out->skipped;
  out->left = r->depth_at_start > taken ? r->depth_at_start - taken : 0;
}

/* ---- the CLI's view of a move: the dry run's table, --json, progress --- */

typedef struct {
  const ops_opts *o;
  const ops_move_spec *m;
  json_object *items;  /* --json: what was (or would be) done */
  bool header_done;
  size_t columns;      /* the dry run's table: ops_output_width */
  char summary[256];
} move_ctx;

static void list_item(void *ctx, const dlqb_item *it, bool complete, int64_t now_ms) {
  move_ctx *c = ctx;
  const char *what = complete ? "skip_complete" : c->m->verb;
  if (c->o->json) {
    json_object *j = ops_item_json(it, now_ms);
    json_object_object_add(j, "outcome", json_object_new_string(what));
    json_object_array_add(c->items, j);
    return;
  }
  if (!c->header_done) {
    printf("%-*s ", OPS_WOULD_WIDTH, "WOULD");
    ops_item_header(stdout);
    c->header_done = true;
  }
  /* What would happen, in the future tense: "replay", "skip". */
  printf("%-*s ", OPS_WOULD_WIDTH, complete ? "skip" : c->m->command);
  ops_item_print(stdout, it, now_ms);
  putchar('\n');
}

static void list_acked(void *ctx, const dlqb_hop *hop) {
  move_ctx *c = ctx;
  if (c->items == NULL) return;
  json_object *j = json_object_new_object();
  put_str(j, "message_id", hop->message_id);
  put_str(j, "request_id", hop->request_id);
  put_str(j, "source_system", hop->source_system);
  put_str(j, "outcome", hop->event == DLQB_EV_SKIPPED_COMPLETE ? "skip_complete" : c->m->verb);
  json_object_array_add(c->items, j);
}

static void show_tick(void *ctx, const dlqb_scan_result *r) {
  move_ctx *c = ctx;
  ops_progress(c->o, c->m->command, r);
}

/* How replay read the completion ledger, for --json. */
static json_object *ledger_json(const ops_move_spec *m) {
  static const char *const cache_names[] = {"off", "used", "created", "rebuilt"};
  const dlqb_ledger_stats *ls = m->ledger_stats;
  json_object *j = json_object_new_object();
  json_object_object_add(j, "entries_read", json_object_new_int64((int64_t)ls->entries));
  json_object_object_add(j, "tasks", json_object_new_int64((int64_t)dlqb_ledger_size(m->ledger)));
  json_object_object_add(j, "from_cache", json_object_new_int64((int64_t)ls->cached));
  json_object_object_add(j, "unverified", json_object_new_int64((int64_t)ls->unverified));
  json_object_object_add(j, "cache", json_object_new_string(cache_names[ls->cache]));
  json_object_object_add(j, "cache_saved", json_object_new_boolean(ls->cache_saved));
  return j;
}

int ops_move_run(const ops_opts *o, const ops_move_spec *m, dlqb_stop_flag *stop) {
  dlqb_audit *audit = m->audit;
  bool own_audit = !m->audit_started && !m->dry_run;
  if (own_audit) {
    int arc = ops_audit_start(o, m->command, &audit);
    if (arc != EXIT_OK) return arc;
  }
  move_ctx c = {.o = o, .m = m};
  if (o->json) c.items = json_object_new_array();
  if (m->dry_run && !o->json) {
    size_t w = ops_output_width(o->wide);
    c.columns = w;
    ops_table_fit(w == 0 ? 0 : w > OPS_WOULD_WIDTH + 1 ? w - OPS_WOULD_WIDTH - 1 : 1);
  }
  ops_move_watch w = {.listed = list_item, .acked = list_acked, .tick = show_tick, .ctx = &c};
  ops_move_outcome *out = malloc(sizeof *out);
  if (out == NULL) {
    if (own_audit) ops_audit_close(audit);
    json_object_put(c.items);
    cli_error("out of memory");
    return EXIT_FAILURE_;
  }
  ops_move_pass(o, m, audit, &w, stop, out);
  ops_progress_end(o);
  if (own_audit) ops_audit_close(audit);
  int rc = EXIT_OK;
  const dlqb_scan_result *r = &out->r;
  if (out->not_started) {
    json_object_put(c.items);
    rc = ops_fail(&out->err);
    free(out);
    return rc;
  }
  const char *early = out->early[0] != '\0' ? out->early : NULL;
  if (o->json) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "dry_run", json_object_new_boolean(m->dry_run));
    json_object_object_add(j, m->verb, json_object_new_int64((int64_t)out->moved));
    json_object_object_add(j, "skipped_complete", json_object_new_int64((int64_t)out->skipped));
    json_object_object_add(j, "left", json_object_new_int64((int64_t)out->left));
    json_object_object_add(j, "total", json_object_new_int64((int64_t)r->depth_at_start));
    json_object_object_add(j, "examined", json_object_new_int64((int64_t)r->examined));
    json_object_object_add(j, "refused", json_object_new_int64((int64_t)r->refused));
    json_object_object_add(j, "complete", json_object_new_boolean(early == NULL));
    if (early != NULL) json_object_object_add(j, "stopped_early", json_object_new_string(early));
    if (m->ledger_stats != NULL) json_object_object_add(j, "ledger", ledger_json(m));
    json_object_object_add(j, "items", c.items);
    ops_print_json(j);
  } else {
    if (m->dry_run && !c.header_done) printf("no items match\n");
    ops_table_note(stdout, c.columns);
    printf("%s\n", ops_move_summary(m->dry_run, m->dry_run ? m->command : m->verb, out->moved,
                                    m->ledger != NULL, out->skipped, out->left, r->depth_at_start,
                                    cli_pipeline()->dlq, c.summary, sizeof c.summary));
    if (m->ledger_stats != NULL && m->ledger_stats->unverified > 0)
      printf("(%zu unverified completions ignored: not from completion_writers)\n",
             m->ledger_stats->unverified);
  }
  if (r->refused > 0) {
    /* Each one is named in a warning line above. */
    cli_error("%s: %llu selected item%s left in %s: the broker would not take %s as %s", m->command,
              (unsigned long long)r->refused, r->refused == 1 ? "" : "s", cli_pipeline()->dlq,
              r->refused == 1 ? "it" : "them", r->refused == 1 ? "it is" : "they are");
    rc = EXIT_FAILURE_;
  }
  if (early != NULL) {
    cli_error("%s %s", m->command, early);
    rc = EXIT_FAILURE_;
  }
  free(out);
  return rc;
}

void ops_default_actor(char *buf, size_t len) { default_actor(buf, len); }

/* Shared flags, operator identity and output of the ops commands. */
#include "ops_cli.h"

#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "dlqb/columns.h"
#include "dlqb/group.h"
#include "dlqb/text.h"
#include "dlqb/log.h"
#include "dlqb/policy.h"
#include "dlqb/topology.h"

static void default_actor(char *buf, size_t len) {
  const char *name = getlogin();
  if (name == NULL || name[0] == '\0') {
    struct passwd *pw = getpwuid(geteuid());
    name = pw != NULL ? pw->pw_name : NULL;
  }
  snprintf(buf, len, "%s", name != NULL && name[0] != '\0' ? name : "unknown");
}

dlqb_status cli_parse_window(const char *value, int *out, dlqb_error *err) {
  char *end;
  long n = strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || n < 1 || n > DLQB_SCAN_WINDOW_MAX)
    return dlqb_fail(err, DLQB_EINVAL, "--window: '%.32s' is not a number from 1 to %d", value,
                     DLQB_SCAN_WINDOW_MAX);
  *out = (int)n;
  return DLQB_OK;
}

dlqb_status cli_opts_flag(cli_opts *o, const char *flag, const char *value, dlqb_error *err) {
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
    dlqb_status st = cli_parse_window(value, &o->window, err);
    o->window_set = st == DLQB_OK;
    return st;
  }
  if (strcmp(flag, "wide") == 0) {
    o->wide = true;
    return DLQB_OK;
  }
  if (strcmp(flag, "after-interrupted") == 0) {
    o->after_interrupted = true;
    return DLQB_OK;
  }
  if (strcmp(flag, "scan") == 0) {
    o->scan = true;
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

int cli_opts_load(const cli_spec *spec, int argc, char **argv, cli_opts *o, cli_flag_fn on_flag,
                  void *ctx, bool *help) {
  dlqb_select_init(&o->sel);
  o->json = false;
  o->dry_run = false;
  o->no_audit = false;
  o->rate = 0;
  o->window = DLQB_SCAN_WINDOW_DEFAULT;
  default_actor(o->actor, sizeof o->actor);
  /* Static: a config is large (and read until the command ends). */
  static dlqb_config loaded;
  o->cfg = &loaded;
  int rc = cli_load(spec, argc, argv, o->cfg, on_flag, ctx, help);
  /* The identity filters name the served pipeline's fields. */
  dlqb_error err;
  if (rc == EXIT_OK && !*help &&
      dlqb_select_bind(&o->sel, &cli_pipeline()->profile, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    rc = EXIT_USAGE;
  }
  /* Ops commands talk to a person: only warnings and errors in the log. */
  if (rc == EXIT_OK && !*help && o->cfg->log.level > DLQB_LOG_WARN)
    dlqb_log_setup(o->cfg->log.format, DLQB_LOG_WARN, o->cfg->instance);
  return rc;
}

int cli_audit_start(const cli_opts *o, const char *command, ops_session **out) {
  *out = NULL;
  char writer[400];
  snprintf(writer, sizeof writer, "%s@%s", command, o->cfg->instance);
  /* A dry run writes nothing: a session without a trail, never refused. */
  ops_session_opts so = {
      .cfg = o->cfg, .writer = writer, .without_trail = o->no_audit, .read_only = o->dry_run};
  dlqb_error err;
  dlqb_status st = ops_session_open(&so, out, &err);
  if (st != DLQB_OK) {
    if (o->cfg->audit.log[0] == '\0') {
      /* An operator's shell that lacks the daemon's settings must not move
       * items unrecorded without knowing it: say where to set the trail. */
      const char *file = cli_config_file();
      cli_error("%s; set it in %s or DLQ_BRIDGE_AUDIT_LOG, or pass --no-audit to act without one",
                err.msg, file != NULL ? file : DLQB_CONFIG_DEFAULT_PATH);
    } else {
      cli_error("%s", err.msg);
    }
    /* As run: a key or log that the settings name wrongly (missing,
     * readable by others) is a configuration error. */
    return st == DLQB_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
  }
  if (ops_session_audit(*out) == NULL && !o->dry_run) {
    dlqb_log_warn("no_audit",
                  "%s by actor '%s' with --no-audit: no audit trail configured, "
                  "nothing it does is recorded",
                  command, o->actor);
    /* Said on stderr even when the log shows errors only. */
    if (o->cfg->log.level < DLQB_LOG_WARN)
      fprintf(stderr, "dlq-bridge: %s with --no-audit: nothing it does is recorded\n", command);
  }
  return EXIT_OK;
}

int cli_fail(const dlqb_error *err) {
  cli_error("%s", err->msg);
  return EXIT_RUNTIME;
}

static void put_str(json_object *obj, const char *key, const char *value) {
  json_object_object_add(obj, key, json_object_new_string(value));
}

bool cli_profile_has(const char *name) { return ops_profile_has(&cli_pipeline()->profile, name); }

json_object *cli_item_json(const dlqb_item *it, int64_t now_ms) {
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
  if (cli_profile_has(DLQB_H_LEGAL_BASIS)) put_str(o, "legal_basis", it->legal_basis);
  if (cli_profile_has(DLQB_H_ACTION)) put_str(o, "action", it->action);
  json_object_object_add(o, "attempt", it->has_attempt ? json_object_new_int64(it->attempt) : NULL);
  json_object_object_add(o, "replay_count", json_object_new_int64(it->replay_count));
  put_str(o, "last_error", it->last_error);
  put_str(o, "dlq_reason", it->dlq_reason);
  char group[DLQB_GROUP_ID_BUF];
  dlqb_group_of(it, group, NULL, 0);
  put_str(o, "group", group);
  json_object_object_add(o, "dlq_at",
                         it->has_dlq_at
                             ? json_object_new_string(dlqb_iso_time(it->dlq_at_ms, iso, sizeof iso))
                             : NULL);
  json_object_object_add(o, "age_seconds",
                         known ? json_object_new_int64((int64_t)(age / 1000)) : NULL);
  return o;
}

/* The item table's columns, the ones a person acts on first (resolve needs
 * the message_id; LAST_ERROR is what one came for and takes the rest of
 * the line); on a narrow terminal the others go, DLQ_REASON last. */
enum {
  COL_AGE,
  COL_LEFT,
  COL_MSGID,
  COL_REQID,
  COL_SOURCE,
  COL_BASIS,
  COL_ACTION,
  COL_ATT,
  COL_REASON,
  COL_ERROR,
  NCOLS
};
/* LEFT (the statutory time left) only when the command gives deadlines
 * (cli_table_deadlines): a compliance officer's first question, so it goes
 * after DLQ_REASON on a narrow terminal but before the others. */
static const dlqb_column fit_cols[NCOLS] = {
    {"AGE", 6, 0},         {"LEFT", 7, 2},         {"MESSAGE_ID", 12, 0}, {"REQUEST_ID", 12, 0},
    {"SOURCE", 10, 0},     {"LEGAL_BASIS", 13, 4}, {"ACTION", 13, 5},     {"ATT", 3, 3},
    {"DLQ_REASON", 16, 1}, {"LAST_ERROR", 0, 0},
};
/* Without a limit: padded to these, never cut. */
static const dlqb_column wide_cols[NCOLS] = {
    {"AGE", 6, 0},         {"LEFT", 7, 0},         {"MESSAGE_ID", 36, 0}, {"REQUEST_ID", 24, 0},
    {"SOURCE", 14, 0},     {"LEGAL_BASIS", 13, 0}, {"ACTION", 13, 0},     {"ATT", 3, 0},
    {"DLQ_REASON", 16, 0}, {"LAST_ERROR", 0, 0},
};
/* One command prints one table per process. */
static dlqb_layout table = {{true, false, true, true, true, true, true, true, true, true},
                            {6, 7, 36, 24, 14, 13, 13, 3, 16, 0}};
static bool table_cut, table_unlimited = true;
static size_t table_id_width[3];              /* cli_table_ids: message_id, request_id, source */
static const dlqb_deadlines *table_deadlines; /* NULL: no LEFT column */
static bool table_left_required;

void cli_table_deadlines(const dlqb_deadlines *d, bool required) {
  table_deadlines = d;
  table_left_required = required;
}

size_t cli_output_width(bool wide) {
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

static const char *col_name(int col, char *buf, size_t cap);

void cli_table_fit(size_t columns) {
  table_unlimited = columns == 0;
  /* Laid out without LEFT when there are no deadlines, then mapped back. */
  const dlqb_column *all = columns > 0 ? fit_cols : wide_cols;
  dlqb_column cols[NCOLS];
  int map[NCOLS];
  size_t n = 0;
  /* LEGAL_BASIS and ACTION are the dsr profile's fields, and deadlines
   * follow legal_basis: a profile without them has no such columns. */
  bool has_basis = cli_profile_has(DLQB_H_LEGAL_BASIS);
  bool has_action = cli_profile_has(DLQB_H_ACTION);
  for (int i = 0; i < NCOLS; i++) {
    if (i == COL_LEFT && (table_deadlines == NULL || !has_basis)) continue;
    if ((i == COL_BASIS && !has_basis) || (i == COL_ACTION && !has_action)) continue;
    map[n] = i;
    cols[n] = all[i];
    if (i == COL_LEFT && table_left_required) cols[n].keep = 0;
    /* Ids whole: as wide as the rows' widest when known, never less than
     * the header. */
    if (columns > 0 && (i == COL_MSGID || i == COL_REQID)) {
      size_t want = table_id_width[i == COL_MSGID ? 0 : 1];
      if (want > cols[n].width) cols[n].width = want;
    }
    /* SOURCE as wide as its rows need (its header at least), when known:
     * the room goes to LAST_ERROR. */
    if (columns > 0 && i == COL_SOURCE && table_id_width[2] > 0) {
      char name[DLQB_HEADER_NAME_MAX];
      size_t want = table_id_width[2], head = strlen(col_name(i, name, sizeof name));
      if (want < head) want = head;
      if (want < cols[n].width) cols[n].width = want;
    }
    n++;
  }
  dlqb_columns_fit_map(cols, map, n, columns, 16, 40, &table);
}

void cli_item_json_deadline(json_object *o, const dlqb_deadlines *d, const dlqb_item *it,
                            int64_t now_ms) {
  if (!cli_profile_has(DLQB_H_LEGAL_BASIS)) return;
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

void cli_table_ids(size_t message_id, size_t request_id, size_t source) {
  table_id_width[0] = message_id;
  table_id_width[1] = request_id;
  table_id_width[2] = source;
}

/* Characters (UTF-8 lead bytes) of a sanitised string. */
static size_t utf8_chars(const char *s) {
  size_t chars = 0;
  for (; *s != '\0'; s++) chars += ((unsigned char)*s & 0xC0u) != 0x80u;
  return chars;
}

size_t cli_id_chars(const char *id) {
  char buf[4 * DLQB_ID_MAX + 16];
  bool cut;
  dlqb_text_cell(buf, sizeof buf, id, strlen(id), 0, false, &cut);
  return utf8_chars(buf);
}

void cli_rows_init(cli_rows *r, bool holding, size_t fit_columns, cli_row_fn print, void *ctx) {
  memset(r, 0, sizeof *r);
  r->holding = holding;
  r->fit_columns = fit_columns;
  r->print = print;
  r->ctx = ctx;
}

void cli_rows_init_fit(cli_rows *r, bool holding, cli_fit_fn fit, cli_row_fn print, void *ctx) {
  cli_rows_init(r, holding, 0, print, ctx);
  r->fit = fit;
}

void cli_rows_flush(cli_rows *r) {
  if (r->holding) {
    size_t w[3] = {0, 0, 0};
    for (size_t i = 0; i < r->n; i++) {
      const char *v[3] = {r->it[i].message_id, r->it[i].request_id, r->it[i].source_system};
      for (int k = 0; k < 3; k++) {
        size_t n = cli_id_chars(v[k][0] ? v[k] : "-");
        if (n > w[k]) w[k] = n;
      }
    }
    if (r->fit != NULL) {
      r->fit(r->ctx, w);
    } else {
      cli_table_ids(w[0], w[1], w[2]);
      cli_table_fit(r->fit_columns);
    }
    r->holding = false;
    for (size_t i = 0; i < r->n; i++) r->print(r->ctx, &r->it[i], r->tag[i]);
  }
  free(r->it);
  free(r->tag);
  r->it = NULL;
  r->tag = NULL;
  r->n = r->cap = 0;
}

void cli_rows_drop(cli_rows *r) {
  r->holding = false;
  cli_rows_flush(r);
}

void cli_rows_add(cli_rows *r, const dlqb_item *it, bool tag) {
  if (!r->holding) {
    r->print(r->ctx, it, tag);
    return;
  }
  if (r->n == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 64;
    dlqb_item *more = realloc(r->it, cap * sizeof *more);
    if (more != NULL) r->it = more;
    bool *tags = more != NULL ? realloc(r->tag, cap * sizeof *tags) : NULL;
    if (tags != NULL) r->tag = tags;
    if (more == NULL || tags == NULL) {
      /* Out of memory: what is held goes out now, the rest as it comes. */
      r->out_of_memory = true;
      cli_rows_flush(r);
      r->print(r->ctx, it, tag);
      return;
    }
    r->cap = cap;
  }
  r->it[r->n] = *it;
  r->tag[r->n++] = tag;
  if (r->n == CLI_ROWS_HELD) cli_rows_flush(r);
}

bool cli_table_was_cut(void) { return table_cut; }

void cli_cell(FILE *out, const char *text, size_t width, bool whole, bool last, bool *first,
              bool *cut) {
  char buf[4 * DLQB_LAST_ERROR_MAX + 64];
  bool was_cut = false;
  dlqb_text_cell(buf, sizeof buf, text, strlen(text), whole ? 0 : width, !last, &was_cut);
  if (was_cut) *cut = true;
  fprintf(out, "%s%s", *first ? "" : " ", buf);
  if (whole && !last) {
    /* Whole, padded to the column when shorter (characters, not bytes). */
    for (size_t chars = utf8_chars(buf); chars < width; chars++) fputc(' ', out);
  }
  *first = false;
}

static void put_cell(FILE *out, int col, const char *text, bool *first) {
  if (!table.shown[col]) return;
  /* An id is never cut: a longer one makes a longer row. Unlimited: every
   * cell whole, padded to the wide widths. */
  bool id = col == COL_MSGID || col == COL_REQID;
  cli_cell(out, text, table.width[col], table_unlimited || id, col == COL_ERROR, first, &table_cut);
}

static const char *or_dash(const char *s) { return s[0] ? s : "-"; }

char *cli_identity_text(const dlqb_item *it, char *buf, size_t cap) {
  const dlqb_profile *pr = &cli_pipeline()->profile;
  snprintf(buf, cap, "%s %s, %s %s", pr->fields[0].name, or_dash(it->request_id),
           pr->fields[1].name, or_dash(it->source_system));
  return buf;
}

bool cli_identity_is_dsr(void) { return ops_profile_is_dsr(&cli_pipeline()->profile); }

const char *cli_identity_column(int which, char *buf, size_t cap) {
  const dlqb_profile *pr = &cli_pipeline()->profile;
  if (cli_identity_is_dsr()) return which == 0 ? "REQUEST_ID" : "SOURCE";
  const char *f = pr->fields[which == 0 ? 0 : 1].name;
  size_t i = 0;
  for (; f[i] != '\0' && i + 1 < cap; i++)
    buf[i] = f[i] >= 'a' && f[i] <= 'z' ? (char)(f[i] - 'a' + 'A') : f[i];
  buf[i] = '\0';
  return buf;
}

static const char *col_name(int col, char *buf, size_t cap) {
  if (col == COL_REQID || col == COL_SOURCE)
    return cli_identity_column(col == COL_REQID ? 0 : 1, buf, cap);
  return fit_cols[col].name;
}

void cli_item_header(FILE *out) {
  bool first = true;
  char name[DLQB_HEADER_NAME_MAX];
  for (int i = 0; i < NCOLS; i++) put_cell(out, i, col_name(i, name, sizeof name), &first);
  fputc('\n', out);
}

void cli_item_print(FILE *out, const dlqb_item *it, int64_t now_ms) {
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

void cli_table_note(FILE *out, size_t columns) {
  if (table_cut)
    fprintf(out, "(cut to %zu columns; --wide or --json shows every column in full)\n", columns);
}

void cli_print_json(json_object *json) {
  printf("%s\n", json_object_to_json_string_ext(json, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(json);
  cli_json_printed();
}

static bool progress_wanted(const cli_opts *o) {
  return !o->json && !o->quiet_progress && isatty(STDERR_FILENO);
}

void cli_progress(const cli_opts *o, const char *label, const dlqb_scan_result *r) {
  if (!progress_wanted(o)) return;
  /* Items read but not yet settled: with --rate they wait for their turn,
   * which would otherwise look like a hang ("0 moved" for seconds); the
   * rest are copies sent and not yet confirmed (or originals whose acks
   * wait for the audit trail): counted as in flight, so "moved" is not
   * stuck while they settle. One line that fits 80 columns up to seven
   * digits a count, redrawn in place (\r) without wrapping; what is 0
   * (removed, left) is not said. */
  uint64_t settled = r->forwarded + r->removed + r->held + r->refused;
  uint64_t pending = r->examined > settled ? r->examined - settled : 0;
  char line[256];
  int n = snprintf(line, sizeof line, "%s: %llu of %llu read, %llu moved", label,
                   (unsigned long long)r->examined, (unsigned long long)r->depth_at_start,
                   (unsigned long long)r->forwarded);
  /* A removal in a replay is a task found complete in the ledger. */
  if (r->removed > 0 && n > 0 && (size_t)n < sizeof line)
    n += snprintf(line + n, sizeof line - (size_t)n, ", %llu %s", (unsigned long long)r->removed,
                  strcmp(label, "replay") == 0 ? "complete" : "removed");
  if (r->held > 0 && n > 0 && (size_t)n < sizeof line)
    n += snprintf(line + n, sizeof line - (size_t)n, ", %llu left", (unsigned long long)r->held);
  if (pending > 0 && n > 0 && (size_t)n < sizeof line)
    snprintf(line + n, sizeof line - (size_t)n, ", %llu %s", (unsigned long long)pending,
             o->rate > 0 ? "waiting for --rate" : "in flight");
  fprintf(stderr, "\r%s\033[K", line);
  fflush(stderr);
}

void cli_progress_end(const cli_opts *o) {
  if (progress_wanted(o)) fputs("\r\033[K", stderr);
}

/* ---- the CLI's view of a move: the dry run's table, --json, progress --- */

typedef struct {
  const cli_opts *o;
  const ops_move_spec *m;
  json_object *items; /* --json: what was (or would be) done */
  bool header_done;
  size_t columns; /* the dry run's table: cli_output_width */
  char summary[256];
  /* Listed for a replay that cannot help them, or that the runbook asks
   * to take one at a time. */
  uint64_t invalid, poison;
  cli_rows rows; /* the dry run's table */
  int64_t now_ms;
} move_ctx;

/* One row of the dry run's table; complete: the ledger has it. */
static void print_would(void *ctx, const dlqb_item *it, bool complete) {
  move_ctx *c = ctx;
  if (!c->header_done) {
    printf("%-*s ", OPS_WOULD_WIDTH, "WOULD");
    cli_item_header(stdout);
    c->header_done = true;
  }
  /* What would happen, in the future tense: "replay", "skip". */
  printf("%-*s ", OPS_WOULD_WIDTH, complete ? "skip" : c->m->command);
  cli_item_print(stdout, it, c->now_ms);
  putchar('\n');
}

static void list_item(void *ctx, const dlqb_item *it, bool complete, int64_t now_ms) {
  move_ctx *c = ctx;
  const char *what = complete ? "skip_complete" : c->m->verb;
  if (!complete && strcmp(c->m->command, "replay") == 0) {
    c->invalid += strcmp(it->dlq_reason, dlqb_reason_name(DLQB_REASON_INVALID)) == 0;
    c->poison += strcmp(it->dlq_reason, dlqb_reason_name(DLQB_REASON_POISON)) == 0;
  }
  if (c->o->json) {
    json_object *j = cli_item_json(it, now_ms);
    json_object_object_add(j, "outcome", json_object_new_string(what));
    json_object_array_add(c->items, j);
    return;
  }
  c->now_ms = now_ms;
  cli_rows_add(&c->rows, it, complete);
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

/* The runbook's warnings for what a replay would send back (docs/runbook.md,
 * "What each dlq_reason means"): one line each, on stderr. */
static void replay_warnings(const move_ctx *c) {
  if (c->invalid > 0)
    fprintf(stderr,
            "dlq-bridge: %llu %s invalid_envelope: replaying cannot help; fix the producer,\n"
            "  re-submit the task, then resolve %s\n",
            (unsigned long long)c->invalid, c->invalid == 1 ? "is" : "are",
            c->invalid == 1 ? "it" : "them");
  if (c->poison > 0)
    fprintf(stderr,
            "dlq-bridge: %llu %s poison (crashed a worker): replay one at a time\n"
            "  (--limit 1) and watch it before the next\n",
            (unsigned long long)c->poison, c->poison == 1 ? "is" : "are");
}

static void show_tick(void *ctx, const dlqb_scan_result *r) {
  move_ctx *c = ctx;
  cli_progress(c->o, c->m->command, r);
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

ops_ctx cli_context(const cli_opts *o) {
  return (ops_ctx){.cfg = o->cfg,
                   .pipeline = cli_pipeline(),
                   .actor = o->actor,
                   .sel = &o->sel,
                   .window = o->window,
                   .window_set = o->window_set};
}

int cli_move_run(const cli_opts *o, const ops_move_spec *m, ops_session *session,
                 dlqb_stop_flag *stop) {
  ops_session *own = NULL;
  if (session == NULL && !m->dry_run) {
    int arc = cli_audit_start(o, m->command, &own);
    if (arc != EXIT_OK) return arc;
    session = own;
  }
  dlqb_audit *audit = ops_session_audit(session);
  move_ctx c = {.o = o, .m = m};
  if (o->json) c.items = json_object_new_array();
  if (m->dry_run && !o->json) {
    size_t w = cli_output_width(o->wide);
    c.columns = w;
    size_t fit = w == 0 ? 0 : w > OPS_WOULD_WIDTH + 1 ? w - OPS_WOULD_WIDTH - 1 : 1;
    cli_table_fit(fit);
    cli_rows_init(&c.rows, w > 0, fit, print_would, &c);
  } else {
    cli_rows_init(&c.rows, false, 0, print_would, &c);
  }
  ops_move_watch w = {.listed = list_item, .acked = list_acked, .tick = show_tick, .ctx = &c};
  ops_move_outcome *out = malloc(sizeof *out);
  if (out == NULL) {
    ops_session_close(own);
    json_object_put(c.items);
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  ops_ctx x = cli_context(o);
  ops_move_pass(&x, m, audit, &w, stop, out);
  cli_rows_flush(&c.rows);
  cli_progress_end(o);
  ops_session_close(own);
  int rc = EXIT_OK;
  const dlqb_scan_result *r = &out->r;
  if (out->not_started) {
    json_object_put(c.items);
    rc = cli_fail(&out->err);
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
    json_object_object_add(j, "unsettled", json_object_new_int64((int64_t)out->unsettled));
    json_object_object_add(j, "complete", json_object_new_boolean(early == NULL));
    if (early != NULL) json_object_object_add(j, "stopped_early", json_object_new_string(early));
    if (m->ledger_stats != NULL) json_object_object_add(j, "ledger", ledger_json(m));
    json_object_object_add(j, "items", c.items);
    cli_print_json(j);
  } else {
    if (m->dry_run && !c.header_done) printf("no items match\n");
    cli_table_note(stdout, c.columns);
    printf("%s\n", ops_move_summary(m->dry_run, m->dry_run ? m->command : m->verb, out->moved,
                                    m->ledger != NULL, out->skipped, out->left, r->depth_at_start,
                                    cli_pipeline()->dlq, c.summary, sizeof c.summary));
    if (m->ledger_stats != NULL && m->ledger_stats->unverified > 0)
      printf("(%zu unverified completions ignored: not from completion_writers)\n",
             m->ledger_stats->unverified);
  }
  replay_warnings(&c);
  if (r->refused > 0) {
    /* Each one is named in a warning line above. */
    cli_error("%s: %llu selected item%s left in %s: the broker would not take %s as %s", m->command,
              (unsigned long long)r->refused, r->refused == 1 ? "" : "s", cli_pipeline()->dlq,
              r->refused == 1 ? "it" : "them", r->refused == 1 ? "it is" : "they are");
    rc = EXIT_RUNTIME;
  }
  if (out->unsettled > 0) {
    char why[sizeof out->unsettled_id + 2 * DLQB_NAME_MAX + 256];
    cli_error("%s: %s", m->command, ops_unsettled_text(out, why, sizeof why));
    rc = EXIT_RUNTIME;
  }
  if (early != NULL) {
    cli_error("%s %s", m->command, early);
    rc = EXIT_RUNTIME;
  }
  free(out);
  return rc;
}

void cli_default_actor(char *buf, size_t len) { default_actor(buf, len); }

void cli_catalog_print(FILE *out, const dlqb_catalog_view *v) {
  char line[DLQB_ERROR_MAX + 512];
  fprintf(out, "dlq-bridge: %s\n", dlqb_catalog_view_text(v, line, sizeof line));
  if (dlqb_catalog_untrusted_text(v, line, sizeof line) != NULL)
    fprintf(out, "dlq-bridge: %s\n", line);
}

json_object *cli_catalog_json(const dlqb_catalog_view *v) {
  json_object *j = json_object_new_object();
  json_object_object_add(j, "source",
                         json_object_new_string(v->from_catalog ? "catalog" : "queue"));
  char at[DLQB_ISO_TIME_MAX];
  json_object_object_add(
      j, "as_of",
      v->from_catalog ? json_object_new_string(dlqb_iso_time(v->as_of_ms, at, sizeof at)) : NULL);
  json_object_object_add(j, "count", json_object_new_int64((int64_t)v->count));
  json_object_object_add(j, "depth", json_object_new_int64((int64_t)v->depth));
  json_object_object_add(j, "agrees", json_object_new_boolean(!v->differs));
  json_object_object_add(j, "compared", json_object_new_boolean(v->compared));
  json_object_object_add(j, "why_scan",
                         v->why_scan[0] ? json_object_new_string(v->why_scan) : NULL);
  json_object_object_add(
      j, "verified_at",
      v->verified ? json_object_new_string(dlqb_iso_time(v->verified_at, at, sizeof at)) : NULL);
  json_object_object_add(j, "read_seconds", json_object_new_double(v->read_seconds));
  json_object_object_add(j, "events_read", json_object_new_int64((int64_t)v->events));
  json_object_object_add(j, "from_checkpoint", json_object_new_boolean(v->from_checkpoint));
  json_object_object_add(j, "from_snapshot", json_object_new_boolean(v->from_snapshot));
  json_object_object_add(j, "untrusted_events", json_object_new_int64((int64_t)v->untrusted));
  return j;
}

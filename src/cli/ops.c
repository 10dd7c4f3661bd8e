/* Shared flags, operator identity and output of the ops commands. */
#include "ops.h"

#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
  o->rate = 0;
  o->window = DLQB_SCAN_WINDOW_DEFAULT;
  default_actor(o->actor, sizeof o->actor);
  int rc = cli_load(spec, argc, argv, &o->cfg, on_flag, ctx, help);
  /* Ops commands talk to a person: only warnings and errors in the log. */
  if (rc == EXIT_OK && !*help && o->cfg.log_level > DLQB_LOG_WARN)
    dlqb_log_setup(o->cfg.log_format, DLQB_LOG_WARN, o->cfg.instance);
  return rc;
}

bool ops_audit_open(const ops_opts *o, const char *command, dlqb_audit **out) {
  char writer[400];
  snprintf(writer, sizeof writer, "%s@%s", command, o->cfg.instance);
  dlqb_error err;
  if (dlqb_audit_open(&o->cfg, writer, out, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return false;
  }
  return true;
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
  put_str(o, "request_id", it->request_id);
  put_str(o, "source_system", it->source_system);
  put_str(o, "legal_basis", it->legal_basis);
  put_str(o, "action", it->action);
  json_object_object_add(o, "attempt", it->has_attempt ? json_object_new_int64(it->attempt) : NULL);
  json_object_object_add(o, "replay_count", json_object_new_int64(it->replay_count));
  put_str(o, "last_error", it->last_error);
  put_str(o, "dlq_reason", it->dlq_reason);
  json_object_object_add(
      o, "dlq_at", it->has_dlq_at ? json_object_new_string(dlqb_iso_time(it->dlq_at_ms, iso, sizeof iso))
                                  : NULL);
  json_object_object_add(o, "age_seconds",
                         known ? json_object_new_int64((int64_t)(age / 1000)) : NULL);
  return o;
}

void ops_item_header(FILE *out) {
  fprintf(out, "%-8s %-24s %-14s %-13s %-13s %3s %-16s %s\n", "AGE", "REQUEST_ID", "SOURCE",
          "LEGAL_BASIS", "ACTION", "ATT", "DLQ_REASON", "LAST_ERROR");
}

void ops_item_print(FILE *out, const dlqb_item *it, int64_t now_ms) {
  char age[32], att[24];
  uint64_t a = 0;
  bool known = dlqb_item_age(it, now_ms, &a);
  snprintf(att, sizeof att, it->has_attempt ? "%lld" : "-", (long long)it->attempt);
  fprintf(out, "%-8s %-24s %-14s %-13s %-13s %3s %-16s %s", ops_age_text(known, a, age, sizeof age),
          it->request_id[0] ? it->request_id : "-", it->source_system[0] ? it->source_system : "-",
          it->legal_basis[0] ? it->legal_basis : "-", it->action[0] ? it->action : "-", att,
          it->dlq_reason[0] ? it->dlq_reason : "-", it->last_error[0] ? it->last_error : "-");
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
  fprintf(stderr, "\r%s: %llu/%llu examined, %llu moved, %llu removed, %llu left in place   ",
          label, (unsigned long long)r->examined, (unsigned long long)r->depth_at_start,
          (unsigned long long)r->forwarded, (unsigned long long)r->removed,
          (unsigned long long)r->held);
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

typedef struct {
  const ops_opts *o;
  const ops_move_spec *m;
  dlqb_verdict_rule rule; /* what is held, skipped or moved */
  uint64_t selected;   /* items chosen so far (for --limit) */
  uint64_t would_move, would_skip; /* dry run */
  json_object *items;  /* --json or dry run: what was (or would be) done */
  int64_t now_ms;
  bool header_done;
} move_ctx;

static void list_item(move_ctx *c, const dlqb_item *it, const char *what) {
  if (c->o->json) {
    json_object *j = ops_item_json(it, c->now_ms);
    json_object_object_add(j, "outcome", json_object_new_string(what));
    json_object_array_add(c->items, j);
    return;
  }
  if (!c->header_done) {
    printf("%-20s ", "WOULD");
    ops_item_header(stdout);
    c->header_done = true;
  }
  printf("%-20s ", what);
  ops_item_print(stdout, it, c->now_ms);
  putchar('\n');
}

static dlqb_status move_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d, const dlqb_item *it,
                             dlqb_error *err) {
  move_ctx *c = ctx;
  dlqb_verdict v = dlqb_verdict_of(&c->rule, it, c->now_ms, c->selected);
  if (v.kind == DLQB_VERDICT_HOLD) {
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  c->selected++;
  bool complete = v.kind == DLQB_VERDICT_SKIP_COMPLETE;
  if (c->m->dry_run) {
    list_item(c, it, complete ? "skip_complete" : c->m->verb);
    if (complete) c->would_skip++;
    else c->would_move++;
    dlqb_scan_hold(s, d);
    return DLQB_OK;
  }
  if (complete) {
    dlqb_scan_ack(s, d, it, DLQB_EV_SKIPPED_COMPLETE, "", "already in the completion ledger");
    return DLQB_OK;
  }
  dlqb_hset sets[OPS_MAX_SETS];
  size_t n = c->m->sets(c->m->ctx, it, sets);
  return dlqb_scan_forward(s, d, it, c->m->target, sets, n, c->m->event,
                           c->m->cause ? c->m->cause : "", c->m->reason(c->m->ctx, it), err);
}

static void move_acked(void *ctx, const dlqb_hop *hop) {
  move_ctx *c = ctx;
  if (c->items == NULL || c->m->dry_run) return;
  json_object *j = json_object_new_object();
  put_str(j, "message_id", hop->message_id);
  put_str(j, "request_id", hop->request_id);
  put_str(j, "source_system", hop->source_system);
  put_str(j, "outcome", hop->event == DLQB_EV_SKIPPED_COMPLETE ? "skip_complete" : c->m->verb);
  json_object_array_add(c->items, j);
}

static void move_tick(void *ctx, const dlqb_scan *s) {
  move_ctx *c = ctx;
  dlqb_scan_result r;
  dlqb_scan_progress(s, &r);
  ops_progress(c->o, c->m->command, &r);
}

/* How replay read the completion ledger, for --json. */
static json_object *ledger_json(const ops_move_spec *m) {
  static const char *const cache_names[] = {"off", "used", "created", "rebuilt"};
  const dlqb_ledger_stats *ls = m->ledger_stats;
  json_object *j = json_object_new_object();
  json_object_object_add(j, "entries_read", json_object_new_int64((int64_t)ls->entries));
  json_object_object_add(j, "tasks", json_object_new_int64((int64_t)dlqb_ledger_size(m->ledger)));
  json_object_object_add(j, "from_cache", json_object_new_int64((int64_t)ls->cached));
  json_object_object_add(j, "cache", json_object_new_string(cache_names[ls->cache]));
  json_object_object_add(j, "cache_saved", json_object_new_boolean(ls->cache_saved));
  return j;
}

int ops_move_run(const ops_opts *o, const ops_move_spec *m, dlqb_stop_flag *stop) {
  dlqb_audit *audit = NULL;
  if (!m->dry_run && !ops_audit_open(o, m->command, &audit)) return EXIT_FAILURE_;
  move_ctx c = {.o = o, .m = m, .now_ms = dlqb_now_ms(),
                .rule = {.sel = &o->sel, .ledger = m->ledger}};
  /* With --rate the handler waits between moves while deliveries queue up
   * ahead of the confirms on the socket, so acks lag by up to a window: a
   * window of about half a second of moves keeps what a crash would
   * duplicate small. --window overrides it (e.g. for a selective replay
   * whose unselected items would fill a small window). */
  int window = o->window;
  if (m->rate > 0 && !o->window_set) {
    double w = m->rate / 2;
    window = w < 50 ? 50 : w > DLQB_SCAN_WINDOW_DEFAULT ? DLQB_SCAN_WINDOW_DEFAULT : (int)w;
  }
  if (o->json) c.items = json_object_new_array();
  char purpose[64];
  snprintf(purpose, sizeof purpose, "dlq-bridge %s", m->command);
  dlqb_scan_options so = {.queue = DLQB_Q_DLQ, .purpose = purpose, .actor = o->actor,
                          .audit = audit, .window = window, .rate = m->rate, .stop = stop,
                          .audit_mode = DLQB_PIPE_AUDIT_FAIL_FAST,
                          .on_item = move_item, .on_tick = move_tick, .after_ack = move_acked,
                          .ctx = &c};
  dlqb_scan_result r;
  dlqb_error err = {{0}};
  dlqb_status st = dlqb_scan_run(&o->cfg, &so, &r, &err);
  ops_progress_end(o);
  dlqb_audit_close(audit);
  int rc = EXIT_OK;
  if (st != DLQB_OK && !r.audit_failed) {
    json_object_put(c.items);
    return ops_fail(&err);
  }
  /* The trail lost midway: the pass stopped at once; say what moved (each
   * of those is recorded) and what may now be there twice. */
  char lost[DLQB_ERROR_MAX + 256];
  const char *early = ops_early_stop(&r, o->window);
  if (r.audit_failed) {
    snprintf(lost, sizeof lost, "stopped: %s; copies published but not recorded: %llu "
             "(their originals stay in %s, so %s may hold them twice)",
             err.msg[0] ? err.msg : "the audit log cannot be written",
             (unsigned long long)r.unsettled_copies, DLQB_Q_DLQ, m->target);
    early = lost;
  }
  uint64_t moved = m->dry_run ? c.would_move : r.forwarded;
  uint64_t skipped = m->dry_run ? c.would_skip : r.removed;
  uint64_t taken = m->dry_run ? 0 : r.forwarded + r.removed;
  uint64_t left = r.depth_at_start > taken ? r.depth_at_start - taken : 0;
  if (o->json) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "dry_run", json_object_new_boolean(m->dry_run));
    json_object_object_add(j, m->verb, json_object_new_int64((int64_t)moved));
    json_object_object_add(j, "skipped_complete", json_object_new_int64((int64_t)skipped));
    json_object_object_add(j, "left", json_object_new_int64((int64_t)left));
    json_object_object_add(j, "examined", json_object_new_int64((int64_t)r.examined));
    json_object_object_add(j, "refused", json_object_new_int64((int64_t)r.refused));
    json_object_object_add(j, "complete", json_object_new_boolean(early == NULL));
    if (early != NULL) json_object_object_add(j, "stopped_early", json_object_new_string(early));
    if (m->ledger_stats != NULL) json_object_object_add(j, "ledger", ledger_json(m));
    json_object_object_add(j, "items", c.items);
    ops_print_json(j);
  } else {
    if (m->dry_run && !c.header_done) printf("no items match\n");
    char skip[64] = "";
    if (m->ledger != NULL)
      snprintf(skip, sizeof skip, ", skipped as complete %llu", (unsigned long long)skipped);
    printf("%s%s %llu%s, left %llu in %s\n", m->dry_run ? "dry run: would have " : "", m->verb,
           (unsigned long long)moved, skip, (unsigned long long)left, DLQB_Q_DLQ);
  }
  if (r.refused > 0) {
    /* Each one is named in a warning line above. */
    cli_error("%s: %llu selected item%s left in %s: the broker would not take %s as %s",
              m->command, (unsigned long long)r.refused, r.refused == 1 ? "" : "s", DLQB_Q_DLQ,
              r.refused == 1 ? "it" : "them", r.refused == 1 ? "it is" : "they are");
    rc = EXIT_FAILURE_;
  }
  if (early != NULL) {
    cli_error("%s %s", m->command, early);
    rc = EXIT_FAILURE_;
  }
  return rc;
}

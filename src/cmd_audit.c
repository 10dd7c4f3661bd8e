/* dlq-bridge audit: commands on the tamper-evident audit trail. Its
 * subcommands ("audit verify", "audit show") are a second small table in
 * this file; both verify the whole log first. */
#include <json-c/json.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/audit.h"
#include "dlqb/log.h"
#include "dlqb/reconcile.h"
#include "dlqb/scan.h"
#include "dlqb/topology.h"

/* ---- what verify and show share: which files, which seal, the key ---- */

/* The flags both subcommands take: which seal, and where checking starts. */
#define LOG_FLAGS                                                                           \
  {"seal", true, "FILE", "seal to check the tail against (default: the last FILE + .seal)"}, \
      {"no-seal", false, NULL, "do not check a seal (a cut tail then goes unnoticed)"},      \
      {"partial", false, NULL,                                                              \
       "accept a first file that continues an archived one (checks from there on)"}

static const cli_flag verify_flags[] = {
    LOG_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_flag show_flags[] = {
    {"request-id", true, "ID", "the hops of the task(s) with this request_id"},
    {"message-id", true, "ID", "the hops of the message with this message_id"},
    {"json", false, NULL, "print JSON for scripts instead of text"},
    LOG_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_flag reconcile_flags[] = {
    {"json", false, NULL, "print JSON for scripts instead of text"},
    {"window", true, "N", "DLQ items read in one pass, 1 to 65535 (default 65535)"},
    LOG_FLAGS,
    {NULL, false, NULL, NULL},
};

#define FILES_DETAILS                                                                    \
  "FILEs are the log's files oldest first; without them, the configured\n"             \
  "DLQ_BRIDGE_AUDIT_LOG and its rotated files. The key is DLQ_BRIDGE_AUDIT_KEY_FILE\n" \
  "(--audit-key-file).\n"

static const cli_spec verify_spec = {
    .name = "audit verify",
    .summary = "check that an audit log is complete and unaltered",
    .usage = "dlq-bridge audit verify [FILE...] [--seal FILE | --no-seal] [--partial] [settings]",
    .details =
        "Checks every record's HMAC-SHA256, every writer's chain of records, the links\n"
        "between rotated files, and the seal that catches a cut tail.\n" FILES_DETAILS
        "Exit status: 0 intact; 1 not intact (the first bad line is named) or unreadable;\n"
        "2 usage or configuration error.",
    .flags = verify_flags,
    .settings = true,
};

static const cli_spec show_spec = {
    .name = "audit show",
    .summary = "the recorded path of one task or message, from a verified log",
    .usage = "dlq-bridge audit show (--request-id ID | --message-id ID) [FILE...] [--json]\n"
             "       [--seal FILE | --no-seal] [--partial] [settings]",
    .details =
        "Verifies the log as `audit verify` does and, only when it is intact, lists\n"
        "every hop recorded for the task (retries, dead-lettering, replays, escalation,\n"
        "resolution) in time order, with who acted. Both filters given: both must match.\n"
        FILES_DETAILS
        "Exit status: 0 intact (also when nothing was recorded for the task); 1 not\n"
        "intact or unreadable, and no hop is shown; 2 usage or configuration error.",
    .flags = show_flags,
    .settings = true,
};

static const cli_spec reconcile_spec = {
    .name = "audit reconcile",
    .summary = "check that the DLQ holds what the audit trail put there",
    .usage = "dlq-bridge audit reconcile [FILE...] [--json] [--window N]\n"
             "       [--seal FILE | --no-seal] [--partial] [settings]",
    .details =
        "Reads every item of dsr.dlq.manual without consuming it (as inspect does), then\n"
        "verifies the log as `audit verify` does and counts, per message_id, the hops\n"
        "recorded into the DLQ and out of it. MISSING: recorded into the DLQ and never\n"
        "out, but not in it (removed behind dlq-bridge's back: a purge, a move in the\n"
        "management UI, a policy). UNRECORDED: in the DLQ with no record of entering it\n"
        "(the audit trail was off then). Hops recorded after the queue was read are\n"
        "not counted as missing. Needs the broker settings and the audit key and log.\n"
        FILES_DETAILS
        "Exit status: 0 nothing missing; 1 something missing, the log not intact, or\n"
        "the DLQ not read whole; 2 usage or configuration error.",
    .flags = reconcile_flags,
    .settings = true,
};

typedef struct {
  const char **files; /* positional FILEs (room for argc entries) */
  size_t nfiles;
  const char *seal;
  bool no_seal, partial;
  const char *request_id, *message_id; /* audit show */
  bool json;
  int window; /* audit reconcile: the DLQ read in one pass */
  /* Runs after the options are checked and before the log is read
   * (audit reconcile reads the queue there); returns an exit status. */
  int (*prepare)(void *ctx, const dlqb_config *cfg);
  void *prepare_ctx;
} audit_opts;

static dlqb_status audit_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  audit_opts *o = ctx;
  if (flag != NULL && value != NULL && value[0] == '\0')
    return dlqb_fail(err, DLQB_EINVAL, "--%s needs a non-empty value", flag);
  if (flag == NULL) o->files[o->nfiles++] = value;
  else if (strcmp(flag, "seal") == 0) o->seal = value;
  else if (strcmp(flag, "no-seal") == 0) o->no_seal = true;
  else if (strcmp(flag, "partial") == 0) o->partial = true;
  else if (strcmp(flag, "request-id") == 0) o->request_id = value;
  else if (strcmp(flag, "message-id") == 0) o->message_id = value;
  else if (strcmp(flag, "json") == 0) o->json = true;
  else if (strcmp(flag, "window") == 0) {
    char *end;
    long n = strtol(value, &end, 10);
    if (*end != '\0' || n < 1 || n > DLQB_SCAN_WINDOW_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "--window: '%s' is not a number from 1 to %d", value,
                       DLQB_SCAN_WINDOW_MAX);
    o->window = (int)n;
  }
  return DLQB_OK;
}

static void print_summary(const dlqb_audit_summary *s, bool sealed) {
  printf("audit log intact: %lu record%s in %lu chain%s (%lu ended cleanly, %lu open) across "
         "%lu file%s, %lu rotation link%s checked\n",
         s->records, s->records == 1 ? "" : "s", s->chains, s->chains == 1 ? "" : "s",
         s->chains_ended, s->chains - s->chains_ended, s->files, s->files == 1 ? "" : "s",
         s->rotations, s->rotations == 1 ? "" : "s");
  if (sealed)
    printf("seal: the tail is complete for %lu sealed chain%s\n", s->sealed,
           s->sealed == 1 ? "" : "s");
  else
    printf("seal: not checked (--no-seal): a cut tail would go unnoticed\n");
  if (s->partial)
    printf("partial: started at a rotation; records before it were not checked\n");
}

/* Parses the command line, loads the key and verifies the log, showing
 * every accepted line to visit. Returns the exit status; on EXIT_OK *sum
 * holds the summary and *sealed whether a seal was checked. *help is set
 * when only the help was printed. */
static int load_and_verify(const cli_spec *spec, int argc, char **argv, audit_opts *o,
                           dlqb_audit_visit_fn visit, void *ctx, dlqb_audit_summary *sum,
                           bool *sealed, bool *help) {
  dlqb_config cfg;
  char **listed = NULL;
  size_t nlisted = 0;
  unsigned char key[DLQB_AUDIT_KEY_MAX];
  size_t key_len = 0;
  char seal[DLQB_CONFIG_STR_MAX + 16];
  dlqb_error err = {{0}};
  o->files = calloc((size_t)argc + 1, sizeof *o->files);
  if (o->files == NULL) {
    cli_error("out of memory");
    return EXIT_FAILURE_;
  }
  int rc = cli_load(spec, argc, argv, &cfg, audit_flag, o, help);
  if (rc != EXIT_OK || *help) goto done;
  rc = EXIT_USAGE;
  if (o->seal != NULL && o->no_seal) {
    cli_error("--seal and --no-seal exclude each other");
    goto done;
  }
  if (spec == &show_spec && o->request_id == NULL && o->message_id == NULL) {
    cli_error("audit show needs --request-id or --message-id (see 'dlq-bridge audit show "
              "--help')");
    goto done;
  }
  if (o->nfiles == 0 && cfg.audit_log[0] == '\0') {
    cli_error("no audit log given (name the files, or set DLQ_BRIDGE_AUDIT_LOG)");
    goto done;
  }
  if (cfg.audit_key_file[0] == '\0') {
    cli_error("no audit key given (set DLQ_BRIDGE_AUDIT_KEY_FILE or --audit-key-file)");
    goto done;
  }
  dlqb_status st = dlqb_audit_key_load(cfg.audit_key_file, key, &key_len, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    rc = st == DLQB_EINVAL ? EXIT_USAGE : EXIT_FAILURE_;
    goto done;
  }
  rc = EXIT_FAILURE_;
  if (o->nfiles == 0) {
    if (dlqb_audit_list_files(cfg.audit_log, &listed, &nlisted, &err) != DLQB_OK) {
      cli_error("%s", err.msg);
      goto done;
    }
  }
  const char *const *files = nlisted > 0 ? (const char *const *)listed : o->files;
  size_t nfiles = nlisted > 0 ? nlisted : o->nfiles;
  const char *seal_path = NULL;
  if (!o->no_seal) {
    if (o->seal != NULL) {
      seal_path = o->seal;
    } else {
      const char *last = o->nfiles > 0 ? files[nfiles - 1] : cfg.audit_log;
      snprintf(seal, sizeof seal, "%s%s", last, DLQB_AUDIT_SEAL_SUFFIX);
      seal_path = seal;
    }
  }
  if (o->prepare != NULL && (rc = o->prepare(o->prepare_ctx, &cfg)) != EXIT_OK) goto done;
  rc = EXIT_FAILURE_;
  st = dlqb_audit_verify_files(key, key_len, files, nfiles, seal_path, o->partial, visit, ctx,
                               sum, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    goto done;
  }
  *sealed = seal_path != NULL;
  rc = EXIT_OK;
done:
  OPENSSL_cleanse(key, sizeof key);
  dlqb_audit_files_free(listed, nlisted);
  free(o->files);
  o->files = NULL;
  return rc;
}

/* ---- audit verify ---- */

static int audit_verify(int argc, char **argv) {
  audit_opts o = {0};
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc = load_and_verify(&verify_spec, argc, argv, &o, NULL, NULL, &sum, &sealed, &help);
  if (help) cli_print_help(&verify_spec, stdout);
  else if (rc == EXIT_OK) print_summary(&sum, sealed);
  return rc;
}

/* ---- audit show ---- */

/* The matching records, parsed, in log order. */
typedef struct {
  const audit_opts *o;
  dlqb_audit_filter filter;
  bool filter_set; /* the options are parsed before the first line comes */
  json_object **hops;
  size_t n, cap;
} show_ctx;

static const char *member(json_object *rec, const char *key) {
  json_object *v;
  if (!json_object_object_get_ex(rec, key, &v) || !json_object_is_type(v, json_type_string))
    return NULL;
  return json_object_get_string(v);
}

static bool collect_hop(void *arg, const char *line, size_t len) {
  show_ctx *c = arg;
  if (!c->filter_set) {
    dlqb_audit_filter_init(&c->filter, c->o->request_id, c->o->message_id);
    c->filter_set = true;
  }
  if (!dlqb_audit_filter_match(&c->filter, line, len)) return true;
  json_tokener *tok = json_tokener_new();
  json_object *rec = tok != NULL ? json_tokener_parse_ex(tok, line, (int)len) : NULL;
  if (tok != NULL) json_tokener_free(tok);
  if (rec == NULL) return false; /* a matching line parsed once already: memory */
  if (c->n == c->cap) {
    size_t ncap = c->cap ? c->cap * 2 : 16;
    json_object **grown = realloc(c->hops, ncap * sizeof *grown);
    if (grown == NULL) {
      json_object_put(rec);
      return false;
    }
    c->hops = grown;
    c->cap = ncap;
  }
  c->hops[c->n++] = rec;
  return true;
}

/* Time order across writers; within one writer the log order already is
 * (equal times keep it: the sort below is stable by index). */
static int by_time(const void *pa, const void *pb) {
  json_object *a = *(json_object *const *)pa, *b = *(json_object *const *)pb;
  const char *ta = member(a, "time"), *tb = member(b, "time");
  return strcmp(ta ? ta : "", tb ? tb : "");
}

static void stable_sort_by_time(json_object **hops, size_t n) {
  /* Insertion sort: a task has a handful of hops. */
  for (size_t i = 1; i < n; i++) {
    json_object *h = hops[i];
    size_t j = i;
    while (j > 0 && by_time(&hops[j - 1], &h) > 0) {
      hops[j] = hops[j - 1];
      j--;
    }
    hops[j] = h;
  }
}

static void print_hop_text(json_object *h) {
  json_object *attempt;
  const char *cause = member(h, "cause"), *reason = member(h, "reason");
  printf("%s  %-16s %s -> %s", member(h, "time") ? member(h, "time") : "?",
         member(h, "event") ? member(h, "event") : "?",
         member(h, "from") ? member(h, "from") : "?", member(h, "to") ? member(h, "to") : "?");
  if (json_object_object_get_ex(h, "attempt", &attempt))
    printf("  attempt %lld", (long long)json_object_get_int64(attempt));
  if (cause != NULL && cause[0] != '\0') printf("  cause %s", cause);
  if (reason != NULL && reason[0] != '\0') printf("  reason \"%s\"", reason);
  printf("  by %s (%s)\n", member(h, "actor") ? member(h, "actor") : "?",
         member(h, "writer") ? member(h, "writer") : "?");
}

static void print_show(const audit_opts *o, json_object **hops, size_t n,
                       const dlqb_audit_summary *sum, bool sealed) {
  if (o->json) {
    json_object *out = json_object_new_object();
    json_object *arr = json_object_new_array();
    json_object_object_add(out, "intact", json_object_new_boolean(1));
    json_object_object_add(out, "records", json_object_new_int64((int64_t)sum->records));
    json_object_object_add(out, "files", json_object_new_int64((int64_t)sum->files));
    json_object_object_add(out, "seal_checked", json_object_new_boolean(sealed));
    if (o->request_id != NULL)
      json_object_object_add(out, "request_id", json_object_new_string(o->request_id));
    if (o->message_id != NULL)
      json_object_object_add(out, "message_id", json_object_new_string(o->message_id));
    for (size_t i = 0; i < n; i++) json_object_array_add(arr, json_object_get(hops[i]));
    json_object_object_add(out, "hops", arr);
    printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN |
                                                           JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(out);
    return;
  }
  print_summary(sum, sealed);
  const char *what = o->request_id != NULL ? "request_id" : "message_id";
  const char *id = o->request_id != NULL ? o->request_id : o->message_id;
  if (n == 0) {
    printf("no hop recorded for %s %s\n", what, id);
    return;
  }
  printf("%zu hop%s recorded for %s %s:\n", n, n == 1 ? "" : "s", what, id);
  for (size_t i = 0; i < n; i++) print_hop_text(hops[i]);
}

static int audit_show(int argc, char **argv) {
  audit_opts o = {0};
  show_ctx c = {.o = &o};
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc = load_and_verify(&show_spec, argc, argv, &o, collect_hop, &c, &sum, &sealed, &help);
  if (help) {
    cli_print_help(&show_spec, stdout);
  } else if (rc == EXIT_OK) {
    stable_sort_by_time(c.hops, c.n);
    print_show(&o, c.hops, c.n, &sum, sealed);
  }
  for (size_t i = 0; i < c.n; i++) json_object_put(c.hops[i]);
  free(c.hops);
  return rc;
}

/* ---- audit reconcile ---- */

typedef struct {
  const audit_opts *o;
  dlqb_reconcile *r;
  char at[DLQB_ISO_TIME_MAX]; /* when the queue was read: later records are not missing */
  uint64_t items, without_id;
  bool read_whole;
  dlqb_scan_result scan;
  /* The verdict, filled by classify. */
  json_object *missing, *unrecorded, *during, *extra;
  uint64_t expected;
} reconcile_ctx;

static dlqb_status snapshot_item(void *ctx, dlqb_scan *s, const dlqb_delivery *d,
                                 const dlqb_item *it, dlqb_error *err) {
  reconcile_ctx *c = ctx;
  dlqb_scan_hold(s, d); /* nothing moves: every item returns to its place */
  c->items++;
  if (it->message_id[0] == '\0') {
    c->without_id++;
    return DLQB_OK;
  }
  return dlqb_reconcile_present(c->r, it->message_id, it->request_id, err);
}

static bool tally_line(void *ctx, const char *line, size_t len) {
  return dlqb_reconcile_line(ctx, line, len);
}

static int read_dlq(void *ctx, const dlqb_config *cfg) {
  reconcile_ctx *c = ctx;
  dlqb_iso_time(dlqb_now_ms(), c->at, sizeof c->at);
  dlqb_scan_options so = {.queue = DLQB_Q_DLQ, .purpose = "dlq-bridge audit reconcile",
                          .actor = "audit reconcile",
                          .window = c->o->window > 0 ? c->o->window : DLQB_SCAN_WINDOW_MAX,
                          .stop = cli_stop_flag(), .on_item = snapshot_item, .ctx = c};
  dlqb_error err;
  dlqb_status st = dlqb_scan_run(cfg, &so, &c->scan, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_FAILURE_;
  }
  if (c->scan.window_full || c->scan.interrupted) {
    cli_error("read only %llu of the %llu items in %s (%s); nothing was compared",
              (unsigned long long)c->scan.examined, (unsigned long long)c->scan.depth_at_start,
              DLQB_Q_DLQ,
              c->scan.interrupted ? "interrupted" : "the window filled: --window up to 65535");
    return EXIT_FAILURE_;
  }
  return EXIT_OK;
}

static json_object *entry_json(const dlqb_reconcile_entry *e) {
  json_object *j = json_object_new_object();
  json_object_object_add(j, "message_id", json_object_new_string(e->message_id));
  json_object_object_add(j, "request_id", json_object_new_string(e->request_id));
  json_object_object_add(j, "present", json_object_new_int(e->present));
  json_object_object_add(j, "recorded_net", json_object_new_int64(e->net));
  if (e->last_time[0] != '\0') {
    json_object_object_add(j, "last_event", json_object_new_string(e->last_event));
    json_object_object_add(j, "last_time", json_object_new_string(e->last_time));
    json_object_object_add(j, "last_writer", json_object_new_string(e->last_writer));
  }
  return j;
}

static void classify(void *ctx, const dlqb_reconcile_entry *e) {
  reconcile_ctx *c = ctx;
  bool after = e->last_time[0] != '\0' && strcmp(e->last_time, c->at) >= 0;
  if (e->net > 0 && !after) c->expected++;
  if (e->present == 0 && e->net > 0)
    json_object_array_add(after ? c->during : c->missing, entry_json(e));
  else if (e->present > 0 && e->entered == 0)
    json_object_array_add(c->unrecorded, entry_json(e));
  else if (e->present > e->net && e->net > 0)
    json_object_array_add(c->extra, entry_json(e));
  /* present with net 0 but entered: it left after the snapshot (recorded). */
}

static void print_entries(const char *label, json_object *arr, const char *why) {
  size_t n = json_object_array_length(arr);
  for (size_t i = 0; i < n; i++) {
    json_object *j = json_object_array_get_idx(arr, i), *v;
    printf("%-11s %s  request_id %s", label,
           json_object_get_string(json_object_object_get(j, "message_id")),
           json_object_get_string(json_object_object_get(j, "request_id")));
    if (json_object_object_get_ex(j, "last_event", &v))
      printf("  %s at %s by %s", json_object_get_string(v),
             json_object_get_string(json_object_object_get(j, "last_time")),
             json_object_get_string(json_object_object_get(j, "last_writer")));
    printf("  (%s)\n", why);
  }
}

static void print_reconcile(reconcile_ctx *c, const dlqb_audit_summary *sum, bool sealed) {
  size_t nm = json_object_array_length(c->missing), nu = json_object_array_length(c->unrecorded),
         nd = json_object_array_length(c->during), ne = json_object_array_length(c->extra);
  if (c->o->json) {
    json_object *out = json_object_new_object(), *dlq = json_object_new_object();
    json_object_object_add(out, "intact", json_object_new_boolean(1));
    json_object_object_add(out, "records", json_object_new_int64((int64_t)sum->records));
    json_object_object_add(out, "seal_checked", json_object_new_boolean(sealed));
    json_object_object_add(dlq, "read_at", json_object_new_string(c->at));
    json_object_object_add(dlq, "items", json_object_new_int64((int64_t)c->items));
    json_object_object_add(dlq, "without_message_id", json_object_new_int64((int64_t)c->without_id));
    json_object_object_add(out, "dlq", dlq);
    json_object_object_add(out, "recorded_in_dlq", json_object_new_int64((int64_t)c->expected));
    json_object_object_add(out, "missing", json_object_get(c->missing));
    json_object_object_add(out, "unrecorded", json_object_get(c->unrecorded));
    json_object_object_add(out, "recorded_after_read", json_object_get(c->during));
    json_object_object_add(out, "extra_copies", json_object_get(c->extra));
    printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN |
                                                           JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(out);
    return;
  }
  print_summary(sum, sealed);
  printf("%s read at %s: %llu item%s (%llu without a message_id, not compared)\n", DLQB_Q_DLQ,
         c->at, (unsigned long long)c->items, c->items == 1 ? "" : "s",
         (unsigned long long)c->without_id);
  printf("the audit trail puts %llu message%s there; missing %zu, unrecorded %zu, recorded after "
         "the read %zu, copies beyond the records %zu\n",
         (unsigned long long)c->expected, c->expected == 1 ? "" : "s", nm, nu, nd, ne);
  print_entries("MISSING", c->missing,
                "recorded into the DLQ, never out, not in it: removed outside dlq-bridge");
  print_entries("UNRECORDED", c->unrecorded, "in the DLQ, no record of it entering");
  print_entries("EXTRA", c->extra, "more copies than records: a redelivery's duplicate");
  if (nm == 0) printf("nothing missing\n");
}

static int audit_reconcile(int argc, char **argv) {
  audit_opts o = {.prepare = read_dlq};
  reconcile_ctx c = {.o = &o};
  o.prepare_ctx = &c;
  c.r = dlqb_reconcile_new();
  c.missing = json_object_new_array();
  c.unrecorded = json_object_new_array();
  c.during = json_object_new_array();
  c.extra = json_object_new_array();
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc = EXIT_FAILURE_;
  if (c.r == NULL || c.missing == NULL || c.unrecorded == NULL || c.during == NULL ||
      c.extra == NULL) {
    cli_error("out of memory");
  } else {
    rc = load_and_verify(&reconcile_spec, argc, argv, &o, tally_line, c.r, &sum, &sealed, &help);
    if (help) {
      cli_print_help(&reconcile_spec, stdout);
    } else if (rc == EXIT_OK) {
      dlqb_reconcile_each(c.r, classify, &c);
      print_reconcile(&c, &sum, sealed);
      if (json_object_array_length(c.missing) > 0) rc = EXIT_FAILURE_;
    }
  }
  json_object_put(c.missing);
  json_object_put(c.unrecorded);
  json_object_put(c.during);
  json_object_put(c.extra);
  dlqb_reconcile_free(c.r);
  return rc;
}

/* ---- the subcommand table ---- */

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv);
} subcommand;

static const subcommand subcommands[] = {
    {"verify", audit_verify},
    {"show", audit_show},
    {"reconcile", audit_reconcile},
};
#define NSUB (sizeof subcommands / sizeof subcommands[0])

const cli_spec cmd_audit_spec = {
    .name = "audit",
    .summary = "check the tamper-evident audit trail; show a task's path; reconcile the DLQ with it",
    .usage = "dlq-bridge audit SUBCOMMAND [options]",
    .details = "subcommands:\n"
               "  verify [FILE...]   check that the audit log is complete and unaltered\n"
               "  show --request-id ID [FILE...]\n"
               "                     every hop recorded for a task, from a verified log\n"
               "  reconcile [FILE...]\n"
               "                     check that the DLQ holds what the audit trail put there\n"
               "\n"
               "`dlq-bridge audit SUBCOMMAND --help` shows a subcommand's options.",
    .flags = NULL,
    .settings = false,
};

int cmd_audit(int argc, char **argv) {
  if (argc < 2) {
    cli_print_help(&cmd_audit_spec, stderr);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    cli_print_help(&cmd_audit_spec, stdout);
    return EXIT_OK;
  }
  for (size_t i = 0; i < NSUB; i++)
    if (strcmp(subcommands[i].name, argv[1]) == 0) return subcommands[i].run(argc - 1, argv + 1);
  cli_error("unknown audit subcommand '%s' (see dlq-bridge audit --help)", argv[1]);
  return EXIT_USAGE;
}

/* dlq-bridge audit report and audit verify-report: every request the audit
 * trail saw in a period with its last known state and response time, and
 * the statutory figures per legal basis and action, signed with the
 * writer's Ed25519 key; and the check of such a report with the public
 * keys alone. The derivation and the signature are pure (dlqb/report.h);
 * this file reads the broker and prints. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit_cli.h"
#include "dlqb/duration.h"
#include "dlqb/file.h"
#include "dlqb/link.h"
#include "dlqb/log.h"
#include "dlqb/names.h"
#include "dlqb/report.h"
#include "dlqb/text.h"
#include "dlqb/topology.h"
#include "ops_cli.h"

/* How long the ledger may stay silent before its end marker (as replay). */
#define LEDGER_IDLE_MS 10000

static const cli_flag report_flags[] = {
    {"from", true, "TIME",
     "start of the period: ISO 8601 UTC (2026-11-01T00:00:00Z) or an age (30d)"},
    {"to", true, "TIME", "end of the period, as --from (default: now)"},
    {"json", false, NULL, "print the signed report as one JSON line for scripts instead of text"},
    {"actor", true, "NAME", "who makes the report, named in it (default: your login name)"},
    {"output", true, "FILE", "write the signed report to FILE, a new file (default: stdout)"},
    {"window", true, "N",
     "DLQ items read ahead at once, 1 to 65535 (default 5000); any depth is read"},
    LOG_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_spec report_spec = {
    .name = "audit report",
    .summary = "every request seen in a period, its last known state and response time, signed",
    .usage = "dlq-bridge audit report --from TIME [--to TIME] [FILE...] [--json]\n"
             "       [--actor NAME] [--output FILE] [--window N] [--seal FILE | --no-seal]\n"
             "       [--partial] [settings]",
    .details = "Lists every request (request_id, source_system) with a hop recorded between\n"
               "--from and --to, and its last known state now: completed (in the completion\n"
               "ledger from a completion writer), in_review (claimed by whom, or unclaimed),\n"
               "in_dlq, resolved (with its note), waiting (last sent to dsr.work or a retry\n"
               "queue, no completion yet), or unknown (with why). The state counts add up to\n"
               "the number of requests. Then, per legal basis and action, the statutory\n"
               "figures: how many, how many completed or resolved, the median and mean days\n"
               "from receipt (as the router recorded it at the first failure) to completion\n"
               "(the completion entry's timestamp) or resolution, how many closed past the\n"
               "deadline the deadlines setting gives, and how many are open past it now.\n"
               "dsr.dlq.manual and compliance_review are read without moving anything (as\n"
               "reconcile does); dsr.work and the retry queues are not read (holding a quorum\n"
               "queue's message counts as a delivery on RabbitMQ 4): only their message counts\n"
               "are shown. The log is verified first, as `audit verify` does. The report is\n"
               "signed with DLQ_BRIDGE_AUDIT_KEY_FILE (whose public key must be among\n"
               "DLQ_BRIDGE_AUDIT_PUBLIC_KEYS) and names who made it; check it with\n"
               "`dlq-bridge audit verify-report REPORT`. No payload is read or shown.\n"
               "FILEs are the log's files oldest first; without them, the configured\n"
               "DLQ_BRIDGE_AUDIT_LOG and its rotated files. TIME is ISO 8601 UTC, \"now\", or an\n"
               "age before now (30d, 12h). Needs the broker settings and the completion\n"
               "writers, as replay does (the report appends a marker to dsr.completed to find\n"
               "its end).\n"
               "Exit status: 0 report printed; 1 the log not intact, the broker or the ledger\n"
               "not readable; 2 usage or configuration error (a bad --from or --to).",
    .flags = report_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, "audit_log", "audit_public_keys",
                                  "audit_key_file", "completion_writers", "deadlines",
                                  CLI_USES_TOPOLOGY, CLI_USES_LOG, NULL},
};

/* A quorum queue's message count, from a passive declare (moves nothing). */
typedef struct {
  char name[DLQB_NAME_MAX];
  uint32_t depth;
  bool known;
} queue_count;

#define COUNTED_MAX (DLQB_MAX_RETRY_DELAYS + 2)

typedef struct {
  audit_opts *o;
  const char *from_text, *to_text, *actor_flag, *output;
  int64_t from_ms, to_ms, made_ms;
  char actor[128], broker_user[128], writer[300];
  EVP_PKEY *key;
  char key_id[DLQB_AUDIT_KEY_ID_HEX + 1];
  dlqb_report *r;
  dlqb_ledger *done, *unverified;
  dlqb_ledger_stats ledger;
  char completion_writers[DLQB_CONFIG_STR_MAX];
  dlqb_deadlines deadlines; /* the config's, which the report's lifetime outlives */
  char deadlines_text[DLQB_CONFIG_STR_MAX];
  ops_queue_read reads[2]; /* the DLQ, compliance_review */
  queue_count counted[COUNTED_MAX];
  size_t ncounted;
  bool oom;
} report_ctx;

static dlqb_status report_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  report_ctx *c = ctx;
  (void)err;
  if (strcmp(flag, "from") == 0) c->from_text = value;
  else if (strcmp(flag, "to") == 0) c->to_text = value;
  else if (strcmp(flag, "actor") == 0) c->actor_flag = value;
  else if (strcmp(flag, "output") == 0) c->output = value;
  return DLQB_OK;
}

/* ISO 8601 UTC, "now", or an age before now ("30d", "12h"). */
static bool parse_when(const char *flag, const char *text, int64_t now, int64_t *out) {
  uint64_t ago = 0;
  dlqb_error err;
  char q[DLQB_QUOTE_BUF];
  if (strcmp(text, "now") == 0) {
    *out = now;
    return true;
  }
  if (dlqb_iso_time_parse(text, strlen(text), out) == DLQB_OK) return true;
  if (dlqb_duration_parse(text, &ago, &err) == DLQB_OK && ago <= (uint64_t)now) {
    *out = now - (int64_t)ago;
    return true;
  }
  cli_error("--%s: '%s' is neither an ISO 8601 UTC time (2026-11-01T00:00:00Z) nor an age "
            "(30d, 12h)",
            flag, dlqb_text_quote(q, text, strlen(text)));
  return false;
}

static dlqb_status on_dlq_item(void *ctx, const dlqb_item *it, dlqb_error *err) {
  report_ctx *c = ctx;
  return dlqb_report_item(c->r, cli_pipeline()->dlq, it->message_id, it->request_id,
                          it->source_system, it->owner, err);
}

static dlqb_status on_review_item(void *ctx, const dlqb_item *it, dlqb_error *err) {
  report_ctx *c = ctx;
  return dlqb_report_item(c->r, cli_pipeline()->review, it->message_id, it->request_id,
                          it->source_system, it->owner, err);
}

/* The signing key: loaded, and among the public keys an auditor is given
 * (a report they cannot check is refused before anything is read). */
static int load_key(report_ctx *c, const dlqb_config *cfg) {
  dlqb_error err;
  if (cfg->audit.key_file[0] == '\0') {
    cli_error("audit report signs the report: set DLQ_BRIDGE_AUDIT_KEY_FILE (or "
              "--audit-key-file) to this host's Ed25519 private key");
    return EXIT_USAGE;
  }
  dlqb_status st = dlqb_audit_key_load(cfg->audit.key_file, &c->key, c->key_id, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    return st == DLQB_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
  }
  dlqb_audit_keyring *ring = dlqb_audit_keyring_new();
  if (ring == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  int rc = EXIT_OK;
  if (dlqb_audit_keyring_add(ring, cfg->audit.public_keys, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    rc = EXIT_USAGE;
  } else {
    /* A report the verifier would refuse is no report: say so now. */
    char probe_body[] = "probe\n";
    char *signed_probe = NULL;
    size_t n = 0;
    dlqb_report_check chk;
    if (dlqb_report_sign(c->key, c->key_id, probe_body, sizeof probe_body - 1, false, &signed_probe,
                         &n, &err) != DLQB_OK) {
      cli_error("%s", err.msg);
      rc = EXIT_RUNTIME;
    } else if (dlqb_report_verify(ring, signed_probe, n, &chk, &err) != DLQB_OK) {
      cli_error("the signing key %s (DLQ_BRIDGE_AUDIT_KEY_FILE) would not verify: %s", c->key_id,
                err.msg);
      rc = EXIT_USAGE;
    }
    free(signed_probe);
  }
  dlqb_audit_keyring_free(ring);
  return rc;
}

/* Who we are on the broker, and the message counts of the queues not read. */
static int count_unread(report_ctx *c, const dlqb_config *cfg) {
  dlqb_error err;
  dlqb_link *link = NULL;
  if (dlqb_link_open(&cfg->broker, "dlq-bridge audit report", &link, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_RUNTIME;
  }
  const char *user = dlqb_link_user(link);
  dlqb_text_sanitize(c->broker_user, sizeof c->broker_user, user, strlen(user));
  snprintf(c->counted[c->ncounted++].name, DLQB_NAME_MAX, "%s", cli_pipeline()->work);
  snprintf(c->counted[c->ncounted++].name, DLQB_NAME_MAX, "%s", cli_pipeline()->failed);
  for (size_t i = 0; i < cfg->policy.retry_delay_count && c->ncounted < COUNTED_MAX; i++) {
    char name[DLQB_NAME_MAX];
    dlqb_pipeline_retry_queue_name(cli_pipeline(), cfg->policy.retry_delays_ms[i], name,
                                   sizeof name);
    bool dup = false;
    for (size_t j = 0; j < c->ncounted; j++) dup = dup || strcmp(c->counted[j].name, name) == 0;
    if (!dup) snprintf(c->counted[c->ncounted++].name, DLQB_NAME_MAX, "%s", name);
  }
  dlqb_status st = DLQB_OK;
  for (size_t i = 0; i < c->ncounted && (st == DLQB_OK || st == DLQB_EBROKER); i++) {
    /* A missing queue (another topology) is shown as unknown, not fatal. */
    st = dlqb_link_queue_depth(link, c->counted[i].name, &c->counted[i].depth, NULL, &err);
    c->counted[i].known = st == DLQB_OK;
  }
  if (st == DLQB_OK || st == DLQB_EBROKER) {
    dlqb_link_close(link);
    return EXIT_OK;
  }
  dlqb_link_abort(link);
  cli_error("%s", err.msg);
  return EXIT_RUNTIME;
}

/* After the options, before the log: times, key, queues, ledger. */
static int report_prepare(void *ctx, const dlqb_config *cfg) {
  report_ctx *c = ctx;
  c->made_ms = dlqb_now_ms();
  if (c->from_text == NULL) {
    cli_error("audit report needs --from TIME (see 'dlq-bridge audit report --help')");
    return EXIT_USAGE;
  }
  if (!parse_when("from", c->from_text, c->made_ms, &c->from_ms)) return EXIT_USAGE;
  c->to_ms = c->made_ms;
  if (c->to_text != NULL && !parse_when("to", c->to_text, c->made_ms, &c->to_ms)) return EXIT_USAGE;
  if (c->from_ms > c->to_ms) {
    cli_error("--from is after --to: the period is empty");
    return EXIT_USAGE;
  }
  if (c->output != NULL && access(c->output, F_OK) == 0) {
    char q[DLQB_QUOTE_BUF];
    cli_error("--output: '%s' exists; a report is never written over another",
              dlqb_text_quote(q, c->output, strlen(c->output)));
    return EXIT_USAGE;
  }
  /* Named in a signed document that may be printed or parsed: sanitised
   * here once (valid UTF-8, no control characters), like every string. */
  char raw[sizeof c->writer];
  if (c->actor_flag != NULL) snprintf(raw, sizeof raw, "%s", c->actor_flag);
  else cli_default_actor(raw, sizeof raw);
  dlqb_text_sanitize(c->actor, sizeof c->actor, raw, strlen(raw));
  snprintf(raw, sizeof raw, "report@%s", cfg->instance);
  dlqb_text_sanitize(c->writer, sizeof c->writer, raw, strlen(raw));
  dlqb_text_sanitize(c->completion_writers, sizeof c->completion_writers,
                     cfg->ledger.completion_writers, strlen(cfg->ledger.completion_writers));
  int rc = load_key(c, cfg);
  if (rc != EXIT_OK) return rc;
  if ((c->r = dlqb_report_new(c->from_ms, c->to_ms)) == NULL ||
      (c->done = dlqb_ledger_new()) == NULL || (c->unverified = dlqb_ledger_new()) == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  dlqb_report_pipeline(c->r, cli_pipeline());
  c->deadlines = cfg->deadlines;
  dlqb_deadlines_format(&c->deadlines, c->deadlines_text, sizeof c->deadlines_text);
  dlqb_report_deadlines(c->r, &c->deadlines, c->made_ms);
  const char *queues[2] = {cli_pipeline()->dlq, cli_pipeline()->review};
  dlqb_status (*fns[2])(void *, const dlqb_item *, dlqb_error *) = {on_dlq_item, on_review_item};
  for (size_t i = 0; i < 2; i++) {
    ops_queue_read *q = &c->reads[i];
    *q = (ops_queue_read){.queue = queues[i],
                          .purpose = "audit report",
                          .window = c->o->window,
                          .on_item = fns[i],
                          .ctx = c};
    if ((rc = audit_read_queue(cfg, q)) != EXIT_OK) return rc;
    int64_t at = 0;
    (void)dlqb_iso_time_parse(q->at, strlen(q->at), &at);
    dlqb_report_queue_read(c->r, queues[i], at, q->others);
  }
  if ((rc = count_unread(c, cfg)) != EXIT_OK) return rc;
  dlqb_error err;
  if (dlqb_ledger_load_split(cfg, cli_pipeline()->completed, c->done, c->unverified, LEDGER_IDLE_MS,
                             &c->ledger, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_RUNTIME;
  }
  dlqb_report_ledger(c->r, c->done, c->unverified);
  return EXIT_OK;
}

static bool report_line(void *ctx, const char *line, size_t len) {
  report_ctx *c = ctx;
  return c->r == NULL || dlqb_report_line(c->r, line, len);
}

/* ---- the document -------------------------------------------------------- */

static json_object *jstr(const char *s) { return json_object_new_string(s); }
static json_object *jnum(uint64_t n) { return json_object_new_int64((int64_t)n); }

#define MS_PER_DAY 86400000.0

/* Days as a JSON number with two decimals (the text report's rounding):
 * a signed document should not carry a float's last binary digits. */
static json_object *jdays(int64_t ms) {
  char buf[48];
  snprintf(buf, sizeof buf, "%.2f", (double)ms / MS_PER_DAY);
  return json_object_new_double_s((double)ms / MS_PER_DAY, buf);
}

/* How far a `clock` response's close lies before its receipt (positive). */
static int64_t clock_gap(const dlqb_report_entry *e) {
  return e->elapsed_ms > -INT64_MAX ? -e->elapsed_ms : INT64_MAX;
}

static json_object *jtime(int64_t ms) {
  char t[DLQB_ISO_TIME_MAX];
  return jstr(dlqb_iso_time(ms, t, sizeof t));
}

/* A request's response members (docs/audit.md, "Response times"). */
static void response_json(json_object *j, const dlqb_report_entry *e) {
  json_object_object_add(j, "legal_basis", jstr(e->legal_basis));
  json_object_object_add(j, "action", jstr(e->action));
  json_object_object_add(j, "received_at", jtime(e->received_ms));
  json_object_object_add(j, "received_from", jstr(e->received_from));
  json_object_object_add(j, "due_at", e->has_due ? jtime(e->due_ms) : NULL);
  json_object_object_add(j, "response", jstr(dlqb_report_response_name(e->response)));
  json_object_object_add(j, "closed_at", e->closed ? jtime(e->closed_ms) : NULL);
  json_object_object_add(j, "closed_by", e->closed ? jstr(e->closed_by) : NULL);
  bool measured = e->closed && e->response != DLQB_RESP_CLOCK;
  json_object_object_add(j, "response_days", measured ? jdays(e->elapsed_ms) : NULL);
  if (!e->closed && e->response != DLQB_RESP_NO_TIME)
    json_object_object_add(j, "open_days", jdays(e->elapsed_ms));
  if (e->response == DLQB_RESP_CLOCK)
    json_object_object_add(j, "clock_gap_days", jdays(clock_gap(e)));
}

static json_object *group_json(const dlqb_report_group *g) {
  json_object *j = json_object_new_object();
  char rule[64] = "";
  if (g->rule != NULL) {
    dlqb_deadlines one = {.n = 1};
    one.rule[0] = *g->rule;
    dlqb_deadlines_format(&one, rule, sizeof rule);
  }
  const char *eq = strchr(rule, '=');
  json_object_object_add(j, "legal_basis", jstr(g->legal_basis));
  json_object_object_add(j, "action", jstr(g->action));
  json_object_object_add(j, "deadline", eq != NULL ? jstr(eq + 1) : NULL);
  json_object_object_add(j, "requests", jnum(g->requests));
  json_object_object_add(j, "received_in_period", jnum(g->received));
  json_object_object_add(j, "completed", jnum(g->completed));
  json_object_object_add(j, "resolved", jnum(g->resolved));
  json_object_object_add(j, "measured", jnum(g->measured));
  json_object_object_add(j, "median_days", g->measured > 0 ? jdays(g->median_ms) : NULL);
  json_object_object_add(j, "mean_days", g->measured > 0 ? jdays(g->mean_ms) : NULL);
  for (int x = 0; x < DLQB_RESP__COUNT; x++)
    json_object_object_add(j, dlqb_report_response_name((dlqb_report_response)x), jnum(g->resp[x]));
  return j;
}

static json_object *entry_json(const dlqb_report_entry *e) {
  json_object *j = json_object_new_object();
  const dlqb_profile *pr = &cli_pipeline()->profile;
  json_object_object_add(j, pr->fields[0].name, jstr(e->request_id));
  json_object_object_add(j, pr->fields[1].name, jstr(e->source_system));
  json_object_object_add(j, "message_id", jstr(e->message_id));
  json_object_object_add(j, "state", jstr(dlqb_report_state_name(e->state)));
  if (e->queue[0] != '\0') json_object_object_add(j, "queue", jstr(e->queue));
  if (e->state == DLQB_RS_IN_REVIEW) {
    json_object_object_add(j, "claimed", json_object_new_boolean(e->owner[0] != '\0'));
    json_object_object_add(j, "owner", jstr(e->owner));
  }
  if (e->state == DLQB_RS_RESOLVED) json_object_object_add(j, "note", jstr(e->note));
  json_object_object_add(j, "last_event", jstr(e->last_event));
  json_object_object_add(j, "last_time", jstr(e->last_time));
  json_object_object_add(j, "last_actor", jstr(e->last_actor));
  json_object_object_add(j, "last_writer", jstr(e->last_writer));
  json_object_object_add(j, "hops", jnum(e->hops));
  json_object_object_add(j, "unverified_completion",
                         json_object_new_boolean(e->unverified_completion));
  if (e->detail[0] != '\0') json_object_object_add(j, "detail", jstr(e->detail));
  response_json(j, e);
  return j;
}

/* Everything but the requests, which print_report appends one at a time
 * (a tree of every request would cost several times the document). */
static json_object *report_json(const report_ctx *c, const dlqb_audit_summary *sum, bool sealed,
                                const dlqb_report_counts *k, const dlqb_report_group *gs,
                                size_t ng) {
  char t[DLQB_ISO_TIME_MAX];
  json_object *j = json_object_new_object(), *by = json_object_new_object();
  json_object_object_add(j, "report", jstr("dlq-bridge audit report"));
  json_object_object_add(j, "format", json_object_new_int(2));
  json_object_object_add(j, "from", jstr(dlqb_iso_time(c->from_ms, t, sizeof t)));
  json_object_object_add(j, "to", jstr(dlqb_iso_time(c->to_ms, t, sizeof t)));
  json_object_object_add(j, "made_at", jstr(dlqb_iso_time(c->made_ms, t, sizeof t)));
  json_object_object_add(by, "actor", jstr(c->actor));
  json_object_object_add(by, "broker_user", jstr(c->broker_user));
  json_object_object_add(by, "writer", jstr(c->writer));
  json_object_object_add(j, "made_by", by);
  json_object_object_add(j, "key", jstr(c->key_id));
  json_object *trail = json_object_new_object();
  json_object_object_add(trail, "intact", json_object_new_boolean(1));
  json_object_object_add(trail, "records", jnum(sum->records));
  json_object_object_add(trail, "chains", jnum(sum->chains));
  json_object_object_add(trail, "files", jnum(sum->files));
  json_object_object_add(trail, "seal_checked", json_object_new_boolean(sealed));
  json_object_object_add(trail, "partial", json_object_new_boolean(sum->partial));
  json_object_object_add(j, "trail", trail);
  json_object *queues = json_object_new_object();
  for (size_t i = 0; i < 2; i++) {
    json_object *q = json_object_new_object();
    json_object_object_add(q, "read", json_object_new_boolean(1));
    json_object_object_add(q, "read_at", jstr(c->reads[i].at));
    json_object_object_add(q, "items", jnum(c->reads[i].scan.examined));
    json_object_object_add(q, "other_consumers", jnum(c->reads[i].others));
    json_object_object_add(queues, c->reads[i].queue, q);
  }
  for (size_t i = 0; i < c->ncounted; i++) {
    json_object *q = json_object_new_object();
    json_object_object_add(q, "read", json_object_new_boolean(0));
    json_object_object_add(q, "messages", c->counted[i].known ? jnum(c->counted[i].depth) : NULL);
    json_object_object_add(queues, c->counted[i].name, q);
  }
  json_object_object_add(j, "queues", queues);
  json_object *ledger = json_object_new_object();
  json_object_object_add(ledger, "stream", jstr(cli_pipeline()->completed));
  json_object_object_add(ledger, "completion_writers", jstr(c->completion_writers));
  json_object_object_add(ledger, "completed_requests", jnum(dlqb_ledger_size(c->done)));
  json_object_object_add(ledger, "unverified_entries", jnum(c->ledger.unverified));
  json_object_object_add(j, "ledger", ledger);
  json_object *counts = json_object_new_object();
  for (int s = 0; s < DLQB_RS__COUNT; s++)
    json_object_object_add(counts, dlqb_report_state_name((dlqb_report_state)s), jnum(k->state[s]));
  json_object_object_add(counts, "total", jnum(k->total));
  json_object_object_add(counts, "with_unverified_completion", jnum(k->unverified));
  json_object_object_add(counts, "queue_items_outside_period", jnum(k->outside));
  json_object_object_add(j, "counts", counts);
  json_object *st = json_object_new_object(), *groups = json_object_new_array();
  json_object_object_add(st, "deadlines", jstr(c->deadlines_text));
  for (size_t i = 0; i < ng; i++) json_object_array_add(groups, group_json(&gs[i]));
  json_object_object_add(st, "groups", groups);
  json_object *elsewhere = json_object_new_object();
  json_object_object_add(elsewhere, "last_seen_before_period", jnum(k->completed_before_period));
  json_object_object_add(elsewhere, "never_in_trail", jnum(k->completed_never_in_trail));
  json_object_object_add(elsewhere, "never_in_trail_without_time",
                         jnum(k->completed_never_in_trail_no_time));
  json_object_object_add(st, "completed_in_period_not_listed", elsewhere);
  json_object_object_add(j, "statutory", st);
  return j;
}

/* A growing text buffer: the text report is signed as one whole. */
typedef struct {
  char *buf;
  size_t len, cap;
  bool oom;
} text_buf;

__attribute__((format(printf, 2, 3))) static void put(text_buf *b, const char *fmt, ...) {
  for (int pass = 0; pass < 2 && !b->oom; pass++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf != NULL ? b->buf + b->len : NULL, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap - b->len <= (size_t)n) ncap *= 2;
    char *grown = realloc(b->buf, ncap);
    if (grown == NULL) b->oom = true;
    else {
      b->buf = grown;
      b->cap = ncap;
    }
  }
}

/* Text from the trail or a message, once more for the screen: it was
 * sanitised when read, and a screen must never get a control byte. */
static const char *scr(const char *s, char *buf, size_t cap) {
  dlqb_text_sanitize(buf, cap, s, strlen(s));
  return buf;
}

static double days(int64_t ms) { return (double)ms / MS_PER_DAY; }

/* The request's receipt, deadline and response, two lines. */
static void response_text(text_buf *b, const dlqb_report_entry *e) {
  char t1[DLQB_ISO_TIME_MAX], t2[DLQB_ISO_TIME_MAX], b1[64], b2[64];
  put(b, "           received %s (%s)", dlqb_iso_time(e->received_ms, t1, sizeof t1),
      e->received_from);
  if (e->legal_basis[0] != '\0' || e->action[0] != '\0')
    put(b, ", %s %s", scr(e->legal_basis[0] ? e->legal_basis : "-", b1, sizeof b1),
        scr(e->action[0] ? e->action : "-", b2, sizeof b2));
  if (e->has_due) put(b, ", due %s\n", dlqb_iso_time(e->due_ms, t2, sizeof t2));
  else put(b, ", no deadline\n");
  const char *what = dlqb_report_response_name(e->response);
  const char *how = strcmp(e->closed_by, "resolution") == 0 ? "resolved" : "completed";
  switch (e->response) {
  case DLQB_RESP_OPEN:
  case DLQB_RESP_OPEN_LATE:
    put(b, "           response %s: not closed, %.2f days since receipt%s\n", what,
        days(e->elapsed_ms), e->response == DLQB_RESP_OPEN_LATE ? ", past its deadline" : "");
    break;
  case DLQB_RESP_NO_TIME:
    put(b,
        "           response %s: completed, but the ledger gives no usable time (no timestamp, "
        "or one in the future): not measured\n",
        what);
    break;
  case DLQB_RESP_CLOCK:
    put(b,
        "           response %s: %s at %s, %.2f days BEFORE its receipt as recorded (clocks "
        "disagree, or a copy failed after the completion): not measured\n",
        what, how, dlqb_iso_time(e->closed_ms, t1, sizeof t1), days(clock_gap(e)));
    break;
  default:
    put(b, "           response %s: %s at %s, %.2f days after receipt\n", what, how,
        dlqb_iso_time(e->closed_ms, t1, sizeof t1), days(e->elapsed_ms));
    break;
  }
}

/* Per legal basis and action: one line each, after a header. */
static void groups_text(text_buf *b, const report_ctx *c, const dlqb_report_group *gs, size_t ng,
                        const dlqb_report_counts *k) {
  char b1[64], b2[64];
  put(b,
      "response   per legal basis and action: days from receipt to completion or resolution "
      "(deadlines %s)\n",
      c->deadlines_text[0] ? c->deadlines_text : "none");
  put(b, "           %-15s %-15s %-8s %8s %8s %9s %8s %8s %8s %8s %7s %4s %5s %9s %7s %5s\n",
      "legal_basis", "action", "deadline", "requests", "received", "completed", "resolved",
      "measured", "median_d", "mean_d", "on_time", "late", "open", "open_late", "no_time", "clock");
  for (size_t i = 0; i < ng; i++) {
    const dlqb_report_group *g = &gs[i];
    char rule[64] = "none", med[32] = "-", mean[32] = "-";
    if (g->rule != NULL) {
      dlqb_deadlines one = {.n = 1};
      one.rule[0] = *g->rule;
      char text[64];
      dlqb_deadlines_format(&one, text, sizeof text);
      const char *eq = strchr(text, '=');
      snprintf(rule, sizeof rule, "%s", eq != NULL ? eq + 1 : text);
    }
    if (g->measured > 0) {
      snprintf(med, sizeof med, "%.2f", days(g->median_ms));
      snprintf(mean, sizeof mean, "%.2f", days(g->mean_ms));
    }
    put(b,
        "           %-15s %-15s %-8s %8lu %8lu %9lu %8lu %8lu %8s %8s %7lu %4lu %5lu %9lu %7lu "
        "%5lu\n",
        scr(g->legal_basis[0] ? g->legal_basis : "-", b1, sizeof b1),
        scr(g->action[0] ? g->action : "-", b2, sizeof b2), rule, g->requests, g->received,
        g->completed, g->resolved, g->measured, med, mean, g->resp[DLQB_RESP_ON_TIME],
        g->resp[DLQB_RESP_LATE], g->resp[DLQB_RESP_OPEN], g->resp[DLQB_RESP_OPEN_LATE],
        g->resp[DLQB_RESP_NO_TIME], g->resp[DLQB_RESP_CLOCK]);
  }
  if (ng == 0) put(b, "           (no requests)\n");
  put(b,
      "not listed completions the ledger dates in the period of requests not in this report: %lu "
      "last seen by the trail before --from (an earlier --from lists them), %lu never in the "
      "trail (they never failed: not in these figures), and %lu more never in the trail "
      "without a time\n",
      k->completed_before_period, k->completed_never_in_trail, k->completed_never_in_trail_no_time);
}

static void entry_text(text_buf *b, const dlqb_report_entry *e) {
  char b1[DLQB_ID_MAX + 1], b2[DLQB_ID_MAX + 1], b3[256], b4[1200], b5[256], b6[256];
  const dlqb_profile *pr = &cli_pipeline()->profile;
  put(b, "%-10s %s %s  %s %s  message_id %s\n", dlqb_report_state_name(e->state),
      pr->fields[0].name, scr(e->request_id[0] ? e->request_id : "(none)", b1, sizeof b1),
      pr->fields[1].name, scr(e->source_system[0] ? e->source_system : "(none)", b2, sizeof b2),
      scr(e->message_id[0] ? e->message_id : "(none)", b3, sizeof b3));
  switch (e->state) {
  case DLQB_RS_IN_REVIEW:
    if (e->owner[0] != '\0')
      put(b, "           in %s, claimed by %s\n", e->queue, scr(e->owner, b3, sizeof b3));
    else put(b, "           in %s, unclaimed\n", e->queue);
    break;
  case DLQB_RS_IN_DLQ: put(b, "           in %s\n", e->queue); break;
  case DLQB_RS_RESOLVED: put(b, "           note \"%s\"\n", scr(e->note, b4, sizeof b4)); break;
  case DLQB_RS_WAITING:
    put(b, "           in %s (per the trail)\n", scr(e->queue, b3, sizeof b3));
    break;
  default: break;
  }
  put(b, "           last %s at %s by %s (%s), %lu hop%s from the period's start\n",
      scr(e->last_event, b3, sizeof b3), scr(e->last_time, b5, sizeof b5),
      scr(e->last_actor, b6, sizeof b6), scr(e->last_writer, b1, sizeof b1), e->hops,
      e->hops == 1 ? "" : "s");
  if (e->detail[0] != '\0') put(b, "           why: %s\n", scr(e->detail, b4, sizeof b4));
  response_text(b, e);
}

static void report_text(text_buf *b, const report_ctx *c, const dlqb_audit_summary *sum,
                        bool sealed, const dlqb_report_counts *k, const dlqb_report_entry *es,
                        size_t n, const dlqb_report_group *gs, size_t ng) {
  char t1[DLQB_ISO_TIME_MAX], t2[DLQB_ISO_TIME_MAX], s1[256], s2[256], s3[400];
  put(b, "dlq-bridge audit report (format 2)\n");
  put(b, "period     %s to %s: the requests with a hop recorded in it, each in its state now\n",
      dlqb_iso_time(c->from_ms, t1, sizeof t1), dlqb_iso_time(c->to_ms, t2, sizeof t2));
  put(b, "made at    %s by %s (broker user %s, writer %s), signing key %s\n",
      dlqb_iso_time(c->made_ms, t1, sizeof t1), scr(c->actor, s1, sizeof s1),
      scr(c->broker_user, s2, sizeof s2), scr(c->writer, s3, sizeof s3), c->key_id);
  put(b, "trail      intact: %lu records in %lu chains across %lu files; seal %s%s\n", sum->records,
      sum->chains, sum->files, sealed ? "checked" : "NOT checked (--no-seal)",
      sum->partial ? "; partial: records before the first file's rotation not checked" : "");
  for (size_t i = 0; i < 2; i++)
    put(b, "read       %s at %s: %llu items (%lu other consumers during the read)\n",
        c->reads[i].queue, c->reads[i].at, (unsigned long long)c->reads[i].scan.examined,
        (unsigned long)c->reads[i].others);
  put(b, "not read   (quorum queues: their messages are not held; counts only)");
  for (size_t i = 0; i < c->ncounted; i++) {
    if (c->counted[i].known)
      put(b, " %s %lu", c->counted[i].name, (unsigned long)c->counted[i].depth);
    else put(b, " %s ?", c->counted[i].name);
  }
  put(b, "\n");
  put(b,
      "ledger     %s: %zu completed requests from completion writers (%s); %zu entries from "
      "others, not counted\n",
      cli_pipeline()->completed, dlqb_ledger_size(c->done),
      c->completion_writers[0] ? scr(c->completion_writers, s1, sizeof s1) : "none listed",
      c->ledger.unverified);
  put(b, "\n");
  put(b, "state      requests\n");
  for (int s = 0; s < DLQB_RS__COUNT; s++)
    put(b, "%-10s %lu\n", dlqb_report_state_name((dlqb_report_state)s), k->state[s]);
  put(b, "total      %lu =", k->total);
  for (int s = 0; s < DLQB_RS__COUNT; s++) put(b, "%s %lu", s == 0 ? "" : " +", k->state[s]);
  put(b, " (the states add up to the requests in the period)\n");
  if (k->unverified > 0)
    put(b,
        "note       %lu request%s with a completion entry from a user not in "
        "completion_writers: not counted as completed\n",
        k->unverified, k->unverified == 1 ? "" : "s");
  put(b, "outside    %lu item%s in %s or %s of requests not seen in the period (not listed)\n",
      k->outside, k->outside == 1 ? "" : "s", cli_pipeline()->dlq, cli_pipeline()->review);
  put(b, "\n");
  groups_text(b, c, gs, ng, k);
  put(b, "\n");
  for (size_t i = 0; i < n; i++) entry_text(b, &es[i]);
}

/* Writes the report to a new file (never over an existing one: two
 * reports of one name would leave the auditor guessing), synced. Prints
 * the error and returns false on failure. */
bool audit_write_new_file(const char *path, const char *data, size_t n) {
  char q[DLQB_QUOTE_BUF], why[128];
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    cli_error("cannot create '%s': %s", dlqb_text_quote(q, path, strlen(path)),
              dlqb_errno_text(errno, why, sizeof why));
    return false;
  }
  bool ok = dlqb_write_all(fd, data, n) && fsync(fd) == 0;
  int e = errno;
  if (close(fd) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (!ok) {
    cli_error("cannot write '%s': %s", dlqb_text_quote(q, path, strlen(path)),
              dlqb_errno_text(e, why, sizeof why));
    unlink(path);
  }
  return ok;
}

/* Builds, signs and prints the report. */
static int print_report(report_ctx *c, const dlqb_audit_summary *sum, bool sealed) {
  dlqb_report_counts k;
  dlqb_error err;
  if (dlqb_report_finish(c->r, &k, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_RUNTIME;
  }
  size_t n = 0, ng = 0;
  const dlqb_report_entry *es = dlqb_report_entries(c->r, &n);
  const dlqb_report_group *gs = dlqb_report_groups(c->r, &ng);
  text_buf b = {0};
  if (c->o->json) {
    const int flags = JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE;
    json_object *j = report_json(c, sum, sealed, &k, gs, ng);
    const char *head = json_object_to_json_string_ext(j, flags);
    /* The head without its closing brace, then "requests", then the brace. */
    put(&b, "%.*s,\"requests\":[", (int)(strlen(head) - 1), head);
    json_object_put(j);
    for (size_t i = 0; i < n && !b.oom; i++) {
      json_object *e = entry_json(&es[i]);
      put(&b, "%s%s", i > 0 ? "," : "", json_object_to_json_string_ext(e, flags));
      json_object_put(e);
    }
    put(&b, "]}");
  } else {
    report_text(&b, c, sum, sealed, &k, es, n, gs, ng);
  }
  if (b.oom) {
    free(b.buf);
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  char *out = NULL;
  size_t out_len = 0;
  int rc = EXIT_OK;
  if (dlqb_report_sign(c->key, c->key_id, b.buf, b.len, c->o->json, &out, &out_len, &err) !=
      DLQB_OK) {
    cli_error("%s", err.msg);
    rc = EXIT_RUNTIME;
  } else if (c->output != NULL ? audit_write_new_file(c->output, out, out_len)
                               : fwrite(out, 1, out_len, stdout) == out_len) {
    if (c->o->json && c->output == NULL) cli_json_printed();
    dlqb_log_info("audit_report", "report of %lu requests (%s to %s) signed with key %s by %s",
                  k.total, c->from_text, c->to_text != NULL ? c->to_text : "now", c->key_id,
                  c->broker_user);
  } else {
    rc = EXIT_RUNTIME; /* said by audit_write_new_file; stdout's error by cli_finish */
  }
  free(out);
  free(b.buf);
  return rc;
}

int audit_report(int argc, char **argv) {
  audit_opts o = {.prepare = report_prepare};
  report_ctx c = {.o = &o};
  o.prepare_ctx = &c;
  o.extra = report_flag;
  o.extra_ctx = &c;
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc =
      audit_load_and_verify(&report_spec, argc, argv, &o, report_line, &c, &sum, &sealed, &help);
  if (help) cli_print_help(&report_spec, stdout);
  else if (rc == EXIT_OK) rc = print_report(&c, &sum, sealed);
  dlqb_report_free(c.r);
  dlqb_ledger_free(c.done);
  dlqb_ledger_free(c.unverified);
  EVP_PKEY_free(c.key);
  return rc;
}

/* ---- audit verify-report ------------------------------------------------ */

static const cli_flag verify_report_flags[] = {
    {"json", false, NULL, "print the result as JSON for scripts"},
    {NULL, false, NULL, NULL},
};

static const cli_spec verify_report_spec = {
    .name = "audit verify-report",
    .summary = "check an audit report's signature with the writers' public keys alone",
    .usage = "dlq-bridge audit verify-report REPORT [--json] [--audit-public-keys PATH]",
    .details = "Checks that REPORT (the exact output of `audit report`, text or --json) is\n"
               "signed by a key among DLQ_BRIDGE_AUDIT_PUBLIC_KEYS (--audit-public-keys: a PEM\n"
               "file, or a directory of *.pem; *.pem.revoked there are revoked keys) and that\n"
               "no byte of it changed since. No secret key and no broker are needed.\n"
               "Exit status: 0 intact (the signing key is named); 1 not intact: changed, signed\n"
               "by an unknown or revoked key, or not a signed report; 2 usage or configuration\n"
               "error.",
    .flags = verify_report_flags,
    .settings = true,
    .uses = (const char *const[]){"audit_public_keys", CLI_USES_LOG, NULL},
};

typedef struct {
  const char *file;
  int files;
  bool json;
} verify_report_opts;

static dlqb_status verify_report_flag(void *ctx, const char *flag, const char *value,
                                      dlqb_error *err) {
  verify_report_opts *o = ctx;
  if (flag == NULL) {
    if (o->files++ > 0) return dlqb_fail(err, DLQB_EINVAL, "verify-report takes one REPORT file");
    if (value[0] == '\0') return dlqb_fail(err, DLQB_EINVAL, "REPORT must not be empty");
    o->file = value;
  } else if (strcmp(flag, "json") == 0) {
    o->json = true;
  }
  return DLQB_OK;
}

/* A report is a few MB at most; more is not one of ours. */
#define REPORT_MAX ((size_t)1 << 30)

int audit_verify_report(int argc, char **argv) {
  verify_report_opts o = {0};
  static dlqb_config cfg; /* not on the stack: a config is large */
  bool help = false;
  int rc = cli_load(&verify_report_spec, argc, argv, &cfg, verify_report_flag, &o, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&verify_report_spec, stdout);
    return EXIT_OK;
  }
  if (o.file == NULL) {
    cli_error("audit verify-report needs the REPORT file (see 'dlq-bridge audit verify-report "
              "--help')");
    return EXIT_USAGE;
  }
  if (cfg.audit.public_keys[0] == '\0') {
    cli_error("no public keys given (set DLQ_BRIDGE_AUDIT_PUBLIC_KEYS or --audit-public-keys "
              "to the writers' *.pem public keys)");
    return EXIT_USAGE;
  }
  dlqb_error err;
  dlqb_audit_keyring *ring = dlqb_audit_keyring_new();
  if (ring == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  dlqb_status st = dlqb_audit_keyring_add(ring, cfg.audit.public_keys, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    dlqb_audit_keyring_free(ring);
    return st == DLQB_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
  }
  char *buf = NULL;
  size_t cap = 0, len = 0;
  rc = EXIT_RUNTIME;
  char q[DLQB_QUOTE_BUF], why[128];
  /* dlqb_read_file reads a missing file as empty: say what it is. */
  if (access(o.file, R_OK) != 0 || !dlqb_read_file(o.file, &buf, &cap, &len)) {
    cli_error("cannot read report '%s': %s", dlqb_text_quote(q, o.file, strlen(o.file)),
              dlqb_errno_text(errno, why, sizeof why));
  } else if (len > REPORT_MAX) {
    cli_error("'%s' is larger than any report", dlqb_text_quote(q, o.file, strlen(o.file)));
  } else {
    dlqb_report_check chk;
    if (dlqb_report_verify(ring, buf, len, &chk, &err) != DLQB_OK) {
      cli_error("%s: %s", dlqb_text_quote(q, o.file, strlen(o.file)), err.msg);
    } else {
      rc = EXIT_OK;
      if (o.json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "intact", json_object_new_boolean(1));
        json_object_object_add(j, "format", jstr(chk.json ? "json" : "text"));
        json_object_object_add(j, "key", jstr(chk.key_id));
        json_object_object_add(j, "key_file", jstr(chk.key_file));
        cli_print_json(j);
      } else {
        printf("report intact: %s, signed by key %s (%s); no byte changed since\n",
               dlqb_text_quote(q, o.file, strlen(o.file)), chk.key_id, chk.key_file);
      }
    }
  }
  free(buf);
  dlqb_audit_keyring_free(ring);
  return rc;
}

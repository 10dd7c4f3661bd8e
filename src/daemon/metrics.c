/* The metrics registry, its Prometheus text exposition and the health
 * verdict. No I/O: the HTTP endpoint and the refresher live in
 * metrics_http.c and metrics_refresh.c. */
#include "dlqb/metrics.h"
#include "dlqb/pipeline.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Counters, one per series. The label values are fixed and every series is
 * exported from the start at 0, so rate() sees the first increment. */
typedef enum {
  C_FAILURES_SEEN,
  C_RETRIES_SCHEDULED,
  C_DL_MAX_ATTEMPTS,
  C_DL_SLA_BUDGET,
  C_DL_POISON,
  C_DL_INVALID,
  C_DL_UNPUBLISHABLE,
  C_POISON,
  C_INVALID,
  C_ESC_SLA,
  C_ESC_MAX_REPLAYS,
  C__COUNT
} counter_id;

/* Upper bounds of the confirm latency buckets, in seconds: a confirm on an
 * idle local broker takes about a millisecond, a quorum queue under load
 * tens of milliseconds; seconds mean trouble (disk, flow control). */
static const double latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                        0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
#define NBUCKETS (sizeof latency_bounds / sizeof latency_bounds[0])

struct dlqb_metrics {
  char version[64];
  char pipeline[DLQB_PIPELINE_NAME_MAX]; /* "" = no pipeline label */
  _Atomic uint64_t counters[C__COUNT];
  atomic_bool connected;
  atomic_bool audit_writable;
  atomic_bool audit_anchored; /* the writers' last anchor attempts succeeded */

  pthread_mutex_t lock;       /* guards everything below */
  uint64_t buckets[NBUCKETS]; /* not cumulative; the renderer sums */
  uint64_t latency_count;
  double latency_sum;
  bool queues_ok;
  dlqb_queue_stat queues[DLQB_TOPO_MAX_QUEUES];
  size_t nqueues;
  char audit_why[DLQB_ERROR_MAX];     /* why the audit log is not writable */
  char escalator_why[DLQB_ERROR_MAX]; /* why the SLA escalator is refused; "" = it is not */
  char link_why[DLQB_ERROR_MAX];      /* why the router is not consuming (its last failure) */
  uint64_t audit_pending;
  bool review_ok;
  dlqb_review_tally review;
};

dlqb_metrics *dlqb_metrics_new(const char *version) {
  dlqb_metrics *m = calloc(1, sizeof *m);
  if (m == NULL) return NULL;
  if (pthread_mutex_init(&m->lock, NULL) != 0) {
    free(m);
    return NULL;
  }
  snprintf(m->version, sizeof m->version, "%s", version ? version : "");
  for (size_t i = 0; i < C__COUNT; i++) atomic_init(&m->counters[i], 0);
  atomic_init(&m->connected, false);
  atomic_init(&m->audit_writable, true);
  atomic_init(&m->audit_anchored, true);
  return m;
}

void dlqb_metrics_free(dlqb_metrics *m) {
  if (m == NULL) return;
  pthread_mutex_destroy(&m->lock);
  free(m);
}

static void bump(dlqb_metrics *m, counter_id c) {
  atomic_fetch_add_explicit(&m->counters[c], 1, memory_order_relaxed);
}

static counter_id dead_letter_counter(const char *cause) {
  if (strcmp(cause, "sla_budget") == 0) return C_DL_SLA_BUDGET;
  if (strcmp(cause, "poison") == 0) return C_DL_POISON;
  if (strcmp(cause, "invalid_envelope") == 0) return C_DL_INVALID;
  if (strcmp(cause, "unpublishable") == 0) return C_DL_UNPUBLISHABLE;
  return C_DL_MAX_ATTEMPTS;
}

void dlqb_metrics_count_hop(dlqb_metrics *m, const dlqb_hop *hop, double confirm_seconds) {
  switch (hop->event) {
  case DLQB_EV_RETRY_SCHEDULED:
    bump(m, C_FAILURES_SEEN);
    bump(m, C_RETRIES_SCHEDULED);
    break;
  case DLQB_EV_DEAD_LETTERED:
    bump(m, C_FAILURES_SEEN);
    bump(m, dead_letter_counter(hop->cause));
    break;
  case DLQB_EV_POISON:
    bump(m, C_FAILURES_SEEN);
    bump(m, C_DL_POISON);
    bump(m, C_POISON);
    break;
  case DLQB_EV_INVALID:
    bump(m, C_FAILURES_SEEN);
    bump(m, C_DL_INVALID);
    bump(m, C_INVALID);
    break;
  case DLQB_EV_ESCALATED:
    /* The daemon escalates on its own only past the DLQ SLA or, for a
     * failure, past max_replays; operator escalations are the ops
     * command's to count. */
    if (strcmp(hop->cause, "sla") == 0) {
      bump(m, C_ESC_SLA);
    } else if (strcmp(hop->cause, "max_replays") == 0) {
      bump(m, C_FAILURES_SEEN);
      bump(m, C_ESC_MAX_REPLAYS);
    }
    break;
  case DLQB_EV_REPLAYED:
  case DLQB_EV_SKIPPED_COMPLETE:
  case DLQB_EV_RESOLVED:
  case DLQB_EV_CLAIMED:
  case DLQB_EV_DECIDED_REPLAY:
  case DLQB_EV_DECIDED_RESOLVE:
  case DLQB_EV_DECIDED_RETURN:
  case DLQB_EV_EDITED:
  case DLQB_EV_EDIT_STARTED:
  case DLQB_EV_EDIT_PROPOSED:
  case DLQB_EV_EDIT_ABANDONED:
  case DLQB_EV_EDIT_REJECTED:
  case DLQB_EV_MIGRATED:
  case DLQB_EV_MOVE_STARTED:
  case DLQB_EV_MOVE_ABANDONED:
  case DLQB_EV__COUNT: break;
  }
  if (confirm_seconds < 0) return;
  size_t b = 0;
  while (b < NBUCKETS && confirm_seconds > latency_bounds[b]) b++;
  pthread_mutex_lock(&m->lock);
  if (b < NBUCKETS) m->buckets[b]++;
  m->latency_count++;
  m->latency_sum += confirm_seconds;
  pthread_mutex_unlock(&m->lock);
}

void dlqb_metrics_set_connected(dlqb_metrics *m, bool connected) {
  if (connected) dlqb_metrics_set_link_error(m, NULL);
  atomic_store(&m->connected, connected);
}

void dlqb_metrics_set_link_error(dlqb_metrics *m, const char *why) {
  pthread_mutex_lock(&m->lock);
  snprintf(m->link_why, sizeof m->link_why, "%s", why != NULL ? why : "");
  pthread_mutex_unlock(&m->lock);
}

void dlqb_metrics_set_audit_writable(dlqb_metrics *m, bool writable) {
  dlqb_metrics_set_audit(m, writable, NULL, 0);
}

void dlqb_metrics_set_audit(dlqb_metrics *m, bool writable, const char *why, uint64_t pending) {
  pthread_mutex_lock(&m->lock);
  snprintf(m->audit_why, sizeof m->audit_why, "%s", why != NULL ? why : "");
  m->audit_pending = pending;
  pthread_mutex_unlock(&m->lock);
  atomic_store(&m->audit_writable, writable);
}

void dlqb_metrics_set_anchored(dlqb_metrics *m, bool anchored) {
  atomic_store(&m->audit_anchored, anchored);
}

void dlqb_metrics_set_queues(dlqb_metrics *m, const dlqb_queue_stat *stats, size_t n, bool ok) {
  if (n > DLQB_TOPO_MAX_QUEUES) n = DLQB_TOPO_MAX_QUEUES;
  pthread_mutex_lock(&m->lock);
  m->queues_ok = ok;
  m->nqueues = ok ? n : 0;
  if (ok && n > 0) memcpy(m->queues, stats, n * sizeof *stats);
  pthread_mutex_unlock(&m->lock);
}

void dlqb_metrics_set_review(dlqb_metrics *m, const dlqb_review_tally *t, bool ok) {
  pthread_mutex_lock(&m->lock);
  m->review_ok = ok && t != NULL;
  if (m->review_ok) m->review = *t;
  pthread_mutex_unlock(&m->lock);
}

void dlqb_metrics_set_pipeline(dlqb_metrics *m, const char *name) {
  snprintf(m->pipeline, sizeof m->pipeline, "%s", dlqb_pipeline_name_valid(name) ? name : "");
}

const char *dlqb_metrics_pipeline(const dlqb_metrics *m) { return m->pipeline; }

void dlqb_metrics_set_escalator(dlqb_metrics *m, const char *refused) {
  pthread_mutex_lock(&m->lock);
  snprintf(m->escalator_why, sizeof m->escalator_why, "%s", refused != NULL ? refused : "");
  pthread_mutex_unlock(&m->lock);
}

bool dlqb_metrics_healthy(dlqb_metrics *m, char *reason, size_t len) {
  static const char audit_down[] = "audit log is not writable";
  const char *why = NULL;
  if (!atomic_load(&m->connected)) why = "not connected to the broker";
  else if (!atomic_load(&m->audit_writable)) why = audit_down;
  pthread_mutex_lock(&m->lock);
  bool escalator_refused = why == NULL && m->escalator_why[0] != '\0';
  if (reason != NULL && len > 0) {
    char who[DLQB_PIPELINE_NAME_MAX + 2] = "";
    if (m->pipeline[0] != '\0') snprintf(who, sizeof who, "%s: ", m->pipeline);
    if (why == audit_down && m->audit_why[0] != '\0')
      snprintf(reason, len, "%s%s: %s", who, why, m->audit_why);
    else if (why != NULL && why != audit_down && who[0] != '\0' && m->link_why[0] != '\0')
      snprintf(reason, len, "%s%s", who, m->link_why); /* a pipeline's: say what failed */
    else if (escalator_refused) snprintf(reason, len, "%s%s", who, m->escalator_why);
    else snprintf(reason, len, "%s%s", who, why ? why : "ok");
  }
  pthread_mutex_unlock(&m->lock);
  return why == NULL && !escalator_refused;
}

/* ---- exposition ------------------------------------------------------- */

/* A growing text buffer; after an allocation failure it only counts. */
typedef struct {
  char *buf;
  size_t len, cap;
  bool failed;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  if (t->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap * 2 + (size_t)n;
    char *bigger = realloc(t->buf, cap);
    if (bigger == NULL) {
      t->failed = true;
      return;
    }
    t->buf = bigger;
    t->cap = cap;
  }
}

/* A label value with \, " and newline escaped, as the format requires. */
static void put_label_value(text *t, const char *v) {
  for (const char *p = v; *p != '\0'; p++) {
    if (*p == '\\') put(t, "\\\\");
    else if (*p == '"') put(t, "\\\"");
    else if (*p == '\n') put(t, "\\n");
    else put(t, "%c", *p);
  }
}

static void put_family(text *t, const char *name, const char *type, const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static uint64_t counter(dlqb_metrics *m, counter_id c) {
  return atomic_load_explicit(&m->counters[c], memory_order_relaxed);
}

static void put_counter(text *t, dlqb_metrics *m, const char *name, const char *help,
                        counter_id c) {
  put_family(t, name, "counter", help);
  put(t, "%s %llu\n", name, (unsigned long long)counter(m, c));
}

/* Formats a float the way Prometheus parses it; %.17g round-trips but
 * prints 0.1 as 0.10000000000000001, so try shorter first. */
static void put_float(text *t, double v) {
  char buf[40];
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  put(t, "%s", buf);
}

typedef enum { Q_DEPTH, Q_CONSUMERS, Q_AGE } queue_gauge;

static const struct {
  const char *name;
  const char *help;
} queue_families[] = {
    [Q_DEPTH] = {"dlq_bridge_queue_depth",
                 "Messages ready in the queue (not counting unacked ones)."},
    [Q_CONSUMERS] = {"dlq_bridge_queue_consumers", "Consumers of the queue."},
    [Q_AGE] = {"dlq_bridge_queue_oldest_age_seconds",
               "Age of the oldest ready message: classic queues from the head's dlq_at/"
               "escalated_at/timestamp, quorum queues an upper bound (time since last seen "
               "empty)."},
};

/* One family of per-queue gauges. Missing queues have no series, and
 * neither has an age nobody knows: absent beats invented. */
static void put_queue_family(text *t, const dlqb_queue_stat *qs, size_t n, queue_gauge g) {
  const char *name = queue_families[g].name;
  put_family(t, name, "gauge", queue_families[g].help);
  for (size_t i = 0; i < n; i++) {
    const dlqb_queue_stat *q = &qs[i];
    if (!q->present || (g == Q_AGE && q->age_source == DLQB_AGE_UNKNOWN)) continue;
    put(t, "%s{queue=\"", name);
    put_label_value(t, q->queue);
    put(t, "\"} ");
    if (g == Q_DEPTH) put(t, "%lu\n", (unsigned long)q->depth);
    else if (g == Q_CONSUMERS) put(t, "%lu\n", (unsigned long)q->consumers);
    else {
      put_float(t, q->oldest_age_seconds);
      put(t, "\n");
    }
  }
}

/* The review gauges; absent until a pass read the review queue whole, and
 * an age nobody knows is absent too. */
static void put_review(text *t, bool ok, const dlqb_review_tally *r) {
  put_family(t, "dlq_bridge_review_items", "gauge",
             "Items in the pipeline's review queue by custody: unclaimed, or claimed and not yet "
             "decided.");
  if (ok) {
    put(t, "dlq_bridge_review_items{state=\"unclaimed\"} %llu\n", (unsigned long long)r->unclaimed);
    put(t, "dlq_bridge_review_items{state=\"claimed\"} %llu\n", (unsigned long long)r->claimed);
  }
  put_family(t, "dlq_bridge_review_oldest_age_seconds", "gauge",
             "Oldest unclaimed item's time since its escalation, and oldest claimed item's time "
             "since its claim (claimed but undecided).");
  if (ok && r->has_oldest_unclaimed) {
    put(t, "dlq_bridge_review_oldest_age_seconds{state=\"unclaimed\"} ");
    put_float(t, (double)r->oldest_unclaimed_ms / 1000.0);
    put(t, "\n");
  }
  if (ok && r->has_oldest_claimed) {
    put(t, "dlq_bridge_review_oldest_age_seconds{state=\"claimed\"} ");
    put_float(t, (double)r->oldest_claimed_ms / 1000.0);
    put(t, "\n");
  }
}

/* HELP names no queue: one family's HELP serves every pipeline of a merged
 * exposition (each pipeline's queues are its own), and the samples carry
 * the pipeline label that says which queues are meant. */
dlqb_status dlqb_metrics_render(dlqb_metrics *m, char **out, size_t *out_len, dlqb_error *err) {
  text t = {.cap = 8192};
  t.buf = malloc(t.cap);
  if (t.buf == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  t.buf[0] = '\0';

  put_family(&t, "dlq_bridge_up", "gauge", "1 while the bridge process is running.");
  put(&t, "dlq_bridge_up 1\n");
  put_family(&t, "dlq_bridge_build_info", "gauge", "Version of the running bridge, as a label.");
  put(&t, "dlq_bridge_build_info{version=\"");
  put_label_value(&t, m->version);
  put(&t, "\"} 1\n");
  put_family(&t, "dlq_bridge_connected", "gauge",
             "1 while the router is connected to the broker and consuming the pipeline's failure "
             "inbox.");
  put(&t, "dlq_bridge_connected %d\n", atomic_load(&m->connected) ? 1 : 0);
  put_family(&t, "dlq_bridge_audit_writable", "gauge",
             "1 while the audit log takes writes (or audit is off), 0 after a failed write.");
  put(&t, "dlq_bridge_audit_writable %d\n", atomic_load(&m->audit_writable) ? 1 : 0);
  pthread_mutex_lock(&m->lock);
  uint64_t pending = m->audit_pending;
  pthread_mutex_unlock(&m->lock);
  put_family(&t, "dlq_bridge_audit_pending_records", "gauge",
             "Hops handed to the audit writers and not yet written (stays within the prefetch "
             "windows during an outage).");
  put(&t, "dlq_bridge_audit_pending_records %llu\n", (unsigned long long)pending);
  put_family(&t, "dlq_bridge_audit_anchored", "gauge",
             "1 while the audit writers' last anchors reached dsr.audit.anchors (or anchors are "
             "off), 0 while the broker does not take them (the anchor window grows).");
  put(&t, "dlq_bridge_audit_anchored %d\n", atomic_load(&m->audit_anchored) ? 1 : 0);

  put_counter(&t, m, "dlq_bridge_failures_seen_total",
              "Failed tasks the bridge took from the pipeline's failure inbox and settled.",
              C_FAILURES_SEEN);
  put_counter(&t, m, "dlq_bridge_retries_scheduled_total",
              "Failed tasks sent to a retry delay queue.", C_RETRIES_SCHEDULED);
  put_family(&t, "dlq_bridge_dead_lettered_total", "counter",
             "Tasks the bridge sent to the pipeline's DLQ, by dlq_reason.");
  static const struct {
    const char *reason;
    counter_id c;
  } dl[] = {{"max_attempts", C_DL_MAX_ATTEMPTS},
            {"sla_budget", C_DL_SLA_BUDGET},
            {"poison", C_DL_POISON},
            {"invalid_envelope", C_DL_INVALID},
            {"unpublishable", C_DL_UNPUBLISHABLE}};
  for (size_t i = 0; i < sizeof dl / sizeof dl[0]; i++)
    put(&t, "dlq_bridge_dead_lettered_total{reason=\"%s\"} %llu\n", dl[i].reason,
        (unsigned long long)counter(m, dl[i].c));
  put_counter(&t, m, "dlq_bridge_poison_total",
              "Tasks dead-lettered as poison (the broker's delivery limit on the pipeline's work "
              "queue).",
              C_POISON);
  put_counter(&t, m, "dlq_bridge_invalid_total",
              "Tasks dead-lettered because their retry envelope was invalid.", C_INVALID);
  put_family(&t, "dlq_bridge_escalated_total", "counter",
             "Tasks this bridge escalated to the pipeline's review queue on its own, by trigger.");
  put(&t, "dlq_bridge_escalated_total{by=\"sla\"} %llu\n",
      (unsigned long long)counter(m, C_ESC_SLA));
  put(&t, "dlq_bridge_escalated_total{by=\"max_replays\"} %llu\n",
      (unsigned long long)counter(m, C_ESC_MAX_REPLAYS));

  pthread_mutex_lock(&m->lock);
  uint64_t buckets[NBUCKETS], count = m->latency_count;
  double sum = m->latency_sum;
  memcpy(buckets, m->buckets, sizeof buckets);
  bool queues_ok = m->queues_ok;
  size_t nq = m->nqueues;
  /* A copy of the gauges, on the heap: the metrics thread's stack is not
   * the place for all the queues of every pipeline (17 KiB). */
  dlqb_queue_stat *queues = malloc((nq > 0 ? nq : 1) * sizeof *queues);
  if (queues != NULL) memcpy(queues, m->queues, nq * sizeof queues[0]);
  else t.failed = true;
  bool review_ok = m->review_ok;
  dlqb_review_tally review = m->review;
  pthread_mutex_unlock(&m->lock);

  put_family(&t, "dlq_bridge_confirm_latency_seconds", "histogram",
             "Time from a republish to the broker's confirm, per hop.");
  uint64_t cumulative = 0;
  for (size_t b = 0; b < NBUCKETS; b++) {
    cumulative += buckets[b];
    put(&t, "dlq_bridge_confirm_latency_seconds_bucket{le=\"");
    put_float(&t, latency_bounds[b]);
    put(&t, "\"} %llu\n", (unsigned long long)cumulative);
  }
  put(&t, "dlq_bridge_confirm_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
      (unsigned long long)count);
  put(&t, "dlq_bridge_confirm_latency_seconds_sum ");
  put_float(&t, sum);
  put(&t, "\ndlq_bridge_confirm_latency_seconds_count %llu\n", (unsigned long long)count);

  put_family(&t, "dlq_bridge_queue_stats_up", "gauge",
             "1 when the last refresh of the queue gauges succeeded; 0 drops them.");
  put(&t, "dlq_bridge_queue_stats_up %d\n", queues_ok ? 1 : 0);
  if (queues != NULL) {
    put_queue_family(&t, queues, nq, Q_DEPTH);
    put_queue_family(&t, queues, nq, Q_CONSUMERS);
    put_queue_family(&t, queues, nq, Q_AGE);
  }
  free(queues);
  put_review(&t, review_ok, &review);

  if (t.failed) {
    free(t.buf);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  if (m->pipeline[0] != '\0') {
    char *labelled = dlqb_metrics_add_label(t.buf, t.len, "pipeline", m->pipeline, &t.len);
    free(t.buf);
    if (labelled == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    t.buf = labelled;
  }
  *out = t.buf;
  *out_len = t.len;
  return DLQB_OK;
}

char *dlqb_metrics_add_label(const char *src, size_t len, const char *label, const char *value,
                             size_t *out_len) {
  size_t lines = 1;
  for (size_t i = 0; i < len; i++) lines += src[i] == '\n';
  size_t extra = strlen(label) + strlen(value) + 6; /* {label="value"} or label="value", */
  size_t cap = len + lines * extra + 1;
  char *out = malloc(cap);
  if (out == NULL) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    size_t end = i;
    while (end < len && src[end] != '\n') end++;
    const char *line = src + i;
    size_t n = end - i;
    if (n == 0 || line[0] == '#') {
      memcpy(out + o, line, n);
      o += n;
    } else {
      size_t name = 0;
      while (name < n && line[name] != '{' && line[name] != ' ') name++;
      memcpy(out + o, line, name);
      o += name;
      if (name < n && line[name] == '{') {
        bool empty = name + 1 < n && line[name + 1] == '}';
        o += (size_t)snprintf(out + o, cap - o, "{%s=\"%s\"%s", label, value, empty ? "" : ",");
        name++; /* past the '{' */
      } else {
        o += (size_t)snprintf(out + o, cap - o, "{%s=\"%s\"}", label, value);
      }
      memcpy(out + o, line + name, n - name);
      o += n - name;
    }
    if (end < len) out[o++] = '\n';
    i = end + 1;
  }
  out[o] = '\0';
  *out_len = o;
  return out;
}

/* ---- several pipelines in one exposition and one /healthz ------------ */

bool dlqb_metrics_health_of(dlqb_metrics *const *ms, size_t n, const char *only, char *buf,
                            size_t len, bool *found) {
  bool ok = true;
  size_t used = 0;
  if (found != NULL) *found = only == NULL;
  if (len > 0) buf[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    if (only != NULL && strcmp(ms[i]->pipeline, only) != 0) continue;
    if (found != NULL) *found = true;
    char reason[DLQB_ERROR_MAX + DLQB_PIPELINE_NAME_MAX + 40];
    /* Without a pipeline, the 127 bytes /healthz always gave (byte for
     * byte as before); a pipeline's line has room for its router's error. */
    size_t room = ms[i]->pipeline[0] != '\0' ? sizeof reason : 128;
    if (!dlqb_metrics_healthy(ms[i], reason, room)) ok = false;
    int w = snprintf(buf + used, len > used ? len - used : 0, "%s\n", reason);
    if (w > 0) used = used + (size_t)w < len ? used + (size_t)w : (len > 0 ? len - 1 : 0);
  }
  return ok;
}

/* One metric family of one exposition: its "# " lines and its samples. */
typedef struct {
  const char *name; /* after "# HELP " or "# TYPE ", up to a space */
  size_t name_len;
  const char *head, *samples, *end; /* [head, samples) comments, [samples, end) samples */
} family;

/* The metric name a "# HELP NAME ..." or "# TYPE NAME ..." line [p, next)
 * names, as *name and its length; false for any other line. */
static bool comment_name(const char *p, const char *next, const char **name, size_t *n) {
  if (next - p <= 7 || (memcmp(p, "# HELP ", 7) != 0 && memcmp(p, "# TYPE ", 7) != 0)) return false;
  *name = p + 7;
  *n = 0;
  while (*name + *n < next && (*name)[*n] != ' ' && (*name)[*n] != '\n') (*n)++;
  return true;
}

/* Splits text into its families: one starts at each HELP or TYPE line
 * naming another metric than the family before; its HELP and TYPE lines
 * are its head, the lines up to the next family its samples. *out is
 * malloc'd. -1 when out of memory. */
static long split_families(const char *src, size_t len, family **out) {
  size_t cap = 16, n = 0;
  family *f = malloc(cap * sizeof *f);
  if (f == NULL) return -1;
  const char *p = src, *end = src + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *next = nl != NULL ? nl + 1 : end;
    const char *name = "";
    size_t nlen = 0;
    bool comment = comment_name(p, next, &name, &nlen);
    family *cur = n > 0 ? &f[n - 1] : NULL;
    bool same =
        cur != NULL && comment && nlen == cur->name_len && memcmp(name, cur->name, nlen) == 0;
    if (cur == NULL || (comment && !same)) {
      if (n == cap) {
        family *bigger = realloc(f, (cap *= 2) * sizeof *f);
        if (bigger == NULL) {
          free(f);
          return -1;
        }
        f = bigger;
      }
      cur = &f[n++];
      *cur = (family){.name = name, .name_len = nlen, .head = p, .samples = p, .end = p};
    }
    if (comment && same ? cur->samples == p : comment && cur->head == p) cur->samples = next;
    cur->end = next;
    p = next;
  }
  *out = f;
  return (long)n;
}

static bool same_name(const family *a, const family *b) {
  return a->name_len == b->name_len && memcmp(a->name, b->name, a->name_len) == 0;
}

char *dlqb_metrics_merge(const char *const *texts, const size_t *lens, size_t n, size_t *out_len) {
  family **fs = calloc(n > 0 ? n : 1, sizeof *fs);
  long *nf = calloc(n > 0 ? n : 1, sizeof *nf);
  bool **done = calloc(n > 0 ? n : 1, sizeof *done);
  size_t total = 1;
  char *out = NULL;
  bool failed = fs == NULL || nf == NULL || done == NULL;
  for (size_t i = 0; !failed && i < n; i++) {
    total += lens[i];
    nf[i] = split_families(texts[i], lens[i], &fs[i]);
    failed = nf[i] < 0 || (done[i] = calloc((size_t)nf[i] + 1, sizeof **done)) == NULL;
  }
  if (!failed) out = malloc(total + 1);
  size_t o = 0;
  /* Each family in the order it first appears: its head once (the first
   * exposition's), then the samples of every exposition that has it. */
  for (size_t i = 0; out != NULL && i < n; i++) {
    for (long k = 0; k < nf[i]; k++) {
      if (done[i][k]) continue;
      const family *head = &fs[i][k];
      memcpy(out + o, head->head, (size_t)(head->samples - head->head));
      o += (size_t)(head->samples - head->head);
      for (size_t j = i; j < n; j++) {
        for (long q = 0; q < nf[j]; q++) {
          const family *g = &fs[j][q];
          if (done[j][q] || !same_name(g, head)) continue;
          done[j][q] = true;
          memcpy(out + o, g->samples, (size_t)(g->end - g->samples));
          o += (size_t)(g->end - g->samples);
          break;
        }
      }
    }
  }
  if (out != NULL) {
    out[o] = '\0';
    *out_len = o;
  }
  for (size_t i = 0; i < n && fs != NULL && nf != NULL; i++) {
    if (nf[i] >= 0) free(fs[i]);
    if (done != NULL) free(done[i]);
  }
  free(fs);
  free(nf);
  free(done);
  return out;
}

dlqb_status dlqb_metrics_render_set(dlqb_metrics *const *ms, size_t n, char **out, size_t *out_len,
                                    dlqb_error *err) {
  if (n == 1) return dlqb_metrics_render(ms[0], out, out_len, err);
  char *texts[DLQB_MAX_PIPELINES] = {0};
  size_t lens[DLQB_MAX_PIPELINES] = {0};
  if (n > DLQB_MAX_PIPELINES) n = DLQB_MAX_PIPELINES;
  dlqb_status st = DLQB_OK;
  for (size_t i = 0; i < n && st == DLQB_OK; i++)
    st = dlqb_metrics_render(ms[i], &texts[i], &lens[i], err);
  if (st == DLQB_OK) {
    *out = dlqb_metrics_merge((const char *const *)texts, lens, n, out_len);
    if (*out == NULL) st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < n; i++) free(texts[i]);
  return st;
}

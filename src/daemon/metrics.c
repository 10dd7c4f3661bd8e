/* The metrics registry, its Prometheus text exposition and the health
 * verdict. No I/O: the HTTP endpoint and the refresher live in
 * metrics_http.c and metrics_refresh.c. */
#include "dlqb/metrics.h"

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
  _Atomic uint64_t counters[C__COUNT];
  atomic_bool connected;
  atomic_bool audit_writable;
  atomic_bool audit_anchored; /* the writers' last anchor attempts succeeded */

  pthread_mutex_t lock; /* guards everything below */
  uint64_t buckets[NBUCKETS]; /* not cumulative; the renderer sums */
  uint64_t latency_count;
  double latency_sum;
  bool queues_ok;
  dlqb_queue_stat queues[DLQB_TOPO_MAX_QUEUES];
  size_t nqueues;
  char audit_why[DLQB_ERROR_MAX]; /* why the audit log is not writable */
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
  case DLQB_EV__COUNT:
    break;
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
  atomic_store(&m->connected, connected);
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

bool dlqb_metrics_healthy(dlqb_metrics *m, char *reason, size_t len) {
  static const char audit_down[] = "audit log is not writable";
  const char *why = NULL;
  if (!atomic_load(&m->connected)) why = "not connected to the broker";
  else if (!atomic_load(&m->audit_writable)) why = audit_down;
  if (reason != NULL && len > 0) {
    pthread_mutex_lock(&m->lock);
    if (why == audit_down && m->audit_why[0] != '\0')
      snprintf(reason, len, "%s: %s", why, m->audit_why);
    else
      snprintf(reason, len, "%s", why ? why : "ok");
    pthread_mutex_unlock(&m->lock);
  }
  return why == NULL;
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

/* The review gauges; absent until a pass read compliance_review whole, and
 * an age nobody knows is absent too. */
static void put_review(text *t, bool ok, const dlqb_review_tally *r) {
  put_family(t, "dlq_bridge_review_items", "gauge",
             "Items in compliance_review by custody: unclaimed, or claimed and not yet decided.");
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
             "1 while the router is connected to the broker and consuming dsr.failed.");
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
              "Failed tasks the bridge took from dsr.failed and settled.", C_FAILURES_SEEN);
  put_counter(&t, m, "dlq_bridge_retries_scheduled_total",
              "Failed tasks sent to a retry delay queue.", C_RETRIES_SCHEDULED);
  put_family(&t, "dlq_bridge_dead_lettered_total", "counter",
             "Tasks the bridge sent to dsr.dlq.manual, by dlq_reason.");
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
              "Tasks dead-lettered as poison (the broker's delivery limit on dsr.work).",
              C_POISON);
  put_counter(&t, m, "dlq_bridge_invalid_total",
              "Tasks dead-lettered because their retry envelope was invalid.", C_INVALID);
  put_family(&t, "dlq_bridge_escalated_total", "counter",
             "Tasks this bridge escalated to compliance_review on its own, by trigger.");
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
  dlqb_queue_stat queues[DLQB_TOPO_MAX_QUEUES];
  memcpy(queues, m->queues, nq * sizeof queues[0]);
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
  put_queue_family(&t, queues, nq, Q_DEPTH);
  put_queue_family(&t, queues, nq, Q_CONSUMERS);
  put_queue_family(&t, queues, nq, Q_AGE);
  put_review(&t, review_ok, &review);

  if (t.failed) {
    free(t.buf);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  *out = t.buf;
  *out_len = t.len;
  return DLQB_OK;
}

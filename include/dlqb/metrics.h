/* What `dlq-bridge run` tells Prometheus and load balancers: a registry of
 * counters, gauges and a histogram, its text exposition (format 0.0.4), the
 * health verdict, an HTTP endpoint (libmicrohttpd) serving /metrics and
 * /healthz, and a refresher thread that reads queue depths and ages on its
 * own broker connection. docs/metrics.md describes every metric.
 *
 * Threads: the router's thread counts hops and reports the connection and
 * audit state; the refresher thread publishes queue stats; the HTTP thread
 * renders. Every function on a dlqb_metrics is safe to call from any of
 * them. The registry counts only what this process does: replay, resolve
 * and operator escalation run in the ops commands and are not counted. */
#ifndef DLQB_METRICS_H
#define DLQB_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "dlqb/config.h"
#include "dlqb/error.h"
#include "dlqb/hop.h"
#include "dlqb/queue_stats.h"
#include "dlqb/review.h"

typedef struct dlqb_metrics dlqb_metrics;

/* A registry with every counter at 0, disconnected, audit writable, no
 * queue stats yet. version goes into dlq_bridge_build_info (copied). NULL
 * when out of memory. Free with dlqb_metrics_free (NULL-safe) after the
 * server and refresher using it are stopped. */
dlqb_metrics *dlqb_metrics_new(const char *version);
void dlqb_metrics_free(dlqb_metrics *m);

/* Names the pipeline the daemon serves (a valid pipeline name, copied;
 * "" = none, the default). Set, every sample of the exposition carries the
 * label pipeline="NAME" and the /healthz reason starts with "NAME: ", so
 * one alert rule or probe tells the daemons of several pipelines apart.
 * Unset (no `pipelines` in the config file), both are exactly as before.
 * Call before serving. */
void dlqb_metrics_set_pipeline(dlqb_metrics *m, const char *name);

/* The pipeline m names ("" = none). */
const char *dlqb_metrics_pipeline(const dlqb_metrics *m);

/* src[0..len) with label="value" added to every sample line (a line not
 * starting with '#'): first in its label set, or as the only one. value
 * must need no escaping. *out is malloc'd (NUL-terminated), NULL when out
 * of memory. Exposed for the unit tests. */
char *dlqb_metrics_add_label(const char *src, size_t len, const char *label, const char *value,
                             size_t *out_len);

/* Counts one settled hop by its event (and cause), and observes its confirm
 * latency unless confirm_seconds is negative (nothing was published). The
 * signature matches dlqb_router_hooks.after_ack with m as ctx. */
void dlqb_metrics_count_hop(dlqb_metrics *m, const dlqb_hop *hop, double confirm_seconds);

/* The router's connection state (dlqb_router_hooks.on_connected). */
void dlqb_metrics_set_connected(dlqb_metrics *m, bool connected);

/* Whether the audit log took its last write (true when audit is off). */
void dlqb_metrics_set_audit_writable(dlqb_metrics *m, bool writable);

/* The same with why it is not (one line, copied; NULL: none; /healthz
 * adds it to its reason) and the hops the writers hold unwritten (the
 * gauge dlq_bridge_audit_pending_records). */
void dlqb_metrics_set_audit(dlqb_metrics *m, bool writable, const char *why, uint64_t pending);

/* Whether the audit writers' last anchor attempts succeeded (gauge
 * dlq_bridge_audit_anchored; not part of /healthz: docs/audit.md). */
void dlqb_metrics_set_anchored(dlqb_metrics *m, bool anchored);

/* Replaces the queue gauges with stats (n entries, copied). ok false means
 * the refresher could not read them: the gauges are dropped and
 * dlq_bridge_queue_stats_up reads 0 until the next successful refresh. */
void dlqb_metrics_set_queues(dlqb_metrics *m, const dlqb_queue_stat *stats, size_t n, bool ok);

/* Replaces the review gauges with t (copied): items unclaimed and claimed,
 * and the oldest of each (since the escalation; since the claim). ok false
 * means the last pass over compliance_review did not read it whole: the
 * review gauges are dropped until the next one that does. */
void dlqb_metrics_set_review(dlqb_metrics *m, const dlqb_review_tally *t, bool ok);

/* Renders the exposition into a malloc'd, NUL-terminated buffer (*text, of
 * *len bytes, the caller frees). DLQB_ENOMEM is the only failure. */
dlqb_status dlqb_metrics_render(dlqb_metrics *m, char **text, size_t *len, dlqb_error *err);

/* Why the DLQ SLA escalator's passes are refused (dlqb_escalator_health),
 * NULL when they are not: /healthz is unhealthy meanwhile, since nothing
 * past the SLA would ever be escalated. Copied. */
void dlqb_metrics_set_escalator(dlqb_metrics *m, const char *refused);

/* The /healthz verdict: true when connected, the audit log is writable and
 * the escalator is not refused;
 * otherwise false with a one-line reason in reason (len bytes). With a
 * pipeline named and a link error set, a disconnected registry's reason
 * is "NAME: <the error>" rather than "NAME: not connected to the broker". */
bool dlqb_metrics_healthy(dlqb_metrics *m, char *reason, size_t len);

/* Why the router is not consuming: its last session's failure (one line,
 * copied, no password; NULL clears it). set_connected(true) clears it. */
void dlqb_metrics_set_link_error(dlqb_metrics *m, const char *why);

/* ---- one daemon, several pipelines: one registry each ----------------- */

/* The /healthz of registries ms[0..n): one line per registry, its reason
 * (dlqb_metrics_healthy: "dsr: ok", "redaction: ..."), in order, into
 * buf (len bytes, cut to fit, NUL-terminated); true when every one is
 * healthy. With only non-NULL, just the registry whose pipeline is only:
 * *found says whether there is one (with only NULL, true). */
bool dlqb_metrics_health_of(dlqb_metrics *const *ms, size_t n, const char *only, char *buf,
                            size_t len, bool *found);

/* Merges n expositions (texts[i] of lens[i] bytes) into one valid one:
 * each family (a metric's HELP and TYPE lines, then its samples) once, in
 * the order families first appear, its head from the first exposition
 * holding it, then the samples of every exposition holding it, in order.
 * The samples must already be told apart (a pipeline label). *out_len is
 * set; the result is malloc'd and NUL-terminated; NULL when out of memory.
 * Pure; exposed for the unit tests. */
char *dlqb_metrics_merge(const char *const *texts, const size_t *lens, size_t n, size_t *out_len);

/* dlqb_metrics_render of every registry (at most DLQB_MAX_PIPELINES),
 * merged (dlqb_metrics_merge); with n 1 exactly dlqb_metrics_render. */
dlqb_status dlqb_metrics_render_set(dlqb_metrics *const *ms, size_t n, char **text, size_t *len,
                                    dlqb_error *err);

/* ---- the HTTP endpoint ------------------------------------------------ */

typedef struct dlqb_metrics_server dlqb_metrics_server;

/* Slow clients cannot lock out the health check (the Docker image's
 * HEALTHCHECK curls /healthz on 127.0.0.1 and the port is bound to
 * 0.0.0.0): each connection carries one request (Connection: close) and
 * is cut DLQB_METRICS_REQUEST_DEADLINE_S after it was accepted, however
 * often the client sends (libmicrohttpd's own timeout is an idle timeout
 * that a byte now and then resets); one address holds at most
 * DLQB_METRICS_PER_IP connections of DLQB_METRICS_CONNECTIONS. */
#define DLQB_METRICS_REQUEST_DEADLINE_S 3
#define DLQB_METRICS_PER_IP             4
#define DLQB_METRICS_CONNECTIONS        64

/* Listens on addr ("host:port", "[v6]:port"; port 0 picks a free port) and
 * serves, from libmicrohttpd's own thread:
 *   GET /metrics  200, the exposition (text/plain; version=0.0.4)
 *   GET /healthz  200 "ok", or 503 with the reason of dlqb_metrics_healthy
 * Other paths are 404, other methods 405. m must outlive the server. Errors
 * name the address ("cannot listen on 127.0.0.1:9464: address already in
 * use"). Stop with dlqb_metrics_server_stop (NULL-safe). */
dlqb_status dlqb_metrics_server_start(dlqb_metrics *m, const char *addr, dlqb_metrics_server **out,
                                      dlqb_error *err);

/* The same for the registries ms[0..n) (1 to DLQB_MAX_PIPELINES, each
 * with its pipeline named when n > 1; the array is copied, the registries
 * must outlive the server) of a daemon serving several pipelines:
 *   GET /metrics              every registry's samples in one exposition
 *                             (dlqb_metrics_render_set)
 *   GET /healthz              a line per pipeline (dlqb_metrics_health_of);
 *                             200 when every one is healthy, else 503
 *   GET /healthz/NAME         that pipeline's line alone, 200 or 503;
 *   GET /healthz?pipeline=NAME  the same; 404 for a pipeline not served
 * A registry without a pipeline name (no `pipelines` configured) answers
 * /healthz exactly as dlqb_metrics_server_start always did. */
dlqb_status dlqb_metrics_server_start_set(dlqb_metrics *const *ms, size_t n, const char *addr,
                                          dlqb_metrics_server **out, dlqb_error *err);
void dlqb_metrics_server_stop(dlqb_metrics_server *s);

/* The port actually listened on (useful after port 0). */
int dlqb_metrics_server_port(const dlqb_metrics_server *s);

/* ---- the queue refresher ---------------------------------------------- */

#define DLQB_METRICS_REFRESH_MS 5000

typedef struct dlqb_metrics_refresher dlqb_metrics_refresher;

/* Starts a thread that, every interval_ms, reads the depth and age of every
 * queue of cfg's topology (dlqb_queue_stats) on its own connection (named
 * "dlq-bridge metrics <instance>": rabbitmq-c connections are not
 * thread-safe, so it never touches the router's) and publishes them into m.
 * It reconnects on its own when the broker goes away. When compliance_review
 * holds items it also passes over it (a scan that holds every item, as
 * `review list` does, on a connection of its own, "dlq-bridge metrics
 * review") for the review gauges. cfg and m must outlive the
 * refresher. Stop with dlqb_metrics_refresher_stop
 * (NULL-safe), which returns once the thread has closed its connection. */
dlqb_status dlqb_metrics_refresher_start(dlqb_metrics *m, const dlqb_config *cfg, long interval_ms,
                                         dlqb_metrics_refresher **out, dlqb_error *err);
void dlqb_metrics_refresher_stop(dlqb_metrics_refresher *r);

#endif

/* Unit tests of the metrics module: counting hops, the text exposition,
 * the health verdict, the HTTP endpoint on a loopback port, and the
 * head-stamp rule of queue_stats. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dlqb/metrics.h"
#include "dlqb/queue_stats.h"

static char *render(dlqb_metrics *m) {
  char *text = NULL;
  size_t len = 0;
  dlqb_error err;
  assert_int_equal(dlqb_metrics_render(m, &text, &len, &err), DLQB_OK);
  assert_non_null(text);
  assert_int_equal(strlen(text), len);
  return text;
}

/* The value of the sample line "<series> <value>" (series with its labels,
 * exactly); fails the test when absent. */
static double sample(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *line = text; *line != '\0';) {
    const char *end = strchr(line, '\n');
    if (end == NULL) end = line + strlen(line);
    if ((size_t)(end - line) > n && strncmp(line, series, n) == 0 && line[n] == ' ')
      return strtod(line + n + 1, NULL);
    line = *end ? end + 1 : end;
  }
  fail_msg("no sample %s in:\n%s", series, text);
  return -1;
}

static bool has_line_starting(const char *text, const char *prefix) {
  size_t n = strlen(prefix);
  for (const char *line = text; *line != '\0';) {
    if (strncmp(line, prefix, n) == 0) return true;
    const char *end = strchr(line, '\n');
    if (end == NULL) break;
    line = end + 1;
  }
  return false;
}

static dlqb_hop hop(dlqb_event ev, const char *cause) {
  dlqb_hop h;
  memset(&h, 0, sizeof h);
  h.event = ev;
  snprintf(h.cause, sizeof h.cause, "%s", cause);
  return h;
}

static void test_fresh_registry_exports_zeros(void **state) {
  (void)state;
  dlqb_metrics *m = dlqb_metrics_new("1.2.3");
  assert_non_null(m);
  char *t = render(m);
  assert_true(sample(t, "dlq_bridge_up") == 1);
  assert_true(sample(t, "dlq_bridge_build_info{version=\"1.2.3\"}") == 1);
  assert_true(sample(t, "dlq_bridge_connected") == 0);
  assert_true(sample(t, "dlq_bridge_audit_writable") == 1);
  assert_true(sample(t, "dlq_bridge_audit_anchored") == 1);
  assert_true(sample(t, "dlq_bridge_failures_seen_total") == 0);
  assert_true(sample(t, "dlq_bridge_dead_lettered_total{reason=\"max_attempts\"}") == 0);
  assert_true(sample(t, "dlq_bridge_dead_lettered_total{reason=\"sla_budget\"}") == 0);
  assert_true(sample(t, "dlq_bridge_escalated_total{by=\"sla\"}") == 0);
  assert_true(sample(t, "dlq_bridge_confirm_latency_seconds_count") == 0);
  assert_true(sample(t, "dlq_bridge_queue_stats_up") == 0);
  /* No queue has been read: no queue series, only their HELP and TYPE. */
  assert_false(has_line_starting(t, "dlq_bridge_queue_depth{"));
  assert_true(has_line_starting(t, "# TYPE dlq_bridge_queue_depth gauge"));
  /* The ops commands' counters are theirs, not the daemon's. */
  assert_null(strstr(t, "replayed_total"));
  assert_null(strstr(t, "resolved_total"));
  free(t);
  dlqb_metrics_free(m);
}

/* Every family has one HELP and one TYPE line before its samples, and every
 * sample line belongs to the family announced last (format 0.0.4). */
static void test_every_family_has_help_and_type(void **state) {
  (void)state;
  dlqb_metrics *m = dlqb_metrics_new("x");
  dlqb_queue_stat q = {.queue = "dsr.dlq.manual",
                       .present = true,
                       .depth = 1,
                       .age_source = DLQB_AGE_HEAD,
                       .oldest_age_seconds = 2.5};
  dlqb_metrics_set_queues(m, &q, 1, true);
  char *t = render(m);
  char family[128] = "";
  bool typed = false;
  for (char *line = strtok(t, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    if (strncmp(line, "# HELP ", 7) == 0) {
      sscanf(line + 7, "%127s", family);
      typed = false;
      continue;
    }
    if (strncmp(line, "# TYPE ", 7) == 0) {
      char name[128], type[32];
      assert_int_equal(sscanf(line + 7, "%127s %31s", name, type), 2);
      assert_string_equal(name, family);
      typed = true;
      continue;
    }
    assert_true(typed);
    assert_int_equal(strncmp(line, family, strlen(family)), 0);
    char next = line[strlen(family)];
    assert_true(next == ' ' || next == '{' || next == '_');
  }
  free(t);
  dlqb_metrics_free(m);
}

static void test_hops_are_counted_by_event_and_cause(void **state) {
  (void)state;
  dlqb_metrics *m = dlqb_metrics_new("x");
  dlqb_hop h;
  for (int i = 0; i < 10; i++) {
    h = hop(DLQB_EV_RETRY_SCHEDULED, "");
    dlqb_metrics_count_hop(m, &h, 0.002);
  }
  for (int i = 0; i < 5; i++) {
    h = hop(DLQB_EV_DEAD_LETTERED, "max_attempts");
    dlqb_metrics_count_hop(m, &h, 0.02);
  }
  h = hop(DLQB_EV_DEAD_LETTERED, "sla_budget");
  dlqb_metrics_count_hop(m, &h, 0.02);
  h = hop(DLQB_EV_POISON, "poison");
  dlqb_metrics_count_hop(m, &h, 0.02);
  h = hop(DLQB_EV_INVALID, "invalid_envelope");
  dlqb_metrics_count_hop(m, &h, 0.02);
  h = hop(DLQB_EV_ESCALATED, "sla");
  dlqb_metrics_count_hop(m, &h, 0.02);
  h = hop(DLQB_EV_ESCALATED, "operator"); /* an ops command's: not counted */
  dlqb_metrics_count_hop(m, &h, -1);
  h = hop(DLQB_EV_REPLAYED, "");
  dlqb_metrics_count_hop(m, &h, -1);

  char *t = render(m);
  assert_true(sample(t, "dlq_bridge_failures_seen_total") == 18);
  assert_true(sample(t, "dlq_bridge_retries_scheduled_total") == 10);
  assert_true(sample(t, "dlq_bridge_dead_lettered_total{reason=\"max_attempts\"}") == 5);
  assert_true(sample(t, "dlq_bridge_dead_lettered_total{reason=\"sla_budget\"}") == 1);
  assert_true(sample(t, "dlq_bridge_dead_lettered_total{reason=\"poison\"}") == 1);
  assert_true(sample(t, "dlq_bridge_dead_lettered_total{reason=\"invalid_envelope\"}") == 1);
  assert_true(sample(t, "dlq_bridge_poison_total") == 1);
  assert_true(sample(t, "dlq_bridge_invalid_total") == 1);
  assert_true(sample(t, "dlq_bridge_escalated_total{by=\"sla\"}") == 1);
  assert_true(sample(t, "dlq_bridge_escalated_total{by=\"max_replays\"}") == 0);
  free(t);
  dlqb_metrics_free(m);
}

static void test_latency_histogram_is_cumulative(void **state) {
  (void)state;
  dlqb_metrics *m = dlqb_metrics_new("x");
  dlqb_hop h = hop(DLQB_EV_RETRY_SCHEDULED, "");
  const double obs[] = {0.0005, 0.001, 0.003, 0.2, 7.0, 42.0};
  for (size_t i = 0; i < sizeof obs / sizeof obs[0]; i++) dlqb_metrics_count_hop(m, &h, obs[i]);
  dlqb_metrics_count_hop(m, &h, -1.0); /* nothing published: not observed */
  char *t = render(m);
  /* A bucket counts observations <= its bound. */
  assert_true(sample(t, "dlq_bridge_confirm_latency_seconds_bucket{le=\"0.001\"}") == 2);
  assert_true(sample(t, "dlq_bridge_confirm_latency_seconds_bucket{le=\"0.005\"}") == 3);
  assert_true(sample(t, "dlq_bridge_confirm_latency_seconds_bucket{le=\"0.25\"}") == 4);
  assert_true(sample(t, "dlq_bridge_confirm_latency_seconds_bucket{le=\"10\"}") == 5);
  assert_true(sample(t, "dlq_bridge_confirm_latency_seconds_bucket{le=\"+Inf\"}") == 6);
  assert_true(sample(t, "dlq_bridge_confirm_latency_seconds_count") == 6);
  double sum = sample(t, "dlq_bridge_confirm_latency_seconds_sum");
  assert_true(sum > 49.2044 && sum < 49.2046);
  free(t);
  dlqb_metrics_free(m);
}

static void test_queue_gauges(void **state) {
  (void)state;
  dlqb_metrics *m = dlqb_metrics_new("x");
  dlqb_queue_stat qs[4] = {
      {.queue = "dsr.work",
       .type = DLQB_QTYPE_QUORUM,
       .present = true,
       .depth = 7,
       .consumers = 2,
       .age_source = DLQB_AGE_UNKNOWN},
      {.queue = "dsr.dlq.manual",
       .type = DLQB_QTYPE_CLASSIC,
       .present = true,
       .depth = 30,
       .age_source = DLQB_AGE_HEAD,
       .oldest_age_seconds = 86400.25},
      {.queue = "gone", .present = false},
      {.queue = "we\"ird\\q\nx", .present = true, .depth = 0, .age_source = DLQB_AGE_EMPTY},
  };
  dlqb_metrics_set_queues(m, qs, 4, true);
  char *t = render(m);
  assert_true(sample(t, "dlq_bridge_queue_stats_up") == 1);
  assert_true(sample(t, "dlq_bridge_queue_depth{queue=\"dsr.work\"}") == 7);
  assert_true(sample(t, "dlq_bridge_queue_consumers{queue=\"dsr.work\"}") == 2);
  assert_true(sample(t, "dlq_bridge_queue_depth{queue=\"dsr.dlq.manual\"}") == 30);
  assert_true(sample(t, "dlq_bridge_queue_oldest_age_seconds{queue=\"dsr.dlq.manual\"}") ==
              86400.25);
  /* Unknown age: no sample rather than a made-up one. */
  assert_false(has_line_starting(t, "dlq_bridge_queue_oldest_age_seconds{queue=\"dsr.work\"}"));
  assert_null(strstr(t, "queue=\"gone\""));
  /* Label values escape backslash, double quote and newline. */
  assert_true(sample(t, "dlq_bridge_queue_depth{queue=\"we\\\"ird\\\\q\\nx\"}") == 0);
  free(t);

  /* A failed refresh drops the gauges instead of repeating stale values. */
  dlqb_metrics_set_queues(m, NULL, 0, false);
  t = render(m);
  assert_true(sample(t, "dlq_bridge_queue_stats_up") == 0);
  assert_false(has_line_starting(t, "dlq_bridge_queue_depth{"));
  free(t);
  dlqb_metrics_free(m);
}

/* The review gauges: absent until a pass read compliance_review whole,
 * an unknown oldest age absent too, and dropped after a partial pass. */
static void test_review_gauges(void **state) {
  (void)state;
  dlqb_metrics *m = dlqb_metrics_new("x");
  char *t = render(m);
  assert_false(has_line_starting(t, "dlq_bridge_review_items{"));
  free(t);
  dlqb_review_tally r = {.items = 3,
                         .unclaimed = 2,
                         .claimed = 1,
                         .has_oldest_unclaimed = true,
                         .oldest_unclaimed_ms = 90500};
  dlqb_metrics_set_review(m, &r, true);
  t = render(m);
  assert_true(sample(t, "dlq_bridge_review_items{state=\"unclaimed\"}") == 2);
  assert_true(sample(t, "dlq_bridge_review_items{state=\"claimed\"}") == 1);
  assert_true(sample(t, "dlq_bridge_review_oldest_age_seconds{state=\"unclaimed\"}") == 90.5);
  assert_false(has_line_starting(t, "dlq_bridge_review_oldest_age_seconds{state=\"claimed\"}"));
  free(t);
  dlqb_metrics_set_review(m, &r, false);
  t = render(m);
  assert_false(has_line_starting(t, "dlq_bridge_review_items{"));
  assert_false(has_line_starting(t, "dlq_bridge_review_oldest_age_seconds{"));
  free(t);
  dlqb_metrics_free(m);
}

static void test_health_verdict(void **state) {
  (void)state;
  dlqb_metrics *m = dlqb_metrics_new("x");
  char why[128];
  assert_false(dlqb_metrics_healthy(m, why, sizeof why));
  assert_string_equal(why, "not connected to the broker");
  dlqb_metrics_set_connected(m, true);
  assert_true(dlqb_metrics_healthy(m, why, sizeof why));
  assert_string_equal(why, "ok");
  dlqb_metrics_set_audit_writable(m, false);
  assert_false(dlqb_metrics_healthy(m, why, sizeof why));
  assert_string_equal(why, "audit log is not writable");
  dlqb_metrics_set_audit_writable(m, true);
  /* Anchors that do not reach the broker are a gauge, not ill health:
   * restarting the bridge would not make the broker take them. */
  dlqb_metrics_set_anchored(m, false);
  assert_true(dlqb_metrics_healthy(m, why, sizeof why));
  dlqb_metrics_set_anchored(m, true);
  dlqb_metrics_set_connected(m, false);
  assert_false(dlqb_metrics_healthy(m, NULL, 0));
  dlqb_metrics_free(m);
}

/* ---- HTTP ------------------------------------------------------------- */

/* GETs path from 127.0.0.1:port with a raw HTTP/1.0 request; returns the
 * status and the response (headers and body) in a malloc'd *out. */
static int http_get(int port, const char *method, const char *path, char **out) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  char req[256];
  int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: localhost\r\n\r\n", method, path);
  assert_int_equal(write(fd, req, (size_t)n), n);
  size_t cap = 65536, len = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  ssize_t r;
  while ((r = read(fd, buf + len, cap - len - 1)) > 0) len += (size_t)r;
  buf[len] = '\0';
  close(fd);
  int status = 0;
  sscanf(buf, "HTTP/1.%*d %d", &status);
  *out = buf;
  return status;
}

static const char *body_of(const char *response) {
  const char *b = strstr(response, "\r\n\r\n");
  return b ? b + 4 : "";
}

static void test_http_endpoint(void **state) {
  (void)state;
  dlqb_metrics *m = dlqb_metrics_new("9.9.9");
  dlqb_metrics_server *s = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_metrics_server_start(m, "127.0.0.1:0", &s, &err), DLQB_OK);
  int port = dlqb_metrics_server_port(s);
  assert_true(port > 0);

  char *resp;
  assert_int_equal(http_get(port, "GET", "/healthz", &resp), 503);
  assert_string_equal(body_of(resp), "not connected to the broker\n");
  free(resp);
  dlqb_metrics_set_connected(m, true);
  assert_int_equal(http_get(port, "GET", "/healthz", &resp), 200);
  assert_string_equal(body_of(resp), "ok\n");
  free(resp);

  dlqb_hop h = hop(DLQB_EV_POISON, "poison");
  dlqb_metrics_count_hop(m, &h, 0.004);
  assert_int_equal(http_get(port, "GET", "/metrics", &resp), 200);
  assert_non_null(strstr(resp, "text/plain; version=0.0.4"));
  assert_true(sample(body_of(resp), "dlq_bridge_poison_total") == 1);
  assert_true(sample(body_of(resp), "dlq_bridge_connected") == 1);
  free(resp);

  assert_int_equal(http_get(port, "GET", "/nope", &resp), 404);
  free(resp);
  assert_int_equal(http_get(port, "POST", "/metrics", &resp), 405);
  free(resp);

  /* A second server on the same port is refused with a one-line reason. */
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  dlqb_metrics_server *s2 = NULL;
  assert_int_equal(dlqb_metrics_server_start(m, addr, &s2, &err), DLQB_EIO);
  assert_null(s2);
  assert_non_null(strstr(err.msg, "cannot listen on 127.0.0.1:"));
  assert_non_null(strstr(err.msg, "in use"));

  dlqb_metrics_server_stop(s);
  dlqb_metrics_server_stop(NULL);
  dlqb_metrics_free(m);
}

/* ---- slow clients ----------------------------------------------------- */

/* The slow-client test's server: on a port the kernel picks, so two runs of
 * the unit tests at once (two worktrees) cannot meet on a fixed one. */
static int slow_port;
#define SLOW_IPS         4
#define SLOW_PER_IP      10
#define PROBE_TIMEOUT_MS 3000 /* the Docker image's HEALTHCHECK --timeout */

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A client from 127.0.0.<host> that sends the start of a request and no
 * end of headers: a slowloris. -1 when the connect itself fails. */
static int slow_open(int host) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in src = {.sin_family = AF_INET};
  src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)host - 1);
  assert_int_equal(bind(fd, (struct sockaddr *)&src, sizeof src), 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)slow_port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  static const char start[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";
  (void)send(fd, start, sizeof start - 1, MSG_NOSIGNAL);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

/* One more byte of the endless header; false once the server closed it. */
static bool slow_trickle(int fd) {
  char buf[256];
  ssize_t r = recv(fd, buf, sizeof buf, 0);
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return false;
  return send(fd, "a", 1, MSG_NOSIGNAL) == 1 || errno == EAGAIN;
}

/* GET /healthz from 127.0.0.1 with the HEALTHCHECK's timeout: the status,
 * 0 when refused, closed or too slow. */
static int probe_healthz(int64_t *took_ms) {
  int64_t t0 = mono_ms();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct timeval tv = {.tv_sec = PROBE_TIMEOUT_MS / 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)slow_port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int status = 0;
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
      send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1)) {
    char buf[512];
    ssize_t r = recv(fd, buf, sizeof buf - 1, 0);
    if (r > 0) {
      buf[r] = '\0';
      sscanf(buf, "HTTP/1.%*d %d", &status);
    }
  }
  close(fd);
  *took_ms = mono_ms() - t0;
  return status;
}

/* Forty slowloris clients from four other addresses, each trickling a byte
 * every 200 ms (which reset the old 10 s idle timeout forever, and held all
 * 16 connections): /healthz from 127.0.0.1 still answers within the
 * HEALTHCHECK's 3 s every time, and the server cuts every slow client by
 * its request deadline however often it sends. */
static void test_slow_clients_do_not_lock_out_healthz(void **state) {
  (void)state;
  dlqb_metrics *m = dlqb_metrics_new("9.9.9");
  dlqb_metrics_set_connected(m, true);
  dlqb_metrics_server *s = NULL;
  dlqb_error err;
  char addr[32];
  snprintf(addr, sizeof addr, "127.0.0.1:0");
  assert_int_equal(dlqb_metrics_server_start(m, addr, &s, &err), DLQB_OK);
  slow_port = dlqb_metrics_server_port(s);
  assert_true(slow_port > 0);
  int fds[SLOW_IPS * SLOW_PER_IP];
  int n = 0;
  for (int ip = 0; ip < SLOW_IPS; ip++)
    for (int k = 0; k < SLOW_PER_IP; k++) fds[n++] = slow_open(2 + ip);
  int64_t start = mono_ms(), longest = 0;
  int open_left = n, probes = 0;
  /* Bounded by the deadline plus slack; ends as soon as all are cut. */
  while (open_left > 0 && mono_ms() - start < 4 * 1000 * DLQB_METRICS_REQUEST_DEADLINE_S) {
    for (int i = 0; i < n; i++)
      if (fds[i] >= 0 && !slow_trickle(fds[i])) {
        close(fds[i]);
        fds[i] = -1;
      }
    open_left = 0;
    for (int i = 0; i < n; i++) open_left += fds[i] >= 0;
    int64_t took;
    int status = probe_healthz(&took);
    probes++;
    if (took > longest) longest = took;
    if (status != 200)
      fail_msg("/healthz gave %d after %lld ms with %d slow clients open", status, (long long)took,
               open_left);
    poll(NULL, 0, 200);
  }
  int64_t all_cut = mono_ms() - start;
  printf("slow clients: all %d cut after %lld ms; %d probes, slowest %lld ms\n", n,
         (long long)all_cut, probes, (long long)longest);
  assert_int_equal(open_left, 0);
  assert_true(all_cut <= 1000 * DLQB_METRICS_REQUEST_DEADLINE_S + 1500);
  assert_true(longest < PROBE_TIMEOUT_MS);
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
  dlqb_metrics_server_stop(s);
  dlqb_metrics_free(m);
}

static void test_bad_address_is_refused(void **state) {
  (void)state;
  dlqb_metrics *m = dlqb_metrics_new("x");
  dlqb_metrics_server *s = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_metrics_server_start(m, "no-port", &s, &err), DLQB_EINVAL);
  assert_null(s);
  /* (A numeric host, so the test never waits on DNS.) */
  assert_int_equal(dlqb_metrics_server_start(m, "127.0.0.1:http", &s, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "cannot resolve metrics address '127.0.0.1:http'"));
  dlqb_metrics_free(m);
}

/* ---- queue_stats: the head stamp -------------------------------------- */

static amqp_table_entry_t str_entry(const char *k, const char *v) {
  amqp_table_entry_t e;
  e.key = amqp_cstring_bytes(k);
  e.value.kind = AMQP_FIELD_KIND_UTF8;
  e.value.value.bytes = amqp_cstring_bytes(v);
  return e;
}

/* 2026-11-30T07:00:00Z */
#define NOW_MS INT64_C(1796022000000)

static void test_head_stamp(void **state) {
  (void)state;
  amqp_basic_properties_t p;
  memset(&p, 0, sizeof p);
  int64_t ms = 0;
  assert_false(dlqb_queue_head_stamp(&p, NOW_MS, &ms));

  /* x-death[0].time is the last resort. */
  amqp_table_entry_t death_fields[2];
  death_fields[0] = str_entry("reason", "rejected");
  death_fields[1].key = amqp_cstring_bytes("time");
  death_fields[1].value.kind = AMQP_FIELD_KIND_TIMESTAMP;
  death_fields[1].value.value.u64 = 1700000000;
  amqp_field_value_t death = {.kind = AMQP_FIELD_KIND_TABLE};
  death.value.table = (amqp_table_t){2, death_fields};
  amqp_table_entry_t h[3];
  h[0].key = amqp_cstring_bytes("x-death");
  h[0].value.kind = AMQP_FIELD_KIND_ARRAY;
  h[0].value.value.array = (amqp_array_t){1, &death};
  p._flags = AMQP_BASIC_HEADERS_FLAG;
  p.headers = (amqp_table_t){1, h};
  assert_true(dlqb_queue_head_stamp(&p, NOW_MS, &ms));
  assert_int_equal(ms, INT64_C(1700000000000));

  /* The AMQP timestamp beats x-death. */
  p._flags |= AMQP_BASIC_TIMESTAMP_FLAG;
  p.timestamp = 1700000100;
  assert_true(dlqb_queue_head_stamp(&p, NOW_MS, &ms));
  assert_int_equal(ms, INT64_C(1700000100000));

  /* dlq_at beats both; the later of dlq_at and escalated_at wins. */
  h[1] = str_entry("dlq_at", "2026-11-30T05:00:00.500Z");
  p.headers.num_entries = 2;
  assert_true(dlqb_queue_head_stamp(&p, NOW_MS, &ms));
  assert_int_equal(ms, INT64_C(1796014800500));
  h[2] = str_entry("escalated_at", "2026-11-30T06:00:00Z");
  p.headers.num_entries = 3;
  assert_true(dlqb_queue_head_stamp(&p, NOW_MS, &ms));
  assert_int_equal(ms, INT64_C(1796018400000));
  h[2] = str_entry("escalated_at", "2026-11-29T06:00:00Z");
  assert_true(dlqb_queue_head_stamp(&p, NOW_MS, &ms));
  assert_int_equal(ms, INT64_C(1796014800500));

  /* A malformed dlq_at is ignored, not trusted. */
  h[1] = str_entry("dlq_at", "yesterday");
  p.headers.num_entries = 2;
  assert_true(dlqb_queue_head_stamp(&p, NOW_MS, &ms));
  assert_int_equal(ms, INT64_C(1700000100000));

  /* So is one in the future past the clock skew (a forged year 9999, a fast
   * clock): the older stamps below it count. Within the skew it counts. */
  h[1] = str_entry("dlq_at", "9999-12-31T23:59:59Z");
  h[2] = str_entry("escalated_at", "2026-12-30T06:00:00Z");
  p.headers.num_entries = 3;
  assert_true(dlqb_queue_head_stamp(&p, NOW_MS, &ms));
  assert_int_equal(ms, INT64_C(1700000100000));
  p.timestamp = 253402300799u; /* 9999 too: x-death is left */
  assert_true(dlqb_queue_head_stamp(&p, NOW_MS, &ms));
  assert_int_equal(ms, INT64_C(1700000000000));
  death_fields[1].value.value.u64 = 253402300799u;
  assert_false(dlqb_queue_head_stamp(&p, NOW_MS, &ms));
  h[1] = str_entry("dlq_at", "2026-11-30T07:02:00Z"); /* NOW_MS + 2 min */
  assert_true(dlqb_queue_head_stamp(&p, NOW_MS, &ms));
  assert_int_equal(ms, INT64_C(1796022120000));
}

/* ---- several pipelines: one exposition, one /healthz ------------------ */

/* Occurrences of needle in hay. */
static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) n++;
  return n;
}

/* One family's HELP serves every pipeline of the merged exposition: it
 * names no queue of one pipeline (the dsr pipeline's queue names here; the
 * shared anchors stream is every pipeline's). */
static void test_help_is_true_for_every_pipeline(void **state) {
  (void)state;
  dlqb_metrics *a = dlqb_metrics_new("1"), *b = dlqb_metrics_new("1");
  dlqb_metrics_set_pipeline(a, "dsr");
  dlqb_metrics_set_pipeline(b, "redaction");
  dlqb_metrics *both[] = {a, b};
  char *text = NULL;
  size_t len = 0;
  dlqb_error err;
  assert_int_equal(dlqb_metrics_render_set(both, 2, &text, &len, &err), DLQB_OK);
  static const char *const own[] = {"dsr.failed",       "dsr.work",  "dsr.dlx",
                                    "dsr.dlq.manual",   "dsr.retry", "dsr.completed",
                                    "compliance_review"};
  int helps = 0;
  for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    if (strncmp(line, "# HELP ", 7) != 0) continue;
    helps++;
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
      if (strstr(line, own[i]) != NULL) fail_msg("HELP names %s: %s", own[i], line);
  }
  assert_true(helps > 10);
  free(text);
  dlqb_metrics_free(a);
  dlqb_metrics_free(b);
}

/* Every family's HELP and TYPE once, every sample after its own family's
 * TYPE and before the next family, and each pipeline's samples kept. */
static void test_merge_expositions(void **state) {
  (void)state;
  dlqb_metrics *a = dlqb_metrics_new("1"), *b = dlqb_metrics_new("1");
  dlqb_metrics_set_pipeline(a, "dsr");
  dlqb_metrics_set_pipeline(b, "redaction");
  dlqb_metrics_set_connected(a, true);
  dlqb_hop h = hop(DLQB_EV_POISON, "poison");
  dlqb_metrics_count_hop(b, &h, 0.004);
  dlqb_metrics_count_hop(b, &h, 0.004);
  dlqb_queue_stat q = {.present = true, .depth = 7};
  snprintf(q.queue, sizeof q.queue, "redaction.failed");
  dlqb_metrics_set_queues(b, &q, 1, true);
  dlqb_metrics *both[] = {a, b};
  char *text = NULL;
  size_t len = 0;
  dlqb_error err;
  assert_int_equal(dlqb_metrics_render_set(both, 2, &text, &len, &err), DLQB_OK);
  assert_int_equal(strlen(text), len);
  assert_int_equal(count_of(text, "# HELP dlq_bridge_poison_total "), 1);
  assert_int_equal(count_of(text, "# TYPE dlq_bridge_poison_total "), 1);
  assert_int_equal(count_of(text, "# TYPE dlq_bridge_confirm_latency_seconds histogram"), 1);
  assert_true(sample(text, "dlq_bridge_poison_total{pipeline=\"dsr\"}") == 0);
  assert_true(sample(text, "dlq_bridge_poison_total{pipeline=\"redaction\"}") == 2);
  assert_true(sample(text, "dlq_bridge_connected{pipeline=\"dsr\"}") == 1);
  assert_true(sample(text, "dlq_bridge_connected{pipeline=\"redaction\"}") == 0);
  assert_true(
      sample(text, "dlq_bridge_queue_depth{pipeline=\"redaction\",queue=\"redaction.failed\"}") ==
      7);
  /* Sample lines follow their family: the name of the last TYPE line
   * before each sample is the sample's metric (or its _bucket etc.). */
  char family[128] = "";
  int samples = 0;
  for (char *line = text; *line != '\0';) {
    char *end = strchr(line, '\n');
    assert_non_null(end);
    if (strncmp(line, "# TYPE ", 7) == 0) {
      size_t n = strcspn(line + 7, " ");
      snprintf(family, sizeof family, "%.*s", (int)n, line + 7);
      /* A family appears once. */
      char again[160];
      snprintf(again, sizeof again, "# TYPE %s ", family);
      assert_int_equal(count_of(text, again), 1);
    } else if (line[0] != '#') {
      assert_int_equal(strncmp(line, family, strlen(family)), 0);
      assert_non_null(strstr(line, "pipeline=\""));
      samples++;
    }
    line = end + 1;
  }
  /* As many samples as the two alone. */
  char *ta = render(a), *tb = render(b);
  int alone = 0;
  for (const char *t2[] = {ta, tb}, **t = t2; t < t2 + 2; t++)
    for (const char *line = *t; *line != '\0'; line = strchr(line, '\n') + 1)
      if (line[0] != '#') alone++;
  assert_int_equal(samples, alone);
  free(ta);
  free(tb);
  free(text);
  /* One registry: exactly its own exposition. */
  assert_int_equal(dlqb_metrics_render_set(both, 1, &text, &len, &err), DLQB_OK);
  ta = render(a);
  assert_string_equal(text, ta);
  free(ta);
  free(text);
  /* The pure merge on small texts: a family only the second has is kept. */
  const char *x = "# HELP m a\n# TYPE m gauge\nm{p=\"1\"} 1\n";
  const char *y =
      "# HELP m a\n# TYPE m gauge\nm{p=\"2\"} 2\n# HELP n b\n# TYPE n gauge\nn{p=\"2\"} 3\n";
  const char *texts[] = {x, y};
  size_t lens[] = {strlen(x), strlen(y)};
  char *merged = dlqb_metrics_merge(texts, lens, 2, &len);
  assert_string_equal(merged, "# HELP m a\n# TYPE m gauge\nm{p=\"1\"} 1\nm{p=\"2\"} 2\n"
                              "# HELP n b\n# TYPE n gauge\nn{p=\"2\"} 3\n");
  free(merged);
  dlqb_metrics_free(a);
  dlqb_metrics_free(b);
}

/* A line per pipeline; healthy only when all are; one on its own. */
static void test_health_of_pipelines(void **state) {
  (void)state;
  dlqb_metrics *a = dlqb_metrics_new("1"), *b = dlqb_metrics_new("1");
  dlqb_metrics_set_pipeline(a, "dsr");
  dlqb_metrics_set_pipeline(b, "redaction");
  dlqb_metrics *both[] = {a, b};
  dlqb_metrics_set_connected(a, true);
  dlqb_metrics_set_connected(b, true);
  char buf[2048];
  bool found = false;
  assert_true(dlqb_metrics_health_of(both, 2, NULL, buf, sizeof buf, &found));
  assert_true(found);
  assert_string_equal(buf, "dsr: ok\nredaction: ok\n");
  /* The router's failure names what failed. */
  dlqb_metrics_set_connected(b, false);
  dlqb_metrics_set_link_error(b, "cannot consume redaction.failed: ACCESS_REFUSED");
  assert_false(dlqb_metrics_health_of(both, 2, NULL, buf, sizeof buf, &found));
  assert_string_equal(buf, "dsr: ok\nredaction: cannot consume redaction.failed: ACCESS_REFUSED\n");
  assert_true(dlqb_metrics_health_of(both, 2, "dsr", buf, sizeof buf, &found));
  assert_true(found);
  assert_string_equal(buf, "dsr: ok\n");
  assert_false(dlqb_metrics_health_of(both, 2, "redaction", buf, sizeof buf, &found));
  assert_string_equal(buf, "redaction: cannot consume redaction.failed: ACCESS_REFUSED\n");
  (void)dlqb_metrics_health_of(both, 2, "nope", buf, sizeof buf, &found);
  assert_false(found);
  assert_string_equal(buf, "");
  /* Back: the error is cleared with the connection. */
  dlqb_metrics_set_connected(b, true);
  assert_true(dlqb_metrics_health_of(both, 2, NULL, buf, sizeof buf, &found));
  /* A cut buffer still ends in a NUL. */
  assert_true(dlqb_metrics_health_of(both, 2, NULL, buf, 6, &found));
  assert_string_equal(buf, "dsr: ");
  /* Without a pipeline name the reason is today's. */
  dlqb_metrics *plain = dlqb_metrics_new("1");
  dlqb_metrics_set_link_error(plain, "refused");
  assert_false(dlqb_metrics_healthy(plain, buf, sizeof buf));
  assert_string_equal(buf, "not connected to the broker");
  /* ... and is cut where /healthz always cut it (127 bytes); a
   * pipeline's line keeps its router's whole error. */
  char long_why[400];
  memset(long_why, 'x', sizeof long_why - 1);
  long_why[sizeof long_why - 1] = '\0';
  dlqb_metrics_set_connected(plain, true);
  dlqb_metrics_set_audit(plain, false, long_why, 0);
  assert_false(dlqb_metrics_health_of(&plain, 1, NULL, buf, sizeof buf, &found));
  assert_int_equal(strlen(buf), 128);
  dlqb_metrics_set_audit(plain, true, NULL, 0);
  dlqb_metrics_set_connected(plain, false);
  dlqb_metrics_set_connected(b, false);
  dlqb_metrics_set_link_error(b, long_why);
  assert_false(dlqb_metrics_health_of(both, 2, "redaction", buf, sizeof buf, &found));
  assert_int_equal(strlen(buf), strlen("redaction: ") + sizeof long_why - 1 + 1);

  /* Over HTTP: the status rule and the per-pipeline checks. */
  dlqb_metrics_set_connected(b, false);
  dlqb_metrics_set_link_error(b, "cannot consume redaction.failed: ACCESS_REFUSED");
  dlqb_metrics_server *s = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_metrics_server_start_set(both, 2, "127.0.0.1:0", &s, &err), DLQB_OK);
  int port = dlqb_metrics_server_port(s);
  char *resp;
  assert_int_equal(http_get(port, "GET", "/healthz", &resp), 503);
  assert_string_equal(body_of(resp),
                      "dsr: ok\nredaction: cannot consume redaction.failed: ACCESS_REFUSED\n");
  free(resp);
  assert_int_equal(http_get(port, "GET", "/healthz/dsr", &resp), 200);
  assert_string_equal(body_of(resp), "dsr: ok\n");
  free(resp);
  assert_int_equal(http_get(port, "GET", "/healthz?pipeline=dsr", &resp), 200);
  assert_string_equal(body_of(resp), "dsr: ok\n");
  free(resp);
  assert_int_equal(http_get(port, "GET", "/healthz/redaction", &resp), 503);
  free(resp);
  assert_int_equal(http_get(port, "GET", "/healthz/nope", &resp), 404);
  free(resp);
  assert_int_equal(http_get(port, "GET", "/metrics", &resp), 200);
  assert_int_equal(count_of(resp, "# TYPE dlq_bridge_up gauge"), 1);
  assert_true(sample(body_of(resp), "dlq_bridge_up{pipeline=\"redaction\"}") == 1);
  free(resp);
  dlqb_metrics_server_stop(s);
  /* A registry without a pipeline: /healthz as always, the query ignored. */
  dlqb_metrics_set_connected(plain, true);
  assert_int_equal(dlqb_metrics_server_start(plain, "127.0.0.1:0", &s, &err), DLQB_OK);
  port = dlqb_metrics_server_port(s);
  assert_int_equal(http_get(port, "GET", "/healthz?pipeline=x", &resp), 200);
  assert_string_equal(body_of(resp), "ok\n");
  free(resp);
  assert_int_equal(http_get(port, "GET", "/healthz/x", &resp), 404);
  free(resp);
  dlqb_metrics_server_stop(s);
  dlqb_metrics_free(plain);
  dlqb_metrics_free(a);
  dlqb_metrics_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fresh_registry_exports_zeros),
      cmocka_unit_test(test_review_gauges),
      cmocka_unit_test(test_every_family_has_help_and_type),
      cmocka_unit_test(test_help_is_true_for_every_pipeline),
      cmocka_unit_test(test_hops_are_counted_by_event_and_cause),
      cmocka_unit_test(test_latency_histogram_is_cumulative),
      cmocka_unit_test(test_queue_gauges),
      cmocka_unit_test(test_health_verdict),
      cmocka_unit_test(test_http_endpoint),
      cmocka_unit_test(test_slow_clients_do_not_lock_out_healthz),
      cmocka_unit_test(test_bad_address_is_refused),
      cmocka_unit_test(test_head_stamp),
      cmocka_unit_test(test_merge_expositions),
      cmocka_unit_test(test_health_of_pipelines),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

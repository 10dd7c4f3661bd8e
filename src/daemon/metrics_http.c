/* The /metrics and /healthz endpoint on libmicrohttpd's own thread. */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dlqb/clock.h"
#include "dlqb/log.h"
#include "dlqb/metrics.h"

/* A scraper and a probe or two, and room for slow clients from other
 * addresses (see dlqb/metrics.h): the per-address limit keeps one client
 * from taking every slot, the deadline frees each slot soon. */
#define IDLE_TIMEOUT_S 2
#define WATCH_STEP_US  100000

/* A connection libmicrohttpd accepted: our own duplicate of its socket
 * (shutting down a duplicate ends the same connection, and ours cannot be
 * closed and reused under us by libmicrohttpd) and when it was accepted. */
typedef struct {
  int fd; /* -1: free */
  int64_t accepted_us;
  bool cut;
} watched;

struct dlqb_metrics_server {
  struct MHD_Daemon *daemon;
  dlqb_metrics *ms[DLQB_MAX_PIPELINES]; /* one per pipeline served */
  size_t n;
  bool named; /* the registries name their pipelines: /healthz/NAME is served */
  int port;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_t watchdog;
  bool watching, stopping;
  watched conns[DLQB_METRICS_CONNECTIONS];
};

/* libmicrohttpd's connection notices (its thread): track each socket. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code) {
  dlqb_metrics_server *s = cls;
  pthread_mutex_lock(&s->lock);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    for (size_t i = 0; ci != NULL && i < DLQB_METRICS_CONNECTIONS; i++) {
      if (s->conns[i].fd >= 0) continue;
      int fd = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0);
      if (fd < 0) break; /* out of descriptors: only the idle timeout guards this one */
      s->conns[i] = (watched){fd, dlqb_mono_us(), false};
      *socket_ctx = &s->conns[i];
      break;
    }
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_ctx != NULL) {
    watched *w = *socket_ctx;
    close(w->fd);
    w->fd = -1;
    *socket_ctx = NULL;
  }
  pthread_mutex_unlock(&s->lock);
}

/* Cuts every connection older than the deadline: libmicrohttpd then reads
 * the end of the stream and closes it. */
static void *watchdog_main(void *arg) {
  dlqb_metrics_server *s = arg;
  pthread_mutex_lock(&s->lock);
  while (!s->stopping) {
    int64_t now = dlqb_mono_us();
    for (size_t i = 0; i < DLQB_METRICS_CONNECTIONS; i++) {
      watched *w = &s->conns[i];
      if (w->fd >= 0 && !w->cut &&
          now - w->accepted_us >= (int64_t)DLQB_METRICS_REQUEST_DEADLINE_S * 1000000) {
        shutdown(w->fd, SHUT_RDWR);
        w->cut = true;
      }
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += WATCH_STEP_US * 1000;
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&s->wake, &s->lock, &until);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* Splits "host:port" / "[v6]:port" into host and port texts. */
static dlqb_status split_addr(const char *addr, char *host, size_t hlen, char *port, size_t plen,
                              dlqb_error *err) {
  const char *colon = strrchr(addr, ':');
  if (colon == NULL || colon == addr || colon[1] == '\0')
    return dlqb_fail(err, DLQB_EINVAL, "metrics address '%s' is not host:port", addr);
  const char *h = addr;
  size_t n = (size_t)(colon - addr);
  if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
    h++;
    n -= 2;
  }
  if (n >= hlen || strlen(colon + 1) >= plen)
    return dlqb_fail(err, DLQB_EINVAL, "metrics address '%s' is too long", addr);
  memcpy(host, h, n);
  host[n] = '\0';
  snprintf(port, plen, "%s", colon + 1);
  return DLQB_OK;
}

/* Binds and listens on addr; we do it rather than libmicrohttpd so that a
 * failure comes back with its errno, and port 0 can be read back. */
static dlqb_status listen_on(const char *addr, int *fd_out, int *port_out, dlqb_error *err) {
  char host[256], port[16];
  dlqb_status st = split_addr(addr, host, sizeof host, port, sizeof port, err);
  if (st != DLQB_OK) return st;
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int gai = getaddrinfo(host, port, &hints, &res);
  if (gai != 0)
    return dlqb_fail(err, DLQB_EINVAL, "cannot resolve metrics address '%s': %s", addr,
                     gai_strerror(gai));
  int fd = -1, saved = 0;
  for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      saved = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 32) == 0) break;
    saved = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  char why[DLQB_ERRNO_TEXT_MAX];
  if (fd < 0)
    return dlqb_fail(err, DLQB_EIO, "cannot listen on %s: %s", addr,
                     dlqb_errno_text(saved, why, sizeof why));
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int bound = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET) bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6) bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  *fd_out = fd;
  *port_out = bound;
  return DLQB_OK;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             char *body, size_t len, enum MHD_ResponseMemoryMode mode) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
  if (r == NULL) {
    if (mode == MHD_RESPMEM_MUST_FREE) free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  /* One request per connection: the deadline counts from the accept. */
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, "Allow", "GET, HEAD");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status, const char *msg) {
  return reply(c, status, "text/plain; charset=utf-8", (char *)msg, strlen(msg),
               MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **req_cls) {
  (void)version;
  (void)upload;
  dlqb_metrics_server *s = cls;
  /* libmicrohttpd calls once with the headers, then per body chunk; answer
   * on the second call so a body (which we ignore) is drained first. */
  if (*req_cls == NULL) {
    *req_cls = s;
    return MHD_YES;
  }
  if (*upload_size != 0) {
    *upload_size = 0;
    return MHD_YES;
  }
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
    return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
  if (strcmp(url, "/metrics") == 0) {
    char *text = NULL;
    size_t len = 0;
    dlqb_error err;
    if (dlqb_metrics_render_set(s->ms, s->n, &text, &len, &err) != DLQB_OK)
      return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len,
                 MHD_RESPMEM_MUST_FREE);
  }
  /* One pipeline's line: /healthz/NAME or /healthz?pipeline=NAME (only
   * where pipelines are named: otherwise /healthz is as it always was). */
  const char *only = NULL;
  if (s->named && strncmp(url, "/healthz/", 9) == 0) only = url + 9;
  else if (s->named && strcmp(url, "/healthz") == 0)
    only = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pipeline");
  if (strcmp(url, "/healthz") == 0 || only != NULL) {
    char body[DLQB_MAX_PIPELINES * (DLQB_ERROR_MAX + 64)];
    bool found = true;
    bool ok = dlqb_metrics_health_of(s->ms, s->n, only, body, sizeof body, &found);
    if (!found) return reply_text(c, MHD_HTTP_NOT_FOUND, "no such pipeline\n");
    return reply(c, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain; charset=utf-8",
                 body, strlen(body), MHD_RESPMEM_MUST_COPY);
  }
  if (strcmp(url, "/") == 0)
    return reply_text(c, MHD_HTTP_OK, "dlq-bridge: see /metrics and /healthz\n");
  return reply_text(c, MHD_HTTP_NOT_FOUND, "not found\n");
}

dlqb_status dlqb_metrics_server_start(dlqb_metrics *m, const char *addr, dlqb_metrics_server **out,
                                      dlqb_error *err) {
  return dlqb_metrics_server_start_set(&m, 1, addr, out, err);
}

dlqb_status dlqb_metrics_server_start_set(dlqb_metrics *const *ms, size_t n, const char *addr,
                                          dlqb_metrics_server **out, dlqb_error *err) {
  *out = NULL;
  if (n == 0 || n > DLQB_MAX_PIPELINES)
    return dlqb_fail(err, DLQB_EINVAL, "the metrics server serves 1 to %d registries",
                     DLQB_MAX_PIPELINES);
  dlqb_metrics_server *s = calloc(1, sizeof *s);
  if (s == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  s->n = n;
  for (size_t i = 0; i < n; i++) s->ms[i] = ms[i];
  s->named = dlqb_metrics_pipeline(ms[0])[0] != '\0';
  for (size_t i = 0; i < DLQB_METRICS_CONNECTIONS; i++) s->conns[i].fd = -1;
  int fd = -1;
  dlqb_status st = listen_on(addr, &fd, &s->port, err);
  if (st != DLQB_OK) {
    free(s);
    return st;
  }
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->wake, NULL);
  /* The server thread inherits our signal mask: block the stop signals
   * there so they always reach the thread that acts on them. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  s->daemon = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD, 0, NULL, NULL, handle, s,
                               MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                               MHD_OPTION_CONNECTION_LIMIT, (unsigned)DLQB_METRICS_CONNECTIONS,
                               MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)DLQB_METRICS_PER_IP,
                               MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
                               MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_END);
  if (s->daemon != NULL) s->watching = pthread_create(&s->watchdog, NULL, watchdog_main, s) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (s->daemon == NULL || !s->watching) {
    if (s->daemon != NULL) MHD_stop_daemon(s->daemon);
    else close(fd);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return dlqb_fail(err, DLQB_EIO, "cannot start the metrics server on %s", addr);
  }
  *out = s;
  return DLQB_OK;
}

void dlqb_metrics_server_stop(dlqb_metrics_server *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&s->lock);
  s->stopping = true;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->watchdog, NULL);
  MHD_stop_daemon(s->daemon); /* closes the listening socket; every connection's CLOSED notice */
  pthread_cond_destroy(&s->wake);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

int dlqb_metrics_server_port(const dlqb_metrics_server *s) { return s->port; }

/* The console's HTTP side: libmicrohttpd (one thread per connection: a page
 * that reads a deep DLQ takes seconds and must not hold up the others),
 * the body of a form, the security headers of every answer, who is signed
 * in, the CSRF check of every POST, and the routes. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "console.h"
#include "dlqb/file.h"
#include "dlqb/thread.h"

#define CONNECTIONS    64
#define PER_ADDRESS    16
#define IDLE_TIMEOUT_S 30

/* No inline script or style anywhere: the pages load /static/ only. */
static const char csp[] = "default-src 'self'; script-src 'self'; style-src 'self'; "
                          "img-src 'self'; connect-src 'self'; form-action 'self'; "
                          "frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

struct console_server {
  struct MHD_Daemon *daemon;
  char *cert, *key;
};

typedef struct {
  char body[CONSOLE_BODY_MAX + 1];
  size_t len;
  bool too_big;
} upload;

/* Rebuilds the query string from libmicrohttpd's decoded arguments. */
static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value) {
  (void)kind;
  dlqb_html *q = cls;
  if (q->len > 0) dlqb_html_raw(q, "&");
  dlqb_html_url(q, key);
  dlqb_html_raw(q, "=");
  dlqb_html_url(q, value != NULL ? value : "");
  return MHD_YES;
}

static void client_addr(struct MHD_Connection *c, char *buf, size_t len) {
  snprintf(buf, len, "?");
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (ci == NULL || ci->client_addr == NULL) return;
  const struct sockaddr *sa = ci->client_addr;
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
}

static enum MHD_Result send_answer(struct MHD_Connection *c, console_req *r) {
  const char *data = r->out.data != NULL ? r->out.data : "";
  if (r->out.oom) {
    r->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
    data = "out of memory\n";
    r->content_type = "text/plain; charset=utf-8";
  }
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(data), (void *)data, MHD_RESPMEM_MUST_COPY);
  if (resp == NULL) return MHD_NO;
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                          r->content_type ? r->content_type : "text/html; charset=utf-8");
  MHD_add_response_header(resp, "Content-Security-Policy", csp);
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(resp, "X-Frame-Options", "DENY");
  /* same-origin, not no-referrer: with no-referrer a browser sends "Origin:
   * null" on our own forms, and origin_ok could not tell them from a forgery. */
  MHD_add_response_header(resp, "Referrer-Policy", "same-origin");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (r->location[0]) MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, r->location);
  if (r->cookie[0]) MHD_add_response_header(resp, MHD_HTTP_HEADER_SET_COOKIE, r->cookie);
  enum MHD_Result ret = MHD_queue_response(c, r->status ? r->status : MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  return ret;
}

/* A POST from another site's page carries its Origin: refused even before
 * the CSRF token is looked at (SameSite=Strict already keeps the cookie
 * off it). */
static bool origin_ok(struct MHD_Connection *c) {
  const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
  if (origin == NULL) return true;
  if (host == NULL) return false;
  const char *o = strstr(origin, "://");
  return o != NULL && strcmp(o + 3, host) == 0;
}

static void route(struct MHD_Connection *c, console_req *r) {
  const char *p = r->path;
  bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
  bool post = strcmp(r->method, "POST") == 0;
  if (!get && !post) {
    console_error_page(r, MHD_HTTP_METHOD_NOT_ALLOWED, "Not allowed", "GET or POST only.");
    return;
  }
  if (get && strcmp(p, "/static/console.css") == 0) {
    r->content_type = "text/css; charset=utf-8";
    dlqb_html_raw(&r->out, console_css);
    return;
  }
  if (get && strcmp(p, "/static/console.js") == 0) {
    r->content_type = "text/javascript; charset=utf-8";
    dlqb_html_raw(&r->out, console_js);
    return;
  }
  if (post && !origin_ok(c)) {
    console_error_page(r, MHD_HTTP_FORBIDDEN, "Refused", "This form came from another site.");
    return;
  }
  if (strcmp(p, "/login") == 0) {
    if (get) console_page_login(r);
    else console_post_login(r);
    return;
  }
  if (!r->signed_in) {
    if (get) {
      r->status = MHD_HTTP_SEE_OTHER;
      snprintf(r->location, sizeof r->location, "/login");
    } else {
      console_error_page(r, MHD_HTTP_FORBIDDEN, "Not signed in", "Sign in first.");
    }
    return;
  }
  if (post) {
    char token[CONSOLE_TOKEN_HEX + 2] = "";
    if (!console_form(r, "csrf", token, sizeof token) || !dlqb_secret_equal(token, r->who.csrf)) {
      console_error_page(r, MHD_HTTP_FORBIDDEN, "Refused",
                         "This form is missing its CSRF token, or the token is not this "
                         "session's. Nothing was done.");
      return;
    }
    if (strcmp(p, "/logout") == 0) console_post_logout(r);
    else if (strcmp(p, "/preview") == 0) console_post_preview(r);
    else if (strcmp(p, "/run") == 0) console_post_run(r);
    else if (strcmp(p, "/review/act") == 0) console_post_review_act(r);
    else if (strcmp(p, "/edit") == 0) console_post_edit(r);
    else if (strcmp(p, "/edit/decide") == 0) console_post_edit_decide(r);
    else if (strcmp(p, "/stop") == 0) console_post_stop(r);
    else console_error_page(r, MHD_HTTP_NOT_FOUND, "Not found", "No such action.");
    return;
  }
  if (strcmp(p, "/") == 0) console_page_groups(r);
  else if (strcmp(p, "/group") == 0) console_page_group(r);
  else if (strcmp(p, "/item") == 0) console_page_item(r);
  else if (strcmp(p, "/job") == 0) console_page_job(r);
  else if (strcmp(p, "/job.json") == 0) console_json_job(r);
  else if (strcmp(p, "/jobs") == 0) console_page_jobs(r);
  else if (strcmp(p, "/review") == 0) console_page_review(r);
  else console_error_page(r, MHD_HTTP_NOT_FOUND, "Not found", "No such page.");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *data_size, void **req_cls) {
  (void)cls;
  (void)version;
  upload *u = *req_cls;
  if (u == NULL) {
    u = calloc(1, sizeof *u);
    if (u == NULL) return MHD_NO;
    *req_cls = u;
    return MHD_YES;
  }
  if (*data_size != 0) {
    if (u->len + *data_size > CONSOLE_BODY_MAX) u->too_big = true;
    else {
      memcpy(u->body + u->len, data, *data_size);
      u->len += *data_size;
      u->body[u->len] = '\0';
    }
    *data_size = 0;
    return MHD_YES;
  }
  console_req *r = calloc(1, sizeof *r);
  if (r == NULL) return MHD_NO;
  dlqb_html query = {0};
  MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, add_arg, &query);
  char addr[64];
  client_addr(c, addr, sizeof addr);
  r->method = method;
  r->path = url;
  r->query = query.data != NULL ? query.data : "";
  r->body = u->body;
  r->body_len = u->len;
  r->addr = addr;
  char sid[CONSOLE_TOKEN_HEX + 2];
  const char *cookie = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_COOKIE);
  if (dlqb_cookie_get(cookie, "dlqb_session", sid, sizeof sid))
    r->signed_in = console_session_find(sid, &r->who);
  if (u->too_big) console_error_page(r, 413, "Too large", "The form is too large.");
  else route(c, r);
  enum MHD_Result ret = send_answer(c, r);
  explicit_bzero(&r->who, sizeof r->who);
  explicit_bzero(u->body, u->len); /* a sign-in form holds a password */
  dlqb_html_free(&r->out);
  dlqb_html_free(&query);
  free(r);
  return ret;
}

static void on_done(void *cls, struct MHD_Connection *c, void **req_cls,
                    enum MHD_RequestTerminationCode code) {
  (void)cls;
  (void)c;
  (void)code;
  free(*req_cls);
  *req_cls = NULL;
}

/* Binds addr ("host:port", "[v6]:port") ourselves so a failure keeps its
 * errno and port 0 can be read back. */
static int listen_on(const char *addr, int *port, char *why, size_t why_len) {
  char host[256];
  const char *colon = strrchr(addr, ':');
  if (colon == NULL || colon == addr || (size_t)(colon - addr) >= sizeof host) {
    snprintf(why, why_len, "console address '%s' is not host:port", addr);
    return -1;
  }
  size_t n = (size_t)(colon - addr);
  const char *h = addr;
  if (h[0] == '[' && n >= 2 && h[n - 1] == ']') h++, n -= 2;
  memcpy(host, h, n);
  host[n] = '\0';
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                  *res = NULL;
  int gai = getaddrinfo(host, colon + 1, &hints, &res);
  if (gai != 0) {
    snprintf(why, why_len, "cannot resolve console address '%s': %s", addr, gai_strerror(gai));
    return -1;
  }
  int fd = -1;
  for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 32) != 0) {
      snprintf(why, why_len, "cannot listen on %s: %s", addr, strerror(errno));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return -1;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  *port = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET) *port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6) *port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  return fd;
}

/* The PEM file at path, NUL-terminated (libmicrohttpd takes a string). */
static char *read_pem(const char *path, const char *what, char *why, size_t why_len) {
  char *buf = NULL;
  size_t cap = 0, len = 0;
  char *text = NULL;
  if (dlqb_read_file(path, &buf, &cap, &len) && len > 0 && (text = malloc(len + 1)) != NULL) {
    memcpy(text, buf, len);
    text[len] = '\0';
  } else {
    snprintf(why, why_len, "cannot read the console's %s '%s' (missing, empty or unreadable)", what,
             path);
  }
  if (buf != NULL) explicit_bzero(buf, cap);
  free(buf);
  return text;
}

bool console_server_start(const char *addr, const char *cert_file, const char *key_file,
                          console_server **out, int *port, char *why, size_t why_len) {
  *out = NULL;
  console_server *s = calloc(1, sizeof *s);
  if (s == NULL) {
    snprintf(why, why_len, "out of memory");
    return false;
  }
  unsigned flags =
      MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (cert_file != NULL && cert_file[0] != '\0') {
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
      snprintf(why, why_len,
               "this libmicrohttpd has no TLS: console_tls_cert_file cannot be served");
      free(s);
      return false;
    }
    s->cert = read_pem(cert_file, "certificate", why, why_len);
    s->key = s->cert ? read_pem(key_file, "key", why, why_len) : NULL;
    if (s->key == NULL) {
      free(s->cert);
      free(s);
      return false;
    }
    flags |= MHD_USE_TLS;
  }
  int fd = listen_on(addr, port, why, why_len);
  if (fd < 0) {
    free(s->cert);
    free(s->key);
    free(s);
    return false;
  }
  /* A thread per connection, and a page's pass decodes broker frames on
   * it: the frame-reading stack (dlqb/thread.h), not glibc's default (2 MiB
   * under an unlimited RLIMIT_STACK; a deep header crashed the console). */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  if (s->cert != NULL)
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, handle, NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)PER_ADDRESS, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
        MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL, MHD_OPTION_THREAD_STACK_SIZE,
        (size_t)DLQB_FRAME_STACK_BYTES, MHD_OPTION_HTTPS_MEM_CERT, s->cert,
        MHD_OPTION_HTTPS_MEM_KEY, s->key, MHD_OPTION_END);
  else
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, handle, NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)PER_ADDRESS, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
        MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL, MHD_OPTION_THREAD_STACK_SIZE,
        (size_t)DLQB_FRAME_STACK_BYTES, MHD_OPTION_END);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (s->daemon == NULL) {
    close(fd);
    snprintf(why, why_len, "cannot start the console's HTTP server on %s", addr);
    free(s->cert);
    free(s->key);
    free(s);
    return false;
  }
  *out = s;
  return true;
}

void console_server_stop(console_server *s) {
  if (s == NULL) return;
  MHD_stop_daemon(s->daemon);
  if (s->key != NULL) explicit_bzero(s->key, strlen(s->key));
  free(s->cert);
  free(s->key);
  free(s);
}

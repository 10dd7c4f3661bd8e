/* Connection handling and error translation over rabbitmq-c 0.11. */
#include "dlqb/link.h"

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "dlqb/log.h"

#define CONNECT_TIMEOUT_S 10
#define PROBE_TIMEOUT_MS  2000 /* the second look at a failed connect */
#define RPC_TIMEOUT_S     30
/* A queue's own process answers a passive declare, and it answers nothing
 * while it takes back a deep pass's items (a million on 4.0.5: minutes).
 * Liveness is the heartbeat's job (60 s of silence is a lost connection),
 * so the wait may be this long. */
#define QUEUE_PATIENCE_S 600
#define HEARTBEAT_S      30
#define FRAME_MAX        131072

struct dlqb_link {
  amqp_connection_state_t conn;
  int broker_major;
  int last_reply_code; /* of the last channel or connection close; 0: none */
  char user[256];      /* the broker user it logged in as */
};

amqp_bytes_t dlqb_bytes(const char *s) {
  amqp_bytes_t b = {strlen(s), (void *)s};
  return b;
}

amqp_connection_state_t dlqb_link_conn(dlqb_link *link) { return link->conn; }

int dlqb_link_broker_major(const dlqb_link *link) { return link->broker_major; }

int dlqb_link_reply_code(const dlqb_link *link) { return link->last_reply_code; }

const char *dlqb_link_user(const dlqb_link *link) { return link->user; }

dlqb_status dlqb_link_url_user(const char *url, char *dst, size_t cap, dlqb_error *err) {
  char copy[DLQB_CONFIG_STR_MAX];
  snprintf(copy, sizeof copy, "%s", url);
  struct amqp_connection_info ci;
  amqp_default_connection_info(&ci);
  bool ok = amqp_parse_url(copy, &ci) == AMQP_STATUS_OK;
  if (ok) snprintf(dst, cap, "%s", ci.user);
  explicit_bzero(copy, sizeof copy);
  return ok ? DLQB_OK : dlqb_fail(err, DLQB_EINVAL, "invalid broker url");
}

size_t dlqb_link_frame_max(dlqb_link *link) { return (size_t)amqp_get_frame_max(link->conn); }

/* rabbitmq-c reports a failed TCP connect only as "a socket error
 * occurred" (errno is left at EINPROGRESS). On that path only, one more
 * connect of our own finds the reason an operator can act on ("connection
 * refused", "no route to host"); "" when it cannot tell. */
static const char *connect_failure_reason(const char *host, int port, char *buf, size_t cap) {
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  if (getaddrinfo(host, service, &hints, &res) != 0) return "";
  int why = 0;
  for (struct addrinfo *ai = res; ai != NULL && why == 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      why = errno;
      struct pollfd pf = {.fd = fd, .events = POLLOUT};
      socklen_t len = sizeof why;
      if (why == EINPROGRESS && (poll(&pf, 1, PROBE_TIMEOUT_MS) != 1 ||
                                 getsockopt(fd, SOL_SOCKET, SO_ERROR, &why, &len) != 0))
        why = ETIMEDOUT;
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (why == 0 || cap == 0) return "";
  return dlqb_errno_text(why, buf, cap);
}

dlqb_status dlqb_link_status(int status, const char *what, dlqb_error *err) {
  if (status >= 0) return DLQB_OK;
  dlqb_status s = DLQB_ECONN;
  if (status == AMQP_STATUS_TIMEOUT) s = DLQB_ETIMEOUT;
  if (status == AMQP_STATUS_NO_MEMORY) s = DLQB_ENOMEM;
  /* rabbitmq-c's "a socket error occurred" alone reads like a problem with
   * what was asked (a queue, a message): say the connection went. */
  if (status == AMQP_STATUS_SOCKET_ERROR || status == AMQP_STATUS_CONNECTION_CLOSED ||
      status == AMQP_STATUS_SOCKET_CLOSED || status == AMQP_STATUS_HEARTBEAT_TIMEOUT)
    return dlqb_fail(err, s, "cannot %s: the connection to the broker was lost (%s)", what,
                     amqp_error_string2(status));
  return dlqb_fail(err, s, "cannot %s: %s", what, amqp_error_string2(status));
}

static dlqb_status reopen_channel(dlqb_link *link) {
  amqp_channel_open(link->conn, DLQB_CHANNEL);
  amqp_rpc_reply_t r = amqp_get_rpc_reply(link->conn);
  return r.reply_type == AMQP_RESPONSE_NORMAL ? DLQB_OK : DLQB_ECONN;
}

dlqb_status dlqb_link_reply(dlqb_link *link, amqp_rpc_reply_t reply, const char *what,
                            dlqb_error *err) {
  switch (reply.reply_type) {
  case AMQP_RESPONSE_NORMAL: return DLQB_OK;
  case AMQP_RESPONSE_NONE:
    return dlqb_fail(err, DLQB_ECONN, "cannot %s: no reply from the broker", what);
  case AMQP_RESPONSE_LIBRARY_EXCEPTION: return dlqb_link_status(reply.library_error, what, err);
  case AMQP_RESPONSE_SERVER_EXCEPTION: break;
  }
  if (reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const amqp_channel_close_t *c = reply.reply.decoded;
    link->last_reply_code = c->reply_code;
    dlqb_fail(err, DLQB_EBROKER, "cannot %s: %.*s", what, (int)c->reply_text.len,
              (const char *)c->reply_text.bytes);
    amqp_channel_close_ok_t ok = {0};
    amqp_send_method(link->conn, DLQB_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    if (reopen_channel(link) != DLQB_OK) return DLQB_ECONN;
    return DLQB_EBROKER;
  }
  if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const amqp_connection_close_t *c = reply.reply.decoded;
    link->last_reply_code = c->reply_code;
    dlqb_fail(err, DLQB_ECONN, "cannot %s: connection closed by broker: %.*s", what,
              (int)c->reply_text.len, (const char *)c->reply_text.bytes);
    amqp_connection_close_ok_t ok = {0};
    amqp_send_method(link->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    return DLQB_ECONN;
  }
  return dlqb_fail(err, DLQB_EBROKER, "cannot %s: unexpected broker method 0x%08x", what,
                   (unsigned)reply.reply.id);
}

/* Reads the first line of a password file. The file should be readable by
 * the bridge's user only; we do not refuse wider modes here because
 * container secrets are often mounted 0444. */
static dlqb_status read_password_file(const char *path, char *buf, size_t len, dlqb_error *err) {
  char why[DLQB_ERRNO_TEXT_MAX];
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return dlqb_fail(err, DLQB_EIO, "cannot read password file '%s': %s", path,
                     dlqb_errno_text(errno, why, sizeof why));
  if (fgets(buf, (int)len, f) == NULL) buf[0] = '\0';
  fclose(f);
  buf[strcspn(buf, "\r\n")] = '\0';
  if (buf[0] == '\0') return dlqb_fail(err, DLQB_EINVAL, "password file '%s' is empty", path);
  return DLQB_OK;
}

static int tls_socket_setup(amqp_socket_t *sock, const dlqb_broker_conf *broker, dlqb_error *err) {
  /* rabbitmq-c verifies peer and hostname by default; we say so explicitly
   * so that no later default change can weaken it. */
  amqp_ssl_socket_set_verify_peer(sock, 1);
  amqp_ssl_socket_set_verify_hostname(sock, 1);
  if (amqp_ssl_socket_set_ssl_versions(sock, AMQP_TLSv1_2, AMQP_TLSvLATEST) != AMQP_STATUS_OK)
    return dlqb_fail(err, DLQB_EINVAL, "cannot require tls 1.2 or later");
  if (broker->tls_ca_file[0] != '\0' &&
      amqp_ssl_socket_set_cacert(sock, broker->tls_ca_file) != AMQP_STATUS_OK)
    return dlqb_fail(err, DLQB_EINVAL, "cannot load tls ca file '%s'", broker->tls_ca_file);
  if (broker->tls_cert_file[0] != '\0' &&
      amqp_ssl_socket_set_key(sock, broker->tls_cert_file, broker->tls_key_file) != AMQP_STATUS_OK)
    return dlqb_fail(err, DLQB_EINVAL, "cannot load tls client certificate '%s' or key '%s'",
                     broker->tls_cert_file, broker->tls_key_file);
  return DLQB_OK;
}

static int parse_major(amqp_connection_state_t conn) {
  const amqp_table_t *props = amqp_get_server_properties(conn);
  for (int i = 0; props != NULL && i < props->num_entries; i++) {
    const amqp_table_entry_t *e = &props->entries[i];
    if (e->key.len == 7 && memcmp(e->key.bytes, "version", 7) == 0 &&
        e->value.kind == AMQP_FIELD_KIND_UTF8 && e->value.value.bytes.len > 0)
      return atoi((const char *)e->value.value.bytes.bytes);
  }
  return 0;
}

/* The TCP (and TLS) connection of conn to ci's host and port, within
 * CONNECT_TIMEOUT_S: "cannot connect to broker at HOST:PORT: why". */
static dlqb_status open_socket(amqp_connection_state_t conn, const dlqb_broker_conf *broker,
                               const struct amqp_connection_info *ci, dlqb_error *err) {
  amqp_socket_t *sock = ci->ssl ? amqp_ssl_socket_new(conn) : amqp_tcp_socket_new(conn);
  if (sock == NULL) return dlqb_fail(err, DLQB_ENOMEM, "cannot create socket");
  dlqb_status st;
  if (ci->ssl && (st = tls_socket_setup(sock, broker, err)) != DLQB_OK) return st;
  struct timeval tv = {CONNECT_TIMEOUT_S, 0};
  int rc = amqp_socket_open_noblock(sock, ci->host, ci->port, &tv);
  if (rc == AMQP_STATUS_OK) return DLQB_OK;
  const char *hint =
      (rc == AMQP_STATUS_SSL_ERROR || rc == AMQP_STATUS_SSL_CONNECTION_FAILED ||
       rc == AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED || rc == AMQP_STATUS_SSL_PEER_VERIFY_FAILED)
          ? " (tls: check DLQ_BRIDGE_TLS_CA_FILE and that the certificate "
            "names this host)"
          : "";
  char reason[128];
  const char *why = rc == AMQP_STATUS_SOCKET_ERROR
                        ? connect_failure_reason(ci->host, ci->port, reason, sizeof reason)
                        : "";
  return dlqb_fail(err, DLQB_ECONN, "cannot connect to broker at %s:%d: %s%s", ci->host, ci->port,
                   *why ? why : amqp_error_string2(rc), hint);
}

dlqb_status dlqb_link_reachable(const dlqb_broker_conf *broker, dlqb_error *err) {
  char url[DLQB_CONFIG_STR_MAX], redacted[DLQB_CONFIG_STR_MAX];
  struct amqp_connection_info ci;
  snprintf(url, sizeof url, "%s", broker->url);
  dlqb_url_redact(broker->url, redacted, sizeof redacted);
  amqp_default_connection_info(&ci);
  dlqb_status st;
  amqp_connection_state_t conn = NULL;
  if (amqp_parse_url(url, &ci) != AMQP_STATUS_OK)
    st = dlqb_fail(err, DLQB_EINVAL, "invalid broker url '%s'", redacted);
  else if ((conn = amqp_new_connection()) == NULL)
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  else st = open_socket(conn, broker, &ci, err);
  /* No login: the connection is dropped before the AMQP handshake. */
  if (conn != NULL) amqp_destroy_connection(conn);
  explicit_bzero(url, sizeof url);
  return st;
}

dlqb_status dlqb_link_open(const dlqb_broker_conf *broker, const char *purpose, dlqb_link **out,
                           dlqb_error *err) {
  *out = NULL;
  char url[DLQB_CONFIG_STR_MAX];
  char redacted[DLQB_CONFIG_STR_MAX];
  char password[512] = "";
  struct amqp_connection_info ci;
  dlqb_status st = DLQB_OK;

  snprintf(url, sizeof url, "%s", broker->url);
  dlqb_url_redact(broker->url, redacted, sizeof redacted);
  amqp_default_connection_info(&ci);
  if (amqp_parse_url(url, &ci) != AMQP_STATUS_OK) {
    explicit_bzero(url, sizeof url);
    return dlqb_fail(err, DLQB_EINVAL, "invalid broker url '%s'", redacted);
  }
  const char *pw = ci.password;
  if (broker->password_file[0] != '\0') {
    st = read_password_file(broker->password_file, password, sizeof password, err);
    if (st != DLQB_OK) {
      explicit_bzero(url, sizeof url);
      return st;
    }
    pw = password;
  }

  dlqb_link *link = calloc(1, sizeof *link);
  if (link == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  link->conn = amqp_new_connection();
  if (link->conn == NULL) {
    free(link);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }

  if ((st = open_socket(link->conn, broker, &ci, err)) != DLQB_OK) goto fail;
  struct timeval rpc = {RPC_TIMEOUT_S, 0};
  amqp_set_rpc_timeout(link->conn, &rpc);

  /* Announce connection.blocked so a resource alarm is visible to us, and
   * name the connection for the management UI. */
  amqp_table_entry_t caps[2] = {
      {.key = amqp_cstring_bytes("connection.blocked"),
       .value = {.kind = AMQP_FIELD_KIND_BOOLEAN, .value.boolean = 1}},
      {.key = amqp_cstring_bytes("consumer_cancel_notify"),
       .value = {.kind = AMQP_FIELD_KIND_BOOLEAN, .value.boolean = 1}},
  };
  amqp_table_entry_t props[3] = {
      {.key = amqp_cstring_bytes("capabilities"),
       .value = {.kind = AMQP_FIELD_KIND_TABLE, .value.table = {2, caps}}},
      {.key = amqp_cstring_bytes("connection_name"),
       .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes(purpose)}},
      {.key = amqp_cstring_bytes("product"),
       .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("dlq-bridge")}},
  };
  amqp_table_t client_props = {3, props};
  amqp_rpc_reply_t r =
      amqp_login_with_properties(link->conn, ci.vhost, 0, FRAME_MAX, HEARTBEAT_S, &client_props,
                                 AMQP_SASL_METHOD_PLAIN, ci.user, pw);
  explicit_bzero(password, sizeof password);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    char what[256];
    snprintf(what, sizeof what, "log in to broker at %s:%d as '%s' (vhost '%s')", ci.host, ci.port,
             ci.user, ci.vhost);
    st = dlqb_link_reply(link, r, what, err);
    if (st == DLQB_OK) st = DLQB_ECONN;
    goto fail;
  }
  link->broker_major = parse_major(link->conn);
  snprintf(link->user, sizeof link->user, "%s", ci.user);
  amqp_channel_open(link->conn, DLQB_CHANNEL);
  st = dlqb_link_reply(link, amqp_get_rpc_reply(link->conn), "open channel", err);
  if (st != DLQB_OK) goto fail;
  *out = link;
  explicit_bzero(url, sizeof url); /* it held the password */
  return DLQB_OK;

fail:
  explicit_bzero(url, sizeof url);
  explicit_bzero(password, sizeof password);
  dlqb_link_abort(link);
  return st;
}

void dlqb_link_close(dlqb_link *link) {
  if (link == NULL) return;
  amqp_channel_close(link->conn, DLQB_CHANNEL, AMQP_REPLY_SUCCESS);
  amqp_connection_close(link->conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(link->conn);
  free(link);
}

void dlqb_link_abort(dlqb_link *link) {
  if (link == NULL) return;
  amqp_destroy_connection(link->conn);
  free(link);
}

dlqb_status dlqb_link_open_channel(dlqb_link *link, amqp_channel_t channel, dlqb_error *err) {
  amqp_channel_open(link->conn, channel);
  return dlqb_link_reply(link, amqp_get_rpc_reply(link->conn), "open channel", err);
}

dlqb_status dlqb_link_confirm_select(dlqb_link *link, amqp_channel_t channel, dlqb_error *err) {
  amqp_confirm_select(link->conn, channel);
  return dlqb_link_reply(link, amqp_get_rpc_reply(link->conn), "enable publisher confirms", err);
}

dlqb_status dlqb_link_queue_depth(dlqb_link *link, const char *queue, uint32_t *depth,
                                  uint32_t *consumers, dlqb_error *err) {
  char what[200];
  /* A passive declare: "find" would blame the queue for a lost connection. */
  snprintf(what, sizeof what, "read the depth of queue '%s'", queue);
  struct timeval patient = {QUEUE_PATIENCE_S, 0}, usual = {RPC_TIMEOUT_S, 0};
  amqp_set_rpc_timeout(link->conn, &patient);
  amqp_queue_declare_ok_t *ok =
      amqp_queue_declare(link->conn, DLQB_CHANNEL, dlqb_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
  amqp_rpc_reply_t reply = amqp_get_rpc_reply(link->conn);
  amqp_set_rpc_timeout(link->conn, &usual);
  if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
      reply.library_error == AMQP_STATUS_TIMEOUT)
    return dlqb_fail(err, DLQB_ETIMEOUT,
                     "cannot %s: the queue did not answer in %d s while the broker did "
                     "(busy taking back a deep pass's items?)",
                     what, QUEUE_PATIENCE_S);
  dlqb_status st = dlqb_link_reply(link, reply, what, err);
  if (st != DLQB_OK) return st;
  if (depth) *depth = ok->message_count;
  if (consumers) *consumers = ok->consumer_count;
  return DLQB_OK;
}

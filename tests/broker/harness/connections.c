/* The broker tests' harness (harness.h): connections and channels: publish
 * with a confirm, get, queue depth and consumers, declare. */
#include "internal.h"

/* ---- connections ------------------------------------------------------ */

/* Describes a failed RPC reply in one line. */
void th__say_reply(const char *what, amqp_rpc_reply_t r) {
  switch (r.reply_type) {
  case AMQP_RESPONSE_NORMAL: return;
  case AMQP_RESPONSE_NONE: th__say("%s: no reply", what); return;
  case AMQP_RESPONSE_LIBRARY_EXCEPTION:
    th__say("%s: %s", what, amqp_error_string2(r.library_error));
    return;
  case AMQP_RESPONSE_SERVER_EXCEPTION:
    if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
      const amqp_channel_close_t *m = r.reply.decoded;
      th__say("%s: channel closed %u %.*s", what, m->reply_code, (int)m->reply_text.len,
              (const char *)m->reply_text.bytes);
    } else if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
      const amqp_connection_close_t *m = r.reply.decoded;
      th__say("%s: connection closed %u %.*s", what, m->reply_code, (int)m->reply_text.len,
              (const char *)m->reply_text.bytes);
    } else {
      th__say("%s: server exception 0x%08x", what, r.reply.id);
    }
    return;
  }
}

/* Opens channel 1 in confirm mode. */
static int th__open_channel(th_conn *c) {
  if (amqp_channel_open(c->conn, 1) == NULL) {
    th__say_reply("channel.open", amqp_get_rpc_reply(c->conn));
    return -1;
  }
  if (amqp_confirm_select(c->conn, 1) == NULL) {
    th__say_reply("confirm.select", amqp_get_rpc_reply(c->conn));
    return -1;
  }
  c->next_tag = 1;
  c->channel_open = true;
  return 0;
}

/* After an RPC failed: if the broker closed the channel, acknowledge that
 * and reopen it so the connection stays usable. */
static int th__recover(th_conn *c, amqp_rpc_reply_t r) {
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    amqp_channel_close_ok_t ok = {0};
    amqp_send_method(c->conn, 1, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    c->channel_open = false;
    return th__open_channel(c);
  }
  c->channel_open = false;
  return -1;
}

/* Opens a TCP connection and logs into vhost; NULL on failure. */
amqp_connection_state_t th__login(const char *vhost, const char *user, const char *password) {
  const th_env *e = th_env_get();
  if (e == NULL) return NULL;
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *sock = conn ? amqp_tcp_socket_new(conn) : NULL;
  if (sock == NULL) {
    th__say("cannot create a socket");
    if (conn) amqp_destroy_connection(conn);
    return NULL;
  }
  struct timeval tv = {.tv_sec = TH_CONNECT_TIMEOUT_MS / 1000, .tv_usec = 0};
  int rc = amqp_socket_open_noblock(sock, "127.0.0.1", e->amqp_port, &tv);
  if (rc != AMQP_STATUS_OK) {
    th__say("connect to 127.0.0.1:%d: %s", e->amqp_port, amqp_error_string2(rc));
    amqp_destroy_connection(conn);
    return NULL;
  }
  amqp_rpc_reply_t r =
      amqp_login(conn, vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, user, password);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    th__say_reply("login", r);
    amqp_destroy_connection(conn);
    return NULL;
  }
  return conn;
}

th_conn *th_connect(const th_vhost *v) { return th_connect_as(v, "guest", "guest"); }

th_conn *th_connect_as(const th_vhost *v, const char *user, const char *password) {
  th_conn *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->conn = th__login(v->name, user, password);
  if (c->conn == NULL || th__open_channel(c) != 0) {
    th_close(c);
    return NULL;
  }
  return c;
}

amqp_connection_state_t th_conn_amqp(th_conn *c) { return c->conn; }

void th_close(th_conn *c) {
  if (c == NULL) return;
  if (c->conn != NULL) {
    if (c->channel_open) amqp_channel_close(c->conn, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c->conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c->conn);
  }
  free(c);
}

/* Reads frames until the confirm for tag arrives. A basic.return before it
 * means the message was unroutable, which counts as failure. */
static int th__await_confirm(th_conn *c, uint64_t tag, int timeout_ms) {
  int64_t deadline = th__mono_ms() + timeout_ms;
  bool returned = false;
  for (;;) {
    int64_t left = deadline - th__mono_ms();
    if (left <= 0) {
      th__say("no publisher confirm within %d ms", timeout_ms);
      return -1;
    }
    struct timeval tv = {.tv_sec = (time_t)(left / 1000),
                         .tv_usec = (suseconds_t)(left % 1000) * 1000};
    amqp_frame_t frame;
    int rc = amqp_simple_wait_frame_noblock(c->conn, &frame, &tv);
    if (rc == AMQP_STATUS_TIMEOUT) continue;
    if (rc != AMQP_STATUS_OK) {
      th__say("waiting for a confirm: %s", amqp_error_string2(rc));
      c->channel_open = false;
      return -1;
    }
    if (frame.frame_type != AMQP_FRAME_METHOD) continue;
    switch (frame.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
      const amqp_basic_ack_t *ack = frame.payload.method.decoded;
      if (ack->delivery_tag == tag || (ack->multiple && ack->delivery_tag >= tag)) {
        if (returned) th__say("message was returned as unroutable");
        return returned ? -1 : 0;
      }
      break;
    }
    case AMQP_BASIC_NACK_METHOD: {
      const amqp_basic_nack_t *nack = frame.payload.method.decoded;
      if (nack->delivery_tag == tag || (nack->multiple && nack->delivery_tag >= tag)) {
        th__say("broker nacked the publish");
        return -1;
      }
      break;
    }
    case AMQP_BASIC_RETURN_METHOD: {
      amqp_message_t msg;
      amqp_rpc_reply_t r = amqp_read_message(c->conn, frame.channel, &msg, 0);
      if (r.reply_type != AMQP_RESPONSE_NORMAL) return -1;
      amqp_destroy_message(&msg);
      returned = true;
      break;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
      const amqp_channel_close_t *m = frame.payload.method.decoded;
      th__say("publish: channel closed %u %.*s", m->reply_code, (int)m->reply_text.len,
              (const char *)m->reply_text.bytes);
      amqp_channel_close_ok_t ok = {0};
      amqp_send_method(c->conn, 1, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
      c->channel_open = false;
      th__open_channel(c);
      return -1;
    }
    case AMQP_CONNECTION_CLOSE_METHOD:
      th__say("publish: connection closed by the broker");
      c->channel_open = false;
      return -1;
    default: break;
    }
  }
}

int th_publish(th_conn *c, const char *exchange, const char *routing_key, const th_msg *m) {
  return th_publish_within(c, exchange, routing_key, m, TH_CONFIRM_TIMEOUT_MS);
}

int th_publish_within(th_conn *c, const char *exchange, const char *routing_key, const th_msg *m,
                      int timeout_ms) {
  if (c == NULL || !c->channel_open) return -1;
  amqp_basic_properties_t props;
  amqp_table_entry_t entries[TH_MAX_HEADERS];
  th__to_amqp(m, &props, entries);
  amqp_bytes_t body = {.len = m->body_len, .bytes = m->body};
  int rc = amqp_basic_publish(c->conn, 1, amqp_cstring_bytes(exchange),
                              amqp_cstring_bytes(routing_key), 1, 0, &props, body);
  if (rc != AMQP_STATUS_OK) {
    th__say("basic.publish: %s", amqp_error_string2(rc));
    c->channel_open = false;
    return -1;
  }
  int result = th__await_confirm(c, c->next_tag++, timeout_ms);
  amqp_maybe_release_buffers(c->conn);
  return result;
}

int th_get(th_conn *c, const char *queue, th_msg *out) {
  if (c == NULL || !c->channel_open) return -1;
  amqp_rpc_reply_t r = amqp_basic_get(c->conn, 1, amqp_cstring_bytes(queue), 1);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    th__say_reply(queue, r);
    th__recover(c, r);
    return -1;
  }
  if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) return 0;
  const amqp_basic_get_ok_t *ok = r.reply.decoded;
  bool redelivered = ok->redelivered != 0;
  amqp_message_t msg;
  r = amqp_read_message(c->conn, 1, &msg, 0);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    th__say_reply("reading a message", r);
    c->channel_open = false;
    return -1;
  }
  th_msg_release(out);
  th_msg_init(out);
  int rc = th__from_amqp(out, &msg.properties, msg.body);
  out->redelivered = redelivered;
  amqp_destroy_message(&msg);
  amqp_maybe_release_buffers(c->conn);
  return rc == 0 ? 1 : -1;
}

/* Passive queue.declare: fills message and consumer counts. */
static int th__inspect(th_conn *c, const char *queue, long *messages, long *consumers) {
  if (c == NULL || !c->channel_open) return -1;
  amqp_queue_declare_ok_t *ok =
      amqp_queue_declare(c->conn, 1, amqp_cstring_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
  if (ok == NULL) {
    th__recover(c, amqp_get_rpc_reply(c->conn));
    return -1;
  }
  *messages = (long)ok->message_count;
  *consumers = (long)ok->consumer_count;
  amqp_maybe_release_buffers(c->conn);
  return 0;
}

long th_queue_depth(th_conn *c, const char *queue) {
  long messages, consumers;
  return th__inspect(c, queue, &messages, &consumers) == 0 ? messages : -1;
}

long th_queue_consumers(th_conn *c, const char *queue) {
  long messages, consumers;
  return th__inspect(c, queue, &messages, &consumers) == 0 ? consumers : -1;
}

int th_queue_declare(th_conn *c, const char *queue, const th_arg *args, size_t nargs) {
  amqp_table_entry_t entries[16];
  if (c == NULL || !c->channel_open || nargs > 16) return -1;
  for (size_t i = 0; i < nargs; i++) {
    entries[i].key = amqp_cstring_bytes(args[i].key);
    if (args[i].str != NULL) {
      entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
      entries[i].value.value.bytes = amqp_cstring_bytes(args[i].str);
    } else {
      entries[i].value.kind = AMQP_FIELD_KIND_I64;
      entries[i].value.value.i64 = args[i].num;
    }
  }
  amqp_table_t table = {.num_entries = (int)nargs, .entries = entries};
  if (amqp_queue_declare(c->conn, 1, amqp_cstring_bytes(queue), 0, 1, 0, 0, table) == NULL) {
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c->conn);
    th__say_reply(queue, r);
    th__recover(c, r);
    return -1;
  }
  return 0;
}

typedef struct {
  th_conn *c;
  const char *queue;
  long n;
  bool consumers;
} th__count_wait;

static bool th__count_reached(void *arg) {
  th__count_wait *w = arg;
  long have = w->consumers ? th_queue_consumers(w->c, w->queue) : th_queue_depth(w->c, w->queue);
  return have >= w->n;
}

int th_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

bool th_port_accepts(void *arg) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t) * (const int *)arg),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bool ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  return ok;
}

bool th_wait_depth(th_conn *c, const char *queue, long n, int timeout_ms) {
  th__count_wait w = {c, queue, n, false};
  return th_wait_until(th__count_reached, &w, timeout_ms);
}

bool th_wait_consumers(th_conn *c, const char *queue, long n, int timeout_ms) {
  th__count_wait w = {c, queue, n, true};
  return th_wait_until(th__count_reached, &w, timeout_ms);
}

/* The broker tests' harness (harness.h): a worker: consume, ack, reject,
 * report a failure, crash. */
#include "internal.h"

/* ---- workers ---------------------------------------------------------- */

struct th_worker {
  amqp_connection_state_t conn;
  uint64_t last_tag; /* 0 when nothing is waiting to be settled */
};

th_worker *th_worker_open(const th_vhost *v, const char *queue, int prefetch) {
  th_worker *w = calloc(1, sizeof *w);
  if (w == NULL) return NULL;
  w->conn = th__login(v->name, "guest", "guest");
  if (w->conn == NULL) goto fail;
  if (amqp_channel_open(w->conn, 1) == NULL ||
      amqp_basic_qos(w->conn, 1, 0, (uint16_t)prefetch, 0) == NULL ||
      amqp_basic_consume(w->conn, 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0,
                         amqp_empty_table) == NULL) {
    th__say_reply("worker setup", amqp_get_rpc_reply(w->conn));
    goto fail;
  }
  return w;
fail:
  th_worker_crash(w);
  return NULL;
}

int th_worker_next(th_worker *w, th_msg *m, int timeout_ms) {
  int64_t deadline = th__mono_ms() + timeout_ms;
  for (;;) {
    int64_t left = deadline - th__mono_ms();
    if (left < 0) return 0;
    struct timeval tv = {.tv_sec = (time_t)(left / 1000),
                         .tv_usec = (suseconds_t)(left % 1000) * 1000};
    amqp_envelope_t env;
    amqp_maybe_release_buffers(w->conn);
    amqp_rpc_reply_t r = amqp_consume_message(w->conn, &env, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
      th_msg_release(m);
      th_msg_init(m);
      int rc = th__from_amqp(m, &env.message.properties, env.message.body);
      m->redelivered = env.redelivered != 0;
      w->last_tag = env.delivery_tag;
      amqp_destroy_envelope(&env);
      return rc == 0 ? 1 : -1;
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
      return 0;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
      /* Not a delivery: the broker is closing the channel or connection
       * (e.g. the queue was deleted or the node is stopping). */
      amqp_frame_t frame;
      if (amqp_simple_wait_frame(w->conn, &frame) != AMQP_STATUS_OK) return -1;
      if (frame.frame_type == AMQP_FRAME_METHOD &&
          (frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
           frame.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD ||
           frame.payload.method.id == AMQP_BASIC_CANCEL_METHOD))
        return -1;
      continue;
    }
    return -1;
  }
}

int th_worker_ack(th_worker *w) {
  if (w->last_tag == 0) return -1;
  int rc = amqp_basic_ack(w->conn, 1, w->last_tag, 0);
  w->last_tag = 0;
  return rc == AMQP_STATUS_OK ? 0 : -1;
}

int th_worker_reject(th_worker *w) {
  if (w->last_tag == 0) return -1;
  int rc = amqp_basic_reject(w->conn, 1, w->last_tag, 0);
  w->last_tag = 0;
  return rc == AMQP_STATUS_OK ? 0 : -1;
}

int th_worker_report(th_worker *w, th_conn *pub, const th_msg *task, const char *text) {
  th_msg *copy = malloc(sizeof *copy);
  if (copy == NULL) return -1;
  th_msg_init(copy);
  int rc = th_msg_copy(copy, task);
  if (rc == 0) rc = th_msg_set_str(copy, "worker_error", text);
  if (rc == 0) rc = th_publish(pub, "dsr.dlx", "", copy);
  if (rc == 0) rc = th_worker_ack(w);
  th_msg_release(copy);
  free(copy);
  return rc;
}

void th_worker_crash(th_worker *w) {
  if (w == NULL) return;
  if (w->conn != NULL) {
    int fd = amqp_get_sockfd(w->conn);
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
    amqp_destroy_connection(w->conn); /* closes the socket; sends nothing */
  }
  free(w);
}

void th_worker_close(th_worker *w) {
  if (w == NULL) return;
  amqp_channel_close(w->conn, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(w->conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(w->conn);
  free(w);
}

/* What the files of the broker tests' harness (tests/broker/harness/, one
 * per concern) share among themselves; the tests see harness.h only. */
#ifndef TH_INTERNAL_H
#define TH_INTERNAL_H

#include <amqp_tcp_socket.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define TH_CONFIRM_TIMEOUT_MS 10000
#define TH_CONNECT_TIMEOUT_MS 5000
#define TH_POLL_MS            20

extern char **environ;

struct th_conn {
  amqp_connection_state_t conn;
  uint64_t next_tag; /* delivery tag of the next publish (confirm mode) */
  bool channel_open;
};

/* One line of diagnostics on stderr (env.c). */
void th__say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* snprintf that says when the text was cut (env.c). */
int th__fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void th__copy(char *dst, size_t cap, const char *src, size_t len);
void th__sleep_ms(int ms);
int64_t th__mono_ms(void);
/* A whole stream read into a NUL-terminated buffer (mgmt.c). */
char *th__slurp(FILE *f, size_t *len_out);
/* A message to and from rabbitmq-c's structures (messages.c). */
int th__from_amqp(th_msg *m, const amqp_basic_properties_t *p, amqp_bytes_t body);
void th__to_amqp(const th_msg *m, amqp_basic_properties_t *p, amqp_table_entry_t *entries);
/* Connections (connections.c). */
void th__say_reply(const char *what, amqp_rpc_reply_t r);
amqp_connection_state_t th__login(const char *vhost, const char *user, const char *password);

#endif

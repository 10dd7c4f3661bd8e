/* Helpers for the broker tests: the private RabbitMQ node that the ctest
 * fixture starts, a fresh vhost per test, AMQP publish / get / consume over
 * rabbitmq-c 0.11, the management API through curl, and dlq-bridge as a child
 * process.
 *
 * Conventions: functions returning int give 0 (or a count) on success and -1
 * on failure, after printing one line on stderr that says what failed, so a
 * test only asserts on the value. Nothing here sleeps to synchronise: waiting
 * is th_wait_until polling a condition in short steps until a deadline. */
#ifndef DLQB_TEST_HARNESS_H
#define DLQB_TEST_HARNESS_H

#include <amqp.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TH_NAME_MAX 200
#define TH_URL_MAX  512
#define TH_PATH_MAX 1024
/* Headers a th_msg holds. A message dead-lettered from a quorum queue
 * carries 8 broker headers on RabbitMQ 4.0.5 (x-death, x-delivery-count and
 * three x-first-death-* and x-last-death-*), 5 on 3.10.8; 48 leaves room for
 * those, the bridge's own and the hostile test's 22 junk headers. */
#define TH_MAX_HEADERS 48
#define TH_KEY_MAX     128
#define TH_STR_MAX     1024
#define TH_PROP_MAX    256

/* ---- environment ------------------------------------------------------ */

/* Where things are, from the variables ctest sets (DLQB_TEST_NODE_DIR,
 * DLQB_BRIDGE_BIN, DLQB_SOURCE_DIR, DLQB_TEST_LOG_DIR) and the node's
 * node.env file. */
typedef struct {
  char node_dir[TH_PATH_MAX];
  char bridge_bin[TH_PATH_MAX];
  char source_dir[TH_PATH_MAX];
  char log_dir[TH_PATH_MAX];
  int amqp_port;
  int mgmt_port;
} th_env;

/* Reads the environment on the first call; NULL when something is missing.
 * The result stays valid for the life of the process. */
const th_env *th_env_get(void);

/* Epoch milliseconds, wall clock. */
int64_t th_now_ms(void);

/* Formats epoch ms as ISO-8601 UTC with milliseconds ("...T05:09:48.123Z"). */
void th_iso_time(int64_t epoch_ms, char *buf, size_t len);

/* True when s looks like ISO-8601 UTC: YYYY-MM-DDTHH:MM:SS[.fff](Z|+00:00). */
bool th_is_iso_utc(const char *s);

/* Writes "<prefix>-<pid>-<counter>" into buf: unique within the node's life
 * as long as pids are not reused within one test run. */
void th_unique(char *buf, size_t len, const char *prefix);

/* ---- waiting ---------------------------------------------------------- */

typedef bool (*th_cond)(void *arg);

/* Polls cond(arg) every few milliseconds until it is true (returns true) or
 * timeout_ms has passed (returns false after one last check). */
bool th_wait_until(th_cond cond, void *arg, int timeout_ms);

/* A th_cond: true once something accepts connections on 127.0.0.1 at the
 * port *(const int *)arg. */
bool th_port_accepts(void *arg);

/* The node's RabbitMQ release as major * 100 + minor (310 for 3.10.8, 400
 * for 4.0.5), from the management API's rabbitmq_version; read once, -1
 * when it cannot be read. Tests branch on it only where the broker really
 * behaves differently, and say what was measured. */
int th_broker_version(void);

/* ---- management API --------------------------------------------------- */

/* Sends an HTTP request to the node's management API through curl. path
 * starts with "/api/"; body may be NULL. On success returns the HTTP status
 * and, when out is non-NULL, the response body in *out (malloc'd, the caller
 * frees). Returns -1 when curl itself fails. */
int th_mgmt(const char *method, const char *path, const char *body, char **out);

/* GETs path and parses the JSON answer; NULL unless the status is 200.
 * The caller releases the object with json_object_put. */
json_object *th_mgmt_get_json(const char *path);

/* POSTs the JSON file at file to the management API path (curl reads the
 * file, so its size and quoting do not matter). Returns the HTTP status,
 * or -1. */
int th_mgmt_post_file(const char *path, const char *file);

/* Every queue of the vhost with its name, type, durability and arguments,
 * sorted by name (the API sorts), as one JSON text to compare before and
 * after (free() it); NULL on failure. */
char *th_queue_list(const char *vhost);

/* A string member of obj ("" when absent or not a string); the pointer lives
 * as long as obj. */
const char *th_json_str(json_object *obj, const char *key);

/* ---- vhosts ----------------------------------------------------------- */

typedef struct {
  char name[TH_NAME_MAX]; /* [a-z0-9-] only, so it needs no URL escaping */
  char url[TH_URL_MAX];   /* amqp://guest:guest@127.0.0.1:PORT/name */
} th_vhost;

/* Creates (or updates) broker user name with password and no tags, with
 * perms on v (a JSON permissions object, as the management API takes
 * it: {"configure":..,"write":..,"read":..}). 0 on success. */
int th_user_put(const th_vhost *v, const char *name, const char *password, const char *perms);
/* Deletes broker user name (gone already is fine). */
void th_user_delete(const char *name);

/* Creates a new, empty vhost named after tag and gives guest full rights. */
int th_vhost_create(th_vhost *v, const char *tag);

/* Deletes the vhost and everything in it. */
int th_vhost_delete(const th_vhost *v);

/* The management API's name ("127.0.0.1:p -> 127.0.0.1:q") of a connection
 * of vhost v whose client named it with a connection_name that starts with
 * prefix, into name (len bytes); false when there is none (yet: the API
 * lists a connection a moment after it opens). */
bool th_connection_named(const th_vhost *v, const char *prefix, char *name, size_t len);

/* Closes that connection by the management API, as a broker operator or a
 * network cut would (the client sees connection.close): 0, or -1. */
int th_connection_close(const char *name);

/* ---- messages --------------------------------------------------------- */

typedef enum { TH_H_STR, TH_H_INT, TH_H_BOOL, TH_H_OTHER } th_htype;

typedef struct {
  char key[TH_KEY_MAX];
  th_htype type;
  char str[TH_STR_MAX];   /* TH_H_STR: NUL-terminated copy, truncated to fit */
  size_t str_len;         /* TH_H_STR: full length on the wire */
  int64_t num;            /* TH_H_INT, TH_H_BOOL */
  amqp_field_value_t raw; /* TH_H_OTHER: the value, kept in the message's pool */
} th_header;

/* A message as published or as received. Empty strings and 0 mean "property
 * not set". Headers keep their order and may repeat (to test duplicates). */
typedef struct {
  th_header headers[TH_MAX_HEADERS];
  size_t nheaders;
  char message_id[TH_PROP_MAX];
  char content_type[TH_PROP_MAX];
  char correlation_id[TH_PROP_MAX];
  char app_id[TH_PROP_MAX];
  char type[TH_PROP_MAX];
  char expiration[TH_PROP_MAX];
  char user_id[TH_PROP_MAX]; /* the broker refuses one that is not the connection's user */
  bool has_timestamp;
  uint64_t timestamp;
  uint8_t delivery_mode; /* th_msg_init sets 2 (persistent) */
  unsigned char *body;   /* owned; NULL when empty */
  size_t body_len;
  /* Received only: x-death[0] (the latest death) and the redelivered flag. */
  char xdeath_reason[64];
  char xdeath_queue[TH_NAME_MAX];
  bool redelivered;
  amqp_pool_t pool; /* holds TH_H_OTHER values */
} th_msg;

/* Initialises an empty persistent message. Pair with th_msg_release. */
void th_msg_init(th_msg *m);

/* Frees what m owns; m must be initialised again before reuse. NULL-safe. */
void th_msg_release(th_msg *m);

/* Releases and re-initialises m: an empty message again. */
void th_msg_reset(th_msg *m);

/* Deep copy: dst must be freshly initialised (or released and initialised). */
int th_msg_copy(th_msg *dst, const th_msg *src);

/* Replaces the body with a copy of len bytes of data. */
int th_msg_set_body(th_msg *m, const void *data, size_t len);

/* Appends a header, even if one with the same key exists. */
int th_msg_add_str(th_msg *m, const char *key, const char *value);
int th_msg_add_strn(th_msg *m, const char *key, const char *value, size_t len);
int th_msg_add_int(th_msg *m, const char *key, int64_t value);

/* Replaces the first header named key (dropping later ones) or appends. */
int th_msg_set_str(th_msg *m, const char *key, const char *value);
int th_msg_set_int(th_msg *m, const char *key, int64_t value);

/* Removes every header named key. */
void th_msg_remove(th_msg *m, const char *key);

/* The first header named key, or NULL. */
const th_header *th_msg_find(const th_msg *m, const char *key);

/* How many headers are named key. */
int th_msg_count(const th_msg *m, const char *key);

/* The value of a string header, NULL when absent or of another type. */
const char *th_msg_str(const th_msg *m, const char *key);

/* Reads an integer header; false when absent or not an integer. */
bool th_msg_int(const th_msg *m, const char *key, int64_t *out);

/* Fills m with a valid task envelope for request_id (source_system
 * "test-suite", legal_basis gdpr_art_17, action deletion), the properties
 * message_id "msg-<request_id>", content_type application/json and
 * app_id "broker-tests", and a small JSON body. */
int th_msg_task(th_msg *m, const char *request_id);

/* ---- connections ------------------------------------------------------ */

typedef struct th_conn th_conn;

/* Opens a connection to vhost v with channel 1 in confirm mode. NULL on
 * failure. Close with th_close. */
th_conn *th_connect(const th_vhost *v);

/* The same, logged in as user (th_connect is guest's). */
th_conn *th_connect_as(const th_vhost *v, const char *user, const char *password);

/* Closes gracefully and frees. NULL-safe. */
void th_close(th_conn *c);

/* The rabbitmq-c connection under c, for helpers that need another channel
 * (channel 1 is th_publish's; see bulk.h). */
amqp_connection_state_t th_conn_amqp(th_conn *c);

/* Publishes m (mandatory) and waits for the broker's confirm: 0 when acked
 * and routed, -1 on nack, return, timeout or a closed channel. */
int th_publish(th_conn *c, const char *exchange, const char *routing_key, const th_msg *m);

/* The same, waiting up to timeout_ms for the confirm (th_publish: 10 s). */
int th_publish_within(th_conn *c, const char *exchange, const char *routing_key, const th_msg *m,
                      int timeout_ms);

/* Takes one message off queue (basic.get, auto-ack) into out, which must be
 * initialised. 1 = got one, 0 = queue empty, -1 = error (e.g. no queue). */
int th_get(th_conn *c, const char *queue, th_msg *out);

/* Ready messages in queue (passive queue.declare); -1 when it does not exist. */
long th_queue_depth(th_conn *c, const char *queue);

/* A TCP port on 127.0.0.1 that nothing listened on a moment ago (bound to
 * port 0 and released), for a bridge's metrics or an unreachable URL. */
int th_free_port(void);

/* GETs http://127.0.0.1:port<path> through curl. Returns the HTTP status
 * (-1 when nothing answers) and the body in *body (malloc'd) if non-NULL. */
int th_http_get(int port, const char *path, char **body);

/* Consumers of queue (passive queue.declare); -1 when it does not exist. */
long th_queue_consumers(th_conn *c, const char *queue);

/* One queue argument: a string when str is non-NULL, else the integer num. */
typedef struct {
  const char *key;
  const char *str;
  int64_t num;
} th_arg;

/* Declares a durable queue with the given arguments (x-queue-type among
 * them for a quorum queue or stream). */
int th_queue_declare(th_conn *c, const char *queue, const th_arg *args, size_t nargs);

/* Waits until queue holds at least n ready messages; true when it does. */
bool th_wait_depth(th_conn *c, const char *queue, long n, int timeout_ms);

/* Waits until queue has at least n consumers; true when it does. */
bool th_wait_consumers(th_conn *c, const char *queue, long n, int timeout_ms);

/* ---- workers ---------------------------------------------------------- */

typedef struct th_worker th_worker;

/* A task worker: its own connection consuming queue with manual acks and the
 * given prefetch. NULL on failure. */
th_worker *th_worker_open(const th_vhost *v, const char *queue, int prefetch);

/* Waits up to timeout_ms for the next delivery and copies it into m (which
 * must be initialised; it is released and refilled). 1 = a delivery, 0 = none
 * in time, -1 = the connection or channel is gone (close the worker). */
int th_worker_next(th_worker *w, th_msg *m, int timeout_ms);

/* Settles the last delivery: ack, or reject with requeue=false. */
int th_worker_ack(th_worker *w);
int th_worker_reject(th_worker *w);

/* Reports a failure the way a worker does: publishes a copy of task with the
 * header worker_error=text to exchange dsr.dlx through pub (confirmed), then
 * acks the last delivery. */
int th_worker_report(th_worker *w, th_conn *pub, const th_msg *task, const char *text);

/* Drops the TCP connection as a crashing process would: no ack, no
 * channel.close, no connection.close. Frees w. NULL-safe. */
void th_worker_crash(th_worker *w);

/* Closes gracefully (unacked deliveries go back to the queue). NULL-safe. */
void th_worker_close(th_worker *w);

/* ---- the bridge process ----------------------------------------------- */

typedef struct {
  pid_t pid; /* 0 when not running */
  char log_path[TH_PATH_MAX];
} th_bridge;

/* Starts `dlq-bridge run` against vhost v: DLQ_BRIDGE_URL is set to v's URL,
 * DLQ_BRIDGE_* variables of the test's own environment are removed,
 * DLQ_BRIDGE_CONFIG is set empty (no config file), DLQ_BRIDGE_CONSOLE_JOBS_FILE
 * empty (a console's actions in memory only), then each "NAME=value" of env (NULL-terminated, may be NULL) is set. stdout and
 * stderr go to <log_dir>/<vhost>-<tag>.log. */
int th_bridge_start(th_bridge *b, const th_vhost *v, const char *const *env, const char *tag);

/* As th_bridge_start, for any long-running command: `dlq-bridge args...`
 * (NULL-terminated, at most 14), e.g. {"console", NULL}. */
int th_command_start(th_bridge *b, const th_vhost *v, const char *const *args,
                     const char *const *env, const char *tag);

/* True while the process has not exited. */
bool th_bridge_running(th_bridge *b);

/* Sends SIGTERM and waits up to timeout_ms. Returns the exit status, or -1
 * when it died by a signal or did not exit in time (it is then killed). */
int th_bridge_stop(th_bridge *b, int timeout_ms);

/* SIGKILL and reap. NULL-safe, idempotent. */
void th_bridge_kill(th_bridge *b);

/* Copies the last lines of the bridge's log to stderr (for failing tests). */
void th_bridge_dump_log(const th_bridge *b);

/* The outcome of a one-shot command. */
typedef struct {
  int exit_code; /* -1: killed by a signal or timed out */
  char out[8192];
  char err[8192];
} th_result;

/* Runs dlq-bridge with args (NULL-terminated, without the program name),
 * DLQ_BRIDGE_URL=url unless url is NULL, and env as in th_bridge_start
 * (DLQ_BRIDGE_CONFIG is empty, so no config file, unless env sets it). A
 * command that moves or removes items (replay, escalate, resolve, review
 * claim/decide) gets --no-audit unless the test chose its trail: an env
 * entry DLQ_BRIDGE_AUDIT_LOG= or DLQ_BRIDGE_CONFIG=, or --audit-log,
 * --config or --no-audit in args (a test of the refusal passes
 * "DLQ_BRIDGE_AUDIT_LOG=").
 * Waits up to timeout_ms. Returns 0 when it ran (see r->exit_code), -1 when
 * it could not be started. */
int th_run_bridge(const char *const *args, const char *url, const char *const *env, int timeout_ms,
                  th_result *r);

/* snprintf into buf (len bytes); false when the text did not fit, so a
 * caller can fail the test rather than use a cut path or URL. */
bool th_fmt(char *buf, size_t len, const char *f, ...) __attribute__((format(printf, 3, 4)));

/* Number of lines in s (a last line without '\n' counts). */
int th_count_lines(const char *s);

/* Number of lines in s that are dlq-bridge's error lines ("dlq-bridge: ..."),
 * not log lines (e.g. the warning of a command run with --no-audit). */
int th_error_lines(const char *s);

/* ---- a TCP proxy between clients and the node ------------------------ */

typedef struct {
  pid_t pid; /* 0 when not running */
  int port;  /* 0 before the first start: a free port is taken */
  /* > 0: on each connection, the broker's first basic.deliver and all it
   * sends after that reach the client this many ms late; then its bytes
   * pass at once again. A broker slow to send a delivery (RabbitMQ 4.0.5
   * takes seconds over a 25,000-deep header table), with everything
   * behind it on the socket waiting too; what clients send is never held.
   * Read by th_proxy_start. */
  int delivery_stall_ms;
  /* Not "": the first connection that sends a basic.publish with this
   * routing key is cut there, that publish never reaching the broker: a
   * copy sent and never taken, the connection lost between a mover's
   * intent and its copy. Other connections, and later ones, pass as ever.
   * Read by th_proxy_start. */
  char drop_publish_to[64];
  /* > 0: what each new connection's client sends reaches the broker this
   * many ms after it connected (a slow broker login, seen from the
   * client). Read by th_proxy_start. */
  int connect_stall_ms;
} th_proxy;

/* Starts a proxy process listening on 127.0.0.1:px->port (when 0, a free
 * port, stored back; later starts reuse it) that connects each client to
 * the node's AMQP port and copies bytes both ways (with
 * px->delivery_stall_ms, holding each connection's first delivery).
 * Returns 0 or -1. */
int th_proxy_start(th_proxy *px);

/* From now on the proxy discards what the broker sends (confirms,
 * deliveries) but keeps passing on what clients send. */
void th_proxy_swallow(const th_proxy *px);

/* Kills the proxy: every connection through it drops at once. Idempotent. */
void th_proxy_cut(th_proxy *px);

/* "DLQ_BRIDGE_URL=amqp://guest:guest@127.0.0.1:<proxy port>/<vhost>" into
 * buf: an environment entry for a bridge that goes through the proxy. */
bool th_proxy_url_env(const th_proxy *px, const th_vhost *v, char *buf, size_t len);

/* ---- the node --------------------------------------------------------- */

/* Stops the node and starts it again on the same directory and ports
 * (node-fixture.sh restart: broker-node.sh stop, then start with retries);
 * returns when it answers again. */
int th_node_restart(void);

#endif

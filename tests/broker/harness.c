/* Broker test harness: see harness.h for the contracts. */
#include "harness.h"

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

#define TH_CONFIRM_TIMEOUT_MS 10000
#define TH_CONNECT_TIMEOUT_MS 5000
#define TH_POLL_MS 20

extern char **environ;

static void th__say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints one line of diagnostics on stderr. */
static void th__say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("harness: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* snprintf that reports truncation as failure. */
static int th__fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int th__fmt(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/* Copies len bytes (src may be NULL when len is 0) as a C string. */
static void th__copy(char *dst, size_t cap, const char *src, size_t len) {
  if (len >= cap) len = cap - 1;
  if (len > 0) memcpy(dst, src, len);
  dst[len] = '\0';
}

static void th__sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int64_t th__mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- environment ------------------------------------------------------ */

static int th__env_path(char *dst, const char *name) {
  const char *v = getenv(name);
  if (v == NULL || v[0] == '\0') {
    th__say("environment variable %s is not set (run the tests through ctest)", name);
    return -1;
  }
  if (th__fmt(dst, TH_PATH_MAX, "%s", v) != 0) {
    th__say("%s is too long", name);
    return -1;
  }
  return 0;
}

static int th__read_node_env(th_env *e) {
  char path[TH_PATH_MAX + 16];
  if (th__fmt(path, sizeof path, "%s/node.env", e->node_dir) != 0) return -1;
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    th__say("cannot read %s: %s (is the broker fixture running?)", path, strerror(errno));
    return -1;
  }
  char line[TH_PATH_MAX];
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "AMQP_PORT=", 10) == 0) e->amqp_port = atoi(line + 10);
    if (strncmp(line, "MGMT_PORT=", 10) == 0) e->mgmt_port = atoi(line + 10);
  }
  fclose(f);
  if (e->amqp_port <= 0 || e->mgmt_port <= 0) {
    th__say("%s lacks AMQP_PORT or MGMT_PORT", path);
    return -1;
  }
  return 0;
}

const th_env *th_env_get(void) {
  static th_env env;
  static bool loaded;
  if (loaded) return &env;
  if (th__env_path(env.node_dir, "DLQB_TEST_NODE_DIR") != 0 ||
      th__env_path(env.bridge_bin, "DLQB_BRIDGE_BIN") != 0 ||
      th__env_path(env.source_dir, "DLQB_SOURCE_DIR") != 0 ||
      th__env_path(env.log_dir, "DLQB_TEST_LOG_DIR") != 0 || th__read_node_env(&env) != 0)
    return NULL;
  mkdir(env.log_dir, 0755);
  loaded = true;
  return &env;
}

int64_t th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_iso_time(int64_t epoch_ms, char *buf, size_t len) {
  time_t secs = (time_t)(epoch_ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char base[32];
  strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%03dZ", base, (int)(epoch_ms % 1000));
}

bool th_is_iso_utc(const char *s) {
  static const char shape[] = "dddd-dd-ddTdd:dd:dd";
  if (s == NULL) return false;
  for (size_t i = 0; shape[i] != '\0'; i++) {
    if (shape[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != shape[i]) return false;
  }
  const char *p = s + strlen(shape);
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p)) return false;
    while (isdigit((unsigned char)*p)) p++;
  }
  return strcmp(p, "Z") == 0 || strcmp(p, "+00:00") == 0;
}

void th_unique(char *buf, size_t len, const char *prefix) {
  /* Atomic: tests run commands from several threads at once (broker.drain's
   * two concurrent drains; TSan saw the race). */
  static atomic_uint counter;
  snprintf(buf, len, "%s-%ld-%u", prefix, (long)getpid(), atomic_fetch_add(&counter, 1) + 1);
}

/* ---- waiting ---------------------------------------------------------- */

bool th_wait_until(th_cond cond, void *arg, int timeout_ms) {
  int64_t deadline = th__mono_ms() + timeout_ms;
  for (;;) {
    if (cond(arg)) return true;
    if (th__mono_ms() >= deadline) return cond(arg);
    th__sleep_ms(TH_POLL_MS);
  }
}

/* ---- management API --------------------------------------------------- */

/* Reads all of f into a malloc'd NUL-terminated buffer. */
static char *th__slurp(FILE *f, size_t *len_out) {
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  if (buf == NULL) return NULL;
  size_t n;
  while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len - 1 == 0) {
      char *bigger = realloc(buf, cap * 2);
      if (bigger == NULL) {
        free(buf);
        return NULL;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  buf[len] = '\0';
  if (len_out != NULL) *len_out = len;
  return buf;
}

int th_mgmt_post_file(const char *path, const char *file) {
  const th_env *e = th_env_get();
  if (e == NULL || strchr(path, '\'') != NULL || strchr(file, '\'') != NULL) return -1;
  char cmd[3 * TH_PATH_MAX];
  if (th__fmt(cmd, sizeof cmd,
              "curl -sS --max-time 30 -u guest:guest -H 'content-type: application/json' "
              "-o /dev/null -w '%%{http_code}' --data-binary @'%s' 'http://127.0.0.1:%d%s'",
              file, e->mgmt_port, path) != 0)
    return -1;
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  int status = -1;
  if (fscanf(p, "%d", &status) != 1) status = -1;
  return pclose(p) == 0 ? status : -1;
}

char *th_queue_list(const char *vhost) {
  char path[TH_PATH_MAX];
  if (th__fmt(path, sizeof path, "/api/queues/%s?columns=name,type,durable,arguments", vhost) != 0)
    return NULL;
  json_object *qs = th_mgmt_get_json(path);
  if (qs == NULL) return NULL;
  char *text = strdup(json_object_to_json_string_ext(qs, JSON_C_TO_STRING_SPACED));
  json_object_put(qs);
  return text;
}

int th_mgmt(const char *method, const char *path, const char *body, char **out) {
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  if (out != NULL) *out = NULL;
  /* Every path and body the tests send is built from [a-z0-9.-] names and
   * JSON without single quotes, so single-quoting is enough for the shell. */
  if (strchr(path, '\'') != NULL || (body != NULL && strchr(body, '\'') != NULL)) {
    th__say("refusing to pass a quote to the shell");
    return -1;
  }
  char cmd[4096];
  if (th__fmt(cmd, sizeof cmd,
              "curl -sS --max-time 30 -u guest:guest -X %s -H 'content-type: application/json'"
              " %s%s%s -w '\\n%%{http_code}' 'http://127.0.0.1:%d%s'",
              method, body ? "-d '" : "", body ? body : "", body ? "'" : "", e->mgmt_port,
              path) != 0) {
    th__say("management request too long");
    return -1;
  }
  FILE *p = popen(cmd, "r");
  if (p == NULL) {
    th__say("cannot run curl: %s", strerror(errno));
    return -1;
  }
  size_t len = 0;
  char *text = th__slurp(p, &len);
  int rc = pclose(p);
  if (text == NULL || rc != 0) {
    th__say("curl %s %s failed (status %d)", method, path, rc);
    free(text);
    return -1;
  }
  /* The last line is the status code that -w appended. */
  char *nl = strrchr(text, '\n');
  if (nl == NULL) {
    free(text);
    return -1;
  }
  int status = atoi(nl + 1);
  *nl = '\0';
  if (out != NULL)
    *out = text;
  else
    free(text);
  return status;
}

json_object *th_mgmt_get_json(const char *path) {
  char *text = NULL;
  int status = th_mgmt("GET", path, NULL, &text);
  json_object *obj = NULL;
  if (status == 200) {
    obj = json_tokener_parse(text);
    if (obj == NULL) th__say("GET %s: answer is not JSON", path);
  }
  free(text);
  return obj;
}

const char *th_json_str(json_object *obj, const char *key) {
  json_object *v = NULL;
  if (obj == NULL || !json_object_object_get_ex(obj, key, &v) ||
      !json_object_is_type(v, json_type_string))
    return "";
  return json_object_get_string(v);
}

int th_broker_version(void) {
  static int version = -1;
  if (version >= 0) return version;
  json_object *o = th_mgmt_get_json("/api/overview");
  int major = 0, minor = 0;
  const char *v = th_json_str(o, "rabbitmq_version");
  if (sscanf(v, "%d.%d", &major, &minor) == 2 && major > 0 && minor >= 0 && minor < 100)
    version = major * 100 + minor;
  else
    th__say("cannot read the node's rabbitmq_version (got '%s')", v);
  if (o != NULL) json_object_put(o);
  return version;
}

/* ---- vhosts ----------------------------------------------------------- */

int th_vhost_create(th_vhost *v, const char *tag) {
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  char base[TH_NAME_MAX - 24];
  size_t n = 0;
  for (const char *p = tag; *p != '\0' && n + 1 < sizeof base - 2; p++)
    base[n++] = isalnum((unsigned char)*p) ? (char)tolower((unsigned char)*p) : '-';
  base[n] = '\0';
  th_unique(v->name, sizeof v->name, base);
  const char *host = "127.0.0.1";
  if (th__fmt(v->url, sizeof v->url, "amqp://guest:guest@%s:%d/%s", host, e->amqp_port, v->name))
    return -1;

  char path[TH_PATH_MAX];
  snprintf(path, sizeof path, "/api/vhosts/%s", v->name);
  int status = th_mgmt("PUT", path, NULL, NULL);
  if (status != 201 && status != 204) {
    th__say("cannot create vhost %s (HTTP %d)", v->name, status);
    return -1;
  }
  snprintf(path, sizeof path, "/api/permissions/%s/guest", v->name);
  status = th_mgmt("PUT", path, "{\"configure\":\".*\",\"write\":\".*\",\"read\":\".*\"}", NULL);
  if (status != 201 && status != 204) {
    th__say("cannot grant guest on vhost %s (HTTP %d)", v->name, status);
    return -1;
  }
  return 0;
}

int th_vhost_delete(const th_vhost *v) {
  char path[TH_PATH_MAX];
  snprintf(path, sizeof path, "/api/vhosts/%s", v->name);
  int status = th_mgmt("DELETE", path, NULL, NULL);
  if (status != 204 && status != 404) {
    th__say("cannot delete vhost %s (HTTP %d)", v->name, status);
    return -1;
  }
  return 0;
}

/* ---- messages --------------------------------------------------------- */

void th_msg_init(th_msg *m) {
  memset(m, 0, sizeof *m);
  m->delivery_mode = 2;
  init_amqp_pool(&m->pool, 4096);
}

void th_msg_release(th_msg *m) {
  if (m == NULL) return;
  free(m->body);
  m->body = NULL;
  m->body_len = 0;
  empty_amqp_pool(&m->pool);
}

void th_msg_reset(th_msg *m) {
  th_msg_release(m);
  th_msg_init(m);
}

int th_msg_set_body(th_msg *m, const void *data, size_t len) {
  free(m->body);
  m->body = NULL;
  m->body_len = 0;
  if (len == 0) return 0;
  m->body = malloc(len);
  if (m->body == NULL) return -1;
  memcpy(m->body, data, len);
  m->body_len = len;
  return 0;
}

static th_header *th__new_header(th_msg *m, const char *key) {
  if (m->nheaders >= TH_MAX_HEADERS) {
    th__say("too many headers");
    return NULL;
  }
  th_header *h = &m->headers[m->nheaders++];
  memset(h, 0, sizeof *h);
  th__copy(h->key, sizeof h->key, key, strlen(key));
  return h;
}

int th_msg_add_strn(th_msg *m, const char *key, const char *value, size_t len) {
  if (len >= TH_STR_MAX) {
    th__say("header %s: value too long for the harness", key);
    return -1;
  }
  th_header *h = th__new_header(m, key);
  if (h == NULL) return -1;
  h->type = TH_H_STR;
  memcpy(h->str, value, len);
  h->str[len] = '\0';
  h->str_len = len;
  return 0;
}

int th_msg_add_str(th_msg *m, const char *key, const char *value) {
  return th_msg_add_strn(m, key, value, strlen(value));
}

int th_msg_add_int(th_msg *m, const char *key, int64_t value) {
  th_header *h = th__new_header(m, key);
  if (h == NULL) return -1;
  h->type = TH_H_INT;
  h->num = value;
  return 0;
}

void th_msg_remove(th_msg *m, const char *key) {
  size_t kept = 0;
  for (size_t i = 0; i < m->nheaders; i++) {
    if (strcmp(m->headers[i].key, key) == 0) continue;
    if (kept != i) m->headers[kept] = m->headers[i];
    kept++;
  }
  m->nheaders = kept;
}

/* Index of the first header named key, or -1. */
static long th__find(const th_msg *m, const char *key) {
  for (size_t i = 0; i < m->nheaders; i++)
    if (strcmp(m->headers[i].key, key) == 0) return (long)i;
  return -1;
}

/* Makes key appear exactly once, at its first position (or appended), and
 * returns that header, cleared, for the caller to fill. */
static th_header *th__set_header(th_msg *m, const char *key) {
  long at = th__find(m, key);
  if (at < 0) return th__new_header(m, key);
  size_t kept = (size_t)at + 1;
  for (size_t i = kept; i < m->nheaders; i++) {
    if (strcmp(m->headers[i].key, key) == 0) continue;
    if (kept != i) m->headers[kept] = m->headers[i];
    kept++;
  }
  m->nheaders = kept;
  th_header *h = &m->headers[at];
  memset(h, 0, sizeof *h);
  th__copy(h->key, sizeof h->key, key, strlen(key));
  return h;
}

int th_msg_set_str(th_msg *m, const char *key, const char *value) {
  size_t len = strlen(value);
  if (len >= TH_STR_MAX) return -1;
  th_header *h = th__set_header(m, key);
  if (h == NULL) return -1;
  h->type = TH_H_STR;
  memcpy(h->str, value, len + 1);
  h->str_len = len;
  return 0;
}

int th_msg_set_int(th_msg *m, const char *key, int64_t value) {
  th_header *h = th__set_header(m, key);
  if (h == NULL) return -1;
  h->type = TH_H_INT;
  h->num = value;
  return 0;
}

const th_header *th_msg_find(const th_msg *m, const char *key) {
  long at = th__find(m, key);
  return at < 0 ? NULL : &m->headers[at];
}

int th_msg_count(const th_msg *m, const char *key) {
  int n = 0;
  for (size_t i = 0; i < m->nheaders; i++) n += strcmp(m->headers[i].key, key) == 0;
  return n;
}

const char *th_msg_str(const th_msg *m, const char *key) {
  const th_header *h = th_msg_find(m, key);
  return (h != NULL && h->type == TH_H_STR) ? h->str : NULL;
}

bool th_msg_int(const th_msg *m, const char *key, int64_t *out) {
  const th_header *h = th_msg_find(m, key);
  if (h == NULL || h->type != TH_H_INT) return false;
  *out = h->num;
  return true;
}

/* Clones one field value into pool (tables and arrays deeply). */
static int th__clone_value(const amqp_field_value_t *in, amqp_field_value_t *out,
                           amqp_pool_t *pool) {
  amqp_table_entry_t entry = {.key = amqp_cstring_bytes("v"), .value = *in};
  amqp_table_t one = {.num_entries = 1, .entries = &entry}, copy;
  if (amqp_table_clone(&one, &copy, pool) != AMQP_STATUS_OK) return -1;
  *out = copy.entries[0].value;
  return 0;
}

int th_msg_copy(th_msg *dst, const th_msg *src) {
  amqp_pool_t pool = dst->pool;
  unsigned char *body = dst->body;
  memcpy(dst, src, sizeof *dst);
  dst->pool = pool;
  dst->body = body;
  dst->body_len = 0;
  if (th_msg_set_body(dst, src->body, src->body_len) != 0) return -1;
  for (size_t i = 0; i < dst->nheaders; i++) {
    if (dst->headers[i].type != TH_H_OTHER) continue;
    if (th__clone_value(&src->headers[i].raw, &dst->headers[i].raw, &dst->pool) != 0) return -1;
  }
  return 0;
}

int th_msg_task(th_msg *m, const char *request_id) {
  char buf[TH_PROP_MAX];
  snprintf(m->message_id, sizeof m->message_id, "msg-%s", request_id);
  snprintf(m->content_type, sizeof m->content_type, "application/json");
  snprintf(m->app_id, sizeof m->app_id, "broker-tests");
  int n = snprintf(buf, sizeof buf, "{\"request_id\":\"%s\",\"subject\":\"user-42\"}", request_id);
  if (n < 0 || (size_t)n >= sizeof buf) return -1;
  if (th_msg_set_body(m, buf, (size_t)n) != 0 || th_msg_add_str(m, "request_id", request_id) != 0 ||
      th_msg_add_str(m, "source_system", "test-suite") != 0 ||
      th_msg_add_str(m, "legal_basis", "gdpr_art_17") != 0 ||
      th_msg_add_str(m, "action", "deletion") != 0)
    return -1;
  return 0;
}

/* Text of a string-like field value, or false. */
static bool th__field_bytes(const amqp_field_value_t *v, amqp_bytes_t *out) {
  if (v->kind != AMQP_FIELD_KIND_UTF8 && v->kind != AMQP_FIELD_KIND_BYTES) return false;
  *out = v->value.bytes;
  return true;
}

static bool th__field_int(const amqp_field_value_t *v, int64_t *out) {
  switch (v->kind) {
    case AMQP_FIELD_KIND_I8: *out = v->value.i8; return true;
    case AMQP_FIELD_KIND_U8: *out = v->value.u8; return true;
    case AMQP_FIELD_KIND_I16: *out = v->value.i16; return true;
    case AMQP_FIELD_KIND_U16: *out = v->value.u16; return true;
    case AMQP_FIELD_KIND_I32: *out = v->value.i32; return true;
    case AMQP_FIELD_KIND_U32: *out = v->value.u32; return true;
    case AMQP_FIELD_KIND_I64: *out = v->value.i64; return true;
    case AMQP_FIELD_KIND_U64: *out = (int64_t)v->value.u64; return true;
    case AMQP_FIELD_KIND_TIMESTAMP: *out = (int64_t)v->value.u64; return true;
    default: return false;
  }
}

/* Records x-death[0].reason and .queue. */
static void th__read_xdeath(th_msg *m, const amqp_field_value_t *v) {
  if (v->kind != AMQP_FIELD_KIND_ARRAY || v->value.array.num_entries < 1) return;
  const amqp_field_value_t *first = &v->value.array.entries[0];
  if (first->kind != AMQP_FIELD_KIND_TABLE) return;
  const amqp_table_t *t = &first->value.table;
  for (int i = 0; i < t->num_entries; i++) {
    amqp_bytes_t k = t->entries[i].key, s;
    if (!th__field_bytes(&t->entries[i].value, &s)) continue;
    if (k.len == 6 && memcmp(k.bytes, "reason", 6) == 0)
      th__copy(m->xdeath_reason, sizeof m->xdeath_reason, s.bytes, s.len);
    if (k.len == 5 && memcmp(k.bytes, "queue", 5) == 0)
      th__copy(m->xdeath_queue, sizeof m->xdeath_queue, s.bytes, s.len);
  }
}

static void th__prop(char *dst, amqp_flags_t flags, amqp_flags_t flag, amqp_bytes_t b) {
  if (flags & flag) th__copy(dst, TH_PROP_MAX, b.bytes, b.len);
}

/* Fills m (initialised, empty) from a received message. */
static int th__from_amqp(th_msg *m, const amqp_basic_properties_t *p, amqp_bytes_t body) {
  th__prop(m->message_id, p->_flags, AMQP_BASIC_MESSAGE_ID_FLAG, p->message_id);
  th__prop(m->content_type, p->_flags, AMQP_BASIC_CONTENT_TYPE_FLAG, p->content_type);
  th__prop(m->correlation_id, p->_flags, AMQP_BASIC_CORRELATION_ID_FLAG, p->correlation_id);
  th__prop(m->app_id, p->_flags, AMQP_BASIC_APP_ID_FLAG, p->app_id);
  th__prop(m->type, p->_flags, AMQP_BASIC_TYPE_FLAG, p->type);
  th__prop(m->expiration, p->_flags, AMQP_BASIC_EXPIRATION_FLAG, p->expiration);
  th__prop(m->user_id, p->_flags, AMQP_BASIC_USER_ID_FLAG, p->user_id);
  m->has_timestamp = (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) != 0;
  m->timestamp = m->has_timestamp ? p->timestamp : 0;
  m->delivery_mode = (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG) ? p->delivery_mode : 0;
  if (th_msg_set_body(m, body.bytes, body.len) != 0) return -1;
  if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG)) return 0;

  amqp_table_t headers;
  if (amqp_table_clone(&p->headers, &headers, &m->pool) != AMQP_STATUS_OK) return -1;
  for (int i = 0; i < headers.num_entries; i++) {
    const amqp_table_entry_t *e = &headers.entries[i];
    char key[TH_KEY_MAX];
    th__copy(key, sizeof key, e->key.bytes, e->key.len);
    amqp_bytes_t s;
    int64_t num;
    int rc = 0;
    if (th__field_bytes(&e->value, &s)) {
      th_header *h = th__new_header(m, key);
      if (h == NULL) return -1;
      h->type = TH_H_STR;
      th__copy(h->str, sizeof h->str, s.bytes, s.len);
      h->str_len = s.len;
    } else if (e->value.kind == AMQP_FIELD_KIND_BOOLEAN) {
      th_header *h = th__new_header(m, key);
      if (h == NULL) return -1;
      h->type = TH_H_BOOL;
      h->num = e->value.value.boolean != 0;
    } else if (e->value.kind != AMQP_FIELD_KIND_TIMESTAMP && th__field_int(&e->value, &num)) {
      rc = th_msg_add_int(m, key, num);
    } else {
      th_header *h = th__new_header(m, key);
      if (h == NULL) return -1;
      h->type = TH_H_OTHER;
      h->raw = e->value;
      if (strcmp(key, "x-death") == 0) th__read_xdeath(m, &e->value);
    }
    if (rc != 0) return -1;
  }
  return 0;
}

/* Builds the AMQP properties of m; entries must hold TH_MAX_HEADERS. */
static void th__to_amqp(const th_msg *m, amqp_basic_properties_t *p, amqp_table_entry_t *entries) {
  memset(p, 0, sizeof *p);
  struct {
    const char *value;
    amqp_flags_t flag;
    amqp_bytes_t *field;
  } strs[] = {
      {m->message_id, AMQP_BASIC_MESSAGE_ID_FLAG, &p->message_id},
      {m->content_type, AMQP_BASIC_CONTENT_TYPE_FLAG, &p->content_type},
      {m->correlation_id, AMQP_BASIC_CORRELATION_ID_FLAG, &p->correlation_id},
      {m->app_id, AMQP_BASIC_APP_ID_FLAG, &p->app_id},
      {m->type, AMQP_BASIC_TYPE_FLAG, &p->type},
      {m->expiration, AMQP_BASIC_EXPIRATION_FLAG, &p->expiration},
      {m->user_id, AMQP_BASIC_USER_ID_FLAG, &p->user_id},
  };
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    if (strs[i].value[0] == '\0') continue;
    p->_flags |= strs[i].flag;
    *strs[i].field = amqp_cstring_bytes(strs[i].value);
  }
  if (m->has_timestamp) {
    p->_flags |= AMQP_BASIC_TIMESTAMP_FLAG;
    p->timestamp = m->timestamp;
  }
  if (m->delivery_mode != 0) {
    p->_flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
    p->delivery_mode = m->delivery_mode;
  }
  if (m->nheaders == 0) return;
  for (size_t i = 0; i < m->nheaders; i++) {
    const th_header *h = &m->headers[i];
    amqp_table_entry_t *e = &entries[i];
    e->key = amqp_cstring_bytes(h->key);
    switch (h->type) {
      case TH_H_STR:
        e->value.kind = AMQP_FIELD_KIND_UTF8;
        e->value.value.bytes = (amqp_bytes_t){.len = h->str_len, .bytes = (void *)h->str};
        break;
      case TH_H_INT:
        e->value.kind = AMQP_FIELD_KIND_I64;
        e->value.value.i64 = h->num;
        break;
      case TH_H_BOOL:
        e->value.kind = AMQP_FIELD_KIND_BOOLEAN;
        e->value.value.boolean = (amqp_boolean_t)h->num;
        break;
      case TH_H_OTHER: e->value = h->raw; break;
    }
  }
  p->_flags |= AMQP_BASIC_HEADERS_FLAG;
  p->headers = (amqp_table_t){.num_entries = (int)m->nheaders, .entries = entries};
}

/* ---- connections ------------------------------------------------------ */

struct th_conn {
  amqp_connection_state_t conn;
  uint64_t next_tag; /* delivery tag of the next publish (confirm mode) */
  bool channel_open;
};

/* Describes a failed RPC reply in one line. */
static void th__say_reply(const char *what, amqp_rpc_reply_t r) {
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
static amqp_connection_state_t th__login(const char *vhost, const char *user,
                                         const char *password) {
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
static int th__await_confirm(th_conn *c, uint64_t tag) {
  int64_t deadline = th__mono_ms() + TH_CONFIRM_TIMEOUT_MS;
  bool returned = false;
  for (;;) {
    int64_t left = deadline - th__mono_ms();
    if (left <= 0) {
      th__say("no publisher confirm within %d ms", TH_CONFIRM_TIMEOUT_MS);
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
  int result = th__await_confirm(c, c->next_tag++);
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

bool th_wait_depth(th_conn *c, const char *queue, long n, int timeout_ms) {
  th__count_wait w = {c, queue, n, false};
  return th_wait_until(th__count_reached, &w, timeout_ms);
}

bool th_wait_consumers(th_conn *c, const char *queue, long n, int timeout_ms) {
  th__count_wait w = {c, queue, n, true};
  return th_wait_until(th__count_reached, &w, timeout_ms);
}

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

/* ---- processes -------------------------------------------------------- */

/* In a forked child: a clean DLQ_BRIDGE_* environment plus env, the URL,
 * stdout/stderr redirected, then exec. Never returns. */
static void th__exec_bridge(const char *const *argv, const char *url, const char *const *env,
                            const char *out_path, const char *err_path) {
  /* The parent dies -> the bridge gets SIGTERM, so no test leaves one behind. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  for (;;) {
    char **e = environ;
    while (*e != NULL && strncmp(*e, "DLQ_BRIDGE_", 11) != 0) e++;
    if (*e == NULL) break;
    char name[256];
    size_t len = strcspn(*e, "=");
    th__copy(name, sizeof name, *e, len);
    unsetenv(name);
  }
  if (url != NULL) setenv("DLQ_BRIDGE_URL", url, 1);
  /* No config file unless the test names one: a /etc/dlq-bridge/config.json
   * on the machine must not change what a test runs. */
  setenv("DLQ_BRIDGE_CONFIG", "", 1);
  for (size_t i = 0; env != NULL && env[i] != NULL; i++) {
    char name[256];
    size_t len = strcspn(env[i], "=");
    th__copy(name, sizeof name, env[i], len);
    setenv(name, env[i][len] == '=' ? env[i] + len + 1 : "", 1);
  }
  int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  int err = strcmp(out_path, err_path) == 0
                ? out
                : open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  int devnull = open("/dev/null", O_RDONLY);
  if (out < 0 || err < 0 || devnull < 0) _exit(126);
  dup2(devnull, STDIN_FILENO);
  dup2(out, STDOUT_FILENO);
  dup2(err, STDERR_FILENO);
  execv(argv[0], (char *const *)argv);
  fprintf(stderr, "harness: cannot exec %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

/* Builds argv = { bridge_bin, args..., NULL } in out (cap entries). */
static int th__argv(const char **out, size_t cap, const char *const *args) {
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  size_t n = 0;
  out[n++] = e->bridge_bin;
  for (size_t i = 0; args != NULL && args[i] != NULL; i++) {
    if (n + 1 >= cap) return -1;
    out[n++] = args[i];
  }
  out[n] = NULL;
  return 0;
}

/* True when args (a command line without the program) is one of the ops
 * commands that move or remove items, which refuse without an audit trail. */
static bool th__moves_items(const char *const *args) {
  static const char *const movers[] = {"replay", "escalate", "resolve", NULL};
  static const char *const review[] = {"claim", "decide", NULL};
  if (args == NULL || args[0] == NULL) return false;
  for (size_t i = 0; movers[i] != NULL; i++)
    if (strcmp(args[0], movers[i]) == 0) return true;
  if (strcmp(args[0], "review") != 0 || args[1] == NULL) return false;
  for (size_t i = 0; review[i] != NULL; i++)
    if (strcmp(args[1], review[i]) == 0) return true;
  return false;
}

static bool th__has_prefix(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Whether the test chose where (or whether) the command finds an audit
 * trail: an audit_log or a config file in its env or args, or --no-audit. */
static bool th__audit_chosen(const char *const *args, const char *const *env) {
  for (size_t i = 0; env != NULL && env[i] != NULL; i++)
    if (th__has_prefix(env[i], "DLQ_BRIDGE_AUDIT_LOG=") ||
        th__has_prefix(env[i], "DLQ_BRIDGE_CONFIG="))
      return true;
  for (size_t i = 0; args != NULL && args[i] != NULL; i++)
    if (strcmp(args[i], "--no-audit") == 0 || th__has_prefix(args[i], "--audit-log") ||
        th__has_prefix(args[i], "--config"))
      return true;
  return false;
}

/* Adds --no-audit to argv (n entries, cap room) before any "--". */
static int th__add_no_audit(const char **argv, size_t n, size_t cap) {
  if (n + 2 > cap) return -1;
  size_t at = n;
  for (size_t i = 1; i < n; i++)
    if (strcmp(argv[i], "--") == 0) {
      at = i;
      break;
    }
  memmove(&argv[at + 1], &argv[at], (n + 1 - at) * sizeof argv[0]);
  argv[at] = "--no-audit";
  return 0;
}

/* Waits for pid up to timeout_ms; returns the exit status, -1 for a signal,
 * -2 when still running at the deadline. */
static int th__reap(pid_t pid, int timeout_ms) {
  int64_t deadline = th__mono_ms() + timeout_ms;
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) th__say("pid %ld died by signal %d", (long)pid, WTERMSIG(status));
      return -1;
    }
    if (r < 0) return -1;
    if (th__mono_ms() >= deadline) return -2;
    th__sleep_ms(10);
  }
}

int th_bridge_start(th_bridge *b, const th_vhost *v, const char *const *env, const char *tag) {
  static const char *const run_args[] = {"run", NULL};
  return th_command_start(b, v, run_args, env, tag);
}

int th_command_start(th_bridge *b, const th_vhost *v, const char *const *args,
                     const char *const *env, const char *tag) {
  const th_env *e = th_env_get();
  memset(b, 0, sizeof *b);
  if (e == NULL) return -1;
  if (th__fmt(b->log_path, sizeof b->log_path, "%s/%s-%s.log", e->log_dir, v->name, tag) != 0)
    return -1;
  const char *argv[16];
  if (th__argv(argv, 16, args) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    th__say("fork: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) th__exec_bridge(argv, v->url, env, b->log_path, b->log_path);
  b->pid = pid;
  return 0;
}

bool th_bridge_running(th_bridge *b) {
  if (b->pid <= 0) return false;
  int status;
  pid_t r = waitpid(b->pid, &status, WNOHANG);
  if (r == 0) return true;
  th__say("bridge pid %ld has exited (status 0x%x); log: %s", (long)b->pid, status, b->log_path);
  b->pid = 0;
  return false;
}

int th_bridge_stop(th_bridge *b, int timeout_ms) {
  if (b->pid <= 0) return -1;
  kill(b->pid, SIGTERM);
  int rc = th__reap(b->pid, timeout_ms);
  if (rc == -2) {
    th__say("bridge pid %ld ignored SIGTERM for %d ms; killing it", (long)b->pid, timeout_ms);
    th_bridge_kill(b);
    return -1;
  }
  if (rc != 0) th__say("bridge exited with %d; log: %s", rc, b->log_path);
  b->pid = 0;
  return rc;
}

void th_bridge_kill(th_bridge *b) {
  if (b == NULL || b->pid <= 0) return;
  kill(b->pid, SIGKILL);
  waitpid(b->pid, NULL, 0);
  b->pid = 0;
}

void th_bridge_dump_log(const th_bridge *b) {
  FILE *f = fopen(b->log_path, "r");
  if (f == NULL) return;
  char *text = th__slurp(f, NULL);
  fclose(f);
  if (text == NULL) return;
  size_t len = strlen(text);
  const char *start = len > 4000 ? text + len - 4000 : text;
  fprintf(stderr, "---- last lines of %s ----\n%s\n---- end of log ----\n", b->log_path, start);
  free(text);
}

/* Reads a small file into buf (NUL-terminated, truncated to cap). */
static void th__read_file(const char *path, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
}

int th_run_bridge(const char *const *args, const char *url, const char *const *env, int timeout_ms,
                  th_result *r) {
  const th_env *e = th_env_get();
  memset(r, 0, sizeof *r);
  r->exit_code = -1;
  if (e == NULL) return -1;
  const char *argv[32];
  if (th__argv(argv, 32, args) != 0) return -1;
  /* The many tests of what a command does, not of the audit trail, run it
   * with --no-audit rather than each passing it. */
  if (th__moves_items(args) && !th__audit_chosen(args, env)) {
    size_t n = 0;
    while (argv[n] != NULL) n++;
    if (th__add_no_audit(argv, n, 32) != 0) return -1;
  }
  char tag[64], out_path[TH_PATH_MAX], err_path[TH_PATH_MAX];
  th_unique(tag, sizeof tag, "cmd");
  if (th__fmt(out_path, sizeof out_path, "%s/%s.out", e->log_dir, tag) != 0 ||
      th__fmt(err_path, sizeof err_path, "%s/%s.err", e->log_dir, tag) != 0)
    return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) th__exec_bridge(argv, url, env, out_path, err_path);
  int rc = th__reap(pid, timeout_ms);
  if (rc == -2) {
    th__say("%s %s did not finish within %d ms", argv[0], argv[1] ? argv[1] : "", timeout_ms);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    rc = -1;
  }
  r->exit_code = rc;
  th__read_file(out_path, r->out, sizeof r->out);
  th__read_file(err_path, r->err, sizeof r->err);
  unlink(out_path);
  unlink(err_path);
  return 0;
}

bool th_fmt(char *buf, size_t len, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(buf, len, f, ap);
  va_end(ap);
  return n >= 0 && (size_t)n < len;
}

int th_count_lines(const char *s) {
  int n = 0;
  for (const char *p = s; *p != '\0'; p++) {
    if (*p == '\n' || p[1] == '\0') n++;
  }
  return n;
}

int th_error_lines(const char *s) {
  int n = 0;
  for (const char *p = s; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    n += strncmp(p, "dlq-bridge: ", 12) == 0;
  return n;
}

/* ---- the node --------------------------------------------------------- */

int th_node_restart(void) {
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  char cmd[3 * TH_PATH_MAX];
  if (th__fmt(cmd, sizeof cmd, "bash '%s/tests/broker/node-fixture.sh' restart '%s' %d",
              e->source_dir, e->node_dir, e->amqp_port))
    return -1;
  fflush(NULL);
  int rc = system(cmd);
  if (rc != 0) {
    th__say("restarting the node failed (status %d)", rc);
    return -1;
  }
  return 0;
}

/* ---- a TCP proxy between clients and the node ------------------------ */

static volatile sig_atomic_t th__proxy_swallowing;
static void th__on_usr1(int sig) {
  (void)sig;
  th__proxy_swallowing = 1;
}

/* The proxy process: accepts on port, connects each client to the broker
 * and copies bytes both ways. After SIGUSR1 it discards what the broker
 * sends (confirms, deliveries) but keeps passing on what clients send. */
static void th__proxy_main(int listen_fd, int broker_port) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGUSR1, th__on_usr1);
  enum { MAXC = 16 };
  int cli[MAXC], up[MAXC];
  for (int i = 0; i < MAXC; i++) cli[i] = up[i] = -1;
  char buf[65536];
  for (;;) {
    struct pollfd p[1 + 2 * MAXC];
    int n = 0;
    p[n++] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
    for (int i = 0; i < MAXC; i++) {
      p[n++] = (struct pollfd){.fd = cli[i], .events = POLLIN};
      p[n++] = (struct pollfd){.fd = up[i], .events = POLLIN};
    }
    if (poll(p, (nfds_t)n, 1000) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    if (p[0].revents & POLLIN) {
      int c = accept(listen_fd, NULL, NULL);
      int slot = -1;
      for (int i = 0; i < MAXC && slot < 0; i++)
        if (cli[i] < 0) slot = i;
      int u = socket(AF_INET, SOCK_STREAM, 0);
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)broker_port)};
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (c < 0 || slot < 0 || u < 0 || connect(u, (struct sockaddr *)&a, sizeof a) != 0) {
        if (c >= 0) close(c);
        if (u >= 0) close(u);
      } else {
        cli[slot] = c;
        up[slot] = u;
      }
    }
    for (int i = 0; i < MAXC; i++) {
      for (int dir = 0; dir < 2; dir++) {
        struct pollfd *pf = &p[1 + 2 * i + dir];
        if (pf->fd < 0 || !(pf->revents & (POLLIN | POLLHUP | POLLERR))) continue;
        int from = dir == 0 ? cli[i] : up[i], to = dir == 0 ? up[i] : cli[i];
        ssize_t got = read(from, buf, sizeof buf);
        bool ok = got > 0;
        if (ok && !(dir == 1 && th__proxy_swallowing)) {
          for (ssize_t off = 0; ok && off < got;) {
            ssize_t w = write(to, buf + off, (size_t)(got - off));
            if (w <= 0) ok = false;
            else off += w;
          }
        }
        if (!ok) {
          close(cli[i]);
          close(up[i]);
          cli[i] = up[i] = -1;
          break;
        }
      }
    }
  }
}

int th_proxy_start(th_proxy *px) {
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)px->port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0) {
    fprintf(stderr, "proxy: cannot listen on %d: %s\n", px->port, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  socklen_t alen = sizeof a;
  if (getsockname(fd, (struct sockaddr *)&a, &alen) == 0) px->port = ntohs(a.sin_port);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return -1;
  }
  if (pid == 0) th__proxy_main(fd, e->amqp_port);
  close(fd);
  px->pid = pid;
  return 0;
}

void th_proxy_swallow(const th_proxy *px) {
  if (px->pid > 0) kill(px->pid, SIGUSR1);
}

void th_proxy_cut(th_proxy *px) {
  if (px->pid <= 0) return;
  kill(px->pid, SIGKILL);
  waitpid(px->pid, NULL, 0);
  px->pid = 0;
}

bool th_proxy_url_env(const th_proxy *px, const th_vhost *v, char *buf, size_t len) {
  return th_fmt(buf, len, "DLQ_BRIDGE_URL=amqp://guest:guest@127.0.0.1:%d/%s", px->port,
                v->name);
}

/* GETs http://127.0.0.1:port<path> through curl. Returns the HTTP status
 * (-1 when nothing answers) and the body in *body (malloc'd) if non-NULL. */
int th_http_get(int port, const char *path, char **body) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "curl -s --max-time 5 -w '\\n%%{http_code}' 'http://127.0.0.1:%d%s'",
           port, path);
  if (body != NULL) *body = NULL;
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  size_t cap = 1 << 16, len = 0, n;
  char *buf = malloc(cap);
  if (buf == NULL) {
    pclose(p);
    return -1;
  }
  while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) len += n;
  buf[len] = '\0';
  int rc = pclose(p);
  char *nl = strrchr(buf, '\n');
  int status = (rc == 0 && nl != NULL) ? atoi(nl + 1) : -1;
  if (nl != NULL) *nl = '\0'; /* the separator -w added */
  if (body != NULL && status > 0)
    *body = buf;
  else
    free(buf);
  return status;
}


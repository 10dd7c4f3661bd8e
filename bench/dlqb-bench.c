/* dlqb-bench: the small AMQP tool behind bench/run.sh. It publishes
 * messages with publisher confirms (one by one or with a window of them in
 * flight), preloads the bridge's queues with valid retry envelopes, waits
 * until queue depths reach a target, purges queues, and runs a command to
 * report its wall time and peak RSS. It is a measuring tool, not part of
 * dlq-bridge, and reports errors as one line on stderr with exit status 1.
 *
 *   dlqb-bench publish --url U --routing-key K [--exchange X] --count N
 *                      [--window W] [--size B] [--kind raw|failed|dlq]
 *                      [--declare-quorum] [--source-every K] [--dlq-age-ms A]
 *                      [--id-prefix P] [--causes K | --distinct-errors]
 *                      [--profile dsr|redaction|reconciliation]
 *   dlqb-bench wait    --url U --queue Q [--queue Q2 ...] --at-least N
 *                      [--empty Q] [--timeout-ms T]
 *   dlqb-bench latency --url U --routing-key K [--exchange X] --count N
 *                      --queue Q [--queue Q2 ...] [--kind failed]
 *                      [--profile P] [--busy Q] [--timeout-ms T]
 *   dlqb-bench purge   --url U --queue Q [--queue Q2 ...] [--delete]
 *   dlqb-bench depth   --url U --queue Q
 *   dlqb-bench drain   --url U --queue Q --count N [--window W]
 *   dlqb-bench exec    -- COMMAND [ARGS...]
 *
 * With --kind dlq, --source-every K gives every K-th item (i % K == K/2)
 * source_system "billing" (the rest "bench"), --dlq-age-ms A dates
 * dlq_at and first_seen_at A ms in the past, and --id-prefix P names the
 * items P-0, P-1, ... (message_id and request_id; default bench-PID).
 * --causes K gives the items K distinct failure causes in turn (last_error
 * "worker error: <service> timeout for <request_id> after <n>ms", the
 * service a word of letters per cause, so ids and numbers differ within a
 * cause); --distinct-errors makes every item's error a cause of its own
 * (letters only: the worst case for stats --by group). --profile gives
 * the tasks (--kind failed or dlq) the identity headers of that built-in
 * profile (docs/pipelines.md; default dsr, with legal_basis and action).
 * publish prints "RESULT count=N seconds=S rate=R"; wait prints
 * "DONE epoch=E" (CLOCK_REALTIME seconds with nanoseconds) when the summed
 * ready depth of the --queue queues is at least N and every --empty queue
 * has no ready message; latency publishes N tasks one at a time, each
 * once the one before is seen, and times each from its publish until the
 * summed ready depth of the --queue queues has grown (its confirm awaited,
 * then a passive queue.declare every 1 ms), printing "LATENCY count=N
 * median_ms=M p95_ms=P max_ms=X confirm_ms=CM confirm95_ms=CP
 * busy=B" (CM, CP: from the publish to its confirm, the broker's part of
 * the first hop; B: 1 if the --busy queue still had ready messages after
 * the last sample, 0 if not, -1 without it);
 * drain consumes N messages with a prefetch of W,
 * acking a quarter window at a time and publishing nothing (the queue's
 * own delivery ceiling), and prints "RESULT count=N seconds=S rate=R";
 * exec prints "EXEC seconds=S maxrss_kib=K status=X"
 * (ru_maxrss of the child, which on Linux is its VmHWM at exit). */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHANNEL 1
#define MAX_QUEUES 16
#define POLL_US 10000
#define LATENCY_POLL_US 1000

typedef struct {
  const char *url;
  const char *exchange;
  const char *routing_key;
  const char *queues[MAX_QUEUES];
  int nqueues;
  const char *empty[MAX_QUEUES];
  int nempty;
  long count;
  long window;
  long size;
  long at_least;
  long timeout_ms;
  const char *kind;
  bool declare_quorum;
  long source_every;
  long dlq_age_ms;
  const char *id_prefix;
  long causes;
  bool distinct_errors;
  bool delete_queue;
  const char *profile;
  const char *busy;
} options;

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("dlqb-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void check_reply(amqp_rpc_reply_t r, const char *what) {
  if (r.reply_type == AMQP_RESPONSE_NORMAL) return;
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
    die("cannot %s: %s", what, amqp_error_string2(r.library_error));
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const amqp_channel_close_t *c = r.reply.decoded;
    die("cannot %s: %.*s", what, (int)c->reply_text.len, (const char *)c->reply_text.bytes);
  }
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const amqp_connection_close_t *c = r.reply.decoded;
    die("cannot %s: %.*s", what, (int)c->reply_text.len, (const char *)c->reply_text.bytes);
  }
  die("cannot %s: unexpected reply", what);
}

static amqp_connection_state_t connect_url(const char *url_in) {
  char url[1024];
  struct amqp_connection_info ci;
  snprintf(url, sizeof url, "%s", url_in);
  amqp_default_connection_info(&ci);
  if (amqp_parse_url(url, &ci) != AMQP_STATUS_OK) die("invalid url");
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *sock = amqp_tcp_socket_new(conn);
  if (sock == NULL) die("cannot create socket");
  int rc = amqp_socket_open(sock, ci.host, ci.port);
  if (rc != AMQP_STATUS_OK) die("cannot connect to %s:%d: %s", ci.host, ci.port, amqp_error_string2(rc));
  check_reply(amqp_login(conn, ci.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password),
              "log in");
  amqp_channel_open(conn, CHANNEL);
  check_reply(amqp_get_rpc_reply(conn), "open channel");
  return conn;
}

static void disconnect(amqp_connection_state_t conn) {
  amqp_channel_close(conn, CHANNEL, AMQP_REPLY_SUCCESS);
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
}

/* The ISO-8601 UTC time ago_ms before now (0: now), to the second. */
static void iso_ago(long ago_ms, char *buf, size_t len) {
  time_t t = time(NULL) - ago_ms / 1000;
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static amqp_table_entry_t str_entry(const char *key, const char *value) {
  amqp_table_entry_t e = {.key = amqp_cstring_bytes(key)};
  e.value.kind = AMQP_FIELD_KIND_UTF8;
  e.value.value.bytes = amqp_cstring_bytes(value);
  return e;
}

static amqp_table_entry_t int_entry(const char *key, int64_t v) {
  amqp_table_entry_t e = {.key = amqp_cstring_bytes(key)};
  e.value.kind = AMQP_FIELD_KIND_I64;
  e.value.value.i64 = v;
  return e;
}

/* Reads frames until the confirmed count reaches `until`. A nack or a
 * return (unroutable) is fatal: the numbers would be meaningless. */
static void await_confirms(amqp_connection_state_t conn, uint64_t *confirmed, uint64_t until) {
  while (*confirmed < until) {
    amqp_frame_t f;
    int rc = amqp_simple_wait_frame(conn, &f);
    if (rc != AMQP_STATUS_OK) die("cannot read confirms: %s", amqp_error_string2(rc));
    if (f.frame_type != AMQP_FRAME_METHOD) continue;
    switch (f.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
      const amqp_basic_ack_t *a = f.payload.method.decoded;
      if (a->delivery_tag > *confirmed) *confirmed = a->delivery_tag;
      break;
    }
    case AMQP_BASIC_NACK_METHOD:
      die("broker nacked a publish");
      break;
    case AMQP_BASIC_RETURN_METHOD:
      die("a publish was returned as unroutable (is the topology declared?)");
      break;
    case AMQP_CHANNEL_CLOSE_METHOD:
    case AMQP_CONNECTION_CLOSE_METHOD:
      die("broker closed the channel while publishing");
      break;
    default:
      break;
    }
    amqp_maybe_release_buffers(conn);
  }
}

/* Sets the identity headers of the task of index i for the profile
 * (docs/pipelines.md): the dsr profile's four (request_id, source_system,
 * legal_basis, action), redaction's item_id and doc_id, reconciliation's
 * discrepancy_id and category. selected gives the second identity the
 * value "billing" (--source-every). */
static void identity_headers(const options *o, const char *id, bool selected,
                             amqp_table_entry_t *h, int *n) {
  const char *second = selected ? "billing" : "bench";
  if (strcmp(o->profile, "redaction") == 0) {
    h[(*n)++] = str_entry("item_id", id);
    h[(*n)++] = str_entry("doc_id", second);
  } else if (strcmp(o->profile, "reconciliation") == 0) {
    h[(*n)++] = str_entry("discrepancy_id", id);
    h[(*n)++] = str_entry("category", second);
  } else {
    h[(*n)++] = str_entry("request_id", id);
    h[(*n)++] = str_entry("source_system", second);
    h[(*n)++] = str_entry("legal_basis", "gdpr_art_17");
    h[(*n)++] = str_entry("action", "deletion");
  }
}

/* Publishes the task of index i (headers by --kind and --profile), not
 * waiting for its confirm. now is the ISO time for first_seen_at/dlq_at. */
static void publish_task(amqp_connection_state_t conn, const options *o, long i, char *body,
                         const char *now) {
  bool failed = strcmp(o->kind, "failed") == 0, dlq = strcmp(o->kind, "dlq") == 0;
  char msgid[64], reqid[64], errtext[160];
  if (o->id_prefix != NULL) {
    snprintf(msgid, sizeof msgid, "%s-%ld", o->id_prefix, i);
    snprintf(reqid, sizeof reqid, "%s-%ld", o->id_prefix, i);
  } else {
    snprintf(msgid, sizeof msgid, "bench-%ld-%ld", (long)getpid(), i);
    snprintf(reqid, sizeof reqid, "req-%ld-%ld", (long)getpid(), i);
  }
  bool selected = o->source_every > 0 && i % o->source_every == o->source_every / 2;
  amqp_table_entry_t h[12];
  int n = 0;
  if (failed || dlq) {
    identity_headers(o, reqid, selected, h, &n);
    h[n++] = int_entry("attempt", dlq ? 5 : 0);
    h[n++] = int_entry("max_attempts", 5);
    h[n++] = str_entry("first_seen_at", now);
    if (failed) h[n++] = str_entry("worker_error", "bench: upstream 503");
    if (dlq) {
      if (o->causes > 0 || o->distinct_errors) {
        /* A word of letters: numbers would be normalised away. */
        long k = o->distinct_errors ? i : i % o->causes;
        char word[24];
        size_t w = 0;
        do {
          word[w++] = (char)('a' + k % 26);
          k /= 26;
        } while (k > 0 && w < sizeof word - 1);
        word[w] = '\0';
        snprintf(errtext, sizeof errtext, "worker error: svc%s timeout for %s after %ldms", word,
                 reqid, 100 + i % 997);
        h[n++] = str_entry("last_error", errtext);
      } else {
        h[n++] = str_entry("last_error", "rejected by worker: upstream 503");
      }
      h[n++] = str_entry("dlq_reason", "max_attempts");
      h[n++] = str_entry("dlq_at", now);
    }
  }
  amqp_basic_properties_t props = {0};
  props._flags =
      AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  props.content_type = amqp_cstring_bytes("application/octet-stream");
  props.message_id = amqp_cstring_bytes(msgid);
  if (n > 0) {
    props._flags |= AMQP_BASIC_HEADERS_FLAG;
    props.headers.num_entries = n;
    props.headers.entries = h;
  }
  amqp_bytes_t b = {(size_t)o->size, body};
  int rc = amqp_basic_publish(conn, CHANNEL, amqp_cstring_bytes(o->exchange ? o->exchange : ""),
                              amqp_cstring_bytes(o->routing_key), 1, 0, &props, b);
  if (rc != AMQP_STATUS_OK) die("cannot publish: %s", amqp_error_string2(rc));
}

static char *make_body(long size) {
  char *body = malloc(size > 0 ? (size_t)size : 1);
  if (body == NULL) die("out of memory");
  for (long i = 0; i < size; i++) body[i] = (char)('a' + i % 26);
  return body;
}

static int cmd_publish(const options *o) {
  if (o->routing_key == NULL || o->count <= 0) die("publish needs --routing-key and --count");
  amqp_connection_state_t conn = connect_url(o->url);
  if (o->declare_quorum) {
    amqp_table_entry_t qa = str_entry("x-queue-type", "quorum");
    amqp_table_t args = {1, &qa};
    amqp_queue_declare(conn, CHANNEL, amqp_cstring_bytes(o->routing_key), 0, 1, 0, 0, args);
    check_reply(amqp_get_rpc_reply(conn), "declare the bench queue");
  }
  amqp_confirm_select(conn, CHANNEL);
  check_reply(amqp_get_rpc_reply(conn), "enable confirms");

  char *body = make_body(o->size);
  char now[40];
  iso_ago(o->dlq_age_ms, now, sizeof now);
  uint64_t confirmed = 0;
  long window = o->window < 1 ? 1 : o->window;
  double t0 = mono_s();
  for (long i = 0; i < o->count; i++) {
    publish_task(conn, o, i, body, now);
    uint64_t published = (uint64_t)i + 1;
    if (published - confirmed >= (uint64_t)window)
      await_confirms(conn, &confirmed, published - (uint64_t)window + 1);
  }
  await_confirms(conn, &confirmed, (uint64_t)o->count);
  double secs = mono_s() - t0;
  printf("RESULT count=%ld seconds=%.3f rate=%.0f\n", o->count, secs, (double)o->count / secs);
  free(body);
  disconnect(conn);
  return 0;
}

/* Ready messages of queue (passive declare: counts are live, unlike the
 * management API's, which lag by the stats interval). */
static long depth_of(amqp_connection_state_t conn, const char *queue) {
  amqp_queue_declare_ok_t *ok =
      amqp_queue_declare(conn, CHANNEL, amqp_cstring_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
  char what[200];
  snprintf(what, sizeof what, "find queue '%s'", queue);
  check_reply(amqp_get_rpc_reply(conn), what);
  long n = (long)ok->message_count;
  amqp_maybe_release_buffers(conn);
  return n;
}

static int cmd_wait(const options *o) {
  if (o->nqueues == 0) die("wait needs --queue");
  amqp_connection_state_t conn = connect_url(o->url);
  double deadline = mono_s() + (double)o->timeout_ms / 1000.0;
  long sum = 0;
  for (;;) {
    sum = 0;
    for (int i = 0; i < o->nqueues; i++) sum += depth_of(conn, o->queues[i]);
    bool done = sum >= o->at_least;
    for (int i = 0; done && i < o->nempty; i++) done = depth_of(conn, o->empty[i]) == 0;
    if (done) break;
    if (mono_s() > deadline) {
      disconnect(conn);
      die("timed out after %ld ms with %ld of %ld messages", o->timeout_ms, sum, o->at_least);
    }
    usleep(POLL_US);
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  printf("DONE epoch=%lld.%09ld count=%ld\n", (long long)ts.tv_sec, ts.tv_nsec, sum);
  disconnect(conn);
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The value below which a share q of the n sorted samples lie (nearest
 * rank: the ceil(q*n)-th smallest). */
static double rank_of(const double *sorted, long n, double q) {
  long k = (long)(q * (double)n + 0.999999);
  if (k < 1) k = 1;
  if (k > n) k = n;
  return sorted[k - 1];
}

static int cmd_latency(const options *o) {
  if (o->routing_key == NULL || o->count <= 0 || o->nqueues == 0)
    die("latency needs --routing-key, --count and --queue");
  amqp_connection_state_t conn = connect_url(o->url);
  amqp_confirm_select(conn, CHANNEL);
  check_reply(amqp_get_rpc_reply(conn), "enable confirms");
  char *body = make_body(o->size);
  double *ms = calloc((size_t)o->count, sizeof *ms);
  double *cms = calloc((size_t)o->count, sizeof *cms);
  if (ms == NULL || cms == NULL) die("out of memory");
  char now[40];
  iso_ago(0, now, sizeof now);
  uint64_t confirmed = 0;
  for (long i = 0; i < o->count; i++) {
    long base = 0, sum = 0;
    for (int q = 0; q < o->nqueues; q++) base += depth_of(conn, o->queues[q]);
    double t0 = mono_s(), deadline = t0 + (double)o->timeout_ms / 1000.0;
    publish_task(conn, o, i, body, now);
    /* Confirmed before the first poll: no ack frame can then arrive in
     * the middle of a queue.declare's reply. */
    await_confirms(conn, &confirmed, (uint64_t)i + 1);
    cms[i] = (mono_s() - t0) * 1000.0;
    for (;;) {
      sum = 0;
      for (int q = 0; q < o->nqueues; q++) sum += depth_of(conn, o->queues[q]);
      if (sum > base) break;
      if (mono_s() > deadline) die("sample %ld: not routed within %ld ms", i, o->timeout_ms);
      usleep(LATENCY_POLL_US);
    }
    ms[i] = (mono_s() - t0) * 1000.0;
  }
  int busy = -1;
  if (o->busy != NULL) busy = depth_of(conn, o->busy) > 0;
  qsort(ms, (size_t)o->count, sizeof *ms, cmp_double);
  qsort(cms, (size_t)o->count, sizeof *cms, cmp_double);
  printf("LATENCY count=%ld median_ms=%.1f p95_ms=%.1f max_ms=%.1f confirm_ms=%.1f "
         "confirm95_ms=%.1f busy=%d\n",
         o->count, rank_of(ms, o->count, 0.5), rank_of(ms, o->count, 0.95), ms[o->count - 1],
         rank_of(cms, o->count, 0.5), rank_of(cms, o->count, 0.95), busy);
  free(cms);
  free(ms);
  free(body);
  disconnect(conn);
  return 0;
}

static int cmd_depth(const options *o) {
  if (o->nqueues != 1) die("depth needs one --queue");
  amqp_connection_state_t conn = connect_url(o->url);
  printf("%ld\n", depth_of(conn, o->queues[0]));
  disconnect(conn);
  return 0;
}

static int cmd_drain(const options *o) {
  if (o->nqueues != 1 || o->count <= 0) die("drain needs one --queue and --count");
  long window = o->window > 1 ? o->window : 1000;
  if (window > 65535) window = 65535;
  amqp_connection_state_t conn = connect_url(o->url);
  amqp_basic_qos(conn, CHANNEL, 0, (uint16_t)window, 0);
  check_reply(amqp_get_rpc_reply(conn), "set prefetch");
  double t0 = mono_s();
  amqp_basic_consume(conn, CHANNEL, amqp_cstring_bytes(o->queues[0]), amqp_empty_bytes, 0, 0, 0,
                     amqp_empty_table);
  check_reply(amqp_get_rpc_reply(conn), "consume");
  long got = 0, unacked = 0;
  uint64_t last_tag = 0;
  while (got < o->count) {
    amqp_envelope_t env;
    amqp_maybe_release_buffers(conn);
    amqp_rpc_reply_t r = amqp_consume_message(conn, &env, NULL, 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) die("drain: consume failed after %ld messages", got);
    last_tag = env.delivery_tag;
    amqp_destroy_envelope(&env);
    got++;
    if (++unacked >= (window + 3) / 4 || got == o->count) {
      if (amqp_basic_ack(conn, CHANNEL, last_tag, 1) != AMQP_STATUS_OK) die("drain: ack failed");
      unacked = 0;
    }
  }
  double secs = mono_s() - t0;
  printf("RESULT count=%ld seconds=%.3f rate=%.0f\n", got, secs, (double)got / secs);
  disconnect(conn);
  return 0;
}

static int cmd_purge(const options *o) {
  amqp_connection_state_t conn = connect_url(o->url);
  for (int i = 0; i < o->nqueues; i++) {
    char what[200];
    if (o->delete_queue) {
      amqp_queue_delete(conn, CHANNEL, amqp_cstring_bytes(o->queues[i]), 0, 0);
      snprintf(what, sizeof what, "delete queue '%s'", o->queues[i]);
    } else {
      amqp_queue_purge(conn, CHANNEL, amqp_cstring_bytes(o->queues[i]));
      snprintf(what, sizeof what, "purge queue '%s'", o->queues[i]);
    }
    check_reply(amqp_get_rpc_reply(conn), what);
  }
  disconnect(conn);
  return 0;
}

static int cmd_exec(char **argv) {
  if (argv[0] == NULL) die("exec needs a command");
  double t0 = mono_s();
  pid_t pid = fork();
  if (pid < 0) die("cannot fork: %s", strerror(errno));
  if (pid == 0) {
    execvp(argv[0], argv);
    fprintf(stderr, "dlqb-bench: cannot run '%s': %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) die("cannot wait for '%s': %s", argv[0], strerror(errno));
  }
  double secs = mono_s() - t0;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  printf("EXEC seconds=%.3f maxrss_kib=%ld status=%d\n", secs, ru.ru_maxrss, code);
  return code == 0 ? 0 : 1;
}

static long num_arg(const char *flag, const char *v) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < 0) die("%s: '%s' is not a non-negative integer", flag, v);
  return n;
}

int main(int argc, char **argv) {
  if (argc < 2) die("usage: dlqb-bench publish|wait|latency|purge|depth|drain|exec ... (see the source header)");
  const char *cmd = argv[1];
  if (strcmp(cmd, "exec") == 0) {
    int i = 2;
    if (i < argc && strcmp(argv[i], "--") == 0) i++;
    return cmd_exec(argv + i);
  }
  options o = {.url = "amqp://guest:guest@127.0.0.1:5672/%2f", .window = 1, .size = 256,
               .timeout_ms = 600000, .kind = "raw", .profile = "dsr"};
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--declare-quorum") == 0) { o.declare_quorum = true; continue; }
    if (strcmp(a, "--delete") == 0) { o.delete_queue = true; continue; }
    if (strcmp(a, "--distinct-errors") == 0) { o.distinct_errors = true; continue; }
    if (v == NULL) die("%s needs a value", a);
    i++;
    if (strcmp(a, "--url") == 0) o.url = v;
    else if (strcmp(a, "--exchange") == 0) o.exchange = v;
    else if (strcmp(a, "--routing-key") == 0) o.routing_key = v;
    else if (strcmp(a, "--kind") == 0) o.kind = v;
    else if (strcmp(a, "--profile") == 0) o.profile = v;
    else if (strcmp(a, "--busy") == 0) o.busy = v;
    else if (strcmp(a, "--source-every") == 0) o.source_every = num_arg(a, v);
    else if (strcmp(a, "--dlq-age-ms") == 0) o.dlq_age_ms = num_arg(a, v);
    else if (strcmp(a, "--id-prefix") == 0) o.id_prefix = v;
    else if (strcmp(a, "--causes") == 0) o.causes = num_arg(a, v);
    else if (strcmp(a, "--count") == 0) o.count = num_arg(a, v);
    else if (strcmp(a, "--window") == 0) o.window = num_arg(a, v);
    else if (strcmp(a, "--size") == 0) o.size = num_arg(a, v);
    else if (strcmp(a, "--at-least") == 0) o.at_least = num_arg(a, v);
    else if (strcmp(a, "--timeout-ms") == 0) o.timeout_ms = num_arg(a, v);
    else if (strcmp(a, "--queue") == 0 && o.nqueues < MAX_QUEUES) o.queues[o.nqueues++] = v;
    else if (strcmp(a, "--empty") == 0 && o.nempty < MAX_QUEUES) o.empty[o.nempty++] = v;
    else die("unknown or repeated option '%s'", a);
  }
  if (strcmp(o.kind, "raw") != 0 && strcmp(o.kind, "failed") != 0 && strcmp(o.kind, "dlq") != 0)
    die("--kind must be raw, failed or dlq");
  if (strcmp(o.profile, "dsr") != 0 && strcmp(o.profile, "redaction") != 0 &&
      strcmp(o.profile, "reconciliation") != 0)
    die("--profile must be dsr, redaction or reconciliation");
  if (strcmp(cmd, "publish") == 0) return cmd_publish(&o);
  if (strcmp(cmd, "wait") == 0) return cmd_wait(&o);
  if (strcmp(cmd, "purge") == 0) return cmd_purge(&o);
  if (strcmp(cmd, "depth") == 0) return cmd_depth(&o);
  if (strcmp(cmd, "latency") == 0) return cmd_latency(&o);
  if (strcmp(cmd, "drain") == 0) return cmd_drain(&o);
  die("unknown command '%s'", cmd);
  return 1;
}

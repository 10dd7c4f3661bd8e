/* What the broker tests share above the harness: a per-test fixture (a fresh
 * vhost, a publishing connection and up to a few bridges) and the
 * conservation flow that the load, two-bridge and restart tests drive. */
#ifndef DLQB_TEST_FLOW_H
#define DLQB_TEST_FLOW_H

#include "harness.h"

#define FX_MAX_BRIDGES      4
#define FX_MAX_MSGS         8
#define FX_MAX_WORKERS      8
#define FX_READY_TIMEOUT_MS 30000
#define FX_STOP_TIMEOUT_MS  15000

/* One test's world. Created by fx_setup, destroyed by fx_teardown. */
typedef struct {
  const char *name; /* the test function's name */
  th_vhost vhost;
  th_conn *conn; /* publisher / inspector, confirm mode */
  th_bridge bridges[FX_MAX_BRIDGES];
  int nbridges;
  /* Owned here, not by the test body, so that a failed assertion (which
   * leaves the test at once) still frees them in teardown. */
  th_msg *msgs[FX_MAX_MSGS];
  int nmsgs;
  th_worker *workers[FX_MAX_WORKERS];
} fx_case;

/* cmocka setup/teardown: *state enters as the test's name (the prestate)
 * and leaves setup as an fx_case *. */
int fx_setup(void **state);
int fx_teardown(void **state);

/* A test with the fixture, named after its function. */
#define FX_TEST(f) cmocka_unit_test_prestate_setup_teardown(f, fx_setup, fx_teardown, (void *)#f)

/* A new, initialised message owned by t (released at teardown). */
th_msg *fx_msg(fx_case *t);

/* A worker on dsr.work with prefetch 1 owned by t (closed at teardown). */
th_worker *fx_worker(fx_case *t);

/* Crashes w (th_worker_crash) and forgets it. */
void fx_crash(fx_case *t, th_worker *w);

/* Starts one more `dlq-bridge run` on the case's vhost with env (see
 * th_bridge_start; metrics are off unless env turns them on) and waits until
 * every bridge started so far consumes dsr.failed. 0 on success. */
int fx_start_bridge(fx_case *t, const char *const *env);

/* SIGTERMs every running bridge; 0 when all exited with status 0. */
int fx_stop_bridges(fx_case *t);

/* Prints the logs of the case's bridges on stderr (call before failing). */
void fx_dump_logs(const fx_case *t);

/* Publishes a valid task with request_id id to dsr.work. */
int fx_publish_task(fx_case *t, const char *id);

/* Waits up to timeout_ms for a message on queue and takes it into out
 * (initialised). 1 = got one, 0 = none in time, -1 = error. */
int fx_take(fx_case *t, const char *queue, th_msg *out, int timeout_ms);

/* Assertions on received messages; for files that include cmocka.h. */
#define FX_HDR_STR_EQ(m, key, want)                                                                \
  do {                                                                                             \
    const char *fx_v_ = th_msg_str((m), (key));                                                    \
    if (fx_v_ == NULL) fprintf(stderr, "header %s is missing or not a string\n", (key));           \
    assert_non_null(fx_v_);                                                                        \
    assert_string_equal(fx_v_, (want));                                                            \
  } while (0)

#define FX_HDR_INT_EQ(m, key, want)                                                                \
  do {                                                                                             \
    int64_t fx_n_ = 0;                                                                             \
    bool fx_ok_ = th_msg_int((m), (key), &fx_n_);                                                  \
    if (!fx_ok_) fprintf(stderr, "header %s is missing or not an integer\n", (key));               \
    assert_true(fx_ok_);                                                                           \
    assert_int_equal(fx_n_, (want));                                                               \
  } while (0)

/* Asserts cond; on failure first prints the bridges' logs. */
#define FX_CHECK(t, cond)                                                                          \
  do {                                                                                             \
    bool fx_c_ = (cond);                                                                           \
    if (!fx_c_) fx_dump_logs(t);                                                                   \
    assert_true(fx_c_ &&#cond);                                                                    \
  } while (0)

/* The attempt header, 0 when absent, -1 when present but not an integer. */
int64_t fx_attempt(const th_msg *m);

/* ---- an audit trail for the bridges ------------------------------------ */

/* A scratch directory holding a writer's Ed25519 key pair (the private
 * key, mode 0600, at key; its public key in keys/) and the log's path;
 * env_log, env_key and env_pub are the bridge environment entries that
 * use them (a verifier is given env_pub only: no secret). */
typedef struct {
  char dir[64];
  char key[128], keys[128], log[128];
  char env_log[192], env_key[192], env_pub[192];
} fx_audit;

/* Creates it; 0 on success. */
int fx_audit_init(fx_audit *a);

/* Removes the directory and everything in it. */
void fx_audit_remove(const fx_audit *a);

/* How many times needle occurs in the file at path (0 when unreadable). */
int fx_count_in_file(const char *path, const char *needle);

/* Lines of the audit log at path holding needle, intents (move_started,
 * each mover's record before its copy) left out: the hops. */
int fx_count_hops(const char *path, const char *needle);

/* A console (`dlq-bridge console`) on a free port of 127.0.0.1 for t's
 * vhost, signed in as guest (the harness's vhost lets guest in), its
 * session in a cookie jar of its own. */
typedef struct {
  th_bridge proc;
  int port;
  char jar[TH_PATH_MAX];
} fx_console;

/* Starts it with env ("NAME=value", NULL-terminated, may be NULL; its
 * address is set here), waits until it accepts and signs in. 0 when
 * signed in; otherwise -1 with its log dumped (stop it all the same). */
int fx_console_start(fx_case *t, fx_console *c, const char *const *env, const char *tag);

/* Writes into cmd the shell command that GETs path (with the session)
 * into the file out, for system() or for popen() to run beside others.
 * False when it does not fit. */
bool fx_console_get_cmd(const fx_console *c, const char *path, const char *out, char *cmd,
                        size_t len);

/* GETs path into the file out; 0 when curl succeeded. */
int fx_console_get(const fx_console *c, const char *path, const char *out);

/* SIGTERM and wait; its exit status (th_bridge_stop), the jar removed. */
int fx_console_stop(fx_console *c);

/* Runs `dlq-bridge audit verify` on the configured log: every rotated file
 * oldest first, then the log, against its seal, given the public keys and
 * no private key. Returns th_run_bridge's result; r->exit_code 0 = intact. */
int fx_audit_verify(const fx_audit *a, th_result *r);

/* ---- the conservation flow -------------------------------------------- */

typedef struct flow_result flow_result;

typedef struct {
  int tasks;   /* how many distinct tasks to publish */
  int bridges; /* bridges running at once */
  /* Restart the node once a quarter of the tasks are acked. The last
   * quarter of the tasks is held back and reported to dsr.dlx just before
   * the restart, so that the bridge and the delay queues hold work while
   * the node goes down. */
  bool restart;
  const char *retry_delays; /* DLQ_BRIDGE_RETRY_DELAYS in shortest form, e.g. "100ms,200ms" */
  int timeout_ms;           /* for the whole flow to settle */
  /* Optional, for fault tests: more environment for the bridges ("NAME=value",
   * NULL-terminated, at most 8; set after the flow's own, so it wins) and a
   * hook called on every turn of the worker loop, which may kill or restart
   * things; non-zero aborts the flow. */
  const char *const *bridge_env;
  int (*fault)(fx_case *t, void *arg, const flow_result *r);
  void *fault_arg;
  /* Optional: called once the flow has settled and the bridges are
   * stopped, before the queues are drained for counting (the last moment
   * the queues hold what the bridges left). Non-zero aborts the flow. */
  int (*before_drain)(fx_case *t, void *arg);
  void *before_drain_arg;
} flow_opts;

struct flow_result {
  int completed;                               /* distinct tasks the worker acked */
  int in_dlq;                                  /* messages found in dsr.dlq.manual at the end */
  int in_other;                                /* found in dsr.work, dsr.retry.*, dsr.failed */
  int dlq_max_attempts, dlq_poison, dlq_other; /* DLQ messages by dlq_reason */
  int lost;                                    /* tasks neither completed nor found in any queue */
  int duplicates;                              /* copies beyond the first, over all tasks */
  int foreign;                                 /* messages that are not tasks of this flow */
  int deliveries, acks, rejects, reports, crashes;
  int bridge_exit_failures; /* bridges that did not exit 0 on SIGTERM */
  bool settled;             /* every task was accounted for before the timeout */
  bool reconnected;         /* restart only: the bridges consumed again afterwards */
};

/* How the worker treats task i; fixed so the expected outcome is known. */
typedef enum {
  FLOW_ACK,           /* acked at once: completed */
  FLOW_REJECT_ONCE,   /* rejected at attempt 0, acked after the retry */
  FLOW_REJECT_ALWAYS, /* rejected every time: DLQ max_attempts */
  FLOW_REPORT_ONCE,   /* worker_error reported at attempt 0, then acked */
  FLOW_CRASH_ONCE,    /* the worker crashes once holding it, then acks */
  FLOW_CRASH_ALWAYS   /* crashes every time: DLQ poison */
} flow_fate;

flow_fate flow_fate_of(int i);

/* Runs the flow on t (no bridge running yet) and fills r. Returns 0 when it
 * ran to the end (whatever it found), -1 on a harness failure. */
int flow_run(fx_case *t, const flow_opts *o, flow_result *r);

/* Prints r as one line on stdout. */
void flow_print(const char *label, const flow_opts *o, const flow_result *r);

#endif

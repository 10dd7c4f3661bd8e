/* amqps:// against a TLS listener with certificates made at test time: the
 * right CA connects, a wrong CA or a name mismatch is refused with one clear
 * line, a client certificate is presented and checked, and nothing falls
 * back to plain AMQP.
 *
 * The listener needs the certificates when the node starts, so this test
 * runs its own node (scripts/broker-node.sh, BASE_PORT = the fixture node's
 * AMQP port + 10, in <node dir>-tls) and stops it at the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flow.h"

#define CMD_TIMEOUT_MS 30000
#define PORT_OFFSET    10

/* snprintf that fails the test on truncation (paths and URLs must be whole). */
#define fmt(...) assert_true(th_fmt(__VA_ARGS__))

typedef struct {
  char dir[TH_PATH_MAX];        /* the TLS node's directory */
  char tls[TH_PATH_MAX + 8];    /* its tls/ (server side) */
  char client[TH_PATH_MAX + 8]; /* client-side files: wrong CA, client certs */
  int amqp_port, mgmt_port, amqps_port;
} tls_node;

static tls_node node;

static int sh(const char *format, ...) __attribute__((format(printf, 1, 2)));

/* Runs a shell command built from fmt; returns its exit status. */
static int sh(const char *format, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, format);
  int n = vsnprintf(cmd, sizeof cmd, format, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof cmd) return -1;
  fflush(NULL);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "test_tls: failed (%d): %s\n", rc, cmd);
  return rc;
}

/* A CA (name.pem, name.key) in dir. */
static int make_ca(const char *dir, const char *name) {
  return sh("cd '%s' && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=%s' "
            "-keyout %s.key -out %s.pem >/dev/null 2>&1",
            dir, name, name, name);
}

/* A leaf certificate name.pem/name.key in dir, signed by ca (a path without
 * .pem/.key), with CN cn and, when san is not NULL, that subjectAltName. */
static int make_leaf(const char *dir, const char *name, const char *ca, const char *cn,
                     const char *san) {
  if (sh("cd '%s' && openssl req -newkey rsa:2048 -nodes -subj '/CN=%s' -keyout %s.key "
         "-out %s.csr >/dev/null 2>&1",
         dir, cn, name, name) != 0)
    return -1;
  if (san != NULL && sh("printf 'subjectAltName=%s\\n' > '%s/%s.ext'", san, dir, name) != 0)
    return -1;
  return sh("cd '%s' && openssl x509 -req -in %s.csr -CA '%s.pem' -CAkey '%s.key' "
            "-CAcreateserial -days 2 %s%s%s -out %s.pem >/dev/null 2>&1",
            dir, name, ca, ca, san ? "-extfile " : "", san ? name : "", san ? ".ext" : "", name);
}

static int group_setup(void **state) {
  (void)state;
  const th_env *e = th_env_get();
  if (e == NULL) return -1;
  fmt(node.dir, sizeof node.dir, "%s-tls", e->node_dir);
  fmt(node.tls, sizeof node.tls, "%s/tls", node.dir);
  fmt(node.client, sizeof node.client, "%s/client", node.dir);
  int base = e->amqp_port + PORT_OFFSET;
  node.amqp_port = base;
  node.mgmt_port = base + 1;
  node.amqps_port = base + 4;
  /* A node left over from an interrupted run would keep its old certificates. */
  if (sh("'%s/scripts/broker-node.sh' stop '%s' && rm -rf '%s' && mkdir -p '%s' '%s'",
         e->source_dir, node.dir, node.dir, node.tls, node.client) != 0)
    return -1;
  char ca[TH_PATH_MAX + 16], wrong[TH_PATH_MAX + 16];
  fmt(ca, sizeof ca, "%s/ca", node.tls);
  fmt(wrong, sizeof wrong, "%s/wrong-ca", node.client);
  if (make_ca(node.tls, "ca") != 0 || make_ca(node.client, "wrong-ca") != 0 ||
      make_leaf(node.tls, "server", ca, "localhost", "DNS:localhost") != 0 ||
      make_leaf(node.client, "client", ca, "dlq-bridge-client", NULL) != 0 ||
      make_leaf(node.client, "stranger", wrong, "stranger", NULL) != 0)
    return -1;
  /* verify_peer: a client certificate is checked when one is sent. */
  return sh("DLQB_BROKER_TLS_VERIFY=verify_peer '%s/scripts/broker-node.sh' start '%s' %d "
            "dlqb-tls-%d >/dev/null",
            e->source_dir, node.dir, base, base);
}

static int group_teardown(void **state) {
  (void)state;
  const th_env *e = th_env_get();
  return sh("'%s/scripts/broker-node.sh' stop '%s'", e->source_dir, node.dir) == 0 ? 0 : -1;
}

/* Runs `dlq-bridge declare` with url and "NAME=value" settings. */
static void declare(const char *url, const char *const *env, th_result *r) {
  static const char *const args[] = {"declare", NULL};
  assert_int_equal(th_run_bridge(args, url, env, CMD_TIMEOUT_MS, r), 0);
  printf("declare %s: exit %d%s%s", url, r->exit_code, r->err[0] ? ", stderr: " : "\n", r->err);
}

static void amqps_url(char *buf, size_t len, const char *host, int port) {
  fmt(buf, len, "amqps://guest:guest@%s:%d/%%2f", host, port);
}

static void ca_env(char *buf, size_t len, const char *dir, const char *name) {
  fmt(buf, len, "DLQ_BRIDGE_TLS_CA_FILE=%s/%s.pem", dir, name);
}

static void test_right_ca_connects(void **state) {
  (void)state;
  char url[TH_URL_MAX], ca[TH_PATH_MAX + 64];
  amqps_url(url, sizeof url, "localhost", node.amqps_port);
  ca_env(ca, sizeof ca, node.tls, "ca");
  const char *env[] = {ca, NULL};
  th_result r;
  declare(url, env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "dsr.work"));
}

static void expect_refused(const th_result *r) {
  assert_int_equal(r->exit_code, 1);
  assert_int_equal(th_count_lines(r->err), 1);
  assert_non_null(strstr(r->err, "cannot connect to broker"));
}

static void test_wrong_ca_is_refused(void **state) {
  (void)state;
  char url[TH_URL_MAX], ca[TH_PATH_MAX + 64];
  amqps_url(url, sizeof url, "localhost", node.amqps_port);
  ca_env(ca, sizeof ca, node.client, "wrong-ca");
  const char *env[] = {ca, NULL};
  th_result r;
  declare(url, env, &r);
  expect_refused(&r);
  assert_non_null(strstr(r.err, "DLQ_BRIDGE_TLS_CA_FILE"));
}

/* Without a CA file the system store is used, which does not know a CA made
 * a moment ago: verification is on by default, not only when a CA is set. */
static void test_no_ca_file_still_verifies(void **state) {
  (void)state;
  char url[TH_URL_MAX];
  amqps_url(url, sizeof url, "localhost", node.amqps_port);
  th_result r;
  declare(url, NULL, &r);
  expect_refused(&r);
}

/* The certificate names localhost only: reaching the same listener as
 * 127.0.0.1 must fail hostname verification. */
static void test_name_mismatch_is_refused(void **state) {
  (void)state;
  char url[TH_URL_MAX], ca[TH_PATH_MAX + 64];
  amqps_url(url, sizeof url, "127.0.0.1", node.amqps_port);
  ca_env(ca, sizeof ca, node.tls, "ca");
  const char *env[] = {ca, NULL};
  th_result r;
  declare(url, env, &r);
  expect_refused(&r);
}

static void test_no_fallback_to_plain_amqp(void **state) {
  (void)state;
  char url[TH_URL_MAX], ca[TH_PATH_MAX + 64];
  ca_env(ca, sizeof ca, node.tls, "ca");
  const char *env[] = {ca, NULL};
  th_result r;
  /* amqps:// at the plain listener: the handshake fails; no plain retry. */
  amqps_url(url, sizeof url, "localhost", node.amqp_port);
  declare(url, env, &r);
  expect_refused(&r);
  /* TLS files with an amqp:// URL are a configuration error, not a
   * silent downgrade. */
  fmt(url, sizeof url, "amqp://guest:guest@localhost:%d/%%2f", node.amqp_port);
  declare(url, env, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "amqps://"));
  /* Nothing connected to the node in plain AMQP meanwhile. */
  char cmd[256];
  fmt(cmd, sizeof cmd, "curl -fsS -u guest:guest 'http://127.0.0.1:%d/api/connections?columns=ssl'",
      node.mgmt_port);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char buf[4096] = "";
  size_t n = fread(buf, 1, sizeof buf - 1, p);
  buf[n] = '\0';
  assert_int_equal(pclose(p), 0);
  assert_null(strstr(buf, "\"ssl\":false"));
}

/* The daemon with a client certificate: the broker sees it (and TLS). */
static void test_client_certificate_is_presented(void **state) {
  (void)state;
  char url[TH_URL_MAX], ca[TH_PATH_MAX + 64], cert[TH_PATH_MAX + 64], key[TH_PATH_MAX + 64];
  amqps_url(url, sizeof url, "localhost", node.amqps_port);
  ca_env(ca, sizeof ca, node.tls, "ca");
  fmt(cert, sizeof cert, "DLQ_BRIDGE_TLS_CERT_FILE=%s/client.pem", node.client);
  fmt(key, sizeof key, "DLQ_BRIDGE_TLS_KEY_FILE=%s/client.key", node.client);
  const char *env[] = {ca, cert, key, "DLQ_BRIDGE_METRICS_ADDR=off", NULL};
  th_vhost v = {.name = "tls"};
  fmt(v.url, sizeof v.url, "%s", url);
  th_bridge b;
  assert_int_equal(th_bridge_start(&b, &v, env, "client-cert"), 0);

  char cmd[256];
  fmt(cmd, sizeof cmd,
      "curl -fsS -u guest:guest "
      "'http://127.0.0.1:%d/api/connections?columns=ssl,peer_cert_subject,client_properties'",
      node.mgmt_port);
  bool seen = false;
  char buf[16384] = "";
  for (int i = 0; i < 150 && !seen && th_bridge_running(&b); i++) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = '\0';
    pclose(p);
    seen = strstr(buf, "CN=dlq-bridge-client") != NULL;
    if (!seen) {
      struct timespec ts = {0, 200 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  if (!seen) {
    fprintf(stderr, "connections: %s\n", buf);
    th_bridge_dump_log(&b);
  }
  assert_true(seen);
  assert_non_null(strstr(buf, "\"ssl\":true"));
  assert_int_equal(th_bridge_stop(&b, 15000), 0);
}

/* A client certificate from a CA the broker does not trust is refused. */
static void test_untrusted_client_certificate_is_refused(void **state) {
  (void)state;
  char url[TH_URL_MAX], ca[TH_PATH_MAX + 64], cert[TH_PATH_MAX + 64], key[TH_PATH_MAX + 64];
  amqps_url(url, sizeof url, "localhost", node.amqps_port);
  ca_env(ca, sizeof ca, node.tls, "ca");
  fmt(cert, sizeof cert, "DLQ_BRIDGE_TLS_CERT_FILE=%s/stranger.pem", node.client);
  fmt(key, sizeof key, "DLQ_BRIDGE_TLS_KEY_FILE=%s/stranger.key", node.client);
  const char *env[] = {ca, cert, key, NULL};
  th_result r;
  declare(url, env, &r);
  assert_int_equal(r.exit_code, 1);
  assert_int_equal(th_count_lines(r.err), 1);
}

int main(void) {
  if (th_env_get() == NULL) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_right_ca_connects),
      cmocka_unit_test(test_wrong_ca_is_refused),
      cmocka_unit_test(test_no_ca_file_still_verifies),
      cmocka_unit_test(test_name_mismatch_is_refused),
      cmocka_unit_test(test_no_fallback_to_plain_amqp),
      cmocka_unit_test(test_client_certificate_is_presented),
      cmocka_unit_test(test_untrusted_client_certificate_is_refused),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

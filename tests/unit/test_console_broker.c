/* Unit tests of the console's per-user override (console_user_broker):
 * the served broker part with the signed-in person's credentials in its
 * URL, percent-encoded, the served password_file dropped, host, port,
 * vhost and TLS files kept; a URL too long to build is one nobody can log
 * in with, never the console's own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "../../src/console/console.h"

static void served(dlqb_broker_conf *b, const char *url) {
  memset(b, 0, sizeof *b);
  snprintf(b->url, sizeof b->url, "%s", url);
  snprintf(b->password_file, sizeof b->password_file, "/run/secrets/console");
  snprintf(b->tls_ca_file, sizeof b->tls_ca_file, "/etc/ca.pem");
  snprintf(b->tls_cert_file, sizeof b->tls_cert_file, "/etc/cert.pem");
  snprintf(b->tls_key_file, sizeof b->tls_key_file, "/etc/key.pem");
}

static console_who person(const char *user, const char *password) {
  console_who w;
  memset(&w, 0, sizeof w);
  snprintf(w.user, sizeof w.user, "%s", user);
  snprintf(w.password, sizeof w.password, "%s", password);
  return w;
}

static void test_credentials_replace_the_served_ones(void **state) {
  (void)state;
  dlqb_broker_conf base;
  served(&base, "amqps://console:secret@broker.example:5671/dsr?heartbeat=10");
  console_who w = person("ana", "pa:ss/w@rd");
  dlqb_broker_conf *b = console_user_broker(&base, &w);
  assert_non_null(b);
  assert_string_equal(b->url, "amqps://ana:pa%3Ass%2Fw%40rd@broker.example:5671/dsr?heartbeat=10");
  assert_string_equal(b->password_file, "");
  assert_string_equal(b->tls_ca_file, "/etc/ca.pem");
  assert_string_equal(b->tls_cert_file, "/etc/cert.pem");
  assert_string_equal(b->tls_key_file, "/etc/key.pem");
  /* The served part is left as it was. */
  assert_string_equal(base.url, "amqps://console:secret@broker.example:5671/dsr?heartbeat=10");
  assert_string_equal(base.password_file, "/run/secrets/console");
  console_broker_free(b);
}

static void test_served_url_without_user(void **state) {
  (void)state;
  dlqb_broker_conf base;
  served(&base, "amqp://localhost/%2f");
  console_who w = person("bo b", "x");
  dlqb_broker_conf *b = console_user_broker(&base, &w);
  assert_non_null(b);
  assert_string_equal(b->url, "amqp://bo%20b:x@localhost/%2f");
  console_broker_free(b);
}

static void test_too_long_is_unusable(void **state) {
  (void)state;
  dlqb_broker_conf base;
  char url[DLQB_CONFIG_STR_MAX];
  memset(url, 'h', sizeof url);
  memcpy(url, "amqp://", 7);
  url[sizeof url - 1] = '\0';
  served(&base, url);
  console_who w = person("ana", "pw");
  dlqb_broker_conf *b = console_user_broker(&base, &w);
  assert_non_null(b);
  assert_string_equal(b->url, "amqp://-:-@0.0.0.0:1/-");
  console_broker_free(b);
  console_broker_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_credentials_replace_the_served_ones),
      cmocka_unit_test(test_served_url_without_user),
      cmocka_unit_test(test_too_long_is_unusable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* dlq-bridge console: the web console (docs/console.md). */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "dlqb/clock.h"
#include "dlqb/console.h"
#include "dlqb/log.h"

static const cli_flag flags[] = {
    {NULL, false, NULL, NULL},
};

const cli_spec cmd_console_spec = {
    .name = "console",
    .summary = "the web console: failure groups, items, actions with a preview, the review inbox",
    .usage = "dlq-bridge console [settings]",
    .details = "Serves the web console on DLQ_BRIDGE_CONSOLE_ADDR (default 127.0.0.1:9465)\n"
               "until SIGTERM or SIGINT. People sign in with their own RabbitMQ user and\n"
               "password: the console opens every broker connection as that user (to the host\n"
               "and vhost of DLQ_BRIDGE_URL; its credentials are not used), so the broker's\n"
               "permissions decide what each may see and do, and the audit trail records\n"
               "them. Pages: the DLQ's failure groups, a group's items (filterable), an item\n"
               "with its path and audit history (never the payload); replay, escalate and\n"
               "resolve on an item, a filtered selection or a group, each previewed as a\n"
               "dry run first and then run at a chosen rate with live progress.\n"
               "Off loopback the console needs DLQ_BRIDGE_CONSOLE_TLS_CERT_FILE and\n"
               "DLQ_BRIDGE_CONSOLE_TLS_KEY_FILE (HTTPS), unless\n"
               "DLQ_BRIDGE_CONSOLE_BEHIND_PROXY=1 says a TLS proxy is in front of it.",
    .flags = flags,
    .settings = true,
    .uses =
        (const char *const[]){"url", "tls_ca_file", "tls_cert_file", "tls_key_file", CLI_USES_LOG,
                              CLI_USES_AUDIT, "ledger_cache", "completion_writers", "deadlines",
                              "console_addr", "console_tls_cert_file", "console_tls_key_file",
                              "console_behind_proxy", "console_jobs_file", CLI_USES_CATALOG, NULL},
};

static dlqb_status on_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  (void)ctx;
  if (flag == NULL) return dlqb_fail(err, DLQB_EINVAL, "unexpected argument '%s'", value);
  return dlqb_fail(err, DLQB_EINVAL, "unknown option '--%s'", flag);
}

/* Whether host:port names a loopback address (127.0.0.0/8, ::1, localhost). */
static bool loopback(const char *addr) {
  char host[256];
  const char *colon = strrchr(addr, ':');
  size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
  if (n >= sizeof host) return false;
  memcpy(host, addr, n);
  host[n] = '\0';
  char *h = host;
  if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
    h[n - 1] = '\0';
    h++;
  }
  if (strcmp(h, "localhost") == 0) return true;
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, h, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, h, &a6) == 1) return memcmp(&a6, &in6addr_loopback, sizeof a6) == 0;
  return false;
}

/* The settings the console serves (static: a config is large, and the
 * server's threads read it until the end). */
static dlqb_config console_cfg;

int cmd_console(int argc, char **argv) {
  bool help = false;
  int rc = cli_load(&cmd_console_spec, argc, argv, &console_cfg, on_flag, NULL, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&cmd_console_spec, stdout);
    return EXIT_OK;
  }
  const dlqb_config *cfg = &console_cfg;
  console_site site = {.cfg = cfg, .pipeline = cli_pipeline()};
  if (cfg->console.addr[0] == '\0') {
    cli_error("console_addr is off: give the console an address (DLQ_BRIDGE_CONSOLE_ADDR)");
    return EXIT_USAGE;
  }
  site.tls = cfg->console.tls_cert_file[0] != '\0';
  /* Off loopback, session cookies and passwords would cross the network in
   * clear: HTTPS, or the operator's word that a TLS proxy is in front. */
  if (!loopback(cfg->console.addr) && !site.tls && cfg->console.behind_proxy != 1) {
    cli_error("console address %s is not loopback: set DLQ_BRIDGE_CONSOLE_TLS_CERT_FILE and "
              "DLQ_BRIDGE_CONSOLE_TLS_KEY_FILE (HTTPS), or DLQ_BRIDGE_CONSOLE_BEHIND_PROXY=1 when "
              "a TLS proxy is in front of it",
              cfg->console.addr);
    return EXIT_USAGE;
  }
  dlqb_stop_flag *stop = cli_stop_flag();
  console_server *server = NULL;
  int port = 0;
  char why[DLQB_ERROR_MAX];
  if (!console_start(&site, &server, &port, why, sizeof why)) {
    cli_error("%s", why);
    return EXIT_RUNTIME;
  }
  dlqb_log_info("console", "listening on %s (port %d, %s)", cfg->console.addr, port,
                site.tls ? "https" : "http");
  printf("console: listening on %s://%s (port %d)\n", site.tls ? "https" : "http",
         cfg->console.addr, port);
  fflush(stdout);
  while (!dlqb_sleep_us(stop, 1000000)) {
  }
  console_stop(server);
  return cli_finish(EXIT_OK);
}

/* The console's start and stop (dlqb/console.h): the site, sessions, jobs
 * and the server, in that order, and back. */
#include "console.h"

#include "dlqb/catalog_stream.h"
#include "dlqb/link.h"
#include "dlqb/log.h"

bool console_start(const console_site *site, console_server **out, int *port, char *why,
                   size_t why_len) {
  console_g = *site;
  /* The URL checked now (host, port, TLS; no login: the console signs in
   * as each person): a wrong host or CA file is said at start, not only
   * by every sign-in's 503. A broker down at boot is not fatal. */
  dlqb_error unreachable;
  if (dlqb_link_reachable(&site->cfg->broker, &unreachable) != DLQB_OK)
    dlqb_log_warn("console", "%s; every sign-in fails (503) until it answers", unreachable.msg);
  /* NULL: each look its own */
  console_g.catalog = dlqb_catalog_reader_of(site->cfg, site->pipeline);
  console_sessions_init();
  console_jobs_init();
  const dlqb_config *cfg = site->cfg;
  return console_server_start(cfg->console.addr, cfg->console.tls_cert_file,
                              cfg->console.tls_key_file, out, port, why, why_len);
}

void console_stop(console_server *s) {
  console_server_stop(s);
  console_jobs_shutdown();
  console_sessions_clear();
  dlqb_catalog_reader_free(console_g.catalog);
  console_g.catalog = NULL;
}

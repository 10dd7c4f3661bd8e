/* The console's start and stop (dlqb/console.h): the site, sessions, jobs
 * and the server, in that order, and back. */
#include "console.h"

#include "dlqb/catalog_stream.h"

bool console_start(const console_site *site, console_server **out, int *port, char *why,
                   size_t why_len) {
  console_g = *site;
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

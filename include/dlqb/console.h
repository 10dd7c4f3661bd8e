/* The web console (src/console/, docs/console.md) as its command starts
 * it: a server for the settings and pipeline given, until console_stop.
 * The pages, sessions and jobs behind it are the console's own
 * (src/console/console.h). */
#ifndef DLQB_CONSOLE_PUBLIC_H
#define DLQB_CONSOLE_PUBLIC_H

#include <stdbool.h>
#include <stddef.h>

#include "dlqb/config.h"
#include "dlqb/pipeline.h"

/* What the console serves. Borrowed: both outlive the server. */
typedef struct {
  const dlqb_config *cfg;        /* the loaded settings; its url names host and vhost */
  const dlqb_pipeline *pipeline; /* the pipeline served */
  bool tls;                      /* HTTPS: cookies get Secure */
  /* The catalog the pages look at, kept folded between requests (made by
   * console_start; the caller leaves it NULL). */
  struct dlqb_catalog_reader *catalog;
} console_site;

typedef struct console_server console_server;

/* Starts serving site->cfg->console.addr (HTTPS with its console TLS
 * files), with fresh sessions and the jobs of site->cfg->console.jobs_file
 * (dlqb/jobfile.h). false with one line in why. Once per process. */
bool console_start(const console_site *site, console_server **out, int *port, char *why,
                   size_t why_len);

/* Stops the server, asks running jobs to stop and waits for them, and
 * wipes the sessions' passwords. */
void console_stop(console_server *s);

#endif

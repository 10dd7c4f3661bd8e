/* A broker-side lease: see dlqb/lease.h. */
#include "dlqb/lease.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "dlqb/clock.h"
#include "dlqb/link.h"
#include "dlqb/thread.h"

/* RabbitMQ's reply to a declare of an exclusive queue that another
 * connection owns (AMQP 0-9-1: resource-locked). */
#define REPLY_RESOURCE_LOCKED 405

struct dlqb_lease {
  dlqb_link *link; /* used by the keeper thread only, once it runs */
  char name[256];
  dlqb_stop_flag *on_loss;
  dlqb_stop_flag quit; /* release asks the keeper to end */
  atomic_int lost;
  pthread_t keeper;
};

static void *keep(void *arg) {
  dlqb_lease *l = arg;
  while (!atomic_load(&l->quit)) {
    if (dlqb_sleep_us(&l->quit, (int64_t)DLQB_LEASE_BEAT_MS * 1000)) break;
    dlqb_error err;
    if (dlqb_link_queue_depth(l->link, l->name, NULL, NULL, &err) != DLQB_OK) {
      atomic_store(&l->lost, 1);
      if (l->on_loss != NULL) atomic_store(l->on_loss, 1);
      break;
    }
  }
  return NULL;
}

dlqb_status dlqb_lease_take(const dlqb_config *cfg, const char *name, const char *purpose,
                            dlqb_stop_flag *on_loss, dlqb_lease **out, dlqb_error *err) {
  *out = NULL;
  dlqb_lease *l = calloc(1, sizeof *l);
  if (l == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  snprintf(l->name, sizeof l->name, "%s", name);
  l->on_loss = on_loss;
  atomic_init(&l->quit, 0);
  atomic_init(&l->lost, 0);
  dlqb_status st = dlqb_link_open(&cfg->broker, purpose, &l->link, err);
  if (st != DLQB_OK) {
    free(l);
    return st;
  }
  char what[300];
  snprintf(what, sizeof what, "take the lease queue '%s'", name);
  /* Not durable, exclusive, auto-delete: it exists only while this
   * connection does. */
  amqp_queue_declare(dlqb_link_conn(l->link), DLQB_CHANNEL, dlqb_bytes(name), 0, 0, 1, 1,
                     amqp_empty_table);
  st = dlqb_link_reply(l->link, amqp_get_rpc_reply(dlqb_link_conn(l->link)), what, err);
  if (st == DLQB_OK && dlqb_thread_start(&l->keeper, keep, l) != 0)
    st = dlqb_fail(err, DLQB_ENOMEM, "cannot start the lease's thread");
  if (st != DLQB_OK) {
    if (dlqb_link_reply_code(l->link) == REPLY_RESOURCE_LOCKED)
      st = dlqb_fail(err, DLQB_ECONFLICT, "another connection holds the lease '%s'", name);
    dlqb_link_close(l->link);
    free(l);
    return st;
  }
  *out = l;
  return DLQB_OK;
}

bool dlqb_lease_held(const dlqb_lease *l) { return l != NULL && !atomic_load(&l->lost); }

void dlqb_lease_release(dlqb_lease *l) {
  if (l == NULL) return;
  atomic_store(&l->quit, 1);
  pthread_join(l->keeper, NULL);
  dlqb_link_close(l->link);
  free(l);
}

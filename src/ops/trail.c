/* The audit trail of an ops pass: opened with its anchor publisher, ended
 * with its anchor. */
#include <pthread.h>
#include <stdlib.h>

#include "dlqb/anchor.h"
#include "dlqb/log.h"
#include "dlqb/ops.h"
#include "dlqb/topology.h"

/* Each open trail's anchor publisher, found again by ops_audit_close: an
 * ops command has one, the console one per running job. */
typedef struct open_trail {
  dlqb_audit *audit;
  dlqb_anchor_pub *anchors;
  struct open_trail *next;
} open_trail;

static open_trail *open_trails;
static pthread_mutex_t open_trails_lock = PTHREAD_MUTEX_INITIALIZER;

dlqb_status ops_trail_open(const dlqb_config *cfg, const dlqb_broker_conf *broker,
                           const char *writer, dlqb_audit **out, dlqb_error *err) {
  *out = NULL;
  open_trail *t = calloc(1, sizeof *t);
  if (t == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  dlqb_status st = dlqb_audit_open(cfg, writer, &t->audit, err);
  if (st == DLQB_OK) st = dlqb_anchor_start(cfg, broker, t->audit, false, &t->anchors, err);
  if (st != DLQB_OK) {
    dlqb_audit_close(t->audit);
    free(t);
    return st;
  }
  pthread_mutex_lock(&open_trails_lock);
  t->next = open_trails;
  open_trails = t;
  pthread_mutex_unlock(&open_trails_lock);
  *out = t->audit;
  return DLQB_OK;
}

void ops_audit_close(dlqb_audit *audit) {
  if (audit == NULL) return;
  pthread_mutex_lock(&open_trails_lock);
  open_trail **pp = &open_trails, *t = NULL;
  while (*pp != NULL && (*pp)->audit != audit) pp = &(*pp)->next;
  if (*pp != NULL) {
    t = *pp;
    *pp = t->next;
  }
  pthread_mutex_unlock(&open_trails_lock);
  /* chain_end first, then its anchor: the run's last head is off the host
   * before the command exits. A broker that cannot take it loses nothing
   * (the records are on disk) but leaves them unanchored: say so. */
  dlqb_audit_end(audit);
  dlqb_error err = {{0}};
  if (t != NULL && dlqb_anchor_stop(t->anchors, &err) != DLQB_OK)
    dlqb_log_warn("anchor_failing", "these audit records are on disk but not anchored in %s: %s",
                  DLQB_Q_ANCHORS, err.msg);
  free(t);
  dlqb_audit_close(audit);
}

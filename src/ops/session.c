/* An operation's session: its audit trail with the anchor publisher, and
 * the completion ledger as the session's moves read it (dlqb/ops.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/anchor.h"
#include "dlqb/log.h"
#include "dlqb/ops.h"
#include "dlqb/topology.h"

struct ops_session {
  const dlqb_config *cfg;
  const dlqb_broker_conf *broker;
  dlqb_audit *audit;        /* NULL: acting without a trail (without_trail) */
  dlqb_anchor_pub *anchors; /* NULL: no trail, or no anchor interval */
  dlqb_ledger *ledger;      /* read on the first ops_session_ledger */
  dlqb_ledger_stats ledger_stats;
};

dlqb_status ops_session_open(const ops_session_opts *o, ops_session **out, dlqb_error *err) {
  *out = NULL;
  if (o->cfg->audit.log[0] == '\0' && !o->without_trail && !o->read_only)
    /* Nothing moves unrecorded: the trail is where "no erasure was lost"
     * is proved. Every front end says it with these words. */
    return dlqb_fail(err, DLQB_EINVAL, "%s", OPS_NO_TRAIL);
  ops_session *s = calloc(1, sizeof *s);
  if (s == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  s->cfg = o->cfg;
  s->broker = o->broker;
  dlqb_status st = DLQB_OK;
  if (o->cfg->audit.log[0] != '\0' && !o->read_only) {
    st = dlqb_audit_open(o->cfg, o->writer, &s->audit, err);
    if (st == DLQB_OK)
      st = dlqb_anchor_start(o->cfg, o->broker, s->audit, o->held_anchors, &s->anchors, err);
  }
  if (st != DLQB_OK) {
    dlqb_audit_close(s->audit);
    free(s);
    return st;
  }
  *out = s;
  return DLQB_OK;
}

dlqb_audit *ops_session_audit(const ops_session *s) { return s != NULL ? s->audit : NULL; }

dlqb_anchor_pub *ops_session_anchors(const ops_session *s) { return s != NULL ? s->anchors : NULL; }

dlqb_status ops_session_ledger(ops_session *s, const dlqb_pipeline *p, bool dry_run,
                               const dlqb_ledger **out, const dlqb_ledger_stats **stats,
                               dlqb_error *err) {
  if (s->ledger == NULL) {
    dlqb_ledger *l = dlqb_ledger_new();
    if (l == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    dlqb_status st = ops_replay_ledger(s->cfg, s->broker, p, dry_run, l, &s->ledger_stats, err);
    if (st != DLQB_OK) {
      dlqb_ledger_free(l);
      return st;
    }
    s->ledger = l;
  }
  *out = s->ledger;
  if (stats != NULL) *stats = &s->ledger_stats;
  return DLQB_OK;
}

void ops_session_close(ops_session *s) {
  if (s == NULL) return;
  /* chain_end first, then its anchor: the session's last head is off the
   * host before it ends (a command's exit, the daemon's clean stop). A
   * broker that cannot take it loses nothing (the records are on disk) but
   * leaves them unanchored: say so. */
  if (s->audit != NULL) {
    dlqb_audit_end(s->audit);
    dlqb_error err = {{0}};
    if (dlqb_anchor_stop(s->anchors, &err) != DLQB_OK)
      dlqb_log_warn("anchor_failing", "these audit records are on disk but not anchored in %s: %s",
                    DLQB_Q_ANCHORS, err.msg);
    dlqb_audit_close(s->audit);
  }
  dlqb_ledger_free(s->ledger);
  free(s);
}

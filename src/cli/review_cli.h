/* What the review subcommands (cmd_review.c: the table and list;
 * cmd_review_custody.c: claim and decide) share: how a compliance_review
 * item is shown. Private to the binary, like cli.h. */
#ifndef DLQB_REVIEW_CLI_H
#define DLQB_REVIEW_CLI_H

#include <json-c/json.h>
#include <stdint.h>

#include "dlqb/audit.h"
#include "dlqb/item.h"
#include "dlqb/ledger.h"
#include "dlqb/review.h"
#include "dlqb/scan.h"
#include "ops.h"

/* The item as a JSON object (new reference): ops_item_json's members with
 * age_seconds counted in review, and escalated_by, escalated_at,
 * escalation_reason, escalation_note, owner, claimed_at and
 * claimed_seconds (null when unclaimed or unknown). */
json_object *review_item_json(const dlqb_item *it, int64_t now_ms);

/* ---- claim and decide on one item (cmd_review_custody.c): the CLI's
 * review claim/decide and the console's inbox run this one pass ---- */

typedef enum { ACT_CLAIM, ACT_REPLAY, ACT_RESOLVE, ACT_RETURN } act_kind;

typedef struct {
  ops_opts o;             /* cfg (the broker user), actor, window */
  act_kind kind;
  int ndecisions;         /* decide: how many of --replay/--resolve/--return were given */
  const char *message_id, *note;
  bool force;
  dlqb_select sel;        /* the one item: its message_id, limit 1 */
  const dlqb_ledger *ledger; /* ACT_REPLAY: the completion ledger, read whole */
  char now[DLQB_ISO_TIME_MAX];
  char reason[DLQB_LAST_ERROR_MAX + 1];
  /* What the pass found and did. */
  bool found;
  dlqb_item item;
  dlqb_review_gate gate;  /* whether custody let the actor act */
  bool settled;           /* its hop was confirmed, recorded and the original acked */
  dlqb_event done_event;  /* that hop's event */
} review_act;

/* One pass over compliance_review acting on the item c->message_id as
 * c->kind says, through audit (may be NULL only with audit off). Prints
 * nothing: the result is in c (found, gate, settled). DLQB_EINVAL for a bad
 * message_id; else dlqb_scan_run's status. */
dlqb_status review_act_pass(review_act *c, const char *command, dlqb_audit *audit,
                            dlqb_stop_flag *stop, dlqb_scan_result *r, dlqb_error *err);

int review_claim(int argc, char **argv);
int review_decide(int argc, char **argv);

#endif

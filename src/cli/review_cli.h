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
#include "ops_cli.h"

/* The item as a JSON object (new reference): cli_item_json's members with
 * age_seconds counted in review, and escalated_by, escalated_at,
 * escalation_reason, escalation_note, owner, claimed_at and
 * claimed_seconds (null when unclaimed or unknown). */
json_object *review_item_json(const dlqb_item *it, int64_t now_ms);

/* Claim and decide (cmd_review_custody.c) run ops_review_act_pass
 * (dlqb/ops.h), as the console's inbox does. */
int review_claim(int argc, char **argv);
int review_decide(int argc, char **argv);

#endif

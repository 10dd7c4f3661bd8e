/* Names of hop events, as they appear in logs, metrics and the audit
 * trail, and a hop's identity taken from an item. */
#include "dlqb/hop.h"

#include <stdio.h>
#include <string.h>

static const char *const event_names[DLQB_EV__COUNT] = {
    [DLQB_EV_RETRY_SCHEDULED] = "retry_scheduled",
    [DLQB_EV_DEAD_LETTERED] = "dead_lettered",
    [DLQB_EV_POISON] = "poison",
    [DLQB_EV_INVALID] = "invalid_envelope",
    [DLQB_EV_REPLAYED] = "replayed",
    [DLQB_EV_SKIPPED_COMPLETE] = "skipped_complete",
    [DLQB_EV_ESCALATED] = "escalated",
    [DLQB_EV_RESOLVED] = "resolved",
    [DLQB_EV_CLAIMED] = "claimed",
    [DLQB_EV_DECIDED_REPLAY] = "decided_replay",
    [DLQB_EV_DECIDED_RESOLVE] = "decided_resolve",
    [DLQB_EV_DECIDED_RETURN] = "decided_return",
    [DLQB_EV_MIGRATED] = "migrated",
    [DLQB_EV_MOVE_STARTED] = "move_started",
    [DLQB_EV_MOVE_ABANDONED] = "move_abandoned",
    [DLQB_EV_EDITED] = "edited",
    [DLQB_EV_EDIT_STARTED] = "edit_started",
    [DLQB_EV_EDIT_ABANDONED] = "edit_abandoned",
    [DLQB_EV_EDIT_PROPOSED] = "edit_proposed",
    [DLQB_EV_EDIT_REJECTED] = "edit_rejected",
};

const char *dlqb_event_name(dlqb_event ev) {
  return (ev >= 0 && ev < DLQB_EV__COUNT) ? event_names[ev] : "unknown";
}

void dlqb_hop_identity(dlqb_hop *hop, const dlqb_item *it) {
  snprintf(hop->message_id, sizeof hop->message_id, "%s", it->message_id);
  snprintf(hop->request_id, sizeof hop->request_id, "%s", it->request_id);
  snprintf(hop->source_system, sizeof hop->source_system, "%s", it->source_system);
  /* An item's fields may be longer than a hop's (a hostile header read
   * leniently): cut, they still name the request's basis and action. */
  snprintf(hop->legal_basis, sizeof hop->legal_basis, "%.*s", (int)sizeof hop->legal_basis - 1,
           it->legal_basis);
  snprintf(hop->action, sizeof hop->action, "%.*s", (int)sizeof hop->action - 1, it->action);
  hop->attempt = it->attempt;
}

void dlqb_hop_intent(dlqb_hop *intent, const dlqb_hop *hop) {
  memset(intent, 0, sizeof *intent);
  intent->event = DLQB_EV_MOVE_STARTED;
  intent->intent_for = hop->event;
  memcpy(intent->message_id, hop->message_id, sizeof intent->message_id);
  memcpy(intent->request_id, hop->request_id, sizeof intent->request_id);
  memcpy(intent->source_system, hop->source_system, sizeof intent->source_system);
  memcpy(intent->legal_basis, hop->legal_basis, sizeof intent->legal_basis);
  memcpy(intent->action, hop->action, sizeof intent->action);
  intent->attempt = hop->attempt;
  snprintf(intent->reason, sizeof intent->reason, "%s -> %s", hop->from, hop->to);
  memcpy(intent->actor, hop->actor, sizeof intent->actor);
  memcpy(intent->broker_user, hop->broker_user, sizeof intent->broker_user);
  memcpy(intent->pipeline, hop->pipeline, sizeof intent->pipeline);
}

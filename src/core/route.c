/* The routing plan for one failed task: see dlqb/route.h. */
#include "dlqb/route.h"

#include <stdio.h>
#include <string.h>

#include "dlqb/deadline.h"
#include "dlqb/group.h" /* dlqb_sha256 */
#include "dlqb/xdeath.h"

static dlqb_event event_of(const dlqb_decision *d) {
  if (d->escalate) return DLQB_EV_ESCALATED;
  if (d->route == DLQB_ROUTE_RETRY) return DLQB_EV_RETRY_SCHEDULED;
  if (d->reason == DLQB_REASON_POISON) return DLQB_EV_POISON;
  if (d->reason == DLQB_REASON_INVALID) return DLQB_EV_INVALID;
  return DLQB_EV_DEAD_LETTERED;
}

static void set(dlqb_route_plan *p, const char *key, dlqb_hset_kind kind, const char *str,
                int64_t num) {
  p->sets[p->nsets++] = (dlqb_hset){key, kind, str, num};
}

void dlqb_route_plan_make(const dlqb_config *cfg, const amqp_table_t *headers,
                          const char *message_id, int64_t now_ms, uint32_t random,
                          dlqb_route_plan *out) {
  dlqb_pipeline p;
  memset(&p, 0, sizeof p);
  dlqb_pipeline_default_names(&p, DLQB_PIPELINE_DEFAULT);
  (void)dlqb_profile_builtin(DLQB_PIPELINE_DEFAULT, &p.profile, NULL);
  dlqb_route_plan_make_pipeline(cfg, &p, headers, NULL, 0, message_id, now_ms, random, out);
}

void dlqb_route_plan_make_pipeline(const dlqb_config *cfg, const dlqb_pipeline *p,
                                   const amqp_table_t *headers, const void *body, size_t body_len,
                                   const char *message_id, int64_t now_ms, uint32_t random,
                                   dlqb_route_plan *out) {
  memset(out, 0, sizeof *out);
  dlqb_envelope env;
  dlqb_error why;
  out->valid = dlqb_envelope_parse_profile(headers, &p->profile, cfg->policy.max_attempts, &env,
                                           &why) == DLQB_OK;
  dlqb_failure failure;
  dlqb_failure_read_prefix(headers, p->retry_prefix, &failure);
  dlqb_decision *dec = &out->decision;
  /* The SLA budget runs from the profile's clock (first_seen_at unless it
   * names another header). */
  dlqb_envelope clock = env;
  if (out->valid && strcmp(p->profile.sla_clock, DLQB_H_FIRST_SEEN_AT) != 0) {
    clock.has_first_seen_at = env.has_sla_start;
    clock.first_seen_at_ms = env.sla_start_ms;
  }
  dlqb_policy_decide(cfg, out->valid ? &clock : NULL, why.msg, &failure, now_ms, random, dec);
  dlqb_iso_time(now_ms, out->now_iso, sizeof out->now_iso);

  set(out, DLQB_H_LAST_ERROR, DLQB_HSET_STRING, dec->last_error, 0);
  if (out->valid) {
    set(out, DLQB_H_ATTEMPT, DLQB_HSET_INT, NULL, dec->attempt);
    /* Stamped so the bound travels with the task and a config change cannot
     * move it mid-flight. */
    set(out, DLQB_H_MAX_ATTEMPTS, DLQB_HSET_INT, NULL, env.max_attempts);
    /* Absent, or in the future (see the policy): the bridge's clock from
     * now on, so the SLA budget has a fixed start. */
    if (!env.has_first_seen_at || env.first_seen_at_ms > now_ms)
      set(out, DLQB_H_FIRST_SEEN_AT, DLQB_HSET_STRING, out->now_iso, 0);
    /* The worker's text now lives in last_error; a stale copy would be
     * mistaken for the next failure's. */
    set(out, DLQB_H_WORKER_ERROR, DLQB_HSET_REMOVE, NULL, 0);
  }
  if (dec->route == DLQB_ROUTE_RETRY) {
    dlqb_pipeline_retry_queue_name(p, cfg->policy.retry_delays_ms[dec->delay_tier], out->target,
                                   sizeof out->target);
    out->has_expiration = true;
    snprintf(out->expiration, sizeof out->expiration, "%llu", (unsigned long long)dec->delay_ms);
    set(out, DLQB_H_DLQ_REASON, DLQB_HSET_REMOVE, NULL, 0);
    /* The retry queue dead-letters the task back to dsr.work on expiry. An
     * x-death a client forged crashes that on RabbitMQ 3.10.8 (an array of
     * strings: function_clause in rabbit_dead_letter) and the queue stops
     * dead-lettering; it says nothing the bridge reads, so it goes. The
     * DLQ copy keeps it as it came. */
    if (dlqb_header_xdeath_forged(headers)) set(out, DLQB_H_X_DEATH, DLQB_HSET_REMOVE, NULL, 0);
  } else {
    /* Nothing may expire out of the DLQ: has_expiration stays false, and
     * the router clears the property. */
    snprintf(out->target, sizeof out->target, "%s", p->dlq);
    set(out, DLQB_H_DLQ_REASON, DLQB_HSET_STRING, dlqb_reason_name(dec->reason), 0);
    set(out, DLQB_H_DLQ_AT, DLQB_HSET_STRING, out->now_iso, 0);
    if (dec->escalate) {
      /* Poison at the replay level: replays did not help, a person decides. */
      snprintf(out->target, sizeof out->target, "%s", p->review);
      out->nsets += dlqb_escalation_stamp(out->sets + out->nsets, DLQB_ACTOR_BRIDGE, out->now_iso,
                                          DLQB_ESCALATION_MAX_REPLAYS, NULL);
    }
    /* References only: the body stays out, and the item says what was
     * left off (its size and hash), so nothing is dropped unseen. The
     * reason stays the routing one: replay and stats still group by it. */
    if (p->profile.dlq_body_forbidden && body_len > 0) {
      uint8_t digest[32];
      dlqb_sha256(body, body_len, digest);
      for (size_t i = 0; i < 32; i++) snprintf(out->body_sha256 + 2 * i, 3, "%02x", digest[i]);
      out->drop_body = true;
      set(out, DLQB_H_BODY_DROPPED, DLQB_HSET_INT, NULL, (int64_t)body_len);
      set(out, DLQB_H_BODY_SHA256, DLQB_HSET_STRING, out->body_sha256, 0);
    } else if (!p->profile.dlq_body_forbidden) {
      /* Where bodies are kept no bridge drops one: a producer's claim
       * that one was dropped does not enter the DLQ. (Where they are
       * forbidden an empty body keeps them: an earlier hop's drop, e.g.
       * of a replayed item, stays said.) */
      set(out, DLQB_H_BODY_DROPPED, DLQB_HSET_REMOVE, NULL, 0);
      set(out, DLQB_H_BODY_SHA256, DLQB_HSET_REMOVE, NULL, 0);
    }
  }

  dlqb_hop *hop = &out->hop;
  hop->event = event_of(dec);
  snprintf(hop->message_id, sizeof hop->message_id, "%s", message_id);
  out->first_failure = !out->valid || env.attempt == 0;
  if (out->valid) {
    memcpy(hop->request_id, env.request_id, sizeof hop->request_id);
    memcpy(hop->source_system, env.source_system, sizeof hop->source_system);
    memcpy(hop->legal_basis, env.legal_basis, sizeof hop->legal_basis);
    memcpy(hop->action, env.action, sizeof hop->action);
  } else {
    /* An invalid task keeps what identity it has, so `audit show
     * --request-id` finds it (each field that is there, sanitised). */
    (void)dlqb_header_id(headers, p->profile.fields[0].name, hop->request_id,
                         sizeof hop->request_id);
    (void)dlqb_header_id(headers, p->profile.fields[1].name, hop->source_system,
                         sizeof hop->source_system);
    (void)dlqb_header_id(headers, DLQB_H_LEGAL_BASIS, hop->legal_basis, sizeof hop->legal_basis);
    (void)dlqb_header_id(headers, DLQB_H_ACTION, hop->action, sizeof hop->action);
  }
  hop->attempt = dec->attempt;
  dlqb_deaths_text(headers, hop->deaths, sizeof hop->deaths);
  hop->has_delivery_count = dlqb_header_delivery_count(headers, &hop->delivery_count);
  snprintf(hop->reason, sizeof hop->reason, "%s", dec->last_error);
  snprintf(hop->cause, sizeof hop->cause, "%s",
           dec->escalate ? DLQB_ESCALATION_MAX_REPLAYS : dlqb_reason_name(dec->reason));
  snprintf(hop->from, sizeof hop->from, "%s", p->failed);
  snprintf(hop->to, sizeof hop->to, "%s", out->target);
  snprintf(hop->actor, sizeof hop->actor, "system");
}

void dlqb_route_plan_receipt(dlqb_route_plan *plan, const amqp_basic_properties_t *props,
                             const dlqb_profile *profile, int64_t now_ms) {
  if (!plan->first_failure) return;
  dlqb_item it;
  dlqb_item_read_as(props, profile, &it);
  int64_t at = now_ms;
  const char *from = dlqb_item_receipt_from(&it, now_ms, &at);
  /* Within the clock skew a claim may be a little ahead: the first sight
   * bounds it. */
  if (from == NULL || at > now_ms) {
    at = now_ms;
    from = "bridge";
  }
  dlqb_hop *hop = &plan->hop;
  hop->has_received = true;
  hop->received_at_ms = at;
  snprintf(hop->received_from, sizeof hop->received_from, "%s", from);
}

void dlqb_route_plan_refused(dlqb_route_plan *p, const char *why) {
  dlqb_decision *dec = &p->decision;
  dec->route = DLQB_ROUTE_DLQ;
  dec->reason = DLQB_REASON_UNPUBLISHABLE;
  dec->escalate = false;
  snprintf(dec->last_error, sizeof dec->last_error, "cannot be sent on as it is: %s", why);
  p->has_expiration = false;
  snprintf(p->target, sizeof p->target, "%s", DLQB_Q_DLQ);
  p->nsets = 0;
  set(p, DLQB_H_LAST_ERROR, DLQB_HSET_STRING, dec->last_error, 0);
  set(p, DLQB_H_DLQ_REASON, DLQB_HSET_STRING, dlqb_reason_name(dec->reason), 0);
  set(p, DLQB_H_DLQ_AT, DLQB_HSET_STRING, p->now_iso, 0);
  dlqb_hop *hop = &p->hop;
  hop->event = DLQB_EV_DEAD_LETTERED;
  snprintf(hop->reason, sizeof hop->reason, "%s", dec->last_error);
  snprintf(hop->cause, sizeof hop->cause, "%s", dlqb_reason_name(dec->reason));
  snprintf(hop->to, sizeof hop->to, "%s", p->target);
}

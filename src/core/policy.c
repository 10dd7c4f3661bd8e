/* Routing policy: retry with a jittered backoff, or dead-letter with a reason. */
#include "dlqb/policy.h"

#include <stdio.h>
#include <string.h>

#include "dlqb/text.h"

#define POISON_TEXT "poison: repeated consumer crash"
#define SLA_TEXT    "; sla budget exhausted: next try would pass the deadline "

const char *dlqb_reason_name(dlqb_reason r) {
  switch (r) {
  case DLQB_REASON_MAX_ATTEMPTS: return "max_attempts";
  case DLQB_REASON_SLA_BUDGET: return "sla_budget";
  case DLQB_REASON_POISON: return "poison";
  case DLQB_REASON_INVALID: return "invalid_envelope";
  case DLQB_REASON_UNPUBLISHABLE: return "unpublishable";
  case DLQB_REASON_NONE:
  default: return "";
  }
}

/* Length of a fixed-size char field that may lack its NUL. */
static int field_len(const char *s, size_t cap) { return (int)strnlen(s, cap); }

char *dlqb_failure_text(const dlqb_failure *f, char *buf, size_t len) {
  /* Room for the longest prefix plus a full worker_error; the final
   * sanitize cuts it to last_error size at a character boundary. */
  char tmp[DLQB_LAST_ERROR_MAX + 64];
  if (buf == NULL || len == 0) return buf;
  if (f == NULL) {
    snprintf(tmp, sizeof tmp, "failed without a reason");
  } else {
    int ql = field_len(f->queue, sizeof f->queue);
    int wl = field_len(f->worker_error, sizeof f->worker_error);
    switch (f->kind) {
    case DLQB_FAIL_REJECTED:
      if (f->has_worker_error)
        snprintf(tmp, sizeof tmp, "rejected by worker: %.*s", wl, f->worker_error);
      else snprintf(tmp, sizeof tmp, "rejected by worker");
      break;
    case DLQB_FAIL_DELIVERY_LIMIT: snprintf(tmp, sizeof tmp, POISON_TEXT); break;
    case DLQB_FAIL_EXPIRED:
      if (ql > 0) snprintf(tmp, sizeof tmp, "expired in %.*s", ql, f->queue);
      else snprintf(tmp, sizeof tmp, "expired");
      break;
    case DLQB_FAIL_MAXLEN:
      if (ql > 0) snprintf(tmp, sizeof tmp, "dropped by max-length of %.*s", ql, f->queue);
      else snprintf(tmp, sizeof tmp, "dropped by max-length");
      break;
    case DLQB_FAIL_REPORTED:
    default:
      if (f->has_worker_error) snprintf(tmp, sizeof tmp, "worker error: %.*s", wl, f->worker_error);
      else snprintf(tmp, sizeof tmp, "failed without a reason");
      break;
    }
  }
  dlqb_text_sanitize(buf, len < DLQB_LAST_ERROR_MAX + 1 ? len : DLQB_LAST_ERROR_MAX + 1, tmp,
                     strlen(tmp));
  return buf;
}

/* floor(d * percent/100 * random / 2^32) without overflow for any d: the
 * product needs up to 103 bits, so it is built from 32-bit limbs. */
static uint64_t jitter_cut(uint64_t d, uint32_t percent, uint32_t random) {
  uint64_t m = (uint64_t)percent * random; /* < 2^39 */
  uint64_t dl = d & 0xFFFFFFFFu, dh = d >> 32;
  uint64_t ml = m & 0xFFFFFFFFu, mh = m >> 32;
  /* d*m = dh*mh*2^64 + (dh*ml + dl*mh)*2^32 + dl*ml */
  uint64_t lo = dl * ml;
  uint64_t mid1 = dh * ml, mid2 = dl * mh;
  uint64_t carry = (lo >> 32) + (mid1 & 0xFFFFFFFFu) + (mid2 & 0xFFFFFFFFu);
  uint64_t hi = dh * mh + (mid1 >> 32) + (mid2 >> 32) + (carry >> 32);
  /* (d*m) >> 32 as three 32-bit limbs, then long division by 100. */
  uint64_t limbs[3] = {hi >> 32, hi & 0xFFFFFFFFu, carry & 0xFFFFFFFFu};
  uint64_t rem = 0, q = 0;
  for (size_t i = 0; i < 3; i++) {
    uint64_t cur = (rem << 32) | limbs[i];
    q = (q << 32) | (cur / 100); /* the top limb's quotient is 0: the result is <= d */
    rem = cur % 100;
  }
  return q;
}

static uint64_t jittered(uint64_t d, int percent, uint32_t random) {
  if (percent <= 0) return d;
  if (percent > 100) percent = 100;
  return d - jitter_cut(d, (uint32_t)percent, random);
}

/* first_seen + budget, saturating at INT64_MAX. */
static int64_t deadline_of(int64_t first_seen, uint64_t budget) {
  if (budget > (uint64_t)INT64_MAX) {
    if (first_seen >= 0) return INT64_MAX;
    uint64_t back = (uint64_t)(-(first_seen + 1)) + 1; /* |first_seen| without overflow */
    return budget - back > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(budget - back);
  }
  int64_t b = (int64_t)budget;
  return first_seen > INT64_MAX - b ? INT64_MAX : first_seen + b;
}

/* Whether now + delay lands after deadline; exactly at it is still in time. */
static bool past_deadline(int64_t now, uint64_t delay, int64_t deadline) {
  if (now > deadline) return true;
  return delay > (uint64_t)deadline - (uint64_t)now;
}

static void set_invalid(const char *why, dlqb_decision *out) {
  char tmp[DLQB_LAST_ERROR_MAX + 64];
  snprintf(tmp, sizeof tmp, "invalid envelope: %s", why != NULL ? why : "unknown problem");
  out->route = DLQB_ROUTE_DLQ;
  out->reason = DLQB_REASON_INVALID;
  out->attempt = 0;
  dlqb_text_sanitize(out->last_error, sizeof out->last_error, tmp, strlen(tmp));
}

/* last_error for an SLA dead-letter: the failure text, cut so the deadline
 * part always fits. */
static void set_sla_text(const char *failure, int64_t deadline, dlqb_decision *out) {
  char iso[DLQB_ISO_TIME_MAX], suffix[sizeof SLA_TEXT + DLQB_ISO_TIME_MAX];
  size_t slen = (size_t)snprintf(suffix, sizeof suffix, "%s%s", SLA_TEXT,
                                 dlqb_iso_time(deadline, iso, sizeof iso));
  size_t flen =
      dlqb_text_sanitize(out->last_error, DLQB_LAST_ERROR_MAX + 1 - slen, failure, strlen(failure));
  memcpy(out->last_error + flen, suffix, slen + 1);
}

static void decide_route(const dlqb_config *cfg, const dlqb_envelope *env, const char *invalid_why,
                         const dlqb_failure *f, int64_t now_ms, uint32_t random,
                         dlqb_decision *out) {
  char text[DLQB_LAST_ERROR_MAX + 1];
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  out->route = DLQB_ROUTE_DLQ;
  if (env == NULL || cfg == NULL) {
    set_invalid(env == NULL ? invalid_why : "no configuration", out);
    return;
  }
  /* Saturating: a hand-built envelope could hold any value. */
  out->attempt = env->attempt < 0 ? 1 : env->attempt == INT64_MAX ? INT64_MAX : env->attempt + 1;
  if (f != NULL && f->kind == DLQB_FAIL_DELIVERY_LIMIT) {
    out->reason = DLQB_REASON_POISON;
    snprintf(out->last_error, sizeof out->last_error, POISON_TEXT);
    return;
  }
  dlqb_failure_text(f, text, sizeof text);
  if (out->attempt >= env->max_attempts) {
    out->reason = DLQB_REASON_MAX_ATTEMPTS;
    memcpy(out->last_error, text, sizeof text);
    return;
  }
  size_t count = cfg->policy.retry_delay_count;
  if (count > DLQB_MAX_RETRY_DELAYS) count = DLQB_MAX_RETRY_DELAYS;
  size_t tier = 0;
  uint64_t delay = 0;
  if (count > 0) {
    uint64_t step = (uint64_t)(out->attempt - 1); /* attempt 1 waits on delays[0] */
    tier = step < count - 1 ? (size_t)step : count - 1;
    delay = jittered(cfg->policy.retry_delays_ms[tier], cfg->policy.retry_jitter_percent, random);
  }
  /* A first_seen_at later than now is a claim nothing supports (a producer
   * can write year 2200): it never moves the deadline past now + budget.
   * The router then stamps now in its place (dlqb/route.h), so the budget
   * runs from this failure and does not restart with each one. */
  int64_t first_seen =
      env->has_first_seen_at && env->first_seen_at_ms < now_ms ? env->first_seen_at_ms : now_ms;
  int64_t deadline = deadline_of(first_seen, cfg->policy.sla_budget_ms);
  if (past_deadline(now_ms, delay, deadline)) {
    out->reason = DLQB_REASON_SLA_BUDGET;
    set_sla_text(text, deadline, out);
    return;
  }
  out->route = DLQB_ROUTE_RETRY;
  out->reason = DLQB_REASON_NONE;
  out->delay_ms = delay;
  out->delay_tier = tier;
  memcpy(out->last_error, text, sizeof text);
}

void dlqb_policy_decide(const dlqb_config *cfg, const dlqb_envelope *env, const char *invalid_why,
                        const dlqb_failure *f, int64_t now_ms, uint32_t random,
                        dlqb_decision *out) {
  if (out == NULL) return;
  decide_route(cfg, env, invalid_why, f, now_ms, random, out);
  /* Replayed that often and failed for good again: a person decides. */
  out->escalate = out->route == DLQB_ROUTE_DLQ && env != NULL && cfg != NULL &&
                  cfg->policy.max_replays > 0 && env->replay_count >= cfg->policy.max_replays;
}

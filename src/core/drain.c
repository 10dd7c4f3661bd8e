/* The drain's policy and ramp: see dlqb/drain.h. */
#include "dlqb/drain.h"

#include "dlqb/group.h"

#include <stddef.h>
#include <string.h>

/* ---- eligibility ------------------------------------------------------ */

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool dlqb_drain_list_has(const char *list, const char *name) {
  size_t n = strlen(name);
  if (n == 0) return false;
  const char *p = list;
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    if (end == NULL) end = p + strlen(p);
    const char *a = p, *b = end;
    while (a < b && is_space(*a)) a++;
    while (b > a && is_space(b[-1])) b--;
    if ((size_t)(b - a) == n && memcmp(a, name, n) == 0) return true;
    p = *end == ',' ? end + 1 : end;
  }
  return false;
}

static char fold(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

/* dlqb_drain_list_has without case: group ids compare that way. */
static bool list_has_fold(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; *p != '\0';) {
    const char *end = strchr(p, ',');
    if (end == NULL) end = p + strlen(p);
    bool same = (size_t)(end - p) == n;
    for (size_t i = 0; same && i < n; i++) same = fold(p[i]) == fold(name[i]);
    if (same) return true;
    p = *end == ',' ? end + 1 : end;
  }
  return false;
}

/* Normalises text into out (at most cap-1 bytes): ASCII letters lower-case,
 * each run of white space one space, none at either end. */
static size_t normalise(const char *text, size_t len, char *out, size_t cap) {
  size_t n = 0;
  bool space = false;
  for (size_t i = 0; i < len && n + 1 < cap; i++) {
    if (is_space(text[i])) {
      space = n > 0;
      continue;
    }
    if (space && n + 2 < cap) out[n++] = ' ';
    space = false;
    out[n++] = fold(text[i]);
  }
  out[n] = '\0';
  return n;
}

/* Whether last_error holds one of the '|'-separated patterns. */
static bool error_matches(const char *patterns, const char *last_error) {
  char hay[DLQB_LAST_ERROR_MAX + 1];
  normalise(last_error, strlen(last_error), hay, sizeof hay);
  const char *p = patterns;
  for (;;) {
    const char *end = strchr(p, '|');
    if (end == NULL) end = p + strlen(p);
    char needle[DLQB_LAST_ERROR_MAX + 1];
    size_t n = normalise(p, (size_t)(end - p), needle, sizeof needle);
    if (n > 0 && strstr(hay, needle) != NULL) return true;
    if (*end == '\0') return false;
    p = end + 1;
  }
}

bool dlqb_drain_eligible(const dlqb_config *cfg, const dlqb_item *it) {
  /* The item's identity is its pipeline profile's (dlqb_item_read_as):
   * drain_sources matches its second field (dsr: source_system). */
  if (it->request_id[0] == '\0' || it->source_system[0] == '\0') return false;
  if (!dlqb_drain_list_has(cfg->drain.reasons, it->dlq_reason)) return false;
  if (cfg->drain.sources[0] != '\0' && !dlqb_drain_list_has(cfg->drain.sources, it->source_system))
    return false;
  if (cfg->drain.errors[0] != '\0' && !error_matches(cfg->drain.errors, it->last_error))
    return false;
  if (cfg->drain.groups[0] != '\0') {
    char id[DLQB_GROUP_ID_BUF];
    dlqb_group_of(it, id, NULL, 0);
    if (!list_has_fold(cfg->drain.groups, id)) return false;
  }
  return true;
}

/* ---- the ramp --------------------------------------------------------- */

void dlqb_drain_params_from(const dlqb_config *cfg, dlqb_drain_params *p) {
  p->canary = cfg->drain.canary;
  p->canary_timeout_ms = cfg->drain.canary_timeout_ms;
  p->start_rate = cfg->drain.start_rate;
  p->step_factor = cfg->drain.step_factor;
  p->max_rate = cfg->drain.max_rate;
  p->step_ms = cfg->drain.step_ms;
  p->failure_threshold = cfg->drain.failure_threshold;
  p->failure_window_ms = cfg->drain.failure_window_ms;
  p->max_items = (uint64_t)cfg->drain.max_items;
}

static const char *const stop_names[DLQB_DRAIN__STOPS] = {
    "running",    "drained",   "canary_failed", "canary_timeout",
    "refailures", "max_items", "interrupted",   "error",
};

const char *dlqb_drain_stop_name(dlqb_drain_stop s) {
  return s >= 0 && s < DLQB_DRAIN__STOPS ? stop_names[s] : "unknown";
}

void dlqb_drain_init(dlqb_drain_ramp *r, const dlqb_drain_params *p) {
  memset(r, 0, sizeof *r);
  r->p = *p;
  if (r->p.canary < 1) r->p.canary = 1;
  if (r->p.start_rate < 1) r->p.start_rate = 1;
  if (r->p.max_rate < r->p.start_rate) r->p.max_rate = r->p.start_rate;
  if (r->p.step_factor < 1) r->p.step_factor = 1;
  if (r->p.failure_threshold < 1) r->p.failure_threshold = 1;
  if (r->p.failure_threshold > DLQB_DRAIN_FAILURES_MAX)
    r->p.failure_threshold = DLQB_DRAIN_FAILURES_MAX;
  r->phase = DLQB_DRAIN_PH_CANARY;
  r->stop = DLQB_DRAIN_RUNNING;
  r->rate = r->p.start_rate;
}

void dlqb_drain_end(dlqb_drain_ramp *r, dlqb_drain_stop why) {
  if (r->phase == DLQB_DRAIN_PH_END) return;
  r->phase = DLQB_DRAIN_PH_END;
  r->stop = why;
}

/* What max_items still allows (UINT64_MAX without a limit). */
static uint64_t room(const dlqb_drain_ramp *r) {
  if (r->p.max_items == 0) return UINT64_MAX;
  return r->p.max_items > r->moved ? r->p.max_items - r->moved : 0;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

dlqb_drain_action dlqb_drain_next(dlqb_drain_ramp *r, int64_t now_ms) {
  dlqb_drain_action a = {DLQB_DRAIN_END, 0, 0, false};
  if (r->phase == DLQB_DRAIN_PH_END) return a;
  if (r->phase != DLQB_DRAIN_PH_WAIT && room(r) == 0) {
    dlqb_drain_end(r, DLQB_DRAIN_MAX_ITEMS);
    return a;
  }
  switch (r->phase) {
  case DLQB_DRAIN_PH_CANARY:
    a = (dlqb_drain_action){DLQB_DRAIN_MOVE, min_u64((uint64_t)r->p.canary, room(r)),
                            r->p.start_rate, true};
    return a;
  case DLQB_DRAIN_PH_WAIT:
    if (r->canary_failed > 0) {
      dlqb_drain_end(r, DLQB_DRAIN_CANARY_FAILED);
      return a;
    }
    if (r->canary_completed >= r->canary_moved) {
      /* The canary held everything there was: nothing to ramp. */
      if (r->canary_exhausted) {
        dlqb_drain_end(r, DLQB_DRAIN_DRAINED);
        return a;
      }
      r->phase = DLQB_DRAIN_PH_RAMP;
      return dlqb_drain_next(r, now_ms);
    }
    if (now_ms - r->canary_at_ms >= (int64_t)r->p.canary_timeout_ms) {
      dlqb_drain_end(r, DLQB_DRAIN_CANARY_TIMEOUT);
      return a;
    }
    a.kind = DLQB_DRAIN_WAIT_CANARY;
    return a;
  case DLQB_DRAIN_PH_RAMP: {
    /* One step: step_ms worth of items at this rate, at least one. */
    double want = r->rate * (double)r->p.step_ms / 1000.0;
    uint64_t n = want < 1 ? 1 : (uint64_t)want;
    a = (dlqb_drain_action){DLQB_DRAIN_MOVE, min_u64(n, room(r)), r->rate, false};
    return a;
  }
  case DLQB_DRAIN_PH_END: break;
  }
  return a;
}

void dlqb_drain_moved(dlqb_drain_ramp *r, uint64_t asked, uint64_t moved, int64_t now_ms) {
  /* Counted even when the run ended during the pass (re-failures seen at
   * the DLQ's tail after the step took its items): they did move. */
  r->moved += moved;
  if (r->phase == DLQB_DRAIN_PH_END) return;
  bool exhausted = moved < asked;
  if (r->phase == DLQB_DRAIN_PH_CANARY) {
    if (moved == 0) {
      dlqb_drain_end(r, DLQB_DRAIN_DRAINED);
      return;
    }
    r->canary_moved = moved;
    r->canary_exhausted = exhausted;
    r->canary_at_ms = now_ms;
    r->phase = DLQB_DRAIN_PH_WAIT;
    return;
  }
  if (r->phase != DLQB_DRAIN_PH_RAMP) return;
  r->step++;
  if (exhausted) {
    dlqb_drain_end(r, DLQB_DRAIN_DRAINED);
    return;
  }
  double next = r->rate * r->p.step_factor;
  r->rate = next > r->p.max_rate ? r->p.max_rate : next;
}

void dlqb_drain_canary(dlqb_drain_ramp *r, uint64_t completed, uint64_t failed) {
  r->canary_completed = completed;
  r->canary_failed = failed;
}

void dlqb_drain_refailed(dlqb_drain_ramp *r, int64_t now_ms) {
  if (r->phase == DLQB_DRAIN_PH_END) return;
  r->refailures++;
  /* Keep the latest threshold times; the oldest of them decides. */
  int cap = r->p.failure_threshold;
  if (r->nfail < cap) {
    r->fail_at[(r->fail_head + r->nfail) % cap] = now_ms;
    r->nfail++;
  } else {
    r->fail_at[r->fail_head] = now_ms;
    r->fail_head = (r->fail_head + 1) % cap;
  }
  if (r->nfail < cap) return;
  int64_t oldest = r->fail_at[r->fail_head];
  if (now_ms - oldest <= (int64_t)r->p.failure_window_ms) dlqb_drain_end(r, DLQB_DRAIN_REFAILURES);
}

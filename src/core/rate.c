/* The --rate token bucket (pure: callers pass the monotonic time in). */
#include "dlqb/rate.h"

#include <string.h>

void dlqb_rate_init(dlqb_rate *r, double per_second) {
  memset(r, 0, sizeof *r);
  r->rate = per_second;
}

int64_t dlqb_rate_wait_us(const dlqb_rate *r, int64_t now_us) {
  if (r->rate <= 0 || !r->started || now_us >= r->next_us) return 0;
  return r->next_us - now_us;
}

void dlqb_rate_take(dlqb_rate *r, int64_t now_us) {
  if (r->rate <= 0) return;
  int64_t interval = (int64_t)(1e6 / r->rate);
  if (interval < 1) interval = 1;
  /* Late by less than one interval: keep the schedule (no drift). Later
   * than that: restart from now (no burst after a pause). */
  int64_t base = r->next_us;
  if (!r->started || now_us - r->next_us >= interval) base = now_us;
  r->started = true;
  r->next_us = base + interval;
}

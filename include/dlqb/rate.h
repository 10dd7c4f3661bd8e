/* Pacing for --rate. Pure: no clock of its own (callers pass monotonic
 * microseconds in, dlqb/clock.h), no allocation. */
#ifndef DLQB_RATE_H
#define DLQB_RATE_H

#include <stdbool.h>
#include <stdint.h>

/* A token bucket for --rate: `rate` tokens a second, holding at most one,
 * so a long pause never turns into a burst and the rate over any run of
 * messages stays at `rate`. Times are monotonic microseconds. */
typedef struct {
  double rate;     /* per second; <= 0 means unlimited */
  int64_t next_us; /* earliest time the next token is available */
  bool started;
} dlqb_rate;

void dlqb_rate_init(dlqb_rate *r, double per_second);

/* Microseconds to wait at now_us before a token is available (0: now). */
int64_t dlqb_rate_wait_us(const dlqb_rate *r, int64_t now_us);

/* Takes a token at now_us (call once dlqb_rate_wait_us says 0). The next
 * token is due 1/rate after the later of now and the previous due time, so
 * small scheduling delays do not accumulate into a slower rate. */
void dlqb_rate_take(dlqb_rate *r, int64_t now_us);

#endif

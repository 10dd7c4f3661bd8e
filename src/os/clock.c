/* The host's wall and monotonic clocks, and the stop-aware sleep. */
#include "dlqb/clock.h"

#include <errno.h>
#include <time.h>

long long dlqb_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long dlqb_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dlqb_mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static bool stopped(const dlqb_stop_flag *stop) { return stop != NULL && *stop; }

bool dlqb_sleep_us(const dlqb_stop_flag *stop, int64_t us) {
  while (us > 0 && !stopped(stop)) {
    int64_t step = us < DLQB_SLEEP_STEP_US ? us : DLQB_SLEEP_STEP_US;
    struct timespec ts = {.tv_sec = step / 1000000, .tv_nsec = (long)(step % 1000000) * 1000};
    /* A signal ends nanosleep early; the rest of the step is still slept,
     * and the handler's stop flag is seen at the next step. */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    us -= step;
  }
  return stopped(stop);
}

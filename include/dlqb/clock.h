/* Reading the host's clocks, and the one sleep the loops use: it ends
 * early when a stop flag is set, so a signal or a shutdown is noticed
 * within a short step however long the wait. The calendar (turning a time
 * into ISO-8601 text and back) is pure and lives in dlqb/calendar.h. */
#ifndef DLQB_CLOCK_H
#define DLQB_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "dlqb/stop.h"

/* How often dlqb_sleep_us looks at its stop flag. */
#define DLQB_SLEEP_STEP_US 50000

/* Current time as Unix epoch milliseconds (wall clock), and a monotonic
 * clock in milliseconds and microseconds for intervals. */
long long dlqb_now_ms(void);
long long dlqb_mono_ms(void);
int64_t dlqb_mono_us(void);

/* Sleeps us microseconds (nothing when us <= 0), in steps of at most
 * DLQB_SLEEP_STEP_US, returning early once *stop is set; a NULL stop is
 * never set. A signal that interrupts a step does not end it. Returns true
 * when it returned because of *stop (also when it was set before the call). */
bool dlqb_sleep_us(const dlqb_stop_flag *stop, int64_t us);

#endif

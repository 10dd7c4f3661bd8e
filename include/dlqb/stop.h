/* A request to stop, set by a signal handler or by another thread and
 * polled by the loops that must finish what is in flight. volatile
 * sig_atomic_t serves a handler but is a data race between threads (the
 * escalator thread is stopped by the main thread); a lock-free atomic int
 * serves both (C11 7.14.1.1). */
#ifndef DLQB_STOP_H
#define DLQB_STOP_H

#include <stdatomic.h>

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may set the stop flag");

typedef atomic_int dlqb_stop_flag;

#endif

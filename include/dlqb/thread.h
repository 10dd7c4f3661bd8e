/* Stacks for code that reads broker frames. rabbitmq-c 0.11 decodes nested
 * header tables and arrays recursively, with no depth limit: about 97 bytes
 * of stack per level of arrays and 112 per level of tables (measured on
 * 0.11.0, x86_64, -O2). One frame (frame_max 131072) holds about 26,000
 * levels of arrays: 2.5 MiB of stack. A hostile message that deep would
 * crash a thread with glibc's default stack (2 MiB when RLIMIT_STACK is
 * unlimited) on every start, since it stays in its queue. So every thread
 * that reads frames gets DLQB_FRAME_STACK_BYTES, and the main thread (the
 * router's loop, the ops commands) an RLIMIT_STACK of at least that. */
#ifndef DLQB_THREAD_H
#define DLQB_THREAD_H

#include <pthread.h>

#include "dlqb/error.h"

/* Three times the deepest frame's need: pages are only committed when used. */
#define DLQB_FRAME_STACK_BYTES (8u * 1024u * 1024u)

/* pthread_create with a DLQB_FRAME_STACK_BYTES stack; returns its result
 * (0 or an errno value). */
int dlqb_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);

/* Makes the main thread's stack able to grow to DLQB_FRAME_STACK_BYTES:
 * raises the soft RLIMIT_STACK when it is lower (the kernel checks the
 * limit as the stack grows, so this takes effect at once). DLQB_EINVAL
 * naming both limits when the hard limit is lower. Call at start, before
 * any thread. */
dlqb_status dlqb_stack_ensure(dlqb_error *err);

#endif

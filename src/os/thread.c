/* Stacks sized for rabbitmq-c's recursive decoder: see dlqb/thread.h. */
#include "dlqb/thread.h"

#include <errno.h>
#include <sys/resource.h>

int dlqb_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg) {
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc != 0) return rc;
  rc = pthread_attr_setstacksize(&attr, DLQB_FRAME_STACK_BYTES);
  if (rc == 0) rc = pthread_create(thread, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return rc;
}

dlqb_status dlqb_stack_ensure(dlqb_error *err) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_STACK, &rl) != 0) return DLQB_OK; /* cannot tell: leave it */
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= DLQB_FRAME_STACK_BYTES) return DLQB_OK;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < DLQB_FRAME_STACK_BYTES)
    return dlqb_fail(err, DLQB_EINVAL,
                     "stack limit %llu KiB (hard limit %llu KiB) is below the %u KiB needed to "
                     "decode nested message headers: raise ulimit -s",
                     (unsigned long long)rl.rlim_cur / 1024, (unsigned long long)rl.rlim_max / 1024,
                     DLQB_FRAME_STACK_BYTES / 1024);
  rl.rlim_cur = DLQB_FRAME_STACK_BYTES;
  if (setrlimit(RLIMIT_STACK, &rl) != 0) {
    char why[DLQB_ERRNO_TEXT_MAX];
    return dlqb_fail(err, DLQB_EINVAL, "cannot raise the stack limit to %u KiB: %s",
                     DLQB_FRAME_STACK_BYTES / 1024, dlqb_errno_text(errno, why, sizeof why));
  }
  return DLQB_OK;
}

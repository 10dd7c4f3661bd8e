/* Unit tests of the clock module: the clocks move, and the stop-aware sleep
 * sleeps its time, or ends early once its stop flag is set. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <time.h>

#include "dlqb/clock.h"

static void test_clocks_agree_with_the_host(void **state) {
  (void)state;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long long now = dlqb_now_ms(), host = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  assert_true(now >= host && now - host < 1000);
  int64_t us = dlqb_mono_us();
  long long ms = dlqb_mono_ms();
  assert_true(ms * 1000 >= us - 1000 && ms * 1000 - us < 1000000);
}

static void test_sleep_sleeps_its_time(void **state) {
  (void)state;
  dlqb_stop_flag stop = 0;
  int64_t t0 = dlqb_mono_us();
  assert_false(dlqb_sleep_us(&stop, 120000));
  int64_t slept = dlqb_mono_us() - t0;
  assert_true(slept >= 120000);
  assert_true(slept < 2000000);
  /* No flag at all: a plain sleep. */
  t0 = dlqb_mono_us();
  assert_false(dlqb_sleep_us(NULL, 30000));
  assert_true(dlqb_mono_us() - t0 >= 30000);
}

static void test_sleep_nothing(void **state) {
  (void)state;
  dlqb_stop_flag stop = 0;
  int64_t t0 = dlqb_mono_us();
  assert_false(dlqb_sleep_us(&stop, 0));
  assert_false(dlqb_sleep_us(&stop, -5));
  assert_true(dlqb_mono_us() - t0 < 20000);
}

static void test_sleep_already_stopped(void **state) {
  (void)state;
  dlqb_stop_flag stop = 1;
  int64_t t0 = dlqb_mono_us();
  assert_true(dlqb_sleep_us(&stop, 10 * 1000000));
  assert_true(dlqb_sleep_us(&stop, 0));
  assert_true(dlqb_mono_us() - t0 < 20000);
}

static void *set_later(void *arg) {
  struct timespec ts = {0, 100 * 1000000L};
  nanosleep(&ts, NULL);
  *(dlqb_stop_flag *)arg = 1;
  return NULL;
}

static void test_sleep_ends_when_stopped(void **state) {
  (void)state;
  dlqb_stop_flag stop = 0;
  pthread_t t;
  int64_t t0 = dlqb_mono_us();
  assert_int_equal(pthread_create(&t, NULL, set_later, &stop), 0);
  assert_true(dlqb_sleep_us(&stop, 30 * 1000000));
  int64_t slept = dlqb_mono_us() - t0;
  pthread_join(t, NULL);
  assert_true(slept >= 100000);
  /* Within a step or so of the flag, not the 30 s asked for. */
  assert_true(slept < 100000 + 10 * DLQB_SLEEP_STEP_US);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_clocks_agree_with_the_host),
      cmocka_unit_test(test_sleep_sleeps_its_time),
      cmocka_unit_test(test_sleep_nothing),
      cmocka_unit_test(test_sleep_already_stopped),
      cmocka_unit_test(test_sleep_ends_when_stopped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Shared by the fuzz targets: a crash-on-failure check that survives
 * NDEBUG, and a check that error text is one printable UTF-8 line. */
#ifndef DLQB_FUZZ_COMMON_H
#define DLQB_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/envelope.h"
#include "dlqb/text.h"

#define FUZZ_CHECK(cond)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* True when s (NUL-terminated, within cap bytes) is valid UTF-8 without
 * control characters: sanitising it must leave it unchanged. */
static inline int fuzz_printable_line(const char *s, size_t cap) {
  size_t len = strnlen(s, cap);
  if (len == cap) return 0; /* not terminated */
  char copy[2048];
  if (len >= sizeof copy) return 0;
  size_t n = dlqb_text_sanitize(copy, sizeof copy, s, len);
  return n == len && memcmp(copy, s, len) == 0;
}

#endif

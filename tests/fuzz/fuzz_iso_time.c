/* libFuzzer target: ISO-8601 UTC times (first_seen_at) and text sanitising.
 * Contracts checked: a parsed time formats back to the same instant;
 * sanitised text is valid printable UTF-8, never longer than the buffer. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/calendar.h"
#include "dlqb/text.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Exact-size copy, unterminated: the parser takes a length. */
  char *text = malloc(size ? size : 1);
  FUZZ_CHECK(text != NULL);
  memcpy(text, data, size);
  int64_t ms = 0;
  if (dlqb_iso_time_parse(text, size, &ms) == DLQB_OK) {
    char buf[DLQB_ISO_TIME_MAX];
    dlqb_iso_time(ms, buf, sizeof buf);
    int64_t again = -1;
    FUZZ_CHECK(dlqb_iso_time_parse(buf, strlen(buf), &again) == DLQB_OK);
    FUZZ_CHECK(again == ms);
  }
  /* Any epoch value formats within the buffer. */
  if (size >= 8) {
    int64_t v;
    memcpy(&v, data, sizeof v);
    /* Keep to years 0..9999, the range the format can spell. */
    v %= INT64_C(253402300800000);
    if (v < 0) v = -v;
    char buf[DLQB_ISO_TIME_MAX];
    dlqb_iso_time(v, buf, sizeof buf);
    int64_t again = -1;
    FUZZ_CHECK(dlqb_iso_time_parse(buf, strlen(buf), &again) == DLQB_OK && again == v);
  }
  size_t cap = size > 0 ? (size_t)(data[0] % 80) : 0;
  char *out = malloc(cap ? cap : 1);
  FUZZ_CHECK(out != NULL);
  size_t n = dlqb_text_sanitize(out, cap, text, size);
  if (cap > 0) {
    FUZZ_CHECK(n < cap && out[n] == '\0' && strlen(out) == n);
    FUZZ_CHECK(fuzz_printable_line(out, cap));
  } else {
    FUZZ_CHECK(n == 0);
  }
  free(out);
  free(text);
  return 0;
}

/* libFuzzer target: duration parsing and formatting.
 * Contracts checked: a parsed duration is at most 100 years and formats to
 * text that parses back to the same value; a list parse never writes more
 * than max entries and leaves *count alone on failure; errors are one line. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/duration.h"
#include "fuzz_common.h"

#define MAX_MS (UINT64_C(36500) * UINT64_C(86400000))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  FUZZ_CHECK(text != NULL);
  memcpy(text, data, size);
  text[size] = '\0';
  dlqb_error err;
  memset(&err, 0, sizeof err);

  uint64_t ms = 0;
  if (dlqb_duration_parse(text, &ms, &err) == DLQB_OK) {
    FUZZ_CHECK(ms <= MAX_MS);
    char buf[64], again_buf[64];
    dlqb_duration_format(ms, buf, sizeof buf);
    uint64_t again = 0;
    FUZZ_CHECK(dlqb_duration_parse(buf, &again, &err) == DLQB_OK);
    FUZZ_CHECK(again == ms);
    dlqb_duration_format(again, again_buf, sizeof again_buf);
    FUZZ_CHECK(strcmp(buf, again_buf) == 0);
  } else {
    FUZZ_CHECK(err.msg[0] != '\0' && strchr(err.msg, '\n') == NULL);
  }

  /* Formatting any value into any buffer size stays in bounds. */
  if (size >= 9) {
    uint64_t v;
    memcpy(&v, data, sizeof v);
    size_t len = data[8] % 24;
    char *small = malloc(len ? len : 1);
    FUZZ_CHECK(small != NULL);
    dlqb_duration_format(v, small, len);
    if (len > 0) FUZZ_CHECK(memchr(small, '\0', len) != NULL);
    free(small);
  }

  uint64_t list[4] = {0};
  size_t count = 99;
  memset(&err, 0, sizeof err);
  if (dlqb_duration_parse_list(text, list, 4, &count, &err) == DLQB_OK) {
    FUZZ_CHECK(count >= 1 && count <= 4);
    for (size_t i = 0; i < count; i++) FUZZ_CHECK(list[i] > 0 && list[i] <= MAX_MS);
  } else {
    FUZZ_CHECK(count == 99);
    FUZZ_CHECK(err.msg[0] != '\0' && strchr(err.msg, '\n') == NULL);
  }
  free(text);
  return 0;
}

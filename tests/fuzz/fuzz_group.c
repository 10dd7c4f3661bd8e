/* libFuzzer target: failure group templates and ids (dlqb/group.h).
 * Contracts checked: the template of any bytes is one printable UTF-8 line
 * that fits its buffer; the same input gives the same template and id; a
 * smaller buffer gives a prefix of the larger one's template; a group id is
 * 12 lower-case hex digits; the aggregator's counts add up. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/group.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  char a[DLQB_GROUP_TEMPLATE_MAX], b[DLQB_GROUP_TEMPLATE_MAX];
  size_t n = dlqb_group_normalize(a, sizeof a, text, size);
  FUZZ_CHECK(n < sizeof a && strlen(a) == n);
  FUZZ_CHECK(fuzz_printable_line(a, sizeof a));
  FUZZ_CHECK(dlqb_group_normalize(b, sizeof b, text, size) == n && strcmp(a, b) == 0);

  size_t cap = size > 0 ? 1 + data[0] % 64 : 1;
  char *small = malloc(cap);
  FUZZ_CHECK(small != NULL);
  size_t m = dlqb_group_normalize(small, cap, text, size);
  FUZZ_CHECK(m < cap && strlen(small) == m && m <= n && memcmp(small, a, m) == 0);
  free(small);

  /* The input as an item's texts: reason and source_system from a split. */
  dlqb_item it;
  memset(&it, 0, sizeof it);
  size_t cut = size / 3;
  dlqb_text_sanitize(it.dlq_reason, sizeof it.dlq_reason, text, cut);
  dlqb_text_sanitize(it.source_system, sizeof it.source_system, text + cut, cut);
  dlqb_text_sanitize(it.last_error, sizeof it.last_error, text + 2 * cut, size - 2 * cut);
  char id[DLQB_GROUP_ID_BUF], again[DLQB_GROUP_ID_BUF];
  dlqb_group_of(&it, id, b, sizeof b);
  FUZZ_CHECK(dlqb_group_id_valid(id));
  for (size_t i = 0; i < DLQB_GROUP_ID_LEN; i++) FUZZ_CHECK(id[i] < 'A' || id[i] > 'F');
  dlqb_group_of(&it, again, NULL, 0);
  FUZZ_CHECK(strcmp(id, again) == 0);

  dlqb_groups *g = dlqb_groups_new(2);
  FUZZ_CHECK(g != NULL);
  for (size_t i = 0; i < 4 && i < size; i++) {
    it.last_error[0] = (char)('a' + data[i] % 4);
    dlqb_groups_add(g, &it, 0);
  }
  dlqb_groups_sort(g);
  uint64_t sum = dlqb_groups_other(g)->count;
  for (size_t i = 0; i < dlqb_groups_count(g); i++) sum += dlqb_groups_at(g, i)->count;
  FUZZ_CHECK(sum == dlqb_groups_total(g) && dlqb_groups_count(g) <= 2);
  FUZZ_CHECK(fuzz_printable_line(dlqb_groups_count(g) ? dlqb_groups_at(g, 0)->sample : "", 1024));
  dlqb_groups_free(g);
  return 0;
}

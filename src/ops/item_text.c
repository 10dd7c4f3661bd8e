/* How an item's times and identity read to a person, the same on a
 * terminal and a page. */
#include <stdio.h>
#include <string.h>

#include "dlqb/envelope.h"
#include "dlqb/ops.h"

char *ops_age_text(bool known, uint64_t age_ms, char *buf, size_t len) {
  if (!known) {
    snprintf(buf, len, "?");
    return buf;
  }
  uint64_t s = age_ms / 1000;
  if (s < 60) snprintf(buf, len, "%llus", (unsigned long long)s);
  else if (s < 3600)
    snprintf(buf, len, "%llum%llus", (unsigned long long)(s / 60), (unsigned long long)(s % 60));
  else if (s < 86400)
    snprintf(buf, len, "%lluh%llum", (unsigned long long)(s / 3600),
             (unsigned long long)(s % 3600 / 60));
  else
    snprintf(buf, len, "%llud%lluh", (unsigned long long)(s / 86400),
             (unsigned long long)(s % 86400 / 3600));
  return buf;
}

char *ops_left_text(const dlqb_deadline *d, char *buf, size_t len) {
  if (d->kind == DLQB_DEADLINE_NONE) {
    snprintf(buf, len, "-");
  } else if (d->kind == DLQB_DEADLINE_UNKNOWN) {
    snprintf(buf, len, "?");
  } else {
    char t[32];
    uint64_t ms = d->left_ms >= 0 ? (uint64_t)d->left_ms : (uint64_t)0 - (uint64_t)d->left_ms;
    snprintf(buf, len, "%s%s", d->left_ms < 0 ? "-" : "", ops_age_text(true, ms, t, sizeof t));
  }
  return buf;
}

bool ops_profile_has(const dlqb_profile *pr, const char *header) {
  return dlqb_profile_field(pr, header) >= 0;
}

bool ops_profile_is_dsr(const dlqb_profile *pr) {
  return strcmp(pr->fields[0].name, DLQB_H_REQUEST_ID) == 0 &&
         strcmp(pr->fields[1].name, DLQB_H_SOURCE_SYSTEM) == 0;
}

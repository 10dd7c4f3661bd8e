/* ISO-8601 UTC time as text and back, on a proleptic Gregorian calendar
 * (H. Hinnant's day algorithms): no timegm, time zone or locale is
 * involved. Pure: callers read the clock (dlqb/clock.h) and pass the time in. */
#include "dlqb/calendar.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int64_t dlqb_days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

void dlqb_civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
  z += 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  *d = (int)(doy - (153 * mp + 2) / 5 + 1);
  *m = (int)(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

int dlqb_days_in_month(int64_t y, int m) {
  static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : days[m - 1];
}

char *dlqb_iso_time(int64_t epoch_ms, char *buf, size_t len) {
  int64_t days = epoch_ms / DLQB_MS_PER_DAY, rem = epoch_ms % DLQB_MS_PER_DAY, y = 0;
  int m = 0, d = 0;
  if (buf == NULL || len == 0) return buf;
  if (rem < 0) { /* floor division: times before 1970 count back from midnight */
    rem += DLQB_MS_PER_DAY;
    days--;
  }
  dlqb_civil_from_days(days, &y, &m, &d);
  snprintf(buf, len, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02d.%03dZ", y, m, d, (int)(rem / 3600000),
           (int)(rem / 60000 % 60), (int)(rem / 1000 % 60), (int)(rem % 1000));
  return buf;
}

/* Reads exactly n digits at text[*pos]. */
static bool read_digits(const char *text, size_t len, size_t *pos, size_t n, int *out) {
  int v = 0;
  if (len - *pos < n) return false;
  for (size_t i = 0; i < n; i++) {
    char c = text[*pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *pos += n;
  *out = v;
  return true;
}

static bool read_char(const char *text, size_t len, size_t *pos, char c) {
  if (*pos >= len || text[*pos] != c) return false;
  (*pos)++;
  return true;
}

/* The optional ".fraction": 1 to 9 digits, kept to milliseconds. */
static bool read_fraction(const char *text, size_t len, size_t *pos, int *ms) {
  size_t digits = 0;
  *ms = 0;
  if (!read_char(text, len, pos, '.')) return true;
  while (*pos < len && text[*pos] >= '0' && text[*pos] <= '9') {
    if (digits < 3) *ms = *ms * 10 + (text[*pos] - '0');
    digits++;
    (*pos)++;
  }
  for (size_t i = digits; i < 3; i++) *ms *= 10;
  return digits >= 1 && digits <= 9;
}

static bool read_utc_suffix(const char *text, size_t len, size_t pos) {
  if (len - pos == 1) return text[pos] == 'Z';
  return len - pos == 6 && memcmp(text + pos, "+00:00", 6) == 0;
}

dlqb_status dlqb_iso_time_parse(const char *text, size_t len, int64_t *epoch_ms) {
  size_t pos = 0;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, ms = 0;
  if (text == NULL || epoch_ms == NULL) return DLQB_EINVAL;
  bool ok = read_digits(text, len, &pos, 4, &y) && read_char(text, len, &pos, '-') &&
            read_digits(text, len, &pos, 2, &mo) && read_char(text, len, &pos, '-') &&
            read_digits(text, len, &pos, 2, &d) && read_char(text, len, &pos, 'T') &&
            read_digits(text, len, &pos, 2, &h) && read_char(text, len, &pos, ':') &&
            read_digits(text, len, &pos, 2, &mi) && read_char(text, len, &pos, ':') &&
            read_digits(text, len, &pos, 2, &s) && read_fraction(text, len, &pos, &ms) &&
            read_utc_suffix(text, len, pos);
  if (!ok || mo < 1 || mo > 12 || d < 1 || d > dlqb_days_in_month(y, mo) || h > 23 || mi > 59 ||
      s > 59)
    return DLQB_EINVAL;
  *epoch_ms = dlqb_days_from_civil(y, mo, d) * DLQB_MS_PER_DAY +
              (int64_t)((h * 60 + mi) * 60 + s) * 1000 + ms;
  return DLQB_OK;
}

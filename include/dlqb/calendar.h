/* The calendar: epoch milliseconds as ISO-8601 UTC text and back, and the
 * day count of a date. Pure (no clock, no time zone, no locale, no
 * allocation): the clocks are in dlqb/clock.h. */
#ifndef DLQB_CALENDAR_H
#define DLQB_CALENDAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"

#define DLQB_ISO_TIME_MAX 40
#define DLQB_MS_PER_DAY   INT64_C(86400000)

/* Days since 1970-01-01 of the proleptic Gregorian date y-m-d (m 1..12,
 * d 1..31; negative before 1970). */
int64_t dlqb_days_from_civil(int64_t y, int m, int d);

/* The date of a day count (the inverse of dlqb_days_from_civil), and the
 * days of month m (1..12) of year y. */
void dlqb_civil_from_days(int64_t days, int64_t *y, int *m, int *d);
int dlqb_days_in_month(int64_t y, int m);

/* Formats epoch milliseconds as ISO-8601 UTC with milliseconds
 * ("2026-11-30T05:09:48.123Z"). buf needs DLQB_ISO_TIME_MAX bytes. */
char *dlqb_iso_time(int64_t epoch_ms, char *buf, size_t len);

/* Parses ISO-8601 UTC ("Z" or "+00:00", optional fraction) into epoch ms. */
dlqb_status dlqb_iso_time_parse(const char *text, size_t len, int64_t *epoch_ms);

#endif

/* Durations as operators write them: "250ms", "5s", "2m", "1h", "7d".
 * Pure functions, no I/O. */
#ifndef DLQB_DURATION_H
#define DLQB_DURATION_H

#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"

/* Parses one duration: a non-negative decimal integer followed by a unit
 * (ms, s, m, h, d); surrounding whitespace is allowed, anything else is not.
 * Stores milliseconds in *out_ms. Rejects empty text, a missing or unknown
 * unit, signs, fractions and values above 100 years (36500d). Units are
 * lower case. The error quotes the text but names no source, e.g.
 * "'5x' has an unknown unit (use ms, s, m, h or d)": callers prefix it. */
dlqb_status dlqb_duration_parse(const char *text, uint64_t *out_ms, dlqb_error *err);

/* Parses a comma-separated list of durations ("1s,5s,30s"), each > 0, into
 * out[0..*count). At most max entries; more is an error, and so are an
 * empty list and an empty item ("1s,,5s", "1s,"). Whitespace around items
 * is allowed. On failure *count is unchanged but out may be overwritten. */
dlqb_status dlqb_duration_parse_list(const char *text, uint64_t *out, size_t max, size_t *count,
                                     dlqb_error *err);

/* Writes the shortest exact form of ms ("1500ms", "5s", "2m", "1h", "3d";
 * 0 is "0s") into buf (NUL-terminated, truncated to len; nothing is written
 * when len is 0). Returns buf. For ms up to 100 years the text parses back to ms. */
char *dlqb_duration_format(uint64_t ms, char *buf, size_t len);

#endif

/* Text as errors, logs and the audit trail may show it: well-formed UTF-8
 * without control characters, cut short without splitting a character, so
 * whatever a producer or an operator sent stays on one line. Pure, no
 * allocation. */
#ifndef DLQB_TEXT_H
#define DLQB_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#define DLQB_QUOTE_MAX 64                       /* bytes of input an error may quote */
#define DLQB_QUOTE_BUF (DLQB_QUOTE_MAX + 3 + 1) /* plus "..." and the NUL */

/* Copies at most cap-1 bytes of src (len bytes, maybe not NUL-terminated;
 * NULL counts as empty) into dst, replacing invalid UTF-8 and control
 * characters (C0, DEL, C1) with '?', never cutting a character in half.
 * Returns bytes written (excluding the NUL). */
size_t dlqb_text_sanitize(char *dst, size_t cap, const char *src, size_t len);

/* True when p[0..len) is well-formed UTF-8; *has_control tells whether it
 * holds a control character. */
bool dlqb_text_utf8_valid(const char *p, size_t len, bool *has_control);

/* p[0..len) as an error message may quote it: sanitised, at most
 * DLQB_QUOTE_MAX bytes, "..." marking a cut. Returns buf. */
const char *dlqb_text_quote(char buf[DLQB_QUOTE_BUF], const char *p, size_t len);

/* src (len bytes) as a table cell of `width` columns: sanitised as
 * dlqb_text_sanitize does, cut to width-1 characters and an ellipsis
 * ("\u2026") when longer, padded with spaces to width when pad. Each
 * character counts as one column (a wide CJK character takes two on most
 * terminals: such a row may run a column or two long). width 0: no cut, no
 * padding. Never writes past cap (NUL included). Sets *cut when it cut
 * (cut may be NULL). Returns bytes written. */
size_t dlqb_text_cell(char *dst, size_t cap, const char *src, size_t len, size_t width, bool pad,
                      bool *cut);

/* The first occurrence of needle (n bytes) in hay (len bytes), or NULL;
 * neither needs a NUL (memmem, which glibc offers only with _GNU_SOURCE). */
const char *dlqb_text_find(const char *hay, size_t len, const char *needle, size_t n);

/* Edit distance between two short words (insertions, deletions,
 * substitutions, and swaps of two neighbours: "insepct" is 1 from
 * "inspect"), for "did you mean" suggestions. Words longer than
 * DLQB_TEXT_DISTANCE_MAX bytes are SIZE_MAX apart from everything. */
#define DLQB_TEXT_DISTANCE_MAX 47
size_t dlqb_text_distance(const char *a, const char *b);

#endif

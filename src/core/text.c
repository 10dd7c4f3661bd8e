/* Text as errors, logs and the audit trail may show it: see dlqb/text.h. */
#include "dlqb/text.h"

#include <stdint.h>
#include <string.h>

/* Length of the well-formed UTF-8 sequence at s (1..4), or 0 when it is
 * malformed, overlong, a surrogate or beyond U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t len, uint32_t *cp) {
  unsigned char b0 = s[0];
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  uint32_t c;
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    c = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    c = b0 & 0x0Fu;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    c = b0 & 0x07u;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (len < n || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0u) != 0x80u) return 0;
    c = (c << 6) | (s[i] & 0x3Fu);
  }
  *cp = c;
  return n;
}

/* C0, DEL and C1: characters that would break log lines or the UI. */
static bool is_control(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F);
}

/* Sanitises like dlqb_text_sanitize and also reports how many source bytes
 * were consumed, so a quote can tell whether the text was cut short. */
static size_t sanitize(char *dst, size_t cap, const char *src, size_t len, size_t *consumed) {
  const unsigned char *s = (const unsigned char *)src;
  size_t in = 0, out = 0;
  if (src == NULL) len = 0;
  while (in < len) {
    if (s[in] >= 0x20 && s[in] < 0x7f) { /* printable ASCII, the common case */
      if (out + 1 > cap - 1) break;
      dst[out++] = (char)s[in++];
      continue;
    }
    uint32_t cp = 0;
    size_t n = utf8_seq(s + in, len - in, &cp);
    bool bad = n == 0 || is_control(cp); /* one '?' per bad byte or control character */
    size_t need = bad ? 1 : n;
    if (out + need > cap - 1) break;
    if (bad) dst[out] = '?';
    else memcpy(dst + out, s + in, n);
    in += n == 0 ? 1 : n;
    out += need;
  }
  dst[out] = '\0';
  if (consumed != NULL) *consumed = in;
  return out;
}

size_t dlqb_text_sanitize(char *dst, size_t cap, const char *src, size_t len) {
  if (dst == NULL || cap == 0) return 0;
  return sanitize(dst, cap, src, len, NULL);
}

bool dlqb_text_utf8_valid(const char *p, size_t len, bool *has_control) {
  const unsigned char *s = (const unsigned char *)p;
  size_t i = 0;
  *has_control = false;
  while (i < len) {
    uint32_t cp = 0;
    size_t n = utf8_seq(s + i, len - i, &cp);
    if (n == 0) return false;
    if (is_control(cp)) *has_control = true;
    i += n;
  }
  return true;
}

const char *dlqb_text_quote(char buf[DLQB_QUOTE_BUF], const char *p, size_t len) {
  size_t used = 0;
  size_t n = sanitize(buf, DLQB_QUOTE_MAX + 1, p, len, &used);
  if (used < len) memcpy(buf + n, "...", 4);
  return buf;
}

size_t dlqb_text_cell(char *dst, size_t cap, const char *src, size_t len, size_t width, bool pad,
                      bool *cut) {
  const unsigned char *s = (const unsigned char *)src;
  if (cut != NULL) *cut = false;
  if (dst == NULL || cap == 0) return 0;
  if (src == NULL) len = 0;
  /* Characters of src: one per valid sequence or per bad byte. */
  size_t chars = 0;
  for (size_t in = 0; in < len; chars++) {
    uint32_t cp;
    size_t n = utf8_seq(s + in, len - in, &cp);
    in += n == 0 ? 1 : n;
  }
  bool cutting = width > 0 && chars > width;
  size_t keep = cutting ? width - 1 : chars, in = 0, out = 0, shown = 0;
  for (; shown < keep && in < len; shown++) {
    uint32_t cp = 0;
    size_t n = utf8_seq(s + in, len - in, &cp);
    bool bad = n == 0 || is_control(cp);
    size_t need = bad ? 1 : n;
    if (out + need > cap - 1) break;
    if (bad) dst[out] = '?';
    else memcpy(dst + out, s + in, n);
    in += n == 0 ? 1 : n;
    out += need;
  }
  if (cutting && out + 3 <= cap - 1) {
    memcpy(dst + out, "\xe2\x80\xa6", 3); /* U+2026 */
    out += 3;
    shown++;
    if (cut != NULL) *cut = true;
  }
  for (; pad && shown < width && out + 1 <= cap - 1; shown++) dst[out++] = ' ';
  dst[out] = '\0';
  return out;
}

const char *dlqb_text_find(const char *hay, size_t len, const char *needle, size_t n) {
  if (n == 0) return hay;
  for (size_t i = 0; n <= len && i <= len - n; i++)
    if (hay[i] == needle[0] && memcmp(hay + i, needle, n) == 0) return hay + i;
  return NULL;
}

size_t dlqb_text_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > DLQB_TEXT_DISTANCE_MAX || lb > DLQB_TEXT_DISTANCE_MAX) return SIZE_MAX;
  /* Three rows of the table (a transposition looks two rows back), not
   * the whole of it: 1 KiB of stack, not 18. Row i lives at d[i % 3]. */
  size_t d[3][DLQB_TEXT_DISTANCE_MAX + 1];
  for (size_t j = 0; j <= lb; j++) d[0][j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t *row = d[i % 3], *up = d[(i - 1) % 3], *up2 = d[(i + 1) % 3];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t best = up[j - 1] + (a[i - 1] != b[j - 1]);
      if (up[j] + 1 < best) best = up[j] + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && up2[j - 2] + 1 < best)
        best = up2[j - 2] + 1;
      row[j] = best;
    }
  }
  return d[la % 3][lb];
}

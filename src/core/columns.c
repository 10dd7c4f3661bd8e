/* Which columns of a text table fit a terminal's width: see dlqb/columns.h. */
#include "dlqb/columns.h"

#include <string.h>

/* Columns the shown cells before the last one take, spaces included. */
static size_t used_before_last(const dlqb_column *cols, size_t n, const dlqb_layout *l) {
  size_t used = 0;
  for (size_t i = 0; i + 1 < n; i++)
    if (l->shown[i]) used += cols[i].width + 1;
  return used;
}

void dlqb_columns_fit(const dlqb_column *cols, size_t n, size_t total, size_t min_last,
                      size_t want_last, dlqb_layout *out) {
  memset(out, 0, sizeof *out);
  if (n > DLQB_COLUMNS_MAX) n = DLQB_COLUMNS_MAX;
  if (n == 0) return;
  for (size_t i = 0; i < n; i++) {
    out->shown[i] = true;
    out->width[i] = cols[i].width;
  }
  out->width[n - 1] = 0;
  if (total == 0) return;
  for (;;) {
    size_t used = used_before_last(cols, n, out);
    if (used + want_last <= total) break;
    size_t drop = n;
    for (size_t i = 0; i + 1 < n; i++)
      if (out->shown[i] && cols[i].keep > 0 && (drop == n || cols[i].keep > cols[drop].keep))
        drop = i;
    if (drop == n) break; /* only the required ones are left */
    out->shown[drop] = false;
  }
  size_t used = used_before_last(cols, n, out);
  out->width[n - 1] = total > used + min_last ? total - used : min_last;
}

void dlqb_columns_fit_map(const dlqb_column *cols, const int *map, size_t n, size_t total,
                          size_t min_last, size_t want_last, dlqb_layout *out) {
  dlqb_layout l;
  dlqb_columns_fit(cols, n, total, min_last, want_last, &l);
  memset(out, 0, sizeof *out);
  for (size_t k = 0; k < n; k++) {
    out->shown[map[k]] = l.shown[k];
    out->width[map[k]] = l.width[k];
  }
}

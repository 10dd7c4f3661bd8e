/* Which columns of a text table fit a terminal's width, and how wide each
 * is: the item tables of inspect and the dry runs. Pure, no allocation. */
#ifndef DLQB_COLUMNS_H
#define DLQB_COLUMNS_H

#include <stdbool.h>
#include <stddef.h>

#define DLQB_COLUMNS_MAX 16

typedef struct {
  const char *name; /* the header */
  size_t width;     /* columns of its cell when the width is bounded */
  int keep;         /* 0: always shown; 1, 2...: dropped first the higher it is */
} dlqb_column;

typedef struct {
  bool shown[DLQB_COLUMNS_MAX];
  size_t width[DLQB_COLUMNS_MAX]; /* 0: not cut, not padded (the last column) */
} dlqb_layout;

/* Lays out n columns (at most DLQB_COLUMNS_MAX; the last one takes what is
 * left, at least min_last columns) in `total` terminal columns, one space
 * between cells. total 0: no limit: every column shown, padded to its width
 * but never cut, the last one unpadded. Otherwise the optional columns
 * (keep > 0) are dropped, highest keep first, until the last column has
 * at least want_last columns or only the required ones are left; the last
 * column gets the rest (never less than min_last: a terminal too narrow
 * for the required columns gets rows longer than total). */
void dlqb_columns_fit(const dlqb_column *cols, size_t n, size_t total, size_t min_last,
                      size_t want_last, dlqb_layout *out);
/* The same for n of a table's columns (a profile without some): cols[k] is
 * the table's column map[k], and out is indexed by the table's columns
 * (the ones not given are not shown). */
void dlqb_columns_fit_map(const dlqb_column *cols, const int *map, size_t n, size_t total,
                          size_t min_last, size_t want_last, dlqb_layout *out);

#endif

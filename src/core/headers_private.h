/* What the header-table modules of the core (headers.c, envelope.c,
 * xdeath.c, rewrite.c) share to read tables alike. Private to src/core. */
#ifndef DLQB_HEADERS_PRIVATE_H
#define DLQB_HEADERS_PRIVATE_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>

/* Entries of t that may be read: 0 for NULL, no entries or a negative count. */
size_t dlqb__table_count(const amqp_table_t *t);

/* True when b holds exactly the bytes of the C string s. */
bool dlqb__bytes_eq(amqp_bytes_t b, const char *s);

/* Text of a string-kinded value; false for any other kind. A NULL pointer
 * (only legal with length 0) reads as "". v must not be NULL. */
bool dlqb__field_text(const amqp_field_value_t *v, const char **p, size_t *len);

/* Narrows p[0..*len) to drop leading and trailing ASCII whitespace. */
void dlqb__trim(const char **p, size_t *len);

#endif

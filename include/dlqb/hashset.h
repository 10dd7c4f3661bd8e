/* A set of byte-string keys, each optionally carrying a small fixed-size
 * value: the one hash table of the core (the completion ledger's pairs,
 * audit reconcile's per-message counts). Open addressing with linear
 * probing over a power-of-two table at most half full; removal shifts the
 * following run back instead of leaving tombstones, so the table stays as
 * small as what it holds. Keys and values are owned by the set. Pure (no
 * I/O); not thread-safe. */
#ifndef DLQB_HASHSET_H
#define DLQB_HASHSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DLQB_HASHSET_MIN_CAP 64

typedef struct dlqb_hashset dlqb_hashset;

/* An empty set whose entries each carry value_size bytes (0: keys only).
 * NULL when out of memory. */
dlqb_hashset *dlqb_hashset_new(size_t value_size);
void dlqb_hashset_free(dlqb_hashset *s); /* NULL-safe */

/* Keys are len bytes at key: they may be empty and may hold NUL bytes (a
 * NULL key is allowed with len 0). The set keeps a copy followed by a NUL,
 * so a key without NULs reads back as a C string. */

/* The value of key, or NULL when absent. With value_size 0 the pointer is
 * still non-NULL for a key held. */
void *dlqb_hashset_get(const dlqb_hashset *s, const void *key, size_t len);

/* Adds key unless held. Returns its value (zero-filled when new), which
 * stays at that address until the key is removed or the set cleared or
 * freed; *added (may be NULL) tells whether it was new. NULL when out of
 * memory, the set unchanged. */
void *dlqb_hashset_add(dlqb_hashset *s, const void *key, size_t len, bool *added);

/* The set's copy of the key whose value this is (a pointer from get or
 * add), NUL-terminated; valid as long as the value. */
const char *dlqb_hashset_key(const dlqb_hashset *s, const void *value);

/* Removes key and its value; false when it was not held. */
bool dlqb_hashset_remove(dlqb_hashset *s, const void *key, size_t len);

/* Keys held, and the table's slots (for tests of the growth policy). */
size_t dlqb_hashset_size(const dlqb_hashset *s);
size_t dlqb_hashset_capacity(const dlqb_hashset *s);

/* Removes every key (the capacity stays). */
void dlqb_hashset_clear(dlqb_hashset *s);

/* Calls fn for every key held, in table order (a given sequence of adds
 * and removes always gives the same order). fn must not add or remove. */
void dlqb_hashset_each(const dlqb_hashset *s,
                       void (*fn)(void *ctx, const char *key, size_t len, void *value), void *ctx);

/* The hash a key's home slot comes from: 64-bit FNV-1a over its bytes
 * (tests use it to build collisions). */
uint64_t dlqb_hashset_hash(const void *key, size_t len);

#endif

/* Building AMQP header tables by hand for unit tests: values of each kind,
 * and a small table that keys can be added to, replaced in or removed from.
 * The strings are not copied: they must outlive the table. */
#ifndef DLQB_TEST_TABLE_BUILDER_H
#define DLQB_TEST_TABLE_BUILDER_H

#include <amqp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define TB_MAX_ENTRIES 64

typedef struct {
  amqp_table_entry_t e[TB_MAX_ENTRIES];
  amqp_table_t t;
} tb_table;

static inline amqp_field_value_t tb_kind(uint8_t kind) {
  amqp_field_value_t v;
  memset(&v, 0, sizeof v);
  v.kind = kind;
  return v;
}

static inline amqp_field_value_t tb_str(const char *s) {
  amqp_field_value_t v = tb_kind(AMQP_FIELD_KIND_UTF8);
  v.value.bytes.bytes = (void *)s;
  v.value.bytes.len = strlen(s);
  return v;
}

static inline amqp_field_value_t tb_i64(int64_t n) {
  amqp_field_value_t v = tb_kind(AMQP_FIELD_KIND_I64);
  v.value.i64 = n;
  return v;
}

static inline amqp_field_value_t tb_table_value(amqp_table_entry_t *entries, int n) {
  amqp_field_value_t v = tb_kind(AMQP_FIELD_KIND_TABLE);
  v.value.table.entries = entries;
  v.value.table.num_entries = n;
  return v;
}

static inline amqp_field_value_t tb_array(amqp_field_value_t *items, int n) {
  amqp_field_value_t v = tb_kind(AMQP_FIELD_KIND_ARRAY);
  v.value.array.entries = items;
  v.value.array.num_entries = n;
  return v;
}

static inline amqp_table_entry_t tb_entry(const char *key, amqp_field_value_t v) {
  amqp_table_entry_t e;
  e.key.bytes = (void *)key;
  e.key.len = strlen(key);
  e.value = v;
  return e;
}

static inline void tb_clear(tb_table *h) {
  memset(h, 0, sizeof *h);
  h->t.entries = h->e;
}

/* Appends key (a repeat is allowed: it tests duplicates). False when full. */
static inline bool tb_add(tb_table *h, const char *key, amqp_field_value_t v) {
  if (h->t.num_entries >= TB_MAX_ENTRIES) return false;
  h->e[h->t.num_entries++] = tb_entry(key, v);
  return true;
}

/* The value of key in t, or NULL. */
static inline const amqp_field_value_t *tb_get(const amqp_table_t *t, const char *key) {
  for (int i = 0; i < t->num_entries; i++)
    if (t->entries[i].key.len == strlen(key) &&
        memcmp(t->entries[i].key.bytes, key, strlen(key)) == 0)
      return &t->entries[i].value;
  return NULL;
}

#endif

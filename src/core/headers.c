/* Header-table access shared by every module that reads AMQP headers. */
#include "dlqb/headers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/calendar.h"
#include "dlqb/text.h"
#include "headers_private.h"

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

void dlqb__trim(const char **p, size_t *len) {
  while (*len > 0 && is_space((*p)[0])) {
    (*p)++;
    (*len)--;
  }
  while (*len > 0 && is_space((*p)[*len - 1])) (*len)--;
}

bool dlqb__bytes_eq(amqp_bytes_t b, const char *s) {
  size_t n = strlen(s);
  return b.len == n && (n == 0 || (b.bytes != NULL && memcmp(b.bytes, s, n) == 0));
}

size_t dlqb__table_count(const amqp_table_t *t) {
  if (t == NULL || t->entries == NULL || t->num_entries <= 0) return 0;
  return (size_t)t->num_entries;
}

const amqp_field_value_t *dlqb_header_find(const amqp_table_t *t, const char *key) {
  size_t n = dlqb__table_count(t);
  for (size_t i = 0; i < n; i++)
    if (dlqb__bytes_eq(t->entries[i].key, key)) return &t->entries[i].value;
  return NULL;
}

bool dlqb__field_text(const amqp_field_value_t *v, const char **p, size_t *len) {
  if (v->kind != AMQP_FIELD_KIND_UTF8 && v->kind != AMQP_FIELD_KIND_BYTES) return false;
  *p = v->value.bytes.bytes;
  *len = *p == NULL ? 0 : v->value.bytes.len;
  if (*p == NULL) *p = "";
  return true;
}

bool dlqb_field_text(const amqp_field_value_t *v, amqp_bytes_t *out) {
  const char *p = NULL;
  size_t len = 0;
  if (v == NULL || !dlqb__field_text(v, &p, &len)) return false;
  out->bytes = (void *)p;
  out->len = len;
  return true;
}

bool dlqb_field_int(const amqp_field_value_t *v, int64_t *out) {
  if (v == NULL) return false;
  switch (v->kind) {
  case AMQP_FIELD_KIND_I8: *out = v->value.i8; return true;
  case AMQP_FIELD_KIND_U8: *out = v->value.u8; return true;
  case AMQP_FIELD_KIND_I16: *out = v->value.i16; return true;
  case AMQP_FIELD_KIND_U16: *out = v->value.u16; return true;
  case AMQP_FIELD_KIND_I32: *out = v->value.i32; return true;
  case AMQP_FIELD_KIND_U32: *out = v->value.u32; return true;
  case AMQP_FIELD_KIND_I64: *out = v->value.i64; return true;
  case AMQP_FIELD_KIND_U64:
    if (v->value.u64 > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)v->value.u64;
    return true;
  case AMQP_FIELD_KIND_UTF8:
  case AMQP_FIELD_KIND_BYTES: {
    /* The management UI sends every header as a string. */
    char buf[24];
    amqp_bytes_t b = v->value.bytes;
    if (b.len == 0 || b.len >= sizeof buf) return false;
    memcpy(buf, b.bytes, b.len);
    buf[b.len] = '\0';
    for (size_t i = 0; i < b.len; i++)
      if (buf[i] < '0' || buf[i] > '9') return false;
    errno = 0;
    long long n = strtoll(buf, NULL, 10);
    if (errno != 0) return false;
    *out = n;
    return true;
  }
  default: return false;
  }
}

bool dlqb_header_id(const amqp_table_t *t, const char *key, char *dst, size_t cap) {
  const amqp_field_value_t *v = dlqb_header_find(t, key);
  const char *p = NULL;
  size_t len = 0;
  if (v == NULL || !dlqb__field_text(v, &p, &len)) return false;
  dlqb__trim(&p, &len);
  if (len == 0) return false;
  dlqb_text_sanitize(dst, cap, p, len);
  return true;
}

bool dlqb_header_time(const amqp_table_t *t, const char *key, int64_t *epoch_ms) {
  const char *p = NULL;
  size_t len = 0;
  const amqp_field_value_t *v = dlqb_header_find(t, key);
  return v != NULL && dlqb__field_text(v, &p, &len) &&
         dlqb_iso_time_parse(p, len, epoch_ms) == DLQB_OK;
}

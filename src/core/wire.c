/* How many bytes AMQP 0-9-1 takes for a header table and a message's
 * content header, computed from the decoded values, so the bridge knows
 * before it publishes whether the broker could take the frame; and the
 * bytes that identify a delivery. Pure. */
#include "dlqb/wire.h"

#include <stdlib.h>
#include <string.h>

static size_t value_size(const amqp_field_value_t *v, unsigned depth, bool *ok);

static size_t table_size(const amqp_table_t *t, unsigned depth, bool *ok) {
  size_t n = 4; /* the table's length */
  for (int i = 0; t != NULL && i < t->num_entries && *ok; i++)
    n += 1 + t->entries[i].key.len + value_size(&t->entries[i].value, depth, ok);
  return n;
}

static size_t value_size(const amqp_field_value_t *v, unsigned depth, bool *ok) {
  /* Deeper than any frame could hold: the walk itself must stay bounded. */
  if (depth > DLQB_WIRE_MAX_DEPTH) {
    *ok = false;
    return 0;
  }
  size_t n = 1; /* the type octet */
  switch (v->kind) {
  case AMQP_FIELD_KIND_BOOLEAN:
  case AMQP_FIELD_KIND_I8:
  case AMQP_FIELD_KIND_U8: return n + 1;
  case AMQP_FIELD_KIND_I16:
  case AMQP_FIELD_KIND_U16: return n + 2;
  case AMQP_FIELD_KIND_I32:
  case AMQP_FIELD_KIND_U32:
  case AMQP_FIELD_KIND_F32: return n + 4;
  case AMQP_FIELD_KIND_I64:
  case AMQP_FIELD_KIND_U64:
  case AMQP_FIELD_KIND_F64:
  case AMQP_FIELD_KIND_TIMESTAMP: return n + 8;
  case AMQP_FIELD_KIND_DECIMAL: return n + 5;
  case AMQP_FIELD_KIND_UTF8:
  case AMQP_FIELD_KIND_BYTES: return n + 4 + v->value.bytes.len;
  case AMQP_FIELD_KIND_VOID: return n;
  case AMQP_FIELD_KIND_ARRAY: {
    n += 4;
    for (int i = 0; i < v->value.array.num_entries && *ok; i++)
      n += value_size(&v->value.array.entries[i], depth + 1, ok);
    return n;
  }
  case AMQP_FIELD_KIND_TABLE: return n + table_size(&v->value.table, depth + 1, ok);
  default: *ok = false; return 0;
  }
}

size_t dlqb_wire_table_size(const amqp_table_t *t) {
  bool ok = true;
  size_t n = table_size(t, 0, &ok);
  return ok ? n : SIZE_MAX;
}

static size_t shortstr(const amqp_basic_properties_t *p, amqp_flags_t flag, amqp_bytes_t s) {
  return (p->_flags & flag) ? 1 + s.len : 0;
}

size_t dlqb_wire_content_header_size(const amqp_basic_properties_t *p) {
  size_t n = 2 + 2 + 8 + 2; /* class, weight, body size, property flags */
  n += shortstr(p, AMQP_BASIC_CONTENT_TYPE_FLAG, p->content_type);
  n += shortstr(p, AMQP_BASIC_CONTENT_ENCODING_FLAG, p->content_encoding);
  if (p->_flags & AMQP_BASIC_HEADERS_FLAG) {
    size_t t = dlqb_wire_table_size(&p->headers);
    if (t == SIZE_MAX) return SIZE_MAX;
    n += t;
  }
  if (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG) n += 1;
  if (p->_flags & AMQP_BASIC_PRIORITY_FLAG) n += 1;
  n += shortstr(p, AMQP_BASIC_CORRELATION_ID_FLAG, p->correlation_id);
  n += shortstr(p, AMQP_BASIC_REPLY_TO_FLAG, p->reply_to);
  n += shortstr(p, AMQP_BASIC_EXPIRATION_FLAG, p->expiration);
  n += shortstr(p, AMQP_BASIC_MESSAGE_ID_FLAG, p->message_id);
  if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) n += 8;
  n += shortstr(p, AMQP_BASIC_TYPE_FLAG, p->type);
  n += shortstr(p, AMQP_BASIC_USER_ID_FLAG, p->user_id);
  n += shortstr(p, AMQP_BASIC_APP_ID_FLAG, p->app_id);
  n += shortstr(p, AMQP_BASIC_CLUSTER_ID_FLAG, p->cluster_id);
  return n;
}

bool dlqb_wire_fits(const amqp_basic_properties_t *p, size_t frame_max) {
  size_t n = dlqb_wire_content_header_size(p);
  /* A frame adds its type, channel, size and end octet: 8 bytes. */
  return n != SIZE_MAX && frame_max > DLQB_WIRE_FRAME_OVERHEAD &&
         n <= frame_max - DLQB_WIRE_FRAME_OVERHEAD;
}

/* ---- identity ---------------------------------------------------------- */

typedef struct {
  dlqb_wire_feed fn;
  void *ctx;
} feeder;

static void feed(const feeder *f, const void *data, size_t len) { f->fn(f->ctx, data, len); }

static void feed_u8(const feeder *f, uint8_t b) { feed(f, &b, 1); }

/* A length, then the bytes: no two texts feed alike. */
static void feed_bytes(const feeder *f, amqp_bytes_t b) {
  uint64_t len = b.len;
  feed(f, &len, sizeof len);
  if (b.len > 0) feed(f, b.bytes, b.len);
}

static bool feed_value(const feeder *f, const amqp_field_value_t *v, unsigned depth);

static bool feed_entry(const feeder *f, const amqp_table_entry_t *e, unsigned depth) {
  feed_bytes(f, e->key);
  return feed_value(f, &e->value, depth);
}

static bool feed_value(const feeder *f, const amqp_field_value_t *v, unsigned depth) {
  if (depth > DLQB_WIRE_IDENTITY_MAX_DEPTH) return false;
  feed_u8(f, v->kind);
  switch (v->kind) {
  case AMQP_FIELD_KIND_BOOLEAN: feed(f, &v->value.boolean, sizeof v->value.boolean); return true;
  case AMQP_FIELD_KIND_I8: feed(f, &v->value.i8, 1); return true;
  case AMQP_FIELD_KIND_U8: feed(f, &v->value.u8, 1); return true;
  case AMQP_FIELD_KIND_I16: feed(f, &v->value.i16, 2); return true;
  case AMQP_FIELD_KIND_U16: feed(f, &v->value.u16, 2); return true;
  case AMQP_FIELD_KIND_I32: feed(f, &v->value.i32, 4); return true;
  case AMQP_FIELD_KIND_U32: feed(f, &v->value.u32, 4); return true;
  case AMQP_FIELD_KIND_F32: feed(f, &v->value.f32, 4); return true;
  case AMQP_FIELD_KIND_I64: feed(f, &v->value.i64, 8); return true;
  case AMQP_FIELD_KIND_U64:
  case AMQP_FIELD_KIND_TIMESTAMP: feed(f, &v->value.u64, 8); return true;
  case AMQP_FIELD_KIND_F64: feed(f, &v->value.f64, 8); return true;
  case AMQP_FIELD_KIND_DECIMAL:
    feed_u8(f, v->value.decimal.decimals);
    feed(f, &v->value.decimal.value, sizeof v->value.decimal.value);
    return true;
  case AMQP_FIELD_KIND_UTF8:
  case AMQP_FIELD_KIND_BYTES: feed_bytes(f, v->value.bytes); return true;
  case AMQP_FIELD_KIND_VOID: return true;
  case AMQP_FIELD_KIND_ARRAY: {
    uint64_t n = v->value.array.num_entries > 0 ? (uint64_t)v->value.array.num_entries : 0;
    feed(f, &n, sizeof n);
    for (uint64_t i = 0; i < n; i++)
      if (!feed_value(f, &v->value.array.entries[i], depth + 1)) return false;
    return true;
  }
  case AMQP_FIELD_KIND_TABLE: {
    uint64_t n = v->value.table.num_entries > 0 ? (uint64_t)v->value.table.num_entries : 0;
    feed(f, &n, sizeof n);
    for (uint64_t i = 0; i < n; i++)
      if (!feed_entry(f, &v->value.table.entries[i], depth + 1)) return false;
    return true;
  }
  default: return false;
  }
}

static bool rewritten_on_redelivery(amqp_bytes_t key) {
  static const char *const names[] = DLQB_WIRE_REDELIVERY_HEADERS;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (key.len == strlen(names[i]) && memcmp(key.bytes, names[i], key.len) == 0) return true;
  return false;
}

/* A property's tag (its flag's bit number) before its value. */
static void feed_str(const feeder *f, const amqp_basic_properties_t *p, amqp_flags_t flag,
                     uint8_t tag, amqp_bytes_t s) {
  if (!(p->_flags & flag)) return;
  feed_u8(f, tag);
  feed_bytes(f, s);
}

/* Top-level headers in key order (ties in their order): a quorum queue
 * hands a redelivered message its headers sorted by key (measured on
 * 3.10.8: the first delivery in the order published, the next sorted;
 * 4.0.5 sorts every delivery). */
typedef struct {
  amqp_bytes_t key;
  int i;
} keyed;

static int by_key(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  size_t n = x->key.len < y->key.len ? x->key.len : y->key.len;
  int c = n > 0 ? memcmp(x->key.bytes, y->key.bytes, n) : 0;
  if (c != 0) return c;
  if (x->key.len != y->key.len) return x->key.len < y->key.len ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

/* The headers, whether flagged or not (a quorum queue adds a table for
 * x-delivery-count to a message that had none): entry by entry in key
 * order, each marked, ending with a mark of its own. */
static bool feed_headers(const feeder *f, const amqp_basic_properties_t *p) {
  const amqp_table_t *h = (p->_flags & AMQP_BASIC_HEADERS_FLAG) ? &p->headers : NULL;
  size_t n = h != NULL && h->num_entries > 0 ? (size_t)h->num_entries : 0;
  keyed small[32]; /* a task's headers fit: no allocation per delivery */
  keyed *order = n <= sizeof small / sizeof *small ? small : malloc(n * sizeof *order);
  if (order == NULL) return false;
  size_t kept = 0;
  bool sorted = true;
  for (size_t i = 0; i < n; i++) {
    if (rewritten_on_redelivery(h->entries[i].key)) continue;
    order[kept] = (keyed){h->entries[i].key, (int)i};
    if (kept > 0 && by_key(&order[kept - 1], &order[kept]) > 0) sorted = false;
    kept++;
  }
  if (!sorted) qsort(order, kept, sizeof *order, by_key);
  bool ok = true;
  feed_u8(f, 13);
  for (size_t i = 0; ok && i < kept; i++) {
    feed_u8(f, 'e');
    ok = feed_entry(f, &h->entries[order[i].i], 0);
  }
  feed_u8(f, '.');
  if (order != small) free(order);
  return ok;
}

bool dlqb_wire_identity(const amqp_basic_properties_t *p, dlqb_wire_feed fn, void *ctx) {
  feeder f = {fn, ctx};
  feed_str(&f, p, AMQP_BASIC_CONTENT_TYPE_FLAG, 15, p->content_type);
  feed_str(&f, p, AMQP_BASIC_CONTENT_ENCODING_FLAG, 14, p->content_encoding);
  if (!feed_headers(&f, p)) return false;
  if (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG) {
    feed_u8(&f, 12);
    feed_u8(&f, p->delivery_mode);
  }
  if (p->_flags & AMQP_BASIC_PRIORITY_FLAG) {
    feed_u8(&f, 11);
    feed_u8(&f, p->priority);
  }
  feed_str(&f, p, AMQP_BASIC_CORRELATION_ID_FLAG, 10, p->correlation_id);
  feed_str(&f, p, AMQP_BASIC_REPLY_TO_FLAG, 9, p->reply_to);
  feed_str(&f, p, AMQP_BASIC_EXPIRATION_FLAG, 8, p->expiration);
  feed_str(&f, p, AMQP_BASIC_MESSAGE_ID_FLAG, 7, p->message_id);
  if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) {
    feed_u8(&f, 6);
    feed(&f, &p->timestamp, sizeof p->timestamp);
  }
  feed_str(&f, p, AMQP_BASIC_TYPE_FLAG, 5, p->type);
  feed_str(&f, p, AMQP_BASIC_USER_ID_FLAG, 4, p->user_id);
  feed_str(&f, p, AMQP_BASIC_APP_ID_FLAG, 3, p->app_id);
  feed_str(&f, p, AMQP_BASIC_CLUSTER_ID_FLAG, 2, p->cluster_id);
  return true;
}

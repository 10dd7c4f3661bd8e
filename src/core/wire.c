/* How many bytes AMQP 0-9-1 takes for a header table and a message's
 * content header, computed from the decoded values, so the bridge knows
 * before it publishes whether the broker could take the frame. Pure. */
#include "dlqb/wire.h"

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

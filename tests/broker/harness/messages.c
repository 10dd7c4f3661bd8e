/* The broker tests' harness (harness.h): th_msg: a message's properties and
 * headers, built, read, copied, to and from rabbitmq-c. */
#include "internal.h"

/* ---- messages --------------------------------------------------------- */

void th_msg_init(th_msg *m) {
  memset(m, 0, sizeof *m);
  m->delivery_mode = 2;
  init_amqp_pool(&m->pool, 4096);
}

void th_msg_release(th_msg *m) {
  if (m == NULL) return;
  free(m->body);
  m->body = NULL;
  m->body_len = 0;
  empty_amqp_pool(&m->pool);
}

void th_msg_reset(th_msg *m) {
  th_msg_release(m);
  th_msg_init(m);
}

int th_msg_set_body(th_msg *m, const void *data, size_t len) {
  free(m->body);
  m->body = NULL;
  m->body_len = 0;
  if (len == 0) return 0;
  m->body = malloc(len);
  if (m->body == NULL) return -1;
  memcpy(m->body, data, len);
  m->body_len = len;
  return 0;
}

static th_header *th__new_header(th_msg *m, const char *key) {
  if (m->nheaders >= TH_MAX_HEADERS) {
    th__say("too many headers");
    return NULL;
  }
  th_header *h = &m->headers[m->nheaders++];
  memset(h, 0, sizeof *h);
  th__copy(h->key, sizeof h->key, key, strlen(key));
  return h;
}

int th_msg_add_strn(th_msg *m, const char *key, const char *value, size_t len) {
  if (len >= TH_STR_MAX) {
    th__say("header %s: value too long for the harness", key);
    return -1;
  }
  th_header *h = th__new_header(m, key);
  if (h == NULL) return -1;
  h->type = TH_H_STR;
  memcpy(h->str, value, len);
  h->str[len] = '\0';
  h->str_len = len;
  return 0;
}

int th_msg_add_str(th_msg *m, const char *key, const char *value) {
  return th_msg_add_strn(m, key, value, strlen(value));
}

int th_msg_add_int(th_msg *m, const char *key, int64_t value) {
  th_header *h = th__new_header(m, key);
  if (h == NULL) return -1;
  h->type = TH_H_INT;
  h->num = value;
  return 0;
}

void th_msg_remove(th_msg *m, const char *key) {
  size_t kept = 0;
  for (size_t i = 0; i < m->nheaders; i++) {
    if (strcmp(m->headers[i].key, key) == 0) continue;
    if (kept != i) m->headers[kept] = m->headers[i];
    kept++;
  }
  m->nheaders = kept;
}

/* Index of the first header named key, or -1. */
static long th__find(const th_msg *m, const char *key) {
  for (size_t i = 0; i < m->nheaders; i++)
    if (strcmp(m->headers[i].key, key) == 0) return (long)i;
  return -1;
}

/* Makes key appear exactly once, at its first position (or appended), and
 * returns that header, cleared, for the caller to fill. */
static th_header *th__set_header(th_msg *m, const char *key) {
  long at = th__find(m, key);
  if (at < 0) return th__new_header(m, key);
  size_t kept = (size_t)at + 1;
  for (size_t i = kept; i < m->nheaders; i++) {
    if (strcmp(m->headers[i].key, key) == 0) continue;
    if (kept != i) m->headers[kept] = m->headers[i];
    kept++;
  }
  m->nheaders = kept;
  th_header *h = &m->headers[at];
  memset(h, 0, sizeof *h);
  th__copy(h->key, sizeof h->key, key, strlen(key));
  return h;
}

int th_msg_set_str(th_msg *m, const char *key, const char *value) {
  size_t len = strlen(value);
  if (len >= TH_STR_MAX) return -1;
  th_header *h = th__set_header(m, key);
  if (h == NULL) return -1;
  h->type = TH_H_STR;
  memcpy(h->str, value, len + 1);
  h->str_len = len;
  return 0;
}

int th_msg_set_int(th_msg *m, const char *key, int64_t value) {
  th_header *h = th__set_header(m, key);
  if (h == NULL) return -1;
  h->type = TH_H_INT;
  h->num = value;
  return 0;
}

const th_header *th_msg_find(const th_msg *m, const char *key) {
  long at = th__find(m, key);
  return at < 0 ? NULL : &m->headers[at];
}

int th_msg_count(const th_msg *m, const char *key) {
  int n = 0;
  for (size_t i = 0; i < m->nheaders; i++) n += strcmp(m->headers[i].key, key) == 0;
  return n;
}

const char *th_msg_str(const th_msg *m, const char *key) {
  const th_header *h = th_msg_find(m, key);
  return (h != NULL && h->type == TH_H_STR) ? h->str : NULL;
}

bool th_msg_int(const th_msg *m, const char *key, int64_t *out) {
  const th_header *h = th_msg_find(m, key);
  if (h == NULL || h->type != TH_H_INT) return false;
  *out = h->num;
  return true;
}

/* Clones one field value into pool (tables and arrays deeply). */
static int th__clone_value(const amqp_field_value_t *in, amqp_field_value_t *out,
                           amqp_pool_t *pool) {
  amqp_table_entry_t entry = {.key = amqp_cstring_bytes("v"), .value = *in};
  amqp_table_t one = {.num_entries = 1, .entries = &entry}, copy;
  if (amqp_table_clone(&one, &copy, pool) != AMQP_STATUS_OK) return -1;
  *out = copy.entries[0].value;
  return 0;
}

int th_msg_copy(th_msg *dst, const th_msg *src) {
  amqp_pool_t pool = dst->pool;
  unsigned char *body = dst->body;
  memcpy(dst, src, sizeof *dst);
  dst->pool = pool;
  dst->body = body;
  dst->body_len = 0;
  if (th_msg_set_body(dst, src->body, src->body_len) != 0) return -1;
  for (size_t i = 0; i < dst->nheaders; i++) {
    if (dst->headers[i].type != TH_H_OTHER) continue;
    if (th__clone_value(&src->headers[i].raw, &dst->headers[i].raw, &dst->pool) != 0) return -1;
  }
  return 0;
}

int th_msg_task(th_msg *m, const char *request_id) {
  char buf[TH_PROP_MAX];
  snprintf(m->message_id, sizeof m->message_id, "msg-%s", request_id);
  snprintf(m->content_type, sizeof m->content_type, "application/json");
  snprintf(m->app_id, sizeof m->app_id, "broker-tests");
  int n = snprintf(buf, sizeof buf, "{\"request_id\":\"%s\",\"subject\":\"user-42\"}", request_id);
  if (n < 0 || (size_t)n >= sizeof buf) return -1;
  if (th_msg_set_body(m, buf, (size_t)n) != 0 || th_msg_add_str(m, "request_id", request_id) != 0 ||
      th_msg_add_str(m, "source_system", "test-suite") != 0 ||
      th_msg_add_str(m, "legal_basis", "gdpr_art_17") != 0 ||
      th_msg_add_str(m, "action", "deletion") != 0)
    return -1;
  return 0;
}

/* Text of a string-like field value, or false. */
static bool th__field_bytes(const amqp_field_value_t *v, amqp_bytes_t *out) {
  if (v->kind != AMQP_FIELD_KIND_UTF8 && v->kind != AMQP_FIELD_KIND_BYTES) return false;
  *out = v->value.bytes;
  return true;
}

static bool th__field_int(const amqp_field_value_t *v, int64_t *out) {
  switch (v->kind) {
  case AMQP_FIELD_KIND_I8: *out = v->value.i8; return true;
  case AMQP_FIELD_KIND_U8: *out = v->value.u8; return true;
  case AMQP_FIELD_KIND_I16: *out = v->value.i16; return true;
  case AMQP_FIELD_KIND_U16: *out = v->value.u16; return true;
  case AMQP_FIELD_KIND_I32: *out = v->value.i32; return true;
  case AMQP_FIELD_KIND_U32: *out = v->value.u32; return true;
  case AMQP_FIELD_KIND_I64: *out = v->value.i64; return true;
  case AMQP_FIELD_KIND_U64: *out = (int64_t)v->value.u64; return true;
  case AMQP_FIELD_KIND_TIMESTAMP: *out = (int64_t)v->value.u64; return true;
  default: return false;
  }
}

/* Records x-death[0].reason and .queue. */
static void th__read_xdeath(th_msg *m, const amqp_field_value_t *v) {
  if (v->kind != AMQP_FIELD_KIND_ARRAY || v->value.array.num_entries < 1) return;
  const amqp_field_value_t *first = &v->value.array.entries[0];
  if (first->kind != AMQP_FIELD_KIND_TABLE) return;
  const amqp_table_t *t = &first->value.table;
  for (int i = 0; i < t->num_entries; i++) {
    amqp_bytes_t k = t->entries[i].key, s;
    if (!th__field_bytes(&t->entries[i].value, &s)) continue;
    if (k.len == 6 && memcmp(k.bytes, "reason", 6) == 0)
      th__copy(m->xdeath_reason, sizeof m->xdeath_reason, s.bytes, s.len);
    if (k.len == 5 && memcmp(k.bytes, "queue", 5) == 0)
      th__copy(m->xdeath_queue, sizeof m->xdeath_queue, s.bytes, s.len);
  }
}

static void th__prop(char *dst, amqp_flags_t flags, amqp_flags_t flag, amqp_bytes_t b) {
  if (flags & flag) th__copy(dst, TH_PROP_MAX, b.bytes, b.len);
}

/* Fills m (initialised, empty) from a received message. */
int th__from_amqp(th_msg *m, const amqp_basic_properties_t *p, amqp_bytes_t body) {
  th__prop(m->message_id, p->_flags, AMQP_BASIC_MESSAGE_ID_FLAG, p->message_id);
  th__prop(m->content_type, p->_flags, AMQP_BASIC_CONTENT_TYPE_FLAG, p->content_type);
  th__prop(m->correlation_id, p->_flags, AMQP_BASIC_CORRELATION_ID_FLAG, p->correlation_id);
  th__prop(m->app_id, p->_flags, AMQP_BASIC_APP_ID_FLAG, p->app_id);
  th__prop(m->type, p->_flags, AMQP_BASIC_TYPE_FLAG, p->type);
  th__prop(m->expiration, p->_flags, AMQP_BASIC_EXPIRATION_FLAG, p->expiration);
  th__prop(m->user_id, p->_flags, AMQP_BASIC_USER_ID_FLAG, p->user_id);
  m->has_timestamp = (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) != 0;
  m->timestamp = m->has_timestamp ? p->timestamp : 0;
  m->delivery_mode = (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG) ? p->delivery_mode : 0;
  if (th_msg_set_body(m, body.bytes, body.len) != 0) return -1;
  if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG)) return 0;

  amqp_table_t headers;
  if (amqp_table_clone(&p->headers, &headers, &m->pool) != AMQP_STATUS_OK) return -1;
  for (int i = 0; i < headers.num_entries; i++) {
    const amqp_table_entry_t *e = &headers.entries[i];
    char key[TH_KEY_MAX];
    th__copy(key, sizeof key, e->key.bytes, e->key.len);
    amqp_bytes_t s;
    int64_t num;
    int rc = 0;
    if (th__field_bytes(&e->value, &s)) {
      th_header *h = th__new_header(m, key);
      if (h == NULL) return -1;
      h->type = TH_H_STR;
      th__copy(h->str, sizeof h->str, s.bytes, s.len);
      h->str_len = s.len;
    } else if (e->value.kind == AMQP_FIELD_KIND_BOOLEAN) {
      th_header *h = th__new_header(m, key);
      if (h == NULL) return -1;
      h->type = TH_H_BOOL;
      h->num = e->value.value.boolean != 0;
    } else if (e->value.kind != AMQP_FIELD_KIND_TIMESTAMP && th__field_int(&e->value, &num)) {
      rc = th_msg_add_int(m, key, num);
    } else {
      th_header *h = th__new_header(m, key);
      if (h == NULL) return -1;
      h->type = TH_H_OTHER;
      h->raw = e->value;
      if (strcmp(key, "x-death") == 0) th__read_xdeath(m, &e->value);
    }
    if (rc != 0) return -1;
  }
  return 0;
}

/* Builds the AMQP properties of m; entries must hold TH_MAX_HEADERS. */
void th__to_amqp(const th_msg *m, amqp_basic_properties_t *p, amqp_table_entry_t *entries) {
  memset(p, 0, sizeof *p);
  struct {
    const char *value;
    amqp_flags_t flag;
    amqp_bytes_t *field;
  } strs[] = {
      {m->message_id, AMQP_BASIC_MESSAGE_ID_FLAG, &p->message_id},
      {m->content_type, AMQP_BASIC_CONTENT_TYPE_FLAG, &p->content_type},
      {m->correlation_id, AMQP_BASIC_CORRELATION_ID_FLAG, &p->correlation_id},
      {m->app_id, AMQP_BASIC_APP_ID_FLAG, &p->app_id},
      {m->type, AMQP_BASIC_TYPE_FLAG, &p->type},
      {m->expiration, AMQP_BASIC_EXPIRATION_FLAG, &p->expiration},
      {m->user_id, AMQP_BASIC_USER_ID_FLAG, &p->user_id},
  };
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    if (strs[i].value[0] == '\0') continue;
    p->_flags |= strs[i].flag;
    *strs[i].field = amqp_cstring_bytes(strs[i].value);
  }
  if (m->has_timestamp) {
    p->_flags |= AMQP_BASIC_TIMESTAMP_FLAG;
    p->timestamp = m->timestamp;
  }
  if (m->delivery_mode != 0) {
    p->_flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
    p->delivery_mode = m->delivery_mode;
  }
  if (m->nheaders == 0) return;
  for (size_t i = 0; i < m->nheaders; i++) {
    const th_header *h = &m->headers[i];
    amqp_table_entry_t *e = &entries[i];
    e->key = amqp_cstring_bytes(h->key);
    switch (h->type) {
    case TH_H_STR:
      e->value.kind = AMQP_FIELD_KIND_UTF8;
      e->value.value.bytes = (amqp_bytes_t){.len = h->str_len, .bytes = (void *)h->str};
      break;
    case TH_H_INT:
      e->value.kind = AMQP_FIELD_KIND_I64;
      e->value.value.i64 = h->num;
      break;
    case TH_H_BOOL:
      e->value.kind = AMQP_FIELD_KIND_BOOLEAN;
      e->value.value.boolean = (amqp_boolean_t)h->num;
      break;
    case TH_H_OTHER: e->value = h->raw; break;
    }
  }
  p->_flags |= AMQP_BASIC_HEADERS_FLAG;
  p->headers = (amqp_table_t){.num_entries = (int)m->nheaders, .entries = entries};
}

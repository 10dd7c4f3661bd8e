/* libFuzzer target: the retry envelope. The input is decoded by a small,
 * bounded decoder of our own into an amqp_table_t (every field kind, nested
 * tables and arrays, duplicate keys, NULL byte pointers), which is then fed
 * to dlqb_envelope_parse, dlqb_failure_read and dlqb_headers_apply, and the
 * documented contracts of each are checked on the result.
 *
 * Input format, read front to back (running out of bytes ends everything
 * early, still well-formed):
 *   table  := count:u8 (mod 24) entry*
 *   entry  := keysel:u8 key? value
 *             keysel < 160 picks a well-known key (the envelope's, x-death,
 *             reason, queue), otherwise a key of (keysel-160) raw bytes
 *   value  := kind:u8 (mod 19) payload
 *   string := len:u16le (mod 4096, or 102400 when the high bit is set) bytes
 * Every string gets its own exact-size allocation so that ASan sees any read
 * past its end. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/envelope.h"
#include "dlqb/rewrite.h"
#include "dlqb/xdeath.h"
#include "fuzz_common.h"

#define MAX_DEPTH  110  /* deeper than the 100 levels the hostile-input test sends */
#define MAX_NODES  4096 /* values in one input */
#define MAX_ALLOCS 8192

typedef struct {
  const uint8_t *p;
  size_t left;
  void *allocs[MAX_ALLOCS];
  size_t nallocs;
  size_t nodes;
} reader;

static void *r_alloc(reader *r, size_t n) {
  if (n == 0 || r->nallocs >= MAX_ALLOCS) return NULL;
  void *m = malloc(n);
  if (m != NULL) r->allocs[r->nallocs++] = m;
  return m;
}

static uint8_t r_u8(reader *r) {
  if (r->left == 0) return 0;
  r->left--;
  return *r->p++;
}

static uint64_t r_uint(reader *r, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; i++) v |= (uint64_t)r_u8(r) << (8 * i);
  return v;
}

/* Bytes copied into an exact-size allocation; len 0 gives {0, NULL}. */
static amqp_bytes_t r_bytes(reader *r, size_t len) {
  amqp_bytes_t b = {0, NULL};
  if (len == 0) return b;
  unsigned char *m = r_alloc(r, len);
  if (m == NULL) return b;
  size_t have = len < r->left ? len : r->left;
  memcpy(m, r->p, have);
  /* Short input: pad with spaces, which is what trimming code cares about. */
  memset(m + have, ' ', len - have);
  r->p += have;
  r->left -= have;
  b.len = len;
  b.bytes = m;
  return b;
}

static amqp_bytes_t r_string(reader *r) {
  uint16_t sel = (uint16_t)r_uint(r, 2);
  size_t len = (sel & 0x8000u) ? 102400u : (size_t)(sel % 4096u);
  /* Only huge when the input has bytes left to pay for it. */
  if (len > 4096 && r->left < 64) len = r->left;
  return r_bytes(r, len);
}

static const char *const well_known[] = {
    "request_id", "source_system", "legal_basis",  "action",       "attempt", "max_attempts",
    "last_error", "first_seen_at", "replay_count", "worker_error", "x-death", "reason",
    "queue",      "dlq_reason",    "dlq_at",       "count",
};
#define NKNOWN (sizeof well_known / sizeof well_known[0])

static const char *const well_known_values[] = {
    "gdpr_art_17",
    "deletion",
    "rejected",
    "delivery_limit",
    "expired",
    "maxlen",
    "2026-11-30T05:09:48Z",
    "2026-11-30T05:09:48.123+00:00",
    "  42 ",
    "req-1",
    "dsr.work",
    "2000-01-01T00:00:00Z",
    "2200-12-31T23:59:59.999999999Z",
    "1000000",
    "1000001",
    "",
};
#define NVALUES (sizeof well_known_values / sizeof well_known_values[0])

static void r_table(reader *r, amqp_table_t *t, int depth);
static void r_array(reader *r, amqp_array_t *a, int depth);

static void r_value(reader *r, amqp_field_value_t *v, int depth) {
  memset(v, 0, sizeof *v);
  r->nodes++;
  uint8_t sel = r_u8(r);
  switch (sel % 20) {
  case 0:
    v->kind = AMQP_FIELD_KIND_BOOLEAN;
    v->value.boolean = r_u8(r);
    break;
  case 1:
    v->kind = AMQP_FIELD_KIND_I8;
    v->value.i8 = (int8_t)r_u8(r);
    break;
  case 2:
    v->kind = AMQP_FIELD_KIND_U8;
    v->value.u8 = r_u8(r);
    break;
  case 3:
    v->kind = AMQP_FIELD_KIND_I16;
    v->value.i16 = (int16_t)r_uint(r, 2);
    break;
  case 4:
    v->kind = AMQP_FIELD_KIND_U16;
    v->value.u16 = (uint16_t)r_uint(r, 2);
    break;
  case 5:
    v->kind = AMQP_FIELD_KIND_I32;
    v->value.i32 = (int32_t)r_uint(r, 4);
    break;
  case 6:
    v->kind = AMQP_FIELD_KIND_U32;
    v->value.u32 = (uint32_t)r_uint(r, 4);
    break;
  case 7:
    v->kind = AMQP_FIELD_KIND_I64;
    v->value.i64 = (int64_t)r_uint(r, 8);
    break;
  case 8:
    v->kind = AMQP_FIELD_KIND_U64;
    v->value.u64 = r_uint(r, 8);
    break;
  case 9: {
    uint32_t bits = (uint32_t)r_uint(r, 4);
    v->kind = AMQP_FIELD_KIND_F32;
    memcpy(&v->value.f32, &bits, sizeof bits);
    break;
  }
  case 10: {
    uint64_t bits = r_uint(r, 8);
    v->kind = AMQP_FIELD_KIND_F64;
    memcpy(&v->value.f64, &bits, sizeof bits);
    break;
  }
  case 11:
    v->kind = AMQP_FIELD_KIND_DECIMAL;
    v->value.decimal.decimals = r_u8(r);
    v->value.decimal.value = (uint32_t)r_uint(r, 4);
    break;
  case 12:
    v->kind = AMQP_FIELD_KIND_UTF8;
    v->value.bytes = r_string(r);
    break;
  case 13:
    v->kind = AMQP_FIELD_KIND_BYTES;
    v->value.bytes = r_string(r);
    break;
  case 14:
    v->kind = AMQP_FIELD_KIND_ARRAY;
    if (depth < MAX_DEPTH) r_array(r, &v->value.array, depth + 1);
    break;
  case 15:
    v->kind = AMQP_FIELD_KIND_TIMESTAMP;
    v->value.u64 = r_uint(r, 8);
    break;
  case 16:
    v->kind = AMQP_FIELD_KIND_TABLE;
    if (depth < MAX_DEPTH) r_table(r, &v->value.table, depth + 1);
    break;
  case 17: v->kind = AMQP_FIELD_KIND_VOID; break;
  case 18: {
    /* A string that is likely to matter: an enum value, a time, a number. */
    const char *s = well_known_values[r_u8(r) % NVALUES];
    v->kind = AMQP_FIELD_KIND_UTF8;
    v->value.bytes = r_bytes(r, 0);
    size_t n = strlen(s);
    if (n > 0) {
      char *m = r_alloc(r, n);
      if (m != NULL) {
        memcpy(m, s, n);
        v->value.bytes.len = n;
        v->value.bytes.bytes = m;
      }
    }
    break;
  }
  default:
    /* A kind byte the library does not define. */
    v->kind = (uint8_t)r_u8(r);
    v->value.u64 = r_uint(r, 8);
    break;
  }
}

static void r_key(reader *r, amqp_bytes_t *key) {
  uint8_t sel = r_u8(r);
  if (sel < 160) {
    const char *k = well_known[sel % NKNOWN];
    size_t n = strlen(k);
    char *m = r_alloc(r, n);
    if (m != NULL) memcpy(m, k, n);
    key->len = m ? n : 0;
    key->bytes = m;
  } else {
    *key = r_bytes(r, (size_t)(sel - 160));
  }
}

static void r_table(reader *r, amqp_table_t *t, int depth) {
  size_t n = r_u8(r) % 24;
  t->num_entries = 0;
  t->entries = NULL;
  if (n == 0 || r->left == 0 || r->nodes >= MAX_NODES) return;
  t->entries = r_alloc(r, n * sizeof *t->entries);
  if (t->entries == NULL) return;
  for (size_t i = 0; i < n; i++) {
    r_key(r, &t->entries[i].key);
    if (r->nodes >= MAX_NODES) {
      memset(&t->entries[i].value, 0, sizeof t->entries[i].value);
      t->entries[i].value.kind = AMQP_FIELD_KIND_VOID;
    } else {
      r_value(r, &t->entries[i].value, depth);
    }
  }
  t->num_entries = (int)n;
}

static void r_array(reader *r, amqp_array_t *a, int depth) {
  size_t n = r_u8(r) % 8;
  a->num_entries = 0;
  a->entries = NULL;
  if (n == 0 || r->left == 0 || r->nodes >= MAX_NODES) return;
  a->entries = r_alloc(r, n * sizeof *a->entries);
  if (a->entries == NULL) return;
  for (size_t i = 0; i < n; i++) r_value(r, &a->entries[i], depth);
  a->num_entries = (int)n;
}

static bool key_is(amqp_bytes_t k, const char *s) {
  size_t n = strlen(s);
  return k.len == n && (n == 0 || memcmp(k.bytes, s, n) == 0);
}

static void check_envelope(const amqp_table_t *t) {
  dlqb_envelope env;
  dlqb_error why;
  memset(&why, 0, sizeof why);
  dlqb_status st = dlqb_envelope_parse(t, 5, &env, &why);
  FUZZ_CHECK(st == DLQB_OK || st == DLQB_EINVAL);
  if (st != DLQB_OK) {
    /* One printable line that quotes at most 64 bytes of a value. */
    FUZZ_CHECK(why.msg[0] != '\0');
    FUZZ_CHECK(fuzz_printable_line(why.msg, sizeof why.msg));
    FUZZ_CHECK(strlen(why.msg) < 400);
    return;
  }
  size_t rid = strlen(env.request_id), src = strlen(env.source_system);
  FUZZ_CHECK(rid > 0 && rid <= DLQB_ID_MAX && src > 0 && src <= DLQB_ID_MAX);
  FUZZ_CHECK(fuzz_printable_line(env.request_id, sizeof env.request_id));
  FUZZ_CHECK(fuzz_printable_line(env.source_system, sizeof env.source_system));
  FUZZ_CHECK(env.request_id[0] != ' ' && env.request_id[rid - 1] != ' ');
  FUZZ_CHECK(env.attempt >= 0 && env.attempt <= 1000000);
  FUZZ_CHECK(env.max_attempts >= 1 && env.max_attempts <= 1000000);
  FUZZ_CHECK(env.replay_count >= 0 && env.replay_count <= 1000000);
  FUZZ_CHECK(!env.has_last_error || fuzz_printable_line(env.last_error, sizeof env.last_error));
  if (env.has_first_seen_at) {
    /* 2000-01-01 .. 2201-01-01 */
    FUZZ_CHECK(env.first_seen_at_ms >= INT64_C(946684800000) &&
               env.first_seen_at_ms < INT64_C(7289654400000));
  }
  FUZZ_CHECK(strcmp(env.legal_basis, "gdpr_art_15") == 0 ||
             strcmp(env.legal_basis, "gdpr_art_17") == 0 ||
             strcmp(env.legal_basis, "ccpa_1798_105") == 0 ||
             strcmp(env.legal_basis, "ccpa_1798_100") == 0);
  FUZZ_CHECK(strcmp(env.action, "access") == 0 || strcmp(env.action, "deletion") == 0 ||
             strcmp(env.action, "rectification") == 0);
}

static void check_failure(const amqp_table_t *t) {
  dlqb_failure f;
  dlqb_failure_read(t, &f);
  FUZZ_CHECK(f.kind >= DLQB_FAIL_REJECTED && f.kind <= DLQB_FAIL_REPORTED);
  FUZZ_CHECK(fuzz_printable_line(f.queue, sizeof f.queue));
  FUZZ_CHECK(!f.has_worker_error || (f.worker_error[0] != '\0' &&
                                     fuzz_printable_line(f.worker_error, sizeof f.worker_error)));
}

/* The rewrite the router does, then the documented shape of the result. */
static void check_apply(const amqp_table_t *t) {
  static const dlqb_hset sets[] = {
      {"last_error", DLQB_HSET_STRING, "invalid envelope: fuzz", 0},
      {"attempt", DLQB_HSET_INT, NULL, 3},
      {"worker_error", DLQB_HSET_REMOVE, NULL, 0},
      {"dlq_reason", DLQB_HSET_STRING, "invalid_envelope", 0},
      {"attempt", DLQB_HSET_INT, NULL, 4}, /* a later set of the same key wins */
  };
  const size_t nsets = sizeof sets / sizeof sets[0];
  size_t nin = t->num_entries > 0 ? (size_t)t->num_entries : 0;
  size_t cap = nin + nsets;
  amqp_table_entry_t *scratch = malloc(cap * sizeof *scratch);
  FUZZ_CHECK(scratch != NULL);
  amqp_table_t out;
  FUZZ_CHECK(dlqb_headers_apply(t, sets, nsets, scratch, cap, &out) == DLQB_OK);
  FUZZ_CHECK(out.num_entries >= 0 && (size_t)out.num_entries <= cap);
  int last_error = 0, attempt = 0, worker_error = 0, dlq_reason = 0;
  for (int i = 0; i < out.num_entries; i++) {
    const amqp_table_entry_t *e = &out.entries[i];
    if (key_is(e->key, "last_error")) {
      last_error++;
      FUZZ_CHECK(e->value.kind == AMQP_FIELD_KIND_UTF8);
    } else if (key_is(e->key, "attempt")) {
      attempt++;
      FUZZ_CHECK(e->value.kind == AMQP_FIELD_KIND_I64 && e->value.value.i64 == 4);
    } else if (key_is(e->key, "worker_error")) {
      worker_error++;
    } else if (key_is(e->key, "dlq_reason")) {
      dlq_reason++;
    }
  }
  FUZZ_CHECK(last_error == 1 && attempt == 1 && worker_error == 0 && dlq_reason == 1);
  /* Too small a scratch is an error, never an overflow. */
  if (cap > 1) {
    amqp_table_t small;
    dlqb_status st =
        dlqb_headers_apply(t, sets, nsets, scratch, (size_t)out.num_entries - 1, &small);
    FUZZ_CHECK(st == DLQB_EINVAL);
  }
  /* The rewritten table parses again without trouble. */
  check_envelope(&out);
  free(scratch);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader *r = calloc(1, sizeof *r);
  if (r == NULL) return 0;
  r->p = data;
  r->left = size;
  amqp_table_t t;
  r_table(r, &t, 0);
  check_envelope(&t);
  check_failure(&t);
  check_apply(&t);
  /* NULL and empty tables are allowed everywhere. */
  if (size == 0) {
    dlqb_envelope env;
    dlqb_error why;
    FUZZ_CHECK(dlqb_envelope_parse(NULL, 5, &env, &why) == DLQB_EINVAL);
    check_failure(NULL);
  }
  for (size_t i = 0; i < r->nallocs; i++) free(r->allocs[i]);
  free(r);
  return 0;
}

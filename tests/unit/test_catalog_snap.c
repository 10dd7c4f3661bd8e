/* Unit tests of the catalog's snapshots in the stream
 * (dlqb/catalog_stream.h, dlqb/catalog.h): a chunk's bytes round trip and
 * bounded refusals; a whole fold over an in-memory stream: not cut (from
 * event 0, snapshots ignored), cut (from the newest complete snapshot,
 * with moves interleaved with its chunks applied after it, in order), a
 * writer killed mid-snapshot, two writers interleaved, a garbled chunk, a
 * snapshot whose as-of marker was cut too; when the daemon writes one. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/catalog_check.h"
#include "dlqb/catalog_stream.h"
#include "dlqb/names.h"

#define DLQ    "dsr.dlq.manual"
#define REVIEW "compliance_review"
#define MAXMSG 256

static const char *const queues[] = {DLQ, REVIEW};

/* ---- an in-memory stream -------------------------------------------------- */

typedef struct {
  int64_t offset;
  amqp_basic_properties_t props;
  amqp_table_entry_t h[8];
  char id[64], snap[64], queue[64];
  char *op;
  unsigned char *body;
  size_t len;
} msg;

typedef struct {
  msg m[MAXMSG];
  size_t n;
  int64_t next; /* the next offset */
  int64_t cut;  /* the first offset still there */
  int reads;
} stream;

static amqp_table_entry_t s_entry(const char *key, const char *v) {
  return (amqp_table_entry_t){
      .key = amqp_cstring_bytes(key),
      .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes(v)}};
}
static amqp_table_entry_t i_entry(const char *key, int64_t v) {
  return (amqp_table_entry_t){.key = amqp_cstring_bytes(key),
                              .value = {.kind = AMQP_FIELD_KIND_I64, .value.i64 = v}};
}

static msg *append(stream *s) {
  assert_true(s->n < MAXMSG);
  msg *m = &s->m[s->n++];
  memset(m, 0, sizeof *m);
  m->offset = s->next++;
  m->props._flags = AMQP_BASIC_HEADERS_FLAG;
  m->props.headers.entries = m->h;
  return m;
}

static void ev(stream *s, const char *op, const char *queue, const char *id) {
  msg *m = append(s);
  snprintf(m->id, sizeof m->id, "%s", id);
  snprintf(m->queue, sizeof m->queue, "%s", queue);
  m->h[0] = s_entry(DLQB_H_CATALOG_OP, op);
  m->h[1] = s_entry(DLQB_H_CATALOG_QUEUE, m->queue);
  m->props.headers.num_entries = 2;
  m->props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
  m->props.message_id = amqp_cstring_bytes(m->id);
}

static int64_t mark(stream *s) {
  msg *m = append(s);
  snprintf(m->id, sizeof m->id, "mark-%lld", (long long)m->offset);
  m->h[0] = s_entry(DLQB_H_CATALOG_MARKER, m->id);
  m->props.headers.num_entries = 1;
  return m->offset;
}

static void snap_msg(stream *s, const char *op, const char *id, int64_t as_of, int64_t chunk,
                     const char *queue, int64_t count, const void *body, size_t len) {
  msg *m = append(s);
  snprintf(m->snap, sizeof m->snap, "%s", id);
  m->h[0] = s_entry(DLQB_H_CATALOG_OP, op);
  m->h[1] = s_entry(DLQB_H_CATALOG_SNAP, m->snap);
  m->h[2] = i_entry(DLQB_H_CATALOG_SNAP_OF, as_of);
  m->h[3] = i_entry(DLQB_H_CATALOG_SNAP_CHUNK, chunk);
  m->props.headers.num_entries = 4;
  if (queue != NULL) {
    snprintf(m->queue, sizeof m->queue, "%s", queue);
    m->h[4] = s_entry(DLQB_H_CATALOG_QUEUE, m->queue);
    m->h[5] = i_entry(DLQB_H_CATALOG_COUNT, count);
    m->props.headers.num_entries = 6;
  }
  m->body = malloc(len + 1);
  assert_non_null(m->body);
  memcpy(m->body, body, len);
  m->len = len;
}

static void stream_free(stream *s) {
  for (size_t i = 0; i < s->n; i++) free(s->m[i].body);
}

/* A broker starts a consumer at the chunk holding the offset: deliver from
 * two before it, as the reader must cope with. */
static dlqb_status mem_read(void *src, int64_t from, dlqb_catalog_msg_fn fn, void *ctx,
                            int64_t *first, dlqb_error *err) {
  stream *s = src;
  s->reads++;
  *first = -1;
  int64_t start = from < 0 ? s->cut : (from - 2 > s->cut ? from - 2 : s->cut);
  for (size_t i = 0; i < s->n; i++) {
    msg *m = &s->m[i];
    if (m->offset < start) continue;
    if (*first < 0) *first = m->offset;
    bool stop = false;
    dlqb_status st = fn(ctx, m->offset, &m->props, (amqp_bytes_t){m->len, m->body}, &stop, err);
    if (st != DLQB_OK) return st;
    if (stop) break;
  }
  if (*first < 0) *first = s->next; /* the end marker's */
  return DLQB_OK;
}

/* ---- snapshots written as the reader writes them --------------------------- */

static dlqb_catalog_target target(void) {
  dlqb_pipeline p;
  memset(&p, 0, sizeof p);
  dlqb_pipeline_default_names(&p, DLQB_PIPELINE_DEFAULT);
  assert_int_equal(dlqb_profile_builtin(DLQB_PIPELINE_DEFAULT, &p.profile, NULL), DLQB_OK);
  dlqb_catalog_target t;
  dlqb_catalog_target_of(&p, &t);
  return t;
}

static void item(dlqb_item *it, const char *id) {
  memset(it, 0, sizeof *it);
  snprintf(it->message_id, sizeof it->message_id, "%s", id);
  snprintf(it->source_system, sizeof it->source_system, "crm");
}

static void add(dlqb_catalog *c, int q, const char *id) {
  dlqb_item it;
  item(&it, id);
  assert_int_equal(dlqb_catalog_in(c, q, 0, &it, NULL), DLQB_OK);
}

typedef struct {
  unsigned char *body[64];
  size_t len[64], items[64];
  int q[64];
  size_t n;
  int cur_q;
} chunks;

static dlqb_status keep(void *ctx, const unsigned char *body, size_t len, size_t items,
                        dlqb_error *err) {
  (void)err;
  chunks *k = ctx;
  assert_true(k->n < 64);
  k->body[k->n] = malloc(len);
  memcpy(k->body[k->n], body, len);
  k->len[k->n] = len;
  k->items[k->n] = items;
  k->q[k->n] = k->cur_q;
  k->n++;
  return DLQB_OK;
}

static void chunks_of(const dlqb_catalog *c, size_t per, chunks *k) {
  memset(k, 0, sizeof *k);
  for (int q = 0; q < 2; q++) {
    k->cur_q = q;
    assert_int_equal(dlqb_catalog_chunks(c, q, per, keep, k, NULL), DLQB_OK);
  }
}

static void chunks_free(chunks *k) {
  for (size_t i = 0; i < k->n; i++) free(k->body[i]);
}

static void chunk_at(stream *s, const char *id, int64_t as_of, const chunks *k, size_t i) {
  snap_msg(s, "snap", id, as_of, (int64_t)i, queues[k->q[i]], (int64_t)k->items[i], k->body[i],
           k->len[i]);
}

static void snap_end(stream *s, const char *id, int64_t as_of, size_t nchunks, uint64_t n0,
                     uint64_t n1) {
  char totals[256];
  int len = snprintf(totals, sizeof totals, "%llu 0 0 0 0 0 %s\n%llu 0 0 0 0 0 %s\n",
                     (unsigned long long)n0, DLQ, (unsigned long long)n1, REVIEW);
  snap_msg(s, "snap-end", id, as_of, (int64_t)nchunks, NULL, 0, totals, (size_t)len);
}

typedef struct {
  char ids[64][128];
  size_t n;
} seen;

static bool collect(void *ctx, const dlqb_item *it) {
  seen *s = ctx;
  assert_true(s->n < 64);
  snprintf(s->ids[s->n++], 128, "%s", it->message_id);
  return true;
}

/* The fold's items of q, "a b c". */
static void ids(const dlqb_catalog *c, int q, char *out, size_t cap) {
  seen s = {0};
  dlqb_catalog_each(c, q, collect, &s);
  out[0] = '\0';
  for (size_t i = 0, k = 0; i < s.n; i++)
    k += (size_t)snprintf(out + k, cap - k, "%s%s", i ? " " : "", s.ids[i]);
}

static dlqb_status fold(stream *s, dlqb_catalog *c, dlqb_catalog_whole *w,
                        dlqb_catalog_snapfind *f) {
  static dlqb_catalog_target t;
  t = target();
  dlqb_catalog_source src = {mem_read, s};
  dlqb_error err;
  dlqb_status st = dlqb_catalog_fold_whole(c, &t, &src, f, w, &err);
  if (st != DLQB_OK) print_error("%s\n", err.msg);
  return st;
}

/* A stream: a1..a5 in, then a snapshot of that (a1..a5 in the DLQ, r1 in
 * review) in chunks of two, with moves between its chunks (a4 out, a6
 * in, r1 out), then more (a2 out, a7 in). */
static int64_t build(stream *s, chunks *k, bool end) {
  char id[16];
  for (int i = 1; i <= 5; i++) {
    snprintf(id, sizeof id, "a%d", i);
    ev(s, "in", DLQ, id);
  }
  ev(s, "in", REVIEW, "r1");
  int64_t as_of = mark(s);
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  for (int i = 1; i <= 5; i++) {
    snprintf(id, sizeof id, "a%d", i);
    add(c, 0, id);
  }
  add(c, 1, "r1");
  chunks_of(c, 2, k);
  dlqb_catalog_free(c);
  assert_int_equal(k->n, 4); /* a1 a2 | a3 a4 | a5 | r1 */
  chunk_at(s, "S1", as_of, k, 0);
  ev(s, "out", DLQ, "a4"); /* in a later chunk than this event */
  chunk_at(s, "S1", as_of, k, 1);
  ev(s, "in", DLQ, "a6");
  chunk_at(s, "S1", as_of, k, 2);
  ev(s, "out", REVIEW, "r1");
  chunk_at(s, "S1", as_of, k, 3);
  if (end) snap_end(s, "S1", as_of, 4, 5, 1);
  ev(s, "out", DLQ, "a2");
  ev(s, "in", DLQ, "a7");
  return as_of;
}

static void test_chunk_round_trip_and_refusals(void **state) {
  (void)state;
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  char id[32];
  for (int i = 0; i < 2500; i++) {
    snprintf(id, sizeof id, "m-%d", i);
    add(c, 0, id);
  }
  for (int i = 0; i < 2500; i += 3) {
    snprintf(id, sizeof id, "m-%d", i);
    assert_true(dlqb_catalog_out(c, 0, id));
  }
  chunks k;
  chunks_of(c, 0, &k); /* 0: the most a chunk holds */
  assert_int_equal(k.n, 2);
  assert_int_equal(k.items[0], DLQB_CATALOG_CHUNK_ITEMS);
  dlqb_catalog *d = dlqb_catalog_new(queues, 2);
  for (size_t i = 0; i < k.n; i++) {
    size_t n;
    assert_true(dlqb_catalog_chunk_ok(k.body[i], k.len[i], &n));
    assert_int_equal(n, k.items[i]);
    assert_int_equal(dlqb_catalog_chunk_load(d, 0, k.body[i], k.len[i], NULL), DLQB_OK);
  }
  assert_int_equal(dlqb_catalog_count(d, 0), dlqb_catalog_count(c, 0));
  char *a, *b;
  dlqb_catalog_mark m = {1, "x"};
  size_t la, lb;
  /* Same entries, same order: their checkpoints are the same bytes. */
  assert_int_equal(dlqb_catalog_encode(c, &m, "i", &a, &la, NULL), DLQB_OK);
  assert_int_equal(dlqb_catalog_encode(d, &m, "i", &b, &lb, NULL), DLQB_OK);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, la);
  free(a);
  free(b);
  /* Refusals: cut short, a length past the end, a length of nothing,
   * garbage; none reads outside the body (ASan builds check). */
  size_t n;
  assert_false(dlqb_catalog_chunk_ok(k.body[0], k.len[0] - 1, &n));
  assert_false(dlqb_catalog_chunk_ok(k.body[0], 3, &n));
  unsigned char bad[8] = {0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4};
  assert_false(dlqb_catalog_chunk_ok(bad, sizeof bad, &n));
  unsigned char zero[4] = {0, 0, 0, 0};
  assert_false(dlqb_catalog_chunk_ok(zero, sizeof zero, &n));
  unsigned char junk[512];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 7 + 3);
  assert_false(dlqb_catalog_chunk_ok(junk, sizeof junk, &n));
  assert_int_equal(dlqb_catalog_chunk_load(d, 0, junk, sizeof junk, NULL), DLQB_EINVAL);
  assert_true(dlqb_catalog_chunk_ok(NULL, 0, &n)); /* an empty chunk is well-formed */
  assert_int_equal(n, 0);
  chunks_free(&k);
  dlqb_catalog_free(c);
  dlqb_catalog_free(d);
}

static void test_not_cut_folds_from_event_zero(void **state) {
  (void)state;
  static stream s;
  memset(&s, 0, sizeof s);
  chunks k;
  build(&s, &k, true);
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  dlqb_catalog_whole w;
  dlqb_catalog_snapfind f;
  assert_int_equal(fold(&s, c, &w, &f), DLQB_OK);
  assert_false(w.cut);
  assert_false(w.from_snapshot);
  assert_int_equal(s.reads, 1);
  char got[512];
  ids(c, 0, got, sizeof got);
  assert_string_equal(got, "a1 a3 a5 a6 a7");
  assert_int_equal(dlqb_catalog_count(c, 1), 0);
  assert_true(f.have_best); /* seen, for the daemon's cadence */
  assert_string_equal(f.best.id, "S1");
  chunks_free(&k);
  stream_free(&s);
  dlqb_catalog_free(c);
}

static void test_cut_folds_from_the_snapshot_then_what_came_after(void **state) {
  (void)state;
  static stream s;
  memset(&s, 0, sizeof s);
  chunks k;
  int64_t as_of = build(&s, &k, true);
  s.cut = 3; /* a1..a3's "in"s are gone */
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  dlqb_catalog_whole w;
  dlqb_catalog_snapfind f;
  assert_int_equal(fold(&s, c, &w, &f), DLQB_OK);
  assert_false(w.cut);
  assert_true(w.from_snapshot);
  assert_int_equal(w.first, 3);
  assert_int_equal(w.snap.as_of, as_of);
  assert_int_equal(w.snap.chunks, 4);
  char got[512];
  ids(c, 0, got, sizeof got);
  /* The snapshot's items in their order, a4's "out" (between its chunks)
   * applied after them, a6 and a7 after. */
  assert_string_equal(got, "a1 a3 a5 a6 a7");
  assert_int_equal(dlqb_catalog_count(c, 1), 0);
  assert_int_equal(dlqb_catalog_unmatched(c, 0), 0);
  assert_int_equal(w.events, 5);
  chunks_free(&k);
  stream_free(&s);
  dlqb_catalog_free(c);
}

static void test_a_killed_writer_leaves_a_snapshot_no_one_uses(void **state) {
  (void)state;
  static stream s;
  memset(&s, 0, sizeof s);
  chunks k;
  build(&s, &k, false); /* no end */
  s.cut = 1;
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  dlqb_catalog_whole w;
  dlqb_catalog_snapfind f;
  assert_int_equal(fold(&s, c, &w, &f), DLQB_OK);
  assert_true(w.cut);
  assert_int_equal(dlqb_catalog_count(c, 0), 0);

  /* A complete one older, an incomplete one newer: the complete one. */
  static stream t;
  memset(&t, 0, sizeof t);
  chunks k2;
  int64_t as_of = build(&t, &k2, true);
  int64_t later = mark(&t);
  chunk_at(&t, "S2", later, &k2, 0); /* its writer died here */
  ev(&t, "in", DLQ, "a8");
  t.cut = 2;
  assert_int_equal(fold(&t, c, &w, &f), DLQB_OK);
  assert_true(w.from_snapshot);
  assert_string_equal(w.snap.id, "S1");
  assert_int_equal(w.snap.as_of, as_of);
  char got[512];
  ids(c, 0, got, sizeof got);
  assert_string_equal(got, "a1 a3 a5 a6 a7 a8");
  chunks_free(&k);
  chunks_free(&k2);
  stream_free(&s);
  stream_free(&t);
  dlqb_catalog_free(c);
}

static void test_two_writers_interleaved(void **state) {
  (void)state;
  static stream s;
  memset(&s, 0, sizeof s);
  ev(&s, "in", DLQ, "a1");
  ev(&s, "in", DLQ, "a2");
  ev(&s, "in", DLQ, "a3");
  int64_t m1 = mark(&s);
  int64_t m2 = mark(&s);
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  add(c, 0, "a1");
  add(c, 0, "a2");
  add(c, 0, "a3");
  chunks k;
  chunks_of(c, 2, &k); /* a1 a2 | a3 */
  assert_int_equal(k.n, 2);
  chunk_at(&s, "A", m1, &k, 0);
  chunk_at(&s, "B", m2, &k, 0);
  chunk_at(&s, "B", m2, &k, 1);
  ev(&s, "out", DLQ, "a1");
  chunk_at(&s, "A", m1, &k, 1);
  snap_end(&s, "B", m2, 2, 3, 0);
  snap_end(&s, "A", m1, 2, 3, 0);
  ev(&s, "in", DLQ, "a4");
  s.cut = 2;
  dlqb_catalog_whole w;
  dlqb_catalog_snapfind f;
  assert_int_equal(fold(&s, c, &w, &f), DLQB_OK);
  assert_true(w.from_snapshot);
  assert_string_equal(w.snap.id, "B"); /* the newer as-of, though it ended first */
  char got[512];
  ids(c, 0, got, sizeof got);
  assert_string_equal(got, "a2 a3 a4");
  chunks_free(&k);
  stream_free(&s);
  dlqb_catalog_free(c);
}

static void test_garbled_and_foreign_messages_are_ignored(void **state) {
  (void)state;
  static stream s;
  memset(&s, 0, sizeof s);
  ev(&s, "in", DLQ, "a1");
  ev(&s, "in", DLQ, "a2");
  int64_t m1 = mark(&s);
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  add(c, 0, "a1");
  add(c, 0, "a2");
  chunks k;
  chunks_of(c, 0, &k);
  assert_int_equal(k.n, 1);
  /* A good snapshot G, then a forged one F whose chunk is garbage, one
   * with a count that lies, one of a queue not catalogued, an end with
   * totals that do not add up, and a message naming no snapshot: five
   * garbled (the ends of the broken ones are passed over). */
  chunk_at(&s, "G", m1, &k, 0);
  snap_end(&s, "G", m1, 1, 2, 0);
  int64_t m2 = mark(&s);
  unsigned char junk[300];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(255 - i);
  snap_msg(&s, "snap", "F", m2, 0, DLQ, 1, junk, sizeof junk);
  snap_end(&s, "F", m2, 1, 1, 0);
  snap_msg(&s, "snap", "L", m2, 0, DLQ, 7, k.body[0], k.len[0]);
  snap_end(&s, "L", m2, 1, 7, 0);
  snap_msg(&s, "snap", "Q", m2, 0, "dsr.work", 2, k.body[0], k.len[0]);
  snap_end(&s, "Q", m2, 1, 2, 0);
  chunk_at(&s, "T", m2, &k, 0);
  snap_end(&s, "T", m2, 1, 3, 0);
  msg *x = append(&s); /* not ours at all */
  x->h[0] = s_entry(DLQB_H_CATALOG_OP, "snap");
  x->props.headers.num_entries = 1;
  s.cut = 1;
  dlqb_catalog_whole w;
  dlqb_catalog_snapfind f;
  assert_int_equal(fold(&s, c, &w, &f), DLQB_OK);
  assert_true(w.from_snapshot);
  assert_string_equal(w.snap.id, "G");
  assert_int_equal(f.garbled, 5);
  char got[512];
  ids(c, 0, got, sizeof got);
  assert_string_equal(got, "a1 a2");
  chunks_free(&k);
  stream_free(&s);
  dlqb_catalog_free(c);
}

/* A snapshot whose as-of marker was cut with what came before its chunks:
 * the events between are gone, so it cannot be used. */
static void test_a_snapshot_whose_marker_was_cut_is_not_used(void **state) {
  (void)state;
  static stream s;
  memset(&s, 0, sizeof s);
  chunks k;
  int64_t as_of = build(&s, &k, true);
  s.cut = as_of + 1;
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  dlqb_catalog_whole w;
  dlqb_catalog_snapfind f;
  assert_int_equal(fold(&s, c, &w, &f), DLQB_OK);
  assert_true(w.cut);
  assert_int_equal(dlqb_catalog_count(c, 0), 0);
  chunks_free(&k);
  stream_free(&s);
  dlqb_catalog_free(c);
}

/* An empty catalog's snapshot (no chunk, only its end): what the daemon
 * writes for an empty DLQ. */
static void test_an_empty_snapshot(void **state) {
  (void)state;
  static stream s;
  memset(&s, 0, sizeof s);
  ev(&s, "in", DLQ, "a1");
  ev(&s, "out", DLQ, "a1");
  int64_t m = mark(&s);
  snap_end(&s, "E", m, 0, 0, 0);
  ev(&s, "in", DLQ, "a2");
  s.cut = 2;
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  dlqb_catalog_whole w;
  dlqb_catalog_snapfind f;
  assert_int_equal(fold(&s, c, &w, &f), DLQB_OK);
  assert_true(w.from_snapshot);
  assert_int_equal(w.snap.chunks, 0);
  assert_int_equal(s.reads, 2); /* no chunks to read */
  char got[512];
  ids(c, 0, got, sizeof got);
  assert_string_equal(got, "a2");
  stream_free(&s);
  dlqb_catalog_free(c);
}

static void test_when_the_daemon_writes_a_snapshot(void **state) {
  (void)state;
  const long long hour = 3600 * 1000;
  /* A small catalog: the floor. */
  assert_false(dlqb_catalog_snapshot_due(DLQB_CATALOG_SNAPSHOT_FLOOR, 10, hour));
  assert_true(dlqb_catalog_snapshot_due(DLQB_CATALOG_SNAPSHOT_FLOOR + 1, 10, hour));
  /* A large one: twice its items. */
  assert_false(dlqb_catalog_snapshot_due(2000000, 1000000, hour));
  assert_true(dlqb_catalog_snapshot_due(2000001, 1000000, hour));
  /* A quiet stream: once a day when anything came, never when nothing did. */
  assert_true(dlqb_catalog_snapshot_due(5, 1000000, DLQB_CATALOG_SNAPSHOT_EVERY_MS));
  assert_false(dlqb_catalog_snapshot_due(0, 1000000, 10 * DLQB_CATALOG_SNAPSHOT_EVERY_MS));
  assert_false(dlqb_catalog_snapshot_due(UINT64_MAX / 2, UINT64_MAX, hour)); /* no overflow */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chunk_round_trip_and_refusals),
      cmocka_unit_test(test_not_cut_folds_from_event_zero),
      cmocka_unit_test(test_cut_folds_from_the_snapshot_then_what_came_after),
      cmocka_unit_test(test_a_killed_writer_leaves_a_snapshot_no_one_uses),
      cmocka_unit_test(test_two_writers_interleaved),
      cmocka_unit_test(test_garbled_and_foreign_messages_are_ignored),
      cmocka_unit_test(test_a_snapshot_whose_marker_was_cut_is_not_used),
      cmocka_unit_test(test_an_empty_snapshot),
      cmocka_unit_test(test_when_the_daemon_writes_a_snapshot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

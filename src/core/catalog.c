/* The catalog's fold and its checkpoint bytes: see dlqb/catalog.h.
 *
 * Entries live in one array in the order they went in, each pointing at
 * its item packed into one byte arena (a million items cost their packed
 * size, about 200 bytes each, not a dlqb_item's 3 KB). A chained hash of
 * (queue, message_id) finds an entry to take out. Taken entries stay in
 * the array as dead until the next compaction (an encode drops them). */
#include "dlqb/catalog.h"

#include "dlqb/group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TITLE        "dlq-bridge catalog 2"
#define NO_ENTRY     UINT32_MAX
#define ARENA_GROWTH 2

typedef struct {
  uint64_t pos;  /* of its packed item in the arena */
  uint32_t len;  /* packed bytes */
  uint32_t next; /* next entry of the same bucket, NO_ENTRY: none */
  uint32_t hash;
  uint8_t q;
  uint8_t live;
} entry;

struct dlqb_catalog {
  char queues[DLQB_CATALOG_QUEUES_MAX][128];
  size_t nqueues;
  entry *e;
  size_t n, cap;
  unsigned char *arena;
  size_t used, arena_cap;
  uint32_t *bucket;
  size_t nbuckets; /* a power of two */
  uint64_t count[DLQB_CATALOG_QUEUES_MAX];
  uint64_t unmatched[DLQB_CATALOG_QUEUES_MAX];
  uint64_t untrusted[DLQB_CATALOG_QUEUES_MAX];
  dlqb_catalog_qstate st[DLQB_CATALOG_QUEUES_MAX];
};

/* FNV-1a over the queue index and the message_id. */
static uint32_t key_hash(int q, const char *id) {
  uint32_t h = 2166136261u ^ (uint32_t)q;
  h *= 16777619u;
  for (const unsigned char *p = (const unsigned char *)id; *p; p++) {
    h ^= *p;
    h *= 16777619u;
  }
  return h;
}

dlqb_catalog *dlqb_catalog_new(const char *const *queues, size_t nqueues) {
  if (nqueues > DLQB_CATALOG_QUEUES_MAX) return NULL;
  dlqb_catalog *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  for (size_t i = 0; i < nqueues; i++) snprintf(c->queues[i], sizeof c->queues[i], "%s", queues[i]);
  c->nqueues = nqueues;
  return c;
}

void dlqb_catalog_free(dlqb_catalog *c) {
  if (c == NULL) return;
  free(c->e);
  free(c->arena);
  free(c->bucket);
  free(c);
}

void dlqb_catalog_clear(dlqb_catalog *c) {
  c->n = 0;
  c->used = 0;
  if (c->bucket != NULL) memset(c->bucket, 0xff, c->nbuckets * sizeof *c->bucket);
  memset(c->count, 0, sizeof c->count);
  memset(c->unmatched, 0, sizeof c->unmatched);
  memset(c->untrusted, 0, sizeof c->untrusted);
  memset(c->st, 0, sizeof c->st);
}

int dlqb_catalog_queue(const dlqb_catalog *c, const char *queue) {
  for (size_t i = 0; i < c->nqueues; i++)
    if (strcmp(c->queues[i], queue) == 0) return (int)i;
  return -1;
}

/* ---- packing an item ---------------------------------------------------
 * Strings as a 16-bit length and their bytes, times and counts as 8 bytes,
 * little-endian, one flags word first. The order is the table below. */

#define STR(f)                                                                                     \
  { offsetof(dlqb_item, f), sizeof((dlqb_item *)0)->f }
static const struct {
  size_t off, size;
} str_fields[] = {STR(message_id),      STR(request_id),
                  STR(source_system),   STR(legal_basis),
                  STR(action),          STR(replayed_at),
                  STR(last_error),      STR(dlq_reason),
                  STR(escalated_by),    STR(escalation_reason),
                  STR(escalation_note), STR(owner),
                  STR(deaths),          STR(group)};
#undef STR
#define NUM(f, has)                                                                                \
  { offsetof(dlqb_item, f), has }
static const struct {
  size_t off;
  size_t has; /* offset of its bool, or SIZE_MAX: always there */
} num_fields[] = {
    NUM(attempt, offsetof(dlqb_item, has_attempt)),
    NUM(replay_count, SIZE_MAX),
    NUM(dlq_at_ms, offsetof(dlqb_item, has_dlq_at)),
    NUM(first_seen_at_ms, offsetof(dlqb_item, has_first_seen_at)),
    NUM(escalated_at_ms, offsetof(dlqb_item, has_escalated_at)),
    NUM(claimed_at_ms, offsetof(dlqb_item, has_claimed_at)),
    NUM(timestamp_ms, offsetof(dlqb_item, has_timestamp)),
    NUM(xdeath_at_ms, offsetof(dlqb_item, has_xdeath_at)),
};
#undef NUM
#define NSTR (sizeof str_fields / sizeof str_fields[0])
#define NNUM (sizeof num_fields / sizeof num_fields[0])
#define PACK_MAX                                                                                   \
  (4 + NNUM * 8 + NSTR * 2 + sizeof(dlqb_item)) /* generous: every string at most its field */

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static size_t pack(const dlqb_item *it, unsigned char *out) {
  const char *base = (const char *)it;
  uint32_t flags = it->group_ignores_second ? 1u : 0u;
  for (size_t i = 0; i < NNUM; i++)
    if (num_fields[i].has != SIZE_MAX && *(const bool *)(base + num_fields[i].has))
      flags |= 2u << i;
  size_t n = 0;
  for (int i = 0; i < 4; i++) out[n++] = (unsigned char)(flags >> (8 * i));
  for (size_t i = 0; i < NNUM; i++, n += 8) {
    int64_t v;
    memcpy(&v, base + num_fields[i].off, sizeof v);
    put_u64(out + n, (uint64_t)v);
  }
  for (size_t i = 0; i < NSTR; i++) {
    const char *s = base + str_fields[i].off;
    size_t len = strnlen(s, str_fields[i].size - 1);
    out[n++] = (unsigned char)(len & 0xff);
    out[n++] = (unsigned char)(len >> 8);
    memcpy(out + n, s, len);
    n += len;
  }
  return n;
}

/* False when the bytes are not a packed item. */
static bool unpack(const unsigned char *p, size_t len, dlqb_item *it) {
  memset(it, 0, sizeof *it);
  char *base = (char *)it;
  if (len < 4 + NNUM * 8) return false;
  uint32_t flags =
      (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  it->group_ignores_second = flags & 1u;
  size_t n = 4;
  for (size_t i = 0; i < NNUM; i++, n += 8) {
    int64_t v = (int64_t)get_u64(p + n);
    memcpy(base + num_fields[i].off, &v, sizeof v);
    if (num_fields[i].has != SIZE_MAX) *(bool *)(base + num_fields[i].has) = flags & (2u << i);
  }
  for (size_t i = 0; i < NSTR; i++) {
    if (n + 2 > len) return false;
    size_t l = (size_t)p[n] | (size_t)p[n + 1] << 8;
    n += 2;
    if (l >= str_fields[i].size || n + l > len) return false;
    memcpy(base + str_fields[i].off, p + n, l);
    n += l;
  }
  return n == len;
}

/* True when the bytes are a packed item (its lengths add up), with its
 * message_id in *id (not NUL-terminated, *idlen bytes): a checkpoint's
 * million entries are checked without unpacking each. */
static bool packed_ok(const unsigned char *p, size_t len, const unsigned char **id, size_t *idlen) {
  size_t n = 4 + NNUM * 8;
  if (len < n) return false;
  for (size_t i = 0; i < NSTR; i++) {
    if (n + 2 > len) return false;
    size_t l = (size_t)p[n] | (size_t)p[n + 1] << 8;
    n += 2;
    if (l >= str_fields[i].size || n + l > len) return false;
    if (i == 0) {
      *id = p + n;
      *idlen = l;
    }
    n += l;
  }
  return n == len;
}

/* ---- the fold ---------------------------------------------------------- */

static bool rehash(dlqb_catalog *c, size_t nbuckets) {
  uint32_t *b = malloc(nbuckets * sizeof *b);
  if (b == NULL) return false;
  memset(b, 0xff, nbuckets * sizeof *b);
  for (size_t i = 0; i < c->n; i++) {
    if (!c->e[i].live) continue;
    size_t k = c->e[i].hash & (nbuckets - 1);
    c->e[i].next = b[k];
    b[k] = (uint32_t)i;
  }
  free(c->bucket);
  c->bucket = b;
  c->nbuckets = nbuckets;
  return true;
}

/* Drops dead entries (and their bytes) once they are most of the array. */
static void compact(dlqb_catalog *c) {
  size_t live = 0;
  for (int q = 0; q < (int)c->nqueues; q++) live += c->count[q];
  if (c->n < 4096 || c->n - live < live) return;
  size_t w = 0, used = 0;
  for (size_t i = 0; i < c->n; i++) {
    if (!c->e[i].live) continue;
    memmove(c->arena + used, c->arena + c->e[i].pos, c->e[i].len);
    c->e[w] = c->e[i];
    c->e[w].pos = used;
    used += c->e[i].len;
    w++;
  }
  c->n = w;
  c->used = used;
  (void)rehash(c, c->nbuckets);
}

/* Adds an entry for the len packed bytes at pos of the arena. */
static dlqb_status add_at(dlqb_catalog *c, int q, size_t pos, size_t len, uint32_t hash,
                          dlqb_error *err) {
  if (c->n >= NO_ENTRY - 1) return dlqb_fail(err, DLQB_ENOMEM, "catalog: too many entries");
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 1024;
    entry *ne = realloc(c->e, cap * sizeof *ne);
    if (ne == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the catalog");
    c->e = ne;
    c->cap = cap;
  }
  if (c->nbuckets == 0 || c->n + 1 > c->nbuckets) {
    if (!rehash(c, c->nbuckets ? c->nbuckets * 2 : 1024))
      return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the catalog");
  }
  entry *e = &c->e[c->n];
  e->pos = pos;
  e->len = (uint32_t)len;
  e->q = (uint8_t)q;
  e->live = 1;
  e->hash = hash;
  size_t k = e->hash & (c->nbuckets - 1);
  e->next = c->bucket[k];
  c->bucket[k] = (uint32_t)c->n;
  c->n++;
  c->count[q]++;
  return DLQB_OK;
}

static dlqb_status add_packed(dlqb_catalog *c, int q, const unsigned char *p, size_t len,
                              uint32_t hash, dlqb_error *err) {
  if (c->used + len > c->arena_cap) {
    size_t cap = c->arena_cap ? c->arena_cap : 64 * 1024;
    while (cap < c->used + len) cap *= ARENA_GROWTH;
    unsigned char *na = realloc(c->arena, cap);
    if (na == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the catalog");
    c->arena = na;
    c->arena_cap = cap;
  }
  memcpy(c->arena + c->used, p, len);
  dlqb_status st = add_at(c, q, c->used, len, hash, err);
  if (st == DLQB_OK) c->used += len;
  return st;
}

dlqb_status dlqb_catalog_in(dlqb_catalog *c, int q, int64_t offset, const dlqb_item *it,
                            dlqb_error *err) {
  (void)offset; /* entries keep the order they are folded in, which is the stream's */
  if (q < 0 || (size_t)q >= c->nqueues)
    return dlqb_fail(err, DLQB_EINVAL, "catalog: no such queue");
  unsigned char buf[PACK_MAX];
  size_t len = pack(it, buf);
  if (it->group[0] == '\0') {
    /* Kept with the item: a look groups a million items without
     * normalising a million errors. */
    dlqb_item *copy = malloc(sizeof *copy);
    if (copy == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    *copy = *it;
    dlqb_group_of(it, copy->group, NULL, 0);
    len = pack(copy, buf);
    free(copy);
  }
  return add_packed(c, q, buf, len, key_hash(q, it->message_id), err);
}

/* The message_id of a packed item: its first string. */
static bool packed_id_is(const dlqb_catalog *c, const entry *e, const char *id) {
  const unsigned char *p = c->arena + e->pos + 4 + NNUM * 8;
  size_t l = (size_t)p[0] | (size_t)p[1] << 8;
  return strlen(id) == l && memcmp(p + 2, id, l) == 0;
}

/* The earliest live entry of (q, id): the bucket chain runs newest first. */
static size_t find_earliest(const dlqb_catalog *c, int q, const char *id, uint64_t *n) {
  size_t found = (size_t)-1;
  if (n != NULL) *n = 0;
  if (c->nbuckets == 0) return found;
  uint32_t h = key_hash(q, id);
  for (uint32_t i = c->bucket[h & (c->nbuckets - 1)]; i != NO_ENTRY; i = c->e[i].next) {
    const entry *e = &c->e[i];
    if (!e->live || e->hash != h || e->q != q || !packed_id_is(c, e, id)) continue;
    found = i;
    if (n != NULL) (*n)++;
  }
  return found;
}

bool dlqb_catalog_out(dlqb_catalog *c, int q, const char *message_id) {
  if (q < 0 || (size_t)q >= c->nqueues) return false;
  size_t i = find_earliest(c, q, message_id, NULL);
  if (i == (size_t)-1) {
    c->unmatched[q]++;
    return false;
  }
  c->e[i].live = 0;
  c->count[q]--;
  /* Unlink lazily: a dead entry in a chain is skipped; compaction drops it. */
  compact(c);
  return true;
}

uint64_t dlqb_catalog_has(const dlqb_catalog *c, int q, const char *message_id) {
  uint64_t n = 0;
  if (q >= 0 && (size_t)q < c->nqueues) (void)find_earliest(c, q, message_id, &n);
  return n;
}

void dlqb_catalog_verified(dlqb_catalog *c, int q, int64_t at_ms, uint64_t found) {
  if (q < 0 || (size_t)q >= c->nqueues) return;
  c->st[q].verified = true;
  c->st[q].verified_at = at_ms;
  c->st[q].verified_n = found;
  c->unmatched[q] = 0;
}

void dlqb_catalog_correction(dlqb_catalog *c, int q) {
  if (q >= 0 && (size_t)q < c->nqueues) c->st[q].corrections++;
}

uint64_t dlqb_catalog_count(const dlqb_catalog *c, int q) {
  return q >= 0 && (size_t)q < c->nqueues ? c->count[q] : 0;
}

uint64_t dlqb_catalog_unmatched(const dlqb_catalog *c, int q) {
  return q >= 0 && (size_t)q < c->nqueues ? c->unmatched[q] : 0;
}

void dlqb_catalog_untrusted_event(dlqb_catalog *c, int q) {
  if (q >= 0 && (size_t)q < c->nqueues) c->untrusted[q]++;
}

uint64_t dlqb_catalog_untrusted(const dlqb_catalog *c, int q) {
  return q >= 0 && (size_t)q < c->nqueues ? c->untrusted[q] : 0;
}

const dlqb_catalog_qstate *dlqb_catalog_state(const dlqb_catalog *c, int q) {
  static const dlqb_catalog_qstate none;
  return q >= 0 && (size_t)q < c->nqueues ? &c->st[q] : &none;
}

size_t dlqb_catalog_entries(const dlqb_catalog *c) { return c->n; }

void dlqb_catalog_each(const dlqb_catalog *c, int q, bool (*fn)(void *ctx, const dlqb_item *it),
                       void *ctx) {
  dlqb_item *it = malloc(sizeof *it); /* 3 KB: off the stack of a request thread */
  if (it == NULL) return;
  for (size_t i = 0; i < c->n; i++) {
    const entry *e = &c->e[i];
    if (!e->live || e->q != q) continue;
    if (!unpack(c->arena + e->pos, e->len, it)) continue; /* cannot happen: packed here */
    if (!fn(ctx, it)) break;
  }
  free(it);
}

/* ---- checkpoint bytes ---------------------------------------------------
 * Text lines (title, queues, ident, mark offset, mark text, then per queue
 * "count unmatched verified verified_at verified_n corrections"), an empty
 * line, then the entries: queue index (1 byte), length (4 bytes), packed
 * item. */

dlqb_status dlqb_catalog_encode(const dlqb_catalog *c, const dlqb_catalog_mark *mark,
                                const char *ident, char **out, size_t *len, dlqb_error *err) {
  *out = NULL;
  *len = 0;
  size_t live_bytes = 0;
  for (size_t i = 0; i < c->n; i++)
    if (c->e[i].live) live_bytes += 5 + c->e[i].len;
  size_t head_cap = 4096 + c->nqueues * 256;
  char *buf = malloc(head_cap + live_bytes);
  if (buf == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for the catalog checkpoint");
  int n = snprintf(buf, head_cap, "%s\n", TITLE);
  for (size_t q = 0; q < c->nqueues; q++)
    n += snprintf(buf + n, head_cap - (size_t)n, "%s%s", q ? " " : "", c->queues[q]);
  n += snprintf(buf + n, head_cap - (size_t)n, "\n%s\n%lld\n%s\n", ident, (long long)mark->offset,
                mark->marker);
  for (size_t q = 0; q < c->nqueues; q++) {
    const dlqb_catalog_qstate *s = &c->st[q];
    n += snprintf(buf + n, head_cap - (size_t)n, "%llu %llu %d %lld %llu %llu\n",
                  (unsigned long long)c->count[q], (unsigned long long)c->unmatched[q],
                  s->verified ? 1 : 0, (long long)s->verified_at, (unsigned long long)s->verified_n,
                  (unsigned long long)s->corrections);
  }
  n += snprintf(buf + n, head_cap - (size_t)n, "\n");
  size_t w = (size_t)n;
  for (size_t i = 0; i < c->n; i++) {
    const entry *e = &c->e[i];
    if (!e->live) continue;
    buf[w++] = (char)e->q;
    for (int k = 0; k < 4; k++) buf[w++] = (char)(unsigned char)(e->len >> (8 * k));
    memcpy(buf + w, c->arena + e->pos, e->len);
    w += e->len;
  }
  *out = buf;
  *len = w;
  return DLQB_OK;
}

/* The next line of [*p, end) (without its newline); false at the end. */
static bool next_line(const char **p, const char *end, const char **line, size_t *n) {
  const char *nl = memchr(*p, '\n', (size_t)(end - *p));
  if (nl == NULL) return false;
  *line = *p;
  *n = (size_t)(nl - *p);
  *p = nl + 1;
  return true;
}

static bool line_is(const char *line, size_t n, const char *want) {
  return strlen(want) == n && memcmp(line, want, n) == 0;
}

static dlqb_status decode(dlqb_catalog *c, char *own, const char *buf, size_t len,
                          const char *ident, dlqb_catalog_mark *mark, dlqb_error *err);

dlqb_status dlqb_catalog_decode(dlqb_catalog *c, const char *buf, size_t len, const char *ident,
                                dlqb_catalog_mark *mark, dlqb_error *err) {
  return decode(c, NULL, buf, len, ident, mark, err);
}

dlqb_status dlqb_catalog_decode_take(dlqb_catalog *c, char *buf, size_t len, const char *ident,
                                     dlqb_catalog_mark *mark, dlqb_error *err) {
  return decode(c, buf, buf, len, ident, mark, err);
}

/* With own (== buf, malloc'd), the bytes become the arena: the entries
 * point into them, no copy is made. */
static dlqb_status decode(dlqb_catalog *c, char *own, const char *buf, size_t len,
                          const char *ident, dlqb_catalog_mark *mark, dlqb_error *err) {
  dlqb_catalog_clear(c);
  const char *p = buf, *end = buf + len, *line;
  size_t n;
  char text[1024];
  if (!next_line(&p, end, &line, &n) || !line_is(line, n, TITLE))
    return dlqb_fail(err, DLQB_EINVAL, "not a catalog checkpoint (or another format version)");
  text[0] = '\0';
  for (size_t q = 0, k = 0; q < c->nqueues; q++)
    k += (size_t)snprintf(text + k, sizeof text - k, "%s%s", q ? " " : "", c->queues[q]);
  if (!next_line(&p, end, &line, &n) || !line_is(line, n, text))
    return dlqb_fail(err, DLQB_EINVAL, "the checkpoint is of other queues");
  if (!next_line(&p, end, &line, &n) || !line_is(line, n, ident))
    return dlqb_fail(err, DLQB_EINVAL, "the checkpoint was read under another identity");
  if (!next_line(&p, end, &line, &n) || n == 0 || n >= sizeof text)
    return dlqb_fail(err, DLQB_EINVAL, "the checkpoint has no offset");
  memcpy(text, line, n);
  text[n] = '\0';
  char *e;
  long long off = strtoll(text, &e, 10);
  if (*e != '\0' || off < 0) return dlqb_fail(err, DLQB_EINVAL, "the checkpoint has no offset");
  mark->offset = off;
  if (!next_line(&p, end, &line, &n) || n == 0 || n >= sizeof mark->marker)
    return dlqb_fail(err, DLQB_EINVAL, "the checkpoint has no marker");
  memcpy(mark->marker, line, n);
  mark->marker[n] = '\0';
  uint64_t want[DLQB_CATALOG_QUEUES_MAX];
  for (size_t q = 0; q < c->nqueues; q++) {
    if (!next_line(&p, end, &line, &n) || n >= sizeof text)
      return dlqb_fail(err, DLQB_EINVAL, "the checkpoint is cut short");
    memcpy(text, line, n);
    text[n] = '\0';
    unsigned long long cnt, um, vn, corr;
    long long vat;
    int ver;
    if (sscanf(text, "%llu %llu %d %lld %llu %llu", &cnt, &um, &ver, &vat, &vn, &corr) != 6)
      return dlqb_fail(err, DLQB_EINVAL, "the checkpoint's counts are malformed");
    want[q] = cnt;
    c->unmatched[q] = um;
    c->st[q] = (dlqb_catalog_qstate){ver != 0, vat, vn, corr};
  }
  if (!next_line(&p, end, &line, &n) || n != 0)
    return dlqb_fail(err, DLQB_EINVAL, "the checkpoint is malformed");
  dlqb_status st = DLQB_OK;
  char id[128];
  if (own != NULL) {
    free(c->arena);
    c->arena = (unsigned char *)own;
    c->arena_cap = c->used = len;
  }
  while (st == DLQB_OK && p < end) {
    if (end - p < 5) {
      st = dlqb_fail(err, DLQB_EINVAL, "the checkpoint is cut short");
      break;
    }
    int q = (unsigned char)p[0];
    uint32_t l = 0;
    for (int k = 0; k < 4; k++) l |= (uint32_t)(unsigned char)p[1 + k] << (8 * k);
    p += 5;
    const unsigned char *idp = NULL;
    size_t idlen = 0;
    if ((size_t)q >= c->nqueues || l > (size_t)(end - p) ||
        !packed_ok((const unsigned char *)p, l, &idp, &idlen) || idlen >= sizeof id) {
      st = dlqb_fail(err, DLQB_EINVAL, "the checkpoint holds a malformed entry");
      break;
    }
    memcpy(id, idp, idlen);
    id[idlen] = '\0';
    st = own != NULL ? add_at(c, q, (size_t)(p - buf), l, key_hash(q, id), err)
                     : add_packed(c, q, (const unsigned char *)p, l, key_hash(q, id), err);
    p += l;
  }
  for (size_t q = 0; st == DLQB_OK && q < c->nqueues; q++)
    if (c->count[q] != want[q])
      st = dlqb_fail(err, DLQB_EINVAL, "the checkpoint's entries do not add up to its counts");
  if (st != DLQB_OK) {
    if (own != NULL) { /* the caller keeps its bytes */
      c->arena = NULL;
      c->arena_cap = 0;
    }
    dlqb_catalog_clear(c);
  }
  return st;
}

/* ---- snapshot chunks ---------------------------------------------------- */

dlqb_status dlqb_catalog_chunks(const dlqb_catalog *c, int q, size_t per_chunk,
                                dlqb_status (*emit)(void *ctx, const unsigned char *body,
                                                    size_t len, size_t items, dlqb_error *err),
                                void *ctx, dlqb_error *err) {
  if (q < 0 || (size_t)q >= c->nqueues)
    return dlqb_fail(err, DLQB_EINVAL, "catalog: no such queue");
  if (per_chunk == 0 || per_chunk > DLQB_CATALOG_CHUNK_ITEMS) per_chunk = DLQB_CATALOG_CHUNK_ITEMS;
  /* Every packed item is at most PACK_MAX: a full chunk fits. */
  size_t cap = per_chunk * (4 + PACK_MAX);
  if (cap > DLQB_CATALOG_CHUNK_BYTES) cap = DLQB_CATALOG_CHUNK_BYTES;
  unsigned char *buf = malloc(cap);
  if (buf == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for a snapshot chunk");
  dlqb_status st = DLQB_OK;
  size_t len = 0, items = 0;
  for (size_t i = 0; st == DLQB_OK && i < c->n; i++) {
    const entry *e = &c->e[i];
    if (!e->live || e->q != q) continue;
    if (items == per_chunk || len + 4 + e->len > cap) {
      st = emit(ctx, buf, len, items, err);
      len = items = 0;
      if (st != DLQB_OK) break;
    }
    for (int k = 0; k < 4; k++) buf[len++] = (unsigned char)(e->len >> (8 * k));
    memcpy(buf + len, c->arena + e->pos, e->len);
    len += e->len;
    items++;
  }
  if (st == DLQB_OK && items > 0) st = emit(ctx, buf, len, items, err);
  free(buf);
  return st;
}

/* Walks a chunk: calls fn (when not NULL) for each item's packed bytes. */
static bool chunk_walk(const unsigned char *body, size_t len, size_t *items,
                       dlqb_status (*fn)(void *ctx, const unsigned char *p, size_t l,
                                         const unsigned char *id, size_t idlen),
                       void *ctx) {
  *items = 0;
  if (len > DLQB_CATALOG_CHUNK_BYTES) return false;
  size_t n = 0;
  while (n < len) {
    if (len - n < 4 || *items >= DLQB_CATALOG_CHUNK_ITEMS) return false;
    uint32_t l = (uint32_t)body[n] | (uint32_t)body[n + 1] << 8 | (uint32_t)body[n + 2] << 16 |
                 (uint32_t)body[n + 3] << 24;
    n += 4;
    const unsigned char *id = NULL;
    size_t idlen = 0;
    if (l > len - n || !packed_ok(body + n, l, &id, &idlen) || idlen >= 128) return false;
    if (fn != NULL && fn(ctx, body + n, l, id, idlen) != DLQB_OK) return false;
    n += l;
    (*items)++;
  }
  return true;
}

bool dlqb_catalog_chunk_ok(const unsigned char *body, size_t len, size_t *items) {
  return chunk_walk(body, len, items, NULL, NULL);
}

typedef struct {
  dlqb_catalog *c;
  int q;
  dlqb_error *err;
  dlqb_status st;
} load_ctx;

static dlqb_status load_one(void *ctx, const unsigned char *p, size_t l, const unsigned char *id,
                            size_t idlen) {
  load_ctx *x = ctx;
  char key[128];
  memcpy(key, id, idlen);
  key[idlen] = '\0';
  x->st = add_packed(x->c, x->q, p, l, key_hash(x->q, key), x->err);
  return x->st;
}

dlqb_status dlqb_catalog_chunk_load(dlqb_catalog *c, int q, const unsigned char *body, size_t len,
                                    dlqb_error *err) {
  if (q < 0 || (size_t)q >= c->nqueues)
    return dlqb_fail(err, DLQB_EINVAL, "catalog: no such queue");
  size_t items;
  if (!dlqb_catalog_chunk_ok(body, len, &items))
    return dlqb_fail(err, DLQB_EINVAL, "a snapshot chunk is malformed");
  load_ctx x = {c, q, err, DLQB_OK};
  (void)chunk_walk(body, len, &items, load_one, &x);
  return x.st;
}

void dlqb_catalog_set_state(dlqb_catalog *c, int q, uint64_t unmatched,
                            const dlqb_catalog_qstate *s) {
  if (q < 0 || (size_t)q >= c->nqueues) return;
  c->unmatched[q] = unmatched;
  c->st[q] = *s;
}

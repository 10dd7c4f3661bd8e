/* A queue (the DLQ, compliance_review) against the audit trail: see dlqb/reconcile.h.
 *
 * Memory is fixed per message_id: a table of 21-byte cells (a 64-bit
 * salted digest of the id, the copies present, the net count and the
 * hops in, and a byte of flags) holds the counts; everything else (the id
 * itself, its request_id, the last hop's time, event and writer, the last
 * hop out) goes to a spill file in call order, read back only for the
 * entries a caller asks for. A million items cost about 30 MiB, not the
 * 1.5 GiB of full entries in a hash set (bench/deep.sh, issue 29). */
#include "dlqb/reconcile.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "dlqb/audit.h"
#include "dlqb/group.h" /* dlqb_sha256 */
#include "dlqb/hashset.h"
#include "dlqb/names.h"
#include "dlqb/text.h"

#define LOAD_NUM 4 /* grow past 4/5 full */
#define LOAD_DEN 5
#define MIN_CAP  1024

/* One message_id's counts; d0 == d1 == 0: an empty cell. 4-byte aligned,
 * 20 bytes. entered's top bit: its last hop in was recorded at or after
 * the read (dlqb_reconcile_read_at). */
typedef struct {
  uint32_t d0, d1;
  int32_t present, net;
  uint32_t entered;
} cell;
#define CAME_AFTER UINT32_C(0x80000000)
#define ENTERED(c) ((c)->entered & ~CAME_AFTER)

/* What the spill file holds, one record per call that concerns an id. */
enum { REC_PRESENT = 1, REC_IN, REC_OUT, REC_FORGET };

struct dlqb_reconcile {
  cell *cells;
  size_t cap, size;
  unsigned char salt[16];
  FILE *spill; /* NULL until the first record */
  bool spill_failed;
  char read_at[40]; /* "" until dlqb_reconcile_read_at */
  char queue[DLQB_RECONCILE_QUEUE_MAX];
  size_t queue_len;
};

dlqb_reconcile *dlqb_reconcile_new(void) { return dlqb_reconcile_new_for(DLQB_Q_DLQ); }

dlqb_reconcile *dlqb_reconcile_new_for(const char *queue) {
  if (strlen(queue) >= DLQB_RECONCILE_QUEUE_MAX) return NULL;
  dlqb_reconcile *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  snprintf(r->queue, sizeof r->queue, "%s", queue);
  r->queue_len = strlen(queue);
  /* A salt per run: nobody can pick message ids whose digests collide
   * (a collision would add two ids' counts together). */
  if (getrandom(r->salt, sizeof r->salt, 0) != (ssize_t)sizeof r->salt) {
    free(r);
    return NULL;
  }
  r->cap = MIN_CAP;
  r->cells = calloc(r->cap, sizeof *r->cells);
  if (r->cells == NULL) {
    free(r);
    return NULL;
  }
  return r;
}

void dlqb_reconcile_free(dlqb_reconcile *r) {
  if (r == NULL) return;
  if (r->spill != NULL) fclose(r->spill);
  free(r->cells);
  free(r);
}

/* ---- the table ---------------------------------------------------------- */

static void digest(const dlqb_reconcile *r, const char *id, uint32_t *d0, uint32_t *d1) {
  unsigned char buf[16 + 256], h[32];
  size_t n = strlen(id);
  if (n > sizeof buf - 16) n = sizeof buf - 16; /* ids are at most 128 bytes */
  memcpy(buf, r->salt, 16);
  memcpy(buf + 16, id, n);
  dlqb_sha256(buf, 16 + n, h);
  *d0 = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
  *d1 = (uint32_t)h[4] | (uint32_t)h[5] << 8 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 24;
  if (*d0 == 0 && *d1 == 0) *d1 = 1; /* 0,0 marks an empty cell */
}

static bool empty(const cell *c) { return c->d0 == 0 && c->d1 == 0; }

static size_t home(size_t cap, uint32_t d0, uint32_t d1) {
  return (size_t)(((uint64_t)d1 << 32 | d0) % cap);
}

/* The cell of (d0, d1), or the empty one where it would go. */
static size_t find(const cell *cells, size_t cap, uint32_t d0, uint32_t d1) {
  size_t i = home(cap, d0, d1);
  while (!empty(&cells[i]) && !(cells[i].d0 == d0 && cells[i].d1 == d1)) i = (i + 1) % cap;
  return i;
}

/* Moves the table into one of cap cells (cap > size). */
static bool resize(dlqb_reconcile *r, size_t cap) {
  cell *n = calloc(cap, sizeof *n);
  if (n == NULL) return false;
  for (size_t i = 0; i < r->cap; i++)
    if (!empty(&r->cells[i])) n[find(n, cap, r->cells[i].d0, r->cells[i].d1)] = r->cells[i];
  free(r->cells);
  r->cells = n;
  r->cap = cap;
  return true;
}

static bool grow(dlqb_reconcile *r) { return resize(r, r->cap + r->cap / 2); }

bool dlqb_reconcile_reserve(dlqb_reconcile *r, uint64_t n) {
  if (n > DLQB_RECONCILE_RESERVE_MAX) n = DLQB_RECONCILE_RESERVE_MAX;
  /* Room for n more below the load limit (size + n <= cap * 4/5). */
  size_t cap = (size_t)((r->size + n) * LOAD_DEN / LOAD_NUM) + 1;
  return cap <= r->cap || resize(r, cap);
}

/* The cell for (d0, d1), created empty when absent; NULL when out of memory. */
static cell *get(dlqb_reconcile *r, uint32_t d0, uint32_t d1) {
  size_t i = find(r->cells, r->cap, d0, d1);
  if (!empty(&r->cells[i])) return &r->cells[i];
  if ((r->size + 1) * LOAD_DEN > r->cap * LOAD_NUM) {
    if (!grow(r)) return NULL;
    i = find(r->cells, r->cap, d0, d1);
  }
  r->cells[i] = (cell){.d0 = d0, .d1 = d1};
  r->size++;
  return &r->cells[i];
}

/* Removes cell i, shifting back the cells its probe run passed over. */
static void remove_at(dlqb_reconcile *r, size_t i) {
  size_t j = i;
  for (;;) {
    j = (j + 1) % r->cap;
    if (empty(&r->cells[j])) break;
    size_t k = home(r->cap, r->cells[j].d0, r->cells[j].d1);
    /* j may move to i unless its home lies cyclically in (i, j]. */
    bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    r->cells[i] = r->cells[j];
    i = j;
  }
  r->cells[i] = (cell){0};
  r->size--;
}

/* ---- the spill file --------------------------------------------------------
 * Each record: kind (1 byte), d0, d1 (4 bytes each), then five strings,
 * each a 2-byte length and its bytes. */

static void put_str(dlqb_reconcile *r, const char *s, size_t cap) {
  size_t n = strnlen(s, cap);
  unsigned char len[2] = {(unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
  if (fwrite(len, 1, 2, r->spill) != 2 || fwrite(s, 1, n, r->spill) != n) r->spill_failed = true;
}

/* A record of kind for (d0, d1) with strings a..e ("" for none). */
static bool spill(dlqb_reconcile *r, int kind, uint32_t d0, uint32_t d1, const char *a,
                  const char *b, const char *c, const char *d, const char *e) {
  if (r->spill == NULL && (r->spill = tmpfile()) == NULL) return false;
  unsigned char head[9] = {(unsigned char)kind};
  for (int i = 0; i < 4; i++) {
    head[1 + i] = (unsigned char)(d0 >> (8 * i));
    head[5 + i] = (unsigned char)(d1 >> (8 * i));
  }
  if (fwrite(head, 1, sizeof head, r->spill) != sizeof head) r->spill_failed = true;
  put_str(r, a, 1024);
  put_str(r, b, 1024);
  put_str(r, c, 1024);
  put_str(r, d, 1024);
  put_str(r, e, 1024);
  return !r->spill_failed;
}

/* ---- counting -------------------------------------------------------------- */

dlqb_status dlqb_reconcile_present(dlqb_reconcile *r, const char *message_id,
                                   const char *request_id, dlqb_error *err) {
  uint32_t d0, d1;
  digest(r, message_id, &d0, &d1);
  cell *s = get(r, d0, d1);
  if (s == NULL ||
      !spill(r, REC_PRESENT, d0, d1, message_id, request_id ? request_id : "", "", "", ""))
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory (or temporary space) reconciling %s",
                     r->queue);
  s->present++;
  return DLQB_OK;
}

bool dlqb_reconcile_line(dlqb_reconcile *r, const char *line, size_t len) {
  /* Most lines are hops elsewhere: no parse for them. */
  if (dlqb_text_find(line, len, r->queue, r->queue_len) == NULL) return true;
  json_object *rec = dlqb_audit_record_parse(line, len);
  if (rec == NULL) return true; /* not a record: the verifier decides about those */
  const char *id = dlqb_audit_record_str(rec, "message_id");
  /* A hop from the queue into itself (a review claim's re-publish) is
   * neither: the copy replaced the original. */
  bool into = strcmp(dlqb_audit_record_str(rec, "to"), r->queue) == 0;
  bool out = strcmp(dlqb_audit_record_str(rec, "from"), r->queue) == 0;
  bool ok = true;
  if (id[0] != '\0' && into != out) {
    uint32_t d0, d1;
    digest(r, id, &d0, &d1);
    size_t i = find(r->cells, r->cap, d0, d1);
    const char *time = dlqb_audit_record_str(rec, "time");
    if (into) {
      cell *s = get(r, d0, d1);
      ok = s != NULL &&
           spill(r, REC_IN, d0, d1, id, dlqb_audit_record_str(rec, "request_id"), time,
                 dlqb_audit_record_str(rec, "event"), dlqb_audit_record_str(rec, "writer"));
      if (ok) {
        s->net++;
        bool after = r->read_at[0] != '\0' && time[0] != '\0' && strcmp(time, r->read_at) >= 0;
        s->entered = (ENTERED(s) + 1) | (after ? CAME_AFTER : 0);
      }
    } else if (!empty(&r->cells[i])) {
      cell *s = &r->cells[i];
      s->net--;
      ok = spill(r, REC_OUT, d0, d1, time, "", "", "", "");
      /* Out and gone, and not in the queue: nothing left to compare. */
      if (ok && s->net <= 0 && s->present == 0) {
        ok = spill(r, REC_FORGET, d0, d1, "", "", "", "", "");
        remove_at(r, i);
      }
    }
    /* Out of the DLQ for an id never recorded into it (a log that starts
     * at a rotation with --partial): nothing to undo. */
  }
  json_object_put(rec);
  return ok;
}

/* ---- reading entries back ------------------------------------------------- */

/* An entry asked for, as the spill file builds it. */
typedef struct {
  dlqb_reconcile_entry e;
  char message_id[129];
  char request[DLQB_RECONCILE_QUEUE_MAX + 2];
  bool has_request;
} detail;

/* Cut to fit, as the entries always were. */
static void copy(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static bool get_str(FILE *f, char *dst, size_t cap) {
  unsigned char len[2];
  if (fread(len, 1, 2, f) != 2) return false;
  size_t n = (size_t)len[0] | (size_t)len[1] << 8;
  char buf[1024];
  if (n > sizeof buf || fread(buf, 1, n, f) != n) return false;
  if (dst != NULL) {
    size_t k = n < cap - 1 ? n : cap - 1;
    memcpy(dst, buf, k);
    dst[k] = '\0';
  }
  return true;
}

static void key_of(uint32_t d0, uint32_t d1, unsigned char k[8]) {
  memcpy(k, &d0, 4);
  memcpy(k + 4, &d1, 4);
}

/* Replays the spill file into the details of the ids in want (keyed by
 * digest), as the calls came: what the old in-memory entries held. */
static bool replay(dlqb_reconcile *r, dlqb_hashset *want) {
  if (r->spill == NULL) return true;
  if (fflush(r->spill) != 0 || fseek(r->spill, 0, SEEK_SET) != 0) return false;
  bool ok = true;
  unsigned char head[9];
  char a[1024], b[1024], c[1024], d[1024], e[1024];
  while (ok && fread(head, 1, sizeof head, r->spill) == sizeof head) {
    ok = get_str(r->spill, a, sizeof a) && get_str(r->spill, b, sizeof b) &&
         get_str(r->spill, c, sizeof c) && get_str(r->spill, d, sizeof d) &&
         get_str(r->spill, e, sizeof e);
    if (!ok) break;
    unsigned char k[8];
    memcpy(k, head + 1, 8);
    detail *t = dlqb_hashset_get(want, k, sizeof k);
    if (t == NULL) continue;
    switch (head[0]) {
    case REC_FORGET: {
      /* Forgotten then: what comes after is a new entry. */
      t->message_id[0] = t->request[0] = '\0';
      t->has_request = false;
      t->e.last_time[0] = t->e.last_event[0] = t->e.last_writer[0] = t->e.last_out_time[0] = 0;
      break;
    }
    case REC_PRESENT:
    case REC_IN:
      if (t->message_id[0] == '\0') copy(t->message_id, sizeof t->message_id, a);
      if (!t->has_request && b[0] != '\0') {
        copy(t->request, sizeof t->request, b);
        t->has_request = true;
      }
      if (head[0] == REC_IN) {
        copy(t->e.last_time, sizeof t->e.last_time, c);
        copy(t->e.last_event, sizeof t->e.last_event, d);
        copy(t->e.last_writer, sizeof t->e.last_writer, e);
      }
      break;
    case REC_OUT: copy(t->e.last_out_time, sizeof t->e.last_out_time, a); break;
    default: ok = false;
    }
  }
  if (fseek(r->spill, 0, SEEK_END) != 0) ok = false;
  return ok;
}

/* Entries whose texts are read back at once: each batch costs one read of
 * the spill file, and memory for this many details (about 600 bytes each). */
#define BATCH 20000

static bool picked(const cell *c, bool (*pick)(const cell *c)) {
  return !empty(c) && (pick == NULL || pick(c));
}

/* Calls fn for the cells pick accepts (every one when pick is NULL), a
 * batch at a time. */
static bool each(const dlqb_reconcile *rc, bool (*pick)(const cell *c),
                 void (*fn)(void *ctx, const dlqb_reconcile_entry *e), void *ctx) {
  dlqb_reconcile *r = (dlqb_reconcile *)rc; /* the spill file's position only */
  bool ok = true;
  for (size_t from = 0; ok && from < r->cap;) {
    dlqb_hashset *want = dlqb_hashset_new(sizeof(detail));
    if (want == NULL) return false;
    size_t to = from, n = 0;
    for (; ok && to < r->cap && n < BATCH; to++) {
      if (!picked(&r->cells[to], pick)) continue;
      unsigned char k[8];
      key_of(r->cells[to].d0, r->cells[to].d1, k);
      bool added;
      ok = dlqb_hashset_add(want, k, sizeof k, &added) != NULL;
      n++;
    }
    ok = ok && (n == 0 || replay(r, want));
    for (size_t i = from; ok && i < to; i++) {
      const cell *c = &r->cells[i];
      if (!picked(c, pick)) continue;
      unsigned char k[8];
      key_of(c->d0, c->d1, k);
      detail *t = dlqb_hashset_get(want, k, sizeof k);
      t->e.message_id = t->message_id;
      t->e.request_id = t->request;
      t->e.present = c->present;
      t->e.net = c->net;
      t->e.entered = ENTERED(c);
      fn(ctx, &t->e);
    }
    dlqb_hashset_free(want);
    from = to;
  }
  return ok;
}

bool dlqb_reconcile_each(const dlqb_reconcile *r,
                         void (*fn)(void *ctx, const dlqb_reconcile_entry *e), void *ctx) {
  return each(r, NULL, fn, ctx);
}

/* What `audit reconcile` may report: missing (or recorded after the read,
 * or not seen), unrecorded, or copies beyond the records. */
static bool notable(const cell *c) {
  long recorded = c->net > 0 ? c->net : 0;
  return (c->present == 0 && c->net > 0) || (c->present > 0 && ENTERED(c) == 0) ||
         c->present > recorded;
}

bool dlqb_reconcile_each_notable(const dlqb_reconcile *r,
                                 void (*fn)(void *ctx, const dlqb_reconcile_entry *e), void *ctx) {
  return each(r, notable, fn, ctx);
}

void dlqb_reconcile_read_at(dlqb_reconcile *r, const char *iso) {
  snprintf(r->read_at, sizeof r->read_at, "%s", iso);
}

uint64_t dlqb_reconcile_recorded(const dlqb_reconcile *r) {
  uint64_t n = 0;
  for (size_t i = 0; i < r->cap; i++)
    if (!empty(&r->cells[i]) && r->cells[i].net > 0 && !(r->cells[i].entered & CAME_AFTER)) n++;
  return n;
}

size_t dlqb_reconcile_size(const dlqb_reconcile *r) { return r->size; }

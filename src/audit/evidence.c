/* Evidence for one request (include/dlqb/evidence.h): the pass over the
 * log's lines, the request index, the bundle, its offline check, and the
 * checkpoint's messages in the anchors stream. */
#include <inttypes.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_private.h"
#include "dlqb/evidence.h"
#include "dlqb/hashset.h"
#include "dlqb/text.h"

#define H          DLQB_MERKLE_HASH
#define KEY_PREFIX "dlq-bridge request\n"
#define NEEDLE     "\"request_id\":\""

/* One request's lines in the tree, for the index: most requests have a
 * few, held inline (no allocation per request); more go to idx. */
#define INLINE_LINES 3
typedef struct {
  uint64_t in[INLINE_LINES];
  uint64_t *idx; /* all of them once there are more than INLINE_LINES */
  uint32_t n, cap;
} entry;

static const uint64_t *lines_of(const entry *en) { return en->idx != NULL ? en->idx : en->in; }

/* One record of the request, with its proof. */
typedef struct {
  char *line;
  size_t len;
  dlqb_merkle_proof proof;
} held;

struct dlqb_evidence {
  uint64_t size, prev, lines;
  uint64_t start;  /* the lines an archive stands for (dlqb_evidence_start): 0 without */
  bool cons_asked; /* the consistency proof's ranges are registered */
  char *last;      /* the last line seen, for an archive's link to what follows */
  size_t last_len, last_cap;
  size_t archived; /* the request's lines in the archive: records no bundle can hold */
  char *request_id;
  dlqb_merkle_pass *pass;
  bool have_root, have_prev;
  unsigned char root[H], prev_root[H];
  dlqb_merkle_range cons[DLQB_MERKLE_PROOF_MAX];
  size_t ncons;
  dlqb_hashset *index; /* key hash -> entry */
  held *recs;
  size_t nrecs, rcap;
  size_t later;
  bool failed;
  /* The index, once finished: its root, and the request's entry and proof. */
  bool finished;
  uint64_t entries;
  unsigned char index_root[H];
  uint64_t position;
  dlqb_merkle_proof index_proof;
};

/* SHA-256(KEY_PREFIX || request_id): the request's place in the index. */
static bool key_hash(const char *id, size_t len, unsigned char out[H]) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  unsigned int n = 0;
  bool ok = ctx != NULL && EVP_DigestInit_ex(ctx, dlqb_merkle_sha256(), NULL) == 1 &&
            EVP_DigestUpdate(ctx, KEY_PREFIX, sizeof KEY_PREFIX - 1) == 1 &&
            EVP_DigestUpdate(ctx, id, len) == 1 && EVP_DigestFinal_ex(ctx, out, &n) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

dlqb_evidence *dlqb_evidence_new(uint64_t size, uint64_t prev, const char *request_id) {
  dlqb_evidence *e = calloc(1, sizeof *e);
  if (e == NULL) return NULL;
  e->size = size;
  e->prev = prev < size ? prev : 0;
  e->pass = dlqb_merkle_pass_new();
  e->index = dlqb_hashset_new(sizeof(entry));
  e->request_id = request_id != NULL ? strdup(request_id) : NULL;
  bool ok = e->pass != NULL && e->index != NULL && (request_id == NULL || e->request_id != NULL);
  if (!ok) {
    dlqb_evidence_free(e);
    return NULL;
  }
  return e;
}

static void free_entry(void *ctx, const char *key, size_t len, void *value) {
  (void)ctx;
  (void)key;
  (void)len;
  free(((entry *)value)->idx);
}

/* The consistency proof's ranges end at most at size: asked for before
 * the first leaf, once the pass knows where it starts (an archive's
 * compact range serves those inside it). */
static bool ask_consistency(dlqb_evidence *e) {
  bool ok = true;
  if (!e->cons_asked && e->prev > 0 && e->size != UINT64_MAX) {
    e->ncons = dlqb_merkle_consistency_ranges(e->prev, e->size, e->cons);
    for (size_t i = 0; ok && i < e->ncons; i++) ok = dlqb_merkle_pass_want(e->pass, e->cons[i]);
  }
  e->cons_asked = true;
  return ok;
}

void dlqb_evidence_free(dlqb_evidence *e) {
  if (e == NULL) return;
  free(e->last);
  dlqb_merkle_pass_free(e->pass);
  if (e->index != NULL) {
    dlqb_hashset_each(e->index, free_entry, NULL);
    dlqb_hashset_free(e->index);
  }
  for (size_t i = 0; i < e->nrecs; i++) free(e->recs[i].line);
  free(e->recs);
  free(e->request_id);
  free(e);
}

/* The request_id of a line ("" when none), as any JSON reader decodes it:
 * json-c parses every line that names one. *rec is the parsed record (put
 * it). */
static const char *request_of(const char *line, size_t len, json_object **rec, char *buf,
                              size_t cap) {
  *rec = NULL;
  const size_t nl = sizeof NEEDLE - 1;
  const char *at = dlqb_text_find(line, len, NEEDLE, nl);
  if (at == NULL) return "";
  /* The writer's own form (the member once, its value without escapes:
   * it escapes only '"' and '\\') is read as it stands, which is what a
   * JSON reader decodes it to; anything else goes through json-c. A
   * million lines parsed by json-c cost three times the verification. */
  const char *v = at + nl, *end = line + len;
  const char *q = memchr(v, '"', (size_t)(end - v));
  if (q != NULL && memchr(v, '\\', (size_t)(q - v)) == NULL && (size_t)(q - v) < cap &&
      dlqb_text_find(q, (size_t)(end - q), NEEDLE, nl) == NULL &&
      dlqb_text_find(line, (size_t)(at - line), NEEDLE, nl) == NULL) {
    memcpy(buf, v, (size_t)(q - v));
    buf[q - v] = '\0';
    return buf;
  }
  *rec = dlqb_audit_record_parse(line, len);
  return *rec != NULL ? dlqb_audit_record_str(*rec, "request_id") : "";
}

static bool index_add(dlqb_evidence *e, const char *id, uint64_t at) {
  unsigned char k[H];
  bool added;
  if (!key_hash(id, strlen(id), k)) return false;
  entry *en = dlqb_hashset_add(e->index, k, H, &added);
  if (en == NULL) return false;
  if (en->n < INLINE_LINES && en->idx == NULL) {
    en->in[en->n++] = at;
    return true;
  }
  if (en->n >= en->cap) {
    uint32_t ncap = en->cap ? en->cap * 2 : 2 * INLINE_LINES;
    uint64_t *n = realloc(en->idx, ncap * sizeof *n);
    if (n == NULL) return false;
    if (en->idx == NULL) memcpy(n, en->in, sizeof en->in);
    en->idx = n;
    en->cap = ncap;
  }
  en->idx[en->n++] = at;
  return true;
}

static bool hold(dlqb_evidence *e, const char *line, size_t len) {
  if (e->nrecs == e->rcap) {
    size_t ncap = e->rcap ? e->rcap * 2 : 8;
    held *n = realloc(e->recs, ncap * sizeof *n);
    if (n == NULL) return false;
    e->recs = n;
    e->rcap = ncap;
  }
  held *h = &e->recs[e->nrecs];
  if ((h->line = malloc(len + 1)) == NULL) return false;
  memcpy(h->line, line, len);
  h->line[len] = '\0';
  h->len = len;
  if (!dlqb_merkle_pass_prove_next(e->pass, e->size == UINT64_MAX ? UINT64_MAX : e->size,
                                   &h->proof)) {
    free(h->line);
    return false;
  }
  e->nrecs++;
  return true;
}

/* Keeps a copy of the line: the last one seen is what an archive of
 * these files links the next file to. */
static bool keep_last(dlqb_evidence *e, const char *line, size_t len) {
  if (len + 1 > e->last_cap) {
    size_t ncap = e->last_cap ? e->last_cap : 1024;
    while (ncap < len + 1) ncap *= 2;
    char *n = realloc(e->last, ncap);
    if (n == NULL) return false;
    e->last = n;
    e->last_cap = ncap;
  }
  memcpy(e->last, line, len);
  e->last[len] = '\0';
  e->last_len = len;
  return true;
}

bool dlqb_evidence_visit(void *arg, const char *line, size_t len) {
  dlqb_evidence *e = arg;
  if (!e->failed && (!ask_consistency(e) || !keep_last(e, line, len))) e->failed = true;
  uint64_t at = e->lines++;
  if (e->failed) return false;
  json_object *rec = NULL;
  /* A request id is at most 256 bytes (the writer's cap); a longer value
   * goes through json-c like any other form. */
  char buf[512];
  const char *id = request_of(line, len, &rec, buf, sizeof buf);
  bool ok = true;
  if (at < e->size) {
    if (id[0] != '\0') ok = index_add(e, id, at);
    /* Proving needs the tree's size up front (a checkpoint's). */
    if (ok && e->request_id != NULL && strcmp(id, e->request_id) == 0)
      ok = e->size != UINT64_MAX && hold(e, line, len);
    unsigned char leaf[H];
    ok = ok && dlqb_merkle_pass_add_data(e->pass, line, len, leaf);
    if (ok && e->prev > 0 && at + 1 == e->prev)
      ok = e->have_prev = dlqb_merkle_pass_root(e->pass, e->prev_root);
    if (ok && at + 1 == e->size) ok = e->have_root = dlqb_merkle_pass_root(e->pass, e->root);
  } else if (e->request_id != NULL && strcmp(id, e->request_id) == 0) {
    e->later++;
  }
  json_object_put(rec);
  if (!ok) e->failed = true;
  return ok;
}

/* ---- the index ---- */

typedef struct {
  const unsigned char *key;
  entry *en;
} slot;

typedef struct {
  slot *s;
  size_t n;
} slots;

static void collect(void *ctx, const char *key, size_t len, void *value) {
  (void)len;
  slots *c = ctx;
  c->s[c->n++] = (slot){(const unsigned char *)key, value};
}

static int by_key(const void *a, const void *b) {
  return memcmp(((const slot *)a)->key, ((const slot *)b)->key, H);
}

/* The leaf bytes of an index entry: key hash || each line number, 8
 * bytes big-endian, ascending. */
static unsigned char *entry_bytes(const unsigned char key[H], const uint64_t *idx, size_t n,
                                  size_t *len) {
  *len = H + 8 * n;
  unsigned char *b = malloc(*len);
  if (b == NULL) return NULL;
  memcpy(b, key, H);
  for (size_t i = 0; i < n; i++)
    for (int j = 0; j < 8; j++) b[H + 8 * i + j] = (unsigned char)(idx[i] >> (56 - 8 * j));
  return b;
}

static dlqb_status build_index(dlqb_evidence *e, dlqb_error *err) {
  size_t n = dlqb_hashset_size(e->index);
  slots c = {calloc(n ? n : 1, sizeof(slot)), 0};
  dlqb_merkle_pass *p = dlqb_merkle_pass_new();
  dlqb_status st = DLQB_OK;
  if (c.s == NULL || p == NULL) {
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    goto done;
  }
  dlqb_hashset_each(e->index, collect, &c);
  qsort(c.s, c.n, sizeof *c.s, by_key);
  unsigned char want[H];
  bool find = e->request_id != NULL && key_hash(e->request_id, strlen(e->request_id), want);
  e->position = UINT64_MAX;
  for (size_t i = 0; i < c.n && st == DLQB_OK; i++) {
    size_t bl;
    unsigned char *b = entry_bytes(c.s[i].key, lines_of(c.s[i].en), c.s[i].en->n, &bl);
    unsigned char leaf[H];
    if (b != NULL && find && memcmp(c.s[i].key, want, H) == 0) {
      e->position = i;
      const uint64_t *ls = lines_of(c.s[i].en);
      for (uint32_t j = 0; j < c.s[i].en->n && ls[j] < e->start; j++) e->archived++;
      if (!dlqb_merkle_pass_prove_next(p, c.n, &e->index_proof)) {
        free(b);
        b = NULL;
      }
    }
    if (b == NULL || !dlqb_merkle_pass_add_data(p, b, bl, leaf))
      st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    free(b);
  }
  e->entries = c.n;
  if (st == DLQB_OK &&
      (!dlqb_merkle_pass_root(p, e->index_root) ||
       (e->position != UINT64_MAX && !dlqb_merkle_pass_proof_finish(p, &e->index_proof))))
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
done:
  free(c.s);
  dlqb_merkle_pass_free(p);
  return st;
}

dlqb_status dlqb_evidence_finish(dlqb_evidence *e, dlqb_evidence_result *out, dlqb_error *err) {
  memset(out, 0, sizeof *out);
  if (e->failed) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  if (e->size == UINT64_MAX) {
    e->size = e->lines;
    e->have_root = dlqb_merkle_pass_root(e->pass, e->root);
  }
  if (e->lines < e->size)
    return dlqb_fail(err, DLQB_EINVAL,
                     "the log holds %" PRIu64 " lines, fewer than the %" PRIu64
                     " of the checkpoint (the log was cut or replaced)",
                     e->lines, e->size);
  if (e->size == 0 || e->size == e->start) e->have_root = dlqb_merkle_pass_root(e->pass, e->root);
  if (!ask_consistency(e)) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  dlqb_status st = build_index(e, err);
  if (st != DLQB_OK) return st;
  for (size_t i = 0; i < e->nrecs; i++)
    if (!dlqb_merkle_pass_proof_finish(e->pass, &e->recs[i].proof))
      return dlqb_fail(err, DLQB_ENOMEM, "cannot complete a proof");
  out->lines = e->lines;
  out->tree.size = e->size;
  memcpy(out->tree.root, e->root, H);
  out->tree.has_index = true;
  out->tree.index_entries = e->entries;
  memcpy(out->tree.index_root, e->index_root, H);
  if (e->prev > 0) {
    memcpy(out->prev_root, e->prev_root, H);
    out->ncons = e->ncons;
    for (size_t i = 0; i < e->ncons; i++)
      if (!dlqb_merkle_pass_range(e->pass, e->cons[i], out->cons[i]))
        return dlqb_fail(err, DLQB_ENOMEM, "cannot complete the consistency proof");
  }
  out->records = e->nrecs;
  out->later = e->later;
  e->finished = true;
  return DLQB_OK;
}

/* ---- starting from an archive ---- */

dlqb_status dlqb_evidence_start(dlqb_evidence *e, uint64_t lines,
                                const unsigned char (*frontier)[H], size_t n, dlqb_error *err) {
  if (e->lines != 0 || e->cons_asked)
    return dlqb_fail(err, DLQB_EINVAL, "an archive must come before the first line");
  if (e->size != UINT64_MAX && e->size < lines)
    return dlqb_fail(err, DLQB_EINVAL,
                     "the checkpoint's tree of %" PRIu64
                     " lines ends inside the archive of %" PRIu64
                     " lines: nothing after the archive is in it (run audit checkpoint)",
                     e->size, lines);
  if (e->prev > 0 && e->prev < lines)
    return dlqb_fail(err, DLQB_EINVAL,
                     "the last checkpoint (%" PRIu64 " lines) ends inside the archive of %" PRIu64
                     " lines: its consistency with a new tree needs the archived files",
                     e->prev, lines);
  if (!dlqb_merkle_pass_start(e->pass, lines, frontier, n))
    return dlqb_fail(err, DLQB_EINVAL,
                     "the archive's compact range does not fit its %" PRIu64 " lines", lines);
  e->lines = e->start = lines;
  if (e->prev == lines && !(e->have_prev = dlqb_merkle_pass_root(e->pass, e->prev_root)))
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  if (!ask_consistency(e))
    return dlqb_fail(err, DLQB_EINVAL,
                     "the consistency proof from the last checkpoint (%" PRIu64
                     " lines) needs a part of the archived files the archive does not keep",
                     e->prev);
  return DLQB_OK;
}

dlqb_status dlqb_evidence_index_put(dlqb_evidence *e, const unsigned char key[H],
                                    const uint64_t *lines, size_t n, dlqb_error *err) {
  bool added = false;
  entry *en = dlqb_hashset_add(e->index, key, H, &added);
  if (en == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  if (!added) return dlqb_fail(err, DLQB_EINVAL, "the archive names a request twice");
  for (size_t i = 0; i < n; i++) {
    if (lines[i] >= e->start || (i > 0 && lines[i] <= lines[i - 1]))
      return dlqb_fail(err, DLQB_EINVAL,
                       "the archive lists line %" PRIu64 " out of order or past its %" PRIu64
                       " lines",
                       lines[i], e->start);
    if (en->n == UINT32_MAX) return dlqb_fail(err, DLQB_EINVAL, "too many lines for one request");
    if (en->n < INLINE_LINES && en->idx == NULL) {
      en->in[en->n++] = lines[i];
      continue;
    }
    if (en->n >= en->cap) {
      uint32_t ncap = en->cap ? en->cap * 2 : 2 * INLINE_LINES;
      uint64_t *nl = realloc(en->idx, ncap * sizeof *nl);
      if (nl == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
      if (en->idx == NULL) memcpy(nl, en->in, sizeof en->in);
      en->idx = nl;
      en->cap = ncap;
    }
    en->idx[en->n++] = lines[i];
  }
  return DLQB_OK;
}

size_t dlqb_evidence_frontier(const dlqb_evidence *e, unsigned char (*out)[H]) {
  return dlqb_merkle_pass_frontier(e->pass, out);
}

bool dlqb_evidence_last_hash(const dlqb_evidence *e, char out[DLQB_AUDIT_HASH_HEX + 1]) {
  size_t body = 0;
  const char *sig = NULL;
  dlqb__audit_hasher h;
  if (e->last == NULL || !dlqb__audit_split(e->last, e->last_len, &body, &sig) ||
      !dlqb__audit_hasher_init(&h))
    return false;
  bool ok = dlqb__audit_hash_body(&h, e->last, body, out);
  dlqb__audit_hasher_release(&h);
  return ok;
}

dlqb_status dlqb_evidence_each_index(const dlqb_evidence *e,
                                     void (*fn)(void *ctx, const unsigned char key[H],
                                                const uint64_t *lines, size_t n),
                                     void *ctx, dlqb_error *err) {
  size_t n = dlqb_hashset_size(e->index);
  slots c = {calloc(n ? n : 1, sizeof(slot)), 0};
  if (c.s == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  dlqb_hashset_each(e->index, collect, &c);
  qsort(c.s, c.n, sizeof *c.s, by_key);
  for (size_t i = 0; i < c.n; i++) fn(ctx, c.s[i].key, lines_of(c.s[i].en), c.s[i].en->n);
  free(c.s);
  return DLQB_OK;
}

/* ---- the bundle ---- */

static json_object *proof_json(const dlqb_merkle_proof *p) {
  json_object *a = json_object_new_array();
  for (size_t i = 0; i < p->n; i++) {
    char b64[64];
    dlqb_base64_encode(p->hash[i], H, b64);
    json_object_array_add(a, json_object_new_string(b64));
  }
  return a;
}

static char *to_line(json_object *o, size_t *len) {
  const char *s =
      json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
  size_t n = strlen(s);
  char *out = malloc(n + 2);
  if (out != NULL) {
    memcpy(out, s, n);
    out[n] = '\n';
    out[n + 1] = '\0';
    if (len != NULL) *len = n + 1;
  }
  return out;
}

dlqb_status dlqb_evidence_bundle(dlqb_evidence *e, const char *note, size_t note_len, char **out,
                                 size_t *len, dlqb_error *err) {
  *out = NULL;
  if (!e->finished || e->request_id == NULL)
    return dlqb_fail(err, DLQB_EINVAL, "no request collected");
  /* Records in the archived files first: a request all of whose records
   * were archived has records, not none (to a DPO "no record in the tree"
   * reads as "never existed"). */
  if (e->archived > 0)
    return dlqb_fail(err, DLQB_EINVAL,
                     "request_id %s has %zu record%s in the archived files (before line %" PRIu64
                     "), which are not here: no bundle can hold %s; the bundles made before they "
                     "were deleted stay valid",
                     e->request_id, e->archived, e->archived == 1 ? "" : "s", e->start + 1,
                     e->archived == 1 ? "it" : "them");
  if (e->nrecs == 0 || e->position == UINT64_MAX)
    return dlqb_fail(err, DLQB_EINVAL,
                     "request_id %s has no record in the checkpoint's tree "
                     "(%" PRIu64 " lines)%s",
                     e->request_id, e->size,
                     e->later ? "; it has records after it: prove again after the next checkpoint"
                              : "");
  json_object *b = json_object_new_object();
  json_object_object_add(b, "format", json_object_new_string(DLQB_EVIDENCE_FORMAT));
  json_object_object_add(b, "request_id", json_object_new_string(e->request_id));
  json_object_object_add(b, "checkpoint", json_object_new_string_len(note, (int)note_len));
  json_object *recs = json_object_new_array();
  for (size_t i = 0; i < e->nrecs; i++) {
    json_object *r = json_object_new_object();
    json_object_object_add(r, "index", json_object_new_int64((int64_t)e->recs[i].proof.index));
    json_object_object_add(r, "line",
                           json_object_new_string_len(e->recs[i].line, (int)e->recs[i].len));
    json_object_object_add(r, "proof", proof_json(&e->recs[i].proof));
    json_object_array_add(recs, r);
  }
  json_object_object_add(b, "records", recs);
  json_object *ix = json_object_new_object();
  json_object_object_add(ix, "position", json_object_new_int64((int64_t)e->position));
  json_object_object_add(ix, "proof", proof_json(&e->index_proof));
  json_object_object_add(b, "index", ix);
  *out = to_line(b, len);
  json_object_put(b);
  return *out != NULL ? DLQB_OK : dlqb_fail(err, DLQB_ENOMEM, "out of memory");
}

/* ---- checking a bundle ---- */

static json_object *member(json_object *o, const char *key, json_type t) {
  json_object *m;
  return json_object_object_get_ex(o, key, &m) && json_object_is_type(m, t) ? m : NULL;
}

/* The proof array as hashes; -1 when malformed. */
static long proof_of(json_object *a, unsigned char (*out)[H]) {
  if (a == NULL) return -1;
  size_t n = json_object_array_length(a);
  if (n > DLQB_MERKLE_PROOF_MAX) return -1;
  for (size_t i = 0; i < n; i++) {
    json_object *s = json_object_array_get_idx(a, i);
    if (!json_object_is_type(s, json_type_string) ||
        dlqb_base64_decode(json_object_get_string(s), (size_t)json_object_get_string_len(s), out[i],
                           H) != H)
      return -1;
  }
  return (long)n;
}

static bool uint_member(json_object *o, const char *key, uint64_t *out) {
  json_object *m = member(o, key, json_type_int);
  if (m == NULL) return false;
  int64_t v = json_object_get_int64(m);
  if (v < 0 || v == INT64_MAX) return false;
  *out = (uint64_t)v;
  return true;
}

static dlqb_status check_records(json_object *recs, const dlqb_checkpoint *cp, const char *id,
                                 uint64_t *idx, size_t n, dlqb_error *err) {
  unsigned char proof[DLQB_MERKLE_PROOF_MAX][H], leaf[H];
  for (size_t i = 0; i < n; i++) {
    json_object *r = json_object_array_get_idx(recs, i);
    json_object *line =
        json_object_is_type(r, json_type_object) ? member(r, "line", json_type_string) : NULL;
    long np = r != NULL ? proof_of(member(r, "proof", json_type_array), proof) : -1;
    if (line == NULL || np < 0 || !uint_member(r, "index", &idx[i]))
      return dlqb_fail(err, DLQB_EINVAL, "record %zu of the bundle is malformed", i + 1);
    if (i > 0 && idx[i] <= idx[i - 1])
      return dlqb_fail(err, DLQB_EINVAL,
                       "record %zu (line %" PRIu64 "): the records are not in "
                       "file order, or one is given twice",
                       i + 1, idx[i] + 1);
    if (idx[i] >= cp->size)
      return dlqb_fail(err, DLQB_EINVAL,
                       "record %zu: line %" PRIu64 " is past the checkpoint's "
                       "tree of %" PRIu64,
                       i + 1, idx[i] + 1, cp->size);
    const char *text = json_object_get_string(line);
    size_t tl = (size_t)json_object_get_string_len(line);
    json_object *rec = dlqb_audit_record_parse(text, tl);
    bool same = rec != NULL && strcmp(dlqb_audit_record_str(rec, "request_id"), id) == 0;
    json_object_put(rec);
    if (!same)
      return dlqb_fail(err, DLQB_EINVAL,
                       "record %zu (line %" PRIu64 ") is not a record of "
                       "request_id %s (another request's record, or not a record)",
                       i + 1, idx[i] + 1, id);
    if (!dlqb_merkle_leaf(text, tl, leaf) ||
        !dlqb_merkle_verify_inclusion(idx[i], cp->size, leaf, proof, (size_t)np, cp->root))
      return dlqb_fail(err, DLQB_EINVAL,
                       "record %zu (line %" PRIu64 "): its inclusion proof does "
                       "not lead to the checkpoint's root (the record was changed, or is not in "
                       "the tree)",
                       i + 1, idx[i] + 1);
  }
  return DLQB_OK;
}

dlqb_status dlqb_evidence_verify(const char *bundle, size_t len, const dlqb_audit_keyring *ring,
                                 const dlqb_witness_key *witnesses, size_t nwitnesses, size_t need,
                                 dlqb_evidence_check *out, dlqb_error *err) {
  memset(out, 0, sizeof *out);
  json_tokener *tok = json_tokener_new();
  if (tok == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  /* Not JSON_TOKENER_STRICT: under it trixie's json-c refuses the em dash
   * that begins the checkpoint's signature lines (the signed-note format;
   * "invalid string sequence", seen in the trixie build's unit tests). Nothing the bundle proves rests on its
   * JSON spelling: the records are hashed, the checkpoint signed. */
  while (len > 0 && bundle[len - 1] == '\n') len--;
  /* Whitespace before or after the document (but the final newlines) is
   * refused, as the Python verifier refuses it: two verifiers of one
   * format give one verdict on every input. */
  bool padded = len > 0 && (strchr(" \t\r\n\v\f", bundle[0]) != NULL ||
                            strchr(" \t\r\n\v\f", bundle[len - 1]) != NULL);
  json_object *b = len < (size_t)INT32_MAX ? json_tokener_parse_ex(tok, bundle, (int)len) : NULL;
  bool whole = !padded && b != NULL && json_tokener_get_error(tok) == json_tokener_success &&
               json_tokener_get_parse_end(tok) == len;
  json_tokener_free(tok);
  dlqb_status st = DLQB_OK;
  uint64_t *idx = NULL;
  json_object *fmt = whole ? member(b, "format", json_type_string) : NULL;
  json_object *id = whole ? member(b, "request_id", json_type_string) : NULL;
  json_object *note = whole ? member(b, "checkpoint", json_type_string) : NULL;
  json_object *recs = whole ? member(b, "records", json_type_array) : NULL;
  json_object *ix = whole ? member(b, "index", json_type_object) : NULL;
  /* A request_id with a NUL in it would be read as its part before it. */
  if (fmt == NULL || strcmp(json_object_get_string(fmt), DLQB_EVIDENCE_FORMAT) != 0 || id == NULL ||
      strlen(json_object_get_string(id)) != (size_t)json_object_get_string_len(id) ||
      note == NULL || recs == NULL || ix == NULL) {
    st = dlqb_fail(err, DLQB_EINVAL, "not an evidence bundle (%s)", DLQB_EVIDENCE_FORMAT);
    goto done;
  }
  snprintf(out->request_id, sizeof out->request_id, "%s", json_object_get_string(id));
  const char *nt = json_object_get_string(note);
  size_t nl = (size_t)json_object_get_string_len(note);
  if ((st = dlqb_checkpoint_verify(nt, nl, ring, &out->cp, out->key_id, err)) != DLQB_OK) goto done;
  if (!out->cp.has_index) {
    st = dlqb_fail(err, DLQB_EINVAL, "the checkpoint carries no request index");
    goto done;
  }
  out->cosigners = dlqb_checkpoint_cosigners(nt, nl, &out->cp, witnesses, nwitnesses, NULL);
  if (out->cosigners < need) {
    st = dlqb_fail(err, DLQB_EINVAL,
                   "the checkpoint of size %" PRIu64 " is cosigned by %zu of the "
                   "%zu witness keys given, %zu needed (a tree no witness has checked, or a fork)",
                   out->cp.size, out->cosigners, nwitnesses, need);
    goto done;
  }
  size_t n = json_object_array_length(recs);
  if (n == 0) {
    st = dlqb_fail(err, DLQB_EINVAL, "the bundle holds no record");
    goto done;
  }
  if ((idx = calloc(n, sizeof *idx)) == NULL) {
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    goto done;
  }
  const char *rid = out->request_id;
  if ((st = check_records(recs, &out->cp, rid, idx, n, err)) != DLQB_OK) goto done;
  unsigned char proof[DLQB_MERKLE_PROOF_MAX][H], key[H], leaf[H];
  uint64_t pos;
  long np = proof_of(member(ix, "proof", json_type_array), proof);
  if (np < 0 || !uint_member(ix, "position", &pos)) {
    st = dlqb_fail(err, DLQB_EINVAL, "the bundle's index entry is malformed");
    goto done;
  }
  size_t bl;
  unsigned char *bytes = key_hash(rid, strlen(rid), key) ? entry_bytes(key, idx, n, &bl) : NULL;
  bool ok = bytes != NULL && dlqb_merkle_leaf(bytes, bl, leaf) &&
            dlqb_merkle_verify_inclusion(pos, out->cp.index_entries, leaf, proof, (size_t)np,
                                         out->cp.index_root);
  free(bytes);
  if (!ok) {
    st = dlqb_fail(err, DLQB_EINVAL,
                   "the request index of the checkpoint lists other lines for "
                   "request_id %s than the %zu records of the bundle (a record was left out or "
                   "added)",
                   rid, n);
    goto done;
  }
  out->records = n;
done:
  free(idx);
  json_object_put(b);
  return st;
}

/* ---- messages in the stream ---- */

char *dlqb_evidence_checkpoint_msg(const char *note, size_t note_len, uint64_t prev,
                                   const unsigned char (*cons)[H], size_t ncons) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "v", json_object_new_int(DLQB_AUDIT_VERSION));
  json_object_object_add(o, "type", json_object_new_string("checkpoint"));
  json_object_object_add(o, "note", json_object_new_string_len(note, (int)note_len));
  json_object_object_add(o, "prev_size", json_object_new_int64((int64_t)prev));
  dlqb_merkle_proof p = {.n = ncons};
  for (size_t i = 0; i < ncons; i++) memcpy(p.hash[i], cons[i], H);
  json_object_object_add(o, "consistency", proof_json(&p));
  size_t len;
  char *s = to_line(o, &len);
  if (s != NULL) s[len - 1] = '\0';
  json_object_put(o);
  return s;
}

char *dlqb_evidence_cosig_msg(const dlqb_checkpoint *cp, const char *line) {
  json_object *o = json_object_new_object();
  char b64[64];
  dlqb_base64_encode(cp->root, H, b64);
  size_t ll = strlen(line);
  while (ll > 0 && line[ll - 1] == '\n') ll--;
  json_object_object_add(o, "v", json_object_new_int(DLQB_AUDIT_VERSION));
  json_object_object_add(o, "type", json_object_new_string("cosignature"));
  json_object_object_add(o, "size", json_object_new_int64((int64_t)cp->size));
  json_object_object_add(o, "root", json_object_new_string(b64));
  json_object_object_add(o, "line", json_object_new_string_len(line, (int)ll));
  size_t len;
  char *s = to_line(o, &len);
  if (s != NULL) s[len - 1] = '\0';
  json_object_put(o);
  return s;
}

bool dlqb_evidence_msg_parse(const char *msg, size_t len, dlqb_evidence_msg *out) {
  memset(out, 0, sizeof *out);
  json_object *o = dlqb_audit_record_parse(msg, len);
  json_object *type = o != NULL ? member(o, "type", json_type_string) : NULL;
  bool ok = false;
  if (type != NULL && strcmp(json_object_get_string(type), "checkpoint") == 0) {
    json_object *note = member(o, "note", json_type_string);
    long n = proof_of(member(o, "consistency", json_type_array), out->cons);
    if (note != NULL && n >= 0 && uint_member(o, "prev_size", &out->prev_size)) {
      out->note_len = (size_t)json_object_get_string_len(note);
      out->note = malloc(out->note_len + 1);
      if (out->note != NULL) {
        memcpy(out->note, json_object_get_string(note), out->note_len + 1);
        out->ncons = (size_t)n;
        out->kind = 1;
        ok = true;
      }
    }
  } else if (type != NULL && strcmp(json_object_get_string(type), "cosignature") == 0) {
    json_object *root = member(o, "root", json_type_string);
    json_object *line = member(o, "line", json_type_string);
    if (root != NULL && line != NULL && uint_member(o, "size", &out->size) &&
        dlqb_base64_decode(json_object_get_string(root), (size_t)json_object_get_string_len(root),
                           out->root, H) == H &&
        (size_t)json_object_get_string_len(line) < sizeof out->line) {
      snprintf(out->line, sizeof out->line, "%s", json_object_get_string(line));
      out->kind = 2;
      ok = true;
    }
  }
  json_object_put(o);
  return ok;
}

void dlqb_evidence_msg_release(dlqb_evidence_msg *m) {
  free(m->note);
  m->note = NULL;
}

bool dlqb_evidence_latest(const dlqb_audit_lines *msgs, const dlqb_audit_keyring *ring,
                          const char *origin, char **note, size_t *len, dlqb_checkpoint *cp) {
  *note = NULL;
  *len = 0;
  dlqb_evidence_msg m;
  dlqb_error err;
  char key[DLQB_AUDIT_KEY_ID_HEX + 1];
  size_t at = SIZE_MAX;
  for (size_t i = msgs->n; i-- > 0 && at == SIZE_MAX;) {
    dlqb_checkpoint c;
    if (dlqb_evidence_msg_parse(msgs->line[i], msgs->len[i], &m) && m.kind == 1 &&
        dlqb_checkpoint_verify(m.note, m.note_len, ring, &c, key, &err) == DLQB_OK &&
        strcmp(c.origin, origin) == 0) {
      at = i;
      *cp = c;
      /* The log's own signature lines, then the cosignatures. */
      if ((*note = malloc(DLQB_CHECKPOINT_MAX)) != NULL && m.note_len < DLQB_CHECKPOINT_MAX) {
        memcpy(*note, m.note, m.note_len);
        *len = m.note_len;
      }
    }
    dlqb_evidence_msg_release(&m);
  }
  if (at == SIZE_MAX || *note == NULL) {
    free(*note);
    *note = NULL;
    return false;
  }
  for (size_t i = at + 1; i < msgs->n; i++) {
    if (!dlqb_evidence_msg_parse(msgs->line[i], msgs->len[i], &m) || m.kind != 2 ||
        m.size != cp->size || memcmp(m.root, cp->root, H) != 0)
      continue;
    size_t ll = strlen(m.line);
    bool dup = false;
    for (const char *p = *note + cp->text_len; !dup && p + ll < *note + *len;
         p = (const char *)memchr(p, '\n', (size_t)(*note + *len - p)) + 1)
      dup = memcmp(p, m.line, ll) == 0 && p[ll] == '\n';
    if (!dup && memchr(m.line, '\n', ll) == NULL && *len + ll + 1 < DLQB_CHECKPOINT_MAX) {
      memcpy(*note + *len, m.line, ll);
      (*note)[*len + ll] = '\n';
      *len += ll + 1;
    }
  }
  return true;
}

/* The Merkle tree of the audit trail (RFC 6962 / RFC 9162 hashing): leaf
 * and node hashes, the ranges a proof is made of, proof verification, and
 * one bounded pass over the leaves (include/dlqb/merkle.h). Pure: no I/O. */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/merkle.h"

#define H DLQB_MERKLE_HASH

/* ---- hashing ---- */

/* SHA-256 fetched once for the process: an implicit fetch (EVP_sha256()
 * in every init) takes a lock and a lookup per hash, and a pass hashes
 * two million times at a million lines. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static void fetch_sha256(void) { sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL); }

const struct evp_md_st *dlqb_merkle_sha256(void) {
  pthread_once(&sha256_once, fetch_sha256);
  return sha256_md;
}

static bool digest2(EVP_MD_CTX *ctx, unsigned char prefix, const void *a, size_t alen,
                    const void *b, size_t blen, unsigned char out[H]) {
  unsigned int n = 0;
  const EVP_MD *md = dlqb_merkle_sha256();
  return md != NULL && EVP_DigestInit_ex(ctx, md, NULL) == 1 &&
         EVP_DigestUpdate(ctx, &prefix, 1) == 1 && EVP_DigestUpdate(ctx, a, alen) == 1 &&
         (blen == 0 || EVP_DigestUpdate(ctx, b, blen) == 1) &&
         EVP_DigestFinal_ex(ctx, out, &n) == 1 && n == H;
}

bool dlqb_merkle_leaf(const void *data, size_t len, unsigned char out[H]) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  bool ok = ctx != NULL && digest2(ctx, 0x00, data, len, NULL, 0, out);
  EVP_MD_CTX_free(ctx);
  return ok;
}

bool dlqb_merkle_node(const unsigned char left[H], const unsigned char right[H],
                      unsigned char out[H]) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  bool ok = ctx != NULL && digest2(ctx, 0x01, left, H, right, H, out);
  EVP_MD_CTX_free(ctx);
  return ok;
}

/* ---- the ranges of a proof ---- */

/* The largest power of two strictly below n (n >= 2). */
static uint64_t split_of(uint64_t n) {
  uint64_t k = 1;
  while (k < n - k) k <<= 1; /* k * 2 < n, without overflow */
  return k;
}

/* PATH(m, D[lo, lo + n)) of RFC 9162 2.1.3.1, the deepest hash first. */
static void path(uint64_t m, uint64_t lo, uint64_t n, dlqb_merkle_range *out, size_t *len) {
  if (n <= 1) return;
  uint64_t k = split_of(n);
  if (m < k) {
    path(m, lo, k, out, len);
    out[(*len)++] = (dlqb_merkle_range){lo + k, lo + n};
  } else {
    path(m - k, lo + k, n - k, out, len);
    out[(*len)++] = (dlqb_merkle_range){lo, lo + k};
  }
}

size_t dlqb_merkle_inclusion_ranges(uint64_t m, uint64_t n, dlqb_merkle_range *out) {
  size_t len = 0;
  if (m < n) path(m, 0, n, out, &len);
  return len;
}

/* SUBPROOF(m, D[lo, lo + n), b) of RFC 9162 2.1.4.1. */
static void subproof(uint64_t m, uint64_t lo, uint64_t n, bool b, dlqb_merkle_range *out,
                     size_t *len) {
  if (m == n) {
    if (!b) out[(*len)++] = (dlqb_merkle_range){lo, lo + n};
    return;
  }
  uint64_t k = split_of(n);
  if (m <= k) {
    subproof(m, lo, k, b, out, len);
    out[(*len)++] = (dlqb_merkle_range){lo + k, lo + n};
  } else {
    subproof(m - k, lo + k, n - k, false, out, len);
    out[(*len)++] = (dlqb_merkle_range){lo, lo + k};
  }
}

size_t dlqb_merkle_consistency_ranges(uint64_t m, uint64_t n, dlqb_merkle_range *out) {
  size_t len = 0;
  if (m > 0 && m < n) subproof(m, 0, n, true, out, &len);
  return len;
}

/* ---- verifying proofs (RFC 9162 2.1.3.2 and 2.1.4.2) ---- */

bool dlqb_merkle_verify_inclusion(uint64_t m, uint64_t size, const unsigned char leaf[H],
                                  const unsigned char (*proof)[H], size_t n,
                                  const unsigned char root[H]) {
  if (m >= size) return false;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (ctx == NULL) return false;
  uint64_t fn = m, sn = size - 1;
  unsigned char r[H];
  memcpy(r, leaf, H);
  bool ok = true;
  for (size_t i = 0; ok && i < n; i++) {
    if (sn == 0) {
      ok = false;
      break;
    }
    if ((fn & 1) || fn == sn) {
      ok = digest2(ctx, 0x01, proof[i], H, r, H, r);
      if (!(fn & 1))
        while (fn != 0 && !(fn & 1)) {
          fn >>= 1;
          sn >>= 1;
        }
    } else {
      ok = digest2(ctx, 0x01, r, H, proof[i], H, r);
    }
    fn >>= 1;
    sn >>= 1;
  }
  EVP_MD_CTX_free(ctx);
  return ok && sn == 0 && CRYPTO_memcmp(r, root, H) == 0;
}

bool dlqb_merkle_verify_consistency(uint64_t size1, uint64_t size2, const unsigned char root1[H],
                                    const unsigned char root2[H], const unsigned char (*proof)[H],
                                    size_t n) {
  if (size1 > size2) return false;
  if (size1 == size2) return n == 0 && CRYPTO_memcmp(root1, root2, H) == 0;
  if (size1 == 0) return n == 0;
  if (n == 0 || n > DLQB_MERKLE_PROOF_MAX) return false;
  /* The path with root1 first when size1 is a power of two (the proof
   * leaves it out: the verifier has it). */
  const unsigned char *path_[DLQB_MERKLE_PROOF_MAX + 1];
  size_t len = 0;
  if ((size1 & (size1 - 1)) == 0) path_[len++] = root1;
  for (size_t i = 0; i < n; i++) path_[len++] = proof[i];
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (ctx == NULL) return false;
  uint64_t fn = size1 - 1, sn = size2 - 1;
  while (fn & 1) {
    fn >>= 1;
    sn >>= 1;
  }
  unsigned char fr[H], sr[H];
  memcpy(fr, path_[0], H);
  memcpy(sr, path_[0], H);
  bool ok = true;
  for (size_t i = 1; ok && i < len; i++) {
    if (sn == 0) {
      ok = false;
      break;
    }
    if ((fn & 1) || fn == sn) {
      ok = digest2(ctx, 0x01, path_[i], H, fr, H, fr) && digest2(ctx, 0x01, path_[i], H, sr, H, sr);
      if (!(fn & 1))
        while (fn != 0 && !(fn & 1)) {
          fn >>= 1;
          sn >>= 1;
        }
    } else {
      ok = digest2(ctx, 0x01, sr, H, path_[i], H, sr);
    }
    fn >>= 1;
    sn >>= 1;
  }
  EVP_MD_CTX_free(ctx);
  return ok && sn == 0 && CRYPTO_memcmp(fr, root1, H) == 0 && CRYPTO_memcmp(sr, root2, H) == 0;
}

/* ---- one pass ---- */

/* A perfect subtree: the leaves [index << level, (index + 1) << level). */
typedef struct {
  uint64_t index;
  unsigned level;
  bool have;
  unsigned char hash[H];
} node;

struct dlqb_merkle_pass {
  EVP_MD_CTX *ctx;
  uint64_t size;
  /* The compact range of [0, size): one perfect subtree per set bit of
   * size, the largest (leftmost) first. */
  node frontier[64];
  size_t depth;
  node *want; /* sorted by (level, index) once the first leaf comes */
  size_t nwant, wcap;
  bool sorted;
};

dlqb_merkle_pass *dlqb_merkle_pass_new(void) {
  dlqb_merkle_pass *p = calloc(1, sizeof *p);
  if (p != NULL && (p->ctx = EVP_MD_CTX_new()) == NULL) {
    free(p);
    p = NULL;
  }
  return p;
}

void dlqb_merkle_pass_free(dlqb_merkle_pass *p) {
  if (p == NULL) return;
  EVP_MD_CTX_free(p->ctx);
  free(p->want);
  free(p);
}

static int node_cmp(const void *pa, const void *pb) {
  const node *a = pa, *b = pb;
  if (a->level != b->level) return a->level < b->level ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

/* Calls fn for each perfect subtree of r's root, left to right; false
 * when r is empty or not aligned as a proof's ranges always are. */
static bool each_subtree(dlqb_merkle_range r, bool (*fn)(void *ctx, unsigned level, uint64_t index),
                         void *ctx) {
  if (r.lo >= r.hi) return false;
  for (uint64_t pos = r.lo; pos < r.hi;) {
    uint64_t rem = r.hi - pos;
    unsigned level = 63;
    while (((uint64_t)1 << level) > rem) level--;
    if (pos & (((uint64_t)1 << level) - 1)) return false;
    if (!fn(ctx, level, pos >> level)) return false;
    pos += (uint64_t)1 << level;
  }
  return true;
}

static bool add_want(void *ctx, unsigned level, uint64_t index) {
  dlqb_merkle_pass *p = ctx;
  if (p->nwant == p->wcap) {
    size_t ncap = p->wcap ? p->wcap * 2 : 64;
    node *n = realloc(p->want, ncap * sizeof *n);
    if (n == NULL) return false;
    p->want = n;
    p->wcap = ncap;
  }
  node *w = &p->want[p->nwant];
  *w = (node){.index = index, .level = level};
  /* Ends within the leaves added: only a node of the compact range now
   * is still known (one it merged into another is gone). */
  uint64_t hi = (index + 1) << level;
  if (hi <= p->size) {
    const node *f = NULL;
    for (size_t i = 0; i < p->depth && f == NULL; i++)
      if (p->frontier[i].level == level && p->frontier[i].index == index) f = &p->frontier[i];
    if (f == NULL) return false;
    w->have = true;
    memcpy(w->hash, f->hash, H);
  }
  p->nwant++;
  return true;
}

bool dlqb_merkle_pass_want(dlqb_merkle_pass *p, dlqb_merkle_range r) {
  p->sorted = false;
  return each_subtree(r, add_want, p);
}

bool dlqb_merkle_pass_start(dlqb_merkle_pass *p, uint64_t size, const unsigned char (*frontier)[H],
                            size_t n) {
  if (p->size != 0 || p->depth != 0 || (size_t)__builtin_popcountll(size) != n) return false;
  uint64_t pos = 0;
  for (unsigned level = 64, i = 0; level-- > 0;) {
    if (!(size & ((uint64_t)1 << level))) continue;
    p->frontier[i] = (node){.index = pos >> level, .level = level, .have = true};
    memcpy(p->frontier[i].hash, frontier[i], H);
    pos += (uint64_t)1 << level;
    i++;
  }
  p->depth = n;
  p->size = size;
  return true;
}

size_t dlqb_merkle_pass_frontier(const dlqb_merkle_pass *p, unsigned char (*out)[H]) {
  for (size_t i = 0; i < p->depth; i++) memcpy(out[i], p->frontier[i].hash, H);
  return p->depth;
}

static node *find_want(const dlqb_merkle_pass *p, unsigned level, uint64_t index) {
  node key = {.index = index, .level = level};
  return p->nwant ? bsearch(&key, p->want, p->nwant, sizeof key, node_cmp) : NULL;
}

/* Keeps a node the pass was asked for (its duplicates are one entry). */
static void keep(dlqb_merkle_pass *p, const node *n) {
  node *w = find_want(p, n->level, n->index);
  if (w == NULL) return;
  /* bsearch may land on any of equal entries: mark them all. */
  while (w > p->want && node_cmp(w - 1, n) == 0) w--;
  for (; w < p->want + p->nwant && node_cmp(w, n) == 0; w++) {
    w->have = true;
    memcpy(w->hash, n->hash, H);
  }
}

bool dlqb_merkle_pass_add(dlqb_merkle_pass *p, const unsigned char leaf[H]) {
  if (!p->sorted) {
    if (p->nwant > 1) qsort(p->want, p->nwant, sizeof *p->want, node_cmp);
    p->sorted = true;
  }
  node *top = &p->frontier[p->depth++];
  *top = (node){.index = p->size, .level = 0, .have = true};
  memcpy(top->hash, leaf, H);
  if (p->nwant) keep(p, top);
  p->size++;
  /* Two subtrees of one size side by side make the next one up, as a
   * binary counter carries. */
  while (p->depth >= 2 && p->frontier[p->depth - 2].level == p->frontier[p->depth - 1].level) {
    node *l = &p->frontier[p->depth - 2], *r = &p->frontier[p->depth - 1];
    if (!digest2(p->ctx, 0x01, l->hash, H, r->hash, H, l->hash)) return false;
    l->level++;
    l->index >>= 1;
    p->depth--;
    if (p->nwant) keep(p, l);
  }
  return true;
}

bool dlqb_merkle_pass_add_data(dlqb_merkle_pass *p, const void *data, size_t len,
                               unsigned char leaf[H]) {
  return digest2(p->ctx, 0x00, data, len, NULL, 0, leaf) && dlqb_merkle_pass_add(p, leaf);
}

uint64_t dlqb_merkle_pass_size(const dlqb_merkle_pass *p) { return p->size; }

/* Folds the subtrees hashes[0..n) (largest first) from the right, as
 * MTH splits: H(h0, H(h1, ... H(hn-2, hn-1))). */
static bool fold(EVP_MD_CTX *ctx, unsigned char (*hashes)[H], size_t n, unsigned char out[H]) {
  memcpy(out, hashes[n - 1], H);
  for (size_t i = n - 1; i-- > 0;)
    if (!digest2(ctx, 0x01, hashes[i], H, out, H, out)) return false;
  return true;
}

bool dlqb_merkle_pass_root(const dlqb_merkle_pass *p, unsigned char out[H]) {
  if (p->depth == 0) {
    unsigned int n = 0;
    return EVP_Digest("", 0, out, &n, EVP_sha256(), NULL) == 1;
  }
  unsigned char hashes[64][H];
  for (size_t i = 0; i < p->depth; i++) memcpy(hashes[i], p->frontier[i].hash, H);
  return fold(p->ctx, hashes, p->depth, out);
}

typedef struct {
  const dlqb_merkle_pass *p;
  unsigned char hashes[64][H];
  size_t n;
} gather;

static bool gather_one(void *ctx, unsigned level, uint64_t index) {
  gather *g = ctx;
  const node *w = find_want(g->p, level, index);
  if (w == NULL || !w->have) return false;
  memcpy(g->hashes[g->n++], w->hash, H);
  return true;
}

bool dlqb_merkle_pass_range(const dlqb_merkle_pass *p, dlqb_merkle_range r, unsigned char out[H]) {
  if (!p->sorted) return false;
  gather g = {.p = p};
  return each_subtree(r, gather_one, &g) && fold(p->ctx, g.hashes, g.n, out);
}

bool dlqb_merkle_pass_prove_next(dlqb_merkle_pass *p, uint64_t size, dlqb_merkle_proof *out) {
  uint64_t m = p->size;
  if (m >= size) return false;
  out->index = m;
  out->size = size;
  out->n = dlqb_merkle_inclusion_ranges(m, size, out->r);
  for (size_t i = 0; i < out->n; i++) {
    dlqb_merkle_range r = out->r[i];
    if (r.lo > m) {
      if (!dlqb_merkle_pass_want(p, r)) return false;
      continue;
    }
    /* Left of the leaf: a perfect subtree, which the compact range of
     * [0, m) holds as one of its nodes. */
    uint64_t width = r.hi - r.lo;
    unsigned level = 0;
    while (((uint64_t)1 << level) < width) level++;
    bool found = false;
    for (size_t j = 0; j < p->depth && !found; j++)
      if (p->frontier[j].level == level && p->frontier[j].index == r.lo >> level) {
        memcpy(out->hash[i], p->frontier[j].hash, H);
        found = true;
      }
    if (!found) return false;
  }
  return true;
}

bool dlqb_merkle_pass_proof_finish(const dlqb_merkle_pass *p, dlqb_merkle_proof *pr) {
  if (p->size < pr->size) return false;
  for (size_t i = 0; i < pr->n; i++)
    if (pr->r[i].lo > pr->index && !dlqb_merkle_pass_range(p, pr->r[i], pr->hash[i])) return false;
  return true;
}

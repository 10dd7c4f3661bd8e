/* A Merkle tree over the audit trail's lines, hashed as RFC 6962 / RFC
 * 9162 section 2.1 do (leaf = SHA-256(0x00 || line), node = SHA-256(0x01 ||
 * left || right), the split at the largest power of two below the size),
 * with inclusion and consistency proofs (RFC 9162 2.1.3 and 2.1.4).
 *
 * Pure (no I/O) and in bounded memory: a pass over the leaves keeps the
 * compact range of what it has seen (one hash per set bit of the size, at
 * most 64) plus the nodes it was asked for beforehand, so the root of a
 * million-record trail, or the proofs for a few of its records, cost a
 * few kilobytes whatever the size. Every proof hash is the root of a
 * range of leaves whose perfect subtrees are aligned to their size, so a
 * pass sees each of them exactly once as it merges (docs/audit.md,
 * "Evidence for one request"). */
#ifndef DLQB_MERKLE_H
#define DLQB_MERKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DLQB_MERKLE_HASH 32
/* A proof over a tree of up to 2^64 leaves has at most this many hashes
 * (a consistency proof one more than an inclusion proof). */
#define DLQB_MERKLE_PROOF_MAX 66

typedef struct {
  uint64_t lo, hi; /* the leaves [lo, hi) */
} dlqb_merkle_range;

/* OpenSSL's SHA-256, fetched once for the process (NULL when it cannot
 * be): for every hash of the tree, the index and the notes. */
struct evp_md_st;
const struct evp_md_st *dlqb_merkle_sha256(void);

/* leaf = SHA-256(0x00 || data[0..len)); false when OpenSSL fails. */
bool dlqb_merkle_leaf(const void *data, size_t len, unsigned char out[DLQB_MERKLE_HASH]);

/* node = SHA-256(0x01 || left || right). */
bool dlqb_merkle_node(const unsigned char left[DLQB_MERKLE_HASH],
                      const unsigned char right[DLQB_MERKLE_HASH],
                      unsigned char out[DLQB_MERKLE_HASH]);

/* The ranges whose roots make the inclusion proof of leaf m in the tree of
 * n leaves (RFC 9162 2.1.3.1, PATH(m, D[n])), in proof order, into out
 * (DLQB_MERKLE_PROOF_MAX); returns how many. 0 when m >= n or n == 1. */
size_t dlqb_merkle_inclusion_ranges(uint64_t m, uint64_t n, dlqb_merkle_range *out);

/* The ranges whose roots make the consistency proof from the tree of m
 * leaves to the one of n (RFC 9162 2.1.4.1, PROOF(m, D[n])), in proof
 * order; returns how many. 0 when m == 0, m >= n. */
size_t dlqb_merkle_consistency_ranges(uint64_t m, uint64_t n, dlqb_merkle_range *out);

/* RFC 9162 2.1.3.2: true when proof (n hashes of DLQB_MERKLE_HASH bytes)
 * shows that leaf (its leaf hash) is leaf m of the tree of size with
 * root. */
bool dlqb_merkle_verify_inclusion(uint64_t m, uint64_t size,
                                  const unsigned char leaf[DLQB_MERKLE_HASH],
                                  const unsigned char (*proof)[DLQB_MERKLE_HASH], size_t n,
                                  const unsigned char root[DLQB_MERKLE_HASH]);

/* RFC 9162 2.1.4.2: true when proof shows that the tree of size1 leaves
 * with root1 is a prefix of the tree of size2 with root2. size1 == size2
 * needs an empty proof and equal roots; size1 == 0 is consistent with
 * anything (an empty proof). */
bool dlqb_merkle_verify_consistency(uint64_t size1, uint64_t size2,
                                    const unsigned char root1[DLQB_MERKLE_HASH],
                                    const unsigned char root2[DLQB_MERKLE_HASH],
                                    const unsigned char (*proof)[DLQB_MERKLE_HASH], size_t n);

/* One pass over the leaves in order. Ask for the ranges you need first
 * (dlqb_merkle_pass_want), then add every leaf; afterwards the root of any
 * range asked for that the pass covered is dlqb_merkle_pass_range's. */
typedef struct dlqb_merkle_pass dlqb_merkle_pass;

dlqb_merkle_pass *dlqb_merkle_pass_new(void); /* NULL when out of memory */
void dlqb_merkle_pass_free(dlqb_merkle_pass *p);

/* Registers the perfect subtrees the range's root is folded from: those
 * past the leaves added so far, those that end past them (the pass builds
 * them as it goes), and those of the leaves added that are nodes of the
 * compact range now (taken at once). False when out of memory or a
 * subtree is one the pass has gone past. */
bool dlqb_merkle_pass_want(dlqb_merkle_pass *p, dlqb_merkle_range r);

/* Starts an empty pass as though the first `size` leaves had been added,
 * from their compact range: n (the set bits of size) subtree roots, the
 * largest (leftmost) first, as dlqb_merkle_pass_frontier gives them. The
 * pass then goes on from leaf `size`: its root, proofs of later leaves and
 * the ranges asked for are those of the whole tree. False when the pass
 * is not empty or n does not match size. */
bool dlqb_merkle_pass_start(dlqb_merkle_pass *p, uint64_t size,
                            const unsigned char (*frontier)[DLQB_MERKLE_HASH], size_t n);

/* The compact range of the leaves added so far into out (64 hashes):
 * returns how many (the set bits of the size), the largest first. */
size_t dlqb_merkle_pass_frontier(const dlqb_merkle_pass *p, unsigned char (*out)[DLQB_MERKLE_HASH]);

/* Adds the next leaf by its leaf hash. False when OpenSSL fails. */
bool dlqb_merkle_pass_add(dlqb_merkle_pass *p, const unsigned char leaf[DLQB_MERKLE_HASH]);

/* Hashes data[0..len) as a leaf (dlqb_merkle_leaf, with the pass's own
 * hash context: no allocation per leaf) into leaf, then adds it. */
bool dlqb_merkle_pass_add_data(dlqb_merkle_pass *p, const void *data, size_t len,
                               unsigned char leaf[DLQB_MERKLE_HASH]);

/* Leaves added so far. */
uint64_t dlqb_merkle_pass_size(const dlqb_merkle_pass *p);

/* The root of all leaves added so far (the SHA-256 of nothing for none). */
bool dlqb_merkle_pass_root(const dlqb_merkle_pass *p, unsigned char out[DLQB_MERKLE_HASH]);

/* The root of a range asked for; false when it was not asked for or the
 * pass has not reached its end. */
bool dlqb_merkle_pass_range(const dlqb_merkle_pass *p, dlqb_merkle_range r,
                            unsigned char out[DLQB_MERKLE_HASH]);

/* The inclusion proof of one leaf, made during a pass (below). */
typedef struct {
  uint64_t index, size;
  size_t n;
  dlqb_merkle_range r[DLQB_MERKLE_PROOF_MAX];
  unsigned char hash[DLQB_MERKLE_PROOF_MAX][DLQB_MERKLE_HASH];
} dlqb_merkle_proof;

/* Starts the inclusion proof of the next leaf (index = the leaves added so
 * far) in the tree of size leaves: the hashes left of it are in the
 * compact range now, the ones right of it are asked for. Call before
 * adding that leaf. False when out of memory or index >= size. */
bool dlqb_merkle_pass_prove_next(dlqb_merkle_pass *p, uint64_t size, dlqb_merkle_proof *out);

/* Completes it once the pass has added size leaves. */
bool dlqb_merkle_pass_proof_finish(const dlqb_merkle_pass *p, dlqb_merkle_proof *pr);

#endif

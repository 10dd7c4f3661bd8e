/* Unit tests of the Merkle tree (src/audit/merkle.c): the RFC 6962 test
 * vectors Certificate Transparency implementations use (the roots of the
 * 8-leaf tree and its prefixes, inclusion and consistency proofs over
 * them), every (m, n) up to 70 against a naive recursive MTH written here
 * from the RFC's definition, proofs refused when any hash, index or size
 * is off, and a million leaves in the pass's fixed memory. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/merkle.h"

#define H DLQB_MERKLE_HASH

static const unsigned char *vec_leaf[8];
static size_t vec_len[8] = {0, 1, 1, 2, 2, 4, 8, 16};
static unsigned char vec_data[8][16];

static void vectors(void) {
  static const unsigned char d[8][16] = {{0},
                                         {0x00},
                                         {0x10},
                                         {0x20, 0x21},
                                         {0x30, 0x31},
                                         {0x40, 0x41, 0x42, 0x43},
                                         {0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57},
                                         {0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
                                          0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f}};
  memcpy(vec_data, d, sizeof d);
  for (int i = 0; i < 8; i++) vec_leaf[i] = vec_data[i];
}

static void unhex(const char *s, unsigned char *out) {
  for (size_t i = 0; i < H; i++) {
    unsigned v;
    assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
    out[i] = (unsigned char)v;
  }
}

/* The published roots of the RFC 6962 test tree of 1 to 8 leaves. */
static const char *const roots[8] = {
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
};

/* The pass's root and proof hashes for the given ranges over the first n
 * vector leaves. */
static void pass_over(uint64_t n, const dlqb_merkle_range *r, size_t nr, unsigned char (*out)[H],
                      unsigned char root[H]) {
  dlqb_merkle_pass *p = dlqb_merkle_pass_new();
  assert_non_null(p);
  for (size_t i = 0; i < nr; i++) assert_true(dlqb_merkle_pass_want(p, r[i]));
  unsigned char leaf[H];
  for (uint64_t i = 0; i < n; i++)
    assert_true(dlqb_merkle_pass_add_data(p, vec_leaf[i], vec_len[i], leaf));
  assert_true(dlqb_merkle_pass_root(p, root));
  for (size_t i = 0; i < nr; i++) assert_true(dlqb_merkle_pass_range(p, r[i], out[i]));
  dlqb_merkle_pass_free(p);
}

static void test_rfc6962_roots(void **state) {
  (void)state;
  vectors();
  unsigned char want[H], root[H];
  for (uint64_t n = 1; n <= 8; n++) {
    pass_over(n, NULL, 0, NULL, root);
    unhex(roots[n - 1], want);
    assert_memory_equal(root, want, H);
  }
  /* The empty tree: the SHA-256 of nothing. */
  pass_over(0, NULL, 0, NULL, root);
  unhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", want);
  assert_memory_equal(root, want, H);
}

/* Proof of leaf m in tree n (or consistency m to n) equals the expected hex list. */
static void check_proof(bool consistency, uint64_t m, uint64_t n, const char *const *hex,
                        size_t nhex) {
  dlqb_merkle_range r[DLQB_MERKLE_PROOF_MAX];
  size_t nr =
      consistency ? dlqb_merkle_consistency_ranges(m, n, r) : dlqb_merkle_inclusion_ranges(m, n, r);
  assert_int_equal(nr, nhex);
  unsigned char got[DLQB_MERKLE_PROOF_MAX][H], want[H], root[H], root1[H], leaf[H];
  pass_over(n, r, nr, got, root);
  for (size_t i = 0; i < nhex; i++) {
    unhex(hex[i], want);
    assert_memory_equal(got[i], want, H);
  }
  if (consistency) {
    unhex(roots[m - 1], root1);
    assert_true(dlqb_merkle_verify_consistency(m, n, root1, root, got, nr));
  } else {
    assert_true(dlqb_merkle_leaf(vec_leaf[m], vec_len[m], leaf));
    assert_true(dlqb_merkle_verify_inclusion(m, n, leaf, got, nr, root));
  }
}

static void test_rfc6962_proofs(void **state) {
  (void)state;
  vectors();
  const char *p0_8[] = {"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"};
  const char *p5_8[] = {"bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"};
  const char *p2_3[] = {"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"};
  check_proof(false, 0, 8, p0_8, 3);
  check_proof(false, 5, 8, p5_8, 3);
  check_proof(false, 2, 3, p2_3, 1);
  check_proof(false, 0, 1, NULL, 0);
  const char *c1_8[] = {"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"};
  const char *c6_8[] = {"0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"};
  const char *c2_5[] = {"5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"};
  const char *c3_7[] = {"0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
                        "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
                        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
                        "837dbb152e9b079010717e84e865da4ebc0fa198a806d59d31bf15accef22d0e"};
  check_proof(true, 1, 8, c1_8, 3);
  check_proof(true, 6, 8, c6_8, 3);
  check_proof(true, 2, 5, c2_5, 2);
  check_proof(true, 3, 7, c3_7, 4);
}

/* ---- a naive MTH, straight from RFC 9162 2.1.1 (recursive, all leaves in memory) ---- */

static void naive_leaf(uint64_t i, unsigned char out[H]) {
  unsigned char d[8];
  for (int b = 0; b < 8; b++) d[b] = (unsigned char)(i >> (8 * b));
  assert_true(dlqb_merkle_leaf(d, sizeof d, out));
}

static void naive_mth(uint64_t lo, uint64_t hi, unsigned char out[H]) {
  if (hi - lo == 1) {
    naive_leaf(lo, out);
    return;
  }
  uint64_t k = 1;
  while (2 * k < hi - lo) k *= 2;
  unsigned char l[H], r[H];
  naive_mth(lo, lo + k, l);
  naive_mth(lo + k, hi, r);
  assert_true(dlqb_merkle_node(l, r, out));
}

/* Every proof over every tree up to 70 leaves verifies; every one with a
 * changed hash, index or size, or one hash short, does not. */
static void test_all_small_trees(void **state) {
  (void)state;
  enum { N = 70 };
  for (uint64_t n = 1; n <= N; n++) {
    for (uint64_t m = 0; m <= n; m++) {
      dlqb_merkle_range inc[DLQB_MERKLE_PROOF_MAX], con[DLQB_MERKLE_PROOF_MAX];
      size_t ni = m < n ? dlqb_merkle_inclusion_ranges(m, n, inc) : 0;
      size_t nc = m > 0 ? dlqb_merkle_consistency_ranges(m, n, con) : 0;
      dlqb_merkle_pass *p = dlqb_merkle_pass_new();
      for (size_t i = 0; i < ni; i++) assert_true(dlqb_merkle_pass_want(p, inc[i]));
      for (size_t i = 0; i < nc; i++) assert_true(dlqb_merkle_pass_want(p, con[i]));
      unsigned char leaf[H], root[H], want[H], root_m[H];
      for (uint64_t i = 0; i < n; i++) {
        naive_leaf(i, leaf);
        assert_true(dlqb_merkle_pass_add(p, leaf));
      }
      assert_true(dlqb_merkle_pass_root(p, root));
      naive_mth(0, n, want);
      assert_memory_equal(root, want, H);
      unsigned char pi[DLQB_MERKLE_PROOF_MAX][H], pc[DLQB_MERKLE_PROOF_MAX][H];
      for (size_t i = 0; i < ni; i++) {
        assert_true(dlqb_merkle_pass_range(p, inc[i], pi[i]));
        naive_mth(inc[i].lo, inc[i].hi, want);
        assert_memory_equal(pi[i], want, H);
      }
      for (size_t i = 0; i < nc; i++) assert_true(dlqb_merkle_pass_range(p, con[i], pc[i]));
      dlqb_merkle_pass_free(p);
      if (m < n) {
        naive_leaf(m, leaf);
        assert_true(dlqb_merkle_verify_inclusion(m, n, leaf, pi, ni, root));
        /* (The size is not bound by the path alone: leaf 0 of 3 has the
         * path it has in 4, so a proof is only as good as the signed
         * checkpoint that gives its size and root.) */
        assert_false(dlqb_merkle_verify_inclusion(m, m, leaf, pi, ni, root));
        if (n > 1) assert_false(dlqb_merkle_verify_inclusion(m ^ 1, n, leaf, pi, ni, root));
        if (ni > 0) assert_false(dlqb_merkle_verify_inclusion(m, n, leaf, pi, ni - 1, root));
        for (size_t i = 0; i < ni; i++) {
          pi[i][i % H] ^= 0x40;
          assert_false(dlqb_merkle_verify_inclusion(m, n, leaf, pi, ni, root));
          pi[i][i % H] ^= 0x40;
        }
        leaf[0] ^= 1;
        assert_false(dlqb_merkle_verify_inclusion(m, n, leaf, pi, ni, root));
      }
      if (m > 0) {
        naive_mth(0, m, root_m);
        assert_true(dlqb_merkle_verify_consistency(m, n, root_m, root, pc, nc));
        if (m < n) {
          assert_false(dlqb_merkle_verify_consistency(m, n, root_m, root, pc, nc - 1));
          assert_false(
              dlqb_merkle_verify_consistency(m + 1 == n ? m - 1 : m + 1, n, root_m, root, pc, nc));
          for (size_t i = 0; i < nc; i++) {
            pc[i][0] ^= 1;
            assert_false(dlqb_merkle_verify_consistency(m, n, root_m, root, pc, nc));
            pc[i][0] ^= 1;
          }
          /* A fork: another tree of m leaves. */
          unsigned char fork[H];
          memcpy(fork, root_m, H);
          fork[5] ^= 2;
          assert_false(dlqb_merkle_verify_consistency(m, n, fork, root, pc, nc));
          /* A smaller tree never extends a larger one. */
          assert_false(dlqb_merkle_verify_consistency(n, m, root, root_m, pc, nc));
        } else {
          /* The same size: an empty proof, and nothing else, shows it. */
          assert_false(dlqb_merkle_verify_consistency(m, n, root_m, root, pi, 1));
        }
      }
    }
  }
}

/* A million leaves: the pass's memory is its fixed struct plus what was
 * asked for (a few proofs), and the proofs it gives verify. */
static void test_million_leaves(void **state) {
  (void)state;
  const uint64_t n = 1000000, targets[] = {0, 1, 524287, 524288, 999999, 123456};
  enum { T = sizeof targets / sizeof targets[0] };
  dlqb_merkle_range r[T][DLQB_MERKLE_PROOF_MAX];
  size_t nr[T];
  dlqb_merkle_pass *p = dlqb_merkle_pass_new();
  for (size_t t = 0; t < T; t++) {
    nr[t] = dlqb_merkle_inclusion_ranges(targets[t], n, r[t]);
    assert_true(nr[t] <= 20);
    for (size_t i = 0; i < nr[t]; i++) assert_true(dlqb_merkle_pass_want(p, r[t][i]));
  }
  dlqb_merkle_range c[DLQB_MERKLE_PROOF_MAX];
  size_t nc = dlqb_merkle_consistency_ranges(654321, n, c);
  for (size_t i = 0; i < nc; i++) assert_true(dlqb_merkle_pass_want(p, c[i]));
  dlqb_merkle_range prefix = {0, 654321};
  assert_true(dlqb_merkle_pass_want(p, prefix));
  unsigned char leaf[H], root[H], root_m[H];
  for (uint64_t i = 0; i < n; i++) {
    naive_leaf(i, leaf);
    assert_true(dlqb_merkle_pass_add(p, leaf));
  }
  assert_int_equal(dlqb_merkle_pass_size(p), n);
  assert_true(dlqb_merkle_pass_root(p, root));
  for (size_t t = 0; t < T; t++) {
    unsigned char proof[DLQB_MERKLE_PROOF_MAX][H];
    for (size_t i = 0; i < nr[t]; i++) assert_true(dlqb_merkle_pass_range(p, r[t][i], proof[i]));
    naive_leaf(targets[t], leaf);
    assert_true(dlqb_merkle_verify_inclusion(targets[t], n, leaf, proof, nr[t], root));
  }
  unsigned char proof[DLQB_MERKLE_PROOF_MAX][H];
  for (size_t i = 0; i < nc; i++) assert_true(dlqb_merkle_pass_range(p, c[i], proof[i]));
  assert_true(dlqb_merkle_pass_range(p, prefix, root_m));
  assert_true(dlqb_merkle_verify_consistency(654321, n, root_m, root, proof, nc));
  /* A range not asked for is not known: nothing else was kept. */
  dlqb_merkle_range other = {768, 1024};
  assert_false(dlqb_merkle_pass_range(p, other, root_m));
  dlqb_merkle_pass_free(p);
}

/* A pass started from the compact range of the first s leaves (what an
 * archive of deleted files keeps) gives, for every tree of n > s leaves up
 * to 70, the root of the whole tree, the inclusion proofs of the leaves
 * from s on, and the consistency proof from any m >= s; a range of the
 * first s leaves that is not a node of that compact range is refused. */
static void test_started_from_a_frontier(void **state) {
  (void)state;
  enum { N = 70 };
  for (uint64_t s = 1; s < N; s++) {
    dlqb_merkle_pass *full = dlqb_merkle_pass_new();
    unsigned char leaf[H], front[64][H];
    for (uint64_t i = 0; i < s; i++) {
      naive_leaf(i, leaf);
      assert_true(dlqb_merkle_pass_add(full, leaf));
    }
    size_t nf = dlqb_merkle_pass_frontier(full, front);
    assert_int_equal(nf, (size_t)__builtin_popcountll(s));
    dlqb_merkle_pass_free(full);
    for (uint64_t n = s + 1; n <= N; n++) {
      dlqb_merkle_pass *p = dlqb_merkle_pass_new();
      assert_false(dlqb_merkle_pass_start(p, s, front, nf + 1)); /* the count must match */
      assert_true(dlqb_merkle_pass_start(p, s, front, nf));
      assert_false(dlqb_merkle_pass_start(p, s, front, nf)); /* only an empty pass */
      uint64_t m = s + (n - s) / 2;
      dlqb_merkle_range con[DLQB_MERKLE_PROOF_MAX];
      size_t nc = dlqb_merkle_consistency_ranges(m, n, con);
      for (size_t i = 0; i < nc; i++) assert_true(dlqb_merkle_pass_want(p, con[i]));
      dlqb_merkle_range before = {0, 1};
      if (s > 1 && (s & 1) == 0) assert_false(dlqb_merkle_pass_want(p, before));
      dlqb_merkle_proof pr;
      for (uint64_t i = s; i < n; i++) {
        if (i == n - 1) assert_true(dlqb_merkle_pass_prove_next(p, n, &pr));
        naive_leaf(i, leaf);
        assert_true(dlqb_merkle_pass_add(p, leaf));
      }
      unsigned char root[H], want[H], root_m[H], pc[DLQB_MERKLE_PROOF_MAX][H];
      assert_true(dlqb_merkle_pass_root(p, root));
      naive_mth(0, n, want);
      assert_memory_equal(root, want, H);
      assert_true(dlqb_merkle_pass_proof_finish(p, &pr));
      naive_leaf(n - 1, leaf);
      assert_true(dlqb_merkle_verify_inclusion(n - 1, n, leaf, pr.hash, pr.n, root));
      if (m < n) {
        for (size_t i = 0; i < nc; i++) assert_true(dlqb_merkle_pass_range(p, con[i], pc[i]));
        naive_mth(0, m, root_m);
        assert_true(dlqb_merkle_verify_consistency(m, n, root_m, root, pc, nc));
      }
      dlqb_merkle_pass_free(p);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rfc6962_roots),           cmocka_unit_test(test_rfc6962_proofs),
      cmocka_unit_test(test_all_small_trees),         cmocka_unit_test(test_million_leaves),
      cmocka_unit_test(test_started_from_a_frontier),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

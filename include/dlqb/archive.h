/* The archive of old audit files (docs/audit.md, "Keeping 24 months
 * verifiable"): what the trail's Merkle tree and its request index need
 * of files that are deleted after it, so that `audit prove` and `audit
 * checkpoint` go on from the files kept. The tree's leaves are every line
 * from the first file ever written, and its root depends on all of them;
 * the archive keeps their compact range (at most 64 hashes) and, for the
 * index, each request's key hash and line numbers: no record, no id, no
 * reason. One text document, signed like a text report (dlqb/report.h):
 *
 *     dlq-bridge archive v1
 *     lines <N>                     the archived lines: the tree's first N leaves
 *     root <base64>                 their tree's root
 *     frontier <base64> ...         their compact range, the largest subtree first
 *     last <64 hex> <file name>     the audit hash of the last line, and its file:
 *                                   the next file's file_start prev_hash and prev_file
 *     file <name>                   each archived file, oldest first
 *     index <entries>
 *     <base64 key> <line> ...       each request's key hash, its line numbers
 *                                   ascending; keys ascending
 *     made <time> by <actor> (broker user -, writer <writer>, key <key id>)
 *     signature ed25519 <key id> <128 hex>
 *
 * Nothing in it needs trusting to prove: a tree started from it gives the
 * checkpoint's root and index only if it is true. Pure apart from OpenSSL. */
#ifndef DLQB_ARCHIVE_H
#define DLQB_ARCHIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"
#include "dlqb/evidence.h"

#define DLQB_ARCHIVE_TITLE "dlq-bridge archive v1"

typedef struct {
  uint64_t lines;
  unsigned char root[DLQB_MERKLE_HASH];
  unsigned char frontier[64][DLQB_MERKLE_HASH];
  size_t nfrontier;
  char last_hash[DLQB_AUDIT_HASH_HEX + 1];
  char last_file[256];
  char **files; /* owned */
  size_t nfiles;
  uint64_t entries;
} dlqb_archive;

/* The archive text of the finished pass e (every line from the tree's
 * first, or started from an older archive), unsigned, with made (its
 * "made ..." line, without the newline) before the signature goes on;
 * files: the archived files' names (an older archive's first), oldest
 * first. *out is malloc'd. DLQB_EINVAL when the pass saw no line. */
dlqb_status dlqb_archive_write(const dlqb_evidence *e, const dlqb_evidence_result *res,
                               const char *const *files, size_t nfiles, const char *made,
                               char **out, size_t *len, dlqb_error *err);

/* Parses an archive's text (len: its bytes before the signature line, the
 * signature checked before: dlqb_report_verify) into *a, checking that its
 * compact range has its root. With e (a fresh pass), starts it after the
 * archived lines and puts their index (dlqb_evidence_start, _index_put).
 * DLQB_EINVAL naming the first malformed line. */
dlqb_status dlqb_archive_read(const char *text, size_t len, dlqb_archive *a, dlqb_evidence *e,
                              dlqb_error *err);

void dlqb_archive_release(dlqb_archive *a); /* NULL-safe; *a zeroed */

#endif

/* Evidence for one request from the audit trail's Merkle tree
 * (docs/audit.md, "Evidence for one request"): one pass over the verified
 * log's lines computes the tree's root at a checkpoint's size, the request
 * index the checkpoint commits to, a consistency proof from an earlier
 * size, and one request's records with their inclusion proofs; the bundle
 * those make, and its offline check with public keys only. Pure apart
 * from OpenSSL: the callers read the files and the stream. */
#ifndef DLQB_EVIDENCE_H
#define DLQB_EVIDENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/audit.h"
#include "dlqb/checkpoint.h"
#include "dlqb/error.h"
#include "dlqb/merkle.h"

#define DLQB_EVIDENCE_FORMAT "dlq-bridge evidence v1"

typedef struct dlqb_evidence dlqb_evidence;

/* A pass whose tree ends at `size` lines (UINT64_MAX: every line given),
 * proving consistency from `prev` lines (0: none), collecting the records
 * whose request_id member is request_id (NULL: none). NULL when out of
 * memory. */
dlqb_evidence *dlqb_evidence_new(uint64_t size, uint64_t prev, const char *request_id);
void dlqb_evidence_free(dlqb_evidence *e);

/* Starts the pass after `lines` lines that are no longer given (old
 * files deleted after an archive of them, dlqb/archive.h): from their
 * compact range (n hashes, the largest first, dlqb_merkle_pass_start), so
 * the next line visited is line `lines` of the tree. Before the first
 * line. DLQB_EINVAL when the tree to prove or sign ends inside them, or
 * the consistency proof from the last checkpoint needs them (that
 * checkpoint is older than the archive). */
dlqb_status dlqb_evidence_start(dlqb_evidence *e, uint64_t lines,
                                const unsigned char (*frontier)[DLQB_MERKLE_HASH], size_t n,
                                dlqb_error *err);

/* One request's entry of the index over those lines (its key hash and its
 * line numbers, ascending, each below `lines`): after dlqb_evidence_start,
 * before the first line. A request with lines there has records no bundle
 * can hold: dlqb_evidence_bundle refuses it. */
dlqb_status dlqb_evidence_index_put(dlqb_evidence *e, const unsigned char key[DLQB_MERKLE_HASH],
                                    const uint64_t *lines, size_t n, dlqb_error *err);

/* After a pass: the compact range of its lines (into out, 64 hashes;
 * returns how many), the audit hash of its last line (what the next
 * file's file_start names as prev_hash; false with no line), and every
 * index entry in key order (what an archive of these lines keeps). */
size_t dlqb_evidence_frontier(const dlqb_evidence *e, unsigned char (*out)[DLQB_MERKLE_HASH]);
bool dlqb_evidence_last_hash(const dlqb_evidence *e, char out[DLQB_AUDIT_HASH_HEX + 1]);
dlqb_status dlqb_evidence_each_index(const dlqb_evidence *e,
                                     void (*fn)(void *ctx, const unsigned char *key,
                                                const uint64_t *lines, size_t n),
                                     void *ctx, dlqb_error *err);

/* A dlqb_audit_visit_fn: every line of the log, in file order. */
bool dlqb_evidence_visit(void *e, const char *line, size_t len);

typedef struct {
  uint64_t lines;       /* lines seen: the log's size now */
  dlqb_checkpoint tree; /* size, root, index (origin unset) */
  unsigned char prev_root[DLQB_MERKLE_HASH];
  unsigned char cons[DLQB_MERKLE_PROOF_MAX][DLQB_MERKLE_HASH];
  size_t ncons;
  size_t records; /* of the request, in the tree */
  size_t later;   /* of the request, after the tree's last line */
} dlqb_evidence_result;

/* Ends the pass. DLQB_EINVAL when the log holds fewer lines than size. */
dlqb_status dlqb_evidence_finish(dlqb_evidence *e, dlqb_evidence_result *out, dlqb_error *err);

/* The bundle (one JSON object and a newline, malloc'd into *out) of the
 * request's records, their inclusion proofs, its index entry and proof,
 * and the checkpoint note (with every cosignature line it carries), which
 * must be of this pass's tree. DLQB_EINVAL when the request has no record
 * in the tree. */
dlqb_status dlqb_evidence_bundle(dlqb_evidence *e, const char *note, size_t note_len, char **out,
                                 size_t *len, dlqb_error *err);

/* What dlqb_evidence_verify found. */
typedef struct {
  char request_id[512];
  size_t records;
  dlqb_checkpoint cp;
  char key_id[DLQB_AUDIT_KEY_ID_HEX + 1];
  size_t cosigners; /* of the witness keys given */
} dlqb_evidence_check;

/* Checks a bundle offline: the checkpoint's signature with a key of ring,
 * at least `need` cosignatures of the witness keys given, every record's
 * inclusion proof and request_id, and the index entry showing the records
 * are every record of the request in the tree. DLQB_EINVAL naming the
 * first thing that fails. */
dlqb_status dlqb_evidence_verify(const char *bundle, size_t len, const dlqb_audit_keyring *ring,
                                 const dlqb_witness_key *witnesses, size_t nwitnesses, size_t need,
                                 dlqb_evidence_check *out, dlqb_error *err);

/* ---- the checkpoint's messages in dsr.audit.anchors ----
 * {"v":2,"type":"checkpoint","note":"...","prev_size":M,"consistency":["<b64>",...]}
 * {"v":2,"type":"cosignature","size":N,"root":"<b64>","line":"— name <b64>"} */

/* The checkpoint message (malloc'd, no newline). */
char *dlqb_evidence_checkpoint_msg(const char *note, size_t note_len, uint64_t prev,
                                   const unsigned char (*cons)[DLQB_MERKLE_HASH], size_t ncons);

/* The cosignature message of a cosignature line (no newline) for cp. */
char *dlqb_evidence_cosig_msg(const dlqb_checkpoint *cp, const char *line);

/* One message of the stream, read: kind 0 for neither. */
typedef struct {
  int kind;   /* 1 checkpoint, 2 cosignature */
  char *note; /* checkpoint: the note (malloc'd) */
  size_t note_len;
  uint64_t prev_size;
  unsigned char cons[DLQB_MERKLE_PROOF_MAX][DLQB_MERKLE_HASH];
  size_t ncons;
  uint64_t size; /* cosignature: of which tree */
  unsigned char root[DLQB_MERKLE_HASH];
  char line[512]; /* the cosignature line */
} dlqb_evidence_msg;

bool dlqb_evidence_msg_parse(const char *msg, size_t len, dlqb_evidence_msg *out);
void dlqb_evidence_msg_release(dlqb_evidence_msg *m);

/* From the stream's messages (oldest first): the latest checkpoint of
 * origin whose log signature verifies with a key of ring, with every
 * cosignature line published for exactly its size and root appended once
 * (the note as its witnesses cosigned it; the verifier judges each line),
 * into *note (malloc'd) and *cp. False when there is none. */
bool dlqb_evidence_latest(const dlqb_audit_lines *msgs, const dlqb_audit_keyring *ring,
                          const char *origin, char **note, size_t *len, dlqb_checkpoint *cp);

#endif

/* Checkpoints of the audit trail's Merkle tree, in the C2SP
 * tlog-checkpoint signed-note format, and witness cosignatures in the
 * C2SP tlog-cosignature format (docs/audit.md, "Checkpoints and
 * witnesses"). A checkpoint is the note text
 *
 *     <origin>\n<tree size>\n<base64 root hash>\n
 *
 * then a blank line and one signature line per signer:
 *
 *     — <name> <base64(key id (4 bytes) || signature)>\n
 *
 * The log's line is Ed25519 over the text, its key id the first 4 bytes
 * of SHA-256(name || "\n" || 0x01 || public key), name = origin. A
 * witness's line is a cosignature/v1: Ed25519 over "cosignature/v1\ntime
 * <t>\n" + text, its key id SHA-256(name || "\n" || 0x04 || public
 * key)[:4], the line's bytes key id || t (8 bytes, big-endian) ||
 * signature. Pure apart from OpenSSL; no I/O. */
#ifndef DLQB_CHECKPOINT_H
#define DLQB_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/audit.h"
#include "dlqb/error.h"
#include "dlqb/merkle.h"

#define DLQB_CHECKPOINT_NAME_MAX       128  /* an origin or a witness name */
#define DLQB_CHECKPOINT_MAX            8192 /* a note with its signatures */
#define DLQB_CHECKPOINT_DEFAULT_ORIGIN "dlq-bridge/audit"

struct evp_pkey_st;

typedef struct {
  char origin[DLQB_CHECKPOINT_NAME_MAX];
  uint64_t size;
  unsigned char root[DLQB_MERKLE_HASH];
  size_t text_len; /* the signed text: the note's first text_len bytes */
  /* The request index (docs/audit.md): the extension line
   * "dlq-bridge-index <entries> <base64 root>" after the root hash. */
  bool has_index;
  uint64_t index_entries;
  unsigned char index_root[DLQB_MERKLE_HASH];
} dlqb_checkpoint;

#define DLQB_CHECKPOINT_INDEX_TAG "dlq-bridge-index "

/* The signed note of cp (origin, size, root and, when has_index, the
 * index line), signed with the log's key, into out (DLQB_CHECKPOINT_MAX
 * bytes); *len its length. origin: printable ASCII without spaces or '+'.
 * DLQB_EINVAL for a bad origin. */
dlqb_status dlqb_checkpoint_sign(struct evp_pkey_st *key, const dlqb_checkpoint *cp, char *out,
                                 size_t *len, dlqb_error *err);

/* Parses a note's text (origin, size, root) without checking any
 * signature. DLQB_EINVAL naming what is wrong. */
dlqb_status dlqb_checkpoint_parse(const char *note, size_t len, dlqb_checkpoint *cp,
                                  dlqb_error *err);

/* Parses and checks the log's signature: a line named by the origin whose
 * key id is that of a key of ring (not revoked) and whose signature
 * verifies. key_id (DLQB_AUDIT_KEY_ID_HEX + 1) receives the audit key id
 * of the signer. DLQB_EINVAL when none does. */
dlqb_status dlqb_checkpoint_verify(const char *note, size_t len, const dlqb_audit_keyring *ring,
                                   dlqb_checkpoint *cp, char *key_id, dlqb_error *err);

/* A witness's public key: its name, key id and Ed25519 key. */
typedef struct {
  char name[DLQB_CHECKPOINT_NAME_MAX];
  unsigned char id[4];
  struct evp_pkey_st *pub; /* owned: dlqb_witness_key_release */
} dlqb_witness_key;

void dlqb_witness_key_release(dlqb_witness_key *k);

/* A witness key in the note verifier-key form
 * "<name>+<8 hex key id>+<base64(0x04 || 32-byte public key)>" (what
 * `audit witness --print-vkey` prints). DLQB_EINVAL when malformed or the
 * id does not match. */
dlqb_status dlqb_witness_vkey_parse(const char *vkey, dlqb_witness_key *out, dlqb_error *err);

/* The verifier key of a witness's private key under name into out (256). */
dlqb_status dlqb_witness_vkey_of(struct evp_pkey_st *key, const char *name, char *out, size_t cap,
                                 dlqb_error *err);

/* The cosignature line (with its newline) of the witness name/key over the
 * note's text at time t (seconds since the epoch), into line (512). */
dlqb_status dlqb_checkpoint_cosign(struct evp_pkey_st *key, const char *name, uint64_t t,
                                   const char *note, size_t text_len, char *line, size_t cap,
                                   dlqb_error *err);

/* Whether one signature line (without its newline) is a valid cosignature
 * of k over the text note[0..text_len); *t receives its time. */
bool dlqb_checkpoint_cosig_ok(const dlqb_witness_key *k, const char *note, size_t text_len,
                              const char *line, size_t line_len, uint64_t *t);

/* Counts the keys of keys[0..n) that validly cosign the note (each key
 * once), marking them in which (n entries, may be NULL). */
size_t dlqb_checkpoint_cosigners(const char *note, size_t len, const dlqb_checkpoint *cp,
                                 const dlqb_witness_key *keys, size_t n, bool *which);

/* Base64 (standard alphabet, padded): encode n bytes into out (4*ceil(n/3)
 * + 1); decode returns the byte count, or -1 when s[0..len) is not base64
 * or would exceed cap. */
void dlqb_base64_encode(const unsigned char *in, size_t n, char *out);
long dlqb_base64_decode(const char *s, size_t len, unsigned char *out, size_t cap);

#endif

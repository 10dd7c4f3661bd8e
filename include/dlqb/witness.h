/* The witness's judgement and its state (docs/audit.md, "Witnesses"): a
 * witness cosigns a checkpoint only when a consistency proof shows it
 * extends the last one it cosigned, and refuses a smaller tree or one of
 * the same size with another root (a fork). Pure: the command reads the
 * stream, keeps the state file and publishes. */
#ifndef DLQB_WITNESS_H
#define DLQB_WITNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/checkpoint.h"
#include "dlqb/evidence.h"

/* What the witness last cosigned, and how far into the stream it read. */
typedef struct {
  char origin[DLQB_CHECKPOINT_NAME_MAX];
  uint64_t size; /* 0: nothing cosigned yet */
  unsigned char root[DLQB_MERKLE_HASH];
  uint64_t seen; /* stream messages judged */
  /* SHA-256 of the last of them (seen > 0): a stream deleted and made
   * again, or cut, no longer holds it there. */
  unsigned char last[DLQB_MERKLE_HASH];
} dlqb_witness_state;

/* The state file: one JSON object
 * {"origin":"...","size":N,"root":"<b64>","seen":K,"last":"<b64>"}. parse: false when
 * malformed. format: into out (512), with a newline. */
bool dlqb_witness_state_parse(const char *text, size_t len, dlqb_witness_state *out);
void dlqb_witness_state_format(const dlqb_witness_state *s, char *out, size_t cap);

typedef enum {
  DLQB_WITNESS_COSIGN, /* consistent: cosign, and it becomes the state */
  DLQB_WITNESS_SAME,   /* the tree already cosigned: nothing to do */
  DLQB_WITNESS_REFUSE, /* smaller, forked, or not shown to be consistent */
} dlqb_witness_verdict;

/* Judges the checkpoint cp (its log signature already checked) that came
 * with message m (its consistency proof from m->prev_size), against s.
 * why (one line) says what was refused and names both trees. */
/* Whether the stream still holds, as message seen - 1, the message the
 * state says it read last (msgs: the whole stream, oldest first); false
 * with why naming what changed. */
bool dlqb_witness_stream_same(const dlqb_witness_state *s, const dlqb_audit_lines *msgs, char *why,
                              size_t len);

/* Records message i of msgs as the last one read. */
void dlqb_witness_mark(dlqb_witness_state *s, const dlqb_audit_lines *msgs, size_t i);

dlqb_witness_verdict dlqb_witness_judge(const dlqb_witness_state *s, const dlqb_checkpoint *cp,
                                        const dlqb_evidence_msg *m, char *why, size_t len);

#endif

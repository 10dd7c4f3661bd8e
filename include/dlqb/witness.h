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
} dlqb_witness_state;

/* The state file: one JSON object
 * {"origin":"...","size":N,"root":"<b64>","seen":K}. parse: false when
 * malformed. format: into out (512), with a newline. */
bool dlqb_witness_state_parse(const char *text, size_t len, dlqb_witness_state *out);
void dlqb_witness_state_format(const dlqb_witness_state *s, char *out, size_t cap);

typedef enum {
  DLQB_WITNESS_COSIGN,  /* consistent: cosign, and it becomes the state */
  DLQB_WITNESS_SAME,    /* the tree already cosigned: nothing to do */
  DLQB_WITNESS_REFUSE,  /* smaller, forked, or not shown to be consistent */
} dlqb_witness_verdict;

/* Judges the checkpoint cp (its log signature already checked) that came
 * with message m (its consistency proof from m->prev_size), against s.
 * why (one line) says what was refused and names both trees. */
dlqb_witness_verdict dlqb_witness_judge(const dlqb_witness_state *s, const dlqb_checkpoint *cp,
                                        const dlqb_evidence_msg *m, char *why, size_t len);

#endif

/* What the catalog's reader (catalog_stream.c) shares with its verifying
 * passes (catalog_verify.c): the reader itself, a fold up to now under its
 * lock, and the links' ends. Private to src/amqp/. */
#ifndef DLQB_AMQP_CATALOG_PRIVATE_H
#define DLQB_AMQP_CATALOG_PRIVATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "dlqb/catalog_stream.h"

struct dlqb_catalog_reader {
  pthread_mutex_t lock;
  dlqb_catalog_target t;
  char checkpoint[DLQB_CONFIG_STR_MAX];
  dlqb_catalog *c;
  bool have_mark; /* c is the fold up to mark */
  dlqb_catalog_mark mark;
  bool checkpoint_tried;
  bool from_checkpoint;
  uint64_t since_checkpoint;  /* events folded since the checkpoint was written or read */
  bool from_snapshot;         /* the fold began at a snapshot in the stream */
  dlqb_catalog_snapfind find; /* the snapshots the fold has read past */
  bool cut;                   /* the last fold found the stream cut, no snapshot to use */
  dlqb_catalog_mark cut_mark; /* where that fold's read ended */
};

/* With r->lock held: opens a link and folds up to a marker of its own;
 * with queue, reads its depth into *before first (before the marker).
 * *link is the caller's to end (dlqb__catalog_end_link). */
dlqb_status dlqb__catalog_locked_refresh(dlqb_catalog_reader *r, const dlqb_broker_conf *broker,
                                         const char *queue, uint32_t *before, dlqb_link **link,
                                         uint64_t *events, double *secs, dlqb_error *err);

/* Closes link, or aborts it when st says it timed out or was lost. */
void dlqb__catalog_end_link(dlqb_link *link, dlqb_status st);

/* Waits for the confirms of the first seq publishes on ch of link. */
dlqb_status dlqb__catalog_await_confirms(dlqb_link *link, amqp_channel_t ch, uint64_t seq,
                                         const char *stream, dlqb_error *err);

#endif

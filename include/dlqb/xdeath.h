/* How a message reached the failure inbox, read from the headers the
 * broker (x-death) or a worker (worker_error) put on it. Pure, no
 * allocation. */
#ifndef DLQB_XDEATH_H
#define DLQB_XDEATH_H

#include <amqp.h>
#include <stdbool.h>

#include "dlqb/envelope.h" /* DLQB_LAST_ERROR_MAX */

typedef enum {
  DLQB_FAIL_REJECTED,       /* x-death reason "rejected": basic.reject/nack */
  DLQB_FAIL_DELIVERY_LIMIT, /* x-death reason "delivery_limit": poison */
  DLQB_FAIL_EXPIRED,        /* x-death reason "expired" (a TTL on the work queue) */
  DLQB_FAIL_MAXLEN,         /* x-death reason "maxlen" */
  DLQB_FAIL_REPORTED        /* no x-death: a worker published it with worker_error */
} dlqb_failure_kind;

typedef struct {
  dlqb_failure_kind kind;
  char queue[128]; /* x-death[0].queue, "" when absent */
  bool has_worker_error;
  char worker_error[DLQB_LAST_ERROR_MAX + 1]; /* sanitised to printable UTF-8 */
} dlqb_failure;

/* Reads x-death[0] (the most recent death; the broker keeps it first) and
 * worker_error. An x-death[0] that is an expiry from a dsr.retry.* delay
 * queue is backoff history (a worker's copy of a retried task), so such a
 * message counts as DLQB_FAIL_REPORTED. Never fails: malformed x-death (wrong type, empty array,
 * missing reason) yields DLQB_FAIL_REPORTED with queue "", and the envelope
 * check decides separately whether the message is valid. */
void dlqb_failure_read(const amqp_table_t *headers, dlqb_failure *out);

/* As dlqb_failure_read, for a pipeline whose delay queues start with
 * retry_prefix ("redaction.retry."); dlqb_failure_read is "dsr.retry.". */
void dlqb_failure_read_prefix(const amqp_table_t *headers, const char *retry_prefix,
                              dlqb_failure *out);

/* The broker's latest death record, x-death[0], or NULL when the header is
 * absent or not an array whose first entry is a table. */
const amqp_table_t *dlqb_header_first_death(const amqp_table_t *t);

/* Every x-death entry as "QUEUE REASON COUNT", joined by "; ", into buf
 * (cap bytes, always NUL-terminated; "" without x-death): the broker's
 * delivery history for the audit trail. A client can forge x-death, so
 * each part is sanitised text ('?' for a missing part or an entry that is
 * not a table) and the whole is cut with "..." when it does not fit.
 * Returns the length written. */
size_t dlqb_deaths_text(const amqp_table_t *headers, char *buf, size_t cap);

/* x-delivery-count (a quorum queue's count of earlier deliveries) into
 * *out; false when absent or not a non-negative integer. */
bool dlqb_header_delivery_count(const amqp_table_t *headers, int64_t *out);

/* True when an x-death header is present but is not a non-empty array of
 * tables, the only shape the broker writes: a client forged it. (RabbitMQ
 * 3.10.8's quorum-queue dead-lettering crashes on an array of strings.) */
bool dlqb_header_xdeath_forged(const amqp_table_t *t);

#endif

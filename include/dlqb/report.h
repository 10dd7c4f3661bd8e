/* The audit report (`audit report`): for every request the audit trail
 * saw in a period, its last known state, and the signature that lets an
 * auditor check the report with the writers' public keys alone.
 *
 * Two parts, both pure (no broker, no clock, no files):
 *  - the derivation: verified trail lines, the items read from
 *    dsr.dlq.manual and compliance_review, and the completion ledger in;
 *    one entry per request and counts per state out (src/audit/report.c);
 *  - the signature over the report's exact bytes, in the audit record's
 *    own convention (src/audit/report_sign.c).
 *
 * A request is (request_id, source_system), as the completion ledger
 * names it; a record without a request_id (an invalid task) stands for
 * itself under its message_id. "Seen in the period": at least one hop
 * recorded with a time in [from, to]. Its state is the one known when the
 * report is made (the queues and the ledger are read then): --to bounds
 * which requests are in the report, not how far their story is followed.
 * Records before `from` are skipped (a request in the report has a later
 * hop anyway); records after `to` extend only requests already seen. */
#ifndef DLQB_REPORT_H
#define DLQB_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/audit.h"
#include "dlqb/deadline.h"
#include "dlqb/error.h"
#include "dlqb/ledger.h"
#include "dlqb/pipeline.h"

/* In precedence order: the first that applies is the state. */
typedef enum {
  DLQB_RS_COMPLETED, /* in the completion ledger, from a completion writer */
  /* read in compliance_review (claimed or not) or dsr.dlq.manual, unless
   * its last hop took it out of there after the read (the trail is newer) */
  DLQB_RS_IN_REVIEW,
  DLQB_RS_IN_DLQ,
  DLQB_RS_RESOLVED, /* last hop: removed with a note (resolve, review decide --resolve) */
  DLQB_RS_WAITING,  /* last hop: to dsr.work or a retry queue, and not completed */
  DLQB_RS_UNKNOWN,  /* none of these: `detail` says why */
  DLQB_RS__COUNT
} dlqb_report_state;

/* Stable lower-case name: "completed", "in_review", "in_dlq", "resolved",
 * "waiting", "unknown". */
const char *dlqb_report_state_name(dlqb_report_state s);

typedef struct dlqb_report dlqb_report;

/* Requests seen in [from_ms, to_ms] (epoch ms, inclusive). NULL when out
 * of memory. */
dlqb_report *dlqb_report_new(int64_t from_ms, int64_t to_ms);
void dlqb_report_free(dlqb_report *r); /* NULL-safe */

/* The pipeline reported on (default: dsr with today's names): its DLQ,
 * review queue, work queue and retry prefix name the states, and only its
 * records count (dlqb_audit_record_in_pipeline). Call before the first
 * item or line. */
void dlqb_report_pipeline(dlqb_report *r, const dlqb_pipeline *p);

/* One item read from queue (the pipeline's DLQ or review queue; others are
 * ignored); owner is the review claim ("" unclaimed). Strings are
 * sanitised and copied. */
dlqb_status dlqb_report_item(dlqb_report *r, const char *queue, const char *message_id,
                             const char *request_id, const char *source_system, const char *owner,
                             dlqb_error *err);

/* How queue's read went: when it began (epoch ms: a hop into it recorded
 * later may not be in what was read) and how many other consumers were on
 * it (one may hold an item unacked, which the read then did not see).
 * Both are named in the `detail` of a request not found there. */
void dlqb_report_queue_read(dlqb_report *r, const char *queue, int64_t read_ms, uint32_t others);

/* One verified log line (without its newline), in log order. Lines that
 * are not hops (chain_start, ...) change nothing. False when out of memory. */
bool dlqb_report_line(dlqb_report *r, const char *line, size_t len);

/* The completion ledger: the pairs from completion writers (verified) and
 * the others (unverified, may be NULL). Borrowed until dlqb_report_finish. */
void dlqb_report_ledger(dlqb_report *r, const dlqb_ledger *verified, const dlqb_ledger *unverified);

/* ---- response times: the statutory side ---------------------------------
 * Per request, when it was received, when (and how) it was closed, and
 * its deadline under the `deadlines` rules for its legal basis
 * (dlqb/deadline.h); per (legal basis, action), counts, the median and
 * mean time from receipt to close, how many closed past their deadline
 * and how many are open past it now (docs/audit.md, "Response times").
 *
 * Receipt: the earliest of the request's records' received_at (the
 * router's first-failure hop: the task's own earliest time, a producer's
 * claim bounded by the bridge's clock; dlqb_route_plan_receipt) and of the
 * records' own times (the trail's first sight, "trail"), records before
 * `from` included: a received_at later than its record's time is no
 * receipt. Close: a completed request's completion time (the ledger
 * entry's timestamp, dlqb_ledger_completed_at; none, or one later than now
 * plus the clock skew, is no time), or a resolved one's resolving hop. */
typedef enum {
  DLQB_RESP_OPEN,      /* not closed; its deadline not passed now, or none */
  DLQB_RESP_OPEN_LATE, /* not closed, past its deadline now */
  DLQB_RESP_ON_TIME,   /* closed at or before its deadline */
  DLQB_RESP_LATE,      /* closed after its deadline */
  DLQB_RESP_CLOSED,    /* closed; its legal basis has no deadline */
  DLQB_RESP_NO_TIME,   /* completed, but the ledger gives no usable time */
  DLQB_RESP_CLOCK,     /* closed before its receipt: two clocks disagree; not measured */
  DLQB_RESP__COUNT
} dlqb_report_response;

/* "open", "open_late", "on_time", "late", "closed", "no_time", "clock". */
const char *dlqb_report_response_name(dlqb_report_response x);

/* The deadline rules (borrowed until dlqb_report_finish; none without
 * this call) and the report's "now" (epoch ms: when the queues and the
 * ledger were read), before dlqb_report_finish. */
void dlqb_report_deadlines(dlqb_report *r, const dlqb_deadlines *d, int64_t now_ms);

typedef struct {
  const char *request_id; /* "" for a record without one */
  const char *source_system;
  const char *message_id; /* of the last hop */
  dlqb_report_state state;
  const char *queue; /* in_dlq, in_review: that queue; waiting: the last hop's to */
  const char *owner; /* in_review: who claimed it, "" unclaimed */
  const char *note;  /* resolved: the resolution's note (the hop's reason) */
  const char *last_event, *last_time, *last_actor, *last_writer;
  unsigned long hops;         /* recorded from `from` on */
  bool unverified_completion; /* a ledger entry for it from someone not a completion writer */
  /* Why, for a person: set for unknown, and where a state needs a word
   * (a completed request still in a queue, a waiting one). */
  const char *detail;
  /* The response (above). */
  const char *legal_basis, *action; /* as last recorded; "" none */
  int64_t received_ms;
  const char *received_from; /* "first_seen_at", ..., "bridge", or "trail" */
  bool has_due;              /* its legal basis has a rule */
  int64_t due_ms;
  dlqb_report_response response;
  bool closed;           /* completed with a usable time, or resolved */
  int64_t closed_ms;     /* closed: when */
  const char *closed_by; /* "completion", "resolution", or "" */
  /* closed: closed - received (negative only for DLQB_RESP_CLOCK); open:
   * now - received, 0 at least; no_time: 0. */
  int64_t elapsed_ms;
} dlqb_report_entry;

/* One (legal basis, action) of the report's requests. */
typedef struct {
  const char *legal_basis, *action;
  const dlqb_deadline_rule *rule; /* NULL: no deadline */
  unsigned long requests;
  unsigned long received; /* of them, received in [from, to] */
  unsigned long completed, resolved;
  /* Closed with both times and in order (on_time, late, closed): what the
   * median and mean are over; both 0 when none. */
  unsigned long measured;
  int64_t median_ms, mean_ms;
  unsigned long resp[DLQB_RESP__COUNT];
} dlqb_report_group;

/* The groups, sorted by legal basis then action, after dlqb_report_finish. */
const dlqb_report_group *dlqb_report_groups(const dlqb_report *r, size_t *n);

typedef struct {
  unsigned long state[DLQB_RS__COUNT];
  unsigned long total;      /* requests in the report: the sum of state[] */
  unsigned long outside;    /* queue items of requests not seen in the period */
  unsigned long unverified; /* requests with an unverified completion entry */
  /* Completions the ledger dates in [from, to] (from completion writers)
   * of requests not in the report: last seen by the trail before `from`,
   * and never seen by it up to `to` (tasks that never failed); and of the
   * latter, how many without a time. */
  unsigned long completed_before_period, completed_never_in_trail;
  unsigned long completed_never_in_trail_no_time;
} dlqb_report_counts;

/* Derives every state. After it, dlqb_report_entries and the counts are
 * valid; lines and items are no longer accepted. */
dlqb_status dlqb_report_finish(dlqb_report *r, dlqb_report_counts *counts, dlqb_error *err);

/* The entries, sorted by request_id, source_system, message_id (stable
 * across runs: two reports of one period compare line by line). */
const dlqb_report_entry *dlqb_report_entries(const dlqb_report *r, size_t *n);

/* ---- the signature (report_sign.c) -------------------------------------
 * Two forms, one per output:
 *  - JSON: one line, a JSON object whose members include "key" (the
 *    signer's key id), ending in ,"sig":"<128 hex>"}: the signature is
 *    Ed25519 over the line without that member (its bytes up to the sig
 *    member, then "}"), exactly as an audit record is signed.
 *  - text: the report's lines, then one last line
 *    "signature ed25519 <key id> <128 hex>\n"; the signature is over every
 *    byte before that line.
 * Either way a changed byte anywhere fails, and only public keys are needed. */

#define DLQB_REPORT_SIG_PREFIX "signature ed25519 "

struct evp_pkey_st;

/* Signs body (len bytes). json: body is one JSON object (no newline) with
 * its "key" member set to key_id; out = body with the sig member, "\n".
 * text: body is whole lines; out = body + the signature line. *out is
 * malloc'd (the caller frees it). */
dlqb_status dlqb_report_sign(struct evp_pkey_st *key, const char *key_id, const char *body,
                             size_t len, bool json, char **out, size_t *out_len, dlqb_error *err);

typedef struct {
  bool json;
  char key_id[DLQB_AUDIT_KEY_ID_HEX + 1];
  char key_file[256]; /* the public key file that checked it */
  size_t body_len;    /* text: the bytes before the signature line */
} dlqb_report_check;

/* Checks a signed report against ring: DLQB_OK when it is signed by a key
 * of the ring that is not revoked and no byte changed; else DLQB_EINVAL
 * with one line saying what is wrong (not a signed report, an unknown key,
 * a revoked key, a signature that does not match). */
dlqb_status dlqb_report_verify(const dlqb_audit_keyring *ring, const char *buf, size_t len,
                               dlqb_report_check *out, dlqb_error *err);

#endif

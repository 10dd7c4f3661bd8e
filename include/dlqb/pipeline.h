/* A pipeline as data: the names of its queues and exchange, its envelope
 * profile (which headers identify a task, which are required, which have a
 * closed set of values, which time starts the SLA clock, whether a body
 * may enter its DLQ) and its retry, SLA and escalation policy. Pure: no
 * I/O, nothing allocated.
 *
 * Three profiles ship built in (docs/pipelines.md):
 *   dsr             request_id + source_system; legal_basis and action from
 *                   closed sets (today's envelope, exactly as strict)
 *   redaction       item_id + doc_id; the DLQ carries references only: a
 *                   body is never carried into its DLQ
 *   reconciliation  discrepancy_id + category; the body is the context
 *                   needed to reprocess, kept
 * Operators define others under `pipelines` in the config file
 * (dlqb/config.h parses them; docs/configuration.md).
 *
 * A deployment without `pipelines` has one pipeline, named "dsr", whose
 * names are exactly the constants of dlqb/names.h and whose policy is the
 * top-level settings: nothing changes for it. */
#ifndef DLQB_PIPELINE_H
#define DLQB_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"

#define DLQB_MAX_RETRY_DELAYS   16
#define DLQB_MAX_PIPELINES      8
#define DLQB_PIPELINE_NAME_MAX  32  /* bytes of a pipeline or profile name, with the NUL */
#define DLQB_HEADER_NAME_MAX    64  /* bytes of a profile's header name, with the NUL */
#define DLQB_PROFILE_MAX_FIELDS 8   /* the identity fields included */
#define DLQB_FIELD_VALUES_MAX   256 /* a closed set as "a,b,c", with the NUL */
/* Bytes of a queue or exchange name, with the NUL (dlqb/topology.h's
 * DLQB_NAME_MAX); a retry prefix leaves room for the delay ("5s", "2m"). */
#define DLQB_QNAME_MAX        64
#define DLQB_RETRY_PREFIX_MAX 48

/* The pipeline every deployment has when `pipelines` is not configured. */
#define DLQB_PIPELINE_DEFAULT "dsr"

typedef struct {
  char name[DLQB_HEADER_NAME_MAX];
  bool required;
  /* The closed set of values, comma-separated ("access,deletion"); "" =
   * any non-blank UTF-8 text without control characters. */
  char values[DLQB_FIELD_VALUES_MAX];
} dlqb_field_rule;

typedef struct {
  char name[DLQB_PIPELINE_NAME_MAX]; /* "dsr", or the pipeline's name for an inline one */
  /* fields[0] and fields[1] are the identity: what the ledger, replay's
   * filters and the audit trail key a task by (DSR: request_id and
   * source_system). Both always required, without a closed set. */
  dlqb_field_rule fields[DLQB_PROFILE_MAX_FIELDS];
  size_t nfields; /* >= 2 */
  /* The header whose time starts the SLA clock: first_seen_at (stamped by
   * the bridge when absent), or another field of the profile, then an
   * ISO-8601 UTC time or AMQP timestamp. */
  char sla_clock[DLQB_HEADER_NAME_MAX];
  /* True: a task's body never enters this pipeline's DLQ (references only). */
  bool dlq_body_forbidden;
  /* True: failure groups (dlqb/group.h) are split by fields[1] as well as
   * by reason and error (dsr: source_system, reconciliation: category);
   * false where fields[1] is one per item (redaction: doc_id), which would
   * make every item a group of its own. */
  bool group_by_second;
} dlqb_profile;

/* The routing policy: the top-level settings of these names
 * (dlqb_config's policy) and a pipeline's, which are the top level's
 * where the pipeline sets none (dlqb_config_pipeline merges them). */
typedef struct {
  int max_attempts;     /* default max_attempts for envelopes without one */
  int poison_threshold; /* consumer crashes before the broker dead-letters */
  uint64_t retry_delays_ms[DLQB_MAX_RETRY_DELAYS];
  size_t retry_delay_count; /* >= 1; the last delay repeats */
  int retry_jitter_percent; /* 0..90: a delay d becomes uniform in [d*(1-j), d] */
  uint64_t sla_budget_ms;   /* a retry may not land past first_seen_at + this */
  int prefetch;             /* in-flight window of the router */
  uint64_t dlq_sla_ms;      /* DLQ items older than this are escalated */
  int max_replays;          /* failures after this many replays escalate */
  int edit_approval;        /* 1: `edit` proposes, a different broker user approves */
  /* The DLQ and review queue are classic queues (one copy, on the node
   * that declared them) instead of quorum queues: dlq_queue_type. */
  bool dlq_classic;
} dlqb_policy_conf;

typedef struct {
  char name[DLQB_PIPELINE_NAME_MAX];
  dlqb_profile profile;
  char work[DLQB_QNAME_MAX];                /* producers publish here */
  char failed[DLQB_QNAME_MAX];              /* the failure inbox the router consumes */
  char dlx[DLQB_QNAME_MAX];                 /* the fanout the work queue dead-letters to */
  char dlq[DLQB_QNAME_MAX];                 /* needs a human or a replay */
  char review[DLQB_QNAME_MAX];              /* the escalation target */
  char completed[DLQB_QNAME_MAX];           /* the completion ledger (stream) */
  char catalog[DLQB_QNAME_MAX];             /* the DLQ and review catalog (stream) */
  char retry_prefix[DLQB_RETRY_PREFIX_MAX]; /* + the delay: "dsr.retry.5s" */
  dlqb_policy_conf policy;
} dlqb_pipeline;

/* The built-in profile `name` ("dsr", "redaction", "reconciliation") into
 * out; DLQB_EINVAL (naming the built-in ones) for any other name. */
dlqb_status dlqb_profile_builtin(const char *name, dlqb_profile *out, dlqb_error *err);

/* "dsr, redaction, reconciliation": for errors and --help. */
const char *dlqb_profile_builtin_names(void);

/* The index of the profile field `header`, or -1. */
long dlqb_profile_field(const dlqb_profile *p, const char *header);

/* Sets p's queue and exchange names to the defaults for a pipeline called
 * name: for "dsr" exactly today's (dlqb/names.h: dsr.work, dsr.failed,
 * dsr.dlx, dsr.dlq.manual, compliance_review, dsr.completed, dsr.retry.),
 * for any other N: N.work, N.failed, N.dlx, N.dlq.manual, N.review,
 * N.completed, N.retry. (a valid name fits them all). Also copies name. */
void dlqb_pipeline_default_names(dlqb_pipeline *p, const char *name);

/* True when p has the default pipeline's name, today's queue names and the
 * dsr profile (its policy may differ): what code written for the
 * constants of dlqb/names.h serves. */
bool dlqb_pipeline_is_default(const dlqb_pipeline *p);

/* Checks a pipeline name: 1 to 31 bytes of a-z, 0-9, '_' and '-',
 * starting with a letter (it prefixes queue names, labels metrics and
 * appears in the audit trail). */
bool dlqb_pipeline_name_valid(const char *name);

/* Checks a queue or exchange name a pipeline may use: 1 to 63 bytes of
 * A-Z a-z 0-9 . _ - :, not starting with "amq." (the broker's), not the
 * audit anchors stream. The error says which rule failed. */
dlqb_status dlqb_pipeline_queue_name_check(const char *name, size_t max, dlqb_error *err);

/* Checks a header name for a profile field: 1 to 63 bytes of A-Z a-z 0-9
 * _ -, not one of the headers the bridge itself reads or writes
 * (attempt, dlq_reason, x-death, ...). */
dlqb_status dlqb_profile_field_name_check(const char *name, dlqb_error *err);

/* True when two pipelines of set[0..n) would share a queue or exchange
 * name (also the retry prefix). *what names the first clash. */
bool dlqb_pipelines_clash(const dlqb_pipeline *set, size_t n, char *what, size_t len);

#endif

/* Pipelines as data: the built-in profiles, default names, name rules. */
#include "dlqb/pipeline.h"

#include <stdio.h>
#include <string.h>

#include "dlqb/names.h"

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

typedef struct {
  const char *name;
  bool required;
  const char *values;
} field_row;

typedef struct {
  const char *name;
  field_row fields[DLQB_PROFILE_MAX_FIELDS];
  size_t nfields;
  bool dlq_body_forbidden;
  bool group_by_second;
} profile_row;

/* The seeds' pipelines. The DSR row is today's envelope (envelope.c's
 * rules, in the same order, so its errors are today's). */
static const profile_row builtins[] = {
    {"dsr",
     {{DLQB_H_REQUEST_ID, true, ""},
      {DLQB_H_SOURCE_SYSTEM, true, ""},
      {DLQB_H_LEGAL_BASIS, true, "gdpr_art_15,gdpr_art_17,ccpa_1798_105,ccpa_1798_100"},
      {DLQB_H_ACTION, true, "access,deletion,rectification"}},
     4,
     false,
     true},
    /* Review items point at privileged documents: the DLQ holds the
     * references and metadata, never the extracted text. */
    {"redaction", {{"item_id", true, ""}, {"doc_id", true, ""}}, 2, true, false},
    /* A discrepancy carries the context to reprocess it without re-running
     * the reconciliation: that context is the body, so it is kept. */
    {"reconciliation", {{"discrepancy_id", true, ""}, {"category", true, ""}}, 2, false, true},
};

const char *dlqb_profile_builtin_names(void) { return "dsr, redaction, reconciliation"; }

dlqb_status dlqb_profile_builtin(const char *name, dlqb_profile *out, dlqb_error *err) {
  for (size_t i = 0; name != NULL && i < COUNT_OF(builtins); i++) {
    if (strcmp(builtins[i].name, name) != 0) continue;
    const profile_row *r = &builtins[i];
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", r->name);
    for (size_t f = 0; f < r->nfields; f++) {
      snprintf(out->fields[f].name, sizeof out->fields[f].name, "%s", r->fields[f].name);
      out->fields[f].required = r->fields[f].required;
      snprintf(out->fields[f].values, sizeof out->fields[f].values, "%s", r->fields[f].values);
    }
    out->nfields = r->nfields;
    snprintf(out->sla_clock, sizeof out->sla_clock, "%s", DLQB_H_FIRST_SEEN_AT);
    out->dlq_body_forbidden = r->dlq_body_forbidden;
    out->group_by_second = r->group_by_second;
    return DLQB_OK;
  }
  return dlqb_fail(err, DLQB_EINVAL, "no built-in profile of that name (the built-in ones: %s)",
                   dlqb_profile_builtin_names());
}

long dlqb_profile_field(const dlqb_profile *p, const char *header) {
  for (size_t i = 0; i < p->nfields; i++)
    if (strcmp(p->fields[i].name, header) == 0) return (long)i;
  return -1;
}

void dlqb_pipeline_default_names(dlqb_pipeline *p, const char *name) {
  snprintf(p->name, sizeof p->name, "%s", name);
  if (strcmp(name, DLQB_PIPELINE_DEFAULT) == 0) {
    /* Today's names: an existing deployment keeps its queues. */
    snprintf(p->work, sizeof p->work, "%s", DLQB_Q_WORK);
    snprintf(p->failed, sizeof p->failed, "%s", DLQB_Q_FAILED);
    snprintf(p->dlx, sizeof p->dlx, "%s", DLQB_X_DLX);
    snprintf(p->dlq, sizeof p->dlq, "%s", DLQB_Q_DLQ);
    snprintf(p->review, sizeof p->review, "%s", DLQB_Q_REVIEW);
    snprintf(p->completed, sizeof p->completed, "%s", DLQB_Q_COMPLETED);
    snprintf(p->catalog, sizeof p->catalog, "%s", DLQB_Q_CATALOG);
    snprintf(p->retry_prefix, sizeof p->retry_prefix, "%s", DLQB_RETRY_PREFIX);
    return;
  }
  /* A valid name is at most 31 bytes: every name below fits. */
  snprintf(p->work, sizeof p->work, "%.31s.work", name);
  snprintf(p->failed, sizeof p->failed, "%.31s.failed", name);
  snprintf(p->dlx, sizeof p->dlx, "%.31s.dlx", name);
  snprintf(p->dlq, sizeof p->dlq, "%.31s.dlq.manual", name);
  snprintf(p->review, sizeof p->review, "%.31s.review", name);
  snprintf(p->completed, sizeof p->completed, "%.31s.completed", name);
  snprintf(p->catalog, sizeof p->catalog, "%.31s.catalog", name);
  snprintf(p->retry_prefix, sizeof p->retry_prefix, "%.31s.retry.", name);
}

bool dlqb_pipeline_is_default(const dlqb_pipeline *p) {
  dlqb_pipeline d;
  dlqb_profile dsr;
  memset(&d, 0, sizeof d);
  dlqb_pipeline_default_names(&d, DLQB_PIPELINE_DEFAULT);
  (void)dlqb_profile_builtin(DLQB_PIPELINE_DEFAULT, &dsr, NULL);
  const dlqb_profile *q = &p->profile;
  bool same_profile = q->nfields == dsr.nfields && strcmp(q->sla_clock, dsr.sla_clock) == 0 &&
                      q->dlq_body_forbidden == dsr.dlq_body_forbidden &&
                      q->group_by_second == dsr.group_by_second;
  for (size_t i = 0; same_profile && i < dsr.nfields; i++)
    same_profile = strcmp(q->fields[i].name, dsr.fields[i].name) == 0 &&
                   q->fields[i].required == dsr.fields[i].required &&
                   strcmp(q->fields[i].values, dsr.fields[i].values) == 0;
  return same_profile && strcmp(p->name, d.name) == 0 && strcmp(p->work, d.work) == 0 &&
         strcmp(p->failed, d.failed) == 0 && strcmp(p->dlx, d.dlx) == 0 &&
         strcmp(p->dlq, d.dlq) == 0 && strcmp(p->review, d.review) == 0 &&
         strcmp(p->completed, d.completed) == 0 && strcmp(p->catalog, d.catalog) == 0 &&
         strcmp(p->retry_prefix, d.retry_prefix) == 0;
}

bool dlqb_pipeline_name_valid(const char *name) {
  size_t n = name != NULL ? strlen(name) : 0;
  if (n == 0 || n >= DLQB_PIPELINE_NAME_MAX || name[0] < 'a' || name[0] > 'z') return false;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

dlqb_status dlqb_pipeline_queue_name_check(const char *name, size_t max, dlqb_error *err) {
  size_t n = strlen(name);
  if (n == 0) return dlqb_fail(err, DLQB_EINVAL, "the name is empty");
  if (n >= max) return dlqb_fail(err, DLQB_EINVAL, "the name is longer than %zu bytes", max - 1);
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-' || c == ':'))
      return dlqb_fail(err, DLQB_EINVAL,
                       "the name may hold only letters, digits and . _ - : (byte %zu is not one)",
                       i + 1);
  }
  if (strncmp(name, "amq.", 4) == 0)
    return dlqb_fail(err, DLQB_EINVAL, "names starting with 'amq.' belong to the broker");
  if (strcmp(name, DLQB_Q_ANCHORS) == 0)
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is the audit anchors stream, shared by all pipelines",
                     DLQB_Q_ANCHORS);
  return DLQB_OK;
}

/* Headers the bridge reads or writes itself: a profile field of one of
 * these names would be overwritten or misread. */
static const char *const reserved_headers[] = {
    DLQB_H_ATTEMPT,          DLQB_H_MAX_ATTEMPTS,  DLQB_H_LAST_ERROR,
    DLQB_H_FIRST_SEEN_AT,    DLQB_H_REPLAY_COUNT,  DLQB_H_WORKER_ERROR,
    DLQB_H_DLQ_REASON,       DLQB_H_DLQ_AT,        DLQB_H_ORIGINAL_USER_ID,
    DLQB_H_DROPPED_HEADERS,  DLQB_H_REPLAYED_BY,   DLQB_H_REPLAYED_AT,
    DLQB_H_ESCALATED_BY,     DLQB_H_ESCALATED_AT,  DLQB_H_ESCALATION_REASON,
    DLQB_H_ESCALATION_NOTE,  DLQB_H_OWNER,         DLQB_H_CLAIMED_AT,
    DLQB_H_BODY_DROPPED,     DLQB_H_BODY_SHA256,   DLQB_H_X_DEATH,
    DLQB_H_STREAM_OFFSET,    DLQB_H_LEDGER_MARKER, DLQB_H_EDIT_ID,
    DLQB_H_EDIT_PARENT,      DLQB_H_EDITED_BY,     DLQB_H_EDITED_AT,
    DLQB_H_EDIT_PROPOSAL_ID, DLQB_H_EDIT_PROPOSAL, DLQB_H_EDIT_PROPOSED_BY,
    DLQB_H_EDIT_PROPOSED_AT,
};

dlqb_status dlqb_profile_field_name_check(const char *name, dlqb_error *err) {
  size_t n = strlen(name);
  if (n == 0) return dlqb_fail(err, DLQB_EINVAL, "a header name is empty");
  if (n >= DLQB_HEADER_NAME_MAX)
    return dlqb_fail(err, DLQB_EINVAL, "a header name is longer than %d bytes",
                     DLQB_HEADER_NAME_MAX - 1);
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return dlqb_fail(err, DLQB_EINVAL,
                       "header name '%s' may hold only letters, digits, '_' and '-'", name);
  }
  if (strncmp(name, "x-", 2) == 0)
    return dlqb_fail(err, DLQB_EINVAL, "header name '%s': x- headers belong to the broker", name);
  for (size_t i = 0; i < COUNT_OF(reserved_headers); i++)
    if (strcmp(reserved_headers[i], name) == 0)
      return dlqb_fail(err, DLQB_EINVAL, "header name '%s' is one the bridge itself writes", name);
  return DLQB_OK;
}

static bool starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

bool dlqb_pipelines_clash(const dlqb_pipeline *set, size_t n, char *what, size_t len) {
  for (size_t i = 0; i < n; i++) {
    const dlqb_pipeline *a = &set[i];
    const char *an[] = {a->work, a->failed, a->dlx, a->dlq, a->review, a->completed, a->catalog};
    for (size_t j = i; j < n; j++) {
      const dlqb_pipeline *b = &set[j];
      const char *bn[] = {b->work, b->failed, b->dlx, b->dlq, b->review, b->completed, b->catalog};
      for (size_t x = 0; x < COUNT_OF(an); x++) {
        /* Within one pipeline only later names (a name is itself). */
        for (size_t y = (i == j ? x + 1 : 0); y < COUNT_OF(bn); y++) {
          if (strcmp(an[x], bn[y]) == 0) {
            snprintf(what, len, "'%s' is used twice (pipelines %s and %s)", an[x], a->name,
                     b->name);
            return true;
          }
        }
        /* A retry queue is prefix + delay: no other name may start so. */
        if (starts_with(an[x], b->retry_prefix)) {
          snprintf(what, len, "'%s' (pipeline %s) starts with the retry prefix '%s' of %s", an[x],
                   a->name, b->retry_prefix, b->name);
          return true;
        }
        if (starts_with(bn[x], a->retry_prefix)) {
          snprintf(what, len, "'%s' (pipeline %s) starts with the retry prefix '%s' of %s", bn[x],
                   b->name, a->retry_prefix, a->name);
          return true;
        }
      }
      if (i != j && (starts_with(a->retry_prefix, b->retry_prefix) ||
                     starts_with(b->retry_prefix, a->retry_prefix))) {
        snprintf(what, len, "the retry prefixes of pipelines %s and %s overlap", a->name, b->name);
        return true;
      }
    }
  }
  return false;
}

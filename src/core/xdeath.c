/* Reading how a message reached the failure inbox: x-death and worker_error. */
#include "dlqb/xdeath.h"

#include <stdio.h>
#include <string.h>

#include "dlqb/headers.h"
#include "dlqb/names.h"
#include "dlqb/text.h"
#include "headers_private.h"

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

const amqp_table_t *dlqb_header_first_death(const amqp_table_t *t) {
  const amqp_field_value_t *xd = dlqb_header_find(t, DLQB_H_X_DEATH);
  if (xd == NULL || xd->kind != AMQP_FIELD_KIND_ARRAY || xd->value.array.num_entries <= 0 ||
      xd->value.array.entries == NULL || xd->value.array.entries[0].kind != AMQP_FIELD_KIND_TABLE)
    return NULL;
  return &xd->value.array.entries[0].value.table;
}

static const struct {
  const char *reason;
  dlqb_failure_kind kind;
} death_reasons[] = {
    {"rejected", DLQB_FAIL_REJECTED},
    {"delivery_limit", DLQB_FAIL_DELIVERY_LIMIT},
    {"expired", DLQB_FAIL_EXPIRED},
    {"maxlen", DLQB_FAIL_MAXLEN},
};

/* Reads x-death[0]; leaves out as REPORTED when anything is off. */
static void read_death(const amqp_table_t *headers, const char *retry_prefix, dlqb_failure *out) {
  const amqp_field_value_t *reason, *queue;
  const char *p = NULL;
  size_t len = 0;
  const amqp_table_t *death = dlqb_header_first_death(headers);
  if (death == NULL) return;
  reason = dlqb_header_find(death, DLQB_XDEATH_REASON);
  if (reason == NULL || !dlqb__field_text(reason, &p, &len)) return;
  for (size_t i = 0; i < COUNT_OF(death_reasons); i++) {
    if (strlen(death_reasons[i].reason) != len || memcmp(death_reasons[i].reason, p, len) != 0)
      continue;
    queue = dlqb_header_find(death, DLQB_XDEATH_QUEUE);
    if (queue != NULL && dlqb__field_text(queue, &p, &len)) {
      /* Expiry from one of our delay queues is the bridge's own backoff,
       * not a failure: a worker that reports a retried task publishes a
       * copy still carrying that entry first. */
      if (death_reasons[i].kind == DLQB_FAIL_EXPIRED && len >= strlen(retry_prefix) &&
          memcmp(p, retry_prefix, strlen(retry_prefix)) == 0)
        return;
      dlqb_text_sanitize(out->queue, sizeof out->queue, p, len);
    }
    out->kind = death_reasons[i].kind;
    return;
  }
}

void dlqb_failure_read(const amqp_table_t *headers, dlqb_failure *out) {
  dlqb_failure_read_prefix(headers, DLQB_RETRY_PREFIX, out);
}

void dlqb_failure_read_prefix(const amqp_table_t *headers, const char *retry_prefix,
                              dlqb_failure *out) {
  const amqp_field_value_t *we;
  const char *p = NULL;
  size_t len = 0;
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  out->kind = DLQB_FAIL_REPORTED;
  read_death(headers, retry_prefix, out);
  we = dlqb_header_find(headers, DLQB_H_WORKER_ERROR);
  if (we != NULL && dlqb__field_text(we, &p, &len)) {
    dlqb__trim(&p, &len);
    /* A blank worker_error says nothing; treat it as absent. */
    if (len > 0) {
      dlqb_text_sanitize(out->worker_error, sizeof out->worker_error, p, len);
      out->has_worker_error = true;
    }
  }
}

/* One part of an entry: its text sanitised, or '?'. */
static void death_part(const amqp_table_t *death, const char *key, char *out, size_t cap) {
  const amqp_field_value_t *v = death != NULL ? dlqb_header_find(death, key) : NULL;
  const char *p = NULL;
  size_t len = 0;
  int64_t n;
  if (v != NULL && dlqb__field_text(v, &p, &len) && len > 0) dlqb_text_sanitize(out, cap, p, len);
  else if (v != NULL && dlqb_field_int(v, &n)) snprintf(out, cap, "%lld", (long long)n);
  else snprintf(out, cap, "?");
}

size_t dlqb_deaths_text(const amqp_table_t *headers, char *buf, size_t cap) {
  if (cap == 0) return 0;
  buf[0] = '\0';
  const amqp_field_value_t *xd = dlqb_header_find(headers, DLQB_H_X_DEATH);
  if (xd == NULL) return 0;
  size_t used = 0;
  bool array = xd->kind == AMQP_FIELD_KIND_ARRAY;
  /* Not an array: one entry of '?'; an empty one (entries may be NULL): none. */
  int n = !array ? 1 : xd->value.array.entries != NULL ? xd->value.array.num_entries : 0;
  for (int i = 0; i < n; i++) {
    const amqp_field_value_t *e = array ? &xd->value.array.entries[i] : xd;
    char entry[3 * 130 + 8];
    if (e->kind == AMQP_FIELD_KIND_TABLE) {
      char q[128], r[32], c[24];
      death_part(&e->value.table, DLQB_XDEATH_QUEUE, q, sizeof q);
      death_part(&e->value.table, DLQB_XDEATH_REASON, r, sizeof r);
      death_part(&e->value.table, "count", c, sizeof c);
      snprintf(entry, sizeof entry, "%s%s %s %s", i > 0 ? "; " : "", q, r, c);
    } else {
      snprintf(entry, sizeof entry, "%s?", i > 0 ? "; " : "");
    }
    size_t len = strlen(entry);
    /* Room for "..." is always kept, so a cut falls between entries. */
    if (used + len + 4 > cap) {
      if (used + 4 <= cap) used += (size_t)snprintf(buf + used, cap - used, "...");
      return used;
    }
    memcpy(buf + used, entry, len + 1);
    used += len;
  }
  return used;
}

bool dlqb_header_delivery_count(const amqp_table_t *headers, int64_t *out) {
  int64_t n;
  if (!dlqb_field_int(dlqb_header_find(headers, DLQB_H_X_DELIVERY_COUNT), &n) || n < 0)
    return false;
  *out = n;
  return true;
}

bool dlqb_header_xdeath_forged(const amqp_table_t *t) {
  const amqp_field_value_t *xd = dlqb_header_find(t, DLQB_H_X_DEATH);
  if (xd == NULL) return false;
  if (xd->kind != AMQP_FIELD_KIND_ARRAY || xd->value.array.num_entries <= 0 ||
      xd->value.array.entries == NULL)
    return true;
  for (int i = 0; i < xd->value.array.num_entries; i++)
    if (xd->value.array.entries[i].kind != AMQP_FIELD_KIND_TABLE) return true;
  return false;
}

/* The operator's selection of DLQ items: the filter flags and matching (pure). */
#include "dlqb/select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/duration.h"
#include "dlqb/text.h"

#define LIMIT_MAX 1000000000ULL

void dlqb_select_init(dlqb_select *s) { memset(s, 0, sizeof *s); }

static const char *const select_flags[] = {
    "all",    "id",         "match",      "request-id", "source-system", "legal-basis",
    "reason", "older-than", "newer-than", "limit",      "message-id",    "group"};

bool dlqb_select_is_flag(const char *name) {
  for (size_t i = 0; i < sizeof select_flags / sizeof select_flags[0]; i++)
    if (strcmp(select_flags[i], name) == 0) return true;
  return false;
}

/* Copies a filter value; empty or oversized text is an error, never cut. */
static dlqb_status set_text(char *dst, size_t cap, bool *has, const char *name, const char *value,
                            dlqb_error *err) {
  size_t n = strlen(value);
  if (n == 0) return dlqb_fail(err, DLQB_EINVAL, "--%s needs a non-empty value", name);
  if (n >= cap)
    return dlqb_fail(err, DLQB_EINVAL, "--%s: value longer than %zu bytes", name, cap - 1);
  memcpy(dst, value, n + 1);
  *has = true;
  return DLQB_OK;
}

/* The identity filter flag name: which field it names ("" = fields[0]). */
static dlqb_status id_field(const char *name, const char *value, char *field, const char **text,
                            dlqb_error *err) {
  field[0] = '\0';
  *text = value;
  if (strcmp(name, "request-id") == 0) snprintf(field, DLQB_HEADER_NAME_MAX, "%s", "request_id");
  else if (strcmp(name, "source-system") == 0)
    snprintf(field, DLQB_HEADER_NAME_MAX, "%s", "source_system");
  else if (strcmp(name, "match") == 0) {
    const char *eq = strchr(value, '=');
    char q[DLQB_QUOTE_BUF];
    if (eq == NULL || eq == value)
      return dlqb_fail(err, DLQB_EINVAL, "--match: '%s' is not FIELD=VALUE",
                       dlqb_text_quote(q, value, strlen(value)));
    if ((size_t)(eq - value) >= DLQB_HEADER_NAME_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "--match: the field name is longer than %d bytes",
                       DLQB_HEADER_NAME_MAX - 1);
    memcpy(field, value, (size_t)(eq - value));
    field[eq - value] = '\0';
    *text = eq + 1;
  }
  return DLQB_OK;
}

/* The identity filters into the slots request_id (fields[0]) and
 * source_system (fields[1]) under the identity names a and b. */
static dlqb_status resolve_ids(dlqb_select *s, const char *profile, const char *a, const char *b,
                               dlqb_error *err) {
  s->has_request_id = s->has_source_system = false;
  for (size_t i = 0; i < s->nids; i++) {
    const dlqb_select_id *id = &s->ids[i];
    bool first = id->field[0] == '\0' || strcmp(id->field, a) == 0;
    if (!first && strcmp(id->field, b) != 0) {
      char q[DLQB_QUOTE_BUF];
      if (strcmp(id->flag, "match") == 0)
        return dlqb_fail(err, DLQB_EINVAL,
                         "--match: '%s' is not an identity field of profile '%s' (%s, %s)",
                         dlqb_text_quote(q, id->field, strlen(id->field)), profile, a, b);
      return dlqb_fail(err, DLQB_EINVAL,
                       "--%s: profile '%s' identifies a task by %s and %s, not %s (use --id "
                       "VALUE or --match FIELD=VALUE)",
                       id->flag, profile, a, b, id->field);
    }
    char *dst = first ? s->request_id : s->source_system;
    memcpy(dst, id->value, strlen(id->value) + 1);
    *(first ? &s->has_request_id : &s->has_source_system) = true;
  }
  return DLQB_OK;
}

static dlqb_status add_id(dlqb_select *s, const char *name, const char *value, dlqb_error *err) {
  if (s->nids >= DLQB_SELECT_IDS_MAX)
    return dlqb_fail(err, DLQB_EINVAL, "--%s: at most %d identity filters", name,
                     DLQB_SELECT_IDS_MAX);
  dlqb_select_id *id = &s->ids[s->nids];
  const char *text;
  dlqb_status st = id_field(name, value, id->field, &text, err);
  bool has = false;
  if (st == DLQB_OK) st = set_text(id->value, sizeof id->value, &has, name, text, err);
  if (st != DLQB_OK) return st;
  snprintf(id->flag, sizeof id->flag, "%s", name);
  s->nids++;
  /* As dsr's as they come; a name that is not dsr's waits for the bind,
   * and until then the selection matches nothing. */
  dlqb_error ignored;
  s->unresolved = resolve_ids(s, "dsr", "request_id", "source_system", &ignored) != DLQB_OK;
  return DLQB_OK;
}

dlqb_status dlqb_select_bind(dlqb_select *s, const dlqb_profile *profile, dlqb_error *err) {
  dlqb_status st = profile == NULL ? resolve_ids(s, "dsr", "request_id", "source_system", err)
                                   : resolve_ids(s, profile->name, profile->fields[0].name,
                                                 profile->fields[1].name, err);
  s->unresolved = st != DLQB_OK;
  return st;
}

static dlqb_status set_duration(uint64_t *dst, bool *has, const char *name, const char *value,
                                dlqb_error *err) {
  dlqb_error why;
  if (dlqb_duration_parse(value, dst, &why) != DLQB_OK)
    return dlqb_fail(err, DLQB_EINVAL, "--%s: %s", name, why.msg);
  *has = true;
  return DLQB_OK;
}

static dlqb_status set_limit(uint64_t *dst, const char *value, dlqb_error *err) {
  const char *p = value;
  uint64_t n = 0;
  if (*p == '\0') goto bad;
  for (; *p != '\0'; p++) {
    if (*p < '0' || *p > '9') goto bad;
    n = n * 10 + (uint64_t)(*p - '0');
    if (n > LIMIT_MAX) goto bad;
  }
  if (n == 0) goto bad;
  *dst = n;
  return DLQB_OK;
bad:
  return dlqb_fail(err, DLQB_EINVAL, "--limit: '%.64s' is not a whole number from 1 to %llu", value,
                   LIMIT_MAX);
}

dlqb_status dlqb_select_set(dlqb_select *s, const char *name, const char *value, dlqb_error *err) {
  if (strcmp(name, "all") == 0) {
    s->all = true;
    return DLQB_OK;
  }
  if (value == NULL) return dlqb_fail(err, DLQB_EINVAL, "--%s needs a value", name);
  if (strcmp(name, "request-id") == 0 || strcmp(name, "source-system") == 0 ||
      strcmp(name, "id") == 0 || strcmp(name, "match") == 0)
    return add_id(s, name, value, err);
  if (strcmp(name, "legal-basis") == 0)
    return set_text(s->legal_basis, sizeof s->legal_basis, &s->has_legal_basis, name, value, err);
  if (strcmp(name, "reason") == 0)
    return set_text(s->reason, sizeof s->reason, &s->has_reason, name, value, err);
  if (strcmp(name, "message-id") == 0)
    return set_text(s->message_id, sizeof s->message_id, &s->has_message_id, name, value, err);
  if (strcmp(name, "group") == 0) {
    char q[DLQB_QUOTE_BUF];
    if (!dlqb_group_id_valid(value))
      return dlqb_fail(err, DLQB_EINVAL,
                       "--group: '%s' is not a group id (12 hex digits, as stats --by group "
                       "prints them)",
                       dlqb_text_quote(q, value, strlen(value)));
    for (size_t i = 0; i < DLQB_GROUP_ID_LEN; i++) s->group[i] = (char)(value[i] | 0x20);
    s->group[DLQB_GROUP_ID_LEN] = '\0';
    s->has_group = true;
    return DLQB_OK;
  }
  if (strcmp(name, "older-than") == 0)
    return set_duration(&s->older_than_ms, &s->has_older_than, name, value, err);
  if (strcmp(name, "newer-than") == 0)
    return set_duration(&s->newer_than_ms, &s->has_newer_than, name, value, err);
  if (strcmp(name, "limit") == 0) return set_limit(&s->limit, value, err);
  return dlqb_fail(err, DLQB_EINVAL, "unknown selection flag '--%s'", name);
}

static bool has_filter(const dlqb_select *s) {
  return s->nids > 0 || s->has_legal_basis || s->has_reason || s->has_message_id || s->has_group ||
         s->has_older_than || s->has_newer_than;
}

bool dlqb_select_given(const dlqb_select *s) { return s->all || has_filter(s); }

dlqb_status dlqb_select_validate(const dlqb_select *s, dlqb_error *err) {
  if (s->all && has_filter(s))
    return dlqb_fail(err, DLQB_EINVAL, "--all cannot be combined with a filter");
  if (s->has_older_than && s->has_newer_than && s->older_than_ms >= s->newer_than_ms)
    return dlqb_fail(err, DLQB_EINVAL,
                     "--older-than must be shorter than --newer-than (no item can match both)");
  return DLQB_OK;
}

bool dlqb_select_match(const dlqb_select *s, const dlqb_item *it, int64_t now_ms) {
  if (s->unresolved) return false; /* a filter on a field not bound: nothing, never everything */
  if (s->has_request_id && strcmp(s->request_id, it->request_id) != 0) return false;
  if (s->has_source_system && strcmp(s->source_system, it->source_system) != 0) return false;
  if (s->has_legal_basis && strcmp(s->legal_basis, it->legal_basis) != 0) return false;
  if (s->has_message_id && strcmp(s->message_id, it->message_id) != 0) return false;
  if (s->has_reason && strstr(it->last_error, s->reason) == NULL) return false;
  if (s->has_group) {
    /* Last of the text filters: it normalises and hashes last_error. */
    char id[DLQB_GROUP_ID_BUF];
    dlqb_group_of(it, id, NULL, 0);
    if (strcmp(id, s->group) != 0) return false;
  }
  if (s->has_older_than || s->has_newer_than) {
    uint64_t age;
    if (!dlqb_item_age(it, now_ms, &age)) return false;
    if (s->has_older_than && !(age > s->older_than_ms)) return false;
    if (s->has_newer_than && !(age < s->newer_than_ms)) return false;
  }
  return true;
}

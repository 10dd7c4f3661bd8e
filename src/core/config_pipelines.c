/* The config file's `pipelines`: named pipelines, each an object of
 *   "profile":  a built-in profile's name, or an object defining one
 *               (identity, fields, sla_clock, dlq_body, group_by)
 *   "queues":   names replacing the defaults (work, failed, dlx, dlq,
 *               review, completed, retry_prefix)
 *   policy:     max_attempts, poison_threshold, retry_delays, retry_jitter,
 *               sla_budget, prefetch, dlq_sla, max_replays, edit_approval (the top-level
 *               settings' rules; unset ones follow the top level)
 *   user:       url, password_file: the broker user its bridge runs as
 *               (the top-level rules; unset ones follow the top level)
 * and the lookups over them. docs/configuration.md is the reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_private.h"
#include "dlqb/names.h"
#include "dlqb/text.h"

#define COUNT_OF(a)  (sizeof(a) / sizeof((a)[0]))
#define PATH_MAX_LEN 192 /* "pipelines.NAME.profile.fields.HEADER.values" */
#define VALUE_MAX    64  /* bytes of one closed-set value, with the NUL */

static const struct {
  const char *key;
  uint32_t bit;
} policy_keys[] = {
    {"max_attempts", DLQB_POLICY_MAX_ATTEMPTS},
    {"poison_threshold", DLQB_POLICY_POISON_THRESHOLD},
    {"retry_delays", DLQB_POLICY_RETRY_DELAYS},
    {"retry_jitter", DLQB_POLICY_RETRY_JITTER},
    {"sla_budget", DLQB_POLICY_SLA_BUDGET},
    {"prefetch", DLQB_POLICY_PREFETCH},
    {"dlq_sla", DLQB_POLICY_DLQ_SLA},
    {"max_replays", DLQB_POLICY_MAX_REPLAYS},
    {"edit_approval", DLQB_POLICY_EDIT_APPROVAL},
};

/* The one place a pipeline's policy inherits (as nginx's merge functions
 * do a location's settings): its own values where `set` has their bit,
 * the top level's (whichever source set them) elsewhere. */
static void policy_merge(dlqb_policy_conf *out, const dlqb_policy_conf *top_level,
                         const dlqb_policy_conf *own, uint32_t set) {
  *out = *top_level;
  if (set & DLQB_POLICY_MAX_ATTEMPTS) out->max_attempts = own->max_attempts;
  if (set & DLQB_POLICY_POISON_THRESHOLD) out->poison_threshold = own->poison_threshold;
  if (set & DLQB_POLICY_RETRY_DELAYS) {
    memcpy(out->retry_delays_ms, own->retry_delays_ms, sizeof out->retry_delays_ms);
    out->retry_delay_count = own->retry_delay_count;
  }
  if (set & DLQB_POLICY_RETRY_JITTER) out->retry_jitter_percent = own->retry_jitter_percent;
  if (set & DLQB_POLICY_SLA_BUDGET) out->sla_budget_ms = own->sla_budget_ms;
  if (set & DLQB_POLICY_PREFETCH) out->prefetch = own->prefetch;
  if (set & DLQB_POLICY_DLQ_SLA) out->dlq_sla_ms = own->dlq_sla_ms;
  if (set & DLQB_POLICY_MAX_REPLAYS) out->max_replays = own->max_replays;
  if (set & DLQB_POLICY_EDIT_APPROVAL) out->edit_approval = own->edit_approval;
}

static const char *type_phrase(json_object *v) {
  switch (json_object_get_type(v)) {
  case json_type_null: return "null";
  case json_type_boolean: return "a boolean";
  case json_type_double: return "a fractional number";
  case json_type_int: return "an integer";
  case json_type_object: return "an object";
  case json_type_array: return "an array";
  case json_type_string: return "a string";
  }
  return "an unknown json value";
}

/* A plain JSON string (no "\u0000" cutting it short) or an error. */
static dlqb_status plain_string(json_object *v, const char *path, const char **out,
                                dlqb_error *err) {
  if (!json_object_is_type(v, json_type_string))
    return dlqb_fail(err, DLQB_EINVAL, "key '%s': expected a string, got %s", path, type_phrase(v));
  const char *s = json_object_get_string(v);
  if (strlen(s) != (size_t)json_object_get_string_len(v))
    return dlqb_fail(err, DLQB_EINVAL, "key '%s': the string contains a nul character", path);
  *out = s;
  return DLQB_OK;
}

static dlqb_status unknown_key(const char *path, const char *key, const char *known,
                               dlqb_error *err) {
  char q[DLQB_QUOTE_BUF];
  return dlqb_fail(err, DLQB_EINVAL, "key '%s': unknown key '%s' (the keys: %s)", path,
                   dlqb_text_quote(q, key, strlen(key)), known);
}

/* path + "." + key into buf; a key too long for an error line is cut
 * (the line still names where it is). */
static void join_path(char *buf, size_t len, const char *path, const char *key) {
  int w = snprintf(buf, len, "%s.%.63s", path, key);
  if (w < 0 || (size_t)w >= len) buf[len - 1] = '\0';
}

/* ---- profile ---------------------------------------------------------- */

static dlqb_status add_field(dlqb_profile *p, const char *name, const char *path, dlqb_error *err) {
  dlqb_error why;
  if (dlqb_profile_field_name_check(name, &why) != DLQB_OK)
    return dlqb_fail(err, DLQB_EINVAL, "key '%s': %s", path, why.msg);
  if (dlqb_profile_field(p, name) >= 0)
    return dlqb_fail(err, DLQB_EINVAL, "key '%s': header '%s' is named twice", path, name);
  if (p->nfields >= DLQB_PROFILE_MAX_FIELDS)
    return dlqb_fail(err, DLQB_EINVAL, "key '%s': a profile has at most %d fields", path,
                     DLQB_PROFILE_MAX_FIELDS);
  dlqb_field_rule *f = &p->fields[p->nfields++];
  snprintf(f->name, sizeof f->name, "%s", name);
  f->required = true;
  return DLQB_OK;
}

static dlqb_status parse_identity(dlqb_profile *p, json_object *v, const char *path,
                                  dlqb_error *err) {
  if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) != 2)
    return dlqb_fail(err, DLQB_EINVAL,
                     "key '%s': expected an array of the two headers that identify a task, "
                     "got %s",
                     path,
                     json_object_is_type(v, json_type_array) ? "another length" : type_phrase(v));
  for (size_t i = 0; i < 2; i++) {
    const char *name;
    dlqb_status st = plain_string(json_object_array_get_idx(v, i), path, &name, err);
    if (st == DLQB_OK) st = add_field(p, name, path, err);
    if (st != DLQB_OK) return st;
  }
  return DLQB_OK;
}

static dlqb_status parse_values(dlqb_field_rule *f, json_object *v, const char *path,
                                dlqb_error *err) {
  size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
  if (n == 0)
    return dlqb_fail(err, DLQB_EINVAL, "key '%s': expected a non-empty array of strings, got %s",
                     path,
                     json_object_is_type(v, json_type_array) ? "an empty one" : type_phrase(v));
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    const char *s;
    dlqb_status st = plain_string(json_object_array_get_idx(v, i), path, &s, err);
    if (st != DLQB_OK) return st;
    size_t len = strlen(s);
    bool ok = len > 0 && len < VALUE_MAX;
    for (size_t k = 0; ok && k < len; k++) ok = s[k] > ' ' && s[k] < 0x7f && s[k] != ',';
    if (!ok)
      return dlqb_fail(err, DLQB_EINVAL,
                       "key '%s': value %zu must be 1 to %d printable ASCII bytes without "
                       "spaces or commas",
                       path, i + 1, VALUE_MAX - 1);
    for (size_t j = 0; j < i; j++)
      if (strcmp(json_object_get_string(json_object_array_get_idx(v, j)), s) == 0)
        return dlqb_fail(err, DLQB_EINVAL, "key '%s': value '%s' is listed twice", path, s);
    if (used + len + (i > 0) >= sizeof f->values)
      return dlqb_fail(err, DLQB_EINVAL, "key '%s': the values take more than %zu bytes", path,
                       sizeof f->values - 1);
    if (i > 0) f->values[used++] = ',';
    memcpy(f->values + used, s, len + 1);
    used += len;
  }
  return DLQB_OK;
}

static dlqb_status parse_field(dlqb_profile *p, const char *name, json_object *v, const char *path,
                               dlqb_error *err) {
  char sub[PATH_MAX_LEN];
  if (!json_object_is_type(v, json_type_object))
    return dlqb_fail(err, DLQB_EINVAL, "key '%s': expected an object, got %s", path,
                     type_phrase(v));
  dlqb_status st = add_field(p, name, path, err);
  if (st != DLQB_OK) return st;
  dlqb_field_rule *f = &p->fields[p->nfields - 1];
  json_object_object_foreach(v, key, val) {
    join_path(sub, sizeof sub, path, key);
    if (strcmp(key, "required") == 0) {
      if (!json_object_is_type(val, json_type_boolean))
        return dlqb_fail(err, DLQB_EINVAL, "key '%s': expected true or false, got %s", sub,
                         type_phrase(val));
      f->required = json_object_get_boolean(val);
    } else if (strcmp(key, "values") == 0) {
      if ((st = parse_values(f, val, sub, err)) != DLQB_OK) return st;
    } else {
      return unknown_key(path, key, "required, values", err);
    }
  }
  return DLQB_OK;
}

static dlqb_status parse_profile_object(dlqb_profile *p, const char *pipeline, json_object *v,
                                        const char *path, dlqb_error *err) {
  char sub[PATH_MAX_LEN];
  dlqb_status st;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", pipeline);
  snprintf(p->sla_clock, sizeof p->sla_clock, "%s", DLQB_H_FIRST_SEEN_AT);
  p->group_by_second = true; /* as dsr groups by source_system */
  const char *group_by = NULL;
  json_object *identity = NULL;
  if (!json_object_object_get_ex(v, "identity", &identity))
    return dlqb_fail(err, DLQB_EINVAL,
                     "key '%s.identity' is missing: name the two headers "
                     "that identify a task",
                     path);
  join_path(sub, sizeof sub, path, "identity");
  if ((st = parse_identity(p, identity, sub, err)) != DLQB_OK) return st;
  json_object_object_foreach(v, key, val) {
    join_path(sub, sizeof sub, path, key);
    if (strcmp(key, "identity") == 0) continue;
    if (strcmp(key, "fields") == 0) {
      if (!json_object_is_type(val, json_type_object))
        return dlqb_fail(err, DLQB_EINVAL, "key '%s': expected an object, got %s", sub,
                         type_phrase(val));
      json_object_object_foreach(val, fname, fval) {
        char fpath[PATH_MAX_LEN];
        join_path(fpath, sizeof fpath, sub, fname);
        if ((st = parse_field(p, fname, fval, fpath, err)) != DLQB_OK) return st;
      }
    } else if (strcmp(key, "sla_clock") == 0) {
      const char *s;
      if ((st = plain_string(val, sub, &s, err)) != DLQB_OK) return st;
      if (strlen(s) >= sizeof p->sla_clock)
        return dlqb_fail(err, DLQB_EINVAL, "key '%s': a header name is longer than %zu bytes", sub,
                         sizeof p->sla_clock - 1);
      memcpy(p->sla_clock, s, strlen(s) + 1);
    } else if (strcmp(key, "dlq_body") == 0) {
      const char *s;
      if ((st = plain_string(val, sub, &s, err)) != DLQB_OK) return st;
      if (strcmp(s, "kept") != 0 && strcmp(s, "forbidden") != 0)
        return dlqb_fail(err, DLQB_EINVAL, "key '%s': expected 'kept' or 'forbidden'", sub);
      p->dlq_body_forbidden = strcmp(s, "forbidden") == 0;
    } else if (strcmp(key, "group_by") == 0) {
      /* The second identity field, or false: nothing but reason and error. */
      if (json_object_is_type(val, json_type_boolean) && !json_object_get_boolean(val)) {
        p->group_by_second = false;
        group_by = NULL;
      } else {
        if ((st = plain_string(val, sub, &group_by, err)) != DLQB_OK) return st;
      }
    } else {
      return unknown_key(path, key, "identity, fields, sla_clock, dlq_body, group_by", err);
    }
  }
  /* The identity keys the ledger and the trail: always text, always there. */
  for (size_t i = 0; i < 2; i++)
    if (!p->fields[i].required || p->fields[i].values[0] != '\0')
      return dlqb_fail(err, DLQB_EINVAL,
                       "key '%s.fields.%s': an identity header is always required, with no "
                       "closed set of values",
                       path, p->fields[i].name);
  if (strcmp(p->sla_clock, DLQB_H_FIRST_SEEN_AT) != 0 && dlqb_profile_field(p, p->sla_clock) < 2)
    return dlqb_fail(err, DLQB_EINVAL,
                     "key '%s.sla_clock': '%s' is neither first_seen_at nor a field of the "
                     "profile (besides the identity)",
                     path, p->sla_clock);
  if (group_by != NULL && strcmp(group_by, p->fields[1].name) != 0) {
    char q[DLQB_QUOTE_BUF];
    return dlqb_fail(err, DLQB_EINVAL,
                     "key '%s.group_by': '%s' is not the second identity header '%s' (name it, "
                     "or false to group by reason and error alone)",
                     path, dlqb_text_quote(q, group_by, strlen(group_by)), p->fields[1].name);
  }
  return DLQB_OK;
}

static dlqb_status parse_profile(dlqb_profile *p, const char *pipeline, json_object *v,
                                 const char *path, dlqb_error *err) {
  if (v == NULL) {
    /* No profile: the built-in one of the pipeline's name, if there is one. */
    if (dlqb_profile_builtin(pipeline, p, NULL) == DLQB_OK) return DLQB_OK;
    return dlqb_fail(err, DLQB_EINVAL,
                     "key '%s' is missing: name a built-in profile (%s) or define one", path,
                     dlqb_profile_builtin_names());
  }
  if (json_object_is_type(v, json_type_object))
    return parse_profile_object(p, pipeline, v, path, err);
  const char *name;
  dlqb_status st = plain_string(v, path, &name, err);
  if (st != DLQB_OK) return st;
  dlqb_error why;
  if (dlqb_profile_builtin(name, p, &why) != DLQB_OK) {
    char q[DLQB_QUOTE_BUF];
    return dlqb_fail(err, DLQB_EINVAL, "key '%s': '%s': %s", path,
                     dlqb_text_quote(q, name, strlen(name)), why.msg);
  }
  return DLQB_OK;
}

/* ---- queues ----------------------------------------------------------- */

static dlqb_status parse_queues(dlqb_pipeline *p, json_object *v, const char *path,
                                dlqb_error *err) {
  struct {
    const char *key;
    char *field;
    size_t size;
  } slots[] = {
      {"work", p->work, sizeof p->work},
      {"failed", p->failed, sizeof p->failed},
      {"dlx", p->dlx, sizeof p->dlx},
      {"dlq", p->dlq, sizeof p->dlq},
      {"review", p->review, sizeof p->review},
      {"completed", p->completed, sizeof p->completed},
      {"catalog", p->catalog, sizeof p->catalog},
      {"retry_prefix", p->retry_prefix, sizeof p->retry_prefix},
  };
  if (!json_object_is_type(v, json_type_object))
    return dlqb_fail(err, DLQB_EINVAL, "key '%s': expected an object, got %s", path,
                     type_phrase(v));
  json_object_object_foreach(v, key, val) {
    char sub[PATH_MAX_LEN];
    size_t i = 0;
    while (i < COUNT_OF(slots) && strcmp(slots[i].key, key) != 0) i++;
    if (i == COUNT_OF(slots))
      return unknown_key(path, key,
                         "work, failed, dlx, dlq, review, completed, catalog, retry_prefix", err);
    join_path(sub, sizeof sub, path, key);
    const char *name;
    dlqb_error why;
    dlqb_status st = plain_string(val, sub, &name, err);
    if (st != DLQB_OK) return st;
    if (dlqb_pipeline_queue_name_check(name, slots[i].size, &why) != DLQB_OK)
      return dlqb_fail(err, DLQB_EINVAL, "key '%s': %s", sub, why.msg);
    snprintf(slots[i].field, slots[i].size, "%s", name);
  }
  return DLQB_OK;
}

/* ---- one pipeline, all pipelines -------------------------------------- */

/* parse_pipeline's work on scratch, a copy of the top-level config. */
static dlqb_status parse_pipeline_on(dlqb_pipeline_conf *out, const char *name, json_object *v,
                                     dlqb_config *scratch, dlqb_error *err) {
  char path[PATH_MAX_LEN], sub[PATH_MAX_LEN];
  join_path(path, sizeof path, "pipelines", name);
  if (!json_object_is_type(v, json_type_object))
    return dlqb_fail(err, DLQB_EINVAL, "key '%s': expected an object, got %s", path,
                     type_phrase(v));
  memset(out, 0, sizeof *out);
  dlqb_pipeline_default_names(&out->p, name);
  json_object *profile = NULL;
  (void)json_object_object_get_ex(v, "profile", &profile);
  join_path(sub, sizeof sub, path, "profile");
  dlqb_status st = parse_profile(&out->p.profile, name, profile, sub, err);
  if (st != DLQB_OK) return st;
  json_object_object_foreach(v, key, val) {
    join_path(sub, sizeof sub, path, key);
    if (strcmp(key, "profile") == 0) continue;
    if (strcmp(key, "queues") == 0) {
      if ((st = parse_queues(&out->p, val, sub, err)) != DLQB_OK) return st;
      continue;
    }
    if (strcmp(key, "url") == 0 || strcmp(key, "password_file") == 0) {
      /* The top-level rules (scheme, port, length), on a scratch copy. */
      char src[PATH_MAX_LEN + 8];
      snprintf(src, sizeof src, "key '%s'", sub);
      bool url = key[0] == 'u';
      if ((st = dlqb__config_apply_member(scratch, key, val, src, err)) != DLQB_OK) return st;
      const char *given = url ? scratch->broker.url : scratch->broker.password_file;
      if (given[0] == '\0')
        return dlqb_fail(err, DLQB_EINVAL, "key '%s': empty (leave it out to use the top-level %s)",
                         sub, key);
      snprintf(url ? out->url : out->password_file, sizeof out->url, "%s", given);
      continue;
    }
    size_t i = 0;
    while (i < COUNT_OF(policy_keys) && strcmp(policy_keys[i].key, key) != 0) i++;
    if (i == COUNT_OF(policy_keys))
      return unknown_key(path, key,
                         "profile, queues, url, password_file, max_attempts, poison_threshold, "
                         "retry_delays, retry_jitter, sla_budget, prefetch, dlq_sla, max_replays, "
                         "edit_approval",
                         err);
    char src[PATH_MAX_LEN + 8];
    snprintf(src, sizeof src, "key '%s'", sub);
    if ((st = dlqb__config_apply_member(scratch, key, val, src, err)) != DLQB_OK) return st;
    out->policy_set |= policy_keys[i].bit;
  }
  out->p.policy = scratch->policy;
  return DLQB_OK;
}

static dlqb_status parse_pipeline(dlqb_pipeline_conf *out, const char *name, json_object *v,
                                  const dlqb_config *top, dlqb_error *err) {
  /* Policy values go through the top-level rules on a scratch copy (on
   * the heap: a config is large; freed wiped, a url may hold a password). */
  dlqb_config *scratch = dlqb_config_copy(top);
  if (scratch == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  dlqb_status st = parse_pipeline_on(out, name, v, scratch, err);
  dlqb_config_free(scratch);
  return st;
}

dlqb_status dlqb__config_apply_pipelines(dlqb_config *c, json_object *v, dlqb_error *err) {
  char q[DLQB_QUOTE_BUF];
  if (!json_object_is_type(v, json_type_object))
    return dlqb_fail(err, DLQB_EINVAL,
                     "key 'pipelines': expected an object of named pipelines, "
                     "got %s",
                     type_phrase(v));
  size_t n = (size_t)json_object_object_length(v);
  if (n == 0 || n > DLQB_MAX_PIPELINES)
    return dlqb_fail(err, DLQB_EINVAL, "key 'pipelines': expected 1 to %d pipelines, got %zu",
                     DLQB_MAX_PIPELINES, n);
  /* On the heap: eight pipelines are most of a config. */
  dlqb_pipeline_conf *parsed = calloc(DLQB_MAX_PIPELINES, sizeof *parsed);
  dlqb_pipeline *set = calloc(DLQB_MAX_PIPELINES, sizeof *set);
  dlqb_status st =
      parsed == NULL || set == NULL ? dlqb_fail(err, DLQB_ENOMEM, "out of memory") : DLQB_OK;
  size_t count = 0;
  json_object_object_foreach(v, name, val) {
    if (st != DLQB_OK) break;
    if (!dlqb_pipeline_name_valid(name)) {
      st = dlqb_fail(err, DLQB_EINVAL,
                     "key 'pipelines': pipeline name '%s' must be 1 to %d bytes of a-z, 0-9, "
                     "'_' and '-', starting with a letter",
                     dlqb_text_quote(q, name, strlen(name)), DLQB_PIPELINE_NAME_MAX - 1);
      break;
    }
    st = parse_pipeline(&parsed[count], name, val, c, err);
    if (st == DLQB_OK) count++;
  }
  char what[256];
  if (st == DLQB_OK) {
    for (size_t i = 0; i < count; i++) set[i] = parsed[i].p;
    if (dlqb_pipelines_clash(set, count, what, sizeof what))
      st = dlqb_fail(err, DLQB_EINVAL, "key 'pipelines': %s", what);
  }
  if (st == DLQB_OK) {
    memcpy(c->pipelines, parsed, count * sizeof parsed[0]);
    c->pipeline_count = count;
  }
  if (parsed != NULL) explicit_bzero(parsed, DLQB_MAX_PIPELINES * sizeof *parsed);
  free(parsed);
  free(set);
  return st;
}

size_t dlqb_config_pipeline_count(const dlqb_config *c) {
  return c->pipeline_count > 0 ? c->pipeline_count : 1;
}

void dlqb_config_pipeline(const dlqb_config *c, size_t i, dlqb_pipeline *out) {
  memset(out, 0, sizeof *out);
  if (c->pipeline_count == 0 || i >= c->pipeline_count) {
    dlqb_pipeline_default_names(out, DLQB_PIPELINE_DEFAULT);
    (void)dlqb_profile_builtin(DLQB_PIPELINE_DEFAULT, &out->profile, NULL);
    out->policy = c->policy;
    return;
  }
  const dlqb_pipeline_conf *pc = &c->pipelines[i];
  *out = pc->p;
  policy_merge(&out->policy, &c->policy, &pc->p.policy, pc->policy_set);
}

static void list_names(const dlqb_config *c, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < dlqb_config_pipeline_count(c); i++) {
    const char *name = c->pipeline_count > 0 ? c->pipelines[i].p.name : DLQB_PIPELINE_DEFAULT;
    int w = snprintf(buf + used, len - used, "%s%s", i > 0 ? ", " : "", name);
    if (w < 0 || (size_t)w >= len - used) return;
    used += (size_t)w;
  }
}

dlqb_status dlqb_config_pipeline_choose(const dlqb_config *c, const char *name, size_t *index,
                                        dlqb_error *err) {
  char names[DLQB_MAX_PIPELINES * DLQB_PIPELINE_NAME_MAX + 16];
  char q[DLQB_QUOTE_BUF];
  size_t n = dlqb_config_pipeline_count(c);
  list_names(c, names, sizeof names);
  if (name == NULL) {
    if (n == 1) {
      *index = 0;
      return DLQB_OK;
    }
    return dlqb_fail(err, DLQB_EINVAL,
                     "several pipelines are configured (%s): choose one with --pipeline", names);
  }
  for (size_t i = 0; i < n; i++) {
    const char *have = c->pipeline_count > 0 ? c->pipelines[i].p.name : DLQB_PIPELINE_DEFAULT;
    if (strcmp(have, name) == 0) {
      *index = i;
      return DLQB_OK;
    }
  }
  return dlqb_fail(err, DLQB_EINVAL, "--pipeline: no pipeline '%s' (configured: %s)",
                   dlqb_text_quote(q, name, strlen(name)), names);
}

void dlqb_config_use_pipeline(dlqb_config *c, const dlqb_pipeline *p) { c->policy = p->policy; }

bool dlqb_pipeline_path(const char *path, const char *name, char *out, size_t cap) {
  const char *base = strrchr(path, '/');
  base = base != NULL ? base + 1 : path;
  const char *dot = strrchr(base, '.');
  size_t at = dot != NULL && dot != base ? (size_t)(dot - path) : strlen(path);
  int n = snprintf(out, cap, "%.*s.%s%s", (int)at, path, name, path + at);
  return n >= 0 && (size_t)n < cap;
}

dlqb_status dlqb_config_pipeline_paths(dlqb_config *c, const dlqb_pipeline *p, dlqb_error *err) {
  if (dlqb_pipeline_is_default(p)) return DLQB_OK;
  struct {
    const char *key;
    char *value;
  } files[] = {{"ledger_cache", c->ledger.cache},
               {"drain_state", c->drain.state},
               {"drain_textfile", c->drain.textfile},
               {"console_jobs_file", c->console.jobs_file},
               {"catalog_checkpoint", c->catalog.checkpoint}};
  char made[COUNT_OF(files)][DLQB_CONFIG_STR_MAX];
  for (size_t i = 0; i < COUNT_OF(files); i++) {
    /* The checkpoint's "auto" and "none" name no file (auto's is named
     * after the pipeline's own catalog stream): kept as they are. */
    bool word = files[i].value == c->catalog.checkpoint &&
                (strcmp(files[i].value, "auto") == 0 || strcmp(files[i].value, "none") == 0);
    if (files[i].value[0] == '\0' || word) {
      snprintf(made[i], sizeof made[i], "%s", files[i].value);
    } else if (!dlqb_pipeline_path(files[i].value, p->name, made[i], sizeof made[i])) {
      return dlqb_fail(err, DLQB_EINVAL,
                       "%s: the file of pipeline '%s' (its name added to the path) would be "
                       "longer than %d bytes",
                       files[i].key, p->name, DLQB_CONFIG_STR_MAX - 1);
    }
  }
  for (size_t i = 0; i < COUNT_OF(files); i++) memcpy(files[i].value, made[i], strlen(made[i]) + 1);
  return DLQB_OK;
}

void dlqb_config_pipelines_override(dlqb_config *c, const char *key) {
  for (size_t k = 0; key != NULL && k < COUNT_OF(policy_keys); k++) {
    if (strcmp(policy_keys[k].key, key) != 0) continue;
    for (size_t i = 0; i < c->pipeline_count; i++)
      c->pipelines[i].policy_set &= ~policy_keys[k].bit;
  }
}

void dlqb_config_use_pipeline_user(dlqb_config *c, size_t i) {
  if (i >= c->pipeline_count) return;
  const dlqb_pipeline_conf *pc = &c->pipelines[i];
  /* Same-sized fields, each NUL-terminated within its size. */
  if (pc->url[0] != '\0') memcpy(c->broker.url, pc->url, sizeof c->broker.url);
  if (pc->password_file[0] != '\0')
    memcpy(c->broker.password_file, pc->password_file, sizeof c->broker.password_file);
}

void dlqb_config_pipeline_only(dlqb_config *c, size_t i) {
  if (c->pipeline_count == 0 || i >= c->pipeline_count) return;
  if (i > 0) c->pipelines[0] = c->pipelines[i];
  c->pipeline_count = 1;
}

/* Reading verified audit lines for `audit show` and reconcile: one line as
 * a JSON object, its string members, and the filter for one request's hops. */
#include <json-c/json.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dlqb/audit.h"
#include "dlqb/text.h"

void dlqb_audit_filter_init(dlqb_audit_filter *f, const char *request_id, const char *message_id) {
  f->request_id = request_id;
  f->message_id = message_id;
  f->needle_len = 0;
  f->pipeline = NULL;
  f->pipeline_default = false;
  const char *key = request_id != NULL ? "request_id" : "message_id";
  const char *id = request_id != NULL ? request_id : message_id;
  if (id == NULL || strpbrk(id, "\"\\") != NULL) return;
  int n = snprintf(f->needle, sizeof f->needle, "\"%s\":\"%s\"", key, id);
  if (n > 0 && (size_t)n < sizeof f->needle) f->needle_len = (size_t)n;
}

void dlqb_audit_filter_pipeline(dlqb_audit_filter *f, const char *name, bool is_default) {
  f->pipeline = name;
  f->pipeline_default = is_default;
}

json_object *dlqb_audit_record_parse(const char *line, size_t len) {
  if (len > INT_MAX) return NULL;
  json_tokener *tok = json_tokener_new();
  if (tok == NULL) return NULL;
  json_object *rec = json_tokener_parse_ex(tok, line, (int)len);
  json_tokener_free(tok);
  if (rec != NULL && !json_object_is_type(rec, json_type_object)) {
    json_object_put(rec);
    return NULL;
  }
  return rec;
}

const char *dlqb_audit_record_str(json_object *rec, const char *key) {
  json_object *v;
  if (!json_object_object_get_ex(rec, key, &v) || !json_object_is_type(v, json_type_string))
    return "";
  /* A value with a NUL in it ("DSR-5\u0000DSR-6") is no id: read as a C
   * string it would pass for the part before the NUL. */
  const char *s = json_object_get_string(v);
  if (strlen(s) != (size_t)json_object_get_string_len(v)) return "";
  return s;
}

/* Ids are never empty (the commands refuse an empty one), so an absent
 * member ("") matches no filter: chain_start, chain_end and file_start
 * carry no ids and never match. */
static bool member_is(json_object *rec, const char *key, const char *want) {
  return want == NULL || strcmp(dlqb_audit_record_str(rec, key), want) == 0;
}

bool dlqb_audit_record_in_pipeline(json_object *rec, const char *name, bool is_default) {
  const char *p = dlqb_audit_record_str(rec, "pipeline");
  return p[0] != '\0' ? strcmp(p, name) == 0 : is_default;
}

bool dlqb_audit_filter_match(const dlqb_audit_filter *f, const char *line, size_t len) {
  if (f->request_id == NULL && f->message_id == NULL) return false;
  if (f->needle_len > 0 && dlqb_text_find(line, len, f->needle, f->needle_len) == NULL)
    return false; /* most lines of a big log: no parse */
  json_object *rec = dlqb_audit_record_parse(line, len);
  bool match =
      rec != NULL && member_is(rec, "request_id", f->request_id) &&
      member_is(rec, "message_id", f->message_id) &&
      (f->pipeline == NULL || dlqb_audit_record_in_pipeline(rec, f->pipeline, f->pipeline_default));
  json_object_put(rec);
  return match;
}

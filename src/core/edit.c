/* An edit's rules, header changes, validation and record: dlqb/edit.h. */
#include "dlqb/edit.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "dlqb/envelope.h"
#include "dlqb/group.h" /* dlqb_sha256 */
#include "dlqb/headers.h"
#include "dlqb/names.h"
#include "dlqb/text.h"

dlqb_status dlqb_edit_add(dlqb_edit_request *r, const dlqb_profile *p, const char *arg, bool unset,
                          dlqb_error *err) {
  const char *eq = unset ? NULL : strchr(arg, '=');
  if (!unset && eq == NULL)
    return dlqb_fail(err, DLQB_EINVAL, "--set needs FIELD=VALUE (got no '=')");
  size_t nlen = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
  char name[DLQB_HEADER_NAME_MAX];
  if (nlen == 0)
    return dlqb_fail(err, DLQB_EINVAL, "--%s: the field name is empty", unset ? "unset" : "set");
  if (nlen >= sizeof name)
    return dlqb_fail(err, DLQB_EINVAL, "--%s: a field name is at most %d bytes",
                     unset ? "unset" : "set", DLQB_HEADER_NAME_MAX - 1);
  memcpy(name, arg, nlen);
  name[nlen] = '\0';
  dlqb_error why;
  if (dlqb_profile_field_name_check(name, &why) != DLQB_OK) {
    /* The same rule as a profile's field names: what the bridge writes is
     * its own record of the task's history, not the task. */
    char shown[DLQB_QUOTE_BUF];
    dlqb_text_quote(shown, name, strlen(name));
    if (strstr(why.msg, "bridge itself") != NULL || strncmp(name, "x-", 2) == 0)
      return dlqb_fail(err, DLQB_EINVAL, "%s is the %s own: not editable", shown,
                       strncmp(name, "x-", 2) == 0 ? "broker's" : "bridge's");
    return dlqb_fail(err, DLQB_EINVAL, "%s", why.msg);
  }
  if (strcmp(name, p->sla_clock) == 0)
    return dlqb_fail(err, DLQB_EINVAL,
                     "%s starts the SLA clock of profile '%s': not editable (an edit must not "
                     "restart a deadline)",
                     name, p->name);
  for (size_t i = 0; i < r->n; i++)
    if (strcmp(r->changes[i].field, name) == 0)
      return dlqb_fail(err, DLQB_EINVAL, "%s is changed twice", name);
  if (r->n >= DLQB_EDIT_MAX_CHANGES)
    return dlqb_fail(err, DLQB_EINVAL, "at most %d fields in one edit", DLQB_EDIT_MAX_CHANGES);
  dlqb_edit_change *c = &r->changes[r->n];
  memset(c, 0, sizeof *c);
  snprintf(c->field, sizeof c->field, "%s", name);
  c->unset = unset;
  if (!unset) {
    const char *v = eq + 1;
    if (strlen(v) > DLQB_EDIT_VALUE_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "--set %s: the value is at most %d bytes", name,
                       DLQB_EDIT_VALUE_MAX);
    snprintf(c->value, sizeof c->value, "%s", v);
  }
  r->n++;
  return DLQB_OK;
}

size_t dlqb_edit_sets(const dlqb_edit_request *r, dlqb_hset *out) {
  for (size_t i = 0; i < r->n; i++) {
    const dlqb_edit_change *c = &r->changes[i];
    out[i] = c->unset ? (dlqb_hset){c->field, DLQB_HSET_REMOVE, NULL, 0}
                      : (dlqb_hset){c->field, DLQB_HSET_STRING, c->value, 0};
  }
  return r->n;
}

size_t dlqb_edit_stamp(dlqb_hset *sets, const char *edit_id, const char *parent, const char *by,
                       const char *at_iso) {
  sets[0] = (dlqb_hset){DLQB_H_EDIT_ID, DLQB_HSET_STRING, edit_id, 0};
  sets[1] = parent[0] != '\0' ? (dlqb_hset){DLQB_H_EDIT_PARENT, DLQB_HSET_STRING, parent, 0}
                              : (dlqb_hset){DLQB_H_EDIT_PARENT, DLQB_HSET_REMOVE, NULL, 0};
  sets[2] = (dlqb_hset){DLQB_H_EDITED_BY, DLQB_HSET_STRING, by, 0};
  sets[3] = (dlqb_hset){DLQB_H_EDITED_AT, DLQB_HSET_STRING, at_iso, 0};
  return DLQB_EDIT_STAMP_SETS;
}

dlqb_status dlqb_edit_validate(const amqp_table_t *headers, const dlqb_hset *sets, size_t nsets,
                               const dlqb_profile *p, int64_t default_max_attempts,
                               amqp_table_entry_t *scratch, size_t cap, dlqb_error *why) {
  amqp_table_t edited;
  if (dlqb_headers_apply(headers, sets, nsets, scratch, cap, &edited) != DLQB_OK)
    return dlqb_fail(why, DLQB_EINVAL, "too many headers to check");
  dlqb_envelope env;
  return dlqb_envelope_parse_profile(&edited, p, default_max_attempts, &env, why);
}

void dlqb_edit_value_text(const amqp_field_value_t *v, char *dst, size_t cap) {
  amqp_bytes_t b;
  int64_t n;
  if (dlqb_field_text(v, &b)) {
    size_t len = b.len > DLQB_EDIT_VALUE_MAX ? DLQB_EDIT_VALUE_MAX : b.len;
    dlqb_text_sanitize(dst, cap, b.bytes, len);
  } else if (dlqb_field_int(v, &n)) {
    snprintf(dst, cap, "%" PRId64, n);
  } else {
    snprintf(dst, cap, "(a value of AMQP kind '%c')",
             v != NULL && v->kind >= 0x20 && v->kind < 0x7f ? (char)v->kind : '?');
  }
}

static void hash_text(const char *s, char *out, size_t cap) {
  uint8_t h[32];
  dlqb_sha256(s, strlen(s), h);
  size_t at = 0;
  for (size_t i = 0; i < sizeof h && at + 3 <= cap; i++)
    at += (size_t)snprintf(out + at, cap - at, "%02x", h[i]);
}

void dlqb_edit_diff(const dlqb_edit_request *r, const amqp_table_t *headers, const dlqb_profile *p,
                    dlqb_hop_edit *e) {
  e->nfields = r->n;
  for (size_t i = 0; i < r->n; i++) {
    const dlqb_edit_change *c = &r->changes[i];
    dlqb_edit_field *f = &e->fields[i];
    memset(f, 0, sizeof *f);
    snprintf(f->field, sizeof f->field, "%s", c->field);
    const amqp_field_value_t *old = dlqb_header_find(headers, c->field);
    f->had_old = old != NULL;
    if (old != NULL) dlqb_edit_value_text(old, f->old_value, sizeof f->old_value);
    f->has_new = !c->unset;
    if (f->has_new)
      dlqb_text_sanitize(f->new_value, sizeof f->new_value, c->value, strlen(c->value));
    /* References only: a header outside the profile may hold what the
     * trail must not (the redaction profile keeps no content at all). */
    f->hashed = p->dlq_body_forbidden && dlqb_profile_field(p, c->field) < 0;
    if (f->hashed) {
      char h[65];
      if (f->had_old) {
        hash_text(f->old_value, h, sizeof h);
        snprintf(f->old_value, sizeof f->old_value, "%s", h);
      }
      if (f->has_new) {
        hash_text(f->new_value, h, sizeof h);
        snprintf(f->new_value, sizeof f->new_value, "%s", h);
      }
    }
  }
}

static void sha_hex(amqp_bytes_t b, char out[65]) {
  uint8_t h[32];
  dlqb_sha256(b.bytes != NULL ? b.bytes : "", b.len, h);
  for (size_t i = 0; i < sizeof h; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}

void dlqb_edit_body(dlqb_hop_edit *e, amqp_bytes_t before, amqp_bytes_t after) {
  e->body_size_before = before.len;
  e->body_size_after = after.len;
  sha_hex(before, e->body_sha256_before);
  sha_hex(after, e->body_sha256_after);
}

dlqb_status dlqb_edit_proposal_encode(const dlqb_edit_request *r, const char *note, bool keep,
                                      char *out, size_t cap, dlqb_error *err) {
  json_object *j = json_object_new_object(), *set = json_object_new_object(),
              *unset = json_object_new_array();
  for (size_t i = 0; i < r->n; i++) {
    const dlqb_edit_change *c = &r->changes[i];
    if (c->unset) json_object_array_add(unset, json_object_new_string(c->field));
    else json_object_object_add(set, c->field, json_object_new_string(c->value));
  }
  json_object_object_add(j, "set", set);
  json_object_object_add(j, "unset", unset);
  json_object_object_add(j, "note", json_object_new_string(note != NULL ? note : ""));
  json_object_object_add(j, "keep", json_object_new_boolean(keep));
  const char *text = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN);
  dlqb_status st = DLQB_OK;
  if (text == NULL || strlen(text) >= cap)
    st = dlqb_fail(err, DLQB_EINVAL, "the proposal does not fit a header");
  else snprintf(out, cap, "%s", text);
  json_object_put(j);
  return st;
}

dlqb_status dlqb_edit_proposal_decode(const char *json, size_t len, const dlqb_profile *p,
                                      dlqb_edit_request *r, char *note, size_t ncap, bool *keep,
                                      dlqb_error *err) {
  memset(r, 0, sizeof *r);
  json_tokener *tok = json_tokener_new();
  json_object *j =
      tok != NULL && len < INT32_MAX ? json_tokener_parse_ex(tok, json, (int)len) : NULL;
  json_tokener_free(tok);
  json_object *set, *unset, *n, *k;
  if (j == NULL || !json_object_is_type(j, json_type_object) ||
      !json_object_object_get_ex(j, "set", &set) || !json_object_is_type(set, json_type_object) ||
      !json_object_object_get_ex(j, "unset", &unset) ||
      !json_object_is_type(unset, json_type_array) || !json_object_object_get_ex(j, "note", &n) ||
      !json_object_is_type(n, json_type_string) || !json_object_object_get_ex(j, "keep", &k) ||
      !json_object_is_type(k, json_type_boolean)) {
    json_object_put(j);
    return dlqb_fail(err, DLQB_EINVAL, "the edit_proposal header is not a proposal");
  }
  dlqb_status st = DLQB_OK;
  char arg[DLQB_HEADER_NAME_MAX + DLQB_EDIT_VALUE_MAX + 2];
  json_object_object_foreach(set, key, val) {
    if (st != DLQB_OK) break;
    if (!json_object_is_type(val, json_type_string)) {
      st = dlqb_fail(err, DLQB_EINVAL, "the edit_proposal header is not a proposal");
      break;
    }
    int w = snprintf(arg, sizeof arg, "%s=%s", key, json_object_get_string(val));
    st = w < 0 || (size_t)w >= sizeof arg
             ? dlqb_fail(err, DLQB_EINVAL, "the edit_proposal header holds too long a value")
             : dlqb_edit_add(r, p, arg, false, err);
  }
  for (size_t i = 0; st == DLQB_OK && i < json_object_array_length(unset); i++) {
    json_object *f = json_object_array_get_idx(unset, i);
    st = json_object_is_type(f, json_type_string)
             ? dlqb_edit_add(r, p, json_object_get_string(f), true, err)
             : dlqb_fail(err, DLQB_EINVAL, "the edit_proposal header is not a proposal");
  }
  if (st == DLQB_OK) {
    snprintf(note, ncap, "%s", json_object_get_string(n));
    *keep = json_object_get_boolean(k);
  }
  json_object_put(j);
  return st;
}

size_t dlqb_edit_proposal_stamp(dlqb_hset *sets, const char *id, const char *json, const char *by,
                                const char *at_iso) {
  static const char *const keys[] = {DLQB_H_EDIT_PROPOSAL_ID, DLQB_H_EDIT_PROPOSAL,
                                     DLQB_H_EDIT_PROPOSED_BY, DLQB_H_EDIT_PROPOSED_AT};
  const char *vals[] = {id, json, by, at_iso};
  for (size_t i = 0; i < DLQB_EDIT_PROPOSAL_SETS; i++)
    sets[i] = id != NULL ? (dlqb_hset){keys[i], DLQB_HSET_STRING, vals[i], 0}
                         : (dlqb_hset){keys[i], DLQB_HSET_REMOVE, NULL, 0};
  return DLQB_EDIT_PROPOSAL_SETS;
}

void dlqb_edit_id(const uint8_t rnd[16], char out[DLQB_EDIT_ID_MAX]) {
  memcpy(out, "e-", 3);
  for (size_t i = 0; i < 16; i++) snprintf(out + 2 + 2 * i, 3, "%02x", rnd[i]);
}

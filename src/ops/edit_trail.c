/* What the audit trail says of edits, for the edit service (ops_edit.c)
 * under every front end: whether a copy was edited already or its edit
 * began and did not end (read as the log is: it can only refuse), and the
 * proposal an approval carries out (read from the verified trail: it lets
 * an approval through). See dlqb/ops_edit.h. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/ops.h"
#include "dlqb/ops_edit.h"
#include "dlqb/text.h"

/* An edit_started that ended with no copy taken (edit_abandoned). */
#define TRAIL_ABANDONED (-1)

/* OPS_EDIT_TRAIL_EDITED, _STARTED or TRAIL_ABANDONED when line is such a
 * record of message_id made from parent, its edit id into found; else
 * OPS_EDIT_TRAIL_NONE. */
static int line_edit_of(const char *line, size_t len, const char *message_id, const char *parent,
                        char *found, size_t cap) {
  bool edited = strstr(line, "\"event\":\"edited\"") != NULL;
  bool abandoned = !edited && strstr(line, "\"event\":\"edit_abandoned\"") != NULL;
  if (!edited && !abandoned && strstr(line, "\"event\":\"edit_started\"") == NULL)
    return OPS_EDIT_TRAIL_NONE;
  json_object *rec = dlqb_audit_record_parse(line, len);
  if (rec == NULL) return OPS_EDIT_TRAIL_NONE;
  json_object *edit;
  int what = OPS_EDIT_TRAIL_NONE;
  if (strcmp(dlqb_audit_record_str(rec, "message_id"), message_id) == 0 &&
      json_object_object_get_ex(rec, "edit", &edit) &&
      strcmp(dlqb_audit_record_str(edit, "parent"), parent) == 0 &&
      dlqb_audit_record_str(edit, "edit_id")[0] != '\0') {
    what = edited ? OPS_EDIT_TRAIL_EDITED : abandoned ? TRAIL_ABANDONED : OPS_EDIT_TRAIL_STARTED;
    snprintf(found, cap, "%s", dlqb_audit_record_str(edit, "edit_id"));
  }
  json_object_put(rec);
  return what;
}

int ops_edit_trail_state(const char *audit_log, const char *message_id, const char *parent,
                         char *found, size_t cap) {
  if (audit_log == NULL || audit_log[0] == '\0') return OPS_EDIT_TRAIL_NONE;
  char **files = NULL;
  size_t n = 0;
  dlqb_error err;
  if (dlqb_audit_list_files(audit_log, &files, &n, &err) != DLQB_OK) return OPS_EDIT_TRAIL_NONE;
  int state = OPS_EDIT_TRAIL_NONE;
  char *line = NULL, id[DLQB_EDIT_ID_MAX];
  size_t lcap = 0;
  for (size_t i = 0; i < n && state != OPS_EDIT_TRAIL_EDITED; i++) {
    FILE *f = fopen(files[i], "r");
    if (f == NULL) continue;
    ssize_t len;
    while (state != OPS_EDIT_TRAIL_EDITED && (len = getline(&line, &lcap, f)) > 0) {
      if (line[len - 1] == '\n') line[--len] = '\0';
      int w = line_edit_of(line, (size_t)len, message_id, parent, id, sizeof id);
      /* An edit of this copy that ended wins over one that only began:
       * the copy is stale either way, and the ended one names the copy
       * that counts. */
      if (w == TRAIL_ABANDONED) {
        /* The edit that began ended with no copy: not interrupted. */
        if (state == OPS_EDIT_TRAIL_STARTED && strcmp(found, id) == 0) state = OPS_EDIT_TRAIL_NONE;
      } else if (w != OPS_EDIT_TRAIL_NONE) {
        state = w;
        snprintf(found, cap, "%s", id);
      }
    }
    fclose(f);
  }
  free(line);
  dlqb_audit_files_free(files, n);
  return state;
}

/* ---- the proposal an approval carries out ------------------------------ */

typedef struct {
  const char *id;
  char needle[DLQB_EDIT_ID_MAX + 16];
  size_t needle_len;
  ops_edit_proposal_record *out;
} proposal_scan;

static void field_of(json_object *f, dlqb_edit_field *to) {
  json_object *v;
  snprintf(to->field, sizeof to->field, "%s", dlqb_audit_record_str(f, "field"));
  to->hashed = json_object_object_get_ex(f, "new_sha256", &v);
  const char *nk = to->hashed ? "new_sha256" : "new";
  to->has_new = json_object_object_get_ex(f, nk, &v) && json_object_is_type(v, json_type_string);
  snprintf(to->new_value, sizeof to->new_value, "%s", to->has_new ? json_object_get_string(v) : "");
}

/* Sees each line the verifier accepted: the edit_proposed record of the
 * id, and a later edited or edit_rejected record that settled it. */
static bool proposal_visit(void *arg, const char *line, size_t len) {
  proposal_scan *s = arg;
  if (dlqb_text_find(line, len, s->needle, s->needle_len) == NULL) return true;
  json_object *rec = dlqb_audit_record_parse(line, len), *edit;
  if (rec == NULL) return true;
  const char *event = dlqb_audit_record_str(rec, "event");
  if (json_object_object_get_ex(rec, "edit", &edit) &&
      strcmp(dlqb_audit_record_str(edit, "edit_id"), s->id) == 0) {
    ops_edit_proposal_record *o = s->out;
    if (strcmp(event, "edit_proposed") == 0 && !o->found) {
      o->found = true;
      snprintf(o->message_id, sizeof o->message_id, "%s", dlqb_audit_record_str(rec, "message_id"));
      snprintf(o->proposer, sizeof o->proposer, "%s", dlqb_audit_record_str(rec, "broker_user"));
      snprintf(o->parent, sizeof o->parent, "%s", dlqb_audit_record_str(edit, "parent"));
      snprintf(o->note, sizeof o->note, "%s", dlqb_audit_record_str(edit, "note"));
      json_object *fields;
      o->nfields = 0;
      if (json_object_object_get_ex(edit, "fields", &fields) &&
          json_object_is_type(fields, json_type_array))
        for (size_t i = 0;
             i < json_object_array_length(fields) && o->nfields < DLQB_EDIT_MAX_CHANGES; i++)
          field_of(json_object_array_get_idx(fields, i), &o->fields[o->nfields++]);
    } else if (strcmp(event, "edited") == 0 || strcmp(event, "edit_rejected") == 0) {
      snprintf(o->settled, sizeof o->settled, "%s", event);
    }
  }
  json_object_put(rec);
  return true;
}

dlqb_status ops_edit_read_proposal(const dlqb_config *cfg, const char *proposal_id,
                                   ops_edit_proposal_record *out, dlqb_error *err) {
  memset(out, 0, sizeof *out);
  if (cfg->audit.log[0] == '\0' || cfg->audit.public_keys[0] == '\0')
    return dlqb_fail(err, DLQB_EINVAL,
                     "an approval is checked against the proposal recorded in the verified audit "
                     "trail: set audit_log and audit_public_keys");
  proposal_scan s = {.id = proposal_id, .out = out};
  int n = snprintf(s.needle, sizeof s.needle, "\"edit_id\":\"%s\"", proposal_id);
  if (n <= 0 || (size_t)n >= sizeof s.needle || strpbrk(proposal_id, "\"\\") != NULL)
    return dlqb_fail(err, DLQB_EINVAL, "'%.64s' is not an edit id", proposal_id);
  s.needle_len = (size_t)n;
  /* The whole trail verifies, or nothing it says is taken. */
  dlqb_status st = ops_trail_verify(cfg, proposal_visit, &s, err);
  if (st != DLQB_OK) memset(out, 0, sizeof *out);
  return st;
}

const char *ops_edit_proposal_mismatch(const ops_edit_proposal_record *p, const char *message_id,
                                       const char *proposer, const char *parent,
                                       const dlqb_hop_edit *rec) {
  if (!p->found) return "the audit trail records no such proposal";
  if (p->settled[0] != '\0')
    return strcmp(p->settled, "edited") == 0 ? "the trail records it approved already"
                                             : "the trail records it rejected";
  if (strcmp(p->message_id, message_id) != 0) return "the trail records it for another item";
  if (strcmp(p->proposer, proposer) != 0) return "the trail records another proposer";
  if (strcmp(p->parent, parent) != 0) return "the trail records it for another copy of the item";
  if (strcmp(p->note, rec->note) != 0) return "its note differs from the recorded one";
  if (p->nfields != rec->nfields) return "its changes differ from the recorded ones";
  for (size_t i = 0; i < p->nfields; i++) {
    const dlqb_edit_field *a = &p->fields[i], *b = &rec->fields[i];
    if (strcmp(a->field, b->field) != 0 || a->has_new != b->has_new || a->hashed != b->hashed ||
        (a->has_new && strcmp(a->new_value, b->new_value) != 0))
      return "its changes differ from the recorded ones";
  }
  return NULL;
}

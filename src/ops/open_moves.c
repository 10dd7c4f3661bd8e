/* Moves that began and did not end: the intents (move_started) the trail
 * holds out of one queue with no later record taking the same message out
 * of it or abandoning the move (move_abandoned: its copy never left). A
 * mover killed after its intent was durable may or may not have had its
 * copy taken, so its original, back in the queue, is not moved
 * again until someone settles it (dlqb/ops.h). Read as the log is written,
 * not verified: it can only hold items back, never let one through. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/hashset.h"
#include "dlqb/ops.h"

struct ops_open_moves {
  dlqb_hashset *set; /* message_id (as a hop records it) -> ops_open_move */
};

/* The string value of member `needle` ("\"message_id\":\"") as the line
 * holds it, into out (cut to cap - 1 bytes as a hop's member is). A value
 * with an escape is read by parsing the line. False when absent. */
static bool member_of(const char *line, size_t len, const char *needle, const char *key, char *out,
                      size_t cap) {
  const char *at = strstr(line, needle);
  if (at == NULL) return false;
  const char *v = at + strlen(needle);
  const char *end = strchr(v, '"');
  if (end == NULL) return false;
  if (memchr(v, '\\', (size_t)(end - v)) == NULL) {
    snprintf(out, cap, "%.*s", (int)(end - v), v);
    return true;
  }
  json_object *rec = dlqb_audit_record_parse(line, len);
  if (rec == NULL) return false;
  snprintf(out, cap, "%s", dlqb_audit_record_str(rec, key));
  json_object_put(rec);
  return true;
}

/* An intent out of `from`: its entry. Its members are read in place (a
 * trail of a million moves has a million intents: parsing each as JSON
 * took 3.1 to 4.0 s a pass, measured). */
static void add_intent(ops_open_moves *m, const char *line, size_t len, const char *from) {
  /* Its reason is "FROM -> TO" (dlqb_hop_intent). */
  char reason[DLQB_NAME_MAX * 2 + 8];
  if (!member_of(line, len, "\"reason\":\"", "reason", reason, sizeof reason)) return;
  size_t fl = strlen(from);
  if (strncmp(reason, from, fl) != 0 || strncmp(reason + fl, " -> ", 4) != 0) return;
  char id[sizeof((dlqb_hop *)0)->message_id];
  if (!member_of(line, len, "\"message_id\":\"", "message_id", id, sizeof id)) return;
  bool added;
  ops_open_move *o = dlqb_hashset_add(m->set, id, strlen(id), &added);
  if (o == NULL) return;
  snprintf(o->to, sizeof o->to, "%s", reason + fl + 4);
  if (!member_of(line, len, "\"time\":\"", "time", o->time, sizeof o->time)) o->time[0] = '\0';
  if (!member_of(line, len, "\"for\":\"", "for", o->event, sizeof o->event)) o->event[0] = '\0';
  if (!member_of(line, len, "\"writer\":\"", "writer", o->writer, sizeof o->writer))
    o->writer[0] = '\0';
}

/* A move abandoned out of `from` (its copy never sent): its intent ends. */
static void end_abandoned(ops_open_moves *m, const char *line, size_t len, const char *from) {
  char reason[DLQB_NAME_MAX * 2 + 8], id[sizeof((dlqb_hop *)0)->message_id];
  if (dlqb_hashset_size(m->set) == 0 ||
      !member_of(line, len, "\"reason\":\"", "reason", reason, sizeof reason) ||
      !member_of(line, len, "\"message_id\":\"", "message_id", id, sizeof id))
    return;
  size_t fl = strlen(from);
  if (strncmp(reason, from, fl) == 0 && strncmp(reason + fl, " -> ", 4) == 0)
    (void)dlqb_hashset_remove(m->set, id, strlen(id));
}

/* from_member is from as a record's member: "from":"FROM". */
static void read_file(ops_open_moves *m, FILE *f, const char *from, const char *from_member) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    if (line[len - 1] == '\n') line[--len] = '\0';
    if (strstr(line, "\"event\":\"move_started\"") != NULL) {
      add_intent(m, line, (size_t)len, from);
      continue;
    }
    if (strstr(line, "\"event\":\"move_abandoned\"") != NULL) {
      end_abandoned(m, line, (size_t)len, from);
      continue;
    }
    /* Any later record taking the message out of the queue ends it: its
     * own hop, or another mover's once it was settled. */
    if (dlqb_hashset_size(m->set) == 0 || strstr(line, from_member) == NULL) continue;
    char id[sizeof((dlqb_hop *)0)->message_id];
    if (member_of(line, (size_t)len, "\"message_id\":\"", "message_id", id, sizeof id))
      (void)dlqb_hashset_remove(m->set, id, strlen(id));
  }
  free(line);
}

dlqb_status ops_open_moves_read(const char *audit_log, const char *from, ops_open_moves **out,
                                dlqb_error *err) {
  *out = NULL;
  /* No trail yet (a first dry run): no move of anything began. */
  if (audit_log == NULL || audit_log[0] == '\0' || access(audit_log, F_OK) != 0) return DLQB_OK;
  if (strpbrk(from, "\"\\") != NULL || strlen(from) >= DLQB_NAME_MAX)
    return dlqb_fail(err, DLQB_EINVAL, "'%.64s' is not a queue name", from);
  ops_open_moves *m = calloc(1, sizeof *m);
  if (m == NULL || (m->set = dlqb_hashset_new(sizeof(ops_open_move))) == NULL) {
    free(m);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  char **files = NULL;
  size_t n = 0;
  dlqb_status st = dlqb_audit_list_files(audit_log, &files, &n, err);
  char from_member[DLQB_NAME_MAX + 16];
  snprintf(from_member, sizeof from_member, "\"from\":\"%s\"", from);
  for (size_t i = 0; st == DLQB_OK && i < n; i++) {
    FILE *f = fopen(files[i], "r");
    if (f == NULL) {
      st = dlqb_fail(err, DLQB_EIO, "cannot read the audit trail %s", files[i]);
      break;
    }
    /* Only a regular file ends: a device or a pipe in its place (a log
     * pointed at /dev/full reads zeros for ever) tells nothing, and its
     * writer reports it. */
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode)) read_file(m, f, from, from_member);
    fclose(f);
  }
  dlqb_audit_files_free(files, n);
  if (st != DLQB_OK || dlqb_hashset_size(m->set) == 0) {
    ops_open_moves_free(m);
    return st;
  }
  *out = m;
  return DLQB_OK;
}

const ops_open_move *ops_open_moves_find(const ops_open_moves *m, const char *message_id) {
  if (m == NULL) return NULL;
  char id[sizeof((dlqb_hop *)0)->message_id];
  snprintf(id, sizeof id, "%s", message_id);
  return dlqb_hashset_get(m->set, id, strlen(id));
}

size_t ops_open_moves_count(const ops_open_moves *m) {
  return m != NULL ? dlqb_hashset_size(m->set) : 0;
}

void ops_open_moves_free(ops_open_moves *m) {
  if (m == NULL) return;
  dlqb_hashset_free(m->set);
  free(m);
}

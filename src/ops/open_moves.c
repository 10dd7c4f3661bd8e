/* Moves that began and did not end: the intents (move_started) the trail
 * holds out of one queue with no later record taking the same message out
 * of it or abandoning the move (move_abandoned: its copy never left). A
 * mover killed after its intent was durable may or may not have had its
 * copy taken, so its original, back in the queue, is not moved
 * again until someone settles it (dlqb/ops.h).
 *
 * And moves that ended whose original may be back: a hop is recorded
 * after its copy's confirm and before its original's ack, so a mover
 * killed between the two leaves the move recorded and its original back
 * in the queue; moving that again would make a second copy (measured: the
 * SLA escalator's kill ladder escalated an item twice). Such a move is
 * kept (ended) until its writer's chain ends (chain_end: the process
 * closed its pass, every ack settled or said) or a later record brings
 * the message back into the queue (a hop "to" it: the router's, a
 * decision to return it). Read as the log is written, not verified: it
 * can only hold items back, never let one through. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/hashset.h"
#include "dlqb/ops.h"

#define CHAIN_MAX 48

/* An ended move of a chain not yet ended: in its chain's list. */
typedef struct ended_move {
  ops_open_move mv;
  char chain[CHAIN_MAX];
  struct ended_move *prev, *next;
} ended_move;

typedef struct {
  ended_move *head;
} chain_moves;

struct ops_open_moves {
  dlqb_hashset *set;    /* message_id (as a hop records it) -> ops_open_move */
  dlqb_hashset *ended;  /* message_id -> ended_move */
  dlqb_hashset *chains; /* chain -> chain_moves: the ended moves of each open chain */
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

/* Forgets the ended move of id (its chain's list too). */
static void forget_ended(ops_open_moves *m, const char *id) {
  ended_move *e = dlqb_hashset_get(m->ended, id, strlen(id));
  if (e == NULL) return;
  if (e->prev != NULL) e->prev->next = e->next;
  else {
    chain_moves *c = dlqb_hashset_get(m->chains, e->chain, strlen(e->chain));
    if (c != NULL) c->head = e->next;
  }
  if (e->next != NULL) e->next->prev = e->prev;
  (void)dlqb_hashset_remove(m->ended, id, strlen(id));
}

/* The hop `line` (of its chain) took id out of the queue, ending the move
 * mv: kept until that chain ends. */
static void keep_ended(ops_open_moves *m, const char *line, size_t len, const char *id,
                       const ops_open_move *mv) {
  char chain[CHAIN_MAX];
  if (!member_of(line, len, "\"chain\":\"", "chain", chain, sizeof chain)) return;
  forget_ended(m, id);
  bool added;
  chain_moves *c = dlqb_hashset_add(m->chains, chain, strlen(chain), &added);
  if (c == NULL) return;
  if (added) c->head = NULL;
  ended_move *e = dlqb_hashset_add(m->ended, id, strlen(id), &added);
  if (e == NULL) return;
  e->mv = *mv;
  e->mv.ended = true;
  /* The hop's own time and event: what ended it. */
  if (!member_of(line, len, "\"time\":\"", "time", e->mv.time, sizeof e->mv.time))
    e->mv.time[0] = '\0';
  if (!member_of(line, len, "\"event\":\"", "event", e->mv.event, sizeof e->mv.event))
    e->mv.event[0] = '\0';
  if (!member_of(line, len, "\"writer\":\"", "writer", e->mv.writer, sizeof e->mv.writer))
    e->mv.writer[0] = '\0';
  snprintf(e->chain, sizeof e->chain, "%s", chain);
  e->prev = NULL;
  e->next = c->head;
  if (c->head != NULL) c->head->prev = e;
  c->head = e;
}

/* A chain_end: its writer closed its pass, so the acks of the moves it
 * recorded were settled or said; they no longer hold anything. */
static void end_chain(ops_open_moves *m, const char *line, size_t len) {
  char chain[CHAIN_MAX];
  if (dlqb_hashset_size(m->ended) == 0 ||
      !member_of(line, len, "\"chain\":\"", "chain", chain, sizeof chain))
    return;
  chain_moves *c = dlqb_hashset_get(m->chains, chain, strlen(chain));
  if (c == NULL) return;
  for (ended_move *e = c->head, *next; e != NULL; e = next) {
    next = e->next;
    const char *id = dlqb_hashset_key(m->ended, e);
    (void)dlqb_hashset_remove(m->ended, id, strlen(id));
  }
  (void)dlqb_hashset_remove(m->chains, chain, strlen(chain));
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

/* from_member and to_member are from as a record's members:
 * "from":"FROM", "to":"FROM". */
static void read_file(ops_open_moves *m, FILE *f, const char *from, const char *from_member,
                      const char *to_member) {
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
    if (strstr(line, "\"event\":\"chain_end\"") != NULL) {
      end_chain(m, line, (size_t)len);
      continue;
    }
    if (dlqb_hashset_size(m->set) == 0 && dlqb_hashset_size(m->ended) == 0) continue;
    bool out = strstr(line, from_member) != NULL, in = strstr(line, to_member) != NULL;
    if (!out && !in) continue;
    char id[sizeof((dlqb_hop *)0)->message_id];
    if (!member_of(line, (size_t)len, "\"message_id\":\"", "message_id", id, sizeof id)) continue;
    /* Any later record taking the message out of the queue ends its
     * intent (its own hop, or another mover's once it was settled), and
     * is kept as an ended move until its chain ends. */
    const ops_open_move *open = dlqb_hashset_get(m->set, id, strlen(id));
    const ended_move *was = dlqb_hashset_get(m->ended, id, strlen(id));
    if (out && (open != NULL || was != NULL)) {
      ops_open_move mv = open != NULL ? *open : was->mv;
      (void)dlqb_hashset_remove(m->set, id, strlen(id));
      keep_ended(m, line, (size_t)len, id, &mv);
    }
    /* Brought (back) into the queue: what is there now is that. */
    if (in) forget_ended(m, id);
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
  if (m != NULL) {
    m->set = dlqb_hashset_new(sizeof(ops_open_move));
    m->ended = dlqb_hashset_new(sizeof(ended_move));
    m->chains = dlqb_hashset_new(sizeof(chain_moves));
  }
  if (m == NULL || m->set == NULL || m->ended == NULL || m->chains == NULL) {
    ops_open_moves_free(m);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  char **files = NULL;
  size_t n = 0;
  dlqb_status st = dlqb_audit_list_files(audit_log, &files, &n, err);
  char from_member[DLQB_NAME_MAX + 16], to_member[DLQB_NAME_MAX + 16];
  snprintf(from_member, sizeof from_member, "\"from\":\"%s\"", from);
  snprintf(to_member, sizeof to_member, "\"to\":\"%s\"", from);
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
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode))
      read_file(m, f, from, from_member, to_member);
    fclose(f);
  }
  dlqb_audit_files_free(files, n);
  if (st != DLQB_OK || ops_open_moves_count(m) == 0) {
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
  const ops_open_move *o = dlqb_hashset_get(m->set, id, strlen(id));
  if (o != NULL) return o;
  const ended_move *e = dlqb_hashset_get(m->ended, id, strlen(id));
  return e != NULL ? &e->mv : NULL;
}

size_t ops_open_moves_count(const ops_open_moves *m) {
  return m != NULL ? dlqb_hashset_size(m->set) + dlqb_hashset_size(m->ended) : 0;
}

void ops_open_moves_free(ops_open_moves *m) {
  if (m == NULL) return;
  dlqb_hashset_free(m->set);
  dlqb_hashset_free(m->ended);
  dlqb_hashset_free(m->chains);
  free(m);
}

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
 * kept (ended) when its writer's chain never ended (no chain_end: the
 * process did not close its pass), until a later record brings the
 * message back into the queue (a hop "to" it: the router's, a decision to
 * return it). The chains that ended are found first, in a pass of their
 * own over the files, so that the moves of the many that did are never
 * kept (one pass keeping them until their chain_end held 171 MiB for a
 * replay of 500,000 items, against 3 MiB). Read as the log is written, not
 * verified: it can only hold items back, never let one through. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/hashset.h"
#include "dlqb/ops.h"

#define CHAIN_MAX 48

struct ops_open_moves {
  dlqb_hashset *set;    /* message_id (as a hop records it) -> ops_open_move */
  dlqb_hashset *ended;  /* message_id -> ops_open_move (ended), of chains that did not end */
  dlqb_hashset *closed; /* the chains that ended (chain_end) */
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

/* The hop `line` took id out of the queue, ending the move mv: kept when
 * its chain did not end. */
static void keep_ended(ops_open_moves *m, const char *line, size_t len, const char *id,
                       const ops_open_move *mv) {
  (void)dlqb_hashset_remove(m->ended, id, strlen(id));
  char chain[CHAIN_MAX];
  if (!member_of(line, len, "\"chain\":\"", "chain", chain, sizeof chain) ||
      dlqb_hashset_get(m->closed, chain, strlen(chain)) != NULL)
    return;
  bool added;
  ops_open_move *e = dlqb_hashset_add(m->ended, id, strlen(id), &added);
  if (e == NULL) return;
  *e = *mv;
  e->ended = true;
  /* The hop's own time, event and writer: what ended it. */
  if (!member_of(line, len, "\"time\":\"", "time", e->time, sizeof e->time)) e->time[0] = '\0';
  if (!member_of(line, len, "\"event\":\"", "event", e->event, sizeof e->event)) e->event[0] = '\0';
  if (!member_of(line, len, "\"writer\":\"", "writer", e->writer, sizeof e->writer))
    e->writer[0] = '\0';
}

/* The first pass: the chains whose writer closed its pass (chain_end),
 * found by a search of whole blocks (a getline of every line doubled the
 * time of a million-line trail's read). */
#define CLOSED_BLOCK (1 << 20)

/* The last newline in s[0..len), or NULL. */
static const char *last_newline(const char *s, size_t len) {
  while (len > 0)
    if (s[--len] == '\n') return s + len;
  return NULL;
}

static void read_closed(ops_open_moves *m, FILE *f) {
  static const char needle[] = "\"event\":\"chain_end\"";
  char *buf = malloc(CLOSED_BLOCK + 1);
  if (buf == NULL) return;
  size_t have = 0;
  for (;;) {
    size_t got = fread(buf + have, 1, CLOSED_BLOCK - have, f), n = have + got;
    if (n == 0) break;
    /* Its whole lines; at the end of the file, the last one too. A line
     * longer than a block (no record is) is read as cut. */
    const char *nl = last_newline(buf, n);
    size_t end = got == 0 || nl == NULL ? n : (size_t)(nl - buf) + 1;
    /* strstr over the block (glibc's is many times a byte loop's speed);
     * a NUL inside a line ends the block's search early, which can only
     * keep moves, never drop one. */
    char keep_end = buf[end];
    buf[end] = '\0';
    for (char *at = buf; (at = strstr(at, needle)) != NULL;) {
      const char *start = last_newline(buf, (size_t)(at - buf));
      start = start != NULL ? start + 1 : buf;
      char *stop = strchr(at, '\n');
      if (stop == NULL) stop = buf + end;
      char keep = *stop;
      *stop = '\0';
      char chain[CHAIN_MAX];
      if (member_of(start, (size_t)(stop - start), "\"chain\":\"", "chain", chain, sizeof chain))
        (void)dlqb_hashset_add(m->closed, chain, strlen(chain), NULL);
      *stop = keep;
      at = stop;
    }
    buf[end] = keep_end;
    memmove(buf, buf + end, n - end);
    have = n - end;
    if (got == 0) break;
  }
  free(buf);
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
    if (dlqb_hashset_size(m->set) == 0 && dlqb_hashset_size(m->ended) == 0) continue;
    bool out = strstr(line, from_member) != NULL, in = strstr(line, to_member) != NULL;
    if (!out && !in) continue;
    char id[sizeof((dlqb_hop *)0)->message_id];
    if (!member_of(line, (size_t)len, "\"message_id\":\"", "message_id", id, sizeof id)) continue;
    /* Any later record taking the message out of the queue ends its
     * intent (its own hop, or another mover's once it was settled), and
     * is kept as an ended move until its chain ends. */
    const ops_open_move *open = dlqb_hashset_get(m->set, id, strlen(id));
    const ops_open_move *was = dlqb_hashset_get(m->ended, id, strlen(id));
    if (out && (open != NULL || was != NULL)) {
      ops_open_move mv = open != NULL ? *open : *was;
      (void)dlqb_hashset_remove(m->set, id, strlen(id));
      keep_ended(m, line, (size_t)len, id, &mv);
    }
    /* Brought (back) into the queue: what is there now is that. */
    if (in) (void)dlqb_hashset_remove(m->ended, id, strlen(id));
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
    m->ended = dlqb_hashset_new(sizeof(ops_open_move));
    m->closed = dlqb_hashset_new(0);
  }
  if (m == NULL || m->set == NULL || m->ended == NULL || m->closed == NULL) {
    ops_open_moves_free(m);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  char **files = NULL;
  size_t n = 0;
  dlqb_status st = dlqb_audit_list_files(audit_log, &files, &n, err);
  char from_member[DLQB_NAME_MAX + 16], to_member[DLQB_NAME_MAX + 16];
  snprintf(from_member, sizeof from_member, "\"from\":\"%s\"", from);
  snprintf(to_member, sizeof to_member, "\"to\":\"%s\"", from);
  for (int pass = 0; pass < 2; pass++)
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
      if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode)) {
        if (pass == 0) read_closed(m, f);
        else read_file(m, f, from, from_member, to_member);
      }
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
  return dlqb_hashset_get(m->ended, id, strlen(id));
}

size_t ops_open_moves_count(const ops_open_moves *m) {
  return m != NULL ? dlqb_hashset_size(m->set) + dlqb_hashset_size(m->ended) : 0;
}

void ops_open_moves_free(ops_open_moves *m) {
  if (m == NULL) return;
  dlqb_hashset_free(m->set);
  dlqb_hashset_free(m->ended);
  dlqb_hashset_free(m->closed);
  free(m);
}

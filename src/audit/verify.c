/* Verifying the audit trail, line by line and with no I/O (so it can be
 * fuzzed and unit-tested over strings): MACs, chains, rotation links and
 * the seal. */
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_private.h"
#include "dlqb/audit.h"
#include "dlqb/hashset.h"
#include "dlqb/text.h"

#define NAME_MAX_ 256
#define WRITER_MAX 96

/* What the verifier knows of one chain, kept in a hash set keyed by its id. */
typedef struct {
  char id[DLQB_AUDIT_CHAIN_HEX + 1];
  bool known; /* its chain_start was seen, or a rotation vouched for it */
  bool ended;
  uint64_t seq;
  char mac[DLQB_AUDIT_MAC_HEX + 1];
  char writer[WRITER_MAX];
  bool sealed, seal_hit;
  uint64_t seal_seq;
  char seal_mac[DLQB_AUDIT_MAC_HEX + 1];
} chain_state;

struct dlqb_audit_verifier {
  dlqb__audit_hmac hmac;
  char key_id[DLQB_AUDIT_KEY_ID_HEX + 1];
  int partial;
  dlqb_hashset *chains; /* chain id -> chain_state */
  json_tokener *tok;
  char *scratch;
  size_t scratch_cap;
  char file[NAME_MAX_];
  char prev_file[NAME_MAX_];
  unsigned long line, seal_lines;
  char last_mac[DLQB_AUDIT_MAC_HEX + 1]; /* of the last line read */
  bool failed;
  dlqb_audit_summary sum;
};

/* ---- the chain table ---- */

static chain_state *lookup(dlqb_audit_verifier *v, const char *id) {
  return dlqb_hashset_get(v->chains, id, strlen(id));
}

/* The entry for id, created when new; NULL when out of memory. The pointer
 * is valid until the next upsert (the table may grow). */
static chain_state *upsert(dlqb_audit_verifier *v, const char *id) {
  bool added;
  chain_state *c = dlqb_hashset_add(v->chains, id, strlen(id), &added);
  if (c != NULL && added) snprintf(c->id, sizeof c->id, "%s", id);
  return c;
}

/* ---- lifecycle ---- */

dlqb_audit_verifier *dlqb_audit_verifier_new(const unsigned char *key, size_t key_len,
                                             int partial) {
  dlqb_audit_verifier *v = calloc(1, sizeof *v);
  if (v == NULL) return NULL;
  v->partial = partial;
  v->chains = dlqb_hashset_new(sizeof(chain_state));
  v->tok = json_tokener_new();
  if (v->chains == NULL || v->tok == NULL || !dlqb__audit_hmac_init(&v->hmac, key, key_len)) {
    dlqb_audit_verifier_free(v);
    return NULL;
  }
  json_tokener_set_flags(v->tok, JSON_TOKENER_STRICT);
  dlqb_audit_key_id(key, key_len, v->key_id);
  snprintf(v->file, sizeof v->file, "audit log");
  return v;
}

void dlqb_audit_verifier_free(dlqb_audit_verifier *v) {
  if (v == NULL) return;
  dlqb__audit_hmac_release(&v->hmac);
  if (v->tok != NULL) json_tokener_free(v->tok);
  dlqb_hashset_free(v->chains);
  free(v->scratch);
  free(v);
}

/* ---- reading one line ---- */

static dlqb_status bad(dlqb_audit_verifier *v, dlqb_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fails the verification with "FILE: line N: <what>". */
static dlqb_status bad(dlqb_audit_verifier *v, dlqb_error *err, const char *fmt, ...) {
  char what[DLQB_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  v->failed = true;
  return dlqb_fail(err, DLQB_EINVAL, "%s: line %lu: %s", v->file, v->line, what);
}

/* Parses body + "}" (the MAC'd object) with json-c; NULL when malformed. */
static json_object *parse_body(dlqb_audit_verifier *v, const char *line, size_t body) {
  if (body + 2 > v->scratch_cap) {
    size_t ncap = body + 2 < 4096 ? 4096 : (body + 2) * 2;
    char *n = realloc(v->scratch, ncap);
    if (n == NULL) return NULL;
    v->scratch = n;
    v->scratch_cap = ncap;
  }
  memcpy(v->scratch, line, body);
  v->scratch[body] = '}';
  v->scratch[body + 1] = '\0';
  json_tokener_reset(v->tok);
  json_object *o = json_tokener_parse_ex(v->tok, v->scratch, (int)(body + 1));
  if (o != NULL && (json_tokener_get_error(v->tok) != json_tokener_success ||
                    json_tokener_get_parse_end(v->tok) != body + 1 ||
                    !json_object_is_type(o, json_type_object))) {
    json_object_put(o);
    o = NULL;
  }
  return o;
}

/* Copies record text for an error message: one printable line. */
static void copy_text(char *dst, size_t cap, const char *src) {
  dlqb_text_sanitize(dst, cap, src != NULL ? src : "", src != NULL ? strlen(src) : 0);
}

/* A string member, or NULL when absent or of another type. */
static const char *str_of(json_object *o, const char *key) {
  json_object *m;
  if (!json_object_object_get_ex(o, key, &m) || !json_object_is_type(m, json_type_string))
    return NULL;
  return json_object_get_string(m);
}

static bool hex_of(json_object *o, const char *key, size_t n, char *out) {
  const char *s = str_of(o, key);
  if (s == NULL || strlen(s) != n) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  memcpy(out, s, n + 1);
  return true;
}

static bool uint_of(json_object *o, const char *key, uint64_t *out) {
  json_object *m;
  if (!json_object_object_get_ex(o, key, &m) || !json_object_is_type(m, json_type_int))
    return false;
  int64_t x = json_object_get_int64(m);
  if (x < 0 || x == INT64_MAX) return false;
  *out = (uint64_t)x;
  return true;
}

/* Checks the MAC of a line and parses it. On success *obj is the record
 * and mac its MAC. `what` names the kind of line in messages. */
static dlqb_status open_line(dlqb_audit_verifier *v, const char *line, size_t len,
                             const char *what, json_object **obj, char *mac, dlqb_error *err) {
  size_t body;
  const char *hex;
  char want[DLQB_AUDIT_MAC_HEX + 1];
  *obj = NULL;
  if (len == 0) return bad(v, err, "empty line (not %s)", what);
  if (!dlqb__audit_split(line, len, &body, &hex))
    return bad(v, err, "not %s (no mac at the end of the line)", what);
  if (!dlqb__audit_hmac_body(&v->hmac, line, body, want))
    return dlqb_fail(err, DLQB_ENOMEM, "hmac-sha256 failed (openssl)");
  json_object *o = parse_body(v, line, body);
  if (!dlqb__audit_mac_equal(want, hex)) {
    char key[DLQB_AUDIT_KEY_ID_HEX + 1];
    dlqb_status st;
    /* The key id is not authenticated: it only makes the message helpful,
     * and is quoted only when it has the shape of one. */
    if (o != NULL && hex_of(o, "key", DLQB_AUDIT_KEY_ID_HEX, key) && strcmp(key, v->key_id) != 0)
      st = bad(v, err, "mac mismatch (wrong key: the record names key id %s, this key's id "
               "is %s)", key, v->key_id);
    else
      st = bad(v, err, "mac mismatch (record edited, or wrong key)");
    json_object_put(o);
    return st;
  }
  if (o == NULL) return bad(v, err, "malformed %s (the mac is valid: a writer bug)", what);
  json_object *ver;
  if (!json_object_object_get_ex(o, "v", &ver) || json_object_get_int(ver) != DLQB_AUDIT_VERSION) {
    json_object_put(o);
    return bad(v, err, "unsupported record version (this verifier reads version %d)",
               DLQB_AUDIT_VERSION);
  }
  memcpy(mac, hex, DLQB_AUDIT_MAC_HEX);
  mac[DLQB_AUDIT_MAC_HEX] = '\0';
  *obj = o;
  return DLQB_OK;
}

dlqb_status dlqb_audit_verifier_seal_line(dlqb_audit_verifier *v, const char *line, size_t len,
                                          dlqb_error *err) {
  json_object *o = NULL;
  char mac[DLQB_AUDIT_MAC_HEX + 1];
  char saved[NAME_MAX_];
  unsigned long saved_line = v->line;
  if (v->failed) return dlqb_fail(err, DLQB_EINVAL, "verification already failed");
  snprintf(saved, sizeof saved, "%s", v->file);
  snprintf(v->file, sizeof v->file, "seal");
  v->line = ++v->seal_lines;
  dlqb_status st = open_line(v, line, len, "a seal record", &o, mac, err);
  if (st == DLQB_OK) {
    /* The line is valid JSON (open_line parsed it); what it vouches for is
     * read by the seal reader the writer uses too, so both agree on it. The
     * writer's name is only for messages. */
    dlqb__audit_seal seal;
    const char *writer = str_of(o, "writer");
    chain_state *c = NULL;
    if (!dlqb__audit_seal_parse(line, len, &seal)) {
      st = bad(v, err, "malformed seal record");
    } else if ((c = upsert(v, seal.chain)) == NULL) {
      st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    } else if (c->sealed && seal.seq < c->seal_seq) {
      /* A writer appends its seal lines in order, under the log's lock. */
      st = bad(v, err, "chain %s goes back from seq %llu to %llu", seal.chain,
               (unsigned long long)c->seal_seq, (unsigned long long)seal.seq);
    } else if (c->sealed && seal.seq == c->seal_seq &&
               !dlqb__audit_mac_equal(seal.last_mac, c->seal_mac)) {
      st = bad(v, err, "chain %s is sealed at seq %llu with two different records", seal.chain,
               (unsigned long long)seal.seq);
    } else {
      /* The latest line of a chain is the one that counts. */
      if (!c->sealed) v->sum.sealed++;
      c->sealed = true;
      c->seal_seq = seal.seq;
      memcpy(c->seal_mac, seal.last_mac, sizeof c->seal_mac);
      copy_text(c->writer, sizeof c->writer, writer);
      v->sum.seal_checked = 1;
    }
  }
  json_object_put(o);
  snprintf(v->file, sizeof v->file, "%s", saved);
  v->line = saved_line;
  return st;
}

void dlqb_audit_verifier_begin_file(dlqb_audit_verifier *v, const char *name) {
  if (v->sum.files > 0) snprintf(v->prev_file, sizeof v->prev_file, "%s", v->file);
  copy_text(v->file, sizeof v->file, name);
  v->line = 0;
  v->sum.files++;
  v->sum.seal_checked = v->sum.seal_checked || v->seal_lines > 0;
}

/* A file_start link: line 1 of every rotated-into file. */
static dlqb_status on_file_start(dlqb_audit_verifier *v, json_object *o, dlqb_error *err) {
  char prev_mac[DLQB_AUDIT_MAC_HEX + 1];
  const char *prev_text = str_of(o, "prev_file");
  char prev_file[NAME_MAX_];
  copy_text(prev_file, sizeof prev_file, prev_text);
  json_object *chains;
  if (!hex_of(o, "prev_mac", DLQB_AUDIT_MAC_HEX, prev_mac) || prev_text == NULL ||
      !json_object_object_get_ex(o, "chains", &chains) ||
      !json_object_is_type(chains, json_type_array))
    return bad(v, err, "malformed file_start record");
  if (v->line != 1) return bad(v, err, "file_start record inside a file (inserted record)");
  bool first = v->sum.files == 1;
  if (first && !v->partial)
    return bad(v, err, "this file continues '%s', which was not given (give every file, oldest "
               "first; or --partial to start here)", prev_file);
  if (!first && !dlqb__audit_mac_equal(prev_mac, v->last_mac))
    return bad(v, err, "does not follow '%s' (it continues '%s'): a file between them is "
               "missing, a file was cut short, or the files are out of order",
               v->prev_file, prev_file);
  size_t n = json_object_array_length(chains);
  for (size_t i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx(chains, i);
    char id[DLQB_AUDIT_CHAIN_HEX + 1], mac[DLQB_AUDIT_MAC_HEX + 1];
    uint64_t seq;
    if (!json_object_is_type(e, json_type_object) || !hex_of(e, "chain", DLQB_AUDIT_CHAIN_HEX, id) ||
        !uint_of(e, "seq", &seq) || !hex_of(e, "mac", DLQB_AUDIT_MAC_HEX, mac))
      return bad(v, err, "malformed chain entry %zu in file_start", i + 1);
    chain_state *c = first ? upsert(v, id) : lookup(v, id);
    if (first) {
      /* --partial: take the rotation's word for what came before. */
      if (c == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
      c->known = true;
      c->seq = seq;
      memcpy(c->mac, mac, sizeof mac);
      continue;
    }
    if (c == NULL || !c->known)
      return bad(v, err, "chain %s had records before this rotation, and none are present "
                 "(records deleted)", id);
    if (seq > c->seq)
      return bad(v, err, "chain %s reached seq %llu before this rotation, but the files hold "
                 "only up to seq %llu (records deleted)",
                 id, (unsigned long long)seq, (unsigned long long)c->seq);
    /* A smaller seq is a seal that lagged (a crash between log and seal). */
    if (seq == c->seq && !dlqb__audit_mac_equal(mac, c->mac))
      return bad(v, err, "chain %s seq %llu differs from the rotation's record of it (record "
                 "replaced)", id, (unsigned long long)seq);
  }
  if (first) v->sum.partial = 1;
  v->sum.rotations++;
  return DLQB_OK;
}

/* A chain record: chain_start, a hop, or chain_end. */
static dlqb_status on_chain_record(dlqb_audit_verifier *v, json_object *o, const char *event,
                                   const char *mac, dlqb_error *err) {
  char id[DLQB_AUDIT_CHAIN_HEX + 1], prev[DLQB_AUDIT_MAC_HEX + 1];
  uint64_t seq;
  if (!hex_of(o, "chain", DLQB_AUDIT_CHAIN_HEX, id) || !uint_of(o, "seq", &seq) ||
      !hex_of(o, "prev", DLQB_AUDIT_MAC_HEX, prev))
    return bad(v, err, "malformed record (chain, seq or prev missing)");
  if (v->line == 1 && v->sum.files > 1)
    return bad(v, err, "expected a file_start record linking this file to '%s' (a file is "
               "missing, or the files are out of order)", v->prev_file);
  chain_state *c = lookup(v, id);
  if (strcmp(event, DLQB__AUDIT_EV_CHAIN_START) == 0) {
    if (seq != 0 || strcmp(prev, DLQB__AUDIT_ZERO_MAC) != 0)
      return bad(v, err, "malformed chain_start (seq must be 0 and prev zero)");
    if (c != NULL && c->known)
      return bad(v, err, "chain %s starts a second time (a copied or replayed record)", id);
    if (c == NULL && (c = upsert(v, id)) == NULL)
      return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    const char *writer = str_of(o, "writer");
    c->known = true;
    copy_text(c->writer, sizeof c->writer, writer);
    v->sum.chains++;
  } else {
    if (c == NULL || !c->known)
      return bad(v, err, "record of unknown chain %s (its chain_start is missing: deleted, or "
                 "an earlier file was not given)", id);
    if (c->ended)
      return bad(v, err, "record of chain %s after its chain_end (inserted record)", id);
    if (seq <= c->seq)
      return bad(v, err, "chain %s goes back from seq %llu to seq %llu (record duplicated, "
                 "inserted or reordered)", id, (unsigned long long)c->seq, (unsigned long long)seq);
    if (seq > c->seq + 1)
      return bad(v, err, "chain %s jumps from seq %llu to seq %llu (records deleted or "
                 "reordered)", id, (unsigned long long)c->seq, (unsigned long long)seq);
    if (!dlqb__audit_mac_equal(prev, c->mac))
      return bad(v, err, "prev does not match seq %llu of chain %s (records deleted, inserted "
                 "or reordered)", (unsigned long long)c->seq, id);
    if (strcmp(event, DLQB__AUDIT_EV_CHAIN_END) == 0) {
      c->ended = true;
      v->sum.chains_ended++;
    }
  }
  c->seq = seq;
  memcpy(c->mac, mac, DLQB_AUDIT_MAC_HEX + 1);
  if (c->sealed && seq == c->seal_seq) {
    if (!dlqb__audit_mac_equal(mac, c->seal_mac))
      return bad(v, err, "chain %s seq %llu differs from the seal (record replaced)", id,
                 (unsigned long long)seq);
    c->seal_hit = true;
  }
  v->sum.records++;
  return DLQB_OK;
}

dlqb_status dlqb_audit_verifier_line(dlqb_audit_verifier *v, const char *line, size_t len,
                                     int complete, dlqb_error *err) {
  if (v->failed) return dlqb_fail(err, DLQB_EINVAL, "verification already failed");
  if (v->sum.files == 0) dlqb_audit_verifier_begin_file(v, "audit log");
  v->line++;
  if (!complete)
    return bad(v, err, "incomplete record at the end of the file (a torn write, or the file "
               "was cut)");
  json_object *o = NULL;
  char mac[DLQB_AUDIT_MAC_HEX + 1];
  dlqb_status st = open_line(v, line, len, "an audit record", &o, mac, err);
  if (st != DLQB_OK) return st;
  const char *event = str_of(o, "event");
  if (event == NULL)
    st = bad(v, err, "malformed record (no event)");
  else if (strcmp(event, DLQB__AUDIT_EV_FILE_START) == 0)
    st = on_file_start(v, o, err);
  else
    st = on_chain_record(v, o, event, mac, err);
  json_object_put(o);
  if (st == DLQB_OK) memcpy(v->last_mac, mac, sizeof mac);
  return st;
}

/* hashset_each visitor: remembers the first sealed chain that the log does
 * not reach up to its seal line (with --partial, one whose records started
 * past the seal point is not short). */
static void find_short_chain(void *ctx, const char *key, size_t len, void *value) {
  (void)key;
  (void)len;
  const chain_state **found = ctx;
  const chain_state *c = value;
  if (*found != NULL || !c->sealed || c->seal_hit) return;
  if (!c->known || c->seq < c->seal_seq) *found = c;
}

dlqb_status dlqb_audit_verifier_finish(dlqb_audit_verifier *v, dlqb_audit_summary *sum,
                                       dlqb_error *err) {
  if (v->failed) return dlqb_fail(err, DLQB_EINVAL, "verification already failed");
  /* Report a sealed chain that falls short: the tail was cut. */
  const chain_state *c = NULL;
  dlqb_hashset_each(v->chains, find_short_chain, &c);
  if (c != NULL) {
    v->line++;
    if (!c->known)
      return bad(v, err, "missing: the seal vouches for chain %s (writer %s) up to seq %llu, "
                 "but the log has no record of it (the tail was cut, or the last file is "
                 "missing)", c->id, c->writer, (unsigned long long)c->seal_seq);
    return bad(v, err, "missing: chain %s (writer %s) ends at seq %llu but the seal vouches "
               "for seq %llu (the tail was cut: %llu records missing)",
               c->id, c->writer, (unsigned long long)c->seq, (unsigned long long)c->seal_seq,
               (unsigned long long)(c->seal_seq - c->seq));
  }
  if (sum != NULL) *sum = v->sum;
  return DLQB_OK;
}

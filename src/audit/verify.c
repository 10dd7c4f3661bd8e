/* Verifying the audit trail, line by line and with no I/O (so it can be
 * fuzzed and unit-tested over strings): signatures, hash chains, rotation
 * links and the seal, with public keys only. */
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

#define NAME_MAX_  256
#define WRITER_MAX 96

/* What the verifier knows of one chain, kept in a hash set keyed by its id. */
typedef struct {
  char id[DLQB_AUDIT_CHAIN_HEX + 1];
  bool known; /* its chain_start was seen, or a rotation vouched for it */
  bool ended;
  uint64_t seq;
  char hash[DLQB_AUDIT_HASH_HEX + 1];
  char key[DLQB_AUDIT_KEY_ID_HEX + 1]; /* the key its records are signed with */
  /* Records since the chain's last signed one: a writer signs the last
   * record of every batch, so a chain that ends unsigned was cut inside a
   * batch or added to by someone without the key. */
  uint64_t unsigned_tail;
  char writer[WRITER_MAX];
  bool sealed, seal_hit;
  bool linked; /* a file_start carried its state */
  uint64_t seal_seq;
  char seal_hash[DLQB_AUDIT_HASH_HEX + 1];
  char seal_key[DLQB_AUDIT_KEY_ID_HEX + 1];
  /* Its latest anchor (the highest seq the off-host stream vouches for). */
  bool anchored, anchor_hit, anchor_ended;
  uint64_t anchor_seq;
  char anchor_hash[DLQB_AUDIT_HASH_HEX + 1];
  char anchor_key[DLQB_AUDIT_KEY_ID_HEX + 1];
  char anchor_file[NAME_MAX_];
  char anchor_file_id[DLQB_AUDIT_HASH_HEX + 1];
  char anchor_time[40];
  char anchor_written[40]; /* when its head batch was written */
} chain_state;

struct dlqb_audit_verifier {
  const dlqb_audit_keyring *ring;
  dlqb__audit_hasher hasher;
  int partial;
  bool seal_given;
  dlqb_hashset *chains; /* chain id -> chain_state */
  json_tokener *tok;
  char *scratch;
  size_t scratch_cap;
  char file[NAME_MAX_];
  char prev_file[NAME_MAX_];
  unsigned long line, seal_lines;
  char last_hash[DLQB_AUDIT_HASH_HEX + 1]; /* of the last line read */
  /* The hash of each file's first line: its identity, which anchors name. */
  char (*file_ids)[DLQB_AUDIT_HASH_HEX + 1];
  size_t nfile_ids, file_ids_cap;
  unsigned long anchor_msgs;
  char first_file_time[40]; /* --partial: when the first file given began (its file_start) */
  bool anchors_given;
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

dlqb_audit_verifier *dlqb_audit_verifier_new(const dlqb_audit_keyring *ring, int partial) {
  dlqb_audit_verifier *v = calloc(1, sizeof *v);
  if (v == NULL) return NULL;
  v->ring = ring;
  v->partial = partial;
  v->chains = dlqb_hashset_new(sizeof(chain_state));
  v->tok = json_tokener_new();
  if (v->chains == NULL || v->tok == NULL || !dlqb__audit_hasher_init(&v->hasher)) {
    dlqb_audit_verifier_free(v);
    return NULL;
  }
  json_tokener_set_flags(v->tok, JSON_TOKENER_STRICT);
  snprintf(v->file, sizeof v->file, "audit log");
  return v;
}

void dlqb_audit_verifier_free(dlqb_audit_verifier *v) {
  if (v == NULL) return;
  dlqb__audit_hasher_release(&v->hasher);
  if (v->tok != NULL) json_tokener_free(v->tok);
  dlqb_hashset_free(v->chains);
  free(v->file_ids);
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
  /* Line 0: a finding about the whole input (the anchors' check at the end). */
  if (v->line == 0) return dlqb_fail(err, DLQB_EINVAL, "%s: %s", v->file, what);
  return dlqb_fail(err, DLQB_EINVAL, "%s: line %lu: %s", v->file, v->line, what);
}

/* Parses body + "}" (the hashed and signed object) into v->scratch and
 * with json-c; NULL when malformed. */
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

/* A signature that does not verify with the key its line names: the
 * failure names the chain and seq the line claims and, when name_signer
 * and another given key verifies it, that key (a writer holding its own
 * key forged into a chain of another's). name_signer costs a check per
 * given key: not for anchors, which anyone can append by the thousand and
 * which are ignored when bad. v->scratch holds BODY + "}". */
static dlqb_status bad_signature(dlqb_audit_verifier *v, json_object *o, const char *key,
                                 const char *sig, size_t body, bool name_signer, dlqb_error *err) {
  char id[DLQB_AUDIT_CHAIN_HEX + 1], where[80] = "";
  uint64_t seq;
  if (hex_of(o, "chain", DLQB_AUDIT_CHAIN_HEX, id) && uint_of(o, "seq", &seq))
    snprintf(where, sizeof where, " (chain %s seq %llu)", id, (unsigned long long)seq);
  for (size_t i = 0; name_signer && i < v->ring->n; i++) {
    const dlqb__audit_pubkey *k = &v->ring->keys[i];
    if (strcmp(k->id, key) != 0 && dlqb__audit_sig_ok(k->pub, v->scratch, body + 1, sig))
      return bad(v, err,
                 "signature does not verify with key %s%s: it was made with key %s (%s) "
                 "(forged under another writer's key)",
                 key, where, k->id, k->name);
  }
  return bad(v, err,
             "signature does not verify with key %s%s (record edited, or forged under "
             "another writer's key id)",
             key, where);
}

/* Checks a line's signature (when it has one; `must_sign` requires one)
 * with the key it names, and parses it. On success *obj is the record,
 * hash its hash, key the key id it names and *is_signed whether it is
 * signed. `what` names the kind of line in messages; name_signer: see
 * bad_signature. */
static dlqb_status open_line(dlqb_audit_verifier *v, const char *line, size_t len, const char *what,
                             bool must_sign, bool name_signer, json_object **obj, char *hash,
                             char *key, bool *is_signed, dlqb_error *err) {
  size_t body;
  const char *sig;
  *obj = NULL;
  if (len == 0) return bad(v, err, "empty line (not %s)", what);
  if (!dlqb__audit_split(line, len, &body, &sig))
    return bad(v, err, "not %s (not one JSON object)", what);
  json_object *o = parse_body(v, line, body);
  if (o == NULL) return bad(v, err, "malformed %s", what);
  json_object *ver;
  int version = json_object_object_get_ex(o, "v", &ver) ? json_object_get_int(ver) : 0;
  if (version != DLQB_AUDIT_VERSION) {
    json_object_put(o);
    if (version == 1)
      return bad(v, err,
                 "a version 1 record (HMAC, before public-key signatures): this "
                 "verifier reads version %d only; check that file with the release that wrote "
                 "it and its HMAC key",
                 DLQB_AUDIT_VERSION);
    return bad(v, err, "unsupported record version (this verifier reads version %d)",
               DLQB_AUDIT_VERSION);
  }
  if (!dlqb__audit_hash_body(&v->hasher, line, body, hash)) {
    json_object_put(o);
    return dlqb_fail(err, DLQB_ENOMEM, "sha-256 failed (openssl)");
  }
  if (!hex_of(o, "key", DLQB_AUDIT_KEY_ID_HEX, key)) {
    json_object_put(o);
    return bad(v, err, "malformed %s (no key id)", what);
  }
  *is_signed = sig != NULL;
  dlqb_status st = DLQB_OK;
  if (sig == NULL) {
    if (must_sign)
      st = bad(v, err, "%s without a signature (forged by someone without a key)", what);
  } else {
    const dlqb__audit_pubkey *k = dlqb__audit_keyring_find(v->ring, key);
    /* v->scratch holds BODY + "}" (parse_body): what the signature covers. */
    if (k == NULL)
      st = bad(v, err,
               "signed with key %s, which is not among the %zu public keys given (a "
               "writer whose public key is missing, or a forgery)",
               key, dlqb_audit_keyring_size(v->ring));
    else if (k->revoked)
      st = bad(v, err, "signed with key %s, which is revoked (%s)", key, k->name);
    else if (!dlqb__audit_sig_ok(k->pub, v->scratch, body + 1, sig))
      st = bad_signature(v, o, key, sig, body, name_signer, err);
  }
  if (st != DLQB_OK) {
    json_object_put(o);
    return st;
  }
  *obj = o;
  return DLQB_OK;
}

dlqb_status dlqb_audit_verifier_seal_line(dlqb_audit_verifier *v, const char *line, size_t len,
                                          dlqb_error *err) {
  json_object *o = NULL;
  char hash[DLQB_AUDIT_HASH_HEX + 1], key[DLQB_AUDIT_KEY_ID_HEX + 1];
  bool is_signed;
  char saved[NAME_MAX_];
  unsigned long saved_line = v->line;
  if (v->failed) return dlqb_fail(err, DLQB_EINVAL, "verification already failed");
  v->seal_given = true;
  snprintf(saved, sizeof saved, "%s", v->file);
  snprintf(v->file, sizeof v->file, "seal");
  v->line = ++v->seal_lines;
  dlqb_status st =
      open_line(v, line, len, "a seal record", true, true, &o, hash, key, &is_signed, err);
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
               !dlqb__audit_hash_equal(seal.last_hash, c->seal_hash)) {
      st = bad(v, err, "chain %s is sealed at seq %llu with two different records", seal.chain,
               (unsigned long long)seal.seq);
    } else if (c->sealed && strcmp(c->seal_key, key) != 0) {
      st = bad(v, err,
               "chain %s is sealed with key %s and with key %s (forged under another "
               "writer's key)",
               seal.chain, c->seal_key, key);
    } else {
      /* The latest line of a chain is the one that counts. */
      if (!c->sealed) v->sum.sealed++;
      c->sealed = true;
      c->seal_seq = seal.seq;
      memcpy(c->seal_hash, seal.last_hash, sizeof c->seal_hash);
      memcpy(c->seal_key, key, sizeof c->seal_key);
      copy_text(c->writer, sizeof c->writer, writer);
      v->sum.seal_checked = 1;
    }
  }
  json_object_put(o);
  snprintf(v->file, sizeof v->file, "%s", saved);
  v->line = saved_line;
  return st;
}

void dlqb_audit_verifier_begin_seal(dlqb_audit_verifier *v) { v->seal_given = true; }

void dlqb_audit_verifier_begin_file(dlqb_audit_verifier *v, const char *name) {
  if (v->sum.files > 0) snprintf(v->prev_file, sizeof v->prev_file, "%s", v->file);
  copy_text(v->file, sizeof v->file, name);
  v->line = 0;
  v->sum.files++;
  v->sum.seal_checked = v->sum.seal_checked || v->seal_lines > 0;
}

/* A file_start link: line 1 of every rotated-into file. */
static dlqb_status on_file_start(dlqb_audit_verifier *v, json_object *o, dlqb_error *err) {
  char prev_hash[DLQB_AUDIT_HASH_HEX + 1];
  const char *prev_text = str_of(o, "prev_file");
  char prev_file[NAME_MAX_];
  copy_text(prev_file, sizeof prev_file, prev_text);
  json_object *chains;
  if (!hex_of(o, "prev_hash", DLQB_AUDIT_HASH_HEX, prev_hash) || prev_text == NULL ||
      !json_object_object_get_ex(o, "chains", &chains) ||
      !json_object_is_type(chains, json_type_array))
    return bad(v, err, "malformed file_start record");
  if (v->line != 1) return bad(v, err, "file_start record inside a file (inserted record)");
  bool first = v->sum.files == 1;
  if (first && !v->partial)
    return bad(v, err,
               "this file continues '%s', which was not given (give every file, oldest "
               "first; or --partial to start here)",
               prev_file);
  if (!first && !dlqb__audit_hash_equal(prev_hash, v->last_hash))
    return bad(v, err,
               "does not follow '%s' (it continues '%s'): a file between them is "
               "missing, a file was cut short, or the files are out of order",
               v->prev_file, prev_file);
  size_t n = json_object_array_length(chains);
  for (size_t i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx(chains, i);
    char id[DLQB_AUDIT_CHAIN_HEX + 1], hash[DLQB_AUDIT_HASH_HEX + 1];
    uint64_t seq;
    if (!json_object_is_type(e, json_type_object) ||
        !hex_of(e, "chain", DLQB_AUDIT_CHAIN_HEX, id) || !uint_of(e, "seq", &seq) ||
        !hex_of(e, "hash", DLQB_AUDIT_HASH_HEX, hash))
      return bad(v, err, "malformed chain entry %zu in file_start", i + 1);
    chain_state *c = first ? upsert(v, id) : lookup(v, id);
    if (first) {
      /* --partial: take the rotation's word for what came before. */
      if (c == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
      c->known = true;
      c->linked = true;
      c->seq = seq;
      memcpy(c->hash, hash, sizeof hash);
      continue;
    }
    if (c == NULL || !c->known)
      return bad(v, err,
                 "chain %s had records before this rotation, and none are present "
                 "(records deleted)",
                 id);
    if (seq > c->seq)
      return bad(v, err,
                 "chain %s reached seq %llu before this rotation, but the files hold "
                 "only up to seq %llu (records deleted)",
                 id, (unsigned long long)seq, (unsigned long long)c->seq);
    /* A smaller seq is a seal that lagged (a crash between log and seal). */
    if (seq == c->seq && !dlqb__audit_hash_equal(hash, c->hash))
      return bad(v, err,
                 "chain %s seq %llu differs from the rotation's record of it (record "
                 "replaced)",
                 id, (unsigned long long)seq);
    c->linked = true;
  }
  if (first) {
    v->sum.partial = 1;
    copy_text(v->first_file_time, sizeof v->first_file_time, str_of(o, "time"));
  }
  v->sum.rotations++;
  return DLQB_OK;
}

/* The link between chains: a batch's first record names the line the
 * file ended in when the batch was appended (after_*), under the lock, so
 * it must be the line before it. Records without it (written by a release
 * before the links) are not checked; a writer cannot have left it out of
 * a signed batch without its key. */
static dlqb_status check_link(dlqb_audit_verifier *v, json_object *o, const char *id, uint64_t seq,
                              dlqb_error *err) {
  json_object *m;
  if (!json_object_object_get_ex(o, "after_hash", &m)) return DLQB_OK;
  char hash[DLQB_AUDIT_HASH_HEX + 1], after_chain[DLQB_AUDIT_CHAIN_HEX + 1];
  uint64_t after_seq;
  const char *ac = str_of(o, "after_chain");
  if (!hex_of(o, "after_hash", DLQB_AUDIT_HASH_HEX, hash) || ac == NULL ||
      !uint_of(o, "after_seq", &after_seq) ||
      (ac[0] != '\0' && !hex_of(o, "after_chain", DLQB_AUDIT_CHAIN_HEX, after_chain)))
    return bad(v, err, "malformed record (after_chain, after_seq or after_hash)");
  if (ac[0] == '\0') after_chain[0] = '\0';
  const char *expected = v->line == 1 ? DLQB__AUDIT_ZERO_HASH : v->last_hash;
  if (dlqb__audit_hash_equal(hash, expected)) return DLQB_OK;
  if (after_chain[0] == '\0')
    return bad(v, err,
               "missing: chain %s seq %llu was appended %s, but the line before it is "
               "another (lines before it were deleted or inserted)",
               id, (unsigned long long)seq,
               strcmp(hash, DLQB__AUDIT_ZERO_HASH) == 0 ? "to an empty file"
                                                        : "after the file's file_start");
  const chain_state *p = lookup(v, after_chain);
  if (p == NULL || !p->known)
    return bad(v, err,
               "missing: chain %s (up to seq %llu at least) is not in the files, but "
               "chain %s seq %llu was appended after it (the chain was deleted whole)",
               after_chain, (unsigned long long)after_seq, id, (unsigned long long)seq);
  if (p->seq < after_seq)
    return bad(v, err,
               "missing: chain %s (writer %s) reached seq %llu before chain %s seq %llu "
               "was appended, but the files hold it only up to seq %llu (%llu records "
               "deleted)",
               after_chain, p->writer, (unsigned long long)after_seq, id, (unsigned long long)seq,
               (unsigned long long)p->seq, (unsigned long long)(after_seq - p->seq));
  return bad(v, err,
             "chain %s seq %llu was appended after seq %llu of chain %s, but the line "
             "before it is another (lines deleted, inserted or moved)",
             id, (unsigned long long)seq, (unsigned long long)after_seq, after_chain);
}

/* A chain record: chain_start, a hop, or chain_end. */
static dlqb_status on_chain_record(dlqb_audit_verifier *v, json_object *o, const char *event,
                                   const char *hash, const char *key, bool is_signed,
                                   dlqb_error *err) {
  char id[DLQB_AUDIT_CHAIN_HEX + 1], prev[DLQB_AUDIT_HASH_HEX + 1];
  uint64_t seq;
  if (!hex_of(o, "chain", DLQB_AUDIT_CHAIN_HEX, id) || !uint_of(o, "seq", &seq) ||
      !hex_of(o, "prev", DLQB_AUDIT_HASH_HEX, prev))
    return bad(v, err, "malformed record (chain, seq or prev missing)");
  if (v->line == 1 && v->sum.files > 1)
    return bad(v, err,
               "expected a file_start record linking this file to '%s' (a file is "
               "missing, or the files are out of order)",
               v->prev_file);
  chain_state *c = lookup(v, id);
  if (strcmp(event, DLQB__AUDIT_EV_CHAIN_START) == 0) {
    if (seq != 0 || strcmp(prev, DLQB__AUDIT_ZERO_HASH) != 0)
      return bad(v, err, "malformed chain_start (seq must be 0 and prev zero)");
    if (c != NULL && c->known)
      return bad(v, err, "chain %s starts a second time (a copied or replayed record)", id);
    if (c == NULL && (c = upsert(v, id)) == NULL)
      return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    const char *writer = str_of(o, "writer");
    if (c->sealed && strcmp(c->seal_key, key) != 0)
      return bad(v, err,
                 "chain %s starts with key %s but is sealed with key %s (forged under "
                 "another writer's key)",
                 id, key, c->seal_key);
    if (c->anchored && strcmp(c->anchor_key, key) != 0)
      return bad(v, err,
                 "chain %s starts with key %s but is anchored with key %s (forged under "
                 "another writer's key)",
                 id, key, c->anchor_key);
    c->known = true;
    memcpy(c->key, key, sizeof c->key);
    copy_text(c->writer, sizeof c->writer, writer);
    v->sum.chains++;
  } else {
    if (c == NULL || !c->known)
      return bad(v, err,
                 "record of unknown chain %s (its chain_start is missing: deleted, or "
                 "an earlier file was not given)",
                 id);
    if (c->ended)
      return bad(v, err, "record of chain %s after its chain_end (inserted record)", id);
    if (seq <= c->seq)
      return bad(v, err,
                 "chain %s goes back from seq %llu to seq %llu (record duplicated, "
                 "inserted or reordered)",
                 id, (unsigned long long)c->seq, (unsigned long long)seq);
    if (seq > c->seq + 1)
      return bad(v, err,
                 "chain %s jumps from seq %llu to seq %llu (records deleted or "
                 "reordered)",
                 id, (unsigned long long)c->seq, (unsigned long long)seq);
    if (!dlqb__audit_hash_equal(prev, c->hash))
      return bad(v, err,
                 "prev does not match seq %llu of chain %s (records deleted, inserted "
                 "or reordered)",
                 (unsigned long long)c->seq, id);
    /* A chain continued from a rotation (--partial) learns its key here. */
    if (c->key[0] == '\0') memcpy(c->key, key, sizeof c->key);
    if (strcmp(key, c->key) != 0)
      return bad(v, err,
                 "record of chain %s names key %s, but the chain is signed with key %s "
                 "(forged under another writer's key)",
                 id, key, c->key);
    if (strcmp(event, DLQB__AUDIT_EV_CHAIN_END) == 0) {
      c->ended = true;
      v->sum.chains_ended++;
    }
  }
  /* After the chain's own checks, which name a gap in this chain better. */
  dlqb_status lst = check_link(v, o, id, seq, err);
  if (lst != DLQB_OK) return lst;
  c->seq = seq;
  memcpy(c->hash, hash, DLQB_AUDIT_HASH_HEX + 1);
  c->unsigned_tail = is_signed ? 0 : c->unsigned_tail + 1;
  if (c->sealed && seq == c->seal_seq) {
    if (!dlqb__audit_hash_equal(hash, c->seal_hash))
      return bad(v, err, "chain %s seq %llu differs from the seal (record replaced)", id,
                 (unsigned long long)seq);
    c->seal_hit = true;
  }
  if (c->anchored && seq == c->anchor_seq) {
    if (!dlqb__audit_hash_equal(hash, c->anchor_hash))
      return bad(v, err, "chain %s seq %llu differs from its anchor of %s (record replaced)", id,
                 (unsigned long long)seq, c->anchor_time);
    c->anchor_hit = true;
  }
  v->sum.records++;
  return DLQB_OK;
}

static bool add_file_id(dlqb_audit_verifier *v, const char *hash) {
  if (v->nfile_ids == v->file_ids_cap) {
    size_t ncap = v->file_ids_cap ? v->file_ids_cap * 2 : 16;
    void *n = realloc(v->file_ids, ncap * sizeof *v->file_ids);
    if (n == NULL) return false;
    v->file_ids = n;
    v->file_ids_cap = ncap;
  }
  memcpy(v->file_ids[v->nfile_ids++], hash, DLQB_AUDIT_HASH_HEX + 1);
  return true;
}

static bool has_file_id(const dlqb_audit_verifier *v, const char *hash) {
  for (size_t i = 0; i < v->nfile_ids; i++)
    if (dlqb__audit_hash_equal(v->file_ids[i], hash)) return true;
  return false;
}

dlqb_status dlqb_audit_verifier_anchor_line(dlqb_audit_verifier *v, const char *line, size_t len,
                                            dlqb_error *err) {
  json_object *o = NULL;
  char hash[DLQB_AUDIT_HASH_HEX + 1], key[DLQB_AUDIT_KEY_ID_HEX + 1];
  bool is_signed;
  char saved[NAME_MAX_];
  unsigned long saved_line = v->line;
  if (v->failed) return dlqb_fail(err, DLQB_EINVAL, "verification already failed");
  v->anchors_given = true;
  snprintf(saved, sizeof saved, "%s", v->file);
  snprintf(v->file, sizeof v->file, "anchors");
  v->line = ++v->anchor_msgs;
  dlqb_status st =
      open_line(v, line, len, "an anchor", true, false, &o, hash, key, &is_signed, err);
  if (st == DLQB_EINVAL) {
    /* Anyone who may publish to the default exchange can append to the
     * stream: a message that is not an anchor signed by a given key
     * vouches for nothing, and must not let them block every verify. */
    v->failed = false;
    v->sum.anchors_ignored++;
    st = DLQB_OK;
  } else if (st == DLQB_OK) {
    char id[DLQB_AUDIT_CHAIN_HEX + 1], last[DLQB_AUDIT_HASH_HEX + 1],
        file_id[DLQB_AUDIT_HASH_HEX + 1];
    uint64_t seq;
    const char *type = str_of(o, "type"), *file = str_of(o, "file"), *when = str_of(o, "time");
    const char *written = str_of(o, "written");
    json_object *ended;
    chain_state *c = NULL;
    if (type == NULL || strcmp(type, "anchor") != 0 ||
        !hex_of(o, "chain", DLQB_AUDIT_CHAIN_HEX, id) || !uint_of(o, "seq", &seq) ||
        !hex_of(o, "last_hash", DLQB_AUDIT_HASH_HEX, last) ||
        !hex_of(o, "file_id", DLQB_AUDIT_HASH_HEX, file_id) || file == NULL || when == NULL ||
        written == NULL || !json_object_object_get_ex(o, "ended", &ended) ||
        !json_object_is_type(ended, json_type_boolean)) {
      st = bad(v, err, "malformed anchor");
    } else if ((c = upsert(v, id)) == NULL) {
      st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    } else if (c->anchored && strcmp(c->anchor_key, key) != 0) {
      st = bad(v, err,
               "chain %s is anchored with key %s and with key %s (forged under another "
               "writer's key)",
               id, c->anchor_key, key);
    } else if (c->anchored && seq == c->anchor_seq &&
               !dlqb__audit_hash_equal(last, c->anchor_hash)) {
      st = bad(v, err, "chain %s is anchored at seq %llu with two different records", id,
               (unsigned long long)seq);
    } else if (!c->anchored || seq > c->anchor_seq) {
      /* The stream is append-only: the highest seq a chain was anchored at
       * is what the files must reach. */
      if (!c->anchored) v->sum.anchored++;
      c->anchored = true;
      c->anchor_seq = seq;
      memcpy(c->anchor_hash, last, sizeof c->anchor_hash);
      memcpy(c->anchor_key, key, sizeof c->anchor_key);
      memcpy(c->anchor_file_id, file_id, sizeof c->anchor_file_id);
      copy_text(c->anchor_file, sizeof c->anchor_file, file);
      copy_text(c->anchor_time, sizeof c->anchor_time, when);
      copy_text(c->anchor_written, sizeof c->anchor_written, written);
      c->anchor_ended = json_object_get_boolean(ended);
      if (c->writer[0] == '\0') copy_text(c->writer, sizeof c->writer, str_of(o, "writer"));
    }
    if (st == DLQB_OK) v->sum.anchors++;
  }
  json_object_put(o);
  snprintf(v->file, sizeof v->file, "%s", saved);
  v->line = saved_line;
  return st;
}

void dlqb_audit_verifier_begin_anchors(dlqb_audit_verifier *v) { v->anchors_given = true; }

dlqb_status dlqb_audit_verifier_line(dlqb_audit_verifier *v, const char *line, size_t len,
                                     int complete, dlqb_error *err) {
  if (v->failed) return dlqb_fail(err, DLQB_EINVAL, "verification already failed");
  if (v->sum.files == 0) dlqb_audit_verifier_begin_file(v, "audit log");
  v->line++;
  if (!complete)
    return bad(v, err,
               "incomplete record at the end of the file (a torn write, or the file "
               "was cut)");
  json_object *o = NULL;
  char hash[DLQB_AUDIT_HASH_HEX + 1], key[DLQB_AUDIT_KEY_ID_HEX + 1];
  bool is_signed;
  dlqb_status st =
      open_line(v, line, len, "an audit record", false, true, &o, hash, key, &is_signed, err);
  if (st != DLQB_OK) return st;
  if (v->line == 1 && !add_file_id(v, hash)) {
    json_object_put(o);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  const char *event = str_of(o, "event");
  if (event == NULL) st = bad(v, err, "malformed record (no event)");
  else if (strcmp(event, DLQB__AUDIT_EV_FILE_START) == 0)
    st = is_signed ? on_file_start(v, o, err)
                   : bad(v, err,
                         "file_start without a signature (forged by someone without a "
                         "key)");
  else st = on_chain_record(v, o, event, hash, key, is_signed, err);
  json_object_put(o);
  if (st == DLQB_OK) memcpy(v->last_hash, hash, sizeof hash);
  return st;
}

/* What finish looks for: the first chain found of each kind. */
typedef struct {
  const dlqb_audit_verifier *v;
  const chain_state *short_chain;  /* sealed, and the log stops short of it */
  const chain_state *unsigned_end; /* ends in records no signature covers */
  const chain_state *unsealed;     /* has hops, and no seal line or rotation vouches */
  const chain_state *unanchored;   /* anchored, and the files stop short of the anchor */
  unsigned long archived;          /* --partial: anchored chains in files before the first */
  unsigned long long beyond;       /* records past their chain's last anchor */
} finish_scan;

/* hashset_each visitor (with --partial, a chain whose records started past
 * the seal point is not short). */
static void scan_chain(void *ctx, const char *key, size_t len, void *value) {
  (void)key;
  (void)len;
  finish_scan *f = ctx;
  const chain_state *c = value;
  if (f->short_chain == NULL && c->sealed && !c->seal_hit && (!c->known || c->seq < c->seal_seq))
    f->short_chain = c;
  if (f->unsigned_end == NULL && c->known && c->unsigned_tail > 0) f->unsigned_end = c;
  if (f->v->anchors_given) {
    bool short_of = c->anchored && !c->anchor_hit && (!c->known || c->seq < c->anchor_seq);
    /* --partial: a chain wholly in a file before the first one given (its
     * anchor names a file not given, and its head was written before the
     * first file given began: times are "YYYY-mm-ddTHH:MM:SS.mmmZ", so
     * they compare as text) was archived away on purpose. One written
     * later was in a file after it: deleted. */
    if (short_of && !c->known && f->v->partial && !has_file_id(f->v, c->anchor_file_id) &&
        f->v->first_file_time[0] != '\0' && strcmp(c->anchor_written, f->v->first_file_time) < 0)
      f->archived++;
    else if (short_of && f->unanchored == NULL) f->unanchored = c;
    if (c->known)
      f->beyond += c->anchored ? (c->seq > c->anchor_seq ? c->seq - c->anchor_seq : 0) : c->seq + 1;
  }
  /* Every batch appends a seal line and a chain's first one is synced: a
   * chain past its chain_start with none lost it to someone's hand. */
  if (f->unsealed == NULL && f->v->seal_given && c->known && !c->sealed && !c->linked && c->seq > 0)
    f->unsealed = c;
}

dlqb_status dlqb_audit_verifier_finish(dlqb_audit_verifier *v, dlqb_audit_summary *sum,
                                       dlqb_error *err) {
  if (v->failed) return dlqb_fail(err, DLQB_EINVAL, "verification already failed");
  finish_scan f = {.v = v};
  dlqb_hashset_each(v->chains, scan_chain, &f);
  const chain_state *c = f.unanchored;
  v->sum.archived = f.archived;
  v->sum.beyond_anchors = f.beyond;
  v->sum.anchors_given = v->anchors_given;
  /* The anchors first: they are off the host, so what they name holds even
   * when the log and its seal were cut back together. */
  if (c != NULL) {
    snprintf(v->file, sizeof v->file, "anchors");
    v->line = 0;
    if (!has_file_id(v, c->anchor_file_id)) {
      char held[64] = "none of it";
      if (c->known)
        snprintf(held, sizeof held, "it only up to seq %llu", (unsigned long long)c->seq);
      return bad(v, err,
                 "missing: the file that began as '%s' (first line %.16s...) is not among "
                 "the files; it held chain %s (writer %s) up to seq %llu, anchored at %s, and "
                 "the files hold %s (a rotated file was deleted, or the log replaced)",
                 c->anchor_file, c->anchor_file_id, c->id, c->writer,
                 (unsigned long long)c->anchor_seq, c->anchor_time, held);
    }
    if (!c->known)
      return bad(v, err,
                 "missing: chain %s (writer %s) is anchored up to seq %llu at %s, but the "
                 "files hold none of it (the chain was deleted)",
                 c->id, c->writer, (unsigned long long)c->anchor_seq, c->anchor_time);
    return bad(v, err,
               "missing: chain %s (writer %s) ends at seq %llu but its anchor of %s "
               "vouches for seq %llu (the tail was cut: %llu records missing)",
               c->id, c->writer, (unsigned long long)c->seq, c->anchor_time,
               (unsigned long long)c->anchor_seq, (unsigned long long)(c->anchor_seq - c->seq));
  }
  c = f.short_chain;
  if (c != NULL) {
    v->line++;
    if (!c->known)
      return bad(v, err,
                 "missing: the seal vouches for chain %s (writer %s) up to seq %llu, "
                 "but the log has no record of it (the chain was deleted, the tail was cut, or "
                 "the last file is missing)",
                 c->id, c->writer, (unsigned long long)c->seal_seq);
    return bad(v, err,
               "missing: chain %s (writer %s) ends at seq %llu but the seal vouches "
               "for seq %llu (the tail was cut: %llu records missing)",
               c->id, c->writer, (unsigned long long)c->seq, (unsigned long long)c->seal_seq,
               (unsigned long long)(c->seal_seq - c->seq));
  }
  if ((c = f.unsigned_end) != NULL) {
    v->line++;
    return bad(v, err,
               "missing: chain %s (writer %s) ends at seq %llu in %llu record%s no "
               "signature covers (a batch was cut short, or records were added without the "
               "writer's key)",
               c->id, c->writer, (unsigned long long)c->seq, (unsigned long long)c->unsigned_tail,
               c->unsigned_tail == 1 ? "" : "s");
  }
  if ((c = f.unsealed) != NULL) {
    v->line++;
    return bad(v, err,
               "missing: chain %s (writer %s, up to seq %llu) has no seal line (the "
               "seal was emptied, replaced or cut: its tail cannot be checked)",
               c->id, c->writer, (unsigned long long)c->seq);
  }
  if (sum != NULL) *sum = v->sum;
  return DLQB_OK;
}

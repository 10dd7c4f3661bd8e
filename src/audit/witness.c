/* The witness's judgement of a checkpoint and its state
 * (include/dlqb/witness.h). */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "dlqb/witness.h"

#define H DLQB_MERKLE_HASH

bool dlqb_witness_state_parse(const char *text, size_t len, dlqb_witness_state *out) {
  memset(out, 0, sizeof *out);
  while (len > 0 && text[len - 1] == '\n') len--;
  json_object *o = dlqb_audit_record_parse(text, len);
  json_object *origin, *size, *root, *seen, *last;
  bool ok =
      o != NULL && json_object_object_get_ex(o, "origin", &origin) &&
      json_object_is_type(origin, json_type_string) &&
      json_object_object_get_ex(o, "size", &size) && json_object_is_type(size, json_type_int) &&
      json_object_object_get_ex(o, "root", &root) && json_object_is_type(root, json_type_string) &&
      json_object_object_get_ex(o, "seen", &seen) && json_object_is_type(seen, json_type_int) &&
      json_object_get_int64(size) >= 0 && json_object_get_int64(seen) >= 0 &&
      (size_t)json_object_get_string_len(origin) < sizeof out->origin &&
      dlqb_base64_decode(json_object_get_string(root), (size_t)json_object_get_string_len(root),
                         out->root, H) == H;
  if (ok) {
    snprintf(out->origin, sizeof out->origin, "%s", json_object_get_string(origin));
    out->size = (uint64_t)json_object_get_int64(size);
    out->seen = (uint64_t)json_object_get_int64(seen);
    /* The stream's last message read: required once any was. */
    ok = out->seen == 0 ||
         (json_object_object_get_ex(o, "last", &last) &&
          json_object_is_type(last, json_type_string) &&
          dlqb_base64_decode(json_object_get_string(last), (size_t)json_object_get_string_len(last),
                             out->last, H) == H);
  }
  json_object_put(o);
  return ok;
}

void dlqb_witness_state_format(const dlqb_witness_state *s, char *out, size_t cap) {
  char b64[64];
  dlqb_base64_encode(s->root, H, b64);
  /* The origin is checked printable ASCII without '"' or '\\' issues:
   * names_ok allows neither spaces nor control bytes; quotes are escaped. */
  json_object *o = json_object_new_object();
  json_object_object_add(o, "origin", json_object_new_string(s->origin));
  json_object_object_add(o, "size", json_object_new_int64((int64_t)s->size));
  json_object_object_add(o, "root", json_object_new_string(b64));
  json_object_object_add(o, "seen", json_object_new_int64((int64_t)s->seen));
  if (s->seen > 0) {
    char l64[64];
    dlqb_base64_encode(s->last, H, l64);
    json_object_object_add(o, "last", json_object_new_string(l64));
  }
  snprintf(out, cap, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
  json_object_put(o);
}

dlqb_witness_verdict dlqb_witness_judge(const dlqb_witness_state *s, const dlqb_checkpoint *cp,
                                        const dlqb_evidence_msg *m, char *why, size_t len) {
  char mine[64], theirs[64];
  dlqb_base64_encode(s->root, H, mine);
  dlqb_base64_encode(cp->root, H, theirs);
  why[0] = '\0';
  if (cp->size < s->size) {
    snprintf(why, len,
             "checkpoint of size %" PRIu64 " (root %s) is smaller than the tree of size "
             "%" PRIu64 " (root %s) this witness cosigned: the log was rolled back",
             cp->size, theirs, s->size, mine);
    return DLQB_WITNESS_REFUSE;
  }
  if (cp->size == s->size && s->size > 0) {
    if (memcmp(cp->root, s->root, H) == 0) return DLQB_WITNESS_SAME;
    snprintf(why, len,
             "fork: checkpoint of size %" PRIu64 " has root %s, but this witness "
             "cosigned size %" PRIu64 " with root %s: two different logs of one size",
             cp->size, theirs, s->size, mine);
    return DLQB_WITNESS_REFUSE;
  }
  if (s->size == 0) return DLQB_WITNESS_COSIGN; /* the first tree it sees (docs/audit.md) */
  if (m->prev_size != s->size) {
    snprintf(why, len,
             "checkpoint of size %" PRIu64 " (root %s) proves consistency from size %" PRIu64
             ", not from size %" PRIu64 " (root %s) that this witness cosigned: it "
             "cannot be shown to extend it",
             cp->size, theirs, m->prev_size, s->size, mine);
    return DLQB_WITNESS_REFUSE;
  }
  if (!dlqb_merkle_verify_consistency(s->size, cp->size, s->root, cp->root, m->cons, m->ncons)) {
    snprintf(why, len,
             "fork: checkpoint of size %" PRIu64 " (root %s) does not extend the tree "
             "of size %" PRIu64 " (root %s) this witness cosigned: its consistency proof fails, "
             "so the first %" PRIu64 " records were changed (the log was rewritten)",
             cp->size, theirs, s->size, mine, s->size);
    return DLQB_WITNESS_REFUSE;
  }
  return DLQB_WITNESS_COSIGN;
}

static void msg_hash(const dlqb_audit_lines *msgs, size_t i, unsigned char out[H]) {
  unsigned int n = 0;
  if (EVP_Digest(msgs->line[i], msgs->len[i], out, &n, EVP_sha256(), NULL) != 1) memset(out, 0, H);
}

void dlqb_witness_mark(dlqb_witness_state *s, const dlqb_audit_lines *msgs, size_t i) {
  s->seen = i + 1;
  msg_hash(msgs, i, s->last);
}

bool dlqb_witness_stream_same(const dlqb_witness_state *s, const dlqb_audit_lines *msgs, char *why,
                              size_t len) {
  if (s->seen == 0) return true;
  unsigned char h[H];
  if (msgs->n >= s->seen) msg_hash(msgs, (size_t)s->seen - 1, h);
  if (msgs->n >= s->seen && memcmp(h, s->last, H) == 0) return true;
  char b64[64];
  dlqb_base64_encode(s->root, H, b64);
  if (msgs->n < s->seen)
    snprintf(why, len,
             "the anchor stream holds %zu messages, fewer than the %" PRIu64 " this "
             "witness read: it was deleted or cut (the tree of size %" PRIu64 ", root %s, that "
             "it cosigned may have been rewritten since)",
             msgs->n, s->seen, s->size, b64);
  else
    snprintf(why, len,
             "the anchor stream's message %" PRIu64 " is not the one this witness read "
             "there: the stream was deleted and made again (the tree of size %" PRIu64 ", root "
             "%s, that it cosigned may have been rewritten since)",
             s->seen, s->size, b64);
  return false;
}

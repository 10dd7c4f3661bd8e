/* dlq-bridge audit checkpoint, audit prove, audit archive and audit
 * verify-proof: the signed checkpoints of the trail's Merkle tree in
 * dsr.audit.anchors, one request's evidence bundle, the archive that lets
 * both go on once old files are deleted, and a bundle's offline check
 * (docs/audit.md, "Evidence for one request", "Keeping 24 months
 * verifiable"). The logic is src/audit/evidence.c's and archive.c's; this
 * file reads flags, files and the stream, and prints. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit_cli.h"
#include "dlqb/anchor.h"
#include "dlqb/archive.h"
#include "dlqb/calendar.h"
#include "dlqb/clock.h"
#include "dlqb/evidence.h"
#include "dlqb/file.h"
#include "dlqb/log.h"
#include "dlqb/names.h"
#include "dlqb/report.h"
#include "dlqb/text.h"
#include "ops_cli.h"

#define STREAM_IDLE_MS 10000
#define BUNDLE_MAX     ((size_t)64 << 20) /* a bundle of one request is kilobytes */

/* ---- shared: the keys, the stream, counting lines ---- */

typedef struct {
  audit_opts *o;
  const char *origin, *output;
  bool print; /* checkpoint --print: the message on stdout, not published */
  dlqb_audit_keyring *ring;
  EVP_PKEY *key; /* checkpoint: the log's signing key */
  char key_id[DLQB_AUDIT_KEY_ID_HEX + 1];
  /* the latest checkpoint in the stream, with its cosignatures */
  char *note;
  size_t note_len;
  dlqb_checkpoint last;
  bool have_last;
  uint64_t lines; /* checkpoint: the tree's size, counted before the pass */
  dlqb_evidence *ev;
  const dlqb_config *cfg; /* cli_load's: it outlives the command */
  /* --archive: the lines of files no longer given, and the first line
   * seen, which must continue them (checked once the log verified). */
  const char *archive_path;
  char *arch_text; /* its text up to the signature line (arch_len bytes) */
  size_t arch_len;
  dlqb_archive arch;
  bool have_arch, seen_first;
  char first_prev_hash[DLQB_AUDIT_HASH_HEX + 1], first_prev_file[256];
  const char *actor_flag; /* audit archive --actor */
} evidence_ctx;

static dlqb_status evidence_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  evidence_ctx *c = ctx;
  (void)err;
  if (strcmp(flag, "origin") == 0) c->origin = value;
  else if (strcmp(flag, "output") == 0) c->output = value;
  else if (strcmp(flag, "print") == 0) c->print = true;
  else if (strcmp(flag, "archive") == 0) c->archive_path = value;
  else if (strcmp(flag, "actor") == 0) c->actor_flag = value;
  return DLQB_OK;
}

/* ---- an archive of files no longer given ---- */

#define ARCHIVE_MAX ((size_t)4 << 30) /* an archive of millions of requests is tens of MB */

/* Reads the archive of --archive: signed with a key among the public keys
 * (not revoked), and whole. */
static int load_archive(evidence_ctx *c) {
  char q[DLQB_QUOTE_BUF], why[128];
  size_t cap = 0;
  dlqb_error err;
  dlqb_report_check chk;
  const char *path = c->archive_path;
  if (access(path, R_OK) != 0 || !dlqb_read_file(path, &c->arch_text, &cap, &c->arch_len)) {
    cli_error("cannot read --archive '%s': %s", dlqb_text_quote(q, path, strlen(path)),
              dlqb_errno_text(errno, why, sizeof why));
    return EXIT_USAGE;
  }
  if (c->arch_len > ARCHIVE_MAX) {
    cli_error("'%s' is larger than any archive", dlqb_text_quote(q, path, strlen(path)));
    return EXIT_RUNTIME;
  }
  if (dlqb_report_verify(c->ring, c->arch_text, c->arch_len, &chk, &err) != DLQB_OK) {
    cli_error("--archive '%s': %s", dlqb_text_quote(q, path, strlen(path)), err.msg);
    return EXIT_RUNTIME;
  }
  c->arch_len = chk.body_len;
  return EXIT_OK;
}

/* Parses the loaded archive into c->arch and, with e, starts e's pass
 * after its lines. The first file given then continues an archived one
 * (--partial, implied). */
static int apply_archive(evidence_ctx *c, dlqb_evidence *e) {
  char q[DLQB_QUOTE_BUF];
  dlqb_error err;
  dlqb_archive_release(&c->arch);
  c->have_arch = false;
  if (dlqb_archive_read(c->arch_text, c->arch_len, &c->arch, e, &err) != DLQB_OK) {
    cli_error("--archive '%s': %s", dlqb_text_quote(q, c->archive_path, strlen(c->archive_path)),
              err.msg);
    return EXIT_RUNTIME;
  }
  c->have_arch = true;
  c->o->partial = true;
  return EXIT_OK;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

/* Beside the configured log, the files the archive holds are not read:
 * they may be deleted at leisure once it is made. */
static bool not_archived(void *ctx, const char *path) {
  const evidence_ctx *c = ctx;
  if (!c->have_arch) return true;
  for (size_t i = 0; i < c->arch.nfiles; i++)
    if (strcmp(base_name(path), c->arch.files[i]) == 0) return false;
  return true;
}

/* The first line given, after an archive: its file_start must name the
 * archive's last line and file. */
static void note_first(evidence_ctx *c, const char *line, size_t len) {
  c->seen_first = true;
  json_object *rec = dlqb_audit_record_parse(line, len);
  if (rec != NULL && strcmp(dlqb_audit_record_str(rec, "event"), "file_start") == 0) {
    snprintf(c->first_prev_hash, sizeof c->first_prev_hash, "%s",
             dlqb_audit_record_str(rec, "prev_hash"));
    snprintf(c->first_prev_file, sizeof c->first_prev_file, "%s",
             dlqb_audit_record_str(rec, "prev_file"));
  }
  json_object_put(rec);
}

/* After a verified pass: the files given continue the archive. */
static bool continues_archive(const evidence_ctx *c) {
  if (!c->have_arch) return true;
  char q[DLQB_QUOTE_BUF], q2[DLQB_QUOTE_BUF];
  if (strcmp(c->first_prev_hash, c->arch.last_hash) == 0 &&
      strcmp(c->first_prev_file, c->arch.last_file) == 0)
    return true;
  if (c->first_prev_file[0] == '\0')
    cli_error("the first file given does not begin with a rotation's file_start, so it does not "
              "continue the archive (which ends with '%s')",
              dlqb_text_quote(q, c->arch.last_file, strlen(c->arch.last_file)));
  else
    cli_error("the first file given continues '%s', not the archive's last file '%s' with the "
              "same last line (give the files that follow the archive, oldest first)",
              dlqb_text_quote(q2, c->first_prev_file, strlen(c->first_prev_file)),
              dlqb_text_quote(q, c->arch.last_file, strlen(c->arch.last_file)));
  return false;
}

static int load_ring(const char *path, dlqb_audit_keyring **out) {
  dlqb_error err;
  if (path[0] == '\0') {
    cli_error("no public keys given (set DLQ_BRIDGE_AUDIT_PUBLIC_KEYS or --audit-public-keys "
              "to the writers' *.pem public keys)");
    return EXIT_USAGE;
  }
  if ((*out = dlqb_audit_keyring_new()) == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  dlqb_status st = dlqb_audit_keyring_add(*out, path, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    return st == DLQB_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
  }
  return EXIT_OK;
}

/* The stream's latest checkpoint of the origin, with its cosignatures. */
static int read_last(evidence_ctx *c, const dlqb_config *cfg) {
  dlqb_audit_lines msgs = {0};
  dlqb_error err;
  if (dlqb_anchor_read(cfg, DLQB_Q_ANCHORS, &msgs, STREAM_IDLE_MS, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_RUNTIME;
  }
  c->have_last = dlqb_evidence_latest(&msgs, c->ring, c->origin, &c->note, &c->note_len, &c->last);
  dlqb_audit_lines_free(&msgs);
  return EXIT_OK;
}

/* Complete lines of the files: the size of the tree a checkpoint signs. */
static int count_lines(const evidence_ctx *c, const dlqb_config *cfg, uint64_t *n) {
  char **listed = NULL;
  size_t nlisted = 0;
  dlqb_error err;
  const char *const *files = c->o->files;
  size_t nfiles = c->o->nfiles;
  if (nfiles == 0) {
    if (dlqb_audit_list_files(cfg->audit.log, &listed, &nlisted, &err) != DLQB_OK) {
      cli_error("%s", err.msg);
      return EXIT_RUNTIME;
    }
    size_t kept = 0;
    for (size_t i = 0; i < nlisted; i++) {
      if (not_archived((void *)c, listed[i])) listed[kept++] = listed[i];
      else free(listed[i]);
    }
    nlisted = kept;
    files = (const char *const *)listed;
    nfiles = nlisted;
  }
  *n = 0;
  int rc = EXIT_OK;
  char q[DLQB_QUOTE_BUF], why[128];
  enum { CHUNK = 1 << 16 }; /* read in 64 KiB chunks, on the heap */
  char *buf = malloc(CHUNK);
  if (buf == NULL) {
    cli_error("out of memory");
    rc = EXIT_RUNTIME;
  }
  for (size_t i = 0; buf != NULL && i < nfiles && rc == EXIT_OK; i++) {
    int fd = open(files[i], O_RDONLY | O_CLOEXEC);
    ssize_t r = fd < 0 ? -1 : 0;
    while (fd >= 0 && (r = read(fd, buf, CHUNK)) > 0)
      for (ssize_t j = 0; j < r; j++) *n += buf[j] == '\n';
    if (r < 0) {
      cli_error("cannot read '%s': %s", dlqb_text_quote(q, files[i], strlen(files[i])),
                dlqb_errno_text(errno, why, sizeof why));
      rc = EXIT_RUNTIME;
    }
    if (fd >= 0) close(fd);
  }
  free(buf);
  dlqb_audit_files_free(listed, nlisted);
  return rc;
}

static void ctx_release(evidence_ctx *c) {
  dlqb_archive_release(&c->arch);
  free(c->arch_text);
  dlqb_audit_keyring_free(c->ring);
  EVP_PKEY_free(c->key);
  free(c->note);
  dlqb_evidence_free(c->ev);
}

#define ORIGIN_FLAG                                                                                \
  {                                                                                                \
    "origin", true, "NAME",                                                                        \
        "the checkpoints' origin line (default " DLQB_CHECKPOINT_DEFAULT_ORIGIN ")"                \
  }
#define ARCHIVE_FLAG                                                                               \
  {                                                                                                \
    "archive", true, "FILE",                                                                       \
        "the archive (audit archive) of the files before the first one read, which may be gone"    \
  }

/* ---- audit checkpoint ---- */

static const cli_flag checkpoint_flags[] = {
    ORIGIN_FLAG,
    ARCHIVE_FLAG,
    {"print", false, NULL,
     "print the checkpoint message (one JSON line) instead of appending it to the stream"},
    LOG_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_spec checkpoint_spec = {
    .name = "audit checkpoint",
    .summary = "sign the Merkle tree of the verified log and publish it to dsr.audit.anchors",
    .usage = "dlq-bridge audit checkpoint [FILE...] [--origin NAME] [--print] [--archive FILE]\n"
             "       [--seal FILE | --no-seal] [--partial] [settings]",
    .details = "Verifies the log as `audit verify` does, computes the Merkle tree (RFC 9162\n"
               "hashing) over its lines in file order and the index of every request's lines,\n"
               "signs both as a C2SP checkpoint with DLQ_BRIDGE_AUDIT_KEY_FILE (its public key\n"
               "must be among DLQ_BRIDGE_AUDIT_PUBLIC_KEYS) and appends it to dsr.audit.anchors\n"
               "with a consistency proof from the stream's last checkpoint of the origin.\n"
               "A log whose first lines no longer hash to that checkpoint is refused (a\n"
               "rewritten log): nothing is signed. Run it on the log's host on a timer;\n"
               "witnesses (`audit witness`) cosign what it publishes. With --archive, the\n"
               "tree goes on from an archive of the oldest files (`audit archive`), which\n"
               "may be deleted: the files read start after it.\n" FILES_DETAILS
               "Exit status: 0 published (or nothing new since the last checkpoint); 1 the log\n"
               "not intact, not extending the last checkpoint, or the broker unreachable; 2\n"
               "usage or configuration error.",
    .flags = checkpoint_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, "audit_log", "audit_public_keys",
                                  "audit_key_file", CLI_USES_LOG, NULL},
};

/* This host's audit key, which signs (what: the command, for the error),
 * and the public keys, among which it must be: what the verifiers would
 * refuse is not signed at all. */
static int load_signer(evidence_ctx *c, const dlqb_config *cfg, const char *what) {
  dlqb_error err;
  c->cfg = cfg;
  if (cfg->audit.key_file[0] == '\0') {
    cli_error("%s signs: set DLQ_BRIDGE_AUDIT_KEY_FILE (or --audit-key-file) to this host's "
              "Ed25519 private key",
              what);
    return EXIT_USAGE;
  }
  int rc = load_ring(cfg->audit.public_keys, &c->ring);
  if (rc != EXIT_OK) return rc;
  dlqb_status st = dlqb_audit_key_load(cfg->audit.key_file, &c->key, c->key_id, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    return st == DLQB_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
  }
  /* A checkpoint the verifiers would refuse is none: sign a probe and
   * check it as they will (the key among the public keys, not revoked). */
  dlqb_checkpoint probe = {.size = 0};
  dlqb_checkpoint back;
  char note[DLQB_CHECKPOINT_MAX];
  size_t nl = 0;
  snprintf(probe.origin, sizeof probe.origin, "%s", c->origin);
  if ((st = dlqb_checkpoint_sign(c->key, &probe, note, &nl, &err)) != DLQB_OK) {
    cli_error("--origin: %s", err.msg);
    return EXIT_USAGE;
  }
  if (dlqb_checkpoint_verify(note, nl, c->ring, &back, NULL, &err) != DLQB_OK) {
    cli_error("the signing key %s (DLQ_BRIDGE_AUDIT_KEY_FILE) would not verify: %s", c->key_id,
              err.msg);
    return EXIT_USAGE;
  }
  return EXIT_OK;
}

static int checkpoint_prepare(void *ctx, const dlqb_config *cfg) {
  evidence_ctx *c = ctx;
  int rc = load_signer(c, cfg, "audit checkpoint");
  if (rc != EXIT_OK) return rc;
  if ((rc = read_last(c, cfg)) != EXIT_OK) return rc;
  /* The archive's names first: its files still beside the log are not
   * counted. Its lines come before the ones counted. */
  if (c->archive_path != NULL &&
      ((rc = load_archive(c)) != EXIT_OK || (rc = apply_archive(c, NULL)) != EXIT_OK))
    return rc;
  if ((rc = count_lines(c, cfg, &c->lines)) != EXIT_OK) return rc;
  uint64_t before = c->have_arch ? c->arch.lines : 0;
  c->ev = dlqb_evidence_new(before + c->lines, c->have_last ? c->last.size : 0, NULL);
  if (c->ev == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  return c->have_arch ? apply_archive(c, c->ev) : EXIT_OK;
}

static bool visit_evidence(void *ctx, const char *line, size_t len) {
  evidence_ctx *c = ctx;
  if (c->have_arch && !c->seen_first) note_first(c, line, len);
  return c->ev == NULL || dlqb_evidence_visit(c->ev, line, len);
}

int audit_checkpoint(int argc, char **argv) {
  audit_opts o = {.prepare = checkpoint_prepare, .extra = evidence_flag, .keep_file = not_archived};
  evidence_ctx c = {.o = &o, .origin = DLQB_CHECKPOINT_DEFAULT_ORIGIN};
  o.prepare_ctx = &c;
  o.extra_ctx = &c;
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc = audit_load_and_verify(&checkpoint_spec, argc, argv, &o, visit_evidence, &c, &sum,
                                 &sealed, &help);
  if (help) cli_print_help(&checkpoint_spec, stdout);
  if (rc != EXIT_OK || help) goto done;
  rc = EXIT_RUNTIME;
  dlqb_evidence_result res;
  dlqb_error err;
  char b64[64], mine[64];
  if (!continues_archive(&c)) goto done;
  if (dlqb_evidence_finish(c.ev, &res, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    goto done;
  }
  dlqb_base64_encode(res.tree.root, DLQB_MERKLE_HASH, b64);
  if (c.have_last) {
    dlqb_base64_encode(c.last.root, DLQB_MERKLE_HASH, mine);
    if (res.tree.size < c.last.size) {
      cli_error("the log holds %" PRIu64 " lines, fewer than the %" PRIu64 " of the last "
                "checkpoint (root %s): it was cut or replaced; nothing signed",
                res.tree.size, c.last.size, mine);
      goto done;
    }
    /* Of the same size, the tree is the last one or not: no prefix root
     * was taken (there is no consistency proof to make). */
    const unsigned char *then = res.tree.size == c.last.size ? res.tree.root : res.prev_root;
    if (memcmp(then, c.last.root, DLQB_MERKLE_HASH) != 0) {
      char now[64];
      dlqb_base64_encode(then, DLQB_MERKLE_HASH, now);
      cli_error("the log's first %" PRIu64 " lines hash to %s, but the last checkpoint of that "
                "size has root %s: the log was changed since (a rewritten record); nothing signed",
                c.last.size, now, mine);
      goto done;
    }
    if (res.tree.size == c.last.size) {
      printf("checkpoint: nothing new since the last checkpoint of size %" PRIu64 " (root %s)\n",
             c.last.size, mine);
      rc = EXIT_OK;
      goto done;
    }
  }
  snprintf(res.tree.origin, sizeof res.tree.origin, "%s", c.origin);
  char note[DLQB_CHECKPOINT_MAX];
  size_t nl = 0;
  if (dlqb_checkpoint_sign(c.key, &res.tree, note, &nl, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    rc = EXIT_USAGE;
    goto done;
  }
  char *msg =
      dlqb_evidence_checkpoint_msg(note, nl, c.have_last ? c.last.size : 0,
                                   (const unsigned char(*)[DLQB_MERKLE_HASH])res.cons, res.ncons);
  dlqb_status st = DLQB_OK;
  if (msg == NULL) st = dlqb_fail(&err, DLQB_ENOMEM, "out of memory");
  else if (c.print) printf("%s\n", msg);
  else st = dlqb_anchor_append(c.cfg, "dlq-bridge audit checkpoint", msg, strlen(msg), &err);
  free(msg);
  if (st != DLQB_OK) {
    cli_error("checkpoint not published: %s", err.msg);
    goto done;
  }
  /* With --print stdout is the message alone. */
  FILE *say = c.print ? stderr : stdout;
  fprintf(say,
          "checkpoint: %" PRIu64 " lines, root %s, %" PRIu64 " requests indexed, signed with "
          "key %s, %s %s",
          res.tree.size, b64, res.tree.index_entries, c.key_id,
          c.print ? "printed, not published to" : "published to", DLQB_Q_ANCHORS);
  if (c.have_last)
    fprintf(say, " (extends the last checkpoint of size %" PRIu64 ": %zu-hash consistency proof)\n",
            c.last.size, res.ncons);
  else fprintf(say, " (the first of origin %s)\n", c.origin);
  dlqb_log_info("audit_checkpoint", "checkpoint of %" PRIu64 " lines (root %s) signed with key %s",
                res.tree.size, b64, c.key_id);
  rc = EXIT_OK;
done:
  ctx_release(&c);
  return rc;
}

/* ---- audit prove ---- */

static const cli_flag prove_flags[] = {
    {"request-id", true, "ID", "the request whose records to prove (dsr pipelines)"},
    {"id", true, "VALUE", "the profile's first identity field (other pipelines: item_id, ...)"},
    {"output", true, "FILE", "write the bundle to FILE, a new file (default: stdout)"},
    ORIGIN_FLAG,
    ARCHIVE_FLAG,
    LOG_FLAGS,
    {NULL, false, NULL, NULL},
};

static const cli_spec prove_spec = {
    .name = "audit prove",
    .summary = "one request's records with inclusion proofs against the latest checkpoint",
    .usage = "dlq-bridge audit prove --request-id ID | --id VALUE [FILE...] [--output FILE]\n"
             "       [--origin NAME] [--archive FILE] [--seal FILE | --no-seal] [--partial]\n"
             "       [settings]",
    .details = "Reads the latest checkpoint of the origin in dsr.audit.anchors (signed with a\n"
               "key among DLQ_BRIDGE_AUDIT_PUBLIC_KEYS) and every cosignature published for it,\n"
               "verifies the log as `audit verify` does, checks that the log's first lines hash\n"
               "to the checkpoint's root and request index, and writes one JSON bundle: every\n"
               "record whose request_id member is ID (with --id: the profile's first identity\n"
               "field, recorded in the same member) up to the checkpoint, each with its\n"
               "inclusion proof, the request's index entry with its proof, and the checkpoint\n"
               "with its cosignatures. Of other requests the bundle holds only hashes. Check it\n"
               "with `dlq-bridge audit verify-proof BUNDLE`, offline. With --archive, the\n"
               "oldest files may be gone: the tree and the index go on from their archive\n"
               "(`audit archive`), and a request with records in them is refused.\n" FILES_DETAILS
               "Exit status: 0 bundle written; 1 no checkpoint, the log not intact or not the\n"
               "checkpoint's, or no record of ID in it; 2 usage or configuration error.",
    .flags = prove_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, CLI_USES_AUDIT_READ, CLI_USES_LOG, NULL},
};

static int prove_prepare(void *ctx, const dlqb_config *cfg) {
  evidence_ctx *c = ctx;
  int rc = load_ring(cfg->audit.public_keys, &c->ring);
  if (rc != EXIT_OK) return rc;
  if (c->output != NULL && access(c->output, F_OK) == 0) {
    char q[DLQB_QUOTE_BUF];
    cli_error("--output: '%s' exists; a bundle is never written over another",
              dlqb_text_quote(q, c->output, strlen(c->output)));
    return EXIT_USAGE;
  }
  if ((rc = read_last(c, cfg)) != EXIT_OK) return rc;
  if (!c->have_last) {
    cli_error("no checkpoint of origin %s signed with a given key in %s (run 'dlq-bridge audit "
              "checkpoint' first)",
              c->origin, DLQB_Q_ANCHORS);
    return EXIT_RUNTIME;
  }
  if ((c->ev = dlqb_evidence_new(c->last.size, 0, c->o->request_id)) == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  if (c->archive_path != NULL && (rc = load_archive(c)) != EXIT_OK) return rc;
  return c->archive_path != NULL ? apply_archive(c, c->ev) : EXIT_OK;
}

int audit_prove(int argc, char **argv) {
  audit_opts o = {.prepare = prove_prepare,
                  .extra = evidence_flag,
                  .require_id = true,
                  .keep_file = not_archived};
  evidence_ctx c = {.o = &o, .origin = DLQB_CHECKPOINT_DEFAULT_ORIGIN};
  o.prepare_ctx = &c;
  o.extra_ctx = &c;
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc =
      audit_load_and_verify(&prove_spec, argc, argv, &o, visit_evidence, &c, &sum, &sealed, &help);
  if (help) cli_print_help(&prove_spec, stdout);
  if (rc != EXIT_OK || help) goto done;
  rc = EXIT_RUNTIME;
  dlqb_evidence_result res;
  dlqb_error err;
  char *bundle = NULL;
  size_t bl = 0;
  if (o.request_id == NULL) {
    cli_error("audit prove needs --request-id or --id (a bundle is of one request)");
    rc = EXIT_USAGE;
    goto done;
  }
  if (!continues_archive(&c)) goto done;
  if (dlqb_evidence_finish(c.ev, &res, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    goto done;
  }
  if (memcmp(res.tree.root, c.last.root, DLQB_MERKLE_HASH) != 0 || !c.last.has_index ||
      res.tree.index_entries != c.last.index_entries ||
      memcmp(res.tree.index_root, c.last.index_root, DLQB_MERKLE_HASH) != 0) {
    cli_error("the log's first %" PRIu64 " lines are not the tree the latest checkpoint signed "
              "(the log was changed since, or these are another log's files)",
              c.last.size);
    goto done;
  }
  if (dlqb_evidence_bundle(c.ev, c.note, c.note_len, &bundle, &bl, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    goto done;
  }
  if (c.output != NULL ? audit_write_new_file(c.output, bundle, bl)
                       : fwrite(bundle, 1, bl, stdout) == bl) {
    char q[DLQB_QUOTE_BUF];
    fprintf(stderr, "bundle of %zu record%s of %s against the checkpoint of %" PRIu64 " lines%s",
            res.records, res.records == 1 ? "" : "s",
            dlqb_text_quote(q, o.request_id, strlen(o.request_id)), c.last.size,
            res.later ? "" : "\n");
    if (res.later)
      fprintf(stderr,
              "; %zu later record%s not covered yet (prove again after the next "
              "checkpoint)\n",
              res.later, res.later == 1 ? " is" : "s are");
    rc = EXIT_OK;
  }
  free(bundle);
done:
  ctx_release(&c);
  return rc;
}

/* ---- audit archive ---- */

static const cli_flag archive_flags[] = {
    {"output", true, "FILE", "write the archive to FILE, a new file (required)"},
    {"archive", true, "FILE",
     "an earlier archive the first FILE continues: the new one holds both"},
    {"actor", true, "NAME", "who makes it, named in it (default: your login name)"},
    {NULL, false, NULL, NULL},
};

static const cli_spec archive_spec = {
    .name = "audit archive",
    .summary = "what the Merkle tree needs of old audit files, before they are deleted",
    .usage = "dlq-bridge audit archive FILE... --output FILE [--archive FILE]\n"
             "       [--actor NAME] [settings]",
    .details = "Before the oldest rotated files are deleted (their retention ends) or moved\n"
               "where the host cannot read them: verifies FILE... (oldest first, from the first\n"
               "file ever written, or continuing the earlier --archive) as `audit verify`\n"
               "does, without a seal (a rotated file is closed by the next file's link), and\n"
               "writes what the trail's Merkle tree and its request index need of them: their\n"
               "lines' compact range and root, the last line's hash, and each request's key\n"
               "hash and line numbers; no record, no id, no reason. Signed with\n"
               "DLQ_BRIDGE_AUDIT_KEY_FILE (its public key among DLQ_BRIDGE_AUDIT_PUBLIC_KEYS).\n"
               "`audit prove --archive FILE` and `audit checkpoint --archive FILE` then go on\n"
               "from the files after them; a request with records in them can no longer be\n"
               "proved (bundles made before stay valid). The live log cannot be archived.\n"
               "Exit status: 0 written; 1 the files not intact or not continuing the earlier\n"
               "archive; 2 usage or configuration error.",
    .flags = archive_flags,
    .settings = true,
    .uses = (const char *const[]){"audit_log", "audit_public_keys", "audit_key_file", CLI_USES_LOG,
                                  NULL},
};

/* The files given, kept for the archive's file lines (the shared options
 * free their list once the log is read). */
typedef struct {
  evidence_ctx ev;
  const char **given;
  size_t ngiven;
} archive_ctx;

static int archive_prepare(void *ctx, const dlqb_config *cfg) {
  archive_ctx *a = ctx;
  evidence_ctx *c = &a->ev;
  char q[DLQB_QUOTE_BUF];
  if (c->o->nfiles == 0) {
    cli_error("audit archive needs the files to archive, oldest first (see 'dlq-bridge audit "
              "archive --help')");
    return EXIT_USAGE;
  }
  if (c->output == NULL) {
    cli_error("audit archive needs --output FILE (the archive to keep)");
    return EXIT_USAGE;
  }
  if (access(c->output, F_OK) == 0) {
    cli_error("--output: '%s' exists; an archive is never written over another",
              dlqb_text_quote(q, c->output, strlen(c->output)));
    return EXIT_USAGE;
  }
  for (size_t i = 0; i < c->o->nfiles; i++)
    if (cfg->audit.log[0] != '\0' &&
        strcmp(base_name(c->o->files[i]), base_name(cfg->audit.log)) == 0) {
      cli_error("'%s' is the live log, which still grows: archive rotated files only",
                dlqb_text_quote(q, c->o->files[i], strlen(c->o->files[i])));
      return EXIT_USAGE;
    }
  int rc = load_signer(c, cfg, "audit archive");
  if (rc != EXIT_OK) return rc;
  if ((a->given = calloc(c->o->nfiles, sizeof *a->given)) == NULL ||
      (c->ev = dlqb_evidence_new(UINT64_MAX, 0, NULL)) == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  for (size_t i = 0; i < c->o->nfiles; i++) a->given[a->ngiven++] = base_name(c->o->files[i]);
  if (c->archive_path != NULL &&
      ((rc = load_archive(c)) != EXIT_OK || (rc = apply_archive(c, c->ev)) != EXIT_OK))
    return rc;
  return EXIT_OK;
}

/* Signs the archive text and writes it to a new file. */
static int write_archive(archive_ctx *a, const dlqb_evidence_result *res) {
  evidence_ctx *c = &a->ev;
  size_t nold = c->have_arch ? c->arch.nfiles : 0, n = nold + a->ngiven;
  const char **names = calloc(n, sizeof *names);
  char raw[300], actor[256], writer[300], when[DLQB_ISO_TIME_MAX], made[900];
  char *text = NULL, *out = NULL;
  size_t tl = 0, ol = 0;
  dlqb_error err;
  int rc = EXIT_RUNTIME;
  if (names == NULL) {
    cli_error("out of memory");
    return rc;
  }
  for (size_t i = 0; i < nold; i++) names[i] = c->arch.files[i];
  for (size_t i = 0; i < a->ngiven; i++) names[nold + i] = a->given[i];
  if (c->actor_flag != NULL) snprintf(raw, sizeof raw, "%s", c->actor_flag);
  else cli_default_actor(raw, sizeof raw);
  dlqb_text_sanitize(actor, sizeof actor, raw, strlen(raw));
  snprintf(raw, sizeof raw, "archive@%s", c->cfg->instance);
  dlqb_text_sanitize(writer, sizeof writer, raw, strlen(raw));
  snprintf(made, sizeof made, "made %s by %s (writer %s, key %s)",
           dlqb_iso_time(dlqb_now_ms(), when, sizeof when), actor, writer, c->key_id);
  if (dlqb_archive_write(c->ev, res, names, n, made, &text, &tl, &err) != DLQB_OK ||
      dlqb_report_sign(c->key, c->key_id, text, tl, false, &out, &ol, &err) != DLQB_OK)
    cli_error("%s", err.msg);
  else if (audit_write_new_file(c->output, out, ol)) rc = EXIT_OK;
  free(out);
  free(text);
  free(names);
  return rc;
}

int audit_archive(int argc, char **argv) {
  /* A rotated file has no seal of its own: the next file's link closes it. */
  audit_opts o = {.prepare = archive_prepare, .extra = evidence_flag, .no_seal = true};
  archive_ctx a = {.ev = {.o = &o, .origin = DLQB_CHECKPOINT_DEFAULT_ORIGIN}};
  evidence_ctx *c = &a.ev;
  o.prepare_ctx = &a;
  o.extra_ctx = c;
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc =
      audit_load_and_verify(&archive_spec, argc, argv, &o, visit_evidence, c, &sum, &sealed, &help);
  if (help) cli_print_help(&archive_spec, stdout);
  if (rc != EXIT_OK || help) goto done;
  rc = EXIT_RUNTIME;
  dlqb_evidence_result res;
  dlqb_error err;
  if (!continues_archive(c)) goto done;
  if (dlqb_evidence_finish(c->ev, &res, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    goto done;
  }
  if ((rc = write_archive(&a, &res)) != EXIT_OK) goto done;
  char b64[64], q[DLQB_QUOTE_BUF];
  dlqb_base64_encode(res.tree.root, DLQB_MERKLE_HASH, b64);
  printf("archive: the first %" PRIu64 " lines of the trail (%zu file%s, the last '%s'), root %s, "
         "%" PRIu64 " requests indexed, signed with key %s, written to %s; those files may now "
         "be deleted\n",
         res.tree.size, (c->have_arch ? c->arch.nfiles : 0) + a.ngiven,
         (c->have_arch ? c->arch.nfiles : 0) + a.ngiven == 1 ? "" : "s", a.given[a.ngiven - 1], b64,
         res.tree.index_entries, c->key_id, dlqb_text_quote(q, c->output, strlen(c->output)));
  dlqb_log_info("audit_archive", "archive of %" PRIu64 " lines (root %s) signed with key %s",
                res.tree.size, b64, c->key_id);
done:
  free(a.given);
  ctx_release(c);
  return rc;
}

/* ---- audit verify-proof ---- */

static const cli_flag verify_proof_flags[] = {
    {"witness-keys", true, "FILE",
     "the witnesses' verifier keys, one NAME+ID+KEY per line (audit witness --print-vkey)"},
    {"witnesses-needed", true, "N",
     "how many of them must cosign (default: 1 with --witness-keys)"},
    {"json", false, NULL, "print the result as JSON for scripts"},
    {NULL, false, NULL, NULL},
};

static const cli_spec verify_proof_spec = {
    .name = "audit verify-proof",
    .summary = "check an evidence bundle offline, with public keys only",
    .usage = "dlq-bridge audit verify-proof BUNDLE [--witness-keys FILE] [--witnesses-needed N]\n"
             "       [--json] [--audit-public-keys PATH]",
    .details = "Checks an `audit prove` bundle with no broker and no log: the checkpoint's\n"
               "signature with a key among DLQ_BRIDGE_AUDIT_PUBLIC_KEYS, at least N\n"
               "cosignatures of the witness keys given, each record's inclusion proof\n"
               "against the checkpoint's root, that each is a record of the bundle's request,\n"
               "and the request index entry: the records are every record of that request up\n"
               "to the checkpoint. Without --witness-keys it says that only the log's key\n"
               "vouches for the checkpoint.\n"
               "Exit status: 0 intact; 1 not intact (what failed is named); 2 usage or\n"
               "configuration error.",
    .flags = verify_proof_flags,
    .settings = true,
    .uses = (const char *const[]){"audit_public_keys", CLI_USES_LOG, NULL},
};

typedef struct {
  const char *file, *witness_keys;
  int files;
  long need;
  bool json;
} verify_proof_opts;

static dlqb_status verify_proof_flag(void *ctx, const char *flag, const char *value,
                                     dlqb_error *err) {
  verify_proof_opts *o = ctx;
  if (flag == NULL) {
    if (o->files++ > 0) return dlqb_fail(err, DLQB_EINVAL, "verify-proof takes one BUNDLE file");
    if (value[0] == '\0') return dlqb_fail(err, DLQB_EINVAL, "BUNDLE must not be empty");
    o->file = value;
  } else if (strcmp(flag, "witness-keys") == 0) {
    o->witness_keys = value;
  } else if (strcmp(flag, "witnesses-needed") == 0) {
    char *end = NULL;
    errno = 0;
    o->need = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || o->need < 0 || o->need > 1000)
      return dlqb_fail(err, DLQB_EINVAL, "--witnesses-needed: '%s' is not a count from 0 to 1000",
                       value);
  } else if (strcmp(flag, "json") == 0) {
    o->json = true;
  }
  return DLQB_OK;
}

#define WITNESS_KEYS_MAX 64

/* Reads the verifier keys of path: one per line, '#' comments. */
static int read_witness_keys(const char *path, dlqb_witness_key *keys, size_t *n) {
  char *buf = NULL, q[DLQB_QUOTE_BUF], why[128];
  size_t cap = 0, len = 0;
  *n = 0;
  if (access(path, R_OK) != 0 || !dlqb_read_file(path, &buf, &cap, &len)) {
    cli_error("cannot read --witness-keys '%s': %s", dlqb_text_quote(q, path, strlen(path)),
              dlqb_errno_text(errno, why, sizeof why));
    free(buf);
    return EXIT_USAGE;
  }
  int rc = EXIT_OK;
  for (char *line = buf, *next; line != NULL && line < buf + len && rc == EXIT_OK; line = next) {
    char *nl = memchr(line, '\n', (size_t)(buf + len - line));
    next = nl != NULL ? nl + 1 : NULL;
    if (nl != NULL) *nl = '\0';
    else buf[len < cap ? len : cap - 1] = '\0';
    if (line[0] == '\0' || line[0] == '#') continue;
    dlqb_error err;
    if (*n == WITNESS_KEYS_MAX) {
      cli_error("--witness-keys: more than %d keys", WITNESS_KEYS_MAX);
      rc = EXIT_USAGE;
    } else if (dlqb_witness_vkey_parse(line, &keys[*n], &err) != DLQB_OK) {
      cli_error("--witness-keys '%s': %s", dlqb_text_quote(q, path, strlen(path)), err.msg);
      rc = EXIT_USAGE;
    } else {
      (*n)++;
    }
  }
  if (rc == EXIT_OK && *n == 0) {
    cli_error("--witness-keys '%s' holds no key", dlqb_text_quote(q, path, strlen(path)));
    rc = EXIT_USAGE;
  }
  free(buf);
  return rc;
}

int audit_verify_proof(int argc, char **argv) {
  verify_proof_opts o = {.need = -1};
  static dlqb_config cfg; /* not on the stack: a config is large */
  bool help = false;
  int rc = cli_load(&verify_proof_spec, argc, argv, &cfg, verify_proof_flag, &o, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&verify_proof_spec, stdout);
    return EXIT_OK;
  }
  if (o.file == NULL) {
    cli_error("audit verify-proof needs the BUNDLE file (see 'dlq-bridge audit verify-proof "
              "--help')");
    return EXIT_USAGE;
  }
  dlqb_audit_keyring *ring = NULL;
  dlqb_witness_key keys[WITNESS_KEYS_MAX];
  size_t nkeys = 0;
  char *buf = NULL;
  if ((rc = load_ring(cfg.audit.public_keys, &ring)) != EXIT_OK) goto done;
  if (o.witness_keys != NULL && (rc = read_witness_keys(o.witness_keys, keys, &nkeys)) != EXIT_OK)
    goto done;
  if (o.need < 0) o.need = nkeys > 0 ? 1 : 0;
  if ((size_t)o.need > nkeys) {
    cli_error("--witnesses-needed %ld, but %zu witness key%s given", o.need, nkeys,
              nkeys == 1 ? " is" : "s are");
    rc = EXIT_USAGE;
    goto done;
  }
  size_t cap = 0, len = 0;
  char q[DLQB_QUOTE_BUF], why[128];
  rc = EXIT_RUNTIME;
  if (access(o.file, R_OK) != 0 || !dlqb_read_file(o.file, &buf, &cap, &len)) {
    cli_error("cannot read bundle '%s': %s", dlqb_text_quote(q, o.file, strlen(o.file)),
              dlqb_errno_text(errno, why, sizeof why));
    goto done;
  }
  if (len > BUNDLE_MAX) {
    cli_error("'%s' is larger than any bundle", dlqb_text_quote(q, o.file, strlen(o.file)));
    goto done;
  }
  dlqb_evidence_check chk;
  dlqb_error err;
  if (dlqb_evidence_verify(buf, len, ring, keys, nkeys, (size_t)o.need, &chk, &err) != DLQB_OK) {
    cli_error("%s: %s", dlqb_text_quote(q, o.file, strlen(o.file)), err.msg);
    goto done;
  }
  rc = EXIT_OK;
  char id[DLQB_QUOTE_BUF];
  dlqb_text_quote(id, chk.request_id, strlen(chk.request_id));
  if (o.json) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "intact", json_object_new_boolean(1));
    json_object_object_add(j, "request_id", json_object_new_string(chk.request_id));
    json_object_object_add(j, "records", json_object_new_int64((int64_t)chk.records));
    json_object_object_add(j, "tree_size", json_object_new_int64((int64_t)chk.cp.size));
    json_object_object_add(j, "origin", json_object_new_string(chk.cp.origin));
    json_object_object_add(j, "key", json_object_new_string(chk.key_id));
    json_object_object_add(j, "cosigners", json_object_new_int64((int64_t)chk.cosigners));
    json_object_object_add(j, "witnesses_needed", json_object_new_int64(o.need));
    cli_print_json(j);
  } else {
    printf("evidence intact: %zu record%s of request %s, and every record of it in the trail's "
           "first %" PRIu64 " lines (checkpoint of %s signed with key %s)\n",
           chk.records, chk.records == 1 ? "" : "s", id, chk.cp.size, chk.cp.origin, chk.key_id);
    if (nkeys > 0)
      printf("witnesses: %zu of the %zu given cosigned it (%ld needed)\n", chk.cosigners, nkeys,
             o.need);
    else
      printf("witnesses: none given (--witness-keys): only the log's own key vouches for the "
             "checkpoint\n");
  }
done:
  for (size_t i = 0; i < nkeys; i++) dlqb_witness_key_release(&keys[i]);
  dlqb_audit_keyring_free(ring);
  free(buf);
  return rc;
}

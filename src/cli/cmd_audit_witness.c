/* dlq-bridge audit witness: a party with its own key, on another host
 * under another broker user, that cosigns each new checkpoint in
 * dsr.audit.anchors only when it is shown to extend the last one it
 * cosigned (docs/audit.md, "Witnesses"). The judgement is
 * src/audit/witness.c's; this file keeps the state file, reads the stream
 * and publishes the cosignatures. */
#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit_cli.h"
#include "dlqb/anchor.h"
#include "dlqb/evidence.h"
#include "dlqb/file.h"
#include "dlqb/log.h"
#include "dlqb/names.h"
#include "dlqb/text.h"
#include "dlqb/witness.h"

#define STREAM_IDLE_MS 10000
#define STATE_MAX      4096

static const cli_flag witness_flags[] = {
    {"witness-key", true, "FILE", "this witness's Ed25519 private key (PEM, mode 0600)"},
    {"name", true, "NAME", "this witness's name in its cosignatures (e.g. witness.example.org/1)"},
    {"state", true, "FILE", "where the last cosigned tree is kept (replaced atomically, synced)"},
    {"origin", true, "NAME",
     "the checkpoints' origin line (default " DLQB_CHECKPOINT_DEFAULT_ORIGIN ")"},
    {"textfile", true, "FILE",
     "write dlq_bridge_witness_* gauges for node_exporter's textfile collector"},
    {"print-vkey", false, NULL,
     "print this witness's verifier key (a line of verify-proof's witness keys file) and exit"},
    {NULL, false, NULL, NULL},
};

static const cli_spec witness_spec = {
    .name = "audit witness",
    .summary = "cosign the checkpoints that extend the last one this witness cosigned",
    .usage = "dlq-bridge audit witness --witness-key FILE --name NAME --state FILE\n"
             "       [--origin NAME] [--textfile FILE] [--print-vkey] [settings]",
    .details = "Reads dsr.audit.anchors from where it stopped last time, and for each new\n"
               "checkpoint of the origin signed with a key among DLQ_BRIDGE_AUDIT_PUBLIC_KEYS\n"
               "checks its consistency proof from the tree in --state (the last one it\n"
               "cosigned); when it holds, writes the new tree to --state (synced, renamed\n"
               "over) and appends a C2SP cosignature/v1 of it to the stream. A smaller tree,\n"
               "one of the same size with another root, or one not shown to extend the state\n"
               "is refused: an error line (witness_refused) naming both trees, the gauge\n"
               "dlq_bridge_witness_refused 1 in --textfile, exit 1, and every later run\n"
               "refuses again until someone looks. With no --state file yet, the first\n"
               "checkpoint is trusted as it is. Run it on another host, under a broker user\n"
               "with read on the stream and write on amq.default only, on a timer.\n"
               "Exit status: 0 everything new judged consistent (and cosigned); 1 a checkpoint\n"
               "refused, the state unreadable, or the broker unreachable; 2 usage or\n"
               "configuration error.",
    .flags = witness_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_BROKER, "audit_public_keys", CLI_USES_LOG, NULL},
};

typedef struct {
  const char *key_file, *name, *state_file, *origin, *textfile;
  bool print_vkey;
} witness_opts;

static dlqb_status witness_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  witness_opts *o = ctx;
  if (flag == NULL) return dlqb_fail(err, DLQB_EINVAL, "audit witness takes no FILE");
  if (value != NULL && value[0] == '\0')
    return dlqb_fail(err, DLQB_EINVAL, "--%s needs a non-empty value", flag);
  if (strcmp(flag, "witness-key") == 0) o->key_file = value;
  else if (strcmp(flag, "name") == 0) o->name = value;
  else if (strcmp(flag, "state") == 0) o->state_file = value;
  else if (strcmp(flag, "origin") == 0) o->origin = value;
  else if (strcmp(flag, "textfile") == 0) o->textfile = value;
  else if (strcmp(flag, "print-vkey") == 0) o->print_vkey = true;
  return DLQB_OK;
}

/* The gauges of this run, for an alert on dlq_bridge_witness_refused
 * (docs/alerts.yml). Best effort: a textfile that cannot be written is
 * said, and the run's outcome stays what it was. */
static void write_textfile(const witness_opts *o, const dlqb_witness_state *s, bool refused) {
  if (o->textfile == NULL) return;
  char buf[1024];
  int n = snprintf(buf, sizeof buf,
                   "# HELP dlq_bridge_witness_refused Whether the last run refused a checkpoint "
                   "(smaller, forked, or not shown consistent): 1, else 0.\n"
                   "# TYPE dlq_bridge_witness_refused gauge\n"
                   "dlq_bridge_witness_refused %d\n"
                   "# HELP dlq_bridge_witness_tree_size The size of the last tree cosigned.\n"
                   "# TYPE dlq_bridge_witness_tree_size gauge\n"
                   "dlq_bridge_witness_tree_size %" PRIu64 "\n"
                   "# HELP dlq_bridge_witness_last_run_seconds When the witness last ran.\n"
                   "# TYPE dlq_bridge_witness_last_run_seconds gauge\n"
                   "dlq_bridge_witness_last_run_seconds %lld\n",
                   refused ? 1 : 0, s->size, (long long)time(NULL));
  dlqb_error err;
  if (dlqb_file_replace(o->textfile, buf, (size_t)n, "the witness textfile", &err) != DLQB_OK)
    cli_error("%s", err.msg);
  else if (chmod(o->textfile, 0644) != 0) /* node_exporter runs as another user */
    cli_error("cannot make the witness textfile readable: %s", strerror(errno));
}

static int save_state(const witness_opts *o, const dlqb_witness_state *s) {
  char buf[STATE_MAX];
  dlqb_error err;
  dlqb_witness_state_format(s, buf, sizeof buf);
  if (dlqb_file_replace(o->state_file, buf, strlen(buf), "the witness state", &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_RUNTIME;
  }
  return EXIT_OK;
}

static int load_state(const witness_opts *o, dlqb_witness_state *s) {
  char *buf = NULL, q[DLQB_QUOTE_BUF], why[128];
  size_t cap = 0, len = 0;
  memset(s, 0, sizeof *s);
  snprintf(s->origin, sizeof s->origin, "%s", o->origin);
  if (access(o->state_file, F_OK) != 0 && errno == ENOENT) return EXIT_OK; /* the first run */
  int rc = EXIT_OK;
  if (!dlqb_read_file(o->state_file, &buf, &cap, &len)) {
    cli_error("cannot read the witness state '%s': %s",
              dlqb_text_quote(q, o->state_file, strlen(o->state_file)),
              dlqb_errno_text(errno, why, sizeof why));
    rc = EXIT_RUNTIME;
  } else if (len > STATE_MAX || !dlqb_witness_state_parse(buf, len, s)) {
    /* Never start over silently: that would accept any tree again. */
    cli_error("the witness state '%s' is not one (restore it from a backup; removing it makes "
              "this witness trust the next checkpoint as new)",
              dlqb_text_quote(q, o->state_file, strlen(o->state_file)));
    rc = EXIT_RUNTIME;
  } else if (strcmp(s->origin, o->origin) != 0) {
    cli_error("the witness state '%s' is of origin %s, not %s",
              dlqb_text_quote(q, o->state_file, strlen(o->state_file)), s->origin, o->origin);
    rc = EXIT_USAGE;
  }
  free(buf);
  return rc;
}

/* Cosigns cp (the state already holds it) and appends the cosignature. */
static int publish_cosig(const dlqb_config *cfg, const witness_opts *o, EVP_PKEY *key,
                         const dlqb_evidence_msg *m, const dlqb_checkpoint *cp) {
  char line[512];
  dlqb_error err;
  if (dlqb_checkpoint_cosign(key, o->name, (uint64_t)time(NULL), m->note, cp->text_len, line,
                             sizeof line, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    return EXIT_RUNTIME;
  }
  char *msg = dlqb_evidence_cosig_msg(cp, line);
  dlqb_status st = msg != NULL
                       ? dlqb_anchor_append(cfg, "dlq-bridge audit witness", msg, strlen(msg), &err)
                       : dlqb_fail(&err, DLQB_ENOMEM, "out of memory");
  free(msg);
  if (st != DLQB_OK) {
    cli_error("cosignature not published: %s", err.msg);
    return EXIT_RUNTIME;
  }
  return EXIT_OK;
}

int audit_witness(int argc, char **argv) {
  witness_opts o = {.origin = DLQB_CHECKPOINT_DEFAULT_ORIGIN};
  static dlqb_config cfg; /* not on the stack: a config is large */
  bool help = false;
  int rc = cli_load(&witness_spec, argc, argv, &cfg, witness_flag, &o, &help);
  if (rc != EXIT_OK) return rc;
  if (help) {
    cli_print_help(&witness_spec, stdout);
    return EXIT_OK;
  }
  if (o.key_file == NULL || o.name == NULL || (!o.print_vkey && o.state_file == NULL)) {
    cli_error("audit witness needs --witness-key, --name and --state (see 'dlq-bridge audit "
              "witness --help')");
    return EXIT_USAGE;
  }
  EVP_PKEY *key = NULL;
  dlqb_audit_keyring *ring = NULL;
  dlqb_audit_lines msgs = {0};
  char key_id[DLQB_AUDIT_KEY_ID_HEX + 1], vkey[256];
  dlqb_error err;
  dlqb_status st = dlqb_audit_key_load(o.key_file, &key, key_id, &err);
  if (st != DLQB_OK) {
    cli_error("--witness-key: %s", err.msg);
    return st == DLQB_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
  }
  rc = EXIT_USAGE;
  if (dlqb_witness_vkey_of(key, o.name, vkey, sizeof vkey, &err) != DLQB_OK) {
    cli_error("--name: %s", err.msg);
    goto done;
  }
  if (o.print_vkey) {
    printf("%s\n", vkey);
    rc = EXIT_OK;
    goto done;
  }
  if (cfg.audit.public_keys[0] == '\0') {
    cli_error("no public keys given (set DLQ_BRIDGE_AUDIT_PUBLIC_KEYS or --audit-public-keys to "
              "the key that signs the checkpoints)");
    goto done;
  }
  if ((ring = dlqb_audit_keyring_new()) == NULL ||
      (st = dlqb_audit_keyring_add(ring, cfg.audit.public_keys, &err)) != DLQB_OK) {
    cli_error("%s", ring == NULL ? "out of memory" : err.msg);
    rc = ring == NULL || st != DLQB_EINVAL ? EXIT_RUNTIME : EXIT_USAGE;
    goto done;
  }
  dlqb_witness_state s;
  if ((rc = load_state(&o, &s)) != EXIT_OK) goto done;
  rc = EXIT_RUNTIME;
  if (dlqb_anchor_read(&cfg, DLQB_Q_ANCHORS, &msgs, STREAM_IDLE_MS, &err) != DLQB_OK) {
    cli_error("%s", err.msg);
    goto done;
  }
  size_t cosigned = 0;
  bool refused = false;
  rc = EXIT_OK;
  char why[DLQB_ERROR_MAX];
  if (!dlqb_witness_stream_same(&s, &msgs, why, sizeof why)) {
    /* Writers can append to the stream but not delete or purge it: this
     * is someone with configure on it. */
    refused = true;
    dlqb_log_error("witness_refused", "witness %s refuses to go on: %s", o.name, why);
    cli_error("refused: %s", why);
  }
  for (size_t i = (size_t)s.seen; i < msgs.n && rc == EXIT_OK && !refused; i++) {
    dlqb_evidence_msg m;
    dlqb_checkpoint cp;
    /* Anyone who may publish can append to the stream: only a checkpoint
     * the log's key signed is judged; the rest is passed over. */
    if (dlqb_evidence_msg_parse(msgs.line[i], msgs.len[i], &m) && m.kind == 1 &&
        dlqb_checkpoint_verify(m.note, m.note_len, ring, &cp, NULL, &err) == DLQB_OK &&
        strcmp(cp.origin, o.origin) == 0) {
      switch (dlqb_witness_judge(&s, &cp, &m, why, sizeof why)) {
      case DLQB_WITNESS_REFUSE:
        refused = true;
        dlqb_log_error("witness_refused", "witness %s refuses to cosign (stream message %zu): %s",
                       o.name, i + 1, why);
        cli_error("refused: %s", why);
        break;
      case DLQB_WITNESS_COSIGN:
      case DLQB_WITNESS_SAME:
        /* The state first: a crash after it loses a cosignature (the
         * next run cosigns the same tree again), never lets this witness
         * cosign two trees that fork. */
        s.size = cp.size;
        memcpy(s.root, cp.root, DLQB_MERKLE_HASH);
        if ((rc = save_state(&o, &s)) == EXIT_OK &&
            (rc = publish_cosig(&cfg, &o, key, &m, &cp)) == EXIT_OK)
          cosigned++;
        break;
      }
    }
    dlqb_evidence_msg_release(&m);
    if (rc == EXIT_OK && !refused) dlqb_witness_mark(&s, &msgs, i);
  }
  if (rc == EXIT_OK && !refused) rc = save_state(&o, &s);
  write_textfile(&o, &s, refused);
  if (refused) rc = EXIT_RUNTIME;
  if (rc == EXIT_OK) {
    char b64[64];
    dlqb_base64_encode(s.root, DLQB_MERKLE_HASH, b64);
    printf("witness %s: %zu checkpoint%s cosigned; the last tree cosigned has %" PRIu64
           " lines (root %s)\n",
           o.name, cosigned, cosigned == 1 ? "" : "s", s.size, s.size ? b64 : "none");
  }
done:
  dlqb_audit_lines_free(&msgs);
  dlqb_audit_keyring_free(ring);
  EVP_PKEY_free(key);
  return rc;
}

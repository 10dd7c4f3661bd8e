/* dlq-bridge audit: commands on the tamper-evident audit trail. Its
 * subcommands (verify here; show and reconcile in their own files) are a
 * second small table in this file; each verifies the whole log first, with
 * the reading shared here (audit_cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_cli.h"
#include "commands.h"
#include "dlqb/anchor.h"
#include "dlqb/names.h"
#include "dlqb/scan.h"
#include "ops_cli.h"

/* How long verify --anchors waits for the next anchor of the stream. */
#define ANCHOR_IDLE_MS 10000

/* ---- what every subcommand shares: which files, which seal, the key ---- */

static const cli_flag verify_flags[] = {
    LOG_FLAGS,
    {"anchors", false, NULL,
     "also check the files against the signed anchors in dsr.audit.anchors (broker settings)"},
    {"json", false, NULL, "print the summary as JSON for scripts"},
    {NULL, false, NULL, NULL},
};

static const cli_spec verify_spec = {
    .name = "audit verify",
    .summary = "check that an audit log is complete and unaltered",
    .usage = "dlq-bridge audit verify [FILE...] [--seal FILE | --no-seal] [--partial] [--anchors] "
             "[settings]",
    .details =
        "Checks every writer's Ed25519 signatures with its public key (no secret is\n"
        "needed), every writer's hash chain of records, the links between rotated\n"
        "files, the links between the chains of a file, and the seal that catches a\n"
        "cut tail. --anchors also reads the stream dsr.audit.anchors from its first\n"
        "offset (as the broker user of the broker settings: read on that stream is\n"
        "enough) and checks the files against every anchor signed with a given key:\n"
        "a cut tail, a deleted chain or a deleted file is named even when log and seal\n"
        "were cut back together. Messages there that are not such anchors are counted\n"
        "and ignored. The trail is shared by every configured pipeline: all their\n"
        "chains are checked, and no --pipeline is needed.\n" FILES_DETAILS
        "Exit status: 0 intact; 1 not intact (the first bad line is named) or unreadable;\n"
        "2 usage or configuration error. --json prints {\"intact\": true, \"records\": N,\n"
        "\"chains\": N, \"chains_ended\": N, \"files\": N, \"rotations\": N, \"sealed\": "
        "true|false,\n"
        "\"sealed_chains\": N, \"partial\": true|false} (with --anchors also \"anchors\": N,\n"
        "\"anchored_chains\": N, \"anchors_ignored\": N, \"beyond_anchors\": N), or on\n"
        "failure the error document\n"
        "{\"error\": {\"message\": ..., \"exit_status\": N}}.",
    .flags = verify_flags,
    .settings = true,
    .uses = (const char *const[]){CLI_USES_AUDIT_READ, CLI_USES_BROKER, CLI_USES_LOG, NULL},
};

static dlqb_status audit_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  audit_opts *o = ctx;
  if (flag != NULL && value != NULL && value[0] == '\0')
    return dlqb_fail(err, DLQB_EINVAL, "--%s needs a non-empty value", flag);
  if (flag == NULL) o->files[o->nfiles++] = value;
  else if (strcmp(flag, "seal") == 0) o->seal = value;
  else if (strcmp(flag, "no-seal") == 0) o->no_seal = true;
  else if (strcmp(flag, "partial") == 0) o->partial = true;
  else if (strcmp(flag, "anchors") == 0) o->anchors = true;
  else if (strcmp(flag, "request-id") == 0 || strcmp(flag, "id") == 0) {
    o->request_id = value;
    o->id_flag = strcmp(flag, "id") == 0 ? "id" : "request-id";
  } else if (strcmp(flag, "message-id") == 0) o->message_id = value;
  else if (strcmp(flag, "json") == 0) o->json = true;
  else if (strcmp(flag, "window") == 0) return cli_parse_window(value, &o->window, err);
  else if (o->extra != NULL) return o->extra(o->extra_ctx, flag, value, err);
  return DLQB_OK;
}

void audit_print_summary(const dlqb_audit_summary *s, bool sealed) {
  char line[512];
  snprintf(line, sizeof line,
           "audit log intact: %lu record%s in %lu chain%s (%lu ended cleanly, %lu open) across "
           "%lu file%s, %lu rotation link%s checked",
           s->records, s->records == 1 ? "" : "s", s->chains, s->chains == 1 ? "" : "s",
           s->chains_ended, s->chains - s->chains_ended, s->files, s->files == 1 ? "" : "s",
           s->rotations, s->rotations == 1 ? "" : "s");
  cli_print_wrapped(stdout, line, cli_output_width(false));
  if (sealed)
    printf("seal: the tail is complete for %lu sealed chain%s\n", s->sealed,
           s->sealed == 1 ? "" : "s");
  else printf("seal: not checked (--no-seal): a cut tail would go unnoticed\n");
  if (s->anchors_given)
    printf("anchors: %lu anchor%s of %lu chain%s checked (%lu ignored: not signed by a given "
           "key); %llu record%s newer than their chain's last anchor\n",
           s->anchors, s->anchors == 1 ? "" : "s", s->anchored, s->anchored == 1 ? "" : "s",
           s->anchors_ignored, s->beyond_anchors, s->beyond_anchors == 1 ? "" : "s");
  if (s->partial) printf("partial: started at a rotation; records before it were not checked\n");
}

int audit_load_and_verify(const cli_spec *spec, int argc, char **argv, audit_opts *o,
                          dlqb_audit_visit_fn visit, void *ctx, dlqb_audit_summary *sum,
                          bool *sealed, bool *help) {
  static dlqb_config cfg; /* not on the stack: a config is large */
  char **listed = NULL;
  size_t nlisted = 0;
  dlqb_audit_keyring *ring = NULL;
  dlqb_audit_lines anchors = {0};
  char seal[DLQB_CONFIG_STR_MAX + 16];
  dlqb_error err = {{0}};
  o->files = calloc((size_t)argc + 1, sizeof *o->files);
  if (o->files == NULL) {
    cli_error("out of memory");
    return EXIT_RUNTIME;
  }
  int rc = cli_load(spec, argc, argv, &cfg, audit_flag, o, help);
  if (rc != EXIT_OK || *help) goto done;
  rc = EXIT_USAGE;
  if (o->seal != NULL && o->no_seal) {
    cli_error("--seal and --no-seal exclude each other");
    goto done;
  }
  if (o->require_id && o->request_id == NULL && o->message_id == NULL) {
    cli_error("%s needs --id, --request-id or --message-id (see 'dlq-bridge %s --help')",
              spec->name, spec->name);
    goto done;
  }
  const dlqb_profile *pr = &cli_pipeline()->profile;
  if (o->id_flag != NULL && strcmp(o->id_flag, "request-id") == 0 &&
      strcmp(pr->fields[0].name, DLQB_H_REQUEST_ID) != 0) {
    cli_error("--request-id: profile '%s' identifies a task by %s and %s, not request_id (use "
              "--id VALUE)",
              pr->name, pr->fields[0].name, pr->fields[1].name);
    goto done;
  }
  if (o->nfiles == 0 && cfg.audit.log[0] == '\0') {
    cli_error("no audit log given (name the files, or set DLQ_BRIDGE_AUDIT_LOG)");
    goto done;
  }
  /* Public keys only: an auditor checks the trail without any writer's
   * secret, and audit_key_file is never read here. */
  if (cfg.audit.public_keys[0] == '\0') {
    cli_error("no public keys given (set DLQ_BRIDGE_AUDIT_PUBLIC_KEYS or --audit-public-keys "
              "to the writers' *.pem public keys)");
    goto done;
  }
  if ((ring = dlqb_audit_keyring_new()) == NULL) {
    cli_error("out of memory");
    rc = EXIT_RUNTIME;
    goto done;
  }
  dlqb_status st = dlqb_audit_keyring_add(ring, cfg.audit.public_keys, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    rc = st == DLQB_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
    goto done;
  }
  rc = EXIT_RUNTIME;
  if (o->nfiles == 0) {
    if (dlqb_audit_list_files(cfg.audit.log, &listed, &nlisted, &err) != DLQB_OK) {
      cli_error("%s", err.msg);
      goto done;
    }
  }
  const char *const *files = nlisted > 0 ? (const char *const *)listed : o->files;
  size_t nfiles = nlisted > 0 ? nlisted : o->nfiles;
  const char *seal_path = NULL;
  if (!o->no_seal) {
    if (o->seal != NULL) {
      seal_path = o->seal;
    } else {
      const char *last = o->nfiles > 0 ? files[nfiles - 1] : cfg.audit.log;
      snprintf(seal, sizeof seal, "%s%s", last, DLQB_AUDIT_SEAL_SUFFIX);
      seal_path = seal;
    }
  }
  if (o->prepare != NULL && (rc = o->prepare(o->prepare_ctx, &cfg)) != EXIT_OK) goto done;
  rc = EXIT_RUNTIME;
  if (o->keep_file != NULL && nlisted > 0) {
    size_t kept = 0;
    for (size_t i = 0; i < nlisted; i++) {
      if (o->keep_file(o->prepare_ctx, listed[i])) listed[kept++] = listed[i];
      else free(listed[i]);
    }
    nlisted = kept;
    nfiles = kept;
    if (kept == 0) {
      cli_error("no audit file left to read beside '%s'", cfg.audit.log);
      goto done;
    }
  }
  /* The anchors first: what they vouch for at the start of the read is
   * what the files must hold. */
  if (o->anchors &&
      (st = dlqb_anchor_read(&cfg, DLQB_Q_ANCHORS, &anchors, ANCHOR_IDLE_MS, &err)) != DLQB_OK) {
    cli_error("%s", err.msg);
    goto done;
  }
  st = dlqb_audit_verify_anchored(ring, files, nfiles, seal_path, o->partial,
                                  o->anchors ? &anchors : NULL, visit, ctx, sum, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    goto done;
  }
  *sealed = seal_path != NULL;
  rc = EXIT_OK;
done:
  dlqb_audit_keyring_free(ring);
  dlqb_audit_lines_free(&anchors);
  dlqb_audit_files_free(listed, nlisted);
  free(o->files);
  o->files = NULL;
  return rc;
}

/* ---- audit verify ---- */

static int audit_verify(int argc, char **argv) {
  audit_opts o = {0};
  dlqb_audit_summary sum;
  bool sealed = false, help = false;
  int rc = audit_load_and_verify(&verify_spec, argc, argv, &o, NULL, NULL, &sum, &sealed, &help);
  if (help) {
    cli_print_help(&verify_spec, stdout);
  } else if (rc == EXIT_OK && o.json) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "intact", json_object_new_boolean(1));
    json_object_object_add(j, "records", json_object_new_int64((int64_t)sum.records));
    json_object_object_add(j, "chains", json_object_new_int64((int64_t)sum.chains));
    json_object_object_add(j, "chains_ended", json_object_new_int64((int64_t)sum.chains_ended));
    json_object_object_add(j, "files", json_object_new_int64((int64_t)sum.files));
    json_object_object_add(j, "rotations", json_object_new_int64((int64_t)sum.rotations));
    json_object_object_add(j, "sealed", json_object_new_boolean(sealed));
    json_object_object_add(j, "sealed_chains", json_object_new_int64((int64_t)sum.sealed));
    json_object_object_add(j, "partial", json_object_new_boolean(sum.partial));
    if (sum.anchors_given) {
      json_object_object_add(j, "anchors", json_object_new_int64((int64_t)sum.anchors));
      json_object_object_add(j, "anchored_chains", json_object_new_int64((int64_t)sum.anchored));
      json_object_object_add(j, "anchors_ignored",
                             json_object_new_int64((int64_t)sum.anchors_ignored));
      json_object_object_add(j, "beyond_anchors",
                             json_object_new_int64((int64_t)sum.beyond_anchors));
    }
    cli_print_json(j);
  } else if (rc == EXIT_OK) {
    audit_print_summary(&sum, sealed);
  }
  return rc;
}

/* ---- the subcommand table ---- */

static const cli_subcommand subcommands[] = {
    {"verify", audit_verify},
    {"show", audit_show},
    {"reconcile", audit_reconcile},
    {"report", audit_report},
    {"verify-report", audit_verify_report},
    {"checkpoint", audit_checkpoint},
    {"prove", audit_prove},
    {"archive", audit_archive},
    {"verify-proof", audit_verify_proof},
    {"witness", audit_witness},
};
#define NSUB (sizeof subcommands / sizeof subcommands[0])

const cli_spec cmd_audit_spec = {
    .name = "audit",
    .summary = "verify the audit trail, show a task's path, reconcile the DLQ, report a period",
    .usage = "dlq-bridge audit SUBCOMMAND [options]",
    .details =
        "subcommands:\n"
        "  verify [FILE...]   check that the audit log is complete and unaltered\n"
        "  show --request-id ID [FILE...]\n"
        "                     every hop recorded for a task, from a verified log\n"
        "  reconcile [FILE...]\n"
        "                     check that the DLQ holds what the audit trail put there\n"
        "  report --from T [--to T] [FILE...]\n"
        "                     every request seen in a period, its state and response time, "
        "signed\n"
        "  verify-report FILE\n"
        "                     check a report's signature with the public keys alone\n"
        "  checkpoint [FILE...]\n"
        "                     sign the log's Merkle tree and publish it to dsr.audit.anchors\n"
        "  prove --request-id ID [FILE...]\n"
        "                     one request's records with inclusion proofs, as a bundle\n"
        "  archive FILE... --output FILE\n"
        "                     what the tree needs of old files, before they are deleted\n"
        "  verify-proof BUNDLE\n"
        "                     check a bundle offline, with public keys and a witness policy\n"
        "  witness --witness-key FILE --name NAME --state FILE\n"
        "                     cosign checkpoints that extend the last one cosigned\n"
        "\n"
        "`dlq-bridge audit SUBCOMMAND --help` shows a subcommand's options.",
    .flags = NULL,
    .settings = false,
};

int cmd_audit(int argc, char **argv) {
  return cli_run_subcommand(&cmd_audit_spec, subcommands, NSUB, argc, argv);
}

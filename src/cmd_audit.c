/* dlq-bridge audit: commands on the tamper-evident audit trail. Its
 * subcommands ("audit verify") are a second small table in this file. */
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "dlqb/audit.h"

/* ---- audit verify ---- */

static const cli_flag verify_flags[] = {
    {"seal", true, "FILE", "seal to check the tail against (default: the last FILE + .seal)"},
    {"no-seal", false, NULL, "do not check a seal (a cut tail then goes unnoticed)"},
    {"partial", false, NULL,
     "accept a first file that continues an archived one (checks from there on)"},
    {NULL, false, NULL, NULL},
};

static const cli_spec verify_spec = {
    .name = "audit verify",
    .summary = "check that an audit log is complete and unaltered",
    .usage = "dlq-bridge audit verify [FILE...] [--seal FILE | --no-seal] [--partial] [settings]",
    .details =
        "Checks every record's HMAC-SHA256 with the key in DLQ_BRIDGE_AUDIT_KEY_FILE\n"
        "(--audit-key-file), every writer's chain of records, the links between rotated\n"
        "files, and the seal that catches a cut tail. FILEs are the log's files oldest\n"
        "first; without them, the configured DLQ_BRIDGE_AUDIT_LOG and its rotated files.\n"
        "Exit status: 0 intact; 1 not intact (the first bad line is named) or unreadable;\n"
        "2 usage or configuration error.",
    .flags = verify_flags,
    .settings = true,
};

typedef struct {
  const char **files;
  size_t nfiles;
  const char *seal;
  bool no_seal, partial;
} verify_opts;

static dlqb_status verify_flag(void *ctx, const char *flag, const char *value, dlqb_error *err) {
  verify_opts *o = ctx;
  (void)err;
  if (flag == NULL) o->files[o->nfiles++] = value; /* room for argc entries */
  else if (strcmp(flag, "seal") == 0) o->seal = value;
  else if (strcmp(flag, "no-seal") == 0) o->no_seal = true;
  else if (strcmp(flag, "partial") == 0) o->partial = true;
  return DLQB_OK;
}

static void print_summary(const dlqb_audit_summary *s, bool sealed) {
  printf("audit log intact: %lu record%s in %lu chain%s (%lu ended cleanly, %lu open) across "
         "%lu file%s, %lu rotation link%s checked\n",
         s->records, s->records == 1 ? "" : "s", s->chains, s->chains == 1 ? "" : "s",
         s->chains_ended, s->chains - s->chains_ended, s->files, s->files == 1 ? "" : "s",
         s->rotations, s->rotations == 1 ? "" : "s");
  if (sealed)
    printf("seal: the tail is complete for %lu sealed chain%s\n", s->sealed,
           s->sealed == 1 ? "" : "s");
  else
    printf("seal: not checked (--no-seal): a cut tail would go unnoticed\n");
  if (s->partial)
    printf("partial: started at a rotation; records before it were not checked\n");
}

static int audit_verify(int argc, char **argv) {
  dlqb_config cfg;
  bool help;
  verify_opts o = {0};
  o.files = calloc((size_t)argc + 1, sizeof *o.files);
  if (o.files == NULL) {
    cli_error("out of memory");
    return EXIT_FAILURE_;
  }
  char **listed = NULL;
  size_t nlisted = 0;
  unsigned char key[DLQB_AUDIT_KEY_MAX];
  size_t key_len = 0;
  char seal[DLQB_CONFIG_STR_MAX + 16];
  dlqb_error err = {{0}};
  int rc = cli_load(&verify_spec, argc, argv, &cfg, verify_flag, &o, &help);
  if (rc != EXIT_OK) goto done;
  if (help) {
    cli_print_help(&verify_spec, stdout);
    goto done;
  }
  rc = EXIT_USAGE;
  if (o.seal != NULL && o.no_seal) {
    cli_error("--seal and --no-seal exclude each other");
    goto done;
  }
  if (o.nfiles == 0 && cfg.audit_log[0] == '\0') {
    cli_error("no audit log given (name the files, or set DLQ_BRIDGE_AUDIT_LOG)");
    goto done;
  }
  if (cfg.audit_key_file[0] == '\0') {
    cli_error("no audit key given (set DLQ_BRIDGE_AUDIT_KEY_FILE or --audit-key-file)");
    goto done;
  }
  dlqb_status st = dlqb_audit_key_load(cfg.audit_key_file, key, &key_len, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    rc = st == DLQB_EINVAL ? EXIT_USAGE : EXIT_FAILURE_;
    goto done;
  }
  rc = EXIT_FAILURE_;
  if (o.nfiles == 0) {
    if (dlqb_audit_list_files(cfg.audit_log, &listed, &nlisted, &err) != DLQB_OK) {
      cli_error("%s", err.msg);
      goto done;
    }
  }
  const char *const *files = nlisted > 0 ? (const char *const *)listed : o.files;
  size_t nfiles = nlisted > 0 ? nlisted : o.nfiles;
  const char *seal_path = NULL;
  if (!o.no_seal) {
    if (o.seal != NULL) {
      seal_path = o.seal;
    } else {
      const char *last = o.nfiles > 0 ? files[nfiles - 1] : cfg.audit_log;
      snprintf(seal, sizeof seal, "%s%s", last, DLQB_AUDIT_SEAL_SUFFIX);
      seal_path = seal;
    }
  }
  dlqb_audit_summary sum;
  st = dlqb_audit_verify_files(key, key_len, files, nfiles, seal_path, o.partial, &sum, &err);
  if (st != DLQB_OK) {
    cli_error("%s", err.msg);
    goto done;
  }
  print_summary(&sum, seal_path != NULL);
  rc = EXIT_OK;
done:
  OPENSSL_cleanse(key, sizeof key);
  dlqb_audit_files_free(listed, nlisted);
  free(o.files);
  return rc;
}

/* ---- the subcommand table ---- */

typedef struct {
  const char *name;
  const cli_spec *spec;
  int (*run)(int argc, char **argv);
} subcommand;

static const subcommand subcommands[] = {
    {"verify", &verify_spec, audit_verify},
};
#define NSUB (sizeof subcommands / sizeof subcommands[0])

const cli_spec cmd_audit_spec = {
    .name = "audit",
    .summary = "check the tamper-evident audit trail (audit verify)",
    .usage = "dlq-bridge audit SUBCOMMAND [options]",
    .details = "subcommands:\n"
               "  verify [FILE...]   check that the audit log is complete and unaltered\n"
               "\n"
               "`dlq-bridge audit SUBCOMMAND --help` shows a subcommand's options.",
    .flags = NULL,
    .settings = false,
};

int cmd_audit(int argc, char **argv) {
  if (argc < 2) {
    cli_print_help(&cmd_audit_spec, stderr);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    cli_print_help(&cmd_audit_spec, stdout);
    return EXIT_OK;
  }
  for (size_t i = 0; i < NSUB; i++)
    if (strcmp(subcommands[i].name, argv[1]) == 0) return subcommands[i].run(argc - 1, argv + 1);
  cli_error("unknown audit subcommand '%s' (see dlq-bridge audit --help)", argv[1]);
  return EXIT_USAGE;
}

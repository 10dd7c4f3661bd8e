/* Command-line parsing shared by every dlq-bridge command. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "dlqb/config_file.h"
#include "dlqb/log.h"
#include "dlqb/text.h"

static dlqb_stop_flag stop_requested;

/* The --json error document (cli_finish) and where settings came from
 * (cli_setting_source): one command runs per process. */
static bool json_errors, json_printed;
static char last_error[DLQB_ERROR_MAX + 128];
static const cli_spec *loading;
static const char *config_path; /* the file applied, NULL when none */
static uint64_t file_keys;      /* bit i: setting i came from it */
static const char *flag_keys[64];
static size_t nflag_keys;

static void on_stop_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

dlqb_stop_flag *cli_stop_flag(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  return &stop_requested;
}

void cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  fprintf(stderr, "dlq-bridge: %s\n", last_error);
}

void cli_json_errors(bool on) { json_errors = on; }

void cli_json_printed(void) { json_printed = true; }

int cli_finish(int code) {
  if (code != EXIT_OK && json_errors && !json_printed) {
    json_object *j = json_object_new_object(), *e = json_object_new_object();
    json_object_object_add(e, "message",
                           json_object_new_string(last_error[0] ? last_error : "failed"));
    json_object_object_add(e, "exit_status", json_object_new_int(code));
    json_object_object_add(j, "error", e);
    printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN |
                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(j);
    json_printed = true;
  }
  if (fflush(stdout) != 0 || ferror(stdout)) {
    char why[DLQB_ERRNO_TEXT_MAX];
    if (errno != EPIPE)
      cli_error("cannot write output: %s", dlqb_errno_text(errno, why, sizeof why));
    return code == EXIT_OK ? EXIT_RUNTIME : code;
  }
  return code;
}

/* Help lines fit an 80-column terminal: the text after a 28-column left
 * part is wrapped at spaces, continuation lines indented under it. */
#define HELP_WIDTH 80
#define HELP_LEFT  28

static void help_row(FILE *out, const char *left, const char *text) {
  fprintf(out, "  %-26s", left);
  size_t col = strlen(left) > 26 ? 2 + strlen(left) : HELP_LEFT;
  if (col > HELP_LEFT) {
    fputc('\n', out);
    fprintf(out, "%*s", HELP_LEFT, "");
    col = HELP_LEFT;
  }
  const char *p = text;
  bool first = true;
  while (*p != '\0') {
    size_t word = strcspn(p, " ");
    if (!first && col + 1 + word > HELP_WIDTH) {
      fprintf(out, "\n%*s", HELP_LEFT, "");
      col = HELP_LEFT;
      first = true;
    }
    fprintf(out, " %.*s", (int)word, p);
    col += 1 + word;
    first = false;
    p += word;
    while (*p == ' ') p++;
  }
  fputc('\n', out);
}

/* The usage line(s), wrapped at spaces to HELP_WIDTH, continuations
 * indented under the command. */
static void help_usage(FILE *out, const char *usage) {
  fputs("usage:", out);
  size_t col = 6;
  for (const char *p = usage; *p != '\0';) {
    if (*p == '\n') { /* the spec's own line break */
      fputc('\n', out);
      p++;
      col = 0;
      while (*p == ' ') {
        fputc(' ', out);
        col++;
        p++;
      }
      continue;
    }
    size_t word = strcspn(p, " \n");
    if (col + 1 + word > HELP_WIDTH && col > 18) {
      fprintf(out, "\n%*s", 17, "");
      col = 17;
    }
    fprintf(out, " %.*s", (int)word, p);
    col += 1 + word;
    p += word;
    while (*p == ' ') p++;
  }
  fputc('\n', out);
}

void cli_print_help(const cli_spec *spec, FILE *out) {
  help_usage(out, spec->usage);
  fprintf(out, "\n%s\n", spec->summary);
  if (spec->details) fprintf(out, "\n%s\n", spec->details);
  if (spec->flags && spec->flags[0].name) {
    fprintf(out, "\noptions:\n");
    for (const cli_flag *f = spec->flags; f->name; f++) {
      char left[64];
      snprintf(left, sizeof left, "--%s%s%s", f->name, f->takes_value ? " " : "",
               f->takes_value ? f->metavar : "");
      help_row(out, left, f->help);
    }
  }
  help_row(out, "--help", "show this help and exit");
  if (spec->settings) {
    fprintf(out, "\nsettings (flag, environment variable, default; flags beat the environment,\n"
                 "which beats the --config file; 'dlq-bridge help settings' lists them all):\n");
    help_row(out, "--print-config",
             "print each setting this command reads, its value and "
             "where it came from (flag, environment, config file or default), then exit");
    help_row(out, "--config FILE",
             "JSON config file shared with the daemon (also "
             "DLQ_BRIDGE_CONFIG; default " DLQB_CONFIG_DEFAULT_PATH " when it exists; "
             "empty = none)");
    if (strcmp(spec->name, "run") == 0)
      help_row(out, "--pipeline NAME",
               "serve only this pipeline of the config file's "
               "`pipelines` (also DLQ_BRIDGE_PIPELINE); default: every one configured (dsr "
               "without `pipelines`)");
    else
      help_row(out, "--pipeline NAME",
               "the pipeline of the config file's `pipelines` to work "
               "on (also DLQ_BRIDGE_PIPELINE); default: the only one configured (dsr without "
               "`pipelines`). Its queues (the names in this help are dsr's) and its profile's "
               "identity fields (docs/pipelines.md) are used");
    for (const dlqb_config_setting *s = dlqb_config_settings(); s->key; s++) {
      if (!cli_uses(spec, s->key)) continue;
      char left[64];
      snprintf(left, sizeof left, "--%s VALUE", s->flag);
      char env[256];
      snprintf(env, sizeof env, "%s (default: %s)", s->env, s->dflt[0] ? s->dflt : "none");
      help_row(out, left, s->help);
      help_row(out, "", env);
    }
  }
  fprintf(out, "\nexit status: 0 success, 1 failure (e.g. broker unreachable), 2 usage or\n"
               "configuration error\n");
}

/* Writes s for a markdown table cell: '|' would end the cell. */
static void md_cell(FILE *out, const char *s) {
  for (; *s != '\0'; s++) {
    if (*s == '|') fputc('\\', out);
    fputc(*s, out);
  }
}

void cli_print_settings_markdown(FILE *out) {
  fprintf(out, "| config key | environment variable | flag | default | meaning |\n"
               "| --- | --- | --- | --- | --- |\n"
               "| | `DLQ_BRIDGE_CONFIG` | `--config FILE` | `" DLQB_CONFIG_DEFAULT_PATH "` (when "
               "it exists) | JSON config file with any of the keys below; empty = none |\n");
  for (const dlqb_config_setting *s = dlqb_config_settings(); s->key; s++) {
    fprintf(out, "| `%s` | `%s` | `--%s` | ", s->key, s->env, s->flag);
    if (s->dflt[0] != '\0') {
      fputc('`', out);
      md_cell(out, s->dflt);
      fputc('`', out);
    }
    fputs(" | ", out);
    md_cell(out, s->help);
    fputs(" |\n", out);
  }
}

static size_t chars_of(const char *p, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xC0u) != 0x80u;
  return c;
}

void cli_print_wrapped(FILE *out, const char *text, size_t width) {
  if (width == 0 || chars_of(text, strlen(text)) <= width) {
    fprintf(out, "%s\n", text);
    return;
  }
  size_t col = 0;
  const char *p = text;
  while (*p != '\0') {
    size_t spaces = strspn(p, " ");
    const char *word = p + spaces;
    if (*word == '\0') break;
    size_t n = strcspn(word, " "), w = chars_of(word, n);
    if (col > 0 && col + spaces + w > width) {
      fputs("\n  ", out);
      col = 2;
      spaces = 0;
    }
    fprintf(out, "%*s%.*s", (int)spaces, "", (int)n, word);
    col += spaces + w;
    p = word + n;
  }
  fputc('\n', out);
}

void cli_print_settings_list(FILE *out, size_t width) {
  char line[2 * DLQB_CONFIG_STR_MAX];
  for (const dlqb_config_setting *s = dlqb_config_settings(); s->key; s++) {
    snprintf(line, sizeof line, "%s  (%s, --%s; default %s)", s->key, s->env, s->flag,
             s->dflt[0] != '\0' ? s->dflt : "none");
    cli_print_wrapped(out, line, width);
    snprintf(line, sizeof line, "  %s", s->help);
    cli_print_wrapped(out, line, width);
  }
  snprintf(line, sizeof line,
           "Also DLQ_BRIDGE_CONFIG / --config FILE: the JSON config file (default %s when it "
           "exists).",
           DLQB_CONFIG_DEFAULT_PATH);
  fputc('\n', out);
  cli_print_wrapped(out, line, width);
}

bool cli_uses(const cli_spec *spec, const char *key) {
  if (!spec->settings) return false;
  /* The drain's settings are the drain's alone: the daemon and review do
   * not take them, show them or fail on them. */
  if (spec->uses == NULL) return strncmp(key, "drain_", 6) != 0;
  for (const char *const *k = spec->uses; *k; k++)
    if (strcmp(*k, key) == 0) return true;
  return false;
}

const char *cli_config_file(void) { return config_path; }

const char *cli_setting_source(const char *key, char *buf, size_t len) {
  const dlqb_config_setting *s = dlqb_config_settings();
  while (s->key && strcmp(s->key, key) != 0) s++;
  if (s->key == NULL) {
    snprintf(buf, len, "%s", key);
    return buf;
  }
  for (size_t i = 0; i < nflag_keys; i++) {
    if (strcmp(flag_keys[i], key) == 0) {
      snprintf(buf, len, "--%s", s->flag);
      return buf;
    }
  }
  long i = dlqb_config_key_index(key);
  if (getenv(s->env) != NULL) snprintf(buf, len, "%s", s->env);
  else if (config_path != NULL && i >= 0 && (file_keys & (UINT64_C(1) << i)) != 0)
    snprintf(buf, len, "key '%s' in config file '%s'", key, config_path);
  else snprintf(buf, len, "the default");
  return buf;
}

/* The environment as the command being loaded sees it: only the settings
 * it reads (a variable meant for the daemon must not break inspect). */
static const char *env_for_command(const char *name) {
  for (const dlqb_config_setting *s = dlqb_config_settings(); s->key; s++)
    if (strcmp(s->env, name) == 0 && !cli_uses(loading, s->key)) return NULL;
  return getenv(name);
}

/* Checks what dlqb_config_validate cannot name as the operator typed it. */
static dlqb_status check_sources(const cli_spec *spec, const dlqb_config *cfg, dlqb_error *err) {
  char a[DLQB_CONFIG_STR_MAX + 80], b[DLQB_CONFIG_STR_MAX + 80];
  if (cli_uses(spec, "audit_key_file") && cfg->audit.log[0] != '\0' &&
      cfg->audit.key_file[0] == '\0') {
    cli_setting_source("audit_key_file", a, sizeof a);
    cli_setting_source("audit_log", b, sizeof b);
    if (strcmp(a, "the default") == 0)
      return dlqb_fail(err, DLQB_EINVAL,
                       "%s turns the audit trail on, which needs a key file: "
                       "give --audit-key-file or DLQ_BRIDGE_AUDIT_KEY_FILE",
                       b);
    return dlqb_fail(err, DLQB_EINVAL,
                     "%s is empty, but %s turns the audit trail on, which "
                     "needs a key file",
                     a, b);
  }
  return DLQB_OK;
}

/* The pipeline the command serves (cli_pipeline): the default one until
 * choose_pipeline chose another. */
static dlqb_pipeline served;
static bool served_set;

const dlqb_pipeline *cli_pipeline(void) {
  if (!served_set) {
    dlqb_pipeline_default_names(&served, DLQB_PIPELINE_DEFAULT);
    (void)dlqb_profile_builtin(DLQB_PIPELINE_DEFAULT, &served.profile, NULL);
    served_set = true;
  }
  return &served;
}

/* The pipelines of the config file, and --pipeline (NULL when not given).
 * `declare` covers every one, or the one named; `audit verify` checks the
 * shared trail, every pipeline's chains, whichever is named. The others
 * serve one: the one named, or the only one configured: `run` routes it,
 * the ops commands work on its queues, by its profile's identity, with its
 * own files (ledger cache, drain state and textfile). `run` without
 * --pipeline keeps every pipeline: it serves them all.
 *
 * choose_pipeline runs before the flags are read, so that a flag's handler
 * (inspect --queue) and anything a command sets up meanwhile sees the
 * chosen pipeline's names and profile: they come from the config file
 * alone. serve_pipeline runs once every setting is in: what stays in cfg
 * is the pipeline served, its policy in the top-level settings (for `run`
 * its broker user too). *index is SIZE_MAX when none is chosen. */
static dlqb_status choose_pipeline(const cli_spec *spec, const dlqb_config *cfg, const char *chosen,
                                   size_t *index, dlqb_error *err) {
  bool all = strcmp(spec->name, "declare") == 0 || strcmp(spec->name, "audit verify") == 0;
  bool run = strcmp(spec->name, "run") == 0;
  *index = SIZE_MAX;
  if (all && chosen == NULL) return DLQB_OK;
  /* run without --pipeline serves every one (cmd_run.c keeps each alone
   * on a copy of cfg, with its policy and broker user). */
  if (run && chosen == NULL && cfg->pipeline_count > 1) return DLQB_OK;
  if (dlqb_config_pipeline_choose(cfg, chosen, index, err) != DLQB_OK) return DLQB_EINVAL;
  dlqb_config_pipeline(cfg, *index, &served);
  served_set = true;
  return DLQB_OK;
}

static dlqb_status serve_pipeline(const cli_spec *spec, dlqb_config *cfg, size_t i,
                                  dlqb_error *err) {
  if (i == SIZE_MAX) return DLQB_OK;
  dlqb_pipeline p;
  dlqb_config_pipeline(cfg, i, &p);
  if (dlqb_config_pipeline_paths(cfg, &p, err) != DLQB_OK) return DLQB_EINVAL;
  dlqb_config_pipeline_only(cfg, i);
  dlqb_config_use_pipeline(cfg, &p);
  if (strcmp(spec->name, "run") == 0) dlqb_config_use_pipeline_user(cfg, 0);
  served = p;
  served_set = true;
  return DLQB_OK;
}

/* Files the connection reads: one that cannot be read is a configuration
 * error (exit 2) naming the setting, not a failure to connect later. */
static dlqb_status check_files(const cli_spec *spec, const dlqb_config *cfg, dlqb_error *err) {
  static const struct {
    const char *key, *what;
    size_t offset;
  } files[] = {
      {"password_file", "password file", offsetof(dlqb_config, broker.password_file)},
      {"tls_ca_file", "tls ca file", offsetof(dlqb_config, broker.tls_ca_file)},
      {"tls_cert_file", "tls client certificate", offsetof(dlqb_config, broker.tls_cert_file)},
      {"tls_key_file", "tls client key", offsetof(dlqb_config, broker.tls_key_file)},
      {"audit_key_file", "audit key file", offsetof(dlqb_config, audit.key_file)},
  };
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    const char *path = (const char *)cfg + files[i].offset;
    if (!cli_uses(spec, files[i].key) || path[0] == '\0') continue;
    /* The key matters only with a log (audit verify may name its files). */
    if (strcmp(files[i].key, "audit_key_file") == 0 && cfg->audit.log[0] == '\0' &&
        strncmp(spec->name, "audit", 5) != 0)
      continue;
    FILE *f = fopen(path, "r");
    if (f != NULL) {
      fclose(f);
      continue;
    }
    char a[DLQB_CONFIG_STR_MAX + 80], why[DLQB_ERRNO_TEXT_MAX];
    int e = errno;
    return dlqb_fail(err, DLQB_EINVAL, "%s: cannot read %s '%s': %s",
                     cli_setting_source(files[i].key, a, sizeof a), files[i].what, path,
                     dlqb_errno_text(e, why, sizeof why));
  }
  /* The pipelines' own users (run serves them all). */
  for (size_t i = 0; strcmp(spec->name, "run") == 0 && i < cfg->pipeline_count; i++) {
    const char *path = cfg->pipelines[i].password_file;
    FILE *f = path[0] != '\0' ? fopen(path, "r") : NULL;
    if (path[0] == '\0' || f != NULL) {
      if (f != NULL) fclose(f);
      continue;
    }
    char why[DLQB_ERRNO_TEXT_MAX];
    int e = errno;
    return dlqb_fail(err, DLQB_EINVAL,
                     "key 'pipelines.%s.password_file': cannot read password "
                     "file '%s': %s",
                     cfg->pipelines[i].p.name, path, dlqb_errno_text(e, why, sizeof why));
  }
  return DLQB_OK;
}

/* --print-config: one line per setting the command reads. The instance
 * shown is the one in use (hostname:pid when none was set). */
static void print_settings(const cli_spec *spec, const dlqb_config *cfg) {
  const dlqb_config_setting *s = dlqb_config_settings();
  for (long i = 0; s[i].key != NULL; i++) {
    if (!cli_uses(spec, s[i].key)) continue;
    char value[DLQB_CONFIG_STR_MAX], src[DLQB_CONFIG_STR_MAX + 80], shown[DLQB_CONFIG_STR_MAX];
    dlqb_config_value_text(cfg, i, value, sizeof value);
    /* Paths and names are operator text: no control bytes on a terminal. */
    dlqb_text_sanitize(shown, sizeof shown, value, strlen(value));
    printf("%-20s %-40s %s\n", s[i].key, shown[0] != '\0' ? shown : "\"\"",
           cli_setting_source(s[i].key, src, sizeof src));
  }
  if (config_path != NULL) printf("(config file: %s)\n", config_path);
  else printf("(no config file)\n");
}

static const cli_flag *find_cmd_flag(const cli_spec *spec, const char *name) {
  for (const cli_flag *f = spec->flags; f && f->name; f++)
    if (strcmp(f->name, name) == 0) return f;
  return NULL;
}

/* The option of spec nearest to name (its own flags and the settings it
 * uses), when one is within two edits: a mistyped --limt is told about
 * --limit, as a mistyped command or config key is. NULL: none near. */
static const char *nearest_flag(const cli_spec *spec, const char *name) {
  const char *best = NULL;
  size_t best_d = 3;
  for (const cli_flag *f = spec->flags; f && f->name; f++) {
    size_t d = dlqb_text_distance(name, f->name);
    if (d < best_d) best_d = d, best = f->name;
  }
  for (const dlqb_config_setting *s = dlqb_config_settings(); spec->settings && s->key; s++) {
    if (s->flag == NULL || !cli_uses(spec, s->key)) continue;
    size_t d = dlqb_text_distance(name, s->flag);
    if (d < best_d) best_d = d, best = s->flag;
  }
  return best;
}

/* Splits "--name=value" / "--name value"; returns the value or NULL and
 * advances *i when the value is the next argument. */
static const char *flag_value(int argc, char **argv, int *i, char *name, size_t cap) {
  const char *arg = argv[*i] + 2;
  const char *eq = strchr(arg, '=');
  if (eq != NULL) {
    snprintf(name, cap, "%.*s", (int)(eq - arg), arg);
    return eq + 1;
  }
  snprintf(name, cap, "%s", arg);
  if (*i + 1 < argc) return argv[++*i];
  return NULL;
}

static bool has_inline_value(const char *arg) { return strchr(arg, '=') != NULL; }

int cli_load(const cli_spec *spec, int argc, char **argv, dlqb_config *cfg, cli_flag_fn on_flag,
             void *ctx, bool *help) {
  dlqb_error err = {{0}};
  bool print_config = false;
  *help = false;
  loading = spec;
  nflag_keys = 0;
  dlqb_config_defaults(cfg);

  /* The default pipeline until choose_pipeline picked one for this load. */
  served_set = false;

  /* Pass 1: --help, --config and --pipeline, which decide what else happens. */
  const char *config_flag = NULL, *pipeline_flag = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      *help = true;
      return EXIT_OK;
    }
    if (strcmp(argv[i], "--") == 0) break;
    if (strncmp(argv[i], "--config", 8) == 0 && (argv[i][8] == '\0' || argv[i][8] == '=')) {
      char name[64];
      int j = i;
      const char *v = flag_value(argc, argv, &j, name, sizeof name);
      if (v == NULL) {
        cli_error("--config needs a file");
        return EXIT_USAGE;
      }
      config_flag = v;
    }
    if (strncmp(argv[i], "--pipeline", 10) == 0 && (argv[i][10] == '\0' || argv[i][10] == '=')) {
      char name[64];
      int j = i;
      const char *v = flag_value(argc, argv, &j, name, sizeof name);
      if (v != NULL) pipeline_flag = v; /* without one, pass 2 says so */
    }
  }
  config_path = NULL;
  file_keys = 0;
  if (spec->settings) {
    /* The daemon and every ops command read the same file, so an operator's
     * shell finds the audit trail where the daemon has it. */
    bool required = false, loaded = false;
    const char *file = dlqb_config_file_choice(config_flag, getenv("DLQ_BRIDGE_CONFIG"), &required);
    if (file != NULL &&
        dlqb_config_load_file(cfg, file, required, &file_keys, &loaded, &err) != DLQB_OK)
      goto bad;
    if (loaded) config_path = file;
    /* A config file shared with the daemon: what this command does not read
     * goes back to its default. */
    for (const dlqb_config_setting *s = dlqb_config_settings(); s->key; s++)
      if (!cli_uses(spec, s->key)) (void)dlqb_config_set(cfg, s->key, s->dflt, "default", NULL);
    if (dlqb_config_apply_env(cfg, env_for_command, &err) != DLQB_OK) goto bad;
    for (const dlqb_config_setting *s = dlqb_config_settings(); s->key; s++)
      if (env_for_command(s->env) != NULL) dlqb_config_pipelines_override(cfg, s->key);
  }
  /* The flag, else the variable (a unit file's Environment=); empty = none. */
  if (pipeline_flag == NULL) pipeline_flag = getenv("DLQ_BRIDGE_PIPELINE");
  if (pipeline_flag != NULL && pipeline_flag[0] == '\0') pipeline_flag = NULL;
  size_t pipeline_index = SIZE_MAX;
  if (spec->settings && choose_pipeline(spec, cfg, pipeline_flag, &pipeline_index, &err) != DLQB_OK)
    goto bad;

  /* Pass 2: every flag in order, settings and command flags alike. */
  bool positional_only = false;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!positional_only && strcmp(arg, "--") == 0) {
      positional_only = true;
      continue;
    }
    if (positional_only || strncmp(arg, "--", 2) != 0) {
      if (on_flag == NULL) {
        cli_error("unexpected argument '%s' (see 'dlq-bridge %s --help')", arg, spec->name);
        return EXIT_USAGE;
      }
      if (on_flag(ctx, NULL, arg, &err) != DLQB_OK) goto bad;
      continue;
    }
    char name[64];
    const char *base = arg + 2;
    snprintf(name, sizeof name, "%.*s", (int)strcspn(base, "="), base);
    const cli_flag *cf = find_cmd_flag(spec, name);
    const dlqb_config_setting *s = dlqb_config_find_flag(name);
    if (s != NULL && !cli_uses(spec, s->key)) s = NULL;
    if (strcmp(name, "config") == 0 && spec->settings) {
      if (!has_inline_value(arg)) i++;
      continue;
    }
    if (strcmp(name, "pipeline") == 0 && spec->settings) {
      /* Read in pass 1 (choose_pipeline). */
      if (flag_value(argc, argv, &i, name, sizeof name) == NULL) {
        cli_error("--pipeline needs a name");
        return EXIT_USAGE;
      }
      continue;
    }
    if (strcmp(name, "print-config") == 0 && spec->settings && !has_inline_value(arg)) {
      print_config = true;
      continue;
    }
    if (cf == NULL && s == NULL) {
      const char *near = nearest_flag(spec, name);
      if (near != NULL)
        cli_error("unknown option '--%s'; did you mean '--%s'? (see 'dlq-bridge %s --help')", name,
                  near, spec->name);
      else cli_error("unknown option '--%s' (see 'dlq-bridge %s --help')", name, spec->name);
      return EXIT_USAGE;
    }
    const char *value = NULL;
    if ((cf && cf->takes_value) || s) {
      value = flag_value(argc, argv, &i, name, sizeof name);
      if (value == NULL) {
        cli_error("--%s needs a value", name);
        return EXIT_USAGE;
      }
    } else if (has_inline_value(arg)) {
      cli_error("--%s takes no value", name);
      return EXIT_USAGE;
    }
    char source[80];
    snprintf(source, sizeof source, "--%s", name);
    if (cf != NULL) {
      if (on_flag(ctx, name, value, &err) != DLQB_OK) goto bad;
    } else if (dlqb_config_set(cfg, s->key, value, source, &err) != DLQB_OK) {
      goto bad;
    } else {
      dlqb_config_pipelines_override(cfg, s->key);
      if (nflag_keys < sizeof flag_keys / sizeof flag_keys[0]) flag_keys[nflag_keys++] = s->key;
    }
  }
  if (spec->settings && check_sources(spec, cfg, &err) != DLQB_OK) goto bad;
  if (spec->settings && dlqb_config_validate(cfg, &err) != DLQB_OK) goto bad;
  if (spec->settings && serve_pipeline(spec, cfg, pipeline_index, &err) != DLQB_OK) goto bad;
  if (spec->settings && check_files(spec, cfg, &err) != DLQB_OK) goto bad;
  if (cfg->instance[0] == '\0') {
    char host[200] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(cfg->instance, sizeof cfg->instance, "%s:%ld", host, (long)getpid());
  }
  dlqb_log_setup(cfg->log.format, cfg->log.level, cfg->instance);
  if (print_config) {
    /* Every command treats it alike and nothing else runs, so it ends here. */
    print_settings(spec, cfg);
    exit(cli_finish(EXIT_OK));
  }
  return EXIT_OK;
bad:
  cli_error("%s", err.msg);
  return EXIT_USAGE;
}

int cli_run_subcommand(const cli_spec *spec, const cli_subcommand *subs, size_t n, int argc,
                       char **argv) {
  if (argc < 2) {
    cli_print_help(spec, stderr);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    cli_print_help(spec, stdout);
    return EXIT_OK;
  }
  for (size_t i = 0; i < n; i++)
    if (strcmp(subs[i].name, argv[1]) == 0) return subs[i].run(argc - 1, argv + 1);
  cli_error("unknown %s subcommand '%s' (see dlq-bridge %s --help)", spec->name, argv[1],
            spec->name);
  return EXIT_USAGE;
}

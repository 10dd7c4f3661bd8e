/* Evidence for one request on a real broker (docs/audit.md, "Evidence for
 * one request"): a trail of thousands of records written by the real
 * writer is checkpointed into dsr.audit.anchors and cosigned by a witness
 * with its own key and state; one request's bundle verifies offline in C
 * and in Python (no broker, public keys only), and both refuse it with a
 * byte changed, a record dropped or another request's record swapped in.
 * Then someone with the writer's key and broker admin rights rewrites the
 * log, re-signs it and republishes a checkpoint: `audit checkpoint` will
 * not sign it, the witness refuses and names the fork (and again when the
 * stream is deleted and re-made), and a bundle cut from the rewritten log
 * fails verify-proof under a one-witness policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flow.h"

#define ANCHORS "dsr.audit.anchors"
#define WAIT_MS 20000
#define HOPS    "1500" /* per writer run; request ids DSR-0 .. DSR-1499 */

typedef struct {
  fx_audit a;   /* the log's host: the writer's key, the log, the public keys */
  fx_audit wit; /* the witness's host: its own key and state */
  char seal[160], away[160], state[160], textfile[160], vkeys[160], bundles[160];
  char arg_state[200], arg_key[200];
  const char *env[5];  /* the log host's: log, key, public keys */
  const char *venv[2]; /* an auditor's, offline: public keys only */
  const char *wenv[2]; /* the witness's: the log's public keys, no log */
} world;

static void world_init(fx_case *t, world *w) {
  assert_int_equal(fx_audit_init(&w->a), 0);
  assert_int_equal(fx_audit_init(&w->wit), 0);
  assert_true(th_fmt(w->seal, sizeof w->seal, "%s.seal", w->a.log));
  assert_true(th_fmt(w->away, sizeof w->away, "%s.away", w->a.key));
  assert_true(th_fmt(w->state, sizeof w->state, "%s/witness.state", w->wit.dir));
  assert_true(th_fmt(w->textfile, sizeof w->textfile, "%s/witness.prom", w->wit.dir));
  assert_true(th_fmt(w->bundles, sizeof w->bundles, "%s/bundles", w->a.dir));
  assert_true(th_fmt(w->vkeys, sizeof w->vkeys, "%s/witnesses.txt", w->bundles));
  assert_int_equal(mkdir(w->bundles, 0700), 0);
  char link[200];
  assert_true(th_fmt(link, sizeof link, "%s/keys", w->bundles));
  assert_int_equal(symlink(w->a.keys, link), 0);
  w->env[0] = w->a.env_log;
  w->env[1] = w->a.env_key;
  w->env[2] = w->a.env_pub;
  w->env[3] = "DLQ_BRIDGE_METRICS_ADDR=off";
  w->env[4] = NULL;
  w->venv[0] = w->a.env_pub;
  w->venv[1] = NULL;
  w->wenv[0] = w->a.env_pub;
  w->wenv[1] = NULL;
  static const char *const declare[] = {"declare", NULL};
  th_result r;
  assert_int_equal(th_run_bridge(declare, t->vhost.url, w->env, 30000, &r), 0);
  assert_int_equal(r.exit_code, 0);
}

static void world_remove(world *w) {
  fx_audit_remove(&w->a);
  fx_audit_remove(&w->wit);
}

/* One writer run of the real audit writer: HOPS hops, one per request
 * (DSR-first ..), rotating the log past rotate bytes (0: never). */
static void write_hops_as(world *w, long rotate, long first) {
  const char *gen = getenv("DLQB_AUDIT_GEN");
  assert_non_null(gen);
  char cmd[600];
  assert_true(th_fmt(cmd, sizeof cmd, "'%s' '%s' '%s' %s 100 %ld %ld", gen, w->a.log, w->a.key,
                     HOPS, rotate, first));
  assert_int_equal(system(cmd), 0);
}

static void write_hops(world *w) { write_hops_as(w, 0, 0); }

static void run(fx_case *t, const char *url, const char *const *args, const char *const *env,
                th_result *r) {
  assert_int_equal(th_run_bridge(args, url != NULL ? url : t->vhost.url, env, 120000, r), 0);
  printf("%s %s: exit %d\n%s%s", args[0], args[1], r->exit_code, r->out, r->err);
}

/* A checkpoint, readable when the command returns: the next command
 * (prove, witness) runs at once, with no wait of the test's own. */
static void checkpoint(fx_case *t, world *w, const char *want) {
  const char *const args[] = {"audit", "checkpoint", NULL};
  th_result r;
  run(t, NULL, args, w->env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, want));
}

/* Runs the witness; returns its exit status, r holds its output. */
static int witness(fx_case *t, world *w, th_result *r) {
  const char *const args[] = {
      "audit",   "witness", "--witness-key", w->wit.key,  "--name", "witness.test/1",
      "--state", w->state,  "--textfile",    w->textfile, NULL};
  /* What it cosigned is readable when it returns: no wait here. */
  run(t, NULL, args, w->wenv, r);
  return r->exit_code;
}

static void write_vkeys(fx_case *t, world *w) {
  const char *const args[] = {"audit",  "witness",        "--witness-key", w->wit.key,
                              "--name", "witness.test/1", "--print-vkey",  NULL};
  th_result r;
  run(t, NULL, args, w->wenv, &r);
  assert_int_equal(r.exit_code, 0);
  FILE *f = fopen(w->vkeys, "w");
  assert_non_null(f);
  fputs(r.out, f);
  fclose(f);
}

/* audit prove of id into the bundle file name (with archive: --archive
 * it); its exit status, and what it said contains want. */
static int prove_with(fx_case *t, world *w, const char *id, const char *name, const char *archive,
                      const char *want) {
  char out[200];
  assert_true(th_fmt(out, sizeof out, "%s/%s", w->bundles, name));
  const char *const args[] = {
      "audit", "prove", "--request-id", id, "--output", out, archive != NULL ? "--archive" : NULL,
      archive, NULL};
  th_result r;
  run(t, NULL, args, w->env, &r);
  assert_non_null(strstr(r.err, want));
  return r.exit_code;
}

static void prove(fx_case *t, world *w, const char *id, const char *name, const char *want) {
  assert_int_equal(prove_with(t, w, id, name, NULL, want), 0);
}

/* Both verifiers on one bundle, offline (the writer's private key moved
 * away meanwhile, no broker URL); policy: the one witness. Returns the C
 * exit status after checking Python's is the same. */
static int verify_both(fx_case *t, world *w, const char *name, bool policy, th_result *r) {
  char file[200], py[600];
  assert_true(th_fmt(file, sizeof file, "%s/%s", w->bundles, name));
  const char *with[] = {"audit", "verify-proof", file, "--witness-keys", w->vkeys, NULL};
  const char *without[] = {"audit", "verify-proof", file, NULL};
  assert_int_equal(rename(w->a.key, w->away), 0);
  int rc = th_run_bridge(policy ? with : without, NULL, w->venv, 60000, r);
  assert_int_equal(rename(w->away, w->a.key), 0);
  assert_int_equal(rc, 0);
  (void)t;
  printf("verify-proof %s: exit %d\n%s%s", name, r->exit_code, r->out, r->err);
  const char *src = getenv("DLQB_SOURCE_DIR");
  assert_non_null(src);
  assert_true(th_fmt(
      py, sizeof py,
      "/usr/bin/python3 '%s/tests/evidence/verify_bundle.py' '%s' --keys '%s' %s%s%s", src, file,
      w->a.keys, policy ? "--witness-keys '" : "", policy ? w->vkeys : "", policy ? "'" : ""));
  int status = system(py);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), r->exit_code);
  return r->exit_code;
}

/* The witness's output "... (root X)": X, the tree it cosigned. */
static void cosigned_root(const th_result *r, char *root, size_t len) {
  const char *at = strstr(r->out, "(root ");
  assert_non_null(at);
  at += 6;
  const char *end = strchr(at, ')');
  assert_non_null(end);
  assert_true((size_t)(end - at) < len);
  memcpy(root, at, (size_t)(end - at));
  root[end - at] = '\0';
}

static void genuine_witnessed_trail(fx_case *t, world *w, char *root, size_t len) {
  write_hops(w);
  write_hops(w);
  checkpoint(t, w, "(the first of origin dlq-bridge/audit)");
  write_vkeys(t, w);
  th_result r;
  assert_int_equal(witness(t, w, &r), 0);
  assert_non_null(strstr(r.out, "1 checkpoint cosigned"));
  cosigned_root(&r, root, len);
  assert_int_equal(fx_count_in_file(w->textfile, "dlq_bridge_witness_refused 0"), 1);
}

static void test_bundle_verifies_offline_in_c_and_python(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w);
  char root[64];
  genuine_witnessed_trail(t, &w, root, sizeof root);
  /* The trail grows: a new checkpoint extends the last, and the witness
   * checks the consistency proof before it cosigns again. */
  write_hops(&w);
  checkpoint(t, &w, "(extends the last checkpoint of size 3004");
  th_result r;
  assert_int_equal(witness(t, &w, &r), 0);
  assert_non_null(strstr(r.out, "1 checkpoint cosigned; the last tree cosigned has 4506 lines"));
  /* DSR-5: one record per writer run, 3 of 4,500 hops. */
  prove(t, &w, "DSR-5", "good-dsr-5.json",
        "bundle of 3 records of DSR-5 against the checkpoint "
        "of 4506 lines");
  prove(t, &w, "DSR-6", "good-dsr-6.json", "bundle of 3 records");
  assert_int_equal(verify_both(t, &w, "good-dsr-5.json", true, &r), 0);
  assert_non_null(strstr(r.out, "evidence intact: 3 records of request DSR-5"));
  assert_non_null(strstr(r.out, "1 of the 1 given cosigned it"));
  /* Nothing of another request but hashes. */
  char file[200];
  assert_true(th_fmt(file, sizeof file, "%s/good-dsr-5.json", w.bundles));
  assert_int_equal(fx_count_in_file(file, "DSR-6"), 0);
  assert_int_equal(fx_count_in_file(file, "msg-1"), 0);
  /* Tampered copies: bytes changed, each record dropped, another
   * request's record swapped in, the cosignature removed: both refuse. */
  const char *src = getenv("DLQB_SOURCE_DIR"), *bin = getenv("DLQB_BRIDGE_BIN");
  char cmd[800];
  assert_true(th_fmt(cmd, sizeof cmd,
                     "/usr/bin/python3 '%s/tests/evidence/cross_check.py' '%s' none '%s'", src, bin,
                     w.bundles));
  assert_int_equal(rename(w.a.key, w.away), 0);
  int status = system(cmd);
  assert_int_equal(rename(w.away, w.a.key), 0);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  world_remove(&w);
}

static void test_witness_refuses_a_rewritten_log(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w);
  char root[64];
  genuine_witnessed_trail(t, &w, root, sizeof root);
  char state_before[512];
  FILE *f = fopen(w.state, "r");
  assert_non_null(f);
  size_t sn = fread(state_before, 1, sizeof state_before - 1, f);
  state_before[sn] = '\0';
  fclose(f);

  /* The insider rewrites history with the writer's key: every record
   * re-signed, as many lines as before. `audit verify` cannot tell. */
  assert_int_equal(unlink(w.a.log), 0);
  assert_int_equal(unlink(w.seal), 0);
  write_hops(&w);
  write_hops(&w);
  th_result r;
  assert_int_equal(fx_audit_verify(&w.a, &r), 0);
  assert_int_equal(r.exit_code, 0);
  /* The checkpointer does not sign a log that does not extend its last
   * checkpoint. */
  const char *const cp[] = {"audit", "checkpoint", NULL};
  run(t, NULL, cp, w.env, &r);
  assert_int_equal(r.exit_code, 1);
  assert_non_null(strstr(r.err, "the log was changed since"));
  /* So, with broker admin rights, they sign one elsewhere (a stream of
   * their own, where it is the first) and append it to dsr.audit.anchors. */
  th_vhost other;
  assert_int_equal(th_vhost_create(&other, "evidence-forge"), 0);
  const char *const declare[] = {"declare", NULL};
  run(t, other.url, declare, w.env, &r);
  assert_int_equal(r.exit_code, 0);
  const char *const print[] = {"audit", "checkpoint", "--print", NULL};
  run(t, other.url, print, w.env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(th_vhost_delete(&other), 0);
  th_msg *m = fx_msg(t);
  assert_int_equal(th_msg_set_body(m, r.out, strcspn(r.out, "\n")), 0);
  long before = th_queue_depth(t->conn, ANCHORS);
  assert_int_equal(th_publish(t->conn, "", ANCHORS, m), 0);
  assert_true(th_wait_depth(t->conn, ANCHORS, before + 1, WAIT_MS));

  /* The witness refuses, names the fork with both roots, raises its
   * gauge, keeps its state, and refuses again on the next run. */
  for (int round = 0; round < 2; round++) {
    assert_int_equal(witness(t, &w, &r), 1);
    assert_non_null(strstr(r.err, "witness_refused"));
    assert_non_null(strstr(r.err, "fork: checkpoint of size 3004 has root"));
    assert_non_null(strstr(r.err, root));
    assert_int_equal(fx_count_in_file(w.textfile, "dlq_bridge_witness_refused 1"), 1);
    char now[512];
    f = fopen(w.state, "r");
    assert_non_null(f);
    sn = fread(now, 1, sizeof now - 1, f);
    now[sn] = '\0';
    fclose(f);
    assert_string_equal(now, state_before);
  }
  /* A bundle cut from the rewritten log, against the forged checkpoint:
   * signed with the real key, so the log's key alone accepts it; a
   * one-witness policy does not. */
  prove(t, &w, "DSR-5", "forged-dsr-5.json", "bundle of 2 records");
  assert_int_equal(verify_both(t, &w, "forged-dsr-5.json", false, &r), 0);
  assert_non_null(strstr(r.out, "only the log's own key vouches"));
  assert_int_equal(verify_both(t, &w, "forged-dsr-5.json", true, &r), 1);
  assert_non_null(strstr(r.err, "cosigned by 0 of the 1 witness keys given, 1 needed"));

  /* Deleting the stream and starting it over does not help either. */
  char path[256];
  assert_true(th_fmt(path, sizeof path, "/api/queues/%s/%s", t->vhost.name, ANCHORS));
  assert_int_equal(th_mgmt("DELETE", path, NULL, NULL), 204);
  run(t, NULL, declare, w.env, &r);
  assert_int_equal(r.exit_code, 0);
  checkpoint(t, &w, "(the first of origin dlq-bridge/audit)");
  assert_int_equal(witness(t, &w, &r), 1);
  assert_non_null(strstr(r.err, "the stream was deleted and made again"));
  world_remove(&w);
}

/* Keeping 24 months verifiable: the oldest rotated files are archived
 * (`audit archive`) and deleted; checkpoints go on from the archive (a
 * witness that cosigned the tree before the deletion cosigns the one
 * after: it extends it), and a request whose records are all in the files
 * kept is proved from them alone, its bundle accepted offline in C and in
 * Python; one with a record in the deleted files is refused, as is an
 * archive changed after it was signed. */
static void test_prove_after_old_files_are_deleted(void **state) {
  fx_case *t = *state;
  world w;
  world_init(t, &w);
  write_hops_as(&w, 200000, 0);
  write_hops_as(&w, 200000, 0);
  checkpoint(t, &w, "(the first of origin dlq-bridge/audit)");
  write_vkeys(t, &w);
  th_result r;
  assert_int_equal(witness(t, &w, &r), 0);
  assert_non_null(strstr(r.out, "1 checkpoint cosigned"));
  /* The three oldest rotated files (names sort oldest first). */
  char pattern[200];
  assert_true(th_fmt(pattern, sizeof pattern, "%s.2*", w.a.log));
  glob_t g;
  assert_int_equal(glob(pattern, 0, NULL, &g), 0);
  printf("%zu rotated files\n", g.gl_pathc);
  assert_true(g.gl_pathc >= 5);
  char arch[200], edited[200];
  assert_true(th_fmt(arch, sizeof arch, "%s/archive-1.txt", w.a.dir));
  assert_true(th_fmt(edited, sizeof edited, "%s/archive-edited.txt", w.a.dir));
  const char *const archive[] = {"audit",       "archive",  g.gl_pathv[0], g.gl_pathv[1],
                                 g.gl_pathv[2], "--output", arch,          NULL};
  run(t, NULL, archive, w.env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "those files may now be deleted"));
  assert_int_equal(fx_count_in_file(arch, "DSR-"), 0); /* hashes and line numbers only */
  /* The live log is never archived. */
  const char *const live[] = {"audit", "archive", w.a.log, "--output", edited, NULL};
  run(t, NULL, live, w.env, &r);
  assert_int_equal(r.exit_code, 2);
  assert_non_null(strstr(r.err, "the live log"));
  for (size_t i = 0; i < 3; i++) assert_int_equal(unlink(g.gl_pathv[i]), 0);
  globfree(&g);

  /* Without the archive the files left are not the tree. */
  assert_int_equal(prove_with(&*t, &w, "DSR-5", "no-archive.json", NULL, "which was not given"), 1);
  /* A third writer run names requests of its own (DSR-5000 ..). */
  write_hops_as(&w, 200000, 5000);
  const char *const cp[] = {"audit", "checkpoint", "--archive", arch, NULL};
  run(t, NULL, cp, w.env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "(extends the last checkpoint of size 3011"));
  /* At once: what checkpoint published is readable when it returns. */
  assert_int_equal(witness(t, &w, &r), 0);
  assert_non_null(strstr(r.out, "1 checkpoint cosigned"));
  /* Nothing new since: said, exit 0 (as a timer runs it on an idle log). */
  run(t, NULL, cp, w.env, &r);
  assert_int_equal(r.exit_code, 0);
  assert_non_null(strstr(r.out, "nothing new since the last checkpoint of size 4517"));

  assert_int_equal(
      prove_with(t, &w, "DSR-5005", "after-archive.json", arch, "bundle of 1 record of DSR-5005"),
      0);
  assert_int_equal(verify_both(t, &w, "after-archive.json", true, &r), 0);
  assert_non_null(strstr(r.out, "evidence intact: 1 record of request DSR-5005"));
  assert_non_null(strstr(r.out, "1 of the 1 given cosigned it"));
  assert_int_equal(prove_with(t, &w, "DSR-5", "archived.json", arch, "in the archived files"), 1);
  /* One byte of the archive changed: refused before anything is read. */
  size_t len = 0;
  char *text = NULL;
  FILE *f = fopen(arch, "rb");
  assert_non_null(f);
  text = malloc(1 << 22);
  assert_non_null(text);
  len = fread(text, 1, (1 << 22) - 1, f);
  fclose(f);
  char *lines = strstr(text, "\nlines ");
  assert_non_null(lines);
  lines[7] = lines[7] == '9' ? '8' : (char)(lines[7] + 1);
  f = fopen(edited, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, len, f), len);
  fclose(f);
  free(text);
  assert_int_equal(prove_with(t, &w, "DSR-5005", "edited.json", edited, "does not match"), 1);
  world_remove(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      FX_TEST(test_bundle_verifies_offline_in_c_and_python),
      FX_TEST(test_witness_refuses_a_rewritten_log),
      FX_TEST(test_prove_after_old_files_are_deleted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

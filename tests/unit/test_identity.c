/* Unit tests for the identity a pipeline's profile gives an item: what the
 * item reader takes as its identity, the filters that select by it (--id,
 * --match, --request-id under another profile), the completion ledger's key
 * and each pipeline's own files (ledger cache, drain state and textfile). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "dlqb/config.h"
#include "dlqb/group.h"
#include "dlqb/item.h"
#include "dlqb/ledger.h"
#include "dlqb/pipeline.h"
#include "dlqb/select.h"

#define NOW_MS 1796000000000LL

typedef struct {
  amqp_basic_properties_t props;
  amqp_table_entry_t entries[16];
} msg;

static void msg_init(msg *m) {
  memset(m, 0, sizeof *m);
  m->props._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
  m->props.message_id = amqp_cstring_bytes("m-1");
  m->props.headers.entries = m->entries;
}

static void add_str(msg *m, const char *key, const char *value) {
  amqp_table_entry_t *e = &m->entries[m->props.headers.num_entries++];
  e->key = amqp_cstring_bytes(key);
  e->value.kind = AMQP_FIELD_KIND_UTF8;
  e->value.value.bytes = amqp_cstring_bytes(value);
}

static dlqb_profile profile(const char *name) {
  dlqb_profile p;
  assert_int_equal(dlqb_profile_builtin(name, &p, NULL), DLQB_OK);
  return p;
}

/* A redaction item: its identity is item_id and doc_id; it also carries a
 * request_id header (a producer may send anything), which is not its
 * identity. */
static void redaction_item(msg *m, const char *item, const char *doc) {
  msg_init(m);
  add_str(m, "item_id", item);
  add_str(m, "doc_id", doc);
  add_str(m, "request_id", "not-the-identity");
  add_str(m, "dlq_reason", "max_attempts");
}

static void test_item_reads_the_profile_identity(void **state) {
  (void)state;
  msg m;
  redaction_item(&m, "  item-9 ", "doc-9");
  dlqb_profile red = profile("redaction"), dsr = profile("dsr");
  dlqb_item it;
  dlqb_item_read_as(&m.props, &red, &it);
  assert_string_equal(it.request_id, "item-9"); /* trimmed as the envelope trims */
  assert_string_equal(it.source_system, "doc-9");
  /* Under dsr the same message is identified by request_id/source_system. */
  dlqb_item_read_as(&m.props, &dsr, &it);
  assert_string_equal(it.request_id, "not-the-identity");
  assert_string_equal(it.source_system, "");
  /* NULL is dsr's, as dlqb_item_read. */
  dlqb_item plain;
  dlqb_item_read(&m.props, &plain);
  assert_string_equal(plain.request_id, "not-the-identity");
  /* A hostile identity is sanitised: no control byte reaches a screen. */
  redaction_item(&m, "it\x1b[2Jem", "doc");
  dlqb_item_read_as(&m.props, &red, &it);
  assert_null(strchr(it.request_id, '\x1b'));
}

/* Failure groups split by the second identity field only where the
 * profile says so: reconciliation's category does, redaction's doc_id
 * (one per item) does not. */
static void test_groups_follow_the_profile(void **state) {
  (void)state;
  dlqb_profile red = profile("redaction"), rec = profile("reconciliation");
  msg m;
  dlqb_item a, b;
  char ga[DLQB_GROUP_ID_BUF], gb[DLQB_GROUP_ID_BUF];
  redaction_item(&m, "item-1", "doc-1");
  add_str(&m, "last_error", "render timeout after 30s");
  dlqb_item_read_as(&m.props, &red, &a);
  redaction_item(&m, "item-2", "doc-2");
  add_str(&m, "last_error", "render timeout after 31s");
  dlqb_item_read_as(&m.props, &red, &b);
  dlqb_group_of(&a, ga, NULL, 0);
  dlqb_group_of(&b, gb, NULL, 0);
  assert_string_equal(ga, gb); /* two documents, one failure */
  dlqb_groups *g = dlqb_groups_new(8);
  assert_non_null(g);
  dlqb_groups_add(g, &a, NOW_MS);
  dlqb_groups_add(g, &b, NOW_MS);
  assert_int_equal(dlqb_groups_count(g), 1);
  assert_string_equal(dlqb_groups_at(g, 0)->source_system, ""); /* no doc_id shown as a scope */
  dlqb_groups_free(g);

  msg_init(&m);
  add_str(&m, "discrepancy_id", "d-1");
  add_str(&m, "category", "amount_mismatch");
  add_str(&m, "dlq_reason", "max_attempts");
  dlqb_item_read_as(&m.props, &rec, &a);
  msg_init(&m);
  add_str(&m, "discrepancy_id", "d-2");
  add_str(&m, "category", "missing_row");
  add_str(&m, "dlq_reason", "max_attempts");
  dlqb_item_read_as(&m.props, &rec, &b);
  dlqb_group_of(&a, ga, NULL, 0);
  dlqb_group_of(&b, gb, NULL, 0);
  assert_string_not_equal(ga, gb); /* one group per category */
}

static void test_identity_read_keys_the_ledger(void **state) {
  (void)state;
  msg m;
  redaction_item(&m, "item-9", "doc-9");
  dlqb_profile red = profile("redaction"), rec = profile("reconciliation");
  char a[DLQB_ID_MAX + 1], b[DLQB_ID_MAX + 1];
  assert_true(dlqb_identity_read(&m.props.headers, &red, a, b, sizeof a));
  assert_string_equal(a, "item-9");
  assert_string_equal(b, "doc-9");
  /* Another profile's entry keys nothing: a reconciliation ledger holding
   * this message does not make any discrepancy complete. */
  assert_false(dlqb_identity_read(&m.props.headers, &rec, a, b, sizeof a));
  /* dsr: request_id alone is not an identity (no source_system). */
  assert_false(dlqb_identity_read(&m.props.headers, NULL, a, b, sizeof a));
  /* Blank counts as absent. */
  redaction_item(&m, "   ", "doc-9");
  assert_false(dlqb_identity_read(&m.props.headers, &red, a, b, sizeof a));

  /* The ledger keyed that way: the pair, and only the pair. */
  dlqb_ledger *l = dlqb_ledger_new();
  dlqb_error err;
  assert_int_equal(dlqb_ledger_add(l, "item-9", "doc-9", &err), DLQB_OK);
  assert_true(dlqb_ledger_contains(l, "item-9", "doc-9"));
  assert_false(dlqb_ledger_contains(l, "item-9", "doc-8"));
  assert_false(dlqb_ledger_contains(l, "item-9doc-9", ""));
  dlqb_ledger_free(l);
}

static dlqb_item read_red(const char *item, const char *doc) {
  msg m;
  redaction_item(&m, item, doc);
  dlqb_profile red = profile("redaction");
  dlqb_item it;
  dlqb_item_read_as(&m.props, &red, &it);
  return it;
}

static void test_select_by_id_and_match(void **state) {
  (void)state;
  dlqb_profile red = profile("redaction");
  dlqb_item a = read_red("item-1", "doc-1"), b = read_red("item-2", "doc-1"),
            c = read_red("item-1", "doc-2");
  dlqb_error err;
  dlqb_select s;

  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, "id", "item-1", &err), DLQB_OK);
  assert_int_equal(dlqb_select_bind(&s, &red, &err), DLQB_OK);
  assert_true(dlqb_select_given(&s));
  assert_true(dlqb_select_match(&s, &a, NOW_MS));
  assert_false(dlqb_select_match(&s, &b, NOW_MS));
  assert_true(dlqb_select_match(&s, &c, NOW_MS));

  /* --match names either identity field, by its name: doc_id is the second. */
  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, "match", "doc_id=doc-1", &err), DLQB_OK);
  assert_int_equal(dlqb_select_set(&s, "match", "item_id=item-1", &err), DLQB_OK);
  /* Before the bind a name that is not dsr's selects nothing, never everything. */
  assert_false(dlqb_select_match(&s, &a, NOW_MS));
  assert_int_equal(dlqb_select_bind(&s, &red, &err), DLQB_OK);
  assert_true(dlqb_select_match(&s, &a, NOW_MS));
  assert_false(dlqb_select_match(&s, &b, NOW_MS));
  assert_false(dlqb_select_match(&s, &c, NOW_MS));

  /* A value may hold '=': only the first one splits. */
  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, "match", "doc_id=a=b", &err), DLQB_OK);
  assert_int_equal(dlqb_select_bind(&s, &red, &err), DLQB_OK);
  dlqb_item eq = read_red("i", "a=b");
  assert_true(dlqb_select_match(&s, &eq, NOW_MS));
}

static void test_select_refuses_other_fields(void **state) {
  (void)state;
  dlqb_profile red = profile("redaction");
  dlqb_error err;
  dlqb_select s;
  dlqb_item a = read_red("item-1", "doc-1");

  /* --request-id is dsr's identity: refused under redaction, and the
   * selection then matches nothing. */
  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, "request-id", "item-1", &err), DLQB_OK);
  assert_int_equal(dlqb_select_bind(&s, &red, &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "--request-id: profile 'redaction' identifies a task by item_id "
                               "and doc_id, not request_id (use --id VALUE or --match "
                               "FIELD=VALUE)");
  assert_false(dlqb_select_match(&s, &a, NOW_MS));

  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, "match", "legal_basis=x", &err), DLQB_OK);
  assert_int_equal(dlqb_select_bind(&s, &red, &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "--match: 'legal_basis' is not an identity field of profile "
                               "'redaction' (item_id, doc_id)");

  /* Malformed --match values: exit 2 material, each naming the flag. */
  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, "match", "doc_id", &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "--match: 'doc_id' is not FIELD=VALUE");
  assert_int_equal(dlqb_select_set(&s, "match", "=x", &err), DLQB_EINVAL);
  assert_int_equal(dlqb_select_set(&s, "match", "doc_id=", &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "--match needs a non-empty value");
  assert_int_equal(dlqb_select_set(&s, "id", "", &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "--id needs a non-empty value");
  assert_false(dlqb_select_given(&s));
}

static void test_select_dsr_unchanged(void **state) {
  (void)state;
  dlqb_profile dsr = profile("dsr");
  msg m;
  msg_init(&m);
  add_str(&m, "request_id", "r-1");
  add_str(&m, "source_system", "crm");
  dlqb_item it;
  dlqb_item_read(&m.props, &it);
  dlqb_error err;
  dlqb_select s;
  /* Today's flags work without a bind, and after one. */
  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, "request-id", "r-1", &err), DLQB_OK);
  assert_int_equal(dlqb_select_set(&s, "source-system", "crm", &err), DLQB_OK);
  assert_true(dlqb_select_match(&s, &it, NOW_MS));
  assert_int_equal(dlqb_select_bind(&s, &dsr, &err), DLQB_OK);
  assert_true(dlqb_select_match(&s, &it, NOW_MS));
  /* The last one given for a field wins, as before. */
  assert_int_equal(dlqb_select_set(&s, "request-id", "r-2", &err), DLQB_OK);
  assert_false(dlqb_select_match(&s, &it, NOW_MS));
  /* --id and --match request_id= are the same filter under dsr. */
  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, "id", "r-1", &err), DLQB_OK);
  assert_true(dlqb_select_match(&s, &it, NOW_MS));
  dlqb_select_init(&s);
  assert_int_equal(dlqb_select_set(&s, "match", "source_system=erp", &err), DLQB_OK);
  assert_false(dlqb_select_match(&s, &it, NOW_MS));
  /* The old error texts. */
  assert_int_equal(dlqb_select_set(&s, "request-id", "", &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "--request-id needs a non-empty value");
  assert_true(dlqb_select_is_flag("id"));
  assert_true(dlqb_select_is_flag("match"));
}

static void test_files_per_pipeline(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_config_defaults(&c);
  dlqb_pipeline dsr, red;
  dlqb_pipeline_default_names(&dsr, "dsr");
  dsr.profile = profile("dsr");
  dlqb_pipeline_default_names(&red, "redaction");
  red.profile = profile("redaction");
  dlqb_error err;
  /* No cache configured: none for any pipeline. */
  assert_int_equal(dlqb_config_pipeline_paths(&c, &red, &err), DLQB_OK);
  assert_string_equal(c.ledger.cache, "");
  assert_string_equal(c.drain.textfile, "");
  snprintf(c.ledger.cache, sizeof c.ledger.cache, "/var/lib/dlq-bridge/ledger.cache");
  snprintf(c.drain.state, sizeof c.drain.state, "/var/lib/dlq-bridge/drain-state.json");
  snprintf(c.drain.textfile, sizeof c.drain.textfile, "/var/lib/node/drain.prom");
  snprintf(c.console.jobs_file, sizeof c.console.jobs_file,
           "/var/lib/dlq-bridge/console-jobs.json");
  snprintf(c.catalog.checkpoint, sizeof c.catalog.checkpoint, "/var/lib/dlq-bridge/catalog.ckpt");
  /* The default pipeline keeps today's files. */
  dlqb_config d = c;
  assert_int_equal(dlqb_config_pipeline_paths(&d, &dsr, &err), DLQB_OK);
  assert_string_equal(d.ledger.cache, "/var/lib/dlq-bridge/ledger.cache");
  assert_string_equal(d.drain.state, "/var/lib/dlq-bridge/drain-state.json");
  assert_string_equal(d.drain.textfile, "/var/lib/node/drain.prom");
  assert_string_equal(d.console.jobs_file, "/var/lib/dlq-bridge/console-jobs.json");
  assert_string_equal(d.catalog.checkpoint, "/var/lib/dlq-bridge/catalog.ckpt");
  /* Another: its name before the extension (node_exporter reads *.prom). */
  d = c;
  assert_int_equal(dlqb_config_pipeline_paths(&d, &red, &err), DLQB_OK);
  assert_string_equal(d.ledger.cache, "/var/lib/dlq-bridge/ledger.redaction.cache");
  assert_string_equal(d.drain.state, "/var/lib/dlq-bridge/drain-state.redaction.json");
  assert_string_equal(d.drain.textfile, "/var/lib/node/drain.redaction.prom");
  /* Two consoles, one per pipeline, keep their actions apart. */
  assert_string_equal(d.console.jobs_file, "/var/lib/dlq-bridge/console-jobs.redaction.json");
  /* Two pipelines' looks never fold from each other's checkpoint. */
  assert_string_equal(d.catalog.checkpoint, "/var/lib/dlq-bridge/catalog.redaction.ckpt");

  char out[64];
  assert_true(dlqb_pipeline_path("/a/ledger", "r", out, sizeof out));
  assert_string_equal(out, "/a/ledger.r");
  assert_true(dlqb_pipeline_path("/a.d/.cache", "r", out, sizeof out));
  assert_string_equal(out, "/a.d/.cache.r"); /* a dot in a directory is not an extension */
  assert_true(dlqb_pipeline_path("ledger.x.y", "r", out, sizeof out));
  assert_string_equal(out, "ledger.x.r.y");
  assert_false(dlqb_pipeline_path("/a/ledger.cache", "redaction", out, 12));

  /* Too long to name: refused, naming the setting, nothing changed. */
  memset(c.drain.state, 'a', sizeof c.drain.state - 5);
  c.drain.state[sizeof c.drain.state - 5] = '\0';
  d = c;
  assert_int_equal(dlqb_config_pipeline_paths(&d, &red, &err), DLQB_EINVAL);
  assert_memory_equal(&d, &c, sizeof d);
  assert_non_null(strstr(err.msg, "drain_state: the file of pipeline 'redaction'"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_item_reads_the_profile_identity),
      cmocka_unit_test(test_groups_follow_the_profile),
      cmocka_unit_test(test_identity_read_keys_the_ledger),
      cmocka_unit_test(test_select_by_id_and_match),
      cmocka_unit_test(test_select_refuses_other_fields),
      cmocka_unit_test(test_select_dsr_unchanged),
      cmocka_unit_test(test_files_per_pipeline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

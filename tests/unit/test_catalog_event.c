/* Unit tests of the catalog's "in" event (dlqb/catalog_stream.h): the item
 * a look reads from the event is the item a pass reads from the copy
 * itself, for plain and hostile headers alike (a decimal, tables and
 * arrays where strings belong, a forged x-death, long text), and the event
 * carries no value a stream's channel cannot take; whose events a reader
 * believes (catalog_writers); where a look keeps its checkpoint by
 * default. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/catalog_stream.h"
#include "dlqb/names.h"
#include "table_builder.h"

static dlqb_catalog_target target(void) {
  dlqb_pipeline p;
  memset(&p, 0, sizeof p);
  dlqb_pipeline_default_names(&p, DLQB_PIPELINE_DEFAULT);
  assert_int_equal(dlqb_profile_builtin(DLQB_PIPELINE_DEFAULT, &p.profile, NULL), DLQB_OK);
  dlqb_catalog_target t;
  dlqb_catalog_target_of(&p, &t);
  return t;
}

static void props_of(amqp_basic_properties_t *p, tb_table *h, const char *id) {
  memset(p, 0, sizeof *p);
  p->_flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
  p->headers = h->t;
  p->message_id = amqp_cstring_bytes(id);
  p->timestamp = 1700000000;
}

/* The event's view equals the copy's, field by field. */
static void same_view(const dlqb_catalog_target *t, const amqp_basic_properties_t *copy) {
  dlqb_catalog_event ev;
  dlqb_catalog_event_in(t, "dsr.dlq.manual", copy, &ev);
  dlqb_item *want = calloc(1, sizeof *want), *got = calloc(1, sizeof *got);
  assert_non_null(want);
  assert_non_null(got);
  dlqb_item_read_as(copy, &t->profile, want);
  dlqb_catalog_event_item(&ev.props, &t->profile, got);
  assert_memory_equal(want, got, sizeof *want);
  /* Nothing but plain scalars (a stream of 3.10.8 drops the channel of a
   * decimal; no table or array at all). */
  for (int i = 0; i < ev.props.headers.num_entries; i++) {
    uint8_t k = ev.props.headers.entries[i].value.kind;
    assert_true(k != AMQP_FIELD_KIND_DECIMAL && k != AMQP_FIELD_KIND_TABLE &&
                k != AMQP_FIELD_KIND_ARRAY && k != AMQP_FIELD_KIND_VOID);
  }
  free(want);
  free(got);
}

static void test_plain_item(void **state) {
  (void)state;
  dlqb_catalog_target t = target();
  tb_table h;
  tb_clear(&h);
  tb_add(&h, "request_id", tb_str("r-1"));
  tb_add(&h, "source_system", tb_str("billing"));
  tb_add(&h, "legal_basis", tb_str("gdpr_art_17"));
  tb_add(&h, "attempt", tb_i64(5));
  tb_add(&h, "last_error", tb_str("timeout after 30s"));
  tb_add(&h, "dlq_reason", tb_str("max_attempts"));
  tb_add(&h, "dlq_at", tb_str("2026-11-30T10:00:00.000Z"));
  tb_add(&h, "unrelated", tb_str("not kept"));
  /* x-death as the broker writes it. */
  amqp_field_value_t ts = tb_kind(AMQP_FIELD_KIND_TIMESTAMP);
  ts.value.u64 = 1700000000;
  amqp_table_entry_t d[4] = {tb_entry("queue", tb_str("dsr.work")),
                             tb_entry("reason", tb_str("rejected")), tb_entry("count", tb_i64(2)),
                             tb_entry("time", ts)};
  amqp_field_value_t deaths[1] = {tb_table_value(d, 4)};
  tb_add(&h, "x-death", tb_array(deaths, 1));
  amqp_basic_properties_t p;
  props_of(&p, &h, "m-1");
  same_view(&t, &p);
}

static void test_hostile_item(void **state) {
  (void)state;
  dlqb_catalog_target t = target();
  tb_table h;
  tb_clear(&h);
  amqp_field_value_t dec = tb_kind(AMQP_FIELD_KIND_DECIMAL);
  dec.value.decimal.decimals = 1;
  dec.value.decimal.value = 10;
  tb_add(&h, "attempt", dec);
  amqp_table_entry_t inner[1] = {tb_entry("x", tb_str("y"))};
  tb_add(&h, "request_id", tb_table_value(inner, 1));
  amqp_field_value_t items[2] = {tb_str("a"), tb_i64(1)};
  tb_add(&h, "source_system", tb_array(items, 2));
  tb_add(&h, "legal_basis", tb_kind(AMQP_FIELD_KIND_VOID));
  static char big[8192];
  memset(big, 'e', sizeof big - 1);
  tb_add(&h, "last_error", tb_str(big));
  /* A forged x-death: strings where tables belong. */
  amqp_field_value_t forged[2] = {tb_str("dsr.work"), dec};
  tb_add(&h, "x-death", tb_array(forged, 2));
  amqp_basic_properties_t p;
  props_of(&p, &h, "m-2");
  same_view(&t, &p);
}

/* A reader believes an event only from a listed writer, by its user_id;
 * with no list, every event. */
static void test_trusted_writers(void **state) {
  (void)state;
  dlqb_catalog_target t = target();
  amqp_basic_properties_t p;
  memset(&p, 0, sizeof p);
  assert_true(dlqb_catalog_trusts(&t, &p));
  snprintf(t.writers, sizeof t.writers, "dlq-bridge,dlq-operator");
  assert_false(dlqb_catalog_trusts(&t, &p)); /* no user_id */
  p._flags |= AMQP_BASIC_USER_ID_FLAG;
  p.user_id = amqp_cstring_bytes("dsr-worker");
  assert_false(dlqb_catalog_trusts(&t, &p));
  p.user_id = amqp_cstring_bytes("dlq-operator");
  assert_true(dlqb_catalog_trusts(&t, &p));
  p.user_id = amqp_cstring_bytes("dlq-operato"); /* a prefix is not the user */
  assert_false(dlqb_catalog_trusts(&t, &p));
  p.user_id = amqp_cstring_bytes("");
  assert_false(dlqb_catalog_trusts(&t, &p));
}

static void checkpoint_of(const char *setting, const char *url, char *out, size_t cap) {
  dlqb_config cfg;
  dlqb_config_defaults(&cfg);
  snprintf(cfg.catalog.checkpoint, sizeof cfg.catalog.checkpoint, "%s", setting);
  snprintf(cfg.broker.url, sizeof cfg.broker.url, "%s", url);
  dlqb_pipeline p;
  dlqb_config_pipeline(&cfg, 0, &p);
  dlqb_catalog_checkpoint_path(&cfg, &p, out, cap);
}

/* The default (auto) keeps the checkpoint in the user's state directory,
 * one file per broker and stream, named without the password; none and a
 * file mean what they say; a directory others may write to is not used. */
static void test_checkpoint_by_default(void **state) {
  (void)state;
  char base[] = "/tmp/dlqb-state-XXXXXX";
  assert_non_null(mkdtemp(base));
  unsetenv("STATE_DIRECTORY");
  setenv("XDG_STATE_HOME", base, 1);
  char a[1024], b[1024], c[1024], want[1100];
  checkpoint_of("auto", "amqp://alice:secret@rabbit:5672/prod", a, sizeof a);
  snprintf(want, sizeof want, "%s/dlq-bridge/catalog-dsr.catalog-", base);
  assert_int_equal(strncmp(a, want, strlen(want)), 0);
  assert_non_null(strstr(a, ".ckpt"));
  assert_null(strstr(a, "secret"));
  assert_null(strstr(a, "alice"));
  struct stat st;
  snprintf(want, sizeof want, "%s/dlq-bridge", base);
  assert_int_equal(stat(want, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  /* Another user of the same broker and vhost: the same file; another
   * vhost: another. */
  checkpoint_of("auto", "amqp://bob@rabbit:5672/prod", b, sizeof b);
  assert_string_equal(a, b);
  checkpoint_of("auto", "amqp://alice:secret@rabbit:5672/test", c, sizeof c);
  assert_string_not_equal(a, c);
  checkpoint_of("none", "amqp://rabbit/", b, sizeof b);
  assert_string_equal(b, "");
  checkpoint_of("", "amqp://rabbit/", b, sizeof b);
  assert_string_equal(b, "");
  checkpoint_of("/srv/look.ckpt", "amqp://rabbit/", b, sizeof b);
  assert_string_equal(b, "/srv/look.ckpt");
  /* systemd's StateDirectory= first. */
  snprintf(want, sizeof want, "%s/unit", base);
  assert_int_equal(mkdir(want, 0700), 0);
  setenv("STATE_DIRECTORY", want, 1);
  checkpoint_of("auto", "amqp://rabbit/", b, sizeof b);
  assert_int_equal(strncmp(b, want, strlen(want)), 0);
  /* Writable by others: not used (a planted checkpoint would be believed). */
  assert_int_equal(chmod(want, 0777), 0);
  checkpoint_of("auto", "amqp://rabbit/", b, sizeof b);
  assert_string_equal(b, "");
  unsetenv("STATE_DIRECTORY");
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain_item),
      cmocka_unit_test(test_hostile_item),
      cmocka_unit_test(test_trusted_writers),
      cmocka_unit_test(test_checkpoint_by_default),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

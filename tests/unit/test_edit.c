/* Unit tests of an edit's rules (dlqb/edit.h): the bridge's own headers
 * and the SLA clock are refused by name, the edited table is validated
 * under the profile, the record shows hostile values as text, and a
 * references-only profile records hashes of the headers outside it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlqb/edit.h"
#include "dlqb/names.h"
#include "table_builder.h"

static dlqb_profile profile(const char *name) {
  dlqb_profile p;
  dlqb_error err;
  assert_int_equal(dlqb_profile_builtin(name, &p, &err), DLQB_OK);
  return p;
}

static void refused(const char *arg, bool unset, const char *needle) {
  dlqb_profile p = profile("dsr");
  dlqb_edit_request r = {0};
  dlqb_error err;
  assert_int_equal(dlqb_edit_add(&r, &p, arg, unset, &err), DLQB_EINVAL);
  if (strstr(err.msg, needle) == NULL) fail_msg("'%s' lacks '%s'", err.msg, needle);
  assert_int_equal(r.n, 0);
}

static void test_bridge_headers_are_not_editable(void **state) {
  (void)state;
  refused("attempt=0", false, "attempt is the bridge's own: not editable");
  refused("replay_count", true, "replay_count is the bridge's own");
  refused("dlq_at=2026-01-01T00:00:00Z", false, "dlq_at is the bridge's own");
  refused("last_error", true, "last_error is the bridge's own");
  refused("x-death", true, "x-death is the broker's own");
  refused("edit_id=e-1", false, "edit_id is the bridge's own");
  refused("owner=mallory", false, "owner is the bridge's own");
  refused("first_seen_at=2026-01-01T00:00:00Z", false, "first_seen_at is the bridge's own");
  refused("legal_basis", false, "needs FIELD=VALUE");
  refused("=x", false, "field name is empty");
  refused("bad name=x", false, "may hold only letters");
}

static void test_sla_clock_and_limits(void **state) {
  (void)state;
  dlqb_profile p = profile("dsr");
  snprintf(p.sla_clock, sizeof p.sla_clock, "received_at");
  dlqb_edit_request r = {0};
  dlqb_error err;
  assert_int_equal(dlqb_edit_add(&r, &p, "received_at=2026-01-01T00:00:00Z", false, &err),
                   DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "starts the SLA clock"));
  assert_int_equal(dlqb_edit_add(&r, &p, "legal_basis=gdpr_art_17", false, &err), DLQB_OK);
  assert_int_equal(dlqb_edit_add(&r, &p, "legal_basis", true, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "legal_basis is changed twice"));
  char long_value[DLQB_EDIT_VALUE_MAX + 16] = "note=";
  memset(long_value + 5, 'a', DLQB_EDIT_VALUE_MAX + 1);
  assert_int_equal(dlqb_edit_add(&r, &p, long_value, false, &err), DLQB_EINVAL);
  char name[16];
  for (int i = 1; i < DLQB_EDIT_MAX_CHANGES; i++) {
    snprintf(name, sizeof name, "h%d=v", i);
    assert_int_equal(dlqb_edit_add(&r, &p, name, false, &err), DLQB_OK);
  }
  assert_int_equal(dlqb_edit_add(&r, &p, "one_more=v", false, &err), DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "at most"));
}

/* An invalid envelope (the bridge dead-lettered it) as headers. */
static void invalid_task(tb_table *t) {
  static amqp_table_entry_t e[6];
  e[0] = tb_entry("request_id", tb_str("R-1"));
  e[1] = tb_entry("source_system", tb_str("crm"));
  e[2] = tb_entry("legal_basis", tb_str("gdpr_17"));
  e[3] = tb_entry("action", tb_str("deletion"));
  e[4] = tb_entry("attempt", tb_i64(0));
  e[5] = tb_entry("dlq_reason", tb_str("invalid_envelope"));
  memcpy(t->e, e, sizeof e);
  t->t = (amqp_table_t){6, t->e};
}

static void test_validation_and_record(void **state) {
  (void)state;
  dlqb_profile p = profile("dsr");
  tb_table t;
  invalid_task(&t);
  amqp_table_entry_t scratch[32];
  dlqb_hset sets[16];
  dlqb_error why;
  /* Still invalid: the reason is the profile's. */
  dlqb_edit_request r = {0};
  assert_int_equal(dlqb_edit_add(&r, &p, "legal_basis=gdpr_18", false, &why), DLQB_OK);
  size_t n = dlqb_edit_sets(&r, sets);
  assert_int_equal(dlqb_edit_validate(&t.t, sets, n, &p, 5, scratch, 32, &why), DLQB_EINVAL);
  assert_non_null(strstr(why.msg, "legal_basis 'gdpr_18' is not one of"));
  /* Fixed: valid, and the record says what changed. */
  dlqb_edit_request ok = {0};
  assert_int_equal(dlqb_edit_add(&ok, &p, "legal_basis=gdpr_art_17", false, &why), DLQB_OK);
  assert_int_equal(dlqb_edit_add(&ok, &p, "ticket=T\x1b[31m-9", false, &why), DLQB_OK);
  assert_int_equal(dlqb_edit_add(&ok, &p, "action", true, &why), DLQB_OK);
  n = dlqb_edit_sets(&ok, sets);
  /* action removed: invalid again (action is required) */
  assert_int_equal(dlqb_edit_validate(&t.t, sets, n, &p, 5, scratch, 32, &why), DLQB_EINVAL);
  assert_int_equal(dlqb_edit_validate(&t.t, sets, 2, &p, 5, scratch, 32, &why), DLQB_OK);
  dlqb_hop_edit e;
  memset(&e, 0, sizeof e);
  dlqb_edit_diff(&ok, &t.t, &p, &e);
  assert_int_equal(e.nfields, 3);
  assert_string_equal(e.fields[0].field, "legal_basis");
  assert_true(e.fields[0].had_old && e.fields[0].has_new && !e.fields[0].hashed);
  assert_string_equal(e.fields[0].old_value, "gdpr_17");
  assert_string_equal(e.fields[0].new_value, "gdpr_art_17");
  assert_false(e.fields[1].had_old);
  assert_string_equal(e.fields[1].new_value, "T?[31m-9"); /* the escape byte is text now */
  assert_true(e.fields[2].had_old && !e.fields[2].has_new);
  assert_string_equal(e.fields[2].old_value, "deletion");
  /* The stamp names the edit and its parent. */
  dlqb_hset st[DLQB_EDIT_STAMP_SETS];
  assert_int_equal(dlqb_edit_stamp(st, "e-1", "", "alice", "2026-12-01T00:00:00Z"),
                   DLQB_EDIT_STAMP_SETS);
  assert_string_equal(st[0].key, DLQB_H_EDIT_ID);
  assert_int_equal(st[1].kind, DLQB_HSET_REMOVE);
  dlqb_edit_stamp(st, "e-2", "e-1", "alice", "2026-12-01T00:00:00Z");
  assert_string_equal(st[1].str, "e-1");
}

static void test_references_only_profile_records_hashes(void **state) {
  (void)state;
  dlqb_profile p = profile("redaction");
  tb_table t;
  amqp_table_entry_t e0[2] = {tb_entry("item_id", tb_str("I-1")),
                              tb_entry("comment", tb_str("name of a person"))};
  memcpy(t.e, e0, sizeof e0);
  t.t = (amqp_table_t){2, t.e};
  dlqb_edit_request r = {0};
  dlqb_error err;
  assert_int_equal(dlqb_edit_add(&r, &p, "doc_id=D-7", false, &err), DLQB_OK);
  assert_int_equal(dlqb_edit_add(&r, &p, "comment=another person", false, &err), DLQB_OK);
  dlqb_hop_edit e;
  memset(&e, 0, sizeof e);
  dlqb_edit_diff(&r, &t.t, &p, &e);
  assert_false(e.fields[0].hashed); /* a profile field: a reference, recorded */
  assert_string_equal(e.fields[0].new_value, "D-7");
  assert_true(e.fields[1].hashed);
  assert_int_equal(strlen(e.fields[1].old_value), 64);
  assert_null(strstr(e.fields[1].old_value, "person"));
  assert_string_not_equal(e.fields[1].old_value, e.fields[1].new_value);
}

static void test_body_hashes_and_id(void **state) {
  (void)state;
  dlqb_hop_edit e;
  memset(&e, 0, sizeof e);
  dlqb_edit_body(&e, (amqp_bytes_t){3, "abc"}, (amqp_bytes_t){0, NULL});
  assert_int_equal(e.body_size_before, 3);
  assert_string_equal(e.body_sha256_before,
                      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  assert_int_equal(e.body_size_after, 0);
  assert_string_equal(e.body_sha256_after,
                      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  uint8_t rnd[16] = {0xde, 0xad};
  char id[DLQB_EDIT_ID_MAX];
  dlqb_edit_id(rnd, id);
  assert_string_equal(id, "e-dead0000000000000000000000000000");
}

/* A proposal survives its trip through a header, and a forged one that
 * would edit the bridge's own fields is refused on the way back. */
static void test_proposal_round_trip(void **state) {
  (void)state;
  dlqb_profile p = profile("dsr");
  dlqb_edit_request r = {0}, back;
  dlqb_error err;
  assert_int_equal(dlqb_edit_add(&r, &p, "legal_basis=gdpr_art_17", false, &err), DLQB_OK);
  assert_int_equal(dlqb_edit_add(&r, &p, "ticket=\"quoted\" \\ \x1b", false, &err), DLQB_OK);
  assert_int_equal(dlqb_edit_add(&r, &p, "action", true, &err), DLQB_OK);
  char json[2048], note[64];
  assert_int_equal(dlqb_edit_proposal_encode(&r, "typo", true, json, sizeof json, &err), DLQB_OK);
  assert_null(strchr(json, '\x1b')); /* escaped in the header */
  bool keep = false;
  assert_int_equal(
      dlqb_edit_proposal_decode(json, strlen(json), &p, &back, note, sizeof note, &keep, &err),
      DLQB_OK);
  assert_true(keep);
  assert_string_equal(note, "typo");
  assert_int_equal(back.n, 3);
  assert_string_equal(back.changes[0].value, "gdpr_art_17");
  assert_string_equal(back.changes[1].value, "\"quoted\" \\ \x1b");
  assert_true(back.changes[2].unset);
  assert_int_equal(dlqb_edit_proposal_encode(&r, "typo", true, json, 16, &err), DLQB_EINVAL);
  static const char forged[] =
      "{\"set\":{\"attempt\":\"0\"},\"unset\":[],\"note\":\"x\",\"keep\":false}";
  assert_int_equal(
      dlqb_edit_proposal_decode(forged, strlen(forged), &p, &back, note, sizeof note, &keep, &err),
      DLQB_EINVAL);
  assert_non_null(strstr(err.msg, "attempt is the bridge's own"));
  static const char junk[] = "{\"set\":[]}";
  assert_int_equal(
      dlqb_edit_proposal_decode(junk, strlen(junk), &p, &back, note, sizeof note, &keep, &err),
      DLQB_EINVAL);
  dlqb_hset st[DLQB_EDIT_PROPOSAL_SETS];
  dlqb_edit_proposal_stamp(st, NULL, NULL, NULL, NULL);
  for (size_t i = 0; i < DLQB_EDIT_PROPOSAL_SETS; i++)
    assert_int_equal(st[i].kind, DLQB_HSET_REMOVE);
  refused("edit_proposal_id=e-1", false, "edit_proposal_id is the bridge's own");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bridge_headers_are_not_editable),
      cmocka_unit_test(test_sla_clock_and_limits),
      cmocka_unit_test(test_validation_and_record),
      cmocka_unit_test(test_references_only_profile_records_hashes),
      cmocka_unit_test(test_body_hashes_and_id),
      cmocka_unit_test(test_proposal_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

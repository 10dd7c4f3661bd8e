/* Unit tests of movers' intents: what dlqb_hop_intent keeps of a hop (and
 * leaves out, so that nothing counts it as a move), and which moves
 * ops_open_moves_read finds begun and not ended in a trail. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "dlqb/hop.h"
#include "dlqb/ops.h"

static void test_intent_of_a_hop(void **state) {
  (void)state;
  dlqb_hop hop;
  memset(&hop, 0, sizeof hop);
  hop.event = DLQB_EV_ESCALATED;
  snprintf(hop.message_id, sizeof hop.message_id, "msg-1");
  snprintf(hop.request_id, sizeof hop.request_id, "R-1");
  snprintf(hop.source_system, sizeof hop.source_system, "crm");
  snprintf(hop.from, sizeof hop.from, "dsr.dlq.manual");
  snprintf(hop.to, sizeof hop.to, "compliance_review");
  snprintf(hop.reason, sizeof hop.reason, "subject disputes the scope");
  snprintf(hop.cause, sizeof hop.cause, "operator");
  snprintf(hop.actor, sizeof hop.actor, "olga");
  snprintf(hop.deaths, sizeof hop.deaths, "dsr.work rejected 2");
  hop.has_delivery_count = true;
  hop.attempt = 5;
  dlqb_hop in;
  dlqb_hop_intent(&in, &hop);
  assert_int_equal(in.event, DLQB_EV_MOVE_STARTED);
  assert_int_equal(in.intent_for, DLQB_EV_ESCALATED);
  assert_string_equal(dlqb_event_name(in.event), "move_started");
  assert_string_equal(in.message_id, "msg-1");
  assert_string_equal(in.request_id, "R-1");
  assert_string_equal(in.source_system, "crm");
  assert_string_equal(in.actor, "olga");
  assert_int_equal(in.attempt, 5);
  assert_string_equal(in.reason, "dsr.dlq.manual -> compliance_review");
  /* Nothing that would make it a move, or a second record of the
   * message's history. */
  assert_string_equal(in.from, "");
  assert_string_equal(in.to, "");
  assert_string_equal(in.cause, "");
  assert_string_equal(in.deaths, "");
  assert_false(in.has_delivery_count);
  assert_null(in.edit);
}

/* The chain the next lines are written in (a writer's process). */
static const char *chain = "c1";

/* A record line as the writer lays it out (the members the reader uses). */
static void line(FILE *f, const char *event, const char *id, const char *from, const char *to,
                 const char *reason, const char *for_) {
  fprintf(
      f,
      "{\"v\":2,\"chain\":\"%s\",\"seq\":1,\"prev\":\"00\",\"time\":\"2026-12-04T10:00:00.000Z\","
      "\"event\":\"%s\",\"writer\":\"replay@h:1\",\"key\":\"k\",\"message_id\":\"%s\","
      "\"request_id\":\"R\",\"reason\":\"%s\",\"cause\":\"\",\"from\":\"%s\",\"to\":\"%s\","
      "\"actor\":\"kim\"%s%s%s}\n",
      chain, event, id, reason, from, to, for_ ? ",\"for\":\"" : "", for_ ? for_ : "",
      for_ ? "\"" : "");
}

static void intent(FILE *f, const char *id, const char *route, const char *for_) {
  line(f, "move_started", id, "", "", route, for_);
}

static void test_open_moves_in_a_trail(void **state) {
  (void)state;
  char dir[] = "/tmp/dlqb-intents-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%s/audit.log", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  const char *dlq = "dsr.dlq.manual", *work = "dsr.work", *review = "compliance_review";
  /* a: began and ended by its own hop */
  intent(f, "a", "dsr.dlq.manual -> dsr.work", "replayed");
  line(f, "replayed", "a", dlq, work, "fixed", NULL);
  /* b: began, no end */
  intent(f, "b", "dsr.dlq.manual -> compliance_review", "escalated");
  /* c: out of another queue */
  intent(f, "c", "compliance_review -> dsr.work", "decided_replay");
  /* d: an id with an escape, ended */
  intent(f, "d\\\"x", "dsr.dlq.manual -> dsr.work", "replayed");
  line(f, "replayed", "d\\\"x", dlq, work, "fixed", NULL);
  /* e: a later hop of it out of another queue does not end it */
  intent(f, "e", "dsr.dlq.manual -> dsr.work", "replayed");
  line(f, "decided_replay", "e", review, work, "", NULL);
  /* f: skipped as complete later: ended */
  intent(f, "f", "dsr.dlq.manual -> dsr.work", "replayed");
  line(f, "skipped_complete", "f", dlq, "", "already in the completion ledger", NULL);
  /* g: a hop before its intent (an earlier move) does not end the later one */
  line(f, "replayed", "g", dlq, work, "fixed", NULL);
  intent(f, "g", "dsr.dlq.manual -> dsr.work", "replayed");
  /* h: a queue whose name begins like the DLQ's is another queue */
  intent(f, "h", "dsr.dlq.manual.old -> dsr.work", "replayed");
  /* i: abandoned (its copy never sent): ended */
  intent(f, "i", "dsr.dlq.manual -> compliance_review", "escalated");
  line(f, "move_abandoned", "i", "", "", "dsr.dlq.manual -> compliance_review", "escalated");
  /* j: an abandoned move out of a queue named like the DLQ does not end it */
  intent(f, "j", "dsr.dlq.manual -> dsr.work", "replayed");
  line(f, "move_abandoned", "j", "", "", "dsr.dlq.manual.old -> dsr.work", "replayed");
  /* k: an abandonment before the intent (an earlier run's) does not end it */
  line(f, "move_abandoned", "k", "", "", "dsr.dlq.manual -> dsr.work", "replayed");
  intent(f, "k", "dsr.dlq.manual -> dsr.work", "replayed");
  /* Its writer closed its pass: the moves it ended (a, d, f) hold nothing. */
  line(f, "chain_end", "", "", "", "", NULL);
  /* l: ended by a hop of a chain that never ended (killed between the
   * record and the ack): held as ended, its original may be back */
  chain = "c2";
  intent(f, "l", "dsr.dlq.manual -> compliance_review", "escalated");
  line(f, "escalated", "l", dlq, review, "dlq_sla", NULL);
  /* n: the same, then brought back into the DLQ (the router's hop): not held */
  intent(f, "n", "dsr.dlq.manual -> dsr.work", "replayed");
  line(f, "replayed", "n", dlq, work, "fixed", NULL);
  chain = "c3";
  line(f, "dead_lettered", "n", "dsr.failed", dlq, "attempts exhausted", NULL);
  /* p: the same, and its chain ended later: not held */
  chain = "c4";
  intent(f, "p", "dsr.dlq.manual -> dsr.work", "replayed");
  line(f, "replayed", "p", dlq, work, "fixed", NULL);
  line(f, "chain_end", "", "", "", "", NULL);
  /* q: a kept edit (out of the DLQ and into it) leaves what is there now */
  chain = "c5";
  intent(f, "q", "dsr.dlq.manual -> dsr.dlq.manual", "edited");
  line(f, "edited", "q", dlq, dlq, "kept", NULL);
  chain = "c1";
  assert_int_equal(fclose(f), 0);

  ops_open_moves *m = NULL;
  dlqb_error err;
  assert_int_equal(ops_open_moves_read(path, dlq, &m, &err), DLQB_OK);
  assert_non_null(m);
  assert_int_equal(ops_open_moves_count(m), 6);
  assert_null(ops_open_moves_find(m, "a"));
  const ops_open_move *b = ops_open_moves_find(m, "b");
  assert_non_null(b);
  assert_false(b->ended);
  const ops_open_move *el = ops_open_moves_find(m, "l");
  assert_non_null(el);
  assert_true(el->ended);
  assert_string_equal(el->to, "compliance_review");
  assert_string_equal(el->event, "escalated");
  assert_null(ops_open_moves_find(m, "n"));
  assert_null(ops_open_moves_find(m, "p"));
  assert_null(ops_open_moves_find(m, "q"));
  assert_string_equal(b->to, "compliance_review");
  assert_string_equal(b->event, "escalated");
  assert_string_equal(b->writer, "replay@h:1");
  assert_string_equal(b->time, "2026-12-04T10:00:00.000Z");
  assert_null(ops_open_moves_find(m, "c"));
  assert_null(ops_open_moves_find(m, "d\"x"));
  assert_non_null(ops_open_moves_find(m, "e"));
  assert_null(ops_open_moves_find(m, "f"));
  assert_non_null(ops_open_moves_find(m, "g"));
  assert_null(ops_open_moves_find(m, "h"));
  assert_null(ops_open_moves_find(m, "i"));
  assert_non_null(ops_open_moves_find(m, "j"));
  assert_non_null(ops_open_moves_find(m, "k"));
  ops_open_moves_free(m);

  /* Out of compliance_review: only c. */
  assert_int_equal(ops_open_moves_read(path, review, &m, &err), DLQB_OK);
  assert_int_equal(ops_open_moves_count(m), 1);
  assert_non_null(ops_open_moves_find(m, "c"));
  ops_open_moves_free(m);

  /* None out of a queue nothing left. */
  assert_int_equal(ops_open_moves_read(path, work, &m, &err), DLQB_OK);
  assert_null(m);
  assert_int_equal(ops_open_moves_count(m), 0);
  assert_null(ops_open_moves_find(m, "b"));

  /* No trail yet, or none configured: nothing began. */
  char none[80];
  snprintf(none, sizeof none, "%s/missing.log", dir);
  assert_int_equal(ops_open_moves_read(none, dlq, &m, &err), DLQB_OK);
  assert_null(m);
  assert_int_equal(ops_open_moves_read("", dlq, &m, &err), DLQB_OK);
  assert_null(m);
  /* A log that is no regular file (a device reads zeros for ever): read
   * as telling nothing, never hanging. */
  char dev[80];
  snprintf(dev, sizeof dev, "%s/dev.log", dir);
  assert_int_equal(symlink("/dev/zero", dev), 0);
  assert_int_equal(ops_open_moves_read(dev, dlq, &m, &err), DLQB_OK);
  assert_null(m);
  assert_int_equal(unlink(dev), 0);
  /* A queue name that could not be a record's member. */
  assert_int_equal(ops_open_moves_read(path, "dsr\"x", &m, &err), DLQB_EINVAL);
  assert_null(m);

  assert_int_equal(unlink(path), 0);
  assert_int_equal(rmdir(dir), 0);
}

static json_object *rec(const char *time, const char *event, const char *from, const char *reason) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "time", json_object_new_string(time));
  json_object_object_add(o, "event", json_object_new_string(event));
  json_object_object_add(o, "message_id", json_object_new_string("m"));
  json_object_object_add(o, "from", json_object_new_string(from));
  json_object_object_add(o, "reason", json_object_new_string(reason));
  return o;
}

static bool ended(json_object *o) {
  json_object *v;
  assert_true(json_object_object_get_ex(o, OPS_HOP_MOVE_ENDED, &v));
  return json_object_get_boolean(v);
}

/* What audit show marks DID NOT END: an intent with no later hop out of
 * its queue and no later abandonment of a move out of it. */
static void test_audit_show_marks_ended_moves(void **state) {
  (void)state;
  const char *route = "dsr.dlq.manual -> dsr.work";
  json_object *h[6] = {
      rec("2026-12-04T10:00:01Z", "move_started", "", route),
      rec("2026-12-04T10:00:02Z", "move_abandoned", "", route),
      rec("2026-12-04T10:00:03Z", "move_started", "", route),
      rec("2026-12-04T10:00:04Z", "move_abandoned", "", "dsr.dlq.manual.old -> dsr.work"),
      rec("2026-12-04T10:00:05Z", "decided_replay", "compliance_review", ""),
      rec("2026-12-04T10:00:00Z", "move_started", "", route),
  };
  ops_hops_sort(h, 6);
  /* sorted by time: the last one given is first, ended by the first abandonment */
  assert_string_equal(json_object_get_string(json_object_object_get(h[0], "time")),
                      "2026-12-04T10:00:00Z");
  assert_true(ended(h[0]));
  assert_true(ended(h[1]));
  assert_false(ended(h[3])); /* only another queue's abandonment and hop after it */
  char text[1024];
  assert_non_null(strstr(ops_hop_text(h[2], text, sizeof text), "ended, no copy sent"));
  assert_non_null(strstr(ops_hop_text(h[3], text, sizeof text), "DID NOT END"));
  assert_null(strstr(ops_hop_text(h[1], text, sizeof text), "DID NOT END"));
  for (int i = 0; i < 6; i++) json_object_put(h[i]);
}

/* One record of chain in_chain for ops_hops_collect, as the trail has it. */
static void collect(ops_hops *c, const char *in_chain, const char *time, const char *event,
                    const char *from, const char *to, const char *reason) {
  char line[512];
  int n = snprintf(line, sizeof line,
                   "{\"v\":2,\"chain\":\"%s\",\"time\":\"%s\",\"event\":\"%s\",\"message_id\":"
                   "\"m\",\"request_id\":\"R\",\"from\":\"%s\",\"to\":\"%s\",\"reason\":\"%s\"}",
                   in_chain, time, event, from, to, reason);
  assert_true(n > 0 && (size_t)n < sizeof line);
  assert_true(ops_hops_collect(c, line, (size_t)n));
}

/* What audit show says of a move whose run did not end (a mover killed
 * between the record and its ack): its copy counts if the original is
 * back. A run that ended (chain_end), before or after, says nothing. */
static void test_audit_show_marks_moves_of_runs_that_did_not_end(void **state) {
  (void)state;
  dlqb_pipeline p;
  memset(&p, 0, sizeof p);
  dlqb_pipeline_default_names(&p, DLQB_PIPELINE_DEFAULT);
  dlqb_error err;
  assert_int_equal(dlqb_profile_builtin("dsr", &p.profile, &err), DLQB_OK);
  const char *route = "dsr.dlq.manual -> dsr.work";
  ops_hops c = {.message_id = "m", .pipeline = &p};
  /* killed: its intent and hop, no chain_end */
  collect(&c, "c1", "2026-12-04T10:00:01Z", "move_started", "", "", route);
  collect(&c, "c1", "2026-12-04T10:00:02Z", "replayed", "dsr.dlq.manual", "dsr.work", "fixed");
  /* came back, replayed again by a run that ended */
  collect(&c, "c2", "2026-12-04T10:00:03Z", "dead_lettered", "dsr.failed", "dsr.dlq.manual", "x");
  collect(&c, "c3", "2026-12-04T10:00:04Z", "move_started", "", "", route);
  collect(&c, "c3", "2026-12-04T10:00:05Z", "replayed", "dsr.dlq.manual", "dsr.work", "fixed");
  collect(&c, "c3", "2026-12-04T10:00:06Z", "chain_end", "", "", "");
  ops_hops_order(&c);
  char text[1024];
  size_t marked = 0;
  for (size_t i = 0; i < c.n; i++) {
    json_object *v;
    if (!json_object_object_get_ex(c.hops[i], OPS_HOP_RUN_ENDED, &v)) continue;
    marked++;
    assert_false(json_object_get_boolean(v));
    assert_string_equal(dlqb_audit_record_str(c.hops[i], "chain"), "c1");
    assert_non_null(strstr(ops_hop_text(c.hops[i], text, sizeof text),
                           "ITS RUN DID NOT END: if the original is back in dsr.dlq.manual, this "
                           "copy counts"));
  }
  assert_int_equal(marked, 1);
  ops_hops_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_intent_of_a_hop),
      cmocka_unit_test(test_open_moves_in_a_trail),
      cmocka_unit_test(test_audit_show_marks_ended_moves),
      cmocka_unit_test(test_audit_show_marks_moves_of_runs_that_did_not_end),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

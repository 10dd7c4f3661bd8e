/* Pipelines as data: the built-in profiles, the default pipeline (today's
 * names and policy), the config file's `pipelines` with every error, the
 * --pipeline choice, and the envelope under each profile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlqb/config.h"
#include "dlqb/envelope.h"
#include "dlqb/names.h"
#include "dlqb/pipeline.h"
#include "dlqb/topology.h"
#include "dlqb/route.h"
#include "dlqb/metrics.h"
#include "table_builder.h"

static dlqb_status apply(dlqb_config *c, const char *text, dlqb_error *err) {
  dlqb_config_defaults(c);
  return dlqb_config_apply_json(c, text, strlen(text), err);
}

static void json_ok(dlqb_config *c, const char *text) {
  dlqb_error err = {0};
  dlqb_status st = apply(c, text, &err);
  if (st != DLQB_OK) fail_msg("refused %s: %s", text, err.msg);
}

/* The exact one-line error a config text gets, and the config unchanged. */
static void json_bad(const char *text, const char *want) {
  dlqb_config c;
  dlqb_error err = {0};
  dlqb_config_defaults(&c);
  assert_int_equal(dlqb_config_apply_json(&c, text, strlen(text), &err), DLQB_EINVAL);
  assert_string_equal(err.msg, want);
  assert_null(strchr(err.msg, '\n'));
  assert_int_equal(c.pipeline_count, 0);
}

static void test_builtin_profiles(void **state) {
  (void)state;
  dlqb_profile p;
  dlqb_error err;
  assert_int_equal(dlqb_profile_builtin("dsr", &p, &err), DLQB_OK);
  assert_int_equal(p.nfields, 4);
  assert_string_equal(p.fields[0].name, "request_id");
  assert_string_equal(p.fields[1].name, "source_system");
  assert_string_equal(p.fields[2].values, "gdpr_art_15,gdpr_art_17,ccpa_1798_105,ccpa_1798_100");
  assert_string_equal(p.fields[3].values, "access,deletion,rectification");
  assert_string_equal(p.sla_clock, "first_seen_at");
  assert_false(p.dlq_body_forbidden);
  assert_true(p.group_by_second); /* groups by source_system, as before */

  assert_int_equal(dlqb_profile_builtin("redaction", &p, &err), DLQB_OK);
  assert_string_equal(p.fields[0].name, "item_id");
  assert_string_equal(p.fields[1].name, "doc_id");
  assert_int_equal(p.nfields, 2);
  assert_true(p.dlq_body_forbidden);
  assert_false(p.group_by_second); /* a doc_id per item: not a group */

  assert_int_equal(dlqb_profile_builtin("reconciliation", &p, &err), DLQB_OK);
  assert_string_equal(p.fields[0].name, "discrepancy_id");
  assert_string_equal(p.fields[1].name, "category");
  assert_false(p.dlq_body_forbidden);
  assert_true(p.group_by_second);

  assert_int_equal(dlqb_profile_builtin("DSR", &p, &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "no built-in profile of that name (the built-in ones: dsr, "
                               "redaction, reconciliation)");
}

/* No `pipelines`: one pipeline, today's constants, the top-level policy. */
static void test_default_pipeline_is_today(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_pipeline p;
  json_ok(&c, "{\"max_attempts\": 7, \"retry_delays\": \"2s,9s\", \"dlq_sla\": \"3h\"}");
  assert_int_equal(dlqb_config_pipeline_count(&c), 1);
  dlqb_config_pipeline(&c, 0, &p);
  assert_string_equal(p.name, "dsr");
  assert_string_equal(p.work, DLQB_Q_WORK);
  assert_string_equal(p.failed, DLQB_Q_FAILED);
  assert_string_equal(p.dlx, DLQB_X_DLX);
  assert_string_equal(p.dlq, DLQB_Q_DLQ);
  assert_string_equal(p.review, DLQB_Q_REVIEW);
  assert_string_equal(p.completed, DLQB_Q_COMPLETED);
  assert_string_equal(p.retry_prefix, DLQB_RETRY_PREFIX);
  assert_string_equal(p.profile.name, "dsr");
  assert_int_equal(p.policy.max_attempts, 7);
  assert_int_equal(p.policy.retry_delay_count, 2);
  assert_int_equal(p.policy.retry_delays_ms[1], 9000);
  assert_int_equal(p.policy.dlq_sla_ms, 3 * 3600 * 1000);
  assert_int_equal(p.policy.max_replays, c.policy.max_replays);
  assert_int_equal(p.policy.prefetch, c.policy.prefetch);
  /* use_pipeline on a copy gives back the same config. */
  dlqb_config copy = c;
  dlqb_config_use_pipeline(&copy, &p);
  assert_memory_equal(&copy, &c, sizeof c);
}

static const char three[] =
    "{\"max_attempts\": 4, \"pipelines\": {"
    "  \"dsr\": {},"
    "  \"redaction\": {\"max_attempts\": 3, \"dlq_sla\": \"4h\","
    "                  \"queues\": {\"review\": \"senior_review\"}},"
    "  \"recon\": {\"profile\": \"reconciliation\", \"retry_delays\": [\"1s\", \"10s\"],"
    "            \"edit_approval\": 0}"
    "}, \"max_replays\": 9}";

static void test_three_pipelines(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_pipeline p;
  json_ok(&c, three);
  assert_int_equal(dlqb_config_pipeline_count(&c), 3);

  dlqb_config_pipeline(&c, 0, &p);
  assert_string_equal(p.name, "dsr");
  assert_string_equal(p.work, "dsr.work");
  assert_string_equal(p.review, "compliance_review");
  assert_string_equal(p.profile.name, "dsr");
  assert_int_equal(p.policy.max_attempts, 4);  /* the top level */
  assert_int_equal(p.policy.edit_approval, 1); /* the default: four eyes */

  dlqb_config_pipeline(&c, 1, &p);
  assert_string_equal(p.name, "redaction");
  assert_string_equal(p.profile.name, "redaction"); /* by the pipeline's name */
  assert_string_equal(p.work, "redaction.work");
  assert_string_equal(p.failed, "redaction.failed");
  assert_string_equal(p.dlx, "redaction.dlx");
  assert_string_equal(p.dlq, "redaction.dlq.manual");
  assert_string_equal(p.review, "senior_review");
  assert_string_equal(p.completed, "redaction.completed");
  assert_string_equal(p.retry_prefix, "redaction.retry.");
  assert_int_equal(p.policy.max_attempts, 3);
  assert_int_equal(p.policy.dlq_sla_ms, 4 * 3600 * 1000);
  /* Set after `pipelines` in the file: still the default of every pipeline. */
  assert_int_equal(p.policy.max_replays, 9);

  dlqb_config_pipeline(&c, 2, &p);
  assert_string_equal(p.name, "recon");
  assert_string_equal(p.profile.name, "reconciliation");
  assert_int_equal(p.policy.edit_approval, 0); /* its own */
  assert_string_equal(p.work, "recon.work");
  assert_int_equal(p.policy.retry_delay_count, 2);
  assert_int_equal(p.policy.retry_delays_ms[1], 10000);
  assert_int_equal(p.policy.max_attempts, 4);

  /* A later source (environment, flag) of a top-level setting reaches the
   * pipelines that did not set it, not those that did. */
  dlqb_error err;
  assert_int_equal(dlqb_config_set(&c, "max_attempts", "6", "--max-attempts", &err), DLQB_OK);
  dlqb_config_pipeline(&c, 0, &p);
  assert_int_equal(p.policy.max_attempts, 6);
  dlqb_config_pipeline(&c, 1, &p);
  assert_int_equal(p.policy.max_attempts, 3);
  /* The command line names the setting for every pipeline. */
  dlqb_config_pipelines_override(&c, "max_attempts");
  dlqb_config_pipelines_override(&c, "url"); /* not a policy key: nothing */
  dlqb_config_pipeline(&c, 1, &p);
  assert_int_equal(p.policy.max_attempts, 6);
  assert_int_equal(p.policy.dlq_sla_ms, 4 * 3600 * 1000);
}

static void test_custom_profile(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_pipeline p;
  json_ok(&c, "{\"pipelines\": {\"billing\": {\"profile\": {"
              "\"identity\": [\"invoice_id\", \"account\"],"
              "\"fields\": {\"kind\": {\"values\": [\"refund\", \"charge\"]},"
              "             \"note\": {\"required\": false},"
              "             \"received_at\": {}},"
              "\"sla_clock\": \"received_at\", \"dlq_body\": \"forbidden\"}}}}");
  dlqb_config_pipeline(&c, 0, &p);
  assert_string_equal(p.name, "billing");
  assert_string_equal(p.profile.name, "billing");
  assert_int_equal(p.profile.nfields, 5);
  assert_string_equal(p.profile.fields[0].name, "invoice_id");
  assert_string_equal(p.profile.fields[1].name, "account");
  assert_string_equal(p.profile.fields[2].values, "refund,charge");
  assert_true(p.profile.fields[2].required);
  assert_false(p.profile.fields[3].required);
  assert_string_equal(p.profile.sla_clock, "received_at");
  assert_true(p.profile.dlq_body_forbidden);
  assert_true(p.profile.group_by_second); /* by default, as dsr */
  json_ok(&c, "{\"pipelines\": {\"billing\": {\"profile\": {"
              "\"identity\": [\"invoice_id\", \"account\"], \"group_by\": false}}}}");
  dlqb_config_pipeline(&c, 0, &p);
  assert_false(p.profile.group_by_second);
  json_ok(&c, "{\"pipelines\": {\"billing\": {\"profile\": {"
              "\"identity\": [\"invoice_id\", \"account\"], \"group_by\": \"account\"}}}}");
  dlqb_config_pipeline(&c, 0, &p);
  assert_true(p.profile.group_by_second);
  json_bad("{\"pipelines\": {\"billing\": {\"profile\": {"
           "\"identity\": [\"invoice_id\", \"account\"], \"group_by\": \"invoice_id\"}}}}",
           "key 'pipelines.billing.profile.group_by': 'invoice_id' is not the second identity "
           "header 'account' (name it, or false to group by reason and error alone)");
}

static void test_pipeline_errors(void **state) {
  (void)state;
  json_bad("{\"pipelines\": []}",
           "key 'pipelines': expected an object of named pipelines, got an array");
  json_bad("{\"pipelines\": {}}", "key 'pipelines': expected 1 to 8 pipelines, got 0");
  json_bad("{\"pipelines\": {\"a1\":{\"profile\":\"dsr\"},\"a2\":{\"profile\":\"dsr\"},"
           "\"a3\":{\"profile\":\"dsr\"},\"a4\":{\"profile\":\"dsr\"},\"a5\":{\"profile\":\"dsr\"},"
           "\"a6\":{\"profile\":\"dsr\"},\"a7\":{\"profile\":\"dsr\"},\"a8\":{\"profile\":\"dsr\"},"
           "\"a9\":{\"profile\":\"dsr\"}}}",
           "key 'pipelines': expected 1 to 8 pipelines, got 9");
  json_bad("{\"pipelines\": {\"Bad\": {}}}",
           "key 'pipelines': pipeline name 'Bad' must be 1 to 31 bytes of a-z, 0-9, '_' and '-', "
           "starting with a letter");
  json_bad("{\"pipelines\": {\"dsr\": 1}}",
           "key 'pipelines.dsr': expected an object, got an integer");
  json_bad("{\"pipelines\": {\"orders\": {}}}",
           "key 'pipelines.orders.profile' is missing: name a built-in profile (dsr, redaction, "
           "reconciliation) or define one");
  json_bad("{\"pipelines\": {\"x\": {\"profile\": \"gdpr\"}}}",
           "key 'pipelines.x.profile': 'gdpr': no built-in profile of that name (the built-in "
           "ones: dsr, redaction, reconciliation)");
  json_bad("{\"pipelines\": {\"x\": {\"profile\": 3}}}",
           "key 'pipelines.x.profile': expected a string, got an integer");
  json_bad("{\"pipelines\": {\"dsr\": {\"user\": \"bridge\"}}}",
           "key 'pipelines.dsr': unknown key 'user' (the keys: profile, queues, url, "
           "password_file, max_attempts, poison_threshold, retry_delays, retry_jitter, "
           "sla_budget, prefetch, dlq_sla, max_replays, edit_approval)");
  /* A pipeline's own broker user: the top-level url rules. */
  json_bad("{\"pipelines\": {\"dsr\": {\"url\": \"http://h/\"}}}",
           "key 'pipelines.dsr.url': 'http://h/' does not start with amqp:// or amqps://");
  json_bad("{\"pipelines\": {\"dsr\": {\"password_file\": \"\"}}}",
           "key 'pipelines.dsr.password_file': empty (leave it out to use the top-level "
           "password_file)");
  /* Policy values: the top-level rules, named by the pipeline's key. */
  json_bad("{\"pipelines\": {\"dsr\": {\"max_attempts\": 0}}}",
           "key 'pipelines.dsr.max_attempts': '0' is not an integer from 1 to 1000");
  json_bad("{\"pipelines\": {\"dsr\": {\"prefetch\": true}}}",
           "key 'pipelines.dsr.prefetch': expected an integer or a string, got a boolean");
  /* Queues. */
  json_bad("{\"pipelines\": {\"dsr\": {\"queues\": {\"inbox\": \"a\"}}}}",
           "key 'pipelines.dsr.queues': unknown key 'inbox' (the keys: work, failed, dlx, dlq, "
           "review, completed, catalog, retry_prefix)");
  json_bad("{\"pipelines\": {\"dsr\": {\"queues\": {\"work\": \"amq.work\"}}}}",
           "key 'pipelines.dsr.queues.work': names starting with 'amq.' belong to the broker");
  json_bad("{\"pipelines\": {\"dsr\": {\"queues\": {\"work\": \"a b\"}}}}",
           "key 'pipelines.dsr.queues.work': the name may hold only letters, digits and . _ - : "
           "(byte 2 is not one)");
  json_bad("{\"pipelines\": {\"dsr\": {\"queues\": {\"dlq\": \"\"}}}}",
           "key 'pipelines.dsr.queues.dlq': the name is empty");
  json_bad("{\"pipelines\": {\"dsr\": {\"queues\": {\"dlq\": \"dsr.audit.anchors\"}}}}",
           "key 'pipelines.dsr.queues.dlq': 'dsr.audit.anchors' is the audit anchors stream, "
           "shared by all pipelines");
  json_bad("{\"pipelines\": {\"dsr\": {\"queues\": {\"retry_prefix\": "
           "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}}}",
           "key 'pipelines.dsr.queues.retry_prefix': the name is longer than 47 bytes");
  json_bad("{\"pipelines\": {\"dsr\": {\"queues\": {\"work\": 5}}}}",
           "key 'pipelines.dsr.queues.work': expected a string, got an integer");
  /* Two pipelines may not share a queue. */
  json_bad("{\"pipelines\": {\"dsr\": {}, \"redaction\": {\"queues\": {\"review\": "
           "\"compliance_review\"}}}}",
           "key 'pipelines': 'compliance_review' is used twice (pipelines dsr and redaction)");
  json_bad("{\"pipelines\": {\"dsr\": {\"queues\": {\"dlq\": \"dsr.work\"}}}}",
           "key 'pipelines': 'dsr.work' is used twice (pipelines dsr and dsr)");
  json_bad("{\"pipelines\": {\"dsr\": {}, \"redaction\": {\"queues\": {\"work\": "
           "\"dsr.retry.x\"}}}}",
           "key 'pipelines': 'dsr.retry.x' (pipeline redaction) starts with the retry prefix "
           "'dsr.retry.' of dsr");
  json_bad("{\"pipelines\": {\"dsr\": {}, \"redaction\": {\"queues\": {\"retry_prefix\": "
           "\"dsr.retry.r.\"}}}}",
           "key 'pipelines': the retry prefixes of pipelines dsr and redaction overlap");
}

static void test_profile_errors(void **state) {
  (void)state;
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {}}}}",
           "key 'pipelines.b.profile.identity' is missing: name the two headers that identify "
           "a task");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\"]}}}}",
           "key 'pipelines.b.profile.identity': expected an array of the two headers that "
           "identify a task, got another length");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": \"a\"}}}}",
           "key 'pipelines.b.profile.identity': expected an array of the two headers that "
           "identify a task, got a string");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", 1]}}}}",
           "key 'pipelines.b.profile.identity': expected a string, got an integer");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"a\"]}}}}",
           "key 'pipelines.b.profile.identity': header 'a' is named twice");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"attempt\"]}}}}",
           "key 'pipelines.b.profile.identity': header name 'attempt' is one the bridge itself "
           "writes");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"x-death\"]}}}}",
           "key 'pipelines.b.profile.identity': header name 'x-death': x- headers belong to the "
           "broker");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b c\"]}}}}",
           "key 'pipelines.b.profile.identity': header name 'b c' may hold only letters, digits, "
           "'_' and '-'");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"\"]}}}}",
           "key 'pipelines.b.profile.identity': a header name is empty");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], \"kind\": 1}}}}",
           "key 'pipelines.b.profile': unknown key 'kind' (the keys: identity, fields, sla_clock, "
           "dlq_body, group_by)");
  json_bad(
      "{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], \"fields\": []}}}}",
      "key 'pipelines.b.profile.fields': expected an object, got an array");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], "
           "\"fields\": {\"k\": true}}}}}",
           "key 'pipelines.b.profile.fields.k': expected an object, got a boolean");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], "
           "\"fields\": {\"k\": {\"required\": \"yes\"}}}}}}",
           "key 'pipelines.b.profile.fields.k.required': expected true or false, got a string");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], "
           "\"fields\": {\"k\": {\"enum\": []}}}}}}",
           "key 'pipelines.b.profile.fields.k': unknown key 'enum' (the keys: required, values)");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], "
           "\"fields\": {\"k\": {\"values\": []}}}}}}",
           "key 'pipelines.b.profile.fields.k.values': expected a non-empty array of strings, got "
           "an empty one");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], "
           "\"fields\": {\"k\": {\"values\": [\"x,y\"]}}}}}}",
           "key 'pipelines.b.profile.fields.k.values': value 1 must be 1 to 63 printable ASCII "
           "bytes without spaces or commas");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], "
           "\"fields\": {\"k\": {\"values\": [\"x\", \"x\"]}}}}}}",
           "key 'pipelines.b.profile.fields.k.values': value 'x' is listed twice");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], "
           "\"fields\": {\"a\": {}}}}}}",
           "key 'pipelines.b.profile.fields.a': header 'a' is named twice");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], "
           "\"fields\": {\"c\": {}, \"d\": {}, \"e\": {}, \"f\": {}, \"g\": {}, \"h\": {}, "
           "\"i\": {}}}}}}",
           "key 'pipelines.b.profile.fields.i': a profile has at most 8 fields");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], "
           "\"sla_clock\": \"due\"}}}}",
           "key 'pipelines.b.profile.sla_clock': 'due' is neither first_seen_at nor a field of "
           "the profile (besides the identity)");
  json_bad("{\"pipelines\": {\"b\": {\"profile\": {\"identity\": [\"a\", \"b\"], "
           "\"dlq_body\": \"dropped\"}}}}",
           "key 'pipelines.b.profile.dlq_body': expected 'kept' or 'forbidden'");
}

/* Each pipeline's bridge may run as its own broker user: url and
 * password_file per pipeline, the top-level ones by default. */
static void test_pipeline_user(void **state) {
  (void)state;
  dlqb_config c;
  json_ok(&c, "{\"url\": \"amqp://top@h/\", \"password_file\": \"/run/top\",\n"
              " \"pipelines\": {\"dsr\": {},\n"
              "  \"redaction\": {\"url\": \"amqp://red@h/\", \"password_file\": \"/run/red\"},\n"
              "  \"reconciliation\": {\"url\": \"amqps://rec@h/\"}}}");
  assert_int_equal(c.pipeline_count, 3);
  dlqb_config one = c;
  dlqb_config_use_pipeline_user(&one, 0);
  assert_string_equal(one.broker.url, "amqp://top@h/");
  assert_string_equal(one.broker.password_file, "/run/top");
  one = c;
  dlqb_config_use_pipeline_user(&one, 1);
  assert_string_equal(one.broker.url, "amqp://red@h/");
  assert_string_equal(one.broker.password_file, "/run/red");
  one = c;
  dlqb_config_use_pipeline_user(&one, 2);
  assert_string_equal(one.broker.url, "amqps://rec@h/");
  assert_string_equal(one.broker.password_file, "/run/top");
  /* No pipelines, or out of range: nothing changes. */
  dlqb_config_use_pipeline_user(&one, 7);
  assert_string_equal(one.broker.url, "amqps://rec@h/");
  /* TLS files with a pipeline that is not amqps:// is the top-level error. */
  dlqb_error err = {0};
  c.broker.url[0] = '\0';
  snprintf(c.broker.url, sizeof c.broker.url, "amqps://top@h/");
  snprintf(c.broker.tls_ca_file, sizeof c.broker.tls_ca_file, "/ca.pem");
  assert_int_equal(dlqb_config_validate(&c, &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "tls files are set but pipelines.redaction.url is not amqps://");
}

static void test_is_default(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_pipeline p;
  json_ok(&c, "{}");
  dlqb_config_pipeline(&c, 0, &p);
  assert_true(dlqb_pipeline_is_default(&p));
  json_ok(&c, "{\"pipelines\": {\"dsr\": {\"max_attempts\": 2}}}");
  dlqb_config_pipeline(&c, 0, &p);
  assert_true(dlqb_pipeline_is_default(&p)); /* policy is not a name */
  json_ok(&c, "{\"pipelines\": {\"dsr\": {\"queues\": {\"dlq\": \"dsr.dlq\"}}}}");
  dlqb_config_pipeline(&c, 0, &p);
  assert_false(dlqb_pipeline_is_default(&p));
  json_ok(&c, "{\"pipelines\": {\"dsr\": {\"profile\": \"redaction\"}}}");
  dlqb_config_pipeline(&c, 0, &p);
  assert_false(dlqb_pipeline_is_default(&p));
  json_ok(&c, "{\"pipelines\": {\"redaction\": {}}}");
  dlqb_config_pipeline(&c, 0, &p);
  assert_false(dlqb_pipeline_is_default(&p));
}

static void test_choose(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_error err;
  size_t i = 99;
  json_ok(&c, "{}");
  assert_int_equal(dlqb_config_pipeline_choose(&c, NULL, &i, &err), DLQB_OK);
  assert_int_equal(i, 0);
  assert_int_equal(dlqb_config_pipeline_choose(&c, "dsr", &i, &err), DLQB_OK);
  assert_int_equal(dlqb_config_pipeline_choose(&c, "redaction", &i, &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "--pipeline: no pipeline 'redaction' (configured: dsr)");

  json_ok(&c, three);
  assert_int_equal(dlqb_config_pipeline_choose(&c, NULL, &i, &err), DLQB_EINVAL);
  assert_string_equal(err.msg, "several pipelines are configured (dsr, redaction, recon): "
                               "choose one with --pipeline");
  assert_int_equal(dlqb_config_pipeline_choose(&c, "recon", &i, &err), DLQB_OK);
  assert_int_equal(i, 2);
  /* What a command serving one keeps: that one alone, first. */
  dlqb_config_pipeline_only(&c, i);
  assert_int_equal(dlqb_config_pipeline_count(&c), 1);
  dlqb_pipeline p;
  dlqb_config_pipeline(&c, 0, &p);
  assert_string_equal(p.name, "recon");
  assert_int_equal(dlqb_config_pipeline_choose(&c, NULL, &i, &err), DLQB_OK);
  assert_int_equal(i, 0);
}

/* ---- the envelope under each profile ---------------------------------- */

static dlqb_status parse_as(const char *profile, tb_table *h, dlqb_envelope *e, dlqb_error *why) {
  dlqb_profile p;
  assert_int_equal(dlqb_profile_builtin(profile, &p, NULL), DLQB_OK);
  return dlqb_envelope_parse_profile(&h->t, &p, 5, e, why);
}

static void test_envelope_redaction(void **state) {
  (void)state;
  tb_table h;
  dlqb_envelope e;
  dlqb_error why;
  tb_clear(&h);
  tb_add(&h, "item_id", tb_str(" item-9 "));
  tb_add(&h, "doc_id", tb_str("doc-9"));
  tb_add(&h, "attempt", tb_i64(2));
  assert_int_equal(parse_as("redaction", &h, &e, &why), DLQB_OK);
  assert_string_equal(e.request_id, "item-9");
  assert_string_equal(e.source_system, "doc-9");
  assert_string_equal(e.legal_basis, "");
  assert_int_equal(e.attempt, 2);
  /* A DSR task is not a redaction task, and the other way round. */
  assert_int_equal(parse_as("dsr", &h, &e, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, "request_id is missing");
  tb_clear(&h);
  tb_add(&h, "item_id", tb_str("item-9"));
  assert_int_equal(parse_as("redaction", &h, &e, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, "doc_id is missing");
  tb_add(&h, "doc_id", tb_str("doc\x01"));
  assert_int_equal(parse_as("redaction", &h, &e, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, "doc_id contains a control character");
}

static void test_envelope_reconciliation(void **state) {
  (void)state;
  tb_table h;
  dlqb_envelope e;
  dlqb_error why;
  tb_clear(&h);
  tb_add(&h, "discrepancy_id", tb_str("d-17"));
  tb_add(&h, "category", tb_str("amount_mismatch"));
  tb_add(&h, "category", tb_str("other"));
  assert_int_equal(parse_as("reconciliation", &h, &e, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, "duplicate header 'category'");
  tb_clear(&h);
  tb_add(&h, "discrepancy_id", tb_str("d-17"));
  tb_add(&h, "category", tb_str("amount_mismatch"));
  tb_add(&h, "first_seen_at", tb_str("2026-11-30T05:09:48Z"));
  assert_int_equal(parse_as("reconciliation", &h, &e, &why), DLQB_OK);
  assert_string_equal(e.request_id, "d-17");
  assert_string_equal(e.source_system, "amount_mismatch");
  assert_true(e.has_sla_start);
  assert_int_equal(e.sla_start_ms, e.first_seen_at_ms);
}

static void test_envelope_custom_profile(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_pipeline p;
  json_ok(&c, "{\"pipelines\": {\"billing\": {\"profile\": {"
              "\"identity\": [\"invoice_id\", \"account\"],"
              "\"fields\": {\"kind\": {\"values\": [\"refund\", \"charge\"]},"
              "             \"note\": {\"required\": false},"
              "             \"received_at\": {}},"
              "\"sla_clock\": \"received_at\"}}}}");
  dlqb_config_pipeline(&c, 0, &p);
  tb_table h;
  dlqb_envelope e;
  dlqb_error why;
  tb_clear(&h);
  tb_add(&h, "invoice_id", tb_str("inv-1"));
  tb_add(&h, "account", tb_str("acct-1"));
  tb_add(&h, "kind", tb_str("gift"));
  assert_int_equal(dlqb_envelope_parse_profile(&h.t, &p.profile, 5, &e, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, "kind 'gift' is not one of refund, charge");
  tb_clear(&h);
  tb_add(&h, "invoice_id", tb_str("inv-1"));
  tb_add(&h, "account", tb_str("acct-1"));
  tb_add(&h, "kind", tb_str("refund"));
  assert_int_equal(dlqb_envelope_parse_profile(&h.t, &p.profile, 5, &e, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, "received_at is missing"); /* note is optional */
  tb_add(&h, "received_at", tb_str("yesterday"));
  assert_int_equal(dlqb_envelope_parse_profile(&h.t, &p.profile, 5, &e, &why), DLQB_EINVAL);
  assert_string_equal(why.msg, "received_at 'yesterday' is not an ISO-8601 UTC time");
  tb_clear(&h);
  tb_add(&h, "invoice_id", tb_str("inv-1"));
  tb_add(&h, "account", tb_str("acct-1"));
  tb_add(&h, "kind", tb_str("refund"));
  tb_add(&h, "received_at", tb_str("2026-11-01T00:00:00Z"));
  tb_add(&h, "first_seen_at", tb_str("2026-11-30T00:00:00Z"));
  assert_int_equal(dlqb_envelope_parse_profile(&h.t, &p.profile, 5, &e, &why), DLQB_OK);
  assert_true(e.has_sla_start);
  assert_true(e.sla_start_ms < e.first_seen_at_ms); /* the clock is received_at's */
  assert_string_equal(e.request_id, "inv-1");
}

static const dlqb_queue_spec *find_queue(const dlqb_topology *t, const char *name) {
  for (size_t i = 0; i < t->nqueues; i++)
    if (strcmp(t->queues[i].name, name) == 0) return &t->queues[i];
  return NULL;
}

static int64_t int_arg(const dlqb_queue_spec *q, const char *key) {
  for (size_t i = 0; i < q->nargs; i++)
    if (strcmp(q->args[i].key, key) == 0) return q->args[i].num;
  return -1;
}

static const char *str_arg(const dlqb_queue_spec *q, const char *key) {
  for (size_t i = 0; i < q->nargs; i++)
    if (strcmp(q->args[i].key, key) == 0) return q->args[i].str;
  return "";
}

static void test_topology_default_is_today(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_topology t;
  json_ok(&c, "{}");
  dlqb_topology_build(&c, &t);
  const char *want[] = {"dsr.work",      "dsr.failed",   "dsr.retry.1s",     "dsr.retry.5s",
                        "dsr.retry.30s", "dsr.retry.2m", "dsr.dlq.manual",   "compliance_review",
                        "dsr.completed", "dsr.catalog",  "dsr.audit.anchors"};
  assert_int_equal(t.nqueues, sizeof want / sizeof want[0]);
  for (size_t i = 0; i < t.nqueues; i++) assert_string_equal(t.queues[i].name, want[i]);
  assert_int_equal(t.nexchanges, 1);
  assert_string_equal(t.exchanges[0], "dsr.dlx");
  assert_string_equal(t.queues[1].bind_exchange, "dsr.dlx");
  assert_string_equal(t.queues[0].bind_exchange, "");
}

static void test_topology_three(void **state) {
  (void)state;
  dlqb_config c;
  static dlqb_topology t;
  json_ok(
      &c,
      "{\"poison_threshold\": 3, \"dlq_queue_type\": \"quorum\", \"pipelines\": {\"dsr\": {}, "
      "\"redaction\": {\"poison_threshold\": 5, \"retry_delays\": \"5s,1m,1m\"}, "
      "\"recon\": {\"profile\": \"reconciliation\", \"queues\": {\"dlq\": \"recon.parked\"}}}}");
  dlqb_topology_build(&c, &t);
  assert_int_equal(t.nqueues, 11 + 9 + 11 + 1); /* dsr, redaction (1m once), recon, anchors */
  assert_int_equal(t.nexchanges, 3);
  assert_string_equal(t.exchanges[1], "redaction.dlx");
  const dlqb_queue_spec *q = find_queue(&t, "redaction.work");
  assert_non_null(q);
  assert_string_equal(str_arg(q, "x-dead-letter-exchange"), "redaction.dlx");
  assert_int_equal(int_arg(q, "x-delivery-limit"), 4);
  assert_int_equal(int_arg(find_queue(&t, "dsr.work"), "x-delivery-limit"), 2);
  q = find_queue(&t, "redaction.retry.1m");
  assert_non_null(q);
  assert_string_equal(str_arg(q, "x-dead-letter-routing-key"), "redaction.work");
  assert_null(find_queue(&t, "redaction.retry.1s"));
  q = find_queue(&t, "recon.failed");
  assert_string_equal(q->bind_exchange, "recon.dlx");
  assert_string_equal(str_arg(q, "x-dead-letter-routing-key"), "recon.parked");
  assert_non_null(find_queue(&t, "recon.parked"));
  assert_non_null(find_queue(&t, "recon.review"));
  /* Each pipeline's safety queue follows its DLQ's name, and both its DLQ
   * and its review queue dead-letter into it. */
  assert_non_null(find_queue(&t, "recon.parked.dropped"));
  assert_string_equal(str_arg(find_queue(&t, "recon.review"), "x-dead-letter-routing-key"),
                      "recon.parked.dropped");
  assert_string_equal(str_arg(find_queue(&t, "redaction.dlq.manual"), "x-dead-letter-routing-key"),
                      "redaction.dlq.manual.dropped");
  assert_string_equal(t.queues[t.nqueues - 1].name, "dsr.audit.anchors");
  /* The definitions carry every exchange and binding. */
  char *json = NULL;
  dlqb_error err;
  assert_int_equal(dlqb_topology_definitions(&t, "/", &json, &err), DLQB_OK);
  assert_non_null(strstr(json, "\"redaction.dlx\""));
  assert_non_null(strstr(json, "\"destination\": \"recon.failed\""));
  free(json);
}

static const dlqb_hset *plan_set(const dlqb_route_plan *p, const char *key) {
  for (size_t i = 0; i < p->nsets; i++)
    if (strcmp(p->sets[i].key, key) == 0) return &p->sets[i];
  return NULL;
}

/* The three pipelines' routes: each its own names; the redaction DLQ
 * takes no body (it is dropped and said so), the others keep it. */
static void test_route_per_pipeline(void **state) {
  (void)state;
  dlqb_config c;
  dlqb_pipeline red, rec, dsr;
  json_ok(&c, three);
  dlqb_config_pipeline(&c, 0, &dsr);
  dlqb_config_pipeline(&c, 1, &red);
  dlqb_config_pipeline(&c, 2, &rec);
  dlqb_config cr = c;
  dlqb_config_use_pipeline(&cr, &red);
  static const char body[] = "{\"page\": \"privileged text\"}";
  const int64_t now = INT64_C(1795000000000);
  static dlqb_route_plan plan;
  tb_table h;

  tb_clear(&h);
  tb_add(&h, "item_id", tb_str("item-9"));
  tb_add(&h, "doc_id", tb_str("doc-9"));
  tb_add(&h, "worker_error", tb_str("render_error"));
  dlqb_route_plan_make_pipeline(&cr, &red, &h.t, body, sizeof body - 1, "m1", now, 0, &plan);
  assert_true(plan.valid);
  assert_int_equal(plan.decision.route, DLQB_ROUTE_RETRY);
  assert_string_equal(plan.target, "redaction.retry.1s");
  assert_false(plan.drop_body); /* a retry returns to the worker as it came */
  assert_string_equal(plan.hop.from, "redaction.failed");
  assert_string_equal(plan.hop.request_id, "item-9");
  assert_string_equal(plan.hop.source_system, "doc-9");

  /* The third failure of max_attempts 3: the DLQ, without the body. */
  tb_add(&h, "attempt", tb_i64(2));
  dlqb_route_plan_make_pipeline(&cr, &red, &h.t, body, sizeof body - 1, "m1", now, 0, &plan);
  assert_int_equal(plan.decision.route, DLQB_ROUTE_DLQ);
  assert_string_equal(plan.target, "redaction.dlq.manual");
  assert_true(plan.drop_body);
  const dlqb_hset *dropped = plan_set(&plan, "body_dropped");
  assert_non_null(dropped);
  assert_int_equal(dropped->num, sizeof body - 1);
  assert_int_equal(strlen(plan_set(&plan, "body_sha256")->str), 64);
  assert_string_equal(plan_set(&plan, "dlq_reason")->str, "max_attempts");
  /* No body to drop: nothing said. */
  dlqb_route_plan_make_pipeline(&cr, &red, &h.t, NULL, 0, "m1", now, 0, &plan);
  assert_false(plan.drop_body);
  assert_null(plan_set(&plan, "body_dropped"));

  /* A DSR task sent to the redaction pipeline is invalid there, and its
   * body still stays out of that DLQ. */
  tb_clear(&h);
  tb_add(&h, "request_id", tb_str("r-1"));
  tb_add(&h, "source_system", tb_str("crm"));
  dlqb_route_plan_make_pipeline(&cr, &red, &h.t, body, sizeof body - 1, "m2", now, 0, &plan);
  assert_false(plan.valid);
  assert_string_equal(plan.target, "redaction.dlq.manual");
  assert_string_equal(plan_set(&plan, "dlq_reason")->str, "invalid_envelope");
  assert_true(plan.drop_body);
  assert_non_null(strstr(plan_set(&plan, "last_error")->str, "item_id is missing"));

  /* Replays did not help: the review queue of the pipeline, no body. */
  tb_clear(&h);
  tb_add(&h, "item_id", tb_str("item-9"));
  tb_add(&h, "doc_id", tb_str("doc-9"));
  tb_add(&h, "replay_count", tb_i64(9));
  tb_add(&h, "attempt", tb_i64(2));
  tb_add(&h, "worker_error", tb_str("render_error"));
  dlqb_route_plan_make_pipeline(&cr, &red, &h.t, body, sizeof body - 1, "m3", now, 0, &plan);
  assert_true(plan.decision.escalate);
  assert_string_equal(plan.target, "senior_review");
  assert_true(plan.drop_body);

  /* Reconciliation keeps the context (the body) in its DLQ. */
  dlqb_config cc = c;
  dlqb_config_use_pipeline(&cc, &rec);
  tb_clear(&h);
  tb_add(&h, "discrepancy_id", tb_str("d-1"));
  tb_add(&h, "category", tb_str("amount_mismatch"));
  tb_add(&h, "attempt", tb_i64(3));
  tb_add(&h, "worker_error", tb_str("ledger locked"));
  dlqb_route_plan_make_pipeline(&cc, &rec, &h.t, body, sizeof body - 1, "m4", now, 0, &plan);
  assert_string_equal(plan.target, "recon.dlq.manual");
  assert_false(plan.drop_body);
  assert_string_equal(plan.hop.request_id, "d-1");

  /* An expiry from this pipeline's own delay queue is backoff, not a
   * failure; from another pipeline's prefix it is not. */
  amqp_table_entry_t death[2] = {tb_entry("reason", tb_str("expired")),
                                 tb_entry("queue", tb_str("recon.retry.5s"))};
  amqp_field_value_t deaths[1] = {tb_table_value(death, 2)};
  tb_clear(&h);
  tb_add(&h, "x-death", tb_array(deaths, 1));
  dlqb_failure f;
  dlqb_failure_read_prefix(&h.t, rec.retry_prefix, &f);
  assert_int_equal(f.kind, DLQB_FAIL_REPORTED);
  dlqb_failure_read_prefix(&h.t, dsr.retry_prefix, &f);
  assert_int_equal(f.kind, DLQB_FAIL_EXPIRED);
  dlqb_failure_read(&h.t, &f);
  assert_int_equal(f.kind, DLQB_FAIL_EXPIRED);
}

static void test_metrics_label(void **state) {
  (void)state;
  static const char in[] = "# HELP a x\n# TYPE a gauge\na 1\nb{q=\"x\"} 2\nc{} 3\n";
  size_t n = 0;
  char *out = dlqb_metrics_add_label(in, sizeof in - 1, "pipeline", "red", &n);
  assert_non_null(out);
  assert_string_equal(out, "# HELP a x\n# TYPE a gauge\na{pipeline=\"red\"} 1\n"
                           "b{pipeline=\"red\",q=\"x\"} 2\nc{pipeline=\"red\"} 3\n");
  assert_int_equal(n, strlen(out));
  free(out);

  /* The registry: unset, today's exposition; set, every sample labelled. */
  dlqb_metrics *m = dlqb_metrics_new("t");
  assert_non_null(m);
  char *text = NULL, reason[128];
  dlqb_error err;
  assert_int_equal(dlqb_metrics_render(m, &text, &n, &err), DLQB_OK);
  assert_null(strstr(text, "pipeline="));
  free(text);
  assert_false(dlqb_metrics_healthy(m, reason, sizeof reason));
  assert_string_equal(reason, "not connected to the broker");
  dlqb_metrics_set_pipeline(m, "redaction");
  assert_int_equal(dlqb_metrics_render(m, &text, &n, &err), DLQB_OK);
  size_t samples = 0;
  for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    samples++;
    if (strstr(line, "{pipeline=\"redaction\"") == NULL) fail_msg("unlabelled: %s", line);
  }
  assert_true(samples > 10);
  free(text);
  assert_false(dlqb_metrics_healthy(m, reason, sizeof reason));
  assert_string_equal(reason, "redaction: not connected to the broker");
  dlqb_metrics_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_builtin_profiles),
      cmocka_unit_test(test_default_pipeline_is_today),
      cmocka_unit_test(test_three_pipelines),
      cmocka_unit_test(test_custom_profile),
      cmocka_unit_test(test_pipeline_errors),
      cmocka_unit_test(test_profile_errors),
      cmocka_unit_test(test_pipeline_user),
      cmocka_unit_test(test_is_default),
      cmocka_unit_test(test_choose),
      cmocka_unit_test(test_envelope_redaction),
      cmocka_unit_test(test_envelope_reconciliation),
      cmocka_unit_test(test_envelope_custom_profile),
      cmocka_unit_test(test_topology_default_is_today),
      cmocka_unit_test(test_topology_three),
      cmocka_unit_test(test_route_per_pipeline),
      cmocka_unit_test(test_metrics_label),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

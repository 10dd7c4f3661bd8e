/* The topology as data: what `declare`, `run` and the definitions export read. */
#include "dlqb/topology.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/duration.h"

char *dlqb_retry_queue_name(uint64_t delay_ms, char *buf, size_t len) {
  char d[32];
  snprintf(buf, len, "%s%s", DLQB_RETRY_PREFIX, dlqb_duration_format(delay_ms, d, sizeof d));
  return buf;
}

static void arg_str(dlqb_queue_spec *q, const char *key, const char *value) {
  dlqb_queue_arg *a = &q->args[q->nargs++];
  a->key = key;
  a->kind = DLQB_ARG_STR;
  snprintf(a->str, sizeof a->str, "%s", value);
}

static void arg_int(dlqb_queue_spec *q, const char *key, int64_t value) {
  dlqb_queue_arg *a = &q->args[q->nargs++];
  a->key = key;
  a->kind = DLQB_ARG_INT;
  a->num = value;
}

static dlqb_queue_spec *add_queue(dlqb_topology *t, const char *name, dlqb_qtype type,
                                  const char *purpose) {
  dlqb_queue_spec *q = &t->queues[t->nqueues++];
  memset(q, 0, sizeof *q);
  snprintf(q->name, sizeof q->name, "%s", name);
  q->type = type;
  q->purpose = purpose;
  if (type == DLQB_QTYPE_QUORUM) arg_str(q, "x-queue-type", "quorum");
  if (type == DLQB_QTYPE_STREAM) arg_str(q, "x-queue-type", "stream");
  return q;
}

/* Quorum queues dead-letter at-least-once only with reject-publish
 * overflow; with the default drop-head they silently fall back to
 * at-most-once, which could lose a task. */
static void dead_letter_to(dlqb_queue_spec *q, const char *exchange, const char *routing_key) {
  arg_str(q, "x-dead-letter-exchange", exchange);
  if (routing_key != NULL) arg_str(q, "x-dead-letter-routing-key", routing_key);
  arg_str(q, "x-dead-letter-strategy", "at-least-once");
  arg_str(q, "x-overflow", "reject-publish");
}

void dlqb_topology_build(const dlqb_config *cfg, dlqb_topology *out) {
  memset(out, 0, sizeof *out);
  dlqb_queue_spec *q;

  q = add_queue(out, DLQB_Q_WORK, DLQB_QTYPE_QUORUM, "tasks for workers");
  dead_letter_to(q, DLQB_X_DLX, NULL);
  /* The broker delivers a message limit+1 times before dead-lettering it
   * with reason delivery_limit, so threshold crashes need limit threshold-1. */
  arg_int(q, "x-delivery-limit", cfg->poison_threshold - 1);

  q = add_queue(out, DLQB_Q_FAILED, DLQB_QTYPE_QUORUM,
                "failure inbox: dead-lettered tasks the bridge routes");
  dead_letter_to(q, "", DLQB_Q_DLQ);
  arg_int(q, "x-delivery-limit", DLQB_FAILED_DELIVERY_LIMIT);
  q->bind_exchange = DLQB_X_DLX;

  for (size_t i = 0; i < cfg->retry_delay_count; i++) {
    char name[DLQB_NAME_MAX];
    dlqb_retry_queue_name(cfg->retry_delays_ms[i], name, sizeof name);
    int dup = 0;
    for (size_t j = 0; j < out->nqueues; j++) dup |= strcmp(out->queues[j].name, name) == 0;
    if (dup) continue;
    q = add_queue(out, name, DLQB_QTYPE_QUORUM, "retry delay: tasks wait here, then return to dsr.work");
    dead_letter_to(q, "", DLQB_Q_WORK);
  }

  /* Classic on purpose: reading a classic queue (inspect, the management
   * UI's Get messages) never bumps a delivery count, and no broker version
   * applies a default delivery limit that could drop an item. */
  add_queue(out, DLQB_Q_DLQ, DLQB_QTYPE_CLASSIC, "dead-letter queue: needs a human or a replay");
  add_queue(out, DLQB_Q_REVIEW, DLQB_QTYPE_CLASSIC, "escalations for compliance review");
  add_queue(out, DLQB_Q_COMPLETED, DLQB_QTYPE_STREAM, "completion ledger (stream)");
  /* Writers append their signed audit heads; only an admin (configure
   * permission) can delete the stream (docs/least-privilege.md). */
  add_queue(out, DLQB_Q_ANCHORS, DLQB_QTYPE_STREAM, "audit anchors (stream): the writers' signed heads");
}

dlqb_status dlqb_topology_definitions(const dlqb_topology *topo, const char *vhost,
                                      char **json_out, dlqb_error *err) {
  json_object *root = json_object_new_object();
  json_object *queues = json_object_new_array();
  json_object *exchanges = json_object_new_array();
  json_object *bindings = json_object_new_array();
  json_object *vhosts = json_object_new_array();

  /* The vhost itself: a node that loads definitions at boot seeds no
   * default vhost, and queues cannot be imported into a missing one. A
   * vhost-scoped import (POST /api/definitions/<vhost>) ignores this. */
  json_object *v = json_object_new_object();
  json_object_object_add(v, "name", json_object_new_string(vhost));
  json_object_array_add(vhosts, v);

  json_object *x = json_object_new_object();
  json_object_object_add(x, "name", json_object_new_string(DLQB_X_DLX));
  json_object_object_add(x, "vhost", json_object_new_string(vhost));
  json_object_object_add(x, "type", json_object_new_string("fanout"));
  json_object_object_add(x, "durable", json_object_new_boolean(1));
  json_object_object_add(x, "auto_delete", json_object_new_boolean(0));
  json_object_object_add(x, "internal", json_object_new_boolean(0));
  json_object_object_add(x, "arguments", json_object_new_object());
  json_object_array_add(exchanges, x);

  for (size_t i = 0; i < topo->nqueues; i++) {
    const dlqb_queue_spec *q = &topo->queues[i];
    json_object *o = json_object_new_object();
    json_object *args = json_object_new_object();
    for (size_t a = 0; a < q->nargs; a++) {
      const dlqb_queue_arg *arg = &q->args[a];
      json_object_object_add(args, arg->key,
                             arg->kind == DLQB_ARG_STR ? json_object_new_string(arg->str)
                                                       : json_object_new_int64(arg->num));
    }
    json_object_object_add(o, "name", json_object_new_string(q->name));
    json_object_object_add(o, "vhost", json_object_new_string(vhost));
    json_object_object_add(o, "durable", json_object_new_boolean(1));
    json_object_object_add(o, "auto_delete", json_object_new_boolean(0));
    json_object_object_add(o, "arguments", args);
    json_object_array_add(queues, o);
    if (q->bind_exchange != NULL) {
      json_object *b = json_object_new_object();
      json_object_object_add(b, "source", json_object_new_string(q->bind_exchange));
      json_object_object_add(b, "vhost", json_object_new_string(vhost));
      json_object_object_add(b, "destination", json_object_new_string(q->name));
      json_object_object_add(b, "destination_type", json_object_new_string("queue"));
      json_object_object_add(b, "routing_key", json_object_new_string(""));
      json_object_object_add(b, "arguments", json_object_new_object());
      json_object_array_add(bindings, b);
    }
  }
  json_object_object_add(root, "vhosts", vhosts);
  json_object_object_add(root, "queues", queues);
  json_object_object_add(root, "exchanges", exchanges);
  json_object_object_add(root, "bindings", bindings);
  const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                              JSON_C_TO_STRING_SPACED |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE);
  *json_out = text ? strdup(text) : NULL;
  json_object_put(root);
  if (*json_out == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  return DLQB_OK;
}

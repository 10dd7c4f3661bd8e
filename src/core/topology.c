/* The topology as data: what `declare`, `run` and the definitions export read. */
#include "dlqb/topology.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/duration.h"

static char *retry_name(const char *prefix, uint64_t delay_ms, char *buf, size_t len) {
  char d[32];
  snprintf(buf, len, "%s%s", prefix, dlqb_duration_format(delay_ms, d, sizeof d));
  return buf;
}

char *dlqb_retry_queue_name(uint64_t delay_ms, char *buf, size_t len) {
  return retry_name(DLQB_RETRY_PREFIX, delay_ms, buf, len);
}

char *dlqb_pipeline_retry_queue_name(const dlqb_pipeline *p, uint64_t delay_ms, char *buf,
                                     size_t len) {
  return retry_name(p->retry_prefix, delay_ms, buf, len);
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

char *dlqb_dropped_queue_name(const dlqb_pipeline *p, char *buf, size_t len) {
  snprintf(buf, len, "%.*s%s", (int)(DLQB_QNAME_MAX - sizeof DLQB_DROPPED_SUFFIX), p->dlq,
           DLQB_DROPPED_SUFFIX);
  return buf;
}

/* The DLQ and the review queue hold what a person still has to act on, so
 * the broker must never drop anything from them: no TTL, no length limit,
 * and, as quorum queues (replicated on every node), no delivery limit that
 * reads could reach (a pass returns what it holds, the management UI's Get
 * requeues, a killed mover's deliveries come back: each counts as a
 * delivery). A policy can still set a limit, a TTL or a length (the lower
 * of its value and the queue's wins: measured on 4.0.5), and a quorum queue
 * drops what they cut unless it has a dead-letter exchange: so whatever
 * the broker would drop from them is dead-lettered, at least once, into the
 * pipeline's safety queue (dlqb_dropped_queue_name), which nothing reads or
 * limits, and the daemon warns when it holds anything. reject-publish: a
 * length a policy sets refuses new items (the router tries again) instead
 * of dropping old ones, and at-least-once needs it. Classic (one copy, on
 * one node, no arguments, as every deployment before had them) only when
 * dlq_queue_type says so. */
static void held_queue(dlqb_topology *t, const char *name, bool classic, const char *dropped,
                       const char *purpose) {
  dlqb_queue_spec *q =
      add_queue(t, name, classic ? DLQB_QTYPE_CLASSIC : DLQB_QTYPE_QUORUM, purpose);
  q->holds_items = true;
  if (classic) return;
  arg_int(q, "x-delivery-limit", DLQB_HELD_DELIVERY_LIMIT);
  dead_letter_to(q, "", dropped);
}

void dlqb_topology_add_pipeline(dlqb_topology *out, const dlqb_pipeline *p) {
  dlqb_queue_spec *q;
  bool today = dlqb_pipeline_is_default(p);
  if (out->nexchanges < DLQB_TOPO_MAX_EXCHANGES)
    snprintf(out->exchanges[out->nexchanges++], DLQB_NAME_MAX, "%s", p->dlx);

  q = add_queue(out, p->work, DLQB_QTYPE_QUORUM, "tasks for workers");
  dead_letter_to(q, p->dlx, NULL);
  /* The broker delivers a message limit+1 times before dead-lettering it
   * with reason delivery_limit, so threshold crashes need limit threshold-1. */
  arg_int(q, "x-delivery-limit", p->policy.poison_threshold - 1);

  q = add_queue(out, p->failed, DLQB_QTYPE_QUORUM,
                "failure inbox: dead-lettered tasks the bridge routes");
  dead_letter_to(q, "", p->dlq);
  arg_int(q, "x-delivery-limit", DLQB_FAILED_DELIVERY_LIMIT);
  snprintf(q->bind_exchange, sizeof q->bind_exchange, "%s", p->dlx);

  size_t first = out->nqueues;
  for (size_t i = 0; i < p->policy.retry_delay_count; i++) {
    char name[DLQB_NAME_MAX];
    dlqb_pipeline_retry_queue_name(p, p->policy.retry_delays_ms[i], name, sizeof name);
    int dup = 0;
    for (size_t j = first; j < out->nqueues; j++) dup |= strcmp(out->queues[j].name, name) == 0;
    if (dup) continue;
    q = add_queue(out, name, DLQB_QTYPE_QUORUM,
                  today ? "retry delay: tasks wait here, then return to dsr.work"
                        : "retry delay: tasks wait here, then return to the work queue");
    dead_letter_to(q, "", p->work);
  }

  char dropped[DLQB_NAME_MAX];
  dlqb_dropped_queue_name(p, dropped, sizeof dropped);
  bool classic = p->policy.dlq_classic;
  held_queue(out, p->dlq, classic, dropped, "dead-letter queue: needs a human or a replay");
  held_queue(out, p->review, classic, dropped,
             today ? "escalations for compliance review" : "escalations for review");
  if (!classic) {
    q = add_queue(out, dropped, DLQB_QTYPE_QUORUM,
                  "safety queue: what the broker dead-lettered from the DLQ or review queue");
    arg_int(q, "x-delivery-limit", DLQB_HELD_DELIVERY_LIMIT);
  }
  add_queue(out, p->completed, DLQB_QTYPE_STREAM, "completion ledger (stream)");
  add_queue(out, p->catalog, DLQB_QTYPE_STREAM,
            "catalog of the DLQ and review queue (stream): what looks answer from");
}

void dlqb_topology_build(const dlqb_config *cfg, dlqb_topology *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < dlqb_config_pipeline_count(cfg); i++) {
    dlqb_pipeline p;
    dlqb_config_pipeline(cfg, i, &p);
    dlqb_topology_add_pipeline(out, &p);
  }
  /* Writers append their signed audit heads; only an admin (configure
   * permission) can delete the stream (docs/least-privilege.md). */
  add_queue(out, DLQB_Q_ANCHORS, DLQB_QTYPE_STREAM,
            "audit anchors (stream): the writers' signed heads");
}

dlqb_topology *dlqb_topology_new(const dlqb_config *cfg) {
  dlqb_topology *t = malloc(sizeof *t);
  if (t != NULL) dlqb_topology_build(cfg, t);
  return t;
}

dlqb_status dlqb_topology_definitions(const dlqb_topology *topo, const char *vhost, char **json_out,
                                      dlqb_error *err) {
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

  for (size_t i = 0; i < topo->nexchanges; i++) {
    json_object *x = json_object_new_object();
    json_object_object_add(x, "name", json_object_new_string(topo->exchanges[i]));
    json_object_object_add(x, "vhost", json_object_new_string(vhost));
    json_object_object_add(x, "type", json_object_new_string("fanout"));
    json_object_object_add(x, "durable", json_object_new_boolean(1));
    json_object_object_add(x, "auto_delete", json_object_new_boolean(0));
    json_object_object_add(x, "internal", json_object_new_boolean(0));
    json_object_object_add(x, "arguments", json_object_new_object());
    json_object_array_add(exchanges, x);
  }

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
    if (q->bind_exchange[0] != '\0') {
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
  const char *text = json_object_to_json_string_ext(
      root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
  *json_out = text ? strdup(text) : NULL;
  json_object_put(root);
  if (*json_out == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  return DLQB_OK;
}

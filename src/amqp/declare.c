/* Declaring the topology (dlqb/topology.h) on a broker: see dlqb/declare.h. */
#include "dlqb/declare.h"

#include <stdio.h>

static void args_table(const dlqb_queue_spec *q, amqp_table_entry_t *entries, amqp_table_t *t) {
  for (size_t i = 0; i < q->nargs; i++) {
    const dlqb_queue_arg *a = &q->args[i];
    entries[i].key = amqp_cstring_bytes(a->key);
    if (a->kind == DLQB_ARG_STR) {
      entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
      entries[i].value.value.bytes = amqp_cstring_bytes(a->str);
    } else {
      entries[i].value.kind = AMQP_FIELD_KIND_I64;
      entries[i].value.value.i64 = a->num;
    }
  }
  t->num_entries = (int)q->nargs;
  t->entries = entries;
}

static dlqb_status declared(dlqb_link *link, const char *what, dlqb_error *err) {
  dlqb_status st = dlqb_link_reply(link, amqp_get_rpc_reply(dlqb_link_conn(link)), what, err);
  if (st != DLQB_EBROKER) return st;
  /* The object exists with other properties. */
  if (dlqb_link_reply_code(link) == DLQB_REPLY_PRECONDITION_FAILED) return DLQB_ECONFLICT;
  /* This user may not configure; waiting will not change that. */
  if (dlqb_link_reply_code(link) == DLQB_REPLY_ACCESS_REFUSED) return DLQB_EACCESS;
  return st;
}

static void declare_one(dlqb_link *link, const dlqb_queue_spec *q, const char *name) {
  amqp_table_entry_t entries[DLQB_TOPO_MAX_ARGS];
  amqp_table_t args;
  args_table(q, entries, &args);
  amqp_queue_declare(dlqb_link_conn(link), DLQB_CHANNEL, dlqb_bytes(name), 0, 1, 0, 0, args);
}

dlqb_status dlqb_queue_declare_as(dlqb_link *link, const dlqb_queue_spec *spec, const char *name,
                                  dlqb_error *err) {
  char what[160];
  snprintf(what, sizeof what, "declare queue '%s'", name);
  declare_one(link, spec, name);
  return declared(link, what, err);
}

dlqb_status dlqb_queue_delete_unused(dlqb_link *link, const char *queue, bool checked,
                                     dlqb_error *err) {
  char what[160];
  snprintf(what, sizeof what, "delete queue '%s'", queue);
  amqp_queue_delete(dlqb_link_conn(link), DLQB_CHANNEL, dlqb_bytes(queue), !checked, !checked);
  return declared(link, what, err);
}

dlqb_status dlqb_queue_is_classic(dlqb_link *link, const char *queue, bool *classic,
                                  dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  char what[160];
  snprintf(what, sizeof what, "look up queue '%s'", queue);
  amqp_queue_declare(conn, DLQB_CHANNEL, dlqb_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
  dlqb_status st = dlqb_link_reply(link, amqp_get_rpc_reply(conn), what, err);
  if (st != DLQB_OK) return st;
  /* Declared as it already is (durable, no arguments: how every classic
   * DLQ was declared), a classic queue takes it; a quorum queue refuses
   * the missing x-queue-type as inequivalent. */
  amqp_table_entry_t type = {
      .key = amqp_cstring_bytes("x-queue-type"),
      .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("classic")}};
  amqp_table_t args = {.num_entries = 1, .entries = &type};
  snprintf(what, sizeof what, "declare queue '%s' as classic", queue);
  amqp_queue_declare(conn, DLQB_CHANNEL, dlqb_bytes(queue), 0, 1, 0, 0, args);
  st = declared(link, what, err);
  *classic = st == DLQB_OK;
  return st == DLQB_ECONFLICT ? DLQB_OK : st;
}

/* A DLQ or review queue declared quorum that exists as classic (an older
 * deployment's): kept, listed in out. */
static bool kept_classic(dlqb_link *link, const dlqb_queue_spec *q, dlqb_declared *out) {
  if (!q->holds_items || q->type != DLQB_QTYPE_QUORUM) return false;
  bool classic = false;
  dlqb_error why;
  if (dlqb_queue_is_classic(link, q->name, &classic, &why) != DLQB_OK || !classic) return false;
  if (out != NULL && out->nclassic < DLQB_DECLARED_MAX)
    snprintf(out->classic[out->nclassic++], DLQB_NAME_MAX, "%s", q->name);
  return true;
}

dlqb_status dlqb_topology_declare(dlqb_link *link, const dlqb_topology *topo, dlqb_declared *out,
                                  dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  char what[160];
  dlqb_status st;
  if (out != NULL) out->nclassic = 0;

  for (size_t i = 0; i < topo->nexchanges; i++) {
    snprintf(what, sizeof what, "declare exchange '%s'", topo->exchanges[i]);
    amqp_exchange_declare(conn, DLQB_CHANNEL, dlqb_bytes(topo->exchanges[i]), dlqb_bytes("fanout"),
                          0, 1, 0, 0, amqp_empty_table);
    if ((st = declared(link, what, err)) != DLQB_OK) return st;
  }

  for (size_t i = 0; i < topo->nqueues; i++) {
    const dlqb_queue_spec *q = &topo->queues[i];
    snprintf(what, sizeof what, "declare queue '%s'", q->name);
    declare_one(link, q, q->name);
    st = declared(link, what, err);
    if (st == DLQB_ECONFLICT && kept_classic(link, q, out)) st = DLQB_OK;
    if (st != DLQB_OK) return st;
    if (q->bind_exchange[0] != '\0') {
      snprintf(what, sizeof what, "bind queue '%s' to '%s'", q->name, q->bind_exchange);
      amqp_queue_bind(conn, DLQB_CHANNEL, dlqb_bytes(q->name), dlqb_bytes(q->bind_exchange),
                      amqp_empty_bytes, amqp_empty_table);
      if ((st = declared(link, what, err)) != DLQB_OK) return st;
    }
  }
  return DLQB_OK;
}

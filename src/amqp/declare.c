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

dlqb_status dlqb_topology_declare(dlqb_link *link, const dlqb_topology *topo, dlqb_error *err) {
  amqp_connection_state_t conn = dlqb_link_conn(link);
  char what[160];
  dlqb_status st;

  for (size_t i = 0; i < topo->nexchanges; i++) {
    snprintf(what, sizeof what, "declare exchange '%s'", topo->exchanges[i]);
    amqp_exchange_declare(conn, DLQB_CHANNEL, dlqb_bytes(topo->exchanges[i]), dlqb_bytes("fanout"),
                          0, 1, 0, 0, amqp_empty_table);
    if ((st = declared(link, what, err)) != DLQB_OK) return st;
  }

  for (size_t i = 0; i < topo->nqueues; i++) {
    const dlqb_queue_spec *q = &topo->queues[i];
    amqp_table_entry_t entries[DLQB_TOPO_MAX_ARGS];
    amqp_table_t args;
    args_table(q, entries, &args);
    snprintf(what, sizeof what, "declare queue '%s'", q->name);
    amqp_queue_declare(conn, DLQB_CHANNEL, dlqb_bytes(q->name), 0, 1, 0, 0, args);
    if ((st = declared(link, what, err)) != DLQB_OK) return st;
    if (q->bind_exchange[0] != '\0') {
      snprintf(what, sizeof what, "bind queue '%s' to '%s'", q->name, q->bind_exchange);
      amqp_queue_bind(conn, DLQB_CHANNEL, dlqb_bytes(q->name), dlqb_bytes(q->bind_exchange),
                      amqp_empty_bytes, amqp_empty_table);
      if ((st = declared(link, what, err)) != DLQB_OK) return st;
    }
  }
  return DLQB_OK;
}

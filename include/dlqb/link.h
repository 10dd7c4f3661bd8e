/* The one module that talks to rabbitmq-c's connection API: opening a
 * connection (TCP or verified TLS) with credentials kept out of argv and
 * logs, and translating rabbitmq-c's three error conventions (int status,
 * amqp_rpc_reply_t, NULL + amqp_get_rpc_reply) into dlqb_status + one line.
 *
 * A link is one connection with one channel (DLQB_CHANNEL); it is not
 * thread-safe. Everything above this file deals in dlqb_status. */
#ifndef DLQB_LINK_H
#define DLQB_LINK_H

#include <amqp.h>
#include <stdbool.h>

#include "dlqb/config.h"
#include "dlqb/error.h"

#define DLQB_CHANNEL 1
/* The pipe publishes on a second channel: the broker runs each channel in
 * its own process, so consuming and publishing proceed on both cores. */
#define DLQB_PUB_CHANNEL 2

typedef struct dlqb_link dlqb_link;

/* Whether broker's host and port take a connection (TCP, and TLS with an
 * amqps:// URL, verified as dlqb_link_open does), without logging in: a
 * console with no credentials of its own checks its URL at start. The
 * error says "cannot connect to broker at HOST:PORT: why". */
dlqb_status dlqb_link_reachable(const dlqb_broker_conf *broker, dlqb_error *err);

/* Connects to broker->url (password from broker->password_file when set), logs in
 * with connection name `purpose` (shown in the management UI), opens
 * DLQB_CHANNEL. TLS (amqps://) verifies peer and hostname and needs TLS 1.2
 * or later. On failure *out is NULL and err says what failed, without the
 * password. The caller frees with dlqb_link_close or dlqb_link_abort. */
dlqb_status dlqb_link_open(const dlqb_broker_conf *broker, const char *purpose, dlqb_link **out,
                           dlqb_error *err);

/* Closes channel and connection politely, then frees. NULL-safe. */
void dlqb_link_close(dlqb_link *link);

/* Frees without the closing handshake (the connection is known dead, or a
 * test wants a crash). NULL-safe. */
void dlqb_link_abort(dlqb_link *link);

amqp_connection_state_t dlqb_link_conn(dlqb_link *link);

/* The broker's major version from its server properties (3, 4, ...); 0 when
 * unknown. */
int dlqb_link_broker_major(const dlqb_link *link);

/* The broker user the link logged in as: RabbitMQ refuses a publish whose
 * user_id property names anyone else (406, and the channel closes). */
const char *dlqb_link_user(const dlqb_link *link);

/* The broker user a link opened with url logs in as (what dlqb_link_user
 * will say), into dst (cap bytes), without connecting: for a stamp made
 * before the link opens (edit's edited_by). DLQB_EINVAL for a url that
 * does not parse. The password in url is not kept. */
dlqb_status dlqb_link_url_user(const char *url, char *dst, size_t cap, dlqb_error *err);

/* The negotiated frame_max: a message's content header must fit one frame. */
size_t dlqb_link_frame_max(dlqb_link *link);

/* AMQP reply codes a broker closes a channel with (AMQP 0-9-1 section 1.9). */
#define DLQB_REPLY_ACCESS_REFUSED      403
#define DLQB_REPLY_NOT_FOUND           404
#define DLQB_REPLY_PRECONDITION_FAILED 406

/* The reply code of the broker's last channel or connection close seen by
 * dlqb_link_reply (0: none yet), so callers classify a refusal by its code,
 * never by its text. */
int dlqb_link_reply_code(const dlqb_link *link);

/* Translates an RPC reply; `what` names the operation for the message, e.g.
 * "declare queue 'dsr.work'". A channel or connection close from the
 * broker becomes DLQB_EBROKER with its reply text; after a channel close
 * the channel is reopened so the link stays usable. */
dlqb_status dlqb_link_reply(dlqb_link *link, amqp_rpc_reply_t reply, const char *what,
                            dlqb_error *err);

/* Translates an int status from rabbitmq-c (AMQP_STATUS_*). */
dlqb_status dlqb_link_status(int status, const char *what, dlqb_error *err);

/* Opens one more channel on the link (DLQB_CHANNEL is open already). */
dlqb_status dlqb_link_open_channel(dlqb_link *link, amqp_channel_t channel, dlqb_error *err);

/* Puts a channel in confirm mode; its publishes are then numbered from 1. */
dlqb_status dlqb_link_confirm_select(dlqb_link *link, amqp_channel_t channel, dlqb_error *err);

/* Passive declare: *depth and *consumers of an existing queue. A missing
 * queue is DLQB_EBROKER ("no queue 'x'"), and the channel is reopened. A
 * queue busy taking back items waits up to 10 minutes for its answer (not
 * the 30 s of other requests) while the connection's heartbeats hold. */
dlqb_status dlqb_link_queue_depth(dlqb_link *link, const char *queue, uint32_t *depth,
                                  uint32_t *consumers, dlqb_error *err);

/* amqp_bytes_t view of a C string (no copy). */
amqp_bytes_t dlqb_bytes(const char *s);

#endif

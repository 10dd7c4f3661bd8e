/* The confirm-before-ack pipeline's frame I/O: consuming, republishing,
 * reading confirms, sending the acks the ack ring (dlqb/ackring.h) plans. */
#include "dlqb/pipe.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "dlqb/ackring.h"
#include "dlqb/clock.h"
#include "dlqb/text.h"
#include "dlqb/wire.h"
#include "dlqb/log.h"

#define MAX_BODY_BYTES   (512u * 1024u * 1024u) /* above RabbitMQ's own max_message_size */
#define DRAIN_TIMEOUT_MS 30000
#define IDLE_WAIT_MS     100
/* Consumers one deep pass may add on one channel (each holds up to a
 * window): with the default window of 5000, 20 million items. */
#define MAX_CONSUMERS 4096

/* What the pipe keeps per ring slot beside the ring's own entry. */
typedef struct {
  bool has_hop; /* reported once acked (after_ack) and, unless recorded, audited */
  /* Settled against the memory, its record handed to the audit trail by an
   * earlier run: not again; the entry waits for that record's ticket. */
  bool recorded;
  uint64_t ticket;
  bool has_id; /* with a memory: the original's identity, to remember it by */
  uint8_t id[DLQB_MEMO_ID_LEN];
  dlqb_hop hop;
  /* The catalog "in" published for this hop's copy (0: none): the original
   * is acked only once it is confirmed (dlqb/catalog.h). */
  uint64_t cat_seq;
} slot_hop;

/* The catalog's channel: its own confirms, so the ring's publish sequence
 * numbers stay the copies' alone. */
#define DLQB_CAT_CHANNEL 3
/* Channels the probe of the catalog stream tries (3, 4, 5: each waits a
 * second longer than the one before for its confirm); one whose probe went
 * unconfirmed is dead, and anything on it is ignored. */
#define CAT_TRIES 1
/* The channels a deep pass moves on to (after DLQB_CHANNEL) start above
 * the catalog's: a probe that goes unconfirmed ends the session, so none
 * of these is ever one given up on. */
#define DEEP_FIRST_CHANNEL (DLQB_CAT_CHANNEL + CAT_TRIES)
#define CAT_PROBE_MS       3000
/* A session whose catalog confirms nothing this long ends (the originals
 * waiting for it stay unacked and are redelivered to a new session). */
#define CAT_STALL_MS 15000

/* A delivery read while the handler paused (dlqb_pipe_pause): copied out of
 * the connection's buffers, handed to the handler after the current one,
 * in the order the broker sent them. */
typedef struct kept_delivery {
  struct kept_delivery *next;
  dlqb_delivery d;
  amqp_basic_properties_t props;
  amqp_pool_t pool; /* the props' strings and headers */
  unsigned char *body;
} kept_delivery;

/* A copy waiting for its intent's record to be durable (send_copy). */
typedef struct waiting_copy {
  struct waiting_copy *next;
  uint64_t ticket;              /* the intent's */
  bool counted;                 /* in stats.forwarded once sent (a forward, not a republish) */
  bool has_intent;              /* intent holds the record its ticket covers */
  dlqb_hop intent;              /* abandoned (DLQB_EV_MOVE_ABANDONED) if never sent */
  char *exchange, *routing_key; /* in pool */
  amqp_basic_properties_t props;
  amqp_pool_t pool;
  unsigned char *body;
  size_t body_len;
} waiting_copy;

/* A run of held deliveries: consecutive tags of one channel. */
typedef struct {
  amqp_channel_t channel;
  uint64_t first, last;
} held_run;

struct dlqb_pipe {
  dlqb_link *link;
  amqp_connection_state_t conn;
  dlqb_pipe_options opt;
  dlqb_pipe_handler h;
  dlqb_ackring ring; /* deliveries not yet acked, in delivery order; slot_hop payloads */
  size_t window;     /* the prefetch of each consumer */
  bool corked;       /* TCP_CORK is on: our frames wait for set_cork(false) */
  unsigned char *body;
  size_t body_cap;
  amqp_table_entry_t *headers; /* rewritten header table, reused: grows only */
  size_t headers_cap;
  bool settled_now;    /* the handler settled the current delivery */
  bool settle_refused; /* the ring refused a delivery (a protocol error) */
  bool cancel_sent;
  /* The pass is ending for a stop or its limit: deliveries from now on go
   * back to the queue. A cancel sent only because the pass was idle does
   * not set it (on_deliver says why). */
  bool holding_late;
  /* Every held delivery, as runs in delivery order (the queue's): what
   * dlqb_pipe_return_held gives back in that order. */
  held_run *runs;
  size_t nruns, runs_cap;
  bool runs_lost; /* out of memory for them: given back as before, unordered */
  /* The channel consumed on now (DLQB_CHANNEL first; a deep pass moves on
   * to DEEP_FIRST_CHANNEL, then up: see add_consumer_if_full) and its consumers. */
  amqp_channel_t ch;
  amqp_channel_t prev_ch; /* the one before (its buffers are still released) */
  amqp_channel_t ch_last; /* the highest channel the connection allows */
  unsigned per_channel;   /* consumers a channel gets before the next one is used */
  bool switching;         /* ch's consumers are cancelled to go on to the next channel */
  uint64_t held_before;   /* ring.held when ch started: what ch holds is the rest */
  unsigned consumers;     /* basic.consume sent (consumer tags "dlqb", "dlqb-2", ...) */
  unsigned consumers_ok;  /* of which the broker confirmed (consume-ok) */
  unsigned cancels_out;   /* of which a cancel was sent */
  unsigned cancelled;     /* of which the broker confirmed the cancel (cancel-ok) */
  uint64_t settled_total;
  long long last_delivery_ms, last_tick_ms;
  long long ready_checked_ms; /* last idle check that found ready messages (0: none) */
  const dlqb_hop **ack_hops;  /* scratch for the audit submission */
  size_t ack_hops_cap;
  dlqb_pipe_stats stats;
  /* With a memory: the current delivery's identity, computed once it is
   * needed (a delivery held with an empty memory costs nothing). */
  EVP_MD_CTX *md;
  const dlqb_delivery *cur;
  int cur_id_state; /* 0: not computed, 1: in cur_id, -1: it has none */
  uint8_t cur_id[DLQB_MEMO_ID_LEN];
  /* The catalog (opt.catalog and its stream declared): events published
   * and confirmed on DLQB_CAT_CHANNEL; one stream, so its confirms come
   * in order. */
  bool cat_on;
  uint64_t cat_published, cat_confirmed;
  uint64_t next_cat_seq; /* the "in" the next settle belongs to (0: none) */
  amqp_channel_t cat_ch; /* the catalog's channel; those from DLQB_CAT_CHANNEL below it are dead */
  long long cat_waiting_ms; /* since when an event waits for its confirm (0: none) */
  /* The handler is in dlqb_pipe_pause: deliveries that arrive are kept. */
  bool pausing;
  kept_delivery *kept_head, *kept_tail;
  size_t kept;
  /* Copies whose intents are not yet durable, in publish order. */
  waiting_copy *waiting_head, *waiting_tail;
};

/* Turns the catalog on for this pipe when the target's stream exists: a
 * deployment not yet declared again keeps working, its looks pass over the
 * queue (the readers say why). */
static dlqb_status catalog_start(dlqb_pipe *p, dlqb_error *err) {
  if (p->opt.catalog == NULL) return DLQB_OK;
  dlqb_error why;
  dlqb_status st = dlqb_link_queue_depth(p->link, p->opt.catalog->stream, NULL, NULL, &why);
  if (st == DLQB_EBROKER && dlqb_link_reply_code(p->link) == DLQB_REPLY_NOT_FOUND) {
    dlqb_log_warn("catalog_missing",
                  "the catalog stream '%s' is not declared: moves are not catalogued and "
                  "looks read the queue (run declare)",
                  p->opt.catalog->stream);
    return DLQB_OK;
  }
  if (st != DLQB_OK) {
    *err = why;
    return st;
  }
  /* A first event confirmed before any move relies on the channel. */
  p->cat_ch = DLQB_CAT_CHANNEL;
  for (int i = 0; i < CAT_TRIES; i++, p->cat_ch++) {
    st = dlqb_link_open_channel(p->link, p->cat_ch, err);
    if (st == DLQB_OK) st = dlqb_link_confirm_select(p->link, p->cat_ch, err);
    if (st != DLQB_OK) return st;
    st = dlqb_catalog_probe(p->link, p->cat_ch, p->opt.catalog->stream, CAT_PROBE_MS * (i + 1),
                            &why);
    if (st != DLQB_ETIMEOUT) break;
  }
  if (st == DLQB_ETIMEOUT)
    /* The broker dropped the channel without a word (a stream declared a
     * moment ago: RabbitMQ 3.10.8 and 4.0.5 crash the channel that writes
     * to it before its leader is known), and the connection may go with
     * it: end this session; the caller's next one finds the stream ready
     * (declare and run wait for it: dlqb_catalog_wait_ready). */
    return dlqb_fail(err, DLQB_ECONN,
                     "the catalog stream '%s' did not confirm a first event within %d ms "
                     "(declared a moment ago?); try again",
                     p->opt.catalog->stream, CAT_PROBE_MS);
  if (st != DLQB_OK) {
    /* Refused (a user who may only read: a dry run, a look), or a channel
     * the broker closed: the pass goes on without the catalog. A move
     * that goes on anyway shows in the counts, as any uncatalogued one. */
    dlqb_log_info("catalog_not_writable", "moves of this session are not catalogued: %s", why.msg);
    return DLQB_OK;
  }
  p->cat_on = true;
  p->cat_published = p->cat_confirmed = 1; /* the probe */
  return DLQB_OK;
}

/* The catalog's channel, or one given up on (its frames go to
 * cat_dispatch, which ignores a dead one's). */
static bool is_cat_channel(const dlqb_pipe *p, amqp_channel_t ch) {
  return p->cat_ch != 0 && ch >= DLQB_CAT_CHANNEL && ch <= p->cat_ch;
}

static bool catalogued(const dlqb_pipe *p, const char *queue) {
  return p->cat_on && queue != NULL && dlqb_catalog_target_has(p->opt.catalog, queue);
}

static dlqb_status cat_publish(dlqb_pipe *p, const dlqb_catalog_event *ev, dlqb_error *err) {
  dlqb_status st = dlqb_catalog_send(p->link, p->cat_ch, p->opt.catalog->stream, &ev->props,
                                     amqp_empty_bytes, err);
  if (st != DLQB_OK) return st;
  if (p->cat_confirmed == p->cat_published) p->cat_waiting_ms = dlqb_mono_ms();
  p->cat_published++;
  return DLQB_OK;
}

/* The "in" for a copy about to be published to queue with props: before
 * the copy, so no crash can leave the copy in the queue and not in the
 * catalog; its sequence number goes to the slot the copy settles. */
static dlqb_status cat_in(dlqb_pipe *p, const char *queue, const amqp_basic_properties_t *props,
                          dlqb_error *err) {
  p->next_cat_seq = 0;
  if (!catalogued(p, queue)) return DLQB_OK;
  dlqb_catalog_event ev;
  dlqb_catalog_event_in(p->opt.catalog, queue, props, &ev);
  dlqb_status st = cat_publish(p, &ev, err);
  if (st == DLQB_OK) p->next_cat_seq = p->cat_published;
  return st;
}

/* The "out" for a hop whose original left queue: after its ack was sent. */
static dlqb_status cat_out(dlqb_pipe *p, const char *queue, const char *message_id,
                           dlqb_error *err) {
  if (!catalogued(p, queue)) return DLQB_OK;
  dlqb_catalog_event ev;
  dlqb_catalog_event_out(queue, message_id, &ev);
  return cat_publish(p, &ev, err);
}

dlqb_status dlqb_pipe_new(dlqb_link *link, const dlqb_pipe_options *opt, const dlqb_pipe_handler *h,
                          dlqb_pipe **out, dlqb_error *err) {
  *out = NULL;
  dlqb_pipe *p = calloc(1, sizeof *p);
  if (p == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  p->link = link;
  p->conn = dlqb_link_conn(link);
  p->opt = *opt;
  p->h = *h;
  size_t cap = (size_t)(opt->prefetch > 0 ? opt->prefetch : 1);
  p->window = cap;
  p->ch = DLQB_CHANNEL;
  /* 0: the broker set no limit (65535, the protocol's). RabbitMQ's default
   * is 2047, and rabbitmq-c takes the lower of its own and the broker's. */
  int ch_max = amqp_get_channel_max(p->conn);
  p->ch_last = (amqp_channel_t)(ch_max > 0 && ch_max < 65535 ? ch_max : 65535);
  p->per_channel = 1;
  if (opt->deep && opt->max_messages > 0 && p->ch_last >= DEEP_FIRST_CHANNEL) {
    /* Spread what the pass may hold over the channels there are. */
    uint64_t windows = (opt->max_messages + cap - 1) / cap;
    uint64_t channels = (uint64_t)(p->ch_last - DEEP_FIRST_CHANNEL) + 2;
    uint64_t per = (windows + channels - 1) / channels;
    p->per_channel = per < 1 ? 1 : per > MAX_CONSUMERS ? MAX_CONSUMERS : (unsigned)per;
  }
  dlqb_status st = dlqb_ackring_init(&p->ring, cap, sizeof(slot_hop), err);
  if (st != DLQB_OK) {
    free(p);
    return st;
  }
  if (opt->memory != NULL && (p->md = EVP_MD_CTX_new()) == NULL) {
    dlqb_pipe_free(p);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  st = catalog_start(p, err);
  if (st == DLQB_OK) st = dlqb_link_open_channel(link, DLQB_PUB_CHANNEL, err);
  if (st == DLQB_OK) st = dlqb_link_confirm_select(link, DLQB_PUB_CHANNEL, err);
  if (st == DLQB_OK) {
    amqp_basic_qos(p->conn, DLQB_CHANNEL, 0, (uint16_t)cap, 0);
    st = dlqb_link_reply(link, amqp_get_rpc_reply(p->conn), "set prefetch", err);
  }
  if (st != DLQB_OK) {
    dlqb_pipe_free(p);
    return st;
  }
  *out = p;
  return DLQB_OK;
}

static void waiting_free(waiting_copy *w) {
  empty_amqp_pool(&w->pool);
  free(w->body);
  free(w);
}

/* Records each waiting copy's move as abandoned (its copy certainly never
 * left) and frees them all. After its intent in the same writer, so the
 * trail never has the end before the beginning; a lack of memory leaves
 * the intent open, which holds the item until a person settles it: safe. */
static void abandon_waiting(dlqb_pipe *p) {
  while (p->waiting_head != NULL) {
    waiting_copy *w = p->waiting_head;
    p->waiting_head = w->next;
    if (w->has_intent) {
      w->intent.event = DLQB_EV_MOVE_ABANDONED;
      const dlqb_hop *hops[] = {&w->intent};
      uint64_t ticket;
      dlqb_error err;
      (void)dlqb_audit_submit(p->opt.audit, hops, 1, &ticket, &err);
    }
    waiting_free(w);
  }
  p->waiting_tail = NULL;
}

static void kept_free(kept_delivery *k) {
  empty_amqp_pool(&k->pool);
  free(k->body);
  free(k);
}

void dlqb_pipe_free(dlqb_pipe *p) {
  if (p == NULL) return;
  /* Kept deliveries were never settled: the broker requeues them with the
   * channel. */
  while (p->kept_head != NULL) {
    kept_delivery *k = p->kept_head;
    p->kept_head = k->next;
    kept_free(k);
  }
  /* Copies never published: their originals were never acked, and their
   * intents end as abandoned, so that no mover holds them as interrupted. */
  abandon_waiting(p);
  dlqb_ackring_release(&p->ring);
  EVP_MD_CTX_free(p->md);
  free(p->ack_hops);
  free(p->body);
  free(p->headers);
  free(p->runs);
  free(p);
}

void dlqb_pipe_get_stats(const dlqb_pipe *p, dlqb_pipe_stats *out) { *out = p->stats; }

/* How long dlqb_pipe_return_held waits for the queue to take back what
 * the run held, and how often it looks. */
#define RETURN_WAIT_MS  60000
#define RETURN_POLL_US  20000
#define RETURN_STILL_MS 5000
/* Nacks of RETURN_CHUNK tags given back before the queue must show them. */
#define RETURN_BATCH 8
/* Tags a nack gives back at once: see dlqb_pipe_return_held. */
#define RETURN_CHUNK 32

/* A quorum queue's held deliveries, given back in the order they came
 * (pipe option return_in_order). */
/* Waits until queue holds at least want ready messages (polled every
 * RETURN_POLL_US, at most RETURN_STILL_MS without a change). */
static void await_depth(dlqb_pipe *p, uint64_t want) {
  long long moved_at = dlqb_mono_ms();
  uint32_t last = UINT32_MAX, now = 0;
  dlqb_error err;
  while (dlqb_link_queue_depth(p->link, p->opt.queue, &now, NULL, &err) == DLQB_OK && now < want) {
    if (now != last) moved_at = dlqb_mono_ms();
    last = now;
    if (dlqb_mono_ms() - moved_at >= RETURN_STILL_MS) return;
    dlqb_sleep_us(NULL, RETURN_POLL_US / 10);
  }
}

static void return_in_order(dlqb_pipe *p, uint32_t before) {
  uint64_t given = 0;
  unsigned chunks = 0;
  /* What the run held goes back in the order it came, oldest first. A
   * quorum queue (the DLQ and review queue by default) puts what is given
   * back ahead of what it holds, in the order it comes back, but a nack of
   * many tags at once comes back in no order: the broker keeps them in a
   * map, whose order is its keys' only up to 32 of them (measured on
   * 3.10.8: 44 items held and nacked with one multiple nack came back
   * shuffled; ten came back in order). So each run of held tags goes back
   * in nacks of at most RETURN_CHUNK tags (multiple, up to a held tag:
   * each takes exactly the held ones since the previous), the runs in the
   * order they were held; the consumers are cancelled by then, so nothing
   * is delivered again meanwhile. Anything else still unacked (a publish the broker returned and
   * the run then held) goes back after, with a nack of tag 0 on each
   * channel, and the channels the run opened close. */
  if (!p->runs_lost) {
    for (size_t i = 0; i < p->nruns; i++) {
      const held_run *r = &p->runs[i];
      for (uint64_t end = r->first - 1; end < r->last;) {
        uint64_t from = end;
        end = r->last - end > RETURN_CHUNK ? end + RETURN_CHUNK : r->last;
        if (amqp_basic_nack(p->conn, r->channel, end, 1, 1) != AMQP_STATUS_OK) return;
        given += end - from;
        /* The broker's client of a quorum queue keeps a few commands in
         * flight and merges what comes meanwhile into one (measured on
         * 3.10.8: after 33 nacks of 32 the rest of a 5,000 window came back
         * shuffled): so every RETURN_BATCH nacks, until the queue shows
         * them back. */
        if (++chunks % RETURN_BATCH == 0) await_depth(p, (uint64_t)before + given);
      }
      /* Before the next channel's: a basic.qos on this one, whose qos-ok
       * comes once its nacks were handed on. */
      if (i + 1 < p->nruns && p->runs[i + 1].channel != r->channel &&
          (amqp_basic_qos(p->conn, r->channel, 0, 1, 0) == NULL ||
           amqp_get_rpc_reply(p->conn).reply_type != AMQP_RESPONSE_NORMAL))
        return;
    }
  }
  if (amqp_basic_nack(p->conn, DLQB_CHANNEL, 0, 1, 1) != AMQP_STATUS_OK) return;
  for (amqp_channel_t ch = DEEP_FIRST_CHANNEL; ch <= p->ch; ch++) {
    if (amqp_basic_nack(p->conn, ch, 0, 1, 1) != AMQP_STATUS_OK) return;
    amqp_rpc_reply_t r = amqp_channel_close(p->conn, ch, AMQP_REPLY_SUCCESS);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) return; /* the link's close takes the rest */
  }
}

void dlqb_pipe_return_held(dlqb_pipe *p) {
  if (p == NULL) return;
  uint64_t unacked = p->ring.held + p->ring.count;
  if (unacked == 0) return;
  dlqb_error err;
  uint32_t before = 0;
  if (dlqb_link_queue_depth(p->link, p->opt.queue, &before, NULL, &err) != DLQB_OK) return;
  if (p->opt.return_in_order) {
    return_in_order(p, before);
  } else {
    /* A classic queue: everything unacked goes back with a nack of tag 0
     * (multiple, requeue) on each channel, and the channels the run
     * opened close. The queue puts it back in its own order (by sequence
     * number) whichever channel goes first, but the cost depends on the
     * order: to place a channel's items, RabbitMQ walks the entries it
     * already holds whose sequence numbers are lower
     * (rabbit_variable_queue:requeue, queue_merge in 3.10, requeue_merge in
     * 4.0). So the newest channel goes first: each channel's items then
     * precede all the queue holds and place in O(that channel). Its
     * close-ok comes after its channel process has handed the queue its
     * requeue, so the next nack reaches the queue after it. Oldest first,
     * each channel walks all returned before it (measured on 3.10 at
     * 200,000 items over 70 channels: 6.2 s until the queue showed them,
     * against 0.8 s). */
    for (amqp_channel_t ch = p->ch; ch >= DEEP_FIRST_CHANNEL; ch--) {
      if (amqp_basic_nack(p->conn, ch, 0, 1, 1) != AMQP_STATUS_OK) return;
      amqp_rpc_reply_t r = amqp_channel_close(p->conn, ch, AMQP_REPLY_SUCCESS);
      if (r.reply_type != AMQP_RESPONSE_NORMAL) return; /* the link's close takes the rest */
    }
    if (amqp_basic_nack(p->conn, DLQB_CHANNEL, 0, 1, 1) != AMQP_STATUS_OK) return;
  }
  /* Then waits until the queue holds them again. The queue answers a depth
   * read (its priority is higher) before the requeues waiting in its
   * mailbox, one a channel: without the wait the next look finds the
   * queue short and covers only part of it (measured: 23,700 of 70,000
   * right after a pass over 70,000 on 26 channels). A consumer taking
   * items meanwhile keeps the count from coming back: then it gives up. */
  long long until = dlqb_mono_ms() + RETURN_WAIT_MS, moved_at = dlqb_mono_ms();
  uint64_t want = (uint64_t)before + unacked;
  uint32_t last = UINT32_MAX;
  for (;;) {
    uint32_t now = 0;
    if (dlqb_link_queue_depth(p->link, p->opt.queue, &now, NULL, &err) != DLQB_OK) return;
    if (now >= want) return;
    if (now != last) moved_at = dlqb_mono_ms();
    last = now;
    /* Still for RETURN_STILL_MS: what is missing is not coming back (a
     * quorum queue dead-letters what a policy's delivery limit cuts as it
     * takes it back: dlqb/topology.h's safety queue). */
    if (dlqb_mono_ms() >= until || dlqb_mono_ms() - moved_at >= RETURN_STILL_MS) {
      dlqb_log_warn("return_slow",
                    "queue '%s' holds %u of the %llu expected after the pass put back what it "
                    "held; going on",
                    p->opt.queue, now, (unsigned long long)want);
      return;
    }
    dlqb_sleep_us(NULL, RETURN_POLL_US);
  }
}

/* ---- the memory (dlqb/memo.h) ---- */

/* Identity bytes go to the hash in blocks rather than a call per field. */
typedef struct {
  EVP_MD_CTX *md;
  size_t len;
  unsigned char buf[1024];
  bool ok;
} id_feed;

static void id_flush(id_feed *f) {
  if (f->len > 0 && EVP_DigestUpdate(f->md, f->buf, f->len) != 1) f->ok = false;
  f->len = 0;
}

static void id_put(void *ctx, const void *data, size_t len) {
  id_feed *f = ctx;
  if (len == 0) return; /* an empty body's bytes may be NULL: memcpy must not see it */
  if (f->len + len > sizeof f->buf) id_flush(f);
  if (len > sizeof f->buf) {
    if (EVP_DigestUpdate(f->md, data, len) != 1) f->ok = false;
    return;
  }
  memcpy(f->buf + f->len, data, len);
  f->len += len;
}

/* SHA-256 over props as dlqb_wire_identity feeds them, then the body's
 * length and bytes, with md. */
static bool identity_with(EVP_MD_CTX *md, const amqp_basic_properties_t *props, amqp_bytes_t body,
                          uint8_t out[DLQB_MEMO_ID_LEN]) {
  id_feed f = {.md = md, .ok = EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1};
  if (f.ok && !dlqb_wire_identity(props, id_put, &f)) f.ok = false;
  uint64_t body_len = body.len;
  if (f.ok) id_put(&f, &body_len, sizeof body_len);
  if (f.ok) id_put(&f, body.bytes, body.len);
  if (f.ok) id_flush(&f);
  unsigned int n = 0;
  if (f.ok && (EVP_DigestFinal_ex(md, out, &n) != 1 || n != DLQB_MEMO_ID_LEN)) f.ok = false;
  return f.ok;
}

bool dlqb_pipe_identity(const amqp_basic_properties_t *props, amqp_bytes_t body,
                        uint8_t out[DLQB_MEMO_ID_LEN]) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  bool ok = md != NULL && identity_with(md, props, body, out);
  EVP_MD_CTX_free(md);
  return ok;
}

/* The current delivery's identity (dlqb_pipe_identity). NULL when it has
 * none (a header it cannot walk, or OpenSSL failed): such a delivery is
 * never remembered, so it is moved again if it comes back. */
static const uint8_t *current_id(dlqb_pipe *p) {
  if (p->cur_id_state == 0)
    p->cur_id_state = identity_with(p->md, p->cur->props, p->cur->body, p->cur_id) ? 1 : -1;
  return p->cur_id_state == 1 ? p->cur_id : NULL;
}

/* Pushes d in the given state; its slot (NULL for a held delivery, or when
 * the ring refuses it: tags ascend on a channel, so that is a protocol
 * error, or the ring could not grow, which on_deliver reports once the
 * handler returns; *ok false then). With a memory, the slot keeps d's
 * identity. */
static slot_hop *push(dlqb_pipe *p, const dlqb_delivery *d, dlqb_ack_state state, bool *ok) {
  p->settled_now = true;
  bool refused;
  slot_hop *sh = dlqb_ackring_push(&p->ring, d->channel, d->delivery_tag, state, &refused);
  *ok = !refused;
  if (refused) {
    p->settle_refused = true;
    return NULL;
  }
  p->settled_total++;
  if (sh == NULL) return NULL; /* held: nothing kept */
  /* The original's identity (a handler may settle a copy of d with a
   * changed body: the same delivery). */
  const uint8_t *id = p->md != NULL && p->cur != NULL && d->delivery_tag == p->cur->delivery_tag
                          ? current_id(p)
                          : NULL;
  sh->has_id = id != NULL;
  if (id != NULL) memcpy(sh->id, id, DLQB_MEMO_ID_LEN);
  return sh;
}

/* Settles the current delivery against a remembered copy: nothing is
 * published; the entry is acked once the record of that copy is durable
 * (handed to the audit trail now when the earlier run had not). */
static void settle_remembered(dlqb_pipe *p, const dlqb_delivery *d, const dlqb_memo_entry *m) {
  bool ok;
  slot_hop *sh = push(p, d, DLQB_ACK_SETTLED, &ok);
  if (sh == NULL) return;
  sh->has_hop = m->has_hop;
  sh->hop = m->hop; /* as published then: its time and broker user */
  sh->recorded = m->recorded;
  sh->ticket = m->ticket;
  p->stats.remembered++;
  dlqb_log_debug("already_moved",
                 "message_id=%s came back after a lost connection; its copy to %s was "
                 "confirmed before: acked, not published again",
                 m->hop.message_id, m->hop.to);
}

/* A run ends with its unacked originals about to return to their queue:
 * those whose copy is confirmed (or that were settled with nothing to
 * publish) go into the memory, with where their records stand. */
static void remember_unacked(dlqb_pipe *p) {
  dlqb_ackring *r = &p->ring;
  if (p->opt.memory == NULL || r->count == 0) return;
  size_t kept = 0, forgot = 0, failed = 0;
  for (size_t i = 0; i < r->count; i++) {
    const dlqb_ack_entry *e = dlqb_ackring_at(r, i);
    const slot_hop *sh = dlqb_ackring_payload_at(r, i);
    if (e->state != DLQB_ACK_SETTLED || !sh->has_id) continue;
    /* Its copy's catalog "in" not confirmed: acking it against the copy
     * could leave the copy in its queue and not in the catalog, so it is
     * moved again if it comes back (a duplicate, as an unconfirmed copy). */
    if (sh->cat_seq > p->cat_confirmed) continue;
    dlqb_memo_entry m = {.has_hop = sh->has_hop, .hop = sh->hop};
    memcpy(m.id, sh->id, sizeof m.id);
    if (i < r->submitted) {
      /* Handed to the audit trail in this run, or before (its ticket is
       * at most the one the entry carries): either way e->ticket covers it. */
      m.recorded = true;
      m.ticket = e->ticket;
    } else {
      m.recorded = sh->recorded;
      m.ticket = sh->ticket;
    }
    bool out = false;
    if (!dlqb_memo_put(p->opt.memory, &m, &out)) failed++;
    else kept++;
    if (out) forgot++;
  }
  if (kept > 0)
    dlqb_log_info("remembered",
                  "%zu copies confirmed in '%s' whose originals were not acked: if they "
                  "come back they are acked, not moved again",
                  kept, p->opt.queue);
  if (forgot > 0)
    dlqb_log_warn("remembered",
                  "forgot the %zu oldest remembered copies (at most %zu are kept): if their "
                  "originals come back they are moved again",
                  forgot, dlqb_memo_max(p->opt.memory));
  if (failed > 0)
    dlqb_log_warn("remembered",
                  "out of memory: %zu copies not remembered; if their originals come back "
                  "they are moved again",
                  failed);
}

/* Records that the handler settled d in the given state; the hop (NULL:
 * none) is kept for the audit trail and after_ack. False when the ring
 * refuses it (see push). */
static bool settle(dlqb_pipe *p, const dlqb_delivery *d, dlqb_ack_state state,
                   const dlqb_hop *hop) {
  bool ok;
  slot_hop *sh = push(p, d, state, &ok);
  if (sh == NULL) return ok; /* held: nothing kept */
  sh->cat_seq = state == DLQB_ACK_PUBLISHED ? p->next_cat_seq : 0;
  p->next_cat_seq = 0;
  sh->has_hop = hop != NULL;
  if (hop != NULL) {
    sh->hop = *hop;
    sh->hop.published_mono_ms = state == DLQB_ACK_PUBLISHED ? dlqb_mono_ms() : 0;
    /* The authenticated broker user, beside the actor it acts for. */
    snprintf(sh->hop.broker_user, sizeof sh->hop.broker_user, "%s", dlqb_link_user(p->link));
  }
  return true;
}

/* Publishes with mandatory on the publishing channel. */
static dlqb_status publish(dlqb_pipe *p, const char *exchange, const char *routing_key,
                           const amqp_basic_properties_t *props, amqp_bytes_t body,
                           dlqb_error *err) {
  int rc = amqp_basic_publish(p->conn, DLQB_PUB_CHANNEL, dlqb_bytes(exchange),
                              dlqb_bytes(routing_key), 1, 0, props, body);
  return rc == AMQP_STATUS_OK ? DLQB_OK : dlqb_link_status(rc, "publish", err);
}

static dlqb_status send_copy(dlqb_pipe *p, const char *exchange, const char *routing_key,
                             const amqp_basic_properties_t *props, amqp_bytes_t body,
                             const dlqb_hop *hop, waiting_copy **queued, dlqb_error *err);

dlqb_status dlqb_pipe_forward(dlqb_pipe *p, const dlqb_delivery *d, const char *exchange,
                              const char *routing_key, const amqp_basic_properties_t *props,
                              amqp_bytes_t body, const dlqb_hop *hop, dlqb_error *err) {
  waiting_copy *queued = NULL;
  dlqb_status st = cat_in(p, hop != NULL ? hop->to : NULL, props, err);
  if (st == DLQB_OK) st = send_copy(p, exchange, routing_key, props, body, hop, &queued, err);
  if (st != DLQB_OK) return st;
  if (settle(p, d, DLQB_ACK_PUBLISHED, hop)) {
    /* A copy waiting for its intent counts once it is sent. */
    if (queued != NULL) queued->counted = true;
    else p->stats.forwarded++;
  }
  return DLQB_OK;
}

/* Room for the caller's header changes plus the pipe's own. */
#define MAX_SETS 32
/* A known header kept by a minimal copy is at most this big, so that what
 * is left always fits a frame. */
#define MINIMAL_VALUE_MAX 2048

/* Makes props publishable from this connection with the header table `in`
 * (NULL: none) and sets applied, fixing what the broker would refuse and
 * loses nothing to fix: a user_id property of another broker user
 * (RabbitMQ accepts a user_id only from that user's own connection, and
 * closes the channel otherwise) moves into the original_user_id header,
 * kept in user_id (256 bytes, the caller's, until the publish). What cannot
 * be fixed is DLQB_EREFUSED: headers that no longer fit one frame
 * (rabbitmq-c would send half a publish and leave the connection broken). */
static dlqb_status prepare(dlqb_pipe *p, amqp_basic_properties_t *props, const amqp_table_t *in,
                           const dlqb_hset *sets, size_t nsets, char *user_id, dlqb_error *err) {
  dlqb_hset all[MAX_SETS];
  if (nsets + 3 > MAX_SETS)
    return dlqb_fail(err, DLQB_EINVAL, "internal error: too many header changes");
  if (nsets > 0) memcpy(all, sets, nsets * sizeof *sets);
  size_t n = nsets;
  /* The source queue's count of its deliveries (a quorum queue's), never
   * the copy's: on 4.0.5 a published x-delivery-count shows on the copy's
   * first delivery as if it were its own (measured), so a DLQ item read
   * by passes would reach the work queue looking delivered already. */
  all[n++] = (dlqb_hset){DLQB_H_X_DELIVERY_COUNT, DLQB_HSET_REMOVE, NULL, 0};
  const char *own = dlqb_link_user(p->link);
  if ((props->_flags & AMQP_BASIC_USER_ID_FLAG) &&
      !(props->user_id.len == strlen(own) &&
        memcmp(props->user_id.bytes, own, props->user_id.len) == 0)) {
    dlqb_text_sanitize(user_id, 256, props->user_id.bytes, props->user_id.len);
    props->_flags &= ~AMQP_BASIC_USER_ID_FLAG;
    all[n++] = (dlqb_hset){DLQB_H_ORIGINAL_USER_ID, DLQB_HSET_STRING, user_id, 0};
  }
  size_t need = (in != NULL && in->num_entries > 0 ? (size_t)in->num_entries : 0) + n;
  if (need > p->headers_cap) {
    /* Grows to the largest table seen, so steady traffic allocates nothing. */
    size_t cap = need < 64 ? 64 : need * 2;
    amqp_table_entry_t *t = realloc(p->headers, cap * sizeof *t);
    if (t == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    p->headers = t;
    p->headers_cap = cap;
  }
  if (dlqb_headers_apply(in, all, n, p->headers, p->headers_cap, &props->headers) != DLQB_OK)
    return dlqb_fail(err, DLQB_EINVAL, "internal error: header table too small");
  props->_flags |= AMQP_BASIC_HEADERS_FLAG;
  size_t frame_max = dlqb_link_frame_max(p->link);
  if (!dlqb_wire_fits(props, frame_max)) {
    size_t size = dlqb_wire_content_header_size(props);
    if (size == SIZE_MAX)
      return dlqb_fail(err, DLQB_EREFUSED, "its headers nest too deep to be sent again");
    return dlqb_fail(err, DLQB_EREFUSED,
                     "its properties take %zu bytes with the bridge's headers, "
                     "more than the broker's frame_max of %zu",
                     size, frame_max);
  }
  return DLQB_OK;
}

dlqb_status dlqb_pipe_forward_rewritten(dlqb_pipe *p, const dlqb_delivery *d, const char *exchange,
                                        const char *routing_key, amqp_basic_properties_t *props,
                                        const dlqb_hset *sets, size_t nsets, const dlqb_hop *hop,
                                        dlqb_error *err) {
  const amqp_table_t *in = (d->props->_flags & AMQP_BASIC_HEADERS_FLAG) ? &d->props->headers : NULL;
  char user_id[256];
  dlqb_status st = prepare(p, props, in, sets, nsets, user_id, err);
  return st == DLQB_OK ? dlqb_pipe_forward(p, d, exchange, routing_key, props, d->body, hop, err)
                       : st;
}

/* The minimal copy of a message the broker would not take as it is: only
 * the headers the bridge knows (each at most MINIMAL_VALUE_MAX bytes), and
 * of the other properties only message_id, delivery mode, timestamp and
 * content type. kept (malloc'd, the caller frees) holds the table's
 * entries; the count of headers left off goes into *dropped. */
static dlqb_status minimal_copy(const amqp_basic_properties_t *in_props,
                                amqp_basic_properties_t *props, amqp_table_t *table,
                                amqp_table_entry_t **kept, int64_t *dropped, dlqb_error *err) {
  const amqp_table_t *in = (in_props->_flags & AMQP_BASIC_HEADERS_FLAG) ? &in_props->headers : NULL;
  size_t nin = in != NULL && in->num_entries > 0 ? (size_t)in->num_entries : 0;
  *kept = calloc(nin > 0 ? nin : 1, sizeof **kept);
  if (*kept == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  *table = (amqp_table_t){0, *kept};
  *dropped = 0;
  for (size_t i = 0; i < nin; i++) {
    const amqp_table_entry_t *e = &in->entries[i];
    amqp_table_t one = {1, (amqp_table_entry_t *)e};
    if (dlqb_header_is_known(e->key) && dlqb_wire_table_size(&one) <= MINIMAL_VALUE_MAX)
      (*kept)[table->num_entries++] = *e;
    else (*dropped)++;
  }
  props->_flags &= AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                   AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
  return DLQB_OK;
}

/* prepare() for a minimal copy: sets plus dropped_headers. */
static dlqb_status prepare_minimal(dlqb_pipe *p, const amqp_basic_properties_t *in_props,
                                   amqp_basic_properties_t *props, const dlqb_hset *sets,
                                   size_t nsets, char *user_id, amqp_table_entry_t **kept,
                                   dlqb_error *err) {
  amqp_table_t table;
  int64_t dropped = 0;
  if (nsets + 1 > MAX_SETS)
    return dlqb_fail(err, DLQB_EINVAL, "internal error: too many header changes");
  dlqb_status st = minimal_copy(in_props, props, &table, kept, &dropped, err);
  if (st != DLQB_OK) return st;
  dlqb_hset all[MAX_SETS];
  if (nsets > 0) memcpy(all, sets, nsets * sizeof *sets);
  all[nsets] = (dlqb_hset){DLQB_H_DROPPED_HEADERS, DLQB_HSET_INT, NULL, dropped};
  return prepare(p, props, &table, all, nsets + 1, user_id, err);
}

dlqb_status dlqb_pipe_forward_minimal(dlqb_pipe *p, const dlqb_delivery *d, const char *exchange,
                                      const char *routing_key, amqp_basic_properties_t *props,
                                      const dlqb_hset *sets, size_t nsets, const dlqb_hop *hop,
                                      dlqb_error *err) {
  amqp_table_entry_t *kept = NULL;
  char user_id[256];
  dlqb_status st = prepare_minimal(p, d->props, props, sets, nsets, user_id, &kept, err);
  if (st == DLQB_OK) st = dlqb_pipe_forward(p, d, exchange, routing_key, props, d->body, hop, err);
  free(kept);
  return st;
}

dlqb_status dlqb_pipe_republish(dlqb_pipe *p, const dlqb_returned *ret, const char *exchange,
                                const char *routing_key, amqp_basic_properties_t *props,
                                const dlqb_hset *sets, size_t nsets, const dlqb_hop *hop,
                                dlqb_error *err) {
  amqp_table_entry_t *kept = NULL;
  char user_id[256];
  dlqb_status st = prepare_minimal(p, ret->props, props, sets, nsets, user_id, &kept, err);
  const slot_hop *was = dlqb_ackring_payload_at(&p->ring, ret->index);
  /* Its first copy never arrived: take back the "in" said for it. */
  if (st == DLQB_OK && was->cat_seq != 0) st = cat_out(p, was->hop.to, was->hop.message_id, err);
  if (st == DLQB_OK) st = cat_in(p, hop->to, props, err);
  waiting_copy *queued;
  if (st == DLQB_OK) st = send_copy(p, exchange, routing_key, props, ret->body, hop, &queued, err);
  free(kept);
  if (st != DLQB_OK) return st;
  dlqb_ackring_rearm(&p->ring, ret->index);
  slot_hop *sh = dlqb_ackring_payload_at(&p->ring, ret->index);
  sh->cat_seq = p->next_cat_seq;
  p->next_cat_seq = 0;
  sh->has_hop = true;
  sh->hop = *hop;
  sh->hop.published_mono_ms = dlqb_mono_ms();
  snprintf(sh->hop.broker_user, sizeof sh->hop.broker_user, "%s", dlqb_link_user(p->link));
  return DLQB_OK;
}

void dlqb_pipe_keep_returned(dlqb_pipe *p, const dlqb_returned *ret) {
  slot_hop *sh = dlqb_ackring_payload_at(&p->ring, ret->index);
  if (sh->cat_seq != 0) {
    /* Its copy never arrived: take back the "in" said for it (a failure
     * leaves the catalog claiming it, which a verifying pass corrects). */
    dlqb_error ignored;
    (void)cat_out(p, sh->hop.to, sh->hop.message_id, &ignored);
    sh->cat_seq = 0;
  }
  sh->has_hop = false; /* nothing moved: nothing to record */
  dlqb_ackring_drop(&p->ring, ret->index);
  p->stats.held++;
}

void dlqb_pipe_ack(dlqb_pipe *p, const dlqb_delivery *d, const dlqb_hop *hop) {
  (void)settle(p, d, DLQB_ACK_SETTLED, hop);
}

static void note_held(dlqb_pipe *p, amqp_channel_t channel, uint64_t tag) {
  held_run *last = p->nruns > 0 ? &p->runs[p->nruns - 1] : NULL;
  if (last != NULL && last->channel == channel && last->last + 1 == tag) {
    last->last = tag;
    return;
  }
  if (p->nruns == p->runs_cap) {
    size_t cap = p->runs_cap > 0 ? 2 * p->runs_cap : 64;
    held_run *n = realloc(p->runs, cap * sizeof *n);
    if (n == NULL) {
      p->runs_lost = true;
      return;
    }
    p->runs = n;
    p->runs_cap = cap;
  }
  p->runs[p->nruns++] = (held_run){channel, tag, tag};
}

void dlqb_pipe_hold(dlqb_pipe *p, const dlqb_delivery *d) {
  if (!settle(p, d, DLQB_ACK_HELD, NULL)) return;
  p->stats.held++;
  note_held(p, d->channel, d->delivery_tag);
}

/* Hands the hops of the entries that became ready since the last call to
 * the audit trail (one batch, written and synced by its writer thread
 * while we go on); each entry keeps the ticket that covers it. */
static dlqb_status submit_ready(dlqb_pipe *p, dlqb_error *err) {
  dlqb_ackring *r = &p->ring;
  if (p->opt.audit == NULL) {
    /* No audit trail: everything ready is durable (dlqb_audit_durable of
     * NULL is UINT64_MAX), whatever ticket its slot last carried. */
    dlqb_ackring_mark_submitted(r, 0);
    return DLQB_OK;
  }
  if (p->ack_hops_cap < r->ready - r->submitted) {
    size_t cap = r->cap;
    const dlqb_hop **n = realloc(p->ack_hops, cap * sizeof *n);
    if (n == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    p->ack_hops = n;
    p->ack_hops_cap = cap;
  }
  size_t nhops = 0;
  /* An entry settled against the memory waits for the record an earlier
   * run handed over: its ticket is older than any this run gets, so the
   * batch's ticket (or, with nothing new, that one) covers it. */
  uint64_t earlier = 0;
  for (size_t i = r->submitted; i < r->ready; i++) {
    const slot_hop *sh = dlqb_ackring_payload_at(r, i);
    if (sh->recorded && sh->ticket > earlier) earlier = sh->ticket;
    else if (!sh->recorded && sh->has_hop) p->ack_hops[nhops++] = &sh->hop;
  }
  uint64_t ticket = r->last_ticket;
  if (nhops > 0) {
    dlqb_status st = dlqb_audit_submit(p->opt.audit, p->ack_hops, nhops, &ticket, err);
    if (st != DLQB_OK) return st;
  }
  if (earlier > ticket) ticket = earlier;
  dlqb_ackring_mark_submitted(r, ticket);
  return DLQB_OK;
}

/* Sends the acks for what the audit trail has made durable (all that was
 * submitted when it is off), as the ring plans them, and reports each
 * acked hop. */
static dlqb_status ack_durable(dlqb_pipe *p, dlqb_error *err) {
  dlqb_ackring *r = &p->ring;
  dlqb_ack_plan plan;
  if (!dlqb_ackring_plan(r, dlqb_audit_durable(p->opt.audit), &plan)) return DLQB_OK;
  if (p->cat_on) {
    /* Only originals whose catalog "in" is confirmed (sequence numbers
     * ascend along the ring). */
    size_t run = 0;
    while (run < plan.run) {
      const slot_hop *sh = dlqb_ackring_payload_at(r, run);
      if (sh->cat_seq > p->cat_confirmed) break;
      run++;
    }
    if (run == 0) return DLQB_OK;
    dlqb_ackring_plan_clip(r, &plan, run);
  }
  int rc = AMQP_STATUS_OK;
  if (plan.multiple) {
    rc = amqp_basic_ack(p->conn, plan.multiple_channel, plan.multiple_tag, 1);
  } else {
    /* Each on the channel that delivered it. */
    for (size_t i = 0; i < plan.run && rc == AMQP_STATUS_OK; i++) {
      const dlqb_ack_entry *e = dlqb_ackring_at(r, i);
      if (e->state == DLQB_ACK_SETTLED) rc = amqp_basic_ack(p->conn, e->channel, e->tag, 0);
    }
  }
  if (rc != AMQP_STATUS_OK) return dlqb_link_status(rc, "ack", err);
  long long now = dlqb_mono_ms();
  for (size_t i = 0; i < plan.run; i++) {
    const dlqb_ack_entry *e = dlqb_ackring_at(r, i);
    if (e->state != DLQB_ACK_SETTLED) continue; /* dropped: left in the queue */
    p->stats.acked++;
    const slot_hop *sh = dlqb_ackring_payload_at(r, i);
    /* The original is gone from its queue: now, not before, the catalog
     * may say so. */
    dlqb_status cst = sh->has_hop ? cat_out(p, sh->hop.from, sh->hop.message_id, err) : DLQB_OK;
    if (cst != DLQB_OK) {
      dlqb_ackring_commit(r, &plan);
      return cst;
    }
    if (p->h.after_ack != NULL && sh->has_hop) {
      /* seq 0: this run published nothing for it (an ack, or a copy an
       * earlier run made). */
      double lat = e->seq ? (double)(now - sh->hop.published_mono_ms) / 1000.0 : -1.0;
      p->h.after_ack(p->h.ctx, &sh->hop, lat);
    }
  }
  dlqb_ackring_commit(r, &plan);
  return DLQB_OK;
}

/* How many ready entries to gather before handing them on. Without an
 * audit trail that is the ack itself: a quarter of the window per ack
 * frame. With one, every entry also waits for a sync, which the writer
 * thread groups by itself, so entries go to it at once: waiting here would
 * only add to the time each holds a slot of the window. */
static size_t submit_batch(const dlqb_pipe *p) {
  return p->opt.audit != NULL ? 1 : (p->window + 3) / 4;
}

/* True when the head entry's hop is durable: something can be acked. */
static bool head_durable(const dlqb_pipe *p) {
  return p->ring.submitted > 0 &&
         dlqb_ackring_at(&p->ring, 0)->ticket <= dlqb_audit_durable(p->opt.audit) &&
         ((const slot_hop *)dlqb_ackring_payload_at(&p->ring, 0))->cat_seq <= p->cat_confirmed;
}

/* Submits what is ready and acks what is durable. */
static dlqb_status flush_acks(dlqb_pipe *p, dlqb_error *err) {
  dlqb_status st = p->ring.ready > p->ring.submitted ? submit_ready(p, err) : DLQB_OK;
  if (st == DLQB_OK && head_durable(p)) st = ack_durable(p, err);
  return st;
}

/* Sleeps until the broker sends something, the audit trail finishes a
 * write, or timeout_ms passes. Used only while acks wait on the audit
 * trail: otherwise the frame read itself is the wait. */
static void wait_socket_or_audit(dlqb_pipe *p, int timeout_ms) {
  struct pollfd fds[2] = {{.fd = amqp_get_sockfd(p->conn), .events = POLLIN},
                          {.fd = dlqb_audit_wake_fd(p->opt.audit), .events = POLLIN}};
  (void)poll(fds, 2, timeout_ms);
  dlqb_audit_clear_wake(p->opt.audit);
}

/* Write batching. rabbitmq-c sends every frame with its own send(), and a
 * publish is three frames: on loopback each pushed segment costs the broker
 * a wakeup and a read. While frames we already received wait in the
 * library's buffer, the socket is corked, so the publishes and acks they
 * cause leave in a few full segments; it is uncorked (which sends
 * everything) before any read that may block, so nothing we wrote waits on
 * the broker. The kernel also flushes a cork after 200 ms. */
static void set_cork(dlqb_pipe *p, bool on) {
  if (p->corked == on) return;
  int fd = amqp_get_sockfd(p->conn);
  int v = on ? 1 : 0;
  /* A failure only costs batching, never correctness: ignore it. */
  if (fd >= 0) (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &v, sizeof v);
  p->corked = on;
}

static bool input_buffered(dlqb_pipe *p) {
  return amqp_frames_enqueued(p->conn) || amqp_data_in_buffer(p->conn);
}

static void log_connection_method(const amqp_frame_t *f) {
  if (f->payload.method.id == AMQP_CONNECTION_BLOCKED_METHOD) {
    const amqp_connection_blocked_t *b = f->payload.method.decoded;
    dlqb_log_warn("broker_blocked", "broker blocked publishing: %.*s", (int)b->reason.len,
                  (const char *)b->reason.bytes);
  } else if (f->payload.method.id == AMQP_CONNECTION_UNBLOCKED_METHOD) {
    dlqb_log_info("broker_unblocked", "broker unblocked publishing");
  }
}

static dlqb_status closed_by_broker(dlqb_pipe *p, const amqp_frame_t *f, dlqb_error *err) {
  if (f->payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const amqp_connection_close_t *c = f->payload.method.decoded;
    amqp_connection_close_ok_t ok = {0};
    amqp_send_method(p->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    return dlqb_fail(err, DLQB_ECONN, "connection closed by broker: %.*s", (int)c->reply_text.len,
                     (const char *)c->reply_text.bytes);
  }
  const amqp_channel_close_t *c = f->payload.method.decoded;
  amqp_channel_close_ok_t ok = {0};
  amqp_send_method(p->conn, f->channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
  if (f->channel == DLQB_PUB_CHANNEL) {
    /* The consuming channel is still open: what was confirmed (and
     * recorded) before the close can still be acked, and is (run_loop's
     * DLQB_EBROKER path); nothing confirmed after it is believed. */
    dlqb_ackring_fail(&p->ring);
    return dlqb_fail(err, DLQB_EBROKER, "publishing channel closed by broker: %.*s",
                     (int)c->reply_text.len, (const char *)c->reply_text.bytes);
  }
  if (c->reply_code == DLQB_REPLY_PRECONDITION_FAILED && p->ring.count + p->ring.held > 0)
    /* The one 406 a consuming channel gets while deliveries are unacked:
     * they stayed so longer than the broker's consumer_timeout (30 min by
     * default), e.g. behind an audit outage or a slow --rate pass. They
     * return to the queue; say what to change. */
    return dlqb_fail(err, DLQB_ECONN,
                     "consuming channel closed by broker: %.*s (deliveries unacked "
                     "longer than the broker's consumer_timeout: see docs/reliability.md, "
                     "\"consumer_timeout\")",
                     (int)c->reply_text.len, (const char *)c->reply_text.bytes);
  return dlqb_fail(err, DLQB_ECONN, "channel closed by broker: %.*s", (int)c->reply_text.len,
                   (const char *)c->reply_text.bytes);
}

static dlqb_status dispatch(dlqb_pipe *p, const amqp_frame_t *f, dlqb_error *err);
static bool limit_reached(const dlqb_pipe *p);

/* Waits for the next content frame of the consuming channel, handling the
 * connection-level notices and publisher confirms (the publishing channel)
 * that the broker may interleave. */
static dlqb_status content_frame(dlqb_pipe *p, amqp_channel_t ch, uint8_t type, amqp_frame_t *f,
                                 dlqb_error *err) {
  for (;;) {
    if (!input_buffered(p)) set_cork(p, false);
    int rc = amqp_simple_wait_frame(p->conn, f);
    if (rc != AMQP_STATUS_OK) return dlqb_link_status(rc, "read message", err);
    if (f->channel == 0 && f->frame_type == AMQP_FRAME_METHOD) {
      if (f->payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) return closed_by_broker(p, f, err);
      log_connection_method(f);
      continue;
    }
    if ((f->channel == DLQB_PUB_CHANNEL || is_cat_channel(p, f->channel)) &&
        f->frame_type == AMQP_FRAME_METHOD) {
      dlqb_status st = dispatch(p, f, err);
      if (st != DLQB_OK) return st;
      continue;
    }
    if (f->channel != ch || f->frame_type != type)
      return dlqb_fail(err, DLQB_ECONN,
                       "protocol error: unexpected frame type %d while reading a message",
                       f->frame_type);
    return DLQB_OK;
  }
}

static dlqb_status read_content(dlqb_pipe *p, amqp_channel_t ch,
                                const amqp_basic_properties_t **props, amqp_bytes_t *body,
                                dlqb_error *err) {
  amqp_frame_t f;
  dlqb_status st = content_frame(p, ch, AMQP_FRAME_HEADER, &f, err);
  if (st != DLQB_OK) return st;
  *props = f.payload.properties.decoded;
  uint64_t size = f.payload.properties.body_size;
  if (size > MAX_BODY_BYTES)
    return dlqb_fail(err, DLQB_ECONN, "message body of %llu bytes exceeds the %u byte limit",
                     (unsigned long long)size, MAX_BODY_BYTES);
  if (size > p->body_cap) {
    /* The buffer only grows, so steady traffic allocates nothing. */
    unsigned char *nb = realloc(p->body, size);
    if (nb == NULL)
      return dlqb_fail(err, DLQB_ENOMEM, "out of memory for a %llu byte message",
                       (unsigned long long)size);
    p->body = nb;
    p->body_cap = size;
  }
  size_t got = 0;
  while (got < size) {
    st = content_frame(p, ch, AMQP_FRAME_BODY, &f, err);
    if (st != DLQB_OK) return st;
    amqp_bytes_t frag = f.payload.body_fragment;
    if (frag.len > size - got) return dlqb_fail(err, DLQB_ECONN, "protocol error: body overrun");
    memcpy(p->body + got, frag.bytes, frag.len);
    got += frag.len;
  }
  body->len = size;
  body->bytes = p->body;
  return DLQB_OK;
}

/* Copies a bytes field of props into pool (the flag says it is there). */
static bool keep_bytes(amqp_pool_t *pool, amqp_basic_properties_t *props, amqp_flags_t flag,
                       amqp_bytes_t *b) {
  if (!(props->_flags & flag) || b->len == 0) return true;
  amqp_bytes_t copy;
  amqp_pool_alloc_bytes(pool, b->len, &copy);
  if (copy.bytes == NULL) return false;
  memcpy(copy.bytes, b->bytes, b->len);
  *b = copy;
  return true;
}

/* Copies props (and their headers) into pool and body into a malloc'd
 * buffer (*body_out, NULL for an empty body): what a message needs to
 * outlive the connection's buffers and the pipe's reused header table.
 * False when out of memory (the pool then holds what was copied). */
static bool copy_message(amqp_pool_t *pool, const amqp_basic_properties_t *in, amqp_bytes_t body,
                         amqp_basic_properties_t *pr, unsigned char **body_out) {
  *pr = *in;
  *body_out = NULL;
  bool ok = keep_bytes(pool, pr, AMQP_BASIC_CONTENT_TYPE_FLAG, &pr->content_type) &&
            keep_bytes(pool, pr, AMQP_BASIC_CONTENT_ENCODING_FLAG, &pr->content_encoding) &&
            keep_bytes(pool, pr, AMQP_BASIC_CORRELATION_ID_FLAG, &pr->correlation_id) &&
            keep_bytes(pool, pr, AMQP_BASIC_REPLY_TO_FLAG, &pr->reply_to) &&
            keep_bytes(pool, pr, AMQP_BASIC_EXPIRATION_FLAG, &pr->expiration) &&
            keep_bytes(pool, pr, AMQP_BASIC_MESSAGE_ID_FLAG, &pr->message_id) &&
            keep_bytes(pool, pr, AMQP_BASIC_TYPE_FLAG, &pr->type) &&
            keep_bytes(pool, pr, AMQP_BASIC_USER_ID_FLAG, &pr->user_id) &&
            keep_bytes(pool, pr, AMQP_BASIC_APP_ID_FLAG, &pr->app_id) &&
            keep_bytes(pool, pr, AMQP_BASIC_CLUSTER_ID_FLAG, &pr->cluster_id);
  if (ok && (pr->_flags & AMQP_BASIC_HEADERS_FLAG))
    ok = amqp_table_clone(&in->headers, &pr->headers, pool) == AMQP_STATUS_OK;
  if (ok && body.len > 0) {
    ok = (*body_out = malloc(body.len)) != NULL;
    if (ok) memcpy(*body_out, body.bytes, body.len);
  }
  return ok;
}

/* Keeps d (its properties in the connection's buffers, its body in
 * p->body) for after the current delivery: everything is copied, so the
 * buffers may be reused. */
static dlqb_status keep(dlqb_pipe *p, const dlqb_delivery *d, dlqb_error *err) {
  kept_delivery *k = calloc(1, sizeof *k);
  if (k == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for a delivery kept in a pause");
  init_amqp_pool(&k->pool, 4096);
  k->d = *d;
  if (!copy_message(&k->pool, d->props, d->body, &k->props, &k->body)) {
    kept_free(k);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory for a delivery kept in a pause");
  }
  k->d.props = &k->props;
  k->d.body = (amqp_bytes_t){.len = d->body.len, .bytes = k->body};
  if (p->kept_tail != NULL) p->kept_tail->next = k;
  else p->kept_head = k;
  p->kept_tail = k;
  p->kept++;
  return DLQB_OK;
}

/* ---- copies that wait for their intent (opt.record_intents) ---- */

static bool intents_on(const dlqb_pipe *p) { return p->opt.record_intents && p->opt.audit != NULL; }

/* Publishes a copy for hop: at once without intents; with them, its
 * intent (dlqb_hop_intent; none for a copy without a hop) goes to the
 * audit trail now and the copy waits, copied, until that record is durable
 * (publish_waiting), so that no copy ever reaches the broker unrecorded;
 * *queued is then its entry. Copies leave in the order they were given, so
 * the ring's publish sequence numbers stay theirs. */
static dlqb_status send_copy(dlqb_pipe *p, const char *exchange, const char *routing_key,
                             const amqp_basic_properties_t *props, amqp_bytes_t body,
                             const dlqb_hop *hop, waiting_copy **queued, dlqb_error *err) {
  *queued = NULL;
  if (!intents_on(p)) return publish(p, exchange, routing_key, props, body, err);
  waiting_copy *w = calloc(1, sizeof *w);
  if (w == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory for a copy");
  init_amqp_pool(&w->pool, 4096);
  w->body_len = body.len;
  size_t el = strlen(exchange) + 1, rl = strlen(routing_key) + 1;
  w->exchange = amqp_pool_alloc(&w->pool, el + rl);
  bool ok = w->exchange != NULL && copy_message(&w->pool, props, body, &w->props, &w->body);
  if (!ok) {
    waiting_free(w);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory for a copy");
  }
  memcpy(w->exchange, exchange, el);
  w->routing_key = w->exchange + el;
  memcpy(w->routing_key, routing_key, rl);
  if (hop != NULL) {
    dlqb_hop_intent(&w->intent, hop);
    snprintf(w->intent.broker_user, sizeof w->intent.broker_user, "%s", dlqb_link_user(p->link));
    const dlqb_hop *hops[] = {&w->intent};
    dlqb_status st = dlqb_audit_submit(p->opt.audit, hops, 1, &w->ticket, err);
    if (st != DLQB_OK) {
      waiting_free(w);
      return st;
    }
    w->has_intent = true;
  } /* else nothing to record: it waits only for the copies before it */
  if (p->waiting_tail != NULL) p->waiting_tail->next = w;
  else p->waiting_head = w;
  p->waiting_tail = w;
  *queued = w;
  return DLQB_OK;
}

/* Publishes the waiting copies whose intents are durable, in order. */
static dlqb_status publish_waiting(dlqb_pipe *p, dlqb_error *err) {
  if (p->waiting_head == NULL) return DLQB_OK;
  uint64_t durable = dlqb_audit_durable(p->opt.audit);
  while (p->waiting_head != NULL && p->waiting_head->ticket <= durable) {
    waiting_copy *w = p->waiting_head;
    amqp_bytes_t body = {w->body_len, w->body};
    dlqb_status st = publish(p, w->exchange, w->routing_key, &w->props, body, err);
    if (st != DLQB_OK) return st;
    if (w->counted) p->stats.forwarded++;
    p->waiting_head = w->next;
    if (p->waiting_head == NULL) p->waiting_tail = NULL;
    waiting_free(w);
  }
  return DLQB_OK;
}

static dlqb_status handle_delivery(dlqb_pipe *p, const dlqb_delivery *in, dlqb_error *err);

static dlqb_status on_deliver(dlqb_pipe *p, amqp_channel_t ch, const amqp_basic_deliver_t *m,
                              dlqb_error *err) {
  dlqb_delivery d = {.channel = ch, .delivery_tag = m->delivery_tag, .redelivered = m->redelivered};
  /* In a pause the current delivery's body is in p->body: read this one
   * into a buffer of its own. */
  unsigned char *cur_body = p->body;
  size_t cur_cap = p->body_cap;
  if (p->pausing) {
    p->body = NULL;
    p->body_cap = 0;
  }
  dlqb_status st = read_content(p, ch, &d.props, &d.body, err);
  if (st == DLQB_OK) {
    p->stats.delivered++;
    p->last_delivery_ms = dlqb_mono_ms();
    p->ready_checked_ms = 0;
  }
  if (p->pausing) {
    if (st == DLQB_OK) st = keep(p, &d, err);
    free(p->body);
    p->body = cur_body;
    p->body_cap = cur_cap;
    return st;
  }
  return st == DLQB_OK ? handle_delivery(p, &d, err) : st;
}

/* Hands one delivery to the handler (or holds it, or settles it against
 * the memory) and checks that it was settled. */
static dlqb_status handle_delivery(dlqb_pipe *p, const dlqb_delivery *in, dlqb_error *err) {
  dlqb_delivery d = *in;
  dlqb_status st = DLQB_OK;
  /* Past the limit or after a stop: leave it for the queue. After a cancel
   * sent only because the pass was idle it is the pass's all the same: the
   * broker gave it to our consumer before it handled the cancel (the
   * cancel-ok comes behind it), so it is handled like any other. A broker
   * slow to send what it gave (4.0.5 over a 25,000-deep header) answers
   * the idle check's declare with none ready, and its deliveries come
   * behind that answer; holding them made every such pass examine none. */
  p->settled_now = false;
  p->cur = &d;
  p->cur_id_state = 0;
  dlqb_memo_entry was;
  const uint8_t *id;
  if (p->holding_late || limit_reached(p)) {
    dlqb_pipe_hold(p, &d);
  } else if (d.redelivered && dlqb_memo_size(p->opt.memory) > 0 && (id = current_id(p)) != NULL &&
             dlqb_memo_take(p->opt.memory, id, &was)) {
    /* A copy of it is confirmed already (a run before this one made it
     * and lost its channel before acking): not again. */
    settle_remembered(p, &d, &was);
  } else {
    st = p->h.on_delivery(p->h.ctx, p, &d, err);
  }
  p->cur = NULL;
  if (st != DLQB_OK) return st;
  if (!p->settled_now) return dlqb_fail(err, DLQB_EINVAL, "internal error: delivery not settled");
  if (p->settle_refused)
    return dlqb_fail(err, DLQB_ECONN,
                     "protocol error: delivery tag %llu out of order (or out "
                     "of memory for the messages in flight)",
                     (unsigned long long)d.delivery_tag);
  return DLQB_OK;
}

/* The tag of consumer i (0-based): "dlqb", then "dlqb-2", "dlqb-3", ... */
static amqp_bytes_t consumer_tag(unsigned i, char *buf, size_t len) {
  if (i == 0) snprintf(buf, len, "dlqb");
  else snprintf(buf, len, "dlqb-%u", i + 1);
  return dlqb_bytes(buf);
}

static bool consuming(const dlqb_pipe *p) { return p->cancelled < p->consumers; }

/* Cancels the next consumer of the current channel not yet cancelled. */
static dlqb_status cancel_one(dlqb_pipe *p, dlqb_error *err) {
  char tag[32];
  amqp_basic_cancel_t c = {.consumer_tag = consumer_tag(p->cancels_out, tag, sizeof tag),
                           .nowait = 0};
  p->cancels_out++;
  int rc = amqp_send_method(p->conn, p->ch, AMQP_BASIC_CANCEL_METHOD, &c);
  return dlqb_link_status(rc, "cancel consumer", err);
}

/* Cancels every consumer of the current channel the broker has confirmed
 * and no cancel was sent for; one whose consume-ok is still on its way is
 * cancelled when it arrives (dispatch): RabbitMQ 3.10 crashes the channel
 * (INTERNAL_ERROR, badkey in consumer_monitor) on a cancel that overtakes
 * its consumer's registration. */
static dlqb_status cancel_confirmed(dlqb_pipe *p, dlqb_error *err) {
  while (p->cancels_out < p->consumers_ok) {
    dlqb_status st = cancel_one(p, err);
    if (st != DLQB_OK) return st;
  }
  return DLQB_OK;
}

/* Ends consuming: cancels the current channel's consumers (earlier
 * channels' are cancelled already). The cancel-oks arrive through
 * dispatch. */
static dlqb_status send_cancel(dlqb_pipe *p, dlqb_error *err) {
  if (p->cancel_sent) return DLQB_OK;
  p->cancel_sent = true;
  return cancel_confirmed(p, err);
}

/* Held deliveries stay unacked, and each consumer gets at most a window of
 * unacked ones, so a pass that holds more than a window would stall. With
 * opt.deep, another consumer on the same queue is added (its consume sent
 * without waiting: its consume-ok arrives through dispatch) whenever held
 * deliveries leave less than half a window free.
 *
 * Up to per_channel consumers share a channel; then the pass moves on to
 * the next channel instead. The broker keeps each channel's unacked
 * deliveries in one list, and every single ack walks it from its oldest
 * entry to the one acked (rabbit_channel:collect_acks, 3.10 and 4.0 alike),
 * rebuilding what it passed: with every held delivery on one channel, each
 * ack behind them costs O(held), and a filtered move O(held x moved). On
 * channels of at most per_channel windows each, an ack walks at most that.
 * The move is sequential: the channel's consumers are cancelled, and the
 * next channel consumes only once every cancel-ok has come (the queue sends
 * a channel's deliveries before its cancel-ok), so the deliveries still
 * follow the queue's order, channel after channel. The held ones stay on
 * their channels (open, not consuming) until the connection closes; the
 * queue puts every channel's back in its own order (rabbit_variable_queue
 * requeue merges by sequence number), so the DLQ's order stays as it was. */
static uint64_t held_here(const dlqb_pipe *p) { return p->ring.held - p->held_before; }

static bool channel_left(const dlqb_pipe *p) { return p->ch < p->ch_last; }

static dlqb_status add_consumer_if_full(dlqb_pipe *p, dlqb_error *err) {
  if (!p->opt.deep || p->cancel_sent || p->switching || p->consumers == 0 ||
      p->consumers >= MAX_CONSUMERS || p->consumers_ok < p->consumers)
    return DLQB_OK;
  /* Only held deliveries eat windows for good: what is in flight will be
   * acked (or, when the audit trail cannot write, must stay bounded). */
  uint64_t capacity = (uint64_t)p->consumers * p->window;
  uint64_t held = held_here(p);
  if (held + p->window / 2 < capacity) return DLQB_OK;
  uint64_t unacked = held + p->ring.count;
  /* Nothing more to come that the free windows cannot take. */
  if (p->opt.max_messages > 0 && (p->settled_total >= p->opt.max_messages ||
                                  p->opt.max_messages - p->settled_total <=
                                      capacity - (unacked < capacity ? unacked : capacity)))
    return DLQB_OK;
  if (p->consumers >= p->per_channel && channel_left(p)) {
    p->switching = true;
    return cancel_confirmed(p, err);
  }
  char tag[32];
  amqp_basic_consume_t c = {.queue = dlqb_bytes(p->opt.queue),
                            .consumer_tag = consumer_tag(p->consumers, tag, sizeof tag),
                            .arguments =
                                p->opt.consume_args ? *p->opt.consume_args : amqp_empty_table};
  int rc = amqp_send_method(p->conn, p->ch, AMQP_BASIC_CONSUME_METHOD, &c);
  if (rc != AMQP_STATUS_OK) return dlqb_link_status(rc, "add a consumer", err);
  p->consumers++;
  return DLQB_OK;
}

/* A failed reply on a channel other than the link's own: the pass ends
 * with the connection (dlqb_link_reply would answer on the link's channel). */
static dlqb_status channel_reply(dlqb_pipe *p, amqp_channel_t ch, const char *what,
                                 dlqb_error *err) {
  amqp_rpc_reply_t r = amqp_get_rpc_reply(p->conn);
  if (r.reply_type == AMQP_RESPONSE_NORMAL) return DLQB_OK;
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
    return dlqb_link_status(r.library_error, what, err);
  return dlqb_fail(err, DLQB_ECONN, "cannot %s on channel %u: refused by the broker", what,
                   (unsigned)ch);
}

/* Once every consumer of the channel left behind has its cancel-ok: the
 * next channel, its prefetch and its first consumer (each awaited; frames
 * of the other channels that arrive meanwhile wait in rabbitmq-c's queue
 * for the loop). */
static dlqb_status next_channel(dlqb_pipe *p, dlqb_error *err) {
  amqp_channel_t ch = p->ch == DLQB_CHANNEL ? DEEP_FIRST_CHANNEL : p->ch + 1;
  /* Each request below waits for its reply: on a corked socket (the loop
   * corks while input is buffered) it would sit until the kernel's cork
   * timeout of 200 ms. Measured: 0.6 s a channel, 40 of the 45 s of a
   * pass over 200,000 items on 70 channels. */
  set_cork(p, false);
  amqp_channel_open(p->conn, ch);
  dlqb_status st = channel_reply(p, ch, "open a consuming channel", err);
  if (st != DLQB_OK) return st;
  amqp_basic_qos(p->conn, ch, 0, (uint16_t)p->window, 0);
  if ((st = channel_reply(p, ch, "set prefetch", err)) != DLQB_OK) return st;
  char tag[32];
  amqp_basic_consume(p->conn, ch, dlqb_bytes(p->opt.queue), consumer_tag(0, tag, sizeof tag), 0, 0,
                     0, p->opt.consume_args ? *p->opt.consume_args : amqp_empty_table);
  if ((st = channel_reply(p, ch, "consume", err)) != DLQB_OK) return st;
  p->prev_ch = p->ch;
  p->ch = ch;
  p->switching = false;
  p->held_before = p->ring.held;
  p->consumers = p->consumers_ok = 1;
  p->cancels_out = p->cancelled = 0;
  p->stats.channels++;
  return DLQB_OK;
}

/* Matches a ring entry against a returned message: same queue, same
 * message_id; the oldest such unconfirmed publish is the one returned
 * (the broker returns and confirms a channel's publishes in order). */
typedef struct {
  const dlqb_pipe *p;
  const char *queue, *message_id;
} return_match;

static bool matches_return(void *ctx, size_t i) {
  const return_match *m = ctx;
  const slot_hop *sh = dlqb_ackring_payload_at(&m->p->ring, i);
  return sh->has_hop && strcmp(sh->hop.to, m->queue) == 0 &&
         strcmp(sh->hop.message_id, m->message_id) == 0;
}

/* A basic.return: reads the returned message (its content follows on the
 * publishing channel), finds the publish it was and lets the handler
 * settle it, so one unroutable message neither stops nor duplicates the
 * others. Without a handler, or when it cannot be placed, the run ends. */
static dlqb_status on_return(dlqb_pipe *p, const amqp_basic_return_t *r, dlqb_error *err) {
  char queue[DLQB_NAME_MAX], text[160], why[320];
  dlqb_text_sanitize(queue, sizeof queue, r->routing_key.bytes, r->routing_key.len);
  dlqb_text_sanitize(text, sizeof text, r->reply_text.bytes, r->reply_text.len);
  snprintf(why, sizeof why, "the broker returned it from '%s': %u %s (is the queue declared?)",
           queue, (unsigned)r->reply_code, text);
  amqp_message_t msg;
  amqp_rpc_reply_t rr = amqp_read_message(p->conn, DLQB_PUB_CHANNEL, &msg, 0);
  if (rr.reply_type != AMQP_RESPONSE_NORMAL) {
    dlqb_ackring_fail(&p->ring);
    return dlqb_link_reply(p->link, rr, "read a returned message", err);
  }
  char message_id[sizeof((dlqb_hop *)0)->message_id] = "";
  if (msg.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG)
    dlqb_text_sanitize(message_id, sizeof message_id, msg.properties.message_id.bytes,
                       msg.properties.message_id.len);
  return_match m = {p, queue, message_id};
  size_t i = p->h.on_returned != NULL ? dlqb_ackring_find_published(&p->ring, matches_return, &m)
                                      : (size_t)-1;
  dlqb_status st;
  if (i == (size_t)-1) {
    dlqb_ackring_fail(&p->ring);
    st = dlqb_fail(err, DLQB_EBROKER, "publish to '%s' was returned: %s (is the queue declared?)",
                   queue, text);
  } else {
    dlqb_ackring_return(&p->ring, i);
    const slot_hop *sh = dlqb_ackring_payload_at(&p->ring, i);
    dlqb_hop hop = sh->hop; /* the handler may replace the slot's */
    dlqb_returned ret = {
        .index = i, .props = &msg.properties, .body = msg.body, .hop = &hop, .why = why};
    st = p->h.on_returned(p->h.ctx, p, &ret, err);
  }
  amqp_destroy_message(&msg);
  return st;
}

/* A frame of the catalog's channel: its confirms; anything else ends the
 * session as a refusal of the copies would (what waits for an "in" that
 * will not be confirmed stays unacked and is redelivered). */
static dlqb_status cat_dispatch(dlqb_pipe *p, const amqp_frame_t *f, dlqb_error *err) {
  if (!p->cat_on || f->channel != p->cat_ch) {
    /* A channel given up on (its probe went unconfirmed): only answer a close. */
    if (f->payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
      amqp_channel_close_ok_t ok = {0};
      amqp_send_method(p->conn, f->channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    }
    return DLQB_OK;
  }
  switch (f->payload.method.id) {
  case AMQP_BASIC_ACK_METHOD: {
    const amqp_basic_ack_t *a = f->payload.method.decoded;
    if (a->delivery_tag > p->cat_confirmed && a->delivery_tag <= p->cat_published) {
      p->cat_confirmed = a->delivery_tag;
      p->cat_waiting_ms = p->cat_confirmed < p->cat_published ? dlqb_mono_ms() : 0;
    }
    return DLQB_OK;
  }
  case AMQP_BASIC_RETURN_METHOD: {
    amqp_message_t msg;
    amqp_rpc_reply_t rr = amqp_read_message(p->conn, f->channel, &msg, 0);
    if (rr.reply_type == AMQP_RESPONSE_NORMAL) amqp_destroy_message(&msg);
    p->cat_on = false;
    return dlqb_fail(err, DLQB_EBROKER, "the catalog stream '%s' is gone (run declare)",
                     p->opt.catalog->stream);
  }
  case AMQP_CHANNEL_CLOSE_METHOD: {
    amqp_channel_close_ok_t ok = {0};
    amqp_send_method(p->conn, f->channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    p->cat_on = false;
    const amqp_channel_close_t *c = f->payload.method.decoded;
    return dlqb_fail(err, DLQB_EBROKER, "catalog channel closed by broker: %.*s",
                     (int)c->reply_text.len, (const char *)c->reply_text.bytes);
  }
  case AMQP_BASIC_NACK_METHOD:
    return dlqb_fail(err, DLQB_EBROKER, "the catalog stream '%s' refused an event",
                     p->opt.catalog->stream);
  default: return DLQB_OK;
  }
}

static dlqb_status dispatch(dlqb_pipe *p, const amqp_frame_t *f, dlqb_error *err) {
  if (f->frame_type != AMQP_FRAME_METHOD) return DLQB_OK;
  if (is_cat_channel(p, f->channel)) return cat_dispatch(p, f, err);
  switch (f->payload.method.id) {
  case AMQP_BASIC_DELIVER_METHOD: return on_deliver(p, f->channel, f->payload.method.decoded, err);
  case AMQP_BASIC_ACK_METHOD: {
    const amqp_basic_ack_t *a = f->payload.method.decoded;
    dlqb_ackring_on_confirm(&p->ring, a->delivery_tag, a->multiple);
    return DLQB_OK;
  }
  case AMQP_BASIC_NACK_METHOD:
    dlqb_ackring_fail(&p->ring);
    return dlqb_fail(err, DLQB_EBROKER, "broker refused a publish (basic.nack)");
  case AMQP_BASIC_RETURN_METHOD: return on_return(p, f->payload.method.decoded, err);
  case AMQP_BASIC_CONSUME_OK_METHOD:
    /* Consume-oks come in the order of the consumes. */
    p->consumers_ok++;
    return p->cancel_sent || p->switching ? cancel_confirmed(p, err) : DLQB_OK;
  case AMQP_BASIC_CANCEL_OK_METHOD: p->cancelled++; return DLQB_OK;
  case AMQP_BASIC_CANCEL_METHOD:
    return dlqb_fail(err, DLQB_ECONN, "broker cancelled the consumer on '%s' (queue deleted?)",
                     p->opt.queue);
  case AMQP_CHANNEL_CLOSE_METHOD:
  case AMQP_CONNECTION_CLOSE_METHOD: return closed_by_broker(p, f, err);
  default: log_connection_method(f); return DLQB_OK;
  }
}

static dlqb_status start_consumer(dlqb_pipe *p, dlqb_error *err) {
  char what[160];
  snprintf(what, sizeof what, "consume queue '%s'", p->opt.queue);
  amqp_basic_consume(p->conn, DLQB_CHANNEL, dlqb_bytes(p->opt.queue), dlqb_bytes("dlqb"), 0, 0, 0,
                     p->opt.consume_args ? *p->opt.consume_args : amqp_empty_table);
  dlqb_status st = dlqb_link_reply(p->link, amqp_get_rpc_reply(p->conn), what, err);
  if (st == DLQB_OK) p->consumers = p->consumers_ok = 1;
  if (st == DLQB_OK) p->stats.channels = 1;
  return st;
}

static bool limit_reached(const dlqb_pipe *p) {
  return p->opt.max_messages > 0 && p->settled_total >= p->opt.max_messages;
}

/* ---- while the audit trail cannot be written (opt.audit_mode) ---- */

/* OUTWAIT: true while what is left of the window is confirmed and waits
 * only for the audit trail (and no shutdown gave up on it). */
static bool outwait_audit(const dlqb_pipe *p) {
  return p->opt.audit_mode == DLQB_PIPE_AUDIT_OUTWAIT && p->opt.audit != NULL &&
         !(p->opt.audit_give_up != NULL && *p->opt.audit_give_up) && p->ring.ready == p->ring.count;
}

/* FAIL_FAST: the run's error once the audit trail cannot be written,
 * after acking what it wrote before (nothing more is handed to it). */
static dlqb_status audit_fail_fast(dlqb_pipe *p, dlqb_error *err) {
  if (p->opt.audit_mode != DLQB_PIPE_AUDIT_FAIL_FAST) return DLQB_OK;
  dlqb_status st = dlqb_audit_check(p->opt.audit, err);
  dlqb_error ignored;
  if (st != DLQB_OK && head_durable(p)) (void)ack_durable(p, &ignored);
  return st;
}

/* An idle bounded pass asks the queue before it ends: ready messages that
 * the free windows could take mean the broker is slow, not that someone
 * else holds the rest. A broker holding a million items pauses for longer
 * than the idle limit (measured: a 1,000,000-item stats pass stopped after
 * 462,730 with 5 s), and a pass that ended there would miss the tail. It
 * waits idle_stop_ms between checks, and at most IDLE_READY_MAX_MS since
 * the last delivery. *idle stays true when the pass should end. */
#define IDLE_READY_MAX_MS 120000

static dlqb_status check_idle_ready(dlqb_pipe *p, long long now, bool *idle, dlqb_error *err) {
  if (p->opt.max_messages == 0 || p->settled_total >= p->opt.max_messages || p->cancel_sent)
    return DLQB_OK;
  uint64_t capacity = (uint64_t)(p->consumers > 0 ? p->consumers : 1) * p->window;
  bool room = held_here(p) + p->ring.count < capacity ||
              (p->opt.deep && (p->consumers < MAX_CONSUMERS || channel_left(p)));
  if (!room) return DLQB_OK;
  if (p->ready_checked_ms != 0 && now - p->ready_checked_ms < p->opt.idle_stop_ms) {
    *idle = false; /* checked a moment ago: ready then, wait on */
    return DLQB_OK;
  }
  if (now - p->last_delivery_ms >= IDLE_READY_MAX_MS) {
    dlqb_log_warn("broker_stalled",
                  "queue '%s': nothing delivered for %lld s while messages were "
                  "ready; ending the pass",
                  p->opt.queue, (now - p->last_delivery_ms) / 1000);
    return DLQB_OK;
  }
  uint32_t ready = 0;
  dlqb_status st = dlqb_link_queue_depth(p->link, p->opt.queue, &ready, NULL, err);
  if (st != DLQB_OK) return st;
  if (ready == 0) return DLQB_OK;
  if (p->ready_checked_ms == 0)
    dlqb_log_info("broker_slow",
                  "queue '%s': %u messages ready but none delivered for %lld ms; "
                  "waiting for the broker",
                  p->opt.queue, ready, now - p->last_delivery_ms);
  p->ready_checked_ms = dlqb_mono_ms();
  *idle = false;
  return DLQB_OK;
}

/* The handler's on_tick, once a second. */
static void tick(dlqb_pipe *p, long long now) {
  if (now - p->last_tick_ms < 1000) return;
  p->last_tick_ms = now;
  if (p->h.on_tick != NULL) p->h.on_tick(p->h.ctx);
}

dlqb_status dlqb_pipe_pause(dlqb_pipe *p, int64_t us, const dlqb_stop_flag *stop, dlqb_error *err) {
  if (p->pausing) return dlqb_fail(err, DLQB_EINVAL, "internal error: a pause inside a pause");
  int64_t end = dlqb_mono_us() + us;
  dlqb_status st = DLQB_OK;
  p->pausing = true;
  for (;;) {
    if (stop != NULL && *stop) break;
    if ((st = flush_acks(p, err)) != DLQB_OK || (st = publish_waiting(p, err)) != DLQB_OK) break;
    set_cork(p, false); /* the acks just written must not wait for the pause */
    tick(p, dlqb_mono_ms());
    int64_t left = end - dlqb_mono_us();
    if (left <= 0) break;
    if (left > DLQB_SLEEP_STEP_US) left = DLQB_SLEEP_STEP_US; /* notice a stop */
    if (p->kept >= p->window) {
      /* A window's worth kept already: the rest can wait on the socket. */
      dlqb_sleep_us(stop, left);
      continue;
    }
    struct timeval tv = {0, (suseconds_t)left};
    amqp_frame_t f;
    int rc = amqp_simple_wait_frame_noblock(p->conn, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT) continue;
    if (rc != AMQP_STATUS_OK) {
      st = dlqb_link_status(rc, "read from broker", err);
      break;
    }
    if (f.channel == 0 && f.frame_type == AMQP_FRAME_METHOD &&
        f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
      st = closed_by_broker(p, &f, err);
      break;
    }
    if ((st = dispatch(p, &f, err)) != DLQB_OK) break;
  }
  p->pausing = false;
  return st;
}

static dlqb_status run_loop(dlqb_pipe *p, dlqb_stop_flag *stop, dlqb_error *err) {
  dlqb_status st = start_consumer(p, err);
  if (st != DLQB_OK) return st;
  long long drain_from = 0; /* when the cancel went out (0: not yet) */
  p->last_delivery_ms = p->last_tick_ms = dlqb_mono_ms();
  for (;;) {
    /* Decoded frames live in per-channel pools; recycling them between
     * frames keeps memory flat whatever the traffic. */
    amqp_maybe_release_buffers_on_channel(p->conn, p->ch);
    if (p->prev_ch != 0) amqp_maybe_release_buffers_on_channel(p->conn, p->prev_ch);
    amqp_maybe_release_buffers_on_channel(p->conn, DLQB_PUB_CHANNEL);
    amqp_maybe_release_buffers_on_channel(p->conn, 0);
    long long now = dlqb_mono_ms();
    if ((st = audit_fail_fast(p, err)) != DLQB_OK) return st;
    if (p->cat_on && p->cat_confirmed < p->cat_published && p->cat_waiting_ms != 0 &&
        now - p->cat_waiting_ms > CAT_STALL_MS) {
      dlqb_ackring_fail(&p->ring);
      return dlqb_fail(err, DLQB_EBROKER,
                       "the catalog stream '%s' confirmed nothing for %d ms; ending the session",
                       p->opt.catalog->stream, CAT_STALL_MS);
    }

    /* What a pause kept goes to the handler first, in its order. */
    if (p->kept_head != NULL) {
      kept_delivery *k = p->kept_head;
      p->kept_head = k->next;
      if (p->kept_head == NULL) p->kept_tail = NULL;
      p->kept--;
      st = handle_delivery(p, &k->d, err);
      kept_free(k);
      if (st != DLQB_OK) return st;
      continue;
    }

    bool idle_out = p->opt.idle_stop_ms > 0 && p->ring.count == 0 &&
                    now - p->last_delivery_ms >= p->opt.idle_stop_ms;
    if (idle_out && (st = check_idle_ready(p, now, &idle_out, err)) != DLQB_OK) return st;
    if ((stop != NULL && *stop) || limit_reached(p)) p->holding_late = true;
    if (p->holding_late || idle_out || p->cancel_sent) {
      if ((st = send_cancel(p, err)) != DLQB_OK) return st;
      /* The drain's time runs from the cancel, and again from each
       * delivery handled after an idle one (it may have published). */
      if (drain_from == 0) drain_from = now;
      if (!p->holding_late && p->last_delivery_ms > drain_from) drain_from = p->last_delivery_ms;
      if (p->ring.count == 0 && !consuming(p)) return DLQB_OK;
      if (now - drain_from > DRAIN_TIMEOUT_MS && !outwait_audit(p)) {
        dlqb_log_warn("drain_timeout",
                      "%zu messages still unconfirmed after %d ms; leaving them "
                      "unacked for redelivery",
                      p->ring.count, DRAIN_TIMEOUT_MS);
        return DLQB_OK;
      }
    }
    if ((st = add_consumer_if_full(p, err)) != DLQB_OK) return st;
    if (p->switching && !p->cancel_sent && !consuming(p) && (st = next_channel(p, err)) != DLQB_OK)
      return st;
    tick(p, now);

    /* Batch: hand the confirmed prefix on once submit_batch entries are
     * ready, or when the socket has nothing more for us right now; ack
     * whatever the audit trail has made durable (without one, everything
     * handed on). While its log cannot be written nothing becomes durable:
     * fail closed, the window fills and the broker waits. */
    if (p->ring.ready - p->ring.submitted >= submit_batch(p) || head_durable(p)) {
      if ((st = flush_acks(p, err)) != DLQB_OK) return st;
    }
    if ((st = publish_waiting(p, err)) != DLQB_OK) return st;
    bool buffered = input_buffered(p);
    set_cork(p, buffered);
    int wait_ms = p->ring.ready > p->ring.submitted || buffered ? 0 : IDLE_WAIT_MS;
    if (wait_ms > 0 && (p->ring.submitted > 0 || p->waiting_head != NULL)) {
      /* Acks or copies wait on the audit writer: wake for its sync as well. */
      wait_socket_or_audit(p, wait_ms);
      wait_ms = 0;
    }
    struct timeval tv = {0, wait_ms * 1000};
    amqp_frame_t f;
    int rc = amqp_simple_wait_frame_noblock(p->conn, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT) {
      if ((st = flush_acks(p, err)) != DLQB_OK || (st = publish_waiting(p, err)) != DLQB_OK)
        return st;
      set_cork(p, false); /* the acks just written must not wait */
      continue;
    }
    if (rc != AMQP_STATUS_OK) return dlqb_link_status(rc, "read from broker", err);
    st = dispatch(p, &f, err);
    if (st != DLQB_OK) {
      /* Ack what was confirmed (and recorded) before the failure; the rest
       * is redelivered. */
      dlqb_error ignored;
      if (st == DLQB_EBROKER && flush_acks(p, &ignored) == DLQB_OK &&
          dlqb_audit_wait(p->opt.audit, p->ring.last_ticket, &ignored) == DLQB_OK)
        flush_acks(p, &ignored);
      return st;
    }
  }
}

/* Waits (a bounded while) for the confirms of the catalog events sent, so
 * a look that starts after this run returns sees its "out"s. */
static dlqb_status cat_settle(dlqb_pipe *p, dlqb_error *err) {
  long long deadline = dlqb_mono_ms() + DRAIN_TIMEOUT_MS;
  while (p->cat_on && p->cat_confirmed < p->cat_published && dlqb_mono_ms() < deadline) {
    set_cork(p, false);
    struct timeval tv = {0, IDLE_WAIT_MS * 1000};
    amqp_frame_t f;
    int rc = amqp_simple_wait_frame_noblock(p->conn, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT) continue;
    if (rc != AMQP_STATUS_OK) return dlqb_link_status(rc, "read from broker", err);
    if (f.frame_type != AMQP_FRAME_METHOD) continue;
    if (is_cat_channel(p, f.channel)) {
      dlqb_status st = cat_dispatch(p, &f, err);
      if (st != DLQB_OK) return st;
    } else if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
               f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
      return closed_by_broker(p, &f, err);
    }
  }
  return DLQB_OK;
}

dlqb_status dlqb_pipe_run(dlqb_pipe *p, dlqb_stop_flag *stop, dlqb_error *err) {
  dlqb_status st = run_loop(p, stop, err);
  if (st == DLQB_OK) st = cat_settle(p, err);
  /* Whatever ended the run, what we wrote must leave now: the caller's next
   * step (closing the channel) waits for the broker's answer. */
  set_cork(p, false);
  /* What is still in the ring was not acked and comes back. */
  remember_unacked(p);
  if (p->stats.remembered > 0)
    dlqb_log_info("already_moved",
                  "%llu deliveries of '%s' came back after a lost connection with their "
                  "copies confirmed before: acked, not moved again",
                  (unsigned long long)p->stats.remembered, p->opt.queue);
  return st;
}

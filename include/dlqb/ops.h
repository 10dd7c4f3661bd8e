/* The service layer (src/ops/): what the front ends, the command line
 * and the web console, share above the broker. A move pass over the DLQ
 * (replay, escalate, resolve, the drain's steps), the completion ledger as
 * replay reads it, the audit trail with its anchor publisher, one act on a
 * compliance_review item (claim, decide), the audit history of one task,
 * and a queue read whole without moving anything.
 *
 * It prints nothing, reads no argv and no global of a front end: each call
 * takes an ops_ctx (the settings, the pipeline served, who acts, the
 * window) and says what happened in its result. */
#ifndef DLQB_OPS_LIB_H
#define DLQB_OPS_LIB_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "dlqb/anchor.h"
#include "dlqb/audit.h"
#include "dlqb/calendar.h"
#include "dlqb/config.h"
#include "dlqb/deadline.h"
#include "dlqb/hashset.h"
#include "dlqb/item.h"
#include "dlqb/ledger.h"
#include "dlqb/pipeline.h"
#include "dlqb/review.h"
#include "dlqb/scan.h"
#include "dlqb/select.h"
#include "dlqb/stop.h"
#include "dlqb/topology.h"
#include "dlqb/verdict.h"

/* What every pass runs with. Borrowed: each pointer outlives the call. */
typedef struct {
  const dlqb_config *cfg; /* the trail, the settings */
  /* The broker user every connection of the pass logs in as; NULL: the
   * config's own (cfg->broker). The console's is the signed-in person's. */
  const dlqb_broker_conf *broker;
  const dlqb_pipeline *pipeline; /* its queues and profile */
  const char *actor;             /* who acts: the audit trail and the connection */
  const dlqb_select *sel;        /* which DLQ items a move pass takes */
  int window;                    /* messages in flight at once */
  bool window_set;               /* given by a person: not adjusted for a move's rate */
} ops_ctx;

/* The largest rate of a move (--rate, the console's rate field). */
#define OPS_RATE_MAX 100000

/* ---- how an item reads to a person (item_text.c) --------------------- */

/* "3d4h", "12m", "45s" (two largest units); "?" when unknown. */
char *ops_age_text(bool known, uint64_t age_ms, char *buf, size_t len);

/* The time left as the LEFT column shows it: "19d4h", "-2h10m" when
 * overdue, "?" when unknown, "-" when no deadline applies. Returns buf. */
char *ops_left_text(const dlqb_deadline *d, char *buf, size_t len);

/* Whether the profile has the header (legal_basis, action: the dsr
 * profile's; outputs show such a field only where it is one). */
bool ops_profile_has(const dlqb_profile *pr, const char *header);

/* True when the profile's identity is dsr's (request_id, source_system). */
bool ops_profile_is_dsr(const dlqb_profile *pr);

/* ---- an operation's session (session.c) ------------------------------
 * What every operation that moves or removes items runs in, whichever
 * front end starts it (a command, a console job or decision, the daemon):
 * the audit trail with its anchor publisher, and the completion ledger as
 * its moves read it. Opening refuses when no trail is configured (unless
 * the caller acts without one on purpose); closing ends the trail's chain
 * and anchors it (a command's exit, a console job's end, the daemon's
 * clean stop alike). */

typedef struct ops_session ops_session;

typedef struct {
  const dlqb_config *cfg;
  /* Whom its anchor publisher and ledger read connect as; NULL:
   * cfg->broker. Both must outlive the session. */
  const dlqb_broker_conf *broker;
  const char *writer; /* the trail's writer: "replay@host", "console@host" */
  /* Act with no trail configured (--no-audit): the session has no trail. */
  bool without_trail;
  /* A dry run's: it writes nothing, so it opens no trail at all. */
  bool read_only;
  /* The daemon's: its anchor publisher waits for dlqb_anchor_release (its
   * router declares the stream first) and keeps its link. */
  bool held_anchors;
} ops_session_opts;

/* The refusal when no trail is configured, in every front end's words. */
#define OPS_NO_TRAIL "no audit trail configured (audit_log): nothing is moved without one"

/* Opens a session. DLQB_EINVAL with OPS_NO_TRAIL when cfg has no audit_log
 * (and not without_trail), or a trail or key the settings name wrongly;
 * else the trail's error. Safe from several threads at once. */
dlqb_status ops_session_open(const ops_session_opts *o, ops_session **out, dlqb_error *err);

/* Its trail (NULL: none: without_trail, or s NULL) and anchor publisher. */
dlqb_audit *ops_session_audit(const ops_session *s);
dlqb_anchor_pub *ops_session_anchors(const ops_session *s);

/* The whole completion ledger of p, read once per session (ops_replay_ledger:
 * a dry run writes nothing); *out and *stats (may be NULL) live until the
 * session closes. A failure must stop the move: moving on a partial ledger
 * could re-run a completed erasure. */
dlqb_status ops_session_ledger(ops_session *s, const dlqb_pipeline *p, bool dry_run,
                               const dlqb_ledger **out, const dlqb_ledger_stats **stats,
                               dlqb_error *err);

/* Ends the trail's chain, anchors it (a warning in the log when the
 * broker cannot take it), closes it and frees the session. NULL-safe. */
void ops_session_close(ops_session *s);

/* ---- a classic DLQ or review queue into a quorum one (migrate.c) ----- */

/* What ops_migrate_queue found and did for one queue. */
typedef struct {
  char queue[DLQB_NAME_MAX];
  char holding[DLQB_NAME_MAX]; /* <queue>.migrating, the quorum queue items wait in */
  bool existed;                /* the queue was there */
  bool was_classic;            /* it was a classic queue */
  bool resumed;                /* a holding queue of an interrupted run was there */
  uint64_t pending;            /* items still to move when it began (what a dry run would) */
  uint64_t to_holding;         /* moved from the classic queue into the holding queue */
  uint64_t to_queue;           /* moved from the holding queue into the quorum queue */
  uint64_t remembered;         /* of those, acked against a copy an interrupted run made */
  bool catalog_verified;       /* the catalog was checked against the queue afterwards */
  uint64_t catalog_corrected;  /* events that check appended */
  char catalog_why[160];       /* why it was not checked ("" when it was, or nothing moved) */
} ops_migrate_result;

/* Makes spec's queue (a DLQ or review queue of the topology, declared
 * quorum) a quorum queue with every item it held, in their order: a
 * classic one's items go into <queue>.migrating (declared as spec says),
 * the classic queue is deleted once empty and with no consumer and
 * declared again as spec says, the holding queue's items go into it, and
 * the holding queue is deleted. Each item moves unchanged, confirm before
 * ack, with a `migrated` hop in audit (opened by the caller; NULL: none)
 * and its "out" and "in" in the catalog, which a verifying pass then
 * checks against the queue (dlqb_catalog_verify). A queue that is quorum already
 * and no holding queue: nothing. Run again after a kill, it goes on from
 * what the broker holds; the copies a killed pass had in flight (the last
 * of its destination) are recognised (dlqb_pipe_identity) and not made
 * twice. dry_run: only r->pending and what was found. Items that keep
 * arriving in the classic queue, or a consumer on it, stop it with
 * DLQB_EBROKER / DLQB_ECONFLICT and a sentence to act on. */
dlqb_status ops_migrate_queue(const ops_ctx *x, const dlqb_queue_spec *spec, dlqb_audit *audit,
                              bool dry_run, dlqb_stop_flag *stop, ops_migrate_result *r,
                              dlqb_error *err);

/* ---- moving selected DLQ items (replay, escalate, resolve) ----------- */

/* Header changes one move's copy may carry: an edit's copy has the most
 * (its changes, its stamp, a replay's stamp and leaving review's). */
#define OPS_MAX_SETS 30

/* The moves. Each is data: where it goes, what it stamps, what the hop
 * records (ops_move_pass reads them; ops_move_target names the queue).
 * An edit (dlqb/ops_edit.h) stamps what its accept hook built for the one
 * item it takes, and goes where that hook says (by default the work
 * queue, as a replay). */
typedef enum {
  OPS_MOVE_REPLAY,
  OPS_MOVE_ESCALATE,
  OPS_MOVE_RESOLVE,
  OPS_MOVE_EDIT,
  /* The daemon's SLA escalator: every item in the DLQ longer than the
   * dlq sla (or with no usable time) to the review queue. */
  OPS_MOVE_SLA,
} ops_move_kind;

/* Who acts and when, stamped on every item a move takes. */
typedef struct {
  char actor[128];
  char now[DLQB_ISO_TIME_MAX];
  bool has_note;
  char note[DLQB_LAST_ERROR_MAX + 1]; /* escalate's --note, resolve's reason */
} ops_stamp;

struct ops_move_copy;

/* actor and now (the current time); note may be NULL. */
void ops_stamp_init(ops_stamp *st, const char *actor, const char *note);

/* ---- moves that began and did not end (open_moves.c) ------------------
 * Every mover records an intent (move_started) before each copy
 * (dlqb/pipe.h, record_intents). One whose process was killed before its
 * hop was written leaves the original back in its queue and perhaps a
 * copy where it was going: moving the original again could make two live
 * copies. So a move pass holds such an item until it is settled: by a
 * later record taking it out of the queue (a move given
 * --after-interrupted by a person who checked where the copy is, or
 * anything else that took it). */

typedef struct {
  char time[DLQB_ISO_TIME_MAX]; /* when the move began (ended: when its hop was recorded) */
  char to[DLQB_NAME_MAX];       /* where its copy was going */
  char event[24];               /* the hop that would have ended it ("replayed"; ended: did) */
  char writer[96];              /* who began it (ended: who recorded its hop) */
  /* The move ended, recorded, by a writer whose chain has not ended (its
   * process was killed between the record and the original's ack): if the
   * original is in the queue, its ack never reached the broker and the
   * copy in `to` is the one that counts. Not moved again, even with
   * after_interrupted: only a removal (resolve) settles it. */
  bool ended;
} ops_open_move;

typedef struct ops_open_moves ops_open_moves;

/* Reads the trail at audit_log (and its rotated files) for the moves out
 * of queue `from` that began and did not end, and those that ended in a
 * chain that did not (ops_open_move.ended). *out is NULL when there are
 * none (or audit_log is ""). DLQB_EIO when a file cannot be read. */
dlqb_status ops_open_moves_read(const char *audit_log, const char *from, ops_open_moves **out,
                                dlqb_error *err);
/* The open move of message_id, or NULL. m may be NULL. */
const ops_open_move *ops_open_moves_find(const ops_open_moves *m, const char *message_id);
size_t ops_open_moves_count(const ops_open_moves *m);
void ops_open_moves_free(ops_open_moves *m);

typedef struct {
  ops_move_kind kind;
  const char *command;       /* "replay": connection name, audit writer, output */
  dlqb_event event;          /* DLQB_EV_REPLAYED, DLQB_EV_ESCALATED, DLQB_EV_RESOLVED */
  const char *verb;          /* "replayed", "escalated", "resolved" */
  const char *cause;         /* hop cause: "operator" for escalate, "" otherwise */
  const ops_stamp *stamp;    /* the actor, the time and the note stamped; outlives the pass */
  bool dry_run;              /* list, move nothing */
  double rate;               /* moves per second; 0 = unlimited */
  const dlqb_ledger *ledger; /* completed tasks are removed as SKIPPED_COMPLETE; may be NULL */
  const dlqb_ledger_stats *ledger_stats; /* how the ledger was read, for --json; may be NULL */
  /* A further condition on top of the selection (the console's checked
   * items); NULL: none. An item it refuses is left in place. */
  bool (*only)(void *only_ctx, const dlqb_item *it);
  void *only_ctx;
  /* End the pass once the selection's --limit is taken (resolve's one item)
   * instead of passing over the rest. */
  bool stop_at_limit;
  /* The queue passed over; NULL: the pipeline's DLQ (an edit of a review
   * item passes over the review queue). */
  const char *source;
  /* Sees the whole message (headers, body) of an item the selection took,
   * before anything is done with it; false: it is left in place. The one
   * hook of a spec, for what no kind's data can say: an edit builds and
   * validates its copy from the message itself and fills *copy. NULL:
   * every selected item is taken as the kind says. */
  bool (*accept)(void *accept_ctx, const dlqb_delivery *d, const dlqb_item *it,
                 struct ops_move_copy *copy);
  void *accept_ctx;
  /* Attached to every hop of the pass (an edit's one item); NULL: none. */
  const dlqb_hop_edit *edit;
  /* Move items whose earlier move began and did not end (ops_open_moves)
   * too: a person checked where their copies are. false: they are held. */
  bool after_interrupted;
  /* OPS_MOVE_SLA (ops_sla_spec): the dlq sla, the hop's reason for an item
   * past it and for one without a usable time, and the item as the SLA
   * clock reads it (the escalator's first sight of it; NULL: its own). */
  uint64_t sla_ms;
  const char *sla_reason, *sla_no_time_reason;
  const dlqb_item *(*seen_as)(void *seen_ctx, const dlqb_item *it);
  void *seen_ctx;
  /* A long-lived mover's (the daemon's, across its passes): copies
   * confirmed and not acked, acked against by a later pass (dlqb/scan.h
   * memory); NULL: none. */
  dlqb_memo *memory;
  /* While the trail cannot be written, hold what was published unacked
   * until it is (DLQB_PIPE_AUDIT_OUTWAIT: ending the pass would return the
   * originals and the next would publish them again) instead of ending
   * the pass at once. */
  bool outwait_audit;
  long idle_stop_ms;   /* give up waiting for deliveries after this; 0: the scan's default */
  const char *purpose; /* the connection's name; NULL: "dlq-bridge <command>" */
} ops_move_spec;

/* What the accept hook may change of one item's copy. It comes filled
 * with the kind's: the original's body, the kind's target, no sets (the
 * kind's stamp) and no reason (the kind's). Whatever it points at must
 * live until the pass ends. */
typedef struct ops_move_copy {
  amqp_bytes_t body;
  const char *target;    /* the queue the copy goes to */
  const dlqb_hset *sets; /* non-NULL: these header changes instead of the kind's stamp */
  size_t nsets;          /* at most OPS_MAX_SETS */
  const char *reason;    /* non-NULL: the hop's reason instead of the kind's */
} ops_move_copy;

/* The move spec of replay (to the work queue, attempts reset, replay_count
 * + 1), of escalate (to the review queue, escalation stamps and st's note)
 * and of resolving (acked, nothing published, audited as resolved with
 * st's note as the reason). The caller adds ledger, ledger_stats and
 * audit. st must outlive the pass. */
void ops_replay_spec(ops_move_spec *m, const ops_stamp *st, bool dry_run, double rate);
void ops_escalate_spec(ops_move_spec *m, const ops_stamp *st, bool dry_run, double rate);
void ops_resolve_spec(ops_move_spec *m, const ops_stamp *st, bool dry_run);
/* An edit's (ops_edit_run builds it): event edited, its accept hook added
 * by the caller; st's note is the reason when the hook gives none. */
void ops_edit_spec(ops_move_spec *m, const ops_stamp *st, bool dry_run);
/* The SLA escalator's: to the review queue, stamped as escalated by st's
 * actor because of the dlq sla (sla_ms), the hop's reason `reason` (or
 * no_time_reason for an item without a usable time); the daemon adds
 * seen_as, memory and the watch. The strings outlive the pass. */
void ops_sla_spec(ops_move_spec *m, const ops_stamp *st, uint64_t sla_ms, const char *reason,
                  const char *no_time_reason);

/* The queue a move of this kind sends its items to in p: the work queue
 * (replay, and an edit unless its hook says otherwise), the review queue
 * (escalate, the SLA escalator), or NULL (resolve removes them). */
const char *ops_move_target(ops_move_kind kind, const dlqb_pipeline *p);

/* Reads the whole completion ledger of p for replay: a real run as
 * dlqb_ledger_load (writing its end marker and the cache), a dry run as
 * dlqb_ledger_peek (writing nothing). A failure must stop the replay:
 * replaying on a partial ledger could re-run a completed erasure. Read
 * as broker (NULL: cfg->broker). */
dlqb_status ops_replay_ledger(const dlqb_config *cfg, const dlqb_broker_conf *broker,
                              const dlqb_pipeline *p, bool dry_run, dlqb_ledger *ledger,
                              dlqb_ledger_stats *ls, dlqb_error *err);

/* The dry run's WOULD column: "replay", "escalate", "skip". */
#define OPS_WOULD_WIDTH 8

/* The summary line of a pass: "replayed 4, skipped as complete 1, left 10
 * of 15 in dsr.dlq.manual", or for a dry run (verb "replay") "dry run: would
 * replay 4, would skip as complete 1, would leave 10 of 15": what would
 * remain, not today's depth. The skip part only with a ledger.
 * Returns buf. */
char *ops_move_summary(bool dry_run, const char *verb, uint64_t moved, bool ledger,
                       uint64_t skipped, uint64_t left, uint64_t total, const char *queue,
                       char *buf, size_t len);

/* Why a pass ended early, as a sentence for the summary, or NULL. */
const char *ops_early_stop(const dlqb_scan_result *r, int window);

/* What a caller sees of a move pass while it runs. Each may be NULL. */
typedef struct {
  /* A dry run's selected item: complete = it would be skipped as complete. */
  void (*listed)(void *ctx, const dlqb_item *it, bool complete, int64_t now_ms);
  /* A real run's item as it is taken (before its hop settles). */
  void (*taken)(void *ctx, const dlqb_item *it);
  /* A real run's hop, once its original was acked. */
  void (*acked)(void *ctx, const dlqb_hop *hop);
  /* About once a second: the pass so far. */
  void (*tick)(void *ctx, const dlqb_scan_result *r);
  void *ctx;
} ops_move_watch;

/* How a move pass ended. */
typedef struct {
  dlqb_status status; /* dlqb_scan_run's */
  dlqb_error err;
  dlqb_scan_result r;
  bool not_started; /* lost before the first item: nothing happened, err says why */
  uint64_t moved;   /* moved (a dry run: would move) */
  uint64_t skipped; /* skipped as complete (a dry run: would skip) */
  uint64_t left;    /* what stays (a dry run: would stay) of r.depth_at_start */
  int window;       /* the window the pass used */
  /* Selected items held because a move of theirs began and did not end
   * (ops_open_moves; not with after_interrupted), and the first of them. */
  uint64_t unsettled;
  char unsettled_id[128];
  ops_open_move unsettled_move;
  /* Why it ended early, as a sentence; "" when it covered the queue. */
  char early[DLQB_ERROR_MAX + 256];
} ops_move_outcome;

/* The sentence for n items held, the first message_id with its move u
 * (every front end says it). */
char *ops_open_move_text(uint64_t n, const char *message_id, const ops_open_move *u, char *buf,
                         size_t len);
/* The same for out->unsettled > 0. */
char *ops_unsettled_text(const ops_move_outcome *out, char *buf, size_t len);

/* The one move core, under replay, escalate, resolve, the drain and the
 * console: passes over x->pipeline's DLQ once, taking the items x->sel
 * selects (skipping what m->ledger holds as complete), through the audit
 * trail `audit` (NULL: none; a real run must pass one when audit is on). */
void ops_move_pass(const ops_ctx *x, const ops_move_spec *m, dlqb_audit *audit,
                   const ops_move_watch *w, dlqb_stop_flag *stop, ops_move_outcome *out);

/* ---- the most urgent items of a pass (inspect --sort deadline, the console) */

/* One kept item, its deadline and its place in the queue (ties keep queue
 * order). */
typedef struct {
  dlqb_item it;
  dlqb_deadline d;
  uint64_t seq;
} ops_kept;

/* The cap most urgent items seen: a bounded max-heap (the least urgent kept
 * at [0]), so a million-item DLQ costs cap items of memory and log(cap) a
 * step; ops_urgent_sort then orders them most urgent first. */
typedef struct {
  ops_kept *kept;
  size_t n, cap;
} ops_urgent;

bool ops_urgent_init(ops_urgent *u, size_t cap); /* false: out of memory */
void ops_urgent_keep(ops_urgent *u, const dlqb_item *it, dlqb_deadline d, uint64_t seq);
void ops_urgent_sort(ops_urgent *u);
void ops_urgent_free(ops_urgent *u);

/* ---- claim and decide on one compliance_review item (review_act.c):
 * the CLI's review claim/decide and the console's inbox run this pass ---- */

typedef enum { OPS_ACT_CLAIM, OPS_ACT_REPLAY, OPS_ACT_RESOLVE, OPS_ACT_RETURN } ops_act_kind;

typedef struct {
  ops_ctx x; /* cfg (the broker user), pipeline, actor, window */
  ops_act_kind kind;
  const char *message_id, *note;
  bool force;
  dlqb_select sel;           /* the one item: its message_id, limit 1 */
  const dlqb_ledger *ledger; /* OPS_ACT_REPLAY: the session's ledger, read whole by the pass */
  char now[DLQB_ISO_TIME_MAX];
  char reason[DLQB_LAST_ERROR_MAX + 1];
  /* What the pass found and did. */
  bool found;
  dlqb_item item;
  dlqb_review_gate gate; /* whether custody let the actor act */
  bool settled;          /* its hop was confirmed, recorded and the original acked */
  dlqb_event done_event; /* that hop's event */
  /* Act on it even when a move of it began and did not end (a person
   * checked); else such an item is held: unsettled, and its move. */
  bool after_interrupted;
  bool unsettled;
  ops_open_move open;
  ops_open_moves *moves; /* the pass's own */
} ops_review_act;

/* One pass over the review queue acting on the item c->message_id as
 * c->kind says, in session (its trail: NULL only with audit off; a replay
 * reads its completion ledger first). The result is in c (found, gate,
 * settled). DLQB_EINVAL for a bad message_id; else the ledger's or
 * dlqb_scan_run's status. */
dlqb_status ops_review_act_pass(ops_review_act *c, const char *command, ops_session *session,
                                dlqb_stop_flag *stop, dlqb_scan_result *r, dlqb_error *err);

/* ---- one task's audit history (hops.c): audit show, the item page ---- */

/* The hops of one request_id and/or message_id of one pipeline, collected
 * from the lines a verifier accepts. */
typedef struct {
  const char *request_id, *message_id; /* borrowed; set before the first line */
  const dlqb_pipeline *pipeline;       /* only its hops; set before the first line */
  dlqb_audit_filter filter;
  bool filter_set;
  struct json_object **hops;
  size_t n, cap;
  dlqb_hashset *closed; /* the chains whose writer ended them (chain_end), seen so far */
} ops_hops;

/* A dlqb_audit_visit_fn collecting into an ops_hops. */
bool ops_hops_collect(void *arg, const char *line, size_t len);
/* Time order across writers, stable within one; then each intent
 * (move_started) gets the member OPS_HOP_MOVE_ENDED: whether a later hop
 * took its message out of the queue it was leaving. */
void ops_hops_sort(struct json_object **hops, size_t n);
#define OPS_HOP_MOVE_ENDED "move_ended"
/* ops_hops_sort of c's hops, then each hop that ended an intent and was
 * recorded by a writer whose chain never ended (killed between the record
 * and the original's ack: the original may be back in its queue) gets
 * OPS_HOP_RUN_ENDED false: its copy is the one that counts. */
void ops_hops_order(ops_hops *c);
#define OPS_HOP_RUN_ENDED "run_ended"
void ops_hops_free(ops_hops *c);

/* Verifies the configured trail (cfg->audit.log and its rotated files,
 * its seal, the writers' keys audit_public_keys), showing each accepted
 * line to visit; on an error nothing visit saw may be used. */
dlqb_status ops_trail_verify(const dlqb_config *cfg, dlqb_audit_visit_fn visit, void *ctx,
                             dlqb_error *err);

/* ops_trail_verify collecting c's hops, in order (ops_hops_order). */
dlqb_status ops_hops_read(const dlqb_config *cfg, ops_hops *c, dlqb_error *err);

/* One hop as `audit show` prints it (one line, sanitised, no newline). */
char *ops_hop_text(struct json_object *h, char *out, size_t len);

/* ---- a look (look.c): inspect, stats, review list, the console's pages,
 * the metrics, the drain's canary and the SLA escalator's question ---- */

/* Where a look's items come from. */
typedef enum {
  /* The pipeline's catalog (dlqb/catalog_stream.h), with no pass over the
   * queue; the queue itself only when the catalog cannot answer because
   * the broker refuses it (its stream not declared, no read permission on
   * it) or it disagrees with the queue's depth, and view.why_scan says
   * why. A read that fails for the connection (lost, timed out) is tried
   * OPS_LOOK_TRIES times, then the look fails with the reason: a transient
   * error never turns a look into the pass that holds the queue. */
  OPS_LOOK_CATALOG,
  /* The catalog or nothing: when it cannot answer, view says so and no
   * item was examined (the SLA escalator asks it only whether it must
   * pass over the queue). */
  OPS_LOOK_CATALOG_ONLY,
  /* The queue itself, a pass that holds every item and returns each to
   * its place (--scan, a look that needs the messages' headers or
   * bodies). */
  OPS_LOOK_QUEUE,
} ops_look_source;
#define OPS_LOOK_TRIES 3

typedef struct {
  const char *queue;
  const char *purpose;            /* connection name, e.g. "dlq-bridge inspect" */
  const char *actor;              /* who looks (the connection) */
  const dlqb_broker_conf *broker; /* whom it connects as; NULL: cfg->broker */
  ops_look_source source;
  bool compare;                /* OPS_LOOK_QUEUE: compare the count read with the catalog's */
  int window;                  /* a pass's read-ahead; 0: the default */
  uint64_t max_items;          /* examine at most this many; 0: all */
  dlqb_stop_flag *stop;        /* may be NULL */
  dlqb_catalog_reader *reader; /* the catalog's reader; NULL: one for this look */
  /* Each item in queue order. d is the message as delivered when the
   * queue was read, NULL when the catalog answered (which holds no
   * headers or bodies). *enough = true ends the look after it. */
  dlqb_status (*on_item)(void *ctx, const dlqb_item *it, const dlqb_delivery *d, bool *enough,
                         dlqb_error *err);
  void *ctx;
  dlqb_catalog_view view; /* out: how it was answered */
  dlqb_scan_result r;     /* out: depth_at_start, examined, stopped, interrupted, ... */
} ops_look;

/* Runs the look l describes. DLQB_OK when it ended (l->r says why), or
 * the error that stopped it (on_item's, the broker's, the catalog's
 * after its tries). */
dlqb_status ops_look_run(const dlqb_config *cfg, ops_look *l, dlqb_error *err);

/* ---- one queue read whole (queue_read.c): audit reconcile, audit report */

/* The queue (the DLQ, compliance_review) read whole without moving
 * anything: every item is held and returns to its place (dlqb/scan.h), so
 * the queue's order and counts stay as they were. */
typedef struct {
  const char *queue;
  const char *purpose;  /* connection name and actor, e.g. "audit reconcile" */
  int window;           /* read ahead at once; 0: the default */
  dlqb_stop_flag *stop; /* may be NULL */
  dlqb_status (*on_item)(void *ctx, const dlqb_item *it, dlqb_error *err);
  /* Before the first item: how many the queue holds as the read begins
   * (to size what on_item fills); may be NULL. */
  dlqb_status (*on_depth)(void *ctx, uint32_t depth, dlqb_error *err);
  void *ctx;
  char at[DLQB_ISO_TIME_MAX]; /* out: when the read began */
  uint32_t others;            /* out: most other consumers seen at its start or end */
  dlqb_scan_result scan;      /* out */
} ops_queue_read;

/* Reads q->queue as above. DLQB_OK, or an error in err (a broker error,
 * or a read interrupted: nothing of it may be compared). */
dlqb_status ops_queue_read_run(const dlqb_config *cfg, ops_queue_read *q, dlqb_error *err);

#endif

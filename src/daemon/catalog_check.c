/* The daemon's periodic check of the catalog: see dlqb/catalog_check.h. */
#include "dlqb/catalog_check.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include "dlqb/catalog_stream.h"
#include "dlqb/clock.h"
#include "dlqb/log.h"
#include "dlqb/thread.h"

struct dlqb_catalog_check {
  const dlqb_config *cfg;
  dlqb_pipeline p;
  dlqb_catalog_reader *r;
  pthread_t thread;
  dlqb_stop_flag stop;
  bool differed[DLQB_CATALOG_QUEUES_MAX];
  long long verified_ms[DLQB_CATALOG_QUEUES_MAX]; /* monotonic, 0: not yet */
  long long snapshot_ms;                          /* monotonic: the last written, or the start */
  bool agreed[DLQB_CATALOG_QUEUES_MAX];           /* the last check's look agreed with the queue */
  bool owed;                                      /* a rebuild wrote no snapshot: one is owed */
};

bool dlqb_catalog_snapshot_due(uint64_t since, uint64_t items, long long age_ms) {
  uint64_t floor = DLQB_CATALOG_SNAPSHOT_FLOOR;
  uint64_t grown = items > UINT64_MAX / 2 ? UINT64_MAX : 2 * items;
  if (since > (grown > floor ? grown : floor)) return true;
  return since > 0 && age_ms >= DLQB_CATALOG_SNAPSHOT_EVERY_MS;
}

/* Writes a snapshot when one is due, or rebuilds the catalog when the
 * stream was cut with none left (a look said so: it could not fold). A
 * rebuild whose pass did not read a queue whole (a look reading the queue
 * itself meanwhile, as every look does while the catalog is refused,
 * holds part of it) leaves the fold to the checks to correct, and the
 * snapshot owed: it is written once both queues' checks agree. */
static void maybe_snapshot(dlqb_catalog_check *c) {
  dlqb_catalog_snapinfo s;
  dlqb_error err;
  dlqb_status st;
  bool rebuilt = dlqb_catalog_reader_cut(c->r);
  if (rebuilt) {
    dlqb_log_warn("catalog_cut",
                  "the catalog stream '%s' was cut by retention and holds no complete snapshot; "
                  "rebuilding the catalog from the queues",
                  c->p.catalog);
    st = dlqb_catalog_snapshot_rebuild(c->r, c->cfg, NULL, &s, &err);
    c->owed = st != DLQB_OK;
  } else if (c->owed) {
    for (int i = 0; i < DLQB_CATALOG_QUEUES_MAX; i++)
      if (!c->agreed[i]) return;
    st = dlqb_catalog_snapshot(c->r, &c->cfg->broker, &s, &err);
    if (st == DLQB_OK) c->owed = false;
  } else {
    uint64_t since, items;
    dlqb_catalog_reader_growth(c->r, &since, &items);
    if (!dlqb_catalog_snapshot_due(since, items, dlqb_mono_ms() - c->snapshot_ms)) return;
    st = dlqb_catalog_snapshot(c->r, &c->cfg->broker, &s, &err);
  }
  if (st != DLQB_OK) {
    dlqb_log_warn("catalog_snapshot", "cannot write a snapshot of the catalog: %s", err.msg);
    return;
  }
  c->snapshot_ms = dlqb_mono_ms();
  dlqb_log_info("catalog_snapshot",
                "snapshot %s of the catalog written%s as of offset %lld: %llu and %llu items in "
                "%llu chunks",
                s.id, rebuilt ? " (rebuilt from the queues)" : "", (long long)s.as_of,
                (unsigned long long)s.items[0], (unsigned long long)s.items[1],
                (unsigned long long)s.chunks);
}

static void check_queue(dlqb_catalog_check *c, int i, const char *queue) {
  dlqb_catalog_view v;
  dlqb_error err;
  dlqb_status st = dlqb_catalog_look(c->r, &c->cfg->broker, queue, NULL, NULL, &v, &err);
  c->agreed[i] = st == DLQB_OK && !v.differs;
  if (st != DLQB_OK) {
    dlqb_log_debug("catalog_check", "cannot check the catalog of %s: %s", queue, err.msg);
    return;
  }
  long long now = dlqb_mono_ms();
  bool due = c->cfg->catalog.verify_every_ms > 0 &&
             (c->verified_ms[i] == 0 ||
              now - c->verified_ms[i] >= (long long)c->cfg->catalog.verify_every_ms);
  bool verify = (v.differs && c->differed[i]) || due;
  c->differed[i] = v.differs;
  if (!verify) return;
  if (v.differs)
    dlqb_log_warn("catalog_differs",
                  "%s holds %llu items, its catalog %llu: changed outside the bridge; verifying",
                  queue, (unsigned long long)v.depth, (unsigned long long)v.count);
  dlqb_catalog_verify_result res;
  st = dlqb_catalog_verify(c->r, c->cfg, NULL, queue, &res, &err);
  c->verified_ms[i] = dlqb_mono_ms();
  c->differed[i] = false;
  if (st != DLQB_OK)
    dlqb_log_warn("catalog_check", "cannot verify the catalog of %s: %s", queue, err.msg);
  else if (!res.complete) /* Counts that still differ bring the next verify at the next checks. */
    dlqb_log_info("catalog_check",
                  "%s was not read whole (%u other consumer%s on it): %llu added, nothing "
                  "removed",
                  queue, res.others, res.others == 1 ? "" : "s", (unsigned long long)res.added);
  else if (res.added > 0 || res.removed > 0)
    dlqb_log_warn("catalog_corrected",
                  "catalog of %s corrected: %llu items found in the queue, %llu added, %llu "
                  "removed",
                  queue, (unsigned long long)res.present, (unsigned long long)res.added,
                  (unsigned long long)res.removed);
}

static void *run(void *arg) {
  dlqb_catalog_check *c = arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  if (c->cfg->pipeline_count > 0) dlqb_log_set_pipeline(c->p.name);
  /* The first verification is due one period after the start, not at it:
   * a restart does not cost a pass over a deep DLQ. The first check too:
   * the escalator looks at the start, on the same reader, and a check
   * then would only hold it up (its look waits for the reader's lock: on a
   * broker slow to deliver, 16 s at the start of broker.ops
   * test_daemon_escalates_deliveries_that_come_late, which then failed
   * about one run in four). */
  for (int i = 0; i < DLQB_CATALOG_QUEUES_MAX; i++) c->verified_ms[i] = dlqb_mono_ms();
  c->snapshot_ms = dlqb_mono_ms();
  for (;;) {
    dlqb_sleep_us(&c->stop, (int64_t)c->cfg->catalog.check_interval_ms * 1000);
    if (c->stop) break;
    check_queue(c, 0, c->p.dlq);
    if (!c->stop) check_queue(c, 1, c->p.review);
    if (!c->stop) maybe_snapshot(c);
  }
  return NULL;
}

dlqb_status dlqb_catalog_check_start(const dlqb_config *cfg, dlqb_catalog_reader *reader,
                                     dlqb_catalog_check **out, dlqb_error *err) {
  *out = NULL;
  if (cfg->catalog.check_interval_ms == 0) return DLQB_OK;
  dlqb_catalog_check *c = calloc(1, sizeof *c);
  if (c == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  c->cfg = cfg;
  dlqb_config_pipeline(cfg, 0, &c->p);
  c->r = reader;
  if (dlqb_thread_start(&c->thread, run, c) != 0) {
    free(c);
    return dlqb_fail(err, DLQB_ENOMEM, "cannot start the catalog check thread");
  }
  *out = c;
  return DLQB_OK;
}

void dlqb_catalog_check_stop(dlqb_catalog_check *c) {
  if (c == NULL) return;
  c->stop = 1;
  pthread_join(c->thread, NULL);
  free(c);
}

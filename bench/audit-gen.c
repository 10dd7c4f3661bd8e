/* dlqb-audit-gen: writes an audit log of N hop records through the real
 * audit writer (dlqb_audit_record: hash chain, a signature per batch, seal,
 * group commit), for
 * bench/audit.sh to time `audit verify` and `audit show` on. Request ids
 * repeat every 100,000 hops (DSR-0 ..), so one id has N/100,000 hops, as a
 * task retried a few times has. A measuring tool, not part of dlq-bridge.
 *
 *   dlqb-audit-gen LOG KEY_FILE COUNT [BATCH [ROTATE_BYTES [FIRST]]]
 *
 * BATCH (default 1000, at most 1000) is how many hops each
 * dlqb_audit_record call hands over: small batches show the per-batch
 * costs (a signature, a seal line, the link between chains). ROTATE_BYTES
 * (default 0: never) rotates the log as the writer does; FIRST (default
 * 0) is the first request id's number (DSR-FIRST ..), for trails whose
 * runs name different requests.
 * Exit 0, or 1 with one line on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/audit.h"
#include "dlqb/clock.h"
#include "dlqb/config.h"

#define BATCH 1000
#define DISTINCT_REQUESTS 100000

int main(int argc, char **argv) {
  if (argc < 4 || argc > 7) {
    fprintf(stderr, "usage: dlqb-audit-gen LOG KEY_FILE COUNT [BATCH [ROTATE_BYTES [FIRST]]]\n");
    return 1;
  }
  long count = strtol(argv[3], NULL, 10);
  long per = argc >= 5 ? strtol(argv[4], NULL, 10) : BATCH;
  long long rotate = argc >= 6 ? strtoll(argv[5], NULL, 10) : 0;
  long first = argc >= 7 ? strtol(argv[6], NULL, 10) : 0;
  if (per < 1 || per > BATCH) {
    fprintf(stderr, "dlqb-audit-gen: BATCH must be 1 to %d\n", BATCH);
    return 1;
  }
  dlqb_config cfg;
  dlqb_config_defaults(&cfg);
  snprintf(cfg.audit.log, sizeof cfg.audit.log, "%s", argv[1]);
  snprintf(cfg.audit.key_file, sizeof cfg.audit.key_file, "%s", argv[2]);
  /* One file unless asked: the reading is measured, not rotation. */
  cfg.audit.rotate_bytes = rotate > 0 && rotate <= INT32_MAX ? (int)rotate : 0;
  dlqb_audit *a = NULL;
  dlqb_error err;
  if (dlqb_audit_open(&cfg, "audit-gen", &a, &err) != DLQB_OK) {
    fprintf(stderr, "dlqb-audit-gen: %s\n", err.msg);
    return 1;
  }
  const int64_t received = dlqb_now_ms() - INT64_C(10) * 86400000;
  static dlqb_hop hops[BATCH];
  const dlqb_hop *batch[BATCH];
  for (long done = 0; done < count;) {
    int n = count - done < per ? (int)(count - done) : (int)per;
    for (int i = 0; i < n; i++) {
      long k = done + i;
      dlqb_hop *h = &hops[i];
      memset(h, 0, sizeof *h);
      h->event = k % 7 == 6 ? DLQB_EV_DEAD_LETTERED : DLQB_EV_RETRY_SCHEDULED;
      snprintf(h->message_id, sizeof h->message_id, "msg-%ld", k);
      snprintf(h->request_id, sizeof h->request_id, "DSR-%ld", first + k % DISTINCT_REQUESTS);
      snprintf(h->source_system, sizeof h->source_system, "crm");
      snprintf(h->legal_basis, sizeof h->legal_basis, "gdpr_art_17");
      snprintf(h->action, sizeof h->action, "deletion");
      h->attempt = (int)(k % 5) + 1;
      /* A request's first hop is its first failure: it records the
       * receipt, as the router does (ten days before, as a producer said). */
      if (k < DISTINCT_REQUESTS) {
        h->has_received = true;
        h->received_at_ms = received;
        snprintf(h->received_from, sizeof h->received_from, "first_seen_at");
      }
      snprintf(h->reason, sizeof h->reason, "worker error: upstream timeout");
      snprintf(h->from, sizeof h->from, "dsr.failed");
      snprintf(h->to, sizeof h->to, k % 7 == 6 ? "dsr.dlq.manual" : "dsr.retry.5s");
      snprintf(h->actor, sizeof h->actor, "system");
      batch[i] = h;
    }
    if (dlqb_audit_record(a, batch, (size_t)n, &err) != DLQB_OK) {
      fprintf(stderr, "dlqb-audit-gen: %s\n", err.msg);
      dlqb_audit_close(a);
      return 1;
    }
    done += n;
  }
  dlqb_audit_close(a);
  return 0;
}

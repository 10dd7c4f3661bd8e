/* An item's audit history on its page: the configured log, verified with
 * the writers' public keys as `audit verify` does, and its hops listed as
 * `audit show` prints them (ops_hop_text), escaped. A log that does not
 * verify shows no hop, only why. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console.h"
#include "dlqb/audit.h"
#include "dlqb/envelope.h"
#include "dlqb/ops.h"

void console_audit_history(console_req *r, const dlqb_item *it) {
  dlqb_html *h = &r->out;
  const dlqb_config *cfg = console_g.cfg;
  dlqb_html_raw(h, "<h2>Audit history</h2>");
  if (cfg->audit.log[0] == '\0' || cfg->audit.public_keys[0] == '\0') {
    dlqb_html_raw(h, "<p class=\"note\" id=\"audit\">No audit trail is configured "
                     "(audit_log and audit_public_keys).</p>");
    return;
  }
  ops_hops c = {.message_id = it->message_id, .pipeline = console_g.pipeline};
  dlqb_error err = {{0}};
  dlqb_status st = ops_hops_read(cfg, &c, &err);
  if (st != DLQB_OK) {
    dlqb_html_raw(h, "<p class=\"error\" id=\"audit\">The audit log does not verify, so no hop "
                     "is shown: ");
    dlqb_html_text(h, err.msg);
    dlqb_html_raw(h, "</p>");
  } else if (c.n == 0) {
    dlqb_html_raw(h, "<p id=\"audit\">No hop recorded for this message yet.</p>");
  } else {
    dlqb_html_raw(h, "<pre class=\"audit\" id=\"audit\">");
    char line[16 * DLQB_LAST_ERROR_MAX +
              1024]; /* an edit hop: up to eight fields, two values each */
    for (size_t i = 0; i < c.n; i++) {
      dlqb_html_text(h, ops_hop_text(c.hops[i], line, sizeof line));
      dlqb_html_raw(h, "\n");
    }
    dlqb_html_raw(h, "</pre>");
  }
  ops_hops_free(&c);
}

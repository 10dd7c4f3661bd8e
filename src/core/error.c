/* Error detail formatting shared by every module, and errno as error text. */
#include "dlqb/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

dlqb_status dlqb_fail(dlqb_error *err, dlqb_status status, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return status;
}

const char *dlqb_errno_text(int e, char *buf, size_t len) {
  if (buf == NULL || len == 0) return "";
  buf[0] = '\0';
  /* The POSIX strerror_r (this build defines no _GNU_SOURCE): strerror's
   * buffer for unknown values is shared between threads. An unknown value
   * may still have been described before the failure is reported. */
  int rc = strerror_r(e, buf, len);
  if (rc != 0 && buf[0] == '\0') snprintf(buf, len, "unknown error %d", e);
  if (buf[0] >= 'A' && buf[0] <= 'Z') buf[0] = (char)(buf[0] - 'A' + 'a');
  return buf;
}

/* Error detail formatting shared by every module. */
#include "dlqb/error.h"

#include <stdarg.h>
#include <stdio.h>

dlqb_status dlqb_fail(dlqb_error *err, dlqb_status status, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return status;
}

/* Error reporting shared by every module: a status code plus one line of
 * detail in a caller-owned buffer, so no module prints or exits on its own. */
#ifndef DLQB_ERROR_H
#define DLQB_ERROR_H

#include <stddef.h>

#define DLQB_ERROR_MAX 512

/* Outcomes of core functions. Negative values are failures. */
typedef enum {
  DLQB_OK = 0,
  DLQB_EINVAL = -1,  /* bad input: a setting, a header, a file's content */
  DLQB_ENOMEM = -2,  /* allocation failed */
  DLQB_EIO = -3,     /* a file or socket operation failed */
  DLQB_EBROKER = -4, /* the broker refused or closed: see the detail */
  DLQB_ECONN = -5,   /* the connection is gone; reconnect */
  DLQB_ETIMEOUT = -6,
  DLQB_ECONFLICT = -7, /* an existing object differs (e.g. queue arguments) */
  DLQB_EACCESS = -8,   /* the broker refused: permissions */
  DLQB_EREFUSED = -9   /* this one message cannot be published as it is (nothing was sent) */
} dlqb_status;

/* Caller-owned detail for the last failure: one line, lower case, no
 * trailing newline, never containing credentials or message payloads. */
typedef struct {
  char msg[DLQB_ERROR_MAX];
} dlqb_error;

/* Formats the detail into err (a NULL err is allowed and ignored) and
 * returns status, so a failure path reads `return dlqb_fail(err, ...)`. */
dlqb_status dlqb_fail(dlqb_error *err, dlqb_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Room for any dlqb_errno_text. */
#define DLQB_ERRNO_TEXT_MAX 128

/* The C library's text for the errno value e ("No such file or
 * directory"), its first letter lower-cased to fit the error style above:
 * "no such file or directory". Written into buf (len > 0 bytes, cut to
 * fit); safe to call from any thread. Returns buf. */
const char *dlqb_errno_text(int e, char *buf, size_t len);

#endif

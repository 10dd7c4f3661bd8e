/* Whole-file helpers for the small files dlq-bridge keeps beside its work:
 * the audit trail's seal and the completion ledger's cache. */
#ifndef DLQB_FILE_H
#define DLQB_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include "dlqb/error.h"

/* Writes all n bytes to fd, retrying short writes and EINTR. False with
 * errno set on failure (ENOSPC for a write that made no progress). */
bool dlqb_write_all(int fd, const void *p, size_t n);

/* Reads fd to its end into *buf (grown with realloc as needed, *cap its
 * size; the caller frees it), setting *len. False with errno set when a
 * read fails or memory runs out. */
bool dlqb_read_fd(int fd, char **buf, size_t *cap, size_t *len);

/* dlqb_read_fd of the file at path. A file that does not exist reads as
 * empty. False with errno set when it cannot be read. */
bool dlqb_read_file(const char *path, char **buf, size_t *cap, size_t *len);

/* Replaces path with the n bytes at data so that a crash leaves either the
 * old file or the new one, never a torn one: a temporary file beside it
 * (mode 0600, path.tmp.<random>, created exclusively: never an existing
 * file or link), synced, then renamed over path, and the directory synced. On failure the temporary file is removed and path is unchanged;
 * `what` names the file in the error (e.g. "the ledger cache"). */
dlqb_status dlqb_file_replace(const char *path, const void *data, size_t n, const char *what,
                              dlqb_error *err);

/* The directory this process keeps its own state in (a look's checkpoint
 * of the catalog): $STATE_DIRECTORY (systemd's StateDirectory=, the first
 * of its list) when set, else $XDG_STATE_HOME/dlq-bridge, else
 * $HOME/.local/state/dlq-bridge; made (mode 0700, parents too) when
 * missing. Refused (DLQB_EINVAL) unless it is a directory of the
 * effective user that no one else may write to: another user's file
 * there would be taken for our own fold; also when none of the
 * variables is set. */
dlqb_status dlqb_state_dir(char *out, size_t cap, dlqb_error *err);

#endif

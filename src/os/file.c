/* Whole-file helpers: see include/dlqb/file.h. */
#include "dlqb/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_CHUNK 65536

bool dlqb_write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      return false;
    }
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* Makes room for at least `more` bytes after len. */
static bool reserve(char **buf, size_t *cap, size_t len, size_t more) {
  if (*cap - len >= more) return true;
  size_t ncap = *cap ? *cap : READ_CHUNK;
  while (ncap - len < more) ncap *= 2;
  char *n = realloc(*buf, ncap);
  if (n == NULL) {
    errno = ENOMEM;
    return false;
  }
  *buf = n;
  *cap = ncap;
  return true;
}

bool dlqb_read_fd(int fd, char **buf, size_t *cap, size_t *len) {
  *len = 0;
  for (;;) {
    if (!reserve(buf, cap, *len, READ_CHUNK)) return false;
    ssize_t r = read(fd, *buf + *len, *cap - *len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) return true;
    *len += (size_t)r;
  }
}

bool dlqb_read_file(const char *path, char **buf, size_t *cap, size_t *len) {
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  bool ok = dlqb_read_fd(fd, buf, cap, len);
  int saved = errno;
  close(fd);
  errno = saved;
  return ok;
}

dlqb_status dlqb_file_replace(const char *path, const void *data, size_t n, const char *what,
                              dlqb_error *err) {
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp)
    return dlqb_fail(err, DLQB_EINVAL, "cannot write %s '%s': path too long", what, path);
  /* mkstemp: a fresh random name, created with O_EXCL and mode 0600, so a
   * file or link planted under a guessable name (path.tmp.<pid>) is never
   * followed or truncated. */
  int fd = mkstemp(tmp);
  if (fd >= 0) (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  bool ok = fd >= 0 && dlqb_write_all(fd, data, n) && fdatasync(fd) == 0;
  int saved = errno;
  if (fd >= 0 && close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && rename(tmp, path) != 0) {
    ok = false;
    saved = errno;
  }
  if (!ok) {
    if (fd >= 0) unlink(tmp);
    char why[DLQB_ERRNO_TEXT_MAX];
    return dlqb_fail(err, DLQB_EIO, "cannot write %s '%s': %s", what, path,
                     dlqb_errno_text(saved, why, sizeof why));
  }
  /* The rename is durable only once the directory is synced (best effort:
   * the new file is complete either way). */
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == dir) slash[1] = '\0';
  else if (slash != NULL) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return DLQB_OK;
}

/* mkdir -p of path with mode 0700 for what it makes. */
static bool make_dirs(char *path) {
  for (char *p = path + 1; *p != '\0'; p++) {
    if (*p != '/') continue;
    *p = '\0';
    bool ok = mkdir(path, 0700) == 0 || errno == EEXIST;
    *p = '/';
    if (!ok) return false;
  }
  return mkdir(path, 0700) == 0 || errno == EEXIST;
}

dlqb_status dlqb_state_dir(char *out, size_t cap, dlqb_error *err) {
  const char *sd = getenv("STATE_DIRECTORY"), *xdg = getenv("XDG_STATE_HOME"),
             *home = getenv("HOME");
  int n;
  if (sd != NULL && sd[0] == '/') n = snprintf(out, cap, "%.*s", (int)strcspn(sd, ":"), sd);
  else if (xdg != NULL && xdg[0] == '/') n = snprintf(out, cap, "%s/dlq-bridge", xdg);
  else if (home != NULL && home[0] == '/')
    n = snprintf(out, cap, "%s/.local/state/dlq-bridge", home);
  else
    return dlqb_fail(err, DLQB_EINVAL,
                     "no state directory (neither XDG_STATE_HOME nor HOME is set)");
  if (n < 0 || (size_t)n >= cap)
    return dlqb_fail(err, DLQB_EINVAL, "the state directory's path is too long");
  char why[DLQB_ERRNO_TEXT_MAX];
  if (!make_dirs(out))
    return dlqb_fail(err, DLQB_EIO, "cannot make the state directory '%s': %s", out,
                     dlqb_errno_text(errno, why, sizeof why));
  struct stat st;
  if (lstat(out, &st) != 0)
    return dlqb_fail(err, DLQB_EIO, "cannot read the state directory '%s': %s", out,
                     dlqb_errno_text(errno, why, sizeof why));
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022) != 0)
    return dlqb_fail(err, DLQB_EINVAL,
                     "the state directory '%s' is not a directory of this user that only it may "
                     "write to; not used",
                     out);
  return DLQB_OK;
}

/* The config file from disk: open without following it into a FIFO or a
 * device, check what it is, read it whole, hand the text to the core. */
#include "dlqb/config_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlqb/text.h"

/* Reads the open regular file fd (at most DLQB_CONFIG_FILE_MAX bytes). */
static dlqb_status read_text(int fd, char **out, size_t *out_len, dlqb_error *err) {
  char why[DLQB_ERRNO_TEXT_MAX];
  char *buf = malloc(DLQB_CONFIG_FILE_MAX + 1);
  size_t n = 0;
  if (buf == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  while (n <= DLQB_CONFIG_FILE_MAX) {
    ssize_t got = read(fd, buf + n, DLQB_CONFIG_FILE_MAX + 1 - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int e = errno;
      free(buf);
      return dlqb_fail(err, DLQB_EIO, "cannot read: %s", dlqb_errno_text(e, why, sizeof why));
    }
    if (got == 0) break;
    n += (size_t)got;
  }
  if (n > DLQB_CONFIG_FILE_MAX) {
    free(buf);
    return dlqb_fail(err, DLQB_EINVAL, "is larger than %d bytes", DLQB_CONFIG_FILE_MAX);
  }
  *out = buf;
  *out_len = n;
  return DLQB_OK;
}

/* Opens, checks and applies; errors without the "config file" prefix. */
static dlqb_status load(dlqb_config *c, const char *path, bool required, uint64_t *set_keys,
                        bool *loaded, dlqb_error *err) {
  char why[DLQB_ERRNO_TEXT_MAX];
  /* O_NONBLOCK: a FIFO at the path must not hang the start; it is refused
   * below as not a regular file. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    if (!required && e == ENOENT) return DLQB_OK;
    return dlqb_fail(err, DLQB_EIO, "cannot open: %s", dlqb_errno_text(e, why, sizeof why));
  }
  struct stat sb;
  dlqb_status st = DLQB_OK;
  char *text = NULL;
  size_t len = 0;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    st = dlqb_fail(err, DLQB_EIO, "cannot stat: %s", dlqb_errno_text(e, why, sizeof why));
  } else if (S_ISDIR(sb.st_mode)) {
    st = dlqb_fail(err, DLQB_EIO, "cannot read: is a directory");
  } else if (!S_ISREG(sb.st_mode)) {
    st = dlqb_fail(err, DLQB_EINVAL, "is not a regular file");
  } else if ((sb.st_mode & 002) != 0) {
    /* Anyone could point the trail elsewhere or the url at their broker. */
    st = dlqb_fail(err, DLQB_EINVAL,
                   "is writable by any user (mode %04o), who could change what dlq-bridge does: "
                   "chmod o-w it",
                   (unsigned)(sb.st_mode & 07777));
  } else {
    st = read_text(fd, &text, &len, err);
  }
  close(fd);
  if (st != DLQB_OK) return st;
  dlqb_config *work = dlqb_config_copy(c);
  if (work == NULL) {
    free(text);
    return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  }
  uint64_t keys = 0;
  st = dlqb_config_apply_json_keys(work, text, len, &keys, err);
  free(text);
  if (st != DLQB_OK) {
    dlqb_config_free(work);
    return st;
  }
  long url = dlqb_config_key_index("url");
  if (url >= 0 && (keys & (UINT64_C(1) << url)) != 0 &&
      dlqb_config_url_has_password(work->broker.url) && (sb.st_mode & 044) != 0) {
    /* Every operator reads this file: a password in it is everyone's. */
    dlqb_config_free(work);
    return dlqb_fail(err, DLQB_EINVAL,
                     "key 'url' holds a password, and the file is readable by group or others "
                     "(mode %04o): put the password in a password_file, or chmod 600 the file",
                     (unsigned)(sb.st_mode & 07777));
  }
  for (size_t i = 0; i < work->pipeline_count && (sb.st_mode & 044) != 0; i++) {
    if (!dlqb_config_url_has_password(work->pipelines[i].url)) continue;
    char name[DLQB_PIPELINE_NAME_MAX];
    snprintf(name, sizeof name, "%s", work->pipelines[i].p.name);
    dlqb_config_free(work);
    return dlqb_fail(err, DLQB_EINVAL,
                     "key 'pipelines.%s.url' holds a password, and the file is readable by group "
                     "or others (mode %04o): put the password in its password_file, or chmod 600 "
                     "the file",
                     name, (unsigned)(sb.st_mode & 07777));
  }
  dlqb_config_take(c, work);
  if (set_keys != NULL) *set_keys = keys;
  if (loaded != NULL) *loaded = true;
  return DLQB_OK;
}

dlqb_status dlqb_config_load_file(dlqb_config *c, const char *path, bool required,
                                  uint64_t *set_keys, bool *loaded, dlqb_error *err) {
  char q[DLQB_QUOTE_BUF];
  dlqb_error detail;
  if (set_keys != NULL) *set_keys = 0;
  if (loaded != NULL) *loaded = false;
  if (c == NULL || path == NULL) return dlqb_fail(err, DLQB_EINVAL, "no config file given");
  dlqb_status st = load(c, path, required, set_keys, loaded, &detail);
  if (st != DLQB_OK)
    return dlqb_fail(err, st, "config file '%s': %s", dlqb_text_quote(q, path, strlen(path)),
                     detail.msg);
  return DLQB_OK;
}

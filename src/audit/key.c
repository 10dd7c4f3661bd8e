/* The audit key: loading the key file under its permission rules, and the
 * key's public id. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit_private.h"

#define KEY_ID_LABEL "dlq-bridge audit key id"

/* Once the key is in memory, a core dump would carry it to wherever cores
 * go (often a world-readable crash directory or a ticket). Both, because
 * each covers what the other misses: RLIMIT_CORE 0 (soft and hard, so
 * nothing in the process raises it again) stops core files the kernel
 * writes itself; a piped core_pattern (systemd-coredump, apport) ignores
 * RLIMIT_CORE, but not PR_SET_DUMPABLE 0, which also keeps other
 * processes of the same user from ptrace-attaching and reading the key. */
static void no_core_dumps(void) {
  struct rlimit none = {0, 0};
  (void)setrlimit(RLIMIT_CORE, &none);
  (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

dlqb_status dlqb_audit_key_load(const char *path, unsigned char key[DLQB_AUDIT_KEY_MAX],
                                size_t *key_len, dlqb_error *err) {
  char why[128];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return dlqb_fail(err, errno == ENOENT ? DLQB_EINVAL : DLQB_EIO,
                     "cannot open audit key file '%s': %s", path,
                     dlqb_errno_text(errno, why, sizeof why));
  dlqb_status st = DLQB_OK;
  unsigned char tmp[DLQB_AUDIT_KEY_MAX + 1];
  size_t n = 0;
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    st = dlqb_fail(err, DLQB_EIO, "cannot stat audit key file '%s': %s", path,
                   dlqb_errno_text(errno, why, sizeof why));
    goto done;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = dlqb_fail(err, DLQB_EINVAL, "audit key file '%s' is not a regular file", path);
    goto done;
  }
  /* A key others can read signs nothing: anyone could forge records. */
  if ((sb.st_mode & 077) != 0) {
    st = dlqb_fail(err, DLQB_EINVAL,
                   "audit key file '%s' is accessible by group or others (mode %04o); "
                   "chmod 600 it",
                   path, (unsigned)(sb.st_mode & 07777));
    goto done;
  }
  for (;;) {
    ssize_t r = read(fd, tmp + n, sizeof tmp - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      st = dlqb_fail(err, DLQB_EIO, "cannot read audit key file '%s': %s", path,
                     dlqb_errno_text(errno, why, sizeof why));
      goto done;
    }
    if (r == 0 || (n += (size_t)r) == sizeof tmp) break;
  }
  while (n > 0 && (tmp[n - 1] == '\n' || tmp[n - 1] == '\r' || tmp[n - 1] == ' ' ||
                   tmp[n - 1] == '\t'))
    n--;
  if (n > DLQB_AUDIT_KEY_MAX) {
    st = dlqb_fail(err, DLQB_EINVAL, "audit key file '%s' is longer than %d bytes", path,
                   DLQB_AUDIT_KEY_MAX);
  } else if (n < DLQB_AUDIT_KEY_MIN) {
    st = dlqb_fail(err, DLQB_EINVAL,
                   "audit key file '%s' holds %zu bytes; at least %d are needed "
                   "(e.g. openssl rand -hex 32)",
                   path, n, DLQB_AUDIT_KEY_MIN);
  } else {
    no_core_dumps();
    memcpy(key, tmp, n);
    *key_len = n;
  }
done:
  OPENSSL_cleanse(tmp, sizeof tmp);
  close(fd);
  return st;
}

void dlqb_audit_key_id(const unsigned char *key, size_t key_len, char *out) {
  dlqb__audit_hmac h;
  char hex[DLQB_AUDIT_MAC_HEX + 1] = "";
  /* The label is hashed as a body, "}" appended: any fixed text will do. */
  if (dlqb__audit_hmac_init(&h, key, key_len)) {
    if (!dlqb__audit_hmac_body(&h, KEY_ID_LABEL, strlen(KEY_ID_LABEL), hex)) hex[0] = '\0';
    dlqb__audit_hmac_release(&h);
  }
  snprintf(out, DLQB_AUDIT_KEY_ID_HEX + 1, "%s", hex[0] ? hex : "unknown");
}

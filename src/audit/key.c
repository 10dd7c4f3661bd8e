/* The audit keys: loading a writer's Ed25519 private key under its
 * permission rules, key ids, and the verifier's ring of public keys. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit_private.h"

#define KEY_FILE_MAX   (64 * 1024) /* a PEM key is a few hundred bytes */
#define REVOKED_SUFFIX ".pem.revoked"

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

/* Reads the whole file at fd (at most KEY_FILE_MAX bytes) into buf. */
static dlqb_status read_key_file(int fd, const char *path, char *buf, size_t *n, dlqb_error *err) {
  char why[128];
  *n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + *n, KEY_FILE_MAX - *n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return dlqb_fail(err, DLQB_EIO, "cannot read audit key file '%s': %s", path,
                       dlqb_errno_text(errno, why, sizeof why));
    if (r == 0) return DLQB_OK;
    if ((*n += (size_t)r) == KEY_FILE_MAX)
      return dlqb_fail(err, DLQB_EINVAL, "audit key file '%s' is longer than %d bytes", path,
                       KEY_FILE_MAX);
  }
}

bool dlqb__audit_key_id_of(EVP_PKEY *key, char *out) {
  unsigned char raw[32], md[32];
  size_t len = sizeof raw;
  unsigned int md_len = 0;
  if (EVP_PKEY_get_raw_public_key(key, raw, &len) != 1 || len != sizeof raw ||
      EVP_Digest(raw, len, md, &md_len, EVP_sha256(), NULL) != 1)
    return false;
  dlqb__audit_hex(md, DLQB_AUDIT_KEY_ID_HEX / 2, out);
  return true;
}

dlqb_status dlqb_audit_key_load(const char *path, EVP_PKEY **out, char *key_id, dlqb_error *err) {
  char why[128];
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return dlqb_fail(err, errno == ENOENT ? DLQB_EINVAL : DLQB_EIO,
                     "cannot open audit key file '%s': %s", path,
                     dlqb_errno_text(errno, why, sizeof why));
  dlqb_status st = DLQB_OK;
  char *buf = malloc(KEY_FILE_MAX);
  size_t n = 0;
  struct stat sb;
  if (buf == NULL) {
    st = dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  } else if (fstat(fd, &sb) != 0) {
    st = dlqb_fail(err, DLQB_EIO, "cannot stat audit key file '%s': %s", path,
                   dlqb_errno_text(errno, why, sizeof why));
  } else if (!S_ISREG(sb.st_mode)) {
    st = dlqb_fail(err, DLQB_EINVAL, "audit key file '%s' is not a regular file", path);
  } else if ((sb.st_mode & 077) != 0) {
    /* A private key others can read signs nothing: anyone could forge. */
    st = dlqb_fail(err, DLQB_EINVAL,
                   "audit key file '%s' is accessible by group or others (mode %04o); "
                   "chmod 600 it",
                   path, (unsigned)(sb.st_mode & 07777));
  } else if ((st = read_key_file(fd, path, buf, &n, err)) == DLQB_OK) {
    no_core_dumps();
    BIO *bio = BIO_new_mem_buf(buf, (int)n);
    EVP_PKEY *k = bio != NULL ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (k == NULL || !EVP_PKEY_is_a(k, "ED25519") || !dlqb__audit_key_id_of(k, key_id)) {
      EVP_PKEY_free(k);
      st = dlqb_fail(err, DLQB_EINVAL,
                     "audit key file '%s' is not an Ed25519 private key in PEM (make one with "
                     "openssl genpkey -algorithm ed25519)",
                     path);
    } else {
      *out = k;
    }
  }
  if (buf != NULL) {
    OPENSSL_cleanse(buf, KEY_FILE_MAX);
    free(buf);
  }
  close(fd);
  return st;
}

/* ---- the ring of public keys ---- */

dlqb_audit_keyring *dlqb_audit_keyring_new(void) { return calloc(1, sizeof(dlqb_audit_keyring)); }

void dlqb_audit_keyring_free(dlqb_audit_keyring *r) {
  if (r == NULL) return;
  for (size_t i = 0; i < r->n; i++) EVP_PKEY_free(r->keys[i].pub);
  free(r->keys);
  free(r);
}

size_t dlqb_audit_keyring_size(const dlqb_audit_keyring *r) { return r != NULL ? r->n : 0; }

const dlqb__audit_pubkey *dlqb__audit_keyring_find(const dlqb_audit_keyring *r, const char *id) {
  for (size_t i = 0; r != NULL && i < r->n; i++)
    if (strcmp(r->keys[i].id, id) == 0) return &r->keys[i];
  return NULL;
}

dlqb_status dlqb__audit_keyring_put(dlqb_audit_keyring *r, EVP_PKEY *pub, const char *name,
                                    bool revoked, dlqb_error *err) {
  char id[DLQB_AUDIT_KEY_ID_HEX + 1];
  if (!dlqb__audit_key_id_of(pub, id))
    return dlqb_fail(err, DLQB_EINVAL, "'%s' holds no Ed25519 public key", name);
  dlqb__audit_pubkey *have = (dlqb__audit_pubkey *)dlqb__audit_keyring_find(r, id);
  if (have != NULL) {
    /* The same key twice (e.g. its .pem and its .pem.revoked): revoked wins. */
    have->revoked = have->revoked || revoked;
    return DLQB_OK;
  }
  if (r->n == r->cap) {
    size_t ncap = r->cap ? r->cap * 2 : 8;
    dlqb__audit_pubkey *grown = realloc(r->keys, ncap * sizeof *grown);
    if (grown == NULL) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
    r->keys = grown;
    r->cap = ncap;
  }
  if (EVP_PKEY_up_ref(pub) != 1) return dlqb_fail(err, DLQB_ENOMEM, "out of memory");
  dlqb__audit_pubkey *k = &r->keys[r->n++];
  memset(k, 0, sizeof *k);
  memcpy(k->id, id, sizeof k->id);
  k->pub = pub;
  k->revoked = revoked;
  snprintf(k->name, sizeof k->name, "%s", name);
  return DLQB_OK;
}

/* Adds the one public key in the PEM file at path. */
static dlqb_status add_file(dlqb_audit_keyring *r, const char *path, bool revoked,
                            dlqb_error *err) {
  char why[128];
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return dlqb_fail(err, errno == ENOENT ? DLQB_EINVAL : DLQB_EIO,
                     "cannot open audit public key '%s': %s", path,
                     dlqb_errno_text(errno, why, sizeof why));
  char head[64] = "";
  size_t got = fread(head, 1, sizeof head - 1, f);
  head[got] = '\0';
  rewind(f);
  /* A verifier must never need a secret: a private key handed to it is a
   * mistake to point out, not to use. */
  if (strstr(head, "PRIVATE KEY") != NULL) {
    fclose(f);
    return dlqb_fail(err, DLQB_EINVAL,
                     "'%s' holds a private key; give verify the public key (openssl pkey -in "
                     "KEY -pubout)",
                     path);
  }
  EVP_PKEY *pub = PEM_read_PUBKEY(f, NULL, NULL, NULL);
  fclose(f);
  if (pub == NULL || !EVP_PKEY_is_a(pub, "ED25519")) {
    EVP_PKEY_free(pub);
    return dlqb_fail(err, DLQB_EINVAL, "'%s' is not an Ed25519 public key in PEM", path);
  }
  dlqb_status st = dlqb__audit_keyring_put(r, pub, path, revoked, err);
  EVP_PKEY_free(pub);
  return st;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

dlqb_status dlqb_audit_keyring_add(dlqb_audit_keyring *r, const char *path, dlqb_error *err) {
  char why[128];
  struct stat sb;
  if (stat(path, &sb) != 0)
    return dlqb_fail(err, errno == ENOENT ? DLQB_EINVAL : DLQB_EIO,
                     "cannot open audit public keys '%s': %s", path,
                     dlqb_errno_text(errno, why, sizeof why));
  if (!S_ISDIR(sb.st_mode)) return add_file(r, path, ends_with(path, REVOKED_SUFFIX), err);
  DIR *d = opendir(path);
  if (d == NULL)
    return dlqb_fail(err, DLQB_EIO, "cannot list audit public keys '%s': %s", path,
                     dlqb_errno_text(errno, why, sizeof why));
  dlqb_status st = DLQB_OK;
  size_t found = 0; /* files, not new keys: a writer's own key may be there too */
  struct dirent *e;
  while (st == DLQB_OK && (e = readdir(d)) != NULL) {
    bool revoked = ends_with(e->d_name, REVOKED_SUFFIX);
    if (e->d_name[0] == '.' || (!revoked && !ends_with(e->d_name, ".pem"))) continue;
    char file[DLQB_CONFIG_STR_MAX + 300];
    snprintf(file, sizeof file, "%s/%s", path, e->d_name);
    st = add_file(r, file, revoked, err);
    found++;
  }
  closedir(d);
  if (st == DLQB_OK && found == 0)
    st = dlqb_fail(err, DLQB_EINVAL, "no public key (*.pem) in '%s'", path);
  return st;
}

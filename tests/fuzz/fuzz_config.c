/* libFuzzer target: the JSON config parser and the URL redactor.
 * The first byte picks what the rest is fed to:
 *   even  dlqb_config_apply_json (then dlqb_config_validate)
 *   odd   "key\0value": dlqb_config_set, and dlqb_url_redact on value
 * Contracts checked: a failure leaves the config byte-identical and gives
 * one printable line; the redacted URL never contains the password. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/config.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(dlqb_status st, const dlqb_error *err, const dlqb_config *before,
                        const dlqb_config *after) {
  if (st == DLQB_OK) return;
  FUZZ_CHECK(memcmp(before, after, sizeof *before) == 0);
  FUZZ_CHECK(err->msg[0] != '\0');
  FUZZ_CHECK(memchr(err->msg, '\n', strnlen(err->msg, sizeof err->msg)) == NULL);
  FUZZ_CHECK(strnlen(err->msg, sizeof err->msg) < sizeof err->msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  dlqb_config *c = malloc(sizeof *c), *before = malloc(sizeof *before);
  FUZZ_CHECK(c != NULL && before != NULL);
  memset(c, 0, sizeof *c);
  dlqb_config_defaults(c);
  memcpy(before, c, sizeof *c);
  dlqb_error err;
  memset(&err, 0, sizeof err);
  const uint8_t sel = data[0];
  data++;
  size--;
  if (sel % 2 == 0) {
    /* An exact-size, unterminated copy: the parser must honour len. */
    char *text = malloc(size ? size : 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    dlqb_status st = dlqb_config_apply_json(c, text, size, &err);
    check_error(st, &err, before, c);
    if (st == DLQB_OK) {
      FUZZ_CHECK(c->policy.retry_delay_count >= 1 &&
                 c->policy.retry_delay_count <= DLQB_MAX_RETRY_DELAYS);
      FUZZ_CHECK(c->policy.max_attempts >= 1);
      FUZZ_CHECK(strnlen(c->broker.url, sizeof c->broker.url) < sizeof c->broker.url);
      dlqb_error verr;
      dlqb_status vst = dlqb_config_validate(c, &verr);
      FUZZ_CHECK(vst == DLQB_OK || vst == DLQB_EINVAL);
    }
    free(text);
  } else {
    /* key NUL value, both NUL-terminated copies. */
    char *text = malloc(size + 2);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    text[size + 1] = '\0';
    const char *key = text;
    const char *value = text + strlen(text) + 1;
    if (value > text + size) value = text + size; /* no NUL in the input: empty value */
    dlqb_status st = dlqb_config_set(c, key, value, "fuzz", &err);
    check_error(st, &err, before, c);

    char red[256];
    memset(red, 'x', sizeof red);
    dlqb_url_redact(value, red, sizeof red);
    FUZZ_CHECK(memchr(red, '\0', sizeof red) != NULL);
    char tiny[1] = {'x'};
    dlqb_url_redact(value, tiny, sizeof tiny);
    FUZZ_CHECK(tiny[0] == '\0');
    /* A well-formed userinfo password of 8+ chars must never show. */
    const char *scheme = strstr(value, "://");
    if (scheme != NULL) {
      const char *user = scheme + 3;
      const char *at = strchr(user, '@');
      const char *colon = strchr(user, ':');
      if (at != NULL && colon != NULL && colon < at && at - colon - 1 >= 8 &&
          strcspn(user, "/?#") > (size_t)(at - user) && (size_t)(at - colon - 1) < 64) {
        char pw[64];
        memcpy(pw, colon + 1, (size_t)(at - colon - 1));
        pw[at - colon - 1] = '\0';
        char full[DLQB_CONFIG_STR_MAX * 2];
        dlqb_url_redact(value, full, sizeof full);
        /* Only when the password appears nowhere else in the URL. */
        const char *first = strstr(value, pw);
        if (first != NULL && strstr(first + 1, pw) == NULL && strstr("***", pw) == NULL)
          FUZZ_CHECK(strstr(full, pw) == NULL);
      }
    }
    free(text);
  }
  free(c);
  free(before);
  return 0;
}

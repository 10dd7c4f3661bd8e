/* What the audit writer (audit.c) and verifier (audit_verify.c) share: the
 * HMAC over a record's text and the few format constants both must agree
 * on. Private to the core library. */
#ifndef DLQB_AUDIT_PRIVATE_H
#define DLQB_AUDIT_PRIVATE_H

#include <openssl/evp.h>
#include <stdbool.h>
#include <stddef.h>

#include "dlqb/audit.h"

/* Every record and seal line is BODY + MAC_TAIL + 64 hex + "\"}", where
 * BODY starts with '{' and the MAC covers BODY + "}" (the record as a JSON
 * object without its mac member). */
#define DLQB__AUDIT_MAC_TAIL ",\"mac\":\""
#define DLQB__AUDIT_MAC_TAIL_LEN 8
#define DLQB__AUDIT_SUFFIX_LEN (DLQB__AUDIT_MAC_TAIL_LEN + DLQB_AUDIT_MAC_HEX + 2)

/* The prev of a chain's first record. */
#define DLQB__AUDIT_ZERO_MAC "0000000000000000000000000000000000000000000000000000000000000000"

#define DLQB__AUDIT_EV_CHAIN_START "chain_start"
#define DLQB__AUDIT_EV_CHAIN_END "chain_end"
#define DLQB__AUDIT_EV_FILE_START "file_start"

/* An HMAC-SHA256 context keyed once; each mac call reuses it, so hashing a
 * record allocates nothing. */
typedef struct {
  EVP_MAC *mac;
  EVP_MAC_CTX *ctx;
} dlqb__audit_hmac;

/* Keys h; false when OpenSSL fails (out of memory). */
bool dlqb__audit_hmac_init(dlqb__audit_hmac *h, const unsigned char *key, size_t key_len);
void dlqb__audit_hmac_release(dlqb__audit_hmac *h);

/* Writes the lower-case hex HMAC of body[0..len) + "}" into out (65 bytes).
 * False when OpenSSL fails. */
bool dlqb__audit_hmac_body(dlqb__audit_hmac *h, const char *body, size_t len, char *out);

/* Splits a line into its body and mac: true when the line ends in
 * ,"mac":"<64 lower-case hex>"} and starts with '{'; *body_len is then the
 * length of the body and mac points at the 64 hex digits in line. */
bool dlqb__audit_split(const char *line, size_t len, size_t *body_len, const char **mac);

/* Constant-time comparison of two 64-digit hex MACs. */
bool dlqb__audit_mac_equal(const char *a, const char *b);

#endif

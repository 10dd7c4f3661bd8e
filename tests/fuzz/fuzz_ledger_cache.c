/* libFuzzer target: the completion ledger's cache decoder.
 * Contracts checked: any bytes decode or are refused with one line (never
 * a crash or an overread); what decodes encodes back to bytes that decode
 * to the same marker, offset, unverified count and number of pairs, and is
 * refused under another writers list. Half the inputs (first byte odd) are
 * taken as the pairs section behind a header with a correct digest, so the
 * pair parser is reached past the SHA-256 check. */
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/ledger.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The completion writers every input is decoded under. */
#define WRITERS "w1,w2"

/* A cache whose header is right for the pairs in data (count from byte 1). */
static char *wrap(const uint8_t *data, size_t size, size_t *len) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  size_t count = size > 1 ? data[1] % 16 : 0;
  const uint8_t *pairs = size > 2 ? data + 2 : data;
  size_t plen = size > 2 ? size - 2 : 0;
  FUZZ_CHECK(EVP_Digest(pairs, plen, md, &mdlen, EVP_sha256(), NULL) == 1);
  char hex[2 * EVP_MAX_MD_SIZE + 1];
  for (unsigned int i = 0; i < mdlen; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
  char head[320];
  int hl = snprintf(head, sizeof head,
                    "dlq-bridge completion ledger cache 2\nwriters " WRITERS "\nmarker 1-2-3-ab\n"
                    "offset 7\npairs %zu\nunverified 3\nsha256 %s\n\n",
                    count, hex);
  char *buf = malloc((size_t)hl + plen + 1);
  FUZZ_CHECK(buf != NULL);
  memcpy(buf, head, (size_t)hl);
  if (plen > 0) memcpy(buf + hl, pairs, plen);
  *len = (size_t)hl + plen;
  return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t len = size;
  char *buf;
  if (size > 0 && (data[0] & 1)) {
    buf = wrap(data, size, &len);
  } else {
    buf = malloc(size ? size : 1); /* exactly size bytes: ASan sees any overread */
    FUZZ_CHECK(buf != NULL);
    if (size > 0) memcpy(buf, data, size);
  }
  dlqb_ledger *l = dlqb_ledger_new();
  FUZZ_CHECK(l != NULL);
  dlqb_ledger_mark mark;
  dlqb_error err;
  memset(&err, 0, sizeof err);
  if (dlqb_ledger_cache_decode(buf, len, WRITERS, l, &mark, &err) == DLQB_OK) {
    char *again;
    size_t again_len;
    FUZZ_CHECK(dlqb_ledger_cache_encode(l, &mark, WRITERS, &again, &again_len, &err) == DLQB_OK);
    dlqb_ledger *back = dlqb_ledger_new();
    dlqb_ledger_mark mark2;
    FUZZ_CHECK(dlqb_ledger_cache_decode(again, again_len, WRITERS, back, &mark2, &err) == DLQB_OK);
    FUZZ_CHECK(strcmp(mark.marker, mark2.marker) == 0 && mark.offset == mark2.offset);
    FUZZ_CHECK(mark.unverified == mark2.unverified);
    FUZZ_CHECK(dlqb_ledger_size(back) == dlqb_ledger_size(l));
    /* What was built trusting w1 and w2 is no cache for w1 alone. */
    dlqb_ledger_clear(back);
    FUZZ_CHECK(dlqb_ledger_cache_decode(again, again_len, "w1", back, &mark2, &err) == DLQB_EINVAL);
    free(again);
    dlqb_ledger_free(back);
  } else {
    FUZZ_CHECK(err.msg[0] != '\0' && strchr(err.msg, '\n') == NULL);
  }
  dlqb_ledger_free(l);
  free(buf);
  return 0;
}

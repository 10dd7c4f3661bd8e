/* libFuzzer target: the catalog's snapshot chunks (dlqb/catalog.h), which
 * a reader takes from any message on the stream that calls itself one.
 * Contracts checked: deciding whether bytes are a chunk reads nothing
 * outside them (ASan) and never says yes to more than
 * DLQB_CATALOG_CHUNK_ITEMS items; a chunk said well-formed loads whole (its
 * items counted), and chunking the fold again gives the same bytes back;
 * one said malformed loads nothing. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlqb/catalog.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
  const uint8_t *want;
  size_t len, chunks;
} again_ctx;

static dlqb_status same(void *ctx, const unsigned char *body, size_t len, size_t items,
                        dlqb_error *err) {
  (void)items;
  (void)err;
  again_ctx *a = ctx;
  FUZZ_CHECK(a->chunks++ == 0 && len == a->len && memcmp(body, a->want, len) == 0);
  return DLQB_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const queues[] = {"dsr.dlq.manual", "compliance_review"};
  dlqb_catalog *c = dlqb_catalog_new(queues, 2);
  FUZZ_CHECK(c != NULL);
  size_t items = 0;
  bool ok = dlqb_catalog_chunk_ok(data, size, &items);
  dlqb_status st = dlqb_catalog_chunk_load(c, 0, data, size, NULL);
  if (ok) {
    FUZZ_CHECK(items <= DLQB_CATALOG_CHUNK_ITEMS);
    FUZZ_CHECK(st == DLQB_OK && dlqb_catalog_count(c, 0) == items);
    again_ctx a = {data, size, 0};
    FUZZ_CHECK(dlqb_catalog_chunks(c, 0, DLQB_CATALOG_CHUNK_ITEMS, same, &a, NULL) == DLQB_OK);
    FUZZ_CHECK(a.chunks == (items > 0 ? 1u : 0u));
  } else {
    FUZZ_CHECK(st == DLQB_EINVAL && dlqb_catalog_count(c, 0) == 0);
  }
  dlqb_catalog_free(c);
  return 0;
}

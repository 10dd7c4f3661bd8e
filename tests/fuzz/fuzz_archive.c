/* libFuzzer target: the archive of old audit files (dlqb/archive.h).
 * Input: the first byte picks the mode; the rest is an archive's text (the
 * bytes before its signature line). Read alone, and (odd first byte) into
 * a pass whose tree ends past the archive, which then takes two more lines
 * and is finished. Contracts checked: no crash, overread or leak; a
 * refusal is one printable line; what reads has a compact range of one
 * hash per set bit of its lines, whose tree has its root, and files that
 * end with its last file; a pass started from it finishes with a tree of
 * the archive's lines and the two after it. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dlqb/archive.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  dlqb_archive a;
  dlqb_error err;
  memset(&err, 0, sizeof err);
  dlqb_status st = dlqb_archive_read(text, len, &a, NULL, &err);
  FUZZ_CHECK(st == DLQB_OK || st == DLQB_EINVAL || st == DLQB_ENOMEM);
  if (st != DLQB_OK) {
    FUZZ_CHECK(fuzz_printable_line(err.msg, sizeof err.msg));
    return 0;
  }
  FUZZ_CHECK(a.lines > 0 && a.nfrontier == (size_t)__builtin_popcountll(a.lines));
  FUZZ_CHECK(a.nfiles > 0 && strcmp(a.files[a.nfiles - 1], a.last_file) == 0);
  uint64_t lines = a.lines;
  dlqb_archive_release(&a);
  if (!(data[0] & 1) || lines > UINT64_MAX - 2) return 0;
  dlqb_evidence *e = dlqb_evidence_new(lines + 2, data[0] & 2 ? lines : 0, "R-1");
  FUZZ_CHECK(e != NULL);
  st = dlqb_archive_read(text, len, &a, e, &err);
  dlqb_archive_release(&a);
  if (st == DLQB_OK) {
    static const char *const after[] = {
        "{\"v\":2,\"event\":\"file_start\",\"prev_hash\":\"x\"}",
        "{\"v\":2,\"event\":\"dead_lettered\",\"request_id\":\"R-1\"}"};
    for (size_t i = 0; i < 2; i++) FUZZ_CHECK(dlqb_evidence_visit(e, after[i], strlen(after[i])));
    dlqb_evidence_result res;
    FUZZ_CHECK(dlqb_evidence_finish(e, &res, &err) == DLQB_OK);
    FUZZ_CHECK(res.tree.size == lines + 2 && res.records == 1);
  } else {
    FUZZ_CHECK(fuzz_printable_line(err.msg, sizeof err.msg));
  }
  dlqb_evidence_free(e);
  return 0;
}

/* Times one read of the moves that began and did not end
 * (ops_open_moves_read) over a trail, for docs/performance.md: writes a
 * trail of N moves (an intent and its hop each, in one chain, ended by a
 * chain_end unless --open), reads it, and prints the read's wall time and
 * the process's peak RSS.
 * usage: dlqb-open-moves N [--open] FILE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "dlqb/ops.h"

/* As the writer lays records out, padded to about a real record's size. */
static void write_trail(const char *path, long n, bool open) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    perror(path);
    exit(1);
  }
  char pad[301];
  memset(pad, 'x', 300);
  pad[300] = '\0';
  for (long i = 0; i < n; i++) {
    fprintf(f,
            "{\"v\":2,\"chain\":\"c0ffee\",\"seq\":%ld,\"prev\":\"%s\",\"time\":"
            "\"2026-12-04T10:00:00.000Z\",\"event\":\"move_started\",\"writer\":\"replay@h:1\","
            "\"key\":\"k\",\"message_id\":\"msg-%ld\",\"request_id\":\"R-%ld\",\"reason\":"
            "\"dsr.dlq.manual -> dsr.work\",\"cause\":\"\",\"from\":\"\",\"to\":\"\",\"actor\":"
            "\"kim\",\"for\":\"replayed\"}\n",
            2 * i, pad, i, i);
    fprintf(f,
            "{\"v\":2,\"chain\":\"c0ffee\",\"seq\":%ld,\"prev\":\"%s\",\"time\":"
            "\"2026-12-04T10:00:00.001Z\",\"event\":\"replayed\",\"writer\":\"replay@h:1\","
            "\"key\":\"k\",\"message_id\":\"msg-%ld\",\"request_id\":\"R-%ld\",\"reason\":"
            "\"fixed\",\"cause\":\"\",\"from\":\"dsr.dlq.manual\",\"to\":\"dsr.work\",\"actor\":"
            "\"kim\"}\n",
            2 * i + 1, pad, i, i);
  }
  if (!open)
    fprintf(f, "{\"v\":2,\"chain\":\"c0ffee\",\"seq\":%ld,\"event\":\"chain_end\"}\n", 2 * n);
  if (fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

int main(int argc, char **argv) {
  bool open = argc == 4 && strcmp(argv[2], "--open") == 0;
  if (argc != 3 && !open) {
    fprintf(stderr, "usage: dlqb-open-moves N [--open] FILE\n");
    return 2;
  }
  long n = strtol(argv[1], NULL, 10);
  const char *path = argv[argc - 1];
  write_trail(path, n, open);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  ops_open_moves *m = NULL;
  dlqb_error err;
  dlqb_status st = ops_open_moves_read(path, "dsr.dlq.manual", &m, &err);
  clock_gettime(CLOCK_MONOTONIC, &b);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("%ld moves%s: status %d, %zu held, read in %.3f s, peak RSS %ld MiB\n", n,
         open ? " (chain not ended)" : "", (int)st, ops_open_moves_count(m),
         (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9,
         ru.ru_maxrss / 1024);
  ops_open_moves_free(m);
  return st == DLQB_OK ? 0 : 1;
}

/* The web console's record of its actions (docs/console.md, "After a
 * restart"): what the job page shows of each of the last
 * DLQB_JOBFILE_MAX_JOBS replay, escalate and resolve passes, kept in a
 * small JSON file (the setting console_jobs_file) so that a restarted
 * console still shows what each did, and that one was cut short.
 *
 * It holds only what the page shows: the action, the broker user, the
 * selection in words, the rate, the state, the counts, the summary and
 * the error line; never a password, a note, a message's id or header.
 * Reading it is hostile-proof: whatever the file holds (corrupt,
 * truncated, huge, a link or a FIFO planted in its place, another user's
 * file), the answer is an error or the records, each field checked and
 * bounded, never a crash. The format (src/console/jobfile.c):
 *
 *   {"format": "dlq-bridge console jobs", "version": 1,
 *    "jobs": [{"id": 7, "action": "replay", "state": "done", "user": "op",
 *              "selection": "group 3f2a...", "rate": 20,
 *              "started_ms": ..., "ended_ms": ..., "saved_ms": ...,
 *              "total": 6, "examined": 6, "moved": 4, "removed": 0,
 *              "left_in_place": 2, "summary": "...", "error": ""}, ...]} */
#ifndef DLQB_JOBFILE_H
#define DLQB_JOBFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlqb/error.h"

/* The jobs a file holds at most: the console keeps as many. */
#define DLQB_JOBFILE_MAX_JOBS 64
/* A file larger than this is refused unread. Any DLQB_JOBFILE_MAX_JOBS
 * records fit: each text field at its longest, every byte escaped as
 * \u00XX, is under 16 KiB a record. */
#define DLQB_JOBFILE_MAX_BYTES     (2 * 1024 * 1024)
#define DLQB_JOBFILE_USER_MAX      128  /* bytes with the NUL, as a console user */
#define DLQB_JOBFILE_SELECTION_MAX 512  /* the selection in words */
#define DLQB_JOBFILE_SUMMARY_MAX   256  /* the summary line */
#define DLQB_JOBFILE_ERROR_MAX     1536 /* the error line */

typedef enum {
  DLQB_JOB_REPLAY,
  DLQB_JOB_ESCALATE,
  DLQB_JOB_RESOLVE,
  DLQB_JOB__ACTIONS
} dlqb_job_action;

/* running: its pass is under way (in a file read at start: the console
 * stopped while it ran); interrupted: cut short by the console's stop
 * (dlqb_jobfile_interrupt); done and failed as the pass ended. */
typedef enum {
  DLQB_JOB_RUNNING,
  DLQB_JOB_DONE,
  DLQB_JOB_FAILED,
  DLQB_JOB_INTERRUPTED,
  DLQB_JOB__STATES
} dlqb_job_state;

/* One action as its page shows it. Text fields are NUL-terminated UTF-8
 * as the console wrote them; shown escaped, like everything else. */
typedef struct {
  unsigned id; /* 1 to UINT_MAX - 1, unique among a file's records */
  dlqb_job_action action;
  dlqb_job_state state;
  char user[DLQB_JOBFILE_USER_MAX];
  char selection[DLQB_JOBFILE_SELECTION_MAX];
  double rate;                            /* items a second; 0 = as fast as confirms allow */
  int64_t started_ms, ended_ms, saved_ms; /* Unix ms; ended_ms 0 while running */
  uint64_t total;                         /* in the queue at the start */
  uint64_t examined, moved, removed, left_in_place;
  char summary[DLQB_JOBFILE_SUMMARY_MAX];
  char error[DLQB_JOBFILE_ERROR_MAX];
} dlqb_job_record;

/* "replay", "escalate", "resolve"; "running", "done", "failed",
 * "interrupted"; "?" out of range. */
const char *dlqb_job_action_name(dlqb_job_action a);
const char *dlqb_job_state_name(dlqb_job_state s);

/* The file's text of jobs[0..n) (n <= DLQB_JOBFILE_MAX_JOBS), in a
 * malloc'd NUL-terminated buffer (*len bytes without the NUL) the caller
 * frees. DLQB_EINVAL for n too large or a record out of range,
 * DLQB_ENOMEM. */
dlqb_status dlqb_jobfile_encode(const dlqb_job_record *jobs, size_t n, char **out, size_t *len,
                                dlqb_error *err);

/* Parses len bytes of a file's text into jobs (room for
 * DLQB_JOBFILE_MAX_JOBS), in the file's order, setting *n. All or
 * nothing: DLQB_EINVAL with one line saying what is wrong (the first
 * problem; no text of the file quoted) for anything but a whole file of
 * this format and version with at most DLQB_JOBFILE_MAX_JOBS valid
 * records (each member present with its type, text within its field and
 * without NUL, counts and times not negative, the rate finite, ids
 * unique); unknown members are ignored. *n is 0 on failure. */
dlqb_status dlqb_jobfile_decode(const char *text, size_t len, dlqb_job_record *jobs, size_t *n,
                                dlqb_error *err);

/* Reads and decodes the file at path. No file: DLQB_OK with *n 0 and
 * *found false. A file that is not a regular file of ours (opened with
 * O_NOFOLLOW and O_NONBLOCK, so a link or FIFO planted there is neither
 * followed nor waited on; owned by another user or writable by group or
 * others), larger than DLQB_JOBFILE_MAX_BYTES (not read), unreadable or
 * not valid (dlqb_jobfile_decode): an error naming the file, *n 0. */
dlqb_status dlqb_jobfile_read(const char *path, dlqb_job_record *jobs, size_t *n, bool *found,
                              dlqb_error *err);

/* Replaces the file at path with jobs[0..n) atomically (dlqb_file_replace:
 * mode 0600, a crash leaves the old file or the new one; a link at path
 * is replaced, never followed). */
dlqb_status dlqb_jobfile_write(const char *path, const dlqb_job_record *jobs, size_t n,
                               dlqb_error *err);

/* A record read back whose pass was running when its console stopped
 * (state running) becomes interrupted: ended at its last save, with an
 * error line saying so and what it had done by then (queue: where its
 * items were, e.g. "dsr.dlq.manual"). No-op for any other state. */
void dlqb_jobfile_interrupt(dlqb_job_record *r, const char *queue);

#endif

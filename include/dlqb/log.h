/* One line per event on stderr: readable text, or JSON lines for log
 * shippers. Callers never pass payloads or credentials. The format, level
 * and instance are set once at start-up, before any other thread exists. */
#ifndef DLQB_LOG_H
#define DLQB_LOG_H

#include "dlqb/clock.h" /* dlqb_now_ms and dlqb_mono_ms lived here; their callers still find them */
#include "dlqb/config.h"

enum { DLQB_LOG_ERROR = 0, DLQB_LOG_WARN = 1, DLQB_LOG_INFO = 2, DLQB_LOG_DEBUG = 3 };

void dlqb_log_setup(dlqb_log_format format, int level, const char *instance);

/* Names the pipeline the calling thread serves (copied; NULL or "" =
 * none, the default): its lines then carry it ("pipeline=NAME" in text,
 * member "pipeline" in JSON). Per thread: a daemon serving several
 * pipelines sets it in each pipeline's threads. */
void dlqb_log_set_pipeline(const char *name);

/* Logs one event at level: `event` is a short stable name ("connected",
 * "routed"), the rest a printf-style message. Lines longer than 2 KiB are cut. */
void dlqb_log(int level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define dlqb_log_error(ev, ...) dlqb_log(DLQB_LOG_ERROR, ev, __VA_ARGS__)
#define dlqb_log_warn(ev, ...)  dlqb_log(DLQB_LOG_WARN, ev, __VA_ARGS__)
#define dlqb_log_info(ev, ...)  dlqb_log(DLQB_LOG_INFO, ev, __VA_ARGS__)
#define dlqb_log_debug(ev, ...) dlqb_log(DLQB_LOG_DEBUG, ev, __VA_ARGS__)

#endif

/* Event logging to stderr, as text or JSON lines. */
#include "dlqb/log.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dlqb/calendar.h"
#include "dlqb/clock.h"

/* Written once by dlqb_log_setup before any concurrent use. */
static struct {
  dlqb_log_format format;
  int level;
  char instance[256];
} log_state = {DLQB_LOG_TEXT, DLQB_LOG_INFO, ""};

/* The pipeline the calling thread serves ("" = none): each pipeline's
 * threads set their own, so one daemon's lines say whose they are. */
static _Thread_local char log_pipeline[DLQB_PIPELINE_NAME_MAX];

void dlqb_log_set_pipeline(const char *name) {
  snprintf(log_pipeline, sizeof log_pipeline, "%s", name != NULL ? name : "");
}

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void dlqb_log_setup(dlqb_log_format format, int level, const char *instance) {
  log_state.format = format;
  log_state.level = level;
  snprintf(log_state.instance, sizeof log_state.instance, "%s", instance ? instance : "");
}

void dlqb_log(int level, const char *event, const char *fmt, ...) {
  if (level > log_state.level || level < 0) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char when[DLQB_ISO_TIME_MAX];
  dlqb_iso_time(dlqb_now_ms(), when, sizeof when);

  if (log_state.format == DLQB_LOG_JSON) {
    /* json-c escapes the message, so a hostile header quoted in an error
     * cannot forge a second log record. */
    json_object *o = json_object_new_object();
    json_object_object_add(o, "time", json_object_new_string(when));
    json_object_object_add(o, "level", json_object_new_string(level_names[level]));
    json_object_object_add(o, "event", json_object_new_string(event));
    json_object_object_add(o, "instance", json_object_new_string(log_state.instance));
    if (log_pipeline[0] != '\0')
      json_object_object_add(o, "pipeline", json_object_new_string(log_pipeline));
    json_object_object_add(o, "msg", json_object_new_string(msg));
    fprintf(stderr, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
  } else {
    /* Text form: a newline inside a message would split a record, and
     * other control bytes (escape sequences) could rewrite a terminal. */
    for (char *p = msg; *p; p++)
      if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
    if (log_pipeline[0] != '\0')
      fprintf(stderr, "%s %-5s %s: pipeline=%s %s\n", when, level_names[level], event, log_pipeline,
              msg);
    else fprintf(stderr, "%s %-5s %s: %s\n", when, level_names[level], event, msg);
  }
}

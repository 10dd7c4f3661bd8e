/* Reading the JSON config file the daemon and every ops command share
 * (the parsing and its rules are in config.h: dlqb_config_apply_json_keys). */
#ifndef DLQB_CONFIG_FILE_H
#define DLQB_CONFIG_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "dlqb/config.h"
#include "dlqb/error.h"

/* The largest config file read; a config file is a few hundred bytes, the
 * cap stops a wrong path (a log, a device) from being read whole. */
#define DLQB_CONFIG_FILE_MAX (1024 * 1024)

/* Reads the config file at path and applies it to c. Errors start with
 * "config file 'PATH': " and leave c unchanged:
 *  - it cannot be opened or read, unless !required and it does not exist
 *    (then nothing is applied, *loaded false, DLQB_OK);
 *  - it is not a regular file, is writable by any user, or is larger than
 *    DLQB_CONFIG_FILE_MAX;
 *  - its text is refused by dlqb_config_apply_json_keys (invalid json,
 *    unknown key with the closest one suggested, wrong type or value);
 *  - it holds a secret (a url with a password) and its group or others may
 *    read it: a file shared with operators must not carry the daemon's
 *    password (use password_file).
 * *set_keys (may be NULL) gets the bits of the settings it set, *loaded
 * (may be NULL) whether a file was applied. */
dlqb_status dlqb_config_load_file(dlqb_config *c, const char *path, bool required,
                                  uint64_t *set_keys, bool *loaded, dlqb_error *err);

#endif

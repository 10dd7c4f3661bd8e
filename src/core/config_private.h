/* Between the settings table (config.c) and the `pipelines` parser
 * (config_pipelines.c); not installed. */
#ifndef DLQB_CONFIG_PRIVATE_H
#define DLQB_CONFIG_PRIVATE_H

#include <json-c/json.h>

#include "dlqb/config.h"

/* Applies the JSON value v to the setting `key` (a key of the table), the
 * errors named by src ("key 'pipelines.x.max_attempts'"). */
dlqb_status dlqb__config_apply_member(dlqb_config *c, const char *key, json_object *v,
                                      const char *src, dlqb_error *err);

/* Reads the value of the top-level `pipelines` key into c->pipelines
 * (replacing any there). Errors name the key as the file spells it. */
dlqb_status dlqb__config_apply_pipelines(dlqb_config *c, json_object *v, dlqb_error *err);

#endif

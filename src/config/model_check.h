/* model_check.h - what the job's tables (schema_tables.c) need from the model
 * rules (model_cfg.c). Private to src/config.
 *
 * The layering: schema.c is the generic engine and knows no key; model_cfg.c
 * holds the model file's tables and rules on top of it; schema_tables.c holds
 * the job's tables on top of both. Nothing calls upwards.
 */
#ifndef TT_MODEL_CHECK_H
#define TT_MODEL_CHECK_H

#include "config/model_cfg.h"
#include "config/schema.h"

/* The job's `model` key (KEY_CUSTOM): a model file's path, resolved against
 * the job file and loaded, or an inline model group; builds c->model. */
int model_parse_key(vctx *c, config_setting_t *s, const char *key);

/* A batch of batch_size samples (the setting s, named key in messages) must
 * keep every batch tensor of c->model (the input, each layer's output) within
 * TT_MAX_TENSOR elements. */
int model_check_batch(vctx *c, const config_setting_t *s, const char *key);

#endif

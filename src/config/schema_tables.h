/* schema_tables.h - the job file's key tables (schema_tables.c), for job.c.
 * Private to src/config; a model file's tables live in model_cfg.c. */
#ifndef TT_SCHEMA_TABLES_H
#define TT_SCHEMA_TABLES_H

#include "config/schema.h"

extern const group_spec job_spec, callback_spec, monitor_spec;

#endif

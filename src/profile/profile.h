/* profile.h - `towertrain profile` (towertrain(1)): where a step's time goes,
 * layer by layer, against the machine's roof. */
#ifndef TT_PROFILE_H
#define TT_PROFILE_H

#include "config/job.h"
#include "util/err.h"

typedef struct {
    const char *job_path; /* as given, for the table and "job" */
    int steps;            /* measured steps (after the warm-up) */
    const char *json;     /* --json FILE or NULL */
    const char *trace;    /* --trace FILE or NULL */
} profile_opts;

/* Builds the job, runs the warm-up and o->steps steps recording every span,
 * prints the table (rank 0) and writes --json / --trace. Writes nothing into
 * the log directory. Collective under MPI. */
int profile_run(const job_t *job, const profile_opts *o, tt_err *err);

#endif

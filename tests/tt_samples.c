/* tt_samples.c - test helper (not a test): opens the training source of a job
 * and writes every sample as towertrain reads it, before augmentation, so a
 * test can compare the pixels with an independent decoder (PIL, numpy).
 *
 *   tt_samples JOB.cfg [KEY=VALUE]...
 *
 * stdout: per sample, int32 label, int32 C, H, W, then C*H*W float32 (native
 * byte order). Errors: one line on stderr, exit 2. */
#include <stdio.h>
#include <stdlib.h>

#include "config/job.h"
#include "dataflow/dataflow.h"
#include "util/log.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tt_samples JOB.cfg [KEY=VALUE]...\n");
        return 2;
    }
    log_set_quiet(true);
    job_override sets[64];
    int n_sets = 0;
    for (int i = 2; i < argc && n_sets < 64; i++)
        sets[n_sets++].arg = argv[i];
    job_t job;
    tt_err err = {0};
    dataset_t *ds = NULL;
    if (job_load(argv[1], sets, n_sets, &job, &err) != 0) {
        fprintf(stderr, "tt_samples: %s\n", err.msg);
        return 2;
    }
    if (dataset_open(&job.dataflow.source, job.dataflow.limit, job.model.classes, &ds, &err) != 0) {
        fprintf(stderr, "tt_samples: %s\n", err.msg);
        job_free(&job);
        return 2;
    }
    float *x = malloc(dataset_max_floats(ds) * sizeof(float));
    dataset_scratch scratch = {0};
    int rc = 0;
    for (size_t i = 0; x != NULL && i < dataset_size(ds); i++) {
        shape3 s;
        int32_t label = dataset_read(ds, i, x, &s, &scratch, &err);
        if (label < 0) {
            fprintf(stderr, "tt_samples: %s\n", err.msg);
            rc = 2;
            break;
        }
        int32_t head[4] = {label, s.c, s.h, s.w};
        fwrite(head, sizeof(head), 1, stdout);
        fwrite(x, sizeof(float), shape3_size(s), stdout);
    }
    dataset_scratch_free(&scratch);
    free(x);
    dataset_free(ds);
    job_free(&job);
    return rc;
}

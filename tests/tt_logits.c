/* tt_logits.c - test helper (not a test): the inference logits of a job's
 * model with a checkpoint's tensors, for inputs read from a file.
 *
 *   tt_logits JOB.cfg CHECKPOINT.safetensors INPUT.f32 N OUTPUT.f32
 *
 * INPUT holds N samples of the model's input shape as little-endian float32;
 * OUTPUT receives N x classes logits. The job's batch_size must be >= N. Used
 * by e2e_resnet.sh to compare with the equivalent torch.nn module. */
#include <stdio.h>
#include <stdlib.h>

#include "train/trainer.h"
#include "util/log.h"

static int fail(const char *msg)
{
    fprintf(stderr, "tt_logits: %s\n", msg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 6)
        return fail("usage: tt_logits JOB.cfg CHECKPOINT INPUT.f32 N OUTPUT.f32");
    log_set_quiet(true);
    int n = atoi(argv[4]);
    job_t job;
    trainer_t tr;
    tt_err err = {0};
    if (job_load(argv[1], NULL, 0, &job, &err) != 0 || trainer_create(&tr, &job, &err) != 0 ||
        trainer_load_params(&tr, argv[2], &err) != 0)
        return fail(err.msg);
    tower_t *tw = &tr.towers[0];
    size_t in = shape3_size(tr.model.input), classes = (size_t)job.model.classes;
    if (n < 1 || n > tw->max_n)
        return fail("N must be 1 .. the job's batch_size");
    float *x = malloc((size_t)n * in * sizeof(float));
    float *logits = malloc((size_t)n * classes * sizeof(float));
    int32_t *labels = calloc((size_t)n, sizeof(int32_t));
    FILE *f = fopen(argv[3], "rb");
    if (x == NULL || logits == NULL || labels == NULL || f == NULL ||
        fread(x, sizeof(float), (size_t)n * in, f) != (size_t)n * in)
        return fail("cannot read the input file");
    fclose(f);
    tower_load_batch(tw, n, x, labels);
    const float *out = tower_step(tw, n, false, false, 0);
    tw->be->download(tw->be, logits, out, (size_t)n * classes * sizeof(float));
    f = fopen(argv[5], "wb");
    if (f == NULL || fwrite(logits, sizeof(float), (size_t)n * classes, f) != (size_t)n * classes)
        return fail("cannot write the output file");
    fclose(f);
    free(x);
    free(logits);
    free(labels);
    trainer_free(&tr);
    job_free(&job);
    return 0;
}

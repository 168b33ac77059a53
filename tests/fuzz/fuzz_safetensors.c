/* fuzz_safetensors.c - the safetensors reader and what reads checkpoints
 * through it: session_init (trainer_load_params) and resume
 * (trainer_restore), into a trainer of FUZZ_JOB_TEXT's model. Every byte
 * of every tensor of an accepted file is touched, so ASan sees any range
 * that reaches past the file.
 *
 * TT_FUZZ_SEED=FILE writes a checkpoint of that trainer to FILE and exits:
 * how the seeds in corpus/safetensors were made. */
#include "tests/fuzz/fuzz_common.h"

#include "checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_texts.h"
#include "train/trainer.h"

static job_t job;
static trainer_t tr;

static void setup(void)
{
    fuzz_write("model.cfg", FUZZ_MODEL_TEXT, strlen(FUZZ_MODEL_TEXT));
    const char *path = fuzz_write("job.cfg", FUZZ_JOB_TEXT, strlen(FUZZ_JOB_TEXT));
    tt_err err = { 0 };
    if (job_load(path, NULL, 0, &job, &err) != 0 || trainer_create(&tr, &job, &err) != 0) {
        fprintf(stderr, "fuzz: cannot build the trainer: %s\n", err.msg);
        abort();
    }
    const char *seed = getenv("TT_FUZZ_SEED");
    if (seed != NULL) {
        tr.global_step = 12;
        tr.local_step = 4;
        tr.steps_per_epoch = 4;
        tr.epoch_num = 3;
        if (trainer_save_checkpoint(&tr, seed, NULL, NULL, &err) != 0) {
            fprintf(stderr, "fuzz: %s\n", err.msg);
            exit(1);
        }
        exit(0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        setup();
        ready = 1;
    }
    const char *path = fuzz_write("model.safetensors", data, size);
    safetensors_file *f = NULL;
    tt_err err = { 0 };
    int rc = safetensors_read(path, &f, &err);
    fuzz_check_error(&err, rc);
    if (rc == 0) {
        unsigned sum = 0;
        for (int i = 0; i < safetensors_count(f); i++) {
            const st_tensor *t = safetensors_tensor(f, i);
            for (size_t b = 0; b < t->bytes; b++)
                sum += ((const unsigned char *)t->data)[b];
            if (safetensors_find(f, t->name) != t)
                abort(); /* names are unique */
        }
        const char *keys[] = { "format", "job", "global_step", "data_crc32c" };
        for (int k = 0; k < 4; k++) {
            const char *v = safetensors_meta(f, keys[k]);
            sum += v ? (unsigned)strlen(v) : 0;
        }
        safetensors_free(f);
        if (sum == 0xdeadbeef)
            fprintf(stderr, "%u\n", sum); /* keep the reads */
    }
    err = (tt_err){ 0 };
    fuzz_check_error(&err, trainer_load_params(&tr, path, &err));
    err = (tt_err){ 0 };
    rc = trainer_restore(&tr, path, &err);
    fuzz_check_error(&err, rc);
    if (rc == 0 && (tr.global_step < 0 || tr.local_step < 0 || tr.epoch_num < 1))
        abort();
    return 0;
}

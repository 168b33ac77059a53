/* fuzz_job.c - a job file through the validation path (`towertrain validate`):
 * read, check, resolve, write; the written job must read back to itself.
 * A model file named "model.cfg" sits beside the job, so jobs may name one. */
#include "tests/fuzz/fuzz_common.h"

#include "tests/fuzz/fuzz_texts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        fuzz_write("model.cfg", FUZZ_MODEL_TEXT, strlen(FUZZ_MODEL_TEXT));
        ready = 1;
    }
    const char *path = fuzz_write("job.cfg", data, size);
    job_t job;
    tt_err err = { 0 };
    int rc = job_load(path, NULL, 0, &job, &err);
    fuzz_check_error(&err, rc);
    if (rc != 0)
        return 0;
    fuzz_check_round_trip(&job);
    job_free(&job);
    return 0;
}

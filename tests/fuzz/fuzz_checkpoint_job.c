/* fuzz_checkpoint_job.c - the resolved job a checkpoint carries in its
 * __metadata__ ("job"): read from a safetensors file, then checked and
 * resolved as `resume` checks a log directory's job.cfg. A job that loads
 * must write back to itself. Seeds: checkpoints written by towertrain. */
#include "tests/fuzz/fuzz_common.h"

#include "checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_texts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        fuzz_write("model.cfg", FUZZ_MODEL_TEXT, strlen(FUZZ_MODEL_TEXT));
        ready = 1;
    }
    const char *path = fuzz_write("model.safetensors", data, size);
    safetensors_file *f = NULL;
    tt_err err = { 0 };
    int rc = safetensors_read(path, &f, &err);
    fuzz_check_error(&err, rc);
    if (rc != 0)
        return 0;
    const char *text = safetensors_meta(f, "job");
    if (text != NULL) {
        const char *jpath = fuzz_write("job.cfg", text, strlen(text));
        job_t job;
        tt_err jerr = { 0 };
        int jrc = job_load_resolved(jpath, NULL, 0, &job, &jerr);
        fuzz_check_error(&jerr, jrc);
        if (jrc == 0) {
            fuzz_check_round_trip(&job);
            job_free(&job);
        }
    }
    safetensors_free(f);
    return 0;
}

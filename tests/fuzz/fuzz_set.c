/* fuzz_set.c - --set KEY=VALUE overrides: each line of the input is one
 * --set (at most 8), applied to a valid job that names a model file and
 * lists callbacks, so keys can reach into lists and the model. */
#include "tests/fuzz/fuzz_common.h"

#include "tests/fuzz/fuzz_texts.h"

static const char job_text[] =
    "dataflow = { source = { type = \"fake\"; shape = [1, 8, 8]; classes = 4; size = 64; };\n"
    "  batch_size = 8; augment = ( { type = \"flip\"; } ); };\n"
    "model = \"model.cfg\";\n"
    "optimizer = { type = \"momentum\"; learning_rate = 0.1; };\n"
    "trainer = { type = \"sync_replicated\"; nr_tower = 2; };\n"
    "callbacks = ( { type = \"model_saver\"; max_to_keep = 2; },\n"
    "  { type = \"scheduled_hyperparam\"; schedule = ( (0, 0.1), (2, 0.01) ); } );\n"
    "max_epoch = 3;\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *path;
    if (path == NULL) {
        fuzz_write("model.cfg", FUZZ_MODEL_TEXT, strlen(FUZZ_MODEL_TEXT));
        path = strdup(fuzz_write("job.cfg", job_text, strlen(job_text)));
    }
    /* the lines, NUL-terminated (an argv string cannot hold a NUL: cut there) */
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    job_override sets[8];
    int n = 0;
    for (char *p = text; n < 8;) {
        char *nl = strchr(p, '\n');
        if (nl != NULL)
            *nl = '\0';
        sets[n++].arg = p;
        if (nl == NULL)
            break;
        p = nl + 1;
    }
    job_t job;
    tt_err err = { 0 };
    int rc = job_load(path, sets, n, &job, &err);
    fuzz_check_error(&err, rc);
    if (rc == 0) {
        fuzz_check_round_trip(&job);
        job_free(&job);
    }
    free(text);
    return 0;
}

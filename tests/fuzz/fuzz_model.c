/* fuzz_model.c - a model file (model_cfg_load). A model the config accepts
 * must build: every layer's setup agrees with the config's shape rules and
 * the last layer gives `classes` values. */
#include "tests/fuzz/fuzz_common.h"

#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("model.cfg", data, size);
    model_cfg cfg;
    tt_err err = { 0 };
    int rc = model_cfg_load(path, &cfg, &err);
    fuzz_check_error(&err, rc);
    if (rc != 0)
        return 0;
    shape3 in = shape3_make(cfg.input[0], cfg.input[1], cfg.input[2]);
    model_t m;
    tt_err berr = { 0 };
    if (model_build(&cfg, in, &m, &berr) != 0) {
        fprintf(stderr, "fuzz: the config accepted a model the layers refuse: %s\n", berr.msg);
        abort();
    }
    model_free(&m);
    model_cfg_free(&cfg);
    return 0;
}

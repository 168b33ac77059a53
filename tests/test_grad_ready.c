/* test_grad_ready.c - the contract of tower_t.grad_ready, on which
 * sync_replicated overlaps the all-reduce with backward: during one backward
 * pass the hook is called with strictly decreasing offsets ending at 0, and
 * whenever it is called with lo, the gradients [lo, n_trainable) already hold
 * their final values (a snapshot taken in the hook equals the gradients
 * after the step, bitwise). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "tt_ref.h"
#include "tt_test.h"
#include "util/rng.h"

static const char *MODEL =
    "input = [3, 8, 8]; classes = 5;\n"
    "layers = (\n"
    " { name = \"conv0\"; type = \"conv2d\"; filters = 4; kernel = 3; padding = 1; bias = false; },\n"
    " { name = \"bn0\"; type = \"batchnorm\"; },\n"
    " { name = \"relu0\"; type = \"relu\"; },\n"
    " { name = \"conv1\"; type = \"conv2d\"; filters = 4; kernel = 3; padding = 1; },\n"
    " { name = \"sum\"; type = \"add\"; inputs = [\"conv1\", \"relu0\"]; },\n"
    " { name = \"pool\"; type = \"maxpool\"; kernel = 2; },\n"
    " { name = \"fc0\"; type = \"dense\"; units = 8; activation = \"relu\"; },\n"
    " { name = \"fc1\"; type = \"dense\"; units = 5; }\n"
    ");\n";

typedef struct {
    const tower_t *tw;
    size_t n;
    size_t los[16];
    float *snap[16];
    int calls;
} recorder;

static bool record(void *arg, size_t lo)
{
    recorder *r = arg;
    if (r->calls >= 16)
        return false;
    r->los[r->calls] = lo;
    r->snap[r->calls] = malloc((r->n - lo + 1) * sizeof(float));
    r->tw->be->download(r->tw->be, r->snap[r->calls], r->tw->grads + lo,
                        (r->n - lo) * sizeof(float));
    r->calls++;
    return true;
}

int main(void)
{
    char dir[256], path[320];
    tt_tmpdir_make(dir, sizeof(dir), "grad_ready");
    snprintf(path, sizeof(path), "%s/model.cfg", dir);
    tt_write_file(NULL, path, MODEL);
    model_cfg mc;
    model_t m;
    tt_err err = {0};
    if (!tt_ok(model_cfg_load(path, &mc, &err) == 0 &&
                   model_build(&mc, shape3_make(3, 8, 8), &m, &err) == 0,
               "model builds %s", err.msg))
        return tt_done();
    backend_t *be = tt_cpu_backend(2);
    tower_t tw;
    if (!tt_ok(be != NULL && tower_create(&m, be, 4, &tw, &err) == 0, "tower %s", err.msg))
        return tt_done();
    float *host = calloc(m.n_floats, sizeof(float)), x[4 * 3 * 8 * 8];
    int32_t labels[4] = {0, 1, 2, 3};
    model_init_params(&m, 1, host);
    rng_t rng = rng_make(2, 0, 0);
    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
        x[i] = (float)rng_below(&rng, 1000) / 500.0f - 1.0f;
    tower_set_params(&tw, host);
    tower_load_batch(&tw, 4, x, labels);

    recorder r = {.tw = &tw, .n = m.n_trainable};
    tw.grad_ready = record;
    tw.grad_ready_arg = &r;
    tower_step(&tw, 4, true, true, 1);
    float *final = malloc(m.n_trainable * sizeof(float));
    be->download(be, final, tw.grads, m.n_trainable * sizeof(float));

    /* conv0, bn0, conv1, fc0, fc1 have parameters: five calls */
    bool order = r.calls == 5 && r.los[r.calls - 1] == 0;
    for (int i = 1; i < r.calls; i++)
        order = order && r.los[i] < r.los[i - 1];
    tt_ok(order, "%d calls with strictly decreasing offsets ending at 0", r.calls);
    bool final_ok = r.calls > 0;
    for (int i = 0; i < r.calls; i++)
        final_ok = final_ok && memcmp(r.snap[i], final + r.los[i],
                                      (m.n_trainable - r.los[i]) * sizeof(float)) == 0;
    tt_ok(final_ok, "at every call the announced gradients were already final (bitwise)");

    /* no hook: no calls, the same gradients */
    int before = r.calls;
    tw.grad_ready = NULL;
    tower_step(&tw, 4, true, true, 1);
    float *again = malloc(m.n_trainable * sizeof(float));
    be->download(be, again, tw.grads, m.n_trainable * sizeof(float));
    tt_ok(r.calls == before && memcmp(again, final, m.n_trainable * sizeof(float)) == 0,
          "without the hook: no calls and bitwise the same gradients");

    for (int i = 0; i < r.calls; i++)
        free(r.snap[i]);
    free(final);
    free(again);
    free(host);
    tower_free(&tw);
    be->destroy(be);
    model_free(&m);
    model_cfg_free(&mc);
    tt_tmpdir_remove(dir);
    return tt_done();
}

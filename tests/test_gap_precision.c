/* test_gap_precision.c - global_avgpool stays float32 in mixed precision
 * on device towers (issue 27; towertrain.cfg(5)'s precision table: pooling
 * in fp32). It runs as a dense call of [n * C, H * W] times a row of 1/HW;
 * a device backend's dense rounds its inputs to bf16 / fp16, so before the
 * fix 1/49 became 0.0203857 in bf16 (-0.11%) and every input lost its low
 * bits (a relative error of ~1e-3). On a sim tower in bf16 and fp16 the
 * pooled output of 64 channels of 7x7 inputs in [0.5, 1.5) must equal the
 * float64 mean within 1e-5 relative: float32's fma chain over 49 positive
 * terms is within 49 * 2^-24 = 2.9e-6 of it, bf16 inputs are ~300 times
 * further off. fp32 on sim is the control. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/backend.h"
#include "model/model.h"
#include "tt_test.h"

#define N 4
#define C 64
#define HW 49

static const char *MODEL = "input = [64, 7, 7]; classes = 4; layers = (\n"
                           " { name = \"g\"; type = \"global_avgpool\"; },\n"
                           " { name = \"fc\"; type = \"dense\"; units = 4; } );\n";

/* The worst relative error of the pool's output on a sim tower in `prec`
 * against the float64 mean; -1 when the run could not be made. */
static double pool_error(const model_t *m, const char *prec, const float *x, const int32_t *y)
{
    tt_err err = {0};
    backend_t *be = backend_sim_create(0, prec, &err);
    if (be == NULL || be->dev->reserve_copies(be, (size_t)1 << 22, &err) != 0) {
        tt_diag("sim %s: %s", prec, err.msg);
        if (be != NULL)
            be->destroy(be);
        return -1;
    }
    tower_t t;
    if (tower_create(m, be, N, &t, &err) != 0) {
        tt_diag("tower: %s", err.msg);
        be->destroy(be);
        return -1;
    }
    float *host = malloc(m->n_floats * sizeof(float));
    model_init_params(m, 3, host);
    tower_set_params(&t, host);
    free(host);
    tower_load_batch(&t, N, x, y);
    tower_step(&t, N, true, true, 1);
    float pooled[N * C];
    be->download(be, pooled, t.act[0], sizeof(pooled));
    double worst = 0;
    for (int r = 0; r < N * C; r++) {
        double mean = 0;
        for (int p = 0; p < HW; p++)
            mean += x[(size_t)r * HW + p];
        mean /= HW;
        double e = fabs(pooled[r] - mean) / mean;
        if (e > worst)
            worst = e;
    }
    tower_free(&t);
    be->destroy(be);
    return worst;
}

int main(void)
{
    char path[] = "/tmp/tt_gap_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL)
        return 99;
    fputs(MODEL, f);
    fclose(f);
    model_cfg cfg;
    model_t m;
    tt_err err = {0};
    int rc = model_cfg_load(path, &cfg, &err);
    unlink(path);
    if (rc != 0 || model_build(&cfg, shape3_make(C, 7, 7), &m, &err) != 0) {
        tt_diag("model: %s", err.msg);
        return 99;
    }
    static float x[N * C * HW];
    int32_t y[N] = {0, 1, 2, 3};
    srand(27);
    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
        x[i] = 0.5f + (float)rand() / ((float)RAND_MAX + 1.0f);
    const char *precs[] = {"fp32", "bf16", "fp16"};
    for (int k = 0; k < 3; k++) {
        double e = pool_error(&m, precs[k], x, y);
        tt_ok(e >= 0 && e <= 1e-5,
              "sim %s: global_avgpool's output is the float64 mean within 1e-5 relative "
              "(worst %.3g)", precs[k], e);
    }
    model_free(&m);
    model_cfg_free(&cfg);
    return tt_done();
}

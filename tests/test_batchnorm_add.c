/* test_batchnorm_add.c - the batchnorm and add layers against float64
 * references: forward in training and inference, the running statistics
 * (PyTorch's momentum and unbiased variance), and dx, dgamma, dbeta against
 * central finite differences of the float64 training forward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layer.h"
#include "tt_ref.h"
#include "tt_test.h"

#define N 3
#define C 4
#define HW 5 /* a 1x5 plane: any H*W works */

static double xs[N * C * HW], rs[N * C * HW], gam[C], bet[C];

/* float64 reference of the training forward; returns sum(y * r) */
static double ref_loss(const double *x, const double *g, const double *b, double *y,
                       double *mean_out, double *var_out)
{
    double loss = 0;
    for (int c = 0; c < C; c++) {
        double m = 0, v = 0;
        for (int i = 0; i < N; i++)
            for (int q = 0; q < HW; q++)
                m += x[(i * C + c) * HW + q];
        m /= N * HW;
        for (int i = 0; i < N; i++)
            for (int q = 0; q < HW; q++)
                v += pow(x[(i * C + c) * HW + q] - m, 2);
        v /= N * HW;
        if (mean_out) {
            mean_out[c] = m;
            var_out[c] = v;
        }
        for (int i = 0; i < N; i++)
            for (int q = 0; q < HW; q++) {
                int k = (i * C + c) * HW + q;
                double yy = (x[k] - m) / sqrt(v + 1e-5) * g[c] + b[c];
                if (y)
                    y[k] = yy;
                loss += yy * rs[k];
            }
    }
    return loss;
}

/* d ref_loss / d v[i] by central differences, v being the input x, gamma g
 * or beta b; v[i] is restored exactly */
static double fd_grad(double *x, double *g, double *b, double *v, int i)
{
    const double eps = 1e-6, keep = v[i];
    v[i] = keep + eps;
    double up = ref_loss(x, g, b, NULL, NULL, NULL);
    v[i] = keep - eps;
    double down = ref_loss(x, g, b, NULL, NULL, NULL);
    v[i] = keep;
    return (up - down) / (2 * eps);
}

int main(void)
{
    /* float values, so that the reference sees what the layer sees */
    tt_rng rng = tt_rng_make(123);
    for (int i = 0; i < N * C * HW; i++) {
        xs[i] = (float)tt_uniform(&rng, -2, 3);
        rs[i] = (float)tt_uniform(&rng, -1, 1);
    }
    for (int c = 0; c < C; c++) {
        gam[c] = (float)tt_uniform(&rng, 0.5, 1.5);
        bet[c] = (float)tt_uniform(&rng, -0.5, 0.5);
    }
    tt_err err = {0};
    backend_t *be = tt_cpu_backend(2);
    if (!tt_ok(be != NULL, "a CPU backend of 2 threads"))
        return tt_done();
    layer_cfg cfg = {.type = LAYER_BATCHNORM, .momentum = 0.1f, .epsilon = 1e-5f};
    strcpy(cfg.name, "bn");
    layer_t l;
    shape3 in = shape3_make(C, 1, HW);
    tt_ok(layer_setup(&l, &cfg, &in, 1, &err) == 0 && l.n_params == 5, "batchnorm sets up");
    tt_ok(strcmp(l.params[2].suffix, "running_mean") == 0 && !l.params[2].trainable &&
              l.params[4].is_int64 && l.params[4].ndim == 0,
          "PyTorch's tensors: weight, bias, running_mean, running_var, num_batches_tracked (I64)");
    float w[C], b[C], rm[C], rv[C], nbt[1];
    float *p[5] = {w, b, rm, rv, nbt};
    l.ops->init(&l, NULL, p);
    tt_ok(w[0] == 1 && b[0] == 0 && rm[0] == 0 && rv[0] == 1 && nbt[0] == 0,
          "init: weight 1, bias 0, running_mean 0, running_var 1");
    for (int c = 0; c < C; c++) {
        w[c] = (float)gam[c];
        b[c] = (float)bet[c];
    }
    float x[N * C * HW], y[N * C * HW], dy[N * C * HW], dx[N * C * HW], dw[C], db[C];
    float state[2 * C];
    for (int i = 0; i < N * C * HW; i++) {
        x[i] = (float)xs[i];
        dy[i] = (float)rs[i];
    }
    layer_call call = {.be = be, .n = N, .training = true, .x = {x}, .y = y,
                       .params = {w, b, rm, rv, nbt}, .grads = {dw, db}, .dy = dy,
                       .dx = {dx}, .state = state};
    l.ops->forward(&l, &call);
    double yref[N * C * HW], mean[C], var[C];
    ref_loss(xs, gam, bet, yref, mean, var);
    tt_ok(tt_rel_err(y, yref, N * C * HW) < 1e-5, "training forward vs float64 (%.2g)",
          tt_rel_err(y, yref, N * C * HW));
    double rm_ref[C], rv_ref[C];
    for (int c = 0; c < C; c++) {
        rm_ref[c] = 0.1 * mean[c];
        rv_ref[c] = 0.9 + 0.1 * var[c] * (N * HW) / (N * HW - 1);
    }
    tt_ok(tt_rel_err(rm, rm_ref, C) < 1e-5 && tt_rel_err(rv, rv_ref, C) < 1e-5 && nbt[0] == 1,
          "running statistics: momentum 0.1 of the new, unbiased variance; one batch tracked");
    l.ops->backward(&l, &call);
    double dx_ref[N * C * HW], dg_ref[C], db_ref[C], xx[N * C * HW], gg[C], bb[C];
    memcpy(xx, xs, sizeof(xx));
    memcpy(gg, gam, sizeof(gg));
    memcpy(bb, bet, sizeof(bb));
    for (int i = 0; i < N * C * HW; i++)
        dx_ref[i] = fd_grad(xx, gg, bb, xx, i);
    for (int c = 0; c < C; c++) {
        dg_ref[c] = fd_grad(xx, gg, bb, gg, c);
        db_ref[c] = fd_grad(xx, gg, bb, bb, c);
    }
    tt_ok(tt_rel_err(dx, dx_ref, N * C * HW) < 1e-4, "dx vs finite differences (%.2g)",
          tt_rel_err(dx, dx_ref, N * C * HW));
    tt_ok(tt_rel_err(dw, dg_ref, C) < 1e-4 && tt_rel_err(db, db_ref, C) < 1e-4,
          "dgamma, dbeta vs finite differences (%.2g, %.2g)", tt_rel_err(dw, dg_ref, C),
          tt_rel_err(db, db_ref, C));

    /* inference uses the running statistics and changes nothing */
    call.training = false;
    float rm_before = rm[0];
    l.ops->forward(&l, &call);
    double yinf[N * C * HW];
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            for (int q = 0; q < HW; q++) {
                int k = (i * C + c) * HW + q;
                yinf[k] = (xs[k] - rm[c]) / sqrt((double)rv[c] + 1e-5) * gam[c] + bet[c];
            }
    tt_ok(tt_rel_err(y, yinf, N * C * HW) < 1e-5 && rm[0] == rm_before && nbt[0] == 1,
          "inference normalises with the running statistics and leaves them alone");

    /* add: the sum forward, the same gradient to both inputs */
    layer_cfg acfg = {.type = LAYER_ADD, .n_inputs = 2};
    strcpy(acfg.name, "sum");
    layer_t a;
    shape3 ins[2] = {in, in};
    tt_ok(layer_setup(&a, &acfg, ins, 2, &err) == 0, "add sets up");
    float x2[N * C * HW], dx2[N * C * HW];
    for (int i = 0; i < N * C * HW; i++)
        x2[i] = (float)i;
    layer_call ac = {.be = be, .n = N, .training = true, .x = {x, x2}, .y = y, .dy = dy,
                     .dx = {dx, dx2}};
    a.ops->forward(&a, &ac);
    a.ops->backward(&a, &ac);
    int add_ok = 1;
    for (int i = 0; i < N * C * HW; i++)
        add_ok &= y[i] == x[i] + x2[i] && dx[i] == dy[i] && dx2[i] == dy[i];
    tt_ok(add_ok, "add: y = x0 + x1, dx0 = dx1 = dy");
    shape3 other[2] = {in, shape3_make(C, 1, HW + 1)};
    err_clear(&err);
    tt_ok(layer_setup(&a, &acfg, other, 2, &err) != 0 && err.code == TT_ERR_USAGE,
          "add of different shapes is refused: %s", err.msg);
    be->destroy(be);
    return tt_done();
}

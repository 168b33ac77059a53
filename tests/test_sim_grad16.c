/* test_sim_grad16.c - bf16 activation gradients on the simulated GPU
 * (sim_grad16.c, backend.h's blocked_bf16_grads, precision.h's rule).
 *
 * 1. Who has them: sim in bf16 by default; not with TT_BF16_GRADS=0, not
 *    sim in fp32, not the CPU's bf16 backend (its bits stay).
 * 2. Each backward operation that stores a bf16 gradient (relu, batchnorm
 *    with and without its relu, global average pooling, max and average
 *    pooling, conv2d's dx with its relu mask) against the same operation
 *    on a sim backend with float32 gradients (TT_BF16_GRADS=0), given the
 *    same values: every dx element is that float32 result rounded to
 *    nearest even (tt_ref.h's own rounding, by distance), bit for bit, and
 *    the parameters' gradients (dgamma, dbeta, dw, db) are the same bits.
 *    So the only difference is the one rounding the rule asks. relu,
 *    global average pooling and batchnorm are also checked against float64
 *    references: within half a bf16 ulp (2^-8 relative) plus float32's own
 *    error.
 * 3. Tower level (the residual model of test_sim_blocked.c, 2 steps): the
 *    first step's loss is the same bits (forward is unchanged); gradients
 *    within the rounding's bound below; the same bits on a second run;
 *    and the device memory the tower holds is smaller.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tt_model_texts.h"
#include "tt_ref.h"
#include "tt_test.h"

/* A sim backend in bf16, with (on) or without bf16 gradients. */
static backend_t *sim_bf16(bool on)
{
    tt_err err = {0};
    if (!on)
        setenv("TT_BF16_GRADS", "0", 1);
    backend_t *be = backend_sim_create(0, "bf16", &err);
    unsetenv("TT_BF16_GRADS");
    if (be == NULL || be->dev->reserve_copies(be, (size_t)1 << 22, &err) != 0) {
        fprintf(stderr, "sim: %s\n", err.msg);
        exit(99);
    }
    return be;
}

/* count random bf16 values in [lo, hi) */
static uint16_t *bf16_random(tt_rng *r, size_t count, double lo, double hi)
{
    uint16_t *h = malloc(count * 2);
    for (size_t i = 0; i < count; i++)
        h[i] = tt_bf16_round((float)tt_uniform(r, lo, hi));
    return h;
}

static float *widen_all(const uint16_t *h, size_t count)
{
    float *f = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++)
        f[i] = tt_bf16_widen(h[i]);
    return f;
}

/* The pair's inputs on each backend: activations as they are (bf16 on
 * both); dy bf16 on `on`, its float32 widening on `off` */
typedef struct {
    backend_t *on, *off;
} pair;

/* on's bf16 dx == off's float32 dx rounded, element by element */
static bool rounded_equal(backend_t *on, const void *dx_on, backend_t *off, const void *dx_off,
                          size_t count, size_t *bad)
{
    uint16_t *a = tt_host_copy(on, dx_on, count * 2);
    float *b = tt_host_copy(off, dx_off, count * 4);
    *bad = 0;
    for (size_t i = 0; i < count; i++)
        *bad += a[i] != tt_bf16_round(b[i]);
    free(a);
    free(b);
    return *bad == 0;
}

/* max |dx - ref| / (2^-8 |ref| + abs_tol) over the elements: <= 1 passes */
static double ulp_ratio(backend_t *on, const void *dx_on, const double *ref, size_t count,
                        double abs_tol)
{
    uint16_t *a = tt_host_copy(on, dx_on, count * 2);
    double worst = 0.0;
    for (size_t i = 0; i < count; i++) {
        double e = fabs(tt_bf16_widen(a[i]) - ref[i]) / (ldexp(fabs(ref[i]), -8) + abs_tol);
        worst = e > worst ? e : worst;
    }
    free(a);
    return worst;
}

/* relu backward: dx = y > 0 ? dy : 0 */
static void check_relu(pair *p, tt_rng *r)
{
    size_t count = 2 * 16 * 9;
    uint16_t *y = bf16_random(r, count, -1, 1), *dy = bf16_random(r, count, -2, 2);
    float *dyf = widen_all(dy, count);
    void *y1 = tt_dev_copy(p->on, y, count * 2), *dy1 = tt_dev_copy(p->on, dy, count * 2);
    void *dx1 = tt_dev_copy(p->on, NULL, count * 2);
    void *y0 = tt_dev_copy(p->off, y, count * 2), *dy0 = tt_dev_copy(p->off, dyf, count * 4);
    void *dx0 = tt_dev_copy(p->off, NULL, count * 4);
    p->on->relu_backward_blocked(p->on, count, y1, dy1, dx1);
    p->off->relu_backward_blocked(p->off, count, y0, dy0, dx0);
    double *ref = malloc(count * sizeof(double));
    for (size_t i = 0; i < count; i++)
        ref[i] = tt_bf16_widen(y[i]) > 0 ? dyf[i] : 0.0;
    size_t bad;
    bool same = rounded_equal(p->on, dx1, p->off, dx0, count, &bad);
    tt_ok(same,
          "relu backward: bf16 dx is the float32 path's dx rounded (%zu differ)", bad);
    double u = ulp_ratio(p->on, dx1, ref, count, 0.0);
    tt_ok(u <= 1.0, "relu backward against float64: %.2f of the bound", u);
    p->on->free(p->on, y1), p->on->free(p->on, dy1), p->on->free(p->on, dx1);
    p->off->free(p->off, y0), p->off->free(p->off, dy0), p->off->free(p->off, dx0);
    free(y), free(dy), free(dyf), free(ref);
}

/* global average pooling backward: dy [n, c] float32, dx = dy / hw */
static void check_gap(pair *p, tt_rng *r)
{
    int n = 3, c = 32, hw = 7;
    size_t count = (size_t)n * c * hw;
    float *dy = malloc((size_t)n * c * sizeof(float));
    tt_fill(r, dy, (size_t)n * c, -3, 3);
    void *dy1 = tt_dev_copy(p->on, dy, (size_t)n * c * 4), *dx1 = tt_dev_copy(p->on, NULL, count * 2);
    void *dy0 = tt_dev_copy(p->off, dy, (size_t)n * c * 4), *dx0 = tt_dev_copy(p->off, NULL, count * 4);
    p->on->global_avgpool_blocked_backward(p->on, n, c, hw, dy1, dx1);
    p->off->global_avgpool_blocked_backward(p->off, n, c, hw, dy0, dx0);
    double *ref = malloc(count * sizeof(double)); /* NHWC: (i, pixel, ch) */
    for (int i = 0; i < n; i++)
        for (int q = 0; q < hw; q++)
            for (int ch = 0; ch < c; ch++)
                ref[((size_t)i * hw + q) * c + ch] = (double)dy[i * c + ch] / hw;
    size_t bad;
    bool same = rounded_equal(p->on, dx1, p->off, dx0, count, &bad);
    tt_ok(same,
          "global average pooling backward: bf16 dx is the float32 path's rounded (%zu differ)",
          bad);
    /* float32's division adds half a float32 ulp: 2^-16 of bf16's bound */
    double u = ulp_ratio(p->on, dx1, ref, count, 0.0);
    tt_ok(u <= 1.0 + 1.0 / 65536, "global average pooling backward against float64: %.2f of "
          "the bound", u);
    p->on->free(p->on, dy1), p->on->free(p->on, dx1);
    p->off->free(p->off, dy0), p->off->free(p->off, dx0);
    free(dy), free(ref);
}

/* batchnorm backward (training statistics) in float64, NHWC [n*hw, c]:
 * g = dy masked by y when relu; dx = invstd * (gamma * g - mean(gamma * g)
 * - xhat * mean(gamma * g * xhat)) per channel */
static void bn_ref(int rows, int c, const float *x, const float *gamma, const float *y,
                   bool relu, const float *dy, double *dx)
{
    for (int ch = 0; ch < c; ch++) {
        double mean = 0, var = 0, sg = 0, sgx = 0;
        for (int q = 0; q < rows; q++)
            mean += x[(size_t)q * c + ch];
        mean /= rows;
        for (int q = 0; q < rows; q++)
            var += (x[(size_t)q * c + ch] - mean) * (x[(size_t)q * c + ch] - mean);
        double invstd = 1.0 / sqrt(var / rows + 1e-5);
        for (int q = 0; q < rows; q++) {
            size_t at = (size_t)q * c + ch;
            double g = relu && y[at] <= 0 ? 0.0 : dy[at];
            sg += g;
            sgx += g * (x[at] - mean) * invstd;
        }
        for (int q = 0; q < rows; q++) {
            size_t at = (size_t)q * c + ch;
            double g = relu && y[at] <= 0 ? 0.0 : dy[at], xh = (x[at] - mean) * invstd;
            dx[at] = gamma[ch] * invstd * (g - sg / rows - xh * sgx / rows);
        }
    }
}

/* the forward (for the saved statistics) then the backward on one backend;
 * dx and the parameters' gradients downloaded */
static void bn_run(backend_t *be, int n, int c, int hw, const uint16_t *x, const float *gamma,
                   const void *dy, size_t dy_bytes, bool relu, void **dx_dev, float *dgb,
                   uint16_t *y)
{
    size_t count = (size_t)n * c * hw;
    float *beta = calloc((size_t)c, sizeof(float)), *ones = malloc((size_t)c * 4);
    for (int i = 0; i < c; i++)
        ones[i] = 1.0f;
    void *xd = tt_dev_copy(be, x, count * 2), *yd = tt_dev_copy(be, NULL, count * 2);
    float *g = tt_dev_copy(be, gamma, (size_t)c * 4), *b = tt_dev_copy(be, beta, (size_t)c * 4);
    float *rm = tt_dev_copy(be, beta, (size_t)c * 4), *rv = tt_dev_copy(be, ones, (size_t)c * 4);
    float *save = tt_dev_copy(be, NULL, 2 * (size_t)c * 4), *grads = tt_dev_copy(be, NULL, 2 * (size_t)c * 4);
    void *dyd = tt_dev_copy(be, dy, dy_bytes);
    *dx_dev = tt_dev_copy(be, NULL, dy_bytes);
    be->batchnorm_forward_blocked(be, n, c, hw, xd, g, b, rm, rv, 0.1f, 1e-5f, true, relu, yd,
                                  save, save + c);
    be->batchnorm_backward_blocked(be, n, c, hw, xd, g, save, save + c, yd, relu, dyd, *dx_dev,
                                   grads, grads + c);
    be->download(be, dgb, grads, 2 * (size_t)c * 4);
    be->download(be, y, yd, count * 2);
    void *frees[] = {xd, yd, g, b, rm, rv, save, grads, dyd};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++)
        be->free(be, frees[i]);
    free(beta), free(ones);
}

static void check_bn(pair *p, tt_rng *r, bool relu)
{
    int n = 4, c = 32, hw = 9, rows = n * hw;
    size_t count = (size_t)rows * c;
    uint16_t *x = bf16_random(r, count, -2, 3), *dy = bf16_random(r, count, -1, 1);
    float *dyf = widen_all(dy, count), *xf = widen_all(x, count);
    float *gamma = malloc((size_t)c * 4), dgb1[64], dgb0[64];
    tt_fill(r, gamma, (size_t)c, 0.5, 1.5);
    void *dx1, *dx0;
    uint16_t *y = malloc(count * 2);
    bn_run(p->on, n, c, hw, x, gamma, dy, count * 2, relu, &dx1, dgb1, y);
    bn_run(p->off, n, c, hw, x, gamma, dyf, count * 4, relu, &dx0, dgb0, y);
    float *yf = widen_all(y, count); /* the forward's bf16 y: the relu mask */
    double *ref = malloc(count * sizeof(double)), scale = 0;
    bn_ref(rows, c, xf, gamma, yf, relu, dyf, ref);
    for (size_t i = 0; i < count; i++)
        scale = fmax(scale, fabs(ref[i]));
    size_t bad;
    bool same = rounded_equal(p->on, dx1, p->off, dx0, count, &bad);
    tt_ok(same && memcmp(dgb1, dgb0, sizeof(dgb1)) == 0,
          "batchnorm backward%s: bf16 dx is the float32 path's rounded (%zu differ); dgamma and "
          "dbeta the same bits", relu ? " with relu" : "", bad);
    /* float32's sums over 36 rows: a few 2^-24 of the largest term each */
    double u = ulp_ratio(p->on, dx1, ref, count, 1e-5 * scale);
    tt_ok(u <= 1.0, "batchnorm backward%s against float64: %.2f of the bound",
          relu ? " with relu" : "", u);
    p->on->free(p->on, dx1);
    p->off->free(p->off, dx0);
    free(x), free(dy), free(dyf), free(xf), free(gamma), free(y), free(yf), free(ref);
}

/* max or average pooling of a blocked x, blocked y: forward, backward */
static void check_pool(pair *p, tt_rng *r, bool max)
{
    window_desc d = {2, 32, 6, 6, 32, 2, 2, 0, 3, 3, true, true};
    size_t nx = (size_t)2 * 32 * 36, ny = (size_t)2 * 32 * 9;
    uint16_t *x = bf16_random(r, nx, -1, 1), *dy = bf16_random(r, ny, -1, 1);
    float *dyf = widen_all(dy, ny);
    void *dx[2];
    backend_t *bes[2] = {p->on, p->off};
    for (int k = 0; k < 2; k++) {
        backend_t *be = bes[k];
        void *xd = tt_dev_copy(be, x, nx * 2), *yd = tt_dev_copy(be, NULL, ny * 2);
        int32_t *mask = tt_dev_copy(be, NULL, ny * 4);
        void *dyd = k == 0 ? tt_dev_copy(be, dy, ny * 2) : tt_dev_copy(be, dyf, ny * 4);
        dx[k] = tt_dev_copy(be, NULL, nx * (k == 0 ? 2 : 4));
        if (max) {
            be->maxpool_forward(be, &d, xd, yd, mask);
            be->maxpool_backward(be, &d, dyd, mask, dx[k]);
        } else {
            be->avgpool_forward(be, &d, xd, yd);
            be->avgpool_backward(be, &d, dyd, dx[k]);
        }
        be->free(be, xd), be->free(be, yd), be->free(be, mask), be->free(be, dyd);
    }
    size_t bad;
    bool same = rounded_equal(p->on, dx[0], p->off, dx[1], nx, &bad);
    tt_ok(same,
          "%s pooling backward: bf16 dx is the float32 path's rounded (%zu differ)",
          max ? "max" : "average", bad);
    p->on->free(p->on, dx[0]);
    p->off->free(p->off, dx[1]);
    free(x), free(dy), free(dyf);
}

/* conv2d backward with blocked x and y and its relu mask: dx bf16 */
static void check_conv(pair *p, tt_rng *r)
{
    window_desc d = {2, 16, 5, 5, 16, 3, 1, 1, 5, 5, true, true};
    size_t nx = (size_t)2 * 16 * 25, nw = (size_t)16 * 16 * 9;
    uint16_t *x = bf16_random(r, nx, -1, 1), *y = bf16_random(r, nx, -1, 1);
    uint16_t *dy = bf16_random(r, nx, -1, 1);
    float *dyf = widen_all(dy, nx), *w = malloc(nw * 4), dwb[2][16 * 16 * 9 + 16];
    tt_fill(r, w, nw, -0.3, 0.3);
    void *dx[2];
    backend_t *bes[2] = {p->on, p->off};
    for (int k = 0; k < 2; k++) {
        backend_t *be = bes[k];
        void *xd = tt_dev_copy(be, x, nx * 2), *yd = tt_dev_copy(be, y, nx * 2);
        float *wd = tt_dev_copy(be, w, nw * 4), *dwd = tt_dev_copy(be, NULL, (nw + 16) * 4);
        void *dyd = k == 0 ? tt_dev_copy(be, dy, nx * 2) : tt_dev_copy(be, dyf, nx * 4);
        void *ws = tt_dev_copy(be, NULL, (size_t)1 << 20);
        dx[k] = tt_dev_copy(be, NULL, nx * (k == 0 ? 2 : 4));
        be->conv_backward(be, &d, xd, wd, yd, true, dyd, dx[k], dwd, dwd + nw, ws);
        be->download(be, dwb[k], dwd, sizeof(dwb[k]));
        be->free(be, xd), be->free(be, yd), be->free(be, wd), be->free(be, dwd);
        be->free(be, dyd), be->free(be, ws);
    }
    size_t bad;
    bool same = rounded_equal(p->on, dx[0], p->off, dx[1], nx, &bad);
    tt_ok(same && memcmp(dwb[0], dwb[1], sizeof(dwb[0])) == 0,
          "conv2d backward with relu: bf16 dx is the float32 path's rounded (%zu differ); dw "
          "and db the same bits", bad);
    p->on->free(p->on, dx[0]);
    p->off->free(p->off, dx[1]);
    free(x), free(y), free(dy), free(dyf), free(w);
}

/* ---- tower level ---- */

typedef struct {
    float *grads, *params;
    double loss;
    size_t in_use;
    int blocked; /* layers whose output is blocked */
} tower_result;

/* `steps` training steps of the residual model on a fresh sim tower in
 * bf16, with or without bf16 gradients */
static bool train(const model_t *m, bool on, int steps, const float *x, const int32_t *y, int n,
                  tower_result *r)
{
    backend_t *be = sim_bf16(on);
    tower_t t;
    tt_err err = {0};
    if (tower_create(m, be, n, &t, &err) != 0) {
        be->destroy(be);
        return false;
    }
    size_t reserved, peak;
    be->dev->memory(be, &reserved, &r->in_use, &peak);
    r->blocked = 0;
    for (int i = 0; i < m->n_layers; i++)
        r->blocked += t.blocked[i];
    float *host = malloc(m->n_floats * sizeof(float));
    model_init_params(m, 7, host);
    tower_set_params(&t, host);
    free(host);
    for (int s = 0; s < steps; s++) {
        tower_load_batch(&t, n, x + (size_t)s * n * shape3_size(m->input), y + s * n);
        tower_step(&t, n, true, true, 3);
        if (s == 0)
            r->loss = t.loss_sum;
    }
    r->grads = malloc(m->n_trainable * sizeof(float));
    r->params = malloc(m->n_floats * sizeof(float));
    be->download(be, r->grads, t.grads, m->n_trainable * sizeof(float));
    tower_get_params(&t, r->params);
    tower_free(&t);
    be->destroy(be);
    return true;
}

static void check_tower(void)
{
    model_cfg cfg;
    model_t m;
    tt_err err = {0};
    if (!tt_ok(load_model(RESNET, &cfg, &m, &err), "residual model loads %s", err.msg))
        return;
    int n = 16;
    size_t isz = shape3_size(m.input);
    float *x = malloc(2 * (size_t)n * isz * sizeof(float));
    int32_t *y = malloc(2 * (size_t)n * sizeof(int32_t));
    tt_rng r = tt_rng_make(5);
    tt_fill(&r, x, 2 * (size_t)n * isz, -1, 1);
    for (int i = 0; i < 2 * n; i++)
        y[i] = i % m.cfg->classes;
    tower_result on, off, again;
    bool ran = train(&m, true, 1, x, y, n, &on) && train(&m, false, 1, x, y, n, &off);
    if (tt_ok(ran, "residual model: sim towers ran with and without bf16 gradients")) {
        /* Forward is unchanged, so step 1's loss is the same bits. Its
         * backward rounds each stored gradient once (a blocked layer's dx,
         * and where two readers sum, the sum): at most R = 2 x the blocked
         * layers roundings of 2^-8 of a tensor each along any path, and
         * backward is linear in dy for a fixed forward, so the parameters'
         * gradient moves by at most about R x 2^-8 of its size (max-norm;
         * rounding errors being independent, the measured error is far
         * below). (tower_step computes gradients; the trainer updates.) */
        double bound = 2.0 * on.blocked * ldexp(1.0, -8);
        double eg = tt_rel_err_f(on.grads, off.grads, m.n_trainable);
        tt_ok(on.loss == off.loss, "residual model: step 1's loss the same bits (%.9g)", on.loss);
        tt_ok(eg > 0 && eg <= bound,
              "residual model: gradients within %d roundings of 2^-8 (%.3f) of the "
              "float32-gradient tower's: %.1e (and not equal: the rounding ran)",
              2 * on.blocked, bound, eg);
        tt_ok(on.in_use < off.in_use, "residual model: the tower holds less device memory with "
              "bf16 gradients: %zu against %zu bytes", on.in_use, off.in_use);
        free(on.grads), free(on.params), free(off.grads), free(off.params);
    }
    ran = train(&m, true, 2, x, y, n, &on) && train(&m, true, 2, x, y, n, &again);
    if (tt_ok(ran, "residual model: two 2-step runs with bf16 gradients")) {
        tt_ok(memcmp(on.grads, again.grads, m.n_trainable * 4) == 0 && on.loss == again.loss,
              "residual model: bf16 gradients give the same bits twice (gradients, loss)");
        free(on.grads), free(on.params), free(again.grads), free(again.params);
    }
    free(x), free(y);
    model_free(&m);
    model_cfg_free(&cfg);
}

int main(void)
{
    /* tt_model_texts.h's other models and helpers are test_sim_blocked.c's */
    (void)LENET, (void)WIDE_POOL, (void)activation_nchw, (void)layer_index;
    tt_err err = {0};
    backend_t *be = sim_bf16(true);
    tt_ok(be->blocked_bf16_grads && be->blocked_bf16,
          "sim in bf16 keeps its blocked activations' gradients in bf16 by default");
    be->destroy(be);
    be = sim_bf16(false);
    tt_ok(!be->blocked_bf16_grads && be->blocked_bf16,
          "TT_BF16_GRADS=0: bf16 activations, float32 gradients");
    be->destroy(be);
    be = backend_sim_create(0, "fp32", &err);
    tt_ok(be != NULL && !be->blocked_bf16_grads, "sim in fp32: float32 gradients");
    if (be != NULL)
        be->destroy(be);
    be = backend_cpu_create_bf16(0, 1, &err);
    if (be != NULL) {
        tt_ok(!be->blocked_bf16_grads, "the CPU's bf16 backend keeps float32 gradients");
        be->destroy(be);
    } else {
        tt_skip("the CPU's bf16 backend: %s", err.msg);
    }
    pair p = {sim_bf16(true), sim_bf16(false)};
    tt_rng r = tt_rng_make(11);
    check_relu(&p, &r);
    check_gap(&p, &r);
    check_bn(&p, &r, false);
    check_bn(&p, &r, true);
    check_pool(&p, &r, true);
    check_pool(&p, &r, false);
    check_conv(&p, &r);
    p.on->destroy(p.on);
    p.off->destroy(p.off);
    check_tower();
    return tt_done();
}

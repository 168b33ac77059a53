/* test_gpu_ops.c - every operation of backend.h on a GPU against the CPU
 * backend on the same random inputs: relative error <= 1e-4 without TF32
 * (max |gpu - cpu| / max |cpu|), the same bits where both run the same
 * per-element code (pooling, dropout, element-wise, optimizers, the dense
 * bias gradient); batchnorm's running statistics; repeated calls give the
 * same bits (deterministic algorithms); TF32 runs within 1e-2. Mixed
 * precision: the bf16 and fp16 backends' dense and conv2d, forward and
 * backward, against the fp32 CPU backend within 1e-2, the bias gradients
 * (float32 in every precision) on the CPU's bits, and repeatable bits.
 *
 * And tt_conv_graph.h's checks of the graph API's convolution plans.
 *
 * Without a GPU every check is reported as SKIP (visible in make check).
 * Also run by tests/gpu/run.sh on a GPU machine.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "tt_conv_graph.h"
#include "tt_test.h"

#define TOL 1e-4

static uint64_t state = 20240607;

static float uniform(float lo, float hi)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return lo + (hi - lo) * (float)((double)(state >> 11) / 9007199254740992.0);
}

static float *rand_buf(size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = uniform(lo, hi);
    return p;
}

/* A host array mirrored on both backends. */
typedef struct {
    size_t n;
    float *host, *cpu, *gpu;
} twin;

static backend_t *cpu_be, *gpu_be, *gpu_tf32, *gpu_bf16, *gpu_fp16;

static twin twin_make(backend_t *g, const float *host, size_t n)
{
    twin t = {n, malloc((n ? n : 1) * sizeof(float)), NULL, NULL};
    if (host)
        memcpy(t.host, host, n * sizeof(float));
    else
        memset(t.host, 0, n * sizeof(float));
    t.cpu = cpu_be->alloc(cpu_be, n * sizeof(float));
    t.gpu = g->alloc(g, n * sizeof(float));
    cpu_be->upload(cpu_be, t.cpu, t.host, n * sizeof(float));
    g->upload(g, t.gpu, t.host, n * sizeof(float));
    return t;
}

static void twin_free(backend_t *g, twin *t)
{
    cpu_be->free(cpu_be, t->cpu);
    g->free(g, t->gpu);
    free(t->host);
}

/* max |gpu - cpu| / max |cpu| (0 when both are all zero); -1 when a NaN
 * appears on one side only or the GPU backend reports an error. */
static double twin_rel(backend_t *g, const twin *t, bool *bitwise)
{
    float *a = malloc((t->n ? t->n : 1) * sizeof(float));
    g->download(g, a, t->gpu, t->n * sizeof(float));
    tt_err err = {0};
    if (backend_cuda_check(g, &err) != 0) {
        tt_diag("%s", err.msg);
        free(a);
        return -1;
    }
    double diff = 0, mag = 0;
    bool same = true, nan_mismatch = false;
    for (size_t i = 0; i < t->n; i++) {
        float c = t->cpu[i];
        if (isnan(c) != isnan(a[i]))
            nan_mismatch = true;
        if (memcmp(&c, &a[i], sizeof(float)) != 0)
            same = false;
        if (!isnan(c)) {
            diff = fmax(diff, fabs((double)a[i] - c));
            mag = fmax(mag, fabs((double)c));
        }
    }
    free(a);
    if (bitwise)
        *bitwise = same;
    if (nan_mismatch)
        return -1;
    return mag > 0 ? diff / mag : diff;
}

static void check(backend_t *g, const twin *t, double tol, const char *what)
{
    double r = twin_rel(g, t, NULL);
    tt_ok(r >= 0 && r <= tol, "%s: relative error %.2e <= %.0e", what, r, tol);
}

static void check_bits(backend_t *g, const twin *t, const char *what)
{
    bool same = false;
    double r = twin_rel(g, t, &same);
    tt_ok(r >= 0 && same, "%s: the CPU's bits (relative error %.2e)", what, r);
}

/* ---- dense ---- */
static void test_dense(backend_t *g, double tol, const char *tag)
{
    int shapes[][3] = {{32, 784, 120}, {7, 10, 3}, {64, 1, 5}, {1, 300, 84}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int n = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        bool relu = s % 2 == 0;
        float *hx = rand_buf((size_t)n * in, -1, 1), *hw = rand_buf((size_t)out * in, -0.5f, 0.5f);
        float *hb = rand_buf(out, -0.5f, 0.5f), *hdy = rand_buf((size_t)n * out, -1, 1);
        twin x = twin_make(g, hx, (size_t)n * in), w = twin_make(g, hw, (size_t)out * in);
        twin b = twin_make(g, hb, out), y = twin_make(g, NULL, (size_t)n * out);
        twin dy = twin_make(g, hdy, (size_t)n * out), dx = twin_make(g, NULL, (size_t)n * in);
        twin dw = twin_make(g, NULL, (size_t)out * in), db = twin_make(g, NULL, out);
        cpu_be->dense_forward(cpu_be, n, in, out, x.cpu, w.cpu, b.cpu, relu, y.cpu);
        g->dense_forward(g, n, in, out, x.gpu, w.gpu, b.gpu, relu, y.gpu);
        char what[160];
        snprintf(what, sizeof(what), "%s dense forward [%d x %d] -> %d%s", tag, n, in, out,
                 relu ? " + relu" : "");
        check(g, &y, tol, what);
        /* backward from the CPU's y, so that the relu masks agree (a y near
         * 0 may take either sign within the tolerance) */
        g->upload(g, y.gpu, y.cpu, (size_t)n * out * sizeof(float));
        cpu_be->dense_backward(cpu_be, n, in, out, x.cpu, w.cpu, y.cpu, relu, dy.cpu, dx.cpu,
                               dw.cpu, db.cpu);
        g->dense_backward(g, n, in, out, x.gpu, w.gpu, y.gpu, relu, dy.gpu, dx.gpu, dw.gpu, db.gpu);
        snprintf(what, sizeof(what), "%s dense backward dx [%d x %d]", tag, n, in);
        check(g, &dx, tol, what);
        snprintf(what, sizeof(what), "%s dense backward dw [%d x %d]", tag, out, in);
        check(g, &dw, tol, what);
        snprintf(what, sizeof(what), "%s dense backward db [%d] (rows summed in order)", tag, out);
        check_bits(g, &db, what);
        twin *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            twin_free(g, all[i]);
        free(hx);
        free(hw);
        free(hb);
        free(hdy);
    }
}

/* ---- conv2d ---- */
static void test_conv(backend_t *g, double tol, const char *tag)
{
    /* n, c, h, w, f, k, stride, pad: LeNet's two, ResNet's 3x3 and 1x1
     * stride 2, an odd shape */
    int shapes[][8] = {{16, 1, 28, 28, 6, 5, 1, 2},
                       {16, 6, 14, 14, 16, 5, 1, 0},
                       {8, 16, 16, 16, 32, 3, 2, 1},
                       {8, 16, 16, 16, 32, 1, 2, 0},
                       {3, 5, 9, 7, 4, 3, 1, 1}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int *q = shapes[s];
        window_desc d = {q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], 0, 0, false, false};
        d.oh = window_out_size(d.h, d.k, d.stride, d.pad);
        d.ow = window_out_size(d.w, d.k, d.stride, d.pad);
        bool relu = s % 2 == 0, bias = s != 3;
        size_t xn = (size_t)d.n * d.c * d.h * d.w, wn = (size_t)d.f * d.c * d.k * d.k;
        size_t yn = (size_t)d.n * d.f * d.oh * d.ow;
        float *hx = rand_buf(xn, -1, 1), *hw = rand_buf(wn, -0.3f, 0.3f);
        float *hb = rand_buf(d.f, -0.3f, 0.3f), *hdy = rand_buf(yn, -1, 1);
        twin x = twin_make(g, hx, xn), w = twin_make(g, hw, wn), b = twin_make(g, hb, d.f);
        twin y = twin_make(g, NULL, yn), dy = twin_make(g, hdy, yn), dx = twin_make(g, NULL, xn);
        twin dw = twin_make(g, NULL, wn), db = twin_make(g, NULL, d.f);
        size_t cws = cpu_be->conv_workspace(cpu_be, &d), gws = g->conv_workspace(g, &d);
        void *cw = cws ? cpu_be->alloc(cpu_be, cws) : NULL, *gw = gws ? g->alloc(g, gws) : NULL;
        cpu_be->conv_forward(cpu_be, &d, x.cpu, w.cpu, bias ? b.cpu : NULL, relu, y.cpu, cw);
        g->conv_forward(g, &d, x.gpu, w.gpu, bias ? b.gpu : NULL, relu, y.gpu, gw);
        char what[200];
        snprintf(what, sizeof(what), "%s conv forward [%d,%d,%d,%d] f%d k%d s%d p%d%s%s", tag, d.n,
                 d.c, d.h, d.w, d.f, d.k, d.stride, d.pad, bias ? " + bias" : "",
                 relu ? " + relu" : "");
        check(g, &y, tol, what);
        g->upload(g, y.gpu, y.cpu, yn * sizeof(float)); /* the same relu mask */
        cpu_be->conv_backward(cpu_be, &d, x.cpu, w.cpu, y.cpu, relu, dy.cpu, dx.cpu, dw.cpu,
                              bias ? db.cpu : NULL, cw);
        /* twice on the GPU (dy is masked already; masking again changes
         * nothing): deterministic algorithms give the same bits */
        float *first = malloc(wn * sizeof(float)), *again = malloc(wn * sizeof(float));
        g->conv_backward(g, &d, x.gpu, w.gpu, y.gpu, relu, dy.gpu, dx.gpu, dw.gpu,
                         bias ? db.gpu : NULL, gw);
        g->download(g, first, dw.gpu, wn * sizeof(float));
        g->conv_backward(g, &d, x.gpu, w.gpu, y.gpu, relu, dy.gpu, NULL, dw.gpu, NULL, gw);
        g->download(g, again, dw.gpu, wn * sizeof(float));
        snprintf(what, sizeof(what), "%s conv backward dx [%d,%d,%d,%d]", tag, d.n, d.c, d.h, d.w);
        check(g, &dx, tol, what);
        snprintf(what, sizeof(what), "%s conv backward dw [%d,%d,%d,%d]", tag, d.f, d.c, d.k, d.k);
        check(g, &dw, tol, what);
        if (bias) {
            snprintf(what, sizeof(what), "%s conv backward db [%d]", tag, d.f);
            check(g, &db, tol, what);
        }
        if (gpu_tf32 != g) /* deterministic = true */
            tt_ok(memcmp(first, again, wn * sizeof(float)) == 0,
                  "%s conv backward filter twice: the same bits (deterministic)", tag);
        free(first);
        free(again);
        if (cw)
            cpu_be->free(cpu_be, cw);
        if (gw)
            g->free(g, gw);
        twin *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            twin_free(g, all[i]);
        free(hx);
        free(hw);
        free(hb);
        free(hdy);
    }
}

/* ---- pooling: the same per-element code, the same bits ---- */
static void test_pool(backend_t *g)
{
    int shapes[][5] = {{28, 28, 2, 2, 0}, {16, 16, 3, 2, 1}, {9, 7, 3, 1, 1}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        window_desc d = {
            4, 3, shapes[s][0], shapes[s][1], 3, shapes[s][2], shapes[s][3], shapes[s][4], 0, 0, false, false};
        d.oh = window_out_size(d.h, d.k, d.stride, d.pad);
        d.ow = window_out_size(d.w, d.k, d.stride, d.pad);
        size_t xn = (size_t)d.n * d.c * d.h * d.w, yn = (size_t)d.n * d.c * d.oh * d.ow;
        float *hx = rand_buf(xn, -1, 1), *hdy = rand_buf(yn, -1, 1);
        for (size_t i = 0; i < xn; i += 5)
            hx[i] = 0.5f; /* ties */
        twin x = twin_make(g, hx, xn), y = twin_make(g, NULL, yn), dy = twin_make(g, hdy, yn);
        twin dx = twin_make(g, NULL, xn);
        int32_t *cm = cpu_be->alloc(cpu_be, yn * sizeof(int32_t));
        int32_t *gm = g->alloc(g, yn * sizeof(int32_t));
        char what[160];
        cpu_be->maxpool_forward(cpu_be, &d, x.cpu, y.cpu, cm);
        g->maxpool_forward(g, &d, x.gpu, y.gpu, gm);
        snprintf(what, sizeof(what), "maxpool forward %dx%d k%d s%d p%d", d.h, d.w, d.k, d.stride,
                 d.pad);
        check_bits(g, &y, what);
        cpu_be->maxpool_backward(cpu_be, &d, dy.cpu, cm, dx.cpu);
        g->maxpool_backward(g, &d, dy.gpu, gm, dx.gpu);
        snprintf(what, sizeof(what), "maxpool backward %dx%d k%d s%d p%d", d.h, d.w, d.k, d.stride,
                 d.pad);
        check_bits(g, &dx, what);
        cpu_be->avgpool_forward(cpu_be, &d, x.cpu, y.cpu);
        g->avgpool_forward(g, &d, x.gpu, y.gpu);
        snprintf(what, sizeof(what), "avgpool forward %dx%d k%d s%d p%d", d.h, d.w, d.k, d.stride,
                 d.pad);
        check_bits(g, &y, what);
        cpu_be->avgpool_backward(cpu_be, &d, dy.cpu, dx.cpu);
        g->avgpool_backward(g, &d, dy.gpu, dx.gpu);
        snprintf(what, sizeof(what), "avgpool backward %dx%d k%d s%d p%d", d.h, d.w, d.k, d.stride,
                 d.pad);
        check_bits(g, &dx, what);
        cpu_be->free(cpu_be, cm);
        g->free(g, gm);
        twin *all[] = {&x, &y, &dy, &dx};
        for (size_t i = 0; i < 4; i++)
            twin_free(g, all[i]);
        free(hx);
        free(hdy);
    }
}

/* ---- batchnorm: training (running statistics too), inference, backward ---- */
static void test_batchnorm(backend_t *g)
{
    int shapes[][3] = {{16, 8, 64}, {32, 120, 1}, {2, 3, 5}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int n = shapes[s][0], c = shapes[s][1], hw = shapes[s][2];
        bool relu = s != 1;
        size_t xn = (size_t)n * c * hw;
        float *hx = rand_buf(xn, -2, 3), *hdy = rand_buf(xn, -1, 1);
        float *hg = rand_buf(c, 0.5f, 1.5f), *hb = rand_buf(c, -0.5f, 0.5f);
        float *hrm = rand_buf(c, -0.1f, 0.1f), *hrv = rand_buf(c, 0.9f, 1.1f);
        twin x = twin_make(g, hx, xn), y = twin_make(g, NULL, xn), dy = twin_make(g, hdy, xn);
        twin dx = twin_make(g, NULL, xn), ga = twin_make(g, hg, c), be = twin_make(g, hb, c);
        twin rm = twin_make(g, hrm, c), rv = twin_make(g, hrv, c), sv = twin_make(g, NULL, 2 * c);
        twin dg = twin_make(g, NULL, c), dbeta = twin_make(g, NULL, c);
        char what[160];
        cpu_be->batchnorm_forward(cpu_be, n, c, hw, x.cpu, ga.cpu, be.cpu, rm.cpu, rv.cpu, 0.1f,
                                  1e-5f, true, relu, y.cpu, sv.cpu, sv.cpu + c);
        g->batchnorm_forward(g, n, c, hw, x.gpu, ga.gpu, be.gpu, rm.gpu, rv.gpu, 0.1f, 1e-5f, true,
                             relu, y.gpu, sv.gpu, sv.gpu + c);
        snprintf(what, sizeof(what), "batchnorm training forward [%d, %d, %d]%s", n, c, hw,
                 relu ? " + relu" : "");
        check(g, &y, TOL, what);
        check(g, &rm, TOL, "  running_mean after one step (momentum 0.1)");
        check(g, &rv, TOL, "  running_var after one step (unbiased, as PyTorch)");
        check(g, &sv, TOL, "  saved mean and 1/sqrt(var + eps)");
        cpu_be->batchnorm_backward(cpu_be, n, c, hw, x.cpu, ga.cpu, sv.cpu, sv.cpu + c, y.cpu, relu,
                                   dy.cpu, dx.cpu, dg.cpu, dbeta.cpu);
        g->batchnorm_backward(g, n, c, hw, x.gpu, ga.gpu, sv.gpu, sv.gpu + c, y.gpu, relu, dy.gpu,
                              dx.gpu, dg.gpu, dbeta.gpu);
        snprintf(what, sizeof(what), "batchnorm backward dx [%d, %d, %d]", n, c, hw);
        check(g, &dx, TOL, what);
        check(g, &dg, TOL, "  dgamma");
        check(g, &dbeta, TOL, "  dbeta");
        /* no dx (batchnorm on the data): the parameter gradients alone */
        cpu_be->upload(cpu_be, dy.cpu, hdy, xn * sizeof(float));
        g->upload(g, dy.gpu, hdy, xn * sizeof(float));
        cpu_be->batchnorm_backward(cpu_be, n, c, hw, x.cpu, ga.cpu, sv.cpu, sv.cpu + c, y.cpu, relu,
                                   dy.cpu, NULL, dg.cpu, dbeta.cpu);
        g->batchnorm_backward(g, n, c, hw, x.gpu, ga.gpu, sv.gpu, sv.gpu + c, y.gpu, relu, dy.gpu,
                              NULL, dg.gpu, dbeta.gpu);
        check(g, &dg, TOL, "  dgamma without dx");
        check(g, &dbeta, TOL, "  dbeta without dx");
        cpu_be->batchnorm_forward(cpu_be, n, c, hw, x.cpu, ga.cpu, be.cpu, rm.cpu, rv.cpu, 0.1f,
                                  1e-5f, false, relu, y.cpu, NULL, NULL);
        g->batchnorm_forward(g, n, c, hw, x.gpu, ga.gpu, be.gpu, rm.gpu, rv.gpu, 0.1f, 1e-5f, false,
                             relu, y.gpu, NULL, NULL);
        snprintf(what, sizeof(what), "batchnorm inference forward [%d, %d, %d]", n, c, hw);
        check(g, &y, TOL, what);
        twin *all[] = {&x, &y, &dy, &dx, &ga, &be, &rm, &rv, &sv, &dg, &dbeta};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            twin_free(g, all[i]);
        free(hx);
        free(hdy);
        free(hg);
        free(hb);
        free(hrm);
        free(hrv);
    }
}

/* ---- element-wise, dropout, loss, optimizers ---- */
static void test_elementwise(backend_t *g)
{
    size_t n = 100003;
    float *ha = rand_buf(n, -1, 1), *hb = rand_buf(n, -1, 1);
    twin a = twin_make(g, ha, n), b = twin_make(g, hb, n), y = twin_make(g, NULL, n);
    twin m = twin_make(g, NULL, n);
    cpu_be->relu_forward(cpu_be, n, a.cpu, y.cpu);
    g->relu_forward(g, n, a.gpu, y.gpu);
    check_bits(g, &y, "relu forward");
    cpu_be->relu_backward(cpu_be, n, a.cpu, b.cpu, y.cpu);
    g->relu_backward(g, n, a.gpu, b.gpu, y.gpu);
    check_bits(g, &y, "relu backward");
    cpu_be->dropout_forward(cpu_be, n, 0.25f, 0xfeedULL, a.cpu, y.cpu, m.cpu);
    g->dropout_forward(g, n, 0.25f, 0xfeedULL, a.gpu, y.gpu, m.gpu);
    check_bits(g, &m, "dropout mask: the CPU's counter-based stream");
    check_bits(g, &y, "dropout output");
    cpu_be->mul(cpu_be, n, a.cpu, b.cpu, y.cpu);
    g->mul(g, n, a.gpu, b.gpu, y.gpu);
    check_bits(g, &y, "mul");
    cpu_be->add(cpu_be, n, a.cpu, b.cpu, true, y.cpu);
    g->add(g, n, a.gpu, b.gpu, true, y.gpu);
    check_bits(g, &y, "add + relu");
    cpu_be->axpy(cpu_be, n, 0.3f, a.cpu, y.cpu);
    g->axpy(g, n, 0.3f, a.gpu, y.gpu);
    check_bits(g, &y, "axpy");
    cpu_be->scale(cpu_be, n, -1.7f, y.cpu);
    g->scale(g, n, -1.7f, y.gpu);
    check_bits(g, &y, "scale");
    cpu_be->add_scalar(cpu_be, n, 1.0f, y.cpu);
    g->add_scalar(g, n, 1.0f, y.gpu);
    check_bits(g, &y, "add_scalar (batchnorm's batch count)");
    bool fin = g->all_finite(g, n, y.gpu);
    float inf = INFINITY;
    g->upload(g, y.gpu + n / 2, &inf, sizeof(float));
    bool fin2 = g->all_finite(g, n, y.gpu);
    g->upload(g, y.gpu + n / 2, &y.cpu[n / 2], sizeof(float)); /* put it back */
    tt_ok(fin && !fin2 && cpu_be->all_finite(cpu_be, n, y.cpu),
          "all_finite: true on finite values, false with one Inf (as the CPU's)");
    double ss = g->sumsq(g, n, y.gpu), css = cpu_be->sumsq(cpu_be, n, y.cpu);
    tt_ok(css > 0.0 && fabs(ss - css) <= 1e-12 * css,
          "sumsq (LARS, clip_global_norm): %.17g vs the CPU's %.17g (double sums, other order)",
          ss, css);
    cpu_be->copy(cpu_be, m.cpu, y.cpu, n * sizeof(float));
    g->copy(g, m.gpu, y.gpu, n * sizeof(float));
    check_bits(g, &m, "copy");

    /* optimizers: three steps each */
    twin w = twin_make(g, ha, n), buf = twin_make(g, NULL, n), v = twin_make(g, NULL, n);
    for (int step = 1; step <= 3; step++) {
        cpu_be->sgd_step(cpu_be, n, 0.05f, 0.9f, true, 5e-4f, step == 1, w.cpu, b.cpu, buf.cpu);
        g->sgd_step(g, n, 0.05f, 0.9f, true, 5e-4f, step == 1, w.gpu, b.gpu, buf.gpu);
    }
    check_bits(g, &w, "sgd, momentum 0.9, nesterov, weight decay: weights after 3 steps");
    check_bits(g, &buf, "  momentum buffers");
    cpu_be->sgd_step(cpu_be, n, 0.1f, 0.0f, false, 0.0f, false, w.cpu, b.cpu, NULL);
    g->sgd_step(g, n, 0.1f, 0.0f, false, 0.0f, false, w.gpu, b.gpu, NULL);
    check_bits(g, &w, "plain sgd");
    for (int step = 1; step <= 3; step++) {
        cpu_be->adam_step(cpu_be, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, step, w.cpu, b.cpu, buf.cpu,
                          v.cpu);
        g->adam_step(g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, step, w.gpu, b.gpu, buf.gpu, v.gpu);
    }
    check_bits(g, &w, "adam, weight decay: weights after 3 steps");
    check_bits(g, &v, "  exp_avg_sq");
    twin *all[] = {&a, &b, &y, &m, &w, &buf, &v};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        twin_free(g, all[i]);
    free(ha);
    free(hb);

    /* loss */
    int rows = 300, classes = 10;
    float *hz = rand_buf((size_t)rows * classes, -6, 6);
    int32_t *hl = malloc(rows * sizeof(int32_t));
    for (int r = 0; r < rows; r++)
        hl[r] = (int32_t)(r * 7 % classes);
    twin z = twin_make(g, hz, (size_t)rows * classes),
         dz = twin_make(g, NULL, (size_t)rows * classes);
    int32_t *cl = cpu_be->alloc(cpu_be, rows * sizeof(int32_t)),
            *gl = g->alloc(g, rows * sizeof(int32_t));
    cpu_be->upload(cpu_be, cl, hl, rows * sizeof(int32_t));
    g->upload(g, gl, hl, rows * sizeof(int32_t));
    double closs, gloss;
    int ccorrect, gcorrect;
    /* with label smoothing: every term of the row function runs */
    cpu_be->softmax_xent(cpu_be, rows, classes, z.cpu, cl, 0.1f, dz.cpu);
    cpu_be->loss_read(cpu_be, &closs, &ccorrect);
    g->softmax_xent(g, rows, classes, z.gpu, gl, 0.1f, dz.gpu);
    /* host checks queued before the loss is read (a step's optimizer norms,
     * loss scaling's finite check) keep their own result buffer */
    double sq = g->sumsq(g, (size_t)rows * classes, z.gpu), sq_ref = 0.0;
    bool finite = g->all_finite(g, (size_t)rows * classes, z.gpu);
    for (size_t i = 0; i < (size_t)rows * classes; i++)
        sq_ref += (double)hz[i] * hz[i];
    g->loss_read(g, &gloss, &gcorrect);
    tt_ok(fabs(gloss - closs) <= 1e-9 * fabs(closs) && gcorrect == ccorrect,
          "softmax cross-entropy: loss %.12g vs CPU %.12g, correct %d vs %d (read after "
          "two host checks)", gloss, closs, gcorrect, ccorrect);
    double loss0 = NAN;
    int correct0 = -1;
    g->softmax_xent(g, 0, classes, z.gpu, gl, 0.1f, NULL);
    g->loss_read(g, &loss0, &correct0);
    tt_ok(loss0 == 0.0 && correct0 == 0,
          "softmax cross-entropy of 0 rows reads back as 0 and 0, not the last call's (%g, %d)",
          loss0, correct0);
    tt_ok(finite && fabs(sq - sq_ref) <= 1e-9 * sq_ref,
          "sum of squares %.12g vs float64 %.12g, all finite %d, between the loss and its "
          "read", sq, sq_ref, finite);
    check(g, &dz, 1e-6, "softmax cross-entropy gradient");
    cpu_be->free(cpu_be, cl);
    g->free(g, gl);
    twin_free(g, &z);
    twin_free(g, &dz);
    free(hz);
    free(hl);
}

int main(void)
{
    tt_restore_visible_gpus();
    tt_conv_graph_checks(); /* the graph API's convolution plans (issue 36) */
    char reason[256] = "";
    int gpus = backend_cuda_device_count(reason, sizeof(reason));
    tt_err err = {0};
    cpu_be = backend_cpu_create(0, 2, &err);
    cuda_options strict = {.tf32 = false, .deterministic = true};
    cuda_options fast = {.tf32 = true, .deterministic = false};
    if (gpus > 0) {
        gpu_be = backend_cuda_create(0, &strict, &err);
        if (gpu_be == NULL)
            tt_diag("backend_cuda_create: %s", err.msg);
        err_clear(&err);
        gpu_tf32 = backend_cuda_create(0, &fast, &err);
    }
    if (gpus > 0 && gpu_tf32 != NULL) {
        gpu_bf16 = backend_cuda_create_bf16(0, &strict, &err);
        gpu_fp16 = backend_cuda_create_fp16(0, &strict, &err);
    }
    if (gpu_be == NULL || gpu_tf32 == NULL || gpu_bf16 == NULL || gpu_fp16 == NULL ||
        cpu_be == NULL) {
        tt_skip("every backend operation on the GPU against the CPU backend (no GPU: %s)",
                gpus > 0 ? err.msg : reason);
        tt_skip("the same with tf32 = true, deterministic = false");
        tt_skip("dense and conv2d in bf16 against the fp32 CPU backend within 1e-2");
        tt_skip("dense and conv2d in fp16 against the fp32 CPU backend within 1e-2");
        return tt_done();
    }
    tt_ok(strcmp(gpu_be->precision, "fp32") == 0 && strcmp(gpu_bf16->precision, "bf16") == 0 &&
              strcmp(gpu_fp16->precision, "fp16") == 0 && strcmp(cpu_be->precision, "fp32") == 0,
          "each backend says its precision");
    test_dense(gpu_be, TOL, "fp32");
    test_conv(gpu_be, TOL, "fp32");
    test_pool(gpu_be);
    test_batchnorm(gpu_be);
    test_elementwise(gpu_be);
    /* TF32 keeps 10 mantissa bits: 1e-2 */
    test_dense(gpu_tf32, 1e-2, "tf32");
    test_conv(gpu_tf32, 1e-2, "tf32");
    /* mixed precision: 8 (bf16) or 11 (fp16) significant bits in the
     * products' operands, float32 sums: 1e-2 */
    test_dense(gpu_bf16, 1e-2, "bf16");
    test_conv(gpu_bf16, 1e-2, "bf16");
    test_dense(gpu_fp16, 1e-2, "fp16");
    test_conv(gpu_fp16, 1e-2, "fp16");
    gpu_be->destroy(gpu_be);
    gpu_tf32->destroy(gpu_tf32);
    gpu_bf16->destroy(gpu_bf16);
    gpu_fp16->destroy(gpu_fp16);
    cpu_be->destroy(cpu_be);
    return tt_done();
}

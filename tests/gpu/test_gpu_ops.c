/* test_gpu_ops.c - every operation of backend.h on a GPU against the CPU
 * backend on the same random inputs: relative error <= 1e-4 without TF32
 * (max |gpu - cpu| / max |cpu|), the same bits where both run the same
 * per-element code (pooling, dropout, element-wise, optimizers, the dense
 * bias gradient); batchnorm's running statistics; repeated calls give the
 * same bits (deterministic algorithms); TF32 runs within 1e-2. Mixed
 * precision: the bf16 and fp16 backends' dense and conv2d, forward and
 * backward, against the fp32 CPU backend within 1e-2, the bias gradients
 * (float32 in every precision) on the CPU's bits, and repeatable bits.
 * Batchnorm over NHWC activations (float32 and bf16), alone and fused with
 * the residual add and relu (cuda_bn_nhwc.c): against the CPU, repeatable
 * bits, fused = unfused bitwise.
 * bf16 NHWC (the blocked layout of the bf16 backend, cuda_nhwc.c): relu,
 * add, global average pooling and the pools on the bits of the CPU
 * backend's blocked operations in the same layout; conv2d with blocked
 * (bf16 NHWC) and NCHW sides, forward and backward, against the fp32 CPU
 * backend within 1e-2. The backward kernels with bf16 gradients (relu,
 * global average pooling, the pools: backend.h's blocked_bf16_grads) on
 * the CPU's float32 gradients rounded to nearest even, element by element;
 * batchnorm (alone and fused with the add) and conv2d backward with bf16
 * gradients on their float32-gradient path's results rounded.
 * float32 NHWC (TT_CUDA_LAYOUT=nhwc), fp32 and tf32: the same element-wise
 * operations and pools on the bits of the CPU's float32 NHWC ones; conv2d
 * with blocked (float32 NHWC) and NCHW sides, forward and backward,
 * against the fp32 CPU backend (1e-4 in fp32, 1e-2 with tf32), and its
 * float32 KRSC weight copies.
 * The conv bias gradient (per-channel sums in partials, cuda_channel_sum),
 * NHWC [n * oh * ow, f] and NCHW, bf16 and float32 gradients, at LeNet's
 * shapes at batch 128 and up to 100,352 rows of 6 and 16 channels, past a
 * tile and past the scratch: equal to float64 on values whose sums are
 * exact in any order, within the order's own error bound on values whose
 * sums round; float32 and bf16 of the same values, and two calls, the
 * same bits; through conv_backward too (NHWC and NCHW).
 * The optimizer's norms (sumsq, sumsq_each; sumsq_plan.h): ranges of 1 to
 * 10 M floats and empty ones, against float64 (exactly on values whose
 * sums are exact in any order, else within the order's bound), twice,
 * alone and in a list the same bits; more ranges than the scratch holds
 * the partials of (in groups).
 * The weight copies made once per step (weight_copies.h): a conv (NCHW and
 * bf16 NHWC) and a dense call on a registered block give the bits of
 * converting at each call, and see new weights in the next step.
 *
 * And tt_conv_graph.h's checks of the graph API's convolution plans.
 *
 * Without a GPU every check is reported as SKIP (visible in make check).
 * Also run by tests/gpu/run.sh on a GPU machine.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cuda/bn_nhwc_plan.h"
#include "backend/cuda/sumsq_plan.h"
#include "backend/cuda/cuda_backend.h"
#ifdef HAVE_CUDA
#include "backend/cuda/cuda_impl.h"
#endif
#include "tt_ref.h"
#include "tt_blocked.h"
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

/* ---- batchnorm over NHWC activations, our kernels (cuda_bn_nhwc.c), and
 *      fused with the residual add and relu ----
 *
 * Against the CPU backend's NCHW batchnorm on the same values (bf16
 * activations: made bf16-exact on the host first, so both read the same
 * numbers): y within 1e-4 (bf16: 1e-2, y and batchnorm's output before the
 * add are stored in bf16), statistics and gradients within 1e-4. The relu
 * mask of the reference backward is the GPU's own y (a value at 0 would
 * otherwise decide a gradient). Two runs give the same bits (the sums'
 * order is the shape's), and the fused operations give the bits of
 * batchnorm_forward_blocked + add + relu and of the mask + copy +
 * batchnorm_backward_blocked (the add done on the host: float32, as the
 * GPU's add kernels). The backend's blocked flags are set here for the
 * call: the kernels read blocked_nhwc and blocked_bf16. */

typedef struct {
    int n, c, hw;
    size_t count;
    bool bf16;
} bn_case;

/* NCHW index of NHWC element e */
static size_t nchw_of(const bn_case *k, size_t e)
{
    size_t ch = e % (size_t)k->c, row = e / (size_t)k->c;
    size_t i = row / (size_t)k->hw, p = row % (size_t)k->hw;
    return (i * (size_t)k->c + ch) * (size_t)k->hw + p;
}

/* host NCHW floats to a device NHWC tensor: an activation (bf16 when
 * k->bf16) or a gradient (float32) */
static void *nhwc_upload(backend_t *g, const bn_case *k, const float *nchw, bool act)
{
    bool half = act && k->bf16;
    size_t esz = half ? 2 : 4;
    unsigned char *h = malloc(k->count * esz);
    for (size_t e = 0; e < k->count; e++) {
        float v = nchw[nchw_of(k, e)];
        if (half) {
            uint16_t b = tt_bf16_round(v);
            memcpy(h + e * 2, &b, 2);
        } else {
            memcpy(h + e * 4, &v, 4);
        }
    }
    void *d = g->alloc(g, k->count * esz);
    g->upload(g, d, h, k->count * esz);
    free(h);
    return d;
}

static void nhwc_download(backend_t *g, const bn_case *k, const void *d, bool act, float *nchw)
{
    bool half = act && k->bf16;
    size_t esz = half ? 2 : 4;
    unsigned char *h = malloc(k->count * esz);
    g->download(g, h, d, k->count * esz);
    for (size_t e = 0; e < k->count; e++) {
        float v;
        if (half) {
            uint16_t b;
            memcpy(&b, h + e * 2, 2);
            v = tt_bf16_widen(b);
        } else {
            memcpy(&v, h + e * 4, 4);
        }
        nchw[nchw_of(k, e)] = v;
    }
    free(h);
}

static double max_rel(const float *a, const float *ref, size_t n)
{
    double diff = 0, mag = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(ref[i]))
            return 1e30;
        diff = fmax(diff, fabs((double)a[i] - ref[i]));
        mag = fmax(mag, fabs((double)ref[i]));
    }
    return mag > 0 ? diff / mag : diff;
}

/* The inputs, NCHW on the host (activations bf16-exact for bf16). */
typedef struct {
    float *x, *r, *dy, *dr0, *gamma, *beta, *rm, *rv;
} bn_in;

/* What one GPU forward + backward gave, NCHW on the host. */
typedef struct {
    float *y, *dx, *dr, *dg, *db, *rm, *rv, *save;
} bn_res;

static bn_res bn_res_make(const bn_case *k)
{
    size_t n = k->count, c = (size_t)k->c;
    bn_res o = {calloc(n, 4), calloc(n, 4), calloc(n, 4), calloc(c, 4), calloc(c, 4),
                calloc(c, 4), calloc(c, 4), calloc(2 * c, 4)};
    return o;
}

static void bn_res_free(bn_res *o)
{
    free(o->y), free(o->dx), free(o->dr), free(o->dg), free(o->db), free(o->rm), free(o->rv);
    free(o->save);
}

static bool bn_res_same(const bn_case *k, const bn_res *a, const bn_res *b)
{
    size_t n = k->count * 4, c = (size_t)k->c * 4;
    return !memcmp(a->y, b->y, n) && !memcmp(a->dx, b->dx, n) && !memcmp(a->dr, b->dr, n) &&
           !memcmp(a->dg, b->dg, c) && !memcmp(a->db, b->db, c) && !memcmp(a->rm, b->rm, c) &&
           !memcmp(a->rv, b->rv, c) && !memcmp(a->save, b->save, 2 * c);
}

/* One training forward and backward on the GPU: fused (with r and dr,
 * dr += when acc) or batchnorm alone (relu on its output). 0, or -1 on a
 * device error. */
static int bn_gpu_run(backend_t *g, const bn_case *k, const bn_in *in, bool fused, bool relu,
                      bool acc, bn_res *o)
{
    size_t c = (size_t)k->c;
    void *x = nhwc_upload(g, k, in->x, true), *r = nhwc_upload(g, k, in->r, true);
    void *y = g->alloc(g, k->count * 4);
    float *dy = nhwc_upload(g, k, in->dy, false), *dr = nhwc_upload(g, k, in->dr0, false);
    float *dx = g->alloc(g, k->count * 4), *p = g->alloc(g, 8 * c * 4);
    float *ga = p, *be = p + c, *rm = p + 2 * c, *rv = p + 3 * c, *sv = p + 4 * c, *dg = p + 6 * c,
          *db = p + 7 * c;
    g->upload(g, ga, in->gamma, c * 4);
    g->upload(g, be, in->beta, c * 4);
    g->upload(g, rm, in->rm, c * 4);
    g->upload(g, rv, in->rv, c * 4);
    if (fused) {
        g->batchnorm_add_forward_blocked(g, k->n, k->c, k->hw, x, ga, be, rm, rv, 0.1f, 1e-5f,
                                         true, r, relu, y, sv, sv + c);
        g->batchnorm_add_backward_blocked(g, k->n, k->c, k->hw, x, ga, sv, sv + c, y, relu, dy,
                                          dx, dg, db, dr, acc);
    } else {
        g->batchnorm_forward_blocked(g, k->n, k->c, k->hw, x, ga, be, rm, rv, 0.1f, 1e-5f, true,
                                     relu, y, sv, sv + c);
        g->batchnorm_backward_blocked(g, k->n, k->c, k->hw, x, ga, sv, sv + c, y, relu, dy, dx,
                                      dg, db);
    }
    nhwc_download(g, k, y, true, o->y);
    nhwc_download(g, k, dx, false, o->dx);
    nhwc_download(g, k, dr, false, o->dr);
    g->download(g, o->dg, dg, c * 4);
    g->download(g, o->db, db, c * 4);
    g->download(g, o->rm, rm, c * 4);
    g->download(g, o->rv, rv, c * 4);
    g->download(g, o->save, sv, 2 * c * 4);
    void *all[] = {x, r, y, dy, dr, dx, p};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        g->free(g, all[i]);
    tt_err err = {0};
    if (backend_cuda_check(g, &err) != 0) {
        tt_diag("%s", err.msg);
        return -1;
    }
    return 0;
}

/* The CPU backend's NCHW batchnorm of in (training, no relu): batchnorm's
 * output, running statistics and saved statistics into ref; with dyp (the
 * gradient at batchnorm's output), its backward. */
static void bn_cpu_ref(const bn_case *k, const bn_in *in, const float *dyp, bn_res *ref)
{
    size_t n = k->count, c = (size_t)k->c;
    float *x = cpu_be->alloc(cpu_be, n * 4), *y = cpu_be->alloc(cpu_be, n * 4);
    float *dy = cpu_be->alloc(cpu_be, n * 4), *dx = cpu_be->alloc(cpu_be, n * 4);
    memcpy(x, in->x, n * 4);
    memcpy(ref->rm, in->rm, c * 4);
    memcpy(ref->rv, in->rv, c * 4);
    cpu_be->batchnorm_forward(cpu_be, k->n, k->c, k->hw, x, in->gamma, in->beta, ref->rm, ref->rv,
                              0.1f, 1e-5f, true, false, y, ref->save, ref->save + c);
    memcpy(ref->y, y, n * 4);
    if (dyp != NULL) {
        memcpy(dy, dyp, n * 4);
        cpu_be->batchnorm_backward(cpu_be, k->n, k->c, k->hw, x, in->gamma, ref->save,
                                   ref->save + c, y, false, dy, dx, ref->dg, ref->db);
        memcpy(ref->dx, dx, n * 4);
    }
    cpu_be->free(cpu_be, x), cpu_be->free(cpu_be, y), cpu_be->free(cpu_be, dy);
    cpu_be->free(cpu_be, dx);
}

/* dy masked by y where relu (the gradient reaching batchnorm) */
static float *bn_masked(const bn_case *k, const float *dy, const float *y, bool relu)
{
    float *g = malloc(k->count * 4);
    for (size_t i = 0; i < k->count; i++)
        g[i] = relu && !(y[i] > 0) ? 0.0f : dy[i];
    return g;
}

/* The GPU's result a against the CPU's arithmetic. */
static void bn_check_ref(const bn_case *k, const bn_in *in, bool fused, bool relu, bool acc,
                         const bn_res *a, const char *tag)
{
    size_t n = k->count, c = (size_t)k->c;
    bn_res ref = bn_res_make(k);
    float *dyp = bn_masked(k, in->dy, a->y, relu);
    bn_cpu_ref(k, in, dyp, &ref);
    for (size_t i = 0; i < n; i++) {
        float v = ref.y[i] + (fused ? in->r[i] : 0.0f);
        ref.y[i] = relu && !(v > 0) ? 0.0f : v;
        ref.dr[i] = fused ? (acc ? in->dr0[i] + dyp[i] : dyp[i]) : in->dr0[i];
    }
    double ty = k->bf16 ? 1e-2 : TOL;
    tt_ok(max_rel(a->y, ref.y, n) <= ty, "%s: y (rel %.2e <= %.0e)", tag, max_rel(a->y, ref.y, n),
          ty);
    double es = fmax(max_rel(a->rm, ref.rm, c),
                     fmax(max_rel(a->rv, ref.rv, c), max_rel(a->save, ref.save, 2 * c)));
    tt_ok(es <= TOL, "%s: running and saved statistics (rel %.2e)", tag, es);
    double eg = fmax(max_rel(a->dx, ref.dx, n),
                     fmax(max_rel(a->dg, ref.dg, c), max_rel(a->db, ref.db, c)));
    tt_ok(eg <= TOL, "%s: dx, dgamma, dbeta (rel %.2e)", tag, eg);
    tt_ok(memcmp(a->dr, ref.dr, n * 4) == 0, "%s: r's gradient %s", tag,
          !fused ? "untouched" : acc ? "+= the masked dy, bitwise" : "= the masked dy, bitwise");
    free(dyp);
    bn_res_free(&ref);
}

/* Fused against batchnorm_*_blocked and the add, relu and mask apart. */
static void bn_check_unfused(backend_t *g, const bn_case *k, const bn_in *in, bool relu,
                             const bn_res *a, const char *tag)
{
    bn_in apart = *in;
    float *dyp = bn_masked(k, in->dy, a->y, relu);
    apart.dy = dyp;
    bn_res u = bn_res_make(k);
    if (tt_ok(bn_gpu_run(g, k, &apart, false, false, false, &u) == 0, "%s: unfused runs", tag)) {
        bool same_y = true;
        for (size_t i = 0; i < k->count; i++) {
            float v = u.y[i] + in->r[i];
            v = relu && !(v > 0) ? 0.0f : v;
            if (k->bf16)
                v = tt_bf16_widen(tt_bf16_round(v));
            same_y = same_y && memcmp(&v, &a->y[i], 4) == 0;
        }
        size_t c = (size_t)k->c * 4, n = k->count * 4;
        tt_ok(same_y && !memcmp(u.rm, a->rm, c) && !memcmp(u.rv, a->rv, c) &&
                  !memcmp(u.save, a->save, 2 * c),
              "%s: forward bitwise = batchnorm, then add and relu", tag);
        tt_ok(!memcmp(u.dx, a->dx, n) && !memcmp(u.dg, a->dg, c) && !memcmp(u.db, a->db, c),
              "%s: backward bitwise = relu mask, then batchnorm's backward", tag);
    }
    free(dyp);
    bn_res_free(&u);
}

/* Inference (running statistics) with relu against the CPU's. */
static void bn_check_inference(backend_t *g, const bn_case *k, const bn_in *in, const char *tag)
{
    size_t n = k->count, c = (size_t)k->c;
    void *x = nhwc_upload(g, k, in->x, true), *y = g->alloc(g, n * 4);
    float *p = g->alloc(g, 4 * c * 4), *hy = malloc(n * 4);
    float *cx = cpu_be->alloc(cpu_be, n * 4), *cy = cpu_be->alloc(cpu_be, n * 4);
    float *rm = malloc(c * 4), *rv = malloc(c * 4);
    memcpy(rm, in->rm, c * 4), memcpy(rv, in->rv, c * 4), memcpy(cx, in->x, n * 4);
    g->upload(g, p, in->gamma, c * 4), g->upload(g, p + c, in->beta, c * 4);
    g->upload(g, p + 2 * c, in->rm, c * 4), g->upload(g, p + 3 * c, in->rv, c * 4);
    g->batchnorm_forward_blocked(g, k->n, k->c, k->hw, x, p, p + c, p + 2 * c, p + 3 * c, 0.1f,
                                 1e-5f, false, true, y, NULL, NULL);
    nhwc_download(g, k, y, true, hy);
    cpu_be->batchnorm_forward(cpu_be, k->n, k->c, k->hw, cx, in->gamma, in->beta, rm, rv, 0.1f,
                              1e-5f, false, true, cy, NULL, NULL);
    double ty = k->bf16 ? 1e-2 : TOL;
    tt_ok(max_rel(hy, cy, n) <= ty, "%s: inference y (rel %.2e)", tag, max_rel(hy, cy, n));
    g->free(g, x), g->free(g, y), g->free(g, p), cpu_be->free(cpu_be, cx);
    cpu_be->free(cpu_be, cy), free(hy), free(rm), free(rv);
}

static bn_in bn_in_make(const bn_case *k)
{
    size_t n = k->count, c = (size_t)k->c;
    bn_in in = {rand_buf(n, -2, 3), rand_buf(n, -1, 1), rand_buf(n, -1, 1), rand_buf(n, -1, 1),
                rand_buf(c, 0.5f, 1.5f), rand_buf(c, -0.5f, 0.5f), rand_buf(c, -0.1f, 0.1f),
                rand_buf(c, 0.9f, 1.1f)};
    for (size_t i = 0; k->bf16 && i < n; i++) { /* what the GPU will hold */
        in.x[i] = tt_bf16_widen(tt_bf16_round(in.x[i]));
        in.r[i] = tt_bf16_widen(tt_bf16_round(in.r[i]));
    }
    return in;
}

static void bn_in_free(bn_in *in)
{
    free(in->x), free(in->r), free(in->dy), free(in->dr0), free(in->gamma), free(in->beta);
    free(in->rm), free(in->rv);
}

static void test_bn_nhwc_case(backend_t *g, const bn_case *k)
{
    bn_in in = bn_in_make(k);
    for (int v = 0; v < 4; v++) {
        bool fused = v >= 2, relu = v % 2 == 1, acc = v == 3;
        char tag[160];
        snprintf(tag, sizeof(tag), "NHWC batchnorm%s%s [%d, %d, %d] %s%s",
                 fused ? " + add" : "", relu ? " + relu" : "", k->n, k->c, k->hw,
                 k->bf16 ? "bf16" : "fp32", fused ? (acc ? ", dr +=" : ", dr =") : "");
        bn_res a = bn_res_make(k), b = bn_res_make(k);
        if (tt_ok(bn_gpu_run(g, k, &in, fused, relu, acc, &a) == 0 &&
                      bn_gpu_run(g, k, &in, fused, relu, acc, &b) == 0,
                  "%s: runs twice", tag)) {
            tt_ok(bn_res_same(k, &a, &b), "%s: the same bits both times", tag);
            bn_check_ref(k, &in, fused, relu, acc, &a, tag);
            if (fused)
                bn_check_unfused(g, k, &in, relu, &a, tag);
        }
        bn_res_free(&a);
        bn_res_free(&b);
    }
    char tag[96];
    snprintf(tag, sizeof(tag), "NHWC batchnorm [%d, %d, %d] %s", k->n, k->c, k->hw,
             k->bf16 ? "bf16" : "fp32");
    bn_check_inference(g, k, &in, tag);
    bn_in_free(&in);
}

/* One partial, several, the most (512 of 256 rows), many channels, C = 48. */
static void test_bn_nhwc(backend_t *g)
{
    int shapes[][3] = {{4, 16, 49}, {16, 64, 196}, {128, 16, 1024}, {2, 2048, 7}, {3, 48, 5}};
    bool nhwc = g->blocked_nhwc, bf16 = g->blocked_bf16;
    for (int h = 0; h < 2; h++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            bn_case k = {shapes[s][0], shapes[s][1], shapes[s][2], 0, h == 1};
            k.count = (size_t)k.n * k.c * k.hw;
            g->blocked_nhwc = true;
            g->blocked_bf16 = k.bf16;
            test_bn_nhwc_case(g, &k);
        }
    g->blocked_nhwc = nhwc;
    g->blocked_bf16 = bf16;
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
    {   /* LARS's batch of norms: each range as sumsq gives it, and an empty one 0 */
        const float *xs[3] = {y.gpu, y.gpu + n / 3, y.gpu};
        size_t counts[3] = {n / 3, n - n / 3, 0};
        double each[3] = {-1.0, -1.0, -1.0};
        g->sumsq_each(g, 3, xs, counts, each);
        double want0 = g->sumsq(g, n / 3, y.gpu), want1 = g->sumsq(g, n - n / 3, y.gpu + n / 3);
        tt_ok(each[0] == want0 && each[1] == want1 && each[2] == 0.0,
              "sumsq_each: every range as sumsq gives it (%.17g %.17g %.17g)", each[0], each[1],
              each[2]);
    }
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

/* ---- the optimizer's norms: sumsq and sumsq_each in partials
 * (sumsq_plan.h) ---- */

/* The float64 sum of x[i]^2 (each square exact in double), compensated
 * (Neumaier): within a few ulps of the exact sum at any n */
static double sumsq_ref(const float *x, size_t n)
{
    double s = 0.0, c = 0.0;
    for (size_t i = 0; i < n; i++) {
        double v = (double)x[i] * x[i], t = s + v;
        c += fabs(s) >= v ? (s - t) + v : (v - t) + s;
        s = t;
    }
    return s + c;
}

/* The relative error bound of the GPU's order on n squares (nonnegative
 * terms): a term goes through at most a thread's additions, its block's
 * tree, the merge thread's additions and its tree, each rounding by at
 * most 2^-53; 3 more for the reference's own error */
static double sumsq_bound(size_t n)
{
    tt_sumsq_range a = tt_sumsq_plan(NULL, n);
    int depth = 3 + (int)((a.chunk + TT_SUMSQ_THREADS - 1) / TT_SUMSQ_THREADS) +
                (a.parts + TT_SUMSQ_THREADS - 1) / TT_SUMSQ_THREADS;
    for (int m = TT_SUMSQ_THREADS; m > 1; m /= 2)
        depth += 2;
    return 1.01 * depth * ldexp(1.0, -53);
}

/* k / 64 for k in -63..63: squares in steps of 2^-12 below 1, whose sums
 * of up to 2^24 terms are exact in double in any order (36 bits), so that
 * an element missed or read twice shows; else uniform in [-1, 1] */
static void sumsq_values(float *h, size_t count, bool exact)
{
    for (size_t i = 0; i < count; i++)
        h[i] = exact ? (float)((int)uniform(0, 127) - 63) / 64.0f : uniform(-1, 1);
}

/* The ranges of one buffer d (on the GPU) / h (its host copy): counts
 * from 1 to 10 M and empty ones, each at an odd offset after the last */
#define SUMSQ_RANGES 16
static const size_t sumsq_counts[SUMSQ_RANGES] = {1,    0,    2,       255,     256,     257,
                                                  0,    4095, 4096,    4097,    100003,  1048583,
                                                  0,    1,    10000019, 0};

/* sumsq_each of every range twice and sumsq of each: the same bits; equal
 * to float64 where exact, else within sumsq_bound; an empty range 0 */
static void sumsq_case(backend_t *g, const float *d, const float *h, const size_t *off,
                       bool exact)
{
    const float *xs[SUMSQ_RANGES];
    double each[SUMSQ_RANGES], again[SUMSQ_RANGES], alone[SUMSQ_RANGES];
    int bad = 0, differ = 0;
    for (int i = 0; i < SUMSQ_RANGES; i++)
        xs[i] = d + off[i];
    g->sumsq_each(g, SUMSQ_RANGES, xs, sumsq_counts, each);
    g->sumsq_each(g, SUMSQ_RANGES, xs, sumsq_counts, again);
    for (int i = 0; i < SUMSQ_RANGES; i++) {
        size_t n = sumsq_counts[i];
        double want = sumsq_ref(h + off[i], n);
        alone[i] = g->sumsq(g, n, xs[i]);
        bool near = exact ? each[i] == want : fabs(each[i] - want) <= sumsq_bound(n) * want;
        bad += !near || (n == 0 && each[i] != 0.0);
        if (!near)
            tt_diag("range %d of %zu: %.17g, float64 %.17g", i, n, each[i], want);
    }
    differ = memcmp(each, again, sizeof(each)) != 0 || memcmp(each, alone, sizeof(each)) != 0;
    tt_err err = {0};
    bool ok = backend_cuda_check(g, &err) == 0;
    tt_ok(ok && bad == 0 && !differ,
          "sumsq_each of %d ranges of 0 to 10,000,019 floats (%s): %s float64 (%d not), twice "
          "and as sumsq alone the same bits (%s) %s", SUMSQ_RANGES,
          exact ? "sums exact in any order" : "uniform, sums that round",
          exact ? "equal to" : "within the order's bound of", bad, differ ? "differ" : "same",
          err.msg);
}

/* More ranges than the scratch holds the partials of (tt_sumsq_group: in
 * groups), all reading the same 2048 partials' worth of d: each equal to
 * sumsq of that range alone, and to float64 */
static void sumsq_groups(backend_t *g, const float *d, const float *h)
{
    enum { N = 513 };
    size_t n = (size_t)TT_SUMSQ_MIN_CHUNK * TT_SUMSQ_MAX_PARTS + 1;
    const float **xs = malloc(N * sizeof(*xs));
    size_t *counts = malloc(N * sizeof(*counts));
    double *each = malloc(N * sizeof(*each));
    tt_sumsq_range *r = malloc(N * sizeof(*r));
    for (int i = 0; i < N; i++)
        xs[i] = d, counts[i] = n, each[i] = -1.0;
    int first = tt_sumsq_group(N, xs, counts, (int)TT_SUMSQ_SCRATCH_DOUBLES, r);
    g->sumsq_each(g, N, xs, counts, each);
    double alone = g->sumsq(g, n, d), want = sumsq_ref(h, n);
    int same = 0;
    for (int i = 0; i < N; i++)
        same += memcmp(&each[i], &alone, sizeof(alone)) == 0;
    tt_err err = {0};
    bool ok = backend_cuda_check(g, &err) == 0;
    tt_ok(ok && first < N && same == N && alone == want,
          "sumsq_each of %d ranges of %zu floats (%d partials each: the first group %d "
          "ranges): every one sumsq's bits (%d of %d), equal to float64 %s", N, n,
          TT_SUMSQ_MAX_PARTS, first, same, N, err.msg);
    free(xs), free(counts), free(each), free(r);
}

/* The host's time of sumsq of n floats at d, best of 5 (a diagnostic for
 * the note, not a check: the old single block was latency-bound) */
static void sumsq_time(backend_t *g, const float *d, size_t n)
{
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        g->sumsq(g, n, d);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) * 1e-3;
        best = us < best ? us : best;
    }
    tt_diag("sumsq of %zu floats: %.1f us on the host's clock (launches, read back and wait)",
            n, best);
}

/* LARS's and clip_global_norm's norms on g (its own stream) */
static void test_sumsq(backend_t *g)
{
    size_t off[SUMSQ_RANGES], total = 0;
    for (int i = 0; i < SUMSQ_RANGES; i++) {
        off[i] = total + 1;
        total = off[i] + sumsq_counts[i];
    }
    float *h = malloc(total * sizeof(float)), *d = g->alloc(g, total * sizeof(float));
    sumsq_values(h, total, true);
    g->upload(g, d, h, total * sizeof(float));
    sumsq_case(g, d, h, off, true);
    sumsq_groups(g, d, h);
    sumsq_values(h, total, false);
    g->upload(g, d, h, total * sizeof(float));
    sumsq_case(g, d, h, off, false);
    sumsq_time(g, d, total);
    g->free(g, d);
    free(h);
}

/* ---- bf16 NHWC: the blocked layout of the bf16 backend ---- */

/* count random bf16 values (as uint16) and their floats */
static uint16_t *bf16_rand(size_t count, float lo, float hi, float **as_float)
{
    uint16_t *h = malloc((count ? count : 1) * sizeof(uint16_t));
    *as_float = malloc((count ? count : 1) * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        h[i] = tt_bf16_round(uniform(lo, hi));
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&(*as_float)[i], &u, 4);
    }
    return h;
}

static void *put(backend_t *b, const void *host, size_t bytes)
{
    void *d = b->alloc(b, bytes ? bytes : 1);
    if (host != NULL)
        b->upload(b, d, host, bytes);
    return d;
}

/* The GPU's and the CPU's bytes equal (and no GPU error) */
static void same_bytes(backend_t *g, const void *gd, const void *cd, size_t bytes,
                       const char *what)
{
    unsigned char *a = malloc(bytes ? bytes : 1), *b = malloc(bytes ? bytes : 1);
    g->download(g, a, gd, bytes);
    cpu_be->download(cpu_be, b, cd, bytes);
    tt_err err = {0};
    bool ok = backend_cuda_check(g, &err) == 0 && memcmp(a, b, bytes) == 0;
    tt_ok(ok, "NHWC %s: the CPU's blocked bits %s", what, err.msg);
    free(a);
    free(b);
}

/* relu, relu backward, add (+relu), global average pooling and back; cn:
 * a CPU backend whose blocked operations read NHWC in g's type (bf16, or
 * float32 where g's blocked_bf16 is off) */
static void test_nhwc_elementwise(backend_t *g, backend_t *cn)
{
    int n = 3, c = 48, hw = 49;
    size_t count = (size_t)n * c * hw, es = g->blocked_bf16 ? 2 : 4;
    float *fa, *fb;
    uint16_t *ha = bf16_rand(count, -1, 1, &fa), *hb = bf16_rand(count, -1, 1, &fb);
    const void *a = es == 2 ? (const void *)ha : fa, *b = es == 2 ? (const void *)hb : fb;
    float *hdy = rand_buf(count, -1, 1), *hg = rand_buf((size_t)n * c, -1, 1);
    void *ga = put(g, a, count * es), *gb = put(g, b, count * es), *gy = put(g, NULL, count * 4);
    void *ca = put(cn, a, count * es), *cb = put(cn, b, count * es), *cy = put(cn, NULL, count * 4);
    float *gdy = put(g, hdy, count * 4), *cdy = put(cn, hdy, count * 4);
    g->relu_forward_blocked(g, count, ga, gy);
    cn->relu_forward_blocked(cn, count, ca, cy);
    same_bytes(g, gy, cy, count * es, es == 2 ? "relu forward (bf16)" : "relu forward (float32)");
    g->relu_backward_blocked(g, count, ga, gdy, gy);
    cn->relu_backward_blocked(cn, count, ca, cdy, cy);
    same_bytes(g, gy, cy, count * 4, "relu backward (float32 gradient)");
    for (int relu = 0; relu < 2; relu++) {
        g->add_blocked(g, count, ga, gb, relu, gy);
        cn->add_blocked(cn, count, ca, cb, relu, cy);
        same_bytes(g, gy, cy, count * es, relu ? "add + relu" : "add");
    }
    g->global_avgpool_blocked_forward(g, n, c, hw, ga, gy);
    cn->global_avgpool_blocked_forward(cn, n, c, hw, ca, cy);
    same_bytes(g, gy, cy, (size_t)n * c * 4, "global average pooling");
    float *gg = put(g, hg, (size_t)n * c * 4), *cg = put(cn, hg, (size_t)n * c * 4);
    g->global_avgpool_blocked_backward(g, n, c, hw, gg, gy);
    cn->global_avgpool_blocked_backward(cn, n, c, hw, cg, cy);
    same_bytes(g, gy, cy, count * 4, "global average pooling backward");
    void *gp[] = {ga, gb, gy, gdy, gg}, *cp[] = {ca, cb, cy, cdy, cg};
    for (int i = 0; i < 5; i++) {
        g->free(g, gp[i]);
        cn->free(cn, cp[i]);
    }
    free(ha), free(hb), free(fa), free(fb), free(hdy), free(hg);
}

/* max and average pooling from an NHWC x in g's type (bf16, or float32
 * where g's blocked_bf16 is off), to NHWC in that type or NCHW float32 */
static void test_nhwc_pool(backend_t *g, backend_t *cn)
{
    size_t es = g->blocked_bf16 ? 2 : 4;
    int shapes[][5] = {{16, 16, 3, 2, 1}, {9, 7, 3, 1, 1}, {8, 8, 2, 2, 0}};
    for (int s = 0; s < 3; s++)
        for (int yb = 0; yb < 2; yb++) {
            window_desc d = {2, 32, shapes[s][0], shapes[s][1], 32, shapes[s][2], shapes[s][3],
                             shapes[s][4], 0, 0, true, yb == 1};
            d.oh = window_out_size(d.h, d.k, d.stride, d.pad);
            d.ow = window_out_size(d.w, d.k, d.stride, d.pad);
            size_t xn = (size_t)d.n * d.c * d.h * d.w, yn = (size_t)d.n * d.c * d.oh * d.ow;
            size_t ybytes = yn * (yb ? es : 4);
            float *fx, *hdy = rand_buf(yn, -1, 1);
            uint16_t *hx = bf16_rand(xn, -1, 1, &fx);
            const void *x = es == 2 ? (const void *)hx : fx;
            void *gx = put(g, x, xn * es), *cx = put(cn, x, xn * es);
            void *gy = put(g, NULL, yn * 4), *cy = put(cn, NULL, yn * 4);
            int32_t *gm = put(g, NULL, yn * 4), *cm = put(cn, NULL, yn * 4);
            float *gdy = put(g, hdy, yn * 4), *cdy = put(cn, hdy, yn * 4);
            float *gdx = put(g, NULL, xn * 4), *cdx = put(cn, NULL, xn * 4);
            char what[160];
            snprintf(what, sizeof(what), "pool %dx%d k%d s%d p%d to %s", d.h, d.w, d.k, d.stride,
                     d.pad, !yb ? "NCHW float32" : es == 2 ? "NHWC bf16" : "NHWC float32");
            g->maxpool_forward(g, &d, gx, gy, gm);
            cn->maxpool_forward(cn, &d, cx, cy, cm);
            same_bytes(g, gy, cy, ybytes, what);
            g->maxpool_backward(g, &d, gdy, gm, gdx);
            cn->maxpool_backward(cn, &d, cdy, cm, cdx);
            same_bytes(g, gdx, cdx, xn * 4, "maxpool backward");
            g->avgpool_forward(g, &d, gx, gy);
            cn->avgpool_forward(cn, &d, cx, cy);
            same_bytes(g, gy, cy, ybytes, "avgpool forward");
            g->avgpool_backward(g, &d, gdy, gdx);
            cn->avgpool_backward(cn, &d, cdy, cdx);
            same_bytes(g, gdx, cdx, xn * 4, "avgpool backward");
            void *gp[] = {gx, gy, gm, gdy, gdx}, *cp[] = {cx, cy, cm, cdy, cdx};
            for (int i = 0; i < 5; i++) {
                g->free(g, gp[i]);
                cn->free(cn, cp[i]);
            }
            free(hx), free(fx), free(hdy);
        }
}

/* The GPU's bf16 gradient equals the CPU's float32 one rounded to nearest
 * even, element by element (precision.h's rule: computed in float32,
 * rounded once at the store) */
static void rounded_bytes(backend_t *g, const void *gd, const void *cd, size_t count,
                          const char *what)
{
    uint16_t *a = malloc(count * 2 + 2);
    float *b = malloc(count * 4 + 4);
    g->download(g, a, gd, count * 2);
    cpu_be->download(cpu_be, b, cd, count * 4);
    tt_err err = {0};
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += a[i] != tt_bf16_round(b[i]);
    tt_ok(backend_cuda_check(g, &err) == 0 && bad == 0,
          "bf16 gradients, %s: the CPU's float32 gradient rounded (%zu differ) %s", what, bad,
          err.msg);
    free(a);
    free(b);
}

/* The backward kernels with bf16 gradients (blocked_bf16_grads, turned on
 * here by hand: the backend keeps it off until its batchnorm and conv
 * backward read bf16) against the CPU's float32 path rounded: relu,
 * global average pooling, max and average pooling to either y layout. */
static void test_nhwc_grad16(backend_t *g, backend_t *cn)
{
    int n = 3, c = 48, hw = 49;
    size_t count = (size_t)n * c * hw;
    float *fy, *fdy, *hg = rand_buf((size_t)n * c, -1, 1);
    uint16_t *hy = bf16_rand(count, -1, 1, &fy), *hdy = bf16_rand(count, -1, 1, &fdy);
    g->blocked_bf16_grads = true;
    void *gy = put(g, hy, count * 2), *gdy = put(g, hdy, count * 2), *gdx = put(g, NULL, count * 2);
    void *cy = put(cn, hy, count * 2), *cdy = put(cn, fdy, count * 4);
    void *cdx = put(cn, NULL, count * 4);
    g->relu_backward_blocked(g, count, gy, gdy, gdx);
    cn->relu_backward_blocked(cn, count, cy, cdy, cdx);
    rounded_bytes(g, gdx, cdx, count, "relu backward");
    float *gg = put(g, hg, (size_t)n * c * 4), *cg = put(cn, hg, (size_t)n * c * 4);
    g->global_avgpool_blocked_backward(g, n, c, hw, gg, gdx);
    cn->global_avgpool_blocked_backward(cn, n, c, hw, cg, cdx);
    rounded_bytes(g, gdx, cdx, count, "global average pooling backward");
    void *gp[] = {gy, gdy, gdx, gg}, *cp[] = {cy, cdy, cdx, cg};
    for (int i = 0; i < 4; i++) {
        g->free(g, gp[i]);
        cn->free(cn, cp[i]);
    }
    for (int yb = 0; yb < 2; yb++) {
        window_desc d = {2, 32, 9, 7, 32, 3, 2, 1, 0, 0, true, yb == 1};
        d.oh = window_out_size(d.h, d.k, d.stride, d.pad);
        d.ow = window_out_size(d.w, d.k, d.stride, d.pad);
        size_t xn = (size_t)d.n * d.c * d.h * d.w, yn = (size_t)d.n * d.c * d.oh * d.ow;
        float *fx, *fd;
        uint16_t *hx = bf16_rand(xn, -1, 1, &fx), *hd = bf16_rand(yn, -1, 1, &fd);
        void *gx = put(g, hx, xn * 2), *cx = put(cn, hx, xn * 2);
        void *gyy = put(g, NULL, yn * 4), *cyy = put(cn, NULL, yn * 4);
        int32_t *gm = put(g, NULL, yn * 4), *cm = put(cn, NULL, yn * 4);
        /* dy: bf16 where y is blocked, else an NCHW output's float32 */
        void *gd = yb ? put(g, hd, yn * 2) : put(g, fd, yn * 4), *cd = put(cn, fd, yn * 4);
        void *gx16 = put(g, NULL, xn * 2), *cx32 = put(cn, NULL, xn * 4);
        g->maxpool_forward(g, &d, gx, gyy, gm);
        cn->maxpool_forward(cn, &d, cx, cyy, cm);
        g->maxpool_backward(g, &d, gd, gm, gx16);
        cn->maxpool_backward(cn, &d, cd, cm, cx32);
        rounded_bytes(g, gx16, cx32, xn, yb ? "maxpool backward, bf16 dy" : "maxpool backward, "
                                                                             "float32 NCHW dy");
        g->avgpool_backward(g, &d, gd, gx16);
        cn->avgpool_backward(cn, &d, cd, cx32);
        rounded_bytes(g, gx16, cx32, xn, yb ? "avgpool backward, bf16 dy" : "avgpool backward, "
                                                                             "float32 NCHW dy");
        void *gq[] = {gx, gyy, gm, gd, gx16}, *cq[] = {cx, cyy, cm, cd, cx32};
        for (int i = 0; i < 5; i++) {
            g->free(g, gq[i]);
            cn->free(cn, cq[i]);
        }
        free(hx), free(fx), free(hd), free(fd);
    }
    g->blocked_bf16_grads = false;
    free(hy), free(fy), free(hdy), free(fdy), free(hg);
}

/* The GPU's bf16 gradient d16 is its float32 path's d32 rounded, and the
 * parameter gradients p16, p32 (pn floats) are the same bits */
static void gpu_rounded(backend_t *g, const void *d16, const void *d32, size_t count,
                        const void *p16, const void *p32, size_t pn, const char *what)
{
    uint16_t *a = malloc(count * 2 + 2);
    float *b = malloc(count * 4 + 4), *pa = malloc(pn * 4 + 4), *pb = malloc(pn * 4 + 4);
    g->download(g, a, d16, count * 2);
    g->download(g, b, d32, count * 4);
    g->download(g, pa, p16, pn * 4);
    g->download(g, pb, p32, pn * 4);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += a[i] != tt_bf16_round(b[i]);
    tt_err err = {0};
    tt_ok(backend_cuda_check(g, &err) == 0 && bad == 0 && memcmp(pa, pb, pn * 4) == 0,
          "bf16 gradients, %s: the float32-gradient path's dx rounded (%zu differ), the same "
          "parameter gradients %s", what, bad, err.msg);
    free(a), free(b), free(pa), free(pb);
}

/* NHWC batchnorm backward (alone, and fused with the add: dr = and dr +=)
 * and conv2d backward with blocked sides, with bf16 gradients against the
 * same backend's float32-gradient path on the same values (blocked_bf16_grads
 * turned off and on): precision.h's rule, one rounding at each store. */
static void test_bn_conv_grad16(backend_t *g)
{
    int n = 4, c = 32, hw = 49;
    size_t count = (size_t)n * c * hw;
    float *fx, *fdy, *fr, *hp = rand_buf(4 * (size_t)c, 0.5f, 1.5f);
    uint16_t *hx = bf16_rand(count, -2, 3, &fx), *hdy = bf16_rand(count, -1, 1, &fdy);
    uint16_t *hr = bf16_rand(count, -1, 1, &fr);
    void *x = put(g, hx, count * 2), *y = put(g, NULL, count * 2);
    float *p = put(g, hp, 4 * (size_t)c * 4), *save = put(g, NULL, 2 * (size_t)c * 4);
    g->batchnorm_forward_blocked(g, n, c, hw, x, p, p + c, p + 2 * c, p + 3 * c, 0.1f, 1e-5f,
                                 true, true, y, save, save + c);
    for (int v = 0; v < 4; v++) { /* plain, relu, fused dr =, fused dr += */
        bool relu = v >= 1, fused = v >= 2, acc = v == 3;
        void *dx[2], *dr[2], *pg[2];
        for (int k = 0; k < 2; k++) {
            g->blocked_bf16_grads = k == 0;
            size_t e = k == 0 ? 2 : 4;
            void *dy = k == 0 ? put(g, hdy, count * 2) : put(g, fdy, count * 4);
            dx[k] = put(g, NULL, count * e);
            dr[k] = k == 0 ? put(g, hr, count * 2) : put(g, fr, count * 4);
            pg[k] = put(g, NULL, 2 * (size_t)c * 4);
            float *dg = pg[k];
            if (fused)
                g->batchnorm_add_backward_blocked(g, n, c, hw, x, p, save, save + c, y, relu, dy,
                                                  dx[k], dg, dg + c, dr[k], acc);
            else
                g->batchnorm_backward_blocked(g, n, c, hw, x, p, save, save + c, y, relu, dy,
                                              dx[k], dg, dg + c);
            g->free(g, dy);
        }
        const char *what[] = {"NHWC batchnorm backward", "NHWC batchnorm + relu backward",
                              "NHWC batchnorm + add + relu backward (dr =)",
                              "NHWC batchnorm + add + relu backward (dr +=)"};
        gpu_rounded(g, dx[0], dx[1], count, pg[0], pg[1], 2 * (size_t)c, what[v]);
        if (fused)
            gpu_rounded(g, dr[0], dr[1], count, pg[0], pg[1], 0, what[v]);
        for (int k = 0; k < 2; k++)
            g->free(g, dx[k]), g->free(g, dr[k]), g->free(g, pg[k]);
    }
    /* conv2d 32 -> 32, 3x3, blocked x and y, relu and bias */
    window_desc d = {n, c, 7, 7, c, 3, 1, 1, 7, 7, true, true};
    size_t nw = (size_t)c * c * 9;
    float *hw_ = rand_buf(nw, -0.2f, 0.2f);
    float *w = put(g, hw_, nw * 4);
    void *ws = put(g, NULL, (size_t)64 << 20);
    void *dx[2], *dw[2];
    for (int k = 0; k < 2; k++) {
        g->blocked_bf16_grads = k == 0;
        void *dy = k == 0 ? put(g, hdy, count * 2) : put(g, fdy, count * 4);
        dx[k] = put(g, NULL, count * (k == 0 ? 2 : 4));
        dw[k] = put(g, NULL, (nw + (size_t)c) * 4);
        g->conv_backward(g, &d, x, w, y, true, dy, dx[k], dw[k], (float *)dw[k] + nw, ws);
        g->free(g, dy);
    }
    gpu_rounded(g, dx[0], dx[1], count, dw[0], dw[1], nw + (size_t)c,
                "NHWC conv2d backward with relu and bias");
    for (int k = 0; k < 2; k++)
        g->free(g, dx[k]), g->free(g, dw[k]);
    g->free(g, w), g->free(g, ws), g->free(g, x), g->free(g, y), g->free(g, p);
    g->free(g, save);
    g->blocked_bf16_grads = false;
    free(fx), free(fdy), free(fr), free(hp), free(hx), free(hdy), free(hr), free(hw_);
}

/* ---- the conv bias gradient: per-channel sums of dy [n, c, inner] (NHWC
 * [rows, c]: inner 1; NCHW [n, c, oh * ow]) ---- */

/* count bf16-exact gradients as floats (and bf16 in *h16): with exact,
 * k / 64 for k in -63..63, whose sums of up to 2^17 terms are all exact in
 * float32 (|sum| < 2^17 in steps of 2^-6: 23 bits), so that any order
 * gives the float64 sum and an element missed or read twice shows; else
 * uniform in [-1, 1] rounded to bf16 (sums round: the order shows in the
 * bits). */
static float *colsum_grads(size_t count, bool exact, uint16_t **h16)
{
    float *f = NULL;
    *h16 = bf16_rand(count, -1, 1, &f);
    for (size_t i = 0; exact && i < count; i++) {
        f[i] = (float)((int)uniform(0, 127) - 63) / 64.0f;
        (*h16)[i] = tt_bf16_round(f[i]);
    }
    return f;
}

/* The channel sums of dy [n, c, inner] in float64, and of |dy| */
static void colsum_ref(const float *dy, int n, int c, int inner, double *sum, double *abs_sum)
{
    for (int ch = 0; ch < c; ch++)
        sum[ch] = abs_sum[ch] = 0;
    for (size_t i = 0; i < (size_t)n; i++)
        for (int ch = 0; ch < c; ch++)
            for (size_t p = 0; p < (size_t)inner; p++) {
                float v = dy[(i * c + ch) * inner + p];
                sum[ch] += v;
                abs_sum[ch] += fabs(v);
            }
}

/* The float32 error bound of the sums' order (cuda_bn_nhwc.h) in units of
 * Sum |dy| * 2^-24: a thread's ceil(rows / ty) additions, the tree's
 * levels, and the double total's rounding to float. */
static int colsum_bound(int n, int c, int inner)
{
    tt_colsum_grid k = tt_colsum_plan(n, c, inner);
    int ty = tt_colsum_ty(k), b = (k.g.rows + ty - 1) / ty + 1;
    for (int m = ty; m > 1; m = tt_colsum_half(m))
        b++;
    return b;
}

/* got[c] against the float64 sums: exactly equal where exact, else within
 * colsum_bound; the number of channels that are not */
static int colsum_misses(const float *got, int n, int c, int inner, const double *sum,
                         const double *abs_sum, bool exact)
{
    int bad = 0;
    double u = ldexp(1.0, -24) * 1.01 * colsum_bound(n, c, inner);
    for (int ch = 0; ch < c; ch++)
        bad += exact ? (double)got[ch] != sum[ch] : fabs(got[ch] - sum[ch]) > u * abs_sum[ch];
    return bad;
}

#ifdef HAVE_CUDA
/* cuda_channel_sum as the conv calls it, on [n, c, inner]: float32 twice,
 * then bf16 of the same values: against float64, and the same bits all
 * three times (the order is the shape's, not the type's). */
static void channel_sum_case(backend_t *g, const int *s, bool exact)
{
    int n = s[0], c = s[1], inner = s[2];
    size_t count = (size_t)n * c * inner;
    uint16_t *h16;
    float *hf = colsum_grads(count, exact, &h16), *got = malloc(3 * (size_t)c * 4);
    double *sum = malloc((size_t)c * 8), *abs_sum = malloc((size_t)c * 8);
    colsum_ref(hf, n, c, inner, sum, abs_sum);
    void *df = put(g, hf, count * 4), *d16 = put(g, h16, count * 2);
    float *out = put(g, NULL, 3 * (size_t)c * 4);
    cuda_impl *ci = cuda_of(g);
    int rc = cuda_channel_sum(ci, false, n, c, inner, df, out);
    rc |= cuda_channel_sum(ci, false, n, c, inner, df, out + c);
    rc |= cuda_channel_sum(ci, true, n, c, inner, d16, out + 2 * c);
    g->download(g, got, out, 3 * (size_t)c * 4);
    tt_err err = {0};
    bool ok = rc == 0 && backend_cuda_check(g, &err) == 0;
    int bad = colsum_misses(got, n, c, inner, sum, abs_sum, exact);
    tt_ok(ok && bad == 0 && memcmp(got, got + c, (size_t)c * 4) == 0 &&
              memcmp(got, got + 2 * c, (size_t)c * 4) == 0,
          "conv bias gradient of [%d, %d, %d] (%s) in %d partials, %s: %s float64 (%d "
          "channels not), twice and from bf16 the same bits %s", n, c, inner,
          inner == 1 ? "NHWC" : "NCHW", tt_colsum_plan(n, c, inner).g.g,
          exact ? "sums exact in any order" : "sums that round",
          exact ? "equal to" : "within the order's bound of", bad, err.msg);
    g->free(g, df), g->free(g, d16), g->free(g, out);
    free(hf), free(h16), free(got), free(sum), free(abs_sum);
}
#endif

/* The channel sums themselves (g: a bf16 backend, whose stream they run
 * on), [n, c, inner]: LeNet's at batch 128, NHWC ([n * oh * ow, f]) and
 * NCHW, and larger ones, a channel past a 256-channel tile, and past the
 * batchnorm's scratch (one partial, straight into db). */
static void test_channel_sums(backend_t *g)
{
#ifdef HAVE_CUDA
    int shapes[][3] = {{12800, 16, 1}, {100352, 6, 1}, {100352, 16, 1}, {128, 6, 784},
                       {128, 16, 100}, {73728, 6, 1},  {1000, 257, 1},  {100, 16, 1},
                       {3, 5, 7},      {3, TT_BN_MAX_CHANNELS + 1, 1}};
    for (int s = 0; s < 10; s++)
        channel_sum_case(g, shapes[s], true);
    for (int s = 0; s < 7; s++)
        channel_sum_case(g, shapes[s], false);
#else
    tt_skip("conv bias gradient: channel sums (built without CUDA)");
#endif
}

/* The bias gradient of conv_backward on g as it is (bf16 with or without
 * bf16 gradients, float32 NHWC, or NCHW): LeNet's conv1 and conv0 at batch
 * 128, y blocked (NHWC; conv0 with 16 filters there, as only whole blocks
 * of 16 are blocked) where blocked, else NCHW; exact sums, twice the same
 * bits */
static void test_conv_bias(backend_t *g, const char *tag, bool blocked)
{
    window_desc ds[] = {{128, 6, 14, 14, 16, 5, 1, 0, 10, 10, false, blocked},
                        {128, 1, 28, 28, blocked ? 16 : 6, 5, 1, 2, 28, 28, false, blocked}};
    bool g16 = blocked && g->blocked_bf16 && g->blocked_bf16_grads;
    for (int s = 0; s < 2; s++) {
        window_desc d = ds[s];
        int n = blocked ? d.n * d.oh * d.ow : d.n, c = d.f, inner = blocked ? 1 : d.oh * d.ow;
        size_t count = (size_t)d.n * d.oh * d.ow * c;
        uint16_t *h16;
        float *hf = colsum_grads(count, true, &h16), got[32];
        double sum[16], abs_sum[16];
        colsum_ref(hf, n, c, inner, sum, abs_sum);
        void *dy = g16 ? put(g, h16, count * 2) : put(g, hf, count * 4);
        float *db = put(g, NULL, 2 * (size_t)c * 4);
        g->conv_backward(g, &d, NULL, NULL, NULL, false, dy, NULL, NULL, db, NULL);
        g->conv_backward(g, &d, NULL, NULL, NULL, false, dy, NULL, NULL, db + c, NULL);
        g->download(g, got, db, 2 * (size_t)c * 4);
        tt_err err = {0};
        bool ok = backend_cuda_check(g, &err) == 0;
        int bad = colsum_misses(got, n, c, inner, sum, abs_sum, true);
        tt_ok(ok && bad == 0 && memcmp(got, got + c, (size_t)c * 4) == 0,
              "%s %s conv backward [%d,%d,%d,%d] f%d, %s gradients: the bias gradient equal "
              "to float64 (sums exact in any order; %d channels not), twice the same bits %s",
              tag, blocked ? "NHWC" : "NCHW", d.n, d.c, d.h, d.w, d.f,
              g16 ? "bf16" : "float32", bad, err.msg);
        g->free(g, dy), g->free(g, db);
        free(hf), free(h16);
    }
}

/* A GPU tensor in bf16 NHWC (bf16) or float32 NHWC / NCHW, read into NCHW
 * floats */
static float *read_nchw(backend_t *g, const void *gd, int n, int c, int hw, bool nhwc, bool bf16)
{
    size_t count = (size_t)n * c * hw;
    unsigned char *raw = malloc(count * 4);
    float *out = malloc(count * 4);
    g->download(g, raw, gd, count * (bf16 ? 2 : 4));
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++) {
                size_t at = nhwc ? ((size_t)i * hw + p) * c + ch : ((size_t)i * c + ch) * hw + p;
                uint32_t u = 0;
                if (bf16)
                    u = (uint32_t)((uint16_t *)raw)[at] << 16;
                else
                    memcpy(&u, raw + at * 4, 4);
                memcpy(&out[((size_t)i * c + ch) * hw + p], &u, 4);
            }
    free(raw);
    return out;
}

static void rel_check(const float *got, const float *ref, size_t count, const char *what,
                      const window_desc *d, const char *tag, double tol)
{
    double e = tt_rel_err_f(got, ref, count);
    tt_ok(e <= tol, "%s NHWC conv %s [%d,%d,%d,%d] f%d k%d s%d (x %s, y %s): within %.0e of "
          "fp32 NCHW on the CPU (%.1e)", tag, what, d->n, d->c, d->h, d->w, d->f, d->k,
          d->stride, d->blocked_x ? "NHWC" : "NCHW", d->blocked_y ? "NHWC" : "NCHW", tol, e);
}

/* One conv shape: the CPU's fp32 NCHW against the GPU's NHWC, bf16 or
 * (blocked_bf16 off) float32; the inputs are bf16 values, exact in both */
static void nhwc_conv_case(backend_t *g, window_desc d, bool relu, const char *tag, double tol)
{
    bool bf16 = g->blocked_bf16;
    int hw = d.h * d.w, ohw = d.oh * d.ow;
    size_t xn = (size_t)d.n * d.c * hw, wn = (size_t)d.f * d.c * d.k * d.k;
    size_t yn = (size_t)d.n * d.f * ohw;
    float *fx, *hw_ = rand_buf(wn, -0.3f, 0.3f), *hb = rand_buf(d.f, -0.3f, 0.3f);
    float *hdy = rand_buf(yn, -1, 1);
    uint16_t *hx = bf16_rand(xn, -1, 1, &fx); /* NCHW order */
    float *hx_g = malloc(xn * 4), *hdy_g = malloc(yn * 4);
    uint16_t *hx16 = malloc(xn * 2);
    to_blocked16(fx, d.n, d.c, hw, true, hx16);
    if (d.blocked_x && !bf16)
        to_blocked(fx, d.n, d.c, hw, true, hx_g);
    else
        memcpy(hx_g, fx, xn * 4);
    if (d.blocked_y)
        to_blocked(hdy, d.n, d.f, ohw, true, hdy_g);
    else
        memcpy(hdy_g, hdy, yn * 4);
    window_desc cd = d;
    cd.blocked_x = cd.blocked_y = false;
    size_t cws = cpu_be->conv_workspace(cpu_be, &cd), gws = g->conv_workspace(g, &d);
    void *cw = put(cpu_be, NULL, cws), *gw = put(g, NULL, gws);
    float *cx = put(cpu_be, fx, xn * 4), *cwt = put(cpu_be, hw_, wn * 4);
    float *cb = put(cpu_be, hb, d.f * 4), *cy = put(cpu_be, NULL, yn * 4);
    float *cdy = put(cpu_be, hdy, yn * 4), *cdx = put(cpu_be, NULL, xn * 4);
    float *cdw = put(cpu_be, NULL, wn * 4), *cdb = put(cpu_be, NULL, d.f * 4);
    void *gx = d.blocked_x && bf16 ? put(g, hx16, xn * 2) : put(g, hx_g, xn * 4);
    float *gwt = put(g, hw_, wn * 4), *gb = put(g, hb, d.f * 4), *gy = put(g, NULL, yn * 4);
    float *gdy = put(g, hdy_g, yn * 4), *gdx = put(g, NULL, xn * 4);
    float *gdw = put(g, NULL, wn * 4), *gdb = put(g, NULL, d.f * 4);
    cpu_be->conv_forward(cpu_be, &cd, cx, cwt, cb, relu, cy, cw);
    g->conv_forward(g, &d, gx, gwt, gb, relu, gy, gw);
    float *y = read_nchw(g, gy, d.n, d.f, ohw, d.blocked_y, d.blocked_y && bf16);
    rel_check(y, cy, yn, "forward + bias", &d, tag, tol);
    /* backward without relu (the mask of a bf16 y differs near zero) */
    cpu_be->conv_backward(cpu_be, &cd, cx, cwt, cy, false, cdy, cdx, cdw, cdb, cw);
    g->conv_backward(g, &d, gx, gwt, gy, false, gdy, gdx, gdw, gdb, gw);
    float *dx = read_nchw(g, gdx, d.n, d.c, hw, d.blocked_x, false);
    float *dw = read_nchw(g, gdw, d.f, d.c, d.k * d.k, false, false);
    float *db = read_nchw(g, gdb, 1, d.f, 1, false, false);
    rel_check(dx, cdx, xn, "backward data", &d, tag, tol);
    rel_check(dw, cdw, wn, "backward filter", &d, tag, tol);
    rel_check(db, cdb, d.f, "bias gradient", &d, tag, tol);
    void *cp[] = {cw, cx, cwt, cb, cy, cdy, cdx, cdw, cdb};
    void *gp[] = {gw, gx, gwt, gb, gy, gdy, gdx, gdw, gdb};
    for (int i = 0; i < 9; i++) {
        cpu_be->free(cpu_be, cp[i]);
        g->free(g, gp[i]);
    }
    free(fx), free(hw_), free(hb), free(hdy), free(hx), free(hx_g), free(hdy_g), free(hx16);
    free(y), free(dx), free(dw), free(db);
}

static void test_nhwc_conv(backend_t *g, const char *tag, double tol)
{
    /* n, c, h, w, f, k, stride, pad, blocked x, blocked y: ResNet's 3x3
     * and 1x1 stride 2 inside the layout, a stem from NCHW (c = 3), an
     * exit to NCHW */
    int shapes[][10] = {{8, 16, 16, 16, 32, 3, 2, 1, 1, 1}, {8, 32, 8, 8, 32, 1, 1, 0, 1, 1},
                        {8, 16, 16, 16, 32, 1, 2, 0, 1, 1}, {8, 3, 16, 16, 16, 3, 1, 1, 0, 1},
                        {4, 32, 8, 8, 16, 3, 1, 1, 1, 0}};
    for (int s = 0; s < 5; s++) {
        int *q = shapes[s];
        window_desc d = {q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], 0, 0, q[8] == 1,
                         q[9] == 1};
        d.oh = window_out_size(d.h, d.k, d.stride, d.pad);
        d.ow = window_out_size(d.w, d.k, d.stride, d.pad);
        nhwc_conv_case(g, d, s % 2 == 0, tag, tol);
    }
}

/* ---- the weight copies made once per step (backend/weight_copies.h) ---- */

/* The outputs of one pass of a conv (d) and a dense call whose weights sit
 * in `block` (conv w at 0, dense w after it): conv y, dx, dense y, dx,
 * downloaded into out (host, yn + xn + dn_y + dn_x floats). */
typedef struct {
    window_desc d;
    int n, in, out;
    size_t xn, yn, wn, dwn;
    void *x;
    float *dy, *dxg, *y, *ddy, *dx2, *y2, *dw, *ws, *block, *dd_x;
} wc_case;

static void wc_pass(backend_t *g, wc_case *k, float *out)
{
    const float *cw = k->block, *dw = k->block + k->wn;
    g->conv_forward(g, &k->d, k->x, cw, NULL, false, k->y, k->ws);
    g->conv_backward(g, &k->d, k->x, cw, k->y, false, k->dy, k->dxg, k->dw, NULL, k->ws);
    g->dense_forward(g, k->n, k->in, k->out, k->dd_x, dw, NULL, false, k->y2);
    g->dense_backward(g, k->n, k->in, k->out, k->dd_x, dw, NULL, false, k->ddy, k->dx2, NULL,
                      NULL);
    size_t yb = k->d.blocked_y && g->blocked_bf16 ? k->yn * 2 : k->yn * 4;
    g->download(g, out, k->y, yb);
    g->download(g, (char *)out + yb, k->dxg, k->xn * 4);
    g->download(g, (char *)out + yb + k->xn * 4, k->y2, (size_t)k->n * k->out * 4);
    g->download(g, (char *)out + yb + k->xn * 4 + (size_t)k->n * k->out * 4, k->dx2,
                (size_t)k->n * k->in * 4);
}

/* Inside a step of a registered block the copies give the per-call bits
 * (twice: the second pass reads the copies); new weights uploaded between
 * steps are seen by the next step. */
static void weight_copies_case(backend_t *g, window_desc d)
{
    wc_case k = {.d = d, .n = 8, .in = 96, .out = 40};
    k.xn = (size_t)d.n * d.c * d.h * d.w;
    k.yn = (size_t)d.n * d.f * d.oh * d.ow;
    k.wn = (size_t)d.f * d.c * d.k * d.k;
    k.dwn = (size_t)k.out * k.in;
    float *fx, *hw = rand_buf(k.wn + k.dwn, -0.3f, 0.3f), *hw2 = rand_buf(k.wn + k.dwn, -0.3f, 0.3f);
    uint16_t *hx = bf16_rand(k.xn, -1, 1, &fx);
    float *hdy = rand_buf(k.yn, -1, 1), *hdx = rand_buf((size_t)k.n * k.in, -1, 1);
    float *hddy = rand_buf((size_t)k.n * k.out, -1, 1);
    /* a blocked x in the layout's type; the values' order matters not */
    k.x = d.blocked_x && g->blocked_bf16 ? put(g, hx, k.xn * 2) : put(g, fx, k.xn * 4);
    k.dy = put(g, hdy, k.yn * 4);
    k.dxg = put(g, NULL, k.xn * 4);
    k.y = put(g, NULL, k.yn * 4);
    k.dw = put(g, NULL, k.wn * 4);
    k.ws = put(g, NULL, g->conv_workspace(g, &d));
    k.block = put(g, hw, (k.wn + k.dwn) * 4);
    k.dd_x = put(g, hdx, (size_t)k.n * k.in * 4);
    k.ddy = put(g, hddy, (size_t)k.n * k.out * 4);
    k.y2 = put(g, NULL, (size_t)k.n * k.out * 4);
    k.dx2 = put(g, NULL, (size_t)k.n * k.in * 4);
    size_t outn = k.yn + k.xn + (size_t)k.n * (k.out + k.in);
    float *ref = calloc(outn, 4), *got = calloc(outn, 4), *again = calloc(outn, 4);
    float *ref2 = calloc(outn, 4), *got2 = calloc(outn, 4);
    tt_err err = {0};
    wc_pass(g, &k, ref); /* no block registered: converted at each call */
    bool ok = g->dev->weights_add(g, k.block, k.wn + k.dwn, &err) == 0;
    g->dev->weights_step(g, k.block, true);
    wc_pass(g, &k, got);
    wc_pass(g, &k, again);
    g->dev->weights_step(g, k.block, false);
    g->upload(g, k.block, hw2, (k.wn + k.dwn) * 4); /* the optimizer's or a restore's write */
    wc_pass(g, &k, ref2); /* outside a step: at each call */
    g->dev->weights_step(g, k.block, true);
    wc_pass(g, &k, got2);
    g->dev->weights_step(g, k.block, false);
    g->dev->weights_remove(g, k.block);
    ok = ok && backend_cuda_check(g, &err) == 0;
    tt_ok(ok && memcmp(ref, got, outn * 4) == 0 && memcmp(ref, again, outn * 4) == 0 &&
              memcmp(ref2, got2, outn * 4) == 0 && memcmp(ref, ref2, outn * 4) != 0,
          "%s weight copies once per step, conv [%d,%d,%d,%d] f%d (x %s, y %s) and dense: "
          "the bits of converting at each call, twice in a step, and new weights seen by the "
          "next step %s", g->precision, d.n, d.c, d.h, d.w, d.f, d.blocked_x ? "NHWC" : "NCHW",
          d.blocked_y ? "NHWC" : "NCHW", err.msg);
    void *gp[] = {k.x, k.dy, k.dxg, k.y, k.dw, k.ws, k.block, k.dd_x, k.ddy, k.y2, k.dx2};
    for (int i = 0; i < 11; i++)
        g->free(g, gp[i]);
    free(fx), free(hw), free(hw2), free(hx), free(hdy), free(hdx), free(hddy);
    free(ref), free(got), free(again), free(ref2), free(got2);
}

static void test_weight_copies(backend_t *g)
{
    window_desc nchw = {8, 16, 16, 16, 32, 3, 1, 1, 16, 16, false, false};
    window_desc nhwc = {8, 16, 16, 16, 32, 3, 1, 1, 16, 16, true, true};
    /* the cases upload a float32 dy and read a float32 dx: the
     * float32-gradient path (with bf16 gradients the blocked conv would
     * read those floats as bf16 pairs); the copies are the weights' */
    bool grads16 = g->blocked_bf16_grads;
    g->blocked_bf16_grads = false;
    weight_copies_case(g, nchw);
    weight_copies_case(g, nhwc);
    g->blocked_bf16_grads = grads16;
}

/* float32 NHWC (TT_CUDA_LAYOUT=nhwc: tf32's layout to be), of an fp32
 * backend made with the switch (o: strict fp32, or tf32): the element-wise
 * operations and pools on the bits of the CPU's float32 NHWC blocked
 * operations; conv2d with blocked and NCHW sides against the CPU's NCHW
 * within tol; its float32 KRSC weight copies on the per-call bits (where
 * o is deterministic) */
static void test_nhwc_f32(const cuda_options *o, const char *tag, double tol)
{
    tt_err err = {0};
    setenv("TT_CUDA_LAYOUT", "nhwc", 1);
    backend_t *g = backend_cuda_create(0, o, &err);
    unsetenv("TT_CUDA_LAYOUT");
    backend_t *cn = backend_cpu_create(0, 2, &err);
    if (g == NULL || cn == NULL) {
        tt_ok(0, "float32 NHWC: backends %s", err.msg);
        return;
    }
    cn->blocked_nhwc = true;
    cn->blocked_bf16 = false;
    tt_ok(g->relu_forward_blocked != NULL && g->global_avgpool_blocked_forward != NULL &&
              g->blocked_layout && g->blocked_nhwc && !g->blocked_bf16 &&
              !g->blocked_bf16_grads,
          "TT_CUDA_LAYOUT=nhwc: the %s GPU backend keeps float32 NHWC, convolutions included",
          tag);
    test_nhwc_elementwise(g, cn);
    test_nhwc_pool(g, cn);
    test_nhwc_conv(g, tag, tol);
    test_conv_bias(g, tag, true);
    /* the copies' check compares bits between calls: only where every
     * algorithm is deterministic (with deterministic = false cuDNN may pick
     * an atomics one, backward data's ALGO_0 or a NONDETERMINISTIC engine,
     * whose bits differ from call to call with or without copies) */
    if (o->deterministic)
        test_weight_copies(g);
    else
        tt_skip("%s weight copies: their check compares bits, and this backend's cuDNN "
                "algorithms need not be deterministic", tag);
    g->destroy(g);
    cn->destroy(cn);
}

/* every bf16 NHWC case; cn: a CPU backend reading bf16 NHWC blocked */
static void test_nhwc(backend_t *g)
{
    tt_err err = {0};
    backend_t *cn = backend_cpu_create(0, 2, &err);
    if (cn == NULL) {
        tt_skip("bf16 NHWC: %s", err.msg);
        return;
    }
    cn->blocked_nhwc = cn->blocked_bf16 = true; /* as the bf16 CPU backend's */
    tt_ok(g->relu_forward_blocked != NULL && g->add_blocked != NULL &&
              g->global_avgpool_blocked_forward != NULL,
          "the bf16 GPU backend has the blocked element-wise operations");
    tt_ok(g->blocked_bf16_grads, "the bf16 GPU backend keeps bf16 activation gradients");
    g->blocked_bf16_grads = false; /* the float32-gradient path first */
    test_nhwc_elementwise(g, cn);
    test_nhwc_pool(g, cn);
    test_nhwc_conv(g, "bf16", 1e-2);
    test_nhwc_grad16(g, cn);
    test_bn_conv_grad16(g);
    test_conv_bias(g, "bf16", true);
    g->blocked_bf16_grads = true;
    test_conv_bias(g, "bf16", true);
    test_channel_sums(g);
    cn->destroy(cn);
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
        tt_skip("NHWC batchnorm, alone and fused with add and relu, fp32 and bf16, against "
                "the CPU, twice the same bits, fused = unfused bitwise");
        tt_skip("bf16 NHWC: blocked element-wise, pools and conv2d against the CPU backend");
        tt_skip("bf16 weight copies once per step: the bits of converting at each call");
        tt_skip("float32 NHWC (TT_CUDA_LAYOUT=nhwc), fp32 and tf32: element-wise and pools on "
                "the CPU's bits, conv2d against the CPU, float32 KRSC weight copies");
        tt_skip("bf16 gradients: relu, global average pooling and pools backward against the "
                "CPU's float32 gradients rounded; batchnorm (+add) and conv2d backward against "
                "the float32-gradient path rounded");
        tt_skip("conv bias gradient (channel sums in partials), NHWC and NCHW, float32 and "
                "bf16, up to 100,352 rows of 6 and 16 channels: against float64, the same bits "
                "twice and from bf16");
        tt_skip("sumsq and sumsq_each (the optimizer's norms) in partials: 1 to 10 M floats "
                "and empty ranges, against float64, twice and alone the same bits, in groups");
        return tt_done();
    }
    tt_ok(strcmp(gpu_be->precision, "fp32") == 0 && strcmp(gpu_bf16->precision, "bf16") == 0 &&
              strcmp(gpu_fp16->precision, "fp16") == 0 && strcmp(cpu_be->precision, "fp32") == 0,
          "each backend says its precision");
    test_dense(gpu_be, TOL, "fp32");
    test_conv(gpu_be, TOL, "fp32");
    test_conv_bias(gpu_be, "fp32", false);
    test_pool(gpu_be);
    test_batchnorm(gpu_be);
    test_bn_nhwc(gpu_be);
    test_elementwise(gpu_be);
    test_sumsq(gpu_be);
    /* TF32 keeps 10 mantissa bits: 1e-2 */
    test_dense(gpu_tf32, 1e-2, "tf32");
    test_conv(gpu_tf32, 1e-2, "tf32");
    /* mixed precision: 8 (bf16) or 11 (fp16) significant bits in the
     * products' operands, float32 sums: 1e-2 */
    test_dense(gpu_bf16, 1e-2, "bf16");
    test_conv(gpu_bf16, 1e-2, "bf16");
    test_conv_bias(gpu_bf16, "bf16", false);
    test_nhwc(gpu_bf16);
    test_weight_copies(gpu_bf16);
    test_nhwc_f32(&strict, "fp32", TOL);
    test_nhwc_f32(&fast, "tf32", 1e-2);
    test_dense(gpu_fp16, 1e-2, "fp16");
    test_conv(gpu_fp16, 1e-2, "fp16");
    gpu_be->destroy(gpu_be);
    gpu_tf32->destroy(gpu_tf32);
    gpu_bf16->destroy(gpu_bf16);
    gpu_fp16->destroy(gpu_fp16);
    cpu_be->destroy(cpu_be);
    return tt_done();
}

/* tt_conv_graph.h - the graph API's convolution plans
 * (src/backend/cuda/cuda_conv_graph.c) on a GPU against a float64
 * convolution computed here, for tests/gpu/test_gpu_ops.c (a header, not a
 * program of its own: the GPU kit has no room for one more binary).
 * tt_conv_graph_checks(): each pass (forward, backward data, backward
 * filter), layout (NCHW, NHWC), data type (float without TF32, bf16) and
 * choice (the heuristics' first plan; the fastest of 8 timed), on a strided
 * 3x3 with padding. The output buffer is filled with NaN before the run, so
 * a plan that writes nothing fails. float without TF32 must be within 1e-4
 * of float64 (max |gpu - ref| / max |ref|; a TF32 or down-converting plan,
 * which the note filter must have removed, errs by about 1e-3); bf16 within
 * 1e-2 (inputs rounded to bf16 here first, the output rounded to bf16). The
 * float64 reference is itself checked against the CPU backend's conv2d,
 * with or without a GPU. Without a GPU the GPU checks are a visible SKIP.
 */
#ifndef TT_CONV_GRAPH_CHECKS_H
#define TT_CONV_GRAPH_CHECKS_H

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "tt_ref.h"
#include "tt_test.h"

#ifndef HAVE_CUDA
static void tt_conv_graph_checks(void)
{
    tt_skip("graph API convolution plans against float64 (built without CUDA)");
}
#else

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_conv_graph.h"
#include "backend/cuda/cuda_libs.h"

static const window_desc CGW = {.n = 4, .c = 16, .h = 15, .w = 15, .f = 24, .k = 3, .stride = 2,
                              .pad = 1, .oh = 8, .ow = 8};

static uint64_t cgt_state = 88172645463325252ULL;

static float cgt_uniform_pm1(void)
{
    cgt_state ^= cgt_state << 13;
    cgt_state ^= cgt_state >> 7;
    cgt_state ^= cgt_state << 17;
    return (float)((double)(cgt_state >> 11) / 4503599627370496.0 - 1.0);
}

static uint16_t cgt_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float cgt_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* offset of (a, b, y, x) in a [A, B, Y, X] tensor, NCHW or NHWC */
static size_t cgt_at(cg_layout l, int B, int Y, int X, int a, int b, int y, int x)
{
    if (l == CG_LAYOUT_NHWC)
        return (((size_t)a * Y + y) * X + x) * B + b;
    return (((size_t)a * B + b) * Y + y) * X + x;
}

/* float64 references of the three passes, NCHW */
static void cgt_reference(const float *x, const float *w, const float *dy, double *y, double *dx,
                      double *dw)
{
    const window_desc *d = &CGW;
    memset(dx, 0, sizeof(double) * d->n * d->c * d->h * d->w);
    memset(dw, 0, sizeof(double) * d->f * d->c * d->k * d->k);
    for (int n = 0; n < d->n; n++)
        for (int f = 0; f < d->f; f++)
            for (int oy = 0; oy < d->oh; oy++)
                for (int ox = 0; ox < d->ow; ox++) {
                    double acc = 0;
                    size_t o = cgt_at(CG_LAYOUT_NCHW, d->f, d->oh, d->ow, n, f, oy, ox);
                    for (int c = 0; c < d->c; c++)
                        for (int ky = 0; ky < d->k; ky++)
                            for (int kx = 0; kx < d->k; kx++) {
                                int iy, ix;
                                if (!tt_window_tap(d, oy, ox, ky, kx, &iy, &ix))
                                    continue;
                                size_t xi = cgt_at(CG_LAYOUT_NCHW, d->c, d->h, d->w, n, c, iy, ix);
                                size_t wi = cgt_at(CG_LAYOUT_NCHW, d->c, d->k, d->k, f, c, ky, kx);
                                acc += (double)x[xi] * w[wi];
                                dx[xi] += (double)dy[o] * w[wi];
                                dw[wi] += (double)dy[o] * x[xi];
                            }
                    y[o] = acc;
                }
}

typedef struct {
    int a, b, y, x;
} cgt_dims;

static size_t cgt_count(cgt_dims d)
{
    return (size_t)d.a * d.b * d.y * d.x;
}

/* Where element r (in NCHW order) of a tensor of dims d sits in layout l. */
static size_t cgt_from_nchw(cgt_dims d, cg_layout l, size_t r)
{
    int x = (int)(r % (size_t)d.x), y = (int)(r / (size_t)d.x % (size_t)d.y);
    int b = (int)(r / ((size_t)d.x * d.y) % (size_t)d.b), a = (int)(r / ((size_t)d.x * d.y * d.b));
    return cgt_at(l, d.b, d.y, d.x, a, b, y, x);
}

/* host NCHW float to a device tensor of layout l and type t; NULL on error */
static void *cgt_upload(const float *h, cgt_dims d, cg_layout l, cg_dtype t)
{
    size_t n = cgt_count(d), es = t == CG_DTYPE_BF16 ? 2 : 4;
    char *buf = malloc(n * es);
    void *dev = NULL;
    if (buf == NULL)
        return NULL;
    for (size_t s = 0; s < n; s++) {
        size_t o = cgt_from_nchw(d, l, s);
        if (t == CG_DTYPE_BF16)
            ((uint16_t *)buf)[o] = cgt_to_bf16(h[s]);
        else
            ((float *)buf)[o] = h[s];
    }
    if (cudaMalloc(&dev, n * es) != cudaSuccess ||
        cudaMemcpy(dev, buf, n * es, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(dev);
        dev = NULL;
    }
    free(buf);
    return dev;
}

/* an output tensor: every byte 0xff, a NaN in float and in bf16 */
static void *cgt_nan_tensor(cgt_dims d, cg_dtype t)
{
    size_t bytes = cgt_count(d) * (t == CG_DTYPE_BF16 ? 2 : 4);
    void *dev = NULL;
    if (cudaMalloc(&dev, bytes) != cudaSuccess || cudaMemset(dev, 0xff, bytes) != cudaSuccess) {
        cudaFree(dev);
        return NULL;
    }
    return dev;
}

/* max |dev - ref| / max |ref| over the tensor (NaN when one is NaN) */
static double cgt_rel_error(const void *dev, const double *ref, cgt_dims d, cg_layout l, cg_dtype t)
{
    size_t n = cgt_count(d), es = t == CG_DTYPE_BF16 ? 2 : 4;
    char *buf = malloc(n * es);
    if (buf == NULL || cudaMemcpy(buf, dev, n * es, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(buf);
        return NAN;
    }
    double err = 0, scale = 0;
    for (size_t r = 0; r < n; r++) {
        size_t o = cgt_from_nchw(d, l, r);
        double v = t == CG_DTYPE_BF16 ? cgt_from_bf16(((uint16_t *)buf)[o]) : ((float *)buf)[o];
        double e = fabs(v - ref[r]);
        err = e > err || e != e ? e : err;
        scale = fabs(ref[r]) > scale ? fabs(ref[r]) : scale;
    }
    free(buf);
    return err / scale;
}

typedef struct {
    cudnnHandle_t h;
    cudaStream_t st;
    void *ws;
    size_t ws_bytes;
    const float *x, *w, *dy;  /* host, NCHW, bf16-exact values */
    const double *ref[3];     /* y, dx, dw */
} cgt_fixture;

static void cgt_run_case(const cgt_fixture *fx, conv_pass pass, cg_layout l, cg_dtype t,
                         bool autotune)
{
    cgt_dims dx = {CGW.n, CGW.c, CGW.h, CGW.w}, dw = {CGW.f, CGW.c, CGW.k, CGW.k};
    cgt_dims dy = {CGW.n, CGW.f, CGW.oh, CGW.ow};
    cgt_dims od = pass == CONV_PASS_FORWARD ? dy : pass == CONV_PASS_BACKWARD_DATA ? dx : dw;
    /* the pass's output NaN-filled, its inputs uploaded */
    bool out_x = pass == CONV_PASS_BACKWARD_DATA, out_w = pass == CONV_PASS_BACKWARD_FILTER;
    bool out_y = pass == CONV_PASS_FORWARD;
    cg_ptrs p = {out_x ? cgt_nan_tensor(dx, t) : cgt_upload(fx->x, dx, l, t),
                 out_w ? cgt_nan_tensor(dw, t) : cgt_upload(fx->w, dw, l, t),
                 out_y ? cgt_nan_tensor(dy, t) : cgt_upload(fx->dy, dy, l, t)};
    void *out = pass == CONV_PASS_FORWARD ? p.y : pass == CONV_PASS_BACKWARD_DATA ? p.x : p.w;
    const void *ptrs[3] = {p.x, p.w, p.y};
    cg_spec s = {.pass = pass, .win = CGW, .layout = l, .dtype = t, .tf32 = false,
                 .deterministic = false, .align = cg_align_of(ptrs, 3)};
    cg_search how = {.max_plans = autotune ? CG_MAX_PLANS : 1, .reps = autotune ? 5 : 0};
    cg_table *tb = cg_table_create();
    tt_err err = {0};
    size_t wsb = 0;
    float ms = 0;
    int k = -1;
    double rel = NAN, tol = t == CG_DTYPE_BF16 ? 1e-2 : 1e-4;
    if (p.x && p.w && p.y && tb) {
        k = cg_table_build(tb, fx->h, fx->st, &s, &how, &p, fx->ws, fx->ws_bytes, &wsb, &ms, &err);
        /* the timing runs wrote the output: NaN again, then one run */
        size_t bytes = cgt_count(od) * (t == CG_DTYPE_BF16 ? 2 : 4);
        if (k >= 0 && cudaMemset(out, 0xff, bytes) == cudaSuccess &&
            cg_table_execute(tb, fx->h, k, &p, fx->ws, &err) == 0 &&
            cudaStreamSynchronize(fx->st) == cudaSuccess)
            rel = cgt_rel_error(out, fx->ref[pass], od, l, t);
    }
    tt_ok(rel <= tol, "%s %s %s, %s: max relative error %.2e <= %g (plan %d, %zu bytes of "
          "workspace%s%s)", cg_pass_name(pass), cg_layout_name(l), cg_dtype_name(t),
          autotune ? "fastest of 8 timed" : "the heuristics' first", rel, tol, k, wsb,
          err.msg[0] ? "; " : "", err.msg);
    cg_table_free(tb);
    cudaFree(p.x);
    cudaFree(p.w);
    cudaFree(p.y);
}

/* The float64 reference itself against the CPU backend's conv2d (which
 * other tests check), here and on every machine: a wrong reference would
 * make the GPU checks meaningless. */
static void cgt_check_reference(const float *x, const float *w, const float *dy, const double *y,
                            const double *dx, const double *dw)
{
    tt_err err = {0};
    backend_t *cpu = backend_cpu_create(0, 1, &err);
    size_t xn = (size_t)CGW.n * CGW.c * CGW.h * CGW.w, wn = (size_t)CGW.f * CGW.c * CGW.k * CGW.k;
    size_t yn = (size_t)CGW.n * CGW.f * CGW.oh * CGW.ow;
    float *cy = malloc(yn * 4), *cdx = malloc(xn * 4), *cdw = malloc(wn * 4), *g = malloc(yn * 4);
    if (!tt_ok(cpu && cy && cdx && cdw && g, "the CPU backend (%s)", err.msg[0] ? err.msg : "ok"))
        return;
    size_t wsb = cpu->conv_workspace(cpu, &CGW);
    void *ws = wsb ? cpu->alloc(cpu, wsb) : NULL;
    memcpy(g, dy, yn * 4);
    cpu->conv_forward(cpu, &CGW, x, w, NULL, false, cy, ws);
    cpu->conv_backward(cpu, &CGW, x, w, cy, false, g, cdx, cdw, NULL, ws);
    double e = 0;
    const float *c[3] = {cy, cdx, cdw};
    const double *r[3] = {y, dx, dw};
    size_t n[3] = {yn, xn, wn};
    for (int t = 0; t < 3; t++) {
        double err_t = 0, scale = 0;
        for (size_t i = 0; i < n[t]; i++) {
            err_t = fmax(err_t, fabs(c[t][i] - r[t][i]));
            scale = fmax(scale, fabs(r[t][i]));
        }
        e = fmax(e, err_t / scale);
    }
    tt_ok(e <= 1e-5, "the float64 reference of y, dx and dw agrees with the CPU backend's "
          "conv2d (max relative difference %.2e <= 1e-5)", e);
    if (ws)
        cpu->free(cpu, ws);
    cpu->destroy(cpu);
    free(cy);
    free(cdx);
    free(cdw);
    free(g);
}

static float *cgt_random_bf16_exact(size_t n)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; p != NULL && i < n; i++)
        p[i] = cgt_from_bf16(cgt_to_bf16(cgt_uniform_pm1()));
    return p;
}

static void cgt_run_all(cgt_fixture *fx, const float *x, const float *w, const float *dy,
                    const double *y, const double *dx, const double *dw)
{
    fx->x = x;
    fx->w = w;
    fx->dy = dy;
    fx->ref[CONV_PASS_FORWARD] = y;
    fx->ref[CONV_PASS_BACKWARD_DATA] = dx;
    fx->ref[CONV_PASS_BACKWARD_FILTER] = dw;
    for (int p = CONV_PASS_FORWARD; p <= CONV_PASS_BACKWARD_FILTER; p++)
        for (int l = CG_LAYOUT_NCHW; l <= CG_LAYOUT_NHWC; l++)
            for (int t = CG_DTYPE_FLOAT; t <= CG_DTYPE_BF16; t++)
                for (int a = 0; a < 2; a++)
                    cgt_run_case(fx, (conv_pass)p, (cg_layout)l, (cg_dtype)t, a == 1);
}

/* All of it: the reference here, then the GPU checks (SKIP without a GPU). */
static void tt_conv_graph_checks(void)
{
    size_t xn = (size_t)CGW.n * CGW.c * CGW.h * CGW.w, wn = (size_t)CGW.f * CGW.c * CGW.k * CGW.k;
    size_t yn = (size_t)CGW.n * CGW.f * CGW.oh * CGW.ow;
    float *x = cgt_random_bf16_exact(xn), *w = cgt_random_bf16_exact(wn);
    float *dy = cgt_random_bf16_exact(yn);
    double *y = malloc(yn * sizeof(double)), *dx = malloc(xn * sizeof(double));
    double *dw = malloc(wn * sizeof(double));
    if (!tt_ok(x && w && dy && y && dx && dw, "graph API checks: host memory"))
        return;
    cgt_reference(x, w, dy, y, dx, dw);
    cgt_check_reference(x, w, dy, y, dx, dw);
    char reason[256] = "";
    tt_err err = {0};
    cgt_fixture fx = {.ws_bytes = (size_t)64 << 20};
    if (backend_cuda_device_count(reason, sizeof(reason)) <= 0 || cuda_libs_load(&err) != 0) {
        tt_skip("graph API convolution plans against float64 (no GPU: %s)",
                reason[0] ? reason : err.msg);
    } else if (tt_ok(cudaSetDevice(0) == cudaSuccess && cudaStreamCreate(&fx.st) == cudaSuccess &&
                         cudaMalloc(&fx.ws, fx.ws_bytes) == cudaSuccess &&
                         cu.cudnnCreate(&fx.h) == CUDNN_STATUS_SUCCESS &&
                         cu.cudnnSetStream(fx.h, fx.st) == CUDNN_STATUS_SUCCESS,
                     "set up: a stream, a cuDNN handle, 64 MiB of workspace")) {
        cgt_run_all(&fx, x, w, dy, y, dx, dw);
    }
    if (fx.h)
        cu.cudnnDestroy(fx.h);
    cudaFree(fx.ws);
    if (fx.st)
        cudaStreamDestroy(fx.st);
    free(x);
    free(w);
    free(dy);
    free(y);
    free(dx);
    free(dw);
}
#endif

#endif

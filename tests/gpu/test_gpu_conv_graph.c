/* test_gpu_conv_graph.c - the graph API's convolution plans
 * (src/backend/cuda/cuda_conv_graph.c) on a GPU against a float64
 * convolution computed here: each pass (forward, backward data, backward
 * filter), layout (NCHW, NHWC), data type (float without TF32, bf16) and
 * choice (the heuristics' first plan; the fastest of 8 timed), on a strided
 * 3x3 with padding. The output buffer is filled with NaN before the run, so
 * a plan that writes nothing fails. float without TF32 must be within 1e-4
 * of float64 (max |gpu - ref| / max |ref|; a TF32 or down-converting plan,
 * which the note filter must have removed, errs by about 1e-3); bf16 within
 * 1e-2 (inputs rounded to bf16 here first, the output rounded to bf16).
 * Without a GPU every check is a visible SKIP.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tt_test.h"

#ifndef HAVE_CUDA
int main(void)
{
    tt_skip("graph API convolution plans against float64 (built without CUDA)");
    return tt_done();
}
#else

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_conv_graph.h"
#include "backend/cuda/cuda_libs.h"

static const window_desc D = {.n = 4, .c = 16, .h = 15, .w = 15, .f = 24, .k = 3, .stride = 2,
                              .pad = 1, .oh = 8, .ow = 8};

static uint64_t state = 88172645463325252ULL;

static float uniform_pm1(void)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (float)((double)(state >> 11) / 4503599627370496.0 - 1.0);
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* offset of (a, b, y, x) in a [A, B, Y, X] tensor, NCHW or NHWC */
static size_t at(cg_layout l, int B, int Y, int X, int a, int b, int y, int x)
{
    if (l == CG_LAYOUT_NHWC)
        return (((size_t)a * Y + y) * X + x) * B + b;
    return (((size_t)a * B + b) * Y + y) * X + x;
}

/* float64 references of the three passes, NCHW */
static void reference(const float *x, const float *w, const float *dy, double *y, double *dx,
                      double *dw)
{
    const window_desc *d = &D;
    memset(dx, 0, sizeof(double) * d->n * d->c * d->h * d->w);
    memset(dw, 0, sizeof(double) * d->f * d->c * d->k * d->k);
    for (int n = 0; n < d->n; n++)
        for (int f = 0; f < d->f; f++)
            for (int oy = 0; oy < d->oh; oy++)
                for (int ox = 0; ox < d->ow; ox++) {
                    double acc = 0;
                    size_t o = at(CG_LAYOUT_NCHW, d->f, d->oh, d->ow, n, f, oy, ox);
                    for (int c = 0; c < d->c; c++)
                        for (int ky = 0; ky < d->k; ky++)
                            for (int kx = 0; kx < d->k; kx++) {
                                int iy = oy * d->stride - d->pad + ky;
                                int ix = ox * d->stride - d->pad + kx;
                                if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w)
                                    continue;
                                size_t xi = at(CG_LAYOUT_NCHW, d->c, d->h, d->w, n, c, iy, ix);
                                size_t wi = at(CG_LAYOUT_NCHW, d->c, d->k, d->k, f, c, ky, kx);
                                acc += (double)x[xi] * w[wi];
                                dx[xi] += (double)dy[o] * w[wi];
                                dw[wi] += (double)dy[o] * x[xi];
                            }
                    y[o] = acc;
                }
}

typedef struct {
    int a, b, y, x;
} dims4;

static size_t count(dims4 d)
{
    return (size_t)d.a * d.b * d.y * d.x;
}

/* host NCHW float to a device tensor of layout l and type t; NULL on error */
static void *upload(const float *h, dims4 d, cg_layout l, cg_dtype t)
{
    size_t n = count(d), es = t == CG_DTYPE_BF16 ? 2 : 4;
    char *buf = malloc(n * es);
    void *dev = NULL;
    if (buf == NULL)
        return NULL;
    for (int a = 0; a < d.a; a++)
        for (int b = 0; b < d.b; b++)
            for (int y = 0; y < d.y; y++)
                for (int x = 0; x < d.x; x++) {
                    size_t s = at(CG_LAYOUT_NCHW, d.b, d.y, d.x, a, b, y, x);
                    size_t o = at(l, d.b, d.y, d.x, a, b, y, x);
                    if (t == CG_DTYPE_BF16)
                        ((uint16_t *)buf)[o] = to_bf16(h[s]);
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
static void *nan_tensor(dims4 d, cg_dtype t)
{
    size_t bytes = count(d) * (t == CG_DTYPE_BF16 ? 2 : 4);
    void *dev = NULL;
    if (cudaMalloc(&dev, bytes) != cudaSuccess || cudaMemset(dev, 0xff, bytes) != cudaSuccess) {
        cudaFree(dev);
        return NULL;
    }
    return dev;
}

/* max |dev - ref| / max |ref| over the tensor (NaN when one is NaN) */
static double rel_error(const void *dev, const double *ref, dims4 d, cg_layout l, cg_dtype t)
{
    size_t n = count(d), es = t == CG_DTYPE_BF16 ? 2 : 4;
    char *buf = malloc(n * es);
    if (buf == NULL || cudaMemcpy(buf, dev, n * es, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(buf);
        return NAN;
    }
    double err = 0, scale = 0;
    for (int a = 0; a < d.a; a++)
        for (int b = 0; b < d.b; b++)
            for (int y = 0; y < d.y; y++)
                for (int x = 0; x < d.x; x++) {
                    size_t r = at(CG_LAYOUT_NCHW, d.b, d.y, d.x, a, b, y, x);
                    size_t o = at(l, d.b, d.y, d.x, a, b, y, x);
                    double v = t == CG_DTYPE_BF16 ? from_bf16(((uint16_t *)buf)[o])
                                                  : ((float *)buf)[o];
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
} fixture;

static void run_case(const fixture *fx, conv_pass pass, cg_layout l, cg_dtype t, bool autotune)
{
    dims4 dx = {D.n, D.c, D.h, D.w}, dw = {D.f, D.c, D.k, D.k}, dy = {D.n, D.f, D.oh, D.ow};
    dims4 od = pass == CONV_PASS_FORWARD ? dy : pass == CONV_PASS_BACKWARD_DATA ? dx : dw;
    cg_ptrs p = {pass == CONV_PASS_BACKWARD_DATA ? nan_tensor(dx, t) : upload(fx->x, dx, l, t),
                 pass == CONV_PASS_BACKWARD_FILTER ? nan_tensor(dw, t) : upload(fx->w, dw, l, t),
                 pass == CONV_PASS_FORWARD ? nan_tensor(dy, t) : upload(fx->dy, dy, l, t)};
    void *out = pass == CONV_PASS_FORWARD ? p.y : pass == CONV_PASS_BACKWARD_DATA ? p.x : p.w;
    const void *ptrs[3] = {p.x, p.w, p.y};
    cg_spec s = {.pass = pass, .win = D, .layout = l, .dtype = t, .tf32 = false,
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
        size_t bytes = count(od) * (t == CG_DTYPE_BF16 ? 2 : 4);
        if (k >= 0 && cudaMemset(out, 0xff, bytes) == cudaSuccess &&
            cg_table_execute(tb, fx->h, k, &p, fx->ws, &err) == 0 &&
            cudaStreamSynchronize(fx->st) == cudaSuccess)
            rel = rel_error(out, fx->ref[pass], od, l, t);
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
static void check_reference(const float *x, const float *w, const float *dy, const double *y,
                            const double *dx, const double *dw)
{
    tt_err err = {0};
    backend_t *cpu = backend_cpu_create(0, 1, &err);
    size_t xn = (size_t)D.n * D.c * D.h * D.w, wn = (size_t)D.f * D.c * D.k * D.k;
    size_t yn = (size_t)D.n * D.f * D.oh * D.ow;
    float *cy = malloc(yn * 4), *cdx = malloc(xn * 4), *cdw = malloc(wn * 4), *g = malloc(yn * 4);
    if (!tt_ok(cpu && cy && cdx && cdw && g, "the CPU backend (%s)", err.msg[0] ? err.msg : "ok"))
        return;
    size_t wsb = cpu->conv_workspace(cpu, &D);
    void *ws = wsb ? cpu->alloc(cpu, wsb) : NULL;
    memcpy(g, dy, yn * 4);
    cpu->conv_forward(cpu, &D, x, w, NULL, false, cy, ws);
    cpu->conv_backward(cpu, &D, x, w, cy, false, g, cdx, cdw, NULL, ws);
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

static float *random_bf16_exact(size_t n)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; p != NULL && i < n; i++)
        p[i] = from_bf16(to_bf16(uniform_pm1()));
    return p;
}

static void run_all(fixture *fx, const float *x, const float *w, const float *dy,
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
                    run_case(fx, (conv_pass)p, (cg_layout)l, (cg_dtype)t, a == 1);
}

int main(void)
{
    tt_restore_visible_gpus();
    size_t xn = (size_t)D.n * D.c * D.h * D.w, wn = (size_t)D.f * D.c * D.k * D.k;
    size_t yn = (size_t)D.n * D.f * D.oh * D.ow;
    float *x = random_bf16_exact(xn), *w = random_bf16_exact(wn), *dy = random_bf16_exact(yn);
    double *y = malloc(yn * sizeof(double)), *dx = malloc(xn * sizeof(double));
    double *dw = malloc(wn * sizeof(double));
    if (!tt_ok(x && w && dy && y && dx && dw, "host memory"))
        return tt_done();
    reference(x, w, dy, y, dx, dw);
    check_reference(x, w, dy, y, dx, dw);
    char reason[256] = "";
    tt_err err = {0};
    fixture fx = {.ws_bytes = (size_t)64 << 20};
    if (backend_cuda_device_count(reason, sizeof(reason)) <= 0 || cuda_libs_load(&err) != 0) {
        tt_skip("graph API convolution plans against float64 (no GPU: %s)",
                reason[0] ? reason : err.msg);
    } else if (tt_ok(cudaSetDevice(0) == cudaSuccess && cudaStreamCreate(&fx.st) == cudaSuccess &&
                         cudaMalloc(&fx.ws, fx.ws_bytes) == cudaSuccess &&
                         cu.cudnnCreate(&fx.h) == CUDNN_STATUS_SUCCESS &&
                         cu.cudnnSetStream(fx.h, fx.st) == CUDNN_STATUS_SUCCESS,
                     "set up: a stream, a cuDNN handle, 64 MiB of workspace")) {
        run_all(&fx, x, w, dy, y, dx, dw);
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
    return tt_done();
}
#endif

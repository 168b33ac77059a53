/* convbench_gpu.c - convbench's measurements (convbench.h): the legacy
 * cuDNN API as the backend calls it (cudnnFind*AlgorithmEx on random data,
 * the first qualifying algorithm, as algo_cache.c picks) with each math type
 * and layout, and the graph API through the backend's own cuda_conv_graph.c.
 * Each is timed as the median of `reps` cudaEvent timings after a warm-up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_conv_graph.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_libs.h"
#include "bench/gpu/convbench.h"

#define WS_BYTES ((size_t)512 << 20) /* the backend's cap on a pass's workspace */
#define MAX_ALGOS 16
#define MAX_REPS 64

struct cb_gpu {
    cudnnHandle_t h;
    cudaStream_t st;
    void *x, *w, *y, *ws;
    size_t xb, wb, yb; /* bytes, float-sized */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    int filled;        /* tt_elem_t of the random data now in x, w, y; -1 none */
    char desc[320];
};

static int cuda_why(cudaError_t rc, const char *what, char *why, size_t len)
{
    if (rc == cudaSuccess)
        return 0;
    snprintf(why, len, "%s: %s", what, cudaGetErrorString(rc));
    return -1;
}

static int dnn_why(cudnnStatus_t rc, const char *what, char *why, size_t len)
{
    if (rc == CUDNN_STATUS_SUCCESS)
        return 0;
    snprintf(why, len, "%s: %s", what, cu.cudnnGetErrorString(rc));
    return -1;
}

cb_gpu *cb_gpu_open(const cb_shape *s, int n, char *why, size_t len)
{
    tt_err err = {0};
    if (cuda_libs_load(&err) != 0) {
        snprintf(why, len, "%s", err.msg);
        return NULL;
    }
    cb_gpu *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->filled = -1;
    for (int i = 0; i < n; i++) {
        const window_desc *d = &s[i].d;
        size_t xb = (size_t)d->n * d->c * d->h * d->w * 4;
        size_t yb = (size_t)d->n * d->f * d->oh * d->ow * 4;
        size_t wb = (size_t)d->f * d->c * d->k * d->k * 4;
        g->xb = xb > g->xb ? xb : g->xb;
        g->yb = yb > g->yb ? yb : g->yb;
        g->wb = wb > g->wb ? wb : g->wb;
    }
    struct cudaDeviceProp prop;
    if (cuda_why(cudaSetDevice(0), "cudaSetDevice", why, len) != 0 ||
        cuda_why(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties", why, len) != 0 ||
        cuda_why(cudaStreamCreate(&g->st), "cudaStreamCreate", why, len) != 0 ||
        cuda_why(cudaMalloc(&g->x, g->xb), "cudaMalloc", why, len) != 0 ||
        cuda_why(cudaMalloc(&g->w, g->wb), "cudaMalloc", why, len) != 0 ||
        cuda_why(cudaMalloc(&g->y, g->yb), "cudaMalloc", why, len) != 0 ||
        cuda_why(cudaMalloc(&g->ws, WS_BYTES), "cudaMalloc", why, len) != 0 ||
        dnn_why(cu.cudnnCreate(&g->h), "cudnnCreate", why, len) != 0 ||
        dnn_why(cu.cudnnSetStream(g->h, g->st), "cudnnSetStream", why, len) != 0 ||
        dnn_why(cu.cudnnCreateTensorDescriptor(&g->xd), "cudnnCreateTensorDescriptor", why, len) ||
        dnn_why(cu.cudnnCreateTensorDescriptor(&g->yd), "cudnnCreateTensorDescriptor", why, len) ||
        dnn_why(cu.cudnnCreateFilterDescriptor(&g->wd), "cudnnCreateFilterDescriptor", why, len) ||
        dnn_why(cu.cudnnCreateConvolutionDescriptor(&g->cd), "cudnnCreateConvolutionDescriptor",
                why, len)) {
        cb_gpu_close(g);
        return NULL;
    }
    size_t v = cu.cudnnGetVersion();
    snprintf(g->desc, sizeof(g->desc), "%s, cuDNN %zu.%zu.%zu", prop.name, v / 10000,
             v / 100 % 100, v % 100);
    return g;
}

void cb_gpu_close(cb_gpu *g)
{
    if (g == NULL)
        return;
    if (g->xd)
        cu.cudnnDestroyTensorDescriptor(g->xd);
    if (g->yd)
        cu.cudnnDestroyTensorDescriptor(g->yd);
    if (g->wd)
        cu.cudnnDestroyFilterDescriptor(g->wd);
    if (g->cd)
        cu.cudnnDestroyConvolutionDescriptor(g->cd);
    if (g->h)
        cu.cudnnDestroy(g->h);
    cudaFree(g->x);
    cudaFree(g->w);
    cudaFree(g->y);
    cudaFree(g->ws);
    if (g->st)
        cudaStreamDestroy(g->st);
    free(g);
}

const char *cb_gpu_describe(const cb_gpu *g)
{
    return g->desc;
}

/* x, w, y filled with uniform [-1, 1) values of the precision's type */
static int fill(cb_gpu *g, cb_prec prec, char *why, size_t len)
{
    tt_elem_t t = prec == CB_BF16 ? TT_ELEM_BF16 : TT_ELEM_FLOAT;
    if (g->filled == (int)t)
        return 0;
    size_t es = t == TT_ELEM_FLOAT ? 4 : 2;
    if (cuda_why(tt_k_fill_uniform(g->st, g->xb / es, t, 11, g->x), "fill", why, len) != 0 ||
        cuda_why(tt_k_fill_uniform(g->st, g->wb / es, t, 12, g->w), "fill", why, len) != 0 ||
        cuda_why(tt_k_fill_uniform(g->st, g->yb / es, t, 13, g->y), "fill", why, len) != 0 ||
        cuda_why(cudaStreamSynchronize(g->st), "cudaStreamSynchronize", why, len) != 0)
        return -1;
    g->filled = (int)t;
    return 0;
}

/* the legacy descriptors for a variant (layout, math type) and precision */
static int legacy_descs(cb_gpu *g, const window_desc *d, cb_prec prec, cb_variant v, char *why,
                        size_t len)
{
    cudnnTensorFormat_t f = v == CB_LEGACY_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    cudnnDataType_t t = prec == CB_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    cudnnMathType_t m = prec == CB_FP32              ? CUDNN_FMA_MATH
                        : prec == CB_TF32            ? CUDNN_DEFAULT_MATH
                        : v == CB_LEGACY_DEFAULT     ? CUDNN_DEFAULT_MATH
                                                     : CUDNN_TENSOR_OP_MATH;
    if (dnn_why(cu.cudnnSetTensor4dDescriptor(g->xd, f, t, d->n, d->c, d->h, d->w), "x", why,
                len) ||
        dnn_why(cu.cudnnSetTensor4dDescriptor(g->yd, f, t, d->n, d->f, d->oh, d->ow), "y", why,
                len) ||
        dnn_why(cu.cudnnSetFilter4dDescriptor(g->wd, t, f, d->f, d->c, d->k, d->k), "w", why,
                len) ||
        dnn_why(cu.cudnnSetConvolution2dDescriptor(g->cd, d->pad, d->pad, d->stride, d->stride,
                                                   1, 1, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT),
                "cudnnSetConvolution2dDescriptor", why, len))
        return -1;
    return dnn_why(cu.cudnnSetConvolutionMathType(g->cd, m), "cudnnSetConvolutionMathType", why,
                   len);
}

static algo_perf perf_of(int algo, cudnnStatus_t status, float time, size_t memory,
                         cudnnDeterminism_t det, cudnnMathType_t math)
{
    return (algo_perf){.algo = algo,
                       .ok = status == CUDNN_STATUS_SUCCESS,
                       .time_ms = time,
                       .memory = memory,
                       .deterministic = det == CUDNN_DETERMINISTIC,
                       .tensor_math = math != CUDNN_FMA_MATH,
                       .math_type = (int)math};
}

/* cudnnFind*AlgorithmEx's candidates as algo_perf, fastest first */
static cudnnStatus_t legacy_find(cb_gpu *g, conv_pass pass, algo_perf *out, int *n)
{
    int got = 0;
    cudnnStatus_t rc;
    if (pass == CONV_PASS_FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t r[MAX_ALGOS];
        rc = cu.cudnnFindConvolutionForwardAlgorithmEx(g->h, g->xd, g->x, g->wd, g->w, g->cd,
                                                       g->yd, g->y, MAX_ALGOS, &got, r, g->ws,
                                                       WS_BYTES);
        for (int i = 0; rc == CUDNN_STATUS_SUCCESS && i < got; i++)
            out[i] = perf_of(r[i].algo, r[i].status, r[i].time, r[i].memory, r[i].determinism,
                             r[i].mathType);
    } else if (pass == CONV_PASS_BACKWARD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[MAX_ALGOS];
        rc = cu.cudnnFindConvolutionBackwardDataAlgorithmEx(g->h, g->wd, g->w, g->yd, g->y, g->cd,
                                                            g->xd, g->x, MAX_ALGOS, &got, r,
                                                            g->ws, WS_BYTES);
        for (int i = 0; rc == CUDNN_STATUS_SUCCESS && i < got; i++)
            out[i] = perf_of(r[i].algo, r[i].status, r[i].time, r[i].memory, r[i].determinism,
                             r[i].mathType);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[MAX_ALGOS];
        rc = cu.cudnnFindConvolutionBackwardFilterAlgorithmEx(g->h, g->xd, g->x, g->yd, g->y,
                                                              g->cd, g->wd, g->w, MAX_ALGOS, &got,
                                                              r, g->ws, WS_BYTES);
        for (int i = 0; rc == CUDNN_STATUS_SUCCESS && i < got; i++)
            out[i] = perf_of(r[i].algo, r[i].status, r[i].time, r[i].memory, r[i].determinism,
                             r[i].mathType);
    }
    *n = rc == CUDNN_STATUS_SUCCESS ? got : 0;
    return rc;
}

static cudnnStatus_t legacy_run(cb_gpu *g, conv_pass pass, int algo, size_t ws)
{
    const float one = 1.0f, zero = 0.0f;
    if (pass == CONV_PASS_FORWARD)
        return cu.cudnnConvolutionForward(g->h, &one, g->xd, g->x, g->wd, g->w, g->cd,
                                          (cudnnConvolutionFwdAlgo_t)algo, g->ws, ws, &zero,
                                          g->yd, g->y);
    if (pass == CONV_PASS_BACKWARD_DATA)
        return cu.cudnnConvolutionBackwardData(g->h, &one, g->wd, g->w, g->yd, g->y, g->cd,
                                               (cudnnConvolutionBwdDataAlgo_t)algo, g->ws, ws,
                                               &zero, g->xd, g->x);
    return cu.cudnnConvolutionBackwardFilter(g->h, &one, g->xd, g->x, g->yd, g->y, g->cd,
                                             (cudnnConvolutionBwdFilterAlgo_t)algo, g->ws, ws,
                                             &zero, g->wd, g->w);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median of reps timed runs of the legacy algorithm after a warm-up */
static int legacy_time(cb_gpu *g, conv_pass pass, int algo, size_t ws, int reps, double *ms,
                       char *why, size_t len)
{
    cudaEvent_t e0, e1;
    double t[MAX_REPS];
    if (cuda_why(cudaEventCreate(&e0), "cudaEventCreate", why, len) != 0)
        return -1;
    if (cuda_why(cudaEventCreate(&e1), "cudaEventCreate", why, len) != 0) {
        cudaEventDestroy(e0);
        return -1;
    }
    int rc = dnn_why(legacy_run(g, pass, algo, ws), "warm-up run", why, len);
    for (int i = 0; rc == 0 && i < reps; i++) {
        float f = 0;
        rc = cuda_why(cudaEventRecord(e0, g->st), "cudaEventRecord", why, len) ||
             dnn_why(legacy_run(g, pass, algo, ws), "run", why, len) ||
             cuda_why(cudaEventRecord(e1, g->st), "cudaEventRecord", why, len) ||
             cuda_why(cudaEventSynchronize(e1), "cudaEventSynchronize", why, len) ||
             cuda_why(cudaEventElapsedTime(&f, e0, e1), "cudaEventElapsedTime", why, len);
        t[i] = f;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (rc != 0)
        return -1;
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    *ms = t[reps / 2];
    return 0;
}

/* The legacy API: the backend's search (the first candidate that
 * succeeded, fits, and uses no tensor-core math in fp32), then timed. */
static void measure_legacy(cb_gpu *g, const window_desc *d, conv_pass pass, cb_prec prec,
                           cb_variant v, int reps, cb_result *r)
{
    algo_perf perf[MAX_ALGOS];
    int n = 0;
    size_t asked = 0;
    if (legacy_descs(g, d, prec, v, r->err, sizeof(r->err)) != 0 ||
        dnn_why(legacy_find(g, pass, perf, &n), "cudnnFind*AlgorithmEx", r->err,
                sizeof(r->err)) != 0)
        return;
    int i = algo_pick(perf, n, false, prec != CB_FP32, WS_BYTES);
    if (i < 0) {
        snprintf(r->err, sizeof(r->err), "no algorithm qualifies (%d candidates)", n);
        return;
    }
    /* the math type the candidate was found with, and its workspace */
    cudnnStatus_t rc = cu.cudnnSetConvolutionMathType(g->cd, (cudnnMathType_t)perf[i].math_type);
    if (rc == CUDNN_STATUS_SUCCESS && pass == CONV_PASS_FORWARD)
        rc = cu.cudnnGetConvolutionForwardWorkspaceSize(
            g->h, g->xd, g->wd, g->cd, g->yd, (cudnnConvolutionFwdAlgo_t)perf[i].algo, &asked);
    else if (rc == CUDNN_STATUS_SUCCESS && pass == CONV_PASS_BACKWARD_DATA)
        rc = cu.cudnnGetConvolutionBackwardDataWorkspaceSize(
            g->h, g->wd, g->yd, g->cd, g->xd, (cudnnConvolutionBwdDataAlgo_t)perf[i].algo, &asked);
    else if (rc == CUDNN_STATUS_SUCCESS)
        rc = cu.cudnnGetConvolutionBackwardFilterWorkspaceSize(
            g->h, g->xd, g->yd, g->cd, g->wd, (cudnnConvolutionBwdFilterAlgo_t)perf[i].algo,
            &asked);
    if (dnn_why(rc, "workspace size", r->err, sizeof(r->err)) != 0)
        return;
    r->ws_bytes = asked > perf[i].memory ? asked : perf[i].memory;
    r->algo = perf[i].algo;
    if (r->ws_bytes <= WS_BYTES &&
        legacy_time(g, pass, r->algo, r->ws_bytes, reps, &r->ms, r->err, sizeof(r->err)) == 0)
        r->ok = true;
}

/* The graph API through cuda_conv_graph.c: the heuristics' first plan, or
 * the fastest of CG_MAX_PLANS; then timed as the legacy API is. */
static void measure_graph(cb_gpu *g, const window_desc *d, conv_pass pass, cb_prec prec,
                          cb_variant v, int reps, cb_result *r)
{
    cg_ptrs p = {g->x, g->w, g->y};
    const void *ptrs[3] = {g->x, g->w, g->y};
    cg_spec s = {.pass = pass,
                 .win = *d,
                 .layout = v == CB_GRAPH_AUTO_NCHW ? CG_LAYOUT_NCHW : CG_LAYOUT_NHWC,
                 .dtype = prec == CB_BF16 ? CG_DTYPE_BF16 : CG_DTYPE_FLOAT,
                 .tf32 = prec == CB_TF32,
                 .deterministic = false,
                 .align = cg_align_of(ptrs, 3)};
    cg_search how = {.max_plans = v == CB_GRAPH_HEUR ? 1 : CG_MAX_PLANS,
                     .reps = v == CB_GRAPH_HEUR ? 0 : 5};
    cg_table *t = cg_table_create();
    tt_err err = {0};
    float search_ms = 0, ms = 0;
    int k = t == NULL ? err_set(&err, TT_ERR_RUNTIME, "out of host memory")
                      : cg_table_build(t, g->h, g->st, &s, &how, &p, g->ws, WS_BYTES,
                                       &r->ws_bytes, &search_ms, &err);
    if (k >= 0 && cg_table_time(t, g->h, g->st, k, &p, g->ws, reps, &ms, &err) == 0) {
        r->ok = true;
        r->ms = ms;
    } else {
        snprintf(r->err, sizeof(r->err), "%s", err.msg);
    }
    cg_table_free(t);
}

void cb_gpu_measure(cb_gpu *g, const window_desc *d, conv_pass pass, cb_prec prec, cb_variant v,
                    int reps, cb_result *r)
{
    *r = (cb_result){.ok = false, .algo = -1};
    if (reps > MAX_REPS)
        reps = MAX_REPS;
    if (fill(g, prec, r->err, sizeof(r->err)) != 0)
        return;
    if (v <= CB_LEGACY_NHWC)
        measure_legacy(g, d, pass, prec, v, reps, r);
    else
        measure_graph(g, d, pass, prec, v, reps, r);
    /* a failed run leaves no error behind for the next measurement */
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess && r->ok) {
        r->ok = false;
        snprintf(r->err, sizeof(r->err), "%s", cudaGetErrorString(e));
    }
    cudaGetLastError();
}

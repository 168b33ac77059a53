/* dense.c - y[n,out] = x[n,in] w[out,in]^T + b, and its backward, on
 * tile_gemm: every element is one fma chain in a fixed order, so the work is
 * cut into one part per thread (no fixed chunks, nothing summed across
 * parts) and the bits do not depend on the thread count.
 *
 * Forward: part p packs its own columns of w^T and writes y with bias and
 * relu in the same pass. Backward: after masking dy by the relu, dw = dy^T x
 * and dx = dy w (the same number of flops each) run side by side, each cut
 * into half as many parts as there are threads; db sums its column in
 * sample order. */
#include <stdlib.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/tile_gemm.h"
#include "backend/math.h"

/* The backend's packing buffers, `parts` of them for K; NULL when out of
 * memory. Grown on first use of a larger shape, never per step. */
static float *pack_buffers(backend_t *be, int parts, int K)
{
    cpu_impl *impl = be->impl;
    size_t want = (size_t)parts * tile_gemm_pack_floats(K);
    if (want > impl->pack_floats) {
        float *p = aligned_alloc(64, (want * sizeof(float) + 63) & ~(size_t)63);
        if (p == NULL)
            return NULL;
        free(impl->pack);
        impl->pack = p;
        impl->pack_floats = want;
    }
    return impl->pack;
}

typedef struct {
    int n, in, out;
    tile_gemm_t fwd, dw, dx;
    int parts;   /* of each product */
    int dx_from; /* tasks [0, dx_from) compute dw and db, the others dx */
    float *pack; /* parts x tile_gemm_pack_floats(K) */
    size_t pack_stride;
    const float *y;
    float *dy, *db;
} dense_args;

static void dense_forward_task(void *p, int k, int tasks)
{
    dense_args *a = p;
    tile_gemm_part(&a->fwd, k, tasks, a->pack ? a->pack + (size_t)k * a->pack_stride : NULL);
}

void cpu_dense_forward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                       const float *b, bool relu, float *y)
{
    dense_args a = {.n = n, .in = in, .out = out};
    a.fwd = (tile_gemm_t){.M = n, .N = out, .K = in, .a = x, .a_rs = in, .a_cs = 1, .b = w,
                          .b_rs = in, .b_trans = true, .c = y, .ldc = out, .bias = b,
                          .relu = relu};
    a.pack = pack_buffers(be, be->threads, in);
    a.pack_stride = tile_gemm_pack_floats(in);
    /* no memory to pack into: one task reads w in place (same bits, slower) */
    cpu_run(be, a.pack != NULL ? be->threads : 1, dense_forward_task, &a);
}

static void dense_mask_task(void *p, int k, int tasks)
{
    dense_args *a = p;
    int lo, hi;
    cpu_range(a->n, tasks, k, &lo, &hi);
    size_t from = (size_t)lo * a->out, to = (size_t)hi * a->out;
    for (size_t i = from; i < to; i++)
        a->dy[i] = tt_relu_grad(a->y[i], a->dy[i]);
}

/* Task k < dx_from: part k of dw and of db; else part k - dx_from of dx. */
static void dense_backward_task(void *p, int k, int tasks)
{
    dense_args *a = p;
    if (k >= a->dx_from) {
        tile_gemm_part(&a->dx, k - a->dx_from, a->parts, NULL);
        return;
    }
    if (a->dw.c != NULL)
        tile_gemm_part(&a->dw, k, a->parts, NULL);
    if (a->db != NULL) {
        int lo, hi;
        cpu_range(a->out, a->parts, k, &lo, &hi);
        cpu_dense_bias_grad(a->dy, a->n, a->out, lo, hi, a->db);
    }
}

void cpu_dense_backward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                        const float *y, bool relu, float *dy, float *dx, float *dw, float *db)
{
    dense_args a = {.n = n, .in = in, .out = out, .y = y, .dy = dy, .db = db};
    /* dw[o, i] = sum over samples of dy[s, o] x[s, i]: A = dy^T */
    a.dw = (tile_gemm_t){.M = out, .N = in, .K = n, .a = dy, .a_rs = 1, .a_cs = out, .b = x,
                         .b_rs = in, .c = dw, .ldc = in};
    /* dx[s, i] = sum over outputs of dy[s, o] w[o, i] */
    a.dx = (tile_gemm_t){.M = n, .N = in, .K = out, .a = dy, .a_rs = out, .a_cs = 1, .b = w,
                         .b_rs = in, .c = dx, .ldc = in};
    if (relu)
        cpu_run(be, cpu_tasks(be, n), dense_mask_task, &a);
    bool weights = dw != NULL || db != NULL;
    /* dw and dx cost the same: half the threads each when both are wanted */
    a.parts = weights && dx != NULL ? (be->threads + 1) / 2 : be->threads;
    a.dx_from = weights ? a.parts : 0;
    cpu_run(be, a.dx_from + (dx != NULL ? a.parts : 0), dense_backward_task, &a);
}

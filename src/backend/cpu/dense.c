/* dense.c - y[n,out] = x[n,in] w[out,in]^T + b, and its backward, on
 * tile_gemm: every element is one fma chain in a fixed order, so the work is
 * cut into one part per thread (no fixed chunks, nothing summed across
 * parts) and the bits do not depend on the thread count.
 *
 * Forward: part p packs its own columns of w^T and writes y with bias and
 * relu in the same pass. Backward: after masking dy by the relu, dw = dy^T x
 * and dx = dy w (the same number of flops each) run side by side, each cut
 * into half as many parts as there are threads; db sums its column in
 * sample order.
 *
 * Precision "bf16" on a CPU with AVX512_BF16 and no AMX (bf16.c) runs the
 * same code with tile_gemm's bf16 kernel: the operands are rounded as they
 * are packed, both operands of every product are packed, and the bits still
 * do not depend on the split. */
#include <stdlib.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/tile_gemm.h"
#include "backend/math.h"

/* The backend's packing buffers, `want` floats in all; NULL when out of
 * memory. Grown on first use of a larger shape, never per step. */
static float *pack_buffers(backend_t *be, size_t want)
{
    cpu_impl *impl = be->impl;
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

/* bf16: the products' operands rounded to bf16 (tile_gemm_t.bf16); false
 * when the packing buffers cannot be had (bf16 cannot run without them). */
static bool dense_forward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                          const float *b, bool relu, float *y, bool bf16)
{
    dense_args a = {.n = n, .in = in, .out = out};
    a.fwd = (tile_gemm_t){.M = n, .N = out, .K = in, .a = x, .a_rs = in, .a_cs = 1, .b = w,
                          .b_rs = in, .b_trans = true, .c = y, .ldc = out, .bias = b,
                          .relu = relu, .bf16 = bf16};
    a.pack_stride = bf16 ? tile_gemm_bf16_pack_floats(n, in) : tile_gemm_pack_floats(in);
    a.pack = pack_buffers(be, (size_t)be->threads * a.pack_stride);
    if (a.pack == NULL && bf16)
        return false;
    /* no memory to pack into: one task reads w in place (same bits, slower) */
    cpu_run(be, a.pack != NULL ? be->threads : 1, dense_forward_task, &a);
    return true;
}

void cpu_dense_forward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                       const float *b, bool relu, float *y)
{
    dense_forward(be, n, in, out, x, w, b, relu, y, false);
}

void cpu_dense_tile_bf16_forward(backend_t *be, int n, int in, int out, const float *x,
                                 const float *w, const float *b, bool relu, float *y)
{
    /* only when memory runs out: then the float32 layer rather than none */
    if (!dense_forward(be, n, in, out, x, w, b, relu, y, true))
        cpu_dense_forward(be, n, in, out, x, w, b, relu, y);
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
    float *pack = a->pack != NULL ? a->pack + (size_t)k * a->pack_stride : NULL;
    if (k >= a->dx_from) {
        tile_gemm_part(&a->dx, k - a->dx_from, a->parts, pack);
        return;
    }
    if (a->dw.c != NULL)
        tile_gemm_part(&a->dw, k, a->parts, pack);
    if (a->db != NULL) {
        int lo, hi;
        cpu_range(a->out, a->parts, k, &lo, &hi);
        cpu_dense_bias_grad(a->dy, a->n, a->out, lo, hi, a->db);
    }
}

/* bf16 as dense_forward's: false (nothing done) without packing buffers. */
static bool dense_backward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                           const float *y, bool relu, float *dy, float *dx, float *dw, float *db,
                           bool bf16)
{
    dense_args a = {.n = n, .in = in, .out = out, .y = y, .dy = dy, .db = db};
    /* dw[o, i] = sum over samples of dy[s, o] x[s, i]: A = dy^T */
    a.dw = (tile_gemm_t){.M = out, .N = in, .K = n, .a = dy, .a_rs = 1, .a_cs = out, .b = x,
                         .b_rs = in, .c = dw, .ldc = in, .bf16 = bf16};
    /* dx[s, i] = sum over outputs of dy[s, o] w[o, i] */
    a.dx = (tile_gemm_t){.M = n, .N = in, .K = out, .a = dy, .a_rs = out, .a_cs = 1, .b = w,
                         .b_rs = in, .c = dx, .ldc = in, .bf16 = bf16};
    bool weights = dw != NULL || db != NULL;
    /* dw and dx cost the same: half the threads each when both are wanted */
    a.parts = weights && dx != NULL ? (be->threads + 1) / 2 : be->threads;
    a.dx_from = weights ? a.parts : 0;
    int tasks = a.dx_from + (dx != NULL ? a.parts : 0);
    if (bf16) { /* float32 reads B in place; bf16 packs both operands of each */
        /* each product's M and K: dw out x n, dx n x out */
        size_t fw = tile_gemm_bf16_pack_floats(out, n), fx = tile_gemm_bf16_pack_floats(n, out);
        a.pack_stride = fw > fx ? fw : fx;
        if ((a.pack = pack_buffers(be, (size_t)tasks * a.pack_stride)) == NULL)
            return false;
    }
    if (relu)
        cpu_run(be, cpu_tasks(be, n), dense_mask_task, &a);
    cpu_run(be, tasks, dense_backward_task, &a);
    return true;
}

void cpu_dense_backward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                        const float *y, bool relu, float *dy, float *dx, float *dw, float *db)
{
    dense_backward(be, n, in, out, x, w, y, relu, dy, dx, dw, db, false);
}

void cpu_dense_tile_bf16_backward(backend_t *be, int n, int in, int out, const float *x,
                                  const float *w, const float *y, bool relu, float *dy,
                                  float *dx, float *dw, float *db)
{
    if (!dense_backward(be, n, in, out, x, w, y, relu, dy, dx, dw, db, true))
        cpu_dense_backward(be, n, in, out, x, w, y, relu, dy, dx, dw, db);
}

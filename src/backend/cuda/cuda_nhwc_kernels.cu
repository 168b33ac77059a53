/* cuda_nhwc_kernels.cu - the CUDA backend's kernels over the blocked layout
 * in bf16 NHWC (backend.h: blocked_layout, blocked_nhwc, blocked_bf16; with
 * C % 16 == 0 plain NHWC, element (i, c, p) at (i * hw + p) * C + c):
 * relu forward and backward, add (+relu), global average pooling (and
 * the pools and global average pooling over float32 NHWC too), and
 * the conversions cuda_conv.c needs at a layout's edge (NCHW float32 to
 * NHWC, bf16 or float32, and back, also KCRS filters to KRSC and back: the
 * same transpose with n = filters, hw = k * k) and the conv bias + relu. The
 * activations are bf16 (__nv_bfloat16, stored rounded to nearest even by
 * __float2bfloat16_rn, as bf16_io.h's bf16_from_float rounds on the CPU);
 * gradients are float32, or bf16 in the *_g16 backward kernels (backend.h:
 * blocked_bf16_grads). The arithmetic is backend/math.h's, in float32, as
 * the CPU's blocked operations (elementwise.c, pool.c) compute it, so the
 * results are the CPU's bits; tests/gpu/test_gpu_ops.c checks that on a GPU.
 * Built with --fmad=false (Makefile.am) like cuda_kernels.cu.
 */
#include "backend/cuda/cuda_nhwc_kernels.h"

#include <cuda_bf16.h>

#include "backend/math.h"

#include "backend/cuda/cuda_grid.cuh"

/* An activation element of either type read as float32, and a float32
 * stored as one (bf16: rounded to nearest even); the kernels below that
 * read blocked activations are templates over the type: bf16 (the bf16
 * backend's NHWC) or float (float32 NHWC, tf32's layout to be). */
__device__ static float act_ld(float v) { return v; }
__device__ static float act_ld(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ static void act_st(float *p, float v) { *p = v; }
__device__ static void act_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

__global__ void k_relu_bf16(size_t n, const __nv_bfloat16 *x, __nv_bfloat16 *y)
{
    FOR_EACH(i, n) y[i] = __float2bfloat16_rn(tt_relu(__bfloat162float(x[i])));
}

/* Gradient element i of g: float32, or bf16 where g16 (the backend keeps
 * blocked gradients in bf16, backend.h: blocked_bf16_grads), read exactly
 * and stored rounded to nearest even, as sim_grad16.c rounds on the CPU.
 * A run-time flag, not a template: one kernel serves both gradient types
 * (its branch is the same for every thread), so the kernels' code (in
 * every binary, for every architecture) does not double. */
__device__ static float g_load(const void *g, bool g16, size_t i)
{
    return g16 ? __bfloat162float(((const __nv_bfloat16 *)g)[i]) : ((const float *)g)[i];
}

__device__ static void g_store(void *g, bool g16, size_t i, float v)
{
    if (g16)
        ((__nv_bfloat16 *)g)[i] = __float2bfloat16_rn(v);
    else
        ((float *)g)[i] = v;
}

__global__ void k_relu_back_bf16(size_t n, const __nv_bfloat16 *y, bool g16, const void *dy,
                                 void *dx)
{
    FOR_EACH(i, n) g_store(dx, g16, i, tt_relu_grad(__bfloat162float(y[i]), g_load(dy, g16, i)));
}

/* y = a + b in float32, relu if asked, rounded once (elementwise.c's) */
__global__ void k_add_bf16(size_t n, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int relu,
                           __nv_bfloat16 *y)
{
    FOR_EACH(i, n)
    {
        float v = __bfloat162float(a[i]) + __bfloat162float(b[i]);
        y[i] = __float2bfloat16_rn(relu ? tt_relu(v) : v);
    }
}

/* y[i, c] = one fma chain of x / hw over the pixels in order (pool.c's
 * gap_blocked_vectors): one thread per (i, c); adjacent threads read
 * adjacent channels of a pixel, so the loads coalesce. */
template <typename T> __global__ void k_gap_nhwc_forward(int n, int c, int hw, const T *x, float *y)
{
    float inv = 1.0f / (float)hw;
    FOR_EACH(r, (size_t)n * c)
    {
        size_t i = r / (size_t)c, ch = r % (size_t)c;
        const T *p = x + i * (size_t)hw * c + ch;
        float s = 0.0f;
        for (int q = 0; q < hw; q++)
            s = fmaf(act_ld(p[(size_t)q * c]), inv, s);
        y[r] = s;
    }
}

/* dx[i, p, c] = fma(dy[i, c], 1 / hw, 0) (dx NHWC, float32 or bf16) */
__global__ void k_gap_nhwc_backward(int n, int c, int hw, const float *dy, bool g16, void *dx)
{
    float inv = 1.0f / (float)hw;
    FOR_EACH(e, (size_t)n * hw * c)
    {
        size_t ch = e % (size_t)c, i = e / ((size_t)hw * c);
        g_store(dx, g16, e, fmaf(dy[i * c + ch], inv, 0.0f));
    }
}

/* y[i, p, c] = x[i, c, p]: NCHW float32 to NHWC in T (bf16: rounded to
 * nearest even; float: copied), one thread per output element, so the
 * stores coalesce */
template <typename T> __global__ void k_nchw_to_nhwc(int n, int c, int hw, const float *x, T *y)
{
    FOR_EACH(e, (size_t)n * hw * c)
    {
        size_t ch = e % (size_t)c, p = e / (size_t)c % (size_t)hw, i = e / ((size_t)hw * c);
        act_st(&y[e], x[(i * c + ch) * hw + p]);
    }
}

/* y[i, c, p] = float(x[i, p, c]): NHWC in T to NCHW float32 (exact) */
template <typename T> __global__ void k_nhwc_to_nchw(int n, int c, int hw, const T *x, float *y)
{
    FOR_EACH(e, (size_t)n * c * hw)
    {
        size_t p = e % (size_t)hw, ch = e / (size_t)hw % (size_t)c, i = e / ((size_t)hw * c);
        y[e] = act_ld(x[(i * hw + p) * c + ch]);
    }
}

/* y[r, ch] = bf16(relu(float(y) + b[ch])) over NHWC rows (b may be NULL) */
__global__ void k_bias_relu_nhwc_bf16(size_t n, int c, const float *b, int relu, __nv_bfloat16 *y)
{
    FOR_EACH(e, n)
    {
        float v = __bfloat162float(y[e]) + (b != NULL ? b[e % (size_t)c] : 0.0f);
        y[e] = __float2bfloat16_rn(relu ? tt_relu(v) : v);
    }
}

/* ---- pooling from a blocked (bf16 NHWC) x: y blocked (bf16 NHWC) or NCHW
 * float32; the mask and dy in y's layout, dx float32 NHWC. The window
 * arithmetic is backend/math.h's tt_maxpool_window / tt_maxpool_grad /
 * tt_avgpool_window / tt_avgpool_grad over strided planes (same order,
 * same bits); the mask holds the argmax's index in its plane. ---- */

/* Element (i, ch, p) of an [n, c, hw] tensor in NHWC or NCHW */
__device__ static size_t elem_at(bool nhwc, int c, int hw, size_t i, size_t ch, size_t p)
{
    return nhwc ? (i * hw + p) * c + ch : (i * c + ch) * hw + p;
}

/* Output e in y's layout: its image, channel and pixel */
__device__ static void out_of(const window_desc &d, bool y_nhwc, size_t e, size_t *i, size_t *ch,
                              int *o)
{
    size_t ohw = (size_t)d.oh * d.ow;
    if (y_nhwc) {
        *ch = e % d.c;
        *o = (int)(e / d.c % ohw);
        *i = e / (d.c * ohw);
    } else {
        *o = (int)(e % ohw);
        *ch = e / ohw % d.c;
        *i = e / (ohw * d.c);
    }
}

template <typename T>
__global__ void k_maxpool_nhwc_forward(window_desc d, bool y_nhwc, const T *x, void *y,
                                       int32_t *mask)
{
    FOR_EACH(e, (size_t)d.n * d.c * d.oh * d.ow)
    {
        size_t i, ch;
        int o;
        out_of(d, y_nhwc, e, &i, &ch, &o);
        int oy = o / d.ow, ox = o % d.ow, hw = d.h * d.w;
        int y0 = oy * d.stride - d.pad, x0 = ox * d.stride - d.pad;
        int ky0 = y0 < 0 ? -y0 : 0, kx0 = x0 < 0 ? -x0 : 0;
        int ky1 = y0 + d.k > d.h ? d.h - y0 : d.k, kx1 = x0 + d.k > d.w ? d.w - x0 : d.k;
        int32_t at = (y0 + ky0) * d.w + x0 + kx0;
        float best = act_ld(x[elem_at(true, d.c, hw, i, ch, (size_t)at)]);
        for (int ky = ky0; ky < ky1; ky++)
            for (int kx = kx0; kx < kx1; kx++) {
                int q = (y0 + ky) * d.w + x0 + kx;
                float v = act_ld(x[elem_at(true, d.c, hw, i, ch, (size_t)q)]);
                if (v > best || (v != v && best == best)) {
                    best = v;
                    at = q;
                }
            }
        mask[e] = at;
        if (y_nhwc)
            act_st((T *)y + e, best);
        else
            ((float *)y)[e] = best;
    }
}

template <typename T>
__global__ void k_avgpool_nhwc_forward(window_desc d, bool y_nhwc, const T *x, void *y)
{
    FOR_EACH(e, (size_t)d.n * d.c * d.oh * d.ow)
    {
        size_t i, ch;
        int o;
        out_of(d, y_nhwc, e, &i, &ch, &o);
        int oy = o / d.ow, ox = o % d.ow;
        float s = 0.0f;
        for (int ky = 0; ky < d.k; ky++) {
            int iy = oy * d.stride - d.pad + ky;
            if (iy < 0 || iy >= d.h)
                continue;
            for (int kx = 0; kx < d.k; kx++) {
                int ix = ox * d.stride - d.pad + kx;
                if (ix >= 0 && ix < d.w)
                    s += act_ld(x[elem_at(true, d.c, d.h * d.w, i, ch, (size_t)(iy * d.w + ix))]);
            }
        }
        float v = s * (1.0f / (float)(d.k * d.k));
        if (y_nhwc)
            act_st((T *)y + e, v);
        else
            ((float *)y)[e] = v;
    }
}

/* dx (float32 NHWC), one thread per input: the sum in output order of dy
 * over the outputs whose window holds it (max: whose argmax it is) */
__global__ void k_pool_nhwc_backward(window_desc d, bool max, bool y_nhwc, bool dy16,
                                     const void *dy, const int32_t *mask, bool dx16, void *dx)
{
    float inv = 1.0f / (float)(d.k * d.k);
    int ohw = d.oh * d.ow;
    FOR_EACH(e, (size_t)d.n * d.h * d.w * d.c)
    {
        size_t ch = e % d.c, i = e / ((size_t)d.h * d.w * d.c);
        int q = (int)(e / d.c % ((size_t)d.h * d.w)), iy = q / d.w, ix = q % d.w;
        int oy0, oy1, ox0, ox1;
        tt_pool_outputs_of(iy, d.k, d.stride, d.pad, d.oh, &oy0, &oy1);
        tt_pool_outputs_of(ix, d.k, d.stride, d.pad, d.ow, &ox0, &ox1);
        float g = 0.0f;
        for (int oy = oy0; oy < oy1; oy++)
            for (int ox = ox0; ox < ox1; ox++) {
                size_t at = elem_at(y_nhwc, d.c, ohw, i, ch, (size_t)(oy * d.ow + ox));
                if (!max)
                    g += g_load(dy, dy16, at) * inv;
                else if (mask[at] == q)
                    g += g_load(dy, dy16, at);
            }
        g_store(dx, dx16, e, g);
    }
}

extern "C" {

cudaError_t tt_k_relu_bf16(cudaStream_t s, size_t n, const void *x, void *y)
{
    if (n == 0)
        return cudaSuccess;
    k_relu_bf16<<<blocks_for(n), THREADS, 0, s>>>(n, (const __nv_bfloat16 *)x,
                                                   (__nv_bfloat16 *)y);
    return cudaGetLastError();
}

cudaError_t tt_k_relu_back_bf16(cudaStream_t s, bool g16, size_t n, const void *y,
                                const void *dy, void *dx)
{
    if (n == 0)
        return cudaSuccess;
    k_relu_back_bf16<<<blocks_for(n), THREADS, 0, s>>>(n, (const __nv_bfloat16 *)y, g16, dy, dx);
    return cudaGetLastError();
}

cudaError_t tt_k_add_bf16(cudaStream_t s, size_t n, const void *a, const void *b, bool relu,
                          void *y)
{
    if (n == 0)
        return cudaSuccess;
    k_add_bf16<<<blocks_for(n), THREADS, 0, s>>>(n, (const __nv_bfloat16 *)a,
                                                  (const __nv_bfloat16 *)b, relu ? 1 : 0,
                                                  (__nv_bfloat16 *)y);
    return cudaGetLastError();
}

cudaError_t tt_k_gap_nhwc_forward(cudaStream_t s, bool bf16, int n, int c, int hw, const void *x,
                                  float *y)
{
    size_t count = (size_t)n * c;
    if (count == 0)
        return cudaSuccess;
    if (bf16)
        k_gap_nhwc_forward<<<blocks_for(count), THREADS, 0, s>>>(n, c, hw,
                                                                 (const __nv_bfloat16 *)x, y);
    else
        k_gap_nhwc_forward<<<blocks_for(count), THREADS, 0, s>>>(n, c, hw, (const float *)x, y);
    return cudaGetLastError();
}

cudaError_t tt_k_gap_nhwc_backward(cudaStream_t s, bool g16, int n, int c, int hw,
                                   const float *dy, void *dx)
{
    size_t count = (size_t)n * hw * c;
    if (count == 0)
        return cudaSuccess;
    k_gap_nhwc_backward<<<blocks_for(count), THREADS, 0, s>>>(n, c, hw, dy, g16, dx);
    return cudaGetLastError();
}

cudaError_t tt_k_nchw_to_nhwc(cudaStream_t s, bool bf16, int n, int c, int hw, const float *x,
                              void *y)
{
    size_t count = (size_t)n * c * hw;
    if (count == 0)
        return cudaSuccess;
    if (bf16)
        k_nchw_to_nhwc<<<blocks_for(count), THREADS, 0, s>>>(n, c, hw, x, (__nv_bfloat16 *)y);
    else
        k_nchw_to_nhwc<<<blocks_for(count), THREADS, 0, s>>>(n, c, hw, x, (float *)y);
    return cudaGetLastError();
}

cudaError_t tt_k_nhwc_to_nchw(cudaStream_t s, bool bf16, int n, int c, int hw, const void *x,
                              float *y)
{
    size_t count = (size_t)n * c * hw;
    if (count == 0)
        return cudaSuccess;
    if (bf16)
        k_nhwc_to_nchw<<<blocks_for(count), THREADS, 0, s>>>(n, c, hw,
                                                             (const __nv_bfloat16 *)x, y);
    else
        k_nhwc_to_nchw<<<blocks_for(count), THREADS, 0, s>>>(n, c, hw, (const float *)x, y);
    return cudaGetLastError();
}

cudaError_t tt_k_bias_relu_nhwc_bf16(cudaStream_t s, int rows, int c, const float *b, bool relu,
                                     void *y)
{
    size_t count = (size_t)rows * c;
    if (count == 0 || (b == NULL && !relu))
        return cudaSuccess;
    k_bias_relu_nhwc_bf16<<<blocks_for(count), THREADS, 0, s>>>(count, c, b, relu ? 1 : 0,
                                                                (__nv_bfloat16 *)y);
    return cudaGetLastError();
}

cudaError_t tt_k_maxpool_nhwc_forward(cudaStream_t s, bool bf16, window_desc d, const void *x,
                                      void *y, int32_t *mask)
{
    size_t count = (size_t)d.n * d.c * d.oh * d.ow;
    if (count == 0)
        return cudaSuccess;
    if (bf16)
        k_maxpool_nhwc_forward<<<blocks_for(count), THREADS, 0, s>>>(
            d, d.blocked_y, (const __nv_bfloat16 *)x, y, mask);
    else
        k_maxpool_nhwc_forward<<<blocks_for(count), THREADS, 0, s>>>(d, d.blocked_y,
                                                                     (const float *)x, y, mask);
    return cudaGetLastError();
}

cudaError_t tt_k_avgpool_nhwc_forward(cudaStream_t s, bool bf16, window_desc d, const void *x,
                                      void *y)
{
    size_t count = (size_t)d.n * d.c * d.oh * d.ow;
    if (count == 0)
        return cudaSuccess;
    if (bf16)
        k_avgpool_nhwc_forward<<<blocks_for(count), THREADS, 0, s>>>(
            d, d.blocked_y, (const __nv_bfloat16 *)x, y);
    else
        k_avgpool_nhwc_forward<<<blocks_for(count), THREADS, 0, s>>>(d, d.blocked_y,
                                                                     (const float *)x, y);
    return cudaGetLastError();
}

cudaError_t tt_k_pool_nhwc_backward(cudaStream_t s, bool g16, window_desc d, bool max,
                                    const void *dy, const int32_t *mask, void *dx)
{
    size_t count = (size_t)d.n * d.c * d.h * d.w;
    if (count == 0)
        return cudaSuccess;
    /* dy: with g16, a bf16 gradient where y is blocked, an NCHW output's
     * float32 else; without, float32 */
    k_pool_nhwc_backward<<<blocks_for(count), THREADS, 0, s>>>(d, max, d.blocked_y,
                                                               g16 && d.blocked_y, dy, mask, g16,
                                                               dx);
    return cudaGetLastError();
}

} /* extern "C" */

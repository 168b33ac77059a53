/* cuda_nhwc_kernels.cu - the CUDA backend's kernels over the blocked layout
 * in bf16 NHWC (backend.h: blocked_layout, blocked_nhwc, blocked_bf16; with
 * C % 16 == 0 plain NHWC, element (i, c, p) at (i * hw + p) * C + c):
 * relu forward and backward, add (+relu) and global average pooling. The
 * activations are bf16 (__nv_bfloat16, stored rounded to nearest even by
 * __float2bfloat16_rn, as bf16_io.h's bf16_from_float rounds on the CPU);
 * gradients are float32. The arithmetic is backend/math.h's, in float32, as
 * the CPU's blocked operations (elementwise.c, pool.c) compute it, so the
 * results are the CPU's bits; tests/gpu/test_gpu_ops.c checks that on a GPU.
 * Built with --fmad=false (Makefile.am) like cuda_kernels.cu.
 */
#include "backend/cuda/cuda_nhwc_kernels.h"

#include <cuda_bf16.h>

#include "backend/math.h"

#define THREADS 256
#define MAX_BLOCKS 65535

static unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

#define FOR_EACH(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)blockDim.x * gridDim.x)

__global__ void k_relu_bf16(size_t n, const __nv_bfloat16 *x, __nv_bfloat16 *y)
{
    FOR_EACH(i, n) y[i] = __float2bfloat16_rn(tt_relu(__bfloat162float(x[i])));
}

__global__ void k_relu_back_bf16(size_t n, const __nv_bfloat16 *y, const float *dy, float *dx)
{
    FOR_EACH(i, n) dx[i] = tt_relu_grad(__bfloat162float(y[i]), dy[i]);
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
__global__ void k_gap_nhwc_forward(int n, int c, int hw, const __nv_bfloat16 *x, float *y)
{
    float inv = 1.0f / (float)hw;
    FOR_EACH(r, (size_t)n * c)
    {
        size_t i = r / (size_t)c, ch = r % (size_t)c;
        const __nv_bfloat16 *p = x + i * (size_t)hw * c + ch;
        float s = 0.0f;
        for (int q = 0; q < hw; q++)
            s = fmaf(__bfloat162float(p[(size_t)q * c]), inv, s);
        y[r] = s;
    }
}

/* dx[i, p, c] = fma(dy[i, c], 1 / hw, 0) (float32 gradient, NHWC) */
__global__ void k_gap_nhwc_backward(int n, int c, int hw, const float *dy, float *dx)
{
    float inv = 1.0f / (float)hw;
    FOR_EACH(e, (size_t)n * hw * c)
    {
        size_t ch = e % (size_t)c, i = e / ((size_t)hw * c);
        dx[e] = fmaf(dy[i * c + ch], inv, 0.0f);
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

cudaError_t tt_k_relu_back_bf16(cudaStream_t s, size_t n, const void *y, const float *dy,
                                float *dx)
{
    if (n == 0)
        return cudaSuccess;
    k_relu_back_bf16<<<blocks_for(n), THREADS, 0, s>>>(n, (const __nv_bfloat16 *)y, dy, dx);
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

cudaError_t tt_k_gap_nhwc_forward(cudaStream_t s, int n, int c, int hw, const void *x, float *y)
{
    size_t count = (size_t)n * c;
    if (count == 0)
        return cudaSuccess;
    k_gap_nhwc_forward<<<blocks_for(count), THREADS, 0, s>>>(n, c, hw,
                                                             (const __nv_bfloat16 *)x, y);
    return cudaGetLastError();
}

cudaError_t tt_k_gap_nhwc_backward(cudaStream_t s, int n, int c, int hw, const float *dy,
                                   float *dx)
{
    size_t count = (size_t)n * hw * c;
    if (count == 0)
        return cudaSuccess;
    k_gap_nhwc_backward<<<blocks_for(count), THREADS, 0, s>>>(n, c, hw, dy, dx);
    return cudaGetLastError();
}

} /* extern "C" */

/* cuda_kernels.cu - the element-wise, pooling, loss and optimizer kernels of
 * the CUDA backend. Each thread computes elements through the same
 * `static inline` functions of backend/math.h the CPU backend loops over, so
 * the CPU tests check this arithmetic; built with --fmad=false (Makefile.am)
 * so that a*b+c is not fused where the CPU does not fuse it, and the
 * optimizers, dropout and pooling give the CPU's bits.
 *
 * Reductions (bias gradients, the loss) sum in a fixed order that does not
 * depend on timing: same inputs, same bits, run after run.
 */
#include "backend/cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_grid.cuh"

/* ---- element-wise ---- */

__global__ void k_relu_forward(size_t n, const float *x, float *y)
{
    FOR_EACH(i, n) y[i] = tt_relu(x[i]);
}

__global__ void k_relu_backward(size_t n, const float *y, const float *dy, float *dx)
{
    FOR_EACH(i, n) dx[i] = tt_relu_grad(y[i], dy[i]);
}

__global__ void k_dropout(size_t n, float rate, uint64_t seed, const float *x, float *y,
                          float *mask)
{
    FOR_EACH(i, n)
    {
        float f = tt_dropout_factor(seed, i, rate);
        mask[i] = f;
        y[i] = x[i] * f;
    }
}

__global__ void k_mul(size_t n, const float *a, const float *b, float *y)
{
    FOR_EACH(i, n) y[i] = a[i] * b[i];
}

__global__ void k_axpy(size_t n, float alpha, const float *x, float *y)
{
    FOR_EACH(i, n) y[i] += alpha * x[i];
}

__global__ void k_add(size_t n, const float *a, const float *b, int relu, float *y)
{
    FOR_EACH(i, n)
    {
        float v = a[i] + b[i];
        y[i] = relu ? tt_relu(v) : v;
    }
}

__global__ void k_scale(size_t n, float alpha, float *x)
{
    FOR_EACH(i, n) x[i] *= alpha;
}

__global__ void k_add_scalar(size_t n, float alpha, float *x)
{
    FOR_EACH(i, n) x[i] += alpha;
}

/* ---- mixed precision: float32 to and from the 16-bit types ---- */

__global__ void k_to_bf16(size_t n, const float *x, __nv_bfloat16 *y)
{
    FOR_EACH(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void k_to_fp16(size_t n, const float *x, __half *y)
{
    FOR_EACH(i, n) y[i] = __float2half_rn(x[i]);
}

__global__ void k_from_bf16(size_t n, const __nv_bfloat16 *x, float *y)
{
    FOR_EACH(i, n) y[i] = __bfloat162float(x[i]);
}

__global__ void k_from_fp16(size_t n, const __half *x, float *y)
{
    FOR_EACH(i, n) y[i] = __half2float(x[i]);
}

/* ---- timing data: uniform in [-1, 1) from (seed, i) alone (splitmix64),
 * so that an algorithm search times real-looking operands, not zeros ---- */

static __device__ float uniform_pm1(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void k_fill_float(size_t n, uint64_t seed, float *y)
{
    FOR_EACH(i, n) y[i] = uniform_pm1(seed, i);
}

__global__ void k_fill_bf16(size_t n, uint64_t seed, __nv_bfloat16 *y)
{
    FOR_EACH(i, n) y[i] = __float2bfloat16_rn(uniform_pm1(seed, i));
}

__global__ void k_fill_fp16(size_t n, uint64_t seed, __half *y)
{
    FOR_EACH(i, n) y[i] = __float2half_rn(uniform_pm1(seed, i));
}

/* threads that find one all write 1: the same value, no order needed */
__global__ void k_not_finite(size_t n, const float *x, int *flag)
{
    FOR_EACH(i, n)
    {
        if (tt_not_finite(x[i]))
            *flag = 1;
    }
}

__global__ void k_sgd(size_t n, float lr, float momentum, int nesterov, float weight_decay,
                      int first_step, float *w, const float *g, float *buf)
{
    FOR_EACH(i, n)
    {
        float unused = 0.0f;
        w[i] = tt_sgd_update(w[i], g[i], buf != NULL ? &buf[i] : &unused, lr,
                             buf != NULL ? momentum : 0.0f, nesterov, weight_decay, first_step);
    }
}

__global__ void k_adam(size_t n, tt_adam_consts c, float *w, const float *g, float *m, float *v)
{
    FOR_EACH(i, n) w[i] = tt_adam_update(w[i], g[i], &m[i], &v[i], &c);
}

/* k_sgd, k_adam and k_scale with the step's scalars read from device memory
 * when they run (a captured step's replays: backend_step_vars) */
__global__ void k_sgd_vars(size_t n, const backend_step_vars *v, float momentum, int nesterov,
                           float weight_decay, float *w, const float *g, float *buf)
{
    float lr = v->lr;
    int first_step = v->first_step;
    FOR_EACH(i, n)
    {
        float unused = 0.0f;
        w[i] = tt_sgd_update(w[i], g[i], buf != NULL ? &buf[i] : &unused, lr,
                             buf != NULL ? momentum : 0.0f, nesterov, weight_decay, first_step);
    }
}

__global__ void k_adam_vars(size_t n, tt_adam_consts c, const backend_step_vars *v, float *w,
                            const float *g, float *m, float *vsq)
{
    c.lr = v->lr;
    c.step_size = v->adam_step_size;
    c.bias_correction2_sqrt = v->adam_bc2_sqrt;
    FOR_EACH(i, n) w[i] = tt_adam_update(w[i], g[i], &m[i], &vsq[i], &c);
}

__global__ void k_decay_vars(size_t n, const backend_step_vars *v, float *w)
{
    float alpha = v->decay;
    FOR_EACH(i, n) w[i] *= alpha;
}

__global__ void k_dropout_vars(size_t n, float rate, const uint64_t *seed_p, const float *x,
                               float *y, float *mask)
{
    uint64_t seed = *seed_p;
    FOR_EACH(i, n)
    {
        float f = tt_dropout_factor(seed, i, rate);
        mask[i] = f;
        y[i] = x[i] * f;
    }
}

/* y = relu(y + b[channel]) over [rows, channels, inner] */
__global__ void k_bias_relu(size_t n, int channels, int inner, const float *b, int relu, float *y)
{
    FOR_EACH(i, n)
    {
        float v = y[i];
        if (b != NULL)
            v = v + b[(i / (size_t)inner) % (size_t)channels];
        y[i] = relu ? tt_relu(v) : v;
    }
}

/* The dense bias gradient (rows = the batch): one thread per column sums
 * its rows in order, from 0, as the CPU backend does - the same bits. (A
 * conv's gradient has far more rows a channel: its bias gradient is
 * cuda_bn_nhwc.cu's tt_k_channel_sum, in parallel partials.) */
__global__ void k_column_sum(int rows, int cols, const float *dy, float *db)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols)
        return;
    float s = 0.0f;
    for (int r = 0; r < rows; r++)
        s += dy[(size_t)r * cols + j];
    db[j] = s;
}

/* ---- pooling: one thread per output (forward) or per input (backward) ---- */

__global__ void k_maxpool_forward(window_desc d, const float *x, float *y, int32_t *mask)
{
    size_t per = (size_t)d.oh * d.ow, n = (size_t)d.n * d.c * per;
    FOR_EACH(i, n)
    {
        size_t plane = i / per;
        int o = (int)(i % per), oy = o / d.ow, ox = o % d.ow;
        y[i] = tt_maxpool_window(d.h, d.w, d.k, d.stride, d.pad, x + plane * d.h * d.w, oy, ox,
                                 &mask[i]);
    }
}

__global__ void k_maxpool_backward(window_desc d, const float *dy, const int32_t *mask, float *dx)
{
    size_t per = (size_t)d.h * d.w, out = (size_t)d.oh * d.ow, n = (size_t)d.n * d.c * per;
    FOR_EACH(i, n)
    {
        size_t plane = i / per;
        int q = (int)(i % per);
        dx[i] = tt_maxpool_grad(d.w, d.oh, d.ow, d.k, d.stride, d.pad, dy + plane * out,
                                mask + plane * out, q / d.w, q % d.w);
    }
}

__global__ void k_avgpool_forward(window_desc d, const float *x, float *y)
{
    size_t per = (size_t)d.oh * d.ow, n = (size_t)d.n * d.c * per;
    FOR_EACH(i, n)
    {
        size_t plane = i / per;
        int o = (int)(i % per);
        y[i] = tt_avgpool_window(d.h, d.w, d.k, d.stride, d.pad, x + plane * d.h * d.w,
                                 o / d.ow, o % d.ow);
    }
}

__global__ void k_avgpool_backward(window_desc d, const float *dy, float *dx)
{
    size_t per = (size_t)d.h * d.w, out = (size_t)d.oh * d.ow, n = (size_t)d.n * d.c * per;
    FOR_EACH(i, n)
    {
        size_t plane = i / per;
        int q = (int)(i % per);
        dx[i] = tt_avgpool_grad(d.oh, d.ow, d.k, d.stride, d.pad, dy + plane * out, q / d.w,
                                q % d.w);
    }
}

/* ---- loss: one block; thread t takes rows t, t + THREADS, ...; the sums
 * meet in a fixed tree ---- */

__global__ void k_softmax_xent(int n, int classes, const float *logits, const int32_t *labels,
                               float smoothing, float *dlogits, tt_xent_result *out)
{
    __shared__ double loss[THREADS];
    __shared__ int right[THREADS];
    double l = 0.0;
    int c = 0;
    for (int r = threadIdx.x; r < n; r += blockDim.x) {
        int arg;
        l += tt_softmax_xent_row(logits + (size_t)r * classes, classes, labels[r], n, smoothing,
                                 dlogits != NULL ? dlogits + (size_t)r * classes : NULL, &arg);
        c += arg == labels[r];
    }
    loss[threadIdx.x] = l;
    right[threadIdx.x] = c;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) {
            loss[threadIdx.x] += loss[threadIdx.x + half];
            right[threadIdx.x] += right[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out->loss = loss[0];
        out->correct = right[0];
    }
}

/* ---- sum of squares (sumsq_plan.h): a block a partial of a list of
 * ranges, then a block a range merging its partials; both in double, a
 * thread's terms in order, then a fixed tree ---- */

/* The block's TT_SUMSQ_THREADS sums in acc, added up: the total in acc[0] */
static __device__ void sumsq_tree(double *acc)
{
    __syncthreads();
    for (int half = TT_SUMSQ_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            acc[threadIdx.x] += acc[threadIdx.x + half];
        __syncthreads();
    }
}

/* x[i]^2 over i = sp.i0, + TT_SUMSQ_THREADS, ... below sp.i1, added in
 * that order; eight loads issued before their additions (a bounds check
 * between loads would leave one in flight a thread) */
static __device__ double sumsq_thread(const float *x, tt_sumsq_span sp)
{
    const size_t T = TT_SUMSQ_THREADS;
    double s = 0.0;
    size_t i = sp.i0;
    for (; i + 7 * T < sp.i1; i += 8 * T) {
        double v[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = x[i + k * T];
#pragma unroll
        for (int k = 0; k < 8; k++)
            s += v[k] * v[k];
    }
    for (; i < sp.i1; i += T) {
        double v = x[i];
        s += v * v;
    }
    return s;
}

__global__ void __launch_bounds__(TT_SUMSQ_THREADS)
    k_sumsq_partials(const tt_sumsq_range *r, int n, double *part)
{
    __shared__ double acc[TT_SUMSQ_THREADS];
    int b = (int)blockIdx.x;
    tt_sumsq_range a = r[tt_sumsq_find(r, n, b)];
    tt_sumsq_span sp = tt_sumsq_span_of(a, b - a.first, (int)threadIdx.x);
    acc[threadIdx.x] = sumsq_thread(a.x, sp);
    sumsq_tree(acc);
    if (threadIdx.x == 0)
        part[b] = acc[0];
}

__global__ void __launch_bounds__(TT_SUMSQ_THREADS)
    k_sumsq_merge(const tt_sumsq_range *r, const double *part, double *out)
{
    __shared__ double acc[TT_SUMSQ_THREADS];
    tt_sumsq_range a = r[blockIdx.x];
    double s = 0.0;
    for (int p = (int)threadIdx.x; p < a.parts; p += TT_SUMSQ_THREADS)
        s += part[a.first + p];
    acc[threadIdx.x] = s;
    sumsq_tree(acc);
    if (threadIdx.x == 0)
        out[blockIdx.x] = acc[0]; /* 0 for an empty range */
}

/* ---- batchnorm parameter gradients: one block per channel ---- */

__global__ void k_bn_param_grads(int n, int c, int hw, const float *x, const float *dy,
                                 const float *mean, const float *invstd, float *dgamma,
                                 float *dbeta)
{
    __shared__ double sdy[THREADS], sdyx[THREADS];
    int ch = blockIdx.x;
    size_t per = (size_t)n * hw;
    float mu = mean[ch];
    double a = 0.0, b = 0.0;
    for (size_t q = threadIdx.x; q < per; q += blockDim.x) {
        size_t off = ((q / hw) * c + ch) * hw + q % hw;
        a += dy[off];
        b += (double)dy[off] * (x[off] - mu);
    }
    sdy[threadIdx.x] = a;
    sdyx[threadIdx.x] = b;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) {
            sdy[threadIdx.x] += sdy[threadIdx.x + half];
            sdyx[threadIdx.x] += sdyx[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (dbeta != NULL)
            dbeta[ch] = (float)sdy[0];
        if (dgamma != NULL)
            dgamma[ch] = (float)(sdyx[0] * invstd[ch]);
    }
}

/* ---- launchers ---- */

extern "C" {

cudaError_t tt_k_relu_forward(cudaStream_t s, size_t n, const float *x, float *y)
{
    if (n == 0)
        return cudaSuccess;
    k_relu_forward<<<blocks_for(n), THREADS, 0, s>>>(n, x, y);
    return cudaGetLastError();
}

cudaError_t tt_k_relu_backward(cudaStream_t s, size_t n, const float *y, const float *dy,
                               float *dx)
{
    if (n == 0)
        return cudaSuccess;
    k_relu_backward<<<blocks_for(n), THREADS, 0, s>>>(n, y, dy, dx);
    return cudaGetLastError();
}

cudaError_t tt_k_dropout(cudaStream_t s, size_t n, float rate, uint64_t seed, const float *x,
                         float *y, float *mask)
{
    if (n == 0)
        return cudaSuccess;
    k_dropout<<<blocks_for(n), THREADS, 0, s>>>(n, rate, seed, x, y, mask);
    return cudaGetLastError();
}

cudaError_t tt_k_mul(cudaStream_t s, size_t n, const float *a, const float *b, float *y)
{
    if (n == 0)
        return cudaSuccess;
    k_mul<<<blocks_for(n), THREADS, 0, s>>>(n, a, b, y);
    return cudaGetLastError();
}

cudaError_t tt_k_axpy(cudaStream_t s, size_t n, float alpha, const float *x, float *y)
{
    if (n == 0)
        return cudaSuccess;
    k_axpy<<<blocks_for(n), THREADS, 0, s>>>(n, alpha, x, y);
    return cudaGetLastError();
}

cudaError_t tt_k_add(cudaStream_t s, size_t n, const float *a, const float *b, bool relu,
                     float *y)
{
    if (n == 0)
        return cudaSuccess;
    k_add<<<blocks_for(n), THREADS, 0, s>>>(n, a, b, relu ? 1 : 0, y);
    return cudaGetLastError();
}

cudaError_t tt_k_scale(cudaStream_t s, size_t n, float alpha, float *x)
{
    if (n == 0)
        return cudaSuccess;
    k_scale<<<blocks_for(n), THREADS, 0, s>>>(n, alpha, x);
    return cudaGetLastError();
}

cudaError_t tt_k_add_scalar(cudaStream_t s, size_t n, float alpha, float *x)
{
    if (n == 0)
        return cudaSuccess;
    k_add_scalar<<<blocks_for(n), THREADS, 0, s>>>(n, alpha, x);
    return cudaGetLastError();
}

cudaError_t tt_k_fill_uniform(cudaStream_t s, size_t n, tt_elem_t t, uint64_t seed, void *y)
{
    if (n == 0)
        return cudaSuccess;
    if (t == TT_ELEM_BF16)
        k_fill_bf16<<<blocks_for(n), THREADS, 0, s>>>(n, seed, (__nv_bfloat16 *)y);
    else if (t == TT_ELEM_FP16)
        k_fill_fp16<<<blocks_for(n), THREADS, 0, s>>>(n, seed, (__half *)y);
    else
        k_fill_float<<<blocks_for(n), THREADS, 0, s>>>(n, seed, (float *)y);
    return cudaGetLastError();
}

cudaError_t tt_k_to_half(cudaStream_t s, size_t n, bool bf16, const float *x, void *y)
{
    if (n == 0)
        return cudaSuccess;
    if (bf16)
        k_to_bf16<<<blocks_for(n), THREADS, 0, s>>>(n, x, (__nv_bfloat16 *)y);
    else
        k_to_fp16<<<blocks_for(n), THREADS, 0, s>>>(n, x, (__half *)y);
    return cudaGetLastError();
}

cudaError_t tt_k_from_half(cudaStream_t s, size_t n, bool bf16, const void *x, float *y)
{
    if (n == 0)
        return cudaSuccess;
    if (bf16)
        k_from_bf16<<<blocks_for(n), THREADS, 0, s>>>(n, (const __nv_bfloat16 *)x, y);
    else
        k_from_fp16<<<blocks_for(n), THREADS, 0, s>>>(n, (const __half *)x, y);
    return cudaGetLastError();
}

cudaError_t tt_k_not_finite(cudaStream_t s, size_t n, const float *x, int *flag)
{
    cudaError_t rc = cudaMemsetAsync(flag, 0, sizeof(int), s);
    if (rc != cudaSuccess || n == 0)
        return rc;
    k_not_finite<<<blocks_for(n), THREADS, 0, s>>>(n, x, flag);
    return cudaGetLastError();
}

cudaError_t tt_k_sumsq(cudaStream_t s, const tt_sumsq_range *r, int n, int parts, double *part,
                       double *out)
{
    if (n <= 0)
        return cudaSuccess;
    if (parts > 0) {
        k_sumsq_partials<<<(unsigned)parts, TT_SUMSQ_THREADS, 0, s>>>(r, n, part);
        cudaError_t rc = cudaGetLastError();
        if (rc != cudaSuccess)
            return rc;
    }
    k_sumsq_merge<<<(unsigned)n, TT_SUMSQ_THREADS, 0, s>>>(r, part, out);
    return cudaGetLastError();
}

cudaError_t tt_k_sgd(cudaStream_t s, size_t n, float lr, float momentum, bool nesterov,
                     float weight_decay, bool first_step, float *w, const float *g, float *buf)
{
    if (n == 0)
        return cudaSuccess;
    k_sgd<<<blocks_for(n), THREADS, 0, s>>>(n, lr, momentum, nesterov ? 1 : 0, weight_decay,
                                             first_step ? 1 : 0, w, g,
                                             momentum != 0.0f ? buf : NULL);
    return cudaGetLastError();
}

cudaError_t tt_k_adam(cudaStream_t s, size_t n, tt_adam_consts c, float *w, const float *g,
                      float *m, float *v)
{
    if (n == 0)
        return cudaSuccess;
    k_adam<<<blocks_for(n), THREADS, 0, s>>>(n, c, w, g, m, v);
    return cudaGetLastError();
}

cudaError_t tt_k_sgd_vars(cudaStream_t s, size_t n, const backend_step_vars *v, float momentum,
                          bool nesterov, float weight_decay, float *w, const float *g, float *buf)
{
    if (n == 0)
        return cudaSuccess;
    k_sgd_vars<<<blocks_for(n), THREADS, 0, s>>>(n, v, momentum, nesterov ? 1 : 0, weight_decay,
                                                  w, g, momentum != 0.0f ? buf : NULL);
    return cudaGetLastError();
}

cudaError_t tt_k_adam_vars(cudaStream_t s, size_t n, tt_adam_consts c,
                           const backend_step_vars *v, float *w, const float *g, float *m,
                           float *vsq)
{
    if (n == 0)
        return cudaSuccess;
    k_adam_vars<<<blocks_for(n), THREADS, 0, s>>>(n, c, v, w, g, m, vsq);
    return cudaGetLastError();
}

cudaError_t tt_k_dropout_vars(cudaStream_t s, size_t n, float rate, const uint64_t *seed,
                              const float *x, float *y, float *mask)
{
    if (n == 0)
        return cudaSuccess;
    k_dropout_vars<<<blocks_for(n), THREADS, 0, s>>>(n, rate, seed, x, y, mask);
    return cudaGetLastError();
}

cudaError_t tt_k_decay_vars(cudaStream_t s, size_t n, const backend_step_vars *v, float *w)
{
    if (n == 0)
        return cudaSuccess;
    k_decay_vars<<<blocks_for(n), THREADS, 0, s>>>(n, v, w);
    return cudaGetLastError();
}

cudaError_t tt_k_bias_relu(cudaStream_t s, int rows, int channels, int inner, const float *b,
                           bool relu, float *y)
{
    size_t n = (size_t)rows * channels * inner;
    if (n == 0 || (b == NULL && !relu))
        return cudaSuccess;
    k_bias_relu<<<blocks_for(n), THREADS, 0, s>>>(n, channels, inner, b, relu ? 1 : 0, y);
    return cudaGetLastError();
}

cudaError_t tt_k_dense_bias_grad(cudaStream_t s, int rows, int cols, const float *dy, float *db)
{
    if (cols <= 0)
        return cudaSuccess;
    k_column_sum<<<(cols + THREADS - 1) / THREADS, THREADS, 0, s>>>(rows, cols, dy, db);
    return cudaGetLastError();
}

cudaError_t tt_k_maxpool_forward(cudaStream_t s, window_desc d, const float *x, float *y,
                                 int32_t *mask)
{
    size_t n = (size_t)d.n * d.c * d.oh * d.ow;
    if (n == 0)
        return cudaSuccess;
    k_maxpool_forward<<<blocks_for(n), THREADS, 0, s>>>(d, x, y, mask);
    return cudaGetLastError();
}

cudaError_t tt_k_maxpool_backward(cudaStream_t s, window_desc d, const float *dy,
                                  const int32_t *mask, float *dx)
{
    size_t n = (size_t)d.n * d.c * d.h * d.w;
    if (n == 0)
        return cudaSuccess;
    k_maxpool_backward<<<blocks_for(n), THREADS, 0, s>>>(d, dy, mask, dx);
    return cudaGetLastError();
}

cudaError_t tt_k_avgpool_forward(cudaStream_t s, window_desc d, const float *x, float *y)
{
    size_t n = (size_t)d.n * d.c * d.oh * d.ow;
    if (n == 0)
        return cudaSuccess;
    k_avgpool_forward<<<blocks_for(n), THREADS, 0, s>>>(d, x, y);
    return cudaGetLastError();
}

cudaError_t tt_k_avgpool_backward(cudaStream_t s, window_desc d, const float *dy, float *dx)
{
    size_t n = (size_t)d.n * d.c * d.h * d.w;
    if (n == 0)
        return cudaSuccess;
    k_avgpool_backward<<<blocks_for(n), THREADS, 0, s>>>(d, dy, dx);
    return cudaGetLastError();
}

cudaError_t tt_k_softmax_xent(cudaStream_t s, int n, int classes, const float *logits,
                              const int32_t *labels, float smoothing, float *dlogits,
                              tt_xent_result *out)
{
    k_softmax_xent<<<1, THREADS, 0, s>>>(n, classes, logits, labels, smoothing, dlogits, out);
    return cudaGetLastError();
}

cudaError_t tt_k_bn_param_grads(cudaStream_t s, int n, int c, int hw, const float *x,
                                const float *dy, const float *mean, const float *invstd,
                                float *dgamma, float *dbeta)
{
    if (c <= 0)
        return cudaSuccess;
    k_bn_param_grads<<<c, THREADS, 0, s>>>(n, c, hw, x, dy, mean, invstd, dgamma, dbeta);
    return cudaGetLastError();
}

} /* extern "C" */

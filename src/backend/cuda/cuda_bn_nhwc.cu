/* cuda_bn_nhwc.cu - batchnorm's kernels over NHWC activations, float32 or
 * bf16, with the residual add and relu fused in, and the conv bias gradient's
 * per-channel sums on the same split (cuda_bn_nhwc.h says what each
 * computes and in which order it sums).
 *
 * Threads: a CTA covers one 16-channel tile (the blocked layout's block)
 * of a range of rows; each thread loads 16 bytes of a row (VEC channels: 4
 * floats or 8 bf16), TX = 16 / VEC threads side by side cover the tile,
 * TY = 256 / TX threads walk the rows ty, ty + TY, ... of the range. The
 * reductions then combine the TY threads of a tile in a fixed tree, and a
 * second kernel (a CTA a channel) the CTAs' partials, in double, each
 * thread a fixed subset in order and the threads in a fixed tree. Built with
 * --fmad=false (Makefile.am): a*b+c rounds twice, as the CPU's batchnorm
 * computes it.
 */
#include "backend/cuda/cuda_bn_nhwc.h"

#include <cuda_bf16.h>

#include "backend/cuda/cuda_grid.cuh"
#include "backend/math.h"

#define BN_THREADS THREADS /* 256: also the element-wise kernels' blocks */
#define BN_TILE 16
static_assert(BN_THREADS == TT_COLSUM_THREADS, "the channel sums' positions assume these CTAs");

/* ---- 16 bytes of an activation as VEC floats, and back ---- */

template <typename T> struct act;

template <> struct act<float> {
    static constexpr int VEC = 4;
    static __device__ void load(const float *p, float *v)
    {
        float4 q = *reinterpret_cast<const float4 *>(p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
    static __device__ void store(float *p, const float *v)
    {
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    }
    static __device__ float round(float v) { return v; }
};

template <> struct act<__nv_bfloat16> {
    static constexpr int VEC = 8;
    static __device__ void load(const __nv_bfloat16 *p, float *v)
    {
        uint4 q = *reinterpret_cast<const uint4 *>(p);
        const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&q);
        for (int i = 0; i < 4; i++) {
            v[2 * i] = __low2float(h[i]);
            v[2 * i + 1] = __high2float(h[i]);
        }
    }
    static __device__ void store(__nv_bfloat16 *p, const float *v)
    {
        uint4 q;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&q);
        for (int i = 0; i < 4; i++)
            h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        *reinterpret_cast<uint4 *>(p) = q;
    }
    static __device__ float round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
};

/* n floats of a gradient (n a multiple of 4, 16-byte aligned) */
static __device__ void load_f(const float *p, float *v, int n)
{
    for (int i = 0; i < n; i += 4) {
        float4 q = *reinterpret_cast<const float4 *>(p + i);
        v[i] = q.x, v[i + 1] = q.y, v[i + 2] = q.z, v[i + 3] = q.w;
    }
}

static __device__ void store_f(float *p, const float *v, int n)
{
    for (int i = 0; i < n; i += 4)
        *reinterpret_cast<float4 *>(p + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
}

/* n elements of a gradient into floats and back: float32, or bf16 where
 * g16 (the backend keeps blocked gradients in bf16, backend.h:
 * blocked_bf16_grads; only with bf16 activations, so n = VEC = 8, 16
 * bytes), stored rounded to nearest even. A run-time flag, the same for
 * every thread, so each kernel is built once for both gradient types. */
static __device__ void load_g(const void *p, bool g16, float *v, int n)
{
    if (!g16)
        load_f((const float *)p, v, n);
    else
        for (int i = 0; i < n; i += 8)
            act<__nv_bfloat16>::load((const __nv_bfloat16 *)p + i, v + i);
}

static __device__ void store_g(void *p, bool g16, const float *v, int n)
{
    if (!g16)
        store_f((float *)p, v, n);
    else
        for (int i = 0; i < n; i += 8)
            act<__nv_bfloat16>::store((__nv_bfloat16 *)p + i, v + i);
}

/* element e of a gradient of g16's type */
static __device__ const void *g_at(const void *p, bool g16, size_t e)
{
    if (g16)
        return (const __nv_bfloat16 *)p + e;
    return (const float *)p + e;
}

/* This thread's place in a tile kernel (k_bn_stats, k_bn_grad_sums): ty
 * its row offset among the TY threads of its channels, ch the first of
 * its VEC channels, rows [r0, r1) the CTA's. */
struct tile_pos {
    int ty, ch, r0, r1;
};

template <int VEC> static __device__ tile_pos tile_of(const tt_bn_grid &g)
{
    constexpr int TX = BN_TILE / VEC;
    tile_pos p;
    p.ty = threadIdx.x / TX;
    p.ch = blockIdx.x * BN_TILE + threadIdx.x % TX * VEC;
    p.r0 = blockIdx.y * g.rows;
    p.r1 = min(p.r0 + g.rows, g.m);
    return p;
}

/* The CTA's two partials of each of the VEC channels from ch, written by
 * the tile's row-0 threads: part[CTA row][channel] = (a, b). */
template <int VEC>
static __device__ void store_partials(const tt_bn_grid &g, const tile_pos &p, const float *a,
                                      const float *b, float *part)
{
    if (p.ty != 0)
        return;
    for (int j = 0; j < VEC; j++) {
        size_t at = ((size_t)blockIdx.y * g.c + p.ch + j) * 2;
        part[at] = a[j];
        part[at + 1] = b[j];
    }
}

/* x and dy at element e, dy (of g16's type) masked by relu where y is set
 * (tt_relu_grad) */
template <typename T>
static __device__ void load_x_dy(const T *x, const T *y, bool g16, const void *dy, size_t e,
                                 bool relu, float *xv, float *gv)
{
    constexpr int VEC = act<T>::VEC;
    act<T>::load(x + e, xv);
    load_g(g_at(dy, g16, e), g16, gv, VEC);
    if (relu) {
        float yv[VEC];
        act<T>::load(y + e, yv);
        for (int j = 0; j < VEC; j++)
            gv[j] = tt_relu_grad(yv[j], gv[j]);
    }
}

/* ---- statistics ---- */

/* (n, mean, m2) += (nb, meanb, m2b): Chan et al.'s merge of two Welford
 * summaries; n == 0 takes the other side as it is. */
template <typename F>
static __device__ void chan_merge(F &n, F &mean, F &m2, F nb, F meanb, F m2b)
{
    if (nb == 0)
        return;
    if (n == 0) {
        n = nb, mean = meanb, m2 = m2b;
        return;
    }
    F nt = n + nb, d = meanb - mean;
    mean = mean + d * (nb / nt);
    m2 = m2 + m2b + d * d * (n * nb / nt);
    n = nt;
}

template <typename T>
__global__ void __launch_bounds__(BN_THREADS) k_bn_stats(const T *x, tt_bn_grid g, float *part)
{
    constexpr int VEC = act<T>::VEC, TX = BN_TILE / VEC, TY = BN_THREADS / TX;
    __shared__ float s_n[BN_THREADS], s_mean[BN_THREADS][VEC], s_m2[BN_THREADS][VEC];
    const tile_pos p = tile_of<VEC>(g);
    int ty = p.ty;
    float n = 0, mean[VEC], m2[VEC], v[VEC];
    for (int j = 0; j < VEC; j++)
        mean[j] = m2[j] = 0;
    for (int r = p.r0 + ty; r < p.r1; r += TY) { /* Welford, row by row */
        act<T>::load(x + (size_t)r * g.c + p.ch, v);
        n += 1;
        for (int j = 0; j < VEC; j++) {
            float d = v[j] - mean[j];
            mean[j] += d / n;
            m2[j] += d * (v[j] - mean[j]);
        }
    }
    /* the TY threads of this channel group: a fixed tree */
    for (int half = TY / 2; half >= 1; half /= 2) {
        s_n[threadIdx.x] = n;
        for (int j = 0; j < VEC; j++)
            s_mean[threadIdx.x][j] = mean[j], s_m2[threadIdx.x][j] = m2[j];
        __syncthreads();
        if (ty < half) {
            int o = threadIdx.x + half * TX;
            float nb = s_n[o], na = n;
            for (int j = 0; j < VEC; j++) {
                n = na;
                chan_merge(n, mean[j], m2[j], nb, s_mean[o][j], s_m2[o][j]);
            }
        }
        __syncthreads();
    }
    store_partials<VEC>(g, p, mean, m2, part);
}

/* A CTA a channel: thread t merges partials t, t + 256, ... in order, in
 * double, then the threads merge in a fixed tree (a channel of few
 * channels may have a thousand partials: one thread for them all took
 * tens of microseconds). */
__global__ void __launch_bounds__(BN_THREADS)
    k_bn_stats_finish(tt_bn_grid g, const float *part, const float *gamma, const float *beta,
                      float *running_mean, float *running_var, float momentum, float eps,
                      bool training, float *save_mean, float *save_invstd, float *k)
{
    __shared__ double s_n[BN_THREADS], s_mu[BN_THREADS], s_m2[BN_THREADS];
    int ch = blockIdx.x, t = threadIdx.x;
    double n = 0, mu = 0, m2 = 0;
    for (int p = t; training && p < g.g; p += BN_THREADS) {
        int rows = min(g.rows, g.m - p * g.rows);
        size_t at = ((size_t)p * g.c + ch) * 2;
        chan_merge(n, mu, m2, (double)rows, (double)part[at], (double)part[at + 1]);
    }
    for (int half = BN_THREADS / 2; half >= 1; half /= 2) {
        s_n[t] = n, s_mu[t] = mu, s_m2[t] = m2;
        __syncthreads();
        if (t < half)
            chan_merge(n, mu, m2, s_n[t + half], s_mu[t + half], s_m2[t + half]);
        __syncthreads();
    }
    if (t != 0)
        return;
    double mean, var;
    if (training) {
        double m = (double)g.m;
        mean = mu;
        var = m2 / m;
        double unbiased = m > 1 ? m2 / (m - 1) : var;
        running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * mean);
        running_var[ch] = (float)((1.0 - momentum) * running_var[ch] + momentum * unbiased);
    } else {
        mean = running_mean[ch];
        var = running_var[ch];
    }
    float invstd = (float)(1.0 / sqrt(var + eps)), fm = (float)mean;
    if (training) {
        save_mean[ch] = fm;
        save_invstd[ch] = invstd;
    }
    float scale = invstd * gamma[ch];
    k[ch] = scale;
    k[g.c + ch] = beta[ch] - fm * scale;
}

/* Element-wise, a 16-byte vector a thread (vectors never cross a row: C % 16 == 0). */
template <typename T>
__global__ void k_bn_apply(const T *x, const T *r, const float *k, tt_bn_grid g, bool relu, T *y)
{
    constexpr int VEC = act<T>::VEC;
    size_t vecs = (size_t)g.m * g.c / VEC;
    FOR_EACH(i, vecs) {
        size_t e = i * VEC;
        int ch = (int)(e % (size_t)g.c);
        float v[VEC], rv[VEC];
        act<T>::load(x + e, v);
        if (r != nullptr)
            act<T>::load(r + e, rv);
        for (int j = 0; j < VEC; j++) {
            float o = v[j] * k[ch + j] + k[g.c + ch + j];
            if (r != nullptr) /* batchnorm's output as it would be stored, then the add */
                o = act<T>::round(o) + rv[j];
            v[j] = relu ? tt_relu(o) : o;
        }
        act<T>::store(y + e, v);
    }
}

/* ---- backward ---- */

template <typename T>
__global__ void __launch_bounds__(BN_THREADS)
    k_bn_grad_sums(const T *x, const T *y, bool g16, const void *dy, const float *mean,
                   tt_bn_grid g, bool relu, void *dr, bool dr_add, float *part)
{
    constexpr int VEC = act<T>::VEC, TX = BN_TILE / VEC, TY = BN_THREADS / TX;
    __shared__ float s_a[BN_THREADS][VEC], s_b[BN_THREADS][VEC];
    const tile_pos p = tile_of<VEC>(g);
    int ty = p.ty;
    float sa[VEC], sb[VEC], mu[VEC], xv[VEC], gv[VEC], rv[VEC];
    for (int j = 0; j < VEC; j++)
        sa[j] = sb[j] = 0, mu[j] = mean[p.ch + j];
    for (int r = p.r0 + ty; r < p.r1; r += TY) {
        size_t e = (size_t)r * g.c + p.ch;
        load_x_dy(x, y, g16, dy, e, relu, xv, gv);
        if (dr != nullptr) { /* the add's gradient to its other input */
            void *dre = (void *)g_at(dr, g16, e);
            if (dr_add) {
                load_g(dre, g16, rv, VEC);
                for (int j = 0; j < VEC; j++)
                    rv[j] += gv[j];
                store_g(dre, g16, rv, VEC);
            } else {
                store_g(dre, g16, gv, VEC);
            }
        }
        for (int j = 0; j < VEC; j++) {
            sa[j] += gv[j];
            sb[j] += gv[j] * (xv[j] - mu[j]);
        }
    }
    for (int half = TY / 2; half >= 1; half /= 2) {
        for (int j = 0; j < VEC; j++)
            s_a[threadIdx.x][j] = sa[j], s_b[threadIdx.x][j] = sb[j];
        __syncthreads();
        if (ty < half) {
            int o = threadIdx.x + half * TX;
            for (int j = 0; j < VEC; j++)
                sa[j] += s_a[o][j], sb[j] += s_b[o][j];
        }
        __syncthreads();
    }
    store_partials<VEC>(g, p, sa, sb, part);
}

/* In a CTA a channel (ch): the N sums part[(p * c + ch) * N + i] over the
 * partials p, thread t partials t, t + 256, ... in order in double, then
 * the threads in a fixed tree; the totals in thread 0's sum. Every thread
 * of the CTA must call it (it synchronises them). */
template <int N>
static __device__ void sum_partials(const tt_bn_grid &g, const float *part, int ch, double *sum)
{
    __shared__ double s[N][BN_THREADS];
    int t = threadIdx.x;
    for (int i = 0; i < N; i++)
        sum[i] = 0;
    for (int p = t; p < g.g; p += BN_THREADS)
        for (int i = 0; i < N; i++)
            sum[i] += part[((size_t)p * g.c + ch) * N + i];
    for (int half = BN_THREADS / 2; half >= 1; half /= 2) {
        for (int i = 0; i < N; i++)
            s[i][t] = sum[i];
        __syncthreads();
        if (t < half)
            for (int i = 0; i < N; i++)
                sum[i] += s[i][t + half];
        __syncthreads();
    }
}

/* A CTA a channel, as k_bn_stats_finish: sum_partials of the two sums. */
__global__ void __launch_bounds__(BN_THREADS)
    k_bn_grad_finish(tt_bn_grid g, const float *part, const float *gamma, const float *mean,
                     const float *invstd, float *dgamma, float *dbeta, float *k)
{
    int ch = blockIdx.x;
    double sum[2], m = (double)g.m;
    sum_partials<2>(g, part, ch, sum);
    if (threadIdx.x != 0)
        return;
    double sdy = sum[0], sdyx = sum[1];
    /* cpu/batchnorm.c's channel_backward */
    float is = invstd[ch];
    sdyx *= is;
    if (dgamma != nullptr)
        dgamma[ch] = (float)sdyx;
    if (dbeta != nullptr)
        dbeta[ch] = (float)sdy;
    double scale = gamma[ch] * is / m;
    k[ch] = (float)(scale * m);
    k[g.c + ch] = (float)(-scale * is * sdyx);
    k[2 * g.c + ch] = (float)(scale * (is * sdyx * mean[ch] - sdy));
}

template <typename T>
__global__ void k_bn_dx(const T *x, const T *y, bool g16, const void *dy, const float *k,
                        tt_bn_grid g, bool relu, void *dx)
{
    constexpr int VEC = act<T>::VEC;
    size_t vecs = (size_t)g.m * g.c / VEC;
    FOR_EACH(i, vecs) {
        size_t e = i * VEC;
        int ch = (int)(e % (size_t)g.c);
        float xv[VEC], gv[VEC];
        load_x_dy(x, y, g16, dy, e, relu, xv, gv);
        for (int j = 0; j < VEC; j++) /* cpu/batchnorm.c's k1 dy + k2 x + k3 */
            gv[j] = k[ch + j] * gv[j] + k[g.c + ch + j] * xv[j] + k[2 * g.c + ch + j];
        store_g((void *)g_at(dx, g16, e), g16, gv, VEC);
    }
}

/* ---- the conv bias gradient: per-channel sums, NHWC or NCHW ---- */

/* dy's element e, float32 or bf16 (g16: widened exactly, so that the same
 * values give the same bits in either type) */
static __device__ float grad_at(const void *dy, bool g16, size_t e)
{
    if (g16)
        return __bfloat162float(((const __nv_bfloat16 *)dy)[e]);
    return ((const float *)dy)[e];
}

/* CTA (tile, p): each thread sums its elements of its channel in order
 * (tt_colsum_pos_of), then the threads of a channel add up in a fixed tree
 * (tt_colsum_half); part[p * c + ch] = the partial's sum. */
__global__ void __launch_bounds__(BN_THREADS)
    k_channel_partials(const void *dy, bool g16, tt_colsum_grid k, float *part)
{
    __shared__ float s[BN_THREADS];
    const tt_colsum_pos q = tt_colsum_pos_of(k, blockIdx.x, blockIdx.y, threadIdx.x);
    int t = threadIdx.x, tx = tt_colsum_tx(k);
    float sum = 0;
    for (int r = q.r0; r < q.r1; r += q.step)
        sum += grad_at(dy, g16, tt_colsum_at(k, r, q.ch));
    s[t] = sum;
    __syncthreads();
    for (int n = q.step, h; n > 1; n = h) {
        h = tt_colsum_half(n);
        if (q.ty < n - h)
            s[t] += s[t + h * tx];
        __syncthreads();
    }
    if (q.ty == 0 && q.ch < k.g.c)
        part[(size_t)blockIdx.y * k.g.c + q.ch] = s[t];
}

/* A CTA a channel: db[ch] = sum_partials of the partials. */
__global__ void __launch_bounds__(BN_THREADS)
    k_channel_finish(tt_bn_grid g, const float *part, float *db)
{
    double sum[1];
    sum_partials<1>(g, part, blockIdx.x, sum);
    if (threadIdx.x == 0)
        db[blockIdx.x] = (float)sum[0];
}

/* ---- launchers ---- */

/* blocks_for the tensor's vectors of vec elements */
static unsigned elementwise_blocks(const tt_bn_grid &g, int vec)
{
    return blocks_for((size_t)g.m * g.c / vec);
}

extern "C" cudaError_t tt_k_bn_nhwc_stats(cudaStream_t s, bool bf16, tt_bn_grid g, const void *x,
                                          float *part)
{
    dim3 grid((unsigned)(g.c / BN_TILE), (unsigned)g.g);
    if (bf16)
        k_bn_stats<<<grid, BN_THREADS, 0, s>>>((const __nv_bfloat16 *)x, g, part);
    else
        k_bn_stats<<<grid, BN_THREADS, 0, s>>>((const float *)x, g, part);
    return cudaGetLastError();
}

extern "C" cudaError_t tt_k_bn_nhwc_stats_finish(cudaStream_t s, tt_bn_grid g, const float *part,
                                                 const float *gamma, const float *beta,
                                                 float *running_mean, float *running_var,
                                                 float momentum, float eps, bool training,
                                                 float *save_mean, float *save_invstd, float *k)
{
    k_bn_stats_finish<<<(unsigned)g.c, BN_THREADS, 0, s>>>(
        g, part, gamma, beta, running_mean, running_var, momentum, eps, training, save_mean,
        save_invstd, k);
    return cudaGetLastError();
}

extern "C" cudaError_t tt_k_bn_nhwc_apply(cudaStream_t s, bool bf16, tt_bn_grid g, const void *x,
                                          const void *r, const float *k, bool relu, void *y)
{
    if (bf16)
        k_bn_apply<<<elementwise_blocks(g, 8), BN_THREADS, 0, s>>>(
            (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)r, k, g, relu, (__nv_bfloat16 *)y);
    else
        k_bn_apply<<<elementwise_blocks(g, 4), BN_THREADS, 0, s>>>(
            (const float *)x, (const float *)r, k, g, relu, (float *)y);
    return cudaGetLastError();
}

extern "C" cudaError_t tt_k_bn_nhwc_grad_sums(cudaStream_t s, bool bf16, bool g16, tt_bn_grid g,
                                              const void *x, const void *y, const void *dy,
                                              const float *mean, bool relu, void *dr,
                                              bool dr_add, float *part)
{
    dim3 grid((unsigned)(g.c / BN_TILE), (unsigned)g.g);
    if (g16 && !bf16)
        return cudaErrorInvalidValue; /* bf16 gradients need bf16 activations */
    if (bf16)
        k_bn_grad_sums<<<grid, BN_THREADS, 0, s>>>((const __nv_bfloat16 *)x,
                                                   (const __nv_bfloat16 *)y, g16, dy, mean, g,
                                                   relu, dr, dr_add, part);
    else
        k_bn_grad_sums<<<grid, BN_THREADS, 0, s>>>((const float *)x, (const float *)y, false, dy,
                                                   mean, g, relu, dr, dr_add, part);
    return cudaGetLastError();
}

extern "C" cudaError_t tt_k_bn_nhwc_grad_finish(cudaStream_t s, tt_bn_grid g, const float *part,
                                                const float *gamma, const float *mean,
                                                const float *invstd, float *dgamma, float *dbeta,
                                                float *k)
{
    k_bn_grad_finish<<<(unsigned)g.c, BN_THREADS, 0, s>>>(g, part, gamma, mean, invstd,
                                                              dgamma, dbeta, k);
    return cudaGetLastError();
}

extern "C" cudaError_t tt_k_bn_nhwc_dx(cudaStream_t s, bool bf16, bool g16, tt_bn_grid g,
                                       const void *x, const void *y, const void *dy,
                                       const float *k, bool relu, void *dx)
{
    if (g16 && !bf16)
        return cudaErrorInvalidValue; /* bf16 gradients need bf16 activations */
    if (bf16)
        k_bn_dx<<<elementwise_blocks(g, 8), BN_THREADS, 0, s>>>(
            (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)y, g16, dy, k, g, relu, dx);
    else
        k_bn_dx<<<elementwise_blocks(g, 4), BN_THREADS, 0, s>>>(
            (const float *)x, (const float *)y, false, dy, k, g, relu, dx);
    return cudaGetLastError();
}

extern "C" cudaError_t tt_k_channel_sum(cudaStream_t s, bool g16, tt_colsum_grid k,
                                        const void *dy, float *part, float *db)
{
    if (k.g.g <= 0)
        return cudaSuccess;
    dim3 grid((unsigned)tt_colsum_tiles(k), (unsigned)k.g.g);
    k_channel_partials<<<grid, BN_THREADS, 0, s>>>(dy, g16, k, k.g.g == 1 ? db : part);
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess || k.g.g == 1)
        return rc;
    k_channel_finish<<<(unsigned)k.g.c, BN_THREADS, 0, s>>>(k.g, part, db);
    return cudaGetLastError();
}

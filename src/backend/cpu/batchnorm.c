/* batchnorm.c - per-channel batch normalisation (torch.nn.BatchNorm2d) over
 * NCHW and over the blocked layout (backend.h), with the same bits.
 *
 * Sums run in one fixed order whatever the layout and the thread count: an
 * image's row of a channel is summed in LANES float lanes (lane l takes the
 * pixels p = l mod 16 in order, so the NCHW loop vectorises), the lanes are
 * added in order into a double, the rest of the row (hw mod 16 pixels) one
 * by one in double; the images of each of BN_GROUPS fixed groups in image
 * order into a double, and the groups in group order. In the blocked layout
 * a vector holds 16 channels of one pixel, so the same lanes are 16
 * accumulators over pixels, and the groups run as parallel tasks. The
 * blocked activations may hold bf16 (backend.h: blocked_bf16): the same
 * float32 arithmetic on their widened values, y rounded to bf16.
 *
 * The blocked passes' sums and element loops have a kernel per level
 * (cpu_isa.h: AVX-512, AVX2, plain C), picked from cpu_isa() so
 * TT_CPU_ISA caps them; each does the scalar code's operations in its
 * order, so every level gives the same bits. */
#include <math.h>
#include <string.h>

#include "backend/cpu/bf16_io.h"
#include "backend/cpu/bf16_io_avx2.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/math.h"

#define LANES 16
#define BN_GROUPS 4
/* the blocked passes keep per-channel doubles on the stack, this many
 * channels at a time */
#define BN_MAX_CHANNELS 512

/* sum of x[q] - shift over a row, and of (x[q] - shift)^2 when sq */
static inline double row_sum(const float *x, int len, float shift, bool sq)
{
    float acc[LANES] = {0};
    int q = 0;
    for (; q + LANES <= len; q += LANES)
        for (int l = 0; l < LANES; l++) {
            float v = x[q + l] - shift;
            acc[l] += sq ? v * v : v;
        }
    double s = 0;
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    for (; q < len; q++) {
        float v = x[q] - shift;
        s += sq ? v * v : v;
    }
    return s;
}

/* sum of dy[q] and of dy[q] * (x[q] - mean) over a row; with y (a fused
 * relu), dy is first masked in place where the forward output y is not
 * positive, in the same pass */
static inline void row_sums_dy(float *dy, const float *x, const float *y, int len, float mean,
                               double *sdy, double *sdyx)
{
    float a[LANES] = {0}, b[LANES] = {0};
    int q = 0;
    for (; q + LANES <= len; q += LANES)
        for (int l = 0; l < LANES; l++) {
            float g = dy[q + l];
            if (y != NULL)
                dy[q + l] = g = tt_relu_grad(y[q + l], g);
            a[l] += g;
            b[l] += g * (x[q + l] - mean);
        }
    double s = 0, t = 0;
    for (int l = 0; l < LANES; l++) {
        s += a[l];
        t += b[l];
    }
    for (; q < len; q++) {
        float g = dy[q];
        if (y != NULL)
            dy[q] = g = tt_relu_grad(y[q], g);
        s += g;
        t += (double)g * (x[q] - mean);
    }
    *sdy += s;
    *sdyx += t;
}

/* ---- what both layouts share: the per-channel arithmetic ---- */

static double groups_total(const double *part, size_t stride)
{
    double s = part[0];
    for (int g = 1; g < BN_GROUPS; g++)
        s += part[(size_t)g * stride];
    return s;
}

/* From the sum and the sum of squares about the mean: the running
 * statistics, save_mean / save_invstd, and y = x * scale + shift. */
static void channel_finish(double mean, double s2, double m, bool training, float gamma,
                           float beta, float momentum, float eps, float *running_mean,
                           float *running_var, float *save_mean, float *save_invstd,
                           float *scale, float *shift)
{
    double var;
    if (training) {
        var = s2 / m;
        double unbiased = m > 1 ? s2 / (m - 1) : var;
        *running_mean = (float)((1.0 - momentum) * *running_mean + momentum * mean);
        *running_var = (float)((1.0 - momentum) * *running_var + momentum * unbiased);
    } else {
        mean = *running_mean;
        var = *running_var;
    }
    float invstd = (float)(1.0 / sqrt(var + eps));
    float fm = (float)mean;
    if (training) {
        *save_mean = fm;
        *save_invstd = invstd;
    }
    /* y = (x - mean) * invstd * gamma + beta as one multiply-add */
    *scale = invstd * gamma;
    *shift = beta - fm * *scale;
}

/* dx = gamma * invstd / M * (M * dy - sum(dy) - xhat * sum(dy * xhat)) as
 * dx = A dy + B x + C per channel */
static void channel_backward(double sdy, double sdyx, double m, float gamma, float mean,
                             float invstd, float *dgamma, float *dbeta, float *A, float *B,
                             float *C)
{
    sdyx *= invstd;
    if (dgamma)
        *dgamma = (float)sdyx;
    if (dbeta)
        *dbeta = (float)sdy;
    double scale = gamma * invstd / m;
    *A = (float)(scale * m);
    *B = (float)(-scale * invstd * sdyx);
    *C = (float)(scale * (invstd * sdyx * mean - sdy));
}

/* ---- NCHW: tasks split the channels ---- */

typedef struct {
    int n, c, hw;
    const float *x, *gamma, *beta, *mean_in, *invstd_in, *yc;
    float *running_mean, *running_var, *y, *save_mean, *save_invstd, *dy, *dx, *dgamma, *dbeta;
    float momentum, eps;
    bool training, relu;
    bool bf16; /* blocked: x, y and yc hold bf16 (backend.h: blocked_bf16) */
    /* blocked: channels [c0, c0 + cn) of this pass, per channel and group */
    int c0, cn;
    double *part, *part2; /* [BN_GROUPS][cn] */
    float *k1, *k2, *k3;  /* [cn]: scale and shift, or A, B and C */
    tt_blocked_strides st; /* blocked: where the 16-channel vectors are */
    /* blocked backward of a batchnorm doing an add: the add's other input's
     * gradient, written (or added to, dr_acc) in the sums pass */
    float *dr;
    bool dr_acc;
} bn_args;

CPU_HOT static void bn_forward_task(void *p, int k, int tasks)
{
    bn_args *a = p;
    int lo, hi;
    cpu_range(a->c, tasks, k, &lo, &hi);
    double m = (double)a->n * a->hw;
    for (int ch = lo; ch < hi; ch++) {
        double mean = 0, s2 = 0;
        if (a->training) {
            /* two passes: the mean, then squares about the (float) mean */
            double part[BN_GROUPS];
            for (int g = 0; g < BN_GROUPS; g++) {
                int i0, i1;
                cpu_range(a->n, BN_GROUPS, g, &i0, &i1);
                part[g] = 0;
                for (int i = i0; i < i1; i++)
                    part[g] += row_sum(a->x + ((size_t)i * a->c + ch) * a->hw, a->hw, 0.0f, false);
            }
            mean = groups_total(part, 1) / m;
            for (int g = 0; g < BN_GROUPS; g++) {
                int i0, i1;
                cpu_range(a->n, BN_GROUPS, g, &i0, &i1);
                part[g] = 0;
                for (int i = i0; i < i1; i++)
                    part[g] += row_sum(a->x + ((size_t)i * a->c + ch) * a->hw, a->hw,
                                       (float)mean, true);
            }
            s2 = groups_total(part, 1);
        }
        float scale, shift;
        channel_finish(mean, s2, m, a->training, a->gamma[ch], a->beta[ch], a->momentum, a->eps,
                       &a->running_mean[ch], &a->running_var[ch],
                       a->training ? &a->save_mean[ch] : NULL,
                       a->training ? &a->save_invstd[ch] : NULL, &scale, &shift);
        for (int i = 0; i < a->n; i++) {
            const float *x = a->x + ((size_t)i * a->c + ch) * a->hw;
            float *y = a->y + ((size_t)i * a->c + ch) * a->hw;
            if (a->relu)
                for (int q = 0; q < a->hw; q++)
                    y[q] = tt_relu(x[q] * scale + shift);
            else
                for (int q = 0; q < a->hw; q++)
                    y[q] = x[q] * scale + shift;
        }
    }
}

void cpu_batchnorm_forward(backend_t *be, int n, int c, int hw, const float *x, const float *gamma,
                           const float *beta, float *running_mean, float *running_var,
                           float momentum, float eps, bool training, bool relu, float *y,
                           float *save_mean, float *save_invstd)
{
    bn_args a = {.n = n, .c = c, .hw = hw, .x = x, .gamma = gamma, .beta = beta,
                 .running_mean = running_mean, .running_var = running_var, .y = y,
                 .save_mean = save_mean, .save_invstd = save_invstd, .momentum = momentum,
                 .eps = eps, .training = training, .relu = relu};
    cpu_run(be, cpu_tasks(be, c), bn_forward_task, &a);
}

CPU_HOT static void bn_backward_task(void *p, int k, int tasks)
{
    bn_args *a = p;
    int lo, hi;
    cpu_range(a->c, tasks, k, &lo, &hi);
    double m = (double)a->n * a->hw;
    for (int ch = lo; ch < hi; ch++) {
        float mean = a->mean_in[ch], invstd = a->invstd_in[ch];
        double sdy[BN_GROUPS], sdyx[BN_GROUPS];
        for (int g = 0; g < BN_GROUPS; g++) {
            int i0, i1;
            cpu_range(a->n, BN_GROUPS, g, &i0, &i1);
            sdy[g] = sdyx[g] = 0;
            for (int i = i0; i < i1; i++) {
                size_t off = ((size_t)i * a->c + ch) * a->hw;
                row_sums_dy(a->dy + off, a->x + off, a->relu ? a->yc + off : NULL, a->hw, mean,
                            &sdy[g], &sdyx[g]);
            }
        }
        float A, B, C;
        channel_backward(groups_total(sdy, 1), groups_total(sdyx, 1), m, a->gamma[ch], mean,
                         invstd, a->dgamma ? &a->dgamma[ch] : NULL,
                         a->dbeta ? &a->dbeta[ch] : NULL, &A, &B, &C);
        if (a->dx == NULL)
            continue;
        for (int i = 0; i < a->n; i++) {
            size_t off = ((size_t)i * a->c + ch) * a->hw;
            const float *dy = a->dy + off, *x = a->x + off;
            float *dx = a->dx + off;
            for (int q = 0; q < a->hw; q++)
                dx[q] = A * dy[q] + B * x[q] + C;
        }
    }
}

void cpu_batchnorm_backward(backend_t *be, int n, int c, int hw, const float *x,
                            const float *gamma, const float *save_mean, const float *save_invstd,
                            const float *y, bool relu, float *dy, float *dx, float *dgamma,
                            float *dbeta)
{
    bn_args a = {.n = n, .c = c, .hw = hw, .x = x, .gamma = gamma, .mean_in = save_mean,
                 .invstd_in = save_invstd, .yc = y, .relu = relu, .dy = dy, .dx = dx,
                 .dgamma = dgamma, .dbeta = dbeta};
    cpu_run(be, cpu_tasks(be, c), bn_backward_task, &a);
}

/* ---- blocked: tasks are (group, channel block) for the sums, then ranges
 *      of (image, channel block) rows for the element passes; in NHWC order
 *      with several blocks, groups and ranges of whole images ----
 *
 * With bf16 (backend.h: blocked_bf16) the activations x and y hold bf16 at
 * the same element indices, and dy, dx stay float32: the kernels take the
 * arrays as base pointers plus an element offset, load x and y widened
 * (exact) and round y to bf16 at the store (bf16_io.h), so the arithmetic
 * is float32's on the widened values, in the same order. Each kernel is an
 * always-inline body (..._of) that one small function calls with bf16 a
 * constant, twice: GCC compiles it once per type, and float32 runs the
 * code it ran before. */

/* The 16 channels of block b (within the pass) of image i: its first
 * pixel's vector, in elements; the next pixels' at a->st.pstride apart. */
static inline size_t blk_off(const bn_args *a, int i, int b)
{
    return (size_t)i * a->st.img + (size_t)(a->c0 / LANES + b) * a->st.cstride;
}

/* part[ch] += the row sums of one image's block (16 channels from element
 * off of x), lane j of the 16 accumulators taking pixels p = j mod 16:
 * exactly row_sum's order. */
static inline __attribute__((always_inline)) void
block_row_sum_of(const void *x, size_t off, int hw, size_t ps, const float *shift, bool sq,
                 bool bf16, double *part)
{
    float acc[LANES][LANES] = {{0}}; /* [pixel lane][channel] */
    int q = 0;
    for (; q + LANES <= hw; q += LANES)
        for (int j = 0; j < LANES; j++) {
            size_t o = off + (size_t)(q + j) * ps;
            for (int ch = 0; ch < LANES; ch++) {
                float d = act_load(x, o + ch, bf16) - shift[ch];
                acc[j][ch] += sq ? d * d : d;
            }
        }
    double s[LANES] = {0};
    for (int j = 0; j < LANES; j++)
        for (int ch = 0; ch < LANES; ch++)
            s[ch] += acc[j][ch];
    for (; q < hw; q++)
        for (int ch = 0; ch < LANES; ch++) {
            float d = act_load(x, off + (size_t)q * ps + ch, bf16) - shift[ch];
            s[ch] += sq ? d * d : d;
        }
    for (int ch = 0; ch < LANES; ch++)
        part[ch] += s[ch];
}

CPU_HOT static void block_row_sum(const void *x, size_t off, int hw, size_t ps,
                                  const float *shift, bool sq, bool bf16, double *part)
{
    if (bf16)
        block_row_sum_of(x, off, hw, ps, shift, sq, true, part);
    else
        block_row_sum_of(x, off, hw, ps, shift, sq, false, part);
}

/* the same for row_sums_dy (y: the forward output, NULL without relu) */
static inline __attribute__((always_inline)) void
block_row_sums_dy_of(float *dy, const void *x, const void *y, size_t off, int hw, size_t ps,
                     const float *mean, bool bf16, float *dr, bool dr_acc, double *sdy,
                     double *sdyx)
{
    float sa[LANES][LANES] = {{0}}, sb[LANES][LANES] = {{0}};
    int q = 0;
    for (; q + LANES <= hw; q += LANES)
        for (int j = 0; j < LANES; j++) {
            size_t o = off + (size_t)(q + j) * ps;
            for (int ch = 0; ch < LANES; ch++) {
                float g = dy[o + ch];
                if (y != NULL)
                    dy[o + ch] = g = tt_relu_grad(act_load(y, o + ch, bf16), g);
                if (dr != NULL)
                    dr[o + ch] = dr_acc ? dr[o + ch] + g : g;
                sa[j][ch] += g;
                sb[j][ch] += g * (act_load(x, o + ch, bf16) - mean[ch]);
            }
        }
    double s[LANES] = {0}, t[LANES] = {0};
    for (int j = 0; j < LANES; j++)
        for (int ch = 0; ch < LANES; ch++) {
            s[ch] += sa[j][ch];
            t[ch] += sb[j][ch];
        }
    for (; q < hw; q++)
        for (int ch = 0; ch < LANES; ch++) {
            size_t o = off + (size_t)q * ps + ch;
            float g = dy[o];
            if (y != NULL)
                dy[o] = g = tt_relu_grad(act_load(y, o, bf16), g);
            if (dr != NULL)
                dr[o] = dr_acc ? dr[o] + g : g;
            s[ch] += g;
            t[ch] += (double)g * (act_load(x, o, bf16) - mean[ch]);
        }
    for (int ch = 0; ch < LANES; ch++) {
        sdy[ch] += s[ch];
        sdyx[ch] += t[ch];
    }
}

CPU_HOT static void block_row_sums_dy(float *dy, const void *x, const void *y, size_t off,
                                      int hw, size_t ps, const float *mean, bool bf16,
                                      float *dr, bool dr_acc, double *sdy, double *sdyx)
{
    if (bf16)
        block_row_sums_dy_of(dy, x, y, off, hw, ps, mean, true, dr, dr_acc, sdy, sdyx);
    else
        block_row_sums_dy_of(dy, x, y, off, hw, ps, mean, false, dr, dr_acc, sdy, sdyx);
}

#ifdef CPU_AVX512_KERNELS
/* block_row_sum with the 16 lane accumulators in registers: the same
 * additions in the same order (the scalar loops above did not vectorise
 * cleanly and made blocked batchnorm slower than NCHW's). */
__attribute__((target("avx512f"), always_inline)) static inline void
block_row_sum_avx512_of(const void *x, size_t off, int hw, size_t ps, const float *shift, bool sq,
                        bool bf16, double *part)
{
    __m512 acc[LANES], sh = _mm512_loadu_ps(shift);
    for (int j = 0; j < LANES; j++)
        acc[j] = _mm512_setzero_ps();
    int q = 0;
    for (; q + LANES <= hw; q += LANES)
        for (int j = 0; j < LANES; j++) {
            __m512 d = _mm512_sub_ps(act_load16(x, off + (size_t)(q + j) * ps, bf16), sh);
            acc[j] = _mm512_add_ps(acc[j], sq ? _mm512_mul_ps(d, d) : d);
        }
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (int j = 0; j < LANES; j++) {
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(acc[j])));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                                   _mm512_castps_pd(acc[j]), 1))));
    }
    for (; q < hw; q++) {
        __m512 d = _mm512_sub_ps(act_load16(x, off + (size_t)q * ps, bf16), sh);
        if (sq)
            d = _mm512_mul_ps(d, d);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(d)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(
                                   _mm512_extractf64x4_pd(_mm512_castps_pd(d), 1))));
    }
    _mm512_storeu_pd(part, _mm512_add_pd(_mm512_loadu_pd(part), lo));
    _mm512_storeu_pd(part + 8, _mm512_add_pd(_mm512_loadu_pd(part + 8), hi));
}

__attribute__((target("avx512f"))) static void
block_row_sum_avx512(const void *x, size_t off, int hw, size_t ps, const float *shift, bool sq,
                     bool bf16, double *part)
{
    if (bf16)
        block_row_sum_avx512_of(x, off, hw, ps, shift, sq, true, part);
    else
        block_row_sum_avx512_of(x, off, hw, ps, shift, sq, false, part);
}

/* dr = g, or dr += g (the add's other gradient: layer_grad_accumulate's
 * float32 sum) */
__attribute__((target("avx512f"), always_inline)) static inline void
dr_store16(float *dr, __m512 g, bool acc)
{
    _mm512_storeu_ps(dr, acc ? _mm512_add_ps(_mm512_loadu_ps(dr), g) : g);
}

/* block_row_sums_dy likewise; the 32 accumulators do not fit the
 * registers, so the pixels go in two halves (lanes 0-7 and 8-15 of each
 * 16): every accumulator still sees its pixels in order. */
__attribute__((target("avx512f"), always_inline)) static inline void
block_row_sums_dy_avx512_of(float *dy, const void *x, const void *y, size_t off, int hw,
                            size_t ps, const float *mean, bool bf16, float *dr, bool dr_acc,
                            double *sdy, double *sdyx)
{
    __m512 mv = _mm512_loadu_ps(mean), zero = _mm512_setzero_ps();
    __m512d s_lo = _mm512_setzero_pd(), s_hi = s_lo, t_lo = s_lo, t_hi = s_lo;
    int full = hw / LANES * LANES;
    for (int half = 0; half < 2; half++) {
        __m512 sa[8], sb[8];
        for (int j = 0; j < 8; j++)
            sa[j] = sb[j] = zero;
        for (int q = 0; q < full; q += LANES)
            for (int j = 0; j < 8; j++) {
                size_t o = off + (size_t)(q + 8 * half + j) * ps;
                __m512 g = _mm512_loadu_ps(dy + o);
                if (y != NULL) { /* tt_relu_grad: dy where y > 0, else 0 */
                    __mmask16 pos = _mm512_cmp_ps_mask(act_load16(y, o, bf16), zero, _CMP_GT_OQ);
                    g = _mm512_maskz_mov_ps(pos, g);
                    _mm512_storeu_ps(dy + o, g);
                }
                if (dr != NULL)
                    dr_store16(dr + o, g, dr_acc);
                sa[j] = _mm512_add_ps(sa[j], g);
                sb[j] = _mm512_add_ps(sb[j],
                                      _mm512_mul_ps(g, _mm512_sub_ps(act_load16(x, o, bf16), mv)));
            }
        /* the lanes' order: j = 0..15 over both halves */
        for (int j = 0; j < 8; j++) {
            s_lo = _mm512_add_pd(s_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(sa[j])));
            s_hi = _mm512_add_pd(s_hi, _mm512_cvtps_pd(_mm256_castpd_ps(
                                           _mm512_extractf64x4_pd(_mm512_castps_pd(sa[j]), 1))));
            t_lo = _mm512_add_pd(t_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(sb[j])));
            t_hi = _mm512_add_pd(t_hi, _mm512_cvtps_pd(_mm256_castpd_ps(
                                           _mm512_extractf64x4_pd(_mm512_castps_pd(sb[j]), 1))));
        }
    }
    for (int q = full; q < hw; q++) { /* the rest, one by one in double */
        size_t o = off + (size_t)q * ps;
        __m512 g = _mm512_loadu_ps(dy + o);
        if (y != NULL) {
            __mmask16 pos = _mm512_cmp_ps_mask(act_load16(y, o, bf16), zero, _CMP_GT_OQ);
            g = _mm512_maskz_mov_ps(pos, g);
            _mm512_storeu_ps(dy + o, g);
        }
        if (dr != NULL)
            dr_store16(dr + o, g, dr_acc);
        __m512 d = _mm512_sub_ps(act_load16(x, o, bf16), mv);
        __m512d g_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(g));
        __m512d g_hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(g), 1)));
        __m512d d_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(d));
        __m512d d_hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
        s_lo = _mm512_add_pd(s_lo, g_lo);
        s_hi = _mm512_add_pd(s_hi, g_hi);
        t_lo = _mm512_add_pd(t_lo, _mm512_mul_pd(g_lo, d_lo));
        t_hi = _mm512_add_pd(t_hi, _mm512_mul_pd(g_hi, d_hi));
    }
    _mm512_storeu_pd(sdy, _mm512_add_pd(_mm512_loadu_pd(sdy), s_lo));
    _mm512_storeu_pd(sdy + 8, _mm512_add_pd(_mm512_loadu_pd(sdy + 8), s_hi));
    _mm512_storeu_pd(sdyx, _mm512_add_pd(_mm512_loadu_pd(sdyx), t_lo));
    _mm512_storeu_pd(sdyx + 8, _mm512_add_pd(_mm512_loadu_pd(sdyx + 8), t_hi));
}

__attribute__((target("avx512f"))) static void
block_row_sums_dy_avx512(float *dy, const void *x, const void *y, size_t off, int hw, size_t ps,
                         const float *mean, bool bf16, float *dr, bool dr_acc, double *sdy,
                         double *sdyx)
{
    if (bf16)
        block_row_sums_dy_avx512_of(dy, x, y, off, hw, ps, mean, true, dr, dr_acc, sdy, sdyx);
    else
        block_row_sums_dy_avx512_of(dy, x, y, off, hw, ps, mean, false, dr, dr_acc, sdy, sdyx);
}

/* One row (image, block) of the element passes, from element off: the
 * forward's y = x * k1 + k2 (k3 NULL) or the backward's
 * dx = k1 dy + k2 x + k3. */
__attribute__((target("avx512f"), always_inline)) static inline void
block_apply_avx512_of(const void *x, const float *dy, void *y, float *dx, size_t off, int hw,
                      size_t ps, const float *k1, const float *k2, const float *k3, bool relu,
                      bool bf16)
{
    __m512 a = _mm512_loadu_ps(k1), b = _mm512_loadu_ps(k2), zero = _mm512_setzero_ps();
    size_t end = off + (size_t)hw * ps;
    if (k3 == NULL) { /* relu: max with 0 is tt_relu */
        for (size_t q = off; q < end; q += ps) {
            __m512 v = _mm512_add_ps(_mm512_mul_ps(act_load16(x, q, bf16), a), b);
            act_store16(y, q, relu ? _mm512_max_ps(v, zero) : v, bf16);
        }
        return;
    }
    __m512 c = _mm512_loadu_ps(k3);
    for (size_t q = off; q < end; q += ps)
        _mm512_storeu_ps(dx + q, _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(a, _mm512_loadu_ps(dy + q)),
                                                             _mm512_mul_ps(b, act_load16(x, q, bf16))),
                                               c));
}

__attribute__((target("avx512f"))) static void
block_apply_avx512(const void *x, const float *dy, void *y, float *dx, size_t off, int hw,
                   size_t ps, const float *k1, const float *k2, const float *k3, bool relu,
                   bool bf16)
{
    if (bf16)
        block_apply_avx512_of(x, dy, y, dx, off, hw, ps, k1, k2, k3, relu, true);
    else
        block_apply_avx512_of(x, dy, y, dx, off, hw, ps, k1, k2, k3, relu, false);
}

#endif

#ifdef X86_KERNELS
/* ---- the same three kernels for AVX2: 16 registers of 8 floats, so the
 *      16 channels of a block go as two halves of 8, and the 16 pixel
 *      accumulators of a half in groups that fit (8 for the sums, 4 for
 *      the two sums of dy). Every accumulator still sees its pixels in
 *      order and the lanes reach the doubles in the same order j = 0..15,
 *      so the bits are the scalar code's. ---- */

/* s_lo, s_hi (channels 0-3, 4-7 of a half) += v's lanes as doubles */
#define AVX2_ADD_PD(s_lo, s_hi, v)                                                            \
    do {                                                                                      \
        (s_lo) = _mm256_add_pd((s_lo), _mm256_cvtps_pd(_mm256_castps256_ps128(v)));           \
        (s_hi) = _mm256_add_pd((s_hi), _mm256_cvtps_pd(_mm256_extractf128_ps((v), 1)));       \
    } while (0)

/* block_row_sum's half h (channels 8h..8h+7) */
TARGET_AVX2 __attribute__((always_inline)) static inline void
block_row_sum_avx2_of(const void *x, size_t off, int hw, size_t ps, const float *shift, bool sq,
                      bool bf16, double *part)
{
    int full = hw / LANES * LANES;
    for (int h = 0; h < 2; h++) {
        __m256 sh = _mm256_loadu_ps(shift + 8 * h);
        __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
        for (int grp = 0; grp < 2; grp++) { /* pixels j = 8 grp .. 8 grp + 7 */
            __m256 acc[8];
            for (int j = 0; j < 8; j++)
                acc[j] = _mm256_setzero_ps();
            for (int q = 0; q < full; q += LANES)
                for (int j = 0; j < 8; j++) {
                    size_t o = off + (size_t)(q + 8 * grp + j) * ps + 8 * h;
                    __m256 d = _mm256_sub_ps(act_load8(x, o, bf16), sh);
                    acc[j] = _mm256_add_ps(acc[j], sq ? _mm256_mul_ps(d, d) : d);
                }
            for (int j = 0; j < 8; j++)
                AVX2_ADD_PD(lo, hi, acc[j]);
        }
        for (int q = full; q < hw; q++) {
            __m256 d = _mm256_sub_ps(act_load8(x, off + (size_t)q * ps + 8 * h, bf16), sh);
            AVX2_ADD_PD(lo, hi, sq ? _mm256_mul_ps(d, d) : d);
        }
        double *p = part + 8 * h;
        _mm256_storeu_pd(p, _mm256_add_pd(_mm256_loadu_pd(p), lo));
        _mm256_storeu_pd(p + 4, _mm256_add_pd(_mm256_loadu_pd(p + 4), hi));
    }
}

TARGET_AVX2 static void block_row_sum_avx2(const void *x, size_t off, int hw, size_t ps,
                                           const float *shift, bool sq, bool bf16, double *part)
{
    if (bf16)
        block_row_sum_avx2_of(x, off, hw, ps, shift, sq, true, part);
    else
        block_row_sum_avx2_of(x, off, hw, ps, shift, sq, false, part);
}

/* dy at element o masked in place by relu where y is set (tt_relu_grad:
 * dy where y > 0, else 0) */
TARGET_AVX2 __attribute__((always_inline)) static inline __m256
dy_masked8(float *dy, const void *y, size_t o, bool bf16, float *dr, bool dr_acc)
{
    __m256 g = _mm256_loadu_ps(dy + o);
    if (y != NULL) {
        __m256 pos = _mm256_cmp_ps(act_load8(y, o, bf16), _mm256_setzero_ps(), _CMP_GT_OQ);
        g = _mm256_and_ps(g, pos);
        _mm256_storeu_ps(dy + o, g);
    }
    if (dr != NULL) /* the add's other gradient: = g, or += g */
        _mm256_storeu_ps(dr + o, dr_acc ? _mm256_add_ps(_mm256_loadu_ps(dr + o), g) : g);
    return g;
}

/* block_row_sums_dy's half h, pixels in groups of 4 */
TARGET_AVX2 __attribute__((always_inline)) static inline void
block_row_sums_dy_avx2_of(float *dy, const void *x, const void *y, size_t off, int hw, size_t ps,
                          const float *mean, bool bf16, float *dr, bool dr_acc, double *sdy,
                          double *sdyx)
{
    int full = hw / LANES * LANES;
    for (int h = 0; h < 2; h++) {
        __m256 mv = _mm256_loadu_ps(mean + 8 * h);
        __m256d s_lo = _mm256_setzero_pd(), s_hi = s_lo, t_lo = s_lo, t_hi = s_lo;
        for (int grp = 0; grp < 4; grp++) { /* pixels j = 4 grp .. 4 grp + 3 */
            __m256 sa[4], sb[4];
            for (int j = 0; j < 4; j++)
                sa[j] = sb[j] = _mm256_setzero_ps();
            for (int q = 0; q < full; q += LANES)
                for (int j = 0; j < 4; j++) {
                    size_t o = off + (size_t)(q + 4 * grp + j) * ps + 8 * h;
                    __m256 g = dy_masked8(dy, y, o, bf16, dr, dr_acc);
                    sa[j] = _mm256_add_ps(sa[j], g);
                    sb[j] = _mm256_add_ps(
                        sb[j], _mm256_mul_ps(g, _mm256_sub_ps(act_load8(x, o, bf16), mv)));
                }
            for (int j = 0; j < 4; j++) {
                AVX2_ADD_PD(s_lo, s_hi, sa[j]);
                AVX2_ADD_PD(t_lo, t_hi, sb[j]);
            }
        }
        for (int q = full; q < hw; q++) { /* the rest, one by one in double */
            size_t o = off + (size_t)q * ps + 8 * h;
            __m256 g = dy_masked8(dy, y, o, bf16, dr, dr_acc);
            __m256 d = _mm256_sub_ps(act_load8(x, o, bf16), mv);
            __m256d g_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
            __m256d g_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
            s_lo = _mm256_add_pd(s_lo, g_lo);
            s_hi = _mm256_add_pd(s_hi, g_hi);
            t_lo = _mm256_add_pd(t_lo, _mm256_mul_pd(g_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(d))));
            t_hi = _mm256_add_pd(t_hi, _mm256_mul_pd(g_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1))));
        }
        double *ps_ = sdy + 8 * h, *pt = sdyx + 8 * h;
        _mm256_storeu_pd(ps_, _mm256_add_pd(_mm256_loadu_pd(ps_), s_lo));
        _mm256_storeu_pd(ps_ + 4, _mm256_add_pd(_mm256_loadu_pd(ps_ + 4), s_hi));
        _mm256_storeu_pd(pt, _mm256_add_pd(_mm256_loadu_pd(pt), t_lo));
        _mm256_storeu_pd(pt + 4, _mm256_add_pd(_mm256_loadu_pd(pt + 4), t_hi));
    }
}

TARGET_AVX2 static void block_row_sums_dy_avx2(float *dy, const void *x, const void *y,
                                               size_t off, int hw, size_t ps, const float *mean,
                                               bool bf16, float *dr, bool dr_acc, double *sdy,
                                               double *sdyx)
{
    if (bf16)
        block_row_sums_dy_avx2_of(dy, x, y, off, hw, ps, mean, true, dr, dr_acc, sdy, sdyx);
    else
        block_row_sums_dy_avx2_of(dy, x, y, off, hw, ps, mean, false, dr, dr_acc, sdy, sdyx);
}

/* block_apply_avx512's arithmetic (a multiply, then adds: no fma, as the
 * scalar code) on two halves of 8 channels */
TARGET_AVX2 __attribute__((always_inline)) static inline void
block_apply_avx2_of(const void *x, const float *dy, void *y, float *dx, size_t off, int hw,
                    size_t ps, const float *k1, const float *k2, const float *k3, bool relu,
                    bool bf16)
{
    size_t end = off + (size_t)hw * ps;
    for (int h = 0; h < 2; h++) {
        __m256 a = _mm256_loadu_ps(k1 + 8 * h), b = _mm256_loadu_ps(k2 + 8 * h);
        __m256 zero = _mm256_setzero_ps();
        if (k3 == NULL) { /* relu: max with 0 (the second operand) is tt_relu */
            for (size_t q = off + 8 * h; q < end; q += ps) {
                __m256 v = _mm256_add_ps(_mm256_mul_ps(act_load8(x, q, bf16), a), b);
                act_store8(y, q, relu ? _mm256_max_ps(v, zero) : v, bf16);
            }
            continue;
        }
        __m256 c = _mm256_loadu_ps(k3 + 8 * h);
        for (size_t q = off + 8 * h; q < end; q += ps)
            _mm256_storeu_ps(dx + q,
                             _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(a, _mm256_loadu_ps(dy + q)),
                                                         _mm256_mul_ps(b, act_load8(x, q, bf16))),
                                           c));
    }
}

TARGET_AVX2 static void block_apply_avx2(const void *x, const float *dy, void *y, float *dx,
                                         size_t off, int hw, size_t ps, const float *k1,
                                         const float *k2, const float *k3, bool relu, bool bf16)
{
    if (bf16)
        block_apply_avx2_of(x, dy, y, dx, off, hw, ps, k1, k2, k3, relu, true);
    else
        block_apply_avx2_of(x, dy, y, dx, off, hw, ps, k1, k2, k3, relu, false);
}
#endif

/* Image i's row of block b into group g's sums: k1 holds the shift (0 for
 * the mean pass, the mean for the squares); part2 NULL: the forward sums
 * into part, else the backward sums into part and part2. */
static void sum_row(const bn_args *a, int g, int b, int i)
{
    double *part = a->part + (size_t)g * a->cn + (size_t)b * LANES;
    size_t off = blk_off(a, i, b), ps = a->st.pstride;
    const float *k1 = a->k1 + b * LANES;
    if (a->part2 == NULL) {
#ifdef CPU_AVX512_KERNELS
        if (cpu_isa() == CPU_ISA_AVX512) {
            block_row_sum_avx512(a->x, off, a->hw, ps, k1, a->k2 != NULL, a->bf16, part);
            return;
        }
#endif
#ifdef X86_KERNELS
        if (cpu_isa() >= CPU_ISA_AVX2) {
            block_row_sum_avx2(a->x, off, a->hw, ps, k1, a->k2 != NULL, a->bf16, part);
            return;
        }
#endif
        block_row_sum(a->x, off, a->hw, ps, k1, a->k2 != NULL, a->bf16, part);
        return;
    }
    double *part2 = a->part2 + (size_t)g * a->cn + (size_t)b * LANES;
    const void *y = a->relu ? a->yc : NULL;
#ifdef CPU_AVX512_KERNELS
    if (cpu_isa() == CPU_ISA_AVX512) {
        block_row_sums_dy_avx512(a->dy, a->x, y, off, a->hw, ps, k1, a->bf16, a->dr, a->dr_acc,
                                 part, part2);
        return;
    }
#endif
#ifdef X86_KERNELS
    if (cpu_isa() >= CPU_ISA_AVX2) {
        block_row_sums_dy_avx2(a->dy, a->x, y, off, a->hw, ps, k1, a->bf16, a->dr, a->dr_acc,
                               part, part2);
        return;
    }
#endif
    block_row_sums_dy(a->dy, a->x, y, off, a->hw, ps, k1, a->bf16, a->dr, a->dr_acc, part,
                      part2);
}

static void zero_sums(const bn_args *a, int g, int b)
{
    for (int ch = 0; ch < LANES; ch++) {
        a->part[(size_t)g * a->cn + (size_t)b * LANES + ch] = 0;
        if (a->part2 != NULL)
            a->part2[(size_t)g * a->cn + (size_t)b * LANES + ch] = 0;
    }
}

/* Task (group g, block b): the group's sums for 16 channels. */
static void bn_blocked_sum_task(void *p, int k, int tasks)
{
    bn_args *a = p;
    int blocks = a->cn / LANES, g = k / blocks, b = k % blocks;
    int i0, i1;
    cpu_range(a->n, BN_GROUPS, g, &i0, &i1);
    zero_sums(a, g, b);
    for (int i = i0; i < i1; i++)
        sum_row(a, g, b, i);
}

/* In NHWC order, task g: the group's sums for every block, image by image,
 * so that an image's pixels, which hold all its blocks, are read from
 * memory once (a task per block read them once per block). Each channel
 * sums the same rows in the same order as above. */
static void bn_nhwc_sum_task(void *p, int g, int tasks)
{
    bn_args *a = p;
    int blocks = a->cn / LANES;
    int i0, i1;
    cpu_range(a->n, BN_GROUPS, g, &i0, &i1);
    for (int b = 0; b < blocks; b++)
        zero_sums(a, g, b);
    for (int i = i0; i < i1; i++)
        for (int b = 0; b < blocks; b++)
            sum_row(a, g, b, i);
}

/* One pixel's run of `width` channels from element off, from the pass's
 * channel ch0 on: y = x * k1 + k2 (relu), or dx = k1 dy + k2 x + k3 when
 * k3 is set. block_apply_avx512 does the same arithmetic. */
static inline __attribute__((always_inline)) void apply_run(const bn_args *a, size_t off,
                                                            int ch0, int width, bool bf16)
{
    const void *x = a->x;
    const float *k1 = a->k1 + ch0, *k2 = a->k2 + ch0;
    if (a->k3 == NULL) {
        void *y = a->y;
        for (int ch = 0; ch < width; ch++) {
            float v = act_load(x, off + ch, bf16) * k1[ch] + k2[ch];
            act_store(y, off + ch, a->relu ? tt_relu(v) : v, bf16);
        }
        return;
    }
    const float *k3 = a->k3 + ch0, *dy = a->dy + off;
    float *dx = a->dx + off;
    for (int ch = 0; ch < width; ch++)
        dx[ch] = k1[ch] * dy[ch] + k2[ch] * act_load(x, off + ch, bf16) + k3[ch];
}

/* apply_run over the hw pixels from element off; bf16 a constant in each
 * loop (one compiled loop per type) */
static inline __attribute__((always_inline)) void apply_pixels(const bn_args *a, size_t off,
                                                               int ch0, int width)
{
    size_t ps = a->st.pstride;
    if (a->bf16)
        for (int q = 0; q < a->hw; q++)
            apply_run(a, off + (size_t)q * ps, ch0, width, true);
    else
        for (int q = 0; q < a->hw; q++)
            apply_run(a, off + (size_t)q * ps, ch0, width, false);
}

/* In NHWC order with more than one block: images split over the tasks, each
 * walked pixel by pixel through the pass's blocks (contiguous, where a row
 * of one block strides over the others). */
CPU_HOT static void bn_nhwc_apply_task(void *p, int k, int tasks)
{
    bn_args *a = p;
    int lo, hi;
    cpu_range(a->n, tasks, k, &lo, &hi);
    for (int i = lo; i < hi; i++)
        apply_pixels(a, blk_off(a, i, 0), 0, a->cn);
}

/* Rows (image, block) split over the tasks: y = x * k1 + k2 (forward) or
 * dx = k1 dy + k2 x + k3 (backward, k3 != NULL). */
CPU_HOT static void bn_blocked_apply_task(void *p, int k, int tasks)
{
    bn_args *a = p;
    int blocks = a->cn / LANES, lo, hi;
    cpu_range(a->n * blocks, tasks, k, &lo, &hi);
    for (int r = lo; r < hi; r++) {
        int i = r / blocks, b = r % blocks;
        size_t off = blk_off(a, i, b);
#ifdef CPU_AVX512_KERNELS
        if (cpu_isa() == CPU_ISA_AVX512) {
            block_apply_avx512(a->x, a->dy, a->y, a->dx, off, a->hw, a->st.pstride,
                               a->k1 + b * LANES, a->k2 + b * LANES,
                               a->k3 ? a->k3 + b * LANES : NULL, a->relu, a->bf16);
            continue;
        }
#endif
#ifdef X86_KERNELS
        if (cpu_isa() >= CPU_ISA_AVX2) {
            block_apply_avx2(a->x, a->dy, a->y, a->dx, off, a->hw, a->st.pstride,
                             a->k1 + b * LANES, a->k2 + b * LANES,
                             a->k3 ? a->k3 + b * LANES : NULL, a->relu, a->bf16);
            continue;
        }
#endif
        apply_pixels(a, off, b * LANES, LANES);
    }
}

/* NHWC order with more than one block in the pass: tasks walk whole images
 * (an image's pixels hold all its blocks), not one block of them. */
static bool walks_images(const bn_args *a)
{
    return a->st.pstride != LANES && a->cn > LANES;
}

/* The sums of a pass into part (and part2). */
static void blocked_sums(backend_t *be, bn_args *a)
{
    if (walks_images(a))
        cpu_run(be, BN_GROUPS, bn_nhwc_sum_task, a);
    else
        cpu_run(be, BN_GROUPS * (a->cn / LANES), bn_blocked_sum_task, a);
}

/* The element pass of y (forward) or dx (backward, a->k3 set). */
static void blocked_apply(backend_t *be, bn_args *a)
{
    if (walks_images(a))
        cpu_run(be, cpu_tasks(be, a->n), bn_nhwc_apply_task, a);
    else
        cpu_run(be, cpu_tasks(be, a->n * (a->cn / LANES)), bn_blocked_apply_task, a);
}

void cpu_batchnorm_forward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                   const float *gamma, const float *beta, float *running_mean,
                                   float *running_var, float momentum, float eps, bool training,
                                   bool relu, float *y, float *save_mean, float *save_invstd)
{
    double part[BN_GROUPS * BN_MAX_CHANNELS];
    float k1[BN_MAX_CHANNELS], k2[BN_MAX_CHANNELS];
    double m = (double)n * hw;
    for (int c0 = 0; c0 < c; c0 += BN_MAX_CHANNELS) {
        int cn = c - c0 < BN_MAX_CHANNELS ? c - c0 : BN_MAX_CHANNELS;
        bn_args a = {.n = n, .c = c, .hw = hw, .x = x, .y = y, .relu = relu,
                     .bf16 = be->blocked_bf16, .c0 = c0, .cn = cn, .part = part, .k1 = k1,
                     .st = tt_blocked_strides_of(c, hw, be->blocked_nhwc)};
        double mean[BN_MAX_CHANNELS], s2[BN_MAX_CHANNELS];
        if (training) {
            memset(k1, 0, sizeof(k1)); /* shift 0: the sums */
            blocked_sums(be, &a);
            for (int ch = 0; ch < cn; ch++) {
                mean[ch] = groups_total(part + ch, (size_t)cn) / m;
                k1[ch] = (float)mean[ch];
            }
            a.k2 = k2; /* squares about the mean */
            blocked_sums(be, &a);
            for (int ch = 0; ch < cn; ch++)
                s2[ch] = groups_total(part + ch, (size_t)cn);
        }
        for (int ch = 0; ch < cn; ch++) {
            int q = c0 + ch;
            channel_finish(training ? mean[ch] : 0, training ? s2[ch] : 0, m, training, gamma[q],
                           beta[q], momentum, eps, &running_mean[q], &running_var[q],
                           training ? &save_mean[q] : NULL, training ? &save_invstd[q] : NULL,
                           &k1[ch], &k2[ch]);
        }
        a.k2 = k2;
        blocked_apply(be, &a);
    }
}

/* backend.h's batchnorm_add_backward_blocked, with the bits of its
 * composition (relu_backward_blocked, copy or axpy, then the backward
 * without relu): the relu's mask is the one the backward's sums pass
 * applies with relu (tt_relu_grad), and that pass, which reads and writes
 * every element of dy once, also writes dr (or adds to it). The
 * composition took two more passes over dy, one of them the copy, on one
 * thread. */
void cpu_batchnorm_add_backward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                        const float *gamma, const float *save_mean,
                                        const float *save_invstd, const float *y, bool relu,
                                        float *dy, float *dx, float *dgamma, float *dbeta,
                                        float *dr, bool dr_acc)
{
    double part[BN_GROUPS * BN_MAX_CHANNELS], part2[BN_GROUPS * BN_MAX_CHANNELS];
    float k1[BN_MAX_CHANNELS], k2[BN_MAX_CHANNELS], k3[BN_MAX_CHANNELS];
    double m = (double)n * hw;
    for (int c0 = 0; c0 < c; c0 += BN_MAX_CHANNELS) {
        int cn = c - c0 < BN_MAX_CHANNELS ? c - c0 : BN_MAX_CHANNELS;
        bn_args a = {.n = n, .c = c, .hw = hw, .x = x, .yc = y, .relu = relu,
                     .bf16 = be->blocked_bf16, .dy = dy, .dx = dx, .c0 = c0, .cn = cn,
                     .part = part, .part2 = part2, .k1 = k1,
                     .st = tt_blocked_strides_of(c, hw, be->blocked_nhwc), .dr = dr,
                     .dr_acc = dr_acc};
        for (int ch = 0; ch < cn; ch++)
            k1[ch] = save_mean[c0 + ch];
        blocked_sums(be, &a);
        for (int ch = 0; ch < cn; ch++) {
            int q = c0 + ch;
            channel_backward(groups_total(part + ch, (size_t)cn),
                             groups_total(part2 + ch, (size_t)cn), m, gamma[q], save_mean[q],
                             save_invstd[q], dgamma ? &dgamma[q] : NULL, dbeta ? &dbeta[q] : NULL,
                             &k1[ch], &k2[ch], &k3[ch]);
        }
        if (dx == NULL)
            continue;
        a.k2 = k2;
        a.k3 = k3;
        blocked_apply(be, &a);
    }
}

/* the same with no add (dr NULL) */
void cpu_batchnorm_backward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                    const float *gamma, const float *save_mean,
                                    const float *save_invstd, const float *y, bool relu,
                                    float *dy, float *dx, float *dgamma, float *dbeta)
{
    cpu_batchnorm_add_backward_blocked(be, n, c, hw, x, gamma, save_mean, save_invstd, y, relu,
                                       dy, dx, dgamma, dbeta, NULL, false);
}

/* pool.c - max and average pooling over NCHW planes, PyTorch semantics: max
 * ignores padding (it pads with -inf), average counts padded zeros
 * (count_include_pad = True). Planes (n, c) are split over the team.
 *
 * A backend with blocked_bf16 (backend.h) holds its blocked activations in
 * bf16: a blocked x, a blocked y and global average pooling's blocked x are
 * then bf16 (bf16_io.h), read widened and computed in float32 as in float32
 * mode, a bf16 y rounded once at the store; the gradients and the masks stay
 * float32 and int32.
 *
 * Max pooling's 2x2 rows over NCHW and its blocked rows have a kernel per
 * level (cpu_isa.h: AVX-512, AVX2, plain C), picked from cpu_isa() so
 * TT_CPU_ISA caps them; each makes the scalar code's comparisons, so every
 * level gives the same bits. */
#include <math.h>
#include <string.h>

#include "backend/cpu/bf16_io.h"
#include "backend/cpu/bf16_io_avx2.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/simd_target.h"

#if defined(CPU_AVX512_KERNELS) || defined(X86_KERNELS)
#include <immintrin.h>
#endif

/* x and y hold float32, or bf16 where they are blocked and bf16 is set (the
 * backend's blocked_bf16): offsets into them are element indices, through
 * act_load / act_store (bf16_io.h). */
typedef struct {
    const window_desc *d;
    const void *x;
    void *y;
    bool bf16;
    const float *dyc;
    float *dx;
    int32_t *mask;
    const int32_t *maskc;
    /* a blocked x (and dx), a blocked y (and dy, mask): the strides of
     * their 16-channel vectors, in nChw16c or NHWC order (backend.h) */
    tt_blocked_strides xs, ys;
} pool_args;

static pool_args pool_args_of(const backend_t *be, const window_desc *d)
{
    pool_args a = {.d = d, .bf16 = be->blocked_bf16 && d->blocked_x};
    a.xs = tt_blocked_strides_of(d->c, d->h * d->w, be->blocked_nhwc);
    a.ys = tt_blocked_strides_of(d->c, d->oh * d->ow, be->blocked_nhwc);
    return a;
}

/* The max of one window and its index in the plane; the first maximum wins
 * and a NaN propagates, as in PyTorch. */
static inline float window_max(const window_desc *d, const float *x, int oy, int ox,
                               int32_t *arg_out)
{
    int y0 = oy * d->stride - d->pad, x0 = ox * d->stride - d->pad;
    int ky0 = y0 < 0 ? -y0 : 0, kx0 = x0 < 0 ? -x0 : 0;
    int ky1 = y0 + d->k > d->h ? d->h - y0 : d->k, kx1 = x0 + d->k > d->w ? d->w - x0 : d->k;
    float best = x[(y0 + ky0) * d->w + x0 + kx0];
    int32_t arg = (y0 + ky0) * d->w + x0 + kx0;
    for (int ky = ky0; ky < ky1; ky++) {
        const float *row = x + (y0 + ky) * d->w + x0;
        for (int kx = kx0; kx < kx1; kx++) {
            float v = row[kx];
            if (v > best || (v != v && best == best)) {
                best = v;
                arg = (y0 + ky) * d->w + x0 + kx;
            }
        }
    }
    *arg_out = arg;
    return best;
}

/* One output row of the 2x2, stride 2 window: the row pair r0, r1 gives ow
 * maxima and their plane indices (base is r0's). Strict > keeps the first
 * maximum on ties, as PyTorch. Returns nonzero when a window holds a NaN:
 * the caller redoes the row the general way (PyTorch propagates it). */
CPU_HOT static int maxpool2x2_row(const float *restrict r0, const float *restrict r1,
                          float *restrict yr, int32_t *restrict mr, int ow, int32_t base, int w)
{
    int nan = 0;
    for (int ox = 0; ox < ow; ox++) {
        int i = 2 * ox;
        float p0 = r0[i], b = r0[i + 1], c = r1[i], e = r1[i + 1];
        float m1 = b > p0 ? b : p0, m2 = e > c ? e : c;
        int32_t i1 = b > p0 ? base + i + 1 : base + i;
        int32_t i2 = e > c ? base + w + i + 1 : base + w + i;
        yr[ox] = m2 > m1 ? m2 : m1;
        mr[ox] = m2 > m1 ? i2 : i1;
        nan |= (p0 != p0) | (b != b) | (c != c) | (e != e); /* bitwise: no branch */
    }
    return nan;
}

#ifdef CPU_AVX512_KERNELS
/* The same row, 16 windows per step. The compiler cannot vectorise the
 * scalar loop for LeNet's rows (ow = 14 and 5 are shorter than a vector),
 * and that loop took a tenth of a LeNet step; here masked loads and stores
 * cover the short rows, a permute splits even and odd columns, and the same
 * strict > comparisons (ordered, false for NaN) pick the same bits. */
__attribute__((target("avx512f"))) static int
maxpool2x2_row_avx512(const float *r0, const float *r1, float *yr, int32_t *mr, int ow,
                      int32_t base, int w)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512i one = _mm512_set1_epi32(1), down = _mm512_set1_epi32(w);
    __mmask16 nan = 0;
    for (int ox = 0; ox < ow; ox += 16) {
        int n = ow - ox < 16 ? ow - ox : 16; /* windows in this step */
        __mmask16 out = (__mmask16)((1u << n) - 1);
        __mmask16 lo = n >= 8 ? 0xffff : (__mmask16)((1u << 2 * n) - 1);
        __mmask16 hi = n > 8 ? (__mmask16)((1u << (2 * n - 16)) - 1) : 0;
        const float *a = r0 + 2 * ox, *c = r1 + 2 * ox;
        __m512 a0 = _mm512_maskz_loadu_ps(lo, a), a1 = _mm512_maskz_loadu_ps(hi, a + 16);
        __m512 c0 = _mm512_maskz_loadu_ps(lo, c), c1 = _mm512_maskz_loadu_ps(hi, c + 16);
        __m512 p = _mm512_permutex2var_ps(a0, even, a1), b = _mm512_permutex2var_ps(a0, odd, a1);
        __m512 q = _mm512_permutex2var_ps(c0, even, c1), e = _mm512_permutex2var_ps(c0, odd, c1);
        __m512i i0 = _mm512_add_epi32(_mm512_set1_epi32(base + 2 * ox), even);
        __mmask16 k1 = _mm512_cmp_ps_mask(b, p, _CMP_GT_OQ);
        __mmask16 k2 = _mm512_cmp_ps_mask(e, q, _CMP_GT_OQ);
        __m512 m1 = _mm512_mask_blend_ps(k1, p, b), m2 = _mm512_mask_blend_ps(k2, q, e);
        __m512i i1 = _mm512_mask_add_epi32(i0, k1, i0, one);
        __m512i i2 = _mm512_add_epi32(_mm512_mask_add_epi32(i0, k2, i0, one), down);
        __mmask16 k3 = _mm512_cmp_ps_mask(m2, m1, _CMP_GT_OQ);
        _mm512_mask_storeu_ps(yr + ox, out, _mm512_mask_blend_ps(k3, m1, m2));
        _mm512_mask_storeu_epi32(mr + ox, out, _mm512_mask_blend_epi32(k3, i1, i2));
        nan |= out & (_mm512_cmp_ps_mask(p, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(q, e, _CMP_UNORD_Q));
    }
    return nan != 0;
}
#endif

#ifdef X86_KERNELS
/* lanes i < n of an 8-lane mask (all bits set), for the AVX2 kernels'
 * masked loads and stores */
TARGET_AVX2 __attribute__((always_inline)) static inline __m256i lanes_below(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* maxpool2x2_row for AVX2, 8 windows per step: masked loads of the two
 * rows' 16 columns, a permute into even and odd columns, and the same
 * strict > comparisons (ordered: false for NaN), so the same bits. */
TARGET_AVX2 static int maxpool2x2_row_avx2(const float *r0, const float *r1, float *yr,
                                           int32_t *mr, int ow, int32_t base, int w)
{
    const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i down = _mm256_set1_epi32(w);
    int nan = 0;
    for (int ox = 0; ox < ow; ox += 8) {
        int n = ow - ox < 8 ? ow - ox : 8; /* windows in this step */
        __m256i out = lanes_below(n), lo = lanes_below(2 * n), hi = lanes_below(2 * n - 8);
        const float *a = r0 + 2 * ox, *c = r1 + 2 * ox;
        /* each half as [even columns | odd columns], then the halves joined */
        __m256 a0 = _mm256_permutevar8x32_ps(_mm256_maskload_ps(a, lo), split);
        __m256 a1 = _mm256_permutevar8x32_ps(_mm256_maskload_ps(a + 8, hi), split);
        __m256 c0 = _mm256_permutevar8x32_ps(_mm256_maskload_ps(c, lo), split);
        __m256 c1 = _mm256_permutevar8x32_ps(_mm256_maskload_ps(c + 8, hi), split);
        __m256 p = _mm256_permute2f128_ps(a0, a1, 0x20), b = _mm256_permute2f128_ps(a0, a1, 0x31);
        __m256 q = _mm256_permute2f128_ps(c0, c1, 0x20), e = _mm256_permute2f128_ps(c0, c1, 0x31);
        __m256i i0 = _mm256_add_epi32(_mm256_set1_epi32(base + 2 * ox), even);
        __m256 k1 = _mm256_cmp_ps(b, p, _CMP_GT_OQ), k2 = _mm256_cmp_ps(e, q, _CMP_GT_OQ);
        __m256 m1 = _mm256_blendv_ps(p, b, k1), m2 = _mm256_blendv_ps(q, e, k2);
        /* a true comparison is -1 as an integer: i - k is i + 1 there */
        __m256i i1 = _mm256_sub_epi32(i0, _mm256_castps_si256(k1));
        __m256i i2 = _mm256_add_epi32(_mm256_sub_epi32(i0, _mm256_castps_si256(k2)), down);
        __m256 k3 = _mm256_cmp_ps(m2, m1, _CMP_GT_OQ);
        _mm256_maskstore_ps(yr + ox, out, _mm256_blendv_ps(m1, m2, k3));
        _mm256_maskstore_epi32(
            mr + ox, out,
            _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(i1), _mm256_castsi256_ps(i2), k3)));
        __m256 un = _mm256_or_ps(_mm256_cmp_ps(p, b, _CMP_UNORD_Q), _mm256_cmp_ps(q, e, _CMP_UNORD_Q));
        nan |= _mm256_movemask_ps(_mm256_and_ps(un, _mm256_castsi256_ps(out)));
    }
    return nan != 0;
}
#endif

/* ---- the blocked layout (backend.h): a blocked input, a blocked or NCHW
 *      output. A task takes rows (image, block of 16 channels) and does the
 *      16 channels of a pixel as one vector, with exactly the scalar code's
 *      comparisons and sums per channel, so the bits are NCHW's. A row's
 *      pixels are a->xs.pstride (a->ys.pstride in the output) apart: 16 in
 *      nChw16c order, all the image's blocks in NHWC order. ---- */

/* The first element of row (image i, channels from c0) in a blocked
 * tensor of strides s. */
static inline size_t row_base(const tt_blocked_strides *s, int i, int c0)
{
    return (size_t)i * s->img + (size_t)(c0 / 16) * s->cstride;
}

/* Index of output element (image i, channel c, pixel p) in the output's
 * layout. */
static inline size_t out_index(const pool_args *a, int i, int c, int p)
{
    const window_desc *d = a->d;
    if (!d->blocked_y)
        return ((size_t)i * d->c + c) * ((size_t)d->oh * d->ow) + p;
    return row_base(&a->ys, i, c) + (size_t)p * a->ys.pstride + c % 16;
}

static int blocked_rows(const window_desc *d)
{
    return d->n * ((d->c + 15) / 16);
}

/* One output pixel's window: its corner (y0, x0), which may lie in the
 * padding, and the taps [ky0, ky1) x [kx0, kx1) inside the image. */
static inline void window_bounds(const window_desc *d, int oy, int ox, int *y0, int *x0,
                                 int *ky0, int *ky1, int *kx0, int *kx1)
{
    *y0 = oy * d->stride - d->pad;
    *x0 = ox * d->stride - d->pad;
    *ky0 = *y0 < 0 ? -*y0 : 0;
    *kx0 = *x0 < 0 ? -*x0 : 0;
    *ky1 = *y0 + d->k > d->h ? d->h - *y0 : d->k;
    *kx1 = *x0 + d->k > d->w ? d->w - *x0 : d->k;
}

/* Output pixel op of row (image i, channels from c0) of a blocked max
 * pool: the 16 lanes' maxima and their indices; channels past C stay zero
 * (index -1) in a blocked output and are not stored in an NCHW one. y16:
 * a bf16 output, a constant in the callers' always_inline bodies. */
static inline __attribute__((always_inline)) void
maxpool_store_pixel(const pool_args *a, int i, int c0, int op, const float *best,
                    const int32_t *arg, bool y16)
{
    const window_desc *d = a->d;
    for (int l = 0; l < 16; l++) {
        if (c0 + l >= d->c && !d->blocked_y)
            break;
        size_t o = out_index(a, i, c0 + l, op);
        act_store(a->y, o, c0 + l < d->c ? best[l] : 0.0f, y16);
        a->mask[o] = c0 + l < d->c ? arg[l] : -1;
    }
}

/* The blocked kernels below take bf16 (a->bf16) as a parameter of
 * always_inline bodies that their callers call with a constant, true or
 * false: each type gets its own element loops, as fast in float32 as before
 * bf16 (a test of the flag at each element made the average pool 3 times
 * slower). */

/* Row r = (image i, channels c0..c0+15) of a blocked max pool, plain C. */
static inline __attribute__((always_inline)) void
maxpool_blocked_row(const pool_args *a, int r, int i, int c0, bool bf16)
{
    const window_desc *d = a->d;
    const void *x = a->x;
    bool x16 = bf16, y16 = bf16 && d->blocked_y; /* the blocked x, a blocked y */
    size_t xr = row_base(&a->xs, i, c0), ps = a->xs.pstride;
    for (int oy = 0; oy < d->oh; oy++)
        for (int ox = 0; ox < d->ow; ox++) {
            int y0, x0, ky0, ky1, kx0, kx1;
            window_bounds(d, oy, ox, &y0, &x0, &ky0, &ky1, &kx0, &kx1);
            int first = (y0 + ky0) * d->w + x0 + kx0;
            float best[16];
            int32_t arg[16];
            for (int l = 0; l < 16; l++) {
                best[l] = act_load(x, xr + (size_t)first * ps + l, x16);
                arg[l] = first;
            }
            for (int ky = ky0; ky < ky1; ky++)
                for (int kx = kx0; kx < kx1; kx++) {
                    int32_t at = (y0 + ky) * d->w + x0 + kx;
                    for (int l = 0; l < 16; l++) {
                        float v = act_load(x, xr + (size_t)at * ps + l, x16);
                        bool take = v > best[l] || (v != v && best[l] == best[l]);
                        best[l] = take ? v : best[l];
                        arg[l] = take ? at : arg[l];
                    }
                }
            maxpool_store_pixel(a, i, c0, oy * d->ow + ox, best, arg, y16);
        }
}

#ifdef CPU_AVX512_KERNELS
/* The same row, the 16 channels as one vector: the scalar code's strict >
 * and NaN rule as masks, so the same maxima and indices. */
__attribute__((target("avx512f"), always_inline)) static inline void
maxpool_blocked_row_avx512(const pool_args *a, int r, int i, int c0, bool bf16)
{
    const window_desc *d = a->d;
    const void *x = a->x;
    bool x16 = bf16, y16 = bf16 && d->blocked_y; /* the blocked x, a blocked y */
    size_t xr = row_base(&a->xs, i, c0), ps = a->xs.pstride, yps = a->ys.pstride;
    int opix = d->oh * d->ow, lanes = d->c - c0 < 16 ? d->c - c0 : 16;
    __mmask16 valid = (__mmask16)((1u << lanes) - 1);
    /* NCHW output: lane l goes to channel plane c0 + l */
    __m512i plane = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(opix));
    /* the row's first element in a blocked y; an NCHW y is float32 */
    size_t yr = row_base(&a->ys, i, c0);
    float *ynchw = (float *)a->y + ((size_t)i * d->c + c0) * opix;
    int32_t *mb = d->blocked_y ? a->mask + yr : a->mask + ((size_t)i * d->c + c0) * opix;
    for (int oy = 0; oy < d->oh; oy++)
        for (int ox = 0; ox < d->ow; ox++) {
            int y0, x0, ky0, ky1, kx0, kx1;
            window_bounds(d, oy, ox, &y0, &x0, &ky0, &ky1, &kx0, &kx1);
            int first = (y0 + ky0) * d->w + x0 + kx0;
            __m512 best = act_load16(x, xr + (size_t)first * ps, x16);
            __m512i arg = _mm512_set1_epi32(first);
            __mmask16 best_nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
            for (int ky = ky0; ky < ky1; ky++)
                for (int kx = kx0; kx < kx1; kx++) {
                    int at = (y0 + ky) * d->w + x0 + kx;
                    __m512 v = act_load16(x, xr + (size_t)at * ps, x16);
                    __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                                     (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & ~best_nan);
                    best = _mm512_mask_mov_ps(best, take, v);
                    arg = _mm512_mask_mov_epi32(arg, take, _mm512_set1_epi32(at));
                    best_nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
                }
            int op = oy * d->ow + ox;
            if (d->blocked_y) {
                act_store16(a->y, yr + (size_t)op * yps, _mm512_maskz_mov_ps(valid, best), y16);
                _mm512_storeu_si512(mb + (size_t)op * yps,
                                    _mm512_mask_mov_epi32(_mm512_set1_epi32(-1), valid, arg));
            } else {
                _mm512_mask_i32scatter_ps(ynchw + op, valid, plane, best, 4);
                _mm512_mask_i32scatter_epi32(mb + op, valid, plane, arg, 4);
            }
        }
}

/* Rows lo..hi - 1 */
__attribute__((target("avx512f"))) static void maxpool_blocked_rows_avx512(const pool_args *a,
                                                                           int lo, int hi)
{
    int cbs = (a->d->c + 15) / 16;
    for (int r = lo; r < hi; r++) {
        if (a->bf16)
            maxpool_blocked_row_avx512(a, r, r / cbs, (r % cbs) * 16, true);
        else
            maxpool_blocked_row_avx512(a, r, r / cbs, (r % cbs) * 16, false);
    }
}
#endif

#ifdef X86_KERNELS
/* The blocked row for AVX2: the 16 channels as two vectors of 8, the
 * scalar code's strict > and NaN rule as masks, so the same maxima and
 * indices; stored through the scalar code's loop (AVX2 has no scatter). */
TARGET_AVX2 __attribute__((always_inline)) static inline void
maxpool_blocked_row_avx2(const pool_args *a, int i, int c0, bool bf16)
{
    const window_desc *d = a->d;
    const void *x = a->x;
    bool x16 = bf16, y16 = bf16 && d->blocked_y; /* the blocked x, a blocked y */
    size_t xr = row_base(&a->xs, i, c0), ps = a->xs.pstride;
    for (int oy = 0; oy < d->oh; oy++)
        for (int ox = 0; ox < d->ow; ox++) {
            int y0, x0, ky0, ky1, kx0, kx1;
            window_bounds(d, oy, ox, &y0, &x0, &ky0, &ky1, &kx0, &kx1);
            int first = (y0 + ky0) * d->w + x0 + kx0;
            __m256 best[2];
            __m256i arg[2];
            for (int h = 0; h < 2; h++) {
                best[h] = act_load8(x, xr + (size_t)first * ps + 8 * h, x16);
                arg[h] = _mm256_set1_epi32(first);
            }
            for (int ky = ky0; ky < ky1; ky++)
                for (int kx = kx0; kx < kx1; kx++) {
                    int at = (y0 + ky) * d->w + x0 + kx;
                    __m256 atv = _mm256_castsi256_ps(_mm256_set1_epi32(at));
                    for (int h = 0; h < 2; h++) {
                        __m256 v = act_load8(x, xr + (size_t)at * ps + 8 * h, x16);
                        __m256 take = _mm256_or_ps(
                            _mm256_cmp_ps(v, best[h], _CMP_GT_OQ),
                            _mm256_andnot_ps(_mm256_cmp_ps(best[h], best[h], _CMP_UNORD_Q),
                                             _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
                        best[h] = _mm256_blendv_ps(best[h], v, take);
                        arg[h] = _mm256_castps_si256(
                            _mm256_blendv_ps(_mm256_castsi256_ps(arg[h]), atv, take));
                    }
                }
            float bt[16];
            int32_t it[16];
            for (int h = 0; h < 2; h++) {
                _mm256_storeu_ps(bt + 8 * h, best[h]);
                _mm256_storeu_si256((__m256i *)(it + 8 * h), arg[h]);
            }
            maxpool_store_pixel(a, i, c0, oy * d->ow + ox, bt, it, y16);
        }
}

/* Rows lo..hi - 1 */
TARGET_AVX2 static void maxpool_blocked_rows_avx2(const pool_args *a, int lo, int hi)
{
    int cbs = (a->d->c + 15) / 16;
    for (int r = lo; r < hi; r++) {
        if (a->bf16)
            maxpool_blocked_row_avx2(a, r / cbs, (r % cbs) * 16, true);
        else
            maxpool_blocked_row_avx2(a, r / cbs, (r % cbs) * 16, false);
    }
}
#endif

/* The rows of a blocked max pool at the kernels' level (cpu_isa()). */
CPU_HOT static void maxpool_blocked_forward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int cbs = (d->c + 15) / 16, lo, hi;
    cpu_range(blocked_rows(d), tasks, k, &lo, &hi);
#ifdef CPU_AVX512_KERNELS
    if (cpu_isa() == CPU_ISA_AVX512) {
        maxpool_blocked_rows_avx512(a, lo, hi);
        return;
    }
#endif
#ifdef X86_KERNELS
    if (cpu_isa() >= CPU_ISA_AVX2) {
        maxpool_blocked_rows_avx2(a, lo, hi);
        return;
    }
#endif
    for (int r = lo; r < hi; r++) {
        if (a->bf16)
            maxpool_blocked_row(a, r, r / cbs, (r % cbs) * 16, true);
        else
            maxpool_blocked_row(a, r, r / cbs, (r % cbs) * 16, false);
    }
}

CPU_HOT static void maxpool_blocked_backward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int cbs = (d->c + 15) / 16, lo, hi;
    cpu_range(blocked_rows(d), tasks, k, &lo, &hi);
    size_t ipix = (size_t)d->h * d->w, ps = a->xs.pstride;
    for (int r = lo; r < hi; r++) {
        int i = r / cbs, c0 = (r % cbs) * 16;
        float *dx = a->dx + row_base(&a->xs, i, c0);
        for (size_t q = 0; q < ipix; q++)
            memset(dx + q * ps, 0, 16 * sizeof(float));
        for (int l = 0; l < 16 && c0 + l < d->c; l++)
            for (int q = 0; q < d->oh * d->ow; q++) {
                size_t o = out_index(a, i, c0 + l, q);
                if (a->maskc[o] >= 0)
                    dx[(size_t)a->maskc[o] * ps + l] += a->dyc[o];
            }
    }
}

/* Row r = (image i, channels c0..c0+15) of a blocked average pool */
static inline __attribute__((always_inline)) void
avgpool_blocked_row(const pool_args *a, int r, int i, int c0, bool bf16)
{
    const window_desc *d = a->d;
    bool x16 = bf16, y16 = bf16 && d->blocked_y; /* the blocked x, a blocked y */
    float inv = 1.0f / (float)(d->k * d->k);
    size_t xr = row_base(&a->xs, i, c0), ps = a->xs.pstride;
    for (int oy = 0; oy < d->oh; oy++)
        for (int ox = 0; ox < d->ow; ox++) {
            int y0, x0, ky0, ky1, kx0, kx1;
            window_bounds(d, oy, ox, &y0, &x0, &ky0, &ky1, &kx0, &kx1);
            float s[16] = {0};
            for (int ky = ky0; ky < ky1; ky++)
                for (int kx = kx0; kx < kx1; kx++) {
                    size_t v = xr + ((size_t)(y0 + ky) * d->w + x0 + kx) * ps;
                    for (int l = 0; l < 16; l++)
                        s[l] += act_load(a->x, v + l, x16);
                }
            int op = oy * d->ow + ox;
            float v[16];
            for (int l = 0; l < 16; l++)
                v[l] = c0 + l < d->c ? s[l] * inv : 0.0f;
            if (d->blocked_y) { /* the block's 16 channels side by side */
                size_t o = out_index(a, i, c0, op);
                for (int l = 0; l < 16; l++)
                    act_store(a->y, o + l, v[l], y16);
            } else {
                for (int l = 0; l < 16 && c0 + l < d->c; l++)
                    ((float *)a->y)[out_index(a, i, c0 + l, op)] = v[l];
            }
        }
}

CPU_HOT static void avgpool_blocked_forward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int cbs = (d->c + 15) / 16, lo, hi;
    cpu_range(blocked_rows(d), tasks, k, &lo, &hi);
    for (int r = lo; r < hi; r++) {
        if (a->bf16)
            avgpool_blocked_row(a, r, r / cbs, (r % cbs) * 16, true);
        else
            avgpool_blocked_row(a, r, r / cbs, (r % cbs) * 16, false);
    }
}

CPU_HOT static void avgpool_blocked_backward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int cbs = (d->c + 15) / 16, lo, hi;
    cpu_range(blocked_rows(d), tasks, k, &lo, &hi);
    float inv = 1.0f / (float)(d->k * d->k);
    size_t ipix = (size_t)d->h * d->w, ps = a->xs.pstride;
    for (int r = lo; r < hi; r++) {
        int i = r / cbs, c0 = (r % cbs) * 16;
        float *dx = a->dx + row_base(&a->xs, i, c0);
        for (size_t q = 0; q < ipix; q++)
            memset(dx + q * ps, 0, 16 * sizeof(float));
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                float g[16] = {0};
                for (int l = 0; l < 16 && c0 + l < d->c; l++)
                    g[l] = a->dyc[out_index(a, i, c0 + l, oy * d->ow + ox)] * inv;
                int y0, x0, ky0, ky1, kx0, kx1;
                window_bounds(d, oy, ox, &y0, &x0, &ky0, &ky1, &kx0, &kx1);
                for (int ky = ky0; ky < ky1; ky++)
                    for (int kx = kx0; kx < kx1; kx++) {
                        float *v = dx + ((size_t)(y0 + ky) * d->w + x0 + kx) * ps;
                        for (int l = 0; l < 16; l++)
                            v[l] += g[l];
                    }
            }
    }
}

/* global average pooling: y[i, c] = one fma chain of x / hw over the pixels
 * in order (global_avgpool's NCHW path computes it as a dense layer whose
 * weight is hw copies of 1 / hw: the same chain), dx = fma(dy, 1 / hw, 0). */
typedef struct {
    int n, c, hw;
    const void *x;   /* forward: the blocked x, bf16 where bf16 */
    const float *dy; /* backward: dy[n, c] */
    float *y, *dx;   /* forward: y[n, c]; backward: the blocked dx */
    bool bf16;
    tt_blocked_strides st; /* of the blocked side */
} gap_args;

/* Vectors lo..hi - 1, vector r = (image r / (c / 16), channels c0..c0+15) */
static inline __attribute__((always_inline)) void gap_blocked_vectors(const gap_args *a, int lo,
                                                                      int hi, bool bf16)
{
    int cbs = a->c / 16;
    float inv = 1.0f / (float)a->hw;
    for (int r = lo; r < hi; r++) {
        int i = r / cbs, c0 = (r % cbs) * 16;
        /* the vector's first element in x */
        size_t xv = (size_t)i * a->st.img + (size_t)(r % cbs) * a->st.cstride;
        float s[16] = {0};
        for (int q = 0; q < a->hw; q++)
            for (int l = 0; l < 16; l++)
                s[l] = fmaf(act_load(a->x, xv + (size_t)q * a->st.pstride + l, bf16), inv,
                            s[l]);
        for (int l = 0; l < 16; l++)
            a->y[(size_t)i * a->c + c0 + l] = s[l];
    }
}

CPU_HOT static void gap_blocked_forward_task(void *p, int k, int tasks)
{
    gap_args *a = p;
    int lo, hi;
    cpu_range(a->n * (a->c / 16), tasks, k, &lo, &hi);
    if (a->bf16)
        gap_blocked_vectors(a, lo, hi, true);
    else
        gap_blocked_vectors(a, lo, hi, false);
}

CPU_HOT static void gap_blocked_backward_task(void *p, int k, int tasks)
{
    gap_args *a = p;
    int cbs = a->c / 16, lo, hi;
    cpu_range(a->n * cbs, tasks, k, &lo, &hi);
    float inv = 1.0f / (float)a->hw;
    for (int r = lo; r < hi; r++) {
        int i = r / cbs, c0 = (r % cbs) * 16;
        float g[16];
        for (int l = 0; l < 16; l++)
            g[l] = fmaf(a->dy[(size_t)i * a->c + c0 + l], inv, 0.0f);
        float *dx = a->dx + (size_t)i * a->st.img + (size_t)(r % cbs) * a->st.cstride;
        for (int q = 0; q < a->hw; q++)
            for (int l = 0; l < 16; l++)
                dx[(size_t)q * a->st.pstride + l] = g[l];
    }
}

/* A pool over the blocked layout runs `blocked` over its rows of 16
 * channels, an NCHW one `nchw` over its planes. */
static void pool_dispatch(backend_t *be, const window_desc *d, threadpool_fn blocked,
                          threadpool_fn nchw, pool_args *a)
{
    if (d->blocked_x)
        cpu_run(be, cpu_tasks(be, blocked_rows(d)), blocked, a);
    else
        cpu_run(be, cpu_tasks(be, d->n * d->c), nchw, a);
}

CPU_HOT static void maxpool_forward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int lo, hi;
    cpu_range(d->n * d->c, tasks, k, &lo, &hi);
    for (int pl = lo; pl < hi; pl++) {
        const float *x = (const float *)a->x + (size_t)pl * d->h * d->w;
        float *y = (float *)a->y + (size_t)pl * d->oh * d->ow;
        int32_t *m = a->mask + (size_t)pl * d->oh * d->ow;
        if (d->k == 2 && d->stride == 2 && d->pad == 0) {
            /* The common 2x2 window, branch-free: selects instead of jumps
             * (the data decides the comparisons, so branches mispredict). */
            int (*row)(const float *, const float *, float *, int32_t *, int, int32_t, int) =
                maxpool2x2_row;
#ifdef X86_KERNELS
            if (cpu_isa() >= CPU_ISA_AVX2)
                row = maxpool2x2_row_avx2;
#endif
#ifdef CPU_AVX512_KERNELS
            if (cpu_isa() == CPU_ISA_AVX512)
                row = maxpool2x2_row_avx512;
#endif
            for (int oy = 0; oy < d->oh; oy++) {
                const float *r0 = x + (2 * oy) * d->w;
                if (row(r0, r0 + d->w, y + oy * d->ow, m + oy * d->ow, d->ow, 2 * oy * d->w, d->w))
                    for (int ox = 0; ox < d->ow; ox++)
                        y[oy * d->ow + ox] = window_max(d, x, oy, ox, &m[oy * d->ow + ox]);
            }
            continue;
        }
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++)
                y[oy * d->ow + ox] = window_max(d, x, oy, ox, &m[oy * d->ow + ox]);
    }
}

void cpu_maxpool_forward(backend_t *be, const window_desc *d, const float *x, float *y,
                         int32_t *mask)
{
    pool_args a = pool_args_of(be, d);
    a.x = x;
    a.y = y;
    a.mask = mask;
    pool_dispatch(be, d, maxpool_blocked_forward_task, maxpool_forward_task, &a);
}

CPU_HOT static void maxpool_backward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int lo, hi;
    cpu_range(d->n * d->c, tasks, k, &lo, &hi);
    size_t in = (size_t)d->h * d->w, out = (size_t)d->oh * d->ow;
    for (int pl = lo; pl < hi; pl++) {
        float *dx = a->dx + (size_t)pl * in;
        const float *dy = a->dyc + (size_t)pl * out;
        const int32_t *m = a->maskc + (size_t)pl * out;
        memset(dx, 0, in * sizeof(float));
        for (size_t q = 0; q < out; q++)
            if (m[q] >= 0)
                dx[m[q]] += dy[q];
    }
}

void cpu_maxpool_backward(backend_t *be, const window_desc *d, const float *dy,
                          const int32_t *mask, float *dx)
{
    pool_args a = pool_args_of(be, d);
    a.dyc = dy;
    a.maskc = mask;
    a.dx = dx;
    pool_dispatch(be, d, maxpool_blocked_backward_task, maxpool_backward_task, &a);
}

static void avgpool_forward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int lo, hi;
    cpu_range(d->n * d->c, tasks, k, &lo, &hi);
    float inv = 1.0f / (float)(d->k * d->k);
    for (int pl = lo; pl < hi; pl++) {
        const float *x = (const float *)a->x + (size_t)pl * d->h * d->w;
        float *y = (float *)a->y + (size_t)pl * d->oh * d->ow;
        for (int oy = 0; oy < d->oh; oy++) {
            for (int ox = 0; ox < d->ow; ox++) {
                int y0, x0, ky0, ky1, kx0, kx1;
                window_bounds(d, oy, ox, &y0, &x0, &ky0, &ky1, &kx0, &kx1);
                float s = 0.0f;
                for (int ky = ky0; ky < ky1; ky++)
                    for (int kx = kx0; kx < kx1; kx++)
                        s += x[(y0 + ky) * d->w + x0 + kx];
                y[oy * d->ow + ox] = s * inv;
            }
        }
    }
}

void cpu_avgpool_forward(backend_t *be, const window_desc *d, const float *x, float *y)
{
    pool_args a = pool_args_of(be, d);
    a.x = x;
    a.y = y;
    pool_dispatch(be, d, avgpool_blocked_forward_task, avgpool_forward_task, &a);
}

static void avgpool_backward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int lo, hi;
    cpu_range(d->n * d->c, tasks, k, &lo, &hi);
    float inv = 1.0f / (float)(d->k * d->k);
    for (int pl = lo; pl < hi; pl++) {
        float *dx = a->dx + (size_t)pl * d->h * d->w;
        const float *dy = a->dyc + (size_t)pl * d->oh * d->ow;
        memset(dx, 0, (size_t)d->h * d->w * sizeof(float));
        for (int oy = 0; oy < d->oh; oy++) {
            for (int ox = 0; ox < d->ow; ox++) {
                float g = dy[oy * d->ow + ox] * inv;
                int y0, x0, ky0, ky1, kx0, kx1;
                window_bounds(d, oy, ox, &y0, &x0, &ky0, &ky1, &kx0, &kx1);
                for (int ky = ky0; ky < ky1; ky++)
                    for (int kx = kx0; kx < kx1; kx++)
                        dx[(y0 + ky) * d->w + x0 + kx] += g;
            }
        }
    }
}

void cpu_avgpool_backward(backend_t *be, const window_desc *d, const float *dy, float *dx)
{
    pool_args a = pool_args_of(be, d);
    a.dyc = dy;
    a.dx = dx;
    pool_dispatch(be, d, avgpool_blocked_backward_task, avgpool_backward_task, &a);
}

void cpu_global_avgpool_blocked_forward(backend_t *be, int n, int c, int hw, const float *x,
                                        float *y)
{
    gap_args a = {.n = n, .c = c, .hw = hw, .x = x, .y = y, .bf16 = be->blocked_bf16,
                  .st = tt_blocked_strides_of(c, hw, be->blocked_nhwc)};
    cpu_run(be, cpu_tasks(be, n * (c / 16)), gap_blocked_forward_task, &a);
}

void cpu_global_avgpool_blocked_backward(backend_t *be, int n, int c, int hw, const float *dy,
                                         float *dx)
{
    gap_args a = {.n = n, .c = c, .hw = hw, .dy = dy, .dx = dx,
                  .st = tt_blocked_strides_of(c, hw, be->blocked_nhwc)};
    cpu_run(be, cpu_tasks(be, n * (c / 16)), gap_blocked_backward_task, &a);
}

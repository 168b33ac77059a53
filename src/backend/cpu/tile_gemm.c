/* tile_gemm.c - C = A B (+ bias, relu), one multiply-add chain per element
 * in k order (tile_gemm.h says why). One kernel per instruction-set level,
 * picked by cpu_isa() (TT_CPU_ISA caps it):
 *  - AVX-512: 8 rows x 48 columns of C in 24 of the 32 registers, one
 *    broadcast of A and three vectors of B per k;
 *  - AVX2 + FMA: 4 rows x 24 columns in 12 of the 16 registers, one
 *    broadcast of A and three vectors of 8 of B per k; a narrower last tile
 *    takes more rows (6 x 16, 12 x 8), so it too keeps 12 chains in flight;
 *  - plain C: 4 x 16 accumulators the compiler vectorises as it can.
 * The AVX-512 and AVX2 kernels fuse each multiply-add (fmaf's bits), so they
 * agree bit for bit; the plain kernel, for CPUs without FMA, rounds the
 * product and the sum separately (libm's fmaf there would be a software
 * call per element). A fourth kernel, AVX512_BF16's, multiplies bf16
 * operands (tile_gemm_t.bf16) in the AVX-512 tiles, one k pair per
 * instruction. */
#include "backend/cpu/tile_gemm.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/transpose.h"
#include "backend/math.h"

#ifdef CPU_ISA_TARGETS
#include <immintrin.h>
#endif

#define NR 48 /* columns per panel: three vectors of 16, six of 8 */
#define MR 8  /* rows per AVX-512 tile */

size_t tile_gemm_pack_floats(int K)
{
    return (size_t)K * NR;
}

/* Panel columns [n0, n0 + nn) of a transposed B(k, n) = b[n * b_rs + k]
 * into p[k * w + j] (w = nn rounded up to 16), zeros beyond nn: 16 x 16
 * blocks, each transposed by the level's kernel (transpose.c). */
static void pack_panel(const tile_gemm_t *g, int n0, int nn, int w, float *p)
{
    for (int j = 0; j < w; j += 16)
        for (int k = 0; k < g->K; k += 16)
            cpu_transpose16(g->b + (size_t)(n0 + j) * g->b_rs + k, g->b_rs, nn - j,
                            g->K - k < 16 ? g->K - k : 16, p + (size_t)k * w + j, w, 16);
}

/* ---- the plain C kernel: rows [m0, m1) x columns [n0, n0 + nn) of C,
 * B(k, j) = b[k * bk + j * bj]. `fused`: each step is fmaf (the vector
 * kernels' bits), else a rounded product then a rounded sum. Inlined with
 * a constant `fused` into the two variants below. */
__attribute__((always_inline)) static inline void
block_plain_body(const tile_gemm_t *g, int m0, int m1, int n0, int nn, const float *b,
                 ptrdiff_t bk, ptrdiff_t bj, const bool fused)
{
    enum { R = 4, W = 16 };
    for (int m = m0; m < m1; m += R) {
        int rows = m1 - m < R ? m1 - m : R;
        for (int j0 = 0; j0 < nn; j0 += W) {
            int cols = nn - j0 < W ? nn - j0 : W;
            float acc[R][W] = {{0}};
            for (int k = 0; k < g->K; k++) {
                const float *brow = b + (ptrdiff_t)k * bk + (ptrdiff_t)j0 * bj;
                for (int r = 0; r < rows; r++) {
                    float a = g->a[(ptrdiff_t)(m + r) * g->a_rs + (ptrdiff_t)k * g->a_cs];
                    for (int j = 0; j < cols; j++) {
                        if (fused) {
                            acc[r][j] = fmaf(a, brow[j * bj], acc[r][j]);
                        } else {
                            float p = a * brow[j * bj];
                            acc[r][j] = acc[r][j] + p;
                        }
                    }
                }
            }
            for (int r = 0; r < rows; r++) {
                float *c = g->c + (ptrdiff_t)(m + r) * g->ldc + n0 + j0;
                for (int j = 0; j < cols; j++) {
                    float v = acc[r][j];
                    if (g->bias != NULL)
                        v += g->bias[n0 + j0 + j];
                    c[j] = g->relu ? tt_relu(v) : v;
                }
            }
        }
    }
}

/* Level plain. Compiled for the base instruction set, which has no fma, so
 * the compiler cannot fuse the product and the sum either. */
static void block_plain(const tile_gemm_t *g, int m0, int m1, int n0, int nn, const float *b,
                        ptrdiff_t bk, ptrdiff_t bj)
{
    block_plain_body(g, m0, m1, n0, nn, b, bk, bj, false);
}

#ifdef CPU_ISA_TARGETS
/* The AVX2 and AVX-512 levels' kernel for a B read in place (no packing
 * buffer): fmaf becomes vfmadd here, not a libm call. */
CPU_TARGET_AVX2 static void block_plain_fma(const tile_gemm_t *g, int m0, int m1, int n0, int nn,
                                            const float *b, ptrdiff_t bk, ptrdiff_t bj)
{
    block_plain_body(g, m0, m1, n0, nn, b, bk, bj, true);
}
#endif

/* ---- the AVX-512 kernel ---- */

#ifdef CPU_ISA_TARGETS
/* One tile of `rows` (<= MR) x 16*NV columns, the last vector masked by
 * `last`. Inlined with constant rows and NV, so the unused accumulators
 * vanish; they are named variables, not an array, because GCC keeps an
 * array of vectors in memory (it scalarises before it unrolls). */
#define ACC_ROW(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = c##r##0, c##r##2 = c##r##0
#define FMA_ROW(r)                                                                            \
    if (rows > r) {                                                                           \
        __m512 av = _mm512_set1_ps(a[r * ars]);                                               \
        c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                           \
        if (NV > 1)                                                                           \
            c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                       \
        if (NV > 2)                                                                           \
            c##r##2 = _mm512_fmadd_ps(av, b2, c##r##2);                                       \
    }
#define STORE_ROW(r)                                                                          \
    if (rows > r) {                                                                           \
        store_vec(c + r * ldc, c##r##0, NV == 1, last, bias, relu);                           \
        if (NV > 1)                                                                           \
            store_vec(c + r * ldc + 16, c##r##1, NV == 2, last, bias ? bias + 16 : NULL, relu);  \
        if (NV > 2)                                                                           \
            store_vec(c + r * ldc + 32, c##r##2, true, last, bias ? bias + 32 : NULL, relu);  \
    }

/* The epilogue of one vector: + bias, relu, store (masked when it is the
 * panel's last). */
__attribute__((target("avx512f"), always_inline)) static inline void
store_vec(float *c, __m512 y, bool is_last, __mmask16 last, const float *bias, bool relu)
{
    __mmask16 m = is_last ? last : (__mmask16)0xffff;
    if (bias != NULL)
        y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, bias));
    if (relu) /* max(y, 0) picks 0 for NaN and -0, as tt_relu */
        y = _mm512_max_ps(y, _mm512_setzero_ps());
    _mm512_mask_storeu_ps(c, m, y);
}

__attribute__((target("avx512f"), always_inline)) static inline void
tile512(const int rows, const int NV, int K, const float *a, ptrdiff_t ars, ptrdiff_t acs,
        const float *b, ptrdiff_t brs, __mmask16 last, float *c, ptrdiff_t ldc,
        const float *bias, bool relu)
{
    ACC_ROW(0); ACC_ROW(1); ACC_ROW(2); ACC_ROW(3);
    ACC_ROW(4); ACC_ROW(5); ACC_ROW(6); ACC_ROW(7);
    __mmask16 m0 = NV == 1 ? last : 0xffff, m1 = NV == 2 ? last : 0xffff;
    for (int k = 0; k < K; k++) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b);
        __m512 b1 = NV > 1 ? _mm512_maskz_loadu_ps(m1, b + 16) : b0;
        __m512 b2 = NV > 2 ? _mm512_maskz_loadu_ps(last, b + 32) : b0;
        FMA_ROW(0); FMA_ROW(1); FMA_ROW(2); FMA_ROW(3);
        FMA_ROW(4); FMA_ROW(5); FMA_ROW(6); FMA_ROW(7);
        a += acs;
        b += brs;
    }
    STORE_ROW(0); STORE_ROW(1); STORE_ROW(2); STORE_ROW(3);
    STORE_ROW(4); STORE_ROW(5); STORE_ROW(6); STORE_ROW(7);
}

/* T(rows, vectors) for every tile shape, for a switch on rows * 4 + nv */
#define TILE_SHAPES(T)                                                                        \
    T(1, 1) T(1, 2) T(1, 3) T(2, 1) T(2, 2) T(2, 3) T(3, 1) T(3, 2) T(3, 3)                   \
    T(4, 1) T(4, 2) T(4, 3) T(5, 1) T(5, 2) T(5, 3) T(6, 1) T(6, 2) T(6, 3)                   \
    T(7, 1) T(7, 2) T(7, 3) T(8, 1) T(8, 2) T(8, 3)

#define TILE_CASE(R, V)                                                                       \
    case (R) * 4 + (V):                                                                       \
        tile512(R, V, K, a, ars, acs, b, brs, last, c, ldc, bias, relu);                      \
        break;

__attribute__((target("avx512f"))) static void
tile512_any(int rows, int nv, int K, const float *a, ptrdiff_t ars, ptrdiff_t acs,
            const float *b, ptrdiff_t brs, __mmask16 last, float *c, ptrdiff_t ldc,
            const float *bias, bool relu)
{
    switch (rows * 4 + nv) {
        TILE_SHAPES(TILE_CASE)
    }
}

/* The mask of the valid lanes of a panel's last vector, nn columns wide. */
static __mmask16 last_mask(int nn)
{
    return (__mmask16)(nn % 16 == 0 ? 0xffff : (1u << (nn % 16)) - 1);
}

__attribute__((target("avx512f"))) static void block_avx512(const tile_gemm_t *g, int m0, int m1,
                                                            int n0, int nn, const float *b,
                                                            ptrdiff_t b_rs)
{
    int nv = (nn + 15) / 16;
    __mmask16 last = last_mask(nn);
    const float *bias = g->bias != NULL ? g->bias + n0 : NULL;
    for (int m = m0; m < m1; m += MR) {
        int rows = m1 - m < MR ? m1 - m : MR;
        tile512_any(rows, nv, g->K, g->a + (size_t)m * g->a_rs, g->a_rs, g->a_cs, b, b_rs, last,
                    g->c + (size_t)m * g->ldc + n0, g->ldc, bias, g->relu);
    }
}

/* ---- the AVX2 + FMA kernel ----
 *
 * A tile of `rows` x 8*NV columns, at most 12 accumulators: 4 rows of three
 * vectors, 6 of two or 12 of one (avx2_rows), with NV vectors of B and one
 * broadcast of A, at most 16 registers. Two FMA ports of 4 cycles' latency
 * need 8 independent chains at least: a 4 x 8 tile (4 chains) ran at half
 * speed, and it is the last tile of each thread's half of N = 256. With `ragged`
 * the tile's last vector holds fewer than 8 columns (the lanes set in
 * `last`): it is loaded and stored masked, since an unpacked B (dy w, dy^T
 * x) ends there. */
#define ACC2_ROW(r) __m256 d##r##0 = _mm256_setzero_ps(), d##r##1 = d##r##0, d##r##2 = d##r##0
#define ACC2_ROWS                                                                             \
    ACC2_ROW(0); ACC2_ROW(1); ACC2_ROW(2); ACC2_ROW(3); ACC2_ROW(4); ACC2_ROW(5);             \
    ACC2_ROW(6); ACC2_ROW(7); ACC2_ROW(8); ACC2_ROW(9); ACC2_ROW(10); ACC2_ROW(11)
#define FMA2_ROW(r)                                                                           \
    if (rows > r) {                                                                           \
        __m256 av = _mm256_broadcast_ss(a + r * ars);                                         \
        d##r##0 = _mm256_fmadd_ps(av, b0, d##r##0);                                           \
        if (NV > 1)                                                                           \
            d##r##1 = _mm256_fmadd_ps(av, b1, d##r##1);                                       \
        if (NV > 2)                                                                           \
            d##r##2 = _mm256_fmadd_ps(av, b2, d##r##2);                                       \
    }
#define STORE2_ROW(r)                                                                         \
    if (rows > r) {                                                                           \
        store_vec8(c + r * ldc, d##r##0, ragged && NV == 1, last, bias, relu);                \
        if (NV > 1)                                                                           \
            store_vec8(c + r * ldc + 8, d##r##1, ragged && NV == 2, last,                     \
                       bias ? bias + 8 : NULL, relu);                                         \
        if (NV > 2)                                                                           \
            store_vec8(c + r * ldc + 16, d##r##2, ragged, last, bias ? bias + 16 : NULL, relu); \
    }

/* One vector of B: masked when it is the tile's ragged last. */
CPU_TARGET_AVX2 __attribute__((always_inline)) static inline __m256
load_vec8(const float *p, bool masked, __m256i last)
{
    return masked ? _mm256_maskload_ps(p, last) : _mm256_loadu_ps(p);
}

/* The epilogue of one vector: + bias, relu, store (masked when ragged). */
CPU_TARGET_AVX2 __attribute__((always_inline)) static inline void
store_vec8(float *c, __m256 y, bool masked, __m256i last, const float *bias, bool relu)
{
    if (bias != NULL)
        y = _mm256_add_ps(y, load_vec8(bias, masked, last));
    if (relu) /* max(y, 0) picks 0 for NaN and -0, as tt_relu */
        y = _mm256_max_ps(y, _mm256_setzero_ps());
    if (masked)
        _mm256_maskstore_ps(c, last, y);
    else
        _mm256_storeu_ps(c, y);
}

CPU_TARGET_AVX2 __attribute__((always_inline)) static inline void
tile256(const int rows, const int NV, const bool ragged, int K, const float *a, ptrdiff_t ars,
        ptrdiff_t acs, const float *b, ptrdiff_t brs, __m256i last, float *c, ptrdiff_t ldc,
        const float *bias, bool relu)
{
    ACC2_ROWS;
    for (int k = 0; k < K; k++) {
        __m256 b0 = load_vec8(b, ragged && NV == 1, last);
        __m256 b1 = NV > 1 ? load_vec8(b + 8, ragged && NV == 2, last) : b0;
        __m256 b2 = NV > 2 ? load_vec8(b + 16, ragged, last) : b0;
        FMA2_ROW(0); FMA2_ROW(1); FMA2_ROW(2); FMA2_ROW(3); FMA2_ROW(4); FMA2_ROW(5);
        FMA2_ROW(6); FMA2_ROW(7); FMA2_ROW(8); FMA2_ROW(9); FMA2_ROW(10); FMA2_ROW(11);
        a += acs;
        b += brs;
    }
    STORE2_ROW(0); STORE2_ROW(1); STORE2_ROW(2); STORE2_ROW(3); STORE2_ROW(4); STORE2_ROW(5);
    STORE2_ROW(6); STORE2_ROW(7); STORE2_ROW(8); STORE2_ROW(9); STORE2_ROW(10); STORE2_ROW(11);
}

/* T(rows, vectors) for every AVX2 tile shape, for a switch on
 * (rows * 4 + nv) * 2 + ragged */
#define TILE2_SHAPES(T)                                                                       \
    T(1, 1) T(1, 2) T(1, 3) T(2, 1) T(2, 2) T(2, 3) T(3, 1) T(3, 2) T(3, 3)                   \
    T(4, 1) T(4, 2) T(4, 3) T(5, 1) T(5, 2) T(6, 1) T(6, 2) T(7, 1) T(8, 1) T(9, 1)          \
    T(10, 1) T(11, 1) T(12, 1)

/* Rows a tile of nv vectors takes: 12 accumulators whatever its width. */
static int avx2_rows(int nv)
{
    return 12 / nv;
}

#define TILE2_CASE(R, V)                                                                      \
    case ((R) * 4 + (V)) * 2:                                                                 \
        tile256(R, V, false, K, a, ars, acs, b, brs, last, c, ldc, bias, relu);               \
        break;                                                                                \
    case ((R) * 4 + (V)) * 2 + 1:                                                             \
        tile256(R, V, true, K, a, ars, acs, b, brs, last, c, ldc, bias, relu);                \
        break;

CPU_TARGET_AVX2 static void tile256_any(int rows, int nv, bool ragged, int K, const float *a,
                                        ptrdiff_t ars, ptrdiff_t acs, const float *b,
                                        ptrdiff_t brs, __m256i last, float *c, ptrdiff_t ldc,
                                        const float *bias, bool relu)
{
    switch ((rows * 4 + nv) * 2 + ragged) {
        TILE2_SHAPES(TILE2_CASE)
    }
}

/* Rows [m0, m1) x columns [n0, n0 + nn) of C from B(k, j) = b[k * b_rs + j],
 * in tiles of 4 rows x 24 columns (the last, narrower, of more rows). */
CPU_TARGET_AVX2 static void block_avx2(const tile_gemm_t *g, int m0, int m1, int n0, int nn,
                                       const float *b, ptrdiff_t b_rs)
{
    for (int j = 0; j < nn; j += 24) {
        int cols = nn - j < 24 ? nn - j : 24, nv = (cols + 7) / 8, tail = cols - 8 * (nv - 1);
        __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i last = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), lanes);
        const float *bias = g->bias != NULL ? g->bias + n0 + j : NULL;
        for (int m = m0; m < m1; m += avx2_rows(nv)) {
            int rows = m1 - m < avx2_rows(nv) ? m1 - m : avx2_rows(nv);
            tile256_any(rows, nv, tail < 8, g->K, g->a + (size_t)m * g->a_rs, g->a_rs, g->a_cs,
                        b + j, b_rs, last, g->c + (size_t)m * g->ldc + n0 + j, g->ldc, bias,
                        g->relu);
        }
    }
}
#endif

#ifdef CPU_AVX512_KERNELS
/* ---- the bf16 kernel (AVX512_BF16) ----
 *
 * Operands are packed in pairs along k: p[kk * w + j] holds X(2kk, j) in its
 * low 16 bits and X(2kk + 1, j) in its high 16, zero past K and past the
 * valid columns: lane j of _mm512_dpbf16_ps(c, a, b) adds a.lo * b.lo +
 * a.hi * b.hi, two exact products (8-bit significands) summed in float32.
 * B is packed one panel of w <= NR columns at a time; A once per block: a
 * row-major A row by row (pairs in order, no transpose), else in groups of
 * 16 rows (w = 16), a tile of MR = 8 rows broadcasting from half a group.
 * vcvtne2ps2bf16 rounds to nearest even, as dense_bf16.c's bf16_round and
 * torch; a denormal float becomes zero, which vdpbf16ps (denormals are
 * zero) would make of it anyway. So the packing is the only
 * conversion pass: no float32 operand is read twice.
 *
 * Per k pair: three loads of B and eight broadcasts of A feed 24 vdpbf16ps
 * (768 multiply-adds), twice the float32 kernel's per instruction. */
#define BF16_TARGET "avx512f,avx512bw,avx512bf16"

/* One row of K contiguous floats into (K + 1) / 2 pairs in order. */
__attribute__((target(BF16_TARGET))) static void pack_row_bf16(const float *x, int K, uint32_t *p)
{
    for (int k = 0; k < K; k += 32) {
        int kc = K - k < 32 ? K - k : 32;
        __mmask16 lo = kc >= 16 ? 0xffff : last_mask(kc);
        __mmask16 hi = kc >= 32 ? 0xffff : kc <= 16 ? 0 : last_mask(kc - 16);
        __m512bh b = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + k + 16),
                                         _mm512_maskz_loadu_ps(lo, x + k));
        _mm512_mask_storeu_epi32(p + k / 2, last_mask((kc + 1) / 2), (__m512i)b);
    }
}

/* X(k, j) = x[k * ks + j * js] for k < K, j < nn into p as above, w columns
 * (a multiple of 16). One of ks, js is 1 (tile_gemm.h's views all are). */
__attribute__((target(BF16_TARGET))) static void pack_bf16(const float *x, ptrdiff_t ks,
                                                         ptrdiff_t js, int K, int nn, int w,
                                                         uint32_t *p)
{
    if (js == 1) {
        /* rows 2kk and 2kk + 1 of X, 16 columns: both rounded into one
         * vector (row 2kk's 16 bf16 below row 2kk + 1's), then interleaved */
        static const uint16_t order[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                           8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                           15, 31};
        __m512i inter = _mm512_loadu_si512(order);
        for (int k = 0; k < K; k += 2) {
            const float *r0 = x + (ptrdiff_t)k * ks;
            for (int j = 0; j < w; j += 16) {
                __mmask16 m = nn - j >= 16 ? 0xffff : nn - j <= 0 ? 0 : last_mask(nn - j);
                __m512 v0 = _mm512_maskz_loadu_ps(m, r0 + j);
                __m512 v1 = k + 1 < K ? _mm512_maskz_loadu_ps(m, r0 + ks + j) : _mm512_setzero_ps();
                __m512i both = (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
                _mm512_storeu_si512(p + (size_t)(k / 2) * w + j,
                                    _mm512_permutexvar_epi16(inter, both));
            }
        }
        return;
    }
    /* ks == 1: 32 consecutive k of column j are 16 pairs in order; 16
     * columns' of them are then transposed into 16 rows of pairs */
    uint32_t t[16 * 16];
    for (int j = 0; j < w; j += 16) {
        int cols = nn - j >= 16 ? 16 : nn - j > 0 ? nn - j : 0;
        for (int k = 0; k < K; k += 32) {
            int kc = K - k < 32 ? K - k : 32;
            for (int i = 0; i < cols; i++)
                pack_row_bf16(x + (ptrdiff_t)(j + i) * js + k, kc, t + 16 * i);
            cpu_transpose16((const float *)t, 16, cols, (kc + 1) / 2,
                            (float *)(p + (size_t)(k / 2) * w + j), w, 16);
        }
    }
}

#define DP_ROW(r)                                                                             \
    if (rows > r) {                                                                           \
        __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * ars]);                           \
        c##r##0 = _mm512_dpbf16_ps(c##r##0, av, b0);                                          \
        if (NV > 1)                                                                           \
            c##r##1 = _mm512_dpbf16_ps(c##r##1, av, b1);                                      \
        if (NV > 2)                                                                           \
            c##r##2 = _mm512_dpbf16_ps(c##r##2, av, b2);                                      \
    }

/* One tile of `rows` x 16*NV columns from packed pairs: A's pair kk of row
 * r at a[r * ars + kk * acs], B's at b[kk * bw + j]; K2 pairs. */
__attribute__((target(BF16_TARGET), always_inline)) static inline void
tile_bf16(const int rows, const int NV, int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
          const uint32_t *b, ptrdiff_t bw, __mmask16 last, float *c, ptrdiff_t ldc,
          const float *bias, bool relu)
{
    ACC_ROW(0); ACC_ROW(1); ACC_ROW(2); ACC_ROW(3);
    ACC_ROW(4); ACC_ROW(5); ACC_ROW(6); ACC_ROW(7);
    for (int kk = 0; kk < K2; kk++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
        __m512bh b1 = NV > 1 ? (__m512bh)_mm512_loadu_si512(b + 16) : b0;
        __m512bh b2 = NV > 2 ? (__m512bh)_mm512_loadu_si512(b + 32) : b0;
        DP_ROW(0); DP_ROW(1); DP_ROW(2); DP_ROW(3);
        DP_ROW(4); DP_ROW(5); DP_ROW(6); DP_ROW(7);
        a += acs;
        b += bw;
    }
    STORE_ROW(0); STORE_ROW(1); STORE_ROW(2); STORE_ROW(3);
    STORE_ROW(4); STORE_ROW(5); STORE_ROW(6); STORE_ROW(7);
}

#define TILE_BF16_CASE(R, V)                                                                  \
    case (R) * 4 + (V):                                                                       \
        tile_bf16(R, V, K2, a, ars, acs, b, bw, last, c, ldc, bias, relu);                    \
        break;

__attribute__((target(BF16_TARGET))) static void
tile_bf16_any(int rows, int nv, int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
              const uint32_t *b, ptrdiff_t bw, __mmask16 last, float *c, ptrdiff_t ldc,
              const float *bias, bool relu)
{
    switch (rows * 4 + nv) {
        TILE_SHAPES(TILE_BF16_CASE)
    }
}

/* Rows [m0, m1) x columns [n0, n1) of C; pack: tile_gemm_bf16_pack_floats. */
__attribute__((target(BF16_TARGET))) static void block_bf16(const tile_gemm_t *g, int m0, int m1,
                                                          int n0, int n1, uint32_t *pack)
{
    int K2 = (g->K + 1) / 2, groups = (m1 - m0 + 15) / 16;
    uint32_t *ap = pack, *bp = pack + (size_t)groups * 16 * K2;
    if (g->a_cs == 1) /* row-major A: each row's pairs in order, no transpose */
        for (int m = m0; m < m1; m++)
            pack_row_bf16(g->a + (ptrdiff_t)m * g->a_rs, g->K, ap + (size_t)(m - m0) * K2);
    else /* X(k, j) = A(m + j, k), groups of 16 rows */
        for (int q = 0; q < groups; q++) {
            int m = m0 + 16 * q;
            pack_bf16(g->a + (ptrdiff_t)m * g->a_rs, g->a_cs, g->a_rs, g->K, m1 - m, 16,
                      ap + (size_t)q * 16 * K2);
        }
    for (int n = n0; n < n1; n += NR) {
        int nn = n1 - n < NR ? n1 - n : NR, w = (nn + 15) & ~15;
        if (g->b_trans)
            pack_bf16(g->b + (ptrdiff_t)n * g->b_rs, 1, g->b_rs, g->K, nn, w, bp);
        else
            pack_bf16(g->b + n, g->b_rs, 1, g->K, nn, w, bp);
        const float *bias = g->bias != NULL ? g->bias + n : NULL;
        for (int m = m0; m < m1; m += MR) {
            int rows = m1 - m < MR ? m1 - m : MR;
            const uint32_t *a = g->a_cs == 1 ? ap + (size_t)(m - m0) * K2
                                             : ap + (size_t)(m - m0) / 16 * 16 * K2 + (m - m0) % 16;
            tile_bf16_any(rows, w / 16, K2, a, g->a_cs == 1 ? K2 : 1, g->a_cs == 1 ? 1 : 16, bp,
                          w, last_mask(nn), g->c + (size_t)m * g->ldc + n, g->ldc, bias, g->relu);
        }
    }
}
#endif

bool tile_gemm_bf16_supported(void)
{
#ifdef CPU_AVX512_KERNELS
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512bf16");
    return have && cpu_isa() == CPU_ISA_AVX512; /* TT_CPU_ISA caps it too */
#else
    return false;
#endif
}

size_t tile_gemm_bf16_pack_floats(int M, int K)
{
    return ((size_t)(M + 15) / 16 * 16 + NR) * (size_t)((K + 1) / 2);
}

/* The level's kernel over rows [m0, m1) x the panel [n, n + nn), B(k, j) =
 * b[k * b_rs + j]. */
static void block_level(cpu_isa_t isa, const tile_gemm_t *g, int m0, int m1, int n, int nn,
                        const float *b, ptrdiff_t b_rs)
{
    switch (isa) {
#ifdef CPU_ISA_TARGETS
    case CPU_ISA_AVX512:
        block_avx512(g, m0, m1, n, nn, b, b_rs);
        return;
    case CPU_ISA_AVX2:
        block_avx2(g, m0, m1, n, nn, b, b_rs);
        return;
#endif
    default:
        block_plain(g, m0, m1, n, nn, b, b_rs, 1);
    }
}

void tile_gemm_block(const tile_gemm_t *g, int m0, int m1, int n0, int n1, float *pack)
{
    if (m1 <= m0 || n1 <= n0)
        return;
#ifdef CPU_AVX512_KERNELS
    if (g->bf16) { /* the caller checked tile_gemm_bf16_supported() and gave pack */
        block_bf16(g, m0, m1, n0, n1, (uint32_t *)pack);
        return;
    }
#endif
    cpu_isa_t isa = cpu_isa();
    if (g->b_trans && pack == NULL) { /* no room to pack: read B in place */
        const float *b = g->b + (ptrdiff_t)n0 * g->b_rs;
#ifdef CPU_ISA_TARGETS
        if (isa != CPU_ISA_PLAIN) { /* fused, as the vector kernels */
            block_plain_fma(g, m0, m1, n0, n1 - n0, b, 1, g->b_rs);
            return;
        }
#endif
        block_plain(g, m0, m1, n0, n1 - n0, b, 1, g->b_rs);
        return;
    }
    for (int n = n0; n < n1; n += NR) {
        int nn = n1 - n < NR ? n1 - n : NR;
        const float *b = g->b + n;
        ptrdiff_t b_rs = g->b_rs;
        if (g->b_trans) {
            int w = (nn + 15) & ~15;
            pack_panel(g, n, nn, w, pack);
            b = pack;
            b_rs = w;
        }
        block_level(isa, g, m0, m1, n, nn, b, b_rs);
    }
}

void tile_gemm_part(const tile_gemm_t *g, int part, int parts, float *pack)
{
    if (g->N >= 32 * parts) {
        /* column ranges on 16-float boundaries, so only the last is ragged */
        int v = (g->N + 15) / 16;
        int n0 = 16 * (int)((long)v * part / parts), n1 = 16 * (int)((long)v * (part + 1) / parts);
        tile_gemm_block(g, 0, g->M, n0, n1 < g->N ? n1 : g->N, pack);
    } else {
        int m0, m1;
        cpu_range(g->M, parts, part, &m0, &m1);
        tile_gemm_block(g, m0, m1, 0, g->N, pack);
    }
}

/* tile_gemm.c - C = A B (+ bias, relu), one fma chain per element in k order
 * (tile_gemm.h says why). Two kernels with the same arithmetic: AVX-512
 * (8 rows x 48 columns of C in 24 registers, one broadcast of A and three
 * vectors of B per k), chosen at run time, and plain C for other CPUs and
 * the sanitizer builds. */
#include "backend/cpu/tile_gemm.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/transpose.h"
#include "backend/math.h"

#ifdef CPU_AVX512_KERNELS
#include <immintrin.h>
#endif

#define NR 48 /* columns per panel: three vectors of 16 */
#define MR 8  /* rows per AVX-512 tile */

size_t tile_gemm_pack_floats(int K)
{
    return (size_t)K * NR;
}

/* ---- packing a transposed B ---- */

/* Panel columns [n0, n0 + nn) of B(k, n) = b[n * b_rs + k] into
 * p[k * w + j] (w = nn rounded up to 16), zeros beyond nn. */
static void pack_plain(const tile_gemm_t *g, int n0, int nn, int w, float *p)
{
    for (int k = 0; k < g->K; k++) {
        float *row = p + (size_t)k * w;
        for (int j = 0; j < nn; j++)
            row[j] = g->b[(size_t)(n0 + j) * g->b_rs + k];
        for (int j = nn; j < w; j++)
            row[j] = 0.0f;
    }
}

#ifdef CPU_AVX512_KERNELS
__attribute__((target("avx512f"))) static void pack_avx512(const tile_gemm_t *g, int n0, int nn,
                                                           int w, float *p)
{
    for (int j = 0; j < w; j += 16)
        for (int k = 0; k < g->K; k += 16)
            cpu_transpose16(g->b + (size_t)(n0 + j) * g->b_rs + k, g->b_rs, nn - j,
                            g->K - k < 16 ? g->K - k : 16, p + (size_t)k * w + j, w, 16);
}
#endif

/* ---- the plain C kernel: rows [m0, m1) x columns [n0, n0 + nn) of C,
 * B(k, j) = b[k * bk + j * bj] ---- */

CPU_HOT static void block_plain(const tile_gemm_t *g, int m0, int m1, int n0, int nn,
                                const float *b, ptrdiff_t bk, ptrdiff_t bj)
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
                    for (int j = 0; j < cols; j++)
                        acc[r][j] = fmaf(a, brow[j * bj], acc[r][j]);
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

/* ---- the AVX-512 kernel ---- */

#ifdef CPU_AVX512_KERNELS
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

#define TILE_CASE(R, V)                                                                       \
    case (R) * 4 + (V):                                                                       \
        tile512(R, V, K, a, ars, acs, b, brs, last, c, ldc, bias, relu);                      \
        break

__attribute__((target("avx512f"))) static void
tile512_any(int rows, int nv, int K, const float *a, ptrdiff_t ars, ptrdiff_t acs,
            const float *b, ptrdiff_t brs, __mmask16 last, float *c, ptrdiff_t ldc,
            const float *bias, bool relu)
{
    switch (rows * 4 + nv) {
        TILE_CASE(1, 1); TILE_CASE(1, 2); TILE_CASE(1, 3);
        TILE_CASE(2, 1); TILE_CASE(2, 2); TILE_CASE(2, 3);
        TILE_CASE(3, 1); TILE_CASE(3, 2); TILE_CASE(3, 3);
        TILE_CASE(4, 1); TILE_CASE(4, 2); TILE_CASE(4, 3);
        TILE_CASE(5, 1); TILE_CASE(5, 2); TILE_CASE(5, 3);
        TILE_CASE(6, 1); TILE_CASE(6, 2); TILE_CASE(6, 3);
        TILE_CASE(7, 1); TILE_CASE(7, 2); TILE_CASE(7, 3);
        TILE_CASE(8, 1); TILE_CASE(8, 2); TILE_CASE(8, 3);
    }
}

__attribute__((target("avx512f"))) static void block_avx512(const tile_gemm_t *g, int m0, int m1,
                                                            int n0, int nn, const float *b,
                                                            ptrdiff_t b_rs)
{
    int nv = (nn + 15) / 16;
    __mmask16 last = (__mmask16)(nn % 16 == 0 ? 0xffff : (1u << (nn % 16)) - 1);
    const float *bias = g->bias != NULL ? g->bias + n0 : NULL;
    for (int m = m0; m < m1; m += MR) {
        int rows = m1 - m < MR ? m1 - m : MR;
        tile512_any(rows, nv, g->K, g->a + (size_t)m * g->a_rs, g->a_rs, g->a_cs, b, b_rs, last,
                    g->c + (size_t)m * g->ldc + n0, g->ldc, bias, g->relu);
    }
}
#endif

static bool use_avx512(void)
{
#ifdef CPU_AVX512_KERNELS
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx512f") ? 1 : 0;
    return have;
#else
    return false;
#endif
}

void tile_gemm_block(const tile_gemm_t *g, int m0, int m1, int n0, int n1, float *pack)
{
    if (m1 <= m0 || n1 <= n0)
        return;
    if (g->b_trans && pack == NULL) { /* no room to pack: read B in place */
        block_plain(g, m0, m1, n0, n1 - n0, g->b + (ptrdiff_t)n0 * g->b_rs, 1, g->b_rs);
        return;
    }
#ifdef CPU_AVX512_KERNELS
    bool v512 = use_avx512();
#endif
    for (int n = n0; n < n1; n += NR) {
        int nn = n1 - n < NR ? n1 - n : NR;
        const float *b = g->b + n;
        ptrdiff_t b_rs = g->b_rs;
        if (g->b_trans) {
            int w = (nn + 15) & ~15;
#ifdef CPU_AVX512_KERNELS
            if (v512)
                pack_avx512(g, n, nn, w, pack);
            else
#endif
                pack_plain(g, n, nn, w, pack);
            b = pack;
            b_rs = w;
        }
#ifdef CPU_AVX512_KERNELS
        if (v512) {
            block_avx512(g, m0, m1, n, nn, b, b_rs);
            continue;
        }
#endif
        block_plain(g, m0, m1, n, nn, b, b_rs, 1);
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

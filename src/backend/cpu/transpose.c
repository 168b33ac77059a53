/* transpose.c - 16 x 16 float tiles transposed: an AVX-512 kernel (four
 * rounds of unpacks and lane shuffles on 16 registers) chosen at run time,
 * plain C otherwise. Both move bits, so both give the same result. */
#include "backend/cpu/transpose.h"

#include <stdbool.h>

#include "backend/cpu/cpu.h"

#ifdef CPU_AVX512_KERNELS
#include <immintrin.h>

__attribute__((target("avx512f"))) static void transpose16_avx512(const float *src,
                                                                  ptrdiff_t ld, int rows,
                                                                  int cols, float *dst,
                                                                  ptrdiff_t ldd, int width)
{
    __m512 r[16], t[16];
    __mmask16 m = (__mmask16)(cols >= 16 ? 0xffff : (1u << cols) - 1);
    __mmask16 w = (__mmask16)(width >= 16 ? 0xffff : (1u << width) - 1);
    for (int i = 0; i < 16; i++)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(m, src + (ptrdiff_t)i * ld) : _mm512_setzero_ps();
    /* 2x2 blocks of floats, then of pairs, then 128-bit lanes, then 256 */
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    /* r[4q + s] now holds, in 128-bit lane L, column 4L + s of rows 4q..4q+3 */
    for (int s = 0; s < 4; s++) {
        __m512 a = r[s], b = r[4 + s], c = r[8 + s], d = r[12 + s];
        /* lanes (a0 b0 a1 b1), (a2 b2 a3 b3), same for c, d */
        __m512 ab02 = _mm512_shuffle_f32x4(a, b, 0x88), ab13 = _mm512_shuffle_f32x4(a, b, 0xdd);
        __m512 cd02 = _mm512_shuffle_f32x4(c, d, 0x88), cd13 = _mm512_shuffle_f32x4(c, d, 0xdd);
        /* ab02 = a0 a2 b0 b2; cd02 = c0 c2 d0 d2 -> (a0 b0 c0 d0), (a2 b2 c2 d2) */
        t[s] = _mm512_shuffle_f32x4(ab02, cd02, 0x88);
        t[8 + s] = _mm512_shuffle_f32x4(ab02, cd02, 0xdd);
        t[4 + s] = _mm512_shuffle_f32x4(ab13, cd13, 0x88);
        t[12 + s] = _mm512_shuffle_f32x4(ab13, cd13, 0xdd);
    }
    for (int i = 0; i < cols && i < 16; i++)
        _mm512_mask_storeu_ps(dst + (ptrdiff_t)i * ldd, w, t[i]);
}

static bool have_avx512(void)
{
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx512f") ? 1 : 0;
    return have;
}
#endif

void cpu_transpose16(const float *src, ptrdiff_t ld, int rows, int cols, float *dst,
                     ptrdiff_t ldd, int width)
{
#ifdef CPU_AVX512_KERNELS
    if (have_avx512()) {
        transpose16_avx512(src, ld, rows, cols, dst, ldd, width);
        return;
    }
#endif
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < width; i++)
            dst[(ptrdiff_t)j * ldd + i] = i < rows ? src[(ptrdiff_t)i * ld + j] : 0.0f;
}

/* transpose.c - 16 x 16 float tiles transposed, by the kernel of cpu_isa()'s
 * level: AVX-512 (four rounds of unpacks and lane shuffles on 16
 * registers), AVX2 (four 8 x 8 blocks, three rounds each on 8 registers) or
 * plain C. All move bits, so all give the same result. */
#include "backend/cpu/transpose.h"

#include <stdbool.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_isa.h"

#ifdef CPU_ISA_TARGETS
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

/* lanes [0, n) of 8 set, for masked loads and stores */
CPU_TARGET_AVX2 static __m256i lanes8(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* One 8 x 8 block: dst[j * ldd + i] = i < rows ? src[i * ld + j] : 0 for
 * j < cols, i < width (each of rows, cols, width in 1..8). */
CPU_TARGET_AVX2 static void transpose8_avx2(const float *src, ptrdiff_t ld, int rows, int cols,
                                            float *dst, ptrdiff_t ldd, int width)
{
    __m256 r[8], t[8];
    __m256i m = lanes8(cols), w = lanes8(width);
    for (int i = 0; i < 8; i++)
        r[i] = i < rows ? _mm256_maskload_ps(src + (ptrdiff_t)i * ld, m) : _mm256_setzero_ps();
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* r[4q + s] holds, in 128-bit lane L, column 4L + s of rows 4q..4q+3 */
    for (int s = 0; s < 4; s++) {
        t[s] = _mm256_permute2f128_ps(r[s], r[4 + s], 0x20);
        t[4 + s] = _mm256_permute2f128_ps(r[s], r[4 + s], 0x31);
    }
    for (int j = 0; j < cols; j++)
        _mm256_maskstore_ps(dst + (ptrdiff_t)j * ldd, w, t[j]);
}

/* The 16 x 16 tile as four 8 x 8 blocks; block (i0, j0) of src goes to
 * block (j0, i0) of dst. */
static void transpose16_avx2(const float *src, ptrdiff_t ld, int rows, int cols, float *dst,
                             ptrdiff_t ldd, int width)
{
    for (int i0 = 0; i0 < 16 && i0 < width; i0 += 8)
        for (int j0 = 0; j0 < 16 && j0 < cols; j0 += 8) {
            int r = rows - i0 < 0 ? 0 : rows - i0 > 8 ? 8 : rows - i0;
            int c = cols - j0 > 8 ? 8 : cols - j0, w = width - i0 > 8 ? 8 : width - i0;
            transpose8_avx2(src + (ptrdiff_t)i0 * ld + j0, ld, r, c,
                            dst + (ptrdiff_t)j0 * ldd + i0, ldd, w);
        }
}
#endif

void cpu_transpose16(const float *src, ptrdiff_t ld, int rows, int cols, float *dst,
                     ptrdiff_t ldd, int width)
{
#ifdef CPU_ISA_TARGETS
    switch (cpu_isa()) {
    case CPU_ISA_AVX512:
        transpose16_avx512(src, ld, rows, cols, dst, ldd, width);
        return;
    case CPU_ISA_AVX2:
        transpose16_avx2(src, ld, rows, cols, dst, ldd, width);
        return;
    default:
        break;
    }
#endif
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < width; i++)
            dst[(ptrdiff_t)j * ldd + i] = i < rows ? src[(ptrdiff_t)i * ld + j] : 0.0f;
}

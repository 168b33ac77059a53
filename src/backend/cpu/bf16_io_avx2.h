/* bf16_io_avx2.h - act_load / act_store (bf16_io.h) 8 lanes at a time, for
 * the AVX2 kernels of pool.c and batchnorm.c: the same bits as the scalar
 * functions lane by lane (bf16 widened exactly; rounded to nearest even,
 * a NaN kept as a quiet NaN of its sign). */
#ifndef TT_BF16_IO_AVX2_H
#define TT_BF16_IO_AVX2_H

#include "backend/cpu/bf16_io.h"
#include "backend/cpu/simd_target.h"

#ifdef X86_KERNELS
#include <immintrin.h>

#define AVX2_IO_INLINE TARGET_AVX2 __attribute__((always_inline)) static inline

/* The 8 values from element i on of an activation in either type. */
AVX2_IO_INLINE __m256 act_load8(const void *p, size_t i, bool bf16)
{
    if (!bf16)
        return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 8 floats rounded to bf16 into p: bf16_from_float lane by lane */
AVX2_IO_INLINE void bf16_store8(uint16_t *p, __m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    r = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(quiet), nan));
    /* every lane is below 0x10000: the unsigned saturation keeps it */
    __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128((__m128i *)p, h);
}

AVX2_IO_INLINE void act_store8(void *p, size_t i, __m256 v, bool bf16)
{
    if (bf16)
        bf16_store8((uint16_t *)p + i, v);
    else
        _mm256_storeu_ps((float *)p + i, v);
}
#endif

#endif

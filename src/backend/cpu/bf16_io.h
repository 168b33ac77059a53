/* bf16_io.h - bf16 storage of the blocked activations (backend.h:
 * blocked_bf16): how the CPU kernels that read or write them convert.
 *
 * bf16 is the upper half of a float32: widening is exact (a shift), and
 * narrowing rounds to nearest, ties to even, as oneDNN's and AVX512_BF16's
 * vcvtneps2bf16 do, so an activation a oneDNN kernel writes in bf16 and one
 * our kernels write hold the same bits for the same float (but for
 * denormals, which that instruction flushes to zero and this keeps). A NaN stays a
 * (quiet) NaN; rounding never turns a finite value into a NaN, and a value
 * past bf16's largest finite rounds to Inf, as the instruction does.
 *
 * The vector forms need AVX-512F only (vpmovdw), not AVX512_BF16: callers
 * are the `target("avx512f")` kernels, chosen at run time.
 */
#ifndef TT_BF16_IO_H
#define TT_BF16_IO_H

#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu.h"

static inline float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint16_t bf16_from_float(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet = (u >> 16) | 0x40u; /* a NaN: its sign, quietened */
    /* a select, not a branch, so that loops of it vectorise */
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/* Element i of an activation that holds float32 or, when bf16, bf16. */
static inline float act_load(const void *p, size_t i, bool bf16)
{
    return bf16 ? bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void act_store(void *p, size_t i, float v, bool bf16)
{
    if (bf16)
        ((uint16_t *)p)[i] = bf16_from_float(v);
    else
        ((float *)p)[i] = v;
}

/* Where element i of such an activation is. */
static inline const void *act_at(const void *p, size_t i, bool bf16)
{
    return (const char *)p + i * (bf16 ? sizeof(uint16_t) : sizeof(float));
}

#ifdef CPU_AVX512_KERNELS
#include <immintrin.h>

/* 16 bf16 from p, widened */
__attribute__((target("avx512f"))) static inline __m512 bf16_load16(const uint16_t *p)
{
    __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

/* 16 floats rounded to bf16 into p: bf16_from_float lane by lane */
__attribute__((target("avx512f"))) static inline void bf16_store16(uint16_t *p, __m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd,
                                                   _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16),
                                                      _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(r));
}

/* The 16 values from element i on of an activation in either type. */
__attribute__((target("avx512f"))) static inline __m512 act_load16(const void *p, size_t i,
                                                                   bool bf16)
{
    return bf16 ? bf16_load16((const uint16_t *)p + i) : _mm512_loadu_ps((const float *)p + i);
}

__attribute__((target("avx512f"))) static inline void act_store16(void *p, size_t i, __m512 v,
                                                                  bool bf16)
{
    if (bf16)
        bf16_store16((uint16_t *)p + i, v);
    else
        _mm512_storeu_ps((float *)p + i, v);
}
#endif

#endif

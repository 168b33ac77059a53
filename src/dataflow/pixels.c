/* pixels.c - pixels_to_float at each instruction-set level (pixels.h).
 *
 * Why vectors: the prefetch worker converts a batch while the towers
 * compute, and on a machine whose cores all compute that time is taken from
 * a tower's thread. For a Fashion-MNIST batch (128 x 784 bytes, in cache),
 * one thread of a Zen 5: a table of the 256 values 35 us, AVX2 15 us,
 * AVX-512 7.7 us, all three the same bits. */
#include "dataflow/pixels.h"

#include "backend/cpu/cpu_isa.h"
#include "dataflow/dataflow.h"

#ifdef CPU_ISA_TARGETS
#include <immintrin.h>
#endif

static void to_float_plain(const uint8_t *p, size_t n, float mean, float std, float *x)
{
    for (size_t k = 0; k < n; k++)
        x[k] = (dataset_byte_value(p[k]) - mean) / std;
}

#ifdef CPU_ISA_TARGETS
CPU_TARGET_AVX2 static void to_float_avx2(const uint8_t *p, size_t n, float mean, float std,
                                          float *x)
{
    __m256 d = _mm256_set1_ps(255.0f), m = _mm256_set1_ps(mean), s = _mm256_set1_ps(std);
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m128i b = _mm_loadl_epi64((const __m128i *)(p + k));
        __m256 v = _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), d);
        _mm256_storeu_ps(x + k, _mm256_div_ps(_mm256_sub_ps(v, m), s));
    }
    to_float_plain(p + k, n - k, mean, std, x + k);
}

CPU_TARGET_AVX512 static void to_float_avx512(const uint8_t *p, size_t n, float mean, float std,
                                              float *x)
{
    __m512 d = _mm512_set1_ps(255.0f), m = _mm512_set1_ps(mean), s = _mm512_set1_ps(std);
    size_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(p + k));
        __m512 v = _mm512_div_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)), d);
        _mm512_storeu_ps(x + k, _mm512_div_ps(_mm512_sub_ps(v, m), s));
    }
    to_float_plain(p + k, n - k, mean, std, x + k);
}
#endif

void pixels_to_float(const uint8_t *p, size_t n, float mean, float std, float *x)
{
    switch (cpu_isa()) {
#ifdef CPU_ISA_TARGETS
    case CPU_ISA_AVX512:
        to_float_avx512(p, n, mean, std, x);
        return;
    case CPU_ISA_AVX2:
        to_float_avx2(p, n, mean, std, x);
        return;
#endif
    default:
        to_float_plain(p, n, mean, std, x);
    }
}

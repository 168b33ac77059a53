/* tile_gemm.h - the dense layers' matrix products, with bits that do not
 * depend on how the work is split.
 *
 * C(m, n) = sum over k of A(m, k) B(k, n), each element one chain of
 * multiply-adds in k order (k = 0 first), then + bias[n], then relu if asked.
 * The chain is fused (fmaf) at the AVX2 and AVX-512 levels (cpu_isa.h) and
 * a rounded product then a rounded sum at the plain level (for CPUs
 * without FMA). At one level, any split of the (m, n) plane over tasks, any
 * tile size and the packed or unpacked B give the same bits: every element
 * is the same sequence of roundings. So the work is cut into exactly as
 * many parts as there are threads, and nothing is summed across tasks.
 *
 * Why not the BLAS: a library may pick another kernel (another summation
 * order) for another M, so the dense layers had to call it on fixed 32-row
 * chunks whatever the thread count, and every chunk re-packed the weights:
 * on the MLP's 128 x 256 x 784 product that held oneDNN's sgemm to ~70% of
 * the core's peak (bench/roofline).
 *
 * Operands are strided views: A(m, k) = a[m * a_rs + k * a_cs] (either
 * stride may be 1, so A or its transpose is row-major), B(k, n) =
 * b[k * b_rs + n] (row-major) or, with b_trans, b[n * b_rs + k] (the layout
 * of a dense weight w[out, in] read as w^T); the transposed B is packed
 * panel by panel into `pack` (tile_gemm_pack_floats(K) floats per task;
 * with pack NULL it is read in place by the slower plain C loops, fused at
 * the AVX2 and AVX-512 levels).
 *
 * Routing (the rule of issue 37: by CPU level and shape only, never by
 * timing): the dense layers run here at every level and every shape, never
 * on oneDNN's or OpenBLAS's sgemm. Measured on the MLP's products (x w^T
 * 128x256x784, dy w 128x256x256, dy^T x 256x{256,784}x128) at
 * TT_CPU_ISA=avx2, one thread of a Zen 5, oneDNN capped at AVX2, best of 5:
 * tile_gemm 25-131 GFLOP/s, dnnl_sgemm 23-130, neither ahead on any shape
 * across repeats (the machine's load moved both 2-4x). The BLAS would also
 * need fixed row chunks to keep the bits independent of the thread count
 * (above), which re-packs the weights per chunk and costs more than any
 * difference seen. Convolutions of 16 or more input channels already go to
 * oneDNN at every level (cpu_backend.c), capped to the level.
 */
#ifndef TT_CPU_TILE_GEMM_H
#define TT_CPU_TILE_GEMM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    int M, N, K;
    const float *a;
    ptrdiff_t a_rs, a_cs;
    const float *b;
    ptrdiff_t b_rs;
    bool b_trans;
    float *c;
    ptrdiff_t ldc;
    const float *bias; /* [N] or NULL */
    bool relu;
    /* bf16 products (tile_gemm_bf16_supported() must hold): A and B are
     * rounded to bf16 (nearest even) as they are packed, and C(m, n) is the
     * float32 sum, in k order, of vdpbf16ps's pairs of exact products
     * (k, k + 1); the pack buffer is required (tile_gemm_bf16_pack_floats). */
    bool bf16;
} tile_gemm_t;

/* Floats of packing buffer one task needs for K (any N). */
size_t tile_gemm_pack_floats(int K);

/* Whether this build and CPU run the bf16 kernel (AVX512_BF16: vdpbf16ps). */
bool tile_gemm_bf16_supported(void);

/* Floats of packing buffer one task needs for a bf16 product of M x K
 * (any part of it, any N): its rows of A and one panel of B, in bf16 pairs. */
size_t tile_gemm_bf16_pack_floats(int M, int K);

/* Computes the block of C rows [m0, m1) x columns [n0, n1). */
void tile_gemm_block(const tile_gemm_t *g, int m0, int m1, int n0, int n1, float *pack);

/* Part `part` of `parts` of the whole product: the (m, n) plane cut into
 * parts of about equal work, along n where it is wide enough (each part
 * then packs only its own columns of B), else along m. */
void tile_gemm_part(const tile_gemm_t *g, int part, int parts, float *pack);

#endif

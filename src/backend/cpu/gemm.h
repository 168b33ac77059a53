/* gemm.h - the one sgemm every CPU layer goes through. */
#ifndef TT_CPU_GEMM_H
#define TT_CPU_GEMM_H

/* Row-major C[M,N] = alpha * op(A) op(B) + beta * C, single-threaded: the
 * backend parallelises over independent blocks itself. */
void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);

#endif

/* gemm.c - cpu_sgemm over oneDNN's dnnl_sgemm when configure found it, else
 * CBLAS. Measured on our shapes (bench/sgemm): oneDNN's JIT kernels run
 * 1.9-2x faster than Debian's OpenBLAS 0.3.21, which does not know this CPU.
 * Both are called single-threaded; the backend's thread team splits the work. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "backend/cpu/gemm.h"

#include <stdbool.h>

#ifdef HAVE_DNNL
#include "backend/cpu/dnnl_util.h"

void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc)
{
    cpu_dnnl_single_thread(); /* one thread per call: the team splits the work */
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#else
#include <cblas.h>

void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc)
{
    /* OpenBLAS would start its own threads and spin them against ours. */
    static _Thread_local bool single;
    if (!single) {
        openblas_set_num_threads(1);
        single = true;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#endif

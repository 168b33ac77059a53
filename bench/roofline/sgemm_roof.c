/* sgemm_roof.c - the machine's fp32 roof: the best large square sgemm one
 * library reaches with every core (the library's own threads).
 *
 * One library per binary (both export sgemm symbols):
 *   cc -O2 -DUSE_DNNL sgemm_roof.c -ldnnl -o roof_dnnl
 *   cc -O2 -DUSE_OPENBLAS $(pkg-config --cflags openblas) sgemm_roof.c \
 *      $(pkg-config --libs openblas) -o roof_openblas
 * usage: roof_X N CALLS   prints "<library> <N> <best GFLOP/s> <median GFLOP/s>"
 * (one untimed call first: thread start-up and JIT). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(USE_DNNL)
#include <dnnl.h>
#define LIBNAME "oneDNN"
#elif defined(USE_OPENBLAS)
#include <cblas.h>
#define LIBNAME "OpenBLAS"
#else
#error "define USE_DNNL or USE_OPENBLAS"
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sgemm(int n, const float *a, const float *b, float *c)
{
#if defined(USE_DNNL)
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
#else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                n);
#endif
}

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4096, calls = argc > 2 ? atoi(argv[2]) : 5;
    if (n < 1 || calls < 1 || calls > 1000) {
        fprintf(stderr, "usage: %s N CALLS\n", argv[0]);
        return 2;
    }
    size_t bytes = (size_t)n * n * sizeof(float);
    float *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes), *c = aligned_alloc(64, bytes);
    if (a == NULL || b == NULL || c == NULL) {
        fprintf(stderr, "sgemm_roof: out of memory for N = %d\n", n);
        return 1;
    }
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    memset(c, 0, bytes);
    sgemm(n, a, b, c);
    double gf[1000];
    for (int i = 0; i < calls; i++) {
        double t = now();
        sgemm(n, a, b, c);
        gf[i] = 2.0 * n * (double)n * n / (now() - t) / 1e9;
    }
    qsort(gf, (size_t)calls, sizeof(double), cmp);
    printf("%s %d %.1f %.1f\n", LIBNAME, n, gf[calls - 1], gf[calls / 2]);
    free(a);
    free(b);
    free(c);
    return 0;
}

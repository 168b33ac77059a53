/* probe.h - what bench/timeline's GPU probes (event_cost.c, cupti_cost.cu)
 * share: the clock, a CUDA status check that ends the program with one
 * line naming it (PROBE_NAME), and the median of a sample. Header only:
 * each probe is one compiler call (tests/gpu/kit.sh). */
#ifndef TT_PROBE_H
#define TT_PROBE_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s: %s\n", PROBE_NAME, what, cudaGetErrorString(e));
        exit(1);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* sorts v */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

#endif

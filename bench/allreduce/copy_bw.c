/* copy_bw.c - memory copy bandwidth with T threads, each copying its half
 * (its 1/T) of a buffer of S bytes: the bound an all-reduce over shared
 * memory is measured against. Built and run by bench/allreduce.
 *
 *   copy_bw THREADS MINBYTES MAXBYTES FACTOR ITERS
 * Prints "bytes time_us GBps" per size, GB/s of bytes copied (each byte is
 * read once and written once), median of ITERS. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    char *dst;
    const char *src;
    size_t len;
    pthread_barrier_t *start;
} part;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static void *copy_part(void *p)
{
    part *a = p;
    pthread_barrier_wait(a->start);
    memcpy(a->dst, a->src, a->len);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: copy_bw THREADS MINBYTES MAXBYTES FACTOR ITERS\n");
        return 2;
    }
    int threads = atoi(argv[1]), factor = atoi(argv[4]), iters = atoi(argv[5]);
    size_t lo = strtoull(argv[2], NULL, 10), hi = strtoull(argv[3], NULL, 10);
    char *src = malloc(hi), *dst = malloc(hi);
    double *us = malloc((size_t)iters * sizeof(double));
    memset(src, 1, hi);
    memset(dst, 2, hi);
    for (size_t bytes = lo; bytes <= hi; bytes *= (size_t)factor) {
        for (int it = 0; it < iters + 2; it++) {
            pthread_t tid[64];
            part parts[64];
            pthread_barrier_t start;
            pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
            for (int t = 0; t < threads; t++) {
                size_t a = bytes * (size_t)t / (size_t)threads;
                size_t b = bytes * (size_t)(t + 1) / (size_t)threads;
                parts[t] = (part){dst + a, src + a, b - a, &start};
                pthread_create(&tid[t], NULL, copy_part, &parts[t]);
            }
            double t0 = now_us();
            pthread_barrier_wait(&start);
            for (int t = 0; t < threads; t++)
                pthread_join(tid[t], NULL);
            if (it >= 2)
                us[it - 2] = now_us() - t0;
            pthread_barrier_destroy(&start);
        }
        qsort(us, (size_t)iters, sizeof(double), cmp);
        double t = us[iters / 2];
        printf("%zu %.1f %.3f\n", bytes, t, (double)bytes / t * 1e-3);
    }
    free(src);
    free(dst);
    free(us);
    return 0;
}

#include "comm/allreduce.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ROUNDS 2000

struct allreduce {
    int n;
    float **bufs;             /* each participant's buffer for the running collective */
    /* sense-reversing barrier: spin briefly, then sleep */
    atomic_int waiting;
    atomic_int sense;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

allreduce_t *allreduce_create(int n, tt_err *err)
{
    allreduce_t *ar = calloc(1, sizeof(*ar));
    if (ar == NULL || (ar->bufs = calloc((size_t)n, sizeof(float *))) == NULL) {
        free(ar);
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    ar->n = n;
    atomic_init(&ar->waiting, 0);
    atomic_init(&ar->sense, 0);
    pthread_mutex_init(&ar->lock, NULL);
    pthread_cond_init(&ar->cond, NULL);
    return ar;
}

void allreduce_free(allreduce_t *ar)
{
    if (ar == NULL)
        return;
    pthread_mutex_destroy(&ar->lock);
    pthread_cond_destroy(&ar->cond);
    free(ar->bufs);
    free(ar);
}

void allreduce_barrier(allreduce_t *ar)
{
    if (ar->n == 1)
        return;
    int my_sense = !atomic_load(&ar->sense);
    if (atomic_fetch_add(&ar->waiting, 1) == ar->n - 1) {
        atomic_store(&ar->waiting, 0);
        pthread_mutex_lock(&ar->lock);
        atomic_store(&ar->sense, my_sense);
        pthread_cond_broadcast(&ar->cond);
        pthread_mutex_unlock(&ar->lock);
        return;
    }
    for (int spins = 0; atomic_load(&ar->sense) != my_sense && spins < SPIN_ROUNDS; spins++)
        cpu_relax();
    if (atomic_load(&ar->sense) != my_sense) {
        pthread_mutex_lock(&ar->lock);
        while (atomic_load(&ar->sense) != my_sense)
            pthread_cond_wait(&ar->cond, &ar->lock);
        pthread_mutex_unlock(&ar->lock);
    }
}

/* dst[i] = (srcs[0][i] + srcs[1][i] + ...) / divisor over [lo, hi), each
 * element summed in source order, so the bits do not depend on who sums.
 * Blocks of SUM_BLOCK elements: a running sum in L1 and one plain loop per
 * source, which the compiler vectorises; the loop over sources inside the
 * loop over elements it does not, and that scalar loop held a 64 MiB
 * all-reduce to a third of the copy bandwidth. dst may be one of the
 * sources. */
#define SUM_BLOCK 2048
void allreduce_sum_range(float *dst, float *const *srcs, int nsrc, size_t lo, size_t hi,
                         float divisor)
{
    float acc[SUM_BLOCK];
    for (size_t b = lo; b < hi; b += SUM_BLOCK) {
        size_t len = hi - b < SUM_BLOCK ? hi - b : SUM_BLOCK;
        const float *s0 = srcs[0] + b;
        for (size_t i = 0; i < len; i++)
            acc[i] = s0[i];
        for (int j = 1; j < nsrc; j++) {
            const float *sj = srcs[j] + b;
            for (size_t i = 0; i < len; i++)
                acc[i] += sj[i];
        }
        float *d = dst + b;
        if (divisor != 1.0f)
            for (size_t i = 0; i < len; i++)
                d[i] = acc[i] / divisor;
        else
            memcpy(d, acc, len * sizeof(float));
    }
}

static void chunk_of(size_t count, int parts, int k, size_t *lo, size_t *hi)
{
    /* chunks of 16-float multiples so towers never share a cache line */
    size_t per = (count / (size_t)parts + 15) & ~(size_t)15;
    *lo = per * (size_t)k;
    *hi = *lo + per;
    if (*lo > count)
        *lo = count;
    if (*hi > count || k == parts - 1)
        *hi = count;
}

static void run_naive(allreduce_t *ar, int rank, size_t count, float divisor)
{
    if (rank == 0)
        allreduce_sum_range(ar->bufs[0], ar->bufs, ar->n, 0, count, divisor);
    allreduce_barrier(ar);
    if (rank != 0)
        memcpy(ar->bufs[rank], ar->bufs[0], count * sizeof(float));
}

static void run_ring(allreduce_t *ar, int rank, size_t count, float divisor)
{
    size_t lo, hi;
    /* reduce-scatter: this tower owns chunk `rank` */
    chunk_of(count, ar->n, rank, &lo, &hi);
    allreduce_sum_range(ar->bufs[rank], ar->bufs, ar->n, lo, hi, divisor);
    allreduce_barrier(ar);
    /* all-gather: copy every other tower's reduced chunk */
    for (int k = 1; k < ar->n; k++) {
        int owner = (rank + k) % ar->n;
        chunk_of(count, ar->n, owner, &lo, &hi);
        if (hi > lo)
            memcpy(ar->bufs[rank] + lo, ar->bufs[owner] + lo, (hi - lo) * sizeof(float));
    }
}

/* Two groups: [0, h) rooted at 0 and [h, n) rooted at h. Each root sums its
 * group; the roots split the buffer in halves and each combines one half of
 * both group sums into both roots; then the members copy from their root. */
static void run_hierarchical(allreduce_t *ar, int rank, size_t count, float divisor)
{
    int n = ar->n, h = n / 2;
    int root = rank < h ? 0 : h;
    int group_n = rank < h ? h : n - h;
    if (rank == root)
        allreduce_sum_range(ar->bufs[root], ar->bufs + root, group_n, 0, count, 1.0f);
    allreduce_barrier(ar);
    if (rank == 0 || rank == h) {
        size_t lo, hi;
        chunk_of(count, 2, rank == 0 ? 0 : 1, &lo, &hi);
        float *pair[2] = {ar->bufs[0], ar->bufs[h]};
        for (size_t i = lo; i < hi; i++) {
            float s = pair[0][i] + pair[1][i];
            s = divisor != 1.0f ? s / divisor : s;
            pair[0][i] = s;
            pair[1][i] = s;
        }
    }
    allreduce_barrier(ar);
    if (rank != root)
        memcpy(ar->bufs[rank], ar->bufs[root], count * sizeof(float));
}

void allreduce_run(allreduce_t *ar, int rank, float *buf, size_t count, allreduce_algo algo,
                   bool mean)
{
    int n = ar->n;
    if (n == 1)
        return; /* the mean of one buffer is itself */
    float divisor = mean ? (float)n : 1.0f;
    ar->bufs[rank] = buf;
    allreduce_barrier(ar); /* every buffer is ready */
    if (algo == ALLREDUCE_HIERARCHICAL && n < 2)
        algo = ALLREDUCE_NAIVE;
    switch (algo) {
    case ALLREDUCE_NAIVE:
        run_naive(ar, rank, count, divisor);
        break;
    case ALLREDUCE_RING:
        run_ring(ar, rank, count, divisor);
        break;
    case ALLREDUCE_HIERARCHICAL:
        run_hierarchical(ar, rank, count, divisor);
        break;
    }
    allreduce_barrier(ar); /* nobody reads another buffer any more */
}

void allreduce_broadcast(allreduce_t *ar, int rank, float *buf, size_t count, int root)
{
    if (ar->n == 1)
        return;
    ar->bufs[rank] = buf;
    allreduce_barrier(ar);
    if (rank != root)
        memcpy(buf, ar->bufs[root], count * sizeof(float));
    allreduce_barrier(ar);
}

allreduce_algo allreduce_choose(int n, size_t bytes)
{
    /* Small buffers: the barrier dominates, and naive has one fewer phase of
     * copies to wait for. Large: ring spreads the summing over every tower. */
    if (n <= 2 && bytes < 64 * 1024)
        return ALLREDUCE_NAIVE;
    if (bytes < 16 * 1024)
        return ALLREDUCE_NAIVE;
    return ALLREDUCE_RING;
}

int allreduce_algo_parse(const char *name)
{
    if (strcmp(name, "naive") == 0)
        return ALLREDUCE_NAIVE;
    if (strcmp(name, "ring") == 0)
        return ALLREDUCE_RING;
    if (strcmp(name, "hierarchical") == 0)
        return ALLREDUCE_HIERARCHICAL;
    return -1;
}

const char *allreduce_algo_name(allreduce_algo a)
{
    switch (a) {
    case ALLREDUCE_NAIVE:
        return "naive";
    case ALLREDUCE_RING:
        return "ring";
    case ALLREDUCE_HIERARCHICAL:
        return "hierarchical";
    }
    return "?";
}

/* test_allreduce.c - the shared-memory all-reduce against a float64 sum:
 * K = 1..8 towers, sizes 1, 7, 1023 and 1 Mi + 3 elements, every algorithm,
 * sum and mean; every replica must end with the same bits. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/allreduce.h"
#include "tt_test.h"
#include "util/rng.h"

typedef struct {
    allreduce_t *ar;
    int rank;
    float *buf;
    size_t count;
    allreduce_algo algo;
    bool mean;
} job;

static void *tower_main(void *p)
{
    job *j = p;
    allreduce_run(j->ar, j->rank, j->buf, j->count, j->algo, j->mean);
    /* a second collective right after the first must not mix them up */
    allreduce_barrier(j->ar);
    return NULL;
}

static int check(int k, size_t count, allreduce_algo algo, bool mean)
{
    tt_err err = {0};
    allreduce_t *ar = allreduce_create(k, &err);
    float *bufs[8];
    double *want = malloc(count * sizeof(double));
    double *mag = malloc(count * sizeof(double)); /* sum of |x|: the error scale */
    for (int r = 0; r < k; r++) {
        bufs[r] = malloc(count * sizeof(float));
        rng_t rng = rng_make(99, (uint64_t)r, count);
        for (size_t i = 0; i < count; i++)
            bufs[r][i] = rng_uniform_range(&rng, -1.0f, 1.0f) * (float)(1 + r);
    }
    for (size_t i = 0; i < count; i++) {
        double s = 0, a = 0;
        for (int r = 0; r < k; r++) {
            s += bufs[r][i];
            a += fabs(bufs[r][i]);
        }
        want[i] = mean ? s / k : s;
        mag[i] = mean ? a / k : a;
    }
    pthread_t th[8];
    job jobs[8];
    for (int r = 0; r < k; r++) {
        jobs[r] = (job){ar, r, bufs[r], count, algo, mean};
        pthread_create(&th[r], NULL, tower_main, &jobs[r]);
    }
    for (int r = 0; r < k; r++)
        pthread_join(th[r], NULL);
    double worst = 0;
    for (size_t i = 0; i < count; i++) {
        double e = fabs(bufs[0][i] - want[i]) / mag[i];
        if (e > worst)
            worst = e;
    }
    int same = 1;
    for (int r = 1; r < k; r++)
        same &= memcmp(bufs[0], bufs[r], count * sizeof(float)) == 0;
    int ok = tt_ok(worst < 1e-6 && same, "%s %s K=%d n=%zu: max error %.2g of sum|x|, replicas %s",
                   allreduce_algo_name(algo), mean ? "mean" : "sum", k, count, worst,
                   same ? "identical" : "DIFFER");
    for (int r = 0; r < k; r++)
        free(bufs[r]);
    free(want);
    free(mag);
    allreduce_free(ar);
    return ok;
}

int main(void)
{
    const size_t sizes[] = {1, 7, 1023, (1u << 20) + 3};
    const allreduce_algo algos[] = {ALLREDUCE_NAIVE, ALLREDUCE_RING, ALLREDUCE_HIERARCHICAL};
    for (int a = 0; a < 3; a++)
        for (int k = 1; k <= 8; k++)
            for (int s = 0; s < 4; s++)
                check(k, sizes[s], algos[a], s % 2 == 0);
    /* both modes on one mid size for every algorithm at K = 3 */
    for (int a = 0; a < 3; a++) {
        check(3, 1023, algos[a], false);
        check(3, 1023, algos[a], true);
    }
    tt_ok(allreduce_algo_parse("ring") == ALLREDUCE_RING &&
              allreduce_algo_parse("hierarchical") == ALLREDUCE_HIERARCHICAL &&
              allreduce_algo_parse("nccl") == -1,
          "algorithm names parse");
    return tt_done();
}

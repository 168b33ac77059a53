/* test_allreduce.c - the shared-memory all-reduce against a float64 sum:
 * K = 1..8 towers, sizes 1, 7, 1023 and 1 Mi + 3 elements, every algorithm,
 * sum and mean; every replica must end with the same bits. And many
 * collectives back to back on one communicator, sizes on both sides of the
 * small-collective slots, towers arriving late at random: every result
 * exact (small integers) and identical on every tower. And the barrier:
 * K = 2..9 towers (rounds of the dissemination barrier full and not), none
 * leaving before every tower arrived, barrier after barrier. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    allreduce_barrier(j->ar, j->rank);
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

typedef struct {
    allreduce_t *ar;
    int rank, k, wrong;
} rep_job;

#define REPS 400
static const size_t rep_sizes[] = {1, 100, 4096, 4097, 20000, 3};

static float rep_value(int rank, int it, size_t i)
{
    return (float)((int)((i * 5 + (size_t)rank * 11 + (size_t)it * 3) % 13) - 6);
}

static void *rep_main(void *p)
{
    rep_job *j = p;
    float *buf = malloc(20000 * sizeof(float));
    for (int it = 0; it < REPS; it++) {
        size_t n = rep_sizes[it % 6];
        allreduce_algo algo = it % 3 == 2 ? ALLREDUCE_RING : ALLREDUCE_NAIVE;
        for (size_t i = 0; i < n; i++)
            buf[i] = rep_value(j->rank, it, i);
        if ((it + j->rank) % 7 == 0) /* arrive late */
            usleep((useconds_t)(20 * (j->rank + 1)));
        allreduce_run(j->ar, j->rank, buf, n, algo, false);
        for (size_t i = 0; i < n; i++) {
            float want = 0;
            for (int r = 0; r < j->k; r++)
                want += rep_value(r, it, i);
            j->wrong += buf[i] != want;
        }
    }
    free(buf);
    return NULL;
}

static void check_repeat(int k)
{
    tt_err err = {0};
    allreduce_t *ar = allreduce_create(k, &err);
    pthread_t th[8];
    rep_job jobs[8];
    for (int r = 0; r < k; r++) {
        jobs[r] = (rep_job){ar, r, k, 0};
        pthread_create(&th[r], NULL, rep_main, &jobs[r]);
    }
    int wrong = 0;
    for (int r = 0; r < k; r++) {
        pthread_join(th[r], NULL);
        wrong += jobs[r].wrong;
    }
    tt_ok(wrong == 0, "K=%d: %d collectives back to back (1 .. 20000 floats, naive and ring, "
          "late arrivals): %d wrong elements", k, REPS, wrong);
    allreduce_free(ar);
}

typedef struct {
    allreduce_t *ar;
    int rank, k, iters;
    _Atomic int *arrived; /* towers that reached barrier i: arrived[i] */
    _Atomic int *early;   /* towers that left barrier i before all arrived */
} barrier_job;

static void *barrier_main(void *p)
{
    barrier_job *j = p;
    rng_t rng = rng_make(11, (uint64_t)j->rank, 0);
    for (int i = 0; i < j->iters; i++) {
        if (rng_below(&rng, 4) == 0) /* arrive late now and then */
            usleep(rng_below(&rng, 50));
        atomic_fetch_add(&j->arrived[i], 1);
        allreduce_barrier(j->ar, j->rank);
        if (atomic_load(&j->arrived[i]) != j->k)
            atomic_fetch_add(j->early, 1);
    }
    return NULL;
}

static void check_barrier(int k)
{
    enum { ITERS = 2000 };
    tt_err err = {0};
    allreduce_t *ar = allreduce_create(k, &err);
    static _Atomic int arrived[ITERS];
    _Atomic int early = 0;
    for (int i = 0; i < ITERS; i++)
        atomic_init(&arrived[i], 0);
    pthread_t th[16];
    barrier_job jobs[16];
    for (int r = 0; r < k; r++) {
        jobs[r] = (barrier_job){ar, r, k, ITERS, arrived, &early};
        pthread_create(&th[r], NULL, barrier_main, &jobs[r]);
    }
    for (int r = 0; r < k; r++)
        pthread_join(th[r], NULL);
    tt_ok(atomic_load(&early) == 0, "barrier, %d towers, %d times: nobody leaves before all "
          "arrive (%d early)", k, ITERS, atomic_load(&early));
    allreduce_free(ar);
}

int main(void)
{
    for (int k = 2; k <= 9; k++)
        check_barrier(k);
    for (int k = 2; k <= 5; k++)
        check_repeat(k);
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

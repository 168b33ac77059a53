/* bench.c - float32 sum all-reduce across CPU towers (threads), printed as
 * nccl-tests' all_reduce_perf prints it:
 *   size (B), count, type, redop, then for out-of-place and in-place:
 *   time (us), algbw (GB/s) = size / time, busbw (GB/s) = algbw * 2(n-1)/n,
 *   #wrong; and "# Avg bus bandwidth" at the end.
 * Out-of-place copies the send buffer into the receive buffer and reduces
 * that (our collective works in place); the copy is timed with it. The time
 * is the median of the timed iterations, after the warm-up ones, of tower 0
 * from a common start to its collective's return.
 *
 * Under mpirun the towers of each rank reduce over shared memory, tower 0 of
 * every rank joins one MPI_Allreduce, and the result goes back to the towers
 * (as training does); n = towers x ranks. --algo mpi with one tower per rank
 * is MPI_Allreduce alone (out-of-place too). Rank 0 prints. */
#include "bench/bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_table.h"
#include "comm/allreduce.h"
#include "comm/dist.h"
#include "train/tower_threads.h"
#include "util/clock.h"
#include "util/threadpool.h"

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = 1;
    if (*end == 'K' || *end == 'k')
        mult = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mult = 1024.0 * 1024.0, end++;
    else if (*end == 'G' || *end == 'g')
        mult = 1024.0 * 1024.0 * 1024.0, end++;
    if (end == s || *end != '\0' || errno != 0 || v < 1 || v * mult > 64.0 * (1ull << 30))
        return -1;
    *out = (size_t)(v * mult);
    return 0;
}

static int parse_int(const char *s, int lo, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > 1000000)
        return -1;
    *out = (int)v;
    return 0;
}

int bench_parse(const cmdline_opt *opts, int n_opts, bench_opts *o, tt_err *err)
{
    memset(o, 0, sizeof(*o));
    int cores = threadpool_cpu_share(dist_local_size());
    o->towers = dist_size() > 1 ? (cores > 1 ? cores : 1) : (cores > 1 ? cores : 2);
    snprintf(o->algo, sizeof(o->algo), "ring");
    o->min_bytes = 8;
    o->max_bytes = 128u << 20;
    o->factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->check = true;
    bool towers_given = false, algo_given = false;
    for (int i = 0; i < n_opts; i++) {
        const char *a = opts[i].name, *v = opts[i].value;
        algo_given |= strcmp(a, "--algo") == 0;
        int bad = 0, c;
        if (strcmp(a, "--device") == 0) {
            o->gpu = strcmp(v, "gpu") == 0;
            bad = !o->gpu && strcmp(v, "cpu") != 0;
        } else if (strcmp(a, "--towers") == 0) {
            bad = parse_int(v, 1, &o->towers) || o->towers > 64;
            towers_given = true;
        } else if (strcmp(a, "--algo") == 0 && strcmp(v, "nccl") == 0) {
            snprintf(o->algo, sizeof(o->algo), "nccl"); /* checked below: GPU towers */
        } else if (strcmp(a, "--algo") == 0) {
            bool mpi = strcmp(v, "mpi") == 0;
            bad = strcmp(v, "all") != 0 && !mpi && allreduce_algo_parse(v) < 0;
            if (mpi && !dist_built())
                return err_set(err, TT_ERR_USAGE, "bench: --algo %s is not built in this "
                               "version (CPU towers: ring, naive, hierarchical, all)", v);
            if (mpi && dist_size() < 2)
                return err_set(err, TT_ERR_USAGE, "bench: --algo mpi runs across MPI ranks: "
                               "start it with mpirun -np N (N >= 2)");
            snprintf(o->algo, sizeof(o->algo), "%s", v);
        } else if (strcmp(a, "-b") == 0) {
            bad = parse_size(v, &o->min_bytes);
        } else if (strcmp(a, "-e") == 0) {
            bad = parse_size(v, &o->max_bytes);
        } else if (strcmp(a, "-f") == 0) {
            bad = parse_int(v, 2, &o->factor);
        } else if (strcmp(a, "-n") == 0) {
            bad = parse_int(v, 1, &o->iters);
        } else if (strcmp(a, "-w") == 0) {
            bad = parse_int(v, 0, &o->warmup);
        } else if (strcmp(a, "-c") == 0) {
            bad = parse_int(v, 0, &c) || c > 1;
            o->check = !bad && c == 1;
        } else { /* --json */
            o->json_path = v;
            bad = *v == '\0';
        }
        if (bad)
            return err_set(err, TT_ERR_USAGE, "bench: %s %s: invalid value", a, v);
    }
    if (o->min_bytes > o->max_bytes)
        return err_set(err, TT_ERR_USAGE, "bench: -b %zu is larger than -e %zu", o->min_bytes,
                       o->max_bytes);
    bool nccl = strcmp(o->algo, "nccl") == 0;
    if (nccl && !o->gpu)
        return err_set(err, TT_ERR_USAGE, "bench: --algo nccl all-reduces GPU towers: add "
                       "--device gpu (CPU towers: ring, naive, hierarchical, all)");
    if (o->gpu && !nccl && algo_given)
        return err_set(err, TT_ERR_USAGE, "bench: --device gpu all-reduces with --algo nccl "
                       "(got --algo %s)", o->algo);
    if (o->gpu) {
        snprintf(o->algo, sizeof(o->algo), "nccl");
        if (!towers_given)
            o->towers = 0; /* every GPU this rank may use */
    }
    return 0;
}

typedef struct {
    allreduce_t *ar;
    allreduce_algo algo;
    bool mpi_only;  /* --algo mpi, one tower per rank: MPI_Allreduce itself */
    int towers, rank, ranks;
    size_t count;
    float **send, **recv;
    bool in_place;
    int iters, warmup;
    double *us; /* tower 0's timings */
} bench_job;

/* Tower t's value at element i: small integers, so the float sum is exact and
 * the check can be exact too. */
static float bench_value(int t, size_t i)
{
    return (float)((int)((i * 7 + (size_t)t * 3) % 17) - 8);
}

static void bench_tower(const tower_context *ctx, void *p)
{
    bench_job *j = p;
    int t = ctx->index, g = j->rank * j->towers + t; /* g: among all ranks' towers */
    for (int it = 0; it < j->warmup + j->iters; it++) {
        for (size_t i = 0; i < j->count; i++)
            j->send[t][i] = bench_value(g, i);
        allreduce_barrier(j->ar, t);
        if (t == 0)
            dist_barrier(); /* the ranks start together */
        allreduce_barrier(j->ar, t);
        double t0 = clock_us();
        float *buf = j->in_place ? j->send[t] : j->recv[t];
        if (j->mpi_only) {
            if (j->in_place)
                dist_sum_floats(buf, j->count);
            else
                dist_sum_floats_to(j->send[t], buf, j->count);
        } else {
            if (!j->in_place)
                memcpy(buf, j->send[t], j->count * sizeof(float));
            allreduce_run(j->ar, t, buf, j->count, j->algo, false);
            if (j->ranks > 1) {
                if (t == 0)
                    dist_sum_floats(buf, j->count);
                allreduce_broadcast(j->ar, t, buf, j->count, 0);
            }
        }
        /* tower 0's time, to its collective's return: a rank's time, as
         * nccl-tests and bench/allreduce's mpi_allreduce.c take it (a barrier
         * here would time one more synchronisation than MPI_Allreduce's) */
        if (t == 0 && it >= j->warmup)
            j->us[it - j->warmup] = clock_us() - t0;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of this rank's timed iterations, averaged over the ranks (a
 * collective under MPI), as nccl-tests averages its ranks' times by default
 * (-a 1). Rank 0's alone depended on which rank the barrier let go last:
 * between two hosts over TCP an 8-byte MPI_Allreduce timed 6 us out of place
 * and 48 us in place on rank 0, where each rank's times average 32 in both. */
static double rank_median_us(bench_job *j)
{
    qsort(j->us, (size_t)j->iters, sizeof(double), cmp_double);
    double t = j->us[j->iters / 2];
    dist_sum_doubles(&t, 1);
    return t / j->ranks;
}

/* Wrong elements in every buffer of every rank (a collective under MPI). */
static long count_wrong(const bench_job *j)
{
    double wrong = 0;
    for (int t = 0; t < j->towers; t++) {
        const float *buf = j->in_place ? j->send[t] : j->recv[t];
        for (size_t i = 0; i < j->count; i++) {
            float want = 0;
            for (int u = 0; u < j->towers * j->ranks; u++)
                want += bench_value(u, i);
            wrong += buf[i] != want;
        }
    }
    dist_sum_doubles(&wrong, 1);
    return (long)wrong;
}

/* The algorithms --algo names (mpi: the ring within a rank, when it has
 * several towers); returns their count. */
static int bench_algos(const bench_opts *o, allreduce_algo *algos)
{
    if (strcmp(o->algo, "mpi") == 0) {
        algos[0] = ALLREDUCE_RING;
        return 1;
    }
    if (strcmp(o->algo, "all") != 0) {
        algos[0] = (allreduce_algo)allreduce_algo_parse(o->algo);
        return 1;
    }
    algos[0] = ALLREDUCE_NAIVE;
    algos[1] = ALLREDUCE_RING;
    algos[2] = ALLREDUCE_HIERARCHICAL;
    return 3;
}

/* Each tower's send and receive buffers of the largest size, and the
 * timings' room; 0, or -1 with err set (bench_job_free frees what was got). */
static int bench_job_alloc(bench_job *j, const bench_opts *o, tt_err *err)
{
    size_t max_count = o->max_bytes / sizeof(float) > 0 ? o->max_bytes / sizeof(float) : 1;
    int n = o->towers;
    memset(j, 0, sizeof(*j));
    j->send = calloc((size_t)n, sizeof(float *));
    j->recv = calloc((size_t)n, sizeof(float *));
    j->us = calloc((size_t)o->iters, sizeof(double));
    j->ar = allreduce_create(n, err);
    if (!j->send || !j->recv || !j->us || !j->ar)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    for (int t = 0; t < n; t++) {
        j->send[t] = malloc(max_count * sizeof(float));
        j->recv[t] = malloc(max_count * sizeof(float));
        if (!j->send[t] || !j->recv[t])
            return err_set(err, TT_ERR_RUNTIME, "out of memory for %d x 2 buffers of %zu bytes",
                           n, o->max_bytes);
    }
    j->iters = o->iters;
    j->warmup = o->warmup;
    j->towers = n;
    j->rank = dist_rank();
    j->ranks = dist_size();
    j->mpi_only = strcmp(o->algo, "mpi") == 0 && n == 1;
    return 0;
}

static void bench_job_free(bench_job *j, int towers)
{
    allreduce_free(j->ar);
    for (int t = 0; t < towers && j->send; t++) {
        free(j->send[t]);
        if (j->recv)
            free(j->recv[t]);
    }
    free(j->send);
    free(j->recv);
    free(j->us);
}

/* One algorithm's table: its head, then a row per size, out-of-place and
 * in-place. */
static void bench_algo_rows(bench_job *j, const bench_opts *o, tower_threads *team,
                            bench_table *table)
{
    bool mpi = strcmp(o->algo, "mpi") == 0;
    int n = j->towers, ranks = j->ranks;
    if (ranks > 1)
        printf("# towertrain bench: float sum all-reduce, %d MPI ranks x %d CPU tower(s), "
               "algo %s\n", ranks, n, j->mpi_only ? "mpi (MPI_Allreduce)"
               : mpi ? "mpi (ring within a rank, MPI_Allreduce across)"
               : allreduce_algo_name(j->algo));
    else
        printf("# towertrain bench: float sum all-reduce, %d CPU towers (threads), algo %s\n", n,
               allreduce_algo_name(j->algo));
    bench_table_heads();
    size_t counts[BENCH_TABLE_MAX_ROWS];
    int rows = bench_table_counts(o->min_bytes, o->max_bytes, o->factor, counts);
    for (int r = 0; r < rows; r++) {
        size_t count = counts[r], size = count * sizeof(float);
        j->count = count;
        bench_table_row(table, mpi ? "mpi" : allreduce_algo_name(j->algo), ranks, n, size,
                        count);
        for (int place = 0; place < 2; place++) {
            j->in_place = place == 1;
            tower_threads_run(team, bench_tower, j);
            bench_table_cell(table, j->in_place, size, rank_median_us(j),
                             o->check ? count_wrong(j) : 0);
        }
        bench_table_end_row(table);
    }
}

long bench_run(const bench_opts *o, tt_err *err)
{
    if (o->gpu)
        return bench_gpu_run(o, err);
    allreduce_algo algos[3];
    int n_algos = bench_algos(o, algos);
    bench_job j;
    bench_table table = {0};
    tower_threads *team = NULL;
    long total_wrong = -1;
    if (bench_job_alloc(&j, o, err) == 0 && (team = tower_threads_create(o->towers, err)) &&
        bench_table_start(&table, o->towers * j.ranks, o->check, err) == 0) {
        for (int a = 0; a < n_algos; a++) {
            j.algo = algos[a];
            bench_algo_rows(&j, o, team, &table);
        }
        total_wrong = bench_table_finish(&table, o->json_path, err);
    }
    bench_table_free(&table);
    tower_threads_free(team);
    bench_job_free(&j, o->towers);
    return total_wrong;
}

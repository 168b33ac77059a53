#include "comm/allreduce.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Waiting for the other towers: spin WAIT_SPINS pauses (~2 us; they are
 * usually that close), then yield the core between checks for up to
 * WAIT_YIELD_NS, then sleep. Yielding matters twice over: when threads
 * outnumber the free cores the tower we wait for may be queued behind us
 * on ours (a pure spin of 2000 pauses cost 50 us per hand-over, the 8-byte
 * latency under load), and a phase of a mid-sized collective takes
 * 0.1-1 ms, so a tower that went to sleep early paid a 50-100 us wake-up
 * per barrier (2-16 MiB all-reduces ran at 2.5-3.7x the copy bound). */
#define WAIT_SPINS 64
#define WAIT_YIELD_NS 2000000

/* Collectives up to this many floats go through slots in the communicator:
 * one exchange instead of three barriers. */
#define SMALL_FLOATS 4096

#define LINE 64
#define MAX_PEERS 64 /* towers of one process (TT_MAX_TOWERS) */

/* A rank's small collective: seq is the call whose data it holds, and the
 * data follows it in the same cache line (14 floats fit), so a reader of a
 * few floats takes one line from the writer's core, not two. */
typedef struct {
    _Alignas(LINE) _Atomic uint64_t seq;
    float data[SMALL_FLOATS];
} mailbox_t;

/* What one rank alone writes, on a line of its own (no false sharing). */
typedef struct {
    _Alignas(LINE) uint64_t calls; /* small collectives this rank started */
    uint64_t barriers;             /* barriers this rank entered */
} rank_state_t;

/* A barrier round's signal to one rank: the barrier its sender reached. */
typedef struct {
    _Alignas(LINE) _Atomic uint64_t epoch;
} flag_t;

/* The fields each on its own line are written by one side and read by the
 * other while both run: sharing a line would cost a transfer per access. */
struct allreduce {
    int n;
    float **bufs; /* each participant's buffer for the running collective */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    _Alignas(LINE) atomic_int sleepers; /* read by every poster, written rarely */
    /* dissemination barrier: in round k, rank r signals rank (r + 2^k) % n
     * through flags[((r + 2^k) % n) * rounds + k] */
    int rounds; /* ceil(log2(n)) */
    flag_t *flags;
    /* small collectives: rank r's data for its call c sits in
     * boxes[(c % 2) * n + r] */
    mailbox_t *boxes;
    rank_state_t *ranks;
};

allreduce_t *allreduce_create(int n, tt_err *err)
{
    if (n < 1 || n > MAX_PEERS) {
        err_set(err, TT_ERR_USAGE, "an all-reduce among %d towers (1 to %d)", n, MAX_PEERS);
        return NULL;
    }
    int rounds = 0; /* <= 6: MAX_PEERS is 64 */
    while ((1 << rounds) < n)
        rounds++;
    allreduce_t *ar = aligned_alloc(LINE, sizeof(*ar));
    if (ar != NULL)
        memset(ar, 0, sizeof(*ar));
    if (ar == NULL || (ar->bufs = calloc((size_t)n, sizeof(float *))) == NULL ||
        (ar->ranks = aligned_alloc(LINE, (size_t)n * sizeof(rank_state_t))) == NULL ||
        (ar->boxes = aligned_alloc(LINE, 2 * (size_t)n * sizeof(mailbox_t))) == NULL ||
        (ar->flags = aligned_alloc(LINE, (size_t)(n * rounds + 1) * sizeof(flag_t))) == NULL) {
        if (ar != NULL) {
            free(ar->bufs);
            free(ar->ranks);
            free(ar->boxes);
        }
        free(ar);
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    ar->n = n;
    ar->rounds = rounds;
    for (int r = 0; r < n; r++)
        ar->ranks[r].calls = ar->ranks[r].barriers = 0;
    for (int f = 0; f < n * ar->rounds; f++)
        atomic_init(&ar->flags[f].epoch, 0);
    for (int b = 0; b < 2 * n; b++)
        atomic_init(&ar->boxes[b].seq, 0);
    atomic_init(&ar->sleepers, 0);
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
    free(ar->ranks);
    free(ar->boxes);
    free(ar->flags);
    free(ar);
}

/* Wakes whoever sleeps in wait_for (after the state it waits on changed). */
static void wake_sleepers(allreduce_t *ar)
{
    if (atomic_load(&ar->sleepers) > 0) {
        pthread_mutex_lock(&ar->lock);
        pthread_cond_broadcast(&ar->cond);
        pthread_mutex_unlock(&ar->lock);
    }
}

/* Waits until *word >= want. */
static void wait_for(allreduce_t *ar, _Atomic uint64_t *word, uint64_t want)
{
#define READY() (atomic_load(word) >= want)
    for (int spins = 0; spins < WAIT_SPINS; spins++) {
        if (READY())
            return;
        cpu_relax();
    }
    for (int64_t start = clock_ns(); clock_ns() - start < WAIT_YIELD_NS;) {
        if (READY())
            return;
        sched_yield();
    }
    pthread_mutex_lock(&ar->lock);
    atomic_fetch_add(&ar->sleepers, 1);
    while (!READY())
        pthread_cond_wait(&ar->cond, &ar->lock);
    atomic_fetch_sub(&ar->sleepers, 1);
    pthread_mutex_unlock(&ar->lock);
#undef READY
}

/* A dissemination barrier: ceil(log2(n)) rounds, in each of which a rank
 * signals one rank and waits for another's signal. Every rank leaves one
 * signal after the last arrives, at the same time; a central counter let the
 * last arriver go a line transfer before the others saw it. The epochs only
 * grow, so a signal of the next barrier arriving early satisfies this one's
 * wait too, which is right: its sender has passed this barrier's rounds. */
void allreduce_barrier(allreduce_t *ar, int rank)
{
    if (ar->n == 1)
        return;
    uint64_t e = ++ar->ranks[rank].barriers;
    for (int k = 0, d = 1; k < ar->rounds; k++, d <<= 1) {
        atomic_store(&ar->flags[((rank + d) % ar->n) * ar->rounds + k].epoch, e);
        wake_sleepers(ar);
        wait_for(ar, &ar->flags[rank * ar->rounds + k].epoch, e);
    }
}

/* dst[i] = (srcs[0][i] + srcs[1][i] + ...) / divisor over [lo, hi), each
 * element summed in source order, so the bits do not depend on who sums.
 * Two sources: one loop. More: blocks of SUM_BLOCK elements, a running sum
 * in L1 and one plain loop per source, which the compiler vectorises; the
 * loop over sources inside the loop over elements it does not, and that
 * scalar loop held a 64 MiB all-reduce to a third of the copy bandwidth.
 * A power-of-two divisor is a multiplication by its inverse (exact: the
 * same bits). dst may be one of the sources. */
#define SUM_BLOCK 2048

static bool power_of_two(float d)
{
    int e;
    return frexpf(d, &e) == 0.5f;
}

void allreduce_sum_range(float *dst, float *const *srcs, int nsrc, size_t lo, size_t hi,
                         float divisor)
{
    bool scale = divisor != 1.0f && power_of_two(divisor);
    float inv = 1.0f / divisor;
    if (nsrc == 2) {
        const float *a = srcs[0], *b = srcs[1];
        if (divisor == 1.0f)
            for (size_t i = lo; i < hi; i++)
                dst[i] = a[i] + b[i];
        else if (scale)
            for (size_t i = lo; i < hi; i++)
                dst[i] = (a[i] + b[i]) * inv;
        else
            for (size_t i = lo; i < hi; i++)
                dst[i] = (a[i] + b[i]) / divisor;
        return;
    }
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
        if (divisor == 1.0f)
            memcpy(d, acc, len * sizeof(float));
        else if (scale)
            for (size_t i = 0; i < len; i++)
                d[i] = acc[i] * inv;
        else
            for (size_t i = 0; i < len; i++)
                d[i] = acc[i] / divisor;
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

/* Up to SMALL_FLOATS: every rank copies its buffer into its mailbox in the
 * communicator, waits until every rank has posted this call, and sums the
 * mailboxes itself in rank order (naive's and ring's order: the same bits).
 * The mailboxes alternate between calls, so a rank may leave at once: none
 * can post call c + 2 into the mailbox of call c before every rank has
 * posted c + 1, that is, finished reading c. */
static void run_small(allreduce_t *ar, int rank, float *buf, size_t count, float divisor)
{
    uint64_t c = ++ar->ranks[rank].calls;
    mailbox_t *set = ar->boxes + (size_t)(c % 2) * (size_t)ar->n;
    memcpy(set[rank].data, buf, count * sizeof(float));
    atomic_store(&set[rank].seq, c);
    wake_sleepers(ar);
    float *src[MAX_PEERS];
    for (int r = 0; r < ar->n; r++) {
        wait_for(ar, &set[r].seq, c);
        src[r] = set[r].data;
    }
    allreduce_sum_range(buf, src, ar->n, 0, count, divisor);
}

static void run_naive(allreduce_t *ar, int rank, size_t count, float divisor)
{
    if (rank == 0)
        allreduce_sum_range(ar->bufs[0], ar->bufs, ar->n, 0, count, divisor);
    allreduce_barrier(ar, rank);
    if (rank != 0)
        memcpy(ar->bufs[rank], ar->bufs[0], count * sizeof(float));
}

static void run_ring(allreduce_t *ar, int rank, size_t count, float divisor)
{
    size_t lo, hi;
    /* reduce-scatter: this tower owns chunk `rank` */
    chunk_of(count, ar->n, rank, &lo, &hi);
    allreduce_sum_range(ar->bufs[rank], ar->bufs, ar->n, lo, hi, divisor);
    allreduce_barrier(ar, rank);
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
    allreduce_barrier(ar, rank);
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
    allreduce_barrier(ar, rank);
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
    if (algo == ALLREDUCE_NAIVE && count <= SMALL_FLOATS) {
        run_small(ar, rank, buf, count, divisor);
        return;
    }
    ar->bufs[rank] = buf;
    allreduce_barrier(ar, rank); /* every buffer is ready */
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
    allreduce_barrier(ar, rank); /* nobody reads another buffer any more */
}

void allreduce_broadcast(allreduce_t *ar, int rank, float *buf, size_t count, int root)
{
    if (ar->n == 1)
        return;
    ar->bufs[rank] = buf;
    allreduce_barrier(ar, rank);
    if (rank != root)
        memcpy(buf, ar->bufs[root], count * sizeof(float));
    allreduce_barrier(ar, rank);
}

allreduce_algo allreduce_choose(int n, size_t bytes)
{
    /* Up to 16 KiB: naive, through the communicator's mailboxes (one
     * exchange). Above, ring spreads the summing over every tower; naive's
     * barrier, sum on tower 0 and copy back took 8.4 us for 32 KiB between
     * two towers where ring took 5.2 (bench --algo all). */
    (void)n;
    return bytes <= SMALL_FLOATS * sizeof(float) ? ALLREDUCE_NAIVE : ALLREDUCE_RING;
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

/* threadpool.c - the team behind threadpool_run.
 *
 * A job is published as one 64-bit word: generation, task count and the
 * next task to claim. Every thread, the caller included, claims tasks by
 * compare-and-swap on that word, so a worker that arrives after the job has
 * moved on (a newer generation) claims nothing, and the caller waits only
 * for the tasks that were claimed, never for a worker to show up. On a
 * shared machine a worker may be descheduled for milliseconds: the caller
 * then runs every task itself and carries on at one thread's speed instead
 * of stalling each layer until the worker gets a core back (a 2-thread MLP
 * step went from 1 ms to 4-12 ms that way under other people's builds).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "util/threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Waiting (a worker for the next job, the caller for claimed tasks): spin
 * SPIN_ROUNDS pauses (~2 us; the next layer's loop usually comes sooner),
 * then yield the core between checks for up to YIELD_NS (when the threads
 * outnumber the free cores, the one we wait for may be queued behind us on
 * ours: a pure spin of 20000 pauses cost it 0.5 ms per hand-over), then
 * sleep on a condition variable. */
#define SPIN_ROUNDS 64
#define YIELD_NS 1000000

/* The job word: generation (24 bits) | task count (20) | next task (20). */
#define TASK_BITS 20
#define TASK_MASK ((UINT64_C(1) << TASK_BITS) - 1)
#define MAX_TASKS ((int)TASK_MASK)
#define GEN_SHIFT (2 * TASK_BITS)
#define GEN_MASK ((UINT64_C(1) << (64 - GEN_SHIFT)) - 1)

static inline uint64_t word_make(uint64_t gen, int ntasks)
{
    return (gen << GEN_SHIFT) | ((uint64_t)ntasks << TASK_BITS);
}
static inline uint64_t word_gen(uint64_t w)
{
    return w >> GEN_SHIFT;
}
static inline int word_ntasks(uint64_t w)
{
    return (int)((w >> TASK_BITS) & TASK_MASK);
}
static inline int word_next(uint64_t w)
{
    return (int)(w & TASK_MASK);
}

struct threadpool {
    int threads;
    pthread_t *workers;
    /* the current job; fn and arg are written before `work` publishes it */
    threadpool_fn fn;
    void *arg;
    _Atomic uint64_t work;
    atomic_int done;           /* tasks of the current job finished */
    atomic_int sleepers;       /* workers asleep on `wake` */
    atomic_bool caller_asleep; /* the caller sleeps on `finished` */
    atomic_bool stop;
    pthread_mutex_t lock;
    pthread_cond_t wake, finished;
};

/* Claims and runs tasks of generation gen until none is left. A task claimed keeps its job open (the caller waits for it),
 * so fn and arg read after the claim are that job's. */
static void run_tasks(threadpool_t *tp, uint64_t gen)
{
    uint64_t w = atomic_load(&tp->work);
    for (;;) {
        if (word_gen(w) != gen || word_next(w) >= word_ntasks(w))
            return;
        if (!atomic_compare_exchange_weak(&tp->work, &w, w + 1))
            continue; /* w now holds the current word */
        tp->fn(tp->arg, word_next(w), word_ntasks(w));
        if (atomic_fetch_add(&tp->done, 1) + 1 == word_ntasks(w) &&
            atomic_load(&tp->caller_asleep)) {
            pthread_mutex_lock(&tp->lock);
            pthread_cond_signal(&tp->finished);
            pthread_mutex_unlock(&tp->lock);
        }
        w = atomic_load(&tp->work);
    }
}

static void *worker_main(void *p)
{
    threadpool_t *tp = p;
    uint64_t seen = 0; /* generation 0 is never a job */
    for (;;) {
        for (int spins = 0; word_gen(atomic_load(&tp->work)) == seen && spins < SPIN_ROUNDS;
             spins++)
            cpu_relax();
        for (int64_t t0 = clock_ns();
             word_gen(atomic_load(&tp->work)) == seen && !atomic_load(&tp->stop) &&
             clock_ns() - t0 < YIELD_NS;)
            sched_yield();
        if (word_gen(atomic_load(&tp->work)) == seen) {
            pthread_mutex_lock(&tp->lock);
            atomic_fetch_add(&tp->sleepers, 1);
            while (word_gen(atomic_load(&tp->work)) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->wake, &tp->lock);
            atomic_fetch_sub(&tp->sleepers, 1);
            pthread_mutex_unlock(&tp->lock);
        }
        if (atomic_load(&tp->stop))
            return NULL;
        seen = word_gen(atomic_load(&tp->work));
        run_tasks(tp, seen);
    }
}

threadpool_t *threadpool_create(int threads)
{
    if (threads < 1) {
        errno = EINVAL;
        return NULL;
    }
    threadpool_t *tp = calloc(1, sizeof(*tp));
    if (tp == NULL)
        return NULL;
    tp->threads = threads;
    pthread_mutex_init(&tp->lock, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->finished, NULL);
    atomic_init(&tp->work, 0);
    atomic_init(&tp->done, 0);
    atomic_init(&tp->sleepers, 0);
    atomic_init(&tp->caller_asleep, false);
    atomic_init(&tp->stop, false);
    if (threads > 1) {
        tp->workers = calloc((size_t)threads - 1, sizeof(pthread_t));
        if (tp->workers == NULL) {
            free(tp);
            return NULL;
        }
        for (int i = 0; i < threads - 1; i++) {
            if (pthread_create(&tp->workers[i], NULL, worker_main, tp) != 0) {
                tp->threads = i + 1; /* destroy joins the ones started */
                threadpool_destroy(tp);
                errno = EAGAIN;
                return NULL;
            }
        }
    }
    return tp;
}

int threadpool_size(const threadpool_t *tp)
{
    return tp->threads;
}

void threadpool_run(threadpool_t *tp, int ntasks, threadpool_fn fn, void *arg)
{
    if (ntasks <= 0)
        return;
    if (tp == NULL || tp->threads == 1 || ntasks == 1 || ntasks > MAX_TASKS) {
        for (int i = 0; i < ntasks; i++)
            fn(arg, i, ntasks);
        return;
    }
    /* publish: the job's fields first, then the word that names it */
    tp->fn = fn;
    tp->arg = arg;
    atomic_store(&tp->done, 0);
    uint64_t gen = (word_gen(atomic_load(&tp->work)) + 1) & GEN_MASK;
    if (gen == 0) /* a new worker's `seen` */
        gen = 1;
    atomic_store(&tp->work, word_make(gen, ntasks));
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->lock);
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->lock);
    }

    run_tasks(tp, gen);

    /* wait for the tasks others claimed: spin a little, yield, then sleep */
    for (int spins = 0; atomic_load(&tp->done) < ntasks && spins < SPIN_ROUNDS; spins++)
        cpu_relax();
    for (int64_t t0 = clock_ns(); atomic_load(&tp->done) < ntasks && clock_ns() - t0 < YIELD_NS;)
        sched_yield();
    if (atomic_load(&tp->done) < ntasks) {
        pthread_mutex_lock(&tp->lock);
        atomic_store(&tp->caller_asleep, true);
        while (atomic_load(&tp->done) < ntasks)
            pthread_cond_wait(&tp->finished, &tp->lock);
        atomic_store(&tp->caller_asleep, false);
        pthread_mutex_unlock(&tp->lock);
    }
}

void threadpool_destroy(threadpool_t *tp)
{
    if (tp == NULL)
        return;
    pthread_mutex_lock(&tp->lock);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->lock);
    for (int i = 0; i < tp->threads - 1; i++)
        pthread_join(tp->workers[i], NULL);
    pthread_mutex_destroy(&tp->lock);
    pthread_cond_destroy(&tp->wake);
    pthread_cond_destroy(&tp->finished);
    free(tp->workers);
    free(tp);
}

int threadpool_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int threadpool_cpu_share(int sharers)
{
    int share = threadpool_cpu_count() / (sharers > 1 ? sharers : 1);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0 &&
        CPU_COUNT(&set) < share)
        share = CPU_COUNT(&set);
    return share > 0 ? share : 1;
}

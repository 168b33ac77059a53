#include "util/threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Workers spin this many rounds for new work before sleeping: long enough to
 * catch the next layer's loop (a few microseconds), short enough not to steal a
 * core from the other tower for long. */
#define SPIN_ROUNDS 20000

struct threadpool {
    int threads;
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    /* current job */
    threadpool_fn fn;
    void *arg;
    int ntasks;
    atomic_int next_task;     /* next task index to claim */
    atomic_int checked_in;    /* workers done with the current job */
    atomic_uint generation;   /* bumped for every new job */
    int stop;
};

static void run_tasks(threadpool_t *tp)
{
    int n = tp->ntasks;
    for (;;) {
        int i = atomic_fetch_add(&tp->next_task, 1);
        if (i >= n)
            break;
        tp->fn(tp->arg, i, n);
    }
}

/* Every worker checks in once per job, so the caller returns only when no worker
 * can still touch this job's state (and none can skip a job). */
static void check_in(threadpool_t *tp)
{
    if (atomic_fetch_add(&tp->checked_in, 1) == tp->threads - 2) {
        pthread_mutex_lock(&tp->lock);
        pthread_cond_signal(&tp->done);
        pthread_mutex_unlock(&tp->lock);
    }
}

static void *worker_main(void *p)
{
    threadpool_t *tp = p;
    /* generation is 0 when the pool starts: a job posted before this thread
     * got here must still be seen as new */
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load(&tp->generation) == seen && spins < SPIN_ROUNDS) {
            cpu_relax();
            spins++;
        }
        if (atomic_load(&tp->generation) == seen) {
            pthread_mutex_lock(&tp->lock);
            while (atomic_load(&tp->generation) == seen && !tp->stop)
                pthread_cond_wait(&tp->wake, &tp->lock);
            pthread_mutex_unlock(&tp->lock);
        }
        if (tp->stop)
            return NULL;
        seen = atomic_load(&tp->generation);
        run_tasks(tp);
        check_in(tp);
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
    pthread_cond_init(&tp->done, NULL);
    atomic_init(&tp->next_task, 0);
    atomic_init(&tp->checked_in, 0);
    atomic_init(&tp->generation, 0);
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
    if (tp == NULL || tp->threads == 1 || ntasks == 1) {
        for (int i = 0; i < ntasks; i++)
            fn(arg, i, ntasks);
        return;
    }
    pthread_mutex_lock(&tp->lock);
    tp->fn = fn;
    tp->arg = arg;
    tp->ntasks = ntasks;
    atomic_store(&tp->next_task, 0);
    atomic_store(&tp->checked_in, 0);
    atomic_fetch_add(&tp->generation, 1);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->lock);

    run_tasks(tp);

    /* Wait for every worker to check in: spin a little, then sleep. */
    int workers = tp->threads - 1;
    for (int spins = 0; atomic_load(&tp->checked_in) < workers && spins < SPIN_ROUNDS; spins++)
        cpu_relax();
    if (atomic_load(&tp->checked_in) < workers) {
        pthread_mutex_lock(&tp->lock);
        while (atomic_load(&tp->checked_in) < workers)
            pthread_cond_wait(&tp->done, &tp->lock);
        pthread_mutex_unlock(&tp->lock);
    }
}

void threadpool_destroy(threadpool_t *tp)
{
    if (tp == NULL)
        return;
    pthread_mutex_lock(&tp->lock);
    tp->stop = 1;
    atomic_fetch_add(&tp->generation, 1);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->lock);
    for (int i = 0; i < tp->threads - 1; i++)
        pthread_join(tp->workers[i], NULL);
    pthread_mutex_destroy(&tp->lock);
    pthread_cond_destroy(&tp->wake);
    pthread_cond_destroy(&tp->done);
    free(tp->workers);
    free(tp);
}

int threadpool_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

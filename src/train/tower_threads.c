#include "train/tower_threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

/* A tower that finished its part watches for the next run this long,
 * yielding its core, before it sleeps: the next step usually starts after
 * the trainer's bookkeeping, well within it, and a wake-up from the
 * condition variable costs tens of microseconds a step on a VM. */
#define WATCH_NS 1000000

struct tower_threads {
    int n;
    pthread_t *tid;
    tower_context *ctx;
    pthread_mutex_t lock;
    pthread_cond_t start, done;
    atomic_uint generation; /* bumped for every run (under the lock) */
    int pending;         /* towers still running the current function */
    bool stop;
    tower_fn fn;
    void *arg;
};

typedef struct {
    tower_threads *th;
    int index;
} tower_thread_arg;

static void *tower_main(void *p)
{
    tower_thread_arg a = *(tower_thread_arg *)p;
    free(p);
    tower_threads *th = a.th;
    unsigned seen = 0;
    for (;;) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (t = t0; atomic_load(&th->generation) == seen &&
                     (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < WATCH_NS;
             clock_gettime(CLOCK_MONOTONIC, &t))
            sched_yield();
        pthread_mutex_lock(&th->lock);
        while (atomic_load(&th->generation) == seen && !th->stop)
            pthread_cond_wait(&th->start, &th->lock);
        if (th->stop) {
            pthread_mutex_unlock(&th->lock);
            return NULL;
        }
        seen = atomic_load(&th->generation);
        tower_fn fn = th->fn;
        void *arg = th->arg;
        pthread_mutex_unlock(&th->lock);
        fn(&th->ctx[a.index], arg);
        pthread_mutex_lock(&th->lock);
        if (--th->pending == 0)
            pthread_cond_signal(&th->done);
        pthread_mutex_unlock(&th->lock);
    }
}

tower_threads *tower_threads_create(int n, tt_err *err)
{
    tower_threads *th = calloc(1, sizeof(*th));
    if (th == NULL || (th->ctx = calloc((size_t)n, sizeof(tower_context))) == NULL) {
        free(th);
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    th->n = n;
    pthread_mutex_init(&th->lock, NULL);
    pthread_cond_init(&th->start, NULL);
    pthread_cond_init(&th->done, NULL);
    atomic_init(&th->generation, 0);
    for (int i = 0; i < n; i++)
        th->ctx[i].index = i;
    if (n == 1)
        return th;
    th->tid = calloc((size_t)n, sizeof(pthread_t));
    if (th->tid == NULL) {
        tower_threads_free(th);
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        tower_thread_arg *a = malloc(sizeof(*a));
        if (a != NULL) {
            a->th = th;
            a->index = i;
        }
        if (a == NULL || pthread_create(&th->tid[i], NULL, tower_main, a) != 0) {
            free(a);
            th->n = i; /* join the ones started */
            tower_threads_free(th);
            err_set(err, TT_ERR_RUNTIME, "cannot start tower thread %d", i);
            return NULL;
        }
    }
    return th;
}

void tower_threads_run(tower_threads *th, tower_fn fn, void *arg)
{
    if (th->tid == NULL) {
        for (int i = 0; i < th->n; i++)
            fn(&th->ctx[i], arg);
        return;
    }
    pthread_mutex_lock(&th->lock);
    th->fn = fn;
    th->arg = arg;
    th->pending = th->n;
    atomic_fetch_add(&th->generation, 1);
    pthread_cond_broadcast(&th->start);
    while (th->pending > 0)
        pthread_cond_wait(&th->done, &th->lock);
    pthread_mutex_unlock(&th->lock);
}

void tower_threads_free(tower_threads *th)
{
    if (th == NULL)
        return;
    if (th->tid != NULL) {
        pthread_mutex_lock(&th->lock);
        th->stop = true;
        pthread_cond_broadcast(&th->start);
        pthread_mutex_unlock(&th->lock);
        for (int i = 0; i < th->n; i++)
            pthread_join(th->tid[i], NULL);
        free(th->tid);
    }
    pthread_mutex_destroy(&th->lock);
    pthread_cond_destroy(&th->start);
    pthread_cond_destroy(&th->done);
    free(th->ctx);
    free(th);
}

#include "train/towers.h"

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

struct tower_team {
    int n;
    pthread_t *threads;
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
    tower_team *team;
    int index;
} tower_thread_arg;

static void *tower_main(void *p)
{
    tower_thread_arg a = *(tower_thread_arg *)p;
    free(p);
    tower_team *team = a.team;
    unsigned seen = 0;
    for (;;) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (t = t0; atomic_load(&team->generation) == seen &&
                     (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < WATCH_NS;
             clock_gettime(CLOCK_MONOTONIC, &t))
            sched_yield();
        pthread_mutex_lock(&team->lock);
        while (atomic_load(&team->generation) == seen && !team->stop)
            pthread_cond_wait(&team->start, &team->lock);
        if (team->stop) {
            pthread_mutex_unlock(&team->lock);
            return NULL;
        }
        seen = atomic_load(&team->generation);
        tower_fn fn = team->fn;
        void *arg = team->arg;
        pthread_mutex_unlock(&team->lock);
        fn(&team->ctx[a.index], arg);
        pthread_mutex_lock(&team->lock);
        if (--team->pending == 0)
            pthread_cond_signal(&team->done);
        pthread_mutex_unlock(&team->lock);
    }
}

tower_team *tower_team_create(int n, tt_err *err)
{
    tower_team *team = calloc(1, sizeof(*team));
    if (team == NULL || (team->ctx = calloc((size_t)n, sizeof(tower_context))) == NULL) {
        free(team);
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    team->n = n;
    pthread_mutex_init(&team->lock, NULL);
    pthread_cond_init(&team->start, NULL);
    pthread_cond_init(&team->done, NULL);
    atomic_init(&team->generation, 0);
    for (int i = 0; i < n; i++)
        team->ctx[i].index = i;
    if (n == 1)
        return team;
    team->threads = calloc((size_t)n, sizeof(pthread_t));
    if (team->threads == NULL) {
        tower_team_free(team);
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        tower_thread_arg *a = malloc(sizeof(*a));
        if (a != NULL) {
            a->team = team;
            a->index = i;
        }
        if (a == NULL || pthread_create(&team->threads[i], NULL, tower_main, a) != 0) {
            free(a);
            team->n = i; /* join the ones started */
            tower_team_free(team);
            err_set(err, TT_ERR_RUNTIME, "cannot start tower thread %d", i);
            return NULL;
        }
    }
    return team;
}

void tower_team_run(tower_team *team, tower_fn fn, void *arg)
{
    if (team->threads == NULL) {
        for (int i = 0; i < team->n; i++)
            fn(&team->ctx[i], arg);
        return;
    }
    pthread_mutex_lock(&team->lock);
    team->fn = fn;
    team->arg = arg;
    team->pending = team->n;
    atomic_fetch_add(&team->generation, 1);
    pthread_cond_broadcast(&team->start);
    while (team->pending > 0)
        pthread_cond_wait(&team->done, &team->lock);
    pthread_mutex_unlock(&team->lock);
}

void tower_team_free(tower_team *team)
{
    if (team == NULL)
        return;
    if (team->threads != NULL) {
        pthread_mutex_lock(&team->lock);
        team->stop = true;
        pthread_cond_broadcast(&team->start);
        pthread_mutex_unlock(&team->lock);
        for (int i = 0; i < team->n; i++)
            pthread_join(team->threads[i], NULL);
        free(team->threads);
    }
    pthread_mutex_destroy(&team->lock);
    pthread_cond_destroy(&team->start);
    pthread_cond_destroy(&team->done);
    free(team->ctx);
    free(team);
}

/* threadpool.h - a team of worker threads that run parallel-for loops.
 *
 * The calling thread always takes part, so a team of `threads` has threads-1
 * workers, and a team of 1 runs everything inline with no synchronisation. On a
 * 2-core machine spinning threads fight each other, so workers spin only briefly
 * and then sleep on a condition variable. Each CPU backend instance (one per
 * tower) owns one team; towers x threads_per_tower never exceeds the cores.
 */
#ifndef TT_THREADPOOL_H
#define TT_THREADPOOL_H

typedef struct threadpool threadpool_t;

/* Task i of n: fn(arg, i, n). Tasks must be independent. */
typedef void (*threadpool_fn)(void *arg, int task, int ntasks);

/* NULL on failure (errno set). threads >= 1. */
threadpool_t *threadpool_create(int threads);
int threadpool_size(const threadpool_t *tp);

/* Runs fn for tasks 0..ntasks-1 spread over the team and returns when all are
 * done. Which thread runs which task never affects results as long as each task
 * writes its own outputs. Not reentrant: one run at a time per pool. */
void threadpool_run(threadpool_t *tp, int ntasks, threadpool_fn fn, void *arg);

void threadpool_destroy(threadpool_t *tp);

/* Number of online CPUs (>= 1). */
int threadpool_cpu_count(void);
/* This process's share of the cores (>= 1): the online CPUs divided among
 * `sharers` processes (the ranks on this machine), and at most the CPUs its
 * affinity mask allows (taskset, a container's cpuset, mpirun's binding
 * narrow it). */
int threadpool_cpu_share(int sharers);

#endif

/* dist_watch.c - the deadline on every wait for other ranks
 * (trainer.collective_timeout, dist.h's dist_watch_*).
 *
 * A collective that a peer never answers (its host dropped off the network:
 * its TCP connections do not close) blocks inside MPI, or on a device queue
 * under NCCL, with no time limit of its own. So the wait is watched from
 * outside: the waiting thread marks begin and end, and a watchdog thread
 * wakes four times a second. MPI's collectives have one caller at a time
 * (MPI_THREAD_SERIALIZED), so their marks are plain stores of a sequence
 * number (odd: waiting), nothing measurable even next to a 0.25 us
 * all-reduce; the device waits of several tower threads count themselves
 * with atomic adds instead (they poll, sleeping, anyway). When the same wait has been in progress for the timeout, it prints
 * one line naming the rank, the global step, the collective and the ranks
 * waited for, aborts the device communicator (ncclCommAbort) if one is
 * registered, and ends the job with dist_abort(1) (MPI_Abort). MPI_Abort
 * itself needs the launcher; when that is cut off too, a second thread ends
 * this process 5 s later.
 *
 * The watchdog also ends a rank whose launcher is gone (mpirun or its orted
 * killed: the rank's parent changes), which otherwise spins on in its
 * collective as an orphan.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/dist.h"

#define WATCH_TICK_MS 250
#define WATCH_ABORT_GRACE_S 5 /* for MPI_Abort before the process ends itself */

static struct {
    atomic_ulong seq;            /* MPI: begins and ends so far, odd while waiting */
    atomic_int busy;             /* device waits in progress (tower threads) */
    atomic_ulong moves;          /* device waits' begins and ends so far */
    _Atomic(const char *) what;  /* the latest wait's collective */
    atomic_int peer;             /* the rank it waits for, -1: every other */
    atomic_llong step;
    atomic_int timeout_s;        /* 0: no limit */
    void (*hook)(void *);        /* ncclCommAbort of the registered communicator */
    void *hook_arg;
    pid_t parent;                /* the launcher; 0: not watched */
    bool started, stopping;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
} w = {.peer = -1, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

void dist_watch_begin(const char *what, int peer)
{
    unsigned long s = atomic_load_explicit(&w.seq, memory_order_relaxed);
    atomic_store_explicit(&w.what, what, memory_order_relaxed);
    atomic_store_explicit(&w.peer, peer, memory_order_relaxed);
    atomic_store_explicit(&w.seq, s + 1, memory_order_release);
}

void dist_watch_end(void)
{
    unsigned long s = atomic_load_explicit(&w.seq, memory_order_relaxed);
    atomic_store_explicit(&w.seq, s + 1, memory_order_release);
}

void dist_watch_device_begin(void)
{
    atomic_store_explicit(&w.what, "device all-reduce (NCCL)", memory_order_relaxed);
    atomic_store_explicit(&w.peer, -1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w.busy, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w.moves, 1, memory_order_release);
}

void dist_watch_device_end(void)
{
    atomic_fetch_sub_explicit(&w.busy, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w.moves, 1, memory_order_release);
}

void dist_watch_set_step(int64_t step)
{
    atomic_store_explicit(&w.step, step, memory_order_relaxed);
}

void dist_watch_set_hook(void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&w.lock);
    w.hook = fn;
    w.hook_arg = arg;
    pthread_mutex_unlock(&w.lock);
}

/* This process's rank, the ranks, and how to end them all: dist_mpi.c's,
 * given at dist_init (dist_watch_set_ranks), so the watch calls nothing of
 * the communicator that calls it. One process: rank 0 of 1, exit. */
static int w_rank, w_size = 1;
static void (*w_abort)(int code);

void dist_watch_set_ranks(int rank, int size, void (*abort_fn)(int code))
{
    w_rank = rank;
    w_size = size;
    w_abort = abort_fn;
}

/* "ranks 0, 2, 3" for a collective over every rank (up to 8 named). */
static void watch_format_peers(char *buf, size_t len, int peer)
{
    int me = w_rank, n = w_size, used = 0, named = 0;
    if (n < 2) {
        snprintf(buf, len, "the other towers' queues");
        return;
    }
    if (peer >= 0) {
        snprintf(buf, len, "rank %d", peer);
        return;
    }
    used = snprintf(buf, len, "rank%s", n > 2 ? "s" : "");
    for (int r = 0; r < n && used > 0 && (size_t)used < len; r++) {
        if (r == me)
            continue;
        if (++named > 8) {
            snprintf(buf + used, len - (size_t)used, " ... (%d in all)", n - 1);
            return;
        }
        used += snprintf(buf + used, len - (size_t)used, "%s %d", named > 1 ? "," : "", r);
    }
}

static void *watch_last_resort(void *unused)
{
    (void)unused;
    sleep(WATCH_ABORT_GRACE_S);
    fprintf(stderr, "towertrain: rank %d: MPI_Abort did not end the job in %d s; exiting\n",
            w_rank, WATCH_ABORT_GRACE_S);
    _exit(1);
}

_Noreturn static void watch_fire(int waited_s)
{
    char peers[128];
    watch_format_peers(peers, sizeof(peers), atomic_load(&w.peer));
    fprintf(stderr, "towertrain: rank %d of %d: %s at step %" PRId64 " not finished after %d s "
            "(trainer.collective_timeout), waiting for %s; ending the job\n", w_rank,
            w_size, atomic_load(&w.what), (int64_t)atomic_load(&w.step), waited_s, peers);
    pthread_t t;
    if (pthread_create(&t, NULL, watch_last_resort, NULL) != 0)
        _exit(1);
    pthread_mutex_lock(&w.lock);
    void (*hook)(void *) = w.hook;
    void *arg = w.hook_arg;
    pthread_mutex_unlock(&w.lock);
    if (hook != NULL)
        hook(arg); /* ncclCommAbort: the device queues drain */
    if (w_abort != NULL)
        w_abort(1); /* MPI_Abort: every rank */
    fflush(stdout);
    _exit(1);
}

/* The launcher gone: nobody will end or collect this rank. */
_Noreturn static void watch_orphaned(void)
{
    fprintf(stderr, "towertrain: rank %d of %d: its launcher (mpirun or orted, pid %d) is "
            "gone; exiting\n", w_rank, w_size, (int)w.parent);
    _exit(1);
}

static void *watch_main(void *unused)
{
    (void)unused;
    unsigned long seen = 0;
    struct timespec since; /* when `seen` was first seen with a wait in progress */
    clock_gettime(CLOCK_MONOTONIC, &since);
    pthread_mutex_lock(&w.lock);
    while (!w.stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += WATCH_TICK_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        int rc = pthread_cond_timedwait(&w.wake, &w.lock, &until);
        if (w.stopping || (rc != 0 && rc != ETIMEDOUT))
            break;
        if (w.parent != 0 && getppid() != w.parent)
            watch_orphaned();
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        unsigned long seq = atomic_load_explicit(&w.seq, memory_order_acquire);
        unsigned long moves = seq + atomic_load_explicit(&w.moves, memory_order_acquire);
        bool waiting = (seq & 1) != 0 || atomic_load(&w.busy) > 0;
        int limit = atomic_load(&w.timeout_s);
        if (moves != seen || !waiting) {
            seen = moves;
            since = now;
            continue;
        }
        double waited = (double)(now.tv_sec - since.tv_sec) +
                        1e-9 * (double)(now.tv_nsec - since.tv_nsec);
        if (limit > 0 && waited >= limit) {
            pthread_mutex_unlock(&w.lock);
            watch_fire((int)waited);
        }
    }
    pthread_mutex_unlock(&w.lock);
    return NULL;
}

int dist_watch_start(int timeout_s, bool launcher, tt_err *err)
{
    atomic_store(&w.timeout_s, timeout_s);
    pthread_mutex_lock(&w.lock);
    if (launcher && w.parent == 0)
        w.parent = getppid();
    bool needed = !w.started && (timeout_s > 0 || w.parent != 0);
    int rc = needed ? pthread_create(&w.thread, NULL, watch_main, NULL) : 0;
    if (needed && rc == 0)
        w.started = true;
    pthread_mutex_unlock(&w.lock);
    if (rc != 0)
        return err_set(err, TT_ERR_RUNTIME, "collective watch thread: %s", strerror(rc));
    return 0;
}

void dist_watch_stop(void)
{
    pthread_mutex_lock(&w.lock);
    bool started = w.started;
    w.stopping = true;
    pthread_cond_signal(&w.wake);
    pthread_mutex_unlock(&w.lock);
    if (started)
        pthread_join(w.thread, NULL);
    pthread_mutex_lock(&w.lock);
    w.started = w.stopping = false;
    pthread_mutex_unlock(&w.lock);
}

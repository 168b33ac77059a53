/* dist.h - the processes of one job: MPI ranks under mpirun, else one.
 *
 * Everything towertrain does across processes goes through these calls, so no
 * other file knows about MPI. Built without MPI (configure --without-mpi) or
 * started without mpirun, there is one rank, the collectives return at once
 * and MPI is never initialised.
 *
 * Threads: MPI runs at MPI_THREAD_SERIALIZED. Collectives are called by the
 * main thread or by tower 0's thread while the main thread waits for the
 * towers, never by two threads at once.
 */
#ifndef TT_DIST_H
#define TT_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Joins the job when launched by mpirun (MPI_Init_thread); else one rank. */
int dist_init(int *argc, char ***argv, tt_err *err);
void dist_finalize(void);

int dist_rank(void);
int dist_size(void);
/* Ranks on this machine (they share its cores). */
int dist_local_size(void);
/* This rank among those on its machine, 0 .. dist_local_size() - 1 (the GPU
 * bench gives each its own devices). */
int dist_local_rank(void);

/* Whether this binary was built with MPI ("mpi" in --version). */
bool dist_built(void);

/* Ends every rank of the job with this exit status (MPI_Abort); a plain exit
 * with one rank. The caller has printed why. */
_Noreturn void dist_abort(int code);

/* Collectives: every rank calls them in the same order with the same count. */
void dist_sum_floats(float *buf, size_t count);                    /* in place */
void dist_sum_floats_to(const float *in, float *out, size_t count); /* out of place */
void dist_sum_doubles(double *buf, int count);
int dist_max_int(int v);
void dist_broadcast(void *buf, size_t bytes, int root);
void dist_barrier(void);

/* The deadline on waits for other ranks (dist_watch.c): every wait goes
 * between dist_watch_begin and dist_watch_end (the collectives above do it
 * themselves), or dist_watch_device_begin and _end (the device all-reduce's
 * host wait, device_wait.c). One that lasts timeout_s ends the job with one
 * line and exit 1.
 *
 * dist_watch_start: sets the limit in seconds (0: none) and starts the
 * watchdog thread if needed; launcher: also exit when this process's parent
 * (mpirun or its orted) is gone. Called by dist_init under mpirun (default
 * DIST_COLLECTIVE_TIMEOUT_S) and by the trainer with the job's value. */
#define DIST_COLLECTIVE_TIMEOUT_S 300
int dist_watch_start(int timeout_s, bool launcher, tt_err *err);
/* Who this process is for the watch's line, and how it ends every rank
 * (dist_mpi.c's dist_init gives its rank, size and dist_abort). */
void dist_watch_set_ranks(int rank, int size, void (*abort_fn)(int code));
void dist_watch_stop(void);
/* what: the collective, a string that lives for the program; peer: the rank
 * waited for, -1 for every other rank. One caller at a time, as MPI's. */
void dist_watch_begin(const char *what, int peer);
void dist_watch_end(void);
/* From any number of threads at once (the towers' waits on their queues). */
void dist_watch_device_begin(void);
void dist_watch_device_end(void);
/* The global step that messages name. */
void dist_watch_set_step(int64_t step);
/* Called (once) before the job is ended: ncclCommAbort of the device
 * communicator. NULL to remove. */
void dist_watch_set_hook(void (*fn)(void *), void *arg);

#endif

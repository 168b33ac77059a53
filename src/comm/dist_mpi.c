/* dist_mpi.c - dist.h over MPI (Open MPI), built when configure finds it. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <mpi.h>

#include "comm/dist.h"

static int rank, size = 1, local_size = 1, local_rank = 0;
static bool active; /* MPI_Init_thread was called */

/* mpirun (Open MPI's, or a PMI launcher) tells its children so through the
 * environment; a plain `towertrain run` never touches MPI. */
static bool launched_by_mpirun(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        if (getenv(vars[i]) != NULL)
            return true;
    return false;
}

int dist_init(int *argc, char ***argv, tt_err *err)
{
    if (active || !launched_by_mpirun())
        return 0;
    int provided;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return err_set(err, TT_ERR_RUNTIME, "MPI_Init_thread failed");
    active = true;
    if (provided < MPI_THREAD_SERIALIZED) {
        err_set(err, TT_ERR_RUNTIME, "this MPI gives thread level %d; towertrain needs "
                "MPI_THREAD_SERIALIZED", provided);
        return -1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm local;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) ==
        MPI_SUCCESS) {
        MPI_Comm_size(local, &local_size);
        MPI_Comm_rank(local, &local_rank);
        MPI_Comm_free(&local);
    }
    dist_watch_set_ranks(rank, size, dist_abort);
    return size > 1 ? dist_watch_start(DIST_COLLECTIVE_TIMEOUT_S, true, err) : 0;
}

void dist_finalize(void)
{
    dist_watch_stop();
    if (active)
        MPI_Finalize();
    active = false;
}

int dist_rank(void)
{
    return rank;
}

int dist_size(void)
{
    return size;
}

int dist_local_size(void)
{
    return local_size;
}

int dist_local_rank(void)
{
    return local_rank;
}

bool dist_built(void)
{
    return true;
}

/* The first caller ends the job; a second thread (the collective watch
 * firing while a tower's error reaches main, dist_watch.c) waits here for
 * that, and touches nothing of MPI's: Open MPI's MPI_Abort is not safe to
 * enter from two threads at once (its help-file lexer shares one FILE:
 * both ranks died of SIGSEGV inside MPI_Abort in e2e_sim_faults' mpirun
 * hang case, 2 runs of about 80). Where MPI_Abort cannot end the job, the
 * watch's last resort ends the process 5 s later. */
_Noreturn void dist_abort(int code)
{
    static atomic_flag taken = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&taken))
        for (;;)
            pause();
    fflush(stdout);
    fflush(stderr);
    if (active && size > 1)
        MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

/* MPI counts are int: large buffers go in slices. */
#define SLICE ((size_t)1 << 30)

void dist_sum_floats(float *buf, size_t count)
{
    for (size_t off = 0; size > 1 && off < count; off += SLICE) {
        size_t n = count - off < SLICE ? count - off : SLICE;
        dist_watch_begin("all-reduce (MPI_Allreduce)", -1);
        MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        dist_watch_end();
    }
}

void dist_sum_floats_to(const float *in, float *out, size_t count)
{
    for (size_t off = 0; off < count; off += SLICE) {
        size_t n = count - off < SLICE ? count - off : SLICE;
        if (size > 1) {
            dist_watch_begin("all-reduce (MPI_Allreduce)", -1);
            MPI_Allreduce(in + off, out + off, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            dist_watch_end();
        } else if (out != in)
            for (size_t i = 0; i < n; i++)
                out[off + i] = in[off + i];
    }
}

void dist_sum_doubles(double *buf, int count)
{
    if (size > 1) {
        dist_watch_begin("sum of statistics (MPI_Allreduce)", -1);
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        dist_watch_end();
    }
}

int dist_max_int(int v)
{
    if (size > 1) {
        dist_watch_begin("agreement (MPI_Allreduce max)", -1);
        MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        dist_watch_end();
    }
    return v;
}

void dist_broadcast(void *buf, size_t bytes, int root)
{
    for (size_t off = 0; size > 1 && off < bytes; off += SLICE) {
        size_t n = bytes - off < SLICE ? bytes - off : SLICE;
        dist_watch_begin("broadcast (MPI_Bcast)", root == rank ? -1 : root);
        MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
        dist_watch_end();
    }
}

void dist_barrier(void)
{
    if (size > 1) {
        dist_watch_begin("barrier (MPI_Barrier)", -1);
        MPI_Barrier(MPI_COMM_WORLD);
        dist_watch_end();
    }
}

/* dist_none.c - dist.h without MPI (configure --without-mpi): one rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/dist.h"

/* Started by mpirun with several processes, a binary without MPI would run
 * them as independent jobs writing one log directory: refuse instead. */
int dist_init(int *argc, char ***argv, tt_err *err)
{
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (n == NULL)
        n = getenv("PMI_SIZE");
    if (n != NULL && atoi(n) > 1)
        return err_set(err, TT_ERR_USAGE, "started by mpirun with %s processes, but this "
                       "towertrain was built without MPI (configure found no Open MPI)", n);
    return 0;
}

void dist_finalize(void)
{
    dist_watch_stop();
}

int dist_rank(void)
{
    return 0;
}

int dist_size(void)
{
    return 1;
}

int dist_local_size(void)
{
    return 1;
}

int dist_local_rank(void)
{
    return 0;
}

bool dist_built(void)
{
    return false;
}

_Noreturn void dist_abort(int code)
{
    fflush(stdout);
    exit(code);
}

void dist_sum_floats(float *buf, size_t count)
{
}

void dist_sum_floats_to(const float *in, float *out, size_t count)
{
    if (out != in)
        memcpy(out, in, count * sizeof(float));
}

void dist_sum_doubles(double *buf, int count)
{
}

int dist_max_int(int v)
{
    return v;
}

void dist_broadcast(void *buf, size_t bytes, int root)
{
}

void dist_barrier(void)
{
}

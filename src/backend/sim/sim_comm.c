/* sim_comm.c - the simulated GPUs' all-reduce (sim.h): NCCL's interface,
 * in process. A group of packs is a collective: every tower of the process
 * calls allreduce with the same packs, in the same order of groups (as NCCL
 * requires); the last tower to arrive sums the packs in tower order, under
 * mpirun sums them over the ranks (comm/dist.h, from that tower's thread:
 * MPI_THREAD_SERIALIZED is enough, one caller at a time), divides for the
 * mean and writes the result into every tower's buffer. The others wait for
 * it, so a group is done when allreduce returns and join has nothing left
 * to wait for. */
#include <pthread.h>
#include <stdlib.h>

#include "backend/sim/sim.h"
#include "comm/dist.h"

#define SIM_GROUP 32 /* packs a group may hold, as NCCL_GROUP in sync_replicated.c */

typedef struct {
    backend_comm base;
    int n;
    pthread_mutex_t lock;
    pthread_cond_t done;
    uint64_t group;              /* the group being gathered */
    uint64_t seq[TT_MAX_SIM_DEVICES]; /* groups each tower started */
    int arrived;
    float *bufs[TT_MAX_SIM_DEVICES];
    size_t lo[SIM_GROUP], hi[SIM_GROUP];
    int n_packs;
    bool mean;
    bool mismatch;               /* a tower's packs differ from the first's */
    tt_err err;
} sim_comm;

/* The last tower of a group: sums and shares every pack. */
static void group_reduce(sim_comm *c)
{
    for (int k = 0; k < c->n_packs; k++) {
        size_t lo = c->lo[k], count = c->hi[k] - lo;
        float *sum = c->bufs[0] + lo;
        for (int t = 1; t < c->n; t++)
            for (size_t i = 0; i < count; i++)
                sum[i] += c->bufs[t][lo + i];
        if (dist_size() > 1)
            dist_sum_floats(sum, count);
        if (c->mean)
            for (size_t i = 0; i < count; i++)
                sum[i] /= (float)c->base.size;
        for (int t = 1; t < c->n; t++)
            for (size_t i = 0; i < count; i++)
                c->bufs[t][lo + i] = sum[i];
    }
}

static int sim_allreduce(backend_comm *bc, int t, float *buf, const size_t *lo, const size_t *hi,
                         int n_packs, bool mean, tt_err *err)
{
    sim_comm *c = (sim_comm *)bc;
    if (n_packs > SIM_GROUP)
        return err_set(err, TT_ERR_RUNTIME, "sim: a group of %d packs (at most %d)", n_packs,
                       SIM_GROUP);
    pthread_mutex_lock(&c->lock);
    /* a tower a group ahead waits for the others to finish the previous one */
    while (c->group != c->seq[t])
        pthread_cond_wait(&c->done, &c->lock);
    if (c->arrived == 0) {
        c->n_packs = n_packs;
        c->mean = mean;
        for (int k = 0; k < n_packs; k++) {
            c->lo[k] = lo[k];
            c->hi[k] = hi[k];
        }
    } else {
        bool same = c->n_packs == n_packs && c->mean == mean;
        for (int k = 0; same && k < n_packs; k++)
            same = c->lo[k] == lo[k] && c->hi[k] == hi[k];
        if (!same)
            c->mismatch = true;
    }
    c->bufs[t] = buf;
    if (++c->arrived == c->n) {
        if (c->mismatch) /* NCCL would hang or reduce garbage: say which */
            err_set(&c->err, TT_ERR_RUNTIME, "sim: towers started different packs in group "
                    "%llu", (unsigned long long)c->group);
        else
            group_reduce(c);
        c->arrived = 0;
        c->group++;
        pthread_cond_broadcast(&c->done);
    } else {
        uint64_t mine = c->group;
        while (c->group == mine)
            pthread_cond_wait(&c->done, &c->lock);
    }
    c->seq[t]++;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

static int sim_join(backend_comm *bc, int t, tt_err *err)
{
    (void)bc;
    (void)t;
    (void)err;
    return 0; /* every group was done when its allreduce returned */
}

static int sim_check(backend_comm *bc, int t, tt_err *err)
{
    sim_comm *c = (sim_comm *)bc;
    (void)t;
    pthread_mutex_lock(&c->lock);
    int rc = c->err.code == TT_OK ? 0 : err_set(err, c->err.code, "%s", c->err.msg);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static void sim_comm_free(backend_comm *bc)
{
    sim_comm *c = (sim_comm *)bc;
    if (c == NULL)
        return;
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->done);
    free(c);
}

backend_comm *sim_comm_create(int n, backend_t *const *bes, tt_err *err)
{
    (void)bes;
    if (n < 1 || n > TT_MAX_SIM_DEVICES) {
        err_set(err, TT_ERR_USAGE, "sim: %d towers (1 to %d)", n, TT_MAX_SIM_DEVICES);
        return NULL;
    }
    sim_comm *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    c->n = n;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->done, NULL);
    c->base = (backend_comm){.size = n * dist_size(),
                             .allreduce = sim_allreduce,
                             .join = sim_join,
                             .check = sim_check,
                             .free = sim_comm_free,
                             .impl = c};
    return &c->base;
}

/* sim_comm.c - the simulated GPUs' all-reduce (sim.h): NCCL's interface,
 * in process, ordered as nccl_comm.c orders NCCL's. Each tower has a
 * communication queue of its own (a thread, as NCCL's stream): allreduce
 * records an event on the compute queue after the operations that made the
 * gradients, makes the communication queue wait for it, queues the group
 * there and returns at once; join makes the compute queue wait for an event
 * recorded after the tower's groups, so the update reads the averages (a
 * missing join is a wrong result, or a race TSan reports). A group is a
 * collective: every tower of the process queues the same packs, in the same
 * order of groups (as NCCL requires); when the group reaches the front of
 * every tower's communication queue, the last queue to arrive sums the
 * packs in tower order, under mpirun sums them over the ranks (comm/dist.h),
 * divides for the mean and writes the result into every tower's buffer,
 * while the other queues wait for it. Under mpirun the host also waits for
 * the group: MPI_THREAD_SERIALIZED allows one caller at a time, and the
 * main thread calls MPI after the step. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "backend/sim/sim.h"
#include "comm/dist.h"
#include "util/clock.h"
#include "util/log.h"

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
    backend_t *bes[TT_MAX_SIM_DEVICES];
    backend_comm_queue cq[TT_MAX_SIM_DEVICES]; /* each tower's communication queue */
    size_t lo[SIM_GROUP], hi[SIM_GROUP];
    int n_packs;
    bool mean;
    bool mismatch;               /* a tower's packs differ from the first's */
    tt_err err;
    /* TT_SIM_FAULT=stall_allreduce: when the first stalled group reached a
     * queue (0: none); 2 s later check reports the asynchronous error */
    double stalled_since;
    int64_t stalled_step;
    bool aborted;                /* abort: every group returns at once */
} sim_comm;

#define SIM_STALL_ERROR_S 2.0

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

/* A group as queued: its arguments, copied. */
typedef struct {
    sim_comm *c;
    int t;
    float *buf;
    size_t lo[SIM_GROUP], hi[SIM_GROUP];
    int n_packs;
    bool mean;
    bool stall;     /* TT_SIM_FAULT: never completes (until abort) */
    int64_t step;
} group_args;

/* On tower t's queue: joins the group and waits until it is done. */
static void group_run(backend_t *be, void *p)
{
    (void)be;
    group_args *g = p;
    sim_comm *c = g->c;
    int t = g->t, n_packs = g->n_packs;
    const size_t *lo = g->lo, *hi = g->hi;
    bool mean = g->mean;
    float *buf = g->buf;
    pthread_mutex_lock(&c->lock);
    if (g->stall && c->stalled_since == 0.0) {
        c->stalled_since = clock_s();
        c->stalled_step = g->step;
    }
    /* a stalled group, as a peer that never answers: only abort ends it */
    while (g->stall && !c->aborted)
        pthread_cond_wait(&c->done, &c->lock);
    /* a tower a group ahead waits for the others to finish the previous one */
    while (c->group != c->seq[t] && !c->aborted)
        pthread_cond_wait(&c->done, &c->lock);
    if (c->aborted) { /* as ncclCommAbort: the buffer's contents are undefined */
        pthread_mutex_unlock(&c->lock);
        return;
    }
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
        while (c->group == mine && !c->aborted)
            pthread_cond_wait(&c->done, &c->lock);
    }
    c->seq[t]++;
    pthread_mutex_unlock(&c->lock);
}

/* For backend_device_wait_for: a communication queue's work is done. */
static int comm_idle(void *q, tt_err *err)
{
    (void)err;
    return sim_queue_idle(q) ? 1 : 0;
}

static int sim_allreduce(backend_comm *bc, int t, float *buf, const size_t *lo, const size_t *hi,
                         int n_packs, bool mean, tt_err *err)
{
    sim_comm *c = (sim_comm *)bc;
    if (n_packs > SIM_GROUP)
        return err_set(err, TT_ERR_RUNTIME, "sim: a group of %d packs (at most %d)", n_packs,
                       SIM_GROUP);
    group_args g = {.c = c, .t = t, .buf = buf, .n_packs = n_packs, .mean = mean,
                    };
    g.stall = sim_fault_stalls(c->bes[t], &g.step);
    static atomic_bool said; /* the log says when the injected stall begins */
    if (g.stall && !atomic_exchange(&said, true))
        log_printf("sim: TT_SIM_FAULT: the all-reduce of global step %lld stalls\n",
                   (long long)g.step);
    for (int k = 0; k < n_packs; k++) {
        g.lo[k] = lo[k];
        g.hi[k] = hi[k];
    }
    backend_t *be = c->bes[t];
    if (backend_comm_queue_start(be, &c->cq[t], err) != 0)
        return -1;
    sim_enqueue_on((sim_queue *)c->cq[t].q, group_run, &g, sizeof(g));
    tt_err wait_err = {0};
    if (dist_size() > 1 && backend_device_wait_for(be, comm_idle, c->cq[t].q, "all-reduce",
                                                   &wait_err) != 0)
        return err_set(err, wait_err.code, "sim:%d: %s", be->device, wait_err.msg);
    return 0;
}

static int sim_join(backend_comm *bc, int t, tt_err *err)
{
    sim_comm *c = (sim_comm *)bc;
    return backend_comm_queue_join(c->bes[t], &c->cq[t], err);
}

static int sim_record(backend_comm *bc, int t, backend_event *e, bool at_start, tt_err *err)
{
    sim_comm *c = (sim_comm *)bc;
    return backend_comm_queue_record(c->bes[t], &c->cq[t], e, at_start, err);
}

static int sim_check(backend_comm *bc, int t, tt_err *err)
{
    sim_comm *c = (sim_comm *)bc;
    (void)t;
    pthread_mutex_lock(&c->lock);
    if (c->err.code == TT_OK && c->stalled_since != 0.0 && !sim_fault_silent() &&
        clock_s() - c->stalled_since >= SIM_STALL_ERROR_S)
        err_set(&c->err, TT_ERR_RUNTIME, "sim: asynchronous error: the all-reduce of global "
                "step %lld never completed (a peer gone; injected by TT_SIM_FAULT)",
                (long long)c->stalled_step);
    int rc = c->err.code == TT_OK ? 0 : err_set(err, c->err.code, "%s", c->err.msg);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static void sim_comm_abort(backend_comm *bc)
{
    sim_comm *c = (sim_comm *)bc;
    pthread_mutex_lock(&c->lock);
    c->aborted = true;
    if (c->err.code == TT_OK)
        err_set(&c->err, TT_ERR_RUNTIME, "sim: communicator aborted");
    pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->lock);
}

/* As nccl_comm_free: waits for the queues by polling with the error
 * checked (a stalled group is aborted), then nothing queued refers to c. */
static void sim_comm_free(backend_comm *bc)
{
    sim_comm *c = (sim_comm *)bc;
    if (c == NULL)
        return;
    for (int t = 0; t < c->n; t++) {
        tt_err err = {0};
        if (backend_device_wait(c->bes[t], "communicator teardown", &err) != 0 ||
            (c->cq[t].q != NULL && backend_device_wait_for(c->bes[t], comm_idle, c->cq[t].q,
                                                           "communicator teardown", &err) != 0))
            sim_comm_abort(bc);
    }
    for (int t = 0; t < c->n; t++) { /* after an abort, finite */
        sim_drain(c->bes[t]);
        if (c->cq[t].q != NULL)
            backend_comm_queue_free(c->bes[t], &c->cq[t]);
    }
    backend_device_watch(c->bes, c->n, NULL);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->done);
    free(c);
}

backend_comm *sim_comm_create(int n, backend_t *const *bes, tt_err *err)
{
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
    for (int t = 0; t < n; t++)
        c->bes[t] = bes[t];
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->done, NULL);
    for (int t = 0; t < n; t++)
        if (backend_comm_queue_create(bes[t], &c->cq[t], err) != 0) {
            sim_comm_free(&c->base);
            return NULL;
        }
    c->base = (backend_comm){.size = n * dist_size(),
                             .allreduce = sim_allreduce,
                             .join = sim_join,
                             .check = sim_check,
                             .record = sim_record,
                             .abort = sim_comm_abort,
                             .free = sim_comm_free,
                             .impl = c};
    backend_device_watch(c->bes, n, &c->base);
    return &c->base;
}

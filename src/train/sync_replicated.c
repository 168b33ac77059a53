/* sync_replicated.c - tensorpack's SyncMultiGPUTrainerReplicated (and TF's
 * MirroredStrategy): every tower holds a replica of the parameters and of the
 * optimizer state; each step every tower computes the gradients of its slice,
 * the gradients are all-reduced (averaged), and every tower applies the same
 * update, so the replicas stay bitwise identical.
 *
 * Under mpirun the towers of each process first average among themselves
 * over shared memory, then tower 0 of every rank joins one MPI all-reduce
 * per pack, and the towers copy its result back: Horovod's hierarchy.
 *
 * With gradient_packing, a pack is averaged as soon as backward has made
 * every gradient in it final (the tower's grad_ready hook), while the
 * earlier layers' backward is still to run, as PyTorch DDP's buckets: the
 * last layers' packs go first. Every tower meets the packs in the same
 * order, and a pack's sum does not depend on when it runs, so the bits are
 * those of averaging after the whole backward. That holds for CPU towers
 * and the simulated device (each element summed in tower order), and for
 * NCCL over 2 participants (a + b); beyond that NCCL's ring and tree split
 * a buffer by its size, so packs may round differently from one all-reduce
 * (the replicas still agree with each other bit for bit).
 *
 * Device towers (a backend with device_allreduce: CUDA's NCCL, or the
 * simulated GPU's in-process communicator) all-reduce with the device's
 * communicator (backend.h, backend_comm): one over every device of every
 * rank, the packs (comm/pack_schedule.h) started from the grad-ready hook
 * on each tower's communication queue after its compute queue's work, and
 * the optimizer queued after their end: the host never waits for the
 * all-reduce. */
#include <stdlib.h>
#include <string.h>

#include "comm/allreduce.h"
#include "comm/dist.h"
#include "comm/pack_schedule.h"
#include "train/device_towers.h"
#include "train/trainer.h"
#include "util/log.h"
#include "util/trace.h"

/* gradient_packing below this many elements per pack does not pay. */
#define MIN_PACK 1024
/* NCCL packs start on 64-float (256-byte) boundaries; at most this many
 * go in one ncclGroupStart/End. */
#define NCCL_ALIGN 64
#define NCCL_GROUP 32

/* A tower's progress through the packs of the current step. */
typedef struct {
    trainer_t *tr;
    int t;
    int pending; /* packs [0, pending) are not averaged yet in this step */
    bool update; /* apply the update to each pack as soon as it is averaged */
} pack_cursor;

typedef struct {
    optimizer_t opts[TT_MAX_TOWERS]; /* one replica of the optimizer per tower */
    allreduce_t *allreduce;
    allreduce_algo algo;
    bool algo_auto;                  /* allreduce = "auto" chose algo */
    int packs;                       /* gradient_packing: all-reduces per step (1 = off) */
    pack_cursor cursors[TT_MAX_TOWERS];
    bool finite[TT_MAX_TOWERS];      /* loss scaling: the averaged gradients were finite */
    backend_comm *comm;              /* device towers: the all-reduce */
    pack_schedule sched[TT_MAX_TOWERS]; /* GPU towers: each one's packs in this step */
} replicated_state;

typedef struct {
    trainer_t *tr;
    const batch_t *b;
} step_arg;

/* "nccl" on GPUs, "sim" on the simulated ones */
static const char *device_allreduce_name(const trainer_t *tr)
{
    return strcmp(tr->backends[0]->dev->kind, "cuda") == 0 ? "nccl" : tr->backends[0]->dev->kind;
}

static void replicated_describe(const trainer_t *tr)
{
    const replicated_state *st = tr->impl;
    const trainer_cfg *tc = &tr->job->trainer;
    if (st->comm != NULL)
        log_printf("allreduce: %s over %d GPU(s) (%d rank(s) x %d tower(s)), %d pack(s) of "
                   "%zu gradients\n", device_allreduce_name(tr), st->comm->size, tr->n_ranks,
                   tr->n_towers,
                   st->sched[0].packs, tr->model.n_trainable);
    else if (st->algo_auto)
        log_printf("allreduce: auto chose %s for %d towers and %zu gradients\n",
                   allreduce_algo_name(st->algo), tr->n_towers, tr->model.n_trainable);
    if (tc->gradient_packing > 0 && st->packs == 1)
        log_printf("gradient_packing: %d packs would hold under %d gradients each; "
                   "packing skipped\n", tc->gradient_packing, MIN_PACK);
}

static void pack_range(const trainer_t *tr, int k, size_t *lo, size_t *hi)
{
    const replicated_state *st = tr->impl;
    size_t count = tr->model.n_trainable;
    *lo = count * (size_t)k / (size_t)st->packs;
    *hi = count * (size_t)(k + 1) / (size_t)st->packs;
}

/* Tower t's part of averaging one pack of gradients over every tower of
 * every rank. */
static void average_pack(trainer_t *tr, int t, float *grads, size_t count)
{
    replicated_state *st = tr->impl;
    allreduce_run(st->allreduce, t, grads, count, st->algo, true);
    if (tr->n_ranks == 1)
        return;
    if (t == 0) {
        dist_sum_floats(grads, count);
        for (size_t i = 0; i < count; i++)
            grads[i] /= (float)tr->n_ranks;
    }
    allreduce_broadcast(st->allreduce, t, grads, count, 0);
}

/* Averages, last first, the pending packs that lie wholly in
 * [lo, n_trainable): every pending pack when lo is 0. Returns whether there
 * was one. */
static bool average_ready_packs(pack_cursor *c, size_t lo)
{
    tower_t *tw = &c->tr->towers[c->t];
    bool any = false;
    while (c->pending > 0) {
        size_t plo, phi;
        pack_range(c->tr, c->pending - 1, &plo, &phi);
        if (plo < lo)
            break;
        replicated_state *st = c->tr->impl;
        int64_t t0 = trace_begin();
        average_pack(c->tr, c->t, tw->grads + plo, phi - plo);
        if (t0 != 0)
            trace_end_full(TRACE_ROW_ALLREDUCE + c->t, t0, TRACE_CAT_ALLREDUCE, "allreduce pack",
                           c->pending - 1, NULL, trace_args_pack, allreduce_algo_name(st->algo),
                           (int64_t)((phi - plo) * sizeof(float)));
        /* while the averaged pack is in cache (backward has no use for
         * these parameters any more) */
        if (c->update) {
            t0 = trace_begin();
            optimizer_apply_range(&st->opts[c->t], tw->be, tw->params, tw->grads, plo, phi,
                                  c->tr->updates + 1);
            trace_end(TRACE_ROW_NONE, t0, TRACE_CAT_OPTIMIZER, "optimizer", -1);
        }
        c->pending--;
        any = true;
    }
    return any;
}

/* GPU towers: starts, in one group, the packs that lie wholly in
 * [lo, n_trainable) and have not started yet (every one left when lo is 0).
 * While the timeline records, each pack's span on the tower's all-reduce
 * row is its group's collective, measured on the device: timing events on
 * the communication queue before and after the group (device_spans.h). */
static bool nccl_start_ready_packs(trainer_t *tr, int t, size_t lo)
{
    replicated_state *st = tr->impl;
    tower_t *tw = &tr->towers[t];
    int top, n = pack_schedule_ready(&st->sched[t], lo, &top);
    for (int first = 0; first < n; first += NCCL_GROUP) {
        size_t plo[NCCL_GROUP], phi[NCCL_GROUP];
        int m = n - first < NCCL_GROUP ? n - first : NCCL_GROUP;
        for (int i = 0; i < m; i++) {
            pack_schedule_range(&st->sched[t], top - first - i, &plo[i], &phi[i]);
            /* loss scaling: unscaled on the compute stream before NCCL reads
             * the pack (trainer_tower_compute leaves packed towers to us) */
            if (tw->loss_scale != 1.0f && tr->packs_unscale)
                tw->be->scale(tw->be, phi[i] - plo[i], 1.0f / tw->loss_scale,
                              tw->grads + plo[i]);
        }
        int row = TRACE_ROW_ALLREDUCE + t;
        int64_t t0 = trace_begin_on(row); /* recorded as the group starts, after the scales */
        tt_err err = {0};
        if (st->comm->allreduce(st->comm, t, tw->grads, plo, phi, m, true, &err) != 0) {
            device_tower_fail(tr, t, &err);
            continue;
        }
        /* the group's packs end together: one closing event for all */
        for (int i = 0; t0 != 0 && i < m; i++)
            (i == 0 ? trace_end_full : trace_end_with_last)(
                row, t0, TRACE_CAT_ALLREDUCE, "allreduce pack", top - first - i, NULL,
                trace_args_pack, device_allreduce_name(tr),
                (int64_t)((phi[i] - plo[i]) * sizeof(float)));
    }
    return n > 0;
}

/* GPU towers, backward done: the packs not started yet, then the compute
 * stream waits for every pack (the update reads the averages). */
static void nccl_finish_packs(trainer_t *tr, int t)
{
    replicated_state *st = tr->impl;
    nccl_start_ready_packs(tr, t, 0);
    tt_err err = {0};
    if (st->comm->join(st->comm, t, &err) != 0)
        device_tower_fail(tr, t, &err);
}

/* tower_t.grad_ready: called by backward as layers finish. */
static bool pack_ready(void *arg, size_t lo)
{
    pack_cursor *c = arg;
    /* at the end of backward (lo 0) a GPU tower's compute stream waits for
     * the packs there, within the tower's step, as a CPU tower averages its
     * last packs within it: the timeline's step span holds them */
    if (((replicated_state *)c->tr->impl)->comm == NULL)
        return average_ready_packs(c, lo);
    if (lo == 0) {
        nccl_finish_packs(c->tr, c->t);
        return true;
    }
    return nccl_start_ready_packs(c->tr, c->t, lo);
}

/* Device towers: the device's communicator over every device of every
 * rank; "auto" means it ("nccl": the name users know it by). */
static int replicated_setup_nccl(trainer_t *tr, replicated_state *st, tt_err *err)
{
    const trainer_cfg *tc = &tr->job->trainer;
    if (strcmp(tc->allreduce, "auto") != 0 && strcmp(tc->allreduce, "nccl") != 0)
        return err_set(err, TT_ERR_USAGE, "trainer.allreduce = \"%s\": GPU towers all-reduce "
                       "with \"nccl\" (or \"auto\"); \"%s\" is for CPU towers", tc->allreduce,
                       tc->allreduce);
    st->comm = tr->backends[0]->dev->comm_create(tr->n_towers, tr->backends, err);
    if (st->comm == NULL || device_towers_trace_comm(tr, st->comm, err) != 0)
        return -1;
    size_t count = tr->model.n_trainable;
    int packs = 1;
    if (tc->gradient_packing > 0 && count / (size_t)tc->gradient_packing >= MIN_PACK)
        packs = tc->gradient_packing;
    st->packs = packs;
    for (int t = 0; t < tr->n_towers; t++) {
        pack_schedule_init(&st->sched[t], count, packs, NCCL_ALIGN);
        st->cursors[t] = (pack_cursor){tr, t, 0, false};
        if (st->sched[t].packs > 1) {
            tr->packs_unscale = true;
            tr->towers[t].grad_ready = pack_ready;
            tr->towers[t].grad_ready_arg = &st->cursors[t];
        }
    }
    return 0;
}

static int replicated_setup(trainer_t *tr, tt_err *err)
{
    const trainer_cfg *tc = &tr->job->trainer;
    size_t count = tr->model.n_trainable;
    replicated_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    tr->impl = st;
    if (trainer_create_optimizers(tr, tr->backends, tr->n_towers, st->opts, err) != 0)
        return -1;
    const backend_device_ops *dev = tr->backends[0]->dev;
    if (dev != NULL && dev->device_allreduce)
        return replicated_setup_nccl(tr, st, err);
    st->allreduce = allreduce_create(tr->n_towers, err);
    if (st->allreduce == NULL)
        return -1;
    if (strcmp(tc->allreduce, "auto") == 0) {
        st->algo = allreduce_choose(tr->n_towers, count * sizeof(float));
        st->algo_auto = true;
    } else {
        int a = allreduce_algo_parse(tc->allreduce);
        if (a < 0)
            return err_set(err, TT_ERR_USAGE, "trainer.allreduce: '%s' needs the GPU backend",
                           tc->allreduce);
        st->algo = (allreduce_algo)a;
    }
    st->packs = 1;
    if (tc->gradient_packing > 0 && count / (size_t)tc->gradient_packing >= MIN_PACK)
        st->packs = tc->gradient_packing;
    for (int t = 0; t < tr->n_towers; t++) {
        st->cursors[t] = (pack_cursor){tr, t, 0, false};
        if (st->packs > 1) { /* one pack is ready only when backward is done */
            tr->towers[t].grad_ready = pack_ready;
            tr->towers[t].grad_ready_arg = &st->cursors[t];
        }
    }
    return 0;
}

/* GPU towers: the packs go as backward makes them final, the rest after
 * it; the compute stream waits for them (an event) before the update. */
static void replicated_tower_gpu(const tower_context *ctx, void *p)
{
    step_arg *a = p;
    trainer_t *tr = a->tr;
    replicated_state *st = tr->impl;
    int t = ctx->index;
    tower_t *tw = &tr->towers[t];
    pack_schedule_begin(&st->sched[t]);
    trainer_tower_compute(tr, t, a->b); /* packed: its last packs too (pack_ready) */
    nccl_finish_packs(tr, t); /* the rest (no pack, or no hook at 0), then the join */
    st->finite[t] = trainer_grads_finite(tr, tw->be, tw->grads, tr->model.n_trainable);
    /* packed and without loss scaling, nothing was queued since the step's
     * span ended (its packs and their join are inside it): the update's
     * span continues it */
    int64_t t0 = tw->grad_ready == pack_ready && !tr->loss_scaling ? trace_continue()
                                                                     : trace_begin();
    if (st->finite[t])
        optimizer_apply(&st->opts[t], tw->params, tw->grads, tr->updates + 1);
    trace_end(TRACE_ROW_NONE, t0, TRACE_CAT_OPTIMIZER, "optimizer", -1);
}

static void replicated_tower(const tower_context *ctx, void *p)
{
    step_arg *a = p;
    trainer_t *tr = a->tr;
    replicated_state *st = tr->impl;
    int t = ctx->index;
    tower_t *tw = &tr->towers[t];
    pack_cursor *c = &st->cursors[t];
    c->pending = st->packs;
    /* with loss scaling the update waits for the whole block's verdict */
    c->update = !tr->loss_scaling && tw->loss_scale == 1.0f &&
                !optimizer_needs_whole(&st->opts[t]); /* clipping, LARS: after all packs */
    trainer_tower_compute(tr, t, a->b); /* averages packs as they are ready */
    average_ready_packs(c, 0);          /* and the rest */
    if (c->update) {
        st->finite[t] = true;
        optimizer_mark_stepped(&st->opts[t]);
        return;
    }
    /* every tower holds the same averaged gradients: the same verdict */
    st->finite[t] = trainer_grads_finite(tr, tw->be, tw->grads, tr->model.n_trainable);
    int64_t t0 = trace_begin();
    if (st->finite[t])
        optimizer_apply(&st->opts[t], tw->params, tw->grads, tr->updates + 1);
    trace_end(TRACE_ROW_NONE, t0, TRACE_CAT_OPTIMIZER, "optimizer", -1);
}

static int replicated_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    step_arg a = {tr, b};
    replicated_state *st = tr->impl;
    tower_threads_run(tr->threads, st->comm != NULL ? replicated_tower_gpu : replicated_tower,
                   &a);
    if (st->comm != NULL && device_towers_check(tr, err) != 0)
        return -1; /* a wait that saw the communicator's error names it */
    for (int t = 0; st->comm != NULL && t < tr->n_towers; t++) {
        tt_err comm_err = {0};
        backend_t *be = tr->backends[t];
        if (st->comm->check(st->comm, t, &comm_err) != 0)
            return err_set(err, comm_err.code, "tower %d (%s:%d): %s", t, be->dev->kind,
                           be->device, comm_err.msg);
    }
    if (trainer_loss_scale_step(tr, st->finite[0]))
        tr->updates++;
    trainer_collect_step(tr, b);
    return 0;
}

static optimizer_t *replicated_optimizer(trainer_t *tr, int i)
{
    replicated_state *st = tr->impl;
    return i < tr->n_towers ? &st->opts[i] : NULL;
}

static void replicated_destroy(trainer_t *tr)
{
    replicated_state *st = tr->impl;
    for (int t = 0; t < tr->n_towers; t++)
        if (st->opts[t].be != NULL)
            optimizer_free(&st->opts[t]);
    allreduce_free(st->allreduce);
    if (st->comm != NULL)
        st->comm->free(st->comm);
    free(st);
    tr->impl = NULL;
}

const trainer_ops trainer_sync_replicated_ops = {
    .name = "sync_replicated",
    .setup = replicated_setup,
    .run_step = replicated_run_step,
    .describe = replicated_describe,
    .optimizer = replicated_optimizer,
    .destroy = replicated_destroy,
};

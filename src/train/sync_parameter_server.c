/* sync_parameter_server.c - tensorpack's SyncMultiGPUTrainerParameterServer:
 * one copy of each parameter lives on its parameter-server device; every step
 * the towers read it, compute the gradients of their slices, the gradients
 * are averaged where the parameter lives and the update is applied once there.
 *
 * ps_device = "cpu": the copy is on the host and the averaging and update are
 * shared out evenly by element. ps_device = "gpu": each parameter tensor is
 * placed on one tower's device by least-loaded placement by element count (as
 * tensorpack's LeastLoadedDeviceSetter), and that tower averages and updates
 * it. Gradients are summed in tower order, so placement never changes bits.
 *
 * GPU towers, ps_device = "cpu": the copy is in host memory
 * (shared_params.h); the towers download their gradients, the host averages
 * and updates, the towers upload the copy. ps_device = "gpu": each range
 * lives on its owner's GPU with its optimizer state; the towers read the
 * ranges by peer copies, the owner gathers the towers' gradients of its
 * ranges by peer copies, sums them in tower order and updates. The host
 * waits for the devices between the two phases of a step. */
#include <stdlib.h>
#include <string.h>

#include "comm/allreduce.h"
#include "train/device_towers.h"
#include "train/shared_params.h"
#include "train/trainer.h"
#include "util/log.h"
#include "util/trace.h"

/* A range of the parameter block and the tower that averages and updates it. */
typedef struct {
    size_t lo, hi;
    int owner;
} param_range;

typedef struct {
    shared_params sp;
    float *grads;        /* [n_trainable]: the averaged gradients */
    param_range *ranges; /* the placement */
    int n_ranges;
    bool finite[TT_MAX_TOWERS]; /* loss scaling: each tower's gradients were finite */
    /* GPU towers with ps_device = "gpu": on each tower's device, the copy of
     * the ranges it owns (a full-size block, its ranges authoritative), their
     * optimizer state, and the sum of the towers' gradients */
    bool on_gpus;
    float *server[TT_MAX_TOWERS];
    float *sum[TT_MAX_TOWERS], *peer[TT_MAX_TOWERS];
    optimizer_t opts[TT_MAX_TOWERS];
} ps_state;

static void place_even(trainer_t *tr, ps_state *st)
{
    size_t count = tr->model.n_trainable;
    st->n_ranges = tr->n_towers;
    for (int t = 0; t < tr->n_towers; t++) {
        st->ranges[t].lo = count * (size_t)t / (size_t)tr->n_towers;
        st->ranges[t].hi = count * (size_t)(t + 1) / (size_t)tr->n_towers;
        st->ranges[t].owner = t;
    }
}

static void place_least_loaded(trainer_t *tr, ps_state *st)
{
    size_t load[TT_MAX_TOWERS] = {0};
    st->n_ranges = 0;
    for (int i = 0; i < tr->model.n_params; i++) {
        const param_entry *p = &tr->model.params[i];
        if (!p->trainable)
            continue;
        int best = 0;
        for (int t = 1; t < tr->n_towers; t++)
            if (load[t] < load[best])
                best = t;
        load[best] += p->count;
        param_range *r = &st->ranges[st->n_ranges++];
        r->lo = p->offset;
        r->hi = p->offset + p->count;
        r->owner = best;
    }
}

/* The placement, logged with the trainer table. */
static void ps_describe(const trainer_t *tr)
{
    const ps_state *st = tr->impl;
    if (strcmp(tr->job->trainer.ps_device, "gpu") != 0 && tr->backends[0]->dev != NULL) {
        /* device towers: one host thread averages and updates (shared_params.h) */
        log_printf("parameter server: %zu parameters in host memory (cpu); averaging and "
                   "updates by the host for %d device towers\n", tr->model.n_trainable,
                   tr->n_towers);
        return;
    }
    if (strcmp(tr->job->trainer.ps_device, "gpu") != 0) {
        log_printf("parameter server: %zu parameters on the host (cpu); averaging and updates "
                   "shared by %d towers\n", tr->model.n_trainable, tr->n_towers);
        return;
    }
    for (int i = 0; i < st->n_ranges; i++) {
        const param_range *r = &st->ranges[i];
        const param_entry *p = NULL;
        for (int j = 0; j < tr->model.n_params && p == NULL; j++)
            if (tr->model.params[j].offset == r->lo && tr->model.params[j].trainable)
                p = &tr->model.params[j];
        log_printf("parameter server: %-24s %9zu elements on tower %d (device %d)\n",
                   p ? p->name : "?", r->hi - r->lo, r->owner, tr->job->trainer.towers[r->owner]);
    }
}

/* ps_device = "gpu" on GPU towers: every device gets its block, sums and
 * optimizer, all starting from tower 0's values. */
static int ps_setup_gpus(trainer_t *tr, ps_state *st, tt_err *err)
{
    size_t n = tr->model.n_trainable ? tr->model.n_trainable : 1;
    st->on_gpus = true;
    place_least_loaded(tr, st);
    /* the towers read the owners' ranges and the owners gather the
     * gradients by peer copies: direct where the devices allow */
    int direct = 0, pairs = 0;
    for (int a = 0; a < tr->n_towers; a++)
        for (int b = 0; b < tr->n_towers; b++) {
            backend_t *be = tr->backends[a];
            if (a == b || be->dev->peer_enable == NULL)
                continue;
            pairs++;
            direct += be->dev->peer_enable(be, tr->backends[b]);
        }
    if (pairs > 0)
        log_printf("parameter server: peer access between %d of %d device pairs\n", direct,
                   pairs);
    for (int t = 0; t < tr->n_towers; t++) {
        backend_t *be = tr->backends[t];
        st->server[t] = be->alloc(be, n * sizeof(float));
        st->sum[t] = be->alloc(be, n * sizeof(float));
        st->peer[t] = be->alloc(be, n * sizeof(float));
        if (!st->server[t] || !st->sum[t] || !st->peer[t]) {
            err_set(err, TT_ERR_USAGE, "tower %d (%s:%d): parameter server: %s", t,
                    be->dev->kind, be->device, be->dev->alloc_error(be));
            return -1;
        }
        be->copy(be, st->server[t], tr->towers[0].params, tr->model.n_trainable * sizeof(float));
        if (trainer_create_optimizer(tr, be, &st->opts[t], err) != 0)
            return -1;
        tt_err dev_err = {0};
        if (be->dev->sync(be, &dev_err) != 0)
            return err_set(err, dev_err.code, "tower %d: %s", t, dev_err.msg);
    }
    return 0;
}

static int ps_setup(trainer_t *tr, tt_err *err)
{
    ps_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    tr->impl = st;
    st->ranges = calloc((size_t)tr->model.n_params + (size_t)tr->n_towers, sizeof(param_range));
    if (st->ranges == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    bool gpu_ps = strcmp(tr->job->trainer.ps_device, "gpu") == 0;
    const optimizer_cfg *oc = &tr->job->optimizer;
    if (!tr->backends[0]->host_memory && gpu_ps && (oc->type == OPT_LARS || oc->clip_global_norm > 0.0f))
        return err_set(err, TT_ERR_USAGE, "optimizer: lars and clip_global_norm need the whole "
                       "gradient in one place; with GPU towers use trainer.ps_device = \"cpu\"");
    if (!tr->backends[0]->host_memory && gpu_ps)
        return ps_setup_gpus(tr, st, err);
    if (shared_params_create(tr, &st->sp, err) != 0)
        return -1;
    backend_t *be = shared_params_backend(tr, &st->sp);
    size_t n = tr->model.n_trainable ? tr->model.n_trainable : 1;
    st->grads = be->alloc(be, n * sizeof(float));
    if (st->grads == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    if (gpu_ps)
        place_least_loaded(tr, st);
    else
        place_even(tr, st);
    return 0;
}

/* ps_device = "gpu" on GPU towers: tower t reads each range from its owner. */
static void ps_read_ranges(trainer_t *tr, ps_state *st, int t)
{
    tower_t *tw = &tr->towers[t];
    for (int r = 0; r < st->n_ranges; r++) {
        const param_range *pr = &st->ranges[r];
        tw->be->copy(tw->be, tw->params + pr->lo, st->server[pr->owner] + pr->lo,
                     (pr->hi - pr->lo) * sizeof(float));
    }
}

typedef struct {
    trainer_t *tr;
    const batch_t *b;
} step_arg;

static void ps_tower_compute(const tower_context *ctx, void *p)
{
    step_arg *a = p;
    ps_state *st = a->tr->impl;
    tower_t *tw = &a->tr->towers[ctx->index];
    if (st->on_gpus)
        ps_read_ranges(a->tr, st, ctx->index);
    else
        shared_params_read(a->tr, &st->sp, ctx->index); /* from the server */
    trainer_tower_compute(a->tr, ctx->index, a->b);
    st->finite[ctx->index] =
        trainer_grads_finite(a->tr, tw->be, tw->grads, a->tr->model.n_trainable);
    if (tw->be->host_memory)
        return;
    /* the other devices (or the host) read these gradients next */
    tt_err err = {0};
    if (st->sp.server != NULL)
        shared_params_grads(a->tr, &st->sp, ctx->index);
    else if (tw->be->dev->sync(tw->be, &err) != 0)
        device_tower_fail(a->tr, ctx->index, &err);
}

/* ps_device = "gpu" on GPU towers: the owner of each range sums the towers'
 * gradients there in tower order (peer copies), averages and updates it. */
static void ps_tower_update_gpu(const tower_context *ctx, void *p)
{
    step_arg *a = p;
    trainer_t *tr = a->tr;
    ps_state *st = tr->impl;
    int me = ctx->index, n = tr->n_towers;
    backend_t *be = tr->backends[me];
    for (int r = 0; r < st->n_ranges; r++) {
        const param_range *pr = &st->ranges[r];
        if (pr->owner != me)
            continue;
        size_t len = pr->hi - pr->lo;
        be->copy(be, st->sum[me] + pr->lo, tr->towers[0].grads + pr->lo, len * sizeof(float));
        for (int u = 1; u < n; u++) {
            be->copy(be, st->peer[me] + pr->lo, tr->towers[u].grads + pr->lo, len * sizeof(float));
            be->axpy(be, len, 1.0f, st->peer[me] + pr->lo, st->sum[me] + pr->lo);
        }
        be->scale(be, len, 1.0f / (float)n, st->sum[me] + pr->lo);
        optimizer_apply_range(&st->opts[me], be, st->server[me], st->sum[me], pr->lo, pr->hi,
                              tr->updates + 1);
    }
    tt_err err = {0};
    if (be->dev->sync(be, &err) != 0) /* the next step's reads come from other devices */
        device_tower_fail(tr, me, &err);
}

/* ps_device = "cpu" on GPU towers: the host averages and updates every range
 * (on the host's backend, from one thread). */
static void ps_update_host(trainer_t *tr, ps_state *st)
{
    int n = tr->n_towers;
    backend_t *server = st->sp.server;
    for (int r = 0; r < st->n_ranges; r++) {
        const param_range *pr = &st->ranges[r];
        allreduce_sum_range(st->grads, st->sp.host_grads, n, pr->lo, pr->hi, (float)n);
        if (!optimizer_needs_whole(&st->sp.opt))
            optimizer_apply_range(&st->sp.opt, server, st->sp.params, st->grads, pr->lo, pr->hi,
                                  tr->updates + 1);
    }
}

/* The ranges this tower owns: average the towers' gradients there, update. */
static void ps_tower_update(const tower_context *ctx, void *p)
{
    step_arg *a = p;
    trainer_t *tr = a->tr;
    ps_state *st = tr->impl;
    int n = tr->n_towers;
    float *grads[TT_MAX_TOWERS];
    for (int t = 0; t < n; t++)
        grads[t] = tr->towers[t].grads;
    for (int r = 0; r < st->n_ranges; r++) {
        const param_range *pr = &st->ranges[r];
        if (pr->owner != ctx->index)
            continue;
        /* the timeline: the owner's range as a pack, on the host's clock (a
         * device tower's own row is measured on its device) */
        int64_t t0 = trace_begin_host();
        allreduce_sum_range(st->grads, grads, n, pr->lo, pr->hi, (float)n);
        if (t0 != 0)
            trace_end_full(TRACE_ROW_ALLREDUCE + ctx->index, t0, TRACE_CAT_ALLREDUCE,
                           "allreduce pack", r, NULL, trace_args_pack, "parameter_server",
                           (int64_t)((pr->hi - pr->lo) * sizeof(float)));
        if (optimizer_needs_whole(&st->sp.opt))
            continue; /* ps_run_step updates once, on the whole average */
        t0 = trace_begin();
        optimizer_apply_range(&st->sp.opt, tr->towers[ctx->index].be, st->sp.params, st->grads,
                              pr->lo, pr->hi, tr->updates + 1);
        trace_end(TRACE_ROW_NONE, t0, TRACE_CAT_OPTIMIZER, "optimizer", -1);
    }
}

static int ps_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    ps_state *st = tr->impl;
    step_arg a = {tr, b};
    tower_threads_run(tr->threads, ps_tower_compute, &a);
    /* the average holds an Inf or a NaN when any tower's gradients do */
    bool finite = true;
    for (int t = 0; t < tr->n_towers; t++)
        finite = finite && st->finite[t];
    if (trainer_loss_scale_step(tr, finite)) {
        if (st->on_gpus) {
            tower_threads_run(tr->threads, ps_tower_update_gpu, &a);
            for (int t = 0; t < tr->n_towers; t++)
                optimizer_mark_stepped(&st->opts[t]);
        } else {
            if (st->sp.server != NULL)
                ps_update_host(tr, st);
            else
                tower_threads_run(tr->threads, ps_tower_update, &a);
            /* clipping and LARS: one update over the whole averaged block */
            if (optimizer_needs_whole(&st->sp.opt))
                optimizer_apply(&st->sp.opt, st->sp.params, st->grads, tr->updates + 1);
            optimizer_mark_stepped(&st->sp.opt);
        }
        tr->updates++;
    }
    trainer_collect_step(tr, b);
    return 0;
}

/* On GPUs every owner's optimizer applies updates (a learning rate goes to
 * each); the first one's state is what a checkpoint saves, so publish
 * gathers the other owners' ranges into it. */
static optimizer_t *ps_optimizer(trainer_t *tr, int i)
{
    ps_state *st = tr->impl;
    if (st->on_gpus)
        return i < tr->n_towers ? &st->opts[i] : NULL;
    return i == 0 ? &st->sp.opt : NULL;
}

static void ps_publish(trainer_t *tr)
{
    ps_state *st = tr->impl;
    if (!st->on_gpus) {
        shared_params_read(tr, &st->sp, 0);
        return;
    }
    backend_t *be = tr->backends[0];
    ps_read_ranges(tr, st, 0);
    for (int r = 0; r < st->n_ranges; r++) {
        const param_range *pr = &st->ranges[r];
        for (int k = 0; pr->owner != 0 && k < st->opts[0].n_slots; k++)
            be->copy(be, st->opts[0].slots[k] + pr->lo, st->opts[pr->owner].slots[k] + pr->lo,
                     (pr->hi - pr->lo) * sizeof(float));
    }
    tt_err err = {0};
    if (be->dev->sync(be, &err) != 0)
        device_tower_fail(tr, 0, &err);
}

/* The towers hold new values (resume, session_init): every copy takes them
 * (resume wrote the whole optimizer state into every owner's optimizer). */
static void ps_reload(trainer_t *tr)
{
    ps_state *st = tr->impl;
    if (!st->on_gpus) {
        shared_params_reload(tr, &st->sp);
        return;
    }
    for (int t = 0; t < tr->n_towers; t++) {
        backend_t *be = tr->backends[t];
        be->copy(be, st->server[t], tr->towers[0].params, tr->model.n_trainable * sizeof(float));
        tt_err err = {0};
        if (be->dev->sync(be, &err) != 0)
            device_tower_fail(tr, t, &err);
    }
}

static void ps_destroy(trainer_t *tr)
{
    ps_state *st = tr->impl;
    if (st->on_gpus) {
        for (int t = 0; t < tr->n_towers; t++) {
            backend_t *be = tr->backends[t];
            if (st->opts[t].be != NULL)
                optimizer_free(&st->opts[t]);
            be->free(be, st->server[t]);
            be->free(be, st->sum[t]);
            be->free(be, st->peer[t]);
        }
    } else {
        backend_t *be = shared_params_backend(tr, &st->sp);
        be->free(be, st->grads);
        shared_params_free(tr, &st->sp);
    }
    free(st->ranges);
    free(st);
    tr->impl = NULL;
}

const trainer_ops trainer_sync_parameter_server_ops = {
    .name = "sync_parameter_server",
    .setup = ps_setup,
    .run_step = ps_run_step,
    .describe = ps_describe,
    .optimizer = ps_optimizer,
    .publish = ps_publish,
    .reload = ps_reload,
    .destroy = ps_destroy,
};

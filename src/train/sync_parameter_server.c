/* sync_parameter_server.c - tensorpack's SyncMultiGPUTrainerParameterServer:
 * one copy of each parameter lives on its parameter-server device; every step
 * the towers read it, compute the gradients of their slices, the gradients
 * are averaged where the parameter lives and the update is applied once there.
 *
 * ps_device = "cpu": the copy is on the host and the averaging and update are
 * shared out evenly by element. ps_device = "gpu": each parameter tensor is
 * placed on one tower's device by least-loaded placement by element count (as
 * tensorpack's LeastLoadedDeviceSetter), and that tower averages and updates
 * it. Gradients are summed in tower order, so placement never changes bits. */
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"
#include "util/log.h"

static int place_even(trainer_t *tr)
{
    size_t count = tr->model.n_trainable;
    tr->n_ranges = tr->n_towers;
    for (int t = 0; t < tr->n_towers; t++) {
        tr->ranges[t].lo = count * (size_t)t / (size_t)tr->n_towers;
        tr->ranges[t].hi = count * (size_t)(t + 1) / (size_t)tr->n_towers;
        tr->ranges[t].owner = t;
    }
    return 0;
}

static int place_least_loaded(trainer_t *tr)
{
    size_t load[TT_MAX_TOWERS] = {0};
    tr->n_ranges = 0;
    for (int i = 0; i < tr->model.n_params; i++) {
        const param_entry *p = &tr->model.params[i];
        if (!p->trainable)
            continue;
        int best = 0;
        for (int t = 1; t < tr->n_towers; t++)
            if (load[t] < load[best])
                best = t;
        load[best] += p->count;
        param_range *r = &tr->ranges[tr->n_ranges++];
        r->lo = p->offset;
        r->hi = p->offset + p->count;
        r->owner = best;
    }
    return 0;
}

/* The placement, logged with the trainer table. */
static void ps_describe(const trainer_t *tr)
{
    if (strcmp(tr->job->trainer.ps_device, "gpu") != 0) {
        log_printf("parameter server: %zu parameters on the host (cpu); averaging and updates "
                   "shared by %d towers\n", tr->model.n_trainable, tr->n_towers);
        return;
    }
    for (int i = 0; i < tr->n_ranges; i++) {
        const param_range *r = &tr->ranges[i];
        const param_entry *p = NULL;
        for (int j = 0; j < tr->model.n_params && p == NULL; j++)
            if (tr->model.params[j].offset == r->lo && tr->model.params[j].trainable)
                p = &tr->model.params[j];
        log_printf("parameter server: %-24s %9zu elements on tower %d (device %d)\n",
                   p ? p->name : "?", r->hi - r->lo, r->owner, tr->job->trainer.towers[r->owner]);
    }
}

static int ps_setup(trainer_t *tr, tt_err *err)
{
    backend_t *be = tr->backends[0];
    size_t n = tr->model.n_floats ? tr->model.n_floats : 1;
    tr->shared_params = be->alloc(be, n * sizeof(float));
    tr->shared_grads = be->alloc(be, n * sizeof(float));
    tr->ranges = calloc((size_t)tr->model.n_params + (size_t)tr->n_towers, sizeof(param_range));
    if (!tr->shared_params || !tr->shared_grads || !tr->ranges)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    /* the towers were initialised with the same values: take tower 0's */
    be->copy(be, tr->shared_params, tr->towers[0].params, tr->model.n_floats * sizeof(float));
    if (optimizer_create(&tr->job->optimizer, be, tr->model.n_trainable, &tr->shared_opt, err))
        return -1;
    return strcmp(tr->job->trainer.ps_device, "gpu") == 0 ? place_least_loaded(tr)
                                                           : place_even(tr);
}

typedef struct {
    trainer_t *tr;
    const batch_t *b;
} step_arg;

static void ps_tower_compute(const tower_context *ctx, void *p)
{
    step_arg *a = p;
    trainer_t *tr = a->tr;
    tower_t *tw = &tr->towers[ctx->index];
    /* read the parameters from the server */
    /* batchnorm statistics stay tower-local: only trainable parameters are read */
    tw->be->copy(tw->be, tw->params, tr->shared_params, tr->model.n_trainable * sizeof(float));
    trainer_tower_compute(tr, ctx->index, a->b);
}

/* The ranges this tower owns: average the towers' gradients there, update. */
static void ps_tower_update(const tower_context *ctx, void *p)
{
    step_arg *a = p;
    trainer_t *tr = a->tr;
    int n = tr->n_towers;
    float *grads[TT_MAX_TOWERS];
    for (int t = 0; t < n; t++)
        grads[t] = tr->towers[t].grads;
    for (int r = 0; r < tr->n_ranges; r++) {
        const param_range *pr = &tr->ranges[r];
        if (pr->owner != ctx->index)
            continue;
        allreduce_sum_range(tr->shared_grads, grads, n, pr->lo, pr->hi, (float)n);
        optimizer_apply_range(&tr->shared_opt, tr->towers[ctx->index].be, tr->shared_params,
                              tr->shared_grads, pr->lo, pr->hi, tr->global_step + 1);
    }
}

static int ps_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    step_arg a = {tr, b};
    tower_team_run(tr->team, true, ps_tower_compute, &a);
    tower_team_run(tr->team, true, ps_tower_update, &a);
    optimizer_mark_stepped(&tr->shared_opt);
    trainer_collect_step(tr, b);
    return 0;
}

const trainer_ops trainer_sync_parameter_server_ops = {
    .name = "sync_parameter_server",
    .setup = ps_setup,
    .run_step = ps_run_step,
    .describe = ps_describe,
};

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

#include "comm/allreduce.h"
#include "train/shared_params.h"
#include "train/trainer.h"
#include "util/log.h"

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

static int ps_setup(trainer_t *tr, tt_err *err)
{
    backend_t *be = tr->backends[0];
    ps_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    tr->impl = st;
    size_t n = tr->model.n_trainable ? tr->model.n_trainable : 1;
    st->grads = be->alloc(be, n * sizeof(float));
    st->ranges = calloc((size_t)tr->model.n_params + (size_t)tr->n_towers, sizeof(param_range));
    if (st->grads == NULL || st->ranges == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    if (shared_params_create(tr, &st->sp, err) != 0)
        return -1;
    if (strcmp(tr->job->trainer.ps_device, "gpu") == 0)
        place_least_loaded(tr, st);
    else
        place_even(tr, st);
    return 0;
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
    shared_params_read(a->tr, &st->sp, ctx->index); /* from the server */
    trainer_tower_compute(a->tr, ctx->index, a->b);
    st->finite[ctx->index] =
        trainer_grads_finite(a->tr, tw->be, tw->grads, a->tr->model.n_trainable);
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
        allreduce_sum_range(st->grads, grads, n, pr->lo, pr->hi, (float)n);
        optimizer_apply_range(&st->sp.opt, tr->towers[ctx->index].be, st->sp.params, st->grads,
                              pr->lo, pr->hi, tr->global_step + 1);
    }
}

static int ps_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    ps_state *st = tr->impl;
    step_arg a = {tr, b};
    tower_team_run(tr->team, true, ps_tower_compute, &a);
    /* the average holds an Inf or a NaN when any tower's gradients do */
    bool finite = true;
    for (int t = 0; t < tr->n_towers; t++)
        finite = finite && st->finite[t];
    if (trainer_loss_scale_step(tr, finite)) {
        tower_team_run(tr->team, true, ps_tower_update, &a);
        optimizer_mark_stepped(&st->sp.opt);
    }
    trainer_collect_step(tr, b);
    return 0;
}

static optimizer_t *ps_optimizer(trainer_t *tr, int i)
{
    ps_state *st = tr->impl;
    return i == 0 ? &st->sp.opt : NULL;
}

static void ps_publish(trainer_t *tr)
{
    ps_state *st = tr->impl;
    shared_params_read(tr, &st->sp, 0);
}

static void ps_reload(trainer_t *tr)
{
    ps_state *st = tr->impl;
    shared_params_reload(tr, &st->sp);
}

static void ps_destroy(trainer_t *tr)
{
    ps_state *st = tr->impl;
    shared_params_free(tr, &st->sp);
    tr->backends[0]->free(tr->backends[0], st->grads);
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

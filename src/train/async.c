/* async.c - tensorpack's AsyncMultiGPUTrainer (Hogwild-style): each tower
 * reads the shared parameters, computes the gradient of its slice, and applies
 * it (scaled by 1/nr_tower when scale_gradient) as soon as it has it, without
 * waiting for the other towers. Parameters may be read while another tower
 * updates them, by design; the updates themselves, the optimizer state and the
 * update counter are serialised by one lock. Not deterministic. */
#include <stdlib.h>

#include "train/trainer.h"

static int async_setup(trainer_t *tr, tt_err *err)
{
    backend_t *be = tr->backends[0];
    size_t n = tr->model.n_floats ? tr->model.n_floats : 1;
    tr->shared_params = be->alloc(be, n * sizeof(float));
    if (tr->shared_params == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    be->copy(be, tr->shared_params, tr->towers[0].params, tr->model.n_floats * sizeof(float));
    return optimizer_create(&tr->job->optimizer, be, tr->model.n_trainable, &tr->shared_opt,
                            err);
}

static void async_tower(const tower_context *ctx, void *p)
{
    trainer_t *tr = ((void **)p)[0];
    const batch_t *b = ((void **)p)[1];
    tower_t *tw = &tr->towers[ctx->index];
    size_t bytes = tr->model.n_trainable * sizeof(float); /* batchnorm stats stay local */

    pthread_mutex_lock(&tr->update_lock);
    tw->be->copy(tw->be, tw->params, tr->shared_params, bytes);
    pthread_mutex_unlock(&tr->update_lock);

    trainer_tower_compute(tr, ctx->index, b);
    if (tr->job->trainer.scale_gradient && tr->n_towers > 1)
        tw->be->scale(tw->be, tr->model.n_trainable, 1.0f / (float)tr->n_towers, tw->grads);

    pthread_mutex_lock(&tr->update_lock);
    tr->updates++;
    optimizer_apply_range(&tr->shared_opt, tw->be, tr->shared_params, tw->grads, 0,
                          tr->model.n_trainable, tr->updates);
    optimizer_mark_stepped(&tr->shared_opt);
    pthread_mutex_unlock(&tr->update_lock);
}

static int async_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    void *arg[2] = {tr, (void *)b};
    tower_team_run(tr->team, true, async_tower, arg);
    trainer_collect_step(tr, b);
    return 0;
}

const trainer_ops trainer_async_ops = {
    .name = "async",
    .setup = async_setup,
    .run_step = async_run_step,
};

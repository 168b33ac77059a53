/* async.c - tensorpack's AsyncMultiGPUTrainer: each tower reads the shared
 * parameters, computes the gradient of its slice, and applies it (scaled by
 * 1/nr_tower when scale_gradient) as soon as it has it, without waiting for
 * the other towers. A tower's copy of the parameters is taken under the same
 * lock as the updates, so it is always one consistent state, but possibly
 * some updates old by the time its gradient is applied (stale gradients, as
 * in tensorpack). The order in which towers take the lock varies from run to
 * run: not deterministic.
 *
 * GPU towers: the shared copy is in host memory (shared_params.h); a tower
 * uploads it, computes, downloads its gradient and applies it on the host. */
#include <pthread.h>
#include <stdlib.h>

#include "train/shared_params.h"
#include "train/trainer.h"
#include "util/trace.h"

typedef struct {
    shared_params sp;
    pthread_mutex_t lock; /* the shared copy, its optimizer and tr->updates */
} async_state;

static int async_setup(trainer_t *tr, tt_err *err)
{
    async_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    pthread_mutex_init(&st->lock, NULL);
    tr->impl = st;
    return shared_params_create(tr, &st->sp, err);
}

typedef struct {
    trainer_t *tr;
    const batch_t *b;
} step_arg;

static void async_tower(const tower_context *ctx, void *p)
{
    step_arg *a = p;
    trainer_t *tr = a->tr;
    async_state *st = tr->impl;
    tower_t *tw = &tr->towers[ctx->index];

    pthread_mutex_lock(&st->lock);
    shared_params_read(tr, &st->sp, ctx->index);
    pthread_mutex_unlock(&st->lock);

    trainer_tower_compute(tr, ctx->index, a->b);
    if (tr->job->trainer.scale_gradient && tr->n_towers > 1)
        tw->be->scale(tw->be, tr->model.n_trainable, 1.0f / (float)tr->n_towers, tw->grads);

    bool finite = trainer_grads_finite(tr, tw->be, tw->grads, tr->model.n_trainable);
    /* where the update runs: this tower's backend, or the host's for GPU towers */
    float *grads = shared_params_grads(tr, &st->sp, ctx->index);
    backend_t *be = st->sp.server != NULL ? st->sp.server : tw->be;
    pthread_mutex_lock(&st->lock); /* the loss scale too is shared */
    if (trainer_loss_scale_step(tr, finite)) {
        tr->updates++; /* one a tower: Adam's step count */
        int64_t t0 = trace_begin();
        optimizer_apply_range(&st->sp.opt, be, st->sp.params, grads, 0, tr->model.n_trainable,
                              tr->updates);
        trace_end(TRACE_ROW_NONE, t0, TRACE_CAT_OPTIMIZER, "optimizer", -1);
        optimizer_mark_stepped(&st->sp.opt);
    }
    pthread_mutex_unlock(&st->lock);
}

static int async_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    step_arg a = {tr, b};
    tower_threads_run(tr->threads, async_tower, &a);
    trainer_collect_step(tr, b);
    return 0;
}

static optimizer_t *async_optimizer(trainer_t *tr, int i)
{
    async_state *st = tr->impl;
    return i == 0 ? &st->sp.opt : NULL;
}

static void async_publish(trainer_t *tr)
{
    async_state *st = tr->impl;
    shared_params_read(tr, &st->sp, 0);
}

static void async_reload(trainer_t *tr)
{
    async_state *st = tr->impl;
    shared_params_reload(tr, &st->sp);
    if (tr->updates < 0) /* a checkpoint from before the count: one update a tower a step */
        tr->updates = tr->global_step * tr->n_towers;
}

static void async_destroy(trainer_t *tr)
{
    async_state *st = tr->impl;
    shared_params_free(tr, &st->sp);
    pthread_mutex_destroy(&st->lock);
    free(st);
    tr->impl = NULL;
}

const trainer_ops trainer_async_ops = {
    .name = "async",
    .setup = async_setup,
    .run_step = async_run_step,
    .optimizer = async_optimizer,
    .publish = async_publish,
    .reload = async_reload,
    .destroy = async_destroy,
};

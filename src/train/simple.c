/* simple.c - tensorpack's SimpleTrainer: one tower, the whole batch, one
 * optimizer. */
#include <stdlib.h>

#include "train/trainer.h"

static int simple_setup(trainer_t *tr, tt_err *err)
{
    optimizer_t *opt = calloc(1, sizeof(*opt));
    if (opt == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    tr->impl = opt;
    return trainer_create_optimizers(tr, tr->backends, 1, opt, err);
}

static int simple_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    tower_t *t = &tr->towers[0];
    trainer_tower_compute(tr, 0, b);
    bool finite = trainer_grads_finite(tr, t->be, t->grads, tr->model.n_trainable);
    if (trainer_loss_scale_step(tr, finite))
        optimizer_apply(tr->impl, t->params, t->grads, tr->global_step + 1);
    trainer_collect_step(tr, b);
    return 0;
}

static optimizer_t *simple_optimizer(trainer_t *tr, int i)
{
    return i == 0 ? tr->impl : NULL;
}

static void simple_destroy(trainer_t *tr)
{
    optimizer_free(tr->impl);
    free(tr->impl);
    tr->impl = NULL;
}

const trainer_ops trainer_simple_ops = {
    .name = "simple",
    .setup = simple_setup,
    .run_step = simple_run_step,
    .optimizer = simple_optimizer,
    .destroy = simple_destroy,
};

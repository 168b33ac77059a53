/* simple.c - tensorpack's SimpleTrainer: one tower, the whole batch. */
#include "train/trainer.h"

static int simple_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    tower_t *t = &tr->towers[0];
    trainer_tower_compute(tr, 0, b);
    optimizer_apply(&tr->opts[0], t->params, t->grads, tr->global_step + 1);
    trainer_collect_step(tr, b);
    return 0;
}

const trainer_ops trainer_simple_ops = {
    .name = "simple",
    .run_step = simple_run_step,
};

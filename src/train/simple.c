/* simple.c - tensorpack's SimpleTrainer: one tower, the whole batch. */
#include "train/trainer.h"

static int simple_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    tower_t *t = &tr->towers[0];
    tower_load_batch(t, b->n, b->x, b->y);
    /* dropout varies with the step; the seed mixes in the job's */
    tower_step(t, b->n, true, true, tr->job->seed ^ (uint64_t)tr->global_step * 0x9e3779b97f4a7c15ULL);
    optimizer_apply(&tr->opts[0], t->params, t->grads, tr->global_step + 1);
    tr->step_loss = t->loss_sum / b->n;
    tr->step_accuracy = (double)t->correct / b->n;
    return 0;
}

const trainer_ops trainer_simple_ops = {
    .name = "simple",
    .run_step = simple_run_step,
};

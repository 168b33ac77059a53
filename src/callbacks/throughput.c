/* throughput.c - samples per second of the epoch's training steps, over the
 * global batch (all towers), so nobody misreads per-iteration speed; and the
 * epoch's wall time in seconds (epoch_time). */
#include "train/trainer.h"

static int throughput_trigger(callback_t *cb, trainer_t *tr, tt_err *err)
{
    int64_t steps = tr->local_step - tr->epoch_first_step;
    if (tr->epoch_seconds <= 0.0 || steps <= 0)
        return 0;
    double samples = (double)steps * tr->global_batch;
    if (trainer_put_scalar(tr, "epoch_time", tr->epoch_seconds, err) != 0)
        return -1;
    return trainer_put_scalar(tr, "throughput", samples / tr->epoch_seconds, err);
}

const callback_ops callback_throughput_ops = {
    .type = "throughput",
    .trigger = throughput_trigger,
};

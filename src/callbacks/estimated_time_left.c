/* estimated_time_left.c - after each epoch, the time the remaining epochs
 * should take at the mean speed of the epochs so far. */
#include <stdlib.h>

#include "train/trainer.h"
#include "util/log.h"

typedef struct {
    double seconds;
    int epochs;
} eta_state;

static int eta_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    cb->state = calloc(1, sizeof(eta_state));
    return cb->state ? 0 : err_set(err, TT_ERR_RUNTIME, "out of memory");
}

static int eta_after_epoch(callback_t *cb, trainer_t *tr, tt_err *err)
{
    eta_state *s = cb->state;
    s->seconds += tr->epoch_seconds;
    s->epochs++;
    long left = (long)((double)(tr->max_epoch - tr->epoch_num) * s->seconds / s->epochs + 0.5);
    if (tr->max_epoch > tr->epoch_num)
        log_printf("estimated time left: %ld:%02ld:%02ld\n", left / 3600, left / 60 % 60,
                   left % 60);
    return 0;
}

static void eta_destroy(callback_t *cb)
{
    free(cb->state);
}

const callback_ops callback_estimated_time_left_ops = {
    .type = "estimated_time_left",
    .create = eta_create,
    .after_epoch = eta_after_epoch,
    .destroy = eta_destroy,
};

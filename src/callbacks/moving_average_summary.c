/* moving_average_summary.c - tensorpack's MovingAverageSummary: an exponential
 * moving average (decay 0.95 by default) of the per-step training scalars,
 * published as train_loss and train_accuracy. The average starts at the first
 * value rather than at zero, so early epochs are not biased low. */
#include <stdio.h>
#include <stdlib.h>

#include <libconfig.h>

#include "train/trainer.h"

typedef struct {
    double decay;
    double loss, accuracy;
    bool started;
} ema_state;

static int ema_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    ema_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    s->decay = 0.95;
    if (cb->cfg->settings != NULL)
        config_setting_lookup_float((const config_setting_t *)cb->cfg->settings, "decay",
                                    &s->decay);
    cb->state = s;
    return 0;
}

static int ema_after_step(callback_t *cb, trainer_t *tr, tt_err *err)
{
    ema_state *s = cb->state;
    if (!s->started) {
        s->loss = tr->step_loss;
        s->accuracy = tr->step_accuracy;
        s->started = true;
    } else {
        s->loss = s->decay * s->loss + (1.0 - s->decay) * tr->step_loss;
        s->accuracy = s->decay * s->accuracy + (1.0 - s->decay) * tr->step_accuracy;
    }
    if (trainer_put_scalar(tr, "train_loss", s->loss, err) != 0 ||
        trainer_put_scalar(tr, "train_accuracy", s->accuracy, err) != 0)
        return -1;
    return 0;
}

/* "<started> <loss> <accuracy>": the average goes on across a resume */
static int ema_state_save(callback_t *cb, char *out, size_t len)
{
    const ema_state *s = cb->state;
    return (size_t)snprintf(out, len, "%d %.17g %.17g", s->started, s->loss, s->accuracy) < len
               ? 0
               : -1;
}

static int ema_state_load(callback_t *cb, trainer_t *tr, const char *text, tt_err *err)
{
    ema_state *s = cb->state;
    int started;
    if (sscanf(text, "%d %lf %lf", &started, &s->loss, &s->accuracy) != 3)
        return err_set(err, TT_ERR_USAGE, "moving_average_summary: the checkpoint's state '%s' "
                       "does not read", text);
    s->started = started != 0;
    return 0;
}

static void ema_destroy(callback_t *cb)
{
    free(cb->state);
}

const callback_ops callback_moving_average_summary_ops = {
    .type = "moving_average_summary",
    .create = ema_create,
    .after_step = ema_after_step,
    .destroy = ema_destroy,
    .state_save = ema_state_save,
    .state_load = ema_state_load,
};

/* scheduled_hyperparam.c - tensorpack's ScheduledHyperParamSetter for the
 * learning rate. schedule = ( (ep, v), ... ): v is set after epoch ep completes
 * (ep = 0: before the first epoch); with interp = "linear" the value between
 * two points is interpolated; a point (ep, v, "cosine") is reached from the
 * previous one by a half cosine whatever interp says; with step_based the points are global steps and
 * the value is updated after every step. The value at any point is a function
 * of the point alone, so a resumed run starts with the value the schedule
 * gives for its starting point. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libconfig.h>

#include "train/trainer.h"
#include "util/log.h"

typedef struct {
    double *at, *value; /* points, non-decreasing */
    bool *cosine;       /* point i is reached from point i-1 by a half cosine */
    int n;
    bool linear, step_based;
} schedule_state;

static int schedule_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    schedule_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    cb->state = s;
    const config_setting_t *set = cb->cfg->settings;
    const config_setting_t *list = set ? config_setting_get_member(set, "schedule") : NULL;
    const char *interp = "none";
    int step_based = 0;
    if (set != NULL) {
        config_setting_lookup_string(set, "interp", &interp);
        config_setting_lookup_bool(set, "step_based", &step_based);
    }
    s->linear = strcmp(interp, "linear") == 0;
    s->step_based = step_based != 0;
    s->n = list ? config_setting_length(list) : 0;
    if (s->n == 0)
        return err_set(err, TT_ERR_USAGE, "scheduled_hyperparam: empty schedule");
    s->at = calloc((size_t)s->n, sizeof(double));
    s->value = calloc((size_t)s->n, sizeof(double));
    s->cosine = calloc((size_t)s->n, sizeof(bool));
    if (s->at == NULL || s->value == NULL || s->cosine == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < s->n; i++) {
        const config_setting_t *pair = config_setting_get_elem(list, (unsigned)i);
        s->at[i] = config_setting_get_float_elem(pair, 0);
        s->value[i] = config_setting_get_float_elem(pair, 1);
        s->cosine[i] = config_setting_length(pair) == 3; /* the schema allows only "cosine" */
    }
    return 0;
}

/* The value for a point (completed epochs, or global steps), or false when
 * the schedule has not reached its first point yet. */
static bool schedule_value_at(const schedule_state *s, double point, double *v)
{
    if (point < s->at[0])
        return false;
    int last = 0;
    while (last + 1 < s->n && s->at[last + 1] <= point)
        last++;
    *v = s->value[last];
    if (last + 1 < s->n && s->at[last + 1] > s->at[last]) {
        double t = (point - s->at[last]) / (s->at[last + 1] - s->at[last]);
        double v0 = s->value[last], v1 = s->value[last + 1];
        if (s->cosine[last + 1]) /* v1 + (v0 - v1) (1 + cos(pi t)) / 2 */
            *v = v1 + (v0 - v1) * (1.0 + cos(M_PI * t)) / 2.0;
        else if (s->linear)
            *v = v0 + t * (v1 - v0);
    }
    return true;
}

static double schedule_point(const schedule_state *s, const trainer_t *tr)
{
    if (s->step_based)
        return (double)tr->global_step;
    /* completed epochs: at an epoch's end the running one counts */
    return (double)(tr->local_step >= tr->steps_per_epoch ? tr->epoch_num : tr->epoch_num - 1);
}

static void schedule_apply(const schedule_state *s, trainer_t *tr)
{
    double v;
    if (!schedule_value_at(s, schedule_point(s, tr), &v))
        return;
    float lr = (float)v;
    if (lr != trainer_get_learning_rate(tr)) {
        trainer_set_learning_rate(tr, lr);
        log_printf("scheduled_hyperparam: learning_rate = %g at %s %.0f\n", v,
                   s->step_based ? "step" : "epoch", schedule_point(s, tr));
    }
}

/* A fresh run starts at the schedule's value. A resume keeps the rate the
 * checkpoint had in effect when it has one: with every_k_epochs = 2 the run
 * that was never stopped still has epoch 2's value during epoch 3, not epoch
 * 3's (an older checkpoint: the value at the resumed point). */
static int schedule_before_train(callback_t *cb, trainer_t *tr, tt_err *err)
{
    if (!tr->learning_rate_restored)
        schedule_apply(cb->state, tr);
    return 0;
}

static int schedule_after_step(callback_t *cb, trainer_t *tr, tt_err *err)
{
    schedule_state *s = cb->state;
    if (s->step_based)
        schedule_apply(s, tr);
    return 0;
}

static int schedule_trigger(callback_t *cb, trainer_t *tr, tt_err *err)
{
    schedule_state *s = cb->state;
    if (!s->step_based)
        schedule_apply(s, tr);
    return 0;
}

static void schedule_destroy(callback_t *cb)
{
    schedule_state *s = cb->state;
    if (s != NULL) {
        free(s->at);
        free(s->value);
        free(s->cosine);
    }
    free(s);
}

const callback_ops callback_scheduled_hyperparam_ops = {
    .type = "scheduled_hyperparam",
    .create = schedule_create,
    .before_train = schedule_before_train,
    .after_step = schedule_after_step,
    .trigger = schedule_trigger,
    .destroy = schedule_destroy,
};

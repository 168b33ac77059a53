/* stat_saver.c - tensorpack's MinSaver / MaxSaver: when the monitored scalar
 * reaches a new minimum (maximum), the model is written to
 * min-<name>.safetensors (max-<name>.safetensors). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libconfig.h>

#include "train/trainer.h"
#include "util/log.h"

typedef struct {
    const char *monitor;
    bool is_max;
    double best;
} stat_saver_state;

static int stat_saver_create(callback_t *cb, bool is_max, tt_err *err)
{
    stat_saver_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    s->is_max = is_max;
    s->best = is_max ? -INFINITY : INFINITY;
    if (cb->cfg->settings != NULL)
        config_setting_lookup_string(cb->cfg->settings, "monitor", &s->monitor);
    cb->state = s;
    if (s->monitor == NULL)
        return err_set(err, TT_ERR_USAGE, "%s: missing monitor", cb->cfg->type);
    return 0;
}

static int min_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    return stat_saver_create(cb, false, err);
}

static int max_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    return stat_saver_create(cb, true, err);
}

/* Runs after the other triggers of the epoch, so the scalar is this epoch's. */
static int stat_saver_after_epoch(callback_t *cb, trainer_t *tr, tt_err *err)
{
    stat_saver_state *s = cb->state;
    const scalar_t *v = NULL;
    for (int i = 0; i < tr->n_scalars; i++)
        if (strcmp(tr->scalars[i].name, s->monitor) == 0)
            v = &tr->scalars[i];
    if (v == NULL)
        return 0; /* not reported this epoch */
    if (s->is_max ? !(v->value > s->best) : !(v->value < s->best))
        return 0;
    s->best = v->value;
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s-%s.safetensors", tr->job->logdir,
             s->is_max ? "max" : "min", s->monitor);
    if (trainer_save_checkpoint(tr, path, err) != 0)
        return -1;
    log_printf("%s: %s = %.6g, saved %s\n", cb->cfg->type, s->monitor, v->value, path);
    return 0;
}

static void stat_saver_destroy(callback_t *cb)
{
    free(cb->state);
}

const callback_ops callback_min_saver_ops = {
    .type = "min_saver",
    .create = min_create,
    .after_epoch = stat_saver_after_epoch,
    .destroy = stat_saver_destroy,
};

const callback_ops callback_max_saver_ops = {
    .type = "max_saver",
    .create = max_create,
    .after_epoch = stat_saver_after_epoch,
    .destroy = stat_saver_destroy,
};

/* early_stop.c - stops training cleanly (exit 0, monitors flushed, the
 * epoch's checkpoint written by model_saver as usual) when `monitor` has not
 * improved by more than min_delta for `patience` epochs, as Keras' and
 * Lightning's EarlyStopping. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <libconfig.h>

#include "callbacks/stat_history.h"
#include "util/log.h"

typedef struct {
    const char *monitor;
    bool is_max;
    int patience, waited;
    double min_delta, best;
} early_state;

static int early_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    early_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    cb->state = s;
    const config_setting_t *set = cb->cfg->settings;
    const char *mode = "min";
    s->patience = 3;
    if (set != NULL) {
        config_setting_lookup_string(set, "monitor", &s->monitor);
        config_setting_lookup_string(set, "mode", &mode);
        config_setting_lookup_int(set, "patience", &s->patience);
        config_setting_lookup_float(set, "min_delta", &s->min_delta);
    }
    s->is_max = strcmp(mode, "max") == 0;
    s->best = s->is_max ? -INFINITY : INFINITY;
    if (s->monitor == NULL)
        return err_set(err, TT_ERR_USAGE, "early_stop: missing monitor");
    return 0;
}

static int early_after_epoch(callback_t *cb, trainer_t *tr, tt_err *err)
{
    early_state *s = cb->state;
    double v;
    if (!stat_current(tr, s->monitor, &v))
        return 0;
    bool better = s->is_max ? v > s->best + s->min_delta : v < s->best - s->min_delta;
    if (better) {
        s->best = v;
        s->waited = 0;
        return 0;
    }
    if (++s->waited >= s->patience) {
        log_printf("early_stop: %s has not improved on %.6g for %d epochs; stopping after "
                   "epoch %lld\n", s->monitor, s->best, s->waited, (long long)tr->epoch_num);
        tr->stop_training = true;
    }
    return 0;
}

/* "<best> <waited>": a resumed run stops where this one would have */
static int early_state_save(callback_t *cb, char *out, size_t len)
{
    const early_state *s = cb->state;
    return (size_t)snprintf(out, len, "%.17g %d", s->best, s->waited) < len ? 0 : -1;
}

static int early_state_load(callback_t *cb, trainer_t *tr, const char *text, tt_err *err)
{
    early_state *s = cb->state;
    double best;
    int waited;
    if (sscanf(text, "%lf %d", &best, &waited) != 2 || waited < 0)
        return err_set(err, TT_ERR_USAGE, "early_stop: the checkpoint's state '%s' does not "
                       "read", text);
    s->best = best;
    s->waited = waited;
    return 0;
}

static void early_destroy(callback_t *cb)
{
    free(cb->state);
}

const callback_ops callback_early_stop_ops = {
    .type = "early_stop",
    .create = early_create,
    .after_epoch = early_after_epoch,
    .destroy = early_destroy,
    .state_save = early_state_save,
    .state_load = early_state_load,
};

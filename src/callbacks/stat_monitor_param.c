/* stat_monitor_param.c - tensorpack's StatMonitorParamSetter for the learning
 * rate: when `monitor` has not decreased (reverse: increased) by more than
 * `threshold` over the last `last_k` epochs, the learning rate is multiplied
 * by `factor`; then it waits last_k epochs before looking again. */
#include <stdlib.h>

#include <libconfig.h>

#include "callbacks/stat_history.h"
#include "util/log.h"

typedef struct {
    const char *monitor;
    double factor, threshold;
    int last_k, reverse;
    double *hist; /* one value per epoch seen */
    int n, cap;
    int last_change; /* index in hist of the last change, -1 */
} smp_state;

static int smp_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    smp_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    cb->state = s;
    s->factor = 0.1;
    s->last_k = 5;
    s->last_change = -1;
    const config_setting_t *set = cb->cfg->settings;
    if (set != NULL) {
        config_setting_lookup_string(set, "monitor", &s->monitor);
        config_setting_lookup_float(set, "factor", &s->factor);
        config_setting_lookup_float(set, "threshold", &s->threshold);
        config_setting_lookup_int(set, "last_k", &s->last_k);
        config_setting_lookup_bool(set, "reverse", &s->reverse);
    }
    if (s->monitor == NULL)
        return err_set(err, TT_ERR_USAGE, "stat_monitor_param: missing monitor");
    return 0;
}

static int smp_after_epoch(callback_t *cb, trainer_t *tr, tt_err *err)
{
    smp_state *s = cb->state;
    double v;
    if (!stat_current(tr, s->monitor, &v))
        return 0;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        double *h = realloc(s->hist, (size_t)cap * sizeof(double));
        if (h == NULL)
            return err_set(err, TT_ERR_RUNTIME, "out of memory");
        s->hist = h;
        s->cap = cap;
    }
    s->hist[s->n++] = v;
    /* tensorpack: the first of the last k+1 values against the best of the
     * k after it */
    if (s->n < s->last_k + 1 || (s->last_change >= 0 && s->n - 1 < s->last_change + s->last_k))
        return 0;
    double first = s->hist[s->n - s->last_k - 1];
    for (int i = s->n - s->last_k; i < s->n; i++) {
        if (!s->reverse && s->hist[i] < first - s->threshold)
            return 0;
        if (s->reverse && s->hist[i] > first + s->threshold)
            return 0;
    }
    float lr = trainer_get_learning_rate(tr);
    float next = (float)(lr * s->factor);
    trainer_set_learning_rate(tr, next);
    s->last_change = s->n - 1;
    log_printf("stat_monitor_param: %s stalled for %d epochs; learning_rate %g -> %g\n",
               s->monitor, s->last_k, (double)lr, (double)next);
    return 0;
}

static void smp_destroy(callback_t *cb)
{
    smp_state *s = cb->state;
    if (s != NULL)
        free(s->hist);
    free(s);
}

const callback_ops callback_stat_monitor_param_ops = {
    .type = "stat_monitor_param",
    .create = smp_create,
    .after_epoch = smp_after_epoch,
    .destroy = smp_destroy,
};

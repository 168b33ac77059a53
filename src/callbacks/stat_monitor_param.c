/* stat_monitor_param.c - tensorpack's StatMonitorParamSetter for the learning
 * rate: when `monitor` has not decreased (reverse: increased) by more than
 * `threshold` over the last `last_k` epochs, the learning rate is multiplied
 * by `factor`; then it waits last_k epochs before looking again. */
#include <math.h>
#include <stdio.h>
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

/* "<n> <last_change> <k> <v>...": the epochs seen, the last change, and the
 * last k = min(n, last_k + 1) values, all the rule ever reads */
static int smp_state_save(callback_t *cb, char *out, size_t len)
{
    const smp_state *s = cb->state;
    int k = s->n < s->last_k + 1 ? s->n : s->last_k + 1;
    size_t used = (size_t)snprintf(out, len, "%d %d %d", s->n, s->last_change, k);
    for (int i = s->n - k; i < s->n && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, " %.17g", s->hist[i]);
    return used < len ? 0 : -1;
}

static int smp_state_load(callback_t *cb, trainer_t *tr, const char *text, tt_err *err)
{
    smp_state *s = cb->state;
    int n, last_change, k, used;
    if (sscanf(text, "%d %d %d%n", &n, &last_change, &k, &used) != 3 || n < 0 || k < 0 ||
        k > n || last_change >= n)
        goto bad;
    double *h = realloc(s->hist, ((size_t)n + 1) * sizeof(double));
    if (h == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    s->hist = h;
    s->cap = n + 1;
    for (int i = 0; i < n - k; i++)
        h[i] = NAN; /* never read: the rule looks back last_k + 1 values */
    const char *p = text + used;
    for (int i = n - k; i < n; i++) {
        char *end;
        h[i] = strtod(p, &end);
        if (end == p)
            goto bad;
        p = end;
    }
    s->n = n;
    s->last_change = last_change;
    return 0;
bad:
    return err_set(err, TT_ERR_USAGE, "stat_monitor_param: the checkpoint's state '%.60s' does "
                   "not read", text);
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
    .state_save = smp_state_save,
    .state_load = smp_state_load,
};

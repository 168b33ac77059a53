/* progress_bar.c - a live bar with rate and ETA on a terminal; one plain line per
 * epoch otherwise (log files and CI logs stay readable). */
#include <stdlib.h>

#include "train/trainer.h"
#include "util/clock.h"
#include "util/log.h"

typedef struct {
    bool tty;
    double last_draw;
} bar_state;

static int bar_create(callback_t *cb, trainer_t *tr, tt_err *err)
{
    bar_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    s->tty = log_stdout_is_tty();
    cb->state = s;
    return 0;
}

static void format_duration(double seconds, char *out, size_t len)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(out, len, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(out, len, "%02ld:%02ld", s / 60, s % 60);
}

static int bar_after_step(callback_t *cb, trainer_t *tr, tt_err *err)
{
    bar_state *s = cb->state;
    if (!s->tty)
        return 0;
    double now = clock_s();
    bool last = tr->local_step == tr->steps_per_epoch;
    if (!last && now - s->last_draw < 0.1)
        return 0;
    s->last_draw = now;
    double frac = (double)tr->local_step / (double)tr->steps_per_epoch;
    double rate = tr->epoch_seconds > 0
                      ? (tr->local_step - tr->epoch_first_step) / tr->epoch_seconds
                      : 0.0;
    char eta[32];
    format_duration(rate > 0 ? (tr->steps_per_epoch - tr->local_step) / rate : 0.0, eta,
                    sizeof(eta));
    char bar[31];
    int filled = (int)(frac * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[30] = '\0';
    log_tty("\r%3d%% [%s] %lld/%lld [%.1f it/s, %.0f samples/s, ETA %s] ", (int)(frac * 100),
            bar, (long long)tr->local_step, (long long)tr->steps_per_epoch, rate,
            rate * tr->global_batch, eta);
    return 0;
}

static int bar_after_epoch(callback_t *cb, trainer_t *tr, tt_err *err)
{
    bar_state *s = cb->state;
    if (s->tty)
        log_tty("\r\033[K");
    double rate = tr->epoch_seconds > 0
                      ? (tr->local_step - tr->epoch_first_step) / tr->epoch_seconds
                      : 0.0;
    char took[32];
    format_duration(tr->epoch_seconds, took, sizeof(took));
    log_printf("epoch %lld: %lld/%lld steps in %s (%.1f it/s, %.0f samples/s)\n",
               (long long)tr->epoch_num, (long long)tr->local_step,
               (long long)tr->steps_per_epoch, took, rate, rate * tr->global_batch);
    return 0;
}

static void bar_destroy(callback_t *cb)
{
    free(cb->state);
}

const callback_ops callback_progress_bar_ops = {
    .type = "progress_bar",
    .create = bar_create,
    .after_step = bar_after_step,
    .after_epoch = bar_after_epoch,
    .destroy = bar_destroy,
};

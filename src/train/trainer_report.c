/* trainer_report.c - what the callbacks and the tower step call back into
 * the loop with: trainer_put_scalar (a scalar to every monitor) and
 * trainer_stop_signal (set by the signal handler, read between steps). Kept apart from trainer.c, which
 * calls the callbacks and the tower step, so that no two files call each
 * other. */
#include "train/trainer.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "util/strutil.h"

volatile sig_atomic_t trainer_stop_signal;

int trainer_put_scalar(trainer_t *tr, const char *raw_name, double value, tt_err *err)
{
    char name[64];
    snprintf(name, sizeof(name), "%s", raw_name);
    str_clean_tag(name);
    int i;
    for (i = 0; i < tr->n_scalars; i++)
        if (strcmp(tr->scalars[i].name, name) == 0)
            break;
    if (i == tr->n_scalars) {
        if (tr->n_scalars == TRAINER_MAX_SCALARS)
            return err_set(err, TT_ERR_RUNTIME, "too many scalars (%d)", TRAINER_MAX_SCALARS);
        snprintf(tr->scalars[i].name, sizeof(tr->scalars[i].name), "%s", name);
        tr->n_scalars++;
    }
    tr->scalars[i].value = value;
    for (int m = 0; m < tr->n_monitors; m++) {
        monitor_t *mon = &tr->monitors[m];
        if (mon->ops->put_scalar && mon->ops->put_scalar(mon, tr, name, value, err) != 0)
            return -1;
    }
    return 0;
}

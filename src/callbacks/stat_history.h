/* stat_history.h - the value a scalar had at this epoch's end, for the
 * callbacks that watch a statistic (early_stop, stat_monitor_param). */
#ifndef TT_STAT_HISTORY_H
#define TT_STAT_HISTORY_H

#include <string.h>

#include "train/trainer.h"

/* True and *v when the scalar was reported this epoch. */
static inline bool stat_current(const trainer_t *tr, const char *name, double *v)
{
    for (int i = 0; i < tr->n_scalars; i++) {
        if (strcmp(tr->scalars[i].name, name) == 0) {
            *v = tr->scalars[i].value;
            return true;
        }
    }
    return false;
}

#endif

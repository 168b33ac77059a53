/* stat_history.h - the value a scalar had at this epoch's end, for the
 * callbacks that watch a statistic (early_stop, stat_monitor_param, min_saver
 * and max_saver). */
#ifndef TT_STAT_HISTORY_H
#define TT_STAT_HISTORY_H

#include <string.h>

#include "comm/dist.h"
#include "train/trainer.h"

/* True and *v when the scalar was reported this epoch: rank 0's under MPI,
 * told to every rank (collective: every rank calls it), so every rank
 * decides alike on a scalar that differs between ranks (throughput,
 * peak_memory_mb): one rank stopping or changing its rate alone would hang
 * the next all-reduce or part the replicas. */
static inline bool stat_current(const trainer_t *tr, const char *name, double *v)
{
    struct {
        double value;
        int found;
    } here = {0.0, 0};
    for (int i = 0; i < tr->n_scalars && !here.found; i++) {
        if (strcmp(tr->scalars[i].name, name) == 0) {
            here.value = tr->scalars[i].value;
            here.found = 1;
        }
    }
    if (tr->n_ranks > 1)
        dist_broadcast(&here, sizeof(here), 0);
    *v = here.value;
    return here.found;
}

#endif

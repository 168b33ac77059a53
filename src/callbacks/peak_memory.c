/* peak_memory.c - the peak resident set size of the process so far, in MiB,
 * as the scalar peak_memory_mb (the CPU backend's memory is host memory);
 * on device towers (GPU, sim) also each tower's device pool high-water mark
 * in MiB, as peak_device_memory_mb/<tower> (backend_device_ops.memory: the
 * most bytes the pool's blocks held at once). */
#include <stdio.h>
#include <sys/resource.h>

#include "train/trainer.h"

static int peak_trigger(callback_t *cb, trainer_t *tr, tt_err *err)
{
    (void)cb;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0 &&
        trainer_put_scalar(tr, "peak_memory_mb", (double)ru.ru_maxrss / 1024.0, err) != 0)
        return -1;
    for (int t = 0; t < tr->n_towers; t++) {
        backend_t *be = tr->backends[t];
        if (be->dev == NULL)
            continue;
        size_t reserved, in_use, peak;
        be->dev->memory(be, &reserved, &in_use, &peak);
        char name[64];
        snprintf(name, sizeof(name), "peak_device_memory_mb/%d", t);
        if (trainer_put_scalar(tr, name, (double)peak / (1024.0 * 1024.0), err) != 0)
            return -1;
    }
    return 0;
}

const callback_ops callback_peak_memory_ops = {
    .type = "peak_memory",
    .trigger = peak_trigger,
};

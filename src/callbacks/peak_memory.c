/* peak_memory.c - the peak resident set size of the process so far, in MiB,
 * as the scalar peak_memory_mb (the CPU backend's memory is host memory). */
#include <sys/resource.h>

#include "train/trainer.h"

static int peak_trigger(callback_t *cb, trainer_t *tr, tt_err *err)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return trainer_put_scalar(tr, "peak_memory_mb", (double)ru.ru_maxrss / 1024.0, err);
}

const callback_ops callback_peak_memory_ops = {
    .type = "peak_memory",
    .trigger = peak_trigger,
};

/* registry.c - callback types by name. Each type lives in its own file. */
#include <string.h>

#include "train/trainer.h"

extern const callback_ops callback_inference_runner_ops, callback_progress_bar_ops,
    callback_throughput_ops, callback_moving_average_summary_ops, callback_model_saver_ops,
    callback_min_saver_ops, callback_max_saver_ops;

static const callback_ops *const all_callbacks[] = {
    &callback_inference_runner_ops,
    &callback_progress_bar_ops,
    &callback_throughput_ops,
    &callback_moving_average_summary_ops,
    &callback_model_saver_ops,
    &callback_min_saver_ops,
    &callback_max_saver_ops,
};

const callback_ops *callback_ops_find(const char *type)
{
    for (size_t i = 0; i < sizeof(all_callbacks) / sizeof(all_callbacks[0]); i++)
        if (strcmp(all_callbacks[i]->type, type) == 0)
            return all_callbacks[i];
    return NULL;
}

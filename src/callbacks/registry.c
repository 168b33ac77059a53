/* registry.c - callback types by name. Each type lives in its own file. */
#include <string.h>

#include "train/trainer.h"

extern const callback_ops callback_inference_runner_ops, callback_progress_bar_ops,
    callback_throughput_ops, callback_moving_average_summary_ops, callback_model_saver_ops,
    callback_min_saver_ops, callback_max_saver_ops, callback_scheduled_hyperparam_ops,
    callback_early_stop_ops, callback_stat_monitor_param_ops, callback_estimated_time_left_ops,
    callback_peak_memory_ops, callback_timeline_ops, callback_gpu_utilization_ops;

static const callback_ops *const all_callbacks[] = {
    &callback_inference_runner_ops,
    &callback_progress_bar_ops,
    &callback_throughput_ops,
    &callback_moving_average_summary_ops,
    &callback_model_saver_ops,
    &callback_min_saver_ops,
    &callback_max_saver_ops,
    &callback_scheduled_hyperparam_ops,
    &callback_early_stop_ops,
    &callback_stat_monitor_param_ops,
    &callback_estimated_time_left_ops,
    &callback_peak_memory_ops,
    &callback_timeline_ops,
    &callback_gpu_utilization_ops,
};

const callback_ops *callback_ops_find(const char *type)
{
    for (size_t i = 0; i < sizeof(all_callbacks) / sizeof(all_callbacks[0]); i++)
        if (strcmp(all_callbacks[i]->type, type) == 0)
            return all_callbacks[i];
    return NULL;
}

/* registry.c - monitor types by name. Each type lives in its own file. */
#include <string.h>

#include "train/trainer.h"

extern const monitor_ops monitor_json_ops, monitor_scalar_printer_ops, monitor_events_ops;

static const monitor_ops *const all_monitors[] = {
    &monitor_json_ops,
    &monitor_scalar_printer_ops,
    &monitor_events_ops,
};

const monitor_ops *monitor_ops_find(const char *type)
{
    for (size_t i = 0; i < sizeof(all_monitors) / sizeof(all_monitors[0]); i++)
        if (strcmp(all_monitors[i]->type, type) == 0)
            return all_monitors[i];
    return NULL;
}

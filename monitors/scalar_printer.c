/* scalar_printer.c - prints the epoch's scalars, one per line, as tensorpack's
 * ScalarPrinter does; `whitelist` keeps only the names listed, `blacklist`
 * drops names. */
#include <stdlib.h>
#include <string.h>

#include <libconfig.h>

#include "train/trainer.h"
#include "util/log.h"

static bool list_has(const config_setting_t *list, const char *name)
{
    if (list == NULL)
        return false;
    for (int i = 0; i < config_setting_length(list); i++) {
        const char *s = config_setting_get_string_elem(list, i);
        if (s != NULL && strcmp(s, name) == 0)
            return true;
    }
    return false;
}

static int printer_epoch_end(monitor_t *mon, trainer_t *tr, const scalar_t *scalars, int n,
                             tt_err *err)
{
    const config_setting_t *set = mon->cfg->settings;
    const config_setting_t *white = set ? config_setting_get_member(set, "whitelist") : NULL;
    const config_setting_t *black = set ? config_setting_get_member(set, "blacklist") : NULL;
    bool use_white = white != NULL && config_setting_length(white) > 0;
    for (int i = 0; i < n; i++) {
        if (use_white && !list_has(white, scalars[i].name))
            continue;
        if (list_has(black, scalars[i].name))
            continue;
        log_printf("%s: %.6g\n", scalars[i].name, scalars[i].value);
    }
    return 0;
}

const monitor_ops monitor_scalar_printer_ops = {
    .type = "scalar_printer",
    .epoch_end = printer_epoch_end,
};

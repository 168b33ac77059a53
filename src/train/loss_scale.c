/* loss_scale.c - GradScaler's update rule (torch's _amp_update_scale_). */
#include "train/loss_scale.h"

#include <math.h>

void loss_scale_init(loss_scale *ls)
{
    ls->scale = LOSS_SCALE_INIT;
    ls->good_steps = 0;
}

bool loss_scale_update(loss_scale *ls, bool grads_finite)
{
    if (!grads_finite) {
        ls->scale *= 0.5f;
        ls->good_steps = 0;
        return false;
    }
    if (++ls->good_steps == LOSS_SCALE_GROWTH_INTERVAL) {
        float grown = ls->scale * 2.0f;
        if (isfinite(grown)) /* torch keeps the old scale rather than an infinite one */
            ls->scale = grown;
        ls->good_steps = 0;
    }
    return true;
}

/* loss_scale.h - dynamic loss scaling for fp16 training, as
 * torch.cuda.amp.GradScaler with its defaults.
 *
 * The gradient of the loss is multiplied by `scale` before backward, so that
 * small gradients do not flush to zero in fp16, and the gradients are divided
 * by it again before the update. A step whose gradients hold an Inf or a NaN
 * is skipped and the scale halved; after GROWTH_INTERVAL clean steps in a row
 * the scale doubles. Powers of two keep the scaling exact. */
#ifndef TT_LOSS_SCALE_H
#define TT_LOSS_SCALE_H

#include <stdbool.h>
#include <stdint.h>

#define LOSS_SCALE_INIT 65536.0f        /* 2^16 */
#define LOSS_SCALE_GROWTH_INTERVAL 2000

typedef struct {
    float scale;
    int64_t good_steps; /* clean steps since the scale last changed (torch's growth tracker) */
} loss_scale;

void loss_scale_init(loss_scale *ls);

/* After one step's gradients were checked: advances the scale and returns
 * whether the step's update is applied (false: skip it). */
bool loss_scale_update(loss_scale *ls, bool grads_finite);

#endif

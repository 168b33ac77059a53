/* optimizer.h - torch.optim.SGD (with momentum, nesterov) and torch.optim.Adam,
 * applied to a whole contiguous parameter block at once.
 *
 * Slots (momentum buffer; exp_avg and exp_avg_sq) are blocks with the same
 * layout as the gradients, so a parameter's slot lives at its offset, and
 * checkpoints name them optimizer.<param>.<slot> (towertrain(1), OUTPUT).
 */
#ifndef TT_OPTIMIZER_H
#define TT_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config/job.h"

#define OPT_MAX_SLOTS 2

typedef struct {
    optimizer_cfg cfg;   /* learning_rate may be changed by callbacks */
    backend_t *be;
    size_t count;        /* floats in the parameter (and gradient) block */
    float *slots[OPT_MAX_SLOTS]; /* device blocks */
    int n_slots;
    const char *slot_names[OPT_MAX_SLOTS]; /* "momentum" | "exp_avg", "exp_avg_sq" */
    bool has_state;      /* false until the first step (torch creates buffers lazily) */
} optimizer_t;

int optimizer_create(const optimizer_cfg *cfg, backend_t *be, size_t count, optimizer_t *opt,
                     tt_err *err);
void optimizer_free(optimizer_t *opt);

/* One update of params from grads. step is the number of this update, from 1
 * (Adam's bias correction: towertrain.cfg(5), OPTIMIZER: global_step + 1). */
void optimizer_apply(optimizer_t *opt, float *params, const float *grads, int64_t step);

/* The same update on elements [lo, hi) only, run on backend `be` (the calling
 * tower's: several towers may update disjoint ranges at once). Call
 * optimizer_mark_stepped once all ranges of a step are done. */
void optimizer_apply_range(optimizer_t *opt, backend_t *be, float *params, const float *grads,
                           size_t lo, size_t hi, int64_t step);
void optimizer_mark_stepped(optimizer_t *opt);

#endif

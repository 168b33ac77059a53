/* optimizer.h - torch.optim.SGD (with momentum, nesterov), torch.optim.Adam,
 * torch.optim.AdamW and LARS (timm.optim.Lars), applied to a whole contiguous
 * parameter block at once; weight_decay_exclude and clip_global_norm
 * (towertrain.cfg(5), OPTIMIZER).
 *
 * Slots (momentum buffer; exp_avg and exp_avg_sq) are blocks with the same
 * layout as the gradients, so a parameter's slot lives at its offset, and
 * checkpoints name them optimizer.<param>.<slot> (towertrain(1), OUTPUT).
 *
 * The block is cut into segments, each updated with one weight decay: with no
 * exclusions one segment, the whole block; with exclusions the runs of
 * parameters that are or are not excluded; for LARS one segment per parameter
 * (its trust ratio needs the parameter's norms).
 */
#ifndef TT_OPTIMIZER_H
#define TT_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config/job.h"

#define OPT_MAX_SLOTS 2

/* One parameter of the block, as the optimizer sees it. */
typedef struct {
    const char *name; /* PyTorch's state_dict key, matched by weight_decay_exclude */
    size_t offset, count;
} opt_param;

/* A run of the block updated with one weight decay. */
typedef struct {
    size_t lo, hi;
    bool decay; /* weight decay applies (and LARS adapts): not excluded */
    double w_sumsq, g_sumsq; /* LARS: the step's |w|^2 and |g|^2 (lars_norms) */
} opt_segment;

typedef struct {
    optimizer_cfg cfg;   /* learning_rate may be changed by callbacks */
    backend_t *be;
    size_t count;        /* floats in the parameter (and gradient) block */
    float *slots[OPT_MAX_SLOTS]; /* device blocks */
    int n_slots;
    const char *slot_names[OPT_MAX_SLOTS]; /* "momentum" | "exp_avg", "exp_avg_sq" */
    bool has_state;      /* false until the first step (torch creates buffers lazily) */
    opt_segment *segs;
    int n_segs;
    float *scratch;      /* LARS: one parameter's adapted gradient (device, count floats) */
    /* LARS: room for every segment's two ranges of one sumsq_each call */
    const float **norm_x;
    size_t *norm_n;
    double *norm_out;
    double grad_norm;    /* clip_global_norm: the norm before the last clipping */
    /* The per-step scalars in device memory (backend.h, backend_step_vars)
     * while a step is captured or replayed (src/train/step_graph.c): the
     * updates are then queued as the *_vars operations, which read them
     * when they run; NULL: by value (every other step). */
    const backend_step_vars *vars;
} optimizer_t;

/* params (n of them, in offset order, covering [0, count)) name the block's
 * parameters for weight_decay_exclude and LARS; n = 0: one anonymous
 * parameter, the whole block (then neither applies). */
int optimizer_create(const optimizer_cfg *cfg, backend_t *be, size_t count,
                     const opt_param *params, int n, optimizer_t *opt, tt_err *err);
void optimizer_free(optimizer_t *opt);

/* Whether an update needs the whole gradient block at once (clip_global_norm,
 * LARS): then the trainers call optimizer_apply, or optimizer_apply_range over
 * [0, count), never a part. */
bool optimizer_needs_whole(const optimizer_t *opt);

/* One update of params from grads. step is the number of this update, from 1
 * (Adam's bias correction: towertrain.cfg(5), OPTIMIZER: global_step + 1).
 * With clip_global_norm, grads are scaled in place first. */
void optimizer_apply(optimizer_t *opt, float *params, float *grads, int64_t step);

/* The same update on elements [lo, hi) only, run on backend `be` (the calling
 * tower's: several towers may update disjoint ranges at once). Call
 * optimizer_mark_stepped once all ranges of a step are done. A range over the
 * whole block is optimizer_apply's update on `be`. */
void optimizer_apply_range(optimizer_t *opt, backend_t *be, float *params, float *grads,
                           size_t lo, size_t hi, int64_t step);
void optimizer_mark_stepped(optimizer_t *opt);

/* The per-step scalars of update number `step` (from 1), as the by-value
 * updates compute them, for the block opt->vars points at: the learning
 * rate, first_step, AdamW's decay factor and Adam's bias corrections. */
void optimizer_step_vars(const optimizer_t *opt, int64_t step, backend_step_vars *v);

/* Whether a step's updates can be captured on be: no norm read back
 * (optimizer_needs_whole) and the backend has the *_vars operations. */
bool optimizer_capturable(const optimizer_t *opt, const backend_t *be);

#endif

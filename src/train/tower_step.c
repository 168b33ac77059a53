/* tower_step.c - one tower's part of a training step: its micro-batches
 * (gradient accumulation), the loss scale's unscaling and checks, and the
 * step's loss and accuracy gathered over towers and ranks (trainer.h). The
 * trainer types (simple.c, sync_replicated.c, ...) call these from their
 * run_step; the loop around them is trainer.c's. */
#include "train/trainer.h"

#include <math.h>

#include "comm/dist.h"
#include "train/device_towers.h"
#include "util/log.h"
#include "util/rng.h"
#include "util/trace.h"

/* Test hook: TT_FAULT_GRAD=<s> makes tower 0's loss gradient infinite at
 * global step s (from 1), in its first micro-batch only (accumulate), so that
 * its backward gives Inf and NaN gradients, as an fp16 overflow would: loss
 * scaling must skip exactly that update, whatever the other micro-batches.
 * Read once per trainer (trainer_create), not in the step. */
static bool fault_gradient_step(const trainer_t *tr, int t, int k)
{
    return t == 0 && k == 0 && tr->fault_grad_step == tr->global_step + 1;
}

uint64_t trainer_dropout_seed(const trainer_t *tr, int t, int64_t micro)
{
    /* dropout differs per step and per tower, and depends on nothing else:
     * the tower's global index, so K towers spread over ranks draw the masks
     * K towers in one process draw */
    uint64_t tower = (uint64_t)tr->rank * (uint64_t)tr->n_towers + (uint64_t)t;
    return rng_hash3(tr->job->seed, (uint64_t)micro, tower);
}

/* Micro-batch k of the step on tower t: the rank's batch is accumulate
 * micro-batches in order, each nr_tower slices (dataflow_set_parts).
 * unscale: divide the gradients by the loss scale here (not when the caller
 * unscales the accumulated sum once, or the all-reduce's packs do). */
static void tower_compute_micro(trainer_t *tr, int t, const batch_t *b, int k, bool unscale)
{
    tower_t *tw = &tr->towers[t];
    int parts = tr->job->trainer.accumulate;
    int n = b->n / (tr->n_towers * parts);
    size_t sample = shape3_size(tr->model.input), at = (size_t)(k * tr->n_towers + t) * n;
    if (tr->dev != NULL) /* staged: the copy runs beside the device's previous micro-batch */
        device_tower_load(tr, t, tr->global_step * parts + k, n, b->x + at * sample, b->y + at);
    else
        tower_load_batch(tw, n, b->x + at * sample, b->y + at);
    uint64_t seed = trainer_dropout_seed(tr, t, tr->global_step * parts + k);
    float scale = tw->loss_scale;
    if (fault_gradient_step(tr, t, k)) /* dlogits Inf/NaN; unscaled by 1/Inf = 0: NaN */
        tw->loss_scale = INFINITY;
    tower_step(tw, n, true, true, seed);
    if (tr->dev != NULL)
        device_tower_consumed(tr, t);
    /* a power of two: exact both ways. Towers that hand packs to the
     * device all-reduce during backward unscale each pack before it goes
     * (sync_replicated.c, tr->packs_unscale): the whole block here would
     * race with the all-reduce. Any other grad_ready hook (simple.c's) does
     * not unscale. */
    if (unscale && tw->loss_scale != 1.0f && !tr->packs_unscale)
        tw->be->scale(tw->be, tr->model.n_trainable, 1.0f / tw->loss_scale, tw->grads);
    tw->loss_scale = scale;
}

/* Every micro-batch of the step on tower t, and their gradients' mean. */
static void tower_compute_step(trainer_t *tr, int t, const batch_t *b)
{
    int parts = tr->job->trainer.accumulate;
    if (parts == 1) {
        tower_compute_micro(tr, t, b, 0, true);
        return;
    }
    /* accumulate: grads = the mean of the micro-batches' gradients, summed in
     * acc (micro-batches 0 .. K-2) and into the last one's, on the tower's
     * backend (device memory on a device tower). The grad-ready hook hears of
     * no layer until the sum is final: then of all of them, so the packs are
     * all-reduced once per update. fp16: the micro-batches' gradients stay
     * scaled; the sum is unscaled once, with the 1/K (or by the packs, which
     * unscale as they go). An Inf or NaN in any micro-batch stays in the sum,
     * whose finite check then skips the whole update. */
    tower_t *tw = &tr->towers[t];
    size_t count = tr->model.n_trainable;
    float *acc = tr->accum[t];
    bool (*ready)(void *, size_t) = tw->grad_ready;
    tw->grad_ready = NULL;
    double loss = 0.0;
    int correct = 0;
    for (int k = 0; k < parts; k++) {
        tower_compute_micro(tr, t, b, k, false);
        loss += tw->loss_sum;
        correct += tw->correct;
        if (k == 0)
            tw->be->copy(tw->be, acc, tw->grads, count * sizeof(float));
        else if (k < parts - 1)
            tw->be->axpy(tw->be, count, 1.0f, tw->grads, acc);
    }
    tw->be->axpy(tw->be, count, 1.0f, acc, tw->grads);
    float unscale = tr->packs_unscale ? 1.0f : tw->loss_scale;
    tw->be->scale(tw->be, count, 1.0f / ((float)parts * unscale), tw->grads);
    tw->loss_sum = loss;
    tw->correct = correct;
    tw->grad_ready = ready;
    if (ready != NULL)
        ready(tw->grad_ready_arg, 0);
}

void trainer_tower_compute(trainer_t *tr, int t, const batch_t *b)
{
    /* the timeline's tower row: the step's span wraps all its micro-batches,
     * and their layers and packs nest in it (on a device tower, all measured
     * on the device: device_spans.h) */
    trace_set_row(TRACE_ROW_TOWER + t);
    int64_t t0 = trace_begin();
    tower_compute_step(tr, t, b);
    trace_end(TRACE_ROW_TOWER + t, t0, TRACE_CAT_TRAINER, "step", tr->global_step + 1);
}

void trainer_enable_loss_scale(trainer_t *tr)
{
    tr->loss_scaling = true;
    loss_scale_init(&tr->loss_scale);
}

bool trainer_grads_finite(trainer_t *tr, backend_t *be, const float *g, size_t count)
{
    return !tr->loss_scaling || be->all_finite(be, count, g);
}

bool trainer_loss_scale_step(trainer_t *tr, bool grads_finite)
{
    if (!tr->loss_scaling)
        return true;
    float before = tr->loss_scale.scale;
    if (loss_scale_update(&tr->loss_scale, grads_finite))
        return true;
    log_printf("global step %lld: gradients hold Inf or NaN at loss scale %g: update skipped, "
               "loss scale now %g\n", (long long)tr->global_step + 1, (double)before,
               (double)tr->loss_scale.scale);
    return false;
}

void trainer_collect_step(trainer_t *tr, const batch_t *b)
{
    double sums[3] = {0.0, 0.0, (double)b->n}; /* loss, correct, samples */
    for (int t = 0; t < tr->n_towers; t++) {
        sums[0] += tr->towers[t].loss_sum;
        sums[1] += tr->towers[t].correct;
    }
    if (tr->n_ranks > 1) {
        dist_sum_doubles(sums, 3);
        /* a signal reaches one rank or all; every rank stops at the same step */
        tr->stop_agreed = dist_max_int((int)trainer_stop_signal);
        if (tr->stop_agreed != 0)
            trainer_stop_signal = tr->stop_agreed; /* the exit status says which */
    }
    tr->step_loss = sums[0] / sums[2];
    tr->step_accuracy = sums[1] / sums[2];
}

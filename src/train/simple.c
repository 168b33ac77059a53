/* simple.c - tensorpack's SimpleTrainer: one tower, the whole batch, one
 * optimizer.
 *
 * The update of a layer's parameters runs as soon as backward has made its
 * gradients final (the tower's grad_ready hook), while they are still in
 * cache, instead of one memory-bound pass over the whole block after
 * backward (8% of an MLP step on the CPU). Nothing later in the step reads
 * them: the forward is done and backward goes on with earlier layers. With
 * loss scaling (fp16) the update waits for the whole block, which may hold
 * an Inf that skips it. */
#include <stdlib.h>

#include "train/step_graph.h"
#include "train/trainer.h"
#include "util/trace.h"

typedef struct {
    optimizer_t opt;
    trainer_t *tr;
    bool per_layer;  /* this step updates layer by layer */
    size_t pending;  /* [0, pending) not updated yet in this step */
    step_graph *graph; /* a device tower's captured step (TT_CUDA_GRAPH=1), or NULL */
} simple_state;

static bool simple_layer_ready(void *arg, size_t lo)
{
    simple_state *st = arg;
    if (!st->per_layer || lo >= st->pending)
        return false;
    tower_t *t = &st->tr->towers[0];
    int64_t t0 = trace_begin();
    optimizer_apply_range(&st->opt, t->be, t->params, t->grads, lo, st->pending,
                          st->tr->updates + 1);
    trace_end(TRACE_ROW_NONE, t0, TRACE_CAT_OPTIMIZER, "optimizer", -1);
    st->pending = lo;
    return true;
}

static int simple_setup(trainer_t *tr, tt_err *err)
{
    simple_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    tr->impl = st;
    st->tr = tr;
    tr->towers[0].grad_ready = simple_layer_ready;
    tr->towers[0].grad_ready_arg = st;
    if (trainer_create_optimizers(tr, tr->backends, 1, &st->opt, err) != 0)
        return -1;
    st->graph = step_graph_create(tr, &st->opt, err);
    return st->graph == NULL && err->code != TT_OK ? -1 : 0;
}

static int simple_run_step(trainer_t *tr, const batch_t *b, tt_err *err)
{
    simple_state *st = tr->impl;
    tower_t *t = &tr->towers[0];
    /* on the CPU only: a GPU's one pass is cheap, a kernel per layer is not */
    st->per_layer = t->be->host_memory && !tr->loss_scaling && t->loss_scale == 1.0f &&
                    !optimizer_needs_whole(&st->opt);
    st->pending = tr->model.n_trainable;
    if (st->graph != NULL && step_graph_step(st->graph, b)) { /* captured or replayed */
        tr->updates++;
        trainer_collect_step(tr, b);
        return 0;
    }
    trainer_tower_compute(tr, 0, b);
    if (st->per_layer) {
        simple_layer_ready(st, 0); /* any range no layer reported (none so far) */
        optimizer_mark_stepped(&st->opt);
        tr->updates++;
    } else {
        bool finite = trainer_grads_finite(tr, t->be, t->grads, tr->model.n_trainable);
        if (trainer_loss_scale_step(tr, finite)) {
            /* without loss scaling nothing was queued since the step's span
             * ended (no finite check): the update's span continues it */
            int64_t t0 = tr->loss_scaling ? trace_begin() : trace_continue();
            optimizer_apply(&st->opt, t->params, t->grads, tr->updates + 1);
            trace_end(TRACE_ROW_NONE, t0, TRACE_CAT_OPTIMIZER, "optimizer", -1);
            tr->updates++;
        }
    }
    trainer_collect_step(tr, b);
    return 0;
}

static optimizer_t *simple_optimizer(trainer_t *tr, int i)
{
    simple_state *st = tr->impl;
    return i == 0 ? &st->opt : NULL;
}

static void simple_destroy(trainer_t *tr)
{
    simple_state *st = tr->impl;
    step_graph_free(st->graph);
    optimizer_free(&st->opt);
    free(st);
    tr->impl = NULL;
}

const trainer_ops trainer_simple_ops = {
    .name = "simple",
    .setup = simple_setup,
    .run_step = simple_run_step,
    .optimizer = simple_optimizer,
    .destroy = simple_destroy,
};

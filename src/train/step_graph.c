/* step_graph.c - tower 0's training step captured in a graph and replayed
 * (step_graph.h), on a device backend's capture entries (backend.h:
 * capture_begin, capture_end, graph_launch, graph_free).
 *
 * A step here: stage the batch (device_tower_load: the staging ring hands
 * one of its input buffers), fill the per-step scalars (one copy of a
 * backend_step_vars and each layer's dropout seed to the device, on the
 * compute queue), then launch the
 * graph captured for that input buffer, or capture one: tower_step and the
 * optimizer's update queued between capture_begin and capture_end, with
 * the optimizer reading its scalars from the block (optimizer_t.vars) and
 * dropout its seeds (tower_t.step_seeds).
 * Nothing captured has run, so a captured step is then launched; a capture
 * that fails logs one line, runs that step eagerly (the same work, not
 * captured) and leaves every later step eager. */
#include "train/step_graph.h"

#include <stdlib.h>
#include <string.h>

#include "train/device_towers.h"
#include "train/trainer.h"
#include "util/env.h"
#include "util/log.h"
#include "util/trace.h"

/* Eager steps before the first capture: the convolutions' algorithm
 * searches, cuDNN's plans and the first update (first_step) run there. */
#define STEP_GRAPH_WARMUP 2
/* Graphs kept, one per input buffer (the staging ring has 2 a tower). */
#define STEP_GRAPH_SLOTS 4

typedef struct {
    const float *x; /* the input buffer the graph reads */
    const int32_t *y;
    backend_graph *g;
} graph_slot;

struct step_graph {
    trainer_t *tr;
    optimizer_t *opt;
    backend_t *be;
    /* the step's block, device and pinned (the copy's source): a
     * backend_step_vars, then one dropout seed per layer */
    backend_step_vars *vars_dev, *vars_host;
    uint64_t *seeds_dev, *seeds_host;
    size_t block_bytes;
    backend_event *vars_copied;   /* after the last copy: vars_host may be written again */
    int warm;                     /* eager steps left before the first capture */
    bool given_up;                /* a capture failed: eager from then on */
    graph_slot slots[STEP_GRAPH_SLOTS];
    int n_slots;
    long long replayed, captured;
};

/* Why graphs cannot serve this job, or NULL. */
static const char *graph_refusal(const trainer_t *tr, const optimizer_t *opt)
{
    backend_t *be = tr->backends[0];
    if (tr->dev == NULL)
        return "the towers are on the CPU";
    if (be->dev->capture_begin == NULL || !optimizer_capturable(opt, be))
        return opt->cfg.type == OPT_LARS || opt->cfg.clip_global_norm > 0.0f
                   ? "LARS and clip_global_norm read norms back within the step"
                   : "this device cannot capture a step";
    if (tr->n_towers != 1 || tr->n_ranks != 1)
        return "more than one tower or rank (the all-reduce)";
    if (tr->loss_scaling)
        return "dynamic loss scaling (fp16) checks every step's gradients on the host";
    if (tr->job->trainer.accumulate > 1)
        return "trainer.accumulate stages several batches a step";
    return NULL;
}

/* TT_CUDA_GRAPH: 0 (or unset) or 1; -1 with err on anything else */
static int graph_wanted(tt_err *err)
{
    int v = env_bit("TT_CUDA_GRAPH");
    if (v != ENV_OTHER)
        return v == 1;
    return err_set(err, TT_ERR_USAGE,
                   "TT_CUDA_GRAPH=%.40s: use 1 (capture the step) or 0 (eager)",
                   getenv("TT_CUDA_GRAPH"));
}

step_graph *step_graph_create(trainer_t *tr, optimizer_t *opt, tt_err *err)
{
    int wanted = graph_wanted(err);
    if (wanted <= 0)
        return NULL;
    const char *why = graph_refusal(tr, opt);
    if (why != NULL) {
        log_printf("cuda graph: off, eager steps: %s (TT_CUDA_GRAPH=1)\n", why);
        return NULL;
    }
    backend_t *be = tr->backends[0];
    step_graph *sg = calloc(1, sizeof(*sg));
    if (sg == NULL) {
        err_set(err, TT_ERR_RUNTIME, "out of memory");
        return NULL;
    }
    *sg = (step_graph){.tr = tr, .opt = opt, .be = be, .warm = STEP_GRAPH_WARMUP};
    /* 32 bytes: the seeds after it stay 8-byte aligned */
    sg->block_bytes = sizeof(backend_step_vars) + (size_t)tr->model.n_layers * sizeof(uint64_t);
    sg->vars_dev = be->alloc(be, sg->block_bytes);
    sg->vars_host = be->dev->host_alloc(be, sg->block_bytes, err);
    if (sg->vars_dev != NULL && sg->vars_host != NULL) {
        sg->seeds_dev = (uint64_t *)(sg->vars_dev + 1);
        sg->seeds_host = (uint64_t *)(sg->vars_host + 1);
    }
    if (sg->vars_host != NULL)
        sg->vars_copied = be->dev->event_create(be, false, err);
    if (sg->vars_dev == NULL || sg->vars_copied == NULL) {
        if (sg->vars_dev == NULL && err->code == TT_OK)
            err_set(err, TT_ERR_RUNTIME, "out of device memory (the step's scalars)");
        step_graph_free(sg);
        return NULL;
    }
    log_printf("cuda graph: the step is captured after %d eager steps, one graph per input "
               "buffer, and replayed (TT_CUDA_GRAPH=1)\n", STEP_GRAPH_WARMUP);
    return sg;
}

/* The step's dropout seed, tower 0's (one micro-batch: graph_refusal) */
static uint64_t step_seed(const trainer_t *tr)
{
    return trainer_dropout_seed(tr, 0, tr->global_step);
}

/* The step's block to the device, on the compute queue before the step:
 * the host writes vars_host once the last copy from it is done. */
static int fill_vars(step_graph *sg, tt_err *err)
{
    backend_t *be = sg->be;
    backend_queue *q = be->dev->queue(be);
    if (backend_device_wait_event(be, sg->vars_copied, "step scalars", err) != 0)
        return -1;
    optimizer_step_vars(sg->opt, sg->tr->updates + 1, sg->vars_host);
    uint64_t seed = step_seed(sg->tr);
    for (int i = 0; i < sg->tr->model.n_layers; i++)
        sg->seeds_host[i] = tower_layer_seed(seed, i);
    if (be->dev->copy_h2d_async(be, sg->vars_dev, sg->vars_host, sg->block_bytes, q, err) != 0)
        return -1;
    return be->dev->event_record(be, sg->vars_copied, q, err);
}

/* The step's work on tower 0, as simple.c queues it on a device (eager or
 * being captured): forward, loss, backward, update; the optimizer and
 * dropout read the block. */
static void queue_step(step_graph *sg, int n)
{
    trainer_t *tr = sg->tr;
    tower_t *tw = &tr->towers[0];
    sg->opt->vars = sg->vars_dev;
    tw->step_seeds = sg->seeds_dev;
    tower_step(tw, n, true, true, step_seed(tr));
    optimizer_apply(sg->opt, tw->params, tw->grads, tr->updates + 1);
    sg->opt->vars = NULL;
    tw->step_seeds = NULL;
}

/* Captures the step for tower 0's current input buffer into a new slot;
 * NULL (logged once, every later step eager) when it cannot. */
static graph_slot *capture_step(step_graph *sg, int n)
{
    backend_t *be = sg->be;
    tower_t *tw = &sg->tr->towers[0];
    tt_err err = {0};
    backend_graph *g = NULL;
    if (be->dev->capture_begin(be, &err) == 0) {
        queue_step(sg, n);
        g = be->dev->capture_end(be, &err);
    }
    if (g == NULL) {
        log_printf("cuda graph: global step %lld: %s; eager steps from now on\n",
                   (long long)sg->tr->global_step + 1, err.msg);
        sg->given_up = true;
        return NULL;
    }
    graph_slot *s = &sg->slots[sg->n_slots++];
    *s = (graph_slot){tw->batch_x, tw->batch_y, g};
    sg->captured++;
    return s;
}

/* The graph's work, then its loss read back into the tower (loss_read
 * waits for the loss's event the launch recorded after the graph). */
static int launch_step(step_graph *sg, graph_slot *s, tt_err *err)
{
    backend_t *be = sg->be;
    tower_t *tw = &sg->tr->towers[0];
    if (be->dev->graph_launch(be, s->g, err) != 0)
        return -1;
    be->loss_read(be, &tw->loss_sum, &tw->correct);
    sg->replayed++;
    return 0;
}

static graph_slot *slot_of(step_graph *sg, const tower_t *tw)
{
    for (int i = 0; i < sg->n_slots; i++)
        if (sg->slots[i].x == tw->batch_x && sg->slots[i].y == tw->batch_y)
            return &sg->slots[i];
    return NULL;
}

bool step_graph_step(step_graph *sg, const batch_t *b)
{
    trainer_t *tr = sg->tr;
    tower_t *tw = &tr->towers[0];
    /* a partial batch has other shapes; the timeline's spans are events
     * between the layers, which a graph does not record; TT_FAULT_GRAD
     * changes one step */
    if (sg->given_up || b->n != tr->local_batch || trace_recording() ||
        tr->fault_grad_step != 0)
        return false;
    if (sg->warm > 0) {
        sg->warm--;
        return false;
    }
    tt_err err = {0};
    device_tower_load(tr, 0, tr->global_step, b->n, b->x, b->y);
    if (fill_vars(sg, &err) != 0) {
        device_tower_fail(tr, 0, &err);
    } else {
        graph_slot *s = slot_of(sg, tw);
        if (s == NULL && sg->n_slots < STEP_GRAPH_SLOTS)
            s = capture_step(sg, b->n);
        if (s == NULL) {
            queue_step(sg, b->n); /* eager, reading the block as the graph would */
        } else if (launch_step(sg, s, &err) != 0) {
            device_tower_fail(tr, 0, &err);
            sg->given_up = true;
        }
    }
    optimizer_mark_stepped(sg->opt);
    device_tower_consumed(tr, 0);
    return true;
}

void step_graph_free(step_graph *sg)
{
    if (sg == NULL)
        return;
    backend_t *be = sg->be;
    if (sg->captured > 0)
        log_printf("cuda graph: %lld step(s) replayed from %lld graph(s)\n", sg->replayed,
                   sg->captured);
    /* the last launches and the last copy from vars_host may still be
     * queued: the queue done first (a stalled device fails the wait) */
    backend_device_wait(be, "graph teardown", &(tt_err){0});
    for (int i = 0; i < sg->n_slots; i++)
        be->dev->graph_free(be, sg->slots[i].g);
    if (sg->vars_copied != NULL)
        be->dev->event_free(be, sg->vars_copied);
    if (sg->vars_host != NULL)
        be->dev->host_free(be, sg->vars_host);
    if (sg->vars_dev != NULL)
        be->free(be, sg->vars_dev);
    free(sg);
}

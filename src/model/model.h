/* model.h - a model graph (layers with shapes and a parameter layout) and the
 * tower function that builds one replica of it on a backend.
 *
 * All parameters of a replica live in ONE contiguous block (as llm.c does), each
 * tensor a view at a fixed offset: trainable tensors first, in layer order, then
 * the non-trainable ones (batchnorm statistics). Gradients are one block of the
 * trainable size with the same offsets. So the optimizer, the all-reduce,
 * broadcast and checkpoints all work on flat buffers, and a parameter's offset is
 * its identity.
 */
#ifndef TT_MODEL_H
#define TT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config/job.h"
#include "layers/layer.h"
#include "tensor.h"

typedef struct {
    char name[TT_NAME_MAX + 24]; /* "<layer>.<suffix>", PyTorch's state_dict key */
    int layer;                   /* index into model.layers */
    int spec;                    /* index into layer.params */
    size_t offset;               /* in floats, into the parameter block */
    size_t count;
    bool trainable;
} param_entry;

/* What one sample costs layer `layer` in a training step, as
 * bench/tt_models.py counts it: multiply-adds x 2 of conv2d and dense, forward;
 * backward = weights (as forward) + data (as forward, left out for a layer
 * that reads the model input: no gradient of the data is computed).
 * Element-wise layers (pooling, batchnorm, relu, add) count 0: memory traffic. */
typedef struct {
    const layer_t *layer;
    double fwd, bwd;
} layer_cost;

typedef struct {
    const model_cfg *cfg;
    shape3 input;        /* what the model reads per sample */
    layer_t *layers;
    int n_layers;
    param_entry *params; /* trainable first, then the rest */
    int n_params;
    size_t n_floats;     /* whole parameter block */
    size_t n_trainable;  /* gradient block; trainable tensors occupy [0, n_trainable) */
    size_t *param_offset;  /* [n_layers * LAYER_MAX_PARAMS]: offset of layer i's param j */
    int *consumers;        /* per layer: how many layers read its output */
    layer_cost *costs;     /* per layer: FLOPs of one sample (model_build) */
} model_t;

/* Sets up every layer for data of shape `data` (the dataflow's output shape).
 * A flat [N] model input accepts image data of N elements. TT_ERR_USAGE errors
 * name the model file and layer. */
int model_build(const model_cfg *cfg, shape3 data, model_t *m, tt_err *err);
void model_free(model_t *m);

/* PyTorch's default initialisation into a host block of m->n_floats, a pure
 * function of the seed (each tensor draws from its own stream). */
void model_init_params(const model_t *m, uint64_t seed, float *host_block);

/* Prints the table of layers (name, type, output shape, parameters) and the total. */
void model_print_table(const model_t *m);
/* Input k of layer i: a layer index, or -1 for the model input. */
int model_layer_input(const model_t *m, int i, int k);

/* One replica of the model on one backend, with buffers for batches of up to
 * max_n samples. */
typedef struct {
    const model_t *model;
    backend_t *be;
    int max_n;
    float *params;     /* device, m->n_floats */
    float *grads;      /* device, m->n_trainable */
    float *input;      /* device, [max_n, input]; NULL on host memory */
    int32_t *labels;   /* device, [max_n]; NULL on host memory */
    const float *batch_x;   /* the batch the step reads: input, or the */
    const int32_t *batch_y; /* caller's own arrays on host memory */
    float **act;       /* per layer output, [max_n, out]: its own buffer, or */
    float **act_bufs;  /* one of these, shared by outputs only forward passes
                        * read and never live at once (model.c) */
    int n_act_bufs;
    bool *act_shared;  /* per layer: act[i] is one of act_bufs */
    float **dact;      /* per layer output gradient: views of grad_bufs */
    float **grad_bufs; /* gradient buffers, shared by layers never live at once */
    int n_grad_bufs;
    bool *blocked;     /* per layer: its output in the backend's blocked layout
                        * (backend.h), chosen when the tower is made */
    float *dlogits_scratch; /* accumulation scratch for multi-consumer outputs */
    void **state;      /* per layer state (masks) */
    void *ws;          /* shared workspace, the largest any layer needs */
    bool *grad_written; /* per layer, during backward: dact already holds a gradient */
    double loss_sum;   /* of the last forward with loss */
    int correct;
    /* The gradient of the loss is multiplied by this before backward (fp16's
     * loss scaling: the trainer divides the gradients by it again); 1 = off. */
    float loss_scale;
    /* Called during backward each time a layer's gradients are final, with
     * the lowest offset of the gradient block now final: [lo, n_trainable)
     * will not change again in this step (layers run last to first and own
     * contiguous ranges). NULL: not called. Lets a trainer start all-reducing
     * gradients while backward goes on. Returns whether it did anything (work
     * queued on the tower's device, a span recorded): when not, the next
     * layer's timeline span continues this one's (trace_continue). */
    bool (*grad_ready)(void *arg, size_t lo);
    void *grad_ready_arg;
    /* Device memory holding each layer's dropout seed of this step (layer
     * i's at [i], tower_layer_seed), read when dropout runs: while a step is
     * captured in a graph or replays one (src/train/step_graph.c); NULL: the
     * seed is passed by value (every other step). */
    const uint64_t *step_seeds;
} tower_t;

/* The tower function: builds one replica on `be`. The parameter block is zero;
 * fill it with tower_set_params. */
int tower_create(const model_t *m, backend_t *be, int max_n, tower_t *t, tt_err *err);
void tower_free(tower_t *t);

void tower_set_params(tower_t *t, const float *host_block);
void tower_get_params(const tower_t *t, float *host_block);

/* Makes a batch (host memory) the tower's input: copied to the device, or
 * on a backend that computes on host memory (the CPU) read in place, so x
 * and y must stay unchanged until the tower's next step has returned. */
void tower_load_batch(tower_t *t, int n, const float *x, const int32_t *y);

/* Forward through every layer and the loss; fills t->loss_sum and t->correct.
 * With backward, also computes the gradients of the MEAN loss over n into
 * t->grads. seed varies dropout per step. Returns the logits (device). */
const float *tower_step(tower_t *t, int n, bool training, bool backward, uint64_t seed);

/* Layer i's dropout seed in a step whose seed is `seed` (tower_step's). */
uint64_t tower_layer_seed(uint64_t seed, int i);

#endif

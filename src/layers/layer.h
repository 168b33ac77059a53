/* layer.h - one layer type per file (dense.c, conv2d.c, ...), each with its shape
 * rule, parameters, PyTorch initialisation, forward and backward side by side.
 *
 * A layer is configured once per model (layer_setup), then used by every tower
 * with that tower's backend and buffers: per-tower state lives in layer_buffers,
 * never in the layer, so towers never share mutable state.
 */
#ifndef TT_LAYER_H
#define TT_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config/job.h"
#include "tensor.h"
#include "util/err.h"
#include "util/rng.h"

#define LAYER_MAX_PARAMS 5

/* One named tensor of a layer, as PyTorch names it: "<layer>.<suffix>". */
typedef struct {
    char suffix[24];     /* "weight", "bias", "running_mean", "running_var", ... */
    int dims[4];
    int ndim;
    size_t count;
    bool trainable;      /* false: batchnorm running statistics (no gradient) */
    bool is_int64;       /* num_batches_tracked: stored as one float here, I64 on disk */
} param_spec;

typedef struct layer layer_t;

/* What a tower passes to a layer's forward/backward. Pointers are device pointers
 * of `be`. x[i] is input i ([n, in[i]]), y the output ([n, out]). params[j] and
 * grads[j] follow layer->params[j] (grads[j] is NULL for non-trainable ones).
 * dy is the gradient at the output (may be modified in place); dx[i] receives the
 * gradient of input i (overwritten) or is NULL when not needed. */
typedef struct {
    backend_t *be;
    int n;               /* batch size of this call (<= the tower's maximum) */
    bool training;
    uint64_t seed;       /* dropout: varies per step and layer; set by the model */
    /* the same seed in device memory, read when dropout runs (a captured
     * step: tower_t.step_seeds), or NULL: seed by value */
    const uint64_t *seed_dev;
    const float *x[LAYER_MAX_INPUTS];
    float *y;
    float *params[LAYER_MAX_PARAMS];
    float *grads[LAYER_MAX_PARAMS];
    float *dy;
    float *dx[LAYER_MAX_INPUTS];
    void *ws;            /* workspace of layer->ws_bytes(max batch) */
    /* x[i] / y in the backend's blocked layout (backend.h) instead of NCHW;
     * the model sets them where every reader and writer accepts it
     * (layer_accepts_blocked) */
    bool blocked_x[LAYER_MAX_INPUTS], blocked_y;
    /* dx[i] receives its gradient added to what it holds (another reader
     * of that input wrote first) instead of overwritten: set only for a
     * batchnorm doing an add (layer.add_out), for its x[1] */
    bool dx_accumulate[LAYER_MAX_INPUTS];
    void *state;         /* per-tower state of state_bytes(max batch), e.g. masks */
} layer_call;

/* Bytes of one element of the gradient of an activation in the blocked
 * layout (`blocked`) or not: 2 where the backend keeps blocked gradients
 * in bf16 (backend.h: blocked_bf16_grads), else 4. */
static inline size_t layer_grad_elem(const backend_t *be, bool blocked)
{
    return blocked && be->blocked_bf16_grads ? 2 : sizeof(float);
}

/* dst += src over `count` gradient elements of an activation whose layout
 * `blocked` says: axpy in float32; add_blocked for bf16 gradients (the
 * float32 sum rounded once, precision.h's rule). */
static inline void layer_grad_accumulate(backend_t *be, bool blocked, size_t count,
                                         const float *src, float *dst)
{
    if (layer_grad_elem(be, blocked) == 2)
        be->add_blocked(be, count, dst, src, false, dst);
    else
        be->axpy(be, count, 1.0f, src, dst);
}

typedef struct {
    layer_type type;
    /* Checks the layer's settings against its input shapes, sets l->out and the
     * parameter specs. Errors name the layer ("layers[2] (conv1): ..."). */
    int (*setup)(layer_t *l, tt_err *err);
    /* PyTorch's default initialisation of the parameters into host memory. */
    void (*init)(const layer_t *l, rng_t *rng, float *const *host_params);
    /* Workspace bytes for up to max_n images with the layouts the tower
     * gives the layer (model.c's choose_layouts: a blocked input x, a
     * blocked output y); no layout needs the most on every CPU (oneDNN's
     * kernels differ by instruction set, and so do its reorders). */
    size_t (*ws_bytes)(const layer_t *l, backend_t *be, int max_n, bool blocked_x,
                       bool blocked_y);
    size_t (*state_bytes)(const layer_t *l, int max_n);
    void (*forward)(const layer_t *l, layer_call *c);
    void (*backward)(const layer_t *l, layer_call *c);
} layer_ops;

struct layer {
    const layer_cfg *cfg;
    const layer_ops *ops;
    shape3 in[LAYER_MAX_INPUTS];
    int n_in;
    shape3 out;
    param_spec params[LAYER_MAX_PARAMS];
    int n_params;
    /* Set by model_build. relu_out: the layer applies relu to its own output
     * (its activation = "relu", or a relu layer fused into it); relu_fused: a
     * relu layer whose work its input layer does, sharing that layer's
     * buffers. */
    bool relu_out, relu_fused;
    /* Set by model_build too. add_out: a batchnorm that also does the
     * two-input add layer reading it: y = batchnorm(x) + r, then the add's
     * relu (as relu_out), r the add's other input, layer add_other (-1: the
     * model input), which its call gets as x[1] (dx[1] its gradient);
     * add_fused: that add layer, done by layer add_src and sharing its
     * buffers. */
    bool add_out, add_fused;
    int add_other, add_src;
};

/* The ops of a layer type (NULL when not implemented). */
const layer_ops *layer_ops_for(layer_type t);

/* Sets up l for cfg with the given input shapes. */
int layer_setup(layer_t *l, const layer_cfg *cfg, const shape3 *in, int n_in, tt_err *err);

/* Helpers for layer files. */
void param_spec_set(param_spec *p, const char *suffix, int ndim, const int *dims,
                    bool trainable);
/* uniform(-bound, bound) into count floats */
void init_uniform(rng_t *rng, float *p, size_t count, float bound);

extern const layer_ops layer_dense_ops, layer_conv2d_ops, layer_maxpool_ops,
    layer_avgpool_ops, layer_global_avgpool_ops, layer_relu_ops, layer_dropout_ops,
    layer_flatten_ops, layer_batchnorm_ops, layer_add_ops;

#endif

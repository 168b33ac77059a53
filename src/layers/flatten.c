/* flatten.c - torch.nn.Flatten: [C,H,W] -> [C*H*W] in C,H,W order. NCHW data
 * is already laid out that way, so both passes are copies. */
#include "layers/layer.h"

static int flatten_setup(layer_t *l, tt_err *err)
{
    l->out = shape3_make((int)shape3_size(l->in[0]), 1, 1);
    return 0;
}

static void flatten_forward(const layer_t *l, layer_call *c)
{
    c->be->copy(c->be, c->y, c->x[0], (size_t)c->n * shape3_size(l->out) * sizeof(float));
}

static void flatten_backward(const layer_t *l, layer_call *c)
{
    if (c->dx[0] != NULL)
        c->be->copy(c->be, c->dx[0], c->dy, (size_t)c->n * shape3_size(l->out) * sizeof(float));
}

const layer_ops layer_flatten_ops = {
    .type = LAYER_FLATTEN,
    .setup = flatten_setup,
    .forward = flatten_forward,
    .backward = flatten_backward,
};

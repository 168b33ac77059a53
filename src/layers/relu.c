/* relu.c - torch.nn.ReLU as a layer of its own (dense and conv2d can also
 * fuse it with `activation = "relu"`; both use tt_relu). */
#include "layers/layer.h"

static int relu_setup(layer_t *l, tt_err *err)
{
    l->out = l->in[0];
    return 0;
}

static void relu_forward(const layer_t *l, layer_call *c)
{
    /* blocked on both sides or neither (model.c) */
    (c->blocked_y ? c->be->relu_forward_blocked : c->be->relu_forward)(
        c->be, (size_t)c->n * shape3_size(l->out), c->x[0], c->y);
}

static void relu_backward(const layer_t *l, layer_call *c)
{
    if (c->dx[0] != NULL)
        (c->blocked_y ? c->be->relu_backward_blocked : c->be->relu_backward)(
            c->be, (size_t)c->n * shape3_size(l->out), c->y, c->dy, c->dx[0]);
}

const layer_ops layer_relu_ops = {
    .type = LAYER_RELU,
    .setup = relu_setup,
    .forward = relu_forward,
    .backward = relu_backward,
};

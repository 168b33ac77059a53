/* maxpool.c - torch.nn.MaxPool2d: the argmax of each window is kept in the
 * tower's state for the backward pass. */
#include "layers/pool_common.h"

static int maxpool_setup(layer_t *l, tt_err *err)
{
    return pool_setup_window(l, l->cfg->kernel, l->cfg->stride, l->cfg->padding, err);
}

/* one argmax per output, in the output's layout (the blocked one pads the
 * channels to a multiple of 16) */
static size_t maxpool_state(const layer_t *l, int max_n)
{
    return tt_blocked_floats(max_n, l->out.c, l->out.h * l->out.w) * sizeof(int32_t);
}

static void maxpool_forward(const layer_t *l, layer_call *c)
{
    window_desc d = pool_desc(l, c, l->cfg->kernel, l->cfg->stride, l->cfg->padding);
    c->be->maxpool_forward(c->be, &d, c->x[0], c->y, c->state);
}

static void maxpool_backward(const layer_t *l, layer_call *c)
{
    if (c->dx[0] == NULL)
        return;
    window_desc d = pool_desc(l, c, l->cfg->kernel, l->cfg->stride, l->cfg->padding);
    c->be->maxpool_backward(c->be, &d, c->dy, c->state, c->dx[0]);
}

const layer_ops layer_maxpool_ops = {
    .type = LAYER_MAXPOOL,
    .setup = maxpool_setup,
    .state_bytes = maxpool_state,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};

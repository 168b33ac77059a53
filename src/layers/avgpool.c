/* avgpool.c - torch.nn.AvgPool2d (count_include_pad = True). */
#include "layers/pool_common.h"

static int avgpool_setup(layer_t *l, tt_err *err)
{
    return pool_setup_window(l, l->cfg->kernel, l->cfg->stride, l->cfg->padding, err);
}

static void avgpool_forward(const layer_t *l, layer_call *c)
{
    window_desc d = pool_desc(l, c, l->cfg->kernel, l->cfg->stride, l->cfg->padding);
    c->be->avgpool_forward(c->be, &d, c->x[0], c->y);
}

static void avgpool_backward(const layer_t *l, layer_call *c)
{
    if (c->dx[0] == NULL)
        return;
    window_desc d = pool_desc(l, c, l->cfg->kernel, l->cfg->stride, l->cfg->padding);
    c->be->avgpool_backward(c->be, &d, c->dy, c->dx[0]);
}

const layer_ops layer_avgpool_ops = {
    .type = LAYER_AVGPOOL,
    .setup = avgpool_setup,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
};

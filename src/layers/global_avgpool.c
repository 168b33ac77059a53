/* global_avgpool.c - torch.nn.AdaptiveAvgPool2d(1) then flatten: [C,H,W] -> [C],
 * an average pool whose window is the whole (square) plane. */
#include "layers/pool_common.h"

static int gap_setup(layer_t *l, tt_err *err)
{
    shape3 in = l->in[0];
    if (in.h != in.w)
        return err_set(err, TT_ERR_USAGE, "layer %s: global_avgpool needs a square input "
                       "(got %dx%d)", l->cfg->name, in.h, in.w);
    l->out = shape3_make(in.c, 1, 1);
    return 0;
}

static window_desc gap_desc(const layer_t *l, int n)
{
    return pool_desc(l, n, l->in[0].h, 1, 0);
}

static void gap_forward(const layer_t *l, layer_call *c)
{
    window_desc d = gap_desc(l, c->n);
    c->be->avgpool_forward(c->be, &d, c->x[0], c->y);
}

static void gap_backward(const layer_t *l, layer_call *c)
{
    if (c->dx[0] == NULL)
        return;
    window_desc d = gap_desc(l, c->n);
    c->be->avgpool_backward(c->be, &d, c->dy, c->dx[0]);
}

const layer_ops layer_global_avgpool_ops = {
    .type = LAYER_GLOBAL_AVGPOOL,
    .setup = gap_setup,
    .forward = gap_forward,
    .backward = gap_backward,
};

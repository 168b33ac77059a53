/* global_avgpool.c - torch.nn.AdaptiveAvgPool2d(1) then flatten: [C,H,W] -> [C].
 *
 * Any H x W (the backend's pools only know square windows), done as a dense
 * layer over the planes: the batch is [N*C, H*W] rows, the "weight" one row of
 * 1/(H*W) kept in the layer's per-tower state, so
 *   forward  y[N*C, 1]    = x[N*C, HW] . w[1, HW]^T
 *   backward dx[N*C, HW]  = dy[N*C, 1] . w[1, HW]      (every pixel gets dy/HW)
 * Both passes write the row on the device (no upload from the host: a step
 * captured in a CUDA graph may not hold one, src/train/step_graph.c). */
#include "layers/layer.h"

static int gap_setup(layer_t *l, tt_err *err)
{
    shape3 in = l->in[0];
    if (in.h < 1 || in.w < 1 || in.c < 1)
        return err_set(err, TT_ERR_USAGE, "layer %s: global_avgpool needs a non-empty input",
                       l->cfg->name);
    l->out = shape3_make(in.c, 1, 1);
    return 0;
}

static size_t gap_plane(const layer_t *l)
{
    return (size_t)l->in[0].h * (size_t)l->in[0].w;
}

static size_t gap_state(const layer_t *l, int max_n)
{
    (void)max_n;
    return gap_plane(l) * sizeof(float);
}

/* Writes the row of 1/HW into the state, on the device: 0 * w + 1/HW is
 * exactly 1/HW, the state holding only finite values (zeros from the
 * allocation, or this row). */
static float *gap_fill_weights(const layer_t *l, layer_call *c)
{
    size_t hw = gap_plane(l);
    float *w = c->state;
    c->be->scale(c->be, hw, 0.0f, w);
    c->be->add_scalar(c->be, hw, 1.0f / (float)hw, w);
    return w;
}

static void gap_forward(const layer_t *l, layer_call *c)
{
    if (c->blocked_x[0]) { /* the same bits as below, from the blocked layout */
        c->be->global_avgpool_blocked_forward(c->be, c->n, l->in[0].c, (int)gap_plane(l),
                                              c->x[0], c->y);
        return;
    }
    /* pooling stays float32 in mixed precision (the precision table) */
    const float *w = gap_fill_weights(l, c);
    backend_t *be = c->be;
    (be->dense_forward_fp32 ? be->dense_forward_fp32 : be->dense_forward)(
        be, c->n * l->in[0].c, (int)gap_plane(l), 1, c->x[0], w, NULL, false, c->y);
}

static void gap_backward(const layer_t *l, layer_call *c)
{
    if (c->dx[0] == NULL)
        return;
    if (c->blocked_x[0]) {
        c->be->global_avgpool_blocked_backward(c->be, c->n, l->in[0].c, (int)gap_plane(l), c->dy,
                                               c->dx[0]);
        return;
    }
    const float *w = gap_fill_weights(l, c);
    backend_t *be = c->be;
    (be->dense_backward_fp32 ? be->dense_backward_fp32 : be->dense_backward)(
        be, c->n * l->in[0].c, (int)gap_plane(l), 1, c->x[0], w, c->y, false, c->dy, c->dx[0],
        NULL, NULL);
}

const layer_ops layer_global_avgpool_ops = {
    .type = LAYER_GLOBAL_AVGPOOL,
    .setup = gap_setup,
    .state_bytes = gap_state,
    .forward = gap_forward,
    .backward = gap_backward,
};

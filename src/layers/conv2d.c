/* conv2d.c - torch.nn.Conv2d with square kernels: weight [filters, C, k, k],
 * bias [filters], stride, zero padding, optional fused relu. */
#include <math.h>

#include "layers/layer.h"

static window_desc conv_desc(const layer_t *l, int n, bool blocked_x, bool blocked_y)
{
    window_desc d = {n, l->in[0].c, l->in[0].h, l->in[0].w, l->cfg->filters, l->cfg->kernel,
                     l->cfg->stride, l->cfg->padding, l->out.h, l->out.w, blocked_x, blocked_y};
    return d;
}

static int conv_setup(layer_t *l, tt_err *err)
{
    const layer_cfg *c = l->cfg;
    shape3 in = l->in[0];
    if (c->filters < 1 || c->kernel < 1 || c->stride < 1 || c->padding < 0)
        return err_set(err, TT_ERR_USAGE, "layer %s: filters, kernel, stride must be >= 1 and "
                       "padding >= 0", c->name);
    if (c->kernel > in.h + 2 * c->padding || c->kernel > in.w + 2 * c->padding)
        return err_set(err, TT_ERR_USAGE, "layer %s: kernel %d is larger than the padded input "
                       "%dx%d", c->name, c->kernel, in.h + 2 * c->padding, in.w + 2 * c->padding);
    l->out = shape3_make(c->filters, window_out_size(in.h, c->kernel, c->stride, c->padding),
                         window_out_size(in.w, c->kernel, c->stride, c->padding));
    int wd[4] = {c->filters, in.c, c->kernel, c->kernel}, bd[1] = {c->filters};
    param_spec_set(&l->params[0], "weight", 4, wd, true);
    l->n_params = 1;
    if (c->bias)
        param_spec_set(&l->params[l->n_params++], "bias", 1, bd, true);
    return 0;
}

/* torch.nn.Conv2d.reset_parameters: uniform(+-1/sqrt(fan_in)) for both,
 * fan_in = C*k*k. */
static void conv_init(const layer_t *l, rng_t *rng, float *const *p)
{
    float fan_in = (float)(l->in[0].c * l->cfg->kernel * l->cfg->kernel);
    float bound = 1.0f / sqrtf(fan_in);
    for (int j = 0; j < l->n_params; j++)
        init_uniform(rng, p[j], l->params[j].count, bound);
}

static size_t conv_ws(const layer_t *l, backend_t *be, int max_n, bool blocked_x,
                      bool blocked_y)
{
    window_desc d = conv_desc(l, max_n, blocked_x, blocked_y);
    return be->conv_workspace(be, &d);
}

static void conv_forward(const layer_t *l, layer_call *c)
{
    window_desc d = conv_desc(l, c->n, c->blocked_x[0], c->blocked_y);
    c->be->conv_forward(c->be, &d, c->x[0], c->params[0], l->cfg->bias ? c->params[1] : NULL,
                        l->relu_out, c->y, c->ws);
}

static void conv_backward(const layer_t *l, layer_call *c)
{
    window_desc d = conv_desc(l, c->n, c->blocked_x[0], c->blocked_y);
    c->be->conv_backward(c->be, &d, c->x[0], c->params[0], c->y, l->relu_out, c->dy, c->dx[0],
                         c->grads[0], l->cfg->bias ? c->grads[1] : NULL, c->ws);
}

const layer_ops layer_conv2d_ops = {
    .type = LAYER_CONV2D,
    .setup = conv_setup,
    .init = conv_init,
    .ws_bytes = conv_ws,
    .forward = conv_forward,
    .backward = conv_backward,
};

/* dense.c - fully connected layer, torch.nn.Linear: y = x w^T + b.
 * Input [C,H,W] is flattened in C,H,W order (PyTorch's flatten); weight
 * [units, in], bias [units]; optional fused relu. */
#include <math.h>

#include "layers/layer.h"

static int dense_setup(layer_t *l, tt_err *err)
{
    int in = (int)shape3_size(l->in[0]), out = l->cfg->units;
    if (out < 1)
        return err_set(err, TT_ERR_USAGE, "layer %s: units must be >= 1", l->cfg->name);
    l->out = shape3_make(out, 1, 1);
    int wd[2] = {out, in}, bd[1] = {out};
    param_spec_set(&l->params[0], "weight", 2, wd, true);
    l->n_params = 1;
    if (l->cfg->bias)
        param_spec_set(&l->params[l->n_params++], "bias", 1, bd, true);
    return 0;
}

/* kaiming_uniform(a=sqrt(5)) on [out, in] is uniform(+-1/sqrt(in)); the bias
 * uses the same bound (torch.nn.Linear.reset_parameters). */
static void dense_init(const layer_t *l, rng_t *rng, float *const *p)
{
    float bound = 1.0f / sqrtf((float)shape3_size(l->in[0]));
    for (int j = 0; j < l->n_params; j++)
        init_uniform(rng, p[j], l->params[j].count, bound);
}

static void dense_forward(const layer_t *l, layer_call *c)
{
    c->be->dense_forward(c->be, c->n, (int)shape3_size(l->in[0]), l->out.c, c->x[0], c->params[0],
                         l->cfg->bias ? c->params[1] : NULL, l->relu_out, c->y);
}

static void dense_backward(const layer_t *l, layer_call *c)
{
    c->be->dense_backward(c->be, c->n, (int)shape3_size(l->in[0]), l->out.c, c->x[0],
                          c->params[0], c->y, l->relu_out, c->dy, c->dx[0], c->grads[0],
                          l->cfg->bias ? c->grads[1] : NULL);
}

const layer_ops layer_dense_ops = {
    .type = LAYER_DENSE,
    .setup = dense_setup,
    .init = dense_init,
    .forward = dense_forward,
    .backward = dense_backward,
};

/* batchnorm.c - torch.nn.BatchNorm2d (BatchNorm1d for flat inputs): weight
 * and bias [C] trained; running_mean, running_var [C] and the int64
 * num_batches_tracked kept beside them, tower-local (the trainer averages them
 * across towers at every epoch end and before every checkpoint). Training
 * normalises with the batch statistics, inference with the running ones. */
#include "layers/layer.h"

static int bn_setup(layer_t *l, tt_err *err)
{
    shape3 in = l->in[0];
    if (l->cfg->epsilon <= 0.0f || l->cfg->momentum < 0.0f || l->cfg->momentum > 1.0f)
        return err_set(err, TT_ERR_USAGE, "layer %s: epsilon must be > 0 and momentum in [0, 1]",
                       l->cfg->name);
    l->out = in;
    int c[1] = {in.c};
    param_spec_set(&l->params[0], "weight", 1, c, true);
    param_spec_set(&l->params[1], "bias", 1, c, true);
    param_spec_set(&l->params[2], "running_mean", 1, c, false);
    param_spec_set(&l->params[3], "running_var", 1, c, false);
    param_spec_set(&l->params[4], "num_batches_tracked", 0, NULL, false);
    l->params[4].is_int64 = true;
    l->n_params = 5;
    return 0;
}

/* PyTorch: weight 1, bias 0, running_mean 0, running_var 1, no batches yet. */
static void bn_init(const layer_t *l, rng_t *rng, float *const *p)
{
    for (int i = 0; i < l->out.c; i++) {
        p[0][i] = 1.0f;
        p[1][i] = 0.0f;
        p[2][i] = 0.0f;
        p[3][i] = 1.0f;
    }
    p[4][0] = 0.0f;
}

/* mean and 1/std of the last training batch, per channel */
static size_t bn_state(const layer_t *l, int max_n)
{
    return 2 * (size_t)l->out.c * sizeof(float);
}

static void bn_forward(const layer_t *l, layer_call *c)
{
    float *save = c->state;
    /* the blocked layout on both sides (the model never mixes them here) */
    (c->blocked_y ? c->be->batchnorm_forward_blocked : c->be->batchnorm_forward)(
        c->be, c->n, l->out.c, l->out.h * l->out.w, c->x[0], c->params[0], c->params[1],
        c->params[2], c->params[3], l->cfg->momentum, l->cfg->epsilon, c->training,
        l->relu_out, c->y, save, save + l->out.c);
    if (c->training) {
        /* num_batches_tracked += 1 where it lives: on a GPU, no wait */
        c->be->add_scalar(c->be, 1, 1.0f, c->params[4]);
    }
}

static void bn_backward(const layer_t *l, layer_call *c)
{
    const float *save = c->state;
    (c->blocked_y ? c->be->batchnorm_backward_blocked : c->be->batchnorm_backward)(
        c->be, c->n, l->out.c, l->out.h * l->out.w, c->x[0], c->params[0], save,
        save + l->out.c, c->y, l->relu_out, c->dy, c->dx[0], c->grads[0], c->grads[1]);
}

const layer_ops layer_batchnorm_ops = {
    .type = LAYER_BATCHNORM,
    .setup = bn_setup,
    .init = bn_init,
    .state_bytes = bn_state,
    .forward = bn_forward,
    .backward = bn_backward,
};

/* batchnorm.c - torch.nn.BatchNorm2d (BatchNorm1d for flat inputs): weight
 * and bias [C] trained; running_mean, running_var [C] and the int64
 * num_batches_tracked kept beside them, tower-local (the trainer averages them
 * across towers at every epoch end and before every checkpoint). Training
 * normalises with the batch statistics, inference with the running ones.
 * A batchnorm whose only reader is a residual add may do that add (and its
 * relu) too (layer.h: add_out; model.c: fuse_adds). */
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

/* y = batchnorm(x) + r, then the add's relu (layer.h: add_out; r = x[1]):
 * the backend's fused operation, or the batchnorm and the add one after
 * the other into y, which are the unfused layers' passes (same bits). */
static void bn_add_forward(const layer_t *l, layer_call *c, float *save)
{
    backend_t *be = c->be;
    int hw = l->out.h * l->out.w;
    if (c->blocked_y && be->batchnorm_add_forward_blocked != NULL) {
        be->batchnorm_add_forward_blocked(be, c->n, l->out.c, hw, c->x[0], c->params[0],
                                          c->params[1], c->params[2], c->params[3],
                                          l->cfg->momentum, l->cfg->epsilon, c->training, c->x[1],
                                          l->relu_out, c->y, save, save + l->out.c);
        return;
    }
    (c->blocked_y ? be->batchnorm_forward_blocked : be->batchnorm_forward)(
        be, c->n, l->out.c, hw, c->x[0], c->params[0], c->params[1], c->params[2],
        c->params[3], l->cfg->momentum, l->cfg->epsilon, c->training, false, c->y, save,
        save + l->out.c);
    (c->blocked_y ? be->add_blocked : be->add)(be, (size_t)c->n * shape3_size(l->out), c->y,
                                               c->x[1], l->relu_out, c->y);
}

static void bn_forward(const layer_t *l, layer_call *c)
{
    float *save = c->state;
    if (l->add_out) {
        bn_add_forward(l, c, save);
    } else {
        /* the blocked layout on both sides (the model never mixes them here) */
        (c->blocked_y ? c->be->batchnorm_forward_blocked : c->be->batchnorm_forward)(
            c->be, c->n, l->out.c, l->out.h * l->out.w, c->x[0], c->params[0], c->params[1],
            c->params[2], c->params[3], l->cfg->momentum, l->cfg->epsilon, c->training,
            l->relu_out, c->y, save, save + l->out.c);
    }
    if (c->training) {
        /* num_batches_tracked += 1 where it lives: on a GPU, no wait */
        c->be->add_scalar(c->be, 1, 1.0f, c->params[4]);
    }
}

/* The fused add's backward, then batchnorm's: dy masked by the add's relu,
 * given to r (dx[1]: written, or added where r has another reader), and
 * batchnorm's backward of it. Without the backend's fused operation: the
 * mask in place, a copy or axpy to dx[1], batchnorm without relu. */
static void bn_add_backward(const layer_t *l, layer_call *c, const float *save)
{
    backend_t *be = c->be;
    int hw = l->out.h * l->out.w;
    size_t count = (size_t)c->n * shape3_size(l->out);
    if (c->blocked_y && be->batchnorm_add_backward_blocked != NULL) {
        be->batchnorm_add_backward_blocked(be, c->n, l->out.c, hw, c->x[0], c->params[0], save,
                                           save + l->out.c, c->y, l->relu_out, c->dy, c->dx[0],
                                           c->grads[0], c->grads[1], c->dx[1],
                                           c->dx_accumulate[1]);
        return;
    }
    if (l->relu_out)
        (c->blocked_y ? be->relu_backward_blocked : be->relu_backward)(be, count, c->y, c->dy,
                                                                       c->dy);
    if (c->dx[1] != NULL && c->dx_accumulate[1])
        layer_grad_accumulate(be, c->blocked_y, count, c->dy, c->dx[1]);
    else if (c->dx[1] != NULL)
        be->copy(be, c->dx[1], c->dy, count * layer_grad_elem(be, c->blocked_y));
    (c->blocked_y ? be->batchnorm_backward_blocked : be->batchnorm_backward)(
        be, c->n, l->out.c, hw, c->x[0], c->params[0], save, save + l->out.c, c->y, false, c->dy,
        c->dx[0], c->grads[0], c->grads[1]);
}

static void bn_backward(const layer_t *l, layer_call *c)
{
    const float *save = c->state;
    if (l->add_out) {
        bn_add_backward(l, c, save);
        return;
    }
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

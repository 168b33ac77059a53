/* dropout.c - torch.nn.Dropout (inverted): in training each element is kept
 * with probability 1-rate and scaled by 1/(1-rate); the factors are kept in
 * the tower's state for the backward pass. Identity in inference. */
#include "layers/layer.h"

static int dropout_setup(layer_t *l, tt_err *err)
{
    if (l->cfg->rate < 0.0f || l->cfg->rate >= 1.0f)
        return err_set(err, TT_ERR_USAGE, "layer %s: rate must be in [0, 1)", l->cfg->name);
    l->out = l->in[0];
    return 0;
}

static size_t dropout_state(const layer_t *l, int max_n)
{
    return (size_t)max_n * shape3_size(l->out) * sizeof(float);
}

static void dropout_forward(const layer_t *l, layer_call *c)
{
    size_t count = (size_t)c->n * shape3_size(l->out);
    if (c->training && l->cfg->rate > 0.0f && c->seed_dev != NULL)
        c->be->dropout_forward_vars(c->be, count, l->cfg->rate, c->seed_dev, c->x[0], c->y,
                                    c->state);
    else if (c->training && l->cfg->rate > 0.0f)
        c->be->dropout_forward(c->be, count, l->cfg->rate, c->seed, c->x[0], c->y, c->state);
    else
        c->be->copy(c->be, c->y, c->x[0], count * sizeof(float));
}

static void dropout_backward(const layer_t *l, layer_call *c)
{
    if (c->dx[0] == NULL)
        return;
    size_t count = (size_t)c->n * shape3_size(l->out);
    if (l->cfg->rate > 0.0f)
        c->be->mul(c->be, count, c->dy, c->state, c->dx[0]);
    else
        c->be->copy(c->be, c->dx[0], c->dy, count * sizeof(float));
}

const layer_ops layer_dropout_ops = {
    .type = LAYER_DROPOUT,
    .setup = dropout_setup,
    .state_bytes = dropout_state,
    .forward = dropout_forward,
    .backward = dropout_backward,
};

/* add.c - the sum of two or more inputs of the same shape (a residual
 * connection); the gradient goes to every input unchanged (masked first when
 * a following relu is fused into the add). */
#include "layers/layer.h"

static int add_setup(layer_t *l, tt_err *err)
{
    if (l->n_in < 2)
        return err_set(err, TT_ERR_USAGE, "layer %s: add needs at least two inputs",
                       l->cfg->name);
    for (int k = 1; k < l->n_in; k++)
        if (l->in[k].c != l->in[0].c || l->in[k].h != l->in[0].h || l->in[k].w != l->in[0].w)
            return err_set(err, TT_ERR_USAGE, "layer %s: inputs of different shapes "
                           "[%d, %d, %d] and [%d, %d, %d]", l->cfg->name, l->in[0].c,
                           l->in[0].h, l->in[0].w, l->in[k].c, l->in[k].h, l->in[k].w);
    l->out = l->in[0];
    return 0;
}

static void add_forward(const layer_t *l, layer_call *c)
{
    /* inputs summed in order: x0 + x1, then each further input, the fused
     * relu with the last sum in the same pass. Blocked on every side or
     * none (model.c). */
    size_t count = (size_t)c->n * shape3_size(l->out);
    void (*add)(backend_t *, size_t, const float *, const float *, bool, float *) =
        c->blocked_y ? c->be->add_blocked : c->be->add;
    add(c->be, count, c->x[0], c->x[1], l->relu_out && l->n_in == 2, c->y);
    for (int k = 2; k < l->n_in; k++)
        add(c->be, count, c->y, c->x[k], l->relu_out && k == l->n_in - 1, c->y);
}

/* Every input's gradient is dy (masked by the fused relu): computed once,
 * into the first input that wants it, and copied to the others. */
static void add_backward(const layer_t *l, layer_call *c)
{
    size_t count = (size_t)c->n * shape3_size(l->out);
    const float *g = c->dy;
    for (int k = 0; k < l->n_in; k++) {
        if (c->dx[k] == NULL)
            continue;
        if (l->relu_out && g == c->dy) {
            (c->blocked_y ? c->be->relu_backward_blocked : c->be->relu_backward)(
                c->be, count, c->y, c->dy, c->dx[k]);
            g = c->dx[k];
        } else {
            c->be->copy(c->be, c->dx[k], g, count * layer_grad_elem(c->be, c->blocked_y));
        }
    }
}

const layer_ops layer_add_ops = {
    .type = LAYER_ADD,
    .setup = add_setup,
    .forward = add_forward,
    .backward = add_backward,
};

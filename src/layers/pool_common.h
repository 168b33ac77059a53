/* pool_common.h - the window shape rule the pooling layers share. */
#ifndef TT_POOL_COMMON_H
#define TT_POOL_COMMON_H

#include "layers/layer.h"

/* PyTorch's rule: out = (in + 2*pad - k) / stride + 1, pad <= k/2. */
static inline int pool_setup_window(layer_t *l, int k, int stride, int pad, tt_err *err)
{
    shape3 in = l->in[0];
    if (k < 1 || stride < 1 || pad < 0 || pad > k / 2)
        return err_set(err, TT_ERR_USAGE, "layer %s: kernel %d, stride %d, padding %d "
                       "(padding must be at most kernel/2)", l->cfg->name, k, stride, pad);
    if (k > in.h + 2 * pad || k > in.w + 2 * pad)
        return err_set(err, TT_ERR_USAGE, "layer %s: kernel %d is larger than the padded input "
                       "%dx%d", l->cfg->name, k, in.h + 2 * pad, in.w + 2 * pad);
    l->out = shape3_make(in.c, window_out_size(in.h, k, stride, pad),
                         window_out_size(in.w, k, stride, pad));
    return 0;
}

static inline window_desc pool_desc(const layer_t *l, const layer_call *c, int k, int stride,
                                    int pad)
{
    window_desc d = {c->n, l->in[0].c, l->in[0].h, l->in[0].w, l->in[0].c, k, stride, pad,
                     l->out.h, l->out.w, c->blocked_x[0], c->blocked_y};
    return d;
}

#endif

/* layer.c - the layer registry and helpers shared by the layer files. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "layers/layer.h"

const layer_ops *layer_ops_for(layer_type t)
{
    switch (t) {
    case LAYER_DENSE:
        return &layer_dense_ops;
    case LAYER_CONV2D:
        return &layer_conv2d_ops;
    case LAYER_MAXPOOL:
        return &layer_maxpool_ops;
    case LAYER_AVGPOOL:
        return &layer_avgpool_ops;
    case LAYER_GLOBAL_AVGPOOL:
        return &layer_global_avgpool_ops;
    case LAYER_RELU:
        return &layer_relu_ops;
    case LAYER_DROPOUT:
        return &layer_dropout_ops;
    case LAYER_FLATTEN:
        return &layer_flatten_ops;
    case LAYER_BATCHNORM:
        return &layer_batchnorm_ops;
    case LAYER_ADD:
        return &layer_add_ops;
    default:
        return NULL;
    }
}

int layer_setup(layer_t *l, const layer_cfg *cfg, const shape3 *in, int n_in, tt_err *err)
{
    memset(l, 0, sizeof(*l));
    l->cfg = cfg;
    l->relu_out = cfg->relu; /* model_build may fuse a following relu layer too */
    l->ops = layer_ops_for(cfg->type);
    if (l->ops == NULL)
        return err_set(err, TT_ERR_USAGE, "layer %s: type %s is not implemented in this version",
                       cfg->name, layer_type_name(cfg->type));
    l->n_in = n_in;
    for (int i = 0; i < n_in; i++)
        l->in[i] = in[i];
    return l->ops->setup(l, err);
}

void param_spec_set(param_spec *p, const char *suffix, int ndim, const int *dims, bool trainable)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->suffix, sizeof(p->suffix), "%s", suffix);
    p->ndim = ndim;
    p->count = 1;
    for (int i = 0; i < ndim; i++) {
        p->dims[i] = dims[i];
        p->count *= (size_t)dims[i];
    }
    p->trainable = trainable;
}

void init_uniform(rng_t *rng, float *p, size_t count, float bound)
{
    for (size_t i = 0; i < count; i++)
        p[i] = rng_uniform_range(rng, -bound, bound);
}

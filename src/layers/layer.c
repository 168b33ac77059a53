/* layer.c - the layer registry: a layer type's ops, and a layer's setup
 * through them. The helpers the layer files share are param_spec.c's. */
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

/* model_cfg.h - a model file (towertrain.cfg(5), MODEL FILE), checked: its
 * layers as plain structs.
 *
 * model_cfg_load() reads a model file on its own; a job's model (a file or an
 * inline group) is loaded with the job (job.h). Every value is range-checked
 * before it is stored, and the shape of every layer is computed in 64 bits and
 * checked, so the layers can use int shapes: every tensor of the model (a
 * layer's parameters, one sample of its output) has at most TT_MAX_TENSOR
 * elements.
 */
#ifndef TT_MODEL_CFG_H
#define TT_MODEL_CFG_H

#include <stdbool.h>

#include "util/err.h"

#define TT_NAME_MAX 64

/* The most elements of one tensor of a model (a layer's parameters, a batch
 * of its outputs): layers compute their shapes in int. */
#define TT_MAX_TENSOR 2147483647

typedef enum {
    LAYER_DENSE,
    LAYER_CONV2D,
    LAYER_MAXPOOL,
    LAYER_AVGPOOL,
    LAYER_GLOBAL_AVGPOOL,
    LAYER_RELU,
    LAYER_BATCHNORM,
    LAYER_DROPOUT,
    LAYER_FLATTEN,
    LAYER_ADD,
    LAYER_TYPE_COUNT
} layer_type;

#define LAYER_MAX_INPUTS 8

typedef struct {
    char name[TT_NAME_MAX];
    layer_type type;
    /* Indices into model_cfg.layers of the inputs; -1 means the model input.
     * A layer reads the previous layer unless it names `input` / `inputs`. */
    int inputs[LAYER_MAX_INPUTS];
    int n_inputs;
    int units;          /* dense */
    int filters;        /* conv2d */
    int kernel;         /* conv2d, pools */
    int stride;         /* conv2d default 1; pools default = kernel */
    int padding;        /* conv2d, pools; default 0 */
    bool bias;          /* dense, conv2d; default true */
    bool relu;          /* dense, conv2d: activation = "relu" */
    float momentum;     /* batchnorm, default 0.1 */
    float epsilon;      /* batchnorm, default 1e-5 */
    float rate;         /* dropout */
} layer_cfg;

typedef struct model_cfg {
    char path[4096];    /* absolute path of the model file, "" when inline */
    int input[3];       /* C, H, W; a flat [N] input is {N, 1, 1} with input_rank 1 */
    int input_rank;     /* 1 or 3 */
    int classes;
    layer_cfg *layers;
    int n_layers;
    /* the loss is softmax cross-entropy, with this label smoothing (default 0) */
    float label_smoothing;
} model_cfg;

/* Reads a model file on its own. */
int model_cfg_load(const char *path, model_cfg *model, tt_err *err);
void model_cfg_free(model_cfg *model);

/* Names, for messages and the resolved job. */
const char *layer_type_name(layer_type t);

#endif

/* model_cfg.c - model files (towertrain.cfg(5), MODEL FILE): their keys (the tables below, on the
 * engine of schema.c), then the checked libconfig group -> model_cfg, with the
 * graph rules (unique names, inputs name EARLIER layers, so the graph is
 * acyclic by construction) and the shape rules of every layer type, so a bad
 * model is refused before anything runs.
 *
 * Shapes are computed in 64 bits from range-checked values, and every tensor
 * (a layer's weight, one sample of its output, a convolution's unfolded input)
 * must fit TT_MAX_TENSOR, so the layers' int arithmetic cannot overflow. An
 * error names the line of the key that makes it so (the kernel that is too
 * large, the units that differ from classes). */
#include <inttypes.h>
#include <libconfig.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/model_check.h"
#include "util/strutil.h"

#define END { .name = NULL }
#define GE BOUND_INCL
#define GT BOUND_EXCL
#define LE BOUND_INCL
#define LT BOUND_EXCL

/* Beyond any real model, far below where int arithmetic ends. */
#define MAX_WIDTH 16777216 /* units, filters, classes, each input dimension */
#define MAX_SIDE 65536     /* kernel, stride, padding */

/* ---- the keys of a model file ---- */

static const char *const activation_values[] = { "none", "relu", NULL };
static const char *const loss_values[] = { "softmax_cross_entropy", NULL };

#define INPUT_KEY { .name = "input", .kind = KEY_STRING, \
                                    .doc = "read this earlier layer instead of the previous one" }
#define ACT_KEY { .name = "activation", .kind = KEY_STRING, .def = "\"none\"", \
                                  .allowed = activation_values }
#define BIAS_KEY { .name = "bias", .kind = KEY_BOOL, .def = "true" }
#define KERNEL_KEY { .name = "kernel", .kind = KEY_INT, .required = true, \
                                     .lo_kind = GE, .lo = 1, .hi_kind = LE, .hi = MAX_SIDE }
#define PAD_KEY { .name = "padding", .kind = KEY_INT, .def = "0", .lo_kind = GE, .lo = 0, \
                                  .hi_kind = LE, .hi = MAX_SIDE }
#define POOL_STRIDE_KEY { .name = "stride", .kind = KEY_INT, .lo_kind = GE, .lo = 1, \
                                          .hi_kind = LE, .hi = MAX_SIDE, .doc = "default: kernel" }

static const variant_spec layer_variants[] = {
    { .name = "dense",
      .keys = (const key_spec[]){
          INPUT_KEY,
          { .name = "units", .kind = KEY_INT, .required = true, .lo_kind = GE, .lo = 1,
            .hi_kind = LE, .hi = MAX_WIDTH },
          ACT_KEY, BIAS_KEY, END } },
    { .name = "conv2d",
      .keys = (const key_spec[]){
          INPUT_KEY,
          { .name = "filters", .kind = KEY_INT, .required = true, .lo_kind = GE, .lo = 1,
            .hi_kind = LE, .hi = MAX_WIDTH },
          KERNEL_KEY,
          { .name = "stride", .kind = KEY_INT, .def = "1", .lo_kind = GE, .lo = 1,
            .hi_kind = LE, .hi = MAX_SIDE },
          PAD_KEY, BIAS_KEY, ACT_KEY, END } },
    { .name = "maxpool", .keys = (const key_spec[]){ INPUT_KEY, KERNEL_KEY, POOL_STRIDE_KEY, PAD_KEY, END } },
    { .name = "avgpool", .keys = (const key_spec[]){ INPUT_KEY, KERNEL_KEY, POOL_STRIDE_KEY, PAD_KEY, END } },
    { .name = "global_avgpool", .keys = (const key_spec[]){ INPUT_KEY, END } },
    { .name = "relu", .keys = (const key_spec[]){ INPUT_KEY, END } },
    { .name = "batchnorm",
      .keys = (const key_spec[]){
          INPUT_KEY,
          { .name = "momentum", .kind = KEY_FLOAT, .def = "0.1", .lo_kind = GE, .lo = 0, .hi_kind = LE, .hi = 1 },
          { .name = "epsilon", .kind = KEY_FLOAT, .def = "1e-05", .lo_kind = GT, .lo = 0 },
          END } },
    { .name = "dropout",
      .keys = (const key_spec[]){
          INPUT_KEY,
          { .name = "rate", .kind = KEY_FLOAT, .def = "0.5", .lo_kind = GE, .lo = 0, .hi_kind = LT, .hi = 1 },
          END } },
    { .name = "flatten", .keys = (const key_spec[]){ INPUT_KEY, END } },
    { .name = "add",
      .keys = (const key_spec[]){
          { .name = "inputs", .kind = KEY_STRING_ARRAY, .required = true, .min_len = 2,
            .max_len = LAYER_MAX_INPUTS },
          END } },
    END
};

/* Pools: stride defaults to the kernel; padding at most half the kernel (PyTorch). */
static int check_layer(vctx *c, config_setting_t *g, const char *path, const variant_spec *v)
{
    if (strcmp(v->name, "maxpool") != 0 && strcmp(v->name, "avgpool") != 0)
        return 0;
    int k = config_setting_get_int(config_setting_get_member(g, "kernel"));
    config_setting_t *pad = config_setting_get_member(g, "padding");
    if (config_setting_get_int(pad) > k / 2) {
        char key[300];
        snprintf(key, sizeof(key), "%s.padding", path);
        return schema_error(c, pad, key, "must be <= kernel / 2 = %d (got %d)", k / 2,
                            config_setting_get_int(pad));
    }
    if (config_setting_get_member(g, "stride") == NULL) {
        char buf[16];
        snprintf(buf, sizeof(buf), "%d", k);
        if (schema_add_value(g, "stride", buf) == NULL)
            return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    }
    return 0;
}

/* loss: "softmax_cross_entropy", or a group that also sets label_smoothing
 * (torch.nn.CrossEntropyLoss's); the string form stays as written. */
static const group_spec loss_spec = {
    .what = "loss",
    .keys = (const key_spec[]){
        { .name = "type", .kind = KEY_STRING, .def = "\"softmax_cross_entropy\"",
          .allowed = loss_values },
        { .name = "label_smoothing", .kind = KEY_FLOAT, .def = "0.0", .lo_kind = GE, .lo = 0,
          .hi_kind = LE, .hi = 1, .doc = "as torch.nn.CrossEntropyLoss(label_smoothing)" },
        END },
};

static int loss_parse_key(vctx *c, config_setting_t *s, const char *key)
{
    if (config_setting_type(s) == CONFIG_TYPE_GROUP)
        return schema_check_group(c, s, &loss_spec, key);
    const char *v = config_setting_get_string(s);
    if (v == NULL || strcmp(v, loss_values[0]) != 0)
        return schema_error(c, s, key, "must be \"%s\" or a group { type = \"%s\"; "
                            "label_smoothing = ...; }", loss_values[0], loss_values[0]);
    return 0;
}

static const group_spec layer_spec = {
    .what = "layer type",
    .keys = (const key_spec[]){ { .name = "name", .kind = KEY_STRING, .required = true }, END },
    .variants = layer_variants, .check = check_layer,
};

static const group_spec model_spec = {
    .what = "model",
    .keys = (const key_spec[]){
        { .name = "input", .kind = KEY_INT_ARRAY, .required = true, .lo_kind = GE, .lo = 1,
          .hi_kind = LE, .hi = MAX_WIDTH, .min_len = 1, .max_len = 3, .doc = "[C, H, W] or [N]" },
        { .name = "classes", .kind = KEY_INT, .required = true, .lo_kind = GE, .lo = 1,
          .hi_kind = LE, .hi = MAX_WIDTH },
        { .name = "layers", .kind = KEY_GROUP_LIST, .required = true, .min_len = 1, .sub = &layer_spec },
        { .name = "loss", .kind = KEY_CUSTOM, .def = "\"softmax_cross_entropy\"",
          .parse = loss_parse_key, .doc = "\"softmax_cross_entropy\" or { type; label_smoothing; }" },
        END },
};

/* ---- shapes ---- */

static const char *const layer_names[LAYER_TYPE_COUNT] = {
    "dense", "conv2d", "maxpool", "avgpool", "global_avgpool",
    "relu", "batchnorm", "dropout", "flatten", "add",
};

const char *layer_type_name(layer_type t)
{
    return (t >= 0 && t < LAYER_TYPE_COUNT) ? layer_names[t] : "?";
}

/* A per-sample shape: image [C, H, W] (flat = false) or vector [C] (flat = true),
 * in 64 bits so that no shape arithmetic of checked values can overflow. */
typedef struct {
    int64_t c, h, w;
    bool flat;
} mshape;

/* a * b for a, b >= 0, INT64_MAX when that overflows. */
static int64_t mul_sat(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t mshape_size(mshape s)
{
    return mul_sat(mul_sat(s.c, s.h), s.w);
}

static void shape_str(mshape s, char *out, size_t n)
{
    if (s.flat)
        snprintf(out, n, "[%" PRId64 "]", s.c);
    else
        snprintf(out, n, "[%" PRId64 ", %" PRId64 ", %" PRId64 "]", s.c, s.h, s.w);
}

/* A failed rule: the key of the layer that breaks it and the message. */
typedef struct {
    const char *key; /* "kernel", "units", ...; NULL: the layer as a whole */
    char msg[256];
} shape_fault;

static int fault(shape_fault *f, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fault(shape_fault *f, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
    va_end(ap);
    f->key = key;
    return -1;
}

/* A tensor of n elements must fit TT_MAX_TENSOR. */
static int check_tensor(shape_fault *f, const char *key, const char *what, const char *shape,
                        int64_t n)
{
    if (n <= TT_MAX_TENSOR)
        return 0;
    return fault(f, key, "%s %s has %" PRId64 " elements, more than %d", what, shape, n,
                 TT_MAX_TENSOR);
}

/* The output shape of layer l from its input shapes, or a fault. Inputs are
 * within TT_MAX_TENSOR elements and every setting within its table's range,
 * so a product of two sizes fits 64 bits; longer products saturate. */
static int layer_shape(const layer_cfg *l, const mshape *in, int n_in, mshape *out,
                       shape_fault *f)
{
    char a[96], b[96];
    mshape x = in[0];
    *out = x;
    switch (l->type) {
    case LAYER_DENSE: {
        *out = (mshape){ l->units, 1, 1, true };
        snprintf(a, sizeof(a), "[%d, %" PRId64 "]", l->units, mshape_size(x));
        return check_tensor(f, "units", "the weight", a, (int64_t)l->units * mshape_size(x));
    }
    case LAYER_FLATTEN:
        *out = (mshape){ mshape_size(x), 1, 1, true };
        return 0;
    case LAYER_GLOBAL_AVGPOOL:
    case LAYER_CONV2D:
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
        if (x.flat) {
            shape_str(x, a, sizeof(a));
            return fault(f, l->n_inputs ? "input" : "type", "%s needs an image input [C, H, W] "
                         "(got %s)", layer_type_name(l->type), a);
        }
        if (l->type == LAYER_GLOBAL_AVGPOOL) {
            *out = (mshape){ x.c, 1, 1, true };
            return 0;
        }
        if (x.h + 2 * (int64_t)l->padding < l->kernel || x.w + 2 * (int64_t)l->padding < l->kernel) {
            shape_str(x, a, sizeof(a));
            return fault(f, "kernel", "%d is larger than the input %s with padding %d",
                         l->kernel, a, l->padding);
        }
        out->h = (x.h + 2 * (int64_t)l->padding - l->kernel) / l->stride + 1;
        out->w = (x.w + 2 * (int64_t)l->padding - l->kernel) / l->stride + 1;
        if (l->type == LAYER_CONV2D) {
            out->c = l->filters;
            int64_t ckk = mul_sat(x.c, (int64_t)l->kernel * l->kernel);
            snprintf(a, sizeof(a), "[%d, %" PRId64 ", %d, %d]", l->filters, x.c, l->kernel,
                     l->kernel);
            if (check_tensor(f, "filters", "the weight", a, mul_sat(l->filters, ckk)) != 0)
                return -1;
        }
        shape_str(*out, a, sizeof(a));
        /* only padding makes a window layer's output larger than its input */
        if (check_tensor(f, mshape_size(*out) > mshape_size(x) ? "padding" : "filters",
                         "the output", a, mshape_size(*out)) != 0)
            return -1;
        if (l->type == LAYER_CONV2D) {
            int64_t ckk = mul_sat(x.c, (int64_t)l->kernel * l->kernel);
            snprintf(a, sizeof(a), "[%" PRId64 ", %" PRId64 "]", ckk, out->h * out->w);
            return check_tensor(f, "kernel", "the unfolded input (C*k*k, output H*W)", a,
                                mul_sat(ckk, out->h * out->w));
        }
        return 0;
    case LAYER_ADD:
        for (int k = 1; k < n_in; k++)
            if (mshape_size(in[k]) != mshape_size(x) || in[k].flat != x.flat ||
                in[k].h != x.h || in[k].w != x.w) {
                shape_str(x, a, sizeof(a));
                shape_str(in[k], b, sizeof(b));
                return fault(f, "inputs", "inputs have different shapes %s and %s", a, b);
            }
        return 0;
    default: /* relu, batchnorm, dropout keep the shape */
        return 0;
    }
}

/* Every layer's output shape (shapes[n_layers]) of a built model_cfg. */
static int model_shapes(const model_cfg *cfg, mshape *shapes, shape_fault *f, int *bad)
{
    mshape model_in = { cfg->input[0], cfg->input[1], cfg->input[2], cfg->input_rank == 1 };
    for (int i = 0; i < cfg->n_layers; i++) {
        const layer_cfg *l = &cfg->layers[i];
        mshape in[LAYER_MAX_INPUTS];
        int n_in = l->n_inputs ? l->n_inputs : 1;
        for (int k = 0; k < n_in; k++) {
            int src = l->n_inputs ? l->inputs[k] : i - 1;
            in[k] = src < 0 ? model_in : shapes[src];
        }
        if (layer_shape(l, in, n_in, &shapes[i], f) != 0) {
            *bad = i;
            return -1;
        }
    }
    return 0;
}

/* ---- the checked group -> model_cfg ---- */

/* Finds `name` among layers[0..i) (an EARLIER layer); reports otherwise. */
static int find_input(vctx *c, config_setting_t *s, const char *key, const char *lname,
                      const model_cfg *cfg, int i, const char *name, int *out)
{
    for (int j = 0; j < i; j++)
        if (strcmp(cfg->layers[j].name, name) == 0) {
            *out = j;
            return 0;
        }
    const char *cand[256];
    int nc = 0;
    for (int j = 0; j < i && nc < 256; j++)
        cand[nc++] = cfg->layers[j].name;
    const char *best = str_closest(name, cand, nc);
    char hint[128] = "";
    if (best != NULL)
        snprintf(hint, sizeof(hint), " (did you mean '%s'?)", best);
    return schema_error(c, s, NULL, "%s (%s): '%s' is not an earlier layer%s", key, lname, name,
                        hint);
}

/* The setting a fault blames: the layer's key when it is written, else the
 * layer's group. */
static int shape_error(vctx *c, config_setting_t *layers, int i, const char *prefix,
                       const model_cfg *cfg, const shape_fault *f)
{
    config_setting_t *e = config_setting_get_elem(layers, (unsigned)i);
    config_setting_t *s = f->key ? config_setting_get_member(e, f->key) : NULL;
    char key[320];
    if (s != NULL)
        snprintf(key, sizeof(key), "%slayers[%d].%s", prefix, i, f->key);
    else
        snprintf(key, sizeof(key), "%slayers[%d]", prefix, i);
    return schema_error(c, s ? s : e, NULL, "%s (%s): %s", key, cfg->layers[i].name, f->msg);
}

/* The model's input [C, H, W] or [N], classes and loss. */
static int model_head_read(vctx *c, config_setting_t *g, const char *prefix, model_cfg *cfg)
{
    char key[300];
    config_setting_t *input = config_setting_get_member(g, "input");
    int rank = config_setting_length(input);
    snprintf(key, sizeof(key), "%sinput", prefix);
    if (rank == 2)
        return schema_error(c, input, key, "must be [C, H, W] or [N] (got 2 elements)");
    cfg->input_rank = rank;
    int64_t elements = 1;
    for (int i = 0; i < 3; i++) {
        cfg->input[i] = i < rank ? config_setting_get_int_elem(input, i) : 1;
        elements *= cfg->input[i];
    }
    if (elements > TT_MAX_TENSOR)
        return schema_error(c, input, key, "%" PRId64 " elements per sample, more than %d",
                            elements, TT_MAX_TENSOR);
    config_setting_lookup_int(g, "classes", &cfg->classes);
    const config_setting_t *loss = config_setting_get_member(g, "loss");
    const config_setting_t *ls = loss != NULL && config_setting_type(loss) == CONFIG_TYPE_GROUP
                                     ? config_setting_get_member(loss, "label_smoothing")
                                     : NULL;
    cfg->label_smoothing = ls != NULL ? (float)schema_number(ls) : 0.0f;
    return 0;
}

/* A layer's keys (the schema checked each) into l; its name must be new. */
static int layer_keys_read(vctx *c, config_setting_t *e, const char *key, const model_cfg *cfg,
                           int i, layer_cfg *l)
{
    const char *name = NULL, *type = NULL, *act = NULL;
    config_setting_lookup_string(e, "name", &name);
    config_setting_lookup_string(e, "type", &type);
    config_setting_t *ns = config_setting_get_member(e, "name");
    char nkey[320];
    snprintf(nkey, sizeof(nkey), "%s.name", key);
    if (name[0] == '\0' || strlen(name) >= TT_NAME_MAX)
        return schema_error(c, ns, nkey, "must be 1 to %d characters", TT_NAME_MAX - 1);
    for (int j = 0; j < i; j++)
        if (strcmp(cfg->layers[j].name, name) == 0)
            return schema_error(c, ns, nkey, "duplicate layer name '%s' (also layers[%d])", name,
                                j);
    strcpy(l->name, name);
    for (int t = 0; t < LAYER_TYPE_COUNT; t++)
        if (strcmp(type, layer_names[t]) == 0)
            l->type = (layer_type)t;
    l->bias = true;
    l->stride = 1;
    int v;
    if (config_setting_lookup_int(e, "units", &v)) l->units = v;
    if (config_setting_lookup_int(e, "filters", &v)) l->filters = v;
    if (config_setting_lookup_int(e, "kernel", &v)) l->kernel = v;
    if (config_setting_lookup_int(e, "stride", &v)) l->stride = v;
    if (config_setting_lookup_int(e, "padding", &v)) l->padding = v;
    if (config_setting_lookup_bool(e, "bias", &v)) l->bias = v != 0;
    if (config_setting_lookup_string(e, "activation", &act)) l->relu = strcmp(act, "relu") == 0;
    config_setting_t *s;
    if ((s = config_setting_get_member(e, "momentum")) != NULL) l->momentum = (float)schema_number(s);
    if ((s = config_setting_get_member(e, "epsilon")) != NULL) l->epsilon = (float)schema_number(s);
    if ((s = config_setting_get_member(e, "rate")) != NULL) l->rate = (float)schema_number(s);
    return 0;
}

/* A layer's inputs: indices of earlier layers; none named = the previous. */
static int layer_inputs_read(vctx *c, config_setting_t *e, const char *key, const model_cfg *cfg,
                             int i, layer_cfg *l)
{
    char ikey[320];
    config_setting_t *one = config_setting_get_member(e, "input");
    config_setting_t *many = config_setting_get_member(e, "inputs");
    if (one != NULL) {
        snprintf(ikey, sizeof(ikey), "%s.input", key);
        if (find_input(c, one, ikey, l->name, cfg, i, config_setting_get_string(one),
                       &l->inputs[0]) != 0)
            return -1;
        l->n_inputs = 1;
    } else if (many != NULL) {
        for (int k = 0; k < config_setting_length(many); k++) {
            snprintf(ikey, sizeof(ikey), "%s.inputs[%d]", key, k);
            if (find_input(c, config_setting_get_elem(many, (unsigned)k), ikey, l->name, cfg, i,
                           config_setting_get_string_elem(many, k), &l->inputs[k]) != 0)
                return -1;
        }
        l->n_inputs = config_setting_length(many);
    }
    return 0;
}

/* Every layer's shape follows from the input; the last holds `classes`
 * values. */
static int model_shapes_check(vctx *c, config_setting_t *layers, const char *prefix,
                              const model_cfg *cfg)
{
    int n = cfg->n_layers;
    mshape *shapes = calloc((size_t)n, sizeof(mshape));
    if (shapes == NULL)
        return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    shape_fault f;
    int bad = 0, rc = 0;
    if (model_shapes(cfg, shapes, &f, &bad) != 0) {
        rc = shape_error(c, layers, bad, prefix, cfg, &f);
    } else if (mshape_size(shapes[n - 1]) != cfg->classes) {
        char a[96];
        shape_str(shapes[n - 1], a, sizeof(a));
        const layer_cfg *l = &cfg->layers[n - 1];
        fault(&f, l->type == LAYER_DENSE ? "units" : l->type == LAYER_CONV2D ? "filters" : NULL,
              "the last layer's output %s has %" PRId64 " values, but classes = %d", a,
              mshape_size(shapes[n - 1]), cfg->classes);
        rc = shape_error(c, layers, n - 1, prefix, cfg, &f);
    }
    free(shapes);
    return rc != 0 ? -1 : 0;
}

static int model_cfg_from_setting(vctx *c, config_setting_t *g, const char *prefix,
                                  model_cfg *cfg)
{
    if (model_head_read(c, g, prefix, cfg) != 0)
        return -1;
    config_setting_t *layers = config_setting_get_member(g, "layers");
    int n = config_setting_length(layers);
    cfg->layers = calloc((size_t)n, sizeof(layer_cfg));
    if (cfg->layers == NULL)
        return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    cfg->n_layers = n;
    for (int i = 0; i < n; i++) {
        config_setting_t *e = config_setting_get_elem(layers, (unsigned)i);
        char key[300];
        snprintf(key, sizeof(key), "%slayers[%d]", prefix, i);
        if (layer_keys_read(c, e, key, cfg, i, &cfg->layers[i]) != 0 ||
            layer_inputs_read(c, e, key, cfg, i, &cfg->layers[i]) != 0)
            return -1;
    }
    return model_shapes_check(c, layers, prefix, cfg);
}

int model_check_batch(vctx *c, const config_setting_t *s, const char *key)
{
    const model_cfg *cfg = c->model;
    if (cfg == NULL || cfg->n_layers < 1)
        return 0; /* no model built: reported elsewhere */
    int64_t batch = config_setting_get_int(s);
    mshape *shapes = calloc((size_t)cfg->n_layers, sizeof(mshape));
    if (shapes == NULL)
        return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    shape_fault f;
    int bad = 0, at = -1;
    model_shapes(cfg, shapes, &f, &bad); /* checked when the model was built */
    int64_t most = (int64_t)cfg->input[0] * cfg->input[1] * cfg->input[2];
    for (int i = 0; i < cfg->n_layers; i++)
        if (mshape_size(shapes[i]) > most) {
            most = mshape_size(shapes[i]);
            at = i;
        }
    free(shapes);
    if (batch * most <= TT_MAX_TENSOR)
        return 0;
    char what[TT_NAME_MAX + 32];
    if (at < 0)
        snprintf(what, sizeof(what), "the model input");
    else
        snprintf(what, sizeof(what), "the output of layer '%s'", cfg->layers[at].name);
    return schema_error(c, s, key, "%" PRId64 " samples of %s (%" PRId64 " values each) are "
                        "%" PRId64 " values, more than %d", batch, what, most, batch * most,
                        TT_MAX_TENSOR);
}

int model_parse_key(vctx *c, config_setting_t *s, const char *key)
{
    int t = config_setting_type(s);
    char prefix[320];
    snprintf(prefix, sizeof(prefix), "%s.", key);
    if (t == CONFIG_TYPE_STRING) {
        if (schema_resolve_path(c, s, -1, key) != 0)
            return -1;
        const char *abs = config_setting_get_string(s);
        if (model_cfg_load(abs, c->model, c->err) == 0)
            return 0;
        /* Reading errors name the --set or the job line; errors inside the
         * model file already name that file. */
        if (strncmp(c->err->msg, "cannot read ", 12) == 0) {
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", c->err->msg);
            err_clear(c->err);
            return schema_error(c, s, key, "%s", msg);
        }
        return -1;
    }
    if (t != CONFIG_TYPE_GROUP)
        return schema_error(c, s, key, "expected a model file name or a group { ... } (got %s)",
                            t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64 ? "an integer"
                            : t == CONFIG_TYPE_FLOAT                       ? "a float"
                            : t == CONFIG_TYPE_BOOL                        ? "a boolean"
                            : t == CONFIG_TYPE_ARRAY                       ? "an array"
                                                                           : "a list");
    if (schema_check_group(c, s, &model_spec, key) != 0)
        return -1;
    return model_cfg_from_setting(c, s, prefix, c->model);
}

/* ---- model files ---- */

int model_cfg_load(const char *path, model_cfg *model, tt_err *err)
{
    memset(model, 0, sizeof(*model));
    char abs[4096], display[4096];
    if (path_resolve(NULL, path, abs, sizeof(abs)) != 0)
        return err_set(err, TT_ERR_USAGE, "%s: path too long", path);
    if (path[0] == '/')
        schema_display_path(abs, display, sizeof(display));
    else
        snprintf(display, sizeof(display), "%s", path);
    snprintf(model->path, sizeof(model->path), "%s", abs);

    config_t cfg;
    config_init(&cfg);
    config_set_auto_convert(&cfg, CONFIG_TRUE);
    vctx c = { .file = display, .real_path = abs, .base = abs, .cfg = &cfg, .err = err,
               .model = model };
    int rc = schema_read_file(&cfg, abs, display, err);
    if (rc == 0)
        rc = schema_check_group(&c, config_root_setting(&cfg), &model_spec, "");
    if (rc == 0)
        rc = model_cfg_from_setting(&c, config_root_setting(&cfg), "", model);
    config_destroy(&cfg);
    if (rc != 0) {
        model_cfg_free(model);
        snprintf(model->path, sizeof(model->path), "%s", abs);
    }
    return rc;
}

void model_cfg_free(model_cfg *model)
{
    if (model == NULL)
        return;
    free(model->layers);
    memset(model, 0, sizeof(*model));
}

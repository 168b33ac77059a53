/* model_cfg.c - model files (SPEC 4): the checked libconfig group -> model_cfg,
 * with the graph rules (unique names, inputs name EARLIER layers, so the graph is
 * acyclic by construction) and the shape rules of every layer type, so a bad
 * model is refused before anything runs. */
#include <libconfig.h>
#include <stdlib.h>
#include <string.h>

#include "config/schema.h"
#include "util/strutil.h"

static const char *const layer_names[LAYER_TYPE_COUNT] = {
    "dense", "conv2d", "maxpool", "avgpool", "global_avgpool",
    "relu", "batchnorm", "dropout", "flatten", "add",
};

const char *layer_type_name(layer_type t)
{
    return (t >= 0 && t < LAYER_TYPE_COUNT) ? layer_names[t] : "?";
}

/* A per-sample shape: image [C, H, W] (flat = false) or vector [C] (flat = true). */
typedef struct {
    int c, h, w;
    bool flat;
} mshape;

static void shape_str(mshape s, char *out, size_t n)
{
    if (s.flat)
        snprintf(out, n, "[%d]", s.c);
    else
        snprintf(out, n, "[%d, %d, %d]", s.c, s.h, s.w);
}

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
    return schema_error(c, s, NULL, "%s (%s): input '%s' is not an earlier layer%s", key,
                        lname, name, hint);
}

static int layer_shape(vctx *c, config_setting_t *g, const char *key, const layer_cfg *l,
                       const mshape *in, int n_in, mshape *out)
{
    char a[64], b[64];
    mshape x = in[0];
    *out = x;
    switch (l->type) {
    case LAYER_DENSE:
        *out = (mshape){ l->units, 1, 1, true };
        return 0;
    case LAYER_FLATTEN:
        *out = (mshape){ x.c * x.h * x.w, 1, 1, true };
        return 0;
    case LAYER_GLOBAL_AVGPOOL:
    case LAYER_CONV2D:
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
        if (x.flat) {
            shape_str(x, a, sizeof(a));
            return schema_error(c, g, NULL, "%s (%s): %s needs an image input [C, H, W] "
                                "(got %s)", key, l->name, layer_type_name(l->type), a);
        }
        if (l->type == LAYER_GLOBAL_AVGPOOL) {
            *out = (mshape){ x.c, 1, 1, true };
            return 0;
        }
        if (x.h + 2 * l->padding < l->kernel || x.w + 2 * l->padding < l->kernel) {
            shape_str(x, a, sizeof(a));
            return schema_error(c, g, NULL, "%s (%s): kernel %d is larger than the input %s "
                                "with padding %d", key, l->name, l->kernel, a, l->padding);
        }
        out->h = (x.h + 2 * l->padding - l->kernel) / l->stride + 1;
        out->w = (x.w + 2 * l->padding - l->kernel) / l->stride + 1;
        if (l->type == LAYER_CONV2D)
            out->c = l->filters;
        return 0;
    case LAYER_ADD:
        for (int k = 1; k < n_in; k++)
            if (in[k].c * in[k].h * in[k].w != x.c * x.h * x.w || in[k].flat != x.flat ||
                in[k].h != x.h || in[k].w != x.w) {
                shape_str(x, a, sizeof(a));
                shape_str(in[k], b, sizeof(b));
                return schema_error(c, g, NULL, "%s (%s): inputs have different shapes %s "
                                    "and %s", key, l->name, a, b);
            }
        return 0;
    default: /* relu, batchnorm, dropout keep the shape */
        return 0;
    }
}

int model_cfg_from_setting(vctx *c, config_setting_t *g, const char *prefix, model_cfg *cfg)
{
    char key[300];
    config_setting_t *input = config_setting_get_member(g, "input");
    int rank = config_setting_length(input);
    if (rank == 2) {
        snprintf(key, sizeof(key), "%sinput", prefix);
        return schema_error(c, input, key, "must be [C, H, W] or [N] (got 2 elements)");
    }
    cfg->input_rank = rank;
    for (int i = 0; i < 3; i++)
        cfg->input[i] = i < rank ? config_setting_get_int_elem(input, i) : 1;
    config_setting_lookup_int(g, "classes", &cfg->classes);

    config_setting_t *layers = config_setting_get_member(g, "layers");
    int n = config_setting_length(layers);
    cfg->layers = calloc((size_t)n, sizeof(layer_cfg));
    if (cfg->layers == NULL)
        return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    cfg->n_layers = n;
    mshape *shapes = calloc((size_t)n, sizeof(mshape));
    if (shapes == NULL)
        return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    mshape model_in = { cfg->input[0], cfg->input[1], cfg->input[2], rank == 1 };

    int rc = -1;
    for (int i = 0; i < n; i++) {
        config_setting_t *e = config_setting_get_elem(layers, (unsigned)i);
        layer_cfg *l = &cfg->layers[i];
        snprintf(key, sizeof(key), "%slayers[%d]", prefix, i);
        const char *name = NULL, *type = NULL, *act = NULL;
        config_setting_lookup_string(e, "name", &name);
        config_setting_lookup_string(e, "type", &type);
        config_setting_t *ns = config_setting_get_member(e, "name");
        if (name[0] == '\0' || strlen(name) >= TT_NAME_MAX) {
            char nkey[320];
            snprintf(nkey, sizeof(nkey), "%s.name", key);
            schema_error(c, ns, nkey, "must be 1 to %d characters", TT_NAME_MAX - 1);
            goto out;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(cfg->layers[j].name, name) == 0) {
                schema_error(c, ns, NULL, "%s: duplicate layer name '%s' (also layers[%d])", key,
                             name, j);
                goto out;
            }
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

        /* inputs: indices of earlier layers; none named = the previous layer */
        mshape in[LAYER_MAX_INPUTS] = {{0}};
        const char *one = NULL;
        config_setting_t *many = config_setting_get_member(e, "inputs");
        if (config_setting_lookup_string(e, "input", &one)) {
            if (find_input(c, config_setting_get_member(e, "input"), key, name, cfg, i, one,
                           &l->inputs[0]) != 0)
                goto out;
            l->n_inputs = 1;
        } else if (many != NULL) {
            for (int k = 0; k < config_setting_length(many); k++) {
                const char *nm = config_setting_get_string_elem(many, k);
                if (find_input(c, many, key, name, cfg, i, nm, &l->inputs[k]) != 0)
                    goto out;
            }
            l->n_inputs = config_setting_length(many);
        }
        int n_in = l->n_inputs ? l->n_inputs : 1;
        for (int k = 0; k < n_in; k++) {
            int src = l->n_inputs ? l->inputs[k] : i - 1;
            in[k] = src < 0 ? model_in : shapes[src];
        }
        if (layer_shape(c, e, key, l, in, n_in, &shapes[i]) != 0)
            goto out;
    }
    mshape last = shapes[n - 1];
    int size = last.c * last.h * last.w;
    if (size != cfg->classes) {
        char a[64];
        shape_str(last, a, sizeof(a));
        snprintf(key, sizeof(key), "%slayers[%d]", prefix, n - 1);
        schema_error(c, config_setting_get_elem(layers, (unsigned)(n - 1)), NULL,
                     "%s (%s): the last layer's output %s has %d values, but classes = %d", key,
                     cfg->layers[n - 1].name, a, size, cfg->classes);
        goto out;
    }
    rc = 0;
out:
    free(shapes);
    return rc;
}

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

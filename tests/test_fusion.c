/* test_fusion.c - model_build fuses a relu layer into the layer it reads
 * (dense, conv2d, batchnorm, add) when nothing else reads that layer; the
 * fused model must compute exactly what the unfused graph computes.
 *
 * The reference is the same graph with a dropout of rate 0 (the identity, as
 * y = x * 1) before every relu, which keeps the relu layers apart. Loss,
 * logits, gradients and batchnorm running statistics must be bitwise equal:
 * fusion moves where relu and its mask are applied, not the arithmetic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "tt_ref.h"
#include "tt_test.h"
#include "util/rng.h"

/* A residual block with every fusable producer, plus relus that may not be
 * fused: on the data, on bn1 (which "both" reads too), on another relu. %s is the
 * separator: "" for the fused model, a rate-0 dropout for the reference. */
static const char *MODEL =
    "input = [3, 8, 8]; classes = 5;\n"
    "layers = (\n"
    " { name = \"r_in\"; type = \"relu\"; },\n"
    " { name = \"conv0\"; type = \"conv2d\"; filters = 8; kernel = 3; padding = 1; bias = false; },\n"
    " { name = \"bn0\"; type = \"batchnorm\"; },\n%s"
    " { name = \"relu0\"; type = \"relu\"; },\n"
    " { name = \"conv1\"; type = \"conv2d\"; filters = 8; kernel = 3; padding = 1; },\n%s"
    " { name = \"relu1\"; type = \"relu\"; },\n"
    " { name = \"sum\"; type = \"add\"; inputs = [\"relu1\", \"relu0\"]; },\n%s"
    " { name = \"relu2\"; type = \"relu\"; },\n"
    " { name = \"bn1\"; type = \"batchnorm\"; },\n"
    " { name = \"shared\"; type = \"relu\"; },\n"
    " { name = \"again\"; type = \"relu\"; },\n"
    " { name = \"both\"; type = \"add\"; inputs = [\"again\", \"bn1\"]; },\n"
    " { name = \"fc0\"; type = \"dense\"; units = 16; },\n%s"
    " { name = \"relu3\"; type = \"relu\"; },\n"
    " { name = \"fc1\"; type = \"dense\"; units = 5; }\n"
    ");\n";

static const char *SEP =
    " { name = \"id%d\"; type = \"dropout\"; rate = 0.0; },\n";

static char dir[256];

static int build(bool fused, model_cfg *mc, model_t *m)
{
    char seps[4][96], text[4096], path[320];
    for (int i = 0; i < 4; i++)
        snprintf(seps[i], sizeof(seps[i]), fused ? "" : SEP, i);
    snprintf(text, sizeof(text), MODEL, seps[0], seps[1], seps[2], seps[3]);
    snprintf(path, sizeof(path), "%s/%s.cfg", dir, fused ? "fused" : "apart");
    tt_write_file(NULL, path, text);
    tt_err err = {0};
    if (model_cfg_load(path, mc, &err) != 0 || model_build(mc, shape3_make(3, 8, 8), m, &err) != 0) {
        tt_diag("%s: %s", path, err.msg);
        return -1;
    }
    return 0;
}

static const layer_t *find(const model_t *m, const char *name)
{
    for (int i = 0; i < m->n_layers; i++)
        if (strcmp(m->layers[i].cfg->name, name) == 0)
            return &m->layers[i];
    return NULL;
}

/* One training step and one inference step; everything they produce. */
typedef struct {
    double loss;
    float *grads, *params, *logits;
} outcome;

/* The parameters of `from` (initialised from a seed) laid out for m, by
 * name: initialisation streams follow layer indices, which the reference's
 * extra dropout layers shift. */
static float *params_by_name(const model_t *m, const model_t *from)
{
    float *src = calloc(from->n_floats, sizeof(float)), *dst = calloc(m->n_floats, sizeof(float));
    model_init_params(from, 3, src);
    for (int i = 0; i < m->n_params; i++)
        for (int j = 0; j < from->n_params; j++)
            if (strcmp(m->params[i].name, from->params[j].name) == 0)
                memcpy(dst + m->params[i].offset, src + from->params[j].offset,
                       m->params[i].count * sizeof(float));
    free(src);
    return dst;
}

static int run(const model_t *m, const model_t *init_from, outcome *o)
{
    const int n = 6;
    tt_err err = {0};
    backend_t *be = tt_cpu_backend(2);
    tower_t tw;
    if (be == NULL || tower_create(m, be, n, &tw, &err) != 0) {
        tt_diag("tower: %s", err.msg);
        if (be)
            be->destroy(be);
        return -1;
    }
    float *host = params_by_name(m, init_from), x[6 * 3 * 8 * 8];
    int32_t labels[6];
    rng_t rng = rng_make(11, 0, 0);
    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
        x[i] = (float)rng_below(&rng, 2001) / 1000.0f - 1.0f;
    for (int i = 0; i < n; i++)
        labels[i] = (int32_t)rng_below(&rng, 5);
    tower_set_params(&tw, host);
    tower_load_batch(&tw, n, x, labels);
    tower_step(&tw, n, true, true, 5);
    o->loss = tw.loss_sum;
    o->grads = malloc(m->n_trainable * sizeof(float));
    o->params = host;
    be->download(be, o->grads, tw.grads, m->n_trainable * sizeof(float));
    tower_get_params(&tw, o->params); /* running statistics updated */
    const float *logits = tower_step(&tw, n, false, false, 6);
    o->logits = malloc((size_t)n * 5 * sizeof(float));
    be->download(be, o->logits, logits, (size_t)n * 5 * sizeof(float));
    tower_free(&tw);
    be->destroy(be);
    return 0;
}

int main(void)
{
    tt_tmpdir_make(dir, sizeof(dir), "fusion");
    model_cfg fc, ac;
    model_t fm, am;
    if (!tt_ok(build(true, &fc, &fm) == 0 && build(false, &ac, &am) == 0,
               "both models build"))
        return tt_done();

    const char *fused[] = {"relu0", "relu1", "relu2", "relu3"};
    const char *producers[] = {"bn0", "conv1", "sum", "fc0"};
    bool ok = true;
    for (int i = 0; i < 4; i++)
        ok = ok && find(&fm, fused[i])->relu_fused && find(&fm, producers[i])->relu_out;
    tt_ok(ok, "relu after batchnorm, conv2d, add and dense is fused into it");
    tt_ok(!find(&fm, "r_in")->relu_fused && !find(&fm, "shared")->relu_fused &&
              !find(&fm, "again")->relu_fused && !find(&fm, "bn1")->relu_out,
          "not fused: a relu on the data, on a layer read twice, on a relu");
    bool none = true;
    for (int i = 0; i < am.n_layers; i++)
        none = none && !am.layers[i].relu_fused;
    tt_ok(none && am.n_trainable == fm.n_trainable && am.n_floats == fm.n_floats,
          "the reference keeps every relu apart, same parameters");

    outcome f, a;
    if (tt_ok(run(&fm, &fm, &f) == 0 && run(&am, &fm, &a) == 0, "both models train a step")) {
        tt_ok(f.loss == a.loss && f.loss > 0, "loss bitwise equal (%.9g vs %.9g)", f.loss, a.loss);
        tt_ok(memcmp(f.grads, a.grads, fm.n_trainable * sizeof(float)) == 0,
              "every gradient bitwise equal");
        bool stats = true;
        for (int i = 0; i < fm.n_params; i++)
            stats = stats && memcmp(f.params + fm.params[i].offset, a.params + am.params[i].offset,
                                    fm.params[i].count * sizeof(float)) == 0;
        tt_ok(stats, "parameters and batchnorm running statistics bitwise equal");
        tt_ok(memcmp(f.logits, a.logits, 6 * 5 * sizeof(float)) == 0,
              "inference logits bitwise equal");
        float gmax = 0;
        for (size_t i = 0; i < fm.n_trainable; i++)
            gmax = f.grads[i] > gmax ? f.grads[i] : gmax;
        tt_ok(gmax > 0, "the gradients are not all zero (%g)", gmax);
        outcome *both[2] = {&f, &a};
        for (int k = 0; k < 2; k++) {
            free(both[k]->grads);
            free(both[k]->params);
            free(both[k]->logits);
        }
    }
    model_free(&fm);
    model_free(&am);
    model_cfg_free(&fc);
    model_cfg_free(&ac);
    tt_tmpdir_remove(dir);
    return tt_done();
}

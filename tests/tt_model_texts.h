/* tt_model_texts.h - the small models the blocked-layout tests train
 * (test_blocked_layout.c on the CPU, test_sim_blocked.c on sim), how they
 * build them, their two training steps on a tower and its results, and
 * how they read a layer's output back in NCHW whatever its layout. */
#ifndef TT_MODEL_TEXTS_H
#define TT_MODEL_TEXTS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "tt_ref.h"
#include "tt_test.h"

static const char *RESNET =
    "input = [3, 8, 8]; classes = 5;\n"
    "layers = (\n"
    " { name = \"c0\"; type = \"conv2d\"; filters = 16; kernel = 3; padding = 1; bias = false; },\n"
    " { name = \"b0\"; type = \"batchnorm\"; },\n"
    " { name = \"r0\"; type = \"relu\"; },\n"
    " { name = \"c1\"; type = \"conv2d\"; filters = 16; kernel = 3; padding = 1; bias = false; },\n"
    " { name = \"b1\"; type = \"batchnorm\"; },\n"
    " { name = \"r1\"; type = \"relu\"; },\n"
    " { name = \"c2\"; type = \"conv2d\"; filters = 16; kernel = 3; padding = 1; bias = false; },\n"
    " { name = \"b2\"; type = \"batchnorm\"; },\n"
    " { name = \"a0\"; type = \"add\"; inputs = [\"b2\", \"r0\"]; },\n"
    " { name = \"r2\"; type = \"relu\"; },\n"
    " { name = \"c3\"; type = \"conv2d\"; filters = 32; kernel = 3; stride = 2; padding = 1; bias = false; },\n"
    " { name = \"b3\"; type = \"batchnorm\"; },\n"
    " { name = \"p0\"; type = \"conv2d\"; input = \"r2\"; filters = 32; kernel = 1; stride = 2; bias = false; },\n"
    " { name = \"pb\"; type = \"batchnorm\"; },\n"
    " { name = \"a1\"; type = \"add\"; inputs = [\"b3\", \"pb\"]; },\n"
    " { name = \"r3\"; type = \"relu\"; },\n"
    " { name = \"g\"; type = \"global_avgpool\"; },\n"
    " { name = \"fc\"; type = \"dense\"; units = 5; }\n"
    ");\n";

static const char *LENET =
    "input = [1, 16, 16]; classes = 4;\n"
    "layers = (\n"
    " { name = \"c0\"; type = \"conv2d\"; filters = 6; kernel = 3; padding = 1; activation = \"relu\"; },\n"
    " { name = \"m0\"; type = \"maxpool\"; kernel = 2; },\n"
    " { name = \"c1\"; type = \"conv2d\"; filters = 16; kernel = 3; padding = 1; activation = \"relu\"; },\n"
    " { name = \"m1\"; type = \"maxpool\"; kernel = 3; stride = 2; padding = 1; },\n"
    " { name = \"c2\"; type = \"conv2d\"; filters = 16; kernel = 1; },\n"
    " { name = \"m2\"; type = \"maxpool\"; kernel = 3; stride = 1; padding = 1; },\n"
    " { name = \"v0\"; type = \"avgpool\"; kernel = 3; stride = 2; padding = 1; },\n"
    " { name = \"c3\"; type = \"conv2d\"; filters = 16; kernel = 1; activation = \"relu\"; },\n"
    " { name = \"v1\"; type = \"avgpool\"; kernel = 2; },\n"
    " { name = \"fc\"; type = \"dense\"; units = 4; }\n"
    ");\n";

/* A pool of 32 channels (two blocks), in either order. */
static const char *WIDE_POOL =
    "input = [3, 8, 8]; classes = 4;\n"
    "layers = (\n"
    " { name = \"c0\"; type = \"conv2d\"; filters = 32; kernel = 3; padding = 1; activation = \"relu\"; },\n"
    " { name = \"m0\"; type = \"maxpool\"; kernel = 2; },\n"
    " { name = \"c1\"; type = \"conv2d\"; filters = 16; kernel = 3; padding = 1; activation = \"relu\"; },\n"
    " { name = \"g\"; type = \"global_avgpool\"; },\n"
    " { name = \"fc\"; type = \"dense\"; units = 4; }\n"
    ");\n";

static bool load_model(const char *text, model_cfg *cfg, model_t *m, tt_err *err)
{
    char path[] = "/tmp/tt_blocked_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return false;
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    bool ok = model_cfg_load(path, cfg, err) == 0;
    unlink(path);
    if (!ok)
        return false;
    shape3 in = shape3_make(cfg->input[0], cfg->input[1], cfg->input[2]);
    return model_build(cfg, in, m, err) == 0;
}

static int layer_index(const model_t *m, const char *name)
{
    for (int i = 0; i < m->n_layers; i++)
        if (strcmp(m->cfg->layers[i].name, name) == 0)
            return i;
    return -1;
}

/* Layer i's output on tower t, read as the backend's layout says (the
 * blocked one in nChw16c or NHWC order, bf16 where blocked_bf16) into NCHW
 * floats. */
static float *activation_nchw(const tower_t *t, int i, int n)
{
    const model_t *m = t->model;
    backend_t *be = t->be;
    shape3 s = m->layers[i].out;
    int P = s.h * s.w;
    bool blk = t->blocked[i], half = blk && be->blocked_bf16;
    size_t count = blk ? tt_blocked_floats(n, s.c, P) : (size_t)n * s.c * P;
    unsigned char *raw = malloc(count * (half ? 2 : 4));
    float *out = malloc((size_t)n * s.c * P * sizeof(float));
    be->download(be, raw, t->act[i], count * (half ? 2 : 4));
    tt_blocked_strides st = tt_blocked_strides_of(s.c, P, be->blocked_nhwc);
    for (int k = 0; k < n; k++)
        for (int c = 0; c < s.c; c++)
            for (int p = 0; p < P; p++) {
                size_t at = blk ? k * st.img + (size_t)(c / 16) * st.cstride + p * st.pstride + c % 16
                                : ((size_t)k * s.c + c) * P + p;
                float v;
                if (half) {
                    uint32_t u = (uint32_t)((uint16_t *)raw)[at] << 16;
                    memcpy(&v, &u, 4);
                } else {
                    memcpy(&v, raw + at * 4, 4);
                }
                out[((size_t)k * s.c + c) * P + p] = v;
            }
    free(raw);
    return out;
}

typedef struct {
    float *logits, *grads, *params;
    double loss;
    float *probe; /* the probed layer's output after the last step, NCHW */
} step_result;

/* Inputs of two steps of n samples, labels cycling over the classes. */
static void make_batch(const model_t *m, int n, float **x, int32_t **y)
{
    size_t isz = shape3_size(m->input);
    *x = malloc(2 * (size_t)n * isz * sizeof(float));
    *y = malloc(2 * (size_t)n * sizeof(int32_t));
    uint64_t s = 12345;
    for (size_t i = 0; i < 2 * (size_t)n * isz; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        (*x)[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    for (int i = 0; i < 2 * n; i++)
        (*y)[i] = i % m->cfg->classes;
}

/* Two training steps (so the running statistics move twice) of a tower
 * of n samples, parameters from seed 7, on make_batch's x and y, on be: a
 * fresh backend (NULL: false), which it destroys, in its blocked layout
 * where `blocked` and the backend has one. Fills r (r->probe: layer
 * `probe`'s output), the tower's layout choice in chosen and, where
 * shared_bufs is not NULL, its count of activation buffers; false where
 * the tower cannot be made. */
static bool train_two_steps(backend_t *be, bool blocked, const model_t *m, const float *x,
                            const int32_t *y, int n, const char *probe, step_result *r,
                            bool *chosen, int *shared_bufs)
{
    tt_err err = {0};
    tower_t t;
    if (be == NULL)
        return false;
    be->blocked_layout = be->blocked_layout && blocked;
    if (tower_create(m, be, n, &t, &err) != 0) {
        be->destroy(be);
        return false;
    }
    float *host = malloc(m->n_floats * sizeof(float));
    model_init_params(m, 7, host);
    tower_set_params(&t, host);
    free(host);
    size_t classes = (size_t)m->cfg->classes;
    r->logits = malloc((size_t)n * classes * sizeof(float));
    r->grads = malloc(m->n_trainable * sizeof(float));
    r->params = malloc(m->n_floats * sizeof(float));
    for (int step = 0; step < 2; step++) {
        tower_load_batch(&t, n, x + (size_t)step * n * shape3_size(m->input), y + step * n);
        const float *logits = tower_step(&t, n, true, true, 3);
        be->download(be, r->logits, logits, (size_t)n * classes * sizeof(float));
    }
    be->download(be, r->grads, t.grads, m->n_trainable * sizeof(float));
    tower_get_params(&t, r->params);
    r->loss = t.loss_sum;
    r->probe = activation_nchw(&t, layer_index(m, probe), n);
    memcpy(chosen, t.blocked, (size_t)m->n_layers * sizeof(bool));
    if (shared_bufs != NULL)
        *shared_bufs = t.n_act_bufs;
    tower_free(&t);
    be->destroy(be);
    return true;
}

static void free_result(step_result *r)
{
    free(r->logits);
    free(r->grads);
    free(r->params);
    free(r->probe);
}

/* The model of `text` (a failed check where it does not load) and
 * make_batch's two steps of n samples for it; free with
 * model_and_batch_free. */
static bool model_and_batch(const char *label, const char *text, int n, model_cfg *cfg,
                            model_t *m, float **x, int32_t **y)
{
    tt_err err = {0};
    if (!tt_ok(load_model(text, cfg, m, &err), "%s: model loads %s", label, err.msg))
        return false;
    make_batch(m, n, x, y);
    return true;
}

static void model_and_batch_free(model_cfg *cfg, model_t *m, float *x, int32_t *y)
{
    free(x);
    free(y);
    model_free(m);
    model_cfg_free(cfg);
}

/* The layouts chosen: none (a tower told not to use the blocked layout)
 * all NCHW, and chosen as `expect` says ("name=0|1" pairs). */
static void check_layouts(const char *label, const model_t *m, const char *const *expect,
                          const bool *none, const bool *chosen)
{
    bool nchw_only = true;
    for (int i = 0; i < m->n_layers; i++)
        nchw_only = nchw_only && !none[i];
    tt_ok(nchw_only, "%s: a backend told not to keeps every activation NCHW", label);
    for (const char *const *e = expect; *e != NULL; e++) {
        char name[32];
        snprintf(name, sizeof(name), "%s", *e);
        char *eq = strchr(name, '=');
        *eq = '\0';
        int i = layer_index(m, name);
        tt_ok(i >= 0 && chosen[i] == (eq[1] == '1'), "%s: layer %s's output %s", label, name,
              eq[1] == '1' ? "blocked" : "NCHW");
    }
}

/* The probe of a blocked tower in bf16 (blk), read as bf16, is the NCHW
 * tower's float32 activation (ref) within bf16's precision: misread as
 * float32 it would be nonsense. */
static void check_probe_bf16(const char *label, const model_t *m, int n, const char *probe,
                             const bool *chosen, const step_result *blk, const step_result *ref)
{
    int pi = layer_index(m, probe);
    size_t np = (size_t)n * shape3_size(m->layers[pi].out), not_bf16 = 0;
    for (size_t q = 0; q < np; q++) {
        uint32_t u;
        memcpy(&u, &blk->probe[q], 4);
        not_bf16 += (u & 0xffffu) != 0;
    }
    double ea = tt_rel_err_f(blk->probe, ref->probe, np);
    tt_ok(chosen[pi] && ea < 3e-2 && not_bf16 == 0,
          "%s: blocked activation %s held in bf16, within bf16's precision of NCHW's float32 "
          "(%.1e)", label, probe, ea);
}

/* blk within bf16's precision of ref: 3e-2 of the largest value (a few
 * bf16 steps; test_blocked_layout.c says why), grad_tol for the gradients */
static void within_bf16(const char *label, const char *what, const model_t *m, int n,
                        const step_result *blk, const step_result *ref, double grad_tol)
{
    size_t nl = (size_t)n * m->cfg->classes;
    double el = tt_rel_err_f(blk->logits, ref->logits, nl),
           eg = tt_rel_err_f(blk->grads, ref->grads, m->n_trainable),
           ep = tt_rel_err_f(blk->params, ref->params, m->n_floats);
    tt_ok(el < 3e-2 && eg < grad_tol && ep < 3e-2 && fabs(blk->loss - ref->loss) < 3e-2 * fabs(ref->loss),
          "%s: logits, loss, gradients and parameters within bf16's precision of %s "
          "(%.1e, %.1e, %.1e)", label, what, el, eg, ep);
}

#endif

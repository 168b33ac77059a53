/* tt_model_texts.h - the small models the blocked-layout tests train
 * (test_blocked_layout.c on the CPU, test_sim_blocked.c on sim), and how
 * they build them and read a layer's output back in NCHW whatever its
 * layout. */
#ifndef TT_MODEL_TEXTS_H
#define TT_MODEL_TEXTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"

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

#endif

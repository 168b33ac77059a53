/* test_layers.c - every layer type through its layer_ops on the CPU backend,
 * against a float64 re-implementation written here with plain loops:
 *   (a) the output shape by PyTorch's rules, and forward vs the reference;
 *   (b) backward with dy = r (loss = sum(y * r)) vs central finite differences
 *       of the float64 reference, for dx and every parameter;
 *   (c) 1, 2 and 5 threads give the same bits;
 *   (d) a fused activation gives the bits of a separate relu layer;
 *   (e) dropout: the mask, its scaling, seeds, threads and inference;
 *   (f) PyTorch's parameter names, shapes and default initialisation;
 *   (g) setup errors;
 *   (h) a whole model through tower_create/tower_step vs finite differences
 *       of the float64 mean softmax cross-entropy.
 * (a)-(e) and (h) at every instruction-set level the CPU has (AVX-512,
 * AVX2, plain). Shapes are small and odd so that padding, strides, partial batches and
 * uneven splits over the threads all show up. Errors are tt_rel_err's
 * max|a - ref| / max|ref| over a tensor.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_isa.h"
#ifdef HAVE_DNNL
#include "backend/cpu/conv_dnnl.h"
#endif
#include "layers/layer.h"
#include "model/model.h"
#include "tt_ref.h"
#include "tt_test.h"
#include "util/rng.h"

#define FD_EPS 1e-6
#define TOL_FWD 1e-5
#define TOL_BWD 1e-4
#define TOL_MODEL 1e-3

/* ---- the float64 reference forward, one layer ---- */

/* Output size of a window, written out again here (PyTorch's floor rule). */
static int ref_out_size(int in, int k, int s, int p)
{
    return (int)floor((double)(in + 2 * p - k) / s) + 1;
}

static void ref_dense(const layer_t *l, int n, const double *x, double *const *p, double *y)
{
    const layer_cfg *c = l->cfg;
    size_t in = shape3_size(l->in[0]);
    int out = c->units;
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = c->bias ? p[1][o] : 0.0;
            for (size_t k = 0; k < in; k++)
                s += p[0][(size_t)o * in + k] * x[(size_t)i * in + k];
            if (c->relu && s < 0.0)
                s = 0.0;
            y[(size_t)i * out + o] = s;
        }
}

static void ref_conv(const layer_t *l, int n, const double *x, double *const *p, double *y)
{
    const layer_cfg *c = l->cfg;
    int C = l->in[0].c, H = l->in[0].h, W = l->in[0].w, F = c->filters, K = c->kernel;
    int S = c->stride, P = c->padding;
    int OH = ref_out_size(H, K, S, P), OW = ref_out_size(W, K, S, P);
    for (int i = 0; i < n; i++)
        for (int f = 0; f < F; f++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    double s = c->bias ? p[1][f] : 0.0;
                    for (int ch = 0; ch < C; ch++)
                        for (int ky = 0; ky < K; ky++)
                            for (int kx = 0; kx < K; kx++) {
                                int iy = oy * S - P + ky, ix = ox * S - P + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                    continue;
                                s += p[0][((f * C + ch) * K + ky) * K + kx] *
                                     x[(((size_t)i * C + ch) * H + iy) * W + ix];
                            }
                    if (c->relu && s < 0.0)
                        s = 0.0;
                    y[(((size_t)i * F + f) * OH + oy) * OW + ox] = s;
                }
}

/* max: padding never wins (PyTorch pads with -inf); avg: sum / (k*k),
 * counting padded zeros (count_include_pad = True). */
static void ref_pool(const layer_t *l, int n, const double *x, double *y, int is_max)
{
    const layer_cfg *c = l->cfg;
    int C = l->in[0].c, H = l->in[0].h, W = l->in[0].w, K = c->kernel;
    int S = c->stride, P = c->padding;
    int OH = ref_out_size(H, K, S, P), OW = ref_out_size(W, K, S, P);
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < C; ch++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    double s = 0.0, best = -INFINITY;
                    for (int ky = 0; ky < K; ky++)
                        for (int kx = 0; kx < K; kx++) {
                            int iy = oy * S - P + ky, ix = ox * S - P + kx;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                continue;
                            double v = x[(((size_t)i * C + ch) * H + iy) * W + ix];
                            s += v;
                            if (v > best)
                                best = v;
                        }
                    y[(((size_t)i * C + ch) * OH + oy) * OW + ox] =
                        is_max ? best : s / (K * K);
                }
}

static void ref_forward(const layer_t *l, int n, const double *x, double *const *p, double *y)
{
    size_t isz = shape3_size(l->in[0]);
    switch (l->cfg->type) {
    case LAYER_DENSE:
        ref_dense(l, n, x, p, y);
        break;
    case LAYER_CONV2D:
        ref_conv(l, n, x, p, y);
        break;
    case LAYER_MAXPOOL:
        ref_pool(l, n, x, y, 1);
        break;
    case LAYER_AVGPOOL:
        ref_pool(l, n, x, y, 0);
        break;
    case LAYER_GLOBAL_AVGPOOL: {
        int C = l->in[0].c;
        size_t plane = (size_t)l->in[0].h * l->in[0].w;
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < C; ch++) {
                double s = 0.0;
                for (size_t q = 0; q < plane; q++)
                    s += x[((size_t)i * C + ch) * plane + q];
                y[(size_t)i * C + ch] = s / (double)plane;
            }
        break;
    }
    case LAYER_RELU:
        for (size_t q = 0; q < (size_t)n * isz; q++)
            y[q] = x[q] > 0.0 ? x[q] : 0.0;
        break;
    case LAYER_FLATTEN:
        memcpy(y, x, (size_t)n * isz * sizeof(double));
        break;
    default:
        break;
    }
}

/* The output shape each layer type should have, by PyTorch's rules. */
static shape3 expected_out(const layer_cfg *c, shape3 in)
{
    switch (c->type) {
    case LAYER_DENSE:
        return shape3_make(c->units, 1, 1);
    case LAYER_CONV2D:
        return shape3_make(c->filters, ref_out_size(in.h, c->kernel, c->stride, c->padding),
                           ref_out_size(in.w, c->kernel, c->stride, c->padding));
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
        return shape3_make(in.c, ref_out_size(in.h, c->kernel, c->stride, c->padding),
                           ref_out_size(in.w, c->kernel, c->stride, c->padding));
    case LAYER_GLOBAL_AVGPOOL:
        return shape3_make(in.c, 1, 1);
    case LAYER_FLATTEN:
        return shape3_make(in.c * in.h * in.w, 1, 1);
    default:
        return in;
    }
}

/* sum(ref_forward(x, p) * r) */
static double ref_loss(const layer_t *l, int n, const double *x, double *const *p,
                       const double *r, double *ybuf)
{
    ref_forward(l, n, x, p, ybuf);
    size_t m = (size_t)n * shape3_size(l->out);
    double s = 0.0;
    for (size_t i = 0; i < m; i++)
        s += ybuf[i] * r[i];
    return s;
}

/* Central differences of ref_loss with respect to each of v[0..count). */
static void fd_grad(const layer_t *l, int n, const double *x, double *const *p, const double *r,
                    double *v, size_t count, double *g, double *ybuf)
{
    for (size_t j = 0; j < count; j++) {
        double old = v[j];
        v[j] = old + FD_EPS;
        double lp = ref_loss(l, n, x, p, r, ybuf);
        v[j] = old - FD_EPS;
        double lm = ref_loss(l, n, x, p, r, ybuf);
        v[j] = old;
        g[j] = (lp - lm) / (2.0 * FD_EPS);
    }
}

/* ---- running a layer on the CPU backend ---- */

/* Host copies of what one run produced (NULL where it did not run). */
typedef struct {
    float *y, *dx, *grads[LAYER_MAX_PARAMS];
    float *mask; /* dropout: its state after the forward */
} layer_result;

static void result_free(layer_result *res)
{
    free(res->y);
    free(res->dx);
    free(res->mask);
    for (int j = 0; j < LAYER_MAX_PARAMS; j++)
        free(res->grads[j]);
    memset(res, 0, sizeof(*res));
}

/* A device block of count floats, every one NaN. */
static float *dev_nan(backend_t *be, size_t count)
{
    float *h = malloc((count ? count : 1) * sizeof(float));
    for (size_t i = 0; i < count; i++)
        h[i] = NAN;
    float *d = tt_dev_copy(be, h, count * sizeof(float));
    free(h);
    return d;
}

/* Forward (training or inference, with `seed`), then backward with dy when
 * dy != NULL, on a fresh backend of `threads` threads. y, dx, workspace and
 * state are sized for n + 2 rows while the call uses n (as the last partial
 * batch does); y, dx and the gradients start as NaN, so the layer must write
 * every element, and backward overwrites rather than accumulates. */
static int run_layer(const layer_t *l, int threads, int n, bool training, uint64_t seed,
                     const float *x, float *const *params, const float *dy, layer_result *res)
{
    memset(res, 0, sizeof(*res));
    backend_t *be = tt_cpu_backend(threads);
    if (be == NULL)
        return -1;
    int max_n = n + 2;
    size_t isz = shape3_size(l->in[0]), osz = shape3_size(l->out);
    size_t wsb = l->ops->ws_bytes ? l->ops->ws_bytes(l, be, max_n, false, false) : 0;
    size_t stb = l->ops->state_bytes ? l->ops->state_bytes(l, max_n) : 0;
    layer_call c;
    memset(&c, 0, sizeof(c));
    c.be = be;
    c.n = n;
    c.training = training;
    c.seed = seed;
    float *xd = tt_dev_copy(be, x, (size_t)n * isz * sizeof(float));
    float *dxd = dev_nan(be, (size_t)max_n * isz), *dyd = NULL;
    c.x[0] = xd;
    c.y = dev_nan(be, (size_t)max_n * osz);
    c.ws = wsb ? tt_dev_copy(be, NULL, wsb) : NULL;
    c.state = stb ? tt_dev_copy(be, NULL, stb) : NULL;
    for (int j = 0; j < l->n_params; j++) {
        c.params[j] = tt_dev_copy(be, params[j], l->params[j].count * sizeof(float));
        c.grads[j] = dev_nan(be, l->params[j].count);
    }
    l->ops->forward(l, &c);
    res->y = tt_host_copy(be, c.y, (size_t)n * osz * sizeof(float));
    if (l->cfg->type == LAYER_DROPOUT && c.state != NULL)
        res->mask = tt_host_copy(be, c.state, (size_t)n * osz * sizeof(float));
    if (dy != NULL) {
        dyd = tt_dev_copy(be, dy, (size_t)n * osz * sizeof(float));
        c.dy = dyd;
        c.dx[0] = dxd;
        l->ops->backward(l, &c);
        res->dx = tt_host_copy(be, dxd, (size_t)n * isz * sizeof(float));
        for (int j = 0; j < l->n_params; j++)
            res->grads[j] = tt_host_copy(be, c.grads[j], l->params[j].count * sizeof(float));
    }
    for (int j = 0; j < l->n_params; j++) {
        be->free(be, c.params[j]);
        be->free(be, c.grads[j]);
    }
    be->free(be, xd);
    be->free(be, dxd);
    be->free(be, dyd);
    be->free(be, c.y);
    be->free(be, c.ws);
    be->free(be, c.state);
    be->destroy(be);
    return 0;
}

/* ---- building cases ---- */

static layer_cfg cfg_make(const char *name, layer_type type)
{
    layer_cfg c;
    memset(&c, 0, sizeof(c));
    snprintf(c.name, sizeof(c.name), "%s", name);
    c.type = type;
    c.bias = true;
    c.stride = 1;
    return c;
}

static layer_cfg dense_cfg(int units, bool bias, bool relu)
{
    layer_cfg c = cfg_make("fc", LAYER_DENSE);
    c.units = units;
    c.bias = bias;
    c.relu = relu;
    return c;
}

static layer_cfg conv_cfg(int filters, int k, int s, int p, bool bias, bool relu)
{
    layer_cfg c = cfg_make("conv", LAYER_CONV2D);
    c.filters = filters;
    c.kernel = k;
    c.stride = s;
    c.padding = p;
    c.bias = bias;
    c.relu = relu;
    return c;
}

static layer_cfg pool_cfg(layer_type type, int k, int s, int p)
{
    layer_cfg c = cfg_make("pool", type);
    c.kernel = k;
    c.stride = s;
    c.padding = p;
    return c;
}

/* "conv2d in=[3,7,5] n=3 F=4 k=3 s=2 p=1 bias=1 relu=0" */
static void label_of(char *buf, size_t len, const layer_cfg *c, shape3 in, int n)
{
    int k = snprintf(buf, len, "%s in=[%d,%d,%d] n=%d", layer_type_name(c->type), in.c, in.h,
                     in.w, n);
    size_t at = k > 0 && (size_t)k < len ? (size_t)k : len - 1;
    switch (c->type) {
    case LAYER_DENSE:
        snprintf(buf + at, len - at, " units=%d bias=%d relu=%d", c->units, c->bias, c->relu);
        break;
    case LAYER_CONV2D:
        snprintf(buf + at, len - at, " F=%d k=%d s=%d p=%d bias=%d relu=%d", c->filters,
                 c->kernel, c->stride, c->padding, c->bias, c->relu);
        break;
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
        snprintf(buf + at, len - at, " k=%d s=%d p=%d", c->kernel, c->stride, c->padding);
        break;
    case LAYER_DROPOUT:
        snprintf(buf + at, len - at, " rate=%.2f", c->rate);
        break;
    default:
        break;
    }
}

/* ---- (a), (b), (c) for one layer configuration ---- */

static uint64_t case_counter;

static void check_layer(const layer_cfg *cfg, shape3 in, int n)
{
    char label[160];
    label_of(label, sizeof(label), cfg, in, n);
    layer_t l;
    tt_err err = {0};
    if (!tt_ok(layer_setup(&l, cfg, &in, 1, &err) == 0, "%s: setup %s", label, err.msg))
        return;
    shape3 want = expected_out(cfg, in);
    if (!tt_ok(l.out.c == want.c && l.out.h == want.h && l.out.w == want.w,
               "%s: output shape [%d,%d,%d] (want [%d,%d,%d])", label, l.out.c, l.out.h,
               l.out.w, want.c, want.h, want.w))
        return;
    size_t nx = (size_t)n * shape3_size(in), ny = (size_t)n * shape3_size(l.out);

    /* inputs from the private stream; parameters from the layer's own
     * initialisation (what training starts from) */
    tt_rng data = tt_rng_make(++case_counter);
    rng_t rng = rng_make(0x7e57, 1, case_counter);
    float *x = malloc(nx * sizeof(float)), *r = malloc(ny * sizeof(float));
    tt_fill(&data, x, nx, -1.0, 1.0);
    tt_fill(&data, r, ny, -1.0, 1.0);
    float *params[LAYER_MAX_PARAMS] = {0};
    for (int j = 0; j < l.n_params; j++)
        params[j] = calloc(l.params[j].count, sizeof(float));
    if (l.ops->init != NULL)
        l.ops->init(&l, &rng, params);

    layer_result res[3];
    const int threads[3] = {1, 2, 5};
    int ran = 1;
    for (int t = 0; t < 3; t++)
        if (run_layer(&l, threads[t], n, true, 7, x, params, r, &res[t]) != 0)
            ran = 0;
    if (tt_ok(ran, "%s: ran on 1, 2 and 5 threads", label)) {
        /* (a) forward */
        double *xd = tt_to_double(x, nx), *rd = tt_to_double(r, ny);
        double *pd[LAYER_MAX_PARAMS] = {0};
        for (int j = 0; j < l.n_params; j++)
            pd[j] = tt_to_double(params[j], l.params[j].count);
        double *yref = malloc(ny * sizeof(double)), *ybuf = malloc(ny * sizeof(double));
        ref_forward(&l, n, xd, pd, yref);
        double e = tt_rel_err(res[0].y, yref, ny);
        tt_ok(e < TOL_FWD, "%s: forward vs float64 reference (err %.2e)", label, e);

        /* (b) backward vs finite differences */
        double *g = malloc(nx * sizeof(double));
        fd_grad(&l, n, xd, pd, rd, xd, nx, g, ybuf);
        e = tt_rel_err(res[0].dx, g, nx);
        tt_ok(e < TOL_BWD, "%s: dx vs finite differences (err %.2e)", label, e);
        free(g);
        for (int j = 0; j < l.n_params; j++) {
            size_t cnt = l.params[j].count;
            g = malloc(cnt * sizeof(double));
            fd_grad(&l, n, xd, pd, rd, pd[j], cnt, g, ybuf);
            e = tt_rel_err(res[0].grads[j], g, cnt);
            tt_ok(e < TOL_BWD, "%s: d%s vs finite differences (err %.2e)", label,
                  l.params[j].suffix, e);
            free(g);
        }

        /* (c) the same bits whatever the thread count */
        int same = 1;
        for (int t = 1; t < 3; t++) {
            same = same && tt_same_bits(res[0].y, res[t].y, ny) &&
                   tt_same_bits(res[0].dx, res[t].dx, nx);
            for (int j = 0; j < l.n_params; j++)
                same = same && tt_same_bits(res[0].grads[j], res[t].grads[j], l.params[j].count);
        }
        tt_ok(same, "%s: y, dx, dW, db bitwise equal on 1, 2 and 5 threads", label);

        free(xd);
        free(rd);
        for (int j = 0; j < l.n_params; j++)
            free(pd[j]);
        free(yref);
        free(ybuf);
    }
    for (int t = 0; t < 3; t++)
        result_free(&res[t]);
    for (int j = 0; j < l.n_params; j++)
        free(params[j]);
    free(x);
    free(r);
}

static void test_dense(void)
{
    /* every combination of bias, relu, one row or three, a flat input and
     * an image flattened C,H,W */
    const shape3 ins[2] = {{10, 1, 1}, {3, 7, 5}};
    for (int s = 0; s < 2; s++)
        for (int bias = 0; bias < 2; bias++)
            for (int relu = 0; relu < 2; relu++)
                for (int n = 1; n <= 3; n += 2) {
                    layer_cfg c = dense_cfg(4, bias, relu);
                    check_layer(&c, ins[s], n);
                }
    /* odd sizes: a single unit, more units than inputs, 5 rows split
     * unevenly over the threads */
    const struct { int n, c, h, w, units; bool bias, relu; } odd[] = {
        {1, 7, 1, 1, 5, true, false},
        {3, 2, 3, 4, 6, false, true},
        {3, 13, 1, 1, 1, true, true},
        {5, 9, 1, 1, 11, true, false},
    };
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        layer_cfg c = dense_cfg(odd[i].units, odd[i].bias, odd[i].relu);
        check_layer(&c, shape3_make(odd[i].c, odd[i].h, odd[i].w), odd[i].n);
    }
}

static void test_conv(void)
{
    /* k = 3 on 3x7x5: every stride 1-2, padding 0-2, bias, relu, batch 1 and 3 */
    for (int stride = 1; stride <= 2; stride++)
        for (int pad = 0; pad <= 2; pad++)
            for (int bias = 0; bias < 2; bias++)
                for (int relu = 0; relu < 2; relu++)
                    for (int n = 1; n <= 3; n += 2) {
                        layer_cfg c = conv_cfg(4, 3, stride, pad, bias, relu);
                        check_layer(&c, shape3_make(3, 7, 5), n);
                    }
    /* other kernels and the edges of the window arithmetic */
    const struct { int n, c, h, w, f, k, s, p; bool bias, relu; } odd[] = {
        {5, 2, 6, 5, 3, 1, 1, 0, true, true},    /* 1x1 */
        {5, 2, 6, 5, 3, 5, 1, 2, true, true},    /* LeNet's 5x5 with padding 2 */
        {5, 2, 6, 5, 3, 5, 2, 0, true, true},    /* a kernel as wide as the input */
        {1, 1, 5, 5, 2, 3, 1, 0, true, false},   /* one channel, one image */
        {3, 2, 7, 6, 3, 3, 2, 1, true, true},
        {3, 3, 6, 7, 4, 5, 1, 2, false, true},
        {3, 2, 5, 5, 2, 1, 1, 0, true, false},
        {3, 1, 4, 4, 2, 4, 3, 2, true, false},   /* stride 3, window past the edge */
        {1, 2, 1, 1, 2, 5, 1, 2, true, false},   /* 1x1 image, all padding but the centre */
        {3, 2, 2, 3, 3, 3, 1, 2, false, false},  /* padding wider than the image */
        {7, 2, 6, 5, 3, 3, 2, 0, true, true},    /* more images than backward groups */
        /* conv_small.c's shapes (few channels, 16 images in the lanes), small
         * enough for the finite differences: */
        {17, 2, 4, 5, 16, 5, 1, 2, true, true},  /* 16 filters, tiles of 8; 16 + 1 images */
        {18, 1, 8, 8, 6, 5, 1, 2, true, true},   /* LeNet's conv0, cut down */
        {17, 3, 5, 4, 9, 3, 1, 1, true, false},  /* 9 filters: tiles of 4 and 5 */
        {17, 2, 3, 3, 5, 5, 1, 4, false, true},  /* padding k - 1 */
        {16, 15, 3, 4, 7, 3, 1, 0, true, true},  /* 15 channels: 7 + 8; 1 block */
        /* 16 -> 16, 3x3, padding 1, no bias or relu: with oneDNN the forward
         * runs as its dual's backward-data (conv_dnnl.c); with a bias, not */
        {3, 16, 4, 5, 16, 3, 1, 1, false, false},
        {2, 16, 4, 4, 16, 3, 1, 1, true, false},
    };
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        layer_cfg c = conv_cfg(odd[i].f, odd[i].k, odd[i].s, odd[i].p, odd[i].bias, odd[i].relu);
        check_layer(&c, shape3_make(odd[i].c, odd[i].h, odd[i].w), odd[i].n);
    }
}

#ifdef HAVE_DNNL
/* conv_dnnl.c's rule for running a forward as its dual's backward-data:
 * the one shape it was measured faster for, and nothing else (a shape
 * it took by mistake would still compute y, so the layer checks above
 * cannot see it). */
static void test_conv_dual_rule(void)
{
    window_desc d = {.n = 32, .c = 16, .h = 32, .w = 32, .f = 16, .k = 3, .stride = 1,
                     .pad = 1, .oh = 32, .ow = 32};
    tt_ok(cpu_conv_dnnl_dual_forward(&d, false, false, false, true),
          "dual forward: 16 -> 16 channels, 3x3, stride 1, padding 1, float32, AVX2");
    tt_ok(!cpu_conv_dnnl_dual_forward(&d, true, false, false, true) &&
              !cpu_conv_dnnl_dual_forward(&d, false, true, false, true) &&
              !cpu_conv_dnnl_dual_forward(&d, false, false, true, true) &&
              !cpu_conv_dnnl_dual_forward(&d, false, false, false, false),
          "dual forward: not with relu, a bias or bf16, nor below AVX2");
    window_desc o[5] = {d, d, d, d, d};
    o[0].c = 32;
    o[1].f = 32;
    o[2].stride = 2, o[2].oh = o[2].ow = 16;
    o[3].k = 5, o[3].pad = 2;
    o[4].pad = 0, o[4].oh = o[4].ow = 30;
    bool none = true;
    for (int i = 0; i < 5; i++)
        none = none && !cpu_conv_dnnl_dual_forward(&o[i], false, false, false, true);
    tt_ok(none, "dual forward: not for 32 channels in or out, stride 2, 5x5, or no padding");
}
#endif

static void test_pools(void)
{
    /* max and avg on 3x7x5: kernel 2-3, stride 1-2, padding 0-1, batch 1 and 3 */
    for (int type = 0; type < 2; type++)
        for (int k = 2; k <= 3; k++)
            for (int stride = 1; stride <= 2; stride++)
                for (int pad = 0; pad <= 1; pad++)
                    for (int n = 1; n <= 3; n += 2) {
                        layer_cfg c =
                            pool_cfg(type ? LAYER_AVGPOOL : LAYER_MAXPOOL, k, stride, pad);
                        check_layer(&c, shape3_make(3, 7, 5), n);
                    }
    const struct { layer_type type; int n, c, h, w, k, s, p; } odd[] = {
        {LAYER_MAXPOOL, 3, 2, 8, 6, 2, 2, 0},   /* the 2x2 fast path */
        {LAYER_MAXPOOL, 3, 2, 7, 7, 3, 2, 1},
        {LAYER_MAXPOOL, 3, 1, 5, 6, 3, 1, 1},
        {LAYER_MAXPOOL, 1, 2, 5, 5, 4, 4, 2},   /* padding = kernel / 2 */
        {LAYER_AVGPOOL, 3, 2, 8, 6, 2, 2, 0},
        {LAYER_AVGPOOL, 3, 2, 5, 6, 3, 1, 1},   /* count_include_pad */
        {LAYER_AVGPOOL, 3, 1, 9, 8, 5, 3, 2},
    };
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        layer_cfg c = pool_cfg(odd[i].type, odd[i].k, odd[i].s, odd[i].p);
        check_layer(&c, shape3_make(odd[i].c, odd[i].h, odd[i].w), odd[i].n);
    }
    /* the shape-only layers; global_avgpool on square, oblong and 1x1 planes */
    const struct { layer_type type; int n, c, h, w; } plain[] = {
        {LAYER_GLOBAL_AVGPOOL, 1, 4, 5, 5}, {LAYER_GLOBAL_AVGPOOL, 3, 4, 5, 5},
        {LAYER_GLOBAL_AVGPOOL, 3, 4, 4, 4}, {LAYER_GLOBAL_AVGPOOL, 1, 3, 3, 5},
        {LAYER_GLOBAL_AVGPOOL, 3, 5, 1, 1}, {LAYER_RELU, 1, 3, 7, 5},
        {LAYER_RELU, 3, 3, 7, 5},           {LAYER_RELU, 3, 2, 3, 5},
        {LAYER_RELU, 1, 7, 1, 1},           {LAYER_FLATTEN, 1, 3, 7, 5},
        {LAYER_FLATTEN, 3, 3, 7, 5},        {LAYER_FLATTEN, 3, 2, 3, 5},
        {LAYER_FLATTEN, 1, 7, 1, 1},
    };
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        layer_cfg c = cfg_make("l", plain[i].type);
        check_layer(&c, shape3_make(plain[i].c, plain[i].h, plain[i].w), plain[i].n);
    }
}

/* ---- (d) the fused activation ---- */

/* conv2d with relu = conv2d, then a relu layer: forward and backward, bits. */
static void test_fused_relu(void)
{
    shape3 in = {2, 6, 6};
    int n = 3;
    layer_cfg fc = conv_cfg(3, 3, 1, 1, true, true), pc = conv_cfg(3, 3, 1, 1, true, false);
    layer_cfg rc = cfg_make("relu", LAYER_RELU);
    layer_t fused, plain, relu;
    tt_err err = {0};
    if (!tt_ok(layer_setup(&fused, &fc, &in, 1, &err) == 0 &&
                   layer_setup(&plain, &pc, &in, 1, &err) == 0 &&
                   layer_setup(&relu, &rc, &plain.out, 1, &err) == 0,
               "fused relu: the layers set up %s", err.msg))
        return;
    size_t nx = (size_t)n * shape3_size(in), ny = (size_t)n * shape3_size(fused.out);
    tt_rng data = tt_rng_make(0xf0);
    float *x = malloc(nx * sizeof(float)), *dy = malloc(ny * sizeof(float));
    float *w = malloc(54 * sizeof(float)), *b = malloc(3 * sizeof(float));
    tt_fill(&data, x, nx, -1, 1);
    tt_fill(&data, dy, ny, -1, 1);
    tt_fill(&data, w, 54, -0.5, 0.5);
    tt_fill(&data, b, 3, -0.5, 0.5);
    float *params[2] = {w, b};
    layer_result of, op, orl, op2;
    int ran = run_layer(&fused, 2, n, true, 1, x, params, dy, &of) == 0 &&
              run_layer(&plain, 2, n, true, 1, x, params, NULL, &op) == 0 &&
              run_layer(&relu, 2, n, true, 1, op.y, NULL, dy, &orl) == 0 &&
              /* backward: the relu layer's dx is the dy the plain conv sees */
              run_layer(&plain, 2, n, true, 1, x, params, orl.dx, &op2) == 0;
    if (tt_ok(ran, "fused relu: ran")) {
        tt_ok(tt_same_bits(of.y, orl.y, ny), "conv2d relu: fused == conv then relu layer");
        tt_ok(tt_same_bits(of.dx, op2.dx, nx) && tt_same_bits(of.grads[0], op2.grads[0], 54) &&
                  tt_same_bits(of.grads[1], op2.grads[1], 3),
              "conv2d relu backward: fused == relu layer then conv");
    }
    result_free(&of);
    result_free(&op);
    result_free(&orl);
    result_free(&op2);
    free(x);
    free(dy);
    free(w);
    free(b);
}

/* ---- (e) dropout ---- */

/* In training y = x * mask with mask in {0, 1/(1-rate)} (inverted dropout,
 * exactly that float), about `rate` of the units dropped, dx = dy * mask, the
 * same mask on every thread count, another mask for another seed; in
 * inference the identity. */
static void check_dropout(float rate, shape3 in, int n)
{
    layer_cfg c = cfg_make("drop", LAYER_DROPOUT);
    c.rate = rate;
    char label[160];
    label_of(label, sizeof(label), &c, in, n);
    layer_t l;
    tt_err err = {0};
    if (!tt_ok(layer_setup(&l, &c, &in, 1, &err) == 0, "%s: setup %s", label, err.msg))
        return;
    size_t m = (size_t)n * shape3_size(in);
    tt_rng data = tt_rng_make(++case_counter);
    float *x = malloc(m * sizeof(float)), *dy = malloc(m * sizeof(float));
    tt_fill(&data, x, m, 0.5, 1.5); /* never zero: a dropped unit shows */
    tt_fill(&data, dy, m, -1.0, 1.0);
    const int threads[3] = {1, 2, 5};
    layer_result res[3], other, inf;
    int ran = 1;
    for (int t = 0; t < 3; t++)
        ran &= run_layer(&l, threads[t], n, true, 99, x, NULL, dy, &res[t]) == 0;
    ran &= run_layer(&l, 1, n, true, 100, x, NULL, dy, &other) == 0;
    ran &= run_layer(&l, 1, n, false, 99, x, NULL, dy, &inf) == 0;
    if (tt_ok(ran && res[0].mask != NULL && other.mask != NULL, "%s: ran", label)) {
        const float keep = 1.0f / (1.0f - rate), *mask = res[0].mask;
        size_t dropped = 0, bad_mask = 0, bad_y = 0, bad_dx = 0;
        for (size_t i = 0; i < m; i++) {
            dropped += mask[i] == 0.0f;
            bad_mask += mask[i] != 0.0f && mask[i] != keep;
            bad_y += res[0].y[i] != x[i] * mask[i];
            bad_dx += res[0].dx[i] != dy[i] * mask[i];
        }
        double frac = (double)dropped / (double)m;
        double sd = sqrt((double)rate * (1.0 - rate) / (double)m);
        tt_ok(bad_mask == 0, "%s: mask values are 0 or 1/(1-rate) (%zu wrong)", label, bad_mask);
        tt_ok(dropped > 0 && dropped < m && fabs(frac - rate) <= 4.5 * sd,
              "%s: drops %.4f of %zu units, rate +- 4.5 sd (%.4f), some kept", label, frac, m,
              4.5 * sd);
        tt_ok(bad_y == 0, "%s: y = x * mask, kept units scaled by 1/(1-rate) (%zu wrong)", label,
              bad_y);
        tt_ok(bad_dx == 0, "%s: dx = dy * mask, the forward's mask (%zu wrong)", label, bad_dx);
        int same = 1;
        for (int t = 1; t < 3; t++)
            same = same && tt_same_bits(res[0].y, res[t].y, m) &&
                   tt_same_bits(res[0].dx, res[t].dx, m) &&
                   tt_same_bits(res[0].mask, res[t].mask, m);
        tt_ok(same, "%s: the same bits on 1, 2 and 5 threads", label);
        tt_ok(!tt_same_bits(res[0].mask, other.mask, m), "%s: another seed drops other units",
              label);
        tt_ok(tt_same_bits(inf.y, x, m), "%s: inference is the identity", label);
    }
    for (int t = 0; t < 3; t++)
        result_free(&res[t]);
    result_free(&other);
    result_free(&inf);
    free(x);
    free(dy);
}

static void test_dropout(void)
{
    const float rates[2] = {0.25f, 0.5f};
    for (int q = 0; q < 2; q++)
        for (int n = 1; n <= 3; n += 2)
            check_dropout(rates[q], shape3_make(3, 7, 5), n);
    check_dropout(0.3f, shape3_make(3, 20, 21), 4); /* 5040 units: the fraction shows */
}

/* ---- (f) parameters: names, shapes, initialisation ---- */

static bool spec_is(const param_spec *p, const char *suffix, int ndim, const int *dims)
{
    if (strcmp(p->suffix, suffix) != 0 || p->ndim != ndim || !p->trainable)
        return false;
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (p->dims[i] != dims[i])
            return false;
        count *= (size_t)dims[i];
    }
    return p->count == count;
}

/* Uniform(-bound, bound), torch.nn's default: every value inside, both ends
 * reached, mean ~ 0 within 5 standard errors (bound / sqrt(3 count)), the
 * variance bound^2/3 within 5/sqrt(count) relative (its standard error is
 * about 0.9/sqrt(count)). Tensors of 4096 values or more must also have the
 * variance within 3% and reach 0.98 of the bound. */
static void check_uniform(const char *what, const float *p, size_t count, double bound)
{
    double sum = 0.0, sq = 0.0, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < count; i++) {
        sum += p[i];
        sq += (double)p[i] * p[i];
        lo = fmin(lo, p[i]);
        hi = fmax(hi, p[i]);
    }
    double mean = sum / (double)count, var = sq / (double)count - mean * mean;
    double want = bound * bound / 3.0, mx = fmax(-lo, hi);
    double var_tol = 5.0 / sqrt((double)count);
    bool large = count >= 4096;
    if (large && var_tol > 0.03)
        var_tol = 0.03;
    tt_ok(lo >= -bound && hi <= bound, "%s: %zu values in [-%.5f, %.5f] (got [%.5f, %.5f])",
          what, count, bound, bound, lo, hi);
    tt_ok(hi > 0.9 * bound && lo < -0.9 * bound && (!large || mx > 0.98 * bound),
          "%s: values reach out to the bound on both sides (max |w| %.5f)", what, mx);
    tt_ok(fabs(mean) < 5.0 * bound / sqrt(3.0 * (double)count), "%s: mean %.2e ~ 0", what, mean);
    tt_ok(fabs(var / want - 1.0) < var_tol, "%s: variance %.4e ~ bound^2/3 = %.4e (within %.1f%%)",
          what, var, want, 100.0 * var_tol);
}

static void test_init(void)
{
    /* dense: weight [units, in] as torch.nn.Linear, the input flattened;
     * bound 1/sqrt(in) */
    const struct { shape3 in; int units; bool bias; } dense[] = {
        {{4, 5, 15}, 200, true}, /* 300 -> 200 */
        {{400, 1, 1}, 300, true},
        {{20, 1, 1}, 5000, true}, /* a bias of 5000 values */
        {{2, 3, 4}, 7, false},    /* weight only, [7, 24] */
    };
    for (size_t q = 0; q < sizeof(dense) / sizeof(dense[0]); q++) {
        layer_cfg c = dense_cfg(dense[q].units, dense[q].bias, false);
        shape3 s = dense[q].in;
        int in = (int)shape3_size(s), out = dense[q].units;
        layer_t l;
        tt_err err = {0};
        if (!tt_ok(layer_setup(&l, &c, &s, 1, &err) == 0, "dense %d->%d bias=%d: setup %s", in,
                   out, dense[q].bias, err.msg))
            continue;
        int wdims[2] = {out, in}, bdims[1] = {out};
        tt_ok(l.n_params == (dense[q].bias ? 2 : 1) && spec_is(&l.params[0], "weight", 2, wdims) &&
                  (!dense[q].bias || spec_is(&l.params[1], "bias", 1, bdims)),
              "dense %d->%d bias=%d: weight [%d, %d]%s", in, out, dense[q].bias, out, in,
              dense[q].bias ? " and bias" : " only");
        float *w = malloc((size_t)in * out * sizeof(float)), *b = malloc(out * sizeof(float));
        float *p[2] = {w, b};
        rng_t rng = rng_make(42, 0, q);
        l.ops->init(&l, &rng, p);
        char what[64];
        snprintf(what, sizeof(what), "dense %d->%d weight", in, out);
        check_uniform(what, w, (size_t)in * out, 1.0 / sqrt((double)in));
        if (dense[q].bias) {
            snprintf(what, sizeof(what), "dense %d->%d bias", in, out);
            check_uniform(what, b, (size_t)out, 1.0 / sqrt((double)in));
        }
        free(w);
        free(b);
    }
    /* conv2d: weight [f, c, k, k] as torch.nn.Conv2d; bound 1/sqrt(c k k) */
    const struct { shape3 in; int filters, k; bool bias; } conv[] = {
        {{6, 14, 14}, 160, 5, true},
        {{32, 8, 8}, 64, 3, true},
        {{32, 8, 8}, 64, 3, false},
        {{3, 8, 8}, 4, 3, false},
    };
    for (size_t q = 0; q < sizeof(conv) / sizeof(conv[0]); q++) {
        layer_cfg c = conv_cfg(conv[q].filters, conv[q].k, 1, 0, conv[q].bias, false);
        shape3 s = conv[q].in;
        int f = conv[q].filters, ch = s.c, k = conv[q].k;
        layer_t l;
        tt_err err = {0};
        if (!tt_ok(layer_setup(&l, &c, &s, 1, &err) == 0, "conv2d %d->%d k=%d bias=%d: setup %s",
                   ch, f, k, conv[q].bias, err.msg))
            continue;
        int wdims[4] = {f, ch, k, k}, bdims[1] = {f};
        tt_ok(l.n_params == (conv[q].bias ? 2 : 1) && spec_is(&l.params[0], "weight", 4, wdims) &&
                  (!conv[q].bias || spec_is(&l.params[1], "bias", 1, bdims)),
              "conv2d %d->%d k=%d bias=%d: weight [%d, %d, %d, %d]%s", ch, f, k, conv[q].bias, f,
              ch, k, k, conv[q].bias ? " and bias" : " only");
        size_t wn = (size_t)f * ch * k * k;
        float *w = malloc(wn * sizeof(float)), *b = malloc(f * sizeof(float));
        float *p[2] = {w, b};
        rng_t rng = rng_make(43, 0, q);
        l.ops->init(&l, &rng, p);
        double bound = 1.0 / sqrt((double)ch * k * k);
        char what[64];
        snprintf(what, sizeof(what), "conv2d %d->%d k=%d weight", ch, f, k);
        check_uniform(what, w, wn, bound);
        if (conv[q].bias) {
            snprintf(what, sizeof(what), "conv2d %d->%d k=%d bias", ch, f, k);
            check_uniform(what, b, (size_t)f, bound);
        }
        free(w);
        free(b);
    }
    /* parameter-free layers declare no parameters */
    const layer_type none[6] = {LAYER_MAXPOOL, LAYER_AVGPOOL, LAYER_GLOBAL_AVGPOOL,
                                LAYER_RELU, LAYER_DROPOUT, LAYER_FLATTEN};
    int all_none = 1;
    for (int q = 0; q < 6; q++) {
        layer_cfg c = pool_cfg(none[q], 2, 2, 0);
        shape3 s = {2, 4, 4};
        layer_t l;
        tt_err err = {0};
        if (layer_setup(&l, &c, &s, 1, &err) != 0 || l.n_params != 0)
            all_none = 0;
    }
    tt_ok(all_none, "pools, relu, dropout, flatten have no parameters");
}

/* ---- (g) setup errors ---- */

static void test_errors(void)
{
    tt_err err = {0};
    layer_t l;
    layer_cfg c = conv_cfg(2, 7, 1, 1, true, false);
    snprintf(c.name, sizeof(c.name), "conv1");
    shape3 in = {3, 4, 4};
    tt_ok(layer_setup(&l, &c, &in, 1, &err) != 0 && err.code == TT_ERR_USAGE &&
              strstr(err.msg, "conv1") && strstr(err.msg, "kernel 7"),
          "conv2d kernel larger than the padded input: usage error naming it (%s)", err.msg);
    err_clear(&err);
    c = pool_cfg(LAYER_MAXPOOL, 2, 2, 2);
    in = shape3_make(3, 8, 8);
    tt_ok(layer_setup(&l, &c, &in, 1, &err) != 0 && err.code == TT_ERR_USAGE,
          "maxpool padding > kernel/2: usage error (%s)", err.msg);
    err_clear(&err);
    c = cfg_make("drop", LAYER_DROPOUT);
    c.rate = 1.0f;
    tt_ok(layer_setup(&l, &c, &in, 1, &err) != 0 && err.code == TT_ERR_USAGE,
          "dropout rate 1: usage error (%s)", err.msg);
}

/* ---- (h) a whole model through the tower ---- */

/* conv(3->4, k3, p1, relu) -> maxpool 2 -> dense 6 relu -> dense 5, input 3x7x7 */
#define M_LAYERS 4
#define M_CLASSES 5

static int find_param(const model_t *m, const char *name)
{
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0)
            return i;
    return -1;
}

/* Float64 mean softmax cross-entropy of the reference model. p[layer][j] are
 * the layer's parameters. acts: scratch per layer. */
static double ref_model_loss(const model_t *m, int n, const double *x, double *(*p)[2],
                             const int32_t *labels, double **acts, int *correct)
{
    const double *in = x;
    for (int i = 0; i < m->n_layers; i++) {
        ref_forward(&m->layers[i], n, in, p[i], acts[i]);
        in = acts[i];
    }
    double loss = 0.0;
    int right = 0;
    for (int r = 0; r < n; r++) {
        const double *z = in + (size_t)r * M_CLASSES;
        double mx = z[0];
        int arg = 0;
        for (int j = 1; j < M_CLASSES; j++)
            if (z[j] > mx) {
                mx = z[j];
                arg = j;
            }
        double s = 0.0;
        for (int j = 0; j < M_CLASSES; j++)
            s += exp(z[j] - mx);
        loss += log(s) + mx - z[labels[r]];
        right += arg == labels[r];
    }
    if (correct)
        *correct = right;
    return loss / n;
}

static void test_model(void)
{
    layer_cfg layers[M_LAYERS];
    layers[0] = conv_cfg(4, 3, 1, 1, true, true);
    snprintf(layers[0].name, sizeof(layers[0].name), "conv0");
    layers[1] = pool_cfg(LAYER_MAXPOOL, 2, 2, 0);
    snprintf(layers[1].name, sizeof(layers[1].name), "pool0");
    layers[2] = dense_cfg(6, true, true);
    snprintf(layers[2].name, sizeof(layers[2].name), "fc0");
    layers[3] = dense_cfg(M_CLASSES, true, false);
    snprintf(layers[3].name, sizeof(layers[3].name), "fc1");
    model_cfg mc;
    memset(&mc, 0, sizeof(mc));
    mc.input[0] = 3;
    mc.input[1] = 7;
    mc.input[2] = 7;
    mc.input_rank = 3;
    mc.classes = M_CLASSES;
    mc.layers = layers;
    mc.n_layers = M_LAYERS;

    model_t m;
    tt_err err = {0};
    if (!tt_ok(model_build(&mc, shape3_make(3, 7, 7), &m, &err) == 0, "model_build %s", err.msg))
        return;
    const char *names[M_LAYERS][2] = {{"conv0.weight", "conv0.bias"}, {NULL, NULL},
                                      {"fc0.weight", "fc0.bias"}, {"fc1.weight", "fc1.bias"}};
    const size_t counts[M_LAYERS][2] = {{4 * 3 * 9, 4}, {0, 0}, {6 * 4 * 3 * 3, 6}, {5 * 6, 5}};
    int idx[M_LAYERS][2];
    int names_ok = m.n_params == 6;
    for (int i = 0; i < M_LAYERS; i++)
        for (int j = 0; j < 2; j++) {
            idx[i][j] = names[i][j] ? find_param(&m, names[i][j]) : -1;
            if (names[i][j] && (idx[i][j] < 0 || m.params[idx[i][j]].count != counts[i][j] ||
                                !m.params[idx[i][j]].trainable))
                names_ok = 0;
        }
    if (!tt_ok(names_ok, "model: 6 trainable tensors named <layer>.weight/.bias, PyTorch sizes")) {
        model_free(&m);
        return;
    }

    const int n = 3;
    size_t isz = 3 * 7 * 7;
    float *host = calloc(m.n_floats, sizeof(float));
    model_init_params(&m, 7, host);
    tt_rng data = tt_rng_make(0x30de1);
    float *x = malloc((size_t)n * isz * sizeof(float));
    tt_fill(&data, x, (size_t)n * isz, -1.0, 1.0);
    int32_t labels[3];
    for (int r = 0; r < n; r++)
        labels[r] = tt_below(&data, M_CLASSES);

    float *grads[2];
    double loss_sum[2];
    int correct[2], ran = 1;
    float *grads_again = malloc(m.n_trainable * sizeof(float));
    for (int t = 0; t < 2; t++) {
        grads[t] = malloc(m.n_trainable * sizeof(float));
        backend_t *be = tt_cpu_backend(t + 1);
        tower_t tw;
        if (be == NULL || tower_create(&m, be, n + 1, &tw, &err) != 0) {
            tt_diag("tower: %s", err.msg);
            ran = 0;
            if (be)
                be->destroy(be);
            continue;
        }
        tower_set_params(&tw, host);
        tower_load_batch(&tw, n, x, labels);
        tower_step(&tw, n, true, true, 11);
        be->download(be, grads[t], tw.grads, m.n_trainable * sizeof(float));
        loss_sum[t] = tw.loss_sum;
        correct[t] = tw.correct;
        if (t == 0) {
            /* a second step on the same batch overwrites, never accumulates */
            tower_step(&tw, n, true, true, 12);
            be->download(be, grads_again, tw.grads, m.n_trainable * sizeof(float));
        }
        tower_free(&tw);
        be->destroy(be);
    }
    if (tt_ok(ran, "model: towers ran on 1 and 2 threads")) {
        double *xd = tt_to_double(x, (size_t)n * isz);
        double *pd[M_LAYERS][2] = {{NULL}};
        double *acts[M_LAYERS];
        for (int i = 0; i < M_LAYERS; i++) {
            acts[i] = malloc((size_t)n * shape3_size(m.layers[i].out) * sizeof(double));
            for (int j = 0; j < 2; j++)
                if (idx[i][j] >= 0)
                    pd[i][j] = tt_to_double(host + m.params[idx[i][j]].offset,
                                            m.params[idx[i][j]].count);
        }
        int ref_correct = -1;
        double ref = ref_model_loss(&m, n, xd, pd, labels, acts, &ref_correct);
        tt_ok(fabs(loss_sum[0] / n - ref) < 1e-5 * (fabs(ref) + 1e-6),
              "model: mean loss %.8f vs float64 reference %.8f", loss_sum[0] / n, ref);
        tt_ok(correct[0] == ref_correct, "model: correct count %d vs reference %d", correct[0],
              ref_correct);
        for (int i = 0; i < M_LAYERS; i++)
            for (int j = 0; j < 2; j++) {
                if (idx[i][j] < 0)
                    continue;
                const param_entry *pe = &m.params[idx[i][j]];
                double *g = malloc(pe->count * sizeof(double));
                for (size_t q = 0; q < pe->count; q++) {
                    double old = pd[i][j][q];
                    pd[i][j][q] = old + FD_EPS;
                    double lp = ref_model_loss(&m, n, xd, pd, labels, acts, NULL);
                    pd[i][j][q] = old - FD_EPS;
                    double lm = ref_model_loss(&m, n, xd, pd, labels, acts, NULL);
                    pd[i][j][q] = old;
                    g[q] = (lp - lm) / (2.0 * FD_EPS);
                }
                double e = tt_rel_err(grads[0] + pe->offset, g, pe->count);
                tt_ok(e < TOL_MODEL, "model: d loss / d %s vs finite differences (err %.2e)",
                      pe->name, e);
                free(g);
            }
        tt_ok(tt_same_bits(grads[0], grads[1], m.n_trainable) && loss_sum[0] == loss_sum[1],
              "model: loss and gradients bitwise equal on 1 and 2 threads");
        tt_ok(tt_same_bits(grads[0], grads_again, m.n_trainable),
              "model: a second step on the same batch gives the same gradients (overwrite)");
        free(xd);
        for (int i = 0; i < M_LAYERS; i++) {
            free(acts[i]);
            free(pd[i][0]);
            free(pd[i][1]);
        }
    }
    for (int t = 0; t < 2; t++)
        free(grads[t]);
    free(grads_again);
    free(host);
    free(x);
    model_free(&m);
}

#define BN_N 3
#define BN_C 4
#define BN_HW 5 /* a 1x5 plane: any H*W works */

static double bn_x[BN_N * BN_C * BN_HW], bn_r[BN_N * BN_C * BN_HW], bn_gamma[BN_C], bn_beta[BN_C];

/* float64 reference of the training forward; returns sum(y * r) */
static double bn_ref_loss(const double *x, const double *g, const double *b, double *y,
                       double *mean_out, double *var_out)
{
    double loss = 0;
    for (int c = 0; c < BN_C; c++) {
        double m = 0, v = 0;
        for (int i = 0; i < BN_N; i++)
            for (int q = 0; q < BN_HW; q++)
                m += x[(i * BN_C + c) * BN_HW + q];
        m /= BN_N * BN_HW;
        for (int i = 0; i < BN_N; i++)
            for (int q = 0; q < BN_HW; q++)
                v += pow(x[(i * BN_C + c) * BN_HW + q] - m, 2);
        v /= BN_N * BN_HW;
        if (mean_out) {
            mean_out[c] = m;
            var_out[c] = v;
        }
        for (int i = 0; i < BN_N; i++)
            for (int q = 0; q < BN_HW; q++) {
                int k = (i * BN_C + c) * BN_HW + q;
                double yy = (x[k] - m) / sqrt(v + 1e-5) * g[c] + b[c];
                if (y)
                    y[k] = yy;
                loss += yy * bn_r[k];
            }
    }
    return loss;
}

/* d bn_ref_loss / d v[i] by central differences, v being the input x, gamma g
 * or beta b; v[i] is restored exactly */
static double bn_fd_grad(double *x, double *g, double *b, double *v, int i)
{
    const double eps = 1e-6, keep = v[i];
    v[i] = keep + eps;
    double up = bn_ref_loss(x, g, b, NULL, NULL, NULL);
    v[i] = keep - eps;
    double down = bn_ref_loss(x, g, b, NULL, NULL, NULL);
    v[i] = keep;
    return (up - down) / (2 * eps);
}

/* batchnorm and add: forward in training and inference, the running
 * statistics (PyTorch's momentum and unbiased variance), and dx, dgamma,
 * dbeta against central finite differences of the float64 training forward */
static void test_batchnorm_add(void)
{
    /* float values, so that the reference sees what the layer sees */
    tt_rng rng = tt_rng_make(123);
    for (int i = 0; i < BN_N * BN_C * BN_HW; i++) {
        bn_x[i] = (float)tt_uniform(&rng, -2, 3);
        bn_r[i] = (float)tt_uniform(&rng, -1, 1);
    }
    for (int c = 0; c < BN_C; c++) {
        bn_gamma[c] = (float)tt_uniform(&rng, 0.5, 1.5);
        bn_beta[c] = (float)tt_uniform(&rng, -0.5, 0.5);
    }
    tt_err err = {0};
    backend_t *be = tt_cpu_backend(2);
    if (!tt_ok(be != NULL, "a CPU backend of 2 threads"))
        return;
    layer_cfg cfg = {.type = LAYER_BATCHNORM, .momentum = 0.1f, .epsilon = 1e-5f};
    strcpy(cfg.name, "bn");
    layer_t l;
    shape3 in = shape3_make(BN_C, 1, BN_HW);
    tt_ok(layer_setup(&l, &cfg, &in, 1, &err) == 0 && l.n_params == 5, "batchnorm sets up");
    tt_ok(strcmp(l.params[2].suffix, "running_mean") == 0 && !l.params[2].trainable &&
              l.params[4].is_int64 && l.params[4].ndim == 0,
          "PyTorch's tensors: weight, bias, running_mean, running_var, num_batches_tracked (I64)");
    float w[BN_C], b[BN_C], rm[BN_C], rv[BN_C], nbt[1];
    float *p[5] = {w, b, rm, rv, nbt};
    l.ops->init(&l, NULL, p);
    tt_ok(w[0] == 1 && b[0] == 0 && rm[0] == 0 && rv[0] == 1 && nbt[0] == 0,
          "init: weight 1, bias 0, running_mean 0, running_var 1");
    for (int c = 0; c < BN_C; c++) {
        w[c] = (float)bn_gamma[c];
        b[c] = (float)bn_beta[c];
    }
    float x[BN_N * BN_C * BN_HW], y[BN_N * BN_C * BN_HW], dy[BN_N * BN_C * BN_HW], dx[BN_N * BN_C * BN_HW], dw[BN_C], db[BN_C];
    float state[2 * BN_C];
    for (int i = 0; i < BN_N * BN_C * BN_HW; i++) {
        x[i] = (float)bn_x[i];
        dy[i] = (float)bn_r[i];
    }
    layer_call call = {.be = be, .n = BN_N, .training = true, .x = {x}, .y = y,
                       .params = {w, b, rm, rv, nbt}, .grads = {dw, db}, .dy = dy,
                       .dx = {dx}, .state = state};
    l.ops->forward(&l, &call);
    double yref[BN_N * BN_C * BN_HW], mean[BN_C], var[BN_C];
    bn_ref_loss(bn_x, bn_gamma, bn_beta, yref, mean, var);
    tt_ok(tt_rel_err(y, yref, BN_N * BN_C * BN_HW) < 1e-5, "training forward vs float64 (%.2g)",
          tt_rel_err(y, yref, BN_N * BN_C * BN_HW));
    double rm_ref[BN_C], rv_ref[BN_C];
    for (int c = 0; c < BN_C; c++) {
        rm_ref[c] = 0.1 * mean[c];
        rv_ref[c] = 0.9 + 0.1 * var[c] * (BN_N * BN_HW) / (BN_N * BN_HW - 1);
    }
    tt_ok(tt_rel_err(rm, rm_ref, BN_C) < 1e-5 && tt_rel_err(rv, rv_ref, BN_C) < 1e-5 && nbt[0] == 1,
          "running statistics: momentum 0.1 of the new, unbiased variance; one batch tracked");
    l.ops->backward(&l, &call);
    double dx_ref[BN_N * BN_C * BN_HW], dg_ref[BN_C], db_ref[BN_C], xx[BN_N * BN_C * BN_HW], gg[BN_C], bb[BN_C];
    memcpy(xx, bn_x, sizeof(xx));
    memcpy(gg, bn_gamma, sizeof(gg));
    memcpy(bb, bn_beta, sizeof(bb));
    for (int i = 0; i < BN_N * BN_C * BN_HW; i++)
        dx_ref[i] = bn_fd_grad(xx, gg, bb, xx, i);
    for (int c = 0; c < BN_C; c++) {
        dg_ref[c] = bn_fd_grad(xx, gg, bb, gg, c);
        db_ref[c] = bn_fd_grad(xx, gg, bb, bb, c);
    }
    tt_ok(tt_rel_err(dx, dx_ref, BN_N * BN_C * BN_HW) < 1e-4, "dx vs finite differences (%.2g)",
          tt_rel_err(dx, dx_ref, BN_N * BN_C * BN_HW));
    tt_ok(tt_rel_err(dw, dg_ref, BN_C) < 1e-4 && tt_rel_err(db, db_ref, BN_C) < 1e-4,
          "dgamma, dbeta vs finite differences (%.2g, %.2g)", tt_rel_err(dw, dg_ref, BN_C),
          tt_rel_err(db, db_ref, BN_C));

    /* inference uses the running statistics and changes nothing */
    call.training = false;
    float rm_before = rm[0];
    l.ops->forward(&l, &call);
    double yinf[BN_N * BN_C * BN_HW];
    for (int i = 0; i < BN_N; i++)
        for (int c = 0; c < BN_C; c++)
            for (int q = 0; q < BN_HW; q++) {
                int k = (i * BN_C + c) * BN_HW + q;
                yinf[k] = (bn_x[k] - rm[c]) / sqrt((double)rv[c] + 1e-5) * bn_gamma[c] + bn_beta[c];
            }
    tt_ok(tt_rel_err(y, yinf, BN_N * BN_C * BN_HW) < 1e-5 && rm[0] == rm_before && nbt[0] == 1,
          "inference normalises with the running statistics and leaves them alone");

    /* add: the sum forward, the same gradient to both inputs */
    layer_cfg acfg = {.type = LAYER_ADD, .n_inputs = 2};
    strcpy(acfg.name, "sum");
    layer_t a;
    shape3 ins[2] = {in, in};
    tt_ok(layer_setup(&a, &acfg, ins, 2, &err) == 0, "add sets up");
    float x2[BN_N * BN_C * BN_HW], dx2[BN_N * BN_C * BN_HW];
    for (int i = 0; i < BN_N * BN_C * BN_HW; i++)
        x2[i] = (float)i;
    layer_call ac = {.be = be, .n = BN_N, .training = true, .x = {x, x2}, .y = y, .dy = dy,
                     .dx = {dx, dx2}};
    a.ops->forward(&a, &ac);
    a.ops->backward(&a, &ac);
    int add_ok = 1;
    for (int i = 0; i < BN_N * BN_C * BN_HW; i++)
        add_ok &= y[i] == x[i] + x2[i] && dx[i] == dy[i] && dx2[i] == dy[i];
    tt_ok(add_ok, "add: y = x0 + x1, dx0 = dx1 = dy");
    shape3 other[2] = {in, shape3_make(BN_C, 1, BN_HW + 1)};
    err_clear(&err);
    tt_ok(layer_setup(&a, &acfg, other, 2, &err) != 0 && err.code == TT_ERR_USAGE,
          "add of different shapes is refused: %s", err.msg);
    be->destroy(be);
}

int main(void)
{
    /* the layers' kernels at every instruction-set level this CPU has (as
     * TT_CPU_ISA would cap them; cpu_isa.h), each against the references */
    for (int level = CPU_ISA_PLAIN; level <= (int)cpu_isa_detected(); level++) {
        cpu_isa_set_for_test((cpu_isa_t)level);
        tt_ok(cpu_isa() == (cpu_isa_t)level, "level %s: the layer checks below run at it "
              "(CPU: %s)", cpu_isa_name((cpu_isa_t)level), cpu_isa_name(cpu_isa_detected()));
        test_dense();
        test_conv();
        test_pools();
        test_batchnorm_add();
        test_fused_relu();
        test_dropout();
        test_model();
    }
#ifdef HAVE_DNNL
    test_conv_dual_rule();
#endif
    test_init();
    test_errors();
    return tt_done();
}

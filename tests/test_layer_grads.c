/* test_layer_grads.c - every layer type of the CPU backend against a naive
 * float64 re-implementation written here, plain loops only:
 *   (a) forward vs the float64 reference,
 *   (b) backward (dy = r, loss = sum(y * r)) vs central finite differences of
 *       the float64 reference, for dx and every parameter,
 *   (c) 1, 2 and 5 threads give the same bits,
 *   (d) PyTorch's initialisation bounds, statistics, names and shapes,
 *   (e) a whole model through tower_create/tower_step vs finite differences
 *       of the float64 mean softmax cross-entropy.
 * Errors are max|a - b| / (max|b| + 1e-6) over a tensor, so small components
 * of large tensors do not dominate.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "layers/layer.h"
#include "model/model.h"
#include "tt_test.h"
#include "util/rng.h"

#define FD_EPS 1e-6
#define TOL_FWD 1e-5
#define TOL_BWD 1e-4
#define TOL_MODEL 1e-3

/* ---- helpers ---- */

static void fill_uniform(rng_t *r, float *p, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        p[i] = rng_uniform_range(r, lo, hi);
}

static void fill_nan(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
}

static double *to_double(const float *p, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++)
        d[i] = p[i];
    return d;
}

/* max|a-b| / (max|b| + 1e-6); a NaN anywhere gives NaN (which fails every
 * "err < tol" check). */
static double rel_err(const float *a, const double *b, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num))
            num = d;
        if (fabs(b[i]) > den)
            den = fabs(b[i]);
    }
    return num / (den + 1e-6);
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

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

/* The output shape each layer type should have, from the rules of SPEC 4. */
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

typedef struct {
    float *y, *dx, *grads[LAYER_MAX_PARAMS];
    float *state_copy; /* dropout: the mask */
} layer_result;

static void result_alloc(const layer_t *l, int n, layer_result *res)
{
    memset(res, 0, sizeof(*res));
    res->y = calloc((size_t)n * shape3_size(l->out), sizeof(float));
    res->dx = calloc((size_t)n * shape3_size(l->in[0]), sizeof(float));
    res->state_copy = calloc((size_t)n * shape3_size(l->out), sizeof(float));
    for (int j = 0; j < l->n_params; j++)
        res->grads[j] = calloc(l->params[j].count, sizeof(float));
}

static void result_free(const layer_t *l, layer_result *res)
{
    free(res->y);
    free(res->dx);
    free(res->state_copy);
    for (int j = 0; j < l->n_params; j++)
        free(res->grads[j]);
}

/* Forward, then backward with dy = r, on a fresh backend of `threads`. Buffers
 * are sized for max_n = n + 2 while the call uses n rows (as the last partial
 * batch does). Outputs and gradients start as NaN: the backend must write
 * every element (backward overwrites, never accumulates). */
static int run_layer(const layer_t *l, int threads, int n, const float *x, float *const *params,
                     const float *r, layer_result *res)
{
    tt_err err = {0};
    backend_t *be = backend_cpu_create(0, threads, &err);
    if (be == NULL) {
        tt_diag("backend_cpu_create(%d): %s", threads, err.msg);
        return -1;
    }
    int max_n = n + 2;
    size_t isz = shape3_size(l->in[0]), osz = shape3_size(l->out);
    size_t xin = (size_t)max_n * isz * sizeof(float), yout = (size_t)max_n * osz * sizeof(float);
    layer_call c;
    memset(&c, 0, sizeof(c));
    c.be = be;
    c.n = n;
    c.training = true;
    c.seed = 0x5eed1234ULL;
    float *dx = be->alloc(be, xin), *y = be->alloc(be, yout), *dy = be->alloc(be, yout);
    float *xd = be->alloc(be, xin);
    size_t wsb = l->ops->ws_bytes ? l->ops->ws_bytes(l, be, max_n) : 0;
    size_t stb = l->ops->state_bytes ? l->ops->state_bytes(l, max_n) : 0;
    c.ws = wsb ? be->alloc(be, wsb) : NULL;
    c.state = stb ? be->alloc(be, stb) : NULL;
    int ok = dx && y && dy && xd && (!wsb || c.ws) && (!stb || c.state);
    for (int j = 0; j < l->n_params; j++) {
        c.params[j] = be->alloc(be, l->params[j].count * sizeof(float));
        c.grads[j] = be->alloc(be, l->params[j].count * sizeof(float));
        ok = ok && c.params[j] && c.grads[j];
    }
    if (ok) {
        size_t nanb = xin > yout ? xin : yout;
        for (int j = 0; j < l->n_params; j++)
            if (l->params[j].count * sizeof(float) > nanb)
                nanb = l->params[j].count * sizeof(float);
        float *nanbuf = malloc(nanb);
        for (int j = 0; j < l->n_params; j++) {
            be->upload(be, c.params[j], params[j], l->params[j].count * sizeof(float));
            fill_nan(nanbuf, l->params[j].count);
            be->upload(be, c.grads[j], nanbuf, l->params[j].count * sizeof(float));
        }
        be->upload(be, xd, x, (size_t)n * isz * sizeof(float));
        fill_nan(nanbuf, (size_t)max_n * (isz > osz ? isz : osz));
        be->upload(be, y, nanbuf, yout);
        be->upload(be, dx, nanbuf, xin);
        c.x[0] = xd;
        c.y = y;
        l->ops->forward(l, &c);
        be->upload(be, dy, r, (size_t)n * osz * sizeof(float));
        c.dy = dy;
        c.dx[0] = dx;
        l->ops->backward(l, &c);
        be->download(be, res->y, y, (size_t)n * osz * sizeof(float));
        be->download(be, res->dx, dx, (size_t)n * isz * sizeof(float));
        for (int j = 0; j < l->n_params; j++)
            be->download(be, res->grads[j], c.grads[j], l->params[j].count * sizeof(float));
        if (l->cfg->type == LAYER_DROPOUT && c.state != NULL)
            be->download(be, res->state_copy, c.state, (size_t)n * osz * sizeof(float));
        free(nanbuf);
    } else {
        tt_diag("out of memory in run_layer");
    }
    for (int j = 0; j < l->n_params; j++) {
        be->free(be, c.params[j]);
        be->free(be, c.grads[j]);
    }
    be->free(be, dx);
    be->free(be, y);
    be->free(be, dy);
    be->free(be, xd);
    be->free(be, c.ws);
    be->free(be, c.state);
    be->destroy(be);
    return ok ? 0 : -1;
}

/* ---- (a), (b), (c) for one layer configuration ---- */

static uint64_t case_counter;

static void check_layer(const char *label, const layer_cfg *cfg, shape3 in, int n)
{
    layer_t l;
    tt_err err = {0};
    if (!tt_ok(layer_setup(&l, cfg, &in, 1, &err) == 0, "%s: setup %s", label, err.msg))
        return;
    shape3 want = expected_out(cfg, in);
    if (!tt_ok(l.out.c == want.c && l.out.h == want.h && l.out.w == want.w,
               "%s: output shape [%d,%d,%d] (want [%d,%d,%d])", label, l.out.c, l.out.h,
               l.out.w, want.c, want.h, want.w))
        return;
    size_t isz = shape3_size(in), osz = shape3_size(l.out);
    size_t nx = (size_t)n * isz, ny = (size_t)n * osz;

    rng_t rng = rng_make(0x7e57, 1, ++case_counter);
    float *x = malloc(nx * sizeof(float)), *r = malloc(ny * sizeof(float));
    fill_uniform(&rng, x, nx, -1.0f, 1.0f);
    fill_uniform(&rng, r, ny, -1.0f, 1.0f);
    float *params[LAYER_MAX_PARAMS] = {0};
    for (int j = 0; j < l.n_params; j++)
        params[j] = calloc(l.params[j].count, sizeof(float));
    if (l.ops->init != NULL)
        l.ops->init(&l, &rng, params);

    layer_result res[3];
    const int threads[3] = {1, 2, 5};
    int ran = 1;
    for (int t = 0; t < 3; t++) {
        result_alloc(&l, n, &res[t]);
        if (run_layer(&l, threads[t], n, x, params, r, &res[t]) != 0)
            ran = 0;
    }
    if (tt_ok(ran, "%s: ran on 1, 2 and 5 threads", label)) {
        /* (a) forward */
        double *xd = to_double(x, nx), *rd = to_double(r, ny);
        double *pd[LAYER_MAX_PARAMS] = {0};
        for (int j = 0; j < l.n_params; j++)
            pd[j] = to_double(params[j], l.params[j].count);
        double *yref = malloc(ny * sizeof(double)), *ybuf = malloc(ny * sizeof(double));
        ref_forward(&l, n, xd, pd, yref);
        double e = rel_err(res[0].y, yref, ny);
        tt_ok(e < TOL_FWD, "%s: forward vs float64 reference (err %.2e)", label, e);

        /* (b) backward vs finite differences */
        double *g = malloc(nx * sizeof(double));
        fd_grad(&l, n, xd, pd, rd, xd, nx, g, ybuf);
        e = rel_err(res[0].dx, g, nx);
        tt_ok(e < TOL_BWD, "%s: dx vs finite differences (err %.2e)", label, e);
        free(g);
        for (int j = 0; j < l.n_params; j++) {
            size_t cnt = l.params[j].count;
            g = malloc(cnt * sizeof(double));
            fd_grad(&l, n, xd, pd, rd, pd[j], cnt, g, ybuf);
            e = rel_err(res[0].grads[j], g, cnt);
            tt_ok(e < TOL_BWD, "%s: d%s vs finite differences (err %.2e)", label,
                  l.params[j].suffix, e);
            free(g);
        }

        /* (c) the same bits whatever the thread count */
        int same = 1;
        for (int t = 1; t < 3; t++) {
            same = same && same_bits(res[0].y, res[t].y, ny) &&
                   same_bits(res[0].dx, res[t].dx, nx);
            for (int j = 0; j < l.n_params; j++)
                same = same && same_bits(res[0].grads[j], res[t].grads[j], l.params[j].count);
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
        result_free(&l, &res[t]);
    for (int j = 0; j < l.n_params; j++)
        free(params[j]);
    free(x);
    free(r);
}

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

static void test_dense(void)
{
    const shape3 ins[2] = {{10, 1, 1}, {3, 7, 5}}; /* flat, and an image flattened C,H,W */
    for (int s = 0; s < 2; s++)
        for (int bias = 0; bias < 2; bias++)
            for (int relu = 0; relu < 2; relu++)
                for (int n = 1; n <= 3; n += 2) {
                    layer_cfg c = cfg_make("fc", LAYER_DENSE);
                    c.units = 4;
                    c.bias = bias;
                    c.relu = relu;
                    char label[128];
                    snprintf(label, sizeof(label), "dense in=[%d,%d,%d] units=4 bias=%d relu=%d n=%d",
                             ins[s].c, ins[s].h, ins[s].w, bias, relu, n);
                    check_layer(label, &c, ins[s], n);
                }
}

static void test_conv(void)
{
    shape3 in = {3, 7, 5};
    for (int stride = 1; stride <= 2; stride++)
        for (int pad = 0; pad <= 2; pad++)
            for (int bias = 0; bias < 2; bias++)
                for (int relu = 0; relu < 2; relu++)
                    for (int n = 1; n <= 3; n += 2) {
                        layer_cfg c = cfg_make("conv", LAYER_CONV2D);
                        c.filters = 4;
                        c.kernel = 3;
                        c.stride = stride;
                        c.padding = pad;
                        c.bias = bias;
                        c.relu = relu;
                        char label[128];
                        snprintf(label, sizeof(label),
                                 "conv2d 3x7x5 F=4 k=3 s=%d p=%d bias=%d relu=%d n=%d", stride,
                                 pad, bias, relu, n);
                        check_layer(label, &c, in, n);
                    }
    /* other kernels: 1x1, LeNet's 5x5 with padding 2, and a kernel as wide as the input */
    const int ks[3][3] = {{1, 1, 0}, {5, 1, 2}, {5, 2, 0}};
    for (int q = 0; q < 3; q++) {
        layer_cfg c = cfg_make("conv", LAYER_CONV2D);
        c.filters = 3;
        c.kernel = ks[q][0];
        c.stride = ks[q][1];
        c.padding = ks[q][2];
        c.relu = true;
        char label[128];
        snprintf(label, sizeof(label), "conv2d 2x6x5 F=3 k=%d s=%d p=%d relu n=5", c.kernel,
                 c.stride, c.padding);
        check_layer(label, &c, shape3_make(2, 6, 5), 5);
    }
}

static void test_pools(void)
{
    shape3 in = {3, 7, 5};
    for (int type = 0; type < 2; type++)
        for (int k = 2; k <= 3; k++)
            for (int stride = 1; stride <= 2; stride++)
                for (int pad = 0; pad <= 1; pad++)
                    for (int n = 1; n <= 3; n += 2) {
                        layer_cfg c = cfg_make("pool", type ? LAYER_AVGPOOL : LAYER_MAXPOOL);
                        c.kernel = k;
                        c.stride = stride;
                        c.padding = pad;
                        char label[128];
                        snprintf(label, sizeof(label), "%s 3x7x5 k=%d s=%d p=%d n=%d",
                                 type ? "avgpool" : "maxpool", k, stride, pad, n);
                        check_layer(label, &c, in, n);
                    }
    for (int n = 1; n <= 3; n += 2) {
        char label[128];
        layer_cfg c = cfg_make("gap", LAYER_GLOBAL_AVGPOOL);
        snprintf(label, sizeof(label), "global_avgpool 4x5x5 n=%d", n);
        check_layer(label, &c, shape3_make(4, 5, 5), n);
        c = cfg_make("relu", LAYER_RELU);
        snprintf(label, sizeof(label), "relu 3x7x5 n=%d", n);
        check_layer(label, &c, shape3_make(3, 7, 5), n);
        c = cfg_make("flat", LAYER_FLATTEN);
        snprintf(label, sizeof(label), "flatten 3x7x5 n=%d", n);
        check_layer(label, &c, shape3_make(3, 7, 5), n);
    }
}

/* Dropout in training: y = x * mask, mask in {0, 1/(1-rate)}, dx = dy * mask,
 * the same mask on every thread count; in inference the identity. */
static void test_dropout(void)
{
    const float rates[2] = {0.25f, 0.5f};
    for (int q = 0; q < 2; q++)
        for (int n = 1; n <= 3; n += 2) {
            float rate = rates[q];
            layer_cfg c = cfg_make("drop", LAYER_DROPOUT);
            c.rate = rate;
            shape3 in = {3, 7, 5};
            layer_t l;
            tt_err err = {0};
            if (!tt_ok(layer_setup(&l, &c, &in, 1, &err) == 0, "dropout setup %s", err.msg))
                return;
            size_t m = (size_t)n * shape3_size(in);
            rng_t rng = rng_make(0xd0, q, (uint64_t)n);
            float *x = malloc(m * sizeof(float)), *r = malloc(m * sizeof(float));
            fill_uniform(&rng, x, m, 0.5f, 1.5f); /* never zero: a dropped unit shows */
            fill_uniform(&rng, r, m, -1.0f, 1.0f);
            layer_result res[2];
            result_alloc(&l, n, &res[0]);
            result_alloc(&l, n, &res[1]);
            int ran = run_layer(&l, 1, n, x, NULL, r, &res[0]) == 0 &&
                      run_layer(&l, 2, n, x, NULL, r, &res[1]) == 0;
            if (tt_ok(ran, "dropout rate=%.2f n=%d: ran", rate, n)) {
                const float *mask = res[0].state_copy;
                double keep = 1.0 / (1.0 - (double)rate);
                int mask_ok = 1, y_ok = 1, dx_ok = 1;
                size_t dropped = 0;
                for (size_t i = 0; i < m; i++) {
                    if (mask[i] == 0.0f)
                        dropped++;
                    else if (fabs(mask[i] - keep) > 1e-6 * keep)
                        mask_ok = 0;
                    if (fabs((double)res[0].y[i] - (double)x[i] * mask[i]) > 1e-6 * keep * 2)
                        y_ok = 0;
                    if (fabs((double)res[0].dx[i] - (double)r[i] * mask[i]) > 1e-6 * keep * 2)
                        dx_ok = 0;
                }
                tt_ok(mask_ok, "dropout rate=%.2f n=%d: mask values are 0 or 1/(1-rate)", rate,
                      n);
                tt_ok(dropped > 0 && dropped < m,
                      "dropout rate=%.2f n=%d: some units dropped, some kept (%zu of %zu)", rate,
                      n, dropped, m);
                tt_ok(y_ok, "dropout rate=%.2f n=%d: y = x * mask", rate, n);
                tt_ok(dx_ok, "dropout rate=%.2f n=%d: dx = dy * mask", rate, n);
                tt_ok(same_bits(res[0].y, res[1].y, m) && same_bits(res[0].dx, res[1].dx, m),
                      "dropout rate=%.2f n=%d: same bits on 1 and 2 threads", rate, n);
            }
            result_free(&l, &res[0]);
            result_free(&l, &res[1]);

            /* inference: identity, whatever the mask state */
            tt_err e2 = {0};
            backend_t *be = backend_cpu_create(0, 1, &e2);
            if (be != NULL) {
                layer_call call;
                memset(&call, 0, sizeof(call));
                float *y = be->alloc(be, m * sizeof(float));
                float *st = be->alloc(be, l.ops->state_bytes(&l, n));
                call.be = be;
                call.n = n;
                call.training = false;
                call.seed = 99;
                call.x[0] = x;
                call.y = y;
                call.state = st;
                l.ops->forward(&l, &call);
                tt_ok(same_bits(x, y, m), "dropout rate=%.2f n=%d: inference is the identity",
                      rate, n);
                be->free(be, y);
                be->free(be, st);
                be->destroy(be);
            }
            free(x);
            free(r);
        }
}

/* ---- (d) initialisation, names and shapes ---- */

/* Every value within +-bound, mean ~ 0, variance ~ bound^2/3, max ~ bound. */
static void check_uniform_stats(const char *what, const float *p, size_t count, double bound,
                                int stats)
{
    double s = 0.0, s2 = 0.0, mx = 0.0;
    int inside = 1;
    for (size_t i = 0; i < count; i++) {
        double v = p[i];
        if (!(fabs(v) <= bound))
            inside = 0;
        s += v;
        s2 += v * v;
        if (fabs(v) > mx)
            mx = fabs(v);
    }
    tt_ok(inside, "%s: all %zu values within +-1/sqrt(fan_in) = %.5f (max %.5f)", what, count,
          bound, mx);
    if (!stats)
        return;
    double mean = s / count, var = s2 / count - mean * mean, want = bound * bound / 3.0;
    /* standard error of the mean: bound/sqrt(3 count); 6 of them */
    tt_ok(fabs(mean) < 6.0 * bound / sqrt(3.0 * count), "%s: mean %.2e ~ 0", what, mean);
    tt_ok(fabs(var / want - 1.0) < 0.03, "%s: variance %.4e ~ bound^2/3 = %.4e", what, var, want);
    tt_ok(mx > 0.98 * bound, "%s: the bound is used (max |w| %.5f of %.5f)", what, mx, bound);
}

static void test_init(void)
{
    /* dense 400 -> 300 (weight 120000 values) and 20 -> 5000 (bias 5000 values) */
    const int dims[2][2] = {{400, 300}, {20, 5000}};
    for (int q = 0; q < 2; q++) {
        int in = dims[q][0], out = dims[q][1];
        layer_cfg c = cfg_make("fc", LAYER_DENSE);
        c.units = out;
        shape3 s = {in, 1, 1};
        layer_t l;
        tt_err err = {0};
        if (!tt_ok(layer_setup(&l, &c, &s, 1, &err) == 0, "dense %d->%d setup %s", in, out,
                   err.msg))
            continue;
        tt_ok(l.n_params == 2 && strcmp(l.params[0].suffix, "weight") == 0 &&
                  strcmp(l.params[1].suffix, "bias") == 0,
              "dense: params are weight, bias");
        tt_ok(l.params[0].ndim == 2 && l.params[0].dims[0] == out && l.params[0].dims[1] == in &&
                  l.params[0].count == (size_t)in * out && l.params[0].trainable,
              "dense: weight is [out=%d, in=%d] as torch.nn.Linear", out, in);
        tt_ok(l.params[1].ndim == 1 && l.params[1].dims[0] == out &&
                  l.params[1].count == (size_t)out && l.params[1].trainable,
              "dense: bias is [out=%d]", out);
        float *w = malloc(l.params[0].count * sizeof(float));
        float *b = malloc(l.params[1].count * sizeof(float));
        float *p[2] = {w, b};
        rng_t rng = rng_make(42, 0, (uint64_t)q);
        l.ops->init(&l, &rng, p);
        double bound = 1.0 / sqrt((double)in);
        char what[64];
        snprintf(what, sizeof(what), "dense %d->%d weight", in, out);
        check_uniform_stats(what, w, l.params[0].count, bound * (1 + 1e-6), q == 0);
        snprintf(what, sizeof(what), "dense %d->%d bias", in, out);
        check_uniform_stats(what, b, l.params[1].count, bound * (1 + 1e-6), q == 1);
        free(w);
        free(b);
    }
    {
        layer_cfg c = cfg_make("fc", LAYER_DENSE);
        c.units = 7;
        c.bias = false;
        shape3 s = {2, 3, 4};
        layer_t l;
        tt_err err = {0};
        if (tt_ok(layer_setup(&l, &c, &s, 1, &err) == 0, "dense bias=false setup %s", err.msg))
            tt_ok(l.n_params == 1 && strcmp(l.params[0].suffix, "weight") == 0 &&
                      l.params[0].dims[0] == 7 && l.params[0].dims[1] == 24,
                  "dense bias=false: only weight [7, 24] (input [2,3,4] flattened)");
    }
    for (int bias = 1; bias >= 0; bias--) {
        layer_cfg c = cfg_make("conv", LAYER_CONV2D);
        c.filters = 64;
        c.kernel = 3;
        c.bias = bias;
        shape3 s = {32, 8, 8};
        layer_t l;
        tt_err err = {0};
        if (!tt_ok(layer_setup(&l, &c, &s, 1, &err) == 0, "conv setup %s", err.msg))
            continue;
        const param_spec *w = &l.params[0];
        tt_ok(strcmp(w->suffix, "weight") == 0 && w->ndim == 4 && w->dims[0] == 64 &&
                  w->dims[1] == 32 && w->dims[2] == 3 && w->dims[3] == 3 &&
                  w->count == 64 * 32 * 9 && w->trainable,
              "conv2d bias=%d: weight is [f=64, c=32, 3, 3] as torch.nn.Conv2d", bias);
        if (!bias) {
            tt_ok(l.n_params == 1, "conv2d bias=false: weight only");
            continue;
        }
        tt_ok(l.n_params == 2 && strcmp(l.params[1].suffix, "bias") == 0 &&
                  l.params[1].ndim == 1 && l.params[1].dims[0] == 64,
              "conv2d: bias is [64]");
        float *wp = malloc(w->count * sizeof(float)), *bp = malloc(64 * sizeof(float));
        float *p[2] = {wp, bp};
        rng_t rng = rng_make(43, 0, 0);
        l.ops->init(&l, &rng, p);
        double bound = 1.0 / sqrt(32.0 * 9.0);
        check_uniform_stats("conv2d 32->64 k=3 weight", wp, w->count, bound * (1 + 1e-6), 1);
        check_uniform_stats("conv2d 32->64 k=3 bias", bp, 64, bound * (1 + 1e-6), 0);
        free(wp);
        free(bp);
    }
    /* parameter-free layers declare no parameters */
    const layer_type none[6] = {LAYER_MAXPOOL, LAYER_AVGPOOL, LAYER_GLOBAL_AVGPOOL,
                                LAYER_RELU, LAYER_DROPOUT, LAYER_FLATTEN};
    int all_none = 1;
    for (int q = 0; q < 6; q++) {
        layer_cfg c = cfg_make("x", none[q]);
        c.kernel = 2;
        c.stride = 2;
        shape3 s = {2, 4, 4};
        layer_t l;
        tt_err err = {0};
        if (layer_setup(&l, &c, &s, 1, &err) != 0 || l.n_params != 0)
            all_none = 0;
    }
    tt_ok(all_none, "pools, relu, dropout, flatten have no parameters");
}

/* ---- (e) a whole model through the tower ---- */

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
    layers[0] = cfg_make("conv0", LAYER_CONV2D);
    layers[0].filters = 4;
    layers[0].kernel = 3;
    layers[0].padding = 1;
    layers[0].relu = true;
    layers[1] = cfg_make("pool0", LAYER_MAXPOOL);
    layers[1].kernel = 2;
    layers[1].stride = 2;
    layers[2] = cfg_make("fc0", LAYER_DENSE);
    layers[2].units = 6;
    layers[2].relu = true;
    layers[3] = cfg_make("fc1", LAYER_DENSE);
    layers[3].units = M_CLASSES;
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
    rng_t rng = rng_make(0x30de1, 0, 0);
    float *x = malloc((size_t)n * isz * sizeof(float));
    fill_uniform(&rng, x, (size_t)n * isz, -1.0f, 1.0f);
    int32_t labels[3];
    for (int r = 0; r < n; r++)
        labels[r] = (int32_t)rng_below(&rng, M_CLASSES);

    float *grads[2];
    double loss_sum[2];
    int correct[2], ran = 1;
    float *grads_again = malloc(m.n_trainable * sizeof(float));
    for (int t = 0; t < 2; t++) {
        grads[t] = malloc(m.n_trainable * sizeof(float));
        backend_t *be = backend_cpu_create(0, t + 1, &err);
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
        double *xd = to_double(x, (size_t)n * isz);
        double *pd[M_LAYERS][2] = {{NULL}};
        double *acts[M_LAYERS];
        for (int i = 0; i < M_LAYERS; i++) {
            acts[i] = malloc((size_t)n * shape3_size(m.layers[i].out) * sizeof(double));
            for (int j = 0; j < 2; j++)
                if (idx[i][j] >= 0)
                    pd[i][j] = to_double(host + m.params[idx[i][j]].offset,
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
                double e = rel_err(grads[0] + pe->offset, g, pe->count);
                tt_ok(e < TOL_MODEL, "model: d loss / d %s vs finite differences (err %.2e)",
                      pe->name, e);
                free(g);
            }
        tt_ok(same_bits(grads[0], grads[1], m.n_trainable) && loss_sum[0] == loss_sum[1],
              "model: loss and gradients bitwise equal on 1 and 2 threads");
        tt_ok(same_bits(grads[0], grads_again, m.n_trainable),
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

int main(void)
{
    test_dense();
    test_conv();
    test_pools();
    test_dropout();
    test_init();
    test_model();
    return tt_done();
}

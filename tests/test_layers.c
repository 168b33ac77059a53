/* test_layers.c - every layer type through its layer_ops on the CPU backend,
 * against an independent float64 reference written here with plain loops:
 *   (a) forward vs the reference forward;
 *   (b) dx, dW, db from backward, with dy = r (loss = sum(y * r)), vs central
 *       finite differences of the reference loss in float64;
 *   (c) threads = 1 and threads = 2 give the same bits;
 *   (d) PyTorch parameter names, shapes and default initialisation.
 * Shapes are small and odd so that padding, strides and uneven splits over
 * the threads all show up. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/math.h"
#include "layers/layer.h"
#include "tests/tt_test.h"

/* ---- a private random stream (the test does not reuse util/rng.h) ---- */

static uint64_t test_state = 12345;

static double test_uniform(double lo, double hi)
{
    test_state ^= test_state << 13;
    test_state ^= test_state >> 7;
    test_state ^= test_state << 17;
    return lo + (hi - lo) * (double)(test_state >> 11) / 9007199254740992.0;
}

static void fill_random(float *p, size_t count, double lo, double hi)
{
    for (size_t i = 0; i < count; i++)
        p[i] = (float)test_uniform(lo, hi);
}

/* ---- the float64 references: plain loops, one per layer type ---- */

typedef struct {
    layer_type type;
    int n, c, h, w;             /* input batch */
    int units, filters, k, s, p;
    bool bias, relu;
} ref_desc;

static int ref_out_hw(int in, int k, int s, int p)
{
    return (in + 2 * p - k) / s + 1;
}

static size_t ref_out_count(const ref_desc *r)
{
    int oh = ref_out_hw(r->h, r->k, r->s, r->p), ow = ref_out_hw(r->w, r->k, r->s, r->p);
    switch (r->type) {
    case LAYER_DENSE:
        return (size_t)r->n * r->units;
    case LAYER_CONV2D:
        return (size_t)r->n * r->filters * oh * ow;
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
        return (size_t)r->n * r->c * oh * ow;
    case LAYER_GLOBAL_AVGPOOL:
        return (size_t)r->n * r->c;
    default:
        return (size_t)r->n * r->c * r->h * r->w;
    }
}

/* y = layer(x; w, b) in float64. w, b may be NULL where the layer has none. */
static void ref_forward(const ref_desc *r, const double *x, const double *w, const double *b,
                        double *y)
{
    int N = r->n, C = r->c, H = r->h, W = r->w, K = r->k, S = r->s, P = r->p;
    int OH = ref_out_hw(H, K, S, P), OW = ref_out_hw(W, K, S, P);
    int in = C * H * W;
    switch (r->type) {
    case LAYER_DENSE:
        for (int i = 0; i < N; i++)
            for (int o = 0; o < r->units; o++) {
                double s = r->bias ? b[o] : 0.0;
                for (int j = 0; j < in; j++)
                    s += x[i * in + j] * w[o * in + j];
                y[i * r->units + o] = r->relu && s < 0.0 ? 0.0 : s;
            }
        break;
    case LAYER_CONV2D:
        for (int i = 0; i < N; i++)
            for (int f = 0; f < r->filters; f++)
                for (int oy = 0; oy < OH; oy++)
                    for (int ox = 0; ox < OW; ox++) {
                        double s = r->bias ? b[f] : 0.0;
                        for (int c = 0; c < C; c++)
                            for (int ky = 0; ky < K; ky++)
                                for (int kx = 0; kx < K; kx++) {
                                    int iy = oy * S - P + ky, ix = ox * S - P + kx;
                                    if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                        continue;
                                    s += x[((i * C + c) * H + iy) * W + ix] *
                                         w[((f * C + c) * K + ky) * K + kx];
                                }
                        y[((i * r->filters + f) * OH + oy) * OW + ox] =
                            r->relu && s < 0.0 ? 0.0 : s;
                    }
        break;
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
        for (int i = 0; i < N * C; i++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    double best = -INFINITY, sum = 0.0;
                    for (int ky = 0; ky < K; ky++)
                        for (int kx = 0; kx < K; kx++) {
                            int iy = oy * S - P + ky, ix = ox * S - P + kx;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                continue; /* max: -inf padding; avg: zero padding */
                            double v = x[(i * H + iy) * W + ix];
                            sum += v;
                            if (v > best)
                                best = v;
                        }
                    y[(i * OH + oy) * OW + ox] =
                        r->type == LAYER_MAXPOOL ? best : sum / (double)(K * K);
                }
        break;
    case LAYER_GLOBAL_AVGPOOL:
        for (int i = 0; i < N * C; i++) {
            double s = 0.0;
            for (int q = 0; q < H * W; q++)
                s += x[i * H * W + q];
            y[i] = s / (double)(H * W);
        }
        break;
    case LAYER_RELU:
        for (int i = 0; i < N * in; i++)
            y[i] = x[i] > 0.0 ? x[i] : 0.0;
        break;
    default: /* flatten, dropout in inference: identity */
        for (int i = 0; i < N * in; i++)
            y[i] = x[i];
        break;
    }
}

static double ref_loss(const ref_desc *r, const double *x, const double *w, const double *b,
                       const float *dy, double *ybuf)
{
    ref_forward(r, x, w, b, ybuf);
    double l = 0.0;
    size_t cnt = ref_out_count(r);
    for (size_t i = 0; i < cnt; i++)
        l += ybuf[i] * (double)dy[i];
    return l;
}

/* d loss / d v[i] for every i, by central differences in float64. */
static void ref_grad_fd(const ref_desc *r, double *x, double *w, double *b, const float *dy,
                        double *v, size_t count, double *g, double *ybuf)
{
    const double eps = 1e-6;
    for (size_t i = 0; i < count; i++) {
        double keep = v[i];
        v[i] = keep + eps;
        double lp = ref_loss(r, x, w, b, dy, ybuf);
        v[i] = keep - eps;
        double lm = ref_loss(r, x, w, b, dy, ybuf);
        v[i] = keep;
        g[i] = (lp - lm) / (2.0 * eps);
    }
}

/* max |a - ref| / max |ref|: a norm-wise relative error, robust near zeros. */
static double rel_err(const float *a, const double *ref, size_t count)
{
    double diff = 0.0, scale = 1e-30;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= diff))
            diff = d; /* NaN counts as the worst */
        if (fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    }
    return diff / scale;
}

/* ---- running a layer on a CPU backend ---- */

typedef struct {
    layer_cfg cfg;
    layer_t layer;
    ref_desc ref;
    size_t in_count, out_count; /* whole batch */
} case_t;

/* Host-side results of one forward + backward. */
typedef struct {
    float *y, *dx, *grads[LAYER_MAX_PARAMS];
} run_out;

static void run_out_free(run_out *o)
{
    free(o->y);
    free(o->dx);
    for (int j = 0; j < LAYER_MAX_PARAMS; j++)
        free(o->grads[j]);
    memset(o, 0, sizeof(*o));
}

static void *dev_copy(backend_t *be, const void *host, size_t bytes)
{
    void *d = be->alloc(be, bytes ? bytes : 4);
    if (d != NULL && host != NULL && bytes > 0)
        be->upload(be, d, host, bytes);
    return d;
}

static void *host_copy(backend_t *be, const void *dev, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 4);
    if (h != NULL && bytes > 0)
        be->download(be, h, dev, bytes);
    return h;
}

/* Runs forward (and backward with dy when dy != NULL) with `threads` threads. */
static int run_layer(const case_t *t, int threads, bool training, uint64_t seed, const float *x,
                     float *const *params, const float *dy, run_out *out)
{
    const layer_t *l = &t->layer;
    tt_err err;
    err_clear(&err);
    backend_t *be = backend_cpu_create(0, threads, &err);
    if (be == NULL) {
        tt_diag("backend_cpu_create: %s", err.msg);
        return -1;
    }
    memset(out, 0, sizeof(*out));
    int n = t->ref.n;
    size_t ws = l->ops->ws_bytes ? l->ops->ws_bytes(l, be, n) : 0;
    size_t st = l->ops->state_bytes ? l->ops->state_bytes(l, n) : 0;
    layer_call c;
    memset(&c, 0, sizeof(c));
    c.be = be;
    c.n = n;
    c.training = training;
    c.seed = seed;
    float *dx_dev = NULL, *x_dev = dev_copy(be, x, t->in_count * sizeof(float));
    c.x[0] = x_dev;
    c.y = dev_copy(be, NULL, t->out_count * sizeof(float));
    c.ws = dev_copy(be, NULL, ws);
    c.state = dev_copy(be, NULL, st);
    for (int j = 0; j < l->n_params; j++) {
        c.params[j] = dev_copy(be, params[j], l->params[j].count * sizeof(float));
        c.grads[j] = dev_copy(be, NULL, l->params[j].count * sizeof(float));
    }
    l->ops->forward(l, &c);
    out->y = host_copy(be, c.y, t->out_count * sizeof(float));
    if (dy != NULL) {
        c.dy = dev_copy(be, dy, t->out_count * sizeof(float));
        dx_dev = dev_copy(be, NULL, t->in_count * sizeof(float));
        c.dx[0] = dx_dev;
        l->ops->backward(l, &c);
        out->dx = host_copy(be, dx_dev, t->in_count * sizeof(float));
        for (int j = 0; j < l->n_params; j++)
            out->grads[j] = host_copy(be, c.grads[j], l->params[j].count * sizeof(float));
    }
    be->free(be, x_dev);
    be->free(be, c.y);
    be->free(be, c.ws);
    be->free(be, c.state);
    be->free(be, c.dy);
    be->free(be, dx_dev);
    for (int j = 0; j < l->n_params; j++) {
        be->free(be, c.params[j]);
        be->free(be, c.grads[j]);
    }
    be->destroy(be);
    return 0;
}

static int case_make(case_t *t, layer_type type, int n, int c, int h, int w, tt_err *err)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->cfg.name, sizeof(t->cfg.name), "%s", "l0");
    t->cfg.type = type;
    t->cfg.n_inputs = 1;
    t->cfg.inputs[0] = -1;
    t->cfg.stride = 1;
    t->ref.type = type;
    t->ref.n = n;
    t->ref.c = c;
    t->ref.h = h;
    t->ref.w = w;
    t->ref.k = 1;
    t->ref.s = 1;
    (void)err;
    return 0;
}

/* Copies the layer settings into the reference and sets the layer up. */
static int case_setup(case_t *t, tt_err *err)
{
    t->ref.units = t->cfg.units;
    t->ref.filters = t->cfg.filters;
    if (t->cfg.kernel > 0) {
        t->ref.k = t->cfg.kernel;
        t->ref.s = t->cfg.stride;
        t->ref.p = t->cfg.padding;
    }
    t->ref.bias = t->cfg.bias;
    t->ref.relu = t->cfg.relu;
    shape3 in = shape3_make(t->ref.c, t->ref.h, t->ref.w);
    if (layer_setup(&t->layer, &t->cfg, &in, 1, err) != 0)
        return -1;
    t->in_count = (size_t)t->ref.n * shape3_size(in);
    t->out_count = (size_t)t->ref.n * shape3_size(t->layer.out);
    return 0;
}

static void case_desc(const case_t *t, char *buf, size_t len)
{
    const ref_desc *r = &t->ref;
    snprintf(buf, len, "%s n%d in[%d,%d,%d] units%d f%d k%d s%d p%d%s%s",
             layer_type_name(r->type), r->n, r->c, r->h, r->w, r->units, r->filters, r->k, r->s,
             r->p, r->bias ? " bias" : "", r->relu ? " relu" : "");
}

static double *to_double(const float *p, size_t count)
{
    double *d = malloc((count ? count : 1) * sizeof(double));
    for (size_t i = 0; i < count; i++)
        d[i] = p[i];
    return d;
}

static bool bits_equal(const float *a, const float *b, size_t count)
{
    return (a == NULL && b == NULL) ||
           (a != NULL && b != NULL && memcmp(a, b, count * sizeof(float)) == 0);
}

/* (a), (b), (c) for one configured case. */
static void check_case(case_t *t)
{
    char name[200];
    case_desc(t, name, sizeof(name));
    const layer_t *l = &t->layer;
    const ref_desc *r = &t->ref;
    size_t out_ref = ref_out_count(r);
    if (!tt_ok(out_ref == t->out_count, "%s: output shape [%d,%d,%d] as PyTorch", name,
               l->out.c, l->out.h, l->out.w))
        return;

    float *x = malloc(t->in_count * sizeof(float)), *dy = malloc(t->out_count * sizeof(float));
    float *params[LAYER_MAX_PARAMS] = {NULL};
    fill_random(x, t->in_count, -1.0, 1.0);
    fill_random(dy, t->out_count, -1.0, 1.0);
    for (int j = 0; j < l->n_params; j++) {
        params[j] = malloc(l->params[j].count * sizeof(float));
        fill_random(params[j], l->params[j].count, -0.5, 0.5);
    }
    /* the reference: weight first, then bias (param order of the layer) */
    double *xd = to_double(x, t->in_count);
    double *wd = l->n_params > 0 ? to_double(params[0], l->params[0].count) : NULL;
    double *bd = l->n_params > 1 ? to_double(params[1], l->params[1].count) : NULL;
    double *yref = malloc(out_ref * sizeof(double)), *ybuf = malloc(out_ref * sizeof(double));
    ref_forward(r, xd, wd, bd, yref);

    run_out o1, o2;
    if (run_layer(t, 1, true, 7, x, params, dy, &o1) != 0 ||
        run_layer(t, 2, true, 7, x, params, dy, &o2) != 0) {
        tt_ok(0, "%s: runs", name);
        goto done;
    }
    double e = rel_err(o1.y, yref, out_ref);
    tt_ok(e < 2e-5, "%s: forward vs float64 reference (rel err %.2g)", name, e);

    double *g = malloc(t->in_count * sizeof(double));
    ref_grad_fd(r, xd, wd, bd, dy, xd, t->in_count, g, ybuf);
    e = rel_err(o1.dx, g, t->in_count);
    tt_ok(e < 1e-4, "%s: dx vs finite differences (rel err %.2g)", name, e);
    free(g);
    for (int j = 0; j < l->n_params; j++) {
        size_t cnt = l->params[j].count;
        g = malloc(cnt * sizeof(double));
        ref_grad_fd(r, xd, wd, bd, dy, j == 0 ? wd : bd, cnt, g, ybuf);
        e = rel_err(o1.grads[j], g, cnt);
        tt_ok(e < 1e-4, "%s: d%s vs finite differences (rel err %.2g)", name,
              l->params[j].suffix, e);
        free(g);
    }

    bool same = bits_equal(o1.y, o2.y, t->out_count) && bits_equal(o1.dx, o2.dx, t->in_count);
    for (int j = 0; j < l->n_params; j++)
        same = same && bits_equal(o1.grads[j], o2.grads[j], l->params[j].count);
    tt_ok(same, "%s: threads 1 and 2 give the same bits", name);
    run_out_free(&o1);
    run_out_free(&o2);
done:
    free(x);
    free(dy);
    for (int j = 0; j < l->n_params; j++)
        free(params[j]);
    free(xd);
    free(wd);
    free(bd);
    free(yref);
    free(ybuf);
}

/* ---- the cases ---- */

static void test_dense(void)
{
    struct { int n, c, h, w, units; bool bias, relu; } cases[] = {
        {1, 7, 1, 1, 5, true, false},
        {3, 2, 3, 4, 6, false, true},   /* flattens C,H,W */
        {3, 13, 1, 1, 1, true, true},
        {5, 9, 1, 1, 11, true, false},  /* rows split unevenly over 2 threads */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        case_t t;
        tt_err err;
        err_clear(&err);
        case_make(&t, LAYER_DENSE, cases[i].n, cases[i].c, cases[i].h, cases[i].w, &err);
        t.cfg.units = cases[i].units;
        t.cfg.bias = cases[i].bias;
        t.cfg.relu = cases[i].relu;
        if (!tt_ok(case_setup(&t, &err) == 0, "dense case %zu sets up (%s)", i, err.msg))
            continue;
        check_case(&t);
    }
}

static void test_conv2d(void)
{
    struct { int n, c, h, w, f, k, s, p; bool bias, relu; } cases[] = {
        {1, 1, 5, 5, 2, 3, 1, 0, true, false},
        {3, 2, 7, 6, 3, 3, 2, 1, true, true},
        {3, 3, 6, 7, 4, 5, 1, 2, false, true},
        {3, 2, 5, 5, 2, 1, 1, 0, true, false},
        {3, 1, 4, 4, 2, 4, 3, 2, true, false},   /* stride 3, window past the edge */
        {1, 2, 1, 1, 2, 5, 1, 2, true, false},   /* 1x1 image, all padding but the centre */
        {3, 2, 2, 3, 3, 3, 1, 2, false, false},  /* padding wider than the image */
        {7, 2, 6, 5, 3, 3, 2, 0, true, true},    /* more images than backward groups */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        case_t t;
        tt_err err;
        err_clear(&err);
        case_make(&t, LAYER_CONV2D, cases[i].n, cases[i].c, cases[i].h, cases[i].w, &err);
        t.cfg.filters = cases[i].f;
        t.cfg.kernel = cases[i].k;
        t.cfg.stride = cases[i].s;
        t.cfg.padding = cases[i].p;
        t.cfg.bias = cases[i].bias;
        t.cfg.relu = cases[i].relu;
        if (!tt_ok(case_setup(&t, &err) == 0, "conv2d case %zu sets up (%s)", i, err.msg))
            continue;
        check_case(&t);
    }
}

static void test_pools(void)
{
    struct { layer_type type; int n, c, h, w, k, s, p; } cases[] = {
        {LAYER_MAXPOOL, 3, 2, 8, 6, 2, 2, 0},   /* the 2x2 fast path */
        {LAYER_MAXPOOL, 1, 3, 7, 5, 2, 2, 0},   /* odd sizes: last row/column dropped */
        {LAYER_MAXPOOL, 3, 2, 7, 7, 3, 2, 1},
        {LAYER_MAXPOOL, 3, 1, 5, 6, 3, 1, 1},
        {LAYER_MAXPOOL, 1, 2, 5, 5, 4, 4, 2},
        {LAYER_AVGPOOL, 3, 2, 8, 6, 2, 2, 0},
        {LAYER_AVGPOOL, 1, 3, 7, 5, 3, 2, 1},   /* count_include_pad */
        {LAYER_AVGPOOL, 3, 2, 5, 6, 3, 1, 1},
        {LAYER_AVGPOOL, 3, 1, 9, 8, 5, 3, 2},
        {LAYER_GLOBAL_AVGPOOL, 3, 4, 4, 4, 0, 0, 0},
        {LAYER_GLOBAL_AVGPOOL, 1, 3, 3, 5, 0, 0, 0}, /* not square */
        {LAYER_GLOBAL_AVGPOOL, 3, 5, 1, 1, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        case_t t;
        tt_err err;
        err_clear(&err);
        case_make(&t, cases[i].type, cases[i].n, cases[i].c, cases[i].h, cases[i].w, &err);
        t.cfg.kernel = cases[i].k;
        t.cfg.stride = cases[i].s;
        t.cfg.padding = cases[i].p;
        if (!tt_ok(case_setup(&t, &err) == 0, "pool case %zu sets up (%s)", i, err.msg))
            continue;
        check_case(&t);
    }
}

static void test_shape_only_layers(void)
{
    layer_type types[] = {LAYER_RELU, LAYER_FLATTEN};
    int shapes[][4] = {{3, 2, 3, 5}, {1, 7, 1, 1}};
    for (int i = 0; i < 2; i++)
        for (int s = 0; s < 2; s++) {
            case_t t;
            tt_err err;
            err_clear(&err);
            case_make(&t, types[i], shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], &err);
            if (!tt_ok(case_setup(&t, &err) == 0, "%s sets up (%s)", layer_type_name(types[i]),
                       err.msg))
                continue;
            check_case(&t);
        }
    /* flatten's output shape is [C*H*W] */
    case_t t;
    tt_err err;
    err_clear(&err);
    case_make(&t, LAYER_FLATTEN, 1, 2, 3, 5, &err);
    tt_ok(case_setup(&t, &err) == 0 && t.layer.out.c == 30 && t.layer.out.h == 1 &&
              t.layer.out.w == 1, "flatten [2,3,5] -> [30]");
}

/* The fused activation and the relu layer give the same bits. */
static void test_fused_relu(void)
{
    case_t fused, plain, relu;
    tt_err err;
    err_clear(&err);
    case_make(&fused, LAYER_CONV2D, 3, 2, 6, 6, &err);
    fused.cfg.filters = 3;
    fused.cfg.kernel = 3;
    fused.cfg.padding = 1;
    fused.cfg.bias = true;
    fused.cfg.relu = true;
    plain = fused;
    plain.cfg.relu = false;
    if (case_setup(&fused, &err) != 0 || case_setup(&plain, &err) != 0) {
        tt_ok(0, "fused relu cases set up (%s)", err.msg);
        return;
    }
    case_make(&relu, LAYER_RELU, 3, 3, 6, 6, &err);
    case_setup(&relu, &err);
    float *x = malloc(fused.in_count * sizeof(float));
    float *dy = malloc(fused.out_count * sizeof(float));
    float *w = malloc(54 * sizeof(float)), *b = malloc(3 * sizeof(float));
    fill_random(x, fused.in_count, -1, 1);
    fill_random(dy, fused.out_count, -1, 1);
    fill_random(w, 54, -0.5, 0.5);
    fill_random(b, 3, -0.5, 0.5);
    float *params[2] = {w, b};
    run_out of, op, orl, op2;
    run_layer(&fused, 2, true, 1, x, params, dy, &of);
    run_layer(&plain, 2, true, 1, x, params, NULL, &op);
    run_layer(&relu, 2, true, 1, op.y, NULL, dy, &orl);
    tt_ok(bits_equal(of.y, orl.y, fused.out_count), "conv2d relu: fused == conv then relu layer");
    /* backward: the relu layer's dx is the dy the plain conv sees */
    run_layer(&plain, 2, true, 1, x, params, orl.dx, &op2);
    tt_ok(bits_equal(of.dx, op2.dx, fused.in_count) &&
              bits_equal(of.grads[0], op2.grads[0], 54) && bits_equal(of.grads[1], op2.grads[1], 3),
          "conv2d relu backward: fused == relu layer then conv");
    run_out_free(&of);
    run_out_free(&op);
    run_out_free(&orl);
    run_out_free(&op2);
    free(x);
    free(dy);
    free(w);
    free(b);
}

static void test_dropout(void)
{
    case_t t;
    tt_err err;
    err_clear(&err);
    case_make(&t, LAYER_DROPOUT, 4, 3, 20, 21, &err);
    t.cfg.rate = 0.3f;
    if (!tt_ok(case_setup(&t, &err) == 0, "dropout sets up (%s)", err.msg))
        return;
    float *x = malloc(t.in_count * sizeof(float)), *dy = malloc(t.in_count * sizeof(float));
    fill_random(x, t.in_count, 0.5, 1.5); /* never zero, so dropped units show */
    fill_random(dy, t.in_count, -1, 1);
    run_out a, b, c, inf;
    run_layer(&t, 1, true, 99, x, NULL, dy, &a);
    run_layer(&t, 2, true, 99, x, NULL, dy, &b);
    run_layer(&t, 1, true, 100, x, NULL, dy, &c);
    run_layer(&t, 1, false, 99, x, NULL, dy, &inf);
    size_t dropped = 0, bad = 0, bad_dx = 0;
    float keep = 1.0f / (1.0f - 0.3f);
    for (size_t i = 0; i < t.in_count; i++) {
        if (a.y[i] == 0.0f) {
            dropped++;
            bad_dx += a.dx[i] != 0.0f;
        } else {
            bad += a.y[i] != x[i] * keep;
            bad_dx += a.dx[i] != dy[i] * keep;
        }
    }
    double frac = (double)dropped / (double)t.in_count;
    tt_ok(fabs(frac - 0.3) < 0.03, "dropout 0.3 drops %.3f of %zu units", frac, t.in_count);
    tt_ok(bad == 0, "dropout keeps units scaled by 1/(1-rate) (%zu wrong)", bad);
    tt_ok(bad_dx == 0, "dropout backward uses the forward's mask (%zu wrong)", bad_dx);
    tt_ok(bits_equal(a.y, b.y, t.in_count) && bits_equal(a.dx, b.dx, t.in_count),
          "dropout: threads 1 and 2 give the same bits");
    tt_ok(!bits_equal(a.y, c.y, t.in_count), "dropout: another seed drops other units");
    tt_ok(bits_equal(inf.y, x, t.in_count), "dropout in inference is the identity");
    run_out_free(&a);
    run_out_free(&b);
    run_out_free(&c);
    run_out_free(&inf);
    free(x);
    free(dy);
}

/* ---- (d) parameters: names, shapes, initialisation ---- */

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

/* Uniform(-bound, bound): inside the bound, mean ~ 0, variance ~ bound^2/3. */
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
    double want = bound * bound / 3.0;
    /* mean of a uniform: sd bound/sqrt(3 count); variance sd ~ 0.9 want/sqrt(count) */
    tt_ok(lo >= -bound && hi <= bound, "%s: %zu values in [-%.4f, %.4f] (got [%.4f, %.4f])",
          what, count, bound, bound, lo, hi);
    tt_ok(hi > 0.9 * bound && lo < -0.9 * bound, "%s: values reach out to the bound", what);
    tt_ok(fabs(mean) < 5.0 * bound / sqrt(3.0 * (double)count), "%s: mean %.5f ~ 0", what, mean);
    tt_ok(fabs(var - want) < 5.0 * want / sqrt((double)count), "%s: variance %.3g ~ %.3g", what,
          var, want);
}

static void test_params_init(void)
{
    tt_err err;
    err_clear(&err);
    case_t d;
    case_make(&d, LAYER_DENSE, 1, 4, 5, 15, &err); /* in = 300 */
    d.cfg.units = 200;
    d.cfg.bias = true;
    if (tt_ok(case_setup(&d, &err) == 0, "dense 300->200 sets up")) {
        int wdims[2] = {200, 300}, bdims[1] = {200};
        tt_ok(d.layer.n_params == 2 && spec_is(&d.layer.params[0], "weight", 2, wdims) &&
                  spec_is(&d.layer.params[1], "bias", 1, bdims),
              "dense params: weight [200, 300], bias [200]");
        float *w = malloc(60000 * sizeof(float)), *b = malloc(200 * sizeof(float));
        float *const p[2] = {w, b};
        rng_t rng = rng_make(1, 2, 3);
        d.layer.ops->init(&d.layer, &rng, p);
        check_uniform("dense weight init", w, 60000, 1.0 / sqrt(300.0));
        check_uniform("dense bias init", b, 200, 1.0 / sqrt(300.0));
        free(w);
        free(b);
    }
    case_t c;
    case_make(&c, LAYER_CONV2D, 1, 6, 14, 14, &err);
    c.cfg.filters = 160;
    c.cfg.kernel = 5;
    c.cfg.bias = true;
    if (tt_ok(case_setup(&c, &err) == 0, "conv 6->160 k5 sets up")) {
        int wdims[4] = {160, 6, 5, 5}, bdims[1] = {160};
        tt_ok(c.layer.n_params == 2 && spec_is(&c.layer.params[0], "weight", 4, wdims) &&
                  spec_is(&c.layer.params[1], "bias", 1, bdims),
              "conv2d params: weight [160, 6, 5, 5], bias [160]");
        size_t wn = 160 * 6 * 25;
        float *w = malloc(wn * sizeof(float)), *b = malloc(160 * sizeof(float));
        float *const p[2] = {w, b};
        rng_t rng = rng_make(4, 5, 6);
        c.layer.ops->init(&c.layer, &rng, p);
        check_uniform("conv2d weight init (fan_in = c*k*k = 150)", w, wn, 1.0 / sqrt(150.0));
        check_uniform("conv2d bias init", b, 160, 1.0 / sqrt(150.0));
        free(w);
        free(b);
    }
    case_t nb;
    case_make(&nb, LAYER_CONV2D, 1, 3, 8, 8, &err);
    nb.cfg.filters = 4;
    nb.cfg.kernel = 3;
    nb.cfg.bias = false;
    int nbdims[4] = {4, 3, 3, 3};
    tt_ok(case_setup(&nb, &err) == 0 && nb.layer.n_params == 1 &&
              spec_is(&nb.layer.params[0], "weight", 4, nbdims),
          "conv2d bias = false: only weight [4, 3, 3, 3]");
    layer_type none[] = {LAYER_MAXPOOL, LAYER_AVGPOOL, LAYER_GLOBAL_AVGPOOL, LAYER_RELU,
                         LAYER_DROPOUT, LAYER_FLATTEN};
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        case_t t;
        case_make(&t, none[i], 1, 2, 4, 4, &err);
        t.cfg.kernel = 2;
        t.cfg.stride = 2;
        bad += case_setup(&t, &err) != 0 || t.layer.n_params != 0;
    }
    tt_ok(bad == 0, "pools, relu, dropout, flatten have no parameters");
}

/* ---- setup errors ---- */

static void test_errors(void)
{
    tt_err err;
    case_t t;
    err_clear(&err);
    case_make(&t, LAYER_CONV2D, 1, 3, 4, 4, &err);
    snprintf(t.cfg.name, sizeof(t.cfg.name), "conv1");
    t.cfg.filters = 2;
    t.cfg.kernel = 7;
    t.cfg.padding = 1;
    tt_ok(case_setup(&t, &err) != 0 && err.code == TT_ERR_USAGE && strstr(err.msg, "conv1") &&
              strstr(err.msg, "kernel 7"),
          "conv2d kernel larger than the padded input: usage error naming it (%s)", err.msg);
    err_clear(&err);
    case_make(&t, LAYER_MAXPOOL, 1, 3, 8, 8, &err);
    t.cfg.kernel = 2;
    t.cfg.stride = 2;
    t.cfg.padding = 2;
    tt_ok(case_setup(&t, &err) != 0 && err.code == TT_ERR_USAGE,
          "maxpool padding > kernel/2: usage error (%s)", err.msg);
    err_clear(&err);
    case_make(&t, LAYER_DROPOUT, 1, 3, 8, 8, &err);
    t.cfg.rate = 1.0f;
    tt_ok(case_setup(&t, &err) != 0 && err.code == TT_ERR_USAGE,
          "dropout rate 1: usage error (%s)", err.msg);
    err_clear(&err);
}

int main(void)
{
    test_dense();
    test_conv2d();
    test_pools();
    test_shape_only_layers();
    test_fused_relu();
    test_dropout();
    test_params_init();
    test_errors();
    return tt_done();
}

/* test_bn_add_fusion.c - model_build runs a residual add (and its relu)
 * inside the batchnorm that is its only reader's input (model.c, fuse_adds;
 * layer.h, add_out), and the fused model must train exactly as the unfused
 * graph does.
 *
 * 1. The operation: a batchnorm doing an add, forward and backward (with and
 *    without relu, r's gradient written or added), in NCHW and in the
 *    backend's blocked layout, against a float64 re-computation of
 *    torch.nn.BatchNorm2d + add + relu.
 * 2. ResNet-20 on random 16x16 data, three SGD steps, fused against the same
 *    model with the fusion taken back (unfuse_adds: a rate-0 dropout in
 *    between, as test_fusion.c keeps relus apart, would also change the
 *    layout in bf16, whose blocked activations the dropout does not read):
 *    losses, gradients, parameters, running statistics and inference logits
 *    bitwise equal, on the CPU (fp32; bf16 where this CPU has it) and on
 *    sim (fp32, bf16). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/model.h"
#include "tt_blocked.h"
#include "tt_ref.h"
#include "tt_test.h"
#include "util/rng.h"

#define IMG 16

/* ---- 1. the operation against float64 ---- */

/* 21 pixels an image: the kernels' groups of 16 pixels and a tail of 5 */
enum { OP_N = 3, OP_C = 32, OP_HW = 21 };
#define OP_COUNT ((size_t)OP_N * OP_C * OP_HW)

typedef struct {
    float x[OP_COUNT], r[OP_COUNT], dy[OP_COUNT], dr0[OP_COUNT];
    float gamma[OP_C], beta[OP_C], rmean[OP_C], rvar[OP_C];
} op_inputs;

/* x, r, dy and the parameters as NCHW floats; what dr held before (the
 * other reader's gradient, for the accumulating case) */
static void op_fill(op_inputs *in)
{
    tt_rng g = tt_rng_make(41);
    tt_fill(&g, in->x, OP_COUNT, -2.0, 3.0);
    tt_fill(&g, in->r, OP_COUNT, -1.0, 1.0);
    tt_fill(&g, in->dy, OP_COUNT, -1.0, 1.0);
    tt_fill(&g, in->dr0, OP_COUNT, -1.0, 1.0);
    tt_fill(&g, in->gamma, OP_C, 0.5, 1.5);
    tt_fill(&g, in->beta, OP_C, -0.5, 0.5);
    tt_fill(&g, in->rmean, OP_C, -0.1, 0.1);
    tt_fill(&g, in->rvar, OP_C, 0.8, 1.2);
}

/* The largest |got - want| / (1 + |want|) over count values. */
static double worst(const float *got, const double *want, size_t count)
{
    double w = 0;
    for (size_t i = 0; i < count; i++) {
        double e = fabs(got[i] - want[i]) / (1.0 + fabs(want[i]));
        w = e > w ? e : w;
    }
    return w;
}

/* What the op gave, in NCHW order. */
typedef struct {
    float y[OP_COUNT], dx[OP_COUNT], dr[OP_COUNT];
    float dgamma[OP_C], dbeta[OP_C], rmean[OP_C], rvar[OP_C];
} op_outputs;

/* The float64 reference, checked against o: forward, then backward with the
 * relu mask of the op's own y (a value at 0 either side of the mask would
 * otherwise decide a whole gradient). */
static void op_check(const op_inputs *in, const op_outputs *o, bool relu, bool accumulate,
                     const char *what)
{
    const double eps = 1e-5, mom = 0.1, M = (double)OP_N * OP_HW;
    static double y[OP_COUNT], dx[OP_COUNT], dr[OP_COUNT];
    double dgamma[OP_C], dbeta[OP_C], rmean[OP_C], rvar[OP_C];
    for (int ch = 0; ch < OP_C; ch++) {
        double s = 0, s2 = 0;
        for (int i = 0; i < OP_N; i++)
            for (int p = 0; p < OP_HW; p++)
                s += in->x[((size_t)i * OP_C + ch) * OP_HW + p];
        double mean = s / M;
        for (int i = 0; i < OP_N; i++)
            for (int p = 0; p < OP_HW; p++) {
                double d = in->x[((size_t)i * OP_C + ch) * OP_HW + p] - mean;
                s2 += d * d;
            }
        double var = s2 / M, invstd = 1.0 / sqrt(var + eps);
        rmean[ch] = (1 - mom) * in->rmean[ch] + mom * mean;
        rvar[ch] = (1 - mom) * in->rvar[ch] + mom * s2 / (M - 1);
        double sg = 0, sgx = 0;
        for (int i = 0; i < OP_N; i++)
            for (int p = 0; p < OP_HW; p++) {
                size_t q = ((size_t)i * OP_C + ch) * OP_HW + p;
                double v = (in->x[q] - mean) * invstd * in->gamma[ch] + in->beta[ch] + in->r[q];
                y[q] = relu && v < 0 ? 0 : v;
                double gq = relu && !(o->y[q] > 0) ? 0 : in->dy[q];
                dr[q] = gq + (accumulate ? in->dr0[q] : 0);
                sg += gq;
                sgx += gq * (in->x[q] - mean) * invstd;
            }
        dgamma[ch] = sgx;
        dbeta[ch] = sg;
        for (int i = 0; i < OP_N; i++)
            for (int p = 0; p < OP_HW; p++) {
                size_t q = ((size_t)i * OP_C + ch) * OP_HW + p;
                double gq = relu && !(o->y[q] > 0) ? 0 : in->dy[q];
                double xhat = (in->x[q] - mean) * invstd;
                dx[q] = in->gamma[ch] * invstd / M * (M * gq - sg - xhat * sgx);
            }
    }
    double e[7] = {worst(o->y, y, OP_COUNT), worst(o->dx, dx, OP_COUNT),
                   worst(o->dr, dr, OP_COUNT), worst(o->dgamma, dgamma, OP_C),
                   worst(o->dbeta, dbeta, OP_C), worst(o->rmean, rmean, OP_C),
                   worst(o->rvar, rvar, OP_C)};
    double w = 0;
    for (int k = 0; k < 7; k++)
        w = e[k] > w ? e[k] : w;
    /* float32 arithmetic over at most 15 values a channel: a few ulps */
    tt_ok(w < 2e-5, "%s: y, dx, dr, dgamma, dbeta, running stats match float64 (worst %.2g: "
          "%.2g %.2g %.2g %.2g %.2g %.2g %.2g)", what, w, e[0], e[1], e[2], e[3], e[4], e[5], e[6]);
}

/* One forward and backward of the batchnorm layer with add_out, through
 * layer_batchnorm_ops on backend be, in NCHW or its blocked layout. */
static int op_run(backend_t *be, const op_inputs *in, bool blocked, bool relu, bool accumulate,
                  op_outputs *o)
{
    layer_cfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.name, sizeof(cfg.name), "bn");
    cfg.type = LAYER_BATCHNORM;
    cfg.momentum = 0.1f;
    cfg.epsilon = 1e-5f;
    layer_t l;
    tt_err err = {0};
    shape3 s = shape3_make(OP_C, 1, OP_HW);
    if (layer_setup(&l, &cfg, &s, 1, &err) != 0) {
        tt_diag("layer_setup: %s", err.msg);
        return -1;
    }
    l.add_out = true;
    l.relu_out = relu;
    bool nhwc = be->blocked_nhwc;
    size_t bytes = OP_COUNT * sizeof(float);
    /* the device's copies, blocked where asked (fp32 activations only) */
    float tmp[OP_COUNT];
    const float *src[4] = {in->x, in->r, in->dy, in->dr0};
    float *dev[4];
    for (int k = 0; k < 4; k++) {
        if (blocked)
            to_blocked(src[k], OP_N, OP_C, OP_HW, nhwc, tmp);
        dev[k] = tt_dev_copy(be, blocked ? tmp : src[k], bytes);
    }
    float params[5][OP_C];
    memcpy(params[0], in->gamma, sizeof(params[0]));
    memcpy(params[1], in->beta, sizeof(params[1]));
    memcpy(params[2], in->rmean, sizeof(params[2]));
    memcpy(params[3], in->rvar, sizeof(params[3]));
    memset(params[4], 0, sizeof(params[4]));
    float *dparams = tt_dev_copy(be, params, sizeof(params));
    float *y = be->alloc(be, bytes), *dx = be->alloc(be, bytes);
    float *grads = be->alloc(be, 2 * OP_C * sizeof(float));
    float *state = be->alloc(be, l.ops->state_bytes(&l, OP_N));
    layer_call c;
    memset(&c, 0, sizeof(c));
    c.be = be;
    c.n = OP_N;
    c.training = true;
    c.x[0] = dev[0];
    c.x[1] = dev[1];
    c.blocked_x[0] = c.blocked_x[1] = c.blocked_y = blocked;
    c.y = y;
    for (int j = 0; j < 5; j++)
        c.params[j] = dparams + j * OP_C;
    c.grads[0] = grads;
    c.grads[1] = grads + OP_C;
    c.state = state;
    l.ops->forward(&l, &c);
    c.dy = dev[2];
    c.dx[0] = dx;
    c.dx[1] = dev[3];
    c.dx_accumulate[1] = accumulate;
    if (!accumulate)
        be->copy(be, dev[3], y, bytes); /* garbage the op must overwrite */
    l.ops->backward(&l, &c);
    float *outs[3] = {o->y, o->dx, o->dr}, *devs[3] = {y, dx, dev[3]};
    for (int k = 0; k < 3; k++) {
        be->download(be, blocked ? tmp : outs[k], devs[k], bytes);
        if (blocked)
            from_blocked(tmp, OP_N, OP_C, OP_HW, nhwc, outs[k]);
    }
    be->download(be, params, dparams, sizeof(params));
    memcpy(o->rmean, params[2], sizeof(o->rmean));
    memcpy(o->rvar, params[3], sizeof(o->rvar));
    be->download(be, o->dgamma, grads, OP_C * sizeof(float));
    be->download(be, o->dbeta, grads + OP_C, OP_C * sizeof(float));
    float *all[] = {dev[0], dev[1], dev[2], dev[3], dparams, y, dx, grads, state};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
        be->free(be, all[k]);
    return params[4][0] == 1.0f ? 0 : -1; /* num_batches_tracked counted */
}

static void test_op(backend_t *be, const char *name)
{
    static op_inputs in;
    static op_outputs o;
    op_fill(&in);
    for (int layout = 0; layout < 2; layout++) {
        bool blocked = layout == 1;
        /* bf16 blocked activations: the op is checked in fp32 only */
        if (blocked && (!be->blocked_layout || be->blocked_bf16))
            continue;
        for (int k = 0; k < 4; k++) {
            bool relu = k & 1, acc = k & 2;
            char what[128];
            snprintf(what, sizeof(what), "%s %s, %s, dr %s", name, blocked ? "blocked" : "NCHW",
                     relu ? "relu" : "no relu", acc ? "added to" : "written");
            if (tt_ok(op_run(be, &in, blocked, relu, acc, &o) == 0, "%s: runs", what))
                op_check(&in, &o, relu, acc, what);
        }
    }
}

/* ---- 2. ResNet-20, fused against apart ---- */

static char dir[256];

/* ResNet-20 as models/resnet20.cfg of the source tree has it (make check
 * exports TT_SRCDIR; by hand, run from the source tree), on 16x16 images
 * instead of 32x32 (a quarter of the work, for the sanitizer and valgrind
 * builds; the same layers). */
static int build(model_cfg *mc, model_t *m)
{
    tt_err err = {0};
    const char *src = getenv("TT_SRCDIR");
    char path[512], out[320];
    static char text[16384];
    snprintf(path, sizeof(path), "%s/models/resnet20.cfg", src ? src : ".");
    FILE *f = fopen(path, "r");
    size_t len = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
        fclose(f);
    text[len] = 0;
    char *in = strstr(text, "input = [3, 32, 32];");
    if (in == NULL) {
        tt_diag("%s: no 'input = [3, 32, 32];'", path);
        return -1;
    }
    memcpy(in, "input = [3, 16, 16];", 20);
    snprintf(out, sizeof(out), "%s/resnet20_16.cfg", dir);
    tt_write_file(NULL, out, text);
    if (model_cfg_load(out, mc, &err) != 0 ||
        model_build(mc, shape3_make(3, IMG, IMG), m, &err) != 0) {
        tt_diag("%s: %s", out, err.msg);
        return -1;
    }
    return 0;
}

/* The same model with every fused add apart again, as model_build left it
 * before fuse_adds: the add runs as its own layer, the batchnorm without
 * the add (and without relu, which fuse_adds requires of it). */
static void unfuse_adds(model_t *m)
{
    for (int i = 0; i < m->n_layers; i++) {
        layer_t *l = &m->layers[i];
        if (l->add_out)
            l->add_out = l->relu_out = false;
        l->add_fused = false;
    }
}

enum { BATCH = 3, STEPS = 3 };

typedef struct {
    double loss[STEPS];
    float *grads, *params, *logits;
} outcome;

static void outcome_free(outcome *o)
{
    free(o->grads);
    free(o->params);
    free(o->logits);
}

static float *params_init(const model_t *m)
{
    float *p = calloc(m->n_floats, sizeof(float));
    model_init_params(m, 3, p);
    return p;
}

/* STEPS steps of SGD with momentum on random batches, then one inference. */
static int train(backend_t *be, const model_t *m, outcome *o)
{
    tt_err err = {0};
    tower_t tw;
    /* a device's room for the 16-bit copies (more than ResNet-20's
     * largest layer needs at this batch and size) */
    if (be->dev != NULL && be->dev->reserve_copies(be, (size_t)8 << 20, &err) != 0) {
        tt_diag("reserve_copies: %s", err.msg);
        return -1;
    }
    if (tower_create(m, be, BATCH, &tw, &err) != 0) {
        tt_diag("tower: %s", err.msg);
        return -1;
    }
    o->params = params_init(m);
    tower_set_params(&tw, o->params);
    float *buf = be->alloc(be, m->n_trainable * sizeof(float));
    static float x[BATCH * 3 * IMG * IMG];
    int32_t labels[BATCH];
    rng_t rng = rng_make(11, 0, 0);
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
            x[i] = (float)rng_below(&rng, 2001) / 1000.0f - 1.0f;
        for (int i = 0; i < BATCH; i++)
            labels[i] = (int32_t)rng_below(&rng, 10);
        tower_load_batch(&tw, BATCH, x, labels);
        tower_step(&tw, BATCH, true, true, 5 + (uint64_t)s);
        o->loss[s] = tw.loss_sum;
        be->sgd_step(be, m->n_trainable, 0.02f, 0.9f, false, 5e-4f, s == 0, tw.params, tw.grads,
                     buf);
    }
    o->grads = malloc(m->n_trainable * sizeof(float));
    be->download(be, o->grads, tw.grads, m->n_trainable * sizeof(float));
    tower_get_params(&tw, o->params); /* trained, running statistics updated */
    const float *logits = tower_step(&tw, BATCH, false, false, 99);
    o->logits = malloc(BATCH * 10 * sizeof(float));
    be->download(be, o->logits, logits, BATCH * 10 * sizeof(float));
    be->free(be, buf);
    tower_free(&tw);
    if (be->dev != NULL && be->dev->sync(be, &err) != 0) {
        tt_diag("device: %s", err.msg);
        return -1;
    }
    return 0;
}

static void compare(backend_t *be, const char *name, const model_t *fm, const model_t *am)
{
    outcome f = {0}, a = {0};
    if (!tt_ok(train(be, fm, &f) == 0 && train(be, am, &a) == 0,
               "%s: both models train %d steps", name, STEPS)) {
        outcome_free(&f);
        outcome_free(&a);
        return;
    }
    bool loss = true;
    for (int s = 0; s < STEPS; s++)
        loss = loss && f.loss[s] == a.loss[s] && isfinite(f.loss[s]) && f.loss[s] > 0;
    tt_ok(loss, "%s: every step's loss bitwise equal (last %.9g vs %.9g)", name,
          f.loss[STEPS - 1], a.loss[STEPS - 1]);
    tt_ok(tt_same_bits(f.grads, a.grads, fm->n_trainable), "%s: last gradients bitwise equal",
          name);
    bool same = true, moved = false;
    float *init = params_init(fm);
    for (int i = 0; i < fm->n_params; i++) {
        const param_entry *p = &fm->params[i], *q = &am->params[i];
        same = same && tt_same_bits(f.params + p->offset, a.params + q->offset, p->count);
        moved = moved || !tt_same_bits(f.params + p->offset, init + p->offset, p->count);
    }
    free(init);
    tt_ok(same && moved, "%s: trained parameters and running statistics bitwise equal%s", name,
          moved ? "" : " (but unchanged by training)");
    tt_ok(tt_same_bits(f.logits, a.logits, BATCH * 10), "%s: inference logits bitwise equal",
          name);
    outcome_free(&f);
    outcome_free(&a);
}

static int count_fused(const model_t *m)
{
    int k = 0;
    for (int i = 0; i < m->n_layers; i++)
        k += m->layers[i].add_fused && m->layers[m->layers[i].add_src].add_out;
    return k;
}

int main(void)
{
    tt_err err = {0};
    backend_t *cpu = tt_cpu_backend(2), *sim = backend_sim_create(0, "fp32", &err);
    if (!tt_ok(cpu != NULL && sim != NULL, "CPU and sim backends %s", err.msg))
        return tt_done();
    test_op(cpu, "cpu");
    test_op(sim, "sim");

    tt_tmpdir_make(dir, sizeof(dir), "bn_add_fusion");
    model_cfg fc, ac;
    model_t fm, am;
    if (!tt_ok(build(&fc, &fm) == 0 && build(&ac, &am) == 0, "ResNet-20 builds"))
        return tt_done();
    unfuse_adds(&am);
    /* 9 blocks: 6 adds into bn2 (identity shortcut), 3 into the projection's
     * batchnorm (the later input); bn2 of those 3 stays a batchnorm */
    tt_ok(count_fused(&fm) == 9 && count_fused(&am) == 0,
          "ResNet-20: each of the 9 adds runs in a batchnorm (%d); unfused: none (%d)",
          count_fused(&fm), count_fused(&am));
    bool proj = true;
    for (int i = 0; i < fm.n_layers; i++) {
        const layer_t *l = &fm.layers[i];
        if (strstr(l->cfg->name, "_projbn") != NULL)
            proj = proj && l->add_out && l->relu_out &&
                   strcmp(fm.layers[l->add_other].cfg->name, l->cfg->name) != 0 &&
                   strstr(fm.layers[l->add_other].cfg->name, "_bn2") != NULL;
    }
    tt_ok(proj, "a downsampling block's add runs in its projection batchnorm, r = its bn2, "
          "with the block's relu");

    compare(cpu, "cpu fp32", &fm, &am);
    compare(sim, "sim fp32", &fm, &am);
    cpu->destroy(cpu);
    sim->destroy(sim);

    /* bf16: the CPU's where it has bf16 kernels (backend_cpu_bf16_isa);
     * sim's always (the CPU's float32 arithmetic with GPU rounding) */
    backend_t *cb = backend_cpu_create_bf16(0, 2, &err);
    if (cb != NULL) {
        compare(cb, "cpu bf16", &fm, &am);
        cb->destroy(cb);
    } else {
        tt_skip("cpu bf16: %s", err.msg);
    }
    backend_t *sb = backend_sim_create(0, "bf16", &err);
    if (tt_ok(sb != NULL, "sim bf16 backend %s", sb ? "" : err.msg)) {
        compare(sb, "sim bf16", &fm, &am);
        sb->destroy(sb);
    }
    model_free(&fm);
    model_free(&am);
    model_cfg_free(&fc);
    model_cfg_free(&ac);
    tt_tmpdir_remove(dir);
    return tt_done();
}

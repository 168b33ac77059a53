/* sim_blocked.c - the simulated GPU in the blocked layout (backend.h):
 * where precision.c's prec_layout_of keeps activations in bf16 NHWC (bf16),
 * sim keeps them so too, as the CUDA backend does, so that every host path
 * of a GPU tower in that layout runs in make check.
 *
 * The arithmetic is the CPU backend's, as everywhere on sim: the inner CPU
 * backend gets the same blocked_nhwc / blocked_bf16 flags, so its blocked
 * batchnorm, global average pooling, relu, add and pools (plain C over
 * bf16_io.h, rounding to nearest even at each store, as a GPU kernel
 * storing __float2bfloat16_rn does) run on sim's queue unchanged.
 *
 * A convolution with a blocked side is what cuDNN does with NHWC bf16
 * tensor descriptors: it reads the bf16 x and the bf16 weights, multiplies
 * with float32 accumulation and writes y in bf16; a bias and relu pass
 * then reads that bf16 y and stores bf16 again. Backward reads the
 * gradient dy in bf16 (a float32 dy rounded; with bf16 gradients,
 * sim_grad16.c, the stored bf16 one) and writes dx and dw in bf16, widened
 * to float32 (dx kept bf16 with bf16 gradients). Sim computes that on NCHW
 * float32 scratch of its own host memory (the layout is not the
 * arithmetic): the CPU's NCHW convolution on bf16-exact operands, rounded
 * where the GPU rounds. That scratch is an artefact of the simulation (a
 * GPU reads the blocked tensors in place), so the device pool does not
 * count it; peak_device_memory_mb stays what a GPU would use.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/bf16_io.h"
#include "backend/sim/sim.h"

/* Element (i, ch, p) of a blocked [n, c, hw] tensor, an element index. */
static size_t blocked_index(const tt_blocked_strides *s, int i, int ch, int p)
{
    return (size_t)i * s->img + (size_t)(ch / TT_BLOCK) * s->cstride + (size_t)p * s->pstride +
           (size_t)(ch % TT_BLOCK);
}

/* A blocked tensor (bf16 where `bf16`, else float32) to NCHW float32. */
static void unpack(const backend_t *be, int n, int c, int hw, const void *b, bool bf16,
                   float *x)
{
    tt_blocked_strides s = tt_blocked_strides_of(c, hw, be->blocked_nhwc);
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < hw; p++) {
                size_t at = blocked_index(&s, i, ch, p);
                x[((size_t)i * c + ch) * hw + p] =
                    bf16 ? bf16_to_float(((const uint16_t *)b)[at]) : ((const float *)b)[at];
            }
}

/* NCHW float32 to a blocked tensor (bf16: rounded to nearest even), its
 * padding channels zero. */
static void pack(const backend_t *be, int n, int c, int hw, const float *x, bool bf16, void *b)
{
    int cpad = (c + TT_BLOCK - 1) / TT_BLOCK * TT_BLOCK;
    tt_blocked_strides s = tt_blocked_strides_of(c, hw, be->blocked_nhwc);
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < cpad; ch++)
            for (int p = 0; p < hw; p++) {
                size_t at = blocked_index(&s, i, ch, p);
                float v = ch < c ? x[((size_t)i * c + ch) * hw + p] : 0.0f;
                if (bf16)
                    ((uint16_t *)b)[at] = bf16_from_float(v);
                else
                    ((float *)b)[at] = v;
            }
}

static size_t n_x(const window_desc *d) { return (size_t)d->n * d->c * d->h * d->w; }
static size_t n_w(const window_desc *d) { return (size_t)d->f * d->c * d->k * d->k; }
static size_t n_y(const window_desc *d) { return (size_t)d->n * d->f * d->oh * d->ow; }

/* x as the convolution reads it: NCHW, in the 16-bit type where reduced */
static void read_x(backend_t *be, prec_t p, const window_desc *d, const float *x, float *xn)
{
    if (d->blocked_x)
        unpack(be, d->n, d->c, d->h * d->w, x, be->blocked_bf16, xn);
    else
        memcpy(xn, x, n_x(d) * sizeof(float));
    if (p != PREC_FP32)
        sim_round_16bit(p, n_x(d), xn, xn);
}

/* w as the convolution reads it: the tower's 16-bit copy of this step
 * (w16, which the caller looked up with sim_weight_copy), else rounded now
 * into wn, as before */
static const float *read_w(prec_t p, const window_desc *d, const float *w, const float *w16,
                           float *wn)
{
    if (w16 != NULL)
        return w16;
    memcpy(wn, w, n_w(d) * sizeof(float));
    if (p != PREC_FP32)
        sim_round_16bit(p, n_w(d), wn, wn);
    return wn;
}

/* The scratch of one call: x, y (or dy), w and dx, NULL when out of memory
 * (sim_fail says so). */
static bool scratch_all(backend_t *be, const window_desc *d, float **xn, float **yn, float **wn,
                        float **dxn)
{
    sim_scratch *sc = sim_scratch_of(be);
    *xn = sim_scratch_grow(sc, 0, n_x(d));
    *yn = sim_scratch_grow(sc, 1, n_y(d));
    *wn = sim_scratch_grow(sc, 2, n_w(d));
    *dxn = sim_scratch_grow(sc, 3, n_x(d));
    if (*xn && *yn && *wn && *dxn)
        return true;
    sim_fail(be, "out of host memory for a blocked convolution's scratch");
    return false;
}

void sim_conv_forward_blocked(backend_t *be, prec_t p, const window_desc *d, const float *x,
                              const float *w, const float *w16, const float *b, bool relu,
                              float *y, void *ws)
{
    backend_t *cpu = sim_cpu(be);
    float *xn, *yn, *wn, *dxn;
    if (!scratch_all(be, d, &xn, &yn, &wn, &dxn))
        return;
    window_desc nd = *d;
    nd.blocked_x = nd.blocked_y = false;
    read_x(be, p, d, x, xn);
    cpu->conv_forward(cpu, &nd, xn, read_w(p, d, w, w16, wn), NULL, false, yn, ws);
    if (p != PREC_FP32)
        sim_round_16bit(p, n_y(d), yn, yn); /* cuDNN's 16-bit y */
    size_t hw = (size_t)d->oh * (size_t)d->ow;
    for (size_t i = 0; i < n_y(d); i++) { /* bias and relu: a float32 kernel */
        float v = yn[i] + (b != NULL ? b[i / hw % (size_t)d->f] : 0.0f);
        yn[i] = relu && v < 0.0f ? 0.0f : v;
    }
    if (d->blocked_y)
        pack(be, d->n, d->f, (int)hw, yn, be->blocked_bf16, y);
    else
        memcpy(y, yn, n_y(d) * sizeof(float));
}

/* db[f] = sum of dy over n and pixels, in (n, pixel) order, float32 */
static void bias_grad_nchw(const window_desc *d, const float *dy, float *db)
{
    size_t hw = (size_t)d->oh * (size_t)d->ow;
    for (int o = 0; o < d->f; o++) {
        float acc = 0.0f;
        for (int i = 0; i < d->n; i++)
            for (size_t q = 0; q < hw; q++)
                acc += dy[((size_t)i * d->f + o) * hw + q];
        db[o] = acc;
    }
}

void sim_conv_backward_blocked(backend_t *be, prec_t p, const window_desc *d, const float *x,
                               const float *w, const float *w16, const float *y, bool relu,
                               float *dy, float *dx, float *dw, float *db, void *ws)
{
    backend_t *cpu = sim_cpu(be);
    float *xn, *dyn, *wn, *dxn;
    if (!scratch_all(be, d, &xn, &dyn, &wn, &dxn))
        return;
    window_desc nd = *d;
    nd.blocked_x = nd.blocked_y = false;
    size_t ycount = d->blocked_y ? tt_blocked_floats(d->n, d->f, d->oh * d->ow) : n_y(d);
    /* bf16 gradients (sim_grad16.c): dy read, dx stored in bf16 */
    bool dy16 = d->blocked_y && be->blocked_bf16_grads;
    bool dx16 = d->blocked_x && be->blocked_bf16_grads;
    if (dy16) {
        float *g = sim_scratch_take(be, 4, ycount);
        if (g == NULL)
            return;
        sim_grad16_widen(ycount, dy, g);
        dy = g;
    }
    if (relu) /* the mask, in place on the float32 dy, from the (bf16) y */
        (d->blocked_y ? cpu->relu_backward_blocked : cpu->relu_backward)(cpu, ycount, y, dy, dy);
    if (d->blocked_y)
        unpack(be, d->n, d->f, d->oh * d->ow, dy, false, dyn);
    else
        memcpy(dyn, dy, n_y(d) * sizeof(float));
    if (db != NULL)
        bias_grad_nchw(d, dyn, db);
    if (p != PREC_FP32)
        sim_round_16bit(p, n_y(d), dyn, dyn);
    read_x(be, p, d, x, xn);
    const float *wr = read_w(p, d, w, w16, wn);
    float *dx_out = dx == NULL ? NULL : d->blocked_x ? dxn : dx;
    cpu->conv_backward(cpu, &nd, xn, wr, NULL, false, dyn, dx_out, dw, NULL, ws);
    if (p != PREC_FP32 && dw != NULL)
        sim_round_16bit(p, n_w(d), dw, dw);
    if (dx_out != NULL && p != PREC_FP32)
        sim_round_16bit(p, n_x(d), dx_out, dx_out);
    if (dx != NULL && d->blocked_x) /* a gradient in the blocked layout */
        pack(be, d->n, d->c, d->h * d->w, dxn, dx16, dx);
}

/* ---- the blocked operations, queued: the inner CPU backend's ---- */

typedef struct {
    int n, c, hw;
    const float *x, *gamma, *beta;
    float *running_mean, *running_var;
    float momentum, eps;
    bool training, relu;
    float *y, *save_mean, *save_invstd;
} q_bn_fwd;

static void q_bn_fwd_run(backend_t *be, void *p)
{
    q_bn_fwd *a = p;
    backend_t *cpu = sim_cpu(be);
    cpu->batchnorm_forward_blocked(cpu, a->n, a->c, a->hw, a->x, a->gamma, a->beta,
                                   a->running_mean, a->running_var, a->momentum, a->eps,
                                   a->training, a->relu, a->y, a->save_mean, a->save_invstd);
}

static void sim_bn_fwd(backend_t *be, int n, int c, int hw, const float *x, const float *gamma,
                       const float *beta, float *running_mean, float *running_var,
                       float momentum, float eps, bool training, bool relu, float *y,
                       float *save_mean, float *save_invstd)
{
    q_bn_fwd q = {n, c, hw, x, gamma, beta, running_mean, running_var, momentum, eps,
                  training, relu, y, save_mean, save_invstd};
    sim_enqueue(be, q_bn_fwd_run, &q, sizeof(q));
}

typedef struct {
    int n, c, hw;
    const float *x, *gamma, *save_mean, *save_invstd, *y;
    bool relu;
    float *dy, *dx, *dgamma, *dbeta;
} q_bn_bwd;

static void q_bn_bwd_run(backend_t *be, void *p)
{
    q_bn_bwd *a = p;
    backend_t *cpu = sim_cpu(be);
    cpu->batchnorm_backward_blocked(cpu, a->n, a->c, a->hw, a->x, a->gamma, a->save_mean,
                                    a->save_invstd, a->y, a->relu, a->dy, a->dx, a->dgamma,
                                    a->dbeta);
}

static void sim_bn_bwd(backend_t *be, int n, int c, int hw, const float *x, const float *gamma,
                       const float *save_mean, const float *save_invstd, const float *y,
                       bool relu, float *dy, float *dx, float *dgamma, float *dbeta)
{
    q_bn_bwd q = {n, c, hw, x, gamma, save_mean, save_invstd, y, relu, dy, dx, dgamma, dbeta};
    sim_enqueue(be, q_bn_bwd_run, &q, sizeof(q));
}

/* global average pooling (forward: x -> y; backward: dy -> dx) */
typedef struct {
    bool backward;
    int n, c, hw;
    const float *in;
    float *out;
} q_gap;

static void q_gap_run(backend_t *be, void *p)
{
    q_gap *a = p;
    backend_t *cpu = sim_cpu(be);
    (a->backward ? cpu->global_avgpool_blocked_backward : cpu->global_avgpool_blocked_forward)(
        cpu, a->n, a->c, a->hw, a->in, a->out);
}

static void sim_gap_fwd(backend_t *be, int n, int c, int hw, const float *x, float *y)
{
    q_gap q = {false, n, c, hw, x, y};
    sim_enqueue(be, q_gap_run, &q, sizeof(q));
}

static void sim_gap_bwd(backend_t *be, int n, int c, int hw, const float *dy, float *dx)
{
    q_gap q = {true, n, c, hw, dy, dx};
    sim_enqueue(be, q_gap_run, &q, sizeof(q));
}

/* relu forward (a = x), relu backward (a = y, b = dy) and add (a + b) */
typedef enum { EW_RELU, EW_RELU_BACK, EW_ADD } ew_kind;
typedef struct {
    ew_kind kind;
    size_t count;
    const float *a, *b;
    bool relu;
    float *y;
} q_ew;

static void q_ew_run(backend_t *be, void *p)
{
    q_ew *e = p;
    backend_t *cpu = sim_cpu(be);
    if (e->kind == EW_RELU)
        cpu->relu_forward_blocked(cpu, e->count, e->a, e->y);
    else if (e->kind == EW_RELU_BACK)
        cpu->relu_backward_blocked(cpu, e->count, e->a, e->b, e->y);
    else
        cpu->add_blocked(cpu, e->count, e->a, e->b, e->relu, e->y);
}

static void sim_relu_fwd_blocked(backend_t *be, size_t count, const float *x, float *y)
{
    q_ew q = {EW_RELU, count, x, NULL, false, y};
    sim_enqueue(be, q_ew_run, &q, sizeof(q));
}

static void sim_relu_bwd_blocked(backend_t *be, size_t count, const float *y, const float *dy,
                                 float *dx)
{
    q_ew q = {EW_RELU_BACK, count, y, dy, false, dx};
    sim_enqueue(be, q_ew_run, &q, sizeof(q));
}

static void sim_add_blocked(backend_t *be, size_t count, const float *a, const float *b,
                            bool relu, float *y)
{
    q_ew q = {EW_ADD, count, a, b, relu, y};
    sim_enqueue(be, q_ew_run, &q, sizeof(q));
}

void sim_install_blocked(backend_t *be, prec_layout lay)
{
    backend_t *cpu = sim_cpu(be);
    be->blocked_layout = lay.blocked;
    be->blocked_nhwc = lay.nhwc;
    be->blocked_bf16 = lay.bf16;
    be->blocked_bf16_grads = false; /* sim_install_grad16 sets it */
    /* the inner CPU backend's blocked operations read these two */
    cpu->blocked_nhwc = lay.nhwc;
    cpu->blocked_bf16 = lay.bf16;
    if (!lay.blocked)
        return;
    be->batchnorm_forward_blocked = sim_bn_fwd;
    be->batchnorm_backward_blocked = sim_bn_bwd;
    be->global_avgpool_blocked_forward = sim_gap_fwd;
    be->global_avgpool_blocked_backward = sim_gap_bwd;
    be->relu_forward_blocked = sim_relu_fwd_blocked;
    be->relu_backward_blocked = sim_relu_bwd_blocked;
    be->add_blocked = sim_add_blocked;
    if (lay.bf16 && lay.bf16_grads)
        sim_install_grad16(be);
}

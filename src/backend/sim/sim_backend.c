/* sim_backend.c - the simulated GPU's backend (sim.h): device memory with
 * guards and pool accounting, the operations (queued on the compute queue
 * by sim_queue_ops.h, run here by the CPU backend; dense and conv2d through
 * 16-bit copies in bf16 / fp16, as precision.h says the CUDA backend
 * computes them). The queues and events are sim_queue.c's. */
#include "backend/sim/sim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/precision.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#define GUARD 64          /* bytes after every allocation */
#define GUARD_BYTE 0xA5
#define ALIGN 64

/* One allocation: [header | data (bytes, rounded up) | GUARD guard bytes]. */
struct sim_block {
    struct sim_block *prev, *next;
    size_t bytes;
    char pad[ALIGN - 2 * sizeof(void *) - sizeof(size_t)];
};

static sim_impl *S(backend_t *be) { return be->impl; }
static backend_t *C(backend_t *be) { return S(be)->cpu; }

/* The host's waits go through backend_device_wait (polling, watching the
 * communicator); a failed wait is the backend's error. */
static bool host_wait(backend_t *be, const char *what)
{
    tt_err err = {0};
    char why[96];
    snprintf(why, sizeof(why), "the host waits for the device (%s)", what);
    if (sim_capture_refuse(be, why))
        return false; /* a captured step never answers the host */
    if (backend_device_wait(be, what, &err) == 0)
        return true;
    sim_fail(be, "%s", err.msg);
    return false;
}

/* ---- device memory ---- */

static unsigned char *guard_of(sim_block *b)
{
    return (unsigned char *)(b + 1) + b->bytes;
}

static bool guard_intact(sim_block *b)
{
    const unsigned char *g = guard_of(b);
    for (int i = 0; i < GUARD; i++)
        if (g[i] != GUARD_BYTE)
            return false;
    return true;
}

static void *sim_alloc(backend_t *be, size_t bytes)
{
    sim_impl *s = S(be);
    size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    sim_capture_refuse(be, "an allocation"); /* a graph cannot hold it */
    sim_block *b = aligned_alloc(ALIGN, sizeof(sim_block) + rounded + GUARD);
    if (b == NULL) {
        snprintf(s->alloc_error, sizeof(s->alloc_error),
                 "out of device memory: asked %zu bytes", bytes);
        return NULL;
    }
    memset(b, 0, sizeof(*b) + rounded);
    b->bytes = rounded;
    memset(guard_of(b), GUARD_BYTE, GUARD);
    pthread_mutex_lock(&s->lock);
    b->next = s->blocks;
    if (s->blocks != NULL)
        s->blocks->prev = b;
    s->blocks = b;
    s->in_use += rounded;
    if (s->in_use > s->peak)
        s->peak = s->in_use;
    pthread_mutex_unlock(&s->lock);
    return b + 1;
}

static void free_now(backend_t *be, void *p)
{
    sim_impl *s = S(be);
    sim_block *b = (sim_block *)p - 1;
    if (!guard_intact(b))
        sim_fail(be, "a write past the end of a %zu-byte allocation", b->bytes);
    pthread_mutex_lock(&s->lock);
    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        s->blocks = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    s->in_use -= b->bytes;
    pthread_mutex_unlock(&s->lock);
    free(b);
}

static void q_free_run(backend_t *be, void *a)
{
    free_now(be, *(void **)a);
}

/* after the operations queued before it, as cudaFree and a stream-ordered
 * pool give the block back */
static void sim_free(backend_t *be, void *p)
{
    if (p != NULL && sim_capture_refuse(be, "a free"))
        return; /* the step's eager run frees it */
    if (p != NULL)
        sim_enqueue(be, q_free_run, &p, sizeof(p));
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    void *owned; /* a host copy to free after */
} q_copy_args;

static void q_copy_run(backend_t *be, void *p)
{
    q_copy_args *a = p;
    (void)be;
    memmove(a->dst, a->src, a->bytes);
    free(a->owned);
}

/* cudaMemcpyAsync from pageable memory: the source is read before the call
 * returns (here into a copy), the device written in queue order */
static void sim_upload(backend_t *be, void *dst, const void *src, size_t bytes)
{
    if (sim_capture_refuse(be, "an upload from pageable host memory"))
        return;
    void *copy = malloc(bytes ? bytes : 1);
    if (copy == NULL) {
        if (host_wait(be, "upload"))
            memcpy(dst, src, bytes);
        return;
    }
    memcpy(copy, src, bytes);
    q_copy_args a = {dst, copy, bytes, copy};
    sim_enqueue(be, q_copy_run, &a, sizeof(a));
}

/* device to host: waits for the queue, as the CUDA backend's download */
static void sim_download(backend_t *be, void *dst, const void *src, size_t bytes)
{
    sim_impl *s = S(be);
    bool inject = s->fail_download;
    s->fail_download = false;
    if (inject)
        sim_fail(be, "download of %zu bytes: device error (injected: TT_SIM_FAULT="
                 "download_error:checkpoint)", bytes);
    if (inject || !host_wait(be, "download"))
        memset(dst, 0, bytes); /* as CUDA's: never undefined bytes */
    else
        memcpy(dst, src, bytes);
}

static void sim_copy(backend_t *be, void *dst, const void *src, size_t bytes)
{
    q_copy_args a = {dst, src, bytes, NULL};
    sim_enqueue(be, q_copy_run, &a, sizeof(a));
}


/* The copies' scratch for a call needing `bytes` (precision.h's layout:
 * 16-bit, or float32 for a float32 NHWC conv): an error, as on CUDA, when
 * setup reserved less. */
static float *copies_at(backend_t *be, size_t bytes, size_t offset)
{
    sim_impl *s = S(be);
    if (bytes > s->copies_reserved) {
        sim_fail(be, "the %s copies need %zu bytes; %zu were reserved", prec_name(s->prec), bytes,
                 s->copies_reserved);
        return NULL;
    }
    /* offsets are in the copies' type; the floats here take up to twice the room */
    return s->copies + offset / prec_elem_bytes(s->prec);
}

static int sim_reserve_copies(backend_t *be, size_t bytes, tt_err *err)
{
    sim_impl *s = S(be);
    if (bytes == 0 || bytes <= s->copies_reserved) /* fp32 NCHW: none */
        return 0;
    /* a second, larger reservation replaces the first */
    if (s->copies_dev != NULL)
        sim_free(be, s->copies_dev);
    free(s->copies);
    s->copies = NULL;
    s->copies_dev = NULL;
    s->copies_reserved = 0;
    /* the pool counts the 16-bit size; the values, held as floats, take
     * twice that in host memory beside it */
    s->copies_dev = sim_alloc(be, bytes);
    if (s->copies_dev == NULL)
        return err_set(err, TT_ERR_USAGE, "sim:%d: %s", be->device, s->alloc_error);
    s->copies = calloc(bytes / 2 + 1, sizeof(float));
    if (s->copies == NULL)
        return err_set(err, TT_ERR_USAGE, "sim:%d: out of host memory for the 16-bit copies",
                       be->device);
    s->copies_reserved = bytes;
    return 0;
}

/* ---- the towers' weight copies (weight_copies.h) ---- */

/* A block's mirror: the 16-bit (or float32 NHWC's float32) values held as
 * floats in host memory, and the device reservation of their size in the
 * copies' type that the pool counts (as the copies' scratch above). */
typedef struct {
    float *vals;
    void *dev;
} sim_mirror;

typedef struct {
    const float *params;
    size_t count;
    sim_mirror *mirror; /* add: the new mirror; NULL: remove */
    int step;           /* step: 1 begins, 0 ends; -1: add or remove */
} q_weights_args;

static void mirror_free(backend_t *be, sim_mirror *m)
{
    if (m == NULL)
        return;
    if (m->dev != NULL)
        free_now(be, m->dev);
    free(m->vals);
    free(m);
}

static void q_weights_run(backend_t *be, void *p)
{
    q_weights_args *a = p;
    weight_copies *wc = &S(be)->weights;
    if (a->step >= 0) {
        weight_copies_step(wc, a->params, a->step == 1);
    } else if (a->mirror == NULL) {
        mirror_free(be, weight_copies_remove(wc, a->params));
    } else {
        mirror_free(be, weight_copies_remove(wc, a->params)); /* a second add replaces */
        if (weight_copies_add(wc, a->params, a->count, a->mirror) != 0) {
            mirror_free(be, a->mirror);
            sim_fail(be, "out of host memory for the weight copies' bookkeeping");
        }
    }
}

static int sim_weights_add(backend_t *be, const float *params, size_t count, tt_err *err)
{
    sim_impl *s = S(be);
    if (!prec_weight_copies(s->prec, be->blocked_nhwc) || count == 0)
        return 0;
    sim_mirror *m = calloc(1, sizeof(*m));
    if (m != NULL)
        m->vals = malloc(count * sizeof(float));
    if (m == NULL || m->vals == NULL) {
        mirror_free(be, m);
        return err_set(err, TT_ERR_RUNTIME, "sim:%d: out of host memory for the weight copies",
                       be->device);
    }
    if ((m->dev = sim_alloc(be, count * prec_elem_bytes(s->prec))) == NULL) {
        mirror_free(be, m);
        return err_set(err, TT_ERR_USAGE, "sim:%d: %s", be->device, s->alloc_error);
    }
    q_weights_args q = {params, count, m, -1};
    sim_enqueue(be, q_weights_run, &q, sizeof(q));
    return 0;
}

static void sim_weights_remove(backend_t *be, const float *params)
{
    q_weights_args q = {params, 0, NULL, -1};
    if (prec_weight_copies(S(be)->prec, be->blocked_nhwc))
        sim_enqueue(be, q_weights_run, &q, sizeof(q));
}

static void sim_weights_step(backend_t *be, const float *params, bool begin)
{
    q_weights_args q = {params, 0, NULL, begin ? 1 : 0};
    if (prec_weight_copies(S(be)->prec, be->blocked_nhwc))
        sim_enqueue(be, q_weights_run, &q, sizeof(q));
}

const float *sim_weight_copy(backend_t *be, const float *w, size_t count)
{
    sim_impl *s = S(be);
    void *mirror = NULL;
    size_t at = 0;
    if (!prec_weight_copies(s->prec, be->blocked_nhwc))
        return NULL;
    wc_answer a = weight_copies_find(&s->weights, w, count, WC_AS_STORED, &mirror, &at);
    if (a == WC_NONE)
        return NULL;
    float *copy = ((sim_mirror *)mirror)->vals + at;
    if (a == WC_CONVERT && s->prec == PREC_FP32) /* a float32 NHWC conv's (KRSC on a GPU) */
        memcpy(copy, w, count * sizeof(float));
    else if (a == WC_CONVERT) /* the same rounding as a call's own conversion */
        sim_round_16bit(s->prec, count, w, copy);
    return copy;
}

uint64_t sim_weight_conversions(backend_t *be)
{
    host_wait(be, "weight copies count");
    return S(be)->weights.conversions;
}

/* w as a 16-bit product reads it: the tower's copy of this step, else
 * rounded now into `scratch` (the copies' w place); NULL when that place
 * was not reserved (sim_fail said so). */
static const float *weights_16bit(backend_t *be, const float *w, size_t count, size_t bytes,
                                  size_t w_at)
{
    const float *copy = sim_weight_copy(be, w, count);
    if (copy != NULL)
        return copy;
    float *scratch = copies_at(be, bytes, w_at);
    if (scratch != NULL)
        sim_round_16bit(S(be)->prec, count, w, scratch);
    return scratch;
}

/* ---- the operations: the CPU backend's, on device memory ---- */

static void run_dense_forward(backend_t *be, int n, int in, int out, const float *x,
                              const float *w, const float *b, bool relu, float *y)
{
    sim_impl *s = S(be);
    if (s->prec == PREC_FP32) {
        C(be)->dense_forward(C(be), n, in, out, x, w, b, relu, y);
        return;
    }
    prec_dense_copies l;
    prec_dense_copies_of(s->prec, n, in, out, &l);
    float *x16 = copies_at(be, l.bytes_no_w, l.x);
    const float *w16 = weights_16bit(be, w, (size_t)out * (size_t)in, l.bytes, l.w);
    if (x16 == NULL || w16 == NULL)
        return;
    sim_round_16bit(s->prec, (size_t)n * (size_t)in, x, x16);
    C(be)->dense_forward(C(be), n, in, out, x16, w16, b, relu, y);
}

/* db[out] += column sums of dy[rows, out] in float32, row order (the GPU's
 * bias gradient reads the float32 dy) */
static void bias_grad(size_t rows, int out, size_t inner, const float *dy, float *db)
{
    for (int o = 0; o < out; o++) {
        float acc = 0.0f;
        for (size_t r = 0; r < rows; r++)
            for (size_t i = 0; i < inner; i++)
                acc += dy[(r * (size_t)out + (size_t)o) * inner + i];
        db[o] = acc;
    }
}

static void run_dense_backward(backend_t *be, int n, int in, int out, const float *x,
                               const float *w, const float *y, bool relu, float *dy, float *dx,
                               float *dw, float *db)
{
    sim_impl *s = S(be);
    if (s->prec == PREC_FP32) {
        C(be)->dense_backward(C(be), n, in, out, x, w, y, relu, dy, dx, dw, db);
        return;
    }
    size_t ny = (size_t)n * (size_t)out;
    if (relu)
        C(be)->relu_backward(C(be), ny, y, dy, dy);
    if (db != NULL)
        bias_grad((size_t)n, out, 1, dy, db);
    prec_dense_copies l;
    prec_dense_copies_of(s->prec, n, in, out, &l);
    float *x16 = copies_at(be, l.bytes_no_w, l.x), *dy16 = copies_at(be, l.bytes_no_w, l.dy);
    const float *w16 = weights_16bit(be, w, (size_t)out * (size_t)in, l.bytes, l.w);
    if (x16 == NULL || w16 == NULL)
        return;
    sim_round_16bit(s->prec, (size_t)n * (size_t)in, x, x16);
    sim_round_16bit(s->prec, ny, dy, dy16);
    C(be)->dense_backward(C(be), n, in, out, x16, w16, NULL, false, dy16, dx, dw, NULL);
}

/* a blocked convolution runs as an NCHW one on the CPU (sim_blocked.c) */
static size_t sim_conv_workspace(backend_t *be, const window_desc *d)
{
    window_desc nd = *d;
    nd.blocked_x = nd.blocked_y = false;
    return C(be)->conv_workspace(C(be), &nd);
}

static size_t conv_x(const window_desc *d) { return (size_t)d->n * d->c * d->h * d->w; }
static size_t conv_w(const window_desc *d) { return (size_t)d->f * d->c * d->k * d->k; }
static size_t conv_y(const window_desc *d) { return (size_t)d->n * d->f * d->oh * d->ow; }

/* cuDNN writes the 16-bit type and a kernel widens it (precision.h) */
static void round_inplace(prec_t p, size_t count, float *x)
{
    sim_round_16bit(p, count, x, x);
}

static void run_conv_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                             const float *b, bool relu, float *y, void *ws)
{
    sim_impl *s = S(be);
    if (s->prec == PREC_FP32 && !d->blocked_x && !d->blocked_y) {
        C(be)->conv_forward(C(be), d, x, w, b, relu, y, ws);
        return;
    }
    prec_conv_copies l;
    prec_conv_copies_of(s->prec, d, be->blocked_bf16_grads, &l);
    float *x16 = copies_at(be, l.bytes_no_w, l.x);
    if (x16 == NULL)
        return; /* setup reserved too little: an error, as on CUDA */
    if (d->blocked_x || d->blocked_y) {
        sim_conv_forward_blocked(be, s->prec, d, x, w, sim_weight_copy(be, w, conv_w(d)), b, relu,
                                 y, ws);
        return;
    }
    const float *w16 = weights_16bit(be, w, conv_w(d), l.bytes, l.w);
    if (w16 == NULL)
        return;
    sim_round_16bit(s->prec, conv_x(d), x, x16);
    C(be)->conv_forward(C(be), d, x16, w16, NULL, false, y, ws);
    round_inplace(s->prec, conv_y(d), y);
    size_t hw = (size_t)d->oh * (size_t)d->ow;
    for (size_t i = 0; i < conv_y(d); i++) { /* bias and relu: float32 kernels */
        float v = y[i] + (b != NULL ? b[i / hw % (size_t)d->f] : 0.0f);
        y[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

static void run_conv_backward(backend_t *be, const window_desc *d, const float *x,
                              const float *w, const float *y, bool relu, float *dy, float *dx,
                              float *dw, float *db, void *ws)
{
    sim_impl *s = S(be);
    if (s->prec == PREC_FP32 && !d->blocked_x && !d->blocked_y) {
        C(be)->conv_backward(C(be), d, x, w, y, relu, dy, dx, dw, db, ws);
        return;
    }
    if (d->blocked_x || d->blocked_y) {
        prec_conv_copies l;
        prec_conv_copies_of(s->prec, d, be->blocked_bf16_grads, &l);
        if (copies_at(be, l.bytes_no_w, l.x) == NULL)
            return; /* setup reserved too little: an error, as on CUDA */
        sim_conv_backward_blocked(be, s->prec, d, x, w, sim_weight_copy(be, w, conv_w(d)), y,
                                  relu, dy, dx, dw, db, ws);
        return;
    }
    if (relu)
        C(be)->relu_backward(C(be), conv_y(d), y, dy, dy);
    if (db != NULL)
        bias_grad((size_t)d->n, d->f, (size_t)d->oh * (size_t)d->ow, dy, db);
    prec_conv_copies l;
    prec_conv_copies_of(s->prec, d, be->blocked_bf16_grads, &l);
    float *x16 = copies_at(be, l.bytes_no_w, l.x), *dy16 = copies_at(be, l.bytes_no_w, l.y);
    const float *w16 = weights_16bit(be, w, conv_w(d), l.bytes, l.w);
    if (x16 == NULL || w16 == NULL)
        return;
    sim_round_16bit(s->prec, conv_x(d), x, x16);
    sim_round_16bit(s->prec, conv_y(d), dy, dy16);
    C(be)->conv_backward(C(be), d, x16, w16, NULL, false, dy16, dx, dw, NULL, ws);
    if (dx != NULL)
        round_inplace(s->prec, conv_x(d), dx);
    if (dw != NULL)
        round_inplace(s->prec, conv_w(d), dw);
}

/* The rest run in float32 on the GPU too: forwarded as they are. */
#define FORWARD(op, params, args)                                                              \
    static void run_##op params                                                                \
    {                                                                                          \
        C(be)->op args;                                                                        \
    }
FORWARD(maxpool_forward,
        (backend_t *be, const window_desc *d, const float *x, float *y, int32_t *mask),
        (C(be), d, x, y, mask))
FORWARD(maxpool_backward,
        (backend_t *be, const window_desc *d, const float *dy, const int32_t *mask, float *dx),
        (C(be), d, dy, mask, dx))
FORWARD(avgpool_forward, (backend_t *be, const window_desc *d, const float *x, float *y),
        (C(be), d, x, y))
FORWARD(avgpool_backward, (backend_t *be, const window_desc *d, const float *dy, float *dx),
        (C(be), d, dy, dx))
FORWARD(batchnorm_forward,
        (backend_t *be, int n, int c, int hw, const float *x, const float *gamma,
         const float *beta, float *running_mean, float *running_var, float momentum, float eps,
         bool training, bool relu, float *y, float *save_mean, float *save_invstd),
        (C(be), n, c, hw, x, gamma, beta, running_mean, running_var, momentum, eps, training,
         relu, y, save_mean, save_invstd))
FORWARD(batchnorm_backward,
        (backend_t *be, int n, int c, int hw, const float *x, const float *gamma,
         const float *save_mean, const float *save_invstd, const float *y, bool relu, float *dy,
         float *dx, float *dgamma, float *dbeta),
        (C(be), n, c, hw, x, gamma, save_mean, save_invstd, y, relu, dy, dx, dgamma, dbeta))
FORWARD(relu_forward, (backend_t *be, size_t count, const float *x, float *y),
        (C(be), count, x, y))
FORWARD(relu_backward, (backend_t *be, size_t count, const float *y, const float *dy, float *dx),
        (C(be), count, y, dy, dx))
FORWARD(dropout_forward,
        (backend_t *be, size_t count, float rate, uint64_t seed, const float *x, float *y,
         float *mask),
        (C(be), count, rate, seed, x, y, mask))
FORWARD(mul, (backend_t *be, size_t count, const float *a, const float *b, float *y),
        (C(be), count, a, b, y))
FORWARD(axpy, (backend_t *be, size_t count, float alpha, const float *x, float *y),
        (C(be), count, alpha, x, y))
FORWARD(add, (backend_t *be, size_t count, const float *a, const float *b, bool relu, float *y),
        (C(be), count, a, b, relu, y))
FORWARD(scale, (backend_t *be, size_t count, float alpha, float *x), (C(be), count, alpha, x))
FORWARD(add_scalar, (backend_t *be, size_t count, float alpha, float *x),
        (C(be), count, alpha, x))
FORWARD(sgd_step,
        (backend_t *be, size_t count, float lr, float momentum, bool nesterov,
         float weight_decay, bool first_step, float *w, const float *g, float *buf),
        (C(be), count, lr, momentum, nesterov, weight_decay, first_step, w, g, buf))
FORWARD(adam_step,
        (backend_t *be, size_t count, float lr, float beta1, float beta2, float eps,
         float weight_decay, int64_t step, float *w, const float *g, float *m, float *v),
        (C(be), count, lr, beta1, beta2, eps, weight_decay, step, w, g, m, v))

#include "backend/sim/sim_queue_ops.h"

/* dense_forward_fp32 / dense_backward_fp32 (backend.h): the CPU's float32
 * dense on the queue, no 16-bit copies (global_avgpool in bf16 / fp16) */
static void q_dense_forward_fp32_run(backend_t *be, void *p)
{
    q_dense_forward_args *a = p;
    C(be)->dense_forward(C(be), a->n, a->in, a->out, a->x, a->w, a->b, a->relu, a->y);
}

static void sim_dense_forward_fp32(backend_t *be, int n, int in, int out, const float *x,
                                   const float *w, const float *b, bool relu, float *y)
{
    q_dense_forward_args q = {n, in, out, x, w, b, relu, y};
    sim_enqueue(be, q_dense_forward_fp32_run, &q, sizeof(q));
}

static void q_dense_backward_fp32_run(backend_t *be, void *p)
{
    q_dense_backward_args *a = p;
    C(be)->dense_backward(C(be), a->n, a->in, a->out, a->x, a->w, a->y, a->relu, a->dy, a->dx,
                          a->dw, a->db);
}

static void sim_dense_backward_fp32(backend_t *be, int n, int in, int out, const float *x,
                                    const float *w, const float *y, bool relu, float *dy,
                                    float *dx, float *dw, float *db)
{
    q_dense_backward_args q = {n, in, out, x, w, y, relu, dy, dx, dw, db};
    sim_enqueue(be, q_dense_backward_fp32_run, &q, sizeof(q));
}

/* The operations that answer the host: they wait for the queue. */
static bool sim_all_finite(backend_t *be, size_t count, const float *x)
{
    if (!host_wait(be, "finite check"))
        return false;
    return C(be)->all_finite(C(be), count, x);
}

static double sim_sumsq(backend_t *be, size_t count, const float *x)
{
    if (!host_wait(be, "norm"))
        return 0.0; /* the device's error ends the step (the trainer checks it) */
    return C(be)->sumsq(C(be), count, x);
}

static void sim_sumsq_each(backend_t *be, int n, const float *const *x, const size_t *count,
                           double *out)
{
    memset(out, 0, (size_t)n * sizeof(double));
    if (host_wait(be, "norms")) /* one wait for all of them, as a GPU's */
        C(be)->sumsq_each(C(be), n, x, count, out);
}

typedef struct {
    int n, classes;
    const float *logits;
    const int32_t *labels;
    float smoothing;
    float *dlogits;
} q_softmax_xent_args;

static void q_softmax_xent_run(backend_t *be, void *p)
{
    q_softmax_xent_args *a = p;
    sim_impl *s = S(be);
    C(be)->softmax_xent(C(be), a->n, a->classes, a->logits, a->labels, a->smoothing,
                        a->dlogits);
    C(be)->loss_read(C(be), &s->loss_sum, &s->correct);
}

/* Queued, with the event the host's loss_read waits for after it (as
 * CUDA's kernel, copy to pinned memory and event): the host goes on to
 * queue backward meanwhile. Written here, not among sim_queue_ops.h's
 * transcriptions, for that event. */
static void sim_softmax_xent(backend_t *be, int n, int classes, const float *logits,
                             const int32_t *labels, float smoothing, float *dlogits)
{
    q_softmax_xent_args q = {n, classes, logits, labels, smoothing, dlogits};
    tt_err err = {0};
    sim_enqueue(be, q_softmax_xent_run, &q, sizeof(q));
    if (sim_capturing(be))
        return; /* the graph's launch records the event after the replay */
    if (sim_dev_event_record(be, S(be)->loss_done, sim_dev_queue(be), &err) != 0)
        sim_fail(be, "%s", err.msg);
}

static void sim_loss_read(backend_t *be, double *loss_sum, int *correct)
{
    sim_impl *s = S(be);
    tt_err err = {0};
    *loss_sum = 0.0;
    *correct = 0;
    if (sim_capturing(be))
        return; /* nothing ran: the launch's loss is read after it */
    if (backend_device_wait_event(be, s->loss_done, "loss", &err) != 0) {
        sim_fail(be, "%s", err.msg);
        return; /* the device's error ends the step (the trainer checks it) */
    }
    *loss_sum = s->loss_sum;
    *correct = s->correct;
}

/* ---- the device side ---- */

int backend_sim_device_info(int device, backend_device_info *info, tt_err *err)
{
    if (device < 0 || device >= TT_MAX_SIM_DEVICES)
        return err_set(err, TT_ERR_USAGE, "sim:%d: no such simulated device (0 to %d)", device,
                       TT_MAX_SIM_DEVICES - 1);
    memset(info, 0, sizeof(*info));
    snprintf(info->name, sizeof(info->name), "simulated GPU %d (test device)", device);
    info->major = 8;
    info->total_bytes = (size_t)80 << 30;
    info->sm_count = 1;
    return 0;
}

static int sim_info(backend_t *be, backend_device_info *info, tt_err *err)
{
    return backend_sim_device_info(be->device, info, err);
}

static int sim_bind(backend_t *be, tt_err *err)
{
    (void)be;
    (void)err;
    return 0;
}

static int sim_check(backend_t *be, tt_err *err)
{
    sim_impl *s = S(be);
    pthread_mutex_lock(&s->lock);
    int rc = s->err.code == TT_OK ? 0 : err_set(err, s->err.code, "%s", s->err.msg);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The queue is always drained; sync also checks every allocation's guard. */
static int sim_sync(backend_t *be, tt_err *err)
{
    sim_impl *s = S(be);
    if (!host_wait(be, "sync"))
        return sim_check(be, err);
    size_t bad = 0;
    pthread_mutex_lock(&s->lock);
    for (sim_block *b = s->blocks; b != NULL && bad == 0; b = b->next)
        if (!guard_intact(b))
            bad = b->bytes;
    pthread_mutex_unlock(&s->lock);
    if (bad != 0)
        sim_fail(be, "a write past the end of a %zu-byte allocation", bad);
    return sim_check(be, err);
}

static int sim_query(backend_t *be, tt_err *err)
{
    (void)err;
    return sim_queue_idle(S(be)->compute) ? 1 : 0;
}

static void sim_step(backend_t *be, int64_t step)
{
    S(be)->step = step;
}

/* download_error:checkpoint: the first download of the first save fails */
static void sim_mark(backend_t *be, const char *phase)
{
    static atomic_bool armed;
    if (sim_fault_download_checkpoint() && strcmp(phase, "checkpoint") == 0 &&
        !atomic_exchange(&armed, true))
        S(be)->fail_download = true;
}

static void sim_freeze(backend_t *be)
{
    S(be)->frozen = true;
}

static void sim_memory(backend_t *be, size_t *reserved, size_t *in_use, size_t *peak)
{
    sim_impl *s = S(be);
    pthread_mutex_lock(&s->lock);
    *reserved = s->peak;
    *in_use = s->in_use;
    *peak = s->peak;
    pthread_mutex_unlock(&s->lock);
}

static const char *sim_alloc_error(backend_t *be)
{
    return S(be)->alloc_error;
}

static const char *sim_build_info(void)
{
    return "sim: simulated GPU (test device; CPU arithmetic)";
}

const backend_device_ops backend_sim_device_ops = {
    .kind = "sim",
    .pinned_staging = true,
    .device_allreduce = true,
    .info = sim_info,
    .reserve_copies = sim_reserve_copies,
    .weights_add = sim_weights_add,
    .weights_remove = sim_weights_remove,
    .weights_step = sim_weights_step,
    .bind = sim_bind,
    .check = sim_check,
    .sync = sim_sync,
    .query = sim_query,
    .mark = sim_mark,
    .step = sim_step,
    .freeze = sim_freeze,
    .memory = sim_memory,
    .alloc_error = sim_alloc_error,
    .queue = sim_dev_queue,
    .queue_create = sim_dev_queue_create,
    .queue_free = sim_dev_queue_free,
    .event_create = sim_dev_event_create,
    .event_free = sim_dev_event_free,
    .event_record = sim_dev_event_record,
    .queue_wait_event = sim_dev_queue_wait_event,
    .event_query = sim_dev_event_query,
    .event_elapsed_ms = sim_dev_event_elapsed_ms,
    .host_alloc = sim_dev_host_alloc,
    .host_free = sim_dev_host_free,
    .copy_h2d_async = sim_dev_copy_async,
    .copy_d2h_async = sim_dev_copy_async,
    .comm_create = sim_comm_create,
    .capture_begin = sim_capture_begin,
    .capture_end = sim_capture_end,
    .graph_launch = sim_graph_launch,
    .graph_free = sim_graph_free,
    .build_info = sim_build_info,
};

static void sim_destroy(backend_t *be)
{
    sim_impl *s = S(be);
    if (s->compute != NULL) {
        if (be->dev != NULL)
            host_wait(be, "teardown"); /* aborts a stalled communicator */
        sim_queue_delete(s->compute);
        s->compute = NULL;
    }
    if (s->loss_done != NULL)
        sim_dev_event_free(be, s->loss_done);
    if (s->copies_dev != NULL)
        free_now(be, s->copies_dev);
    free(s->copies);
    while (s->weights.n_blocks > 0) /* towers never freed: their copies go with the device */
        mirror_free(be, weight_copies_remove(&s->weights, s->weights.blocks[0].params));
    weight_copies_free(&s->weights);
    while (s->blocks != NULL) /* what the towers left: freed with the device */
        free_now(be, s->blocks + 1);
    if (s->cpu != NULL)
        s->cpu->destroy(s->cpu);
    sim_scratch_free(&s->scratch);
    pthread_mutex_destroy(&s->lock);
    sim_clock_destroy(&s->clock);
    free(s);
    free(be);
}

backend_t *backend_sim_create(int device, const char *precision, tt_err *err)
{
    prec_t p;
    if (prec_parse(precision, &p) != 0) {
        err_set(err, TT_ERR_USAGE, "sim:%d: precision \"%s\"", device, precision);
        return NULL;
    }
    backend_t *be = calloc(1, sizeof(*be));
    sim_impl *s = calloc(1, sizeof(*s));
    if (be == NULL || s == NULL) {
        free(be);
        free(s);
        err_set(err, TT_ERR_RUNTIME, "out of host memory");
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    sim_clock_init(&s->clock);
    s->prec = p;
    be->impl = s;
    char why[128];
    if (weight_copies_init(&s->weights, why, sizeof(why)) != 0) {
        err_set(err, TT_ERR_USAGE, "sim:%d: %s", device, why);
        sim_destroy(be);
        return NULL;
    }
    /* one thread: the tower's own, as a GPU tower's host thread */
    if ((s->cpu = backend_cpu_create(device, 1, err)) == NULL) {
        sim_destroy(be);
        return NULL;
    }
    if ((s->compute = sim_queue_new(be)) == NULL) {
        err_set(err, TT_ERR_RUNTIME, "sim:%d: cannot start the queue's thread", device);
        sim_destroy(be);
        return NULL;
    }
    if ((s->loss_done = sim_dev_event_create(be, false, err)) == NULL) {
        sim_destroy(be);
        return NULL;
    }
    be->name = "sim";
    be->precision = prec_name(p);
    be->device = device;
    be->threads = 1;
    be->host_memory = false;
    be->dev = &backend_sim_device_ops;
    be->alloc = sim_alloc;
    be->free = sim_free;
    be->upload = sim_upload;
    be->download = sim_download;
    be->copy = sim_copy;
    be->conv_workspace = sim_conv_workspace;
    sim_install_queued_ops(be);
    be->dense_forward_fp32 = sim_dense_forward_fp32;
    be->dense_backward_fp32 = sim_dense_backward_fp32;
    be->all_finite = sim_all_finite;
    be->sumsq = sim_sumsq;
    be->sumsq_each = sim_sumsq_each;
    be->softmax_xent = sim_softmax_xent;
    be->loss_read = sim_loss_read;
    be->destroy = sim_destroy;
    sim_install_vars_ops(be);
    /* the CUDA backend's layout for this precision (sim has no tf32;
     * TT_CUDA_LAYOUT=nhwc gives fp32 the NHWC float32 layout tf32 would) */
    sim_install_blocked(be, prec_device_layout(p, false));
    return be;
}

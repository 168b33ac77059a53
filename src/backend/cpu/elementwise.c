/* elementwise.c - relu, dropout, axpy, the loss and the optimizer updates: loops
 * over the per-element functions of backend/math.h, in chunks over the team.
 * The loops are compiled once per instruction-set level and cpu_isa() picks
 * one (TT_CPU_ISA caps it); the compiler vectorises each for its level. No
 * loop sums across elements and nothing is contracted into an fma (ISO C
 * mode), so every level gives the same bits. */
#include <math.h>

#include "backend/cpu/bf16_io.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/math.h"

/* Chunks of at least this many elements: below it threads cost more than
 * they save. */
#define MIN_CHUNK 16384

typedef enum {
    EW_RELU, EW_RELU_BACK, EW_DROPOUT, EW_MUL, EW_AXPY, EW_ADD, EW_ADD_RELU, EW_SCALE, EW_SGD,
    EW_ADAM,
    /* over bf16 activations (backend.h: blocked_bf16); gradients float32 */
    EW_RELU_BF16, EW_RELU_BACK_BF16, EW_ADD_BF16, EW_ADD_RELU_BF16
} ew_op;

typedef struct {
    ew_op op;
    size_t count;
    const float *a, *b;
    float *y, *m, *v;
    float alpha, momentum, weight_decay;
    bool nesterov, first;
    uint64_t seed;
    tt_adam_consts adam;
} ew_args;

/* Elements [lo, hi) of the operation; inlined into one variant per level.
 * It works on a copy of the arguments: read through the pointer, every float
 * field (lr, momentum, ...) may be changed by each float store in the loop
 * (same type), so the compiler reloaded them per element and kept the
 * optimizer updates, axpy and scale scalar (13% of an MLP step at AVX2, one
 * thread). Loop-invariant locals let it unswitch the branches of
 * tt_sgd_update and vectorise; the operations per element are the same, so
 * are the bits. */
__attribute__((always_inline)) static inline void ew_body(const ew_args *args, size_t lo,
                                                          size_t hi)
{
    ew_args copy = *args, *e = &copy;
    switch (e->op) {
    case EW_RELU:
        for (size_t i = lo; i < hi; i++)
            e->y[i] = tt_relu(e->a[i]);
        break;
    case EW_RELU_BACK:
        for (size_t i = lo; i < hi; i++)
            e->y[i] = tt_relu_grad(e->a[i], e->b[i]);
        break;
    case EW_DROPOUT:
        for (size_t i = lo; i < hi; i++) {
            float f = tt_dropout_factor(e->seed, i, e->alpha);
            e->m[i] = f;
            e->y[i] = e->a[i] * f;
        }
        break;
    case EW_MUL:
        for (size_t i = lo; i < hi; i++)
            e->y[i] = e->a[i] * e->b[i];
        break;
    case EW_AXPY:
        for (size_t i = lo; i < hi; i++)
            e->y[i] += e->alpha * e->a[i];
        break;
    case EW_ADD:
        for (size_t i = lo; i < hi; i++)
            e->y[i] = e->a[i] + e->b[i];
        break;
    case EW_ADD_RELU:
        for (size_t i = lo; i < hi; i++)
            e->y[i] = tt_relu(e->a[i] + e->b[i]);
        break;
    case EW_SCALE:
        for (size_t i = lo; i < hi; i++)
            e->y[i] *= e->alpha;
        break;
    case EW_SGD:
        if (e->m != NULL) {
            for (size_t i = lo; i < hi; i++)
                e->y[i] = tt_sgd_update(e->y[i], e->a[i], &e->m[i], e->alpha, e->momentum,
                                        e->nesterov, e->weight_decay, e->first);
        } else {
            float unused = 0.0f;
            for (size_t i = lo; i < hi; i++)
                e->y[i] = tt_sgd_update(e->y[i], e->a[i], &unused, e->alpha, 0.0f, 0,
                                        e->weight_decay, e->first);
        }
        break;
    case EW_ADAM:
        for (size_t i = lo; i < hi; i++)
            e->y[i] = tt_adam_update(e->y[i], e->a[i], &e->m[i], &e->v[i], &e->adam);
        break;
    case EW_RELU_BF16:
        /* tt_relu of a bf16 value is that value or +0: no rounding */
        for (size_t i = lo; i < hi; i++) {
            uint16_t h = ((const uint16_t *)e->a)[i];
            ((uint16_t *)e->y)[i] = bf16_to_float(h) > 0.0f ? h : 0;
        }
        break;
    case EW_RELU_BACK_BF16:
        for (size_t i = lo; i < hi; i++)
            e->y[i] = tt_relu_grad(bf16_to_float(((const uint16_t *)e->a)[i]), e->b[i]);
        break;
    case EW_ADD_BF16:
    case EW_ADD_RELU_BF16:
        for (size_t i = lo; i < hi; i++) {
            float v = bf16_to_float(((const uint16_t *)e->a)[i]) +
                      bf16_to_float(((const uint16_t *)e->b)[i]);
            ((uint16_t *)e->y)[i] = bf16_from_float(e->op == EW_ADD_RELU_BF16 ? tt_relu(v) : v);
        }
        break;
    }
}

static void ew_plain(ew_args *e, size_t lo, size_t hi)
{
    ew_body(e, lo, hi);
}

#ifdef CPU_ISA_TARGETS
CPU_TARGET_AVX2 static void ew_avx2(ew_args *e, size_t lo, size_t hi)
{
    ew_body(e, lo, hi);
}

CPU_TARGET_AVX512 static void ew_avx512(ew_args *e, size_t lo, size_t hi)
{
    ew_body(e, lo, hi);
}
#endif

static void ew_task(void *p, int k, int tasks)
{
    ew_args *e = p;
    size_t lo = e->count * (size_t)k / (size_t)tasks, hi = e->count * (size_t)(k + 1) / tasks;
    switch (cpu_isa()) {
#ifdef CPU_ISA_TARGETS
    case CPU_ISA_AVX512:
        ew_avx512(e, lo, hi);
        return;
    case CPU_ISA_AVX2:
        ew_avx2(e, lo, hi);
        return;
#endif
    default:
        ew_plain(e, lo, hi);
    }
}

static void ew_run(backend_t *be, ew_args *e)
{
    int tasks = (int)(e->count / MIN_CHUNK);
    if (tasks > be->threads)
        tasks = be->threads;
    if (tasks < 1)
        tasks = 1;
    cpu_run(be, tasks, ew_task, e);
}

void cpu_relu_forward(backend_t *be, size_t count, const float *x, float *y)
{
    ew_args e = {.op = EW_RELU, .count = count, .a = x, .y = y};
    ew_run(be, &e);
}

void cpu_relu_backward(backend_t *be, size_t count, const float *y, const float *dy, float *dx)
{
    ew_args e = {.op = EW_RELU_BACK, .count = count, .a = y, .b = dy, .y = dx};
    ew_run(be, &e);
}

void cpu_dropout_forward(backend_t *be, size_t count, float rate, uint64_t seed, const float *x,
                         float *y, float *mask)
{
    ew_args e = {.op = EW_DROPOUT, .count = count, .a = x, .y = y, .m = mask, .alpha = rate,
                 .seed = seed};
    ew_run(be, &e);
}

void cpu_mul(backend_t *be, size_t count, const float *a, const float *b, float *y)
{
    ew_args e = {.op = EW_MUL, .count = count, .a = a, .b = b, .y = y};
    ew_run(be, &e);
}

void cpu_add(backend_t *be, size_t count, const float *a, const float *b, bool relu, float *y)
{
    ew_args e = {.op = relu ? EW_ADD_RELU : EW_ADD, .count = count, .a = a, .b = b, .y = y};
    ew_run(be, &e);
}

/* The same over blocked activations: bf16 ones where be->blocked_bf16. */
void cpu_relu_forward_blocked(backend_t *be, size_t count, const float *x, float *y)
{
    ew_args e = {.op = be->blocked_bf16 ? EW_RELU_BF16 : EW_RELU, .count = count, .a = x, .y = y};
    ew_run(be, &e);
}

void cpu_relu_backward_blocked(backend_t *be, size_t count, const float *y, const float *dy,
                               float *dx)
{
    ew_args e = {.op = be->blocked_bf16 ? EW_RELU_BACK_BF16 : EW_RELU_BACK, .count = count,
                 .a = y, .b = dy, .y = dx};
    ew_run(be, &e);
}

void cpu_add_blocked(backend_t *be, size_t count, const float *a, const float *b, bool relu,
                     float *y)
{
    ew_op op = be->blocked_bf16 ? (relu ? EW_ADD_RELU_BF16 : EW_ADD_BF16)
                                : (relu ? EW_ADD_RELU : EW_ADD);
    ew_args e = {.op = op, .count = count, .a = a, .b = b, .y = y};
    ew_run(be, &e);
}

void cpu_axpy(backend_t *be, size_t count, float alpha, const float *x, float *y)
{
    ew_args e = {.op = EW_AXPY, .count = count, .a = x, .y = y, .alpha = alpha};
    ew_run(be, &e);
}

void cpu_scale(backend_t *be, size_t count, float alpha, float *x)
{
    ew_args e = {.op = EW_SCALE, .count = count, .y = x, .alpha = alpha};
    ew_run(be, &e);
}

/* An integer test the base instruction set vectorises already. */
bool cpu_all_finite(backend_t *be, size_t count, const float *x)
{
    int bad = 0;
    for (size_t i = 0; i < count; i++)
        bad |= tt_not_finite(x[i]);
    return bad == 0;
}

/* On the calling thread, in index order: once per step over the gradients
 * (clipping) or per parameter (LARS), memory-bound either way. */
double cpu_sumsq(backend_t *be, size_t count, const float *x)
{
    double s = 0.0;
    for (size_t i = 0; i < count; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

void cpu_sumsq_each(backend_t *be, int n, const float *const *x, const size_t *count,
                    double *out)
{
    for (int i = 0; i < n; i++)
        out[i] = cpu_sumsq(be, count[i], x[i]);
}

/* On the calling thread: batchnorm adds 1 to one counter per step. */
void cpu_add_scalar(backend_t *be, size_t count, float alpha, float *x)
{
    for (size_t i = 0; i < count; i++)
        x[i] += alpha;
}

void cpu_sgd_step(backend_t *be, size_t count, float lr, float momentum, bool nesterov,
                  float weight_decay, bool first_step, float *w, const float *g, float *buf)
{
    ew_args e = {.op = EW_SGD, .count = count, .a = g, .y = w, .m = momentum != 0.0f ? buf : NULL,
                 .alpha = lr, .momentum = momentum, .weight_decay = weight_decay,
                 .nesterov = nesterov, .first = first_step};
    ew_run(be, &e);
}

void cpu_adam_step(backend_t *be, size_t count, float lr, float beta1, float beta2, float eps,
                   float weight_decay, int64_t step, float *w, const float *g, float *m,
                   float *v)
{
    ew_args e = {.op = EW_ADAM, .count = count, .a = g, .y = w, .m = m, .v = v,
                 .adam = tt_adam_make(lr, beta1, beta2, eps, weight_decay, step)};
    ew_run(be, &e);
}

/* Rows split over the team; each row's loss goes to its slot and the
 * slots are summed in row order afterwards, so the sum does not depend on
 * the split. Up to XENT_ROWS rows per pass (the slots live on the stack). */
#define XENT_ROWS 1024

typedef struct {
    int n, classes;
    const float *logits;
    const int32_t *labels;
    float *dlogits;
    int n_total; /* the batch: dlogits are divided by it */
    float smoothing;
    double loss[XENT_ROWS];
    char right[XENT_ROWS];
} xent_args;

static void xent_task(void *p, int k, int tasks)
{
    xent_args *a = p;
    int lo, hi;
    cpu_range(a->n, tasks, k, &lo, &hi);
    for (int r = lo; r < hi; r++) {
        int arg, label = a->labels[r];
        a->loss[r] = tt_softmax_xent_row(a->logits + (size_t)r * a->classes, a->classes, label,
                                         a->n_total, a->smoothing,
                                         a->dlogits != NULL ? a->dlogits + (size_t)r * a->classes
                                                            : NULL,
                                         &arg);
        a->right[r] = arg == label;
    }
}

void cpu_softmax_xent(backend_t *be, int n, int classes, const float *logits,
                      const int32_t *labels, float smoothing, float *dlogits)
{
    xent_args a;
    double loss = 0.0;
    int right = 0;
    a.classes = classes;
    a.smoothing = smoothing;
    a.n_total = n;
    for (int r0 = 0; r0 < n; r0 += XENT_ROWS) {
        a.n = n - r0 < XENT_ROWS ? n - r0 : XENT_ROWS;
        a.logits = logits + (size_t)r0 * classes;
        a.labels = labels + r0;
        a.dlogits = dlogits != NULL ? dlogits + (size_t)r0 * classes : NULL;
        /* a row costs 2 x classes exp(): below ~2 rows per thread it is not worth a wake-up */
        cpu_run(be, a.n >= 2 * be->threads ? be->threads : 1, xent_task, &a);
        for (int r = 0; r < a.n; r++) {
            loss += a.loss[r];
            right += a.right[r];
        }
    }
    cpu_impl *impl = be->impl;
    impl->loss_sum = loss;
    impl->correct = right;
}

void cpu_loss_read(backend_t *be, double *loss_sum, int *correct)
{
    const cpu_impl *impl = be->impl;
    *loss_sum = impl->loss_sum;
    *correct = impl->correct;
}

/* math.h - per-element math shared by the CPU backend and the CUDA kernels.
 *
 * Each function computes one element. The CPU backend calls them in loops; the
 * CUDA kernels call them once per thread (compiled with __host__ __device__), so
 * the CPU tests check the very arithmetic the GPU runs.
 */
#ifndef TT_BACKEND_MATH_H
#define TT_BACKEND_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TT_HD __host__ __device__
#else
#define TT_HD
#endif

static inline TT_HD float tt_relu(float x)
{
    return x > 0.0f ? x : 0.0f;
}

/* Gradient of relu given its OUTPUT y (y > 0 exactly where x > 0). */
static inline TT_HD float tt_relu_grad(float y, float dy)
{
    return y > 0.0f ? dy : 0.0f;
}

/* 1 when x is an Inf or a NaN (the exponent bits all set), else 0: the test
 * loss scaling runs over every gradient (an integer test, so that it
 * vectorises and no compiler flag can assume it away). */
static inline TT_HD int tt_not_finite(float x)
{
    union { float f; uint32_t u; } b;
    b.f = x;
    return (b.u & 0x7f800000u) == 0x7f800000u;
}

/* torch.optim.SGD, dampening 0, one element. *buf is the momentum buffer (unused
 * when momentum == 0); on the first step torch sets buf = d_p. Returns the new w. */
static inline TT_HD float tt_sgd_update(float w, float g, float *buf, float lr, float momentum,
                                        int nesterov, float weight_decay, int first_step)
{
    float d = g;
    if (weight_decay != 0.0f)
        d = d + weight_decay * w;
    if (momentum != 0.0f) {
        float b = first_step ? d : momentum * *buf + d;
        *buf = b;
        d = nesterov ? d + momentum * b : b;
    }
    return w - lr * d;
}

/* Step-dependent constants of torch.optim.Adam, computed once per step. */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float step_size;          /* lr / (1 - beta1^step) */
    float bias_correction2_sqrt; /* sqrt(1 - beta2^step) */
} tt_adam_consts;

static inline tt_adam_consts tt_adam_make(float lr, float beta1, float beta2, float eps,
                                          float weight_decay, int64_t step)
{
    tt_adam_consts c;
    c.lr = lr;
    c.beta1 = beta1;
    c.beta2 = beta2;
    c.eps = eps;
    c.weight_decay = weight_decay;
    /* torch computes the bias corrections in double from Python floats, then
     * uses them as float scalars. */
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    c.step_size = (float)((double)lr / bc1);
    c.bias_correction2_sqrt = (float)sqrt(bc2);
    return c;
}

/* torch.optim.Adam (amsgrad off), one element: exp_avg.lerp_(g, 1-beta1),
 * exp_avg_sq = beta2*exp_avg_sq + (1-beta2)*g*g,
 * w -= step_size * m / (sqrt(v) / sqrt(bc2) + eps). Returns the new w. */
static inline TT_HD float tt_adam_update(float w, float g, float *m, float *v,
                                         const tt_adam_consts *c)
{
    if (c->weight_decay != 0.0f)
        g = g + c->weight_decay * w;
    float mm = *m + (1.0f - c->beta1) * (g - *m);
    float vv = c->beta2 * *v + (1.0f - c->beta2) * g * g;
    *m = mm;
    *v = vv;
    float denom = sqrtf(vv) / c->bias_correction2_sqrt + c->eps;
    return w - c->step_size * (mm / denom);
}

/* Inverted dropout factor for element i: 0 with probability rate, else 1/(1-rate).
 * The random bits depend only on (seed, i), so CPU and GPU drop the same units. */
static inline TT_HD float tt_dropout_factor(uint64_t seed, uint64_t i, float rate)
{
    uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);
    return u < rate ? 0.0f : 1.0f / (1.0f - rate);
}

/* ---- pooling, one output or one input element at a time (PyTorch
 * semantics, as the CPU backend's loops): the CUDA kernels run one thread
 * per element through these, and tests/test_backend_math.c checks them
 * bit for bit against the CPU backend. Planes are h x w, outputs oh x ow. ---- */

/* Max over the window of output (oy, ox), padding ignored; the first maximum
 * in scan order wins and a NaN propagates. *arg: its index in the plane. */
static inline TT_HD float tt_maxpool_window(int h, int w, int k, int stride, int pad,
                                            const float *x, int oy, int ox, int32_t *arg)
{
    int y0 = oy * stride - pad, x0 = ox * stride - pad;
    int ky0 = y0 < 0 ? -y0 : 0, kx0 = x0 < 0 ? -x0 : 0;
    int ky1 = y0 + k > h ? h - y0 : k, kx1 = x0 + k > w ? w - x0 : k;
    float best = x[(y0 + ky0) * w + x0 + kx0];
    int32_t at = (y0 + ky0) * w + x0 + kx0;
    for (int ky = ky0; ky < ky1; ky++) {
        const float *row = x + (y0 + ky) * w + x0;
        for (int kx = kx0; kx < kx1; kx++) {
            float v = row[kx];
            if (v > best || (v != v && best == best)) {
                best = v;
                at = (y0 + ky) * w + x0 + kx;
            }
        }
    }
    *arg = at;
    return best;
}

/* The outputs whose windows hold input row (or column) i: [*o0, *o1). */
static inline TT_HD void tt_pool_outputs_of(int i, int k, int stride, int pad, int on, int *o0,
                                            int *o1)
{
    int first = i + pad - k + 1; /* the lowest window start that still reaches i */
    int lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    int hi = (i + pad) / stride + 1;
    *o0 = lo;
    *o1 = hi < on ? hi : on;
}

/* Gradient at input (iy, ix) of max pooling: the sum, in output order, of
 * dy over the outputs whose argmax (mask) is this input - what the CPU's
 * scatter over outputs adds into it, in the same order. */
static inline TT_HD float tt_maxpool_grad(int w, int oh, int ow, int k, int stride, int pad,
                                          const float *dy, const int32_t *mask, int iy, int ix)
{
    int oy0, oy1, ox0, ox1;
    tt_pool_outputs_of(iy, k, stride, pad, oh, &oy0, &oy1);
    tt_pool_outputs_of(ix, k, stride, pad, ow, &ox0, &ox1);
    int32_t self = iy * w + ix;
    float g = 0.0f;
    for (int oy = oy0; oy < oy1; oy++)
        for (int ox = ox0; ox < ox1; ox++)
            if (mask[oy * ow + ox] == self)
                g += dy[oy * ow + ox];
    return g;
}

/* Average over the window of output (oy, ox), padding counted as zeros
 * (count_include_pad = True). */
static inline TT_HD float tt_avgpool_window(int h, int w, int k, int stride, int pad,
                                            const float *x, int oy, int ox)
{
    float s = 0.0f;
    for (int ky = 0; ky < k; ky++) {
        int iy = oy * stride - pad + ky;
        if (iy < 0 || iy >= h)
            continue;
        for (int kx = 0; kx < k; kx++) {
            int ix = ox * stride - pad + kx;
            if (ix >= 0 && ix < w)
                s += x[iy * w + ix];
        }
    }
    return s * (1.0f / (float)(k * k));
}

/* Gradient at input (iy, ix) of average pooling, in output order. */
static inline TT_HD float tt_avgpool_grad(int oh, int ow, int k, int stride, int pad,
                                          const float *dy, int iy, int ix)
{
    float inv = 1.0f / (float)(k * k);
    int oy0, oy1, ox0, ox1;
    tt_pool_outputs_of(iy, k, stride, pad, oh, &oy0, &oy1);
    tt_pool_outputs_of(ix, k, stride, pad, ow, &ox0, &ox1);
    float g = 0.0f;
    for (int oy = oy0; oy < oy1; oy++)
        for (int ox = ox0; ox < ox1; ox++)
            g += dy[oy * ow + ox] * inv;
    return g;
}

/* ---- softmax cross-entropy of one row of logits z[classes] ---- */

/* Returns the row's loss and its argmax (the first maximum); when d != NULL
 * writes d[j] = (softmax_j - target_j) / n, the row's part of the gradient
 * of the mean loss over n rows. The target is torch.nn.CrossEntropyLoss's
 * with label smoothing s: (1 - s) onehot + s / classes, so the loss is
 * (1 - s) (-log softmax(z)[label]) + s mean_j (-log softmax(z)_j); s = 0
 * gives -log softmax(z)[label] with the same bits as without it. In double
 * where the CPU backend uses double. */
static inline TT_HD double tt_softmax_xent_row(const float *z, int classes, int label, int n,
                                               float smoothing, float *d, int *argmax)
{
    int arg = 0;
    for (int j = 1; j < classes; j++)
        if (z[j] > z[arg])
            arg = j;
    float zmax = z[arg];
    double sum = 0.0;
    for (int j = 0; j < classes; j++)
        sum += exp((double)z[j] - zmax);
    double log_sum = log(sum);
    double off = (double)smoothing / classes, on = 1.0 - (double)smoothing + off;
    if (d != NULL)
        for (int j = 0; j < classes; j++) {
            double pj = exp((double)z[j] - zmax - log_sum);
            d[j] = (float)((pj - (j == label ? on : off)) / n);
        }
    *argmax = arg;
    double nll = log_sum - ((double)z[label] - zmax);
    if (smoothing == 0.0f)
        return nll;
    double zsum = 0.0; /* sum_j -log softmax(z)_j = classes log_sum - sum_j (z_j - zmax) */
    for (int j = 0; j < classes; j++)
        zsum += (double)z[j] - zmax;
    return (1.0 - (double)smoothing) * nll + (double)smoothing * (log_sum - zsum / classes);
}

#endif

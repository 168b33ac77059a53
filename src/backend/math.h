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

#endif

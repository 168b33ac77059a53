/* batchnorm.c - per-channel batch normalisation (torch.nn.BatchNorm2d), split
 * over the team by channel. Sums run in a fixed order: each image's row of a
 * channel is summed in LANES float lanes (so the loop vectorises), the lanes
 * are added in order into a double, and the rows in image order. */
#include <math.h>

#include "backend/cpu/cpu.h"
#include "backend/math.h"

#define LANES 16

/* sum of x[q] - shift over a row, and of (x[q] - shift)^2 when sq */
static inline double row_sum(const float *x, int len, float shift, bool sq)
{
    float acc[LANES] = {0};
    int q = 0;
    for (; q + LANES <= len; q += LANES)
        for (int l = 0; l < LANES; l++) {
            float v = x[q + l] - shift;
            acc[l] += sq ? v * v : v;
        }
    double s = 0;
    for (int l = 0; l < LANES; l++)
        s += acc[l];
    for (; q < len; q++) {
        float v = x[q] - shift;
        s += sq ? v * v : v;
    }
    return s;
}

/* sum of dy[q] and of dy[q] * (x[q] - mean) over a row; with y (a fused
 * relu), dy is first masked in place where the forward output y is not
 * positive, in the same pass */
static inline void row_sums_dy(float *dy, const float *x, const float *y, int len, float mean,
                               double *sdy, double *sdyx)
{
    float a[LANES] = {0}, b[LANES] = {0};
    int q = 0;
    for (; q + LANES <= len; q += LANES)
        for (int l = 0; l < LANES; l++) {
            float g = dy[q + l];
            if (y != NULL)
                dy[q + l] = g = tt_relu_grad(y[q + l], g);
            a[l] += g;
            b[l] += g * (x[q + l] - mean);
        }
    double s = 0, t = 0;
    for (int l = 0; l < LANES; l++) {
        s += a[l];
        t += b[l];
    }
    for (; q < len; q++) {
        float g = dy[q];
        if (y != NULL)
            dy[q] = g = tt_relu_grad(y[q], g);
        s += g;
        t += (double)g * (x[q] - mean);
    }
    *sdy += s;
    *sdyx += t;
}

typedef struct {
    int n, c, hw;
    const float *x, *gamma, *beta, *mean_in, *invstd_in, *yc;
    float *running_mean, *running_var, *y, *save_mean, *save_invstd, *dy, *dx, *dgamma, *dbeta;
    float momentum, eps;
    bool training, relu;
} bn_args;

CPU_HOT static void bn_forward_task(void *p, int k, int tasks)
{
    bn_args *a = p;
    int lo, hi;
    cpu_range(a->c, tasks, k, &lo, &hi);
    size_t m = (size_t)a->n * a->hw;
    for (int ch = lo; ch < hi; ch++) {
        double mean, var;
        if (a->training) {
            /* two passes: the mean, then squares about the (float) mean */
            double s = 0, s2 = 0;
            for (int i = 0; i < a->n; i++)
                s += row_sum(a->x + ((size_t)i * a->c + ch) * a->hw, a->hw, 0.0f, false);
            mean = s / (double)m;
            for (int i = 0; i < a->n; i++)
                s2 += row_sum(a->x + ((size_t)i * a->c + ch) * a->hw, a->hw, (float)mean, true);
            var = s2 / (double)m;
            double unbiased = m > 1 ? s2 / (double)(m - 1) : var;
            a->running_mean[ch] = (float)((1.0 - a->momentum) * a->running_mean[ch] +
                                          a->momentum * mean);
            a->running_var[ch] = (float)((1.0 - a->momentum) * a->running_var[ch] +
                                         a->momentum * unbiased);
        } else {
            mean = a->running_mean[ch];
            var = a->running_var[ch];
        }
        float invstd = (float)(1.0 / sqrt(var + a->eps));
        float fm = (float)mean;
        if (a->training) {
            a->save_mean[ch] = fm;
            a->save_invstd[ch] = invstd;
        }
        /* y = (x - mean) * invstd * gamma + beta as one multiply-add */
        float scale = invstd * a->gamma[ch], shift = a->beta[ch] - fm * scale;
        for (int i = 0; i < a->n; i++) {
            const float *x = a->x + ((size_t)i * a->c + ch) * a->hw;
            float *y = a->y + ((size_t)i * a->c + ch) * a->hw;
            if (a->relu)
                for (int q = 0; q < a->hw; q++)
                    y[q] = tt_relu(x[q] * scale + shift);
            else
                for (int q = 0; q < a->hw; q++)
                    y[q] = x[q] * scale + shift;
        }
    }
}

void cpu_batchnorm_forward(backend_t *be, int n, int c, int hw, const float *x, const float *gamma,
                           const float *beta, float *running_mean, float *running_var,
                           float momentum, float eps, bool training, bool relu, float *y,
                           float *save_mean, float *save_invstd)
{
    bn_args a = {.n = n, .c = c, .hw = hw, .x = x, .gamma = gamma, .beta = beta,
                 .running_mean = running_mean, .running_var = running_var, .y = y,
                 .save_mean = save_mean, .save_invstd = save_invstd, .momentum = momentum,
                 .eps = eps, .training = training, .relu = relu};
    cpu_run(be, cpu_tasks(be, c), bn_forward_task, &a);
}

/* dx = gamma * invstd / M * (M * dy - sum(dy) - xhat * sum(dy * xhat)) */
CPU_HOT static void bn_backward_task(void *p, int k, int tasks)
{
    bn_args *a = p;
    int lo, hi;
    cpu_range(a->c, tasks, k, &lo, &hi);
    double m = (double)a->n * a->hw;
    for (int ch = lo; ch < hi; ch++) {
        float mean = a->mean_in[ch], invstd = a->invstd_in[ch];
        double sdy = 0, sdyx = 0;
        for (int i = 0; i < a->n; i++) {
            size_t off = ((size_t)i * a->c + ch) * a->hw;
            row_sums_dy(a->dy + off, a->x + off, a->relu ? a->yc + off : NULL, a->hw, mean,
                        &sdy, &sdyx);
        }
        sdyx *= invstd;
        if (a->dgamma)
            a->dgamma[ch] = (float)sdyx;
        if (a->dbeta)
            a->dbeta[ch] = (float)sdy;
        if (a->dx == NULL)
            continue;
        /* dx = scale * (M dy - sdy - (x - mean) invstd sdyx), as
         * dx = A dy + B x + C with per-channel A, B, C */
        double scale = a->gamma[ch] * invstd / m;
        float A = (float)(scale * m), B = (float)(-scale * invstd * sdyx);
        float C = (float)(scale * (invstd * sdyx * mean - sdy));
        for (int i = 0; i < a->n; i++) {
            size_t off = ((size_t)i * a->c + ch) * a->hw;
            const float *dy = a->dy + off, *x = a->x + off;
            float *dx = a->dx + off;
            for (int q = 0; q < a->hw; q++)
                dx[q] = A * dy[q] + B * x[q] + C;
        }
    }
}

void cpu_batchnorm_backward(backend_t *be, int n, int c, int hw, const float *x,
                            const float *gamma, const float *save_mean, const float *save_invstd,
                            const float *y, bool relu, float *dy, float *dx, float *dgamma,
                            float *dbeta)
{
    bn_args a = {.n = n, .c = c, .hw = hw, .x = x, .gamma = gamma, .mean_in = save_mean,
                 .invstd_in = save_invstd, .yc = y, .relu = relu, .dy = dy, .dx = dx,
                 .dgamma = dgamma, .dbeta = dbeta};
    cpu_run(be, cpu_tasks(be, c), bn_backward_task, &a);
}

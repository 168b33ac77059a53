/* batchnorm.c - per-channel batch normalisation (torch.nn.BatchNorm2d), split
 * over the team by channel; sums run in double, in a fixed order. */
#include <math.h>

#include "backend/cpu/cpu.h"

typedef struct {
    int n, c, hw;
    const float *x, *gamma, *beta, *mean_in, *invstd_in, *dyc;
    float *running_mean, *running_var, *y, *save_mean, *save_invstd, *dx, *dgamma, *dbeta;
    float momentum, eps;
    bool training;
} bn_args;

static void bn_forward_task(void *p, int k, int tasks)
{
    bn_args *a = p;
    int lo, hi;
    cpu_range(a->c, tasks, k, &lo, &hi);
    size_t m = (size_t)a->n * a->hw;
    for (int ch = lo; ch < hi; ch++) {
        double mean, var;
        if (a->training) {
            double s = 0, s2 = 0;
            for (int i = 0; i < a->n; i++) {
                const float *x = a->x + ((size_t)i * a->c + ch) * a->hw;
                for (int q = 0; q < a->hw; q++)
                    s += x[q];
            }
            mean = s / (double)m;
            for (int i = 0; i < a->n; i++) {
                const float *x = a->x + ((size_t)i * a->c + ch) * a->hw;
                for (int q = 0; q < a->hw; q++)
                    s2 += (x[q] - mean) * (x[q] - mean);
            }
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
        float fm = (float)mean, g = a->gamma[ch], b = a->beta[ch];
        if (a->training) {
            a->save_mean[ch] = fm;
            a->save_invstd[ch] = invstd;
        }
        for (int i = 0; i < a->n; i++) {
            const float *x = a->x + ((size_t)i * a->c + ch) * a->hw;
            float *y = a->y + ((size_t)i * a->c + ch) * a->hw;
            for (int q = 0; q < a->hw; q++)
                y[q] = (x[q] - fm) * invstd * g + b;
        }
    }
}

void cpu_batchnorm_forward(backend_t *be, int n, int c, int hw, const float *x, const float *gamma,
                           const float *beta, float *running_mean, float *running_var,
                           float momentum, float eps, bool training, float *y, float *save_mean,
                           float *save_invstd)
{
    bn_args a = {.n = n, .c = c, .hw = hw, .x = x, .gamma = gamma, .beta = beta,
                 .running_mean = running_mean, .running_var = running_var, .y = y,
                 .save_mean = save_mean, .save_invstd = save_invstd, .momentum = momentum,
                 .eps = eps, .training = training};
    cpu_run(be, cpu_tasks(be, c), bn_forward_task, &a);
}

/* dx = gamma * invstd / M * (M * dy - sum(dy) - xhat * sum(dy * xhat)) */
static void bn_backward_task(void *p, int k, int tasks)
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
            for (int q = 0; q < a->hw; q++) {
                sdy += a->dyc[off + q];
                sdyx += (double)a->dyc[off + q] * (a->x[off + q] - mean) * invstd;
            }
        }
        if (a->dgamma)
            a->dgamma[ch] = (float)sdyx;
        if (a->dbeta)
            a->dbeta[ch] = (float)sdy;
        if (a->dx == NULL)
            continue;
        float scale = (float)(a->gamma[ch] * invstd / m);
        float fsdy = (float)sdy, fsdyx = (float)sdyx, fm = (float)m;
        for (int i = 0; i < a->n; i++) {
            size_t off = ((size_t)i * a->c + ch) * a->hw;
            for (int q = 0; q < a->hw; q++) {
                float xhat = (a->x[off + q] - mean) * invstd;
                a->dx[off + q] = scale * (fm * a->dyc[off + q] - fsdy - xhat * fsdyx);
            }
        }
    }
}

void cpu_batchnorm_backward(backend_t *be, int n, int c, int hw, const float *x,
                            const float *gamma, const float *save_mean, const float *save_invstd,
                            const float *dy, float *dx, float *dgamma, float *dbeta)
{
    bn_args a = {.n = n, .c = c, .hw = hw, .x = x, .gamma = gamma, .mean_in = save_mean,
                 .invstd_in = save_invstd, .dyc = dy, .dx = dx, .dgamma = dgamma,
                 .dbeta = dbeta};
    cpu_run(be, cpu_tasks(be, c), bn_backward_task, &a);
}

/* pool.c - max and average pooling over NCHW planes, PyTorch semantics: max
 * ignores padding (it pads with -inf), average counts padded zeros
 * (count_include_pad = True). Planes (n, c) are split over the team. */
#include <float.h>
#include <string.h>

#include "backend/cpu/cpu.h"

typedef struct {
    const window_desc *d;
    const float *x, *dyc;
    float *y, *dx;
    int32_t *mask;
    const int32_t *maskc;
} pool_args;

static void maxpool_forward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int lo, hi;
    cpu_range(d->n * d->c, tasks, k, &lo, &hi);
    for (int pl = lo; pl < hi; pl++) {
        const float *x = a->x + (size_t)pl * d->h * d->w;
        float *y = a->y + (size_t)pl * d->oh * d->ow;
        int32_t *m = a->mask + (size_t)pl * d->oh * d->ow;
        for (int oy = 0; oy < d->oh; oy++) {
            for (int ox = 0; ox < d->ow; ox++) {
                float best = -FLT_MAX;
                int32_t arg = -1;
                for (int ky = 0; ky < d->k; ky++) {
                    int iy = oy * d->stride - d->pad + ky;
                    if (iy < 0 || iy >= d->h)
                        continue;
                    for (int kx = 0; kx < d->k; kx++) {
                        int ix = ox * d->stride - d->pad + kx;
                        if (ix < 0 || ix >= d->w)
                            continue;
                        float v = x[iy * d->w + ix];
                        /* first maximum wins; NaN propagates as in PyTorch */
                        if (arg < 0 || v > best || v != v) {
                            best = v;
                            arg = iy * d->w + ix;
                            if (v != v)
                                goto done;
                        }
                    }
                }
            done:
                y[oy * d->ow + ox] = best;
                m[oy * d->ow + ox] = arg;
            }
        }
    }
}

void cpu_maxpool_forward(backend_t *be, const window_desc *d, const float *x, float *y,
                         int32_t *mask)
{
    pool_args a = {.d = d, .x = x, .y = y, .mask = mask};
    cpu_run(be, cpu_tasks(be, d->n * d->c), maxpool_forward_task, &a);
}

static void maxpool_backward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int lo, hi;
    cpu_range(d->n * d->c, tasks, k, &lo, &hi);
    size_t in = (size_t)d->h * d->w, out = (size_t)d->oh * d->ow;
    for (int pl = lo; pl < hi; pl++) {
        float *dx = a->dx + (size_t)pl * in;
        const float *dy = a->dyc + (size_t)pl * out;
        const int32_t *m = a->maskc + (size_t)pl * out;
        memset(dx, 0, in * sizeof(float));
        for (size_t q = 0; q < out; q++)
            if (m[q] >= 0)
                dx[m[q]] += dy[q];
    }
}

void cpu_maxpool_backward(backend_t *be, const window_desc *d, const float *dy,
                          const int32_t *mask, float *dx)
{
    pool_args a = {.d = d, .dyc = dy, .maskc = mask, .dx = dx};
    cpu_run(be, cpu_tasks(be, d->n * d->c), maxpool_backward_task, &a);
}

static void avgpool_forward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int lo, hi;
    cpu_range(d->n * d->c, tasks, k, &lo, &hi);
    float inv = 1.0f / (float)(d->k * d->k);
    for (int pl = lo; pl < hi; pl++) {
        const float *x = a->x + (size_t)pl * d->h * d->w;
        float *y = a->y + (size_t)pl * d->oh * d->ow;
        for (int oy = 0; oy < d->oh; oy++) {
            for (int ox = 0; ox < d->ow; ox++) {
                float s = 0.0f;
                for (int ky = 0; ky < d->k; ky++) {
                    int iy = oy * d->stride - d->pad + ky;
                    if (iy < 0 || iy >= d->h)
                        continue;
                    for (int kx = 0; kx < d->k; kx++) {
                        int ix = ox * d->stride - d->pad + kx;
                        if (ix >= 0 && ix < d->w)
                            s += x[iy * d->w + ix];
                    }
                }
                y[oy * d->ow + ox] = s * inv;
            }
        }
    }
}

void cpu_avgpool_forward(backend_t *be, const window_desc *d, const float *x, float *y)
{
    pool_args a = {.d = d, .x = x, .y = y};
    cpu_run(be, cpu_tasks(be, d->n * d->c), avgpool_forward_task, &a);
}

static void avgpool_backward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int lo, hi;
    cpu_range(d->n * d->c, tasks, k, &lo, &hi);
    float inv = 1.0f / (float)(d->k * d->k);
    for (int pl = lo; pl < hi; pl++) {
        float *dx = a->dx + (size_t)pl * d->h * d->w;
        const float *dy = a->dyc + (size_t)pl * d->oh * d->ow;
        memset(dx, 0, (size_t)d->h * d->w * sizeof(float));
        for (int oy = 0; oy < d->oh; oy++) {
            for (int ox = 0; ox < d->ow; ox++) {
                float g = dy[oy * d->ow + ox] * inv;
                for (int ky = 0; ky < d->k; ky++) {
                    int iy = oy * d->stride - d->pad + ky;
                    if (iy < 0 || iy >= d->h)
                        continue;
                    for (int kx = 0; kx < d->k; kx++) {
                        int ix = ox * d->stride - d->pad + kx;
                        if (ix >= 0 && ix < d->w)
                            dx[iy * d->w + ix] += g;
                    }
                }
            }
        }
    }
}

void cpu_avgpool_backward(backend_t *be, const window_desc *d, const float *dy, float *dx)
{
    pool_args a = {.d = d, .dyc = dy, .dx = dx};
    cpu_run(be, cpu_tasks(be, d->n * d->c), avgpool_backward_task, &a);
}

/* pool.c - max and average pooling over NCHW planes, PyTorch semantics: max
 * ignores padding (it pads with -inf), average counts padded zeros
 * (count_include_pad = True). Planes (n, c) are split over the team. */
#include <string.h>

#include "backend/cpu/cpu.h"

typedef struct {
    const window_desc *d;
    const float *x, *dyc;
    float *y, *dx;
    int32_t *mask;
    const int32_t *maskc;
} pool_args;

/* The max of one window and its index in the plane; the first maximum wins
 * and a NaN propagates, as in PyTorch. */
static inline float window_max(const window_desc *d, const float *x, int oy, int ox,
                               int32_t *arg_out)
{
    int y0 = oy * d->stride - d->pad, x0 = ox * d->stride - d->pad;
    int ky0 = y0 < 0 ? -y0 : 0, kx0 = x0 < 0 ? -x0 : 0;
    int ky1 = y0 + d->k > d->h ? d->h - y0 : d->k, kx1 = x0 + d->k > d->w ? d->w - x0 : d->k;
    float best = x[(y0 + ky0) * d->w + x0 + kx0];
    int32_t arg = (y0 + ky0) * d->w + x0 + kx0;
    for (int ky = ky0; ky < ky1; ky++) {
        const float *row = x + (y0 + ky) * d->w + x0;
        for (int kx = kx0; kx < kx1; kx++) {
            float v = row[kx];
            if (v > best || (v != v && best == best)) {
                best = v;
                arg = (y0 + ky) * d->w + x0 + kx;
            }
        }
    }
    *arg_out = arg;
    return best;
}

CPU_HOT static void maxpool_forward_task(void *p, int k, int tasks)
{
    pool_args *a = p;
    const window_desc *d = a->d;
    int lo, hi;
    cpu_range(d->n * d->c, tasks, k, &lo, &hi);
    for (int pl = lo; pl < hi; pl++) {
        const float *x = a->x + (size_t)pl * d->h * d->w;
        float *y = a->y + (size_t)pl * d->oh * d->ow;
        int32_t *m = a->mask + (size_t)pl * d->oh * d->ow;
        if (d->k == 2 && d->stride == 2 && d->pad == 0) {
            /* The common 2x2 window, branch-free: selects instead of jumps
             * (the data decides the comparisons, so branches mispredict).
             * Strict > keeps the first maximum on ties, as PyTorch. */
            /* sizes in locals and restrict rows: the int32 mask stores may
             * otherwise alias d->w, which stops vectorisation */
            const int w = d->w, ow = d->ow;
            for (int oy = 0; oy < d->oh; oy++) {
                const float *restrict r0 = x + (2 * oy) * w, *restrict r1 = r0 + w;
                float *restrict yr = y + oy * ow;
                int32_t *restrict mr = m + oy * ow;
                const int32_t base = 2 * oy * w;
                int nan = 0;
                for (int ox = 0; ox < ow; ox++) {
                    int i = 2 * ox;
                    float p0 = r0[i], b = r0[i + 1], c = r1[i], e = r1[i + 1];
                    float m1 = b > p0 ? b : p0, m2 = e > c ? e : c;
                    int32_t i1 = b > p0 ? base + i + 1 : base + i;
                    int32_t i2 = e > c ? base + w + i + 1 : base + w + i;
                    yr[ox] = m2 > m1 ? m2 : m1;
                    mr[ox] = m2 > m1 ? i2 : i1;
                    /* bitwise, not &&: no branch */
                    nan |= (p0 != p0) | (b != b) | (c != c) | (e != e);
                }
                /* a NaN in a window: PyTorch propagates it; rare, so redo
                 * that row's windows the general way */
                if (nan)
                    for (int ox = 0; ox < ow; ox++)
                        yr[ox] = window_max(d, x, oy, ox, &mr[ox]);
            }
            continue;
        }
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++)
                y[oy * d->ow + ox] = window_max(d, x, oy, ox, &m[oy * d->ow + ox]);
    }
}

void cpu_maxpool_forward(backend_t *be, const window_desc *d, const float *x, float *y,
                         int32_t *mask)
{
    pool_args a = {.d = d, .x = x, .y = y, .mask = mask};
    cpu_run(be, cpu_tasks(be, d->n * d->c), maxpool_forward_task, &a);
}

CPU_HOT static void maxpool_backward_task(void *p, int k, int tasks)
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

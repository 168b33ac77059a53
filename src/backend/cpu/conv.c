/* conv.c - 2-D convolution as im2col + sgemm.
 *
 * Forward, per image (images split over the team):
 *   col[C*K*K, P] = im2col(x_i)        P = OH*OW
 *   y_i[F, P]     = w[F, C*K*K] . col  (+ bias, relu)
 * Backward:
 *   phase A, per image: mask dy_i by relu; copy dy_i into dYt[F, N*P] (all
 *     images side by side); im2col(x_i) into COL[C*K*K, N*P]; and
 *     dx_i = col2im(w^T . dy_i).
 *   phase B, split over columns of dw and rows of db: one gemm over the whole
 *     batch, dw[F, C*K*K] = dYt . COL^T, and db[f] = sum of row f of dYt.
 * Every output element is written by exactly one task, so no partial sums
 * are combined and the bits do not depend on the number of threads.
 *
 * Workspace (floats): threads * CKK*P (per-task columns), CKK*N*P (COL),
 * F*N*P (dYt).
 */
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/gemm.h"
#include "backend/math.h"

typedef struct {
    const window_desc *d;
    const float *x, *w, *b, *y;
    float *yo, *dy, *dx, *dw, *db;
    bool relu;
    float *cols;   /* per-task column buffers */
    float *COL;    /* [CKK, N*P] */
    float *dYt;    /* [F, N*P] */
} conv_args;

static size_t conv_ckk(const window_desc *d)
{
    return (size_t)d->c * d->k * d->k;
}

static size_t conv_p(const window_desc *d)
{
    return (size_t)d->oh * d->ow;
}

/* col[row][p] with row = (c*K + ky)*K + kx and a row stride of ld. */
static void im2col(const window_desc *d, const float *x, float *col, size_t ld)
{
    int K = d->k, S = d->stride, pad = d->pad;
    for (int c = 0; c < d->c; c++) {
        const float *plane = x + (size_t)c * d->h * d->w;
        for (int ky = 0; ky < K; ky++) {
            for (int kx = 0; kx < K; kx++) {
                float *row = col + ((size_t)(c * K + ky) * K + kx) * ld;
                for (int oy = 0; oy < d->oh; oy++) {
                    int iy = oy * S - pad + ky;
                    float *out = row + (size_t)oy * d->ow;
                    if (iy < 0 || iy >= d->h) {
                        memset(out, 0, (size_t)d->ow * sizeof(float));
                        continue;
                    }
                    const float *in = plane + (size_t)iy * d->w;
                    if (S == 1) {
                        /* contiguous middle part, zeros at the padded edges */
                        int ox0 = pad - kx > 0 ? pad - kx : 0;
                        int ox1 = d->w + pad - kx < d->ow ? d->w + pad - kx : d->ow;
                        for (int ox = 0; ox < ox0; ox++)
                            out[ox] = 0.0f;
                        if (ox1 > ox0)
                            memcpy(out + ox0, in + ox0 - pad + kx,
                                   (size_t)(ox1 - ox0) * sizeof(float));
                        for (int ox = ox1 > ox0 ? ox1 : ox0; ox < d->ow; ox++)
                            out[ox] = 0.0f;
                    } else {
                        for (int ox = 0; ox < d->ow; ox++) {
                            int ix = ox * S - pad + kx;
                            out[ox] = ix >= 0 && ix < d->w ? in[ix] : 0.0f;
                        }
                    }
                }
            }
        }
    }
}

/* dx (zeroed here) += the columns scattered back to their pixels. */
static void col2im(const window_desc *d, const float *col, float *dx)
{
    int K = d->k, S = d->stride, pad = d->pad;
    memset(dx, 0, (size_t)d->c * d->h * d->w * sizeof(float));
    size_t P = conv_p(d);
    for (int c = 0; c < d->c; c++) {
        float *plane = dx + (size_t)c * d->h * d->w;
        for (int ky = 0; ky < K; ky++) {
            for (int kx = 0; kx < K; kx++) {
                const float *row = col + ((size_t)(c * K + ky) * K + kx) * P;
                for (int oy = 0; oy < d->oh; oy++) {
                    int iy = oy * S - pad + ky;
                    if (iy < 0 || iy >= d->h)
                        continue;
                    float *out = plane + (size_t)iy * d->w;
                    const float *in = row + (size_t)oy * d->ow;
                    for (int ox = 0; ox < d->ow; ox++) {
                        int ix = ox * S - pad + kx;
                        if (ix >= 0 && ix < d->w)
                            out[ix] += in[ox];
                    }
                }
            }
        }
    }
}

size_t cpu_conv_workspace(backend_t *be, const window_desc *d)
{
    size_t ckk = conv_ckk(d), p = conv_p(d);
    return ((size_t)be->threads * ckk * p + ckk * d->n * p + (size_t)d->f * d->n * p) *
           sizeof(float);
}

static void conv_forward_task(void *p, int k, int tasks)
{
    conv_args *a = p;
    const window_desc *d = a->d;
    size_t ckk = conv_ckk(d), P = conv_p(d);
    float *col = a->cols + (size_t)k * ckk * P;
    int lo, hi;
    cpu_range(d->n, tasks, k, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        const float *x = a->x + (size_t)i * d->c * d->h * d->w;
        float *y = a->yo + (size_t)i * d->f * P;
        im2col(d, x, col, P);
        cpu_sgemm(0, 0, d->f, (int)P, (int)ckk, 1.0f, a->w, (int)ckk, col, (int)P, 0.0f, y,
                  (int)P);
        for (int f = 0; f < d->f; f++) {
            float *row = y + (size_t)f * P;
            float bias = a->b != NULL ? a->b[f] : 0.0f;
            if (a->relu)
                for (size_t q = 0; q < P; q++)
                    row[q] = tt_relu(row[q] + bias);
            else if (a->b != NULL)
                for (size_t q = 0; q < P; q++)
                    row[q] += bias;
        }
    }
}

void cpu_conv_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                      const float *b, bool relu, float *y, void *ws)
{
    conv_args a = {.d = d, .x = x, .w = w, .b = b, .yo = y, .relu = relu, .cols = ws};
    /* one task per thread: each owns its column buffer */
    cpu_run(be, be->threads, conv_forward_task, &a);
}

static void conv_backward_images(void *p, int k, int tasks)
{
    conv_args *a = p;
    const window_desc *d = a->d;
    size_t ckk = conv_ckk(d), P = conv_p(d), NP = (size_t)d->n * P;
    float *col = a->cols + (size_t)k * ckk * P;
    int lo, hi;
    cpu_range(d->n, tasks, k, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        float *dy = a->dy + (size_t)i * d->f * P;
        if (a->relu) {
            const float *y = a->y + (size_t)i * d->f * P;
            for (size_t q = 0; q < (size_t)d->f * P; q++)
                dy[q] = tt_relu_grad(y[q], dy[q]);
        }
        if (a->dw != NULL || a->db != NULL) {
            for (int f = 0; f < d->f; f++)
                memcpy(a->dYt + (size_t)f * NP + (size_t)i * P, dy + (size_t)f * P,
                       P * sizeof(float));
        }
        if (a->dw != NULL)
            im2col(d, a->x + (size_t)i * d->c * d->h * d->w, a->COL + (size_t)i * P, NP);
        if (a->dx != NULL) {
            cpu_sgemm(1, 0, (int)ckk, (int)P, d->f, 1.0f, a->w, (int)ckk, dy, (int)P, 0.0f, col,
                      (int)P);
            col2im(d, col, a->dx + (size_t)i * d->c * d->h * d->w);
        }
    }
}

static void conv_backward_weights(void *p, int k, int tasks)
{
    conv_args *a = p;
    const window_desc *d = a->d;
    size_t ckk = conv_ckk(d), NP = (size_t)d->n * conv_p(d);
    int lo, hi;
    cpu_range((int)ckk, tasks, k, &lo, &hi);
    if (a->dw != NULL && hi > lo)
        cpu_sgemm(0, 1, d->f, hi - lo, (int)NP, 1.0f, a->dYt, (int)NP, a->COL + (size_t)lo * NP,
                  (int)NP, 0.0f, a->dw + lo, (int)ckk);
    cpu_range(d->f, tasks, k, &lo, &hi);
    if (a->db != NULL) {
        for (int f = lo; f < hi; f++) {
            const float *row = a->dYt + (size_t)f * NP;
            float s = 0.0f;
            for (size_t q = 0; q < NP; q++)
                s += row[q];
            a->db[f] = s;
        }
    }
}

void cpu_conv_backward(backend_t *be, const window_desc *d, const float *x, const float *w,
                       const float *y, bool relu, float *dy, float *dx, float *dw, float *db,
                       void *ws)
{
    size_t ckk = conv_ckk(d), P = conv_p(d);
    float *cols = ws;
    float *COL = cols + (size_t)be->threads * ckk * P;
    float *dYt = COL + ckk * d->n * P;
    conv_args a = {.d = d, .x = x, .w = w, .y = y, .dy = dy, .dx = dx, .dw = dw, .db = db,
                   .relu = relu, .cols = cols, .COL = COL, .dYt = dYt};
    cpu_run(be, be->threads, conv_backward_images, &a);
    if (dw != NULL || db != NULL)
        cpu_run(be, be->threads, conv_backward_weights, &a);
}

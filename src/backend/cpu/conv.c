/* conv.c - 2-D convolution as im2col + sgemm.
 *
 * Forward, per image (images split over the team):
 *   col[C*K*K, P] = im2col(x_i)        P = OH*OW
 *   y_i[F, P]     = w[F, C*K*K] . col  (+ bias, relu)
 * Backward, images split into CONV_GROUPS fixed groups (whatever the number
 * of threads), per image of group g:
 *   mask dy_i by relu; col = im2col(x_i);
 *   dw_g += dy_i . col^T,  db_g += row sums of dy_i;
 *   dx_i = col2im(w^T . dy_i)
 * then dw = dw_0 + dw_1 + ... in group order. The columns of one image stay
 * in L2, and since the groups do not depend on the thread count, neither do
 * the bits.
 *
 * The loops here copy and add (the products are the BLAS's, which picks its
 * own kernels, capped as cpu_isa.h says): plain C at every level.
 *
 * Workspace (floats): CONV_BUFS column buffers of CKK*P, then CONV_GROUPS
 * partial dw (F*CKK) and db (F).
 */
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/gemm.h"
#include "backend/math.h"

#define CONV_GROUPS 4

typedef struct {
    const window_desc *d;
    const float *x, *w, *b, *y;
    float *yo, *dy, *dx, *dw, *db;
    bool relu;
    float *cols;   /* column buffers, one per task */
    float *pdw;    /* [CONV_GROUPS, F*CKK] partial weight gradients */
    float *pdb;    /* [CONV_GROUPS, F] partial bias gradients */
} conv_args;

/* Column buffers: one per forward task (threads) and per backward group. */
static int conv_bufs(const backend_t *be)
{
    return be->threads > CONV_GROUPS ? be->threads : CONV_GROUPS;
}

static size_t conv_ckk(const window_desc *d)
{
    return (size_t)d->c * d->k * d->k;
}

static size_t conv_p(const window_desc *d)
{
    return (size_t)d->oh * d->ow;
}

/* Stride 1: the outputs ox in [*ox0, *ox1) read input column ox - pad + kx
 * inside the image; the others read padding. Clamped to [0, ow] so tiny,
 * heavily padded inputs never index outside the row. */
static inline void unit_stride_span(const window_desc *d, int kx, int *ox0, int *ox1)
{
    int lo = d->pad - kx, hi = d->w + d->pad - kx;
    lo = lo < 0 ? 0 : lo > d->ow ? d->ow : lo;
    hi = hi < lo ? lo : hi > d->ow ? d->ow : hi;
    *ox0 = lo;
    *ox1 = hi;
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
                        int ox0, ox1;
                        unit_stride_span(d, kx, &ox0, &ox1);
                        for (int ox = 0; ox < ox0; ox++)
                            out[ox] = 0.0f;
                        for (int ox = ox0; ox < ox1; ox++)
                            out[ox] = in[ox - pad + kx];
                        for (int ox = ox1; ox < d->ow; ox++)
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
                    if (S == 1) {
                        int ox0, ox1;
                        unit_stride_span(d, kx, &ox0, &ox1);
                        for (int ox = ox0; ox < ox1; ox++)
                            out[ox - pad + kx] += in[ox];
                        continue;
                    }
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
    return ((size_t)conv_bufs(be) * ckk * p + CONV_GROUPS * ((size_t)d->f * ckk + d->f)) *
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

static void conv_backward_group(void *p, int g, int groups)
{
    conv_args *a = p;
    const window_desc *d = a->d;
    size_t ckk = conv_ckk(d), P = conv_p(d);
    float *col = a->cols + (size_t)g * ckk * P;
    float *pdw = a->pdw + (size_t)g * d->f * ckk, *pdb = a->pdb + (size_t)g * d->f;
    int lo, hi;
    cpu_range(d->n, groups, g, &lo, &hi);
    memset(pdw, 0, (size_t)d->f * ckk * sizeof(float));
    memset(pdb, 0, (size_t)d->f * sizeof(float));
    for (int i = lo; i < hi; i++) {
        float *dy = a->dy + (size_t)i * d->f * P;
        if (a->relu) {
            const float *y = a->y + (size_t)i * d->f * P;
            for (size_t q = 0; q < (size_t)d->f * P; q++)
                dy[q] = tt_relu_grad(y[q], dy[q]);
        }
        if (a->dw != NULL) {
            im2col(d, a->x + (size_t)i * d->c * d->h * d->w, col, P);
            cpu_sgemm(0, 1, d->f, (int)ckk, (int)P, 1.0f, dy, (int)P, col, (int)P, 1.0f, pdw,
                      (int)ckk);
        }
        if (a->db != NULL) {
            for (int f = 0; f < d->f; f++) {
                const float *row = dy + (size_t)f * P;
                float s = 0.0f;
                for (size_t q = 0; q < P; q++)
                    s += row[q];
                pdb[f] += s;
            }
        }
        if (a->dx != NULL) {
            cpu_sgemm(1, 0, (int)ckk, (int)P, d->f, 1.0f, a->w, (int)ckk, dy, (int)P, 0.0f, col,
                      (int)P);
            col2im(d, col, a->dx + (size_t)i * d->c * d->h * d->w);
        }
    }
}

/* dw and db: the group partials summed in group order, split by element. */
static void conv_reduce_task(void *p, int k, int tasks)
{
    conv_args *a = p;
    const window_desc *d = a->d;
    int total = d->f * (int)conv_ckk(d);
    int lo, hi;
    cpu_range(total, tasks, k, &lo, &hi);
    if (a->dw != NULL)
        for (int i = lo; i < hi; i++)
            a->dw[i] = cpu_sum_in_order(a->pdw + i, CONV_GROUPS, (size_t)total);
    cpu_range(d->f, tasks, k, &lo, &hi);
    if (a->db != NULL)
        for (int f = lo; f < hi; f++)
            a->db[f] = cpu_sum_in_order(a->pdb + f, CONV_GROUPS, (size_t)d->f);
}

void cpu_conv_backward(backend_t *be, const window_desc *d, const float *x, const float *w,
                       const float *y, bool relu, float *dy, float *dx, float *dw, float *db,
                       void *ws)
{
    size_t ckk = conv_ckk(d), P = conv_p(d);
    float *cols = ws;
    float *pdw = cols + (size_t)conv_bufs(be) * ckk * P;
    float *pdb = pdw + CONV_GROUPS * (size_t)d->f * ckk;
    conv_args a = {.d = d, .x = x, .w = w, .y = y, .dy = dy, .dx = dx, .dw = dw, .db = db,
                   .relu = relu, .cols = cols, .pdw = pdw, .pdb = pdb};
    cpu_run(be, CONV_GROUPS, conv_backward_group, &a);
    if (dw != NULL || db != NULL)
        cpu_run(be, be->threads, conv_reduce_task, &a);
}

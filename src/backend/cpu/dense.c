/* dense.c - y[n,out] = x[n,in] w[out,in]^T + b, and its backward, split over
 * the team by independent output blocks (no partial sums to combine).
 *
 * The blocks are fixed chunks of DENSE_CHUNK rows, never "one per thread": a
 * BLAS may pick another kernel (another summation order) for another M, so
 * only identical gemm calls whatever the thread count give identical bits. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/gemm.h"
#include "backend/math.h"

#define DENSE_CHUNK 32

static int dense_chunks(int rows)
{
    return (rows + DENSE_CHUNK - 1) / DENSE_CHUNK;
}

/* Rows [*lo, *hi) of chunk k. */
static void dense_chunk(int rows, int k, int *lo, int *hi)
{
    *lo = k * DENSE_CHUNK;
    *hi = *lo + DENSE_CHUNK < rows ? *lo + DENSE_CHUNK : rows;
}

typedef struct {
    int n, in, out;
    const float *x, *w, *b, *y;
    float *yo, *dy, *dx, *dw, *db;
    bool relu;
} dense_args;

/* Rows [lo, hi) of y: one gemm, then bias and relu on the same rows. */
static void dense_forward_task(void *p, int k, int tasks)
{
    dense_args *a = p;
    int lo, hi;
    dense_chunk(a->n, k, &lo, &hi);
    if (hi <= lo)
        return;
    float *y = a->yo + (size_t)lo * a->out;
    cpu_sgemm(0, 1, hi - lo, a->out, a->in, 1.0f, a->x + (size_t)lo * a->in, a->in, a->w, a->in,
              0.0f, y, a->out);
    for (int r = 0; r < hi - lo; r++) {
        float *row = y + (size_t)r * a->out;
        if (a->b != NULL)
            for (int j = 0; j < a->out; j++)
                row[j] += a->b[j];
        if (a->relu)
            for (int j = 0; j < a->out; j++)
                row[j] = tt_relu(row[j]);
    }
}

void cpu_dense_forward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                       const float *b, bool relu, float *y)
{
    dense_args a = {.n = n, .in = in, .out = out, .x = x, .w = w, .b = b, .yo = y, .relu = relu};
    cpu_run(be, dense_chunks(n), dense_forward_task, &a);
}

static void dense_mask_task(void *p, int k, int tasks)
{
    dense_args *a = p;
    int lo, hi;
    cpu_range(a->n, tasks, k, &lo, &hi);
    size_t from = (size_t)lo * a->out, to = (size_t)hi * a->out;
    for (size_t i = from; i < to; i++)
        a->dy[i] = tt_relu_grad(a->y[i], a->dy[i]);
}

/* Tasks [0, out chunks) compute rows of dw and db for a chunk of outputs,
 * the others rows of dx for a chunk of samples: each element is written by
 * exactly one task, and db sums its column in sample order. */
static void dense_backward_task(void *p, int k, int tasks)
{
    dense_args *a = p;
    int lo, hi, wchunks = a->dw != NULL || a->db != NULL ? dense_chunks(a->out) : 0;
    if (k < wchunks) {
        dense_chunk(a->out, k, &lo, &hi);
        if (a->dw != NULL)
            cpu_sgemm(1, 0, hi - lo, a->in, a->n, 1.0f, a->dy + lo, a->out, a->x, a->in, 0.0f,
                      a->dw + (size_t)lo * a->in, a->in);
        if (a->db != NULL) {
            for (int j = lo; j < hi; j++)
                a->db[j] = 0.0f;
            for (int r = 0; r < a->n; r++) {
                const float *row = a->dy + (size_t)r * a->out;
                for (int j = lo; j < hi; j++)
                    a->db[j] += row[j];
            }
        }
        return;
    }
    dense_chunk(a->n, k - wchunks, &lo, &hi);
    cpu_sgemm(0, 0, hi - lo, a->in, a->out, 1.0f, a->dy + (size_t)lo * a->out, a->out, a->w,
              a->in, 0.0f, a->dx + (size_t)lo * a->in, a->in);
}

void cpu_dense_backward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                        const float *y, bool relu, float *dy, float *dx, float *dw, float *db)
{
    dense_args a = {.n = n, .in = in, .out = out, .x = x, .w = w, .y = y,
                    .dy = dy, .dx = dx, .dw = dw, .db = db, .relu = relu};
    if (relu)
        cpu_run(be, cpu_tasks(be, n), dense_mask_task, &a);
    int tasks = (dw != NULL || db != NULL ? dense_chunks(out) : 0) +
                (dx != NULL ? dense_chunks(n) : 0);
    cpu_run(be, tasks, dense_backward_task, &a);
}

/* dense_bf16.c - the dense layer in bf16 with float32 accumulation (precision
 * "bf16", bf16.c, where oneDNN has AMX tiles; with AVX512_BF16 alone dense.c
 * runs tile_gemm's bf16 kernel): oneDNN matmul primitives on bf16 copies of
 * x, w and dy, writing float32.
 *
 *   forward           y[n,out]   = xb[n,in] . wb[out,in]^T  (+ b, relu)
 *   backward data     dx[n,in]   = dyb[n,out] . wb[out,in]
 *   backward weights  dw[out,in] = dybt[out,n] . xb[n,in]
 *   db[out] = column sums of the float32 dy, exactly as dense.c
 *
 * The copies round to nearest even (torch's float -> bfloat16), one pass
 * each, into buffers this cache owns; they grow on first use, so the steady
 * state allocates nothing.
 *
 * Bits: as dense.c, the rows (forward, backward data) and the output units
 * (backward weights) are cut into fixed chunks of DENSE_CHUNK, whatever the
 * thread count, and each chunk is one call of a primitive built for its
 * shape (the shorter last chunk has its own), run single-threaded: another
 * M could mean another oneDNN kernel and another summation order, equal
 * chunks cannot. Team task t runs chunks t, t + T, t + 2T, ... (T tasks)
 * with its own stream, scratchpad and memory objects; which task runs a
 * chunk does not change its result.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/dnnl_util.h"
#include "backend/math.h"

#define DENSE_CHUNK 32

enum { K_FWD, K_BWD_DATA, K_BWD_WEIGHTS };
enum { R_SRC, R_WEI, R_DST, R_BIAS, R_SCRATCH, N_ROLES };

/* One matmul C[m,n] = A[m,k] . B[k,n] of one shape; B is row-major [k,n]
 * except forward's, which is w[out,in] read transposed. */
typedef struct {
    int kind, m, k, n;
    bool relu, bias;
    dnnl_primitive_t prim; /* NULL: oneDNN could not build it */
    dnnl_memory_desc_t md[N_ROLES];
    dnnl_memory_t *mem; /* [slots][N_ROLES], created on first use */
} mm_prim;

/* One backend instance's state. */
typedef struct {
    int slots; /* team tasks: be->threads */
    dnnl_stream_t *streams;
    char **scratch; /* [slots], scratch_bytes each */
    size_t scratch_bytes;
    mm_prim **prims;
    int n_prims, cap;
    uint16_t *xb, *wb, *dyb, *dybt;
    size_t xb_cap, wb_cap, dyb_cap, dybt_cap; /* elements */
} dense_bf16;

/* ---- float32 -> bf16, round to nearest even, NaN kept quiet ---- */

static inline uint16_t bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

CPU_HOT static void to_bf16(const float *x, uint16_t *y, size_t count)
{
    for (size_t i = 0; i < count; i++)
        y[i] = bf16_round(x[i]);
}

/* rows [r0, r1) of x[rows, cols] into columns of y[cols, rows] */
CPU_HOT static void to_bf16_transposed(const float *x, uint16_t *y, int rows, int cols, int r0,
                                       int r1)
{
    for (int r = r0; r < r1; r++)
        for (int c = 0; c < cols; c++)
            y[(size_t)c * rows + r] = bf16_round(x[(size_t)r * cols + c]);
}

/* ---- the cache ---- */

static dense_bf16 *cache_get(backend_t *be)
{
    cpu_impl *impl = be->impl;
    dense_bf16 *c = impl->dense_bf16;
    if (c != NULL)
        return c;
    if (cpu_dnnl_engine() == NULL || (c = calloc(1, sizeof(*c))) == NULL)
        return NULL;
    c->slots = be->threads;
    c->streams = calloc((size_t)c->slots, sizeof(*c->streams));
    c->scratch = calloc((size_t)c->slots, sizeof(*c->scratch));
    if (c->streams == NULL || c->scratch == NULL) {
        cpu_dense_bf16_free(c);
        return NULL;
    }
    for (int s = 0; s < c->slots; s++)
        if (dnnl_stream_create(&c->streams[s], cpu_dnnl_engine(), dnnl_stream_default_flags) !=
            dnnl_success) {
            cpu_dense_bf16_free(c);
            return NULL;
        }
    impl->dense_bf16 = c;
    return c;
}

static void prim_free(mm_prim *p, int slots)
{
    if (p->prim != NULL)
        dnnl_primitive_destroy(p->prim);
    for (int i = 0; p->mem != NULL && i < slots * N_ROLES; i++)
        if (p->mem[i] != NULL)
            dnnl_memory_destroy(p->mem[i]);
    free(p->mem);
    free(p);
}

void cpu_dense_bf16_free(void *cache)
{
    dense_bf16 *c = cache;
    if (c == NULL)
        return;
    for (int i = 0; i < c->n_prims; i++)
        prim_free(c->prims[i], c->slots);
    for (int s = 0; s < c->slots; s++) {
        if (c->streams != NULL && c->streams[s] != NULL)
            dnnl_stream_destroy(c->streams[s]);
        if (c->scratch != NULL)
            free(c->scratch[s]);
    }
    free(c->streams);
    free(c->scratch);
    free(c->prims);
    free(c->xb);
    free(c->wb);
    free(c->dyb);
    free(c->dybt);
    free(c);
}

/* Builds the primitive of p's shape; false leaves p->prim NULL. */
static bool prim_build(dense_bf16 *c, mm_prim *p)
{
    dnnl_dims_t a = {p->m, p->k}, b = {p->k, p->n}, d = {p->m, p->n}, bias = {1, p->n};
    dnnl_memory_desc_init_by_tag(&p->md[R_SRC], 2, a, dnnl_bf16, dnnl_ab);
    /* forward's B is w[out,in] = [n,k] read transposed */
    dnnl_memory_desc_init_by_tag(&p->md[R_WEI], 2, b, dnnl_bf16,
                                 p->kind == K_FWD ? dnnl_ba : dnnl_ab);
    dnnl_memory_desc_init_by_tag(&p->md[R_DST], 2, d, dnnl_f32, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&p->md[R_BIAS], 2, bias, dnnl_f32, dnnl_ab);
    dnnl_primitive_attr_t attr;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success)
        return false;
    bool ok = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
              dnnl_success;
    if (ok && p->relu) {
        dnnl_post_ops_t po;
        ok = dnnl_post_ops_create(&po) == dnnl_success;
        if (ok) {
            ok = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) ==
                     dnnl_success &&
                 dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
            dnnl_post_ops_destroy(po);
        }
    }
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    ok = ok &&
         dnnl_matmul_desc_init(&md, &p->md[R_SRC], &p->md[R_WEI],
                               p->bias ? &p->md[R_BIAS] : NULL, &p->md[R_DST]) ==
             dnnl_success &&
         dnnl_primitive_desc_create(&pd, &md, attr, cpu_dnnl_engine(), NULL) == dnnl_success;
    dnnl_primitive_attr_destroy(attr);
    if (!ok)
        return false;
    p->md[R_SCRATCH] = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t s = (dnnl_memory_desc_get_size(&p->md[R_SCRATCH]) + 63) & ~(size_t)63;
    ok = dnnl_primitive_create(&p->prim, pd) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    if (!ok) {
        p->prim = NULL;
        return false;
    }
    if (s > c->scratch_bytes) {
        /* every slot's larger buffer first, so that a failure leaves the
         * old ones (which the other primitives fit) in place */
        char **bigger = calloc((size_t)c->slots, sizeof(*bigger));
        bool got = bigger != NULL;
        for (int i = 0; got && i < c->slots; i++)
            got = (bigger[i] = aligned_alloc(64, s)) != NULL;
        for (int i = 0; bigger != NULL && i < c->slots; i++) {
            free(got ? c->scratch[i] : bigger[i]);
            if (got)
                c->scratch[i] = bigger[i];
        }
        free(bigger);
        if (!got)
            return false;
        c->scratch_bytes = s;
    }
    return true;
}

/* The primitive for one shape, built on first use (on the tower's thread,
 * before the tasks start). NULL when oneDNN cannot build it. */
static mm_prim *prim_get(dense_bf16 *c, int kind, int m, int k, int n, bool relu, bool bias)
{
    for (int i = 0; i < c->n_prims; i++) {
        mm_prim *p = c->prims[i];
        if (p->kind == kind && p->m == m && p->k == k && p->n == n && p->relu == relu &&
            p->bias == bias)
            return p->prim != NULL ? p : NULL;
    }
    if (c->n_prims == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        mm_prim **np = realloc(c->prims, (size_t)cap * sizeof(*np));
        if (np == NULL)
            return NULL;
        c->prims = np;
        c->cap = cap;
    }
    mm_prim *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    if ((p->mem = calloc((size_t)c->slots * N_ROLES, sizeof(*p->mem))) == NULL) {
        free(p);
        return NULL;
    }
    *p = (mm_prim){.kind = kind, .m = m, .k = k, .n = n, .relu = relu, .bias = bias,
                   .mem = p->mem};
    c->prims[c->n_prims++] = p;
    cpu_dnnl_single_thread();
    if (!prim_build(c, p) && p->prim != NULL) {
        dnnl_primitive_destroy(p->prim);
        p->prim = NULL;
    }
    return p->prim != NULL ? p : NULL;
}

/* Grows a bf16 buffer to hold `count` elements. */
static bool buf_reserve(uint16_t **buf, size_t *cap, size_t count)
{
    if (count <= *cap)
        return true;
    size_t bytes = (count * sizeof(uint16_t) + 63) & ~(size_t)63;
    uint16_t *nb = aligned_alloc(64, bytes);
    if (nb == NULL)
        return false;
    free(*buf);
    *buf = nb;
    *cap = count;
    return true;
}

/* Runs p on slot s: C = A . B (+ bias). */
static void mm_exec(dense_bf16 *c, mm_prim *p, int s, const void *a, const void *b,
                    const float *bias, float *dst)
{
    const void *ptr[N_ROLES] = {a, b, dst, bias, c->scratch[s]};
    static const int arg[N_ROLES] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS,
                                     DNNL_ARG_SCRATCHPAD};
    dnnl_exec_arg_t args[N_ROLES];
    int n = 0;
    for (int r = 0; r < N_ROLES; r++) {
        if ((r == R_BIAS && !p->bias) ||
            (r == R_SCRATCH && dnnl_memory_desc_get_size(&p->md[R_SCRATCH]) == 0))
            continue;
        dnnl_memory_t *m = &p->mem[s * N_ROLES + r];
        if (*m == NULL)
            cpu_dnnl_check(dnnl_memory_create(m, &p->md[r], cpu_dnnl_engine(), (void *)ptr[r]), "memory_create");
        else
            cpu_dnnl_check(dnnl_memory_set_data_handle(*m, (void *)ptr[r]), "set_data_handle");
        args[n].arg = arg[r];
        args[n].memory = *m;
        n++;
    }
    cpu_dnnl_check(dnnl_primitive_execute(p->prim, c->streams[s], n, args), "primitive_execute");
}

static int chunks_of(int rows)
{
    return (rows + DENSE_CHUNK - 1) / DENSE_CHUNK;
}

/* The primitives for `rows` rows in chunks: [0] a full chunk, [1] the last
 * one (the same when rows divide evenly). false when one cannot be built. */
static bool chunk_prims(dense_bf16 *c, int kind, int rows, int k, int n, bool relu, bool bias,
                        mm_prim **p)
{
    int full = rows < DENSE_CHUNK ? rows : DENSE_CHUNK;
    int last = rows - (chunks_of(rows) - 1) * DENSE_CHUNK;
    p[0] = prim_get(c, kind, full, k, n, relu, bias);
    p[1] = prim_get(c, kind, last, k, n, relu, bias);
    return p[0] != NULL && p[1] != NULL;
}

typedef struct {
    dense_bf16 *c;
    int n, in, out;
    const float *x, *w, *b, *y;
    float *yo, *dy, *dx, *dw, *db;
    bool relu;
    mm_prim *fwd[2], *bd[2], *bw[2];
} dense_args;

/* ---- forward ---- */

/* w -> wb and x -> xb, split by element (conversion is per element). */
static void convert_fwd_task(void *p, int k, int tasks)
{
    dense_args *a = p;
    int lo, hi;
    cpu_range(a->out, tasks, k, &lo, &hi);
    to_bf16(a->w + (size_t)lo * a->in, a->c->wb + (size_t)lo * a->in,
            (size_t)(hi - lo) * a->in);
    cpu_range(a->n, tasks, k, &lo, &hi);
    to_bf16(a->x + (size_t)lo * a->in, a->c->xb + (size_t)lo * a->in,
            (size_t)(hi - lo) * a->in);
}

static void forward_task(void *p, int s, int tasks)
{
    dense_args *a = p;
    cpu_dnnl_single_thread();
    int chunks = chunks_of(a->n);
    for (int q = s; q < chunks; q += tasks) {
        int lo = q * DENSE_CHUNK;
        mm_prim *prim = q == chunks - 1 ? a->fwd[1] : a->fwd[0];
        mm_exec(a->c, prim, s, a->c->xb + (size_t)lo * a->in, a->c->wb, a->b,
                a->yo + (size_t)lo * a->out);
    }
}

/* The conversion pass over `count` elements: on the calling thread when it
 * is small (a dense layer's few hundred thousand: less than waking the team
 * and waiting for it costs on a busy machine), else split over the team.
 * Elementwise, so the split does not change the bits. */
#define CONVERT_SERIAL (1 << 20)

static void convert(backend_t *be, size_t count, threadpool_fn fn, dense_args *a)
{
    if (count < CONVERT_SERIAL)
        fn(a, 0, 1);
    else
        cpu_run(be, be->threads, fn, a);
}

static int tasks_for(const backend_t *be, int chunks)
{
    return chunks < be->threads ? chunks : be->threads;
}

void cpu_dense_bf16_forward(backend_t *be, int n, int in, int out, const float *x,
                            const float *w, const float *b, bool relu, float *y)
{
    dense_bf16 *c = cache_get(be);
    dense_args a = {.c = c, .n = n, .in = in, .out = out, .x = x, .w = w, .b = b, .yo = y,
                    .relu = relu};
    /* only when memory runs out: then the float32 layer rather than none */
    if (c == NULL || !buf_reserve(&c->xb, &c->xb_cap, (size_t)n * in) ||
        !buf_reserve(&c->wb, &c->wb_cap, (size_t)out * in) ||
        !chunk_prims(c, K_FWD, n, in, out, relu, b != NULL, a.fwd)) {
        cpu_dense_forward(be, n, in, out, x, w, b, relu, y);
        return;
    }
    convert(be, (size_t)(n + out) * in, convert_fwd_task, &a);
    cpu_run(be, tasks_for(be, chunks_of(n)), forward_task, &a);
}

/* ---- backward ---- */

/* relu mask of dy (in place, float32 as dense.c), dy -> dyb and dybt,
 * x -> xb, w -> wb, split by rows */
static void convert_bwd_task(void *p, int k, int tasks)
{
    dense_args *a = p;
    dense_bf16 *c = a->c;
    int lo, hi;
    cpu_range(a->n, tasks, k, &lo, &hi);
    if (a->relu)
        for (size_t i = (size_t)lo * a->out; i < (size_t)hi * a->out; i++)
            a->dy[i] = tt_relu_grad(a->y[i], a->dy[i]);
    if (a->dx != NULL)
        to_bf16(a->dy + (size_t)lo * a->out, c->dyb + (size_t)lo * a->out,
                (size_t)(hi - lo) * a->out);
    if (a->dw != NULL) {
        to_bf16_transposed(a->dy, c->dybt, a->n, a->out, lo, hi);
        to_bf16(a->x + (size_t)lo * a->in, c->xb + (size_t)lo * a->in,
                (size_t)(hi - lo) * a->in);
    }
    if (a->dx != NULL) {
        cpu_range(a->out, tasks, k, &lo, &hi);
        to_bf16(a->w + (size_t)lo * a->in, c->wb + (size_t)lo * a->in,
                (size_t)(hi - lo) * a->in);
    }
}

/* Work items: the output-unit chunks of dw (and db), then the row chunks of
 * dx; slot s takes items s, s + T, ... */
static void backward_task(void *p, int s, int tasks)
{
    dense_args *a = p;
    dense_bf16 *c = a->c;
    cpu_dnnl_single_thread();
    int wchunks = a->dw != NULL || a->db != NULL ? chunks_of(a->out) : 0;
    int xchunks = a->dx != NULL ? chunks_of(a->n) : 0;
    for (int q = s; q < wchunks + xchunks; q += tasks) {
        if (q < wchunks) {
            int lo = q * DENSE_CHUNK, hi = lo + DENSE_CHUNK < a->out ? lo + DENSE_CHUNK : a->out;
            if (a->dw != NULL)
                mm_exec(c, q == wchunks - 1 ? a->bw[1] : a->bw[0], s,
                        c->dybt + (size_t)lo * a->n, c->xb, NULL, a->dw + (size_t)lo * a->in);
            if (a->db != NULL)
                cpu_dense_bias_grad(a->dy, a->n, a->out, lo, hi, a->db);
        } else {
            int xq = q - wchunks, lo = xq * DENSE_CHUNK;
            mm_exec(c, xq == xchunks - 1 ? a->bd[1] : a->bd[0], s,
                    c->dyb + (size_t)lo * a->out, c->wb, NULL, a->dx + (size_t)lo * a->in);
        }
    }
}

void cpu_dense_bf16_backward(backend_t *be, int n, int in, int out, const float *x,
                             const float *w, const float *y, bool relu, float *dy, float *dx,
                             float *dw, float *db)
{
    dense_bf16 *c = cache_get(be);
    dense_args a = {.c = c, .n = n, .in = in, .out = out, .x = x, .w = w, .y = y, .dy = dy,
                    .dx = dx, .dw = dw, .db = db, .relu = relu};
    bool ok = c != NULL && buf_reserve(&c->xb, &c->xb_cap, (size_t)n * in) &&
              buf_reserve(&c->wb, &c->wb_cap, (size_t)out * in) &&
              buf_reserve(&c->dyb, &c->dyb_cap, (size_t)n * out) &&
              buf_reserve(&c->dybt, &c->dybt_cap, (size_t)n * out);
    ok = ok && (dw == NULL || chunk_prims(c, K_BWD_WEIGHTS, out, n, in, false, false, a.bw)) &&
         (dx == NULL || chunk_prims(c, K_BWD_DATA, n, out, in, false, false, a.bd));
    if (!ok) {
        cpu_dense_backward(be, n, in, out, x, w, y, relu, dy, dx, dw, db);
        return;
    }
    convert(be, (size_t)(n + out) * in + (size_t)n * out, convert_bwd_task, &a);
    int chunks = (dw != NULL || db != NULL ? chunks_of(out) : 0) + (dx != NULL ? chunks_of(n) : 0);
    if (chunks > 0)
        cpu_run(be, tasks_for(be, chunks), backward_task, &a);
}

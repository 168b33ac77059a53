/* cpu.h - private to the CPU backend: its state and the parallel-for helper. */
#ifndef TT_CPU_H
#define TT_CPU_H

#include "backend/backend.h"
#include "util/threadpool.h"

typedef struct {
    threadpool_t *pool;
    void *conv; /* conv_dnnl.c's primitive cache; NULL until the first conv */
    float *pack; /* dense.c's packing buffers, grown on first use of a shape */
    size_t pack_floats;
    /* precision "bf16" (bf16.c): conv_dnnl.c builds its primitives with
     * bf16 inputs, and dense_bf16.c keeps its primitives here */
    bool bf16;
    void *dense_bf16;
    /* the last softmax_xent's summed loss and correct count (loss_read) */
    double loss_sum;
    int correct;
} cpu_impl;

/* CPU_HOT: the older way, for the loops not yet moved to cpu_isa.h's
 * per-level variants (conv_small.c, pool.c, batchnorm.c, dense_bf16.c):
 * ifunc clones for several instruction sets, picked at load time from
 * CPUID, so TT_CPU_ISA does not cap them. tile_gemm.c, transpose.c,
 * elementwise.c and conv.c pick theirs from cpu_isa(). */
/* Not under the sanitizers: the clones' ifunc resolvers run while the
 * dynamic loader relocates, before TSan's runtime exists (a crash). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define CPU_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_HOT
#endif
/* A few loops have hand-written AVX-512 kernels, chosen at run time. They
 * are plain functions with target attributes (no ifunc), so they stay in
 * the sanitizers' builds: the only memory checkers that can run them
 * (valgrind cannot run AVX-512 code). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_AVX512_KERNELS 1
#endif

/* Splits [0, n) into `parts` contiguous ranges; range k is [*lo, *hi). */
static inline void cpu_range(int n, int parts, int k, int *lo, int *hi)
{
    *lo = (int)((long)n * k / parts);
    *hi = (int)((long)n * (k + 1) / parts);
}

/* Runs fn over `tasks` tasks on the backend's team. */
static inline void cpu_run(backend_t *be, int tasks, threadpool_fn fn, void *arg)
{
    threadpool_run(((cpu_impl *)be->impl)->pool, tasks, fn, arg);
}

/* Number of tasks to split n independent items into. */
static inline int cpu_tasks(const backend_t *be, int n)
{
    return n < be->threads ? (n > 0 ? n : 1) : be->threads;
}

/* p[0] + p[stride] + ... + p[(n - 1) * stride], in that order: the
 * convolutions' partial weight and bias gradients of fixed groups of images,
 * summed so that the bits do not depend on the thread count. */
static inline float cpu_sum_in_order(const float *p, int n, size_t stride)
{
    float s = p[0];
    for (int g = 1; g < n; g++)
        s += p[(size_t)g * stride];
    return s;
}

/* The dense layer's bias gradient over the output units [lo, hi):
 * db[j] = sum over the n rows of dy[r][j], in row order (dense.c and
 * dense_bf16.c: the same bits in fp32 and bf16). */
static inline void cpu_dense_bias_grad(const float *dy, int n, int out, int lo, int hi,
                                       float *db)
{
    for (int j = lo; j < hi; j++)
        db[j] = 0.0f;
    for (int r = 0; r < n; r++) {
        const float *row = dy + (size_t)r * out;
        for (int j = lo; j < hi; j++)
            db[j] += row[j];
    }
}

/* Operations by file: dense.c, conv.c, pool.c, elementwise.c. */
void cpu_dense_forward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                       const float *b, bool relu, float *y);
void cpu_dense_backward(backend_t *be, int n, int in, int out, const float *x, const float *w,
                        const float *y, bool relu, float *dy, float *dx, float *dw, float *db);
/* dense.c in precision "bf16" where the CPU has AVX512_BF16 but no AMX
 * (bf16.c): the same products on tile_gemm's bf16 kernel */
void cpu_dense_tile_bf16_forward(backend_t *be, int n, int in, int out, const float *x,
                                 const float *w, const float *b, bool relu, float *y);
void cpu_dense_tile_bf16_backward(backend_t *be, int n, int in, int out, const float *x,
                                  const float *w, const float *y, bool relu, float *dy,
                                  float *dx, float *dw, float *db);
size_t cpu_conv_workspace(backend_t *be, const window_desc *d);
void cpu_conv_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                      const float *b, bool relu, float *y, void *ws);
void cpu_conv_backward(backend_t *be, const window_desc *d, const float *x, const float *w,
                       const float *y, bool relu, float *dy, float *dx, float *dw, float *db,
                       void *ws);
void cpu_maxpool_forward(backend_t *be, const window_desc *d, const float *x, float *y,
                         int32_t *mask);
void cpu_maxpool_backward(backend_t *be, const window_desc *d, const float *dy,
                          const int32_t *mask, float *dx);
void cpu_avgpool_forward(backend_t *be, const window_desc *d, const float *x, float *y);
void cpu_avgpool_backward(backend_t *be, const window_desc *d, const float *dy, float *dx);
void cpu_batchnorm_forward(backend_t *be, int n, int c, int hw, const float *x, const float *gamma,
                           const float *beta, float *running_mean, float *running_var,
                           float momentum, float eps, bool training, bool relu, float *y,
                           float *save_mean, float *save_invstd);
void cpu_batchnorm_backward(backend_t *be, int n, int c, int hw, const float *x,
                            const float *gamma, const float *save_mean, const float *save_invstd,
                            const float *y, bool relu, float *dy, float *dx, float *dgamma,
                            float *dbeta);
void cpu_batchnorm_forward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                   const float *gamma, const float *beta, float *running_mean,
                                   float *running_var, float momentum, float eps, bool training,
                                   bool relu, float *y, float *save_mean, float *save_invstd);
void cpu_batchnorm_backward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                    const float *gamma, const float *save_mean,
                                    const float *save_invstd, const float *y, bool relu,
                                    float *dy, float *dx, float *dgamma, float *dbeta);
void cpu_batchnorm_add_backward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                        const float *gamma, const float *save_mean,
                                        const float *save_invstd, const float *y, bool relu,
                                        float *dy, float *dx, float *dgamma, float *dbeta,
                                        float *dr, bool dr_accumulate);
void cpu_global_avgpool_blocked_forward(backend_t *be, int n, int c, int hw, const float *x,
                                        float *y);
void cpu_global_avgpool_blocked_backward(backend_t *be, int n, int c, int hw, const float *dy,
                                         float *dx);
void cpu_relu_forward(backend_t *be, size_t count, const float *x, float *y);
void cpu_relu_backward(backend_t *be, size_t count, const float *y, const float *dy, float *dx);
void cpu_dropout_forward(backend_t *be, size_t count, float rate, uint64_t seed, const float *x,
                         float *y, float *mask);
void cpu_mul(backend_t *be, size_t count, const float *a, const float *b, float *y);
void cpu_axpy(backend_t *be, size_t count, float alpha, const float *x, float *y);
void cpu_add(backend_t *be, size_t count, const float *a, const float *b, bool relu, float *y);
void cpu_relu_forward_blocked(backend_t *be, size_t count, const float *x, float *y);
void cpu_relu_backward_blocked(backend_t *be, size_t count, const float *y, const float *dy,
                               float *dx);
void cpu_add_blocked(backend_t *be, size_t count, const float *a, const float *b, bool relu,
                     float *y);
void cpu_scale(backend_t *be, size_t count, float alpha, float *x);
bool cpu_all_finite(backend_t *be, size_t count, const float *x);
double cpu_sumsq(backend_t *be, size_t count, const float *x);
void cpu_sumsq_each(backend_t *be, int n, const float *const *x, const size_t *count,
                    double *out);
void cpu_add_scalar(backend_t *be, size_t count, float alpha, float *x);
void cpu_softmax_xent(backend_t *be, int n, int classes, const float *logits,
                      const int32_t *labels, float smoothing, float *dlogits);
void cpu_loss_read(backend_t *be, double *loss_sum, int *correct);
void cpu_sgd_step(backend_t *be, size_t count, float lr, float momentum, bool nesterov,
                  float weight_decay, bool first_step, float *w, const float *g, float *buf);
void cpu_adam_step(backend_t *be, size_t count, float lr, float beta1, float beta2, float eps,
                   float weight_decay, int64_t step, float *w, const float *g, float *m,
                   float *v);

/* conv_small.c: convolutions with few channels, 16 images in the vector
 * lanes; cpu_conv_small_fits() says which (cpu_backend.c dispatches) */
bool cpu_conv_small_fits(const backend_t *be, const window_desc *d);
size_t cpu_conv_small_workspace(backend_t *be, const window_desc *d);
void cpu_conv_small_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                            const float *b, bool relu, float *y, void *ws);
void cpu_conv_small_backward(backend_t *be, const window_desc *d, const float *x,
                             const float *w, const float *y, bool relu, float *dy, float *dx,
                             float *dw, float *db, void *ws);

/* dense_bf16.c (precision "bf16", oneDNN builds only) */
void cpu_dense_bf16_forward(backend_t *be, int n, int in, int out, const float *x,
                            const float *w, const float *b, bool relu, float *y);
void cpu_dense_bf16_backward(backend_t *be, int n, int in, int out, const float *x,
                             const float *w, const float *y, bool relu, float *dy, float *dx,
                             float *dw, float *db);
void cpu_dense_bf16_free(void *cache);

#endif

/* cuda_kernels.h - the CUDA backend's own kernels (cuda_kernels.cu), as C
 * launchers: each queues its kernel on the stream and returns the launch
 * status (cudaGetLastError), which the caller turns into a tt_err. Counts of
 * 0 launch nothing. The per-element math is backend/math.h's.
 */
#ifndef TT_CUDA_KERNELS_H
#define TT_CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda/sumsq_plan.h"
#include "backend/math.h"

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t tt_k_relu_forward(cudaStream_t s, size_t n, const float *x, float *y);
cudaError_t tt_k_relu_backward(cudaStream_t s, size_t n, const float *y, const float *dy,
                               float *dx);
cudaError_t tt_k_dropout(cudaStream_t s, size_t n, float rate, uint64_t seed, const float *x,
                         float *y, float *mask);
cudaError_t tt_k_mul(cudaStream_t s, size_t n, const float *a, const float *b, float *y);
cudaError_t tt_k_axpy(cudaStream_t s, size_t n, float alpha, const float *x, float *y);
cudaError_t tt_k_add(cudaStream_t s, size_t n, const float *a, const float *b, bool relu,
                     float *y);
cudaError_t tt_k_scale(cudaStream_t s, size_t n, float alpha, float *x);
cudaError_t tt_k_add_scalar(cudaStream_t s, size_t n, float alpha, float *x);
/* Mixed precision (precision.h): y[i] = x[i] rounded to nearest even in
 * bfloat16 (bf16) or IEEE half (else; beyond its range: +-Inf), stored as
 * 16-bit values; and back, exactly, to float32. */
cudaError_t tt_k_to_half(cudaStream_t s, size_t n, bool bf16, const float *x, void *y);
cudaError_t tt_k_from_half(cudaStream_t s, size_t n, bool bf16, const void *x, float *y);
/* n elements of type t, uniform in [-1, 1) (then rounded to t), a function
 * of (seed, i) alone: the operands of an algorithm search's timing runs. */
typedef enum { TT_ELEM_FLOAT, TT_ELEM_BF16, TT_ELEM_FP16 } tt_elem_t;
cudaError_t tt_k_fill_uniform(cudaStream_t s, size_t n, tt_elem_t t, uint64_t seed, void *y);
/* *flag = 1 when some x[i] is an Inf or a NaN (flag zeroed first). */
cudaError_t tt_k_not_finite(cudaStream_t s, size_t n, const float *x, int *flag);
cudaError_t tt_k_sgd(cudaStream_t s, size_t n, float lr, float momentum, bool nesterov,
                     float weight_decay, bool first_step, float *w, const float *g, float *buf);
cudaError_t tt_k_adam(cudaStream_t s, size_t n, tt_adam_consts c, float *w, const float *g,
                      float *m, float *v);
/* The same with the per-step scalars read from the device block v when the
 * kernel runs (backend_step_vars: a captured step's replays), and AdamW's
 * w *= v->decay; c: Adam's constants, its step_size and bias correction
 * replaced by v's. */
cudaError_t tt_k_sgd_vars(cudaStream_t s, size_t n, const backend_step_vars *v, float momentum,
                          bool nesterov, float weight_decay, float *w, const float *g,
                          float *buf);
cudaError_t tt_k_adam_vars(cudaStream_t s, size_t n, tt_adam_consts c,
                           const backend_step_vars *v, float *w, const float *g, float *m,
                           float *vsq);
cudaError_t tt_k_decay_vars(cudaStream_t s, size_t n, const backend_step_vars *v, float *w);
cudaError_t tt_k_dropout_vars(cudaStream_t s, size_t n, float rate, const uint64_t *seed,
                              const float *x, float *y, float *mask);

/* y[r, ch, i] (+)= b[ch] then relu, over rows x channels x inner: dense
 * (inner 1) and conv (inner = oh*ow) bias; b may be NULL (relu only). */
cudaError_t tt_k_bias_relu(cudaStream_t s, int rows, int channels, int inner, const float *b,
                           bool relu, float *y);
/* The dense bias gradient: db[j] = sum over r of dy[r, j], rows in order
 * (the CPU's bits). A conv's: cuda_bn_nhwc.h, tt_k_channel_sum. */
cudaError_t tt_k_dense_bias_grad(cudaStream_t s, int rows, int cols, const float *dy, float *db);

cudaError_t tt_k_maxpool_forward(cudaStream_t s, window_desc d, const float *x, float *y,
                                 int32_t *mask);
cudaError_t tt_k_maxpool_backward(cudaStream_t s, window_desc d, const float *dy,
                                  const int32_t *mask, float *dx);
cudaError_t tt_k_avgpool_forward(cudaStream_t s, window_desc d, const float *x, float *y);
cudaError_t tt_k_avgpool_backward(cudaStream_t s, window_desc d, const float *dy, float *dx);

/* The loss of n rows into out->loss (double, summed) and out->correct. */
typedef struct {
    double loss;
    int correct;
    int not_finite; /* tt_k_not_finite's flag, in the same small buffer */
} tt_xent_result;
cudaError_t tt_k_softmax_xent(cudaStream_t s, int n, int classes, const float *logits,
                              const int32_t *labels, float smoothing, float *dlogits,
                              tt_xent_result *out);
/* out[i] = the sum of r[i].x[e]^2 over its r[i].count floats, in double,
 * for the n ranges of a group (sumsq_plan.h: tt_sumsq_group; r in device
 * memory) whose parts partials (tt_sumsq_parts) go through part (device
 * memory, room for parts doubles): in an order fixed by each count alone */
cudaError_t tt_k_sumsq(cudaStream_t s, const tt_sumsq_range *r, int n, int parts, double *part,
                       double *out);

/* Batchnorm's parameter gradients alone (when no dx is wanted):
 * dbeta[ch] = sum dy, dgamma[ch] = sum dy * (x - mean) * invstd. */
cudaError_t tt_k_bn_param_grads(cudaStream_t s, int n, int c, int hw, const float *x,
                                const float *dy, const float *mean, const float *invstd,
                                float *dgamma, float *dbeta);

#ifdef __cplusplus
}
#endif

#endif

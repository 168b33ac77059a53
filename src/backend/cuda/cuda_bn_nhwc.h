/* cuda_bn_nhwc.h - batchnorm's kernels over NHWC activations (the blocked
 * layout with blocked_nhwc and C % 16 == 0, backend.h), and the conv bias
 * gradient's per-channel sums (NHWC or NCHW), as C launchers (cuda_bn_nhwc.cu; the
 * operations that call them: cuda_bn_nhwc.c).
 *
 * An activation x is [M rows = n * hw pixels][C channels], float32 or bf16
 * (blocked_bf16); gradients are float32 in the same order. Every sum runs
 * in an order fixed by the shape alone, never by timing (no atomics):
 *   1. each CTA (a 16-channel tile x a range of `rows` rows, partial g)
 *      reduces its rows, thread by thread then over the threads in a fixed
 *      tree, and writes one partial per channel to `part`;
 *   2. a small kernel, a CTA a channel, merges the partials in double
 *      (thread t partials t, t + 256, ... in order, then a fixed tree) and
 *      writes the per-channel coefficients;
 *   3. an element-wise kernel applies them (16-byte loads and stores).
 * Same inputs, same bits, run after run (the split: bn_nhwc_plan.h). Each
 * launcher returns the launch status (cudaGetLastError). The conv bias
 * gradient (tt_k_channel_sum, at the end) sums its channels the same way,
 * on its own split (tt_colsum_plan) and in the same scratch.
 */
#ifndef TT_CUDA_BN_NHWC_H
#define TT_CUDA_BN_NHWC_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/bn_nhwc_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1. part[(g * c + ch) * 2 + {0, 1}] = the mean and the sum of squared
 *    deviations (Welford, Chan's merge) of channel ch over partial g's rows. */
cudaError_t tt_k_bn_nhwc_stats(cudaStream_t s, bool bf16, tt_bn_grid g, const void *x,
                               float *part);
/* 2. From the partials (training) or the running statistics (inference):
 *    with training, the running statistics (momentum as torch, unbiased
 *    variance) and save_mean / save_invstd; always k[ch] = invstd * gamma,
 *    k[c + ch] = beta - mean * k[ch] (torch.nn.BatchNorm2d's y). */
cudaError_t tt_k_bn_nhwc_stats_finish(cudaStream_t s, tt_bn_grid g, const float *part,
                                      const float *gamma, const float *beta, float *running_mean,
                                      float *running_var, float momentum, float eps,
                                      bool training, float *save_mean, float *save_invstd,
                                      float *k);
/* 3. y = x * k[ch] + k[c + ch]; with r (may be NULL): that rounded to the
 *    activation type, + r; then relu if asked. y stored in the activation
 *    type (bf16: rounded to nearest even). */
cudaError_t tt_k_bn_nhwc_apply(cudaStream_t s, bool bf16, tt_bn_grid g, const void *x,
                               const void *r, const float *k, bool relu, void *y);

/* Backward: the gradients dy, dr and dx are float32, or bf16 with g16
 * (backend.h: blocked_bf16_grads; only with bf16 activations), read
 * exactly and stored rounded to nearest even (dr += g: the float32 sum,
 * rounded once).
 * 1: g = dy, masked where y <= 0 when relu (y the forward output);
 *    dr = g, or dr += g when dr_add (dr may be NULL); part[(p * c + ch) * 2
 *    + {0, 1}] = sum of g and of g * (x - mean[ch]) over partial p's rows. */
cudaError_t tt_k_bn_nhwc_grad_sums(cudaStream_t s, bool bf16, bool g16, tt_bn_grid g,
                                   const void *x, const void *y, const void *dy,
                                   const float *mean, bool relu, void *dr, bool dr_add,
                                   float *part);
/* 2. dgamma, dbeta (either may be NULL) and dx = A g + B x + C as
 *    k[ch], k[c + ch], k[2c + ch]: the CPU backend's formula (cpu/batchnorm.c). */
cudaError_t tt_k_bn_nhwc_grad_finish(cudaStream_t s, tt_bn_grid g, const float *part,
                                     const float *gamma, const float *mean, const float *invstd,
                                     float *dgamma, float *dbeta, float *k);
/* 3. dx = k[ch] g + k[c + ch] x + k[2c + ch] (g as in 1). */
cudaError_t tt_k_bn_nhwc_dx(cudaStream_t s, bool bf16, bool g16, tt_bn_grid g, const void *x,
                            const void *y, const void *dy, const float *k, bool relu, void *dx);

/* The conv bias gradient: db[ch] = the sum of channel ch of dy [n, c,
 * inner] (NHWC [rows, c]: inner 1; NCHW: inner = oh * ow; float32, or
 * bf16 with g16, read exactly), on k = tt_colsum_plan(n, c, inner) (any
 * c, not only multiples of 16):
 *   1. CTA (tile of channels, partial p): its threads sum their elements
 *      of their channel in order, in float32, then add up in a fixed tree
 *      (tt_colsum_pos_of, tt_colsum_half); part[p * c + ch] = that;
 *   2. a CTA a channel merges the partials as step 2 above, in double.
 * With one partial (k.g.g == 1) step 1 writes db and part is not touched.
 * The order is the shape's alone, not the type's: float32 and bf16 dy of
 * the same values give the same bits. part: k.g.g * c floats (the
 * batchnorm's scratch holds them). */
cudaError_t tt_k_channel_sum(cudaStream_t s, bool g16, tt_colsum_grid k, const void *dy,
                             float *part, float *db);

#ifdef __cplusplus
}
#endif

#endif

/* cuda_nhwc_kernels.h - launchers of cuda_nhwc_kernels.cu: the blocked
 * layout's element-wise and global-average-pooling kernels in bf16 NHWC
 * (pools, global average pooling and the layout conversions in float32
 * NHWC too).
 * Activation pointers hold bf16 (void here, so C callers need no CUDA
 * bf16 header); gradients float32, or bf16 where a backward launcher's g16
 * says (below). Each queues on stream s and returns the launch's error. */
#ifndef TT_CUDA_NHWC_KERNELS_H
#define TT_CUDA_NHWC_KERNELS_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t tt_k_relu_bf16(cudaStream_t s, size_t n, const void *x, void *y);
/* dy and dx bf16 where g16, else float32 (the backward launchers below
 * alike) */
cudaError_t tt_k_relu_back_bf16(cudaStream_t s, bool g16, size_t n, const void *y,
                                const void *dy, void *dx);
cudaError_t tt_k_add_bf16(cudaStream_t s, size_t n, const void *a, const void *b, bool relu,
                          void *y);
/* x bf16 NHWC where bf16, else float32 NHWC (the pools below too) */
cudaError_t tt_k_gap_nhwc_forward(cudaStream_t s, bool bf16, int n, int c, int hw, const void *x,
                                  float *y);
/* dy [n, c] float32; dx NHWC */
cudaError_t tt_k_gap_nhwc_backward(cudaStream_t s, bool g16, int n, int c, int hw,
                                   const float *dy, void *dx);
/* NCHW float32 [n, c, hw] to NHWC (bf16 where bf16, else float32) and
 * back (filters: KCRS to KRSC with n = filters, hw = k * k) */
cudaError_t tt_k_nchw_to_nhwc(cudaStream_t s, bool bf16, int n, int c, int hw, const float *x,
                              void *y);
cudaError_t tt_k_nhwc_to_nchw(cudaStream_t s, bool bf16, int n, int c, int hw, const void *x,
                              float *y);
/* conv bias (b may be NULL) and relu over NHWC bf16 [rows, c], in place */
cudaError_t tt_k_bias_relu_nhwc_bf16(cudaStream_t s, int rows, int c, const float *b, bool relu,
                                     void *y);
/* pools of a blocked (bf16 NHWC where bf16, else float32 NHWC) x
 * (d.blocked_x): y in x's type and layout where d.blocked_y, else NCHW
 * float32; mask and dy in y's layout; dx float32 NHWC (max: mask from the
 * forward; average: mask NULL); with g16, dx bf16 and a blocked y's dy
 * bf16 */
cudaError_t tt_k_maxpool_nhwc_forward(cudaStream_t s, bool bf16, window_desc d, const void *x,
                                      void *y, int32_t *mask);
cudaError_t tt_k_avgpool_nhwc_forward(cudaStream_t s, bool bf16, window_desc d, const void *x,
                                      void *y);
cudaError_t tt_k_pool_nhwc_backward(cudaStream_t s, bool g16, window_desc d, bool max,
                                    const void *dy, const int32_t *mask, void *dx);

#ifdef __cplusplus
}
#endif

#endif

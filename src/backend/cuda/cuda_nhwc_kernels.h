/* cuda_nhwc_kernels.h - launchers of cuda_nhwc_kernels.cu: the blocked
 * layout's element-wise and global-average-pooling kernels in bf16 NHWC.
 * Activation pointers hold bf16 (void here, so C callers need no CUDA
 * bf16 header); gradients float32. Each queues on stream s and returns
 * the launch's error. */
#ifndef TT_CUDA_NHWC_KERNELS_H
#define TT_CUDA_NHWC_KERNELS_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t tt_k_relu_bf16(cudaStream_t s, size_t n, const void *x, void *y);
cudaError_t tt_k_relu_back_bf16(cudaStream_t s, size_t n, const void *y, const float *dy,
                                float *dx);
cudaError_t tt_k_add_bf16(cudaStream_t s, size_t n, const void *a, const void *b, bool relu,
                          void *y);
cudaError_t tt_k_gap_nhwc_forward(cudaStream_t s, int n, int c, int hw, const void *x, float *y);
cudaError_t tt_k_gap_nhwc_backward(cudaStream_t s, int n, int c, int hw, const float *dy,
                                   float *dx);

#ifdef __cplusplus
}
#endif

#endif

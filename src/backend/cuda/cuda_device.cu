/* cuda_device.cu - the CUDA backend: device discovery, and the per-element
 * kernels that share backend/math.h with the CPU backend.
 *
 * The layer operations (cuBLAS, cuDNN) and NCCL come with the GPU issue; what
 * is here lets `trainer.device = "gpu"` fail clearly without a device and keeps
 * the nvcc build path exercised in CI.
 */
#include <stdio.h>

#include <cuda_runtime_api.h>

extern "C" {
#include "backend/math.h"
}

extern "C" int backend_cuda_device_count(char *reason, size_t reason_len)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        if (reason != NULL && reason_len > 0)
            snprintf(reason, reason_len, "CUDA: %s", cudaGetErrorString(rc));
        return 0;
    }
    if (n == 0 && reason != NULL && reason_len > 0)
        snprintf(reason, reason_len, "CUDA: no device found");
    return n;
}

/* Element-wise kernels: one thread per element, the same math as the CPU loops. */

__global__ void tt_relu_forward_kernel(size_t count, const float *x, float *y)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count)
        y[i] = tt_relu(x[i]);
}

__global__ void tt_relu_backward_kernel(size_t count, const float *y, const float *dy, float *dx)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count)
        dx[i] = tt_relu_grad(y[i], dy[i]);
}

__global__ void tt_sgd_kernel(size_t count, float lr, float momentum, int nesterov,
                              float weight_decay, int first_step, float *w, const float *g,
                              float *buf)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        float unused = 0.0f;
        w[i] = tt_sgd_update(w[i], g[i], buf ? &buf[i] : &unused, lr, momentum, nesterov,
                             weight_decay, first_step);
    }
}

__global__ void tt_adam_kernel(size_t count, tt_adam_consts c, float *w, const float *g,
                               float *m, float *v)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count)
        w[i] = tt_adam_update(w[i], g[i], &m[i], &v[i], &c);
}

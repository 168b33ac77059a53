/* cuda_check.c - every CUDA runtime, cuBLAS and cuDNN status becomes one
 * line naming the device, the call and the library's own error string:
 *   cuda:1: cudaMalloc: out of memory (cudaErrorMemoryAllocation)
 *   cuda:0: cudnnConvolutionForward: CUDNN_STATUS_BAD_PARAM (...)
 */
#include "backend/cuda/cuda_impl.h"

#include <stdio.h>
#include <string.h>

int cuda_check_err(cudaError_t rc, int device, const char *what, int code, tt_err *err)
{
    if (rc == cudaSuccess)
        return 0;
    return err_set(err, code, "cuda:%d: %s: %s (%s)", device, what, cudaGetErrorString(rc),
                   cudaGetErrorName(rc));
}

int cublas_check_err(cublasStatus_t rc, int device, const char *what, int code, tt_err *err)
{
    if (rc == CUBLAS_STATUS_SUCCESS)
        return 0;
    return err_set(err, code, "cuda:%d: %s: %s (%s)", device, what, cu.cublasGetStatusString(rc),
                   cu.cublasGetStatusName(rc));
}

int cudnn_check_err(cudnnStatus_t rc, int device, const char *what, int code, tt_err *err)
{
    if (rc == CUDNN_STATUS_SUCCESS)
        return 0;
    /* cuDNN 9 keeps a message about the last failure on this thread */
    char detail[512] = "";
    cu.cudnnGetLastErrorString(detail, sizeof(detail));
    for (char *p = detail; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    if (detail[0] != '\0')
        return err_set(err, code, "cuda:%d: %s: %s (%s)", device, what, cu.cudnnGetErrorString(rc),
                       detail);
    return err_set(err, code, "cuda:%d: %s: %s", device, what, cu.cudnnGetErrorString(rc));
}

/* While a step is captured, an error fails the capture, not the backend
 * (cuda_graph.c): the step runs again eagerly. The runtime's last error is
 * cleared so that it is not reported by a later call. */
static int capture_error(cuda_impl *c, const char *what, const char *name)
{
    char why[sizeof(c->capture_why)];
    snprintf(why, sizeof(why), "%s: %s", what, name);
    cuda_capture_refuse(c, why);
    cudaGetLastError();
    return -1;
}

/* An operation's error: the first one is kept, and the backend stops. */
int cuda_ok(cuda_impl *c, cudaError_t rc, const char *what)
{
    if (rc == cudaSuccess)
        return 0;
    if (c->capturing)
        return capture_error(c, what, cudaGetErrorName(rc));
    c->failed = true;
    return cuda_check_err(rc, c->device, what, TT_ERR_RUNTIME, &c->err);
}

int cublas_ok(cuda_impl *c, cublasStatus_t rc, const char *what)
{
    if (rc == CUBLAS_STATUS_SUCCESS)
        return 0;
    if (c->capturing)
        return capture_error(c, what, cu.cublasGetStatusName(rc));
    c->failed = true;
    return cublas_check_err(rc, c->device, what, TT_ERR_RUNTIME, &c->err);
}

int cudnn_ok(cuda_impl *c, cudnnStatus_t rc, const char *what)
{
    if (rc == CUDNN_STATUS_SUCCESS)
        return 0;
    if (c->capturing)
        return capture_error(c, what, cu.cudnnGetErrorString(rc));
    c->failed = true;
    return cudnn_check_err(rc, c->device, what, TT_ERR_RUNTIME, &c->err);
}

bool cuda_begin(backend_t *be)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed)
        return false;
    return cuda_ok(c, cudaSetDevice(c->device), "cudaSetDevice") == 0;
}

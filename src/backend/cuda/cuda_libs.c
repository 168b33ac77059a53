/* cuda_libs.c - dlopen of cuBLAS, cuDNN and NCCL (cuda_libs.h says why). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "backend/cuda/cuda_libs.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef TT_CUDA_LIBDIR
#define TT_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

#define STR2(x) #x
#define STR(x) STR2(x)

cuda_libs cu;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static tt_err load_err;
static char versions[128];

/* By soname first (the loader's search path), then in the toolkit directory
 * configure found. */
static void *open_lib(const char *soname)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (h != NULL)
        return h;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", TT_CUDA_LIBDIR, soname);
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* Stores dlsym(h, name) into *slot; -1 with load_err set when missing. */
static int sym(void *h, const char *lib, const char *name, void **slot)
{
    dlerror();
    *slot = dlsym(h, name);
    if (*slot != NULL)
        return 0;
    const char *why = dlerror();
    return err_set(&load_err, TT_ERR_USAGE, "%s: %s not found (%s)", lib, name,
                   why ? why : "no such symbol");
}

static int load_cublas(void)
{
    const char *lib = "libcublas.so." STR(CUBLAS_VER_MAJOR);
    void *h = open_lib(lib);
    if (h == NULL)
        return err_set(&load_err, TT_ERR_USAGE, "cannot load %s (cuBLAS): %s", lib, dlerror());
    int rc = 0;
    rc |= sym(h, lib, "cublasCreate_v2", (void **)&cu.cublasCreate_v2);
    rc |= sym(h, lib, "cublasDestroy_v2", (void **)&cu.cublasDestroy_v2);
    rc |= sym(h, lib, "cublasSetStream_v2", (void **)&cu.cublasSetStream_v2);
    rc |= sym(h, lib, "cublasSetWorkspace_v2", (void **)&cu.cublasSetWorkspace_v2);
    rc |= sym(h, lib, "cublasGemmEx", (void **)&cu.cublasGemmEx);
    rc |= sym(h, lib, "cublasGetStatusString", (void **)&cu.cublasGetStatusString);
    rc |= sym(h, lib, "cublasGetStatusName", (void **)&cu.cublasGetStatusName);
    return rc;
}

static int load_cudnn(void)
{
    const char *lib = "libcudnn.so." STR(CUDNN_MAJOR);
    void *h = open_lib(lib);
    if (h == NULL)
        return err_set(&load_err, TT_ERR_USAGE, "cannot load %s (cuDNN): %s", lib, dlerror());
    int rc = 0;
    rc |= sym(h, lib, "cudnnGetVersion", (void **)&cu.cudnnGetVersion);
    rc |= sym(h, lib, "cudnnCreate", (void **)&cu.cudnnCreate);
    rc |= sym(h, lib, "cudnnDestroy", (void **)&cu.cudnnDestroy);
    rc |= sym(h, lib, "cudnnSetStream", (void **)&cu.cudnnSetStream);
    rc |= sym(h, lib, "cudnnGetErrorString", (void **)&cu.cudnnGetErrorString);
    rc |= sym(h, lib, "cudnnGetLastErrorString", (void **)&cu.cudnnGetLastErrorString);
    rc |= sym(h, lib, "cudnnCreateTensorDescriptor", (void **)&cu.cudnnCreateTensorDescriptor);
    rc |= sym(h, lib, "cudnnDestroyTensorDescriptor", (void **)&cu.cudnnDestroyTensorDescriptor);
    rc |= sym(h, lib, "cudnnSetTensor4dDescriptor", (void **)&cu.cudnnSetTensor4dDescriptor);
    rc |= sym(h, lib, "cudnnCreateFilterDescriptor", (void **)&cu.cudnnCreateFilterDescriptor);
    rc |= sym(h, lib, "cudnnDestroyFilterDescriptor", (void **)&cu.cudnnDestroyFilterDescriptor);
    rc |= sym(h, lib, "cudnnSetFilter4dDescriptor", (void **)&cu.cudnnSetFilter4dDescriptor);
    rc |= sym(h, lib, "cudnnCreateConvolutionDescriptor",
              (void **)&cu.cudnnCreateConvolutionDescriptor);
    rc |= sym(h, lib, "cudnnDestroyConvolutionDescriptor",
              (void **)&cu.cudnnDestroyConvolutionDescriptor);
    rc |= sym(h, lib, "cudnnSetConvolution2dDescriptor",
              (void **)&cu.cudnnSetConvolution2dDescriptor);
    rc |= sym(h, lib, "cudnnSetConvolutionMathType", (void **)&cu.cudnnSetConvolutionMathType);
    rc |= sym(h, lib, "cudnnFindConvolutionForwardAlgorithmEx",
              (void **)&cu.cudnnFindConvolutionForwardAlgorithmEx);
    rc |= sym(h, lib, "cudnnFindConvolutionBackwardDataAlgorithmEx",
              (void **)&cu.cudnnFindConvolutionBackwardDataAlgorithmEx);
    rc |= sym(h, lib, "cudnnFindConvolutionBackwardFilterAlgorithmEx",
              (void **)&cu.cudnnFindConvolutionBackwardFilterAlgorithmEx);
    rc |= sym(h, lib, "cudnnGetConvolutionForwardAlgorithm_v7",
              (void **)&cu.cudnnGetConvolutionForwardAlgorithm_v7);
    rc |= sym(h, lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7",
              (void **)&cu.cudnnGetConvolutionBackwardDataAlgorithm_v7);
    rc |= sym(h, lib, "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
              (void **)&cu.cudnnGetConvolutionBackwardFilterAlgorithm_v7);
    rc |= sym(h, lib, "cudnnGetConvolutionForwardWorkspaceSize",
              (void **)&cu.cudnnGetConvolutionForwardWorkspaceSize);
    rc |= sym(h, lib, "cudnnGetConvolutionBackwardDataWorkspaceSize",
              (void **)&cu.cudnnGetConvolutionBackwardDataWorkspaceSize);
    rc |= sym(h, lib, "cudnnGetConvolutionBackwardFilterWorkspaceSize",
              (void **)&cu.cudnnGetConvolutionBackwardFilterWorkspaceSize);
    rc |= sym(h, lib, "cudnnConvolutionForward", (void **)&cu.cudnnConvolutionForward);
    rc |= sym(h, lib, "cudnnConvolutionBackwardData", (void **)&cu.cudnnConvolutionBackwardData);
    rc |= sym(h, lib, "cudnnConvolutionBackwardFilter",
              (void **)&cu.cudnnConvolutionBackwardFilter);
    rc |= sym(h, lib, "cudnnBatchNormalizationForwardTraining",
              (void **)&cu.cudnnBatchNormalizationForwardTraining);
    rc |= sym(h, lib, "cudnnBatchNormalizationForwardInference",
              (void **)&cu.cudnnBatchNormalizationForwardInference);
    rc |= sym(h, lib, "cudnnBatchNormalizationBackward",
              (void **)&cu.cudnnBatchNormalizationBackward);
    rc |= sym(h, lib, "cudnnBackendCreateDescriptor", (void **)&cu.cudnnBackendCreateDescriptor);
    rc |= sym(h, lib, "cudnnBackendDestroyDescriptor",
              (void **)&cu.cudnnBackendDestroyDescriptor);
    rc |= sym(h, lib, "cudnnBackendSetAttribute", (void **)&cu.cudnnBackendSetAttribute);
    rc |= sym(h, lib, "cudnnBackendGetAttribute", (void **)&cu.cudnnBackendGetAttribute);
    rc |= sym(h, lib, "cudnnBackendFinalize", (void **)&cu.cudnnBackendFinalize);
    rc |= sym(h, lib, "cudnnBackendExecute", (void **)&cu.cudnnBackendExecute);
    if (rc != 0)
        return -1;
    /* the sub-libraries must be the major version the headers describe */
    size_t v = cu.cudnnGetVersion();
    if (v / 10000 != CUDNN_MAJOR)
        return err_set(&load_err, TT_ERR_USAGE, "%s is cuDNN %zu.%zu, towertrain was built "
                       "for cuDNN %d", lib, v / 10000, v / 100 % 100, CUDNN_MAJOR);
    return 0;
}

static int load_nccl(void)
{
    const char *lib = "libnccl.so." STR(NCCL_MAJOR);
    void *h = open_lib(lib);
    if (h == NULL)
        return err_set(&load_err, TT_ERR_USAGE, "cannot load %s (NCCL): %s", lib, dlerror());
    int rc = 0;
    rc |= sym(h, lib, "ncclGetVersion", (void **)&cu.ncclGetVersion);
    rc |= sym(h, lib, "ncclGetUniqueId", (void **)&cu.ncclGetUniqueId);
    rc |= sym(h, lib, "ncclCommInitAll", (void **)&cu.ncclCommInitAll);
    rc |= sym(h, lib, "ncclCommInitRank", (void **)&cu.ncclCommInitRank);
    rc |= sym(h, lib, "ncclCommDestroy", (void **)&cu.ncclCommDestroy);
    rc |= sym(h, lib, "ncclCommAbort", (void **)&cu.ncclCommAbort);
    rc |= sym(h, lib, "ncclCommGetAsyncError", (void **)&cu.ncclCommGetAsyncError);
    rc |= sym(h, lib, "ncclGetErrorString", (void **)&cu.ncclGetErrorString);
    rc |= sym(h, lib, "ncclGetLastError", (void **)&cu.ncclGetLastError);
    rc |= sym(h, lib, "ncclAllReduce", (void **)&cu.ncclAllReduce);
    rc |= sym(h, lib, "ncclBroadcast", (void **)&cu.ncclBroadcast);
    rc |= sym(h, lib, "ncclGroupStart", (void **)&cu.ncclGroupStart);
    rc |= sym(h, lib, "ncclGroupEnd", (void **)&cu.ncclGroupEnd);
    return rc;
}

static void load_all(void)
{
    if (load_cublas() != 0 || load_cudnn() != 0 || load_nccl() != 0)
        return;
    size_t dv = cu.cudnnGetVersion();
    int nv = 0;
    cu.ncclGetVersion(&nv);
    snprintf(versions, sizeof(versions), "cuDNN %zu.%zu.%zu, NCCL %d.%d.%d", dv / 10000,
             dv / 100 % 100, dv % 100, nv / 10000, nv / 100 % 100, nv % 100);
}

int cuda_libs_load(tt_err *err)
{
    pthread_once(&once, load_all);
    if (load_err.code == TT_OK)
        return 0;
    return err_set(err, load_err.code, "%s", load_err.msg);
}

const char *cuda_libs_versions(void)
{
    return versions;
}

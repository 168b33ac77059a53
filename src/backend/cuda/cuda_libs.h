/* cuda_libs.h - cuBLAS, cuDNN and NCCL, loaded when first needed.
 *
 * Linking them would make every run of towertrain load about 1 GB of
 * libraries (225 MB resident, a tenth of a second) before main, CPU jobs and
 * `towertrain validate` included, and refuse to start where they are not
 * installed. So the binary links only the CUDA runtime (statically, as
 * before; it loads the driver itself when a GPU is asked for), and opens
 * cuBLAS, cuDNN and NCCL with dlopen the first time a GPU tower or an NCCL
 * communicator is made: by soname (LD_LIBRARY_PATH, ld.so.conf), then in
 * the toolkit's library directory that configure found. Each function is
 * called through this table; every pointer has the type of the library's
 * own declaration (from its header), so calls are checked as usual.
 */
#ifndef TT_CUDA_LIBS_H
#define TT_CUDA_LIBS_H

#include <cublas_v2.h>
#include <cudnn.h>
#include <nccl.h>

#include "util/err.h"

typedef struct {
    /* cuBLAS (the _v2 names are the exported symbols behind cublas_v2.h's macros) */
    __typeof__(&cublasCreate_v2) cublasCreate_v2;
    __typeof__(&cublasDestroy_v2) cublasDestroy_v2;
    __typeof__(&cublasSetStream_v2) cublasSetStream_v2;
    __typeof__(&cublasSetWorkspace_v2) cublasSetWorkspace_v2;
    __typeof__(&cublasGemmEx) cublasGemmEx;
    __typeof__(&cublasGetStatusString) cublasGetStatusString;
    __typeof__(&cublasGetStatusName) cublasGetStatusName;

    /* cuDNN */
    __typeof__(&cudnnGetVersion) cudnnGetVersion;
    __typeof__(&cudnnCreate) cudnnCreate;
    __typeof__(&cudnnDestroy) cudnnDestroy;
    __typeof__(&cudnnSetStream) cudnnSetStream;
    __typeof__(&cudnnGetErrorString) cudnnGetErrorString;
    __typeof__(&cudnnGetLastErrorString) cudnnGetLastErrorString;
    __typeof__(&cudnnCreateTensorDescriptor) cudnnCreateTensorDescriptor;
    __typeof__(&cudnnDestroyTensorDescriptor) cudnnDestroyTensorDescriptor;
    __typeof__(&cudnnSetTensor4dDescriptor) cudnnSetTensor4dDescriptor;
    __typeof__(&cudnnCreateFilterDescriptor) cudnnCreateFilterDescriptor;
    __typeof__(&cudnnDestroyFilterDescriptor) cudnnDestroyFilterDescriptor;
    __typeof__(&cudnnSetFilter4dDescriptor) cudnnSetFilter4dDescriptor;
    __typeof__(&cudnnCreateConvolutionDescriptor) cudnnCreateConvolutionDescriptor;
    __typeof__(&cudnnDestroyConvolutionDescriptor) cudnnDestroyConvolutionDescriptor;
    __typeof__(&cudnnSetConvolution2dDescriptor) cudnnSetConvolution2dDescriptor;
    __typeof__(&cudnnSetConvolutionMathType) cudnnSetConvolutionMathType;
    __typeof__(&cudnnFindConvolutionForwardAlgorithmEx) cudnnFindConvolutionForwardAlgorithmEx;
    __typeof__(&cudnnFindConvolutionBackwardDataAlgorithmEx)
        cudnnFindConvolutionBackwardDataAlgorithmEx;
    __typeof__(&cudnnFindConvolutionBackwardFilterAlgorithmEx)
        cudnnFindConvolutionBackwardFilterAlgorithmEx;
    __typeof__(&cudnnGetConvolutionForwardAlgorithm_v7) cudnnGetConvolutionForwardAlgorithm_v7;
    __typeof__(&cudnnGetConvolutionBackwardDataAlgorithm_v7)
        cudnnGetConvolutionBackwardDataAlgorithm_v7;
    __typeof__(&cudnnGetConvolutionBackwardFilterAlgorithm_v7)
        cudnnGetConvolutionBackwardFilterAlgorithm_v7;
    __typeof__(&cudnnGetConvolutionForwardWorkspaceSize) cudnnGetConvolutionForwardWorkspaceSize;
    __typeof__(&cudnnGetConvolutionBackwardDataWorkspaceSize)
        cudnnGetConvolutionBackwardDataWorkspaceSize;
    __typeof__(&cudnnGetConvolutionBackwardFilterWorkspaceSize)
        cudnnGetConvolutionBackwardFilterWorkspaceSize;
    __typeof__(&cudnnConvolutionForward) cudnnConvolutionForward;
    __typeof__(&cudnnConvolutionBackwardData) cudnnConvolutionBackwardData;
    __typeof__(&cudnnConvolutionBackwardFilter) cudnnConvolutionBackwardFilter;
    __typeof__(&cudnnBatchNormalizationForwardTraining) cudnnBatchNormalizationForwardTraining;
    __typeof__(&cudnnBatchNormalizationForwardInference) cudnnBatchNormalizationForwardInference;
    __typeof__(&cudnnBatchNormalizationBackward) cudnnBatchNormalizationBackward;
    /* the graph (backend) API: cuda_conv_graph.c */
    __typeof__(&cudnnBackendCreateDescriptor) cudnnBackendCreateDescriptor;
    __typeof__(&cudnnBackendDestroyDescriptor) cudnnBackendDestroyDescriptor;
    __typeof__(&cudnnBackendSetAttribute) cudnnBackendSetAttribute;
    __typeof__(&cudnnBackendGetAttribute) cudnnBackendGetAttribute;
    __typeof__(&cudnnBackendFinalize) cudnnBackendFinalize;
    __typeof__(&cudnnBackendExecute) cudnnBackendExecute;

    /* NCCL */
    __typeof__(&ncclGetVersion) ncclGetVersion;
    __typeof__(&ncclGetUniqueId) ncclGetUniqueId;
    __typeof__(&ncclCommInitAll) ncclCommInitAll;
    __typeof__(&ncclCommInitRank) ncclCommInitRank;
    __typeof__(&ncclCommDestroy) ncclCommDestroy;
    __typeof__(&ncclCommAbort) ncclCommAbort;
    __typeof__(&ncclCommGetAsyncError) ncclCommGetAsyncError;
    __typeof__(&ncclGetErrorString) ncclGetErrorString;
    __typeof__(&ncclGetLastError) ncclGetLastError;
    __typeof__(&ncclAllReduce) ncclAllReduce;
    __typeof__(&ncclBroadcast) ncclBroadcast;
    __typeof__(&ncclGroupStart) ncclGroupStart;
    __typeof__(&ncclGroupEnd) ncclGroupEnd;
} cuda_libs;

/* The table; filled by cuda_libs_load. */
extern cuda_libs cu;

/* Opens cuBLAS, cuDNN and NCCL once (thread-safe); later calls return the
 * first outcome. TT_ERR_USAGE naming the library and dlerror()'s reason
 * when one cannot be loaded. */
int cuda_libs_load(tt_err *err);

/* The versions loaded, for the tower table: "cuBLAS 13.1.0, cuDNN 9.19.0,
 * NCCL 2.28.9" (after a successful load). */
const char *cuda_libs_versions(void);

#endif

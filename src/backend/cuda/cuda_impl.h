/* cuda_impl.h - private to the CUDA backend: a tower's state, the error
 * bookkeeping, and the operations by file (cuda_backend.c: memory, dense and
 * element-wise; cuda_conv.c; cuda_batchnorm.c; cuda_bn_nhwc.c; kernels in
 * cuda_kernels.cu and cuda_bn_nhwc.cu). */
#ifndef TT_CUDA_IMPL_H
#define TT_CUDA_IMPL_H

#include <stdbool.h>
#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backend/backend.h"
#include "backend/cuda/algo_cache.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_conv_graph.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_libs.h"
#include "backend/mem_pool.h"
#include "backend/precision.h"
#include "backend/weight_copies.h"

/* batchnorm: the epsilon of each layer's forward, found again by its
 * save_mean buffer in backward (cuDNN wants the same one in both) */
typedef struct {
    const float *save_mean;
    double eps;
} bn_eps_entry;

typedef struct {
    int device;
    cuda_options opt;
    prec_t prec;                   /* what dense and conv2d multiply in (precision.h) */
    void *copies;                  /* their copies (precision.h), from the pool */
    size_t copies_bytes;
    weight_copies weights;         /* the towers' weight copies, once per step (its mirrors
                                    * from the pool) */
    cudaStream_t stream;
    cublasHandle_t cublas;
    cudnnHandle_t cudnn;
    mem_pool *pool;
    void *cublas_ws;               /* cuBLAS workspace, from the pool */
    /* descriptors, set per call (setting them allocates nothing) */
    cudnnTensorDescriptor_t x_desc, y_desc, bn_desc;
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    algo_cache *algos;
    struct cg_table *graph_plans;  /* the graph API's chosen plans (cuda_conv_graph.c), or NULL */
    size_t conv_ws_budget;         /* the largest conv workspace reported to the model */
    bn_eps_entry *bn_eps;
    int n_bn_eps, cap_bn_eps;
    /* the NHWC batchnorm's coefficients and partial sums, and the conv
     * bias gradient's and the sum of squares' partials (cuda_bn_nhwc.h,
     * sumsq_plan.h), TT_BN_SCRATCH_FLOATS from the pool; each call uses
     * it only between its own launches, and the calls follow each other
     * on the one stream, so they share it */
    float *bn_scratch;
    /* two results each, device and pinned: [XENT_LOSS] the loss kernel's,
     * read by loss_read after the event loss_done, and [XENT_CHECK] the
     * host checks' (all_finite): apart, so that a check queued
     * before the host reads the loss never overwrites it */
    tt_xent_result *xent_dev;
    tt_xent_result *xent_host;
    /* sumsq and sumsq_each: n_norms results (doubles) and the list of
     * their ranges (sumsq_plan.h), each on the device and pinned on the
     * host, grown at first use (cudaMalloc / cudaMallocHost: a few KB,
     * outside the pool, which is frozen by then); the partials go
     * through bn_scratch */
    double *norms_dev, *norms_host;
    tt_sumsq_range *ranges_dev, *ranges_host;
    int n_norms;
    backend_event *loss_done;
    /* a step being captured on stream (cuda_graph.c): while capturing, an
     * operation's error fails the capture (capture_why: the first), not
     * the backend */
    bool capturing, capture_failed;
    /* backend.h's blocked_bf16_grads, for the copies' places
     * (prec_conv_copies_of) */
    bool grads16;
    char capture_why[200];
    bool failed;                   /* an error was recorded: later operations are skipped */
    tt_err err;
    char alloc_error[sizeof(((tt_err *)0)->msg)];
} cuda_impl;

enum { XENT_LOSS, XENT_CHECK, XENT_RESULTS };

static inline cuda_impl *cuda_of(backend_t *be)
{
    return (cuda_impl *)be->impl;
}

/* Error bookkeeping: each returns 0 on success, else records the first error
 * (TT_ERR_RUNTIME, "cuda:D: what: library error string") and returns -1. */
int cuda_ok(cuda_impl *c, cudaError_t rc, const char *what);
int cublas_ok(cuda_impl *c, cublasStatus_t rc, const char *what);
int cudnn_ok(cuda_impl *c, cudnnStatus_t rc, const char *what);

/* The same into a tt_err, for code that is not an operation (setup). */
int cuda_check_err(cudaError_t rc, int device, const char *what, int code, tt_err *err);
int cudnn_check_err(cudnnStatus_t rc, int device, const char *what, int code, tt_err *err);
int cublas_check_err(cublasStatus_t rc, int device, const char *what, int code, tt_err *err);

/* The start of every operation: binds the device; false when the backend has
 * failed before (the operation is skipped). */
bool cuda_begin(backend_t *be);

/* The host's wait for the compute stream (backend_device_wait: polling,
 * with the communicator's error); a failed wait is the backend's error. */
int cuda_wait(backend_t *be, const char *what);
/* Records a failed host wait's error e as the backend's (its first); -1. */
int cuda_wait_failed(cuda_impl *c, const tt_err *e);

/* The scratch region of the 16-bit copies, at least `bytes` long: grown
 * while the pool is not frozen (setup; work queued on the tower's one
 * stream before a regrowth is done before anything reuses the old block),
 * after that an error (the setup sized it too small). NULL after recording
 * an error. */
void *cuda_copies(cuda_impl *c, size_t bytes);

/* The copy of the tower weight w[rows, cols * hw] this step
 * (weight_copies.h; krsc: a filter [rows = K, cols = C, hw = R*S] as KRSC,
 * bf16 or, for a float32 NHWC tower, float32; else 16-bit as stored),
 * converted now at its first use in the step: 0 with *copy, or *copy NULL
 * for weights of no tower's step (the caller converts them itself); -1
 * after an error. */
int cuda_weight_copy(cuda_impl *c, const float *w, int rows, int cols, int hw, bool krsc,
                     const void **copy);
/* w[rows, cols * hw] into dst now, as cuda_weight_copy's copy is made
 * (krsc: KRSC in the convolutions' type); 0, or -1 after an error. */
int cuda_weight_convert(cuda_impl *c, const float *w, int rows, int cols, int hw, bool krsc,
                        void *dst);

/* count float32 values to the backend's 16-bit type, and back (exact). */
int cuda_to_half(cuda_impl *c, size_t count, const float *src, void *dst);
int cuda_from_half(cuda_impl *c, size_t count, const void *src, float *dst);

/* The cuBLAS / cuDNN element type of the 16-bit copies (or of float32). */
cudaDataType_t cuda_blas_type(prec_t p);
cudnnDataType_t cuda_dnn_type(prec_t p);

/* While capturing (cuda_graph.c), fails the capture with `what` (the first
 * reason is kept) and returns true: the caller skips its work (the step's
 * eager run does it again); false when not capturing. Inline, so that the
 * checks and copies ask it without calling into cuda_graph.c. */
static inline bool cuda_capture_refuse(cuda_impl *c, const char *what)
{
    if (!c->capturing)
        return false;
    if (!c->capture_failed) {
        c->capture_failed = true;
        snprintf(c->capture_why, sizeof(c->capture_why), "%s", what);
    }
    return true;
}
/* the *_vars updates (backend.h) */
void cuda_install_vars_ops(backend_t *be);

/* cuda_conv.c */
size_t cuda_conv_workspace(backend_t *be, const window_desc *d);
void cuda_conv_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                       const float *b, bool relu, float *y, void *ws);
void cuda_conv_backward(backend_t *be, const window_desc *d, const float *x, const float *w,
                        const float *y, bool relu, float *dy, float *dx, float *dw, float *db,
                        void *ws);

/* cuda_conv_graph.c: the graph API's plan of a pass (chosen when first met:
 * timed on p and ws against the legacy API's legacy_ms unless deterministic,
 * one log line when the graph API has none), or NULL when the legacy API
 * runs it; and running it (-1: it failed, logged, the legacy API runs it
 * from now on) */
const algo_choice *cuda_conv_graph_plan(cuda_impl *c, conv_pass pass, const window_desc *d,
                                        cg_layout layout, const cg_ptrs *p, void *ws,
                                        size_t limit, float legacy_ms);
int cuda_conv_graph_run(cuda_impl *c, conv_pass pass, const window_desc *d, cg_layout layout,
                        const algo_choice *plan, const cg_ptrs *p, void *ws);

/* cuda_batchnorm.c */
void cuda_batchnorm_forward(backend_t *be, int n, int c, int hw, const float *x,
                            const float *gamma, const float *beta, float *running_mean,
                            float *running_var, float momentum, float eps, bool training,
                            bool relu, float *y, float *save_mean, float *save_invstd);
void cuda_batchnorm_backward(backend_t *be, int n, int c, int hw, const float *x,
                             const float *gamma, const float *save_mean,
                             const float *save_invstd, const float *y, bool relu, float *dy,
                             float *dx, float *dgamma, float *dbeta);

/* cuda_bn_nhwc.c: batchnorm over NHWC activations with our kernels, and
 * fused with the residual add (backend.h); setup reserves their scratch */
int cuda_bn_nhwc_setup(cuda_impl *c, tt_err *err);
/* The conv bias gradient: db[ch] = the sum of channel ch of dy [n, ch,
 * inner] (NHWC [rows, ch]: inner 1; NCHW: inner = oh * ow; float32, or
 * bf16 with g16), in an order fixed by the shape alone (cuda_bn_nhwc.h:
 * tt_k_channel_sum), through the batchnorm's scratch. 0, or -1 after
 * recording an error. */
int cuda_channel_sum(cuda_impl *c, bool g16, int n, int ch, int inner, const void *dy,
                     float *db);
void cuda_batchnorm_forward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                    const float *gamma, const float *beta, float *running_mean,
                                    float *running_var, float momentum, float eps, bool training,
                                    bool relu, float *y, float *save_mean, float *save_invstd);
void cuda_batchnorm_backward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                     const float *gamma, const float *save_mean,
                                     const float *save_invstd, const float *y, bool relu,
                                     float *dy, float *dx, float *dgamma, float *dbeta);
void cuda_batchnorm_add_forward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                        const float *gamma, const float *beta,
                                        float *running_mean, float *running_var, float momentum,
                                        float eps, bool training, const float *r, bool relu,
                                        float *y, float *save_mean, float *save_invstd);
void cuda_batchnorm_add_backward_blocked(backend_t *be, int n, int c, int hw, const float *x,
                                         const float *gamma, const float *save_mean,
                                         const float *save_invstd, const float *y, bool relu,
                                         float *dy, float *dx, float *dgamma, float *dbeta,
                                         float *dr, bool dr_accumulate);

/* cuda_nhwc.c: the blocked layout's flags (precision.c's policy) and its
 * element-wise and global average pooling operations; call after every
 * other operation is installed (it reads the batchnorm ones). */
void cuda_install_blocked(backend_t *be, prec_t prec, bool tf32);

#endif

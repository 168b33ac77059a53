/* cuda_copies.c - what the CUDA backend's files share below the backend
 * itself: the host's wait for the stream (and its error), and the 16-bit
 * copies of mixed precision (and of float32 NHWC convolutions) with their
 * conversions and element types (cuda_impl.h). cuda_backend.c, cuda_conv.c
 * and the other operation files call these; these call none of theirs. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_nhwc_kernels.h"

/* A failed wait of the host: the backend's error (its first). */
int cuda_wait_failed(cuda_impl *c, const tt_err *e)
{
    if (!c->failed) {
        c->failed = true;
        err_set(&c->err, e->code, "cuda:%d: %s", c->device, e->msg);
    }
    return -1;
}

/* The host's wait for the stream: backend_device_wait polls cudaStreamQuery
 * with the communicator's asynchronous error (never cudaStreamSynchronize,
 * which a stalled NCCL kernel upstream of the stream would never let
 * return); its error is the backend's. */
int cuda_wait(backend_t *be, const char *what)
{
    tt_err e = {0};
    char why[96];
    snprintf(why, sizeof(why), "the host waits for the device (%s)", what);
    if (cuda_capture_refuse(cuda_of(be), why))
        return -1; /* a captured step never answers the host */
    return backend_device_wait(be, what, &e) == 0 ? 0 : cuda_wait_failed(cuda_of(be), &e);
}

/* ---- the 16-bit copies of mixed precision (precision.h) ---- */

void *cuda_copies(cuda_impl *c, size_t bytes)
{
    if (bytes <= c->copies_bytes && c->copies != NULL)
        return c->copies;
    if (mem_pool_frozen(c->pool)) {
        c->failed = true;
        err_set(&c->err, TT_ERR_RUNTIME,
                "cuda:%d: the %s copies of a layer need %zu bytes but setup reserved %zu",
                c->device, prec_name(c->prec), bytes, c->copies_bytes);
        return NULL;
    }
    /* the old block's pending users run on this stream, before any new one */
    mem_pool_free(c->pool, c->copies);
    c->copies = NULL;
    c->copies_bytes = 0;
    tt_err err = {0};
    c->copies = mem_pool_alloc(c->pool, bytes, &err);
    if (c->copies == NULL) {
        snprintf(c->alloc_error, sizeof(c->alloc_error), "%s", err.msg);
        c->failed = true;
        err_set(&c->err, TT_ERR_USAGE, "cuda:%d: %s", c->device, err.msg);
        return NULL;
    }
    c->copies_bytes = bytes;
    return c->copies;
}

/* ---- the towers' weight copies, once per step (weight_copies.h) ---- */

int backend_cuda_weights_add(backend_t *be, const float *params, size_t count, tt_err *err)
{
    cuda_impl *c = cuda_of(be);
    if (!prec_weight_copies(c->prec, be->blocked_nhwc) || count == 0)
        return 0;
    tt_err pool_err = {0};
    void *mirror = mem_pool_alloc(c->pool, count * prec_elem_bytes(c->prec), &pool_err);
    if (mirror == NULL) {
        snprintf(c->alloc_error, sizeof(c->alloc_error), "%s", pool_err.msg);
        return err_set(err, TT_ERR_USAGE, "cuda:%d: %s", c->device, pool_err.msg);
    }
    /* a second add replaces the first (its users are earlier on the stream) */
    mem_pool_free(c->pool, weight_copies_remove(&c->weights, params));
    if (weight_copies_add(&c->weights, params, count, mirror) != 0) {
        mem_pool_free(c->pool, mirror);
        return err_set(err, TT_ERR_RUNTIME, "cuda:%d: out of host memory", c->device);
    }
    return 0;
}

void backend_cuda_weights_remove(backend_t *be, const float *params)
{
    cuda_impl *c = cuda_of(be);
    mem_pool_free(c->pool, weight_copies_remove(&c->weights, params));
}

void backend_cuda_weights_step(backend_t *be, const float *params, bool begin)
{
    weight_copies_step(&cuda_of(be)->weights, params, begin);
}

int cuda_weight_convert(cuda_impl *c, const float *w, int rows, int cols, int hw, bool krsc,
                        void *dst)
{
    bool bf16 = c->prec == PREC_BF16; /* else a float32 NHWC conv's */
    if (krsc)
        return cuda_ok(c, tt_k_nchw_to_nhwc(c->stream, bf16, rows, cols, hw, w, dst),
                       "conv filter to KRSC kernel");
    return cuda_to_half(c, (size_t)rows * (size_t)cols * (size_t)hw, w, dst);
}

int cuda_weight_copy(cuda_impl *c, const float *w, int rows, int cols, int hw, bool krsc,
                     const void **copy)
{
    void *mirror = NULL;
    size_t at = 0, count = (size_t)rows * (size_t)cols * (size_t)hw;
    *copy = NULL;
    wc_answer a = weight_copies_find(&c->weights, w, count, krsc ? WC_KRSC : WC_AS_STORED,
                                     &mirror, &at);
    if (a == WC_NONE)
        return 0;
    char *dst = (char *)mirror + at * prec_elem_bytes(c->prec);
    if (a == WC_CONVERT && cuda_weight_convert(c, w, rows, cols, hw, krsc, dst) != 0)
        return -1;
    *copy = dst;
    return 0;
}

cudaDataType_t cuda_blas_type(prec_t p)
{
    return p == PREC_BF16 ? CUDA_R_16BF : p == PREC_FP16 ? CUDA_R_16F : CUDA_R_32F;
}

cudnnDataType_t cuda_dnn_type(prec_t p)
{
    return p == PREC_BF16 ? CUDNN_DATA_BFLOAT16 : p == PREC_FP16 ? CUDNN_DATA_HALF
                                                                   : CUDNN_DATA_FLOAT;
}

int cuda_to_half(cuda_impl *c, size_t count, const float *src, void *dst)
{
    return cuda_ok(c, tt_k_to_half(c->stream, count, c->prec == PREC_BF16, src, dst),
                   "float32 to 16-bit kernel");
}

int cuda_from_half(cuda_impl *c, size_t count, const void *src, float *dst)
{
    return cuda_ok(c, tt_k_from_half(c->stream, count, c->prec == PREC_BF16, src, dst),
                   "16-bit to float32 kernel");
}

/* cuda_batchnorm.c - batchnorm through cuDNN's spatial batch normalization:
 * per channel over N x H x W (N for flat inputs, as [n, c, 1, 1]), as
 * torch.nn.BatchNorm2d, which itself runs on these cuDNN calls: training
 * normalises with the batch's biased variance, updates the running mean and
 * the running variance (unbiased) with momentum as cuDNN's
 * exponentialAverageFactor, and saves mean and 1/sqrt(var + eps) for
 * backward; inference uses the running statistics.
 *
 * The fused relu is the backend's relu kernel after cuDNN (forward) and the
 * relu mask of dy before it (backward), as backend.h specifies. When no dx
 * is wanted (batchnorm on the data), cuDNN would still write one: a kernel
 * computes the parameter gradients alone.
 */
#include "backend/cuda/cuda_impl.h"

#include <stdlib.h>

/* The epsilon a layer's forward used, found again in backward by the
 * layer's save_mean buffer (backend.h's backward has no epsilon). */
static void remember_eps(cuda_impl *c, const float *save_mean, double eps)
{
    for (int i = 0; i < c->n_bn_eps; i++)
        if (c->bn_eps[i].save_mean == save_mean) {
            c->bn_eps[i].eps = eps;
            return;
        }
    if (c->n_bn_eps == c->cap_bn_eps) {
        int cap = c->cap_bn_eps ? 2 * c->cap_bn_eps : 16;
        bn_eps_entry *e = realloc(c->bn_eps, (size_t)cap * sizeof(*e));
        if (e == NULL)
            return; /* backward then uses PyTorch's default */
        c->bn_eps = e;
        c->cap_bn_eps = cap;
    }
    c->bn_eps[c->n_bn_eps++] = (bn_eps_entry){save_mean, eps};
}

static double recall_eps(const cuda_impl *c, const float *save_mean)
{
    for (int i = 0; i < c->n_bn_eps; i++)
        if (c->bn_eps[i].save_mean == save_mean)
            return c->bn_eps[i].eps;
    return 1e-5;
}

static int set_bn_descs(cuda_impl *c, int n, int ch, int hw)
{
    /* [n, c, hw, 1]: spatial normalisation needs only the plane's size */
    cudnnStatus_t rc = cu.cudnnSetTensor4dDescriptor(c->x_desc, CUDNN_TENSOR_NCHW,
                                                     CUDNN_DATA_FLOAT, n, ch, hw, 1);
    if (cudnn_ok(c, rc, "cudnnSetTensor4dDescriptor (batchnorm x)") != 0)
        return -1;
    rc = cu.cudnnSetTensor4dDescriptor(c->bn_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, ch, 1,
                                       1);
    return cudnn_ok(c, rc, "cudnnSetTensor4dDescriptor (batchnorm parameters)");
}

void cuda_batchnorm_forward(backend_t *be, int n, int c, int hw, const float *x, const float *gamma,
                            const float *beta, float *running_mean, float *running_var,
                            float momentum, float eps, bool training, bool relu, float *y,
                            float *save_mean, float *save_invstd)
{
    cuda_impl *bn = cuda_of(be);
    if (n <= 0 || !cuda_begin(be) || set_bn_descs(bn, n, c, hw) != 0)
        return;
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t rc;
    if (training) {
        remember_eps(bn, save_mean, eps);
        rc = cu.cudnnBatchNormalizationForwardTraining(
            bn->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, bn->x_desc, x, bn->x_desc, y,
            bn->bn_desc, gamma, beta, (double)momentum, running_mean, running_var, (double)eps,
            save_mean, save_invstd);
        if (cudnn_ok(bn, rc, "cudnnBatchNormalizationForwardTraining") != 0)
            return;
    } else {
        rc = cu.cudnnBatchNormalizationForwardInference(
            bn->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, bn->x_desc, x, bn->x_desc, y,
            bn->bn_desc, gamma, beta, running_mean, running_var, (double)eps);
        if (cudnn_ok(bn, rc, "cudnnBatchNormalizationForwardInference") != 0)
            return;
    }
    if (relu)
        cuda_ok(bn, tt_k_relu_forward(bn->stream, (size_t)n * c * hw, y, y), "relu kernel");
}

void cuda_batchnorm_backward(backend_t *be, int n, int c, int hw, const float *x,
                             const float *gamma, const float *save_mean, const float *save_invstd,
                             const float *y, bool relu, float *dy, float *dx, float *dgamma,
                             float *dbeta)
{
    cuda_impl *bn = cuda_of(be);
    if (n <= 0 || !cuda_begin(be))
        return;
    if (relu && cuda_ok(bn, tt_k_relu_backward(bn->stream, (size_t)n * c * hw, y, dy, dy),
                        "relu mask kernel") != 0)
        return;
    if (dx == NULL || dgamma == NULL || dbeta == NULL) {
        if (dx == NULL) {
            cuda_ok(bn,
                    tt_k_bn_param_grads(bn->stream, n, c, hw, x, dy, save_mean, save_invstd, dgamma,
                                        dbeta),
                    "batchnorm parameter gradient kernel");
            return;
        }
        /* dx without the parameter gradients never happens (they are
         * trainable); cuDNN would need somewhere to write them */
        bn->failed = true;
        err_set(&bn->err, TT_ERR_RUNTIME,
                "cuda:%d: batchnorm backward without dgamma/dbeta is "
                "not supported",
                bn->device);
        return;
    }
    if (set_bn_descs(bn, n, c, hw) != 0)
        return;
    const float one = 1.0f, zero = 0.0f;
    cudnn_ok(bn,
             cu.cudnnBatchNormalizationBackward(bn->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero,
                                                &one, &zero, bn->x_desc, x, bn->x_desc, dy,
                                                bn->x_desc, dx, bn->bn_desc, gamma, dgamma, dbeta,
                                                recall_eps(bn, save_mean), save_mean, save_invstd),
             "cudnnBatchNormalizationBackward");
}

/* cuda_nhwc.c - the CUDA backend's blocked layout (backend.h): which layout
 * its activations keep (precision.c's prec_layout_of, the policy CPU and
 * sim share: bf16 -> bf16 NHWC), and the element-wise and global average
 * pooling operations over it (cuda_nhwc_kernels.cu).
 *
 * The layout is turned on only when every operation that reads or writes
 * a blocked activation can: the ones here (and the pools, whose blocked
 * x takes the NHWC kernels), conv2d (cuda_conv.c's NHWC path, bf16 and
 * float32), and the batchnorm ones (batchnorm_forward_blocked /
 * batchnorm_backward_blocked, written apart in cuda_bn_nhwc.*; NULL until
 * then, and the layout off). The bf16 activations' gradients are bf16 too
 * unless TT_BF16_GRADS=0 (precision.h's rule). TT_CUDA_LAYOUT=nchw keeps
 * today's proven NCHW float32 path (the fallback while no GPU has run this
 * code; towertrain(1)); =nhwc gives fp32 / tf32 towers float32 NHWC end to
 * end (precision.c's prec_device_layout): element-wise, pooling, batchnorm
 * and conv2d; its gradients are float32 NHWC. sim runs both layouts in
 * make check (sim_blocked.c).
 */

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nhwc_kernels.h"
#include "backend/precision.h"

static void nhwc_relu_forward(backend_t *be, size_t count, const float *x, float *y)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_relu_bf16(cuda_of(be)->stream, count, x, y),
                "bf16 NHWC relu kernel");
}

/* The backward operations below store bf16 gradients where
 * blocked_bf16_grads (the launchers' g16), else float32 ones. */
static void nhwc_relu_backward(backend_t *be, size_t count, const float *y, const float *dy,
                               float *dx)
{
    cudaStream_t s = cuda_of(be)->stream;
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                tt_k_relu_back_bf16(s, be->blocked_bf16_grads, count, y, dy, dx),
                "bf16 NHWC relu backward kernel");
}

static void nhwc_add(backend_t *be, size_t count, const float *a, const float *b, bool relu,
                     float *y)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_add_bf16(cuda_of(be)->stream, count, a, b, relu, y),
                "bf16 NHWC add kernel");
}

static void nhwc_gap_forward(backend_t *be, int n, int c, int hw, const float *x, float *y)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                tt_k_gap_nhwc_forward(cuda_of(be)->stream, be->blocked_bf16, n, c, hw, x, y),
                "NHWC global average pooling kernel");
}

static void nhwc_gap_backward(backend_t *be, int n, int c, int hw, const float *dy, float *dx)
{
    cudaStream_t s = cuda_of(be)->stream;
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                tt_k_gap_nhwc_backward(s, be->blocked_bf16_grads, n, c, hw, dy, dx),
                "NHWC global average pooling backward kernel");
}

/* Pools: a blocked x takes the NHWC kernels, an NCHW one today's */
static void nhwc_maxpool_forward(backend_t *be, const window_desc *d, const float *x, float *y,
                                 int32_t *mask)
{
    cudaStream_t s = cuda_of(be)->stream;
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                d->blocked_x ? tt_k_maxpool_nhwc_forward(s, be->blocked_bf16, *d, x, y, mask)
                             : tt_k_maxpool_forward(s, *d, x, y, mask),
                "maxpool kernel");
}

static void nhwc_maxpool_backward(backend_t *be, const window_desc *d, const float *dy,
                                  const int32_t *mask, float *dx)
{
    cudaStream_t s = cuda_of(be)->stream;
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                d->blocked_x
                    ? tt_k_pool_nhwc_backward(s, be->blocked_bf16_grads, *d, true, dy, mask, dx)
                    : tt_k_maxpool_backward(s, *d, dy, mask, dx),
                "maxpool backward kernel");
}

static void nhwc_avgpool_forward(backend_t *be, const window_desc *d, const float *x, float *y)
{
    cudaStream_t s = cuda_of(be)->stream;
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                d->blocked_x ? tt_k_avgpool_nhwc_forward(s, be->blocked_bf16, *d, x, y)
                             : tt_k_avgpool_forward(s, *d, x, y),
                "avgpool kernel");
}

static void nhwc_avgpool_backward(backend_t *be, const window_desc *d, const float *dy, float *dx)
{
    cudaStream_t s = cuda_of(be)->stream;
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                d->blocked_x
                    ? tt_k_pool_nhwc_backward(s, be->blocked_bf16_grads, *d, false, dy, NULL, dx)
                    : tt_k_avgpool_backward(s, *d, dy, dx),
                "avgpool backward kernel");
}

void cuda_install_blocked(backend_t *be, prec_t prec, bool tf32)
{
    prec_layout lay = prec_device_layout(prec, tf32);
    be->blocked_layout = false;
    be->blocked_nhwc = be->blocked_bf16 = be->blocked_bf16_grads = false;
    cuda_of(be)->grads16 = false;
    if (!lay.blocked || !lay.nhwc)
        return;
    if (lay.bf16) {
        be->relu_forward_blocked = nhwc_relu_forward;
        be->relu_backward_blocked = nhwc_relu_backward;
        be->add_blocked = nhwc_add;
    } else { /* float32 NHWC: element by element, the NCHW kernels' */
        be->relu_forward_blocked = be->relu_forward;
        be->relu_backward_blocked = be->relu_backward;
        be->add_blocked = be->add;
    }
    be->global_avgpool_blocked_forward = nhwc_gap_forward;
    be->global_avgpool_blocked_backward = nhwc_gap_backward;
    be->maxpool_forward = nhwc_maxpool_forward;
    be->maxpool_backward = nhwc_maxpool_backward;
    be->avgpool_forward = nhwc_avgpool_forward;
    be->avgpool_backward = nhwc_avgpool_backward;
    /* conv2d reads and writes NHWC in bf16 and in float32 (cuda_conv.c) */
    bool bn = be->batchnorm_forward_blocked != NULL && be->batchnorm_backward_blocked != NULL;
    be->blocked_layout = bn;
    be->blocked_nhwc = be->blocked_layout;
    be->blocked_bf16 = be->blocked_layout && lay.bf16;
    /* bf16 activation gradients (precision.h's rule; TT_BF16_GRADS=0 keeps
     * float32 ones): the backward kernels here, the NHWC batchnorm's
     * (cuda_bn_nhwc.c) and cuda_conv.c's NHWC backward read and write them */
    be->blocked_bf16_grads = be->blocked_bf16 && lay.bf16_grads;
    cuda_of(be)->grads16 = be->blocked_bf16_grads; /* the copies' places */
}

/* cuda_nhwc.c - the CUDA backend's blocked layout (backend.h): which layout
 * its activations keep (precision.c's prec_layout_of, the policy CPU and
 * sim share: bf16 -> bf16 NHWC), and the element-wise and global average
 * pooling operations over it (cuda_nhwc_kernels.cu).
 *
 * The layout is turned on only when every operation that reads or writes
 * a blocked activation can: the ones here, the batchnorm ones
 * (batchnorm_forward_blocked / batchnorm_backward_blocked, written apart in
 * cuda_bn_nhwc.*; NULL until then), and conv2d and the pools with
 * blocked_x / blocked_y (CUDA_NHWC_CONV below: not yet, cuda_conv.c still
 * narrows and widens NCHW float32). Until all are there a GPU tower runs
 * today's proven NCHW float32 path, whatever the precision; sim runs the
 * layout in make check (sim_blocked.c) meanwhile. No GPU has run this code.
 */
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nhwc_kernels.h"
#include "backend/precision.h"

/* conv2d and the pools read and write blocked_x / blocked_y in bf16 NHWC
 * (cuDNN NHWC tensor descriptors; not done yet) */
#define CUDA_NHWC_CONV false

static void nhwc_relu_forward(backend_t *be, size_t count, const float *x, float *y)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_relu_bf16(cuda_of(be)->stream, count, x, y),
                "bf16 NHWC relu kernel");
}

static void nhwc_relu_backward(backend_t *be, size_t count, const float *y, const float *dy,
                               float *dx)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_relu_back_bf16(cuda_of(be)->stream, count, y, dy, dx),
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
        cuda_ok(cuda_of(be), tt_k_gap_nhwc_forward(cuda_of(be)->stream, n, c, hw, x, y),
                "bf16 NHWC global average pooling kernel");
}

static void nhwc_gap_backward(backend_t *be, int n, int c, int hw, const float *dy, float *dx)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_gap_nhwc_backward(cuda_of(be)->stream, n, c, hw, dy, dx),
                "NHWC global average pooling backward kernel");
}

void cuda_install_blocked(backend_t *be, prec_t prec, bool tf32)
{
    prec_layout lay = prec_layout_of(prec, tf32, false);
    be->blocked_layout = false;
    be->blocked_nhwc = be->blocked_bf16 = false;
    if (!lay.blocked || !lay.nhwc || !lay.bf16)
        return; /* float32 NHWC (tf32) has no kernels here yet */
    be->relu_forward_blocked = nhwc_relu_forward;
    be->relu_backward_blocked = nhwc_relu_backward;
    be->add_blocked = nhwc_add;
    be->global_avgpool_blocked_forward = nhwc_gap_forward;
    be->global_avgpool_blocked_backward = nhwc_gap_backward;
    bool bn = be->batchnorm_forward_blocked != NULL && be->batchnorm_backward_blocked != NULL;
    be->blocked_layout = bn && CUDA_NHWC_CONV;
    be->blocked_nhwc = be->blocked_bf16 = be->blocked_layout;
}

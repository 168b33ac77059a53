/* precision.h - mixed precision on the CUDA backend: which operations
 * compute in a 16-bit type, what a GPU needs for it, and where the 16-bit
 * copies of a dense or conv2d call's operands live.
 *
 * A CUDA backend of precision "fp16" keeps every tensor float32, as
 * backend.h says (the parameters are the fp32 master weights, as
 * torch.autocast keeps them); one of precision "bf16" keeps its
 * activations between layers in bf16 NHWC instead where it has every
 * operation for that (prec_layout_of below; cuda_nhwc.c), its
 * convolutions reading and writing them in place. Its dense and conv2d operations, forward,
 * backward-data and backward-weights, round their float32 operands (x, w,
 * dy) to the 16-bit type (to nearest even) in one scratch region of the
 * tower's memory pool (a tower's weights w: into its weight copies, once
 * per step, weight_copies.h), multiply them on tensor cores with float32
 * accumulation (cuBLAS with CUBLAS_COMPUTE_32F; cuDNN with a float32
 * convolution compute type, PSEUDO_HALF / PSEUDO_BFLOAT16 configurations),
 * and hand back float32: cuBLAS writes float32 itself, cuDNN writes the
 * 16-bit type into the scratch region and a kernel widens it. Batchnorm,
 * pooling, the element-wise operations, softmax and the loss, the
 * all-reduce and the optimizer stay float32.
 *
 * A float32 tower in NHWC (TT_CUDA_LAYOUT=nhwc, prec_device_layout) keeps
 * copies too, float32 ones, for its convolutions only: cuDNN reads and
 * writes the NHWC activations and their gradients in place, and the
 * filters as KRSC: a tower's weights have a float32 KRSC copy made once per
 * step (weight_copies.h), cuDNN's KRSC dw is transposed to KCRS from the
 * scratch region, and an NCHW side of a call (the model's input, a layer
 * out of the layout) is transposed there.
 *
 * The scratch region is sized while the run sets up (the largest call of
 * the model at its batch size) and never grows during training.
 *
 * Plain C and GPU-independent, so tests/test_precision.c checks it on the
 * CPU; cuda_backend.c and cuda_conv.c follow it.
 */
#ifndef TT_PRECISION_H
#define TT_PRECISION_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "util/err.h"

typedef enum { PREC_FP32, PREC_BF16, PREC_FP16 } prec_t;

/* The backend operations, for prec_reduced. */
typedef enum {
    PREC_OP_DENSE,      /* dense forward and backward (cuBLAS) */
    PREC_OP_CONV,       /* conv2d forward, backward data, backward filter (cuDNN) */
    PREC_OP_BATCHNORM,  /* statistics and normalisation (cuDNN) */
    PREC_OP_POOL,       /* max and average pooling */
    PREC_OP_ELEMENTWISE, /* relu, add, dropout, bias, scale, ... */
    PREC_OP_LOSS,       /* softmax and cross-entropy */
    PREC_OP_ALLREDUCE,  /* NCCL, on the float32 gradients */
    PREC_OP_OPTIMIZER,  /* the update of the float32 master parameters */
    PREC_OP_COUNT
} prec_op;

/* "fp32", "bf16", "fp16": 0 and the type in *p; -1 for anything else. */
int prec_parse(const char *name, prec_t *p);
const char *prec_name(prec_t p);

/* Does op compute in p's 16-bit type? (false for every op of fp32) */
bool prec_reduced(prec_t p, prec_op op);
const char *prec_op_name(prec_op op);

/* Bytes of one element of the type the reduced ops multiply: 4 or 2. */
size_t prec_elem_bytes(prec_t p);

/* The lowest compute capability (major * 10 + minor) whose tensor cores
 * multiply p's type: bf16 8.0 (Ampere), fp16 7.0 (Volta), fp32 none (0). */
int prec_min_capability(prec_t p);

/* TT_ERR_USAGE, one line naming the device, its name and capability, when
 * the GPU cannot run p; else 0. */
int prec_check_device(prec_t p, int device, const char *gpu_name, int major, int minor,
                      tt_err *err);

/* "dense, conv2d in bf16 (fp32 accumulation); batchnorm, pooling, ... in
 * fp32", for the tower table and --version. */
void prec_describe(prec_t p, char *buf, size_t len);

/* Where a backend keeps its activations between layers (backend.h's blocked
 * layout): the one policy the CPU, sim and CUDA backends share.
 *   blocked: the blocked layout at all (else everything NCHW float32);
 *   nhwc:    its NHWC order (plain NHWC when C % 16 == 0), what tensor-core
 *            convolutions (cuDNN, oneDNN on AMX) read and write;
 *   bf16:    the blocked activations hold bf16;
 *   bf16_grads: a device's blocked activations' GRADIENTS hold bf16 too
 *            (backend.h: blocked_bf16_grads; the rule below).
 * bf16 -> bf16 NHWC everywhere. fp16 -> NCHW float32 (nothing stores fp16
 * activations yet). fp32 -> nChw16c float32 where the backend's float32
 * convolutions compute in it (`fp32_nchw16c`: the CPU with oneDNN), else
 * NCHW; with tf32 (a device's trainer.tf32) PREC_TF32_NHWC decides.
 *
 * The precision rule for activation gradients (dy / dx between layers),
 * as torch.autocast's in bf16 (a conv's or batchnorm's backward returns
 * its input's type): the gradient of an activation kept in bf16 NHWC is
 * bf16 as well, where bf16_grads is set: every operation computes it in
 * float32 and stores it rounded to nearest even, and two readers'
 * gradients of one activation are summed in float32 and rounded once
 * (add_blocked). Float32 stay: the loss and its gradient (the logits',
 * softmax's dlogits), every NCHW activation's gradient (the dense
 * classifier head, flatten, global average pooling's [n, c] output, a
 * stem conv's 3-channel input side), the parameters' gradients, the
 * all-reduce and the optimizer (float32 master weights). bf16_grads is
 * true for bf16 unless TT_BF16_GRADS=0 (towertrain(1)); a backend sets
 * blocked_bf16_grads only where every blocked operation stores bf16
 * gradients (sim, sim_grad16.c; CUDA, cuda_nhwc.c); the CPU keeps float32
 * gradients, its bits unchanged. */
typedef struct {
    bool blocked, nhwc, bf16, bf16_grads;
} prec_layout;
prec_layout prec_layout_of(prec_t p, bool tf32, bool fp32_nchw16c);
/* The layout of a device tower (CUDA, sim): prec_layout_of's, unless the
 * environment's TT_CUDA_LAYOUT says otherwise: "nchw", every activation
 * NCHW float32 (today's proven path, the fallback); "nhwc", float32
 * towers (fp32, tf32) NHWC float32 too, convolutions included, as
 * PREC_TF32_NHWC will once convbench shows it faster (the switch the tests
 * run it by); bf16 is NHWC bf16 either way. */
prec_layout prec_device_layout(prec_t p, bool tf32);

/* TT_BF16_GRADS: unset or "1" -> true (the default), "0" -> false. */
bool prec_bf16_grads_on(void);

/* The switches a device tower reads, TT_CUDA_LAYOUT (unset, "nchw" or
 * "nhwc"), TT_BF16_GRADS and TT_CUDNN_LEGACY (unset, "0" or "1";
 * util/env.h's rule): 0, or -1 with a usage error naming the variable
 * (exit status 2) for any other value, which must not silently mean the
 * default. */
int prec_check_env(tt_err *err);

/* The 16-bit copies of one dense call, y[n,out] = x[n,in] w[out,in]^T:
 * byte offsets in the scratch region (each MEM_POOL_ALIGN-aligned) of x,
 * dy [n,out] and w, and the region's size. cuBLAS writes y, dx and dw in
 * float32 directly. w comes last: a tower's weights have their copies
 * made once per step elsewhere (weight_copies.h), so a tower's calls need
 * only bytes_no_w; w's place serves a call on weights of no tower. All
 * zero for fp32. */
typedef struct {
    size_t x, dy, w;
    size_t bytes, bytes_no_w;
} prec_dense_copies;
void prec_dense_copies_of(prec_t p, int n, int in, int out, prec_dense_copies *l);

/* The same for one conv2d call (cuDNN reads and writes one type), and the
 * float32 copies of a float32 NHWC call (one with a blocked side: places
 * of 4-byte elements; an fp32 call with no blocked side has none). With
 * bf16 or float32 NHWC activations a blocked x or y is read and
 * written in place; the places stay for what cuDNN cannot read or write
 * as it is: an NCHW side of an NHWC call (transposed) and a bf16 call's
 * float32 gradients dx and dy (without bf16_grads; bf16 gradients of a
 * blocked side are read and written in place too), and w in the filter
 * layout the activations' layout asks (KRSC for NHWC):
 *   x  [n,c,h,w]    x for forward and backward filter; backward data's dx
 *   y  [n,f,oh,ow]  forward's y; backward's dy
 *   dw [f,c,k,k]    backward filter's dw
 *   w  [f,c,k,k]    w for forward and backward data, last (bytes_no_w:
 *                   the region without it, as for dense above)
 * Backward filter runs before backward data, which then reuses x's place. */
typedef struct {
    size_t x, y, dw, w;
    size_t bytes, bytes_no_w;
} prec_conv_copies;
/* g16: the backend keeps its blocked activations' gradients in bf16
 * (backend.h's blocked_bf16_grads): a blocked x or y side then needs no
 * place at all (read and written in place, gradients too), and its place
 * is sized 0; so does a blocked side in float32 (fp32), whose gradients
 * are float32 NHWC. */
void prec_conv_copies_of(prec_t p, const window_desc *d, bool g16, prec_conv_copies *l);

/* Whether a device tower keeps copies of its weights once per step
 * (weight_copies.h; its mirror of prec_elem_bytes(p) an element): for the
 * 16-bit products, and in float32 for the KRSC filters of NHWC
 * convolutions (nhwc: the backend's blocked_nhwc). */
bool prec_weight_copies(prec_t p, bool nhwc);

#endif

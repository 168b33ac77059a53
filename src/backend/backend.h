/* backend.h - the seam between the model and the hardware.
 *
 * A backend owns memory and runs the per-layer operations, the way cuDNN does for
 * a GPU. Layers (src/layers/) know shapes and parameters and call these
 * operations; they never touch threads, BLAS or CUDA. The CPU backend
 * (src/backend/cpu/) implements them with its own kernels (tile_gemm.c for
 * the dense layers), oneDNN where configure found it (convolutions, bf16,
 * and the sgemm of the rest; else a CBLAS) and one thread pool; the CUDA
 * backend (src/backend/cuda/) with cuBLAS, cuDNN and kernels. Per-element math
 * both share lives in backend/math.h.
 *
 * Conventions: float32, NCHW, row-major matrices (a bf16 backend computes
 * inside its convolution and dense operations in bf16, below). Every pointer
 * holds float32 but a blocked activation of a backend with blocked_bf16
 * (below), which holds bf16 behind the float pointer, and its gradient
 * where blocked_bf16_grads. Pointers passed to operations
 * are device pointers of this backend. Backward operations OVERWRITE dx, dw and
 * db (the model accumulates where an activation has several consumers). Any of
 * dx, dw, db may be NULL when not needed. Results never depend on the number of
 * threads: same inputs, same bits.
 */
#ifndef TT_BACKEND_H
#define TT_BACKEND_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct backend backend_t;
typedef struct backend_device_ops backend_device_ops;

/* The per-step scalars of an optimizer update, in device memory: the
 * *_vars updates below read them when they RUN, not when they are queued,
 * so a step captured once (backend_device_ops' capture_begin) and replayed
 * updates with each replay's values. The trainer fills the block with one
 * host-to-device copy per step (src/train/step_graph.c); the host computes
 * every value as the by-value update would (optimizer.c,
 * optimizer_step_vars), so both give the same bits. */
typedef struct {
    float lr;                /* the learning rate */
    float decay;             /* AdamW's factor 1 - lr * weight_decay */
    int32_t first_step;      /* SGD's: 1 on the optimizer's first update */
    float adam_step_size;    /* tt_adam_make's step_size: lr / (1 - beta1^step) */
    float adam_bc2_sqrt;     /* its bias_correction2_sqrt: sqrt(1 - beta2^step) */
    int32_t unused;
    int64_t step;            /* the update's number, from 1 */
} backend_step_vars;

/* A 2-D convolution or pooling window over an NCHW batch. Square kernels.
 * blocked_x / blocked_y: the input / output is in the blocked layout (below)
 * instead of NCHW; only asked of a backend with blocked_layout. */
typedef struct {
    int n, c, h, w;      /* input batch */
    int f;               /* conv: output channels (pools: f == c) */
    int k, stride, pad;  /* kernel size, stride, zero padding */
    int oh, ow;          /* output spatial size */
    bool blocked_x, blocked_y;
} window_desc;

/* The blocked layout (oneDNN's nChw16c): channels in blocks of 16, the 16 of
 * a block innermost, element (n, c, p) of a batch with C channels and P
 * pixels at ((n * CB + c / 16) * P + p) * 16 + c % 16, CB = ceil(C / 16);
 * channels past C are zero. A backend whose convolutions compute in it keeps
 * activations that way between layers that accept it, instead of reordering
 * at every call (the model decides where, model.c). */
#define TT_BLOCK 16
static inline size_t tt_blocked_floats(int n, int c, int pixels)
{
    return (size_t)n * (size_t)((c + TT_BLOCK - 1) / TT_BLOCK * TT_BLOCK) * (size_t)pixels;
}

/* A backend may keep the blocked layout's 16-channel vectors in NHWC order
 * instead (blocked_nhwc: the backends in bf16, whose AMX / cuDNN tensor-core
 * convolutions compute in NHWC; precision.h's prec_layout_of decides): vector (n, cb, p) at ((n * P + p) * CB + cb) * 16, the
 * same floats in another order; with CB = 1 both orders are one. The
 * strides, in floats, of vector (n, cb, p) = n * img + cb * cstride +
 * p * pstride in either: */
typedef struct {
    size_t img, cstride, pstride;
} tt_blocked_strides;

static inline tt_blocked_strides tt_blocked_strides_of(int c, int pixels, bool nhwc)
{
    size_t cb = (size_t)(c + TT_BLOCK - 1) / TT_BLOCK, p = (size_t)pixels;
    tt_blocked_strides s = {cb * p * TT_BLOCK, p * TT_BLOCK, TT_BLOCK};
    if (nhwc) {
        s.cstride = TT_BLOCK;
        s.pstride = cb * TT_BLOCK;
    }
    return s;
}

static inline int window_out_size(int in, int k, int stride, int pad)
{
    return (in + 2 * pad - k) / stride + 1;
}

/* A 3x3, stride-1, padding-1 window whose output is as large as its input:
 * the shape the convolution rules of conv_dnnl.c and conv_wino.c take. */
static inline bool window_same_3x3(const window_desc *d)
{
    return d->k == 3 && d->stride == 1 && d->pad == 1 && d->oh == d->h && d->ow == d->w;
}

struct backend {
    const char *name; /* "cpu", "cuda" or "sim" */
    /* "fp32", or "bf16" / "fp16" (CUDA): dense and convolution forward and
     * backward round their float32 inputs (x, w, dy) to the 16-bit type and
     * multiply them with float32 accumulation; their outputs and every other
     * operation stay float32 (mixed precision as torch.autocast; see
     * backend_cpu_create_bf16) */
    const char *precision;
    int device;       /* device id (CPU: tower index) */
    int threads;      /* worker threads this backend instance may use */
    void *impl;       /* private state of the implementation */
    /* Device pointers are host pointers (the CPU): a tower reads its batch
     * where the dataflow put it instead of copying it. */
    bool host_memory;
    /* A device with its own memory and queues (CUDA, sim): what a GPU tower
     * needs beyond the operations (below); NULL on the CPU, whose queue is
     * the calling thread. The trainer reads this instead of asking which
     * backend it has. */
    const backend_device_ops *dev;
    /* The communicator whose asynchronous error backend_device_wait watches
     * while it waits for this backend's queue (tower watch_index of it), or
     * NULL: set by comm_create, cleared by the communicator's free. */
    struct backend_comm *watch;
    int watch_index;

    /* ---- memory ---- */
    void *(*alloc)(backend_t *be, size_t bytes); /* zero-filled, 64-byte aligned; NULL on OOM */
    void (*free)(backend_t *be, void *p);
    void (*upload)(backend_t *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(backend_t *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(backend_t *be, void *dst, const void *src, size_t bytes);

    /* ---- dense: y[n,out] = x[n,in] . w[out,in]^T + b[out], then relu if asked ---- */
    void (*dense_forward)(backend_t *be, int n, int in, int out, const float *x,
                          const float *w, const float *b, bool relu, float *y);
    /* dy[n,out] is the gradient at the output (after relu); when relu, y is the
     * forward output and dy is masked in place. dx[n,in], dw[out,in], db[out]. */
    void (*dense_backward)(backend_t *be, int n, int in, int out, const float *x,
                           const float *w, const float *y, bool relu, float *dy,
                           float *dx, float *dw, float *db);
    /* The same in float32 whatever the backend's precision, for what the
     * precision table keeps float32 but runs as a dense call
     * (global_avgpool: [n * C, H * W] times a row of 1 / HW): the device
     * backends (CUDA, sim); NULL: dense_forward is used (the CPU's). */
    void (*dense_forward_fp32)(backend_t *be, int n, int in, int out, const float *x,
                               const float *w, const float *b, bool relu, float *y);
    void (*dense_backward_fp32)(backend_t *be, int n, int in, int out, const float *x,
                                const float *w, const float *y, bool relu, float *dy,
                                float *dx, float *dw, float *db);

    /* ---- conv2d: y[n,f,oh,ow] = conv(x, w[f,c,k,k]) + b[f], then relu if asked ---- */
    size_t (*conv_workspace)(backend_t *be, const window_desc *d); /* bytes */
    void (*conv_forward)(backend_t *be, const window_desc *d, const float *x, const float *w,
                         const float *b, bool relu, float *y, void *ws);
    void (*conv_backward)(backend_t *be, const window_desc *d, const float *x, const float *w,
                          const float *y, bool relu, float *dy, float *dx, float *dw,
                          float *db, void *ws);

    /* ---- pooling (PyTorch semantics; avg counts padding zeros, as
     *      count_include_pad=True). mask: int32 per output, argmax for max pool ---- */
    void (*maxpool_forward)(backend_t *be, const window_desc *d, const float *x, float *y,
                            int32_t *mask);
    void (*maxpool_backward)(backend_t *be, const window_desc *d, const float *dy,
                             const int32_t *mask, float *dx);
    void (*avgpool_forward)(backend_t *be, const window_desc *d, const float *x, float *y);
    void (*avgpool_backward)(backend_t *be, const window_desc *d, const float *dy, float *dx);

    /* ---- batchnorm over an NCHW batch, per channel, as torch.nn.BatchNorm2d:
     *      training normalises with the batch statistics (biased variance),
     *      keeps mean and 1/sqrt(var + eps) per channel in save_mean /
     *      save_invstd, and updates the running statistics (momentum is the
     *      weight of the new statistic; running_var takes the unbiased
     *      variance); inference normalises with the running statistics.
     *      hw = H*W (1 for flat inputs). With relu, y = relu(batchnorm(x)) and
     *      backward masks dy (in place) by the forward output y first. ---- */
    void (*batchnorm_forward)(backend_t *be, int n, int c, int hw, const float *x,
                              const float *gamma, const float *beta, float *running_mean,
                              float *running_var, float momentum, float eps, bool training,
                              bool relu, float *y, float *save_mean, float *save_invstd);
    void (*batchnorm_backward)(backend_t *be, int n, int c, int hw, const float *x,
                               const float *gamma, const float *save_mean,
                               const float *save_invstd, const float *y, bool relu, float *dy,
                               float *dx, float *dgamma, float *dbeta);

    /* ---- element-wise over count elements ---- */
    void (*relu_forward)(backend_t *be, size_t count, const float *x, float *y);
    void (*relu_backward)(backend_t *be, size_t count, const float *y, const float *dy,
                          float *dx);
    /* Inverted dropout: keep with probability 1-rate, scale kept by 1/(1-rate).
     * mask[i] is the factor (0 or 1/(1-rate)); random bits from (seed, i). */
    void (*dropout_forward)(backend_t *be, size_t count, float rate, uint64_t seed,
                            const float *x, float *y, float *mask);
    void (*mul)(backend_t *be, size_t count, const float *a, const float *b, float *y);
    /* y += alpha * x */
    void (*axpy)(backend_t *be, size_t count, float alpha, const float *x, float *y);
    /* y = a + b, then relu if asked: one pass (y may be a or b) */
    void (*add)(backend_t *be, size_t count, const float *a, const float *b, bool relu, float *y);
    void (*scale)(backend_t *be, size_t count, float alpha, float *x);
    /* x += alpha, element by element (batchnorm's num_batches_tracked: the
     * count stays on the device, so counting a batch never waits for it) */
    void (*add_scalar)(backend_t *be, size_t count, float alpha, float *x);
    /* true when none of x[0, count) is an Inf or a NaN (loss scaling's check) */
    bool (*all_finite)(backend_t *be, size_t count, const float *x);
    /* sum of x[i]^2 over x[0, count), accumulated in double in an order that
     * depends only on count (the optimizer's norms: LARS, clip_global_norm) */
    double (*sumsq)(backend_t *be, size_t count, const float *x);
    /* sumsq of n ranges at once, out[i] = sumsq(x[i], count[i]), each with
     * sumsq's bits: one wait of the host for all of them (LARS's norms of
     * every parameter and its gradient: one read back a step, not two a
     * parameter) */
    void (*sumsq_each)(backend_t *be, int n, const float *const *x, const size_t *count,
                       double *out);

    /* ---- loss: mean softmax cross-entropy over n rows of `classes` logits,
     * with label smoothing s (torch.nn.CrossEntropyLoss's; target = (1 - s)
     * onehot + s / classes, backend/math.h). softmax_xent queues it: writes
     * dlogits = (softmax - target) / n when dlogits != NULL, and keeps the
     * summed (not mean) loss and the count of rows whose argmax equals the
     * label for loss_read. labels are device int32. loss_read returns those
     * of the last softmax_xent; on a device it waits for that operation
     * only, not for what was queued after it, so a training step queues its
     * whole backward before the host reads its loss (the device never idles
     * while the host waits in mid-step). ---- */
    void (*softmax_xent)(backend_t *be, int n, int classes, const float *logits,
                         const int32_t *labels, float smoothing, float *dlogits);
    void (*loss_read)(backend_t *be, double *loss_sum, int *correct);

    /* ---- optimizer updates over a whole contiguous parameter block (backend/math.h
     *      holds the per-element rules, exactly torch.optim's) ---- */
    void (*sgd_step)(backend_t *be, size_t count, float lr, float momentum, bool nesterov,
                     float weight_decay, bool first_step, float *w, const float *g,
                     float *buf /* NULL when momentum == 0 */);
    void (*adam_step)(backend_t *be, size_t count, float lr, float beta1, float beta2,
                      float eps, float weight_decay, int64_t step /* from 1 */, float *w,
                      const float *g, float *m, float *v);
    /* The same updates with the per-step scalars read from v (device
     * memory, backend_step_vars) when they run: sgd_step with v->lr and
     * v->first_step, adam_step with v's lr and bias corrections, and
     * AdamW's decay w *= v->decay. Optional (NULL: a step is never
     * captured on this backend); the device backends have them. */
    void (*sgd_step_vars)(backend_t *be, size_t count, const backend_step_vars *v,
                          float momentum, bool nesterov, float weight_decay, float *w,
                          const float *g, float *buf);
    void (*adam_step_vars)(backend_t *be, size_t count, const backend_step_vars *v, float beta1,
                           float beta2, float eps, float weight_decay, float *w, const float *g,
                           float *m, float *v_sq);
    void (*decay_vars)(backend_t *be, size_t count, const backend_step_vars *v, float *w);
    /* dropout_forward with its seed read from *seed (device memory) when it
     * runs: a captured step's dropout layers (tower_t.step_seeds) */
    void (*dropout_forward_vars)(backend_t *be, size_t count, float rate, const uint64_t *seed,
                                 const float *x, float *y, float *mask);

    /* ---- the blocked layout (optional: a backend without it leaves
     *      blocked_layout false and these NULL). batchnorm over C % 16 == 0
     *      channels, the same arithmetic as the NCHW operations (same bits);
     *      global average pooling of a blocked [n, c, hw] into y[n, c] with
     *      the bits of global_avgpool's NCHW path (one fma chain of x / hw per
     *      channel, in pixel order), and its backward dx = dy / hw. ---- */
    bool blocked_layout;
    bool blocked_nhwc; /* its vectors in NHWC order (above) */
    /* Its blocked ACTIVATIONS hold bf16 (2 bytes an element, the upper half
     * of the float32, rounded to nearest even) behind the same float
     * pointers: the CPU backend in bf16, whose convolutions read and write
     * bf16 there without a conversion pass, and whose element-wise passes
     * over them move half the bytes. Their gradients are float32 unless
     * blocked_bf16_grads (below). Operations reading or writing a blocked activation: conv2d's
     * x and y (blocked_x, blocked_y; backward reads x and, with relu, y),
     * pools' x and y, the batchnorm and global average pooling operations
     * below (x, y), and the element-wise *_blocked ones. */
    bool blocked_bf16;
    /* Its blocked activations' GRADIENTS hold bf16 too (only with
     * blocked_bf16; precision.h's rule; a device in bf16, TT_BF16_GRADS):
     * conv2d backward's dy where blocked_y and dx where blocked_x, the
     * pools' backward dy and dx likewise, batchnorm(_add)_backward_blocked's
     * dy, dx and dr, global_avgpool_blocked_backward's dx (its dy [n, c]
     * stays float32), relu_backward_blocked's dy and dx; the model sums two
     * readers' bf16 gradients with add_blocked and copies them at 2 bytes
     * an element. Each computes in float32 and stores rounded to nearest
     * even. Parameter gradients stay float32. */
    bool blocked_bf16_grads;
    void (*batchnorm_forward_blocked)(backend_t *be, int n, int c, int hw, const float *x,
                                      const float *gamma, const float *beta,
                                      float *running_mean, float *running_var, float momentum,
                                      float eps, bool training, bool relu, float *y,
                                      float *save_mean, float *save_invstd);
    void (*batchnorm_backward_blocked)(backend_t *be, int n, int c, int hw, const float *x,
                                       const float *gamma, const float *save_mean,
                                       const float *save_invstd, const float *y, bool relu,
                                       float *dy, float *dx, float *dgamma, float *dbeta);
    /* Batchnorm, a residual add and relu in one operation over the
     * blocked layout (optional; NULL: the batchnorm layer composes them
     * from batchnorm_forward_blocked, add_blocked, relu_backward_blocked,
     * copy and axpy, which is also their reference: a backend's fused
     * operations give the composition's bits). forward:
     * y = batchnorm(x) + r, then relu if asked, r a blocked activation like
     * x and y; batchnorm's value is rounded as batchnorm_forward_blocked
     * stores it (bf16 where blocked_bf16) before the add. backward: g = dy
     * masked by y when relu (dy may be overwritten with it); dr = g, or
     * dr += g when dr_accumulate (r has another reader; dr NULL: none
     * wanted); then batchnorm_backward_blocked of g without relu. The model
     * calls them for a batchnorm whose only reader is a two-input add
     * (model.c, fuse_adds). */
    void (*batchnorm_add_forward_blocked)(backend_t *be, int n, int c, int hw, const float *x,
                                          const float *gamma, const float *beta,
                                          float *running_mean, float *running_var,
                                          float momentum, float eps, bool training,
                                          const float *r, bool relu, float *y, float *save_mean,
                                          float *save_invstd);
    void (*batchnorm_add_backward_blocked)(backend_t *be, int n, int c, int hw, const float *x,
                                           const float *gamma, const float *save_mean,
                                           const float *save_invstd, const float *y, bool relu,
                                           float *dy, float *dx, float *dgamma, float *dbeta,
                                           float *dr, bool dr_accumulate);
    void (*global_avgpool_blocked_forward)(backend_t *be, int n, int c, int hw, const float *x,
                                           float *y);
    void (*global_avgpool_blocked_backward)(backend_t *be, int n, int c, int hw,
                                            const float *dy, float *dx);
    /* relu_forward, relu_backward and add over blocked activations (x, y,
     * a, b; dy and dx are gradients): the NCHW operations where
     * blocked_bf16 is false */
    void (*relu_forward_blocked)(backend_t *be, size_t count, const float *x, float *y);
    void (*relu_backward_blocked)(backend_t *be, size_t count, const float *y,
                                  const float *dy, float *dx);
    void (*add_blocked)(backend_t *be, size_t count, const float *a, const float *b, bool relu,
                        float *y);

    void (*destroy)(backend_t *be);
};

/* ---- the device side: a backend whose memory is not the host's (a GPU, or
 *      the simulated GPU "sim") also offers these. Every call that can fail
 *      returns 0, or -1 with err set (one line naming the device). ---- */

/* One device's description for the tower table and for errors. */
typedef struct {
    char name[256];
    int major, minor;     /* compute capability (sim: that of the GPU it imitates) */
    size_t total_bytes;   /* device memory */
    int sm_count;
    char pci_bus_id[32];  /* "domain:bus:device.function" in hex; "" on sim */
} backend_device_info;

/* A queue of device work (a CUDA stream; on sim a worker thread) and an
 * event marking a point in one (a CUDA event; on sim a completion mark the
 * queue's worker sets). Opaque: only the backend that made them uses them. */
typedef struct backend_queue backend_queue;
typedef struct backend_event backend_event;
/* A captured step (a CUDA graph; on sim the list of its queued jobs). */
typedef struct backend_graph backend_graph;

/* The device all-reduce among this process's towers, and under mpirun every
 * rank's: NCCL's interface. allreduce: after the work queued so far on tower
 * t's compute queue, in-place all-reduce of the packs [lo[i], hi[i]) of buf
 * (sum, or mean over every participant) in one group, on the tower's
 * communication queue; returns at once. join: tower t's compute queue waits
 * for every all-reduce tower t started. check: an asynchronous error of
 * tower t's communicator (a peer gone), or 0. free: after the last join;
 * a communicator with an asynchronous error is aborted (ncclCommAbort).
 * record: records the event e (of tower t's backend) on tower t's
 * communication queue: at_start, when tower t's next group starts there
 * (after the queue's wait for the compute queue, before the collective);
 * else now, after the work queued there so far (the last group's end).
 * The host does not wait: the timeline's timing events around a group
 * measure its collective on the device (src/train/device_spans.c). */
typedef struct backend_comm backend_comm;
struct backend_comm {
    int size; /* participants: towers x ranks */
    int (*allreduce)(backend_comm *c, int t, float *buf, const size_t *lo, const size_t *hi,
                     int n_packs, bool mean, tt_err *err);
    int (*join)(backend_comm *c, int t, tt_err *err);
    int (*check)(backend_comm *c, int t, tt_err *err);
    int (*record)(backend_comm *c, int t, backend_event *e, bool at_start, tt_err *err);
    /* ncclCommAbort of every tower's communicator: operations still queued
     * or running on the device end (their results undefined), so the
     * queues drain; check reports an error from then on. Idempotent. */
    void (*abort)(backend_comm *c);
    void (*free)(backend_comm *c);
    void *impl;
};

/* A tower's communication queue and the two events that order it against
 * the compute queue (comm_queue.c), as NCCL's and sim's communicators use
 * them: start, before queuing a group on q: q waits for the work queued so
 * far on the compute queue (the gradients final there); join: the compute
 * queue waits for everything queued on q so far; record: backend_comm's
 * record (at_start: e waits in start_mark for the next start). free: after
 * q's work is done (polled, the communicator be->watch watched). */
typedef struct {
    backend_queue *q;
    backend_event *ready, *done;
    backend_event *start_mark; /* recorded on q by the next start, after its wait */
} backend_comm_queue;
int backend_comm_queue_create(backend_t *be, backend_comm_queue *cq, tt_err *err);
int backend_comm_queue_start(backend_t *be, backend_comm_queue *cq, tt_err *err);
int backend_comm_queue_join(backend_t *be, backend_comm_queue *cq, tt_err *err);
int backend_comm_queue_record(backend_t *be, backend_comm_queue *cq, backend_event *e,
                              bool at_start, tt_err *err);
void backend_comm_queue_free(backend_t *be, backend_comm_queue *cq);

struct backend_device_ops {
    const char *kind; /* "cuda" or "sim": tower tables print "<kind>:<device>" */
    /* Capabilities the trainer reads in place of asking for a GPU: */
    bool pinned_staging;  /* input goes through staging.h's staged input (always, today) */
    bool device_allreduce; /* sync_replicated all-reduces with comm_create's communicator */

    int (*info)(backend_t *be, backend_device_info *info, tt_err *err);
    /* Mixed precision and float32 NHWC: reserves the scratch of the copies
     * of the largest dense or conv2d call (precision.h; device_copies_bytes);
     * nothing in fp32 NCHW (0 bytes). */
    int (*reserve_copies)(backend_t *be, size_t bytes, tt_err *err);
    /* Mixed precision: one 16-bit copy of each weight tensor of a tower,
     * made once per step (backend/weight_copies.h says why that is exact);
     * float32 NHWC: a float32 KRSC copy of each filter.
     * weights_add: at setup, the tower's parameter block [params, params +
     * count) floats (its copies' memory is taken from the pool now; nothing
     * in fp32 NCHW: precision.h's prec_weight_copies); weights_remove:
     * before the block is freed. weights_step: tower_step of that block
     * begins (true: every copy is stale, the master weights may have been
     * written since) or ends (false). */
    int (*weights_add)(backend_t *be, const float *params, size_t count, tt_err *err);
    void (*weights_remove)(backend_t *be, const float *params);
    void (*weights_step)(backend_t *be, const float *params, bool begin);
    /* The calling thread works on the backend's device from now on. */
    int (*bind)(backend_t *be, tt_err *err);
    /* The first error of the backend's operations or of its queued work so
     * far (check: without waiting; sync: after waiting for the queue). */
    int (*check)(backend_t *be, tt_err *err);
    int (*sync)(backend_t *be, tt_err *err);
    /* Without waiting (cudaStreamQuery): 1 when everything queued so far
     * is done, 0 while some of it runs, -1 with err on a device error. */
    int (*query)(backend_t *be, tt_err *err);
    /* The host enters a phase ("checkpoint": the downloads of a save):
     * where the sim device injects TT_SIM_FAULT; may be NULL. */
    void (*mark)(backend_t *be, const char *phase);
    /* The host stages the batch of `step` (staging_load's key): where sim's
     * TT_SIM_FAULT counts steps; may be NULL. */
    void (*step)(backend_t *be, int64_t step);
    /* Lets be's device read and write peer's memory directly where the
     * hardware allows (cudaDeviceEnablePeerAccess); true when it does.
     * NULL: copies between devices go through the host (sim). */
    bool (*peer_enable)(backend_t *be, const backend_t *peer);
    /* Ends setup: the device memory pool no longer grows. */
    void (*freeze)(backend_t *be);
    /* Bytes the pool holds, uses, and the most it used; the last allocation
     * failure (naming the bytes asked), or "". */
    void (*memory)(backend_t *be, size_t *reserved, size_t *in_use, size_t *peak);
    const char *(*alloc_error)(backend_t *be);

    /* ---- queues, events, pinned memory and asynchronous copies: what the
     *      staged input (staging.h), the device-side timeline spans and the
     *      all-reduce's ordering are written with, the same code on every
     *      device. Work on one queue runs in the order it was queued; work
     *      on two queues is unordered unless an event orders it. ---- */
    /* The backend's compute queue: where every operation above runs. Never
     * freed; valid while the backend lives. */
    backend_queue *(*queue)(backend_t *be);
    /* Another queue of the device (a copy queue, cudaStreamNonBlocking:
     * not ordered with the compute queue), and its release: queue_free
     * first waits (backend_device_wait_for, so a stalled collective cannot
     * hang it) until the work queued on it is done. */
    backend_queue *(*queue_create)(backend_t *be, tt_err *err);
    void (*queue_free)(backend_t *be, backend_queue *q);
    /* An event; with timing, event_elapsed_ms can measure between two such
     * (a timing event costs more on a GPU: the staging's are without).
     * Before its first record an event is done. free: at any time after
     * the work that waits for it was queued (the device keeps what it needs). */
    backend_event *(*event_create)(backend_t *be, bool timing, tt_err *err);
    void (*event_free)(backend_t *be, backend_event *e);
    /* The event captures the work queued on q so far (cudaEventRecord);
     * recording it again replaces what it captured. */
    int (*event_record)(backend_t *be, backend_event *e, backend_queue *q, tt_err *err);
    /* Work queued on q from now on starts after the work e captured at this
     * call (cudaStreamWaitEvent); the host does not wait. */
    int (*queue_wait_event)(backend_t *be, backend_queue *q, backend_event *e, tt_err *err);
    /* Without blocking (cudaEventQuery): 1 when the captured work is done,
     * 0 while it runs, -1 with err on a device error. The host waits for an
     * event through backend_device_wait_event (below). */
    int (*event_query)(backend_t *be, backend_event *e, tt_err *err);
    /* Milliseconds from start's completion to end's (negative when end
     * completed first), both timing events, recorded and done. */
    int (*event_elapsed_ms)(backend_t *be, backend_event *start, backend_event *end, float *ms,
                            tt_err *err);
    /* Page-locked host memory (cudaMallocHost; sim: plain host memory): what
     * an asynchronous copy reads or writes while the host goes on. NULL with
     * err when out of memory. */
    void *(*host_alloc)(backend_t *be, size_t bytes, tt_err *err);
    void (*host_free)(backend_t *be, void *p);
    /* bytes from pinned host memory to device memory, or back, queued on q
     * (cudaMemcpyAsync): returns at once; the host must not touch the host
     * buffer until an event recorded after it is done. */
    int (*copy_h2d_async)(backend_t *be, void *dst, const void *host_src, size_t bytes,
                          backend_queue *q, tt_err *err);
    int (*copy_d2h_async)(backend_t *be, void *host_dst, const void *src, size_t bytes,
                          backend_queue *q, tt_err *err);

    /* Communicators for this process's n towers (backends bes[0..n)).
     * Collective over the MPI ranks: every rank calls it from its main
     * thread with the same n. */
    backend_comm *(*comm_create)(int n, backend_t *const *bes, tt_err *err);

    /* ---- a step captured once and replayed (CUDA graphs; optional:
     *      NULL on a backend without them, and the trainer stays eager).
     *      capture_begin: the operations queued on the compute queue from
     *      now on, by this thread, are recorded, not run. capture_end:
     *      the graph of what was recorded, or NULL with err (one line
     *      saying why) when something could not be captured: a host wait
     *      or read (download, all_finite, sumsq, sync), an upload from
     *      host memory, an event or a copy on any queue, an allocation or
     *      a free. Either way nothing queued since capture_begin has run,
     *      and the backend has no error from it: the caller runs that work
     *      again eagerly. While capturing, loss_read returns zeros without
     *      waiting; graph_launch queues the graph's work on the compute
     *      queue (the values the work reads from device memory are those
     *      there when it runs: backend_step_vars) and after it the loss
     *      that loss_read then returns. graph_free: at any time after the
     *      launches were queued. ---- */
    int (*capture_begin)(backend_t *be, tt_err *err);
    backend_graph *(*capture_end)(backend_t *be, tt_err *err);
    int (*graph_launch)(backend_t *be, backend_graph *g, tt_err *err);
    void (*graph_free)(backend_t *be, backend_graph *g);

    /* "cuda: sm_80 ... (CUDA 13.0, ...)", what the binary was built with */
    const char *(*build_info)(void);
};

/* The one place the host waits for device work (issue 27): polls query
 * (sleeping 1 us growing to about 100 us) together with the asynchronous error of
 * the communicator be->watch and the stop flag, and never blocks in the
 * device's own wait, so a collective that never completes cannot hang the
 * host. On the communicator's error it aborts the communicator (so the
 * queues drain) and fails with that error; when the stop flag has been set
 * for BACKEND_STOP_GRACE_S seconds and the work is still not done (a
 * stalled collective) it aborts too and fails. `what` names the wait in
 * the error ("download"). 0 when the queue is done; -1 with err (one line,
 * without the device's name: the backend adds it). Both CUDA and sim
 * call it wherever the host needs the queue done. */
#define BACKEND_STOP_GRACE_S 5
int backend_device_wait(backend_t *be, const char *what, tt_err *err);
/* The same for other device work of be (an event, a copy stream): query
 * answers as dev->query does. */
int backend_device_wait_for(backend_t *be, int (*query)(void *arg, tt_err *err), void *arg,
                            const char *what, tt_err *err);
/* backend_device_wait_for on an event of be (dev->event_query). */
int backend_device_wait_event(backend_t *be, backend_event *e, const char *what, tt_err *err);
/* The flag a stop signal sets (trainer_stop_signal); NULL: none. */
void backend_device_set_stop(const volatile sig_atomic_t *flag);
/* A communicator's create and free: be->watch for each of its backends. */
void backend_device_watch(backend_t *const *bes, int n, struct backend_comm *c);

/* Device towers (trainer.device "gpu" or "sim"). kind "cuda" or "sim";
 * precision "fp32", "bf16" or "fp16"; tf32 and deterministic as
 * trainer.tf32 / trainer.deterministic (CUDA only). */
typedef struct {
    const char *precision;
    bool tf32, deterministic;
} backend_device_options;
backend_t *backend_device_create(const char *kind, int device, const backend_device_options *o,
                                 tt_err *err);
/* Devices of that kind (sim: as many as asked for, TT_MAX_SIM_DEVICES);
 * 0 with `reason` when there is none. */
int backend_device_count(const char *kind, char *reason, size_t reason_len);
/* The description of device `device` of that kind, without a backend. */
int backend_device_query(const char *kind, int device, backend_device_info *info, tt_err *err);

/* The simulated GPU (src/backend/sim/): a test device. */
#define TT_MAX_SIM_DEVICES 64
backend_t *backend_sim_create(int device, const char *precision, tt_err *err);
/* A simulated device's description (backend_device_query's "sim"). */
int backend_sim_device_info(int device, backend_device_info *info, tt_err *err);

/* The CPU backend (precision "fp32"): `threads` workers (>= 1) of the
 * process-wide pool. */
backend_t *backend_cpu_create(int device, int threads, tt_err *err);

/* The CPU backend in mixed precision (precision "bf16"): dense and conv2d
 * forward and backward in bf16 with float32 accumulation through oneDNN,
 * which runs them on AMX or AVX512_BF16, whichever this CPU has; the other
 * operations are the float32 ones. Fails with TT_ERR_USAGE, naming what is
 * missing, when this CPU or build cannot (backend_cpu_bf16_isa). */
backend_t *backend_cpu_create_bf16(int device, int threads, tt_err *err);

/* Why a job in precision "bf16" computes in fp32 on this CPU, though it has
 * bf16 kernels (backend_cpu_bf16_isa): bf16 would be slower here, by a rule
 * of the CPU's features alone (never timing: runs stay bitwise
 * repeatable; towertrain.cfg(5), precision): an Intel core with
 * AVX512_FP16 (Sapphire Rapids or later) where oneDNN has no AMX. NULL
 * where bf16 runs in bf16, and where the environment's TT_BF16_KERNELS is
 * "1" (the tests' switch: bf16's kernels on every CPU that has them). */
const char *backend_cpu_bf16_fp32_why(void);

/* What runs bf16 on this CPU: "AMX" or "AVX512_BF16" (oneDNN's choice at run
 * time; oneDNN's ONEDNN_MAX_CPU_ISA caps it), or NULL with `why` saying what
 * is missing. */
const char *backend_cpu_bf16_isa(char *why, size_t why_len);

/* Which kernels run bf16 on this CPU, for the log: "conv2d oneDNN, conv2d of
 * under 16 input channels and dense towertrain's vdpbf16ps kernels"
 * (AVX512_BF16 alone: conv_small.c and tile_gemm serve those), or "oneDNN,
 * conv2d of under 16 input channels towertrain's vdpbf16ps kernel" (AMX). */
const char *backend_cpu_bf16_engines(void);

/* The CPU kernels' instruction-set level, for the log and --version:
 * "avx2 (CPU: avx512, TT_CPU_ISA=avx2); oneDNN at AVX2" (cpu_isa.h), in buf. */
const char *backend_cpu_kernels(char *buf, size_t len);

/* Number of CUDA devices, 0 when the CUDA backend is not built or no device or
 * driver is present. reason (may be NULL) says why there is none. */
int backend_cuda_device_count(char *reason, size_t reason_len);

/* Backends this binary was built with, for --version: "cpu sim", "cpu sim cuda" */
const char *backend_list_built(void);

#endif

/* cuda_conv.c - conv2d through cuDNN: forward, backward data, backward
 * filter, with the algorithm of each pass chosen once per shape
 * (algo_cache.h says how) and its workspace from the tower's pool.
 *
 * Shapes: x [n, c, h, w], w [f, c, k, k], y [n, f, oh, ow], NCHW float,
 * cross-correlation as torch.nn.Conv2d. Bias and the fused relu are the
 * backend's own kernels (as on the CPU); the bias gradient is a fixed-order
 * reduction.
 *
 * cuDNN 9 keeps these legacy calls (deprecated, without warnings unless
 * CUDNN_WARN_DEPRECATED is defined); the graph API would replace them.
 *
 * Mixed precision (precision.h): x, w and dy are converted to the 16-bit
 * type in the backend's scratch region, and the three passes run on those
 * copies with a float32 convolution compute type (cuDNN's PSEUDO_BFLOAT16
 * and PSEUDO_HALF configurations: 16-bit tensors, float32 accumulation),
 * tensor-core math allowed; cuDNN writes y, dx and dw in the 16-bit type
 * and a kernel widens them to the float32 outputs. Bias, relu and the bias
 * gradient stay float32.
 *
 * NHWC (the blocked layout, cuda_nhwc.c): a call with a blocked x or y
 * runs all three tensors in NHWC (filters KRSC) in cuDNN, in bf16 for the
 * bf16 backend, in float32 for an fp32 one in float32 NHWC
 * (TT_CUDA_LAYOUT=nhwc; with tf32's math where the tower's tf32 is on, as
 * in NCHW). A blocked x is read and a blocked y written in place, with no
 * conversion, and so are their gradients where they have the
 * convolution's type (a blocked y's dy, a blocked x's dx: bf16 gradients,
 * blocked_bf16_grads, or float32 NHWC); an NCHW side, the filters, a bf16
 * call's float32 gradients dy and dx, and dw go through the copies
 * (precision.h), transposed where the layouts differ
 * (cuda_nhwc_kernels.cu): cuDNN writes dw as KRSC, a kernel transposes it
 * to the KCRS float32 gradient. A tower's filters are converted once per
 * step, at their first use, into the tower's weight copies
 * (weight_copies.h; KRSC for NHWC, float32 for float32 NHWC), which forward
 * and backward data read after that. The bias and relu of a blocked y
 * run on its NHWC rows [n * oh * ow, f], and its bias gradient is their
 * column sum (cuda_channel_sum: partial sums over ranges of rows in
 * parallel, in an order the shape fixes; an NCHW bias gradient too).
 * The search (cudnnFind*AlgorithmEx) starts from TENSOR_OP math for 16-bit
 * data, as PyTorch's does, and times the candidates on random operands:
 * zeros can run faster than real data and skew the ranking.
 *
 * Workspace: the model asks conv_workspace(max batch) once per layer at
 * setup and passes a buffer of at least the largest answer to every call.
 * The backend remembers that largest answer (conv_ws_budget) as the limit
 * for shapes first met later (a smaller last evaluation batch).
 */
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nhwc_kernels.h"

#include <stdio.h>

/* The most device memory one pass may use as workspace at setup. */
#define WS_CAP ((size_t)512 << 20)
#define MAX_ALGOS 16

/* The buffers a timing run (cudnnFind*AlgorithmEx) reads and overwrites:
 * for forward x, w -> y; backward data w, dy -> dx; backward filter x, dy -> dw. */
typedef struct {
    const void *x, *w, *dy; /* in the backend's type: float32 or the 16-bit copies */
    void *y, *dx, *dw;
    void *ws;
    size_t ws_bytes;
} conv_bufs;

static const char *pass_name(conv_pass p)
{
    return p == CONV_PASS_FORWARD         ? "forward"
           : p == CONV_PASS_BACKWARD_DATA ? "backward data"
                                          : "backward filter";
}

/* Tensor-core math: with tf32 for float32 data; always for 16-bit data,
 * whose products are exact in float32 (no TF32 rounding involved). */
static bool tensor_math_ok(const cuda_impl *c)
{
    return c->opt.tf32 || prec_reduced(c->prec, PREC_OP_CONV);
}

/* The math type an algorithm search starts from, as PyTorch's
 * ConvolutionDescriptor::set: TENSOR_OP for 16-bit data (DEFAULT would
 * leave the search to float kernels and TF32 ones: no bf16 tensor-core
 * kernel is tried, GPU_SPEED.md's C1); DEFAULT for float32 with tf32 (it
 * allows TF32 tensor cores); without tf32, FMA only (DEFAULT allows TF32 on
 * Ampere and later). */
static cudnnMathType_t search_math(const cuda_impl *c)
{
    if (prec_reduced(c->prec, PREC_OP_CONV))
        return CUDNN_TENSOR_OP_MATH;
    return c->opt.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/* The element type of the convolutions' operands (float32 or the 16-bit
 * copies'), for the timing runs' random data. */
static tt_elem_t conv_elem(const cuda_impl *c)
{
    if (!prec_reduced(c->prec, PREC_OP_CONV))
        return TT_ELEM_FLOAT;
    return c->prec == PREC_BF16 ? TT_ELEM_BF16 : TT_ELEM_FP16;
}

/* bytes of scratch filled with random values of the operands' type */
static int fill_random(cuda_impl *c, void *p, size_t bytes, uint64_t seed)
{
    tt_elem_t t = conv_elem(c);
    size_t n = bytes / (t == TT_ELEM_FLOAT ? sizeof(float) : 2);
    return cuda_ok(c, tt_k_fill_uniform(c->stream, n, t, seed, p), "random fill kernel");
}

/* x, y and w in the backend's type (float32 or the 16-bit copies'); the
 * convolution computes in float32 either way */
/* A call with a blocked side runs in bf16 NHWC (above). */
static bool conv_nhwc(const window_desc *d)
{
    return d->blocked_x || d->blocked_y;
}

/* ... and its descriptors say so: the dimensions stay (n, c, h, w) and
 * (k, c, r, s), the memory order is NHWC / KRSC */
static int set_descs(cuda_impl *c, const window_desc *d, int math_type)
{
    cudnnStatus_t rc;
    cudnnDataType_t t = cuda_dnn_type(prec_reduced(c->prec, PREC_OP_CONV) ? c->prec : PREC_FP32);
    cudnnTensorFormat_t f = conv_nhwc(d) ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    rc = cu.cudnnSetTensor4dDescriptor(c->x_desc, f, t, d->n, d->c, d->h, d->w);
    if (cudnn_ok(c, rc, "cudnnSetTensor4dDescriptor (x)") != 0)
        return -1;
    rc = cu.cudnnSetTensor4dDescriptor(c->y_desc, f, t, d->n, d->f, d->oh, d->ow);
    if (cudnn_ok(c, rc, "cudnnSetTensor4dDescriptor (y)") != 0)
        return -1;
    rc = cu.cudnnSetFilter4dDescriptor(c->w_desc, t, f, d->f, d->c, d->k, d->k);
    if (cudnn_ok(c, rc, "cudnnSetFilter4dDescriptor") != 0)
        return -1;
    rc = cu.cudnnSetConvolution2dDescriptor(c->conv_desc, d->pad, d->pad, d->stride, d->stride, 1,
                                            1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
    if (cudnn_ok(c, rc, "cudnnSetConvolution2dDescriptor") != 0)
        return -1;
    rc = cu.cudnnSetConvolutionMathType(c->conv_desc, (cudnnMathType_t)math_type);
    return cudnn_ok(c, rc, "cudnnSetConvolutionMathType");
}

/* One candidate of any pass as algo_perf. */
static algo_perf perf_of(int algo, cudnnStatus_t status, float time, size_t memory,
                         cudnnDeterminism_t det, cudnnMathType_t math)
{
    algo_perf p = {.algo = algo,
                   .ok = status == CUDNN_STATUS_SUCCESS,
                   .time_ms = time,
                   .memory = memory,
                   .deterministic = det == CUDNN_DETERMINISTIC,
                   .tensor_math = math != CUDNN_FMA_MATH,
                   .math_type = (int)math};
    return p;
}

/* The candidates of a pass in cuDNN's order: timed on b's buffers when b is
 * given (fastest first), else ranked by cuDNN's heuristics. */
static int rank_candidates(cuda_impl *c, conv_pass pass, const conv_bufs *b, algo_perf *out, int *n)
{
    int got = 0;
    cudnnStatus_t rc;
    if (pass == CONV_PASS_FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t r[MAX_ALGOS];
        rc = b != NULL
                 ? cu.cudnnFindConvolutionForwardAlgorithmEx(c->cudnn, c->x_desc, b->x, c->w_desc,
                                                             b->w, c->conv_desc, c->y_desc, b->y,
                                                             MAX_ALGOS, &got, r, b->ws, b->ws_bytes)
                 : cu.cudnnGetConvolutionForwardAlgorithm_v7(
                       c->cudnn, c->x_desc, c->w_desc, c->conv_desc, c->y_desc, MAX_ALGOS, &got, r);
        for (int i = 0; rc == CUDNN_STATUS_SUCCESS && i < got; i++)
            out[i] = perf_of(r[i].algo, r[i].status, r[i].time, r[i].memory, r[i].determinism,
                             r[i].mathType);
    } else if (pass == CONV_PASS_BACKWARD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[MAX_ALGOS];
        rc = b != NULL
                 ? cu.cudnnFindConvolutionBackwardDataAlgorithmEx(
                       c->cudnn, c->w_desc, b->w, c->y_desc, b->dy, c->conv_desc, c->x_desc, b->dx,
                       MAX_ALGOS, &got, r, b->ws, b->ws_bytes)
                 : cu.cudnnGetConvolutionBackwardDataAlgorithm_v7(
                       c->cudnn, c->w_desc, c->y_desc, c->conv_desc, c->x_desc, MAX_ALGOS, &got, r);
        for (int i = 0; rc == CUDNN_STATUS_SUCCESS && i < got; i++)
            out[i] = perf_of(r[i].algo, r[i].status, r[i].time, r[i].memory, r[i].determinism,
                             r[i].mathType);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[MAX_ALGOS];
        rc = b != NULL
                 ? cu.cudnnFindConvolutionBackwardFilterAlgorithmEx(
                       c->cudnn, c->x_desc, b->x, c->y_desc, b->dy, c->conv_desc, c->w_desc, b->dw,
                       MAX_ALGOS, &got, r, b->ws, b->ws_bytes)
                 : cu.cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                       c->cudnn, c->x_desc, c->y_desc, c->conv_desc, c->w_desc, MAX_ALGOS, &got, r);
        for (int i = 0; rc == CUDNN_STATUS_SUCCESS && i < got; i++)
            out[i] = perf_of(r[i].algo, r[i].status, r[i].time, r[i].memory, r[i].determinism,
                             r[i].mathType);
    }
    *n = got;
    return cudnn_ok(
        c, rc, b != NULL ? "cudnnFindConvolution*AlgorithmEx" : "cudnnGetConvolution*Algorithm_v7");
}

/* The workspace cuDNN asks for the algorithm on the descriptors as set. */
static int query_ws(cuda_impl *c, conv_pass pass, int algo, size_t *bytes)
{
    *bytes = 0;
    if (pass == CONV_PASS_FORWARD)
        return cudnn_ok(c,
                        cu.cudnnGetConvolutionForwardWorkspaceSize(
                            c->cudnn, c->x_desc, c->w_desc, c->conv_desc, c->y_desc,
                            (cudnnConvolutionFwdAlgo_t)algo, bytes),
                        "cudnnGetConvolutionForwardWorkspaceSize");
    if (pass == CONV_PASS_BACKWARD_DATA)
        return cudnn_ok(c,
                        cu.cudnnGetConvolutionBackwardDataWorkspaceSize(
                            c->cudnn, c->w_desc, c->y_desc, c->conv_desc, c->x_desc,
                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes),
                        "cudnnGetConvolutionBackwardDataWorkspaceSize");
    return cudnn_ok(c,
                    cu.cudnnGetConvolutionBackwardFilterWorkspaceSize(
                        c->cudnn, c->x_desc, c->y_desc, c->conv_desc, c->w_desc,
                        (cudnnConvolutionBwdFilterAlgo_t)algo, bytes),
                    "cudnnGetConvolutionBackwardFilterWorkspaceSize");
}

/* The algorithm of a pass for a shape, from the cache or chosen now (with
 * the descriptors then set for it). NULL after recording an error. */
static const algo_choice *choose(cuda_impl *c, conv_pass pass, const window_desc *d,
                                 const conv_bufs *b, size_t ws_limit)
{
    bool tensor = tensor_math_ok(c);
    algo_key key = algo_key_make(pass, d, tensor, c->opt.deterministic);
    key.nhwc = conv_nhwc(d);
    const algo_choice *found = algo_cache_find(c->algos, &key);
    if (found != NULL)
        return set_descs(c, d, found->math_type) == 0 ? found : NULL;
    if (set_descs(c, d, search_math(c)) != 0)
        return NULL;
    algo_perf perf[MAX_ALGOS];
    int n = 0;
    if (rank_candidates(c, pass, c->opt.deterministic ? NULL : b, perf, &n) != 0)
        return NULL;
    /* the first that qualifies, unless the workspace cuDNN then asks for
     * the descriptors as set exceeds the limit: then the next one */
    algo_choice ch;
    for (;;) {
        int i = algo_pick(perf, n, c->opt.deterministic, tensor, ws_limit);
        if (i < 0) {
            c->failed = true;
            err_set(&c->err, TT_ERR_RUNTIME,
                    "cuda:%d: cuDNN has no %s%salgorithm for %s conv2d %s of [%d, %d, %d, %d] "
                    "with %d filters %dx%d, stride %d, padding %d within %zu bytes of workspace",
                    c->device, c->opt.deterministic ? "deterministic " : "",
                    tensor ? "" : "FMA (no TF32) ", prec_name(c->prec), pass_name(pass), d->n,
                    d->c, d->h, d->w, d->f, d->k, d->k, d->stride, d->pad, ws_limit);
            return NULL;
        }
        ch = (algo_choice){.algo = perf[i].algo,
                           .math_type = perf[i].math_type,
                           .ws_bytes = perf[i].memory,
                           .time_ms = perf[i].time_ms};
        size_t asked;
        if (set_descs(c, d, ch.math_type) != 0 || query_ws(c, pass, ch.algo, &asked) != 0)
            return NULL;
        if (asked > ch.ws_bytes)
            ch.ws_bytes = asked;
        if (ch.ws_bytes <= ws_limit)
            break;
        perf[i].ok = false;
    }
    if (algo_cache_put(c->algos, &key, &ch) != 0) {
        c->failed = true;
        err_set(&c->err, TT_ERR_RUNTIME, "out of host memory");
        return NULL;
    }
    return algo_cache_find(c->algos, &key);
}

/* The layout of a call's cuDNN tensors: NHWC for a call with a blocked side */
static cg_layout layout_of(const window_desc *d)
{
    return conv_nhwc(d) ? CG_LAYOUT_NHWC : CG_LAYOUT_NCHW;
}

/* The graph API's hook (cuda_conv_graph.c), for operands in d's layout.
 * Runs the pass with the graph API's plan when it has one at least as
 * fast as the legacy API's choice `legacy`; false: the legacy API runs it. */
static bool graph_ran(cuda_impl *c, conv_pass pass, const window_desc *d,
                      const algo_choice *legacy, const void *x, const void *w, const void *y,
                      void *ws, size_t limit)
{
    cg_ptrs p = {(void *)x, (void *)w, (void *)y};
    cg_layout lay = layout_of(d);
    const algo_choice *g = cuda_conv_graph_plan(c, pass, d, lay, &p, ws, limit, legacy->time_ms);
    return g != NULL && cuda_conv_graph_run(c, pass, d, lay, g, &p, ws) == 0;
}

/* At setup, for the model's largest batch: chooses the three passes and
 * returns the largest workspace they need. Timing runs (deterministic =
 * false) get scratch buffers from the pool, returned at once. */
size_t cuda_conv_workspace(backend_t *be, const window_desc *d)
{
    cuda_impl *c = cuda_of(be);
    if (!cuda_begin(be))
        return 0;
    size_t free_b = 0, total_b = 0;
    if (cuda_ok(c, cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo") != 0)
        return 0;
    size_t limit = free_b / 8 < WS_CAP ? free_b / 8 : WS_CAP;
    /* mixed precision: the 16-bit copies of this shape, reserved now */
    prec_conv_copies l;
    prec_conv_copies_of(c->prec, d, c->grads16, &l);
    if (l.bytes_no_w > 0 && cuda_copies(c, l.bytes_no_w) == NULL)
        return 0;
    conv_bufs bufs = {0}, *b = NULL;
    void *tmp[4] = {NULL, NULL, NULL, NULL};
    if (!c->opt.deterministic) {
        tt_err ignore = {0};
        size_t xs = (size_t)d->n * d->c * d->h * d->w * sizeof(float);
        size_t wsz = (size_t)d->f * d->c * d->k * d->k * sizeof(float);
        size_t ys = (size_t)d->n * d->f * d->oh * d->ow * sizeof(float);
        tmp[0] = mem_pool_alloc(c->pool, xs, &ignore);
        tmp[1] = mem_pool_alloc(c->pool, wsz, &ignore);
        tmp[2] = mem_pool_alloc(c->pool, ys, &ignore);
        tmp[3] = limit > 0 ? mem_pool_alloc(c->pool, limit, &ignore) : NULL;
        if (tmp[0] && tmp[1] && tmp[2] && (tmp[3] || limit == 0) &&
            fill_random(c, tmp[0], xs, 1) == 0 && fill_random(c, tmp[1], wsz, 2) == 0 &&
            fill_random(c, tmp[2], ys, 3) == 0) {
            /* x doubles as dx, w as dw, y as dy: a timing run's outputs are scratch */
            bufs = (conv_bufs){.x = tmp[0],
                               .w = tmp[1],
                               .dy = tmp[2],
                               .y = tmp[2],
                               .dx = tmp[0],
                               .dw = tmp[1],
                               .ws = tmp[3],
                               .ws_bytes = limit};
            b = &bufs;
        }
        /* else not enough memory to time: cuDNN's heuristics choose (b = NULL) */
    }
    size_t need = 0;
    for (int p = CONV_PASS_FORWARD; p <= CONV_PASS_BACKWARD_FILTER; p++) {
        const algo_choice *ch = choose(c, (conv_pass)p, d, b, limit);
        if (ch == NULL)
            break;
        if (ch->ws_bytes > need)
            need = ch->ws_bytes;
        /* and the graph API's plan, timed on the same scratch */
        cg_ptrs gp = {tmp[0], tmp[1], tmp[2]};
        const algo_choice *g = b == NULL ? NULL
                                         : cuda_conv_graph_plan(c, (conv_pass)p, d, layout_of(d),
                                                                &gp, tmp[3], limit, ch->time_ms);
        if (g != NULL && g->ws_bytes > need)
            need = g->ws_bytes;
    }
    /* the scratch may be reused only after the timing runs are done */
    cuda_wait(be, "algorithm search");
    for (int i = 0; i < 4; i++)
        mem_pool_free(c->pool, tmp[i]);
    if (need > c->conv_ws_budget)
        c->conv_ws_budget = need;
    return need;
}

/* The scratch region of a call's 16-bit copies, and w's copy when asked
 * (*w16): the tower's copy of this step (cuda_weight_copy; KRSC for NHWC),
 * else converted at this call into the region's w place. NULL after an
 * error. */
static char *copies_and_w(cuda_impl *c, const window_desc *d, const float *w, bool krsc,
                          prec_conv_copies *l, const void **w16)
{
    prec_conv_copies_of(c->prec, d, c->grads16, l);
    const void *copy = NULL;
    *w16 = NULL;
    if (w != NULL && cuda_weight_copy(c, w, d->f, d->c, d->k * d->k, krsc, &copy) != 0)
        return NULL;
    bool own_w = w != NULL && copy == NULL;
    char *h = cuda_copies(c, own_w ? l->bytes : l->bytes_no_w);
    if (h == NULL)
        return NULL;
    *w16 = own_w ? h + l->w : copy;
    if (own_w && cuda_weight_convert(c, w, d->f, d->c, d->k * d->k, krsc, h + l->w) != 0)
        return NULL;
    return h;
}

/* Mixed precision: the 16-bit copies of this call, x converted when asked,
 * w's copy in *w16 when asked; NULL after an error. */
static char *conv_copies(cuda_impl *c, const window_desc *d, const float *x, const float *w,
                         prec_conv_copies *l, const void **w16)
{
    char *h = copies_and_w(c, d, w, false, l, w16);
    size_t xs = (size_t)d->n * d->c * d->h * d->w;
    if (h == NULL || (x != NULL && cuda_to_half(c, xs, x, h + l->x) != 0))
        return NULL;
    return h;
}

/* ---- NHWC (a blocked side; the file's header says how): bf16, or
 * float32 for an fp32 tower in float32 NHWC ---- */

/* The NHWC tensors' type: bf16 (the bf16 backend), else float32 */
static bool nhwc_bf16(const cuda_impl *c)
{
    return c->prec == PREC_BF16;
}

/* The copies of an NHWC call: w's KRSC copy in *w16 when asked, an NCHW x
 * as NHWC when asked and x is not blocked; NULL after an error. */
static char *nhwc_copies(cuda_impl *c, const window_desc *d, const float *x, const float *w,
                         prec_conv_copies *l, const void **w16)
{
    char *h = copies_and_w(c, d, w, true, l, w16);
    if (h == NULL)
        return NULL;
    int hw = d->h * d->w;
    if (x != NULL && !d->blocked_x &&
        cuda_ok(c, tt_k_nchw_to_nhwc(c->stream, nhwc_bf16(c), d->n, d->c, hw, x, h + l->x),
                "conv input to NHWC kernel") != 0)
        return NULL;
    return h;
}

static void conv_forward_nhwc(cuda_impl *c, const window_desc *d, const float *x,
                              const float *w, const float *b, bool relu, float *y, void *ws)
{
    size_t limit = ws != NULL ? c->conv_ws_budget : 0;
    int ohw = d->oh * d->ow;
    prec_conv_copies l;
    const void *w16 = NULL;
    char *h = nhwc_copies(c, d, x, w, &l, &w16);
    if (h == NULL)
        return;
    conv_bufs bufs = {.x = d->blocked_x ? (const void *)x : h + l.x,
                      .w = w16,
                      .y = d->blocked_y ? (void *)y : h + l.y,
                      .ws = ws,
                      .ws_bytes = limit};
    const algo_choice *ch = choose(c, CONV_PASS_FORWARD, d, &bufs, limit);
    const float one = 1.0f, zero = 0.0f;
    if (ch == NULL ||
        (!graph_ran(c, CONV_PASS_FORWARD, d, ch, bufs.x, bufs.w, bufs.y, ws, limit) &&
         cudnn_ok(c,
                  cu.cudnnConvolutionForward(c->cudnn, &one, c->x_desc, bufs.x, c->w_desc, bufs.w,
                                             c->conv_desc, (cudnnConvolutionFwdAlgo_t)ch->algo,
                                             ws, ch->ws_bytes, &zero, c->y_desc, bufs.y),
                  "cudnnConvolutionForward (NHWC)") != 0))
        return;
    if (d->blocked_y) { /* bias and relu on the NHWC output [n * ohw, f], in place */
        int rows = d->n * ohw;
        cuda_ok(c, nhwc_bf16(c) ? tt_k_bias_relu_nhwc_bf16(c->stream, rows, d->f, b, relu, y)
                                : tt_k_bias_relu(c->stream, rows, d->f, 1, b, relu, y),
                "conv bias/relu kernel (NHWC)");
        return;
    }
    if (cuda_ok(c, tt_k_nhwc_to_nchw(c->stream, nhwc_bf16(c), d->n, d->f, ohw, h + l.y, y),
                "conv output to NCHW kernel") != 0)
        return;
    cuda_ok(c, tt_k_bias_relu(c->stream, d->n, d->f, ohw, b, relu, y), "conv bias/relu kernel");
}

/* A blocked y's gradient dy in the convolution's type (bf16 with bf16
 * gradients, backend.h: blocked_bf16_grads; float32 in float32 NHWC):
 * masked by the relu in place and its bias gradient (dy is [n * ohw, f]:
 * a column sum); cuDNN reads it as it is. */
static int nhwc_dy_in_place(cuda_impl *c, const window_desc *d, const float *y, bool relu,
                            float *dy, float *db)
{
    int rows = d->n * d->oh * d->ow;
    size_t out = (size_t)rows * d->f;
    bool b16 = nhwc_bf16(c);
    if (relu && cuda_ok(c, b16 ? tt_k_relu_back_bf16(c->stream, true, out, y, dy, dy)
                               : tt_k_relu_backward(c->stream, out, y, dy, dy),
                        "relu mask kernel (NHWC gradient)") != 0)
        return -1;
    if (db != NULL && cuda_channel_sum(c, b16, rows, d->f, 1, dy, db) != 0)
        return -1;
    return 0;
}

/* The float32 gradient dy of a bf16 call's y (blocked bf16, or NCHW) or
 * of a float32 call's NCHW y: masked by the relu, its bias gradient, and
 * dy as NHWC in the copies; -1 after an error */
static int nhwc_dy(cuda_impl *c, const window_desc *d, const float *y, bool relu, float *dy,
                   float *db, void *dy_nhwc)
{
    int ohw = d->oh * d->ow;
    size_t out = (size_t)d->n * d->f * ohw;
    if (relu && cuda_ok(c, d->blocked_y ? tt_k_relu_back_bf16(c->stream, false, out, y, dy, dy)
                                        : tt_k_relu_backward(c->stream, out, y, dy, dy),
                        "relu mask kernel") != 0)
        return -1;
    /* NHWC dy is [n * ohw, f], NCHW [n, f, ohw] */
    if (db != NULL && (d->blocked_y ? cuda_channel_sum(c, false, d->n * ohw, d->f, 1, dy, db)
                                    : cuda_channel_sum(c, false, d->n, d->f, ohw, dy, db)) != 0)
        return -1;
    if (d->blocked_y)
        return cuda_to_half(c, out, dy, dy_nhwc);
    return cuda_ok(c, tt_k_nchw_to_nhwc(c->stream, nhwc_bf16(c), d->n, d->f, ohw, dy, dy_nhwc),
                   "conv gradient to NHWC kernel");
}

/* Backward filter first, then backward data into x's copy (read by then),
 * or with gradients in the convolution's type (bf16 gradients, g16, or
 * float32 NHWC) into a blocked x's gradient dx directly, from a blocked
 * y's dy read in place */
static void conv_backward_nhwc(cuda_impl *c, bool g16, const window_desc *d, const float *x,
                               const float *w, const float *y, bool relu, float *dy, float *dx,
                               float *dw, float *db, void *ws)
{
    size_t limit = ws != NULL ? c->conv_ws_budget : 0;
    const float one = 1.0f, zero = 0.0f;
    prec_conv_copies l;
    const void *w16 = NULL;
    bool in_place = g16 || !nhwc_bf16(c);
    bool dy_in = in_place && d->blocked_y, dx_in = in_place && d->blocked_x;
    char *h = nhwc_copies(c, d, dw != NULL ? x : NULL, dx != NULL ? w : NULL, &l, &w16);
    if (h == NULL || (dy_in ? nhwc_dy_in_place(c, d, y, relu, dy, db)
                            : nhwc_dy(c, d, y, relu, dy, db, h + l.y)) != 0)
        return;
    const void *xa = d->blocked_x ? (const void *)x : h + l.x;
    const void *dya = dy_in ? (const void *)dy : h + l.y;
    void *dxa = dx_in ? (void *)dx : h + l.x;
    if (dw != NULL) {
        conv_bufs bufs = {.x = xa, .dy = dya, .dw = h + l.dw, .ws = ws, .ws_bytes = limit};
        const algo_choice *ch = choose(c, CONV_PASS_BACKWARD_FILTER, d, &bufs, limit);
        if (ch == NULL ||
            (!graph_ran(c, CONV_PASS_BACKWARD_FILTER, d, ch, xa, h + l.dw, dya, ws, limit) &&
             cudnn_ok(c,
                      cu.cudnnConvolutionBackwardFilter(
                          c->cudnn, &one, c->x_desc, xa, c->y_desc, dya, c->conv_desc,
                          (cudnnConvolutionBwdFilterAlgo_t)ch->algo, ws, ch->ws_bytes, &zero,
                          c->w_desc, h + l.dw),
                      "cudnnConvolutionBackwardFilter (NHWC)") != 0) ||
            cuda_ok(c,
                    tt_k_nhwc_to_nchw(c->stream, nhwc_bf16(c), d->f, d->c, d->k * d->k,
                                      h + l.dw, dw),
                    "conv filter gradient to KCRS kernel") != 0)
            return;
    }
    if (dx == NULL)
        return;
    conv_bufs bufs = {.w = w16, .dy = dya, .dx = dxa, .ws = ws, .ws_bytes = limit};
    const algo_choice *ch = choose(c, CONV_PASS_BACKWARD_DATA, d, &bufs, limit);
    if (ch == NULL ||
        (!graph_ran(c, CONV_PASS_BACKWARD_DATA, d, ch, dxa, w16, dya, ws, limit) &&
         cudnn_ok(c,
                  cu.cudnnConvolutionBackwardData(c->cudnn, &one, c->w_desc, w16, c->y_desc,
                                                  dya, c->conv_desc,
                                                  (cudnnConvolutionBwdDataAlgo_t)ch->algo, ws,
                                                  ch->ws_bytes, &zero, c->x_desc, dxa),
                  "cudnnConvolutionBackwardData (NHWC)") != 0))
        return;
    if (dx_in) /* cuDNN wrote the gradient in place */
        return;
    /* a float32 gradient, in x's layout (a blocked x's: bf16's float32 gradients) */
    if (d->blocked_x)
        cuda_from_half(c, (size_t)d->n * d->c * d->h * d->w, h + l.x, dx);
    else
        cuda_ok(c,
                tt_k_nhwc_to_nchw(c->stream, nhwc_bf16(c), d->n, d->c, d->h * d->w, h + l.x, dx),
                "conv input gradient to NCHW kernel");
}

void cuda_conv_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                       const float *b, bool relu, float *y, void *ws)
{
    cuda_impl *c = cuda_of(be);
    if (d->n <= 0 || !cuda_begin(be))
        return;
    if (conv_nhwc(d)) {
        conv_forward_nhwc(c, d, x, w, b, relu, y, ws);
        return;
    }
    size_t limit = ws != NULL ? c->conv_ws_budget : 0;
    size_t ys = (size_t)d->n * d->f * d->oh * d->ow;
    conv_bufs bufs = {.x = x, .w = w, .y = y, .ws = ws, .ws_bytes = limit};
    prec_conv_copies l;
    char *h = NULL;
    if (prec_reduced(c->prec, PREC_OP_CONV)) {
        if ((h = conv_copies(c, d, x, w, &l, &bufs.w)) == NULL)
            return;
        bufs.x = h + l.x;
        bufs.y = h + l.y;
    }
    const algo_choice *ch = choose(c, CONV_PASS_FORWARD, d, &bufs, limit);
    const float one = 1.0f, zero = 0.0f;
    if (ch == NULL)
        return;
    if (!graph_ran(c, CONV_PASS_FORWARD, d, ch, bufs.x, bufs.w, bufs.y, ws, limit) &&
        cudnn_ok(c,
                 cu.cudnnConvolutionForward(c->cudnn, &one, c->x_desc, bufs.x, c->w_desc, bufs.w,
                                            c->conv_desc, (cudnnConvolutionFwdAlgo_t)ch->algo, ws,
                                            ch->ws_bytes, &zero, c->y_desc, bufs.y),
                 "cudnnConvolutionForward") != 0)
        return;
    if (h != NULL && cuda_from_half(c, ys, h + l.y, y) != 0)
        return;
    cuda_ok(c, tt_k_bias_relu(c->stream, d->n, d->f, d->oh * d->ow, b, relu, y),
            "conv bias/relu kernel");
}

/* Backward filter first, then backward data: with 16-bit copies dx takes
 * x's place, which backward filter has read by then (one stream). */
void cuda_conv_backward(backend_t *be, const window_desc *d, const float *x, const float *w,
                        const float *y, bool relu, float *dy, float *dx, float *dw, float *db,
                        void *ws)
{
    cuda_impl *c = cuda_of(be);
    if (d->n <= 0 || !cuda_begin(be))
        return;
    if (conv_nhwc(d)) {
        conv_backward_nhwc(c, be->blocked_bf16_grads, d, x, w, y, relu, dy, dx, dw, db, ws);
        return;
    }
    size_t out = (size_t)d->n * d->f * d->oh * d->ow;
    size_t xs = (size_t)d->n * d->c * d->h * d->w, wn = (size_t)d->f * d->c * d->k * d->k;
    if (relu && cuda_ok(c, tt_k_relu_backward(c->stream, out, y, dy, dy), "relu mask kernel") != 0)
        return;
    if (db != NULL && cuda_channel_sum(c, false, d->n, d->f, d->oh * d->ow, dy, db) != 0)
        return;
    if (dw == NULL && dx == NULL)
        return;
    size_t limit = ws != NULL ? c->conv_ws_budget : 0;
    const float one = 1.0f, zero = 0.0f;
    /* the operands and results of the passes, float32 or the 16-bit copies */
    const void *xa = x, *wa = w, *dya = dy;
    void *dxa = dx, *dwa = dw;
    prec_conv_copies l;
    char *h = NULL;
    if (prec_reduced(c->prec, PREC_OP_CONV)) {
        if ((h = conv_copies(c, d, dw != NULL ? x : NULL, dx != NULL ? w : NULL, &l, &wa)) ==
                NULL ||
            cuda_to_half(c, out, dy, h + l.y) != 0)
            return;
        xa = h + l.x;
        dya = h + l.y;
        dxa = h + l.x;
        dwa = h + l.dw;
    }
    if (dw != NULL) {
        conv_bufs bufs = {.x = xa, .dy = dya, .dw = dwa, .ws = ws, .ws_bytes = limit};
        const algo_choice *ch = choose(c, CONV_PASS_BACKWARD_FILTER, d, &bufs, limit);
        if (ch == NULL)
            return;
        if (!graph_ran(c, CONV_PASS_BACKWARD_FILTER, d, ch, xa, dwa, dya, ws, limit) &&
            cudnn_ok(c,
                                   cu.cudnnConvolutionBackwardFilter(
                                       c->cudnn, &one, c->x_desc, xa, c->y_desc, dya, c->conv_desc,
                                       (cudnnConvolutionBwdFilterAlgo_t)ch->algo, ws, ch->ws_bytes,
                                       &zero, c->w_desc, dwa),
                                   "cudnnConvolutionBackwardFilter") != 0)
            return;
        if (h != NULL && cuda_from_half(c, wn, dwa, dw) != 0)
            return;
    }
    if (dx != NULL) {
        conv_bufs bufs = {.w = wa, .dy = dya, .dx = dxa, .ws = ws, .ws_bytes = limit};
        const algo_choice *ch = choose(c, CONV_PASS_BACKWARD_DATA, d, &bufs, limit);
        if (ch == NULL)
            return;
        if (!graph_ran(c, CONV_PASS_BACKWARD_DATA, d, ch, dxa, wa, dya, ws, limit) &&
            cudnn_ok(c,
                     cu.cudnnConvolutionBackwardData(c->cudnn, &one, c->w_desc, wa, c->y_desc, dya,
                                                     c->conv_desc,
                                                     (cudnnConvolutionBwdDataAlgo_t)ch->algo, ws,
                                                     ch->ws_bytes, &zero, c->x_desc, dxa),
                     "cudnnConvolutionBackwardData") != 0)
            return;
        if (h != NULL)
            cuda_from_half(c, xs, dxa, dx);
    }
}

/* cuda_backend.c - the CUDA backend: one instance per GPU tower, with its
 * device, stream, cuBLAS and cuDNN handles and memory pool; memory
 * operations, dense layers through cuBLAS, and the element-wise, loss and
 * optimizer operations through the kernels of cuda_kernels.cu.
 *
 * Every operation is queued on the tower's stream and returns without
 * waiting, except upload, download and the host checks (all_finite, sumsq),
 * whose results the host reads at once; loss_read waits for the loss
 * alone.
 * Every CUDA and cuBLAS status is checked (cuda_check.c).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "backend/cuda/cuda_impl.h"

/* Chunks of device memory the pool reserves at a time (larger requests get
 * their own): few cudaMalloc calls, little waste. */
#define POOL_CHUNK ((size_t)64 << 20)

/* ---- devices ---- */

/* Why the runtime found no device, in words a user can act on: without a
 * driver at all the runtime says "driver version is insufficient". */
static void no_device_reason(cudaError_t rc, char *reason, size_t reason_len)
{
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == NULL && rc == cudaErrorInsufficientDriver)
        snprintf(reason, reason_len, "CUDA: no NVIDIA driver (libcuda.so.1 not found)");
    else
        snprintf(reason, reason_len, "CUDA: %s (%s)", cudaGetErrorString(rc), cudaGetErrorName(rc));
    if (driver != NULL)
        dlclose(driver);
}

int backend_cuda_device_count(char *reason, size_t reason_len)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        if (reason != NULL && reason_len > 0)
            no_device_reason(rc, reason, reason_len);
        cudaGetLastError(); /* not sticky: forget it */
        return 0;
    }
    if (n == 0 && reason != NULL && reason_len > 0)
        snprintf(reason, reason_len, "CUDA: no device found");
    return n;
}

int backend_cuda_device_info(int device, cuda_device_info *info, tt_err *err)
{
    memset(info, 0, sizeof(*info));
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        char why[160];
        no_device_reason(rc, why, sizeof(why));
        cudaGetLastError();
        return err_set(err, TT_ERR_USAGE, "cuda:%d: no usable GPU: %s", device, why);
    }
    if (device < 0 || device >= n)
        return err_set(err, TT_ERR_USAGE,
                       "cuda:%d: no such device: this machine has %d GPU(s) "
                       "(cudaErrorInvalidDevice)",
                       device, n);
    struct cudaDeviceProp p;
    if (cuda_check_err(cudaGetDeviceProperties(&p, device), device, "cudaGetDeviceProperties",
                       TT_ERR_USAGE, err) != 0)
        return -1;
    snprintf(info->name, sizeof(info->name), "%s", p.name);
    info->major = p.major;
    info->minor = p.minor;
    info->total_bytes = p.totalGlobalMem;
    info->sm_count = p.multiProcessorCount;
    snprintf(info->pci_bus_id, sizeof(info->pci_bus_id), "%04x:%02x:%02x.0",
             (unsigned)p.pciDomainID, (unsigned)p.pciBusID, (unsigned)p.pciDeviceID);
    /* No cudaSetDevice here (nor its "restore", which made a context on
     * GPU 0 in every process whatever its towers: cudaGetDevice says 0 when
     * no device was ever set); the free memory is reported where a backend
     * on the device fails to allocate (device_reserve). */
    return 0;
}

const char *backend_cuda_build_info(void)
{
    static char buf[160];
    snprintf(buf, sizeof(buf), "cuda: %s (CUDA %d.%d, cuDNN %d.%d.%d, NCCL %d.%d.%d)",
             TT_CUDA_ARCHS, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, CUDNN_MAJOR,
             CUDNN_MINOR, CUDNN_PATCHLEVEL, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    return buf;
}

/* ---- the pool's source: cudaMalloc on the tower's device ---- */

static void *device_reserve(void *ctx, size_t bytes, char *why, size_t why_len)
{
    cuda_impl *c = ctx;
    void *p = NULL;
    cudaError_t rc = cudaSetDevice(c->device);
    if (rc == cudaSuccess)
        rc = cudaMalloc(&p, bytes);
    if (rc == cudaSuccess)
        return p;
    cudaGetLastError(); /* an allocation failure is not sticky */
    size_t free_b = 0, total_b = 0;
    char fb[32] = "?", tb[32] = "?";
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        mem_format_bytes(free_b, fb, sizeof(fb));
        mem_format_bytes(total_b, tb, sizeof(tb));
    }
    cudaGetLastError();
    snprintf(why, why_len, "cudaMalloc: %s (%s free of %s)", cudaGetErrorString(rc), fb, tb);
    return NULL;
}

static void device_release(void *ctx, void *chunk)
{
    cuda_impl *c = ctx;
    if (cudaSetDevice(c->device) == cudaSuccess)
        cuda_ok(c, cudaFree(chunk), "cudaFree");
}

/* ---- memory operations ---- */

static void *cuda_alloc(backend_t *be, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (!cuda_begin(be))
        return NULL;
    tt_err err = {0};
    void *p = mem_pool_alloc(c->pool, bytes, &err);
    if (p == NULL) {
        /* not a failure of the backend: the caller reports it */
        snprintf(c->alloc_error, sizeof(c->alloc_error), "%s", err.msg);
        return NULL;
    }
    if (cuda_ok(c, cudaMemsetAsync(p, 0, bytes, c->stream), "cudaMemsetAsync") != 0)
        return NULL;
    return p;
}

static void cuda_free(backend_t *be, void *p)
{
    mem_pool_free(cuda_of(be)->pool, p);
}

/* Host to device, in stream order; the call waits for the copy, so the
 * caller may reuse the buffer (pinned or pageable, below). */
static void cuda_upload(backend_t *be, void *dst, const void *host_src, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (bytes == 0 || cuda_capture_refuse(c, "an upload from pageable host memory") ||
        !cuda_begin(be))
        return;
    /* CUDA's API synchronization notes say a cudaMemcpyAsync between
     * device and pageable memory only "might be synchronous": nothing
     * promises the source was read on return (async's lock relies on it),
     * so the call waits for pageable sources too */
    if (cuda_ok(c, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream),
                "cudaMemcpyAsync (upload)") == 0)
        cuda_wait(be, "upload");
}

static void cuda_download(backend_t *be, void *host_dst, const void *src, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (bytes == 0)
        return;
    if (cuda_capture_refuse(c, "a download")) {
        memset(host_dst, 0, bytes);
        return;
    }
    if (!cuda_begin(be) ||
        cuda_ok(c, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
                "cudaMemcpyAsync (download)") != 0 ||
        cuda_wait(be, "download") != 0)
        memset(host_dst, 0, bytes); /* never leave the caller undefined bytes */
}

/* Device to device in stream order; with unified addressing the runtime
 * finds where each pointer lives, so the source may be another GPU's memory
 * (a peer copy: the parameter server's ranges). The caller orders it after
 * the other device's writes. */
static void cuda_copy(backend_t *be, void *dst, const void *src, size_t bytes)
{
    cuda_impl *c = cuda_of(be);
    if (bytes == 0 || dst == src || !cuda_begin(be))
        return;
    cuda_ok(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream),
            "cudaMemcpyAsync (copy)");
}

/* ---- dense through cuBLAS ----
 * cuBLAS is column-major: a row-major [r, c] matrix is its transpose, a
 * column-major [c, r]. So y[n,out] = x[n,in] w[out,in]^T is, column-major,
 * y^T[out,n] = w^T^T x^T: gemm(T, N, m=out, n=n, k=in, A=w (lda in), B=x
 * (ldb in), C=y (ldc out)).
 *
 * Mixed precision: A and B are the 16-bit copies (CUDA_R_16BF or
 * CUDA_R_16F), C stays CUDA_R_32F, and the products are summed in float32
 * (CUBLAS_COMPUTE_32F; cublasGemmEx's table of supported types has both
 * combinations, on tensor cores). TF32 concerns float32 inputs only. */

static cublasComputeType_t compute_type(const cuda_impl *c, prec_t p)
{
    if (p != PREC_FP32 || c->prec != PREC_FP32) /* 16-bit, or float32 kept so */
        return CUBLAS_COMPUTE_32F;
    return c->opt.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* a and b hold type p (float32, or the backend's 16-bit copies), y float32 */
static int gemm(cuda_impl *c, prec_t p, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                int k,
                const void *a, int lda, const void *b, int ldb, float *y, int ldc,
                const char *what)
{
    const float one = 1.0f, zero = 0.0f;
    cudaDataType_t ab = cuda_blas_type(p);
    return cublas_ok(c,
                     cu.cublasGemmEx(c->cublas, ta, tb, m, n, k, &one, a, ab, lda, b, ab, ldb,
                                     &zero, y, CUDA_R_32F, ldc, compute_type(c, p),
                                     CUBLAS_GEMM_DEFAULT),
                     what);
}

/* The 16-bit copies dense multiplies (converted when `need_x` /
 * `need_w`): x in the scratch region, w the tower's copy of this step
 * (*w16), else converted into the region too. NULL after an error. */
static char *dense_operands(cuda_impl *c, int n, int in, int out, const float *x, bool need_x,
                            const float *w, bool need_w, prec_dense_copies *l, const void **w16)
{
    prec_dense_copies_of(c->prec, n, in, out, l);
    const void *copy = NULL;
    if (need_w && cuda_weight_copy(c, w, out, in, 1, false, &copy) != 0)
        return NULL;
    bool own_w = need_w && copy == NULL;
    char *buf = cuda_copies(c, own_w ? l->bytes : l->bytes_no_w);
    if (buf == NULL ||
        (need_x && cuda_to_half(c, (size_t)n * in, x, buf + l->x) != 0) ||
        (own_w && cuda_weight_convert(c, w, out, in, 1, false, buf + l->w) != 0))
        return NULL;
    *w16 = own_w ? buf + l->w : copy;
    return buf;
}

/* p: the backend's precision, or PREC_FP32 for dense_forward_fp32 */
static void dense_forward_as(backend_t *be, prec_t p, int n, int in, int out, const float *x,
                             const float *w, const float *b, bool relu, float *y)
{
    cuda_impl *c = cuda_of(be);
    if (n <= 0 || out <= 0 || !cuda_begin(be))
        return;
    if (in <= 0) { /* no inputs: y = b */
        cuda_ok(c, cudaMemsetAsync(y, 0, (size_t)n * out * sizeof(float), c->stream),
                "cudaMemsetAsync");
    } else if (prec_reduced(p, PREC_OP_DENSE)) {
        prec_dense_copies l;
        const void *w16 = NULL;
        char *h = dense_operands(c, n, in, out, x, true, w, true, &l, &w16);
        if (h == NULL || gemm(c, p, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w16, in, h + l.x, in,
                              y, out, "cublasGemmEx (dense forward)") != 0)
            return;
    } else if (gemm(c, PREC_FP32, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, in, x, in, y, out,
                    "cublasGemmEx (dense forward)") != 0) {
        return;
    }
    cuda_ok(c, tt_k_bias_relu(c->stream, n, out, 1, b, relu, y), "bias/relu kernel");
}

static void cuda_dense_forward(backend_t *be, int n, int in, int out, const float *x,
                               const float *w, const float *b, bool relu, float *y)
{
    dense_forward_as(be, cuda_of(be)->prec, n, in, out, x, w, b, relu, y);
}

static void cuda_dense_forward_fp32(backend_t *be, int n, int in, int out, const float *x,
                                    const float *w, const float *b, bool relu, float *y)
{
    dense_forward_as(be, PREC_FP32, n, in, out, x, w, b, relu, y);
}

/* dx[n,in] = dy[n,out] w[out,in]:   column-major dx^T = w^T dy^T: gemm(N, N, in, n, out)
 * dw[out,in] = dy^T x:              column-major dw^T = x^T dy:  gemm(N, T, in, out, n)
 * db[out] = column sums of dy, rows in order (the CPU's bits), in float32.
 * Mixed precision: the products read the 16-bit copies of x, w and of dy
 * after the relu mask. */
static void dense_backward_as(backend_t *be, prec_t p, int n, int in, int out, const float *x,
                              const float *w, const float *y, bool relu, float *dy, float *dx,
                              float *dw, float *db)
{
    cuda_impl *c = cuda_of(be);
    if (!cuda_begin(be))
        return;
    if (relu && cuda_ok(c, tt_k_relu_backward(c->stream, (size_t)n * out, y, dy, dy),
                        "relu mask kernel") != 0)
        return;
    const void *xa = x, *wa = w, *dya = dy; /* the operands of the products */
    bool want_dw = dw != NULL && in > 0 && out > 0 && n > 0;
    bool want_dx = dx != NULL && n > 0 && in > 0 && out > 0;
    bool half = prec_reduced(p, PREC_OP_DENSE) && (want_dw || want_dx);
    if (half) {
        prec_dense_copies l;
        const void *w16 = NULL;
        char *h = dense_operands(c, n, in, out, x, want_dw, w, want_dx, &l, &w16);
        if (h == NULL || cuda_to_half(c, (size_t)n * out, dy, h + l.dy) != 0)
            return;
        xa = h + l.x;
        wa = w16;
        dya = h + l.dy;
    }
    if (dw != NULL && in > 0 && out > 0) {
        if (n <= 0)
            cuda_ok(c, cudaMemsetAsync(dw, 0, (size_t)out * in * sizeof(float), c->stream),
                    "cudaMemsetAsync");
        else if (gemm(c, half ? p : PREC_FP32, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, xa, in,
                      dya, out, dw, in,
                      "cublasGemmEx (dense dw)") != 0)
            return;
    }
    if (db != NULL &&
        cuda_ok(c, tt_k_dense_bias_grad(c->stream, n, out, dy, db), "bias gradient kernel") != 0)
        return;
    if (dx != NULL && n > 0 && in > 0) {
        if (out <= 0)
            cuda_ok(c, cudaMemsetAsync(dx, 0, (size_t)n * in * sizeof(float), c->stream),
                    "cudaMemsetAsync");
        else
            gemm(c, half ? p : PREC_FP32, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, wa, in, dya,
                 out, dx, in, "cublasGemmEx (dense dx)");
    }
}

static void cuda_dense_backward(backend_t *be, int n, int in, int out, const float *x,
                                const float *w, const float *y, bool relu, float *dy, float *dx,
                                float *dw, float *db)
{
    dense_backward_as(be, cuda_of(be)->prec, n, in, out, x, w, y, relu, dy, dx, dw, db);
}

static void cuda_dense_backward_fp32(backend_t *be, int n, int in, int out, const float *x,
                                     const float *w, const float *y, bool relu, float *dy,
                                     float *dx, float *dw, float *db)
{
    dense_backward_as(be, PREC_FP32, n, in, out, x, w, y, relu, dy, dx, dw, db);
}

/* ---- pooling: the kernels carry PyTorch's semantics (an argmax mask for
 * max pooling, as backend.h asks; cuDNN's pooling has none) ---- */

static void cuda_maxpool_forward(backend_t *be, const window_desc *d, const float *x, float *y,
                                 int32_t *mask)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_maxpool_forward(cuda_of(be)->stream, *d, x, y, mask),
                "maxpool kernel");
}

static void cuda_maxpool_backward(backend_t *be, const window_desc *d, const float *dy,
                                  const int32_t *mask, float *dx)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_maxpool_backward(cuda_of(be)->stream, *d, dy, mask, dx),
                "maxpool backward kernel");
}

static void cuda_avgpool_forward(backend_t *be, const window_desc *d, const float *x, float *y)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_avgpool_forward(cuda_of(be)->stream, *d, x, y), "avgpool kernel");
}

static void cuda_avgpool_backward(backend_t *be, const window_desc *d, const float *dy, float *dx)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_avgpool_backward(cuda_of(be)->stream, *d, dy, dx),
                "avgpool backward kernel");
}

/* ---- element-wise ---- */

static void cuda_relu_forward(backend_t *be, size_t count, const float *x, float *y)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_relu_forward(cuda_of(be)->stream, count, x, y), "relu kernel");
}

static void cuda_relu_backward(backend_t *be, size_t count, const float *y, const float *dy,
                               float *dx)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_relu_backward(cuda_of(be)->stream, count, y, dy, dx),
                "relu backward kernel");
}

static void cuda_dropout_forward(backend_t *be, size_t count, float rate, uint64_t seed,
                                 const float *x, float *y, float *mask)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_dropout(cuda_of(be)->stream, count, rate, seed, x, y, mask),
                "dropout kernel");
}

static void cuda_mul(backend_t *be, size_t count, const float *a, const float *b, float *y)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_mul(cuda_of(be)->stream, count, a, b, y), "mul kernel");
}

static void cuda_axpy(backend_t *be, size_t count, float alpha, const float *x, float *y)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_axpy(cuda_of(be)->stream, count, alpha, x, y), "axpy kernel");
}

static void cuda_add(backend_t *be, size_t count, const float *a, const float *b, bool relu,
                     float *y)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_add(cuda_of(be)->stream, count, a, b, relu, y), "add kernel");
}

static void cuda_scale(backend_t *be, size_t count, float alpha, float *x)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_scale(cuda_of(be)->stream, count, alpha, x), "scale kernel");
}

static void cuda_add_scalar(backend_t *be, size_t count, float alpha, float *x)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be), tt_k_add_scalar(cuda_of(be)->stream, count, alpha, x),
                "add scalar kernel");
}

/* loss scaling's check of the gradients: a flag on the device, read back */
static bool cuda_all_finite(backend_t *be, size_t count, const float *x)
{
    cuda_impl *c = cuda_of(be);
    if (!cuda_begin(be))
        return false;
    tt_xent_result *dev = &c->xent_dev[XENT_CHECK], *host = &c->xent_host[XENT_CHECK];
    if (cuda_ok(c, tt_k_not_finite(c->stream, count, x, &dev->not_finite),
                "finite check kernel") != 0 ||
        cuda_ok(c,
                cudaMemcpyAsync(&host->not_finite, &dev->not_finite, sizeof(int),
                                cudaMemcpyDeviceToHost, c->stream),
                "cudaMemcpyAsync (finite check)") != 0 ||
        cuda_wait(be, "finite check") != 0)
        return false;
    return host->not_finite == 0;
}

/* Room for n results of sumsq_each and their ranges; false after
 * recording an error. */
static bool norms_room(cuda_impl *c, int n)
{
    if (n <= c->n_norms)
        return true;
    if (c->norms_dev != NULL)
        cudaFree(c->norms_dev); /* cudaFree waits for the stream's work on it */
    if (c->ranges_dev != NULL)
        cudaFree(c->ranges_dev);
    if (c->norms_host != NULL)
        cudaFreeHost(c->norms_host);
    if (c->ranges_host != NULL)
        cudaFreeHost(c->ranges_host);
    c->norms_dev = c->norms_host = NULL;
    c->ranges_dev = c->ranges_host = NULL;
    c->n_norms = 0;
    size_t bytes = (size_t)n * sizeof(double), list = (size_t)n * sizeof(tt_sumsq_range);
    if (cuda_ok(c, cudaMalloc((void **)&c->norms_dev, bytes), "cudaMalloc (norms)") != 0 ||
        cuda_ok(c, cudaMalloc((void **)&c->ranges_dev, list), "cudaMalloc (norms)") != 0 ||
        cuda_ok(c, cudaMallocHost((void **)&c->norms_host, bytes), "cudaMallocHost (norms)") != 0 ||
        cuda_ok(c, cudaMallocHost((void **)&c->ranges_host, list), "cudaMallocHost (norms)") != 0)
        return false;
    c->n_norms = n;
    return true;
}

/* The sums of squares of n ranges into norms_dev, queued: for each group
 * of ranges whose partials fit the scratch (one but for lists past 512
 * ranges of 8 M floats), its list to the device and a pair of launches.
 * 0, or -1 after recording an error. */
static int sumsq_queue(cuda_impl *c, int n, const float *const *x, const size_t *count)
{
    for (int i = 0, len; i < n; i += len) {
        tt_sumsq_range *r = c->ranges_host + i;
        len = tt_sumsq_group(n - i, x + i, count + i, (int)TT_SUMSQ_SCRATCH_DOUBLES, r);
        if (cuda_ok(c,
                    cudaMemcpyAsync(c->ranges_dev + i, r, (size_t)len * sizeof(*r),
                                    cudaMemcpyHostToDevice, c->stream),
                    "cudaMemcpyAsync (norms' ranges)") != 0 ||
            cuda_ok(c,
                    tt_k_sumsq(c->stream, c->ranges_dev + i, len, tt_sumsq_parts(r, len),
                               (double *)c->bn_scratch, c->norms_dev + i),
                    "sum of squares kernel") != 0)
            return -1;
    }
    return 0;
}

/* The optimizer's norms (backend.h): every range's sum in one queue of
 * launches, one copy back, one wait. A captured step cannot hand the host
 * a result: refused before it grows any room (the eager step runs it). */
static void cuda_sumsq_each(backend_t *be, int n, const float *const *x, const size_t *count,
                            double *out)
{
    cuda_impl *c = cuda_of(be);
    memset(out, 0, (size_t)n * sizeof(double));
    if (n <= 0 || cuda_capture_refuse(c, "waits for the device (norms)") || !cuda_begin(be) ||
        !norms_room(c, n) || sumsq_queue(c, n, x, count) != 0)
        return;
    if (cuda_ok(c,
                cudaMemcpyAsync(c->norms_host, c->norms_dev, (size_t)n * sizeof(double),
                                cudaMemcpyDeviceToHost, c->stream),
                "cudaMemcpyAsync (norms)") != 0 ||
        cuda_wait(be, "norms") != 0)
        return;
    memcpy(out, c->norms_host, (size_t)n * sizeof(double));
}

/* One range: sumsq_each's bits (its split is the count's alone) */
static double cuda_sumsq(backend_t *be, size_t count, const float *x)
{
    double out = 0.0;
    if (count > 0)
        cuda_sumsq_each(be, 1, &x, &count, &out);
    return out;
}

/* The loss: kernel, copy to pinned memory and an event, all queued; the
 * host queues the step's backward before loss_read waits for that event
 * (not for the stream), so the device never idles while the host waits in
 * mid-step, and the wait at the step's end usually finds the loss done. */
static void cuda_softmax_xent(backend_t *be, int n, int classes, const float *logits,
                              const int32_t *labels, float smoothing, float *dlogits)
{
    cuda_impl *c = cuda_of(be);
    tt_xent_result *dev = &c->xent_dev[XENT_LOSS], *host = &c->xent_host[XENT_LOSS];
    tt_err e = {0};
    /* n = 0 too: the kernel writes a zero loss, which loss_read returns
     * (not the last step's) */
    if (!cuda_begin(be))
        return;
    if (cuda_ok(c, tt_k_softmax_xent(c->stream, n, classes, logits, labels, smoothing, dlogits,
                                     dev),
                "softmax cross-entropy kernel") != 0 ||
        cuda_ok(c, cudaMemcpyAsync(host, dev, sizeof(*host), cudaMemcpyDeviceToHost, c->stream),
                "cudaMemcpyAsync (loss)") != 0)
        return;
    if (c->capturing)
        return; /* the graph's launch records loss_done after it */
    if (backend_cuda_event_record(be, c->loss_done, backend_cuda_queue(be), &e) != 0)
        cuda_wait_failed(c, &e);
}

static void cuda_loss_read(backend_t *be, double *loss_sum, int *correct)
{
    cuda_impl *c = cuda_of(be);
    const tt_xent_result *host = &c->xent_host[XENT_LOSS];
    tt_err e = {0};
    *loss_sum = 0.0;
    *correct = 0;
    if (c->capturing || !cuda_begin(be))
        return; /* capturing: nothing ran; the launch's loss is read after it */
    if (backend_device_wait_event(be, c->loss_done, "loss", &e) != 0) {
        cuda_wait_failed(c, &e);
        return;
    }
    *loss_sum = host->loss;
    *correct = host->correct;
}

static void cuda_sgd_step(backend_t *be, size_t count, float lr, float momentum, bool nesterov,
                          float weight_decay, bool first_step, float *w, const float *g, float *buf)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                tt_k_sgd(cuda_of(be)->stream, count, lr, momentum, nesterov, weight_decay,
                         first_step, w, g, buf),
                "sgd kernel");
}

static void cuda_adam_step(backend_t *be, size_t count, float lr, float beta1, float beta2,
                           float eps, float weight_decay, int64_t step, float *w, const float *g,
                           float *m, float *v)
{
    if (cuda_begin(be))
        cuda_ok(cuda_of(be),
                tt_k_adam(cuda_of(be)->stream, count,
                          tt_adam_make(lr, beta1, beta2, eps, weight_decay, step), w, g, m, v),
                "adam kernel");
}

/* ---- life cycle ---- */

static void cuda_destroy(backend_t *be)
{
    if (be == NULL)
        return;
    cuda_impl *c = cuda_of(be);
    if (c != NULL) {
        /* nothing may still use the memory; a stalled collective is
         * aborted by the wait (its communicator is freed before) */
        if (cudaSetDevice(c->device) == cudaSuccess && c->stream != NULL &&
            (be->dev == NULL || backend_device_wait(be, "teardown", &(tt_err){0}) == 0))
            cudaStreamSynchronize(c->stream);
        if (c->conv_desc)
            cu.cudnnDestroyConvolutionDescriptor(c->conv_desc);
        if (c->w_desc)
            cu.cudnnDestroyFilterDescriptor(c->w_desc);
        if (c->x_desc)
            cu.cudnnDestroyTensorDescriptor(c->x_desc);
        if (c->y_desc)
            cu.cudnnDestroyTensorDescriptor(c->y_desc);
        if (c->bn_desc)
            cu.cudnnDestroyTensorDescriptor(c->bn_desc);
        cg_table_free(c->graph_plans); /* its plans name the handle: first */
        if (c->cudnn)
            cu.cudnnDestroy(c->cudnn);
        if (c->cublas)
            cu.cublasDestroy_v2(c->cublas);
        if (c->xent_host)
            cudaFreeHost(c->xent_host);
        if (c->norms_host)
            cudaFreeHost(c->norms_host);
        if (c->norms_dev)
            cudaFree(c->norms_dev);
        if (c->ranges_host)
            cudaFreeHost(c->ranges_host);
        if (c->ranges_dev)
            cudaFree(c->ranges_dev);
        backend_cuda_event_free(be, c->loss_done);
        mem_pool_destroy(c->pool);
        if (c->stream)
            cudaStreamDestroy(c->stream);
        algo_cache_free(c->algos);
        weight_copies_free(&c->weights); /* their mirrors went with the pool */
        free(c->bn_eps);
        cudaGetLastError();
    }
    free(c);
    free(be);
}

/* Everything a tower needs on its device; TT_ERR_USAGE for a device that is
 * missing or unusable, TT_ERR_RUNTIME for a failure after that. */
static int cuda_setup(backend_t *be, cuda_impl *c, tt_err *err)
{
    int d = c->device;
    cuda_device_info info;
    if (backend_cuda_device_info(d, &info, err) != 0)
        return -1;
    if (prec_check_device(c->prec, d, info.name, info.major, info.minor, err) != 0)
        return -1;
    if (info.major * 10 + info.minor < 80)
        return err_set(err, TT_ERR_USAGE,
                       "cuda:%d (%s): compute capability %d.%d is below "
                       "8.0, the lowest towertrain supports (this build: %s)",
                       d, info.name, info.major, info.minor, TT_CUDA_ARCHS);
    if (cuda_check_err(cudaSetDevice(d), d, "cudaSetDevice", TT_ERR_USAGE, err) != 0 ||
        cuda_check_err(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), d,
                       "cudaStreamCreate", TT_ERR_USAGE, err) != 0)
        return -1;
    mem_source src = {device_reserve, device_release, c};
    c->pool = mem_pool_create(src, POOL_CHUNK);
    c->algos = algo_cache_create();
    if (c->pool == NULL || c->algos == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of host memory");
    if (cublas_check_err(cu.cublasCreate_v2(&c->cublas), d, "cublasCreate", TT_ERR_USAGE, err) !=
            0 ||
        cublas_check_err(cu.cublasSetStream_v2(c->cublas, c->stream), d, "cublasSetStream",
                         TT_ERR_RUNTIME, err) != 0)
        return -1;
    /* cuBLAS's workspace from the pool, so it allocates nothing while
     * training (its documentation asks 32 MiB on Hopper, 4 MiB before) */
    size_t ws = info.major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
    tt_err pool_err = {0};
    c->cublas_ws = mem_pool_alloc(c->pool, ws, &pool_err);
    if (c->cublas_ws == NULL)
        return err_set(err, TT_ERR_USAGE, "cuda:%d: %s", d, pool_err.msg);
    if (cublas_check_err(cu.cublasSetWorkspace_v2(c->cublas, c->cublas_ws, ws), d,
                         "cublasSetWorkspace", TT_ERR_RUNTIME, err) != 0 ||
        cudnn_check_err(cu.cudnnCreate(&c->cudnn), d, "cudnnCreate", TT_ERR_USAGE, err) != 0 ||
        cudnn_check_err(cu.cudnnSetStream(c->cudnn, c->stream), d, "cudnnSetStream", TT_ERR_RUNTIME,
                        err) != 0 ||
        cudnn_check_err(cu.cudnnCreateTensorDescriptor(&c->x_desc), d,
                        "cudnnCreateTensorDescriptor", TT_ERR_RUNTIME, err) != 0 ||
        cudnn_check_err(cu.cudnnCreateTensorDescriptor(&c->y_desc), d,
                        "cudnnCreateTensorDescriptor", TT_ERR_RUNTIME, err) != 0 ||
        cudnn_check_err(cu.cudnnCreateTensorDescriptor(&c->bn_desc), d,
                        "cudnnCreateTensorDescriptor", TT_ERR_RUNTIME, err) != 0 ||
        cudnn_check_err(cu.cudnnCreateFilterDescriptor(&c->w_desc), d,
                        "cudnnCreateFilterDescriptor", TT_ERR_RUNTIME, err) != 0 ||
        cudnn_check_err(cu.cudnnCreateConvolutionDescriptor(&c->conv_desc), d,
                        "cudnnCreateConvolutionDescriptor", TT_ERR_RUNTIME, err) != 0)
        return -1;
    size_t xent = XENT_RESULTS * sizeof(tt_xent_result);
    c->xent_dev = mem_pool_alloc(c->pool, xent, &pool_err);
    if (c->xent_dev == NULL)
        return err_set(err, TT_ERR_USAGE, "cuda:%d: %s", d, pool_err.msg);
    if (cuda_bn_nhwc_setup(c, err) != 0)
        return -1;
    if (cuda_check_err(cudaMallocHost((void **)&c->xent_host, xent), d, "cudaMallocHost",
                       TT_ERR_RUNTIME, err) != 0 ||
        (c->loss_done = backend_cuda_event_create(be, false, err)) == NULL)
        return -1;
    return 0;
}

static backend_t *cuda_create(int device, const cuda_options *opt, prec_t prec, tt_err *err)
{
    backend_t *be = calloc(1, sizeof(*be));
    cuda_impl *c = calloc(1, sizeof(*c));
    if (be == NULL || c == NULL) {
        free(be);
        free(c);
        err_set(err, TT_ERR_RUNTIME, "out of host memory");
        return NULL;
    }
    c->device = device;
    c->prec = prec;
    char why[128];
    if (weight_copies_init(&c->weights, why, sizeof(why)) != 0) {
        err_set(err, TT_ERR_USAGE, "cuda:%d: %s", device, why);
        free(be);
        free(c);
        return NULL;
    }
    if (cuda_libs_load(err) != 0) {
        free(be);
        free(c);
        return NULL;
    }
    if (opt != NULL)
        c->opt = *opt;
    be->name = "cuda";
    be->precision = prec_name(prec);
    be->device = device;
    be->threads = 1;
    be->impl = c;
    if (cuda_setup(be, c, err) != 0) {
        cuda_destroy(be);
        return NULL;
    }
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->copy = cuda_copy;
    be->dense_forward = cuda_dense_forward;
    be->dense_backward = cuda_dense_backward;
    be->dense_forward_fp32 = cuda_dense_forward_fp32;
    be->dense_backward_fp32 = cuda_dense_backward_fp32;
    be->conv_workspace = cuda_conv_workspace;
    be->conv_forward = cuda_conv_forward;
    be->conv_backward = cuda_conv_backward;
    be->maxpool_forward = cuda_maxpool_forward;
    be->maxpool_backward = cuda_maxpool_backward;
    be->avgpool_forward = cuda_avgpool_forward;
    be->avgpool_backward = cuda_avgpool_backward;
    be->batchnorm_forward = cuda_batchnorm_forward;
    be->batchnorm_backward = cuda_batchnorm_backward;
    /* NHWC, our kernels (cuda_bn_nhwc.c): used where blocked_layout is set */
    be->batchnorm_forward_blocked = cuda_batchnorm_forward_blocked;
    be->batchnorm_backward_blocked = cuda_batchnorm_backward_blocked;
    be->batchnorm_add_forward_blocked = cuda_batchnorm_add_forward_blocked;
    be->batchnorm_add_backward_blocked = cuda_batchnorm_add_backward_blocked;
    be->relu_forward = cuda_relu_forward;
    be->relu_backward = cuda_relu_backward;
    be->dropout_forward = cuda_dropout_forward;
    be->mul = cuda_mul;
    be->axpy = cuda_axpy;
    be->add = cuda_add;
    be->scale = cuda_scale;
    be->add_scalar = cuda_add_scalar;
    be->all_finite = cuda_all_finite;
    be->sumsq = cuda_sumsq;
    be->sumsq_each = cuda_sumsq_each;
    be->softmax_xent = cuda_softmax_xent;
    be->loss_read = cuda_loss_read;
    be->sgd_step = cuda_sgd_step;
    be->adam_step = cuda_adam_step;
    cuda_install_vars_ops(be);
    be->destroy = cuda_destroy;
    cuda_install_blocked(be, prec, c->opt.tf32); /* last: it reads the batchnorm ops */
    return be;
}

backend_t *backend_cuda_create(int device, const cuda_options *opt, tt_err *err)
{
    return cuda_create(device, opt, PREC_FP32, err);
}

backend_t *backend_cuda_create_bf16(int device, const cuda_options *opt, tt_err *err)
{
    return cuda_create(device, opt, PREC_BF16, err);
}

backend_t *backend_cuda_create_fp16(int device, const cuda_options *opt, tt_err *err)
{
    return cuda_create(device, opt, PREC_FP16, err);
}

int backend_cuda_reserve_copies(backend_t *be, size_t bytes, tt_err *err)
{
    cuda_impl *c = cuda_of(be);
    if (bytes == 0) /* fp32 NCHW: no copies (float32 NHWC has some: precision.h) */
        return 0;
    if (cuda_begin(be) && cuda_copies(c, bytes) != NULL)
        return 0;
    return err_set(err, c->err.code, "%s", c->err.msg);
}

bool backend_is_cuda(const backend_t *be)
{
    return be != NULL && be->destroy == cuda_destroy;
}

int backend_cuda_bind(backend_t *be, tt_err *err)
{
    return cuda_check_err(cudaSetDevice(cuda_of(be)->device), cuda_of(be)->device, "cudaSetDevice",
                          TT_ERR_RUNTIME, err);
}

int backend_cuda_check(backend_t *be, tt_err *err)
{
    cuda_impl *c = cuda_of(be);
    if (cuda_begin(be)) {
        cudaError_t rc = cudaStreamQuery(c->stream);
        if (rc != cudaSuccess && rc != cudaErrorNotReady)
            cuda_ok(c, rc, "a kernel or copy on the tower's stream");
    }
    if (!c->failed)
        return 0;
    return err_set(err, c->err.code, "%s", c->err.msg);
}

int backend_cuda_sync(backend_t *be, tt_err *err)
{
    if (cuda_begin(be))
        cuda_wait(be, "sync");
    return backend_cuda_check(be, err);
}

bool backend_cuda_peer_enable(backend_t *be, const backend_t *peer)
{
    cuda_impl *c = cuda_of(be);
    int d = c->device, p = peer->device, can = 0;
    if (d == p)
        return true;
    if (cudaDeviceCanAccessPeer(&can, d, p) != cudaSuccess || !can ||
        cudaSetDevice(d) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    cudaError_t rc = cudaDeviceEnablePeerAccess(p, 0);
    cudaGetLastError(); /* cudaErrorPeerAccessAlreadyEnabled is not an error here */
    return rc == cudaSuccess || rc == cudaErrorPeerAccessAlreadyEnabled;
}

int backend_cuda_query(backend_t *be, tt_err *err)
{
    cuda_impl *c = cuda_of(be);
    if (c->failed)
        return backend_cuda_check(be, err);
    if (cudaSetDevice(c->device) != cudaSuccess)
        return 1; /* cuda_begin reports it at the next operation */
    cudaError_t rc = cudaStreamQuery(c->stream);
    if (rc == cudaErrorNotReady)
        return 0;
    if (cuda_ok(c, rc, "cudaStreamQuery") != 0)
        return backend_cuda_check(be, err);
    return 1;
}

void backend_cuda_freeze(backend_t *be)
{
    mem_pool_freeze(cuda_of(be)->pool);
}

void backend_cuda_memory(backend_t *be, size_t *reserved, size_t *in_use, size_t *peak)
{
    mem_pool_stats s;
    mem_pool_get_stats(cuda_of(be)->pool, &s);
    *reserved = s.reserved;
    *in_use = s.in_use;
    *peak = s.peak;
}

const char *backend_cuda_alloc_error(backend_t *be)
{
    return cuda_of(be)->alloc_error;
}

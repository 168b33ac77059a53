/* cpu_backend.c - the CPU backend: host memory, one thread team per instance
 * (per tower), and the table of operations implemented in this folder. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/precision.h"
#include "backend/cpu/cpu_isa.h"
#ifdef HAVE_DNNL
#include "backend/cpu/conv_dnnl.h"
#include "backend/cpu/dnnl_util.h"
#endif

static void *cpu_alloc(backend_t *be, size_t bytes)
{
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p != NULL)
        memset(p, 0, rounded);
    return p;
}

static void cpu_free(backend_t *be, void *p)
{
    free(p);
}

static void cpu_memcpy(backend_t *be, void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes > 0)
        memcpy(dst, src, bytes);
}

static void cpu_destroy(backend_t *be)
{
    if (be == NULL)
        return;
    cpu_impl *impl = be->impl;
    if (impl != NULL) {
        threadpool_destroy(impl->pool);
        free(impl->pack);
#ifdef HAVE_DNNL
        cpu_conv_dnnl_free(impl->conv);
        cpu_dense_bf16_free(impl->dense_bf16);
#endif
    }
    free(impl);
    free(be);
}

/* Convolutions: few channels go to conv_small.c; the rest to oneDNN
 * (conv_dnnl.c, which falls back to conv.c for what it cannot do) or,
 * without oneDNN, to im2col + sgemm (conv.c). The same rule at every
 * TT_CPU_ISA level: each library runs its kernels for the level (oneDNN
 * capped to it, cpu_dnnl_cap_isa). Dense layers: tile_gemm at every level
 * and shape (tile_gemm.h says why, with the AVX2 measurements). */
static size_t conv_workspace(backend_t *be, const window_desc *d)
{
    if (cpu_conv_small_fits(be, d))
        return cpu_conv_small_workspace(be, d);
#ifdef HAVE_DNNL
    return cpu_conv_dnnl_workspace(be, d);
#else
    return cpu_conv_workspace(be, d);
#endif
}

static void conv_forward(backend_t *be, const window_desc *d, const float *x, const float *w,
                         const float *b, bool relu, float *y, void *ws)
{
    if (cpu_conv_small_fits(be, d))
        cpu_conv_small_forward(be, d, x, w, b, relu, y, ws);
    else
#ifdef HAVE_DNNL
        cpu_conv_dnnl_forward(be, d, x, w, b, relu, y, ws);
#else
        cpu_conv_forward(be, d, x, w, b, relu, y, ws);
#endif
}

static void conv_backward(backend_t *be, const window_desc *d, const float *x, const float *w,
                          const float *y, bool relu, float *dy, float *dx, float *dw, float *db,
                          void *ws)
{
    if (cpu_conv_small_fits(be, d))
        cpu_conv_small_backward(be, d, x, w, y, relu, dy, dx, dw, db, ws);
    else
#ifdef HAVE_DNNL
        cpu_conv_dnnl_backward(be, d, x, w, y, relu, dy, dx, dw, db, ws);
#else
        cpu_conv_backward(be, d, x, w, y, relu, dy, dx, dw, db, ws);
#endif
}

const char *backend_cpu_kernels(char *buf, size_t len)
{
    cpu_isa_t isa = cpu_isa(), have = cpu_isa_detected();
    char cap[64] = "";
    if (isa < have)
        snprintf(cap, sizeof(cap), ", TT_CPU_ISA=%s", cpu_isa_name(isa));
#ifdef HAVE_DNNL
    cpu_dnnl_cap_isa();
    snprintf(buf, len, "%s (CPU: %s%s); oneDNN at %s", cpu_isa_name(isa), cpu_isa_name(have),
             cap, cpu_dnnl_isa_name(dnnl_get_effective_cpu_isa()));
#else
    snprintf(buf, len, "%s (CPU: %s%s)", cpu_isa_name(isa), cpu_isa_name(have), cap);
#endif
    return buf;
}

/* The float32 activations' layout between layers (backend.h). With oneDNN
 * its convolutions compute in a blocked layout, and activations stay in it
 * between the layers that accept it (conv.c knows NCHW only): nChw16c at
 * AVX-512. Below AVX-512 its convolutions block channels by 8 (AVX2,
 * SSE4.1), and each would reorder its input and output from and to
 * nChw16c; they read and write NHWC in place, so there the blocked layout
 * is NHWC (ResNet-20 at TT_CPU_ISA=avx2: 807 against 744 images/s; at
 * plain 216 against 124; at AVX-512 nChw16c stays, 3% faster). The rule
 * reads the CPU's features and the cap only, so one machine gives the
 * same bits on every run. */
static void cpu_layout_choose(backend_t *be)
{
#ifdef HAVE_DNNL
    prec_layout lay = prec_layout_of(PREC_FP32, false, true);
    be->blocked_layout = lay.blocked;
    be->blocked_nhwc = lay.blocked && cpu_dnnl_convs_nhwc();
#else
    be->blocked_layout = prec_layout_of(PREC_FP32, false, false).blocked;
#endif
}

backend_t *backend_cpu_create(int device, int threads, tt_err *err)
{
    char why[128];
    if (cpu_isa_check_env(why, sizeof(why)) != 0) {
        err_set(err, TT_ERR_USAGE, "%s", why);
        return NULL;
    }
#ifdef HAVE_DNNL
    cpu_dnnl_cap_isa(); /* before any oneDNN primitive */
#endif
    backend_t *be = calloc(1, sizeof(*be));
    cpu_impl *impl = calloc(1, sizeof(*impl));
    if (be == NULL || impl == NULL || threads < 1 ||
        (impl->pool = threadpool_create(threads)) == NULL) {
        free(be);
        free(impl);
        err_set(err, TT_ERR_RUNTIME, "cannot create the CPU backend with %d thread(s)", threads);
        return NULL;
    }
    be->name = "cpu";
    be->precision = "fp32";
    be->device = device;
    be->threads = threads;
    be->impl = impl;
    be->host_memory = true;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_memcpy;
    be->download = cpu_memcpy;
    be->copy = cpu_memcpy;
    be->dense_forward = cpu_dense_forward;
    be->dense_backward = cpu_dense_backward;
    cpu_layout_choose(be);
    be->conv_workspace = conv_workspace;
    be->conv_forward = conv_forward;
    be->conv_backward = conv_backward;
    be->maxpool_forward = cpu_maxpool_forward;
    be->maxpool_backward = cpu_maxpool_backward;
    be->avgpool_forward = cpu_avgpool_forward;
    be->avgpool_backward = cpu_avgpool_backward;
    be->batchnorm_forward = cpu_batchnorm_forward;
    be->batchnorm_backward = cpu_batchnorm_backward;
    be->batchnorm_forward_blocked = cpu_batchnorm_forward_blocked;
    be->batchnorm_backward_blocked = cpu_batchnorm_backward_blocked;
    be->batchnorm_add_backward_blocked = cpu_batchnorm_add_backward_blocked;
    be->global_avgpool_blocked_forward = cpu_global_avgpool_blocked_forward;
    be->global_avgpool_blocked_backward = cpu_global_avgpool_blocked_backward;
    be->relu_forward = cpu_relu_forward;
    be->relu_backward = cpu_relu_backward;
    be->relu_forward_blocked = cpu_relu_forward_blocked;
    be->relu_backward_blocked = cpu_relu_backward_blocked;
    be->add_blocked = cpu_add_blocked;
    be->dropout_forward = cpu_dropout_forward;
    be->mul = cpu_mul;
    be->axpy = cpu_axpy;
    be->add = cpu_add;
    be->scale = cpu_scale;
    be->all_finite = cpu_all_finite;
    be->sumsq = cpu_sumsq;
    be->sumsq_each = cpu_sumsq_each;
    be->add_scalar = cpu_add_scalar;
    be->softmax_xent = cpu_softmax_xent;
    be->loss_read = cpu_loss_read;
    be->sgd_step = cpu_sgd_step;
    be->adam_step = cpu_adam_step;
    be->destroy = cpu_destroy;
    return be;
}

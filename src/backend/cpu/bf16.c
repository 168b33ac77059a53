/* bf16.c - the CPU backend in mixed precision (trainer.precision = "bf16").
 *
 * It is cpu_backend.c's backend with two operations swapped: conv2d's oneDNN
 * primitives take bf16 src, weights and diff_dst (conv_dnnl.c reads
 * impl->bf16), and dense runs as oneDNN matmuls on bf16 (dense_bf16.c) on
 * AMX, or as tile_gemm's own AVX512_BF16 kernel (dense.c) without AMX. All
 * accumulate in float32; batchnorm, pooling, the loss, the optimizer and
 * the all-reduce compute in float32, on float32 master parameters, as
 * torch.autocast does.
 *
 * Convolutions with fewer than 16 input channels (LeNet's) take
 * conv_small.c in both precisions (oneDNN's bf16 kernels ran at 0.99x
 * float32 on channels that narrow): in bf16 its own vdpbf16ps kernels,
 * which pack x, w and dy in bf16 pairs and sum exact products in float32
 * (LeNet's conv1 1.3-1.5x its float32 speed); in builds without the AVX-512
 * kernels it rounds the three to bf16 and multiplies them with float32
 * fmas, exact for products of bf16 values.
 *
 * The kernels are oneDNN's choice at run time: AMX tiles (tdpbf16ps) where
 * the CPU has them, else AVX512_BF16 (vdpbf16ps). A CPU with neither would
 * get oneDNN's bf16 emulation on plain AVX-512, slower than float32, so we
 * refuse instead of running it: never a silent fallback. (Only a primitive
 * oneDNN cannot build, which for bf16 means out of memory since its
 * reference kernels take any shape, falls back to the float32 code of that
 * layer, as the float32 backend falls back to conv.c.)
 *
 * Activations between the layers that keep the blocked layout are in its
 * NHWC order here (backend.h: blocked_nhwc), the layout oneDNN's AMX
 * kernels read and write, and in bf16 (blocked_bf16): a convolution writes
 * its output in bf16 in place and reads its input with no conversion, and
 * batchnorm, add, relu and the pools read and write half the bytes (their
 * arithmetic stays float32: bf16_io.h widens and rounds). Gradients stay
 * float32, so dy is still converted for each backward kernel.
 *
 * Measured here (Emerald Rapids, AMX): a ResNet-20 convolution's three
 * passes run 2.5-4x faster than oneDNN's float32 ones. With float32
 * activations each call also converted x, dy (and for backward-weights x
 * again) to bf16, one pass over the activation each; bf16 activations
 * leave dy's only.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/tile_gemm.h"
#include "backend/precision.h"
#include "util/env.h"

#ifdef HAVE_DNNL
#include <cpuid.h>
#include <dnnl.h>

#include "backend/cpu/dnnl_util.h"

static bool isa_has(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t want)
{
    return ((unsigned)isa & (unsigned)want) == (unsigned)want;
}

const char *backend_cpu_bf16_isa(char *why, size_t why_len)
{
    /* what oneDNN will dispatch to: the CPU's features, capped by
     * ONEDNN_MAX_CPU_ISA, and AMX only when the kernel grants the tiles */
    cpu_dnnl_cap_isa(); /* TT_CPU_ISA's cap first: oneDNN reads its cap once */
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (isa_has(isa, dnnl_cpu_isa_avx512_core_amx))
        return "AMX";
    if (isa_has(isa, dnnl_cpu_isa_avx512_core_bf16))
        return "AVX512_BF16";
    if (why != NULL) {
        /* the cap that lowered it, if one did: the user's, else TT_CPU_ISA's */
        const char *cap = getenv("ONEDNN_MAX_CPU_ISA"), *var = " (ONEDNN_MAX_CPU_ISA=";
        if (cap == NULL && cpu_isa() < cpu_isa_detected()) {
            cap = cpu_isa_name(cpu_isa());
            var = " (TT_CPU_ISA=";
        }
        snprintf(why, why_len, "needs a CPU with AVX512_BF16 or AMX, and oneDNN finds %s at "
                 "most here%s%s%s", cpu_dnnl_isa_name(isa), cap != NULL ? var : "",
                 cap != NULL ? cap : "", cap != NULL ? ")" : "");
    }
    return NULL;
}

/* An Intel core with AVX512_FP16: Sapphire Rapids and the Xeons after it
 * (CPUID leaf 0's vendor string, leaf 7's EDX bit 23). Their bf16 speed is
 * in AMX. Measured on one core of an Emerald Rapids whose AMX a hypervisor
 * hid (bench/roofline/dot_rate.c, 24 independent sums): vdpbf16ps retires
 * 86 GFLOP/s of bf16 products where vfmadd231ps retires 176 of float32
 * ones, 0.49x; with the packing and rounding on top, the MLP, LeNet and
 * ResNet-20 trained at 0.63-0.72x their fp32 images per second. On an AMD
 * Zen 5 bf16 trained at 1.1-1.4x fp32; Zen 4 and Cooper Lake (no
 * AVX512_FP16) are not measured and keep bf16's kernels. Asked where a job
 * is set up, never per step: CPUID traps to a hypervisor. */
static bool cpu_intel_avx512_fp16(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || a < 7)
        return false;
    bool intel = b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu; /* GenuineIntel */
    return intel && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 23 & 1u);
}

const char *backend_cpu_bf16_fp32_why(void)
{
    const char *isa = backend_cpu_bf16_isa(NULL, 0);
    if (isa == NULL || strcmp(isa, "AMX") == 0 || !cpu_intel_avx512_fp16())
        return NULL;
    if (env_bit("TT_BF16_KERNELS") == 1)
        return NULL;
    return "an Intel core with AVX512_FP16 and no AMX multiplies bf16 (vdpbf16ps) at half "
           "its float32 rate";
}

/* dense: oneDNN's matmul where it has AMX tiles; on AVX512_BF16 alone
 * tile_gemm's bf16 kernel, which rounds while it packs (oneDNN's matmul
 * plus separate conversion passes ran the MLP at 0.80x float32 on a Zen 5,
 * tile_gemm in float32 being faster than both) */
static bool dense_on_tile_gemm(void)
{
    const char *isa = backend_cpu_bf16_isa(NULL, 0);
    return isa != NULL && strcmp(isa, "AMX") != 0 && tile_gemm_bf16_supported();
}

const char *backend_cpu_bf16_engines(void)
{
    if (dense_on_tile_gemm())
        return "conv2d oneDNN, conv2d of under 16 input channels and dense towertrain's "
               "vdpbf16ps kernels";
    return tile_gemm_bf16_supported()
               ? "oneDNN, conv2d of under 16 input channels towertrain's vdpbf16ps kernel"
               : "oneDNN, conv2d of under 16 input channels towertrain's float32 kernel";
}

backend_t *backend_cpu_create_bf16(int device, int threads, tt_err *err)
{
    char why[256];
    if (cpu_isa_check_env(why, sizeof(why)) != 0) { /* before oneDNN reads its cap */
        err_set(err, TT_ERR_USAGE, "%s", why);
        return NULL;
    }
    if (backend_cpu_bf16_isa(why, sizeof(why)) == NULL) {
        err_set(err, TT_ERR_USAGE, "precision bf16 %s", why);
        return NULL;
    }
    backend_t *be = backend_cpu_create(device, threads, err);
    if (be == NULL)
        return NULL;
    be->precision = "bf16";
    ((cpu_impl *)be->impl)->bf16 = true;
    /* bf16 NHWC: the AMX convolutions' layout and type (conv_dnnl.c) */
    prec_layout lay = prec_layout_of(PREC_BF16, false, true);
    be->blocked_layout = lay.blocked;
    be->blocked_nhwc = lay.nhwc;
    be->blocked_bf16 = lay.bf16;
    if (dense_on_tile_gemm()) { /* above */
        be->dense_forward = cpu_dense_tile_bf16_forward;
        be->dense_backward = cpu_dense_tile_bf16_backward;
    } else {
        be->dense_forward = cpu_dense_bf16_forward;
        be->dense_backward = cpu_dense_bf16_backward;
    }
    return be;
}
#else
const char *backend_cpu_bf16_isa(char *why, size_t why_len)
{
    if (why != NULL)
        snprintf(why, why_len, "needs oneDNN, and this build has none: configure found no "
                 "libdnnl-dev");
    return NULL;
}

const char *backend_cpu_bf16_engines(void)
{
    return "none";
}

const char *backend_cpu_bf16_fp32_why(void)
{
    return NULL;
}

backend_t *backend_cpu_create_bf16(int device, int threads, tt_err *err)
{
    char why[256];
    backend_cpu_bf16_isa(why, sizeof(why));
    err_set(err, TT_ERR_USAGE, "precision bf16 %s", why);
    return NULL;
}
#endif

/* test_blocked_layout.c - activations kept in the CPU backend's blocked
 * layout between layers give the bits of the NCHW path.
 *
 * With oneDNN the CPU backend computes convolutions in nChw16c (NHWC below
 * AVX-512), and the
 * model keeps activations in it between the layers that accept it
 * (batchnorm, add, relu, pools, global_avgpool, convolutions) instead of
 * reordering at every call. For a residual model (batchnorm, fused relus,
 * an identity and a projection shortcut, stride 2, global average pooling)
 * and a LeNet-like one (6 filters stay NCHW; overlapping, padded max and
 * average pooling that stay blocked, and pooling back to NCHW for a dense
 * layer), two training steps of a tower
 * whose backend has the blocked layout is compared with a tower whose
 * backend is told not to use it: the loss, the logits, every gradient and
 * the batchnorm running statistics must be bitwise equal, on 1 and 2
 * threads. The checks also see that the blocked layout was really chosen
 * where it should be, so they cannot pass by both towers being NCHW.
 * A 32-channel pool keeps it too (two blocks). Where oneDNN runs below
 * AVX-512 the float32 blocked layout is NHWC (cpu_backend.c) and the
 * gradients agree within 1e-5 (fp32_nhwc below); where our kernels run at
 * AVX2 too, the blocked tower's 3x3 convolutions of 16 channels are
 * conv_wino.c's Winograd ones (NHWC only) and everything agrees within
 * 1e-5 (loose below), as on a CPU without SSE4.1, where oneDNN's
 * convolutions are its reference ones.
 * The bf16 backend keeps the blocked layout in NHWC order, and its blocked
 * activations in bf16 (backend.h): the same models on it, within bf16's
 * precision of its NCHW tower (whose activations are float32) and bitwise
 * on 1 and 2 threads; a blocked activation read back as bf16 is the NCHW
 * tower's within bf16's precision; the 32-channel pool keeps it too.
 * Without AVX512_BF16 or AMX that part SKIPs visibly.
 * Without oneDNN the backend has no blocked layout: visible skip.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#ifdef HAVE_DNNL
#include <dnnl.h>
#endif

#include "backend/cpu/cpu_isa.h"
#include "model/model.h"
#include "tt_model_texts.h"
#include "tt_ref.h"
#include "tt_test.h"

/* The float32 blocked layout is NHWC where oneDNN's convolutions run below
 * AVX-512 (cpu_backend.c): its kernels there sum a weight gradient in
 * another order for NHWC than for the 8-channel blocks it picks behind an
 * NCHW tower, so the gradients agree to float32's precision (measured
 * below 1e-6 of the largest), not bitwise, and are the same bits on 1 and
 * 2 threads. Everything else stays bitwise. */
static bool fp32_nhwc;
/* The blocked tower's convolutions sum in another order than the NCHW
 * tower's, so the logits, running statistics and activations too agree to
 * float32's precision (measured below 1e-6 of the largest), not bitwise:
 * where conv_wino.c takes its 16 -> 16 convolutions (its rule: AVX2, NHWC;
 * loose = "Winograd"), and on a CPU without SSE4.1, whose oneDNN runs its
 * reference convolutions, which sum NHWC and NCHW in other orders (loose =
 * "oneDNN's reference kernels"; found under qemu -cpu core2duo). NULL:
 * bitwise. */
static const char *loose;

/* Two training steps (train_two_steps) on a tower of a fresh backend;
 * blocked says whether the backend may use its blocked layout. */
static bool run(const model_t *m, bool bf16, int threads, bool blocked, const float *x,
                const int32_t *y, int n, const char *probe, step_result *r, bool *chosen)
{
    tt_err err = {0};
    backend_t *be = bf16 ? backend_cpu_create_bf16(0, threads, &err)
                         : backend_cpu_create(0, threads, &err);
    return train_two_steps(be, blocked, m, x, y, n, probe, r, chosen, NULL);
}

/* `expect` lists "name=0|1" pairs: the layout each named layer must get.
 * bf16: both towers on the bf16 backend, whose blocked layout is NHWC and
 * whose blocked activations are bf16. `probe`: a layer whose output is
 * compared too (a blocked one: read in its layout and type). grad_tol: how
 * far bf16 gradients may be from the NCHW tower's (see main). */
static void check_model(const char *label, bool bf16, const char *text,
                        const char *const *expect, int n, const char *probe, double grad_tol)
{
    model_cfg cfg;
    model_t m;
    float *x;
    int32_t *y;
    if (!model_and_batch(label, text, n, &cfg, &m, &x, &y))
        return;
    step_result plain, blk[2];
    bool *chosen = calloc((size_t)m.n_layers, sizeof(bool)), *none = calloc((size_t)m.n_layers, 1);
    bool ran = run(&m, bf16, 1, false, x, y, n, probe, &plain, none);
    for (int th = 0; th < 2 && ran; th++)
        ran = run(&m, bf16, th + 1, true, x, y, n, probe, &blk[th], chosen);
    if (tt_ok(ran, "%s: towers ran, NCHW and blocked, 1 and 2 threads", label)) {
        check_layouts(label, &m, expect, none, chosen);
        size_t nl = (size_t)n * cfg.classes;
        /* bf16: oneDNN's AMX kernels sum in another order for NHWC than for
         * their own pick behind an NCHW side (float32 differences of ~1e-5,
         * measured), and rounding to bf16 turns some of those into a bf16
         * step: the same within bf16's precision, and the same bits on 1
         * and 2 threads. 3e-2 of the largest value: a few bf16 steps (the
         * residual model measured 1.0e-2 in its gradients); a misread layout
         * is off by the values themselves */
        for (int th = 0; th < 2 && bf16; th++) {
            char at[160];
            snprintf(at, sizeof(at), "%s, %d thread(s)", label, th + 1);
            check_probe_bf16(at, &m, n, probe, chosen, &blk[th], &plain);
            within_bf16(at, "NCHW's", &m, n, &blk[th], &plain, grad_tol);
        }
        bool exact = bf16 || !fp32_nhwc;
        if (!exact)
            tt_ok(memcmp(blk[0].grads, blk[1].grads, m.n_trainable * sizeof(float)) == 0,
                  "%s: the same gradient bits on 1 and 2 threads (NHWC)", label);
        if (loose)
            tt_ok(memcmp(blk[0].logits, blk[1].logits, nl * sizeof(float)) == 0 &&
                      memcmp(blk[0].params, blk[1].params, m.n_floats * sizeof(float)) == 0,
                  "%s: the same logits and parameter bits on 1 and 2 threads (%s)", label, loose);
        if (bf16)
            tt_ok(memcmp(blk[0].logits, blk[1].logits, nl * sizeof(float)) == 0 &&
                      memcmp(blk[0].grads, blk[1].grads, m.n_trainable * sizeof(float)) == 0 &&
                      memcmp(blk[0].params, blk[1].params, m.n_floats * sizeof(float)) == 0,
                  "%s: the same bits on 1 and 2 threads", label);
        for (int th = 0; th < 2; th++) {
            if (bf16) {
                free_result(&blk[th]);
                continue;
            }
            if (loose)
                tt_ok(tt_rel_err_f(blk[th].logits, plain.logits, nl) < 1e-5 &&
                          fabs(plain.loss - blk[th].loss) < 1e-5 * fabs(plain.loss),
                      "%s, %d thread(s): logits and loss within 1e-5 of NCHW's (%.1e; %s)",
                      label, th + 1, tt_rel_err_f(blk[th].logits, plain.logits, nl), loose);
            else
                tt_ok(memcmp(plain.logits, blk[th].logits, nl * sizeof(float)) == 0 &&
                          plain.loss == blk[th].loss,
                      "%s, %d thread(s): logits and loss bitwise equal to NCHW's", label, th + 1);
            if (exact)
                tt_ok(memcmp(plain.grads, blk[th].grads, m.n_trainable * sizeof(float)) == 0,
                      "%s, %d thread(s): every gradient bitwise equal to NCHW's", label, th + 1);
            else
                tt_ok(tt_rel_err_f(blk[th].grads, plain.grads, m.n_trainable) < 1e-5,
                      "%s, %d thread(s): every gradient within 1e-5 of NCHW's (%.1e; NHWC)",
                      label, th + 1, tt_rel_err_f(blk[th].grads, plain.grads, m.n_trainable));
            size_t np_ = (size_t)n * shape3_size(m.layers[layer_index(&m, probe)].out);
            if (loose) {
                tt_ok(tt_rel_err_f(blk[th].params, plain.params, m.n_floats) < 1e-5,
                      "%s, %d thread(s): parameters and running statistics within 1e-5 (%.1e; "
                      "%s)", label, th + 1,
                      tt_rel_err_f(blk[th].params, plain.params, m.n_floats), loose);
                tt_ok(tt_rel_err_f(blk[th].probe, plain.probe, np_) < 1e-5,
                      "%s, %d thread(s): activation %s (read in its layout) within 1e-5 (%.1e; "
                      "%s)", label, th + 1, probe,
                      tt_rel_err_f(blk[th].probe, plain.probe, np_), loose);
                free_result(&blk[th]);
                continue;
            }
            tt_ok(memcmp(plain.params, blk[th].params, m.n_floats * sizeof(float)) == 0,
                  "%s, %d thread(s): parameters and running statistics bitwise equal", label,
                  th + 1);
            tt_ok(memcmp(plain.probe, blk[th].probe, np_ * sizeof(float)) == 0,
                  "%s, %d thread(s): activation %s (read in its layout) bitwise equal", label,
                  th + 1, probe);
            free_result(&blk[th]);
        }
        free_result(&plain);
    }
    free(chosen);
    free(none);
    model_and_batch_free(&cfg, &m, x, y);
}

int main(void)
{
    tt_err err = {0};
    backend_t *be = backend_cpu_create(0, 1, &err);
    bool has = be != NULL && be->blocked_layout;
    fp32_nhwc = has && be->blocked_nhwc;
    if (be != NULL)
        be->destroy(be);
    if (!has) {
        tt_skip("the CPU backend has no blocked layout (built without oneDNN)");
        return tt_done();
    }
    static const char *const resnet_expect[] = {"c0=1", "b0=1", "r0=1", "c1=1", "b1=1",
                                                "b2=1", "a0=1", "c3=1", "b3=1", "p0=1",
                                                "pb=1", "a1=1", "r3=1", "g=0", "fc=0", NULL};
    static const char *const lenet_expect[] = {"c0=0", "m0=0", "c1=1", "m1=1", "c2=1", "m2=1", "v0=1",
                                               "c3=1", "v1=0", "fc=0", NULL};
    static const char *const wide_pool_expect[] = {"c0=1", "m0=1", "c1=1", "fc=0", NULL};
    /* oneDNN without SSE4.1 runs its reference convolutions */
    const char *ref = NULL;
#ifdef HAVE_DNNL
    if (fp32_nhwc && (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_sse41) == 0)
        ref = "oneDNN's reference kernels";
#endif
    /* the residual model's c1 and c2 (16 -> 16, 3x3, no bias or relu) are
     * what conv_wino.c's rule takes at AVX2 */
    loose = ref != NULL ? ref : fp32_nhwc && cpu_isa() == CPU_ISA_AVX2 ? "Winograd" : NULL;
    check_model("residual model", false, RESNET, resnet_expect, 6, "a1", 0);
    loose = ref;
    check_model("LeNet-like model", false, LENET, lenet_expect, 5, "m1", 0);
    check_model("32-channel pool", false, WIDE_POOL, wide_pool_expect, 5, "m0", 0);
    /* bf16: the blocked layout in NHWC order */
    char why[256];
    if (backend_cpu_bf16_isa(why, sizeof(why)) == NULL) {
        tt_skip("the blocked layout in NHWC order, precision bf16 (%s)", why);
        return tt_done();
    }
    /* bf16 activations: the NCHW tower keeps float32 ones, so every
     * activation differs by its rounding (a few bf16 steps after several
     * layers), and a relu whose input lies that close to zero masks its
     * gradient the other way. With 6 images of 4x4 pixels one flipped mask
     * moves a channel's gradient by a share of its own size: the residual
     * model's gradients measured 1.9e-1 of the largest from NCHW's (1e-2
     * with float32 activations), with 12 images 4.7e-2, 24 5.4e-2, 48
     * 2.1e-2: it runs on 48, held to 1e-1. The same model with each relu
     * replaced by a batchnorm (no masks) shows what the arithmetic itself
     * gives on 6 images: 5.3e-3, held to the usual 3e-2 */
    char *no_relu = malloc(strlen(RESNET) * 2);
    const char *from = RESNET, *hit;
    no_relu[0] = '\0';
    while ((hit = strstr(from, "\"relu\"")) != NULL) {
        strncat(no_relu, from, (size_t)(hit - from));
        strcat(no_relu, "\"batchnorm\"");
        from = hit + strlen("\"relu\"");
    }
    strcat(no_relu, from);
    check_model("residual model, bf16 (NHWC)", true, RESNET, resnet_expect, 48, "a1", 1e-1);
    check_model("residual model, relus as batchnorms, bf16 (NHWC)", true, no_relu,
                resnet_expect, 6, "a1", 3e-2);
    check_model("LeNet-like model, bf16 (NHWC)", true, LENET, lenet_expect, 5, "m1", 3e-2);
    check_model("32-channel pool, bf16 (NHWC)", true, WIDE_POOL, wide_pool_expect, 5, "m0", 3e-2);
    free(no_relu);
    return tt_done();
}

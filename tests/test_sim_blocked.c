/* test_sim_blocked.c - the simulated GPU in the blocked layout (sim_blocked.c):
 * the sim twin of test_blocked_layout.c.
 *
 * In bf16 sim keeps activations as the CUDA backend does (precision.c's
 * prec_layout_of: bf16 NHWC): convolutions read and write bf16 in place,
 * batchnorm, add, relu, pools and global average pooling run the CPU's
 * blocked operations on sim's queue. For a residual model (batchnorm, fused
 * relus, identity and projection shortcuts, stride 2, global average
 * pooling), a LeNet-like one and a 32-channel pool, two training steps of a
 * sim tower in that layout are compared with a sim tower told not to use it
 * (NCHW, float32 activations, the 16-bit copies of every call): the
 * layouts chosen, a blocked activation held in bf16 and within bf16's
 * precision of the NCHW tower's float32 one, logits, loss, gradients and
 * parameters within bf16's precision (the tolerances of
 * test_blocked_layout.c's bf16 part, whose reasons hold here: the NCHW
 * tower's activations are float32). Where the CPU has bf16 kernels, the
 * same on the CPU's bf16 backend (oneDNN, another summation order) within
 * bf16's precision too.
 *
 * Activations that only forward passes read share buffers by lifetime
 * (model.c): with and without the sharing (TT_ACT_SHARING=0) sim towers in
 * fp32 and bf16 train to the same bits, and the sharing really shared.
 */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "tt_model_texts.h"
#include "tt_ref.h"
#include "tt_test.h"

/* Two training steps (train_two_steps) on a tower of a fresh backend
 * (sim with room for its 16-bit copies, or on_cpu the CPU's bf16 one);
 * blocked says whether the backend may use its blocked layout. */
static bool run(const model_t *m, bool bf16, bool on_cpu, int threads, bool blocked,
                const float *x, const int32_t *y, int n, const char *probe, step_result *r,
                bool *chosen, int *shared_bufs)
{
    tt_err err = {0};
    backend_t *be = on_cpu ? backend_cpu_create_bf16(0, threads, &err)
                           : backend_sim_create(0, bf16 ? "bf16" : "fp32", &err);
    if (be != NULL && !on_cpu && be->dev->reserve_copies(be, (size_t)1 << 24, &err) != 0) {
        be->destroy(be);
        return false;
    }
    return train_two_steps(be, blocked, m, x, y, n, probe, r, chosen, shared_bufs);
}

/* `expect` lists "name=0|1" pairs: the layout each named layer must get. */
static void check_model(const char *label, const char *text, const char *const *expect, int n,
                        const char *probe, double grad_tol, bool cpu_bf16)
{
    model_cfg cfg;
    model_t m;
    float *x;
    int32_t *y;
    if (!model_and_batch(label, text, n, &cfg, &m, &x, &y))
        return;
    step_result plain, blk, cpu;
    int shared;
    bool *chosen = calloc((size_t)m.n_layers, sizeof(bool)), *none = calloc((size_t)m.n_layers, 1);
    bool ran = run(&m, true, false, 1, false, x, y, n, probe, &plain, none, &shared) &&
               run(&m, true, false, 1, true, x, y, n, probe, &blk, chosen, &shared);
    if (tt_ok(ran, "%s: sim towers ran, NCHW and blocked", label)) {
        check_layouts(label, &m, expect, none, chosen);
        check_probe_bf16(label, &m, n, probe, chosen, &blk, &plain);
        within_bf16(label, "the NCHW sim tower's", &m, n, &blk, &plain, grad_tol);
        if (cpu_bf16 && run(&m, true, true, 1, true, x, y, n, probe, &cpu, chosen, &shared)) {
            within_bf16(label, "the CPU's bf16 backend (blocked NHWC)", &m, n, &blk, &cpu,
                        grad_tol);
            free_result(&cpu);
        }
        free_result(&blk);
        free_result(&plain);
    }
    free(chosen);
    free(none);
    model_and_batch_free(&cfg, &m, x, y);
}

/* Sharing activation buffers by lifetime changes no bit (sim, fp32 and
 * bf16): logits, loss, gradients, parameters and the probe. */
static void check_sharing(const char *label, const char *text, bool bf16, int n,
                          const char *probe)
{
    model_cfg cfg;
    model_t m;
    float *x;
    int32_t *y;
    if (!model_and_batch(label, text, n, &cfg, &m, &x, &y))
        return;
    step_result on, off;
    int shared_on = 0, shared_off = 0;
    bool *chosen = calloc((size_t)m.n_layers, sizeof(bool));
    setenv("TT_ACT_SHARING", "0", 1);
    bool ran = run(&m, bf16, false, 1, true, x, y, n, probe, &off, chosen, &shared_off);
    unsetenv("TT_ACT_SHARING");
    ran = ran && run(&m, bf16, false, 1, true, x, y, n, probe, &on, chosen, &shared_on);
    if (tt_ok(ran, "%s: sim towers ran with and without shared activations", label)) {
        size_t nl = (size_t)n * m.cfg->classes;
        size_t np = (size_t)n * shape3_size(m.layers[layer_index(&m, probe)].out);
        tt_ok(shared_on > 0 && shared_off == 0,
              "%s: the forward-only outputs share %d buffer(s); none when turned off", label,
              shared_on);
        tt_ok(memcmp(on.logits, off.logits, nl * 4) == 0 && on.loss == off.loss &&
                  memcmp(on.grads, off.grads, m.n_trainable * 4) == 0 &&
                  memcmp(on.params, off.params, m.n_floats * 4) == 0 &&
                  memcmp(on.probe, off.probe, np * 4) == 0,
              "%s: logits, loss, gradients, parameters and %s bitwise equal with and without "
              "sharing", label, probe);
        free_result(&on);
        free_result(&off);
    }
    free(chosen);
    model_and_batch_free(&cfg, &m, x, y);
}

int main(void)
{
    static const char *const resnet_expect[] = {"c0=1", "b0=1", "r0=1", "c1=1", "b1=1",
                                                "b2=1", "a0=1", "c3=1", "b3=1", "p0=1",
                                                "pb=1", "a1=1", "r3=1", "g=0", "fc=0", NULL};
    static const char *const lenet_expect[] = {"c0=0", "m0=0", "c1=1", "m1=1", "c2=1", "m2=1", "v0=1",
                                               "c3=1", "v1=0", "fc=0", NULL};
    static const char *const wide_pool_expect[] = {"c0=1", "m0=1", "c1=1", "fc=0", NULL};
    char why[256];
    bool cpu_bf16 = backend_cpu_bf16_isa(why, sizeof(why)) != NULL;
    if (!cpu_bf16)
        tt_skip("sim against the CPU's bf16 backend (%s)", why);
    tt_err err = {0};
    backend_t *be = backend_sim_create(0, "bf16", &err);
    tt_ok(be != NULL && be->blocked_layout && be->blocked_nhwc && be->blocked_bf16 &&
              be->relu_forward_blocked != NULL && be->batchnorm_forward_blocked != NULL,
          "sim in bf16 keeps activations in bf16 NHWC, as prec_layout_of says");
    if (be != NULL)
        be->destroy(be);
    be = backend_sim_create(0, "fp32", &err);
    tt_ok(be != NULL && !be->blocked_layout, "sim in fp32 keeps them NCHW float32");
    if (be != NULL)
        be->destroy(be);
    /* 48 images: test_blocked_layout.c's reason (a relu mask flipped by a
     * bf16 step moves a small batch's gradient by a share of its size) */
    check_model("residual model, sim bf16", RESNET, resnet_expect, 48, "a1", 1e-1, cpu_bf16);
    check_model("LeNet-like model, sim bf16", LENET, lenet_expect, 5, "m1", 3e-2, cpu_bf16);
    check_model("32-channel pool, sim bf16", WIDE_POOL, wide_pool_expect, 5, "m0", 3e-2,
                cpu_bf16);
    check_sharing("residual model, sim fp32", RESNET, false, 6, "a1");
    check_sharing("residual model, sim bf16", RESNET, true, 6, "a1");
    return tt_done();
}

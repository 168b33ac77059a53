/* test_sim_nhwc_f32.c - float32 activations in NHWC on the simulated GPU:
 * the layout a tf32 tower will keep once convbench shows NHWC float faster
 * (precision.c's PREC_TF32_NHWC), run now by TT_CUDA_LAYOUT=nhwc
 * (prec_device_layout), so that its host path is in make check.
 *
 * sim in fp32 with TT_CUDA_LAYOUT=nhwc: the backend's layout is blocked,
 * NHWC and float32 (not bf16); a tower puts convolutions, batchnorm, relu,
 * add and pools in it; two training steps of a residual model and a
 * LeNet-like one (tt_model_texts.h) match the same sim tower in NCHW
 * (TT_CUDA_LAYOUT=nchw) within float32's precision: logits, loss,
 * gradients and parameters to 1e-5 relative (one float32 rounding per
 * operation apart at most: sim's convolutions and the CPU's blocked
 * batchnorm compute what the NCHW ones do). The NHWC tower reserves its
 * convolutions' float32 copies and copies its filters once a step (the
 * KRSC copies a GPU reads; precision.h); the NCHW one neither. TT_CUDA_LAYOUT=nchw in bf16
 * turns the bf16 layout off too.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim.h"
#include "train/device_towers.h"
#include "tt_model_texts.h"
#include "tt_ref.h"
#include "tt_test.h"

typedef struct {
    float *logits, *grads, *params;
    double loss;
    int blocked_layers;
    uint64_t conversions; /* the weight copies made (weight_copies.h) */
    uint64_t nhwc_convs;  /* convolutions with a blocked (NHWC) side */
    bool layout, nhwc, bf16;
} result;

static void run(const model_t *m, const char *layout, const float *x, const int32_t *y, int n,
                result *r)
{
    memset(r, 0, sizeof(*r));
    setenv("TT_CUDA_LAYOUT", layout, 1);
    tt_err err = {0};
    backend_t *be = backend_sim_create(0, "fp32", &err);
    unsetenv("TT_CUDA_LAYOUT");
    tower_t t;
    /* the copies' scratch, as device_towers_create reserves it (float32
     * NHWC convolutions have copies too: precision.h) */
    if (be == NULL || tower_create(m, be, n, &t, &err) != 0 ||
        be->dev->reserve_copies(be, device_copies_bytes(m, t.blocked, false, PRECISION_FP32, n),
                                &err) != 0) {
        tt_diag("setup: %s", err.msg);
        return;
    }
    r->layout = be->blocked_layout;
    r->nhwc = be->blocked_nhwc;
    r->bf16 = be->blocked_bf16;
    for (int i = 0; i < m->n_layers; i++) {
        int src = model_layer_input(m, i, 0);
        r->blocked_layers += t.blocked[i];
        r->nhwc_convs += m->layers[i].cfg->type == LAYER_CONV2D &&
                         (t.blocked[i] || (src >= 0 && t.blocked[src]));
    }
    float *host = malloc(m->n_floats * sizeof(float));
    model_init_params(m, 7, host);
    tower_set_params(&t, host);
    free(host);
    size_t out = (size_t)n * (size_t)m->cfg->classes;
    r->logits = malloc(out * sizeof(float));
    r->grads = malloc(m->n_trainable * sizeof(float));
    r->params = malloc(m->n_floats * sizeof(float));
    for (int s = 0; s < 2; s++) {
        tower_load_batch(&t, n, x + (size_t)s * n * shape3_size(m->input), y + s * n);
        const float *logits = tower_step(&t, n, true, true, 3);
        be->download(be, r->logits, logits, out * sizeof(float));
        be->sgd_step(be, m->n_trainable, 0.1f, 0.0f, false, 0.0f, s == 0, t.params, t.grads,
                     NULL);
    }
    be->download(be, r->grads, t.grads, m->n_trainable * sizeof(float));
    r->conversions = sim_weight_conversions(be);
    tower_get_params(&t, r->params);
    r->loss = t.loss_sum;
    if (be->dev->sync(be, &err) != 0)
        tt_diag("sim: %s", err.msg);
    tower_free(&t);
    be->destroy(be);
}

static void result_free(result *r)
{
    free(r->logits);
    free(r->grads);
    free(r->params);
}

static void check_model(const char *label, const char *text, int n)
{
    model_cfg cfg;
    model_t m;
    tt_err err = {0};
    if (!tt_ok(load_model(text, &cfg, &m, &err), "%s: model loads %s", label, err.msg))
        return;
    size_t isz = shape3_size(m.input);
    float *x = malloc(2 * (size_t)n * isz * sizeof(float));
    int32_t *y = malloc(2 * (size_t)n * sizeof(int32_t));
    uint64_t s = 4321;
    for (size_t i = 0; i < 2 * (size_t)n * isz; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    for (int i = 0; i < 2 * n; i++)
        y[i] = i % cfg.classes;
    result nhwc, nchw;
    run(&m, "nhwc", x, y, n, &nhwc);
    run(&m, "nchw", x, y, n, &nchw);
    tt_ok(nhwc.layout && nhwc.nhwc && !nhwc.bf16 && nhwc.blocked_layers > 0 &&
              !nchw.layout && nchw.blocked_layers == 0,
          "%s: TT_CUDA_LAYOUT=nhwc gives sim fp32 the NHWC float32 layout (%d layers in it); "
          "nchw none", label, nhwc.blocked_layers);
    /* the float32 (KRSC on a GPU) filter copies: each NHWC conv's once a
     * step */
    tt_ok(nhwc.nhwc_convs > 0 && nhwc.conversions == 2 * nhwc.nhwc_convs &&
              nchw.conversions == 0,
          "%s: NHWC float32 copies each NHWC conv's filters once a step (%llu copies in 2 "
          "steps, %llu such convs); NCHW none", label, (unsigned long long)nhwc.conversions,
          (unsigned long long)nhwc.nhwc_convs);
    if (nhwc.logits != NULL && nchw.logits != NULL) {
        size_t out = (size_t)n * cfg.classes;
        double el = tt_rel_err_f(nhwc.logits, nchw.logits, out),
               eg = tt_rel_err_f(nhwc.grads, nchw.grads, m.n_trainable),
               ep = tt_rel_err_f(nhwc.params, nchw.params, m.n_floats);
        tt_ok(el <= 1e-5 && eg <= 1e-5 && ep <= 1e-5 &&
                  fabs(nhwc.loss - nchw.loss) <= 1e-5 * fabs(nchw.loss),
              "%s: 2 SGD steps in NHWC float32 match NCHW within 1e-5 (logits %.1e, "
              "gradients %.1e, parameters %.1e)", label, el, eg, ep);
    }
    result_free(&nhwc);
    result_free(&nchw);
    free(x);
    free(y);
    model_free(&m);
    model_cfg_free(&cfg);
}

int main(void)
{
    (void)WIDE_POOL; /* tt_model_texts.h's, for the other tests */
    (void)layer_index;
    (void)activation_nchw;
    check_model("residual model", RESNET, 16);
    check_model("LeNet-like model", LENET, 5);
    setenv("TT_CUDA_LAYOUT", "nchw", 1);
    tt_err err = {0};
    backend_t *be = backend_sim_create(0, "bf16", &err);
    unsetenv("TT_CUDA_LAYOUT");
    tt_ok(be != NULL && !be->blocked_layout && !be->blocked_bf16,
          "TT_CUDA_LAYOUT=nchw: sim bf16 keeps NCHW float32 activations too");
    if (be != NULL)
        be->destroy(be);
    be = backend_sim_create(0, "bf16", &err);
    tt_ok(be != NULL && be->blocked_layout && be->blocked_nhwc && be->blocked_bf16,
          "unset: sim bf16 in bf16 NHWC; fp32 stays NCHW (PREC_TF32_NHWC off)");
    if (be != NULL)
        be->destroy(be);
    return tt_done();
}

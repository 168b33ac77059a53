/* test_weight_copies.c - the 16-bit weight copies made once per step
 * (backend/weight_copies.h), on the simulated GPU in bf16.
 *
 * 1. The bookkeeping alone: no copy outside a step or outside a block;
 *    the first use in a step converts, later uses read; a new step makes
 *    every copy stale; TT_WEIGHT_COPIES=each_call converts at every use; a
 *    bad value is refused.
 * 2. Two models (a residual one: NHWC bf16 convolutions and a dense
 *    layer; a LeNet-like one: an NCHW convolution too) train 3 SGD steps on
 *    sim bf16, then take new weights by an upload (a checkpoint restore or
 *    a parameter server's) and run forward; beside them a second model
 *    instance on the same device (an evaluation tower) runs forward after
 *    every step. Against the same run with TT_WEIGHT_COPIES=each_call
 *    (every call converts its weights, as before the copies): logits of
 *    every step, loss, parameters, and the evaluation tower's logits equal
 *    bit for bit. A copy kept across a step (the optimizer's or the
 *    upload's new weights unseen) gives other logits: the test checks that
 *    the weights did change the logits, so such a copy cannot pass.
 * 3. Conversions: once per weight tensor per step (the tower's conv2d and
 *    dense layers, counted from the model), where each_call converts at
 *    every forward and backward-data call.
 * The scratch reserved is device_copies_bytes's (without w's place): the
 *    towers' calls fit in it (a larger need is a sim error, checked).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim.h"
#include "backend/weight_copies.h"
#include "train/device_towers.h"
#include "tt_model_texts.h"
#include "tt_test.h"

#define STEPS 3

static void test_bookkeeping(void)
{
    char why[128];
    unsetenv("TT_WEIGHT_COPIES");
    weight_copies wc;
    tt_ok(weight_copies_init(&wc, why, sizeof(why)) == 0 && !wc.each_call, "default: per step");
    float block[100];
    int mirror;
    void *m = NULL;
    size_t at = 99;
    tt_ok(weight_copies_add(&wc, block, 100, &mirror) == 0, "a block registers");
    bool ok = weight_copies_find(&wc, block + 10, 20, WC_AS_STORED, &m, &at) == WC_NONE;
    weight_copies_step(&wc, block, true);
    ok = ok && weight_copies_find(&wc, block + 10, 20, WC_AS_STORED, &m, &at) == WC_CONVERT &&
         m == &mirror && at == 10;
    ok = ok && weight_copies_find(&wc, block + 10, 20, WC_AS_STORED, &m, &at) == WC_FRESH;
    ok = ok && weight_copies_find(&wc, block + 10, 20, WC_KRSC, &m, &at) == WC_CONVERT;
    ok = ok && weight_copies_find(&wc, block + 30, 70, WC_AS_STORED, &m, &at) == WC_CONVERT;
    ok = ok && weight_copies_find(&wc, block + 30, 71, WC_AS_STORED, &m, &at) == WC_NONE;
    weight_copies_step(&wc, block, false);
    ok = ok && weight_copies_find(&wc, block + 10, 20, WC_KRSC, &m, &at) == WC_NONE;
    weight_copies_step(&wc, block, true);
    ok = ok && weight_copies_find(&wc, block + 10, 20, WC_KRSC, &m, &at) == WC_CONVERT;
    ok = ok && weight_copies_find(&wc, block + 10, 20, WC_KRSC, &m, &at) == WC_FRESH;
    tt_ok(ok && wc.conversions == 4,
          "outside a step: none; in a step the first use converts (4 so far: %llu), later "
          "uses read; another order converts; past the block's end: none; a new step: stale",
          (unsigned long long)wc.conversions);
    tt_ok(weight_copies_remove(&wc, block) == &mirror &&
              weight_copies_find(&wc, block + 10, 20, WC_KRSC, &m, &at) == WC_NONE &&
              weight_copies_remove(&wc, block) == NULL,
          "removed: its mirror back, no copies");
    weight_copies_free(&wc);
    setenv("TT_WEIGHT_COPIES", "each_call", 1);
    weight_copies_init(&wc, why, sizeof(why));
    weight_copies_add(&wc, block, 100, &mirror);
    weight_copies_step(&wc, block, true);
    ok = weight_copies_find(&wc, block, 5, WC_AS_STORED, &m, &at) == WC_CONVERT &&
         weight_copies_find(&wc, block, 5, WC_AS_STORED, &m, &at) == WC_CONVERT;
    tt_ok(ok, "TT_WEIGHT_COPIES=each_call: every use converts");
    weight_copies_free(&wc);
    setenv("TT_WEIGHT_COPIES", "sometimes", 1);
    tt_ok(weight_copies_init(&wc, why, sizeof(why)) == -1 && strstr(why, "sometimes") != NULL,
          "a bad value: refused (%s)", why);
    unsetenv("TT_WEIGHT_COPIES");
}

typedef struct {
    float *logits[STEPS + 1]; /* each training step's, then the forward after the upload */
    float *eval[STEPS];       /* the second instance's after each step */
    float *params;
    double loss;
    uint64_t conversions;
    bool ok;
} run_result;

static float *logits_of(backend_t *be, const float *dev, size_t count)
{
    float *h = malloc(count * sizeof(float));
    be->download(be, h, dev, count * sizeof(float));
    return h;
}

static void set_params(const model_t *m, tower_t *t, uint64_t seed)
{
    float *host = malloc(m->n_floats * sizeof(float));
    model_init_params(m, seed, host);
    tower_set_params(t, host);
    free(host);
}

/* The run of section 2 with TT_WEIGHT_COPIES = mode ("step" / "each_call"). */
static void run(const model_t *m, const char *mode, const float *x, const int32_t *y, int n,
                run_result *r)
{
    memset(r, 0, sizeof(*r));
    setenv("TT_WEIGHT_COPIES", mode, 1);
    tt_err err = {0};
    backend_t *be = backend_sim_create(0, "bf16", &err);
    unsetenv("TT_WEIGHT_COPIES");
    tower_t t, e;
    if (be == NULL ||
        be->dev->reserve_copies(be, device_copies_bytes(m, NULL, false, PRECISION_BF16, n), &err) != 0 ||
        tower_create(m, be, n, &t, &err) != 0) {
        tt_diag("setup: %s", err.msg);
        return;
    }
    if (tower_create(m, be, n, &e, &err) != 0) {
        tt_diag("setup: %s", err.msg);
        return;
    }
    set_params(m, &t, 7);
    set_params(m, &e, 8);
    size_t out = (size_t)n * (size_t)m->cfg->classes, isz = shape3_size(m->input);
    for (int s = 0; s < STEPS; s++) {
        tower_load_batch(&t, n, x + (size_t)s * n * isz, y + s * n);
        r->logits[s] = logits_of(be, tower_step(&t, n, true, true, 3), out);
        be->sgd_step(be, m->n_trainable, 0.1f, 0.0f, false, 0.0f, s == 0, t.params, t.grads, NULL);
        tower_load_batch(&e, n, x, y);
        r->eval[s] = logits_of(be, tower_step(&e, n, false, false, 0), out);
    }
    set_params(m, &t, 11); /* an upload: a restore, a parameter server's copy */
    r->logits[STEPS] = logits_of(be, tower_step(&t, n, false, false, 0), out);
    r->loss = t.loss_sum;
    r->params = malloc(m->n_floats * sizeof(float));
    tower_get_params(&t, r->params);
    r->conversions = sim_weight_conversions(be);
    r->ok = be->dev->sync(be, &err) == 0;
    if (!r->ok)
        tt_diag("sim: %s", err.msg);
    tower_free(&t);
    tower_free(&e);
    be->destroy(be);
}

static void run_free(run_result *r)
{
    for (int s = 0; s <= STEPS; s++)
        free(r->logits[s]);
    for (int s = 0; s < STEPS; s++)
        free(r->eval[s]);
    free(r->params);
}

static bool same(const float *a, const float *b, size_t count)
{
    return a != NULL && b != NULL && memcmp(a, b, count * sizeof(float)) == 0;
}

static void check_model(const char *label, const char *text, int n)
{
    model_cfg cfg;
    model_t m;
    tt_err err = {0};
    if (!tt_ok(load_model(text, &cfg, &m, &err), "%s: model loads %s", label, err.msg))
        return;
    size_t isz = shape3_size(m.input), out = (size_t)n * (size_t)cfg.classes;
    float *x = malloc((size_t)STEPS * n * isz * sizeof(float));
    int32_t *y = malloc((size_t)STEPS * n * sizeof(int32_t));
    uint64_t s = 99;
    for (size_t i = 0; i < (size_t)STEPS * n * isz; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    for (int i = 0; i < STEPS * n; i++)
        y[i] = i % cfg.classes;
    int weights = 0; /* the tensors that multiply in bf16: conv2d's and dense's */
    for (int i = 0; i < m.n_layers; i++)
        weights += m.layers[i].cfg->type == LAYER_CONV2D || m.layers[i].cfg->type == LAYER_DENSE;
    run_result step, each;
    run(&m, "step", x, y, n, &step);
    run(&m, "each_call", x, y, n, &each);
    tt_ok(step.ok && each.ok, "%s: both runs without a device error (the scratch without w's "
                              "place was enough)", label);
    bool all = true, eval = true, changed = true;
    for (int k = 0; k <= STEPS; k++)
        all = all && same(step.logits[k], each.logits[k], out);
    for (int k = 0; k < STEPS; k++)
        eval = eval && same(step.eval[k], each.eval[k], out) && same(step.eval[k], step.eval[0], out);
    for (int k = 1; k <= STEPS; k++) /* new weights, new logits (the batch changes too) */
        changed = changed && !same(step.logits[k], step.logits[k - 1], out);
    tt_ok(all && step.loss == each.loss && same(step.params, each.params, m.n_floats),
          "%s: copies made once per step give the bits of conversions at every call: logits of "
          "%d SGD steps and of a forward after an upload, loss, parameters", label, STEPS);
    tt_ok(eval, "%s: a second model instance on the device (evaluation) reads its own weights' "
                "copies: the same logits after every step, in both", label);
    tt_ok(changed, "%s: the optimizer's and the upload's new weights changed the logits (a "
                   "stale copy could not pass the comparison)", label);
    /* a step converts each weight of the stepping tower once: STEPS
     * training steps + the forward after the upload on the training
     * tower, STEPS forwards of the second */
    uint64_t once = (uint64_t)weights * (2 * STEPS + 1);
    tt_ok(step.conversions == once,
          "%s: %d weight tensors converted once a step: %llu conversions (expected %llu)",
          label, weights, (unsigned long long)step.conversions, (unsigned long long)once);
    uint64_t per_call = (uint64_t)weights * (2 * STEPS + 1) + (uint64_t)(weights - 1) * STEPS;
    tt_ok(each.conversions >= per_call,
          "%s: each_call converts at every forward and backward-data call: %llu (at least %llu)",
          label, (unsigned long long)each.conversions, (unsigned long long)per_call);
    run_free(&step);
    run_free(&each);
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
    test_bookkeeping();
    check_model("residual model (NHWC convolutions, dense)", RESNET, 16);
    check_model("LeNet-like model (an NCHW convolution too)", LENET, 5);
    return tt_done();
}

/* test_optim.c - optimizer_apply (src/optim/optimizer.c, over the CPU
 * backend's sgd_step, adam_step and sumsq) for 10 steps of changing
 * gradients: SGD (plain, weight decay), momentum (the first step's buf = d_p,
 * nesterov on and off, weight decay, a learning-rate change midway), Adam
 * (with and without weight decay, other betas and eps), AdamW, LARS (SPEC 5,
 * the block as one parameter; nesterov) and clip_global_norm, against
 *   1. an independent float64 re-implementation of the torch.optim formulas
 *      written here: parameters to 1e-6 relative, the step they took to
 *      1e-4, and the optimizer's slots to 1e-6;
 *   2. torch.optim.SGD / Adam / AdamW themselves (after
 *      torch.nn.utils.clip_grad_norm_ where clipping is on), run by a python3
 *      with torch on the same float32 values (exchanged as raw float32,
 *      bit-exact), parameters and slots to 1e-6; skipped visibly, case by
 *      case, without torch. LARS is in neither torch nor this machine's
 *      python (timm): its reference is the float64 formula of 1.
 * Also: the slots and their names; the same bits on 1 and 2 threads, on a
 * block the backend splits over both; and that an optimizer restarted from
 * saved slots (a resumed run) continues bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "optim/optimizer.h"
#include "tt_ref.h"
#include "tt_test.h"

#define COUNT 40000 /* parameters per run: over 2 chunks of the element-wise split */
#define STEPS 10
#define TOL 1e-6

typedef struct {
    const char *label;
    optimizer_cfg cfg;
    int decay_at; /* from this step on, lr *= decay (0: never) */
    float decay;
} opt_case;

/* optimizer_cfg: type, learning_rate, momentum, nesterov, beta1, beta2, epsilon, weight_decay,
 * trust_coefficient, wd_exclude, n_wd_exclude, clip_global_norm (the gradients' global norm
 * is about 1 to 320 over the steps, 107 at scale 1: a clip of 100 acts on 6 of the 10) */
static const opt_case cases[] = {
    {"sgd", {OPT_SGD, 0.1f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.0f}, 0, 1.0f},
    {"sgd weight_decay", {OPT_SGD, 0.1f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.01f}, 0, 1.0f},
    {"momentum", {OPT_MOMENTUM, 0.05f, 0.9f, false, 0.9f, 0.999f, 1e-8f, 0.0f}, 0, 1.0f},
    {"momentum nesterov", {OPT_MOMENTUM, 0.05f, 0.9f, true, 0.9f, 0.999f, 1e-8f, 0.0f}, 0, 1.0f},
    {"momentum weight_decay", {OPT_MOMENTUM, 0.05f, 0.9f, false, 0.9f, 0.999f, 1e-8f, 5e-4f}, 0,
     1.0f},
    {"momentum nesterov weight_decay",
     {OPT_MOMENTUM, 0.05f, 0.9f, true, 0.9f, 0.999f, 1e-8f, 5e-4f}, 0, 1.0f},
    {"momentum 0.8 nesterov weight_decay 1e-3",
     {OPT_MOMENTUM, 0.02f, 0.8f, true, 0.9f, 0.999f, 1e-8f, 1e-3f}, 0, 1.0f},
    {"momentum 0.5, lr x0.1 from step 6",
     {OPT_MOMENTUM, 0.2f, 0.5f, false, 0.9f, 0.999f, 1e-8f, 0.0f}, 6, 0.1f},
    {"adam", {OPT_ADAM, 1e-3f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.0f}, 0, 1.0f},
    {"adam weight_decay", {OPT_ADAM, 1e-2f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.01f}, 0, 1.0f},
    {"adam betas 0.8/0.99 eps 1e-6", {OPT_ADAM, 0.05f, 0.0f, false, 0.8f, 0.99f, 1e-6f, 0.0f},
     0, 1.0f},
    {"adam betas 0.8/0.99 eps 1e-6 weight_decay 0.05",
     {OPT_ADAM, 0.01f, 0.0f, false, 0.8f, 0.99f, 1e-6f, 0.05f}, 0, 1.0f},
    {"adam, lr x0.1 from step 6", {OPT_ADAM, 0.01f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.0f}, 6,
     0.1f},
    {"adamw", {OPT_ADAMW, 1e-2f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.01f}, 0, 1.0f},
    {"adamw betas 0.8/0.99 weight_decay 0.3, lr x0.1 from step 6",
     {OPT_ADAMW, 0.05f, 0.0f, false, 0.8f, 0.99f, 1e-8f, 0.3f}, 6, 0.1f},
    {"lars", {OPT_LARS, 0.5f, 0.9f, false, 0.9f, 0.999f, 1e-8f, 1e-3f, 0.02f}, 0, 1.0f},
    {"lars nesterov weight_decay 0.05 eps 1e-3, lr x0.1 from step 6",
     {OPT_LARS, 0.5f, 0.8f, true, 0.9f, 0.999f, 1e-3f, 0.05f, 0.01f}, 6, 0.1f},
    {"lars weight_decay 0 (no adaptation)",
     {OPT_LARS, 0.05f, 0.9f, false, 0.9f, 0.999f, 1e-8f, 0.0f, 0.02f}, 0, 1.0f},
    {"momentum clip_global_norm 100",
     {OPT_MOMENTUM, 0.05f, 0.9f, false, 0.9f, 0.999f, 1e-8f, 5e-4f, 0.001f, NULL, 0, 100.0f}, 0,
     1.0f},
    {"adamw clip_global_norm 100",
     {OPT_ADAMW, 1e-2f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.01f, 0.001f, NULL, 0, 100.0f}, 0,
     1.0f},
};
#define N_CASES ((int)(sizeof(cases) / sizeof(cases[0])))

static float w0[COUNT], grads[STEPS][COUNT];

/* Initial values in [-1, 1); gradients change every step in sign, size and
 * scale; every 7th element gets gradients 1000 times smaller, and every
 * 100th none at all (Adam's eps path). */
static void make_data(void)
{
    tt_rng rng = tt_rng_make(0x0971);
    tt_fill(&rng, w0, COUNT, -1.0, 1.0);
    const float scale[STEPS] = {1.0f, 0.5f, 2.0f, 0.1f, 1.0f, 3.0f, 0.01f, 1.0f, 0.7f, 1.5f};
    for (int t = 0; t < STEPS; t++)
        for (int i = 0; i < COUNT; i++) {
            float g = scale[t] * (float)tt_uniform(&rng, -1.0, 1.0);
            grads[t][i] = i % 100 == 99 ? 0.0f : i % 7 == 0 ? g * 1e-3f : g;
        }
}

static float case_lr(const opt_case *c, int step)
{
    return c->decay_at && step >= c->decay_at ? c->cfg.learning_rate * c->decay
                                              : c->cfg.learning_rate;
}

/* ---- the float64 reference: torch.optim.SGD and Adam, written out ---- */

/* The step's gradient scale: clip_grad_norm_'s min(1, clip / (norm + 1e-6)),
 * 1 without clipping. */
static double ref_clip(const optimizer_cfg *o, const float *g)
{
    double sq = 0.0;
    for (int i = 0; i < COUNT; i++)
        sq += (double)g[i] * g[i];
    double coef = o->clip_global_norm / (sqrt(sq) + 1e-6);
    return o->clip_global_norm > 0.0f && coef < 1.0 ? coef : 1.0;
}

/* LARS's trust ratio of the block (SPEC 5): r = tc |w| / (|g| + wd |w| + eps),
 * 1 where |w| or |g| is 0 or without weight decay (no adaptation). */
static double ref_trust(const optimizer_cfg *o, const double *w, const float *g, double clip)
{
    double wn = 0.0, gn = 0.0;
    for (int i = 0; i < COUNT; i++) {
        wn += w[i] * w[i];
        gn += (clip * g[i]) * (clip * g[i]);
    }
    wn = sqrt(wn);
    gn = sqrt(gn);
    if (o->weight_decay == 0.0f || wn == 0.0 || gn == 0.0)
        return 1.0;
    return (double)o->trust_coefficient * wn / (gn + (double)o->weight_decay * wn + o->epsilon);
}

static void ref_run(const opt_case *c, double *w, double *s0, double *s1)
{
    const optimizer_cfg *o = &c->cfg;
    bool adam = o->type == OPT_ADAM || o->type == OPT_ADAMW;
    double mom = o->type == OPT_MOMENTUM || o->type == OPT_LARS ? o->momentum : 0.0;
    for (int i = 0; i < COUNT; i++) {
        w[i] = w0[i];
        s0[i] = s1[i] = 0.0;
    }
    for (int t = 1; t <= STEPS; t++) {
        double lr = case_lr(c, t);
        double clip = ref_clip(o, grads[t - 1]);
        double r = o->type == OPT_LARS ? ref_trust(o, w, grads[t - 1], clip) : 1.0;
        for (int i = 0; i < COUNT; i++) {
            double g = clip * grads[t - 1][i];
            if (o->type == OPT_ADAMW) /* decoupled: p *= 1 - lr wd, nothing added to g */
                w[i] *= 1.0 - lr * o->weight_decay;
            else if (o->weight_decay != 0.0f)
                g += (double)o->weight_decay * w[i];
            g *= r; /* LARS: (g + wd w) r */
            if (adam) {
                /* exp_avg = b1 m + (1-b1) g; exp_avg_sq = b2 v + (1-b2) g^2;
                 * w -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) */
                double b1 = o->beta1, b2 = o->beta2;
                s0[i] = b1 * s0[i] + (1.0 - b1) * g;
                s1[i] = b2 * s1[i] + (1.0 - b2) * g * g;
                double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
                w[i] -= lr / bc1 * s0[i] / (sqrt(s1[i]) / sqrt(bc2) + (double)o->epsilon);
            } else {
                /* SGD, dampening 0: buf = d_p on the first step, then
                 * mom * buf + d_p; nesterov steps along d_p + mom * buf */
                double d = g;
                if (mom != 0.0) {
                    s0[i] = t == 1 ? d : mom * s0[i] + d;
                    d = o->nesterov ? d + mom * s0[i] : s0[i];
                }
                w[i] -= lr * d;
            }
        }
    }
}

/* The relative error of the step w - w0, which is what the update rule
 * decides: parameters much larger than their updates would hide it. */
static double step_err(const float *w, const double *ref)
{
    double diff = 0.0, scale = 1e-30;
    for (int i = 0; i < COUNT; i++) {
        double d = fabs(((double)w[i] - w0[i]) - (ref[i] - w0[i]));
        if (!(d <= diff))
            diff = d;
        if (fabs(ref[i] - w0[i]) > scale)
            scale = fabs(ref[i] - w0[i]);
    }
    return diff / scale;
}

/* ---- optimizer_apply ---- */

typedef struct {
    float w[COUNT], s[OPT_MAX_SLOTS][COUNT];
    int n_slots;
} run_out;

/* w and the used slots identical, bit for bit */
static int same_run(const run_out *a, const run_out *b)
{
    if (a->n_slots != b->n_slots || !tt_same_bits(a->w, b->w, COUNT))
        return 0;
    for (int k = 0; k < a->n_slots; k++)
        if (!tt_same_bits(a->s[k], b->s[k], COUNT))
            return 0;
    return 1;
}

/* Steps [from, to] on an optimizer; w and slots come from `in` when from > 1
 * (a resumed run: the slots are restored and has_state set). */
static int impl_run(const opt_case *c, backend_t *be, int from, int to, const run_out *in,
                    run_out *out)
{
    tt_err err = {0};
    optimizer_t opt;
    if (optimizer_create(&c->cfg, be, COUNT, NULL, 0, &opt, &err) != 0) {
        tt_diag("optimizer_create: %s", err.msg);
        return -1;
    }
    float *w = tt_dev_copy(be, from > 1 ? in->w : w0, COUNT * sizeof(float));
    float *g = tt_dev_copy(be, NULL, COUNT * sizeof(float));
    if (from > 1) {
        for (int k = 0; k < opt.n_slots; k++)
            be->upload(be, opt.slots[k], in->s[k], COUNT * sizeof(float));
        opt.has_state = true;
    }
    for (int t = from; t <= to; t++) {
        opt.cfg.learning_rate = case_lr(c, t); /* what scheduled_hyperparam does */
        be->upload(be, g, grads[t - 1], COUNT * sizeof(float));
        optimizer_apply(&opt, w, g, t);
    }
    be->download(be, out->w, w, COUNT * sizeof(float));
    out->n_slots = opt.n_slots;
    for (int k = 0; k < opt.n_slots; k++)
        be->download(be, out->s[k], opt.slots[k], COUNT * sizeof(float));
    be->free(be, w);
    be->free(be, g);
    optimizer_free(&opt);
    return 0;
}

/* ---- torch.optim itself ---- */

/* One python run for every case (importing torch takes a second): argv is
 * steps, count, the input file (w0 then one gradient per step, float32), the
 * output file, then one "kind,lr,momentum,nesterov,wd,beta1,beta2,eps,
 * decay_at,decay" per case in hexadecimal floats (the float32 values the C
 * side uses, exactly); the output holds, per case, w, slot 0 and slot 1
 * (zeros where there is none), count float32 each. */
static const char *torch_script =
    "import array, sys, torch\n"
    "torch.set_num_threads(1)\n"
    "steps, n = int(sys.argv[1]), int(sys.argv[2])\n"
    "vals = torch.frombuffer(bytearray(open(sys.argv[3], 'rb').read()), dtype=torch.float32)\n"
    "assert vals.numel() == n * (steps + 1)\n"
    "out = array.array('f')\n"
    "for spec in sys.argv[5:]:\n"
    "    kind, *h = spec.split(',')\n"
    "    lr, mom, nest, wd, b1, b2, eps, decay_at, decay, clip = [float.fromhex(v) for v in h]\n"
    "    if kind == 'lars':  # not in torch.optim: a placeholder\n"
    "        out.extend([0.0] * (3 * n))\n"
    "        continue\n"
    "    p = torch.nn.Parameter(vals[:n].clone())\n"
    "    if kind == 'adam':\n"
    "        opt = torch.optim.Adam([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)\n"
    "    elif kind == 'adamw':\n"
    "        opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)\n"
    "    else:\n"
    "        opt = torch.optim.SGD([p], lr=lr, momentum=mom, nesterov=nest != 0,\n"
    "                              weight_decay=wd)\n"
    "    for t in range(1, steps + 1):\n"
    "        for group in opt.param_groups:\n"
    "            group['lr'] = lr * decay if decay_at and t >= decay_at else lr\n"
    "        p.grad = vals[n * t:n * (t + 1)].clone()\n"
    "        if clip:\n"
    "            torch.nn.utils.clip_grad_norm_([p], clip)\n"
    "        opt.step()\n"
    "    st = opt.state[p]\n"
    "    zero = torch.zeros(n)\n"
    "    s0 = st.get('momentum_buffer', st.get('exp_avg', zero))\n"
    "    s1 = st.get('exp_avg_sq', zero)\n"
    "    for v in (p.detach(), zero if s0 is None else s0, s1):\n"
    "        out.extend(v.tolist())\n"
    "open(sys.argv[4], 'wb').write(out.tobytes())\n";

/* Runs torch.optim for every case; results into out[case][3][COUNT]. */
static int torch_run(const char *py, const char *dir, float *out)
{
    char script[4200], data[4200], res[4200], cmd[8192];
    snprintf(script, sizeof(script), "%s/optim.py", dir);
    snprintf(data, sizeof(data), "%s/in.bin", dir);
    snprintf(res, sizeof(res), "%s/out.bin", dir);
    tt_write_file(NULL, script, torch_script);
    FILE *f = fopen(data, "wb");
    if (f == NULL)
        return -1;
    fwrite(w0, sizeof(float), COUNT, f);
    for (int t = 0; t < STEPS; t++)
        fwrite(grads[t], sizeof(float), COUNT, f);
    if (fclose(f) != 0)
        return -1;
    int len = snprintf(cmd, sizeof(cmd), "'%s' '%s' %d %d '%s' '%s'", py, script, STEPS, COUNT,
                       data, res);
    for (int k = 0; k < N_CASES && len < (int)sizeof(cmd); k++) {
        const optimizer_cfg *o = &cases[k].cfg;
        float mom = o->type == OPT_MOMENTUM ? o->momentum : 0.0f;
        len += snprintf(cmd + len, sizeof(cmd) - (size_t)len,
                        " %s,%a,%a,%a,%a,%a,%a,%a,%a,%a,%a",
                        o->type == OPT_ADAM    ? "adam"
                        : o->type == OPT_ADAMW ? "adamw"
                        : o->type == OPT_LARS  ? "lars"
                                               : "sgd",
                        (double)o->learning_rate, (double)mom, o->nesterov ? 1.0 : 0.0,
                        (double)o->weight_decay, (double)o->beta1, (double)o->beta2,
                        (double)o->epsilon, (double)cases[k].decay_at, (double)cases[k].decay,
                        (double)o->clip_global_norm);
    }
    if (len >= (int)sizeof(cmd) || system(cmd) != 0)
        return -1;
    f = fopen(res, "rb");
    if (f == NULL)
        return -1;
    size_t want = (size_t)N_CASES * 3 * COUNT;
    size_t got = fread(out, sizeof(float), want, f);
    fclose(f);
    return got == want ? 0 : -1;
}

/* ---- the checks ---- */

static void check_case(int c, backend_t *be1, backend_t *be2, const float *torch)
{
    static run_out impl, other, half, resumed;
    static double rw[COUNT], rs[OPT_MAX_SLOTS][COUNT];
    const opt_case *oc = &cases[c];
    if (!tt_ok(impl_run(oc, be1, 1, STEPS, NULL, &impl) == 0, "%s: ran", oc->label))
        return;
    bool adam = oc->cfg.type == OPT_ADAM || oc->cfg.type == OPT_ADAMW;
    int want_slots = adam ? 2 : oc->cfg.type == OPT_SGD ? 0 : 1;
    tt_ok(impl.n_slots == want_slots, "%s: %d slot(s)", oc->label, impl.n_slots);

    ref_run(oc, rw, rs[0], rs[1]);
    double e = tt_rel_err(impl.w, rw, COUNT), es = step_err(impl.w, rw);
    tt_ok(e < TOL && es < 1e-4,
          "%s: parameters after %d steps vs float64 torch formulas (err %.2e, on the step "
          "taken %.2e)", oc->label, STEPS, e, es);
    double moved = 0.0;
    for (int i = 0; i < COUNT; i++)
        moved = fmax(moved, fabs(rw[i] - w0[i]));
    tt_ok(moved > 1e-3, "%s: the parameters moved (max %.3g), so the check has teeth", oc->label,
          moved);
    static const char *const slot_name[2][OPT_MAX_SLOTS] = {{"momentum buffer", NULL},
                                                            {"exp_avg", "exp_avg_sq"}};
    for (int k = 0; k < impl.n_slots && k < want_slots; k++) {
        e = tt_rel_err(impl.s[k], rs[k], COUNT);
        tt_ok(e < TOL, "%s: %s vs float64 (err %.2e)", oc->label,
              slot_name[adam][k], e);
    }

    /* 2 threads split the block: the same bits */
    tt_ok(impl_run(oc, be2, 1, STEPS, NULL, &other) == 0 && same_run(&other, &impl),
          "%s: same bits on 2 threads", oc->label);

    /* a resumed run: steps 1..4, then a new optimizer from the saved slots */
    tt_ok(impl_run(oc, be1, 1, 4, NULL, &half) == 0 &&
              impl_run(oc, be1, 5, STEPS, &half, &resumed) == 0 && same_run(&resumed, &impl),
          "%s: restarted from saved slots after step 4, same bits at step %d", oc->label, STEPS);

    if (torch == NULL || oc->cfg.type == OPT_LARS) {
        tt_skip("%s: vs torch.optim (%s)", oc->label,
                torch == NULL ? "no python3 with torch" : "LARS is not in torch.optim");
        return;
    }
    const float *tw = torch + (size_t)c * 3 * COUNT;
    e = tt_rel_err_f(impl.w, tw, COUNT);
    tt_ok(e < TOL, "%s: parameters after %d steps vs torch.optim (err %.2e)", oc->label, STEPS, e);
    for (int k = 0; k < impl.n_slots; k++) {
        e = tt_rel_err_f(impl.s[k], tw + (size_t)(k + 1) * COUNT, COUNT);
        tt_ok(e < TOL, "%s: slot %d vs torch's state (err %.2e)", oc->label, k, e);
    }
}

/* A CPU backend's norms, counted (the LARS batching check in main). */
static int counted_sumsq, counted_each, counted_ranges;
static double counting_sumsq(backend_t *be, size_t count, const float *x)
{
    counted_sumsq++;
    double s = 0.0;
    for (size_t i = 0; i < count; i++)
        s += (double)x[i] * x[i];
    return s;
}
static void counting_sumsq_each(backend_t *be, int n, const float *const *x, const size_t *count,
                                double *out)
{
    counted_each++;
    counted_ranges += n;
    for (int i = 0; i < n; i++) {
        out[i] = counting_sumsq(be, count[i], x[i]);
        counted_sumsq--;
    }
}

int main(void)
{
    backend_t *be1 = tt_cpu_backend(1), *be2 = tt_cpu_backend(2);
    if (!tt_ok(be1 != NULL && be2 != NULL, "CPU backends with 1 and 2 threads"))
        return tt_done();
    make_data();

    /* torch first: one python run for all the cases */
    const char *py = tt_python("torch");
    float *torch = NULL;
    char dir[256];
    if (py == NULL) {
        tt_diag("no python3 with torch ($PYTHON3 or /usr/bin/python3): torch checks skipped");
    } else {
        tt_tmpdir_make(dir, sizeof(dir), "optim");
        torch = malloc((size_t)N_CASES * 3 * COUNT * sizeof(float));
        if (!tt_ok(torch != NULL && torch_run(py, dir, torch) == 0,
                   "torch.optim ran on the same values (%s)", py)) {
            free(torch);
            torch = NULL;
            py = NULL;
        }
        tt_tmpdir_remove(dir);
    }

    for (int c = 0; c < N_CASES; c++)
        check_case(c, be1, be2, torch);

    /* slot names as checkpoints write them (optimizer.<param>.<slot>) */
    tt_err err = {0};
    optimizer_t opt;
    optimizer_create(&cases[2].cfg, be1, 10, NULL, 0, &opt, &err);
    tt_ok(opt.n_slots == 1 && strcmp(opt.slot_names[0], "momentum") == 0,
          "momentum: slot named 'momentum'");
    optimizer_free(&opt);
    optimizer_create(&cases[8].cfg, be1, 10, NULL, 0, &opt, &err);
    tt_ok(opt.n_slots == 2 && strcmp(opt.slot_names[0], "exp_avg") == 0 &&
              strcmp(opt.slot_names[1], "exp_avg_sq") == 0,
          "adam: slots named 'exp_avg', 'exp_avg_sq'");
    optimizer_free(&opt);
    optimizer_create(&cases[0].cfg, be1, 10, NULL, 0, &opt, &err);
    tt_ok(opt.n_slots == 0, "sgd: no slots");
    optimizer_free(&opt);
    optimizer_create(&cases[13].cfg, be1, 10, NULL, 0, &opt, &err);
    tt_ok(opt.n_slots == 2 && strcmp(opt.slot_names[0], "exp_avg") == 0 &&
              strcmp(opt.slot_names[1], "exp_avg_sq") == 0,
          "adamw: slots named 'exp_avg', 'exp_avg_sq'");
    optimizer_free(&opt);
    optimizer_create(&cases[15].cfg, be1, 10, NULL, 0, &opt, &err);
    tt_ok(opt.n_slots == 1 && strcmp(opt.slot_names[0], "momentum") == 0,
          "lars: slot named 'momentum'");
    optimizer_free(&opt);

    /* weight_decay_exclude: shell globs over the names; runs of equal decay
     * merge (one pass each), LARS keeps one segment per parameter */
    static const char *globs[] = {"*.bias", "bn*"};
    static const opt_param params[] = {{"fc0.weight", 0, 6}, {"fc0.bias", 6, 2},
                                       {"bn0.weight", 8, 2}, {"fc1.weight", 10, 3},
                                       {"fc1.weight_bias", 13, 1}};
    optimizer_cfg oc = cases[4].cfg;
    oc.wd_exclude = globs;
    oc.n_wd_exclude = 2;
    optimizer_create(&oc, be1, 14, params, 5, &opt, &err);
    tt_ok(opt.n_segs == 3 && opt.segs[0].lo == 0 && opt.segs[0].hi == 6 && opt.segs[0].decay &&
              opt.segs[1].lo == 6 && opt.segs[1].hi == 10 && !opt.segs[1].decay &&
              opt.segs[2].lo == 10 && opt.segs[2].hi == 14 && opt.segs[2].decay,
          "weight_decay_exclude [\"*.bias\", \"bn*\"]: no decay on fc0.bias and bn0.weight (one "
          "run), decay on the rest, fc1.weight_bias included (%d segments)", opt.n_segs);
    optimizer_free(&opt);
    oc.type = OPT_LARS;
    optimizer_create(&oc, be1, 14, params, 5, &opt, &err);
    tt_ok(opt.n_segs == 5 && opt.segs[1].hi == 8 && opt.segs[2].lo == 8 && !opt.segs[2].decay,
          "lars: one segment per parameter (%d)", opt.n_segs);
    optimizer_free(&opt);

    /* LARS asks its norms in one batch: on a GPU one read back a step, not
     * two a parameter (sumsq would wait for the device each time) */
    oc.weight_decay = 0.01f;
    optimizer_create(&oc, be1, 14, params, 5, &opt, &err);
    double (*sumsq)(backend_t *, size_t, const float *) = be1->sumsq;
    void (*each)(backend_t *, int, const float *const *, const size_t *, double *) =
        be1->sumsq_each;
    be1->sumsq = counting_sumsq;
    be1->sumsq_each = counting_sumsq_each;
    counted_sumsq = counted_each = counted_ranges = 0;
    float w[14], g[14];
    for (int i = 0; i < 14; i++) {
        w[i] = 0.1f * (float)(i + 1);
        g[i] = 0.01f * (float)(14 - i);
    }
    optimizer_apply(&opt, w, g, 1);
    be1->sumsq = sumsq;
    be1->sumsq_each = each;
    tt_ok(counted_sumsq == 0 && counted_each == 1 && counted_ranges == 6,
          "lars: one sumsq_each of |w| and |g| for the 3 adapted parameters, no sumsq "
          "(%d sumsq, %d sumsq_each of %d ranges)", counted_sumsq, counted_each, counted_ranges);
    optimizer_free(&opt);

    free(torch);
    be1->destroy(be1);
    be2->destroy(be2);
    return tt_done();
}

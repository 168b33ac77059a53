/* test_optimizers.c - optimizer_apply (src/optim/optimizer.c) over 10 steps
 * of changing gradients, for SGD (plain, weight decay), momentum (first step
 * buf = d_p, nesterov on/off, weight decay, a learning-rate change midway) and
 * Adam (with/without weight decay, other betas), against
 *   1. an independent float64 re-implementation of the torch.optim formulas
 *      written here, to 1e-6 relative, parameters AND optimizer slots;
 *   2. real torch.optim.SGD / Adam run by python3 on the same initial values
 *      and gradients (exchanged as hexadecimal floats, so bit-exact), to 1e-6
 *      relative; skipped visibly when python3 or torch is missing.
 * Also: slot names, the same bits on 1 and 2 threads, and that an optimizer
 * restarted from saved slots (a resumed run) continues bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "optim/optimizer.h"
#include "tt_test.h"
#include "util/rng.h"

#define COUNT 1000   /* parameters per run */
#define STEPS 10
#define TOL 1e-6

typedef struct {
    const char *label;
    optimizer_cfg cfg;
    int decay_at; /* from this step on, lr *= decay (0: never) */
    float decay;
} opt_case;

static opt_case cases[] = {
    {"sgd", {OPT_SGD, 0.1f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.0f}, 0, 1.0f},
    {"sgd weight_decay", {OPT_SGD, 0.1f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.01f}, 0, 1.0f},
    {"momentum", {OPT_MOMENTUM, 0.05f, 0.9f, false, 0.9f, 0.999f, 1e-8f, 0.0f}, 0, 1.0f},
    {"momentum nesterov", {OPT_MOMENTUM, 0.05f, 0.9f, true, 0.9f, 0.999f, 1e-8f, 0.0f}, 0, 1.0f},
    {"momentum weight_decay", {OPT_MOMENTUM, 0.05f, 0.9f, false, 0.9f, 0.999f, 1e-8f, 5e-4f}, 0,
     1.0f},
    {"momentum nesterov weight_decay",
     {OPT_MOMENTUM, 0.05f, 0.9f, true, 0.9f, 0.999f, 1e-8f, 5e-4f}, 0, 1.0f},
    {"momentum 0.5, lr x0.1 from step 6",
     {OPT_MOMENTUM, 0.2f, 0.5f, false, 0.9f, 0.999f, 1e-8f, 0.0f}, 6, 0.1f},
    {"adam", {OPT_ADAM, 1e-3f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.0f}, 0, 1.0f},
    {"adam weight_decay", {OPT_ADAM, 1e-2f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.01f}, 0, 1.0f},
    {"adam betas 0.8/0.99 eps 1e-6", {OPT_ADAM, 0.05f, 0.0f, false, 0.8f, 0.99f, 1e-6f, 0.0f},
     0, 1.0f},
    {"adam, lr x0.1 from step 6", {OPT_ADAM, 0.01f, 0.0f, false, 0.9f, 0.999f, 1e-8f, 0.0f}, 6,
     0.1f},
};
#define N_CASES ((int)(sizeof(cases) / sizeof(cases[0])))

static float w0[COUNT], grads[STEPS][COUNT];

/* Initial values in [-1, 1); gradients change every step in sign, size and
 * scale; the last 10 elements never get a gradient (Adam's eps path). */
static void make_data(void)
{
    rng_t rng = rng_make(0x0971, 0, 0);
    for (int i = 0; i < COUNT; i++)
        w0[i] = rng_uniform_range(&rng, -1.0f, 1.0f);
    const float scale[STEPS] = {1.0f, 0.5f, 2.0f, 0.1f, 1.0f, 3.0f, 0.01f, 1.0f, 0.7f, 1.5f};
    for (int t = 0; t < STEPS; t++)
        for (int i = 0; i < COUNT; i++)
            grads[t][i] = i >= COUNT - 10 ? 0.0f : scale[t] * rng_uniform_range(&rng, -1.0f, 1.0f);
}

static float case_lr(const opt_case *c, int step)
{
    return c->decay_at && step >= c->decay_at ? c->cfg.learning_rate * c->decay
                                              : c->cfg.learning_rate;
}

/* ---- the float64 reference: torch.optim.SGD and Adam, written out ---- */

static void ref_run(const opt_case *c, double *w, double *s0, double *s1)
{
    const optimizer_cfg *o = &c->cfg;
    double mom = o->type == OPT_MOMENTUM ? o->momentum : 0.0;
    for (int i = 0; i < COUNT; i++) {
        w[i] = w0[i];
        s0[i] = s1[i] = 0.0;
    }
    for (int t = 1; t <= STEPS; t++) {
        double lr = case_lr(c, t);
        for (int i = 0; i < COUNT; i++) {
            double g = grads[t - 1][i];
            if (o->weight_decay != 0.0f)
                g += (double)o->weight_decay * w[i];
            if (o->type == OPT_ADAM) {
                /* exp_avg = b1 m + (1-b1) g; exp_avg_sq = b2 v + (1-b2) g^2;
                 * w -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) */
                double b1 = o->beta1, b2 = o->beta2;
                s0[i] = b1 * s0[i] + (1.0 - b1) * g;
                s1[i] = b2 * s1[i] + (1.0 - b2) * g * g;
                double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
                w[i] -= lr / bc1 * s0[i] / (sqrt(s1[i]) / sqrt(bc2) + (double)o->epsilon);
            } else {
                /* buf = d_p on the first step, then mom*buf + d_p (dampening 0) */
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

static double rel_err(const float *a, const double *b, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num))
            num = d;
        if (fabs(b[i]) > den)
            den = fabs(b[i]);
    }
    return num / (den + 1e-12);
}

/* ---- optimizer_apply ---- */

typedef struct {
    float w[COUNT], s[OPT_MAX_SLOTS][COUNT];
    int n_slots;
} run_out;

/* w and the used slots identical, bit for bit */
static int same_run(const run_out *a, const run_out *b)
{
    if (a->n_slots != b->n_slots || memcmp(a->w, b->w, sizeof(a->w)) != 0)
        return 0;
    for (int k = 0; k < a->n_slots; k++)
        if (memcmp(a->s[k], b->s[k], sizeof(a->s[k])) != 0)
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
    if (optimizer_create(&c->cfg, be, COUNT, &opt, &err) != 0) {
        tt_diag("optimizer_create: %s", err.msg);
        return -1;
    }
    float *w = be->alloc(be, COUNT * sizeof(float)), *g = be->alloc(be, COUNT * sizeof(float));
    if (w == NULL || g == NULL) {
        optimizer_free(&opt);
        return -1;
    }
    be->upload(be, w, from > 1 ? in->w : w0, COUNT * sizeof(float));
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

/* ---- torch ---- */

static const char *torch_script =
    "import sys, torch\n"
    "torch.set_num_threads(1)\n"
    "tok = open(sys.argv[1]).read().split()\n"
    "pos = 0\n"
    "def nxt():\n"
    "    global pos\n"
    "    pos += 1\n"
    "    return tok[pos - 1]\n"
    "def num():\n"
    "    return float.fromhex(nxt())\n"
    "def vec(n):\n"
    "    return torch.tensor([num() for _ in range(n)], dtype=torch.float32)\n"
    "count, steps, ncases = int(nxt()), int(nxt()), int(nxt())\n"
    "cases = []\n"
    "for _ in range(ncases):\n"
    "    kind = nxt()\n"
    "    cases.append((kind, [num() for _ in range(9)]))\n"
    "w0 = vec(count)\n"
    "grads = [vec(count) for _ in range(steps)]\n"
    "out = open(sys.argv[2], 'w')\n"
    "for kind, (lr, mom, nest, wd, b1, b2, eps, decay_at, decay) in cases:\n"
    "    p = torch.nn.Parameter(w0.clone())\n"
    "    if kind == 'adam':\n"
    "        opt = torch.optim.Adam([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)\n"
    "    else:\n"
    "        opt = torch.optim.SGD([p], lr=lr, momentum=mom, nesterov=nest != 0,\n"
    "                              weight_decay=wd)\n"
    "    for t in range(1, steps + 1):\n"
    "        for group in opt.param_groups:\n"
    "            group['lr'] = lr * decay if decay_at and t >= decay_at else lr\n"
    "        p.grad = grads[t - 1].clone()\n"
    "        opt.step()\n"
    "    st = opt.state[p]\n"
    "    if kind == 'adam':\n"
    "        slots = [st['exp_avg'], st['exp_avg_sq']]\n"
    "    elif mom != 0:\n"
    "        slots = [st['momentum_buffer']]\n"
    "    else:\n"
    "        slots = []\n"
    "    for v in [p.detach()] + slots:\n"
    "        out.write(' '.join(float(x).hex() for x in v.tolist()) + '\\n')\n"
    "out.close()\n";

static const char *python_path(void)
{
    const char *py = getenv("PYTHON3");
    if (py != NULL && py[0] != '\0')
        return py;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

static int make_temp(char *path, size_t len, const char *suffix)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, len, "%s/tt_optim_XXXXXX%s", dir && dir[0] ? dir : "/tmp", suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static int write_input(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fprintf(f, "%d %d %d\n", COUNT, STEPS, N_CASES);
    for (int c = 0; c < N_CASES; c++) {
        const optimizer_cfg *o = &cases[c].cfg;
        float mom = o->type == OPT_MOMENTUM ? o->momentum : 0.0f;
        /* the float32 values the C side uses, exactly */
        fprintf(f, "%s %a %a %a %a %a %a %a %a %a\n", o->type == OPT_ADAM ? "adam" : "sgd",
                (double)o->learning_rate, (double)mom, o->nesterov ? 1.0 : 0.0,
                (double)o->weight_decay, (double)o->beta1, (double)o->beta2, (double)o->epsilon,
                (double)cases[c].decay_at, (double)cases[c].decay);
    }
    for (int i = 0; i < COUNT; i++)
        fprintf(f, "%a\n", (double)w0[i]);
    for (int t = 0; t < STEPS; t++)
        for (int i = 0; i < COUNT; i++)
            fprintf(f, "%a\n", (double)grads[t][i]);
    return fclose(f) == 0 ? 0 : -1;
}

static int read_vec(FILE *f, double *v)
{
    char tok[64];
    for (int i = 0; i < COUNT; i++) {
        if (fscanf(f, "%63s", tok) != 1)
            return -1;
        v[i] = strtod(tok, NULL);
    }
    return 0;
}

static void test_torch(run_out *impl)
{
    const char *py = python_path();
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "'%s' -c 'import torch' >/dev/null 2>&1", py);
    if (system(cmd) != 0) {
        tt_skip("torch.optim comparison: %s cannot import torch", py);
        return;
    }
    char script[1024], in[1024], out[1024];
    if (make_temp(script, sizeof(script), ".py") != 0 || make_temp(in, sizeof(in), ".txt") != 0 ||
        make_temp(out, sizeof(out), ".txt") != 0) {
        tt_ok(0, "torch.optim comparison: temporary files");
        return;
    }
    FILE *f = fopen(script, "w");
    int ok = f != NULL && fputs(torch_script, f) >= 0;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    ok = ok && write_input(in) == 0;
    snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s' '%s'", py, script, in, out);
    if (tt_ok(ok && system(cmd) == 0, "torch.optim ran on the same values (%s)", py)) {
        FILE *r = fopen(out, "r");
        static double tw[COUNT], ts[OPT_MAX_SLOTS][COUNT];
        for (int c = 0; c < N_CASES && r != NULL; c++) {
            int read_ok = read_vec(r, tw) == 0;
            for (int k = 0; k < impl[c].n_slots; k++)
                read_ok = read_ok && read_vec(r, ts[k]) == 0;
            if (!tt_ok(read_ok, "%s: torch results read", cases[c].label))
                break;
            double e = rel_err(impl[c].w, tw, COUNT);
            tt_ok(e < TOL, "%s: parameters after %d steps vs torch.optim (err %.2e)",
                  cases[c].label, STEPS, e);
            for (int k = 0; k < impl[c].n_slots; k++) {
                e = rel_err(impl[c].s[k], ts[k], COUNT);
                tt_ok(e < TOL, "%s: slot %d vs torch's state (err %.2e)", cases[c].label, k, e);
            }
        }
        if (r != NULL)
            fclose(r);
        else
            tt_ok(0, "torch.optim comparison: cannot read %s", out);
    }
    unlink(script);
    unlink(in);
    unlink(out);
}

/* A block large enough for the backend to split over 2 threads: same bits. */
static void test_threads_big(backend_t *be1, backend_t *be2)
{
    enum { BIG = 70001 };
    const int which[3] = {1, 5, 8}; /* sgd weight_decay, momentum nesterov wd, adam wd */
    float *w[2], *g = malloc(BIG * sizeof(float));
    w[0] = malloc(BIG * sizeof(float));
    w[1] = malloc(BIG * sizeof(float));
    rng_t rng = rng_make(0xb16, 0, 0);
    for (int q = 0; q < 3; q++) {
        const opt_case *oc = &cases[which[q]];
        optimizer_t opt[2];
        tt_err err = {0};
        int ok = 1;
        for (int b = 0; b < 2; b++) {
            ok = ok && optimizer_create(&oc->cfg, b ? be2 : be1, BIG, &opt[b], &err) == 0;
            rng_t r0 = rng_make(0xb17, 0, 0);
            for (int i = 0; i < BIG; i++)
                w[b][i] = rng_uniform_range(&r0, -1.0f, 1.0f);
        }
        if (!tt_ok(ok, "%s, %d floats: optimizers created %s", oc->label, BIG, err.msg))
            break;
        for (int t = 1; t <= 3; t++) {
            for (int i = 0; i < BIG; i++)
                g[i] = rng_uniform_range(&rng, -1.0f, 1.0f);
            optimizer_apply(&opt[0], w[0], g, t);
            optimizer_apply(&opt[1], w[1], g, t);
        }
        int same = memcmp(w[0], w[1], BIG * sizeof(float)) == 0;
        for (int k = 0; k < opt[0].n_slots; k++)
            same = same && memcmp(opt[0].slots[k], opt[1].slots[k], BIG * sizeof(float)) == 0;
        tt_ok(same, "%s, %d floats: same bits on 1 and 2 threads after 3 steps", oc->label, BIG);
        optimizer_free(&opt[0]);
        optimizer_free(&opt[1]);
    }
    free(w[0]);
    free(w[1]);
    free(g);
}

int main(void)
{
    tt_err err = {0};
    backend_t *be1 = backend_cpu_create(0, 1, &err);
    backend_t *be2 = backend_cpu_create(0, 2, &err);
    if (!tt_ok(be1 != NULL && be2 != NULL, "CPU backends %s", err.msg))
        return tt_done();
    make_data();

    static run_out impl[N_CASES], other, half, resumed;
    static double rw[COUNT], rs0[COUNT], rs1[COUNT];
    for (int c = 0; c < N_CASES; c++) {
        const opt_case *oc = &cases[c];
        if (!tt_ok(impl_run(oc, be1, 1, STEPS, NULL, &impl[c]) == 0, "%s: ran", oc->label))
            continue;
        int want_slots = oc->cfg.type == OPT_ADAM ? 2 : oc->cfg.type == OPT_MOMENTUM ? 1 : 0;
        tt_ok(impl[c].n_slots == want_slots, "%s: %d slot(s)", oc->label, impl[c].n_slots);

        ref_run(oc, rw, rs0, rs1);
        double e = rel_err(impl[c].w, rw, COUNT);
        tt_ok(e < TOL, "%s: parameters after %d steps vs float64 torch formulas (err %.2e)",
              oc->label, STEPS, e);
        double moved = 0.0;
        for (int i = 0; i < COUNT; i++)
            moved = fmax(moved, fabs(rw[i] - w0[i]));
        tt_ok(moved > 1e-3, "%s: the parameters moved (max %.3g), so the check has teeth",
              oc->label, moved);
        if (impl[c].n_slots >= 1) {
            e = rel_err(impl[c].s[0], rs0, COUNT);
            tt_ok(e < TOL, "%s: %s vs float64 (err %.2e)", oc->label,
                  oc->cfg.type == OPT_ADAM ? "exp_avg" : "momentum buffer", e);
        }
        if (impl[c].n_slots >= 2) {
            e = rel_err(impl[c].s[1], rs1, COUNT);
            tt_ok(e < TOL, "%s: exp_avg_sq vs float64 (err %.2e)", oc->label, e);
        }

        /* 2 threads: same bits (COUNT is small; the bits must not depend on
         * the split either way) */
        impl_run(oc, be2, 1, STEPS, NULL, &other);
        tt_ok(same_run(&other, &impl[c]), "%s: same bits on 2 threads",
              oc->label);

        /* a resumed run: steps 1..4, then a new optimizer from the saved slots */
        impl_run(oc, be1, 1, 4, NULL, &half);
        impl_run(oc, be1, 5, STEPS, &half, &resumed);
        tt_ok(same_run(&resumed, &impl[c]),
              "%s: restarted from saved slots after step 4, same bits at step %d", oc->label,
              STEPS);
    }

    /* slot names as checkpoints write them (SPEC 7) */
    optimizer_t opt;
    optimizer_create(&cases[2].cfg, be1, 10, &opt, &err);
    tt_ok(opt.n_slots == 1 && strcmp(opt.slot_names[0], "momentum") == 0,
          "momentum: slot named 'momentum'");
    optimizer_free(&opt);
    optimizer_create(&cases[7].cfg, be1, 10, &opt, &err);
    tt_ok(opt.n_slots == 2 && strcmp(opt.slot_names[0], "exp_avg") == 0 &&
              strcmp(opt.slot_names[1], "exp_avg_sq") == 0,
          "adam: slots named 'exp_avg', 'exp_avg_sq'");
    optimizer_free(&opt);
    optimizer_create(&cases[0].cfg, be1, 10, &opt, &err);
    tt_ok(opt.n_slots == 0, "sgd: no slots");
    optimizer_free(&opt);

    test_threads_big(be1, be2);
    test_torch(impl);
    be1->destroy(be1);
    be2->destroy(be2);
    return tt_done();
}

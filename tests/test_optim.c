/* test_optim.c - the CPU backend's sgd_step and adam_step against
 *   (1) an independent float64 re-implementation of torch.optim.SGD and
 *       torch.optim.Adam written here from PyTorch's formulas, over 10 steps;
 *   (2) real torch.optim, when a python3 with torch is found ($PYTHON3, then
 *       /usr/bin/python3); skipped visibly otherwise;
 *   (3) threads = 1 and threads = 2 giving the same bits.
 * The parameter block is long enough to be split over the threads. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "tests/tt_test.h"

#define COUNT 40000 /* > 2 chunks of the element-wise split */
#define STEPS 10

typedef enum { OPT_SGD, OPT_ADAM } opt_kind;

typedef struct {
    const char *name;
    opt_kind kind;
    float lr, momentum, weight_decay, beta1, beta2, eps;
    bool nesterov;
} opt_case;

static uint64_t test_state = 987654321;

static float test_uniform(float lo, float hi)
{
    test_state ^= test_state << 13;
    test_state ^= test_state >> 7;
    test_state ^= test_state << 17;
    return lo + (hi - lo) * (float)((double)(test_state >> 11) / 9007199254740992.0);
}

/* The inputs of one run: initial parameters and one gradient per step. */
typedef struct {
    float w0[COUNT];
    float g[STEPS][COUNT];
} opt_inputs;

/* The results: parameters and the optimizer's state slots. */
typedef struct {
    double w[COUNT], s1[COUNT], s2[COUNT];
} opt_result;

/* ---- (1) float64 reference of torch.optim, written from its documentation ---- */

static void ref_run(const opt_case *c, const opt_inputs *in, int steps, opt_result *r)
{
    for (int i = 0; i < COUNT; i++) {
        r->w[i] = in->w0[i];
        r->s1[i] = 0.0;
        r->s2[i] = 0.0;
    }
    for (int t = 1; t <= steps; t++) {
        for (int i = 0; i < COUNT; i++) {
            double w = r->w[i], g = in->g[t - 1][i] + (double)c->weight_decay * w;
            if (c->kind == OPT_SGD) {
                /* SGD, dampening 0: buf = g on the first step, then
                 * buf = momentum * buf + g; nesterov uses g + momentum * buf */
                double d = g;
                if (c->momentum != 0.0f) {
                    r->s1[i] = t == 1 ? g : (double)c->momentum * r->s1[i] + g;
                    d = c->nesterov ? g + (double)c->momentum * r->s1[i] : r->s1[i];
                }
                r->w[i] = w - (double)c->lr * d;
            } else {
                /* Adam: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
                 * w -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps) */
                double b1 = c->beta1, b2 = c->beta2;
                r->s1[i] = b1 * r->s1[i] + (1.0 - b1) * g;
                r->s2[i] = b2 * r->s2[i] + (1.0 - b2) * g * g;
                double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
                double denom = sqrt(r->s2[i]) / sqrt(bc2) + (double)c->eps;
                r->w[i] = w - (double)c->lr / bc1 * r->s1[i] / denom;
            }
        }
    }
}

/* ---- the backend under test ---- */

static int backend_run(const opt_case *c, const opt_inputs *in, int threads, float *w, float *s1,
                       float *s2)
{
    tt_err err;
    err_clear(&err);
    backend_t *be = backend_cpu_create(0, threads, &err);
    if (be == NULL) {
        tt_diag("backend_cpu_create: %s", err.msg);
        return -1;
    }
    size_t bytes = COUNT * sizeof(float);
    float *dw = be->alloc(be, bytes), *dg = be->alloc(be, bytes);
    float *d1 = be->alloc(be, bytes), *d2 = be->alloc(be, bytes);
    be->upload(be, dw, in->w0, bytes);
    for (int t = 1; t <= STEPS; t++) {
        be->upload(be, dg, in->g[t - 1], bytes);
        if (c->kind == OPT_SGD)
            be->sgd_step(be, COUNT, c->lr, c->momentum, c->nesterov, c->weight_decay, t == 1, dw,
                         dg, c->momentum != 0.0f ? d1 : NULL);
        else
            be->adam_step(be, COUNT, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, t, dw,
                          dg, d1, d2);
    }
    be->download(be, w, dw, bytes);
    be->download(be, s1, d1, bytes);
    be->download(be, s2, d2, bytes);
    be->free(be, dw);
    be->free(be, dg);
    be->free(be, d1);
    be->free(be, d2);
    be->destroy(be);
    return 0;
}

/* max |a - ref| / max |ref| over the block */
static double rel_err(const float *a, const double *ref)
{
    double diff = 0.0, scale = 1e-30;
    for (int i = 0; i < COUNT; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= diff))
            diff = d;
        if (fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    }
    return diff / scale;
}

/* The same on the displacement w - w0, which is what the update rule decides. */
static double step_err(const float *w, const double *ref, const float *w0)
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

/* ---- (2) torch.optim itself ---- */

/* One python run for every case (importing torch takes a second): argv is
 * steps, n, the input file (w0 then one gradient per step, float32), the
 * output file, then one "kind,lr,momentum,nesterov,wd,beta1,beta2,eps" per
 * case; the output holds w, slot 1, slot 2 (n float32 each) per case. */
static const char *torch_script =
    "import struct, sys, torch\n"
    "steps, n = int(sys.argv[1]), int(sys.argv[2])\n"
    "raw = open(sys.argv[3], 'rb').read()\n"
    "vals = torch.tensor(struct.unpack('<%df' % (n * (steps + 1)), raw), dtype=torch.float32)\n"
    "out = []\n"
    "for spec in sys.argv[5:]:\n"
    "    kind, lr, mom, nest, wd, b1, b2, eps = spec.split(',')\n"
    "    p = torch.nn.Parameter(vals[:n].clone())\n"
    "    if kind == 'sgd':\n"
    "        opt = torch.optim.SGD([p], lr=float(lr), momentum=float(mom), nesterov=nest == '1',\n"
    "                              weight_decay=float(wd))\n"
    "    else:\n"
    "        opt = torch.optim.Adam([p], lr=float(lr), betas=(float(b1), float(b2)),\n"
    "                               eps=float(eps), weight_decay=float(wd))\n"
    "    for t in range(steps):\n"
    "        p.grad = vals[n * (t + 1):n * (t + 2)].clone()\n"
    "        opt.step()\n"
    "    st = opt.state[p]\n"
    "    zero = torch.zeros(n)\n"
    "    s1 = st.get('momentum_buffer', st.get('exp_avg', zero))\n"
    "    s2 = st.get('exp_avg_sq', zero)\n"
    "    out += torch.cat([p.detach(), zero if s1 is None else s1, s2]).tolist()\n"
    "open(sys.argv[4], 'wb').write(struct.pack('<%df' % len(out), *out))\n";

static char torch_python[256];
static char tmpdir[64];

/* A python3 that imports torch, or NULL. */
static const char *find_torch(void)
{
    const char *env = getenv("PYTHON3");
    const char *cands[2] = {env != NULL && env[0] != '\0' ? env : NULL, "/usr/bin/python3"};
    for (int i = 0; i < 2; i++) {
        if (cands[i] == NULL)
            continue;
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "'%s' -c 'import torch' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0) {
            snprintf(torch_python, sizeof(torch_python), "%s", cands[i]);
            return torch_python;
        }
    }
    return NULL;
}

/* Runs torch.optim for every case on the first TORCH_N elements; results
 * into out[case][3][TORCH_N] (w, slot 1, slot 2). */
#define TORCH_N 2000
static int torch_run(const opt_case *cases, int n_cases, const opt_inputs *in, float *out)
{
    char script[128], data[128], res[128], cmd[4096];
    snprintf(script, sizeof(script), "%s/optim.py", tmpdir);
    snprintf(data, sizeof(data), "%s/in.bin", tmpdir);
    snprintf(res, sizeof(res), "%s/out.bin", tmpdir);
    FILE *f = fopen(script, "w");
    if (f == NULL || fputs(torch_script, f) < 0 || fclose(f) != 0)
        return -1;
    f = fopen(data, "wb");
    if (f == NULL)
        return -1;
    fwrite(in->w0, sizeof(float), TORCH_N, f);
    for (int t = 0; t < STEPS; t++)
        fwrite(in->g[t], sizeof(float), TORCH_N, f);
    if (fclose(f) != 0)
        return -1;
    int len = snprintf(cmd, sizeof(cmd), "'%s' '%s' %d %d '%s' '%s'", torch_python, script, STEPS,
                       TORCH_N, data, res);
    for (int k = 0; k < n_cases && len < (int)sizeof(cmd); k++) {
        const opt_case *c = &cases[k];
        len += snprintf(cmd + len, sizeof(cmd) - (size_t)len,
                        " %s,%.9g,%.9g,%d,%.9g,%.9g,%.9g,%.9g",
                        c->kind == OPT_SGD ? "sgd" : "adam", c->lr, c->momentum,
                        c->nesterov ? 1 : 0, c->weight_decay, c->beta1, c->beta2, c->eps);
    }
    if (len >= (int)sizeof(cmd) || system(cmd) != 0)
        return -1;
    f = fopen(res, "rb");
    if (f == NULL)
        return -1;
    size_t want = (size_t)n_cases * 3 * TORCH_N;
    size_t got = fread(out, sizeof(float), want, f);
    fclose(f);
    return got == want ? 0 : -1;
}

static double rel_err_n(const float *a, const float *ref, int n)
{
    double diff = 0.0, scale = 1e-30;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= diff))
            diff = d;
        if (fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    }
    return diff / scale;
}

int main(void)
{
    static const opt_case cases[] = {
        {"sgd", OPT_SGD, 0.1f, 0.0f, 0.0f, 0, 0, 0, false},
        {"sgd weight_decay 0.01", OPT_SGD, 0.05f, 0.0f, 0.01f, 0, 0, 0, false},
        {"momentum 0.9", OPT_SGD, 0.05f, 0.9f, 0.0f, 0, 0, 0, false},
        {"momentum 0.9 nesterov", OPT_SGD, 0.05f, 0.9f, 0.0f, 0, 0, 0, true},
        {"momentum 0.8 nesterov weight_decay 1e-3", OPT_SGD, 0.02f, 0.8f, 1e-3f, 0, 0, 0, true},
        {"adam", OPT_ADAM, 1e-3f, 0, 0.0f, 0.9f, 0.999f, 1e-8f, false},
        {"adam betas (0.8, 0.99) eps 1e-6 weight_decay 0.05", OPT_ADAM, 0.01f, 0, 0.05f, 0.8f,
         0.99f, 1e-6f, false},
    };
    opt_inputs *in = malloc(sizeof(*in));
    opt_result *ref = malloc(sizeof(*ref));
    float *w1 = malloc(COUNT * sizeof(float)), *a1 = malloc(COUNT * sizeof(float));
    float *b1 = malloc(COUNT * sizeof(float)), *w2 = malloc(COUNT * sizeof(float));
    float *a2 = malloc(COUNT * sizeof(float)), *b2 = malloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++)
        in->w0[i] = test_uniform(-1.0f, 1.0f);
    for (int t = 0; t < STEPS; t++)
        for (int i = 0; i < COUNT; i++)
            in->g[t][i] = test_uniform(-1.0f, 1.0f) * (i % 7 == 0 ? 1e-3f : 1.0f);

    const char *py = find_torch();
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/tt_optim_XXXXXX");
    if (py != NULL && mkdtemp(tmpdir) == NULL)
        py = NULL;
    if (py == NULL)
        tt_diag("no python3 with torch ($PYTHON3 or /usr/bin/python3): torch checks skipped");
    int n_cases = (int)(sizeof(cases) / sizeof(cases[0]));
    float *torch_out = malloc((size_t)n_cases * 3 * TORCH_N * sizeof(float));
    bool torch_ok = py != NULL && torch_run(cases, n_cases, in, torch_out) == 0;
    if (py != NULL)
        tt_ok(torch_ok, "torch.optim script runs (%s)", py);

    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const opt_case *c = &cases[k];
        if (backend_run(c, in, 1, w1, a1, b1) != 0 || backend_run(c, in, 2, w2, a2, b2) != 0) {
            tt_ok(0, "%s: backend runs", c->name);
            continue;
        }
        ref_run(c, in, STEPS, ref);
        double e = rel_err(w1, ref->w), es = step_err(w1, ref->w, in->w0);
        tt_ok(e < 1e-6 && es < 1e-4,
              "%s: %d steps vs float64 reference (rel err %.2g, on the steps %.2g)", c->name, STEPS,
              e, es);
        if (c->kind == OPT_ADAM || c->momentum != 0.0f) {
            double e1 = rel_err(a1, ref->s1), e2 = c->kind == OPT_ADAM ? rel_err(b1, ref->s2) : 0;
            tt_ok(e1 < 1e-5 && e2 < 1e-5, "%s: optimizer state vs reference (%.2g, %.2g)",
                  c->name, e1, e2);
        }
        tt_ok(memcmp(w1, w2, COUNT * sizeof(float)) == 0 &&
                  memcmp(a1, a2, COUNT * sizeof(float)) == 0 &&
                  memcmp(b1, b2, COUNT * sizeof(float)) == 0,
              "%s: threads 1 and 2 give the same bits", c->name);

        if (py == NULL) {
            tt_skip("%s: vs torch.optim (no python3 with torch)", c->name);
            continue;
        }
        if (!torch_ok)
            continue;
        const float *tw = torch_out + (size_t)k * 3 * TORCH_N;
        e = rel_err_n(w1, tw, TORCH_N);
        double e1 = rel_err_n(a1, tw + TORCH_N, TORCH_N);
        double e2 = rel_err_n(b1, tw + 2 * TORCH_N, TORCH_N);
        tt_ok(e < 1e-6 && e1 < 1e-5 && e2 < 1e-5,
              "%s: %d steps vs torch.optim (rel err w %.2g, state %.2g, %.2g)", c->name, STEPS, e,
              e1, e2);
    }

    if (py != NULL) {
        char path[128];
        const char *files[] = {"optim.py", "in.bin", "out.bin"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "%s/%s", tmpdir, files[i]);
            unlink(path);
        }
        rmdir(tmpdir);
    }
    free(torch_out);
    free(in);
    free(ref);
    free(w1);
    free(a1);
    free(b1);
    free(w2);
    free(a2);
    free(b2);
    return tt_done();
}

/* test_bf16.c - the CPU backend in precision "bf16" (backend_cpu_create_bf16):
 * dense and conv2d forward and backward, the operations the layers call,
 * on LeNet-, ResNet- and MLP-like shapes, with the batch cut unevenly.
 *
 * Each case checks, for y, dx, dw and db:
 *  - against the float32 backend: norm-wise relative error under 1e-2
 *    (what bf16's 8-bit mantissa allows);
 *  - against a float64 reference on the inputs rounded to bf16: under 1e-4,
 *    and ten times closer than to the float64 result on the unrounded
 *    inputs: so the products really are of bf16 values with float32
 *    accumulation, not a float32 run; dense's y, dx and dw, and those of
 *    convolutions with few input channels (conv_small.c), also element by
 *    element, within the error bound of a float32 sum (check_sum_bound);
 *  - 1, 2 and 5 threads give the same bits;
 *  - against torch.autocast("cpu", dtype=torch.bfloat16): under 1e-2
 *    (skipped visibly without a python3 with torch).
 * Then the operations over blocked activations held in bf16 (backend.h:
 * blocked_bf16): element-wise, conv2d, the pools (the float32 NCHW bits on
 * the widened x, a bf16 y rounded once) and batchnorm (those bits, y
 * rounded), every rounding checked against tt_ref.h's tt_bf16_round.
 * Without AVX512_BF16 or AMX (or with oneDNN capped below them by
 * ONEDNN_MAX_CPU_ISA) the backend must refuse with a usage error naming what
 * is missing, and the rest SKIPs visibly.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "tt_blocked.h"
#include "tt_ref.h"
#include "tt_test.h"

enum { DENSE, CONV };

typedef struct {
    int kind;
    window_desc d;   /* CONV */
    int n, in, out;  /* DENSE */
    bool relu, bias, need_dx;
    const char *label;
} bcase;

static window_desc wd(int n, int c, int h, int f, int k, int stride, int pad)
{
    window_desc d = {.n = n, .c = c, .h = h, .w = h, .f = f, .k = k, .stride = stride,
                     .pad = pad};
    d.oh = window_out_size(h, k, stride, pad);
    d.ow = d.oh;
    return d;
}

static bcase cases[] = {
    {DENSE, {0}, 45, 400, 120, true, true, true, "dense 45x400->120 relu bias (LeNet fc0)"},
    {DENSE, {0}, 64, 84, 10, false, true, true, "dense 64x84->10 bias (LeNet fc2)"},
    {DENSE, {0}, 7, 33, 70, true, false, true, "dense 7x33->70 relu"},
    {DENSE, {0}, 100, 784, 256, true, true, false, "dense 100x784->256 relu bias, no dx (MLP fc0)"},
    {CONV, {0}, 0, 0, 0, false, false, false, "conv 3->16 12x12 k3 (ResNet conv0)"},
    {CONV, {0}, 0, 0, 0, true, false, true, "conv 16->32 12x12 k3 s2 relu"},
    {CONV, {0}, 0, 0, 0, false, false, true, "conv 16->32 8x8 k1 s2 (projection)"},
    {CONV, {0}, 0, 0, 0, true, true, false, "conv 1->6 28x28 k5 p2 relu bias (LeNet conv0)"},
    {CONV, {0}, 0, 0, 0, true, true, true, "conv 6->16 14x14 k5 relu bias, 3 images (LeNet conv1)"},
    {CONV, {0}, 0, 0, 0, false, true, true, "conv 32->64 8x8 k3 bias, 9 images"},
};
#define N_CASES ((int)(sizeof(cases) / sizeof(cases[0])))

static void cases_init(void)
{
    cases[4].d = wd(6, 3, 12, 16, 3, 1, 1);
    cases[5].d = wd(5, 16, 12, 32, 3, 2, 1);
    cases[6].d = wd(4, 16, 8, 32, 1, 2, 0);
    cases[7].d = wd(7, 1, 28, 6, 5, 1, 2);
    cases[8].d = wd(3, 6, 14, 16, 5, 1, 0);
    cases[9].d = wd(9, 32, 8, 64, 3, 1, 1);
}

/* element counts of x, w, b, y */
static void sizes(const bcase *c, size_t *nx, size_t *nw, size_t *nb, size_t *ny)
{
    if (c->kind == DENSE) {
        *nx = (size_t)c->n * c->in;
        *nw = (size_t)c->out * c->in;
        *nb = (size_t)c->out;
        *ny = (size_t)c->n * c->out;
    } else {
        const window_desc *d = &c->d;
        *nx = (size_t)d->n * d->c * d->h * d->w;
        *nw = (size_t)d->f * d->c * d->k * d->k;
        *nb = (size_t)d->f;
        *ny = (size_t)d->n * d->f * d->oh * d->ow;
    }
}

/* The inputs of a case (host) and what a backend made of them. */
typedef struct {
    float *x, *w, *b, *dy, *ymask; /* ymask: the forward output backward masks with */
} inputs;

typedef struct {
    float *y, *dx, *dw, *db;
} outputs;

static void outputs_free(outputs *o)
{
    free(o->y);
    free(o->dx);
    free(o->dw);
    free(o->db);
    memset(o, 0, sizeof(*o));
}

/* Runs forward and backward of case c on be. The backward takes `ymask`
 * as the forward output when given (so two backends mask dy alike), else
 * the output of this forward. */
static void run_case(backend_t *be, const bcase *c, const inputs *in, outputs *o)
{
    size_t nx, nw, nb, ny;
    sizes(c, &nx, &nw, &nb, &ny);
    float *x = tt_dev_copy(be, in->x, nx * 4), *w = tt_dev_copy(be, in->w, nw * 4);
    float *b = c->bias ? tt_dev_copy(be, in->b, nb * 4) : NULL;
    float *y = tt_dev_copy(be, NULL, ny * 4), *dy = tt_dev_copy(be, in->dy, ny * 4);
    float *dx = c->need_dx ? tt_dev_copy(be, NULL, nx * 4) : NULL;
    float *dw = tt_dev_copy(be, NULL, nw * 4), *db = c->bias ? tt_dev_copy(be, NULL, nb * 4) : NULL;
    void *ws = NULL;
    if (c->kind == DENSE) {
        be->dense_forward(be, c->n, c->in, c->out, x, w, b, c->relu, y);
    } else {
        size_t wsb = be->conv_workspace(be, &c->d);
        ws = tt_dev_copy(be, NULL, wsb);
        be->conv_forward(be, &c->d, x, w, b, c->relu, y, ws);
    }
    o->y = tt_host_copy(be, y, ny * 4);
    if (in->ymask != NULL)
        be->upload(be, y, in->ymask, ny * 4);
    if (c->kind == DENSE)
        be->dense_backward(be, c->n, c->in, c->out, x, w, y, c->relu, dy, dx, dw, db);
    else
        be->conv_backward(be, &c->d, x, w, y, c->relu, dy, dx, dw, db, ws);
    o->dx = dx ? tt_host_copy(be, dx, nx * 4) : NULL;
    o->dw = tt_host_copy(be, dw, nw * 4);
    o->db = db ? tt_host_copy(be, db, nb * 4) : NULL;
    void *bufs[] = {x, w, b, y, dy, dx, dw, db, ws};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (bufs[i] != NULL)
            be->free(be, bufs[i]);
}

/* ---- float64 references ---- */

/* bf16 rounding (nearest even) of a float, as a double */
static double bf16_of(float f)
{
    return tt_bf16_widen(tt_bf16_round(f));
}

typedef struct {
    double *y, *dx, *dw, *db;
} ref_out;

static void ref_free(ref_out *r)
{
    free(r->y);
    free(r->dx);
    free(r->dw);
    free(r->db);
}

/* y, dx, dw, db in float64, with x, w and dy rounded to bf16 first when
 * `round`; the bias is not rounded, nor dense's db (float32 in the
 * backend). dy is masked by in->ymask where relu. With `magnitude`, every
 * operand and the bias by its absolute value: each output's sum of the
 * absolute products (and |bias|), which a rounding error bound scales. */
static void reference(const bcase *c, const inputs *in, bool round, bool magnitude, ref_out *r)
{
    size_t nx, nw, nb, ny;
    sizes(c, &nx, &nw, &nb, &ny);
    double *x = malloc(nx * 8), *w = malloc(nw * 8), *g = malloc(ny * 8);
    r->y = calloc(ny, 8);
    r->dx = calloc(nx, 8);
    r->dw = calloc(nw, 8);
    r->db = calloc(nb, 8);
    if (!x || !w || !g || !r->y || !r->dx || !r->dw || !r->db)
        exit(99);
    double *gexact = malloc(ny * 8), *bias = malloc(nb * 8);
    if (gexact == NULL || bias == NULL)
        exit(99);
    for (size_t i = 0; i < nx; i++)
        x[i] = round ? bf16_of(in->x[i]) : in->x[i];
    for (size_t i = 0; i < nw; i++)
        w[i] = round ? bf16_of(in->w[i]) : in->w[i];
    for (size_t i = 0; i < nb; i++)
        bias[i] = c->bias ? in->b[i] : 0.0;
    for (size_t i = 0; i < ny; i++) {
        float m = c->relu && !(in->ymask[i] > 0.0f) ? 0.0f : in->dy[i];
        gexact[i] = m;
        g[i] = round ? bf16_of(m) : m;
    }
    for (size_t i = 0; magnitude && i < nx; i++)
        x[i] = fabs(x[i]);
    for (size_t i = 0; magnitude && i < nw; i++)
        w[i] = fabs(w[i]);
    for (size_t i = 0; magnitude && i < nb; i++)
        bias[i] = fabs(bias[i]);
    for (size_t i = 0; magnitude && i < ny; i++) {
        g[i] = fabs(g[i]);
        gexact[i] = fabs(gexact[i]);
    }
    if (c->kind == DENSE) {
        for (int s = 0; s < c->n; s++)
            for (int o = 0; o < c->out; o++) {
                double acc = bias[o];
                for (int i = 0; i < c->in; i++)
                    acc += x[(size_t)s * c->in + i] * w[(size_t)o * c->in + i];
                r->y[(size_t)s * c->out + o] = c->relu && acc < 0 ? 0.0 : acc;
                double gg = g[(size_t)s * c->out + o];
                for (int i = 0; i < c->in; i++) {
                    r->dx[(size_t)s * c->in + i] += gg * w[(size_t)o * c->in + i];
                    r->dw[(size_t)o * c->in + i] += gg * x[(size_t)s * c->in + i];
                }
                r->db[o] += gexact[(size_t)s * c->out + o];
            }
    } else {
        const window_desc *d = &c->d;
        for (int s = 0; s < d->n; s++)
            for (int f = 0; f < d->f; f++)
                for (int oy = 0; oy < d->oh; oy++)
                    for (int ox = 0; ox < d->ow; ox++) {
                        size_t yi = (((size_t)s * d->f + f) * d->oh + oy) * d->ow + ox;
                        double acc = bias[f], gg = g[yi];
                        for (int ch = 0; ch < d->c; ch++)
                            for (int ky = 0; ky < d->k; ky++)
                                for (int kx = 0; kx < d->k; kx++) {
                                    int iy, ix;
                                    if (!tt_window_tap(d, oy, ox, ky, kx, &iy, &ix))
                                        continue;
                                    size_t xi = (((size_t)s * d->c + ch) * d->h + iy) * d->w + ix;
                                    size_t wi = (((size_t)f * d->c + ch) * d->k + ky) * d->k + kx;
                                    acc += x[xi] * w[wi];
                                    r->dx[xi] += gg * w[wi];
                                    r->dw[wi] += gg * x[xi];
                                }
                        r->y[yi] = c->relu && acc < 0 ? 0.0 : acc;
                        r->db[f] += g[yi];
                    }
    }
    free(x);
    free(w);
    free(g);
    free(gexact);
    free(bias);
}

/* ---- torch.autocast ---- */

static const char *torch_script =
    "import sys, warnings\n"
    "warnings.filterwarnings('ignore')\n"
    "import numpy as np, torch, torch.nn.functional as F\n"
    "spec, data, out = sys.argv[1:4]\n"
    "buf = np.fromfile(data, dtype=np.float32)\n"
    "off = 0\n"
    "def take(shape, grad=True):\n"
    "    global off\n"
    "    n = int(np.prod(shape))\n"
    "    t = torch.from_numpy(buf[off:off + n].reshape(shape).copy())\n"
    "    off += n\n"
    "    return t.requires_grad_(grad)\n"
    "res = []\n"
    "for line in open(spec):\n"
    "    f = [int(v) for v in line.split()]\n"
    "    if f[0] == 0:\n"
    "        _, n, i, o, relu, bias = f\n"
    "        x, w = take((n, i)), take((o, i))\n"
    "        b = take((o,)) if bias else None\n"
    "        dy = take((n, o), False)\n"
    "        with torch.autocast('cpu', dtype=torch.bfloat16):\n"
    "            y = F.linear(x, w, b)\n"
    "    else:\n"
    "        _, n, c, h, fo, k, s, p, relu, bias = f\n"
    "        x, w = take((n, c, h, h)), take((fo, c, k, k))\n"
    "        b = take((fo,)) if bias else None\n"
    "        oh = (h + 2 * p - k) // s + 1\n"
    "        dy = take((n, fo, oh, oh), False)\n"
    "        with torch.autocast('cpu', dtype=torch.bfloat16):\n"
    "            y = F.conv2d(x, w, b, stride=s, padding=p)\n"
    "    assert y.dtype == torch.bfloat16, y.dtype\n"
    "    y.backward(dy.to(y.dtype))\n"
    "    y = torch.relu(y) if relu else y\n"
    "    res += [y.detach().float(), x.grad, w.grad] + ([b.grad] if bias else [])\n"
    "np.concatenate([t.numpy().ravel() for t in res]).astype(np.float32).tofile(out)\n";

/* One python run for every case: writes the cases and their inputs, reads
 * back y, dx, dw (and db) of each. With relu, torch gets dy masked by our
 * forward output, so that an output near 0 that rounds to the other side
 * of it there does not count as an error of the convolution. */
static float *torch_run(const char *py, const char *dir, inputs *in)
{
    char spec[4200], data[4200], res[4200], script[4200], cmd[17000];
    snprintf(spec, sizeof(spec), "%s/cases.txt", dir);
    snprintf(data, sizeof(data), "%s/in.bin", dir);
    snprintf(res, sizeof(res), "%s/out.bin", dir);
    snprintf(script, sizeof(script), "%s/autocast.py", dir);
    tt_write_file(NULL, script, torch_script);
    FILE *fs = fopen(spec, "w"), *fd = fopen(data, "wb");
    if (fs == NULL || fd == NULL)
        exit(99);
    size_t want = 0;
    for (int k = 0; k < N_CASES; k++) {
        const bcase *c = &cases[k];
        size_t nx, nw, nb, ny;
        sizes(c, &nx, &nw, &nb, &ny);
        if (c->kind == DENSE)
            fprintf(fs, "0 %d %d %d %d %d\n", c->n, c->in, c->out, c->relu, c->bias);
        else
            fprintf(fs, "1 %d %d %d %d %d %d %d %d %d\n", c->d.n, c->d.c, c->d.h, c->d.f,
                    c->d.k, c->d.stride, c->d.pad, c->relu, c->bias);
        fwrite(in[k].x, 4, nx, fd);
        fwrite(in[k].w, 4, nw, fd);
        if (c->bias)
            fwrite(in[k].b, 4, nb, fd);
        for (size_t i = 0; i < ny; i++) {
            float g = c->relu && !(in[k].ymask[i] > 0.0f) ? 0.0f : in[k].dy[i];
            fwrite(&g, 4, 1, fd);
        }
        want += ny + nx + nw + (c->bias ? nb : 0);
    }
    if (fclose(fs) != 0 || fclose(fd) != 0)
        exit(99);
    snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s' '%s' '%s'", py, script, spec, data, res);
    if (system(cmd) != 0)
        return NULL;
    float *out = malloc(want * 4);
    FILE *f = fopen(res, "rb");
    size_t got = f != NULL && out != NULL ? fread(out, 4, want, f) : 0;
    if (f != NULL)
        fclose(f);
    if (got != want) {
        free(out);
        return NULL;
    }
    return out;
}

/* ---- checks ---- */

static const char *names[4] = {"y", "dx", "dw", "db"};

static const float *out_of(const outputs *o, int i)
{
    const float *p[4] = {o->y, o->dx, o->dw, o->db};
    return p[i];
}

static const double *ref_of(const ref_out *r, int i)
{
    const double *p[4] = {r->y, r->dx, r->dw, r->db};
    return p[i];
}

static size_t count_of(const bcase *c, int i)
{
    size_t n[4];
    sizes(c, &n[1], &n[2], &n[3], &n[0]);
    return n[i];
}

/* The most products one element of y, dx or dw (i = 0, 1, 2) sums: dense
 * in, out or n; conv C*K*K, F*K*K or N*OH*OW (products with padding are
 * zero, so fewer). */
static int terms_of(const bcase *c, int i)
{
    if (c->kind == DENSE)
        return i == 0 ? c->in : i == 1 ? c->out : c->n;
    const window_desc *d = &c->d;
    return i == 0 ? d->c * d->k * d->k : i == 1 ? d->f * d->k * d->k : d->n * d->oh * d->ow;
}

/* y, dx or dw (i = 0, 1, 2) of dense or of a convolution with few input
 * channels (conv_small.c: vdpbf16ps on AVX512_BF16, float32 fmas of the
 * rounded operands elsewhere), element by element, against float64 on
 * the same bf16 operands. Each product of two bf16 values is exact in
 * float32 (8-bit significands: 16 bits of product), so the kernel's only
 * errors are the roundings of its float32 sum: K products (terms_of) and
 * the bias, at most K + 1 additions in any order or tree (vdpbf16ps and
 * AMX's tdpbf16ps add a pair's products one at a time or at once; adding
 * a zero partner's product is exact), so
 * |fl(s) - s| <= gamma_{K+1} * (sum |products| + |bias|) with gamma_n =
 * n u / (1 - n u), u = 2^-24 (Higham, Accuracy and Stability, 4.2); relu
 * moves no two values further apart. The float64 reference itself is off
 * by at most gamma_K in 2^-53, and denormals flushed to zero (vdpbf16ps
 * flushes its results; these inputs have none) by at most 2^-126 per
 * addition. Rounding an operand wrongly (truncation, twice) moves an
 * element by about 2^-9 of one of its products, ~100 times this bound. */
static void check_sum_bound(const bcase *c, int i, const float *got, const ref_out *rr,
                            const ref_out *mag)
{
    int K = terms_of(c, i);
    double u = ldexp(1.0, -24), gamma = (K + 1) * u / (1.0 - (K + 1) * u);
    double gamma64 = K * ldexp(1.0, -53) / (1.0 - K * ldexp(1.0, -53));
    size_t n = count_of(c, i), bad = 0;
    double worst = 0.0;
    for (size_t j = 0; j < n; j++) {
        double m = ref_of(mag, i)[j];
        double bound = (gamma + gamma64) * m + (K + 1) * ldexp(1.0, -126);
        double e = fabs((double)got[j] - ref_of(rr, i)[j]);
        if (!(e <= bound))
            bad++;
        if (e / bound > worst)
            worst = e / bound;
    }
    tt_ok(bad == 0, "%s: %s element-wise within the float32 summation bound of %d exact bf16 "
          "products%s of float64's (%zu of %zu past it; worst error %.3f of its bound)",
          c->label, names[i], K, i == 0 && c->bias ? " and the bias" : "", bad, n, worst);
}

static void check_case(int k, backend_t *fp32, backend_t *const bf[3], const int threads[3],
                       inputs *in)
{
    const bcase *c = &cases[k];
    outputs o32 = {0}, ob[3] = {{0}};
    run_case(bf[0], c, in, &ob[0]);
    run_case(fp32, c, in, &o32);
    outputs again = {0};
    run_case(bf[0], c, in, &again);
    for (int t = 1; t < 3; t++)
        run_case(bf[t], c, in, &ob[t]);
    ref_out rr = {0}, re = {0}, rm = {0};
    reference(c, in, true, false, &rr);
    reference(c, in, false, false, &re);
    reference(c, in, true, true, &rm);

    for (int i = 0; i < 4; i++) {
        const float *b = out_of(&ob[0], i);
        if (b == NULL)
            continue; /* no dx asked, or no bias */
        size_t n = count_of(c, i);
        double e32 = tt_rel_err_f(b, out_of(&o32, i), n);
        tt_ok(e32 < 1e-2, "%s: %s bf16 vs float32 backend (err %.2e)", c->label, names[i], e32);
        double er = tt_rel_err(b, ref_of(&rr, i), n), ee = tt_rel_err(b, ref_of(&re, i), n);
        if (i == 3 && c->kind == DENSE) /* dense sums the float32 dy for db */
            tt_ok(ee < 1e-5, "%s: db float32 sum of the float32 dy vs float64 (err %.2e)",
                  c->label, ee);
        else if (i == 3) /* oneDNN's conv sums its bf16 diff_dst, as torch.autocast */
            tt_ok(er < 1e-4 && er * 10 < ee, "%s: db float32 sum of the bf16 dy: vs float64 "
                  "on bf16 dy %.2e, on the float32 dy %.2e", c->label, er, ee);
        else
            tt_ok(er < 1e-4 && er * 10 < ee,
                  "%s: %s is bf16 products with float32 sums: vs float64 on bf16 inputs %.2e, "
                  "on the float32 inputs %.2e", c->label, names[i], er, ee);
        if (i < 3 && (c->kind == DENSE || c->d.c < 16))
            check_sum_bound(c, i, b, &rr, &rm);
        bool same = tt_same_bits(b, out_of(&again, i), n);
        for (int t = 1; t < 3; t++)
            same = same && tt_same_bits(b, out_of(&ob[t], i), n);
        tt_ok(same, "%s: %s the same bits again and with %d, %d and %d threads", c->label,
              names[i], threads[0], threads[1], threads[2]);
    }
    outputs_free(&o32);
    outputs_free(&again);
    for (int t = 0; t < 3; t++)
        outputs_free(&ob[t]);
    ref_free(&rr);
    ref_free(&re);
    ref_free(&rm);
}

/* ---- blocked activations in bf16 (backend.h: blocked_bf16) ---- */

/* add_blocked (with and without relu), relu_forward_blocked and
 * relu_backward_blocked of the bf16 backend: bf16 in, bf16 out (gradients
 * float32), each element the nearest bf16 of the float32 result; the same
 * bits on 1 and 2 threads. The float32 backend's blocked operations are its
 * NCHW ones. */
static void test_blocked_elementwise(backend_t *const bf[2], backend_t *fp32)
{
    const size_t count = 100003; /* several tasks and a tail */
    tt_rng rng = tt_rng_make(0xb16);
    float *fa = malloc(count * 4), *fb = malloc(count * 4), *g = malloc(count * 4);
    uint16_t *a = malloc(count * 2), *b = malloc(count * 2);
    tt_fill(&rng, fa, count, -4.0, 4.0);
    tt_fill(&rng, fb, count, -4.0, 4.0);
    tt_fill(&rng, g, count, -1.0, 1.0);
    for (size_t i = 0; i < count; i++) {
        a[i] = tt_bf16_round(fa[i]);
        b[i] = tt_bf16_round(fb[i]);
    }
    a[7] = 0x8000;   /* -0: relu gives +0 */
    a[8] = 0x7fc1;   /* NaN: relu gives +0, a sum stays NaN */
    b[9] = a[9] ^ 0x8000; /* x + (-x) = +0 */
    uint16_t *out[2][4];
    float *dx[2];
    for (int t = 0; t < 2; t++) {
        backend_t *be = bf[t];
        uint16_t *da = tt_dev_copy(be, a, count * 2), *db = tt_dev_copy(be, b, count * 2);
        float *dg = tt_dev_copy(be, g, count * 4), *ddx = tt_dev_copy(be, NULL, count * 4);
        for (int k = 0; k < 3; k++) {
            uint16_t *y = tt_dev_copy(be, NULL, count * 2);
            if (k < 2)
                be->add_blocked(be, count, (float *)da, (float *)db, k == 1, (float *)y);
            else
                be->relu_forward_blocked(be, count, (float *)da, (float *)y);
            out[t][k] = tt_host_copy(be, y, count * 2);
            be->free(be, y);
        }
        /* in place, as add does with more than two inputs */
        be->add_blocked(be, count, (float *)da, (float *)db, false, (float *)da);
        out[t][3] = tt_host_copy(be, da, count * 2);
        be->upload(be, da, a, count * 2);
        be->relu_backward_blocked(be, count, (float *)da, dg, ddx);
        dx[t] = tt_host_copy(be, ddx, count * 4);
        be->free(be, da), be->free(be, db), be->free(be, dg), be->free(be, ddx);
    }
    size_t bad[4] = {0}, bad_dx = 0;
    for (size_t i = 0; i < count; i++) {
        float s = tt_bf16_widen(a[i]) + tt_bf16_widen(b[i]);
        float r = tt_bf16_widen(a[i]) > 0.0f ? tt_bf16_widen(a[i]) : 0.0f;
        uint16_t want[4] = {tt_bf16_round(s), tt_bf16_round(s > 0.0f ? s : 0.0f), tt_bf16_round(r),
                            tt_bf16_round(s)};
        for (int k = 0; k < 4; k++)
            bad[k] += out[0][k][i] != want[k];
        float wg = tt_bf16_widen(a[i]) > 0.0f ? g[i] : 0.0f;
        bad_dx += memcmp(&dx[0][i], &wg, 4) != 0;
    }
    tt_ok(bad[0] == 0 && bad[3] == 0, "bf16 blocked add: the nearest bf16 of each float32 sum, "
          "also in place (%zu, %zu of %zu off)", bad[0], bad[3], count);
    tt_ok(bad[1] == 0, "bf16 blocked add + relu: relu of the sum, rounded (%zu off)", bad[1]);
    tt_ok(bad[2] == 0 && out[0][2][7] == 0 && out[0][2][8] == 0,
          "bf16 blocked relu: x or +0 (-0 and NaN give +0; %zu off)", bad[2]);
    tt_ok(bad_dx == 0, "bf16 blocked relu backward: dy where the bf16 y > 0, float32 (%zu off)",
          bad_dx);
    bool same = memcmp(dx[0], dx[1], count * 4) == 0;
    for (int k = 0; k < 4; k++)
        same = same && memcmp(out[0][k], out[1][k], count * 2) == 0;
    tt_ok(same, "bf16 blocked element-wise operations: the same bits on 1 and 2 threads");
    for (int t = 0; t < 2; t++) {
        for (int k = 0; k < 4; k++)
            free(out[t][k]);
        free(dx[t]);
    }
    /* float32: the blocked operations are the NCHW ones */
    float *y1 = tt_dev_copy(fp32, NULL, count * 4), *y2 = tt_dev_copy(fp32, NULL, count * 4);
    float *x1 = tt_dev_copy(fp32, fa, count * 4), *x2 = tt_dev_copy(fp32, fb, count * 4);
    fp32->add(fp32, count, x1, x2, true, y1);
    fp32->add_blocked(fp32, count, x1, x2, true, y2);
    float *h1 = tt_host_copy(fp32, y1, count * 4), *h2 = tt_host_copy(fp32, y2, count * 4);
    size_t nz = 0;
    for (size_t i = 0; i < count; i++)
        nz += h1[i] > 0.0f && h1[i] != tt_bf16_widen(tt_bf16_round(h1[i]));
    tt_ok(memcmp(h1, h2, count * 4) == 0 && nz > count / 4,
          "float32 backend: blocked add + relu = the NCHW one, float32 (not rounded)");
    free(h1), free(h2);
    fp32->free(fp32, y1), fp32->free(fp32, y2), fp32->free(fp32, x1), fp32->free(fp32, x2);
    free(fa), free(fb), free(g), free(a), free(b);
}

/* NCHW [n][c][p] <-> the blocked layout in NHWC order (backend.h), bf16:
 * element (n, c, p) at ((n * P + p) * CB + c / 16) * 16 + c % 16 */
static size_t nhwc_at(int c_count, int P, int n, int c, int p)
{
    int cb = (c_count + 15) / 16;
    return (((size_t)n * P + p) * cb + c / 16) * 16 + c % 16;
}

/* A convolution with bf16 blocked x and/or y on the bf16 backend, against
 * the same backend on NCHW float32 tensors of the same (bf16) values:
 * forward y the float32 result rounded (within a bf16 step: oneDNN may sum
 * in another order per layout; conv_small.c bitwise), backward dw and dx
 * within float32 noise (their inputs are the same bf16 values). */
static void check_blocked_conv(backend_t *be, window_desc d, const char *label)
{
    bool bx = d.c % 16 == 0, by = d.f % 16 == 0;
    int P = d.h * d.w, Q = d.oh * d.ow;
    size_t nx = (size_t)d.n * d.c * P, ny = (size_t)d.n * d.f * Q, nw = (size_t)d.f * d.c * d.k * d.k;
    tt_rng rng = tt_rng_make(0xc0b + (uint64_t)d.c);
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4);
    tt_fill(&rng, x, nx, -1.0, 1.0);
    tt_fill(&rng, w, nw, -1.0, 1.0);
    tt_fill(&rng, dy, ny, -1.0, 1.0);
    for (size_t i = 0; i < nx; i++)
        x[i] = tt_bf16_widen(tt_bf16_round(x[i]));
    /* the blocked copies: x in bf16, dy float32 */
    uint16_t *xb = calloc(nx, 2);
    float *dyb = calloc(ny, 4);
    for (int n = 0; n < d.n; n++) {
        for (int c = 0; c < d.c && bx; c++)
            for (int p = 0; p < P; p++)
                xb[nhwc_at(d.c, P, n, c, p)] = tt_bf16_round(x[((size_t)n * d.c + c) * P + p]);
        for (int f = 0; f < d.f && by; f++)
            for (int q = 0; q < Q; q++)
                dyb[nhwc_at(d.f, Q, n, f, q)] = dy[((size_t)n * d.f + f) * Q + q];
    }
    float *out[2][3]; /* [NCHW, blocked][y, dx, dw] */
    for (int blk = 0; blk < 2; blk++) {
        window_desc e = d;
        e.blocked_x = blk && bx;
        e.blocked_y = blk && by;
        void *dx_ = e.blocked_x ? (void *)xb : (void *)x;
        float *dx = tt_dev_copy(be, dx_, e.blocked_x ? nx * 2 : nx * 4);
        float *dw_ = tt_dev_copy(be, w, nw * 4);
        float *y = tt_dev_copy(be, NULL, ny * 4);
        float *g = tt_dev_copy(be, e.blocked_y ? dyb : dy, ny * 4);
        float *gx = tt_dev_copy(be, NULL, nx * 4), *gw = tt_dev_copy(be, NULL, nw * 4);
        void *ws = tt_dev_copy(be, NULL, be->conv_workspace(be, &e));
        be->conv_forward(be, &e, dx, dw_, NULL, false, y, ws);
        be->conv_backward(be, &e, dx, dw_, y, false, g, gx, gw, NULL, ws);
        float *hy = tt_host_copy(be, y, ny * 4), *hx = tt_host_copy(be, gx, nx * 4);
        out[blk][0] = malloc(ny * 4);
        out[blk][1] = malloc(nx * 4);
        out[blk][2] = tt_host_copy(be, gw, nw * 4);
        for (int n = 0; n < d.n; n++) {
            for (int f = 0; f < d.f; f++)
                for (int q = 0; q < Q; q++)
                    out[blk][0][((size_t)n * d.f + f) * Q + q] =
                        e.blocked_y ? tt_bf16_widen(((uint16_t *)hy)[nhwc_at(d.f, Q, n, f, q)])
                                    : hy[((size_t)n * d.f + f) * Q + q];
            for (int c = 0; c < d.c; c++)
                for (int p = 0; p < P; p++)
                    out[blk][1][((size_t)n * d.c + c) * P + p] =
                        e.blocked_x ? hx[nhwc_at(d.c, P, n, c, p)] : hx[((size_t)n * d.c + c) * P + p];
        }
        free(hy), free(hx);
        void *bufs[] = {dx, dw_, y, g, gx, gw, ws};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
            be->free(be, bufs[i]);
    }
    /* y: each blocked value is a bf16 within one bf16 step (2^-8
     * relative, plus float32 noise) of the NCHW float32 result */
    size_t far = 0, rounded = 0, exact = 0;
    for (size_t i = 0; i < ny; i++) {
        float r = out[0][0][i], b = out[1][0][i];
        if (!by)
            far += b != r;
        else if (fabs((double)b - r) > fabs((double)r) / 256.0 + 1e-6)
            far++;
        rounded += b == tt_bf16_widen(tt_bf16_round(b));
        exact += b == tt_bf16_widen(tt_bf16_round(r));
    }
    tt_ok(far == 0 && (!by || (rounded == ny && exact > ny * 9 / 10)),
          "%s: y %s (%zu far, %zu of %zu the rounded NCHW value)", label,
          by ? "stored in bf16, the NCHW float32 y rounded" : "NCHW float32", far, exact, ny);
    double ex = tt_rel_err_f(out[1][1], out[0][1], nx), ew = tt_rel_err_f(out[1][2], out[0][2], nw);
    tt_ok(ex < 1e-5 && ew < 1e-5, "%s: dx and dw from the %s x as from NCHW's (%.1e, %.1e)",
          label, bx ? "bf16 blocked" : "NCHW", ex, ew);
    for (int blk = 0; blk < 2; blk++)
        for (int k = 0; k < 3; k++)
            free(out[blk][k]);
    free(x), free(w), free(dy), free(xb), free(dyb);
}

/* the float32 reference of the blocked bf16 pools and batchnorm: 1 thread */
static backend_t *be1;

/* ---- pools over bf16 blocked activations (backend.h: blocked_bf16),
 *      against the float32 NCHW operations on the widened values ---- */

/* x [n, c, hw], bf16-exact: small integers times 0.375 (ties between
 * windows' taps) and uniform values rounded to bf16; NaNs when asked */
static void fill_bf16_exact(tt_rng *rng, float *x, size_t count, bool nans)
{
    for (size_t i = 0; i < count; i++) {
        double v = tt_below(rng, 2) ? (tt_below(rng, 9) - 4) * 0.375 : tt_uniform(rng, -3.0, 3.0);
        x[i] = tt_bf16_widen(tt_bf16_round((float)v));
    }
    if (nans)
        for (size_t i = 5; i < count; i += 97)
            x[i] = tt_bf16_widen(0x7fc0);
}

/* A max (with its argmax mask) or average pool's forward and backward. */
static void pool_run(backend_t *be, const window_desc *d, bool max, const float *x, float *y,
                     int32_t *mask, const float *dy, float *dx)
{
    if (max) {
        be->maxpool_forward(be, d, x, y, mask);
        be->maxpool_backward(be, d, dy, mask, dx);
    } else {
        be->avgpool_forward(be, d, x, y);
        be->avgpool_backward(be, d, dy, dx);
    }
}

/* One pool (max: mask too) forward and backward on the bf16 backend `bb`
 * with a blocked bf16 x, against be1's NCHW operations on the widened x:
 * returns the number of mismatching elements of y, the mask and dx. */
static int bf16_pool_case(backend_t *bb, tt_rng *rng, bool max, int c, int h, int w, int k,
                          int stride, int pad, bool nhwc, bool blocked_y)
{
    window_desc d = {.n = 3, .c = c, .h = h, .w = w, .f = c, .k = k, .stride = stride,
                     .pad = pad, .blocked_x = false, .blocked_y = false};
    d.oh = window_out_size(h, k, stride, pad);
    d.ow = window_out_size(w, k, stride, pad);
    int ipix = h * w, opix = d.oh * d.ow;
    size_t in = (size_t)d.n * c * ipix, out = (size_t)d.n * c * opix;
    float *x = malloc(in * 4), *dy = malloc(out * 4);
    fill_bf16_exact(rng, x, in, max);
    tt_fill(rng, dy, out, -1.0, 1.0);

    /* the reference: float32 NCHW on be1 */
    float *rx = tt_dev_copy(be1, x, in * 4), *ry = tt_dev_copy(be1, NULL, out * 4);
    float *rdy = tt_dev_copy(be1, dy, out * 4), *rdx = tt_dev_copy(be1, NULL, in * 4);
    int32_t *rm = tt_dev_copy(be1, NULL, out * 4);
    pool_run(be1, &d, max, rx, ry, rm, rdy, rdx);
    float *ref_y = tt_host_copy(be1, ry, out * 4), *ref_dx = tt_host_copy(be1, rdx, in * 4);
    int32_t *ref_m = tt_host_copy(be1, rm, out * 4);

    /* the blocked bf16 x; y and the mask blocked (y bf16) or NCHW (float) */
    d.blocked_x = true;
    d.blocked_y = blocked_y;
    bool saved = bb->blocked_nhwc;
    bb->blocked_nhwc = nhwc;
    uint16_t *hx = malloc(in * 2);
    to_blocked16(x, d.n, c, ipix, nhwc, hx);
    float *hdy = malloc(out * 4);
    if (blocked_y)
        for (int i = 0; i < d.n; i++)
            for (int ch = 0; ch < c; ch++)
                for (int p = 0; p < opix; p++)
                    hdy[blocked_at(i, ch, p, c, opix, nhwc)] = dy[((size_t)i * c + ch) * opix + p];
    else
        memcpy(hdy, dy, out * 4);
    float *bx = tt_dev_copy(bb, hx, in * 2), *by = tt_dev_copy(bb, NULL, out * 4);
    float *bdy = tt_dev_copy(bb, hdy, out * 4), *bdx = tt_dev_copy(bb, NULL, in * 4);
    int32_t *bm = tt_dev_copy(bb, NULL, out * 4);
    pool_run(bb, &d, max, bx, by, bm, bdy, bdx);
    bb->blocked_nhwc = saved;
    void *got_y = tt_host_copy(bb, by, out * (blocked_y ? 2 : 4));
    int32_t *got_m = tt_host_copy(bb, bm, out * 4), *m = malloc(out * 4);
    float *got_dx = tt_host_copy(bb, bdx, in * 4), *dx = malloc(in * 4);
    from_blocked32(got_dx, d.n, c, ipix, nhwc, dx);
    if (blocked_y)
        from_blocked32(got_m, d.n, c, opix, nhwc, m);
    else
        memcpy(m, got_m, out * 4);

    int bad = 0;
    for (int i = 0; i < d.n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < opix; p++) {
                size_t o = ((size_t)i * c + ch) * opix + p;
                if (blocked_y) {
                    uint16_t want = tt_bf16_round(ref_y[o]);
                    bad += ((const uint16_t *)got_y)[blocked_at(i, ch, p, c, opix, nhwc)] != want;
                } else {
                    bad += memcmp((const float *)got_y + o, ref_y + o, 4) != 0;
                }
                bad += max && m[o] != ref_m[o];
            }
    bad += !tt_same_bits(dx, ref_dx, in) ? 1 : 0;

    free(x), free(dy), free(hx), free(hdy), free(ref_y), free(ref_dx), free(ref_m);
    free(got_y), free(got_m), free(m), free(got_dx), free(dx);
    be1->free(be1, rx), be1->free(be1, ry), be1->free(be1, rdy), be1->free(be1, rdx);
    be1->free(be1, rm);
    bb->free(bb, bx), bb->free(bb, by), bb->free(bb, bdy), bb->free(bb, bdx), bb->free(bb, bm);
    return bad;
}

/* Global average pooling of a blocked bf16 x [n, 48, 37] in both orders:
 * y = be1's NCHW path (a dense layer of weights 1 / hw) on the widened x;
 * the backward (float32 gradients, unchanged) = the NCHW dense backward's
 * dx. Returns the mismatches. */
static int bf16_gap_case(backend_t *bb, tt_rng *rng, bool nhwc)
{
    const int n = 3, c = 48, hw = 37;
    size_t count = (size_t)n * c * hw;
    float *x = malloc(count * 4), *g = malloc((size_t)n * c * 4), wts[37];
    fill_bf16_exact(rng, x, count, false);
    tt_fill(rng, g, (size_t)n * c, -1.0, 1.0);
    for (int p = 0; p < hw; p++)
        wts[p] = 1.0f / (float)hw;
    float *rx = tt_dev_copy(be1, x, count * 4), *rw = tt_dev_copy(be1, wts, sizeof(wts));
    float *ry = tt_dev_copy(be1, NULL, (size_t)n * c * 4);
    float *rg = tt_dev_copy(be1, g, (size_t)n * c * 4), *rdx = tt_dev_copy(be1, NULL, count * 4);
    be1->dense_forward(be1, n * c, hw, 1, rx, rw, NULL, false, ry);
    be1->dense_backward(be1, n * c, hw, 1, rx, rw, ry, false, rg, rdx, NULL, NULL);
    float *ref_y = tt_host_copy(be1, ry, (size_t)n * c * 4);
    float *ref_dx = tt_host_copy(be1, rdx, count * 4);

    uint16_t *hx = malloc(count * 2);
    to_blocked16(x, n, c, hw, nhwc, hx);
    bool saved = bb->blocked_nhwc;
    bb->blocked_nhwc = nhwc;
    float *bx = tt_dev_copy(bb, hx, count * 2), *by = tt_dev_copy(bb, NULL, (size_t)n * c * 4);
    float *bg = tt_dev_copy(bb, g, (size_t)n * c * 4), *bdx = tt_dev_copy(bb, NULL, count * 4);
    bb->global_avgpool_blocked_forward(bb, n, c, hw, bx, by);
    bb->global_avgpool_blocked_backward(bb, n, c, hw, bg, bdx);
    bb->blocked_nhwc = saved;
    float *y = tt_host_copy(bb, by, (size_t)n * c * 4), *got_dx = tt_host_copy(bb, bdx, count * 4);
    float *dx = malloc(count * 4);
    from_blocked32(got_dx, n, c, hw, nhwc, dx);
    int bad = 0;
    for (size_t i = 0; i < (size_t)n * c; i++)
        bad += memcmp(&y[i], &ref_y[i], 4) != 0;
    for (size_t i = 0; i < count; i++)
        bad += memcmp(&dx[i], &ref_dx[i], 4) != 0;
    free(x), free(g), free(ref_y), free(ref_dx), free(hx), free(y), free(got_dx), free(dx);
    be1->free(be1, rx), be1->free(be1, rw), be1->free(be1, ry), be1->free(be1, rg);
    be1->free(be1, rdx);
    bb->free(bb, bx), bb->free(bb, by), bb->free(bb, bg), bb->free(bb, bdx);
    return bad;
}

static void test_blocked_bf16_pools(void)
{
    tt_err err;
    err_clear(&err);
    for (int th = 1; th <= 2; th++) {
        backend_t *bb = backend_cpu_create_bf16(0, th, &err);
        if (bb == NULL) {
            tt_skip("pools over bf16 blocked activations: no bf16 backend here (%s)", err.msg);
            return;
        }
        bb->blocked_bf16 = true;
        tt_rng rng = tt_rng_make(0xbf16 + (uint64_t)th);
        /* max 2x2 / 2 (the 2x2 window), max 3x3 / 2 pad 1 (clipped edges),
         * avg 2x2 / 2 and 3x3 / 1 pad 1; 7x9 pixels (odd: unused rows and
         * columns) */
        const struct {
            bool max;
            int k, stride, pad;
            const char *name;
        } pools[] = {{true, 2, 2, 0, "max 2x2/2"},
                     {true, 3, 2, 1, "max 3x3/2 pad 1"},
                     {false, 2, 2, 0, "avg 2x2/2"},
                     {false, 3, 1, 1, "avg 3x3/1 pad 1"}};
        /* 16 channels in both orders (one block: the same), 32 (two blocks)
         * in both */
        const struct {
            int c;
            bool nhwc;
        } layouts[] = {{16, true}, {16, false}, {32, false}, {32, true}};
        for (size_t pi = 0; pi < sizeof(pools) / sizeof(pools[0]); pi++)
            for (size_t li = 0; li < sizeof(layouts) / sizeof(layouts[0]); li++)
                for (int by = 0; by < 2; by++) {
                    int bad = bf16_pool_case(bb, &rng, pools[pi].max, layouts[li].c, 7, 9,
                                             pools[pi].k, pools[pi].stride, pools[pi].pad,
                                             layouts[li].nhwc, by == 1);
                    tt_ok(bad == 0,
                          "%s, bf16 blocked x (%d channels, %s) -> %s, %d thread(s): "
                          "float32 NCHW bits on the widened x%s, backward dx too (%d wrong)",
                          pools[pi].name, layouts[li].c, layouts[li].nhwc ? "NHWC" : "nChw16c",
                          by ? "bf16 blocked y" : "float32 NCHW y", th,
                          by ? " rounded once" : "", bad);
                }
        for (int o = 0; o < 2; o++) {
            int bad = bf16_gap_case(bb, &rng, o == 1);
            tt_ok(bad == 0,
                  "global average pooling, bf16 blocked x (48 channels, %s), %d thread(s): "
                  "the NCHW path's bits on the widened x, backward too (%d wrong)",
                  o ? "NHWC" : "nChw16c", th, bad);
        }
        bb->destroy(bb);
    }
}

/* ---- batchnorm over blocked activations held in bf16 (backend.h:
 *      blocked_bf16), against the float32 NCHW operations ---- */

/* One forward (training, relu) and backward over bf16 blocked x and y, in
 * both orders, on 1 and 2 threads; x holds bf16 values, so the float32 NCHW
 * operations on it are the reference. x and y are bf16 arrays of `count`
 * elements and `guard_n` more, which the operations must leave alone. */
static void test_blocked_bf16_batchnorm(void)
{
    tt_err err;
    err_clear(&err);
    backend_t *bf[2] = {backend_cpu_create_bf16(0, 1, &err), NULL};
    if (bf[0] != NULL)
        bf[1] = backend_cpu_create_bf16(0, 2, &err);
    if (bf[0] == NULL || bf[1] == NULL) {
        tt_skip("batchnorm over bf16 blocked activations, 1 and 2 threads, both orders (%s)",
                err.msg);
        if (bf[0] != NULL)
            bf[0]->destroy(bf[0]);
        return;
    }
    tt_rng rng = tt_rng_make(0xbf16);
    /* as test_blocked_orders: 3 blocks of channels, 37 pixels (a tail) */
    const int n = 3, c = 48, hw = 37;
    size_t count = (size_t)n * c * hw;
    float *x = malloc(count * 4), *dy = malloc(count * 4), gamma[48], beta[48];
    bn_inputs_fill(&rng, count, c, x, dy, gamma, beta);
    for (size_t i = 0; i < count; i++) /* bf16 values: widened, the same floats */
        x[i] = tt_bf16_widen(tt_bf16_round(x[i]));

    /* the reference: float32 NCHW on x; the backward's relu mask from y
     * rounded to bf16, as the blocked backward reads it */
    bn_out ref = bn_out_make(count, c);
    float *yr = malloc(count * 4), *g = malloc(count * 4);
    be1->batchnorm_forward(be1, n, c, hw, x, gamma, beta, ref.rmean, ref.rvar, 0.1f, 1e-5f, true,
                           true, ref.y, ref.mean, ref.invstd);
    size_t rounded = 0;
    for (size_t i = 0; i < count; i++) {
        yr[i] = tt_bf16_widen(tt_bf16_round(ref.y[i]));
        rounded += memcmp(&yr[i], &ref.y[i], 4) != 0;
    }
    memcpy(g, dy, count * 4);
    be1->batchnorm_backward(be1, n, c, hw, x, gamma, ref.mean, ref.invstd, yr, true, g, ref.dx,
                            ref.dgamma, ref.dbeta);
    tt_ok(rounded > count / 4,
          "bf16 batchnorm reference: y rounded to bf16 differs from float32's in %zu of %zu",
          rounded, count);

    const size_t guard_n = 32;
    uint16_t *bx = malloc((count + guard_n) * 2), *by = malloc((count + guard_n) * 2);
    float *bg = malloc(count * 4), *bdx = malloc(count * 4), *dx = malloc(count * 4);
    for (int th = 0; th < 2; th++)
        for (int order = 0; order < 2; order++) {
            backend_t *be = bf[th];
            bool nhwc = order == 1;
            be->blocked_bf16 = true;
            be->blocked_nhwc = nhwc;
            bn_out o = bn_out_make(count, c);
            for (int i = 0; i < n; i++)
                for (int ch = 0; ch < c; ch++)
                    for (int p = 0; p < hw; p++) {
                        size_t at = ((size_t)i * c + ch) * hw + p;
                        bx[blocked_at(i, ch, p, c, hw, nhwc)] = tt_bf16_round(x[at]);
                    }
            for (size_t k = 0; k < guard_n; k++)
                bx[count + k] = by[count + k] = 0xdead;
            to_blocked(dy, n, c, hw, nhwc, bg);
            be->batchnorm_forward_blocked(be, n, c, hw, (const float *)bx, gamma, beta, o.rmean,
                                          o.rvar, 0.1f, 1e-5f, true, true, (float *)by, o.mean,
                                          o.invstd);
            be->batchnorm_backward_blocked(be, n, c, hw, (const float *)bx, gamma, o.mean,
                                           o.invstd, (const float *)by, true, bg, bdx, o.dgamma,
                                           o.dbeta);
            from_blocked(bdx, n, c, hw, nhwc, dx);
            size_t bad_y = 0;
            for (int i = 0; i < n; i++)
                for (int ch = 0; ch < c; ch++)
                    for (int p = 0; p < hw; p++) {
                        size_t at = ((size_t)i * c + ch) * hw + p;
                        bad_y += by[blocked_at(i, ch, p, c, hw, nhwc)] !=
                                 tt_bf16_round(ref.y[at]);
                    }
            int guard = 0;
            for (size_t k = 0; k < guard_n; k++)
                guard += bx[count + k] != 0xdead || by[count + k] != 0xdead;
            const char *name = nhwc ? "NHWC" : "nChw16c";
            tt_ok(bad_y == 0 && guard == 0 && tt_same_bits(o.mean, ref.mean, c) &&
                      tt_same_bits(o.invstd, ref.invstd, c) &&
                      tt_same_bits(o.rmean, ref.rmean, c) && tt_same_bits(o.rvar, ref.rvar, c),
                  "batchnorm+relu forward, blocked %s in bf16, %d thread(s): float32 NCHW's bits, "
                  "y rounded to bf16 (%zu of %zu y wrong, %d guard elements written)",
                  name, th + 1, bad_y, count, guard);
            tt_ok(tt_same_bits(dx, ref.dx, count) && tt_same_bits(o.dgamma, ref.dgamma, c) &&
                      tt_same_bits(o.dbeta, ref.dbeta, c),
                  "batchnorm+relu backward, blocked %s in bf16, %d thread(s): float32 NCHW's bits "
                  "on the bf16 x and y", name, th + 1);
            bn_out_free(&o);
        }
    free(bx), free(by), free(bg), free(bdx), free(dx), free(yr), free(g), free(x), free(dy);
    bn_out_free(&ref);
    bf[0]->destroy(bf[0]);
    bf[1]->destroy(bf[1]);
}

int main(void)
{
    cases_init();
    char why[256] = "";
    const char *isa = backend_cpu_bf16_isa(why, sizeof(why));
    tt_err err;
    err_clear(&err);
    backend_t *probe = backend_cpu_create_bf16(0, 1, &err);
    if (isa == NULL) {
        /* what is missing: the CPU's bf16, or oneDNN in this build */
        tt_ok(probe == NULL && err.code == TT_ERR_USAGE &&
                  ((strstr(err.msg, "AVX512_BF16") && strstr(err.msg, "AMX")) ||
                   strstr(err.msg, "needs oneDNN")),
              "no bf16 here: backend_cpu_create_bf16 refuses with a usage error (%s)", err.msg);
        if (probe != NULL)
            probe->destroy(probe);
        tt_skip("bf16 dense and conv2d against float32, float64 and torch.autocast (%s)", why);
        tt_skip("bf16 bits independent of the thread count (%s)", why);
        return tt_done();
    }
    tt_diag("bf16 runs on %s", isa);
    tt_ok(probe != NULL && strcmp(probe->precision, "bf16") == 0,
          "backend_cpu_create_bf16 on %s: a backend of precision bf16", isa);
    backend_t *fp32 = tt_cpu_backend(1);
    tt_ok(fp32 != NULL && strcmp(fp32->precision, "fp32") == 0,
          "backend_cpu_create: precision fp32");
    int threads[3] = {1, 2, 5};
    backend_t *bf[3];
    for (int t = 0; t < 3; t++) {
        err_clear(&err);
        bf[t] = backend_cpu_create_bf16(0, threads[t], &err);
        if (bf[t] == NULL) {
            tt_ok(0, "bf16 backend with %d threads: %s", threads[t], err.msg);
            return tt_done();
        }
    }
    if (probe != NULL)
        probe->destroy(probe);
    if (fp32 == NULL)
        return tt_done();

    /* inputs: x, w in [-1, 1), b in [-0.5, 0.5), dy in [-1, 1) */
    inputs in[N_CASES];
    tt_rng rng = tt_rng_make(16);
    for (int k = 0; k < N_CASES; k++) {
        size_t nx, nw, nb, ny;
        sizes(&cases[k], &nx, &nw, &nb, &ny);
        in[k].x = malloc(nx * 4);
        in[k].w = malloc(nw * 4);
        in[k].b = malloc(nb * 4);
        in[k].dy = malloc(ny * 4);
        if (!in[k].x || !in[k].w || !in[k].b || !in[k].dy)
            return 99;
        tt_fill(&rng, in[k].x, nx, -1.0, 1.0);
        tt_fill(&rng, in[k].w, nw, -1.0, 1.0);
        tt_fill(&rng, in[k].b, nb, -0.5, 0.5);
        tt_fill(&rng, in[k].dy, ny, -1.0, 1.0);
    }

    /* where relu, both backwards (and torch's) mask dy by the bf16 forward
     * output of one thread */
    for (int k = 0; k < N_CASES; k++) {
        outputs o = {0};
        in[k].ymask = NULL;
        run_case(bf[0], &cases[k], &in[k], &o);
        in[k].ymask = o.y;
        o.y = NULL;
        outputs_free(&o);
    }

    const char *py = tt_python("torch");
    float *torch = NULL;
    if (py == NULL) {
        tt_diag("no python3 with torch: the torch.autocast checks are skipped");
    } else {
        char dir[256];
        tt_tmpdir_make(dir, sizeof(dir), "bf16");
        torch = torch_run(py, dir, in);
        tt_ok(torch != NULL, "torch.autocast ran on the same inputs (%s)", py);
        tt_tmpdir_remove(dir);
    }

    size_t off = 0;
    for (int k = 0; k < N_CASES; k++) {
        const bcase *c = &cases[k];
        size_t nx, nw, nb, ny;
        sizes(c, &nx, &nw, &nb, &ny);
        /* torch's y, dx, dw, db of this case, in our order */
        float *t4 = NULL;
        if (torch != NULL) {
            t4 = torch + off;
            off += ny + nx + nw + (c->bias ? nb : 0);
        }
        check_case(k, fp32, bf, threads, &in[k]);
        if (torch == NULL) {
            tt_skip("%s: vs torch.autocast (no python3 with torch)", c->label);
            continue;
        }
        outputs ob = {0};
        run_case(bf[0], c, &in[k], &ob);
        const float *tp[4] = {t4, t4 + ny, t4 + ny + nx, t4 + ny + nx + nw};
        for (int i = 0; i < 4; i++) {
            const float *b = out_of(&ob, i);
            if (b == NULL || (i == 3 && !c->bias))
                continue;
            double et = tt_rel_err_f(b, tp[i], count_of(c, i));
            tt_ok(et < 1e-2, "%s: %s vs torch.autocast bf16 (err %.2e)", c->label, names[i], et);
        }
        outputs_free(&ob);
    }

    test_blocked_elementwise(bf, fp32);
    check_blocked_conv(bf[0], wd(5, 16, 12, 32, 3, 2, 1), "conv 16->32 12x12 k3 s2, blocked bf16");
    check_blocked_conv(bf[1], wd(4, 32, 8, 32, 3, 1, 1), "conv 32->32 8x8 k3, blocked bf16, 2 threads");
    check_blocked_conv(bf[0], wd(6, 3, 12, 16, 3, 1, 1), "conv_small 3->16 12x12 k3, blocked bf16 y");
    be1 = fp32;
    test_blocked_bf16_pools();
    test_blocked_bf16_batchnorm();

    for (int k = 0; k < N_CASES; k++) {
        free(in[k].x);
        free(in[k].w);
        free(in[k].b);
        free(in[k].dy);
        free(in[k].ymask);
    }
    free(torch);
    fp32->destroy(fp32);
    for (int t = 0; t < 3; t++)
        bf[t]->destroy(bf[t]);
    return tt_done();
}

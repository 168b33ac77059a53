/* test_cpu_isa_kernels.c - the CPU kernels that have a variant per
 * instruction-set level (cpu_isa.h), run at every level this CPU has:
 * plain always, AVX2 and AVX-512 where cpu_isa_detected() says so (the
 * test never assumes the machine's features). At each level:
 *   conv_small's forward (bias, relu), backward-data, backward-weights and
 *   bias gradient, on LeNet's shapes and on odd ones (k = 3, channel
 *   counts that split into uneven tiles, a batch that is no multiple of
 *   16), against a float64 reference within the float32 error bound of
 *   each sum;
 *   max pooling's 2x2 rows over NCHW and its blocked rows (nChw16c, NHWC,
 *   float32 and bf16 activations; 2x2 and 3x3 / 2 / pad 1; widths around
 *   the 8 and 16 windows of a vector step) against a reference, with ties
 *   and NaNs: every maximum and index;
 *   conv_dnnl (oneDNN) on 3x3 shapes that its Winograd rule takes (32 or
 *   more channels) and one it does not, forward, backward-data and
 *   backward-weights against float64, and the rule itself;
 *   blocked batchnorm+relu forward and backward (nChw16c, NHWC; float32
 *   against float64, and float32 and bf16 activations against plain C's
 *   bits, which every level promises);
 * and every result the same bits on 1 and 2 threads. At AVX2 only (its one
 * level): conv_wino's Winograd F(4x4, 3x3) forward and backward-data
 * (the dual filters) and weight gradient of one and three NHWC images,
 * against float64, on sizes whose tiles hang over odd edges and fill
 * several blocks across images, and its rule. conv_small's AVX2
 * tiles keep every lane's order of operations of the AVX-512 tiles
 * (conv_small.c), so where the CPU has both their bits are compared too.
 * The blocked layouts and bf16 are switched on the float32 backend by its
 * flags (blocked_nhwc, blocked_bf16), as test_cpu_ops does, so every CPU
 * runs them.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/conv_wino.h"
#include "backend/cpu/cpu_isa.h"
#ifdef HAVE_DNNL
#include "backend/cpu/conv_dnnl.h"
#endif
#include "tt_blocked.h"
#include "tt_ref.h"
#include "tt_test.h"

static backend_t *be1, *be2; /* 1 and 2 threads */

/* float32's unit roundoff */
#define U32 (1.0 / 16777216.0)

/* Elements of got outside ref +- (terms + 2) * U32 * abs (abs: the sum of
 * the magnitudes of the terms of each element's sum): the bound of a
 * float32 sum of `terms` rounded operations in any order. */
static long out_of_bound(const float *got, const double *ref, const double *abs, size_t count,
                         int terms)
{
    long bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += !(fabs((double)got[i] - ref[i]) <= (terms + 2) * U32 * abs[i] + 1e-30);
    return bad;
}

/* The largest error against the bound's unit: max |got - ref| over
 * (terms + 2) * U32 * abs (out_of_bound passes below 1). */
static double worst_ratio(const float *got, const double *ref, const double *abs, size_t count,
                          int terms)
{
    double worst = 0.0;
    for (size_t i = 0; i < count; i++) {
        double r = fabs((double)got[i] - ref[i]) / ((terms + 2) * U32 * abs[i] + 1e-30);
        worst = r > worst ? r : worst;
    }
    return worst;
}

/* ---- conv_small ---- */

typedef struct {
    const char *name;
    int n, c, h, w, f, k, pad;
    bool relu, bias;
} conv_case;

typedef struct {
    float *y, *dy, *dx, *dw, *db; /* dy: as masked by the backward (relu) */
} conv_out;

static window_desc conv_desc(const conv_case *cc)
{
    window_desc d = {.n = cc->n, .c = cc->c, .h = cc->h, .w = cc->w, .f = cc->f, .k = cc->k,
                     .stride = 1, .pad = cc->pad};
    d.oh = window_out_size(d.h, d.k, 1, d.pad);
    d.ow = window_out_size(d.w, d.k, 1, d.pad);
    return d;
}

static size_t xsize(const window_desc *d)
{
    return (size_t)d->n * d->c * d->h * d->w;
}

static size_t ysize(const window_desc *d)
{
    return (size_t)d->n * d->f * d->oh * d->ow;
}

static size_t wsize(const window_desc *d)
{
    return (size_t)d->f * d->c * d->k * d->k;
}

/* One forward and backward on be (host results in o, malloc'd). */
static conv_out conv_run(backend_t *be, const conv_case *cc, const float *x, const float *w,
                         const float *b, const float *dy)
{
    window_desc d = conv_desc(cc);
    size_t nx = xsize(&d), ny = ysize(&d), nw = wsize(&d);
    size_t wsb = be->conv_workspace(be, &d);
    float *gx = tt_dev_copy(be, x, nx * 4), *gw = tt_dev_copy(be, w, nw * 4);
    float *gb = cc->bias ? tt_dev_copy(be, b, (size_t)d.f * 4) : NULL;
    float *gy = tt_dev_copy(be, NULL, ny * 4), *gdy = tt_dev_copy(be, dy, ny * 4);
    float *gdx = tt_dev_copy(be, NULL, nx * 4), *gdw = tt_dev_copy(be, NULL, nw * 4);
    float *gdb = tt_dev_copy(be, NULL, (size_t)d.f * 4);
    void *ws = tt_dev_copy(be, NULL, wsb);
    be->conv_forward(be, &d, gx, gw, gb, cc->relu, gy, ws);
    be->conv_backward(be, &d, gx, gw, gy, cc->relu, gdy, gdx, gdw, gdb, ws);
    conv_out o = {tt_host_copy(be, gy, ny * 4), tt_host_copy(be, gdy, ny * 4),
                  tt_host_copy(be, gdx, nx * 4), tt_host_copy(be, gdw, nw * 4),
                  tt_host_copy(be, gdb, (size_t)d.f * 4)};
    void *blocks[] = {gx, gw, gb, gy, gdy, gdx, gdw, gdb, ws};
    for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++)
        if (blocks[i] != NULL)
            be->free(be, blocks[i]);
    return o;
}

static void conv_out_free(conv_out *o)
{
    free(o->y), free(o->dy), free(o->dx), free(o->dw), free(o->db);
}

static bool conv_same_bits(const window_desc *d, const conv_out *a, const conv_out *b)
{
    return tt_same_bits(a->y, b->y, ysize(d)) && tt_same_bits(a->dx, b->dx, xsize(d)) &&
           tt_same_bits(a->dw, b->dw, wsize(d)) && tt_same_bits(a->db, b->db, (size_t)d->f);
}

/* x[i][c][iy][ix], zero outside the image */
static double x_at(const window_desc *d, const float *x, int i, int c, int iy, int ix)
{
    if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w)
        return 0.0;
    return x[(((size_t)i * d->c + c) * d->h + iy) * d->w + ix];
}

/* The forward's y before relu, in float64, and the magnitudes' sum. */
static void ref_forward(const window_desc *d, const float *x, const float *w, const float *b,
                        double *y, double *abs)
{
    int K = d->k;
    for (int i = 0; i < d->n; i++)
        for (int f = 0; f < d->f; f++)
            for (int oy = 0; oy < d->oh; oy++)
                for (int ox = 0; ox < d->ow; ox++) {
                    double s = b != NULL ? b[f] : 0.0, a = fabs(s);
                    for (int c = 0; c < d->c; c++)
                        for (int ky = 0; ky < K; ky++)
                            for (int kx = 0; kx < K; kx++) {
                                double t = w[(((size_t)f * d->c + c) * K + ky) * K + kx] *
                                           x_at(d, x, i, c, oy + ky - d->pad, ox + kx - d->pad);
                                s += t;
                                a += fabs(t);
                            }
                    size_t o = (((size_t)i * d->f + f) * d->oh + oy) * d->ow + ox;
                    y[o] = s;
                    abs[o] = a;
                }
}

/* dx, dw and db of the masked dy g, in float64, and the magnitudes' sums. */
static void ref_backward(const window_desc *d, const float *x, const float *w, const float *g,
                         double *dx, double *adx, double *dw, double *adw, double *db,
                         double *adb)
{
    int K = d->k;
    memset(dx, 0, xsize(d) * 8), memset(adx, 0, xsize(d) * 8);
    memset(dw, 0, wsize(d) * 8), memset(adw, 0, wsize(d) * 8);
    memset(db, 0, (size_t)d->f * 8), memset(adb, 0, (size_t)d->f * 8);
    for (int i = 0; i < d->n; i++)
        for (int f = 0; f < d->f; f++)
            for (int oy = 0; oy < d->oh; oy++)
                for (int ox = 0; ox < d->ow; ox++) {
                    double gv = g[(((size_t)i * d->f + f) * d->oh + oy) * d->ow + ox];
                    db[f] += gv;
                    adb[f] += fabs(gv);
                    for (int c = 0; c < d->c; c++)
                        for (int ky = 0; ky < K; ky++)
                            for (int kx = 0; kx < K; kx++) {
                                int iy = oy + ky - d->pad, ix = ox + kx - d->pad;
                                if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w)
                                    continue;
                                size_t wi = (((size_t)f * d->c + c) * K + ky) * K + kx;
                                size_t xi = (((size_t)i * d->c + c) * d->h + iy) * d->w + ix;
                                dw[wi] += gv * x[xi];
                                adw[wi] += fabs(gv * x[xi]);
                                dx[xi] += gv * w[wi];
                                adx[xi] += fabs(gv * w[wi]);
                            }
                }
}

/* The level's results against the float64 reference: y (relu applied to
 * the reference), the mask of dy (where the kernel's own y is positive),
 * dx, dw and db within each sum's bound. */
static void conv_check(const char *what, const conv_case *cc, const char *level, const float *x,
                       const float *w, const float *b, const float *dy, bool report,
                       const conv_out *o)
{
    window_desc d = conv_desc(cc);
    size_t nx = xsize(&d), ny = ysize(&d), nw = wsize(&d);
    double *y = malloc(ny * 8), *ay = malloc(ny * 8), *dx = malloc(nx * 8),
           *adx = malloc(nx * 8), *dw = malloc(nw * 8), *adw = malloc(nw * 8),
           *db = malloc((size_t)d.f * 8), *adb = malloc((size_t)d.f * 8);
    float *g = malloc(ny * 4);
    ref_forward(&d, x, w, cc->bias ? b : NULL, y, ay);
    long bad_mask = 0;
    for (size_t i = 0; i < ny; i++) {
        if (cc->relu)
            y[i] = y[i] > 0.0 ? y[i] : 0.0;
        g[i] = !cc->relu || o->y[i] > 0.0f ? dy[i] : 0.0f;
        bad_mask += !tt_same_bits(&g[i], &o->dy[i], 1);
    }
    int taps = d.c * d.k * d.k;
    tt_ok(out_of_bound(o->y, y, ay, ny, taps + 1) == 0,
          "%s %s at %s: forward y = float64's within the bound (%ld of %zu out)", what, cc->name,
          level, out_of_bound(o->y, y, ay, ny, taps + 1), ny);
    ref_backward(&d, x, w, g, dx, adx, dw, adw, db, adb);
    int pixels = d.n * d.oh * d.ow;
    tt_ok(bad_mask == 0 && out_of_bound(o->dx, dx, adx, nx, d.f * d.k * d.k) == 0,
          "%s %s at %s: dy masked by relu (%ld wrong), dx = float64's within the bound", what,
          cc->name, level, bad_mask);
    if (report)
        tt_diag("%s %s at %s: the largest error is %.3f (y), %.3f (dx), %.3f (dw) of the direct "
                "bound", what, cc->name, level, worst_ratio(o->y, y, ay, ny, taps + 1),
                worst_ratio(o->dx, dx, adx, nx, d.f * d.k * d.k),
                worst_ratio(o->dw, dw, adw, nw, pixels));
    tt_ok(out_of_bound(o->dw, dw, adw, nw, pixels) == 0 &&
              out_of_bound(o->db, db, adb, (size_t)d.f, pixels) == 0,
          "%s %s at %s: dw and db = float64's within the bound (dw %ld of %zu out)", what,
          cc->name, level, out_of_bound(o->dw, dw, adw, nw, pixels), nw);
    free(y), free(ay), free(dx), free(adx), free(dw), free(adw), free(db), free(adb), free(g);
}

/* One case at every level this CPU has: inputs drawn from rng, each
 * level's results against float64 (conv_check, its error printed where
 * report) and the same bits on 1 and 2 threads. at[level] keeps the 1-thread
 * results for the caller, who frees them. */
static void conv_levels(const char *what, const conv_case *cc, tt_rng *rng, bool report,
                        conv_out at[3])
{
    window_desc d = conv_desc(cc);
    float *x = malloc(xsize(&d) * 4), *w = malloc(wsize(&d) * 4), *b = malloc((size_t)d.f * 4),
          *dy = malloc(ysize(&d) * 4);
    tt_fill(rng, x, xsize(&d), -1.0, 1.0);
    tt_fill(rng, w, wsize(&d), -0.5, 0.5);
    tt_fill(rng, b, (size_t)d.f, -0.2, 0.2);
    tt_fill(rng, dy, ysize(&d), -1.0, 1.0);
    for (int l = CPU_ISA_PLAIN; l <= (int)cpu_isa_detected(); l++) {
        const char *level = cpu_isa_name((cpu_isa_t)l);
        cpu_isa_set_for_test((cpu_isa_t)l);
        at[l] = conv_run(be1, cc, x, w, b, dy);
        conv_check(what, cc, level, x, w, b, dy, report, &at[l]);
        conv_out two = conv_run(be2, cc, x, w, b, dy);
        tt_ok(conv_same_bits(&d, &at[l], &two), "%s %s at %s: the same bits on 1 and 2 threads",
              what, cc->name, level);
        conv_out_free(&two);
    }
    cpu_isa_set_for_test(cpu_isa_detected());
    free(x), free(w), free(b), free(dy);
}

static void test_conv_small(void)
{
    const conv_case cases[] = {
        {"LeNet conv0 (1->6, 5x5, pad 2)", 37, 1, 28, 28, 6, 5, 2, true, true},
        {"LeNet conv1 (6->16, 5x5)", 33, 6, 14, 14, 16, 5, 0, true, true},
        {"3->7, 3x3, pad 1, 9x11", 20, 3, 9, 11, 7, 3, 1, false, true},
        {"10->13, 3x3, pad 2, 7x7", 16, 10, 7, 7, 13, 3, 2, true, false},
        {"15->9, 5x5, pad 1, 8x13", 5, 15, 8, 13, 9, 5, 1, false, false},
    };
    tt_rng rng = tt_rng_make(0xc0de);
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const conv_case *cc = &cases[ci];
        window_desc d = conv_desc(cc);
        tt_ok(cpu_conv_small_fits(be1, &d), "%s: a conv_small shape", cc->name);
        conv_out at[3] = {{0}};
        conv_levels("conv_small", cc, &rng, false, at);
        if (cpu_isa_detected() == CPU_ISA_AVX512)
            tt_ok(conv_same_bits(&d, &at[CPU_ISA_AVX2], &at[CPU_ISA_AVX512]),
                  "conv_small %s: AVX2's bits are AVX-512's", cc->name);
        for (int l = CPU_ISA_PLAIN; l <= (int)cpu_isa_detected(); l++)
            conv_out_free(&at[l]);
    }
}

#ifdef HAVE_DNNL
/* ---- conv_dnnl's Winograd (AVX-512) ---- */

/* The rule (conv_dnnl.c): at least 32 channels in and out, 3x3, stride 1,
 * padding 1, float32, no bias or relu, oneDNN at AVX-512; nothing else. */
static void test_winograd_rule(void)
{
    window_desc d = {.n = 32, .c = 32, .h = 16, .w = 16, .f = 64, .k = 3, .stride = 1,
                     .pad = 1, .oh = 16, .ow = 16};
    tt_ok(cpu_conv_dnnl_winograd(&d, false, false, false, true),
          "Winograd: 32 -> 64 channels, 3x3, stride 1, padding 1, float32, AVX-512");
    tt_ok(!cpu_conv_dnnl_winograd(&d, false, false, false, false) &&
              !cpu_conv_dnnl_winograd(&d, true, false, false, true) &&
              !cpu_conv_dnnl_winograd(&d, false, true, false, true) &&
              !cpu_conv_dnnl_winograd(&d, false, false, true, true),
          "Winograd: not below AVX-512, nor with relu, a bias or bf16");
    window_desc o[4] = {d, d, d, d};
    o[0].c = 16;
    o[1].f = 16;
    o[2].stride = 2, o[2].oh = o[2].ow = 8;
    o[3].k = 5, o[3].pad = 2;
    bool none = true;
    for (int i = 0; i < 4; i++)
        none = none && !cpu_conv_dnnl_winograd(&o[i], false, false, false, true);
    tt_ok(none, "Winograd: not with 16 channels in or out, stride 2, or 5x5");
}

/* Shapes the rule takes (Winograd where oneDNN runs at AVX-512, its direct
 * kernels below) and one it does not (a bias), through the backend's conv
 * as a model calls it, NCHW, against float64 within a direct sum's bound,
 * and the same bits on 1 and 2 threads. (oneDNN's level is set once a
 * process, so every level of our kernels here sees the same oneDNN one.)
 * F(4x4, 3x3)'s transforms (entries up to 5 in B^T and 8 in A^T, down to
 * 1/24 in G) take a sum's error to a few times a direct kernel's, still far
 * inside that bound: measured at most 0.029 of it for y (direct 0.011),
 * 0.006 for dx, 0.033 for dw (the diagnostic lines print it each run, so
 * a CPU where Winograd runs shows its y errors about 3x those where it
 * does not). A wrong tile, layout or transform is off by the values. */
static void test_conv_dnnl(void)
{
    const conv_case cases[] = {
        {"32->32, 3x3, pad 1, 6x7", 5, 32, 6, 7, 32, 3, 1, false, false},
        {"64->32, 3x3, pad 1, 5x4", 3, 64, 5, 4, 32, 3, 1, false, false},
        {"32->48, 3x3, pad 1, 9x9", 2, 32, 9, 9, 48, 3, 1, false, false},
        {"32->32, 3x3, pad 1, bias (direct)", 3, 32, 4, 4, 32, 3, 1, false, true},
    };
    tt_rng rng = tt_rng_make(0xd22);
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        conv_out at[3] = {{0}};
        conv_levels("conv_dnnl", &cases[ci], &rng, true, at);
        for (int l = CPU_ISA_PLAIN; l <= (int)cpu_isa_detected(); l++)
            conv_out_free(&at[l]);
    }
}
#endif

/* ---- max pooling: the 2x2 rows over NCHW and the blocked rows ---- */

/* Where element (i, ch, p) of an [n, c, hw] batch sits: NCHW, or the
 * blocked layout (backend.h) in nChw16c or NHWC order, any c. */
static size_t at_of(int layout, int i, int ch, int p, int c, int hw)
{
    int cb = (c + 15) / 16;
    if (layout == 0)
        return ((size_t)i * c + ch) * hw + p;
    if (layout == 2)
        return (((size_t)i * hw + p) * cb + ch / 16) * 16 + ch % 16;
    return (((size_t)i * cb + ch / 16) * hw + p) * 16 + ch % 16;
}

/* Max pooling in float64's words: the window's first maximum, a NaN
 * (the first) wins; padding never. Plane index of it in *arg. */
static float ref_max(const window_desc *d, const float *plane, int oy, int ox, int32_t *arg)
{
    int best = -1;
    for (int ky = 0; ky < d->k; ky++)
        for (int kx = 0; kx < d->k; kx++) {
            int iy, ix;
            if (!tt_window_tap(d, oy, ox, ky, kx, &iy, &ix))
                continue;
            int i = iy * d->w + ix;
            if (best < 0 || (!isnan(plane[best]) && (isnan(plane[i]) || plane[i] > plane[best])))
                best = i;
        }
    *arg = best;
    return plane[best];
}

typedef struct {
    float *y;
    int32_t *mask;
} pool_out;

/* x (NCHW) through be's max pool with x in layout lx (0 NCHW, 1 nChw16c,
 * 2 NHWC) and y in ly (0 or lx), blocked activations in bf16 where bf16
 * (the backend's blocked_bf16; x's values must be bf16's): y and mask
 * back in NCHW floats. */
static pool_out pool_run(backend_t *be, window_desc d, int lx, int ly, bool bf16, const float *x)
{
    int cb = (d.c + 15) / 16, hw = d.h * d.w, ohw = d.oh * d.ow;
    size_t nx = (size_t)d.n * cb * 16 * hw, ny = (size_t)d.n * cb * 16 * ohw;
    d.blocked_x = lx != 0;
    d.blocked_y = ly != 0;
    float *bx = calloc(nx, 4);
    uint16_t *hx = (uint16_t *)bx; /* the same tensor in bf16 */
    for (int i = 0; i < d.n; i++)
        for (int ch = 0; ch < d.c; ch++)
            for (int p = 0; p < hw; p++) {
                float v = x[at_of(0, i, ch, p, d.c, hw)];
                if (bf16)
                    hx[at_of(lx, i, ch, p, d.c, hw)] = tt_bf16_round(v);
                else
                    bx[at_of(lx, i, ch, p, d.c, hw)] = v;
            }
    bool saved = be->blocked_nhwc, saved_bf16 = be->blocked_bf16;
    be->blocked_nhwc = lx == 2;
    be->blocked_bf16 = bf16;
    float *gx = tt_dev_copy(be, bx, nx * 4), *gy = tt_dev_copy(be, NULL, ny * 4);
    int32_t *gm = tt_dev_copy(be, NULL, ny * 4);
    be->maxpool_forward(be, &d, gx, gy, gm);
    be->blocked_nhwc = saved;
    be->blocked_bf16 = saved_bf16;
    float *y = tt_host_copy(be, gy, ny * 4);
    int32_t *m = tt_host_copy(be, gm, ny * 4);
    pool_out o = {malloc((size_t)d.n * d.c * ohw * 4), malloc((size_t)d.n * d.c * ohw * 4)};
    for (int i = 0; i < d.n; i++)
        for (int ch = 0; ch < d.c; ch++)
            for (int p = 0; p < ohw; p++) {
                size_t at = at_of(ly, i, ch, p, d.c, ohw);
                o.y[at_of(0, i, ch, p, d.c, ohw)] =
                    bf16 && ly != 0 ? tt_bf16_widen(((const uint16_t *)y)[at]) : y[at];
                o.mask[at_of(0, i, ch, p, d.c, ohw)] = m[at];
            }
    free(bx), free(y), free(m);
    be->free(be, gx), be->free(be, gy), be->free(be, gm);
    return o;
}

static void test_maxpool(void)
{
    /* widths around the AVX2 rows' 8 and AVX-512's 16 windows a step;
     * values from {0, 1, 2} for ties, NaNs here and there */
    const int widths[] = {2, 6, 10, 14, 16, 17, 28, 34, 40};
    /* 2x2 over NCHW (the fast rows); over the blocked layout: 2x2 and
     * 3x3 / 2 / pad 1, 20 channels (a second, partial block) */
    const struct {
        int k, stride, pad, lx, ly;
        bool bf16;
    } kinds[] = {{2, 2, 0, 0, 0, false}, {2, 2, 0, 1, 1, false}, {3, 2, 1, 1, 0, false},
                 {3, 2, 1, 2, 2, false}, {2, 2, 0, 2, 0, false}, {2, 2, 0, 1, 1, true},
                 {3, 2, 1, 2, 0, true}};
    tt_rng rng = tt_rng_make(0x9001);
    for (size_t ki = 0; ki < sizeof(kinds) / sizeof(kinds[0]); ki++)
        for (int l = CPU_ISA_PLAIN; l <= (int)cpu_isa_detected(); l++) {
            cpu_isa_set_for_test((cpu_isa_t)l);
            long bad_y = 0, bad_m = 0, checked = 0, nans = 0, bad_bits = 0;
            for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]); wi++) {
                window_desc d = {.n = 3, .c = kinds[ki].lx ? 20 : 3, .h = 7, .w = widths[wi],
                                 .k = kinds[ki].k, .stride = kinds[ki].stride,
                                 .pad = kinds[ki].pad};
                d.f = d.c;
                d.oh = window_out_size(d.h, d.k, d.stride, d.pad);
                d.ow = window_out_size(d.w, d.k, d.stride, d.pad);
                size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.oh * d.ow;
                float *x = malloc(nx * 4);
                for (size_t i = 0; i < nx; i++)
                    x[i] = tt_below(&rng, 50) == 0 ? NAN : (float)tt_below(&rng, 3);
                pool_out o = pool_run(be1, d, kinds[ki].lx, kinds[ki].ly, kinds[ki].bf16, x);
                pool_out o2 = pool_run(be2, d, kinds[ki].lx, kinds[ki].ly, kinds[ki].bf16, x);
                bad_bits += !tt_same_bits(o.y, o2.y, ny) || memcmp(o.mask, o2.mask, ny * 4) != 0;
                for (int pl = 0; pl < d.n * d.c; pl++)
                    for (int q = 0; q < d.oh * d.ow; q++) {
                        int32_t arg;
                        float want = ref_max(&d, x + (size_t)pl * d.h * d.w, q / d.ow, q % d.ow,
                                             &arg);
                        size_t at = (size_t)pl * d.oh * d.ow + q;
                        nans += isnan(want);
                        bad_y += !(o.y[at] == want || (isnan(o.y[at]) && isnan(want)));
                        bad_m += o.mask[at] != arg;
                        checked++;
                    }
                free(x), free(o.y), free(o.mask), free(o2.y), free(o2.mask);
            }
            tt_ok(bad_y == 0 && bad_m == 0 && nans > 0,
                  "maxpool %dx%d/%d pad %d, x %s%s, y %s, at %s: %ld of %ld maxima, %ld indices "
                  "wrong (%ld NaN windows)",
                  kinds[ki].k, kinds[ki].k, kinds[ki].stride, kinds[ki].pad,
                  kinds[ki].lx == 0 ? "NCHW" : kinds[ki].lx == 1 ? "nChw16c" : "NHWC",
                  kinds[ki].bf16 ? " bf16" : "",
                  kinds[ki].ly == 0 ? "NCHW" : "blocked", cpu_isa_name((cpu_isa_t)l), bad_y,
                  checked, bad_m, nans);
            tt_ok(bad_bits == 0, "maxpool kind %zu at %s: the same bits on 1 and 2 threads", ki,
                  cpu_isa_name((cpu_isa_t)l));
        }
    cpu_isa_set_for_test(cpu_isa_detected());
}

/* ---- batchnorm over the blocked layout ---- */

static bool bn_same_bits(const bn_out *a, const bn_out *b, size_t count, int c)
{
    return tt_same_bits(a->y, b->y, count) && tt_same_bits(a->mean, b->mean, c) &&
           tt_same_bits(a->invstd, b->invstd, c) && tt_same_bits(a->rmean, b->rmean, c) &&
           tt_same_bits(a->rvar, b->rvar, c) && tt_same_bits(a->dx, b->dx, count) &&
           tt_same_bits(a->dgamma, b->dgamma, c) && tt_same_bits(a->dbeta, b->dbeta, c);
}

/* Norm-wise errors of y, dx, dgamma and dbeta against float64 (the
 * training forward with relu, then the backward through the relu mask of
 * the kernel's own y), the largest of them. */
static double bn_err(int n, int c, int hw, const float *x, const float *gamma, const float *beta,
                     const float *dy, const bn_out *o)
{
    size_t count = (size_t)n * c * hw;
    double *y = malloc(count * 8), *dx = malloc(count * 8), *dg = malloc(c * 8),
           *db = malloc(c * 8), m = (double)n * hw;
    for (int ch = 0; ch < c; ch++) {
        double s = 0, v = 0, sg = 0, sgx = 0;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++)
                s += x[((size_t)i * c + ch) * hw + p];
        double mean = s / m;
        for (int i = 0; i < n; i++)
            for (int p = 0; p < hw; p++) {
                double d = x[((size_t)i * c + ch) * hw + p] - mean;
                v += d * d;
            }
        double inv = 1.0 / sqrt(v / m + 1e-5);
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < n; i++)
                for (int p = 0; p < hw; p++) {
                    size_t at = ((size_t)i * c + ch) * hw + p;
                    double xh = (x[at] - mean) * inv, g = o->y[at] > 0.0f ? dy[at] : 0.0;
                    if (pass == 0) {
                        double t = xh * gamma[ch] + beta[ch];
                        y[at] = t > 0 ? t : 0;
                        sg += g;
                        sgx += g * xh;
                    } else {
                        dx[at] = gamma[ch] * inv / m * (m * g - sg - xh * sgx);
                    }
                }
        dg[ch] = sgx;
        db[ch] = sg;
    }
    double e[4] = {tt_rel_err(o->y, y, count), tt_rel_err(o->dx, dx, count),
                   tt_rel_err(o->dgamma, dg, c), tt_rel_err(o->dbeta, db, c)};
    free(y), free(dx), free(dg), free(db);
    double worst = 0;
    for (int i = 0; i < 4; i++)
        worst = e[i] > worst || isnan(e[i]) ? e[i] : worst;
    return worst;
}

static void test_batchnorm_blocked(void)
{
    /* 3 blocks and 37 pixels (a tail past the 16-pixel lanes); 1 block, 64 */
    const int shapes[2][3] = {{5, 48, 37}, {3, 16, 64}};
    tt_rng rng = tt_rng_make(0xba7c);
    for (int si = 0; si < 2; si++) {
        int n = shapes[si][0], c = shapes[si][1], hw = shapes[si][2];
        size_t count = (size_t)n * c * hw;
        float *x = malloc(count * 4), *dy = malloc(count * 4), gamma[48], beta[48];
        bn_inputs_fill(&rng, count, c, x, dy, gamma, beta);
        for (int kind = 0; kind < 4; kind++) { /* nChw16c, NHWC; x float32, bf16 */
            bool nhwc = kind & 1, bf16 = kind >= 2;
            bn_out plain = bn_out_make(count, c);
            for (int l = CPU_ISA_PLAIN; l <= (int)cpu_isa_detected(); l++) {
                const char *level = cpu_isa_name((cpu_isa_t)l);
                cpu_isa_set_for_test((cpu_isa_t)l);
                bn_out o1 = bn_out_make(count, c), o2 = bn_out_make(count, c);
                bn_run_blocked(be1, nhwc, bf16, n, c, hw, x, gamma, beta, dy, &o1);
                bn_run_blocked(be2, nhwc, bf16, n, c, hw, x, gamma, beta, dy, &o2);
                const char *name = nhwc ? "NHWC" : "nChw16c", *type = bf16 ? "bf16" : "float32";
                if (!bf16) {
                    /* float32 rounding of sums held in doubles: a few ulps */
                    double err = bn_err(n, c, hw, x, gamma, beta, dy, &o1);
                    tt_ok(err < 1e-5, "batchnorm+relu blocked %s [%d %d %d] at %s: float64's "
                          "within 1e-5 (%.2e)", name, n, c, hw, level, err);
                }
                tt_ok(bn_same_bits(&o1, &o2, count, c),
                      "batchnorm+relu blocked %s %s [%d %d %d] at %s: the same bits on 1 and 2 "
                      "threads", name, type, n, c, hw, level);
                if (l == CPU_ISA_PLAIN) {
                    bn_out_free(&plain);
                    plain = o1;
                } else {
                    tt_ok(bn_same_bits(&o1, &plain, count, c),
                          "batchnorm+relu blocked %s %s [%d %d %d] at %s: plain C's bits", name,
                          type, n, c, hw, level);
                    bn_out_free(&o1);
                }
                bn_out_free(&o2);
            }
            bn_out_free(&plain);
        }
        free(x), free(dy);
    }
    cpu_isa_set_for_test(cpu_isa_detected());
}

/* ---- conv_wino ---- */

/* y (forward) or dx (dual) of n NHWC images in float64, and the sum of the
 * magnitudes of each element's terms. forward: x[n][h][w][c] -> [n][h][w][f];
 * dual: dy[n][h][w][f] -> dx[n][h][w][c], w transposed and flipped. */
static void wino_ref(bool dual, int n, int h, int w, int c, int f, const float *in,
                     const float *wt, double *out, double *abs)
{
    int cin = dual ? f : c, cout = dual ? c : f;
    for (int im = 0; im < n; im++)
        for (int oy = 0; oy < h; oy++)
            for (int ox = 0; ox < w; ox++)
                for (int o = 0; o < cout; o++) {
                    double s = 0.0, a = 0.0;
                    for (int i = 0; i < cin; i++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                /* forward reads x at oy - 1 + ky; the transposed
                                 * convolution dy at oy + 1 - ky */
                                int iy = dual ? oy + 1 - ky : oy - 1 + ky;
                                int ix = dual ? ox + 1 - kx : ox - 1 + kx;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                                    continue;
                                double wv = dual ? wt[((size_t)i * c + o) * 9 + ky * 3 + kx]
                                                 : wt[((size_t)o * c + i) * 9 + ky * 3 + kx];
                                double p =
                                    (double)in[(((size_t)im * h + iy) * w + ix) * cin + i] * wv;
                                s += p;
                                a += fabs(p);
                            }
                    size_t at = (((size_t)im * h + oy) * w + ox) * cout + o;
                    out[at] = s;
                    abs[at] = a;
                }
}

/* conv_wino.c's rule: AVX2 only, float32 NHWC on both sides, channels in
 * and out multiples of 16, 3x3, stride 1, padding 1, no bias or relu. */
static void test_conv_wino_rule(void)
{
    window_desc d = {.n = 32, .c = 16, .h = 32, .w = 32, .f = 32, .k = 3, .stride = 1,
                     .pad = 1, .oh = 32, .ow = 32, .blocked_x = true, .blocked_y = true};
    tt_ok(cpu_conv_wino_fits(&d, false, false, false, true, CPU_ISA_AVX2),
          "conv_wino's rule: 16 -> 32 channels, 3x3, stride 1, padding 1, NHWC, AVX2");
    tt_ok(!cpu_conv_wino_fits(&d, false, false, false, true, CPU_ISA_AVX512) &&
              !cpu_conv_wino_fits(&d, false, false, false, true, CPU_ISA_PLAIN) &&
              !cpu_conv_wino_fits(&d, true, false, false, true, CPU_ISA_AVX2) &&
              !cpu_conv_wino_fits(&d, false, true, false, true, CPU_ISA_AVX2) &&
              !cpu_conv_wino_fits(&d, false, false, true, true, CPU_ISA_AVX2) &&
              !cpu_conv_wino_fits(&d, false, false, false, false, CPU_ISA_AVX2),
          "conv_wino's rule: not at AVX-512 or plain, nor with relu, a bias, bf16 or nChw16c");
    window_desc o[6] = {d, d, d, d, d, d};
    o[0].c = 24;
    o[1].f = 8;
    o[2].stride = 2, o[2].oh = o[2].ow = 16;
    o[3].k = 5, o[3].pad = 2;
    o[4].blocked_x = false;
    o[5].pad = 0, o[5].oh = o[5].ow = 30;
    bool none = true;
    for (int i = 0; i < 6; i++)
        none = none && !cpu_conv_wino_fits(&o[i], false, false, false, true, CPU_ISA_AVX2);
    tt_ok(none, "conv_wino's rule: not for 24 or 8 channels, stride 2, 5x5, an NCHW side or "
          "no padding");
}

/* A Winograd result mixes its tile's sums: an output is A^T M A of all 16
 * outputs' products of its 4x4 tile, and a filter tap G^T dU G of all nine
 * taps' sums. So its rounding error follows the largest of those sums'
 * magnitudes, not its own: an edge output or tap with few terms carries its
 * neighbours' error. The checks below bound each result by a direct sum's
 * bound at that largest magnitude (abs replaced by the tile's or the
 * filter's maximum) times WINO_BOUND. F(4x4, 3x3)'s transforms have
 * entries up to 8 (A^T) and 5 (B^T) and fractions down to 1/24 (G): on
 * these shapes the error measured at most 1.05 of that bound (the weight
 * gradient of one 2x3 image, whose taps sum 6 terms; 0.72 for 1x1 images,
 * under 0.4 elsewhere; printed on every run). The same bits on every AVX2
 * CPU, so 8 is a margin for other data, not for chance. A wrong transform
 * entry or tile is off by the values themselves, thousands of times the
 * bound (six planted ones each failed 1 to 27 of these checks). */
#define WINO_BOUND 8

/* abs[n][h][w][ch] := the largest abs of its 4x4 output tile, per channel */
static void abs_tile_max(int n, int h, int w, int ch, double *abs)
{
    for (int im = 0; im < n; im++)
        for (int ty = 0; ty < h; ty += 4)
            for (int tx = 0; tx < w; tx += 4)
                for (int c = 0; c < ch; c++) {
                    double m = 0.0;
                    for (int pass = 0; pass < 2; pass++)
                        for (int y = ty; y < ty + 4 && y < h; y++)
                            for (int x = tx; x < tx + 4 && x < w; x++) {
                                double *a = &abs[(((size_t)im * h + y) * w + x) * ch + c];
                                if (pass == 0)
                                    m = *a > m ? *a : m;
                                else
                                    *a = m;
                            }
                }
}

/* abs[f][c][9] := the largest abs of its filter's nine taps */
static void abs_filter_max(size_t filters, double *abs)
{
    for (size_t i = 0; i < filters; i++) {
        double m = 0.0;
        for (int t = 0; t < 9; t++)
            m = abs[i * 9 + t] > m ? abs[i * 9 + t] : m;
        for (int t = 0; t < 9; t++)
            abs[i * 9 + t] = m;
    }
}

/* conv_wino's weight gradient of n images (x[n][h][w][c], dy[n][h][w][f])
 * against float64: dw[f][c][ky][kx] = the sum over images and outputs of
 * dy[oy][ox][f] x[oy - 1 + ky][ox - 1 + kx][c]. */
static void wino_dw_check(tt_rng *r, int n, int c, int f, int h, int w)
{
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * h * w * f, nw = (size_t)f * c * 9;
    float *x = malloc(nx * sizeof(float)), *dy = malloc(ny * sizeof(float));
    float *dw = malloc(nw * sizeof(float));
    float *scratch = malloc(cpu_conv_wino_scratch_floats(c, f) * sizeof(float));
    double *ref = calloc(nw, sizeof(double)), *abs = calloc(nw, sizeof(double));
    tt_fill(r, x, nx, -1.0, 1.0);
    tt_fill(r, dy, ny, -1.0, 1.0);
    for (size_t i = 0; i < nw; i++)
        dw[i] = NAN; /* every tap must be written */
    cpu_conv_wino_weight_grad(n, h, w, c, f, x, dy, scratch, dw);
    for (int i = 0; i < n; i++)
        for (int oy = 0; oy < h; oy++)
            for (int ox = 0; ox < w; ox++)
                for (int o = 0; o < f; o++)
                    for (int ch = 0; ch < c; ch++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int iy = oy - 1 + ky, ix = ox - 1 + kx;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                                    continue;
                                double p = (double)dy[(((size_t)i * h + oy) * w + ox) * f + o] *
                                           x[(((size_t)i * h + iy) * w + ix) * c + ch];
                                size_t at = ((size_t)o * c + ch) * 9 + ky * 3 + kx;
                                ref[at] += p;
                                abs[at] += fabs(p);
                            }
    int terms = n * h * w; /* a tap's sum of products */
    abs_filter_max((size_t)f * c, abs);
    long bad = out_of_bound(dw, ref, abs, nw, WINO_BOUND * (terms + 2));
    tt_ok(bad == 0, "conv_wino weight gradient %d -> %d channels, %d images of %dx%d: "
          "float64's within the bound (%ld of %zu out)", c, f, n, h, w, bad, nw);
    tt_diag("conv_wino weight gradient %d -> %d, %d x %dx%d: error at most %.3f of a direct "
            "sum's bound", c, f, n, h, w, worst_ratio(dw, ref, abs, nw, terms));
    free(x), free(dy), free(dw), free(scratch), free(ref), free(abs);
}

static void test_conv_wino(void)
{
    if (cpu_isa_detected() < CPU_ISA_AVX2) {
        tt_skip("conv_wino: this CPU has no AVX2 (%s)", cpu_isa_name(cpu_isa_detected()));
        return;
    }
    /* cin and cout multiples of 16 (the rule); sides that are and are not
     * multiples of 4 (tiles over the edge); one tile and one pixel; one
     * image, and two or three, whose tiles fill more than a block (12) and
     * share blocks across images; several blocks at 16 -> 64 channels,
     * where the forward's second M (the block before's, in dU's place)
     * fills the most of dU's room */
    const struct { int n, c, f, h, w; } cases[] = {
        {1, 16, 16, 8, 8},  {3, 16, 32, 7, 5},  {3, 32, 16, 1, 1},   {1, 16, 16, 2, 3},
        {3, 64, 16, 9, 4},  {2, 16, 64, 9, 10}, {3, 16, 32, 13, 11}, {1, 32, 32, 16, 16},
        {3, 64, 64, 8, 8},
    };
    tt_rng r = tt_rng_make(0x3170);
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        int n = cases[ci].n, c = cases[ci].c, f = cases[ci].f, h = cases[ci].h, w = cases[ci].w;
        float *wt = malloc((size_t)f * c * 9 * sizeof(float));
        tt_fill(&r, wt, (size_t)f * c * 9, -1.0, 1.0);
        for (int dual = 0; dual < 2; dual++) {
            int cin = dual ? f : c, cout = dual ? c : f;
            size_t nin = (size_t)n * h * w * cin, nout = (size_t)n * h * w * cout;
            /* out 64-byte aligned (conv_wino streams its stores) in even
             * cases, 4 bytes off (plain stores) in odd ones */
            float *in = malloc(nin * sizeof(float));
            float *out_buf = aligned_alloc(64, (nout + 16) / 16 * 64); /* a multiple of 64 */
            float *out = out_buf + ci % 2;
            float *u = malloc(cpu_conv_wino_weight_floats(cin, cout) * sizeof(float));
            float *scratch = malloc(cpu_conv_wino_scratch_floats(cin, cout) * sizeof(float));
            double *ref = malloc(nout * sizeof(double)), *abs = malloc(nout * sizeof(double));
            tt_fill(&r, in, nin, -1.0, 1.0);
            for (size_t i = 0; i < nout; i++)
                out[i] = NAN; /* every output must be written */
            if (dual) { /* the transposed convolution's filters */
                float *flip = malloc((size_t)f * c * 9 * sizeof(float));
                cpu_conv_flip_weights(wt, f, c, 3, flip);
                cpu_conv_wino_weights(flip, cout, cin, u);
                free(flip);
            } else {
                cpu_conv_wino_weights(wt, cout, cin, u);
            }
            cpu_conv_wino_forward(n, h, w, cin, cout, in, u, out, scratch);
            wino_ref(dual, n, h, w, c, f, in, wt, ref, abs);
            abs_tile_max(n, h, w, cout, abs);
            long bad = out_of_bound(out, ref, abs, nout, WINO_BOUND * (9 * cin + 2));
            tt_ok(bad == 0, "conv_wino %s %d -> %d channels, %d images of %dx%d: float64's "
                  "within the bound (%ld of %zu out)", dual ? "backward-data" : "forward", cin,
                  cout, n, h, w, bad, nout);
            tt_diag("conv_wino %s %d -> %d, %d x %dx%d: error at most %.3f of a direct sum's "
                    "bound", dual ? "backward-data" : "forward", cin, cout, n, h, w,
                    worst_ratio(out, ref, abs, nout, 9 * cin));
            free(in);
            free(out_buf);
            free(u);
            free(scratch);
            free(ref);
            free(abs);
        }
        free(wt);
        wino_dw_check(&r, n, c, f, h, w);
    }
}

int main(void)
{
    be1 = tt_cpu_backend(1);
    be2 = tt_cpu_backend(2);
    if (be1 == NULL || be2 == NULL)
        return 1;
    tt_diag("levels run: plain to %s (this CPU's)", cpu_isa_name(cpu_isa_detected()));
    test_conv_small();
#ifdef HAVE_DNNL
    test_winograd_rule();
    test_conv_dnnl();
#endif
    test_maxpool();
    test_batchnorm_blocked();
    test_conv_wino_rule();
    test_conv_wino();
    be1->destroy(be1);
    be2->destroy(be2);
    return tt_done();
}

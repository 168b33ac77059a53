/* test_tile_gemm.c - the dense layers' matrix product (tile_gemm) against a
 * float64 reference, and its promise: each element one multiply-add chain in
 * k order, whatever the split.
 *
 * At every instruction-set level this CPU has (cpu_isa_detected(): AVX-512,
 * AVX2, plain; each run as TT_CPU_ISA would cap it), for the three forms the
 * dense layer uses (x w^T with w packed, dy w, and dy^T x) and ragged shapes
 * (M, N not multiples of the 8 x 48 or 4 x 24 tiles, N below one vector, K
 * of 1), with bias and relu:
 *  - every element within 1e-6 of sum |a b| of the float64 product;
 *  - every element bitwise equal to a chain over k written here: fmaf() at
 *    the AVX2 and AVX-512 levels (so both kernels compute the same thing),
 *    a rounded product then a rounded sum at the plain level;
 *  - splitting into 1..7 parts (any thread count), and without a packing
 *    buffer, the same bits.
 * And the 16 x 16 transpose that packs B (and conv_small's layout), at every
 * level, for ragged rows, columns and widths: the plain definition's bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/tile_gemm.h"
#include "backend/cpu/transpose.h"
#include "backend/math.h"
#include "tt_test.h"
#include "util/rng.h"

typedef struct {
    const char *form;
    int M, N, K;
    bool bias, relu;
} shape;

static const shape shapes[] = {
    {"x w^T", 128, 256, 784, true, true}, {"x w^T", 37, 10, 120, true, false},
    {"x w^T", 9, 47, 1, false, true},     {"x w^T", 1, 1, 33, true, true},
    {"dy w", 64, 784, 256, false, false}, {"dy w", 13, 85, 10, false, false},
    {"dy^T x", 256, 784, 64, false, false}, {"dy^T x", 10, 17, 128, false, false},
    {"dy^T x", 120, 400, 3, false, false}, {"dy w", 7, 29, 5, false, true},
    {"x w^T", 6, 70, 19, true, true},
};

/* A(m, k), B(k, n) of the form, from the arrays a and b. */
static void setup(const shape *s, float *a, float *b, float *c, const float *bias,
                  tile_gemm_t *g)
{
    *g = (tile_gemm_t){.M = s->M, .N = s->N, .K = s->K, .a = a, .b = b, .c = c, .ldc = s->N,
                       .bias = s->bias ? bias : NULL, .relu = s->relu};
    if (strcmp(s->form, "x w^T") == 0) { /* a: x[M][K]; b: w[N][K] */
        g->a_rs = s->K;
        g->a_cs = 1;
        g->b_rs = s->K;
        g->b_trans = true;
    } else if (strcmp(s->form, "dy w") == 0) { /* a: dy[M][K]; b: w[K][N] */
        g->a_rs = s->K;
        g->a_cs = 1;
        g->b_rs = s->N;
    } else { /* a: dy[K][M] read as its transpose; b: x[K][N] */
        g->a_rs = 1;
        g->a_cs = s->M;
        g->b_rs = s->N;
    }
}

static float at_a(const tile_gemm_t *g, int m, int k)
{
    return g->a[(size_t)m * g->a_rs + (size_t)k * g->a_cs];
}

static float at_b(const tile_gemm_t *g, int k, int n)
{
    return g->b_trans ? g->b[(size_t)n * g->b_rs + k] : g->b[(size_t)k * g->b_rs + n];
}

static void check(const shape *s)
{
    bool fused = cpu_isa() != CPU_ISA_PLAIN;
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
    float *bias = malloc((size_t)s->N * sizeof(float));
    float *c = malloc(nc * sizeof(float)), *c2 = malloc(nc * sizeof(float));
    float *pack = malloc(tile_gemm_pack_floats(s->K) * sizeof(float));
    rng_t rng = rng_make(5, (uint64_t)s->M, (uint64_t)s->N * 1000 + s->K);
    for (size_t i = 0; i < na; i++)
        a[i] = rng_uniform_range(&rng, -1.0f, 1.0f);
    for (size_t i = 0; i < nb; i++)
        b[i] = rng_uniform_range(&rng, -1.0f, 1.0f);
    for (int i = 0; i < s->N; i++)
        bias[i] = rng_uniform_range(&rng, -0.5f, 0.5f);
    tile_gemm_t g;
    setup(s, a, b, c, bias, &g);
    tile_gemm_block(&g, 0, s->M, 0, s->N, pack);

    double worst = 0;
    int chain_diff = 0;
    for (int m = 0; m < s->M; m++)
        for (int n = 0; n < s->N; n++) {
            double ref = 0, mag = 0;
            float chain = 0.0f;
            for (int k = 0; k < s->K; k++) {
                ref += (double)at_a(&g, m, k) * at_b(&g, k, n);
                mag += fabs((double)at_a(&g, m, k) * at_b(&g, k, n));
                if (fused) {
                    chain = fmaf(at_a(&g, m, k), at_b(&g, k, n), chain);
                } else {
                    float p = at_a(&g, m, k) * at_b(&g, k, n);
                    chain = chain + p;
                }
            }
            if (s->bias) {
                ref += bias[n];
                mag += fabs(bias[n]);
                chain += bias[n];
            }
            if (s->relu) {
                ref = ref > 0 ? ref : 0;
                chain = tt_relu(chain);
            }
            float got = c[(size_t)m * s->N + n];
            double e = fabs(got - ref) / (mag > 0 ? mag : 1);
            worst = e > worst ? e : worst;
            chain_diff += memcmp(&got, &chain, sizeof(float)) != 0;
        }
    const char *lv = cpu_isa_name(cpu_isa());
    tt_ok(worst < 1e-6, "%s: %s M=%d N=%d K=%d%s%s: max error %.2g of sum|ab| (float64)", lv,
          s->form, s->M, s->N, s->K, s->bias ? " +bias" : "", s->relu ? " relu" : "", worst);
    tt_ok(chain_diff == 0, "%s: %s M=%d N=%d K=%d: every element the bits of %s chain in k "
          "order (%d differ)", lv, s->form, s->M, s->N, s->K,
          fused ? "an fmaf" : "a multiply-then-add", chain_diff);

    bool same = true;
    for (int parts = 1; parts <= 7; parts++) {
        memset(c2, 0xff, nc * sizeof(float));
        g.c = c2;
        for (int p = 0; p < parts; p++)
            tile_gemm_part(&g, p, parts, pack);
        same = same && memcmp(c, c2, nc * sizeof(float)) == 0;
    }
    memset(c2, 0xff, nc * sizeof(float));
    tile_gemm_block(&g, 0, s->M, 0, s->N, NULL); /* no packing buffer */
    same = same && memcmp(c, c2, nc * sizeof(float)) == 0;
    tt_ok(same, "%s: %s M=%d N=%d K=%d: 1..7 parts and the unpacked path give the same bits",
          lv, s->form, s->M, s->N, s->K);
    free(a);
    free(b);
    free(bias);
    free(c);
    free(c2);
    free(pack);
}

/* cpu_transpose16 for every rows, cols, width up to 16 (and rows past 16,
 * as the packing passes): dst holds the definition's bits, and nothing
 * past `width` in a row or past `cols` rows is written. */
static void check_transpose(void)
{
    enum { LD = 40, LDD = 24 };
    float src[20 * LD], dst[17 * LDD], want[17 * LDD];
    for (int i = 0; i < 20 * LD; i++)
        src[i] = (float)i + 0.5f;
    int bad = 0;
    for (int rows = 1; rows <= 18; rows++)
        for (int cols = 1; cols <= 16; cols++)
            for (int width = 1; width <= 16; width++) {
                for (int i = 0; i < 17 * LDD; i++)
                    dst[i] = want[i] = -1.0f;
                for (int j = 0; j < cols; j++)
                    for (int i = 0; i < width; i++)
                        want[j * LDD + i] = i < rows ? src[i * LD + j] : 0.0f;
                cpu_transpose16(src, LD, rows, cols, dst, LDD, width);
                bad += memcmp(dst, want, sizeof(dst)) != 0;
            }
    tt_ok(bad == 0, "%s: cpu_transpose16 over rows 1..18, cols and width 1..16: the "
          "definition's bits, nothing else written (%d shapes differ)", cpu_isa_name(cpu_isa()),
          bad);
}

int main(void)
{
    /* every level this CPU runs, from what it has: never assumed */
    for (int level = CPU_ISA_PLAIN; level <= (int)cpu_isa_detected(); level++) {
        cpu_isa_set_for_test((cpu_isa_t)level);
        tt_ok(cpu_isa() == (cpu_isa_t)level, "level %s runs (CPU: %s)",
              cpu_isa_name((cpu_isa_t)level), cpu_isa_name(cpu_isa_detected()));
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
            check(&shapes[i]);
        check_transpose();
    }
    return tt_done();
}

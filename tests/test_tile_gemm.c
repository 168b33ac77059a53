/* test_tile_gemm.c - the dense layers' matrix product (tile_gemm) against a
 * float64 reference, and its promise: each element one fma chain in k
 * order, whatever the split.
 *
 * For the three forms the dense layer uses (x w^T with w packed, dy w, and
 * dy^T x) and ragged shapes (M, N not multiples of the 8 x 48 tile, N below
 * one vector, K of 1), with bias and relu:
 *  - every element within 1e-6 of sum |a b| of the float64 product;
 *  - every element bitwise equal to an fmaf() chain over k written here
 *    (so the AVX-512 kernel and the plain C one compute the same thing);
 *  - splitting into 1..7 parts, and without a packing buffer, the same bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/tile_gemm.h"
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
    {"dy^T x", 120, 400, 3, false, false},
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
                chain = fmaf(at_a(&g, m, k), at_b(&g, k, n), chain);
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
    tt_ok(worst < 1e-6, "%s M=%d N=%d K=%d%s%s: max error %.2g of sum|ab| (float64)", s->form,
          s->M, s->N, s->K, s->bias ? " +bias" : "", s->relu ? " relu" : "", worst);
    tt_ok(chain_diff == 0, "%s M=%d N=%d K=%d: every element the bits of an fmaf chain in k "
          "order (%d differ)", s->form, s->M, s->N, s->K, chain_diff);

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
    tt_ok(same, "%s M=%d N=%d K=%d: 1..7 parts and the unpacked path give the same bits",
          s->form, s->M, s->N, s->K);
    free(a);
    free(b);
    free(bias);
    free(c);
    free(c2);
    free(pack);
}

int main(void)
{
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        check(&shapes[i]);
    return tt_done();
}

/* test_bn_nhwc_plan.c - the CUDA backend's NHWC batchnorm splits its rows
 * into partial sums (bn_nhwc_plan.h) so that the partials cover every row
 * once, none is empty, they fit the kernels' scratch, and there are no more
 * than the limits say: checked on the CPU for every row count up to 5000
 * and for ResNet-20's and ResNet-50's shapes at batch 128.
 * The NHWC conv bias gradient's column sums (tt_colsum_plan and the thread
 * positions and tree its kernels run, the same __host__ __device__ code):
 * the kernels' loops run here on integers give every column's exact sum,
 * no thread reads outside its CTA's rows and channels, for LeNet's shapes
 * at batch 128, odd ones, and more channels than the scratch holds. */
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/bn_nhwc_plan.h"
#include "tt_test.h"

/* Why the split of (m, c) is wrong, or NULL. */
static const char *plan_fault(int m, int c)
{
    tt_bn_grid g = tt_bn_nhwc_plan(m, c);
    if (g.m != m || g.c != c)
        return "the shape is not the one asked";
    if (g.g < 1 || g.rows < 1)
        return "no partial";
    if ((long long)g.g * g.rows < m)
        return "rows left over";
    if ((long long)(g.g - 1) * g.rows >= m)
        return "an empty partial";
    if (g.g > TT_BN_MAX_PARTIALS || g.g > (m + TT_BN_MIN_ROWS - 1) / TT_BN_MIN_ROWS)
        return "too many partials";
    if ((size_t)TT_BN_COEFS * c + 2 * (size_t)g.g * c > TT_BN_SCRATCH_FLOATS)
        return "beyond the scratch";
    return NULL;
}

/* Why the column sum's split of (m, c) is wrong, or NULL: the
 * batchnorm's where there is one, else one partial of every row. */
static const char *colsum_plan_fault(int m, int c)
{
    tt_bn_grid g = tt_colsum_plan(m, c), b = tt_bn_nhwc_plan(m, c);
    if (g.m != m || g.c != c || g.g < 1 || g.rows < 1)
        return "no split";
    if (b.g != 0 && (g.g != b.g || g.rows != b.rows))
        return "not the batchnorm's split";
    if (b.g == 0 && (g.g != 1 || g.rows != m))
        return "not one partial of every row";
    if (g.g > 1 && (size_t)g.g * c > TT_BN_SCRATCH_FLOATS)
        return "partials beyond the scratch";
    return NULL;
}

/* Thread sums of CTA (tile, p) as k_column_partials adds them, into s:
 * element (r, ch) is r * c + ch + 1 (so that a row read twice or missed
 * changes the sum); "a read outside the CTA" where one falls outside
 * partial p's rows or the tile's channels. */
static const char *colsum_cta(tt_bn_grid g, int tile, int p, long long *s)
{
    int tx = tt_colsum_tx(g.c), lo = p * g.rows, hi = lo + g.rows < g.m ? lo + g.rows : g.m;
    for (int t = 0; t < TT_COLSUM_THREADS; t++) {
        tt_colsum_pos q = tt_colsum_pos_of(g, tile, p, t);
        s[t] = 0;
        for (int r = q.r0; r < q.r1; r += q.step) {
            if (r < lo || r >= hi || q.ch < tile * tx || q.ch >= tile * tx + tx || q.ch >= g.c)
                return "a read outside the CTA's rows and channels";
            s[t] += (long long)r * g.c + q.ch + 1;
        }
    }
    /* the tree: a step reads only sums it does not write */
    for (int n = tt_colsum_ty(g.c), h; n > 1; n = h) {
        h = tt_colsum_half(n);
        for (int t = 0; t < TT_COLSUM_THREADS; t++)
            if (tt_colsum_pos_of(g, tile, p, t).ty < n - h)
                s[t] += s[t + h * tx];
    }
    return NULL;
}

/* Why the kernels' sums of (m, c) would be wrong, or NULL: each CTA as
 * colsum_cta, its threads of ty 0 writing partial p, then the partials
 * added (in any order: integers), against sum over r of r * c + ch + 1. */
static const char *colsum_run_fault(int m, int c)
{
    tt_bn_grid g = tt_colsum_plan(m, c);
    long long *part = calloc((size_t)g.g * c, sizeof(long long)), s[TT_COLSUM_THREADS];
    const char *why = part == NULL ? "out of memory" : NULL;
    for (int tile = 0; tile < tt_colsum_tiles(c) && why == NULL; tile++)
        for (int p = 0; p < g.g && why == NULL; p++) {
            why = colsum_cta(g, tile, p, s);
            for (int t = 0; t < TT_COLSUM_THREADS && why == NULL; t++) {
                tt_colsum_pos q = tt_colsum_pos_of(g, tile, p, t);
                if (q.ty == 0 && q.ch < c)
                    part[(size_t)p * c + q.ch] += s[t];
            }
        }
    for (int ch = 0; ch < c && why == NULL; ch++) {
        long long got = 0, want = (long long)c * m * (m - 1) / 2 + (long long)m * (ch + 1);
        for (int p = 0; p < g.g; p++)
            got += part[(size_t)p * c + ch];
        if (got != want)
            why = "a column's sum is not every row's once";
    }
    free(part);
    return why;
}

static void test_colsum(void)
{
    const char *why = NULL;
    int bad_m = 0, bad_c = 0;
    int cs[] = {1, 6, 16, 300, TT_BN_MAX_CHANNELS, TT_BN_MAX_CHANNELS + 1};
    for (size_t k = 0; k < sizeof(cs) / sizeof(cs[0]) && why == NULL; k++)
        for (int m = 1; m <= 5000 && why == NULL; m++)
            if ((why = colsum_plan_fault(m, cs[k])) != NULL)
                bad_m = m, bad_c = cs[k];
    tt_ok(why == NULL, "column sums: m = 1..5000, c = 1, 6, 16, 300, %d, %d: the batchnorm's "
          "split within the scratch, else one partial%s%s", TT_BN_MAX_CHANNELS,
          TT_BN_MAX_CHANNELS + 1, why ? ": " : "", why ? why : "");
    if (why != NULL)
        tt_diag("m %d, c %d", bad_m, bad_c);
    tt_ok(tt_colsum_plan(0, 16).g == 0 && tt_colsum_plan(100, 0).g == 0 &&
              tt_colsum_plan(12800, 16).g == 50 && tt_colsum_plan(3, 400000).g == 1,
          "column sums: nothing for no rows or channels; LeNet's 12,800 rows of 16: 50 "
          "partials; 400,000 channels: one");

    int small[] = {1, 6, 16, 300};
    why = NULL;
    for (size_t k = 0; k < sizeof(small) / sizeof(small[0]) && why == NULL; k++)
        for (int m = 1; m <= (small[k] < 300 ? 700 : 90) && why == NULL; m++)
            if ((why = colsum_run_fault(m, small[k])) != NULL)
                bad_m = m, bad_c = small[k];
    tt_ok(why == NULL, "column sums, the kernels' loops on integers: m = 1..700 of c = 1, 6, "
          "16 and 1..90 of 300, every column exact%s%s", why ? ": " : "", why ? why : "");
    if (why != NULL)
        tt_diag("m %d, c %d", bad_m, bad_c);

    /* LeNet at batch 128 (conv1's NHWC [12800, 16]; [100352, 6] and
     * [100352, 16] as conv0 would be), one channel past a tile, many
     * tiles, beyond the scratch (one partial) */
    int shapes[][2] = {{12800, 16}, {100352, 6}, {100352, 16}, {73728, 6}, {1000, 255},
                       {1000, 256}, {1000, 257}, {600, 513}, {3, TT_BN_MAX_CHANNELS + 1},
                       {1, TT_BN_MAX_CHANNELS + 7}};
    why = NULL;
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]) && why == NULL; k++)
        if ((why = colsum_run_fault(shapes[k][0], shapes[k][1])) != NULL)
            bad_m = shapes[k][0], bad_c = shapes[k][1];
    tt_ok(why == NULL, "column sums, the kernels' loops on integers: LeNet's shapes at batch "
          "128, 255..257 and 513 channels, past the scratch: every column exact%s%s",
          why ? ": " : "", why ? why : "");
    if (why != NULL)
        tt_diag("m %d, c %d", bad_m, bad_c);
}

int main(void)
{
    const char *why = NULL;
    int bad_m = 0, bad_c = 0;
    int cs[] = {16, 64, 2048, TT_BN_MAX_CHANNELS};
    for (size_t k = 0; k < sizeof(cs) / sizeof(cs[0]) && why == NULL; k++)
        for (int m = 1; m <= 5000 && why == NULL; m++)
            if ((why = plan_fault(m, cs[k])) != NULL)
                bad_m = m, bad_c = cs[k];
    tt_ok(why == NULL, "m = 1..5000 rows, c = 16, 64, 2048, %d: every row in one non-empty "
          "partial, within the limits and the scratch%s%s", TT_BN_MAX_CHANNELS,
          why ? ": " : "", why ? why : "");
    if (why != NULL)
        tt_diag("m %d, c %d", bad_m, bad_c);

    /* [n * h * w, c] of ResNet-20 (batch 128, 32x32) and ResNet-50 (224x224) */
    int shapes[][2] = {{128 * 32 * 32, 16}, {128 * 16 * 16, 32}, {128 * 8 * 8, 64},
                       {128 * 112 * 112, 64}, {128 * 56 * 56, 256}, {128 * 28 * 28, 512},
                       {128 * 14 * 14, 1024}, {128 * 7 * 7, 2048}};
    why = NULL;
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]) && why == NULL; k++)
        if ((why = plan_fault(shapes[k][0], shapes[k][1])) != NULL)
            bad_m = shapes[k][0], bad_c = shapes[k][1];
    tt_ok(why == NULL, "ResNet-20 and ResNet-50 shapes at batch 128 split well%s%s",
          why ? ": " : "", why ? why : "");
    if (why != NULL)
        tt_diag("m %d, c %d", bad_m, bad_c);
    tt_bn_grid big = tt_bn_nhwc_plan(128 * 112 * 112, 64), last = tt_bn_nhwc_plan(6272, 2048);
    tt_ok(big.g == TT_BN_MAX_PARTIALS && last.g == 25 && last.rows == 251,
          "1.6 M rows of 64 channels: the most partials (%d); 6272 rows of 2048: 25 of 251 rows "
          "(%d of %d)", big.g, last.g, last.rows);

    tt_ok(tt_bn_nhwc_plan(100, TT_BN_MAX_CHANNELS + 16).g == 0 &&
              tt_bn_nhwc_plan(0, 16).g == 0 && tt_bn_nhwc_plan(100, 0).g == 0,
          "no split for more than %d channels, no rows or no channels", TT_BN_MAX_CHANNELS);
    tt_bn_grid a = tt_bn_nhwc_plan(131072, 16), b = tt_bn_nhwc_plan(131072, 16);
    tt_ok(a.g == b.g && a.rows == b.rows && a.g == 512 && a.rows == 256,
          "the split is the shape's alone: 131072 rows of 16 channels, 512 of 256 rows, twice");
    test_colsum();
    return tt_done();
}

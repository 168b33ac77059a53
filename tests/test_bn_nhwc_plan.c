/* test_bn_nhwc_plan.c - the CUDA backend's NHWC batchnorm splits its rows
 * into partial sums (bn_nhwc_plan.h) so that the partials cover every row
 * once, none is empty, they fit the kernels' scratch, and there are no more
 * than the limits say: checked on the CPU for every row count up to 5000
 * and for ResNet-20's and ResNet-50's shapes at batch 128.
 * The conv bias gradient's per-channel sums, NHWC and NCHW (tt_colsum_plan
 * and the thread positions, offsets and tree its kernels run, the same
 * __host__ __device__ code): the kernels' loops run here on integers give
 * every channel's exact sum, no thread reads outside its CTA's elements
 * and channels, for LeNet's shapes at batch 128, odd ones, and more
 * channels than the scratch holds. */
#include <stdbool.h>
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

/* Why the channel sums' split of [n, c, inner] is wrong, or NULL: the
 * batchnorm's split of the m = n * inner elements of a channel where it
 * has one, else one partial of all m. */
static const char *colsum_plan_fault(int n, int c, int inner)
{
    int m = n * inner;
    tt_colsum_grid k = tt_colsum_plan(n, c, inner);
    tt_bn_grid g = k.g, b = tt_bn_nhwc_plan(m, c);
    if (k.inner != inner || g.m != m || g.c != c || g.g < 1 || g.rows < 1)
        return "no split";
    if (b.g != 0 && (g.g != b.g || g.rows != b.rows))
        return "not the batchnorm's split";
    if (b.g == 0 && (g.g != 1 || g.rows != m))
        return "not one partial of all";
    if (g.g > 1 && (size_t)g.g * c > TT_BN_SCRATCH_FLOATS)
        return "partials beyond the scratch";
    return NULL;
}

/* Thread sums of CTA (tile, p) as k_channel_partials adds them, into s:
 * the element at offset e is e + 1 (so that one read twice or missed
 * changes a sum); "a read outside the CTA" where one falls outside
 * partial p's elements, the tile's channels or the tensor, or its offset
 * is not in its channel. */
static const char *colsum_cta(tt_colsum_grid k, int tile, int p, long long *s)
{
    tt_bn_grid g = k.g;
    int tx = tt_colsum_tx(k), lo = p * g.rows, hi = lo + g.rows < g.m ? lo + g.rows : g.m;
    size_t count = (size_t)g.m * g.c;
    for (int t = 0; t < TT_COLSUM_THREADS; t++) {
        tt_colsum_pos q = tt_colsum_pos_of(k, tile, p, t);
        s[t] = 0;
        for (int r = q.r0; r < q.r1; r += q.step) {
            size_t e = tt_colsum_at(k, r, q.ch);
            if (r < lo || r >= hi || q.ch < tile * tx || q.ch >= tile * tx + tx ||
                q.ch >= g.c || e >= count || (int)(e / (size_t)k.inner % (size_t)g.c) != q.ch)
                return "a read outside the CTA's elements and channels";
            s[t] += (long long)e + 1;
        }
    }
    /* the tree: a step reads only sums it does not write */
    for (int n = tt_colsum_ty(k), h; n > 1; n = h) {
        h = tt_colsum_half(n);
        for (int t = 0; t < TT_COLSUM_THREADS; t++)
            if (tt_colsum_pos_of(k, tile, p, t).ty < n - h)
                s[t] += s[t + h * tx];
    }
    return NULL;
}

/* Channel ch's sum of e + 1 over its elements of [n, c, inner] */
static long long colsum_want(int n, int c, int inner, int ch)
{
    long long sum = 0;
    for (long long i = 0; i < n; i++)
        for (long long px = 0; px < inner; px++)
            sum += (i * c + ch) * inner + px + 1;
    return sum;
}

/* Why the kernels' sums of [n, c, inner] would be wrong, or NULL: each CTA
 * as colsum_cta, its threads of ty 0 writing partial p, then the partials
 * added (in any order: integers), against colsum_want. */
static const char *colsum_run_fault(int n, int c, int inner)
{
    tt_colsum_grid k = tt_colsum_plan(n, c, inner);
    long long *part = calloc((size_t)k.g.g * c + 1, sizeof(long long)), s[TT_COLSUM_THREADS];
    const char *why = part == NULL || k.g.g < 1 ? "no split" : NULL;
    for (int tile = 0; tile < tt_colsum_tiles(k) && why == NULL; tile++)
        for (int p = 0; p < k.g.g && why == NULL; p++) {
            why = colsum_cta(k, tile, p, s);
            for (int t = 0; t < TT_COLSUM_THREADS && why == NULL; t++) {
                tt_colsum_pos q = tt_colsum_pos_of(k, tile, p, t);
                if (q.ty == 0 && q.ch < c)
                    part[(size_t)p * c + q.ch] += s[t];
            }
        }
    for (int ch = 0; ch < c && why == NULL; ch++) {
        long long got = 0;
        for (int p = 0; p < k.g.g; p++)
            got += part[(size_t)p * c + ch];
        if (got != colsum_want(n, c, inner, ch))
            why = "a channel's sum is not every element's once";
    }
    free(part);
    return why;
}

/* colsum_run_fault over every n up to n_max of each [c, inner, n_max] */
static const char *colsum_runs_fault(const int (*cin)[3], size_t count, int *bad)
{
    const char *why = NULL;
    for (size_t k = 0; k < count && why == NULL; k++)
        for (int n = 1; n <= cin[k][2] && why == NULL; n++)
            if ((why = colsum_run_fault(n, cin[k][0], cin[k][1])) != NULL)
                bad[0] = n, bad[1] = cin[k][0], bad[2] = cin[k][1];
    return why;
}

/* Whether the active threads of CTA (0, 0) of [n, c, inner], over half of
 * them, read first neighbouring floats: thread t + 1 the one after thread
 * t's, but for at most 1 in 10 (NCHW: where an image ends) */
static bool colsum_contiguous(int n, int c, int inner)
{
    tt_colsum_grid k = tt_colsum_plan(n, c, inner);
    int active = tt_colsum_tx(k) * tt_colsum_ty(k), apart = 0;
    for (int t = 0; t + 1 < active; t++) {
        tt_colsum_pos a = tt_colsum_pos_of(k, 0, 0, t), b = tt_colsum_pos_of(k, 0, 0, t + 1);
        if (a.r0 >= a.r1 || b.r0 >= b.r1)
            return false;
        apart += tt_colsum_at(k, b.r0, b.ch) != tt_colsum_at(k, a.r0, a.ch) + 1;
    }
    return active > TT_COLSUM_THREADS / 2 && apart * 10 <= active;
}

static void test_colsum(void)
{
    const char *why = NULL;
    int bad[3] = {0};
    int cs[] = {1, 6, 16, 300, TT_BN_MAX_CHANNELS, TT_BN_MAX_CHANNELS + 1};
    for (size_t k = 0; k < sizeof(cs) / sizeof(cs[0]) && why == NULL; k++)
        for (int m = 1; m <= 5000 && why == NULL; m++)
            if ((why = colsum_plan_fault(m, cs[k], 1)) != NULL ||
                (m <= 300 && (why = colsum_plan_fault(m, cs[k], 49)) != NULL))
                bad[0] = m, bad[1] = cs[k];
    tt_ok(why == NULL, "channel sums: n = 1..5000 of c = 1, 6, 16, 300, %d, %d (and 1..300 "
          "images of 49 pixels): the batchnorm's split within the scratch, else one partial%s%s",
          TT_BN_MAX_CHANNELS, TT_BN_MAX_CHANNELS + 1, why ? ": " : "", why ? why : "");
    if (why != NULL)
        tt_diag("n %d, c %d", bad[0], bad[1]);
    tt_ok(tt_colsum_plan(0, 16, 1).g.g == 0 && tt_colsum_plan(100, 0, 1).g.g == 0 &&
              tt_colsum_plan(100, 16, 0).g.g == 0 && tt_colsum_plan(12800, 16, 1).g.g == 50 &&
              tt_colsum_plan(128, 6, 784).g.g == 392 && tt_colsum_plan(3, 400000, 1).g.g == 1,
          "channel sums: nothing for no rows, channels or pixels; LeNet's NHWC 12,800 rows of "
          "16: 50 partials; NCHW 128 x 6 x 784: 392; 400,000 channels: one");

    tt_ok(colsum_contiguous(12800, 16, 1) && colsum_contiguous(100352, 6, 1) &&
              colsum_contiguous(128, 6, 784) && colsum_contiguous(128, 16, 100),
          "channel sums: a CTA's threads read neighbouring floats first (LeNet's NHWC 16 and "
          "6 channels, NCHW 784 and 100 pixels), over half of them active");

    /* [c, inner, n up to]: NHWC (inner 1) and NCHW, over every n */
    const int runs[][3] = {{1, 1, 700}, {6, 1, 700}, {16, 1, 700}, {3, 7, 200},
                           {2, 100, 12}, {300, 1, 90}, {300, 5, 20}};
    why = colsum_runs_fault(runs, sizeof(runs) / sizeof(runs[0]), bad);
    tt_ok(why == NULL, "channel sums, the kernels' loops on integers: n = 1..700 of NHWC c = "
          "1, 6, 16, 1..90 of 300; NCHW 1..200 of 3 x 7, 1..12 of 2 x 100, 1..20 of 300 x 5: "
          "every channel exact%s%s", why ? ": " : "", why ? why : "");
    if (why != NULL)
        tt_diag("n %d, c %d, inner %d", bad[0], bad[1], bad[2]);

    /* LeNet at batch 128: NHWC conv1 [12800, 16], and as [100352, 6] and
     * [100352, 16]; NCHW conv0 and conv1. One channel past a tile, many
     * tiles, beyond the scratch (one partial). */
    int shapes[][3] = {{12800, 16, 1}, {100352, 6, 1}, {100352, 16, 1}, {73728, 6, 1},
                       {128, 6, 784}, {128, 16, 100}, {1000, 255, 1}, {1000, 256, 1},
                       {1000, 257, 1}, {600, 513, 1}, {3, TT_BN_MAX_CHANNELS + 1, 1},
                       {1, TT_BN_MAX_CHANNELS + 7, 1}};
    why = NULL;
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]) && why == NULL; k++)
        if ((why = colsum_run_fault(shapes[k][0], shapes[k][1], shapes[k][2])) != NULL)
            bad[0] = shapes[k][0], bad[1] = shapes[k][1], bad[2] = shapes[k][2];
    tt_ok(why == NULL, "channel sums, the kernels' loops on integers: LeNet's shapes at batch "
          "128 (NHWC and NCHW), 255..257 and 513 channels, past the scratch: every channel "
          "exact%s%s", why ? ": " : "", why ? why : "");
    if (why != NULL)
        tt_diag("n %d, c %d, inner %d", bad[0], bad[1], bad[2]);
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

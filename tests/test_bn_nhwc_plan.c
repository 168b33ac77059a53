/* test_bn_nhwc_plan.c - the CUDA backend's NHWC batchnorm splits its rows
 * into partial sums (bn_nhwc_plan.h) so that the partials cover every row
 * once, none is empty, they fit the kernels' scratch, and there are no more
 * than the limits say: checked on the CPU for every row count up to 5000
 * and for ResNet-20's and ResNet-50's shapes at batch 128. */
#include <stdio.h>

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
    return tt_done();
}

/* bn_nhwc_plan.c - the NHWC batchnorm's and the conv bias gradient's
 * splits into partial sums (bn_nhwc_plan.h). */
#include "backend/cuda/bn_nhwc_plan.h"

#include <limits.h>

tt_bn_grid tt_bn_nhwc_plan(int m, int c)
{
    tt_bn_grid g = {m, c, 0, m};
    if (m <= 0 || c <= 0 || c > TT_BN_MAX_CHANNELS)
        return g;
    size_t coefs = (size_t)TT_BN_COEFS * (size_t)c;
    size_t fit = (TT_BN_SCRATCH_FLOATS - coefs) / (2 * (size_t)c);
    size_t want = ((size_t)m + TT_BN_MIN_ROWS - 1) / TT_BN_MIN_ROWS;
    if (want > fit)
        want = fit;
    if (want > TT_BN_MAX_PARTIALS)
        want = TT_BN_MAX_PARTIALS;
    g.rows = (int)(((size_t)m + want - 1) / want);
    g.g = (m + g.rows - 1) / g.rows; /* rounding rows up may leave the last empty */
    return g;
}

tt_colsum_grid tt_colsum_plan(int n, int c, int inner)
{
    tt_colsum_grid k = {{0, c, 0, 0}, inner};
    if (n <= 0 || c <= 0 || inner <= 0 || n > INT_MAX / inner)
        return k;
    int m = n * inner;
    k.g = tt_bn_nhwc_plan(m, c);
    if (k.g.g == 0) {
        k.g.g = 1;
        k.g.rows = m;
    }
    return k;
}

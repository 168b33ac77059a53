/* bn_nhwc_plan.c - the NHWC batchnorm's and conv bias gradient's splits
 * into partial sums (bn_nhwc_plan.h). */
#include "backend/cuda/bn_nhwc_plan.h"

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

tt_bn_grid tt_colsum_plan(int m, int c)
{
    tt_bn_grid g = tt_bn_nhwc_plan(m, c);
    if (g.g == 0 && m > 0 && c > 0) {
        g.g = 1;
        g.rows = m;
    }
    return g;
}

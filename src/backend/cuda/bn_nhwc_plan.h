/* bn_nhwc_plan.h - how the CUDA backend's NHWC batchnorm (cuda_bn_nhwc.h)
 * splits its rows into partial sums: plain C, GPU-independent, so that the
 * CPU tests check it (tests/test_bn_nhwc_plan.c).
 *
 * The split fixes the order of every sum of the kernels; a pure function
 * of the shape, it makes them give the same bits run after run.
 */
#ifndef TT_BN_NHWC_PLAN_H
#define TT_BN_NHWC_PLAN_H

#include <stddef.h>

/* m rows (pixels: n * hw) of c channels in g partials of `rows` rows each
 * (the last may have fewer, none is empty). */
typedef struct {
    int m, c, g, rows;
} tt_bn_grid;

/* The kernels' scratch (floats): TT_BN_COEFS per-channel coefficients a
 * channel, then 2 floats a channel and partial. 8 MiB: 2048 channels get
 * 510 partials. */
#define TT_BN_SCRATCH_FLOATS ((size_t)2 << 20)
#define TT_BN_COEFS 4
/* At most m / TT_BN_MIN_ROWS partials (rounded up; about that many rows
 * each), at most TT_BN_MAX_PARTIALS, and no more than the scratch holds. */
#define TT_BN_MIN_ROWS 256
#define TT_BN_MAX_PARTIALS 1024

/* The split of m rows of c channels; g = 0 when m or c is not positive or
 * c is too large for the scratch (more than TT_BN_MAX_CHANNELS). */
#define TT_BN_MAX_CHANNELS ((int)(TT_BN_SCRATCH_FLOATS / (TT_BN_COEFS + 2)))
tt_bn_grid tt_bn_nhwc_plan(int m, int c);

#endif

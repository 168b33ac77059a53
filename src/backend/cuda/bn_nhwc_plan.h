/* bn_nhwc_plan.h - how the CUDA backend's NHWC batchnorm and its conv bias
 * gradient (NHWC or NCHW; cuda_bn_nhwc.h) split their rows into partial
 * sums: plain C, GPU-independent, so that the CPU tests check it
 * (tests/test_bn_nhwc_plan.c). The bias gradient's thread positions and
 * offsets are __host__ __device__ (backend/math.h's TT_HD): the kernel and
 * the test run the same code.
 *
 * The split fixes the order of every sum of the kernels; a pure function
 * of the shape, it makes them give the same bits run after run.
 */
#ifndef TT_BN_NHWC_PLAN_H
#define TT_BN_NHWC_PLAN_H

#include <stddef.h>

#include "backend/math.h"

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

/* ---- the conv bias gradient: per-channel sums of a gradient dy
 * [n, c, inner] (cuda_bn_nhwc.h: tt_k_channel_sum): NHWC [rows, c] with
 * inner = 1, or NCHW [n, c, oh * ow] ---- */

/* The shape and its split: a channel's m = n * inner elements, element q
 * at tt_colsum_at; g splits those m as the batchnorm splits its rows (its
 * partials, one float a channel, fit where the batchnorm's two and its
 * coefficients do), so that LeNet's 12,800 NHWC rows of 16 channels are 50
 * CTAs, not 16 threads that each read every row; where c is beyond the
 * batchnorm's scratch, one partial of all m, summed straight into the
 * output (no scratch). g.g = 0 only where m or c is not positive. */
typedef struct {
    tt_bn_grid g;
    int inner;
} tt_colsum_grid;

tt_colsum_grid tt_colsum_plan(int n, int c, int inner);

/* Element q (of m) of channel ch: image q / inner, pixel q % inner */
static inline TT_HD size_t tt_colsum_at(tt_colsum_grid k, int q, int ch)
{
    return ((size_t)(q / k.inner) * (size_t)k.g.c + (size_t)ch) * (size_t)k.inner +
           (size_t)(q % k.inner);
}

/* A CTA of TT_COLSUM_THREADS threads covers tx channels side by side and
 * ty = 256 / tx elements of each at a time, so that neighbouring threads
 * read neighbouring floats: NHWC, tx = min(c, 256) (a row's channels);
 * NCHW, tx = 1 (a channel's pixels). Thread t has channel t % tx and
 * elements t / tx, + ty, ... of its partial. The grid: tiles of tx
 * channels across c, times the partials. */
#define TT_COLSUM_THREADS 256

static inline TT_HD int tt_colsum_tx(tt_colsum_grid k)
{
    if (k.inner > 1)
        return 1;
    return k.g.c < TT_COLSUM_THREADS ? k.g.c : TT_COLSUM_THREADS;
}

static inline TT_HD int tt_colsum_ty(tt_colsum_grid k)
{
    return TT_COLSUM_THREADS / tt_colsum_tx(k);
}

static inline TT_HD int tt_colsum_tiles(tt_colsum_grid k)
{
    return (k.g.c + tt_colsum_tx(k) - 1) / tt_colsum_tx(k);
}

/* Thread t of the CTA (tile, partial p): its channel ch, its place ty
 * among the threads of ch, and its elements r0, r0 + step, ... below r1
 * (none, r1 = r0, for a thread past tx * ty or past c). */
typedef struct {
    int ch, ty, r0, r1, step;
} tt_colsum_pos;

static inline TT_HD tt_colsum_pos tt_colsum_pos_of(tt_colsum_grid k, int tile, int p, int t)
{
    tt_bn_grid g = k.g;
    int tx = tt_colsum_tx(k), first = p * g.rows;
    tt_colsum_pos q;
    q.ty = t / tx;
    q.ch = tile * tx + t % tx;
    q.step = tt_colsum_ty(k);
    q.r0 = first + q.ty;
    q.r1 = g.m - first < g.rows ? g.m : first + g.rows;
    if (q.ty >= q.step || q.ch >= g.c)
        q.r1 = q.r0;
    return q;
}

/* Then the ty threads of a channel add up in a fixed tree: of n sums, the
 * first n - h take in sum i + h, h = tt_colsum_half(n), until one is left
 * (n need not be a power of two: LeNet's 6 channels leave 42 a channel). */
static inline TT_HD int tt_colsum_half(int n)
{
    return (n + 1) / 2;
}

#endif

/* sumsq_plan.h - how the CUDA backend's sum of squares (backend.h's sumsq
 * and sumsq_each: the optimizer's norms for clip_global_norm and LARS;
 * kernels tt_k_sumsq in cuda_kernels.cu) splits its ranges into partial
 * sums: plain C, GPU-independent, so that the CPU tests check it
 * (tests/test_sumsq_plan.c). The positions a block and a thread take are
 * __host__ __device__ (backend/math.h's TT_HD): the kernels and the test
 * run the same code.
 *
 * One launch sums every partial of a list of ranges, one block a partial,
 * into the scratch; a second merges each range's partials, one block a
 * range, into its result. A range's split is a function of its count
 * alone, and each order inside is fixed (a thread's elements in order,
 * then a fixed tree), so a range gives the same bits run after run, alone
 * (sumsq) or in a list (sumsq_each), as backend.h promises.
 */
#ifndef TT_SUMSQ_PLAN_H
#define TT_SUMSQ_PLAN_H

#include <stddef.h>

#include "backend/cuda/bn_nhwc_plan.h"
#include "backend/math.h"

/* Threads a block, in both launches */
#define TT_SUMSQ_THREADS 256
/* A partial covers at least TT_SUMSQ_MIN_CHUNK floats (16 a thread, so
 * that a block's loads outweigh its start), and a range has at most
 * TT_SUMSQ_MAX_PARTS partials (8 a thread of the merge; ResNet-50's 25.6 M
 * gradients in one range: 2048 partials of 12,500, two waves of an H200) */
#define TT_SUMSQ_MIN_CHUNK 4096
#define TT_SUMSQ_MAX_PARTS 2048
/* The partials live in the batchnorm's scratch (cuda_impl.h: bn_scratch),
 * as doubles: a list whose partials do not fit is summed in groups that do
 * (only past 512 ranges of 8 M floats). */
#define TT_SUMSQ_SCRATCH_DOUBLES (TT_BN_SCRATCH_FLOATS * sizeof(float) / sizeof(double))

/* One range of a list, as the kernels read it from device memory */
typedef struct {
    const float *x;
    size_t count; /* its floats */
    size_t chunk; /* floats a partial (the last may have fewer), 0 when count is 0 */
    int first;    /* its first partial's place in the scratch */
    int parts;    /* its partials: ceil(count / chunk), none empty; 0 when count is 0 */
} tt_sumsq_range;

/* The split of count floats at x (first 0): a function of count alone */
tt_sumsq_range tt_sumsq_plan(const float *x, size_t count);

/* The ranges of x[0, n), count[0, n) from the first into r, their
 * partials one after the other from place 0, as many as fit `room`
 * partials (at least one range: room must be at least TT_SUMSQ_MAX_PARTS);
 * returns how many ranges it took (0 when n is not positive). */
int tt_sumsq_group(int n, const float *const *x, const size_t *count, int room,
                   tt_sumsq_range *r);

/* The partials of a group of n ranges (the first launch's blocks) */
static inline TT_HD int tt_sumsq_parts(const tt_sumsq_range *r, int n)
{
    return n > 0 ? r[n - 1].first + r[n - 1].parts : 0;
}

/* The range of partial (block) b of a group of n ranges: the last whose
 * first partial is at or before b (an empty range shares its place with
 * the next, which is the one found) */
static inline TT_HD int tt_sumsq_find(const tt_sumsq_range *r, int n, int b)
{
    int lo = 0, hi = n; /* r[lo].first <= b; r[hi].first > b or hi == n */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (r[mid].first <= b)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Thread t's elements of partial j of range a: i0, i0 + TT_SUMSQ_THREADS,
 * ... below i1, in that order (i1 <= i0: none) */
typedef struct {
    size_t i0, i1;
} tt_sumsq_span;

static inline TT_HD tt_sumsq_span tt_sumsq_span_of(tt_sumsq_range a, int j, int t)
{
    tt_sumsq_span s;
    size_t lo = (size_t)j * a.chunk, hi = lo + a.chunk;
    s.i0 = lo + (size_t)t;
    s.i1 = hi < a.count ? hi : a.count;
    return s;
}

/* Then (both launches) the block's TT_SUMSQ_THREADS sums add up in a tree:
 * the first h take in sum i + h, h = 128, 64, ..., 1 */

#endif
